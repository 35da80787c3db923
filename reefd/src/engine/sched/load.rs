//! Loading a model in two steps around the runtime's lock (issue 25
//! item 2): the checks and the device's long work to run outside it
//! ([`EngineDevice::prepare_load`]: a GPU's weight uploads and reference
//! runs), then the model installed and the scheduler rebuilt under it.

use super::*;

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
        self.shapes_of(model)?;
        Ok(crate::engine::LoadTicket {
            work: self.build.drv.dev.prepare_load(model).transpose()?,
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
        // A model loaded again may have other kernels: profiled again.
        self.aker_times.remove(&model.name);
        match part {
            Some(p) => self.build.drv.dev.install(&model, p)?,
            None => self.build.drv.dev.load(&model)?,
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
