//! Property tests (issue 2 "Must show"): under random kernels, streams,
//! launches (with block ranges and CU masks), preempt flags, kills and queue
//! clears, no compute unit ever exceeds its limits, every launched block runs
//! exactly once (or is cut by a kill), and no device queue ever holds more
//! than its capacity.

use proptest::prelude::*;
use reef_sim::*;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct KSpec {
    blocks: u32,
    threads: u32,
    lds: u32,
    regs: u32,
    curve: Vec<u64>,
    /// DRAM bytes per block (shared memory bandwidth): up to ~6x an MI50
    /// CU's share of the bandwidth over a 10 us block, so co-running
    /// launches oversubscribe it.
    dram: u64,
}

#[derive(Debug, Clone)]
enum Op {
    Launch {
        stream: usize,
        kernel: usize,
        range: Option<(u32, u32)>,
        mask: Option<(usize, usize)>,
        /// A second part (padded launch, REEF Fig. 12): kernel and CU mask.
        pad: Option<(usize, (usize, usize))>,
    },
    Flag {
        stream: usize,
        on: bool,
    },
    Kill {
        stream: usize,
    },
    KillAll,
    Clear {
        stream: usize,
    },
}

fn kspec() -> impl Strategy<Value = KSpec> {
    (
        1u32..1500,
        prop::sample::select(vec![32u32, 64, 128, 256, 512, 1024]),
        prop::sample::select(vec![0u32, 1024, 8192, 20_000, 65_536]),
        prop::sample::select(vec![0u32, 4096, 16_384, 65_536]),
        prop::collection::vec(500u64..50_000, 1..8),
        0u64..1_000_000,
    )
        .prop_map(|(blocks, threads, lds, regs, curve, dram)| KSpec {
            blocks,
            threads,
            lds,
            regs,
            curve,
            dram,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4, 0usize..6, prop::option::of((0u32..1000, 0u32..1000)),
              prop::option::of((0usize..60, 1usize..20)),
              prop::option::of((0usize..6, (0usize..60, 1usize..30))))
            .prop_map(|(stream, kernel, range, mask, pad)| Op::Launch { stream, kernel, range, mask, pad }),
        1 => (0usize..4, any::<bool>()).prop_map(|(stream, on)| Op::Flag { stream, on }),
        1 => (0usize..4).prop_map(|stream| Op::Kill { stream }),
        1 => Just(Op::KillAll),
        1 => (0usize..4).prop_map(|stream| Op::Clear { stream }),
    ]
}

