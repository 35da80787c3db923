//! The simulated GPU (`sim:NAME`): reef-sim is reef-exec's `Device`
//! itself, so the engine drives it directly (DESIGN.md, "The simulator";
//! presets in `sim/devices/*.toml`, levels 1–3 as the preset says). It
//! needs nothing loaded: it runs the schedule's shapes, and it tracks
//! values, so the engine checks every output against an unpreempted run.
//! A node of simulated GPUs (`sim:mi50x4`) is one of these per device
//! (`crate::engine::node`).

use crate::engine::sched::{EngineDevice, SchedEngine, SchedSettings};
use crate::engine::EngineError;
use reef_sim::{DeviceSpec, Sim, SimConfig};

impl EngineDevice for Sim {
    fn describe(&self) -> String {
        format!("reef-sim {}", self.spec().name)
    }
}

impl SchedEngine {
    /// The engine on a simulated device of preset `settings.preset`.
    pub fn new(settings: SchedSettings) -> Result<SchedEngine, EngineError> {
        let spec = DeviceSpec::preset(&settings.preset)
            .map_err(|e| EngineError::Invalid(format!("device sim:{}: {e}", settings.preset)))?;
        let sim = Sim::new(
            spec.clone(),
            SimConfig {
                seed: settings.seed,
                ..SimConfig::default()
            },
        );
        SchedEngine::on_device(settings, spec, sim)
    }
}
