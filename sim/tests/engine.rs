//! Engine behaviour: timing of the launch path and of block waves, occupancy
//! limits, CU masks, block ranges, preemption primitives, value tracking and
//! determinism.

use reef_model::{default_models_dir, load_named};
mod common;

use common::drain;
use reef_sim::*;
use std::sync::Arc;

fn mi50() -> DeviceSpec {
    DeviceSpec::preset("mi50").unwrap()
}

fn shape(blocks: u32, threads: u32, lds: u32, curve: Vec<u64>) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("k", blocks, threads, lds, 0, curve, &mi50()).unwrap())
}

fn tags(task: u64, kernel: u32) -> Tags {
    Tags {
        task,
        kernel,
        user: 0,
    }
}

/// Runs until idle, checking invariants after every step.
fn completion(evs: &[DeviceEvent], id: LaunchId) -> u64 {
    evs.iter()
        .find(|e| e.launch == id && e.kind == EventKind::Completed)
        .unwrap_or_else(|| panic!("{id:?} did not complete: {evs:?}"))
        .time
}

const PATH: u64 = 10_000; // host 4 + fetch 4 + dispatch 2 us on mi50

#[test]
fn waves_follow_occupancy_and_curve() {
    // 256-thread blocks: 10 per CU by waves (40 / 4). 1200 blocks on 60 CUs
    // = 2 waves of 10 per CU at latency[9].
    let curve: Vec<u64> = (1..=10).map(|k| 1000 * k).collect();
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim
        .launch(
            s,
            KernelLaunch::new(shape(1200, 256, 0, curve.clone()), tags(0, 0)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    assert_eq!(completion(&evs, id), PATH + 2 * 10_000);

    // LDS limits co-residency: 40 KiB per block leaves one block per CU.
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim
        .launch(
            s,
            KernelLaunch::new(shape(120, 64, 40 << 10, curve), tags(0, 0)),
        )
        .unwrap();
    let mut max_blocks = 0;
    let mut evs = Vec::new();
    while let Some((_, e)) = sim.step() {
        max_blocks = max_blocks.max((0..60).map(|c| sim.cu_usage(c).blocks).max().unwrap());
        evs.extend(e);
    }
    assert_eq!(max_blocks, 1);
    assert_eq!(completion(&evs, id), PATH + 2 * 1000);
}

#[test]
fn back_to_back_hides_fetch_and_host_launch() {
    // Two kernels on one stream: the second's fetch overlaps the first's
    // execution, so only the dispatch separates them.
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let a = sim
        .launch(
            s,
            KernelLaunch::new(shape(60, 64, 0, vec![50_000]), tags(0, 0)),
        )
        .unwrap();
    let b = sim
        .launch(
            s,
            KernelLaunch::new(shape(60, 64, 0, vec![50_000]), tags(0, 1)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    let (ta, tb) = (completion(&evs, a), completion(&evs, b));
    assert_eq!(ta, PATH + 50_000);
    assert_eq!(tb, ta + mi50().cp_dispatch_ns + 50_000);
}

#[test]
fn queue_capacity_and_cu_mask_and_block_range() {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let k = shape(600, 64, 0, vec![1000; 40]);
    sim.launch(s, KernelLaunch::new(k.clone(), tags(0, 0)))
        .unwrap();
    sim.launch(s, KernelLaunch::new(k.clone(), tags(0, 1)))
        .unwrap();
    let e = sim
        .launch(s, KernelLaunch::new(k.clone(), tags(0, 2)))
        .unwrap_err();
    assert_eq!(
        e,
        SimError::QueueFull {
            stream: 0,
            capacity: 2
        }
    );
    assert_eq!(sim.queue_len(s), 2);
    drain(&mut sim);
    assert_eq!(sim.queue_len(s), 0);
    // An effectively unbounded queue is fine.
    let big = sim.create_stream(0, usize::MAX).unwrap();
    sim.launch(big, KernelLaunch::new(k.clone(), tags(0, 3)))
        .unwrap();
    assert_eq!(sim.queue_capacity(big), usize::MAX);

    // A CU mask confines blocks; a block range runs only those blocks.
    let cfg = SimConfig {
        record_blocks: true,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(mi50(), cfg);
    let s = sim.create_stream(0, 4).unwrap();
    let mask = CuSet::range(10, 14);
    let id = sim
        .launch(
            s,
            KernelLaunch::new(k.clone(), tags(0, 0))
                .with_blocks(100..300)
                .with_cus(mask),
        )
        .unwrap();
    drain(&mut sim);
    let recs: Vec<_> = sim
        .block_records()
        .iter()
        .filter(|r| r.launch == id)
        .collect();
    assert!(recs.iter().all(|r| r.cus.minus(&mask).is_empty()));
    let mut ranges: Vec<_> = recs.iter().map(|r| r.blocks.clone()).collect();
    ranges.sort_by_key(|r| r.start);
    assert_eq!(ranges.first().unwrap().start, 100);
    assert_eq!(ranges.last().unwrap().end, 300);
    assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
    // A shape built for a device with more LDS per CU cannot run here.
    let h100 = DeviceSpec::preset("h100").unwrap();
    let big =
        Arc::new(KernelShape::synthetic("big", 4, 64, 100_000, 0, vec![1000], &h100).unwrap());
    assert!(matches!(
        sim.launch(s, KernelLaunch::new(big, tags(0, 0))),
        Err(SimError::DoesNotFit { .. })
    ));
    // Bad ranges and masks are refused.
    assert!(matches!(
        sim.launch(
            s,
            KernelLaunch::new(k.clone(), tags(0, 0)).with_blocks(5..5)
        ),
        Err(SimError::BadBlockRange { .. })
    ));
    assert!(matches!(
        sim.launch(
            s,
            KernelLaunch::new(k, tags(0, 0)).with_cus(CuSet::range(100, 120))
        ),
        Err(SimError::EmptyCuSet { .. })
    ));
}

/// A long BE kernel (3 full waves of 10 us) and a later one-wave kernel on
/// another stream; returns the second kernel's completion time.
fn second_stream_completion(priority: i32) -> u64 {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let be = sim.create_stream(0, 4).unwrap();
    let rt = sim.create_stream(priority, 4).unwrap();
    let big = shape(60 * 40 * 3, 64, 0, vec![10_000; 40]);
    let b = sim.launch(be, KernelLaunch::new(big, tags(1, 0))).unwrap();
    sim.advance_to(PATH + 1000);
    let r = sim
        .launch(
            rt,
            KernelLaunch::new(shape(60, 64, 0, vec![10_000; 40]), tags(2, 0)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    assert!(completion(&evs, b) >= PATH + 30_000);
    completion(&evs, r)
}

#[test]
fn priority_stream_places_first() {
    // The second kernel is dispatched at 21 us while the BE waves fill every
    // CU (waves end at 20, 30, 40 us). With a higher priority it takes the
    // space freed at 30 us ahead of the BE kernel's last wave; with equal
    // priority it waits for dispatch order, until 40 us.
    assert_eq!(second_stream_completion(10), PATH + 30_000);
    assert_eq!(second_stream_completion(0), PATH + 40_000);
}

#[test]
fn preempt_flag_evicts_at_kernel_entry() {
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    sim.set_preempt_flag(s, true).unwrap();
    let buf = BufferId(9);
    let id = sim
        .launch(
            s,
            KernelLaunch::new(shape(60, 64, 0, vec![50_000]), tags(3, 0))
                .with_buffers(vec![], vec![buf]),
        )
        .unwrap();
    let evs = drain(&mut sim);
    let ev = evs.iter().find(|e| e.launch == id).unwrap();
    assert_eq!(ev.kind, EventKind::Evicted);
    assert_eq!(ev.time, PATH + spec.flag_check_ns);
    assert_eq!(ev.tags, tags(3, 0));
    // No block ran and the output is untouched.
    assert!(!evs.iter().any(|e| e.kind == EventKind::Started));
    assert_eq!(sim.values().get(buf), ValueTracker::initial(buf));
}

/// REEF §4.3 Fig. 8: the flag is read by every block at its dispatch
/// (issue 26). A kernel of N = 120 blocks with one block per CU (40 KiB of
/// LDS each) restricted to k = 20 CUs runs k blocks per wave; the flag set
/// during the first wave lets those k blocks finish and the other N - k
/// exit at entry. The kernel ends as a GPU's would (its completion event
/// fires) after exactly those k blocks, and its output is partly written
/// until the whole kernel runs again.
#[test]
fn a_kernel_flagged_after_k_blocks_started_runs_exactly_those() {
    let spec = mi50();
    let (a, b) = (BufferId(1), BufferId(2));
    let (n, k) = (120u32, 20usize);
    let kern = shape(n, 64, 40 << 10, vec![30_000]);
    let launch = || {
        KernelLaunch::new(kern.clone(), tags(0, 0))
            .with_buffers(vec![a], vec![b])
            .with_cus(CuSet::range(0, k))
    };
    let mut reference = ValueTracker::new();
    reference.complete(kern.identity, &[a], &[b], 0..n as u64, n as u64);

    let cfg = SimConfig {
        record_blocks: true,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(spec.clone(), cfg);
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim.launch(s, launch()).unwrap();
    // The first wave (k blocks) is placed at PATH; flag during it.
    let mut evs = sim.advance_to(PATH + 10_000);
    assert!(evs
        .iter()
        .any(|e| e.launch == id && e.kind == EventKind::Started));
    assert_eq!(sim.resident_blocks(), k as u64);
    sim.set_preempt_flag(s, true).unwrap();
    evs.extend(drain(&mut sim));
    let end = evs
        .iter()
        .find(|e| e.launch == id && e.kind != EventKind::Started);
    let end = end.expect("the kernel ends");
    // Its running blocks finish at PATH + 30 us, then the rest exit at
    // their entry check.
    assert_eq!(end.kind, EventKind::Completed);
    assert_eq!(end.time, PATH + 30_000 + spec.flag_check_ns);
    let ran: Vec<_> = sim
        .block_records()
        .iter()
        .filter(|r| r.launch == id)
        .collect();
    let blocks: u32 = ran.iter().map(|r| r.blocks.len() as u32).sum();
    assert_eq!(blocks, k as u32, "{ran:?}");
    assert!(ran
        .iter()
        .all(|r| r.outcome == BlockOutcome::Finished && r.blocks.end <= k as u32));
    assert!(sim.stream_idle(s));
    // Only those blocks wrote: the output is corrupted...
    assert_eq!(sim.values().diff(&reference, &[b]).len(), 1);
    // ...until the kernel is executed again, whole.
    sim.set_preempt_flag(s, false).unwrap();
    let again = sim.launch(s, launch()).unwrap();
    let evs = drain(&mut sim);
    assert!(evs
        .iter()
        .any(|e| e.launch == again && e.kind == EventKind::Completed));
    assert!(sim.values().diff(&reference, &[b]).is_empty());

    // A kernel whose blocks were all placed before the flag (60 blocks on
    // 60 CUs) runs whole.
    let one_wave = shape(60, 64, 40 << 10, vec![30_000]);
    let mut reference = ValueTracker::new();
    reference.complete(one_wave.identity, &[a], &[b], 0..60, 60);
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim
        .launch(
            s,
            KernelLaunch::new(one_wave, tags(0, 0)).with_buffers(vec![a], vec![b]),
        )
        .unwrap();
    sim.advance_to(PATH + 10_000);
    sim.set_preempt_flag(s, true).unwrap();
    let evs = drain(&mut sim);
    assert_eq!(completion(&evs, id), PATH + 30_000);
    assert!(sim.values().diff(&reference, &[b]).is_empty());
}

/// A flagged block needs a CU slot to run its check: a kernel dispatched
/// while the flag is set behind a kernel of another stream that fills
/// every CU exits only once a slot frees, and then in one check time.
#[test]
fn flagged_blocks_exit_once_they_get_a_cu() {
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let busy = sim.create_stream(1, 4).unwrap();
    let s = sim.create_stream(0, 4).unwrap();
    let fill = shape(60, 64, 40 << 10, vec![50_000]);
    sim.launch(busy, KernelLaunch::new(fill.clone(), tags(1, 0)))
        .unwrap();
    sim.advance_to(1_000);
    sim.set_preempt_flag(s, true).unwrap();
    let id = sim.launch(s, KernelLaunch::new(fill, tags(2, 0))).unwrap();
    let evs = drain(&mut sim);
    let e = evs.iter().find(|e| e.launch == id).unwrap();
    assert_eq!(e.kind, EventKind::Evicted);
    assert_eq!(e.time, PATH + 50_000 + spec.flag_check_ns);
}

#[test]
fn kill_corrupts_and_restore_matches_reference() {
    let spec = mi50();
    let (a, b, c) = (BufferId(1), BufferId(2), BufferId(3));
    let k1 = shape(600, 64, 0, vec![30_000; 40]);
    let k2 = shape(600, 64, 0, vec![30_000; 40]);
    let l1 = || KernelLaunch::new(k1.clone(), tags(0, 0)).with_buffers(vec![a], vec![b]);
    let l2 = || KernelLaunch::new(k2.clone(), tags(0, 1)).with_buffers(vec![b], vec![c]);

    // Reference: unpreempted.
    let mut refsim = Sim::new(spec.clone(), SimConfig::default());
    let s = refsim.create_stream(0, 4).unwrap();
    refsim.launch(s, l1()).unwrap();
    refsim.launch(s, l2()).unwrap();
    drain(&mut refsim);

    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    sim.launch(s, l1()).unwrap();
    let second = sim.launch(s, l2()).unwrap();
    // Kill while the second kernel runs.
    let t_kill = PATH + 30_000 + spec.cp_dispatch_ns + 5_000;
    sim.advance_to(t_kill);
    assert!(sim.busy_cus() > 0);
    sim.kill_stream(s).unwrap();
    let evs = drain(&mut sim);
    let killed = evs.iter().find(|e| e.launch == second).unwrap();
    assert_eq!(killed.kind, EventKind::Killed { blocks_done: 0 });
    assert_eq!(killed.time, t_kill + spec.kill_latency_ns);
    assert_eq!(sim.busy_cus(), 0);
    assert_eq!(
        sim.values().diff(refsim.values(), &[a, b, c]),
        vec![Mismatch {
            buffer: c,
            got: sim.values().get(c),
            expected: refsim.values().get(c)
        }]
    );
    // Restore from the killed kernel (idempotent): outputs match again.
    sim.launch(s, l2()).unwrap();
    drain(&mut sim);
    assert!(sim.values().diff(refsim.values(), &[a, b, c]).is_empty());
}

/// A kill takes the running threads only (REEF §4.6 "Kernel killing":
/// inactive blocks "are then evicted by the preemptor in Figure 8 since
/// they have not been executed yet"): a kernel dispatched under the flag
/// with no room for its blocks when the kill lands is not killed, writes
/// nothing and ends evicted once a CU frees up. Two ping-pong kernels on
/// the GV100 (15 us trap): k1 reads A and writes B, k2 reads B and writes
/// A, as TVM reuses storage (resnet152's dense and softmax). k1 finishes
/// under the flag before the kill lands, so the restore re-runs it (REEF
/// §4.4: the execution index names it) and reads A, which k2 never
/// touched. Before the fix the kill marked A corrupted and the restored
/// request's outputs differed from an unpreempted run (what `reef-bench
/// disb C --device gv100 --check-values` found under every preempting
/// policy).
#[test]
fn kill_spares_a_kernel_none_of_whose_blocks_ran() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    let sh = |blocks, dur| {
        Arc::new(KernelShape::synthetic("k", blocks, 1024, 0, 0, vec![dur; 2], &spec).unwrap())
    };
    // Two 1024-thread blocks fill an SM (2048 threads): 160 blocks fill all 80.
    let (k1, k2, rt) = (sh(160, 20_000), sh(160, 20_000), sh(160, 100_000));
    let (a, b) = (BufferId(1), BufferId(2));
    let l1 = || KernelLaunch::new(k1.clone(), tags(0, 0)).with_buffers(vec![a], vec![b]);
    let l2 = || KernelLaunch::new(k2.clone(), tags(0, 1)).with_buffers(vec![b], vec![a]);

    let mut refsim = Sim::new(spec.clone(), SimConfig::default());
    let s = refsim.create_stream_own_queue(0, 4).unwrap();
    refsim.launch(s, l1()).unwrap();
    refsim.launch(s, l2()).unwrap();
    drain(&mut refsim);

    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let be = sim.create_stream_own_queue(0, 4).unwrap();
    let rts = sim.create_stream_own_queue(0, 4).unwrap();
    let first = sim.launch(be, l1()).unwrap();
    let second = sim.launch(be, l2()).unwrap();
    // The real-time kernel is dispatched after k1 and waits for its SMs.
    let mut evs = sim.advance_to(1_000);
    let rt_id = sim.launch(rts, KernelLaunch::new(rt, tags(1, 0))).unwrap();
    // Preempt while k1 runs (it started at 10 us and ends at 30 us).
    let t = 25_000;
    evs.extend(sim.advance_to(t));
    sim.set_preempt_flag(be, true).unwrap();
    sim.kill_stream(be).unwrap();
    evs.extend(drain(&mut sim));
    let ev = |id| evs.iter().rfind(|e| e.launch == id).unwrap();
    // k1 ran whole before the kill; the real-time kernel took every SM;
    // k2, dispatched at 32 us, had no room when the kill landed at 40 us.
    assert_eq!(ev(first).kind, EventKind::Completed);
    assert!(ev(first).time < t + spec.kill_latency_ns);
    assert_eq!(ev(second).kind, EventKind::Evicted);
    assert_eq!(
        ev(second).time,
        ev(rt_id).time + spec.flag_check_ns,
        "k2 exits at its check once the real-time kernel frees the SMs"
    );
    assert!(!evs
        .iter()
        .any(|e| matches!(e.kind, EventKind::Killed { .. })));
    // A still holds the request's input: nothing of k2 ran.
    assert_eq!(sim.values().get(a), ValueTracker::initial(a));
    // The restore re-runs k1 (its completion came under the flag) and k2.
    sim.set_preempt_flag(be, false).unwrap();
    sim.launch(be, l1()).unwrap();
    sim.launch(be, l2()).unwrap();
    drain(&mut sim);
    assert!(sim.values().diff(refsim.values(), &[a, b]).is_empty());
}

#[test]
fn clear_queue_and_levels() {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let k = shape(60, 64, 0, vec![10_000]);
    let ids: Vec<_> = (0..3)
        .map(|i| {
            sim.launch(s, KernelLaunch::new(k.clone(), tags(0, i)))
                .unwrap()
        })
        .collect();
    let removed = sim.clear_queue(s).unwrap();
    assert_eq!(removed, ids);
    assert_eq!(sim.queue_len(s), 0);
    let evs = drain(&mut sim);
    assert!(evs.iter().all(|e| e.kind == EventKind::Cleared));
    assert_eq!(evs.len(), 3);
    assert_eq!(
        sim.preempt_levels(),
        vec![
            PreemptLevel::EvictHostQueue,
            PreemptLevel::PreemptFlag,
            PreemptLevel::KillRunning
        ]
    );

    let text = include_str!("../devices/mi50.toml")
        .replace("preempt_levels = [1, 2, 3]", "preempt_levels = [1]");
    let spec = DeviceSpec::parse(std::path::Path::new("x.toml"), &text).unwrap();
    let mut sim = Sim::new(spec, SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    assert!(matches!(
        sim.set_preempt_flag(s, true),
        Err(SimError::Unsupported { .. })
    ));
    assert!(matches!(sim.kill_all(), Err(SimError::Unsupported { .. })));
}

#[test]
fn spec_errors_name_file_and_field() {
    let e = DeviceSpec::parse(std::path::Path::new("bad.toml"), "name = 3").unwrap_err();
    assert!(
        e.to_string().starts_with("bad.toml: invalid device spec"),
        "{e}"
    );
    let text =
        include_str!("../devices/mi50.toml").replace("compute_units = 60", "compute_units = 0");
    let e = DeviceSpec::parse(std::path::Path::new("z.toml"), &text).unwrap_err();
    assert!(e.to_string().contains("z.toml: compute_units"), "{e}");
    // Limits the engine cannot represent and times that could overflow the
    // clock are refused, naming the field.
    for (from, to, field) in [
        (
            "max_threads_per_cu = 2560",
            "max_threads_per_cu = 16777216",
            "max_threads_per_cu",
        ),
        (
            "memory_bandwidth_bytes_per_s = 1024000000000",
            "memory_bandwidth_bytes_per_s = 0",
            "memory_bandwidth_bytes_per_s",
        ),
        (
            "host_launch_ns = 4000",
            "host_launch_ns = 9223372036854775807",
            "host_launch_ns",
        ),
    ] {
        let text = include_str!("../devices/mi50.toml").replace(from, to);
        assert_ne!(text, include_str!("../devices/mi50.toml"), "{from}");
        let e = DeviceSpec::parse(std::path::Path::new("z.toml"), &text).unwrap_err();
        assert!(e.to_string().contains(&format!("z.toml: {field}")), "{e}");
    }
    // A block longer than the simulator's limit is a shape error.
    let e = KernelShape::synthetic("long", 1, 64, 0, 0, vec![u64::MAX / 2], &mi50()).unwrap_err();
    assert!(e.to_string().contains("longer than"), "{e}");
    assert!(DeviceSpec::preset("tpu").is_err());
    for p in PRESETS {
        DeviceSpec::preset(p).unwrap();
    }
}

/// Two streams running VGG and ResNet concurrently, with jitter, a flag
/// and a kill in the middle.
fn mixed_trace(seed: u64) -> Vec<DeviceEvent> {
    let spec = mi50();
    let dir = default_models_dir();
    let cfg = SimConfig {
        seed,
        jitter: 0.05,
        record_blocks: false,
    };
    let mut sim = Sim::new(spec.clone(), cfg);
    let mut host = HostQueues::new();
    let mut trace = Vec::new();
    let mut streams = Vec::new();
    for (i, name) in ["vgg", "resnet152"].iter().enumerate() {
        let m = load_named(&dir, name).unwrap();
        let shapes = KernelShape::for_model(&m, &spec).unwrap();
        let s = sim.create_stream(i as i32, 4).unwrap();
        for (j, sh) in shapes.iter().enumerate() {
            host.submit(s, KernelLaunch::new(sh.clone(), tags(i as u64, j as u32)));
        }
        streams.push(s);
    }
    host.pump(&mut sim).unwrap();
    let mut killed = false;
    while let Some((t, evs)) = sim.step() {
        sim.check_invariants().unwrap();
        // Kill VGG just as one of its kernels starts (its kernels all run
        // longer than the kill latency), so that the kill hits running blocks.
        let vgg_started = evs
            .iter()
            .any(|e| e.stream == streams[0] && e.kind == EventKind::Started);
        trace.extend(evs);
        if !killed && t > 2_000_000 && vgg_started {
            killed = true;
            sim.kill_stream(streams[0]).unwrap();
            host.reset(streams[0]);
        }
        host.pump(&mut sim).unwrap();
    }
    trace
}

#[test]
fn same_seed_same_trace() {
    let a = mixed_trace(42);
    let b = mixed_trace(42);
    assert!(a.len() > 200);
    assert_eq!(a, b);
    assert!(a.iter().any(|e| matches!(e.kind, EventKind::Killed { .. })));
    let c = mixed_trace(43);
    assert_ne!(a, c, "jitter must depend on the seed");
}

#[test]
fn wall_clock_paces_simulated_time() {
    // 20 ms of simulated work, paced by the wall clock, cannot finish in
    // less than 20 ms of real time; virtual time finishes at the same
    // simulated instant.
    let k = shape(60, 64, 0, vec![20_000_000]);
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim
        .launch(s, KernelLaunch::new(k.clone(), tags(0, 0)))
        .unwrap();
    let mut clock = WallClock::new(0);
    let t0 = std::time::Instant::now();
    let evs = sim.advance_with_clock(&mut clock, PATH + 20_000_000);
    assert!(t0.elapsed() >= std::time::Duration::from_millis(20));
    assert_eq!(completion(&evs, id), PATH + 20_000_000);

    let mut sim = Sim::new(mi50(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let id = sim.launch(s, KernelLaunch::new(k, tags(0, 0))).unwrap();
    let evs = sim.advance_with_clock(&mut VirtualClock, PATH + 20_000_000);
    assert_eq!(completion(&evs, id), PATH + 20_000_000);
}

#[test]
fn device_memory_is_bounded() {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let total = mi50().memory_bytes;
    sim.alloc(total - 10).unwrap();
    assert_eq!(
        sim.alloc(11),
        Err(SimError::OutOfMemory {
            requested: 11,
            free: 10,
            total
        })
    );
    sim.free(100);
    sim.alloc(110).unwrap();
    assert_eq!(sim.memory_used(), total);
}

#[test]
fn reset_based_preemption_of_a_full_queue() {
    // A BE stream runs a long kernel with a full 4-deep device queue behind
    // it. Reset-based preemption (REEF §4): set the flag, kill the CUs. The
    // queued kernels are evicted one after the other; the stream is empty
    // kill + 4 x (dispatch + flag check) later = 35 us on mi50, inside the
    // 30-38 us REEF reports for reset-based preemption (§6.4, Fig. 18).
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let long = shape(60, 64, 0, vec![1_000_000]);
    let mut host = HostQueues::new();
    for i in 0..5 {
        host.submit(s, KernelLaunch::new(long.clone(), tags(0, i)));
    }
    host.pump(&mut sim).unwrap();
    sim.advance_to(200_000);
    host.pump(&mut sim).unwrap();
    assert_eq!(sim.queue_len(s), 4);
    let t = sim.now();
    sim.set_preempt_flag(s, true).unwrap();
    sim.kill_stream(s).unwrap();
    let evs = drain(&mut sim);
    assert!(matches!(evs[0].kind, EventKind::Killed { .. }));
    assert_eq!(evs[0].time, t + spec.kill_latency_ns);
    let evicted: Vec<u64> = evs
        .iter()
        .filter(|e| e.kind == EventKind::Evicted)
        .map(|e| e.time)
        .collect();
    assert_eq!(evicted.len(), 4);
    let per = spec.cp_dispatch_ns + spec.flag_check_ns;
    let expected = spec.kill_latency_ns + 4 * per;
    assert_eq!(*evicted.last().unwrap() - t, expected);
    assert!((30_000..=38_000).contains(&expected), "{expected}");
    assert!(sim.stream_idle(s));
}

#[test]
fn padded_launch_dispatches_parts_together() {
    // REEF Fig. 12: an RT kernel on CUs 0..20 padded with a BE kernel on
    // CUs 20..60 is one launch: one queue slot, one launch path, both parts
    // start together; the stream's next kernel waits for both.
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let rt =
        KernelLaunch::new(shape(20, 64, 0, vec![30_000]), tags(1, 0)).with_cus(CuSet::range(0, 20));
    let be = KernelLaunch::new(shape(40, 64, 0, vec![50_000]), tags(2, 7))
        .with_cus(CuSet::range(20, 60));
    let ids = sim.launch_padded(s, vec![rt, be]).unwrap();
    assert_eq!(sim.queue_len(s), 1);
    let next = sim
        .launch(
            s,
            KernelLaunch::new(shape(60, 64, 0, vec![10_000]), tags(3, 0)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    let started: Vec<u64> = evs
        .iter()
        .filter(|e| e.kind == EventKind::Started && ids.contains(&e.launch))
        .map(|e| e.time)
        .collect();
    assert_eq!(started, vec![PATH, PATH]);
    // Each part's blocks pay the dkp kernel's cost (REEF §6.5 Fig. 25).
    let p = padded_block_ns;
    assert_eq!(completion(&evs, ids[0]), PATH + p(30_000));
    assert_eq!(completion(&evs, ids[1]), PATH + p(50_000));
    assert_eq!(
        completion(&evs, next),
        PATH + p(50_000) + spec.cp_dispatch_ns + 10_000
    );
    let be_ev = evs.iter().find(|e| e.launch == ids[1]).unwrap();
    assert_eq!(be_ev.tags, tags(2, 7));

    // The flag evicts every part; a kill kills the parts still running.
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    sim.set_preempt_flag(s, true).unwrap();
    let parts = || {
        vec![
            KernelLaunch::new(shape(20, 64, 0, vec![30_000]), tags(1, 0)),
            KernelLaunch::new(shape(40, 64, 0, vec![50_000]), tags(2, 0)),
        ]
    };
    let ids = sim.launch_padded(s, parts()).unwrap();
    let evs = drain(&mut sim);
    for id in &ids {
        let e = evs.iter().find(|e| e.launch == *id).unwrap();
        assert_eq!(e.kind, EventKind::Evicted);
    }
    sim.set_preempt_flag(s, false).unwrap();
    let ids = sim.launch_padded(s, parts()).unwrap();
    let mut evs = sim.advance_to(sim.now() + PATH + 40_000);
    sim.kill_stream(s).unwrap();
    evs.extend(drain(&mut sim));
    let kinds: Vec<EventKind> = ids
        .iter()
        .map(|id| evs.iter().rev().find(|e| e.launch == *id).unwrap().kind)
        .collect();
    assert_eq!(
        kinds,
        vec![EventKind::Completed, EventKind::Killed { blocks_done: 0 }]
    );
    assert!(sim.stream_idle(s));
    assert!(matches!(
        sim.launch_padded(s, vec![]),
        Err(SimError::EmptyPaddedLaunch)
    ));
}
