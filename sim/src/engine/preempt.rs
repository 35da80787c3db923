//! The preemption primitives (docs/simulator.md "Preempt flag, per block",
//! "Kill"): the per-stream preempt flag read by every block at its entry
//! (REEF §4.2, §4.3 Fig. 8), the device queue's CLEAR_QUEUE, and killing
//! the running kernels of a stream or of the device after
//! `kill_latency_ns` (REEF §4.3, §4.6), with the flagged blocks' exit
//! ([`Sim::flag_exit`]) and the kill's effect ([`Sim::kill_effect`]).

use super::{fits, BlockOutcome, Cp, Ev, EventKind, LaunchId, Sim, SimError, StreamId};
use crate::cuset::CuSet;
use crate::spec::PreemptLevel;

impl Sim {
    /// Sets or clears a stream's preempt flag in device memory (level 2).
    /// Every block reads it when it is dispatched to a CU (REEF §4.3
    /// Fig. 8): while it is set, the stream's blocks not yet dispatched
    /// exit at entry (`flag_check_ns`), blocks already running finish. A
    /// kernel with no block run is [`EventKind::Evicted`]; one with some
    /// blocks run ends [`EventKind::Completed`] with its outputs partly
    /// written.
    pub fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), SimError> {
        self.require(PreemptLevel::PreemptFlag)?;
        self.stream(s)?;
        self.streams[s.0 as usize].flag = on;
        Ok(())
    }

    /// The stream's preempt flag.
    pub fn preempt_flag(&self, s: StreamId) -> bool {
        self.stream(s).map(|st| st.flag).unwrap_or(false)
    }

    pub(super) fn require(&self, level: PreemptLevel) -> Result<(), SimError> {
        if self.spec.levels().contains(&level) {
            Ok(())
        } else {
            Err(SimError::Unsupported {
                device: self.spec.name.clone(),
                level,
            })
        }
    }

    /// Kills the running blocks of the stream's dispatched kernel(s) after
    /// the device's kill latency (level 3). Their outputs are corrupted.
    pub fn kill_stream(&mut self, s: StreamId) -> Result<(), SimError> {
        self.require(PreemptLevel::KillRunning)?;
        self.stream(s)?;
        let t = self.now + self.spec.kill_latency_ns;
        self.schedule(t, Ev::Kill(s.0));
        Ok(())
    }

    /// Kills every running kernel on the device (a CU reset) after the kill
    /// latency (level 3).
    pub fn kill_all(&mut self) -> Result<(), SimError> {
        self.require(PreemptLevel::KillRunning)?;
        let t = self.now + self.spec.kill_latency_ns;
        self.schedule(t, Ev::Kill(u32::MAX));
        Ok(())
    }

    /// Empties a stream's device queue now (REEF's CLEAR_QUEUE), except a
    /// packet the command processor is already dispatching. Each removed
    /// kernel (every part of a padded launch) is reported as
    /// [`EventKind::Cleared`]; their ids are returned in queue order.
    pub fn clear_queue(&mut self, s: StreamId) -> Result<Vec<LaunchId>, SimError> {
        self.stream(s)?;
        let q = &mut self.hwqs[self.streams[s.0 as usize].hwq as usize];
        // The command processor holds this stream's head packet when it is
        // fetching or dispatching it from the shared queue.
        let holds = q.cur == s.0 && q.cp != Cp::Idle;
        let keep = holds && matches!(q.cp, Cp::Dispatching(_));
        if holds && !keep {
            q.cp = Cp::Idle;
        }
        let st = &mut self.streams[s.0 as usize];
        let mut removed = Vec::new();
        let drained: Vec<u32> = if keep {
            st.dq.drain(1..).collect()
        } else {
            st.dq.drain(..).collect()
        };
        for leader in drained {
            for slot in self.parts_of(leader) {
                removed.push(self.launches[slot as usize].id);
                self.emit(slot, EventKind::Cleared);
                self.release_launch(slot);
            }
        }
        if holds && !keep {
            // Another stream sharing the queue may have a packet waiting.
            let q = self.streams[s.0 as usize].hwq;
            self.hwq_step(q);
        }
        Ok(removed)
    }

    /// The blocks of `slot` not yet dispatched read its stream's preempt
    /// flag, set, and exit at entry (REEF §4.3 Fig. 8: the check is the
    /// first thing every block does). A block needs a CU slot to run its
    /// check, so this happens only once one of the launch's allowed CUs has
    /// room for a block; then all of them exit, and the exit costs the
    /// device's `flag_check_ns` (REEF §6.4 Fig. 20(b), the per-kernel cost
    /// of a lazily evicted kernel: the exiting blocks pass through the free
    /// slots together in that time, holding no resources afterwards).
    pub(super) fn flag_exit(&mut self, slot: u32) {
        let l = &self.launches[slot as usize];
        let (scan, unit, ptb) = (l.scan, l.unit, l.ptb);
        let room = scan.iter().any(|cu| {
            let u = self.usage[cu];
            let fits_cu = u == 0 || fits(self.limits - u, unit);
            fits_cu && (ptb == 0 || self.launches[slot as usize].resident[cu] < ptb)
        });
        let l = &mut self.launches[slot as usize];
        l.scan = CuSet::empty();
        if !room {
            return;
        }
        l.skipped = l.end - l.next_block;
        l.next_block = l.end;
        l.exiting = true;
        let gen = l.gen;
        self.schedule(self.now + self.spec.flag_check_ns, Ev::EvictDone(slot, gen));
    }

    pub(super) fn kill_effect(&mut self, target: u32) {
        let victims: Vec<u32> = self
            .active
            .iter()
            .copied()
            .filter(|&a| target == u32::MAX || self.launches[a as usize].stream == target)
            // A launch with no block running is not killed when none of it
            // is left to dispatch (it is only finishing its flagged blocks'
            // exit), nor when its stream's preempt flag is set: the kill
            // interrupts running threads only, and "inactive thread blocks
            // of the running kernel are then evicted by the preemptor in
            // Figure 8 since they have not been executed yet" (REEF §4.6,
            // "Kernel killing"; the preemptor is the flag check at kernel
            // entry, §4.2, Fig. 8 lines 1-4). Its blocks exit at their check
            // once a CU has room for one (`flag_exit`), writing nothing: it
            // ends `Evicted`, or `Completed` (partly run) when blocks of it
            // had finished before the flag was set. Killed, its outputs were
            // marked corrupted although no block of it had run, and the
            // restore then read them: the kernel before it finished under
            // the flag, so the scheduler could not count that completion and
            // re-ran it (the execution index names it, §4.4), over an input
            // the never-run kernel writes (TVM reuses storage: resnet152's
            // softmax writes the buffer the dense kernel before it reads).
            // With the GV100's 15 us trap (§4.6) the predecessor often ends
            // and its successor is dispatched, without room beside the
            // real-time kernels, before the kill lands; with the MI50's 3 us
            // CU reset (§4.5) rarely.
            .filter(|&a| {
                let l = &self.launches[a as usize];
                !(l.groups.is_empty()
                    && (l.next_block == l.end || self.streams[l.stream as usize].flag))
            })
            .collect();
        for slot in victims {
            let gs = self.launches[slot as usize].groups.clone();
            for g in gs {
                self.retire_group(g, BlockOutcome::Killed);
            }
            let l = &self.launches[slot as usize];
            let (done, id) = (l.done, l.id.0);
            let (identity, total) = (l.req.shape.identity, l.req.shape.blocks as u64);
            let range = l.start as u64..l.end as u64;
            let (reads, writes) = (l.req.reads.clone(), l.req.writes.clone());
            self.values
                .kill(identity, &reads, &writes, range, total, id);
            self.emit(slot, EventKind::Killed { blocks_done: done });
            self.finish_part(slot);
        }
        self.place();
    }
}
