//! Multi-version kernels (REEF §5.3, Fig. 14): candidate implementations of
//! each best-effort kernel and offline dominance pruning.
//!
//! The REEF authors generate versions with TVM's tuner and measure them. We
//! have no GPU and no tuner, so versions are derived from the measured
//! kernel ([`KernelChar`]) by a documented cost model of the three tuning
//! knobs §5.3 names (docs/padding.md "Cost model"):
//! - **tile split `s`** (1, 2, 4, 8, and finer while a block stays above
//!   [`FINE_BLOCK_NS`], [`splits`]): each block computes 1/s of its tile, so
//!   the grid has `s×` the blocks, the per-block work above a fixed
//!   per-block cost `t0` shrinks by `s`, and the loss of operand reuse in
//!   shared memory costs `REUSE_LOSS` more work per halving. Shared memory
//!   that stages tiles (≥ `TILE_LDS_MIN` bytes) shrinks by `s`.
//!   Calibration: Fig. 14 (VGG convolution on the MI50): the fastest kernel
//!   has 30.8 µs blocks, the shortest-block version 18.0 µs; a split of 2
//!   gives 30.8 × (1 + 0.15) / 2 = 17.7 µs.
//! - **block size** (threads halved, blocks doubled, same work per thread):
//!   a half-size block does half the work; two of them contend like one
//!   full block.
//! - **unrolling** (registers halved): less unrolling frees registers, so
//!   the register-bound occupancy doubles, at `UNROLL_LOSS` more time for
//!   the work part of each block.
//!
//! [`prune`] removes every version dominated by another one over the six
//! criteria of §5.3: kernel execution time, block execution time,
//! registers, shared memory, block size and block number (lower is better
//! in each; dominance needs ≤ in all and < in one).

use super::profile::{DeviceLimits, KernelChar};

/// Extra work per halving of the tile (loss of reuse), from Fig. 14.
pub const REUSE_LOSS: f64 = 0.15;
/// Extra work of a block compiled with half the registers (less unrolling).
/// Assumption (no published figure): the same order as the reuse loss.
pub const UNROLL_LOSS: f64 = 0.25;
/// Shared memory below this is bookkeeping, not a staged tile.
pub const TILE_LDS_MIN: u32 = 256;

/// One-block time (ns) past which a split of 8 is halved again: the
/// shortest block execution time among the 1,000 TVM versions of the VGG
/// convolution on the MI50 (Fig. 14, 18.0 µs), a block time the paper's
/// tuner reaches. Without it a kernel of long blocks (inception kernel 52,
/// 328 µs) has no version that fits the short real-time kernels
/// (docs/padding.md "Multi-version cost model").
pub const FINE_BLOCK_NS: u64 = 18_000;
/// The finest tile split derived.
pub const MAX_SPLIT: u32 = 64;

/// The tile splits derived for `base`: 1, 2, 4 and 8, then halving on
/// (up to [`MAX_SPLIT`]) while one split block is longer than
/// [`FINE_BLOCK_NS`]. Every split is a power of two, so every version's
/// grid is the base grid times a power of two and a finer version tiles
/// each block of a coarser one exactly (what lets a started kernel
/// continue in a finer version, `Selector::select`).
///
/// Only a grid that already has a block per compute unit is split past 8:
/// a smaller grid split finer spreads over more CUs, so the cost model
/// made its stand-alone kernel time drop and §5.3's choice took it
/// wherever it passed, while under padding (the CUs the RT kernel leaves
/// over) it cost more total block time (docs/results-dkp.md "Tile splits
/// beyond 8": bert-resnet152 lost a fifth of its BE throughput that way,
/// measured before `no_faster_alone` bounded such versions to the
/// measured kernel's time).
pub fn splits(limits: &DeviceLimits, base: &KernelChar, t0: u64) -> Vec<u32> {
    let mut v = vec![1u32, 2, 4, 8];
    if base.blocks < limits.compute_units {
        return v;
    }
    let one = |s: u32| {
        let t = base.block_ns(1);
        let w = t.saturating_sub(t0) as f64 / s as f64 * (1.0 + REUSE_LOSS * (s as f64).log2());
        t0.min(t) + w.round() as u64
    };
    let mut s = 8;
    while s < MAX_SPLIT && one(s) > FINE_BLOCK_NS {
        s *= 2;
        v.push(s);
    }
    v
}

/// The knobs a version was derived with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    pub split: u32,
    pub half_threads: bool,
    pub half_regs: bool,
}

