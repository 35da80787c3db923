//! The AMD launch path (`kfd:N`): compiled models loaded and launched
//! through HIP's module API, loaded at run time ([`driver`]), with REEF's
//! preempt flag in each module instance (REEF §4.3 Fig. 8; the code objects
//! carry the check, compile/reef_compile/amd.py). This module opens the
//! GPU, reads its `gcnArchName`, probes the levels, loads models (weights
//! once, one module instance per stream) and launches a kernel; level 3
//! (killing running waves) is the KFD's, probed by `device/kfd.rs` only
//! where /dev/kfd answers.
//!
//! Paper: REEF (reef-tocs2025) §4.3 (Fig. 8: the launcher appends each
//! kernel's execution index; `preempt()` sets the flag and reads the
//! index), §4.5 (the MI50 and ROCm), §4.2 (a capped device queue per
//! stream). DESIGN.md layer 2, backend `kfd` ("HIP's module API loaded
//! dynamically for launches, /dev/kfd for REEF's resets").
//!
//! Layout on the device, as on CUDA (cuda/mod.rs): HIP has one primary
//! context per device and process; RT streams at HIP's greatest priority
//! and BE streams at its least (`hipDeviceGetStreamPriorityRange`: 1 to
//! -1), non-blocking, so the flag's write on the null stream does not wait
//! for them; per model one allocation per weight; per stream and model its
//! own module instance (flag, index) and activations.
//!
//! Levels: 1 always (host queues are reefd's). 2 is probed at open, as on
//! CUDA, with a probe kernel holding nothing but the check reef-compile
//! injects (probe/probe.ll, built for gfx906 and gfx90a): launched with its
//! module's flag set it must not store its execution index, with the flag
//! clear it must. Each model is probed again when loaded
//! ([`HipDevice::probe_flag`]: its first kernel with the flag set), and its
//! reference runs must store every index; a code object without the
//! globals (compiled before reef-compile injected the check) is refused. A memory fault on an AMD GPU
//! ends the process (ROCr aborts; libhip-sim/src/lib.rs), so there is no
//! context to rebuild as on CUDA.

pub mod driver;
pub mod engine;
pub mod kernels;
pub mod module;
pub mod queues;

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

use reef_model::package::{Arg, Limits, Role};
use reef_sched::PreemptLevel;

use super::preempt::Levels;
use driver::{alloc, check, dtoh, free, function, global, htod, Hip, HipError};
pub use module::HipModel;

/// The environment variable naming the HIP runtime reefd loads (after the
/// configuration key `device.hip_library`).
pub const LIBRARY_ENV: &str = "REEF_HIP_LIBRARY";

/// Why level 3 is not on the HIP path itself.
pub const KILL_THROUGH_KFD: &str = "no kill (level 3) through HIP: killing running waves is the \
     KFD's (REEF's rocm-patch WAVE_RESET, or the debug API's queue suspension on Linux 6.4+), \
     used only where /dev/kfd answers";

type Ptr = *mut c_void;

/// How the device is opened.
#[derive(Debug, Clone)]
pub struct HipLaunchOptions {
    /// N of `kfd:N` (HIP's device ordinal).
    pub index: u32,
    /// A HIP runtime to load (`device.hip_library`, `REEF_HIP_LIBRARY`).
    pub library: Option<PathBuf>,
}

pub(crate) struct Loaded {
    pub(crate) model: HipModel,
    weights: HashMap<usize, Ptr>,
}

/// One stream's instance of a model: module, functions, globals, buffers.
pub(crate) struct Instance {
    module: Ptr,
    functions: Vec<Ptr>,
    pub(crate) flag: Ptr,
    pub(crate) index: Ptr,
    pub(crate) buffers: HashMap<usize, Ptr>,
}

/// An open `kfd:N` GPU on the HIP runtime.
pub struct HipDevice {
    hip: &'static Hip,
    index: u32,
    device: String,
    gpu_name: String,
    gcn_arch: String,
    compute_units: u32,
    /// HIP's (least, greatest) stream priorities.
    priorities: (i32, i32),
    pub(crate) levels: Levels,
    /// The stream probes and reference runs use, created at open and kept
    /// (clr hands a destroyed stream's HSA queue to the next stream
    /// created, which would hide a BE stream's queue from the KFD's
    /// snapshot: queues.rs).
    util: Ptr,
    /// Notes added by the daemon (the KFD's level-3 probe).
    extra_notes: Vec<String>,
    pub(crate) models: BTreeMap<String, Loaded>,
}

