//! The intra-CU resource mix (Aker §3, Table 1; §5.1 for the classes): the
//! blocks resident on one compute unit share its issue slots per pipe
//! (matrix/tensor units, vector ALUs) and the CU's share of memory
//! bandwidth, so a block's time depends on what the blocks beside it use,
//! not only on how many there are (docs/simulator.md "Resource mix").
//!
//! # Model
//! Every kernel has a per-wave demand [`Demand`]: for each pipe `p`, the
//! share `u[p]` (in 1/1024) of the time a wave of it keeps pipe `p` busy
//! while it runs unimpeded, normalised so that its busiest pipe is 1024
//! (`u = t / max(t)`, `t[p]` = the block's work on pipe `p` divided by the
//! CU's peak rate for that pipe, [`PipeRates`]).
//!
//! Pipes are processor-shared: a block that needs pipe `p` for `t[p]`
//! while `N_p` waves' worth of work is active on `p` takes `t[p] x N_p`
//! there, where a wave of kernel Y counts `u_Y[p]` (it is active on `p`
//! that share of its time). A block of X therefore runs as long as
//! `k_eff` co-resident blocks of X alone would:
//!
//! ```text
//!   L[p]  = sum over resident waves w of u_w[p]            (CU load)
//!   k_eff = max_p u_X[p] x L[p] / (1024 x 1024 x waves_per_block_X)
//! ```
//!
//! and its duration is the kernel's own curve at `k_eff` (linearly
//! interpolated between integer points). Same-kernel co-residency (or any
//! mix of kernels with the same demand) gives `L[p] = waves x u_X[p]`, so
//! `k_eff = waves / waves_per_block`, exactly the engine's rule without the
//! mix: the measured MI50 co-residency curves stay the ground truth
//! ([`Mix::k_fixed`] returns the unchanged integer `ceil(waves / wpb)`).
//! A block beside blocks of the opposite kind sees only the load they put
//! on its own busy pipes: a pure ALU kernel beside a pure memory kernel
//! runs as if alone (Table 1 Bench-D), two kernels of one kind as one
//! kernel at the summed co-residency (Bench-B/C/E).
//!
//! Relation to the shared memory bandwidth (engine `time_fresh_groups`,
//! docs/simulator.md "Shared memory bandwidth"): this module only decides
//! how many same-kernel-equivalent blocks a block shares its CU with, i.e.
//! which point of its measured curve it runs at; that curve was measured
//! with the same co-residency on every CU, so it already holds the DRAM
//! sharing of that load. The device term adds only what exceeds both the
//! device's bandwidth and the load the block's curve point was measured
//! under, and every group's draw is taken at the duration the mix gave
//! it (a block slowed by its CU draws less), so no slowdown is charged by
//! both. The `MEMORY` pipe here is the CU's path to memory at its share of
//! the bandwidth, not the device-wide limit (docs/simulator.md
//! "Resource mix"). A kernel without a declared demand gets
//! [`Demand::UNKNOWN`] and the engine behaves exactly as before this module.

use crate::spec::DeviceSpec;

/// Full scale of a demand component.
pub const ONE: u32 = 1024;

/// Pipes of a compute unit.
pub const PIPES: usize = 3;

/// Index of the matrix / tensor-core pipe.
pub const MATRIX: usize = 0;
/// Index of the vector-ALU (CUDA core / SIMD) pipe.
pub const VECTOR: usize = 1;
/// Index of the CU's share of memory bandwidth.
pub const MEMORY: usize = 2;

/// A kernel's per-wave pipe demand, each in 1/1024 of the busiest pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Demand {
    pub u: [u32; PIPES],
}

impl Demand {
    /// A kernel whose resource use is not declared: every such kernel has
    /// the same demand, so unknown kernels co-run exactly as before the
    /// mix existed (co-residency counted by waves). Vector ALU and memory
    /// both at full scale: it contends with any CUDA-core kernel.
    pub const UNKNOWN: Demand = Demand { u: [0, ONE, ONE] };

    /// From the work of one block (operations on the matrix pipe, on the
    /// vector pipe, bytes to or from DRAM) and the CU's peak rates. `None`
    /// when the block does no work on any pipe the device has, or uses a
    /// matrix pipe the device lacks.
    pub fn from_work(matrix_ops: f64, vector_ops: f64, bytes: f64, r: &PipeRates) -> Option<Self> {
        if matrix_ops > 0.0 && r.matrix_ops_per_s <= 0.0 {
            return None;
        }
        let t = [
            if matrix_ops > 0.0 {
                matrix_ops / r.matrix_ops_per_s
            } else {
                0.0
            },
            vector_ops.max(0.0) / r.vector_ops_per_s,
            bytes.max(0.0) / r.memory_bytes_per_s,
        ];
        Self::from_times(t)
    }

    /// From utilisations (or times) per pipe, in any unit: normalised so the
    /// largest is [`ONE`]. `None` if all are zero or one is not finite.
    pub fn from_times(t: [f64; PIPES]) -> Option<Self> {
        if t.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return None;
        }
        let max = t.iter().cloned().fold(0.0, f64::max);
        if max <= 0.0 {
            return None;
        }
        let mut u = [0u32; PIPES];
        for (o, x) in u.iter_mut().zip(t) {
            *o = ((x / max) * ONE as f64).round() as u32;
        }
        Some(Demand { u })
    }

    /// The share of the CU's memory bandwidth in this demand, in 1/1024.
    pub fn memory(&self) -> u32 {
        self.u[MEMORY]
    }
}

/// A compute unit's peak rate per pipe (from the device spec).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipeRates {
    /// Matrix-unit operations per second per CU (0: no matrix units).
    pub matrix_ops_per_s: f64,
    pub vector_ops_per_s: f64,
    /// The CU's share of DRAM bandwidth (bytes/s).
    pub memory_bytes_per_s: f64,
}

