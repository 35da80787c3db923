//! `reef-max`'s `share` (issue 28): best-effort blocks on a padded
//! real-time kernel's own compute units, admitted only where a prediction
//! from the padding table's per-kernel co-residency curves says the
//! real-time kernel's slowdown stays within a budget.
//!
//! Padding gives a real-time kernel whole CUs (REEF §5.2, Fig. 12 lines
//! 1–3: "it first reserves enough CUs for the real-time kernel") so that it
//! runs as fast as alone; GPU streams also place best-effort blocks beside
//! real-time blocks on one CU, which is where their extra best-effort
//! throughput comes from and what slows their real-time requests
//! (docs/results-max.md section 1). Aker §3 (Table 1, "false high
//! utilization") shows that a CU running one kernel often has issue slots
//! and bandwidth left that a co-resident kernel can use, and §4 / §8.3.1
//! admit such co-running only when a duration predictor says the
//! latency-critical query stays within its QoS headroom. Here the headroom
//! is the target itself: a real-time request is a chain of kernels,
//! so if no kernel of it is predicted slower than `1 + β` times its time
//! alone, neither is the request. The target's mean bound is 1.02; `β` is
//! half of it, [`BUDGET_PERMILLE`], leaving the other half for what the
//! curves do not predict (the device's shared DRAM bandwidth and L2, which
//! padding already pays, REEF §6.5 Fig. 27).
//!
//! **Prediction.** The table holds, per kernel, one block's time with `k`
//! co-resident blocks *of that kernel* on a CU (REEF §5.2, Fig. 13; the
//! `latency[k]` curves). A best-effort block beside it is counted as the
//! real-time blocks' equivalent of its waves (`q` blocks of `w_be` waves
//! beside `p` real-time blocks of `w_rt` waves: co-residency `p + ⌈q w_be /
//! w_rt⌉`), and the curve's non-decreasing ceiling is read there. That is
//! an upper bound whenever a best-effort wave loads no pipe of the CU more
//! than a real-time wave at its busiest does (Aker §3's point is that it
//! often loads less); the simulator's resource mix (docs/simulator.md
//! "Resource mix inside a compute unit") charges exactly that or less. The
//! best-effort blocks are bounded the same way (their own curve at `q +
//! ⌈p w_rt / w_be⌉`), and a slot's blocks, one after the other (`waves`),
//! must end before the real-time kernel's time alone (rule 1 of §5.2), so
//! the padded launch does not outlast it.
//!
//! **Admission.** Only a real-time kernel whose blocks all fit its
//! reserved CUs at once under the proxy allocation (one wave of blocks)
//! is shared; the best-effort blocks must fit beside them on every CU
//! (threads, waves, blocks, shared memory, registers, all under the proxy
//! allocation of the launch, which sharing does not change), and each CU
//! holds at most one shared part. A task already padded on the free CUs
//! of the same launch continues its kernel on the shared CUs (the next
//! block range, same version); another task's next kernel starts there.
//! Sharing never moves the CU partition of §5.2: it only adds blocks.

use super::profile::{DeviceLimits, KernelChar};
use super::select::{continue_at, Candidate, Padding, Part};

/// The slowdown budget `β` of a shared real-time kernel, in 1/1000 of its
/// time alone: half the target's 2 % mean (module doc).
pub const BUDGET_PERMILLE: u32 = 10;

fn waves_of(limits: &DeviceLimits, threads: u32) -> u32 {
    threads.div_ceil(limits.wave_size).max(1)
}

