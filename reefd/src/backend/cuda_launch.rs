//! The CUDA launch path: compiled models loaded and launched through
//! cudarc's driver API, best-effort (BE) work preempted by the preempt flag
//! of REEF's injected kernels.
//!
//! Paper: REEF (reef-tocs2025) §4.3 "Reset-based preemption", Fig. 8 (the
//! launcher appends each kernel's execution index, line 8; `preempt()` resets
//! the host queue, sets the flag, reads the global execution index and
//! clears the flag, lines 12-16; `restore()` relaunches from there), §4.2
//! (virtual host queues per stream, a device queue capped per stream, here
//! `queue_cap`), §4.6 (the PTX rewrite: reef-ptx-inject, trap-handler/).
//! DESIGN.md layer 2, backend `cuda`.
//!
//! Library: cudarc 0.19 dlopens the driver by name (`libcuda.so`, then the
//! versioned names of `get_lib_name_candidates("cuda")`) through the
//! dynamic loader's search path (`LD_LIBRARY_PATH`, then ld.so.cache). With
//! [`CudaLaunchOptions::library`] (reefd: `REEF_CUDA_LIBRARY`) the backend
//! first loads that file itself; a library whose SONAME is `libcuda.so`
//! (reef-libcuda-sim's is) then answers cudarc's lookup, so a test or an
//! operator can point reefd at the simulated libcuda without touching the
//! search path. The presence check (`is_culib_present`) runs first: cudarc
//! panics on the first call into a missing library.
//!
//! Layout on the device:
//! - two contexts, real-time (RT) and BE (`cuCtxCreate_v2`), so that a
//!   preemption (and on a GPU host a kill, which acts on a whole context)
//!   never reaches RT kernels;
//! - per model and context, one allocation per weight storage, weights
//!   uploaded once at load; a load that does not fit the free memory
//!   (`cuMemGetInfo_v2`) is refused with both figures before anything is
//!   allocated, and a failure midway frees what was allocated;
//! - per stream and model, its own module instance (so each BE stream has
//!   its own `reef_preempt_flag` and `reef_exec_index`: Fig. 8's global index
//!   describes one queue) and one allocation per input, activation and
//!   output storage; one request at a time per stream on the device, its
//!   input copied in when it starts and its output copied out when its last
//!   kernel's event completes.
//!
//! Preemption levels are probed at open, not assumed: 1 always (host
//! queues are reefd's); 2 when a probe kernel, injected and launched with
//! its module's flag set through `cuMemcpyHtoD`, is evicted (its index not
//! stored) and, with the flag cleared, runs (index stored); 3 never on this
//! path, for the reason [`NO_KILL`] gives.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

use cudarc::driver::sys::{
    self, CUcontext, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream,
};
use reef_sched::PreemptLevel;
use serde::Deserialize;

use super::Levels;

pub mod kernels;

/// The environment variable naming the CUDA driver library reefd loads
/// (after the configuration key `device.cuda_library`).
pub const LIBRARY_ENV: &str = "REEF_CUDA_LIBRARY";

/// What a test device's `cuDeviceGetName` contains (reef-libcuda-sim says
/// "reef-sim gv100 (simulated GPU, test device)"); NVIDIA's driver names
/// real GPUs. reefd lets a non-root user serve on a test device only.
pub const TEST_DEVICE_MARK: &str = "test device";

/// Why level 3 is not offered on this path.
pub const NO_KILL: &str = "no kill (level 3): killing running blocks goes through the RM debugger \
     object attached to libcuda's BE context (docs/hardware.md), which needs root, /dev/nvidiactl, \
     the context's RM handles (learnt by observing libcuda's RM_ALLOC ioctls, not implemented) and \
     a patched trap handler; this device stays at lazy eviction (level 2)";

/// `CU_STREAM_NON_BLOCKING`: reefd's streams must not synchronise with the
/// legacy default stream, on which the synchronous preempt-flag write runs;
/// otherwise the write would wait for the very kernels it evicts.
const STREAM_NON_BLOCKING: u32 = 1;
/// `CU_EVENT_DISABLE_TIMING`: completion events only.
const EVENT_DISABLE_TIMING: u32 = 2;

/// Everything the launch path can fail with. Texts are for the operator.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("the CUDA driver library cannot be used: {0}")]
    NoLibrary(String),
    #[error("{call} failed: {name} ({text}); {hint}")]
    Driver {
        call: &'static str,
        code: CUresult,
        name: String,
        text: String,
        hint: &'static str,
    },
    #[error(
        "model {model} does not fit on {device}: it needs {needed} B of device memory and {free} B \
         are free (of {total} B); nothing was loaded: unload a model or use a GPU with more memory"
    )]
    DoesNotFit {
        model: String,
        device: String,
        needed: u64,
        free: u64,
        total: u64,
    },
    #[error("model {path}: {detail}")]
    Model { path: String, detail: String },
    #[error("{0}")]
    Invalid(String),
}

impl CudaError {
    /// The driver's code, for a failed driver call.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn hint(code: CUresult) -> &'static str {
    use CUresult::*;
    match code {
        CUDA_ERROR_INVALID_HANDLE => {
            "a CUDA object (module, function, stream, event) was used after it was destroyed or \
             is unknown to the driver: a reefd bug, report it and restart reefd"
        }
        CUDA_ERROR_INVALID_VALUE => {
            "the driver refused an argument: a launch shape outside the GPU's limits, a copy past \
             the end of an allocation, or a freed pointer; check the model's model.toml (grid, \
             block, storage sizes)"
        }
        CUDA_ERROR_ILLEGAL_ADDRESS => {
            "a kernel accessed memory it does not own; the CUDA context is unusable: restart \
             reefd, and check the model's storage sizes"
        }
        CUDA_ERROR_OUT_OF_MEMORY => "the GPU is out of memory: unload a model",
        CUDA_ERROR_INVALID_PTX | CUDA_ERROR_INVALID_IMAGE => {
            "the driver could not compile the model's PTX: check its .target against the GPU"
        }
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
            "the kernel needs more registers or shared memory than the GPU has per block"
        }
        CUDA_ERROR_NOT_FOUND => "a kernel or symbol named by the model is missing from its PTX",
        CUDA_ERROR_NOT_SUPPORTED => {
            "this driver does not implement the call (the simulated libcuda implements only the \
             calls reefd makes)"
        }
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE => {
            "no such GPU: cuda:N counts the GPUs nvidia-smi lists from 0"
        }
        CUDA_ERROR_INVALID_CONTEXT => "no usable CUDA context: a reefd bug, restart reefd",
        _ => "see the CUDA driver API documentation for this code",
    }
}

fn check(call: &'static str, code: CUresult) -> Result<(), CudaError> {
    if code == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (mut name, mut text) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both out-pointers are valid; the driver returns static strings.
    let (name, text) = unsafe {
        let n = sys::cuGetErrorName(code, &mut name);
        let t = sys::cuGetErrorString(code, &mut text);
        (
            if n == CUresult::CUDA_SUCCESS && !name.is_null() {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            } else {
                format!("{code:?}")
            },
            if t == CUresult::CUDA_SUCCESS && !text.is_null() {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            } else {
                "no description".into()
            },
        )
    };
    Err(CudaError::Driver {
        call,
        code,
        name,
        text,
        hint: hint(code),
    })
}

