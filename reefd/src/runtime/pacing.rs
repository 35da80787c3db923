//! Catching the engine up to the wall clock and delivering completions
//! (the module doc of [`super`]): the poll loop (default) or the pacer
//! thread, and what keeps the RT request path warm between requests.

use super::*;

/// Events due this soon are waited for by polling the clock instead of a
/// timed sleep, which on Linux wakes tens of microseconds late.
pub(super) const SPIN_WINDOW: Duration = Duration::from_micros(100);

/// How often the poll loop re-parses a canned `infer` frame while the device
/// has work (see [`warm_request_path`]).
pub(super) const WARM_INTERVAL: Duration = Duration::from_micros(50);

/// Keeps the request parser's code and data in the CPU caches. Between two
/// RT requests the thread that serves the socket spends milliseconds
/// simulating the device, which evicts them: parsing an `infer` frame then
/// took 4.1 µs at p50 in the live control-path benchmark, against 1.2 µs
/// when this runs every [`WARM_INTERVAL`] (0.3 µs per call when warm, so
/// well under 1% of the polling thread). It has no effect on any state.
pub(super) fn warm_request_path() {
    let _ = std::hint::black_box(crate::protocol::parse_request(std::hint::black_box(
        WARM_FRAME,
    )));
}

/// The frame [`warm_request_path`] parses: an RT client's `infer`.
pub(super) const WARM_FRAME: &[u8] =
    br#"{"id":0,"op":"infer","stream":0,"model":"vgg","wait":true}"#;

impl Runtime {
    /// Starts the thread that paces the engine to the wall clock, at
    /// SCHED_FIFO priority `realtime_priority` when that is not 0.
    pub fn start_pacer(
        self: &Arc<Self>,
        realtime_priority: u8,
        placement: Placement,
    ) -> std::thread::JoinHandle<()> {
        let rt = Arc::clone(self);
        std::thread::Builder::new()
            .name("reefd-pacer".into())
            .spawn(move || {
                if let Err(e) = placement.apply() {
                    tracing::error!("{e:#}; the pacer runs where the kernel places it");
                }
                set_realtime_priority(realtime_priority);
                rt.pacer()
            })
            .expect("spawning the pacer thread")
    }

