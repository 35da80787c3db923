//! Placing blocks on compute units (docs/simulator.md "Blocks", "Aggregate
//! simulation"; REEF §5 Fig. 12 for CU-restricted launches, Aker §5.3 for
//! persistent blocks): under the per-CU limits, water-filled over the
//! allowed CUs from a rotating start CU, highest stream priority first,
//! each placement's blocks grouped by (blocks per CU, co-residency), with
//! a duration fixed from the kernel's curve at that co-residency and the
//! resource mix ([`crate::mix`]); the DRAM terms are then applied by the
//! `dram` module.

use super::{
    fits, unpack, BlockOutcome, BlockRecord, CuUsage, EventKind, Group, Sim, LANE_MASK, WAVES_SHIFT,
};
use crate::cuset::CuSet;

impl Sim {
    pub(super) fn next_jitter(&mut self) -> f64 {
        let u = crate::rng::unit_f64(crate::rng::splitmix64(&mut self.rng));
        1.0 + self.cfg.jitter * (2.0 * u - 1.0)
    }

    /// Places pending blocks of active kernels, in priority/dispatch order,
    /// then times the groups placed (see [`Sim::time_fresh_groups`]).
    pub(super) fn place(&mut self) {
        let multi = self.ctxs.len() > 1;
        if multi {
            self.switch_contexts();
        }
        let now = self.now;
        let mut i = 0;
        while i < self.active.len() {
            let slot = self.active[i];
            let l = &self.launches[slot as usize];
            if multi {
                // Only the blocks of a resident, ready context that is not
                // leaving are dispatched (its waiting blocks, flagged ones
                // included, wait; their CU scan is kept for later).
                let c = &self.ctxs[self.streams[l.stream as usize].ctx as usize];
                if !c.resident || c.leaving || c.ready_at > now {
                    i += 1;
                    continue;
                }
            }
            let flag = self.streams[l.stream as usize].flag;
            if l.held && !flag {
                // Waiting at its barrier; flagged, its blocks exit at
                // their check as any part's.
                i += 1;
                continue;
            }
            if l.next_block < l.end && !l.scan.is_empty() {
                if flag {
                    self.flag_exit(slot);
                } else {
                    self.place_launch(slot);
                }
            }
            i += 1;
        }
        if !self.fresh.is_empty() {
            self.time_fresh_groups();
        }
    }

    pub(super) fn place_launch(&mut self, slot: u32) {
        let spec = &self.spec;
        let n = spec.compute_units as usize;
        let l = &self.launches[slot as usize];
        let sh = &*l.req.shape;
        let (tpb, wpb, lds, regs) = (
            sh.threads_per_block,
            sh.waves_per_block,
            sh.lds_per_block,
            sh.regs_per_block,
        );
        let (allowed, scan, unit, cap_empty) = (l.cus, l.scan, l.unit, l.cap_empty);
        let mut remaining = l.end - l.next_block;
        // Capacity of a CU in use (an empty CU's is `cap_empty`).
        let cap_of = |u: &CuUsage| -> u32 {
            let mut cap = (spec.max_threads_per_cu - u.threads) / tpb;
            cap = cap.min((spec.max_waves_per_cu - u.waves) / wpb);
            cap = cap.min(spec.max_blocks_per_cu - u.blocks);
            if let Some(c) = (spec.lds_bytes_per_cu - u.lds).checked_div(lds) {
                cap = cap.min(c);
            }
            if let Some(c) = (spec.registers_per_cu - u.regs).checked_div(regs) {
                cap = cap.min(c);
            }
            cap
        };
        // After this attempt every block is placed or every allowed CU is
        // full for this kernel (see `Launch::scan`).
        self.launches[slot as usize].scan = CuSet::empty();
        self.buckets.clear();
        if self.busy == 0 && allowed == self.all_cus {
            // Fast path, idle device: an even spread, at most two buckets.
            let per = cap_empty.min(remaining / n as u32);
            let extra = if per < cap_empty {
                (remaining - per * n as u32) as usize
            } else {
                0
            };
            // CUs rr, rr+1, ... (wrapping) get one block more.
            let end = self.rr + extra;
            let more =
                CuSet::range(self.rr, end.min(n)).or(&CuSet::range(0, end.saturating_sub(n)));
            if extra > 0 {
                self.rr = (self.rr + extra) % n;
            }
            let rest = self.all_cus.minus(&more);
            for (a, set) in [(per + 1, more), (per, rest)] {
                if a == 0 || set.is_empty() {
                    continue;
                }
                let charge = a as u128 * unit;
                let demand = self.launches[slot as usize].req.shape.demand;
                let ptb = self.launches[slot as usize].ptb;
                for cu in set.iter() {
                    if ptb > 0 {
                        self.launches[slot as usize].resident[cu] += a;
                    }
                    self.usage[cu] = charge;
                    self.load[cu] = [0; crate::mix::PIPES];
                    crate::mix::charge(&mut self.load[cu], &demand, (a * wpb) as u64, true);
                }
                self.busy += set.len();
                self.buckets
                    .push((a, a as u64 * crate::mix::ONE as u64, set));
            }
            self.make_groups(slot);
            return;
        }
        // Candidates (cu, capacity left, blocks allotted) in rotating order
        // from self.rr. With fewer blocks than candidates each of the first
        // `remaining` candidates gets one block, so the scan stops there.
        // Only the CUs of `scan` can have room (the others are full for this
        // kernel), so only they are visited, in the same order.
        self.cand.clear();
        let mut early = false;
        for cu in scan.iter_from(self.rr) {
            let u = self.usage[cu];
            let mut cap = if u == 0 {
                cap_empty
            } else if !fits(self.limits - u, unit) {
                0
            } else {
                cap_of(&unpack(u))
            };
            let l = &self.launches[slot as usize];
            if l.ptb > 0 {
                cap = cap.min(l.ptb - l.resident[cu]);
            }
            if cap > 0 {
                self.cand.push((cu, cap, 0));
                if self.cand.len() as u32 == remaining {
                    early = true;
                    break;
                }
            }
        }
        let Some(&(last_cand, _, _)) = self.cand.last() else {
            return;
        };
        if early {
            for c in self.cand.iter_mut() {
                c.2 = 1;
            }
            self.rr = (last_cand + 1) % n;
        } else {
            // Water-filling: spread blocks evenly over the candidate CUs.
            let mut active = self.cand.len() as u32;
            while remaining > 0 && active > 0 {
                let even = remaining / active;
                if even == 0 {
                    let mut last = 0;
                    for c in self
                        .cand
                        .iter_mut()
                        .filter(|c| c.1 > 0)
                        .take(remaining as usize)
                    {
                        c.1 -= 1;
                        c.2 += 1;
                        last = c.0;
                    }
                    self.rr = (last + 1) % n;
                    break;
                }
                let min_cap = self
                    .cand
                    .iter()
                    .filter(|c| c.1 > 0)
                    .map(|c| c.1)
                    .min()
                    .unwrap_or(0);
                let t = min_cap.min(even);
                remaining -= t * active;
                for c in self.cand.iter_mut().filter(|c| c.1 > 0) {
                    c.1 -= t;
                    c.2 += t;
                    if c.1 == 0 {
                        active -= 1;
                    }
                }
            }
        }
        // Bucket CUs by (blocks placed, resulting co-residency).
        let demand = self.launches[slot as usize].req.shape.demand;
        for &(cu, _, a) in &self.cand {
            if a == 0 {
                continue;
            }
            let u = &mut self.usage[cu];
            if *u == 0 {
                self.busy += 1;
            }
            *u += a as u128 * unit;
            let waves = ((*u >> WAVES_SHIFT) & LANE_MASK) as u32;
            // Co-residency seen by the block, in 1/1024 (resource mix,
            // mix.rs): ceil(waves / wpb) when every resident wave has this
            // kernel's demand, less when its neighbours use other pipes.
            let load = &mut self.load[cu];
            crate::mix::charge(load, &demand, (a * wpb) as u64, true);
            let l = &mut self.launches[slot as usize];
            if l.ptb > 0 {
                l.resident[cu] += a;
            }
            let k = crate::mix::Mix::k_fixed(&demand, wpb, waves, load);
            match self.buckets.iter_mut().find(|b| b.0 == a && b.1 == k) {
                Some(b) => b.2.insert(cu),
                None => {
                    let mut set = CuSet::empty();
                    set.insert(cu);
                    self.buckets.push((a, k, set));
                }
            }
        }
        self.make_groups(slot);
    }

