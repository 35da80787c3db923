//! Streams and requests: registering streams, inferences and how they
//! reach the engine, preemption by command, declared GPU tasks (CASE/MGB's
//! `task_begin`) and the policy switch.

use super::*;

pub(super) fn stream_info(st: &State, id: u64) -> StreamInfo {
    let s = &st.streams[&id];
    let (host, device) = st.engine.queue_depths(id);
    StreamInfo {
        stream: id,
        priority: s.priority,
        owner_uid: s.owner.uid,
        owner_pid: s.owner.pid,
        label: s.label.clone(),
        tasks_in_flight: s.tasks.len(),
        host_queue: host,
        device_queue: device,
        completed: s.completed,
    }
}

pub(super) fn not_owner(what: &str, stream: u64, owner: u32) -> Failure {
    Failure::new(
        ErrorCode::PermissionDenied,
        format!("stream {stream} belongs to uid {owner}; only its owner or root may {what} it"),
    )
}

impl Runtime {
    /// Opens a stream at `priority` for the connection.
    pub(super) fn register(
        &self,
        st: &mut State,
        conn: &Conn,
        priority: Priority,
        label: Option<String>,
    ) -> Handled {
        let peer = conn.peer;
        use Handled::{Error as Err_, Reply as Ok_};
        if st.shutting_down {
            return Err_(shutting_down());
        }
        if !peer.is_root() {
            let held = st.uid_streams.get(&peer.uid).map_or(0, |s| s.len());
            if held >= self.settings.max_streams_per_uid {
                return Err_(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "uid {} already holds {held} streams (daemon.max_streams_per_uid); \
                         unregister one or reuse it",
                        peer.uid
                    ),
                ));
            }
        }
        let id = st.next_stream;
        if let Err(e) = st.engine.open_stream(id, priority) {
            return Err_(engine_failure(e));
        }
        st.next_stream += 1;
        st.uid_streams.entry(peer.uid).or_default().insert(id);
        st.streams.insert(
            id,
            Stream {
                priority,
                owner: peer,
                conn: conn.id,
                label,
                tasks: BTreeSet::new(),
                completed: 0,
                answering: Arc::default(),
            },
        );
        if priority == Priority::Rt {
            // Closed connections leave (also without a poll loop).
            st.rt_conns.retain(|w| w.strong_count() > 0);
            let known = st
                .rt_conns
                .iter()
                .any(|w| w.as_ptr() == Arc::as_ptr(&conn.warm));
            if !known {
                st.rt_conns.push(Arc::downgrade(&conn.warm));
            }
        }
        tracing::info!(stream = id, %priority, uid = peer.uid, "stream registered");
        Ok_(Reply::Registered(stream_info(st, id)))
    }

    /// Closes a stream (its owner or root), cancelling its queued tasks.
    pub(super) fn unregister(&self, st: &mut State, peer: Peer, stream: u64) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let Some(s) = st.streams.get(&stream) else {
            return Err_(no_stream(stream));
        };
        if s.owner.uid != peer.uid && !peer.is_root() {
            return Err_(not_owner("unregister", stream, s.owner.uid));
        }
        let n = self.close_stream(st, stream, "its stream was unregistered");
        Ok_(Reply::Unregistered {
            stream,
            cancelled_tasks: n,
        })
    }

    /// Every task in flight, with its progress.
    pub(super) fn list_tasks(&self, st: &State) -> Handled {
        use Handled::Reply as Ok_;
        let mut tasks: Vec<TaskInfo> = st
            .tasks
            .iter()
            .map(|(id, t)| {
                let p = st.engine.task_progress(*id);
                TaskInfo {
                    task: *id,
                    stream: t.stream,
                    model: t.model.clone(),
                    priority: t.priority,
                    state: p.map_or(TaskState::Queued, |p| p.state),
                    age_us: t.arrival.elapsed().as_secs_f64() * 1e6,
                    next_kernel: p.map_or(0, |p| p.next_kernel),
                    kernels: p.map_or(0, |p| p.kernels),
                }
            })
            .collect();
        tasks.sort_by_key(|t| t.task);
        Ok_(Reply::Tasks { tasks })
    }

    /// Places a declared task (CASE/MGB `task_begin`).
    pub(super) fn task_begin(
        &self,
        st: &mut State,
        conn: &Conn,
        needs: reef_sched::place::TaskNeeds,
    ) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        // A GPU task's shape within what any GPU launches (CUDA: 1024
        // threads per block, 2^31-1 blocks in x; AMD: 1024 work-items per
        // work-group).
        if !(1..=1024).contains(&needs.threads_per_block)
            || !(1..=(1u64 << 31) - 1).contains(&needs.blocks)
        {
            return Err_(Failure::new(
                ErrorCode::BadRequest,
                format!(
                    "task_begin: threads_per_block must be 1-1024 and blocks 1-{} (got {} and {})",
                    (1u64 << 31) - 1,
                    needs.threads_per_block,
                    needs.blocks
                ),
            ));
        }
        let task = st.next_declared;
        match st.engine.task_begin(conn.id + 1, task, needs) {
            Ok(device) => {
                st.next_declared += 1;
                st.declared.insert(task, conn.id);
                tracing::info!(task, ?device, memory = needs.memory, "task_begin");
                Ok_(Reply::TaskPlaced { task, device })
            }
            Err(e) => Err_(engine_failure(e)),
        }
    }

    /// Switches the scheduling policy (root or the daemon's user).
    pub(super) fn set_policy(&self, st: &mut State, peer: Peer, policy: String) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        if !peer.is_root() && peer.uid != self.daemon_uid {
            return Err_(Failure::new(
                ErrorCode::PermissionDenied,
                "switching the policy affects every client: only root or the daemon's user may do it",
            ));
        }
        if !crate::config::is_policy(&policy) {
            return Err_(Failure::new(
                ErrorCode::BadRequest,
                crate::config::unknown_policy(&policy),
            ));
        }
        let now = self.now_ns();
        match st.engine.set_policy(now, &policy) {
            Ok(()) => {
                st.info = st.engine.info();
                tracing::info!(%policy, uid = peer.uid, "policy switched");
                Ok_(Reply::PolicySet { policy })
            }
            Err(e) => Err_(engine_failure(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn infer(
        &self,
        st: &mut State,
        conn: &Conn,
        stream: u64,
        model: &str,
        wait: Option<u64>,
        qos_ns: Option<u64>,
        tensors: Option<(
            Vec<crate::protocol::TensorRef>,
            Vec<crate::protocol::OutputRef>,
            Option<crate::protocol::FrameData>,
        )>,
        arrival: Instant,
    ) -> Handled {
        if st.shutting_down {
            return Handled::Error(shutting_down());
        }
        let model = canonical_model(st, model);
        let Some(s) = st.streams.get(&stream) else {
            return Handled::Error(no_stream(stream));
        };
        if s.owner.uid != conn.peer.uid && !conn.peer.is_root() {
            return Handled::Error(not_owner("submit to", stream, s.owner.uid));
        }
        if s.in_flight() >= self.settings.max_tasks_per_stream {
            return Handled::Error(Failure::new(
                ErrorCode::Busy,
                format!(
                    "stream {stream} already has {} inferences in flight (daemon.max_tasks_per_stream); wait for some to finish",
                    s.in_flight()
                ),
            ));
        }
        if !conn.peer.is_root() {
            let uid = s.owner.uid;
            let inflight: usize = st
                .uid_streams
                .get(&uid)
                .into_iter()
                .flatten()
                .filter_map(|id| st.streams.get(id))
                .map(Stream::in_flight)
                .sum();
            if inflight >= self.settings.max_tasks_per_uid {
                return Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "uid {uid} already has {inflight} inferences in flight \
                         (daemon.max_tasks_per_uid); wait for some to finish"
                    ),
                ));
            }
        }
        let priority = s.priority;
        let Some(m) = st.models.get(&model) else {
            return Handled::Error(not_loaded(st, &model));
        };
        // The request's tensors, checked against the model.
        let mut tensor_bytes = 0u64;
        let data = match tensors {
            None => None,
            Some((inputs, outputs, frame)) => {
                let io = Arc::clone(&m.io);
                let regions = &st.regions;
                let region_of = |r: u64| {
                    regions
                        .get(&r)
                        .filter(|x| x.conn == conn.id)
                        .map(|x| Arc::clone(&x.region))
                };
                let d = match super::tensors::request_data(
                    &model,
                    &io,
                    &inputs,
                    &outputs,
                    frame.as_ref(),
                    &region_of,
                ) {
                    Ok(d) => d,
                    Err(f) => return Handled::Error(f),
                };
                tensor_bytes = frame.as_ref().map_or(0, |f| f.frame.len() as u64)
                    + d.outputs
                        .iter()
                        .filter(|o| o.region.is_none())
                        .map(|o| o.bytes as u64)
                        .sum::<u64>();
                if !conn.peer.is_root() && tensor_bytes > 0 {
                    let held = self
                        .uid_bytes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&conn.peer.uid)
                        .copied()
                        .unwrap_or(0);
                    let max = self.settings.limits.max_tensor_bytes_per_uid;
                    if held + tensor_bytes > max {
                        return Handled::Error(Failure::new(
                            ErrorCode::Busy,
                            format!(
                                "uid {} has {held} bytes of inline tensors in flight and this request needs {tensor_bytes} more (daemon.max_tensor_bytes_per_uid = {max}); wait for some to finish, or pass tensors in shared memory",
                                conn.peer.uid
                            ),
                        ));
                    }
                }
                Some((Arc::new(d), io))
            }
        };
        let task = st.next_task;
        st.next_task += 1;
        let now = self.now_ns();
        let mut ev = std::mem::take(&mut st.events);
        if qos_ns.is_some() {
            st.engine.set_qos(task, qos_ns);
        }
        if let Some((d, _)) = &data {
            if let Err(e) = st.engine.set_data(task, Arc::clone(d)) {
                st.events = ev;
                return Handled::Error(engine_failure(e));
            }
        }
        // The submission first: for an RT request it issues the first kernel
        // (the control path ends there); the bookkeeping below is not on it.
        if let Err(e) = st.engine.submit(now, task, stream, &model, &mut ev) {
            st.events = ev;
            return Handled::Error(engine_failure(e));
        }
        let (waiter, handled) = if let Some(id) = wait {
            (
                Waiter::Reply(ReplyTo {
                    outbox: conn.outbox.clone(),
                    id,
                    answered: false,
                }),
                Handled::Sent,
            )
        } else {
            (
                Waiter::Event(conn.outbox.clone()),
                Handled::Reply(Reply::InferQueued { task }),
            )
        };
        st.tasks.insert(
            task,
            Task {
                data,
                hold: (tensor_bytes > 0).then(|| {
                    *self
                        .uid_bytes
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(conn.peer.uid)
                        .or_default() += tensor_bytes;
                    Arc::new(BytesHeld {
                        map: Arc::clone(&self.uid_bytes),
                        uid: conn.peer.uid,
                        bytes: tensor_bytes,
                    })
                }),
                stream,
                model,
                priority,
                arrival,
                first_queued: None,
                preemptions: 0,
                waiter,
            },
        );
        st.metrics.tasks_submitted += 1;

        if let Some(s) = st.streams.get_mut(&stream) {
            s.tasks.insert(task);
        }
        self.apply_events(st, &mut ev);
        st.events = ev;
        if priority == Priority::Rt {
            self.run_until_first_kernel(st, task);
        }
        handled
    }

    /// The RT control path: when the engine's next step for a new RT task
    /// (e.g. launching its first kernel once the preempted BE kernels are
    /// killed) is due within [`SPIN_WINDOW`], run it on this thread rather
    /// than waiting for the pacer to be woken and scheduled.
    pub(super) fn run_until_first_kernel(&self, st: &mut State, task: u64) {
        let limit = Instant::now() + SPIN_WINDOW;
        while st
            .tasks
            .get(&task)
            .is_some_and(|t| t.first_queued.is_none())
        {
            let Some(t) = st.engine.next_event_time() else {
                return;
            };
            let due = self.at(t);
            if due > limit {
                return;
            }
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            self.catch_up(st);
        }
    }

    pub(super) fn preempt(
        &self,
        st: &mut State,
        peer: Peer,
        target: PreemptTarget,
        resume: bool,
    ) -> Handled {
        let what = if resume { "resume" } else { "preempt" };
        let streams: Vec<u64> = match target {
            PreemptTarget::Stream(id) => {
                let Some(s) = st.streams.get(&id) else {
                    return Handled::Error(no_stream(id));
                };
                if s.owner.uid != peer.uid && !peer.is_root() {
                    return Handled::Error(not_owner(what, id, s.owner.uid));
                }
                vec![id]
            }
            PreemptTarget::All => st
                .streams
                .iter()
                .filter(|(_, s)| !s.priority.is_rt())
                .filter(|(_, s)| peer.is_root() || s.owner.uid == peer.uid)
                .map(|(id, _)| *id)
                .collect(),
        };
        let now = self.now_ns();
        let mut total = 0;
        let mut ev = std::mem::take(&mut st.events);
        for id in &streams {
            let r = if resume {
                st.engine.resume(now, *id, &mut ev).map(|_| 0)
            } else {
                st.engine.preempt(now, *id, &mut ev)
            };
            match r {
                Ok(n) => total += n,
                Err(e) => {
                    self.apply_events(st, &mut ev);
                    st.events = ev;
                    return Handled::Error(engine_failure(e));
                }
            }
        }
        self.apply_events(st, &mut ev);
        st.events = ev;
        if resume {
            tracing::info!(?streams, uid = peer.uid, "resumed by command");
            return Handled::Reply(Reply::Resumed { streams });
        }
        tracing::info!(
            ?streams,
            kernels = total,
            uid = peer.uid,
            "preempted by command"
        );
        Handled::Reply(Reply::Preempted {
            streams,
            preempted_kernels: total,
        })
    }
}