/// Makes the driver library available to cudarc: loads `library` first if
/// given, then runs cudarc's presence check.
pub fn load_library(library: Option<&Path>) -> Result<(), CudaError> {
    if let Some(path) = library {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| CudaError::NoLibrary(format!("{}: path contains NUL", path.display())))?;
        // SAFETY: dlopen with a valid C string; the handle is kept for the
        // life of the process (never dlclosed), as cudarc keeps its own.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a C string or null.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                "unknown error".into()
            } else {
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(CudaError::NoLibrary(format!(
                "cannot load {}: {why}",
                path.display()
            )));
        }
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoLibrary(
            "libcuda.so is not on the library search path (install the NVIDIA driver on a GPU \
             host, or point device.cuda_library or REEF_CUDA_LIBRARY at a driver library such \
             as the simulated test device target/release/libreef_libcuda_sim.so)"
                .into(),
        ));
    }
    Ok(())
}

// --- model files -------------------------------------------------------------

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: String,
    ptx: String,
    weights: Option<String>,
    storage: Vec<StorageDecl>,
    kernel: Vec<KernelDecl>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    Input,
    Weight,
    Activation,
    Output,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageDecl {
    name: String,
    bytes: u64,
    role: Role,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelDecl {
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    args: Vec<String>,
    /// Dynamic shared memory per block (`sharedMemBytes` of the launch):
    /// a reef-compile schedule's `dynamic_shared_bytes`; none in model.toml.
    #[serde(skip)]
    dynamic_shared: u32,
}

#[derive(Debug, Clone)]
enum Arg {
    Storage(usize),
    U32(u32),
}

/// A model read from its directory: a reef-compile output (`NAME.json`
/// with `format: reef-compile/1`, `kernels.ARCH.ptx`, `weights.bin`;
/// docs/compile.md) or a hand-written `model.toml` with its PTX and weights
/// (libcuda-sim/models/two-kernel).
#[derive(Debug, Clone)]
pub struct ModelFiles {
    pub name: String,
    /// The PTX after reef-ptx-inject, NUL-terminated for cuModuleLoadData.
    ptx: CString,
    storages: Vec<StorageDecl>,
    kernels: Vec<(KernelDecl, Vec<Arg>)>,
    /// Bytes of each weight storage, by storage index.
    weights: HashMap<usize, Vec<u8>>,
    input: usize,
    output: usize,
}

impl ModelFiles {
    /// Reads and checks a model directory for a GPU of unknown compute
    /// capability (a compiled model's highest architecture is taken); the
    /// PTX is injected here.
    pub fn read(dir: &Path) -> Result<ModelFiles, CudaError> {
        Self::read_for(dir, None)
    }

    /// Reads a model directory for a GPU of compute capability `cc`
    /// (major, minor): `model.toml` when the directory has one, else the
    /// reef-compile schedule `NAME.json` (NAME = the directory's name).
    pub fn read_for(dir: &Path, cc: Option<(i32, i32)>) -> Result<ModelFiles, CudaError> {
        if dir.join("model.toml").is_file() {
            return Self::read_toml(dir);
        }
        let err = |detail: String| CudaError::Model {
            path: dir.display().to_string(),
            detail,
        };
        let stem = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let json = dir.join(format!("{stem}.json"));
        if !json.is_file() {
            return Err(err(format!(
                "neither model.toml nor {stem}.json is there: compile the model with \
                 `reef-compile MODEL.onnx -o {}` (docs/compile.md)",
                dir.display()
            )));
        }
        Self::read_compiled(dir, &stem, cc)
    }

    /// A reef-compile output directory (docs/compile.md "The model
    /// directory"): storages by role (`param` storages are weights, taken
    /// from `weights.bin` at their recorded offsets), kernels with their
    /// launch shapes, arguments and dynamic shared memory, the PTX of the
    /// architecture `cc` can run (see [`pick_arch`]) injected by
    /// reef-ptx-inject, and each kernel's recorded work, resources and
    /// read/write sets written into the module as `// reef-sim:` comments
    /// (a real driver ignores them; the simulated libcuda takes kernel
    /// durations from them with reef-sim's cost model, libcuda-sim/src/ptx.rs).
    fn read_compiled(
        dir: &Path,
        stem: &str,
        cc: Option<(i32, i32)>,
    ) -> Result<ModelFiles, CudaError> {
        let err = |detail: String| CudaError::Model {
            path: dir.display().to_string(),
            detail,
        };
        let m = reef_model::Model::load(dir).map_err(|e| err(e.to_string()))?;
        let Some(c) = m.compiled.as_ref() else {
            return Err(err(format!(
                "{stem}.json is a REEF schedule without PTX (no format reef-compile/1), and there \
                 is no model.toml: the CUDA device runs models compiled by reef-compile \
                 (docs/compile.md)"
            )));
        };
        let (input, output) = match (&c.inputs[..], &c.outputs[..]) {
            ([i], [o]) => (*i, *o),
            _ => {
                return Err(err(format!(
                    "{} inputs and {} outputs: the CUDA device serves models with one input and \
                     one output",
                    c.inputs.len(),
                    c.outputs.len()
                )))
            }
        };
        let arch = pick_arch(&c.archs, cc).map_err(err)?;
        let ptx_path = c
            .ptx
            .get(&arch)
            .map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    dir.join(p)
                }
            })
            .ok_or_else(|| err(format!("{stem}.json names no PTX file for {arch}")))?;
        let src = std::fs::read_to_string(&ptx_path)
            .map_err(|e| err(format!("cannot read {}: {e}", ptx_path.display())))?;
        let inj =
            reef_trap::ptx::inject(&src, &ptx_path.display().to_string(), &Default::default())
                .map_err(|e| err(format!("reef-ptx-inject: {e}")))?;
        let params: HashSet<usize> = c.params.iter().copied().collect();
        let storages: Vec<StorageDecl> = m
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| StorageDecl {
                name: b.name.clone(),
                bytes: b.bytes,
                role: if i == input {
                    Role::Input
                } else if i == output {
                    Role::Output
                } else if params.contains(&i) {
                    Role::Weight
                } else {
                    Role::Activation
                },
            })
            .collect();
        if let Some(s) = storages.iter().find(|s| s.bytes == 0) {
            return Err(err(format!("storage {} has 0 bytes", s.name)));
        }
        let first_arch = c.archs.first();
        let mut annotations = String::new();
        let mut annotated = HashSet::new();
        let mut kernels = Vec::new();
        for k in &m.kernels {
            if !inj.entries.contains(&k.name) {
                return Err(err(format!(
                    "kernel {} is not an .entry of {}",
                    k.name,
                    ptx_path.display()
                )));
            }
            // shared_mem_bytes = the first architecture's static shared
            // memory + the dynamic (reef-model); the launch passes the dynamic.
            let first_static = first_arch
                .and_then(|a| k.resources.get(a))
                .map_or(0, |r| r.shared_static);
            let dynamic_shared = k.shared_mem_bytes.saturating_sub(first_static);
            if annotated.insert(k.name.clone()) {
                let Some(w) = k.work else {
                    return Err(err(format!(
                        "kernel {} has no recorded work (flops, bytes)",
                        k.name
                    )));
                };
                let pos = |set: &[usize]| -> String {
                    let v: Vec<String> = (0..k.args.len())
                        .filter(|&p| set.contains(&k.args[p]))
                        .map(|p| p.to_string())
                        .collect();
                    v.join(",")
                };
                let mut line = format!(
                    "// reef-sim: kernel={} flops={} bytes={}",
                    k.name,
                    w.flops,
                    w.bytes_read.saturating_add(w.bytes_written)
                );
                if let Some(r) = k.resources.get(&arch) {
                    line += &format!(" regs={} shared={}", r.registers, r.shared_static);
                }
                // A storage the kernel both reads and writes is given as
                // written only: the recorded sets come from TIR's loads and
                // stores, and TVM's in-place accumulations (max pool,
                // reductions) initialise their output before reading it
                // back (kernels.cu), so its previous contents are no input.
                // Limit: the simulated driver's value model then cannot see
                // a kernel that truly accumulates into old contents run
                // twice; level 2 never re-runs a kernel that started.
                let inputs: Vec<usize> = k
                    .reads
                    .iter()
                    .copied()
                    .filter(|r| !k.writes.contains(r))
                    .collect();
                for (key, set) in [("reads", &inputs), ("writes", &k.writes)] {
                    let p = pos(set);
                    if !p.is_empty() {
                        line += &format!(" {key}={p}");
                    }
                }
                annotations += &line;
                annotations.push('\n');
            }
            let decl = KernelDecl {
                name: k.name.clone(),
                grid: k.grid,
                block: k.block,
                args: k.args.iter().map(|&i| storages[i].name.clone()).collect(),
                dynamic_shared,
            };
            let args = k.args.iter().map(|&i| Arg::Storage(i)).collect();
            kernels.push((decl, args));
        }
        if kernels.is_empty() {
            return Err(err(format!("{stem}.json has no kernels")));
        }
        let ptx = CString::new(format!(
            "// reef: {stem} for {arch}, injected by reef-ptx-inject; recorded work below.\n\
             {annotations}{}",
            inj.ptx
        ))
        .map_err(|_| err("the PTX contains a NUL byte".into()))?;
        // Weights at their recorded offsets in weights.bin.
        let raw: RawCompiled = serde_json::from_str(
            &std::fs::read_to_string(json_path(dir, stem))
                .map_err(|e| err(format!("cannot read {stem}.json: {e}")))?,
        )
        .map_err(|e| err(format!("{stem}.json: {e}")))?;
        let mut weights = HashMap::new();
        if !params.is_empty() {
            let wsec = raw.weights.ok_or_else(|| {
                err(format!(
                    "{stem}.json has parameters but no `weights` section"
                ))
            })?;
            let bytes = std::fs::read(dir.join(&wsec.file))
                .map_err(|e| err(format!("cannot read {}: {e}", wsec.file)))?;
            for e in &wsec.entries {
                let end = e
                    .offset
                    .checked_add(e.bytes)
                    .filter(|&x| x <= bytes.len() as u64);
                let Some(end) = end else {
                    return Err(err(format!(
                        "{}: weight {} at {}+{} B lies past its end ({} B)",
                        wsec.file,
                        e.name,
                        e.offset,
                        e.bytes,
                        bytes.len()
                    )));
                };
                match storages.get(e.storage) {
                    Some(s) if s.role == Role::Weight && s.bytes == e.bytes => {}
                    _ => {
                        return Err(err(format!(
                            "weight {} names storage {} which is not a parameter of {} B",
                            e.name, e.storage, e.bytes
                        )))
                    }
                }
                weights.insert(e.storage, bytes[e.offset as usize..end as usize].to_vec());
            }
            if let Some(&p) = params.iter().find(|p| !weights.contains_key(p)) {
                return Err(err(format!(
                    "parameter storage {p} ({}) has no entry in weights.entries",
                    storages[p].name
                )));
            }
        }
        Ok(ModelFiles {
            name: stem.to_string(),
            ptx,
            storages,
            kernels,
            weights,
            input,
            output,
        })
    }

    /// A hand-written `model.toml` directory.
    fn read_toml(dir: &Path) -> Result<ModelFiles, CudaError> {
        let err = |detail: String| CudaError::Model {
            path: dir.display().to_string(),
            detail,
        };
        let mpath = dir.join("model.toml");
        let text = std::fs::read_to_string(&mpath)
            .map_err(|e| err(format!("cannot read model.toml: {e} (a CUDA model directory holds model.toml, its PTX and weights)")))?;
        let m: Manifest = toml::from_str(&text).map_err(|e| err(format!("model.toml: {e}")))?;
        let ptx_path = dir.join(&m.ptx);
        let src = std::fs::read_to_string(&ptx_path)
            .map_err(|e| err(format!("cannot read {}: {e}", m.ptx)))?;
        let inj =
            reef_trap::ptx::inject(&src, &ptx_path.display().to_string(), &Default::default())
                .map_err(|e| err(format!("reef-ptx-inject: {e}")))?;
        let ptx = CString::new(inj.ptx).map_err(|_| err("the PTX contains a NUL byte".into()))?;
        let index: HashMap<&str, usize> = m
            .storage
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let one = |role: Role| -> Result<usize, CudaError> {
            let v: Vec<usize> = (0..m.storage.len())
                .filter(|&i| m.storage[i].role == role)
                .collect();
            match v[..] {
                [i] => Ok(i),
                _ => Err(err(format!(
                    "needs exactly one storage with role {role:?}, has {}",
                    v.len()
                ))),
            }
        };
        let (input, output) = (one(Role::Input)?, one(Role::Output)?);
        if let Some(s) = m.storage.iter().find(|s| s.bytes == 0) {
            return Err(err(format!("storage {} has 0 bytes", s.name)));
        }
        let mut kernels = Vec::new();
        for k in &m.kernel {
            if !inj.entries.contains(&k.name) {
                return Err(err(format!(
                    "kernel {} is not an .entry of {}",
                    k.name, m.ptx
                )));
            }
            let mut args = Vec::new();
            for a in &k.args {
                if let Some(n) = a.strip_prefix("u32:") {
                    let v = n
                        .parse()
                        .map_err(|_| err(format!("kernel {}: bad scalar {a:?}", k.name)))?;
                    args.push(Arg::U32(v));
                } else {
                    let i = *index.get(a.as_str()).ok_or_else(|| {
                        err(format!(
                            "kernel {}: argument {a:?} names no storage (or write u32:N)",
                            k.name
                        ))
                    })?;
                    args.push(Arg::Storage(i));
                }
            }
            kernels.push((k.clone(), args));
        }
        if kernels.is_empty() {
            return Err(err("no [[kernel]]".into()));
        }
        let mut weights = HashMap::new();
        let wanted: u64 = m
            .storage
            .iter()
            .filter(|s| s.role == Role::Weight)
            .map(|s| s.bytes)
            .sum();
        if wanted > 0 {
            let wf = m
                .weights
                .as_ref()
                .ok_or_else(|| err("weight storages but no weights file".into()))?;
            let bytes =
                std::fs::read(dir.join(wf)).map_err(|e| err(format!("cannot read {wf}: {e}")))?;
            if bytes.len() as u64 != wanted {
                return Err(err(format!(
                    "{wf} has {} B, the weight storages {wanted} B",
                    bytes.len()
                )));
            }
            let mut off = 0usize;
            for (i, s) in m
                .storage
                .iter()
                .enumerate()
                .filter(|(_, s)| s.role == Role::Weight)
            {
                weights.insert(i, bytes[off..off + s.bytes as usize].to_vec());
                off += s.bytes as usize;
            }
        }
        Ok(ModelFiles {
            name: m.name,
            ptx,
            storages: m.storage,
            kernels,
            weights,
            input,
            output,
        })
    }

    /// The kernels in execution order.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.kernels.iter().map(|(k, _)| k.name.as_str()).collect()
    }

    /// Bytes of one request's input.
    pub fn input_bytes(&self) -> usize {
        self.storages[self.input].bytes as usize
    }

    fn weight_bytes(&self) -> u64 {
        self.weights.values().map(|w| w.len() as u64).sum()
    }

    /// Device memory one stream's instance takes (inputs, activations,
    /// outputs).
    fn stream_bytes(&self) -> u64 {
        self.storages
            .iter()
            .filter(|s| s.role != Role::Weight)
            .map(|s| s.bytes)
            .sum()
    }
}

