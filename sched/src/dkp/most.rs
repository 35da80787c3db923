//! `reef-max`'s `most` (issue 28): with `waves`, the co-residency at which
//! a padded slot's blocks fit the most blocks within the real-time kernel's
//! time, rather than the highest co-residency rule 1 admits.
//!
//! REEF §5.2's rule 1 takes a best-effort kernel's block time at the
//! co-residency it will run at, and that time grows with the co-residency
//! (the per-kernel curves behind Fig. 13; the padding table's `latency[k]`,
//! [`super::profile::KernelChar::block_ns`]). With one block per slot the
//! highest admitted co-residency is also the one that runs the most
//! blocks. REEF's implementation runs `be_iters = rt_latency /
//! be_latency_per_iter` blocks one after the other in each slot
//! (`dynamic_kernel_padding`, SJTU-IPADS/reef
//! `src/reef/server/scheduler.cpp`; `reef-max`'s `waves`): a CU then runs
//! `q · ⌊(T_rt − 1) / t(q)⌋` blocks at co-residency `q`, and where the
//! curve is steep a lower `q` runs more of them (e.g. `t(1) = 10`, `t(2) =
//! 30`, `T_rt = 61`: 1 · 6 = 6 blocks at `q = 1`, 2 · 2 = 4 at `q = 2`).
//! Every `q` below the admitted one satisfies rule 1 (the admitted one is
//! the largest whose block time and every smaller co-residency's is below
//! `T_rt`), so the choice keeps the padded launch within the real-time
//! kernel's time. Ties keep the higher co-residency (the launch
//! [`super::select`] would make without this).
//!
//! Only where the kernel cannot end in this launch at the highest
//! co-residency (its remaining blocks exceed what the free CUs run there):
//! a part that ends its kernel is better ended soon, at the highest
//! co-residency, so that `chain` ([`super::chain`]) has the rest of the
//! real-time kernel's time for the task's next kernels (measured: choosing
//! the most blocks everywhere lost 0.12 overall on GV100 A and B,
//! docs/results-max.md).

use super::profile::KernelChar;
use super::select::Selector;

impl Selector {
    /// With `on` (and [`Selector::with_waves`]), each part runs at the
    /// co-residency whose slots fit the most blocks within the real-time
    /// kernel's time where its kernel cannot end in the launch.
    pub fn with_most(mut self, on: bool) -> Self {
        self.most = on;
        self
    }

    /// The co-residency of a part ([`coresidency`] with `most` and
    /// `waves` on, else `p`).
    pub(super) fn most_coresidency(
        &self,
        k: &KernelChar,
        p: u32,
        rt_ns: u64,
        remaining: u32,
        free: u32,
    ) -> u32 {
        if self.waves() && self.most {
            coresidency(k, p, rt_ns, remaining, free)
        } else {
            p
        }
    }
}

/// Blocks one slot of `k` runs one after the other at co-residency `q`
/// within real-time kernel time `rt_ns` (at least one: rule 1 admitted `q`).
pub(super) fn waves_at(k: &KernelChar, q: u32, rt_ns: u64) -> u32 {
    ((rt_ns.saturating_sub(1)) / k.block_ns(q).max(1)).clamp(1, u32::MAX as u64) as u32
}

/// The co-residency for a part of `k` with `remaining` blocks on at most
/// `free` CUs, `p` ≥ 1 the highest rule 1 admits: `p` where the part ends
/// the kernel at `p`, else [`most_blocks`].
pub(super) fn coresidency(k: &KernelChar, p: u32, rt_ns: u64, remaining: u32, free: u32) -> u32 {
    let at_p = free as u64 * p as u64 * waves_at(k, p, rt_ns) as u64;
    if remaining as u64 <= at_p {
        p
    } else {
        most_blocks(k, p, rt_ns)
    }
}

/// The co-residency in `1..=p` (`p` ≥ 1 admitted by rule 1) whose slots run
/// the most blocks of `k` per CU within `rt_ns`, the highest among equals.
pub(super) fn most_blocks(k: &KernelChar, p: u32, rt_ns: u64) -> u32 {
    let per_cu = |q: u32| q as u64 * waves_at(k, q, rt_ns) as u64;
    let mut best = (p, per_cu(p));
    for q in (1..p).rev() {
        let n = per_cu(q);
        if n > best.1 {
            best = (q, n);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::select::{Candidate, Padding};
    use super::*;

    fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
    }

    #[test]
    fn a_steep_curve_fits_more_blocks_at_a_lower_coresidency() {
        let be = k(100_000, 8, vec![10_000, 30_000, 31_000, 62_000]);
        // Rule 1 against a 61 us RT kernel admits co-residency 3.
        assert_eq!(be.max_coresidency_within(8, 61_000), 3);
        // 1 x 6 = 6 blocks at q = 1, 2 x 2 = 4 at q = 2, 3 x 1 = 3 at q = 3.
        assert_eq!(most_blocks(&be, 3, 61_000), 1);
        // A flat curve: the highest co-residency.
        let flat = k(100_000, 8, vec![10_000, 10_000, 10_000, 62_000]);
        assert_eq!(most_blocks(&flat, 3, 61_000), 3);
        // Ties keep the higher one: 1 x 2 = 2 x 1.
        let tie = k(100_000, 8, vec![25_000, 50_000]);
        assert_eq!(most_blocks(&tie, 2, 61_000), 2);
        // A part that ends its kernel at the highest co-residency keeps it:
        // 30 CUs run 90 blocks at q = 3.
        assert_eq!(coresidency(&be, 3, 61_000, 90, 30), 3);
        assert_eq!(coresidency(&be, 3, 61_000, 91, 30), 1);
    }

    #[test]
    fn the_selection_pads_more_blocks_with_it_and_keeps_rule_1() {
        // 30 RT blocks of 61 us, one per CU: 30 CUs left over.
        let rt = k(30, 4, vec![61_000, 70_000]);
        let be = vec![k(100_000, 8, vec![10_000, 30_000, 31_000, 62_000])];
        let cands = [Candidate {
            versions: &be,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        let mut highest = Padding::default();
        let s = Selector::new(mi50()).with_waves(true);
        assert!(s.select(&rt, &cands, 0, &mut highest));
        let p = &highest.parts[0];
        assert_eq!((p.per_cu, p.blocks.len()), (3, 30 * 3));
        let mut most = Padding::default();
        let s = s.with_most(true);
        assert!(s.select(&rt, &cands, 0, &mut most));
        let p = &most.parts[0];
        assert_eq!((p.per_cu, p.blocks.len()), (1, 30 * 6));
        // Six blocks of 10 us one after the other end before the RT kernel.
        assert!(6 * be[0].block_ns(1) < rt.kernel_ns);
        // A kernel that ends in this launch at co-residency 3 is not moved.
        let short = vec![k(60, 8, vec![10_000, 30_000, 31_000, 62_000])];
        let cands = [Candidate {
            versions: &short,
            ..cands[0]
        }];
        assert!(s.select(&rt, &cands, 0, &mut most));
        let p = &most.parts[0];
        assert_eq!((p.per_cu, p.blocks.len(), p.cus.len()), (3, 60, 20));
    }
}
