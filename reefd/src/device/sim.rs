//! The simulated GPU (`sim:NAME`): reef-sim driven as reef-exec's
//! `Device` (DESIGN.md, "The simulator"; presets in `sim/devices/*.toml`,
//! levels 1–3 as the preset says). It needs nothing loaded: it runs the
//! schedule's shapes, and it tracks values, so the engine checks every
//! output against an unpreempted run. A node of simulated GPUs
//! (`sim:mi50x4`) is one of these per device (`crate::engine::node`).
//!
//! Request data (issue 30): [`SimDevice`] is reef-sim with the bytes of
//! its buffers. A request's input bytes are copied into its buffers of
//! the model's input storages when it arrives (one copy, from the frame or
//! the client's region). For a compiled model with a CPU build
//! (reef-compile's `cpu.so`), reef-sim's real values run each kernel's CPU
//! function on those bytes when the kernel completes (off the simulated
//! clock, `sim/src/realvalues.rs`), and the outputs are read back from the
//! output storages. A model without code (the measured MI50 schedules)
//! tracks versions, not numbers: a request with inputs to it gets no
//! outputs and is told why (`outputs_missing`). Nothing is made up.

use crate::engine::sched::{EngineDevice, SchedEngine, SchedSettings};
use crate::engine::{EngineError, EngineModel};
use crate::tensors::{Later, OutputBytes, Outputs, RequestData};
use reef_exec::Device;
use reef_sched::{RequestId, Time};
use reef_sim::{
    BufferId, DeviceEvent, DeviceSpec, KernelLaunch, LaunchId, Sim, SimConfig, StreamId,
    ValueTracker,
};
use std::collections::HashMap;
use std::sync::Arc;

/// Why a simulated device returns no outputs (see the module doc).
pub const NO_VALUES: &str = "the simulated device computes no output values for this model: it has no CPU build of its kernels (reef-compile writes one, cpu.so, for the models it compiles), so reef-sim tracks versions, not numbers; the inputs were checked and copied to the device, the outputs are not returned rather than made up";

/// reef-sim and the bytes of its buffers: see the module documentation.
pub struct SimDevice {
    sim: Sim,
    /// Bytes of the buffers that hold them: requests' inputs, by
    /// value-tracking buffer.
    bytes: HashMap<BufferId, Vec<u8>>,
    /// Requests with data: their data and the buffers of their storages.
    attached: HashMap<u64, Attached>,
    outputs: HashMap<u64, Outputs>,
    /// Device streams lost by fault injection ([`SimDevice::lose_stream`]).
    lost: Vec<StreamId>,
    /// Models whose kernels compute real values here (a CPU build): their
    /// kernels' shape identities and program, registered again after a
    /// reset.
    real: HashMap<String, (Vec<u64>, Arc<reef_cpu_kernels::Program>)>,
    /// Input buffers of finished requests, kept for the next ones (a
    /// GPU's buffers stay allocated too: no page faults per request), at
    /// most [`SPARE_BYTES`] in all.
    spare: Vec<Vec<u8>>,
}

/// The most bytes of input buffers kept for reuse.
const SPARE_BYTES: usize = 256 << 20;

struct Attached {
    data: Arc<RequestData>,
    buffers: Vec<BufferId>,
}

impl SimDevice {
    pub fn new(sim: Sim) -> SimDevice {
        SimDevice {
            sim,
            bytes: HashMap::new(),
            attached: HashMap::new(),
            outputs: HashMap::new(),
            lost: Vec::new(),
            spare: Vec::new(),
            real: HashMap::new(),
        }
    }

    /// Fault injection for tests: device stream `s` is gone (as if the
    /// driver had destroyed its queue), so every later action on it is
    /// refused with the simulator's own error for a stream it lacks.
    #[doc(hidden)]
    pub fn lose_stream(&mut self, s: StreamId) {
        self.lost.push(s);
    }

