//! The AMD GPU at kernel level: reef-exec's [`Device`] on the HIP launch
//! path, so reef-sched's policies drive `kfd:N` through the same
//! interpreter and event-loop step as the simulated GPU and `cuda:N`.
//! What each action is follows the CUDA device (cuda/kernels.rs, whose
//! module doc has the reasoning, REEF §4.3 Fig. 8):
//! - a stream: a non-blocking HIP stream, RT at HIP's greatest priority
//!   (-1), BE at its least (1); its device-queue cap enforced here (§4.2);
//! - a launch: kernel *k* from the stream's own instance of the model's
//!   module, with the next execution index as its trailing argument and a
//!   completion event after it; kernel 0 first copies the request's input;
//! - the preempt flag: `hipMemcpyHtoD` of every instance's
//!   `reef_preempt_flag` on the stream (level 2);
//! - kill: the REEF patch's WAVE_RESET and CLEAR_QUEUE on the stream's own
//!   KFD queue (queues.rs), where the KFD answers and each stream's queue
//!   is known; a killed kernel is reported killed when the execution index
//!   names it (it passed its check and was running), evicted when it never
//!   passed, completed when the index has moved past it (it finished
//!   before its successor started); device-queue reset on its own is
//!   refused (the scheduler clears through the flag and the kill).
//!
//! Completions are seen by `hipEventQuery` when the engine catches up; a
//! flagged kernel is judged by its instance's execution index (passed and
//! ran: completed; passed, perhaps partly: started then evicted, restored
//! by the scheduler; never passed: evicted). Outputs: a request with data
//! gets its inputs copied in with kernel 0 and its outputs copied out when
//! its last kernel completes; one without takes seed `task %
//! INPUT_SEEDS`'s input and its output is compared with that seed's,
//! computed unpreempted at load ([`Device::verified`]).
//!
//! Faults: a memory fault on an AMD GPU aborts the process (ROCr's
//! handler; libhip-sim/src/lib.rs), so no error code reaches reefd to
//! recover from; a refused call is reported as the action's error.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;

use reef_exec::Device;
use reef_sched::{RequestId, Time};
use reef_sim::{DeviceEvent, EventKind, KernelLaunch, LaunchId, StreamId, Tags};

use super::driver::{check, dtoh, htod, HipError, EVENT_DISABLE_TIMING, HIP_ERROR_NOT_READY};
use super::queues::{HipKfd, QueueOf};
use super::{launch_kernel, HipDevice, HipLaunchOptions, HipModel, Instance};
use crate::device::cuda::kernels::{input, INPUT_SEEDS, POLL_NS};

type Ptr = *mut c_void;

struct InFlight {
    id: LaunchId,
    tags: Tags,
    model: String,
    slot: usize,
    exec: u32,
    ev: Ptr,
    flagged: bool,
    started: bool,
    /// Its stream's queue was killed while it was in flight.
    killed: bool,
}

struct Slot {
    inst: Instance,
    task: Option<u64>,
}

struct KStream {
    s: Ptr,
    capacity: usize,
    instances: HashMap<String, Vec<Slot>>,
    inflight: VecDeque<InFlight>,
    next_exec: u32,
    flag: bool,
    rt: bool,
    queue: QueueOf,
}

/// A stream kept for reuse (queues.rs: reefd destroys no stream while it
/// serves).
struct Idle {
    s: Ptr,
    rt: bool,
    queue: QueueOf,
}

/// An AMD GPU at kernel level, on HIP.
pub struct HipKernels {
    dev: HipDevice,
    streams: Vec<KStream>,
    now: Time,
    next_launch: u64,
    bound: HashMap<u64, String>,
    verified: HashMap<u64, bool>,
    references: HashMap<(String, u64), Vec<u8>>,
    standalone: HashMap<String, u64>,
    pending: Vec<DeviceEvent>,
    free_events: Vec<Ptr>,
    streams_per_model: usize,
    attached: HashMap<u64, std::sync::Arc<crate::tensors::RequestData>>,
    outputs: HashMap<u64, crate::tensors::Outputs>,
    /// Level 3 (queues.rs), where the KFD can kill.
    kfd: Option<HipKfd>,
    idle: Vec<Idle>,
}

