//! The simulated libamdhip64 through its exported HIP calls, on a real
//! gfx906 code object: tests/data/flagged.ll compiled by Debian's llc-19
//! and linked by ld.lld-19 (scripts/setup.d/16-rocm-compile.sh installs
//! them), two kernels that begin with REEF's preempt-flag check.

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::null_mut;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use reef_libhip_sim::*;

const OK: HipError = HIP_SUCCESS;

fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

fn tool(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/lib/llvm-19/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} is missing: run scripts/setup.sh (setup.d/16-rocm-compile.sh installs llvm-19 and lld-19)");
}

/// The test code object, compiled once per process.
fn code_object() -> &'static [u8] {
    static CO: OnceLock<Vec<u8>> = OnceLock::new();
    CO.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/flagged.ll");
        let dir = std::env::temp_dir().join(format!("reef-libhip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (obj, co) = (dir.join("flagged.o"), dir.join("flagged.hsaco"));
        let run = |c: &mut Command| {
            let o = c.output().unwrap();
            assert!(
                o.status.success(),
                "{c:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        run(Command::new(tool("llc-19"))
            .args([
                "-mtriple=amdgcn-amd-amdhsa",
                "-mcpu=gfx906",
                "-filetype=obj",
            ])
            .arg(&src)
            .arg("-o")
            .arg(&obj));
        run(Command::new(tool("ld.lld-19"))
            .arg("-shared")
            .arg(&obj)
            .arg("-o")
            .arg(&co));
        std::fs::read(co).unwrap()
    })
}

use reef_libhip_sim::codeobj::bundle;

fn load(image: &[u8]) -> Result<*mut c_void, HipError> {
    let mut m = null_mut();
    match unsafe { hipModuleLoadData(&mut m, image.as_ptr() as *const c_void) } {
        OK => Ok(m),
        e => Err(e),
    }
}

fn function(m: *mut c_void, name: &CStr) -> Result<*mut c_void, HipError> {
    let mut f = null_mut();
    match unsafe { hipModuleGetFunction(&mut f, m, name.as_ptr()) } {
        OK => Ok(f),
        e => Err(e),
    }
}

fn alloc(n: usize) -> *mut c_void {
    let mut p = null_mut();
    assert_eq!(unsafe { hipMalloc(&mut p, n) }, OK);
    p
}

fn htod(p: *mut c_void, b: &[u8]) -> HipError {
    unsafe { hipMemcpyHtoD(p, b.as_ptr() as *const c_void, b.len()) }
}

fn dtoh(p: *mut c_void, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    assert_eq!(
        unsafe { hipMemcpyDtoH(b.as_mut_ptr() as *mut c_void, p, n) },
        OK
    );
    b
}

fn stream(priority: i32) -> *mut c_void {
    let mut s = null_mut();
    // hipStreamNonBlocking (1): the flag's synchronous write does not wait.
    assert_eq!(
        unsafe { hipStreamCreateWithPriority(&mut s, 1, priority) },
        OK
    );
    s
}

fn launch(
    f: *mut c_void,
    s: *mut c_void,
    blocks: u32,
    threads: u32,
    a: *mut c_void,
    b: *mut c_void,
) -> HipError {
    let (mut pa, mut pb, mut n) = (a as u64, b as u64, blocks * 64);
    let mut params: [*mut c_void; 3] = [
        &mut pa as *mut u64 as *mut c_void,
        &mut pb as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
    ];
    unsafe {
        hipModuleLaunchKernel(
            f,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            null_mut(),
        )
    }
}

/// MI50: 60 CUs of 40 resident 64-thread blocks.
const WAVE: u32 = 60 * 40;