/// Derives the candidate versions of `base` (the first is `base` itself),
/// before pruning. `t0` is the fixed per-block cost (ns) that does not shrink
/// with the tile (the device's shortest block).
pub fn derive(limits: &DeviceLimits, base: &KernelChar, t0: u64) -> Vec<(Knobs, KernelChar)> {
    let mut out = vec![(
        Knobs {
            split: 1,
            half_threads: false,
            half_regs: false,
        },
        base.clone(),
    )];
    // Registers per lane the base kernel holds, rounded down: a block's
    // register count is exact or (inferred from the measured curve's
    // length, docs/padding.md) the most that still lets the measured
    // occupancy fit, so the compiled per-lane count is at most this.
    // Rounding up (`KernelChar::regs_per_thread`) could describe a block
    // that no longer fits as many times on a CU as it was measured to
    // (65536 registers over 640 lanes: 103 per lane = 65920 > 65536), and
    // halving that would not double the register-bound occupancy, which is
    // what the half-register knob does.
    let per_lane = base.regs_per_block / limits.block_registers(1, base.threads);
    for split in splits(limits, base, t0) {
        for half_threads in [false, true] {
            for half_regs in [false, true] {
                if split == 1 && !half_threads && !half_regs {
                    continue;
                }
                if half_threads && base.threads < 2 * limits.wave_size {
                    continue;
                }
                let Some(blocks) = base
                    .blocks
                    .checked_mul(split * if half_threads { 2 } else { 1 })
                else {
                    continue;
                };
                let threads = if half_threads {
                    base.threads / 2
                } else {
                    base.threads
                };
                let lds = if base.lds >= TILE_LDS_MIN {
                    base.lds.div_ceil(split * if half_threads { 2 } else { 1 })
                } else {
                    base.lds
                };
                let rpt = if half_regs {
                    (per_lane / 2).max(1)
                } else {
                    per_lane
                };
                let regs = limits.block_registers(rpt, threads);
                let occ = limits.occupancy(threads, lds, regs);
                if occ == 0 {
                    continue;
                }
                let work_div = split as f64 * if half_threads { 2.0 } else { 1.0 };
                let loss = 1.0 + REUSE_LOSS * (work_div.log2());
                let unroll = if half_regs { 1.0 + UNROLL_LOSS } else { 1.0 };
                let curve: Vec<u64> = (1..=occ)
                    .map(|k| {
                        // Two half-size blocks contend like one full block.
                        let kk = if half_threads { k.div_ceil(2) } else { k };
                        let t = base.block_ns(kk);
                        let work = t.saturating_sub(t0) as f64 / work_div * loss * unroll;
                        t0.min(t) + work.round() as u64
                    })
                    .collect();
                if let Some(c) = no_faster_alone(limits, base, blocks, threads, lds, regs, curve) {
                    out.push((
                        Knobs {
                            split,
                            half_threads,
                            half_regs,
                        },
                        c,
                    ));
                }
            }
        }
    }
    out
}

/// A derived version as [`KernelChar::new`] builds it, slowed where it
/// would run faster alone than `base`, by the least factor that makes its
/// stand-alone kernel time `base`'s: first its contention (the curve at two
/// or more co-resident blocks), then, where its kernel time still rests on
/// blocks alone on their CUs, its whole curve.
///
/// Why: the measured kernel is the one the compiler's tuner chose, and it
/// chooses "the kernel implementation with the shortest kernel execution
/// time" (REEF §5.3) over the tuning space these versions stand for;
/// Fig. 14's versions with shorter blocks are all slower kernels than the
/// fastest. The cost model makes a version faster alone wherever its extra
/// blocks fill CUs or co-residency slots the measured grid leaves idle
/// (every kernel of the five MI50 and GV100 models had one until this
/// bound); such a version would have been the tuner's choice, so on the
/// hardware it is slower than the model says: the stand-in was kinder than
/// the GPU. What makes a finer tiling slower on a full device is the
/// traffic its extra blocks add (each sub-tile loads its operands again),
/// which shows where blocks share a CU and the memory system, not in one
/// block alone: so the contention is raised first and the one-block time
/// (Fig. 14's 18 µs blocks) is kept where that suffices (docs/padding.md
/// "Multi-version cost model").
fn no_faster_alone(
    limits: &DeviceLimits,
    base: &KernelChar,
    blocks: u32,
    threads: u32,
    lds: u32,
    regs: u32,
    mut curve: Vec<u64>,
) -> Option<KernelChar> {
    // Pass 0 scales co-residency 2 and up, pass 1 the whole curve. Rounding
    // each entry up keeps a kernel time that rests only on scaled entries
    // at or above `base`'s.
    for from in [1, 0] {
        let c = KernelChar::new(limits, blocks, threads, lds, regs, curve.clone())?;
        if c.kernel_ns >= base.kernel_ns || c.kernel_ns == 0 {
            return Some(c);
        }
        if curve.len() <= from {
            continue;
        }
        let f = base.kernel_ns as f64 / c.kernel_ns as f64;
        for t in &mut curve[from..] {
            *t = (*t as f64 * f).ceil() as u64;
        }
    }
    KernelChar::new(limits, blocks, threads, lds, regs, curve)
}

