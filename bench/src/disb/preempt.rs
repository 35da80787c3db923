//! `reef-bench preempt`: preemption latency of reset-based (`reef-nodkp`) against
//! wait-based (`wait`) preemption (REEF §6.4):
//! - per model (Fig. 18): one best-effort client runs a model back to back;
//!   real-time requests arrive after random intervals and preempt it;
//! - against the number of launched kernels and the kernel execution time
//!   (Fig. 19): the same with a synthetic best-effort model of N kernels of
//!   D microseconds each (defaults N = 100, D = 100 us as in the paper).
//!
//! Preemption latency runs from the preempt decision to the moment no
//! best-effort kernel is queued or running (DESIGN.md "Measuring").

use super::metrics::{mean, percentile};
use super::runner::{self, ClientPlan, Gen, PreparedModel, RunOptions};
use anyhow::{bail, Result};
use reef_model::Model;
use reef_sched::{Class, Time};
use reef_sim::{DeviceSpec, KernelShape};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `reef-bench preempt`.
#[derive(clap::Args, Debug, Clone)]
pub struct PreemptArgs {
    /// Simulated device: a preset (mi50, gv100, h100) or a .toml spec path.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Preemptions per measurement point.
    #[arg(long, default_value_t = 200)]
    pub samples: u32,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Comma-separated policies to compare.
    #[arg(long, default_value = "wait,reef-nodkp")]
    pub policy: String,
    /// Measured models directory (default: <shared>/models/mi50).
    #[arg(long)]
    pub models: Option<PathBuf>,
    /// Print JSON lines instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// One measurement point.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// `model`, `kernels` or `duration`.
    pub sweep: &'static str,
    /// Model name, or the swept value.
    pub x: String,
    pub policy: String,
    pub preemptions: usize,
    pub latency_us_mean: Option<f64>,
    pub latency_us_p99: Option<f64>,
    pub evicted_mean: f64,
    pub killed_mean: f64,
}

fn rng_next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A synthetic model of `n` kernels, each one wave of one block per CU
/// running `dur_ns` (the kernel's execution time alone).
fn synthetic(spec: &DeviceSpec, n: usize, dur_ns: u64) -> Result<PreparedModel> {
    let mut shapes = Vec::with_capacity(n);
    for i in 0..n {
        let s = KernelShape::synthetic(
            &format!("syn{i}"),
            spec.compute_units,
            256,
            0,
            0,
            vec![dur_ns],
            spec,
        )
        .map_err(|e| anyhow::anyhow!("synthetic kernel {}: {}", e.kernel, e.problem))?;
        shapes.push(Arc::new(s));
    }
    let name = format!("synthetic-{n}x{}us", dur_ns / 1000);
    Ok(PreparedModel {
        name: name.clone(),
        model: Model {
            name,
            path: PathBuf::from("<synthetic>"),
            kernels: Vec::new(),
            buffers: Vec::new(),
            inputs: Vec::new(),
            profile: None,
            compiled: None,
        },
        shapes,
    })
}

/// A one-kernel real-time model (its own latency does not enter the
/// preemption latency).
pub fn rt_model(spec: &DeviceSpec) -> Result<PreparedModel> {
    synthetic(spec, 1, 50_000).map(|mut m| {
        m.name = "rt-probe".into();
        m
    })
}

/// Measures preemption latency of `policy` with one best-effort client
/// running `be` and `samples` real-time requests at random moments.
pub fn measure(
    spec: &DeviceSpec,
    be: &PreparedModel,
    rt: &PreparedModel,
    policy: &str,
    samples: u32,
    seed: u64,
) -> Result<(Vec<f64>, f64, f64)> {
    // Real-time arrivals: gaps uniform in [1, 3] best-effort inferences so
    // the best-effort client is at a random point of its inference.
    let be_ns: u64 = be
        .shapes
        .iter()
        .map(|s| s.exec_ns(1))
        .sum::<u64>()
        .max(1_000_000);
    let mut s = seed | 1;
    let mut t: Time = be_ns / 2;
    let mut offsets = Vec::new();
    for _ in 0..samples {
        t += be_ns + rng_next(&mut s) % (2 * be_ns);
        offsets.push(t);
    }
    let end = t + 4 * be_ns;
    let models = [be.clone(), rt.clone()];
    let plans = vec![
        ClientPlan {
            name: "be".into(),
            model: 0,
            class: Class::BestEffort,
            gen: Gen::Continuous,
        },
        ClientPlan {
            name: "rt".into(),
            model: 1,
            class: Class::RealTime,
            gen: Gen::Trace { offsets, idx: 0 },
        },
    ];
    let out = runner::simulate(
        spec,
        &models,
        plans,
        end,
        &RunOptions {
            policy: policy.into(),
            seed,
            dq_capacity: 4,
            track_values: false,
            ..RunOptions::default()
        },
    )?;
    let mut lat: Vec<f64> = out
        .preemptions
        .iter()
        .filter_map(|p| p.latency())
        .map(|l| l as f64 / 1e3)
        .collect();
    lat.sort_by(f64::total_cmp);
    let n = out.preemptions.len().max(1) as f64;
    let ev = out
        .preemptions
        .iter()
        .map(|p| p.evicted as f64)
        .sum::<f64>()
        / n;
    let kl = out.preemptions.iter().map(|p| p.killed as f64).sum::<f64>() / n;
    Ok((lat, ev, kl))
}

