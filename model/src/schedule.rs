//! Loader for the REEF kernel-schedule format (`<model>.json` plus the
//! measured `<model>.profile.json`), the format of the REEF artifact's
//! `resource/` directory (REEF §3 "model compiler" and "kernel profiler",
//! §5.2 Fig. 13: per-kernel and per-block execution times measured offline).
//!
//! A model is the ordered list of kernels one inference launches, the device
//! buffers they use (TVM convention: a kernel's last argument is the buffer it
//! writes, every other argument is read), the model's input/parameter
//! buffers, and the measured profile: the stand-alone latency of each kernel,
//! its per-block latency as a function of the number of co-resident blocks on
//! one compute unit (`latency[k]` = k+1 blocks resident), and the latency of
//! a whole inference with kernels launched back to back.
//!
//! The data layout is described in `../shared/models/README.md` and in
//! `docs/models.md`.

mod raw;
use raw::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Environment variable that overrides where the shared data directory is.
pub const SHARED_ENV: &str = "REEF_SHARED";

/// The project's shared data directory: `$REEF_SHARED` when set, else
/// `<workspace root>/../shared`.
pub fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(SHARED_ENV) {
        return PathBuf::from(dir);
    }
    // CARGO_MANIFEST_DIR is <workspace>/model.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("shared")
}

/// The measured MI50 models directory, `<shared>/models/mi50`.
pub fn default_models_dir() -> PathBuf {
    shared_dir().join("models").join("mi50")
}

/// DISB model names (`client.model_name` in the workload files) and the
/// directory of their measured kernel schedule (../shared/models/README.md).
pub const DISB_MODELS: &[(&str, &str)] = &[
    ("vgg19-imagenet", "vgg"),
    ("resnet152-imagenet", "resnet152"),
    ("densenet201-imagenet", "densenet"),
    ("inceptionv3-imagenet", "inception"),
    ("distilbert", "bert"),
];

/// The schedule directory name for a DISB model name (`vgg19-imagenet` →
/// `vgg`). A name that already is a directory name maps to itself.
pub fn disb_to_dir(name: &str) -> Option<&'static str> {
    DISB_MODELS
        .iter()
        .find(|(d, dir)| *d == name || *dir == name)
        .map(|(_, dir)| *dir)
}

/// The DISB model name for a schedule directory name (`vgg` →
/// `vgg19-imagenet`).
pub fn dir_to_disb(dir: &str) -> Option<&'static str> {
    DISB_MODELS
        .iter()
        .find(|(d, dd)| *dd == dir || *d == dir)
        .map(|(d, _)| *d)
}

/// Why a model could not be loaded. Every variant names the file; `Invalid`
/// also names the item (kernel, buffer, field) and what is wrong with it.
/// The underlying error is part of the message (field `cause`), not a
/// `source()`, so printing the chain (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{path}: not a valid {what} JSON file: {cause}")]
    Json {
        path: PathBuf,
        what: &'static str,
        cause: serde_json::Error,
    },
    #[error("{path}: {item}: {problem}")]
    Invalid {
        path: PathBuf,
        item: String,
        problem: String,
    },
    #[error("{path}: no model found: {problem}")]
    NotFound { path: PathBuf, problem: String },
    /// A file that is not a regular file, too large, or unreadable
    /// (bounded reads, [`crate::files`]).
    #[error(transparent)]
    File(#[from] crate::files::FileError),
}

/// One device buffer (`storage[i]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// Index in the schedule's `storage` array.
    pub index: usize,
    /// `null` for intermediate buffers (TVM reuses them across kernels),
    /// else the parameter/input name.
    pub name: String,
    /// Size in elements.
    pub elements: u64,
    /// Element type as written in the file (`float32`, `int64`, …).
    pub stype: String,
    /// Size in bytes: `elements` × element size of `stype`.
    pub bytes: u64,
}

/// Bytes per element of a TVM storage type. `uint1` (boolean) is stored one
/// byte per element by TVM; `byte` is a raw byte buffer.
pub fn element_size(stype: &str) -> Option<u64> {
    Some(match stype {
        "byte" | "int8" | "uint8" | "uint1" | "bool" => 1,
        "float16" | "int16" | "uint16" => 2,
        "float32" | "int32" | "uint32" => 4,
        "float64" | "int64" | "uint64" => 8,
        _ => return None,
    })
}

