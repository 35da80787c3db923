//! Aker's offline models and online decision rules, free of any device
//! (../shared/papers/aker-adaptive-kernel-fusion.txt; docs/aker.md):
//! - §6 the duration predictor: a linear regression per kernel (blocks →
//!   stand-alone duration, §6.3 step 1) and a two-stage linear regression
//!   per fused kernel version over the load ratio (Eq. 1, Fig. 8), whose
//!   duration at a fixed load ratio is linear in component 1's time (Fig. 9);
//! - §7 the search: the opportune load ratio of a version (the inflection
//!   of its two stages) and the version with the largest makespan
//!   reduction there (Eq. 2);
//! - §8.2 the kernel split: how many of a BE kernel's blocks go into the
//!   fused kernel at the opportune ratio;
//! - §8.3 the QoS headroom (Eq. 3–5) and the choice, at each LC kernel,
//!   between the original kernel, a fused kernel (Eq. 4, largest T_gain) and
//!   a directly launched BE kernel.
//!
//! - [`manager`]: the `aker`, `baymax` and `tacker` schedulers built on
//!   these rules (§8.3, §9.3).
//!
//! Everything here is arithmetic on predicted durations in nanoseconds: the
//! samples come from whoever profiles (reef-bench `aker` profiles on the
//! simulated device; the daemon would on a real one).

pub mod manager;
pub use manager::*;

/// Ordinary least squares `y = a + b x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub a: f64,
    pub b: f64,
}

impl Line {
    /// The least-squares line through `pts`; `None` with fewer than two
    /// distinct x values.
    pub fn fit(pts: &[(f64, f64)]) -> Option<Line> {
        let n = pts.len() as f64;
        if pts.len() < 2 {
            return None;
        }
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        if sxx <= 0.0 || !sxx.is_finite() {
            return None;
        }
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let b = sxy / sxx;
        Some(Line { a: my - b * mx, b })
    }

    pub fn at(&self, x: f64) -> f64 {
        self.a + self.b * x
    }
}

/// §6.3 step 1: a kernel's stand-alone duration from its block count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelModel(pub Line);

impl KernelModel {
    /// From profiled (blocks, duration ns) runs.
    pub fn fit(samples: &[(u32, u64)]) -> Option<Self> {
        let pts: Vec<_> = samples.iter().map(|&(b, d)| (b as f64, d as f64)).collect();
        Line::fit(&pts).map(KernelModel)
    }

    pub fn predict(&self, blocks: u32) -> f64 {
        self.0.at(blocks as f64).max(0.0)
    }
}

/// The load ratios §6.3 profiles each fused version at to build its model:
/// 10 %, 20 % (co-run stage) and 180 %, 190 % (solo-run stage).
pub const TRAINING_RATIOS: [f64; 4] = [0.1, 0.2, 1.8, 1.9];

/// §6.2: a fused kernel version's duration, normalised by component 1's
/// original time `X_k1`, as a function of the load ratio `r = X_k2 / X_k1`
/// (Eq. 1): the larger of the co-run line and the solo-run line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoStage {
    pub co: Line,
    pub solo: Line,
}

impl TwoStage {
    /// From profiled samples `(r, fused / X_k1)` taken at the four
    /// [`TRAINING_RATIOS`] in order: the first two fit the co-run stage, the
    /// last two the solo-run stage (§6.3). When a stage's two samples share
    /// one measured ratio (the kernel's grid granularity), its line goes
    /// through their mean with the slope §6.1 observes: 0 for the co-run
    /// stage's floor, 1 for the solo-run stage ("the sharper slope is 1").
    pub fn fit(samples: &[(f64, f64)]) -> Option<Self> {
        if samples.len() != 4 || samples.iter().any(|s| !s.0.is_finite() || !s.1.is_finite()) {
            return None;
        }
        let stage = |pts: &[(f64, f64)], slope: f64| {
            Line::fit(pts).unwrap_or_else(|| {
                let (mx, my) = ((pts[0].0 + pts[1].0) / 2.0, (pts[0].1 + pts[1].1) / 2.0);
                Line {
                    a: my - slope * mx,
                    b: slope,
                }
            })
        };
        Some(TwoStage {
            co: stage(&samples[..2], 0.0),
            solo: stage(&samples[2..], 1.0),
        })
    }

