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
//! **Block duration: a roofline at full occupancy, the measured shape
//! below it.** With `F` floating-point operations and `B` bytes (read plus
//! written, from the compiler) over `n` blocks, one block does `f = F/n` and
//! moves `b = B/n`. When `K` blocks (the occupancy limit) are resident on
//! every busy CU, the CU's peak rate `P/CUs` (`fp32_flops`, the vendor's
//! peak) is shared by them and `c = min(n, K min(n, CUs))` blocks share the
//! device's bandwidth `W` (`memory_bandwidth_bytes_per_s`):
//!
//! - `t_full = max(f K CUs / P, b c / W)`;
//! - with `k` co-resident blocks, `exec(k) = t_full s(k) / s(K)`, floored at
//!   `min_block_ns`, where `s` is the mean co-residency shape of the
//!   measured MI50 kernels ([`SHAPE`]): a block alone does not get the
//!   whole CU's peak (the measured blocks slow down only 1.8x from one to
//!   eight co-resident, not 8x), and no preset but the MI50 has a curve.
//!
//! The roofline is still a lower bound at full occupancy: it assumes the
//! kernel reaches the peak rates, which TVM's default (untuned) schedules do
//! not. The ResNet-50 cross-check against the measured MI50 kernels
//! (docs/compile.md) shows by how much; no efficiency factor is applied,
//! because none is measured for these kernels on these GPUs.

