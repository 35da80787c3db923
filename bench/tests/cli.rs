//! `reef-bench standalone`: the calibration holds (±10% of the measured
//! model latency for every model, one device spec) and bad model files give
//! a clear error and a non-zero exit, never a panic.

use std::fs;
use std::path::Path;
use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reef-bench"))
}

#[test]
fn standalone_within_ten_percent_of_measured() {
    let out = bench().args(["standalone", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r["model"].as_str().unwrap()).collect();
    assert_eq!(names, ["bert", "densenet", "inception", "resnet152", "vgg"]);
    for r in &rows {
        let (sim, meas, err) = (
            r["simulated_us"].as_f64().unwrap(),
            r["measured_us"].as_f64().unwrap(),
            r["error_pct"].as_f64().unwrap(),
        );
        assert!((err - 100.0 * (sim - meas) / meas).abs() < 1e-9);
        assert!(err.abs() <= 10.0, "{r}");
    }
}

#[test]
fn model_selection_by_disb_name() {
    let out = bench()
        .args([
            "standalone",
            "--json",
            "--model",
            "vgg19-imagenet",
            "--model",
            "bert",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2);
    assert!(text.contains("\"model\":\"vgg\""));
}

/// A models dir with one model `bad` whose files are given.
fn bad_models(schedule: &str, profile: Option<&str>) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("bad");
    fs::create_dir(&m).unwrap();
    fs::write(m.join("bad.json"), schedule).unwrap();
    if let Some(p) = profile {
        fs::write(m.join("bad.profile.json"), p).unwrap();
    }
    t
}

fn expect_error(dir: &Path, needles: &[&str]) {
    let out = bench()
        .args(["standalone", "--models-dir"])
        .arg(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "missing {n:?} in: {err}");
    }
}

const OK_SCHEDULE: &str = r#"{"storage": [{"name": "a", "size": 4, "stype": "float32"},
  {"name": "b", "size": 4, "stype": "float32"}],
  "kernels": [{"name": "k", "launch_params": [1, 1, 1, 64, 1, 1], "args": [0, 1]}],
  "args": [0], "shared_memory": {}}"#;
const OK_PROFILE: &str =
    r#"{"model_latency": 20, "kernel_latency": {"k": {"total_latency": 20, "latency": [20]}}}"#;

#[test]
fn bad_model_files_exit_nonzero_with_clear_errors() {
    // The well-formed toy model runs.
    let t = bad_models(OK_SCHEDULE, Some(OK_PROFILE));
    let out = bench()
        .args(["standalone", "--models-dir"])
        .arg(t.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let t = bad_models("not json at all", None);
    expect_error(t.path(), &["bad.json", "not a valid kernel schedule JSON"]);

    let t = bad_models(
        OK_SCHEDULE,
        Some(r#"{"model_latency": 20, "kernel_latency": {}}"#),
    );
    expect_error(
        t.path(),
        &[
            "bad.profile.json",
            "kernels[0] (k)",
            "no entry in kernel_latency",
        ],
    );

    let t = bad_models(
        &OK_SCHEDULE.replace("[1, 1, 1, 64, 1, 1]", "[1, 1, 64]"),
        None,
    );
    expect_error(
        t.path(),
        &["bad.json", "kernels[0] (k)", "launch_params has 3 values"],
    );

    let t = bad_models(
        &OK_SCHEDULE.replace("\"args\": [0, 1]", "\"args\": [0, 5]"),
        None,
    );
    expect_error(
        t.path(),
        &["bad.json", "kernels[0] (k)", "5 is out of range"],
    );

    // Loads, but a block cannot fit on any compute unit of the device.
    let t = bad_models(
        &OK_SCHEDULE.replace("[1, 1, 1, 64, 1, 1]", "[1, 1, 1, 4096, 1, 1]"),
        Some(OK_PROFILE),
    );
    expect_error(
        t.path(),
        &["bad[0] k", "4096 threads per block exceed a mi50 CU"],
    );

    let empty = tempfile::tempdir().unwrap();
    expect_error(empty.path(), &["no subdirectory"]);

    let out = bench()
        .args(["standalone", "--device", "tpu9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown device \"tpu9\""));
}

#[test]
fn isolated_kernels_pay_the_launch_path_back_to_back_hides_it() {
    // Each kernel simulated alone pays host launch + fetch + dispatch, as the
    // measured total_latency does; their sum exceeds the back-to-back model
    // latency, as measured.
    let out = bench()
        .args(["kernels", "--json", "--model", "vgg", "--model", "bert"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let f = |k: &str| r[k].as_f64().unwrap();
        let (meas_sum, sim_sum) = (f("measured_sum_total_us"), f("simulated_sum_alone_us"));
        assert!((sim_sum - meas_sum).abs() / meas_sum < 0.10, "{r}");
        assert!(sim_sum > f("simulated_model_us"), "{r}");
        assert!(meas_sum > f("measured_model_us"), "{r}");
        assert!(r["busy_cus_max"].as_u64().unwrap() <= 60);
    }
}

#[test]
fn fidelity_refuses_devices_the_paper_has_no_figures_for() {
    for (args, needle) in [
        (vec!["fidelity", "--device", "h100"], "mi50 and gv100"),
        (vec!["fidelity", "--duration", "0"], "--duration"),
    ] {
        let out = bench().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `reef-bench aker --colocate` takes a BE model directory by path:
/// Parboil's stencil described from its source (bench/aker-be) runs as the
/// BE client of every policy on the ada6000 preset.
#[test]
fn colocate_takes_a_be_model_directory_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("aker-be/stencil");
    let out = bench()
        .args(["aker", "--colocate", "--predictor-device", "ada6000"])
        .args(["--lc", "vgg", "--util", "0.2", "--queries", "5", "--be"])
        .arg(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for policy in ["aker", "baymax", "tacker", "reef", "streams"] {
        let row = text
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[0] == "vgg" && w[1] == "stencil" && w[2] == policy
            })
            .unwrap_or_else(|| panic!("no {policy} row:\n{text}"));
        // BE inferences per second: the stencil kernel ran.
        let be: f64 = row.split_whitespace().nth(9).unwrap().parse().unwrap();
        assert!(be > 0.0, "{row}");
    }
    // A path that is no model directory is an error naming it.
    let out = bench()
        .args(["aker", "--colocate", "--lc", "vgg", "--queries", "5"])
        .args(["--be", "bench/aker-be/nothing"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing"));
}
