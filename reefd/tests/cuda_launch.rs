//! The CUDA launch path (reefd/src/backend/cuda_launch.rs) through cudarc's
//! driver API. By default the driver is reef-libcuda-sim (a test device on
//! the simulated GPU, built as this test's dev-dependency); with
//! `REEF_TEST_CUDA=system` the system's libcuda on a GPU host
//! (docs/hardware.md, "The CUDA launch path", says what each test then
//! proves).

mod common;

use std::path::{Path, PathBuf};

use cudarc::driver::sys::CUresult;
use reefd::backend::cuda_launch::{raw, CudaDevice, CudaError, CudaLaunchOptions, StreamClass};

fn open() -> CudaDevice {
    CudaDevice::open(&CudaLaunchOptions {
        index: 0,
        library: common::cuda_library(),
        queue_cap: 4,
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../libcuda-sim/models/two-kernel")
}

fn input(i: u32) -> Vec<u8> {
    (0..2048u32)
        .flat_map(|j| ((i * 2048 + j) as f32 / 1000.0).to_le_bytes())
        .collect()
}

/// Runs until every request is done; returns (task, output) in completion order.
fn drain(d: &mut CudaDevice) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while d.busy() {
        for c in d.poll() {
            out.push((c.task, c.output));
        }
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    out.extend(d.take_parked().into_iter().map(|c| (c.task, c.output)));
    out
}

#[test]
fn levels_are_probed_and_reported() {
    let _serial = common::cuda_serial();
    let d = open();
    let l = d.levels();
    assert_eq!(l.numbers(), vec![1, 2], "{l}");
    assert!(l.to_string().contains("no kill (level 3)"), "{l}");
    if common::cuda_library().is_some() {
        assert!(d.gpu_name().contains("simulated"), "{}", d.gpu_name());
    }
}

#[test]
fn rt_and_be_inferences_with_preemption_match_the_unpreempted_run() {
    let _serial = common::cuda_serial();
    let mut d = open();
    assert_eq!(d.load_model(&model_dir(), None).unwrap(), "two-kernel");
    d.open_stream(1, StreamClass::RealTime).unwrap();
    d.open_stream(2, StreamClass::BestEffort).unwrap();
    // Reference: every input once, unpreempted, on the BE stream.
    let mut expected = Vec::new();
    for i in 0..200 {
        let t = d.submit(2, "two-kernel", input(i)).unwrap();
        let out = drain(&mut d);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, t);
        expected.push(out[0].1.clone());
    }
    assert_ne!(
        expected[0], expected[1],
        "different inputs, different outputs"
    );
    assert_ne!(expected[0], vec![0u8; 8192]);
    // 100 BE requests (inputs 0..100) queued at once; 100 RT requests
    // (inputs 100..200), each preempting the BE stream while its kernels
    // are in the device queue.
    let be: Vec<u64> = (0..100)
        .map(|i| d.submit(2, "two-kernel", input(i)).unwrap())
        .collect();
    let mut got = std::collections::HashMap::new();
    let (mut preemptions, mut evicted, mut ran) = (0, 0, 0);
    for i in 100..200u32 {
        // Let BE work reach the device, and vary how far it got: none, one
        // or both kernels past the flag check when the flag is set.
        for c in d.poll() {
            got.insert(c.task, c.output);
        }
        let t0 = std::time::Instant::now();
        let delay = std::time::Duration::from_micros([0, 0, 20, 40][i as usize % 4]);
        while t0.elapsed() < delay {
            std::hint::spin_loop();
        }
        let p = d.preempt_be().unwrap();
        if p.evicted > 0 {
            preemptions += 1;
            evicted += p.evicted;
        }
        ran += p.ran;
        for c in d.take_parked() {
            got.insert(c.task, c.output);
        }
        let rt = d.submit(1, "two-kernel", input(i)).unwrap();
        let mut rt_out = None;
        while rt_out.is_none() {
            for c in d.poll() {
                if c.task == rt {
                    rt_out = Some(c.output);
                } else {
                    panic!("BE request {} finished while BE was preempted", c.task);
                }
            }
        }
        assert_eq!(rt_out.unwrap(), expected[i as usize], "RT request {i}");
        d.restore_be();
    }
    for (t, o) in drain(&mut d) {
        got.insert(t, o);
    }
    // Timing-dependent: the simulated kernels take 40 and 30 us
    // (kernels.ptx); on a GPU they take microseconds.
    if common::cuda_library().is_some() {
        assert!(
            preemptions >= 50,
            "only {preemptions} preemptions evicted BE kernels"
        );
        assert!(ran > 0, "no preemption found a kernel past the flag check");
    }
    for (i, t) in be.iter().enumerate() {
        assert_eq!(
            got.get(t),
            Some(&expected[i]),
            "BE request {i} (of {evicted} evicted kernels)"
        );
    }
    eprintln!(
        "{preemptions} preemptions evicted {evicted} BE kernels, {ran} had passed the check; \
         200 outputs verified"
    );
}

#[test]
fn a_model_larger_than_the_free_memory_is_refused_with_the_figures() {
    let _serial = common::cuda_serial();
    let mut d = open();
    let dir = tempfile::tempdir().unwrap();
    for f in ["kernels.ptx", "weights.bin"] {
        std::fs::copy(model_dir().join(f), dir.path().join(f)).unwrap();
    }
    let toml = std::fs::read_to_string(model_dir().join("model.toml")).unwrap();
    // The activation h: 1 TiB, more than any GPU (and the gv100 preset's 32 GiB).
    let huge = toml.replacen(
        "name = \"h\"\nbytes = 8192",
        "name = \"h\"\nbytes = 1099511627776",
        1,
    );
    assert_ne!(huge, toml);
    std::fs::write(dir.path().join("model.toml"), huge).unwrap();
    let before = d.memory().unwrap();
    let e = d.load_model(dir.path(), Some("big")).unwrap_err();
    assert!(
        matches!(e, CudaError::DoesNotFit { needed, free, .. } if needed > free),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("needs 2199023321088 B") && msg.contains("nothing was loaded"),
        "{msg}"
    );
    assert_eq!(d.memory().unwrap(), before, "nothing half-loaded");
    assert!(d.models().is_empty());
}

fn driver_code(e: &CudaError) -> CUresult {
    e.code()
        .unwrap_or_else(|| panic!("not a driver error: {e}"))
}

#[test]
fn bad_handle_is_a_typed_error_with_a_message() {
    let _serial = common::cuda_serial();
    if common::cuda_library().is_none() {
        // A made-up handle is undefined behaviour for NVIDIA's driver.
        eprintln!("not run against the system libcuda: a made-up handle proves nothing there");
        return;
    }
    let d = open();
    d.make_current_be().unwrap();
    let s = raw::stream().unwrap();
    let e = unsafe { raw::launch(0x1234 as _, [1, 1, 1], [32, 1, 1], s) }.unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_HANDLE);
    let msg = e.to_string();
    assert!(
        msg.starts_with("cuLaunchKernel failed: CUDA_ERROR_INVALID_HANDLE"),
        "{msg}"
    );
    assert!(msg.contains("restart reefd"), "{msg}");
}

