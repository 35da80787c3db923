//! `reefd start|stop|status`: configuration, device selection, the PID file,
//! detaching from the terminal, logging, and the runtime that serves REEF's
//! online part (§3.1, Fig. 5) on the selected device.

use crate::config::{tracing_level, Config};
use crate::device::{self, DeviceSpec};
use crate::engine::Engine;
use crate::runtime::{Runtime, RuntimeSettings};
use crate::server::{self, ServerOptions};
use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Options of `reefd start` after merging the command line into the config.
#[derive(Debug, Clone)]
pub struct StartOptions {
    pub config: Config,
    pub foreground: bool,
}

/// Builds the engine that serves on simulator `preset`: the scheduler core
/// (reef-sched) driving the block-level simulator (reef-sim).
/// A node of several devices (`mi50x4`, `mi50,gv100`) gets one engine per
/// device behind placement (engine/node.rs).
pub fn make_engine(preset: &str, cfg: &Config) -> anyhow::Result<Box<dyn Engine>> {
    let settings = sched_settings(preset, cfg);
    if let Some(node) = device::sim_node(preset).filter(|n| n.len() > 1) {
        return Ok(Box::new(crate::engine::node::NodeEngine::new(
            &node, settings,
        )?));
    }
    let e = crate::engine::sched::SchedEngine::new(settings)?;
    Ok(Box::new(e))
}

/// The scheduler settings of the configuration (`preset`: the simulated
/// device's, or the one a GPU is seen as).
fn sched_settings(preset: &str, cfg: &Config) -> crate::engine::sched::SchedSettings {
    crate::engine::sched::SchedSettings {
        preset: preset.to_string(),
        policy: cfg.scheduler.policy.clone(),
        dq_capacity: cfg.scheduler.device_queue_capacity,
        be_streams_per_model: cfg.scheduler.be_streams_per_model,
        seed: cfg.scheduler.seed,
        fikit: reef_sched::fikit::FikitConfig {
            epsilon_ns: (cfg.scheduler.fikit_epsilon_us * 1e3).round() as u64,
            runs: cfg.scheduler.fikit_runs,
            ..Default::default()
        },
        fikit_profile_dir: cfg.scheduler.fikit_profile_dir.clone(),
        host_gap_ns: cfg
            .scheduler
            .host_gap_us
            .map(|us| (us * 1e3).round() as u64),
    }
}

/// Builds the engine that serves `cuda:index`: reef-sched's policies
/// (the engine of the simulated device, engine/sched.rs) on the
/// kernel-level CUDA device (backend/cuda_launch/kernels.rs: REEF §4.3
/// Fig. 8, levels 1-2), through engine/gpu.rs, on the driver library of
/// [`Config::cuda_library`]. NVIDIA hardware needs root, as the other
/// hardware devices; the simulated test device (reef-libcuda-sim, whose
/// `cuDeviceGetName` says "test device") does not. Several GPUs
/// (`cuda:0,cuda:1`) make a node: one engine each, models placed by
/// CASE/MGB Algorithm 3 on the drivers' free memory (engine/node.rs).
pub fn make_cuda_engine(
    indices: &[u32],
    cfg: &Config,
    is_root: bool,
) -> anyhow::Result<Box<dyn Engine>> {
    use crate::device::cuda::TEST_DEVICE_MARK;
    let library = cfg.cuda_library().map(|(p, _)| p);
    let mut engines = Vec::new();
    for &index in indices {
        let e = crate::device::cuda::engine::open(index, library.clone(), sched_settings("", cfg))
            .map_err(|e| anyhow::anyhow!("device cuda:{index}: {e}"))?;
        let d = e.device().device();
        let gpu = d.gpu_name().to_string();
        if !is_root && !gpu.contains(TEST_DEVICE_MARK) {
            bail!(device::DeviceError::NeedsRoot(DeviceSpec::Cuda(vec![
                index
            ])));
        }
        if cfg.scheduler.policy == "reef" {
            tracing::warn!(
                "cuda:{index}: dynamic kernel padding (REEF §5) is not available on the CUDA launch path; serving reef-nodkp (reset-based preemption)"
            );
        }
        if reef_sched::dkp::MaxConfig::parse(&cfg.scheduler.policy).is_some() {
            tracing::warn!(
                "cuda:{index}: dynamic kernel padding (REEF §5; reef-max's pad, mv and waves) is not available on the CUDA launch path; serving {}",
                crate::device::cuda::engine::gpu_policy(&cfg.scheduler.policy)
            );
        }
        tracing::info!(device = %format!("cuda:{index}"), gpu = %gpu, "{}", d.levels());
        engines.push(e);
    }
    if engines.len() == 1 {
        return Ok(Box::new(engines.pop().expect("one engine")));
    }
    let node = crate::engine::node::NodeEngine::cuda(engines)
        .map_err(|e| anyhow::anyhow!("device {}: {e}", DeviceSpec::Cuda(indices.to_vec())))?;
    Ok(Box::new(node))
}

