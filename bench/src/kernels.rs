//! `reef-bench kernels`: the calibration mechanism made visible
//! (docs/simulator.md "Calibration"). For each model it prints the sum of
//! the measured stand-alone kernel latencies (`total_latency`), the sum of
//! the simulated stand-alone kernel latencies (each kernel alone on an idle
//! device, paying the whole launch path), the simulated and measured
//! back-to-back model latency, the median per-kernel error, and the busy-CU
//! range over one back-to-back inference (REEF §2.1 Fig. 3(b) reports 6.7%
//! to 86.7% of 60 CUs for VGG on the MI50), and the kernels' DRAM draw
//! (docs/simulator.md "Shared memory bandwidth"; REEF §6.5, Fig. 27): the
//! share that declares no DRAM bytes and the median draw at full occupancy.

use crate::run::{kernel_launch, DeviceModels, REEF_DQ_CAPACITY};
use anyhow::Result;
use clap::Args;
use reef_model::{load_named, Model};
use reef_sim::{DeviceSpec, EventKind, HostQueues, KernelShape, Sim, SimConfig};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct KernelsArgs {
    #[command(flatten)]
    pub sel: DeviceModels,
    #[arg(long)]
    pub json: bool,
    /// Also print every kernel: measured total_latency against the
    /// simulated stand-alone latency.
    #[arg(long)]
    pub per_kernel: bool,
}

/// One kernel alone: measured `total_latency` against the simulation.
#[derive(Debug, Serialize)]
pub struct KernelRow {
    pub model: String,
    pub index: usize,
    pub kernel: String,
    pub blocks: u64,
    pub measured_us: Option<f64>,
    pub simulated_us: f64,
    /// DRAM draw of the kernel filling every CU at its curve's top, as a
    /// fraction of the device's bandwidth (shared memory bandwidth,
    /// docs/simulator.md); 0 when it declares no DRAM bytes.
    pub dram_util: f64,
}

#[derive(Debug, Serialize)]
pub struct KernelsRow {
    pub model: String,
    pub kernels: usize,
    pub measured_sum_total_us: f64,
    pub simulated_sum_alone_us: f64,
    pub measured_model_us: f64,
    pub simulated_model_us: f64,
    pub median_kernel_error_pct: f64,
    pub busy_cus_min: usize,
    pub busy_cus_max: usize,
    pub busy_cus_mean: f64,
    /// Kernel launches that declare no DRAM bytes (%).
    pub dram_zero_pct: f64,
    /// Median `dram_util` over the kernel launches.
    pub dram_util_median: f64,
    #[serde(skip)]
    pub per_kernel: Vec<KernelRow>,
}

fn alone_ns(
    spec: &DeviceSpec,
    model: &Model,
    shapes: &[Arc<KernelShape>],
    i: usize,
) -> Result<u64> {
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 1)?;
    sim.launch(s, kernel_launch(model, shapes, i, 0))?;
    let mut end = 0;
    while let Some((t, evs)) = sim.step() {
        if evs.iter().any(|e| e.kind == EventKind::Completed) {
            end = t;
        }
    }
    Ok(end)
}