const ONE_KERNEL: &str =
    ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n";

#[test]
fn a_function_of_an_unloaded_module_is_refused() {
    let _serial = common::cuda_serial();
    if common::cuda_library().is_none() {
        // Using a destroyed handle is undefined behaviour for NVIDIA's driver.
        eprintln!("not run against the system libcuda: a destroyed handle proves nothing there");
        return;
    }
    let d = open();
    d.make_current_be().unwrap();
    let s = raw::stream().unwrap();
    let m = raw::module_load(ONE_KERNEL).unwrap();
    let f = unsafe { raw::function(m, "k") }.unwrap();
    unsafe { raw::launch(f, [1, 1, 1], [32, 1, 1], s) }.unwrap();
    unsafe { raw::sync(s) }.unwrap();
    unsafe { raw::module_unload(m) }.unwrap();
    let e = unsafe { raw::launch(f, [1, 1, 1], [32, 1, 1], s) }.unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_HANDLE, "{e}");
    let e = unsafe { raw::function(m, "k") }.unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_HANDLE, "{e}");
}

#[test]
fn out_of_range_launch_is_a_typed_error() {
    let _serial = common::cuda_serial();
    let d = open();
    d.make_current_be().unwrap();
    let s = raw::stream().unwrap();
    let m = raw::module_load(ONE_KERNEL).unwrap();
    let f = unsafe { raw::function(m, "k") }.unwrap();
    for (grid, block) in [
        ([1, 1, 1], [1025, 1, 1]),
        ([1, 65536, 1], [32, 1, 1]),
        ([0, 1, 1], [32, 1, 1]),
    ] {
        let e = unsafe { raw::launch(f, grid, block, s) }.unwrap_err();
        assert_eq!(
            driver_code(&e),
            CUresult::CUDA_ERROR_INVALID_VALUE,
            "{grid:?} {block:?}"
        );
        assert!(
            e.to_string()
                .contains("launch shape outside the GPU's limits"),
            "{e}"
        );
    }
}

