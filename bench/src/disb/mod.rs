//! `reef-bench disb WORKLOAD`: the DISB benchmark (REEF §6.2–6.3, Table 2,
//! Fig. 15; preemption latency Fig. 17) in virtual time on the simulated GPU.
//!
//! For each workload (`A`..`E` from `<shared>/disb/workloads`, `all`, or a
//! path to any DISB JSON file) and each policy: a stand-alone phase measures
//! each model's latency alone on the device through the scheduler (the
//! normalisation base), then the workload's clients run for `time` seconds
//! of virtual time. Runs are independent and execute on worker threads.

pub mod gen;
pub mod live;
pub mod lost;
pub mod metrics;
pub mod plot;
pub mod preempt;
pub mod runner;
pub mod workload;

use anyhow::{bail, Context, Result};
use metrics::PolicyResult;
use reef_sched::{Class, POLICY_NAMES};
use reef_sim::DeviceSpec;
use runner::{ClientPlan, Gen, PreparedModel, RunOptions};
use std::path::PathBuf;
use std::time::Instant;
use workload::Workload;

/// Arguments of `reef-bench disb`.
#[derive(clap::Args, Debug, Clone)]
pub struct DisbArgs {
    /// `A`..`E`, `all`, or a path to a DISB workload JSON file.
    pub workload: String,
    /// Comma-separated policies (rt-only, seq, streams: GPUStreams without
    /// stream priorities, streams-prio: RT streams at high priority, share:
    /// a process context per client, wait, reef-nodkp:
    /// preemption only, reef: preemption and dynamic kernel padding,
    /// reef-dkp-mv: padding with multi-version kernels, reef-max: issue
    /// 28's combination, ablations reef-max:-X / reef-max:+X+Y with X in
    /// preempt, pad, mv, waves, tail, share, chain, most, spread, rate,
    /// guard
    /// (docs/results-max.md), fikit: FIKIT's
    /// profiled gap filling at ten priorities; fikit-nofill, fikit-noearly
    /// are its ablations; aker, baymax, tacker: Aker's kernel managers,
    /// docs/aker.md).
    #[arg(
        long,
        default_value = "rt-only,seq,streams,streams-prio,wait,reef-nodkp,reef,reef-dkp-mv,fikit,aker"
    )]
    pub policy: String,
    /// Simulated device: a preset (mi50, gv100, h100) or a .toml spec path.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Seed of the simulator and of Poisson arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Virtual seconds to run each workload (default: the file's `time`).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Print one JSON object per workload and policy (JSON lines) instead of
    /// the table.
    #[arg(long)]
    pub json: bool,
    /// Device-queue capacity of preemptible streams under `reef` (§4.2).
    #[arg(long, default_value_t = 4)]
    pub dq_capacity: usize,
    /// Where to write the Fig. 15-like plot (SVG).
    #[arg(long, default_value = "reef-disb-fig15.svg")]
    pub plot: PathBuf,
    /// Do not write the plot.
    #[arg(long)]
    pub no_plot: bool,
    /// Models directory (default: <shared>/models/mi50): measured models or
    /// models compiled by reef-compile (docs/compile.md); a workload's
    /// `model_name` is a DISB name or a directory name in it.
    #[arg(long, visible_alias = "models-dir")]
    pub models: Option<PathBuf>,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Track buffer values and count requests whose outputs differ from an
    /// unpreempted run (slower).
    #[arg(long)]
    pub check_values: bool,
    /// Also print where best-effort throughput goes: each run's CU time
    /// accounted from the simulator's event trace (RT busy and the part of
    /// it with BE blocks on the same CUs, BE busy and its BE blocks per
    /// CU, BE killed, GPU idle, idle beside RT kernels with and without a
    /// padding refusal, idle beside BE only), `disb::lost`.
    #[arg(long)]
    pub lost: bool,
    /// Also print the scheduler's own time per decision (p50, p99, p99.9,
    /// max; handling an event and draining its actions, padding's kernel
    /// selection included), measured in the run (`reef_exec::drive::cost`).
    #[arg(long)]
    pub decision_cost: bool,
    /// Padding policies select the best-effort blocks for a real-time
    /// kernel only when it is launched, not ahead of it once the previous
    /// launch is out (the same decisions either way; the default selects
    /// ahead, `reef_sched::dkp::padded::ahead`): to compare the decision
    /// cost of both.
    #[arg(long)]
    pub select_at_launch: bool,
    /// Drive the workload on the wall clock against a running reefd through
    /// its client API instead of in virtual time (see `disb::live`).
    #[arg(long)]
    pub live: bool,
    /// Host time per kernel launch of the clients' framework, us (default:
    /// back to back). FIKIT fills the gaps this leaves (`reef-bench fikit`
    /// sweeps it).
    #[arg(long)]
    pub host_gap_us: Option<f64>,
    /// FIKIT's ε, us (fikit.txt §3.2: 0.1 ms).
    #[arg(long, default_value_t = 100.0)]
    pub fikit_epsilon_us: f64,
    /// FIKIT's profiled runs T before sharing (§3.2: T ∈ [10, 1000]).
    #[arg(long, default_value_t = 10)]
    pub fikit_runs: u32,
    /// QoS target of the Aker managers (`aker`, `baymax`, `tacker`) as a
    /// multiple of each RT model's predicted stand-alone latency
    /// (docs/aker.md "QoS targets").
    #[arg(long, default_value_t = reef_sched::aker::DEFAULT_QOS_X)]
    pub qos_x: f64,
    /// reefd's socket for --live (default: $REEF_SOCKET, else
    /// /run/reef/reefd.sock).
    #[arg(long, requires = "live")]
    pub socket: Option<PathBuf>,
}

