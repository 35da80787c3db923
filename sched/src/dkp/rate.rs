//! `reef-max`'s `rate` (issue 28): among the versions of a best-effort
//! kernel that both padding rules admit, the one whose slots complete the
//! largest share of its kernel per CU within the real-time kernel's time,
//! rather than the shortest kernel alone.
//!
//! REEF §5.3 picks, among the versions that satisfy the two rules of §5.2,
//! "the kernel implementation with the shortest kernel execution time":
//! the version's time alone on the whole device. A padded part does not
//! run alone on the device: it runs in the slots of the CUs the real-time
//! kernel leaves, for the real-time kernel's time. With `waves` (REEF's
//! implementation: `be_iters = rt_latency / be_latency_per_iter` blocks
//! one after the other per slot, [`super::max`]) a CU runs `q · w(q)`
//! blocks of a version at co-residency `q`, `w(q) = ⌊(T_rt − 1) / t(q)⌋`,
//! and a version of `B` blocks then completes `q · w(q) / B` of its kernel
//! per CU. A finer tiling's shorter blocks may fit a slot several times
//! where the measured kernel's fit once with most of the slot left idle,
//! or its coarser blocks may fit where a finer one's contention is steep;
//! the shortest kernel alone says neither. With `rate` the selection takes
//! the admitted version of the highest such share, each read at the
//! highest co-residency rule 1 admits for it (the part may then run at
//! `most`'s, [`super::most`]); equal shares keep the shorter kernel,
//! REEF's choice. Without `waves`, `w = 1`.
//!
//! Rules 1 and 2 are checked for every version as before, and the locked
//! version of a started kernel still limits which versions may continue
//! it (`select::continue_at`), so the launch keeps the real-time
//! kernel's time and every continuation converts exactly. What it changes
//! was measured side by side before it was a switch (a temporary
//! environment toggle, 10 s of DISB A–E on both presets, 2026-11-28):
//! overall throughput +0.000 to +0.062, never lower, RT latency unchanged
//! to the third digit. In `reef-bench dkp`'s 25 pairs it raised twelve
//! (up to +0.136), lowered two (densenet as BE beside resnet152 or vgg,
//! −0.040 and −0.038; not traced) and left the rest. Its share in the
//! whole is in docs/results-max.md's ablation; its decision cost (p99
//! +14 % to +49 %: every version that passes rule 1 at one block is
//! read) in the same document's "Decision cost".

use super::most::waves_at;
use super::profile::KernelChar;
use super::select::Selector;

impl Selector {
    /// With `on`, the admitted version of a padded part is the one that
    /// completes the most of its kernel per CU in the launch (the module
    /// doc), not the shortest kernel.
    pub fn with_rate(mut self, on: bool) -> Self {
        self.rate = on;
        self
    }

    /// Blocks one CU runs of `k` within `rt_ns` at `p` ≥ 1, the highest
    /// co-residency rule 1 admits. (Reading it at `most`'s co-residency
    /// instead, a walk over `1..=p` per version, chose the same versions:
    /// the same figures to the last digit on 10 s of DISB A–E on both
    /// presets, 2026-11-28, at a higher decision cost.)
    fn blocks_per_cu(&self, k: &KernelChar, p: u32, rt_ns: u64) -> u64 {
        if !self.waves() {
            return p as u64;
        }
        p as u64 * waves_at(k, p, rt_ns) as u64
    }