/// The engine serving `kfd:index`: the HIP launch path (device/hip/) on
/// [`Config::hip_library`], with the KFD's level-3 probe as a note. An AMD
/// GPU needs root, as cuda:N's does; the simulated libamdhip64 (a test
/// device) does not.
pub fn make_hip_engine(index: u32, cfg: &Config, is_root: bool) -> anyhow::Result<Box<dyn Engine>> {
    use crate::device::cuda::TEST_DEVICE_MARK;
    let library = cfg.hip_library().map(|(p, _)| p);
    let kfd = crate::device::preempt::kfd_options(cfg, index, is_root);
    let e = crate::device::hip::engine::open(index, library, sched_settings("", cfg), kfd)
        .map_err(|e| anyhow::anyhow!("device kfd:{index}: {e}"))?;
    let gpu = e.device().device().gpu_name().to_string();
    if !is_root && !gpu.contains(TEST_DEVICE_MARK) {
        bail!(device::DeviceError::NeedsRoot(DeviceSpec::Kfd(index)));
    }
    if cfg.scheduler.policy == "reef" {
        tracing::warn!(
            "kfd:{index}: dynamic kernel padding (REEF §5) is not available on the HIP launch path; serving reef-nodkp (reset-based preemption)"
        );
    }
    if reef_sched::dkp::MaxConfig::parse(&cfg.scheduler.policy).is_some() {
        tracing::warn!(
            "kfd:{index}: dynamic kernel padding (REEF §5; reef-max's pad, mv and waves) is not available on the HIP launch path; serving {}",
            crate::device::cuda::engine::gpu_policy(&cfg.scheduler.policy)
        );
    }
    tracing::info!(device = %format!("kfd:{index}"), gpu = %gpu, "{}", e.device().device().levels());
    Ok(Box::new(e))
}

/// Reads the PID in a PID file, if the file exists and names a live reefd.
pub fn running_pid(pid_file: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(pid_file).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    kill(Pid::from_raw(pid), None).ok()?;
    // A stale PID file may name a PID the kernel has given to another
    // program since: only a process named reefd counts.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    comm.trim().starts_with("reefd").then_some(pid)
}

fn write_pid_file(path: &Path) -> anyhow::Result<()> {
    if let Some(pid) = running_pid(path) {
        bail!(
            "reefd is already running (pid {pid}, PID file {}); stop it with `reefd stop`",
            path.display()
        );
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "cannot create the PID file directory {} (run as root, or set daemon.pid_file)",
                dir.display()
            )
        })?;
    }
    std::fs::write(path, format!("{}\n", std::process::id()))
        .with_context(|| format!("cannot write the PID file {}", path.display()))
}

fn init_logging(level: &str) -> anyhow::Result<()> {
    let level = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => {
            tracing_level(&v).map_err(|e| anyhow::anyhow!("RUST_LOG: {e}"))?
        }
        _ => tracing_level(level)?,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    Ok(())
}

