//! The event loop and completion (docs/simulator.md "Determinism",
//! "Aggregate simulation"): the caller-driven clock ([`Sim::advance_to`],
//! [`Sim::step`]), scheduling and dispatching internal events (equal times
//! in scheduling order), reporting [`super::DeviceEvent`]s, and what a block
//! group's or a launch's end frees: CU resources, the launch slot, and the
//! stream's place in its in-order hardware queue.

use super::{BlockOutcome, DeviceEvent, Ev, EventKind, LState, Pending, Sim, StreamId};

impl Sim {
    /// Time of the next internal event, if any.
    pub fn next_event_time(&self) -> Option<u64> {
        self.heap.peek().map(Pending::time)
    }

    /// Processes every event up to and including `t`, then sets the time to
    /// `t` (never backwards). Returns the events, in order.
    pub fn advance_to(&mut self, t: u64) -> Vec<DeviceEvent> {
        let mut v = Vec::new();
        self.advance_into(t, &mut v);
        v
    }

    /// [`Sim::advance_to`] appending into a caller's buffer.
    pub fn advance_into(&mut self, t: u64, out: &mut Vec<DeviceEvent>) {
        out.append(&mut self.out);
        while let Some(&p) = self.heap.peek() {
            let et = p.time();
            if et > t {
                break;
            }
            self.heap.pop();
            self.now = self.now.max(et);
            self.handle(p.ev);
            out.append(&mut self.out);
        }
        self.now = self.now.max(t);
    }

    /// Processes the events of the next event time. Returns that time and
    /// its events, or None when nothing is pending.
    pub fn step(&mut self) -> Option<(u64, Vec<DeviceEvent>)> {
        let t = self.next_event_time()?;
        Some((t, self.advance_to(t)))
    }

    /// Like [`Sim::advance_to`], but paced by `clock` (wall time for the
    /// live daemon, virtual time otherwise).
    pub fn advance_with_clock(
        &mut self,
        clock: &mut dyn crate::clock::Clock,
        t: u64,
    ) -> Vec<DeviceEvent> {
        let mut out = Vec::new();
        while let Some(et) = self.next_event_time() {
            if et > t {
                break;
            }
            clock.wait_until(et);
            self.advance_into(et, &mut out);
        }
        clock.wait_until(t);
        self.advance_into(t, &mut out);
        out
    }

