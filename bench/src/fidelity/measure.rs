//! The simulator runs behind the compared figures: DISB A–E under each
//! policy, the per-model preemption experiment (Fig. 18) and Fig. 27's
//! padded pairs.

use super::quotes::Sim;
use super::FidelityArgs;
use crate::disb::{self, preempt, runner::PreparedModel, workload::Workload, DisbArgs};
use crate::dkp::{self, DkpArgs};
use anyhow::{bail, Context, Result};
use reef_sim::DeviceSpec;
use std::collections::BTreeMap;

/// Results of one device's runs, by (policy, workload).
pub(super) type DisbRuns = BTreeMap<(String, String), disb::metrics::PolicyResult>;

pub(super) fn run_disb(spec: &DeviceSpec, args: &FidelityArgs) -> Result<DisbRuns> {
    let shared = reef_model::shared_dir();
    let mut workloads = Vec::new();
    for p in disb::workload::resolve("all", &shared) {
        workloads.push(Workload::load(&p)?);
    }
    let dir = reef_model::default_models_dir();
    let set = disb::load_models(spec, &dir, &workloads, args.seed)?;
    let dargs = DisbArgs {
        device: spec.name.clone(),
        seed: args.seed,
        duration: args.duration,
        ..DisbArgs::defaults("all")
    };
    let policies = ["rt-only", "seq", "streams", "wait", "reef"];
    let jobs: Vec<(usize, &str)> = (0..workloads.len())
        .flat_map(|w| policies.iter().map(move |&p| (w, p)))
        .collect();
    let out = crate::run::par_map(
        &jobs,
        crate::run::threads(args.jobs),
        None,
        |&(w, p)| format!("{} {} {p}", spec.name, workloads[w].name),
        |&(w, p)| disb::run_one(spec, &set, &workloads[w], p, &dargs),
    );
    let mut runs = BTreeMap::new();
    for r in out {
        let r = r?;
        runs.insert((r.policy.clone(), r.workload.clone()), r);
    }
    Ok(runs)
}

pub(super) fn disb_value(runs: &DisbRuns, s: Sim) -> Result<f64> {
    let get = |p: &str, w: &str| {
        runs.get(&(p.to_string(), w.to_string()))
            .with_context(|| format!("no DISB run {w} {p}"))
    };
    let lat = |p: &str, w: &str| -> Result<f64> {
        get(p, w)?
            .rt_latency_norm_mean
            .with_context(|| format!("DISB {w} {p}: no RT request finished"))
    };
    let pre = |p: &str, w: &str| -> Result<f64> {
        get(p, w)?
            .preempt_latency_us_mean
            .with_context(|| format!("DISB {w} {p}: no preemption"))
    };
    Ok(match s {
        Sim::Lat(p, w) => lat(p, w)?,
        Sim::LatOverRtOnly(p, w) => lat(p, w)? / lat("rt-only", w)?,
        Sim::Tput(p, w) => get(p, w)?.throughput_norm_overall,
        Sim::PreemptRatio(w) => pre("wait", w)? / pre("reef", w)?,
        _ => unreachable!("not a DISB figure"),
    })
}

pub(super) fn preempt_value(
    spec: &DeviceSpec,
    policy: &str,
    model: &str,
    seed: u64,
) -> Result<f64> {
    let dir = reef_model::default_models_dir();
    let m = PreparedModel::new(reef_model::load_named(&dir, model)?, spec)?;
    let rt = preempt::rt_model(spec)?;
    let (lat, _, _) = preempt::measure(spec, &m, &rt, policy, 200, seed)?;
    disb::metrics::mean(&lat).with_context(|| format!("{model} {policy}: no preemption"))
}

/// Fig. 27 from the 25 ordered model pairs under `reef`, 2 s each (the
/// setup of docs/results-dkp.md): (p90 us, % of padded RT kernels with no
/// overhead).
pub(super) fn fig27(spec: &DeviceSpec, seed: u64) -> Result<(f64, f64)> {
    let dir = reef_model::default_models_dir();
    let names = ["resnet152", "vgg", "densenet", "inception", "bert"];
    let mut models = Vec::new();
    let mut standalone = Vec::new();
    for n in names {
        let m = PreparedModel::new(reef_model::load_named(&dir, n)?, spec)?;
        standalone.push(disb::standalone_ns(spec, &m, 10, seed)?);
        models.push(m);
    }
    let args = DkpArgs {
        selection: false,
        duration: 2.0,
        device: spec.name.clone(),
        models: names.join(","),
        policy: "reef".into(),
        seed,
        jobs: None,
        json: false,
        iterations: 0,
        rt_gap_us: 0.0,
        explain: false,
        lost: false,
        models_dir: None,
    };
    let mut all: Vec<i64> = Vec::new();
    for rt in 0..names.len() {
        for be in 0..names.len() {
            let r = dkp::run_pair(spec, &models, &standalone, rt, be, "reef", &args)?;
            all.extend(r.overhead_ns);
        }
    }
    if all.is_empty() {
        bail!("Fig. 27: no padded launch in any pair");
    }
    all.sort_unstable();
    let unhurt = all.iter().filter(|&&o| o <= 0).count() as f64 / all.len() as f64;
    Ok((dkp::pct(&all, 90.0) as f64 / 1e3, 100.0 * unhurt))
}
