//! The engine: what executes inference tasks for the daemon's runtime. REEF
//! §3.1 (Fig. 5) splits the online part into task queues, the scheduler, the
//! kernel interceptor and the preemption module; the runtime (crate module
//! `runtime`) owns the task queues and the clients, and an [`Engine`] owns the
//! scheduler and the device. The trait lets the server, the protocol and their
//! tests be built and run independently of which scheduler executes the work.
//!
//! Time is nanoseconds since the runtime's epoch on the wall clock: the
//! runtime passes `now` with every call and no decision of the engine reads
//! a clock, so an engine built on the sans-IO scheduler core stays sans-IO
//! and can be driven in virtual time by tests. The one wall-clock reading is
//! the `issued` instant of [`EngineEvent::FirstKernelQueued`], a measurement.

pub mod fikit_store;
pub mod node;
pub mod sched;

use crate::protocol::{Priority, TaskState};
use reef_model::idempotence::IdempotenceMetadata;
use reef_model::Model;
use std::sync::Arc;

/// Nanoseconds since the runtime's epoch.
pub type Nanos = u64;

/// A model as the engine receives it.
#[derive(Debug, Clone)]
pub struct EngineModel {
    pub name: String,
    pub model: Arc<Model>,
    pub idempotence: Option<Arc<IdempotenceMetadata>>,
    /// The model's code package, read by the runtime outside its lock with
    /// the client's rights ([`Engine::code_reader`]); `None`: the device
    /// reads it itself, or runs the schedule without code (the simulator).
    pub package: Option<Arc<reef_model::package::Package>>,
}

/// What a device produced loading a model outside the runtime's lock
/// (a GPU: its weights uploaded, its reference outputs), for the engine
/// that asked for it to install ([`Engine::finish_load`]). Dropped
/// without being installed, it frees what it holds on the device.
pub type LoadedPart = Box<dyn std::any::Any + Send>;

/// The long part of a model load (a GPU's weight uploads and reference
/// runs), run by the runtime outside its lock (issue 25 item 2). It stops
/// at its next step, with an error, once `cancel` is set (shutdown).
pub type LoadWork =
    Box<dyn FnOnce(&std::sync::atomic::AtomicBool) -> Result<LoadedPart, EngineError> + Send>;

/// A model load begun under the runtime's lock ([`Engine::begin_load`]):
/// the work to run outside it, and what the engine reserved for it.
#[derive(Default)]
pub struct LoadTicket {
    /// The work to run outside the lock; `None`: nothing is long, and
    /// [`Engine::finish_load`] does all of it.
    pub work: Option<LoadWork>,
    /// The device index the model goes to (a node), `None` on one device
    /// or when the engine chooses at the end.
    pub device: Option<usize>,
    /// What the engine reserved (a node: the placement task holding the
    /// model's memory), released by [`Engine::abort_load`].
    pub reservation: Option<u64>,
}

/// A whole model load on the calling thread: [`Engine::begin_load`], its
/// work, [`Engine::finish_load`] (an engine's `add_model` when its loads
/// have work; tests).
pub fn load_inline<E: Engine + ?Sized>(
    e: &mut E,
    model: EngineModel,
    pin: Option<usize>,
) -> Result<Option<usize>, EngineError> {
    let mut t = e.begin_load(&model, pin)?;
    let part = match t.work.take() {
        Some(work) => match work(&std::sync::atomic::AtomicBool::new(false)) {
            Ok(p) => Some(p),
            Err(err) => {
                e.abort_load(t);
                return Err(err);
            }
        },
        None => None,
    };
    e.finish_load(model, t, part)
}

/// Picks the architecture a device runs among those a model was compiled
/// for.
pub type ArchChooser = Arc<dyn Fn(&[String]) -> Result<String, String> + Send + Sync>;

/// How an engine's device wants a model's code read: which architecture
/// it runs and how much it may hold (issue 25: the runtime reads the files,
/// bounded, outside the daemon's lock and with the client's rights, once).
#[derive(Clone)]
pub struct CodeReader {
    pub choose_arch: ArchChooser,
    pub limits: reef_model::package::Limits,
}

/// Static facts about an engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// What executes the work, e.g. `reef-sched on reef-sim mi50 (wall clock)`.
    pub name: String,
    /// The scheduling policy in force.
    pub policy: String,
    /// Preemption levels available (1, 2, 3; empty when none).
    pub preemption_levels: Vec<u8>,
}

