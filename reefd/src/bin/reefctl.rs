//! `reefctl`: control and use a running reefd through its client API
//! (REEF §3.1, Fig. 5: the RPC interface of the online part).

use clap::{Parser, Subcommand};
use reefd::client::Client;
use reefd::metrics::summarize;
use reefd::protocol::{PreemptTarget, Priority, StreamInfo};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "reefctl", version, about = "Control a running reefd")]
struct Cli {
    /// The daemon's socket.
    #[arg(long, env = "REEF_SOCKET", default_value = reefd::config::DEFAULT_SOCKET, global = true)]
    socket: PathBuf,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Daemon status: device, engine, policy, counts.
    Status,
    /// Load, list or unload models.
    Models {
        #[command(subcommand)]
        cmd: ModelsCmd,
    },
    /// Run inferences and print their latencies.
    Infer {
        model: String,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Priority level 0 (highest) .. 9; `rt` = 0, `be` = 9.
        #[arg(long, default_value = "rt")]
        priority: Priority,
        /// QoS target of each query, ms, for a latency-critical service
        /// under `aker`, `baymax` or `tacker` (default: 3 x the model's
        /// predicted stand-alone latency).
        #[arg(long, value_parser = positive_ms)]
        qos_ms: Option<f64>,
        /// The input tensors: a numpy .npz archive whose arrays are keyed
        /// by the model's input names (`reefctl models show MODEL`); sent
        /// inline, or through shared memory with --shm.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Where to write the outputs (a .npz keyed by the model's output
        /// names; the last inference's when --count is more than 1). Needs
        /// --inputs.
        #[arg(long, requires = "inputs")]
        outputs: Option<PathBuf>,
        /// Pass the tensors through a shared-memory region (a sealed memfd
        /// registered with the daemon) instead of inline.
        #[arg(long, requires = "inputs")]
        shm: bool,
    },
    /// Preempt one stream, or every best-effort stream you may preempt.
    Preempt {
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        stream: Option<u64>,
        #[arg(long)]
        all: bool,
    },
    /// Resume streams stopped by `preempt`.
    Resume {
        #[arg(long, conflicts_with = "all", required_unless_present = "all")]
        stream: Option<u64>,
        #[arg(long)]
        all: bool,
    },
    /// List the registered streams.
    Streams,
    /// List the inferences in flight.
    Tasks,
    /// Counters and latency summaries.
    Stats,
    /// Switch the scheduling policy (root or the daemon's user).
    Policy { name: String },
    /// A live view of streams and latencies (Ctrl-C to leave).
    Top {
        /// Refresh period in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many refreshes (default: run until interrupted).
        #[arg(long)]
        iterations: Option<u64>,
    },
}

#[derive(Subcommand)]
enum ModelsCmd {
    /// Load a model: a name in the daemon's models directory (`vgg`), or a
    /// path to a model directory or schedule file (`./models/vgg`), which
    /// registers it under its directory's name unless --name says otherwise.
    Load {
        /// A model name, or a path to a model directory or `.json` schedule.
        model: String,
        /// Register the model under this name (default: the name given, or
        /// the directory's name of a path).
        #[arg(long)]
        name: Option<String>,
        /// Load from this path and register it as MODEL (older form of
        /// `load PATH --name MODEL`).
        #[arg(long, conflicts_with = "name")]
        path: Option<PathBuf>,
        /// On a node of several devices (`--device sim:mi50x4`): load on
        /// this device (0-based) instead of where placement puts it.
        #[arg(long)]
        device_index: Option<usize>,
    },
    List,
    /// A loaded model's details, with its inputs and outputs (name,
    /// dtype, shape), as `infer --inputs` takes them.
    Show {
        name: String,
    },
    Unload {
        name: String,
    },
}

