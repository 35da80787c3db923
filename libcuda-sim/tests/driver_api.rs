//! The simulated libcuda called through its exported C functions (the same
//! symbols cudarc resolves), in-process through the rlib: each driver check
//! the crate documents returns the driver's code, and the two-kernel model
//! computes deterministic outputs that a set preempt flag prevents.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;

use cudarc::driver::sys::{
    CUcontext, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream,
};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/two-kernel/kernels.ptx");

fn injected() -> CString {
    let src = std::fs::read_to_string(MODEL).unwrap();
    let inj = reef_trap::ptx::inject(&src, MODEL, &Default::default()).unwrap();
    CString::new(inj.ptx).unwrap()
}

struct Setup {
    ctx: CUcontext,
    module: CUmodule,
    scale: CUfunction,
    stream: CUstream,
}

fn setup() -> Setup {
    assert_eq!(cuInit(0), OK);
    let mut ctx = null_mut();
    assert_eq!(unsafe { cuCtxCreate_v2(&mut ctx, 0, 0) }, OK);
    let mut module = null_mut();
    let image = injected();
    assert_eq!(
        unsafe { cuModuleLoadData(&mut module, image.as_ptr() as *const c_void) },
        OK
    );
    let mut scale = null_mut();
    assert_eq!(
        unsafe { cuModuleGetFunction(&mut scale, module, c"scale".as_ptr()) },
        OK
    );
    let mut stream = null_mut();
    assert_eq!(unsafe { cuStreamCreate(&mut stream, 1) }, OK);
    Setup {
        ctx,
        module,
        scale,
        stream,
    }
}

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, bytes) }, OK);
    p
}

fn htod(p: CUdeviceptr, data: &[u8]) -> CUresult {
    unsafe { cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len()) }
}

fn dtoh(p: CUdeviceptr, n: usize) -> (CUresult, Vec<u8>) {
    let mut v = vec![0u8; n];
    let r = unsafe { cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, p, n) };
    (r, v)
}