/// Measured profile of one kernel (microseconds in the file; stored here in
/// integer nanoseconds, the simulator's unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelProfile {
    /// The kernel run alone (`total_latency`), including the per-launch
    /// overhead that back-to-back launches hide.
    pub total_latency_ns: u64,
    /// `block_latency_ns[k]`: duration of one block when k+1 blocks of this
    /// kernel are resident on one compute unit (`latency[k]`). Never empty
    /// when loaded from a file.
    pub block_latency_ns: Vec<u64>,
}

impl KernelProfile {
    /// Block duration with `resident` (≥ 1) co-resident blocks on a CU; past
    /// the measured range the curve is extended linearly by the slope of its
    /// last two points (never below the last point, saturating at
    /// `u64::MAX` ns rather than wrapping to a short duration); 0 for an
    /// empty curve.
    pub fn block_ns(&self, resident: usize) -> u64 {
        let c = &self.block_latency_ns;
        let k = resident.max(1);
        if k <= c.len() {
            return c[k - 1];
        }
        let Some(&last) = c.last() else {
            return 0;
        };
        let slope = if c.len() >= 2 {
            last.saturating_sub(c[c.len() - 2])
        } else {
            0
        };
        last.saturating_add(slope.saturating_mul((k - c.len()) as u64))
    }
}

/// One kernel launch of the schedule (`kernels[j]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// Position in launch order.
    pub index: usize,
    /// GPU function name.
    pub name: String,
    /// Grid size in blocks (x, y, z).
    pub grid: [u32; 3],
    /// Block size in threads (x, y, z).
    pub block: [u32; 3],
    /// LDS / shared memory bytes per block (`shared_memory[name]`, 0 when
    /// absent).
    pub shared_mem_bytes: u32,
    /// Registers per thread, when known (the REEF schedule format does not
    /// record them).
    pub registers: Option<u32>,
    /// Storage indices of the kernel's arguments, in order.
    pub args: Vec<usize>,
    /// Buffers read: recorded by the compiler when the schedule has
    /// `reads` (reef-compile, docs/compile.md), else every argument but the
    /// last (TVM convention of the REEF schedules).
    pub reads: Vec<usize>,
    /// Buffers written: recorded `writes`, else the last argument.
    pub writes: Vec<usize>,
    /// Measured profile, when the model has a profile file.
    pub profile: Option<KernelProfile>,
    /// The kernel's work, when a compiler recorded it (reef-compile).
    pub work: Option<KernelWork>,
    /// Per-architecture resources from `ptxas -v` (`"sm_80"` → ...), when
    /// the model was compiled by reef-compile; empty otherwise. AMD
    /// architectures (`"gfx906"`) come from the code object's AMDHSA
    /// metadata: `registers` = VGPRs, `shared_static` = LDS, `stack` =
    /// scratch (docs/compile.md "AMD GPUs").
    pub resources: BTreeMap<String, KernelResources>,
}

/// What one launch computes and moves (reef-compile, docs/compile.md
/// "Work"): floating-point operations from TVM's own estimate of the
/// scheduled kernel (`estimate_tir_flops`), bytes from the sizes of the
/// buffers it loads from and stores to (each moved once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelWork {
    pub flops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// One kernel's resources on one architecture, as `ptxas -v` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub struct KernelResources {
    /// 32-bit registers per thread.
    pub registers: u32,
    /// Static shared memory per block, bytes.
    pub shared_static: u32,
    /// Stack frame per thread, bytes.
    #[serde(default)]
    pub stack: u32,
    #[serde(default)]
    pub spill_stores: u32,
    #[serde(default)]
    pub spill_loads: u32,
    /// Tensor-core matrix multiply-accumulate instructions (`wmma.mma`,
    /// `mma.sync`, `wgmma.mma_async`) in the kernel's PTX entry, a static
    /// count (reef-compile; 0 when not recorded: a CUDA-core kernel).
    #[serde(default)]
    pub mma: u32,
}

impl Kernel {
    /// Number of blocks in the grid.
    pub fn num_blocks(&self) -> u64 {
        self.grid.iter().map(|&g| g as u64).product()
    }
    /// Threads per block.
    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }
}

/// Measured whole-model figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelProfile {
    /// One inference, kernels launched back to back (`model_latency`).
    pub model_latency_ns: u64,
    /// The profile file it was read from.
    pub path: PathBuf,
}