fn main() -> ExitCode {
    // Exit quietly when stdout is a closed pipe (`... --json | head`), as Unix
    // tools do, instead of panicking inside println!.
    // SAFETY: runs first in main, before any thread exists; SIG_DFL is always a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // REEF_PARSE_ONLY=1: stop once the command line parsed (exit 0; a parse
    // error has already exited 2). The docs check (docscheck/) runs every
    // command line the docs show this way.
    if std::env::var_os("REEF_PARSE_ONLY").is_some_and(|v| v == "1") {
        return ExitCode::SUCCESS;
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reefctl: error: {}", reefd::daemon::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

fn print_streams(streams: &[StreamInfo]) {
    println!(
        "{:>6} {:>4} {:>6} {:>8} {:>9} {:>6} {:>6} {:>9}  label",
        "stream", "prio", "uid", "pid", "in-flight", "hostq", "devq", "completed"
    );
    for s in streams {
        println!(
            "{:>6} {:>4} {:>6} {:>8} {:>9} {:>6} {:>6} {:>9}  {}",
            s.stream,
            s.priority,
            s.owner_uid,
            s.owner_pid.map_or("-".into(), |p| p.to_string()),
            s.tasks_in_flight,
            s.host_queue,
            s.device_queue,
            s.completed,
            s.label.as_deref().unwrap_or("")
        );
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut c = Client::connect(&cli.socket)?;
    match cli.cmd {
        Cmd::Status => {
            let s = c.status()?;
            if cli.json {
                return print_json(&s);
            }
            println!("reefd {} (pid {})", s.daemon_version, s.pid);
            println!("  device      {}", s.device);
            println!("  engine      {}", s.engine);
            println!("  policy      {}", s.policy);
            println!("  preemption  levels {:?}", s.preemption_levels);
            for n in &s.preemption_notes {
                println!("              {n}");
            }
            println!("  uptime      {:.1} s", s.uptime_s);
            println!(
                "  {} models, {} streams, {} tasks in flight, {} connections",
                s.models, s.streams, s.tasks_in_flight, s.connections
            );
            for m in &s.measuring {
                println!(
                    "  measuring   {} ({}/{} runs, FIKIT)",
                    m.task, m.runs_done, m.runs
                );
            }
            const GIB: f64 = (1u64 << 30) as f64;
            for d in &s.devices {
                println!(
                    "  device {} ({}): memory {:.2} GiB used, {:.2} GiB free of {:.2} GiB; policy {}; {} RT + {} BE streams, {} tasks in flight, {} declared tasks; models: {}",
                    d.index,
                    d.preset,
                    d.memory_used as f64 / GIB,
                    d.memory_total.saturating_sub(d.memory_used) as f64 / GIB,
                    d.memory_total as f64 / GIB,
                    d.policy,
                    d.rt_streams,
                    d.be_streams,
                    d.tasks,
                    d.declared_tasks,
                    if d.models.is_empty() { "-".to_string() } else { d.models.join(", ") }
                );
            }
        }
        Cmd::Models { cmd } => match cmd {
            ModelsCmd::Load {
                model,
                name,
                path,
                device_index,
            } => {
                let (name, path) = load_target(model, name, path);
                let m = c.load_model_on(&name, path.as_deref(), device_index)?;
                if let (Some(d), false) = (m.device, cli.json) {
                    println!("placed {} on device {d}", m.name);
                }
                if cli.json {
                    return print_json(&m);
                }
                println!(
                    "loaded {} ({} kernels, stand-alone {} us, idempotence metadata: {})",
                    m.name,
                    m.kernels,
                    m.standalone_us
                        .map_or("unknown".into(), |u| format!("{u:.0}")),
                    m.idempotence
                        .as_ref()
                        .map_or("none".into(), |p| p.display().to_string())
                );
            }
            ModelsCmd::List => {
                let ms = c.models()?;
                if cli.json {
                    return print_json(&ms);
                }
                println!(
                    "{:<16} {:>8} {:>14} {:>6}  path",
                    "model", "kernels", "standalone_us", "owner"
                );
                for m in ms {
                    println!(
                        "{:<16} {:>8} {:>14} {:>6}  {}",
                        m.name,
                        m.kernels,
                        m.standalone_us.map_or("-".into(), |u| format!("{u:.0}")),
                        m.owner_uid,
                        m.path.display()
                    );
                }
            }
            ModelsCmd::Show { name } => {
                let ms = c.models()?;
                let Some(m) = ms.into_iter().find(|m| m.name == name) else {
                    anyhow::bail!(
                        "model {name} is not loaded; load it with `reefctl models load {name}`"
                    );
                };
                if cli.json {
                    return print_json(&m);
                }
                println!(
                    "{} ({} kernels) from {}",
                    m.name,
                    m.kernels,
                    m.path.display()
                );
                if m.inputs.is_empty() && m.outputs.is_empty() {
                    println!("  takes no tensors (a measured schedule without code)");
                }
                for (what, ts) in [("input", &m.inputs), ("output", &m.outputs)] {
                    for t in ts {
                        println!("  {what:<6} {:?} {} {:?}", t.name, t.dtype, t.shape);
                    }
                }
            }
            ModelsCmd::Unload { name } => {
                c.unload_model(&name)?;
                if cli.json {
                    return print_json(&serde_json::json!({"unloaded": name}));
                }
                println!("unloaded {name}");
            }
        },
        Cmd::Infer {
            model,
            count,
            priority,
            qos_ms,
            inputs,
            outputs,
            shm,
        } => {
            let s = c.register(priority, Some("reefctl"))?;
            let tensors = match &inputs {
                Some(p) => Some(TensorInputs::prepare(&mut c, &model, p, shm)?),
                None => None,
            };
            let mut results = Vec::new();
            for _ in 0..count {
                let r = match &tensors {
                    Some(t) => t.infer(&mut c, s.stream, &model)?,
                    None => c.infer_qos(s.stream, &model, qos_ms)?,
                };
                if let (Some(t), Some(out)) = (&tensors, &outputs) {
                    t.write_outputs(&r, out)?;
                }
                if !cli.json {
                    println!(
                        "task {:>6}  latency {:>10.1} us  normalized {:>6}  control path {:>8} us  preemptions {}  outputs {}",
                        r.task,
                        r.latency_us,
                        r.normalized_latency.map_or("-".into(), |n| format!("{n:.3}")),
                        r.control_path_us.map_or("-".into(), |u| format!("{u:.1}")),
                        r.preemptions,
                        match r.outputs_verified {
                            Some(true) => "verified",
                            Some(false) => "CORRUPTED",
                            None => "untracked",
                        }
                    );
                }
                results.push(r);
            }
            if let Some(why) = results.last().and_then(|r| r.outputs_missing.as_ref()) {
                if !cli.json {
                    eprintln!("reefctl: note: no outputs: {why}");
                }
            }
            let sum = summarize(results.iter().map(|r| r.latency_us));
            if cli.json {
                return print_json(
                    &serde_json::json!({"stream": s.stream, "results": results, "latency": sum}),
                );
            }
            println!(
                "{} inferences of {model} ({priority}): mean {:.1} us, p50 {:.1} us, p99 {:.1} us",
                sum.count, sum.mean_us, sum.p50_us, sum.p99_us
            );
        }
        Cmd::Preempt { stream, all } => {
            let target = match (stream, all) {
                (Some(s), _) => PreemptTarget::Stream(s),
                _ => PreemptTarget::All,
            };
            let (streams, kernels) = c.preempt(target)?;
            if cli.json {
                return print_json(
                    &serde_json::json!({"streams": streams, "preempted_kernels": kernels}),
                );
            }
            println!("preempted streams {streams:?}: {kernels} kernels evicted or killed");
        }
        Cmd::Resume { stream, all } => {
            let target = match (stream, all) {
                (Some(s), _) => PreemptTarget::Stream(s),
                _ => PreemptTarget::All,
            };
            let streams = c.resume(target)?;
            if cli.json {
                return print_json(&serde_json::json!({"streams": streams}));
            }
            println!("resumed streams {streams:?}");
        }
        Cmd::Streams => {
            let ss = c.streams()?;
            if cli.json {
                return print_json(&ss);
            }
            print_streams(&ss);
        }
        Cmd::Tasks => {
            let ts = c.tasks()?;
            if cli.json {
                return print_json(&ts);
            }
            println!(
                "{:>6} {:>6} {:<12} {:>4} {:<9} {:>10} {:>9}",
                "task", "stream", "model", "prio", "state", "age_us", "kernel"
            );
            for t in ts {
                println!(
                    "{:>6} {:>6} {:<12} {:>4} {:<9} {:>10.0} {:>4}/{:<4}",
                    t.task,
                    t.stream,
                    t.model,
                    t.priority,
                    format!("{:?}", t.state).to_lowercase(),
                    t.age_us,
                    t.next_kernel,
                    t.kernels
                );
            }
        }
        Cmd::Stats => {
            let s = c.stats()?;
            if cli.json {
                return print_json(&s);
            }
            print_stats(&s);
        }
        Cmd::Policy { name } => {
            let p = c.set_policy(&name)?;
            if cli.json {
                return print_json(&serde_json::json!({"policy": p}));
            }
            println!("policy is now {p}");
        }
        Cmd::Top {
            interval_ms,
            iterations,
        } => {
            let mut n = 0u64;
            loop {
                let status = c.status()?;
                let streams = c.streams()?;
                let stats = c.stats()?;
                if cli.json {
                    println!(
                        "{}",
                        serde_json::json!({"status": status, "streams": streams, "stats": stats})
                    );
                } else {
                    // Clear the screen and home the cursor.
                    print!("\x1b[2J\x1b[H");
                    println!(
                        "reefd on {} — {} — policy {} — up {:.0} s — {} tasks in flight",
                        status.device,
                        status.engine,
                        status.policy,
                        status.uptime_s,
                        status.tasks_in_flight
                    );
                    println!();
                    print_streams(&streams);
                    println!();
                    print_stats(&stats);
                }
                n += 1;
                if iterations.is_some_and(|i| n >= i) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(interval_ms));
            }
        }
    }
    Ok(())
}

fn print_stats(s: &reefd::protocol::Stats) {
    println!(
        "requests {} (bad {}), tasks submitted {} completed {} failed {}, kernels launched {}",
        s.requests,
        s.bad_requests,
        s.tasks_submitted,
        s.tasks_completed,
        s.tasks_failed,
        s.kernels_launched
    );
    let pre: Vec<String> = s
        .preemptions
        .iter()
        .map(|(l, n)| format!("level {l}: {n}"))
        .collect();
    println!(
        "restores {}, outputs differing from an unpreempted run {}, device errors {}",
        s.restores, s.corrupted_outputs, s.device_errors
    );
    println!(
        "padded launches {}, best-effort blocks padded {}",
        s.padded_launches, s.be_blocks_padded
    );
    if let Some(p) = &s.placement {
        println!(
            "placement (MGB Alg.3): models placed {} refused {}, streams bound {}, tasks placed {} waited {} refused {}",
            p.models_placed, p.models_refused, p.streams_bound, p.tasks_placed, p.tasks_waited, p.tasks_refused
        );
    }
    println!(
        "preemptions: {}",
        if pre.is_empty() {
            "none".into()
        } else {
            pre.join(", ")
        }
    );
    for (name, l) in [
        ("RT latency", &s.rt_latency),
        ("BE latency", &s.be_latency),
        ("control path", &s.control_path),
    ] {
        println!(
            "{name:<13} n={:<7} mean {:>10.1} us  p50 {:>10.1} us  p99 {:>10.1} us  max {:>10.1} us",
            l.count, l.mean_us, l.p50_us, l.p99_us, l.max_us
        );
    }
    if let Some(n) = s.rt_normalized_mean {
        println!("RT normalized latency (mean): {n:.3}");
    }
    if let Some(a) = &s.aker {
        println!(
            "Aker manager: LC kernels alone {}, fused launches {} ({} BE blocks), BE launches in headroom {}, while idle {}, split rests {}; QoS met {}, missed {}",
            a.lc_launches, a.fused_launches, a.be_blocks_fused, a.be_direct_in_headroom,
            a.be_launches_idle, a.rest_launches, a.qos_met, a.qos_missed
        );
    }
    if let Some(f) = &s.fikit {
        println!(
            "FIKIT: gaps {} (<= epsilon {}), filled {}, fill kernels {}, early stops {}, overruns {} ({:.1} us)",
            f.gaps_seen, f.gaps_below_epsilon, f.gaps_filled, f.fill_kernels, f.early_stops, f.overruns, f.overrun_us
        );
        println!(
            "FIKIT measuring stage: {} runs measured, {} profiles built, {} missing or stale",
            f.measured_runs, f.profiles_built, f.profiles_missing_or_stale
        );
        for m in &f.measuring {
            println!("  measuring {}: {}/{} runs", m.task, m.runs_done, m.runs);
        }
    }
}

/// What `models load MODEL [--name N] [--path P]` asks the daemon for: a
/// name and an optional path. A MODEL that is a path is made absolute here,
/// since the daemon resolves paths from its own working directory.
fn load_target(
    model: String,
    name: Option<String>,
    path: Option<PathBuf>,
) -> (String, Option<PathBuf>) {
    let looks_like_path = model.contains('/') || model.starts_with('.');
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    match (name, path) {
        (_, Some(p)) => (model, Some(absolute(p))),
        (Some(n), None) => (n, Some(absolute(PathBuf::from(model)))),
        (None, None) if looks_like_path => {
            let p = absolute(PathBuf::from(&model));
            (p.display().to_string(), None)
        }
        (None, None) => (model, None),
    }
}

/// `--qos-ms`: a positive number of milliseconds.
fn positive_ms(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a positive number of milliseconds (e.g. --qos-ms 20)"
        )),
    }
}

