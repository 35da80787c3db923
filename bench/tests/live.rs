//! `reef-bench disb --live` against a real reefd (the workspace's binary) on
//! `sim:mi50`: short DISB runs complete requests, every output is verified by
//! the daemon's value tracking, the `--json` object carries the virtual-time
//! run's fields plus `live`, trace / dependent / continuous clients follow
//! their load types, a policy asked for is switched to and switched back,
//! and a missing daemon is a clear error. Against `cuda:0` on the
//! simulated libcuda (reef-libcuda-sim, the test device), the run prints a
//! normalised RT latency from a stand-alone phase measured through the
//! daemon (a GPU has no virtual-time preset to take it from).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reef-bench"))
}

/// The reefd binary of this workspace, built for this test's profile.
///
/// Cargo only names binaries of the crate under test (`CARGO_BIN_EXE_*`),
/// so the daemon is found beside this test's profile directory
/// (`<target>/<profile>/reefd`), after `cargo build -p reefd --bin reefd`
/// for that target directory and profile (a no-op when it is up to date).
fn reefd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("REEF_BENCH_REEFD") {
        return PathBuf::from(p);
    }
    built("reefd", &["--bin", "reefd"], "reefd")
}

/// The simulated libcuda (the test device reefd's `cuda:N` loads here),
/// built like [`reefd_bin`].
fn sim_libcuda() -> PathBuf {
    built("reef-libcuda-sim", &[], "libreef_libcuda_sim.so")
}

/// Builds `package` for this test's target directory and profile and
/// answers the path of `file` there.
fn built(package: &str, extra: &[&str], file: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // <target>/<profile>/deps/live-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable in <target>/<profile>/deps");
    let target = profile_dir.parent().expect("target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|s| s.to_str())
        .expect("profile directory name");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", package])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        p => {
            cmd.args(["--profile", p]);
        }
    }
    let st = cmd.status().expect("run cargo");
    assert!(st.success(), "cargo build -p {package} failed");
    let bin = profile_dir.join(file);
    assert!(bin.exists(), "{} missing after the build", bin.display());
    bin
}