    fn stream(&self, s: StreamId) -> StreamId {
        if self.lost.contains(&s) {
            StreamId(u32::MAX)
        } else {
            s
        }
    }

    /// The simulator.
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The bytes buffer `b` holds, if any were written to it.
    pub fn buffer_bytes(&self, b: BufferId) -> Option<&[u8]> {
        self.bytes.get(&b).map(Vec::as_slice)
    }

    /// Request `req`'s outputs when it is done: read later, off the
    /// daemon's lock ([`OutputBytes::Later`]), since the CPU build may
    /// still be computing them (the simulated device completes kernels on
    /// its own clock; `sim/src/realvalues.rs`). The reads are queued now,
    /// behind the kernel runs reported so far: a later request of the same
    /// stream whose kernel completed in the same advance of the device
    /// could already have written the buffers (as with the blocking read
    /// before; not seen in the tests, which compare every output with ONNX
    /// Runtime's).
    fn finish(&mut self, req: u64) {
        let Some(a) = self.attached.remove(&req) else {
            return;
        };
        let mut out = Vec::with_capacity(a.data.outputs.len());
        let mut result: Outputs = Ok(Vec::new());
        for b in a.buffers.iter().take(a.data.outputs.len()) {
            let Some(rx) = self.sim.values().bytes_later(*b) else {
                result = Err(NO_VALUES.to_string());
                break;
            };
            out.push(OutputBytes::Later(Later(Box::new(move || {
                rx.recv().ok().flatten()
            }))));
        }
        if result.is_ok() {
            result = Ok(out);
        }
        // The request's input buffers are freed with it.
        for b in a.buffers.iter().skip(a.data.outputs.len()) {
            if let Some(v) = self.bytes.remove(b) {
                let kept: usize = self.spare.iter().map(Vec::capacity).sum();
                if kept + v.capacity() <= SPARE_BYTES {
                    self.spare.push(v);
                }
            }
        }
        self.outputs.insert(req, result);
    }
}

/// Model `m`'s CPU build, opened (`None`: it has none, and keeps version
/// tracking only).
fn cpu_build(m: &EngineModel) -> Result<Option<Arc<reef_cpu_kernels::Program>>, EngineError> {
    let has_code =
        m.model.compiled.is_some() && reef_cpu_kernels::Program::file_has_code(&m.model.path);
    if !has_code {
        return Ok(None);
    }
    reef_cpu_kernels::Program::load_file(&m.model.path)
        .map(Some)
        .map_err(|e| {
            EngineError::Invalid(format!(
                "model {}: its CPU build cannot be loaded for real values: {e}",
                m.name
            ))
        })
}

impl SimDevice {
    /// Registers model `m`'s CPU build, if it has one, for real values.
    fn install_program(
        &mut self,
        m: &EngineModel,
        program: Option<Arc<reef_cpu_kernels::Program>>,
    ) -> Result<(), EngineError> {
        let Some(program) = program else {
            tracing::info!(model = %m.name, "no CPU build: version tracking only");
            self.real.remove(&m.name);
            return Ok(());
        };
        let shapes = reef_sim::KernelShape::for_model(&m.model, self.sim.spec()).map_err(|e| {
            EngineError::Invalid(format!(
                "model {}: kernel {}: {}",
                m.name, e.kernel, e.problem
            ))
        })?;
        // As ValueTracker::load_compiled, keeping the program: a rebuild of
        // the engine resets the simulator, which then gets it again.
        let ids: Vec<u64> = shapes.iter().map(|s| s.identity).collect();
        self.sim
            .values_mut()
            .register_program(&ids, program.clone());
        tracing::info!(model = %m.name, "real values: the CPU build of its kernels computes outputs");
        self.real.insert(m.name.clone(), (ids, program));
        Ok(())
    }
}

impl EngineDevice for SimDevice {
    fn describe(&self) -> String {
        format!("reef-sim {}", self.sim.spec().name)
    }

