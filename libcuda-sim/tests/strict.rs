//! The stand-in as strict as a GPU (issue 26, DESIGN.md "Stand-ins: never
//! kinder than the hardware"), one test per rule, each against the
//! documented behaviour cited in driver.rs's module doc:
//! - the preempt flag is read by every block: a kernel flagged after k of
//!   its N blocks started has run exactly those k, its outputs are
//!   corrupted, and executing it again repairs them;
//! - kernels of two contexts never overlap (they time-slice);
//! - a high-priority stream's pending blocks are placed first, running
//!   blocks are not preempted;
//! - a fault poisons only its context.
//!
//! Its own test binary: the driver is process-wide, and the tests measure
//! the simulated GPU's kernel intervals, so they run one at a time.

use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::Duration;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/two-kernel/kernels.ptx");
/// gv100 (the default device): 80 SMs of 2048 threads, so 160 blocks of
/// 1024 threads are resident at once: one wave.
const WAVE: u32 = 160;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The two-kernel model with `scale`'s block lasting `block_ns`, injected.
fn image(block_ns: u64) -> CString {
    let src = std::fs::read_to_string(MODEL).unwrap().replace(
        "kernel=scale block_ns=40000",
        &format!("kernel=scale block_ns={block_ns}"),
    );
    let inj = reef_trap::ptx::inject(&src, MODEL, &Default::default()).unwrap();
    CString::new(inj.ptx).unwrap()
}

struct Ctx {
    ctx: CUcontext,
    module: CUmodule,
    scale: CUfunction,
}

/// A context (made current) with the model loaded.
fn context(block_ns: u64) -> Ctx {
    assert_eq!(cuInit(0), OK);
    let mut ctx = null_mut();
    assert_eq!(unsafe { cuCtxCreate_v2(&mut ctx, 0, 0) }, OK);
    let img = image(block_ns);
    let mut module = null_mut();
    assert_eq!(
        unsafe { cuModuleLoadData(&mut module, img.as_ptr() as *const c_void) },
        OK
    );
    let mut scale = null_mut();
    assert_eq!(
        unsafe { cuModuleGetFunction(&mut scale, module, c"scale".as_ptr()) },
        OK
    );
    Ctx { ctx, module, scale }
}

fn stream(priority: i32) -> CUstream {
    let mut s = null_mut();
    assert_eq!(
        unsafe { cuStreamCreateWithPriority(&mut s, 1, priority) },
        OK
    );
    s
}

fn alloc(bytes: usize) -> CUdeviceptr {
    let mut p = 0;
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, bytes) }, OK);
    p
}

fn htod(p: CUdeviceptr, data: &[u8]) -> CUresult {
    unsafe { cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len()) }
}

fn dtoh(p: CUdeviceptr, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    assert_eq!(
        unsafe { cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, p, n) },
        OK
    );
    v
}

fn global(m: CUmodule, name: &std::ffi::CStr) -> CUdeviceptr {
    let (mut p, mut n) = (0, 0);
    assert_eq!(
        unsafe { cuModuleGetGlobal_v2(&mut p, &mut n, m, name.as_ptr()) },
        OK
    );
    p
}