/// The tensors of `reefctl infer --inputs`: the arrays of the archive,
/// sent inline or copied once into a registered region.
struct TensorInputs {
    arrays: Vec<reefd::npz::Array>,
    /// With --shm: the region and its id, inputs at the front, outputs
    /// after them.
    shm: Option<(reefd::client::ShmRegion, u64)>,
    /// With --shm: each output's (name, offset, bytes) in the region.
    out_places: Vec<(String, u64, u64)>,
}

impl TensorInputs {
    fn prepare(
        c: &mut Client,
        model: &str,
        path: &std::path::Path,
        shm: bool,
    ) -> anyhow::Result<Self> {
        let arrays = reefd::npz::read(path)?;
        if !shm {
            return Ok(TensorInputs {
                arrays,
                shm: None,
                out_places: Vec::new(),
            });
        }
        // One region: the inputs, then room for each output.
        let m = c
            .models()?
            .into_iter()
            .find(|m| m.name == model)
            .ok_or_else(|| anyhow::anyhow!("model {model} is not loaded"))?;
        let mut at: u64 = arrays.iter().map(|a| a.data.len() as u64).sum();
        let mut out_places = Vec::new();
        for o in &m.outputs {
            let b = o.bytes().unwrap_or(0);
            out_places.push((o.name.clone(), at, b));
            at += b;
        }
        let mut region = reefd::client::ShmRegion::new(at.max(1) as usize)?;
        let mut off = 0;
        for a in &arrays {
            region.as_mut_slice()[off..off + a.data.len()].copy_from_slice(&a.data);
            off += a.data.len();
        }
        let id = c.register_region(&region)?;
        Ok(TensorInputs {
            arrays,
            shm: Some((region, id)),
            out_places,
        })
    }

