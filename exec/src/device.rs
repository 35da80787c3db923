//! The device interface of the execution layer (DESIGN.md layer 2; issue
//! 18 item 1): what REEF's scheduler needs of a GPU, as reef-exec's
//! [`crate::Driver`] uses it. Streams with a bounded device queue (REEF
//! §4.1, Fig. 7), launches over a block range, the preempt flag, the kill
//! of a stream's running blocks and the reset of its device queue (§4.2,
//! §4.3, Fig. 8), and the device's events (a kernel started, completed,
//! evicted by the flag or the reset, killed). Above this interface nothing
//! knows which device it has; a device without a capability refuses the
//! action with its reason, and the driver reports the refusal.
//!
//! Implemented here by reef-sim's [`Sim`]. Padded launches (REEF §5.1,
//! Fig. 12) and Aker's fused launches place blocks on chosen compute units,
//! which no vendor API offers: a device that can says so
//! ([`Device::places_blocks`]) and takes them through
//! [`Device::launch_padded`]; the others refuse them. Value tracking (the
//! simulator's stand-in for output bytes, docs/simulator.md) is the
//! optional [`Device::values`]. Device memory is taken and given back
//! with [`Device::alloc`] and [`Device::free`]. This interface is the only
//! way the event loops (reef-exec's driver, and through it the daemon's
//! engine and the benchmark's DISB runner; the multi-GPU batch runner)
//! reach a device.

use reef_sched::Time;
use reef_sim::{DeviceEvent, KernelLaunch, LaunchId, Sim, StreamId, ValueTracker};

/// What a device without block placement answers to a padded or fused
/// launch.
pub const NO_PLACEMENT: &str =
    "this device cannot place blocks on chosen compute units (no vendor API does)";

/// Queues the multi-part launch `parts` on stream `s` of `dev`
/// ([`Device::launch_padded`]) and checks the answer: one launch id per
/// part, in order, or an error (never a short list a caller would index).
pub fn launch_parts(
    dev: &mut dyn Device,
    s: StreamId,
    parts: Vec<KernelLaunch>,
) -> Result<Vec<LaunchId>, String> {
    let n = parts.len();
    let ids = dev.launch_padded(s, parts)?;
    check_ids(n, ids)
}

/// As [`launch_parts`], a statically fused launch
/// ([`Device::launch_fused`]).
pub fn launch_fused_parts(
    dev: &mut dyn Device,
    s: StreamId,
    parts: Vec<KernelLaunch>,
) -> Result<Vec<LaunchId>, String> {
    let n = parts.len();
    let ids = dev.launch_fused(s, parts)?;
    check_ids(n, ids)
}

fn check_ids(n: usize, ids: Vec<LaunchId>) -> Result<Vec<LaunchId>, String> {
    if ids.len() != n {
        return Err(format!(
            "the device answered a launch of {n} parts with {} launch ids",
            ids.len()
        ));
    }
    Ok(ids)
}