#[test]
fn the_device_is_a_simulated_mi50_that_says_so() {
    let _g = serial();
    assert_eq!(hipInit(0), OK);
    let mut n = 0;
    assert_eq!(unsafe { hipGetDeviceCount(&mut n) }, OK);
    assert_eq!(n, 1);
    let mut p = vec![0u8; prop::SIZE];
    assert_eq!(
        unsafe { hipGetDeviceProperties(p.as_mut_ptr() as *mut c_void, 0) },
        OK
    );
    let cstr = |at: usize| {
        CStr::from_bytes_until_nul(&p[at..at + 256])
            .unwrap()
            .to_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(cstr(prop::GCN_ARCH_NAME), "gfx906:sramecc+:xnack-");
    assert!(
        cstr(prop::NAME).contains("simulated"),
        "{}",
        cstr(prop::NAME)
    );
    let int = |at: usize| i32::from_ne_bytes(p[at..at + 4].try_into().unwrap());
    assert_eq!(int(prop::MULTI_PROCESSOR_COUNT), 60);
    assert_eq!(int(prop::WARP_SIZE), 64);
    assert_eq!(int(prop::GCN_ARCH), 906);
    let mut v = 0;
    assert_eq!(
        unsafe { hipDeviceGetAttribute(&mut v, ATTR_MULTIPROCESSOR_COUNT, 0) },
        OK
    );
    assert_eq!(v, 60);
    assert_eq!(
        unsafe { hipDeviceGetAttribute(&mut v, 9999, 0) },
        HIP_ERROR_NOT_SUPPORTED
    );
    assert_eq!(hipSetDevice(1), HIP_ERROR_INVALID_DEVICE);
    let (mut least, mut greatest) = (7, 7);
    assert_eq!(
        unsafe { hipDeviceGetStreamPriorityRange(&mut least, &mut greatest) },
        OK
    );
    assert_eq!((least, greatest), (1, -1));
    let s = unsafe { CStr::from_ptr(hipGetErrorString(HIP_ERROR_NO_BINARY_FOR_GPU)) };
    assert_eq!(
        s.to_str().unwrap(),
        "no kernel image is available for execution on the device"
    );
    assert_eq!(
        unsafe { CStr::from_ptr(hipGetErrorName(500)) }
            .to_str()
            .unwrap(),
        "hipErrorNotFound"
    );
}

#[test]
fn modules_load_from_the_code_object_or_a_bundle_for_gfx906_only() {
    let _g = serial();
    let co = code_object();
    // A bare code object: kernels and arguments from its metadata note.
    let m = load(co).unwrap();
    let f = function(m, c"k_add").unwrap();
    assert_eq!(function(m, c"k_sub"), Err(500), "hipErrorNotFound");
    let (mut flag, mut size) = (null_mut(), 0usize);
    assert_eq!(
        unsafe { hipModuleGetGlobal(&mut flag, &mut size, m, c"reef_preempt_flag".as_ptr()) },
        OK
    );
    assert_eq!(size, 4);
    assert_eq!(
        unsafe { hipModuleGetGlobal(&mut flag, &mut size, m, c"k_add.kd".as_ptr()) },
        500,
        "kernel descriptors are no globals"
    );
    // Launch bounds: the kernels were built for at most 64 threads.
    let (a, b) = (alloc(4096), alloc(4096));
    let s = stream(0);
    assert_eq!(launch(f, s, 1, 128, a, b), HIP_ERROR_LAUNCH_FAILURE);
    assert_eq!(launch(f, s, 1, 2048, a, b), HIP_ERROR_INVALID_CONFIGURATION);
    assert_eq!(launch(f, s, 16, 64, a, b), OK);
    assert_eq!(hipStreamSynchronize(s), OK);
    assert_eq!(hipModuleUnload(m), OK);
    assert_eq!(function(m, c"k_add"), Err(400), "hipErrorInvalidHandle");

    // A bundle: the gfx906 entry is taken, the host entry read for work.
    let host = b"// reef-sim: kernel=k_add block_ns=5000 reads=0 writes=1\n";
    let ok = bundle(&[
        ("host-x86_64-unknown-linux-gnu", host),
        ("hipv4-amdgcn-amd-amdhsa--gfx906", co),
    ]);
    let m = load(&ok).unwrap();
    function(m, c"k_mul").unwrap();
    // Only a gfx90a code object: hipErrorNoBinaryForGpu.
    let other = bundle(&[
        ("host-x86_64-unknown-linux-gnu", b""),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a", co),
    ]);
    assert_eq!(load(&other), Err(HIP_ERROR_NO_BINARY_FOR_GPU));
    // The gfx906 ELF relabelled as gfx90a (EF_AMDGPU_MACH 0x3f) does not load.
    let mut relabelled = co.to_vec();
    relabelled[48] = 0x3f;
    assert_eq!(load(&relabelled), Err(HIP_ERROR_NO_BINARY_FOR_GPU));
    // Not a code object at all.
    let mut junk = b"\x7fELF\x01".to_vec();
    junk.resize(128, 0);
    assert_eq!(load(&junk), Err(HIP_ERROR_INVALID_IMAGE));
    assert_eq!(
        load(b"PTX is not a code object, sorry.."),
        Err(HIP_ERROR_INVALID_IMAGE)
    );
    assert_eq!(hipFree(a), OK);
    assert_eq!(hipFree(b), OK);
}

/// REEF §4.3 Fig. 8 through the module global: a kernel of two waves
/// flagged while its first wave runs has run exactly that wave, its output
/// differs from an unpreempted run's, a launch while the flag is set runs
/// no block, and running it again with the flag clear repairs it.
#[test]
fn the_preempt_flag_is_read_by_each_block_at_dispatch() {
    let _g = serial();
    // 300 ms blocks: the flag, set 20 ms after the launch, lands inside the
    // first wave even on a loaded machine.
    let host = b"// reef-sim: kernel=k_add block_ns=300000000 reads=0 writes=1\n\
                 // reef-sim: kernel=k_mul block_ns=300000000 reads=0 writes=1\n";
    let img = bundle(&[
        ("host-x86_64-unknown-linux-gnu", host),
        ("hipv4-amdgcn-amd-amdhsa--gfx906", code_object()),
    ]);
    let m = load(&img).unwrap();
    let f = function(m, c"k_add").unwrap();
    let (mut flag, mut size) = (null_mut(), 0usize);
    assert_eq!(
        unsafe { hipModuleGetGlobal(&mut flag, &mut size, m, c"reef_preempt_flag".as_ptr()) },
        OK
    );
    let n = (2 * WAVE * 64 * 4) as usize;
    let a = alloc(n);
    let input: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    assert_eq!(htod(a, &input), OK);
    let s = stream(0);
    let reference = alloc(n);
    assert_eq!(launch(f, s, 2 * WAVE, 64, a, reference), OK);
    assert_eq!(hipStreamSynchronize(s), OK);
    let want = dtoh(reference, n);
    let before = device_stats(0).unwrap();

    let out = alloc(n);
    assert_eq!(launch(f, s, 2 * WAVE, 64, a, out), OK);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(htod(flag, &1u32.to_le_bytes()), OK);
    assert_eq!(hipStreamSynchronize(s), OK);
    let after = device_stats(0).unwrap();
    assert_eq!(after.partial - before.partial, 1, "one kernel ran partly");
    assert_eq!(
        after.blocks_exited - before.blocks_exited,
        WAVE as u64,
        "its second wave exited"
    );
    assert_eq!(
        after.blocks_ran_partial - before.blocks_ran_partial,
        WAVE as u64
    );
    let got = dtoh(out, n);
    assert_ne!(got, want, "a partly-run kernel's output is corrupted");

    // With the flag set, a new launch exits at entry: nothing changes.
    assert_eq!(launch(f, s, 2 * WAVE, 64, a, out), OK);
    assert_eq!(hipStreamSynchronize(s), OK);
    assert_eq!(dtoh(out, n), got);
    assert_eq!(device_stats(0).unwrap().evicted - after.evicted, 1);

    // REEF §4.4: the restore runs it again.
    assert_eq!(htod(flag, &0u32.to_le_bytes()), OK);
    assert_eq!(launch(f, s, 2 * WAVE, 64, a, out), OK);
    // An event recorded after it completes with it.
    let mut e = null_mut();
    assert_eq!(unsafe { hipEventCreateWithFlags(&mut e, 2) }, OK);
    assert_eq!(hipEventRecord(e, s), OK);
    assert_eq!(hipEventQuery(e), HIP_ERROR_NOT_READY);
    assert_eq!(hipEventSynchronize(e), OK);
    assert_eq!(hipEventQuery(e), OK);
    assert_eq!(dtoh(out, n), want);
    assert_eq!(hipEventDestroy(e), OK);
    assert_eq!(hipStreamDestroy(s), OK);
    assert_eq!(hipModuleUnload(m), OK);
}

/// Stream priorities order pending blocks, never running ones: a high
/// priority kernel launched behind a low one's first wave starts when that
/// wave ends, and ends first.
#[test]
fn a_high_priority_streams_pending_blocks_are_dispatched_first() {
    let _g = serial();
    let host = b"// reef-sim: kernel=k_add block_ns=50000000 reads=0 writes=1\n";
    let img = bundle(&[
        ("host-x86_64-unknown-linux-gnu", host),
        ("hipv4-amdgcn-amd-amdhsa--gfx906", code_object()),
    ]);
    let m = load(&img).unwrap();
    let f = function(m, c"k_add").unwrap();
    let n = (3 * WAVE * 64 * 4) as usize;
    let (a, b) = (alloc(n), alloc(n));
    let (lo, hi) = (stream(1), stream(-1));
    let n0 = kernel_intervals(0).len();
    assert_eq!(launch(f, lo, 3 * WAVE, 64, a, b), OK);
    std::thread::sleep(Duration::from_millis(2));
    assert_eq!(launch(f, hi, WAVE, 64, a, b), OK);
    assert_eq!(hipStreamSynchronize(lo), OK);
    assert_eq!(hipStreamSynchronize(hi), OK);
    let iv = kernel_intervals(0);
    let (low, high) = (iv[n0], iv[n0 + 1]);
    let (low, high) = if low.1 <= high.1 {
        (low, high)
    } else {
        (high, low)
    };
    assert!(
        high.1 >= low.1 + 50_000_000,
        "running blocks are not preempted: {low:?} {high:?}"
    );
    assert!(
        high.2 < low.2,
        "the high-priority kernel ends first: {low:?} {high:?}"
    );
    assert_eq!(hipModuleUnload(m), OK);
}

/// A kernel's memory fault ends the process with ROCr's message (crate
/// doc): run in a child process.
#[test]
fn a_memory_fault_aborts_the_process() {
    if std::env::var_os("REEF_LIBHIP_FAULT_CHILD").is_some() {
        let m = load(code_object()).unwrap();
        let f = function(m, c"k_add").unwrap();
        let (a, b) = (alloc(4096), alloc(4096));
        assert_eq!(hipFree(b), OK);
        let s = stream(0);
        // b was freed: the kernel writes memory it does not own.
        assert_eq!(launch(f, s, 1, 64, a, b), OK);
        let r = hipStreamSynchronize(s);
        panic!("the process survived its fault: {r}");
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_memory_fault_aborts_the_process",
            "--nocapture",
        ])
        .env("REEF_LIBHIP_FAULT_CHILD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(6), "SIGABRT: {err}");
    assert!(err.contains("Memory access fault by GPU node-1"), "{err}");
}
