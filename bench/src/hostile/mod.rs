//! `reef-bench hostile`: a bounded load test of reefd over its Unix socket
//! (issue 25). A closed-loop RT client measures its latency alone (quiet),
//! then beside N connections of which some are hostile (names near and over
//! the frame limit, slow senders, processes SIGKILLed mid-frame, garbage
//! frames and a length prefix of 2^31), then alone again; the daemon's RSS
//! and open descriptors are read from /proc before, at the peak and after
//! every connection closed.
//!
//! Everything is loopback (one Unix socket); every loop has a count and is
//! cut by the run's time limit; a daemon that stops answering is reported,
//! not waited for.

mod daemon;
pub mod load;
mod report;
mod round;
mod rt;

use report::print_table;
use round::load_round;
pub use round::Round;
use rt::rt_phase;
pub use rt::{RtPhase, Summary};

use anyhow::{bail, Context, Result};
use load::{call, Tally, REPLY_TIMEOUT};
use reefd::client::{Client, ClientError};
use reefd::protocol::{Priority, Reply, RequestBody, ServerMessage, Stats};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use load::{child_main, ChildArgs};

#[derive(Debug, clap::Args)]
pub struct HostileArgs {
    /// The reefd binary to start on a temporary socket (default: `reefd`
    /// beside this reef-bench).
    #[arg(long, conflicts_with = "socket")]
    pub reefd: Option<PathBuf>,
    /// Load a daemon already serving on this socket instead of starting one
    /// (its `daemon.max_connections` must then fit the connections).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Device of a started daemon.
    #[arg(long, default_value = "sim:mi50")]
    pub device: String,
    /// Policy of a started daemon.
    #[arg(long, default_value = "reef")]
    pub policy: String,
    /// Models directory of a started daemon (default: the daemon's).
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Connections opened during the load, hostile ones included.
    #[arg(long, default_value_t = 1000)]
    pub connections: usize,
    /// How many of them are hostile, split evenly among the four kinds.
    #[arg(long, default_value_t = 100)]
    pub hostile: usize,
    /// The RT client's model.
    #[arg(long, default_value = "vgg")]
    pub model: String,
    /// The model of the benign clients' BE inferences and of the killed
    /// children's inference in flight.
    #[arg(long, default_value = "vgg")]
    pub be_model: String,
    /// RT requests per phase (quiet, loaded, quiet again).
    #[arg(long, default_value_t = 1000)]
    pub rt_requests: usize,
    /// RT requests before the quiet phase, not counted.
    #[arg(long, default_value_t = 50)]
    pub warmup: usize,
    /// The RT client's pause between a reply and its next request, ms (0:
    /// the next request as soon as the reply is read).
    #[arg(long, default_value_t = 0.0)]
    pub rt_gap_ms: f64,
    /// Every this many benign clients, one runs BE inferences.
    #[arg(long, default_value_t = 10)]
    pub be_every: usize,
    /// BE inferences of each such client.
    #[arg(long, default_value_t = 2)]
    pub be_infers: usize,
    /// How often each oversized-name connection sends its three frames, ms.
    #[arg(long, default_value_t = 1000)]
    pub oversized_period_ms: u64,
    /// A slow sender's pause between two bytes, ms.
    #[arg(long, default_value_t = 20)]
    pub slow_byte_ms: u64,
    /// A killed child lives this many ms (uniform between the two) before
    /// its SIGKILL, then is replaced.
    #[arg(long, num_args = 2, value_names = ["MIN", "MAX"], default_values_t = [1500, 3000])]
    pub kill_after_ms: Vec<u64>,
    /// How often each garbage connection sends a bad frame, ms.
    #[arg(long, default_value_t = 500)]
    pub garbage_period_ms: u64,
    /// The whole run stops after this many seconds, whatever it is doing.
    #[arg(long, default_value_t = 300)]
    pub time_limit_s: u64,
    /// The daemon's RSS above which the load is stopped as unbounded, MiB.
    #[arg(long, default_value_t = 2048)]
    pub rss_cap_mib: u64,
    /// Descriptors the daemon may hold after the load beyond before it.
    #[arg(long, default_value_t = 4)]
    pub fd_tolerance: u64,
    /// RSS the daemon may keep after the load beyond before it, MiB.
    #[arg(long, default_value_t = 32)]
    pub rss_tolerance_mib: u64,
    /// Frames of the non-reader probe (after the rounds): one connection
    /// sends this many `load_model` frames just under the frame limit and
    /// never reads an answer; 0: no probe.
    #[arg(long, default_value_t = 100)]
    pub non_reader_frames: u64,
    /// Load rounds (each: open, load, close, settle). With more than one,
    /// the leak check compares the last round's RSS with the first's, so
    /// memory the allocator keeps is not taken for a leak.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Run the RT client's thread under SCHED_FIFO during its phases (needs
    /// root or CAP_SYS_NICE; refused, it runs as usual and the report says
    /// why). The quiet and loaded phases then compare what the daemon does,
    /// not the operating system's wake-up of the client behind the load
    /// generator's threads on the same cores.
    #[arg(long)]
    pub rt_client_fifo: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What the load's threads share.
pub struct Shared {
    pub socket: PathBuf,
    pub cfg: LoadCfg,
    /// Connections attempted so far (opened or failed).
    pub opened: AtomicUsize,
    /// Set when every connection is open: the activity starts.
    pub go: AtomicBool,
    stop: AtomicBool,
    deadline: Instant,
}

impl Shared {
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire) || Instant::now() >= self.deadline
    }
}

