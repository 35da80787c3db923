//! `reefd`: the REEF daemon (REEF §3.1, Fig. 5, the online part).

use clap::{Parser, Subcommand};
use reefd::config::{Config, DEFAULT_CONFIG_PATH};
use reefd::daemon;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "reefd",
    version,
    about = "REEF GPU scheduling daemon: real-time and best-effort DNN inference on shared GPUs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the daemon (in the background unless --foreground).
    Start {
        /// Configuration file.
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// auto, sim:mi50, sim:gv100, sim:h100, a node such as sim:mi50x4 or sim:mi50,gv100, cuda:N, a node of NVIDIA GPUs such as cuda:0,cuda:1, or kfd:N (overrides device.device).
        #[arg(long)]
        device: Option<String>,
        /// Socket path (overrides daemon.socket).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// PID file (overrides daemon.pid_file).
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// Scheduling policy (overrides scheduler.policy).
        #[arg(long)]
        policy: Option<String>,
        /// Metrics address (overrides metrics.listen).
        #[arg(long, conflicts_with = "no_metrics")]
        metrics: Option<String>,
        /// Do not serve metrics.
        #[arg(long)]
        no_metrics: bool,
        /// Serve the Open Inference Protocol (KServe v2) over HTTP on this
        /// address, e.g. 127.0.0.1:8000 (overrides kserve.http).
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// Serve it over gRPC on this address, e.g. 127.0.0.1:8001
        /// (overrides kserve.grpc).
        #[arg(long, value_name = "ADDR")]
        grpc: Option<String>,
        /// Stay in the foreground and log to stderr (use under systemd).
        #[arg(long)]
        foreground: bool,
    },
    /// Stop the running daemon (SIGTERM, then wait for it to exit).
    Stop {
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        /// PID file (overrides daemon.pid_file).
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// Seconds to wait for the daemon to exit.
        #[arg(long, default_value_t = 15)]
        timeout: u64,
    },
    /// Report whether the daemon runs, and what it serves.
    Status {
        #[arg(long, default_value = DEFAULT_CONFIG_PATH)]
        config: PathBuf,
        #[arg(long)]
        socket: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

fn load_config(path: &std::path::Path) -> anyhow::Result<Config> {
    let explicit = path.as_os_str() != DEFAULT_CONFIG_PATH;
    Ok(Config::load(path, explicit)?)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // REEF_PARSE_ONLY=1: stop once the command line parsed (exit 0; a parse
    // error has already exited 2). The docs check (docscheck/) runs every
    // command line the docs show this way.
    if std::env::var_os("REEF_PARSE_ONLY").is_some_and(|v| v == "1") {
        return ExitCode::SUCCESS;
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("reefd: error: {}", daemon::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Start {
            config,
            device,
            socket,
            pid_file,
            policy,
            metrics,
            no_metrics,
            http,
            grpc,
            foreground,
        } => {
            let mut cfg = load_config(&config)?;
            if let Some(d) = device {
                cfg.device.device = d;
            }
            if let Some(s) = socket {
                cfg.daemon.socket = s;
            }
            if let Some(p) = pid_file {
                cfg.daemon.pid_file = p;
            }
            if let Some(p) = policy {
                cfg.scheduler.policy = p;
            }
            if let Some(m) = metrics {
                cfg.metrics.listen = m;
            }
            if no_metrics {
                cfg.metrics.enabled = false;
            }
            if let Some(a) = http {
                cfg.kserve.http = a;
            }
            if let Some(a) = grpc {
                cfg.kserve.grpc = a;
            }
            cfg.validate()?;
            daemon::start(daemon::StartOptions {
                config: cfg,
                foreground,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Stop {
            config,
            pid_file,
            timeout,
        } => {
            let cfg = load_config(&config)?;
            let pid_file = pid_file.unwrap_or(cfg.daemon.pid_file);
            daemon::stop(&pid_file, Duration::from_secs(timeout))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Status {
            config,
            socket,
            json,
        } => {
            let cfg = load_config(&config)?;
            let socket = socket.unwrap_or(cfg.daemon.socket);
            match reefd::client::Client::connect(&socket).and_then(|mut c| c.status()) {
                Ok(s) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&s)?);
                    } else {
                        println!(
                            "reefd {} running (pid {}) on {} with {} (policy {}), socket {}",
                            s.daemon_version,
                            s.pid,
                            s.device,
                            s.engine,
                            s.policy,
                            socket.display()
                        );
                        println!(
                            "  uptime {:.0} s, {} models, {} streams, {} tasks in flight, {} connections",
                            s.uptime_s, s.models, s.streams, s.tasks_in_flight, s.connections
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"running": false, "error": e.to_string()})
                        );
                    } else {
                        println!("reefd is not running: {e}");
                    }
                    // LSB: status exit code 3 = not running.
                    Ok(ExitCode::from(3))
                }
            }
        }
    }
}
