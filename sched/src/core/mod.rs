//! The sans-IO scheduler core: task queues, virtual host queues, device-queue
//! accounting, and the reset-based preemption and restore mechanism.
//!
//! Implements REEF §3.1 (Fig. 5: one real-time queue and one queue per
//! best-effort client, each bound to a stream), §4.1–4.2 (Fig. 7: host queue
//! reset with asynchronous reclamation, device-queue capacity restriction,
//! lazy eviction through a preemption flag), §4.3 (killing running kernels)
//! and §4.4 (Fig. 8 lines 6–18: the kernel execution index and restore from
//! the interrupted kernel or from the start of its idempotent group, Fig. 9).
//!
//! The core owns each stream's host queue as a launch cursor over the running
//! request's kernels and transmits a kernel (an [`Action::Launch`]) only while
//! the stream's device queue holds fewer than its capacity. A kernel occupies
//! a device-queue slot from launch until it completes, is evicted or is
//! killed: the closed-loop transmitter REEFnv uses (§4.6), which is also
//! conservative for the AMD ring buffer.
//!
//! Decisions (which request runs where, when to preempt) belong to a
//! [`crate::Policy`]; this module provides the mechanisms it calls.
//! `config.rs` holds what a core is built from, `preempt.rs` the
//! preemption, drain and restore bookkeeping.

mod config;
mod preempt;

pub use config::{ClientSpec, Config, DeviceCaps, Layout, ModelInfo, RtOrder};
pub use preempt::PreemptionRecord;

use crate::types::*;
use std::collections::VecDeque;

/// A request waiting in a task queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub req: RequestId,
    pub client: ClientId,
    pub arrival: Time,
    pub deadline: Option<Time>,
    seq: u64,
}

/// Counters kept by the core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub events: u64,
    pub launches: u64,
    pub restores: u64,
    /// Kernels that had completed and were launched again by a restore
    /// (the "at most one redundant kernel" of §6.4, more for groups).
    pub redundant_kernels: u64,
    pub requests_done: u64,
    pub rejected: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    Running,
    Draining {
        record: Option<usize>,
        resume_when_drained: bool,
    },
    Preempted,
}

#[derive(Debug, Clone)]
struct Active {
    req: RequestId,
    client: ClientId,
    model: ModelId,
    kernels: u32,
    /// Host-queue cursor: next kernel index to transmit.
    next_launch: u32,
    /// Mirror of the stream's global execution index (Fig. 8 line 3).
    last_started: Option<u32>,
    /// Kernels `0..completed_upto` have completed (streams run in order).
    completed_upto: u32,
    /// Kernels `0..issued` were issued by the client's host (all of them
    /// unless [`Config::host_paced`]).
    issued: u32,
}

#[derive(Debug, Clone)]
struct StreamState {
    priority: StreamPriority,
    cap: Option<usize>,
    active: Option<Active>,
    outstanding: u32,
    flag: bool,
    pause: Pause,
    /// Held by an operator's preempt command until the matching resume.
    by_command: bool,
    /// Launches the policy still allows on the stream (`None`: no limit).
    /// FIKIT withholds a lower-priority task's next launch (gate 0) and
    /// grants one launch per gap-filling kernel.
    gate: Option<u32>,
    /// Held by the policy (it preempted the stream, or named it in a
    /// preemption while the stream was idle or already held) until the
    /// policy resumes it. A stream runs again only when neither holds it:
    /// an operator's resume during an RT task must not put BE work back on
    /// the device beside it.
    by_policy: bool,
}

/// The mechanism half of the scheduler. Policies drive it through the
/// methods below; [`crate::Scheduler`] feeds it events.
pub struct Core {
    cfg: Config,
    models: Vec<ModelInfo>,
    clients: Vec<ClientSpec>,
    client_stream: Vec<StreamId>,
    streams: Vec<StreamState>,
    rt_queue: Vec<Pending>,
    be_queues: Vec<VecDeque<Pending>>,
    out: VecDeque<Action>,
    now: Time,
    seq: u64,
    /// Preemption records from number `preemptions_base` on (earlier ones
    /// were forgotten, see [`Core::forget_finished_preemptions`]).
    preemptions: Vec<PreemptionRecord>,
    preemptions_base: usize,
    counters: Counters,
    /// Kernels issued so far by host-paced requests not finished yet.
    issued: std::collections::HashMap<RequestId, u32>,
}

