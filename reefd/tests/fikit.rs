//! reefd serving FIKIT end to end (issue 17; fikit.txt §3.2): two clients at
//! priorities 0 and 5, the measuring stage then sharing mode, host gaps
//! filled, profiles kept across a restart, every output verified.

mod common;

use common::{wait_until, Daemon};
use reefd::protocol::Priority;
use std::time::Duration;

fn config(profiles: &std::path::Path) -> String {
    format!(
        "[scheduler]\npolicy = \"fikit\"\nfikit_runs = 2\nhost_gap_us = 300.0\nfikit_profile_dir = {:?}\n",
        profiles
    )
}

#[test]
fn fikit_serves_priorities_0_and_5_measures_then_fills_host_gaps() {
    let profiles = tempfile::tempdir().unwrap();
    let d = Daemon::start_with("", &config(profiles.path()));
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    c.load_model("resnet152", None).unwrap();
    let st = c.status().unwrap();
    assert_eq!(st.policy, "fikit");
    assert_eq!(st.measuring.len(), 2, "{st:?}");
    let hi = c.register(Priority::Rt, None).unwrap();
    let mut c2 = d.client();
    let lo = c2
        .register("5".parse::<Priority>().unwrap(), Some("low"))
        .unwrap();
    for _ in 0..4 {
        c2.infer_async(lo.stream, "resnet152").unwrap();
    }
    for _ in 0..8 {
        let r = c.infer(hi.stream, "vgg").unwrap();
        assert_eq!(r.outputs_verified, Some(true));
    }
    assert!(wait_until(Duration::from_secs(60), || {
        c.stats().unwrap().tasks_completed == 12
    }));
    let s = c.stats().unwrap();
    assert_eq!((s.tasks_failed, s.corrupted_outputs), (0, 0));
    let f = s.fikit.expect("FIKIT figures under policy fikit");
    assert!(f.measuring.is_empty(), "{f:?}");
    assert_eq!(f.profiles_built, 2, "{f:?}");
    assert!(f.gaps_filled > 0 && f.fill_kernels > 0, "{f:?}");
    assert!(c.status().unwrap().measuring.is_empty());
    for n in ["vgg", "resnet152"] {
        assert!(profiles.path().join(format!("{n}.fikit.json")).exists());
    }
    drop((c, c2));
    drop(d);
    // A restarted daemon loads the profiles: nothing to measure.
    let d = Daemon::start_with("", &config(profiles.path()));
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    c.load_model("resnet152", None).unwrap();
    let st = c.status().unwrap();
    assert!(st.measuring.is_empty(), "{st:?}");
    let f = c.stats().unwrap().fikit.unwrap();
    assert_eq!(f.profiles_missing_or_stale, 0);
}
