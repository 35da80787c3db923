//! **TEST DEVICE.** `reef-libcuda-sim`: a CUDA driver library (the
//! `libcuda.so` that cudarc dlopens) whose GPU is reef-sim's simulated one.
//! It exists so reefd's CUDA backend (reefd/src/device/cuda/) runs
//! its real driver-API code path through cudarc on machines without a GPU,
//! the way reef-ioctl runs against FUSE fake devices. It is never installed
//! as a system libcuda: it is built as `libreef_libcuda_sim.so` and only
//! reaches a process that names it (`REEF_CUDA_LIBRARY=path`, or a directory
//! holding a `libcuda.so` link to it first on `LD_LIBRARY_PATH`), and
//! `cuDeviceGetName` says it is simulated.
//!
//! Paper: REEF (reef-tocs2025) §4.3 (Fig. 8: the preempt flag read at every
//! kernel's entry and the execution index stored by each kernel that passes
//! it, lines 1-4) and §4.6 ("Binary instrumentation": the PTX rewrite whose
//! module globals `reef_preempt_flag`/`reef_exec_index` and trailing
//! `__reef_exec_idx` parameter this driver honours). DESIGN.md layer 2
//! ("`cuda` … exercised without a GPU against a libcuda built on the
//! simulator").
//!
//! What it implements, by the versioned names cudarc 0.19 resolves:
//! `cuInit`, `cuDriverGetVersion`, `cuDeviceGet`, `cuDeviceGetCount`,
//! `cuDeviceGetName`, `cuDeviceGetAttribute` (compute capability, SM
//! count, warp size, threads and blocks per SM),
//! `cuDeviceTotalMem_v2`, `cuCtxCreate_v2`,
//! `cuCtxDestroy_v2`, `cuCtxSetCurrent`, `cuCtxGetCurrent`,
//! `cuModuleLoadData`, `cuModuleUnload`, `cuModuleGetFunction`,
//! `cuModuleGetGlobal_v2`, `cuMemAlloc_v2`, `cuMemFree_v2`,
//! `cuMemGetInfo_v2`, `cuMemcpyHtoD_v2`, `cuMemcpyDtoH_v2`,
//! `cuStreamCreate`, `cuStreamDestroy_v2`, `cuStreamSynchronize`,
//! `cuLaunchKernel`, `cuEventCreate`, `cuEventRecord`, `cuEventQuery`,
//! `cuEventSynchronize`, `cuEventDestroy_v2`, `cuGetErrorString`,
//! `cuGetErrorName`, `cuStreamCreateWithPriority`,
//! `cuCtxGetStreamPriorityRange`. Nothing else is exported (a program that
//! looks up another entry point finds no symbol, never a stub with another
//! signature), except the test hook [`reef_libcuda_sim_inject_fault`].
//!
//! Devices: `REEF_LIBCUDA_SIM_DEVICE` names one preset or spec file
//! (`gv100` by default) or a comma-separated list (`gv100,gv100`,
//! `gv100x2`, `gv100,/path/small.toml`): `cuDeviceGetCount` answers their
//! number and each ordinal is its own simulated GPU with its own memory,
//! clock-paced work and counters ([`device_stats`]). A context belongs to
//! its device; see driver.rs for what is refused across contexts and
//! devices.
//!
//! What it checks, with the driver's codes: a device ordinal past the
//! count (INVALID_DEVICE), no `cuInit` (NOT_INITIALIZED),
//! no current context (INVALID_CONTEXT), an unknown or destroyed handle or a
//! function of an unloaded module (INVALID_HANDLE), a kernel or global name
//! the module lacks (NOT_FOUND), malformed PTX (INVALID_PTX), out-of-range
//! grid or block dimensions, a wrong argument count, too much shared memory,
//! a copy past the end of an allocation, a freed or unknown pointer
//! (INVALID_VALUE), too many registers (LAUNCH_OUT_OF_RESOURCES), an
//! allocation larger than the free memory of the preset
//! (OUT_OF_MEMORY), a launch whose stream or function belongs to another
//! context (INVALID_CONTEXT), and a kernel that reads or writes freed
//! memory or memory of another context, on its device or another one
//! (ILLEGAL_ADDRESS, sticky for the context, as on a GPU).
//!
//! What kernels compute: nothing of the PTX runs. A kernel of a model
//! compiled by reef-compile computes its real function: its TIR function's
//! CPU build (`cpu.so`, named by the module's `// reef-cpu:` annotations,
//! [`cpu`]) runs on its arguments' device bytes when it completes (or, for
//! a function TVM split into several kernels, when the last completes; on
//! a worker thread, its outputs copied in when next read), so
//! outputs are the model's numbers, comparable with ONNX Runtime. Other
//! kernels' written buffers get a deterministic function of the kernel's
//! name, its read buffers' bytes and its scalar arguments (driver.rs
//! `completed`), from the `// reef-sim:` annotations of the module (ptx.rs),
//! so outputs are bytes a host can compare between a preempted and an
//! unpreempted run. A kernel evicted by the preempt flag writes nothing; a
//! killed one leaves garbage. A GPU host computes the real function on the
//! device instead; what it would confirm is in docs/hardware.md ("The CUDA
//! launch path").

