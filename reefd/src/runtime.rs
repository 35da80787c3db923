//! The daemon's runtime: REEF's task queues and clients (§3.1, Fig. 5), the
//! ownership of streams and models, and the thread that paces the engine to
//! the wall clock. One mutex guards the state; request handlers call into the
//! engine directly under it, so an RT request reaches the scheduler (and its
//! first kernel the device queue) on the thread that read it from the socket,
//! with no hand-off.
//!
//! Something must catch the engine up to the wall clock and deliver
//! completions. Catching up late is exact, because the engine replays each
//! device event at its own virtual time and the scheduler reacts at that
//! time (its launches are stamped then, not when the catch-up ran). Only two
//! things depend on when it runs: when a completion reaches its client, and
//! how much a new request must catch up before it is submitted (a request
//! always catches the engine up itself first). Two ways, `daemon.poll`:
//! - poll mode (default): [`Runtime::poll_loop`] runs on the one thread that
//!   serves the socket and catches up at every turn of its event loop while
//!   the device has work; the RT path finds the lock free and the device
//!   current;
//! - pacer mode: a pacer thread sleeps until the engine's next event but at
//!   least [`RuntimeSettings::pacer_tick`] after its previous catch-up, and
//!   never spins. (Waking for every block event kept a core busy, and on a
//!   small host that CPU came out of the RT control path.)
//!
//! docs/daemon.md, "Measuring the control path", has the figures.
//!
//! Host-queue memory of preempted or cancelled work is dropped by the engine
//! (REEF §4.2 "asynchronous memory reclamation" is the engine's concern:
//! reef-sched emits `ReclaimHostQueue`); a client whose connection dies has
//! its streams closed and its tasks dropped here.

use crate::engine::{Engine, EngineEvent, EngineInfo, EngineModel, Nanos};
use crate::metrics::{self, Metrics, QueueDepth};
use crate::protocol::{
    ErrorCode, Event, ModelInfo, PreemptTarget, Priority, Reply, RequestBody, ServerMessage, Stats,
    StatusInfo, StreamInfo, TaskInfo, TaskResult, TaskState,
};
use reef_model::idempotence::IdempotenceMetadata;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Events due this soon are waited for by polling the clock instead of a
/// timed sleep, which on Linux wakes tens of microseconds late.
const SPIN_WINDOW: Duration = Duration::from_micros(100);

/// How often the poll loop re-parses a canned `infer` frame while the device
/// has work (see [`warm_request_path`]).
const WARM_INTERVAL: Duration = Duration::from_micros(50);

/// Keeps the request parser's code and data in the CPU caches. Between two
/// RT requests the thread that serves the socket spends milliseconds
/// simulating the device, which evicts them: parsing an `infer` frame then
/// took 4.1 µs at p50 in the live control-path benchmark, against 1.2 µs
/// when this runs every [`WARM_INTERVAL`] (0.3 µs per call when warm, so
/// well under 1% of the polling thread). It has no effect on any state.
fn warm_request_path() {
    let _ = std::hint::black_box(crate::protocol::parse_request(std::hint::black_box(
        WARM_FRAME,
    )));
}

/// The frame [`warm_request_path`] parses: an RT client's `infer`.
const WARM_FRAME: &[u8] = br#"{"id":0,"op":"infer","stream":0,"model":"vgg","wait":true}"#;

/// The default of [`RuntimeSettings::pacer_tick`].
pub const DEFAULT_PACER_TICK: Duration = Duration::from_micros(50);

/// Credentials of a connected peer (from SO_PEERCRED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

impl Peer {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// A request that failed: the protocol error code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

pub type Outbox = mpsc::UnboundedSender<ServerMessage>;

/// One client connection as the runtime sees it.
#[derive(Clone)]
pub struct Conn {
    pub id: u64,
    pub peer: Peer,
    pub outbox: Outbox,
    /// Notified by the poll loop to keep this connection's read path warm
    /// once it owns a real-time stream ([`Runtime::poll_loop`]).
    pub warm: Arc<tokio::sync::Notify>,
}

/// What handling a request produced.
pub enum Handled {
    Reply(Reply),
    Error(Failure),
    /// A blocking infer: the reply comes through the receiver.
    Pending(oneshot::Receiver<Result<TaskResult, Failure>>),
}

enum Waiter {
    Reply(oneshot::Sender<Result<TaskResult, Failure>>),
    Event(Outbox),
}

struct Task {
    stream: u64,
    model: String,
    priority: Priority,
    arrival: Instant,
    first_queued: Option<Instant>,
    preemptions: u32,
    waiter: Waiter,
}

struct Stream {
    priority: Priority,
    owner: Peer,
    conn: u64,
    label: Option<String>,
    tasks: BTreeSet<u64>,
    completed: u64,
}

struct LoadedModel {
    info: ModelInfo,
    standalone_ns: Option<u64>,
}

struct State {
    /// Read paths the poll loop keeps warm: connections that registered a
    /// real-time stream (dropped with their connection).
    rt_conns: Vec<std::sync::Weak<tokio::sync::Notify>>,
    engine: Box<dyn Engine>,
    info: EngineInfo,
    models: BTreeMap<String, LoadedModel>,
    streams: BTreeMap<u64, Stream>,
    tasks: HashMap<u64, Task>,
    next_stream: u64,
    next_task: u64,
    metrics: Metrics,
    shutting_down: bool,
    stop: bool,
    connections: usize,
    events: Vec<EngineEvent>,
    /// When the pacer will next wake on its own (ns since the epoch;
    /// `Nanos::MAX` while it sleeps without a deadline). A request that
    /// brings the engine's next event before this wakes it.
    pacer_wake: Nanos,
    /// When the pacer last caught the engine up.
    pacer_last: Nanos,
    /// Outcomes found under the lock, delivered after it is released (a
    /// delivery wakes another thread: not while RT requests wait).
    deliveries: Vec<(u64, Waiter, Result<TaskResult, Failure>)>,
    /// Tasks declared by `task_begin` (CASE/MGB), with their connection.
    declared: HashMap<u64, u64>,
    next_declared: u64,
}

/// Fixed settings of a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The device name reported by `status`, e.g. `sim:mi50`.
    pub device: String,
    pub models_dir: PathBuf,
    pub max_tasks_per_stream: usize,
    pub max_frame_bytes: usize,
    /// The pacer catches the engine up at most this often (the longest a
    /// completion waits for its client to be told, beyond the pacer's own
    /// wake-up latency). Shorter: completions are delivered sooner, the
    /// pacer uses more CPU.
    pub pacer_tick: Duration,
}