    /// Normalised fused duration at load ratio `r`.
    pub fn norm(&self, r: f64) -> f64 {
        self.co.at(r).max(self.solo.at(r))
    }

    /// Predicted fused duration (ns) of components with original times
    /// `x1`, `x2` (ns): linear in `x1` at a fixed ratio (§6.1, Fig. 9).
    pub fn predict(&self, x1: f64, x2: f64) -> f64 {
        if x1 <= 0.0 {
            return x2.max(0.0);
        }
        (x1 * self.norm(x2 / x1)).max(x1.max(0.0))
    }

    /// §7: the opportune load ratio, where the two stages meet (both
    /// components co-run and finish together); clamped to [0, 2].
    pub fn opportune(&self) -> f64 {
        let db = self.solo.b - self.co.b;
        if db.abs() < 1e-12 {
            return 1.0;
        }
        ((self.co.a - self.solo.a) / db).clamp(0.0, 2.0)
    }

    /// §7: makespan reduction at the opportune ratio, normalised by `X_k1`:
    /// serial time `1 + r` less the fused time (`1 + X − Y` in Eq. 2).
    pub fn reduction(&self) -> f64 {
        let r = self.opportune();
        1.0 + r - self.norm(r)
    }
}

/// §7: the version with the largest makespan reduction at its opportune
/// ratio (index into `versions`), if any reduces the makespan at all.
pub fn best_version(versions: &[TwoStage]) -> Option<usize> {
    versions
        .iter()
        .enumerate()
        .filter(|(_, v)| v.reduction() > 0.0)
        .max_by(|a, b| a.1.reduction().total_cmp(&b.1.reduction()))
        .map(|(i, _)| i)
}