/// `scale(x, w, h, 2048, idx)` on `blocks` blocks of 1024 threads.
fn launch(f: CUfunction, s: CUstream, blocks: u32, a: [u64; 3], idx: u32) -> CUresult {
    let (mut p0, mut p1, mut p2, mut n, mut i) = (a[0], a[1], a[2], 2048u32, idx);
    let mut params: [*mut c_void; 5] = [
        &mut p0 as *mut u64 as *mut c_void,
        &mut p1 as *mut u64 as *mut c_void,
        &mut p2 as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut i as *mut u32 as *mut c_void,
    ];
    // SAFETY: one pointer per parameter of `scale`, each to its bytes.
    unsafe {
        cuLaunchKernel(
            f,
            blocks,
            1,
            1,
            1024,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}

/// Inputs x and w with distinct bytes.
fn inputs() -> (CUdeviceptr, CUdeviceptr) {
    let (x, w) = (alloc(8192), alloc(8192));
    let bx: Vec<u8> = (0..8192).map(|i| (i % 251) as u8).collect();
    let bw: Vec<u8> = (0..8192).map(|i| (i % 13) as u8).collect();
    assert_eq!(htod(x, &bx), OK);
    assert_eq!(htod(w, &bw), OK);
    (x, w)
}

/// Blocks exited at the flag check and blocks run by partly-run kernels so
/// far, on device 0.
fn partial_blocks() -> (u64, u64, u64) {
    let s = device_stats(0).unwrap();
    (s.partial, s.blocks_exited, s.blocks_ran_partial)
}

/// REEF §4.3 Fig. 8: the check runs at the entry of every block. A kernel
/// of two waves flagged while its first wave runs has run exactly that
/// wave: the second wave's blocks exit at entry; the first block stored
/// the kernel's execution index; its output is partly written, so it
/// differs from a complete run's; executing the kernel again repairs it.
#[test]
fn a_kernel_flagged_after_k_blocks_ran_exactly_k_and_is_corrupted_until_rerun() {
    let _g = serial();
    // 300 ms blocks: the flag, set 20 ms after the launch, lands inside the
    // first wave even on a loaded machine.
    let c = context(300_000_000);
    let s = stream(0);
    let (x, w) = inputs();
    let flag = global(c.module, c"reef_preempt_flag");
    let index = global(c.module, c"reef_exec_index");
    // The reference: an unpreempted run.
    let reference = alloc(8192);
    assert_eq!(launch(c.scale, s, 2 * WAVE, [x, w, reference], 1), OK);
    assert_eq!(cuStreamSynchronize(s), OK);
    let want = dtoh(reference, 8192);
    let before = partial_blocks();

    let h = alloc(8192);
    assert_eq!(launch(c.scale, s, 2 * WAVE, [x, w, h], 2), OK);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(htod(flag, &1u32.to_le_bytes()), OK);
    assert_eq!(cuStreamSynchronize(s), OK);
    let after = partial_blocks();
    assert_eq!(after.0 - before.0, 1, "one kernel ran partly");
    assert_eq!(after.1 - before.1, WAVE as u64, "its second wave exited");
    assert_eq!(
        after.2 - before.2,
        WAVE as u64,
        "exactly its first wave ran"
    );
    // Fig. 8 line 3: the blocks that passed stored its execution index.
    assert_eq!(dtoh(index, 4), 2u32.to_le_bytes());
    let got = dtoh(h, 8192);
    assert_ne!(got, want, "a partly-run kernel's output is corrupted");
    assert_ne!(got, vec![0u8; 8192], "its first wave wrote");

    // With the flag still set, a new launch exits at entry: nothing runs.
    assert_eq!(launch(c.scale, s, 2 * WAVE, [x, w, h], 3), OK);
    assert_eq!(cuStreamSynchronize(s), OK);
    assert_eq!(dtoh(h, 8192), got);
    assert_eq!(dtoh(index, 4), 2u32.to_le_bytes());

    // REEF §4.4: restore re-executes the interrupted kernel.
    assert_eq!(htod(flag, &0u32.to_le_bytes()), OK);
    assert_eq!(launch(c.scale, s, 2 * WAVE, [x, w, h], 4), OK);
    assert_eq!(cuStreamSynchronize(s), OK);
    assert_eq!(dtoh(h, 8192), want);
    assert_eq!(partial_blocks(), after);
    assert_eq!(cuCtxDestroy_v2(c.ctx), OK);
}

/// Whether two intervals [a0, a1) and [b0, b1) overlap.
fn overlap(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Kernels of different contexts never run at once (CUDA C Programming
/// Guide, "Concurrent Kernel Execution"): two contexts that both keep the
/// GPU busy take turns, and a context with a long queue yields at the end
/// of its time slice (open driver default, 1024 us) to the other.
#[test]
fn kernels_of_two_contexts_never_overlap() {
    let _g = serial();
    // 200 us blocks, one wave each: 200 us kernels.
    let a = context(200_000);
    let sa = stream(0);
    let (xa, wa) = inputs();
    let ha = alloc(8192);
    let b = context(200_000);
    let sb = stream(0);
    let (xb, wb) = inputs();
    let hb = alloc(8192);
    let switches = device_stats(0).unwrap().context_switches;
    assert_eq!(cuCtxSetCurrent(a.ctx), OK);
    // A queues 50 kernels (10 ms, about ten time slices)...
    for i in 0..50 {
        assert_eq!(launch(a.scale, sa, WAVE, [xa, wa, ha], 10 + i), OK);
    }
    // ...B 10 kernels just after.
    assert_eq!(cuCtxSetCurrent(b.ctx), OK);
    for i in 0..10 {
        assert_eq!(launch(b.scale, sb, WAVE, [xb, wb, hb], 10 + i), OK);
    }
    assert_eq!(cuStreamSynchronize(sb), OK);
    assert_eq!(cuCtxSetCurrent(a.ctx), OK);
    assert_eq!(cuStreamSynchronize(sa), OK);
    let iv = kernel_intervals(0);
    let of = |c: CUcontext| -> Vec<(u64, u64)> {
        iv.iter()
            .filter(|i| i.0 == c as u64)
            .map(|i| (i.1, i.2))
            .collect()
    };
    let (ia, ib) = (of(a.ctx), of(b.ctx));
    assert_eq!((ia.len(), ib.len()), (50, 10));
    for x in &ia {
        for y in &ib {
            assert!(!overlap(*x, *y), "context A's {x:?} overlaps B's {y:?}");
        }
    }
    // B did not wait for all of A: A's slice ended first.
    let a_last = ia.iter().map(|i| i.1).max().unwrap();
    let b_first = ib.iter().map(|i| i.0).min().unwrap();
    let a_first = ia.iter().map(|i| i.0).min().unwrap();
    assert!(b_first < a_last, "B ran only after A's whole queue");
    assert!(
        b_first >= a_first + TIMESLICE_NS_FOR_TEST,
        "B started {} ns after A, inside A's time slice",
        b_first - a_first
    );
    assert!(device_stats(0).unwrap().context_switches >= switches + 3);
    assert_eq!(cuCtxDestroy_v2(a.ctx), OK);
    assert_eq!(cuCtxDestroy_v2(b.ctx), OK);
}

const TIMESLICE_NS_FOR_TEST: u64 = reef_libcuda_sim::driver::TIMESLICE_NS;

/// Driver API reference, cuStreamCreateWithPriority: priorities "provide a
/// hint to preferentially run work with higher priority when possible, but
/// do not preempt already-running work". A three-wave kernel on a
/// low-priority stream holds the GPU; a one-wave kernel on a high-priority
/// stream launched after it gets the SMs as the first wave ends, before
/// the low kernel's pending blocks; with equal priorities it waits for
/// them.
#[test]
fn a_high_priority_streams_pending_blocks_are_dispatched_first() {
    let _g = serial();
    let c = context(50_000_000);
    let (mut least, mut greatest) = (7, 7);
    assert_eq!(
        unsafe { cuCtxGetStreamPriorityRange(&mut least, &mut greatest) },
        OK
    );
    assert_eq!((least, greatest), (0, -5));
    let (x, w) = inputs();
    let h = alloc(8192);
    let mut ends = Vec::new();
    for high in [-5, 0, -99] {
        let lo = stream(0);
        let hi = stream(high);
        let n0 = kernel_intervals(0).len();
        assert_eq!(launch(c.scale, lo, 3 * WAVE, [x, w, h], 1), OK);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(launch(c.scale, hi, WAVE, [x, w, h], 2), OK);
        assert_eq!(cuStreamSynchronize(lo), OK);
        assert_eq!(cuStreamSynchronize(hi), OK);
        let iv = kernel_intervals(0);
        let (low, high_k) = (iv[n0], iv[n0 + 1]);
        let (low, high_k) = if low.1 <= high_k.1 {
            (low, high_k)
        } else {
            (high_k, low)
        };
        // Running blocks are not preempted: the high kernel starts when
        // the low kernel's first wave ends.
        assert!(high_k.1 >= low.1 + 50_000_000, "{low:?} {high_k:?}");
        ends.push((low.2, high_k.2));
    }
    let (low, high) = ends[0];
    assert!(high < low, "priority -5: the high kernel ends first");
    let (low, high) = ends[1];
    assert!(high >= low, "equal priorities: launch order");
    // Outside the range: clamped to the greatest priority.
    let (low, high) = ends[2];
    assert!(high < low, "priority -99 is clamped to -5");
    assert_eq!(cuCtxDestroy_v2(c.ctx), OK);
}

/// A fault is sticky for its context, which then refuses every call with
/// it; another context goes on, and a new context works.
#[test]
fn a_fault_poisons_only_its_context() {
    let _g = serial();
    let a = context(1_000_000);
    let sa = stream(0);
    let (xa, wa) = inputs();
    let ha = alloc(8192);
    let b = context(1_000_000);
    let sb = stream(0);
    let (xb, wb) = inputs();
    let hb = alloc(8192);
    let faults = device_stats(0).unwrap().faults;
    // The second launch of `scale` from now faults: A's.
    assert_eq!(cuCtxSetCurrent(b.ctx), OK);
    assert_eq!(launch(b.scale, sb, WAVE, [xb, wb, hb], 1), OK);
    assert_eq!(
        unsafe { reef_libcuda_sim_inject_fault(c"scale".as_ptr(), 2) },
        OK
    );
    assert_eq!(cuCtxSetCurrent(a.ctx), OK);
    assert_eq!(launch(a.scale, sa, WAVE, [xa, wa, ha], 1), OK);
    assert_eq!(launch(a.scale, sa, WAVE, [xa, wa, ha], 2), OK);
    let bad = CUresult::CUDA_ERROR_ILLEGAL_ADDRESS;
    assert_eq!(cuStreamSynchronize(sa), bad);
    assert_eq!(device_stats(0).unwrap().faults, faults + 1);
    // Every later call on A returns the error.
    assert_eq!(launch(a.scale, sa, WAVE, [xa, wa, ha], 3), bad);
    let mut p = 0;
    assert_eq!(unsafe { cuMemAlloc_v2(&mut p, 64) }, bad);
    let mut s = null_mut();
    assert_eq!(unsafe { cuStreamCreate(&mut s, 1) }, bad);
    assert_eq!(htod(ha, &[1, 2, 3]), bad);
    let mut v = [0u8; 4];
    assert_eq!(
        unsafe { cuMemcpyDtoH_v2(v.as_mut_ptr() as *mut c_void, ha, 4) },
        bad
    );
    assert_eq!(cuMemFree_v2(ha), bad);
    // B goes on.
    assert_eq!(cuCtxSetCurrent(b.ctx), OK);
    assert_eq!(cuStreamSynchronize(sb), OK);
    assert_eq!(launch(b.scale, sb, WAVE, [xb, wb, hb], 2), OK);
    assert_eq!(cuStreamSynchronize(sb), OK);
    assert_eq!(dtoh(hb, 4).len(), 4);
    // Only destroying A is left; a new context works.
    assert_eq!(cuCtxDestroy_v2(a.ctx), OK);
    let c = context(1_000_000);
    let sc = stream(0);
    let (x, w) = inputs();
    let h = alloc(8192);
    assert_eq!(launch(c.scale, sc, WAVE, [x, w, h], 1), OK);
    assert_eq!(cuStreamSynchronize(sc), OK);
    assert_eq!(cuCtxDestroy_v2(b.ctx), OK);
    assert_eq!(cuCtxDestroy_v2(c.ctx), OK);
}
