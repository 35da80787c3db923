//! Hardware queues (docs/simulator.md "Hardware queues"): how streams map
//! onto the device's queues and what sharing one does.

mod common;

use common::{drain, event_time, tags};
use reef_sim::*;
use std::sync::Arc;

fn spec(hw_queues: u32) -> DeviceSpec {
    let mut s = DeviceSpec::preset("mi50").unwrap();
    s.hw_queues = hw_queues;
    s
}

/// 60 one-block-per-CU blocks of `us` microseconds: one wave on the MI50.
fn kernel(sp: &DeviceSpec, us: u64) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("k", 60, 64, 0, 0, vec![us * 1000], sp).unwrap())
}

#[test]
fn streams_map_round_robin_per_priority() {
    let mut sim = Sim::new(spec(4), SimConfig::default());
    let normal: Vec<StreamId> = (0..6).map(|_| sim.create_stream(0, 4).unwrap()).collect();
    let high = sim.create_stream(1, 4).unwrap();
    let q: Vec<u32> = normal
        .iter()
        .map(|&s| sim.hw_queue_of(s).unwrap())
        .collect();
    // Four queues of priority 0, then the least used ones again.
    assert_eq!(q, vec![0, 1, 2, 3, 0, 1]);
    // Another priority opens its own queue.
    assert_eq!(sim.hw_queue_of(high), Some(4));
    assert_eq!(sim.hw_queue_of(StreamId(99)), None);
    // A stream with its own queue neither joins the pool nor takes a slot
    // of it: the next pooled stream still goes to the least used queue.
    let own = sim.create_stream_own_queue(0, 4).unwrap();
    assert_eq!(sim.hw_queue_of(own), Some(5));
    let next = sim.create_stream(0, 4).unwrap();
    assert_eq!(sim.hw_queue_of(next), Some(2));
}

#[test]
fn own_queues_do_not_serialise() {
    // One pooled queue: two pooled streams serialise (see below), two
    // streams with their own queues run side by side.
    let sp = spec(1);
    let k = kernel(&sp, 100);
    let mut sim = Sim::new(sp, SimConfig::default());
    let a = sim.create_stream_own_queue(0, 4).unwrap();
    let b = sim.create_stream_own_queue(0, 4).unwrap();
    let ia = sim
        .launch(a, KernelLaunch::new(k.clone(), tags(1)))
        .unwrap();
    let ib = sim.launch(b, KernelLaunch::new(k, tags(2))).unwrap();
    let evs = drain(&mut sim);
    assert_eq!(event_time(&evs, ia, EventKind::Completed), 110_000);
    assert_eq!(event_time(&evs, ib, EventKind::Completed), 110_000);
}

#[test]
fn streams_sharing_a_queue_serialise_in_write_order() {
    // Two streams, each a 100 us kernel launched at t = 0 (A first). With a
    // queue each they run side by side (60 blocks each fit together); on one
    // shared queue B's packet is behind A's and waits for A's completion
    // (the barrier), then pays the dispatch.
    for (hwq, b_done) in [(2, 110_000), (1, 212_000)] {
        let sp = spec(hwq);
        let k = kernel(&sp, 100);
        let mut sim = Sim::new(sp, SimConfig::default());
        let a = sim.create_stream(0, 4).unwrap();
        let b = sim.create_stream(0, 4).unwrap();
        let ia = sim
            .launch(a, KernelLaunch::new(k.clone(), tags(1)))
            .unwrap();
        let ib = sim.launch(b, KernelLaunch::new(k, tags(2))).unwrap();
        let evs = drain(&mut sim);
        // Host 4 + fetch 4 + dispatch 2 us, then 100 us of blocks.
        assert_eq!(event_time(&evs, ia, EventKind::Completed), 110_000);
        assert_eq!(
            event_time(&evs, ib, EventKind::Completed),
            b_done,
            "hw_queues {hwq}"
        );
    }
}

#[test]
fn a_later_packet_of_the_first_stream_waits_behind_the_other() {
    // One queue: A writes k1, B writes k2, A writes k3 (host launches of one
    // stream are serialised, so A's second write lands after B's first).
    // The queue runs them in write order k1, k2, k3.
    let sp = spec(1);
    let k = kernel(&sp, 50);
    let mut sim = Sim::new(sp, SimConfig::default());
    let a = sim.create_stream(0, 4).unwrap();
    let b = sim.create_stream(0, 4).unwrap();
    let i1 = sim
        .launch(a, KernelLaunch::new(k.clone(), tags(1)))
        .unwrap();
    let i2 = sim
        .launch(b, KernelLaunch::new(k.clone(), tags(2)))
        .unwrap();
    let i3 = sim.launch(a, KernelLaunch::new(k, tags(3))).unwrap();
    let evs = drain(&mut sim);
    let (t1, t2, t3) = (
        event_time(&evs, i1, EventKind::Started),
        event_time(&evs, i2, EventKind::Started),
        event_time(&evs, i3, EventKind::Started),
    );
    assert!(t1 < t2 && t2 < t3, "{t1} {t2} {t3}");
    // Each starts a dispatch (2 us) after the previous one completed.
    assert_eq!(t2, event_time(&evs, i1, EventKind::Completed) + 2_000);
    assert_eq!(t3, event_time(&evs, i2, EventKind::Completed) + 2_000);
}

#[test]
fn clearing_a_stream_frees_a_shared_queue_for_the_other() {
    // A's two kernels are ahead of B's on one queue. Clearing A's device
    // queue while its first kernel is being fetched lets B's packet go next.
    let sp = spec(1);
    let k = kernel(&sp, 100);
    let mut sim = Sim::new(sp, SimConfig::default());
    let a = sim.create_stream(0, 4).unwrap();
    let b = sim.create_stream(0, 4).unwrap();
    sim.launch(a, KernelLaunch::new(k.clone(), tags(1)))
        .unwrap();
    sim.launch(a, KernelLaunch::new(k.clone(), tags(2)))
        .unwrap();
    let ib = sim.launch(b, KernelLaunch::new(k, tags(3))).unwrap();
    // A's first packet is visible at 4 us and fetched until 8 us.
    sim.advance_to(5_000);
    let cleared = sim.clear_queue(a).unwrap();
    assert_eq!(cleared.len(), 2);
    let evs = drain(&mut sim);
    // B's packet has been visible since 4 us (its own host launch); it is
    // fetched (4 us) and dispatched (2 us) from the clear at 5 us, then runs
    // 100 us.
    assert_eq!(
        event_time(&evs, ib, EventKind::Completed),
        5_000 + 6_000 + 100_000
    );
    assert!(sim.stream_idle(a) && sim.stream_idle(b));
}

#[test]
fn zero_hw_queues_is_refused_with_the_field_named() {
    let text = include_str!("../devices/mi50.toml").replace("hw_queues = 4", "hw_queues = 0");
    let err = DeviceSpec::parse(std::path::Path::new("x.toml"), &text).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("hw_queues"), "{msg}");
}
