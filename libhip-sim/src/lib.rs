//! **TEST DEVICE.** `reef-libhip-sim`: a HIP runtime library (the
//! `libamdhip64.so` reefd's `kfd:N` device loads) whose GPU is reef-sim's
//! simulated MI50. It exists so reefd's HIP launch path runs its real
//! module-API calls on machines without an AMD GPU, as the simulated libcuda
//! (libcuda-sim/) does for the CUDA path. It is never installed as a
//! system libamdhip64: it is built as `libreef_libhip_sim.so` and reaches
//! only a process that names it (`REEF_HIP_LIBRARY=path`), and
//! `hipDeviceGetName` says it is simulated.
//!
//! The driver state (contexts, modules, streams, events, memory; the
//! per-block preempt flag, stream priorities ordering pending blocks only,
//! time slicing, faults) is reef-driver-sim's, shared with the simulated
//! libcuda; this crate is HIP's names, handles, error codes, device
//! properties and module format (codeobj.rs: an offload bundle or an
//! AMDGPU code object, kernels and arguments from its metadata note).
//!
//! What it implements (the subset reefd calls; HIP 5.2's
//! `hip/hip_runtime_api.h` signatures, Debian's libamdhip64-dev 5.2.3):
//! `hipInit`, `hipDriverGetVersion`, `hipGetDeviceCount`, `hipSetDevice`,
//! `hipGetDevice`, `hipGetDeviceProperties`, `hipDeviceGetAttribute`,
//! `hipDeviceGetName`, `hipDeviceTotalMem`, `hipMemGetInfo`,
//! `hipModuleLoadData`, `hipModuleUnload`, `hipModuleGetFunction`,
//! `hipModuleGetGlobal`, `hipModuleLaunchKernel`, `hipMalloc`, `hipFree`,
//! `hipMemcpyHtoD`, `hipMemcpyDtoH`, `hipMemcpyHtoDAsync`,
//! `hipMemcpyDtoHAsync`, `hipStreamCreate`, `hipStreamCreateWithFlags`,
//! `hipStreamCreateWithPriority`, `hipDeviceGetStreamPriorityRange`,
//! `hipStreamDestroy`, `hipStreamSynchronize`, `hipEventCreate`,
//! `hipEventCreateWithFlags`, `hipEventRecord`, `hipEventQuery`,
//! `hipEventSynchronize`, `hipEventDestroy`, `hipGetErrorString`,
//! `hipGetErrorName`. Nothing else is exported but the test hook
//! [`reef_libhip_sim_inject_fault`].
//!
//! Where HIP on an AMD GPU is harsher than CUDA, the stand-in is too
//! (DESIGN.md "Stand-ins: never kinder than the hardware"):
//! - **A memory fault ends the process.** ROCr's fault handler
//!   (ROCR-Runtime src/core/runtime/runtime.cc, `Runtime::VMFaultHandler`)
//!   prints "Memory access fault by GPU node-N … Reason: …" and calls
//!   `std::abort()`; no error code reaches the program. A kernel that
//!   touches memory it does not own here (or one chosen by
//!   [`FAULT_ENV`]/[`reef_libhip_sim_inject_fault`]) aborts the process
//!   with that message the first time the library runs after it faulted.
//! - **Stream priorities**: HIP's range is least 1 (`Priority::Low`),
//!   greatest -1 (`Priority::High`), a value outside clamped (clr
//!   hipamd/src/hip_stream.cpp, `hipStreamCreateWithPriority`,
//!   `hipDeviceGetStreamPriorityRange`); the block scheduler places pending
//!   blocks of higher-priority streams first and never preempts running
//!   ones (reef-driver-sim).
//! - **The preempt flag is a module global read by each block at its
//!   dispatch** (reef-driver-sim): a code object must define
//!   `reef_preempt_flag` for `hipModuleGetGlobal` to find it, as on a GPU;
//!   reef-compile's code objects do not yet (docs/hardware.md).
//! - Only AMD presets are GPUs here: `REEF_LIBHIP_SIM_DEVICE` (default
//!   `mi50`) naming another preset finds no device.

pub mod codeobj;
pub mod kfd;

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cudarc::driver::sys::CUresult;
use reef_driver_sim::driver::{self, Driver, Poll, Wait};