/// A model: its kernels in launch order, buffers and measured profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// Model name (the schedule file's stem, e.g. `vgg`).
    pub name: String,
    /// The schedule file it was read from.
    pub path: PathBuf,
    pub kernels: Vec<Kernel>,
    pub buffers: Vec<Buffer>,
    /// Storage indices of the model's inputs and parameters (`args`).
    pub inputs: Vec<usize>,
    /// Present when `<name>.profile.json` exists next to the schedule.
    pub profile: Option<ModelProfile>,
    /// Present when the directory was written by reef-compile.
    pub compiled: Option<Compiled>,
}

/// What a reef-compile model directory adds to the schedule
/// (docs/compile.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// Architectures compiled for, in `--arch` order (`sm_80`, ...).
    pub archs: Vec<String>,
    /// `kernels.<arch>.ptx` per architecture.
    pub ptx: BTreeMap<String, PathBuf>,
    /// Storage indices of the model inputs, parameters and outputs.
    pub inputs: Vec<usize>,
    pub params: Vec<usize>,
    pub outputs: Vec<usize>,
    /// The ONNX names of storages whose names reef-compile made C
    /// identifiers (`names`: sanitized name → original, e.g. `image_0` →
    /// `image:0`).
    pub names: BTreeMap<String, String>,
    /// The shapes of inputs and outputs, by storage index: each storage's
    /// `shape` (reef-compile writes it for inputs and outputs), or the
    /// reference run's (`reference.inputs`/`outputs`); absent in schedules
    /// written before either.
    pub shapes: BTreeMap<usize, Vec<u64>>,
}

fn us_to_ns(us: f64) -> Option<u64> {
    if us.is_finite() && us >= 0.0 {
        Some((us * 1000.0).round() as u64)
    } else {
        None
    }
}

impl Model {
    /// For each kernel k, how many of the kernels right after it (at most
    /// `max`) write no buffer k reads or writes, in a row: had they run
    /// after k, running k's blocks again would still read k's inputs and
    /// leave their outputs as they were. Padding uses it (reef-sched
    /// `ModelInfo::successors_clear`) when it pads with a kernel that may
    /// already have completed, unseen, while its successors started.
    pub fn successors_clear_of(&self, max: usize) -> Vec<u32> {
        let ks = &self.kernels;
        (0..ks.len())
            .map(|k| {
                let touched = |b: &usize| ks[k].reads.contains(b) || ks[k].writes.contains(b);
                (k + 1..ks.len().min(k + 1 + max))
                    .take_while(|&j| !ks[j].writes.iter().any(touched))
                    .count() as u32
            })
            .collect()
    }

    /// Loads a model from a model directory (`…/mi50/vgg`, which must hold
    /// `vgg.json`) or from a schedule file (`…/vgg.json`). The profile is read
    /// from the sibling `<name>.profile.json` when it exists; then every
    /// kernel must have a profile entry.
    pub fn load(path: &Path) -> Result<Model, LoadError> {
        let schedule = if path.is_dir() {
            let stem = path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let f = path.join(format!("{stem}.json"));
            if !f.is_file() {
                return Err(LoadError::NotFound {
                    path: path.to_path_buf(),
                    problem: format!(
                        "a model directory must contain {stem}.json (the kernel schedule)"
                    ),
                });
            }
            f
        } else {
            path.to_path_buf()
        };
        let text = crate::files::read_text(&schedule, "schedule", crate::files::MAX_TEXT_BYTES)?;
        let name = schedule
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let profile_path = schedule.with_file_name(format!("{name}.profile.json"));
        let profile_text = if profile_path.is_file() {
            Some(crate::files::read_text(
                &profile_path,
                "profile",
                crate::files::MAX_TEXT_BYTES,
            )?)
        } else {
            None
        };
        Self::parse(
            &name,
            &schedule,
            &text,
            profile_text.as_deref().map(|t| (profile_path.as_path(), t)),
        )
    }

