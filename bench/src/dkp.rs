//! `reef-bench dkp`: dynamic kernel padding (REEF §5) on the simulated GPU.
//!
//! - `--selection`: kernel selection time per real-time kernel with one and
//!   with five best-effort clients of ten versions each (§6.5 "Kernel
//!   selection", Fig. 26: 0.4 µs with one BE client, 1.2 µs with several).
//! - default: the pairwise experiment of §6.5 (Fig. 23): one real-time and
//!   one best-effort client, both closed-loop, for every ordered pair of the
//!   five models, under GPU streams, DKP (`reef`) and DKP-MV
//!   (`reef-dkp-mv`), with `reef-nodkp` as the padding-free reference; the
//!   CU usage of Fig. 24 and the padded real-time kernel overhead of Fig. 27.
//!
//! Padded launches are executed by reef-exec ([`reef_exec::PadExec`]), the
//! glue the DISB runner and the daemon share.

use crate::disb::runner::{self, ClientPlan, Gen, PreparedModel, RunOptions};
use anyhow::{bail, Result};
use reef_exec::{kernel_char, table};
use reef_sched::dkp::{Candidate, KernelChar, Padding, Variant};
use reef_sched::{Class, Time};
use reef_sim::DeviceSpec;
use serde::Serialize;
use std::time::Instant;

/// Arguments of `reef-bench dkp`.
#[derive(clap::Args, Debug, Clone)]
pub struct DkpArgs {
    /// Only the kernel selection time benchmark.
    #[arg(long)]
    pub selection: bool,
    /// Virtual seconds per pair and policy.
    #[arg(long, default_value_t = 1.0)]
    pub duration: f64,
    /// Simulated device.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Comma-separated models (default: the five measured models).
    #[arg(long, default_value = "resnet152,vgg,densenet,inception,bert")]
    pub models: String,
    /// Models directory (default: <shared>/models/mi50); models compiled by
    /// reef-compile work too (docs/compile.md).
    #[arg(long)]
    pub models_dir: Option<std::path::PathBuf>,
    /// Policies of the pairwise experiment.
    #[arg(long, default_value = "streams,reef-nodkp,reef,reef-dkp-mv")]
    pub policy: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// One JSON object per line instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Selection benchmark iterations per configuration.
    #[arg(long, default_value_t = 200_000)]
    pub iterations: u64,
    /// Sensitivity only, not the paper's setup: the real-time client waits
    /// this long (µs of virtual time) after each reply before its next
    /// request (a DISB periodic client at the stand-alone latency plus the
    /// gap), leaving the scheduler in normal mode meanwhile. 0 (default):
    /// closed loop, the next request at the reply's instant.
    #[arg(long, default_value_t = 0.0)]
    pub rt_gap_us: f64,
    /// Instead of running the pairs, say for every ordered pair and both
    /// padding variants which best-effort kernels no real-time kernel of
    /// the pair admits, and why (rule 1, rule 2, ...), from the profiles.
    #[arg(long)]
    pub explain: bool,
    /// Also print where best-effort throughput goes in every pair: CU
    /// time accounted from the simulator's event trace (`disb::lost`).
    #[arg(long)]
    pub lost: bool,
}

/// Selection time of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct SelectionTime {
    pub be_clients: usize,
    pub versions_per_kernel: usize,
    pub ns_per_rt_kernel: f64,
    pub padded_share: f64,
}

