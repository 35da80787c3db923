//! The devices and jobs of `reef-bench multigpu` (CASE/MGB §V-A, Table I).
//! Every number carries its source; "assumed" marks those the paper does
//! not give (docs/results-multigpu.md lists them).

use anyhow::{Context, Result};
use reef_model::Model;
use reef_sched::place::TaskNeeds;
use reef_sim::{DeviceSpec, KernelShape};
use std::sync::Arc;

pub const GIB: u64 = 1 << 30;
pub const MIB: u64 = 1 << 20;
const MS: u64 = 1_000_000;

/// NVIDIA V100 (SXM2, 16 GB) as in the paper's AWS p3.8xlarge (§V: "each
/// V100 has 16GB of RAM and 5120 cores"): the `gv100` preset (Volta, 80
/// SMs, 5120 cores, the same per-SM limits) with 16 GiB and the V100's
/// 900 GB/s (NVIDIA V100 datasheet) instead of the Quadro GV100's 32 GB and
/// 870 GB/s.
pub fn v100() -> Result<DeviceSpec> {
    let mut s = DeviceSpec::preset("gv100")?;
    s.name = "v100".into();
    s.memory_bytes = 16 * GIB;
    s.memory_bandwidth_bytes_per_s = 900_000_000_000;
    Ok(s)
}

/// NVIDIA P100 (16 GB), the paper's Chameleon node (§V: "Each P100 has 16GB
/// of RAM and 3584 cores"; §II-A: 56 SMs of 64 cores). From the `gv100`
/// preset with Pascal's per-SM limits (NVIDIA Pascal tuning guide, compute
/// capability 6.0: 64 warps, 32 blocks, 2048 threads, 64K registers and
/// 64 KB shared memory per SM — the same as Volta's but the shared memory),
/// 16 GiB and 732 GB/s (P100 datasheet). The launch path and kill latency
/// stay the GV100 preset's (assumed).
pub fn p100() -> Result<DeviceSpec> {
    let mut s = DeviceSpec::preset("gv100")?;
    s.name = "p100".into();
    s.compute_units = 56;
    s.lds_bytes_per_cu = 65536;
    s.memory_bytes = 16 * GIB;
    s.memory_bandwidth_bytes_per_s = 732_000_000_000;
    // 56 SMs x 64 FP32 lanes x 2 x 1.48 GHz boost (P100 SXM2 datasheet: 10.6 TFLOPS).
    s.fp32_flops = 10_600_000_000_000;
    Ok(s)
}

/// Placement's view of a device.
pub use reef_exec::device_limits as limits;

/// One host phase or kernel burst of a job.
#[derive(Debug, Clone)]
pub enum Step {
    /// CPU work, no GPU (input reading, host computation, PCIe copies).
    Host(u64),
    /// Kernels launched back to back on the job's stream, then waited for.
    Kernels(Vec<Arc<KernelShape>>),
}

/// A job: one process with one GPU task (§III-A: all its kernels share
/// memory objects, so Algorithm 1 merges them into one task).
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub large: bool,
    /// Host work before `task_begin` (input read / generation).
    pub pre_ns: u64,
    /// The task: what `task_begin` declares.
    pub needs: TaskNeeds,
    /// Inside the task (after the allocation, before the free).
    pub steps: Vec<Step>,
}

/// How a Rodinia kernel's block time is modelled.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// Streams `touch` × footprint bytes per launch at the device's memory
    /// bandwidth (roofline): block time grows linearly with the blocks
    /// sharing a CU, so co-located kernels share bandwidth.
    Memory { touch: f64 },
    /// A fixed block time (compute-bound, flat co-residency curve).
    Compute { block_ns: u64 },
}

/// A Rodinia benchmark-argument combination of §V-A.
struct Combo {
    name: &'static str,
    gib: f64,
    tpb: u32,
    /// Thread blocks of the main kernel.
    blocks: u64,
    /// Kernels per iteration.
    kernels: u32,
    bound: Bound,
    iterations: u32,
}