fn json_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!("{stem}.json"))
}

/// The part of a reef-compile schedule reef-model does not keep.
#[derive(Deserialize)]
struct RawCompiled {
    weights: Option<RawWeights>,
}

#[derive(Deserialize)]
struct RawWeights {
    file: String,
    entries: Vec<RawWeight>,
}

#[derive(Deserialize)]
struct RawWeight {
    storage: usize,
    name: String,
    offset: u64,
    bytes: u64,
}

/// `sm_90a` → 90.
fn arch_number(arch: &str) -> Option<i32> {
    let digits: String = arch
        .strip_prefix("sm_")?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The architecture whose PTX a GPU of compute capability `cc` loads: the
/// highest one compiled for that is not newer than the GPU (a driver
/// JIT-compiles PTX for its own or a later architecture, never an earlier
/// one: CUDA C Programming Guide, "Binary Compatibility"/"PTX
/// Compatibility"). Without a compute capability (a driver that does not
/// report it), the highest architecture compiled for.
pub fn pick_arch(archs: &[String], cc: Option<(i32, i32)>) -> Result<String, String> {
    let mut known: Vec<(i32, &String)> = archs
        .iter()
        .filter_map(|a| arch_number(a).map(|n| (n, a)))
        .collect();
    known.sort();
    let Some(&(_, highest)) = known.last() else {
        return Err(format!("no sm_NN architecture among {archs:?}"));
    };
    let Some((major, minor)) = cc else {
        return Ok(highest.clone());
    };
    let gpu = major * 10 + minor;
    known
        .iter()
        .rev()
        .find(|(n, _)| *n <= gpu)
        .map(|(_, a)| (*a).clone())
        .ok_or_else(|| {
            format!(
                "compiled for {} only, and this GPU is compute capability {major}.{minor} \
                 (sm_{gpu}), which cannot run PTX for a newer architecture: recompile with \
                 reef-compile --arch sm_{gpu}",
                archs.join(", ")
            )
        })
}

// --- the device ---------------------------------------------------------------

/// Real-time or best-effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamClass {
    RealTime,
    BestEffort,
}

