//! The `aker`, `baymax` and `tacker` managers (Aker §8.3, §9.3) driven
//! through the scheduler on a serial scripted device: the headroom is
//! recomputed here, independently of the manager, from what the test saw
//! (arrivals, launches, completions), and every fused kernel and every BE
//! launch beside an active LC query is checked against it (Eq. 4, Eq. 5).

use proptest::prelude::*;
use reef_sched::aker::{
    AkerConfig, AkerScheduler, Fusion, KClass, KernelPred, Line, Manager, Predictor, TwoStage,
};
use reef_sched::dkp::DkpAction;
use reef_sched::*;
use std::collections::{HashMap, VecDeque};

#[derive(Clone)]
struct Table {
    kernels: Vec<Vec<KernelPred>>,
    fusion: TwoStage,
    ratio: (u32, u32),
}

impl Predictor for Table {
    fn kernel(&self, m: ModelId, k: u32) -> KernelPred {
        self.kernels[m.0 as usize][k as usize]
    }
    fn fusion(&mut self, _: (ModelId, u32), _: (ModelId, u32)) -> Option<Fusion> {
        (self.fusion.reduction() > 0.0).then_some(Fusion {
            ratio: self.ratio,
            model: self.fusion,
        })
    }
}

fn class(i: u8) -> KClass {
    match i % 3 {
        0 => KClass::ComputePrefer,
        1 => KClass::MemoryPrefer,
        _ => KClass::Tensor,
    }
}

struct Outcome {
    stats: reef_sched::aker::AkerStats,
    fused: u64,
    rt_done: usize,
    rt_arrived: usize,
    be_done: usize,
    /// (predicted extra time, headroom recomputed here) per fused launch.
    fuse_checks: Vec<(f64, f64)>,
    /// (predicted time, headroom recomputed here) per BE launch made while
    /// an LC query was active.
    be_checks: Vec<(f64, f64)>,
}

struct Q {
    req: RequestId,
    model: usize,
    arrival: f64,
    qos: f64,
    launched: u32,
}