// The exported functions are the C driver API. Every one that reads or
// writes through a caller's pointer is an `unsafe extern "C" fn` whose
// `# Safety` section is the driver API's contract for that pointer (a
// driver can refuse null, never a dangling pointer); the others are safe.
// The crate is also an rlib so its tests call them in-process, as cudarc
// does, inside `unsafe` blocks that keep those contracts.

// The driver's state is shared with the simulated libamdhip64
// (driver-sim/, crate reef-driver-sim).
pub use reef_driver_sim::{cpu, driver, ptx};

mod errors;
pub use errors::{cuGetErrorName, cuGetErrorString};

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream,
};

use driver::{Driver, Poll, Wait, R};

/// The environment variable that picks the simulated devices: a reef-sim
/// preset name or a spec file, or a comma-separated list of them for
/// several GPUs (`gv100,gv100`, `gv100x2`, `h100,/path/small.toml`; device
/// ordinal 0 first, [`driver::device_list`]); `gv100` when unset. Each
/// device is its own simulated GPU with its own memory.
pub const DEVICE_ENV: &str = "REEF_LIBCUDA_SIM_DEVICE";
/// Fault injection for tests: `KERNEL@N` refuses the N-th launch (counted
/// from 1, over the process) of the kernel named KERNEL with
/// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, as a driver refuses a launch whose
/// resources it cannot give; the other launches go on.
pub const FAIL_LAUNCH_ENV: &str = "REEF_LIBCUDA_SIM_FAIL_LAUNCH";
/// Fault injection for tests: `KERNEL@N[,KERNEL@N…]` makes the N-th launch
/// (counted from 1, over the process) of the kernel named KERNEL fault
/// when it runs: CUDA_ERROR_ILLEGAL_ADDRESS, sticky for its context, as a
/// kernel's illegal access is on a GPU (driver.rs module doc). A process
/// that has already initialised the driver uses
/// [`reef_libcuda_sim_inject_fault`] instead.
pub const FAULT_ENV: &str = "REEF_LIBCUDA_SIM_FAULT";

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

thread_local! {
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER.lock().unwrap_or_else(|p| p.into_inner())
}

fn with<T>(f: impl FnOnce(&mut Driver) -> R<T>) -> R<T> {
    let mut g = lock();
    let d = g.as_mut().ok_or(CUresult::CUDA_ERROR_NOT_INITIALIZED)?;
    d.catch_up();
    f(d)
}

fn current(d: &Driver) -> R<u64> {
    d.ctx(CURRENT.with(|c| c.get()))
}

fn code(r: R<()>) -> CUresult {
    match r {
        Ok(()) => CUresult::CUDA_SUCCESS,
        Err(e) => e,
    }
}