/// Whether `a` dominates `b` over the six criteria of §5.3.
pub fn dominates(a: &KernelChar, b: &KernelChar) -> bool {
    let ka = crit(a);
    let kb = crit(b);
    ka.iter().zip(&kb).all(|(x, y)| x <= y) && ka.iter().zip(&kb).any(|(x, y)| x < y)
}

fn crit(k: &KernelChar) -> [u64; 6] {
    [
        k.kernel_ns,
        k.block_ns(k.occupancy),
        k.regs_per_block as u64,
        k.lds as u64,
        k.threads as u64,
        k.blocks as u64,
    ]
}

/// Offline pruning: keeps the versions no other version dominates, in their
/// original order (so the default version, never dominated by a slower
/// re-tiling in kernel time, stays first when it survives). Exact duplicates
/// keep their first copy.
pub fn prune<T>(versions: Vec<(T, KernelChar)>) -> Vec<(T, KernelChar)> {
    let n = versions.len();
    let keep: Vec<bool> = (0..n)
        .map(|i| {
            !(0..n).any(|j| {
                j != i
                    && (dominates(&versions[j].1, &versions[i].1)
                        || (j < i && crit(&versions[j].1) == crit(&versions[i].1)))
            })
        })
        .collect();
    versions
        .into_iter()
        .zip(keep)
        .filter_map(|(v, k)| k.then_some(v))
        .collect()
}

