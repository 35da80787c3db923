//! `reef-bench aker` (issue 19): Aker's experiments on the simulated GPU
//! (../shared/papers/aker-adaptive-kernel-fusion.txt). `--table1`: the §3
//! Table 1 micro-benchmarks ([`table1`]); `--predictor`: the §6 two-stage
//! duration predictor trained on profiled fused runs, with its error on
//! held-out pairs ([`predictor`]). docs/aker.md.

pub mod predictor;
pub mod table1;

use anyhow::Result;
use clap::Args;
use reef_sim::DeviceSpec;

#[derive(Debug, Args)]
pub struct AkerArgs {
    /// Device preset or spec file (Table 1 needs tensor cores for Bench-A/B:
    /// gv100 or h100).
    #[arg(long, default_value = "gv100")]
    pub device: String,
    /// Print the Table 1 micro-benchmarks beside the paper's figures.
    #[arg(long)]
    pub table1: bool,
    /// Train the fused-kernel duration predictor (§6) on MI50 model kernel
    /// pairs and report its error on held-out pairs.
    #[arg(long)]
    pub predictor: bool,
    /// Device for the predictor experiment (the MI50 models' kernels).
    #[arg(long, default_value = "mi50")]
    pub predictor_device: String,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: AkerArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let all = !args.table1 && !args.predictor;
    if args.table1 || all {
        let rows = table1::run(&spec)?;
        if args.json {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        } else {
            println!(
                "Aker Table 1 on {} (fused time / one kernel alone)",
                spec.name
            );
            println!(
                "{:<8} {:<4} {:<4} {:>6} {:>10} {:>14}",
                "bench", "k1", "k2", "paper", "sim", "sim mix only"
            );
            for r in &rows {
                println!(
                    "{:<8} {:<4} {:<4} {:>6.2} {:>10.3} {:>14.3}",
                    r.bench, r.k1, r.k2, r.paper, r.sim, r.sim_mix_only
                );
            }
            println!(
                "sim: with the preset's device-level contention (contention_share = {}); \
                 mix only: contention_share = 0",
                spec.contention_share
            );
        }
    }
    if args.predictor || all {
        predictor::main(&args)?;
    }
    Ok(())
}