fn check_step(sim: &mut Sim, until: u64, events: &mut Vec<DeviceEvent>) {
    while let Some(t) = sim.next_event_time() {
        if t > until {
            break;
        }
        events.extend(sim.advance_to(t));
        if let Err(e) = sim.check_invariants() {
            panic!("at {t} ns: {e}");
        }
    }
    events.extend(sim.advance_to(until));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn limits_blocks_once_queue_capacity(
        kernels in prop::collection::vec(kspec(), 6),
        streams in prop::collection::vec((-2i32..3, 1usize..6), 4),
        ops in prop::collection::vec((0u64..60_000, op()), 1..60),
        spec_name in prop::sample::select(vec!["mi50", "gv100", "h100"]),
    ) {
        let spec = DeviceSpec::preset(spec_name).unwrap();
        let ncu = spec.compute_units as usize;
        let shapes: Vec<Option<Arc<KernelShape>>> = kernels
            .iter()
            .map(|k| {
                KernelShape::synthetic("p", k.blocks, k.threads, k.lds, k.regs, k.curve.clone(), &spec)
                    .ok()
                    .map(|s| Arc::new(s.with_dram_bytes(k.dram)))
            })
            .collect();
        let cfg = SimConfig { seed: 1, jitter: 0.1, record_blocks: true };
        let mut sim = Sim::new(spec, cfg);
        let ids: Vec<StreamId> = streams
            .iter()
            .map(|&(p, c)| sim.create_stream(p, c).unwrap())
            .collect();
        let mut launched: HashMap<LaunchId, Range<u32>> = HashMap::new();
        let mut flagged_any = false;
        let mut events = Vec::new();
        for (dt, op) in ops {
            let until = sim.now() + dt;
            check_step(&mut sim, until, &mut events);
            match op {
                Op::Launch { stream, kernel, range, mask, pad } => {
                    let Some(sh) = shapes[kernel].clone() else { continue };
                    let mut l = KernelLaunch::new(sh.clone(), Tags::default());
                    let mut r = 0..sh.blocks;
                    if let Some((a, b)) = range {
                        let (a, b) = (a % sh.blocks, b % sh.blocks);
                        let (s, e) = (a.min(b), a.max(b) + 1);
                        r = s..e;
                        l = l.with_blocks(r.clone());
                    }
                    if let Some((s, n)) = mask {
                        l = l.with_cus(CuSet::range(s % ncu, (s % ncu + n).min(ncu)));
                    }
                    let mut parts = vec![(l, r)];
                    if let Some((k2, (s, n))) = pad {
                        if let Some(sh2) = shapes[k2].clone() {
                            let mask = CuSet::range(s % ncu, (s % ncu + n).min(ncu));
                            let r2 = 0..sh2.blocks;
                            parts.push((KernelLaunch::new(sh2, Tags::default()).with_cus(mask), r2));
                        }
                    }
                    let ranges: Vec<Range<u32>> = parts.iter().map(|p| p.1.clone()).collect();
                    let reqs: Vec<KernelLaunch> = parts.into_iter().map(|p| p.0).collect();
                    let st = ids[stream];
                    let full = sim.queue_len(st) >= sim.queue_capacity(st);
                    match sim.launch_padded(st, reqs) {
                        Ok(lids) => {
                            prop_assert!(!full);
                            prop_assert_eq!(lids.len(), ranges.len());
                            for (id, r) in lids.into_iter().zip(ranges) {
                                launched.insert(id, r);
                            }
                        }
                        Err(SimError::QueueFull { .. }) => prop_assert!(full),
                        Err(e) => panic!("unexpected {e}"),
                    }
                    prop_assert!(sim.queue_len(st) <= sim.queue_capacity(st));
                }
                Op::Flag { stream, on } => {
                    flagged_any |= on;
                    sim.set_preempt_flag(ids[stream], on).unwrap()
                }
                Op::Kill { stream } => sim.kill_stream(ids[stream]).unwrap(),
                Op::KillAll => sim.kill_all().unwrap(),
                Op::Clear { stream } => {
                    sim.clear_queue(ids[stream]).unwrap();
                }
            }
        }
        // Let everything finish (clear flags so nothing is left waiting).
        for &s in &ids {
            sim.set_preempt_flag(s, false).unwrap();
        }
        check_step(&mut sim, u64::MAX / 4, &mut events);
        prop_assert_eq!(sim.resident_blocks(), 0);

        // Exactly one terminal event per launch.
        let mut terminal: HashMap<LaunchId, EventKind> = HashMap::new();
        for e in &events {
            if e.kind != EventKind::Started {
                prop_assert!(terminal.insert(e.launch, e.kind).is_none(), "two outcomes for {:?}", e.launch);
            }
        }
        prop_assert_eq!(terminal.len(), launched.len());

        // Blocks: disjoint, inside the launch's range; a completed launch's
        // finished groups cover the range exactly once.
        let mut by_launch: HashMap<LaunchId, Vec<&BlockRecord>> = HashMap::new();
        for r in sim.block_records() {
            prop_assert!(r.outcome != BlockOutcome::Running);
            by_launch.entry(r.launch).or_default().push(r);
        }
        for (id, range) in &launched {
            let mut recs = by_launch.remove(id).unwrap_or_default();
            recs.sort_by_key(|r| r.blocks.start);
            for w in recs.windows(2) {
                prop_assert!(w[0].blocks.end <= w[1].blocks.start, "overlapping blocks");
            }
            for r in &recs {
                prop_assert!(r.blocks.start >= range.start && r.blocks.end <= range.end);
                prop_assert_eq!(r.blocks.len() as u32, r.per_cu * r.cus.len() as u32);
            }
            match terminal[id] {
                EventKind::Completed => {
                    // Every block ran, or (its stream's flag set while
                    // blocks of it waited) a prefix of its range ran and
                    // the rest exited at their flag check (REEF §4.3).
                    prop_assert!(recs.iter().all(|r| r.outcome == BlockOutcome::Finished));
                    let covered: u32 = recs.iter().map(|r| r.blocks.len() as u32).sum();
                    prop_assert!(covered >= 1 && covered <= range.len() as u32);
                    prop_assert_eq!(recs[0].blocks.start, range.start);
                    for w in recs.windows(2) {
                        prop_assert_eq!(w[0].blocks.end, w[1].blocks.start);
                    }
                    if !flagged_any {
                        prop_assert_eq!(covered, range.len() as u32);
                    }
                }
                EventKind::Killed { blocks_done } => {
                    let fin: u32 = recs
                        .iter()
                        .filter(|r| r.outcome == BlockOutcome::Finished)
                        .map(|r| r.blocks.len() as u32)
                        .sum();
                    prop_assert_eq!(fin, blocks_done);
                }
                EventKind::Evicted | EventKind::Cleared => prop_assert!(recs.is_empty()),
                EventKind::Started => unreachable!(),
            }
        }
        prop_assert!(by_launch.is_empty(), "blocks of unknown launches");
    }
}

