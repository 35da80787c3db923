//! What the live engine needs of its device beyond reef-exec's `Device`
//! (DESIGN.md layer 2: one interface for every backend): loading a model's
//! code and weights, memory figures, stand-alone latencies, the request
//! data path, faults. The simulator needs little of it (the defaults); the
//! CUDA and HIP backends implement it for their GPUs.

use super::*;

/// What the engine needs of its device beyond reef-exec's interface.
pub trait EngineDevice: Device + Send {
    /// What executes the work, for `status` (e.g. `reef-sim mi50`).
    fn describe(&self) -> String;
    /// Loads model `m`'s code on the device (a GPU: its kernels and weights,
    /// refused with the figures when it does not fit); the simulator runs
    /// the schedule's shapes and needs nothing.
    fn load(&mut self, _m: &EngineModel) -> Result<(), EngineError> {
        Ok(())
    }
    /// The long part of loading model `m` (a GPU: its weight uploads and
    /// reference runs), to run outside the runtime's lock, then handed to
    /// [`EngineDevice::install`]; `None`: loading is quick and
    /// [`EngineDevice::load`] does all of it.
    fn prepare_load(
        &self,
        _m: &EngineModel,
    ) -> Option<Result<crate::engine::LoadWork, EngineError>> {
        None
    }
    /// Installs model `m` from what the work of
    /// [`EngineDevice::prepare_load`] produced.
    fn install(
        &mut self,
        m: &EngineModel,
        part: crate::engine::LoadedPart,
    ) -> Result<(), EngineError> {
        let _ = part;
        self.load(m)
    }
    /// Unloads model `name` (its requests have finished).
    fn unload(&mut self, _name: &str) {}
    /// Why preemption levels are missing (`status`).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Device memory model `m` takes once loaded and run by the engine's
    /// streams (placement across a GPU node); `None`: the footprint the
    /// model declares.
    fn model_memory(&self, _m: &EngineModel) -> Option<Result<u64, EngineError>> {
        None
    }
    /// (free, total) memory as the driver reports it (`None`: simulated).
    fn device_memory(&self) -> Option<(u64, u64)> {
        None
    }
    /// Model `name`'s stand-alone latency measured on the device when it
    /// was loaded (ns); `None`: not measured (the simulator: the model's
    /// profile, if any, gives it).
    fn standalone_ns(&self, _name: &str) -> Option<u64> {
        None
    }
    /// Model `name`'s kernels' stand-alone times measured on the device
    /// when it was loaded (ns, in schedule order): the predictions of
    /// `aker`, `baymax` and `tacker` on a GPU (Aker §5 trains its predictor
    /// on the GPU it serves). `None`: not measured (the simulator is the
    /// preset the predictor profiles).
    fn kernel_ns(&self, _name: &str) -> Option<Vec<u64>> {
        None
    }
    /// How this device wants a model's code read ([`Engine::code_reader`]).
    fn code_reader(&self) -> Option<crate::engine::CodeReader> {
        None
    }
    /// Whether the device takes requests' data ([`EngineDevice::attach`]);
    /// `Err` says why not.
    fn data_path(&self) -> Result<(), String> {
        Err(format!("{} takes no tensors", self.describe()))
    }
    /// Request `req` (of model `model`) carries `data`; called just before
    /// it arrives at the scheduler. The device puts each input's bytes in
    /// the request's buffer of its storage (`buffer`: storage index to the
    /// request's value-tracking buffer) before its first kernel runs, and
    /// when its last kernel completes reads each output from its storage
    /// to where `data` says ([`EngineDevice::take_outputs`]).
    fn attach(
        &mut self,
        _req: reef_sched::RequestId,
        _model: &str,
        _data: Arc<crate::tensors::RequestData>,
        _buffer: &dyn Fn(usize) -> BufferId,
    ) {
    }
    /// What became of request `req`'s outputs (taken once): `None` when it
    /// carried no data; `Err` when the device could not produce them (it
    /// never makes them up).
    fn take_outputs(&mut self, _req: reef_sched::RequestId) -> Option<crate::tensors::Outputs> {
        None
    }
    /// Why the device ended request `req` (a GPU: a fault of its context,
    /// in the driver's words), taken once; `None`: it did not.
    fn task_failure(&mut self, _req: reef_sched::RequestId) -> Option<String> {
        None
    }
    /// Failures the device saw outside the scheduler's actions (a GPU: a
    /// context fault found by a completion query), as (action, error),
    /// taken once: each is a device error.
    fn take_errors(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
}
