//! `reef-bench crosscheck` (issue 14 item 3): the compiled-kernel cost model
//! (reef-sim `costmodel`: roofline over the preset's peak FP32 rate and
//! memory bandwidth, occupancy from ptxas resources) against measured
//! kernels, layer by layer, on the preset the measurements come from
//! (`mi50`, REEF §6.2 testbed; ../shared/models/README.md).
//!
//! Convolutions are matched by shape: a convolution's weight tensor
//! (its largest parameter argument, in elements) names the layer; kernels
//! with the same weight size are matched in launch order. Each side's time
//! is one kernel run alone (the measured `total_latency` includes the launch
//! path; the simulated one includes the preset's host launch, fetch and
//! dispatch). The whole model is one inference back to back
//! ([`crate::standalone::simulate`]) against the measured `model_latency`.
//! The last column compares the co-residency shape: one block's time with K
//! co-resident blocks over its time alone, measured (the simulator's block
//! curve of the measured kernel, `latency[k]` less the launch path) and in
//! the cost model (`exec(K) / exec(1)`).
//! Results: docs/compile.md "MI50 cross-check".

use crate::standalone::simulate;
use anyhow::{bail, Context, Result};
use clap::Args;
use reef_model::Model;
use reef_sim::{DeviceSpec, EventKind, KernelLaunch, KernelShape, Sim, SimConfig, Tags};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct CrosscheckArgs {
    /// A model directory written by reef-compile.
    #[arg(long)]
    pub compiled: PathBuf,
    /// A measured model directory (e.g. ../shared/models/mi50/vgg).
    #[arg(long)]
    pub measured: PathBuf,
    /// Device preset or spec file the cost model runs on.
    #[arg(long, default_value = "mi50")]
    pub device: String,
}

/// One kernel alone on a fresh simulator: completion time in ns.
fn alone_ns(spec: &DeviceSpec, shape: &Arc<KernelShape>) -> Result<u64> {
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4)?;
    sim.launch(s, KernelLaunch::new(shape.clone(), Tags::default()))?;
    while let Some((t, evs)) = sim.step() {
        if evs.iter().any(|e| e.kind == EventKind::Completed) {
            return Ok(t);
        }
    }
    bail!("{}: never completed", shape.name)
}

/// Convolution kernels of a model: (kernel index, weight elements).
fn convolutions(m: &Model, params: &HashSet<usize>) -> Vec<(usize, u64)> {
    m.kernels
        .iter()
        .filter(|k| k.name.contains("conv2d"))
        .filter_map(|k| {
            k.args
                .iter()
                .filter(|a| params.contains(a))
                .map(|&a| m.buffers[a].elements)
                .max()
                .map(|w| (k.index, w))
        })
        .collect()
}

pub fn main(args: CrosscheckArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let comp = Model::load(&args.compiled)?;
    let meas = Model::load(&args.measured)?;
    let cparams: HashSet<usize> = comp
        .compiled
        .as_ref()
        .context("--compiled is not a reef-compile directory")?
        .params
        .iter()
        .copied()
        .collect();
    // Measured schedules name parameters p0, p1, ... (and the input `data`).
    let mparams: HashSet<usize> = meas
        .buffers
        .iter()
        .filter(|b| b.name.starts_with('p') && b.name[1..].parse::<u32>().is_ok())
        .map(|b| b.index)
        .collect();
    if meas.kernels.iter().any(|k| k.profile.is_none()) {
        bail!("--measured {} has no profile", args.measured.display());
    }
    let cshapes = KernelShape::for_model(&comp, &spec)
        .map_err(|e| anyhow::anyhow!("{} on {}: {e}", comp.name, spec.name))?;
    // The measured kernels as the simulator runs them on this preset (on
    // the mi50, the measured curves less the launch path).
    let mshapes = KernelShape::for_model(&meas, &spec)
        .map_err(|e| anyhow::anyhow!("{} on {}: {e}", meas.name, spec.name))?;
    let mut by_weight: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, w) in convolutions(&meas, &mparams) {
        by_weight.entry(w).or_default().push(i);
    }
    let mut used: BTreeMap<u64, usize> = BTreeMap::new();
    println!(
        "| # | compiled kernel | weight elements | measured kernel | measured us | cost model us | model/measured | block-time growth k=1..K measured / model |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (mut sum_m, mut sum_c, mut n) = (0.0, 0.0, 0);
    let mut unmatched = 0;
    let mut growth: Vec<(f64, f64)> = Vec::new();
    for (i, w) in convolutions(&comp, &cparams) {
        let c_us = alone_ns(&spec, &cshapes[i])? as f64 / 1000.0;
        let slot = used.entry(w).or_default();
        let Some(&mi) = by_weight.get(&w).and_then(|v| v.get(*slot)) else {
            unmatched += 1;
            println!(
                "| {i} | {} | {w} | (no measured convolution with this weight) | - | {c_us:.1} | - |",
                comp.kernels[i].name
            );
            continue;
        };
        *slot += 1;
        let prof = meas.kernels[mi].profile.as_ref().unwrap();
        let m_us = prof.total_latency_ns as f64 / 1000.0;
        sum_m += m_us;
        sum_c += c_us;
        n += 1;
        // Co-residency shape: how much one block slows down from 1 to K
        // blocks per CU, K = the measured curve's length (or the compiled
        // kernel's occupancy limit, whichever is smaller).
        let ms = &mshapes[mi];
        let kmax = ms.curve_len().min(cshapes[i].curve_len()).max(1);
        let growth_m = ms.exec_ns(kmax as u32) as f64 / ms.exec_ns(1).max(1) as f64;
        let growth_c = cshapes[i].exec_ns(kmax as u32) as f64 / cshapes[i].exec_ns(1).max(1) as f64;
        growth.push((growth_m, growth_c));
        println!(
            "| {i} | {} | {w} | {mi} {} | {m_us:.1} | {c_us:.1} | {:.2} | K={kmax}: {growth_m:.2} / {growth_c:.2} |",
            comp.kernels[i].name,
            meas.kernels[mi].name,
            c_us / m_us
        );
    }
    println!(
        "\nmatched convolutions: {n} (unmatched compiled: {unmatched}); sum measured {sum_m:.1} us, \
         cost model {sum_c:.1} us, ratio {:.2}",
        if sum_m > 0.0 { sum_c / sum_m } else { 0.0 }
    );
    if !growth.is_empty() {
        let g = growth.len() as f64;
        println!(
            "block-time growth from 1 to K co-resident blocks, mean over matched: measured {:.2}, cost model {:.2}",
            growth.iter().map(|x| x.0).sum::<f64>() / g,
            growth.iter().map(|x| x.1).sum::<f64>() / g
        );
    }
    let whole = simulate(&spec, &comp, crate::run::REEF_DQ_CAPACITY)?;
    let meas_sim = simulate(&spec, &meas, crate::run::REEF_DQ_CAPACITY)?;
    println!(
        "whole model, one inference back to back on {}: cost model ({} kernels) {:.1} us; \
         measured model_latency ({} kernels) {} us; simulator on the measured curves {:.1} us",
        spec.name,
        comp.kernels.len(),
        whole.simulated_us,
        meas.kernels.len(),
        meas.measured_latency_ns()
            .map_or("-".into(), |n| format!("{:.1}", n as f64 / 1000.0)),
        meas_sim.simulated_us
    );
    Ok(())
}
