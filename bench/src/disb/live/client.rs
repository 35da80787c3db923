//! One DISB client on the wall clock: its planned launches, its requests
//! to the daemon, and what it measured.

use super::*;

/// What one client thread measured.
#[derive(Default)]
pub(super) struct ClientOut {
    pub(super) stats: ClientStats,
    /// Daemon-side latency of completed requests, us.
    pub(super) daemon_us: Vec<f64>,
    /// Control path (arrival at the socket to first kernel queued), us.
    pub(super) control_us: Vec<f64>,
    /// Actual send minus planned launch, us.
    pub(super) late_us: Vec<f64>,
    pub(super) verified: u64,
    pub(super) corrupted: u64,
    pub(super) unchecked: u64,
    pub(super) error: Option<String>,
}

/// State the client threads share.
pub(super) struct Shared {
    pub(super) t0: Instant,
    pub(super) end: Time,
    /// Per dependent client: results seen per serial number.
    pub(super) dep_ready: Mutex<Vec<BTreeMap<u64, usize>>>,
    pub(super) cv: Condvar,
    pub(super) abort: AtomicBool,
}

impl Shared {
    pub(super) fn now(&self) -> Time {
        self.t0.elapsed().as_nanos() as Time
    }
}

pub(super) struct ClientJob<'a> {
    pub(super) ci: usize,
    pub(super) plan: ClientPlan,
    pub(super) model: &'a str,
    pub(super) client: Client,
    pub(super) stream: u64,
    pub(super) dependents: Vec<usize>,
    pub(super) rt_only: bool,
}

pub(super) fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// DISB's client loop on the wall clock.
pub(super) fn client_loop(mut job: ClientJob<'_>, sh: &Shared) -> ClientOut {
    let mut out = ClientOut::default();
    let need = match &job.plan.gen {
        Gen::Dependent { prev } => Some(prev.len()),
        _ => None,
    };
    let mut planned = match need {
        Some(_) => None,
        None => next_launch(&mut job.plan.gen, 0, sh.end),
    };
    loop {
        if sh.abort.load(Ordering::Relaxed) {
            break;
        }
        let t = match (need, planned) {
            (None, None) => break,
            (None, Some(t)) => {
                sleep_until(sh.t0 + Duration::from_nanos(t));
                t
            }
            (Some(need), _) => {
                // Wait until every input has returned a result of one serial.
                let mut g = sh.dep_ready.lock().expect("no panics hold the lock");
                let ready = loop {
                    let hit = g[job.ci].iter().find(|(_, &c)| c >= need).map(|(&s, _)| s);
                    if let Some(serial) = hit {
                        // DISB gives up older incomplete serials.
                        g[job.ci] = g[job.ci].split_off(&(serial + 1));
                        break true;
                    }
                    let now = sh.now();
                    if now >= sh.end || sh.abort.load(Ordering::Relaxed) {
                        break false;
                    }
                    g = sh
                        .cv
                        .wait_timeout(g, Duration::from_nanos(sh.end - now))
                        .expect("no panics hold the lock")
                        .0;
                };
                drop(g);
                let now = sh.now();
                if !ready || now >= sh.end {
                    break;
                }
                now
            }
        };
        let sent = Instant::now();
        let sent_rel = sent.duration_since(sh.t0).as_nanos() as Time;
        out.late_us.push(sent_rel.saturating_sub(t) as f64 / 1e3);
        out.stats.issued += 1;
        let r = job.client.infer(job.stream, job.model);
        let done = Instant::now();
        let done_rel = done.duration_since(sh.t0).as_nanos() as Time;
        match r {
            Ok(r) => {
                match r.outputs_verified {
                    Some(true) => out.verified += 1,
                    Some(false) => out.corrupted += 1,
                    None => out.unchecked += 1,
                }
                // As in virtual time: a reply after the end is not seen.
                if done_rel > sh.end {
                    break;
                }
                out.stats.completed += 1;
                out.stats.latencies.push((done - sent).as_nanos() as Time);
                out.daemon_us.push(r.latency_us);
                if let Some(c) = r.control_path_us {
                    out.control_us.push(c);
                }
                if !job.dependents.is_empty() {
                    let serial = out.stats.completed;
                    let mut g = sh.dep_ready.lock().expect("no panics hold the lock");
                    for &d in &job.dependents {
                        *g[d].entry(serial).or_default() += 1;
                    }
                    sh.cv.notify_all();
                }
            }
            Err(e)
                if job.rt_only
                    && job.plan.class == Class::BestEffort
                    && e.code() == Some(ErrorCode::Unsupported) =>
            {
                // rt-only refuses best-effort work (virtual: RequestRejected).
                out.stats.issued -= 1;
                out.stats.rejected = true;
                break;
            }
            Err(e) => {
                out.error = Some(format!(
                    "client {} ({} on stream {}): {e}",
                    job.plan.name, job.model, job.stream
                ));
                sh.abort.store(true, Ordering::Relaxed);
                sh.cv.notify_all();
                break;
            }
        }
        planned = next_launch(&mut job.plan.gen, done_rel, sh.end);
    }
    // Wake dependents waiting for this client.
    sh.cv.notify_all();
    out
}