/// Why a core could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "client {client} ({name}) uses model {model}, but only {models} models are registered"
    )]
    UnknownModel {
        client: u32,
        name: String,
        model: u32,
        models: usize,
    },
    #[error("model {0} has no kernels")]
    EmptyModel(String),
    #[error("the layout maps {mapped} clients to streams but there are {clients} clients")]
    Layout { mapped: usize, clients: usize },
    #[error("device-queue capacity must be at least 1")]
    ZeroCapacity,
}

impl Core {
    pub(crate) fn new(
        cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
        layout: Layout,
    ) -> Result<Self, ConfigError> {
        if cfg.dq_capacity == 0 {
            return Err(ConfigError::ZeroCapacity);
        }
        if let Some(m) = models.iter().find(|m| m.kernels == 0) {
            return Err(ConfigError::EmptyModel(m.name.clone()));
        }
        for (i, c) in clients.iter().enumerate() {
            if c.model.0 as usize >= models.len() {
                return Err(ConfigError::UnknownModel {
                    client: i as u32,
                    name: c.name.clone(),
                    model: c.model.0,
                    models: models.len(),
                });
            }
        }
        if layout.client_stream.len() != clients.len()
            || layout
                .client_stream
                .iter()
                .any(|s| s.0 as usize >= layout.streams.len())
        {
            return Err(ConfigError::Layout {
                mapped: layout.client_stream.len(),
                clients: clients.len(),
            });
        }
        let mut out = VecDeque::new();
        let streams = layout
            .streams
            .iter()
            .enumerate()
            .map(|(i, &(priority, cap))| {
                out.push_back(Action::CreateStream {
                    stream: StreamId(i as u32),
                    priority,
                    dq_capacity: cap,
                    context: layout.contexts.get(i).copied().unwrap_or(0),
                });
                StreamState {
                    priority,
                    cap,
                    active: None,
                    outstanding: 0,
                    flag: false,
                    pause: Pause::Running,
                    by_command: false,
                    by_policy: false,
                    gate: None,
                }
            })
            .collect();
        Ok(Self {
            be_queues: vec![VecDeque::new(); clients.len()],
            cfg,
            models,
            clients,
            client_stream: layout.client_stream,
            streams,
            rt_queue: Vec::new(),
            out,
            now: 0,
            seq: 0,
            preemptions: Vec::new(),
            preemptions_base: 0,
            counters: Counters::default(),
            issued: std::collections::HashMap::new(),
        })
    }

