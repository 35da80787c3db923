//! What the Open Inference Protocol fronts add (issue 27, docs/kserve.md):
//! the same inference of one small model, over the native Unix socket, HTTP
//! with JSON tensors, HTTP with binary tensors both ways (`binary_data_size`, `binary_data_output`) and gRPC, side by side in
//! one run against one daemon, with 1 and 64 concurrent closed-loop
//! clients. Prints each path's round trip p50/p99 as the client sees it,
//! the daemon's own share (its `latency_us` stamp: arrival to completion),
//! what the front adds over the native socket, and requests per second.
//!
//! Run: `cargo bench -p reefd --bench kserve_overhead`
//! (REEF_BENCH_REQUESTS: requests per client at concurrency 1, default
//! 2000; at 64 each client sends a 64th of it. REEF_BENCH_DEVICE: default
//! cuda:0 on the simulated libcuda as an H100. REEF_BENCH_MODEL: a model directory to serve, default the
//! two-kernel test model of reef-libcuda-sim. REEF_BENCH_HOSTILE_ROUNDS:
//! rounds of the hostile phase, default 2. REEF_BENCH_REEFD: the reefd
//! binary to run, default the one cargo built beside the bench (for
//! side-by-side runs of two builds). REEF_BENCH_PHASES: which of the
//! phases `paths` (each path at 1 and 64 clients), `load` (RT beside BE
//! load and beside hostile connections, [`rt_under_load`]) and
//! `interleaved` (the interleaved RT comparison, [`rt_interleaved`]) and
//! `tritonclient` (where a tritonclient round trip goes,
//! [`tritonclient_split`]) run, comma-separated; default all four, in that
//! order.)

use reefd::client::Client;
use reefd::kserve::grpc::pb;
use reefd::metrics::summarize;
use reefd::protocol::Priority;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the round trips of the interleaved comparison go.
#[path = "kserve_overhead/steps.rs"]
mod steps;

/// The gRPC client over a bare HTTP/2 connection (the interleaved phase's
/// third path).
#[path = "kserve_overhead/direct.rs"]
mod direct;

/// A lean gRPC client on h2 directly (the `grpc-lean` path and the
/// interleaved phase's fourth).
#[path = "kserve_overhead/lean.rs"]
mod lean;

/// The interleaved RT comparison (`REEF_BENCH_PHASES=interleaved`).
#[path = "kserve_overhead/interleaved.rs"]
mod interleaved;
use interleaved::rt_interleaved;

fn main() -> anyhow::Result<()> {
    let per: usize = std::env::var("REEF_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    // cuda:0 on the simulated libcuda (H100): the two-kernel model has PTX
    // that libcuda-sim runs, so its answers carry outputs; on sim:* only a
    // model with a CPU build does (reef-compile's), and the fronts refuse
    // an answer without outputs (501).
    let device = std::env::var("REEF_BENCH_DEVICE").unwrap_or_else(|_| "cuda:0".into());
    let model_dir: PathBuf = std::env::var_os("REEF_BENCH_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../libcuda-sim/models/two-kernel")
        });
    let daemon = Daemon::start(&device)?;
    let mut admin = Client::connect(&daemon.socket)?;
    let info = admin.load_model(
        model_dir.file_name().unwrap().to_str().unwrap(),
        Some(&model_dir),
    )?;
    let model = info.name.clone();
    anyhow::ensure!(
        info.inputs.len() == 1 && info.inputs[0].dtype == "float32",
        "the bench sends one float32 input; model {} declares {:?}",
        info.name,
        info.inputs
    );
    let x = &info.inputs[0];
    let elems: u64 = x.shape.iter().product();
    // The values do not matter to the paths measured: 0.5 everywhere.
    INPUT
        .set(Input {
            name: x.name.clone(),
            shape: x.shape.clone(),
            bytes: (0..elems).flat_map(|_| 0.5f32.to_le_bytes()).collect(),
        })
        .ok();
    println!(
        "reefd on {device}, model {model} ({} kernels), policy reef, best-effort requests; {} cores",
        info.kernels,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let asked = std::env::var("REEF_BENCH_PHASES").ok();
    let phases = asked.clone().unwrap_or_else(|| PHASES.join(","));
    let mut phases: Vec<&str> = phases.split(',').map(str::trim).collect();
    if let Some(bad) = phases.iter().find(|p| !PHASES.contains(p)) {
        anyhow::bail!("REEF_BENCH_PHASES: unknown phase {bad:?}; the phases are {PHASES:?}");
    }
    // Checked before any phase runs: the tritonclient phase needs the
    // project's .venv. Left out of the default phases with a note when it
    // is missing; asked for by name, its absence is an error.
    if phases.contains(&"tritonclient") && !venv_python().is_file() {
        let why = format!(
            "the tritonclient phase needs {}: run scripts/setup.sh (it installs tritonclient there)",
            venv_python().display()
        );
        anyhow::ensure!(
            asked.is_none(),
            "{why}, or leave the phase out of REEF_BENCH_PHASES"
        );
        println!("(tritonclient phase left out: {why})");
        phases.retain(|p| *p != "tritonclient");
    }
    if phases.contains(&"paths") {
        paths(&daemon, &model, per)?;
    }
    if phases.contains(&"load") {
        rt_under_load(&daemon, &model, per.min(1000))?;
    }
    if phases.contains(&"interleaved") {
        rt_interleaved(&daemon, &model, per)?;
    }
    if phases.contains(&"tritonclient") {
        tritonclient_split(&daemon, &model, per)?;
    }
    Ok(())
}