    /// A compiled model with a CPU build (reef-compile's `cpu.so`) gets real
    /// values: its kernels' outputs are computed on the buffers' bytes when
    /// they complete. A schedule without code keeps version tracking.
    fn load(&mut self, m: &EngineModel) -> Result<(), EngineError> {
        let program = cpu_build(m)?;
        self.install_program(m, program)
    }

    /// The CPU build is opened (its JSON read, `cpu.so` loaded) outside
    /// the runtime's lock (issue 25 item 2); [`EngineDevice::install`]
    /// registers it.
    fn prepare_load(
        &self,
        m: &EngineModel,
    ) -> Option<Result<crate::engine::LoadWork, EngineError>> {
        let m = m.clone();
        Some(Ok(Box::new(move |_cancel| {
            Ok(Box::new(cpu_build(&m)?) as crate::engine::LoadedPart)
        })))
    }

    fn install(
        &mut self,
        m: &EngineModel,
        part: crate::engine::LoadedPart,
    ) -> Result<(), EngineError> {
        let program = part
            .downcast::<Option<Arc<reef_cpu_kernels::Program>>>()
            .map_err(|_| {
                EngineError::Invalid(format!(
                    "model {}: not loaded for the simulated device",
                    m.name
                ))
            })?;
        self.install_program(m, *program)
    }

    fn unload(&mut self, name: &str) {
        // Its kernels' identities stay registered in the simulator until the
        // next reset; no request of it can launch them any more.
        self.real.remove(name);
    }

    fn data_path(&self) -> Result<(), String> {
        Ok(())
    }

    fn attach(
        &mut self,
        req: RequestId,
        model: &str,
        data: Arc<RequestData>,
        buffer: &dyn Fn(usize) -> BufferId,
    ) {
        // Output buffers first, then the input buffers (freed at the end).
        let mut buffers: Vec<BufferId> = data.outputs.iter().map(|o| buffer(o.storage)).collect();
        let real = self.real.contains_key(model);
        for (storage, src) in &data.inputs {
            let b = buffer(*storage);
            if real {
                // The CPU build computes on the buffers' own bytes: the
                // input is copied there once.
                let mut v = Vec::new();
                src.copy_into(&mut v);
                self.sim.values_mut().set_bytes(b, v);
                buffers.push(b);
                continue;
            }
            let dst = match self.bytes.entry(b) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    // A kept buffer large enough, else a new one.
                    let i = self.spare.iter().position(|v| v.capacity() >= src.len());
                    e.insert(i.map(|i| self.spare.swap_remove(i)).unwrap_or_default())
                }
            };
            src.copy_into(dst);
            buffers.push(b);
        }
        self.attached.insert(req.0, Attached { data, buffers });
    }

    fn take_outputs(&mut self, req: RequestId) -> Option<Outputs> {
        self.outputs.remove(&req.0)
    }
}