impl DisbArgs {
    /// The command line's defaults for `workload`, without a plot: the one
    /// definition of every default for the commands that run DISB
    /// programmatically (fidelity, aker --open-gap, multigpu), which then
    /// set what they change.
    pub fn defaults(workload: &str) -> Self {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            disb: DisbArgs,
        }
        let mut a = <Cli as clap::Parser>::parse_from(["reef-bench-disb", workload]).disb;
        a.no_plot = true;
        a
    }
}

/// Parses a comma list of policy names; unknown names are an error.
pub fn parse_policies(s: &str) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if reef_sched::aker::Manager::of_name(p).is_none() {
            reef_sched::policy_by_name(p)?;
        }
        if !v.iter().any(|x| x == p) {
            v.push(p.to_string());
        }
    }
    if v.is_empty() {
        bail!("--policy is empty: choose from {}", POLICY_NAMES.join(", "));
    }
    Ok(v)
}

/// Models loaded for one device, with their stand-alone latency.
pub struct ModelSet {
    pub models: Vec<PreparedModel>,
    pub standalone_ns: Vec<f64>,
    /// FIKIT profiles measured before the runs (policies `fikit*`).
    pub fikit_profiles: Vec<reef_sched::fikit::profile::Profile>,
    /// Aker's profiles (policies `aker`, `baymax`, `tacker`), shared by
    /// their runs.
    pub aker_profiles: Option<std::sync::Arc<reef_exec::aker::SimPredictor>>,
}

impl ModelSet {
    pub fn index(&self, name: &str) -> usize {
        self.models
            .iter()
            .position(|m| m.name == name)
            .expect("model loaded")
    }
}

/// Stand-alone latency of a model: mean over `runs` inferences after one
/// warm-up, alone on the device through the scheduler (`rt-only`).
pub fn standalone_ns(spec: &DeviceSpec, m: &PreparedModel, runs: u32, seed: u64) -> Result<f64> {
    let plan = vec![ClientPlan {
        name: m.name.clone(),
        model: 0,
        class: Class::RealTime,
        gen: Gen::Count {
            remaining: runs + 1,
        },
    }];
    let one = std::slice::from_ref(m);
    let out = runner::simulate(
        spec,
        one,
        plan,
        u64::MAX / 4,
        &RunOptions {
            policy: "rt-only".into(),
            seed,
            dq_capacity: 4,
            track_values: false,
            ..RunOptions::default()
        },
    )?;
    let lat = &out.clients[0].latencies;
    if lat.len() < 2 {
        bail!("stand-alone run of {} completed no request", m.name);
    }
    Ok(lat[1..].iter().sum::<u64>() as f64 / (lat.len() - 1) as f64)
}

