//! `reef-bench aker` (issue 19): Aker's experiments on the simulated GPU
//! (../shared/papers/aker-adaptive-kernel-fusion.txt). `--table1`: the §3
//! Table 1 micro-benchmarks ([`table1`]; by construction, a check of the
//! resource-mix rule, not a reproduction); `--predictor`: the §6 two-stage
//! duration predictor trained on profiled fused runs, with its error on
//! held-out pairs ([`predictor`]); `--open-gap`: REEF §7's open gap,
//! throughput as a fraction of `streams` at RT latency ≤ 1.02, for `reef`
//! and the Aker managers on DISB A–E ([`gap`]). docs/aker.md.

pub mod colocate;
pub mod gap;
pub mod pairs;
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
    /// Print the Table 1 micro-benchmarks beside the paper's figures: a
    /// check that the resource-mix rule is implemented (the figures follow
    /// from the kernels' construction), not a reproduction.
    #[arg(long)]
    pub table1: bool,
    /// Train the fused-kernel duration predictor (§6) on MI50 model kernel
    /// pairs and report its error on held-out pairs.
    #[arg(long)]
    pub predictor: bool,
    /// LC service / BE application co-location (§8.3, §9) under the
    /// reef-sched policies aker, baymax, tacker, reef and streams, through
    /// the DISB runner (docs/aker.md).
    #[arg(long)]
    pub colocate: bool,
    /// The earlier self-contained co-location experiment with its private
    /// managers aker, baymax, lc-first and streams on one hand-driven
    /// stream (docs/results-aker.md).
    #[arg(long)]
    pub colocate_private: bool,
    /// LC models for --colocate (repeatable).
    #[arg(long = "lc", default_values_t = ["resnet152".to_string(), "vgg".to_string()])]
    pub lc: Vec<String>,
    /// BE models for --colocate (repeatable): a name, or a model directory
    /// path such as bench/aker-be/lbm (Parboil kernels, bench/aker-be).
    #[arg(long = "be", default_values_t = ["bert".to_string(), "densenet".to_string()])]
    pub be: Vec<String>,
    /// LC utilisations (Poisson arrival rate x stand-alone latency).
    #[arg(long = "util", default_values_t = [0.2, 0.5, 0.8])]
    pub util: Vec<f64>,
    /// QoS target as a multiple of the LC model's stand-alone latency.
    #[arg(long, default_value_t = 3.0)]
    pub qos_x: f64,
    /// LC queries per run.
    #[arg(long, default_value_t = 100)]
    pub queries: usize,
    /// Device for the predictor experiment (the MI50 models' kernels).
    #[arg(long, default_value = "mi50")]
    pub predictor_device: String,
    /// REEF §7's open gap: DISB throughput as a fraction of `streams` at
    /// RT latency <= 1.02 for reef, reef-dkp-mv, baymax and aker (not part
    /// of the default set: it runs DISB).
    #[arg(long)]
    pub open_gap: bool,
    /// DISB workloads for --open-gap (`A`..`E` or `all`).
    #[arg(long, default_value = "all")]
    pub gap_workloads: String,
    /// Virtual seconds per DISB run for --open-gap.
    #[arg(long, default_value_t = 10.0)]
    pub gap_duration: f64,
    /// Device for --open-gap.
    #[arg(long, default_value = "mi50")]
    pub gap_device: String,
    /// Check every request's outputs against an unpreempted run in
    /// --open-gap and --colocate (value tracking).
    #[arg(long)]
    pub check_values: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
}

pub fn main(args: AkerArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let all = !args.table1
        && !args.predictor
        && !args.colocate
        && !args.colocate_private
        && !args.open_gap;
    if args.table1 || all {
        let rows = table1::run(&spec)?;
        if args.json {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        } else {
            println!(
                "Aker Table 1 on {} (fused time / one kernel alone): a check that the \
                 resource-mix rule is implemented, by construction, not a reproduction",
                spec.name
            );
            println!(
                "(K_t, K_c: single-resource kernels with linear block curves, so the \
                 most-loaded-resource rule of sim/src/mix.rs gives 1 for complementary and \
                 2 for same-kind pairs by definition)"
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
                "sim: K_m declares its DRAM bytes (shared memory bandwidth as well as \
                 the mix); mix only: no DRAM bytes declared"
            );
        }
    }
    if args.predictor || all {
        predictor::main(&args)?;
    }
    if args.colocate || all {
        check_colocate(&args)?;
        let spec = DeviceSpec::by_name_or_path(&args.predictor_device)?;
        pairs::main(
            &spec,
            &args.lc,
            &args.be,
            &args.util,
            args.qos_x,
            args.queries,
            args.check_values,
            args.json,
        )?;
    }
    if args.colocate_private {
        colocate_main(&args)?;
    }
    if args.open_gap {
        let rows = gap::run(
            &args.gap_device,
            &args.gap_workloads,
            1,
            args.gap_duration,
            args.check_values,
        )?;
        if args.json {
            for r in &rows {
                println!("{}", serde_json::to_string(r)?);
            }
        } else {
            gap::print(&rows, &args.gap_device, args.gap_duration, 1);
        }
    }
    Ok(())
}

