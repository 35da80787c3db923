//! The live control path of reefd (REEF §6.4 measures preemption latency; the
//! issue's target is the daemon's share): from an RT request's arrival at the
//! socket, while best-effort work runs, to its first kernel entering the
//! device queue. Starts the real `reefd` binary on `sim:mi50` with the `reef`
//! policy, keeps resnet152 running as best-effort load, sends vgg RT requests
//! at random gaps, and prints p50/p99 in microseconds (target p99 <= 50 us).
//!
//! Two clocks: the daemon's, from when it has read the request (its own
//! share), and the client's (`first_kernel_monotonic_ns` against the instant
//! the client's write returned, both CLOCK_MONOTONIC), which also counts the
//! time the request waited in the socket to be read.
//!
//! It runs the daemon three times, side by side in one run: with `poll =
//! true` (the default: one thread serves the socket and runs the device),
//! with `poll = false` (sleeping socket threads and a tick pacer), and with
//! `poll = true` and the device thread on a CPU of its own at nice -20
//! (`daemon.device_cpus`, `daemon.device_nice`; this process's client
//! threads then run on the other CPUs). Each row also says how often the OS
//! preempted the daemon's threads, and the socket's own floor is measured
//! placed both ways.
//!
//! Run: `cargo bench -p reefd --bench control_path`
//! (REEF_BENCH_RT_REQUESTS sets the number of RT requests per mode, default
//! 1000; REEF_BENCH_POLICY the policy, default reef; REEF_BENCH_DAEMON_LOG a
//! file for the daemon's log, at the level RUST_LOG sets;
//! REEF_BENCH_RT_PRIORITY the daemon's `realtime_priority`, default 0;
//! REEF_BENCH_POLL=1 or 0 runs one polling mode only; REEF_BENCH_PIN=1 or 0
//! only the pinned or the unpinned runs; REEF_BENCH_NO_SOCKET_FLOOR=1 skips
//! the floor.)

use reefd::client::Client;
use reefd::metrics::summarize;
use reefd::protocol::Priority;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("REEF_BENCH_RT_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let policy = std::env::var("REEF_BENCH_POLICY").unwrap_or_else(|_| "reef".into());
    let rt_prio: u8 = std::env::var("REEF_BENCH_RT_PRIORITY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let polls: Vec<bool> = match std::env::var("REEF_BENCH_POLL").as_deref() {
        Ok("1") => vec![true],
        Ok("0") => vec![false],
        _ => vec![true, false],
    };
    // The CPU a pinned daemon's device thread gets; the clients get the rest.
    let cpus = allowed_cpus();
    let own_cpu = (cpus.len() >= 2).then(|| *cpus.last().unwrap());
    let pins: Vec<bool> = match std::env::var("REEF_BENCH_PIN").as_deref() {
        Ok("1") => vec![true],
        Ok("0") => vec![false],
        _ => vec![false, true],
    };
    if own_cpu.is_none() && pins.contains(&true) {
        println!("(one CPU: the pinned runs are skipped)");
    }
    let floor = std::env::var_os("REEF_BENCH_NO_SOCKET_FLOOR").is_none();
    for &pin in &pins {
        let Some(placement) = (if pin { own_cpu.map(Some) } else { Some(None) }) else {
            continue;
        };
        for &poll in &polls {
            // Unpinned, only the default poll mode is worth a second row.
            if pin && !poll {
                continue;
            }
            run(n, &policy, rt_prio, poll, placement, &cpus)?;
        }
        if floor {
            socket_floor(n, placement, &cpus)?;
        }
    }
    Ok(())
}

/// The CPUs this process may use.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity(0) fills the calling thread's set; CPU_ISSET
    // reads it below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Restricts the calling thread (and the threads it starts afterwards) to
/// `cpus`.
fn pin_self(cpus: &[usize]) {
    // SAFETY: as in `allowed_cpus`; sched_setaffinity(0) is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Pinned runs: the daemon's device thread on `own` at nice -20, this
/// process's client threads on the other CPUs. Restores on drop.
struct Pinned<'a>(&'a [usize]);

impl<'a> Pinned<'a> {
    fn new(own: Option<usize>, cpus: &'a [usize]) -> Self {
        if let Some(own) = own {
            let rest: Vec<usize> = cpus.iter().copied().filter(|&c| c != own).collect();
            pin_self(&rest);
        }
        Pinned(cpus)
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        pin_self(self.0);
    }
}

