//! `reef-bench simspeed`: the simulator's own speed (issue 2 "Must show"):
//! kernel completions per wall second and the wall time of N back-to-back
//! inferences of a model (default 10,000 VGG inferences, ~710k kernels).

use crate::run::{back_to_back, REEF_DQ_CAPACITY};
use anyhow::Result;
use clap::Args;
use reef_model::load_named;
use reef_sim::{DeviceSpec, KernelShape, Sim, SimConfig};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct SimspeedArgs {
    #[arg(long, default_value = "mi50")]
    pub device: String,
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    #[arg(long, default_value = "vgg")]
    pub model: String,
    /// Inferences to run back to back.
    #[arg(long, default_value_t = 10_000)]
    pub inferences: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: SimspeedArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = args
        .models_dir
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    let model = load_named(&dir, &args.model)?;
    let shapes = KernelShape::for_model(&model, &spec)?;
    let mut sim = Sim::new(spec, SimConfig::default());
    let cpu0 = cpu_seconds();
    let t = Instant::now();
    let r = back_to_back(&mut sim, &model, &shapes, args.inferences, REEF_DQ_CAPACITY)?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let rate = r.kernels as f64 / wall;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": model.name, "inferences": args.inferences,
                "kernels": r.kernels, "blocks": model.total_blocks() * args.inferences,
                "wall_s": wall, "cpu_s": cpu, "kernels_per_s": rate,
                "simulated_s": r.end_ns as f64 / 1e9,
            })
        );
    } else {
        println!(
            "{} inferences of {} ({} kernels, {} blocks): wall {:.3} s (cpu {}), {:.0} kernel completions/s (wall), simulated {:.3} s",
            args.inferences,
            model.name,
            r.kernels,
            model.total_blocks() * args.inferences,
            wall,
            cpu.map_or("n/a".into(), |c| format!("{c:.3} s")),
            rate,
            r.end_ns as f64 / 1e9
        );
    }
    Ok(())
}

/// CPU time of this thread so far (from /proc/thread-self/schedstat, Linux),
/// reported next to wall time because the machine is shared.
fn cpu_seconds() -> Option<f64> {
    let t = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = t.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}
