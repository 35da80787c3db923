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

/// Latencies of one RT phase.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RtPhase {
    pub requests: usize,
    pub completed: usize,
    pub failed: usize,
    /// From the client's send to the reply read, µs.
    pub client_us: Summary,
    /// The daemon's `latency_us` (arrival at the socket to completion).
    pub daemon_us: Summary,
    /// From the client's send (its write returned) to the request's first
    /// kernel in the device queue, both on CLOCK_MONOTONIC: counts the time
    /// the request waited in the socket to be read.
    pub send_to_first_kernel_us: Summary,
    /// Outputs the daemon did not verify as equal to an unpreempted run.
    pub not_verified: usize,
    pub preempted_tasks: usize,
    pub seconds: f64,
    /// The first few failures.
    pub errors: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Summary {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

fn summary(v: &[f64]) -> Summary {
    if v.is_empty() {
        return Summary::default();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| s[(((s.len() as f64) * p).ceil() as usize).clamp(1, s.len()) - 1];
    Summary {
        mean: s.iter().sum::<f64>() / s.len() as f64,
        p50: q(0.50),
        p99: q(0.99),
        max: s[s.len() - 1],
    }
}

/// The closed-loop RT client: `n` blocking inferences one after another,
/// each waited for (at most `REPLY_TIMEOUT`); three unanswered in a row end
/// the phase (a hung daemon).
fn rt_phase(
    c: &mut Client,
    stream: u64,
    model: &str,
    n: usize,
    gap: Duration,
    deadline: Instant,
    stop: Option<&AtomicBool>,
) -> RtPhase {
    let mut p = RtPhase {
        requests: n,
        ..Default::default()
    };
    let (mut cl, mut dm) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut cp = Vec::with_capacity(n);
    let t0 = Instant::now();
    let mut timeouts_in_row = 0;
    for _ in 0..n {
        if Instant::now() >= deadline || stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            p.errors.push("stopped: time limit or daemon gone".into());
            break;
        }
        let sent = Instant::now();
        let body = RequestBody::Infer {
            stream,
            model: model.to_string(),
            wait: true,
            qos_ms: None,
        };
        let r = c
            .send(body)
            .and_then(|id| load::wait_for(c, id, REPLY_TIMEOUT));
        let us = sent.elapsed().as_secs_f64() * 1e6;
        match r {
            Ok(ServerMessage::Reply {
                result: Reply::InferDone(t),
                ..
            }) => {
                timeouts_in_row = 0;
                p.completed += 1;
                cl.push(us);
                dm.push(t.latency_us);
                if let Some(fk) = t.first_kernel_monotonic_ns {
                    cp.push(fk.saturating_sub(c.last_send_monotonic_ns()) as f64 / 1e3);
                }
                if t.outputs_verified == Some(false) {
                    p.not_verified += 1;
                }
                if t.preemptions > 0 {
                    p.preempted_tasks += 1;
                }
            }
            other => {
                p.failed += 1;
                let to = matches!(other, Err(ClientError::Timeout));
                let closed = matches!(other, Err(ClientError::Closed));
                let msg = match other {
                    Ok(ServerMessage::Error { code, message, .. }) => format!("{code}: {message}"),
                    Ok(m) => format!("unexpected answer {m:?}"),
                    Err(e) => e.to_string(),
                };
                if p.errors.len() < 5 {
                    p.errors.push(msg);
                }
                timeouts_in_row = if to { timeouts_in_row + 1 } else { 0 };
                if timeouts_in_row >= 3 || closed {
                    p.errors
                        .push("the daemon stopped answering the RT client".into());
                    break;
                }
            }
        }
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    p.seconds = t0.elapsed().as_secs_f64();
    p.client_us = summary(&cl);
    p.daemon_us = summary(&dm);
    p.send_to_first_kernel_us = summary(&cp);
    p
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

/// One load round: what the RT client saw beside the connections, the
/// daemon's peak, and its state once every connection closed.
#[derive(Debug, Serialize)]
pub struct Round {
    pub connections_open_at_peak: Option<usize>,
    pub loaded: RtPhase,
    pub peak: Peak,
    pub after: Option<daemon::ProcSample>,
    pub seconds_to_settle: f64,
    pub threads_joined: bool,
    pub loadavg: String,
    pub benign: Tally,
    pub oversized: Tally,
    pub slow: Tally,
    pub killed: Tally,
    pub garbage: Tally,
}

/// Opens the connections, runs the RT client beside them, closes them,
/// and waits for the daemon to release them.
#[allow(clippy::too_many_arguments)]
fn load_round(
    a: &HostileArgs,
    round: usize,
    socket: &std::path::Path,
    pid: u32,
    admin: &mut Client,
    rt: &mut Client,
    stream: u64,
    max_frame: usize,
    kinds: [usize; 4],
    before_fds: u64,
    deadline: Instant,
    problems: &mut Vec<String>,
) -> Result<Round> {
    let gap = Duration::from_secs_f64(a.rt_gap_ms.max(0.0) / 1e3);
    let benign_n = a.connections - kinds.iter().sum::<usize>();
    let d_socket = socket;
    let sh = Arc::new(Shared {
        socket: d_socket.to_path_buf(),
        cfg: LoadCfg {
            be_every: a.be_every,
            be_infers: a.be_infers,
            be_model: a.be_model.clone(),
            oversized_period: Duration::from_millis(a.oversized_period_ms),
            slow_byte: Duration::from_millis(a.slow_byte_ms),
            garbage_period: Duration::from_millis(a.garbage_period_ms),
            kill_after: (
                a.kill_after_ms[0],
                a.kill_after_ms[1].max(a.kill_after_ms[0] + 1),
            ),
        },
        opened: AtomicUsize::new(0),
        go: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        deadline,
    });
    let peak = Arc::new(Mutex::new(Peak::default()));
    let monitor = {
        let (sh, peak) = (Arc::clone(&sh), Arc::clone(&peak));
        let cap = a.rss_cap_mib * 1024;
        std::thread::spawn(move || {
            while !sh.stopped() {
                let s = daemon::sample(pid);
                let mut p = peak.lock().expect("monitor lock");
                match s {
                    None => {
                        p.problem = Some("the daemon exited during the load".into());
                        sh.stop.store(true, Ordering::Release);
                    }
                    Some(s) => {
                        p.samples += 1;
                        p.max_rss_kib = p.max_rss_kib.max(s.rss_kib);
                        p.max_fds = p.max_fds.max(s.fds);
                        p.max_threads = p.max_threads.max(s.threads);
                        if s.rss_kib > cap {
                            p.problem = Some(format!(
                                "the daemon's RSS reached {} MiB (cap {} MiB): load stopped",
                                s.rss_kib / 1024,
                                cap / 1024
                            ));
                            sh.stop.store(true, Ordering::Release);
                        }
                    }
                }
                drop(p);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    progress(format!(
        "round {round}: opening {} connections: {benign_n} benign, hostile {} oversized names, {} slow senders, {} killed mid-frame, {} garbage",
        a.connections, kinds[0], kinds[1], kinds[2], kinds[3]
    ));
    let mut handles: Vec<(&str, std::thread::JoinHandle<Tally>)> = Vec::new();
    let benign_threads = 4.min(benign_n.max(1));
    for k in 0..benign_threads {
        let ids: Vec<usize> = (0..benign_n).filter(|i| i % benign_threads == k).collect();
        let sh = Arc::clone(&sh);
        handles.push(("benign", std::thread::spawn(move || load::benign(sh, ids))));
    }
    {
        let sh2 = Arc::clone(&sh);
        let n = kinds[0];
        handles.push((
            "oversized",
            std::thread::spawn(move || load::oversized(sh2, n, max_frame)),
        ));
        let sh2 = Arc::clone(&sh);
        let n = kinds[1];
        handles.push(("slow", std::thread::spawn(move || load::slow(sh2, n))));
        let sh2 = Arc::clone(&sh);
        let n = kinds[2];
        let exe = std::env::current_exe()?;
        handles.push((
            "killed",
            std::thread::spawn(move || load::killer(sh2, n, exe)),
        ));
        let sh2 = Arc::clone(&sh);
        let n = kinds[3];
        handles.push((
            "garbage",
            std::thread::spawn(move || load::garbage_senders(sh2, n)),
        ));
    }
    let open_deadline = Instant::now() + Duration::from_secs(120);
    let mut last = Instant::now();
    while sh.opened.load(Ordering::Acquire) < a.connections
        && Instant::now() < open_deadline
        && !sh.stopped()
    {
        if last.elapsed() > Duration::from_secs(2) {
            progress(format!(
                "  {} of {} connections opened",
                sh.opened.load(Ordering::Acquire),
                a.connections
            ));
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if sh.opened.load(Ordering::Acquire) < a.connections {
        problems.push(format!(
            "only {} of {} connections were attempted within 120 s",
            sh.opened.load(Ordering::Acquire),
            a.connections
        ));
    }
    let open_at_peak = match call(admin, RequestBody::Status, REPLY_TIMEOUT) {
        Ok(Reply::Status(s)) => Some(s.connections),
        _ => None,
    };
    progress(format!(
        "all connections attempted; the daemon counts {} open; load running",
        open_at_peak.map_or("?".into(), |c| c.to_string())
    ));
    sh.go.store(true, Ordering::Release);
    // The RT client's rate of requests is its own; hostile activity lasts
    // as long as its run.
    let loaded = rt_phase(
        rt,
        stream,
        &a.model,
        a.rt_requests,
        gap,
        deadline,
        Some(&sh.stop),
    );
    progress(format!(
        "loaded: mean {:.0} us, p99 {:.0} us; closing the connections",
        loaded.client_us.mean, loaded.client_us.p99
    ));
    sh.stop.store(true, Ordering::Release);
    let join_deadline = Instant::now() + Duration::from_secs(60);
    let mut tallies: std::collections::BTreeMap<&str, Tally> = Default::default();
    let mut threads_joined = true;
    for (name, h) in handles {
        while !h.is_finished() && Instant::now() < join_deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if h.is_finished() {
            match h.join() {
                Ok(t) => tallies.entry(name).or_default().merge(&t),
                Err(_) => problems.push(format!("a {name} thread panicked")),
            }
        } else {
            threads_joined = false;
            problems.push(format!(
                "a {name} thread did not finish within 60 s (blocked on the daemon?)"
            ));
        }
    }
    let _ = monitor.join();
    let peak = peak.lock().expect("monitor done").clone();
    if let Some(p) = &peak.problem {
        problems.push(p.clone());
    }

    // ---- after
    progress("waiting for the daemon to release the connections");
    std::thread::sleep(Duration::from_secs(1));
    let settle_start = Instant::now();
    let mut after = daemon::sample(pid);
    while let Some(s) = after {
        if s.fds <= before_fds + a.fd_tolerance || settle_start.elapsed() > Duration::from_secs(10)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        after = daemon::sample(pid);
    }
    let seconds_to_settle = 1.0 + settle_start.elapsed().as_secs_f64();
    match after {
        Some(s) => progress(format!(
            "after round {round}: RSS {} KiB, {} fds, {} threads",
            s.rss_kib, s.fds, s.threads
        )),
        None => problems.push(format!("round {round}: the daemon is gone after the load")),
    }
    let loadavg = loadavg();
    Ok(Round {
        connections_open_at_peak: open_at_peak,
        loaded,
        peak,
        after,
        seconds_to_settle,
        threads_joined,
        loadavg,
        benign: tallies.remove("benign").unwrap_or_default(),
        oversized: tallies.remove("oversized").unwrap_or_default(),
        slow: tallies.remove("slow").unwrap_or_default(),
        killed: tallies.remove("killed").unwrap_or_default(),
        garbage: tallies.remove("garbage").unwrap_or_default(),
    })
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
    progress(format!("warm-up: {} RT requests", a.warmup));
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

fn print_tally_table(r: &Round) {
    println!(
        "{:<10} {:>6} {:>6} {:>8} {:>11} {:>10} {:>8}  answers",
        "clients", "conns", "failed", "sent", "bytes", "unanswered", "closed"
    );
    for (name, t) in [
        ("benign", &r.benign),
        ("oversized", &r.oversized),
        ("slow", &r.slow),
        ("killed", &r.killed),
        ("garbage", &r.garbage),
    ] {
        let answers: Vec<String> = t
            .answers
            .iter()
            .filter(|(k, _)| !k.starts_with('['))
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "{:<10} {:>6} {:>6} {:>8} {:>11} {:>10} {:>8}  {}",
            name,
            t.connections,
            t.connect_failed,
            t.sent,
            t.bytes,
            t.unanswered,
            t.closed_by_daemon,
            answers.join(", ")
        );
        for (k, v) in &t.errors {
            println!("{:<10}   error x{v}: {k}", "");
        }
    }
    let g: Vec<String> = r
        .garbage
        .answers
        .iter()
        .filter(|(k, _)| k.starts_with('['))
        .map(|(k, v)| format!("{} x{v}", k.trim_matches(|c| c == '[' || c == ']')))
        .collect();
    if !g.is_empty() {
        println!("garbage answered: {}", g.join("; "));
    }
}

fn print_table(r: &Report) {
    println!("reef-bench hostile: {}", r.command);
    println!(
        "daemon pid {} ({}), max_connections {}, open-file limit {}; bench's open-file limit {} (hard {})",
        r.daemon_pid,
        if r.daemon_started_here {
            "started here"
        } else {
            "attached"
        },
        r.max_connections
            .map_or("as configured".into(), |m| m.to_string()),
        r.daemon_nofile.as_deref().unwrap_or("?"),
        r.bench_nofile.0,
        r.bench_nofile.1
    );
    println!(
        "connections per round: {} ({} benign; hostile: {} oversized names, {} slow senders, {} killed mid-frame, {} garbage); rounds: {}",
        r.connections,
        r.benign,
        r.hostile[0],
        r.hostile[1],
        r.hostile[2],
        r.hostile[3],
        r.rounds.len()
    );
    println!();
    println!("RT client (closed loop), latency from its send to the reply, us (daemon: arrival to completion; send->k0: the client's send to the first kernel in the device queue):");
    println!(
        "{:<12} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}  {:>11} {:>10}  {:>13} {:>12}  loadavg",
        "phase",
        "done",
        "failed",
        "mean",
        "p50",
        "p99",
        "max",
        "daemon mean",
        "daemon p99",
        "send->k0 p50",
        "send->k0 p99",
    );
    let mut rows: Vec<(String, &RtPhase, &str)> =
        vec![("quiet".into(), &r.quiet, r.loadavg_quiet.as_str())];
    for (i, rd) in r.rounds.iter().enumerate() {
        rows.push((
            format!("loaded #{}", i + 1),
            &rd.loaded,
            rd.loadavg.as_str(),
        ));
    }
    rows.push(("quiet again".into(), &r.quiet_after, ""));
    for (name, p, la) in rows {
        println!(
            "{:<12} {:>6} {:>6} {:>9.0} {:>9.0} {:>9.0} {:>9.0}  {:>11.0} {:>10.0}  {:>13.1} {:>12.1}  {}",
            name,
            p.completed,
            p.failed,
            p.client_us.mean,
            p.client_us.p50,
            p.client_us.p99,
            p.client_us.max,
            p.daemon_us.mean,
            p.daemon_us.p99,
            p.send_to_first_kernel_us.p50,
            p.send_to_first_kernel_us.p99,
            la
        );
    }
    println!(
        "loaded #1 / quiet: mean {:.3}, p99 {:.3} -> {} (daemon's own latency: mean {:.3}, p99 {:.3})",
        r.ratio_mean,
        r.ratio_p99,
        if r.within_5_percent {
            "within 5 %"
        } else {
            "NOT within 5 %"
        },
        r.daemon_ratio_mean,
        r.daemon_ratio_p99
    );
    println!();
    println!("daemon process (/proc/{}):", r.daemon_pid);
    println!(
        "{:<26} {:>12} {:>8} {:>8} {:>16}",
        "", "RSS KiB", "fds", "threads", "open (daemon)"
    );
    println!(
        "{:<26} {:>12} {:>8} {:>8}",
        "before the load", r.before.rss_kib, r.before.fds, r.before.threads
    );
    for (i, rd) in r.rounds.iter().enumerate() {
        println!(
            "{:<26} {:>12} {:>8} {:>8} {:>16}",
            format!("round {} peak", i + 1),
            rd.peak.max_rss_kib,
            rd.peak.max_fds,
            rd.peak.max_threads,
            rd.connections_open_at_peak
                .map_or("?".into(), |c| c.to_string())
        );
        match &rd.after {
            Some(s) => println!(
                "{:<26} {:>12} {:>8} {:>8}",
                format!("round {} after (+{:.1} s)", i + 1, rd.seconds_to_settle),
                s.rss_kib,
                s.fds,
                s.threads
            ),
            None => println!("round {} after: the daemon is gone", i + 1),
        }
    }
    println!(
        "leak check: fds {:+}, RSS {:+} KiB since before, {} KiB over the later rounds -> {}",
        r.fd_leak.unwrap_or(0),
        r.rss_growth_kib.unwrap_or(0),
        r.rss_growth_later_rounds_kib
            .map_or("-".into(), |g| format!("{g:+}")),
        if r.leak_ok { "ok" } else { "LEAK or gone" }
    );
    if let Some(n) = &r.non_reader {
        println!(
            "non-reader probe: {} frames, {} MiB sent, answers never read{}: RSS {} KiB before, {} KiB open (+{} MiB), {} KiB after close",
            n.frames,
            n.bytes >> 20,
            if n.backpressure { ", the daemon stopped reading (backpressure)" } else { ", all read by the daemon" },
            n.rss_before_kib,
            n.rss_open_kib,
            n.rss_open_kib.saturating_sub(n.rss_before_kib) / 1024,
            n.rss_closed_kib
        );
    }
    for (i, rd) in r.rounds.iter().enumerate() {
        println!();
        println!("round {}:", i + 1);
        print_tally_table(rd);
    }
    println!();
    match &r.hello_after {
        Ok(h) => println!("hello after the load: ok ({h})"),
        Err(e) => println!("hello after the load: FAILED: {e}"),
    }
    println!(
        "connections the daemon counts after the load: {}",
        r.daemon_connections_after
            .map_or("?".into(), |c| c.to_string())
    );
    if let Some(s) = &r.stats_delta {
        println!(
            "daemon counters over the load: requests {}, bad requests {}, tasks submitted {} / completed {} / failed {}, corrupted outputs {}, device errors {}",
            s.requests, s.bad_requests, s.tasks_submitted, s.tasks_completed, s.tasks_failed, s.corrupted_outputs, s.device_errors
        );
    }
    println!("daemon: {}", r.daemon_exit);
    for w in &r.daemon_log_warnings {
        println!("daemon log: {w}");
    }
    if r.problems.is_empty() {
        println!("no problems seen");
    }
    for p in &r.problems {
        println!("PROBLEM: {p}");
    }
}
