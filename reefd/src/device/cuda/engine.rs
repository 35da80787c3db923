//! reef-sched's policies on a CUDA GPU: [`SchedEngine`] (the engine that
//! serves the simulated GPU) on the kernel-level CUDA device
//! ([`CudaKernels`], device/cuda/kernels.rs), through reef-exec's
//! interpreter and event-loop step (issue 18 items 1 and 4). Nothing above
//! the device interface knows it is a GPU: the scheduler core, the
//! policies, the action interpreter, the daemon's streams, queues,
//! priorities and metrics are the ones the simulated device runs.
//!
//! What differs on a GPU, from what the hardware offers (REEF §4.6):
//! - the scheduler sees the device as the preset of its generation
//!   (`gv100` for compute capability 7.x, `h100` otherwise: launch costs,
//!   SM limits, the padding tables it would need) with the preemption
//!   levels the launch path probed (1-2; level 3 is not on this path);
//! - policies that place blocks on chosen SMs (`reef` and `reef-dkp-mv`'s
//!   dynamic kernel padding, `aker`'s and `tacker`'s fused kernels) need
//!   the simulator and are refused; `reef` is served as `reef-nodkp`
//!   (REEF's preemption without padding) with a warning, as before;
//! - completions are seen when the engine catches up (polled every
//!   `POLL_NS` while kernels are in flight);
//! - outputs are checked by the device: each request's output bytes
//!   against its input seed's output computed unpreempted at load.

use super::kernels::CudaKernels;
use super::CudaLaunchOptions;
use crate::engine::sched::{EngineDevice, SchedEngine, SchedSettings};
use crate::engine::{EngineError, EngineModel, LoadWork, LoadedPart};
use reef_sim::DeviceSpec;
use std::path::PathBuf;

/// The engine that serves a CUDA GPU.
pub type CudaEngine = SchedEngine<CudaKernels>;

impl EngineDevice for CudaKernels {
    fn describe(&self) -> String {
        format!(
            "CUDA {} ({}) through cudarc",
            self.device().device(),
            self.device().gpu_name()
        )
    }

    fn load(&mut self, m: &EngineModel) -> Result<(), EngineError> {
        let files = checked_files(m, self.files_of(m))?;
        self.load_files(files, &m.name)
            .map_err(|e| EngineError::Invalid(e.to_string()))
    }

    /// Everything but the quick part runs outside the daemon's lock
    /// (load.rs): the package made a module (PTX injected), checked
    /// against the schedule, the weights uploaded, the references run.
    fn prepare_load(&self, m: &EngineModel) -> Option<Result<LoadWork, EngineError>> {
        let job = self.prepare(&m.name);
        // Without a package read by the runtime, the directory is read
        // here (tests): for this GPU, within its memory.
        let read = m.package.is_none().then(|| {
            let d = self.device();
            (d.compute_capability(), d.limits())
        });
        let m = m.clone();
        Some(Ok(Box::new(move |cancel| {
            let dir =
                m.model.path.parent().ok_or_else(|| {
                    EngineError::Invalid(format!("model {}: no directory", m.name))
                })?;
            let files = match (&m.package, read) {
                (Some(p), _) => super::ModelFiles::from_package(dir, p.clone()),
                (None, Some((cc, limits))) => super::ModelFiles::read_for(dir, cc, &limits),
                (None, None) => unreachable!("read when there is no package"),
            };
            let files = checked_files(&m, Some(files))?;
            let up = job
                .run(files, cancel)
                .map_err(|e| EngineError::Invalid(e.to_string()))?;
            Ok(Box::new(up) as LoadedPart)
        })))
    }

    fn install(&mut self, m: &EngineModel, part: LoadedPart) -> Result<(), EngineError> {
        let up = part.downcast::<super::load::Uploaded>().map_err(|_| {
            EngineError::Invalid(format!("model {}: not loaded for a CUDA GPU", m.name))
        })?;
        CudaKernels::install(self, *up).map_err(|e| EngineError::Invalid(e.to_string()))
    }

    fn unload(&mut self, name: &str) {
        self.unload_model(name);
    }

    fn notes(&self) -> Vec<String> {
        self.device().levels().notes.clone()
    }

    /// From the package the runtime read outside the lock: its sizes
    /// only, so placement under the lock does not inject and copy the PTX
    /// (that happens in the load's work, `prepare_load`). Without one
    /// (tests) the directory is read here.
    fn model_memory(&self, m: &EngineModel) -> Option<Result<u64, EngineError>> {
        if let Some(p) = &m.package {
            return Some(Ok(self.footprint(p)));
        }
        Some(
            self.files_of(m)?
                .map(|f| self.footprint(&f))
                .map_err(|e| EngineError::Invalid(e.to_string())),
        )
    }

