//! Aker §8.3 / §9 on the simulated device, as a self-contained experiment
//! (`--colocate-private`) beside the reef-sched policies `aker`/`baymax`
//! (`--colocate`). Why both stay: these managers drive one stream by hand,
//! with no scheduler core, host queues or preemption around them, so the
//! two runs side by side show what of the policies' figures is Aker's
//! decision rule and what is the scheduler it runs in. One LC service
//! with open-loop Poisson queries, one BE application looping over its
//! model's kernels, kernels (or fused kernels) executed one after another
//! on one stream, as Baymax and Aker run them, each decided when it is
//! issued ([`DEPTH`] launches in the device queue; the headroom counts the
//! predicted time of those in flight).
//!
//! Managers, at each point the device is free:
//! - `aker`: at the current LC kernel, §8.3.1's choice
//!   ([`reef_sched::aker::decide`]): a fused kernel of the LC kernel and a
//!   split of the next BE kernel at the best version's opportune load ratio
//!   (§7, §8.2) when its predicted extra time is within the headroom (Eq.
//!   4) with the largest gain, else the BE kernel directly if it fits in the
//!   headroom, else the LC kernel; no LC query active: the next BE kernel.
//! - `baymax`: the same without fusion (non-preemptive, duration-predicting
//!   reordering).
//! - `lc-first`: BE kernels only while no LC query is active (the headroom
//!   ignored: the reference for what the headroom buys).
//! - `streams` ([`run_streams`]): LC and BE on their own streams, LC at
//!   high priority, co-running on the device with no manager.
//!
//! Fusion is considered for compute-prefer × memory-prefer pairs only
//! (§5.1; the MI50 has no tensor cores, so Tacker's TC × CD fusion does not
//! exist there and Tacker reduces to Baymax). Predictions: a kernel's
//! stand-alone time (plus its dispatch: launches are issued ahead, so the
//! host launch and fetch overlap the previous kernel) is profiled once on
//! the simulated device (its block
//! count is fixed by the model's input, so §6.3's block-count LR reduces to
//! that value); fused kernels use [`TwoStage`] models trained lazily per
//! (LC kernel, BE kernel) pair from four profiled runs per version. The
//! headroom of the query being served is Eq. 5 taken over every active
//! query: the minimum over queries `j` of `T_qos − (now − arrival_j) − Σ
//! predicted remaining time of queries up to j`.
//!
//! Arrivals: open-loop Poisson at a stated utilisation `ρ` of the LC
//! service alone (rate = ρ / stand-alone latency). QoS target: one for
//! every manager, a multiple of the LC model's stand-alone latency (default
//! 3x, `--qos-x`). Both are choices (the paper gives neither a rate nor a
//! violation rate; its QoS is 50 ms at the largest batch meeting it).

use anyhow::Result;
use reef_exec::aker::{launch_fused, max_per_cu, ratios, time_alone, time_fused, Component};
use reef_model::{default_models_dir, load_named};
use reef_sched::aker::{
    decide, split_blocks, Decision, FuseCandidate, KernelModel, TwoStage, TRAINING_RATIOS,
};
use reef_sim::resources::{class_of_name, Class};
use reef_sim::{DeviceSpec, EventKind, KernelLaunch, KernelShape, Sim, SimConfig, Tags};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Managers compared.
pub const MANAGERS: &[&str] = &["aker", "baymax", "lc-first"];

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub manager: String,
    pub lc: String,
    pub be: String,
    pub utilisation: f64,
    pub queries: usize,
    pub qos_ms: f64,
    pub violations: usize,
    pub p99_ms: f64,
    /// Queries within 1 % of the QoS target (near misses of a manager that
    /// spends the predicted headroom to the edge).
    pub within_1pct: usize,
    /// BE work done per second, in BE inferences (stand-alone kernel time
    /// of the BE blocks completed over the BE model's stand-alone time).
    pub be_per_s: f64,
    pub fused_launches: u64,
}

/// A kernel with its profiled stand-alone time and class.
pub struct Kern {
    shape: Arc<KernelShape>,
    solo: f64,
    class: Class,
}

/// The kernels of a model with their profiled stand-alone times.
pub fn kernels_of(spec: &DeviceSpec, model: &str) -> Result<Vec<Kern>> {
    let m = load_named(&default_models_dir(), model)?;
    let shapes = KernelShape::for_model(&m, spec)?;
    let mut v = Vec::new();
    for (k, s) in m.kernels.iter().zip(shapes) {
        // Issued ahead (DEPTH launches in flight), a kernel adds its device
        // time and its dispatch; host launch and fetch overlap the previous.
        let solo = (time_alone(spec, &s, 0..s.blocks)? + spec.cp_dispatch_ns) as f64;
        v.push(Kern {
            shape: s,
            solo,
            class: class_of_name(&k.name),
        });
    }
    Ok(v)
}

