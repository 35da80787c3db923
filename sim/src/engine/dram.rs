//! The device-level DRAM terms between co-running launches, applied when a
//! placement pass's groups are timed (docs/simulator.md "Shared memory
//! bandwidth", "L2 capacity", "Loaded memory latency"): the shared
//! bandwidth past saturation, the bytes co-residents' footprints force out
//! of the L2, and channel queueing below saturation. A child module of
//! `engine` so that it works on the engine's own state.

use super::{Ev, Sim};

impl Sim {
    /// Schedules the completion of the groups placed in this pass, each
    /// stretched when the device's memory bandwidth is oversubscribed
    /// (docs/simulator.md "Shared memory bandwidth"; REEF §6.5, Fig. 27).
    ///
    /// Every resident group draws `blocks x b / d` bytes/s (`b` its
    /// kernel's DRAM bytes per block, `d` its duration); `R` is the sum over
    /// all resident groups, this pass's included at their unstretched
    /// durations (so the parts of a padded launch see each other). A block
    /// of a group at co-residency `k` was measured (its curve) with `k`
    /// blocks of its kernel on every CU, i.e. under a device load `R_ref =
    /// k x b x CUs / d`; below `max(W, R_ref)` (`W` the preset's memory
    /// bandwidth) nothing changes, since the curve already holds that
    /// much sharing; nor below `R_own`, what the block's own launch draws
    /// (a kernel alone was measured alone, at whatever load it makes
    /// itself). With `c = max(W, R_ref, R_own)`, above it the bandwidth is
    /// processor-shared: every stream of requests gets `c / R` of what it
    /// asks, so the memory-bound part of the block, `min(d, t_mem)` with
    /// `t_mem = k x b x CUs / W` (its bytes at its share of the
    /// bandwidth), lasts `R / c` times longer:
    /// `d' = d + min(d, t_mem) x (R - c) / c`, rounded down. The groups are scheduled in placement order, as they
    /// were placed; then their draw is taken at their stretched durations.
    pub(super) fn time_fresh_groups(&mut self) {
        let fresh = std::mem::take(&mut self.fresh);
        let now = self.now;
        // L2 capacity first (docs/simulator.md "L2 capacity"): every group
        // of this pass draws, beside its kernel's own DRAM bytes, the bytes
        // of its footprint that the L2 held alone but cannot hold beside
        // the other resident launches; they are charged like any other
        // DRAM traffic below.
        let extra = self.l2_extra_bytes(&fresh);
        let r = self.dram_rate;
        self.dram_peak = self.dram_peak.max(r);
        self.l2_peak = self.l2_peak.max(self.l2_used);
        let w = self.spec.memory_bandwidth_bytes_per_s as u128;
        let cus = self.spec.compute_units as u128;
        let one = crate::mix::ONE as u128;
        for (i, &(gslot, gen, base, k)) in fresh.iter().enumerate() {
            let g = &self.groups[gslot as usize];
            let b = self.launches[g.launch as usize]
                .req
                .shape
                .dram_bytes_per_block as u128;
            // The block's bytes now, with what the L2 no longer holds.
            let b_now = b + extra[i];
            let mut dur = base;
            if b_now > 0 && r > w {
                // Bytes per second the curve's own load drew: k blocks of
                // this kernel on every CU, each moving b over `base`.
                let r_ref = (k as u128)
                    .saturating_mul(b)
                    .saturating_mul(cus)
                    .saturating_mul(1_000_000_000)
                    / (one * base.max(1) as u128);
                // What its own launch draws, without the L2 term's bytes
                // (alone, the kernel had them in the L2).
                let own = self.launches[g.launch as usize].rate * b / b_now;
                let cap = w.max(r_ref).max(own);
                if r > cap {
                    // Memory-bound time: the block's bytes at its share of
                    // W with k blocks per CU, ns.
                    let t_mem = (k as u128)
                        .saturating_mul(b_now)
                        .saturating_mul(cus)
                        .saturating_mul(1_000_000_000)
                        / (one * w);
                    let extra = t_mem.min(base as u128).saturating_mul(r - cap) / cap;
                    let max = (crate::shape::MAX_BLOCK_NS as u128).max(base as u128);
                    dur = (base as u128).saturating_add(extra).min(max) as u64;
                    if g.record != usize::MAX {
                        self.records[g.record].end = now + dur;
                    }
                    // The group now draws its bytes over the longer time.
                    let blocks = g.per_cu as u128 * g.cus.len() as u128;
                    let rate =
                        blocks.saturating_mul(b_now).saturating_mul(1_000_000_000) / dur as u128;
                    self.set_group_rate(gslot, rate);
                }
            } else if b_now > 0 && r < w && self.spec.dram_latency_ns > 0 {
                dur = self.loaded_latency(gslot, base, k, b, b_now, r);
            }
            self.schedule(now + dur, Ev::Group(gslot, gen));
        }
        self.fresh = fresh;
        self.fresh.clear();
    }