    /// Whether version `a` (admitted at co-residency `pa`) completes a
    /// larger share of its kernel per CU within `rt_ns` than `b` (at `pb`),
    /// or an equal share with a shorter kernel alone.
    pub(super) fn higher_rate(
        &self,
        rt_ns: u64,
        (a, pa): (&KernelChar, u32),
        (b, pb): (&KernelChar, u32),
    ) -> bool {
        // q·w(q) / blocks, compared without division.
        let ra = self.blocks_per_cu(a, pa, rt_ns) as u128 * b.blocks.max(1) as u128;
        let rb = self.blocks_per_cu(b, pb, rt_ns) as u128 * a.blocks.max(1) as u128;
        ra > rb || (ra == rb && a.kernel_ns < b.kernel_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::select::{Candidate, Padding};
    use super::*;

    fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
    }

    /// A 65 us RT kernel on 30 CUs (one block per CU), so 30 CUs are free.
    fn rt() -> KernelChar {
        k(30, 4, vec![65_000, 70_000])
    }

    #[test]
    fn a_version_that_fits_its_slots_better_is_taken_over_the_shorter_kernel() {
        // Version 0: 480 blocks of 40 us alone; one fits a 65 us slot, the
        // slot's last 25 us idle, and two blocks on a CU exceed rule 1.
        // Version 1: the same output as 960 blocks of 21 us, a slower
        // kernel alone (42 us per 40 us of work), but three fit a CU.
        let vs = vec![
            k(480, 4, vec![40_000, 80_000, 120_000, 160_000]),
            k(960, 4, vec![21_000, 42_000, 63_000, 84_000]),
        ];
        assert!(vs[1].kernel_ns > vs[0].kernel_ns);
        let cands = [Candidate {
            versions: &vs,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        let s = Selector::new(mi50()).with_waves(true);
        let mut shortest = Padding::default();
        assert!(s.select(&rt(), &cands, 0, &mut shortest));
        // REEF §5.3: the shortest kernel, one block on each of 30 CUs.
        let p = &shortest.parts[0];
        assert_eq!((p.version, p.blocks.len(), p.cus.len()), (0, 30, 30));
        let mut rate = Padding::default();
        assert!(s
            .clone()
            .with_rate(true)
            .select(&rt(), &cands, 0, &mut rate));
        // Three blocks of 960 on each of the 30 CUs: 90/960 of the kernel
        // against version 0's 30/480.
        let p = &rate.parts[0];
        assert_eq!((p.version, p.blocks.len(), p.cus.len()), (1, 90, 30));
        // Rule 1 holds at the co-residency it runs at.
        assert!(vs[1].block_ns(p.per_cu) < rt().kernel_ns);
        // A finer version whose blocks fit no better completes less of
        // its kernel per CU: REEF's choice stays.
        let slow = vec![
            k(480, 4, vec![40_000, 80_000, 120_000, 160_000]),
            k(960, 4, vec![40_000, 80_000, 120_000, 160_000]),
        ];
        let cands = [Candidate {
            versions: &slow,
            ..cands[0]
        }];
        assert!(s.with_rate(true).select(&rt(), &cands, 0, &mut rate));
        assert_eq!(rate.parts[0].version, 0);
    }

    #[test]
    fn a_higher_rate_is_strict_and_ties_go_to_the_shorter_kernel() {
        let s = Selector::new(mi50()).with_waves(true);
        let a = k(100, 4, vec![20_000]);
        let b = k(200, 4, vec![10_000]);
        // Per CU within 61 us: a runs 3 of 100 blocks, b 6 of 200: equal
        // shares, and b is the shorter kernel alone.
        assert!(b.kernel_ns < a.kernel_ns);
        assert!(s.higher_rate(61_000, (&b, 1), (&a, 1)));
        assert!(!s.higher_rate(61_000, (&a, 1), (&b, 1)));
        assert!(!s.higher_rate(61_000, (&a, 1), (&a, 1)));
        // Within 41 us a runs 2 of 100, b 4 of 200; within 39 us a runs 1
        // of 100 and b 3 of 200: b is strictly ahead.
        assert!(s.higher_rate(39_000, (&b, 1), (&a, 1)));
        assert!(!s.higher_rate(39_000, (&a, 1), (&b, 1)));
        // Without waves one block per slot: a completes 1/100, b 1/200.
        let one = Selector::new(mi50());
        assert!(one.higher_rate(61_000, (&a, 1), (&b, 1)));
    }
}
