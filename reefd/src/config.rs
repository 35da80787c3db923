//! The daemon's TOML configuration (default `/etc/reef/reefd.toml`). Every key
//! is optional and has the default documented here and in docs/daemon.md;
//! unknown keys are refused so a typo does not silently fall back to a
//! default. The online part of REEF (§3.1, Fig. 5) is what these keys set up:
//! the RPC socket, the device, and the scheduling policy.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod kserve;
pub use kserve::KserveConfig;

/// Where `reefd start` looks for its configuration when `--config` is absent.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/reef/reefd.toml";
pub const DEFAULT_SOCKET: &str = "/run/reef/reefd.sock";
pub const DEFAULT_PID_FILE: &str = "/run/reef/reefd.pid";
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
/// The scheduling policies the daemon can be asked to run (names of
/// reef-sched's policies): `reef` (reset-based preemption, REEF §4, with
/// dynamic kernel padding, §5), `reef-dkp-mv` (the same with multi-version
/// kernels, §5.3), `reef-nodkp` (preemption only), `wait`, `seq`, `streams`
/// (GPUStreams, no stream priorities, §6.1), `streams-prio` (RT streams at
/// high priority, §6.6), `share` (a process context per client, FIKIT's
/// default sharing; only on a device with contexts, the simulated ones)
/// and `rt-only`; `reef-max` (issue 28: preemption, padding with
/// multi-version kernels and waves, the fill after the last RT kernel) and
/// its ablations (`reef-max:-tail`, ..., [`is_policy`]). Padded launches
/// are executed by reef-exec, as in `reef-bench`.
pub const POLICIES: &[&str] = &[
    "reef",
    "reef-dkp-mv",
    "reef-max",
    "reef-nodkp",
    "rt-only",
    "seq",
    "streams",
    "streams-prio",
    "share",
    "wait",
    "fikit",
    "fikit-nofill",
    "fikit-noearly",
    "aker",
    "baymax",
    "tacker",
];

/// Whether the daemon runs policy `name`: one of [`POLICIES`], or a
/// `reef-max` ablation (`reef_sched::dkp::MaxConfig::parse`).
pub fn is_policy(name: &str) -> bool {
    POLICIES.contains(&name) || reef_sched::dkp::MaxConfig::parse(name).is_some()
}

/// The error text for a policy name the daemon does not run.
pub fn unknown_policy(name: &str) -> String {
    format!(
        "policy {name:?} is unknown; choose one of {}",
        POLICIES.join(", ")
    )
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonConfig,
    pub device: DeviceConfig,
    pub scheduler: SchedulerConfig,
    pub metrics: MetricsConfig,
    pub kserve: KserveConfig,
}