/// Waits (sleeping without the lock) until `w` is ready.
fn wait(w: Wait) -> R<()> {
    loop {
        let p = {
            let mut g = lock();
            g.as_mut()
                .ok_or(CUresult::CUDA_ERROR_NOT_INITIALIZED)?
                .poll(w)?
        };
        match p {
            Poll::Ready => return Ok(()),
            Poll::Sleep(ns) => std::thread::sleep(Duration::from_nanos(ns.clamp(1_000, 1_000_000))),
        }
    }
}

/// Writes an output parameter, refusing null.
///
/// # Safety
/// `p` is null or writable storage for a `T` (the exported function's
/// contract, which its caller keeps).
unsafe fn out<T>(p: *mut T, v: T) -> R<()> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and writable per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Simulated device stats (launches, completed, evicted) summed over the
/// devices, for tests.
pub fn stats() -> Option<driver::Stats> {
    lock().as_ref().map(|d| d.stats)
}

/// Slots of CPU computations the allocations hold, for tests
/// ([`driver::Driver::cpu_slots_held`]).
pub fn cpu_slots_held() -> usize {
    lock().as_ref().map_or(0, |d| d.cpu_slots_held())
}

/// The stats of device ordinal `dev`, for tests.
pub fn device_stats(dev: usize) -> Option<driver::Stats> {
    lock().as_ref().and_then(|d| d.device_stats(dev))
}

/// Device `dev`'s kernel intervals, `(context handle, first block placed,
/// end)` in simulated ns, for tests (driver.rs [`driver::Driver::intervals`]).
pub fn kernel_intervals(dev: usize) -> Vec<(u64, u64, u64)> {
    let mut g = lock();
    match g.as_mut() {
        Some(d) => {
            d.catch_up();
            d.intervals(dev)
        }
        None => Vec::new(),
    }
}

/// **Test hook** (not a driver API call; a process that dlopens this
/// library looks it up by name): makes the `n`-th launch from now (1: the
/// next) of the kernel named `kernel` fault when it runs, with
/// CUDA_ERROR_ILLEGAL_ADDRESS, sticky for its context ([`FAULT_ENV`]).
/// CUDA_ERROR_NOT_INITIALIZED before `cuInit`.
///
/// # Safety
/// `kernel` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn reef_libcuda_sim_inject_fault(
    kernel: *const c_char,
    n: c_uint,
) -> CUresult {
    code(with(|d| {
        let name = name_arg(kernel)?;
        if n == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        d.inject_fault(name, n as u64);
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> CUresult {
    if flags != 0 {
        return CUresult::CUDA_ERROR_INVALID_VALUE;
    }
    let mut g = lock();
    if g.is_none() {
        let dev = std::env::var(DEVICE_ENV).unwrap_or_else(|_| "gv100".into());
        let fail = match std::env::var(FAIL_LAUNCH_ENV) {
            Ok(v) => match driver::parse_fail_launch(&v) {
                Ok(f) => Some(f),
                Err(e) => {
                    eprintln!("reef-libcuda-sim: {FAIL_LAUNCH_ENV}: {e}");
                    return CUresult::CUDA_ERROR_INVALID_VALUE;
                }
            },
            Err(_) => None,
        };
        let mut faults = Vec::new();
        if let Ok(v) = std::env::var(FAULT_ENV) {
            for item in v.split(',') {
                match driver::parse_fail_launch(item.trim()) {
                    Ok(f) => faults.push(f),
                    Err(e) => {
                        eprintln!("reef-libcuda-sim: {FAULT_ENV}: {e}");
                        return CUresult::CUDA_ERROR_INVALID_VALUE;
                    }
                }
            }
        }
        match Driver::new(&dev) {
            Ok(mut d) => {
                if let Some((name, n)) = fail {
                    d.fail_launch(&name, n);
                }
                for (name, n) in faults {
                    d.inject_fault(&name, n);
                }
                *g = Some(d)
            }
            Err(e) => {
                eprintln!("reef-libcuda-sim: {DEVICE_ENV}={dev}: {e}");
                return CUresult::CUDA_ERROR_NO_DEVICE;
            }
        }
    }
    CUresult::CUDA_SUCCESS
}

/// 12.6, the API version of cudarc's `cuda-12060` bindings this library
/// is built against.
/// # Safety
/// `v` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(v: *mut c_int) -> CUresult {
    code(out(v, 12060))
}

/// # Safety
/// `n` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(n: *mut c_int) -> CUresult {
    code(with(|d| out(n, d.device_count() as c_int)))
}

/// # Safety
/// `dev` is writable storage for a `CUdevice`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(dev: *mut CUdevice, ordinal: c_int) -> CUresult {
    code(with(|d| {
        d.spec(ordinal)?;
        out(dev, ordinal)
    }))
}

/// # Safety
/// `name` is writable storage for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    code(with(|d| {
        let spec = d.spec(dev)?;
        if name.is_null() || len <= 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let s = format!("reef-sim {} (simulated GPU, test device)", spec.name);
        let n = s.len().min(len as usize - 1);
        // SAFETY: the caller gave `len` writable bytes at `name`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), name as *mut u8, n);
            *name.add(n) = 0;
        }
        Ok(())
    }))
}