/// Loads the models the workloads use and measures their stand-alone latency.
pub fn load_models(
    spec: &DeviceSpec,
    dir: &std::path::Path,
    workloads: &[Workload],
    seed: u64,
) -> Result<ModelSet> {
    load_models_with(
        spec,
        &|n| Ok(reef_model::load_named(dir, n)?),
        workloads,
        seed,
    )
}

/// [`load_models`] with each model (a DISB model directory name) loaded by
/// `load`, e.g. from a directory of compiled models first and the measured
/// schedules for the rest (`reef-bench fidelity --gv100-models`).
pub fn load_models_with(
    spec: &DeviceSpec,
    load: &dyn Fn(&str) -> Result<reef_model::Model>,
    workloads: &[Workload],
    seed: u64,
) -> Result<ModelSet> {
    let mut names: Vec<String> = Vec::new();
    for w in workloads {
        for t in &w.tasks {
            if !names.contains(&t.model_dir) {
                names.push(t.model_dir.clone());
            }
        }
    }
    let mut models = Vec::new();
    let mut standalone = Vec::new();
    for n in names {
        let pm = PreparedModel::new(load(&n)?, spec)?;
        standalone.push(standalone_ns(spec, &pm, 10, seed)?);
        models.push(pm);
    }
    Ok(ModelSet {
        models,
        standalone_ns: standalone,
        fikit_profiles: Vec::new(),
        aker_profiles: None,
    })
}

/// Runs one workload under one policy.
pub fn run_one(
    spec: &DeviceSpec,
    set: &ModelSet,
    w: &Workload,
    policy: &str,
    args: &DisbArgs,
) -> Result<PolicyResult> {
    let secs = args.duration.unwrap_or(w.time);
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--duration must be a positive number of seconds, got {secs}");
    }
    let plans = runner::plan_clients(w, &|d| set.index(d), &set.standalone_ns, args.seed);
    let started = Instant::now();
    let out = runner::simulate(
        spec,
        &set.models,
        plans.clone(),
        (secs * 1e9) as u64,
        &RunOptions {
            policy: policy.to_string(),
            seed: args.seed,
            dq_capacity: args.dq_capacity,
            track_values: args.check_values,
            host_gap_ns: host_gap_ns(args)?,
            fikit: fikit_config(args)?,
            fikit_profiles: set.fikit_profiles.clone(),
            aker: aker_config(args)?,
            aker_profiles: set.aker_profiles.clone(),
            account: args.lost,
            decision_cost: args.decision_cost,
            select_ahead: !args.select_at_launch,
            alone_ns: set.standalone_ns.clone(),
            ..RunOptions::default()
        },
    )
    .with_context(|| format!("workload {} policy {policy}", w.name))?;
    if out.corrupted_outputs > 0 {
        bail!(
            "workload {} policy {policy}: {} requests returned outputs that differ from an unpreempted run",
            w.name,
            out.corrupted_outputs
        );
    }
    let names: Vec<String> = set.models.iter().map(|m| m.name.clone()).collect();
    Ok(metrics::summarize(
        &w.name,
        policy,
        &spec.name,
        args.seed,
        &plans,
        &names,
        &set.standalone_ns,
        &out,
        started.elapsed().as_secs_f64() * 1e3,
    ))
}

/// `--host-gap-us` in ns, checked.
pub fn host_gap_ns(args: &DisbArgs) -> Result<Option<reef_sched::Time>> {
    match args.host_gap_us {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= 0.0 => Ok(Some((v * 1e3).round() as u64)),
        Some(v) => bail!("--host-gap-us must be a non-negative number of us, got {v}"),
    }
}

/// The Aker managers' QoS settings from the arguments, checked.
pub fn aker_config(args: &DisbArgs) -> Result<reef_sched::aker::AkerConfig> {
    if !(args.qos_x.is_finite() && args.qos_x >= 1.0) {
        bail!(
            "--qos-x must be a number of at least 1 (the QoS target as a multiple of the stand-alone latency), got {}",
            args.qos_x
        );
    }
    Ok(reef_sched::aker::AkerConfig {
        qos_x: args.qos_x,
        ..Default::default()
    })
}

