//! `reef-bench fidelity` (issue 15): every DISB and preemption figure the
//! REEF paper's text quotes (../shared/papers/reef-tocs2025.txt §6.3 Figs.
//! 15–16, §6.4 Figs. 17, 18, 21, §6.5 Fig. 27) beside the simulator's, on
//! the MI50 and the GV100, with the ratio; the command fails when a figure
//! is off by more than its bound (±25 %, docs/fidelity.md). Figures whose
//! match holds by construction (a simulator parameter was taken from them,
//! a calibration, or the metric's own definition) are marked so
//! (`by_construction` in `--json`): they are shown, but they calibrate, they
//! do not predict, and they are left out of the within/outside counts.

use crate::disb::{self, preempt, runner::PreparedModel, workload::Workload, DisbArgs};
use crate::dkp::{self, DkpArgs};
use anyhow::{bail, Context, Result};
use reef_sim::DeviceSpec;
use serde::Serialize;
use std::collections::BTreeMap;

/// The bound every figure is judged by: the simulated value may differ from
/// the paper's by at most this share (docs/fidelity.md; fixed before the
/// comparison, not tuned).
pub const BOUND: f64 = 0.25;

/// Arguments of `reef-bench fidelity`.
#[derive(clap::Args, Debug, Clone)]
pub struct FidelityArgs {
    /// Devices to compare, comma-separated (the paper's two testbeds).
    #[arg(long, default_value = "mi50,gv100")]
    pub device: String,
    /// Virtual seconds per DISB run (default: the workload files' 60 s).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seed of the simulator and of Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// One JSON object per figure instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// What the paper says about a figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Paper {
    /// A value.
    Is(f64),
    /// "less than" / "at most" a value.
    AtMost(f64),
    /// A range the text gives for several workloads or models together.
    Within(f64, f64),
}

impl Paper {
    /// The paper's value nearest to `sim` (the value itself, the bound
    /// when above it, the nearest end of a range).
    pub fn reference(self, sim: f64) -> f64 {
        match self {
            Paper::Is(v) => v,
            Paper::AtMost(v) => sim.min(v).max(f64::MIN_POSITIVE),
            Paper::Within(lo, hi) => sim.clamp(lo, hi),
        }
    }

    /// simulated / reference, and whether it is within the bound.
    pub fn judge(self, sim: f64) -> (f64, bool) {
        let r = sim / self.reference(sim);
        let ok = r.is_finite() && (r - 1.0).abs() <= BOUND + 1e-12;
        // An upper bound is met by anything at or below it.
        let ok = ok || matches!(self, Paper::AtMost(v) if sim <= v);
        (r, ok)
    }

    fn show(self) -> String {
        match self {
            Paper::Is(v) => format!("{v}"),
            Paper::AtMost(v) => format!("<= {v}"),
            Paper::Within(a, b) => format!("{a}-{b}"),
        }
    }
}

/// Where the simulated value comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sim {
    /// Mean normalised RT latency of a DISB run.
    Lat(&'static str, &'static str),
    /// The same over `rt-only`'s (REEF's "increase" in D and E).
    LatOverRtOnly(&'static str, &'static str),
    /// Normalised overall throughput of a DISB run.
    Tput(&'static str, &'static str),
    /// Mean preemption latency, `wait` over `reef`, in a DISB workload.
    PreemptRatio(&'static str),
    /// Mean preemption latency (us) of one BE model under a policy.
    PreemptModel(&'static str, &'static str),
    /// Stand-alone resnet152 latency (ms) at a device-queue capacity.
    QueueCap(usize),
    /// Padded RT kernel overhead under `reef` over the 25 model pairs:
    /// p90 in us, or the percentage of kernels not slowed.
    Fig27P90,
    Fig27Unhurt,
}

/// One quoted figure.
struct Quote {
    device: &'static str,
    fig: &'static str,
    what: &'static str,
    paper: Paper,
    sim: Sim,
    /// Set when the match holds by construction (a parameter came from it),
    /// or to name what the simulator lacks for a figure that left its bound.
    note: &'static str,
    /// The match holds by construction (a simulator parameter, a
    /// calibration or the metric's definition gives the paper's figure):
    /// shown, never counted as within or outside the bound.
    by_construction: bool,
}

const RESET_NOTE: &str = "by construction on mi50: flag_check_ns comes from Fig. 20b's 31 us queue reset, kill 3 us from §4.5";
const RESET_NOTE_NV: &str =
    "partly by construction: flag_check_ns from the MI50's Fig. 20b, kill 15 us from §4.6";
