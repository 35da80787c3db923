//! One interpreter of the scheduler's actions on the simulated device, and
//! the step of the event loop that both the virtual-time DISB runner
//! (reef-bench) and the daemon's wall-clock engine (reefd) take (issue 18
//! items 1 and 6: before this module each had its own copy, with different
//! error handling).
//!
//! What an action means on the device is defined here once: a launch of
//! kernel *k* of a request on a scheduler stream (REEF §4.1, Fig. 7: host
//! queue, capped device queue), the preempt flag, the kill of a stream's
//! running blocks and the reset of its device queue (§4.2–§4.3, Fig. 8),
//! padded launches and the rest of partly padded kernels (§5.1, Fig. 12,
//! through [`PadExec`]), Aker's fused launches (Aker §5.4, through
//! [`FuseExec`]), and the client framework's host pacing (the host-gap
//! model of reef-bench's runner, `RunOptions::host_gap_ns`). The runtime
//! facts that decide how streams map onto the device are defined here too:
//! [`own_device_queues`] and [`reefnv_runtime`].
//!
//! One error policy: every action the device refuses, and every action for
//! a request the caller does not know, becomes [`Outcome::Failed`] with the
//! action and the error. Nothing is dropped or only logged here; the
//! benchmark ends the run with the error (its figures would be wrong), the
//! daemon counts it (`device_errors`), logs it and goes on.
//!
//! What the caller keeps: its clock (virtual or wall), its clients and
//! their requests ([`Work`] answers which model a request runs and which
//! buffers a kernel touches), and what a finished request means to it
//! (latency, verification, replies). Outcomes are handed back in the order
//! their actions were performed, all at the same device instant.

use crate::aker::FuseExec;
use crate::device::Device;
use crate::{Buffers, ModelShapes, PadExec, RunSched};
use reef_sched::dkp::DkpAction;
use reef_sched::{Action, ClientId, Event, RequestId, StreamPriority, Time};
use reef_sim::{
    DeviceEvent, DeviceSpec, EventKind, KernelLaunch, KernelShape, Sim, SimConfig, Tags,
};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

pub mod cost;
mod launch;
mod outcome;

/// Whether a policy runs on REEF's modified runtime, which gives every
/// stream its own device queue (REEF §4.1 Fig. 7; §4.5 `hip_set_stream_cap`
/// caps "the DQ used by a GPU stream"), so its streams get hardware queues
/// of their own. The others (`streams`, `seq`, `rt-only` and later
/// baselines) use the vendor runtime, whose streams share the device's
/// pool of hardware queues (docs/simulator.md "Hardware queues").
pub fn own_device_queues(policy: &str) -> bool {
    matches!(policy, "reef" | "reef-nodkp" | "reef-dkp-mv" | "wait")
        || reef_sched::dkp::MaxConfig::parse(policy).is_some()
}

/// Whether REEF's runtime on this device is REEFnv (REEF §4.6: the NVIDIA
/// port, evaluated on the GV100), whose device queues are simulated: every
/// stream's kernels wait in a virtual host queue whose background thread
/// "transmits a fixed number of kernels to the CUDA runtime in a closed
/// loop" (§4.6, "Queue eviction"). So on REEFnv a policy that runs on
/// REEF's runtime ([`own_device_queues`]) has at most `dq_capacity` kernels
/// outstanding per stream even when it asks for no cap
/// (`reef_sched::Config::runtime_caps_every_stream`): the `wait` baseline of
/// Fig. 17(b)/18 too, whose queued kernels then sit in the
/// virtual host queue (evicted by a reset, without a fetch) rather than
/// in the device queue. The MI50 (HIP, ROCm) runs REEF's modified runtime
/// with real device queues, which `wait` leaves uncapped (§6.4). The
/// NVIDIA presets are `gv100` and `h100` (sim/devices).
pub fn reefnv_runtime(spec: &DeviceSpec) -> bool {
    matches!(spec.name.as_str(), "gv100" | "h100")
}

/// Whether `policy` places blocks on chosen compute units (dynamic kernel
/// padding, REEF §5.1; Aker's and Tacker's fused kernels, Aker §5.4),
/// which needs a device that places blocks ([`Device::places_blocks`]).
pub fn places_blocks(policy: &str) -> bool {
    reef_sched::dkp::variant_of(policy).is_some()
        || matches!(policy, "aker" | "tacker")
        || reef_sched::dkp::MaxConfig::parse(policy).is_some_and(|m| m.pad)
}

