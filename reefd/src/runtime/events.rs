//! The engine's events applied to the runtime's state: tasks started,
//! done or failed, and what their clients are told.

use super::*;

impl Runtime {
    /// Applies engine events. `submitted` is the task whose submission
    /// produced them, stamped with the current instant if queued at once.
    pub(super) fn apply_events(&self, st: &mut State, ev: &mut Vec<EngineEvent>) {
        for e in ev.drain(..) {
            match e {
                EngineEvent::FirstKernelQueued { task, at, issued } => {
                    // The wall-clock instant the launch was issued to the
                    // (simulated) device queue, whichever thread did it.
                    let when = issued;
                    if let Some(t) = st.tasks.get_mut(&task) {
                        if t.first_queued.is_none() {
                            t.first_queued = Some(when);
                            let us = when.saturating_duration_since(t.arrival).as_secs_f64() * 1e6;
                            tracing::trace!(
                                task,
                                control_path_us = us,
                                device_time_us = self
                                    .at(at)
                                    .saturating_duration_since(t.arrival)
                                    .as_secs_f64()
                                    * 1e6,
                                "first kernel queued"
                            );
                            if t.priority == Priority::Rt {
                                st.metrics.control_path.observe_us(us);
                            }
                        }
                    }
                }
                EngineEvent::KernelsLaunched { count } => st.metrics.kernels_launched += count,
                EngineEvent::Preempted { level, kernels } => {
                    *st.metrics.preemptions.entry(level).or_default() += 1;
                    st.metrics.preempted_kernels += kernels;
                }
                EngineEvent::Restored { task } => {
                    st.metrics.restores += 1;
                    if let Some(t) = st.tasks.get_mut(&task) {
                        t.preemptions += 1;
                    }
                }
                EngineEvent::TaskDone { task, at, verified } => {
                    let Some(t) = st.tasks.remove(&task) else {
                        continue;
                    };
                    let done = self.at(at).max(t.arrival);
                    let latency_us = done.duration_since(t.arrival).as_secs_f64() * 1e6;
                    let standalone = st.models.get(&t.model).and_then(|m| m.standalone_ns);
                    let normalized = standalone.map(|s| latency_us * 1e3 / s as f64);
                    if t.priority.is_rt() {
                        st.metrics.rt_latency.observe_us(latency_us);
                        if let Some(n) = normalized {
                            st.metrics.observe_rt_normalized(n);
                        }
                    } else {
                        st.metrics.be_latency.observe_us(latency_us);
                    }
                    st.metrics.tasks_completed += 1;
                    if verified == Some(false) {
                        st.metrics.corrupted_outputs += 1;
                    }
                    if let Some(s) = st.streams.get_mut(&t.stream) {
                        s.tasks.remove(&task);
                        s.completed += 1;
                    }
                    let result = TaskResult {
                        task,
                        stream: t.stream,
                        model: t.model.clone(),
                        latency_us,
                        normalized_latency: normalized,
                        control_path_us: t
                            .first_queued
                            .map(|q| q.saturating_duration_since(t.arrival).as_secs_f64() * 1e6),
                        first_kernel_monotonic_ns: t.first_queued.map(|q| {
                            self.epoch_monotonic_ns
                                + q.saturating_duration_since(self.epoch).as_nanos() as u64
                        }),
                        timeline: Some(Box::new(crate::protocol::Timeline {
                            done_ns: self.epoch_monotonic_ns
                                + done.saturating_duration_since(self.epoch).as_nanos() as u64,
                            seen_ns: crate::protocol::monotonic_ns(),
                            written_ns: 0,
                        })),
                        preemptions: t.preemptions,
                        outputs_verified: verified,
                        outputs: Vec::new(),
                        outputs_missing: None,
                        data: Vec::new(),
                        hold: crate::protocol::DataHold(
                            t.hold
                                .clone()
                                .map(|h| h as Arc<dyn std::any::Any + Send + Sync>),
                        ),
                    };
                    let mut result = result;
                    let mut later = Vec::new();
                    if let Some((data, io)) = &t.data {
                        let got = st.engine.take_outputs(task).unwrap_or_else(|| {
                            Err("the device returned no outputs for this request".into())
                        });
                        later = tensors::answer_outputs(io, data, got, &mut result);
                    }
                    let answering = if later.is_empty() {
                        None
                    } else {
                        st.streams.get(&t.stream).map(|s| {
                            s.answering
                                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            s.answering.clone()
                        })
                    };
                    st.deliveries.push(Delivery {
                        task,
                        waiter: t.waiter,
                        result: Ok(result),
                        later,
                        answering,
                        rt: t.priority == Priority::Rt,
                    });
                }
                EngineEvent::DeviceError { action, error } => {
                    st.metrics.device_errors += 1;
                    tracing::error!(action = %action, "device error: {error}");
                }
                // Rejected: the policy does not serve it; failed: the
                // device refused one of its kernels.
                EngineEvent::TaskRejected { task, reason } => {
                    fail_task(st, task, Failure::new(ErrorCode::Unsupported, reason))
                }
                EngineEvent::TaskFailed { task, reason } => {
                    fail_task(st, task, Failure::new(ErrorCode::Internal, reason))
                }
            }
        }
    }
}