/// `reefd start`. In the foreground it returns when the daemon stops; in the
/// background the parent returns once the child serves (or has failed, with
/// the child's error).
pub fn start(opts: StartOptions) -> anyhow::Result<()> {
    let cfg = &opts.config;
    cfg.validate()?;
    let spec = DeviceSpec::parse(&cfg.device.device).map_err(anyhow::Error::msg)?;
    // kfd:N and cuda:N: open the configured device through its backend,
    // then refuse (no kernel launch path in this build); see backend/mod.rs.
    crate::device::preempt::check_hardware(&spec, cfg, device::is_root())?;
    if let DeviceSpec::Kfd(_) = spec {
        // Before detaching, so a missing runtime is reported on the
        // terminal in one line.
        let lib = cfg.hip_library();
        crate::device::hip::driver::load_library(lib.as_ref().map(|(p, _)| p.as_path())).map_err(
            |e| match &lib {
                Some((_, from)) => anyhow::anyhow!("device {spec}: {e} (set by {from})"),
                None => anyhow::anyhow!("device {spec}: {e}"),
            },
        )?;
    }
    if let DeviceSpec::Cuda(_) = spec {
        // Before detaching, so a missing library is reported on the
        // terminal; the driver itself is initialised in the daemon.
        let lib = cfg.cuda_library();
        crate::device::cuda::load_library(lib.as_ref().map(|(p, _)| p.as_path())).map_err(|e| {
            match &lib {
                Some((_, from)) => anyhow::anyhow!("device {spec}: {e} (set by {from})"),
                None => anyhow::anyhow!("device {spec}: {e}"),
            }
        })?;
    }
    let selected = device::select(&spec, &device::probe(), device::is_root())?;
    let mode = cfg.socket_mode()?;
    let group = if cfg.daemon.socket_group.is_empty() {
        None
    } else {
        Some(server::group_gid(&cfg.daemon.socket_group)?)
    };
    let metrics = if cfg.metrics.enabled {
        Some(cfg.metrics_addr()?)
    } else {
        None
    };
    let models_dir = cfg.models_dir();
    if !models_dir.is_dir() {
        eprintln!(
            "reefd: warning: models directory {} does not exist; `models load NAME` will fail until device.models_dir or REEF_SHARED points at the measured models",
            models_dir.display()
        );
    }
    // The socket is bound before detaching, so errors reach the terminal.
    let listener = server::bind_socket(&cfg.daemon.socket, mode, group)?;
    let socket = cfg.daemon.socket.clone();
    if let (Some(n), false) = (&selected.notice, opts.foreground) {
        println!("reefd: {n}");
    }
    let ready_pipe = if opts.foreground {
        None
    } else {
        match detach(cfg)? {
            Detached::Parent(r) => return r,
            Detached::Child(w) => Some(w),
        }
    };
    let result = run(
        cfg, selected, listener, group, metrics, models_dir, ready_pipe,
    );
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&cfg.daemon.pid_file);
    result
}

