//! The module, memory, stream, event, launch and error calls of the
//! simulated libamdhip64 (crate doc).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use cudarc::driver::sys::CUresult;
use reef_driver_sim::driver::Wait;

use crate::codeobj::{self, LoadError};
use crate::{code, out, wait, with, HipError, HIP_ERROR_NOT_READY};
use crate::{HIP_SUCCESS, PRIORITY_GREATEST, PRIORITY_LEAST};

/// A name argument, refusing null.
///
/// # Safety
/// `p` is null or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn name_arg<'a>(p: *const c_char) -> Result<&'a str, CUresult> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller passes a NUL-terminated name.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// Reads `n` bytes at `p + at`.
///
/// # Safety
/// Those bytes are readable.
unsafe fn bytes<'a>(p: *const u8, at: u64, n: usize) -> &'a [u8] {
    unsafe { std::slice::from_raw_parts(p.add(at as usize), n) }
}

fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |a, &x| (a << 8) | x as u64)
}

/// The length of the image at `p`, which `hipModuleLoadData` is given
/// without one: an offload bundle's end is its last entry's, an ELF's the
/// end of its furthest section, program header or table, as the runtime
/// measures a code object (clr's `amd::Elf::getElfSize`).
///
/// # Safety
/// `p` points to a whole bundle or ELF whose headers are truthful, the
/// `hipModuleLoadData` contract.
unsafe fn image_len(p: *const u8) -> Result<usize, LoadError> {
    let head = unsafe { bytes(p, 0, 24) };
    if head == codeobj::BUNDLE_MAGIC {
        let n = le(unsafe { bytes(p, 24, 8) });
        if n > 1024 {
            return Err(LoadError::Invalid(
                "offload bundle: too many entries".into(),
            ));
        }
        let (mut at, mut end) = (32u64, 32u64);
        for _ in 0..n {
            let e = unsafe { bytes(p, at, 24) };
            let (off, size, idlen) = (le(&e[..8]), le(&e[8..16]), le(&e[16..]));
            if idlen > 4096 {
                return Err(LoadError::Invalid(
                    "offload bundle: target id too long".into(),
                ));
            }
            at += 24 + idlen;
            end = end.max(at).max(off.saturating_add(size));
        }
        return Ok(end as usize);
    }
    if &head[..4] != b"\x7fELF" || head[4] != 2 {
        return Err(LoadError::Invalid(
            "neither an offload bundle nor an ELF64".into(),
        ));
    }
    let h = unsafe { bytes(p, 0, 64) };
    let (phoff, shoff) = (le(&h[0x20..0x28]), le(&h[0x28..0x30]));
    let (phent, phnum) = (le(&h[0x36..0x38]), le(&h[0x38..0x3a]));
    let (shent, shnum) = (le(&h[0x3a..0x3c]), le(&h[0x3c..0x3e]));
    let mut end = 64u64.max(phoff + phent * phnum).max(shoff + shent * shnum);
    for i in 0..shnum {
        let s = unsafe { bytes(p, shoff + i * shent, 64) };
        // SHT_NOBITS (8) occupies no file bytes.
        if le(&s[4..8]) != 8 {
            end = end.max(le(&s[0x18..0x20]) + le(&s[0x20..0x28]));
        }
    }
    for i in 0..phnum {
        let s = unsafe { bytes(p, phoff + i * phent, 56) };
        end = end.max(le(&s[8..16]) + le(&s[0x20..0x28]));
    }
    if end > 1 << 32 {
        return Err(LoadError::Invalid("an ELF larger than 4 GiB".into()));
    }
    Ok(end as usize)
}