/// The environment variable that picks the simulated devices: reef-sim
/// AMD presets, comma-separated for several (reef-driver-sim's
/// `device_list`); `mi50` when unset.
pub const DEVICE_ENV: &str = "REEF_LIBHIP_SIM_DEVICE";
/// Fault injection for tests: `KERNEL@N[,…]` makes the N-th launch of
/// KERNEL fault when it runs, which aborts the process (module doc).
pub const FAULT_ENV: &str = "REEF_LIBHIP_SIM_FAULT";

/// `hipError_t` (hip/hip_runtime_api.h, ROCm 5.2).
pub type HipError = c_int;
pub const HIP_SUCCESS: HipError = 0;
pub const HIP_ERROR_INVALID_VALUE: HipError = 1;
pub const HIP_ERROR_NOT_INITIALIZED: HipError = 3;
pub const HIP_ERROR_NO_DEVICE: HipError = 100;
pub const HIP_ERROR_INVALID_DEVICE: HipError = 101;
pub const HIP_ERROR_INVALID_IMAGE: HipError = 200;
pub const HIP_ERROR_NO_BINARY_FOR_GPU: HipError = 209;
pub const HIP_ERROR_NOT_READY: HipError = 600;
pub const HIP_ERROR_INVALID_CONFIGURATION: HipError = 9;
pub const HIP_ERROR_LAUNCH_FAILURE: HipError = 719;
pub const HIP_ERROR_NOT_SUPPORTED: HipError = 801;

/// `hipDeviceAttribute_t` values (ROCm 5.2's enum, counted from
/// `hipDeviceAttributeCudaCompatibleBegin` = 0).
pub const ATTR_MAX_THREADS_PER_BLOCK: c_int = 56;
pub const ATTR_MAX_THREADS_PER_MULTIPROCESSOR: c_int = 57;
pub const ATTR_MULTIPROCESSOR_COUNT: c_int = 63;
pub const ATTR_WARP_SIZE: c_int = 87;

/// `hipDeviceProp_t` of ROCm 5.2 (`hipGetDeviceProperties`): 792 bytes;
/// the offsets of the fields filled here, from `offsetof` on Debian's
/// libamdhip64-dev 5.2.3 header (x86-64).
pub mod prop {
    pub const SIZE: usize = 792;
    pub const NAME: usize = 0;
    pub const TOTAL_GLOBAL_MEM: usize = 256;
    pub const SHARED_MEM_PER_BLOCK: usize = 264;
    pub const WARP_SIZE: usize = 276;
    pub const MAX_THREADS_PER_BLOCK: usize = 280;
    pub const MULTI_PROCESSOR_COUNT: usize = 336;
    pub const MAX_THREADS_PER_MULTI_PROCESSOR: usize = 344;
    pub const MAX_SHARED_MEMORY_PER_MULTI_PROCESSOR: usize = 376;
    pub const GCN_ARCH: usize = 392;
    pub const GCN_ARCH_NAME: usize = 396;
}

/// HIP's stream priorities (module doc).
pub const PRIORITY_LEAST: c_int = 1;
pub const PRIORITY_GREATEST: c_int = -1;

struct State {
    driver: Driver,
    /// The primary context of each device (HIP has one per device and
    /// process; the module API runs in it).
    contexts: Vec<u64>,
    /// Each device's `gcnArchName`.
    archs: Vec<&'static str>,
    /// Each module's kernels' launch bounds (`.max_flat_workgroup_size`).
    bounds: HashMap<u64, HashMap<String, u32>>,
    /// Each function's launch bound.
    function_bounds: HashMap<u64, u32>,
    /// The KFD queues, where a KFD node is named (kfd.rs).
    kfd: Option<kfd::KfdQueues>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static INIT_ERROR: OnceLock<HipError> = OnceLock::new();

thread_local! {
    static DEVICE: Cell<usize> = const { Cell::new(0) };
}

/// The `gcnArchName` an AMD preset reports: the MI50 is gfx906 with SRAM
/// ECC on and XNACK off, as `rocminfo` prints it for the Radeon Instinct
/// MI50 (the target-id syntax of LLVM AMDGPU usage, "Target ID").
pub fn gcn_arch(preset: &str) -> Option<&'static str> {
    match preset.to_ascii_lowercase().as_str() {
        "mi50" => Some("gfx906:sramecc+:xnack-"),
        _ => None,
    }
}

