//! `cuGetErrorString` and `cuGetErrorName`: the name and text of each code
//! this library returns; any other code is INVALID_VALUE, as the driver API
//! reference says of an unrecognised error.

use super::*;

const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (CUresult::CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUresult::CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUresult::CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory",
    ),
    (
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        CUresult::CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_IMAGE,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_PTX,
        c"CUDA_ERROR_INVALID_PTX",
        c"a PTX JIT compilation failed",
    ),
    (
        CUresult::CUDA_ERROR_INVALID_HANDLE,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (
        CUresult::CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUresult::CUDA_ERROR_NOT_READY,
        c"CUDA_ERROR_NOT_READY",
        c"device not ready",
    ),
    (
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        c"too many resources requested for launch",
    ),
    (
        CUresult::CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported (reef-libcuda-sim implements only the calls reefd makes)",
    ),
    (
        CUresult::CUDA_ERROR_UNKNOWN,
        c"CUDA_ERROR_UNKNOWN",
        c"unknown error",
    ),
];

fn error_entry(e: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|(c, _, _)| *c == e)
}

/// # Safety
/// `s` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    match error_entry(e) {
        Some((_, _, text)) => code(out(s, text.as_ptr())),
        None => CUresult::CUDA_ERROR_INVALID_VALUE,
    }
}

/// # Safety
/// `s` must be writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    match error_entry(e) {
        Some((_, name, _)) => code(out(s, name.as_ptr())),
        None => CUresult::CUDA_ERROR_INVALID_VALUE,
    }
}