pub struct Runtime {
    state: Mutex<State>,
    cond: Condvar,
    /// Wakes [`Runtime::poll_loop`] when an idle device is given work.
    poll_wake: tokio::sync::Notify,
    epoch: Instant,
    /// CLOCK_MONOTONIC at `epoch` (Instant is not convertible to it).
    epoch_monotonic_ns: u64,
    settings: RuntimeSettings,
    daemon_uid: u32,
}

impl Runtime {
    pub fn new(engine: Box<dyn Engine>, settings: RuntimeSettings) -> Arc<Runtime> {
        let info = engine.info();
        Arc::new(Runtime {
            state: Mutex::new(State {
                engine,
                info,
                models: BTreeMap::new(),
                streams: BTreeMap::new(),
                tasks: HashMap::new(),
                next_stream: 1,
                next_task: 1,
                metrics: Metrics::default(),
                shutting_down: false,
                rt_conns: Vec::new(),
                stop: false,
                connections: 0,
                events: Vec::new(),
                pacer_wake: 0,
                pacer_last: 0,
                deliveries: Vec::new(),
                declared: HashMap::new(),
                next_declared: 1,
            }),
            cond: Condvar::new(),
            poll_wake: tokio::sync::Notify::new(),
            epoch_monotonic_ns: crate::protocol::monotonic_ns(),
            epoch: Instant::now(),
            settings,
            daemon_uid: nix::unistd::geteuid().as_raw(),
        })
    }

