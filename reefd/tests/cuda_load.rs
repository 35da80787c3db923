//! Issue 25 item 2 on `cuda:0` (the simulated libcuda): a model load does
//! its device work (weight uploads, reference runs) outside the daemon's
//! state lock, so `hello`, `status` and an RT inference of another model
//! are answered while it runs, and SIGTERM ends the load within the grace
//! period.
//!
//! The slow load is a copy of the two-kernel test model whose kernels
//! declare 400 ms per block (the `// reef-sim:` annotations the simulated
//! driver runs kernels by, paced by the wall clock): each of its eight
//! reference runs takes about 0.8 s on the device, the load about 6.4 s.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Daemon;
use reefd::client::ClientError;
use reefd::protocol::{ErrorCode, Priority, RequestBody, ServerMessage};

/// A copy of the two-kernel model named `name` whose kernels take 400 ms
/// per block on the simulated GPU.
fn slow_model(name: &str) -> (tempfile::TempDir, PathBuf) {
    let src = common::two_kernel_dir();
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    for f in ["model.toml", "weights.bin"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        src.join("two-kernel.json"),
        dir.join(format!("{name}.json")),
    )
    .unwrap();
    let ptx = std::fs::read_to_string(src.join("kernels.ptx")).unwrap();
    let slow = ptx
        .replace(
            "kernel=scale block_ns=40000 ",
            "kernel=scale block_ns=400000000 ",
        )
        .replace(
            "kernel=bias_relu block_ns=30000 ",
            "kernel=bias_relu block_ns=400000000 ",
        );
    assert_eq!(slow.matches("block_ns=400000000").count(), 2);
    std::fs::write(dir.join("kernels.ptx"), slow).unwrap();
    (t, dir)
}

fn load_request(name: &str, dir: &Path) -> RequestBody {
    RequestBody::LoadModel {
        name: name.into(),
        path: Some(dir.to_path_buf()),
        idempotence: None,
        device_index: None,
    }
}

#[test]
fn a_load_on_cuda_holds_no_lock_and_sigterm_ends_it() {
    let lib = common::sim_library();
    let grace = Duration::from_millis(5000);
    let mut d = Daemon::start_full(
        "cuda:0",
        &format!("shutdown_grace_ms = {}", grace.as_millis()),
        &format!("cuda_library = {lib:?}"),
        "",
    );
    let mut c = d.client();
    c.load_model("two-kernel", Some(&common::two_kernel_dir()))
        .unwrap();
    let rt = c.register(Priority::Rt, Some("rt")).unwrap();
    let (_keep, slow) = slow_model("slow");

    // The slow load, from its own connection, not waited for.
    let mut loader = d.client();
    loader.send(load_request("slow", &slow)).unwrap();
    // Until its device work has begun (the line the load logs then; a
    // daemon that loads under its lock logs none, and its answers below
    // then wait for the whole load).
    common::wait_until(Duration::from_secs(5), || {
        d.log()
            .contains("running its references outside the daemon's lock")
    });

    // Meanwhile every other request is answered.
    c.hello().unwrap();
    let s = c.status().unwrap();
    assert_eq!(s.device, "cuda:0");
    let r = c.infer(rt.stream, "two-kernel").unwrap();
    assert_eq!(
        r.outputs_verified,
        Some(true),
        "an RT inference during the load: {r:?}"
    );
    let names: Vec<String> = c.models().unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["two-kernel"], "the slow model is not installed yet");
    // ... and the load still runs (its 6.4 s of reference runs).
    match loader.read_message(Some(Duration::from_millis(1))) {
        Err(ClientError::Timeout) => {}
        other => panic!("the slow load was answered early: {other:?}"),
    }

    // SIGTERM: the load ends at its next step (a reference run), its
    // client is told, and the daemon exits within the grace period.
    let t0 = Instant::now();
    let status = d.signal_and_wait(nix::sys::signal::Signal::SIGTERM);
    let took = t0.elapsed();
    assert!(status.success(), "reefd exited with {status}");
    assert!(
        took < grace,
        "reefd took {took:?} to exit with a load in progress (grace {grace:?})"
    );
    match loader.read_message(Some(Duration::from_secs(5))) {
        Ok(ServerMessage::Error { code, message, .. }) => {
            assert_eq!(code, ErrorCode::ShuttingDown, "{message}")
        }
        other => panic!("the cancelled load's answer: {other:?}"),
    }
    let log = d.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("model loaded") && l.contains("slow")),
        "the cancelled model was installed:\n{log}"
    );
}