/// How the device is opened.
#[derive(Debug, Clone)]
pub struct CudaLaunchOptions {
    /// N of `cuda:N`.
    pub index: u32,
    /// A driver library to load first (`REEF_CUDA_LIBRARY`).
    pub library: Option<PathBuf>,
    /// Kernels in flight per stream (REEF §4.2's device-queue capacity).
    pub queue_cap: usize,
}

struct Loaded {
    files: ModelFiles,
    /// Weight allocations per context (RT = 0, BE = 1), by storage index.
    weights: [HashMap<usize, CUdeviceptr>; 2],
}

/// One stream's instance of a model: module, functions, globals, buffers.
struct Instance {
    module: CUmodule,
    functions: Vec<CUfunction>,
    flag: CUdeviceptr,
    index: CUdeviceptr,
    buffers: HashMap<usize, CUdeviceptr>,
}

struct Request {
    task: u64,
    model: String,
    input: Vec<u8>,
    /// Its first kernel has been handed to CUDA (reported once through
    /// [`CudaDevice::take_started`]).
    first_sent: bool,
}

#[derive(Debug, Clone, Copy)]
struct Launch {
    kernel: usize,
    exec: u32,
}

struct Stream {
    class: StreamClass,
    cu: CUstream,
    requests: VecDeque<Request>,
    /// The active request's kernels not yet handed to CUDA (the host queue).
    host: VecDeque<Launch>,
    /// Handed to CUDA, with the event recorded after each.
    inflight: VecDeque<(Launch, CUevent)>,
    active: Option<u64>,
    next_exec: u32,
    instances: HashMap<String, Instance>,
    /// Paused by a preemption until `restore_be`.
    paused: bool,
}

/// A finished request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub stream: u64,
    pub task: u64,
    pub output: Vec<u8>,
}

/// A request the driver failed (see [`CudaDevice::poll`]).
#[derive(Debug)]
pub struct Failure {
    pub stream: u64,
    pub task: u64,
    pub model: String,
    pub error: CudaError,
}

/// What one preemption did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    pub level: PreemptLevel,
    /// Kernels taken back: still in host queues, or evicted at entry.
    pub host_queue: u64,
    pub evicted: u64,
    /// Kernels in the device queue that had passed the flag check (their
    /// index was at most the global execution index) and ran to the end.
    pub ran: u64,
    /// Requests queued or running on the preempted streams when they were
    /// stopped (0: the preemption stopped no work).
    pub stopped: u64,
    /// Requests that had kernels taken back (host queue or evicted): they
    /// resume from their first evicted kernel when their stream is
    /// restored (REEF §4.4).
    pub tasks: Vec<u64>,
}

/// A GPU's streaming multiprocessors as the driver reports them
/// (`cuDeviceGetAttribute`), for placement (CASE/MGB Algorithm 3 counts
/// warps per SM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmLimits {
    pub sms: u32,
    pub warp_size: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
}

/// An open `cuda:N` device with its two contexts.
pub struct CudaDevice {
    device: String,
    gpu_name: String,
    /// Compute capability (major, minor), `None` when the driver does not
    /// report it.
    cc: Option<(i32, i32)>,
    /// The SM figures placement across a node's GPUs reads, `None` when the
    /// driver does not report them all.
    sm: Option<SmLimits>,
    ctx: [CUcontext; 2],
    levels: Levels,
    queue_cap: usize,
    models: BTreeMap<String, Loaded>,
    streams: BTreeMap<u64, Stream>,
    free_events: Vec<(usize, CUevent)>,
    next_task: u64,
    parked: Vec<Completion>,
    /// Kernels handed to CUDA (`cuLaunchKernel` accepted) since open.
    launches: u64,
    /// Requests failed by the driver, for [`CudaDevice::take_failed`].
    failed: Vec<Failure>,
    /// Requests whose first kernel was handed to CUDA, with the instant the
    /// launch returned, for [`CudaDevice::take_started`].
    started: Vec<(u64, std::time::Instant)>,
}

// The raw handles are the driver's, usable from any thread once the owning
// context is made current (every call here does so).
unsafe impl Send for CudaDevice {}

fn class_ctx(c: StreamClass) -> usize {
    match c {
        StreamClass::RealTime => 0,
        StreamClass::BestEffort => 1,
    }
}

/// The probe kernel for level 2 (injected like a model's kernels).
const PROBE_PTX: &str = ".version 7.0\n.target sm_70\n.address_size 64\n\
    // reef-sim: kernel=reef_probe block_ns=1000\n\
    .visible .entry reef_probe()\n{\n\tret;\n}\n";

