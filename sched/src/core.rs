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

use crate::types::*;
use reef_model::idempotence::IdempotenceMetadata;
use std::collections::VecDeque;

/// What the scheduler needs to know about a model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub name: String,
    /// Number of kernels of one inference.
    pub kernels: u32,
    /// Per-kernel idempotence (§4.4); `None` means every kernel is idempotent
    /// (as for all TVM kernels, Table 1).
    pub idempotence: Option<IdempotenceMetadata>,
    /// Per kernel, how many kernels right after it write nothing it reads
    /// or writes (`reef_model::Model::successors_clear_of`); `None`:
    /// unknown, taken as 0.
    pub successors_clear: Option<Vec<u32>>,
}

impl ModelInfo {
    /// A model whose kernels are all idempotent.
    pub fn idempotent(name: impl Into<String>, kernels: u32) -> Self {
        Self {
            name: name.into(),
            kernels,
            idempotence: None,
            successors_clear: None,
        }
    }

    /// How many kernels right after kernel `k` write nothing `k` reads or
    /// writes (0 when unknown).
    pub fn successors_clear(&self, k: u32) -> u32 {
        self.successors_clear
            .as_ref()
            .and_then(|v| v.get(k as usize).copied())
            .unwrap_or(0)
    }

    /// Kernel index a restore must start from when kernel `index` was the
    /// last one to begin (Fig. 8 line 17, `find_idem_entry`).
    pub fn restore_point(&self, index: u32) -> u32 {
        match &self.idempotence {
            Some(m) => m.restore_point(index as usize) as u32,
            None => index,
        }
    }
}

/// A client as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct ClientSpec {
    pub name: String,
    pub model: ModelId,
    pub class: Class,
}

/// Order of the real-time queue (§3.1: FIFO in REEF; any policy that treats
/// the GPU as one device, such as EDF, may replace it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RtOrder {
    #[default]
    Fifo,
    /// Earliest deadline first; requests without a deadline go last (FIFO
    /// among themselves).
    Edf,
}

/// What the device can do, as its backend reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Highest preemption level available (DESIGN.md "Device").
    pub max_level: PreemptLevel,
    /// Whether the device queue can be dropped outright.
    pub can_clear_device_queue: bool,
    /// Whether a kill (CU reset) takes effect before any launch issued after
    /// it can start blocks. REEF resets the CUs synchronously before it
    /// launches the real-time task (SJTU-IPADS/reef `preempt_reset`
    /// synchronises the preemption stream; REEF §3.1 "first ... preempt
    /// ... and then immediately launches the real-time task"); a simulated
    /// device has it when its kill latency is below its launch path. With
    /// it, dynamic kernel padding may pad a best-effort task whose stream
    /// is still lazily evicting its queued kernels (no kernel of it runs
    /// any more), so the first real-time kernels of a request can be
    /// padded too (docs/padding.md "Padding from the first real-time
    /// kernel").
    pub kill_precedes_later_launches: bool,
}

impl DeviceCaps {
    /// The capabilities of a device that reports these preemption level
    /// numbers. The device queue is never dropped outright: REEF on AMD
    /// cannot do so safely (§4.2) and relies on lazy eviction instead.
    pub fn from_levels(numbers: impl IntoIterator<Item = u8>) -> Self {
        Self {
            max_level: PreemptLevel::highest(numbers),
            can_clear_device_queue: false,
            kill_precedes_later_launches: false,
        }
    }
}

impl Default for DeviceCaps {
    fn default() -> Self {
        Self {
            max_level: PreemptLevel::Kill,
            can_clear_device_queue: false,
            kill_precedes_later_launches: false,
        }
    }
}