// §V-A: "7 benchmark-argument combinations that generate 1 to 4 GB of
// footprint (using all but lavaMD), and 10 which generate over 4 GB (using
// all but bfs). The largest memory footprint is ~13 GB for a lavaMD
// instance." The footprints below are assumed within those ranges. The
// threads per block are the Rodinia 3.1 sources' (backprop and srad_v2
// BLOCK_SIZE 16 -> 16x16; srad_v1 NUMBER_THREADS 512; lavaMD
// NUMBER_THREADS 128; needle BLOCK_SIZE 16; bfs MAX_THREADS_PER_BLOCK 512;
// dwt2d: 192 assumed). Grid sizes, kernels per iteration, iteration counts,
// the bytes each kernel streams and the compute-bound block times are
// assumed (grids grow with the footprint; lavaMD has one block per box,
// needle N/16 blocks on its longest diagonal and a small grid otherwise).
const SMALL: &[Combo] = &[
    Combo {
        name: "backprop-s",
        gib: 2.0,
        tpb: 256,
        blocks: 524_288,
        kernels: 2,
        bound: Bound::Memory { touch: 1.0 },
        iterations: 60,
    },
    Combo {
        name: "srad_v1-s",
        gib: 1.5,
        tpb: 512,
        blocks: 65_536,
        kernels: 6,
        bound: Bound::Memory { touch: 0.4 },
        iterations: 100,
    },
    Combo {
        name: "srad_v2-s",
        gib: 3.0,
        tpb: 256,
        blocks: 524_288,
        kernels: 2,
        bound: Bound::Memory { touch: 0.8 },
        iterations: 100,
    },
    Combo {
        name: "needle-s",
        gib: 2.0,
        tpb: 16,
        blocks: 1_448,
        kernels: 2,
        bound: Bound::Compute { block_ns: 400_000 },
        iterations: 40,
    },
    Combo {
        name: "dwt2d-s",
        gib: 1.2,
        tpb: 192,
        blocks: 87_381,
        kernels: 3,
        bound: Bound::Memory { touch: 0.6 },
        iterations: 40,
    },
    Combo {
        name: "bfs-s",
        gib: 1.5,
        tpb: 512,
        blocks: 32_768,
        kernels: 2,
        bound: Bound::Memory { touch: 0.3 },
        iterations: 120,
    },
    Combo {
        name: "bfs-m",
        gib: 3.5,
        tpb: 512,
        blocks: 65_536,
        kernels: 2,
        bound: Bound::Memory { touch: 0.3 },
        iterations: 120,
    },
];

const LARGE: &[Combo] = &[
    Combo {
        name: "backprop-l",
        gib: 6.0,
        tpb: 256,
        blocks: 1_572_864,
        kernels: 2,
        bound: Bound::Memory { touch: 1.0 },
        iterations: 40,
    },
    Combo {
        name: "backprop-xl",
        gib: 10.0,
        tpb: 256,
        blocks: 2_621_440,
        kernels: 2,
        bound: Bound::Memory { touch: 1.0 },
        iterations: 30,
    },
    Combo {
        name: "srad_v1-l",
        gib: 5.0,
        tpb: 512,
        blocks: 218_453,
        kernels: 6,
        bound: Bound::Memory { touch: 0.4 },
        iterations: 60,
    },
    Combo {
        name: "srad_v2-l",
        gib: 8.0,
        tpb: 256,
        blocks: 1_398_101,
        kernels: 2,
        bound: Bound::Memory { touch: 0.8 },
        iterations: 60,
    },
    Combo {
        name: "srad_v2-xl",
        gib: 11.0,
        tpb: 256,
        blocks: 1_922_389,
        kernels: 2,
        bound: Bound::Memory { touch: 0.8 },
        iterations: 40,
    },
    Combo {
        name: "lavaMD-l",
        gib: 7.0,
        tpb: 128,
        blocks: 8_000,
        kernels: 1,
        bound: Bound::Compute {
            block_ns: 2_000_000,
        },
        iterations: 20,
    },
    Combo {
        name: "lavaMD-xl",
        gib: 13.0,
        tpb: 128,
        blocks: 15_625,
        kernels: 1,
        bound: Bound::Compute {
            block_ns: 2_000_000,
        },
        iterations: 12,
    },
    Combo {
        name: "needle-l",
        gib: 8.0,
        tpb: 16,
        blocks: 2_896,
        kernels: 2,
        bound: Bound::Compute { block_ns: 400_000 },
        iterations: 30,
    },
    Combo {
        name: "needle-m",
        gib: 4.5,
        tpb: 16,
        blocks: 2_172,
        kernels: 2,
        bound: Bound::Compute { block_ns: 400_000 },
        iterations: 30,
    },
    Combo {
        name: "dwt2d-l",
        gib: 5.0,
        tpb: 192,
        blocks: 364_089,
        kernels: 3,
        bound: Bound::Memory { touch: 0.6 },
        iterations: 30,
    },
];

