//! Mapping daemon streams onto the scheduler's clients (the module doc of
//! [`super`], "Mapping daemon clients onto the scheduler"): the clients a
//! configuration has, and moving each stream's waiting request into the
//! scheduler when its stream has none inside.

use super::*;

/// One scheduler client.
pub(super) struct Slot {
    pub(super) model: usize,
    pub(super) class: Class,
    /// The daemon stream holding this BE client.
    pub(super) owner: Option<u64>,
    /// Requests of this client inside the scheduler.
    pub(super) inflight: usize,
}

/// Kernels after each one checked for `ModelInfo::successors_clear`: more
/// than any BE stream keeps on the device (`dq_capacity`, 4 by default);
/// a larger queue is only padded more cautiously.
const SUCCESSORS_CHECKED: usize = 16;

impl<D: EngineDevice> SchedEngine<D> {
    /// The scheduler's clients for `models` (one RT client per model and
    /// `be_streams_per_model` BE clients, see the module doc) and the
    /// driver setup that runs them.
    pub(super) fn layout<'a>(
        settings: &'a SchedSettings,
        spec: &'a DeviceSpec,
        models: &'a [Prepared],
        known: &HashMap<String, reef_sched::fikit::profile::Profile>,
    ) -> (Setup<'a, Prepared>, Vec<Slot>, Vec<usize>) {
        let infos: Vec<ModelInfo> = models
            .iter()
            .map(|m| ModelInfo {
                name: m.name.clone(),
                kernels: m.shapes.len() as u32,
                idempotence: m.idempotence.clone(),
                successors_clear: Some(m.model.successors_clear_of(SUCCESSORS_CHECKED)),
                // Learned by `reef-max`'s guard from the requests (reef_sched::dkp::guard).
                alone_ns: None,
            })
            .collect();
        let mut specs = Vec::new();
        let mut slots = Vec::new();
        let mut rt_slot = Vec::new();
        for (mi, m) in models.iter().enumerate() {
            rt_slot.push(slots.len());
            specs.push(ClientSpec {
                name: format!("{}-rt", m.name),
                model: ModelId(mi as u32),
                class: Class::RealTime,
            });
            slots.push(Slot {
                model: mi,
                class: Class::RealTime,
                owner: None,
                inflight: 0,
            });
            for b in 0..settings.be_streams_per_model {
                specs.push(ClientSpec {
                    name: format!("{}-be{b}", m.name),
                    model: ModelId(mi as u32),
                    class: Class::BestEffort,
                });
                slots.push(Slot {
                    model: mi,
                    class: Class::BestEffort,
                    owner: None,
                    inflight: 0,
                });
            }
        }
        // FIKIT starts from the profiles kept so far (in memory, else on
        // disk).
        let fikit_profiles = if settings.policy.starts_with("fikit") {
            models
                .iter()
                .filter_map(|m| {
                    known.get(&m.name).cloned().or_else(|| {
                        crate::engine::fikit_store::load(&crate::engine::fikit_store::path(
                            settings.fikit_profile_dir.as_deref(),
                            &m.name,
                            &m.model.path,
                        ))
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let setup = Setup {
            spec,
            models,
            infos,
            clients: specs,
            policy: &settings.policy,
            dq_capacity: settings.dq_capacity,
            priorities: Vec::new(),
            seed: settings.seed,
            host_gap_ns: settings.host_gap_ns,
            fikit: settings.fikit.clone(),
            fikit_profiles,
            aker: reef_sched::aker::AkerConfig::default(),
            aker_profiles: None,
        };
        (setup, slots, rt_slot)
    }

    /// Moves waiting requests into the scheduler where their stream has none inside.
    pub(super) fn forward(&mut self, out: &mut Vec<EngineEvent>) {
        if self.rebuild_pending {
            return;
        }
        // Walks the streams by key without collecting them: this runs at
        // every catch-up, on the RT control path too.
        let mut next = self.dstreams.keys().next().copied();
        while let Some(id) = next {
            next = self
                .dstreams
                .range((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
                .next()
                .map(|(&k, _)| k);
            let d = &self.dstreams[&id];
            if d.inflight.is_some() || d.queue.is_empty() {
                continue;
            }
            let (task, model) = d.queue[0].clone();
            let Some(mi) = self.model_index(&model) else {
                let d = self.dstreams.get_mut(&id).expect("stream");
                d.queue.pop_front();
                self.data.remove(&task);
                out.push(EngineEvent::TaskRejected {
                    task,
                    reason: format!("model {model} was unloaded"),
                });
                continue;
            };
            let level = d.priority.get();
            let slot = match d.priority.is_rt() {
                true => self.build.rt_slot[mi],
                false => match d.be_slots.get(&model) {
                    Some(&s) => s,
                    None => {
                        let free = self.build.slots.iter().position(|s| {
                            s.model == mi
                                && s.class == Class::BestEffort
                                && s.owner.is_none()
                                && s.inflight == 0
                        });
                        let Some(s) = free else {
                            // Every BE client of this model is taken: wait.
                            continue;
                        };
                        self.build.slots[s].owner = Some(id);
                        // The client takes its stream's level (FIKIT's
                        // queues Q1..Q9; REEF's policies go by class).
                        if let RunSched::Plain(sc) = &mut self.build.drv.sched {
                            sc.set_priority(ClientId(s as u32), level);
                        }
                        self.dstreams
                            .get_mut(&id)
                            .expect("stream")
                            .be_slots
                            .insert(model.clone(), s);
                        s
                    }
                },
            };
            let sstream = self
                .build
                .drv
                .sched
                .scheduler()
                .core()
                .stream_of(ClientId(slot as u32));
            let d = self.dstreams.get_mut(&id).expect("stream");
            d.queue.pop_front();
            d.inflight = Some(task);
            let newly_bound = d.sched_streams.insert(sstream.0);
            let held = d.preempted && newly_bound;
            let ns = d.ns;
            self.build.slots[slot].inflight += 1;
            let kernels = self.models[mi].shapes.len();
            self.tasks.insert(
                task,
                TaskRec {
                    failed: None,
                    dstream: Some(id),
                    slot,
                    ns,
                    launched: false,
                    next_kernel: 0,
                    kernels,
                },
            );
            let t = self.build.drv.dev.now();
            if held {
                // Preempted by command before it had work on this
                // scheduler stream: the stream is stopped before the
                // request reaches it, and holds it until `resume`.
                self.build
                    .drv
                    .sched
                    .handle(t, Event::PreemptCommand { stream: sstream });
                self.apply_actions(out);
            }
            if let RunSched::Aker(a) = &mut self.build.drv.sched {
                // The query's QoS target (Aker §8.3), else the default.
                let q = self.qos.remove(&task);
                if self.build.slots[slot].class == Class::RealTime {
                    a.set_qos(ClientId(slot as u32), q);
                }
            }
            if let Some(data) = self.data.remove(&task) {
                // Its inputs go to the device before its first kernel.
                self.build
                    .drv
                    .dev
                    .attach(RequestId(task), &self.models[mi].name, data, &|s| {
                        buffer(ns, mi, s)
                    });
            }
            self.build
                .drv
                .arrive(t, RequestId(task), ClientId(slot as u32), mi, None);
            self.apply_actions(out);
            // A new request starts from fresh buffers: its input, and
            // intermediates not carried over from the previous request of
            // this stream. Kernels read their inputs when they complete, so
            // doing this after the first launches (off the control path) is
            // equivalent to doing it before.
            if let Some(values) = self.build.drv.dev.values() {
                if super::trace::trace_path().is_some() {
                    values.trace_on();
                    values.note(|| format!("task {task} starts in ns {ns}"));
                }
                for b in 0..self.models[mi].model.buffers.len() {
                    let id = buffer(ns, mi, b);
                    values.set(id, ValueTracker::initial(id));
                }
            }
        }
    }

    pub(super) fn sched_streams_of(&self, stream: u64) -> Vec<u32> {
        self.dstreams
            .get(&stream)
            .map(|d| d.sched_streams.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Daemon stream `id`'s request on BE client `slot` finished: unless
    /// the stream's next request is of the same model, the client goes
    /// back to the model's free ones (issue 25, D5: a BE client followed
    /// its connection, so idle connections held every BE client of a
    /// model and a fifth client waited for ever). A stream stopped by
    /// command keeps its mark: the client's scheduler stream is resumed
    /// for its next holder, and the daemon stream's next request is held
    /// again where it lands (`forward`).
    pub(super) fn release_idle_slot(&mut self, id: u64, slot: usize, out: &mut Vec<EngineEvent>) {
        let Some(s) = self.build.slots.get(slot) else {
            return;
        };
        if s.class != Class::BestEffort || s.owner != Some(id) || s.inflight > 0 {
            return;
        }
        let model = &self.models[s.model].name;
        let Some(d) = self.dstreams.get_mut(&id) else {
            return;
        };
        if d.inflight.is_some() || d.queue.front().is_some_and(|(_, m)| m == model) {
            return;
        }
        d.be_slots.remove(model);
        self.build.slots[slot].owner = None;
        let sstream = self
            .build
            .drv
            .sched
            .scheduler()
            .core()
            .stream_of(ClientId(slot as u32));
        let still_used = d.be_slots.values().any(|&o| {
            self.build
                .drv
                .sched
                .scheduler()
                .core()
                .stream_of(ClientId(o as u32))
                == sstream
        }) || d.priority.is_rt();
        if !still_used {
            d.sched_streams.remove(&sstream.0);
            if d.preempted {
                let t = self.build.drv.dev.now();
                self.build
                    .drv
                    .sched
                    .handle(t, Event::ResumeCommand { stream: sstream });
                self.apply_actions(out);
            }
        }
    }
}