/// The caller's book of requests, as the interpreter needs it.
pub trait Work {
    /// The index (into the run's models) of the model request `req` runs;
    /// `None` for a request the caller does not know.
    fn model_of(&self, req: RequestId) -> Option<usize>;
    /// The reads and writes of kernel `kernel` of `req` (empty when values
    /// are not tracked).
    fn buffers(&self, req: RequestId, kernel: usize) -> Buffers;
}

pub use outcome::{LaunchKind, Outcome};

/// How a run's scheduler and device are set up.
pub struct Setup<'a, M: ModelShapes> {
    pub spec: &'a DeviceSpec,
    pub models: &'a [M],
    /// One per model (name, kernels, idempotence metadata).
    pub infos: Vec<reef_sched::ModelInfo>,
    /// The scheduler's clients.
    pub clients: Vec<reef_sched::ClientSpec>,
    pub policy: &'a str,
    /// Device-queue capacity of preemptible streams (REEF §4.2).
    pub dq_capacity: usize,
    /// Priority level per client (empty: RT 0, BE 9).
    pub priorities: Vec<u8>,
    /// Seed of the simulator.
    pub seed: u64,
    /// Host time per kernel launch of the clients' framework (`None`:
    /// back to back): kernel 0 one gap after the request arrives, kernel
    /// i+1 one gap after kernel i was transmitted.
    pub host_gap_ns: Option<Time>,
    /// FIKIT's parameters and the profiles it starts with (`fikit*`).
    pub fikit: reef_sched::fikit::FikitConfig,
    pub fikit_profiles: Vec<reef_sched::fikit::profile::Profile>,
    /// The Aker managers' QoS settings and profiles (`aker`, `baymax`,
    /// `tacker`; profiled on a scratch device when `None`).
    pub aker: reef_sched::aker::AkerConfig,
    pub aker_profiles: Option<Arc<crate::aker::SimPredictor>>,
}

/// The scheduler of a run, its executors and its device (reef-sim's
/// simulated GPU unless another [`Device`] is given).
pub struct Driver<D: Device = Sim> {
    pub sched: RunSched,
    /// Executes padded launches (`reef`, `reef-dkp-mv`).
    pub pad: Option<PadExec>,
    /// Executes fused launches (`aker`, `tacker`).
    pub fuse: Option<FuseExec>,
    pub dev: D,
    run: RunFacts,
    /// Device stream of each scheduler stream, and back.
    streams: Vec<reef_sim::StreamId>,
    rev: Vec<u32>,
    /// Host issue events: (time, request, kernels issued so far).
    host: BinaryHeap<Reverse<(Time, u64, u32)>>,
    /// Device events handled.
    pub device_events: u64,
    /// When `Some`, every device event as the device reported it (padded
    /// and fused parts separately), for an observer that accounts device
    /// time from the trace (`reef-bench lost`); the caller drains it.
    pub event_log: Option<Vec<DeviceEvent>>,
    /// When `Some`, the scheduler's own time per decision is recorded
    /// ([`cost`]); the caller reads it.
    pub decision_cost: Option<cost::DecisionCost>,
    /// With [`Self::decision_cost`], the time of each selection made ahead
    /// of its launch (`PaddingScheduler::prepare`), apart from the
    /// decisions: it runs after the actions are performed.
    pub prepare_cost: Option<cost::DecisionCost>,
    evbuf: Vec<DeviceEvent>,
    /// Launches the device refused while earlier launches of the same
    /// stream were still on it: the scheduler is told each is over once
    /// its stream has drained, not at once (issue 25, D6). Told at once,
    /// the request would end while its earlier kernels still run, and the
    /// stream's next request would be launched beside them (a GPU
    /// instance holds one request's buffers: the device refused it too).
    refused: Vec<(
        reef_sim::StreamId,
        reef_sched::StreamId,
        reef_sched::KernelTag,
    )>,
}

