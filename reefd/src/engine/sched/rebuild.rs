//! Rebuilding the scheduler and device when the models or the policy
//! change, and what is carried across rebuilds: FIKIT's profiles (kept and
//! written, fikit.txt Fig. 3), the padding counters and Aker's statistics.

use super::*;

pub(super) fn add_aker(a: &mut reef_sched::aker::AkerStats, b: reef_sched::aker::AkerStats) {
    a.lc_launches += b.lc_launches;
    a.fused_launches += b.fused_launches;
    a.be_blocks_fused += b.be_blocks_fused;
    a.be_direct_in_headroom += b.be_direct_in_headroom;
    a.be_launches_idle += b.be_launches_idle;
    a.rest_launches += b.rest_launches;
    a.qos_met += b.qos_met;
    a.qos_missed += b.qos_missed;
    a.beyond_headroom += b.beyond_headroom;
}

impl<D: EngineDevice> SchedEngine<D> {
    /// Rebuilds the core and simulator when asked and nothing is inside.
    pub(super) fn maybe_rebuild(&mut self, now: Nanos) {
        if !self.rebuild_pending || !self.idle() {
            return;
        }
        self.save_fikit_profiles();
        let padding = self.padding_now();
        let aker = self.build.drv.sched.aker_stats();
        let measured = match self.device_predictor() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "scheduler rebuild failed; keeping the previous one");
                return;
            }
        };
        let (mut setup, slots, rt_slot) = Self::layout(
            &self.settings,
            &self.spec,
            &self.models,
            &self.fikit_profiles,
        );
        let aker_measured = measured.as_ref().is_some_and(|m| m.1);
        setup.aker_profiles = measured.map(|m| std::sync::Arc::new(m.0));
        match self.build.drv.rebuild(setup) {
            Ok(()) => {
                let drv = &mut self.build.drv;
                // The daemon reports padding counters, not the per-launch
                // overhead samples a benchmark keeps (they would grow for
                // its life).
                drv.pad = drv.pad.take().map(|p| p.keep_overhead_samples(false));
                self.build.base = now;
                self.build.slots = slots;
                self.build.rt_slot = rt_slot;
                self.build.preemptions_seen = 0;
                self.fikit_saved = 0;
                self.padding_before = padding;
                if let Some(a) = aker {
                    add_aker(&mut self.aker_before, a);
                }
                for d in self.dstreams.values_mut() {
                    d.be_slots.clear();
                    d.sched_streams.clear();
                    d.preempted = false;
                }
                self.rebuild_pending = false;
                self.aker_measured = aker_measured;
                tracing::debug!(policy = %self.settings.policy, models = self.models.len(), "scheduler rebuilt");
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "scheduler rebuild failed; keeping the previous one")
            }
        }
    }

    /// Under `aker`, `baymax` and `tacker`: the predictor, and whether its
    /// kernel times are the device's own measurements
    /// ([`EngineDevice::kernel_ns`]) — when the device measured them (a
    /// GPU), so no GPU predicts from a simulated preset of another one —
    /// or profiled on the simulated preset (kept per model in
    /// `aker_times`, so a rebuild profiles only new models). A GPU that
    /// measured some loaded models and not others cannot be predicted
    /// for: an error.
    fn device_predictor(
        &mut self,
    ) -> anyhow::Result<Option<(reef_exec::aker::SimPredictor, bool)>> {
        if reef_sched::aker::Manager::of_name(&self.settings.policy).is_none() {
            return Ok(None);
        }
        let dev = &self.build.drv.dev;
        let measured: Vec<Option<Vec<u64>>> =
            self.models.iter().map(|m| dev.kernel_ns(&m.name)).collect();
        if measured.iter().all(Option::is_none) {
            self.aker_times
                .retain(|name, _| self.models.iter().any(|m| &m.name == name));
            let mut times = Vec::with_capacity(self.models.len());
            for m in &self.models {
                let t = match self.aker_times.get(&m.name) {
                    Some(t) => t.clone(),
                    None => {
                        let t = reef_exec::aker::SimPredictor::solo_times(&self.spec, &m.shapes)?;
                        self.aker_times.insert(m.name.clone(), t.clone());
                        t
                    }
                };
                times.push(t);
            }
            let p = reef_exec::aker::SimPredictor::with_times(&self.spec, &self.models, &times)?;
            return Ok(Some((p, false)));
        }
        let mut all = Vec::with_capacity(measured.len());
        for (m, t) in self.models.iter().zip(measured) {
            let t = t.ok_or_else(|| {
                anyhow::anyhow!(
                    "policy {}: model {} has no kernel times measured on this device, which its predictions need (Aker §5)",
                    self.settings.policy,
                    m.name
                )
            })?;
            anyhow::ensure!(
                t.iter().all(|&ns| ns > 0),
                "model {}: a kernel measured at 0 ns",
                m.name
            );
            all.push(t.into_iter().map(|ns| ns as f64).collect());
        }
        let p = reef_exec::aker::SimPredictor::with_times(&self.spec, &self.models, &all)?;
        Ok(Some((p, true)))
    }

    pub(super) fn fikit_policy(&self) -> Option<&reef_sched::fikit::Fikit> {
        self.build
            .drv
            .sched
            .scheduler()
            .policy()
            .as_any()
            .and_then(|a| a.downcast_ref::<reef_sched::fikit::Fikit>())
    }

    /// Keeps and writes the profiles FIKIT has built since the last save
    /// (fikit.txt Fig. 3: measured once). A file that cannot be written is
    /// logged; the profile still serves until the daemon exits.
    pub(super) fn save_fikit_profiles(&mut self) {
        let Some(f) = self.fikit_policy() else {
            return;
        };
        let built = f.stats().profiles_built;
        if built <= self.fikit_saved {
            return;
        }
        let measured: Vec<reef_sched::fikit::profile::Profile> = f
            .profiles()
            .filter(|p| self.fikit_profiles.get(&p.task_key) != Some(*p))
            .cloned()
            .collect();
        self.fikit_saved = built;
        for p in measured {
            if let Some(m) = self.models.iter().find(|m| m.name == p.task_key) {
                let path = crate::engine::fikit_store::path(
                    self.settings.fikit_profile_dir.as_deref(),
                    &m.name,
                    &m.model.path,
                );
                match crate::engine::fikit_store::save(&path, &p) {
                    Ok(()) => {
                        tracing::info!(task = %p.task_key, path = %path.display(), runs = p.runs, "FIKIT profile written")
                    }
                    Err(e) => {
                        tracing::warn!(task = %p.task_key, path = %path.display(), error = %e, "FIKIT profile not written")
                    }
                }
            }
            self.fikit_profiles.insert(p.task_key.clone(), p);
        }
    }

    /// Padding counters of the current build plus the replaced ones.
    pub(super) fn padding_now(&self) -> PaddingCounters {
        let mut c = self.padding_before;
        if let RunSched::Padded(d) = &self.build.drv.sched {
            let n = d.dkp_counters();
            c.rt_launches += n.rt_launches;
            c.padded_launches += n.padded_launches;
            c.be_blocks_padded += n.be_blocks_padded;
            c.be_kernels_completed += n.be_kernels_completed;
        }
        c
    }
}
