//! reef-sched's policies on an AMD GPU: [`SchedEngine`] on the
//! kernel-level HIP device ([`HipKernels`]), as cuda/engine.rs does for
//! NVIDIA. The scheduler sees the device as reef-sim's `mi50` preset (REEF's
//! MI50: launch costs, CU limits) with the levels the launch path probed
//! (1, and 2 once a loaded model's flag check answered); `reef` is served
//! as `reef-nodkp` (padding places blocks on chosen CUs, which needs the
//! simulator); completions are polled every `POLL_NS` while kernels are in
//! flight; outputs are checked by the device.

use std::path::PathBuf;

use reef_sim::DeviceSpec;

use super::kernels::HipKernels;
use super::{HipLaunchOptions, HipModel};
use crate::engine::sched::{EngineDevice, SchedEngine, SchedSettings};
use crate::engine::{EngineError, EngineModel};

/// The engine that serves an AMD GPU.
pub type HipEngine = SchedEngine<HipKernels>;

fn invalid(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(e.to_string())
}

impl HipKernels {
    /// Model `m`'s package with the code object for this GPU: the one the
    /// runtime read, else read here from its directory.
    fn model_of(&self, m: &EngineModel) -> Option<Result<HipModel, EngineError>> {
        let dir = m.model.path.parent()?;
        Some(match &m.package {
            Some(p) => HipModel::from_package(dir, p.clone(), self.device().gcn_arch())
                .map_err(|e| invalid(format!("model {}: {e}", m.name))),
            None => self.device().read_model(dir).map_err(invalid),
        })
    }
}

impl EngineDevice for HipKernels {
    fn describe(&self) -> String {
        format!(
            "HIP {} ({}, {}) through {}",
            self.device().device(),
            self.device().gpu_name(),
            self.device().gcn_arch(),
            self.device().hip().path
        )
    }

    fn load(&mut self, m: &EngineModel) -> Result<(), EngineError> {
        let hm = self
            .model_of(m)
            .ok_or_else(|| invalid(format!("model {}: no directory", m.name)))??;
        let names: Vec<&str> = m.model.kernels.iter().map(|k| k.name.as_str()).collect();
        if names != hm.kernel_names() {
            return Err(invalid(format!(
                "model {}: the schedule's kernels differ from the package's",
                m.name
            )));
        }
        HipKernels::load(self, hm, &m.name).map_err(invalid)
    }

    fn unload(&mut self, name: &str) {
        self.unload_model(name);
    }

    fn notes(&self) -> Vec<String> {
        self.device().levels().notes.clone()
    }

    /// From the package's sizes when the runtime read it (outside the
    /// lock): the code object is read and checked in the load itself.
    fn model_memory(&self, m: &EngineModel) -> Option<Result<u64, EngineError>> {
        if let Some(p) = &m.package {
            return Some(Ok(self.footprint(p)));
        }
        Some(self.model_of(m)?.map(|hm| self.footprint(&hm)))
    }

    fn code_reader(&self) -> Option<crate::engine::CodeReader> {
        // The schedule and the PTX (the CPU build's lines) of the first
        // NVIDIA architecture; the code object is chosen in `load`.
        Some(crate::engine::CodeReader {
            choose_arch: std::sync::Arc::new(|archs: &[String]| {
                archs.first().cloned().ok_or_else(|| {
                    "compiled without an NVIDIA architecture: add --arch sm_80".into()
                })
            }),
            limits: self.device().limits(),
        })
    }

    fn device_memory(&self) -> Option<(u64, u64)> {
        self.device().memory().ok()
    }

    fn standalone_ns(&self, name: &str) -> Option<u64> {
        HipKernels::standalone_ns(self, name)
    }

    fn data_path(&self) -> Result<(), String> {
        Ok(())
    }

    fn attach(
        &mut self,
        req: reef_sched::RequestId,
        _model: &str,
        data: std::sync::Arc<crate::tensors::RequestData>,
        _buffer: &dyn Fn(usize) -> reef_sim::BufferId,
    ) {
        HipKernels::attach(self, req, data)
    }

    fn take_outputs(&mut self, req: reef_sched::RequestId) -> Option<crate::tensors::Outputs> {
        HipKernels::take_outputs(self, req)
    }
}

/// Opens `kfd:index` on the HIP runtime (`library` first when given) and
/// the engine that runs `settings.policy` on it; level 3 through the KFD
/// at `kfd` (queues.rs), or the note saying why not.
pub fn open(
    index: u32,
    library: Option<PathBuf>,
    mut settings: SchedSettings,
    kfd: Result<crate::device::kfd::KfdOptions, String>,
) -> Result<HipEngine, EngineError> {
    let mut dev = HipKernels::open(&HipLaunchOptions { index, library }).map_err(invalid)?;
    // After the HIP runtime, which opened the KFD and enabled its runtime
    // as ROCr does (queues.rs).
    match kfd {
        Ok(opts) => dev.attach_kfd(&opts),
        Err(note) => dev.device_mut().add_note(note),
    }
    dev.set_streams_per_model(1 + settings.be_streams_per_model);
    let mut spec = DeviceSpec::preset("mi50").map_err(invalid)?;
    spec.preempt_levels = dev.device().levels().numbers();
    settings.preset = "mi50".into();
    settings.policy = crate::device::cuda::engine::gpu_policy(&settings.policy).into();
    SchedEngine::on_device(settings, spec, dev)
}