fn init() -> Result<State, HipError> {
    let dev = std::env::var(DEVICE_ENV).unwrap_or_else(|_| "mi50".into());
    let specs = driver::device_list(&dev).map_err(|e| {
        eprintln!("reef-libhip-sim: {DEVICE_ENV}={dev}: {e}");
        HIP_ERROR_NO_DEVICE
    })?;
    let mut archs = Vec::new();
    for s in &specs {
        match gcn_arch(&s.name) {
            Some(a) => archs.push(a),
            None => {
                eprintln!(
                    "reef-libhip-sim: {DEVICE_ENV}={dev}: {} is not an AMD GPU preset (mi50)",
                    s.name
                );
                return Err(HIP_ERROR_NO_DEVICE);
            }
        }
    }
    let mut specs = specs;
    if let Some(v) = std::env::var_os(kfd::MAX_HW_QUEUES_ENV) {
        // clr's queue pool bound per priority (kfd.rs).
        let n = v
            .to_str()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                eprintln!(
                    "reef-libhip-sim: {}={v:?}: not a count",
                    kfd::MAX_HW_QUEUES_ENV
                );
                HIP_ERROR_INVALID_VALUE
            })?;
        for s in &mut specs {
            s.hw_queues = n;
        }
    }
    let devices = specs.len();
    let mut driver = Driver::from_specs(specs);
    // ROCr without its KFD finds no GPU (hsa_init fails).
    let kfd = kfd::KfdQueues::open(devices).map_err(|e| {
        eprintln!("reef-libhip-sim: {}: {e}", kfd::KFD_ENV);
        HIP_ERROR_NO_DEVICE
    })?;
    if kfd.is_some() {
        kfd::serve_link(link_request).map_err(|e| {
            eprintln!("reef-libhip-sim: {}: {e}", kfd::LINK_ENV);
            HIP_ERROR_NO_DEVICE
        })?;
    }
    if let Ok(v) = std::env::var(FAULT_ENV) {
        for item in v.split(',') {
            let (name, n) = driver::parse_fail_launch(item.trim()).map_err(|e| {
                eprintln!("reef-libhip-sim: {FAULT_ENV}: {e}");
                HIP_ERROR_INVALID_VALUE
            })?;
            driver.inject_fault(&name, n);
        }
    }
    let contexts = (0..devices)
        .map(|d| {
            let h = driver.ctx_create(d as i32)?;
            driver.ctx(h)
        })
        .map(|r| r.map_err(hip))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(State {
        driver,
        contexts,
        archs,
        bounds: HashMap::new(),
        function_bounds: HashMap::new(),
        kfd,
    })
}

/// One request of the fake KFD's link (kfd.rs) on the library's state.
fn link_request(line: &str) -> String {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    match g.as_mut() {
        Some(State {
            driver,
            kfd: Some(k),
            ..
        }) => k.apply(driver, line),
        _ => "err no KFD queues".into(),
    }
}

/// The library's state, initialised by the first call (HIP initialises
/// itself on any API call, `HIP_INIT_API`; `hipInit` is optional).
fn lock() -> Result<MutexGuard<'static, Option<State>>, HipError> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        if let Some(&e) = INIT_ERROR.get() {
            return Err(e);
        }
        match init() {
            Ok(s) => *g = Some(s),
            Err(e) => {
                let _ = INIT_ERROR.set(e);
                return Err(e);
            }
        }
    }
    Ok(g)
}

/// The driver's refusal as HIP's code: HIP took its error numbering from
/// CUDA's (hip_runtime_api.h: hipErrorInvalidValue = 1, … hipErrorInvalidContext
/// = 201, hipErrorInvalidKernelFile = 218 "In CUDA DRV, it is
/// CUDA_ERROR_INVALID_PTX", hipErrorInvalidHandle = 400, hipErrorNotFound
/// = 500, hipErrorNotReady = 600, hipErrorIllegalAddress = 700,
/// hipErrorLaunchOutOfResources = 701, hipErrorUnknown = 999), so every
/// code the shared driver returns keeps its number ([`ERRORS`] lists them).
pub fn hip(e: CUresult) -> HipError {
    e as HipError
}

