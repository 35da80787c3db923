//! reef-bench on models compiled by reef-compile (issue 14 item 4,
//! docs/compile.md): `standalone`, `disb` and `dkp` take `--models-dir`
//! pointing at compiled models and `--device gv100|h100`, and a DISB
//! workload names a compiled model by its directory name. The model is the
//! tiny conv + relu + max pool + gemm network of compile/tests/make_tiny.py,
//! compiled here through TVM (a few seconds), also for sm_70 (NVRTC and
//! ptxas 12.9, which the gv100 preset's resources come from; issue 31 item
//! 2). `fidelity --gv100-models` refuses a build without sm_70.

use std::path::{Path, PathBuf};
use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reef-bench"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A models directory holding the compiled tiny model as `tiny`.
fn compiled_models() -> tempfile::TempDir {
    compiled_as("tiny", &["sm_70", "sm_80", "sm_90"])
}

/// The tiny model compiled for `archs` as `models/NAME`.
fn compiled_as(name: &str, archs: &[&str]) -> tempfile::TempDir {
    let venv = root().join(".venv/bin");
    assert!(
        venv.join("reef-compile").is_file(),
        "run scripts/setup.sh: it installs .venv/bin/reef-compile"
    );
    let t = tempfile::tempdir().unwrap();
    let onnx = t.path().join("tiny.onnx");
    ok(Command::new(venv.join("python"))
        .arg(root().join("compile/tests/make_tiny.py"))
        .arg(&onnx));
    // This checkout's compiler (the venv's .pth names whichever checkout
    // ran the setup).
    let mut c = Command::new(venv.join("reef-compile"));
    c.env("PYTHONPATH", root().join("compile")).arg(&onnx);
    for a in archs {
        c.args(["--arch", a]);
    }
    ok(c.args(["--no-reference", "-o"])
        .arg(t.path().join("models").join(name)));
    t
}

#[test]
fn fidelity_gv100_models_must_be_sm70_builds() {
    // Named like DISB's first model, so the first load meets it.
    let t = compiled_as("vgg", &["sm_80"]);
    let out = bench()
        .args(["fidelity", "--device", "gv100", "--duration", "0.01"])
        .arg("--gv100-models")
        .arg(t.path().join("models"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not a reef-compile build for sm_70") && err.contains("--arch sm_70"),
        "{err}"
    );
}

fn standalone_us(models: &Path, device: &str) -> f64 {
    let text = ok(bench()
        .args(["standalone", "--json", "--device", device, "--models-dir"])
        .arg(models));
    let row: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(row["model"], "tiny");
    // No measured latency exists for a compiled model.
    assert!(row["measured_us"].is_null(), "{row}");
    row["simulated_us"].as_f64().unwrap()
}

#[test]
fn compiled_models_run_in_standalone_disb_and_dkp() {
    let t = compiled_models();
    let models = t.path().join("models");

    let (mi50, gv100, h100) = (
        standalone_us(&models, "mi50"),
        standalone_us(&models, "gv100"),
        standalone_us(&models, "h100"),
    );
    // Every preset charges its launch path (host, fetch, dispatch: 10 us
    // on all three) before the kernels run, three kernels back to back.
    for us in [mi50, gv100, h100] {
        assert!(us > 10.0, "{mi50} {gv100} {h100}");
    }
    // H100's peak rate and bandwidth both exceed GV100's: never slower.
    assert!(h100 <= gv100, "h100 {h100} us > gv100 {gv100} us");

    // A DISB workload naming the compiled model for both clients.
    let wl = t.path().join("wl.json");
    std::fs::write(
        &wl,
        r#"{"time": 1, "tasks": [
 {"id": "tiny_rt", "load": {"type": "periodic", "priority": 0, "frequency": 1000},
  "client": {"name": "tiny_rt", "model_name": "tiny", "batch_size": 1}},
 {"id": "tiny_be", "load": {"type": "continuous"},
  "client": {"name": "tiny_be", "model_name": "tiny", "batch_size": 1}}]}"#,
    )
    .unwrap();
    for device in ["gv100", "h100"] {
        let text = ok(bench()
            .arg("disb")
            .arg(&wl)
            .args(["--device", device, "--duration", "0.05", "--policy", "reef"])
            .args(["--no-plot", "--json", "--models-dir"])
            .arg(&models));
        let r: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(r["device"], device);
        assert!(r["rt_requests"].as_u64().unwrap() >= 40, "{r}");
        assert!(r["kernels_launched"].as_u64().unwrap() > 0, "{r}");
    }

    // dkp on the compiled model (pairs of it with itself).
    let text = ok(bench()
        .args([
            "dkp",
            "--device",
            "h100",
            "--models",
            "tiny",
            "--duration",
            "0.02",
        ])
        .args([
            "--policy",
            "reef",
            "--iterations",
            "100",
            "--json",
            "--models-dir",
        ])
        .arg(&models));
    assert!(text.lines().count() >= 1, "{text}");

    // A workload naming a model the directory does not hold: a clear error.
    let bad = t.path().join("bad.json");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&wl)
            .unwrap()
            .replace("\"tiny\"", "\"nosuch\""),
    )
    .unwrap();
    let out = bench()
        .arg("disb")
        .arg(&bad)
        .args([
            "--device",
            "h100",
            "--duration",
            "0.01",
            "--no-plot",
            "--models-dir",
        ])
        .arg(&models)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nosuch") && err.contains("tiny"), "{err}");
}
