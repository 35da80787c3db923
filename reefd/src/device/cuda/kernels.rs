//! The CUDA device at kernel level: reef-exec's [`Device`] on the CUDA
//! launch path, so that reef-sched's policies drive an NVIDIA GPU through
//! the same interpreter and event-loop step as the simulated GPU (issue 18
//! items 1 and 4; DESIGN.md layer 2).
//!
//! What each action is on CUDA (REEF §4.3, Fig. 8; §4.6 for closed-source
//! GPUs):
//! - a stream: a CUDA stream of the device's one context
//!   (`cuStreamCreateWithPriority`: RT streams at the driver's greatest
//!   priority, BE streams at its least, so an RT kernel's pending blocks are
//!   placed before BE's; running blocks are not preempted); its
//!   device-queue capacity is enforced here (the scheduler never launches
//!   past it, §4.2);
//! - a launch: kernel *k* of the request's model, from the stream's own
//!   instance of the model's module (its preempt flag and execution index
//!   are per instance), with the next execution index appended (Fig. 8
//!   line 8) and a completion event recorded after it. Kernel 0 first
//!   uploads the request's input;
//! - the preempt flag: `cuMemcpyHtoD` of the flag of every instance on the
//!   stream (level 2, lazy eviction: a kernel that starts with the flag set
//!   returns at entry without storing its index);
//! - kill and device-queue reset: refused (level 3 is not on this path,
//!   [`super::NO_KILL`]; a CUDA device queue cannot be dropped, §4.6).
//!
//! Events: completions are observed by `cuEventQuery` when the engine
//! catches up ([`Device::live`]: the events of a real device are stamped
//! at the instant they are seen, at most one poll interval late). A
//! kernel that may have seen the flag is judged by its instance's
//! execution index (kernels of a stream run in order, so those that
//! passed the check are a prefix). The check runs at the entry of every
//! block (REEF §4.3 Fig. 8; trap-handler/src/ptx.rs), so a kernel running
//! when the flag was set finished its started blocks and its later blocks
//! exited: it ran partly and its outputs are partly written. Hence:
//! - the index is past its own: a later kernel passed the check, so this
//!   one had finished: completed;
//! - the index is its own: it passed the check, perhaps only partly (the
//!   index names the interrupted kernel, §4.4): reported started, then
//!   evicted, so the scheduler's restore executes it again (or its
//!   idempotent group: sched's `restore_point`);
//! - the index is below its own: it never passed: evicted, never started.
//!
//! A kernel is reported started when the one before it on its stream is
//! seen complete (CUDA reports no start), except a flagged kernel, which
//! is reported started only once its index shows it passed the check.
//!
//! Faults: a sticky error such as CUDA_ERROR_ILLEGAL_ADDRESS poisons the
//! context, and every later call on it returns the error, so a kernel's
//! fault is met by whichever call comes next: `cuEventQuery`, a launch (the
//! launch is then lost with the context, not refused on its own) or the
//! preempt flag's copy. It ends every request that holds buffers on the
//! context, with the driver's words ([`CudaKernels::task_failure`]); the
//! context is rebuilt with its models reloaded
//! ([`super::CudaDevice::rebuild`]) and the streams made again, and
//! serving goes on. The fault is reported once as a device error
//! ([`CudaKernels::take_errors`]: `stats` counts it in `device_errors`).
//!
//! Outputs: a request that carries data (issue 30; `EngineDevice::attach`)
//! has each input copied host to device, from where the daemon holds it
//! (its frame, or the client's shared-memory region: no other copy), into
//! its storage in the stream's instance of the model when kernel 0 is
//! launched (again at a restore from kernel 0), and each output copied
//! device to host when its last kernel completes, into the answer's
//! buffer or straight into the client's region. A request without data
//! takes seed `t % INPUT_SEEDS`'s bytes ([`input`]); its output is read
//! back and compared with the same seed's output computed unpreempted when
//! the model was loaded ([`Device::verified`]).

use std::collections::{HashMap, VecDeque};

use cudarc::driver::sys::{self, CUevent, CUresult, CUstream};
use reef_exec::Device;
use reef_sched::{RequestId, Time};
use reef_sim::{DeviceEvent, EventKind, KernelLaunch, LaunchId, StreamId, Tags};

