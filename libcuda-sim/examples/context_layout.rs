//! Measures the two context layouts reefd could use on the strict stand-in
//! (issue 26 Build 4; docs/hardware.md "Context layout"): RT latency when
//! an RT request (the two-kernel model's two kernels, 8 blocks each)
//! arrives while a BE stream keeps 4 wide kernels queued (REEF §4.2's
//! device-queue cap) and REEF's preemption sets the BE flag and launches
//! the RT kernels at once:
//! - `one`: one context, the RT stream at the greatest stream priority
//!   (-5), the BE stream at the least (0);
//! - `two`: an RT context and a BE context (the layout before issue 26),
//!   which time-slice.
//!
//! Each round: the BE stream is filled to 4 kernels, a random 0-200 us
//! later the BE flag is set (or, second pair of runs, not: BE is not
//! preempted, as under the `streams` policy) and the RT kernels launched; RT latency is
//! from that launch to the RT stream's synchronisation; then the BE
//! stream drains and its flag is cleared. Also the RT request alone.
//!
//! `cargo run --release -p reef-libcuda-sim --example context_layout [ROUNDS]`

use std::ffi::{c_void, CString};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};
use reef_libcuda_sim::*;

const OK: CUresult = CUresult::CUDA_SUCCESS;
const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/two-kernel/kernels.ptx");
/// BE kernels: 640 blocks of 256 threads, the whole simulated gv100 (80
/// SMs of 2048 threads) for one 40 us wave.
const BE_BLOCKS: u32 = 640;

fn ok(r: CUresult, what: &str) {
    assert_eq!(r, OK, "{what}");
}

struct Side {
    ctx: CUcontext,
    module: CUmodule,
    scale: CUfunction,
    bias: CUfunction,
    bufs: [CUdeviceptr; 4],
}

fn side(ctx: CUcontext) -> Side {
    let src = std::fs::read_to_string(MODEL).unwrap();
    let inj = reef_trap::ptx::inject(&src, MODEL, &Default::default()).unwrap();
    let img = CString::new(inj.ptx).unwrap();
    // SAFETY (all calls here): valid out-pointers and NUL-terminated
    // strings; the context is current.
    unsafe {
        ok(cuCtxSetCurrent(ctx), "set current");
        let mut module = null_mut();
        ok(
            cuModuleLoadData(&mut module, img.as_ptr() as *const c_void),
            "load",
        );
        let (mut scale, mut bias) = (null_mut(), null_mut());
        ok(
            cuModuleGetFunction(&mut scale, module, c"scale".as_ptr()),
            "scale",
        );
        ok(
            cuModuleGetFunction(&mut bias, module, c"bias_relu".as_ptr()),
            "bias_relu",
        );
        let mut bufs = [0; 4];
        for b in &mut bufs {
            ok(cuMemAlloc_v2(b, 8192), "alloc");
        }
        Side {
            ctx,
            module,
            scale,
            bias,
            bufs,
        }
    }
}

fn launch(f: CUfunction, s: CUstream, blocks: u32, a: [u64; 3], idx: u32) {
    let (mut p0, mut p1, mut p2, mut n, mut i) = (a[0], a[1], a[2], 2048u32, idx);
    let mut params: [*mut c_void; 5] = [
        &mut p0 as *mut u64 as *mut c_void,
        &mut p1 as *mut u64 as *mut c_void,
        &mut p2 as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut i as *mut u32 as *mut c_void,
    ];
    // SAFETY: one pointer per parameter, each to its bytes.
    let r = unsafe {
        cuLaunchKernel(
            f,
            blocks,
            1,
            1,
            256,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            null_mut(),
        )
    };
    ok(r, "launch");
}

fn stream(ctx: CUcontext, priority: i32) -> CUstream {
    let mut s = null_mut();
    // SAFETY: valid out-pointer.
    unsafe {
        ok(cuCtxSetCurrent(ctx), "set current");
        ok(cuStreamCreateWithPriority(&mut s, 1, priority), "stream");
    }
    s
}