struct Daemon {
    child: Child,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        Self::start_on("device = \"sim:mi50\"")
    }

    /// reefd with `device` as its [device] section (policy `reef`).
    fn start_on(device: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("reefd.sock");
        let cfg = dir.path().join("reefd.toml");
        std::fs::write(
            &cfg,
            format!(
                "[daemon]\nsocket = {:?}\npid_file = {:?}\n[device]\n{device}\n\
                 [scheduler]\npolicy = \"reef\"\n[metrics]\nenabled = false\n",
                socket,
                dir.path().join("reefd.pid")
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("reefd.log")).unwrap();
        let child = Command::new(reefd_bin())
            .args(["start", "--foreground", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn reefd");
        let d = Daemon { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(mut c) = reefd::client::Client::connect(&d.socket) {
                if c.status().is_ok() {
                    return d;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("reefd did not come up; log:\n{}", d.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("reefd.log")).unwrap_or_default()
    }

    fn live(&self, args: &[&str]) -> Output {
        bench()
            .args(["disb"])
            .args(args)
            .args(["--live", "--socket"])
            .arg(&self.socket)
            .output()
            .unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json_lines(out: &Output, log: &str) -> Vec<Value> {
    assert!(
        out.status.success(),
        "reef-bench failed:\n{}\nreefd log:\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn client<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["clients"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no client {name} in {r}"))
}

#[test]
fn live_disb_runs_against_reefd_with_verified_outputs() {
    let d = Daemon::start();

    // DISB A for 3 s with the daemon's policy (reef: preemption and dynamic
    // kernel padding).
    let out = d.live(&["A", "--duration", "3", "--json", "--no-plot"]);
    let rows = json_lines(&out, &d.log());
    assert_eq!(rows.len(), 1, "{rows:?}");
    let live = &rows[0];

    // Every field of the virtual-time run's JSON object is there.
    let virt = bench()
        .args([
            "disb",
            "A",
            "--policy",
            "reef",
            "--duration",
            "0.1",
            "--json",
            "--no-plot",
        ])
        .output()
        .unwrap();
    let virt = &json_lines(&virt, "")[0];
    for k in virt.as_object().unwrap().keys() {
        assert!(live.get(k).is_some(), "live result lacks {k}: {live}");
    }
    assert_eq!(live["workload"], "A");
    assert_eq!(live["policy"], "reef");
    assert_eq!(live["device"], "sim:mi50");
    assert_eq!(live["live"]["daemon_policy"], "reef");
    assert_eq!(live["live"]["padding"], true);
    assert!(
        live["live"]["padded_launches"].as_u64().unwrap() > 0,
        "the daemon padded nothing: {live}"
    );

    // Requests completed: 100 Hz RT vgg for 3 s, and BE resnet152 in between.
    let rt = client(live, "vgg19_rt");
    let be = client(live, "resnet152_be");
    assert_eq!(rt["class"], "real-time");
    assert!(rt["requests"].as_u64().unwrap() >= 200, "{rt}");
    assert!(be["requests"].as_u64().unwrap() >= 10, "{be}");
    assert_eq!(live["rt_requests"], rt["requests"]);
    let norm = live["rt_latency_norm_mean"].as_f64().unwrap();
    assert!(norm > 0.5 && norm < 5.0, "{norm}");
    assert!(live["throughput_norm_overall"].as_f64().unwrap() > 0.0);
    // The BE client was preempted by RT arrivals (reset-based: level 3).
    assert!(live["preemptions"].as_u64().unwrap() > 0, "{live}");
    assert_eq!(live["preempt_level"], 3);
    assert!(live["preempt_latency_us_mean"].is_null());

    // Every completed request's outputs were checked by the daemon and
    // equal an unpreempted run's.
    let l = &live["live"];
    assert_eq!(l["outputs_corrupted"], 0);
    assert_eq!(l["outputs_unchecked"], 0);
    let completed = rt["requests"].as_u64().unwrap() + be["requests"].as_u64().unwrap();
    assert!(l["outputs_verified"].as_u64().unwrap() >= completed, "{l}");
    assert!(l["standalone_us"]["vgg"].as_f64().unwrap() > 1000.0, "{l}");
    assert!(l["rt_control_path_us_p99"].as_f64().is_some(), "{l}");
    assert!(l["not_measured"]
        .as_array()
        .unwrap()
        .contains(&Value::from("preempt_latency_us_mean")));

    // Trace, dependent and continuous clients under another policy, which
    // the run switches to and back.
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("T.json");
    std::fs::write(
        &w,
        r#"{"time": 2, "tasks": [
          {"id": "cam_rt", "load": {"type": "trace", "trace": [0, 100, 200, 300, 400, 500, 600, 700, 800, 900]},
           "client": {"model_name": "densenet201-imagenet"}},
          {"id": "post", "load": {"type": "dependent", "prev_task_ids": ["cam_rt"]},
           "client": {"model_name": "vgg19-imagenet"}},
          {"id": "bg", "load": {"type": "continuous"}, "client": {"model_name": "vgg19-imagenet"}}
        ]}"#,
    )
    .unwrap();
    let out = d.live(&[
        w.to_str().unwrap(),
        "--policy",
        "wait",
        "--json",
        "--no-plot",
    ]);
    let rows = json_lines(&out, &d.log());
    let r = &rows[0];
    assert_eq!(r["workload"], "T");
    assert_eq!(r["live"]["daemon_policy"], "wait");
    let cam = client(r, "cam_rt")["requests"].as_u64().unwrap();
    let post = client(r, "post")["requests"].as_u64().unwrap();
    let bg = client(r, "bg")["requests"].as_u64().unwrap();
    assert_eq!(cam, 10, "{r}");
    // One dependent request per camera result (each done long before the next).
    assert_eq!(post, 10, "{r}");
    assert!(bg > 50, "{r}");
    assert_eq!(r["live"]["outputs_corrupted"], 0);
    let mut c = reefd::client::Client::connect(&d.socket).unwrap();
    assert_eq!(c.status().unwrap().policy, "reef", "policy switched back");
    // The models the runs loaded are unloaded again.
    assert!(c.models().unwrap().is_empty());

    // A device the daemon does not serve is a clear error.
    let out = d.live(&["A", "--device", "gv100", "--duration", "1", "--no-plot"]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("serves on sim:mi50, not sim:gv100") && e.contains("reefd start --device"),
        "{e}"
    );
}

/// DISB A against `cuda:0` on the simulated libcuda (gv100 preset), with
/// the libcuda crate's two-kernel model in both of A's model slots (the
/// only models with a CUDA build here; docs/hardware.md "DISB A through the
/// daemon on cuda:0" substitutes compiled ResNet-50s the same way): the
/// normalisation base is measured through the daemon and the table prints
/// a normalised RT latency, not "-".
#[test]
fn live_disb_on_a_cuda_daemon_prints_normalised_latency() {
    let lib = sim_libcuda();
    let d = Daemon::start_on(&format!("device = \"cuda:0\"\ncuda_library = {lib:?}"));
    let models = tempfile::tempdir().unwrap();
    let two = Path::new(env!("CARGO_MANIFEST_DIR")).join("../libcuda-sim/models/two-kernel");
    for m in ["vgg", "resnet152"] {
        let dir = models.path().join(m);
        std::fs::create_dir(&dir).unwrap();
        for f in ["kernels.ptx", "weights.bin", "model.toml"] {
            std::fs::copy(two.join(f), dir.join(f)).unwrap();
        }
        std::fs::copy(two.join("two-kernel.json"), dir.join(format!("{m}.json"))).unwrap();
    }
    let dir = models.path().to_str().unwrap();
    // The text output: the base's method, and a normalised mean in the table.
    let out = d.live(&["A", "--duration", "1", "--no-plot", "--models-dir", dir]);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}\nreefd log:\n{}", d.log());
    assert!(
        err.contains("normalisation base: each model alone through reefd")
            && err.contains("on cuda:0"),
        "{err}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("A "))
        .unwrap_or_else(|| panic!("no row for A in:\n{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "reef-nodkp", "{row}");
    let rt_mean: f64 = cols[2]
        .parse()
        .unwrap_or_else(|_| panic!("RT normalised mean {:?} is not a number: {row}", cols[2]));
    assert!(rt_mean > 0.5 && rt_mean < 50.0, "{row}");
    // --json: the same figure, the base per model, and how it was taken.
    let out = d.live(&[
        "A",
        "--duration",
        "1",
        "--json",
        "--no-plot",
        "--models-dir",
        dir,
    ]);
    let rows = json_lines(&out, &d.log());
    let r = &rows[0];
    assert_eq!(r["device"], "cuda:0");
    assert!(r["rt_latency_norm_mean"].as_f64().is_some(), "{r}");
    let l = &r["live"];
    assert!(
        l["standalone_method"]
            .as_str()
            .unwrap()
            .contains("each model alone through reefd"),
        "{l}"
    );
    for m in ["vgg", "resnet152"] {
        assert!(l["standalone_us"][m].as_f64().unwrap() > 0.0, "{l}");
    }
    assert_eq!(l["outputs_corrupted"], 0);
    assert!(l["outputs_verified"].as_u64().unwrap() > 0, "{l}");
}

#[test]
fn no_daemon_at_the_socket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("reefd.sock");
    let out = bench()
        .args(["disb", "A", "--live", "--no-plot", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no reefd answers at"), "{e}");
    assert!(
        e.contains(&format!(
            "reefd start --foreground --device sim:mi50 --socket {}",
            sock.display()
        )),
        "{e}"
    );
    // A virtual-time switch is refused before any daemon is looked for.
    let out = bench()
        .args([
            "disb",
            "A",
            "--live",
            "--no-plot",
            "--select-at-launch",
            "--socket",
        ])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("--select-at-launch") && e.contains("leave out --live"),
        "{e}"
    );
    // --socket without --live is refused by the argument parser.
    let out = bench()
        .args(["disb", "A", "--socket", "/tmp/x.sock"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--live"));
}
