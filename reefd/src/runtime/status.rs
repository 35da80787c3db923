//! What `status`, `stats` and the Prometheus endpoint report.

use super::*;

impl Runtime {
    pub(super) fn status_locked(&self, st: &State) -> StatusInfo {
        StatusInfo {
            daemon_version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            device: self.settings.device.clone(),
            engine: st.info.name.clone(),
            policy: st.info.policy.clone(),
            preemption_levels: st.info.preemption_levels.clone(),
            preemption_notes: st.engine.preemption_notes(),
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            models: st.models.len(),
            streams: st.streams.len(),
            tasks_in_flight: st.tasks.len(),
            connections: st.connections,
            measuring: st.engine.fikit().map_or_else(Vec::new, |f| f.measuring),
            devices: st.engine.devices(),
        }
    }

    pub(super) fn stats_locked(&self, st: &State) -> Stats {
        let m = &st.metrics;
        let norm = metrics::summarize(m.rt_normalized.iter().copied());
        let padding = st.engine.padding();
        Stats {
            uptime_s: self.epoch.elapsed().as_secs_f64(),
            requests: m.requests,
            bad_requests: m.bad_requests,
            tasks_submitted: m.tasks_submitted,
            tasks_completed: m.tasks_completed,
            tasks_failed: m.tasks_failed,
            kernels_launched: m.kernels_launched,
            restores: m.restores,
            corrupted_outputs: m.corrupted_outputs,
            device_errors: m.device_errors,
            preemptions: m
                .preemptions
                .iter()
                .map(|(l, n)| (l.to_string(), *n))
                .collect(),
            rt_latency: m.rt_latency.summary(),
            rt_normalized_mean: (norm.count > 0).then_some(norm.mean_us),
            be_latency: m.be_latency.summary(),
            control_path: m.control_path.summary(),
            padded_launches: padding.map_or(0, |p| p.padded_launches),
            be_blocks_padded: padding.map_or(0, |p| p.be_blocks_padded),
            fikit: st.engine.fikit(),
            aker: st.engine.aker(),
            placement: st.engine.placement(),
            engine_tasks: st.engine.residue().0 as u64,
            engine_clients_held: st.engine.residue().1 as u64,
        }
    }

    pub fn status(&self) -> StatusInfo {
        self.status_locked(&self.lock())
    }

    pub fn stats(&self) -> Stats {
        self.stats_locked(&self.lock())
    }

    /// The Prometheus text exposition of the metrics.
    pub fn prometheus(&self) -> String {
        let st = self.lock();
        let queues: Vec<QueueDepth> = st
            .streams
            .iter()
            .map(|(id, s)| {
                let (host, device) = st.engine.queue_depths(*id);
                QueueDepth {
                    stream: *id,
                    priority: s.priority.to_string(),
                    host,
                    device,
                }
            })
            .collect();
        let padding = st
            .engine
            .padding()
            .map(|p| (p.padded_launches, p.be_blocks_padded));
        let mut text = metrics::render(
            &st.metrics,
            self.epoch.elapsed().as_secs_f64(),
            &queues,
            padding,
        );
        if let Some(p) = st.engine.placement() {
            text.push_str(&metrics::render_node(&st.engine.devices(), &p));
        }
        text
    }
}