    pub(super) fn pacer(&self) {
        // Wake up on time: the default timer slack of 50 us would delay
        // every completion by up to that much.
        #[cfg(target_os = "linux")]
        let _ = nix::sys::prctl::set_timerslack(1);
        let tick = self.settings.pacer_tick.as_nanos() as Nanos;
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let now = self.catch_up(&mut st);
            if !st.deliveries.is_empty() {
                self.unlock(st);
                st = self.lock();
                continue;
            }
            let wake = match st.engine.next_event_time() {
                Some(t) => t.max(now.saturating_add(tick)),
                None => Nanos::MAX,
            };
            st.pacer_wake = wake;
            st.pacer_last = now;
            let wait = if wake == Nanos::MAX {
                Duration::from_secs(3600)
            } else {
                Duration::from_nanos(wake - now)
            };
            st = self
                .cond
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wakes the poll loop if the device has work, and the pacer if the
    /// engine now has an event due before its planned wake-up (a request
    /// gave an idle device work).
    pub(super) fn wake_pacer_if_needed(&self, st: &State) {
        let next = st.engine.next_event_time();
        if next.is_some() {
            self.poll_wake.notify_one();
        }
        let tick = self.settings.pacer_tick.as_nanos() as Nanos;
        let due = next.map(|t| t.max(st.pacer_last.saturating_add(tick)));
        if st.stop || due.is_some_and(|t| t < st.pacer_wake) {
            self.cond.notify_all();
        }
    }

    /// Poll mode (`daemon.poll`, REEF's scheduler polls rather than sleeps,
    /// §3.1): run on the thread that serves the socket, this catches the
    /// device up to the wall clock at every turn of the event loop while the
    /// device has work, yielding to the socket between turns, and sleeps
    /// until a request gives an idle device work. An RT request then finds
    /// the thread awake, the device at most one turn behind, the lock free,
    /// and the request parser (`warm_request_path`) and the padding
    /// selection of its first kernel ([`Engine::warm`]) warm: the RT path
    /// is otherwise cold after milliseconds of simulation (docs/daemon.md,
    /// "Measuring the control path"). The price is one core kept busy while
    /// the device has work.
    pub async fn poll_loop(self: Arc<Self>) {
        let mut warmed = Instant::now();
        loop {
            if warmed.elapsed() >= WARM_INTERVAL {
                warmed = Instant::now();
                warm_request_path();
                let mut st = self.lock();
                st.engine.warm();
                st.rt_conns.retain(|w| match w.upgrade() {
                    Some(n) => {
                        n.notify_one();
                        true
                    }
                    None => false,
                });
            }
            if self.pace_once() {
                tokio::task::yield_now().await;
            } else {
                self.poll_wake.notified().await;
            }
        }
    }

    /// Catches the engine up to now and delivers what finished; true while
    /// the device has work.
    pub(super) fn pace_once(&self) -> bool {
        let mut st = self.lock();
        if st.stop {
            return false;
        }
        self.catch_up(&mut st);
        let busy = st.engine.next_event_time().is_some();
        self.unlock(st);
        busy
    }

    /// Advances the engine to the wall clock and applies what happened;
    /// returns the time it advanced to.
    pub(super) fn catch_up(&self, st: &mut State) -> Nanos {
        let now = self.now_ns();
        let mut ev = std::mem::take(&mut st.events);
        st.engine.advance(now, &mut ev);
        self.apply_events(st, &mut ev);
        st.events = ev;
        if !st.start_deadlines.is_empty() {
            self.expire_start_deadlines(st);
        }
        now
    }

    /// Fails the tasks whose start deadline passed before they reached the
    /// device, if the engine can still withdraw them.
    fn expire_start_deadlines(&self, st: &mut State) {
        let now = Instant::now();
        while let Some(&(by, task)) = st.start_deadlines.first() {
            let started = st.tasks.get(&task).is_none_or(|t| t.first_queued.is_some());
            if !started && by > now {
                break;
            }
            st.start_deadlines.pop_first();
            if started || !st.engine.withdraw(task) {
                continue;
            }
            let waited = st
                .tasks
                .get(&task)
                .map(|t| now.saturating_duration_since(t.arrival))
                .unwrap_or_default();
            super::fail_task(
                st,
                task,
                Failure::new(
                    ErrorCode::Timeout,
                    format!(
                        "the request waited {} us without reaching the GPU and its timeout passed; it was not run",
                        waited.as_micros()
                    ),
                ),
            );
        }
    }

    /// Releases the lock, then delivers the outcomes found under it.
    pub(super) fn unlock(&self, mut st: MutexGuard<'_, State>) {
        let done = std::mem::take(&mut st.deliveries);
        drop(st);
        for d in done {
            if d.later.is_empty() {
                deliver(d.task, d.waiter, d.result);
            } else {
                self.answers_pending
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if let Err(std::sync::mpsc::SendError(mut d)) = self.answers[d.rt as usize].send(d)
                {
                    self.answers_pending
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    // The thread is gone (it never exits while the runtime
                    // lives): read here rather than lose the answer.
                    if let Ok(r) = &mut d.result {
                        tensors::resolve_outputs(r, std::mem::take(&mut d.later));
                    }
                    if let Some(a) = &d.answering {
                        a.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    deliver(d.task, d.waiter, d.result);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_request, RequestBody};

    /// The warm-up must run the path a real `infer` takes: if the protocol
    /// changed under it, it would warm the error path instead.
    #[test]
    pub(super) fn the_warm_up_frame_is_a_valid_infer_request() {
        let r = parse_request(WARM_FRAME).expect("the warm-up frame parses");
        assert!(matches!(r.body, RequestBody::Infer { wait: true, .. }));
    }
}