use super::driver::{check, EVENT_DISABLE_TIMING, STREAM_NON_BLOCKING};
use super::{
    dtoh, htod, launch_kernel, CudaDevice, CudaError, CudaLaunchOptions, Instance, StreamClass,
};

mod events;
mod io;
use io::copy_outputs;
pub use io::{input, INPUT_SEEDS};
pub(super) use io::{put_inputs, read_outputs};

/// How often a busy device's completion events are queried: 20 us, the
/// order of one kernel's launch path (docs/simulator.md: 4 us host + 4 us
/// fetch + 2 us dispatch) so that a completion is seen within about one
/// kernel launch.
pub const POLL_NS: Time = 20_000;

/// One kernel handed to CUDA.
struct InFlight {
    id: LaunchId,
    tags: Tags,
    model: String,
    /// The instance of `model` it runs on (index in the stream's list).
    slot: usize,
    exec: u32,
    ev: CUevent,
    /// The stream's flag was set while it was queued or at its launch.
    flagged: bool,
    /// Reported started.
    started: bool,
}

/// A model instance on a stream and the request whose buffers it holds.
struct Slot {
    inst: Instance,
    /// Held from the request's first launch until the scheduler is done
    /// with it ([`Device::request_done`]): between two of its kernels, and
    /// across a preemption and restore, no other request may write its
    /// buffers.
    task: Option<u64>,
}

struct KStream {
    class: StreamClass,
    cu: CUstream,
    capacity: usize,
    /// The stream's instances of each model it ran: one per request of the
    /// model running on the stream at once (one, except where a policy
    /// issues every client's kernels on one stream: Aker's managers,
    /// issue 25 D3).
    instances: HashMap<String, Vec<Slot>>,
    inflight: VecDeque<InFlight>,
    next_exec: u32,
    flag: bool,
}

/// A CUDA GPU at kernel level: see the module documentation.
pub struct CudaKernels {
    dev: CudaDevice,
    streams: Vec<KStream>,
    now: Time,
    next_launch: u64,
    /// Model of each bound request.
    bound: HashMap<u64, String>,
    verified: HashMap<u64, bool>,
    /// Output of each (model, seed), computed unpreempted at load.
    references: HashMap<(String, u64), Vec<u8>>,
    /// Each model's stand-alone latency measured at load (ns): the fastest
    /// of its reference runs, from its input copy to its stream's
    /// synchronisation returning.
    standalone: HashMap<String, u64>,
    /// Per-kernel stand-alone times measured at load, by model.
    kernel_ns: HashMap<String, Vec<u64>>,
    /// Events seen but not yet reported.
    pending: Vec<DeviceEvent>,
    free_events: Vec<CUevent>,
    /// Scheduler streams that may run one model (each holds an instance).
    streams_per_model: usize,
    /// Data of requests that carry it, until they are over.
    attached: HashMap<u64, std::sync::Arc<crate::tensors::RequestData>>,
    /// Outputs of finished requests with data, until taken.
    outputs: HashMap<u64, crate::tensors::Outputs>,
    /// Requests ended by a fault of the context, with the driver's words
    /// (taken by [`Self::task_failure`]).
    failed: HashMap<u64, String>,
    /// Faults to report once as device errors: (action, error).
    errors: Vec<(String, String)>,
    /// Contexts rebuilt after a fault.
    rebuilds: u64,
}

// The raw handles are the driver's, used only with their context current.
unsafe impl Send for CudaKernels {}

fn text(e: CudaError) -> String {
    e.to_string()
}

/// Whether a driver error poisons the context ("sticky": every later call
/// on the context returns it; driver API reference, "Error Handling", and
/// each code's description in cuda.h, "the process ... must be
/// terminated and relaunched"): CUDA_ERROR_ILLEGAL_ADDRESS (700),
/// LAUNCH_TIMEOUT (702), ASSERT (710), HARDWARE_STACK_ERROR to
/// LAUNCH_FAILED (714-719) and ECC_UNCORRECTABLE (214). A refused launch
/// (LAUNCH_OUT_OF_RESOURCES, 701, INVALID_VALUE) is not.
pub fn sticky(e: &CudaError) -> bool {
    e.code()
        .is_some_and(|c| matches!(c as u32, 700 | 702 | 710 | 714..=719 | 214))
}