impl CudaDevice {
    /// Loads the driver, creates the RT and BE contexts on GPU `index` and
    /// probes the preemption levels.
    pub fn open(opts: &CudaLaunchOptions) -> Result<CudaDevice, CudaError> {
        load_library(opts.library.as_deref())?;
        if opts.queue_cap == 0 {
            return Err(CudaError::Invalid(
                "the device-queue cap must be at least 1".into(),
            ));
        }
        let device = format!("cuda:{}", opts.index);
        // SAFETY (this block and every driver call below): FFI calls with
        // valid out-pointers; handles come from the driver.
        unsafe {
            check("cuInit", sys::cuInit(0))?;
            let mut count = 0;
            check("cuDeviceGetCount", sys::cuDeviceGetCount(&mut count))?;
            if opts.index as i64 >= count as i64 {
                return Err(CudaError::Invalid(format!(
                    "no such GPU: the CUDA driver reports {count} GPU{}{}",
                    if count == 1 { "" } else { "s" },
                    match count {
                        0 => String::new(),
                        1 => " (cuda:0)".into(),
                        n => format!(" (cuda:0 to cuda:{})", n - 1),
                    }
                )));
            }
            let mut dev = 0;
            check("cuDeviceGet", sys::cuDeviceGet(&mut dev, opts.index as i32))?;
            let mut name = [0 as std::ffi::c_char; 128];
            check(
                "cuDeviceGetName",
                sys::cuDeviceGetName(name.as_mut_ptr(), 128, dev),
            )?;
            let gpu_name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let attr = |a| {
                let mut v = 0;
                (sys::cuDeviceGetAttribute(&mut v, a, dev) == CUresult::CUDA_SUCCESS).then_some(v)
            };
            let cc = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .zip(attr(
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                ));
            use sys::CUdevice_attribute as A;
            let sm = (|| {
                Some(SmLimits {
                    sms: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
                    warp_size: attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)? as u32,
                    max_threads_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?
                        as u32,
                    max_blocks_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?
                        as u32,
                })
            })();
            let mut ctx = [std::ptr::null_mut(); 2];
            for c in &mut ctx {
                check("cuCtxCreate_v2", sys::cuCtxCreate_v2(c, 0, dev))?;
            }
            let mut d = CudaDevice {
                device,
                gpu_name,
                cc,
                sm,
                ctx,
                levels: Levels::up_to(PreemptLevel::HostQueue, Vec::new()),
                queue_cap: opts.queue_cap,
                models: BTreeMap::new(),
                streams: BTreeMap::new(),
                free_events: Vec::new(),
                next_task: 1,
                parked: Vec::new(),
                launches: 0,
                failed: Vec::new(),
                started: Vec::new(),
            };
            d.levels = d.probe_levels();
            Ok(d)
        }
    }

    fn current(&self, c: usize) -> Result<(), CudaError> {
        // SAFETY: the context is ours and alive.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.ctx[c])
        })
    }

    /// Level 2 works when the probe kernel is evicted with the flag set and
    /// runs with it clear (docs/hardware.md, "The CUDA launch path").
    fn probe_levels(&mut self) -> Levels {
        match self.probe_flag() {
            Ok(()) => Levels::up_to(PreemptLevel::LazyEviction, vec![NO_KILL.into()]),
            Err(why) => Levels::up_to(
                PreemptLevel::HostQueue,
                vec![
                    format!("no lazy eviction (level 2): the preempt-flag probe failed: {why}"),
                    NO_KILL.into(),
                ],
            ),
        }
    }

    fn probe_flag(&mut self) -> Result<(), String> {
        let src = reef_trap::ptx::inject(PROBE_PTX, "probe", &Default::default())
            .map_err(|e| e.to_string())?;
        let image = CString::new(src.ptx).map_err(|e| e.to_string())?;
        self.current(1).map_err(|e| e.to_string())?;
        // SAFETY: driver calls with valid pointers.
        unsafe {
            let mut m = std::ptr::null_mut();
            check(
                "cuModuleLoadData",
                sys::cuModuleLoadData(&mut m, image.as_ptr() as *const c_void),
            )
            .map_err(|e| e.to_string())?;
            let r = (|| -> Result<(), CudaError> {
                let f = function(m, "reef_probe")?;
                let flag = global(m, "reef_preempt_flag")?;
                let index = global(m, "reef_exec_index")?;
                let mut s = std::ptr::null_mut();
                check(
                    "cuStreamCreate",
                    sys::cuStreamCreate(&mut s, STREAM_NON_BLOCKING),
                )?;
                let run = |idx: u32, flag_on: u32| -> Result<u32, CudaError> {
                    htod(flag, &flag_on.to_le_bytes())?;
                    let mut i = idx;
                    let mut params = [&mut i as *mut u32 as *mut c_void];
                    check(
                        "cuLaunchKernel",
                        sys::cuLaunchKernel(
                            f,
                            1,
                            1,
                            1,
                            32,
                            1,
                            1,
                            0,
                            s,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        ),
                    )?;
                    check("cuStreamSynchronize", sys::cuStreamSynchronize(s))?;
                    let mut out = [0u8; 4];
                    dtoh(&mut out, index)?;
                    Ok(u32::from_le_bytes(out))
                };
                let evicted = run(7, 1)?;
                let ran = run(8, 0)?;
                check("cuStreamDestroy_v2", sys::cuStreamDestroy_v2(s))?;
                if evicted == 7 {
                    return Err(CudaError::Invalid(
                        "a kernel launched with the flag set ran".into(),
                    ));
                }
                if ran != 8 {
                    return Err(CudaError::Invalid(
                        "a kernel launched with the flag clear did not store its index".into(),
                    ));
                }
                Ok(())
            })();
            let _ = sys::cuModuleUnload(m);
            r.map_err(|e| e.to_string())
        }
    }

    /// Makes the BE context current on the calling thread (for raw driver
    /// calls in tests).
    pub fn make_current_be(&self) -> Result<(), CudaError> {
        self.current(1)
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    /// The driver's name for the GPU (the simulated libcuda says so).
    pub fn gpu_name(&self) -> &str {
        &self.gpu_name
    }

    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// (free, total) device memory.
    pub fn memory(&self) -> Result<(u64, u64), CudaError> {
        self.current(0)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("cuMemGetInfo_v2", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free as u64, total as u64))
    }

    pub fn models(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    pub fn input_bytes(&self, model: &str) -> Option<usize> {
        self.models.get(model).map(|m| m.files.input_bytes())
    }

    /// The GPU's compute capability (major, minor), if the driver reports it.
    pub fn compute_capability(&self) -> Option<(i32, i32)> {
        self.cc
    }

    /// The GPU's SM figures, if the driver reports them.
    pub fn sm_limits(&self) -> Option<SmLimits> {
        self.sm
    }

    /// Device memory a model takes once loaded and used by one stream per
    /// context: its weights in both contexts (RT and BE) and one request's
    /// inputs, activations and outputs in each. [`CudaDevice::load_model`]
    /// refuses a model whose footprint exceeds the free memory.
    pub fn footprint(files: &ModelFiles) -> u64 {
        2 * (files.weight_bytes() + files.stream_bytes())
    }

    /// Reads a model directory for this GPU (a compiled model's PTX is
    /// picked by the compute capability, [`pick_arch`]).
    pub fn read_model(&self, dir: &Path) -> Result<ModelFiles, CudaError> {
        ModelFiles::read_for(dir, self.cc)
    }

    /// Loads a model directory under `name` (default: the manifest's name):
    /// weights uploaded once into each context.
    pub fn load_model(&mut self, dir: &Path, name: Option<&str>) -> Result<String, CudaError> {
        let files = self.read_model(dir)?;
        let name = name.unwrap_or(&files.name).to_string();
        if self.models.contains_key(&name) {
            return Err(CudaError::Invalid(format!(
                "model {name} is already loaded"
            )));
        }
        // Weights in both contexts, and one stream instance per context.
        let needed = Self::footprint(&files);
        let (free, total) = self.memory()?;
        if needed > free {
            return Err(CudaError::DoesNotFit {
                model: name,
                device: self.device.clone(),
                needed,
                free,
                total,
            });
        }
        let mut weights = [HashMap::new(), HashMap::new()];
        let r = (|| -> Result<(), CudaError> {
            for (c, w) in weights.iter_mut().enumerate() {
                self.current(c)?;
                for (&i, bytes) in &files.weights {
                    let p = alloc(bytes.len())?;
                    w.insert(i, p);
                    htod(p, bytes)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            free_all(&self.ctx, &weights);
            return Err(e);
        }
        self.models.insert(name.clone(), Loaded { files, weights });
        Ok(name)
    }

    /// Unloads a model no stream is running.
    pub fn unload_model(&mut self, name: &str) -> Result<(), CudaError> {
        if self
            .streams
            .values()
            .any(|s| s.requests.iter().any(|r| r.model == name))
        {
            return Err(CudaError::Invalid(format!(
                "model {name} has requests in flight"
            )));
        }
        let m = self
            .models
            .remove(name)
            .ok_or_else(|| CudaError::Invalid(format!("model {name} is not loaded")))?;
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            let (c, inst) = {
                let s = self.streams.get_mut(&id).unwrap();
                (class_ctx(s.class), s.instances.remove(name))
            };
            if let Some(inst) = inst {
                self.drop_instance(c, inst);
            }
        }
        free_all(&self.ctx, &m.weights);
        Ok(())
    }

    fn drop_instance(&self, c: usize, inst: Instance) {
        if self.current(c).is_ok() {
            // SAFETY: handles from the driver, freed once.
            unsafe {
                for p in inst.buffers.values() {
                    let _ = sys::cuMemFree_v2(*p);
                }
                let _ = sys::cuModuleUnload(inst.module);
            }
        }
    }

    pub fn open_stream(&mut self, id: u64, class: StreamClass) -> Result<(), CudaError> {
        if self.streams.contains_key(&id) {
            return Err(CudaError::Invalid(format!("stream {id} is already open")));
        }
        self.current(class_ctx(class))?;
        let mut cu = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut cu, STREAM_NON_BLOCKING)
        })?;
        self.streams.insert(
            id,
            Stream {
                class,
                cu,
                requests: VecDeque::new(),
                host: VecDeque::new(),
                inflight: VecDeque::new(),
                active: None,
                next_exec: 1,
                instances: HashMap::new(),
                paused: false,
            },
        );
        Ok(())
    }

    /// Closes a stream after waiting for its work on the device; returns
    /// the requests dropped from its queue.
    pub fn close_stream(&mut self, id: u64) -> Result<Vec<u64>, CudaError> {
        let s = self
            .streams
            .remove(&id)
            .ok_or_else(|| CudaError::Invalid(format!("no stream {id}")))?;
        let c = class_ctx(s.class);
        self.current(c)?;
        // SAFETY: handles from the driver.
        unsafe {
            check("cuStreamSynchronize", sys::cuStreamSynchronize(s.cu))?;
            check("cuStreamDestroy_v2", sys::cuStreamDestroy_v2(s.cu))?;
        }
        for (_, ev) in s.inflight {
            self.free_events.push((c, ev));
        }
        for (_, inst) in s.instances {
            self.drop_instance(c, inst);
        }
        Ok(s.requests.into_iter().map(|r| r.task).collect())
    }

    /// Queues one inference of `model` with `input` on `stream`.
    pub fn submit(&mut self, stream: u64, model: &str, input: Vec<u8>) -> Result<u64, CudaError> {
        let m = self
            .models
            .get(model)
            .ok_or_else(|| CudaError::Invalid(format!("model {model} is not loaded")))?;
        if input.len() != m.files.input_bytes() {
            return Err(CudaError::Invalid(format!(
                "model {model} takes {} B of input, got {}",
                m.files.input_bytes(),
                input.len()
            )));
        }
        let s = self
            .streams
            .get_mut(&stream)
            .ok_or_else(|| CudaError::Invalid(format!("no stream {stream}")))?;
        let task = self.next_task;
        self.next_task += 1;
        s.requests.push_back(Request {
            task,
            model: model.to_string(),
            input,
            first_sent: false,
        });
        Ok(task)
    }

    /// Whether any request is queued or running.
    pub fn busy(&self) -> bool {
        self.streams.values().any(|s| !s.requests.is_empty())
    }

    /// Whether the BE streams are paused by a preemption.
    pub fn be_paused(&self) -> bool {
        self.streams
            .values()
            .any(|s| s.class == StreamClass::BestEffort && s.paused)
    }

    /// Kernels of the stream in its host queue and handed to CUDA.
    pub fn queue_depths(&self, stream: u64) -> (usize, usize) {
        self.streams
            .get(&stream)
            .map_or((0, 0), |s| (s.host.len(), s.inflight.len()))
    }

    /// (next kernel to hand to CUDA, kernels, running) of a request.
    pub fn task_progress(&self, task: u64) -> Option<(usize, usize, bool)> {
        let s = self
            .streams
            .values()
            .find(|s| s.requests.iter().any(|r| r.task == task))?;
        let r = s.requests.iter().find(|r| r.task == task)?;
        let kernels = self.models.get(&r.model)?.files.kernels.len();
        if s.active != Some(task) {
            return Some((0, kernels, false));
        }
        let next = s.host.front().map_or(kernels, |l| l.kernel);
        Some((next, kernels, true))
    }

    /// Whether a real-time request is queued or running.
    pub fn rt_busy(&self) -> bool {
        self.streams
            .values()
            .any(|s| s.class == StreamClass::RealTime && !s.requests.is_empty())
    }

    fn instance(&mut self, id: u64, model: &str) -> Result<(), CudaError> {
        let s = &self.streams[&id];
        if s.instances.contains_key(model) {
            return Ok(());
        }
        let inst = self.new_instance(class_ctx(s.class), model)?;
        self.streams
            .get_mut(&id)
            .unwrap()
            .instances
            .insert(model.to_string(), inst);
        Ok(())
    }

    /// A new instance of loaded model `model` in context `c`: its module
    /// (its own preempt flag and execution index), functions and buffers
    /// (weights are the context's, shared).
    fn new_instance(&self, c: usize, model: &str) -> Result<Instance, CudaError> {
        let m = self
            .models
            .get(model)
            .ok_or_else(|| CudaError::Invalid(format!("model {model} is not loaded")))?;
        self.current(c)?;
        let mut inst = Instance {
            module: std::ptr::null_mut(),
            functions: Vec::new(),
            flag: 0,
            index: 0,
            buffers: HashMap::new(),
        };
        let r = (|| -> Result<(), CudaError> {
            // SAFETY: a NUL-terminated PTX image; valid out-pointer.
            check("cuModuleLoadData", unsafe {
                sys::cuModuleLoadData(&mut inst.module, m.files.ptx.as_ptr() as *const c_void)
            })?;
            for (k, _) in &m.files.kernels {
                inst.functions.push(function(inst.module, &k.name)?);
            }
            inst.flag = global(inst.module, "reef_preempt_flag")?;
            inst.index = global(inst.module, "reef_exec_index")?;
            for (i, st) in m.files.storages.iter().enumerate() {
                if st.role != Role::Weight {
                    inst.buffers.insert(i, alloc(st.bytes as usize)?);
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            if !inst.module.is_null() {
                self.drop_instance(c, inst);
            }
            return Err(e);
        }
        Ok(inst)
    }

    /// Observes completions and hands queued kernels to CUDA: at most
    /// `queue_cap` in flight per stream (REEF §4.2), none on a paused
    /// stream. Returns the requests that finished. A driver call that fails
    /// for a stream (a refused launch, a failed copy or event query) fails
    /// that stream's front request: it is taken off the stream with the
    /// driver's error, for [`Self::take_failed`], and the other requests
    /// and streams go on.
    pub fn poll(&mut self) -> Vec<Completion> {
        let mut done = Vec::new();
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            if let Err(e) = self.step(id, &mut done) {
                self.fail_front(id, e);
            }
        }
        done
    }

    fn step(&mut self, id: u64, done: &mut Vec<Completion>) -> Result<(), CudaError> {
        self.reap(id, done)?;
        self.start_next(id)?;
        self.transmit(id)?;
        // A request may have finished and the next started.
        self.reap(id, done)?;
        self.start_next(id)
    }

    /// Takes the stream's front request off with `error`, after waiting for
    /// its kernels already on the device (they use the stream's buffers,
    /// which the next request overwrites).
    fn fail_front(&mut self, id: u64, error: CudaError) {
        let c = class_ctx(self.streams[&id].class);
        let s = self.streams.get_mut(&id).unwrap();
        if s.requests.is_empty() {
            return;
        }
        // SAFETY: our context and stream; a failure leaves nothing to undo.
        unsafe {
            if sys::cuCtxSetCurrent(self.ctx[c]) == CUresult::CUDA_SUCCESS {
                let _ = sys::cuStreamSynchronize(s.cu);
            }
        }
        for (_, ev) in s.inflight.drain(..) {
            self.free_events.push((c, ev));
        }
        s.host.clear();
        s.active = None;
        let r = s.requests.pop_front().unwrap();
        self.failed.push(Failure {
            stream: id,
            task: r.task,
            model: r.model,
            error,
        });
    }

    /// Requests failed by the driver since the last call.
    pub fn take_failed(&mut self) -> Vec<Failure> {
        std::mem::take(&mut self.failed)
    }

    fn reap(&mut self, id: u64, done: &mut Vec<Completion>) -> Result<(), CudaError> {
        let c = class_ctx(self.streams[&id].class);
        self.current(c)?;
        loop {
            let s = self.streams.get_mut(&id).unwrap();
            let Some(&(_, ev)) = s.inflight.front() else {
                break;
            };
            // SAFETY: an event of ours.
            let r = unsafe { sys::cuEventQuery(ev) };
            if r == CUresult::CUDA_ERROR_NOT_READY {
                break;
            }
            check("cuEventQuery", r)?;
            let (l, ev) = s.inflight.pop_front().unwrap();
            self.free_events.push((c, ev));
            self.kernel_done(id, l, done)?;
        }
        Ok(())
    }

    fn kernel_done(
        &mut self,
        id: u64,
        l: Launch,
        done: &mut Vec<Completion>,
    ) -> Result<(), CudaError> {
        let s = self.streams.get_mut(&id).unwrap();
        let req = s
            .requests
            .front()
            .expect("a kernel in flight belongs to the active request");
        let m = &self.models[&req.model];
        if l.kernel + 1 < m.files.kernels.len() {
            return Ok(());
        }
        let inst = &s.instances[&req.model];
        let mut output = vec![0u8; m.files.storages[m.files.output].bytes as usize];
        dtoh(&mut output, inst.buffers[&m.files.output])?;
        let req = s.requests.pop_front().unwrap();
        s.active = None;
        done.push(Completion {
            stream: id,
            task: req.task,
            output,
        });
        Ok(())
    }

    fn start_next(&mut self, id: u64) -> Result<(), CudaError> {
        let s = &self.streams[&id];
        if s.active.is_some() {
            return Ok(());
        }
        let Some(req) = s.requests.front() else {
            return Ok(());
        };
        let (task, model) = (req.task, req.model.clone());
        self.instance(id, &model)?;
        let s = self.streams.get_mut(&id).unwrap();
        let m = &self.models[&model];
        let inst = &s.instances[&model];
        htod(inst.buffers[&m.files.input], &s.requests[0].input)?;
        s.active = Some(task);
        for k in 0..m.files.kernels.len() {
            let exec = s.next_exec;
            s.next_exec += 1;
            s.host.push_back(Launch { kernel: k, exec });
        }
        Ok(())
    }

    fn transmit(&mut self, id: u64) -> Result<(), CudaError> {
        let c = class_ctx(self.streams[&id].class);
        self.current(c)?;
        loop {
            let s = &self.streams[&id];
            if s.paused || s.inflight.len() >= self.queue_cap {
                return Ok(());
            }
            let Some(&l) = s.host.front() else {
                return Ok(());
            };
            let ev = self.event(c)?;
            let s = &self.streams[&id];
            let model = &s.requests[0].model;
            let (m, inst, cu) = (&self.models[model], &s.instances[model], s.cu);
            if let Err(e) = launch_kernel(m, inst, c, cu, l.kernel, l.exec, ev) {
                self.free_events.push((c, ev));
                return Err(e);
            }
            self.launches += 1;
            let s = self.streams.get_mut(&id).unwrap();
            s.host.pop_front();
            s.inflight.push_back((l, ev));
            let r = &mut s.requests[0];
            if !r.first_sent {
                r.first_sent = true;
                self.started.push((r.task, std::time::Instant::now()));
            }
        }
    }

    fn event(&mut self, c: usize) -> Result<CUevent, CudaError> {
        if let Some(i) = self.free_events.iter().position(|(ec, _)| *ec == c) {
            return Ok(self.free_events.swap_remove(i).1);
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut ev, EVENT_DISABLE_TIMING)
        })?;
        Ok(ev)
    }

    /// REEF Fig. 8 `preempt()` on every BE stream: see [`Self::preempt`].
    /// BE streams stay paused until [`CudaDevice::restore_be`].
    pub fn preempt_be(&mut self) -> Result<Preemption, CudaError> {
        let be: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.class == StreamClass::BestEffort)
            .map(|(&id, _)| id)
            .collect();
        self.preempt(&be)
    }

    /// REEF Fig. 8 `preempt()` on the BE streams `ids` not already paused:
    /// stop transmitting (level 1), set each instance's flag (level 2,
    /// line 13), wait until the device queues drain, read each stream's
    /// execution index (line 15), clear the flags (line 16), and put the
    /// evicted kernels back at the head of their host queues. The streams
    /// stay paused until [`CudaDevice::restore`]. A real-time stream or an
    /// unknown id is refused before anything is done.
    pub fn preempt(&mut self, ids: &[u64]) -> Result<Preemption, CudaError> {
        for id in ids {
            match self.streams.get(id) {
                None => return Err(CudaError::Invalid(format!("no stream {id}"))),
                Some(s) if s.class == StreamClass::RealTime => {
                    return Err(CudaError::Invalid(format!(
                        "stream {id} is real-time; only best-effort streams are preempted"
                    )))
                }
                Some(_) => {}
            }
        }
        let level2 = self.levels.highest() >= PreemptLevel::LazyEviction;
        let mut p = Preemption {
            level: if level2 {
                PreemptLevel::LazyEviction
            } else {
                PreemptLevel::HostQueue
            },
            host_queue: 0,
            evicted: 0,
            ran: 0,
            stopped: 0,
            tasks: Vec::new(),
        };
        let mut done = Vec::new();
        self.current(1)?;
        let be: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| !self.streams[id].paused)
            .collect();
        for &id in &be {
            let s = self.streams.get_mut(&id).unwrap();
            s.paused = true;
            p.stopped += s.requests.len() as u64;
            p.host_queue += s.host.len() as u64;
            if level2 {
                for inst in s.instances.values() {
                    htod(inst.flag, &1u32.to_le_bytes())?;
                }
            }
        }
        for &id in &be {
            let s = &self.streams[&id];
            // SAFETY: our stream.
            check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(s.cu)
            })?;
            if !level2 {
                self.reap(id, &mut done)?;
                continue;
            }
            let last_run = match s.requests.front() {
                Some(r) if !s.inflight.is_empty() => {
                    let mut b = [0u8; 4];
                    dtoh(&mut b, s.instances[&r.model].index)?;
                    u32::from_le_bytes(b)
                }
                _ => 0,
            };
            let s = self.streams.get_mut(&id).unwrap();
            for inst in s.instances.values() {
                htod(inst.flag, &0u32.to_le_bytes())?;
            }
            let inflight: Vec<_> = s.inflight.drain(..).collect();
            let mut evicted = Vec::new();
            for (l, ev) in inflight {
                self.free_events.push((1, ev));
                if l.exec <= last_run {
                    p.ran += 1;
                    self.kernel_done(id, l, &mut done)?;
                } else {
                    evicted.push(l);
                }
            }
            p.evicted += evicted.len() as u64;
            let s = self.streams.get_mut(&id).unwrap();
            for l in evicted.into_iter().rev() {
                s.host.push_front(l);
            }
        }
        // Requests still active with kernels taken back (a request whose
        // last kernel ran has completed above and is parked).
        for &id in &be {
            let s = &self.streams[&id];
            if let (Some(t), false) = (s.active, s.host.is_empty()) {
                p.tasks.push(t);
            }
        }
        self.parked.extend(done);
        Ok(p)
    }

    /// Lets the paused streams `ids` transmit again (unknown ids are
    /// ignored), from their first evicted kernel: see [`Self::restore_be`].
    pub fn restore(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(s) = self.streams.get_mut(id) {
                s.paused = false;
            }
        }
    }

    /// Whether stream `id` is open.
    pub fn has_stream(&self, id: u64) -> bool {
        self.streams.contains_key(&id)
    }

    /// Whether stream `id` is paused by a preemption.
    pub fn paused(&self, id: u64) -> bool {
        self.streams.get(&id).is_some_and(|s| s.paused)
    }

    /// Kernels handed to CUDA since the device was opened.
    pub fn launches(&self) -> u64 {
        self.launches
    }

    /// Requests whose first kernel was handed to CUDA since the last call,
    /// with the instant `cuLaunchKernel` returned.
    pub fn take_started(&mut self) -> Vec<(u64, std::time::Instant)> {
        std::mem::take(&mut self.started)
    }

    /// Lets BE streams transmit again, from the first evicted kernel
    /// (REEF §4.4: at level 2 an evicted kernel never ran, so relaunching it
    /// is correct without idempotence analysis).
    pub fn restore_be(&mut self) {
        for s in self.streams.values_mut() {
            s.paused = false;
        }
    }

    /// Requests that completed during a preemption (their last kernel ran
    /// before the flag was set), for the next caller of [`Self::take_parked`].
    pub fn take_parked(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.parked)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: destroying our contexts frees everything in them.
        unsafe {
            for c in self.ctx {
                let _ = sys::cuCtxDestroy_v2(c);
            }
        }
    }
}

