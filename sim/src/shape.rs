//! What the simulator needs to know about a kernel: its grid, per-block
//! resources, and the block execution time as a function of CU co-residency
//! (DESIGN.md "The simulator"; REEF §5.2 and Fig. 13 for per-block execution
//! times, §5.1 footnote 3 for CU occupancy).
//!
//! Block cost (docs/simulator.md "Calibration" and "Cost model"):
//! - on a device whose `measured_profiles` is set, block execution with k
//!   co-resident blocks is the measured `latency[k-1]` less the device's
//!   launch path (host launch + fetch + dispatch), which every stand-alone
//!   measurement includes; floored at `min_block_ns`;
//! - otherwise the measured (MI50) execution time scaled by the device's
//!   `profile_scale` (per-CU peak FP32 ratio), never below a memory roofline:
//!   each block moves its share of the kernel's buffer bytes, and with k
//!   blocks per CU, k x min(blocks, CUs) blocks share the device's memory
//!   bandwidth; kernels without a profile use the roofline alone.
//!
//! DRAM traffic ([`KernelShape::dram_bytes_per_block`]): the bytes one
//! block moves to or from device memory, which the engine charges against
//! the device's memory bandwidth shared by every resident launch (REEF
//! §6.5, Fig. 27; docs/simulator.md "Shared memory bandwidth"). Compiled
//! kernels carry their bytes ([`crate::costmodel`]); the measured MI50
//! models get them from their class's memory utilisation (Aker §3.1,
//! [`crate::resources`]) at full occupancy ([`dram_bytes_from_utilisation`]).
//!
//! Compiled kernels (reef-compile: recorded work and ptxas resources, no
//! measured curve) take their occupancy and block time from
//! [`crate::costmodel`] on every preset.
//!
//! Occupancy: threads, waves, blocks, LDS and registers per CU. The REEF
//! schedule format does not record registers; when a measured curve exists,
//! its length is the highest co-residency the profiler could reach, so the
//! block's register footprint is taken as `registers_per_cu / len` (the
//! register file is what limits occupancy in the absence of other limits).

use crate::mix::Demand;
use crate::spec::DeviceSpec;
use reef_model::{Kernel, Model};
use std::sync::Arc;

/// Why a kernel cannot run on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel {kernel}: {problem}")]
pub struct ShapeError {
    pub kernel: String,
    pub problem: String,
}

/// Per-launch kernel description used by the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelShape {
    pub name: String,
    /// Identity for value tracking (hash of name and launch shape).
    pub identity: u64,
    /// Blocks in the grid.
    pub blocks: u32,
    pub threads_per_block: u32,
    pub waves_per_block: u32,
    pub lds_per_block: u32,
    /// 32-bit registers per block (all threads).
    pub regs_per_block: u32,
    /// `exec_ns[k-1]`: one block's execution with k co-resident blocks.
    exec_ns: Vec<u64>,
    /// Extension slope past the curve (ns per extra co-resident block).
    slope_ns: u64,
    /// Bytes one block reads from and writes to device memory (DRAM), 0
    /// when unknown: what the block asks of the bandwidth the whole device
    /// shares (docs/simulator.md "Shared memory bandwidth"). Set with
    /// [`KernelShape::with_dram_bytes`]; 0 for [`KernelShape::synthetic`].
    pub dram_bytes_per_block: u64,
    /// Per-wave pipe demand inside a CU (resource mix, `mix.rs`);
    /// [`Demand::UNKNOWN`] unless declared with [`KernelShape::with_demand`].
    pub demand: Demand,
    /// Bytes the whole kernel touches (its footprint): the sizes of the
    /// buffers it takes as arguments, each once (MI50 schedules: every
    /// storage of `args`, `size` x element size; compiled kernels: the
    /// compiler's `bytes_read` + `bytes_written`). What it asks of the L2
    /// capacity the resident launches share (docs/simulator.md "L2
    /// capacity"); 0 when unknown. Set with [`KernelShape::with_footprint`].
    pub footprint_bytes: u64,
}

/// Bytes one block of a kernel moves to or from DRAM, from the kernel's
/// memory-bandwidth utilisation `util` (a fraction of the device's peak)
/// when it fills every CU: at full occupancy `K` = `curve.len()` blocks
/// are resident on each of the `compute_units` CUs, each lasting
/// `curve[K-1]` ns, and together they draw `util x bandwidth`, so one
/// block moves `util x bandwidth x curve[K-1] / (CUs x K)`. Where the
/// utilisation was measured at full occupancy (Aker §3.1: Nsight's DRAM
/// throughput of kernels that fill the GPU) this is the traffic that
/// reproduces it; the same block's traffic is then charged at whatever
/// co-residency it runs.
pub fn dram_bytes_from_utilisation(util: f64, curve: &[u64], spec: &DeviceSpec) -> u64 {
    let Some(&last) = curve.last() else {
        return 0;
    };
    if !(util.is_finite() && util > 0.0) {
        return 0;
    }
    let k = curve.len() as f64;
    let b = util * spec.memory_bandwidth_bytes_per_s as f64 * last as f64
        / 1e9
        / (spec.compute_units as f64 * k);
    b.round() as u64
}

