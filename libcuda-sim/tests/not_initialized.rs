//! Before `cuInit` every call answers CUDA_ERROR_NOT_INITIALIZED (its own
//! test binary: `cuInit` is process-wide).

use cudarc::driver::sys::CUresult;
use reef_libcuda_sim::*;

#[test]
fn calls_before_cu_init_are_refused() {
    let (mut ctx, mut n, mut p) = (std::ptr::null_mut(), 0, 0);
    assert_eq!(
        unsafe { cuDeviceGetCount(&mut n) },
        CUresult::CUDA_ERROR_NOT_INITIALIZED
    );
    assert_eq!(
        unsafe { cuCtxCreate_v2(&mut ctx, 0, 0) },
        CUresult::CUDA_ERROR_NOT_INITIALIZED
    );
    assert_eq!(
        unsafe { cuMemAlloc_v2(&mut p, 4) },
        CUresult::CUDA_ERROR_NOT_INITIALIZED
    );
    assert_eq!(cuInit(1), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(cuInit(0), CUresult::CUDA_SUCCESS);
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, CUresult::CUDA_SUCCESS);
    assert_eq!(n, 1);
    let mut dev = 0;
    assert_eq!(
        unsafe { cuDeviceGet(&mut dev, 1) },
        CUresult::CUDA_ERROR_INVALID_DEVICE
    );
    let mut name = [0 as std::ffi::c_char; 64];
    assert_eq!(
        unsafe { cuDeviceGetName(name.as_mut_ptr(), 64, 0) },
        CUresult::CUDA_SUCCESS
    );
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap();
    assert!(
        name.contains("simulated") && name.contains("gv100"),
        "{name}"
    );
}
