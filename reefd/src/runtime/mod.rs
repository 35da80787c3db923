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
use tokio::sync::mpsc;

mod affinity;
mod answers;
mod events;
mod handle;
mod models;
mod pacing;
mod status;
mod streams;
mod tensors;

pub use affinity::{set_realtime_priority, Placement, SavedPlacement};
use answers::{deliver, spawn_answers, Delivery};
pub use models::name_is_path;
use models::{canonical_model, not_loaded};
use pacing::SPIN_WINDOW;
use streams::stream_info;

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

/// Where a connection's messages go.
#[derive(Clone)]
pub enum Outbox {
    /// The connection's writer task (the Unix socket, server.rs).
    Writer(mpsc::UnboundedSender<ServerMessage>),
    /// A client inside the daemon (the KServe front, kserve/mod.rs): each
    /// message is handed to this function on the thread that produced it
    /// (the one that completed the task), with no task between it and
    /// the waiting request. It must not block.
    Direct(Arc<dyn Fn(ServerMessage) + Send + Sync>),
}

impl Outbox {
    /// Sends `msg`; a connection gone drops it.
    pub fn send(&self, msg: ServerMessage) {
        match self {
            Outbox::Writer(tx) => {
                let _ = tx.send(msg);
            }
            Outbox::Direct(f) => f(msg),
        }
    }
}

impl From<mpsc::UnboundedSender<ServerMessage>> for Outbox {
    fn from(tx: mpsc::UnboundedSender<ServerMessage>) -> Self {
        Outbox::Writer(tx)
    }
}

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
    /// A blocking infer: its reply (or error) goes to the connection's
    /// [`Outbox`] when the task ends: the Unix socket's writer task, or,
    /// for the KServe fronts, [`Outbox::Direct`] on the completing thread.
    Sent,
}

enum Waiter {
    /// A blocking `infer`: the reply to its request, sent to the
    /// connection's [`Outbox`] (no hop through the connection's reader task,
    /// which under many busy connections waited its turn on the socket
    /// thread).
    Reply(ReplyTo),
    Event(Outbox),
}

/// Where a blocking `infer`'s answer goes. Dropped without one (a bug),
/// it answers `internal` rather than leave the client waiting.
struct ReplyTo {
    outbox: Outbox,
    id: u64,
    answered: bool,
}

impl ReplyTo {
    fn send(mut self, msg: ServerMessage) {
        self.answered = true;
        self.outbox.send(msg);
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if !self.answered {
            self.outbox.send(ServerMessage::Error {
                id: Some(self.id),
                code: ErrorCode::Internal,
                message: "the task was dropped without an outcome".into(),
            });
        }
    }
}

struct Task {
    /// The request's data (inputs given), and its model's inputs and
    /// outputs, for the answer.
    data: Option<(
        Arc<crate::tensors::RequestData>,
        Arc<crate::tensors::ModelIo>,
    )>,
    /// Its inline tensor bytes, counted against its user
    /// (`daemon.max_tensor_bytes_per_uid`) until its answer is written or
    /// dropped (the hold goes with the answer).
    hold: Option<Arc<BytesHeld>>,
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
    /// Its finished tasks whose answers still wait for their outputs to be
    /// read ([`spawn_answers`]): counted with `tasks` against the
    /// per-stream and per-uid limits, so a client that never waits cannot
    /// queue unbounded work behind the values worker.
    answering: Arc<std::sync::atomic::AtomicUsize>,
}

impl Stream {
    /// Its inferences not yet answered.
    fn in_flight(&self) -> usize {
        self.tasks.len() + self.answering.load(std::sync::atomic::Ordering::SeqCst)
    }
}

struct LoadedModel {
    info: ModelInfo,
    io: Arc<crate::tensors::ModelIo>,
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
    deliveries: Vec<Delivery>,
    /// The streams each uid holds (per-uid limits, without a scan of every
    /// stream on the request path).
    uid_streams: HashMap<u32, BTreeSet<u64>>,
    /// Tasks that fail with `timeout` unless they reach the device by then
    /// ([`Runtime::handle_within`]).
    start_deadlines: BTreeSet<(Instant, u64)>,
    /// Tasks declared by `task_begin` (CASE/MGB), with their connection.
    declared: HashMap<u64, u64>,
    next_declared: u64,
    /// Registered shared-memory regions, by id.
    regions: HashMap<u64, tensors::RegionRec>,
    next_region: u64,
}

/// Inline tensor bytes in flight per uid: counted when a request is
/// admitted, released when the last holder of its [`BytesHeld`] drops it
/// (its answer written or dropped, or the request failed).
type UidBytes = Arc<Mutex<HashMap<u32, u64>>>;

/// One request's share of [`UidBytes`].
struct BytesHeld {
    map: UidBytes,
    uid: u32,
    bytes: u64,
}

