//! `reef-bench standalone` (issue 2 item 5): one inference of each model
//! alone, kernels launched back to back, simulated against the measured
//! `model_latency` (REEF §6.2 stand-alone latency; calibration in
//! docs/simulator.md).

use crate::run::{back_to_back, DeviceModels, REEF_DQ_CAPACITY};
use anyhow::{Context, Result};
use clap::Args;
use reef_model::{load_named, Model};
use reef_sim::{DeviceSpec, KernelShape, Sim, SimConfig};
use serde::Serialize;

#[derive(Debug, Args)]
pub struct StandaloneArgs {
    #[command(flatten)]
    pub sel: DeviceModels,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Device queue capacity.
    #[arg(long, default_value_t = REEF_DQ_CAPACITY)]
    pub queue_cap: usize,
}

/// One result row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub model: String,
    pub simulated_us: f64,
    pub measured_us: Option<f64>,
    pub error_pct: Option<f64>,
}

/// Simulates one stand-alone inference of `model`.
pub fn simulate(spec: &DeviceSpec, model: &Model, queue_cap: usize) -> Result<Row> {
    let shapes = KernelShape::for_model(model, spec)
        .with_context(|| format!("model {} on {}", model.name, spec.name))?;
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let r = back_to_back(&mut sim, model, &shapes, 1, queue_cap)?;
    let simulated_us = r.end_ns as f64 / 1000.0;
    // The profiles were measured on an MI50; on a device without measured
    // profiles there is nothing to compare with.
    let measured_us = model
        .measured_latency_ns()
        .filter(|_| spec.measured_profiles)
        .map(|n| n as f64 / 1000.0);
    Ok(Row {
        model: model.name.clone(),
        simulated_us,
        measured_us,
        error_pct: measured_us.map(|m| 100.0 * (simulated_us - m) / m),
    })
}

pub fn run(args: &StandaloneArgs) -> Result<Vec<Row>> {
    let (spec, dir, names) = args.sel.resolve()?;
    let mut rows = Vec::new();
    for n in &names {
        let model = load_named(&dir, n)?;
        rows.push(simulate(&spec, &model, args.queue_cap)?);
    }
    Ok(rows)
}

pub fn main(args: StandaloneArgs) -> Result<()> {
    let rows = run(&args)?;
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        println!(
            "{:<12} {:>14} {:>14} {:>9}",
            "model", "simulated_us", "measured_us", "error_%"
        );
        for r in &rows {
            let f = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.p$}"));
            println!(
                "{:<12} {:>14.1} {:>14} {:>9}",
                r.model,
                r.simulated_us,
                f(r.measured_us, 1),
                f(r.error_pct, 2)
            );
        }
    }
    Ok(())
}