/// Launches `f(a, b, c, n, exec_idx)` with the given shape.
fn launch(
    f: CUfunction,
    s: CUstream,
    grid: [u32; 3],
    block: [u32; 3],
    a: [u64; 3],
    idx: u32,
) -> CUresult {
    let (mut p0, mut p1, mut p2, mut n, mut i) = (a[0], a[1], a[2], 2048u32, idx);
    let mut params: [*mut c_void; 5] = [
        &mut p0 as *mut u64 as *mut c_void,
        &mut p1 as *mut u64 as *mut c_void,
        &mut p2 as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut i as *mut u32 as *mut c_void,
    ];
    unsafe {
        cuLaunchKernel(
            f,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            0,
            s,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}

fn global(m: CUmodule, name: &std::ffi::CStr) -> CUdeviceptr {
    let (mut p, mut n) = (0, 0);
    assert_eq!(
        unsafe { cuModuleGetGlobal_v2(&mut p, &mut n, m, name.as_ptr()) },
        OK
    );
    assert_eq!(n, 4);
    p
}

fn sync(s: CUstream) -> CUresult {
    let mut e: CUevent = null_mut();
    assert_eq!(unsafe { cuEventCreate(&mut e, 0) }, OK);
    assert_eq!(cuEventRecord(e, s), OK);
    let r = cuEventSynchronize(e);
    // After a fault every call on the context returns its sticky error.
    assert_eq!(cuEventDestroy_v2(e), r);
    r
}

const G: [u32; 3] = [8, 1, 1];
const B: [u32; 3] = [256, 1, 1];

#[test]
fn outputs_are_a_deterministic_function_of_the_inputs() {
    let t = setup();
    let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
    assert_eq!(htod(x, &[1u8; 8192]), OK);
    assert_eq!(htod(w, &[2u8; 8192]), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 7), OK);
    // Not done yet: 40 us per block of simulated work, paced by the clock.
    let mut e: CUevent = null_mut();
    assert_eq!(unsafe { cuEventCreate(&mut e, 0) }, OK);
    assert_eq!(cuEventRecord(e, t.stream), OK);
    assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_NOT_READY);
    assert_eq!(cuEventSynchronize(e), OK);
    assert_eq!(cuEventQuery(e), OK);
    let (r, first) = dtoh(h, 8192);
    assert_eq!(r, OK);
    assert_ne!(first, vec![0u8; 8192], "the kernel wrote its output");
    // The injected entry stored the execution index (REEF Fig. 8 line 3).
    let idx = global(t.module, c"reef_exec_index");
    assert_eq!(dtoh(idx, 4).1, 7u32.to_le_bytes());
    // Same inputs, same outputs; another input, other outputs.
    assert_eq!(htod(h, &[0u8; 8192]), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 8), OK);
    assert_eq!(cuStreamSynchronize(t.stream), OK);
    assert_eq!(
        dtoh(h, 8192).1,
        first,
        "the execution index is not an input"
    );
    assert_eq!(htod(x, &[3u8; 8192]), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 9), OK);
    assert_eq!(sync(t.stream), OK);
    assert_ne!(dtoh(h, 8192).1, first);
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn a_set_preempt_flag_evicts_kernels_at_entry() {
    let t = setup();
    let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
    let flag = global(t.module, c"reef_preempt_flag");
    let idx = global(t.module, c"reef_exec_index");
    assert_eq!(htod(flag, &1u32.to_le_bytes()), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 41), OK);
    assert_eq!(sync(t.stream), OK);
    assert_eq!(
        dtoh(h, 8192).1,
        vec![0u8; 8192],
        "evicted: no output written"
    );
    assert_eq!(dtoh(idx, 4).1, [0; 4], "evicted: the index was not stored");
    assert_eq!(htod(flag, &0u32.to_le_bytes()), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 42), OK);
    assert_eq!(sync(t.stream), OK);
    assert_ne!(dtoh(h, 8192).1, vec![0u8; 8192]);
    assert_eq!(dtoh(idx, 4).1, 42u32.to_le_bytes());
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn a_flag_evicts_only_the_kernels_of_its_own_module() {
    // Two instances of the model in one context (reefd loads one per
    // stream), each on its own stream: setting the first's flag evicts its
    // kernel and not the second's, as a GPU (each kernel reads its own
    // module's global) would.
    let t = setup();
    let mut m2 = null_mut();
    let image = injected();
    assert_eq!(
        unsafe { cuModuleLoadData(&mut m2, image.as_ptr() as *const c_void) },
        OK
    );
    let mut scale2 = null_mut();
    assert_eq!(
        unsafe { cuModuleGetFunction(&mut scale2, m2, c"scale".as_ptr()) },
        OK
    );
    let mut s2 = null_mut();
    assert_eq!(unsafe { cuStreamCreate(&mut s2, 1) }, OK);
    let (x, w) = (alloc(8192), alloc(8192));
    let (h1, h2) = (alloc(8192), alloc(8192));
    assert_eq!(htod(x, &[5u8; 8192]), OK);
    let flag1 = global(t.module, c"reef_preempt_flag");
    // Both streams have run their module once, flags clear.
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h1], 1), OK);
    assert_eq!(launch(scale2, s2, G, B, [x, w, h2], 1), OK);
    assert_eq!(sync(t.stream), OK);
    assert_eq!(sync(s2), OK);
    let zero = vec![0u8; 8192];
    let h = alloc(8192);
    let h_other = alloc(8192);
    assert_eq!(htod(flag1, &1u32.to_le_bytes()), OK);
    assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 2), OK);
    assert_eq!(launch(scale2, s2, G, B, [x, w, h_other], 2), OK);
    assert_eq!(sync(t.stream), OK);
    assert_eq!(sync(s2), OK);
    assert_eq!(dtoh(h, 8192).1, zero, "module 1's kernel evicted");
    assert_ne!(dtoh(h_other, 8192).1, zero, "module 2's kernel ran");
    assert_eq!(
        dtoh(global(m2, c"reef_exec_index"), 4).1,
        2u32.to_le_bytes()
    );
    // A new stream of the context is not preempted by module 1's flag
    // until it launches one of module 1's kernels.
    let mut s3 = null_mut();
    assert_eq!(unsafe { cuStreamCreate(&mut s3, 1) }, OK);
    let h3 = alloc(8192);
    assert_eq!(launch(scale2, s3, G, B, [x, w, h3], 3), OK);
    assert_eq!(sync(s3), OK);
    assert_ne!(dtoh(h3, 8192).1, zero);
    assert_eq!(cuModuleUnload(t.module), OK);
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn out_of_range_launches_are_refused() {
    let t = setup();
    let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
    let bad = CUresult::CUDA_ERROR_INVALID_VALUE;
    assert_eq!(
        launch(t.scale, t.stream, G, [1025, 1, 1], [x, w, h], 0),
        bad
    );
    assert_eq!(
        launch(t.scale, t.stream, G, [32, 32, 2], [x, w, h], 0),
        bad,
        "2048 threads"
    );
    assert_eq!(launch(t.scale, t.stream, G, [1, 1, 65], [x, w, h], 0), bad);
    assert_eq!(launch(t.scale, t.stream, [0, 1, 1], B, [x, w, h], 0), bad);
    assert_eq!(
        launch(t.scale, t.stream, [1, 65536, 1], B, [x, w, h], 0),
        bad
    );
    assert_eq!(
        launch(t.scale, t.stream, [1u32 << 31, 1, 1], B, [x, w, h], 0),
        bad
    );
    // Missing kernelParams for a kernel with parameters.
    let r = unsafe {
        cuLaunchKernel(
            t.scale,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            t.stream,
            null_mut(),
            null_mut(),
        )
    };
    assert_eq!(r, bad);
    // Too much dynamic shared memory without the opt-in.
    let r = unsafe {
        cuLaunchKernel(
            t.scale,
            1,
            1,
            1,
            32,
            1,
            1,
            49153,
            t.stream,
            null_mut(),
            null_mut(),
        )
    };
    assert_eq!(r, bad);
    // The largest legal shape is accepted.
    assert_eq!(
        launch(t.scale, t.stream, [1, 1, 1], [1024, 1, 1], [x, w, h], 0),
        OK
    );
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn bad_handles_and_unloaded_modules() {
    let t = setup();
    let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
    let bogus = 0x1234 as CUfunction;
    assert_eq!(
        launch(bogus, t.stream, G, B, [x, w, h], 0),
        CUresult::CUDA_ERROR_INVALID_HANDLE
    );
    // A stream handle passed as a function: wrong kind.
    assert_eq!(
        launch(t.stream as CUfunction, t.stream, G, B, [x, w, h], 0),
        CUresult::CUDA_ERROR_INVALID_HANDLE
    );
    let mut f = null_mut();
    assert_eq!(
        unsafe { cuModuleGetFunction(&mut f, t.module, c"nope".as_ptr()) },
        CUresult::CUDA_ERROR_NOT_FOUND
    );
    assert_eq!(cuModuleUnload(t.module), OK);
    assert_eq!(
        launch(t.scale, t.stream, G, B, [x, w, h], 0),
        CUresult::CUDA_ERROR_INVALID_HANDLE
    );
    assert_eq!(
        cuModuleUnload(t.module),
        CUresult::CUDA_ERROR_INVALID_HANDLE
    );
    let mut e = null_mut();
    assert_eq!(unsafe { cuEventCreate(&mut e, 0) }, OK);
    assert_eq!(cuEventDestroy_v2(e), OK);
    assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_INVALID_HANDLE);
    let mut m = null_mut();
    assert_eq!(
        unsafe { cuModuleLoadData(&mut m, c"not ptx".as_ptr() as *const c_void) },
        CUresult::CUDA_ERROR_INVALID_PTX
    );
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
    assert_eq!(cuCtxDestroy_v2(t.ctx), CUresult::CUDA_ERROR_INVALID_CONTEXT);
    // No current context any more.
    let mut p = 0;
    assert_eq!(
        unsafe { cuMemAlloc_v2(&mut p, 16) },
        CUresult::CUDA_ERROR_INVALID_CONTEXT
    );
}

