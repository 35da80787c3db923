//! A scripted fake device with value tracking, for testing and measuring the
//! scheduler core without the block-level simulator.
//!
//! Each stream runs its kernels in order, one at a time, concurrently with
//! other streams (no contention). A kernel costs `fetch` to be fetched and
//! dispatched, checks its stream's preemption flag at entry (REEF §4.2, Fig. 8
//! lines 1–3) and then runs for its scripted duration. A kill (§4.3) ends the
//! running kernel after `kill_latency`, leaving its outputs corrupted.
//!
//! Value tracking (DESIGN.md "The simulator"): every buffer of a request
//! holds a 64-bit version; a completed kernel writes `hash(kernel, inputs)`
//! to each output, a killed one writes a corrupted version. A restore is
//! correct exactly when the final outputs equal an unpreempted run, which
//! [`FakeModel::reference_output`] computes.

use crate::types::*;
use crate::Scheduler;
use std::collections::{HashMap, VecDeque};

/// One kernel of a fake model: duration and buffer accesses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeKernel {
    pub duration: Time,
    pub reads: Vec<usize>,
    pub writes: Vec<usize>,
}

/// A fake model: kernels over `buffers` buffers; buffer 0 is the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeModel {
    pub buffers: usize,
    pub kernels: Vec<FakeKernel>,
}