/// What happened inside the engine, for the runtime to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// The task's first kernel entered the device queue at engine time
    /// `at`; `issued` is the wall-clock instant the launch was issued (for
    /// measuring the control path only).
    FirstKernelQueued {
        task: u64,
        at: Nanos,
        issued: std::time::Instant,
    },
    /// `count` kernels were pushed into device queues.
    KernelsLaunched { count: u64 },
    /// One preemption at `level` took `kernels` kernels off the device
    /// (dropped from host queues, evicted or killed); reported once it has
    /// finished draining.
    Preempted { level: u8, kernels: u64 },
    /// A preempted task was restored (REEF §4.4) and will run again.
    Restored { task: u64 },
    /// The task's last kernel completed at `at`.
    TaskDone {
        task: u64,
        at: Nanos,
        /// Whether the outputs equal an unpreempted run's (value tracking),
        /// when the device tracks values.
        verified: Option<bool>,
    },
    /// The engine refused the task (e.g. BE work under an RT-only policy).
    TaskRejected { task: u64, reason: String },
    /// The device refused or failed an action of the scheduler (a
    /// preempt-flag write, a kill, a queue clear, a launch, a completion
    /// query): counted in the metrics (`device_errors`) and logged by the
    /// runtime with the action, never dropped (issue 18 item 6).
    DeviceError { action: String, error: String },
    /// The device failed the task (e.g. the driver refused one of its
    /// launches); the client gets `reason` with code `internal`.
    TaskFailed { task: u64, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Busy(String),
}

/// Progress of one task inside the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskProgress {
    pub state: TaskState,
    pub next_kernel: usize,
    pub kernels: usize,
}

/// Dynamic kernel padding counters (REEF §5), summed over the engine's
/// life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PaddingCounters {
    /// Real-time kernels sent to the device.
    pub rt_launches: u64,
    /// Of those, launched padded with best-effort blocks.
    pub padded_launches: u64,
    /// Best-effort blocks run inside padded launches.
    pub be_blocks_padded: u64,
    /// Best-effort kernels completed entirely by padding.
    pub be_kernels_completed: u64,
}

