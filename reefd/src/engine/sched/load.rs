//! Loading a model in two steps around the runtime's lock (issue 25
//! item 2): the checks and the device's long work to run outside it
//! ([`EngineDevice::prepare_load`]: a GPU's weight uploads and reference
//! runs), then the model installed and the scheduler rebuilt under it.

use super::*;

/// What a load's work outside the lock produced
/// ([`SchedEngine::begin_model_load`]).
#[derive(Default)]
pub(super) struct SchedPart {
    /// The device's part ([`EngineDevice::prepare_load`]).
    dev: Option<crate::engine::LoadedPart>,
    /// The model's kernels' stand-alone times on the preset, for the
    /// predictor (`aker_times`).
    pub(super) aker_times: Option<Vec<f64>>,
}

impl<D: EngineDevice> SchedEngine<D> {
    /// The shapes of `model`'s kernels on this device, refused when one
    /// cannot run on it or there are none.
    fn shapes_of(&self, model: &EngineModel) -> Result<Vec<Arc<KernelShape>>, EngineError> {
        let shapes = KernelShape::for_model(&model.model, &self.spec).map_err(|e| {
            EngineError::Invalid(format!(
                "model {}: kernel {} cannot run on {}: {}",
                model.name, e.kernel, self.spec.name, e.problem
            ))
        })?;
        if shapes.is_empty() {
            return Err(EngineError::Invalid(format!(
                "model {} has no kernels",
                model.name
            )));
        }
        Ok(shapes)
    }

    /// [`Engine::begin_load`]: the model checked against the device, and
    /// the device's long work for it.
    pub(super) fn begin_model_load(
        &mut self,
        model: &EngineModel,
        pin: Option<usize>,
    ) -> Result<crate::engine::LoadTicket, EngineError> {
        if let Some(p) = pin.filter(|&p| p != 0) {
            return Err(EngineError::Invalid(format!(
                "device index {p} does not exist: this daemon manages one device (index 0)"
            )));
        }
        let shapes = self.shapes_of(model)?;
        let dev_work = self.build.drv.dev.prepare_load(model).transpose()?;
        // Under a policy that predicts kernel times (aker, baymax,
        // tacker), the model's stand-alone times on the preset are
        // profiled here too, outside the lock, rather than by the
        // scheduler's rebuild under it (issue 25 item 2). A device that
        // measures its kernels (a GPU) predicts from those instead and
        // this profile is not used.
        let aker = reef_sched::aker::Manager::of_name(&self.settings.policy)
            .is_some()
            .then(|| (self.spec.clone(), shapes));
        if dev_work.is_none() && aker.is_none() {
            return Ok(crate::engine::LoadTicket::default());
        }
        let work: crate::engine::LoadWork = Box::new(move |cancel| {
            let dev = dev_work.map(|w| w(cancel)).transpose()?;
            let aker_times = match aker {
                Some((spec, shapes)) => Some(
                    reef_exec::aker::SimPredictor::solo_times(&spec, &shapes)
                        .map_err(|e| EngineError::Invalid(format!("{e:#}")))?,
                ),
                None => None,
            };
            Ok(Box::new(SchedPart { dev, aker_times }) as crate::engine::LoadedPart)
        });
        Ok(crate::engine::LoadTicket {
            work: Some(work),
            ..Default::default()
        })
    }

    /// [`Engine::finish_load`]: the model installed on the device (from
    /// `part`, what its long work produced, else loaded here) and the
    /// scheduler rebuilt with it once nothing runs.
    pub(super) fn install_model(
        &mut self,
        model: EngineModel,
        part: Option<crate::engine::LoadedPart>,
    ) -> Result<(), EngineError> {
        let shapes = self.shapes_of(&model)?;
        if self.models.iter().any(|m| m.name == model.name) {
            self.build.drv.dev.unload(&model.name);
        }
        // A model loaded again may have other kernels: profiled again
        // (by the load's work, or by the rebuild).
        self.aker_times.remove(&model.name);
        let part = match part.map(|p| p.downcast::<SchedPart>()) {
            Some(Ok(p)) => *p,
            Some(Err(_)) => {
                return Err(EngineError::Invalid(format!(
                    "model {}: its load was not begun on this engine",
                    model.name
                )))
            }
            None => SchedPart::default(),
        };
        match part.dev {
            Some(p) => self.build.drv.dev.install(&model, p)?,
            None => self.build.drv.dev.load(&model)?,
        }
        if let Some(t) = part.aker_times.filter(|t| t.len() == shapes.len()) {
            self.aker_times.insert(model.name.clone(), t);
        }
        self.models.retain(|m| m.name != model.name);
        self.models.push(Prepared {
            name: model.name,
            model: model.model,
            shapes,
            idempotence: model.idempotence.map(|m| (*m).clone()),
            expected: HashMap::new(),
        });
        self.rebuild_pending = true;
        let now = self.build.base + self.build.drv.dev.now();
        self.maybe_rebuild(now);
        Ok(())
    }
}