impl Drop for BytesHeld {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = m.get_mut(&self.uid) {
            *b = b.saturating_sub(self.bytes);
            if *b == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

/// Limits on requests' data (docs/daemon.md, "Configuration").
#[derive(Debug, Clone)]
pub struct TensorLimits {
    pub max_tensor_frame_bytes: usize,
    pub max_tensor_bytes_per_uid: u64,
    pub max_regions_per_connection: usize,
    pub max_regions_per_uid: usize,
    pub max_region_bytes: u64,
}

impl Default for TensorLimits {
    fn default() -> Self {
        TensorLimits {
            max_tensor_frame_bytes: 64 << 20,
            max_tensor_bytes_per_uid: 1 << 30,
            max_regions_per_connection: 16,
            max_regions_per_uid: 64,
            max_region_bytes: 4 << 30,
        }
    }
}

/// Fixed settings of a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    /// The device name reported by `status`, e.g. `sim:mi50`.
    pub device: String,
    pub models_dir: PathBuf,
    pub max_tasks_per_stream: usize,
    /// Streams and in-flight inferences one uid may hold (root: no limit).
    pub max_streams_per_uid: usize,
    pub max_tasks_per_uid: usize,
    pub max_frame_bytes: usize,
    /// The pacer catches the engine up at most this often (the longest a
    /// completion waits for its client to be told, beyond the pacer's own
    /// wake-up latency). Shorter: completions are delivered sooner, the
    /// pacer uses more CPU.
    pub pacer_tick: Duration,
    /// Limits on requests' data.
    pub limits: TensorLimits,
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
    uid_bytes: UidBytes,
    /// Set when shutdown begins: model loads in progress outside the lock
    /// stop at their next step (models.rs).
    load_cancel: std::sync::atomic::AtomicBool,
    /// The answers threads ([`spawn_answers`]: others', RT's), and how
    /// many answers they have yet to deliver (shutdown waits for them).
    answers: [std::sync::mpsc::Sender<Delivery>; 2],
    answers_pending: Arc<std::sync::atomic::AtomicUsize>,
}

impl Runtime {
    pub fn new(engine: Box<dyn Engine>, settings: RuntimeSettings) -> Arc<Runtime> {
        let info = engine.info();
        let answers_pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
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
                start_deadlines: BTreeSet::new(),
                uid_streams: HashMap::new(),
                next_declared: 1,
                regions: HashMap::new(),
                next_region: 0,
            }),
            uid_bytes: Arc::default(),
            load_cancel: std::sync::atomic::AtomicBool::new(false),
            answers: [
                spawn_answers(answers_pending.clone(), "reefd-answers"),
                spawn_answers(answers_pending.clone(), "reefd-answers-rt"),
            ],
            answers_pending,
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

    /// Stops the pacer thread.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.cond.notify_all();
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
        st.regions.retain(|_, r| r.conn != conn);
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
            if let Some(set) = st.uid_streams.get_mut(&s.owner.uid) {
                set.remove(&stream);
                if set.is_empty() {
                    st.uid_streams.remove(&s.owner.uid);
                }
            }
            pending.extend(s.tasks);
        }
        for task in pending {
            if let Some(t) = st.tasks.remove(&task) {
                let _ = st.engine.take_outputs(task);
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

    /// The loaded model `name`, if any: a look-up under the lock and
    /// nothing else (no request counted, no device events caught up), for
    /// the v2 fronts, which check the model of every inference before
    /// they send it (docs/kserve.md, "Where the round trip goes": as a
    /// `ListModels` request it caught the device up ahead of the RT
    /// request behind it).
    pub fn model_info(&self, name: &str) -> Option<ModelInfo> {
        let st = self.lock();
        let m = st.models.get(name).map(|m| m.info.clone());
        self.unlock(st);
        m
    }

    /// Refuses new work from now on (shutdown has begun).
    pub fn begin_shutdown(&self) {
        self.lock().shutting_down = true;
        self.load_cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Answers whose outputs are still being read (the answers thread):
    /// their tasks are done on the device, their clients not yet told.
    pub fn answers_pending(&self) -> usize {
        self.answers_pending
            .load(std::sync::atomic::Ordering::SeqCst)
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

/// Task `task` ended without a result: counted, taken off its stream, and
/// its client told why (after the lock is released).
fn fail_task(st: &mut State, task: u64, why: Failure) {
    if let Some(t) = st.tasks.remove(&task) {
        let _ = st.engine.take_outputs(task);
        st.metrics.tasks_failed += 1;
        if let Some(s) = st.streams.get_mut(&t.stream) {
            s.tasks.remove(&task);
        }
        st.deliveries.push(Delivery {
            task,
            waiter: t.waiter,
            result: Err(why),
            later: Vec::new(),
            answering: None,
            rt: false,
        });
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

fn shutting_down() -> Failure {
    Failure::new(
        ErrorCode::ShuttingDown,
        "reefd is shutting down and accepts no new work",
    )
}

#[cfg(test)]
mod outbox_tests {
    use super::*;

    /// A direct outbox (the KServe front's) gets a blocking infer's answer
    /// on the thread that completes the task, before `send` returns, with
    /// no task in between; and a task dropped without an outcome still
    /// answers its request.
    #[test]
    fn a_direct_outbox_is_answered_on_the_completing_thread() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&got);
        let out = Outbox::Direct(Arc::new(move |m: ServerMessage| {
            sink.lock().unwrap().push((std::thread::current().id(), m));
        }));
        let to = |id| ReplyTo {
            outbox: out.clone(),
            id,
            answered: false,
        };
        let done = std::thread::spawn({
            let r = to(7);
            move || {
                r.send(ServerMessage::Reply {
                    id: 7,
                    result: Reply::Models { models: Vec::new() },
                });
                std::thread::current().id()
            }
        })
        .join()
        .unwrap();
        drop(to(8));
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, done);
        assert!(matches!(got[0].1, ServerMessage::Reply { id: 7, .. }));
        assert!(matches!(
            got[1].1,
            ServerMessage::Error {
                id: Some(8),
                code: ErrorCode::Internal,
                ..
            }
        ));
    }
}
