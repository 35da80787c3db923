//! `reef-bench multigpu --part disb`: REEF inside each device of a node,
//! after placement (issue 16 item 4, DESIGN.md layer 3 "place first, then
//! schedule inside the device"). A DISB workload's clients are placed on a
//! 4-device node by `reef_sched::place::place_inference_clients` (real-time
//! clients on the device with the fewest real-time clients, best-effort
//! clients by CASE/MGB Algorithm 3), then each device runs its clients under
//! the `reef` policy exactly as `reef-bench disb` runs one GPU (devices
//! share nothing once placed). Printed beside the same workload on one GPU:
//! RT latency (normalised to stand-alone, REEF §6.2) and overall
//! throughput (sum of normalised client throughputs).

use super::jobs::{self, GIB};
use crate::disb::workload::{self, Workload};
use crate::disb::{self, DisbArgs};
use anyhow::{Context, Result};
use reef_sched::place::{place_inference_clients, TaskNeeds};
use reef_sim::DeviceSpec;

fn args(seed: u64, duration: f64) -> DisbArgs {
    DisbArgs {
        policy: "reef".into(),
        device: "mi50".into(),
        seed,
        duration: Some(duration),
        jobs: Some(1),
        ..DisbArgs::defaults("")
    }
}

/// What a client declares: its model's footprint as a neural-network job
/// (`jobs::nn_job`: buffers + workspace + context) and its widest kernel.
fn needs(m: &reef_model::Model, spec: &DeviceSpec) -> Result<TaskNeeds> {
    Ok(jobs::nn_job(m, spec, 1)?.needs)
}

pub fn run(
    workload_arg: &str,
    models_dir: Option<&std::path::Path>,
    seed: u64,
    duration: f64,
    gpus: usize,
) -> Result<()> {
    let spec = DeviceSpec::preset("mi50")?;
    let shared = reef_model::shared_dir();
    let a = args(seed, duration);
    println!(
        "\n## REEF inside each device after placement: DISB on 1 x mi50 vs {gpus} x mi50 (policy reef, {duration} s, seed {seed})"
    );
    println!(
        "{:<4} {:>6} {:>22} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "W", "gpus", "placement(dev:clients)", "rt_mean", "rt_p50", "rt_p99", "thr_all", "thr_be"
    );
    for path in workload::resolve(workload_arg, &shared) {
        let w = Workload::load(&path)?;
        let dir = models_dir.map_or_else(reef_model::default_models_dir, |d| d.to_path_buf());
        let set = disb::load_models(&spec, &dir, std::slice::from_ref(&w), seed)?;
        let one = disb::run_one(&spec, &set, &w, "reef", &a)?;
        let fmt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}"));
        println!(
            "{:<4} {:>6} {:>22} {:>10} {:>10} {:>10} {:>10.3} {:>10.3}",
            w.name,
            1,
            "all on 0",
            fmt(one.rt_latency_norm_mean),
            fmt(one.rt_latency_norm_p50),
            fmt(one.rt_latency_norm_p99),
            one.throughput_norm_overall,
            one.be_throughput_norm
        );
        let lim = jobs::limits(&spec);
        let clients: Vec<(bool, TaskNeeds)> = w
            .tasks
            .iter()
            .map(|t| {
                let m = &set.models[set.index(&t.model_dir)].model;
                Ok((t.real_time, needs(m, &spec)?))
            })
            .collect::<Result<_>>()?;
        let place = place_inference_clients(&vec![lim; gpus], &clients)
            .with_context(|| format!("placing workload {}", w.name))?;
        // RT latency over the devices: mean weighted by RT requests, the
        // worst device's p50 and p99 (summaries do not merge exactly).
        let (mut rt_sum, mut rt_n) = (0.0, 0u64);
        let (mut p50, mut p99): (Option<f64>, Option<f64>) = (None, None);
        let (mut thr, mut thr_be) = (0.0, 0.0);
        let mut desc = Vec::new();
        for d in 0..gpus {
            let tasks: Vec<_> = w
                .tasks
                .iter()
                .zip(&place)
                .filter(|(_, &p)| p == d)
                .map(|(t, _)| t.clone())
                .collect();
            if tasks.is_empty() {
                continue;
            }
            let has_rt = tasks.iter().any(|t| t.real_time);
            desc.push(format!(
                "{d}:{}{}",
                tasks.len(),
                if has_rt { "R" } else { "" }
            ));
            let sub = Workload {
                tasks,
                name: format!("{}@{d}", w.name),
                ..w.clone()
            };
            let r = disb::run_one(&spec, &set, &sub, "reef", &a)?;
            if let Some(m) = r.rt_latency_norm_mean {
                rt_sum += m * r.rt_requests as f64;
                rt_n += r.rt_requests;
                p50 = p50
                    .into_iter()
                    .chain(r.rt_latency_norm_p50)
                    .reduce(f64::max);
                p99 = p99
                    .into_iter()
                    .chain(r.rt_latency_norm_p99)
                    .reduce(f64::max);
            }
            thr += r.throughput_norm_overall;
            thr_be += r.be_throughput_norm;
        }
        println!(
            "{:<4} {:>6} {:>22} {:>10} {:>10} {:>10} {:>10.3} {:>10.3}",
            w.name,
            gpus,
            desc.join(" "),
            fmt((rt_n > 0).then(|| rt_sum / rt_n as f64)),
            fmt(p50),
            fmt(p99),
            thr,
            thr_be
        );
    }
    println!("(placement: device:clients, R = a device with a real-time client; on {gpus} GPUs rt_mean is weighted by RT requests, rt_p50/rt_p99 are the worst device's)");
    println!(
        "(client footprints: model buffers + {} MiB + {} MiB, {:.1} GiB per device)",
        jobs::NN_WORKSPACE >> 20,
        jobs::NN_CONTEXT >> 20,
        spec.memory_bytes as f64 / GIB as f64
    );
    Ok(())
}
