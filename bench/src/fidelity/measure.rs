//! The simulator runs behind the compared figures: DISB A–E under each
//! policy, the per-model preemption experiment (Fig. 18) and Fig. 27's
//! padded pairs.
//!
//! Models are the measured MI50 schedules (run on the GV100 translated to
//! its 80 SMs), except on the GV100 with `--gv100-models DIR`: a DISB model
//! whose directory DIR holds, compiled by reef-compile for sm_70, runs from
//! that build instead (issue 31 item 2; docs/fidelity.md).

use super::quotes::Sim;
use super::FidelityArgs;
use crate::disb::{self, preempt, runner::PreparedModel, workload::Workload, DisbArgs};
use crate::dkp::{self, DkpArgs};
use anyhow::{bail, Context, Result};
use reef_model::Model;
use reef_sim::DeviceSpec;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where a device's models come from (see the module doc).
pub(super) struct Models {
    /// Compiled sm_70 builds that replace the MI50 schedules of the same
    /// name (gv100 only).
    compiled: Option<PathBuf>,
}

impl Models {
    pub(super) fn for_device(spec: &DeviceSpec, args: &FidelityArgs) -> Self {
        Models {
            compiled: args.gv100_models.clone().filter(|_| spec.name == "gv100"),
        }
    }

    /// The compiled build of `name` (a DISB name or model directory) when
    /// there is one.
    fn compiled_dir(&self, name: &str) -> Option<PathBuf> {
        let d = reef_model::disb_to_dir(name).unwrap_or(name);
        self.compiled
            .as_ref()
            .map(|c| c.join(d))
            .filter(|p| p.is_dir())
    }

    /// Whether `name` runs from a compiled build.
    pub(super) fn is_compiled(&self, name: &str) -> bool {
        self.compiled_dir(name).is_some()
    }

    pub(super) fn load(&self, name: &str) -> Result<Model> {
        let Some(dir) = self.compiled_dir(name) else {
            return Ok(reef_model::load_named(
                &reef_model::default_models_dir(),
                name,
            )?);
        };
        let m = Model::load(&dir)?;
        // The point is the GV100's own code: a build without sm_70 would
        // run on another architecture's resources.
        let archs = m.compiled.as_ref().map(|c| c.archs.clone());
        if !archs
            .as_ref()
            .is_some_and(|a| a.iter().any(|x| x == "sm_70"))
        {
            bail!(
                "{}: not a reef-compile build for sm_70 (architectures {archs:?}); \
                 compile it with `reef-compile MODEL.onnx --arch sm_70 -o {}`",
                dir.display(),
                dir.display()
            );
        }
        Ok(m)
    }
}

/// Results of one device's runs, by (policy, workload).
pub(super) type DisbRuns = BTreeMap<(String, String), disb::metrics::PolicyResult>;

/// DISB A–E from the shared workload files.
pub(super) fn workloads() -> Result<Vec<Workload>> {
    let shared = reef_model::shared_dir();
    let mut workloads = Vec::new();
    for p in disb::workload::resolve("all", &shared) {
        workloads.push(Workload::load(&p)?);
    }
    Ok(workloads)
}

pub(super) fn run_disb(
    spec: &DeviceSpec,
    args: &FidelityArgs,
    models: &Models,
) -> Result<DisbRuns> {
    let workloads = workloads()?;
    let set = disb::load_models_with(spec, &|n| models.load(n), &workloads, args.seed)?;
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
    models: &Models,
    policy: &str,
    model: &str,
    seed: u64,
) -> Result<f64> {
    let m = PreparedModel::new(models.load(model)?, spec)?;
    let rt = preempt::rt_model(spec)?;
    let (lat, _, _) = preempt::measure(spec, &m, &rt, policy, 200, seed)?;
    disb::metrics::mean(&lat).with_context(|| format!("{model} {policy}: no preemption"))
}

/// The five models of Fig. 27's pairs.
pub(super) const FIG27_MODELS: [&str; 5] = ["resnet152", "vgg", "densenet", "inception", "bert"];

/// Fig. 27 from the 25 ordered model pairs under `reef`, 2 s each (the
/// setup of docs/results-dkp.md): (p90 us, % of padded RT kernels with no
/// overhead).
pub(super) fn fig27(spec: &DeviceSpec, from: &Models, seed: u64) -> Result<(f64, f64)> {
    let names = FIG27_MODELS;
    let mut models = Vec::new();
    let mut standalone = Vec::new();
    for n in names {
        let m = PreparedModel::new(from.load(n)?, spec)?;
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
