//! Several simulated GPUs in one driver (`REEF_LIBCUDA_SIM_DEVICE` a list;
//! its own test binary: the driver is process-wide and reads the variable
//! at `cuInit`): each ordinal its own GPU with its own memory and work, and
//! what a driver refuses across contexts and devices.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUresult, CUstream};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/two-kernel/kernels.ptx");

fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var(DEVICE_ENV, "gv100,h100");
        assert_eq!(cuInit(0), OK);
    });
}

/// A context on `dev` (made current) with the two-kernel model's `scale`
/// and a non-blocking stream.
fn on(dev: i32) -> (CUcontext, CUfunction, CUstream) {
    let mut ctx = null_mut();
    assert_eq!(unsafe { cuCtxCreate_v2(&mut ctx, 0, dev) }, OK);
    let src = std::fs::read_to_string(MODEL).unwrap();
    let inj = reef_trap::ptx::inject(&src, MODEL, &Default::default()).unwrap();
    let image = CString::new(inj.ptx).unwrap();
    let mut m = null_mut();
    assert_eq!(
        unsafe { cuModuleLoadData(&mut m, image.as_ptr() as *const c_void) },
        OK
    );
    let mut f = null_mut();
    assert_eq!(
        unsafe { cuModuleGetFunction(&mut f, m, c"scale".as_ptr()) },
        OK
    );
    let mut s = null_mut();
    assert_eq!(unsafe { cuStreamCreate(&mut s, 1) }, OK);
    (ctx, f, s)
}

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, bytes) }, OK);
    p
}

fn free_mem() -> usize {
    let (mut f, mut t) = (0, 0);
    assert_eq!(unsafe { cuMemGetInfo_v2(&mut f, &mut t) }, OK);
    f
}

fn launch(f: CUfunction, s: CUstream, a: [u64; 3]) -> CUresult {
    let (mut p0, mut p1, mut p2, mut n, mut i) = (a[0], a[1], a[2], 2048u32, 1u32);
    let mut params: [*mut c_void; 5] = [
        &mut p0 as *mut u64 as *mut c_void,
        &mut p1 as *mut u64 as *mut c_void,
        &mut p2 as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut i as *mut u32 as *mut c_void,
    ];
    unsafe { cuLaunchKernel(f, 8, 1, 1, 256, 1, 1, 0, s, params.as_mut_ptr(), null_mut()) }
}

