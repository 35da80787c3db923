//! Test support: a reefd child process in a temporary directory.
#![allow(dead_code)]

use reefd::client::Client;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub pid_file: PathBuf,
}

pub fn reefd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_reefd")
}

pub fn reefctl_bin() -> &'static str {
    env!("CARGO_BIN_EXE_reefctl")
}

impl Daemon {
    /// Starts `reefd start --foreground` with `extra` TOML appended to the
    /// test's [daemon] section.
    pub fn start(daemon_extra: &str) -> Daemon {
        Self::start_with(daemon_extra, "")
    }

    pub fn start_with(daemon_extra: &str, other_sections: &str) -> Daemon {
        Self::start_on("sim:mi50", daemon_extra, other_sections)
    }

    /// Starts reefd on `device` (e.g. `sim:mi50x4`).
    pub fn start_on(device: &str, daemon_extra: &str, other_sections: &str) -> Daemon {
        Self::start_full(device, daemon_extra, "", other_sections)
    }

    /// Starts reefd on `device` with `device_extra` TOML in its [device]
    /// section (e.g. `cuda_library = "..."`).
    pub fn start_full(
        device: &str,
        daemon_extra: &str,
        device_extra: &str,
        other_sections: &str,
    ) -> Daemon {
        Self::start_env(device, daemon_extra, device_extra, other_sections, &[])
    }