/// Launches kernel `kernel` of loaded model `m` from instance `inst` (in
/// context `c`, current) on stream `cu` with execution index `exec` (the
/// injected kernels' trailing parameter, REEF Fig. 8 line 8), and records
/// event `ev` after it.
fn launch_kernel(
    m: &Loaded,
    inst: &Instance,
    c: usize,
    cu: CUstream,
    kernel: usize,
    exec: u32,
    ev: CUevent,
) -> Result<(), CudaError> {
    let (k, args) = &m.files.kernels[kernel];
    // The arguments' storage, then the execution index.
    let mut vals: Vec<u64> = Vec::with_capacity(args.len() + 1);
    for a in args {
        vals.push(match a {
            Arg::Storage(i) => inst
                .buffers
                .get(i)
                .or_else(|| m.weights[c].get(i))
                .copied()
                .ok_or_else(|| CudaError::Invalid(format!("storage {i} is not allocated")))?,
            Arg::U32(v) => *v as u64,
        });
    }
    vals.push(exec as u64);
    // A u32 parameter is read as the first 4 bytes of its u64 slot (little
    // endian, as every CUDA host is).
    let mut ptrs: Vec<*mut c_void> = vals
        .iter_mut()
        .map(|v| v as *mut u64 as *mut c_void)
        .collect();
    // SAFETY: one pointer per parameter, each to at least its size.
    unsafe {
        check(
            "cuLaunchKernel",
            sys::cuLaunchKernel(
                inst.functions[kernel],
                k.grid[0],
                k.grid[1],
                k.grid[2],
                k.block[0],
                k.block[1],
                k.block[2],
                k.dynamic_shared,
                cu,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )?;
        check("cuEventRecord", sys::cuEventRecord(ev, cu))
    }
}

fn free_all(ctx: &[CUcontext; 2], w: &[HashMap<usize, CUdeviceptr>; 2]) {
    for (c, m) in w.iter().enumerate() {
        // SAFETY: our context and allocations.
        unsafe {
            if sys::cuCtxSetCurrent(ctx[c]) == CUresult::CUDA_SUCCESS {
                for p in m.values() {
                    let _ = sys::cuMemFree_v2(*p);
                }
            }
        }
    }
}

pub fn alloc(bytes: usize) -> Result<CUdeviceptr, CudaError> {
    let mut p = 0;
    // SAFETY: valid out-pointer.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&mut p, bytes)
    })?;
    Ok(p)
}