#[test]
fn a_model_with_an_out_of_range_block_fails_at_launch_with_the_model_named() {
    let _serial = common::cuda_serial();
    let mut d = open();
    let dir = tempfile::tempdir().unwrap();
    for f in ["kernels.ptx", "weights.bin"] {
        std::fs::copy(model_dir().join(f), dir.path().join(f)).unwrap();
    }
    let toml = std::fs::read_to_string(model_dir().join("model.toml")).unwrap();
    std::fs::write(
        dir.path().join("model.toml"),
        toml.replacen("block = [256, 1, 1]", "block = [2048, 1, 1]", 1),
    )
    .unwrap();
    d.load_model(dir.path(), Some("wide")).unwrap();
    d.open_stream(5, StreamClass::BestEffort).unwrap();
    let t = d.submit(5, "wide", input(0)).unwrap();
    let t2 = d.submit(5, "wide", input(1)).unwrap();
    assert!(d.poll().is_empty());
    // Each refused launch fails its request, with the driver's code, and
    // the stream goes on with the next one.
    let mut failed = d.take_failed();
    while failed.len() < 2 {
        assert!(d.poll().is_empty());
        failed.extend(d.take_failed());
    }
    assert_eq!(
        failed.iter().map(|f| f.task).collect::<Vec<_>>(),
        vec![t, t2]
    );
    for f in &failed {
        assert_eq!((f.stream, f.model.as_str()), (5, "wide"));
        let e = &f.error;
        assert_eq!(driver_code(e), CUresult::CUDA_ERROR_INVALID_VALUE, "{e}");
        assert!(e.to_string().contains("model.toml"), "{e}");
    }
    assert!(!d.busy());
}

#[test]
fn copy_overflow_and_use_after_free_are_typed_errors() {
    let _serial = common::cuda_serial();
    let d = open();
    d.make_current_be().unwrap();
    let p = raw::alloc(100).unwrap();
    raw::htod(p, &[7; 100]).unwrap();
    let e = raw::htod(p + 1, &[7; 100]).unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_VALUE, "{e}");
    assert!(
        e.to_string()
            .contains("a copy past the end of an allocation"),
        "{e}"
    );
    let mut back = [0u8; 200];
    let e = raw::dtoh(&mut back, p).unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_VALUE, "{e}");
    raw::free(p).unwrap();
    let e = raw::htod(p, &[7; 4]).unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_VALUE, "{e}");
    assert!(e.to_string().contains("a freed pointer"), "{e}");
    let e = raw::free(p).unwrap_err();
    assert_eq!(driver_code(&e), CUresult::CUDA_ERROR_INVALID_VALUE, "{e}");
}

#[test]
fn a_missing_library_is_explained() {
    let _serial = common::cuda_serial();
    let e = reefd::backend::cuda_launch::load_library(Some(Path::new("/nonexistent/libcuda.so")))
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("cannot load /nonexistent/libcuda.so"), "{msg}");
}

#[test]
fn bad_model_directories_are_explained() {
    let _serial = common::cuda_serial();
    let mut d = open();
    let dir = tempfile::tempdir().unwrap();
    let e = d.load_model(dir.path(), None).unwrap_err();
    let stem = dir.path().file_name().unwrap().to_str().unwrap();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("neither model.toml nor {stem}.json is there"))
            && msg.contains("reef-compile"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
    // A measured REEF schedule (no PTX) is not a CUDA model.
    std::fs::copy(
        model_dir().join("two-kernel.json"),
        dir.path().join(format!("{stem}.json")),
    )
    .unwrap();
    let e = d.load_model(dir.path(), None).unwrap_err();
    assert!(e.to_string().contains("a REEF schedule without PTX"), "{e}");
    for f in ["kernels.ptx", "weights.bin", "model.toml"] {
        std::fs::copy(model_dir().join(f), dir.path().join(f)).unwrap();
    }
    std::fs::write(dir.path().join("weights.bin"), [0u8; 3]).unwrap();
    let e = d.load_model(dir.path(), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("weights.bin has 3 B, the weight storages 16384 B"),
        "{e}"
    );
}

/// The PTX a compiled model is loaded with: the highest architecture the
/// GPU's compute capability can run (a driver JIT-compiles PTX only for
/// the same or a newer architecture).
#[test]
fn a_compiled_models_ptx_is_picked_by_compute_capability() {
    use reefd::backend::cuda_launch::pick_arch;
    let archs = ["sm_80".to_string(), "sm_90".to_string()];
    assert_eq!(pick_arch(&archs, Some((9, 0))).unwrap(), "sm_90");
    assert_eq!(pick_arch(&archs, Some((8, 6))).unwrap(), "sm_80");
    assert_eq!(pick_arch(&archs, None).unwrap(), "sm_90");
    let e = pick_arch(&archs, Some((7, 0))).unwrap_err();
    assert!(e.contains("compute capability 7.0"), "{e}");

    // Through the driver: the simulated GV100 reports 7.0 and refuses a
    // model compiled for sm_80 and sm_90 only, loading nothing.
    if common::cuda_library().is_none() {
        return;
    }
    let t = common::compiled_tiny(1);
    let _serial = common::cuda_serial();
    let mut d = open();
    assert_eq!(d.compute_capability(), Some((7, 0)));
    let free = d.memory().unwrap().0;
    let e = d
        .load_model(&t.path().join("models/tiny"), None)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("compiled for sm_80, sm_90 only") && msg.contains("compute capability 7.0"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1, "{msg}");
    assert!(d.models().is_empty());
    assert_eq!(d.memory().unwrap().0, free);
}