pub struct LoadCfg {
    pub be_every: usize,
    pub be_infers: usize,
    pub be_model: String,
    pub oversized_period: Duration,
    pub slow_byte: Duration,
    pub garbage_period: Duration,
    /// A killed child's life, ms (min, max).
    pub kill_after: (u64, u64),
}

/// The daemon's RSS and descriptors over the load.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Peak {
    pub samples: u64,
    pub max_rss_kib: u64,
    pub max_fds: u64,
    pub max_threads: u64,
    /// Set when the daemon exited or its RSS passed the cap.
    pub problem: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub command: String,
    pub daemon_pid: u32,
    pub daemon_started_here: bool,
    pub max_connections: Option<usize>,
    pub daemon_nofile: Option<String>,
    pub bench_nofile: (u64, u64),
    pub connections: usize,
    pub benign: usize,
    pub hostile: [usize; 4],
    pub quiet: RtPhase,
    /// The first round's loaded phase (the one compared with quiet).
    pub loaded: RtPhase,
    pub quiet_after: RtPhase,
    /// loaded / quiet, client-side mean and p99 (first round).
    pub ratio_mean: f64,
    pub ratio_p99: f64,
    /// The same from the daemon's own latency (arrival to completion).
    pub daemon_ratio_mean: f64,
    pub daemon_ratio_p99: f64,
    pub within_5_percent: bool,
    /// The RT client's scheduling class in its phases (`--rt-client-fifo`).
    pub rt_client_sched: String,
    /// /proc/loadavg during the quiet phase and after it.
    pub loadavg_quiet: String,
    pub before: daemon::ProcSample,
    pub rounds: Vec<Round>,
    /// The last round's after minus before.
    pub fd_leak: Option<i64>,
    pub rss_growth_kib: Option<i64>,
    /// The last round's after minus the first round's after.
    pub rss_growth_later_rounds_kib: Option<i64>,
    pub leak_ok: bool,
    /// The non-reader probe (after the rounds and the second quiet phase).
    pub non_reader: Option<load::NonReader>,
    pub hello_after: Result<String, String>,
    pub daemon_connections_after: Option<usize>,
    pub stats_delta: Option<StatsDelta>,
    pub daemon_exit: String,
    pub daemon_log_warnings: Vec<String>,
    pub problems: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct StatsDelta {
    pub requests: u64,
    pub bad_requests: u64,
    pub tasks_submitted: u64,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub corrupted_outputs: u64,
    pub device_errors: u64,
}