fn run(
    n: usize,
    policy: &str,
    rt_prio: u8,
    poll: bool,
    own_cpu: Option<usize>,
    cpus: &[usize],
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("reefd.sock");
    let config = dir.path().join("reefd.toml");
    let placement = match own_cpu {
        Some(c) => format!("device_cpus = [{c}]\ndevice_nice = -20\n"),
        None => String::new(),
    };
    std::fs::write(
        &config,
        format!("[daemon]\nrealtime_priority = {rt_prio}\npoll = {poll}\n{placement}"),
    )?;

    let mut child = Command::new(env!("CARGO_BIN_EXE_reefd"))
        .args([
            "start",
            "--foreground",
            "--no-metrics",
            "--device",
            "sim:mi50",
        ])
        .arg("--policy")
        .arg(policy)
        .arg("--config")
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .arg("--pid-file")
        .arg(dir.path().join("reefd.pid"))
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stderr(match std::env::var_os("REEF_BENCH_DAEMON_LOG") {
            Some(p) => Stdio::from(std::fs::File::create(p)?),
            None => Stdio::null(),
        })
        .spawn()?;
    // After the daemon started: it must not inherit the clients' CPUs.
    let _pinned = Pinned::new(own_cpu, cpus);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut admin = loop {
        if let Ok(mut c) = Client::connect(&socket) {
            if c.status().is_ok() {
                break c;
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            anyhow::bail!("reefd did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    admin.load_model("vgg", None)?;
    admin.load_model("resnet152", None)?;

    // Best-effort load: two closed-loop clients.
    let stop = Arc::new(AtomicBool::new(false));
    let mut be = Vec::new();
    for _ in 0..2 {
        let stop = stop.clone();
        let socket = socket.clone();
        be.push(std::thread::spawn(move || -> anyhow::Result<u64> {
            let mut c = Client::connect(&socket)?;
            let s = c.register(Priority::Be, Some("bench-be"))?;
            let mut done = 0;
            while !stop.load(Ordering::Relaxed) {
                c.infer(s.stream, "resnet152")?;
                done += 1;
            }
            Ok(done)
        }));
    }
    std::thread::sleep(Duration::from_millis(50));

    let mut rt = Client::connect(&socket)?;
    let s = rt.register(Priority::Rt, Some("bench-rt"))?;
    let preempted_before = involuntary_switches(child.id());
    let started = Instant::now();
    let mut control = Vec::with_capacity(n);
    let mut from_send = Vec::with_capacity(n);
    let mut waited = Vec::with_capacity(n);
    let mut normalized = Vec::with_capacity(n);
    let mut verified = 0;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..n {
        // 1-6 ms between requests, so that BE work is on the device again.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(1000 + rng % 5000));
        let r = rt.infer(s.stream, "vgg")?;
        if let Some(c) = r.control_path_us {
            control.push(c);
        }
        if let Some(k) = r.first_kernel_monotonic_ns {
            let us = k.saturating_sub(rt.last_send_monotonic_ns()) as f64 / 1e3;
            from_send.push(us);
            if let Some(c) = r.control_path_us {
                // Until the daemon had read it (its arrival stamp).
                waited.push((us - c).max(0.0));
            }
        }
        if let Some(x) = r.normalized_latency {
            normalized.push(x);
        }
        if r.outputs_verified == Some(true) {
            verified += 1;
        }
    }
    let preempted = involuntary_switches(child.id()).saturating_sub(preempted_before);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut be_done = 0;
    for h in be {
        be_done += h
            .join()
            .map_err(|_| anyhow::anyhow!("BE thread panicked"))??;
    }
    let stats = admin.stats()?;
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();

    let c = summarize(control.iter().copied());
    let s = summarize(from_send.iter().copied());
    let w = summarize(waited.iter().copied());
    let x = summarize(normalized.iter().copied());
    let placed = match own_cpu {
        Some(c) => format!("device thread on CPU {c} at nice -20 (daemon.device_cpus, daemon.device_nice), clients on the other CPUs"),
        None => "unpinned".into(),
    };
    println!(
        "reefd live control path (sim:mi50, policy {policy}, 2 BE resnet152 clients, RT vgg, daemon.poll {poll}, daemon.realtime_priority {rt_prio}, {placed})"
    );
    println!(
        "  RT request read by the daemon -> first kernel in device queue:       n={} p50 {:.1} us  p99 {:.1} us  mean {:.1} us  max {:.1} us  (target p99 <= 50 us)",
        c.count, c.p50_us, c.p99_us, c.mean_us, c.max_us
    );
    println!(
        "  RT request in the socket (client's write returned) -> first kernel: n={} p50 {:.1} us  p99 {:.1} us  mean {:.1} us  max {:.1} us  (also counts the wait to be read)",
        s.count, s.p50_us, s.p99_us, s.mean_us, s.max_us
    );
    println!(
        "    of which waiting in the socket to be read:                          n={} p50 {:.1} us  p99 {:.1} us  mean {:.1} us  max {:.1} us",
        w.count, w.p50_us, w.p99_us, w.mean_us, w.max_us
    );
    println!(
        "  RT normalized latency: mean {:.3} p50 {:.3} p99 {:.3}; outputs verified {verified}/{n}",
        x.mean_us, x.p50_us, x.p99_us
    );
    println!(
        "  the daemon's threads were preempted by the OS {preempted} times in {elapsed:.1} s (involuntary context switches)"
    );
    println!(
        "  BE inferences completed {be_done}; preemptions by level {:?}; restores {}",
        stats.preemptions, stats.restores
    );
    Ok(())
}

/// Involuntary context switches of all threads of process `pid` so far
/// (0 where /proc does not say).
fn involuntary_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The floor the socket sets on this machine, for comparison: a bare
/// single-threaded tokio runtime with one task yielding in a loop (like
/// reefd's poll loop, without the simulator) reads 16-byte messages a client
/// thread writes at the same 1-6 ms gaps; from the client's write returning
/// to the read returning, on CLOCK_MONOTONIC.
fn socket_floor(n: usize, own_cpu: Option<usize>, cpus: &[usize]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::sync::atomic::AtomicU64;
    use tokio::io::AsyncReadExt;
    // When each message's write returned (0: not yet).
    let written: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("floor.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let waits = rt.block_on(async {
        let listener = tokio::net::UnixListener::bind(&path)?;
        // Placed like the daemon's device thread (this thread runs the
        // runtime); the client thread below moves to the other CPUs.
        let rest: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|&c| Some(c) != own_cpu)
            .collect();
        if let Some(c) = own_cpu {
            pin_self(&[c]);
            // SAFETY: setpriority on this thread only.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -20) };
        }
        let spin = Arc::new(AtomicBool::new(true));
        let spinning = spin.clone();
        tokio::spawn(async move {
            while spinning.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
            }
        });
        let client_path = path.clone();
        let stamps = written.clone();
        let client = std::thread::spawn(move || -> std::io::Result<()> {
            // Off the runtime's CPU when it is pinned.
            pin_self(&rest);
            let mut s = std::os::unix::net::UnixStream::connect(client_path)?;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            for i in 0..n {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                std::thread::sleep(Duration::from_micros(1000 + rng % 5000));
                s.write_all(&[7u8; 16])?;
                stamps[i].store(reefd::protocol::monotonic_ns(), Ordering::SeqCst);
            }
            Ok(())
        });
        let (mut conn, _) = listener.accept().await?;
        let mut waits = Vec::with_capacity(n);
        let mut buf = [0u8; 16];
        for stamp in written.iter() {
            conn.read_exact(&mut buf).await?;
            let read = reefd::protocol::monotonic_ns();
            // The write may return after the read: wait for its stamp (it
            // then counts as 0).
            let mut w = stamp.load(Ordering::SeqCst);
            while w == 0 {
                std::hint::spin_loop();
                w = stamp.load(Ordering::SeqCst);
            }
            waits.push(read.saturating_sub(w) as f64 / 1e3);
        }
        spin.store(false, Ordering::Relaxed);
        if own_cpu.is_some() {
            pin_self(cpus);
            // SAFETY: back to nice 0 (the runtime thread is this thread).
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 0) };
        }
        client
            .join()
            .map_err(|_| anyhow::anyhow!("client thread panicked"))??;
        anyhow::Ok(waits)
    })?;
    let w = summarize(waits.iter().copied());
    let placed = match own_cpu {
        Some(c) => format!("runtime thread on CPU {c} at nice -20, client on the other CPUs"),
        None => "unpinned".into(),
    };
    println!("the socket alone (bare tokio current-thread runtime, a task yielding in a loop, 1-6 ms gaps, {placed})");
    println!(
        "  client's write returned -> read returned: n={} p50 {:.1} us  p99 {:.1} us  mean {:.1} us  max {:.1} us",
        w.count, w.p50_us, w.p99_us, w.mean_us, w.max_us
    );
    Ok(())
}
