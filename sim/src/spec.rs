//! Device specifications as data files (DESIGN.md "The simulator"): compute
//! units, per-CU occupancy limits, the kernel launch path (host launch,
//! command-processor fetch and dispatch), preemption costs (REEF §4.2 lazy
//! eviction, §4.3 kill) and memory. The presets live in `sim/devices/*.toml`
//! with a source comment on every number; they are compiled in, and any other
//! file with the same fields can be loaded with [`DeviceSpec::from_file`].

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Preset names, in the order `reef-bench --device` lists them.
pub const PRESETS: &[&str] = &["mi50", "gv100", "h100", "ada6000"];

fn preset_text(name: &str) -> Option<&'static str> {
    Some(match name {
        "mi50" => include_str!("../devices/mi50.toml"),
        "gv100" => include_str!("../devices/gv100.toml"),
        "h100" => include_str!("../devices/h100.toml"),
        "ada6000" => include_str!("../devices/ada6000.toml"),
        _ => return None,
    })
}

/// The largest value a spec may give a launch-path, flag, kill or block
/// time: one second, far above any GPU's (the MI50's are microseconds).
pub const MAX_DEVICE_TIME_NS: u64 = 1_000_000_000;

/// Cost of running a kernel through REEF's `dkp` kernel (a padded launch,
/// [`crate::Sim::launch_padded`]), in millionths of each block's duration:
/// 8 000 ppm = 0.8 %.
///
/// Source: REEF (TOCS 2025) §6.5, Fig. 25 ("ProxyKernel"): launching
/// real-time kernels through the dkp kernel without padding any
/// best-effort kernel costs 0.8 % of execution time on average (1.18 % at
/// most) over the five models; "the minimal overhead comes from the logic
/// branch of CU partition and the initial state preparation for global
/// function pointers", which every block of the dkp kernel runs, whichever
/// kernel its branch calls. §5.1 gives the same cost as "around 1%". The
/// paper states it once, not per GPU, so one figure serves every preset
/// (docs/simulator.md "Padded-launch overhead"). Charged on every part of
/// a padded launch; a statically fused launch
/// ([`crate::Sim::launch_fused`]) has no function pointer and no branch on
/// the CU partition, and pays nothing.
pub const PADDED_LAUNCH_OVERHEAD_PPM: u64 = 8_000;

/// `ns` plus the padded-launch overhead on it
/// ([`PADDED_LAUNCH_OVERHEAD_PPM`], rounded up): the duration of a block
/// that would take `ns` as a plain launch, run through the `dkp` kernel.
pub fn padded_block_ns(ns: u64) -> u64 {
    let over = (ns as u128 * PADDED_LAUNCH_OVERHEAD_PPM as u128).div_ceil(1_000_000);
    ns.saturating_add(over as u64)
}

/// Fields a spec file may only set with their source: the comment lines
/// right above the field must hold a `Source:` line that names a table,
/// figure, section or page of the document (issue 31: every simulator term
/// from documented hardware behaviour, its source cited). A file that sets
/// one without it is refused, the field named.
pub const SOURCED_FIELDS: &[&str] = &[
    "l2_bytes",
    "dram_latency_ns",
    "dram_channels",
    "dram_access_bytes",
];

/// The source of `field` in spec text: the comment block right above the
/// line that sets it. `Ok("")` when the field is not set; `Err` with the
/// problem when it is set without a `Source:` line naming where in the
/// document (a table, figure, section or page) the number is.
pub fn field_source<'t>(text: &'t str, field: &str) -> Result<&'t str, String> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = lines.iter().position(|l| {
        l.split('=')
            .next()
            .is_some_and(|k| k.trim() == field && l.contains('='))
    }) else {
        return Ok("");
    };
    let mut first = at;
    while first > 0 && lines[first - 1].trim_start().starts_with('#') {
        first -= 1;
    }
    let start = text
        .lines()
        .take(first)
        .map(|l| l.len() + 1)
        .sum::<usize>()
        .min(text.len());
    let end = text
        .lines()
        .take(at)
        .map(|l| l.len() + 1)
        .sum::<usize>()
        .min(text.len());
    let block = &text[start..end];
    let Some(src) = block.find("Source:") else {
        return Err(
            "set without a source: the comment right above it needs a `Source:` line \
             (document, table or figure, page)"
                .into(),
        );
    };
    let cited = &block[src..];
    let names_where = ["Table", "table", "Fig", "§", "p. ", "page"]
        .iter()
        .any(|w| cited.contains(w));
    if !names_where {
        return Err(
            "its `Source:` line names no table, figure, section or page of the document".into(),
        );
    }
    Ok(block)
}