/// Default of `daemon.max_tensor_frame_bytes`: 64 MiB.
pub const DEFAULT_MAX_TENSOR_FRAME: usize = 64 << 20;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Path of the Unix socket clients connect to.
    pub socket: PathBuf,
    /// Permission bits of the socket file, as an octal string.
    pub socket_mode: String,
    /// Group that owns the socket file; its members may connect. Empty: the
    /// daemon's own primary group.
    pub socket_group: String,
    pub pid_file: PathBuf,
    /// error, warn, info, debug or trace (RUST_LOG overrides).
    pub log_level: String,
    /// Where a daemon started without --foreground writes its log. Empty:
    /// /dev/null (use --foreground under systemd, which keeps the journal).
    pub log_file: String,
    /// Largest request frame accepted, in bytes.
    pub max_frame_bytes: usize,
    /// Simultaneous client connections; more are refused with an error.
    pub max_connections: usize,
    /// Inferences one stream may have in flight; more are refused as busy.
    pub max_tasks_per_stream: usize,
    /// Streams one user (uid) may hold at once; more are refused as busy
    /// (root is not limited).
    pub max_streams_per_uid: usize,
    /// Inferences one user (uid) may have in flight over all their
    /// streams; more are refused as busy (root is not limited).
    pub max_tasks_per_uid: usize,
    /// Largest tensor frame (an `infer` whose inline tensors follow its
    /// JSON, docs/protocol.md "Tensors"), in bytes; its JSON is still
    /// limited by `max_frame_bytes`.
    pub max_tensor_frame_bytes: usize,
    /// Inline tensor bytes one user (uid) may have in flight (requests
    /// read and not yet answered, their inputs and inline outputs); more
    /// are refused as busy (root is not limited).
    pub max_tensor_bytes_per_uid: u64,
    /// Shared-memory regions one connection, and one user (uid) over all
    /// their connections, may have registered (each a mapping in the
    /// daemon); more are refused as busy.
    pub max_regions_per_connection: usize,
    pub max_regions_per_uid: usize,
    /// Largest shared-memory region, in bytes.
    pub max_region_bytes: u64,
    /// On SIGTERM/SIGINT, how long in-flight inferences may run to completion
    /// before they are failed with `shutting_down`.
    pub shutdown_grace_ms: u64,
    /// SCHED_FIFO priority (1-99) of the threads on the RT control path (the
    /// socket threads and the pacer); 0 leaves them at normal priority.
    pub realtime_priority: u8,
    /// CPUs the thread that runs the device may use (the polling thread with
    /// `poll = true`, the pacer otherwise); empty: any. A polling scheduler
    /// gets the lowest latency on a core of its own: an RT client woken on
    /// the same core preempts it, and its request then waits in the socket
    /// until the client blocks again.
    pub device_cpus: Vec<usize>,
    /// Nice value (-20 to 19) of the thread that runs the device; below 0
    /// needs root or CAP_SYS_NICE (otherwise a warning and 0). Other
    /// threads (model loads) keep nice 0 and any CPU.
    pub device_nice: i32,
    /// Poll mode: one thread serves the socket and runs the simulated
    /// device, polling (one core busy) while the device has work, so an RT
    /// request meets a hot thread and a current device. false: socket
    /// threads sleep in epoll and a pacer thread catches the device up every
    /// `pacer_tick_us`, using little CPU.
    pub poll: bool,
    /// Without poll mode, the pacer catches the simulated device up to the wall clock at most
    /// once per this many microseconds: the longest a finished inference
    /// waits to be reported (plus wake-up latency). 1-10000.
    pub pacer_tick_us: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceConfig {
    /// auto, sim:mi50, sim:gv100, sim:h100, a simulated node (sim:mi50x4),
    /// cuda:N, a node of NVIDIA GPUs (cuda:0,cuda:1) or kfd:N.
    pub device: String,
    /// The shared data directory. Empty: $REEF_SHARED, else
    /// `<workspace>/../shared`.
    pub shared_dir: String,
    /// Where `models load NAME` finds models. Empty: `<shared>/models/mi50`.
    pub models_dir: String,
    /// The AMD KFD device file the `kfd` backend opens (REEF §4.5).
    pub kfd_path: PathBuf,
    /// The KFD topology nodes directory that maps `kfd:N` to a gpu_id.
    pub kfd_topology: PathBuf,
    /// The NVIDIA RM control device the `cuda` backend opens (REEF §4.6).
    pub nvidiactl_path: PathBuf,
    /// The CUDA driver library `cuda:N` loads (e.g. the simulated
    /// `libreef_libcuda_sim.so`); empty: `$REEF_CUDA_LIBRARY`, else
    /// `libcuda.so` from the dynamic loader's search path.
    pub cuda_library: String,
    /// The HIP runtime `kfd:N` loads (e.g. the simulated
    /// `libreef_libhip_sim.so`); empty: `$REEF_HIP_LIBRARY`, else
    /// `libamdhip64.so` from the dynamic loader's search path.
    pub hip_library: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// Initial policy, one of [`POLICIES`] (default `reef`).
    pub policy: String,
    /// Device-queue capacity of preemptible streams (REEF §4.2: 4 on MI50).
    pub device_queue_capacity: usize,
    /// Best-effort streams of the scheduler per loaded model: how many BE
    /// clients may use one model at once.
    pub be_streams_per_model: usize,
    /// Seed of the simulated device.
    pub seed: u64,
    /// FIKIT (policy `fikit*`): gaps predicted at or below this are not
    /// filled, us (fikit.txt §3.2: 0.1 ms).
    pub fikit_epsilon_us: f64,
    /// FIKIT: runs measured before a task shares (§3.2: T in [10, 1000]).
    pub fikit_runs: u32,
    /// FIKIT: where profiles are kept (`<model>.fikit.json`); default
    /// beside each model's schedule.
    pub fikit_profile_dir: Option<PathBuf>,
    /// Host time per kernel launch of the clients' framework on the
    /// simulated device, us (default: back to back). Eager-mode frameworks
    /// leave gaps between kernels that FIKIT fills (docs/results-fikit.md).
    pub host_gap_us: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    pub enabled: bool,
    /// Loopback address of the Prometheus text endpoint (`GET /metrics`).
    pub listen: String,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: DEFAULT_SOCKET.into(),
            socket_mode: "0660".into(),
            socket_group: String::new(),
            pid_file: DEFAULT_PID_FILE.into(),
            log_level: "info".into(),
            log_file: String::new(),
            max_frame_bytes: crate::protocol::DEFAULT_MAX_FRAME,
            max_connections: 1024,
            max_tasks_per_stream: 256,
            max_streams_per_uid: 64,
            max_tasks_per_uid: 1024,
            max_tensor_frame_bytes: DEFAULT_MAX_TENSOR_FRAME,
            max_tensor_bytes_per_uid: 1 << 30,
            max_regions_per_connection: 16,
            max_regions_per_uid: 64,
            max_region_bytes: 4 << 30,
            shutdown_grace_ms: 5000,
            realtime_priority: 0,
            device_cpus: Vec::new(),
            device_nice: 0,
            poll: true,
            pacer_tick_us: crate::runtime::DEFAULT_PACER_TICK.as_micros() as u64,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            device: "auto".into(),
            shared_dir: String::new(),
            models_dir: String::new(),
            kfd_path: "/dev/kfd".into(),
            kfd_topology: crate::device::kfd::DEFAULT_TOPOLOGY_DIR.into(),
            nvidiactl_path: "/dev/nvidiactl".into(),
            cuda_library: String::new(),
            hip_library: String::new(),
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            policy: "reef".into(),
            device_queue_capacity: 4,
            be_streams_per_model: 4,
            seed: 0,
            fikit_epsilon_us: 100.0,
            fikit_runs: 10,
            fikit_profile_dir: None,
            host_gap_us: None,
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            listen: DEFAULT_METRICS_LISTEN.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: {0}")]
    Invalid(String),
}