/// Loads a bundle or code object for the current device (codeobj.rs).
///
/// # Safety
/// `m` is writable storage for a `hipModule_t`; `image` points to a whole
/// offload bundle or code object.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(m: *mut *mut c_void, image: *const c_void) -> HipError {
    code(with(|s, dev, ctx| {
        if m.is_null() || image.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let refuse = |e: LoadError| {
            eprintln!("reef-libhip-sim: hipModuleLoadData: {e:?}");
            match e {
                LoadError::Invalid(_) => CUresult::CUDA_ERROR_INVALID_IMAGE,
                // hipErrorNoBinaryForGpu (209) = CUDA_ERROR_NO_BINARY_FOR_GPU.
                LoadError::NoBinary(_) => CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
            }
        };
        let len = unsafe { image_len(image as *const u8) }.map_err(refuse)?;
        let img = unsafe { bytes(image as *const u8, 0, len) };
        let processor = s.archs[dev].split(':').next().unwrap_or("");
        let (co, host) = codeobj::unbundle(img, processor).map_err(refuse)?;
        let codeobj::CodeObject {
            module: mut parsed,
            max_threads,
        } = codeobj::read(co, processor).map_err(refuse)?;
        codeobj::annotate(&mut parsed, &host).map_err(refuse)?;
        let cpu = if host.contains("// reef-cpu:") {
            reef_driver_sim::cpu::load(&host).unwrap_or_else(|e| {
                eprintln!("reef-libhip-sim: kernels keep stand-in values: {e}");
                HashMap::new()
            })
        } else {
            HashMap::new()
        };
        let h = s.driver.module_load_parsed(ctx, parsed, cpu)?;
        s.bounds.insert(h, max_threads);
        unsafe { out(m, h as *mut c_void) }
    }))
}

#[no_mangle]
pub extern "C" fn hipModuleUnload(m: *mut c_void) -> HipError {
    code(with(|s, _, _| {
        s.driver.module_unload(m as u64)?;
        s.bounds.remove(&(m as u64));
        Ok(())
    }))
}

/// # Safety
/// `f` is writable storage for a `hipFunction_t`; `name` is a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(
    f: *mut *mut c_void,
    m: *mut c_void,
    name: *const c_char,
) -> HipError {
    code(with(|s, _, _| {
        let name = unsafe { name_arg(name) }?;
        let h = s.driver.module_function(m as u64, name)?;
        let bound = s.bounds.get(&(m as u64)).and_then(|b| b.get(name)).copied();
        s.function_bounds.insert(h, bound.unwrap_or(1024));
        unsafe { out(f, h as *mut c_void) }
    }))
}

/// # Safety
/// `dptr` and `bytes` are null or writable; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetGlobal(
    dptr: *mut *mut c_void,
    bytes: *mut usize,
    m: *mut c_void,
    name: *const c_char,
) -> HipError {
    code(with(|s, _, _| {
        let name = unsafe { name_arg(name) }?;
        let (addr, size) = s.driver.module_global(m as u64, name)?;
        if !dptr.is_null() {
            unsafe { out(dptr, addr as *mut c_void) }?;
        }
        if !bytes.is_null() {
            unsafe { out(bytes, size) }?;
        }
        Ok(())
    }))
}

/// # Safety
/// `p` is writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(p: *mut *mut c_void, n: usize) -> HipError {
    code(with(|s, _, ctx| {
        if p.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if n == 0 {
            // hipMalloc: "If size is 0, no memory is allocated, *ptr
            // returns nullptr, and hipSuccess is returned."
            return unsafe { out(p, std::ptr::null_mut()) };
        }
        let a = s.driver.mem_alloc(ctx, n)?;
        unsafe { out(p, a as *mut c_void) }
    }))
}

#[no_mangle]
pub extern "C" fn hipFree(p: *mut c_void) -> HipError {
    if p.is_null() {
        return HIP_SUCCESS;
    }
    code(with(|s, _, _| s.driver.mem_free(p as u64)))
}