/// FIKIT's parameters from the arguments, checked.
pub fn fikit_config(args: &DisbArgs) -> Result<reef_sched::fikit::FikitConfig> {
    let e = args.fikit_epsilon_us;
    if !(e.is_finite() && e >= 0.0) {
        bail!("--fikit-epsilon-us must be a non-negative number of us, got {e}");
    }
    if args.fikit_runs == 0 {
        bail!("--fikit-runs must be at least 1");
    }
    Ok(reef_sched::fikit::FikitConfig {
        epsilon_ns: (e * 1e3).round() as u64,
        runs: args.fikit_runs,
        ..Default::default()
    })
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

/// The human-readable table.
pub fn table(results: &[PolicyResult]) -> String {
    // The policy column as wide as its longest name (`streams-prio`,
    // `reef-max:-spread`), so the columns stay aligned.
    let w = results.iter().map(|r| r.policy.len()).fold(11, usize::max);
    let mut s = String::new();
    s.push_str(&format!(
        "{:<4} {:<w$} {:>8} {:>8} {:>8} {:>10} {:>8} {:>8} {:>7} {:>10} {:>10} {:>3}\n",
        "wl",
        "policy",
        "rt_mean",
        "rt_p50",
        "rt_p99",
        "rt_us",
        "thr_all",
        "thr_be",
        "preempt",
        "pre_us_avg",
        "pre_us_p99",
        "lvl"
    ));
    for r in results {
        s.push_str(&format!(
            "{:<4} {:<w$} {:>8} {:>8} {:>8} {:>10} {:>8.3} {:>8.3} {:>7} {:>10} {:>10} {:>3}\n",
            r.workload,
            r.policy,
            fmt_opt(r.rt_latency_norm_mean, 3),
            fmt_opt(r.rt_latency_norm_p50, 3),
            fmt_opt(r.rt_latency_norm_p99, 3),
            fmt_opt(r.rt_latency_us_mean, 0),
            r.throughput_norm_overall,
            r.be_throughput_norm,
            r.preemptions,
            fmt_opt(r.preempt_latency_us_mean, 1),
            fmt_opt(r.preempt_latency_us_p99, 1),
            r.preempt_level.map_or("-".into(), |l| l.to_string()),
        ));
    }
    for r in results.iter().filter(|r| r.qos_queries.is_some()) {
        s.push_str(&format!(
            "{:<4} {:<w$} fused launches {}, RT queries beyond their QoS target {} of {}\n",
            r.workload,
            r.policy,
            r.fused_launches.unwrap_or(0),
            r.qos_missed.unwrap_or(0),
            r.qos_queries.unwrap_or(0),
        ));
    }
    s
}

/// Entry point of `reef-bench disb`.
pub fn main(args: DisbArgs) -> Result<()> {
    if args.live {
        return live::main(args);
    }
    let policies = parse_policies(&args.policy)?;
    if args.dq_capacity == 0 {
        bail!("--dq-capacity must be at least 1");
    }
    let shared = reef_model::shared_dir();
    let mut workloads = Vec::new();
    for p in workload::resolve(&args.workload, &shared) {
        workloads.push(Workload::load(&p)?);
    }
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = args
        .models
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    let t0 = Instant::now();
    let mut set = load_models(&spec, &dir, &workloads, args.seed)?;
    let gap = host_gap_ns(&args)?;
    let fcfg = fikit_config(&args)?;
    if let Some(g) = gap {
        // Normalise by the stand-alone latency under the same host model.
        for (i, m) in set.models.iter().enumerate() {
            let out = runner::simulate(
                &spec,
                std::slice::from_ref(m),
                vec![ClientPlan {
                    name: m.name.clone(),
                    model: 0,
                    class: Class::RealTime,
                    gen: Gen::Count { remaining: 11 },
                }],
                u64::MAX / 4,
                &RunOptions {
                    policy: "rt-only".into(),
                    seed: args.seed,
                    host_gap_ns: Some(g),
                    ..RunOptions::default()
                },
            )?;
            let lat = &out.clients[0].latencies;
            set.standalone_ns[i] = lat[1..].iter().sum::<u64>() as f64 / (lat.len() - 1) as f64;
        }
    }
    if policies.iter().any(|p| p.starts_with("fikit")) {
        // FIKIT's measuring stage before the run, so that the workload runs
        // in sharing mode (fikit.txt Fig. 3: tasks with profiles loaded).
        for i in 0..set.models.len() {
            let (p, _) = runner::measure_profile(&spec, &set.models, i, gap, &fcfg, args.seed)?;
            set.fikit_profiles.push(p);
        }
    }
    if policies
        .iter()
        .any(|p| reef_sched::aker::Manager::of_name(p).is_some())
    {
        aker_config(&args)?;
        set.aker_profiles = Some(std::sync::Arc::new(reef_exec::aker::SimPredictor::new(
            &spec,
            &set.models,
        )?));
    }
    if !args.json {
        eprintln!(
            "stand-alone latency on {} ({:.0} ms): {}",
            spec.name,
            t0.elapsed().as_secs_f64() * 1e3,
            set.models
                .iter()
                .zip(&set.standalone_ns)
                .map(|(m, l)| format!("{} {:.0} us", m.name, l / 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let jobs: Vec<(usize, &str)> = (0..workloads.len())
        .flat_map(|w| policies.iter().map(move |p| (w, p.as_str())))
        .collect();
    // Longest runs first so the workers finish together: concurrent
    // uncapped streams cost the simulator most (many blocks in flight).
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    let cost = |i: usize| {
        let (w, p) = jobs[i];
        let weight = if matches!(p, "streams" | "streams-prio" | "share") {
            10
        } else {
            1
        };
        weight * workloads[w].tasks.len()
    };
    order.sort_by_key(|&i| std::cmp::Reverse(cost(i)));
    let threads = crate::run::threads(args.jobs).min(jobs.len().max(1));
    let results = crate::run::par_map(
        &jobs,
        threads,
        Some(&order),
        |&(w, p)| format!("{} {p}", workloads[w].name),
        |&(w, p)| run_one(&spec, &set, &workloads[w], p, &args),
    );
    // Report every run that worked, then fail on the first that did not.
    let mut out = Vec::new();
    let mut first_err = None;
    for r in results {
        match r {
            Ok(r) => out.push(r),
            Err(e) => {
                eprintln!("reef-bench disb: {e:#}");
                first_err.get_or_insert(e);
            }
        }
    }
    if args.json {
        for r in &out {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", table(&out));
        if args.lost {
            let rows: Vec<_> = out
                .iter()
                .filter_map(|r| {
                    let l = r.lost.clone()?;
                    Some((
                        r.workload.clone(),
                        r.policy.clone(),
                        r.be_throughput_norm,
                        l,
                    ))
                })
                .collect();
            print!("{}", lost::table(&rows));
        }
        if args.decision_cost {
            println!(
                "scheduler time per decision, ns (one timed call's two clock reads included per call; \
                 net: less `timer` per call):"
            );
            println!(
                "{:<10} {:<26} {:>10} {:>8} {:>6} {:>6} {:>7} {:>8} {:>6} {:>7} {:>7} {:>9}",
                "workload",
                "policy",
                "decisions",
                "mean",
                "p50",
                "p99",
                "p99.9",
                "max",
                "timer",
                "net p50",
                "net p99",
                "net p99.9"
            );
            for r in &out {
                if let Some(d) = &r.decision_ns {
                    println!(
                        "{:<10} {:<26} {:>10} {:>8.1} {:>6} {:>6} {:>7} {:>8} {:>6} {:>7} {:>7} {:>9}",
                        r.workload,
                        r.policy,
                        d.decisions,
                        d.mean,
                        d.p50,
                        d.p99,
                        d.p999,
                        d.max,
                        d.timer_ns,
                        d.net_p50,
                        d.net_p99,
                        d.net_p999
                    );
                }
            }
            let ahead: Vec<_> = out.iter().filter_map(|r| Some((r, r.ahead?))).collect();
            if !ahead.is_empty() {
                println!(
                    "padding selections made ahead of their launch (timed apart from the decisions above), ns:"
                );
                println!(
                    "{:<10} {:<26} {:>10} {:>10} {:>10} {:>8} {:>6} {:>6} {:>7}",
                    "workload",
                    "policy",
                    "made",
                    "taken",
                    "at launch",
                    "mean",
                    "p50",
                    "p99",
                    "p99.9"
                );
                for (r, a) in ahead {
                    let p = r.prepare_ns.as_ref();
                    println!(
                        "{:<10} {:<26} {:>10} {:>10} {:>10} {:>8.1} {:>6} {:>6} {:>7}",
                        r.workload,
                        r.policy,
                        a.made,
                        a.hits,
                        a.misses,
                        p.map_or(0.0, |p| p.mean),
                        p.map_or(0, |p| p.p50),
                        p.map_or(0, |p| p.p99),
                        p.map_or(0, |p| p.p999)
                    );
                }
            }
        }
        println!(
            "{} runs of {} of virtual time in {:.1} s wall ({} threads)",
            out.len(),
            args.duration
                .map_or_else(|| "the workload file's `time`".into(), |d| format!("{d} s")),
            t0.elapsed().as_secs_f64(),
            threads
        );
    }
    if !args.no_plot {
        plot::write_fig15(&args.plot, &out)?;
        if !args.json {
            println!("plot: {}", args.plot.display());
        }
    }
    match first_err {
        Some(e) => Err(e.context("some runs failed (the others are reported above)")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: DisbArgs,
    }

    fn run(args: &[&str]) -> String {
        let cli = Cli::try_parse_from(std::iter::once("disb").chain(args.iter().copied())).unwrap();
        format!("{:#}", main(cli.a).unwrap_err())
    }

    /// The help names every mechanism `reef-max:-X` can switch off (it
    /// once lacked `chain` and `most`).
    #[test]
    fn the_policy_help_names_every_reef_max_mechanism() {
        use clap::CommandFactory;
        let mut c = Cli::command();
        let help = c.render_long_help().to_string();
        let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let listed = flat
            .split_once("with X in ")
            .and_then(|(_, r)| r.split_once(" (docs/results-max.md)"))
            .map(|(l, _)| l.split(", ").collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no mechanism list in {help}"));
        assert_eq!(listed, reef_sched::dkp::max::MECHANISMS);
    }

    #[test]
    fn bad_input_fails_with_a_clear_error() {
        let e = run(&["A", "--policy", "reef,fifo", "--no-plot"]);
        assert!(e.contains("\"fifo\"") && e.contains("rt-only"), "{e}");
        let e = run(&["/nonexistent/W.json", "--no-plot"]);
        assert!(
            e.contains("/nonexistent/W.json") && e.contains("cannot read"),
            "{e}"
        );
        assert_eq!(e.matches("No such file").count(), 1, "{e}");
        let dir = std::env::temp_dir().join(format!("reef-disb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.json");
        std::fs::write(
            &p,
            r#"{"time": 1, "tasks": [{"id": "x", "load": {"type": "bursty"}, "client": {"model_name": "vgg19-imagenet"}}]}"#,
        )
        .unwrap();
        let e = run(&[p.to_str().unwrap(), "--no-plot"]);
        assert!(
            e.contains("bad.json") && e.contains("unknown load type \"bursty\""),
            "{e}"
        );
        let e = run(&["A", "--device", "tpu9", "--no-plot"]);
        assert!(e.contains("tpu9"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_short_run_reports_every_policy_and_writes_the_plot() {
        let dir = std::env::temp_dir().join(format!("reef-disb-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plot = dir.join("fig15.svg");
        let cli = Cli::try_parse_from([
            "disb",
            "A",
            "--duration",
            "0.2",
            "--policy",
            "rt-only,seq,reef-nodkp",
            "--plot",
            plot.to_str().unwrap(),
        ])
        .unwrap();
        main(cli.a).unwrap();
        let svg = std::fs::read_to_string(&plot).unwrap();
        assert!(svg.contains("<svg") && svg.contains("reef-nodkp") && svg.contains("DISB A"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