/// The best fused version of a pair and its model, or None.
type Fusion = Option<((u32, u32), TwoStage)>;

fn train(spec: &DeviceSpec, k1: &Kern, k2: &Kern) -> Result<Fusion> {
    let be = KernelModel(reef_sched::aker::Line {
        a: 0.0,
        b: k2.solo / k2.shape.blocks as f64,
    });
    let half = max_per_cu(spec, &k1.shape).div_ceil(2);
    let mut best: Fusion = None;
    for (a, b) in ratios(spec, &k1.shape, &k2.shape) {
        // The LC kernel keeps at least half its occupancy (its QoS).
        if a < half {
            continue;
        }
        let mut s = Vec::new();
        for r in TRAINING_RATIOS {
            let n = split_blocks(&be, k2.shape.blocks, k1.solo, r);
            let (f, _) = time_fused(
                spec,
                (&k1.shape, 0..k1.shape.blocks, a),
                (&k2.shape, 0..n, b),
            )?;
            s.push((be.predict(n) / k1.solo, f as f64 / k1.solo));
        }
        if let Some(m) = TwoStage::fit(&s) {
            if m.reduction() > 0.0
                && best
                    .as_ref()
                    .is_none_or(|b| m.reduction() > b.1.reduction())
            {
                best = Some(((a, b), m));
            }
        }
    }
    Ok(best)
}

/// Exponential inter-arrival times from a seeded xorshift.
fn arrivals(n: usize, mean_ns: f64, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            t += -mean_ns * u.ln();
            t as u64
        })
        .collect()
}

/// Launches the managers keep in the device queue (issued ahead).
pub const DEPTH: usize = 2;

struct Query {
    arrival: u64,
    next: usize,
}

/// A decided launch in flight: its ids, the BE blocks it runs (per block
/// original time), and the query whose last LC kernel it carries.
struct InFlight {
    ids: Vec<reef_sim::LaunchId>,
    pred: f64,
    last_of: Option<u64>,
}