fn delta(a: &Stats, b: &Stats) -> StatsDelta {
    StatsDelta {
        requests: b.requests.saturating_sub(a.requests),
        bad_requests: b.bad_requests.saturating_sub(a.bad_requests),
        tasks_submitted: b.tasks_submitted.saturating_sub(a.tasks_submitted),
        tasks_completed: b.tasks_completed.saturating_sub(a.tasks_completed),
        tasks_failed: b.tasks_failed.saturating_sub(a.tasks_failed),
        corrupted_outputs: b.corrupted_outputs.saturating_sub(a.corrupted_outputs),
        device_errors: b.device_errors.saturating_sub(a.device_errors),
    }
}

fn progress(msg: impl AsRef<str>) {
    eprintln!("hostile: {}", msg.as_ref());
}

fn stats(c: &mut Client) -> Option<Stats> {
    match call(c, RequestBody::Stats, REPLY_TIMEOUT) {
        Ok(Reply::Stats(s)) => Some(*s),
        _ => None,
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(" "))
        })
        .unwrap_or_default()
}

pub fn main(a: HostileArgs) -> Result<()> {
    let t_start = Instant::now();
    let deadline = t_start + Duration::from_secs(a.time_limit_s);
    if a.hostile > a.connections {
        bail!(
            "--hostile {} exceeds --connections {}",
            a.hostile,
            a.connections
        );
    }
    if a.be_every == 0 {
        bail!("--be-every must be at least 1");
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // The benchmark holds every connection (and a pipe pair per child).
    let bench_nofile = daemon::raise_nofile(a.connections as u64 + 1024)?;
    if (bench_nofile.0 as usize) < a.connections + 64 {
        bail!(
            "this process may open {} files (hard limit {}); {} connections need more (raise `ulimit -Hn`)",
            bench_nofile.0,
            bench_nofile.1,
            a.connections
        );
    }
    let max_connections = a.connections + 64;
    let mut d = match &a.socket {
        Some(s) => daemon::Daemon::attach(s)?,
        None => {
            let bin = match &a.reefd {
                Some(b) => b.clone(),
                None => std::env::current_exe()?
                    .parent()
                    .context("reef-bench has no directory")?
                    .join("reefd"),
            };
            if !bin.exists() {
                bail!(
                    "{} does not exist: build it (`cargo build --release -p reefd --bins`) or pass --reefd PATH or --socket PATH",
                    bin.display()
                );
            }
            progress(format!("starting {}", bin.display()));
            daemon::Daemon::start(&daemon::StartOptions {
                reefd: &bin,
                device: &a.device,
                policy: &a.policy,
                max_connections,
                models_dir: a.models_dir.as_deref(),
            })?
        }
    };
    let pid = d.pid;
    let daemon_nofile = daemon::nofile_limit(pid);
    progress(format!(
        "daemon pid {pid} on {} (max_connections {}, open files {})",
        d.socket.display(),
        d.max_connections
            .map_or("as configured".into(), |m| m.to_string()),
        daemon_nofile.as_deref().unwrap_or("?")
    ));
    let mut admin = Client::connect(&d.socket)?;
    let max_frame = match call(&mut admin, RequestBody::Hello, REPLY_TIMEOUT) {
        Ok(Reply::Hello(h)) => h.max_frame_bytes,
        other => bail!("hello: {other:?}"),
    };
    for m in [&a.model, &a.be_model] {
        match call(
            &mut admin,
            RequestBody::LoadModel {
                name: m.clone(),
                path: None,
                idempotence: None,
                device_index: None,
            },
            Duration::from_secs(120),
        ) {
            Ok(Reply::ModelLoaded(i)) => progress(format!(
                "model {} loaded ({} kernels, stand-alone {:?} us)",
                i.name, i.kernels, i.standalone_us
            )),
            other => bail!("loading {m}: {other:?}"),
        }
    }
    let mut rt = Client::connect(&d.socket)?;
    let stream = match call(
        &mut rt,
        RequestBody::Register {
            priority: Priority::Rt,
            label: Some("hostile-bench rt".into()),
        },
        REPLY_TIMEOUT,
    ) {
        Ok(Reply::Registered(s)) => s.stream,
        other => bail!("registering the RT stream: {other:?}"),
    };
    let gap = Duration::from_secs_f64(a.rt_gap_ms.max(0.0) / 1e3);
    // The class is held only around the RT phases: threads the load
    // rounds spawn from this thread must not inherit it.
    let (fifo, rt_client_sched) = rt::rt_sched(a.rt_client_fifo);
    progress(format!(
        "warm-up: {} RT requests (RT client: {rt_client_sched})",
        a.warmup
    ));
    rt_phase(&mut rt, stream, &a.model, a.warmup, gap, deadline, None);
    progress(format!("quiet: {} RT requests", a.rt_requests));
    let quiet = rt_phase(
        &mut rt,
        stream,
        &a.model,
        a.rt_requests,
        gap,
        deadline,
        None,
    );
    drop(fifo);
    progress(format!(
        "quiet: mean {:.0} us, p99 {:.0} us",
        quiet.client_us.mean, quiet.client_us.p99
    ));
    let loadavg_quiet = loadavg();
    let stats_before = stats(&mut admin);
    let before = daemon::sample(pid).context("the daemon is gone")?;
    progress(format!(
        "before: RSS {} KiB, {} fds, {} threads",
        before.rss_kib, before.fds, before.threads
    ));

    // ---- the load, `rounds` times
    let n_hostile = a.hostile;
    let per = |k: usize| n_hostile / 4 + usize::from(k < n_hostile % 4);
    let kinds = [per(0), per(1), per(2), per(3)];
    let mut problems = Vec::new();
    let mut rounds = Vec::new();
    for round in 1..=a.rounds.max(1) {
        let r = load_round(
            &a,
            round,
            &d.socket,
            pid,
            &mut admin,
            &mut rt,
            stream,
            max_frame,
            kinds,
            before.fds,
            deadline,
            &mut problems,
        )?;
        let gone = r.after.is_none();
        rounds.push(r);
        if gone || Instant::now() >= deadline {
            break;
        }
    }
    let first = &rounds[0];
    let last = &rounds[rounds.len() - 1];
    let after = last.after;
    let fd_leak = after.map(|s| s.fds as i64 - before.fds as i64);
    let rss_growth = after.map(|s| s.rss_kib as i64 - before.rss_kib as i64);
    // With several rounds, memory the allocator keeps after the first is
    // told from a leak by what the later rounds add to it.
    let rss_growth_later = match (first.after, after) {
        (Some(f), Some(l)) if rounds.len() > 1 => Some(l.rss_kib as i64 - f.rss_kib as i64),
        _ => None,
    };
    let tol = (a.rss_tolerance_mib * 1024) as i64;
    let leak_ok = fd_leak.is_some_and(|f| f <= a.fd_tolerance as i64)
        && match rss_growth_later {
            Some(g) => g <= tol,
            None => rss_growth.is_some_and(|r| r <= tol),
        };
    let quiet_after = if after.is_some() {
        progress(format!("quiet again: {} RT requests", a.rt_requests));
        let _fifo = rt::rt_sched(a.rt_client_fifo).0;
        rt_phase(
            &mut rt,
            stream,
            &a.model,
            a.rt_requests,
            gap,
            deadline,
            None,
        )
    } else {
        RtPhase::default()
    };
    let non_reader = if a.non_reader_frames > 0 && d.exited().is_none() {
        progress(format!(
            "non-reader probe: {} frames of {} bytes, answers never read",
            a.non_reader_frames, max_frame
        ));
        let nr = load::non_reader(&d.socket, pid, max_frame, a.non_reader_frames);
        if let Some(n) = &nr {
            progress(format!(
                "non-reader: RSS {} KiB before, {} KiB with the connection open, {} KiB after it closed",
                n.rss_before_kib, n.rss_open_kib, n.rss_closed_kib
            ));
            let grew = n.rss_open_kib.saturating_sub(n.rss_before_kib);
            if !n.backpressure && grew > n.bytes / 1024 / 2 {
                problems.push(format!(
                    "a client that never reads made the daemon's RSS grow by {} MiB for {} MiB sent, with no backpressure (answers are queued without bound; released when the connection closed: {} KiB after)",
                    grew / 1024,
                    n.bytes >> 20,
                    n.rss_closed_kib
                ));
            }
        }
        nr
    } else {
        None
    };
    let hello_after = Client::connect(&d.socket)
        .map_err(|e| e.to_string())
        .and_then(
            |mut c| match call(&mut c, RequestBody::Hello, REPLY_TIMEOUT) {
                Ok(Reply::Hello(h)) => Ok(format!(
                    "daemon {} protocol {}",
                    h.daemon_version, h.protocol
                )),
                Ok(r) => Err(format!("unexpected {r:?}")),
                Err(e) => Err(e),
            },
        );
    let daemon_connections_after = match call(&mut admin, RequestBody::Status, REPLY_TIMEOUT) {
        Ok(Reply::Status(s)) => Some(s.connections),
        _ => None,
    };
    let stats_after = stats(&mut admin);
    let stats_delta = match (&stats_before, &stats_after) {
        (Some(b), Some(a)) => Some(delta(b, a)),
        _ => None,
    };
    if let Some(e) = d.exited() {
        problems.push(format!("the daemon exited: {e}"));
    }
    drop(rt);
    drop(admin);
    let log = d.log_path().and_then(|p| std::fs::read_to_string(p).ok());
    let daemon_exit = d.stop();
    let daemon_log_warnings = log
        .map(|l| {
            let mut seen: Vec<String> = Vec::new();
            for line in l
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panick"))
            {
                // Strip the timestamp; keep one line per distinct message.
                let msg: String = line
                    .split_once(' ')
                    .map_or(line, |(_, r)| r)
                    .chars()
                    .take(200)
                    .collect();
                if !seen.contains(&msg) && seen.len() < 10 {
                    seen.push(msg);
                }
            }
            seen
        })
        .unwrap_or_default();
    for (name, p) in [("quiet", &quiet), ("quiet again", &quiet_after)]
        .into_iter()
        .chain(rounds.iter().map(|r| ("loaded", &r.loaded)))
    {
        if p.not_verified > 0 {
            problems.push(format!(
                "{name}: {} RT outputs differ from an unpreempted run",
                p.not_verified
            ));
        }
    }
    for (i, r) in rounds.iter().enumerate() {
        if r.loaded.failed > 0 {
            problems.push(format!(
                "round {}: {} RT requests failed under load",
                i + 1,
                r.loaded.failed
            ));
        }
    }
    if hello_after.is_err() {
        problems.push("the daemon does not answer hello after the load".into());
    }
    if !leak_ok {
        problems.push(format!(
            "after the load the daemon holds {} more fds and {} KiB more RSS than before ({} KiB more than after the first round; tolerance {} fds, {} MiB)",
            fd_leak.map_or("?".into(), |f| f.to_string()),
            rss_growth.map_or("?".into(), |r| r.to_string()),
            rss_growth_later.map_or("-".into(), |r| r.to_string()),
            a.fd_tolerance,
            a.rss_tolerance_mib
        ));
    }
    let loaded = first.loaded.clone();
    let ratio = |l: f64, q: f64| if q > 0.0 { l / q } else { f64::NAN };
    let ratio_mean = ratio(loaded.client_us.mean, quiet.client_us.mean);
    let ratio_p99 = ratio(loaded.client_us.p99, quiet.client_us.p99);
    let r = Report {
        command,
        daemon_pid: pid,
        daemon_started_here: a.socket.is_none(),
        max_connections: d.max_connections,
        daemon_nofile,
        bench_nofile,
        connections: a.connections,
        benign: a.connections - a.hostile,
        hostile: kinds,
        within_5_percent: ratio_mean <= 1.05 && ratio_p99 <= 1.05 && loaded.failed == 0,
        rt_client_sched,
        daemon_ratio_mean: ratio(loaded.daemon_us.mean, quiet.daemon_us.mean),
        daemon_ratio_p99: ratio(loaded.daemon_us.p99, quiet.daemon_us.p99),
        ratio_mean,
        ratio_p99,
        quiet,
        loaded,
        quiet_after,
        loadavg_quiet,
        before,
        fd_leak,
        rss_growth_kib: rss_growth,
        rss_growth_later_rounds_kib: rss_growth_later,
        leak_ok,
        non_reader,
        rounds,
        hello_after,
        daemon_connections_after,
        stats_delta,
        daemon_exit,
        daemon_log_warnings,
        problems,
    };
    progress(format!("done in {:.1} s", t_start.elapsed().as_secs_f64()));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_table(&r);
    }
    Ok(())
}
