//! reefd with `reef` (REEF §4 preemption plus §5 dynamic kernel padding,
//! executed by reef-exec): RT vgg requests arrive while a BE resnet152
//! client keeps the device busy; the BE client's preempted kernels are padded
//! into the RT kernels (Fig. 12). Every output must equal an unpreempted
//! run's (value tracking), padded work included.
//!
//! The daemon reports padded launches in its debug log (one `padded launch`
//! line each, with the task, the RT kernel and the BE blocks) and counts them
//! in the stats reply (`padded_launches`, `be_blocks_padded`); the two must
//! agree.

mod common;

use common::Daemon;
use reefd::protocol::{Priority, TaskResult};
use std::time::Duration;

#[test]
fn reef_pads_be_work_into_rt_kernels_and_keeps_every_output_correct() {
    let d = Daemon::start_with("", "[scheduler]\npolicy = \"reef\"\n");
    let mut admin = d.client();
    assert_eq!(admin.status().unwrap().policy, "reef");
    admin.load_model("vgg", None).unwrap();
    admin.load_model("resnet152", None).unwrap();

    let mut bec = d.client();
    let be = std::thread::spawn(move || -> Vec<TaskResult> {
        let s = bec.register(Priority::Be, Some("be")).unwrap();
        (0..12)
            .map(|_| bec.infer(s.stream, "resnet152").unwrap())
            .collect()
    });
    let mut rtc = d.client();
    let rt = std::thread::spawn(move || -> Vec<TaskResult> {
        let s = rtc.register(Priority::Rt, Some("rt")).unwrap();
        (0..20)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(4));
                rtc.infer(s.stream, "vgg").unwrap()
            })
            .collect()
    });
    let rt = rt.join().unwrap();
    let be = be.join().unwrap();
    assert_eq!((rt.len(), be.len()), (20, 12));
    for r in rt.iter().chain(&be) {
        assert_eq!(
            r.outputs_verified,
            Some(true),
            "outputs differ from an unpreempted run: {r:?}"
        );
    }
    let stats = admin.stats().unwrap();
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.tasks_completed, 32);
    assert!(stats.preemptions.values().sum::<u64>() > 0, "{stats:?}");
    let log = d.log();
    let padded = log.matches("padded launch").count();
    assert!(padded > 0, "no padded launch in the log:\n{log}");
    assert_eq!(stats.padded_launches, padded as u64, "{stats:?}");
    assert!(stats.be_blocks_padded >= padded as u64, "{stats:?}");

    // The same under reef-nodkp: preemption only, no padded launch.
    let before = padded;
    admin.set_policy("reef-nodkp").unwrap();
    let s = admin.register(Priority::Be, Some("be2")).unwrap();
    let mut rtc = d.client();
    let rt = std::thread::spawn(move || {
        let s = rtc.register(Priority::Rt, Some("rt2")).unwrap();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(4));
            assert_eq!(
                rtc.infer(s.stream, "vgg").unwrap().outputs_verified,
                Some(true)
            );
        }
    });
    for _ in 0..4 {
        let r = admin.infer(s.stream, "resnet152").unwrap();
        assert_eq!(r.outputs_verified, Some(true));
    }
    rt.join().unwrap();
    assert_eq!(d.log().matches("padded launch").count(), before);
    assert_eq!(admin.stats().unwrap().padded_launches, before as u64);

    // `reefctl policy reef-dkp-mv`: padding with multi-version kernels.
    let out = d.reefctl(&["policy", "reef-dkp-mv"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(admin.status().unwrap().policy, "reef-dkp-mv");
    let mut rtc = d.client();
    let rt = std::thread::spawn(move || {
        let s = rtc.register(Priority::Rt, Some("rt3")).unwrap();
        for _ in 0..8 {
            std::thread::sleep(Duration::from_millis(4));
            assert_eq!(
                rtc.infer(s.stream, "vgg").unwrap().outputs_verified,
                Some(true)
            );
        }
    });
    for _ in 0..5 {
        let r = admin.infer(s.stream, "resnet152").unwrap();
        assert_eq!(r.outputs_verified, Some(true));
    }
    rt.join().unwrap();
    let after = d.log().matches("padded launch").count();
    assert!(after > before);
    let stats = admin.stats().unwrap();
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.padded_launches, after as u64, "{stats:?}");
}
