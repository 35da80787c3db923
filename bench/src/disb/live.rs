//! `reef-bench disb WORKLOAD --live [--socket PATH]`: the DISB workloads
//! driven on the wall clock against a running reefd through its client API
//! (`reefd::client`, docs/protocol.md), instead of in virtual time.
//!
//! Everything that defines the workload is shared with the virtual-time run:
//! the same reader (`workload`), the same client plans and arrival generation
//! for the same seed (`runner::plan_clients`, DISB's client loop: each client
//! waits for its next launch, issues one request and waits for the reply;
//! periodic, Poisson and trace launches already late for the next slot are
//! dropped; dependent clients issue when all their inputs have returned a
//! result of one serial), and the same metrics (`metrics::summarize`, so the
//! `--json` object has the virtual run's fields, plus a `live` object).
//!
//! The normalisation base is each model's latency alone on the GPU (REEF
//! §7, "Metrics": RT latency normalised by the model's stand-alone
//! latency), measured through the daemon first, as the virtual run
//! measures it through the scheduler, whatever the daemon's device: a
//! `cuda:N` GPU has no virtual-time preset to take it from, and on a
//! simulated one the base must hold the same client and daemon path as
//! the run's latencies. The daemon is first left to go quiet (no request
//! in flight and no kernel launched for [`QUIET`]: a CUDA daemon computes
//! each loaded model's reference outputs in the background), then per
//! model one RT client alone runs one warm-up and ten inferences; the base
//! is the mean of the ten ([`standalone_base`]). The output says so (the
//! text's "normalisation base" line, `live.standalone_method` in
//! `--json`). Latency is measured by the client, from just before a
//! request is written to the socket to its reply (DISB measures at the
//! client), for the stand-alone phase and the run alike.
//!
//! Each DISB task is one connection and one registered stream (RT or BE as
//! the workload says), driven by its own thread. The daemon's policy is
//! switched through the API when `--policy` names another one (and switched
//! back at the end); without `--policy` the daemon's current policy is used.
//!
//! What the daemon does not report is not made up: preemption latency,
//! redundant kernels, device events and the padding counts of a virtual
//! run (the daemon reports `live.padded_launches` only) are null or 0 and
//! listed in `live.not_measured`; preemption counts, levels, restores and launched
//! kernels are the daemon's counters over the run (other clients of the same
//! daemon would be counted too: the run warns when the daemon is not idle).

use super::metrics::{self, PolicyResult};
use super::runner::{self, ClientPlan, ClientStats, Gen, RunOutcome};
use super::workload::{self, Workload};
use super::DisbArgs;
use anyhow::{bail, Context, Result};
use reef_sched::{Class, PreemptLevel, Time};
use reefd::client::{Client, ClientError};
use reefd::protocol::{ErrorCode, Priority, Stats, StatusInfo, TaskResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod client;
use client::{client_loop, ClientJob, ClientOut, Shared};

/// The daemon's default socket (docs/daemon.md).
pub const DEFAULT_SOCKET: &str = "/run/reef/reefd.sock";

/// Stand-alone phase: one warm-up, then this many measured inferences.
const STANDALONE_RUNS: usize = 10;
/// Warm-up inferences before the measured ones (first-use costs: a CUDA
/// engine opens a stream's module instance and buffers at its first
/// request).
const STANDALONE_WARMUP: usize = 1;

/// How long the daemon must be idle (no request in flight, its
/// `kernels_launched` counter unchanged) before the stand-alone phase:
/// 50 ms, more than one inference of the largest model here takes alone
/// (ResNet-50 at 64x64: 2.7 ms through reefd on the simulated H100,
/// docs/hardware.md), so a background computation between two kernels is
/// not taken for idleness.
pub const QUIET: Duration = Duration::from_millis(50);
/// How long to wait for the daemon to go quiet before measuring anyway
/// (with a warning).
const QUIET_MAX: Duration = Duration::from_secs(30);

/// How the normalisation base was obtained, for the output.
pub fn standalone_method() -> String {
    format!(
        "each model alone through reefd, after the daemon was idle for {} ms: {STANDALONE_WARMUP} \
         warm-up + {STANDALONE_RUNS} inferences from one RT client, mean by the client's clock \
         (REEF §7: latency normalised by the model's stand-alone latency)",
        QUIET.as_millis()
    )
}

/// The normalisation base from one model's stand-alone latencies in the
/// order measured: the warm-ups dropped, the mean of the rest (`None`
/// when nothing is left).
pub fn standalone_base(samples: &[f64], warmup: usize) -> Option<f64> {
    metrics::mean(samples.get(warmup..)?)
}

/// Waits until the daemon has no request in flight and launched no kernel
/// for [`QUIET`]; `false` when it was still busy after `max`.
fn wait_quiet(admin: &mut Client, max: Duration) -> Result<bool> {
    let start = Instant::now();
    let mut last = (admin.stats()?.kernels_launched, Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(5));
        let launched = admin.stats()?.kernels_launched;
        let idle = admin.status()?.tasks_in_flight == 0;
        if launched != last.0 || !idle {
            last = (launched, Instant::now());
        } else if last.1.elapsed() >= QUIET {
            return Ok(true);
        }
        if start.elapsed() >= max {
            return Ok(false);
        }
    }
}