impl Config {
    /// Parses and validates TOML text.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Loads `path`; when `explicit` is false and the file does not exist,
    /// the defaults are used (a fresh install has no config file).
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The socket mode as bits.
    pub fn socket_mode(&self) -> Result<u32, ConfigError> {
        let s = self.daemon.socket_mode.trim_start_matches("0o");
        let mode = u32::from_str_radix(s, 8).map_err(|_| {
            ConfigError::Invalid(format!(
                "daemon.socket_mode = {:?} is not an octal mode such as \"0660\"",
                self.daemon.socket_mode
            ))
        })?;
        if mode > 0o777 {
            return Err(ConfigError::Invalid(format!(
                "daemon.socket_mode = {:?} has bits beyond 0777",
                self.daemon.socket_mode
            )));
        }
        Ok(mode)
    }

    /// The metrics address; only loopback addresses are accepted, the
    /// endpoint has no authentication.
    pub fn metrics_addr(&self) -> Result<SocketAddr, ConfigError> {
        let addr: SocketAddr = self.metrics.listen.parse().map_err(|_| {
            ConfigError::Invalid(format!(
                "metrics.listen = {:?} is not an address such as \"127.0.0.1:9464\"",
                self.metrics.listen
            ))
        })?;
        if !addr.ip().is_loopback() {
            return Err(ConfigError::Invalid(format!(
                "metrics.listen = {:?} is not a loopback address; the metrics endpoint has no authentication, use 127.0.0.1 or [::1]",
                self.metrics.listen
            )));
        }
        Ok(addr)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.socket_mode()?;
        self.kserve()?;
        if self.metrics.enabled {
            self.metrics_addr()?;
        }
        crate::device::DeviceSpec::parse(&self.device.device)
            .map_err(|e| ConfigError::Invalid(format!("device.device: {e}")))?;
        if !is_policy(&self.scheduler.policy) {
            return Err(ConfigError::Invalid(format!(
                "scheduler.policy: {}",
                unknown_policy(&self.scheduler.policy)
            )));
        }
        let e = self.scheduler.fikit_epsilon_us;
        if let Some(g) = self.scheduler.host_gap_us {
            if !(g.is_finite() && g >= 0.0) {
                return Err(ConfigError::Invalid(format!(
                    "scheduler.host_gap_us = {g} must be a non-negative number of us"
                )));
            }
        }
        if !(e.is_finite() && e >= 0.0) || self.scheduler.fikit_runs == 0 {
            return Err(ConfigError::Invalid(format!(
                "scheduler.fikit_epsilon_us = {e} must be a non-negative number and scheduler.fikit_runs = {} at least 1",
                self.scheduler.fikit_runs
            )));
        }
        if self.scheduler.device_queue_capacity == 0 || self.scheduler.be_streams_per_model == 0 {
            return Err(ConfigError::Invalid(
                "scheduler.device_queue_capacity and scheduler.be_streams_per_model must be at least 1".into(),
            ));
        }
        if self.daemon.max_frame_bytes < 64 || self.daemon.max_frame_bytes > (64 << 20) {
            return Err(ConfigError::Invalid(format!(
                "daemon.max_frame_bytes = {} must be between 64 and 67108864",
                self.daemon.max_frame_bytes
            )));
        }
        if self.daemon.max_tensor_frame_bytes < self.daemon.max_frame_bytes
            || self.daemon.max_tensor_frame_bytes > (1 << 31)
        {
            return Err(ConfigError::Invalid(format!(
                "daemon.max_tensor_frame_bytes = {} must be between max_frame_bytes ({}) and 2147483648",
                self.daemon.max_tensor_frame_bytes, self.daemon.max_frame_bytes
            )));
        }
        if self.daemon.max_regions_per_connection == 0
            || self.daemon.max_regions_per_uid == 0
            || self.daemon.max_region_bytes == 0
            || self.daemon.max_tensor_bytes_per_uid == 0
        {
            return Err(ConfigError::Invalid(
                "daemon.max_regions_per_connection, max_regions_per_uid, max_region_bytes and max_tensor_bytes_per_uid must be at least 1".into(),
            ));
        }
        if self.daemon.max_connections == 0
            || self.daemon.max_tasks_per_stream == 0
            || self.daemon.max_streams_per_uid == 0
            || self.daemon.max_tasks_per_uid == 0
        {
            return Err(ConfigError::Invalid(
                "daemon.max_connections, max_tasks_per_stream, max_streams_per_uid and max_tasks_per_uid must be at least 1".into(),
            ));
        }
        if self.daemon.realtime_priority > 99 {
            return Err(ConfigError::Invalid(format!(
                "daemon.realtime_priority = {} must be 0 (off) or a SCHED_FIFO priority 1-99",
                self.daemon.realtime_priority
            )));
        }
        if !(-20..=19).contains(&self.daemon.device_nice) {
            return Err(ConfigError::Invalid(format!(
                "daemon.device_nice = {} must be a nice value from -20 to 19",
                self.daemon.device_nice
            )));
        }
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if let Some(c) = self.daemon.device_cpus.iter().find(|&&c| c >= 1024) {
            return Err(ConfigError::Invalid(format!(
                "daemon.device_cpus names CPU {c}; this machine has {online} (numbered from 0)"
            )));
        }
        if !(1..=10_000).contains(&self.daemon.pacer_tick_us) {
            return Err(ConfigError::Invalid(format!(
                "daemon.pacer_tick_us = {} must be between 1 and 10000 microseconds",
                self.daemon.pacer_tick_us
            )));
        }
        tracing_level(&self.daemon.log_level)?;
        Ok(())
    }

