//! Time slicing between contexts (module doc of driver.rs: "Contexts
//! time-slice"): which context runs on a device, its held launches'
//! submission, and the recall of a context whose slice ended.

use super::*;

impl Driver {
    /// The next instant device `dev` changes: its simulator's next event,
    /// or the end of the running context's time slice when another context
    /// waits.
    pub(super) fn next_time(&self, dev: usize) -> Option<u64> {
        let g = &self.gpus[dev];
        let slice = match g.active {
            Some(c) if !g.draining && self.others_waiting(dev, c) => Some(g.slice_end),
            _ => None,
        };
        match (g.sim.next_event_time(), slice) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub(super) fn others_waiting(&self, dev: usize, c: u64) -> bool {
        self.streams
            .values()
            .any(|s| s.dev == dev && s.ctx != c && !s.held.is_empty())
    }

    /// Whether context `c` has nothing held or on its device's streams.
    pub(super) fn ctx_idle(&self, dev: usize, c: u64) -> bool {
        self.streams.values().all(|s| {
            s.dev != dev
                || s.ctx != c
                || (s.held.is_empty() && self.gpus[dev].sim.stream_idle(s.sim))
        })
    }

    /// Time slicing (module doc): picks the context that runs on device
    /// `dev` and submits its held launches to the simulated GPU.
    pub(super) fn pump(&mut self, dev: usize) {
        loop {
            let now = self.gpus[dev].sim.now();
            match self.gpus[dev].active {
                None => {
                    // Round robin: the waiting context after the last one
                    // (contexts in creation order).
                    let mut ready: Vec<u64> = self
                        .streams
                        .values()
                        .filter(|s| s.dev == dev && !s.held.is_empty())
                        .map(|s| s.ctx)
                        .collect();
                    if ready.is_empty() {
                        return;
                    }
                    ready.sort_unstable();
                    ready.dedup();
                    let last = self.gpus[dev].slice_end_ctx;
                    let c = ready
                        .iter()
                        .copied()
                        .find(|&c| c > last)
                        .unwrap_or(ready[0]);
                    let g = &mut self.gpus[dev];
                    if c != last {
                        g.stats.context_switches += 1;
                        self.stats.context_switches += 1;
                    }
                    g.active = Some(c);
                    g.slice_end_ctx = c;
                    g.slice_end = now + TIMESLICE_NS;
                    g.draining = false;
                }
                Some(c) => {
                    let waiting = self.others_waiting(dev, c);
                    let draining = self.gpus[dev].draining;
                    if waiting && self.ctx_drained(dev, c) && (draining || self.ctx_idle(dev, c)) {
                        self.gpus[dev].active = None;
                        continue;
                    }
                    if waiting && !draining && now >= self.gpus[dev].slice_end {
                        // The slice is over: the kernels it has not
                        // dispatched go back to the driver; those running
                        // finish (module doc).
                        self.gpus[dev].draining = true;
                        self.recall(dev, c);
                        continue;
                    }
                    if !draining {
                        self.submit_held(dev, c);
                    }
                    return;
                }
            }
        }
    }

    /// Whether context `c` has nothing queued or running on device `dev`
    /// (launches held by the driver aside).
    pub(super) fn ctx_drained(&self, dev: usize, c: u64) -> bool {
        self.streams
            .values()
            .all(|s| s.dev != dev || s.ctx != c || self.gpus[dev].sim.stream_idle(s.sim))
    }

    /// Takes context `c`'s launches that device `dev` has queued and not
    /// dispatched back into their streams' held queues, in order.
    pub(super) fn recall(&mut self, dev: usize, c: u64) {
        let ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.dev == dev && s.ctx == c)
            .map(|(&id, _)| id)
            .collect();
        for sid in ids {
            let sim_stream = self.streams[&sid].sim;
            let Ok(cleared) = self.gpus[dev].sim.clear_queue(sim_stream) else {
                continue;
            };
            let mut back = Vec::with_capacity(cleared.len());
            for id in cleared {
                let Some(l) = self.gpus[dev].ids.remove(&id) else {
                    continue;
                };
                if let Some(f) = self.inflight.get_mut(&l) {
                    f.req = Some(f.launch.clone());
                    f.sim_id = None;
                    back.push(l);
                }
            }
            let st = self.streams.get_mut(&sid).unwrap();
            for l in back.into_iter().rev() {
                st.held.push_front(l);
            }
        }
    }

    /// Submits context `c`'s held launches on device `dev`, in order per
    /// stream.
    pub(super) fn submit_held(&mut self, dev: usize, c: u64) {
        let ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.dev == dev && s.ctx == c && !s.held.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for sid in ids {
            while let Some(&l) = self.streams[&sid].held.front() {
                let sim_stream = self.streams[&sid].sim;
                let sim = &self.gpus[dev].sim;
                if sim.queue_len(sim_stream) >= sim.queue_capacity(sim_stream) {
                    break;
                }
                self.streams.get_mut(&sid).unwrap().held.pop_front();
                let Some(req) = self.inflight.get_mut(&l).and_then(|f| f.req.take()) else {
                    continue;
                };
                match self.gpus[dev].sim.launch(sim_stream, req) {
                    Ok(id) => {
                        self.gpus[dev].ids.insert(id, l);
                        if let Some(f) = self.inflight.get_mut(&l) {
                            f.sim_id = Some(id);
                        }
                    }
                    Err(_) => {
                        // Checked at cuLaunchKernel; a refusal here is the
                        // simulator's (no room): the launch is lost, as a
                        // fault would lose it.
                        self.fault(c);
                    }
                }
            }
        }
    }
}