    // ----- read-only views for policies -----

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn now(&self) -> Time {
        self.now
    }
    pub fn clients(&self) -> &[ClientSpec] {
        &self.clients
    }
    /// The registered models, indexed by `ModelId`.
    pub fn models(&self) -> &[ModelInfo] {
        &self.models
    }
    /// The client's priority level, 0 (highest) to 9 ([`Config::priorities`]).
    pub fn priority(&self, client: ClientId) -> u8 {
        let c = client.0 as usize;
        self.cfg
            .priorities
            .get(c)
            .copied()
            .unwrap_or_else(|| self.clients[c].class.default_priority())
            .min(PRIORITY_LEVELS - 1)
    }
    /// Sets a client's priority level ([`crate::Scheduler::set_priority`]).
    pub(crate) fn set_priority(&mut self, client: ClientId, level: u8) {
        let c = client.0 as usize;
        if c >= self.clients.len() {
            return;
        }
        if self.cfg.priorities.len() <= c {
            let defaults: Vec<u8> = (self.cfg.priorities.len()..=c)
                .map(|i| self.clients[i].class.default_priority())
                .collect();
            self.cfg.priorities.extend(defaults);
        }
        self.cfg.priorities[c] = level.min(PRIORITY_LEVELS - 1);
    }
    /// The request bound to the stream and its client, if any.
    pub fn active_request(&self, s: StreamId) -> Option<(RequestId, ClientId)> {
        self.streams[s.0 as usize]
            .active
            .as_ref()
            .map(|a| (a.req, a.client))
    }
    /// The next kernel of the stream's request that may be transmitted now:
    /// issued by its host and not launched yet (`None` when there is none).
    pub fn next_unlaunched(&self, s: StreamId) -> Option<u32> {
        let a = self.streams[s.0 as usize].active.as_ref()?;
        (a.next_launch < a.issued.min(a.kernels)).then_some(a.next_launch)
    }
    /// Kernels of the stream's request issued by its host so far.
    pub fn issued(&self, s: StreamId) -> Option<u32> {
        let a = self.streams[s.0 as usize].active.as_ref()?;
        Some(a.issued.min(a.kernels))
    }
    /// True when the stream's device queue has a free slot.
    pub fn has_room(&self, s: StreamId) -> bool {
        let st = &self.streams[s.0 as usize];
        (st.outstanding as usize) < st.cap.unwrap_or(usize::MAX)
    }
    /// Launches the policy still allows on the stream (`None`: no limit).
    pub fn gate(&self, s: StreamId) -> Option<u32> {
        self.streams[s.0 as usize].gate
    }
    /// Limits the stream to `gate` more launches (`None`: no limit) and
    /// transmits what that allows. Launches already made are not undone:
    /// a gate withholds the next launch, it never evicts.
    pub fn set_gate(&mut self, s: StreamId, gate: Option<u32>) {
        self.streams[s.0 as usize].gate = gate;
        self.pump(s);
    }
    /// Allows `n` more launches on a gated stream and transmits them if
    /// issued (no effect on an ungated stream).
    pub fn grant(&mut self, s: StreamId, n: u32) {
        if let Some(g) = &mut self.streams[s.0 as usize].gate {
            *g += n;
        }
        self.pump(s);
    }
    pub fn stream_of(&self, client: ClientId) -> StreamId {
        self.client_stream[client.0 as usize]
    }
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }
    pub fn stream_priority(&self, s: StreamId) -> StreamPriority {
        self.streams[s.0 as usize].priority
    }
    /// True when the stream has no request and is not held by a preemption.
    pub fn is_idle(&self, s: StreamId) -> bool {
        let st = &self.streams[s.0 as usize];
        st.active.is_none() && st.pause == Pause::Running
    }
    /// True when the stream holds a request (running or preempted).
    pub fn has_request(&self, s: StreamId) -> bool {
        self.streams[s.0 as usize].active.is_some()
    }
    /// True when the stream is held by a preemption (draining or preempted).
    pub fn is_paused(&self, s: StreamId) -> bool {
        self.streams[s.0 as usize].pause != Pause::Running
    }
    /// True when the stream is stopped by a [`Event::PreemptCommand`] and
    /// not resumed yet: it must not run at all, not even inside padded
    /// launches.
    pub fn is_stopped_by_command(&self, s: StreamId) -> bool {
        self.streams[s.0 as usize].by_command
    }
    /// Kernels launched on the stream and not yet finished.
    pub fn outstanding(&self, s: StreamId) -> u32 {
        self.streams[s.0 as usize].outstanding
    }
    pub fn any_request_active(&self) -> bool {
        self.streams.iter().any(|s| s.active.is_some())
    }
    /// True while some stream is still draining a preemption.
    pub fn preemption_in_progress(&self) -> bool {
        self.streams
            .iter()
            .any(|s| matches!(s.pause, Pause::Draining { .. }))
    }
    pub fn rt_waiting(&self) -> usize {
        self.rt_queue.len()
    }
    pub fn be_waiting(&self, client: ClientId) -> usize {
        self.be_queues[client.0 as usize].len()
    }
    pub fn counters(&self) -> Counters {
        self.counters
    }

    // ----- queue operations for policies -----

    /// Takes the next real-time request in the configured order.
    pub fn pop_rt(&mut self) -> Option<Pending> {
        self.pop_rt_where(|_| true)
    }

    /// Takes the first real-time request (in the configured order) for which
    /// `ok` holds.
    pub fn pop_rt_where(&mut self, ok: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let key = |p: &Pending, order: RtOrder| match order {
            RtOrder::Fifo => (0, p.seq),
            RtOrder::Edf => (p.deadline.unwrap_or(Time::MAX), p.seq),
        };
        let order = self.cfg.rt_order;
        let i = self
            .rt_queue
            .iter()
            .enumerate()
            .filter(|(_, p)| ok(p))
            .min_by_key(|(_, p)| key(p, order))
            .map(|(i, _)| i)?;
        Some(self.rt_queue.remove(i))
    }

    pub fn pop_be(&mut self, client: ClientId) -> Option<Pending> {
        self.be_queues[client.0 as usize].pop_front()
    }

    /// Binds a request to an idle stream and transmits its first kernels.
    /// Panics if the stream is not idle (a policy bug, not an input error).
    pub fn start(&mut self, s: StreamId, p: Pending) {
        assert!(self.is_idle(s), "start on busy stream {s}");
        self.bind(s, &p);
        self.pump(s);
    }

    /// Makes `p` the stream's request, from its first kernel.
    fn bind(&mut self, s: StreamId, p: &Pending) {
        let model = self.clients[p.client.0 as usize].model;
        let kernels = self.models[model.0 as usize].kernels;
        self.streams[s.0 as usize].active = Some(Active {
            req: p.req,
            client: p.client,
            model,
            kernels,
            next_launch: 0,
            last_started: None,
            completed_upto: 0,
            issued: if self.cfg.host_paced {
                self.issued.get(&p.req).copied().unwrap_or(0)
            } else {
                kernels
            },
        });
    }

    /// Takes the next queued request of best-effort `client` and binds it to
    /// the client's stream in the preempted state, without transmitting any
    /// kernel: the request is started by dynamic kernel padding in
    /// real-time mode (REEF §5.2: the selection "checks best-effort task
    /// queues"; REEF's implementation pads from the front task of every
    /// best-effort queue whether it has run or not) and runs on its stream
    /// once the policy resumes it ([`Self::resume`] restores it from its
    /// first kernel not yet done). Only when the stream holds no request,
    /// has nothing on the device and is not held by an operator command.
    /// Returns the request started.
    pub fn start_preempted(&mut self, client: ClientId) -> Option<RequestId> {
        let spec = self.clients.get(client.0 as usize)?;
        if spec.class != Class::BestEffort {
            return None;
        }
        let s = self.client_stream[client.0 as usize];
        let st = &self.streams[s.0 as usize];
        if st.active.is_some() || st.outstanding != 0 || st.by_command {
            return None;
        }
        let p = self.be_queues[client.0 as usize].pop_front()?;
        self.bind(s, &p);
        self.streams[s.0 as usize].pause = Pause::Preempted;
        Some(p.req)
    }

    // ----- event handling -----

    pub(crate) fn set_now(&mut self, now: Time) {
        self.now = self.now.max(now);
        self.counters.events += 1;
    }

    /// Queues an arriving request. Returns false if the client is unknown.
    pub(crate) fn enqueue(
        &mut self,
        req: RequestId,
        client: ClientId,
        deadline: Option<Time>,
        admit: bool,
    ) -> bool {
        let Some(spec) = self.clients.get(client.0 as usize) else {
            return false;
        };
        if !admit {
            self.counters.rejected += 1;
            self.out.push_back(Action::RequestRejected { req, client });
            return true;
        }
        self.seq += 1;
        let p = Pending {
            req,
            client,
            arrival: self.now,
            deadline,
            seq: self.seq,
        };
        match spec.class {
            Class::RealTime => self.rt_queue.push(p),
            Class::BestEffort => self.be_queues[client.0 as usize].push_back(p),
        }
        true
    }

    /// The host of request `req` has issued its kernels `0..issued`
    /// ([`Event::KernelsIssued`]); ignored unless [`Config::host_paced`].
    pub(crate) fn on_issued(&mut self, req: RequestId, issued: u32) {
        if !self.cfg.host_paced {
            return;
        }
        let e = self.issued.entry(req).or_insert(0);
        *e = (*e).max(issued);
        let n = *e;
        let s = self
            .streams
            .iter()
            .position(|st| st.active.as_ref().is_some_and(|a| a.req == req));
        if let Some(si) = s {
            if let Some(a) = &mut self.streams[si].active {
                a.issued = a.issued.max(n);
            }
            self.pump(StreamId(si as u32));
        }
    }

    pub(crate) fn reject_unknown(&mut self, req: RequestId, client: ClientId) {
        self.counters.rejected += 1;
        self.out.push_back(Action::RequestRejected { req, client });
    }

    pub(crate) fn class_of(&self, client: ClientId) -> Option<Class> {
        self.clients.get(client.0 as usize).map(|c| c.class)
    }

    /// Whether a completion of `tag` reported now on stream `s` may be of
    /// a partly run kernel: the stream's preempt flag is set and the
    /// execution index names that kernel (REEF §4.3–4.4; see
    /// `on_finished`). Such a completion does not count, and the restore
    /// re-executes the kernel.
    pub fn completion_unconfirmed(&self, s: StreamId, tag: KernelTag) -> bool {
        self.streams.get(s.0 as usize).is_some_and(|st| {
            st.flag
                && st
                    .active
                    .as_ref()
                    .is_some_and(|a| a.req == tag.req && a.last_started == Some(tag.kernel))
        })
    }

    pub(crate) fn on_started(&mut self, s: StreamId, tag: KernelTag) {
        if let Some(a) = self.active_for(s, tag) {
            // The global index holds the latest kernel to pass its check.
            a.last_started = Some(tag.kernel);
            // A stream runs its launches in order, so kernel k passed its
            // check only after every earlier kernel of this launch sequence
            // ended, and with the flag clear on the device: those kernels
            // ran whole (REEF §4.3, Fig. 8: the index moving past a kernel
            // is what makes its completion certain). A completion that
            // reached the scheduler after it set the flag was held back
            // as possibly partial (`completion_unconfirmed`); the flag's
            // write can land on the device after the kernel ended and its
            // successor started, and this start confirms it. Without
            // this the restore re-ran the completed kernel after its
            // killed successor had overwritten what it reads (a vgg
            // request under `reef-bench hostile`, sim:mi50).
            a.completed_upto = a.completed_upto.max(tag.kernel);
        }
    }

    /// Kernel `tag` of the stream's request completed inside a launch on
    /// another stream (a padded launch, REEF §5, Fig. 12): it counts as
    /// started and completed for the restore point, but the stream's own
    /// outstanding launches (which may still be draining a preemption)
    /// are untouched.
    pub(crate) fn on_completed_elsewhere(&mut self, s: StreamId, tag: KernelTag) {
        if let Some(a) = self.active_for(s, tag) {
            a.last_started = Some(tag.kernel);
        }
        self.kernel_completed(s, tag);
    }

    /// Kernel `tag` of the stream's active request completed: the request
    /// is done when its last kernel has.
    fn kernel_completed(&mut self, s: StreamId, tag: KernelTag) {
        let mut done = None;
        if let Some(a) = self.active_for(s, tag) {
            a.completed_upto = a.completed_upto.max(tag.kernel + 1);
            if a.completed_upto == a.kernels {
                done = Some((a.req, a.client));
            }
        }
        if let Some((req, client)) = done {
            self.streams[s.0 as usize].active = None;
            self.issued.remove(&req);
            self.counters.requests_done += 1;
            self.out.push_back(Action::RequestDone { req, client });
        }
    }

    /// `how`: 0 completed, 1 evicted, 2 killed.
    pub(crate) fn on_finished(&mut self, s: StreamId, tag: KernelTag, how: u8) {
        let Some(st) = self.streams.get_mut(s.0 as usize) else {
            return;
        };
        st.outstanding = st.outstanding.saturating_sub(1);
        if let Pause::Draining {
            record: Some(r), ..
        } = st.pause
        {
            let rec = self.record(r);
            match how {
                0 => rec.completed_during += 1,
                1 => rec.evicted += 1,
                _ => rec.killed += 1,
            }
        }
        if how == 0 {
            // REEF §4.3–4.4: every block checks the flag at its entry, so
            // a kernel that was running when the flag was set ends with its
            // dispatched blocks done and the rest exited, and its
            // completion event fires as for a whole run. The execution
            // index names it, and nothing on the host tells a partial run
            // from a whole one: its completion does not count, the restore
            // re-executes it (or its idempotent group). A kernel the index
            // has moved past finished before its successor passed its
            // check, so it ran whole.
            if !self.completion_unconfirmed(s, tag) {
                self.kernel_completed(s, tag);
            }
        }
        self.check_drained(s);
        self.pump(s);
    }

    fn active_for(&mut self, s: StreamId, tag: KernelTag) -> Option<&mut Active> {
        self.streams
            .get_mut(s.0 as usize)?
            .active
            .as_mut()
            .filter(|a| a.req == tag.req)
    }

    /// The host queue's background transmitter: move kernels into the device
    /// queue while it has room.
    fn pump(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        if st.pause != Pause::Running {
            return;
        }
        let cap = st.cap.unwrap_or(usize::MAX);
        let Some(a) = &mut st.active else { return };
        while a.next_launch < a.issued.min(a.kernels)
            && (st.outstanding as usize) < cap
            && st.gate != Some(0)
        {
            if let Some(g) = &mut st.gate {
                *g -= 1;
            }
            let tag = KernelTag {
                req: a.req,
                kernel: a.next_launch,
            };
            a.next_launch += 1;
            st.outstanding += 1;
            self.counters.launches += 1;
            self.out.push_back(Action::Launch { stream: s, tag });
        }
    }

    pub(crate) fn pop_action(&mut self) -> Option<Action> {
        self.out.pop_front()
    }

    pub(crate) fn drain_actions_into(&mut self, v: &mut Vec<Action>) {
        v.extend(self.out.drain(..));
    }
}