/// The pruned versions of `base`, default first.
pub fn versions(limits: &DeviceLimits, base: &KernelChar, t0: u64) -> Vec<KernelChar> {
    let mut v: Vec<KernelChar> = prune(derive(limits, base, t0))
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    // The default version must be available (normal-mode launches use it).
    if v.first() != Some(base) {
        v.retain(|k| k != base);
        v.insert(0, base.clone());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::*;

    fn conv() -> KernelChar {
        conv_of(960)
    }

    /// Fig. 14-like convolution: `blocks` blocks of 256 threads, 8 KiB
    /// LDS, 8 per CU by registers, 30.8 us blocks growing with contention.
    /// 960 blocks are two full waves on the MI50's 60 CUs.
    fn conv_of(blocks: u32) -> KernelChar {
        KernelChar::new(
            &mi50(),
            blocks,
            256,
            8192,
            65536 / 8,
            vec![
                30_800, 40_000, 50_000, 60_000, 70_000, 80_000, 90_000, 100_000,
            ],
        )
        .unwrap()
    }

    #[test]
    fn split_of_two_matches_fig14() {
        let d = derive(&mi50(), &conv(), 1_000);
        let (_, s2) = d
            .iter()
            .find(|(k, _)| k.split == 2 && !k.half_threads && !k.half_regs)
            .unwrap();
        assert_eq!(s2.blocks, 1920);
        assert_eq!(s2.lds, 4096);
        // 1 + 29.8 / 2 × 1.15 = 18.1 us (Fig. 14: 18.0 us).
        assert_eq!(s2.block_ns(1), 1_000 + 17_135);
        assert!(s2.block_ns(1) < conv().block_ns(1));
        // Half registers: occupancy doubles (waves allow 10).
        let (_, hr) = d
            .iter()
            .find(|(k, _)| k.split == 1 && !k.half_threads && k.half_regs)
            .unwrap();
        assert_eq!(hr.occupancy, 8.max(conv().occupancy).min(10));
    }

    #[test]
    fn a_version_is_never_faster_alone_than_the_measured_kernel() {
        // 64 blocks on 60 CUs: the measured grid puts two blocks on four
        // CUs (40 us). Split in two, 128 blocks put three on eight CUs at
        // 1 + 49 / 2 × 1.15 = 29.2 us: a faster kernel, which the tuner
        // that chose the measured one would have taken (REEF §5.3). It is
        // slowed to the measured kernel's time; its blocks stay shorter.
        let base = conv_of(64);
        assert_eq!(base.kernel_ns, 40_000);
        let d = derive(&mi50(), &base, 1_000);
        let (_, s2) = d
            .iter()
            .find(|(k, _)| k.split == 2 && !k.half_threads && !k.half_regs)
            .unwrap();
        assert!(s2.kernel_ns >= base.kernel_ns);
        assert!(s2.kernel_ns < base.kernel_ns + 8, "{}", s2.kernel_ns);
        // Its time rests on three blocks per CU: the contention is raised
        // (29 175 ns × 40 000 / 29 175), one block alone keeps Fig. 14's
        // 18.1 us.
        assert_eq!(s2.block_ns(1), 1_000 + 17_135);
        assert_eq!(s2.block_ns(3), 40_000);
        // A split of a grid of 16 blocks puts one block per CU: only its
        // one-block time can make it as slow as the measured kernel.
        let small = conv_of(16);
        let d16 = derive(&mi50(), &small, 1_000);
        let (_, s2) = d16
            .iter()
            .find(|(k, _)| k.split == 2 && !k.half_threads && !k.half_regs)
            .unwrap();
        assert_eq!(s2.blocks, 32);
        assert!(s2.kernel_ns >= small.kernel_ns);
        assert!(s2.block_ns(1) >= small.block_ns(1));
        for (knobs, v) in &d {
            assert!(v.kernel_ns >= base.kernel_ns, "{knobs:?}: {}", v.kernel_ns);
        }
        // Where the version is the slower kernel anyway (two full waves),
        // its curve is the cost model's own (the Fig. 14 test above).
        let big = conv();
        for (_, v) in derive(&mi50(), &big, 1_000).iter().skip(1) {
            assert!(v.kernel_ns >= big.kernel_ns);
        }
    }

    #[test]
    fn half_registers_double_an_inferred_register_bound_occupancy() {
        // One block per CU by registers, inferred from a one-point curve:
        // 65536 registers over 10 waves (640 lanes), 102.4 per lane. The
        // half-register version holds at most 51 per lane and fits twice
        // (four times at half threads); rounded up (103, then 52) it
        // fitted once (three times), and rule 2 kept it from every RT
        // kernel of occupancy 4 (bert-inception, docs/results-dkp.md).
        let d = mi50();
        let base = KernelChar::new(&d, 48, 578, 13412, 65536, vec![68_000]).unwrap();
        assert_eq!(base.occupancy, 1);
        let all = derive(&d, &base, 1_000);
        let occ = |split: u32, half_threads: bool, half_regs: bool| {
            all.iter()
                .find(|(k, _)| {
                    *k == Knobs {
                        split,
                        half_threads,
                        half_regs,
                    }
                })
                .map(|(_, v)| v.occupancy)
        };
        assert_eq!(occ(1, false, true), Some(2));
        assert_eq!(occ(1, true, true), Some(4));
        // Every derived version fits on a CU, re-tilings included.
        assert_eq!(occ(2, false, false), Some(1));
    }

    #[test]
    fn dominance_needs_all_six_criteria() {
        let d = mi50();
        let a = KernelChar::new(&d, 10, 64, 0, 64 * 16, vec![1_000]).unwrap();
        let slower = KernelChar::new(&d, 10, 64, 0, 64 * 16, vec![2_000]).unwrap();
        let more_blocks_faster = KernelChar::new(&d, 20, 64, 0, 64 * 16, vec![500]).unwrap();
        assert!(dominates(&a, &slower));
        assert!(!dominates(&slower, &a));
        assert!(!dominates(&a, &a));
        assert!(!dominates(&a, &more_blocks_faster));
        assert!(!dominates(&more_blocks_faster, &a));
        let pruned = prune(vec![
            (0, slower.clone()),
            (1, a.clone()),
            (2, more_blocks_faster),
        ]);
        let ids: Vec<i32> = pruned.iter().map(|(i, _)| *i).collect();
        assert_eq!(ids, vec![1, 2]);
        // Duplicates keep the first.
        let pruned = prune(vec![(0, a.clone()), (1, a)]);
        assert_eq!(pruned.len(), 1);
        assert_eq!(pruned[0].0, 0);
    }

    #[test]
    fn floor_bound_kernels_lose_their_useless_splits() {
        // Element-wise kernel at the per-block floor, no staged tile:
        // splitting only adds blocks, so pruning drops those versions.
        let d = mi50();
        let ew = KernelChar::new(&d, 48, 256, 4, 65536 / 8, vec![1_000; 8]).unwrap();
        let all = derive(&d, &ew, 1_000);
        let kept = versions(&d, &ew, 1_000);
        assert!(kept.len() < all.len());
        assert_eq!(kept[0], ew);
        for k in &kept[1..] {
            assert!(!dominates(&ew, k));
        }
        // The pruned set (the default is kept even when dominated, since
        // normal-mode launches use it) is an antichain.
        for a in &kept[1..] {
            for b in &kept[1..] {
                assert!(!dominates(a, b));
            }
        }
    }

    #[test]
    fn compute_bound_kernels_keep_tradeoffs() {
        let d = mi50();
        let kept = versions(&d, &conv(), 1_000);
        assert!(kept.len() >= 4, "{}", kept.len());
        assert_eq!(kept[0], conv());
        // Some kept version has shorter blocks than the default.
        assert!(kept.iter().any(|k| k.block_ns(1) < conv().block_ns(1)));
    }
}
