//! The daemon under test: a reefd child on a temporary socket (or one
//! already serving), its RSS and open descriptors read from /proc, and the
//! benchmark's own descriptor limit.

use anyhow::{bail, Context, Result};
use reefd::client::Client;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One reading of the daemon's process in /proc.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ProcSample {
    /// Resident set size (VmRSS), KiB.
    pub rss_kib: u64,
    /// Peak resident set size since the daemon started (VmHWM), KiB.
    pub hwm_kib: u64,
    /// Entries of /proc/PID/fd.
    pub fds: u64,
    /// Threads (Threads in /proc/PID/status).
    pub threads: u64,
}

/// What /proc says about process `pid`: `None` once it is gone or a zombie.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut s = ProcSample::default();
    for line in status.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), Some(val)) = (it.next(), it.next()) else {
            continue;
        };
        match key {
            "State:" if val == "Z" || val == "X" => return None,
            "VmRSS:" => s.rss_kib = val.parse().unwrap_or(0),
            "VmHWM:" => s.hwm_kib = val.parse().unwrap_or(0),
            "Threads:" => s.threads = val.parse().unwrap_or(0),
            _ => {}
        }
    }
    s.fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(s)
}

/// The soft limit on open files of process `pid` (/proc/PID/limits).
pub fn nofile_limit(pid: u32) -> Option<String> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let f: Vec<&str> = line.split_whitespace().collect();
    // "Max open files  SOFT  HARD  files"
    Some(format!("{} (hard {})", f.get(3)?, f.get(4)?))
}

/// Raises this process's soft RLIMIT_NOFILE to at least `need` (up to the
/// hard limit); children (the daemon it starts) inherit it. Returns the
/// soft and hard limits in force afterwards.
pub fn raise_nofile(need: u64) -> Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer to an rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    if r.rlim_cur < need {
        let want = need.min(r.rlim_max);
        let nr = libc::rlimit {
            rlim_cur: want,
            rlim_max: r.rlim_max,
        };
        // SAFETY: a valid rlimit no higher than the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &nr) } != 0 {
            bail!(
                "setrlimit(RLIMIT_NOFILE, {want}): {}",
                std::io::Error::last_os_error()
            );
        }
        r.rlim_cur = want;
    }
    Ok((r.rlim_cur, r.rlim_max))
}

/// The daemon: started here, or already serving.
pub struct Daemon {
    pub socket: PathBuf,
    pub pid: u32,
    child: Option<Child>,
    /// Temporary directory of a started daemon (socket, config, log).
    dir: Option<tempfile::TempDir>,
    /// `daemon.max_connections` written into the generated configuration.
    pub max_connections: Option<usize>,
}

/// How a daemon is started.
pub struct StartOptions<'a> {
    pub reefd: &'a Path,
    pub device: &'a str,
    pub policy: &'a str,
    pub max_connections: usize,
    pub models_dir: Option<&'a Path>,
}

impl Daemon {
    /// Starts `reefd start --foreground` with a generated configuration
    /// in a temporary directory and waits (30 s at most) until it answers.
    pub fn start(o: &StartOptions<'_>) -> Result<Daemon> {
        let dir = tempfile::Builder::new()
            .prefix("reef-hostile-")
            .tempdir()
            .context("creating a temporary directory for the daemon")?;
        let socket = dir.path().join("reefd.sock");
        let cfg = dir.path().join("reefd.toml");
        let models = match o.models_dir {
            Some(m) => format!("models_dir = {:?}\n", m.display().to_string()),
            None => String::new(),
        };
        std::fs::write(
            &cfg,
            format!(
                "# written by reef-bench hostile\n[daemon]\nsocket = {:?}\npid_file = {:?}\n\
                 log_level = \"info\"\nmax_connections = {}\n[device]\ndevice = {:?}\n{models}\
                 [scheduler]\npolicy = {:?}\n[metrics]\nenabled = false\n",
                socket.display().to_string(),
                dir.path().join("reefd.pid").display().to_string(),
                o.max_connections,
                o.device,
                o.policy,
            ),
        )?;
        let log = std::fs::File::create(dir.path().join("reefd.log"))?;
        let child = Command::new(o.reefd)
            .args(["start", "--foreground", "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", o.reefd.display()))?;
        let pid = child.id();
        let mut d = Daemon {
            socket,
            pid,
            child: Some(child),
            dir: Some(dir),
            max_connections: Some(o.max_connections),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = Client::connect(&d.socket) {
                if c.status().is_ok() {
                    return Ok(d);
                }
            }
            if let Some(c) = d.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("reefd exited at start ({st}); its log:\n{}", d.log_tail(30));
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "reefd did not answer within 30 s; its log:\n{}",
                    d.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A daemon already serving on `socket` (its pid from `status`).
    pub fn attach(socket: &Path) -> Result<Daemon> {
        let mut c = Client::connect(socket)?;
        let st = c.status()?;
        Ok(Daemon {
            socket: socket.to_path_buf(),
            pid: st.pid,
            child: None,
            dir: None,
            max_connections: None,
        })
    }

    pub fn log_path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().join("reefd.log"))
    }

    /// The last `n` lines of a started daemon's log.
    pub fn log_tail(&self, n: usize) -> String {
        let Some(p) = self.log_path() else {
            return String::new();
        };
        let s = std::fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Whether a started daemon has exited (never for an attached one).
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(st)) => Some(st.to_string()),
            _ => None,
        }
    }

    /// Stops a started daemon: SIGTERM, then SIGKILL after 15 s. Returns
    /// how it ended.
    pub fn stop(&mut self) -> String {
        let Some(mut c) = self.child.take() else {
            return "left running (attached)".into();
        };
        if let Ok(Some(st)) = c.try_wait() {
            return format!("had already exited: {st}");
        }
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(st)) = c.try_wait() {
                return format!("exited after SIGTERM: {st}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        "did not exit within 15 s of SIGTERM; killed".into()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
