//! Process contexts (docs/simulator.md "Contexts"; issue 26): on an NVIDIA
//! preset kernels of two contexts never run at the same time (CUDA C
//! Programming Guide, "Concurrent Kernel Execution"), the device switches
//! when the running context idles or when its time slice (the open
//! driver's default channel-group timeslice, 1024 us) ends while another
//! waits, and a switch costs `context_switch_ns`. On the MI50 the hardware
//! scheduler runs up to 8 processes at once.

mod common;

use common::{drain, event_time};
use reef_sim::*;
use std::collections::HashSet;
use std::sync::Arc;

fn shape(spec: &DeviceSpec, blocks: u32, ns: u64) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("k", blocks, 64, 0, 0, vec![ns], spec).unwrap())
}

fn tags(task: u64, kernel: u32) -> Tags {
    Tags {
        task,
        kernel,
        user: 0,
    }
}

fn recording(spec: &DeviceSpec) -> Sim {
    Sim::new(
        spec.clone(),
        SimConfig {
            record_blocks: true,
            ..SimConfig::default()
        },
    )
}

/// Block records of the launches in `ids`, as (start, end).
fn spans(sim: &Sim, ids: &HashSet<LaunchId>) -> Vec<(u64, u64)> {
    sim.block_records()
        .iter()
        .filter(|r| ids.contains(&r.launch))
        .map(|r| (r.start, r.end))
        .collect()
}

fn assert_disjoint(a: &[(u64, u64)], b: &[(u64, u64)]) {
    for x in a {
        for y in b {
            assert!(
                x.1 <= y.0 || y.1 <= x.0,
                "blocks of two contexts overlap: {x:?} and {y:?}"
            );
        }
    }
}

#[test]
fn kernels_of_two_contexts_never_overlap() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    let mut sim = recording(&spec);
    let (a, b) = (sim.create_context(), sim.create_context());
    let mut ids = [HashSet::new(), HashSet::new()];
    // Two streams per context, kernels of 20-60 us, small enough that
    // both contexts would fit on the device together.
    let mut streams = Vec::new();
    for (i, c) in [a, a, b, b].into_iter().enumerate() {
        streams.push((i / 2, sim.create_stream_in(c, 0, 64, false).unwrap()));
    }
    for k in 0..12u32 {
        for &(i, s) in &streams {
            let sh = shape(&spec, 16 + 4 * k, 20_000 + 3_000 * (k as u64 + i as u64));
            let id = sim
                .launch(s, KernelLaunch::new(sh, tags(i as u64, k)))
                .unwrap();
            ids[i].insert(id);
        }
    }
    let evs = drain(&mut sim);
    let done = evs
        .iter()
        .filter(|e| e.kind == EventKind::Completed)
        .count();
    assert_eq!(done, 48);
    let (sa, sb) = (spans(&sim, &ids[0]), spans(&sim, &ids[1]));
    assert!(!sa.is_empty() && !sb.is_empty());
    assert_disjoint(&sa, &sb);
    assert!(sim.context_switches() >= 1);

    // The same launches in one context run concurrently: the contexts,
    // not the load, kept them apart.
    let mut one = recording(&spec);
    let s0 = one.create_stream(0, 64).unwrap();
    let s1 = one.create_stream(0, 64).unwrap();
    let x = one
        .launch(s0, KernelLaunch::new(shape(&spec, 16, 50_000), tags(0, 0)))
        .unwrap();
    let y = one
        .launch(s1, KernelLaunch::new(shape(&spec, 16, 50_000), tags(1, 0)))
        .unwrap();
    drain(&mut one);
    let (px, py) = (
        spans(&one, &HashSet::from([x])),
        spans(&one, &HashSet::from([y])),
    );
    assert!(px[0].0 < py[0].1 && py[0].0 < px[0].1, "{px:?} {py:?}");
}

