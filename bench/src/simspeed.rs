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
    let t = Instant::now();
    let r = back_to_back(&mut sim, &model, &shapes, args.inferences, REEF_DQ_CAPACITY)?;
    let wall = t.elapsed().as_secs_f64();
    let rate = r.kernels as f64 / wall;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": model.name, "inferences": args.inferences,
                "kernels": r.kernels, "blocks": model.total_blocks() * args.inferences,
                "wall_s": wall, "kernels_per_s": rate,
                "simulated_s": r.end_ns as f64 / 1e9,
            })
        );
    } else {
        println!(
            "{} inferences of {} ({} kernels, {} blocks): wall {:.3} s, {:.0} kernel completions/s, simulated {:.3} s",
            args.inferences,
            model.name,
            r.kernels,
            model.total_blocks() * args.inferences,
            wall,
            rate,
            r.end_ns as f64 / 1e9
        );
    }
    Ok(())
}