const SEQ_NOTE: &str =
    "by construction: throughput is normalised to the saturated serial run, so SEQ's is 1 by definition";
const CAL_NOTE: &str =
    "calibration: block costs come from the MI50 profiles of this model (model_latency 13.2 ms)";
/// The two figures issue 15 saw leave the bound, bisected in
/// docs/results.md: co-running best-effort work costs too little, since
/// L2 and loaded-memory-latency contention are not modelled.
const CORUN_NOTE_MI50_C: &str = "left ±25 % with the resource mix (c00c1a9), further with contention_share's removal (a3cfc29); L2 and loaded-latency contention not modelled (docs/results.md)";
const CORUN_NOTE_GV100_E: &str = "left ±25 % with contention_share's removal (a3cfc29); L2 and loaded-latency contention not modelled (docs/results.md)";

fn quotes() -> Vec<Quote> {
    use Paper::*;
    use Sim::*;
    let q = |device, fig, what, paper, sim| Quote {
        device,
        fig,
        what,
        paper,
        sim,
        note: "",
        by_construction: false,
    };
    let mut v = vec![
        // §6.3, MI50 (Fig. 15).
        q("mi50", "15", "SEQ RT latency A", Is(2.87), Lat("seq", "A")),
        q("mi50", "15", "SEQ RT latency B", Is(3.66), Lat("seq", "B")),
        q(
            "mi50",
            "15",
            "GPUStreams RT latency A",
            Is(1.1),
            Lat("streams", "A"),
        ),
        q(
            "mi50",
            "15",
            "GPUStreams RT latency B",
            Is(1.21),
            Lat("streams", "B"),
        ),
        q(
            "mi50",
            "15",
            "GPUStreams RT latency C",
            Is(8.1),
            Lat("streams", "C"),
        ),
        q(
            "mi50",
            "15",
            "REEF RT latency A",
            Is(1.005),
            Lat("reef", "A"),
        ),
        q(
            "mi50",
            "15",
            "REEF RT latency B",
            Is(1.005),
            Lat("reef", "B"),
        ),
        q(
            "mi50",
            "15",
            "REEF RT latency C",
            Is(1.02),
            Lat("reef", "C"),
        ),
        q(
            "mi50",
            "15",
            "REEF RT latency D over RT-only",
            AtMost(1.042),
            LatOverRtOnly("reef", "D"),
        ),
        q(
            "mi50",
            "15",
            "REEF RT latency E over RT-only",
            Is(1.042),
            LatOverRtOnly("reef", "E"),
        ),
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("mi50", "15", "SEQ throughput A", Is(1.0), Tput("seq", "A"))
        },
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("mi50", "15", "SEQ throughput B", Is(1.0), Tput("seq", "B"))
        },
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("mi50", "15", "SEQ throughput C", Is(1.0), Tput("seq", "C"))
        },
        q(
            "mi50",
            "15",
            "GPUStreams throughput A",
            Is(1.34),
            Tput("streams", "A"),
        ),
        q(
            "mi50",
            "15",
            "GPUStreams throughput B",
            Is(1.72),
            Tput("streams", "B"),
        ),
        q(
            "mi50",
            "15",
            "GPUStreams throughput C",
            Is(1.91),
            Tput("streams", "C"),
        ),
        q(
            "mi50",
            "15",
            "REEF throughput A",
            Is(1.12),
            Tput("reef", "A"),
        ),
        q(
            "mi50",
            "15",
            "REEF throughput B",
            Is(1.28),
            Tput("reef", "B"),
        ),
        q(
            "mi50",
            "15",
            "REEF throughput C",
            Is(1.53),
            Tput("reef", "C"),
        ),
        q(
            "mi50",
            "15",
            "REEF throughput D",
            Within(1.22, 1.42),
            Tput("reef", "D"),
        ),
        q(
            "mi50",
            "15",
            "REEF throughput E",
            Within(1.22, 1.42),
            Tput("reef", "E"),
        ),
        // §6.3, GV100 (Fig. 16).
        q("gv100", "16", "SEQ RT latency A", Is(2.16), Lat("seq", "A")),
        q("gv100", "16", "SEQ RT latency B", Is(2.19), Lat("seq", "B")),
        q(
            "gv100",
            "16",
            "GPUStreams RT latency A",
            Is(1.46),
            Lat("streams", "A"),
        ),
        q(
            "gv100",
            "16",
            "GPUStreams RT latency B",
            Is(1.51),
            Lat("streams", "B"),
        ),
        q(
            "gv100",
            "16",
            "GPUStreams RT latency C",
            Is(4.2),
            Lat("streams", "C"),
        ),
        q(
            "gv100",
            "16",
            "REEF RT latency A",
            Is(1.005),
            Lat("reef", "A"),
        ),
        q(
            "gv100",
            "16",
            "REEF RT latency B",
            Is(1.005),
            Lat("reef", "B"),
        ),
        q(
            "gv100",
            "16",
            "REEF RT latency C",
            Is(1.02),
            Lat("reef", "C"),
        ),
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("gv100", "16", "SEQ throughput A", Is(1.0), Tput("seq", "A"))
        },
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("gv100", "16", "SEQ throughput B", Is(1.0), Tput("seq", "B"))
        },
        Quote {
            note: SEQ_NOTE,
            by_construction: true,
            ..q("gv100", "16", "SEQ throughput C", Is(1.0), Tput("seq", "C"))
        },
        q(
            "gv100",
            "16",
            "GPUStreams throughput A",
            Is(1.15),
            Tput("streams", "A"),
        ),
        q(
            "gv100",
            "16",
            "GPUStreams throughput B",
            Is(1.28),
            Tput("streams", "B"),
        ),
        q(
            "gv100",
            "16",
            "GPUStreams throughput C",
            Is(1.42),
            Tput("streams", "C"),
        ),
        q(
            "gv100",
            "16",
            "REEF throughput A",
            Is(1.08),
            Tput("reef", "A"),
        ),
        q(
            "gv100",
            "16",
            "REEF throughput B",
            Is(1.12),
            Tput("reef", "B"),
        ),
        q(
            "gv100",
            "16",
            "REEF throughput C",
            Is(1.2),
            Tput("reef", "C"),
        ),
        q(
            "gv100",
            "16",
            "REEF throughput D",
            Within(1.18, 1.25),
            Tput("reef", "D"),
        ),
        q(
            "gv100",
            "16",
            "REEF throughput E",
            Within(1.18, 1.25),
            Tput("reef", "E"),
        ),
        // §6.4 Fig. 17: wait-based over reset-based preemption latency.
        q(
            "mi50",
            "17",
            "wait/reset preemption A",
            Within(19.3, 21.8),
            PreemptRatio("A"),
        ),
        q(
            "mi50",
            "17",
            "wait/reset preemption B",
            Is(19.3),
            PreemptRatio("B"),
        ),
        q(
            "mi50",
            "17",
            "wait/reset preemption C",
            Is(21.8),
            PreemptRatio("C"),
        ),
        q(
            "mi50",
            "17",
            "wait/reset preemption D",
            Within(19.3, 21.8),
            PreemptRatio("D"),
        ),
        q(
            "mi50",
            "17",
            "wait/reset preemption E",
            Within(19.3, 21.8),
            PreemptRatio("E"),
        ),
        q(
            "gv100",
            "17",
            "wait/reset preemption A",
            Is(6.1),
            PreemptRatio("A"),
        ),
        q(
            "gv100",
            "17",
            "wait/reset preemption B",
            Within(6.1, 15.0),
            PreemptRatio("B"),
        ),
        q(
            "gv100",
            "17",
            "wait/reset preemption C",
            Is(15.0),
            PreemptRatio("C"),
        ),
        q(
            "gv100",
            "17",
            "wait/reset preemption D",
            Within(6.1, 15.0),
            PreemptRatio("D"),
        ),
        q(
            "gv100",
            "17",
            "wait/reset preemption E",
            Within(6.1, 15.0),
            PreemptRatio("E"),
        ),
        // §6.4 Fig. 18: one BE client of each model.
        q(
            "mi50",
            "18",
            "wait-based preemption VGG (us)",
            Is(310.0),
            PreemptModel("wait", "vgg"),
        ),
        q(
            "mi50",
            "18",
            "wait-based preemption RNET (us)",
            Is(882.0),
            PreemptModel("wait", "resnet152"),
        ),
        Quote {
            note: "wait on REEFnv's closed-loop cap, assumed REEF's default 4 (runner::reefnv_runtime)",
            ..q(
                "gv100",
                "18",
                "wait-based preemption RNET (us)",
                Is(233.0),
                PreemptModel("wait", "resnet152"),
            )
        },
    ];
    for dev in ["mi50", "gv100"] {
        for m in ["vgg", "resnet152", "densenet", "inception", "bert"] {
            let what: &'static str = match m {
                "vgg" => "reset-based preemption VGG (us)",
                "resnet152" => "reset-based preemption RNET (us)",
                "densenet" => "reset-based preemption DenseNet (us)",
                "inception" => "reset-based preemption Inception (us)",
                _ => "reset-based preemption BERT (us)",
            };
            v.push(Quote {
                note: if dev == "mi50" {
                    RESET_NOTE
                } else {
                    RESET_NOTE_NV
                },
                by_construction: true,
                ..q(
                    dev,
                    "18",
                    what,
                    Within(30.0, 38.0),
                    PreemptModel("reef-nodkp", m),
                )
            });
        }
    }
    v.push(Quote {
        note: CAL_NOTE,
        by_construction: true,
        ..q(
            "mi50",
            "21a",
            "RNET execution, DQ capacity 1 (ms)",
            Is(14.3),
            QueueCap(1),
        )
    });
    v.push(Quote {
        note: CAL_NOTE,
        by_construction: true,
        ..q(
            "mi50",
            "21a",
            "RNET execution, DQ capacity 4 (ms)",
            Is(12.3),
            QueueCap(4),
        )
    });
    v.push(Quote {
        note: "padded RT kernels slow only when the shared memory bandwidth is oversubscribed (docs/simulator.md)",
        ..q(
            "mi50",
            "27",
            "p90 padded RT kernel overhead (us)",
            AtMost(9.0),
            Fig27P90,
        )
    });
    v.push(Quote {
        note: "no L2 or loaded-latency contention between a padded RT kernel and its padding (docs/simulator.md)",
        ..q(
            "mi50",
            "27",
            "padded RT kernels not slowed (%)",
            Is(49.1),
            Fig27Unhurt,
        )
    });
    for x in &mut v {
        match (x.device, x.what) {
            ("mi50", "REEF throughput C") => x.note = CORUN_NOTE_MI50_C,
            ("gv100", "REEF throughput E") => x.note = CORUN_NOTE_GV100_E,
            _ => {}
        }
    }
    v
}