impl PipeRates {
    pub fn of(spec: &DeviceSpec) -> Self {
        let cus = spec.compute_units as f64;
        PipeRates {
            matrix_ops_per_s: spec.matrix_flops as f64 / cus,
            vector_ops_per_s: spec.fp32_flops as f64 / cus,
            memory_bytes_per_s: spec.memory_bandwidth_bytes_per_s as f64 / cus,
        }
    }
}

/// The resource load on one CU: per pipe, the sum over resident waves of
/// their demand.
pub type Load = [u64; PIPES];

/// Adds (or removes) `waves` waves of demand `d` to a CU's load.
#[inline]
pub fn charge(load: &mut Load, d: &Demand, waves: u64, add: bool) {
    for (l, &u) in load.iter_mut().zip(&d.u) {
        if add {
            *l += waves * u as u64;
        } else {
            *l -= waves * u as u64;
        }
    }
}

/// Co-residency seen by a block, in 1/1024 of a block.
pub struct Mix;

impl Mix {
    /// The co-residency `k_eff` of a block of a kernel with demand `d` and
    /// `wpb` waves per block on a CU with `waves` resident waves and load
    /// `load` (its own blocks included), in 1/1024: see the module doc.
    /// When the load is that of `waves` waves of the same demand the result
    /// is the engine's integer rule `ceil(waves / wpb) x 1024`.
    #[inline]
    pub fn k_fixed(d: &Demand, wpb: u32, waves: u32, load: &Load) -> u64 {
        let one2 = (ONE as u64) * (ONE as u64);
        let mut top = 0u64;
        for (&u, &l) in d.u.iter().zip(load) {
            top = top.max(u as u64 * l);
        }
        // Same as `waves` waves of this kernel: the unchanged integer rule.
        if load
            .iter()
            .zip(&d.u)
            .all(|(&l, &u)| l == waves as u64 * u as u64)
        {
            return (waves.div_ceil(wpb.max(1)) as u64) * ONE as u64;
        }
        let den = one2 * wpb.max(1) as u64 / ONE as u64;
        top.div_ceil(den).max(ONE as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(m: f64, v: f64, mem: f64) -> Demand {
        Demand::from_times([m, v, mem]).unwrap()
    }

    fn load(parts: &[(Demand, u64)]) -> (Load, u32) {
        let mut l = [0; PIPES];
        let mut w = 0;
        for (dm, waves) in parts {
            charge(&mut l, dm, *waves, true);
            w += *waves as u32;
        }
        (l, w)
    }

    #[test]
    fn same_kernel_is_the_wave_rule() {
        for dm in [Demand::UNKNOWN, d(0.0, 1.0, 0.3), d(1.0, 0.1, 0.05)] {
            for (wpb, waves) in [(4, 4), (4, 16), (4, 18), (1, 40), (3, 7)] {
                let (l, w) = load(&[(dm, waves)]);
                assert_eq!(
                    Mix::k_fixed(&dm, wpb, w, &l),
                    (waves as u32).div_ceil(wpb) as u64 * 1024
                );
            }
        }
    }

    #[test]
    fn opposite_kinds_barely_meet_same_kinds_add_up() {
        let alu = d(0.0, 1.0, 0.0);
        let mem = d(0.0, 0.012, 1.0);
        // 8 waves of each, 4 waves per block: 2 blocks each.
        let (l, w) = load(&[(alu, 8), (mem, 8)]);
        let ka = Mix::k_fixed(&alu, 4, w, &l);
        let km = Mix::k_fixed(&mem, 4, w, &l);
        assert!((2048..=2048 + 30).contains(&ka), "{ka}");
        assert_eq!(km, 2048);
        // Two memory kernels: 4 blocks' worth.
        let mem2 = d(0.0, 0.02, 1.0);
        let (l, w) = load(&[(mem, 8), (mem2, 8)]);
        let k = Mix::k_fixed(&mem, 4, w, &l);
        assert_eq!(k, 4096);
    }

    #[test]
    fn never_above_the_wave_count_nor_below_own_blocks() {
        let kinds = [
            Demand::UNKNOWN,
            d(1.0, 0.2, 0.1),
            d(0.0, 1.0, 0.04),
            d(0.0, 0.3, 1.0),
        ];
        for a in kinds {
            for b in kinds {
                for (wa, wb) in [(4u64, 4u64), (8, 2), (2, 12)] {
                    let (l, w) = load(&[(a, wa), (b, wb)]);
                    let k = Mix::k_fixed(&a, 2, w, &l);
                    assert!(k >= wa * 1024 / 2, "{a:?} {b:?} {k}");
                    assert!(k <= (wa + wb) * 1024 / 2, "{a:?} {b:?} {k}");
                }
            }
        }
    }

    #[test]
    fn work_to_demand_uses_the_device_rates() {
        let mi50 = DeviceSpec::preset("mi50").unwrap();
        let r = PipeRates::of(&mi50);
        // The MI50 has no matrix units.
        assert_eq!(Demand::from_work(1e6, 0.0, 0.0, &r), None);
        // At the ridge point (flops/byte = peak/bandwidth) both pipes are full.
        let ridge = mi50.fp32_flops as f64 / mi50.memory_bandwidth_bytes_per_s as f64;
        let dm = Demand::from_work(0.0, ridge * 1e6, 1e6, &r).unwrap();
        assert_eq!(dm.u, [0, 1024, 1024]);
        let gv = DeviceSpec::preset("gv100").unwrap();
        let dm = Demand::from_work(1e9, 0.0, 0.0, &PipeRates::of(&gv)).unwrap();
        assert_eq!(dm.u, [1024, 0, 0]);
    }
}
