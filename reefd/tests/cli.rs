//! The command-line tools refuse bad input with a message and a non-zero
//! exit code, never a panic.

mod common;

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(bin).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    (out.status.code().unwrap_or(-1), err)
}

#[test]
fn bad_configs_and_arguments_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[scheduler]\npolicy = \"fastest\"\n").unwrap();
    let c = cfg.to_str().unwrap();
    let (code, err) = run(
        common::reefd_bin(),
        &["start", "--foreground", "--config", c],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("scheduler.policy") && err.contains("reef"),
        "{err}"
    );

    let (code, err) = run(
        common::reefd_bin(),
        &["start", "--config", "/nonexistent/reefd.toml"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/reefd.toml"), "{err}");

    std::fs::write(&cfg, "").unwrap();
    let sock = dir.path().join("s.sock");
    let (code, err) = run(
        common::reefd_bin(),
        &[
            "start",
            "--foreground",
            "--config",
            c,
            "--device",
            "tpu:0",
            "--socket",
            sock.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1);
    assert!(err.contains("tpu:0") && err.contains("sim:mi50"), "{err}");

    let (code, err) = run(
        common::reefctl_bin(),
        &["--socket", sock.to_str().unwrap(), "status"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("is the daemon running"), "{err}");
    // The cause is named once, not repeated.
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");

    let (code, _) = run(common::reefctl_bin(), &["preempt"]);
    assert_eq!(code, 2, "clap usage error");

    let (code, err) = run(
        common::reefd_bin(),
        &["status", "--config", c, "--socket", sock.to_str().unwrap()],
    );
    assert_eq!(code, 3, "{err}");
}

#[test]
fn hardware_devices_need_root_or_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let (code, err) = run(
        common::reefd_bin(),
        &[
            "start",
            "--foreground",
            "--config",
            "/dev/null",
            "--device",
            "kfd:0",
            "--socket",
            sock.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1);
    // As root the device is looked for (and is absent here); as another
    // user the daemon says root is needed.
    assert!(err.contains("kfd") || err.contains("needs root"), "{err}");
    assert!(!sock.exists());
}

/// `reefctl models load PATH` registers the model under its directory's
/// name, the name `infer` and `unload` take (before, it was registered under
/// the whole path and `infer vgg` answered "not loaded"); `--name` renames.
#[test]
fn a_model_loaded_by_path_is_named_after_its_directory() {
    let d = common::Daemon::start("");
    let sock = d.socket.to_str().unwrap().to_string();
    let shared = std::env::var("REEF_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared").to_string());
    let vgg = format!("{shared}/models/mi50/vgg");
    let ctl_in = |cwd: &str, args: &[&str]| {
        let out = Command::new(common::reefctl_bin())
            .current_dir(cwd)
            .args(["--socket", &sock])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("panicked"), "{text}");
        (out.status.code().unwrap_or(-1), text)
    };
    let ctl = |args: &[&str]| ctl_in("/", args);
    let (code, out) = ctl(&["models", "load", &vgg]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("loaded vgg "), "{out}");
    let (code, out) = ctl(&["infer", "vgg", "--count", "1", "--priority", "rt"]);
    assert_eq!(code, 0, "{out}");
    // A relative path (from reefctl's directory, not the daemon's) with a name.
    let (code, out) = ctl_in(
        &shared,
        &[
            "models",
            "load",
            "./models/mi50/resnet152",
            "--name",
            "r152",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("loaded r152 "), "{out}");
    let (code, out) = ctl(&["models", "list"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("vgg") && out.contains("r152"), "{out}");
    assert!(!out.contains("/models/mi50/vgg "), "{out}");
    let (code, out) = ctl(&["models", "unload", "vgg"]);
    assert_eq!(code, 0, "{out}");
}