#[test]
fn a_context_switch_happens_when_the_running_context_idles() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    let mut sim = recording(&spec);
    let (a, b) = (sim.create_context(), sim.create_context());
    let sa = sim.create_stream_in(a, 0, 4, false).unwrap();
    let sb = sim.create_stream_in(b, 0, 4, false).unwrap();
    let ka = sim
        .launch(sa, KernelLaunch::new(shape(&spec, 80, 100_000), tags(0, 0)))
        .unwrap();
    let kb = sim
        .launch(sb, KernelLaunch::new(shape(&spec, 80, 100_000), tags(1, 0)))
        .unwrap();
    let evs = drain(&mut sim);
    // Both dispatched at 10 us (host 4 + fetch 4 + dispatch 2); A came in
    // first and ran alone; once it idled the device switched to B.
    let path = spec.host_launch_ns + spec.cp_fetch_ns + spec.cp_dispatch_ns;
    let a_end = event_time(&evs, ka, EventKind::Completed);
    assert_eq!(a_end, path + 100_000);
    assert_eq!(
        event_time(&evs, kb, EventKind::Started),
        a_end + spec.context_switch_ns
    );
    assert_eq!(sim.context_switches(), 1);
}

#[test]
fn a_context_switch_happens_when_the_time_slice_ends() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    assert_eq!(spec.context_timeslice_ns, 1_024_000);
    let mut sim = recording(&spec);
    let (a, b) = (sim.create_context(), sim.create_context());
    let sa = sim.create_stream_in(a, 0, 64, false).unwrap();
    let sb = sim.create_stream_in(b, 0, 4, false).unwrap();
    // A: 30 kernels of 100 us back to back (3 ms of work, never idle).
    let mut a_ids = HashSet::new();
    for k in 0..30 {
        let id = sim
            .launch(sa, KernelLaunch::new(shape(&spec, 80, 100_000), tags(0, k)))
            .unwrap();
        a_ids.insert(id);
    }
    // B: one kernel, ready at the same time.
    let kb = sim
        .launch(sb, KernelLaunch::new(shape(&spec, 80, 100_000), tags(1, 0)))
        .unwrap();
    let evs = drain(&mut sim);
    let path = spec.host_launch_ns + spec.cp_fetch_ns + spec.cp_dispatch_ns;
    let slice_end = path + spec.context_timeslice_ns;
    // A's blocks running at the slice end finish; none starts after it
    // until B has run.
    let a_spans = spans(&sim, &a_ids);
    let boundary = a_spans
        .iter()
        .filter(|s| s.0 < slice_end)
        .map(|s| s.1)
        .max()
        .unwrap();
    assert!(boundary >= slice_end && boundary < slice_end + 100_000);
    let b_start = event_time(&evs, kb, EventKind::Started);
    assert_eq!(b_start, boundary + spec.context_switch_ns);
    let b_end = event_time(&evs, kb, EventKind::Completed);
    assert_eq!(b_end, b_start + 100_000);
    // A comes back after B idles, paying the switch again.
    let next_a = a_spans
        .iter()
        .map(|s| s.0)
        .filter(|&t| t > boundary)
        .min()
        .unwrap();
    assert_eq!(next_a, b_end + spec.context_switch_ns);
    assert_eq!(sim.context_switches(), 2);
    assert_disjoint(&a_spans, &spans(&sim, &HashSet::from([kb])));
}

#[test]
fn the_mi50_runs_contexts_concurrently_up_to_its_hws_limit() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    assert_eq!(spec.concurrent_contexts, 8);
    let mut sim = recording(&spec);
    let mut ids = Vec::new();
    for i in 0..9u64 {
        let c = sim.create_context();
        let s = sim.create_stream_in(c, 0, 4, false).unwrap();
        ids.push(
            sim.launch(s, KernelLaunch::new(shape(&spec, 4, 100_000), tags(i, 0)))
                .unwrap(),
        );
    }
    let evs = drain(&mut sim);
    let starts: Vec<u64> = ids
        .iter()
        .map(|&id| event_time(&evs, id, EventKind::Started))
        .collect();
    // Eight start together; the ninth waits until one idles and is mapped
    // beside the seven still resident (no switch: nothing is swapped out).
    let path = spec.host_launch_ns + spec.cp_fetch_ns + spec.cp_dispatch_ns;
    let mut sorted = starts.clone();
    sorted.sort_unstable();
    assert_eq!(&sorted[..8], &[path; 8], "{starts:?}");
    assert_eq!(sorted[8], path + 100_000, "{starts:?}");
    assert_eq!(sim.context_switches(), 0);
}