fn mix(mut h: u64, v: u64) -> u64 {
    // SplitMix64 finaliser over the running hash: cheap and well mixed.
    h ^= v
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(h << 6)
        .wrapping_add(h >> 2);
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl FakeModel {
    /// A chain of `n` idempotent kernels: kernel i reads buffer i and writes
    /// buffer i+1.
    pub fn chain(n: usize, duration: Time) -> Self {
        Self {
            buffers: n + 1,
            kernels: (0..n)
                .map(|i| FakeKernel {
                    duration,
                    reads: vec![i],
                    writes: vec![i + 1],
                })
                .collect(),
        }
    }

    /// Initial buffer versions of a request (the input depends on the request).
    pub fn initial(&self, req: RequestId) -> Vec<u64> {
        let mut v = vec![0; self.buffers];
        v[0] = mix(0xfeed, req.0);
        v
    }

    /// Applies kernel `k` to `values` as a completed run does.
    pub fn apply(&self, k: usize, values: &mut [u64]) {
        let kern = &self.kernels[k];
        let mut h = mix(0x1000, k as u64);
        for &r in &kern.reads {
            h = mix(h, values[r]);
        }
        for &w in &kern.writes {
            values[w] = mix(h, w as u64);
        }
    }

    /// Buffer versions after one unpreempted inference.
    pub fn reference_output(&self, req: RequestId) -> Vec<u64> {
        let mut v = self.initial(req);
        for k in 0..self.kernels.len() {
            self.apply(k, &mut v);
        }
        v
    }
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Being fetched; at `until` it checks the flag.
    Fetch,
    /// Running since the flag check; completes at `until` unless killed.
    Run,
    /// Killed; reported at `until`.
    Dying,
}

#[derive(Debug)]
struct FStream {
    queue: VecDeque<KernelTag>,
    current: Option<(KernelTag, Phase, Time)>,
    flag: bool,
}

/// The fake device.
pub struct FakeDevice {
    pub fetch: Time,
    pub kill_latency: Time,
    models: Vec<FakeModel>,
    streams: Vec<FStream>,
    req_model: HashMap<RequestId, usize>,
    values: HashMap<RequestId, Vec<u64>>,
    now: Time,
    /// Largest number of kernels ever held in one stream's device queue
    /// (including the one being fetched or running).
    pub max_queued: usize,
}

impl FakeDevice {
    pub fn new(models: Vec<FakeModel>, fetch: Time, kill_latency: Time) -> Self {
        Self {
            fetch,
            kill_latency,
            models,
            streams: Vec::new(),
            req_model: HashMap::new(),
            values: HashMap::new(),
            now: 0,
            max_queued: 0,
        }
    }

    /// Declares that request `req` runs model `model` (index into `models`).
    pub fn bind(&mut self, req: RequestId, model: usize) {
        self.req_model.insert(req, model);
        self.values.insert(req, self.models[model].initial(req));
    }

    /// Current buffer versions of a request.
    pub fn values(&self, req: RequestId) -> Option<&[u64]> {
        self.values.get(&req).map(|v| v.as_slice())
    }

    fn stream(&mut self, s: StreamId) -> &mut FStream {
        let i = s.0 as usize;
        while self.streams.len() <= i {
            self.streams.push(FStream {
                queue: VecDeque::new(),
                current: None,
                flag: false,
            });
        }
        &mut self.streams[i]
    }

    /// Performs a device-side action at the current time.
    pub fn apply(&mut self, a: &Action) {
        let now = self.now;
        let fetch = self.fetch;
        let kill = self.kill_latency;
        match *a {
            Action::CreateStream { stream, .. } => {
                self.stream(stream);
            }
            Action::Launch { stream, tag } => {
                let st = self.stream(stream);
                st.queue.push_back(tag);
                let q = st.queue.len() + st.current.is_some() as usize;
                self.max_queued = self.max_queued.max(q);
                self.dispatch(stream, now);
            }
            Action::SetPreemptFlag { stream, value } => self.stream(stream).flag = value,
            Action::KillStream { stream } => {
                let st = self.stream(stream);
                if let Some((tag, Phase::Run, _)) = st.current {
                    st.current = Some((tag, Phase::Dying, now + kill));
                }
            }
            Action::ClearDeviceQueue { stream } => {
                let _ = fetch;
                // Not offered by this device (its caps say so); ignore.
                let _ = stream;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, s: StreamId, now: Time) {
        let fetch = self.fetch;
        let st = self.stream(s);
        if st.current.is_none() {
            if let Some(tag) = st.queue.pop_front() {
                st.current = Some((tag, Phase::Fetch, now + fetch));
            }
        }
    }

    /// Time of the next device event, if any.
    pub fn next_event_time(&self) -> Option<Time> {
        self.streams
            .iter()
            .filter_map(|s| s.current.map(|c| c.2))
            .min()
    }

    /// Moves the device's clock to `t` (an input from outside the device,
    /// such as an arrival or a command, happens then); never backwards.
    pub fn advance_clock(&mut self, t: Time) {
        self.now = self.now.max(t);
    }

    /// Processes the first device transition due at or before `t`, if any,
    /// and returns the event it produces.
    pub fn step(&mut self, t: Time) -> Option<(Time, Event)> {
        let (i, due) = self
            .streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.current.map(|c| (i, c.2)))
            .min_by_key(|&(_, d)| d)?;
        if due > t {
            return None;
        }
        self.now = due;
        let s = StreamId(i as u32);
        let (tag, phase, _) = self.streams[i].current.take()?;
        Some(match phase {
            Phase::Fetch => {
                if self.streams[i].flag {
                    self.dispatch(s, due);
                    (due, Event::KernelEvicted { stream: s, tag })
                } else {
                    let d = self.duration(tag);
                    self.streams[i].current = Some((tag, Phase::Run, due + d));
                    (due, Event::KernelStarted { stream: s, tag })
                }
            }
            Phase::Run => {
                self.complete(tag);
                self.dispatch(s, due);
                (due, Event::KernelCompleted { stream: s, tag })
            }
            Phase::Dying => {
                self.corrupt(tag);
                self.dispatch(s, due);
                (due, Event::KernelKilled { stream: s, tag })
            }
        })
    }

    fn duration(&self, tag: KernelTag) -> Time {
        let m = self.req_model.get(&tag.req).copied().unwrap_or(0);
        self.models[m].kernels[tag.kernel as usize].duration
    }

    fn complete(&mut self, tag: KernelTag) {
        let m = self.req_model.get(&tag.req).copied().unwrap_or(0);
        if let Some(v) = self.values.get_mut(&tag.req) {
            self.models[m].apply(tag.kernel as usize, v);
        }
    }

    fn corrupt(&mut self, tag: KernelTag) {
        let m = self.req_model.get(&tag.req).copied().unwrap_or(0);
        let writes = self.models[m].kernels[tag.kernel as usize].writes.clone();
        if let Some(v) = self.values.get_mut(&tag.req) {
            for w in writes {
                // Partially written output: neither the old nor the new value.
                v[w] = mix(v[w], 0xdead_0000 + tag.kernel as u64);
            }
        }
    }
}

/// Log of one driven run.
#[derive(Debug, Default, Clone)]
pub struct RunLog {
    /// Every action the scheduler emitted, with its time.
    pub actions: Vec<(Time, Action)>,
    /// Completion time of each finished request.
    pub done: HashMap<RequestId, Time>,
    pub rejected: Vec<RequestId>,
}

/// Drives `sched` on `dev` in virtual time with the given request arrivals
/// (`(time, request, client, model index on the device)`) until no event is
/// left, applying each event's actions at the instant of that event.
pub fn drive(
    sched: &mut Scheduler,
    dev: &mut FakeDevice,
    arrivals: Vec<(Time, RequestId, ClientId, usize)>,
) -> RunLog {
    drive_with(sched, dev, arrivals, false)
}

/// [`drive`], calling [`Scheduler::forget_finished_preemptions`] after each
/// batch of actions when `forget` is set (as the daemon does).
pub fn drive_with(
    sched: &mut Scheduler,
    dev: &mut FakeDevice,
    mut arrivals: Vec<(Time, RequestId, ClientId, usize)>,
    forget: bool,
) -> RunLog {
    arrivals.sort_by_key(|a| (a.0, a.1));
    let mut arrivals: VecDeque<_> = arrivals.into();
    let mut log = RunLog::default();
    let mut now = 0;
    loop {
        while let Some(a) = sched.poll_action() {
            match a {
                Action::RequestDone { req, .. } => {
                    log.done.insert(req, now);
                }
                Action::RequestRejected { req, .. } => log.rejected.push(req),
                _ => dev.apply(&a),
            }
            log.actions.push((now, a));
        }
        if forget {
            sched.forget_finished_preemptions();
        }
        let next_dev = dev.next_event_time();
        let next_arr = arrivals.front().map(|a| a.0);
        match (next_dev, next_arr) {
            (None, None) => break,
            (Some(d), a) if a.is_none_or(|a| d < a) => {
                let (t, ev) = dev.step(d).expect("due event");
                now = t;
                sched.handle(t, ev);
            }
            _ => {
                let (at, req, client, model) = arrivals.pop_front().expect("arrival");
                dev.now = dev.now.max(at);
                now = at;
                dev.bind(req, model);
                sched.handle(
                    at,
                    Event::RequestArrived {
                        req,
                        client,
                        deadline: None,
                    },
                );
            }
        }
    }
    log
}