    pub fn settings(&self) -> &RuntimeSettings {
        &self.settings
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug; keep serving rather than
        // cascading it to every connection.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ns(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    fn at(&self, ns: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }

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

    fn pacer(&self) {
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
    fn wake_pacer_if_needed(&self, st: &State) {
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
    fn pace_once(&self) -> bool {
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
    fn catch_up(&self, st: &mut State) -> Nanos {
        let now = self.now_ns();
        let mut ev = std::mem::take(&mut st.events);
        st.engine.advance(now, &mut ev);
        self.apply_events(st, &mut ev);
        st.events = ev;
        now
    }

    /// Releases the lock, then delivers the outcomes found under it.
    fn unlock(&self, mut st: MutexGuard<'_, State>) {
        let done = std::mem::take(&mut st.deliveries);
        drop(st);
        for (task, waiter, result) in done {
            deliver(task, waiter, result);
        }
    }

    /// Stops the pacer thread.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.cond.notify_all();
    }

    /// Applies engine events. `submitted` is the task whose submission
    /// produced them, stamped with the current instant if queued at once.
    fn apply_events(&self, st: &mut State, ev: &mut Vec<EngineEvent>) {
        for e in ev.drain(..) {
            match e {
                EngineEvent::FirstKernelQueued { task, at, issued } => {
                    // The wall-clock instant the launch was issued to the
                    // (simulated) device queue, whichever thread did it.
                    let when = issued;
                    if let Some(t) = st.tasks.get_mut(&task) {
                        if t.first_queued.is_none() {
                            t.first_queued = Some(when);
                            let us = when.saturating_duration_since(t.arrival).as_secs_f64() * 1e6;
                            tracing::trace!(
                                task,
                                control_path_us = us,
                                device_time_us = self
                                    .at(at)
                                    .saturating_duration_since(t.arrival)
                                    .as_secs_f64()
                                    * 1e6,
                                "first kernel queued"
                            );
                            if t.priority == Priority::Rt {
                                st.metrics.control_path.observe_us(us);
                            }
                        }
                    }
                }
                EngineEvent::KernelsLaunched { count } => st.metrics.kernels_launched += count,
                EngineEvent::Preempted { level, kernels } => {
                    *st.metrics.preemptions.entry(level).or_default() += 1;
                    st.metrics.preempted_kernels += kernels;
                }
                EngineEvent::Restored { task } => {
                    st.metrics.restores += 1;
                    if let Some(t) = st.tasks.get_mut(&task) {
                        t.preemptions += 1;
                    }
                }
                EngineEvent::TaskDone { task, at, verified } => {
                    let Some(t) = st.tasks.remove(&task) else {
                        continue;
                    };
                    let done = self.at(at).max(t.arrival);
                    let latency_us = done.duration_since(t.arrival).as_secs_f64() * 1e6;
                    let standalone = st.models.get(&t.model).and_then(|m| m.standalone_ns);
                    let normalized = standalone.map(|s| latency_us * 1e3 / s as f64);
                    if t.priority.is_rt() {
                        st.metrics.rt_latency.observe_us(latency_us);
                        if let Some(n) = normalized {
                            st.metrics.observe_rt_normalized(n);
                        }
                    } else {
                        st.metrics.be_latency.observe_us(latency_us);
                    }
                    st.metrics.tasks_completed += 1;
                    if verified == Some(false) {
                        st.metrics.corrupted_outputs += 1;
                    }
                    if let Some(s) = st.streams.get_mut(&t.stream) {
                        s.tasks.remove(&task);
                        s.completed += 1;
                    }
                    let result = TaskResult {
                        task,
                        stream: t.stream,
                        model: t.model.clone(),
                        latency_us,
                        normalized_latency: normalized,
                        control_path_us: t
                            .first_queued
                            .map(|q| q.saturating_duration_since(t.arrival).as_secs_f64() * 1e6),
                        first_kernel_monotonic_ns: t.first_queued.map(|q| {
                            self.epoch_monotonic_ns
                                + q.saturating_duration_since(self.epoch).as_nanos() as u64
                        }),
                        preemptions: t.preemptions,
                        outputs_verified: verified,
                    };
                    st.deliveries.push((task, t.waiter, Ok(result)));
                }
                EngineEvent::DeviceError { action, error } => {
                    st.metrics.device_errors += 1;
                    tracing::error!(action = %action, "device error: {error}");
                }
                EngineEvent::TaskRejected { task, reason } => {
                    if let Some(t) = st.tasks.remove(&task) {
                        st.metrics.tasks_failed += 1;
                        if let Some(s) = st.streams.get_mut(&t.stream) {
                            s.tasks.remove(&task);
                        }
                        st.deliveries.push((
                            task,
                            t.waiter,
                            Err(Failure::new(ErrorCode::Unsupported, reason)),
                        ));
                    }
                }
                EngineEvent::TaskFailed { task, reason } => {
                    if let Some(t) = st.tasks.remove(&task) {
                        st.metrics.tasks_failed += 1;
                        if let Some(s) = st.streams.get_mut(&t.stream) {
                            s.tasks.remove(&task);
                        }
                        st.deliveries.push((
                            task,
                            t.waiter,
                            Err(Failure::new(ErrorCode::Internal, reason)),
                        ));
                    }
                }
            }
        }
    }

    /// Counts a connection; false when the limit is reached.
    pub fn connection_opened(&self, max: usize) -> bool {
        let mut st = self.lock();
        if st.connections >= max {
            return false;
        }
        st.connections += 1;
        true
    }

    /// A connection closed (or its client died): close its streams and drop
    /// their tasks, so nothing stays stuck on the device.
    pub fn connection_closed(&self, conn: u64) {
        let mut st = self.lock();
        st.connections = st.connections.saturating_sub(1);
        if st.declared.values().any(|&c| c == conn) {
            st.declared.retain(|_, c| *c != conn);
            st.engine.job_end(conn + 1);
        }
        let ids: Vec<u64> = st
            .streams
            .iter()
            .filter(|(_, s)| s.conn == conn)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let n = self.close_stream(&mut st, id, "the client's connection closed");
            tracing::info!(
                stream = id,
                cancelled = n,
                "connection closed: stream released"
            );
        }
        self.wake_pacer_if_needed(&st);
        self.unlock(st);
    }

    fn close_stream(&self, st: &mut State, stream: u64, why: &str) -> u64 {
        let now = self.now_ns();
        let mut ev = std::mem::take(&mut st.events);
        let dropped = st.engine.close_stream(now, stream, &mut ev);
        self.apply_events(st, &mut ev);
        st.events = ev;
        let mut n = 0;
        let mut pending: Vec<u64> = dropped;
        if let Some(s) = st.streams.remove(&stream) {
            pending.extend(s.tasks);
        }
        for task in pending {
            if let Some(t) = st.tasks.remove(&task) {
                n += 1;
                st.metrics.tasks_failed += 1;
                deliver(
                    task,
                    t.waiter,
                    Err(Failure::new(
                        ErrorCode::Cancelled,
                        format!("task {task} was cancelled: {why}"),
                    )),
                );
            }
        }
        n
    }

    pub fn count_bad_request(&self) {
        let mut st = self.lock();
        st.metrics.requests += 1;
        st.metrics.bad_requests += 1;
    }

    /// Handles one request from `conn`; `arrival` is when its last byte was
    /// read from the socket.
    pub fn handle(&self, conn: &Conn, body: RequestBody, arrival: Instant) -> Handled {
        if let RequestBody::LoadModel {
            name,
            path,
            idempotence,
            device_index,
        } = body
        {
            return self.load_model(conn, name, path, idempotence, device_index);
        }
        let mut st = self.lock();
        st.metrics.requests += 1;
        let r = self.handle_locked(&mut st, conn, body, arrival);
        self.wake_pacer_if_needed(&st);
        self.unlock(st);
        r
    }

    fn handle_locked(
        &self,
        st: &mut State,
        conn: &Conn,
        body: RequestBody,
        arrival: Instant,
    ) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let peer = conn.peer;
        match body {
            RequestBody::Infer {
                stream,
                model,
                wait,
                qos_ms,
            } => {
                if let Some(q) = qos_ms.filter(|q| !(q.is_finite() && *q > 0.0)) {
                    return Err_(Failure::new(
                        ErrorCode::BadRequest,
                        format!("qos_ms must be a positive number of milliseconds, got {q}"),
                    ));
                }
                let qos_ns = qos_ms.map(|q| (q * 1e6).round() as u64);
                self.infer(st, conn, stream, &model, wait, qos_ns, arrival)
            }
            RequestBody::Hello => Ok_(Reply::Hello(crate::protocol::HelloInfo {
                daemon_version: env!("CARGO_PKG_VERSION").into(),
                protocol: crate::protocol::PROTOCOL_VERSION,
                peer_uid: peer.uid,
                peer_gid: peer.gid,
                peer_pid: peer.pid,
                max_frame_bytes: self.settings.max_frame_bytes,
            })),
            RequestBody::Status => Ok_(Reply::Status(Box::new(self.status_locked(st)))),
            RequestBody::LoadModel { .. } => Err_(Failure::new(
                ErrorCode::Internal,
                "load_model is handled outside the lock",
            )),
            RequestBody::UnloadModel { name } => self.unload_model(st, peer, name),
            RequestBody::ListModels => Ok_(Reply::Models {
                models: st.models.values().map(|m| m.info.clone()).collect(),
            }),
            RequestBody::Register { priority, label } => self.register(st, conn, priority, label),
            RequestBody::Unregister { stream } => self.unregister(st, peer, stream),
            RequestBody::ListStreams => Ok_(Reply::Streams {
                streams: st.streams.keys().map(|id| stream_info(st, *id)).collect(),
            }),
            RequestBody::ListTasks => self.list_tasks(st),
            RequestBody::Stats => Ok_(Reply::Stats(Box::new(self.stats_locked(st)))),
            RequestBody::Preempt { target } => self.preempt(st, peer, target, false),
            RequestBody::Resume { target } => self.preempt(st, peer, target, true),
            RequestBody::TaskBegin {
                memory,
                threads_per_block,
                blocks,
            } => self.task_begin(
                st,
                conn,
                reef_sched::place::TaskNeeds {
                    memory,
                    threads_per_block,
                    blocks,
                },
            ),
            RequestBody::TaskPoll { task } | RequestBody::TaskEnd { task }
                if st.declared.get(&task) != Some(&conn.id) =>
            {
                Err_(Failure::new(
                    ErrorCode::NotFound,
                    format!("task {task} was not begun on this connection (or has ended): call task_begin first"),
                ))
            }
            RequestBody::TaskPoll { task } => Ok_(Reply::TaskPlaced {
                task,
                device: st.engine.task_device(task),
            }),
            RequestBody::TaskEnd { task } => match st.engine.task_end(task) {
                Ok(()) => {
                    st.declared.remove(&task);
                    Ok_(Reply::TaskEnded { task })
                }
                Err(e) => Err_(engine_failure(e)),
            },
            RequestBody::SetPolicy { policy } => self.set_policy(st, peer, policy),
        }
    }

    /// Unloads a model (its owner or root; refused while it has work).
    fn unload_model(&self, st: &mut State, peer: Peer, name: String) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let name = canonical_model(st, &name);
        let Some(m) = st.models.get(&name) else {
            return Err_(not_loaded(st, &name));
        };
        if m.info.owner_uid != peer.uid && !peer.is_root() {
            return Err_(Failure::new(
                ErrorCode::PermissionDenied,
                format!(
                    "model {name} was loaded by uid {}; only that user or root may unload it",
                    m.info.owner_uid
                ),
            ));
        }
        let users = st.tasks.values().filter(|t| t.model == name).count();
        if users > 0 {
            return Err_(Failure::new(
                ErrorCode::Busy,
                format!("model {name} has {users} inference(s) in flight; retry when they finish"),
            ));
        }
        st.models.remove(&name);
        st.engine.remove_model(&name);
        tracing::info!(model = %name, uid = peer.uid, "model unloaded");
        Ok_(Reply::ModelUnloaded { name })
    }