/// Runs `mgr` with LC model 0 (RT client 0, queries at `arrivals`) and BE
/// model 1 (client 1, back to back) on a serial device whose kernels take
/// `truth` × their prediction. Checks coverage of every BE kernel's blocks
/// (each block in exactly one launch) on the way.
fn run(mgr: Manager, table: Table, arrivals: &[u64], truth: f64, qos_x: f64) -> Outcome {
    let models = vec![
        ModelInfo::idempotent("lc", table.kernels[0].len() as u32),
        ModelInfo::idempotent("be", table.kernels[1].len() as u32),
    ];
    let clients = vec![
        ClientSpec {
            name: "lc".into(),
            model: ModelId(0),
            class: Class::RealTime,
        },
        ClientSpec {
            name: "be".into(),
            model: ModelId(1),
            class: Class::BestEffort,
        },
    ];
    let cfg = AkerConfig {
        qos_x,
        ..AkerConfig::default()
    };
    let model_ns: Vec<f64> = table
        .kernels
        .iter()
        .map(|ks| ks.iter().map(|k| k.solo_ns).sum())
        .collect();
    let mut s = AkerScheduler::new(
        mgr,
        cfg,
        Box::new(table.clone()),
        Config::default(),
        models,
        clients,
    )
    .unwrap();
    // Device: serial FIFO of (reported tag, duration).
    let mut queue: VecDeque<(KernelTag, u64)> = VecDeque::new();
    let mut running: Option<(KernelTag, u64)> = None;
    let mut now = 0u64;
    let mut ai = 0usize;
    let mut seq = 0u64;
    let mut queries: Vec<Q> = Vec::new();
    let mut free_at = 0.0f64;
    let mut outstanding = 0usize;
    let mut covered: HashMap<KernelTag, Vec<bool>> = HashMap::new();
    let mut out = Outcome {
        stats: Default::default(),
        fused: 0,
        rt_done: 0,
        rt_arrived: 0,
        be_done: 0,
        fuse_checks: Vec::new(),
        be_checks: Vec::new(),
    };
    let pk = |m: u32, k: u32| table.kernels[m as usize][k as usize];
    let be_req = |n: u64| RequestId(1 << 40 | n);
    let mut be_seq = 0u64;
    s.handle(
        0,
        Event::RequestArrived {
            req: be_req(0),
            client: ClientId(1),
            deadline: None,
        },
    );
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 200_000, "no progress");
        // Apply actions.
        while let Some(a) = s.poll_action() {
            let t = free_at.max(now as f64);
            let hr = {
                let mut acc = 0.0;
                let mut hr = f64::INFINITY;
                for q in &queries {
                    let n = table.kernels[q.model].len() as u32;
                    acc += (q.launched..n)
                        .map(|k| pk(q.model as u32, k).solo_ns)
                        .sum::<f64>();
                    hr = hr.min(q.qos - (t - q.arrival) - acc);
                }
                hr
            };
            let mut cover = |tag: KernelTag, m: u32, r: std::ops::Range<u32>| {
                let c = covered
                    .entry(tag)
                    .or_insert_with(|| vec![false; pk(m, tag.kernel).blocks as usize]);
                for b in r {
                    assert!(!c[b as usize], "block {b} of {tag:?} launched twice");
                    c[b as usize] = true;
                }
            };
            let lc_launch = |queries: &mut Vec<Q>, req: RequestId| {
                if let Some(q) = queries.iter_mut().find(|q| q.req == req) {
                    q.launched += 1;
                }
            };
            match a {
                DkpAction::Core(Action::Launch { tag, .. }) => {
                    let is_lc = tag.req.0 >> 40 == 0;
                    let m = if is_lc { 0 } else { 1 };
                    let p = pk(m, tag.kernel);
                    if is_lc {
                        lc_launch(&mut queries, tag.req);
                    } else {
                        cover(tag, 1, 0..p.blocks);
                        if !queries.is_empty() {
                            out.be_checks.push((p.solo_ns, hr));
                        }
                    }
                    free_at = t + p.solo_ns;
                    queue.push_back((tag, (p.solo_ns * truth) as u64));
                    outstanding += 1;
                }
                DkpAction::Rest { tag, blocks, .. } => {
                    let p = pk(1, tag.kernel);
                    let d = p.solo_ns / p.blocks as f64 * blocks.len() as f64;
                    cover(tag, 1, blocks);
                    if !queries.is_empty() {
                        out.be_checks.push((d, hr));
                    }
                    free_at = t + d;
                    queue.push_back((tag, (d * truth) as u64));
                    outstanding += 1;
                }
                DkpAction::Fused(f) => {
                    out.fused += 1;
                    let lp = pk(0, f.lc.kernel);
                    let bp = pk(1, f.be.kernel);
                    let part = bp.solo_ns / bp.blocks as f64 * f.be_blocks.len() as f64;
                    let fused = table.fusion.predict(lp.solo_ns, part);
                    assert_eq!(f.ratio, table.ratio);
                    assert!(
                        (fused - f.predicted_ns as f64).abs() <= 1.0,
                        "{fused} vs {}",
                        f.predicted_ns
                    );
                    out.fuse_checks.push((fused - lp.solo_ns, hr));
                    cover(f.be, 1, f.be_blocks.clone());
                    lc_launch(&mut queries, f.lc.req);
                    free_at = t + fused;
                    queue.push_back((f.lc, (fused * truth) as u64));
                    outstanding += 1;
                }
                DkpAction::Core(Action::RequestDone { req, client }) => {
                    if client == ClientId(0) {
                        out.rt_done += 1;
                        queries.retain(|q| q.req != req);
                    } else {
                        out.be_done += 1;
                        for (t, c) in covered.iter().filter(|(t, _)| t.req == req) {
                            assert!(c.iter().all(|&b| b), "{t:?} not fully run");
                        }
                        if ai < arrivals.len() {
                            be_seq += 1;
                            s.handle(
                                now,
                                Event::RequestArrived {
                                    req: be_req(be_seq),
                                    client: ClientId(1),
                                    deadline: None,
                                },
                            );
                        }
                    }
                }
                DkpAction::Core(_) => {}
                DkpAction::Padded(_) => panic!("aker managers never pad"),
            }
        }
        if running.is_none() {
            if let Some((tag, d)) = queue.pop_front() {
                running = Some((tag, now + d.max(1)));
                s.handle(
                    now,
                    Event::KernelStarted {
                        stream: StreamId(0),
                        tag,
                    },
                );
                continue;
            }
        }
        let t_dev = running.map(|r| r.1);
        let t_arr = arrivals.get(ai).copied();
        match (t_dev, t_arr) {
            (None, None) => break,
            (Some(td), ta) if ta.is_none_or(|ta| td <= ta) => {
                now = td;
                let (tag, _) = running.take().unwrap();
                outstanding -= 1;
                if outstanding == 0 {
                    free_at = now as f64;
                }
                s.handle(
                    now,
                    Event::KernelCompleted {
                        stream: StreamId(0),
                        tag,
                    },
                );
            }
            (_, Some(ta)) => {
                now = now.max(ta);
                seq += 1;
                let req = RequestId(seq);
                queries.push(Q {
                    req,
                    model: 0,
                    arrival: now as f64,
                    qos: qos_x * model_ns[0],
                    launched: 0,
                });
                out.rt_arrived += 1;
                ai += 1;
                s.handle(
                    now,
                    Event::RequestArrived {
                        req,
                        client: ClientId(0),
                        deadline: None,
                    },
                );
            }
            _ => unreachable!(),
        }
    }
    out.stats = s.stats();
    out
}