// HIP's handles, used only after the device is made current.
unsafe impl Send for HipKernels {}

fn text(e: HipError) -> String {
    e.to_string()
}

impl HipKernels {
    pub fn open(opts: &HipLaunchOptions) -> Result<HipKernels, HipError> {
        Ok(HipKernels {
            dev: HipDevice::open(opts)?,
            streams: Vec::new(),
            now: 0,
            next_launch: 0,
            bound: HashMap::new(),
            verified: HashMap::new(),
            references: HashMap::new(),
            standalone: HashMap::new(),
            pending: Vec::new(),
            free_events: Vec::new(),
            streams_per_model: 2,
            attached: HashMap::new(),
            outputs: HashMap::new(),
            kfd: None,
            idle: Vec::new(),
        })
    }

    /// Opens the KFD for level 3 (queues.rs); the device's levels say
    /// what was found.
    pub fn attach_kfd(&mut self, opts: &crate::device::kfd::KfdOptions) {
        self.kfd = HipKfd::attach(&mut self.dev, opts);
    }

    /// Level-3 kills issued through the KFD.
    pub fn kfd_kills(&self) -> u64 {
        self.kfd.as_ref().map_or(0, |k| k.kills)
    }

    pub fn set_streams_per_model(&mut self, n: usize) {
        self.streams_per_model = n.max(1);
    }

    pub fn device(&self) -> &HipDevice {
        &self.dev
    }

    pub fn device_mut(&mut self) -> &mut HipDevice {
        &mut self.dev
    }

    /// Weights and one instance of the other storages per stream.
    pub fn footprint(&self, pkg: &reef_model::package::Package) -> u64 {
        pkg.weight_bytes() + self.streams_per_model as u64 * pkg.stream_bytes()
    }

    /// Loads `m` under `name`: refused with the figures when it does not
    /// fit; then level 2 probed and the references computed (one
    /// unpreempted run per input seed, the fastest its stand-alone time).
    pub fn load(&mut self, m: HipModel, name: &str) -> Result<(), HipError> {
        let needed = self.footprint(&m) + m.stream_bytes();
        let (free, total) = self.dev.memory()?;
        if needed > free {
            return Err(HipError::Invalid(format!(
                "model {name} needs {needed} B on {} ({free} B free of {total} B)",
                self.dev.device()
            )));
        }
        let name = self.dev.load_model(m, Some(name))?;
        if let Err(why) = self.dev.probe_flag(&name) {
            let _ = self.dev.unload_model(&name);
            return Err(HipError::Invalid(why));
        }
        let r = (|| {
            let bytes = self.dev.models[&name].model.input_bytes()[0];
            let mut fastest = u64::MAX;
            for seed in 0..INPUT_SEEDS {
                let t0 = std::time::Instant::now();
                let (out, index, n) = self.dev.run_once(&name, &input(seed, bytes))?;
                fastest = fastest.min(t0.elapsed().as_nanos() as u64);
                if index != n as u32 {
                    return Err(HipError::Invalid(format!(
                        "model {name}: after an unpreempted run the execution index is {index}, \
                         not {n}: its kernels do not store it (code object without REEF's check?)"
                    )));
                }
                self.references.insert((name.clone(), seed), out);
            }
            self.standalone.insert(name.clone(), fastest);
            Ok(())
        })();
        if let Err(e) = r {
            self.references.retain(|(m, _), _| *m != name);
            let _ = self.dev.unload_model(&name);
            return Err(e);
        }
        Ok(())
    }

    pub fn unload_model(&mut self, name: &str) {
        for s in &mut self.streams {
            for slot in s.instances.remove(name).unwrap_or_default() {
                self.dev.drop_instance(slot.inst);
            }
        }
        self.references.retain(|(m, _), _| m != name);
        self.standalone.remove(name);
        let _ = self.dev.unload_model(name);
    }

    pub fn standalone_ns(&self, name: &str) -> Option<u64> {
        self.standalone.get(name).copied()
    }