/// §I: "a single scientific workload typically only uses ~30% of GPU
/// resources" (Los Alamos): a job's kernels take 30% of its stand-alone
/// time on the reference device (the P100) and host work the other 70%,
/// 60% of it before the task (input reading and generation, H2D) and 40%
/// between iterations (host steps). The split is assumed.
pub const GPU_SHARE: f64 = 0.30;
const PRE_SHARE: f64 = 0.6;

/// The streaming (memory-bound) kernels' grids are coarsened: one
/// simulated block stands for this many blocks of the grid in the table
/// (same threads per block), so that a kernel is tens of waves rather than
/// thousands for the simulator; the roofline keeps each kernel's time.
/// Without it the 104 Rodinia runs take over 6 minutes on this machine.
pub const COARSEN: u64 = 64;

fn sim_blocks(c: &Combo) -> u64 {
    match c.bound {
        Bound::Memory { .. } => (c.blocks / COARSEN).max(1),
        Bound::Compute { .. } => c.blocks,
    }
}

fn kernel_shape(c: &Combo, k: u32, spec: &DeviceSpec) -> Result<Arc<KernelShape>> {
    let blocks = sim_blocks(c).min(u32::MAX as u64) as u32;
    let wpb = c.tpb.div_ceil(spec.wave_size);
    let per_cu = spec
        .max_blocks_per_cu
        .min(spec.max_waves_per_cu / wpb.max(1))
        .min(spec.max_threads_per_cu / c.tpb)
        .max(1);
    let curve = match c.bound {
        Bound::Memory { touch } => {
            // Roofline: one block alone on a CU moves its share of the
            // kernel's bytes at the CU's share of the bandwidth; k blocks
            // on a CU take k times as long.
            let bytes = c.gib * GIB as f64 * touch / c.kernels as f64;
            let base = bytes / blocks as f64 * spec.compute_units as f64
                / spec.memory_bandwidth_bytes_per_s as f64
                * 1e9;
            (1..=per_cu)
                .map(|k| (base * k as f64).ceil() as u64)
                .collect()
        }
        Bound::Compute { block_ns } => vec![block_ns],
    };
    Ok(Arc::new(KernelShape::synthetic(
        &format!("{}#{k}", c.name),
        blocks,
        c.tpb,
        0,
        0,
        curve,
        spec,
    )?))
}

/// Stand-alone time of one kernel on an empty device (all waves).
fn alone_ns(s: &KernelShape, spec: &DeviceSpec) -> u64 {
    let wpb = s.threads_per_block.div_ceil(spec.wave_size);
    let per_cu = spec
        .max_blocks_per_cu
        .min(spec.max_waves_per_cu / wpb.max(1))
        .min(spec.max_threads_per_cu / s.threads_per_block)
        .max(1) as u64;
    let resident = per_cu * spec.compute_units as u64;
    let blocks = s.blocks as u64;
    let k = blocks.div_ceil(spec.compute_units as u64).min(per_cu) as u32;
    blocks.div_ceil(resident.max(1)).max(1) * s.exec_ns(k)
}