/// §8.2: how many of a BE kernel's `blocks` (stand-alone duration model
/// `be`) go into a fused kernel with an LC kernel of original time `x1`
/// (ns) at load ratio `r`: the most whose predicted time is at most
/// `r x x1`, at least 1 and at most all of them. The rest is launched later
/// as the split's second kernel.
pub fn split_blocks(be: &KernelModel, blocks: u32, x1: f64, r: f64) -> u32 {
    let want = r * x1;
    let (mut lo, mut hi) = (1u32, blocks.max(1));
    if be.predict(hi) <= want {
        return hi;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if be.predict(mid) <= want {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// §8.3.1 / Eq. 5: the QoS headroom of an LC query when it is issued, ns:
/// `T_qos − T_queue − T_ori_solo − Σ remaining GPU time of earlier active
/// LC queries`. Negative means the query is already late on prediction.
pub fn headroom(qos: f64, queue: f64, ori_solo: f64, earlier_remaining: &[f64]) -> f64 {
    qos - queue - ori_solo - earlier_remaining.iter().sum::<f64>()
}

/// A fused-kernel candidate at the current LC kernel (§8.3.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FuseCandidate {
    /// Which BE kernel (caller's index).
    pub be: usize,
    /// Predicted duration of the fused kernel, `T_k_fuse`.
    pub fused: f64,
    /// Original time of the BE work it contains, `T_cd-1`.
    pub be_part: f64,
}

/// What the manager does at an LC kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Launch the fused kernel of candidate `i`; the headroom shrinks by
    /// `T_k_fuse − T_lc`.
    Fuse(usize),
    /// Launch BE kernel `be` (caller's index) before the LC kernel; the
    /// headroom shrinks by its predicted duration.
    Direct(usize),
    /// Launch the LC kernel alone.
    Original,
}

/// §8.3.1: at an LC kernel of predicted duration `lc` with headroom `hr`:
/// among candidates satisfying Eq. 4 (`T_k_fuse − T_lc < T_hr`) and with a
/// positive throughput gain `T_gain = T_cd-1 − (T_k_fuse − T_lc)`, the one
/// with the largest gain; else the first ready BE kernel whose predicted
/// duration (`direct[i]` = (index, ns)) is below the headroom; else the
/// original kernel. Returns the decision and the headroom left.
pub fn decide(
    lc: f64,
    hr: f64,
    cands: &[FuseCandidate],
    direct: &[(usize, f64)],
) -> (Decision, f64) {
    let best = cands
        .iter()
        .enumerate()
        .filter(|(_, c)| c.fused - lc < hr && c.be_part - (c.fused - lc) > 0.0)
        .max_by(|a, b| {
            let g = |c: &FuseCandidate| c.be_part - (c.fused - lc);
            g(a.1).total_cmp(&g(b.1))
        });
    if let Some((i, c)) = best {
        return (Decision::Fuse(i), hr - (c.fused - lc));
    }
    if let Some(&(be, d)) = direct.iter().find(|(_, d)| *d < hr) {
        return (Decision::Direct(be), hr - d);
    }
    (Decision::Original, hr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn two_stage_from_the_four_training_ratios() {
        // A version whose co-run stage is 1 + 0.2 r and solo stage r + 0.3:
        // they meet at r = 0.875, where the fused kernel takes 1.175 X_k1
        // against a serial 1.875: a reduction of 0.7.
        let truth = |r: f64| (1.0 + 0.2 * r).max(r + 0.3);
        let s: Vec<_> = TRAINING_RATIOS.iter().map(|&r| (r, truth(r))).collect();
        let m = TwoStage::fit(&s).unwrap();
        assert!((m.opportune() - 0.875).abs() < 1e-9);
        assert!((m.reduction() - 0.7).abs() < 1e-9);
        for r in [0.0, 0.5, 1.0, 1.5, 2.0] {
            assert!((m.norm(r) - truth(r)).abs() < 1e-9);
        }
        // Linear in X_k1 at a fixed ratio.
        assert!((m.predict(2000.0, 1000.0) - 2.0 * m.predict(1000.0, 500.0)).abs() < 1e-6);
    }

    #[test]
    fn search_picks_the_largest_reduction() {
        let v = |c: f64, s: f64| TwoStage {
            co: Line { a: 1.0, b: c },
            solo: Line { a: s, b: 1.0 },
        };
        // Reductions: co slope 0.5, solo 0: meet at 2 (clamped), 1+2-2 = 1.
        let vs = [v(0.9, 0.5), v(0.2, 0.3), v(0.5, 0.0)];
        let red: Vec<f64> = vs.iter().map(|x| x.reduction()).collect();
        let best = best_version(&vs).unwrap();
        assert!(red.iter().all(|&r| r <= red[best]));
        // A version that only loses is never chosen.
        assert_eq!(best_version(&[v(1.5, 1.0)]), None);
    }

    #[test]
    fn split_fits_the_ratio() {
        let be = KernelModel::fit(&[(100, 10_000), (200, 20_000), (400, 40_000)]).unwrap();
        assert_eq!(split_blocks(&be, 1000, 50_000.0, 0.5), 250);
        assert_eq!(split_blocks(&be, 100, 50_000.0, 0.5), 100);
        assert_eq!(split_blocks(&be, 1000, 50_000.0, 0.0), 1);
    }

    #[test]
    fn headroom_subtracts_earlier_queries() {
        assert_eq!(headroom(50.0, 5.0, 20.0, &[]), 25.0);
        assert_eq!(headroom(50.0, 5.0, 20.0, &[10.0, 20.0]), -5.0);
    }

    proptest! {
        /// The manager never picks a fused kernel whose predicted extra
        /// time exceeds the headroom (Eq. 4), never launches a BE kernel
        /// longer than the headroom, and never leaves negative headroom
        /// from a positive one.
        #[test]
        fn never_beyond_the_headroom(
            lc in 1.0f64..1e6,
            hr in -1e5f64..1e6,
            cands in proptest::collection::vec((0.0f64..3e6, 0.0f64..2e6), 0..8),
            direct in proptest::collection::vec(0.0f64..2e6, 0..8),
        ) {
            let cs: Vec<_> = cands.iter().enumerate()
                .map(|(i, &(f, p))| FuseCandidate { be: i, fused: f, be_part: p }).collect();
            let ds: Vec<_> = direct.iter().copied().enumerate().collect();
            let (d, left) = decide(lc, hr, &cs, &ds);
            match d {
                Decision::Fuse(i) => {
                    prop_assert!(cs[i].fused - lc < hr);
                    prop_assert!(left > 0.0 || hr <= 0.0 || cs[i].fused < lc);
                }
                Decision::Direct(i) => prop_assert!(ds[i].1 < hr),
                Decision::Original => {
                    prop_assert_eq!(left, hr);
                    prop_assert!(!cs.iter().any(|c| c.fused - lc < hr && c.be_part > c.fused - lc));
                    prop_assert!(!ds.iter().any(|d| d.1 < hr));
                }
            }
        }
    }
}
