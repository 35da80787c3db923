//! End to end: reefd on sim:mi50 with the `reef-nodkp` policy serves RT vgg and BE
//! resnet152 clients; BE work is preempted by the scheduler (RT arrivals,
//! REEF §3.2 Fig. 6) and by an operator (`reefctl preempt`, then `resume`);
//! every inference's outputs must equal an unpreempted run's (value
//! tracking, DESIGN.md), so no request loses or corrupts data.

mod common;

use common::{wait_until, Daemon};
use reefd::protocol::{Priority, TaskInfo, TaskResult, TaskState};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn rt_and_be_clients_with_preemption_keep_every_output_correct() {
    let d = Daemon::start("");
    let mut admin = d.client();
    let status = admin.status().unwrap();
    assert_eq!(status.policy, "reef");
    assert!(status.preemption_levels.contains(&3), "{status:?}");
    admin.load_model("vgg", None).unwrap();
    admin.load_model("resnet152", None).unwrap();

    let (stream_tx, stream_rx) = mpsc::channel();
    let mut be = Vec::new();
    for i in 0..2 {
        let mut c = d.client();
        let tx = stream_tx.clone();
        be.push(std::thread::spawn(move || -> Vec<TaskResult> {
            let s = c.register(Priority::Be, Some(&format!("be{i}"))).unwrap();
            tx.send(s.stream).unwrap();
            (0..20)
                .map(|_| c.infer(s.stream, "resnet152").unwrap())
                .collect()
        }));
    }
    let be_streams: Vec<u64> = (0..2).map(|_| stream_rx.recv().unwrap()).collect();
    let mut rtc = d.client();
    let rt = std::thread::spawn(move || -> Vec<TaskResult> {
        let s = rtc.register(Priority::Rt, Some("rt")).unwrap();
        (0..15)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(3));
                rtc.infer(s.stream, "vgg").unwrap()
            })
            .collect()
    });

    // The operator preempts the first BE stream while it runs, checks that
    // its task is reported preempted, and resumes it.
    let target = be_streams[0].to_string();
    assert!(wait_until(Duration::from_secs(10), || {
        admin
            .tasks()
            .unwrap()
            .iter()
            .any(|t| t.stream == be_streams[0] && t.state == TaskState::Running)
    }));
    let out = d.reefctl(&["--json", "preempt", "--stream", &target]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["streams"], serde_json::json!([be_streams[0]]));
    std::thread::sleep(Duration::from_millis(30));
    let out = d.reefctl(&["--json", "tasks"]);
    let tasks: Vec<TaskInfo> = serde_json::from_slice(&out.stdout).unwrap();
    let paused: Vec<&TaskInfo> = tasks.iter().filter(|t| t.stream == be_streams[0]).collect();
    assert_eq!(paused.len(), 1, "{tasks:?}");
    assert_eq!(paused[0].state, TaskState::Preempted, "{tasks:?}");
    let progress = paused[0].next_kernel;
    std::thread::sleep(Duration::from_millis(30));
    // Stopped means stopped: no progress while preempted.
    let again = admin.tasks().unwrap();
    let same = again.iter().find(|t| t.task == paused[0].task).unwrap();
    assert_eq!(same.next_kernel, progress);
    assert_eq!(same.state, TaskState::Preempted);
    let out = d.reefctl(&["resume", "--stream", &target]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let rt_results = rt.join().unwrap();
    let be_results: Vec<TaskResult> = be.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(rt_results.len(), 15);
    assert_eq!(be_results.len(), 40);
    for r in rt_results.iter().chain(&be_results) {
        assert_eq!(
            r.outputs_verified,
            Some(true),
            "outputs differ from an unpreempted run: {r:?}"
        );
    }
    let preempted_be = be_results.iter().filter(|r| r.preemptions > 0).count();
    assert!(preempted_be > 0, "no BE inference was ever preempted");
    // The operator's target task was preempted at least once.
    assert!(be_results
        .iter()
        .any(|r| r.stream == be_streams[0] && r.preemptions > 0));
    // RT requests are not slowed down by the BE load beyond the preemption
    // cost: within 1.5x of stand-alone (REEF §6.3 reports 1.02-1.10x).
    let worst = rt_results
        .iter()
        .filter_map(|r| r.normalized_latency)
        .fold(0.0f64, f64::max);
    assert!(worst < 1.5, "worst RT normalized latency {worst}");

    let stats = admin.stats().unwrap();
    assert_eq!(stats.corrupted_outputs, 0);
    assert!(stats.restores >= preempted_be as u64);
    assert!(stats.preemptions.values().sum::<u64>() > 0, "{stats:?}");
    assert_eq!(stats.tasks_completed, 55);
    assert!(admin.tasks().unwrap().is_empty());
}