fn point(
    sweep: &'static str,
    x: String,
    policy: &str,
    (lat, ev, kl): (Vec<f64>, f64, f64),
) -> Point {
    Point {
        sweep,
        x,
        policy: policy.into(),
        preemptions: lat.len(),
        latency_us_mean: mean(&lat),
        latency_us_p99: percentile(&lat, 99.0),
        evicted_mean: ev,
        killed_mean: kl,
    }
}

/// Entry point of `reef-bench preempt`.
pub fn main(args: PreemptArgs) -> Result<()> {
    let policies = super::parse_policies(&args.policy)?;
    if args.samples == 0 {
        bail!("--samples must be at least 1");
    }
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = args
        .models
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    let rt = rt_model(&spec)?;
    let mut points = Vec::new();
    for name in reef_model::list_models(&dir)? {
        let m = PreparedModel::new(reef_model::load_named(&dir, &name)?, &spec)?;
        for p in &policies {
            let r = measure(&spec, &m, &rt, p, args.samples, args.seed)?;
            points.push(point("model", name.clone(), p, r));
        }
    }
    for n in [10usize, 25, 50, 100, 200, 400] {
        let m = synthetic(&spec, n, 100_000)?;
        for p in &policies {
            let r = measure(&spec, &m, &rt, p, args.samples, args.seed)?;
            points.push(point("kernels", n.to_string(), p, r));
        }
    }
    for d in [10u64, 50, 100, 200, 400, 800] {
        let m = synthetic(&spec, 100, d * 1000)?;
        for p in &policies {
            let r = measure(&spec, &m, &rt, p, args.samples, args.seed)?;
            points.push(point("duration", format!("{d}us"), p, r));
        }
    }
    if args.json {
        for p in &points {
            println!("{}", serde_json::to_string(p)?);
        }
        return Ok(());
    }
    for (sweep, title) in [
        (
            "model",
            "Fig. 18: preemption latency per model (one BE client)",
        ),
        (
            "kernels",
            "Fig. 19a: vs launched kernels (kernel time 100 us)",
        ),
        (
            "duration",
            "Fig. 19b: vs kernel execution time (100 kernels)",
        ),
    ] {
        println!("{title} on {}", spec.name);
        println!(
            "{:<12} {:<8} {:>6} {:>12} {:>12} {:>9} {:>7}",
            "x", "policy", "n", "mean_us", "p99_us", "evicted", "killed"
        );
        for p in points.iter().filter(|p| p.sweep == sweep) {
            println!(
                "{:<12} {:<8} {:>6} {:>12.1} {:>12.1} {:>9.1} {:>7.2}",
                p.x,
                p.policy,
                p.preemptions,
                p.latency_us_mean.unwrap_or(f64::NAN),
                p.latency_us_p99.unwrap_or(f64::NAN),
                p.evicted_mean,
                p.killed_mean
            );
        }
        println!();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_based_preemption_is_flat_and_wait_based_grows_with_queued_kernels() {
        let spec = DeviceSpec::preset("mi50").unwrap();
        let rt = rt_model(&spec).unwrap();
        let lat = |n: usize, p: &str| {
            let m = synthetic(&spec, n, 100_000).unwrap();
            let (l, _, _) = measure(&spec, &m, &rt, p, 20, 3).unwrap();
            assert_eq!(l.len(), 20);
            mean(&l).unwrap()
        };
        let (r10, r200) = (lat(10, "reef-nodkp"), lat(200, "reef-nodkp"));
        let (w10, w200) = (lat(10, "wait"), lat(200, "wait"));
        // Reset-based: bounded by the kill plus at most 3 lazily evicted
        // kernels, whatever the queue behind them.
        assert!(r10 < 100.0 && r200 < 100.0, "{r10} {r200}");
        // Wait-based: every queued kernel is fetched to be evicted.
        assert!(w200 > 4.0 * w10, "{w10} {w200}");
        assert!(w200 > 10.0 * r200, "{w200} {r200}");
    }
}
