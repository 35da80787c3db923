//! Parts of a padded launch that wait for an earlier part
//! (`KernelLaunch::after`: a grid-wide barrier inside one persistent
//! launch, CUDA C++ Programming Guide "Grid Synchronization").

mod common;

use common::drain;
use reef_sim::*;
use std::sync::Arc;

fn mi50() -> DeviceSpec {
    DeviceSpec::preset("mi50").unwrap()
}

fn shape(blocks: u32, curve: Vec<u64>) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("k", blocks, 64, 0, 0, curve, &mi50()).unwrap())
}

fn tags(task: u64, kernel: u32) -> Tags {
    Tags {
        task,
        kernel,
        user: 0,
    }
}

fn last(evs: &[DeviceEvent], id: LaunchId) -> DeviceEvent {
    *evs.iter().rev().find(|e| e.launch == id).unwrap()
}

fn first_start(evs: &[DeviceEvent], id: LaunchId) -> u64 {
    evs.iter()
        .find(|e| e.launch == id && e.kind == EventKind::Started)
        .unwrap()
        .time
}

/// RT part on CUs 0..20 (50 us), BE kernel 7 on 20..60 (20 us), then BE
/// kernel 8 on the same CUs once kernel 7's blocks are done.
fn parts(delay: u64) -> Vec<KernelLaunch> {
    vec![
        KernelLaunch::new(shape(20, vec![50_000]), tags(1, 0)).with_cus(CuSet::range(0, 20)),
        KernelLaunch::new(shape(40, vec![20_000]), tags(2, 7)).with_cus(CuSet::range(20, 60)),
        KernelLaunch {
            after: Some((1, delay)),
            ..KernelLaunch::new(shape(40, vec![15_000]), tags(2, 8)).with_cus(CuSet::range(20, 60))
        },
    ]
}

#[test]
fn a_waiting_part_starts_its_delay_after_the_part_it_waits_for() {
    let spec = mi50();
    let path = spec.launch_path_ns();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let ids = sim.launch_padded(s, parts(2_000)).unwrap();
    let evs = drain(&mut sim);
    // Every block of a padded launch pays the dkp kernel's cost.
    let p = padded_block_ns;
    assert_eq!(first_start(&evs, ids[1]), path);
    assert_eq!(last(&evs, ids[1]).time, path + p(20_000));
    // Not before the barrier, although its CUs were free all along.
    assert_eq!(first_start(&evs, ids[2]), path + p(20_000) + 2_000);
    let e = last(&evs, ids[2]);
    assert_eq!(e.kind, EventKind::Completed);
    assert_eq!(e.time, path + p(20_000) + 2_000 + p(15_000));
    assert_eq!(last(&evs, ids[0]).time, path + p(50_000));
    assert!(sim.stream_idle(s));

    // Without the wait the same part starts with the others.
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let mut p = parts(2_000);
    p[2].after = None;
    p[2].cus = Some(CuSet::range(20, 60));
    let ids = sim.launch_padded(s, p).unwrap();
    let evs = drain(&mut sim);
    assert_eq!(first_start(&evs, ids[2]), path);
}

#[test]
fn a_waiting_part_ends_with_the_flag_or_the_kill_of_its_launch() {
    let spec = mi50();
    // Flag set before dispatch: every part exits at its check.
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    sim.set_preempt_flag(s, true).unwrap();
    let ids = sim.launch_padded(s, parts(2_000)).unwrap();
    let evs = drain(&mut sim);
    for id in &ids {
        assert_eq!(last(&evs, *id).kind, EventKind::Evicted);
    }
    assert!(sim.stream_idle(s));
    // A kill while the first BE part runs: the waiting part is discarded
    // unplaced, killed with the others.
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let ids = sim.launch_padded(s, parts(2_000)).unwrap();
    let mut evs = sim.advance_to(spec.launch_path_ns() + 10_000);
    sim.kill_stream(s).unwrap();
    evs.extend(drain(&mut sim));
    for id in &ids {
        assert!(matches!(last(&evs, *id).kind, EventKind::Killed { .. }));
    }
    assert!(!evs
        .iter()
        .any(|e| e.launch == ids[2] && e.kind == EventKind::Started));
    assert!(sim.stream_idle(s));
}

#[test]
fn a_part_may_wait_only_for_an_earlier_part_of_a_padded_launch() {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let mut p = parts(0);
    p[1].after = Some((2, 0));
    assert!(matches!(
        sim.launch_padded(s, p),
        Err(SimError::BadAfter { part: 1, after: 2 })
    ));
    let l = KernelLaunch {
        after: Some((0, 0)),
        ..KernelLaunch::new(shape(4, vec![1_000]), tags(1, 0))
    };
    assert!(matches!(sim.launch(s, l), Err(SimError::BadAfter { .. })));
}