/// A preemption capability (DESIGN.md layer 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PreemptLevel {
    /// 1: evict work still in the host queue (caller side).
    EvictHostQueue = 1,
    /// 2: lazy eviction of device-queue work: a per-stream flag in device
    /// memory checked at kernel entry (REEF §4.2).
    PreemptFlag = 2,
    /// 3: kill the running blocks (REEF §4.3).
    KillRunning = 3,
}

/// One GPU model. All times in integer nanoseconds.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    pub name: String,
    pub compute_units: u32,
    pub wave_size: u32,
    pub max_waves_per_cu: u32,
    pub max_threads_per_cu: u32,
    pub max_blocks_per_cu: u32,
    pub lds_bytes_per_cu: u32,
    pub registers_per_cu: u32,
    pub memory_bytes: u64,
    pub memory_bandwidth_bytes_per_s: u64,
    pub fp32_flops: u64,
    /// Peak matrix-unit (tensor-core) operations per second; 0 when the
    /// device has none. Used by the resource mix (`mix.rs`).
    #[serde(default)]
    pub matrix_flops: u64,
    /// L2 capacity, bytes, shared by every resident launch (docs/simulator.md
    /// "L2 capacity"): when the summed footprints of the resident launches
    /// exceed it, each launch's blocks move the bytes of their footprint
    /// that the L2 no longer holds from DRAM. 0: no L2 term.
    #[serde(default)]
    pub l2_bytes: u64,
    /// Idle DRAM latency (a dependent load that misses the L2), ns: the
    /// base of the loaded-latency term (docs/simulator.md "Loaded memory
    /// latency"). 0: no loaded-latency term.
    #[serde(default)]
    pub dram_latency_ns: u64,
    /// Independent DRAM channels (memory-controller queues) the bandwidth
    /// is spread over.
    #[serde(default)]
    pub dram_channels: u32,
    /// Bytes one DRAM access moves (the L2's fetch granularity).
    #[serde(default)]
    pub dram_access_bytes: u32,
    /// Host-side cost of one launch call.
    pub host_launch_ns: u64,
    /// Command-processor fetch of one kernel packet from a device queue.
    pub cp_fetch_ns: u64,
    /// Command-processor dispatch once the stream's previous kernel is done.
    pub cp_dispatch_ns: u64,
    /// Hardware queues per stream priority (docs/simulator.md "Hardware
    /// queues"): streams of one priority beyond this many share queues
    /// round robin, and streams sharing a queue serialise.
    pub hw_queues: u32,
    /// Entry check and exit of a kernel fetched while its stream's preempt
    /// flag is set.
    pub flag_check_ns: u64,
    /// Process contexts whose blocks may be resident at once
    /// (docs/simulator.md "Contexts"): 1 on NVIDIA GPUs without MPS, where
    /// kernels of different CUDA contexts never run concurrently; the
    /// processes the AMD hardware scheduler maps at once on the MI50.
    pub concurrent_contexts: u32,
    /// Time slice of a context when others wait (NVIDIA: the driver's
    /// default channel-group timeslice); 0 = none known: a waiting context
    /// gets the device only when a resident one idles.
    pub context_timeslice_ns: u64,
    /// Cost of switching the device from one context to another.
    pub context_switch_ns: u64,
    /// Delay from a kill command to the moment the blocks are gone.
    pub kill_latency_ns: u64,
    /// True when the kernels' measured `latency[k]` curves were taken on this
    /// GPU; else block cost comes from the cost model.
    pub measured_profiles: bool,
    /// Cost model: factor applied to a measured (MI50) block execution time.
    pub profile_scale: f64,
    /// Floor of a block's execution time.
    pub min_block_ns: u64,
    /// Preemption levels supported (1, 2, 3).
    pub preempt_levels: Vec<u8>,
}

