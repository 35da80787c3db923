//! Held-out DISB workloads (issue 28: "a hidden workload the project has
//! never seen"): `reef-bench disb-gen --seed N` writes a workload file in
//! DISB's own format (REEF §6.2, Table 2; the files of SJTU-IPADS/disb),
//! drawn from the seed, which `reef-bench disb FILE` then runs like A–E.
//! A policy tuned on A–D meets a mix it was not tuned on: other model
//! pairings, rates and arrival patterns.
//!
//! What is drawn, and why the bounds:
//! - 1 to 5 real-time tasks and 1 to 5 best-effort tasks, each on one of
//!   DISB's five models (repeats allowed, as C and D have).
//! - The real-time load: a total utilisation U drawn from [0.1, 0.7] of the
//!   device (each task's rate times its stand-alone latency on the device,
//!   measured here as `reef-bench disb` measures it), split among the
//!   real-time tasks by random weights. U stays below 1 so that a policy's
//!   RT latency says something about the policy, not about an overloaded
//!   device (DISB's own A, C, D and E stay below 1 on the MI50 as well).
//! - Each real-time task periodic, Poisson or trace-driven (a trace of
//!   bursts: Poisson bursts of 1 to 8 requests 1 ms apart, DISB's `trace`
//!   type with offsets in ms); with one real-time task, a closed loop one
//!   time in six, as workload B.
//! - Best-effort tasks closed-loop, as in every DISB workload.

use super::{load_models_with, workload::Workload};
use anyhow::{bail, Context, Result};
use reef_sim::DeviceSpec;
use serde_json::{json, Value};
use std::path::PathBuf;

/// DISB's five models, by the names its workload files use.
pub const DISB_MODELS: &[&str] = &[
    "resnet152-imagenet",
    "densenet201-imagenet",
    "vgg19-imagenet",
    "inceptionv3-imagenet",
    "distilbert",
];

/// `reef-bench disb-gen`: write a held-out DISB workload drawn from a seed.
#[derive(clap::Args, Debug, Clone)]
pub struct GenArgs {
    /// The seed the workload is drawn from.
    #[arg(long)]
    pub seed: u64,
    /// Where to write the workload file (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Device the real-time utilisation is measured on: a preset (mi50,
    /// gv100, h100) or a .toml spec path.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Models directory (default: <shared>/models/mi50).
    #[arg(long, visible_alias = "models-dir")]
    pub models: Option<PathBuf>,
    /// Run length written into the file, seconds.
    #[arg(long, default_value_t = 60.0)]
    pub time: f64,
}

/// splitmix64: a seeded uniform source, all the drawing needs.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        reef_sim::splitmix64(&mut self.0)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        reef_sim::unit_f64(self.next())
    }
    /// Uniform in lo..=hi.
    fn int(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.int(0, v.len() as u64 - 1) as usize]
    }
}

fn client(id: &str, model: &str) -> Value {
    json!({"name": id, "model_name": model, "batch_size": 1})
}

/// The workload for `seed`, given each DISB model's stand-alone latency in
/// ns (indexed as [`DISB_MODELS`]). Deterministic in its arguments.
pub fn generate(seed: u64, standalone_ns: &[f64], time_s: f64) -> Value {
    let mut d = Draw(seed ^ 0xd15b_0000_0000_0001);
    let n_rt = d.int(1, 5) as usize;
    let n_be = d.int(1, 5) as usize;
    let util = 0.1 + 0.6 * d.unit();
    let weights: Vec<f64> = (0..n_rt).map(|_| 0.2 + d.unit()).collect();
    let wsum: f64 = weights.iter().sum();
    let mut tasks = Vec::new();
    for (i, w) in weights.iter().enumerate() {
        let mi = d.int(0, DISB_MODELS.len() as u64 - 1) as usize;
        let model = DISB_MODELS[mi];
        let id = format!("{}_{i}_rt", model.split('-').next().unwrap_or(model));
        let lat_s = standalone_ns[mi] / 1e9;
        // Requests per second for this task's share of the utilisation; at
        // least one per second, one decimal as DISB's files write rates.
        let freq = ((util * w / wsum / lat_s) * 10.0).round().max(10.0) / 10.0;
        let kind = if n_rt == 1 && d.int(0, 5) == 0 {
            "continuous"
        } else {
            d.pick(&["periodic", "poisson", "trace"])
        };
        let load = match kind {
            "continuous" => json!({"type": "continuous"}),
            "trace" => {
                // Bursts at Poisson instants, each 1..=8 requests 1 ms apart,
                // the bursts' mean rate chosen so requests average `freq`.
                let mean_burst = 4.5;
                let burst_rate = freq / mean_burst;
                let mut offsets = Vec::new();
                let mut t = 0.0;
                loop {
                    t += -(1.0 - d.unit()).ln() / burst_rate;
                    if t >= time_s {
                        break;
                    }
                    for k in 0..d.int(1, 8) {
                        let ms = (t * 1000.0).round() as i64 + k as i64;
                        if (ms as f64) < time_s * 1000.0 {
                            offsets.push(ms);
                        }
                    }
                }
                json!({"type": "trace", "priority": 0, "trace": offsets})
            }
            k => json!({"type": k, "priority": 0, "frequency": freq}),
        };
        tasks.push(json!({"id": id, "load": load, "client": client(&id, model)}));
    }
    for i in 0..n_be {
        let model = d.pick(DISB_MODELS);
        let id = format!("{}_{i}_be", model.split('-').next().unwrap_or(model));
        tasks.push(json!({
            "id": id,
            "load": {"type": "continuous"},
            "client": client(&id, model),
        }));
    }
    json!({
        "time": time_s,
        "generated": {
            "by": "reef-bench disb-gen",
            "seed": seed,
            "rt_utilisation": (util * 1000.0).round() / 1000.0,
        },
        "tasks": tasks,
    })
}