/// Largest `q` blocks per CU of best-effort kernel `k` that may share the
/// CUs of real-time kernel `rt` (`p_rt` blocks on each), with the slot's
/// blocks per CU one after the other (`waves`) and one block's bound
/// time; `None` when none may.
///
/// Every condition on `q` (the CU's resources, the real-time blocks'
/// bound within the budget, rule 1 for the best-effort blocks) only gets
/// harder as `q` grows: resources are linear in `q`, and a curve's
/// ceiling and its extension are non-decreasing, so
/// `max_coresidency_within(c, l) >= c` holds exactly for `c` up to one
/// bound. The largest admissible `q` is therefore the least of the
/// per-condition bounds, found with two curve searches instead of two per
/// candidate `q` (the decision cost, issue 28; `coresidency_by_walk` in
/// the tests is the walk over `q` this replaces, and a property test
/// checks both agree).
#[allow(clippy::too_many_arguments)]
fn coresidency(
    limits: &DeviceLimits,
    rt: &KernelChar,
    p_rt: u32,
    k: &KernelChar,
    alloc: u32,
    lds: u32,
    budget: u32,
    waves: bool,
) -> Option<(u32, u32)> {
    let (w_rt, w_be) = (waves_of(limits, rt.threads), waves_of(limits, k.threads));
    let (r_rt, r_be) = (
        limits.block_registers(alloc, rt.threads),
        limits.block_registers(alloc, k.threads),
    );
    let rt_limit = rt.kernel_ns + rt.kernel_ns * budget as u64 / 1000;
    // Largest q with `used + q * per <= cap` (any q when `per` is 0).
    let room = |cap: u64, used: u64, per: u64| match cap.checked_sub(used) {
        None => 0,
        Some(left) => left.checked_div(per).unwrap_or(u64::MAX),
    };
    let p = p_rt as u64;
    let q_max = (k.occupancy as u64)
        .min(room(
            limits.max_threads_per_cu as u64,
            p * rt.threads as u64,
            k.threads as u64,
        ))
        .min(room(
            limits.max_waves_per_cu as u64,
            p * w_rt as u64,
            w_be as u64,
        ))
        .min(room(limits.max_blocks_per_cu as u64, p, 1))
        .min(room(
            limits.lds_bytes_per_cu as u64,
            p * lds as u64,
            lds as u64,
        ))
        .min(room(
            limits.registers_per_cu as u64,
            p * r_rt as u64,
            r_be as u64,
        )) as u32;
    if q_max == 0 {
        return None;
    }
    // The real-time blocks at co-residency `p_rt + ceil(q w_be / w_rt)`,
    // read on the curve's ceiling: within the budget up to `c_rt`.
    let k_rt = |q: u32| p_rt + (q * w_be).div_ceil(w_rt);
    let c_rt = rt.max_coresidency_within(k_rt(q_max), rt_limit + 1);
    // ceil(q w_be / w_rt) <= c_rt - p_rt  <=>  q w_be <= (c_rt - p_rt) w_rt.
    let q_rt = c_rt.checked_sub(p_rt).map_or(0, |d| d * w_rt / w_be);
    // The best-effort blocks beside the real-time ones at `q + be_extra`:
    // rule 1 up to `c_be`.
    let be_extra = (p_rt * w_rt).div_ceil(w_be);
    let c_be = k.max_coresidency_within(q_max + be_extra, rt.kernel_ns);
    let q_be = c_be.saturating_sub(be_extra);
    let q = q_max.min(q_rt).min(q_be);
    if q == 0 {
        return None;
    }
    let t = k.block_bound_ns(q + be_extra).max(1);
    let n = if waves {
        ((rt.kernel_ns - 1) / t).clamp(1, u32::MAX as u64) as u32
    } else {
        1
    };
    Some((q, n))
}

