//! Block cost of a compiled kernel (reef-compile, issue 14) on any device
//! preset, from the kernel's own resources and work instead of a measured
//! curve: DESIGN.md "The simulator" ("else from a documented cost model
//! (roofline)"), docs/simulator.md "Cost model of compiled kernels".
//!
//! REEF's own block-level view of a kernel (REEF §5.1 footnote 3 for CU
//! occupancy, §5.2 Fig. 13 for per-block execution time as a function of
//! co-resident blocks) is kept: a kernel is `blocks` blocks, each with a
//! duration `exec(k)` when `k` blocks are resident on its compute unit.
//!
//! **Occupancy.** Registers per thread and static shared memory come from
//! `ptxas -v` for the architecture the preset stands for ([`arch_for`]);
//! dynamic shared memory and threads per block from the schedule. A warp's
//! registers are allocated in units of 256 (CUDA Occupancy Calculator,
//! "register allocation unit size" 256 for compute capability 7.0 to 9.0;
//! AMD GCN allocates VGPRs in groups of 4 per lane, i.e. 256 per 64-lane
//! wave, the same unit). The engine places blocks under the preset's per-CU
//! limits (threads, waves, blocks, shared memory, registers), as for every
//! kernel.
//!
//! **Block duration: a roofline.** With `F` floating-point operations and
//! `B` bytes (read plus written, from the compiler) over `n` blocks, one
//! block does `f = F/n` and moves `b = B/n`. With `k` blocks resident on each
//! busy CU:
//!
//! - compute: the CU's peak rate `P/CUs` (`fp32_flops`, the vendor's peak)
//!   is shared by its `k` blocks: `t_c(k) = f k CUs / P`;
//! - memory: `c(k) = min(n, k min(n, CUs))` blocks run at once and share the
//!   device's bandwidth `W` (`memory_bandwidth_bytes_per_s`):
//!   `t_m(k) = b c(k) / W`;
//! - `exec(k) = max(t_c(k), t_m(k), min_block_ns)`.
//!
//! Both terms grow with `k`, which gives the co-residency shape of the
//! measured MI50 curves (a block slows down as more blocks share its CU and
//! the memory system) without a curve for the device. The roofline is a
//! lower bound on time: it assumes the kernel reaches the peak rates, which
//! TVM's default (untuned) schedules do not. The VGG-19 cross-check against
//! the measured MI50 kernels (docs/compile.md) shows by how much; no
//! efficiency factor is applied, because none is measured for these
//! kernels on these GPUs.

use crate::shape::{KernelShape, ShapeError};
use crate::spec::DeviceSpec;
use reef_model::{Kernel, Model};

/// Registers are allocated per warp (wave) in units of this many
/// (CUDA Occupancy Calculator, CC 7.0–9.0; AMD GCN: 4 VGPRs x 64 lanes).
pub const REGISTER_ALLOCATION_UNIT: u32 = 256;

/// The PTX architecture whose `ptxas` resources stand for a preset, in
/// order of preference; the first one the model was compiled for is used,
/// else the model's first architecture.
///
/// - `gv100`: Volta is sm_70 (CUDA guide, compute capabilities), which the
///   project's ptxas (CUDA 13) no longer accepts; sm_75 and sm_80 have the
///   same per-thread register limit (255) and register file (64K per SM),
///   so their allocation is the nearest available.
/// - `h100`: Hopper is sm_90 (CUDA guide).
/// - `mi50`: an AMD GPU runs no PTX; the NVIDIA allocation of the same
///   TVM kernel stands in for its VGPR use (an approximation, stated in
///   docs/simulator.md).
pub fn arch_for(spec: &DeviceSpec) -> &'static [&'static str] {
    match spec.name.as_str() {
        "gv100" => &["sm_70", "sm_75", "sm_80"],
        "h100" => &["sm_90", "sm_90a"],
        _ => &["sm_80"],
    }
}

/// The architecture of `k.resources` used on `spec`, if the kernel has any.
pub fn chosen_arch<'a>(k: &'a Kernel, model: &'a Model, spec: &DeviceSpec) -> Option<&'a str> {
    for a in arch_for(spec) {
        if let Some((name, _)) = k.resources.get_key_value(*a) {
            return Some(name.as_str());
        }
    }
    model
        .compiled
        .as_ref()
        .and_then(|c| c.archs.first())
        .filter(|a| k.resources.contains_key(a.as_str()))
        .map(String::as_str)
        .or_else(|| k.resources.keys().next().map(String::as_str))
}

/// Roofline block durations `exec(k)` for k = 1..=`max_k` (see module doc).
pub fn roofline_curve(
    flops: u64,
    bytes: u64,
    blocks: u32,
    max_k: u32,
    spec: &DeviceSpec,
) -> Vec<u64> {
    let n = blocks.max(1) as f64;
    let cus = spec.compute_units as f64;
    let f = flops as f64 / n;
    let b = bytes as f64 / n;
    let spread = n.min(cus);
    (1..=max_k.max(1))
        .map(|k| {
            let k = k as f64;
            let t_c = f * k * cus / spec.fp32_flops as f64;
            let concurrent = (k * spread).min(n);
            let t_m = b * concurrent / spec.memory_bandwidth_bytes_per_s as f64;
            ((t_c.max(t_m) * 1e9).ceil() as u64).max(spec.min_block_ns)
        })
        .collect()
}

