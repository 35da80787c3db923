//! Host queues (REEF §4.1, Fig. 7: each GPU stream has an unbounded host
//! queue whose background transmitter moves kernels into the bounded device
//! queue). DESIGN.md puts host queues in the runtime (layer 4); this minimal
//! version drives the simulator in benchmarks and tests: it pushes into the
//! device queue whenever there is room, and [`HostQueues::reset`] evicts the
//! kernels it still holds (preemption level 1).

use crate::engine::{KernelLaunch, LaunchId, Sim, SimError, StreamId};
use std::collections::VecDeque;

/// Per-stream FIFO of launches not yet in the device queue.
#[derive(Debug, Default)]
pub struct HostQueues {
    queues: Vec<VecDeque<KernelLaunch>>,
}

impl HostQueues {
    pub fn new() -> Self {
        Self::default()
    }

    fn q(&mut self, s: StreamId) -> &mut VecDeque<KernelLaunch> {
        let i = s.0 as usize;
        if self.queues.len() <= i {
            self.queues.resize_with(i + 1, VecDeque::new);
        }
        &mut self.queues[i]
    }

    /// Appends a launch to the stream's host queue.
    pub fn submit(&mut self, s: StreamId, l: KernelLaunch) {
        self.q(s).push_back(l);
    }

    /// Launches held for a stream.
    pub fn len(&self, s: StreamId) -> usize {
        self.queues.get(s.0 as usize).map_or(0, |q| q.len())
    }

    /// True when no stream holds a launch.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(|q| q.is_empty())
    }

    /// Moves launches into device queues while they have room. Returns the
    /// ids of the launches accepted, in order.
    pub fn pump(&mut self, sim: &mut Sim) -> Result<Vec<LaunchId>, SimError> {
        let mut ids = Vec::new();
        self.pump_into(sim, &mut ids)?;
        Ok(ids)
    }

    /// [`HostQueues::pump`] appending into a caller's buffer.
    pub fn pump_into(&mut self, sim: &mut Sim, ids: &mut Vec<LaunchId>) -> Result<(), SimError> {
        for (i, q) in self.queues.iter_mut().enumerate() {
            let s = StreamId(i as u32);
            while !q.is_empty() && sim.queue_len(s) < sim.queue_capacity(s) {
                let l = q.pop_front().expect("non-empty");
                ids.push(sim.launch(s, l)?);
            }
        }
        Ok(())
    }

    /// Evicts everything the stream's host queue holds (level 1) and returns
    /// it, so the caller can re-submit from a restore point.
    pub fn reset(&mut self, s: StreamId) -> Vec<KernelLaunch> {
        self.q(s).drain(..).collect()
    }
}