fn check_colocate(args: &AkerArgs) -> Result<()> {
    if !(args.qos_x.is_finite() && args.qos_x >= 1.0) {
        anyhow::bail!("--qos-x must be a number of at least 1 (a multiple of the LC latency)");
    }
    if let Some(u) = args.util.iter().find(|u| !(u.is_finite() && **u > 0.0)) {
        anyhow::bail!("--util {u}: utilisations must be positive numbers");
    }
    if args.queries == 0 {
        anyhow::bail!("--queries must be at least 1");
    }
    Ok(())
}

fn colocate_main(args: &AkerArgs) -> Result<()> {
    if !(args.qos_x.is_finite() && args.qos_x > 0.0) {
        anyhow::bail!("--qos-x must be a positive number (a multiple of the LC latency)");
    }
    if let Some(u) = args.util.iter().find(|u| !(u.is_finite() && **u > 0.0)) {
        anyhow::bail!("--util {u}: utilisations must be positive numbers");
    }
    if args.queries == 0 {
        anyhow::bail!("--queries must be at least 1");
    }
    let spec = DeviceSpec::by_name_or_path(&args.predictor_device)?;
    if !args.json {
        println!(
            "Aker §8.3/§9 co-location on {}: {} Poisson LC queries per run, QoS = {} x LC stand-alone latency",
            spec.name, args.queries, args.qos_x
        );
        println!(
            "{:<10} {:<10} {:<9} {:>5} {:>8} {:>6} {:>6} {:>8} {:>9} {:>7} {:>10}",
            "LC",
            "BE",
            "manager",
            "util",
            "qos ms",
            "viol",
            ">1.01",
            "p99 ms",
            "BE inf/s",
            "fused",
            "vs baymax"
        );
    }
    let mut gains = Vec::new();
    for lc_name in &args.lc {
        let lc = colocate::kernels_of(&spec, lc_name)?;
        for be_name in &args.be {
            let be = colocate::kernels_of(&spec, be_name)?;
            let mut fusions = std::collections::HashMap::new();
            for &u in &args.util {
                let mut rows = Vec::new();
                for m in colocate::MANAGERS {
                    rows.push(colocate::run_one(
                        &spec,
                        m,
                        lc_name,
                        &lc,
                        be_name,
                        &be,
                        &mut fusions,
                        u,
                        args.qos_x,
                        args.queries,
                        7,
                    )?);
                }
                rows.push(colocate::run_streams(
                    &spec,
                    lc_name,
                    &lc,
                    be_name,
                    &be,
                    u,
                    args.qos_x,
                    args.queries,
                    7,
                )?);
                let baymax = rows
                    .iter()
                    .find(|r| r.manager == "baymax")
                    .map(|r| r.be_per_s);
                for r in &rows {
                    let vs = baymax.map(|b| r.be_per_s / b - 1.0).unwrap_or(0.0);
                    if r.manager == "aker" {
                        gains.push(vs);
                    }
                    if args.json {
                        println!("{}", serde_json::to_string(r)?);
                    } else {
                        println!(
                            "{:<10} {:<10} {:<9} {:>5.2} {:>8.2} {:>6} {:>6} {:>8.2} {:>9.2} {:>7} {:>+9.1}%",
                            r.lc, r.be, r.manager, r.utilisation, r.qos_ms, r.violations,
                            r.queries - r.within_1pct, r.p99_ms,
                            r.be_per_s, r.fused_launches, vs * 100.0
                        );
                    }
                }
            }
        }
    }
    if !args.json && !gains.is_empty() {
        println!(
            "aker vs baymax, BE throughput (ratio - 1, the issue's reading of Eq. 6): mean {:+.1} % \
             over {} runs; paper: +50.1 % (its memory-prefer BE kernels run 12-16 us, Parboil/Rodinia)",
            gains.iter().sum::<f64>() / gains.len() as f64 * 100.0,
            gains.len()
        );
    }
    Ok(())
}