    fn infer(
        &self,
        c: &mut Client,
        stream: u64,
        model: &str,
    ) -> anyhow::Result<reefd::protocol::TaskResult> {
        use reefd::client::Input;
        let mut inputs = Vec::new();
        let mut offset = 0u64;
        for a in &self.arrays {
            inputs.push(match &self.shm {
                None => Input::Inline {
                    name: &a.name,
                    dtype: &a.dtype,
                    shape: &a.shape,
                    data: &a.data,
                },
                Some((_, region)) => {
                    let i = Input::Shm {
                        name: &a.name,
                        dtype: &a.dtype,
                        shape: &a.shape,
                        region: *region,
                        offset,
                        bytes: a.data.len() as u64,
                    };
                    offset += a.data.len() as u64;
                    i
                }
            });
        }
        let outs: Vec<reefd::protocol::OutputRef> = match &self.shm {
            None => Vec::new(),
            Some((_, region)) => self
                .out_places
                .iter()
                .map(|(name, offset, bytes)| reefd::protocol::OutputRef {
                    name: name.clone(),
                    region: *region,
                    offset: *offset,
                    bytes: *bytes,
                })
                .collect(),
        };
        Ok(c.infer_tensors(stream, model, &inputs, &outs)?)
    }

    fn write_outputs(
        &self,
        r: &reefd::protocol::TaskResult,
        path: &std::path::Path,
    ) -> anyhow::Result<()> {
        if let Some(why) = &r.outputs_missing {
            anyhow::bail!("the inference ran but returned no outputs: {why}");
        }
        let mut arrays = Vec::new();
        for o in &r.outputs {
            let data = match (o.region, &self.shm) {
                (Some(_), Some((region, _))) => region
                    .as_slice()
                    .get(o.offset as usize..(o.offset + o.bytes) as usize)
                    .map(<[u8]>::to_vec),
                _ => r.output_bytes(&o.name).map(<[u8]>::to_vec),
            };
            let Some(data) = data else {
                anyhow::bail!("output {} is missing from the answer", o.name);
            };
            arrays.push(reefd::npz::Array {
                name: o.name.clone(),
                dtype: o.dtype.clone(),
                shape: o.shape.clone(),
                data,
            });
        }
        reefd::npz::write(path, &arrays)
    }
}