/// FNV-1a, the simulator's stable hash (value tracking, identities).
pub fn fnv1a(bytes: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf29ce484222325u64 ^ seed;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The longest a block may run: one hour. Curves with longer blocks are
/// refused and extrapolation stops there, so simulated times cannot overflow.
pub const MAX_BLOCK_NS: u64 = 3_600_000_000_000;

impl KernelShape {
    /// A shape from explicit numbers (tests, synthetic workloads). `exec_ns`
    /// is the block execution curve (index k-1 = k co-resident blocks).
    pub fn synthetic(
        name: &str,
        blocks: u32,
        threads_per_block: u32,
        lds_per_block: u32,
        regs_per_block: u32,
        exec_ns: Vec<u64>,
        spec: &DeviceSpec,
    ) -> Result<Self, ShapeError> {
        let err = |problem: String| ShapeError {
            kernel: name.to_string(),
            problem,
        };
        if blocks == 0 || threads_per_block == 0 {
            return Err(err("grid and block must be non-empty".into()));
        }
        if exec_ns.is_empty() {
            return Err(err("empty block execution curve".into()));
        }
        let waves = threads_per_block.div_ceil(spec.wave_size);
        if threads_per_block > spec.max_threads_per_cu || waves > spec.max_waves_per_cu {
            return Err(err(format!(
                "{threads_per_block} threads per block exceed a {} CU ({} threads)",
                spec.name, spec.max_threads_per_cu
            )));
        }
        if lds_per_block > spec.lds_bytes_per_cu {
            return Err(err(format!(
                "{lds_per_block} B of shared memory per block exceed a {} CU ({} B)",
                spec.name, spec.lds_bytes_per_cu
            )));
        }
        if regs_per_block > spec.registers_per_cu {
            return Err(err(format!(
                "{regs_per_block} registers per block exceed a {} CU ({})",
                spec.name, spec.registers_per_cu
            )));
        }
        if let Some(e) = exec_ns.iter().find(|&&e| e > MAX_BLOCK_NS) {
            return Err(err(format!(
                "a block duration of {e} ns is longer than the simulator's limit of \
                 {MAX_BLOCK_NS} ns (1 hour)"
            )));
        }
        let exec_ns: Vec<u64> = exec_ns.iter().map(|&e| e.max(spec.min_block_ns)).collect();
        let slope_ns = if exec_ns.len() >= 2 {
            exec_ns[exec_ns.len() - 1].saturating_sub(exec_ns[exec_ns.len() - 2])
        } else {
            0
        };
        let mut id = name.as_bytes().to_vec();
        id.extend_from_slice(&blocks.to_le_bytes());
        id.extend_from_slice(&threads_per_block.to_le_bytes());
        Ok(KernelShape {
            name: name.to_string(),
            identity: fnv1a(&id, 0x5eef),
            blocks,
            threads_per_block,
            waves_per_block: waves,
            lds_per_block,
            regs_per_block,
            exec_ns,
            slope_ns,
            dram_bytes_per_block: 0,
            demand: Demand::UNKNOWN,
            footprint_bytes: 0,
        })
    }

    /// The shape of kernel `index` of `model` on `spec` (see the module doc
    /// for the block cost).
    pub fn from_model(model: &Model, index: usize, spec: &DeviceSpec) -> Result<Self, ShapeError> {
        let k: &Kernel = model.kernels.get(index).ok_or_else(|| ShapeError {
            kernel: format!("#{index}"),
            problem: format!("{} has {} kernels", model.name, model.kernels.len()),
        })?;
        let identity = {
            let mut id = model.name.as_bytes().to_vec();
            id.extend_from_slice(k.name.as_bytes());
            id.extend_from_slice(&(index as u64).to_le_bytes());
            fnv1a(&id, 0x5eef)
        };
        if k.profile.is_none() && k.work.is_some() {
            // A compiled kernel (reef-compile): occupancy from its ptxas
            // resources, block time from the roofline (crate::costmodel).
            let mut s = crate::costmodel::compiled_shape(model, index, spec)?;
            s.identity = identity;
            return Ok(s);
        }
        let name = format!("{}[{}] {}", model.name, index, k.name);
        let blocks = u32::try_from(k.num_blocks()).map_err(|_| ShapeError {
            kernel: name.clone(),
            problem: "more than 2^32 blocks".into(),
        })?;
        let threads = k.threads_per_block();
        let waves = threads.div_ceil(spec.wave_size).max(1);
        // Memory roofline: each block moves its share of the kernel's bytes;
        // with k blocks per CU, k x min(blocks, CUs) blocks of the kernel run
        // at once and share the device's bandwidth.
        let bytes: u64 = k
            .args
            .iter()
            .filter_map(|&a| model.buffers.get(a))
            .map(|b| b.bytes)
            .fold(0u64, u64::saturating_add);
        // Footprint: every distinct argument buffer once.
        let footprint = {
            let mut args = k.args.clone();
            args.sort_unstable();
            args.dedup();
            args.iter()
                .filter_map(|&a| model.buffers.get(a))
                .map(|b| b.bytes)
                .fold(0u64, u64::saturating_add)
        };
        let bw = spec.memory_bandwidth_bytes_per_s as f64;
        let spread = blocks.min(spec.compute_units) as f64;
        let roof = |kres: usize| -> u64 {
            let per_block = bytes as f64 / blocks as f64;
            let concurrent = (kres as f64 * spread).min(blocks as f64);
            (per_block * concurrent / bw * 1e9) as u64
        };
        let (exec, regs) = match &k.profile {
            Some(p) => {
                let len = p.block_latency_ns.len();
                let lp = spec.launch_path_ns();
                let exec: Vec<u64> = p
                    .block_latency_ns
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| {
                        let measured = l.saturating_sub(lp);
                        if spec.measured_profiles {
                            measured
                        } else {
                            ((measured as f64 * spec.profile_scale) as u64).max(roof(i + 1))
                        }
                    })
                    .collect();
                let regs = k
                    .registers
                    .map(|r| r.saturating_mul(threads))
                    .unwrap_or(spec.registers_per_cu / len as u32);
                (exec, regs)
            }
            None => {
                let max_k = (spec.max_waves_per_cu / waves).max(1) as usize;
                let exec = (1..=max_k).map(roof).collect();
                (
                    exec,
                    k.registers.map(|r| r.saturating_mul(threads)).unwrap_or(0),
                )
            }
        };
        let mut s = Self::synthetic(&name, blocks, threads, k.shared_mem_bytes, regs, exec, spec)?;
        s.identity = identity;
        // Resource mix: the model records no work data, so the demand comes
        // from the operator in the kernel's name (resources.rs), and so
        // does its DRAM traffic: its class's memory utilisation (Aker §3.1)
        // at full occupancy on this device. Unknown class: 0 (no source).
        let (class, demand) = crate::resources::demand_of_name(&k.name);
        let util = crate::resources::memory_utilisation(class).unwrap_or(0.0);
        let bytes = dram_bytes_from_utilisation(util, &s.exec_ns, spec);
        Ok(s.with_demand(demand)
            .with_dram_bytes(bytes)
            .with_footprint(footprint))
    }

    /// Shapes of every kernel of a model, in launch order.
    pub fn for_model(model: &Model, spec: &DeviceSpec) -> Result<Vec<Arc<Self>>, ShapeError> {
        (0..model.kernels.len())
            .map(|i| Self::from_model(model, i, spec).map(Arc::new))
            .collect()
    }

    /// One block's execution time with `k` (≥ 1) co-resident blocks; past the
    /// curve it grows by the curve's last slope.
    pub fn exec_ns(&self, k: u32) -> u64 {
        let k = k.max(1) as usize;
        match self.exec_ns.get(k - 1) {
            Some(&e) => e,
            None => {
                let last = *self.exec_ns.last().expect("curve is never empty");
                let extra = self
                    .slope_ns
                    .saturating_mul((k - self.exec_ns.len()) as u64);
                last.saturating_add(extra).min(MAX_BLOCK_NS)
            }
        }
    }

    /// One block's execution time at co-residency `kf` / 1024 (≥ 1), the
    /// curve linearly interpolated between integer points (resource mix,
    /// `mix.rs`). Integer `kf / 1024` gives exactly [`KernelShape::exec_ns`].
    pub fn exec_ns_fixed(&self, kf: u64) -> u64 {
        let one = crate::mix::ONE as u64;
        let kf = kf.max(one);
        let lo = (kf / one).min(u32::MAX as u64) as u32;
        let frac = kf % one;
        let a = self.exec_ns(lo);
        if frac == 0 {
            return a;
        }
        let b = self.exec_ns(lo.saturating_add(1));
        let v = a as u128 * (one - frac) as u128 + b as u128 * frac as u128;
        (v / one as u128) as u64
    }

    /// Declares the kernel's per-wave pipe demand (resource mix, `mix.rs`).
    /// Its DRAM traffic is declared apart ([`KernelShape::with_dram_bytes`];
    /// docs/simulator.md "Shared memory bandwidth": how the two relate).
    pub fn with_demand(mut self, d: Demand) -> Self {
        self.demand = d;
        self
    }

    /// Declares the bytes one block moves to or from DRAM (shared memory
    /// bandwidth, docs/simulator.md).
    pub fn with_dram_bytes(mut self, bytes_per_block: u64) -> Self {
        self.dram_bytes_per_block = bytes_per_block;
        self
    }

    /// Declares the bytes the whole kernel touches (L2 capacity,
    /// docs/simulator.md).
    pub fn with_footprint(mut self, bytes: u64) -> Self {
        self.footprint_bytes = bytes;
        self
    }

    /// Length of the block execution curve.
    pub fn curve_len(&self) -> usize {
        self.exec_ns.len()
    }
}