fn flag(m: CUmodule, on: u32) {
    let (mut p, mut n) = (0, 0);
    // SAFETY: valid pointers; 4 bytes copied from `on`.
    unsafe {
        ok(
            cuModuleGetGlobal_v2(&mut p, &mut n, m, c"reef_preempt_flag".as_ptr()),
            "flag",
        );
        ok(
            cuMemcpyHtoD_v2(p, &on as *const u32 as *const c_void, 4),
            "set flag",
        );
    }
}

fn rt_request(rt: &Side, s: CUstream) -> Duration {
    let t0 = Instant::now();
    ok(cuCtxSetCurrent(rt.ctx), "rt current");
    let b = rt.bufs;
    launch(rt.scale, s, 8, [b[0], b[1], b[2]], 1);
    launch(rt.bias, s, 8, [b[2], b[1], b[3]], 2);
    ok(cuStreamSynchronize(s), "rt sync");
    t0.elapsed()
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "mean {:.0} us, p50 {:.0} us, p99 {:.0} us",
        v.iter().sum::<f64>() / v.len() as f64,
        v[v.len() / 2],
        v[v.len() * 99 / 100]
    )
}

fn measure(layout: &str, preempt: bool, rounds: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c1 = null_mut();
    // SAFETY: valid out-pointer.
    unsafe { ok(cuCtxCreate_v2(&mut c1, 0, 0), "ctx") };
    let c2 = if layout == "two" {
        let mut c = null_mut();
        // SAFETY: valid out-pointer.
        unsafe { ok(cuCtxCreate_v2(&mut c, 0, 0), "ctx") };
        c
    } else {
        c1
    };
    let be = side(c1);
    let rt = if c2 == c1 { side(c1) } else { side(c2) };
    let sb = stream(c1, 0);
    let sr = stream(c2, -5);
    let mut alone = Vec::new();
    for _ in 0..rounds.min(50) {
        alone.push(rt_request(&rt, sr).as_secs_f64() * 1e6);
    }
    let mut co = Vec::new();
    let mut rng = 0x5eedu64;
    for i in 0..rounds {
        ok(cuCtxSetCurrent(be.ctx), "be current");
        let b = be.bufs;
        for k in 0..4 {
            launch(be.scale, sb, BE_BLOCKS, [b[0], b[1], b[2]], 10 + k);
        }
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((rng >> 33) % 200);
        let t = Instant::now();
        while t.elapsed() < delay {
            std::hint::spin_loop();
        }
        if preempt {
            flag(be.module, 1);
        }
        co.push(rt_request(&rt, sr).as_secs_f64() * 1e6);
        ok(cuCtxSetCurrent(be.ctx), "be current");
        ok(cuStreamSynchronize(sb), "be sync");
        flag(be.module, 0);
        if i % 50 == 49 {
            eprint!(".");
        }
    }
    eprintln!();
    ok(cuCtxDestroy_v2(c1), "destroy");
    if c2 != c1 {
        ok(cuCtxDestroy_v2(c2), "destroy");
    }
    (alone, co)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    ok(cuInit(0), "init");
    for (layout, preempt) in [("one", true), ("two", true), ("one", false), ("two", false)] {
        let before = stats_now();
        let (alone, co) = measure(layout, preempt, rounds);
        let after = stats_now();
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        println!(
            "{layout} context{}, BE {}: RT alone {}; RT beside BE ({rounds} rounds) {}; \
             normalised median {:.3}; BE kernels evicted {}, partly run {}, context switches {}",
            if layout == "one" { "" } else { "s" },
            if preempt {
                "flagged (REEF)"
            } else {
                "not preempted"
            },
            stats(alone.clone()),
            stats(co.clone()),
            median(&co) / median(&alone),
            after.evicted - before.evicted,
            after.partial - before.partial,
            after.context_switches - before.context_switches,
        );
    }
}

fn stats_now() -> driver::Stats {
    reef_libcuda_sim::stats().unwrap()
}
