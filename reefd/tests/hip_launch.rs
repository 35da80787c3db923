//! The `kfd:N` launch path (device/hip/) on the simulated libamdhip64
//! (libhip-sim, a dev-dependency whose cdylib cargo builds beside this
//! test): the tiny network compiled by reef-compile for sm_80 and gfx906,
//! its gfx906 code object chosen by the GPU's gcnArchName, loaded in an
//! offload bundle, level 2 probed on its injected flag check, and one
//! inference's output equal to ONNX Runtime's. `REEF_TEST_HIP=system` runs
//! it on the system's libamdhip64 (a GPU host, docs/hardware.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use reefd::device::hip::{HipDevice, HipLaunchOptions};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(c: &mut Command) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The HIP runtime the test loads: the simulated one unless
/// `REEF_TEST_HIP=system`.
fn library() -> Option<PathBuf> {
    if std::env::var("REEF_TEST_HIP").as_deref() == Ok("system") {
        return None;
    }
    let lib = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("libreef_libhip_sim.so");
    assert!(
        lib.is_file(),
        "{} missing: build reef-libhip-sim",
        lib.display()
    );
    Some(lib)
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_compiled_model_runs_on_gfx906_with_lazy_eviction_and_onnx_runtimes_answer() {
    let venv = root().join(".venv/bin");
    assert!(venv.join("reef-compile").is_file(), "run scripts/setup.sh");
    let t = tempfile::tempdir().unwrap();
    let onnx = t.path().join("tiny.onnx");
    let dir = t.path().join("tiny");
    let refd = t.path().join("ort");
    run(Command::new(venv.join("python"))
        .arg(root().join("compile/tests/make_tiny.py"))
        .arg(&onnx));
    run(Command::new(venv.join("python"))
        .env("PYTHONPATH", root().join("compile"))
        .args(["-m", "reef_compile.cli"])
        .arg(&onnx)
        .args([
            "--arch",
            "sm_80",
            "--arch",
            "gfx906",
            "--no-reference",
            "-o",
        ])
        .arg(&dir));
    run(Command::new(venv.join("python"))
        .arg(root().join("compile/tests/ort_reference.py"))
        .arg(&onnx)
        .arg(&refd));

    let mut d = HipDevice::open(&HipLaunchOptions {
        index: 0,
        library: library(),
    })
    .unwrap();
    assert!(d.gcn_arch().starts_with("gfx906"), "{}", d.gcn_arch());
    if library().is_some() {
        assert_eq!(d.gcn_arch(), "gfx906:sramecc+:xnack-");
        assert!(d.gpu_name().contains("simulated"), "{}", d.gpu_name());
        assert_eq!(d.compute_units(), 60);
    }
    assert_eq!(
        d.levels().numbers(),
        vec![1, 2],
        "the probe kernel: {}",
        d.levels()
    );
    assert_eq!((d.stream_priority(false), d.stream_priority(true)), (1, -1));

    let m = d.read_model(&dir).unwrap();
    assert_eq!(m.processor, "gfx906");
    let name = d.load_model(m, None).unwrap();
    d.probe_flag(&name).unwrap();

    // One inference, as the launch path issues it.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(refd.join("manifest.json")).unwrap()).unwrap();
    let input = std::fs::read(refd.join(manifest["inputs"][0]["file"].as_str().unwrap())).unwrap();
    let want =
        f32s(&std::fs::read(refd.join(manifest["outputs"][0]["file"].as_str().unwrap())).unwrap());
    let (got, index, kernels) = d.run_once(&name, &input).unwrap();
    assert_eq!(
        index, kernels as u32,
        "every kernel passed its check and stored its index"
    );
    let got = f32s(&got);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-4 * w.abs(),
            "output {i}: {g} vs ONNX Runtime's {w}"
        );
    }
}

/// The probe code objects are what probe/build.sh makes of probe.ll with
/// this machine's llc-19 and ld.lld-19.
#[test]
fn the_probe_code_objects_are_built_from_their_source() {
    let src = root().join("reefd/src/device/hip/probe");
    let t = tempfile::tempdir().unwrap();
    run(Command::new(src.join("build.sh")).arg(t.path()));
    for arch in ["gfx906", "gfx90a"] {
        let f = format!("probe.{arch}.hsaco");
        assert_eq!(
            std::fs::read(t.path().join(&f)).unwrap(),
            std::fs::read(src.join(&f)).unwrap(),
            "{f}: run reefd/src/device/hip/probe/build.sh"
        );
    }
}

#[test]
fn a_model_without_a_code_object_for_the_gpu_is_refused_naming_the_arch() {
    let venv = root().join(".venv/bin");
    let t = tempfile::tempdir().unwrap();
    let onnx = t.path().join("tiny.onnx");
    let dir = t.path().join("tiny");
    run(Command::new(venv.join("python"))
        .arg(root().join("compile/tests/make_tiny.py"))
        .arg(&onnx));
    run(Command::new(venv.join("python"))
        .env("PYTHONPATH", root().join("compile"))
        .args(["-m", "reef_compile.cli"])
        .arg(&onnx)
        .args([
            "--arch",
            "sm_80",
            "--arch",
            "gfx90a",
            "--no-reference",
            "-o",
        ])
        .arg(&dir));
    let d = HipDevice::open(&HipLaunchOptions {
        index: 0,
        library: library(),
    })
    .unwrap();
    let e = d.read_model(&dir).unwrap_err().to_string();
    assert!(e.contains("--arch gfx906") && e.contains("gfx90a"), "{e}");
    let e = HipDevice::open(&HipLaunchOptions {
        index: 3,
        library: library(),
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("no such GPU"), "{e}");
}