use crate::mix::{Demand, PipeRates};
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
/// - `gv100`: Volta is sm_70 (CUDA guide, compute capabilities), which
///   reef-compile builds with CUDA 12.9's NVRTC and ptxas (CUDA 13 dropped
///   it; docs/compile.md "Volta (sm_70)"); for a model compiled without it,
///   sm_75 and sm_80 have the same per-thread register limit (255) and
///   register file (64K per SM), so their allocation is the nearest.
/// - `h100`: Hopper is sm_90 (CUDA guide).
/// - `ada6000`: Ada is sm_89 (CUDA guide); sm_86 and sm_80 have the same
///   register file (64K per SM) and per-thread limit (255), the nearest
///   allocation when a model was not compiled for sm_89.
/// - `mi50`: gfx906, the VGPRs and LDS of the kernel's AMD code object
///   (`reef-compile --arch gfx906`, AMDHSA metadata; registers per work
///   item, allocated per 64-lane wave in the same unit); a model compiled
///   without it falls back to the NVIDIA allocation of the same TVM kernel
///   as a stand-in (an approximation, stated in docs/simulator.md).
pub fn arch_for(spec: &DeviceSpec) -> &'static [&'static str] {
    match spec.name.as_str() {
        "gv100" => &["sm_70", "sm_75", "sm_80"],
        "h100" => &["sm_90", "sm_90a"],
        "ada6000" => &["sm_89", "sm_86", "sm_80"],
        "mi50" => &["gfx906", "sm_80"],
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

/// Mean co-residency shape of the measured MI50 kernels: `SHAPE[k-1]` =
/// one block's execution time with k blocks resident on its CU over its time
/// alone, averaged over the 191 distinct kernels of the five measured models
/// (../shared/models/mi50/*/*.profile.json, `latency[k-1]` less the MI50
/// launch path of 10 us, floored at 1 us, as the simulator runs them;
/// REEF §5.2 Fig. 13). Made non-decreasing (past k = 8 fewer kernels were
/// measured, 41 at k = 16, and the mean dips); recomputed from the data by
/// the test `shape_table_is_the_measured_mean`.
pub const SHAPE: [f64; 16] = [
    1.0, 1.13, 1.302, 1.437, 1.536, 1.673, 1.771, 1.807, 1.807, 1.807, 1.816, 1.889, 1.982, 2.058,
    2.079, 2.171,
];

/// Past [`SHAPE`], the shape grows by its mean slope from k = 8 to 16.
pub fn shape(k: u32) -> f64 {
    let k = k.max(1) as usize;
    if k <= SHAPE.len() {
        return SHAPE[k - 1];
    }
    let slope = (SHAPE[15] - SHAPE[7]) / 8.0;
    SHAPE[15] + slope * (k - SHAPE.len()) as f64
}

/// Block durations `exec(k)` for k = 1..=`max_k` (see module doc): the
/// roofline time of a block when `max_k` blocks fill every busy CU, scaled
/// to k co-resident blocks by the measured shape.
pub fn roofline_curve(
    flops: u64,
    bytes: u64,
    blocks: u32,
    max_k: u32,
    spec: &DeviceSpec,
) -> Vec<u64> {
    roofline_curve_at(flops, bytes, blocks, max_k, spec.fp32_flops, spec)
}

/// [`roofline_curve`] with the compute peak `peak_flops` in place of the
/// preset's FP32 rate: `matrix_flops` for a tensor-core kernel.
pub fn roofline_curve_at(
    flops: u64,
    bytes: u64,
    blocks: u32,
    max_k: u32,
    peak_flops: u64,
    spec: &DeviceSpec,
) -> Vec<u64> {
    let n = blocks.max(1) as f64;
    let cus = spec.compute_units as f64;
    let f = flops as f64 / n;
    let b = bytes as f64 / n;
    let spread = n.min(cus);
    let full = max_k.max(1) as f64;
    let t_c = f * full * cus / peak_flops.max(1) as f64;
    let concurrent = (full * spread).min(n);
    let t_m = b * concurrent / spec.memory_bandwidth_bytes_per_s as f64;
    let t_full = t_c.max(t_m);
    let s_full = shape(max_k.max(1));
    (1..=max_k.max(1))
        .map(|k| {
            let t = t_full * shape(k) / s_full;
            ((t * 1e9).ceil() as u64).max(spec.min_block_ns)
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
    let mut mma = 0;
    let (regs, lds) = match chosen_arch(k, model, spec) {
        Some(arch) => {
            let r = k.resources[arch];
            mma = r.mma;
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
    // A kernel whose PTX has tensor-core MMA instructions does its flops on
    // the matrix pipe (Aker §3: "TC kernels"), at the preset's tensor-core
    // peak; on a device without one it stays on the CUDA-core peak.
    let tc = mma > 0 && spec.matrix_flops > 0;
    let all_bytes = work.bytes_read.saturating_add(work.bytes_written);
    let peak = if tc {
        spec.matrix_flops
    } else {
        spec.fp32_flops
    };
    let curve = roofline_curve_at(work.flops, all_bytes, blocks, max_k, peak, spec);
    // DRAM traffic per block: the compiler's bytes read and written, spread
    // evenly over the blocks (shared memory bandwidth, docs/simulator.md).
    let bytes = all_bytes / blocks.max(1) as u64;
    // Resource mix (sim/src/mix.rs): the block's work on its pipe and its
    // bytes, against the CU's peak rates; none when it records no work.
    let per_block = blocks.max(1) as f64;
    let (m_ops, v_ops) = if tc {
        (work.flops as f64 / per_block, 0.0)
    } else {
        (0.0, work.flops as f64 / per_block)
    };
    let demand = Demand::from_work(m_ops, v_ops, bytes as f64, &PipeRates::of(spec))
        .unwrap_or(Demand::UNKNOWN);
    Ok(
        KernelShape::synthetic(&name, blocks, threads, lds, regs, curve, spec)?
            .with_demand(demand)
            .with_dram_bytes(bytes)
            .with_footprint(all_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DeviceSpec {
        DeviceSpec::preset("h100").unwrap()
    }

    #[test]
    fn full_occupancy_is_the_roofline_and_fewer_blocks_follow_the_shape() {
        let s = spec();
        // Compute bound: 132 blocks, 1 GFLOP each, no bytes, K = 4.
        let flops = 132_000_000_000u64;
        let c = roofline_curve(flops, 0, 132, 4, &s);
        let full = 1e9 * 4.0 * 132.0 / s.fp32_flops as f64 * 1e9;
        assert!((c[3] as f64 - full).abs() <= 1.0, "{} vs {full}", c[3]);
        for k in 1..=4u32 {
            let want = full * shape(k) / shape(4);
            assert!((c[k as usize - 1] as f64 - want).abs() <= 1.0);
        }
        // A lone block is slower than a quarter of the full-CU time.
        assert!(c[0] as f64 > full / 4.0);
    }

    #[test]
    fn memory_bound_blocks_share_the_bandwidth() {
        let s = spec();
        // 1 GB over 1320 blocks, K = 10: all 1320 resident at once move the
        // whole kernel's bytes at the device's bandwidth.
        let c = roofline_curve(0, 1_000_000_000, 1320, 10, &s);
        let t10 = 1e9 / s.memory_bandwidth_bytes_per_s as f64 * 1e9;
        assert!((c[9] as f64 - t10).abs() <= 1.0, "{} vs {t10}", c[9]);
    }

    #[test]
    fn tiny_blocks_take_the_floor() {
        let s = spec();
        assert_eq!(roofline_curve(10, 10, 1, 1, &s), vec![s.min_block_ns]);
    }

    #[test]
    fn shape_is_non_decreasing_and_extends_past_the_table() {
        for k in 1..40 {
            assert!(shape(k + 1) >= shape(k), "{k}");
        }
        assert!((shape(24) - (2.171 + 8.0 * (2.171 - 1.807) / 8.0)).abs() < 1e-9);
    }

    /// SHAPE is the mean of the measured curves (../shared data).
    #[test]
    fn shape_table_is_the_measured_mean() {
        let mi50 = DeviceSpec::preset("mi50").unwrap();
        let lp = mi50.launch_path_ns();
        let mut sums = [(0.0f64, 0usize); 16];
        for m in reef_model::load_all(&reef_model::default_models_dir()).unwrap() {
            let mut seen = std::collections::HashSet::new();
            for k in &m.kernels {
                if !seen.insert(k.name.clone()) {
                    continue;
                }
                let p = k.profile.as_ref().unwrap();
                let ex: Vec<f64> = p
                    .block_latency_ns
                    .iter()
                    .map(|&l| l.saturating_sub(lp).max(mi50.min_block_ns) as f64)
                    .collect();
                for (i, e) in ex.iter().enumerate().take(16) {
                    sums[i].0 += e / ex[0];
                    sums[i].1 += 1;
                }
            }
        }
        assert_eq!(sums[0].1, 191);
        let mut running = 0.0f64;
        for (i, (sum, n)) in sums.iter().enumerate() {
            running = running.max(sum / *n as f64);
            assert!(
                (running - SHAPE[i]).abs() < 0.001,
                "k={}: {running} vs {}",
                i + 1,
                SHAPE[i]
            );
        }
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

    #[test]
    fn mi50_uses_the_gfx906_code_object_resources_when_compiled() {
        let text = |amd: &str| {
            format!(
                r#"{{"storage": [{{"name": "x", "size": 4, "stype": "float32"}},
                               {{"name": "y", "size": 4, "stype": "float32"}}],
                    "kernels": [{{"name": "k", "launch_params": [1,1,1,64,1,1], "args": [0, 1]}}],
                    "args": [0], "format": "reef-compile/1", "archs": ["sm_80"],
                    "ptx": {{"sm_80": "k.ptx"}}, "inputs": [0], "params": [], "outputs": [1],
                    "resources": {{"sm_80": {{"k": {{"registers": 40, "shared_static": 0}}}}{amd}}}}}"#
            )
        };
        let load = |t: &str| {
            reef_model::Model::parse("m", std::path::Path::new("/d/m/m.json"), t, None).unwrap()
        };
        let both = load(&text(
            r#", "gfx906": {"k": {"registers": 92, "shared_static": 640}}"#,
        ));
        let nv = load(&text(""));
        let mi50 = DeviceSpec::preset("mi50").unwrap();
        let gv100 = DeviceSpec::preset("gv100").unwrap();
        let k = &both.kernels[0];
        assert_eq!(chosen_arch(k, &both, &mi50), Some("gfx906"));
        assert_eq!(chosen_arch(k, &both, &gv100), Some("sm_80"));
        assert_eq!(chosen_arch(&nv.kernels[0], &nv, &mi50), Some("sm_80"));
    }
}
