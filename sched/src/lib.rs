//! reef-sched: the sans-IO scheduler core (DESIGN.md layer 3).
//!
//! Events in ([`Event`]), actions out ([`Action`]); no threads, clocks or
//! sockets, so the same code runs in virtual time (the simulator's event loop,
//! for `reef-bench disb` and the tests) and in the live daemon. Implements
//! REEF (Han et al., TOCS 2025) §3.1 (Fig. 5: task queues, normal and
//! real-time modes), §4 (Figs. 7–9: reset-based preemption and restore) and
//! the comparison policies of §6.2/§6.4; see docs/scheduler.md.
//!
//! ```
//! use reef_sched::*;
//! let models = vec![ModelInfo::idempotent("vgg", 3)];
//! let clients = vec![ClientSpec { name: "rt".into(), model: ModelId(0), class: Class::RealTime }];
//! let mut s = Scheduler::new(policy_by_name("reef").unwrap(), Config::default(), models, clients).unwrap();
//! s.handle(0, Event::RequestArrived { req: RequestId(1), client: ClientId(0), deadline: None });
//! let actions: Vec<Action> = std::iter::from_fn(|| s.poll_action()).collect();
//! assert!(actions.iter().any(|a| matches!(a, Action::Launch { .. })));
//! ```

pub mod aker;
mod core;
pub mod dkp;
#[cfg(feature = "fake")]
pub mod fake;
pub mod fikit;
pub mod place;
mod policy;
mod types;

pub use crate::core::{
    ClientSpec, Config, ConfigError, Core, Counters, DeviceCaps, Layout, ModelInfo, Pending,
    PreemptionRecord, RtOrder,
};
pub use crate::policy::{
    fikit_named, policy_by_name, Mode, Policy, Preemptive, RtOnly, Seq, Streams, UnknownPolicy,
    FIKIT_ABLATIONS, POLICY_NAMES,
};
pub use crate::types::*;

/// The scheduler: the mechanism [`Core`] driven by one [`Policy`].
pub struct Scheduler {
    core: Core,
    policy: Box<dyn Policy>,
}

impl Scheduler {
    /// Builds a scheduler. Emits a [`Action::CreateStream`] per stream first.
    pub fn new(
        mut policy: Box<dyn Policy>,
        cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
    ) -> Result<Self, ConfigError> {
        let layout = policy.layout(&clients, &cfg);
        let mut core = Core::new(cfg, models, clients, layout)?;
        policy.schedule(&mut core);
        Ok(Self { core, policy })
    }

    /// The core, for a wrapper that drives mechanisms itself (dynamic kernel
    /// padding starting a queued best-effort request,
    /// [`Core::start_preempted`]).
    pub(crate) fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    /// Feeds one event observed at time `now`; the resulting actions are
    /// available from [`Self::poll_action`].
    pub fn handle(&mut self, now: Time, ev: Event) {
        self.core.set_now(now);
        let ev_copy = ev.clone();
        match ev {
            Event::RequestArrived {
                req,
                client,
                deadline,
            } => {
                let admit = self
                    .core
                    .class_of(client)
                    .is_some_and(|c| self.policy.admits(c));
                if !self.core.enqueue(req, client, deadline, admit) {
                    // Unknown client: refuse rather than panic.
                    self.core.reject_unknown(req, client);
                }
            }
            Event::KernelStarted { stream, tag } => self.core.on_started(stream, tag),
            Event::KernelCompleted { stream, tag } => self.core.on_finished(stream, tag, 0),
            Event::KernelEvicted { stream, tag } => self.core.on_finished(stream, tag, 1),
            Event::KernelKilled { stream, tag } => self.core.on_finished(stream, tag, 2),
            Event::KernelsIssued { req, issued } => self.core.on_issued(req, issued),
            Event::Timer => {}
            Event::PreemptCommand { stream } => self.core.command_preempt(stream),
            Event::ResumeCommand { stream } => self.core.command_resume(stream),
        }
        self.policy.observe(&self.core, &ev_copy);
        self.policy.schedule(&mut self.core);
    }

    /// A kernel of a request on `stream` completed inside a launch on
    /// another stream (dynamic kernel padding, [`crate::dkp`]): the request
    /// progresses (and replies when that was its last kernel) without
    /// counting a launch of `stream` as finished.
    pub(crate) fn completed_elsewhere(&mut self, now: Time, stream: StreamId, tag: KernelTag) {
        self.core.set_now(now);
        self.core.on_completed_elsewhere(stream, tag);
        self.policy.schedule(&mut self.core);
    }

    /// Next action to perform, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.core.pop_action()
    }

    /// Appends all pending actions to `v`.
    pub fn drain_actions(&mut self, v: &mut Vec<Action>) {
        self.core.drain_actions_into(v);
    }

    /// Sets a client's priority level (0..=9, higher numbers count as 9),
    /// e.g. when a daemon binds a client to a stream of another level.
    /// FIKIT's holders and fills follow it from the next event on.
    pub fn set_priority(&mut self, client: ClientId, level: u8) {
        self.core.set_priority(client, level);
    }

    /// The policy, for reading its own state (e.g.
    /// [`crate::fikit::Fikit::stats`] through [`Policy::as_any`]).
    pub fn policy(&self) -> &dyn Policy {
        self.policy.as_ref()
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }
    pub fn core(&self) -> &Core {
        &self.core
    }
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        self.core.preemptions()
    }
    /// See [`Core::forget_finished_preemptions`].
    pub fn forget_finished_preemptions(&mut self) {
        self.core.forget_finished_preemptions()
    }
    pub fn counters(&self) -> Counters {
        self.core.counters()
    }
}