#[test]
fn each_ordinal_is_its_own_gpu_and_contexts_keep_to_their_memory() {
    init();
    let mut n = 0;
    assert_eq!(unsafe { cuDeviceGetCount(&mut n) }, OK);
    assert_eq!(n, 2);
    let mut d = 0;
    assert_eq!(unsafe { cuDeviceGet(&mut d, 1) }, OK);
    assert_eq!(d, 1);
    assert_eq!(
        unsafe { cuDeviceGet(&mut d, 2) },
        CUresult::CUDA_ERROR_INVALID_DEVICE
    );
    let mut ctx = null_mut();
    assert_eq!(
        unsafe { cuCtxCreate_v2(&mut ctx, 0, 2) },
        CUresult::CUDA_ERROR_INVALID_DEVICE
    );
    // Names and attributes are the ordinal's preset.
    let name = |dev| {
        let mut b = [0 as std::ffi::c_char; 128];
        assert_eq!(unsafe { cuDeviceGetName(b.as_mut_ptr(), 128, dev) }, OK);
        unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    assert!(name(0).contains("gv100"), "{}", name(0));
    assert!(name(1).contains("h100"), "{}", name(1));
    let mut v = 0;
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut v, ATTR_CC_MAJOR, 1) },
        OK
    );
    assert_eq!(v, 9);
    let (mut t0, mut t1) = (0, 0);
    assert_eq!(unsafe { cuDeviceTotalMem_v2(&mut t0, 0) }, OK);
    assert_eq!(unsafe { cuDeviceTotalMem_v2(&mut t1, 1) }, OK);
    assert_eq!(t0, 32 << 30, "GV100: 32 GiB");
    assert_eq!(t1, 80 << 30, "H100: 80 GiB");

    // Separate memory: an allocation in device 1's context leaves device
    // 0's free memory as it was.
    let (c0, f0, s0) = on(0);
    let free0 = free_mem();
    let (c1, f1, s1) = on(1);
    let free1 = free_mem();
    let big = alloc(64 << 20);
    assert_eq!(free_mem(), free1 - (64 << 20));
    assert_eq!(cuCtxSetCurrent(c0), OK);
    assert_eq!(free_mem(), free0);

    // Work runs on the device of its context.
    let before = (device_stats(0).unwrap(), device_stats(1).unwrap());
    let (x0, w0, h0) = (alloc(8192), alloc(8192), alloc(8192));
    assert_eq!(launch(f0, s0, [x0, w0, h0]), OK);
    assert_eq!(cuStreamSynchronize(s0), OK);
    assert_eq!(device_stats(0).unwrap().completed, before.0.completed + 1);
    assert_eq!(device_stats(1).unwrap().launches, before.1.launches);

    // A stream of another context (another device): refused at launch.
    assert_eq!(
        launch(f0, s1, [x0, w0, h0]),
        CUresult::CUDA_ERROR_INVALID_CONTEXT
    );
    // Device 1's context runs its own kernels on its own memory...
    assert_eq!(cuCtxSetCurrent(c1), OK);
    let (x1, w1, h1) = (alloc(8192), alloc(8192), alloc(8192));
    assert_eq!(launch(f1, s1, [x1, w1, h1]), OK);
    assert_eq!(cuStreamSynchronize(s1), OK);
    assert_eq!(device_stats(1).unwrap().completed, before.1.completed + 1);
    // ...and faults when given device 0's memory: unmapped in its address
    // space. The fault is sticky for that context only.
    assert_eq!(launch(f1, s1, [x0, w1, h1]), OK);
    assert_eq!(
        cuStreamSynchronize(s1),
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    assert_eq!(cuCtxSetCurrent(c0), OK);
    assert_eq!(launch(f0, s0, [x0, w0, h0]), OK);
    assert_eq!(cuStreamSynchronize(s0), OK);
    // A second context on the same device has its own address space too.
    let (c2, f2, s2) = on(0);
    assert_eq!(launch(f2, s2, [x0, w0, h0]), OK);
    assert_eq!(
        cuStreamSynchronize(s2),
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    // Destroying device 1's context gives its memory back to device 1.
    assert_eq!(cuCtxSetCurrent(c1), OK);
    let _ = big;
    assert_eq!(cuCtxDestroy_v2(c1), OK);
    let mut f = 0;
    let mut t = 0;
    assert_eq!(cuCtxSetCurrent(c0), OK);
    assert_eq!(unsafe { cuMemGetInfo_v2(&mut f, &mut t) }, OK);
    assert_eq!(t, 32 << 30);
    for c in [c0, c2] {
        assert_eq!(cuCtxDestroy_v2(c), OK);
    }
    let mut c = null_mut();
    assert_eq!(unsafe { cuCtxCreate_v2(&mut c, 0, 1) }, OK);
    assert_eq!(free_mem(), 80 << 30, "device 1's memory all free again");
    assert_eq!(cuCtxDestroy_v2(c), OK);
}

#[test]
fn device_lists_name_presets_counts_and_files() {
    use reef_libcuda_sim::driver::device_list;
    let names = |s| {
        device_list(s)
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names("gv100"), ["gv100"]);
    assert_eq!(names("gv100x3"), ["gv100", "gv100", "gv100"]);
    assert_eq!(names("h100, gv100x2"), ["h100", "gv100", "gv100"]);
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/devices/mi50.toml");
    assert_eq!(names(&format!("gv100,{spec}")), ["gv100", "mi50"]);
    for bad in ["", "gv100,", "gv100x0", "a100", "gv100x65"] {
        assert!(device_list(bad).is_err(), "{bad}");
    }
}