/// An executor of inference tasks: a scheduler and a device, driven by the
/// runtime's calls. Every call may append events to `out`.
pub trait Engine: Send {
    fn info(&self) -> EngineInfo;
    /// Why preemption levels are missing, as the device backend probed
    /// them (shown by `reefctl status`); empty by default.
    fn preemption_notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Switches the scheduling policy.
    fn set_policy(&mut self, now: Nanos, policy: &str) -> Result<(), EngineError>;
    fn add_model(&mut self, model: EngineModel) -> Result<(), EngineError>;
    /// Removes a model; the runtime guarantees no task uses it.
    fn remove_model(&mut self, name: &str);
    /// Opens a stream (one client's GPU stream with its host queue).
    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError>;
    /// Closes a stream, dropping its queued and running work; returns the
    /// tasks that were dropped.
    fn close_stream(&mut self, now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Vec<u64>;
    /// Submits one inference of `model` on `stream`.
    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError>;
    /// Preempts the stream's work; returns the number of kernels evicted or
    /// killed.
    fn preempt(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError>;
    /// Resumes a stream preempted by command.
    fn resume(
        &mut self,
        now: Nanos,
        stream: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError>;
    /// Runs the device up to `now`.
    /// Withdraws `task` if it has not reached the device yet (it waits
    /// behind its stream's running request); true when it was withdrawn and
    /// will produce no event. A task the device's scheduler holds runs to
    /// its end. (Triton's `timeout`, docs/kserve.md.)
    fn withdraw(&mut self, _task: u64) -> bool {
        false
    }
    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>);
    /// When something next happens without new input (`None`: idle).
    fn next_event_time(&self) -> Option<Nanos>;
    /// Kernels in the stream's host queue and device queue.
    fn queue_depths(&self, stream: u64) -> (usize, usize);
    fn task_progress(&self, task: u64) -> Option<TaskProgress>;
    /// Keeps the code and data of the next real-time request's scheduling
    /// decision in the CPU caches without changing any state; called between
    /// requests by a thread that runs the device (see
    /// [`reef_sched::dkp::padded::PaddingScheduler::rehearse`]). Does
    /// nothing by default.
    fn warm(&mut self) {}
    /// Padding counters since the engine started (`reef`, `reef-dkp-mv`
    /// pad); `None` for an engine that cannot pad.
    fn padding(&self) -> Option<PaddingCounters> {
        None
    }
    /// The QoS target (ns) of task `task`, given before its submission
    /// (`infer --qos-ms`; policies `aker`, `baymax`, `tacker`). Ignored by
    /// default.
    fn set_qos(&mut self, task: u64, qos_ns: Option<u64>) {
        let _ = (task, qos_ns);
    }
    /// The data of task `task` (its inputs' bytes and where its outputs
    /// go), given before its submission; refused when the engine's device
    /// has no data path.
    fn set_data(
        &mut self,
        task: u64,
        data: Arc<crate::tensors::RequestData>,
    ) -> Result<(), EngineError> {
        let _ = (task, data);
        Err(EngineError::Unsupported(
            "this engine's device takes no tensors".into(),
        ))
    }
    /// What the device did with the outputs of task `task` (given data by
    /// [`Engine::set_data`]), once it is done; taken once. `None`: the task
    /// carried no data, or is not done.
    fn take_outputs(&mut self, task: u64) -> Option<crate::tensors::Outputs> {
        let _ = task;
        None
    }
    /// The Aker managers' figures, under `aker`, `baymax` or `tacker`.
    fn aker(&self) -> Option<crate::protocol::AkerStats> {
        None
    }
    /// FIKIT's figures, under a `fikit*` policy.
    fn fikit(&self) -> Option<crate::protocol::FikitStats> {
        None
    }
    /// Loads a model on device `pin` (a node's device index) or where the
    /// engine places it; answers the device on a node, `None` on one
    /// device.
    fn add_model_on(
        &mut self,
        model: EngineModel,
        pin: Option<usize>,
    ) -> Result<Option<usize>, EngineError> {
        match pin {
            Some(p) if p != 0 => Err(EngineError::Invalid(format!(
                "device index {p} does not exist: this daemon manages one device (index 0)"
            ))),
            _ => self.add_model(model).map(|_| None),
        }
    }
    /// Begins loading `model` (on device `pin` of a node): the quick
    /// checks and reservations, under the runtime's lock. The ticket's
    /// work runs outside the lock; then [`Engine::finish_load`] installs
    /// the model, or [`Engine::abort_load`] releases the ticket. By
    /// default nothing runs outside the lock.
    fn begin_load(
        &mut self,
        model: &EngineModel,
        pin: Option<usize>,
    ) -> Result<LoadTicket, EngineError> {
        let _ = model;
        Ok(LoadTicket {
            device: pin,
            ..LoadTicket::default()
        })
    }
    /// Installs a model begun by [`Engine::begin_load`] with what its
    /// work produced; answers the device as [`Engine::add_model_on`].
    fn finish_load(
        &mut self,
        model: EngineModel,
        ticket: LoadTicket,
        part: Option<LoadedPart>,
    ) -> Result<Option<usize>, EngineError> {
        let _ = part;
        self.add_model_on(model, ticket.device)
    }
    /// Releases a ticket of [`Engine::begin_load`] whose model will not
    /// be installed (its work failed, or the load is refused at the end).
    fn abort_load(&mut self, ticket: LoadTicket) {
        let _ = ticket;
    }
    /// The device memory `model` will take on this engine's device, for
    /// placement across a node; `None`: the engine does not know, and the
    /// node uses the footprint a model declares (`reef_sched::place::
    /// model_needs`).
    fn model_memory(&self, _model: &EngineModel) -> Option<Result<u64, EngineError>> {
        None
    }
    /// (free, total) device memory as the device's driver reports it;
    /// `None` for a simulated device, whose memory the node accounts.
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }
    /// Model `name`'s stand-alone latency (ns) as the engine's device
    /// measured it when the model was loaded (a GPU: the fastest of the
    /// model's unpreempted reference runs); `None`: not measured.
    fn standalone_ns(&self, _name: &str) -> Option<u64> {
        None
    }
    /// A node's devices (empty on one device).
    fn devices(&self) -> Vec<crate::protocol::DeviceStatus> {
        Vec::new()
    }
    /// A node's placement counters.
    fn placement(&self) -> Option<crate::protocol::PlacementStats> {
        None
    }
    /// CASE/MGB `task_begin` for `job`'s `task` (ids unique in the daemon).
    fn task_begin(
        &mut self,
        _job: u64,
        _task: u64,
        _needs: reef_sched::place::TaskNeeds,
    ) -> Result<Option<usize>, EngineError> {
        Err(EngineError::Unsupported(
            "task_begin places tasks across the devices of a node: start reefd with a node such as --device sim:mi50x4".into(),
        ))
    }
    /// Where a waiting task went, once placed.
    fn task_device(&self, _task: u64) -> Option<usize> {
        None
    }
    fn task_end(&mut self, task: u64) -> Result<(), EngineError> {
        Err(EngineError::NotFound(format!("task {task} is not known")))
    }
    /// A client's connection closed: release every task of `job`.
    fn job_end(&mut self, _job: u64) {}
    /// How to read a model's code for this engine's device (`None`: no
    /// code is read, or the device reads it itself).
    fn code_reader(&self) -> Option<CodeReader> {
        None
    }
    /// What the engine holds now: (requests inside it, BE scheduler
    /// clients bound to daemon streams). Both 0 once every request is
    /// over (issue 25 item 4).
    fn residue(&self) -> (usize, usize) {
        (0, 0)
    }
}