/// Adds shared parts to `out` (already holding the selection on the free
/// CUs) over `cands` round robin from `start`, within `budget` (1/1000).
/// Returns whether any was added.
pub(super) fn fill(
    limits: &DeviceLimits,
    waves: bool,
    budget: u32,
    rt: &KernelChar,
    cands: &[Candidate<'_>],
    start: usize,
    out: &mut Padding,
) -> bool {
    let n_rt = out.rt_cus.min(limits.compute_units);
    if n_rt == 0 || budget == 0 || cands.is_empty() {
        return false;
    }
    let (alloc, lds) = (out.regs_per_thread, out.lds);
    let p_rt = rt.blocks.div_ceil(n_rt);
    let rt_occ = limits
        .occupancy(rt.threads, lds, limits.block_registers(alloc, rt.threads))
        .min(rt.occupancy);
    if p_rt > rt_occ {
        return false;
    }
    let mut next_cu = 0;
    let mut added = false;
    let len = cands.len();
    for i in 0..len {
        if next_cu >= n_rt {
            break;
        }
        let ti = (start + i) % len;
        let c = &cands[ti];
        // Continue a part of this task in this launch, else its next
        // kernel as the selection would start or continue it.
        let prev = out.parts.iter().rev().find(|p| p.task == ti);
        if prev.is_none() && c.locked.is_some_and(|v| v as usize >= c.versions.len()) {
            continue;
        }
        let locked = c.locked.map(|v| v as usize);
        // (version, offset, q, waves, kernel time)
        let mut best: Option<(usize, u32, u32, u32, u64)> = None;
        for v in 0..c.versions.len() {
            let offset = match prev {
                Some(p) if p.version as usize == v => p.blocks.end,
                Some(_) => continue,
                None => match continue_at(c, locked, 0, v) {
                    Some(o) => o,
                    None => continue,
                },
            };
            let k = &c.versions[v];
            if offset >= k.blocks || k.regs_per_thread > alloc || k.lds > lds {
                continue;
            }
            if best.is_some_and(|b| k.kernel_ns >= b.4) {
                continue;
            }
            if let Some((q, n)) = coresidency(limits, rt, p_rt, k, alloc, lds, budget, waves) {
                best = Some((v, offset, q, n, k.kernel_ns));
            }
        }
        let Some((v, offset, q, n, _)) = best else {
            continue;
        };
        let per_cu_total = q.saturating_mul(n);
        let remaining = c.versions[v].blocks - offset;
        let nblocks = remaining.min((n_rt - next_cu).saturating_mul(per_cu_total));
        let cus = nblocks.div_ceil(per_cu_total);
        out.parts.push(Part {
            task: ti,
            version: v as u16,
            blocks: offset..offset + nblocks,
            cus: next_cu..next_cu + cus,
            per_cu: q.min(nblocks),
            threads: c.versions[v].threads,
            extra: 0..0,
            after: None,
            ahead: 0,
        });
        next_cu += cus;
        added = true;
    }
    added
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::profile::ProxyKernels;
    use super::super::select::Selector;
    use super::*;
    use proptest::prelude::*;

    fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
    }

    /// The walk over `q` that [`super::coresidency`] replaced, kept as its
    /// reference: the largest `q` found by trying `q = 1, 2, ...` until a
    /// condition fails.
    #[allow(clippy::too_many_arguments)]
    fn coresidency_by_walk(
        limits: &DeviceLimits,
        rt: &KernelChar,
        p_rt: u32,
        k: &KernelChar,
        alloc: u32,
        lds: u32,
        budget: u32,
        waves: bool,
    ) -> Option<(u32, u32)> {
        let (w_rt, w_be) = (waves_of(limits, rt.threads), waves_of(limits, k.threads));
        let (r_rt, r_be) = (
            limits.block_registers(alloc, rt.threads),
            limits.block_registers(alloc, k.threads),
        );
        let rt_limit = rt.kernel_ns + rt.kernel_ns * budget as u64 / 1000;
        let fits = |q: u32| {
            p_rt * rt.threads + q * k.threads <= limits.max_threads_per_cu
                && p_rt * w_rt + q * w_be <= limits.max_waves_per_cu
                && p_rt + q <= limits.max_blocks_per_cu
                && (p_rt + q) as u64 * lds as u64 <= limits.lds_bytes_per_cu as u64
                && p_rt as u64 * r_rt as u64 + q as u64 * r_be as u64
                    <= limits.registers_per_cu as u64
        };
        let mut best = None;
        for q in 1..=k.occupancy {
            if !fits(q) {
                break;
            }
            // The real-time blocks at the co-residency the best-effort waves
            // add, read on the curve's ceiling: within the budget.
            let k_rt = p_rt + (q * w_be).div_ceil(w_rt);
            if rt.max_coresidency_within(k_rt, rt_limit + 1) < k_rt {
                break;
            }
            // The best-effort blocks beside the real-time ones: rule 1.
            let k_be = q + (p_rt * w_rt).div_ceil(w_be);
            if k.max_coresidency_within(k_be, rt.kernel_ns) < k_be {
                break;
            }
            let t = k.block_bound_ns(k_be).max(1);
            let n = if waves {
                ((rt.kernel_ns - 1) / t).clamp(1, u32::MAX as u64) as u32
            } else {
                1
            };
            best = Some((q, n));
        }
        best
    }

    fn one(versions: &[KernelChar]) -> [Candidate<'_>; 1] {
        [Candidate {
            versions,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }]
    }

    #[test]
    fn shares_the_rt_cus_only_within_the_predicted_budget() {
        // 120 RT blocks, two on every CU: no CU is left over (Fig. 12).
        let flat = k(120, 4, vec![50_000, 50_200, 50_400, 70_000]);
        let steep = k(120, 4, vec![50_000, 50_200, 51_000, 70_000]);
        let be = vec![k(1000, 8, vec![10_000, 20_000, 30_000, 40_000])];
        let mut out = Padding::default();
        let plain = Selector::new(mi50());
        assert!(!plain.select(&flat, &one(&be), 0, &mut out));
        let s = Selector::new(mi50()).with_share(BUDGET_PERMILLE);
        // One BE block (4 waves, one RT block's worth) beside two RT
        // blocks: the RT blocks at co-residency 3, 50.4 us against 50.2
        // alone (+0.4 %, within 1 %); a second would put them at 4.
        assert!(s.select(&flat, &one(&be), 0, &mut out));
        assert_eq!(out.parts.len(), 1);
        let p = &out.parts[0];
        assert_eq!(
            (p.cus.clone(), p.per_cu, p.blocks.clone()),
            (0..60, 1, 0..60)
        );
        // At co-residency 3 the RT blocks would take 51.0 us: +1.6 %.
        assert!(!s.select(&steep, &one(&be), 0, &mut out));
        // A BE block that, beside the RT blocks, outlasts the RT kernel.
        let long = vec![k(1000, 8, vec![10_000, 20_000, 60_000])];
        assert!(!s.select(&flat, &one(&long), 0, &mut out));
    }

    #[test]
    fn a_task_padded_on_the_free_cus_continues_on_the_shared_ones() {
        // 30 RT blocks: one on each of 30 CUs, 30 CUs left over.
        let rt = k(30, 4, vec![50_000, 50_300, 80_000]);
        let be = vec![k(1000, 8, vec![10_000, 20_000, 30_000, 40_000])];
        let s = Selector::new(mi50()).with_share(BUDGET_PERMILLE);
        let mut out = Padding::default();
        assert!(s.select(&rt, &one(&be), 0, &mut out));
        assert_eq!(out.rt_cus, 30);
        assert_eq!(out.parts.len(), 2);
        assert_eq!(
            (out.parts[0].cus.clone(), out.parts[0].blocks.clone()),
            (30..60, 0..120)
        );
        // Then one block per RT CU (co-residency 2: 50.3 us, +0.6 %), the
        // next block range of the same version.
        let p = &out.parts[1];
        assert_eq!((p.task, p.version), (0, 0));
        assert_eq!(
            (p.cus.clone(), p.per_cu, p.blocks.clone()),
            (0..30, 1, 120..150)
        );
        // Without the switch only the free CUs.
        let mut plain = Padding::default();
        assert!(Selector::new(mi50()).select(&rt, &one(&be), 0, &mut plain));
        assert_eq!(plain.parts, out.parts[..1]);
    }

    fn kernel() -> impl Strategy<Value = KernelChar> {
        (
            1u32..3000,
            prop_oneof![1u32..=64, 65u32..=1024],
            prop_oneof![Just(0u32), 1u32..=32768],
            1u32..=65536,
            proptest::collection::vec(1u64..200_000, 1..12),
        )
            .prop_filter_map("a block must fit a CU", |(b, t, l, r, c)| {
                KernelChar::new(&mi50(), b, t, l, r, c)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

        /// The bound-based search gives what the walk over `q` gives, for
        /// any pair of kernels, real-time blocks per CU, proxy allocation,
        /// shared memory, budget and `waves` (issue 28: the decision cost
        /// may not change a decision).
        #[test]
        fn coresidency_equals_the_walk(
            rt in kernel(),
            be in kernel(),
            p_rt in 1u32..=12,
            level in 1u8..=10,
            lds in prop_oneof![Just(None), (0u32..=65536).prop_map(Some)],
            budget in prop_oneof![Just(BUDGET_PERMILLE), 0u32..=200],
            waves in any::<bool>(),
        ) {
            let limits = mi50();
            let alloc = ProxyKernels::new(&limits).alloc(level);
            let lds = lds.unwrap_or(rt.lds.max(be.lds));
            prop_assert_eq!(
                coresidency(&limits, &rt, p_rt, &be, alloc, lds, budget, waves),
                coresidency_by_walk(&limits, &rt, p_rt, &be, alloc, lds, budget, waves)
            );
        }
    }
}