#[allow(clippy::too_many_arguments)]
fn run(
    cfg: &Config,
    selected: device::Selected,
    listener: std::os::unix::net::UnixListener,
    group: Option<nix::unistd::Gid>,
    metrics: Option<std::net::SocketAddr>,
    models_dir: PathBuf,
    ready: Option<std::fs::File>,
) -> anyhow::Result<()> {
    let report = |ready: &mut Option<std::fs::File>, msg: &str| {
        if let Some(mut w) = ready.take() {
            let _ = w.write_all(msg.as_bytes());
        }
    };
    let mut ready = ready;
    if let Err(e) =
        init_logging(&cfg.daemon.log_level).and_then(|_| write_pid_file(&cfg.daemon.pid_file))
    {
        report(&mut ready, &format!("{e:#}"));
        return Err(e);
    }
    let device_name = match (&selected.cuda, selected.kfd) {
        (Some(i), _) => DeviceSpec::Cuda(i.clone()).to_string(),
        (None, Some(n)) => DeviceSpec::Kfd(n).to_string(),
        (None, None) => format!("sim:{}", selected.preset),
    };
    if let Some(n) = &selected.notice {
        tracing::warn!("{n}");
    }
    raise_descriptor_limit(cfg.daemon.max_connections);
    let placement = crate::runtime::Placement {
        cpus: cfg.daemon.device_cpus.clone(),
        nice: cfg.daemon.device_nice,
    };
    if let Err(e) = placement.check() {
        report(&mut ready, &format!("{e:#}"));
        return Err(e);
    }
    let engine = match (&selected.cuda, selected.kfd) {
        (Some(i), _) => make_cuda_engine(i, cfg, device::is_root()),
        (None, Some(n)) => make_hip_engine(n, cfg, device::is_root()),
        (None, None) => make_engine(&selected.preset, cfg),
    };
    let engine = match engine {
        Ok(e) => e,
        Err(e) => {
            report(&mut ready, &format!("{e:#}"));
            return Err(e);
        }
    };
    let info = engine.info();
    let rt = Runtime::new(
        engine,
        RuntimeSettings {
            device: device_name.clone(),
            models_dir,
            max_tasks_per_stream: cfg.daemon.max_tasks_per_stream,
            max_streams_per_uid: cfg.daemon.max_streams_per_uid,
            max_tasks_per_uid: cfg.daemon.max_tasks_per_uid,
            max_frame_bytes: cfg.daemon.max_frame_bytes,
            pacer_tick: Duration::from_micros(cfg.daemon.pacer_tick_us),
            limits: crate::runtime::TensorLimits {
                max_tensor_frame_bytes: cfg.daemon.max_tensor_frame_bytes,
                max_tensor_bytes_per_uid: cfg.daemon.max_tensor_bytes_per_uid,
                max_regions_per_connection: cfg.daemon.max_regions_per_connection,
                max_regions_per_uid: cfg.daemon.max_regions_per_uid,
                max_region_bytes: cfg.daemon.max_region_bytes,
            },
        },
    );
    let prio = cfg.daemon.realtime_priority;
    let poll = cfg.daemon.poll;
    let (pacer, tokio_rt) = if poll {
        // One thread serves the socket and runs the device (Runtime::poll_loop).
        if prio != 0 {
            tracing::warn!(
                "daemon.realtime_priority is not applied with daemon.poll = true: a SCHED_FIFO thread that polls is throttled by the kernel (sched_rt_runtime_us) and stalls for tens of milliseconds; set daemon.poll = false to use it"
            );
        }
        // This thread runs the runtime and so the device: place it, and give
        // the runtime's other threads (model loads) the placement it had.
        let saved = crate::runtime::Placement::save();
        placement.apply()?;
        let io = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_start(move || saved.restore())
            .build()
            .context("cannot start the I/O runtime")?;
        (None, io)
    } else {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("reefd-io")
            .on_thread_start(move || crate::runtime::set_realtime_priority(prio))
            .build()
            .context("cannot start the I/O runtime")?;
        (Some(rt.start_pacer(prio, placement)), io)
    };
    let kserve = cfg.kserve()?;
    let opts = ServerOptions {
        socket: cfg.daemon.socket.clone(),
        max_frame_bytes: cfg.daemon.max_frame_bytes,
        max_tensor_frame_bytes: cfg.daemon.max_tensor_frame_bytes,
        max_connections: cfg.daemon.max_connections,
        shutdown_grace: Duration::from_millis(cfg.daemon.shutdown_grace_ms),
        socket_gid: group,
        metrics,
    };
    let result = tokio_rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        tracing::info!(
            socket = %opts.socket.display(),
            device = %device_name,
            engine = %info.name,
            policy = %info.policy,
            pid = std::process::id(),
            "reefd serving"
        );
        let poller = poll.then(|| tokio::spawn(rt.clone().poll_loop()));
        // The v2 fronts act as the daemon's own user (TCP carries no peer
        // credentials; kserve::Access decides who may use them).
        let me = crate::runtime::Peer {
            uid: nix::unistd::Uid::effective().as_raw(),
            gid: nix::unistd::Gid::effective().as_raw(),
            pid: None,
        };
        let fronts = match crate::kserve::start(rt.clone(), kserve, me).await {
            Ok(t) => t,
            Err(e) => {
                report(&mut ready, &format!("{e:#}"));
                return Err(e);
            }
        };
        report(&mut ready, "ok");
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        };
        let r = server::serve(rt.clone(), listener, opts, shutdown).await;
        for f in fronts {
            f.abort();
        }
        if let Some(p) = poller {
            p.abort();
        }
        r
    });
    rt.stop();
    if let Some(p) = pacer {
        let _ = p.join();
    }
    tokio_rt.shutdown_timeout(Duration::from_secs(1));
    result
}