/// One VGG inference on one stream, killed at `kill_at` (ns) together with a
/// queue clear and a host-queue reset (reset-based preemption, REEF §4), then
/// restored by re-launching from the first kernel that did not complete or
/// the one the execution index names (REEF §4.4: TVM kernels are
/// idempotent). Returns the sim's final values
/// and whether anything was killed.
fn vgg_with_kill(kill_at: u64, restore: bool) -> (ValueTracker, bool) {
    use reef_model::{default_models_dir, load_named};
    let spec = DeviceSpec::preset("mi50").unwrap();
    let m = load_named(&default_models_dir(), "vgg").unwrap();
    let shapes = KernelShape::for_model(&m, &spec).unwrap();
    let launch = |i: usize| {
        let k = &m.kernels[i];
        KernelLaunch::new(
            shapes[i].clone(),
            Tags {
                task: 0,
                kernel: i as u32,
                user: 0,
            },
        )
        .with_buffers(
            k.reads.iter().map(|&b| BufferId(b as u64)).collect(),
            k.writes.iter().map(|&b| BufferId(b as u64)).collect(),
        )
    };
    let mut sim = Sim::new(spec, SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let mut host = HostQueues::new();
    for i in 0..m.kernels.len() {
        host.submit(s, launch(i));
    }
    host.pump(&mut sim).unwrap();
    let mut done = vec![false; m.kernels.len()];
    let mut killed = false;
    let mut preempted = false;
    let mut index = None;
    loop {
        let next = sim.next_event_time();
        if !preempted && next.is_none_or(|t| t > kill_at) {
            sim.advance_to(kill_at);
            preempted = true;
            sim.set_preempt_flag(s, true).unwrap();
            sim.kill_stream(s).unwrap();
            host.reset(s);
            continue;
        }
        let Some(t) = next else { break };
        for e in sim.advance_to(t) {
            match e.kind {
                EventKind::Started => index = Some(e.tags.kernel as usize),
                EventKind::Completed => done[e.tags.kernel as usize] = true,
                EventKind::Killed { .. } => killed = true,
                _ => {}
            }
        }
        if preempted && sim.stream_idle(s) && sim.preempt_flag(s) {
            // Preemption finished: restore from the first incomplete
            // kernel, or from the one the execution index names when its
            // completion came under the flag (it may have run partly:
            // REEF §4.3-4.4).
            sim.set_preempt_flag(s, false).unwrap();
            if restore {
                let first = done.iter().position(|d| !d);
                let first = match (first, index) {
                    (Some(f), Some(i)) => Some(f.min(i)),
                    (f, i) => f.or(i),
                };
                if let Some(first) = first {
                    for i in first..m.kernels.len() {
                        host.submit(s, launch(i));
                    }
                }
            }
        }
        host.pump(&mut sim).unwrap();
    }
    (sim.values().clone(), killed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Value tracking: a kill leaves outputs that differ from an unpreempted
    /// run unless the work is restored; restoring from the first incomplete
    /// kernel gives exactly the unpreempted outputs.
    #[test]
    fn restore_after_kill_matches_unpreempted_run(kill_at in 20_000u64..4_700_000) {
        let (reference, _) = vgg_with_kill(u64::MAX / 2, true);
        let buffers: Vec<BufferId> = (0..113).map(BufferId).collect();
        let (restored, _) = vgg_with_kill(kill_at, true);
        prop_assert!(restored.diff(&reference, &buffers).is_empty());
        let (abandoned, killed) = vgg_with_kill(kill_at, false);
        let diff = abandoned.diff(&reference, &buffers);
        prop_assert!(!diff.is_empty(), "an abandoned inference cannot match");
        if killed {
            prop_assert!(abandoned.corruptions() > 0);
        }
    }
}