    /// Opens a stream at `priority` for the connection.
    fn register(
        &self,
        st: &mut State,
        conn: &Conn,
        priority: Priority,
        label: Option<String>,
    ) -> Handled {
        let peer = conn.peer;
        use Handled::{Error as Err_, Reply as Ok_};
        if st.shutting_down {
            return Err_(shutting_down());
        }
        let id = st.next_stream;
        if let Err(e) = st.engine.open_stream(id, priority) {
            return Err_(engine_failure(e));
        }
        st.next_stream += 1;
        st.streams.insert(
            id,
            Stream {
                priority,
                owner: peer,
                conn: conn.id,
                label,
                tasks: BTreeSet::new(),
                completed: 0,
            },
        );
        if priority == Priority::Rt {
            // Closed connections leave (also without a poll loop).
            st.rt_conns.retain(|w| w.strong_count() > 0);
            let known = st
                .rt_conns
                .iter()
                .any(|w| w.as_ptr() == Arc::as_ptr(&conn.warm));
            if !known {
                st.rt_conns.push(Arc::downgrade(&conn.warm));
            }
        }
        tracing::info!(stream = id, %priority, uid = peer.uid, "stream registered");
        Ok_(Reply::Registered(stream_info(st, id)))
    }

    /// Closes a stream (its owner or root), cancelling its queued tasks.
    fn unregister(&self, st: &mut State, peer: Peer, stream: u64) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let Some(s) = st.streams.get(&stream) else {
            return Err_(no_stream(stream));
        };
        if s.owner.uid != peer.uid && !peer.is_root() {
            return Err_(not_owner("unregister", stream, s.owner.uid));
        }
        let n = self.close_stream(st, stream, "its stream was unregistered");
        Ok_(Reply::Unregistered {
            stream,
            cancelled_tasks: n,
        })
    }

    /// Every task in flight, with its progress.
    fn list_tasks(&self, st: &State) -> Handled {
        use Handled::Reply as Ok_;
        let mut tasks: Vec<TaskInfo> = st
            .tasks
            .iter()
            .map(|(id, t)| {
                let p = st.engine.task_progress(*id);
                TaskInfo {
                    task: *id,
                    stream: t.stream,
                    model: t.model.clone(),
                    priority: t.priority,
                    state: p.map_or(TaskState::Queued, |p| p.state),
                    age_us: t.arrival.elapsed().as_secs_f64() * 1e6,
                    next_kernel: p.map_or(0, |p| p.next_kernel),
                    kernels: p.map_or(0, |p| p.kernels),
                }
            })
            .collect();
        tasks.sort_by_key(|t| t.task);
        Ok_(Reply::Tasks { tasks })
    }

    /// Places a declared task (CASE/MGB `task_begin`).
    fn task_begin(
        &self,
        st: &mut State,
        conn: &Conn,
        needs: reef_sched::place::TaskNeeds,
    ) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let task = st.next_declared;
        match st.engine.task_begin(conn.id + 1, task, needs) {
            Ok(device) => {
                st.next_declared += 1;
                st.declared.insert(task, conn.id);
                tracing::info!(task, ?device, memory = needs.memory, "task_begin");
                Ok_(Reply::TaskPlaced { task, device })
            }
            Err(e) => Err_(engine_failure(e)),
        }
    }

    /// Switches the scheduling policy (root or the daemon's user).
    fn set_policy(&self, st: &mut State, peer: Peer, policy: String) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        if !peer.is_root() && peer.uid != self.daemon_uid {
            return Err_(Failure::new(
                ErrorCode::PermissionDenied,
                "switching the policy affects every client: only root or the daemon's user may do it",
            ));
        }
        if !crate::config::POLICIES.contains(&policy.as_str()) {
            return Err_(Failure::new(
                ErrorCode::BadRequest,
                crate::config::unknown_policy(&policy),
            ));
        }
        let now = self.now_ns();
        match st.engine.set_policy(now, &policy) {
            Ok(()) => {
                st.info = st.engine.info();
                tracing::info!(%policy, uid = peer.uid, "policy switched");
                Ok_(Reply::PolicySet { policy })
            }
            Err(e) => Err_(engine_failure(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn infer(
        &self,
        st: &mut State,
        conn: &Conn,
        stream: u64,
        model: &str,
        wait: bool,
        qos_ns: Option<u64>,
        arrival: Instant,
    ) -> Handled {
        if st.shutting_down {
            return Handled::Error(shutting_down());
        }
        let model = canonical_model(st, model);
        let Some(s) = st.streams.get(&stream) else {
            return Handled::Error(no_stream(stream));
        };
        if s.owner.uid != conn.peer.uid && !conn.peer.is_root() {
            return Handled::Error(not_owner("submit to", stream, s.owner.uid));
        }
        if s.tasks.len() >= self.settings.max_tasks_per_stream {
            return Handled::Error(Failure::new(
                ErrorCode::Busy,
                format!(
                    "stream {stream} already has {} inferences in flight (daemon.max_tasks_per_stream); wait for some to finish",
                    s.tasks.len()
                ),
            ));
        }
        let priority = s.priority;
        if !st.models.contains_key(&model) {
            return Handled::Error(not_loaded(st, &model));
        }
        let task = st.next_task;
        st.next_task += 1;
        let now = self.now_ns();
        let mut ev = std::mem::take(&mut st.events);
        if qos_ns.is_some() {
            st.engine.set_qos(task, qos_ns);
        }
        // The submission first: for an RT request it issues the first kernel
        // (the control path ends there); the bookkeeping below is not on it.
        if let Err(e) = st.engine.submit(now, task, stream, &model, &mut ev) {
            st.events = ev;
            return Handled::Error(engine_failure(e));
        }
        let (waiter, handled) = if wait {
            let (tx, rx) = oneshot::channel();
            (Waiter::Reply(tx), Handled::Pending(rx))
        } else {
            (
                Waiter::Event(conn.outbox.clone()),
                Handled::Reply(Reply::InferQueued { task }),
            )
        };
        st.tasks.insert(
            task,
            Task {
                stream,
                model,
                priority,
                arrival,
                first_queued: None,
                preemptions: 0,
                waiter,
            },
        );
        st.metrics.tasks_submitted += 1;
        if let Some(s) = st.streams.get_mut(&stream) {
            s.tasks.insert(task);
        }
        self.apply_events(st, &mut ev);
        st.events = ev;
        if priority == Priority::Rt {
            self.run_until_first_kernel(st, task);
        }
        handled
    }

    /// The RT control path: when the engine's next step for a new RT task
    /// (e.g. launching its first kernel once the preempted BE kernels are
    /// killed) is due within [`SPIN_WINDOW`], run it on this thread rather
    /// than waiting for the pacer to be woken and scheduled.
    fn run_until_first_kernel(&self, st: &mut State, task: u64) {
        let limit = Instant::now() + SPIN_WINDOW;
        while st
            .tasks
            .get(&task)
            .is_some_and(|t| t.first_queued.is_none())
        {
            let Some(t) = st.engine.next_event_time() else {
                return;
            };
            let due = self.at(t);
            if due > limit {
                return;
            }
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            self.catch_up(st);
        }
    }

    fn preempt(&self, st: &mut State, peer: Peer, target: PreemptTarget, resume: bool) -> Handled {
        let what = if resume { "resume" } else { "preempt" };
        let streams: Vec<u64> = match target {
            PreemptTarget::Stream(id) => {
                let Some(s) = st.streams.get(&id) else {
                    return Handled::Error(no_stream(id));
                };
                if s.owner.uid != peer.uid && !peer.is_root() {
                    return Handled::Error(not_owner(what, id, s.owner.uid));
                }
                vec![id]
            }
            PreemptTarget::All => st
                .streams
                .iter()
                .filter(|(_, s)| !s.priority.is_rt())
                .filter(|(_, s)| peer.is_root() || s.owner.uid == peer.uid)
                .map(|(id, _)| *id)
                .collect(),
        };
        let now = self.now_ns();
        let mut total = 0;
        let mut ev = std::mem::take(&mut st.events);
        for id in &streams {
            let r = if resume {
                st.engine.resume(now, *id, &mut ev).map(|_| 0)
            } else {
                st.engine.preempt(now, *id, &mut ev)
            };
            match r {
                Ok(n) => total += n,
                Err(e) => {
                    self.apply_events(st, &mut ev);
                    st.events = ev;
                    return Handled::Error(engine_failure(e));
                }
            }
        }
        self.apply_events(st, &mut ev);
        st.events = ev;
        if resume {
            tracing::info!(?streams, uid = peer.uid, "resumed by command");
            return Handled::Reply(Reply::Resumed { streams });
        }
        tracing::info!(
            ?streams,
            kernels = total,
            uid = peer.uid,
            "preempted by command"
        );
        Handled::Reply(Reply::Preempted {
            streams,
            preempted_kernels: total,
        })
    }

    fn load_model(
        &self,
        conn: &Conn,
        name: String,
        path: Option<PathBuf>,
        idempotence: Option<PathBuf>,
        device_index: Option<usize>,
    ) -> Handled {
        // A name that is a path (`models load /some/dir/vgg`) loads that
        // model under its directory's name, the name every other command
        // takes; a plain name is looked up in the models directory.
        let (name, path) = match path {
            Some(p) => (name, Some(p)),
            None if name_is_path(&name) => match model_name_of_path(Path::new(&name)) {
                Some(n) => (n, Some(PathBuf::from(&name))),
                None => {
                    return Handled::Error(Failure::new(
                        ErrorCode::BadRequest,
                        format!(
                            "cannot take a model name from the path {name:?}; pass one with --name"
                        ),
                    ))
                }
            },
            None => (name, None),
        };
        {
            let mut st = self.lock();
            st.metrics.requests += 1;
            let canon = canonical_model(&st, &name);
            if let Some(m) = st.models.get(&canon) {
                // Loading is idempotent: the same model again is a no-op.
                if path
                    .as_ref()
                    .is_none_or(|p| same_model_path(p, &m.info.path))
                {
                    return Handled::Reply(Reply::ModelLoaded(m.info.clone()));
                }
                return Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "a model named {canon} is already loaded from {}; unload it first or choose another name",
                        m.info.path.display()
                    ),
                ));
            }
        }
        // File I/O outside the lock.
        let loaded = match &path {
            Some(p) => reef_model::Model::load(p),
            None => reef_model::load_named(&self.settings.models_dir, &name),
        };
        let model = match loaded {
            Ok(m) => m,
            Err(e) => return Handled::Error(Failure::new(ErrorCode::NotFound, e.to_string())),
        };
        let key = if path.is_some() {
            name.clone()
        } else {
            reef_model::disb_to_dir(&name).unwrap_or(&name).to_string()
        };
        let idem_path = idempotence.clone().or_else(|| {
            let p = model
                .path
                .with_file_name(format!("{}.idem.json", model.name));
            p.is_file().then_some(p)
        });
        let idem = match &idem_path {
            Some(p) => match IdempotenceMetadata::load(p) {
                Ok(m) if m.kernels.len() == model.kernels.len() => Some(Arc::new(m)),
                Ok(m) => {
                    return Handled::Error(Failure::new(
                        ErrorCode::BadRequest,
                        format!(
                            "idempotence metadata {} has {} kernels but model {} has {}; regenerate it with reef-check-idem",
                            p.display(),
                            m.kernels.len(),
                            model.name,
                            model.kernels.len()
                        ),
                    ))
                }
                Err(e) => return Handled::Error(Failure::new(ErrorCode::BadRequest, e.to_string())),
            },
            None => None,
        };
        let mut info = ModelInfo {
            name: key.clone(),
            path: model.path.clone(),
            kernels: model.kernels.len(),
            buffers: model.buffers.len(),
            standalone_us: None, // known once loaded, below
            idempotence: idem.as_ref().and(idem_path),
            owner_uid: conn.peer.uid,
            device: None,
        };
        let profiled_ns = model.measured_latency_ns();
        let mut st = self.lock();
        if let Some(m) = st.models.get(&key) {
            return Handled::Reply(Reply::ModelLoaded(m.info.clone()));
        }
        match st.engine.add_model_on(
            EngineModel {
                name: key.clone(),
                model: Arc::new(model),
                idempotence: idem,
            },
            device_index,
        ) {
            Ok(d) => info.device = d,
            Err(e) => return Handled::Error(engine_failure(e)),
        }
        // A stand-alone latency the device measured at load is this
        // device's; a profile's may be another GPU's (the MI50's).
        let standalone_ns = st.engine.standalone_ns(&key).or(profiled_ns);
        info.standalone_us = standalone_ns.map(|n| n as f64 / 1e3);
        tracing::info!(model = %key, uid = conn.peer.uid, kernels = info.kernels, "model loaded");
        st.models.insert(
            key,
            LoadedModel {
                info: info.clone(),
                standalone_ns,
            },
        );
        Handled::Reply(Reply::ModelLoaded(info))
    }

    fn status_locked(&self, st: &State) -> StatusInfo {
        StatusInfo {
            daemon_version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            device: self.settings.device.clone(),
            engine: st.info.name.clone(),
            policy: st.info.policy.clone(),
            preemption_levels: st.info.preemption_levels.clone(),
            preemption_notes: st.engine.preemption_notes(),
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            models: st.models.len(),
            streams: st.streams.len(),
            tasks_in_flight: st.tasks.len(),
            connections: st.connections,
            measuring: st.engine.fikit().map_or_else(Vec::new, |f| f.measuring),
            devices: st.engine.devices(),
        }
    }

    fn stats_locked(&self, st: &State) -> Stats {
        let m = &st.metrics;
        let norm = metrics::summarize(m.rt_normalized.iter().copied());
        let padding = st.engine.padding();
        Stats {
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            requests: m.requests,
            bad_requests: m.bad_requests,
            tasks_submitted: m.tasks_submitted,
            tasks_completed: m.tasks_completed,
            tasks_failed: m.tasks_failed,
            kernels_launched: m.kernels_launched,
            restores: m.restores,
            corrupted_outputs: m.corrupted_outputs,
            device_errors: m.device_errors,
            preemptions: m
                .preemptions
                .iter()
                .map(|(l, n)| (l.to_string(), *n))
                .collect(),
            rt_latency: m.rt_latency.summary(),
            rt_normalized_mean: (norm.count > 0).then_some(norm.mean_us),
            be_latency: m.be_latency.summary(),
            control_path: m.control_path.summary(),
            padded_launches: padding.map_or(0, |p| p.padded_launches),
            be_blocks_padded: padding.map_or(0, |p| p.be_blocks_padded),
            fikit: st.engine.fikit(),
            aker: st.engine.aker(),
            placement: st.engine.placement(),
        }
    }

    pub fn status(&self) -> StatusInfo {
        self.status_locked(&self.lock())
    }

    pub fn stats(&self) -> Stats {
        self.stats_locked(&self.lock())
    }

    /// The Prometheus text exposition of the metrics.
    pub fn prometheus(&self) -> String {
        let st = self.lock();
        let queues: Vec<QueueDepth> = st
            .streams
            .iter()
            .map(|(id, s)| {
                let (host, device) = st.engine.queue_depths(*id);
                QueueDepth {
                    stream: *id,
                    priority: s.priority.to_string(),
                    host,
                    device,
                }
            })
            .collect();
        let padding = st
            .engine
            .padding()
            .map(|p| (p.padded_launches, p.be_blocks_padded));
        let mut text = metrics::render(
            &st.metrics,
            self.epoch.elapsed().as_secs_f64(),
            &queues,
            padding,
        );
        if let Some(p) = st.engine.placement() {
            text.push_str(&metrics::render_node(&st.engine.devices(), &p));
        }
        text
    }

    /// Refuses new work from now on (shutdown has begun).
    pub fn begin_shutdown(&self) {
        self.lock().shutting_down = true;
    }

    pub fn tasks_in_flight(&self) -> usize {
        self.lock().tasks.len()
    }

    /// Fails every task still in flight with `shutting_down`; returns how
    /// many there were.
    pub fn fail_all(&self, why: &str) -> usize {
        let mut st = self.lock();
        let ids: Vec<u64> = st.streams.keys().copied().collect();
        let mut n = 0;
        for id in ids {
            let now = self.now_ns();
            let mut ev = std::mem::take(&mut st.events);
            let _ = st.engine.close_stream(now, id, &mut ev);
            st.events = ev;
        }
        let tasks: Vec<u64> = st.tasks.keys().copied().collect();
        for task in tasks {
            if let Some(t) = st.tasks.remove(&task) {
                n += 1;
                st.metrics.tasks_failed += 1;
                deliver(
                    task,
                    t.waiter,
                    Err(Failure::new(
                        ErrorCode::ShuttingDown,
                        format!("task {task} was not finished: {why}"),
                    )),
                );
            }
        }
        self.unlock(st);
        n
    }
}