    /// Parses a schedule (and optionally its profile) from text. `path` and
    /// the profile path are used in error messages only.
    pub fn parse(
        name: &str,
        path: &Path,
        schedule: &str,
        profile: Option<(&Path, &str)>,
    ) -> Result<Model, LoadError> {
        let raw: RawSchedule =
            serde_json::from_str(schedule).map_err(|source| LoadError::Json {
                path: path.to_path_buf(),
                what: "kernel schedule",
                cause: source,
            })?;
        let invalid = |item: String, problem: String| LoadError::Invalid {
            path: path.to_path_buf(),
            item,
            problem,
        };

        let mut buffers = Vec::with_capacity(raw.storage.len());
        for (i, s) in raw.storage.iter().enumerate() {
            let item = format!("storage[{i}] ({})", s.name);
            if s.size < 0 {
                return Err(invalid(item, format!("negative size {}", s.size)));
            }
            let es = element_size(&s.stype).ok_or_else(|| {
                invalid(
                    item.clone(),
                    format!(
                        "unknown stype {:?} (known: byte, uint1, int8..int64, float16..float64)",
                        s.stype
                    ),
                )
            })?;
            let bytes = (s.size as u64).checked_mul(es).ok_or_else(|| {
                invalid(
                    item.clone(),
                    format!("size {} x {es} B overflows 64 bits", s.size),
                )
            })?;
            buffers.push(Buffer {
                index: i,
                name: s.name.clone(),
                elements: s.size as u64,
                stype: s.stype.clone(),
                bytes,
            });
        }
        let nstorage = buffers.len();
        let storage_index = |item: &str, what: &str, v: i64| -> Result<usize, LoadError> {
            if v < 0 || v as usize >= nstorage {
                Err(invalid(
                    item.to_string(),
                    format!(
                        "{what} {v} is out of range: storage has {nstorage} entries (0..{})",
                        nstorage.saturating_sub(1)
                    ),
                ))
            } else {
                Ok(v as usize)
            }
        };

        let mut inputs = Vec::with_capacity(raw.args.len());
        for (i, &a) in raw.args.iter().enumerate() {
            inputs.push(storage_index(&format!("args[{i}]"), "storage index", a)?);
        }

        let mut kernels = Vec::with_capacity(raw.kernels.len());
        for (j, k) in raw.kernels.iter().enumerate() {
            let item = format!("kernels[{j}] ({})", k.name);
            if k.launch_params.len() != 6 {
                return Err(invalid(
                    item,
                    format!(
                        "launch_params has {} values, expected 6: [grid.x, grid.y, grid.z, block.x, block.y, block.z]",
                        k.launch_params.len()
                    ),
                ));
            }
            let mut lp = [0u32; 6];
            for (d, &v) in k.launch_params.iter().enumerate() {
                if v < 1 || v > u32::MAX as i64 {
                    return Err(invalid(
                        item,
                        format!("launch_params[{d}] = {v}, every dimension must be ≥ 1"),
                    ));
                }
                lp[d] = v as u32;
            }
            let product = |v: &[u32]| {
                v.iter()
                    .try_fold(1u64, |acc, &x| acc.checked_mul(x as u64))
                    .filter(|&p| p <= u32::MAX as u64)
            };
            if product(&lp[..3]).is_none() {
                return Err(invalid(
                    item,
                    format!("grid {:?} has 2^32 blocks or more", &lp[..3]),
                ));
            }
            if product(&lp[3..]).is_none() {
                return Err(invalid(
                    item,
                    format!("block {:?} has 2^32 threads or more", &lp[3..]),
                ));
            }
            if k.args.is_empty() {
                return Err(invalid(
                    item,
                    "has no args: TVM kernels write their last argument".into(),
                ));
            }
            let mut args = Vec::with_capacity(k.args.len());
            for (a, &v) in k.args.iter().enumerate() {
                args.push(storage_index(
                    &item,
                    &format!("args[{a}] storage index"),
                    v,
                )?);
            }
            let shm = match raw.shared_memory.get(&k.name) {
                None => 0,
                Some(&v) if (0..=u32::MAX as i64).contains(&v) => v as u32,
                Some(&v) => {
                    return Err(invalid(
                        format!("shared_memory[{}]", k.name),
                        format!("{v} bytes is not a valid size"),
                    ))
                }
            };
            let (reads, writes) = match (&k.reads, &k.writes) {
                (None, None) => {
                    let (r, w) = args.split_at(args.len() - 1);
                    (r.to_vec(), w.to_vec())
                }
                (Some(r), Some(w)) => {
                    let set = |what: &str, v: &[i64]| -> Result<Vec<usize>, LoadError> {
                        let mut out = Vec::with_capacity(v.len());
                        for (a, &x) in v.iter().enumerate() {
                            let i = storage_index(&item, &format!("{what}[{a}] storage index"), x)?;
                            if !args.contains(&i) {
                                return Err(invalid(
                                    item.clone(),
                                    format!("{what}[{a}] = {i} is not one of the kernel's args {args:?}"),
                                ));
                            }
                            out.push(i);
                        }
                        Ok(out)
                    };
                    let (r, w) = (set("reads", r)?, set("writes", w)?);
                    if w.is_empty() {
                        return Err(invalid(
                            item,
                            "writes is empty: a kernel writes at least one buffer".into(),
                        ));
                    }
                    (r, w)
                }
                _ => {
                    return Err(invalid(
                        item,
                        "has only one of reads/writes; a compiled schedule records both".into(),
                    ))
                }
            };
            let work = match (k.flops, k.bytes_read, k.bytes_written) {
                (None, None, None) => None,
                (Some(f), Some(r), Some(w)) if f.is_finite() && f >= 0.0 => Some(KernelWork {
                    flops: f.round() as u64,
                    bytes_read: r,
                    bytes_written: w,
                }),
                _ => {
                    return Err(invalid(
                        item,
                        "work needs flops (a non-negative number), bytes_read and bytes_written together".into(),
                    ))
                }
            };
            let mut resources = BTreeMap::new();
            for (arch, per_kernel) in &raw.resources {
                let r = per_kernel.get(&k.name).ok_or_else(|| {
                    invalid(
                        item.clone(),
                        format!(
                            "has no entry in resources[{arch}]; every launched kernel needs one"
                        ),
                    )
                })?;
                resources.insert(arch.clone(), *r);
            }
            kernels.push(Kernel {
                index: j,
                name: k.name.clone(),
                grid: [lp[0], lp[1], lp[2]],
                block: [lp[3], lp[4], lp[5]],
                shared_mem_bytes: shm,
                registers: None,
                reads,
                writes,
                args,
                profile: None,
                work,
                resources,
            });
        }

        let mut model_profile = None;
        if let Some((ppath, ptext)) = profile {
            let raw: RawProfile =
                serde_json::from_str(ptext).map_err(|source| LoadError::Json {
                    path: ppath.to_path_buf(),
                    what: "kernel profile",
                    cause: source,
                })?;
            let pinvalid = |item: String, problem: String| LoadError::Invalid {
                path: ppath.to_path_buf(),
                item,
                problem,
            };
            let model_latency_ns = us_to_ns(raw.model_latency).ok_or_else(|| {
                pinvalid(
                    "model_latency".into(),
                    format!("{} is not a non-negative number of us", raw.model_latency),
                )
            })?;
            let mut parsed: BTreeMap<&str, KernelProfile> = BTreeMap::new();
            for (kname, kp) in &raw.kernel_latency {
                let item = format!("kernel_latency[{kname}]");
                let total = us_to_ns(kp.total_latency).ok_or_else(|| {
                    pinvalid(
                        item.clone(),
                        format!(
                            "total_latency {} is not a non-negative number",
                            kp.total_latency
                        ),
                    )
                })?;
                if kp.latency.is_empty() {
                    return Err(pinvalid(
                        item,
                        "latency (per-block curve) is empty; it needs at least latency[0]".into(),
                    ));
                }
                let mut curve = Vec::with_capacity(kp.latency.len());
                for (i, &l) in kp.latency.iter().enumerate() {
                    curve.push(us_to_ns(l).filter(|&n| n > 0).ok_or_else(|| {
                        pinvalid(
                            item.clone(),
                            format!("latency[{i}] = {l} is not a positive number of us"),
                        )
                    })?);
                }
                parsed.insert(
                    kname.as_str(),
                    KernelProfile {
                        total_latency_ns: total,
                        block_latency_ns: curve,
                    },
                );
            }
            for k in &mut kernels {
                let p = parsed.get(k.name.as_str()).ok_or_else(|| {
                    pinvalid(
                        format!("kernels[{}] ({})", k.index, k.name),
                        format!(
                            "has no entry in kernel_latency; every kernel of {} needs one",
                            path.display()
                        ),
                    )
                })?;
                k.profile = Some(p.clone());
            }
            model_profile = Some(ModelProfile {
                model_latency_ns,
                path: ppath.to_path_buf(),
            });
        }

        let compiled = match raw.format.as_deref() {
            None => None,
            Some("reef-compile/1") => {
                let idx = |what: &str, v: &[i64]| -> Result<Vec<usize>, LoadError> {
                    v.iter()
                        .enumerate()
                        .map(|(i, &x)| storage_index(&format!("{what}[{i}]"), "storage index", x))
                        .collect()
                };
                let dir = path.parent().unwrap_or(Path::new("."));
                if raw.archs.is_empty() {
                    return Err(invalid(
                        "archs".into(),
                        "is empty: a compiled model names its architectures".into(),
                    ));
                }
                for a in &raw.archs {
                    if !raw.ptx.contains_key(a) || !raw.resources.contains_key(a) {
                        return Err(invalid(
                            format!("archs ({a})"),
                            "has no ptx file or no resources entry".into(),
                        ));
                    }
                }
                if raw.outputs.is_empty() {
                    return Err(invalid(
                        "outputs".into(),
                        "is empty: a model has at least one output".into(),
                    ));
                }
                Some(Compiled {
                    archs: raw.archs.clone(),
                    ptx: raw
                        .ptx
                        .iter()
                        .map(|(a, f)| (a.clone(), dir.join(f)))
                        .collect(),
                    inputs: idx("inputs", &raw.inputs)?,
                    params: idx("params", &raw.params)?,
                    outputs: idx("outputs", &raw.outputs)?,
                    names: raw.names.clone(),
                    // The storages' own shapes, then the reference run's.
                    shapes: raw
                        .storage
                        .iter()
                        .enumerate()
                        .filter_map(|(i, s)| Some((i, s.shape.clone()?)))
                        .chain(
                            raw.reference
                                .iter()
                                .flat_map(|r| r.inputs.iter().chain(&r.outputs))
                                .filter_map(|t| {
                                    Some((usize::try_from(t.storage).ok()?, t.shape.clone()))
                                }),
                        )
                        .filter(|(i, _)| *i < raw.storage.len())
                        .collect(),
                })
            }
            Some(f) => {
                return Err(invalid(
                    "format".into(),
                    format!("{f:?} is not a format this reef-model reads (reef-compile/1)"),
                ))
            }
        };

        Ok(Model {
            name: name.to_string(),
            path: path.to_path_buf(),
            kernels,
            buffers,
            inputs,
            profile: model_profile,
            compiled,
        })
    }