    /// The shared data directory: the config key, else $REEF_SHARED, else
    /// `<workspace>/../shared`.
    pub fn shared_dir(&self) -> PathBuf {
        if !self.device.shared_dir.is_empty() {
            return PathBuf::from(&self.device.shared_dir);
        }
        reef_model::shared_dir()
    }

    pub fn models_dir(&self) -> PathBuf {
        if !self.device.models_dir.is_empty() {
            return PathBuf::from(&self.device.models_dir);
        }
        self.shared_dir().join("models").join("mi50")
    }

    /// The CUDA driver library `cuda:N` loads, and where that choice came
    /// from: `device.cuda_library`, else `$REEF_CUDA_LIBRARY`, else `None`
    /// (`libcuda.so` from the dynamic loader's search path).
    pub fn cuda_library(&self) -> Option<(PathBuf, &'static str)> {
        if !self.device.cuda_library.is_empty() {
            return Some((
                PathBuf::from(&self.device.cuda_library),
                "device.cuda_library",
            ));
        }
        std::env::var_os(crate::device::cuda::LIBRARY_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), "REEF_CUDA_LIBRARY"))
    }
}

impl Config {
    /// The HIP runtime `kfd:N` loads and where that was set from:
    /// `device.hip_library`, else `$REEF_HIP_LIBRARY`, else `None`
    /// (`libamdhip64.so` from the dynamic loader's search path).
    pub fn hip_library(&self) -> Option<(PathBuf, &'static str)> {
        if !self.device.hip_library.is_empty() {
            return Some((
                PathBuf::from(&self.device.hip_library),
                "device.hip_library",
            ));
        }
        std::env::var_os(crate::device::hip::LIBRARY_ENV)
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), "REEF_HIP_LIBRARY"))
    }
}

