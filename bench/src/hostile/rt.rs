//! The closed-loop RT client of one phase and its latency summary.

use super::*;

/// Latencies of one RT phase.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RtPhase {
    pub requests: usize,
    pub completed: usize,
    pub failed: usize,
    /// From the client's send to the reply read, µs.
    pub client_us: Summary,
    /// The daemon's `latency_us` (arrival at the socket to completion).
    pub daemon_us: Summary,
    /// From the client's send (its write returned) to the request's first
    /// kernel in the device queue, both on CLOCK_MONOTONIC: counts the time
    /// the request waited in the socket to be read.
    pub send_to_first_kernel_us: Summary,
    /// After completion, on CLOCK_MONOTONIC: from the last kernel's
    /// completion on the device to the daemon seeing it, from then to the
    /// connection's writer writing the answer, and from then to the
    /// client having read it.
    pub done_to_seen_us: Summary,
    pub seen_to_written_us: Summary,
    pub written_to_read_us: Summary,
    /// Outputs the daemon did not verify as equal to an unpreempted run.
    pub not_verified: usize,
    pub preempted_tasks: usize,
    pub seconds: f64,
    /// The first few failures.
    pub errors: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Summary {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub(super) fn summary(v: &[f64]) -> Summary {
    if v.is_empty() {
        return Summary::default();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| s[(((s.len() as f64) * p).ceil() as usize).clamp(1, s.len()) - 1];
    Summary {
        mean: s.iter().sum::<f64>() / s.len() as f64,
        p50: q(0.50),
        p99: q(0.99),
        max: s[s.len() - 1],
    }
}

/// The RT client's thread under SCHED_FIFO while this lives
/// (`--rt-client-fifo`), as a latency-critical client is run on a host it
/// shares: the quiet and the loaded phases then measure the daemon, not
/// how long the operating system leaves the client's wake-up behind the
/// load generator's own threads on the same cores (the written→read gap,
/// docs/daemon.md). Only the calling thread: threads and processes the
/// benchmark starts elsewhere keep their class. The old class is restored
/// on drop.
pub(super) struct FifoGuard {
    policy: libc::c_int,
    param: libc::sched_param,
}

impl FifoGuard {
    /// SCHED_FIFO at priority 10 for the calling thread; the error says
    /// why not (EPERM without CAP_SYS_NICE).
    pub(super) fn new() -> std::result::Result<Self, String> {
        // SAFETY: pthread_self is always valid for the calling thread;
        // the out-pointers point to live locals.
        unsafe {
            let me = libc::pthread_self();
            let mut policy = 0;
            let mut param: libc::sched_param = std::mem::zeroed();
            let e = libc::pthread_getschedparam(me, &mut policy, &mut param);
            if e != 0 {
                return Err(std::io::Error::from_raw_os_error(e).to_string());
            }
            let fifo = libc::sched_param { sched_priority: 10 };
            let e = libc::pthread_setschedparam(me, libc::SCHED_FIFO, &fifo);
            if e != 0 {
                return Err(format!(
                    "SCHED_FIFO refused: {} (needs root or CAP_SYS_NICE)",
                    std::io::Error::from_raw_os_error(e)
                ));
            }
            Ok(FifoGuard { policy, param })
        }
    }
}

impl Drop for FifoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe {
            libc::pthread_setschedparam(libc::pthread_self(), self.policy, &self.param);
        }
    }
}

/// The RT client's scheduling for one phase: SCHED_FIFO if asked for and
/// allowed, else the default; the label goes into the report.
pub(super) fn rt_sched(fifo: bool) -> (Option<FifoGuard>, String) {
    if !fifo {
        return (None, "SCHED_OTHER".into());
    }
    match FifoGuard::new() {
        Ok(g) => (Some(g), "SCHED_FIFO 10".into()),
        Err(e) => (None, format!("SCHED_OTHER ({e})")),
    }
}

/// The closed-loop RT client: `n` blocking inferences one after another,
/// each waited for (at most `REPLY_TIMEOUT`); three unanswered in a row end
/// the phase (a hung daemon).
pub(super) fn rt_phase(
    c: &mut Client,
    stream: u64,
    model: &str,
    n: usize,
    gap: Duration,
    deadline: Instant,
    stop: Option<&AtomicBool>,
) -> RtPhase {
    let mut p = RtPhase {
        requests: n,
        ..Default::default()
    };
    let (mut cl, mut dm) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut cp = Vec::with_capacity(n);
    let (mut ds, mut sw, mut wr) = (Vec::new(), Vec::new(), Vec::new());
    let t0 = Instant::now();
    let mut timeouts_in_row = 0;
    for _ in 0..n {
        if Instant::now() >= deadline || stop.is_some_and(|s| s.load(Ordering::Acquire)) {
            p.errors.push("stopped: time limit or daemon gone".into());
            break;
        }
        let sent = Instant::now();
        let body = RequestBody::Infer {
            stream,
            model: model.to_string(),
            wait: true,
            qos_ms: None,
            inputs: None,
            outputs: Vec::new(),
        };
        let r = c
            .send(body)
            .and_then(|id| load::wait_for(c, id, REPLY_TIMEOUT));
        let us = sent.elapsed().as_secs_f64() * 1e6;
        let read_ns = reefd::protocol::monotonic_ns();
        match r {
            Ok(ServerMessage::Reply {
                result: Reply::InferDone(t),
                ..
            }) => {
                timeouts_in_row = 0;
                p.completed += 1;
                cl.push(us);
                dm.push(t.latency_us);
                if let Some(fk) = t.first_kernel_monotonic_ns {
                    cp.push(fk.saturating_sub(c.last_send_monotonic_ns()) as f64 / 1e3);
                }
                if let Some(tl) = t.timeline.as_deref().filter(|tl| tl.written_ns > 0) {
                    let us = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e3;
                    ds.push(us(tl.done_ns, tl.seen_ns));
                    sw.push(us(tl.seen_ns, tl.written_ns));
                    wr.push(us(tl.written_ns, read_ns));
                }
                if t.outputs_verified == Some(false) {
                    p.not_verified += 1;
                }
                if t.preemptions > 0 {
                    p.preempted_tasks += 1;
                }
            }
            other => {
                p.failed += 1;
                let to = matches!(other, Err(ClientError::Timeout));
                let closed = matches!(other, Err(ClientError::Closed));
                let msg = match other {
                    Ok(ServerMessage::Error { code, message, .. }) => format!("{code}: {message}"),
                    Ok(m) => format!("unexpected answer {m:?}"),
                    Err(e) => e.to_string(),
                };
                if p.errors.len() < 5 {
                    p.errors.push(msg);
                }
                timeouts_in_row = if to { timeouts_in_row + 1 } else { 0 };
                if timeouts_in_row >= 3 || closed {
                    p.errors
                        .push("the daemon stopped answering the RT client".into());
                    break;
                }
            }
        }
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
    }
    p.seconds = t0.elapsed().as_secs_f64();
    p.client_us = summary(&cl);
    p.daemon_us = summary(&dm);
    p.send_to_first_kernel_us = summary(&cp);
    p.done_to_seen_us = summary(&ds);
    p.seen_to_written_us = summary(&sw);
    p.written_to_read_us = summary(&wr);
    p
}