    pub(super) fn schedule(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Pending {
            key: (t as u128) << 64 | self.seq as u128,
            ev,
        });
    }

    pub(super) fn emit(&mut self, slot: u32, kind: EventKind) {
        let l = &self.launches[slot as usize];
        self.out.push(DeviceEvent {
            time: self.now,
            stream: StreamId(l.stream),
            launch: l.id,
            tags: l.req.tags,
            kind,
        });
    }

    /// The slots of a padded launch, leader first.
    pub(super) fn parts_of(&self, leader: u32) -> Vec<u32> {
        let mut v = Vec::with_capacity(1 + self.launches[leader as usize].followers.len());
        v.push(leader);
        v.extend_from_slice(&self.launches[leader as usize].followers);
        v
    }

    /// A part finished (completed or killed): frees it, and when it was the
    /// last part of its launch, frees the stream for its next kernel.
    pub(super) fn finish_part(&mut self, slot: u32) {
        self.remove_active(slot);
        let (s, leader) = {
            let l = &self.launches[slot as usize];
            (l.stream, l.leader)
        };
        let ld = &mut self.launches[leader as usize];
        ld.parts_left -= 1;
        let last = ld.parts_left == 0;
        if slot != leader {
            self.release_launch(slot);
        } else if !last {
            self.launches[slot as usize].state = LState::Done;
        }
        if last {
            if slot != leader {
                self.release_launch(leader);
            } else {
                self.release_launch(slot);
            }
            self.streams[s as usize].running = None;
            let q = self.streams[s as usize].hwq;
            self.hwqs[q as usize].running = None;
            self.hwq_step(q);
        }
    }

    pub(super) fn release_launch(&mut self, slot: u32) {
        let l = &mut self.launches[slot as usize];
        l.live = false;
        l.req.reads = Vec::new();
        l.req.writes = Vec::new();
        self.free_launches.push(slot);
    }

    pub(super) fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Stream(q) => self.hwq_step(q),
            Ev::Group(g, gen) => self.group_done(g, gen),
            Ev::EvictDone(slot, gen) => {
                let l = &mut self.launches[slot as usize];
                if l.live && l.gen == gen && l.exiting {
                    l.exiting = false;
                    if l.done + l.skipped == l.end - l.start {
                        self.end_launch(slot);
                    }
                }
            }
            Ev::Kill(target) => self.kill_effect(target),
            Ev::Contexts => {
                self.ctx_wakes.remove(&self.now);
                self.place();
            }
            Ev::Release(slot, gen) => self.release(slot, gen),
        }
    }

    /// Frees a group's resources; returns (launch slot, blocks).
    pub(super) fn retire_group(&mut self, gslot: u32, outcome: BlockOutcome) -> (u32, u32) {
        let g = &mut self.groups[gslot as usize];
        g.live = false;
        let (slot, per_cu, cus, record, rate) = (g.launch, g.per_cu, g.cus, g.record, g.rate);
        self.free_groups.push(gslot);
        self.dram_rate -= rate;
        self.launches[slot as usize].rate -= rate;
        let free = per_cu as u128 * self.launches[slot as usize].unit;
        let (demand, wpb) = {
            let sh = &self.launches[slot as usize].req.shape;
            (sh.demand, sh.waves_per_block)
        };
        for cu in cus.iter() {
            crate::mix::charge(&mut self.load[cu], &demand, (per_cu * wpb) as u64, false);
            let l = &mut self.launches[slot as usize];
            if l.ptb > 0 {
                l.resident[cu] -= per_cu;
            }
            let u = &mut self.usage[cu];
            *u -= free;
            if *u == 0 {
                self.busy -= 1;
            }
        }
        // Kernels waiting for room may now fit on these CUs.
        for &a in &self.active {
            let l = &mut self.launches[a as usize];
            if l.next_block < l.end {
                l.scan = l.scan.or(&cus.and(&l.cus));
            }
        }
        if record != usize::MAX {
            let r = &mut self.records[record];
            r.outcome = outcome;
            if outcome == BlockOutcome::Killed {
                r.end = self.now;
            }
        }
        let l = &mut self.launches[slot as usize];
        if let Some(p) = l.groups.iter().position(|&x| x == gslot) {
            l.groups.swap_remove(p);
        }
        if l.groups.is_empty() && l.in_l2 {
            l.in_l2 = false;
            self.l2_used -= l.req.shape.footprint_bytes as u128;
        }
        (slot, per_cu * cus.len() as u32)
    }

    pub(super) fn group_done(&mut self, gslot: u32, gen: u32) {
        let g = &self.groups[gslot as usize];
        if !g.live || g.gen != gen {
            return;
        }
        let (slot, blocks) = self.retire_group(gslot, BlockOutcome::Finished);
        let l = &mut self.launches[slot as usize];
        l.done += blocks;
        if l.done + l.skipped == l.end - l.start && !l.exiting {
            self.end_launch(slot);
        }
        self.place();
    }

    /// Every block of the launch has finished or exited at its flag check.
    pub(super) fn end_launch(&mut self, slot: u32) {
        let l = &self.launches[slot as usize];
        if l.done == 0 {
            // No block passed its check: evicted, nothing written.
            self.emit(slot, EventKind::Evicted);
            self.finish_part(slot);
            return;
        }
        let sh = &l.req.shape;
        // The blocks that ran are the first ones of its range (blocks are
        // dispatched in index order): they wrote their part of the outputs.
        let ran = l.start as u64..(l.end - l.skipped) as u64;
        self.values.complete(
            sh.identity,
            &l.req.reads,
            &l.req.writes,
            ran,
            sh.blocks as u64,
        );
        if l.skipped == 0 {
            self.completed += 1;
        }
        self.emit(slot, EventKind::Completed);
        self.passed(slot);
        self.finish_part(slot);
    }

    pub(super) fn remove_active(&mut self, slot: u32) {
        if let Some(p) = self.active.iter().position(|&a| a == slot) {
            self.active.remove(p);
        }
    }
}