pub fn main(args: GenArgs) -> Result<()> {
    if !(args.time.is_finite() && args.time > 0.0 && args.time <= 3600.0) {
        bail!(
            "--time must be a positive number of seconds up to 3600, got {}",
            args.time
        );
    }
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = args
        .models
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    // The five models as one workload, to measure their stand-alone
    // latencies exactly as `reef-bench disb` does.
    let all = json!({
        "time": 1,
        "tasks": DISB_MODELS.iter().map(|m| json!({
            "id": m, "load": {"type": "continuous"}, "client": client(m, m)
        })).collect::<Vec<_>>(),
    });
    let tmp = tempfile::Builder::new()
        .prefix("reef-disb-gen")
        .suffix(".json")
        .tempfile()
        .context("creating a temporary workload file")?;
    std::fs::write(tmp.path(), all.to_string())?;
    let w = Workload::load(tmp.path())?;
    let set = load_models_with(
        &spec,
        &|n| Ok(reef_model::load_named(&dir, n)?),
        std::slice::from_ref(&w),
        1,
    )?;
    let standalone: Vec<f64> = w
        .tasks
        .iter()
        .map(|t| set.standalone_ns[set.index(&t.model_dir)])
        .collect();
    let v = generate(args.seed, &standalone, args.time);
    let text = serde_json::to_string_pretty(&v)? + "\n";
    match &args.out {
        Some(p) => {
            std::fs::write(p, &text).with_context(|| format!("writing {}", p.display()))?;
            // Read back through the benchmark's own reader: what was
            // written is a workload `reef-bench disb` accepts.
            Workload::load(p)?;
            eprintln!(
                "wrote {} ({} tasks, RT utilisation {} on {})",
                p.display(),
                v["tasks"].as_array().map_or(0, Vec::len),
                v["generated"]["rt_utilisation"],
                args.device
            );
        }
        None => print!("{text}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAT: [f64; 5] = [13.8e6, 20.0e6, 4.7e6, 8.0e6, 5.0e6];

    fn load(v: &Value) -> Workload {
        let f = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
        std::fs::write(f.path(), v.to_string()).unwrap();
        Workload::load(f.path()).unwrap()
    }

    #[test]
    fn a_seed_gives_one_workload_the_reader_accepts() {
        for seed in 0..50 {
            let v = generate(seed, &LAT, 60.0);
            assert_eq!(v, generate(seed, &LAT, 60.0), "seed {seed}");
            let w = load(&v);
            assert!(
                w.tasks.iter().any(|t| t.real_time),
                "seed {seed}: no RT task"
            );
            assert!(
                w.tasks.iter().any(|t| !t.real_time),
                "seed {seed}: no BE task"
            );
            let ids: std::collections::BTreeSet<_> = w.tasks.iter().map(|t| &t.id).collect();
            assert_eq!(ids.len(), w.tasks.len(), "seed {seed}: ids repeat");
        }
        assert_ne!(generate(1, &LAT, 60.0), generate(2, &LAT, 60.0));
    }

    #[test]
    fn the_rt_rates_give_the_drawn_utilisation() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let v = generate(seed, &LAT, 60.0);
            let w = load(&v);
            let u = v["generated"]["rt_utilisation"].as_f64().unwrap();
            assert!((0.1..=0.7).contains(&u), "seed {seed}: {u}");
            let mut sum = 0.0;
            let mut open_loop = true;
            let mut traced = false;
            for t in w.tasks.iter().filter(|t| t.real_time) {
                kinds.insert(t.load.type_name());
                let i = DISB_MODELS.iter().position(|m| *m == t.model_name).unwrap();
                let rate = match &t.load {
                    super::super::workload::Load::Periodic { frequency, .. }
                    | super::super::workload::Load::Poisson { frequency, .. } => *frequency,
                    super::super::workload::Load::Trace { offsets_ms, .. } => {
                        traced = true;
                        offsets_ms.len() as f64 / 60.0
                    }
                    _ => {
                        open_loop = false;
                        0.0
                    }
                };
                sum += rate * LAT[i] / 1e9;
            }
            // Rates are rounded to 0.1/s and at least 1/s (at most 0.1 of
            // utilisation over five tasks here); a trace's count is drawn.
            if open_loop {
                let tol = if traced { 0.5 * u } else { 0.1 };
                assert!(
                    (sum - u).abs() < tol,
                    "seed {seed}: RT utilisation {sum:.3} against drawn {u}"
                );
            }
        }
        for k in ["periodic", "poisson", "trace", "continuous"] {
            assert!(kinds.contains(k), "no {k} RT task in 200 seeds");
        }
    }
}