impl CudaKernels {
    /// Opens `cuda:N` (driver library, its one context, probed levels).
    pub fn open(opts: &CudaLaunchOptions) -> Result<CudaKernels, CudaError> {
        Ok(CudaKernels {
            dev: CudaDevice::open(opts)?,
            streams: Vec::new(),
            now: 0,
            next_launch: 0,
            bound: HashMap::new(),
            verified: HashMap::new(),
            references: HashMap::new(),
            standalone: HashMap::new(),
            kernel_ns: HashMap::new(),
            pending: Vec::new(),
            free_events: Vec::new(),
            streams_per_model: 2,
            attached: HashMap::new(),
            outputs: HashMap::new(),
            failed: HashMap::new(),
            errors: Vec::new(),
            rebuilds: 0,
        })
    }

    /// How many scheduler streams may run one model (the engine's RT
    /// stream and its BE clients' streams): each holds an instance of the
    /// model's buffers, which [`Self::footprint`] counts.
    pub fn set_streams_per_model(&mut self, n: usize) {
        self.streams_per_model = n.max(1);
    }

    /// Device memory model `files` takes on this device: its weights and
    /// one instance of its inputs, activations and outputs per stream that
    /// runs it.
    pub fn footprint(&self, pkg: &reef_model::package::Package) -> u64 {
        pkg.weight_bytes() + self.streams_per_model as u64 * pkg.stream_bytes()
    }

    /// Why request `req` failed on the device (a fault of the context,
    /// in the driver's words), taken once.
    pub fn task_failure(&mut self, req: RequestId) -> Option<String> {
        self.failed.remove(&req.0)
    }