#[allow(clippy::too_many_arguments)]
pub fn run_one(
    spec: &DeviceSpec,
    manager: &str,
    lc_name: &str,
    lc: &[Kern],
    be_name: &str,
    be: &[Kern],
    fusions: &mut HashMap<(usize, usize), Fusion>,
    util: f64,
    qos_x: f64,
    queries: usize,
    seed: u64,
) -> Result<Row> {
    let lc_solo: f64 = lc.iter().map(|k| k.solo).sum();
    let be_solo: f64 = be.iter().map(|k| k.solo).sum();
    let qos = qos_x * lc_solo;
    let arr = arrivals(queries, lc_solo / util, seed);
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, DEPTH)?;
    let mut now = 0u64;
    let (mut qi, mut active): (usize, VecDeque<Query>) = (0, VecDeque::new());
    let (mut be_k, mut be_pos) = (0usize, 0u32);
    let mut be_done_ns = 0.0;
    let mut lat = Vec::new();
    let mut fused = 0u64;
    let end_ns = *arr.last().unwrap_or(&0);
    let remaining = |q: &Query| lc[q.next..].iter().map(|k| k.solo).sum::<f64>();
    let mut flight: VecDeque<InFlight> = VecDeque::new();
    loop {
        while qi < arr.len() && arr[qi] <= now {
            active.push_back(Query {
                arrival: arr[qi],
                next: 0,
            });
            qi += 1;
        }
        // Decide while the device queue has room (launches are issued
        // ahead, as Baymax and Aker issue them, so the launch path of one
        // kernel overlaps the previous one).
        while flight.len() < DEPTH {
            // When the device will be free, by prediction.
            let busy: f64 = flight.iter().map(|f| f.pred).sum();
            let t_eff = now as f64 + busy;
            let bk = &be[be_k];
            let be_left = bk.shape.blocks - be_pos;
            let per_block = bk.solo / bk.shape.blocks as f64;
            let mut launches: Vec<KernelLaunch> = Vec::new();
            let mut ratio = None;
            let mut lc_step = false;
            let mut be_blocks = 0;
            let mut pred = 0.0;
            if let Some(q) = active.front() {
                let lk = &lc[q.next];
                let mut acc = 0.0;
                let mut hr = f64::INFINITY;
                for a in &active {
                    acc += remaining(a);
                    hr = hr.min(qos - (t_eff - a.arrival as f64) - acc);
                }
                let mut cands = Vec::new();
                let mut split = 0;
                if manager == "aker"
                    && matches!(
                        (lk.class, bk.class),
                        (Class::ComputePrefer, Class::MemoryPrefer)
                            | (Class::MemoryPrefer, Class::ComputePrefer)
                    )
                {
                    let key = (q.next, be_k);
                    if let std::collections::hash_map::Entry::Vacant(e) = fusions.entry(key) {
                        e.insert(train(spec, lk, bk)?);
                    }
                    if let Some((_, m)) = &fusions[&key] {
                        let model = KernelModel(reef_sched::aker::Line {
                            a: 0.0,
                            b: per_block,
                        });
                        split = split_blocks(&model, be_left, lk.solo, m.opportune());
                        cands.push(FuseCandidate {
                            be: be_k,
                            fused: m.predict(lk.solo, model.predict(split)),
                            be_part: model.predict(split),
                        });
                    }
                }
                let direct = if manager == "lc-first" {
                    vec![]
                } else {
                    vec![(be_k, per_block * be_left as f64)]
                };
                match decide(lk.solo, hr, &cands, &direct).0 {
                    Decision::Fuse(_) => {
                        let (ab, _) = fusions[&(q.next, be_k)].expect("trained");
                        launches = vec![
                            KernelLaunch::new(lk.shape.clone(), Tags::default()),
                            KernelLaunch::new(bk.shape.clone(), Tags::default())
                                .with_blocks(be_pos..be_pos + split),
                        ];
                        ratio = Some(ab);
                        lc_step = true;
                        be_blocks = split;
                        pred = cands[0].fused;
                    }
                    Decision::Direct(_) => {
                        launches = vec![KernelLaunch::new(bk.shape.clone(), Tags::default())
                            .with_blocks(be_pos..bk.shape.blocks)];
                        be_blocks = be_left;
                        pred = per_block * be_left as f64;
                    }
                    Decision::Original => {
                        launches = vec![KernelLaunch::new(lk.shape.clone(), Tags::default())];
                        lc_step = true;
                        pred = lk.solo;
                    }
                }
            } else if now < end_ns {
                launches = vec![KernelLaunch::new(bk.shape.clone(), Tags::default())
                    .with_blocks(be_pos..bk.shape.blocks)];
                be_blocks = be_left;
                pred = per_block * be_left as f64;
            }
            if launches.is_empty() {
                break;
            }
            let mut parts = launches.into_iter();
            let first = parts.next().expect("a launch");
            let ids = if let Some((a, b)) = ratio {
                let second = parts.next().expect("fused BE part");
                fused += 1;
                launch_fused(
                    &mut sim,
                    s,
                    Component {
                        launch: first,
                        per_cu: a,
                    },
                    Component {
                        launch: second,
                        per_cu: b,
                    },
                )?
                .to_vec()
            } else {
                vec![sim.launch(s, first)?]
            };
            if be_blocks > 0 {
                be_done_ns += per_block * be_blocks as f64;
                be_pos += be_blocks;
                if be_pos >= be[be_k].shape.blocks {
                    be_pos = 0;
                    be_k = (be_k + 1) % be.len();
                }
            }
            let mut last_of = None;
            if lc_step {
                let q = active.front_mut().expect("active query");
                q.next += 1;
                if q.next == lc.len() {
                    last_of = Some(q.arrival);
                    active.pop_front();
                }
            }
            flight.push_back(InFlight { ids, pred, last_of });
        }
        if flight.is_empty() {
            if qi >= arr.len() && active.is_empty() {
                break;
            }
            // Idle until the next arrival.
            now = now.max(arr[qi]);
            continue;
        }
        let Some((t, evs)) = sim.step() else { break };
        now = t;
        for e in evs.iter().filter(|e| e.kind == EventKind::Completed) {
            for f in flight.iter_mut() {
                f.ids.retain(|id| *id != e.launch);
            }
        }
        while flight.front().is_some_and(|f| f.ids.is_empty()) {
            let f = flight.pop_front().expect("front");
            if let Some(a) = f.last_of {
                lat.push(now - a);
            }
        }
    }
    lat.sort_unstable();
    let p99 = lat
        .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    Ok(Row {
        manager: manager.into(),
        lc: lc_name.into(),
        be: be_name.into(),
        utilisation: util,
        queries,
        qos_ms: qos / 1e6,
        violations: lat.iter().filter(|&&l| l as f64 > qos).count(),
        p99_ms: p99 as f64 / 1e6,
        within_1pct: lat.iter().filter(|&&l| l as f64 <= qos * 1.01).count(),
        be_per_s: be_done_ns / be_solo / (now as f64 / 1e9),
        fused_launches: fused,
    })
}