/// The probe code objects (module doc, "Levels").
const PROBES: &[(&str, &[u8])] = &[
    ("gfx906", include_bytes!("probe/probe.gfx906.hsaco")),
    ("gfx90a", include_bytes!("probe/probe.gfx90a.hsaco")),
];

// The raw handles are HIP's, usable from any thread once the device is
// made current (every call here does so).
unsafe impl Send for HipDevice {}

impl HipDevice {
    /// Loads the runtime, selects GPU `index`, reads its properties.
    pub fn open(opts: &HipLaunchOptions) -> Result<HipDevice, HipError> {
        let hip = driver::load_library(opts.library.as_deref())?;
        let device = format!("kfd:{}", opts.index);
        // SAFETY (this block): FFI calls with valid out-pointers.
        unsafe {
            check("hipInit", (hip.hipInit)(0))?;
            let mut count = 0;
            let r = (hip.hipGetDeviceCount)(&mut count);
            if r != driver::HIP_SUCCESS || count <= opts.index as i32 {
                return Err(HipError::Invalid(format!(
                    "no such GPU: the HIP runtime {} reports {} GPU(s){}",
                    hip.path,
                    count.max(0),
                    if r != driver::HIP_SUCCESS {
                        format!(" ({})", check("hipGetDeviceCount", r).unwrap_err())
                    } else {
                        String::new()
                    }
                )));
            }
            check("hipSetDevice", (hip.hipSetDevice)(opts.index as i32))?;
            // ROCm 6's layout where the library exports its call, else
            // 5.2's (which ROCm 6 also keeps under the old name): driver.rs.
            // A buffer larger than either, in case a runtime writes more.
            let (call, layout, what) = match hip.hipGetDevicePropertiesR0600 {
                Some(f) => (f, driver::PROP_R0600, "hipGetDevicePropertiesR0600"),
                None => (
                    hip.hipGetDeviceProperties,
                    driver::PROP_R0000,
                    "hipGetDeviceProperties",
                ),
            };
            let mut p = vec![0u8; 2 * driver::PROP_R0600.size];
            check(what, call(p.as_mut_ptr().cast(), opts.index as i32))?;
            let cstr = |at: usize| {
                CStr::from_bytes_until_nul(&p[at..at + 256])
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            let gpu_name = cstr(0);
            let gcn_arch = cstr(layout.gcn_arch_name);
            if !gcn_arch.starts_with("gfx") {
                return Err(HipError::Invalid(format!(
                    "{} reports gcnArchName {gcn_arch:?}, not an AMD GPU processor (gfxNNN)",
                    hip.path
                )));
            }
            let at = layout.multi_processor_count;
            let compute_units = i32::from_ne_bytes(p[at..at + 4].try_into().unwrap()) as u32;
            let (mut least, mut greatest) = (0, 0);
            if (hip.hipDeviceGetStreamPriorityRange)(&mut least, &mut greatest) != 0 {
                (least, greatest) = (0, 0);
            }
            let mut d = HipDevice {
                hip,
                index: opts.index,
                device,
                gpu_name,
                gcn_arch,
                compute_units,
                priorities: (least, greatest),
                levels: Levels::up_to(PreemptLevel::HostQueue, Vec::new()),
                util: std::ptr::null_mut(),
                extra_notes: Vec::new(),
                models: BTreeMap::new(),
            };
            d.util = d.stream(false)?;
            d.levels = match d.probe_levels() {
                Ok(()) => Levels::up_to(PreemptLevel::LazyEviction, vec![KILL_THROUGH_KFD.into()]),
                Err(why) => Levels::up_to(
                    PreemptLevel::HostQueue,
                    vec![
                        format!("no lazy eviction (level 2): the preempt-flag probe failed: {why}"),
                        KILL_THROUGH_KFD.into(),
                    ],
                ),
            };
            Ok(d)
        }
    }

    /// Adds a note to the levels' (`status`).
    pub fn add_note(&mut self, note: String) {
        self.extra_notes.push(note.clone());
        self.levels.notes.push(note);
    }

    /// Level 2 at open (module doc): the probe kernel for this GPU's
    /// processor, launched with its flag set, must not store its index, and
    /// with the flag clear must.
    fn probe_levels(&self) -> Result<(), String> {
        let proc_ = module::processor(&self.gcn_arch);
        let Some((_, code)) = PROBES.iter().find(|(p, _)| *p == proc_) else {
            return Err(format!("no probe code object for {proc_} (gfx906, gfx90a)"));
        };
        let image = module::bundle(&[
            (
                module::HOST_TARGET,
                b"// reef-sim: kernel=reef_probe block_ns=1000\n",
            ),
            (&format!("hipv4-amdgcn-amd-amdhsa--{proc_}"), code),
        ]);
        self.current().map_err(|e| e.to_string())?;
        let h = self.hip;
        let mut m = std::ptr::null_mut();
        // SAFETY: a whole offload bundle; valid out-pointer.
        check("hipModuleLoadData", unsafe {
            (h.hipModuleLoadData)(&mut m, image.as_ptr().cast())
        })
        .map_err(|e| e.to_string())?;
        let r = (|| -> Result<(), HipError> {
            let f = function(m, "reef_probe")?;
            let flag = global(m, "reef_preempt_flag")?;
            let index = global(m, "reef_exec_index")?;
            let s = self.util;
            let run = |idx: u32, on: u32| -> Result<u32, HipError> {
                htod(flag, &on.to_le_bytes())?;
                let mut i = idx;
                let mut params = [&mut i as *mut u32 as Ptr];
                // SAFETY: one pointer to the kernel's one 4-byte argument.
                unsafe {
                    check(
                        "hipModuleLaunchKernel",
                        (h.hipModuleLaunchKernel)(
                            f,
                            1,
                            1,
                            1,
                            64,
                            1,
                            1,
                            0,
                            s,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        ),
                    )?;
                    check("hipStreamSynchronize", (h.hipStreamSynchronize)(s))?;
                }
                let mut out = [0u8; 4];
                dtoh(&mut out, index)?;
                Ok(u32::from_le_bytes(out))
            };
            let (evicted, ran) = (run(7, 1), run(8, 0));
            if evicted? == 7 {
                return Err(HipError::Invalid(
                    "a kernel launched with the flag set ran".into(),
                ));
            }
            if ran? != 8 {
                return Err(HipError::Invalid(
                    "a kernel launched with the flag clear did not store its index".into(),
                ));
            }
            Ok(())
        })();
        // SAFETY: our module.
        unsafe {
            let _ = (h.hipModuleUnload)(m);
        }
        r.map_err(|e| e.to_string())
    }

    pub(crate) fn current(&self) -> Result<(), HipError> {
        // SAFETY: a device ordinal HIP reported.
        check("hipSetDevice", unsafe {
            (self.hip.hipSetDevice)(self.index as i32)
        })
    }

    pub fn hip(&self) -> &'static Hip {
        self.hip
    }