    /// Creates one block group per bucket (blocks per CU, co-residency, CUs);
    /// CU usage has already been charged.
    pub(super) fn make_groups(&mut self, slot: u32) {
        let buckets = std::mem::take(&mut self.buckets);
        let now = self.now;
        if !self.launches[slot as usize].started {
            self.launches[slot as usize].started = true;
            self.emit(slot, EventKind::Started);
        }
        for &(per_cu, k, set) in &buckets {
            let count = per_cu * set.len() as u32;
            let mut dur = self.launches[slot as usize].req.shape.exec_ns_fixed(k);
            if self.launches[slot as usize].dkp {
                // The dkp kernel's branch and function-pointer set-up
                // (REEF §6.5 Fig. 25).
                dur = crate::spec::padded_block_ns(dur);
            }
            if self.cfg.jitter > 0.0 {
                dur = ((dur as f64 * self.next_jitter()) as u64).max(1);
            }
            let l = &mut self.launches[slot as usize];
            let first = l.next_block;
            l.next_block += count;
            let lid = l.id;
            let gslot = match self.free_groups.pop() {
                Some(g) => g,
                None => {
                    self.groups.push(Group {
                        launch: 0,
                        gen: 0,
                        live: false,
                        cus: CuSet::empty(),
                        per_cu: 0,
                        record: usize::MAX,
                        rate: 0,
                    });
                    self.groups.len() as u32 - 1
                }
            };
            let record = if self.cfg.record_blocks {
                self.records.push(BlockRecord {
                    launch: lid,
                    blocks: first..first + count,
                    cus: set,
                    per_cu,
                    start: now,
                    end: now + dur,
                    outcome: BlockOutcome::Running,
                });
                self.records.len() - 1
            } else {
                usize::MAX
            };
            // DRAM draw of the group: its blocks' bytes over its duration.
            let rate = (count as u128)
                .saturating_mul(self.launches[slot as usize].req.shape.dram_bytes_per_block as u128)
                .saturating_mul(1_000_000_000)
                / dur.max(1) as u128;
            let g = &mut self.groups[gslot as usize];
            g.launch = slot;
            g.gen = g.gen.wrapping_add(1);
            g.live = true;
            g.cus = set;
            g.per_cu = per_cu;
            g.record = record;
            g.rate = rate;
            let gen = g.gen;
            let l = &mut self.launches[slot as usize];
            l.groups.push(gslot);
            l.rate += rate;
            if !l.in_l2 {
                l.in_l2 = true;
                self.l2_used += l.req.shape.footprint_bytes as u128;
            }
            self.dram_rate += rate;
            // Timed once the whole pass is placed (`time_fresh_groups`).
            self.fresh.push((gslot, gen, dur, k));
        }
        self.buckets = buckets;
    }
}