/// The two DISB metrics the paper's Figs. 15/16 plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisbMetric {
    /// Mean normalised RT latency.
    RtLatency,
    /// Normalised overall throughput.
    Throughput,
}

/// The paper's DISB figures on `device` that belong beside a bar of
/// `reef-bench disb`'s plot: (policy, workload, metric, paper's figure).
/// The same quotes the comparison uses; figures relative to another run
/// (REEF's latency "over RT-only") are left out, as a bar shows an absolute
/// value.
pub fn disb_paper_figures(device: &str) -> Vec<(&'static str, &'static str, DisbMetric, Paper)> {
    quotes()
        .into_iter()
        .filter(|q| q.device == device)
        .filter_map(|q| match q.sim {
            Sim::Lat(p, w) => Some((p, w, DisbMetric::RtLatency, q.paper)),
            Sim::Tput(p, w) => Some((p, w, DisbMetric::Throughput, q.paper)),
            _ => None,
        })
        .collect()
}

/// One compared figure, as printed.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub device: String,
    pub figure: String,
    pub what: String,
    pub paper: Paper,
    pub simulated: f64,
    pub ratio: f64,
    pub within_bound: bool,
    /// The match holds by construction: not counted within or outside.
    pub by_construction: bool,
    pub note: String,
}