/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` / `_MINOR` (cuda.h).
pub const ATTR_CC_MAJOR: c_int = 75;
pub const ATTR_CC_MINOR: c_int = 76;

/// The compute capability a preset stands for (CUDA C Programming Guide,
/// "Compute Capabilities": GV100 is Volta 7.0, H100 Hopper 9.0). Other
/// presets (the MI50 is not an NVIDIA GPU, spec files name their own
/// devices) have none.
pub fn compute_capability(preset: &str) -> Option<(c_int, c_int)> {
    match preset {
        "gv100" => Some((7, 0)),
        "h100" => Some((9, 0)),
        _ => None,
    }
}

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`, `_WARP_SIZE`,
/// `_MAX_THREADS_PER_MULTIPROCESSOR`, `_MAX_BLOCKS_PER_MULTIPROCESSOR`
/// (cuda.h): what reefd's placement across a node's GPUs reads (CASE/MGB
/// Algorithm 3 counts warps per SM).
pub const ATTR_SM_COUNT: c_int = 16;
pub const ATTR_WARP_SIZE: c_int = 10;
pub const ATTR_MAX_THREADS_PER_SM: c_int = 39;
pub const ATTR_MAX_BLOCKS_PER_SM: c_int = 106;

/// The compute capability (reefd picks a compiled model's PTX by it; a
/// preset without one answers CUDA_ERROR_NOT_SUPPORTED) and the SM
/// figures placement reads, from the preset (compute units, wave size,
/// per-CU limits). Any other attribute answers CUDA_ERROR_NOT_SUPPORTED.
/// # Safety
/// `pi` is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    code(with(|d| {
        let spec = d.spec(dev)?;
        let cc = || compute_capability(&spec.name).ok_or(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        match attrib {
            ATTR_CC_MAJOR => out(pi, cc()?.0),
            ATTR_CC_MINOR => out(pi, cc()?.1),
            ATTR_SM_COUNT => out(pi, spec.compute_units as c_int),
            ATTR_WARP_SIZE => out(pi, spec.wave_size as c_int),
            ATTR_MAX_THREADS_PER_SM => out(pi, spec.max_threads_per_cu as c_int),
            ATTR_MAX_BLOCKS_PER_SM => out(pi, spec.max_blocks_per_cu as c_int),
            _ => Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
        }
    }))
}

/// # Safety
/// `bytes` is writable storage for a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    code(with(|d| {
        d.spec(dev)?;
        out(bytes, d.device_memory(dev as usize).1 as usize)
    }))
}