/// Why a device spec could not be used. The underlying error is part of
/// the message (field `cause`), not a `source()`, so printing the chain
/// (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(
        "unknown device {0:?}: known presets are mi50, gv100, h100, ada6000, or pass a path to a .toml spec"
    )]
    UnknownPreset(String),
    #[error("{path}: cannot read device spec: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: invalid device spec: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {field}: {problem}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        problem: String,
    },
}

impl DeviceSpec {
    /// A compiled-in preset (`mi50`, `gv100`, `h100`, `ada6000`).
    pub fn preset(name: &str) -> Result<Self, SpecError> {
        let text = preset_text(name).ok_or_else(|| SpecError::UnknownPreset(name.into()))?;
        Self::parse(Path::new(&format!("sim/devices/{name}.toml")), text)
    }

    /// A preset name, or a path to a spec file.
    pub fn by_name_or_path(s: &str) -> Result<Self, SpecError> {
        if preset_text(s).is_some() {
            Self::preset(s)
        } else if s.ends_with(".toml") || Path::new(s).is_file() {
            Self::from_file(Path::new(s))
        } else {
            Err(SpecError::UnknownPreset(s.into()))
        }
    }

    /// Reads a spec file.
    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|cause| SpecError::Io {
            path: path.into(),
            cause,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and validates spec text (`path` is for messages).
    pub fn parse(path: &Path, text: &str) -> Result<Self, SpecError> {
        let spec: DeviceSpec = toml::from_str(text).map_err(|e| {
            let message = e.to_string();
            if message.contains("unknown field `contention_share`") {
                // Removed in issue 15: say so rather than list the fields.
                return SpecError::Invalid {
                    path: path.into(),
                    field: "contention_share",
                    problem: "no longer a device parameter: contention between launches is \
                              now the shared memory bandwidth (memory_bandwidth_bytes_per_s, \
                              docs/simulator.md); delete the line"
                        .into(),
                };
            }
            SpecError::Parse {
                path: path.into(),
                message,
            }
        })?;
        spec.validate(path)?;
        for field in SOURCED_FIELDS {
            if let Err(problem) = field_source(text, field) {
                return Err(SpecError::Invalid {
                    path: path.into(),
                    field,
                    problem,
                });
            }
        }
        Ok(spec)
    }

    fn validate(&self, path: &Path) -> Result<(), SpecError> {
        let bad = |field, problem: &str| {
            Err(SpecError::Invalid {
                path: path.into(),
                field,
                problem: problem.into(),
            })
        };
        if self.compute_units == 0 || self.compute_units as usize > crate::CuSet::CAPACITY {
            return bad(
                "compute_units",
                &format!("must be 1..={}", crate::CuSet::CAPACITY),
            );
        }
        // Per-CU limits: positive (LDS may be 0), and within the 24-bit lanes
        // the engine packs a CU's usage in (engine.rs `Packed`).
        let lane_max = (1u32 << crate::engine::LANE) - 1;
        for (f, v, min, max) in [
            ("wave_size", self.wave_size, 1, u32::MAX),
            ("max_waves_per_cu", self.max_waves_per_cu, 1, lane_max),
            ("max_threads_per_cu", self.max_threads_per_cu, 1, lane_max),
            ("max_blocks_per_cu", self.max_blocks_per_cu, 1, lane_max),
            ("lds_bytes_per_cu", self.lds_bytes_per_cu, 0, lane_max),
            ("registers_per_cu", self.registers_per_cu, 1, lane_max),
        ] {
            if v < min {
                return bad(f, "must be positive");
            }
            if v > max {
                return bad(f, &format!("must be at most {max} (a per-CU limit)"));
            }
        }
        if self.concurrent_contexts == 0 {
            return bad(
                "concurrent_contexts",
                "must be at least 1 (contexts resident at once)",
            );
        }
        if self.hw_queues == 0 {
            return bad(
                "hw_queues",
                "must be at least 1 (hardware queues per stream priority)",
            );
        }
        if self.memory_bandwidth_bytes_per_s == 0 {
            return bad("memory_bandwidth_bytes_per_s", "must be positive");
        }
        // Times are added to the simulated clock: keep each one within a
        // second so that no sum of them can overflow.
        for (f, v) in [
            ("host_launch_ns", self.host_launch_ns),
            ("cp_fetch_ns", self.cp_fetch_ns),
            ("cp_dispatch_ns", self.cp_dispatch_ns),
            ("flag_check_ns", self.flag_check_ns),
            ("kill_latency_ns", self.kill_latency_ns),
            ("min_block_ns", self.min_block_ns),
            ("context_timeslice_ns", self.context_timeslice_ns),
            ("context_switch_ns", self.context_switch_ns),
            ("dram_latency_ns", self.dram_latency_ns),
        ] {
            if v > MAX_DEVICE_TIME_NS {
                return bad(f, &format!("must be at most {MAX_DEVICE_TIME_NS} ns (1 s)"));
            }
        }
        if self.dram_latency_ns > 0 && (self.dram_channels == 0 || self.dram_access_bytes == 0) {
            return bad(
                "dram_latency_ns",
                "the loaded-latency term needs dram_channels and dram_access_bytes too",
            );
        }
        if !(self.profile_scale.is_finite() && self.profile_scale > 0.0) {
            return bad("profile_scale", "must be a positive number");
        }
        if self.min_block_ns == 0 {
            return bad("min_block_ns", "must be positive (a block takes time)");
        }
        if self.preempt_levels.iter().any(|&l| !(1..=3).contains(&l)) {
            return bad("preempt_levels", "levels are 1, 2 or 3");
        }
        Ok(())
    }

    /// The preemption levels this device supports, ascending.
    pub fn levels(&self) -> Vec<PreemptLevel> {
        let mut v: Vec<PreemptLevel> = self
            .preempt_levels
            .iter()
            .filter_map(|&l| match l {
                1 => Some(PreemptLevel::EvictHostQueue),
                2 => Some(PreemptLevel::PreemptFlag),
                3 => Some(PreemptLevel::KillRunning),
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Queueing delay of one DRAM access at load `rho` (a fraction of the
    /// memory bandwidth, below 1), ns (docs/simulator.md "Loaded memory
    /// latency"): each channel is an M/D/1 queue served at its share of the
    /// bandwidth, `s = dram_access_bytes x dram_channels / bandwidth` per
    /// access, waiting `s x rho / (2 (1 - rho))`; bounded by Little's law,
    /// since no more accesses can wait than are in flight at the idle
    /// latency (`rho x dram_latency_ns / s` per channel): `rho x
    /// dram_latency_ns`. 0 without the term's fields.
    pub fn dram_queueing_ns(&self, rho: f64) -> f64 {
        if self.dram_latency_ns == 0 || rho.is_nan() || rho <= 0.0 {
            return 0.0;
        }
        let s = self.dram_access_bytes as f64 * self.dram_channels as f64 * 1e9
            / self.memory_bandwidth_bytes_per_s as f64;
        let l0 = self.dram_latency_ns as f64;
        let open = if rho < 1.0 {
            s * rho / (2.0 * (1.0 - rho))
        } else {
            f64::INFINITY
        };
        open.min(rho * l0)
    }

    /// The whole launch path of an isolated kernel (host launch + fetch +
    /// dispatch). A profiled stand-alone latency includes it, so it is
    /// subtracted from measured block latencies (docs/simulator.md).
    pub fn launch_path_ns(&self) -> u64 {
        self.host_launch_ns + self.cp_fetch_ns + self.cp_dispatch_ns
    }
}