    fn event(&mut self) -> Result<Ptr, HipError> {
        if let Some(ev) = self.free_events.pop() {
            return Ok(ev);
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("hipEventCreateWithFlags", unsafe {
            (self.dev.hip().hipEventCreateWithFlags)(&mut ev, EVENT_DISABLE_TIMING)
        })?;
        Ok(ev)
    }

    fn stream(&self, s: StreamId) -> Result<&KStream, String> {
        self.streams
            .get(s.0 as usize)
            .ok_or_else(|| format!("no stream {}", s.0))
    }

    fn launch_on(&mut self, s: StreamId, l: &KernelLaunch) -> Result<(), HipError> {
        let task = l.tags.task;
        let k = l.tags.kernel as usize;
        let model =
            self.bound.get(&task).cloned().ok_or_else(|| {
                HipError::Invalid(format!("request {task} was not bound to a model"))
            })?;
        let kernels = self
            .dev
            .models
            .get(&model)
            .map_or(0, |m| m.model.launches.len());
        if k >= kernels {
            return Err(HipError::Invalid(format!(
                "model {model} has no kernel {k}"
            )));
        }
        if l.blocks.as_ref().is_some_and(|b| *b != (0..l.shape.blocks)) || l.cus.is_some() {
            return Err(HipError::Invalid(
                "a launch of part of a kernel's blocks, or on chosen CUs, needs the simulator"
                    .into(),
            ));
        }
        let st = &self.streams[s.0 as usize];
        if st.inflight.len() >= st.capacity {
            return Err(HipError::Invalid(format!(
                "device queue of stream {} is full ({} kernels)",
                s.0, st.capacity
            )));
        }
        let slots = st.instances.get(&model);
        let held = slots.and_then(|v| v.iter().position(|x| x.task == Some(task)));
        let free = slots.and_then(|v| v.iter().position(|x| x.task.is_none()));
        let slot = match held.or(free) {
            Some(i) => i,
            None => {
                let inst = self.dev.new_instance(&model)?;
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
        let inst = &self.streams[s.0 as usize].instances[&model][slot].inst;
        if k == 0 {
            match self.attached.get(&task) {
                Some(data) => {
                    for (storage, bytes) in &data.inputs {
                        let (Some(&p), Some(st)) =
                            (inst.buffers.get(storage), m.model.storages.get(*storage))
                        else {
                            return Err(HipError::Invalid(format!(
                                "model {model} has no storage {storage} on this stream"
                            )));
                        };
                        if st.bytes as usize != bytes.len() {
                            return Err(HipError::Invalid(format!(
                                "storage {} of model {model} is {} bytes, the input {}",
                                st.name,
                                st.bytes,
                                bytes.len()
                            )));
                        }
                        // SAFETY: `as_ptr` points at `len()` readable
                        // bytes held by the request's data while this runs.
                        let b = unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) };
                        htod(p, b)?;
                    }
                }
                None => htod(
                    inst.buffers[&m.model.inputs[0]],
                    &input(task % INPUT_SEEDS, m.model.input_bytes()[0]),
                )?,
            }
        }
        let ev = self.event()?;
        let m = &self.dev.models[&model];
        let st = &self.streams[s.0 as usize];
        let inst = &st.instances[&model][slot].inst;
        if let Err(e) = launch_kernel(self.dev.hip(), m, inst, st.s, k, st.next_exec, Some(ev)) {
            self.free_events.push(ev);
            return Err(e);
        }
        let id = LaunchId(self.next_launch);
        self.next_launch += 1;
        let st = &mut self.streams[s.0 as usize];
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
            killed: false,
        });
        st.next_exec += 1;
        if let (QueueOf::Pending(before), Some(k)) = (&st.queue, self.kfd.as_mut()) {
            st.queue = k.identify(before, true);
        }
        Ok(())
    }

    fn poll_stream(&mut self, si: usize, out: &mut Vec<DeviceEvent>) -> Result<(), HipError> {
        self.dev.current()?;
        loop {
            let st = &self.streams[si];
            let Some(f) = st.inflight.front() else {
                return Ok(());
            };
            // SAFETY: an event of ours.
            let r = unsafe { (self.dev.hip().hipEventQuery)(f.ev) };
            if r == HIP_ERROR_NOT_READY {
                return Ok(());
            }
            check("hipEventQuery", r)?;
            let (passed, ran, idx) = if f.flagged || f.killed {
                let mut b = [0u8; 4];
                dtoh(&mut b, st.instances[&f.model][f.slot].inst.index)?;
                let idx = u32::from_le_bytes(b);
                (idx >= f.exec, idx > f.exec, idx)
            } else {
                (true, true, 0)
            };
            // Killed: the index names it (it was the running one); past it,
            // it had finished before the kill.
            let killed = f.killed && idx == f.exec;
            let st = &mut self.streams[si];
            let f = st.inflight.pop_front().expect("front");
            self.free_events.push(f.ev);
            let stream = StreamId(si as u32);
            let ev = |launch, tags, kind| DeviceEvent {
                time: self.now,
                stream,
                launch,
                tags,
                kind,
            };
            if passed && !f.started {
                out.push(ev(f.id, f.tags, EventKind::Started));
            }
            if ran && f.flagged && !killed {
                // As on cuda:N (device/cuda/kernels.rs): the kernels the
                // index went past this one to are reported started first,
                // so the scheduler restores from the one it names.
                for n in st.inflight.iter_mut() {
                    if n.started || n.slot != f.slot || n.model != f.model || n.exec > idx {
                        continue;
                    }
                    n.started = true;
                    out.push(ev(n.id, n.tags, EventKind::Started));
                }
            }
            out.push(ev(
                f.id,
                f.tags,
                if killed {
                    EventKind::Killed { blocks_done: 0 }
                } else if ran {
                    EventKind::Completed
                } else {
                    EventKind::Evicted
                },
            ));
            if let Some(next) = st.inflight.front_mut().filter(|n| !n.started && !n.flagged) {
                next.started = true;
                out.push(ev(next.id, next.tags, EventKind::Started));
            }
            let m = &self.dev.models[&f.model];
            if ran && !killed && f.tags.kernel as usize + 1 == m.model.launches.len() {
                let inst = &self.streams[si].instances[&f.model][f.slot].inst;
                if let Some(data) = self.attached.get(&f.tags.task) {
                    let r = read_outputs(inst, data, &f.model);
                    self.outputs
                        .insert(f.tags.task, r.map_err(|e| e.to_string()));
                    continue;
                }
                let o = m.model.outputs[0];
                let mut bytes = vec![0u8; m.model.storages[o].bytes as usize];
                dtoh(&mut bytes, inst.buffers[&o])?;
                let seed = f.tags.task % INPUT_SEEDS;
                let ok = self.references.get(&(f.model.clone(), seed)) == Some(&bytes);
                self.verified.insert(f.tags.task, ok);
            }
        }
    }

    /// Waits for every stream and keeps it for reuse (queues.rs); with
    /// `destroy`, destroys them all.
    fn destroy_streams(&mut self, destroy: bool) {
        let current = self.dev.current().is_ok();
        for mut st in std::mem::take(&mut self.streams) {
            if current {
                // SAFETY: our stream, waited for before it is reused.
                unsafe {
                    let _ = (self.dev.hip().hipStreamSynchronize)(st.s);
                }
                self.idle.push(Idle {
                    s: st.s,
                    rt: st.rt,
                    queue: st.queue.clone(),
                });
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
        if destroy && current {
            for i in self.idle.drain(..) {
                // SAFETY: our stream, idle, destroyed once.
                unsafe {
                    let _ = (self.dev.hip().hipStreamDestroy)(i.s);
                }
            }
        }
    }

    /// Request `req` carries `data`.
    pub fn attach(&mut self, req: RequestId, data: std::sync::Arc<crate::tensors::RequestData>) {
        self.attached.insert(req.0, data);
    }

    pub fn take_outputs(&mut self, req: RequestId) -> Option<crate::tensors::Outputs> {
        self.outputs.remove(&req.0)
    }
}

/// A finished request's outputs, device to host, into the answer's buffer
/// or straight into the client's region.
fn read_outputs(
    inst: &Instance,
    data: &crate::tensors::RequestData,
    model: &str,
) -> Result<Vec<crate::tensors::OutputBytes>, HipError> {
    let mut got = Vec::with_capacity(data.outputs.len());
    for o in &data.outputs {
        let &p = inst.buffers.get(&o.storage).ok_or_else(|| {
            HipError::Invalid(format!("model {model} has no storage {}", o.storage))
        })?;
        match &o.region {
            Some((region, range)) => {
                let dst = region
                    .ptr_mut(range.start)
                    .ok_or_else(|| HipError::Invalid("a read-only region".into()))?;
                // SAFETY: `range` lies in the writable mapping held by the
                // request's data.
                let out = unsafe { std::slice::from_raw_parts_mut(dst, range.len()) };
                dtoh(out, p)?;
                got.push(crate::tensors::OutputBytes::Written);
            }
            None => {
                let mut b = vec![0u8; o.bytes];
                dtoh(&mut b, p)?;
                got.push(crate::tensors::OutputBytes::Inline(b));
            }
        }
    }
    Ok(got)
}

impl Drop for HipKernels {
    fn drop(&mut self) {
        self.destroy_streams(true);
    }
}

impl Device for HipKernels {
    fn now(&self) -> Time {
        self.now
    }

    fn create_stream(
        &mut self,
        priority: i32,
        capacity: usize,
        _own_queue: bool,
    ) -> Result<StreamId, String> {
        let rt = priority > 0;
        let (s, queue) = match self.idle.iter().position(|i| i.rt == rt) {
            Some(i) => {
                let i = self.idle.remove(i);
                (i.s, i.queue)
            }
            None => {
                let before = match self.kfd.as_mut().map(|k| k.snapshot()) {
                    Some(Ok(b)) => Some(b),
                    Some(Err(e)) => return Err(format!("kfd: queue snapshot: {e}")),
                    None => None,
                };
                let s = self.dev.stream(rt).map_err(text)?;
                let queue = match (before, self.kfd.as_mut()) {
                    (Some(b), Some(k)) => k.identify(&b, false),
                    _ => QueueOf::Unknown,
                };
                (s, queue)
            }
        };
        self.streams.push(KStream {
            s,
            capacity: capacity.max(1),
            instances: HashMap::new(),
            inflight: VecDeque::new(),
            next_exec: 1,
            flag: false,
            rt,
            queue,
        });
        Ok(StreamId(self.streams.len() as u32 - 1))
    }

    fn launch(&mut self, s: StreamId, l: KernelLaunch) -> Result<(), String> {
        self.stream(s)?;
        self.launch_on(s, &l).map_err(text)
    }

    fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), String> {
        self.stream(s)?;
        self.dev.current().map_err(text)?;
        let st = &mut self.streams[s.0 as usize];
        for slot in st.instances.values().flatten() {
            htod(slot.inst.flag, &(on as u32).to_le_bytes()).map_err(text)?;
        }
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
        let Some(k) = self.kfd.as_mut() else {
            return Err(super::KILL_THROUGH_KFD.to_string());
        };
        // The other streams' queues with kernels in flight survive the
        // wave reset suspended (queues.rs).
        let mut protect = Vec::new();
        for (i, o) in self.streams.iter().enumerate() {
            if i == s.0 as usize || o.inflight.is_empty() {
                continue;
            }
            match o.queue {
                QueueOf::Own(q) => protect.push(q),
                _ => {
                    return Err(format!(
                        "stream {i} has kernels in flight and no KFD queue of its own: a wave \
                         reset would kill them"
                    ))
                }
            }
        }
        let st = &mut self.streams[s.0 as usize];
        let QueueOf::Own(q) = st.queue else {
            return Err(format!(
                "stream {} has no KFD queue of its own ({:?}): its kill would reach other \
                 streams' kernels (set {} to at least reefd's streams per priority)",
                s.0,
                st.queue,
                super::queues::MAX_HW_QUEUES_ENV
            ));
        };
        protect.retain(|&p| p != q);
        let steps = k.kill(q, &protect)?;
        tracing::debug!("kill stream {}: {}", s.0, steps.join(", "));
        for f in &mut st.inflight {
            f.killed = true;
        }
        Ok(())
    }

    fn clear_queue(&mut self, s: StreamId) -> Result<(), String> {
        self.stream(s)?;
        Err(
            "HIP cannot reset a queue (REEF's CLEAR_QUEUE is the KFD's): queued kernels are \
             evicted lazily by the preempt flag"
                .into(),
        )
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
                tracing::error!("{}: {e}", self.dev.device());
            }
        }
    }

    fn reset(&mut self) {
        self.destroy_streams(false);
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