pub fn row(spec: &DeviceSpec, model: &Model) -> Result<KernelsRow> {
    let shapes = KernelShape::for_model(model, spec)?;
    let mut sum_alone = 0u64;
    let mut errs = Vec::new();
    let mut per_kernel = Vec::with_capacity(model.kernels.len());
    for (i, k) in model.kernels.iter().enumerate() {
        let t = alone_ns(spec, model, &shapes, i)?;
        sum_alone += t;
        per_kernel.push(KernelRow {
            model: model.name.clone(),
            index: i,
            kernel: k.name.clone(),
            blocks: k.num_blocks(),
            measured_us: k
                .profile
                .as_ref()
                .map(|p| p.total_latency_ns as f64 / 1000.0),
            simulated_us: t as f64 / 1000.0,
            dram_util: dram_util(spec, &shapes[i]),
        });
        if let Some(p) = &k.profile {
            let m = p.total_latency_ns as f64;
            errs.push(100.0 * (t as f64 - m) / m);
        }
    }
    errs.sort_by(|a, b| a.total_cmp(b));
    let median = errs.get(errs.len() / 2).copied().unwrap_or(f64::NAN);

    // One back-to-back inference, tracking busy CUs between kernel start and
    // end (time-weighted mean).
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, REEF_DQ_CAPACITY)?;
    let mut host = HostQueues::new();
    for i in 0..model.kernels.len() {
        host.submit(s, kernel_launch(model, &shapes, i, 0));
    }
    host.pump(&mut sim)?;
    let (mut lo, mut hi, mut area, mut first, mut last) = (usize::MAX, 0, 0u128, None, 0u64);
    let mut busy = 0usize;
    while let Some((t, evs)) = sim.step() {
        if first.is_some() {
            area += busy as u128 * (t - last) as u128;
        }
        if first.is_none() && evs.iter().any(|e| e.kind == EventKind::Started) {
            first = Some(t);
        }
        busy = sim.busy_cus();
        if first.is_some() && !sim.stream_idle(s) && busy > 0 {
            lo = lo.min(busy);
            hi = hi.max(busy);
        }
        last = t;
        host.pump(&mut sim)?;
    }
    let span = last - first.unwrap_or(0);
    let mut ws: Vec<f64> = shapes.iter().map(|s| dram_util(spec, s)).collect();
    ws.sort_by(|a, b| a.total_cmp(b));
    let zero = ws.iter().filter(|&&w| w == 0.0).count();
    Ok(KernelsRow {
        model: model.name.clone(),
        kernels: model.kernels.len(),
        measured_sum_total_us: model
            .kernels
            .iter()
            .filter_map(|k| k.profile.as_ref())
            .map(|p| p.total_latency_ns as f64 / 1000.0)
            .sum(),
        simulated_sum_alone_us: sum_alone as f64 / 1000.0,
        measured_model_us: model.measured_latency_ns().unwrap_or(0) as f64 / 1000.0,
        simulated_model_us: last as f64 / 1000.0,
        median_kernel_error_pct: median,
        busy_cus_min: if lo == usize::MAX { 0 } else { lo },
        busy_cus_max: hi,
        busy_cus_mean: if span > 0 {
            area as f64 / span as f64
        } else {
            0.0
        },
        dram_zero_pct: 100.0 * zero as f64 / ws.len().max(1) as f64,
        dram_util_median: ws.get(ws.len() / 2).copied().unwrap_or(0.0),
        per_kernel,
    })
}

fn dram_util(spec: &DeviceSpec, s: &KernelShape) -> f64 {
    let k = s.curve_len() as f64;
    let top = s.exec_ns(s.curve_len() as u32).max(1) as f64 * 1e-9;
    k * s.dram_bytes_per_block as f64 * spec.compute_units as f64
        / (top * spec.memory_bandwidth_bytes_per_s as f64)
}

pub fn main(args: KernelsArgs) -> Result<()> {
    let (spec, dir, names) = args.sel.resolve()?;
    if !args.json {
        println!(
            "{:<10} {:>4} {:>12} {:>12} {:>10} {:>10} {:>9} {:>14} {:>6} {:>6}",
            "model",
            "n",
            "sum_meas_us",
            "sum_sim_us",
            "model_us",
            "sim_us",
            "med_err%",
            "busy_cus",
            "b0_%",
            "dram"
        );
    }
    for n in &names {
        let model = load_named(&dir, n)?;
        let r = row(&spec, &model)?;
        if args.per_kernel {
            for k in &r.per_kernel {
                if args.json {
                    println!("{}", serde_json::to_string(k)?);
                } else {
                    println!(
                        "  {:<10} {:>4} {:>6} blocks {:>8} us measured {:>8.1} us simulated  dram {:.3}  {}",
                        k.model,
                        k.index,
                        k.blocks,
                        k.measured_us.map_or("-".into(), |m| format!("{m:.1}")),
                        k.simulated_us,
                        k.dram_util,
                        k.kernel
                    );
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!(
                "{:<10} {:>4} {:>12.0} {:>12.0} {:>10.0} {:>10.0} {:>9.1} {:>4}-{:<3}~{:>5.1} {:>6.0} {:>6.2}",
                r.model,
                r.kernels,
                r.measured_sum_total_us,
                r.simulated_sum_alone_us,
                r.measured_model_us,
                r.simulated_model_us,
                r.median_kernel_error_pct,
                r.busy_cus_min,
                r.busy_cus_max,
                r.busy_cus_mean,
                r.dram_zero_pct,
                r.dram_util_median
            );
        }
    }
    Ok(())
}