    /// Total blocks over all kernels of one inference.
    pub fn total_blocks(&self) -> u64 {
        self.kernels.iter().map(Kernel::num_blocks).sum()
    }

    /// Measured `model_latency` in ns, when profiled.
    pub fn measured_latency_ns(&self) -> Option<u64> {
        self.profile.as_ref().map(|p| p.model_latency_ns)
    }
}

/// Names of the model directories in `dir` (subdirectories `X` holding
/// `X/X.json`), sorted.
pub fn list_models(dir: &Path) -> Result<Vec<String>, LoadError> {
    let rd = std::fs::read_dir(dir).map_err(|source| LoadError::Io {
        path: dir.to_path_buf(),
        cause: source,
    })?;
    let mut names = Vec::new();
    for e in rd {
        let e = e.map_err(|source| LoadError::Io {
            path: dir.to_path_buf(),
            cause: source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().join(format!("{name}.json")).is_file() {
            names.push(name);
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(LoadError::NotFound {
            path: dir.to_path_buf(),
            problem: "no subdirectory NAME holding NAME.json; pass a models directory such as ../shared/models/mi50".into(),
        });
    }
    Ok(names)
}

/// Loads one model of a models directory by directory name or DISB name
/// (`vgg` or `vgg19-imagenet`).
pub fn load_named(dir: &Path, name: &str) -> Result<Model, LoadError> {
    let d = disb_to_dir(name).unwrap_or(name);
    let p = dir.join(d);
    if !p.is_dir() {
        let known = list_models(dir).map(|v| v.join(", ")).unwrap_or_default();
        return Err(LoadError::NotFound {
            path: p,
            problem: format!(
                "no model {name:?} in {} (available: {known})",
                dir.display()
            ),
        });
    }
    Model::load(&p)
}

/// Loads every model of a models directory, sorted by name.
pub fn load_all(dir: &Path) -> Result<Vec<Model>, LoadError> {
    list_models(dir)?
        .iter()
        .map(|n| Model::load(&dir.join(n)))
        .collect()
}