/// Parses a log level name.
pub fn tracing_level(s: &str) -> Result<tracing::Level, ConfigError> {
    s.parse().map_err(|_| {
        ConfigError::Invalid(format!(
            "daemon.log_level = {s:?}; use error, warn, info, debug or trace"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.socket_mode().unwrap(), 0o660);
        assert_eq!(c.daemon.socket, PathBuf::from(DEFAULT_SOCKET));
    }

    #[test]
    fn a_token_file_must_be_small_regular_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let k = |path: &Path| {
            Config::parse(
                &format!("[kserve]\ntoken_file = {:?}\n", path.display().to_string()),
                Path::new("x.toml"),
            )
            .and_then(|c| c.kserve())
        };
        let good = dir.path().join("token");
        std::fs::write(&good, "0123456789abcdef0123\nignored\n").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = k(&good).unwrap();
        assert_eq!(o.access.token.as_deref(), Some("0123456789abcdef0123"));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = k(&good).unwrap_err().to_string();
        assert!(e.contains("chmod 600") && e.contains("644"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 5000]).unwrap();
        std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = k(&big).unwrap_err().to_string();
        assert!(e.contains("5000 bytes"), "{e}");
        // A device that never ends is refused, not read.
        let e = k(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = k(&dir.path().join("none")).unwrap_err().to_string();
        assert!(
            e.contains("token_file") && e.contains("No such file"),
            "{e}"
        );
    }

    #[test]
    fn kserve_age_zero_is_off_and_tls_keys_go_together() {
        // Config::parse validates, kserve() included.
        let k = |extra: &str| {
            Config::parse(&format!("[kserve]\n{extra}"), Path::new("x.toml"))
                .and_then(|c| c.kserve())
        };
        let c = k("grpc_max_connection_age_ms = 0\n").unwrap();
        assert_eq!(c.grpc_max_connection_age, None);
        let c = k("grpc_max_connection_age_ms = 5\n").unwrap();
        assert_eq!(
            c.grpc_max_connection_age,
            Some(std::time::Duration::from_millis(5))
        );
        assert!(k("").unwrap().tls.is_none());
        for (extra, says) in [
            ("tls_cert = \"/nonexistent.pem\"\n", "go together"),
            (
                "tls_client_ca = \"/nonexistent.pem\"\n",
                "mutual TLS is TLS first",
            ),
            (
                "tls_cert = \"/nonexistent.pem\"\ntls_key = \"/nonexistent.key\"\n",
                "/nonexistent.pem",
            ),
        ] {
            let e = k(extra).unwrap_err().to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn padding_policies_are_accepted_and_unknown_ones_refused_with_the_list() {
        for p in [
            "reef",
            "reef-dkp-mv",
            "reef-nodkp",
            "reef-max",
            "reef-max:-tail-waves",
        ] {
            let c = Config::parse(
                &format!("[scheduler]\npolicy = \"{p}\"\n"),
                Path::new("x.toml"),
            )
            .unwrap();
            assert_eq!(c.scheduler.policy, p);
        }
        let e = Config::parse("[scheduler]\npolicy = \"fastest\"\n", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown") && e.contains("reef, reef-dkp-mv, reef-max, reef-nodkp, rt-only"),
            "{e}"
        );
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn keys_are_read() {
        let c = Config::parse(
            "[daemon]\nsocket = \"/tmp/s\"\nsocket_mode = \"0600\"\n[device]\ndevice = \"sim:gv100\"\n[scheduler]\npolicy = \"seq\"\n[metrics]\nlisten = \"[::1]:9000\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(c.daemon.socket, PathBuf::from("/tmp/s"));
        assert_eq!(c.socket_mode().unwrap(), 0o600);
        assert_eq!(c.device.device, "sim:gv100");
        assert_eq!(c.scheduler.policy, "seq");
    }

    #[test]
    fn bad_values_are_refused_with_the_key() {
        for (text, key) in [
            ("[daemon]\nsockt = \"/x\"\n", "sockt"),
            ("[daemon]\nsocket_mode = \"rw\"\n", "socket_mode"),
            ("[metrics]\nlisten = \"0.0.0.0:9464\"\n", "loopback"),
            ("[scheduler]\npolicy = \"fastest\"\n", "policy"),
            ("[device]\ndevice = \"tpu:0\"\n", "device"),
            ("[daemon]\nlog_level = \"loud\"\n", "log_level"),
            ("[daemon]\nrealtime_priority = 120\n", "realtime_priority"),
            ("[daemon]\npacer_tick_us = 0\n", "pacer_tick_us"),
            ("[daemon]\ndevice_nice = -21\n", "device_nice"),
            ("[daemon]\ndevice_cpus = [4096]\n", "device_cpus"),
        ] {
            let e = Config::parse(text, Path::new("x.toml")).unwrap_err();
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn missing_default_file_is_fine_but_missing_explicit_file_is_not() {
        let p = Path::new("/nonexistent/reefd.toml");
        assert!(Config::load(p, false).is_ok());
        assert!(Config::load(p, true).is_err());
    }
}