pub fn htod(p: CUdeviceptr, data: &[u8]) -> Result<(), CudaError> {
    // SAFETY: data is valid for its length.
    check("cuMemcpyHtoD_v2", unsafe {
        sys::cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len())
    })
}

pub fn dtoh(out: &mut [u8], p: CUdeviceptr) -> Result<(), CudaError> {
    // SAFETY: out is valid for its length.
    check("cuMemcpyDtoH_v2", unsafe {
        sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, p, out.len())
    })
}

fn function(m: CUmodule, name: &str) -> Result<CUfunction, CudaError> {
    let c = CString::new(name).map_err(|_| CudaError::Invalid(format!("kernel name {name:?}")))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: valid pointers.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, m, c.as_ptr())
    })?;
    Ok(f)
}

fn global(m: CUmodule, name: &str) -> Result<CUdeviceptr, CudaError> {
    let c = CString::new(name).map_err(|_| CudaError::Invalid(format!("symbol {name:?}")))?;
    let (mut p, mut n) = (0, 0);
    // SAFETY: valid pointers.
    check("cuModuleGetGlobal_v2", unsafe {
        sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, c.as_ptr())
    })?;
    Ok(p)
}

/// Raw driver calls for tests that provoke the driver's errors through the
/// backend's own error path.
///
/// # Safety (every function taking a handle)
/// The handles are passed to the driver as they are. The simulated libcuda
/// validates any value; NVIDIA's driver is only specified for handles it
/// returned and not yet destroyed, so a made-up or destroyed handle is
/// undefined behaviour there.
pub mod raw {
    use super::*;

