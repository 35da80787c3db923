//! `reef-max`'s `spread` (issue 28): a padded part that ends its kernel
//! takes CUs the selection left over, so that it ends sooner.
//!
//! REEF's selection gives the best-effort parts the CUs the real-time
//! kernel leaves, greedily, each part as many CUs as its blocks need at the
//! co-residency rule 1 admits (§5.2, Fig. 12 lines 4–10); with `waves` a
//! slot runs several blocks one after the other (REEF's `be_iters`,
//! [`super::max`]), so a part of a few dozen blocks packs onto a few CUs
//! and runs wave after wave for most of the real-time kernel's time while
//! the CUs no task's next kernel could use idle until the launch ends.
//! Where the part ends its kernel, `chain` ([`super::chain`]) runs the
//! task's next kernels after it, behind a grid barrier, in what remains of
//! the real-time kernel's time: the later the part ends, the less remains.
//!
//! After the greedy pass, each part that ends its kernel takes, in the
//! order the pass placed them, as many of the left-over CUs as make it end
//! soonest: the co-residency `q` (at most the one it was given) and the CUs
//! `⌈blocks / q⌉`, bounded by its CUs and the ones left, minimising the
//! part's predicted time `⌈blocks / (CUs · q)⌉ · t(q)` (the curves behind
//! Fig. 13). Every `q` at or below the admitted one satisfies rule 1 and
//! rule 2 (fewer blocks per CU under the same proxy), the part takes only
//! CUs nothing else was given, and the real-time kernel's CUs are not
//! touched, so the launch keeps the real-time kernel's time. What it
//! recovers was measured with a temporary counter in the selection (not
//! kept) on GV100 DISB C, 10 s, before the version bound of 29b11a9: the
//! parts the greedy pass placed held 0.42 of the device's CU time and were
//! busy for 0.35 of it, the chained parts for 0.06; with `spread` the
//! chained parts were busy for 0.10. Its share of `reef-max`'s throughput
//! is in docs/results-max.md's ablation.

use super::chain::part_ns;
use super::select::{Candidate, Padding, Selector};

impl Selector {
    /// With `on`, a part that ends its kernel takes left-over CUs to end
    /// sooner (the module doc).
    pub fn with_spread(mut self, on: bool) -> Self {
        self.spread = on;
        self
    }

    /// Spreads the parts of `out` that end their kernel over the `free`
    /// CUs after the last part's (the greedy pass's layout: parts in
    /// order from the real-time kernel's CUs up), laying the parts out
    /// again in the same order; `free` is what is left after.
    pub(super) fn spread(&self, cands: &[Candidate<'_>], out: &mut Padding, free: &mut u32) {
        let mut next = out.rt_cus;
        for p in out.parts.iter_mut() {
            // Beside the real-time blocks (`share`) is another layout.
            if p.cus.start < out.rt_cus {
                continue;
            }
            let len = p.cus.end - p.cus.start;
            let k = &cands[p.task].versions[p.version as usize];
            let nb = p.blocks.end - p.blocks.start;
            // (time, CUs, co-residency): as the greedy pass placed it.
            let mut best = (part_ns(k, nb, len, p.per_cu), len, p.per_cu);
            if p.blocks.end == k.blocks && *free > 0 {
                for q in 1..=p.per_cu {
                    let cus = nb.div_ceil(q).clamp(len, len + *free);
                    let t = part_ns(k, nb, cus, q);
                    if t < best.0 {
                        best = (t, cus, q);
                    }
                }
            }
            *free -= best.1 - len;
            p.cus = next..next + best.1;
            p.per_cu = best.2.min(nb);
            next += best.1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::profile::KernelChar;
    use super::super::select::Candidate;
    use super::*;

    fn k(blocks: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / 8, curve).unwrap()
    }

    fn cand(v: &[KernelChar]) -> Candidate<'_> {
        Candidate {
            versions: v,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }
    }

    #[test]
    fn a_part_that_ends_its_kernel_spreads_over_the_left_over_cus_and_ends_sooner() {
        // RT kernel: 20 blocks on CUs 0..20, 100 us. The BE kernel: 40
        // blocks, 10 us alone, 15 at two per CU, ... With waves the greedy
        // pass packs them at the highest co-residency rule 1 admits, in
        // several waves per slot on a few CUs.
        let rt = k(20, vec![100_000]);
        let curve: Vec<u64> = (1..=8).map(|q| 5_000 + 5_000 * q).collect();
        let be = vec![k(40, curve)];
        let plain = Selector::new(mi50()).with_waves(true);
        let mut a = Padding::default();
        assert!(plain.select(&rt, &[cand(&be)], 0, &mut a));
        let p = &a.parts[0];
        assert_eq!(p.blocks, 0..40);
        let packed = part_ns(&be[0], 40, p.cus.len() as u32, p.per_cu);
        assert!(p.cus.len() < 40 && p.per_cu > 1, "{p:?}");
        let s = Selector::new(mi50()).with_waves(true).with_spread(true);
        let mut b = Padding::default();
        assert!(s.select(&rt, &[cand(&be)], 0, &mut b));
        let q = &b.parts[0];
        // One block per CU on 40 of the 40 left-over CUs: 10 us.
        assert_eq!(
            (q.cus.clone(), q.per_cu, q.blocks.clone()),
            (20..60, 1, 0..40)
        );
        assert_eq!(part_ns(&be[0], 40, 40, 1), 10_000);
        assert!(10_000 < packed, "{packed}");
        // The real-time kernel's CUs and the launch's proxy are unchanged.
        assert_eq!((b.rt_cus, b.proxy_level), (a.rt_cus, a.proxy_level));
    }

    #[test]
    fn parts_spread_in_order_on_disjoint_cus_and_a_full_device_is_left_alone() {
        let rt = k(20, vec![100_000]);
        let curve: Vec<u64> = (1..=8).map(|q| 5_000 + 5_000 * q).collect();
        let twelve = vec![k(12, curve.clone())];
        let eight = vec![k(8, curve.clone())];
        let plain = Selector::new(mi50()).with_waves(true);
        let s = Selector::new(mi50()).with_waves(true).with_spread(true);
        let cands = [cand(&twelve), cand(&eight)];
        let (mut a, mut b) = (Padding::default(), Padding::default());
        plain.select(&rt, &cands, 0, &mut a);
        s.select(&rt, &cands, 0, &mut b);
        // Packed: both on a CU or two each; spread: a block per CU each,
        // in the greedy pass's order, from the real-time kernel's CUs up.
        assert!(a.parts.iter().all(|p| p.per_cu > 1), "{a:?}");
        assert_eq!(b.parts.len(), 2);
        assert_eq!((b.parts[0].cus.clone(), b.parts[0].per_cu), (20..32, 1));
        assert_eq!((b.parts[1].cus.clone(), b.parts[1].per_cu), (32..40, 1));
        for (p, q) in a.parts.iter().zip(&b.parts) {
            assert_eq!(
                (p.task, p.version, p.blocks.clone()),
                (q.task, q.version, q.blocks.clone())
            );
        }
        // A kernel longer than the left-over CUs run takes them all: no
        // CU is left, nothing changes.
        let long = vec![k(2_000, curve)];
        let cands = [cand(&long)];
        let (mut a, mut b) = (Padding::default(), Padding::default());
        plain.select(&rt, &cands, 0, &mut a);
        s.select(&rt, &cands, 0, &mut b);
        assert_eq!(a, b);
    }
}