fn table(lc: &[(u32, u64, u8)], be: &[(u32, u64, u8)], co: f64, solo: f64) -> Table {
    let k = |v: &[(u32, u64, u8)]| {
        v.iter()
            .map(|&(b, ns, c)| KernelPred {
                blocks: b,
                solo_ns: ns as f64,
                class: class(c),
            })
            .collect()
    };
    Table {
        kernels: vec![k(lc), k(be)],
        fusion: TwoStage {
            co: Line { a: 1.0, b: co },
            solo: Line { a: solo, b: 1.0 },
        },
        ratio: (2, 1),
    }
}

fn kernels() -> impl Strategy<Value = Vec<(u32, u64, u8)>> {
    proptest::collection::vec((1u32..400, 1_000u64..200_000, 0u8..3), 1..12)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Through the policy: no fused kernel whose predicted extra time is
    /// not below the headroom (Eq. 4 against Eq. 5 recomputed here), no BE
    /// launch beside an active query longer than the headroom, every query
    /// and every BE kernel served, every BE block run exactly once; baymax
    /// never fuses; tacker fuses only TC pairs.
    #[test]
    fn managers_stay_within_the_headroom(
        lc in kernels(),
        be in kernels(),
        gaps in proptest::collection::vec(0u64..3_000_000, 1..8),
        co in 0.0f64..0.9,
        solo in -0.5f64..0.9,
        truth in 0.7f64..1.3,
        qos_x in 1.0f64..4.0,
    ) {
        let t = table(&lc, &be, co, solo);
        let mut at = 0;
        let arrivals: Vec<u64> = gaps.iter().map(|g| { at += g; at }).collect();
        for mgr in [Manager::Aker, Manager::Baymax, Manager::Tacker] {
            let o = run(mgr, t.clone(), &arrivals, truth, qos_x);
            prop_assert_eq!(o.rt_done, o.rt_arrived);
            prop_assert!(o.be_done >= 1);
            for &(extra, hr) in &o.fuse_checks {
                prop_assert!(extra < hr + 1e-6, "{:?}: fused extra {} vs headroom {}", mgr, extra, hr);
            }
            for &(d, hr) in &o.be_checks {
                prop_assert!(d < hr + 1e-6, "{:?}: BE {} vs headroom {}", mgr, d, hr);
            }
            prop_assert_eq!(o.stats.beyond_headroom, 0);
            prop_assert_eq!(o.stats.fused_launches, o.fused);
            prop_assert_eq!(o.stats.qos_met + o.stats.qos_missed, o.rt_done as u64);
            if mgr == Manager::Baymax {
                prop_assert_eq!(o.fused, 0);
            }
            let any_tc = lc.iter().chain(&be).any(|k| class(k.2) == KClass::Tensor);
            if mgr == Manager::Tacker && !any_tc {
                prop_assert_eq!(o.fused, 0);
            }
        }
    }
}