/// The bench's phases, in the order they run (REEF_BENCH_PHASES).
const PHASES: [&str; 4] = ["paths", "load", "interleaved", "tritonclient"];

/// The project's Python, where scripts/setup.sh installs tritonclient.
fn venv_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

/// Where the round trip of Triton's own Python client goes, against the
/// daemon's stamps (issue 27: "the wall time a tritonclient round trip
/// spends in reefd against the time in the client library"):
/// `kserve_overhead/tritonclient_split.py` in the project's `.venv`
/// sends RT requests natively (reef_client), over gRPC and over HTTP
/// (tritonclient, `priority=1`) in a rotating order, beside 4 closed-loop
/// native BE clients, and prints its table.
fn tritonclient_split(d: &Daemon, model: &str, rounds: usize) -> anyhow::Result<()> {
    let py = venv_python();
    let rounds = rounds.min(1000);
    println!();
    println!(
        "tritonclient's round trip under BE load: {rounds} rounds (native reef_client, tritonclient gRPC and HTTP binary, priority=1), 4 native BE clients; python and Triton's client in {}",
        py.display()
    );
    let (out, be) = beside_be_load(d, model, || {
        Command::new(&py)
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("benches/kserve_overhead/tritonclient_split.py"),
            )
            .arg(&d.socket)
            .args([&d.grpc, &d.http, model, &rounds.to_string()])
            .stderr(Stdio::inherit())
            .output()
    })?;
    let out = out?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    anyhow::ensure!(
        out.status.success(),
        "tritonclient_split.py failed ({})",
        out.status
    );
    println!("  ({be} best-effort requests served beside them)");
    Ok(())
}

/// Each path at 1 and 64 closed-loop clients.
fn paths(daemon: &Daemon, model: &str, per: usize) -> anyhow::Result<()> {
    println!(
        "{:<12} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>9}",
        "path", "clients", "p50 us", "p99 us", "reefd p50", "added p50", "added p99", "req/s"
    );
    let paths = ["native", "http-json", "http-binary", "grpc", "grpc-lean"];
    for clients in [1usize, 64] {
        let n = (per / clients).max(10);
        let mut native_p = (0.0, 0.0);
        for path in paths {
            // The lean client is one connection and one thread per client:
            // at 64 it would measure 64 runtimes on 2 cores, not the
            // protocol (tonic's 64 clients share one connection).
            if path == "grpc-lean" && clients > 1 {
                continue;
            }
            let r = run(daemon, path, model, clients, n)?;
            let rtt = summarize(r.rtt.iter().copied());
            let own = summarize(r.own.iter().copied());
            if path == "native" {
                native_p = (rtt.p50_us, rtt.p99_us);
            }
            println!(
                "{:<12} {:>7} {:>9.1} {:>9.1} {:>11.1} {:>11.1} {:>11.1} {:>9.0}",
                path,
                clients,
                rtt.p50_us,
                rtt.p99_us,
                own.p50_us,
                rtt.p50_us - native_p.0,
                rtt.p99_us - native_p.1,
                r.rtt.len() as f64 / r.wall.as_secs_f64()
            );
        }
    }
    println!("added: the path's round trip less the native socket's, same model, same run");
    Ok(())
}