    /// The loaded-latency term below saturation (docs/simulator.md "Loaded
    /// memory latency"): a group placed while the resident groups draw
    /// `R < W` sees each DRAM access wait `q(R / W)` in the channel queues
    /// ([`DeviceSpec::dram_queueing_ns`]) against `q(rho_ref)` under the
    /// load its curve was measured at (`max(R_ref, R_own) / W`, as for the
    /// bandwidth term). A block keeps as many accesses in flight as before
    /// (its code and occupancy fix them), so by Little's law its
    /// memory-bound part `min(d, t_mem)` lasts `(L0 + q(rho)) / (L0 +
    /// q(rho_ref))` times longer, `L0` the idle DRAM latency. Returns the
    /// duration (unchanged when `rho <= rho_ref`), and sets the group's
    /// draw over it.
    fn loaded_latency(
        &mut self,
        gslot: u32,
        base: u64,
        k: u64,
        b: u128,
        b_now: u128,
        r: u128,
    ) -> u64 {
        let w = self.spec.memory_bandwidth_bytes_per_s as f64;
        let cus = self.spec.compute_units as f64;
        let kf = k as f64 / crate::mix::ONE as f64;
        let g = &self.groups[gslot as usize];
        let r_ref = kf * b as f64 * cus * 1e9 / base.max(1) as f64;
        let own = (self.launches[g.launch as usize].rate * b / b_now) as f64;
        let (rho, rho_ref) = (r as f64 / w, r_ref.max(own) / w);
        if rho <= rho_ref {
            return base;
        }
        let l0 = self.spec.dram_latency_ns as f64;
        let q_ref = self.spec.dram_queueing_ns(rho_ref);
        let stretch = (self.spec.dram_queueing_ns(rho) - q_ref) / (l0 + q_ref);
        let t_mem = (kf * b_now as f64 * cus / w * 1e9).min(base as f64);
        let extra = (t_mem * stretch).max(0.0) as u64;
        if extra == 0 {
            return base;
        }
        let dur = base
            .saturating_add(extra)
            .min(crate::shape::MAX_BLOCK_NS.max(base));
        if g.record != usize::MAX {
            self.records[g.record].end = self.now + dur;
        }
        let blocks = g.per_cu as u128 * g.cus.len() as u128;
        let rate = blocks.saturating_mul(b_now).saturating_mul(1_000_000_000) / dur as u128;
        self.set_group_rate(gslot, rate);
        dur
    }

    /// Sets a resident group's DRAM draw, keeping its launch's and the
    /// device's sums.
    fn set_group_rate(&mut self, gslot: u32, rate: u128) {
        let g = &mut self.groups[gslot as usize];
        self.dram_rate = self.dram_rate - g.rate + rate;
        let l = &mut self.launches[g.launch as usize];
        l.rate = l.rate - g.rate + rate;
        g.rate = rate;
    }

    /// The L2 capacity term (docs/simulator.md "L2 capacity"): for each
    /// group placed in this pass, the extra DRAM bytes per block, and its
    /// draw raised by them. With `C` the preset's `l2_bytes`, `F` the
    /// kernel's footprint and `S` the summed footprints of every launch
    /// with resident blocks (this pass's included), the L2 keeps each
    /// launch a share `C / S` of its data when `S > C` (shared in
    /// proportion to footprint), against `min(1, C / F)` alone; each byte
    /// of the difference, `min(F, C) - F x C / S`, is read from DRAM once
    /// more over the kernel, spread evenly over its blocks. 0 when `S <= C`,
    /// alone (`S = F`), or without an L2 size or a footprint.
    fn l2_extra_bytes(&mut self, fresh: &[(u32, u32, u64, u64)]) -> Vec<u128> {
        let c = self.spec.l2_bytes as u128;
        let s = self.l2_used;
        let mut out = vec![0u128; fresh.len()];
        if c == 0 || s <= c {
            return out;
        }
        for (i, &(gslot, _, base, _)) in fresh.iter().enumerate() {
            let g = &self.groups[gslot as usize];
            let sh = &self.launches[g.launch as usize].req.shape;
            let f = sh.footprint_bytes as u128;
            if f == 0 {
                continue;
            }
            let lost = f.min(c) - f * c / s;
            let per_block = lost / sh.blocks.max(1) as u128;
            if per_block == 0 {
                continue;
            }
            out[i] = per_block;
            let blocks = g.per_cu as u128 * g.cus.len() as u128;
            let b = sh.dram_bytes_per_block as u128 + per_block;
            let rate = blocks.saturating_mul(b).saturating_mul(1_000_000_000) / base.max(1) as u128;
            self.set_group_rate(gslot, rate);
        }
        out
    }
}