/// Scheduler configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Device-queue capacity for preemptible streams under `reef` (§4.2:
    /// 4 on the MI50 testbed).
    pub dq_capacity: usize,
    pub device: DeviceCaps,
    pub rt_order: RtOrder,
    /// Priority level of each client (0 highest .. 9 lowest, FIKIT §3.2
    /// "Executing kernels by task-level priorities", Fig. 7), indexed by
    /// `ClientId`. A client without an entry takes its class's alias:
    /// real-time 0, best-effort 9 ([`Class::default_priority`]). REEF's
    /// policies go by class (0 is real-time, the rest best-effort); FIKIT
    /// uses all ten levels.
    pub priorities: Vec<u8>,
    /// Host-paced clients (a framework that launches kernel by kernel from
    /// the CPU): a request arrives with none of its kernels issued and the
    /// caller reports [`Event::KernelsIssued`] as the framework issues them;
    /// a kernel is transmitted only once issued. `false` (the default): every
    /// kernel is issued when the request arrives (back-to-back launches).
    pub host_paced: bool,
    /// The runtime bounds every stream's outstanding kernels at
    /// `dq_capacity`, whatever the policy asks: REEFnv (REEF §4.6) keeps
    /// kernels in a virtual host queue whose background thread "transmits
    /// a fixed number of kernels to the CUDA runtime in a closed loop", so
    /// a policy without a device-queue cap of its own (`wait`) is capped
    /// there too. `false` (the default): only policies that cap (`reef`).
    pub runtime_caps_every_stream: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dq_capacity: 4,
            device: DeviceCaps::default(),
            rt_order: RtOrder::Fifo,
            priorities: Vec::new(),
            host_paced: false,
            runtime_caps_every_stream: false,
        }
    }
}

/// How a policy maps clients to streams.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Stream of each client, indexed by `ClientId`.
    pub client_stream: Vec<StreamId>,
    /// Priority and device-queue capacity of each stream, indexed by `StreamId`.
    pub streams: Vec<(StreamPriority, Option<usize>)>,
    /// Process context of each stream, indexed by `StreamId`; empty: every
    /// stream in context 0 (one process, the daemon's or the runtime's).
    pub contexts: Vec<u32>,
}

impl Layout {
    /// REEF's layout (§3.1): all real-time clients share stream 0 (one
    /// real-time queue, served one request at a time); each best-effort
    /// client has its own stream with device-queue capacity `be_cap`.
    pub fn shared_rt(clients: &[ClientSpec], be_cap: Option<usize>) -> Self {
        let mut streams = vec![(StreamPriority::Normal, None)];
        let client_stream = clients
            .iter()
            .map(|c| match c.class {
                Class::RealTime => StreamId(0),
                Class::BestEffort => {
                    streams.push((StreamPriority::Normal, be_cap));
                    StreamId(streams.len() as u32 - 1)
                }
            })
            .collect();
        Self {
            client_stream,
            streams,
            contexts: Vec::new(),
        }
    }

    /// One stream per client; real-time streams get `rt_priority`.
    pub fn per_client(clients: &[ClientSpec], rt_priority: StreamPriority) -> Self {
        let streams = clients
            .iter()
            .map(|c| match c.class {
                Class::RealTime => (rt_priority, None),
                Class::BestEffort => (StreamPriority::Normal, None),
            })
            .collect();
        Self {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams,
            contexts: Vec::new(),
        }
    }

    /// One process per client (FIKIT §2, §4.5 "default GPU sharing
    /// mode"): each client's stream in a context of its own, no priority.
    /// How the device shares itself between the contexts is the device's
    /// (time slices on NVIDIA GPUs, docs/simulator.md "Contexts").
    pub fn per_process(clients: &[ClientSpec]) -> Self {
        Self {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams: vec![(StreamPriority::Normal, None); clients.len()],
            contexts: (1..=clients.len() as u32).collect(),
        }
    }
}

/// A request waiting in a task queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub req: RequestId,
    pub client: ClientId,
    pub arrival: Time,
    pub deadline: Option<Time>,
    seq: u64,
}

/// One preemption: from the decision to the moment every preempted stream
/// has no kernel left in its device queue or on the compute units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionRecord {
    pub start: Time,
    /// `None` while still draining.
    pub end: Option<Time>,
    /// Level used (the policy's wish degraded to what the device offers).
    pub level: PreemptLevel,
    pub streams: u32,
    /// Launches dropped from host queues.
    pub dropped_from_host_queue: u32,
    /// Kernels that terminated at entry (lazy eviction).
    pub evicted: u32,
    /// Kernels whose running blocks were killed.
    pub killed: u32,
    /// Kernels that ran to completion after the decision.
    pub completed_during: u32,
}