/// An idle context keeps its slot until a waiting context needs it: on the
/// MI50 (8 slots) a context arriving after another idled starts at once;
/// on the GV100 (1 slot) it pays the switch.
#[test]
fn an_idle_context_keeps_its_slot_until_another_needs_it() {
    for (preset, switched) in [("mi50", false), ("gv100", true)] {
        let spec = DeviceSpec::preset(preset).unwrap();
        let mut sim = recording(&spec);
        let (a, b) = (sim.create_context(), sim.create_context());
        let sa = sim.create_stream_in(a, 0, 4, false).unwrap();
        let sb = sim.create_stream_in(b, 0, 4, false).unwrap();
        sim.launch(sa, KernelLaunch::new(shape(&spec, 4, 50_000), tags(0, 0)))
            .unwrap();
        drain(&mut sim);
        let t = sim.now() + 100_000;
        sim.advance_to(t);
        let kb = sim
            .launch(sb, KernelLaunch::new(shape(&spec, 4, 50_000), tags(1, 0)))
            .unwrap();
        let evs = drain(&mut sim);
        let path = spec.host_launch_ns + spec.cp_fetch_ns + spec.cp_dispatch_ns;
        let cost = if switched { spec.context_switch_ns } else { 0 };
        assert_eq!(
            event_time(&evs, kb, EventKind::Started),
            t + path + cost,
            "{preset}"
        );
        assert_eq!(sim.context_switches(), switched as u64, "{preset}");
    }
}

/// A context whose host issues its next kernel some time after the last
/// one finished (a framework's per-operator host work) idles in between,
/// and the device gives the other context, which always has work, the GPU
/// then; the first context's next kernel waits until that context's time
/// slice has ended (the runlist does not preempt a channel group with work
/// before its timeslice expires when another becomes ready; docs/simulator.md
/// "Contexts").
#[test]
fn a_host_paced_context_waits_for_the_busy_ones_slice_at_every_launch() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    let mut sim = recording(&spec);
    let (a, b) = (sim.create_context(), sim.create_context());
    let sa = sim.create_stream_in(a, 0, 4, false).unwrap();
    let sb = sim.create_stream_in(b, 0, 64, false).unwrap();
    // B: 60 kernels of 100 us back to back (6 ms of work, never idle).
    for k in 0..60 {
        sim.launch(sb, KernelLaunch::new(shape(&spec, 80, 100_000), tags(1, k)))
            .unwrap();
    }
    // A: a 20 us kernel, the next one issued 200 us after the last ended.
    let gap = 200_000;
    let mut a_lat = Vec::new();
    let mut next_issue = Some(0u64);
    let mut k = 0;
    let mut cur: Option<(LaunchId, u64)> = None;
    loop {
        let t_ev = sim.next_event_time();
        let t = match (t_ev, next_issue) {
            (Some(e), Some(i)) => e.min(i),
            (Some(e), None) => e,
            (None, Some(i)) => i,
            (None, None) => break,
        };
        let evs = sim.advance_to(t);
        if next_issue == Some(t) && cur.is_none() {
            let id = sim
                .launch(sa, KernelLaunch::new(shape(&spec, 80, 20_000), tags(0, k)))
                .unwrap();
            cur = Some((id, t));
            next_issue = None;
            k += 1;
        }
        for e in evs {
            if let Some((id, t0)) = cur {
                if e.launch == id && e.kind == EventKind::Completed {
                    a_lat.push(e.time - t0);
                    cur = None;
                    next_issue = (k < 5).then_some(e.time + gap);
                }
            }
        }
    }
    eprintln!("A's kernel latencies (issue to completion): {a_lat:?}");
    // Every kernel of A after the first waits for B's slice to end.
    for &l in &a_lat[1..] {
        assert!(l > spec.context_timeslice_ns / 2, "A's latencies {a_lat:?}");
    }
}
