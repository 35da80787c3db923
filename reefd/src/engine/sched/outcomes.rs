//! Driving the device and taking in what the actions did: reef-exec's
//! step and interpreter, their outcomes as engine events, each finished
//! request's outputs checked against an unpreempted run's (value
//! tracking on the simulator; the device's own check on a GPU), and the
//! preemptions reported once they have drained.

use super::*;

impl Prepared {
    /// The value every output buffer of a request in namespace `ns` has
    /// after one unpreempted run of the model (`mi`: its index).
    pub(super) fn expected_outputs(&mut self, ns: u32, mi: usize) -> Expected {
        if let Some(e) = self.expected.get(&(ns, mi)) {
            return e.clone();
        }
        let mut reference = ValueTracker::new();
        let mut outs = BTreeSet::new();
        reef_exec::replay_unpreempted(&mut reference, self, |x| buffer(ns, mi, x), &mut outs);
        let e: Expected = outs.into_iter().map(|b| (b, reference.get(b))).collect();
        self.expected.insert((ns, mi), e.clone());
        e
    }
}

impl<D: EngineDevice> SchedEngine<D> {
    /// Performs the scheduler's pending actions (reef-exec's interpreter)
    /// and takes in what they did.
    pub(super) fn apply_actions(&mut self, out: &mut Vec<EngineEvent>) {
        self.drive(out, |drv, view, o| drv.apply(view, o));
    }

    /// Runs the device to simulator time `t` (reef-exec's step: device
    /// events, then the clients' host issues at `t`) and takes in what the
    /// actions did.
    pub(super) fn step(&mut self, t: u64, out: &mut Vec<EngineEvent>) {
        self.drive(out, |drv, view, o| drv.step(t, view, o));
    }