/// How many counted rows are within and outside the bound, and how many
/// rows hold by construction (shown, not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub within: usize,
    pub outside: usize,
    pub by_construction: usize,
}

/// The within/outside counts of `rows`, leaving out by-construction rows.
pub fn counts(rows: &[Row]) -> Counts {
    let mut c = Counts {
        within: 0,
        outside: 0,
        by_construction: 0,
    };
    for r in rows {
        if r.by_construction {
            c.by_construction += 1;
        } else if r.within_bound {
            c.within += 1;
        } else {
            c.outside += 1;
        }
    }
    c
}

/// Results of one device's runs, by (policy, workload).
type DisbRuns = BTreeMap<(String, String), disb::metrics::PolicyResult>;

fn run_disb(spec: &DeviceSpec, args: &FidelityArgs) -> Result<DisbRuns> {
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

fn disb_value(runs: &DisbRuns, s: Sim) -> Result<f64> {
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

fn preempt_value(spec: &DeviceSpec, policy: &str, model: &str, seed: u64) -> Result<f64> {
    let dir = reef_model::default_models_dir();
    let m = PreparedModel::new(reef_model::load_named(&dir, model)?, spec)?;
    let rt = preempt::rt_model(spec)?;
    let (lat, _, _) = preempt::measure(spec, &m, &rt, policy, 200, seed)?;
    disb::metrics::mean(&lat).with_context(|| format!("{model} {policy}: no preemption"))
}

/// Fig. 27 from the 25 ordered model pairs under `reef`, 2 s each (the
/// setup of docs/results-dkp.md): (p90 us, % of padded RT kernels with no
/// overhead).
fn fig27(spec: &DeviceSpec, seed: u64) -> Result<(f64, f64)> {
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

/// Runs everything and compares.
pub fn run(args: &FidelityArgs) -> Result<Vec<Row>> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be a positive number of seconds, got {d}");
        }
    }
    let devices: Vec<&str> = args.device.split(',').map(str::trim).collect();
    for d in &devices {
        if !["mi50", "gv100"].contains(d) {
            bail!("--device {d:?}: the paper quotes figures for mi50 and gv100 only; pass mi50, gv100 or both");
        }
    }
    let all = quotes();
    let mut rows = Vec::new();
    for dev in devices {
        let spec = DeviceSpec::preset(dev)?;
        let mine: Vec<&Quote> = all.iter().filter(|q| q.device == dev).collect();
        let runs = run_disb(&spec, args)?;
        let mut f27: Option<(f64, f64)> = None;
        for q in mine {
            let sim = match q.sim {
                Sim::PreemptModel(p, m) => preempt_value(&spec, p, m, args.seed)?,
                Sim::QueueCap(cap) => {
                    let dir = reef_model::default_models_dir();
                    let model = reef_model::load_named(&dir, "resnet152")?;
                    crate::standalone::simulate(&spec, &model, cap)?.simulated_us / 1e3
                }
                Sim::Fig27P90 | Sim::Fig27Unhurt => {
                    if f27.is_none() {
                        f27 = Some(fig27(&spec, args.seed)?);
                    }
                    let (p90, unhurt) = f27.expect("just computed");
                    if q.sim == Sim::Fig27P90 {
                        p90
                    } else {
                        unhurt
                    }
                }
                s => disb_value(&runs, s)?,
            };
            let (ratio, ok) = q.paper.judge(sim);
            rows.push(Row {
                device: dev.into(),
                figure: q.fig.into(),
                what: q.what.into(),
                paper: q.paper,
                simulated: sim,
                ratio,
                within_bound: ok,
                by_construction: q.by_construction,
                note: q.note.into(),
            });
        }
    }
    Ok(rows)
}

