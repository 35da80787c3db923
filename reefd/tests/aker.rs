//! reefd serving Aker's manager end to end (issue 19; Aker §8.3): an LC
//! service (vgg, compute-prefer convolutions) with a QoS target per query
//! beside a BE application (densenet, whose pooling and elementwise
//! kernels are memory-prefer), fused launches in `stats`, QoS met and
//! missed counted, every output verified by value tracking.

mod common;

use common::{reefctl_bin, wait_until, Daemon};
use reefd::protocol::Priority;
use std::time::Duration;

#[test]
fn aker_serves_lc_queries_with_a_qos_target_and_fuses_be_work() {
    let d = Daemon::start_with("", "[scheduler]\npolicy = \"aker\"\n");
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    c.load_model("densenet", None).unwrap();
    assert_eq!(c.status().unwrap().policy, "aker");
    let lc = c.register(Priority::Rt, Some("lc")).unwrap();
    let mut c2 = d.client();
    let be = c2.register(Priority::Be, Some("be")).unwrap();
    for _ in 0..6 {
        c2.infer_async(be.stream, "densenet").unwrap();
    }
    // A generous target (vgg alone takes ~4.7 ms): room to fuse.
    for _ in 0..6 {
        let r = c.infer_qos(lc.stream, "vgg", Some(40.0)).unwrap();
        assert_eq!(r.outputs_verified, Some(true));
        assert!(r.latency_us < 40_000.0 * 1.5, "{r:?}");
    }
    // A target no query can meet: counted as missed.
    let r = c.infer_qos(lc.stream, "vgg", Some(0.001)).unwrap();
    assert_eq!(r.outputs_verified, Some(true));
    assert!(wait_until(Duration::from_secs(60), || {
        c.stats().unwrap().tasks_completed == 13
    }));
    let s = c.stats().unwrap();
    assert_eq!((s.tasks_failed, s.corrupted_outputs), (0, 0));
    let a = s.aker.expect("Aker figures under policy aker");
    assert!(a.fused_launches > 0 && a.be_blocks_fused > 0, "{a:?}");
    assert_eq!(a.qos_met + a.qos_missed, 7, "{a:?}");
    assert!(a.qos_missed >= 1, "{a:?}");
    // A bad target is refused in one line, before anything is sent.
    let out = std::process::Command::new(reefctl_bin())
        .args(["--socket"])
        .arg(&d.socket)
        .args(["infer", "vgg", "--qos-ms=0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("positive number of milliseconds"), "{err}");
    // And the daemon refuses one sent raw.
    let e = c.infer_qos(lc.stream, "vgg", Some(-1.0)).unwrap_err();
    assert!(e.to_string().contains("qos_ms"), "{e}");
}