    pub fn device(&self) -> &str {
        &self.device
    }

    /// HIP's name for the GPU (the simulated libamdhip64 says so).
    pub fn gpu_name(&self) -> &str {
        &self.gpu_name
    }

    /// HIP's `gcnArchName` (`gfx906:sramecc+:xnack-` on an MI50).
    pub fn gcn_arch(&self) -> &str {
        &self.gcn_arch
    }

    pub fn compute_units(&self) -> u32 {
        self.compute_units
    }

    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// HIP's priority for RT (`true`) or BE streams.
    pub fn stream_priority(&self, rt: bool) -> i32 {
        if rt {
            self.priorities.1
        } else {
            self.priorities.0
        }
    }

    /// (free, total) device memory.
    pub fn memory(&self) -> Result<(u64, u64), HipError> {
        self.current()?;
        let (mut f, mut t) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("hipMemGetInfo", unsafe {
            (self.hip.hipMemGetInfo)(&mut f, &mut t)
        })?;
        Ok((f as u64, t as u64))
    }

    pub fn models(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
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

    /// Reads a model directory for this GPU's processor.
    pub fn read_model(&self, dir: &Path) -> Result<HipModel, HipError> {
        HipModel::read(dir, &self.gcn_arch, &self.limits())
    }

    /// Loads a model under `name` (default: its own): weights uploaded once,
    /// then the flag probed on a fresh instance (module doc, "Levels").
    pub fn load_model(&mut self, model: HipModel, name: Option<&str>) -> Result<String, HipError> {
        let name = name.unwrap_or(&model.name).to_string();
        if self.models.contains_key(&name) {
            return Err(HipError::Invalid(format!("model {name} is already loaded")));
        }
        if model.inputs.len() != 1 || model.outputs.len() != 1 {
            return Err(HipError::Invalid(format!(
                "model {name} has {} inputs and {} outputs; kfd:N serves models with one of each \
                 so far (cuda:N and sim:* serve several)",
                model.inputs.len(),
                model.outputs.len()
            )));
        }
        self.current()?;
        let mut weights = HashMap::new();
        let r = (|| -> Result<(), HipError> {
            for (&i, bytes) in &model.weights {
                let p = alloc(bytes.len())?;
                weights.insert(i, p);
                htod(p, bytes)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            weights.values().for_each(|&p| free(p));
            return Err(e);
        }
        self.models.insert(name.clone(), Loaded { model, weights });
        Ok(name)
    }

    /// Unloads a model (its weights); its instances are the caller's to
    /// drop first.
    pub fn unload_model(&mut self, name: &str) -> Result<(), HipError> {
        let m = self
            .models
            .remove(name)
            .ok_or_else(|| HipError::Invalid(format!("model {name} is not loaded")))?;
        if self.current().is_ok() {
            m.weights.values().for_each(|&p| free(p));
        }
        Ok(())
    }

    /// A new instance of loaded model `model`: its module (own flag and
    /// index), functions and buffers (weights are shared).
    pub(crate) fn new_instance(&self, model: &str) -> Result<Instance, HipError> {
        let m = self
            .models
            .get(model)
            .ok_or_else(|| HipError::Invalid(format!("model {model} is not loaded")))?;
        self.current()?;
        let mut inst = Instance {
            module: std::ptr::null_mut(),
            functions: Vec::new(),
            flag: std::ptr::null_mut(),
            index: std::ptr::null_mut(),
            buffers: HashMap::new(),
        };
        let r = (|| -> Result<(), HipError> {
            // SAFETY: a whole offload bundle; valid out-pointer.
            check("hipModuleLoadData", unsafe {
                (self.hip.hipModuleLoadData)(&mut inst.module, m.model.image.as_ptr().cast())
            })?;
            for k in &m.model.launches {
                inst.functions.push(function(inst.module, &k.name)?);
            }
            inst.flag = global(inst.module, "reef_preempt_flag")?;
            inst.index = global(inst.module, "reef_exec_index")?;
            for (i, st) in m.model.storages.iter().enumerate() {
                if st.role != Role::Weight {
                    inst.buffers.insert(i, alloc(st.bytes as usize)?);
                }
            }
            Ok(())
        })();
        if let Err(e) = r {
            if !inst.module.is_null() {
                self.drop_instance(inst);
            }
            return Err(e);
        }
        Ok(inst)
    }

    pub(crate) fn drop_instance(&self, inst: Instance) {
        if self.current().is_ok() {
            inst.buffers.values().for_each(|&p| free(p));
            // SAFETY: our module, unloaded once.
            unsafe {
                let _ = (self.hip.hipModuleUnload)(inst.module);
            }
        }
    }

    /// Level 2 on model `model` (module doc): kernel 0 launched from a
    /// fresh instance with the flag set exits at its check (its index not
    /// stored). The other half (flag clear: every index stored) is checked
    /// by the caller's reference runs.
    pub fn probe_flag(&self, model: &str) -> Result<(), String> {
        let inst = self.new_instance(model).map_err(|e| e.to_string())?;
        let r = (|| -> Result<(), HipError> {
            let s = self.util;
            htod(inst.flag, &1u32.to_le_bytes())?;
            launch_kernel(self.hip, &self.models[model], &inst, s, 0, 7, None).and_then(|()| {
                // SAFETY: our stream.
                check("hipStreamSynchronize", unsafe {
                    (self.hip.hipStreamSynchronize)(s)
                })
            })?;
            let mut b = [0u8; 4];
            dtoh(&mut b, inst.index)?;
            if u32::from_le_bytes(b) == 7 {
                return Err(HipError::Invalid(
                    "a kernel launched with reef_preempt_flag set stored its execution index"
                        .into(),
                ));
            }
            Ok(())
        })();
        self.drop_instance(inst);
        r.map_err(|e| format!("model {model}: its first kernel ignored the preempt flag: {e}"))
    }

    /// One unpreempted inference of loaded model `model` on `input` (the
    /// input storage's bytes), on a fresh instance and stream, waited for:
    /// the output storage's bytes, the instance's execution index after it
    /// (the last kernel's, when every kernel passed its check) and the
    /// number of kernels.
    pub fn run_once(&self, model: &str, input: &[u8]) -> Result<(Vec<u8>, u32, usize), HipError> {
        let inst = self.new_instance(model)?;
        let m = &self.models[model];
        let s = self.util;
        let r = (|| {
            {
                let i = m.model.inputs[0];
                if m.model.storages[i].bytes as usize != input.len() {
                    return Err(HipError::Invalid(format!(
                        "model {model}'s input is {} bytes, not {}",
                        m.model.storages[i].bytes,
                        input.len()
                    )));
                }
                htod(inst.buffers[&i], input)?;
                let n = m.model.launches.len();
                for k in 0..n {
                    launch_kernel(self.hip, m, &inst, s, k, k as u32 + 1, None)?;
                }
                // SAFETY: our stream.
                check("hipStreamSynchronize", unsafe {
                    (self.hip.hipStreamSynchronize)(s)
                })?;
                let o = m.model.outputs[0];
                let mut out = vec![0u8; m.model.storages[o].bytes as usize];
                dtoh(&mut out, inst.buffers[&o])?;
                let mut b = [0u8; 4];
                dtoh(&mut b, inst.index)?;
                Ok((out, u32::from_le_bytes(b), n))
            }
        })();
        self.drop_instance(inst);
        r
    }

    /// A non-blocking stream at RT's (`true`) or BE's priority.
    pub fn stream(&self, rt: bool) -> Result<Ptr, HipError> {
        self.current()?;
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipStreamCreateWithPriority", unsafe {
            (self.hip.hipStreamCreateWithPriority)(
                &mut s,
                driver::STREAM_NON_BLOCKING,
                self.stream_priority(rt),
            )
        })?;
        Ok(s)
    }
}

impl Drop for HipDevice {
    fn drop(&mut self) {
        let names: Vec<String> = self.models.keys().cloned().collect();
        for n in names {
            let _ = self.unload_model(&n);
        }
        if !self.util.is_null() && self.current().is_ok() {
            // SAFETY: our stream, destroyed once.
            unsafe {
                let _ = (self.hip.hipStreamSynchronize)(self.util);
                let _ = (self.hip.hipStreamDestroy)(self.util);
            }
        }
    }
}

/// Launches kernel `kernel` of model `m` from instance `inst` on stream
/// `s` with execution index `exec` (the code object's trailing parameter,
/// REEF Fig. 8 line 8), and records event `ev` after it when given.
pub(crate) fn launch_kernel(
    hip: &Hip,
    m: &Loaded,
    inst: &Instance,
    s: Ptr,
    kernel: usize,
    exec: u32,
    ev: Option<Ptr>,
) -> Result<(), HipError> {
    let k = &m.model.launches[kernel];
    let mut vals: Vec<u64> = Vec::with_capacity(k.args.len() + 1);
    for a in &k.args {
        vals.push(match a {
            Arg::Storage(i) => inst
                .buffers
                .get(i)
                .or_else(|| m.weights.get(i))
                .map(|&p| p as u64)
                .ok_or_else(|| HipError::Invalid(format!("storage {i} is not allocated")))?,
            Arg::U32(v) => *v as u64,
        });
    }
    vals.push(exec as u64);
    // A 4-byte argument is read as the first 4 bytes of its u64 slot
    // (little endian, as every HIP host is).
    let mut ptrs: Vec<Ptr> = vals.iter_mut().map(|v| v as *mut u64 as Ptr).collect();
    // SAFETY: one pointer per argument of the code object's kernel, each to
    // at least its size.
    unsafe {
        check(
            "hipModuleLaunchKernel",
            (hip.hipModuleLaunchKernel)(
                inst.functions[kernel],
                k.grid[0],
                k.grid[1],
                k.grid[2],
                k.block[0],
                k.block[1],
                k.block[2],
                k.dynamic_shared,
                s,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            ),
        )?;
        if let Some(ev) = ev {
            check("hipEventRecord", (hip.hipEventRecord)(ev, s))?;
        }
    }
    Ok(())
}