/// The null stream is blocking: a synchronous copy waits for the blocking
/// streams of the device (HIP programming guide, "Stream
/// synchronization": the null stream synchronizes with all blocking
/// streams; `hipStreamNonBlocking` streams are not waited for).
fn wait_blocking_streams() -> Result<(), HipError> {
    loop {
        let (ctx, pending) = with(|s, _, ctx| Ok((ctx, s.driver.blocking_work(ctx))))?;
        match pending {
            Some(l) => wait(Wait::Launch(ctx, l))?,
            None => return Ok(()),
        }
    }
}

/// A copy on `stream` waits for the stream's earlier work first (stream
/// order); the host returns when it is done (an asynchronous copy may be
/// synchronous, HIP API reference `hipMemcpyHtoDAsync`).
fn wait_stream(stream: *mut c_void) -> Result<(), HipError> {
    if stream.is_null() {
        return wait_blocking_streams();
    }
    match with(|s, _, _| s.driver.stream_last(stream as u64))? {
        (ctx, Some(l)) => wait(Wait::Launch(ctx, l)),
        (_, None) => Ok(()),
    }
}

unsafe fn htod(dst: *mut c_void, src: *const c_void, n: usize, stream: *mut c_void) -> HipError {
    code((|| {
        wait_stream(stream)?;
        with(|s, _, _| {
            if src.is_null() && n > 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let b = if n == 0 {
                &[][..]
            } else {
                // SAFETY: the caller gave n readable bytes at src.
                unsafe { std::slice::from_raw_parts(src as *const u8, n) }
            };
            s.driver.htod(dst as u64, b)
        })
    })())
}

unsafe fn dtoh(dst: *mut c_void, src: *mut c_void, n: usize, stream: *mut c_void) -> HipError {
    code((|| {
        wait_stream(stream)?;
        with(|s, _, _| {
            if dst.is_null() && n > 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            let b = if n == 0 {
                &mut [][..]
            } else {
                // SAFETY: the caller gave n writable bytes at dst.
                unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) }
            };
            s.driver.dtoh(b, src as u64)
        })
    })())
}

/// # Safety
/// `src` points to `n` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *const c_void, n: usize) -> HipError {
    unsafe { htod(dst, src, n, std::ptr::null_mut()) }
}

/// # Safety
/// `dst` points to `n` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, n: usize) -> HipError {
    unsafe { dtoh(dst, src, n, std::ptr::null_mut()) }
}

/// # Safety
/// `src` points to `n` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    stream: *mut c_void,
) -> HipError {
    unsafe { htod(dst, src, n, stream) }
}

/// # Safety
/// `dst` points to `n` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: *mut c_void,
    n: usize,
    stream: *mut c_void,
) -> HipError {
    unsafe { dtoh(dst, src, n, stream) }
}

/// HIP priority → the shared driver's (CUDA-ordered) priority: HIP's
/// three levels (1 low, 0 normal, -1 high, clamped) keep their order.
fn priority(p: c_int) -> i32 {
    p.clamp(PRIORITY_GREATEST, PRIORITY_LEAST) - 1
}

/// # Safety
/// `st` is writable storage for a `hipStream_t`.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithPriority(
    st: *mut *mut c_void,
    flags: c_uint,
    prio: c_int,
) -> HipError {
    code(with(|s, _, ctx| {
        if st.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = s.driver.stream_create(ctx, flags, priority(prio))?;
        if let Some(k) = s.kfd.as_mut() {
            // The stream's HSA queue (kfd.rs); ROCr failing to create it
            // fails the stream, as clr's acquireQueue does.
            if let Err(e) = k.stream_created(&s.driver, h) {
                eprintln!("reef-libhip-sim: AMDKFD_IOC_CREATE_QUEUE: {e}");
                let _ = s.driver.stream_destroy(h);
                return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
            }
        }
        unsafe { out(st, h as *mut c_void) }
    }))
}

/// # Safety
/// `st` is writable storage for a `hipStream_t`.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithFlags(st: *mut *mut c_void, flags: c_uint) -> HipError {
    unsafe { hipStreamCreateWithPriority(st, flags, 0) }
}