    fn code_reader(&self) -> Option<crate::engine::CodeReader> {
        let cc = self.device().compute_capability();
        Some(crate::engine::CodeReader {
            choose_arch: std::sync::Arc::new(move |archs: &[String]| super::pick_arch(archs, cc)),
            limits: self.device().limits(),
        })
    }

    fn device_memory(&self) -> Option<(u64, u64)> {
        self.device().memory().ok()
    }

    fn standalone_ns(&self, name: &str) -> Option<u64> {
        CudaKernels::standalone_ns(self, name)
    }

    fn kernel_ns(&self, name: &str) -> Option<Vec<u64>> {
        CudaKernels::kernel_ns(self, name)
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
        CudaKernels::attach(self, req, data)
    }

    fn take_outputs(&mut self, req: reef_sched::RequestId) -> Option<crate::tensors::Outputs> {
        CudaKernels::take_outputs(self, req)
    }

    fn task_failure(&mut self, req: reef_sched::RequestId) -> Option<String> {
        CudaKernels::task_failure(self, req)
    }

    fn take_errors(&mut self) -> Vec<(String, String)> {
        CudaKernels::take_errors(self)
    }
}

impl CudaKernels {
    /// Model `m`'s files: the package the runtime read (outside its lock,
    /// with the client's rights), else read here from its directory
    /// (`None`: the schedule has no directory).
    fn files_of(&self, m: &EngineModel) -> Option<Result<super::ModelFiles, super::CudaError>> {
        let dir = m.model.path.parent()?;
        Some(match &m.package {
            Some(p) => super::ModelFiles::from_package(dir, p.clone()),
            None => self.device().read_model(dir),
        })
    }
}

/// Model `m`'s files as read (`None`: the schedule has no directory),
/// checked against its schedule: the same kernels, each passed the
/// buffers the schedule declares.
fn checked_files(
    m: &EngineModel,
    files: Option<Result<super::ModelFiles, super::CudaError>>,
) -> Result<super::ModelFiles, EngineError> {
    let files = files
        .ok_or_else(|| EngineError::Invalid(format!("model {}: no directory", m.name)))?
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
    let names: Vec<&str> = m.model.kernels.iter().map(|k| k.name.as_str()).collect();
    if names != files.kernel_names() {
        return Err(EngineError::Invalid(format!(
            "model {}: the schedule's kernels {names:?} differ from the CUDA model's {:?} \
             (model.toml)",
            m.name,
            files.kernel_names()
        )));
    }
    // Each kernel's buffers as the schedule declares them and as the
    // launch passes them (model.toml may add u32 scalars): a kernel
    // launched with other buffers than the schedule tracks would make its
    // reads and writes, and so restores, wrong.
    for (k, l) in m.model.kernels.iter().zip(&files.launches) {
        let passed = l
            .args
            .iter()
            .filter(|a| matches!(a, reef_model::package::Arg::Storage(_)))
            .count();
        if passed != k.args.len() {
            return Err(EngineError::Invalid(format!(
                "model {}: kernel {} takes {} buffers in the schedule and {passed} in the CUDA \
                 model (model.toml): make them agree",
                m.name,
                k.name,
                k.args.len()
            )));
        }
    }
    Ok(files)
}

/// The policy served on a GPU for `policy`: `reef` becomes `reef-nodkp`
/// (no padding off the simulator); `reef-max` keeps the mechanisms that
/// exist there (preemption, the fill after the last kernel) and is served
/// as `reef-max:-pad-mv-waves-share-chain-spread`, the name `status` shows; the others as
/// asked.
pub fn gpu_policy(policy: &str) -> &str {
    if let Some(m) = reef_sched::dkp::MaxConfig::parse(policy) {
        return m.without_padding().static_name();
    }
    match policy {
        "reef" => "reef-nodkp",
        p => p,
    }
}

/// Opens `cuda:index` (loading `library` first when given) and the engine
/// that runs `settings.policy` on it.
pub fn open(
    index: u32,
    library: Option<PathBuf>,
    mut settings: SchedSettings,
) -> Result<SchedEngine<CudaKernels>, EngineError> {
    let dev = CudaKernels::open(&CudaLaunchOptions { index, library })
        .map_err(|e| EngineError::Invalid(e.to_string()))?;
    let mut dev = dev;
    dev.set_streams_per_model(1 + settings.be_streams_per_model);
    let preset = match dev.device().compute_capability() {
        Some((major, _)) if major < 8 => "gv100",
        _ => "h100",
    };
    let mut spec = DeviceSpec::preset(preset).map_err(|e| EngineError::Invalid(e.to_string()))?;
    spec.preempt_levels = dev.device().levels().numbers();
    settings.preset = preset.into();
    settings.policy = gpu_policy(&settings.policy).into();
    SchedEngine::on_device(settings, spec, dev)
}