/// Where the thread that runs the device runs (`daemon.device_cpus`,
/// `daemon.device_nice`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    /// CPUs it may use; empty: any.
    pub cpus: Vec<usize>,
    /// Its nice value.
    pub nice: i32,
}

impl Placement {
    /// An error naming the first of `cpus` the calling thread may not use
    /// (it does not exist, or a cpuset or `taskset` excludes it).
    pub fn check(&self) -> anyhow::Result<()> {
        let Some(allowed) = Placement::save().cpus else {
            return Ok(());
        };
        let usable: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the set at an index below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
            .collect();
        if let Some(c) = self.cpus.iter().find(|c| !usable.contains(c)) {
            anyhow::bail!(
                "daemon.device_cpus names CPU {c}, which reefd may not use; it may use CPUs {usable:?}"
            );
        }
        Ok(())
    }

    /// Applies this placement to the calling thread. A CPU that does not
    /// exist is an error; a nice value the daemon may not take (below 0
    /// without CAP_SYS_NICE) is a warning, and the thread keeps its own.
    pub fn apply(&self) -> anyhow::Result<()> {
        if !self.cpus.is_empty() {
            set_cpus(&self.cpus).map_err(|e| {
                anyhow::anyhow!(
                    "cannot run the device thread on CPUs {:?} (daemon.device_cpus): {e}; name CPUs this machine has (see nproc)",
                    self.cpus
                )
            })?;
        }
        if self.nice != 0 {
            // SAFETY: setpriority on the calling thread's id; no pointers.
            let rc = unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, self.nice)
            };
            if rc != 0 {
                tracing::warn!(
                    nice = self.nice,
                    error = %std::io::Error::last_os_error(),
                    "cannot set daemon.device_nice (below 0 needs root or CAP_SYS_NICE); the device thread runs at nice 0"
                );
            }
        }
        Ok(())
    }

    /// The calling thread's CPUs and nice value, to give back with
    /// [`SavedPlacement::restore`] to threads started after
    /// [`Placement::apply`] (they would inherit the device thread's
    /// placement and compete with it for its CPUs).
    pub fn save() -> SavedPlacement {
        // SAFETY: sched_getaffinity(0) fills the set of the calling thread;
        // getpriority reads the calling thread's nice value (errno is not
        // needed: -1 is a valid result and is kept as such).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok =
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
            SavedPlacement {
                cpus: ok.then_some(set),
                nice,
            }
        }
    }
}