/// `streams` (GPU streams, Triton-like): the LC service and the BE
/// application on their own streams, LC at high priority, no headroom and
/// no fusion: each LC query's kernels are queued on arrival, the BE stream
/// always has two kernels queued. The device's own block scheduling and
/// resource mix decide how they share it.
#[allow(clippy::too_many_arguments)]
pub fn run_streams(
    spec: &DeviceSpec,
    lc_name: &str,
    lc: &[Kern],
    be_name: &str,
    be: &[Kern],
    util: f64,
    qos_x: f64,
    queries: usize,
    seed: u64,
) -> Result<Row> {
    let lc_solo: f64 = lc.iter().map(|k| k.solo).sum();
    let be_solo: f64 = be.iter().map(|k| k.solo).sum();
    let qos = qos_x * lc_solo;
    let arr = arrivals(queries, lc_solo / util, seed);
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let ls = sim.create_stream(1, lc.len() * queries.max(1))?;
    let bs = sim.create_stream(0, 4)?;
    let be_task = u64::MAX;
    let mut be_next = 0usize;
    let mut be_done_ns = 0.0;
    let launch_be = |sim: &mut Sim, next: &mut usize| -> Result<()> {
        let k = *next % be.len();
        let tags = Tags {
            task: be_task,
            kernel: k as u32,
            user: 0,
        };
        sim.launch(bs, KernelLaunch::new(be[k].shape.clone(), tags))?;
        *next += 1;
        Ok(())
    };
    launch_be(&mut sim, &mut be_next)?;
    launch_be(&mut sim, &mut be_next)?;
    let (mut qi, mut lat, mut now) = (0usize, Vec::new(), 0u64);
    let last = lc.len() as u32 - 1;
    while lat.len() < arr.len() {
        let next_ev = sim.next_event_time().unwrap_or(u64::MAX);
        let evs = if qi < arr.len() && arr[qi] <= next_ev {
            now = arr[qi];
            let evs = sim.advance_to(now);
            for (i, k) in lc.iter().enumerate() {
                let tags = Tags {
                    task: qi as u64,
                    kernel: i as u32,
                    user: 0,
                };
                sim.launch(ls, KernelLaunch::new(k.shape.clone(), tags))?;
            }
            qi += 1;
            evs
        } else {
            let Some((t, evs)) = sim.step() else { break };
            now = t;
            evs
        };
        for e in evs {
            if e.kind != EventKind::Completed {
                continue;
            }
            if e.tags.task == be_task {
                be_done_ns += be[e.tags.kernel as usize].solo;
                launch_be(&mut sim, &mut be_next)?;
            } else if e.tags.kernel == last {
                lat.push(e.time - arr[e.tags.task as usize]);
            }
        }
    }
    lat.sort_unstable();
    let p99 = lat
        .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    Ok(Row {
        manager: "streams".into(),
        lc: lc_name.into(),
        be: be_name.into(),
        utilisation: util,
        queries,
        qos_ms: qos / 1e6,
        violations: lat.iter().filter(|&&l| l as f64 > qos).count(),
        p99_ms: p99 as f64 / 1e6,
        within_1pct: lat.iter().filter(|&&l| l as f64 <= qos * 1.01).count(),
        be_per_s: be_done_ns / be_solo / (now as f64 / 1e9),
        fused_launches: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every manager serves every query; only aker fuses; its fused BE work
    /// counts in its throughput.
    #[test]
    fn managers_serve_all_queries_and_only_aker_fuses() {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let lc = kernels_of(&spec, "vgg").unwrap();
        let be = kernels_of(&spec, "densenet").unwrap();
        let mut f = HashMap::new();
        let mut rows = Vec::new();
        for m in MANAGERS {
            rows.push(
                run_one(
                    &spec, m, "vgg", &lc, "densenet", &be, &mut f, 0.3, 3.0, 8, 1,
                )
                .unwrap(),
            );
        }
        rows.push(run_streams(&spec, "vgg", &lc, "densenet", &be, 0.3, 3.0, 8, 1).unwrap());
        for r in &rows {
            assert!(r.p99_ms > 0.0, "{}: no query finished", r.manager);
            assert!(r.be_per_s > 0.0, "{}", r.manager);
            assert_eq!(r.fused_launches > 0, r.manager == "aker", "{}", r.manager);
        }
        // Without a headroom, BE never delays an active query: lc-first's
        // tail is the shortest of the serial managers.
        let p = |m: &str| rows.iter().find(|r| r.manager == m).unwrap().p99_ms;
        assert!(p("lc-first") <= p("baymax") && p("lc-first") <= p("aker"));
    }
}