/// Measures the selection policy alone: for every real-time kernel of
/// `rt` (round robin), select among `clients` best-effort tasks whose
/// current kernels are drawn from `be` kernels with `versions` versions
/// each (ten from the multi-version cost model where pruning leaves ten or
/// more; cycled through the kernel list).
pub fn selection_time(
    spec: &DeviceSpec,
    rt: &PreparedModel,
    be: &PreparedModel,
    clients: usize,
    versions: usize,
    iterations: u64,
) -> Result<SelectionTime> {
    let t = table(spec, std::slice::from_ref(be), Variant::MultiVersion)?;
    let rtk: Vec<KernelChar> = rt
        .shapes
        .iter()
        .filter_map(|s| kernel_char(spec, s))
        .collect();
    // BE kernels with at least `versions` surviving versions.
    let pool: Vec<&[KernelChar]> = t.kernels[0]
        .iter()
        .filter(|v| v.len() >= versions)
        .map(|v| &v[..versions])
        .collect();
    if pool.is_empty() {
        bail!(
            "no kernel of {} has {versions} versions after pruning",
            be.name
        );
    }
    let mut out = Padding::default();
    let mut padded = 0u64;
    let mut sets: Vec<Vec<Candidate<'_>>> = Vec::new();
    for i in 0..64usize {
        sets.push(
            (0..clients)
                .map(|c| Candidate {
                    versions: pool[(i * 7 + c * 13) % pool.len()],
                    locked: None,
                    next_block: 0,
                    following: &[],
                    rule1_floor: 0,
                })
                .collect(),
        );
    }
    let sel = &t.selector;
    let t0 = Instant::now();
    for i in 0..iterations as usize {
        let k = &rtk[i % rtk.len()];
        let c = &sets[i % sets.len()];
        if sel.select(std::hint::black_box(k), c, i, &mut out) {
            padded += 1;
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / iterations as f64;
    Ok(SelectionTime {
        be_clients: clients,
        versions_per_kernel: versions,
        ns_per_rt_kernel: ns,
        padded_share: padded as f64 / iterations as f64,
    })
}

/// How many real-time kernels give each verdict ([`reef_sched::dkp::Verdict::name`]).
pub type Tally = Vec<(&'static str, usize)>;

/// What the profiles say about one (RT model, BE model, variant): the
/// best-effort kernels no real-time kernel of the pair can be padded with.
#[derive(Debug, Clone, Serialize)]
pub struct Blockers {
    pub rt: String,
    pub be: String,
    pub variant: &'static str,
    /// Best-effort kernels (in inference order) that no real-time kernel
    /// admits.
    pub blocked: Vec<u32>,
    /// The first of them, with how many real-time kernels reject it for
    /// each reason (`Verdict::name`).
    pub first: Option<(u32, String, Tally)>,
    /// For the first: its shortest block (any version, alone on a CU), ns.
    pub first_min_block_ns: Option<u64>,
    /// The longest real-time kernel that leaves CUs over, ns: rule 1 needs
    /// a best-effort block shorter than this.
    pub rt_max_paddable_kernel_ns: u64,
    /// The first best-effort kernel that only real-time kernels among the
    /// first `window` of an inference admit, with their indices, on a
    /// device whose kill may land after a later launch starts
    /// (`DeviceCaps::kill_precedes_later_launches` false). Under a
    /// closed-loop real-time client those are transmitted at the start of
    /// every real-time request, while the best-effort stream still drains
    /// the launches of the instant of normal mode before it, so they are
    /// never padded there and such a kernel blocks its task too. Where the
    /// kill lands first (the MI50 preset) the first real-time kernels are
    /// padded as well and this is `None`.
    pub first_only_early: Option<(u32, String, Vec<u32>)>,
}

/// For every best-effort kernel of `be`, the verdict of every real-time
/// kernel of `rt` ([`Selector::explain`]); a best-effort task whose current
/// kernel no real-time kernel admits makes no progress by padding.
pub fn blockers(
    spec: &DeviceSpec,
    rt: &PreparedModel,
    be: &PreparedModel,
    variant: Variant,
) -> Result<Blockers> {
    let t = table(
        spec,
        &[clone_model(spec, rt)?, clone_model(spec, be)?],
        variant,
    )?;
    let mut blocked = Vec::new();
    let mut first = None;
    let mut first_min_block_ns = None;
    let mut first_only_early = None;
    let window = crate::run::REEF_DQ_CAPACITY as u32;
    let early_unpadded = !reef_exec::sched_config(spec, crate::run::REEF_DQ_CAPACITY)
        .device
        .kill_precedes_later_launches;
    let cus = t.selector.limits().compute_units;
    let rt_max_paddable_kernel_ns = t.kernels[0]
        .iter()
        .filter(|v| v[0].reserved_cus(cus) < cus)
        .map(|v| v[0].kernel_ns)
        .max()
        .unwrap_or(0);
    for (j, vs) in t.kernels[1].iter().enumerate() {
        let mut tally: std::collections::BTreeMap<reef_sched::dkp::Verdict, usize> =
            Default::default();
        let mut admitted = Vec::new();
        for (ri, rk) in t.kernels[0].iter().enumerate() {
            let v = t.selector.explain(&rk[0], vs);
            if v == reef_sched::dkp::Verdict::Padded {
                admitted.push(ri as u32);
            }
            *tally.entry(v).or_default() += 1;
        }
        if !admitted.is_empty() {
            if early_unpadded && first_only_early.is_none() && admitted.iter().all(|&r| r < window)
            {
                first_only_early = Some((j as u32, be.shapes[j].name.clone(), admitted));
            }
            continue;
        }
        blocked.push(j as u32);
        if first.is_none() {
            first_min_block_ns = vs.iter().map(|k| k.block_ns(1)).min();
            first = Some((
                j as u32,
                be.shapes[j].name.clone(),
                tally.into_iter().map(|(v, n)| (v.name(), n)).collect(),
            ));
        }
    }
    Ok(Blockers {
        rt: rt.name.clone(),
        be: be.name.clone(),
        variant: match variant {
            Variant::Single => "reef",
            Variant::MultiVersion => "reef-dkp-mv",
        },
        blocked,
        first,
        first_min_block_ns,
        rt_max_paddable_kernel_ns,
        first_only_early,
    })
}

fn clone_model(spec: &DeviceSpec, m: &PreparedModel) -> Result<PreparedModel> {
    PreparedModel::new(m.model.clone(), spec)
}

/// One pair under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct PairResult {
    pub rt: String,
    pub be: String,
    pub policy: String,
    /// Mean RT latency over the RT model's stand-alone latency.
    pub rt_latency_norm: f64,
    /// RT requests/s over the stand-alone maximum.
    pub rt_throughput_norm: f64,
    pub be_throughput_norm: f64,
    pub overall_throughput_norm: f64,
    /// Time-weighted CU shares during padded launches (Fig. 24).
    pub rt_cu_share: Option<f64>,
    pub be_cu_share: Option<f64>,
    pub padded_launches: u64,
    pub rt_launches: u64,
    pub be_blocks_padded: u64,
    pub be_kernels_completed_by_padding: u64,
    pub rest_launches: u64,
    pub be_completed: u64,
    pub overhead_ns: Vec<i64>,
    /// Where the device's CU time went (`--lost`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<crate::disb::lost::Lost>,
}

/// The pairwise clients: model 0 real-time (closed loop, or a request
/// every `rt_interval` ns), model 1 best-effort, closed loop.
fn pair_plans(rt: &str, be: &str, rt_interval: Option<Time>) -> Vec<ClientPlan> {
    vec![
        ClientPlan {
            name: format!("rt-{rt}"),
            model: 0,
            class: Class::RealTime,
            gen: match rt_interval {
                Some(interval) => Gen::Periodic { next: 0, interval },
                None => Gen::Continuous,
            },
        },
        ClientPlan {
            name: format!("be-{be}"),
            model: 1,
            class: Class::BestEffort,
            gen: Gen::Continuous,
        },
    ]
}

/// One real-time/best-effort pair under `policy` (models `rt` and `be` of
/// `models`), for `args.duration` virtual seconds.
pub fn run_pair(
    spec: &DeviceSpec,
    models: &[PreparedModel],
    standalone: &[f64],
    rt: usize,
    be: usize,
    policy: &str,
    args: &DkpArgs,
) -> Result<PairResult> {
    let two = vec![
        PreparedModel::new(models[rt].model.clone(), spec)?,
        PreparedModel::new(models[be].model.clone(), spec)?,
    ];
    let interval = (args.rt_gap_us > 0.0).then(|| (standalone[rt] + args.rt_gap_us * 1e3) as Time);
    let plans = pair_plans(&models[rt].name, &models[be].name, interval);
    let dur = (args.duration * 1e9) as u64;
    let out = runner::simulate(
        spec,
        &two,
        plans,
        dur,
        &RunOptions {
            policy: policy.to_string(),
            seed: args.seed,
            dq_capacity: crate::run::REEF_DQ_CAPACITY,
            track_values: false,
            account: args.lost,
            alone_ns: vec![standalone[rt], standalone[be]],
            ..RunOptions::default()
        },
    )?;
    let secs = dur as f64 / 1e9;
    let thr = |ci: usize, m: usize| out.clients[ci].completed as f64 / secs * standalone[m] / 1e9;
    let lat = &out.clients[0].latencies;
    let rt_latency_norm = if lat.is_empty() {
        f64::NAN
    } else {
        lat.iter().sum::<u64>() as f64 / lat.len() as f64 / standalone[rt]
    };
    let (rt_thr, be_thr) = (thr(0, rt), thr(1, be));
    let pad = out.padding.clone().unwrap_or_default();
    let share = |x: u128| (pad.device_cu_ns > 0).then(|| x as f64 / pad.device_cu_ns as f64);
    Ok(PairResult {
        rt: models[rt].name.clone(),
        be: models[be].name.clone(),
        policy: policy.to_string(),
        rt_latency_norm,
        rt_throughput_norm: rt_thr,
        be_throughput_norm: be_thr,
        overall_throughput_norm: rt_thr + be_thr,
        rt_cu_share: share(pad.rt_cu_ns),
        be_cu_share: share(pad.be_cu_ns),
        padded_launches: pad.padded_launches,
        rt_launches: pad.rt_launches,
        be_blocks_padded: pad.be_blocks_padded,
        be_kernels_completed_by_padding: pad.be_kernels_completed_by_padding,
        rest_launches: pad.rest_launches,
        be_completed: out.clients[1].completed,
        overhead_ns: pad.overhead_ns,
        lost: out.lost.clone(),
    })
}

/// The `p`-th percentile (nearest rank) of sorted values; 0 when empty.
pub fn pct(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let r = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[r.clamp(1, sorted.len()) - 1]
}

/// Entry point of `reef-bench dkp`.
pub fn main(args: DkpArgs) -> Result<()> {
    let spec = DeviceSpec::by_name_or_path(&args.device)?;
    let dir = args
        .models_dir
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    let names: Vec<&str> = args.models.split(',').map(str::trim).collect();
    let mut models = Vec::new();
    for n in &names {
        models.push(PreparedModel::new(reef_model::load_named(&dir, n)?, &spec)?);
    }
    // Selection time (Fig. 26): RT resnet152 kernels, BE clients on the
    // kernels of the other models with ten versions each.
    let rt_i = 0;
    let mut sel = Vec::new();
    for clients in [1usize, 5] {
        for (bi, be) in models.iter().enumerate() {
            if bi == rt_i && models.len() > 1 {
                continue;
            }
            match selection_time(&spec, &models[rt_i], be, clients, 10, args.iterations) {
                Ok(r) => sel.push((be.name.clone(), r)),
                Err(e) => eprintln!("selection with BE {}: {e}", be.name),
            }
        }
    }
    if args.json {
        for (be, r) in &sel {
            println!(
                "{}",
                serde_json::json!({"selection": r, "rt": models[rt_i].name, "be": be})
            );
        }
    } else {
        println!(
            "kernel selection time per RT kernel (RT {}; BE kernels with 10 versions each):",
            models[rt_i].name
        );
        println!(
            "{:<10} {:>10} {:>12} {:>8}",
            "BE model", "BE clients", "ns/RT kernel", "padded"
        );
        for (be, r) in &sel {
            println!(
                "{:<10} {:>10} {:>12.0} {:>7.0}%",
                be,
                r.be_clients,
                r.ns_per_rt_kernel,
                100.0 * r.padded_share
            );
        }
    }
    // Multi-version candidates per kernel after dominance pruning (§5.3).
    for m in &models {
        let t = table(&spec, std::slice::from_ref(m), Variant::MultiVersion)?;
        let n: Vec<usize> = t.kernels[0].iter().map(|v| v.len()).collect();
        let ten = n.iter().filter(|&&x| x >= 10).count();
        if args.json {
            println!(
                "{}",
                serde_json::json!({"versions": m.name, "kernels": n.len(),
                    "min": n.iter().min(), "max": n.iter().max(),
                    "mean": n.iter().sum::<usize>() as f64 / n.len() as f64, "with_ten": ten})
            );
        } else {
            println!(
                "versions after pruning, {}: {} kernels, min {} mean {:.1} max {} (of 16 candidates, 4 more per split past 8); {} kernels keep >= 10",
                m.name,
                n.len(),
                n.iter().min().unwrap_or(&0),
                n.iter().sum::<usize>() as f64 / n.len().max(1) as f64,
                n.iter().max().unwrap_or(&0),
                ten
            );
        }
    }
    if args.selection {
        return Ok(());
    }
    if args.explain {
        for rt in &models {
            for be in &models {
                for v in [Variant::Single, Variant::MultiVersion] {
                    let b = blockers(&spec, rt, be, v)?;
                    if args.json {
                        println!("{}", serde_json::to_value(&b)?);
                        continue;
                    }
                    let first = match &b.first {
                        None => "none: every BE kernel pads some RT kernel".to_string(),
                        Some((k, name, tally)) => format!(
                            "first {k} ({name}): {}; its shortest block {:.1} us, longest RT kernel leaving CUs {:.1} us",
                            tally
                                .iter()
                                .map(|(v, n)| format!("{v} x{n}"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            b.first_min_block_ns.unwrap_or(0) as f64 / 1e3,
                            b.rt_max_paddable_kernel_ns as f64 / 1e3
                        ),
                    };
                    let early = match &b.first_only_early {
                        None => String::new(),
                        Some((k, name, rts)) => format!(
                            "; first admitted only by RT kernels among the first {}: {k} ({name}), by RT kernels {rts:?}",
                            crate::run::REEF_DQ_CAPACITY
                        ),
                    };
                    println!(
                        "{:<10} {:<10} {:<12} {:>3} BE kernels no RT kernel admits; {first}{early}",
                        b.rt,
                        b.be,
                        b.variant,
                        b.blocked.len()
                    );
                }
            }
        }
        return Ok(());
    }
    if !(args.rt_gap_us >= 0.0 && args.rt_gap_us.is_finite()) {
        bail!(
            "--rt-gap-us must be a non-negative number of microseconds, got {}",
            args.rt_gap_us
        );
    }
    let policies: Vec<String> = args
        .policy
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    for p in &policies {
        reef_sched::policy_by_name(p)?;
    }
    let standalone: Vec<f64> = models
        .iter()
        .map(|m| crate::disb::standalone_ns(&spec, m, 5, args.seed))
        .collect::<Result<_>>()?;
    let mut jobs = Vec::new();
    for rt in 0..models.len() {
        for be in 0..models.len() {
            for p in &policies {
                jobs.push((rt, be, p.clone()));
            }
        }
    }
    let t0 = Instant::now();
    let rs = crate::run::par_map(
        &jobs,
        crate::run::threads(args.jobs),
        None,
        |(rt, be, p)| format!("{}+{} {p}", models[*rt].model.name, models[*be].model.name),
        |(rt, be, p)| run_pair(&spec, &models, &standalone, *rt, *be, p, &args),
    );
    let mut out = Vec::new();
    for r in rs {
        out.push(r?);
    }
    if args.json {
        for r in &out {
            let mut v = serde_json::to_value(r)?;
            v.as_object_mut().map(|o| o.remove("overhead_ns"));
            println!("{v}");
        }
    } else {
        print_pairs(&out);
        if args.lost {
            print_lost(&out);
        }
    }
    eprintln!(
        "{} runs of {} s virtual time in {:.1} s wall",
        out.len(),
        args.duration,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `--lost`: every pair's account, then its mean per policy.
fn print_lost(out: &[PairResult]) {
    let mut rows: Vec<(String, String, f64, crate::disb::lost::Lost)> = out
        .iter()
        .filter_map(|r| {
            Some((
                format!("{}-{}", r.rt, r.be),
                r.policy.clone(),
                r.be_throughput_norm,
                r.lost.clone()?,
            ))
        })
        .collect();
    let mut pols: Vec<String> = rows.iter().map(|r| r.1.clone()).collect();
    pols.sort();
    pols.dedup();
    for p in pols {
        let rs: Vec<_> = rows.iter().filter(|r| r.1 == p).cloned().collect();
        let n = rs.len() as f64;
        let m = |f: &dyn Fn(&crate::disb::lost::Lost) -> f64| {
            rs.iter().map(|r| f(&r.3)).sum::<f64>() / n
        };
        let mean = crate::disb::lost::Lost {
            rt_busy: m(&|l| l.rt_busy),
            be_busy: m(&|l| l.be_busy),
            be_shared: m(&|l| l.be_shared),
            killed: m(&|l| l.killed),
            be_occupancy: m(&|l| l.be_occupancy),
            gpu_idle: m(&|l| l.gpu_idle),
            beside_rt_refused: m(&|l| l.beside_rt_refused),
            beside_rt: m(&|l| l.beside_rt),
            beside_be: m(&|l| l.beside_be),
            be_waiting: m(&|l| l.be_waiting),
            part_early: m(&|l| l.part_early),
            part_early_done: m(&|l| l.part_early_done),
        };
        let be = rs.iter().map(|r| r.2).sum::<f64>() / n;
        rows.push(("mean of pairs".into(), p, be, mean));
    }
    println!();
    print!("{}", crate::disb::lost::table(&rows));
}

fn print_pairs(out: &[PairResult]) {
    println!("\nFig. 23: RT latency (norm.), RT + BE throughput (norm.) per RT-BE pair");
    println!(
        "{:<10} {:<10} {:<12} {:>8} {:>7} {:>7} {:>8} {:>7} {:>7} {:>8}",
        "RT", "BE", "policy", "rt_lat", "rt_thr", "be_thr", "overall", "rt_cu", "be_cu", "padded"
    );
    for r in out {
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v));
        println!(
            "{:<10} {:<10} {:<12} {:>8.3} {:>7.3} {:>7.3} {:>8.3} {:>7} {:>7} {:>7.0}%",
            r.rt,
            r.be,
            r.policy,
            r.rt_latency_norm,
            r.rt_throughput_norm,
            r.be_throughput_norm,
            r.overall_throughput_norm,
            f(r.rt_cu_share),
            f(r.be_cu_share),
            if r.rt_launches > 0 {
                100.0 * r.padded_launches as f64 / r.rt_launches as f64
            } else {
                0.0
            }
        );
    }
    let mut pols: Vec<&str> = out.iter().map(|r| r.policy.as_str()).collect();
    pols.dedup();
    pols.sort();
    pols.dedup();
    println!("\nAverages over pairs:");
    for p in &pols {
        let rs: Vec<&PairResult> = out.iter().filter(|r| r.policy == *p).collect();
        let n = rs.len() as f64;
        let avg = |f: &dyn Fn(&PairResult) -> f64| rs.iter().map(|r| f(r)).sum::<f64>() / n;
        let starved: Vec<String> = rs
            .iter()
            .filter(|r| r.be_throughput_norm == 0.0)
            .map(|r| format!("{}-{}", r.rt, r.be))
            .collect();
        println!(
            "{:<12} rt_lat {:.3} (max {:.3})  overall {:.3} (max {:.3})  BE starved in {} pairs{}",
            p,
            avg(&|r| r.rt_latency_norm),
            rs.iter().map(|r| r.rt_latency_norm).fold(0.0, f64::max),
            avg(&|r| r.overall_throughput_norm),
            rs.iter()
                .map(|r| r.overall_throughput_norm)
                .fold(0.0, f64::max),
            starved.len(),
            if starved.is_empty() {
                String::new()
            } else {
                format!(": {}", starved.join(", "))
            }
        );
        let mut o: Vec<i64> = rs
            .iter()
            .flat_map(|r| r.overhead_ns.iter().copied())
            .collect();
        if !o.is_empty() {
            o.sort_unstable();
            let zero = o.iter().filter(|&&x| x <= 0).count() as f64 / o.len() as f64;
            println!(
                "{:<12} Fig. 27 padded RT kernel overhead over {} launches: {:.1}% <= 0; p50 {} ns, p90 {} ns, p99 {} ns, max {} ns",
                "",
                o.len(),
                100.0 * zero,
                pct(&o, 50.0),
                pct(&o, 90.0),
                pct(&o, 99.0),
                o[o.len() - 1]
            );
            // CDF points to set beside the paper's figure (49.1% unaffected,
            // 90% within 9 us).
            let cdf: Vec<String> = [1_000i64, 5_000, 9_000, 20_000, 50_000]
                .iter()
                .map(|&t| {
                    let n = o.partition_point(|&x| x <= t);
                    format!(
                        "<= {} us {:.1}%",
                        t / 1000,
                        100.0 * n as f64 / o.len() as f64
                    )
                })
                .collect();
            println!("{:<12} Fig. 27 CDF: {}", "", cdf.join(", "));
        }
    }
}

#[cfg(test)]
mod tests;