/// A compute-prefer LC kernel beside a memory-prefer BE kernel with a
/// version that gains: aker fuses (a split at the opportune ratio),
/// tacker (no TC kernel) and baymax do not; with ample headroom baymax
/// launches BE kernels directly beside the query instead.
#[test]
fn aker_fuses_where_baymax_reorders() {
    let t = table(
        &[(120, 100_000, 0), (120, 100_000, 0)],
        &[(600, 300_000, 1); 20],
        0.1,
        0.2,
    );
    let arr = [10_000_000, 20_000_000];
    let a = run(Manager::Aker, t.clone(), &arr, 1.0, 4.0);
    let b = run(Manager::Baymax, t.clone(), &arr, 1.0, 4.0);
    let k = run(Manager::Tacker, t.clone(), &arr, 1.0, 4.0);
    // A 300 us BE kernel does not fit the 4x headroom beside two 100 us
    // LC kernels; at 8x it does.
    let b8 = run(Manager::Baymax, t, &arr, 1.0, 8.0);
    assert!(a.stats.fused_launches > 0, "{:?}", a.stats);
    // Split: fewer blocks than the whole BE kernel per fused launch.
    assert!(a.stats.be_blocks_fused < 600 * a.stats.fused_launches);
    assert!(a.stats.rest_launches > 0 || a.stats.be_blocks_fused > 0);
    assert_eq!(b.stats.fused_launches, 0);
    assert_eq!(k.stats.fused_launches, 0);
    assert_eq!(a.stats.qos_missed + b.stats.qos_missed, 0);
    assert_eq!(b.stats.be_direct_in_headroom, 0, "{:?}", b.stats);
    assert!(b8.stats.be_direct_in_headroom > 0, "{:?}", b8.stats);
}

/// With a QoS target at the stand-alone latency (no headroom), baymax never
/// runs BE work beside an active query, and every query meets its target
/// only when no BE kernel was in flight at its arrival.
#[test]
fn baymax_without_headroom_runs_no_be_beside_a_query() {
    let t = table(
        &[(60, 50_000, 0), (60, 50_000, 1)],
        &[
            (60, 20_000, 1),
            (60, 20_000, 0),
            (60, 20_000, 1),
            (60, 20_000, 0),
        ],
        0.1,
        0.2,
    );
    let arr = [1_000_000, 5_000_000, 9_000_000];
    let o = run(Manager::Baymax, t, &arr, 1.0, 1.0);
    assert_eq!(o.stats.be_direct_in_headroom, 0, "{:?}", o.stats);
    assert!(o.be_checks.is_empty());
    assert!(o.stats.be_launches_idle > 0);
    assert_eq!(o.rt_done, 3);
}

/// Tacker fuses TC × CD pairs, the whole BE kernel (no split).
#[test]
fn tacker_fuses_tensor_core_pairs_whole() {
    let t = table(
        &[(120, 100_000, 2), (120, 100_000, 2)],
        &[(100, 30_000, 0); 40],
        0.1,
        0.2,
    );
    let o = run(Manager::Tacker, t, &[5_000_000, 6_000_000], 1.0, 4.0);
    assert!(o.stats.fused_launches > 0, "{:?}", o.stats);
    assert_eq!(o.stats.be_blocks_fused, 100 * o.stats.fused_launches);
}