enum Detached {
    Parent(anyhow::Result<()>),
    Child(std::fs::File),
}

/// Forks into the background. The parent waits on a pipe until the child
/// reports that it serves (or why it failed). The child starts a new
/// session and sends its output to daemon.log_file (or /dev/null).
fn detach(cfg: &Config) -> anyhow::Result<Detached> {
    use nix::unistd::{fork, pipe, setsid, ForkResult};
    let (r, w) = pipe().context("pipe")?;
    // SAFETY: no other threads exist yet (the runtime starts after this),
    // so the child may run arbitrary code.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Parent { child } => {
            drop(w);
            let mut f = std::fs::File::from(r);
            let mut msg = String::new();
            let _ = f.read_to_string(&mut msg);
            if msg == "ok" {
                println!(
                    "reefd started (pid {child}), socket {}",
                    cfg.daemon.socket.display()
                );
                Ok(Detached::Parent(Ok(())))
            } else if msg.is_empty() {
                Ok(Detached::Parent(Err(anyhow::anyhow!(
                    "reefd exited during start-up; run it with --foreground to see why"
                ))))
            } else {
                Ok(Detached::Parent(Err(anyhow::anyhow!(msg))))
            }
        }
        ForkResult::Child => {
            drop(r);
            let _ = setsid();
            let null = std::fs::OpenOptions::new().read(true).open("/dev/null")?;
            let out = if cfg.daemon.log_file.is_empty() {
                std::fs::OpenOptions::new().write(true).open("/dev/null")?
            } else {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&cfg.daemon.log_file)
                    .with_context(|| {
                        format!("cannot open daemon.log_file {}", cfg.daemon.log_file)
                    })?
            };
            nix::unistd::dup2_stdin(&null).context("dup2")?;
            nix::unistd::dup2_stdout(&out).context("dup2")?;
            nix::unistd::dup2_stderr(&out).context("dup2")?;
            Ok(Detached::Child(std::fs::File::from(w)))
        }
    }
}

/// `reefd stop`: SIGTERM to the PID in the PID file, then wait for it to exit.
pub fn stop(pid_file: &Path, timeout: Duration) -> anyhow::Result<()> {
    let Some(pid) = running_pid(pid_file) else {
        bail!(
            "reefd is not running (no live process in {}); if it runs with another PID file, pass --config",
            pid_file.display()
        );
    };
    kill(Pid::from_raw(pid), Signal::SIGTERM).with_context(|| {
        format!("cannot signal reefd (pid {pid}): stopping it needs root or the daemon's user")
    })?;
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if kill(Pid::from_raw(pid), None).is_err() {
            println!("reefd (pid {pid}) stopped");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("reefd (pid {pid}) did not exit within {timeout:?} after SIGTERM")
}

/// An error and its causes on one line, each cause once: many errors here
/// already quote their cause in their own message.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

/// Descriptors beyond the connections: the socket, the log, model files
/// being read, the metrics listener and its clients, the runtime's own.
const SPARE_DESCRIPTORS: u64 = 64;

/// Raises the soft limit on open files to what `max_connections` needs (up
/// to the hard limit), so that a full daemon answers `busy` instead of
/// failing to accept (issue 25: under the systemd default of 1024 a daemon
/// with max_connections = 1024 could not accept its last connections and
/// retried `accept` every 10 ms). Short of it, says what to change.
fn raise_descriptor_limit(max_connections: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let want = max_connections as u64 + SPARE_DESCRIPTORS;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= want {
        return;
    }
    let new = want.min(hard);
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, new, hard) {
        tracing::warn!(error = %e, soft, "cannot raise the open-file limit");
    }
    if new < want {
        tracing::warn!(
            limit = new,
            needed = want,
            "the open-file limit is below daemon.max_connections + {SPARE_DESCRIPTORS}: \
             lower max_connections or raise the hard limit (LimitNOFILE= in the systemd unit)"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_chain_names_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(io).context("cannot open /x: no such file");
        assert_eq!(super::error_chain(&e), "cannot open /x: no such file");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(io).context("cannot bind the socket /s");
        assert_eq!(
            super::error_chain(&e),
            "cannot bind the socket /s: no such file"
        );
    }
}