    /// `cuModuleGetFunction`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn function(m: CUmodule, name: &str) -> Result<CUfunction, CudaError> {
        super::function(m, name)
    }

    /// # Safety
    /// See the module documentation.
    ///
    /// Launches `f` with no arguments on a fresh stream of the current
    /// context with the given shape.
    pub unsafe fn launch(
        f: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: driver call; a kernel without parameters takes no array.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        })
    }
    pub use super::{alloc, dtoh, htod};

    /// `cuModuleLoadData` of a PTX text (not injected).
    pub fn module_load(ptx: &str) -> Result<CUmodule, CudaError> {
        let c = CString::new(ptx).map_err(|_| CudaError::Invalid("PTX with NUL".into()))?;
        let mut m = std::ptr::null_mut();
        // SAFETY: NUL-terminated image, valid out-pointer.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, c.as_ptr() as *const c_void)
        })?;
        Ok(m)
    }

    /// `cuModuleUnload`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn module_unload(m: CUmodule) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuModuleUnload", unsafe { sys::cuModuleUnload(m) })
    }

    /// `cuStreamCreate` (non-blocking) in the current context.
    pub fn stream() -> Result<CUstream, CudaError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, STREAM_NON_BLOCKING)
        })?;
        Ok(s)
    }

    /// `cuStreamSynchronize`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn sync(s: CUstream) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(s)
        })
    }

    /// `cuMemFree_v2`.
    pub fn free(p: CUdeviceptr) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(p) })
    }
}