/// The table `reef-bench fidelity` prints.
pub fn table(rows: &[Row]) -> String {
    let mut s = format!(
        "{:<6} {:<4} {:<40} {:>10} {:>10} {:>6}  {}\n",
        "device", "fig", "figure", "paper", "simulated", "ratio", "within ±25 %"
    );
    for r in rows {
        s += &format!(
            "{:<6} {:<4} {:<40} {:>10} {:>10.3} {:>6.2}  {}{}\n",
            r.device,
            r.figure,
            r.what,
            r.paper.show(),
            r.simulated,
            r.ratio,
            match (r.by_construction, r.within_bound) {
                (true, _) => "not counted",
                (false, true) => "yes",
                (false, false) => "NO",
            },
            if r.note.is_empty() {
                String::new()
            } else {
                format!("  ({})", r.note)
            }
        );
    }
    s
}

/// Entry point: prints the comparison, fails when a figure is outside.
pub fn main(args: FidelityArgs) -> Result<()> {
    let rows = run(&args)?;
    if args.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", table(&rows));
    }
    let c = counts(&rows);
    let out: Vec<String> = rows
        .iter()
        .filter(|r| !r.by_construction && !r.within_bound)
        .map(|r| format!("{} {}", r.device, r.what))
        .collect();
    let not_counted = format!(
        "{} more hold by construction and are not counted",
        c.by_construction
    );
    if !out.is_empty() {
        bail!(
            "{} of {} figures outside ±25 % of the paper's ({not_counted}): {}",
            c.outside,
            c.within + c.outside,
            out.join("; ")
        );
    }
    println!(
        "all {} figures within ±25 % of the paper's ({not_counted})",
        c.within
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judging_by_value_bound_and_range() {
        // A value: ±25 % inclusive.
        assert_eq!(Paper::Is(2.0).judge(2.5), (1.25, true));
        assert!(!Paper::Is(2.0).judge(2.6).1);
        assert!(Paper::Is(2.0).judge(1.5).1);
        assert!(!Paper::Is(2.0).judge(1.4).1);
        // An upper bound: anything below passes, above by at most 25 %.
        assert!(Paper::AtMost(9.0).judge(0.5).1);
        assert!(Paper::AtMost(9.0).judge(11.0).1);
        assert!(!Paper::AtMost(9.0).judge(11.5).1);
        // A range: judged against its nearest end.
        assert_eq!(Paper::Within(1.2, 1.4).judge(1.3), (1.0, true));
        let (r, ok) = Paper::Within(1.2, 1.4).judge(1.8);
        assert!((r - 1.8 / 1.4).abs() < 1e-12 && !ok);
        assert!(!Paper::Is(1.0).judge(f64::NAN).1);
    }

    #[test]
    fn every_quote_is_on_a_paper_testbed_and_sane() {
        let q = quotes();
        assert!(q.iter().all(|q| q.device == "mi50" || q.device == "gv100"));
        for x in &q {
            match x.paper {
                Paper::Is(v) | Paper::AtMost(v) => assert!(v > 0.0, "{}", x.what),
                Paper::Within(a, b) => assert!(0.0 < a && a < b, "{}", x.what),
            }
        }
        // Every (device, figure text) appears once.
        let mut keys: Vec<_> = q.iter().map(|x| (x.device, x.what)).collect();
        keys.sort();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n);
    }

    #[test]
    fn the_bisected_figures_carry_their_note() {
        // The notes are attached by (device, figure text): renaming a
        // quote must not drop them silently.
        let q = quotes();
        for (device, what, note) in [
            ("mi50", "REEF throughput C", CORUN_NOTE_MI50_C),
            ("gv100", "REEF throughput E", CORUN_NOTE_GV100_E),
        ] {
            let with: Vec<_> = q.iter().filter(|x| x.note == note).collect();
            assert_eq!(with.len(), 1, "{device} {what}");
            assert_eq!((with[0].device, with[0].what), (device, what));
        }
    }

    #[test]
    fn by_construction_rows_are_marked_and_not_counted() {
        let q = quotes();
        let marked = |what: &str| {
            q.iter()
                .filter(|x| x.what == what)
                .all(|x| x.by_construction)
        };
        // SEQ's throughput is 1 by the metric's definition (normalised to
        // the saturated serial run); the reset latency comes from the
        // parameters taken from it; Fig. 21a from the calibration.
        for w in ["SEQ throughput A", "SEQ throughput B", "SEQ throughput C"] {
            assert_eq!(q.iter().filter(|x| x.what == w).count(), 2, "{w}");
            assert!(marked(w), "{w}");
        }
        assert!(marked("reset-based preemption RNET (us)"));
        assert!(marked("RNET execution, DQ capacity 1 (ms)"));
        assert!(!marked("REEF throughput A"));
        assert!(!marked("SEQ RT latency A"));
        // The counts leave them out, whether they are inside or not.
        let row = |within_bound, by_construction| Row {
            device: "mi50".into(),
            figure: "15".into(),
            what: "x".into(),
            paper: Paper::Is(1.0),
            simulated: 1.0,
            ratio: 1.0,
            within_bound,
            by_construction,
            note: String::new(),
        };
        let rows = [
            row(true, false),
            row(true, false),
            row(false, false),
            row(true, true),
            row(false, true),
        ];
        assert_eq!(
            counts(&rows),
            Counts {
                within: 2,
                outside: 1,
                by_construction: 2
            }
        );
        // Every row says whether it holds by construction in --json.
        let json = serde_json::to_value(&rows[3]).unwrap();
        assert_eq!(json["by_construction"], serde_json::Value::Bool(true));
        let json = serde_json::to_value(&rows[0]).unwrap();
        assert_eq!(json["by_construction"], serde_json::Value::Bool(false));
    }

    #[test]
    fn unknown_devices_and_bad_durations_are_refused() {
        let a = |device: &str, duration| FidelityArgs {
            device: device.into(),
            duration,
            seed: 1,
            jobs: Some(1),
            json: false,
        };
        let e = run(&a("h100", None)).unwrap_err().to_string();
        assert!(e.contains("mi50 and gv100"), "{e}");
        let e = run(&a("mi50", Some(-1.0))).unwrap_err().to_string();
        assert!(e.contains("--duration"), "{e}");
    }
}