#[test]
fn copies_past_an_allocation_and_use_after_free() {
    let t = setup();
    let p = alloc(100);
    assert_eq!(htod(p, &[1; 100]), OK);
    assert_eq!(htod(p + 50, &[1; 51]), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(dtoh(p + 99, 2).0, CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(dtoh(p + 99, 1).0, OK);
    assert_eq!(cuMemFree_v2(p), OK);
    assert_eq!(htod(p, &[1; 4]), CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(dtoh(p, 4).0, CUresult::CUDA_ERROR_INVALID_VALUE);
    assert_eq!(cuMemFree_v2(p), CUresult::CUDA_ERROR_INVALID_VALUE);
    // Module globals are not the caller's to free.
    assert_eq!(
        cuMemFree_v2(global(t.module, c"reef_preempt_flag")),
        CUresult::CUDA_ERROR_INVALID_VALUE
    );
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn memory_beyond_the_preset_is_refused() {
    let t = setup();
    let (mut free, mut total) = (0, 0);
    assert_eq!(unsafe { cuMemGetInfo_v2(&mut free, &mut total) }, OK);
    // gv100 preset: 32 GiB (sim/devices/gv100.toml).
    assert_eq!(total, 32 << 30);
    let mut p = 0;
    assert_eq!(
        unsafe { cuMemAlloc_v2(&mut p, total + 1) },
        CUresult::CUDA_ERROR_OUT_OF_MEMORY
    );
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
}

#[test]
fn error_strings() {
    let mut s = std::ptr::null();
    assert_eq!(
        unsafe { cuGetErrorName(CUresult::CUDA_ERROR_INVALID_HANDLE, &mut s) },
        OK
    );
    assert_eq!(
        unsafe { std::ffi::CStr::from_ptr(s) }.to_str().unwrap(),
        "CUDA_ERROR_INVALID_HANDLE"
    );
    assert_eq!(
        unsafe { cuGetErrorString(CUresult::CUDA_ERROR_OUT_OF_MEMORY, &mut s) },
        OK
    );
    assert_eq!(
        unsafe { std::ffi::CStr::from_ptr(s) }.to_str().unwrap(),
        "out of memory"
    );
}

#[test]
fn a_kernel_on_freed_memory_faults_its_context_only() {
    // The simulated GPU is paced by the wall clock: the kernel must still be
    // queued when its memory is freed. 64 kernels ahead of it on the stream
    // keep it queued for a while; a test thread descheduled for longer than
    // that (a loaded machine) sees it finish first, which is correct and
    // not what is tested: then the round is repeated in a fresh context.
    let mut faulted = None;
    for _ in 0..20 {
        let t = setup();
        let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
        for i in 0..64 {
            assert_eq!(launch(t.scale, t.stream, G, B, [x, w, x], 10 + i), OK);
        }
        assert_eq!(launch(t.scale, t.stream, G, B, [x, w, h], 1), OK);
        // Freed while the kernel is queued: the kernel touches freed memory.
        assert_eq!(cuMemFree_v2(h), OK);
        match sync(t.stream) {
            OK => {
                assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
            }
            r => {
                assert_eq!(r, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
                faulted = Some((t, x, w));
                break;
            }
        }
    }
    let (t, x, w) = faulted.expect("in 20 rounds the kernel was never still queued at the free");
    // Sticky for the context...
    assert_eq!(
        launch(t.scale, t.stream, G, B, [x, w, x], 2),
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    assert_eq!(
        cuStreamSynchronize(t.stream),
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
    );
    assert_eq!(cuCtxDestroy_v2(t.ctx), OK);
    // ...but not for a new one.
    let u = setup();
    let (x, w, h) = (alloc(8192), alloc(8192), alloc(8192));
    assert_eq!(launch(u.scale, u.stream, G, B, [x, w, h], 1), OK);
    assert_eq!(sync(u.stream), OK);
    assert_eq!(cuCtxDestroy_v2(u.ctx), OK);
}

/// The compute capability of the preset (reefd picks a compiled model's
/// PTX by it); any other attribute is refused, never answered with a
/// made-up value.
#[test]
fn compute_capability_is_the_presets() {
    assert_eq!(cuInit(0), OK);
    let (mut major, mut minor) = (-1, -1);
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut major, ATTR_CC_MAJOR, 0) },
        OK
    );
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut minor, ATTR_CC_MINOR, 0) },
        OK
    );
    // The tests run on the default preset, gv100: Volta, 7.0.
    assert_eq!((major, minor), (7, 0));
    assert_eq!(compute_capability("h100"), Some((9, 0)));
    assert_eq!(compute_capability("mi50"), None);
    let mut v = 0;
    // The SM figures placement reads are the preset's: GV100, 80 SMs.
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut v, ATTR_SM_COUNT, 0) },
        OK
    );
    assert_eq!(v, 80);
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut v, ATTR_WARP_SIZE, 0) },
        OK
    );
    assert_eq!(v, 32);
    // CU_DEVICE_ATTRIBUTE_CLOCK_RATE (13): not implemented.
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut v, 13, 0) },
        CUresult::CUDA_ERROR_NOT_SUPPORTED
    );
    assert_eq!(
        unsafe { cuDeviceGetAttribute(&mut v, ATTR_CC_MAJOR, 1) },
        CUresult::CUDA_ERROR_INVALID_DEVICE
    );
}