fn rodinia_job(
    c: &Combo,
    large: bool,
    spec: &DeviceSpec,
    reference: &DeviceSpec,
    gpu_share: f64,
) -> Result<Job> {
    let shapes: Vec<_> = (0..c.kernels)
        .map(|k| kernel_shape(c, k, spec))
        .collect::<Result<_>>()?;
    let ref_gpu: u64 = (0..c.kernels)
        .map(|k| kernel_shape(c, k, reference).map(|s| alone_ns(&s, reference)))
        .sum::<Result<u64>>()?
        * c.iterations as u64;
    let host = (ref_gpu as f64 * (1.0 - gpu_share) / gpu_share) as u64;
    let pre = (host as f64 * PRE_SHARE) as u64;
    let gap = (host - pre) / c.iterations as u64;
    let mut steps = Vec::new();
    for _ in 0..c.iterations {
        steps.push(Step::Kernels(shapes.clone()));
        steps.push(Step::Host(gap));
    }
    Ok(Job {
        name: c.name.into(),
        large,
        pre_ns: pre,
        needs: TaskNeeds {
            memory: (c.gib * GIB as f64) as u64,
            threads_per_block: c.tpb,
            blocks: sim_blocks(c),
        },
        steps,
    })
}

/// The Rodinia pools on `spec` (host times from the P100 reference), with
/// kernels taking `gpu_share` of a job's stand-alone time ([`GPU_SHARE`]
/// unless a sensitivity run asks otherwise).
pub fn rodinia_pools(spec: &DeviceSpec, gpu_share: f64) -> Result<(Vec<Job>, Vec<Job>)> {
    if !(gpu_share > 0.0 && gpu_share <= 1.0) {
        anyhow::bail!("--gpu-share must be in (0, 1], got {gpu_share}");
    }
    let reference = p100()?;
    let large = LARGE
        .iter()
        .map(|c| rodinia_job(c, true, spec, &reference, gpu_share))
        .collect::<Result<_>>()?;
    let small = SMALL
        .iter()
        .map(|c| rodinia_job(c, false, spec, &reference, gpu_share))
        .collect::<Result<_>>()?;
    Ok((large, small))
}

/// A deterministic generator for job mixes (splitmix64).
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        reef_sim::splitmix64(&mut self.0)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Table I: `jobs` jobs at `large:small` = `ratio:1`, drawn at random from
/// the pools, in a random order.
pub fn mix(large: &[Job], small: &[Job], jobs: usize, ratio: usize, rng: &mut Rng) -> Vec<Job> {
    let n_large = jobs * ratio / (ratio + 1);
    let mut v: Vec<Job> = (0..jobs)
        .map(|i| {
            if i < n_large {
                large[rng.below(large.len())].clone()
            } else {
                small[rng.below(small.len())].clone()
            }
        })
        .collect();
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
    v
}

/// The assumed footprint figures, defined once beside placement.
pub use reef_sched::place::{NN_CONTEXT, NN_WORKSPACE};
/// Host work per inference (reading and resizing one image, as Darknet's
/// `predict` does per image): assumed 2 ms.
pub const NN_HOST_NS: u64 = 2 * MS;

/// A neural-network job (§V-E): `inferences` inferences of `model`, each
/// after its host step. Footprint: the model's buffers (weights and
/// activations from its schedule) + [`NN_WORKSPACE`] + [`NN_CONTEXT`].
pub fn nn_job(model: &Model, spec: &DeviceSpec, inferences: u32) -> Result<Job> {
    let shapes = KernelShape::for_model(model, spec)
        .with_context(|| format!("{}: kernel shapes on {}", model.name, spec.name))?;
    anyhow::ensure!(!model.kernels.is_empty(), "a model without kernels");
    let mut steps = Vec::new();
    for _ in 0..inferences {
        steps.push(Step::Host(NN_HOST_NS));
        steps.push(Step::Kernels(shapes.clone()));
    }
    Ok(Job {
        name: model.name.clone(),
        large: false,
        pre_ns: 0,
        needs: reef_sched::place::model_needs(model),
        steps,
    })
}
