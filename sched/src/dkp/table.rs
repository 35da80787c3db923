//! The offline kernel profiles of the selection policy, built from the
//! models' schedules alone (REEF §5.2: "offline kernel profiler"), so that
//! any caller (the benchmarks, the daemon) can build a [`DkpTable`] without
//! a device model: a pure function of `reef_model::Model` data and the
//! device's limits and block-cost parameters.
//!
//! The block execution curve is the one the simulator executes
//! (docs/simulator.md "Calibration" and "Other devices"): the measured
//! `latency[k]` less the launch path every stand-alone measurement includes
//! (host launch + fetch + dispatch), floored at the shortest block; on a
//! device without measured profiles, that time scaled by the per-CU
//! throughput ratio and never below a memory roofline (each block moves its
//! share of the kernel's buffer bytes; with k blocks per CU,
//! k × min(blocks, CUs) blocks share the bandwidth). `reef-bench`'s tests
//! check that the table equals what the simulator's kernel shapes give.
//!
//! Registers: the schedule format records none; the curve's length is the
//! highest co-residency the profiler reached, so a block's register demand
//! is inferred as `registers_per_cu / len`. When the curve is as long as the
//! grid, the profiler ran out of blocks, not of registers: such a curve says
//! nothing about registers and the profile records no register demand
//! (otherwise every one-block kernel would have occupancy 1 and fail rule 2
//! against nearly every real-time kernel). Explicit register counts, when a
//! schedule has them, are kept.
//!
//! Compiled kernels (reef-compile: recorded work and ptxas resources, no
//! measured curve) are refused: their block cost is the simulator's cost
//! model (`reef_sim::costmodel`: a roofline of their flops and bytes at the
//! occupancy their `resources` allow), which this crate does not hold, and
//! the memory roofline of the curve-less arm below would give a
//! compute-bound kernel its memory time alone and no register demand. A
//! padded launch rebuilt from such a profile ran a compiled real-time
//! kernel at that memory time (docs/fidelity.md); their profiles come from
//! their simulator shapes (`reef_exec::table`).

use super::padded::{DkpTable, Variant};
use super::profile::{DeviceLimits, KernelChar};
use super::select::Selector;
use reef_model::{Kernel, Model};

/// How a device turns a kernel's measured profile into block times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockCost {
    /// Host launch + command-processor fetch + dispatch: included in every
    /// stand-alone measurement, subtracted from the measured block times.
    pub launch_path_ns: u64,
    /// Shortest block execution time.
    pub min_block_ns: u64,
    /// `None`: the profiles were measured on this device. `Some(s)`: the
    /// measured (MI50) times are scaled by `s` and bounded below by the
    /// memory roofline.
    pub profile_scale: Option<f64>,
    pub memory_bandwidth_bytes_per_s: u64,
}

/// Why a kernel has no profile on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{model}: kernel {index} ({kernel}): {problem}")]
pub struct TableError {
    pub model: String,
    pub index: usize,
    pub kernel: String,
    pub problem: String,
}

/// Block execution curve (`curve[k-1]` for k co-resident blocks) and
/// register demand per block of kernel `k` of `model`: a measured kernel,
/// or one with neither a profile nor recorded work (its memory roofline);
/// not a compiled kernel (see the module doc).
pub fn block_curve(
    limits: &DeviceLimits,
    cost: &BlockCost,
    model: &Model,
    k: &Kernel,
) -> (Vec<u64>, u32) {
    let threads = k.threads_per_block();
    let blocks = k.num_blocks().max(1);
    let waves = threads.div_ceil(limits.wave_size.max(1)).max(1);
    let bytes: u64 = k
        .args
        .iter()
        .filter_map(|&a| model.buffers.get(a))
        .map(|b| b.bytes)
        .sum();
    let bw = cost.memory_bandwidth_bytes_per_s as f64;
    let spread = blocks.min(limits.compute_units as u64) as f64;
    let roof = |kres: usize| -> u64 {
        if bw <= 0.0 {
            return 0;
        }
        let per_block = bytes as f64 / blocks as f64;
        let concurrent = (kres as f64 * spread).min(blocks as f64);
        (per_block * concurrent / bw * 1e9) as u64
    };
    let (curve, regs): (Vec<u64>, u32) = match &k.profile {
        Some(p) if !p.block_latency_ns.is_empty() => {
            let len = p.block_latency_ns.len();
            let curve = p
                .block_latency_ns
                .iter()
                .enumerate()
                .map(|(i, &l)| {
                    let measured = l.saturating_sub(cost.launch_path_ns);
                    match cost.profile_scale {
                        None => measured,
                        Some(s) => ((measured as f64 * s) as u64).max(roof(i + 1)),
                    }
                })
                .collect();
            let regs = match k.registers {
                Some(r) => limits.block_registers(r, threads),
                // A grid-limited curve says nothing about registers.
                None if len as u64 >= blocks => 0,
                None => limits.registers_per_cu / len as u32,
            };
            (curve, regs)
        }
        _ => {
            let max_k = (limits.max_waves_per_cu / waves).max(1) as usize;
            let curve = (1..=max_k).map(roof).collect();
            (
                curve,
                k.registers
                    .map(|r| limits.block_registers(r, threads))
                    .unwrap_or(0),
            )
        }
    };
    let curve = curve
        .into_iter()
        .map(|e| e.max(cost.min_block_ns))
        .collect();
    (curve, regs)
}