/// A GPU as the execution layer drives it. Errors are the device's words
/// for why an action was refused.
pub trait Device {
    /// The device's time, ns.
    fn now(&self) -> Time;
    /// A stream at `priority` (1 high, 0 normal) whose device queue holds
    /// `capacity` kernels; `own_queue`: a hardware queue of its own (REEF's
    /// runtime) rather than one shared from the vendor runtime's pool.
    fn create_stream(
        &mut self,
        priority: i32,
        capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, String>;
    /// [`Device::create_stream`] in process context `context` (a policy
    /// that gives each client a process of its own, `share`; context 0 is
    /// the one every device has). A device without contexts of its own
    /// refuses any other context rather than run them in one, which
    /// would let kernels of different processes run together.
    fn create_stream_in_context(
        &mut self,
        context: u32,
        priority: i32,
        capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, String> {
        if context == 0 {
            self.create_stream(priority, capacity, own_queue)
        } else {
            Err(format!(
                "this device has one process context; context {context} was asked for"
            ))
        }
    }
    /// Queues `l` on stream `s`'s device queue.
    fn launch(&mut self, s: StreamId, l: KernelLaunch) -> Result<(), String>;
    /// Sets or clears stream `s`'s preempt flag (level 2: a kernel that
    /// starts with it set exits at once, evicted).
    fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), String>;
    /// Kills the running blocks of stream `s` (level 3).
    fn kill_stream(&mut self, s: StreamId) -> Result<(), String>;
    /// Resets stream `s`'s device queue: queued kernels are evicted.
    fn clear_queue(&mut self, s: StreamId) -> Result<(), String>;
    /// Kernels in stream `s`'s device queue (running ones included).
    fn queue_len(&self, s: StreamId) -> usize;
    /// Allocates `bytes` of device memory; past what is free, refused with
    /// the figures (on a GPU the allocating process would then fail: the
    /// caller decides what that does to its work).
    fn alloc(&mut self, _bytes: u64) -> Result<(), String> {
        Err("this device does not take allocations through the execution layer".to_string())
    }
    /// Frees `bytes` allocated with [`Device::alloc`].
    fn free(&mut self, _bytes: u64) {}
    /// When the device next has something to report (`None`: idle).
    fn next_event_time(&self) -> Option<Time>;
    /// Runs the device to time `t`, appending what happened, in order.
    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>);
    /// Whether the device places a launch's blocks on the compute units
    /// the launch names (padded and fused launches).
    fn places_blocks(&self) -> bool {
        false
    }
    /// Queues one launch made of `parts`, each on the compute units it
    /// names, as one device-queue entry run through REEF's dkp kernel
    /// (REEF §5.1 Fig. 12's padded launch, with its function-pointer cost,
    /// §6.5 Fig. 25). Returns each part's launch id.
    fn launch_padded(
        &mut self,
        _s: StreamId,
        _parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        Err(NO_PLACEMENT.to_string())
    }
    /// Queues a statically fused launch of `parts` (Aker §5.4): placed
    /// and ended as [`Device::launch_padded`], without the dkp kernel's
    /// cost. Returns each part's launch id.
    fn launch_fused(
        &mut self,
        _s: StreamId,
        _parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        Err(NO_PLACEMENT.to_string())
    }
    /// The buffers' value versions, when the device tracks values (the
    /// simulator: a kernel's completion writes versions derived from what
    /// it read). A GPU computes real bytes and checks them itself
    /// ([`Device::verified`]).
    fn values(&mut self) -> Option<&mut ValueTracker> {
        None
    }
    /// The device's peak DRAM load over the run (fraction of its
    /// bandwidth), when it measures one.
    fn dram_load_peak(&self) -> Option<f64> {
        None
    }
    /// Starts afresh for a new scheduler: no streams, time 0 (the
    /// simulator: a new one of the same preset and seed; a GPU keeps its
    /// contexts and loaded models).
    fn reset(&mut self);
    /// Request `req` runs model `model` (called when it arrives). A device
    /// that executes the models' code binds the request's inputs and
    /// outputs here; the simulator tracks values through the launches'
    /// buffers and needs nothing.
    fn bind(&mut self, _req: reef_sched::RequestId, _model: &str) {}
    /// Whether request `req`'s outputs equal its unpreempted run's, once
    /// its last kernel has completed (taken once; `None`: not checked by
    /// the device).
    fn verified(&mut self, _req: reef_sched::RequestId) -> Option<bool> {
        None
    }
    /// Request `req` is over for the scheduler (done, rejected, or failed):
    /// what the device held for it (a GPU: the model instance whose
    /// buffers it used) is free for another request.
    fn request_done(&mut self, _req: reef_sched::RequestId) {}
    /// Whether the device runs on its own in real time (a GPU): it reports
    /// events as it observes them when its caller catches up, so the caller
    /// steps straight to its present instead of through the device's next
    /// event times (which, for a GPU, are only when to look again). The
    /// simulator runs only when told, and each event at its own time.
    fn live(&self) -> bool {
        false
    }
}

impl Device for Sim {
    fn now(&self) -> Time {
        Sim::now(self)
    }
    fn create_stream(
        &mut self,
        priority: i32,
        capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, String> {
        if own_queue {
            self.create_stream_own_queue(priority, capacity)
        } else {
            Sim::create_stream(self, priority, capacity)
        }
        .map_err(|e| e.to_string())
    }
    fn create_stream_in_context(
        &mut self,
        context: u32,
        priority: i32,
        capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, String> {
        while self.contexts() <= context as usize {
            self.create_context();
        }
        self.create_stream_in(reef_sim::ContextId(context), priority, capacity, own_queue)
            .map_err(|e| e.to_string())
    }
    fn launch(&mut self, s: StreamId, l: KernelLaunch) -> Result<(), String> {
        Sim::launch(self, s, l)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), String> {
        Sim::set_preempt_flag(self, s, on).map_err(|e| e.to_string())
    }
    fn kill_stream(&mut self, s: StreamId) -> Result<(), String> {
        Sim::kill_stream(self, s).map_err(|e| e.to_string())
    }
    fn clear_queue(&mut self, s: StreamId) -> Result<(), String> {
        Sim::clear_queue(self, s)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn queue_len(&self, s: StreamId) -> usize {
        Sim::queue_len(self, s)
    }
    fn alloc(&mut self, bytes: u64) -> Result<(), String> {
        Sim::alloc(self, bytes).map_err(|e| e.to_string())
    }
    fn free(&mut self, bytes: u64) {
        Sim::free(self, bytes)
    }
    fn next_event_time(&self) -> Option<Time> {
        Sim::next_event_time(self)
    }
    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>) {
        Sim::advance_into(self, t, out)
    }
    fn places_blocks(&self) -> bool {
        true
    }
    fn launch_padded(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        Sim::launch_padded(self, s, parts).map_err(|e| e.to_string())
    }
    fn launch_fused(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        Sim::launch_fused(self, s, parts).map_err(|e| e.to_string())
    }
    fn values(&mut self) -> Option<&mut ValueTracker> {
        Some(self.values_mut())
    }
    fn dram_load_peak(&self) -> Option<f64> {
        Some(Sim::dram_load_peak(self))
    }
    fn reset(&mut self) {
        *self = Sim::new(self.spec().clone(), self.config());
    }
}