/// # Safety
/// `ctx` is writable storage for a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    ctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    code(with(|d| {
        d.spec(dev)?;
        if flags & !0x1f != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if ctx.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = d.ctx_create(dev)?;
        CURRENT.with(|c| c.set(h));
        out(ctx, h as CUcontext)
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    code(with(|d| {
        d.ctx_destroy(ctx as u64)?;
        CURRENT.with(|c| {
            if c.get() == ctx as u64 {
                c.set(0)
            }
        });
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    code(with(|d| {
        if !ctx.is_null() {
            d.ctx(ctx as u64)?;
        }
        CURRENT.with(|c| c.set(ctx as u64));
        Ok(())
    }))
}

/// # Safety
/// `ctx` is writable storage for a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CUcontext) -> CUresult {
    code(with(|_| out(ctx, CURRENT.with(|c| c.get()) as CUcontext)))
}

/// # Safety
/// `m` is writable storage for a `CUmodule`; `image` is a NUL-terminated PTX image (cuModuleLoadData: the image may be PTX text, NUL-terminated).
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(m: *mut CUmodule, image: *const c_void) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        if image.is_null() || m.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: a PTX image is a NUL-terminated string (driver API
        // reference, cuModuleLoadData).
        let text = unsafe { CStr::from_ptr(image as *const c_char) };
        let h = d.module_load(ctx, text.to_bytes())?;
        out(m, h as CUmodule)
    }))
}

#[no_mangle]
pub extern "C" fn cuModuleUnload(m: CUmodule) -> CUresult {
    code(with(|d| d.module_unload(m as u64)))
}

/// A name argument, refusing null.
///
/// # Safety
/// `p` is null or a NUL-terminated string that outlives `'a`.
unsafe fn name_arg<'a>(p: *const c_char) -> R<&'a str> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller passes a NUL-terminated name.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// # Safety
/// `f` is writable storage for a `CUfunction`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    f: *mut CUfunction,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    code(with(|d| {
        let name = name_arg(name)?;
        let h = d.module_function(m as u64, name)?;
        out(f, h as CUfunction)
    }))
}

/// # Safety
/// `dptr` and `bytes` are each null or writable storage for their type; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    code(with(|d| {
        let name = name_arg(name)?;
        let (addr, size) = d.module_global(m as u64, name)?;
        // Both outputs are optional (driver API reference).
        if !dptr.is_null() {
            out(dptr, addr)?;
        }
        if !bytes.is_null() {
            out(bytes, size)?;
        }
        Ok(())
    }))
}

/// # Safety
/// `dptr` is writable storage for a `CUdeviceptr`.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        if dptr.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let p = d.mem_alloc(ctx, bytes)?;
        out(dptr, p)
    }))
}

#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    code(with(|d| {
        current(d)?;
        d.mem_free(dptr)
    }))
}

/// # Safety
/// `free` and `total` are writable storage for a `size_t` each.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        let (f, t) = d.mem_info(ctx);
        out(free, f as usize)?;
        out(total, t as usize)
    }))
}

/// Synchronous copies run on the legacy default stream: they first wait
/// for the current context's blocking streams (driver.rs module doc).
fn wait_blocking_streams() -> R<()> {
    loop {
        let (ctx, pending) = with(|d| {
            let ctx = current(d)?;
            Ok((ctx, d.blocking_work(ctx)))
        })?;
        match pending {
            Some(l) => wait(Wait::Launch(ctx, l))?,
            None => return Ok(()),
        }
    }
}

/// # Safety
/// `src` points to `n` readable bytes (it may be null when `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
) -> CUresult {
    code((|| {
        wait_blocking_streams()?;
        with(|d| {
            if src.is_null() && n > 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let bytes = if n == 0 {
                &[][..]
            } else {
                // SAFETY: the caller gave n readable bytes at src.
                unsafe { std::slice::from_raw_parts(src as *const u8, n) }
            };
            d.htod(dst, bytes)
        })
    })())
}

/// # Safety
/// `dst` points to `n` writable bytes (it may be null when `n` is 0).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) -> CUresult {
    code((|| {
        wait_blocking_streams()?;
        with(|d| {
            if dst.is_null() && n > 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let buf = if n == 0 {
                &mut [][..]
            } else {
                // SAFETY: the caller gave n writable bytes at dst.
                unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) }
            };
            d.dtoh(buf, src)
        })
    })())
}