impl Device for SimDevice {
    fn now(&self) -> Time {
        Device::now(&self.sim)
    }
    fn create_stream(
        &mut self,
        priority: i32,
        capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, String> {
        Device::create_stream(&mut self.sim, priority, capacity, own_queue)
    }
    fn launch(&mut self, s: StreamId, l: KernelLaunch) -> Result<(), String> {
        let s = self.stream(s);
        Device::launch(&mut self.sim, s, l)
    }
    fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), String> {
        let s = self.stream(s);
        Device::set_preempt_flag(&mut self.sim, s, on)
    }
    fn kill_stream(&mut self, s: StreamId) -> Result<(), String> {
        let s = self.stream(s);
        Device::kill_stream(&mut self.sim, s)
    }
    fn clear_queue(&mut self, s: StreamId) -> Result<(), String> {
        let s = self.stream(s);
        Device::clear_queue(&mut self.sim, s)
    }
    fn queue_len(&self, s: StreamId) -> usize {
        Device::queue_len(&self.sim, s)
    }
    fn alloc(&mut self, bytes: u64) -> Result<(), String> {
        Device::alloc(&mut self.sim, bytes)
    }
    fn free(&mut self, bytes: u64) {
        Device::free(&mut self.sim, bytes)
    }
    fn next_event_time(&self) -> Option<Time> {
        Device::next_event_time(&self.sim)
    }
    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>) {
        Device::advance_into(&mut self.sim, t, out)
    }
    fn places_blocks(&self) -> bool {
        Device::places_blocks(&self.sim)
    }
    fn launch_padded(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        let s = self.stream(s);
        Device::launch_padded(&mut self.sim, s, parts)
    }
    fn launch_fused(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, String> {
        let s = self.stream(s);
        Device::launch_fused(&mut self.sim, s, parts)
    }
    fn values(&mut self) -> Option<&mut ValueTracker> {
        Device::values(&mut self.sim)
    }
    fn dram_load_peak(&self) -> Option<f64> {
        Device::dram_load_peak(&self.sim)
    }
    fn reset(&mut self) {
        Device::reset(&mut self.sim);
        for (ids, program) in self.real.values() {
            self.sim.values_mut().register_program(ids, program.clone());
        }
        self.lost.clear();
        self.bytes.clear();
        self.attached.clear();
        self.outputs.clear();
    }
    fn bind(&mut self, req: RequestId, model: &str) {
        Device::bind(&mut self.sim, req, model)
    }
    fn verified(&mut self, req: RequestId) -> Option<bool> {
        Device::verified(&mut self.sim, req)
    }
    fn request_done(&mut self, req: RequestId) {
        self.finish(req.0);
        Device::request_done(&mut self.sim, req)
    }
    fn live(&self) -> bool {
        Device::live(&self.sim)
    }
}

impl SchedEngine<SimDevice> {
    /// The engine on a simulated device of preset `settings.preset`.
    pub fn new(settings: SchedSettings) -> Result<SchedEngine<SimDevice>, EngineError> {
        let spec = DeviceSpec::preset(&settings.preset)
            .map_err(|e| EngineError::Invalid(format!("device sim:{}: {e}", settings.preset)))?;
        let sim = Sim::new(
            spec.clone(),
            SimConfig {
                seed: settings.seed,
                ..SimConfig::default()
            },
        );
        SchedEngine::on_device(settings, spec, SimDevice::new(sim))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::FrameData;
    use crate::tensors::{Bytes, OutputPlace};

    /// A request's input bytes land in the device's buffer of its input
    /// storage (one copy, from its frame); when it is over they are freed
    /// and its outputs are refused with the reason, not made up.
    #[test]
    fn inputs_land_in_the_device_buffers_and_outputs_are_not_made_up() {
        let spec = DeviceSpec::preset("h100").unwrap();
        let mut dev = SimDevice::new(Sim::new(spec, SimConfig::default()));
        let frame: Vec<u8> = (0u8..40).collect();
        let data = Arc::new(RequestData {
            inputs: vec![(
                3,
                Bytes::Inline {
                    data: FrameData {
                        frame: Arc::new(frame.clone()),
                        start: 8,
                    },
                    range: 4..20,
                },
            )],
            outputs: vec![OutputPlace {
                storage: 5,
                bytes: 8,
                region: None,
            }],
        });
        let buf = |s: usize| BufferId(((7u64 + 1) << 32) | s as u64);
        dev.attach(RequestId(1), "m", data, &buf);
        assert_eq!(dev.buffer_bytes(buf(3)), Some(&frame[12..28]));
        assert_eq!(dev.take_outputs(RequestId(1)), None, "not done yet");
        Device::request_done(&mut dev, RequestId(1));
        assert_eq!(dev.buffer_bytes(buf(3)), None, "freed with the request");
        assert_eq!(
            dev.take_outputs(RequestId(1)),
            Some(Err(NO_VALUES.to_string()))
        );
        assert_eq!(dev.take_outputs(RequestId(1)), None, "taken once");
    }
}