/// Recorded work gives block durations a GPU could have: a block never
/// gets faster as more blocks share its SM; a memory-bound kernel at full
/// occupancy moves its bytes at the preset's DRAM bandwidth and never
/// faster at any occupancy; a compute-bound one never beats the preset's
/// FP32 peak; more work, longer blocks; more registers per thread, fewer
/// co-resident blocks.
#[test]
fn recorded_work_gives_the_cost_models_durations() {
    use reef_libcuda_sim::driver::block_curve;
    use reef_libcuda_sim::ptx::Work;
    let spec = reef_sim::DeviceSpec::preset("h100").unwrap();
    let work = |flops, regs| Work {
        flops: Some(flops),
        bytes: 12160,
        regs_per_thread: regs,
        ..Default::default()
    };
    // The compiled tiny model's convolution: 8 blocks of 128 threads,
    // 6912 B of static shared memory, 66 registers (sm_90).
    let (regs, c) = block_curve(&work(1_081_344, 66), 8, 128, 6912, &spec).unwrap();
    // 66 x 32 = 2112 registers per warp, allocated in units of 256: 2304.
    assert_eq!(regs, 4 * 2304);
    assert!(c.windows(2).all(|w| w[0] <= w[1]), "{c:?}");
    // A streaming kernel: 4 waves of full-occupancy blocks of 256 threads
    // on every SM, 1 flop per 64 bytes, 256 KiB per block.
    let sms = spec.compute_units as u64;
    let per_sm = (spec.max_threads_per_cu / 256) as u64;
    let blocks = 4 * sms * per_sm;
    let bytes_per_block = 256u64 << 10;
    let streaming = Work {
        flops: Some(blocks * bytes_per_block / 64),
        bytes: blocks * bytes_per_block,
        regs_per_thread: 32,
        ..Default::default()
    };
    let (_, m) = block_curve(&streaming, blocks as u32, 256, 0, &spec).unwrap();
    assert_eq!(m.len() as u64, per_sm, "occupancy: {m:?}");
    assert!(m.windows(2).all(|w| w[0] <= w[1]), "{m:?}");
    let bw = spec.memory_bandwidth_bytes_per_s as f64;
    // Device-wide bytes per second with k blocks on every SM.
    let rate = |k: usize| (k as u64 * sms * bytes_per_block) as f64 / (m[k - 1] as f64 * 1e-9);
    for k in 1..=m.len() {
        assert!(rate(k) <= bw * 1.0001, "k {k}: {} > {bw}", rate(k));
    }
    assert!(rate(m.len()) >= bw * 0.99, "{} vs {bw}", rate(m.len()));
    // Twice the bytes, twice the time (the bandwidth is the bound).
    let twice = Work {
        bytes: 2 * streaming.bytes,
        ..streaming.clone()
    };
    let (_, m2) = block_curve(&twice, blocks as u32, 256, 0, &spec).unwrap();
    let r = m2[m.len() - 1] as f64 / m[m.len() - 1] as f64;
    assert!((r - 2.0).abs() < 0.01, "{r}");
    // A compute-bound kernel never beats the FP32 peak.
    let dense = Work {
        flops: Some(blocks * 1_000_000),
        bytes: 0,
        regs_per_thread: 32,
        ..Default::default()
    };
    let (_, d) = block_curve(&dense, blocks as u32, 256, 0, &spec).unwrap();
    for (i, &t) in d.iter().enumerate() {
        let flops = ((i as u64 + 1) * sms * 1_000_000) as f64 / (t as f64 * 1e-9);
        assert!(
            flops <= spec.fp32_flops as f64 * 1.0001,
            "k {}: {flops}",
            i + 1
        );
    }
    let (_, big) = block_curve(&work(1_000 * 1_081_344, 66), 8, 128, 6912, &spec).unwrap();
    assert!(big[0] > c[0] && big[0] > spec.min_block_ns, "{big:?} {c:?}");
    let (_, fat) = block_curve(&work(1_081_344, 255), 8, 128, 6912, &spec).unwrap();
    assert!(fat.len() < c.len(), "{} vs {}", fat.len(), c.len());
    let stated = Work {
        block_ns: 5000,
        ..Default::default()
    };
    assert!(block_curve(&stated, 8, 128, 0, &spec).is_none());
}