/// A thread's CPUs and nice value as they were ([`Placement::save`]).
#[derive(Clone, Copy)]
pub struct SavedPlacement {
    cpus: Option<libc::cpu_set_t>,
    nice: i32,
}

impl SavedPlacement {
    /// Gives the calling thread these CPUs and this nice value (best effort).
    pub fn restore(&self) {
        // SAFETY: the set came from sched_getaffinity; both calls act on the
        // calling thread only. Raising the nice value needs no privilege.
        unsafe {
            if let Some(set) = &self.cpus {
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
            }
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, self.nice);
        }
    }
}

/// Restricts the calling thread to `cpus`.
fn set_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET is given
    // indices below CPU_SETSIZE; sched_setaffinity(0) is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c >= libc::CPU_SETSIZE as usize {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Puts the calling thread in SCHED_FIFO at `priority` (0: leave it).
/// Failure (no CAP_SYS_NICE) is logged, not fatal.
pub fn set_realtime_priority(priority: u8) {
    if priority == 0 {
        return;
    }
    let param = libc::sched_param {
        sched_priority: priority as i32,
    };
    // SAFETY: pthread_self() is the calling thread and `param` is a valid
    // sched_param for SCHED_FIFO.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        tracing::warn!(
            priority,
            error = %std::io::Error::from_raw_os_error(rc),
            "cannot use SCHED_FIFO (daemon.realtime_priority needs root or CAP_SYS_NICE); running at normal priority"
        );
    }
}