/// The offline profile of kernel `index` of `model`.
pub fn kernel_char(
    limits: &DeviceLimits,
    cost: &BlockCost,
    model: &Model,
    index: usize,
) -> Result<KernelChar, TableError> {
    let err = |kernel: &str, problem: &str| TableError {
        model: model.name.clone(),
        index,
        kernel: kernel.to_string(),
        problem: problem.to_string(),
    };
    let k = model
        .kernels
        .get(index)
        .ok_or_else(|| err("-", "no such kernel"))?;
    if k.profile.is_none() && k.work.is_some() {
        return Err(err(
            &k.name,
            "a compiled kernel: its block cost is the simulator's cost model \
             (build its profile from its kernel shape, reef_exec::table)",
        ));
    }
    let blocks =
        u32::try_from(k.num_blocks()).map_err(|_| err(&k.name, "more than 2^32 blocks"))?;
    let (curve, regs) = block_curve(limits, cost, model, k);
    KernelChar::new(
        limits,
        blocks,
        k.threads_per_block(),
        k.shared_mem_bytes,
        regs,
        curve,
    )
    .ok_or_else(|| err(&k.name, "does not fit a compute unit"))
}

/// The padding table of `models` (in their registration order): every
/// kernel's profile, with the derived and pruned versions of §5.3 under
/// [`Variant::MultiVersion`].
pub fn build_table(
    limits: &DeviceLimits,
    cost: &BlockCost,
    models: &[&Model],
    variant: Variant,
) -> Result<DkpTable, TableError> {
    let mut all = Vec::with_capacity(models.len());
    for m in models {
        let ks = (0..m.kernels.len())
            .map(|i| kernel_char(limits, cost, m, i))
            .collect::<Result<Vec<_>, _>>()?;
        all.push(ks);
    }
    Ok(DkpTable::new(
        Selector::new(*limits),
        all,
        variant,
        cost.min_block_ns,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::*;

    fn cost() -> BlockCost {
        BlockCost {
            launch_path_ns: 10_000,
            min_block_ns: 1_000,
            profile_scale: None,
            memory_bandwidth_bytes_per_s: 1_000_000_000_000,
        }
    }

    #[test]
    fn five_models_build_with_the_measured_curves() {
        let dir = reef_model::default_models_dir();
        let models = reef_model::load_all(&dir).unwrap();
        assert!(models.len() >= 5);
        let refs: Vec<&Model> = models.iter().collect();
        let t = build_table(&mi50(), &cost(), &refs, Variant::Single).unwrap();
        for (m, ks) in models.iter().zip(&t.kernels) {
            assert_eq!(ks.len(), m.kernels.len());
            for (k, v) in m.kernels.iter().zip(ks) {
                let c = &v[0];
                let Some(p) = k.profile.as_ref() else {
                    continue;
                };
                assert_eq!(c.curve().len(), p.block_latency_ns.len());
                assert_eq!(
                    c.curve()[0],
                    p.block_latency_ns[0].saturating_sub(10_000).max(1_000)
                );
                // One-block kernels carry no inferred register demand.
                if k.num_blocks() == 1 {
                    assert_eq!(c.regs_per_block, 0);
                    assert!(c.occupancy > 1);
                }
            }
        }
        let mv = build_table(&mi50(), &cost(), &refs, Variant::MultiVersion).unwrap();
        assert!(mv.kernels[0].iter().any(|v| v.len() > 1));
        // No version of a measured kernel runs faster alone than it: the
        // measured one is the tuner's fastest (REEF §5.3,
        // `versions::no_faster_alone`). Before that bound every kernel of
        // the five models had one.
        for (m, ks) in models.iter().zip(&mv.kernels) {
            for (i, vs) in ks.iter().enumerate() {
                for v in &vs[1..] {
                    assert!(
                        v.kernel_ns >= vs[0].kernel_ns,
                        "{} kernel {i}: {} < {}",
                        m.name,
                        v.kernel_ns,
                        vs[0].kernel_ns
                    );
                }
            }
        }
    }
}