/// # Safety
/// `st` is writable storage for a `hipStream_t`.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreate(st: *mut *mut c_void) -> HipError {
    unsafe { hipStreamCreateWithPriority(st, 0, 0) }
}

/// Least 1, greatest -1 (crate doc); either pointer may be null.
///
/// # Safety
/// Each non-null pointer is writable storage for an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> HipError {
    code(with(|_, _, _| {
        if !least.is_null() {
            unsafe { out(least, PRIORITY_LEAST) }?;
        }
        if !greatest.is_null() {
            unsafe { out(greatest, PRIORITY_GREATEST) }?;
        }
        Ok(())
    }))
}

#[no_mangle]
pub extern "C" fn hipStreamDestroy(st: *mut c_void) -> HipError {
    code(with(|s, _, _| s.driver.stream_destroy(st as u64)))
}

#[no_mangle]
pub extern "C" fn hipStreamSynchronize(st: *mut c_void) -> HipError {
    if st.is_null() {
        return code(wait_blocking_streams());
    }
    code((|| match with(|s, _, _| s.driver.stream_last(st as u64))? {
        (ctx, Some(l)) => wait(Wait::Launch(ctx, l)),
        (ctx, None) => with(|s, _, _| s.driver.check_sticky(ctx)),
    })())
}

/// # Safety
/// `e` is writable storage for a `hipEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreateWithFlags(e: *mut *mut c_void, flags: c_uint) -> HipError {
    code(with(|s, _, ctx| {
        if e.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // hipEventDefault 0, hipEventBlockingSync 1, hipEventDisableTiming 2
        // are the flags the shared driver knows (CUDA's same bits).
        let h = s.driver.event_create(ctx, flags)?;
        unsafe { out(e, h as *mut c_void) }
    }))
}

/// # Safety
/// `e` is writable storage for a `hipEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreate(e: *mut *mut c_void) -> HipError {
    unsafe { hipEventCreateWithFlags(e, 0) }
}

#[no_mangle]
pub extern "C" fn hipEventRecord(e: *mut c_void, st: *mut c_void) -> HipError {
    if st.is_null() {
        // The null stream's events are not modelled: refused.
        return crate::HIP_ERROR_NOT_SUPPORTED;
    }
    code(with(|s, _, _| s.driver.event_record(e as u64, st as u64)))
}

#[no_mangle]
pub extern "C" fn hipEventQuery(e: *mut c_void) -> HipError {
    match with(|s, _, _| s.driver.event_done(e as u64)) {
        Ok(true) => HIP_SUCCESS,
        Ok(false) => HIP_ERROR_NOT_READY,
        Err(c) => c,
    }
}

#[no_mangle]
pub extern "C" fn hipEventSynchronize(e: *mut c_void) -> HipError {
    code((|| match with(|s, _, _| s.driver.event_target(e as u64))? {
        (ctx, Some(l)) => wait(Wait::Launch(ctx, l)),
        (ctx, None) => with(|s, _, _| s.driver.check_sticky(ctx)),
    })())
}

#[no_mangle]
pub extern "C" fn hipEventDestroy(e: *mut c_void) -> HipError {
    code(with(|s, _, _| s.driver.event_destroy(e as u64)))
}