fn deliver(task: u64, w: Waiter, r: Result<TaskResult, Failure>) {
    match w {
        Waiter::Reply(tx) => {
            let _ = tx.send(r);
        }
        Waiter::Event(out) => {
            let event = match r {
                Ok(t) => Event::TaskDone(t),
                Err(f) => Event::TaskFailed {
                    task,
                    code: f.code,
                    message: f.message,
                },
            };
            let _ = out.send(ServerMessage::Event { event });
        }
    }
}

fn canonical_model(st: &State, name: &str) -> String {
    if st.models.contains_key(name) {
        return name.to_string();
    }
    reef_model::disb_to_dir(name).unwrap_or(name).to_string()
}

fn same_model_path(a: &Path, b: &Path) -> bool {
    let a = std::fs::canonicalize(a).unwrap_or_else(|_| a.to_path_buf());
    let b = std::fs::canonicalize(b).unwrap_or_else(|_| b.to_path_buf());
    a == b || b.parent() == Some(a.as_path())
}

fn stream_info(st: &State, id: u64) -> StreamInfo {
    let s = &st.streams[&id];
    let (host, device) = st.engine.queue_depths(id);
    StreamInfo {
        stream: id,
        priority: s.priority,
        owner_uid: s.owner.uid,
        owner_pid: s.owner.pid,
        label: s.label.clone(),
        tasks_in_flight: s.tasks.len(),
        host_queue: host,
        device_queue: device,
        completed: s.completed,
    }
}

