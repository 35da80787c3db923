//! The CUDA launch path: compiled models loaded and launched through
//! cudarc's driver API, best-effort (BE) work preempted by the preempt flag
//! of REEF's injected kernels. This module opens the GPU (contexts, probed
//! levels) and loads models; [`kernels`] is the device reef-exec's driver
//! runs the scheduler's actions on (streams, launches, the flag, events),
//! so host queues, restores and every policy are reef-sched's, as on the
//! simulated GPU.
//!
//! Paper: REEF (reef-tocs2025) §4.3 "Reset-based preemption", Fig. 8 (the
//! launcher appends each kernel's execution index, line 8; `preempt()` sets
//! the flag and reads the execution index, lines 12-16), §4.2 (a device
//! queue capped per stream), §4.6 (the PTX rewrite: reef-ptx-inject,
//! trap-handler/). DESIGN.md layer 2, backend `cuda`.
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
//!   allocated ([`kernels::CudaKernels::load_model`]), and a failure midway
//!   frees what was allocated;
//! - per stream and model, its own module instance (so each BE stream has
//!   its own `reef_preempt_flag` and `reef_exec_index`: Fig. 8's global index
//!   describes one queue) and one allocation per input, activation and
//!   output storage ([`kernels`]: a request's input is copied in with its
//!   first kernel and its output copied out when its last kernel's event
//!   completes).
//!
//! Preemption levels are probed at open, not assumed: 1 always (host
//! queues are reefd's); 2 when a probe kernel, injected and launched with
//! its module's flag set through `cuMemcpyHtoD`, is evicted (its index not
//! stored) and, with the flag cleared, runs (index stored); 3 never on this
//! path, for the reason [`NO_KILL`] gives.

use std::collections::{BTreeMap, HashMap, HashSet};
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
    models: BTreeMap<String, Loaded>,
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
                models: BTreeMap::new(),
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

    /// Reads a model directory for this GPU (a compiled model's PTX is
    /// picked by the compute capability, [`pick_arch`]).
    pub fn read_model(&self, dir: &Path) -> Result<ModelFiles, CudaError> {
        ModelFiles::read_for(dir, self.cc)
    }

    /// Loads a model directory under `name` (default: the manifest's name):
    /// weights uploaded once into each context. The memory its streams'
    /// instances take is the caller's to check
    /// ([`kernels::CudaKernels::load_model`]); the weights' allocation fails
    /// with the driver's out-of-memory error when they do not fit.
    pub fn load_model(&mut self, dir: &Path, name: Option<&str>) -> Result<String, CudaError> {
        let files = self.read_model(dir)?;
        let name = name.unwrap_or(&files.name).to_string();
        if self.models.contains_key(&name) {
            return Err(CudaError::Invalid(format!(
                "model {name} is already loaded"
            )));
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

    /// Unloads a model (its weights); its instances are the caller's to
    /// drop first.
    pub fn unload_model(&mut self, name: &str) -> Result<(), CudaError> {
        let m = self
            .models
            .remove(name)
            .ok_or_else(|| CudaError::Invalid(format!("model {name} is not loaded")))?;
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