/// `gx`… are the grid in blocks (work groups) and the block in threads, as
/// for `cuLaunchKernel` (HIP API reference, hipModuleLaunchKernel).
///
/// # Safety
/// `params` holds one pointer per kernel argument of the code object's
/// metadata, each to that argument's bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    // clr hipamd/src/hip_module.cpp, ihipModuleLaunchKernel: a block past
    // the device's maximum work-group size is hipErrorInvalidConfiguration;
    // past the kernel's launch bound (.max_flat_workgroup_size),
    // hipErrorLaunchFailure.
    let threads = bx as u64 * by as u64 * bz as u64;
    if threads > 1024 {
        return crate::HIP_ERROR_INVALID_CONFIGURATION;
    }
    let args = match with(|s, _, _| {
        if s.function_bounds
            .get(&(f as u64))
            .is_some_and(|&b| threads > b as u64)
        {
            return Err(CUresult::CUDA_ERROR_LAUNCH_FAILED);
        }
        if !extra.is_null() {
            // HIP_LAUNCH_PARAM_BUFFER_POINTER packing is not implemented.
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        if stream.is_null() {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        let sizes = s.driver.param_sizes(f as u64)?;
        // SAFETY: the caller keeps hipModuleLaunchKernel's contract.
        unsafe { reef_driver_sim::driver::kernel_params(&sizes, params) }
    }) {
        Ok(a) => a,
        Err(c) => return c,
    };
    loop {
        let r = with(|s, _, ctx| {
            s.driver.launch(
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
            Ok(Ok(_)) => return HIP_SUCCESS,
            Ok(Err(q)) => {
                if let Err(c) = wait(Wait::QueueSlot(q)) {
                    return c;
                }
            }
            Err(c) => return c,
        }
    }
}

/// hipError_t names and strings (hip_runtime_api.h values; clr
/// hipamd/src/hip_error.cpp `ihipGetErrorString` texts) for every code
/// this library returns.
pub const ERRORS: &[(HipError, &CStr, &CStr)] = &[
    (0, c"hipSuccess", c"no error"),
    (1, c"hipErrorInvalidValue", c"invalid argument"),
    (2, c"hipErrorOutOfMemory", c"out of memory"),
    (3, c"hipErrorNotInitialized", c"initialization error"),
    (
        100,
        c"hipErrorNoDevice",
        c"no ROCm-capable device is detected",
    ),
    (101, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (
        200,
        c"hipErrorInvalidImage",
        c"device kernel image is invalid",
    ),
    (201, c"hipErrorInvalidContext", c"invalid device context"),
    (
        209,
        c"hipErrorNoBinaryForGpu",
        c"no kernel image is available for execution on the device",
    ),
    (218, c"hipErrorInvalidKernelFile", c"invalid kernel file"),
    (400, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (500, c"hipErrorNotFound", c"named symbol not found"),
    (600, c"hipErrorNotReady", c"device not ready"),
    (
        700,
        c"hipErrorIllegalAddress",
        c"an illegal memory access was encountered",
    ),
    (
        701,
        c"hipErrorLaunchOutOfResources",
        c"too many resources requested for launch",
    ),
    (719, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (801, c"hipErrorNotSupported", c"operation not supported"),
    (999, c"hipErrorUnknown", c"unknown error"),
];

fn entry(e: HipError) -> &'static (HipError, &'static CStr, &'static CStr) {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == e)
        .unwrap_or(&(-1, c"hipErrorUnknown", c"unknown error"))
}

/// HIP returns a string for any value ("unknown error" for an unknown one).
#[no_mangle]
pub extern "C" fn hipGetErrorString(e: HipError) -> *const c_char {
    entry(e).2.as_ptr()
}

#[no_mangle]
pub extern "C" fn hipGetErrorName(e: HipError) -> *const c_char {
    entry(e).1.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_the_shared_driver_returns_is_a_hip_error_of_the_same_number() {
        for c in [
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_NOT_INITIALIZED,
            CUresult::CUDA_ERROR_INVALID_DEVICE,
            CUresult::CUDA_ERROR_INVALID_IMAGE,
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
            CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
            CUresult::CUDA_ERROR_INVALID_PTX,
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            CUresult::CUDA_ERROR_NOT_FOUND,
            CUresult::CUDA_ERROR_NOT_READY,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_NOT_SUPPORTED,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_UNKNOWN,
        ] {
            let h = crate::hip(c);
            assert!(ERRORS.iter().any(|(x, _, _)| *x == h), "{c:?} = {h}");
        }
        assert_eq!(crate::hip(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU), 209);
        assert_eq!(crate::hip(CUresult::CUDA_ERROR_INVALID_PTX), 218);
    }
}