fn engine_failure(e: crate::engine::EngineError) -> Failure {
    use crate::engine::EngineError as E;
    let code = match &e {
        E::Unsupported(_) => ErrorCode::Unsupported,
        E::NotFound(_) => ErrorCode::NotFound,
        E::Invalid(_) => ErrorCode::BadRequest,
        E::Busy(_) => ErrorCode::Busy,
    };
    Failure::new(code, e.to_string())
}

fn no_stream(id: u64) -> Failure {
    Failure::new(
        ErrorCode::NotFound,
        format!("no stream {id}; register first (reefctl streams lists the live ones)"),
    )
}

fn not_loaded(st: &State, name: &str) -> Failure {
    let loaded: Vec<&str> = st.models.keys().map(String::as_str).collect();
    Failure::new(
        ErrorCode::NotFound,
        format!(
            "model {name} is not loaded (loaded: {}); load it with `reefctl models load {name}`",
            if loaded.is_empty() {
                "none".to_string()
            } else {
                loaded.join(", ")
            }
        ),
    )
}

fn not_owner(what: &str, stream: u64, owner: u32) -> Failure {
    Failure::new(
        ErrorCode::PermissionDenied,
        format!("stream {stream} belongs to uid {owner}; only its owner or root may {what} it"),
    )
}

fn shutting_down() -> Failure {
    Failure::new(
        ErrorCode::ShuttingDown,
        "reefd is shutting down and accepts no new work",
    )
}

/// Whether a `models load` NAME is a path rather than a name in the models
/// directory: it has a path separator or starts with `.`.
fn name_is_path(name: &str) -> bool {
    name.contains('/') || name.starts_with('.')
}

/// The name a model loaded from `path` is registered under: its directory's
/// name, or a schedule file's stem (`/x/vgg/vgg.json` and `/x/vgg` are both
/// `vgg`; `/x/vgg.json` is `vgg`).
fn model_name_of_path(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let name = match file.strip_suffix(".json") {
        Some(stem) => stem,
        None => file,
    };
    (!name.is_empty() && name != "." && name != "..").then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_request, RequestBody};

    /// The warm-up must run the path a real `infer` takes: if the protocol
    /// changed under it, it would warm the error path instead.
    #[test]
    fn the_warm_up_frame_is_a_valid_infer_request() {
        let r = parse_request(WARM_FRAME).expect("the warm-up frame parses");
        assert!(matches!(r.body, RequestBody::Infer { wait: true, .. }));
    }

    fn cpus_of_this_thread() -> Vec<usize> {
        let saved = Placement::save();
        let set = saved.cpus.expect("sched_getaffinity works here");
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the set below CPU_SETSIZE.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect()
    }

    /// `daemon.device_cpus` pins the thread that applies it, and the
    /// threads it starts get the saved placement back.
    #[test]
    fn a_placement_pins_its_thread_and_saved_placements_restore() {
        std::thread::spawn(|| {
            let before = cpus_of_this_thread();
            let last = *before.last().unwrap();
            let saved = Placement::save();
            let p = Placement {
                cpus: vec![last],
                nice: 0,
            };
            p.check().unwrap();
            p.apply().unwrap();
            assert_eq!(cpus_of_this_thread(), vec![last]);
            // A thread started now inherits the pin until it restores.
            std::thread::spawn(move || {
                assert_eq!(cpus_of_this_thread(), vec![last]);
                saved.restore();
                assert_eq!(cpus_of_this_thread(), before);
            })
            .join()
            .unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_cpu_reefd_may_not_use_is_refused_with_the_cpus_it_may() {
        let p = Placement {
            cpus: vec![1023],
            nice: 0,
        };
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("CPU 1023") && e.contains("may use CPUs"), "{e}");
    }
}