    /// Faults seen since the last call, as (action, driver's error).
    pub fn take_errors(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.errors)
    }

    /// Contexts rebuilt after a fault so far.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// The launch path's device: name, levels, memory, models.
    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// Loads the model directory `dir` under `name` and computes its
    /// reference outputs (one unpreempted run per input seed, on a private
    /// stream, waited for). Refused with the figures when its footprint and
    /// the reference run's buffers exceed the free memory.
    pub fn load_model(&mut self, dir: &std::path::Path, name: &str) -> Result<(), CudaError> {
        let files = self.dev.read_model(dir)?;
        self.load_files(files, name)
    }

    /// As [`Self::load_model`], for a model already read: [`Self::prepare`],
    /// its run and [`Self::install`] on the calling thread.
    pub fn load_files(&mut self, files: super::ModelFiles, name: &str) -> Result<(), CudaError> {
        let up = self
            .prepare(name)
            .run(files, &std::sync::atomic::AtomicBool::new(false))?;
        self.install(up)
    }

    /// The device work of loading a model under `name`, to run outside
    /// the daemon's lock (load.rs).
    pub fn prepare(&self, name: &str) -> super::load::LoadJob {
        super::load::LoadJob {
            ctx: self.dev.context(),
            device: self.dev.device().to_string(),
            name: name.to_string(),
            streams_per_model: self.streams_per_model,
        }
    }

    /// Installs a model a [`super::load::LoadJob`] uploaded: refused (and
    /// freed) when its name is taken or the context was rebuilt since.
    pub fn install(&mut self, mut up: super::load::Uploaded) -> Result<(), CudaError> {
        let name = up.name.clone();
        self.dev.install(&up.ctx, &name, &mut up.loaded)?;
        self.standalone.insert(name.clone(), up.standalone);
        self.kernel_ns
            .insert(name.clone(), std::mem::take(&mut up.kernel_ns));
        for (seed, bytes) in std::mem::take(&mut up.references).into_iter().enumerate() {
            self.references.insert((name.clone(), seed as u64), bytes);
        }
        Ok(())
    }

    /// Unloads model `name` and its instances.
    pub fn unload_model(&mut self, name: &str) {
        for s in &mut self.streams {
            for slot in s.instances.remove(name).unwrap_or_default() {
                self.dev.drop_instance(slot.inst);
            }
        }
        self.references.retain(|(m, _), _| m != name);
        self.standalone.remove(name);
        self.kernel_ns.remove(name);
        if let Err(e) = self.dev.unload_model(name) {
            tracing::warn!("unloading {name} from {}: {e}", self.dev.device());
        }
    }

    /// Model `name`'s stand-alone latency measured at load (ns): the
    /// fastest of its reference runs, on a private stream. Nothing else is
    /// stopped for them: kernels the daemon already had in flight, and
    /// other processes' work, can overlap the first runs (the fastest of
    /// the eight is kept).
    pub fn standalone_ns(&self, name: &str) -> Option<u64> {
        self.standalone.get(name).copied()
    }

    /// Model `name`'s kernels' stand-alone times measured at load (ns, in
    /// schedule order; device/cuda/load.rs).
    pub fn kernel_ns(&self, name: &str) -> Option<Vec<u64>> {
        self.kernel_ns.get(name).cloned()
    }

    fn event(&mut self) -> Result<CUevent, CudaError> {
        if let Some(ev) = self.free_events.pop() {
            return Ok(ev);
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut ev, EVENT_DISABLE_TIMING)
        })?;
        Ok(ev)
    }

    fn stream(&self, s: StreamId) -> Result<&KStream, String> {
        self.streams
            .get(s.0 as usize)
            .ok_or_else(|| format!("no stream {}", s.0))
    }

    /// A launch of a request that a fault ended: run nowhere, reported
    /// started and done at once.
    fn lost(&mut self, s: StreamId, l: &KernelLaunch) {
        let id = LaunchId(self.next_launch);
        self.next_launch += 1;
        for kind in [EventKind::Started, EventKind::Completed] {
            self.pending.push(DeviceEvent {
                time: self.now,
                stream: s,
                launch: id,
                tags: l.tags,
                kind,
            });
        }
    }

    /// A call on the context returned a sticky error: the context was
    /// poisoned by a fault (a kernel's fault surfaces at whichever call
    /// comes next: a launch, a copy or an event query). Handled as the
    /// fault (module doc, "Faults"), reported once, whichever call saw it.
    fn sticky_fault(&mut self, action: &str, e: &CudaError) {
        let mut out = std::mem::take(&mut self.pending);
        self.fault(action, e.to_string(), &mut out);
        self.pending = out;
    }

    fn launch_on(&mut self, s: StreamId, l: &KernelLaunch) -> Result<(), CudaError> {
        let task = l.tags.task;
        let k = l.tags.kernel as usize;
        let model = self.bound.get(&task).cloned().ok_or_else(|| {
            CudaError::Invalid(format!("request {task} was not bound to a model"))
        })?;
        let kernels = self
            .dev
            .models
            .get(&model)
            .map_or(0, |m| m.files.launches.len());
        if k >= kernels {
            return Err(CudaError::Invalid(format!(
                "model {model} has no kernel {k}"
            )));
        }
        if l.blocks.as_ref().is_some_and(|b| *b != (0..l.shape.blocks)) || l.cus.is_some() {
            return Err(CudaError::Invalid(
                "a launch of part of a kernel's blocks, or on chosen SMs, needs the simulator"
                    .into(),
            ));
        }
        let st = &self.streams[s.0 as usize];
        if st.inflight.len() >= st.capacity {
            return Err(CudaError::Invalid(format!(
                "device queue of stream {} is full ({} kernels)",
                s.0, st.capacity
            )));
        }
        if self.failed.contains_key(&task) {
            // A fault ended the request: its later kernels run nowhere
            // and are reported done at once, so the scheduler finishes it
            // (failed, [`Self::task_failure`]) without launches that would
            // each be a device error.
            self.lost(s, l);
            return Ok(());
        }
        // The instance this request holds, else a free one, else a new one
        // (each has its own buffers, preempt flag and execution index).
        let slots = st.instances.get(&model);
        let held = slots.and_then(|v| v.iter().position(|x| x.task == Some(task)));
        let free = slots.and_then(|v| v.iter().position(|x| x.task.is_none()));
        let slot = match held.or(free) {
            Some(i) => i,
            None => {
                let inst = self.dev.new_instance(&model)?;
                // A new instance starts with the stream's flag.
                if st.flag {
                    htod(inst.flag, &1u32.to_le_bytes())?;
                }
                let v = self.streams[s.0 as usize]
                    .instances
                    .entry(model.clone())
                    .or_default();
                v.push(Slot { inst, task: None });
                v.len() - 1
            }
        };
        self.streams[s.0 as usize]
            .instances
            .get_mut(&model)
            .expect("instance")[slot]
            .task = Some(task);
        self.dev.current()?;
        let m = &self.dev.models[&model];
        let st = &self.streams[s.0 as usize];
        let inst = &st.instances[&model][slot].inst;
        if k == 0 {
            match self.attached.get(&task) {
                // The request's inputs, host to device, from where the
                // daemon holds them: one copy.
                Some(data) => {
                    for (storage, bytes) in &data.inputs {
                        let (Some(&p), Some(st)) =
                            (inst.buffers.get(storage), m.files.storages.get(*storage))
                        else {
                            return Err(CudaError::Invalid(format!(
                                "model {model} has no storage {storage} on this stream"
                            )));
                        };
                        if st.bytes as usize != bytes.len() {
                            return Err(CudaError::Invalid(format!(
                                "storage {} of model {model} is {} bytes, the input {}",
                                st.name,
                                st.bytes,
                                bytes.len()
                            )));
                        }
                        // SAFETY: `bytes` points at `len()` readable bytes
                        // held by the request's data while this runs.
                        check("cuMemcpyHtoD_v2", unsafe {
                            sys::cuMemcpyHtoD_v2(p, bytes.as_ptr().cast(), bytes.len())
                        })?;
                    }
                }
                None => put_inputs(&m.files, inst, task % INPUT_SEEDS)?,
            }
        }
        let ev = self.event()?;
        let m = &self.dev.models[&model];
        let st = &self.streams[s.0 as usize];
        let inst = &st.instances[&model][slot].inst;
        if let Err(e) = launch_kernel(m, inst, st.cu, k, st.next_exec, ev) {
            self.free_events.push(ev);
            return Err(e);
        }
        let id = LaunchId(self.next_launch);
        self.next_launch += 1;
        let st = &mut self.streams[s.0 as usize];
        // A kernel launched with the flag set is reported started only if
        // its index shows it passed the check (module doc).
        let first = st.inflight.is_empty() && !st.flag;
        if first {
            self.pending.push(DeviceEvent {
                time: self.now,
                stream: s,
                launch: id,
                tags: l.tags,
                kind: EventKind::Started,
            });
        }
        st.inflight.push_back(InFlight {
            id,
            tags: l.tags,
            model,
            slot,
            exec: st.next_exec,
            ev,
            flagged: st.flag,
            started: first,
        });
        st.next_exec += 1;
        Ok(())
    }

    /// A CUDA stream of `class`'s priority in the device's context.
    fn new_stream(dev: &CudaDevice, class: StreamClass) -> Result<CUstream, CudaError> {
        dev.current()?;
        let mut cu = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is current.
        check("cuStreamCreateWithPriority", unsafe {
            sys::cuStreamCreateWithPriority(
                &mut cu,
                STREAM_NON_BLOCKING,
                dev.stream_priority(class),
            )
        })?;
        Ok(cu)
    }

    fn destroy_streams(&mut self) {
        let current = self.dev.current().is_ok();
        for mut st in std::mem::take(&mut self.streams) {
            if current {
                // SAFETY: our stream; waited for before it is destroyed.
                unsafe {
                    let _ = sys::cuStreamSynchronize(st.cu);
                    let _ = sys::cuStreamDestroy_v2(st.cu);
                }
            }
            for f in st.inflight.drain(..) {
                self.free_events.push(f.ev);
            }
            for (_, slots) in st.instances.drain() {
                for slot in slots {
                    self.dev.drop_instance(slot.inst);
                }
            }
        }
    }
}

