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
//! Layout on the device (issue 26; measured on the strict stand-in,
//! docs/hardware.md "Context layout"):
//! - **one context** (`cuCtxCreate_v2`), RT streams at the driver's
//!   greatest stream priority and BE streams at its least
//!   (`cuCtxGetStreamPriorityRange`, `cuStreamCreateWithPriority`): the
//!   block scheduler places an RT kernel's pending blocks before BE's, as
//!   BE's running blocks finish. Two contexts cannot share the GPU at
//!   once without MPS, they time-slice ("a kernel from one CUDA context
//!   cannot execute concurrently with a kernel from another CUDA
//!   context", CUDA C Programming Guide, "Concurrent Kernel Execution"),
//!   so RT kernels in a context of their own wait for BE's context to
//!   drain or for its time slice to end;
//! - a fault (a sticky error such as CUDA_ERROR_ILLEGAL_ADDRESS) poisons
//!   the context: [`kernels`] fails the requests on it with the driver's
//!   words and [`CudaDevice::rebuild`]s it, models reloaded;
//! - per model, one allocation per weight storage, weights uploaded once
//!   at load; a load that does not fit the free memory
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

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

use cudarc::driver::sys::{
    self, CUcontext, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream,
};
use reef_model::package::{Arg, Limits, Role};
use reef_sched::PreemptLevel;

use super::preempt::Levels;
pub use driver::{alloc, dtoh, htod, load_library, raw, CudaError};
use driver::{check, function, global, STREAM_NON_BLOCKING};
pub use module::{pick_arch, ModelFiles};

pub mod driver;
pub mod engine;
pub mod kernels;
pub mod load;
pub mod module;
pub mod rm;

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
    /// Weight allocations, by storage index.
    weights: HashMap<usize, CUdeviceptr>,
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

/// An open `cuda:N` device with its context.
pub struct CudaDevice {
    /// The driver's device (`cuDeviceGet`), for a rebuild.
    dev: sys::CUdevice,
    /// The driver's (least, greatest) stream priorities.
    priorities: (i32, i32),
    device: String,
    gpu_name: String,
    /// Compute capability (major, minor), `None` when the driver does not
    /// report it.
    cc: Option<(i32, i32)>,
    /// The SM figures placement across a node's GPUs reads, `None` when the
    /// driver does not report them all.
    sm: Option<SmLimits>,
    /// The context, shared with loads in progress outside the runtime's
    /// lock (load.rs): a context rebuilt after a fault is destroyed once
    /// the last of them lets it go.
    ctx: std::sync::Arc<Ctx>,
    levels: Levels,
    models: BTreeMap<String, Loaded>,
}

// The raw handles are the driver's, usable from any thread once the owning
// context is made current (every call here does so).
unsafe impl Send for CudaDevice {}

/// A context of the driver, destroyed (with everything in it) when the
/// last holder drops it.
pub(crate) struct Ctx(pub(crate) CUcontext);

// SAFETY: the driver API is thread-safe: a context may be current on
// several threads at once (CUDA C Programming Guide, "Context"), and its
// handle is only passed to the driver.
unsafe impl Send for Ctx {}
unsafe impl Sync for Ctx {}

impl Drop for Ctx {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: our context; no holder is left to use it.
            unsafe {
                let _ = sys::cuCtxDestroy_v2(self.0);
            }
        }
    }
}

/// The probe kernel for level 2 (injected like a model's kernels).
const PROBE_PTX: &str = ".version 7.0\n.target sm_70\n.address_size 64\n\
    // reef-sim: kernel=reef_probe block_ns=1000\n\
    .visible .entry reef_probe()\n{\n\tret;\n}\n";