impl Driver<Sim> {
    /// Builds the scheduler for `s.policy` (reef-sched's policies, padding
    /// `reef` / `reef-dkp-mv`, `fikit*`, the Aker managers) and a fresh
    /// simulated device, and creates the scheduler's streams on it.
    pub fn new<M: ModelShapes>(s: Setup<'_, M>) -> anyhow::Result<Driver> {
        let sim = Sim::new(
            s.spec.clone(),
            SimConfig {
                seed: s.seed,
                ..SimConfig::default()
            },
        );
        Driver::with_device(s, sim)
    }
}

impl<D: Device> Driver<D> {
    /// As [`Driver::new`], on device `dev`. A policy that pads or fuses
    /// kernels needs a device that places blocks
    /// ([`Device::places_blocks`], [`Device::launch_padded`]).
    pub fn with_device<M: ModelShapes>(s: Setup<'_, M>, mut dev: D) -> anyhow::Result<Driver<D>> {
        let (sched, pad, fuse, run) = Self::scheduler(s, &mut dev)?;
        let mut d = Driver {
            sched,
            pad,
            fuse,
            dev,
            run,
            streams: Vec::new(),
            rev: Vec::new(),
            host: BinaryHeap::new(),
            device_events: 0,
            event_log: None,
            decision_cost: None,
            prepare_cost: None,
            evbuf: Vec::new(),
            refused: Vec::new(),
        };
        d.create_streams()?;
        Ok(d)
    }

    /// Rebuilds the scheduler for a new configuration (models, policy) on
    /// the same device, which starts afresh ([`Device::reset`]). When the
    /// new scheduler cannot be built, nothing changes.
    pub fn rebuild<M: ModelShapes>(&mut self, s: Setup<'_, M>) -> anyhow::Result<()> {
        let (sched, pad, fuse, run) = Self::scheduler(s, &mut self.dev)?;
        self.dev.reset();
        self.sched = sched;
        self.pad = pad;
        self.fuse = fuse;
        self.run = run;
        self.streams.clear();
        self.rev.clear();
        self.host.clear();
        self.refused.clear();
        self.create_streams()
    }

    /// The core's first actions create its streams; a refusal is an error
    /// of the setup.
    fn create_streams(&mut self) -> anyhow::Result<()> {
        let mut out = Vec::new();
        self.apply(&NoWork, &mut out);
        if let Some(Outcome::Failed { action, error, .. }) =
            out.iter().find(|o| matches!(o, Outcome::Failed { .. }))
        {
            anyhow::bail!("{action}: {error}");
        }
        Ok(())
    }

    /// The scheduler of setup `s` on `dev`, its executors and what the
    /// interpreter keeps of the setup.
    #[allow(clippy::type_complexity)]
    fn scheduler<M: ModelShapes>(
        s: Setup<'_, M>,
        dev: &mut D,
    ) -> anyhow::Result<(RunSched, Option<PadExec>, Option<FuseExec>, RunFacts)> {
        if places_blocks(s.policy) && !dev.places_blocks() {
            anyhow::bail!(
                "policy {} places blocks on chosen compute units (padded or fused launches), which this device cannot do; use a policy without padding (reef-nodkp)",
                s.policy
            );
        }
        let mut cfg = crate::sched_config(s.spec, s.dq_capacity);
        cfg.runtime_caps_every_stream = reefnv_runtime(s.spec);
        cfg.host_paced = s.host_gap_ns.is_some();
        cfg.priorities = s.priorities;
        let (mut fuse, mut pad) = (None, None);
        let sched = if reef_sched::aker::Manager::of_name(s.policy).is_some() {
            let pred = match &s.aker_profiles {
                Some(p) if p.matches(s.models) => p.share(),
                Some(_) => anyhow::bail!("the Aker profiles given were made for other models"),
                None => crate::aker::SimPredictor::new(s.spec, s.models)?,
            };
            let (sc, f) = RunSched::new_aker(s.policy, pred, s.aker, cfg, s.infos, s.clients)?;
            fuse = Some(f);
            sc
        } else if s.policy.starts_with("fikit") {
            // FIKIT knows each model's kernel IDs (fikit.txt §3.2).
            let ids = s
                .models
                .iter()
                .map(|m| reef_sched::fikit::profile::KernelId::of_model(m.model()))
                .collect();
            let pol = reef_sched::fikit_named(s.policy, s.fikit, ids, s.fikit_profiles)?;
            let sc = reef_sched::Scheduler::new(Box::new(pol), cfg, s.infos, s.clients)?;
            RunSched::Plain(Box::new(sc))
        } else {
            let (sc, p) = RunSched::new(
                s.policy,
                s.spec,
                s.models,
                cfg,
                s.infos,
                s.clients,
                s.dq_capacity,
            )?;
            pad = p;
            sc
        };
        let shapes: Vec<Vec<Arc<KernelShape>>> =
            s.models.iter().map(|m| m.shapes().to_vec()).collect();
        let run = RunFacts {
            policy: s.policy.to_string(),
            own_queues: own_device_queues(s.policy),
            big_queue: shapes.iter().map(Vec::len).max().unwrap_or(1) + 1,
            host_gap_ns: s.host_gap_ns,
            model_gaps: Vec::new(),
            model_sync: Vec::new(),
            sync_wait: HashMap::new(),
            names: s.models.iter().map(|m| m.name().to_string()).collect(),
            shapes,
        };
        Ok((sched, pad, fuse, run))
    }

