//! `reef-bench aker --open-gap`: the figure REEF's authors name as their
//! open gap (../shared/papers/reef-tocs2025.txt §7: padding still trails GPU
//! streams in throughput): on DISB A–E, each policy's overall throughput
//! (REEF §6.2: the sum of normalised client throughputs) as a fraction of
//! `streams`', and whether its mean normalised RT latency stays within
//! REEF's 1.02 target, for `reef`, `reef-dkp-mv`, and the Aker managers
//! (`aker`, `baymax`) at two QoS targets: 1.02 × the stand-alone latency
//! (the figure's own criterion given to the manager as its QoS) and the
//! default 3× (docs/aker.md "QoS targets"). All runs through `reef-bench
//! disb`'s runner, same seed and duration. docs/results-aker.md.
//!
//! REEF's preemption combined with Aker's fusion is not built (see
//! docs/results-aker.md "Open gap" for why the figures do not call for it
//! as a fix).

use crate::disb::workload::{self, Workload};
use crate::disb::{self, DisbArgs};
use anyhow::Result;
use reef_sim::DeviceSpec;
use serde::Serialize;

/// One row of the figure.
#[derive(Debug, Clone, Serialize)]
pub struct GapRow {
    pub workload: String,
    pub policy: String,
    /// The Aker managers' QoS multiple (None for the others).
    pub qos_x: Option<f64>,
    pub rt_latency_norm_mean: Option<f64>,
    pub throughput_norm_overall: f64,
    pub fraction_of_streams: f64,
    pub within_1_02: bool,
    pub fused_launches: Option<u64>,
}

/// REEF's RT latency target (§6.3: "less than 2 %" overhead; DISB C in
/// docs/fidelity.md).
pub const RT_TARGET: f64 = 1.02;

fn args(device: &str, seed: u64, duration: f64, qos_x: f64) -> DisbArgs {
    DisbArgs {
        device: device.into(),
        seed,
        duration: Some(duration),
        jobs: Some(1),
        qos_x,
        ..DisbArgs::defaults("")
    }
}

/// Runs the figure on `workloads` (`A`..`E`, `all`).
pub fn run(
    device: &str,
    workloads: &str,
    seed: u64,
    duration: f64,
    check_values: bool,
) -> Result<Vec<GapRow>> {
    if !(duration.is_finite() && duration > 0.0) {
        anyhow::bail!("--gap-duration must be a positive number of seconds, got {duration}");
    }
    let spec = DeviceSpec::by_name_or_path(device)?;
    let shared = reef_model::shared_dir();
    let mut ws = Vec::new();
    for p in workload::resolve(workloads, &shared) {
        ws.push(Workload::load(&p)?);
    }
    let mut set = disb::load_models(&spec, &reef_model::default_models_dir(), &ws, seed)?;
    set.aker_profiles = Some(std::sync::Arc::new(reef_exec::aker::SimPredictor::new(
        &spec,
        &set.models,
    )?));
    let runs: [(&str, Option<f64>); 6] = [
        ("streams", None),
        ("reef", None),
        ("reef-dkp-mv", None),
        ("baymax", Some(RT_TARGET)),
        ("aker", Some(RT_TARGET)),
        ("aker", Some(reef_sched::aker::DEFAULT_QOS_X)),
    ];
    let mut rows = Vec::new();
    for w in &ws {
        let mut streams = None;
        for (p, q) in runs {
            let mut a = args(device, seed, duration, q.unwrap_or(1.0));
            a.check_values = check_values;
            let r = disb::run_one(&spec, &set, w, p, &a)?;
            let thr = r.throughput_norm_overall;
            let s = *streams.get_or_insert(thr);
            rows.push(GapRow {
                workload: w.name.clone(),
                policy: p.into(),
                qos_x: q,
                rt_latency_norm_mean: r.rt_latency_norm_mean,
                throughput_norm_overall: thr,
                fraction_of_streams: thr / s,
                within_1_02: r.rt_latency_norm_mean.is_some_and(|l| l <= RT_TARGET),
                fused_launches: r.fused_launches,
            });
        }
    }
    Ok(rows)
}

/// Prints the figure.
pub fn print(rows: &[GapRow], device: &str, duration: f64, seed: u64) {
    println!(
        "REEF §7 open gap on {device}: overall throughput as a fraction of streams', \
         RT latency mean within {RT_TARGET}? (DISB, {duration} s, seed {seed})"
    );
    println!(
        "{:<4} {:<12} {:>6} {:>8} {:>8} {:>10} {:>7} {:>8}",
        "wl", "policy", "qos_x", "rt_mean", "thr_all", "of streams", "<=1.02", "fused"
    );
    for r in rows {
        println!(
            "{:<4} {:<12} {:>6} {:>8} {:>8.3} {:>10.3} {:>7} {:>8}",
            r.workload,
            r.policy,
            r.qos_x.map_or("-".into(), |q| format!("{q}")),
            r.rt_latency_norm_mean
                .map_or("-".into(), |l| format!("{l:.3}")),
            r.throughput_norm_overall,
            r.fraction_of_streams,
            if r.within_1_02 { "yes" } else { "no" },
            r.fused_launches.map_or("-".into(), |f| f.to_string()),
        );
    }
}