impl CudaDevice {
    /// Loads the driver, creates the context on GPU `index` (and reads the
    /// driver's stream priority range) and probes the preemption levels.
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
            let mut ctx = std::ptr::null_mut();
            check("cuCtxCreate_v2", sys::cuCtxCreate_v2(&mut ctx, 0, dev))?;
            // Without stream priorities (a driver that refuses the query)
            // both classes get the default priority.
            let (mut least, mut greatest) = (0, 0);
            if sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) != CUresult::CUDA_SUCCESS
            {
                (least, greatest) = (0, 0);
            }
            let mut d = CudaDevice {
                dev,
                priorities: (least, greatest),
                device,
                gpu_name,
                cc,
                sm,
                ctx: std::sync::Arc::new(Ctx(ctx)),
                levels: Levels::up_to(PreemptLevel::HostQueue, Vec::new()),
                models: BTreeMap::new(),
            };
            d.levels = d.probe_levels();
            Ok(d)
        }
    }

    fn current(&self) -> Result<(), CudaError> {
        // SAFETY: the context is ours and alive.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.ctx.0)
        })
    }

    /// The CUDA stream priority of a class: RT the driver's greatest, BE
    /// its least (the default).
    pub fn stream_priority(&self, class: StreamClass) -> i32 {
        match class {
            StreamClass::RealTime => self.priorities.1,
            StreamClass::BestEffort => self.priorities.0,
        }
    }

    /// The driver's (least, greatest) stream priorities.
    pub fn stream_priorities(&self) -> (i32, i32) {
        self.priorities
    }

    /// A context poisoned by a fault answers every call with its sticky
    /// error: it is destroyed (everything in it goes) and a new one is
    /// created, made current, with every loaded model's weights uploaded
    /// again. The caller's handles of the old context (streams, events,
    /// instances) are dead and must be dropped without calls.
    pub fn rebuild(&mut self) -> Result<(), CudaError> {
        // Our handle of the old context goes (destroying it, unless a
        // load in progress still holds it: that load then fails on it).
        self.ctx = std::sync::Arc::new(Ctx(std::ptr::null_mut()));
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuCtxCreate_v2", unsafe {
            sys::cuCtxCreate_v2(&mut ctx, 0, self.dev)
        })?;
        self.ctx = std::sync::Arc::new(Ctx(ctx));
        let names: Vec<String> = self.models.keys().cloned().collect();
        for name in names {
            let mut weights = HashMap::new();
            let m = &self.models[&name];
            let r = (|| -> Result<(), CudaError> {
                for (&i, bytes) in &m.files.weights {
                    let p = alloc(bytes.len())?;
                    weights.insert(i, p);
                    htod(p, bytes)?;
                }
                Ok(())
            })();
            if let Err(e) = r {
                free_all(self.ctx.0, &weights);
                self.models.remove(&name);
                return Err(e);
            }
            self.models.get_mut(&name).expect("loaded").weights = weights;
        }
        Ok(())
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
        self.current().map_err(|e| e.to_string())?;
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

    /// Makes the context current on the calling thread (for raw driver
    /// calls in tests).
    pub fn make_current_be(&self) -> Result<(), CudaError> {
        self.current()
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
        self.current()?;
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

    pub fn input_bytes(&self, model: &str) -> Option<Vec<usize>> {
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
    /// The weights may not declare more than the GPU's memory.
    pub fn read_model(&self, dir: &Path) -> Result<ModelFiles, CudaError> {
        ModelFiles::read_for(dir, self.cc, &self.limits())
    }

    /// What a model read for this GPU may hold: weights no larger than its
    /// memory.
    pub fn limits(&self) -> Limits {
        match self.memory() {
            Ok((_, total)) => Limits {
                weight_bytes: total,
            },
            Err(_) => Limits::default(),
        }
    }

    /// Loads a model directory under `name` (default: the manifest's name):
    /// weights uploaded once. The memory its streams'
    /// instances take is the caller's to check
    /// ([`kernels::CudaKernels::load_model`]); the weights' allocation fails
    /// with the driver's out-of-memory error when they do not fit.
    pub fn load_model(&mut self, dir: &Path, name: Option<&str>) -> Result<String, CudaError> {
        let files = self.read_model(dir)?;
        self.load_files(files, name)
    }

    /// As [`Self::load_model`], for a model already read.
    pub fn load_files(
        &mut self,
        files: ModelFiles,
        name: Option<&str>,
    ) -> Result<String, CudaError> {
        let name = name.unwrap_or(&files.name).to_string();
        if self.models.contains_key(&name) {
            return Err(CudaError::Invalid(format!(
                "model {name} is already loaded"
            )));
        }
        let mut weights = HashMap::new();
        let r = (|| -> Result<(), CudaError> {
            self.current()?;
            for (&i, bytes) in &files.weights {
                let p = alloc(bytes.len())?;
                weights.insert(i, p);
                htod(p, bytes)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            free_all(self.ctx.0, &weights);
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
        free_all(self.ctx.0, &m.weights);
        Ok(())
    }

    fn drop_instance(&self, inst: Instance) {
        if self.current().is_ok() {
            free_instance(inst);
        }
    }

    /// A new instance of loaded model `model`: its module
    /// (its own preempt flag and execution index), functions and buffers
    /// (weights are the context's, shared).
    fn new_instance(&self, model: &str) -> Result<Instance, CudaError> {
        let m = self
            .models
            .get(model)
            .ok_or_else(|| CudaError::Invalid(format!("model {model} is not loaded")))?;
        self.current()?;
        instance_of(m)
    }

    /// The context, for a load outside the runtime's lock (load.rs).
    fn context(&self) -> std::sync::Arc<Ctx> {
        self.ctx.clone()
    }

    /// Installs a model a load outside the runtime's lock uploaded in
    /// context `ctx` (load.rs), taking it from `loaded`: refused, and left
    /// there for the caller to free, when the context was rebuilt
    /// meanwhile (its weights went with the old one) or the name is taken.
    fn install(
        &mut self,
        ctx: &std::sync::Arc<Ctx>,
        name: &str,
        loaded: &mut Option<Loaded>,
    ) -> Result<(), CudaError> {
        if !std::sync::Arc::ptr_eq(ctx, &self.ctx) {
            return Err(CudaError::Invalid(format!(
                "model {name}: the context of {} was rebuilt after a fault while the model \
                 loaded; load it again",
                self.device
            )));
        }
        if self.models.contains_key(name) {
            return Err(CudaError::Invalid(format!(
                "model {name} is already loaded"
            )));
        }
        let l = loaded
            .take()
            .ok_or_else(|| CudaError::Invalid(format!("model {name}: nothing was uploaded")))?;
        self.models.insert(name.to_string(), l);
        Ok(())
    }
}

/// Frees an instance's module and buffers (its context current).
fn free_instance(inst: Instance) {
    // SAFETY: handles from the driver, freed once.
    unsafe {
        for p in inst.buffers.values() {
            let _ = sys::cuMemFree_v2(*p);
        }
        let _ = sys::cuModuleUnload(inst.module);
    }
}

/// A new instance of model `m` in the current context: see
/// [`CudaDevice::new_instance`].
fn instance_of(m: &Loaded) -> Result<Instance, CudaError> {
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
        for k in &m.files.launches {
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
            free_instance(inst);
        }
        return Err(e);
    }
    Ok(inst)
}

/// Launches kernel `kernel` of loaded model `m` from instance `inst` (its
/// context current) on stream `cu` with execution index `exec` (the
/// injected kernels' trailing parameter, REEF Fig. 8 line 8), and records
/// event `ev` after it.
fn launch_kernel(
    m: &Loaded,
    inst: &Instance,
    cu: CUstream,
    kernel: usize,
    exec: u32,
    ev: CUevent,
) -> Result<(), CudaError> {
    let k = &m.files.launches[kernel];
    let args = &k.args;
    // The arguments' storage, then the execution index.
    let mut vals: Vec<u64> = Vec::with_capacity(args.len() + 1);
    for a in args {
        vals.push(match a {
            Arg::Storage(i) => inst
                .buffers
                .get(i)
                .or_else(|| m.weights.get(i))
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

fn free_all(ctx: CUcontext, w: &HashMap<usize, CUdeviceptr>) {
    // SAFETY: our context and allocations.
    unsafe {
        if sys::cuCtxSetCurrent(ctx) == CUresult::CUDA_SUCCESS {
            for p in w.values() {
                let _ = sys::cuMemFree_v2(*p);
            }
        }
    }
}