/// Registers one block holds: per-warp allocation rounded up to
/// [`REGISTER_ALLOCATION_UNIT`], times the block's warps.
pub fn regs_per_block(registers_per_thread: u32, threads: u32, wave_size: u32) -> u32 {
    let waves = threads.div_ceil(wave_size).max(1);
    let per_wave = (registers_per_thread * wave_size).div_ceil(REGISTER_ALLOCATION_UNIT)
        * REGISTER_ALLOCATION_UNIT;
    per_wave.saturating_mul(waves)
}

/// The most blocks of this shape one CU can hold under the preset's limits.
pub fn max_resident(threads: u32, lds: u32, regs: u32, spec: &DeviceSpec) -> u32 {
    let waves = threads.div_ceil(spec.wave_size).max(1);
    let mut m = spec
        .max_blocks_per_cu
        .min(spec.max_threads_per_cu / threads.max(1))
        .min(spec.max_waves_per_cu / waves);
    if let Some(by_lds) = spec.lds_bytes_per_cu.checked_div(lds) {
        m = m.min(by_lds);
    }
    if let Some(by_regs) = spec.registers_per_cu.checked_div(regs) {
        m = m.min(by_regs);
    }
    m.max(1)
}

/// The shape of compiled kernel `index` of `model` (it has `work` and
/// per-architecture resources) on `spec`.
pub fn compiled_shape(
    model: &Model,
    index: usize,
    spec: &DeviceSpec,
) -> Result<KernelShape, ShapeError> {
    let k = &model.kernels[index];
    let name = format!("{}[{}] {}", model.name, index, k.name);
    let err = |problem: String| ShapeError {
        kernel: name.clone(),
        problem,
    };
    let work = k
        .work
        .ok_or_else(|| err("no recorded work (flops, bytes): not a compiled kernel".into()))?;
    let blocks = u32::try_from(k.num_blocks()).map_err(|_| err("more than 2^32 blocks".into()))?;
    let threads = k.threads_per_block();
    let (regs, lds) = match chosen_arch(k, model, spec) {
        Some(arch) => {
            let r = k.resources[arch];
            // shared_mem_bytes = static shared memory of the first
            // architecture + dynamic; swap in this architecture's static.
            let first_static = model
                .compiled
                .as_ref()
                .and_then(|c| c.archs.first())
                .and_then(|a| k.resources.get(a))
                .map(|r| r.shared_static)
                .unwrap_or(0);
            let dynamic = k.shared_mem_bytes.saturating_sub(first_static);
            (
                regs_per_block(r.registers, threads, spec.wave_size),
                r.shared_static + dynamic,
            )
        }
        None => (0, k.shared_mem_bytes),
    };
    let max_k = max_resident(threads, lds, regs, spec);
    let curve = roofline_curve(
        work.flops,
        work.bytes_read.saturating_add(work.bytes_written),
        blocks,
        max_k,
        spec,
    );
    KernelShape::synthetic(&name, blocks, threads, lds, regs, curve, spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DeviceSpec {
        DeviceSpec::preset("h100").unwrap()
    }

    #[test]
    fn compute_bound_blocks_share_the_cu_peak() {
        let s = spec();
        // 132 blocks, 1 GFLOP each block-share, no bytes: one block per CU
        // runs at P/CUs.
        let flops = 132_000_000_000u64;
        let c = roofline_curve(flops, 0, 132, 4, &s);
        let one = (1e9 * 132.0 / s.fp32_flops as f64 * 1e9).ceil() as u64;
        assert_eq!(c[0], one);
        // k co-resident blocks each take k times as long.
        assert!((c[3] as f64 / c[0] as f64 - 4.0).abs() < 1e-5);
    }

    #[test]
    fn memory_bound_blocks_share_the_bandwidth() {
        let s = spec();
        // 1 GB over 1320 blocks: at k=1, 132 blocks move 1/10 of it at once.
        let c = roofline_curve(0, 1_000_000_000, 1320, 10, &s);
        let t1 = 1e9 / 1320.0 * 132.0 / s.memory_bandwidth_bytes_per_s as f64 * 1e9;
        assert!((c[0] as f64 - t1).abs() <= 1.0, "{} vs {t1}", c[0]);
        // All 1320 resident at k=10: the whole kernel's time, per block.
        let t10 = 1e9 / s.memory_bandwidth_bytes_per_s as f64 * 1e9;
        assert!((c[9] as f64 - t10).abs() <= 1.0);
    }

    #[test]
    fn tiny_blocks_take_the_floor() {
        let s = spec();
        assert_eq!(roofline_curve(10, 10, 1, 1, &s), vec![s.min_block_ns]);
    }

    #[test]
    fn occupancy_from_registers_and_shared_memory() {
        let s = spec();
        // 255 registers x 256 threads: 8 warps x 8192 (255*32 rounded up to
        // 8192) = 65536: the whole register file, one block.
        assert_eq!(regs_per_block(255, 256, 32), 65536);
        assert_eq!(max_resident(256, 0, 65536, &s), 1);
        // 32 registers x 128 threads = 4096: 16 blocks by registers, 16 by
        // threads (2048/128).
        assert_eq!(max_resident(128, 0, regs_per_block(32, 128, 32), &s), 16);
        // 48 KB of shared memory: 4 blocks in 228 KB.
        assert_eq!(max_resident(128, 48 * 1024, 0, &s), 4);
    }
}