    /// As [`Self::start_full`], with `env` set for the daemon process (e.g.
    /// the simulated libcuda's device preset).
    pub fn start_env(
        device: &str,
        daemon_extra: &str,
        device_extra: &str,
        other_sections: &str,
        env: &[(&str, &str)],
    ) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        // Let other users traverse to the socket (the uid-drop test).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("reefd.sock");
        let pid_file = dir.path().join("reefd.pid");
        let cfg = dir.path().join("reefd.toml");
        let metrics = if other_sections.contains("[metrics]") {
            ""
        } else {
            "[metrics]\nenabled = false\n"
        };
        std::fs::write(
            &cfg,
            format!(
                "[daemon]\nsocket = {:?}\npid_file = {:?}\nlog_level = \"debug\"\n{daemon_extra}\n[device]\ndevice = {device:?}\n{device_extra}\n{metrics}{other_sections}\n",
                socket, pid_file
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("reefd.log")).unwrap();
        let child = Command::new(reefd_bin())
            .args(["start", "--foreground", "--config"])
            .arg(&cfg)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn reefd");
        let d = Daemon {
            child: Some(child),
            dir,
            socket,
            pid_file,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut c) = Client::connect(&self.socket) {
                if c.status().is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("reefd did not come up; log:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("reefd.log")).unwrap_or_default()
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket).expect("connect")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// Sends a signal and waits for the exit status.
    pub fn signal_and_wait(&mut self, sig: nix::sys::signal::Signal) -> std::process::ExitStatus {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("reefd did not exit after {sig}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn reefctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(reefctl_bin())
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run reefctl")
    }
}

impl Daemon {
    /// Issue 25 item 4: once a test's clients are gone, nothing it did
    /// outlives its requests: no task, stream, bound BE client or device
    /// task count. Waits up to 10 s for requests still finishing on the
    /// device (a closed stream's running request finishes unobserved). The
    /// Open Inference Protocol fronts' own streams (label `kserve:LEVEL`)
    /// live as long as the daemon and are not counted; their tasks are.
    pub fn check_nothing_left(&self) -> Result<(), String> {
        let mut c = match Client::connect(&self.socket) {
            Ok(c) => c,
            Err(_) => return Ok(()), // the test stopped the daemon
        };
        let mut last = String::new();
        let clean = wait_until(Duration::from_secs(10), || {
            let (Ok(stats), Ok(streams), Ok(tasks), Ok(status)) =
                (c.stats(), c.streams(), c.tasks(), c.status())
            else {
                last = "the daemon stopped answering".into();
                return false;
            };
            let counts: Vec<u32> = status.devices.iter().map(|d| d.tasks).collect();
            let streams: Vec<_> = streams
                .into_iter()
                .filter(|s| !s.label.as_deref().is_some_and(|l| l.starts_with("kserve:")))
                .collect();
            last = format!(
                "engine tasks {}, BE clients held {}, streams {}, tasks {}, device task counts {counts:?}",
                stats.engine_tasks,
                stats.engine_clients_held,
                streams.len(),
                tasks.len()
            );
            stats.engine_tasks == 0
                && stats.engine_clients_held == 0
                && streams.is_empty()
                && tasks.is_empty()
                && counts.iter().all(|&n| n == 0)
        });
        if clean {
            Ok(())
        } else {
            Err(last)
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.is_some() && !std::thread::panicking() {
            if let Err(e) = self.check_nothing_left() {
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                panic!("the daemon kept state after the test's requests: {e}");
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `N` distinct free loopback ports (bound, then released for the
/// daemon). All `N` are held until all are picked: one released before
/// the next is bound can be handed out again, and two fronts then ask
/// for the same port ("Address already in use").
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// A test that cannot run here logs why (stderr, and a line in the file
/// `REEF_SKIP_LOG` names, as `reef_ioctl::fake::skip` does) and returns.
/// Unlike that function it never panics under `REEF_REQUIRE_HW_FAKES=1`:
/// what is missing here is a GPU, not a FUSE fake.
pub fn log_skip(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("{test}: {why}");
    eprintln!("{line}");
    if let Some(log) = std::env::var_os("REEF_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Polls `f` until it returns true or the timeout passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// The CUDA test model of the simulated libcuda (`model.toml`, its PTX
/// and weights, and the REEF schedule `two-kernel.json`).
pub fn two_kernel_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../libcuda-sim/models/two-kernel")
        .canonicalize()
        .unwrap()
}

/// A copy of the two-kernel model named `name` whose first kernel's block
/// (2048 threads) the driver refuses at launch (CUDA_ERROR_INVALID_VALUE:
/// at most 1024 threads per block).
pub fn refused_model(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    for f in ["kernels.ptx", "weights.bin"] {
        std::fs::copy(two_kernel_dir().join(f), dir.join(f)).unwrap();
    }
    std::fs::copy(
        two_kernel_dir().join("two-kernel.json"),
        dir.join(format!("{name}.json")),
    )
    .unwrap();
    let toml = std::fs::read_to_string(two_kernel_dir().join("model.toml")).unwrap();
    let wide = toml.replacen("block = [256, 1, 1]", "block = [2048, 1, 1]", 1);
    assert_ne!(wide, toml);
    std::fs::write(dir.join("model.toml"), wide).unwrap();
    t
}

/// The tiny conv + relu (`depth` times) + max pool + gemm network of
/// compile/tests/make_tiny.py compiled by `.venv/bin/reef-compile` for
/// sm_80 and sm_90 (as reef-trap's and reef-bench's compiled-model tests
/// do; about 4 s), in `<tmp>/models/tiny`.
pub fn compiled_tiny(depth: u32) -> tempfile::TempDir {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv/bin");
    assert!(
        venv.join("reef-compile").is_file(),
        "run scripts/setup.sh: it installs .venv/bin/reef-compile"
    );
    let t = tempfile::tempdir().unwrap();
    let onnx = t.path().join("tiny.onnx");
    let run = |c: &mut Command| {
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new(venv.join("python"))
        .arg(root.join("compile/tests/make_tiny.py"))
        .arg(&onnx)
        .args(["--depth", &depth.to_string()]));
    // This checkout's compiler (the venv's .pth names whichever checkout
    // ran the setup).
    run(Command::new(venv.join("reef-compile"))
        .env("PYTHONPATH", root.join("compile"))
        .arg(&onnx)
        .args(["--arch", "sm_80", "--arch", "sm_90", "--no-reference", "-o"])
        .arg(t.path().join("models/tiny")));
    t
}

/// reef-libcuda-sim's cdylib, which cargo builds beside the test binaries
/// (a dev-dependency): the test-device libcuda the CUDA tests load.
pub fn sim_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libreef_libcuda_sim.so");
    assert!(
        lib.is_file(),
        "{} missing: build reef-libcuda-sim",
        lib.display()
    );
    lib
}

/// The driver library the in-process CUDA tests load: the simulated one,
/// unless `REEF_TEST_CUDA=system` (then `None`: the system's libcuda).
pub fn cuda_library() -> Option<PathBuf> {
    if std::env::var("REEF_TEST_CUDA").as_deref() == Ok("system") {
        return None;
    }
    Some(sim_library())
}

/// One driver (one simulated GPU, as one GPU on a host) per process: the
/// in-process CUDA tests run one at a time so that memory figures are theirs.
static CUDA_SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn cuda_serial() -> std::sync::MutexGuard<'static, ()> {
    CUDA_SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