/// A gRPC inference request of the bench's input at `priority`.
fn grpc_request(model: &str, priority: i64) -> pb::ModelInferRequest {
    let x = input();
    let mut req = pb::ModelInferRequest {
        model_name: model.to_string(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: x.name.clone(),
            datatype: "FP32".into(),
            shape: x.shape.iter().map(|&d| d as i64).collect(),
            ..Default::default()
        }],
        raw_input_contents: vec![x.bytes.clone()],
        ..Default::default()
    };
    req.parameters.insert(
        "priority".into(),
        pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::Int64Param(priority)),
        },
    );
    req
}

/// [`grpc_request`] at `priority=1` asking for the front's stamps in the
/// answer (`reef_timeline`: six numbers; the native answers always carry
/// theirs).
fn grpc_request_rt_stamped(model: &str) -> pb::ModelInferRequest {
    let mut req = grpc_request(model, 1);
    req.parameters.insert(
        "reef_timeline".into(),
        pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(true)),
        },
    );
    req
}

/// The daemon's own stamp of an answer (`reef_latency_us`).
fn reef_latency(r: &pb::ModelInferResponse) -> f64 {
    match r
        .parameters
        .get("reef_latency_us")
        .and_then(|p| p.parameter_choice.clone())
    {
        Some(pb::infer_parameter::ParameterChoice::DoubleParam(x)) => x,
        _ => f64::NAN,
    }
}

/// Runs `f` beside four closed-loop native BE clients of `model` (started
/// 200 ms before it, stopped after it), and returns what it returned with
/// the BE requests they were served.
fn beside_be_load<T>(d: &Daemon, model: &str, f: impl FnOnce() -> T) -> anyhow::Result<(T, u64)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let load: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<u64> {
                    let mut c = Client::connect(&d.socket)?;
                    let st = c.register(Priority::Be, Some("load"))?;
                    let mut k = 0;
                    while !stop.load(Ordering::Relaxed) {
                        c.infer(st.stream, model)?;
                        k += 1;
                    }
                    Ok(k)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let r = f();
        stop.store(true, Ordering::Relaxed);
        let be = load
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<anyhow::Result<u64>>()?;
        Ok((r, be))
    })
}