/// Runs `f` on the driver, after catching the simulated GPU up to now; a
/// fault that happened meanwhile ends the process (module doc).
fn with<T>(f: impl FnOnce(&mut State, usize, u64) -> Result<T, CUresult>) -> Result<T, HipError> {
    let mut g = lock()?;
    let s = g.as_mut().unwrap();
    s.driver.catch_up();
    abort_on_fault(s);
    let dev = DEVICE.with(|d| d.get());
    let ctx = s.contexts[dev];
    let r = f(s, dev, ctx).map_err(hip);
    abort_on_fault(s);
    r
}

fn abort_on_fault(s: &State) {
    for (node, &c) in s.contexts.iter().enumerate() {
        if s.driver.check_sticky(c) == Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS) {
            // ROCr's message (runtime.cc VMFaultHandler), then abort().
            eprintln!(
                "Memory access fault by GPU node-{} (Agent handle: {c:#x}) on address (nil). \
                 Reason: Page not present or supervisor privilege.\n\
                 (reef-libhip-sim: a simulated kernel touched memory it does not own)",
                node + 1
            );
            std::process::abort();
        }
    }
}

fn code(r: Result<(), HipError>) -> HipError {
    match r {
        Ok(()) => HIP_SUCCESS,
        Err(e) => e,
    }
}

/// Waits (sleeping without the lock) until `w` is ready.
fn wait(w: Wait) -> Result<(), HipError> {
    loop {
        let p = with(|s, _, _| s.driver.poll(w))?;
        match p {
            Poll::Ready => return Ok(()),
            Poll::Sleep(ns) => std::thread::sleep(Duration::from_nanos(ns.clamp(1_000, 1_000_000))),
        }
    }
}

/// Writes an output parameter, refusing null.
///
/// # Safety
/// `p` is null or writable storage for a `T`.
unsafe fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and writable per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}

fn device(s: &State, d: c_int) -> Result<usize, CUresult> {
    usize::try_from(d)
        .ok()
        .filter(|&d| d < s.contexts.len())
        .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
}