impl Drop for CudaKernels {
    fn drop(&mut self) {
        self.destroy_streams();
    }
}

impl Device for CudaKernels {
    fn now(&self) -> Time {
        self.now
    }

    fn create_stream(
        &mut self,
        priority: i32,
        capacity: usize,
        _own_queue: bool,
    ) -> Result<StreamId, String> {
        let class = if priority > 0 {
            StreamClass::RealTime
        } else {
            StreamClass::BestEffort
        };
        let cu = Self::new_stream(&self.dev, class).map_err(text)?;
        self.streams.push(KStream {
            class,
            cu,
            capacity: capacity.max(1),
            instances: HashMap::new(),
            inflight: VecDeque::new(),
            next_exec: 1,
            flag: false,
        });
        Ok(StreamId(self.streams.len() as u32 - 1))
    }

    fn launch(&mut self, s: StreamId, l: KernelLaunch) -> Result<(), String> {
        self.stream(s)?;
        match self.launch_on(s, &l) {
            Err(e) if sticky(&e) => {
                // The launch is lost with the context, as the kernels in
                // flight are, and its request fails with the driver's
                // words. Not also an error of this launch: the fault is
                // one device error, counted once (issue 26 B4), however
                // it was first seen (counted twice before, when a launch
                // rather than the event query met the poisoned context).
                self.sticky_fault("cuLaunchKernel", &e);
                self.failed
                    .entry(l.tags.task)
                    .or_insert_with(|| e.to_string());
                self.verified.remove(&l.tags.task);
                self.lost(s, &l);
                Ok(())
            }
            r => r.map_err(text),
        }
    }

    fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), String> {
        self.stream(s)?;
        let r = self.dev.current().and_then(|()| {
            for slot in self.streams[s.0 as usize].instances.values().flatten() {
                htod(slot.inst.flag, &(on as u32).to_le_bytes())?;
            }
            Ok(())
        });
        match r {
            // The fault, once (as in `launch`): the instances died with
            // the context and the stream's new ones start with its flag.
            Err(e) if sticky(&e) => self.sticky_fault("cuMemcpyHtoD_v2", &e),
            r => r.map_err(text)?,
        }
        let st = &mut self.streams[s.0 as usize];
        st.flag = on;
        if on {
            for f in &mut st.inflight {
                f.flagged = true;
            }
        }
        Ok(())
    }

    fn kill_stream(&mut self, s: StreamId) -> Result<(), String> {
        self.stream(s)?;
        Err(super::NO_KILL.to_string())
    }

    fn clear_queue(&mut self, s: StreamId) -> Result<(), String> {
        self.stream(s)?;
        Err("a CUDA device queue cannot be reset (REEF §4.6): queued kernels are evicted lazily by the preempt flag".into())
    }

    fn queue_len(&self, s: StreamId) -> usize {
        self.streams
            .get(s.0 as usize)
            .map_or(0, |st| st.inflight.len())
    }

    fn next_event_time(&self) -> Option<Time> {
        if !self.pending.is_empty() {
            return Some(self.now);
        }
        self.streams
            .iter()
            .any(|s| !s.inflight.is_empty())
            .then_some(self.now + POLL_NS)
    }

    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>) {
        self.now = self.now.max(t);
        out.append(&mut self.pending);
        for si in 0..self.streams.len() {
            if let Err(e) = self.poll_stream(si, out) {
                // The context is lost (module doc, "Faults"): a failed
                // query is never asked again (it would be, every poll, for
                // ever).
                self.fault("cuEventQuery", e.to_string(), out);
                break;
            }
        }
    }

    fn reset(&mut self) {
        self.destroy_streams();
        self.now = 0;
        self.pending.clear();
        self.bound.clear();
        self.verified.clear();
        self.attached.clear();
        self.outputs.clear();
    }

    fn bind(&mut self, req: RequestId, model: &str) {
        self.bound.insert(req.0, model.to_string());
    }

    fn verified(&mut self, req: RequestId) -> Option<bool> {
        self.bound.remove(&req.0);
        self.verified.remove(&req.0)
    }

    fn request_done(&mut self, req: RequestId) {
        self.attached.remove(&req.0);
        for st in &mut self.streams {
            for slot in st.instances.values_mut().flatten() {
                if slot.task == Some(req.0) {
                    slot.task = None;
                }
            }
        }
    }

    fn live(&self) -> bool {
        true
    }
}

impl CudaKernels {
    /// Request `req` carries `data` (see the module doc, "Outputs").
    pub fn attach(&mut self, req: RequestId, data: std::sync::Arc<crate::tensors::RequestData>) {
        self.attached.insert(req.0, data);
    }

    /// The outputs of request `req`, once its last kernel completed.
    pub fn take_outputs(&mut self, req: RequestId) -> Option<crate::tensors::Outputs> {
        self.outputs.remove(&req.0)
    }
}