    /// The policy this driver runs.
    pub fn policy(&self) -> &str {
        &self.run.policy
    }

    /// Device stream of scheduler stream `s`.
    pub fn device_stream(&self, s: reef_sched::StreamId) -> Option<reef_sim::StreamId> {
        self.streams.get(s.0 as usize).copied()
    }

    /// Request `req` of `client` (model `model`) arrives at device time
    /// `t`; with host pacing, its kernel 0 is issued one host gap later.
    pub fn arrive(
        &mut self,
        t: Time,
        req: RequestId,
        client: ClientId,
        model: usize,
        deadline: Option<Time>,
    ) {
        if let Some(name) = self.run.names.get(model) {
            self.dev.bind(req, name);
        }
        if let Some(g) = self.host_gap(model) {
            let first = if g == 0 && !self.host_syncs(model) {
                self.kernels(model) as u32
            } else {
                1
            };
            self.host.push(Reverse((t + g, req.0, first)));
        }
        self.handle(
            t,
            Event::RequestArrived {
                req,
                client,
                deadline,
            },
        );
    }

    /// The next instant the device or the clients' host has something to
    /// do.
    pub fn next_time(&self) -> Option<Time> {
        [self.dev.next_event_time(), self.next_host_time()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next instant the clients' host issues a kernel.
    pub fn next_host_time(&self) -> Option<Time> {
        self.host.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Runs the device to `t`: each device event up to `t` reaches the
    /// scheduler and its actions are performed before the next event is
    /// handled; then the host issues what it issues at `t` (after the
    /// device's events of that instant: a reply at t precedes a launch at t).
    pub fn step(&mut self, t: Time, work: &dyn Work, out: &mut Vec<Outcome>) {
        let mut buf = std::mem::take(&mut self.evbuf);
        self.dev.advance_into(t, &mut buf);
        for ev in buf.drain(..) {
            self.on_device_event(&ev);
            self.apply(work, out);
            self.drained_refusals(work, out);
        }
        self.evbuf = buf;
        while let Some(&Reverse((th, req, n))) = self.host.peek() {
            if th > t {
                break;
            }
            self.host.pop();
            self.handle(
                t,
                Event::KernelsIssued {
                    req: RequestId(req),
                    issued: n,
                },
            );
            self.apply(work, out);
        }
    }

    /// Refused launches whose device stream has drained are over for the
    /// scheduler now.
    fn drained_refusals(&mut self, work: &dyn Work, out: &mut Vec<Outcome>) {
        while let Some(i) = self
            .refused
            .iter()
            .position(|&(ds, _, _)| self.dev.queue_len(ds) == 0)
        {
            let (_, stream, tag) = self.refused.remove(i);
            let now = self.dev.now();
            self.handle(now, Event::KernelCompleted { stream, tag });
            self.apply(work, out);
        }
    }

    /// A device event reaches the scheduler: the parts of a padded or
    /// fused launch as one event of its real-time kernel.
    fn on_device_event(&mut self, ev: &DeviceEvent) {
        self.device_events += 1;
        if let Some(l) = self.event_log.as_mut() {
            l.push(*ev);
        }
        let mut ev = *ev;
        if let Some(f) = self.fuse.as_mut() {
            match f.filter(&ev) {
                Some(e) => ev = e,
                None => return,
            }
        }
        if let Some(p) = self.pad.as_mut() {
            match p.filter(&ev) {
                Some(e) => ev = e,
                None => return,
            }
        }
        let Some(&s) = self
            .rev
            .get(ev.stream.0 as usize)
            .filter(|&&s| s != u32::MAX)
        else {
            return;
        };
        if ev.kind == EventKind::Completed && !self.run.sync_wait.is_empty() {
            let key = (ev.tags.task, ev.tags.kernel);
            if let Some(g) = self.run.sync_wait.remove(&key) {
                self.host.push(Reverse((ev.time + g, key.0, key.1 + 2)));
            }
        }
        let e = crate::sched_event(&ev, reef_sched::StreamId(s));
        self.handle(ev.time, e);
    }

    /// An event to the scheduler, its time counted into the decision when
    /// [`Self::decision_cost`] is on.
    fn handle(&mut self, t: Time, e: Event) {
        match self.decision_cost.as_mut() {
            None => self.sched.handle(t, e),
            Some(_) => {
                let t0 = Instant::now();
                self.sched.handle(t, e);
                let ns = t0.elapsed().as_nanos() as u64;
                if let Some(c) = self.decision_cost.as_mut() {
                    c.acc += ns;
                    c.calls += 1;
                }
            }
        }
    }

    /// The scheduler's next action, timed as [`Self::handle`]; at the last
    /// one, the decision is recorded.
    fn poll(&mut self) -> Option<DkpAction> {
        if self.decision_cost.is_none() {
            return self.sched.poll();
        }
        let t0 = Instant::now();
        let a = self.sched.poll();
        let ns = t0.elapsed().as_nanos() as u64;
        if let Some(c) = self.decision_cost.as_mut() {
            c.acc += ns;
            c.calls += 1;
            if a.is_none() {
                c.close();
            }
        }
        a
    }

    /// With host pacing, the framework issues kernel `kernel + 1` of `req`
    /// one host gap after kernel `kernel`'s launch returned.
    fn host_launched(&mut self, req: RequestId, kernel: u32, model: usize) {
        let sync = self.host_syncs(model);
        let Some(g) = self.host_gap(model).filter(|&g| g > 0 || sync) else {
            return;
        };
        if (kernel as usize) + 1 < self.kernels(model) {
            if sync {
                // Issued once this kernel has completed (`on_device_event`).
                self.run.sync_wait.insert((req.0, kernel), g);
                return;
            }
            let now = self.dev.now();
            self.host.push(Reverse((now + g, req.0, kernel + 2)));
        }
    }

    fn stream(&self, s: reef_sched::StreamId) -> Result<reef_sim::StreamId, String> {
        self.device_stream(s)
            .ok_or_else(|| format!("scheduler stream {} has no device stream", s.0))
    }

    /// Performs the scheduler's pending actions at the device's current
    /// instant.
    pub fn apply(&mut self, work: &dyn Work, out: &mut Vec<Outcome>) {
        while let Some(da) = self.poll() {
            let a = match da {
                DkpAction::Core(a) => a,
                other => {
                    if let Err((action, error)) = self.apply_launch(other, work, out) {
                        out.push(Outcome::Failed {
                            action,
                            error,
                            req: None,
                        });
                    }
                    continue;
                }
            };
            let launch = match a {
                Action::Launch { stream, tag } => Some((stream, tag)),
                _ => None,
            };
            if let Err((action, error)) = self.apply_core(a, work, out) {
                out.push(Outcome::Failed {
                    action,
                    error,
                    req: launch.map(|(_, tag)| tag.req),
                });
                if let Some((stream, tag)) = launch {
                    // The kernel never reached the device: the scheduler is
                    // told it is over, or its stream would wait for it for
                    // ever; the request finishes failed (see `Failed`).
                    // With earlier kernels still on the device stream, it
                    // is told once they are done (`refused`).
                    match self.device_stream(stream) {
                        Some(ds) if self.dev.queue_len(ds) > 0 => {
                            self.refused.push((ds, stream, tag));
                        }
                        _ => {
                            let now = self.dev.now();
                            self.handle(now, Event::KernelCompleted { stream, tag });
                        }
                    }
                }
            }
        }
        self.prepare();
    }

    /// The padding selection for the next real-time kernel, made now that
    /// the actions are performed (`PaddingScheduler::prepare`), timed apart
    /// from the decisions when [`Self::prepare_cost`] is on.
    fn prepare(&mut self) {
        match self.prepare_cost.as_mut() {
            None => {
                self.sched.prepare();
            }
            Some(_) => {
                let t0 = Instant::now();
                let made = self.sched.prepare();
                let ns = t0.elapsed().as_nanos() as u64;
                if let (true, Some(c)) = (made, self.prepare_cost.as_mut()) {
                    c.record(ns, 1);
                }
            }
        }
    }

    fn apply_core(
        &mut self,
        a: Action,
        work: &dyn Work,
        out: &mut Vec<Outcome>,
    ) -> Result<(), (String, String)> {
        match a {
            Action::CreateStream {
                stream,
                priority,
                dq_capacity,
                context,
            } => {
                let what = || format!("create stream {}", stream.0);
                let prio = match priority {
                    StreamPriority::High => 1,
                    StreamPriority::Normal => 0,
                };
                let cap = dq_capacity.unwrap_or(self.run.big_queue).max(1);
                let s = self
                    .dev
                    .create_stream_in_context(context, prio, cap, self.run.own_queues)
                    .map_err(|e| (what(), e))?;
                if stream.0 as usize != self.streams.len() {
                    return Err((what(), "streams are created in order".into()));
                }
                self.streams.push(s);
                if self.rev.len() <= s.0 as usize {
                    self.rev.resize(s.0 as usize + 1, u32::MAX);
                }
                self.rev[s.0 as usize] = stream.0;
            }
            Action::Launch { stream, tag } => {
                let (req, k) = (tag.req, tag.kernel as usize);
                let what = || format!("launch request {} kernel {k} on stream {}", req.0, stream.0);
                let model = work
                    .model_of(req)
                    .ok_or_else(|| (what(), "unknown request".to_string()))?;
                self.host_launched(req, tag.kernel, model);
                let shape = self.shape(model, k).map_err(|e| (what(), e))?;
                let (r, w) = work.buffers(req, k);
                let l = KernelLaunch::new(
                    shape,
                    Tags {
                        task: req.0,
                        kernel: tag.kernel,
                        user: 0,
                    },
                )
                .with_buffers(r, w);
                let s = self.stream(stream).map_err(|e| (what(), e))?;
                let issued = Instant::now();
                self.dev
                    .launch(s, l)
                    .map_err(|e| (what(), format!("policy {}: {e}", self.run.policy)))?;
                out.push(Outcome::Queued {
                    req,
                    kernel: tag.kernel,
                    issued,
                });
                out.push(Outcome::Launched(LaunchKind::Kernel));
            }
            Action::SetPreemptFlag { stream, value } => {
                let what = || format!("set preempt flag {value} on stream {}", stream.0);
                let s = self.stream(stream).map_err(|e| (what(), e))?;
                self.dev
                    .set_preempt_flag(s, value)
                    .map_err(|e| (what(), e))?;
            }
            Action::KillStream { stream } => {
                let what = || format!("kill stream {}", stream.0);
                let s = self.stream(stream).map_err(|e| (what(), e))?;
                self.dev.kill_stream(s).map_err(|e| (what(), e))?;
            }
            Action::ClearDeviceQueue { stream } => {
                let what = || format!("clear the device queue of stream {}", stream.0);
                let s = self.stream(stream).map_err(|e| (what(), e))?;
                self.dev.clear_queue(s).map_err(|e| (what(), e))?;
            }
            // Asynchronous reclamation (§4.2): the core has already reset
            // the host queue in O(1); the dropped launches are plain data.
            Action::ReclaimHostQueue { .. } => {}
            // A restore's launches follow as their own actions.
            Action::Restore {
                req, from_kernel, ..
            } => out.push(Outcome::Restored { req, from_kernel }),
            Action::RequestDone { req, client } => {
                self.dev.request_done(req);
                out.push(Outcome::Done { req, client })
            }
            Action::RequestRejected { req, client } => {
                self.dev.request_done(req);
                out.push(Outcome::Rejected { req, client })
            }
        }
        Ok(())
    }

    /// Gives each model its own host time per launch (index = model; 0:
    /// the framework issues every kernel at the request's arrival, as back
    /// to back), for clients whose frameworks differ (FIKIT §4.5: services
    /// of different models, each its own process). Needs a host-paced run
    /// (`Setup::host_gap_ns` set, any value: these replace it).
    ///
    /// `sync[m]`: model `m`'s host waits for each kernel to complete before
    /// its host time for the next starts (a framework that synchronises
    /// with the device after every operator, e.g. reading a result back;
    /// empty: none waits).
    pub fn set_model_host_gaps(&mut self, gaps: Vec<Time>, sync: Vec<bool>) -> anyhow::Result<()> {
        if self.run.host_gap_ns.is_none() {
            anyhow::bail!("per-model host gaps need a host-paced run (Setup::host_gap_ns)");
        }
        if gaps.len() != self.run.shapes.len() {
            anyhow::bail!(
                "{} per-model host gaps for {} models",
                gaps.len(),
                self.run.shapes.len()
            );
        }
        if !sync.is_empty() && sync.len() != gaps.len() {
            anyhow::bail!("{} sync flags for {} models", sync.len(), gaps.len());
        }
        self.run.model_gaps = gaps;
        self.run.model_sync = sync;
        Ok(())
    }

    /// Host time per launch of model `model`'s framework (`None`: back to
    /// back, not host paced).
    fn host_gap(&self, model: usize) -> Option<Time> {
        match self.run.model_gaps.get(model) {
            Some(&g) => Some(g),
            None => self.run.host_gap_ns,
        }
    }

    /// Whether model `model`'s host waits for each kernel's completion.
    fn host_syncs(&self, model: usize) -> bool {
        self.run.model_sync.get(model).copied().unwrap_or(false)
    }

    /// Kernels model `model` has.
    fn kernels(&self, model: usize) -> usize {
        self.run.shapes.get(model).map_or(0, Vec::len)
    }

    /// Kernel `k`'s shape of model `model`.
    fn shape(&self, model: usize, k: usize) -> Result<Arc<KernelShape>, String> {
        self.run
            .shapes
            .get(model)
            .and_then(|m| m.get(k))
            .cloned()
            .ok_or_else(|| format!("model {model} has no kernel {k}"))
    }
}

/// What the interpreter keeps of a run's setup.
struct RunFacts {
    policy: String,
    own_queues: bool,
    /// Device-queue capacity of a stream the scheduler leaves uncapped:
    /// room for the longest model's kernels.
    big_queue: usize,
    host_gap_ns: Option<Time>,
    /// Per model, its host time per launch, overriding `host_gap_ns` (0:
    /// every kernel issued at arrival); empty: `host_gap_ns` for all
    /// ([`Driver::set_model_host_gaps`]).
    model_gaps: Vec<Time>,
    /// Per model, whether its framework waits for each kernel to complete
    /// before spending its host time on the next (a synchronising host);
    /// empty: none does.
    model_sync: Vec<bool>,
    /// Kernels launched by a synchronising host, by (request, kernel): the
    /// host time after which the next is issued once this one completes.
    sync_wait: HashMap<(u64, u32), Time>,
    /// Each model's name and kernel shapes.
    names: Vec<String>,
    shapes: Vec<Vec<Arc<KernelShape>>>,
}

/// A book with no requests (the start-up actions create streams only).
struct NoWork;

impl Work for NoWork {
    fn model_of(&self, _: RequestId) -> Option<usize> {
        None
    }
    fn buffers(&self, _: RequestId, _: usize) -> Buffers {
        (Vec::new(), Vec::new())
    }
}

impl Driver {
    /// Fault injection for tests: scheduler stream `s` loses its device
    /// stream (as if the driver had destroyed the queue), so every later
    /// action on it is refused by the device.
    #[doc(hidden)]
    pub fn inject_lost_stream(&mut self, s: reef_sched::StreamId) {
        if let Some(d) = self.streams.get_mut(s.0 as usize) {
            *d = reef_sim::StreamId(u32::MAX);
        }
    }
}

#[cfg(test)]
mod tests;
