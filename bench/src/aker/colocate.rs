//! Aker §8.3 / §9 on the simulated device, as a self-contained experiment
//! (NOT a reef-sched policy: see docs/aker.md "Not built"): one LC service
//! with open-loop Poisson queries, one BE application looping over its
//! model's kernels, one kernel (or one fused kernel) on the device at a
//! time, as Baymax and Aker run them.
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
//!
//! Fusion is considered for compute-prefer × memory-prefer pairs only
//! (§5.1; the MI50 has no tensor cores, so Tacker's TC × CD fusion does not
//! exist there and Tacker reduces to Baymax). Predictions: a kernel's
//! stand-alone time (plus the launch path: kernels are launched one at a
//! time) is profiled once on the simulated device (its block
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
        // Launched one at a time, every kernel pays the launch path too.
        let solo = (time_alone(spec, &s, 0..s.blocks)? + spec.launch_path_ns()) as f64;
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

struct Query {
    arrival: u64,
    next: usize,
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
    let s = sim.create_stream(0, 4)?;
    let mut now = 0u64;
    let (mut qi, mut active): (usize, VecDeque<Query>) = (0, VecDeque::new());
    let (mut be_k, mut be_pos) = (0usize, 0u32);
    let mut be_done_ns = 0.0;
    let mut lat = Vec::new();
    let mut fused = 0u64;
    let end_ns = *arr.last().unwrap_or(&0);
    let remaining = |q: &Query| lc[q.next..].iter().map(|k| k.solo).sum::<f64>();
    while qi < arr.len() || !active.is_empty() {
        while qi < arr.len() && arr[qi] <= now {
            active.push_back(Query {
                arrival: arr[qi],
                next: 0,
            });
            qi += 1;
        }
        let bk = &be[be_k];
        let be_left = bk.shape.blocks - be_pos;
        let per_block = bk.solo / bk.shape.blocks as f64;
        // (launch, lc kernel advanced, BE blocks run)
        let mut plan: (Vec<KernelLaunch>, Option<(u32, u32)>, bool, u32) =
            (Vec::new(), None, false, 0);
        if let Some(q) = active.front() {
            let lk = &lc[q.next];
            let mut acc = 0.0;
            let mut hr = f64::INFINITY;
            for a in &active {
                acc += remaining(a);
                hr = hr.min(qos - (now - a.arrival) as f64 - acc);
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
                if let Some(((_, _), m)) = &fusions[&key] {
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
                    let ((a, b), _) = fusions[&(q.next, be_k)].unwrap();
                    plan.0 = vec![
                        KernelLaunch::new(lk.shape.clone(), Tags::default()),
                        KernelLaunch::new(bk.shape.clone(), Tags::default())
                            .with_blocks(be_pos..be_pos + split),
                    ];
                    plan.1 = Some((a, b));
                    plan.2 = true;
                    plan.3 = split;
                }
                Decision::Direct(_) => {
                    plan.0 = vec![KernelLaunch::new(bk.shape.clone(), Tags::default())
                        .with_blocks(be_pos..bk.shape.blocks)];
                    plan.3 = be_left;
                }
                Decision::Original => {
                    plan.0 = vec![KernelLaunch::new(lk.shape.clone(), Tags::default())];
                    plan.2 = true;
                }
            }
        } else if now < end_ns {
            plan.0 = vec![KernelLaunch::new(bk.shape.clone(), Tags::default())
                .with_blocks(be_pos..bk.shape.blocks)];
            plan.3 = be_left;
        } else {
            // No LC query active, none to come: advance to the next arrival.
            now = arr.get(qi).copied().unwrap_or(now).max(now);
            continue;
        }
        let mut parts = plan.0.into_iter();
        let first = parts.next().expect("a launch");
        if let Some((a, b)) = plan.1 {
            let second = parts.next().expect("fused BE part");
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
            )?;
            fused += 1;
        } else {
            sim.launch(s, first)?;
        }
        // Run to completion of everything launched (one launch at a time).
        let mut pending = if plan.1.is_some() { 2 } else { 1 };
        while pending > 0 {
            let Some((t, evs)) = sim.step() else { break };
            now = t;
            pending -= evs
                .iter()
                .filter(|e| e.kind == EventKind::Completed)
                .count();
        }
        // Bookkeeping.
        if plan.3 > 0 {
            be_done_ns += per_block * plan.3 as f64;
            be_pos += plan.3;
            if be_pos >= be[be_k].shape.blocks {
                be_pos = 0;
                be_k = (be_k + 1) % be.len();
            }
        }
        if plan.2 {
            let q = active.front_mut().expect("active query");
            q.next += 1;
            if q.next == lc.len() {
                lat.push(now - q.arrival);
                active.pop_front();
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
        be_per_s: be_done_ns / be_solo / (now as f64 / 1e9),
        fused_launches: fused,
    })
}
