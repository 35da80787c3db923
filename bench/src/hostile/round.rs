//! One load round: the connections opened, driven and closed, and what each kind got.

use super::*;

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
pub(super) fn load_round(
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
    let fifo = super::rt::rt_sched(a.rt_client_fifo).0;
    let loaded = rt_phase(
        rt,
        stream,
        &a.model,
        a.rt_requests,
        gap,
        deadline,
        Some(&sh.stop),
    );
    drop(fifo);
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