    /// Calls `f` with the driver and the engine's tasks, then takes in the
    /// outcomes.
    pub(super) fn drive(
        &mut self,
        out: &mut Vec<EngineEvent>,
        f: impl FnOnce(&mut Driver<D>, &View<'_>, &mut Vec<Outcome>),
    ) {
        let mut o = std::mem::take(&mut self.outcomes);
        let Build { drv, slots, .. } = &mut self.build;
        let view = View {
            tasks: &self.tasks,
            models: &self.models,
            slots,
        };
        f(drv, &view, &mut o);
        self.absorb(&mut o, out);
        self.outcomes = o;
    }

    /// What performed actions did, as engine events. A device refusal is
    /// reported as [`EngineEvent::DeviceError`] with the action, which the
    /// runtime counts (`device_errors`) and logs (issue 18 item 6); nothing
    /// is dropped.
    pub(super) fn absorb(&mut self, o: &mut Vec<Outcome>, out: &mut Vec<EngineEvent>) {
        let now = self.build.drv.dev.now();
        for (action, error) in self.build.drv.dev.take_errors() {
            out.push(EngineEvent::DeviceError { action, error });
        }
        // BE clients whose request finished: freed once the device events
        // are taken in (freeing one can issue scheduler commands).
        let mut released = Vec::new();
        for x in o.drain(..) {
            match x {
                Outcome::Queued {
                    req,
                    kernel,
                    issued,
                } => {
                    if let Some(v) = self.build.drv.dev.values() {
                        v.note(|| format!("task {} kernel {kernel} queued", req.0));
                    }
                    self.kernel_queued(req.0, kernel as usize, now, issued, out)
                }
                Outcome::Launched(kind) => {
                    if let LaunchKind::Padded {
                        req,
                        kernel,
                        be_parts,
                    } = kind
                    {
                        tracing::debug!(task = req.0, kernel, parts = be_parts, "padded launch");
                    }
                    out.push(EngineEvent::KernelsLaunched { count: 1 })
                }
                Outcome::Failed { action, error, req } => {
                    if let Some(rec) = req.and_then(|r| self.tasks.get_mut(&r.0)) {
                        rec.failed
                            .get_or_insert_with(|| format!("{action}: {error}"));
                    }
                    out.push(EngineEvent::DeviceError { action, error })
                }
                Outcome::Restored { req, from_kernel } => {
                    if let Some(v) = self.build.drv.dev.values() {
                        v.note(|| format!("task {} restored from kernel {from_kernel}", req.0));
                    }
                    if let Some(rec) = self.tasks.get_mut(&req.0) {
                        rec.next_kernel = from_kernel as usize;
                    }
                    out.push(EngineEvent::Restored { task: req.0 });
                }
                Outcome::Done { req, .. } | Outcome::Rejected { req, .. } => {
                    let done = matches!(x, Outcome::Done { .. });
                    let task = req.0;
                    let Some(rec) = self.tasks.remove(&task) else {
                        continue;
                    };
                    // What the device did with its outputs: kept for the
                    // runtime when it finished for its client, else dropped.
                    let outputs = self.build.drv.dev.take_outputs(req);
                    if let Some(o) =
                        outputs.filter(|_| done && rec.dstream.is_some() && rec.failed.is_none())
                    {
                        self.outputs.insert(task, o);
                    }
                    let b = &mut self.build;
                    let slot = rec.slot;
                    b.slots[slot].inflight = b.slots[slot].inflight.saturating_sub(1);
                    if let Some(d) = rec.dstream.and_then(|d| self.dstreams.get_mut(&d)) {
                        if d.inflight == Some(task) {
                            d.inflight = None;
                            self.freed |= !d.queue.is_empty();
                        }
                    }
                    if let Some(id) = rec.dstream {
                        released.push((id, slot));
                    }
                    if rec.dstream.is_none() {
                        // An orphan of a closed stream: nobody waits for it;
                        // its buffer namespace is free now, and what the
                        // device kept for its check is dropped.
                        self.free_ns.push(rec.ns);
                        let _ = b.drv.dev.verified(req);
                        let _ = b.drv.dev.task_failure(req);
                        continue;
                    }
                    let ns = rec.ns;
                    let fault = b.drv.dev.task_failure(req);
                    if let Some(reason) = rec.failed.or(fault) {
                        // A kernel of it never reached the device.
                        let _ = b.drv.dev.verified(req);
                        out.push(EngineEvent::TaskFailed { task, reason });
                        continue;
                    }
                    if !done {
                        out.push(EngineEvent::TaskRejected {
                            task,
                            reason: format!(
                                "policy {} does not serve this class of request",
                                self.settings.policy
                            ),
                        });
                        continue;
                    }
                    // The simulator tracks values: the outputs' versions
                    // against one unpreempted run's; a GPU compares the
                    // output bytes itself.
                    let verified = match b.drv.dev.values() {
                        Some(values) => {
                            let mi = b.slots[slot].model;
                            let expected = self.models[mi].expected_outputs(ns, mi);
                            let ok = expected.iter().all(|&(buf, v)| values.get(buf) == v);
                            if !ok {
                                super::trace::report(values, &self.models[mi], ns, mi, task);
                            }
                            Some(ok)
                        }
                        None => b.drv.dev.verified(req),
                    };
                    out.push(EngineEvent::TaskDone {
                        task,
                        at: b.base + now,
                        verified,
                    });
                }
            }
        }
        for (id, slot) in released {
            self.release_idle_slot(id, slot, out);
        }
        // Each preemption is reported once it has finished (its evicted and
        // killed kernels are counted by then), in order; then the finished
        // records are dropped, or they would grow by one per preemption for
        // the daemon's life.
        let b = &mut self.build;
        let sched = &mut b.drv.sched;
        let base = sched.preemptions_base();
        let recs = sched.preemptions();
        let mut i = b.preemptions_seen.saturating_sub(base);
        while let Some(r) = recs.get(i).filter(|r| r.end.is_some()) {
            out.push(EngineEvent::Preempted {
                level: r.level.number(),
                kernels: (r.dropped_from_host_queue + r.evicted + r.killed) as u64,
            });
            i += 1;
        }
        b.preemptions_seen = base + i;
        sched.forget_finished_preemptions();
    }

    /// Records that kernel `k` of `task` entered the device queue.
    pub(super) fn kernel_queued(
        &mut self,
        task: u64,
        k: usize,
        now: u64,
        issued: std::time::Instant,
        out: &mut Vec<EngineEvent>,
    ) {
        let Some(rec) = self.tasks.get_mut(&task) else {
            return;
        };
        rec.next_kernel = rec.next_kernel.max(k + 1);
        if !rec.launched {
            rec.launched = true;
            out.push(EngineEvent::FirstKernelQueued {
                task,
                at: self.build.base + now,
                issued,
            });
        }
    }

    pub(super) fn run_device(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.run_device_only(now, out);
        self.maybe_rebuild(now);
        self.forward(out);
    }

    pub(super) fn run_device_only(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        let t_now = self.sim_now(now);
        if self.build.drv.dev.live() {
            // A GPU's events are seen now: one step to the present.
            self.step(t_now, out);
            if std::mem::take(&mut self.freed) {
                self.forward(out);
            }
            return;
        }
        while let Some(t) = self.build.drv.next_time().filter(|&t| t <= t_now) {
            self.step(t, out);
            if std::mem::take(&mut self.freed) {
                self.forward(out);
            }
        }
        self.step(t_now, out);
    }
}