/// How long after the end of a run the clients may wait for replies still
/// in flight before the run is declared stuck.
const GRACE: Duration = Duration::from_secs(30);

/// Fields of the virtual-time result the daemon cannot supply.
const NOT_MEASURED: &[&str] = &[
    "preempt_latency_us_mean",
    "preempt_latency_us_p99",
    "redundant_kernels",
    "device_events",
    "padding",
];

/// The socket `--live` talks to: `--socket`, else `$REEF_SOCKET`, else the
/// daemon's default.
pub fn socket_path(args: &DisbArgs) -> PathBuf {
    args.socket
        .clone()
        .or_else(|| std::env::var_os("REEF_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// The default value of a `disb` flag (to tell "not given" from "given").
fn default_of(id: &str) -> Option<String> {
    let cmd = <DisbArgs as clap::Args>::augment_args(clap::Command::new("disb"));
    let arg = cmd.get_arguments().find(|a| a.get_id() == id)?;
    arg.get_default_values()
        .first()
        .map(|v| v.to_string_lossy().into_owned())
}

fn connect(socket: &Path) -> Result<Client> {
    let start = format!(
        "start one with `reefd start --foreground --device sim:mi50 --socket {}` \
         (docs/daemon.md), or point --socket / REEF_SOCKET at a running one",
        socket.display()
    );
    let mut c = match Client::connect(socket) {
        Ok(c) => c,
        Err(ClientError::Connect { source, .. }) => {
            bail!(
                "no reefd answers at {}: {source}; {start}",
                socket.display()
            )
        }
        Err(e) => return Err(e.into()),
    };
    c.hello().map_err(|e| match e {
        ClientError::Server { code, message } => {
            anyhow::anyhow!(
                "reefd at {} refused us ({code}): {message}",
                socket.display()
            )
        }
        e => anyhow::anyhow!(
            "something listens at {} but does not speak reefd's protocol ({e}); {start}",
            socket.display()
        ),
    })?;
    Ok(c)
}

/// The next launch of an idle client at `now` (ns since the run's start),
/// or `None` when it has no more launches before `end`: DISB's
/// `waitUntilNextLaunch`, the virtual runner's own rule ([`Gen::next`]), so
/// arrivals are the same for the same seed. Dependent clients return
/// `Some(now)`; the caller waits for their inputs.
pub fn next_launch(gen: &mut Gen, now: Time, end: Time) -> Option<Time> {
    gen.next(now, end)
}

/// Stand-alone latencies measured through the daemon.
struct Standalone {
    /// Client-side mean, ns (the normalisation base).
    client_ns: Vec<f64>,
    /// The daemon's own latency (arrival at the socket to completion), us.
    daemon_us: Vec<f64>,
}

fn measure_standalone(socket: &Path, models: &[String]) -> Result<Standalone> {
    let mut c = connect(socket)?;
    let s = c
        .register(Priority::Rt, Some("reef-bench standalone"))
        .context("registering the stand-alone RT client")?;
    let mut out = Standalone {
        client_ns: Vec::new(),
        daemon_us: Vec::new(),
    };
    for m in models {
        let mut client = Vec::new();
        let mut daemon = Vec::new();
        for _ in 0..STANDALONE_WARMUP + STANDALONE_RUNS {
            let t = Instant::now();
            let r = c
                .infer(s.stream, m)
                .with_context(|| format!("stand-alone inference of {m}"))?;
            client.push(t.elapsed().as_nanos() as f64);
            check_outputs(&r)?;
            daemon.push(r.latency_us);
        }
        out.client_ns
            .push(standalone_base(&client, STANDALONE_WARMUP).expect("runs > 0"));
        out.daemon_us
            .push(standalone_base(&daemon, STANDALONE_WARMUP).expect("runs > 0"));
    }
    c.unregister(s.stream)?;
    Ok(out)
}

fn check_outputs(r: &TaskResult) -> Result<()> {
    if r.outputs_verified == Some(false) {
        bail!(
            "task {} ({} on stream {}): the daemon reports outputs that differ from an unpreempted run",
            r.task,
            r.model,
            r.stream
        );
    }
    Ok(())
}

/// The `live` object added to each `--json` line.
#[derive(Debug, Clone, Serialize)]
pub struct LiveInfo {
    pub socket: PathBuf,
    pub daemon_version: String,
    pub daemon_device: String,
    pub daemon_engine: String,
    pub daemon_policy: String,
    /// Whether the daemon's policy runs dynamic kernel padding (`reef`,
    /// `reef-dkp-mv`, `reef-max` unless `-pad`: its engine executes padded
    /// launches through reef-exec, as the virtual-time runner does).
    pub padding: bool,
    /// RT kernels the daemon launched padded with BE blocks during the run
    /// (its `padded_launches` counter, after minus before).
    pub padded_launches: u64,
    /// Stand-alone latency per model measured through the daemon by the
    /// client (the normalisation base), us.
    pub standalone_us: BTreeMap<String, f64>,
    /// How the base was measured ([`standalone_method`]).
    pub standalone_method: String,
    /// The same, as the daemon measured it (arrival at the socket to
    /// completion), us.
    pub standalone_daemon_us: BTreeMap<String, f64>,
    /// Mean RT latency by the daemon's clock over its own stand-alone base.
    pub rt_latency_norm_mean_daemon: Option<f64>,
    /// RT control path (arrival at the socket to first kernel queued), us.
    pub rt_control_path_us_p50: Option<f64>,
    pub rt_control_path_us_p99: Option<f64>,
    /// How late requests were sent after their planned launch, us.
    pub launch_late_us_mean: Option<f64>,
    pub launch_late_us_p99: Option<f64>,
    /// Requests whose outputs the daemon compared with an unpreempted run.
    pub outputs_verified: u64,
    pub outputs_corrupted: u64,
    pub outputs_unchecked: u64,
    /// The daemon's preemption counters over the run, by level.
    pub preemptions_by_level: BTreeMap<String, u64>,
    pub not_measured: Vec<&'static str>,
}

struct Ctx {
    socket: PathBuf,
    status: StatusInfo,
    models: Vec<String>,
    standalone: Standalone,
}

fn counter_delta(after: &Stats, before: &Stats) -> BTreeMap<String, u64> {
    after
        .preemptions
        .iter()
        .map(|(k, &v)| {
            let b = before.preemptions.get(k).copied().unwrap_or(0);
            (k.clone(), v.saturating_sub(b))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Runs one workload under the daemon's current policy.
fn run_one(
    ctx: &Ctx,
    admin: &mut Client,
    w: &Workload,
    policy: &str,
    args: &DisbArgs,
) -> Result<(PolicyResult, LiveInfo)> {
    let secs = args.duration.unwrap_or(w.time);
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--duration must be a positive number of seconds, got {secs}");
    }
    let end = (secs * 1e9) as Time;
    let index = |d: &str| {
        ctx.models
            .iter()
            .position(|m| m == d)
            .expect("workload models loaded")
    };
    let plans = runner::plan_clients(w, &index, &ctx.standalone.client_ns, args.seed);
    let n = plans.len();
    let dependents: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            (0..n)
                .filter(|&j| matches!(&plans[j].gen, Gen::Dependent { prev } if prev.contains(&i)))
                .collect()
        })
        .collect();
    let status = admin.status()?;
    if status.tasks_in_flight > 0 || status.streams > 0 {
        eprintln!(
            "reef-bench disb --live: warning: the daemon already has {} streams and {} tasks in flight; \
             their work shares the device and the daemon's counters",
            status.streams, status.tasks_in_flight
        );
    }
    // One connection and one stream per DISB task.
    let mut jobs = Vec::new();
    let mut socks: Vec<UnixStream> = Vec::new();
    for (ci, plan) in plans.iter().enumerate() {
        let mut c = connect(&ctx.socket)?;
        let prio = match plan.class {
            Class::RealTime => Priority::Rt,
            Class::BestEffort => Priority::Be,
        };
        let s = c
            .register(prio, Some(&plan.name))
            .with_context(|| format!("registering client {}", plan.name))?;
        socks.push(c.socket().try_clone()?);
        jobs.push(ClientJob {
            ci,
            plan: plan.clone(),
            model: &ctx.models[plan.model],
            client: c,
            stream: s.stream,
            dependents: dependents[ci].clone(),
            rt_only: policy == "rt-only",
        });
    }
    let before = admin.stats()?;
    let sh = Shared {
        // A little head room so every thread is waiting at time 0.
        t0: Instant::now() + Duration::from_millis(20),
        end,
        dep_ready: Mutex::new(vec![BTreeMap::new(); n]),
        cv: Condvar::new(),
        abort: AtomicBool::new(false),
    };
    let started = Instant::now();
    let (tx, rx) = mpsc::channel::<(usize, ClientOut)>();
    let mut outs: Vec<Option<ClientOut>> = (0..n).map(|_| None).collect();
    let mut stuck = false;
    std::thread::scope(|sc| {
        for job in jobs {
            let tx = tx.clone();
            let sh = &sh;
            sc.spawn(move || {
                let ci = job.ci;
                let o = client_loop(job, sh);
                let _ = tx.send((ci, o));
            });
        }
        drop(tx);
        let deadline = sh.t0 + Duration::from_nanos(end) + GRACE;
        let mut got = 0;
        while got < n {
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok((ci, o)) => {
                    outs[ci] = Some(o);
                    got += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !stuck => {
                    // Unblock clients waiting on a daemon that stopped answering.
                    stuck = true;
                    sh.abort.store(true, Ordering::Relaxed);
                    sh.cv.notify_all();
                    for s in &socks {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                    }
                }
                Err(_) => {
                    // Disconnected, or still nothing after the shutdown:
                    // the scope joins what is left.
                    for (ci, o) in rx.iter() {
                        outs[ci] = Some(o);
                    }
                    break;
                }
            }
        }
    });
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    if stuck {
        bail!(
            "reefd at {} did not answer the run's requests within {} s after its end",
            ctx.socket.display(),
            GRACE.as_secs()
        );
    }
    let outs: Vec<ClientOut> = outs
        .into_iter()
        .map(|o| o.expect("every client reported"))
        .collect();
    if let Some(e) = outs.iter().find_map(|o| o.error.clone()) {
        bail!("{e}");
    }
    let corrupted: u64 = outs.iter().map(|o| o.corrupted).sum();
    if corrupted > 0 {
        bail!(
            "{corrupted} requests returned outputs that differ from an unpreempted run (daemon's value tracking)"
        );
    }
    let after = admin.stats()?;
    let by_level = counter_delta(&after, &before);
    let outcome = RunOutcome {
        clients: outs.iter().map(|o| o.stats.clone()).collect(),
        preemptions: Vec::new(),
        duration: end,
        restores: after.restores.saturating_sub(before.restores),
        redundant_kernels: 0,
        kernels_launched: after
            .kernels_launched
            .saturating_sub(before.kernels_launched),
        device_events: 0,
        corrupted_outputs: corrupted,
        device_max_level: PreemptLevel::highest(ctx.status.preemption_levels.iter().copied()),
        padding: None,
        fikit: None,
        fikit_profiles: Vec::new(),
        // The daemon does not report its device's DRAM draw.
        dram_load_peak: None,
        aker: None,
        lost: None,
        decision_cost: None,
        prepare_cost: None,
        ahead: None,
    };
    let mut r = metrics::summarize(
        &w.name,
        policy,
        &ctx.status.device,
        args.seed,
        &plans,
        &ctx.models,
        &ctx.standalone.client_ns,
        &outcome,
        wall_ms,
    );
    r.preemptions = by_level.values().sum::<u64>() as usize;
    r.preempt_level = by_level.keys().filter_map(|k| k.parse::<u8>().ok()).max();
    r.preempt_latency_us_mean = None;
    r.preempt_latency_us_p99 = None;
    let mut rt_daemon_norm = Vec::new();
    let mut control = Vec::new();
    for (plan, o) in plans.iter().zip(&outs) {
        if plan.class == Class::RealTime {
            let base = ctx.standalone.daemon_us[plan.model];
            rt_daemon_norm.extend(o.daemon_us.iter().map(|l| l / base));
            control.extend_from_slice(&o.control_us);
        }
    }
    control.sort_by(f64::total_cmp);
    let mut late: Vec<f64> = outs
        .iter()
        .flat_map(|o| o.late_us.iter().copied())
        .collect();
    late.sort_by(f64::total_cmp);
    let daemon_policy = admin.status()?.policy;
    let info = LiveInfo {
        socket: ctx.socket.clone(),
        daemon_version: ctx.status.daemon_version.clone(),
        daemon_device: ctx.status.device.clone(),
        daemon_engine: ctx.status.engine.clone(),
        daemon_policy: daemon_policy.clone(),
        padding: reef_sched::dkp::variant_of(&daemon_policy).is_some()
            || reef_sched::dkp::MaxConfig::parse(&daemon_policy).is_some_and(|m| m.pad),
        padded_launches: after.padded_launches.saturating_sub(before.padded_launches),
        standalone_us: ctx
            .models
            .iter()
            .zip(&ctx.standalone.client_ns)
            .map(|(m, ns)| (m.clone(), ns / 1e3))
            .collect(),
        standalone_method: standalone_method(),
        standalone_daemon_us: ctx
            .models
            .iter()
            .zip(&ctx.standalone.daemon_us)
            .map(|(m, us)| (m.clone(), *us))
            .collect(),
        rt_latency_norm_mean_daemon: metrics::mean(&rt_daemon_norm),
        rt_control_path_us_p50: metrics::percentile(&control, 50.0),
        rt_control_path_us_p99: metrics::percentile(&control, 99.0),
        launch_late_us_mean: metrics::mean(&late),
        launch_late_us_p99: metrics::percentile(&late, 99.0),
        outputs_verified: outs.iter().map(|o| o.verified).sum(),
        outputs_corrupted: corrupted,
        outputs_unchecked: outs.iter().map(|o| o.unchecked).sum(),
        preemptions_by_level: by_level,
        not_measured: NOT_MEASURED.to_vec(),
    };
    Ok((r, info))
}

/// Entry point of `reef-bench disb --live`.
pub fn main(args: DisbArgs) -> Result<()> {
    let socket = socket_path(&args);
    if let Some(d) = default_of("dq_capacity") {
        if args.dq_capacity.to_string() != d {
            bail!(
                "--dq-capacity is the daemon's setting in --live mode: set scheduler.device_queue_capacity \
                 in its reefd.toml (docs/daemon.md) and restart it"
            );
        }
    }
    if args.decision_cost || args.lost {
        bail!(
            "--decision-cost and --lost are measured inside a virtual-time run; leave out --live for them \
             (the daemon's own costs: `reefctl stats`, docs/daemon.md)"
        );
    }
    if args.select_at_launch {
        bail!(
            "--select-at-launch changes how a virtual-time run schedules; the daemon always selects \
             padding ahead of the launch (docs/padding.md): leave out --live for it"
        );
    }
    let shared = reef_model::shared_dir();
    let mut workloads = Vec::new();
    for p in workload::resolve(&args.workload, &shared) {
        workloads.push(Workload::load(&p)?);
    }
    let mut admin = connect(&socket)?;
    let status = admin.status()?;
    // --device: the daemon's device; only checked when given.
    if default_of("device").as_deref() != Some(args.device.as_str()) {
        let want = if args.device.contains(':') {
            args.device.clone()
        } else {
            format!("sim:{}", args.device)
        };
        if status.device != want {
            bail!(
                "reefd at {} serves on {}, not {want}: restart it with `reefd start --device {want} \
                 --socket {}`, or leave out --device",
                socket.display(),
                status.device,
                socket.display()
            );
        }
    }
    // --policy: the daemon's current policy unless given.
    let policies = if default_of("policy").as_deref() == Some(args.policy.as_str()) {
        vec![status.policy.clone()]
    } else {
        super::parse_policies(&args.policy)?
    };
    let original_policy = status.policy.clone();
    // Models, in the virtual run's order (first use across the workloads).
    let mut models: Vec<String> = Vec::new();
    for w in &workloads {
        for t in &w.tasks {
            if !models.contains(&t.model_dir) {
                models.push(t.model_dir.clone());
            }
        }
    }
    let loaded_before: Vec<String> = admin.models()?.into_iter().map(|m| m.name).collect();
    for m in &models {
        let path = args.models.as_ref().map(|d| d.join(m));
        admin
            .load_model(m, path.as_deref())
            .with_context(|| format!("reefd could not load model {m}"))?;
    }
    let t0 = Instant::now();
    if !wait_quiet(&mut admin, QUIET_MAX)? {
        eprintln!(
            "reef-bench disb --live: warning: reefd at {} was still busy after {} s; the \
             stand-alone latencies are measured beside that work",
            socket.display(),
            QUIET_MAX.as_secs()
        );
    }
    let standalone = measure_standalone(&socket, &models)?;
    if !args.json {
        eprintln!(
            "normalisation base: {}\nstand-alone latency through reefd at {} on {} ({:.0} ms): {}",
            standalone_method(),
            socket.display(),
            status.device,
            t0.elapsed().as_secs_f64() * 1e3,
            models
                .iter()
                .zip(&standalone.client_ns)
                .map(|(m, l)| format!("{m} {:.0} us", l / 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let ctx = Ctx {
        socket: socket.clone(),
        status: status.clone(),
        models: models.clone(),
        standalone,
    };
    let mut results: Vec<(PolicyResult, LiveInfo)> = Vec::new();
    let mut failure = None;
    'outer: for p in &policies {
        let current = admin.status()?.policy;
        if &current != p {
            if let Err(e) = admin.set_policy(p) {
                failure = Some(anyhow::anyhow!(
                    "reefd runs policy {current}, --policy asks {p}, and switching it failed: {e} \
                     (run as root or as the daemon's user, or restart it with `reefd start --policy {p}`)"
                ));
                break;
            }
            if !args.json {
                eprintln!("switched reefd's policy from {current} to {p}");
            }
        }
        for w in &workloads {
            match run_one(&ctx, &mut admin, w, p, &args)
                .with_context(|| format!("live workload {} policy {p}", w.name))
            {
                Ok(r) => results.push(r),
                Err(e) => {
                    failure = Some(e);
                    break 'outer;
                }
            }
        }
    }
    // Leave the daemon as we found it, over a fresh connection: after a
    // failed run the old one may be dead, and writing to it could raise
    // SIGPIPE.
    drop(admin);
    let mut admin = match connect(&socket) {
        Ok(c) => c,
        Err(e) => {
            let e = anyhow::anyhow!("reefd went away during the run: {e:#}");
            return Err(failure.map_or(e, |f| f.context("reefd went away during the run")));
        }
    };
    match admin.status() {
        Ok(s) if s.policy != original_policy => {
            if let Err(e) = admin.set_policy(&original_policy) {
                eprintln!(
                    "reef-bench disb --live: could not switch reefd back to {original_policy}: {e}"
                );
            }
        }
        _ => {}
    }
    for m in &models {
        if !loaded_before.contains(m) {
            if let Err(e) = admin.unload_model(m) {
                eprintln!("reef-bench disb --live: could not unload {m}: {e}");
            }
        }
    }
    if args.json {
        for (r, info) in &results {
            let mut v = serde_json::to_value(r)?;
            v["live"] = serde_json::to_value(info)?;
            println!("{v}");
        }
    } else {
        let plain: Vec<PolicyResult> = results.iter().map(|(r, _)| r.clone()).collect();
        print!("{}", super::table(&plain));
        for (r, i) in &results {
            println!(
                "live {} {}: daemon policy {}, outputs verified {}/{} (unchecked {}), \
                 RT normalised mean by the daemon's clock {}, RT control path p50/p99 {}/{} us, \
                 launches late by {} us (mean), {} s wall",
                r.workload,
                r.policy,
                i.daemon_policy,
                i.outputs_verified,
                i.outputs_verified + i.outputs_corrupted + i.outputs_unchecked,
                i.outputs_unchecked,
                fmt(i.rt_latency_norm_mean_daemon, 3),
                fmt(i.rt_control_path_us_p50, 1),
                fmt(i.rt_control_path_us_p99, 1),
                fmt(i.launch_late_us_mean, 1),
                (r.wall_ms / 1e3).round()
            );
        }
    }
    if !args.no_plot && !results.is_empty() {
        let plain: Vec<PolicyResult> = results.iter().map(|(r, _)| r.clone()).collect();
        super::plot::write_fig15(&args.plot, &plain)?;
        if !args.json {
            println!("plot: {}", args.plot.display());
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn fmt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.prec$}"))
}

#[cfg(test)]
mod tests;