/// **Test hook**: the `n`-th launch from now of kernel `kernel` faults
/// when it runs (which aborts the process, module doc).
///
/// # Safety
/// `kernel` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn reef_libhip_sim_inject_fault(
    kernel: *const c_char,
    n: c_uint,
) -> HipError {
    code(with(|s, _, _| {
        let name = unsafe { api::name_arg(kernel) }?;
        if n == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        s.driver.inject_fault(name, n as u64);
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn hipInit(flags: c_uint) -> HipError {
    if flags != 0 {
        return HIP_ERROR_INVALID_VALUE;
    }
    code(lock().map(|_| ()))
}

/// 50221151: the HIP version of ROCm 5.2.3 (`HIP_VERSION` =
/// major * 10000000 + minor * 100000 + patch).
///
/// # Safety
/// `v` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipDriverGetVersion(v: *mut c_int) -> HipError {
    code(with(|_, _, _| unsafe { out(v, 50_221_151) }))
}

/// # Safety
/// `n` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(n: *mut c_int) -> HipError {
    if n.is_null() {
        return HIP_ERROR_INVALID_VALUE;
    }
    match with(|s, _, _| Ok(s.contexts.len() as c_int)) {
        Ok(c) => code(unsafe { out(n, c) }.map_err(hip)),
        // hipGetDeviceCount: "returns hipErrorNoDevice" when there is none.
        Err(_) => {
            unsafe { n.write(0) };
            HIP_ERROR_NO_DEVICE
        }
    }
}

#[no_mangle]
pub extern "C" fn hipSetDevice(d: c_int) -> HipError {
    code(with(|s, _, _| {
        let d = device(s, d)?;
        DEVICE.with(|c| c.set(d));
        Ok(())
    }))
}

/// # Safety
/// `d` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(d: *mut c_int) -> HipError {
    code(with(|_, dev, _| unsafe { out(d, dev as c_int) }))
}

fn device_name(s: &State, d: usize) -> String {
    format!(
        "reef-sim {} (simulated by reef-libhip-sim, test device)",
        s.driver
            .spec(d as i32)
            .map(|sp| sp.name.as_str())
            .unwrap_or("?")
    )
}

fn put_cstr(buf: &mut [u8], text: &str) {
    let n = text.len().min(buf.len() - 1);
    buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    buf[n] = 0;
}

/// Fills ROCm 5.2's `hipDeviceProp_t` ([`prop`]); the fields not listed
/// there are zero.
///
/// # Safety
/// `p` is writable storage for a ROCm 5.2 `hipDeviceProp_t` (792 bytes).
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceProperties(p: *mut c_void, d: c_int) -> HipError {
    code(with(|s, _, _| {
        if p.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let d = device(s, d)?;
        let sp = s.driver.spec(d as i32)?;
        let mut b = vec![0u8; prop::SIZE];
        put_cstr(&mut b[prop::NAME..prop::NAME + 256], &device_name(s, d));
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(
            prop::TOTAL_GLOBAL_MEM,
            &(sp.memory_bytes as usize).to_ne_bytes(),
        );
        // 64 KiB of LDS per work group on GCN/CDNA.
        put(prop::SHARED_MEM_PER_BLOCK, &65536usize.to_ne_bytes());
        put(prop::WARP_SIZE, &(sp.wave_size as c_int).to_ne_bytes());
        put(prop::MAX_THREADS_PER_BLOCK, &1024i32.to_ne_bytes());
        put(
            prop::MULTI_PROCESSOR_COUNT,
            &(sp.compute_units as c_int).to_ne_bytes(),
        );
        put(
            prop::MAX_THREADS_PER_MULTI_PROCESSOR,
            &(sp.max_threads_per_cu as c_int).to_ne_bytes(),
        );
        put(
            prop::MAX_SHARED_MEMORY_PER_MULTI_PROCESSOR,
            &(sp.lds_bytes_per_cu as usize).to_ne_bytes(),
        );
        let arch = s.archs[d];
        let num: c_int = arch
            .trim_start_matches("gfx")
            .split(':')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        put(prop::GCN_ARCH, &num.to_ne_bytes());
        put_cstr(&mut b[prop::GCN_ARCH_NAME..prop::GCN_ARCH_NAME + 256], arch);
        // SAFETY: the caller gave a writable hipDeviceProp_t.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p as *mut u8, prop::SIZE) };
        Ok(())
    }))
}

/// # Safety
/// `v` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(v: *mut c_int, attr: c_int, d: c_int) -> HipError {
    code(with(|s, _, _| {
        let d = device(s, d)?;
        let sp = s.driver.spec(d as i32)?;
        let x = match attr {
            ATTR_MAX_THREADS_PER_BLOCK => 1024,
            ATTR_MAX_THREADS_PER_MULTIPROCESSOR => sp.max_threads_per_cu as c_int,
            ATTR_MULTIPROCESSOR_COUNT => sp.compute_units as c_int,
            ATTR_WARP_SIZE => sp.wave_size as c_int,
            // Not simulated: refused, never a made-up value.
            _ => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
        };
        unsafe { out(v, x) }
    }))
}

/// # Safety
/// `name` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, d: c_int) -> HipError {
    code(with(|s, _, _| {
        let d = device(s, d)?;
        if name.is_null() || len <= 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller gave len writable bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(name as *mut u8, len as usize) };
        put_cstr(buf, &device_name(s, d));
        Ok(())
    }))
}

/// # Safety
/// `bytes` is writable storage for a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, d: c_int) -> HipError {
    code(with(|s, _, _| {
        let d = device(s, d)?;
        unsafe { out(bytes, s.driver.device_memory(d).1 as usize) }
    }))
}

/// # Safety
/// `free` and `total` are writable storage for a `size_t` each.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> HipError {
    code(with(|s, _, ctx| {
        let (f, t) = s.driver.mem_info(ctx);
        unsafe { out(free, f as usize) }?;
        unsafe { out(total, t as usize) }
    }))
}

/// Device `dev`'s counters (launches, evicted, partly run, …), for tests.
pub fn device_stats(dev: usize) -> Option<driver::Stats> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let s = g.as_mut()?;
    s.driver.catch_up();
    s.driver.device_stats(dev)
}

/// Device `dev`'s kernel intervals `(context, first block placed, end)` in
/// simulated ns, for tests.
pub fn kernel_intervals(dev: usize) -> Vec<(u64, u64, u64)> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    match g.as_mut() {
        Some(s) => {
            s.driver.catch_up();
            s.driver.intervals(dev)
        }
        None => Vec::new(),
    }
}

mod api;
pub use api::*;