/// # Safety
/// `s` is writable storage for a `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(s: *mut CUstream, flags: c_uint) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        if s.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = d.stream_create(ctx, flags, driver::STREAM_PRIORITY_LEAST)?;
        out(s, h as CUstream)
    }))
}

/// A stream whose pending blocks the block scheduler places before those
/// of lower-priority streams (driver.rs module doc); `priority` is clamped
/// into the range of [`cuCtxGetStreamPriorityRange`].
///
/// # Safety
/// `s` is writable storage for a `CUstream`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    s: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        if s.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = d.stream_create(ctx, flags, priority)?;
        out(s, h as CUstream)
    }))
}

/// Least 0, greatest -5 ([`driver::STREAM_PRIORITY_LEAST`]); either pointer
/// may be null (driver API reference).
///
/// # Safety
/// Each non-null pointer is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        d.check_sticky(ctx)?;
        if !least.is_null() {
            out(least, driver::STREAM_PRIORITY_LEAST)?;
        }
        if !greatest.is_null() {
            out(greatest, driver::STREAM_PRIORITY_GREATEST)?;
        }
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(s: CUstream) -> CUresult {
    code(with(|d| d.stream_destroy(s as u64)))
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: CUstream) -> CUresult {
    code((|| match with(|d| d.stream_last(s as u64))? {
        (ctx, Some(l)) => wait(Wait::Launch(ctx, l)),
        (ctx, None) => with(|d| d.check_sticky(ctx)),
    })())
}

/// # Safety
/// `e` is writable storage for a `CUevent`.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(e: *mut CUevent, flags: c_uint) -> CUresult {
    code(with(|d| {
        let ctx = current(d)?;
        if e.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = d.event_create(ctx, flags)?;
        out(e, h as CUevent)
    }))
}

#[no_mangle]
pub extern "C" fn cuEventRecord(e: CUevent, s: CUstream) -> CUresult {
    code(with(|d| d.event_record(e as u64, s as u64)))
}

#[no_mangle]
pub extern "C" fn cuEventQuery(e: CUevent) -> CUresult {
    match with(|d| d.event_done(e as u64)) {
        Ok(true) => CUresult::CUDA_SUCCESS,
        Ok(false) => CUresult::CUDA_ERROR_NOT_READY,
        Err(c) => c,
    }
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(e: CUevent) -> CUresult {
    code((|| match with(|d| d.event_target(e as u64))? {
        (ctx, Some(l)) => wait(Wait::Launch(ctx, l)),
        (ctx, None) => with(|d| d.check_sticky(ctx)),
    })())
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(e: CUevent) -> CUresult {
    code(with(|d| d.event_destroy(e as u64)))
}

/// # Safety
/// `kernelParams` must hold one pointer per kernel parameter, each to that
/// parameter's bytes (the driver API contract).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let args = match with(|d| {
        current(d)?;
        if !extra.is_null() {
            // The `extra` packing (CU_LAUNCH_PARAM_BUFFER_POINTER) is not
            // implemented here.
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        if stream.is_null() {
            // The legacy default stream is not modelled for launches.
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        let sizes = d.param_sizes(f as u64)?;
        // SAFETY: the caller keeps cuLaunchKernel's contract for `params`.
        unsafe { driver::kernel_params(&sizes, params) }
    }) {
        Ok(a) => a,
        Err(c) => return c,
    };
    loop {
        let r = with(|d| {
            let ctx = current(d)?;
            d.launch(
                ctx,
                f as u64,
                [gx, gy, gz],
                [bx, by, bz],
                shared,
                stream as u64,
                &args,
            )
        });
        match r {
            Ok(Ok(_)) => return CUresult::CUDA_SUCCESS,
            // The stream's queue is full: block, as the driver does.
            Ok(Err(s)) => {
                if let Err(c) = wait(Wait::QueueSlot(s)) {
                    return c;
                }
            }
            Err(c) => return c,
        }
    }
}