impl PreemptionRecord {
    /// Preemption latency in nanoseconds, once finished.
    pub fn latency(&self) -> Option<Time> {
        self.end.map(|e| e - self.start)
    }
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
    /// The preemption records kept: all of them, unless
    /// [`Core::forget_finished_preemptions`] was called; the first is number
    /// [`Core::preemptions_base`].
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        &self.preemptions
    }
    /// How many preemption records were forgotten (the number of the first
    /// one [`Core::preemptions`] returns).
    pub fn preemptions_base(&self) -> usize {
        self.preemptions_base
    }
    /// Drops the finished preemption records before the first unfinished
    /// one. A long-running user (the daemon, which reads each record when it
    /// is made) calls this so that the records do not grow without bound
    /// (one per preemption); a benchmark that reports on all of them at the
    /// end does not.
    pub fn forget_finished_preemptions(&mut self) {
        let n = self
            .preemptions
            .iter()
            .position(|r| r.end.is_none())
            .unwrap_or(self.preemptions.len());
        self.preemptions.drain(..n);
        self.preemptions_base += n;
    }
    fn record(&mut self, r: usize) -> &mut PreemptionRecord {
        &mut self.preemptions[r - self.preemptions_base]
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

    /// Opens a preemption record for a set of streams about to be preempted
    /// together, and preempts them. Returns the record index, or `None` when
    /// none of the streams had work to preempt (no record is kept then).
    pub fn preempt_streams(&mut self, streams: &[StreamId], wanted: PreemptLevel) -> Option<usize> {
        for &s in streams {
            self.streams[s.0 as usize].by_policy = true;
        }
        self.preempt_streams_inner(streams, wanted)
    }

    fn preempt_streams_inner(
        &mut self,
        streams: &[StreamId],
        wanted: PreemptLevel,
    ) -> Option<usize> {
        let level = wanted.min(self.cfg.device.max_level);
        let targets: Vec<StreamId> = streams
            .iter()
            .copied()
            .filter(|&s| {
                let st = &self.streams[s.0 as usize];
                st.active.is_some() && st.pause == Pause::Running
            })
            .collect();
        if targets.is_empty() {
            return None;
        }
        let idx = self.preemptions_base + self.preemptions.len();
        self.preemptions.push(PreemptionRecord {
            start: self.now,
            end: None,
            level,
            streams: targets.len() as u32,
            dropped_from_host_queue: 0,
            evicted: 0,
            killed: 0,
            completed_during: 0,
        });
        for s in targets {
            self.preempt_one(s, level, Some(idx));
        }
        self.finish_record_if_drained(idx);
        Some(idx)
    }

    fn preempt_one(&mut self, s: StreamId, level: PreemptLevel, record: Option<usize>) {
        let can_clear = self.cfg.device.can_clear_device_queue;
        let st = &mut self.streams[s.0 as usize];
        let Some(a) = &st.active else { return };
        // ❶ reset the host queue: drop the untransmitted launches in O(1)
        // (the cursor stops) and hand their memory to the reclaimer.
        let dropped = a.kernels - a.next_launch;
        st.pause = Pause::Draining {
            record,
            resume_when_drained: false,
        };
        if dropped > 0 {
            self.out
                .push_back(Action::ReclaimHostQueue { stream: s, dropped });
        }
        if let Some(r) = record {
            self.record(r).dropped_from_host_queue += dropped;
        }
        let st = &mut self.streams[s.0 as usize];
        if st.outstanding > 0 {
            // ❷ reset the device queue: lazy eviction through the flag.
            if level >= PreemptLevel::LazyEviction {
                st.flag = true;
                self.out.push_back(Action::SetPreemptFlag {
                    stream: s,
                    value: true,
                });
                if can_clear {
                    self.out.push_back(Action::ClearDeviceQueue { stream: s });
                }
            }
            // ❸ reset the compute units.
            if level >= PreemptLevel::Kill {
                self.out.push_back(Action::KillStream { stream: s });
            }
        }
        self.check_drained(s);
    }

    /// Restores a stream preempted by the policy (no-op when it is running
    /// or was preempted by an operator command). If it is still draining,
    /// the restore happens as soon as it has drained.
    pub fn resume(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        st.by_policy = false;
        if st.by_command {
            return;
        }
        self.resume_inner(s);
    }

    fn resume_inner(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        match st.pause {
            Pause::Running => {}
            Pause::Draining {
                ref mut resume_when_drained,
                ..
            } => *resume_when_drained = true,
            Pause::Preempted => self.restore(s),
        }
    }

    /// Fig. 8 lines 15–18: read the execution index, clear the flag, find the
    /// idempotent entry and relaunch from there.
    fn restore(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        debug_assert_eq!(st.outstanding, 0);
        st.pause = Pause::Running;
        st.by_command = false;
        st.by_policy = false;
        if st.flag {
            st.flag = false;
            self.out.push_back(Action::SetPreemptFlag {
                stream: s,
                value: false,
            });
        }
        if let Some(a) = &mut st.active {
            // Streams run in order, so kernels 0..c completed and the global
            // execution index l is c (kernel c was interrupted), c-1 (it
            // completed and kernel c never passed its flag check), or past c
            // after a restore to an earlier group start. Fig. 8 restarts from
            // find_idem_entry(l) in every case, re-running a completed kernel
            // in the second; the core restarts at c there (nothing of c
            // ran), but only for a completion it saw before the flag was
            // set: one reported while the flag was set for the kernel the
            // index names may be a partial run and was not counted
            // (`on_finished`), so that kernel is c and is re-executed, as
            // §4.4 does. With a closed-loop real-time client that preempts
            // right after every restore, re-running a completed kernel each
            // time would stop best-effort progress.
            // Without start reports, c is assumed interrupted.
            let c = a.completed_upto;
            let model = &self.models[a.model.0 as usize];
            let from = match a.last_started {
                Some(l) if l + 1 == c => c,
                Some(l) if l >= c => model.restore_point(l).min(c),
                _ => model.restore_point(c).min(c),
            };
            self.counters.restores += 1;
            self.counters.redundant_kernels += u64::from(a.completed_upto - from);
            a.next_launch = from;
            a.completed_upto = from;
            self.out.push_back(Action::Restore {
                stream: s,
                req: a.req,
                exec_index: a.last_started,
                from_kernel: from,
            });
        }
        self.pump(s);
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

    pub(crate) fn command_preempt(&mut self, s: StreamId) {
        if s.0 as usize >= self.streams.len() {
            return;
        }
        let level = self.cfg.device.max_level;
        let st = &mut self.streams[s.0 as usize];
        st.by_command = true;
        if st.pause == Pause::Running {
            if st.active.is_some() {
                let rec = self.preempt_streams_inner(&[s], level);
                if rec.is_none() {
                    self.streams[s.0 as usize].pause = Pause::Preempted;
                }
            } else {
                st.pause = Pause::Preempted;
            }
        }
    }

    pub(crate) fn command_resume(&mut self, s: StreamId) {
        if s.0 as usize >= self.streams.len() {
            return;
        }
        let st = &mut self.streams[s.0 as usize];
        st.by_command = false;
        if st.by_policy {
            // The policy still holds it (an RT task runs): it is restored
            // when the policy resumes it.
            return;
        }
        self.resume_inner(s);
    }

    fn active_for(&mut self, s: StreamId, tag: KernelTag) -> Option<&mut Active> {
        self.streams
            .get_mut(s.0 as usize)?
            .active
            .as_mut()
            .filter(|a| a.req == tag.req)
    }

    fn check_drained(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        if st.outstanding != 0 {
            return;
        }
        if let Pause::Draining {
            record,
            resume_when_drained,
        } = st.pause
        {
            st.pause = Pause::Preempted;
            if let Some(r) = record {
                self.finish_record_if_drained(r);
            }
            let st = &self.streams[s.0 as usize];
            if resume_when_drained && !st.by_command && !st.by_policy {
                self.restore(s);
            }
        }
    }

    fn finish_record_if_drained(&mut self, r: usize) {
        if self.record(r).end.is_some() {
            return;
        }
        let still = self
            .streams
            .iter()
            .any(|st| matches!(st.pause, Pause::Draining { record: Some(x), .. } if x == r));
        if !still {
            let now = self.now;
            self.record(r).end = Some(now);
        }
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