/// Real-time requests beside loads (issue 27, "Must show": `priority=1`
/// served as RT under BE load within 5 % of the same requests over the
/// native socket; RT latency beside 1000 open connections and a client
/// sending a byte a second within 5 % of it without them). One closed-loop
/// RT client per phase, phases in one run against one daemon:
/// - alone: native RT, nothing else running;
/// - BE load: native RT, then gRPC `priority=1`, beside 4 closed-loop
///   native BE clients;
/// - hostile: gRPC `priority=1` beside 1000 idle connections (500 on each
///   front) and two slow senders (one byte a second, HTTP and gRPC), then
///   the same without them.
///
/// Prints mean and p99 of the client's round trip and of the daemon's own
/// stamp, their ratios to the phase compared with, and the daemon's
/// descriptors and RSS before and after the hostile load.
fn rt_under_load(d: &Daemon, model: &str, n: usize) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    println!();
    println!(
        "RT beside loads ({n} requests per phase, load average {})",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );
    println!(
        "{:<28} {:>9} {:>9} {:>11} {:>11}",
        "phase", "mean us", "p99 us", "reefd mean", "reefd p99"
    );
    let show = |name: &str, (rtt, own): &(Vec<f64>, Vec<f64>)| {
        let (a, b) = (
            summarize(rtt.iter().copied()),
            summarize(own.iter().copied()),
        );
        println!(
            "{:<28} {:>9.1} {:>9.1} {:>11.1} {:>11.1}",
            name, a.mean_us, a.p99_us, b.mean_us, b.p99_us
        );
        (a, b)
    };
    let grpc_rt = |n: usize| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let mut r = rt.block_on(grpc_clients_at(&d.grpc, model, 1, n, 1));
        r.pop().unwrap_or_else(|| Err(anyhow::anyhow!("no client")))
    };
    let alone = show(
        "native RT alone",
        &native_client_at(&d.socket, model, n, Priority::Rt)?,
    );
    let ((a, b), be) = beside_be_load(d, model, || {
        (
            native_client_at(&d.socket, model, n, Priority::Rt),
            grpc_rt(n),
        )
    })?;
    println!("  (BE load: {be} best-effort requests served during the two phases)");
    let (native_be, grpc_be) = (a?, b?);
    let nb = show("native RT, BE load", &native_be);
    let gb = show("gRPC priority=1, BE load", &grpc_be);
    println!(
        "  gRPC/native under BE load: mean {:.3}, p99 {:.3} (client); reefd's own {:.3}; native under load/alone {:.3}",
        gb.0.mean_us / nb.0.mean_us,
        gb.0.p99_us / nb.0.p99_us,
        gb.1.mean_us / nb.1.mean_us,
        nb.0.mean_us / alone.0.mean_us
    );
    // Hostile: idle connections and slow senders, then the same without;
    // twice, so memory the first round left is told apart from a leak
    // (a leak grows again in the second).
    let rounds: usize = std::env::var("REEF_BENCH_HOSTILE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for round in 1..=rounds {
        let (fd0, rss0) = (fds(d.child.id()), rss_kb(d.child.id()));
        let mut idle = Vec::new();
        for i in 0..1000 {
            idle.push(TcpStream::connect(if i % 2 == 0 {
                &d.http
            } else {
                &d.grpc
            })?);
        }
        let stop = AtomicBool::new(false);
        let hostile = std::thread::scope(|s| {
            for (addr, opening) in [
                (
                    &d.http,
                    b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\n".to_vec(),
                ),
                (&d.grpc, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()),
            ] {
                let stop = &stop;
                s.spawn(move || {
                    // A byte a second, reconnecting whenever cut off.
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut c) = TcpStream::connect(addr) else {
                            return;
                        };
                        for b in opening.iter().cycle() {
                            if stop.load(Ordering::Relaxed) || c.write_all(&[*b]).is_err() {
                                break;
                            }
                            std::thread::sleep(Duration::from_secs(1));
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(500));
            let r = grpc_rt(n);
            stop.store(true, Ordering::Relaxed);
            r
        })?;
        let (fd1, rss1) = (fds(d.child.id()), rss_kb(d.child.id()));
        drop(idle);
        std::thread::sleep(Duration::from_secs(1));
        let quiet = grpc_rt(n)?;
        let (fd2, rss2) = (fds(d.child.id()), rss_kb(d.child.id()));
        let h = show(&format!("gRPC RT, 1000 conns + slow #{round}"), &hostile);
        let q = show(&format!("gRPC RT, without them #{round}"), &quiet);
        println!(
            "  hostile/without: mean {:.3}, p99 {:.3} (client); reefd's own mean {:.3}",
            h.0.mean_us / q.0.mean_us,
            h.0.p99_us / q.0.p99_us,
            h.1.mean_us / q.1.mean_us
        );
        println!(
            "  reefd descriptors {fd0} before, {fd1} under the load, {fd2} after; RSS {rss0} / {rss1} / {rss2} kB"
        );
    }
    Ok(())
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The model's one input: its name, shape and bytes (every request sends
/// the same).
struct Input {
    name: String,
    shape: Vec<u64>,
    bytes: Vec<u8>,
}

static INPUT: std::sync::OnceLock<Input> = std::sync::OnceLock::new();

fn input() -> &'static Input {
    INPUT.get().expect("set in main")
}

impl Input {
    /// The input as the native client sends it, inline in the request.
    fn inline(&self) -> [reefd::client::Input<'_>; 1] {
        [reefd::client::Input::Inline {
            name: &self.name,
            dtype: "float32",
            shape: &self.shape,
            data: &self.bytes,
        }]
    }
}

struct Daemon {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    socket: PathBuf,
    http: String,
    grpc: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two free ports, picked while both are held (two probes one after the
/// other could be handed the same ephemeral port).
fn free_ports() -> [u16; 2] {
    let l = [(); 2].map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    l.map(|l| l.local_addr().unwrap().port())
}

impl Daemon {
    fn start(device: &str) -> anyhow::Result<Daemon> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("reefd.sock");
        let [http, grpc] = free_ports().map(|p| format!("127.0.0.1:{p}"));
        let cfg = dir.path().join("reefd.toml");
        let cuda = if device.starts_with("cuda:") {
            // The simulated libcuda built beside this bench.
            let lib = std::env::current_exe()?
                .parent()
                .map(|d| d.join("libreef_libcuda_sim.so"))
                .filter(|l| l.is_file())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "libreef_libcuda_sim.so missing beside the bench: build reef-libcuda-sim"
                    )
                })?;
            format!("cuda_library = {lib:?}\n")
        } else {
            String::new()
        };
        // A 10-minute header timeout: the hostile phase's 1000 idle
        // connections and slow senders stay for the whole phase.
        std::fs::write(
            &cfg,
            format!(
                "[daemon]\nsocket = {socket:?}\npid_file = {:?}\nlog_level = \"warn\"\n[device]\ndevice = {device:?}\n{cuda}[metrics]\nenabled = false\n[kserve]\nhttp = {http:?}\ngrpc = {grpc:?}\nheader_read_timeout_ms = 600000\n",
                dir.path().join("reefd.pid")
            ),
        )?;
        // REEF_BENCH_REEFD: another build of reefd to run, for side-by-side
        // runs of two daemons under one bench binary.
        let reefd = std::env::var_os("REEF_BENCH_REEFD")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_reefd")));
        let child = Command::new(reefd)
            .env(
                "REEF_LIBCUDA_SIM_DEVICE",
                std::env::var("REEF_LIBCUDA_SIM_DEVICE").unwrap_or_else(|_| "h100".into()),
            )
            .args(["start", "--foreground", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if Client::connect(&socket)
                .and_then(|mut c| c.status())
                .is_ok()
            {
                return Ok(Daemon {
                    child,
                    _dir: dir,
                    socket,
                    http,
                    grpc,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::bail!("reefd did not come up")
    }
}

struct Run {
    /// Client round trips, us.
    rtt: Vec<f64>,
    /// The daemon's own latency stamps, us.
    own: Vec<f64>,
    wall: Duration,
}

fn run(d: &Daemon, path: &str, model: &str, clients: usize, n: usize) -> anyhow::Result<Run> {
    let start = Instant::now();
    let results: Vec<anyhow::Result<(Vec<f64>, Vec<f64>)>> = if path == "grpc" {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        rt.block_on(grpc_clients(&d.grpc, model, clients, n))
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..clients)
                .map(|_| {
                    s.spawn(|| -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
                        match path {
                            "native" => native_client(&d.socket, model, n),
                            "http-json" => http_client(&d.http, model, n, false),
                            "grpc-lean" => lean_client(&d.grpc, model, n),
                            _ => http_client(&d.http, model, n, true),
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let wall = start.elapsed();
    let mut rtt = Vec::new();
    let mut own = Vec::new();
    for r in results {
        let (a, b) = r?;
        rtt.extend(a);
        own.extend(b);
    }
    Ok(Run { rtt, own, wall })
}

/// One closed-loop client of the lean gRPC client ([`lean::Lean`]) on a
/// connection of its own, BE requests.
fn lean_client(addr: &str, model: &str, n: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut c = lean::Lean::connect(addr)?;
    let (mut rtt, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let req = grpc_request(model, 10);
        let t = Instant::now();
        let r = c.infer(&req)?;
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
        own.push(reef_latency(&r));
    }
    Ok((rtt, own))
}

fn native_client(socket: &Path, model: &str, n: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    native_client_at(socket, model, n, Priority::Be)
}

fn native_client_at(
    socket: &Path,
    model: &str,
    n: usize,
    priority: Priority,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut c = Client::connect(socket)?;
    let s = c.register(priority, Some("bench"))?;
    let inputs = input().inline();
    let (mut rtt, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        let r = c.infer_tensors(s.stream, model, &inputs, &[])?;
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
        own.push(r.latency_us);
    }
    Ok((rtt, own))
}

/// A keep-alive HTTP/1.1 client over one connection.
fn http_client(
    addr: &str,
    model: &str,
    n: usize,
    binary: bool,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    let x = input();
    let shape = serde_json::to_string(&x.shape)?;
    let (header, payload) = if binary {
        (
            format!(
                r#"{{"inputs":[{{"name":{:?},"datatype":"FP32","shape":{shape},"parameters":{{"binary_data_size":{}}}}}],"parameters":{{"priority":10,"binary_data_output":true}}}}"#,
                x.name,
                x.bytes.len()
            ),
            x.bytes.as_slice(),
        )
    } else {
        let values: Vec<f32> = x
            .bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (
            format!(
                r#"{{"inputs":[{{"name":{:?},"datatype":"FP32","shape":{shape},"data":{}}}],"parameters":{{"priority":10}}}}"#,
                x.name,
                serde_json::to_string(&values)?
            ),
            &[][..],
        )
    };
    let mut req = format!(
        "POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        header.len() + payload.len()
    );
    if binary {
        req.push_str(&format!(
            "Inference-Header-Content-Length: {}\r\n",
            header.len()
        ));
    }
    req.push_str("\r\n");
    let mut msg = req.into_bytes();
    msg.extend_from_slice(header.as_bytes());
    msg.extend_from_slice(payload);
    let (mut rtt, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut line = String::new();
    for _ in 0..n {
        let t = Instant::now();
        w.write_all(&msg)?;
        let mut len = 0usize;
        // With binary outputs the body is the JSON header, then the data.
        let mut json_len = None;
        let mut status = 0u16;
        loop {
            line.clear();
            r.read_line(&mut line)?;
            if status == 0 {
                status = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
            }
            let l = line.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse()?;
            }
            if let Some(v) = l.strip_prefix("inference-header-content-length:") {
                json_len = Some(v.trim().parse::<usize>()?);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut b = vec![0u8; len];
        r.read_exact(&mut b)?;
        rtt.push(t.elapsed().as_secs_f64() * 1e6);
        anyhow::ensure!(
            status == 200,
            "HTTP {status}: {}",
            String::from_utf8_lossy(&b)
        );
        let v: serde_json::Value = serde_json::from_slice(&b[..json_len.unwrap_or(len).min(len)])?;
        anyhow::ensure!(
            binary == json_len.is_some(),
            "binary outputs asked: {binary}, answered: {}",
            json_len.is_some()
        );
        own.push(
            v["parameters"]["reef_latency_us"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    Ok((rtt, own))
}

async fn grpc_clients(
    addr: &str,
    model: &str,
    clients: usize,
    n: usize,
) -> Vec<anyhow::Result<(Vec<f64>, Vec<f64>)>> {
    grpc_clients_at(addr, model, clients, n, 10).await
}

/// `clients` closed-loop gRPC clients at request `priority` (1: RT).
async fn grpc_clients_at(
    addr: &str,
    model: &str,
    clients: usize,
    n: usize,
    priority: i64,
) -> Vec<anyhow::Result<(Vec<f64>, Vec<f64>)>> {
    use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
    // One channel (one HTTP/2 connection) shared by the clients, as
    // tritonclient's gRPC client does.
    let ch = match tonic::transport::Endpoint::from_shared(format!("http://{addr}")) {
        Ok(e) => match e.tcp_nodelay(true).connect().await {
            Ok(c) => c,
            Err(e) => return vec![Err(e.into())],
        },
        Err(e) => return vec![Err(e.into())],
    };
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let mut c = GrpcInferenceServiceClient::new(ch.clone());
        let model = model.to_string();
        set.spawn(async move {
            let (mut rtt, mut own) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for _ in 0..n {
                let req = grpc_request(&model, priority);
                let t = Instant::now();
                let r = c.model_infer(req).await?.into_inner();
                rtt.push(t.elapsed().as_secs_f64() * 1e6);
                own.push(reef_latency(&r));
            }
            Ok::<_, anyhow::Error>((rtt, own))
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.unwrap_or_else(|e| Err(e.into())));
    }
    out
}
