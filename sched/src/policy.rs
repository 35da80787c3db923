//! Scheduling policies behind one trait, selectable by name.
//!
//! - `rt-only`: the real-time clients alone (the RT-Only reference of §6.2).
//! - `seq`: sequential execution, real-time first but waiting for the
//!   best-effort request already launched (Clockwork; SEQ in §6.2, Fig. 4a).
//! - `streams`: GPUStreams as REEF §6.1 defines it: one process (one
//!   context), every client on its own stream, no stream priorities, all
//!   running concurrently (§6.2, Fig. 4c).
//! - `streams-prio`: the same with the real-time streams at high stream
//!   priority (Triton with priority, the setting of §6.6 Fig. 28): the
//!   device prefers their pending blocks; running blocks are not
//!   preempted.
//! - `share`: one process per client, each its own context (FIKIT's
//!   "default GPU sharing mode", fikit.txt §2 and §4.5): how the contexts
//!   share the device is the device's (kernels of two contexts never run
//!   together on NVIDIA GPUs, which time-slice between them;
//!   docs/simulator.md "Contexts").
//! - `wait`: wait-based preemption with lazy eviction and no device-queue cap
//!   (the extended baseline of §6.4, Fig. 4b).
//! - `reef-nodkp` (and `reef` by name alone): reset-based preemption (§4,
//!   Figs. 6–8) with normal and real-time modes (§3.1); in real-time mode
//!   best-effort streams stay preempted until the real-time queue is empty.
//! - `reef` and `reef-dkp-mv` with dynamic kernel padding (§5) need the
//!   kernels' offline profiles and run through
//!   [`crate::dkp::PaddingScheduler`], which wraps this preemption policy.
//!
//! - `reef-max` (issue 28, [`crate::dkp::max`]): reset-based preemption,
//!   padding with multi-version kernels and waves, and FIKIT's fill after
//!   the last real-time kernel, each switchable (`reef-max:-tail`, `reef-max:+pad+mv`, ...);
//!   by name alone the preemption half with the fill.
//!
//! Later policies (EDF ordering is [`crate::RtOrder::Edf`]; DKP, FIKIT, CASE,
//! Aker) implement the same trait and register in [`policy_by_name`].

use crate::core::{ClientSpec, Config, Core, Layout};
use crate::types::*;

/// A scheduling policy: the decision half of the scheduler.
pub trait Policy: Send {
    /// The name it is selected by.
    fn name(&self) -> &'static str;
    /// How clients map to streams, with priorities and device-queue caps.
    fn layout(&self, clients: &[ClientSpec], cfg: &Config) -> Layout;
    /// Whether requests of this class are served at all.
    fn admits(&self, class: Class) -> bool {
        let _ = class;
        true
    }
    /// Called after every event: start, preempt or resume work.
    fn schedule(&mut self, core: &mut Core);
    /// Sees each event after the core has applied it and before
    /// [`Self::schedule`] (FIKIT measures kernel and gap times and opens
    /// or ends gaps from them). Nothing by default.
    fn observe(&mut self, core: &Core, ev: &Event) {
        let _ = (core, ev);
    }
    /// The policy as `Any`, for callers that read a policy's own figures.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// Names accepted by [`policy_by_name`], in the order reports list them.
pub const POLICY_NAMES: &[&str] = &[
    "rt-only",
    "seq",
    "streams",
    "streams-prio",
    "share",
    "wait",
    "reef-nodkp",
    "reef",
    "reef-dkp-mv",
    "fikit",
    "reef-max",
];

/// FIKIT's ablations, also accepted by [`policy_by_name`] (not in the
/// default policy lists): without gap filling, and without early stop.
pub const FIKIT_ABLATIONS: &[&str] = &["fikit-nofill", "fikit-noearly"];

/// An unknown policy name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown policy {name:?}: choose from {}, {}, {}", POLICY_NAMES.join(", "), FIKIT_ABLATIONS.join(", "), crate::aker::AKER_POLICIES.join(", "))]
pub struct UnknownPolicy {
    pub name: String,
}

/// Builds a policy from its name.
pub fn policy_by_name(name: &str) -> Result<Box<dyn Policy>, UnknownPolicy> {
    Ok(match name {
        "rt-only" => Box::new(RtOnly),
        "seq" => Box::new(Seq::default()),
        "streams" => Box::new(Streams::gpu_streams()),
        "streams-prio" => Box::new(Streams::with_priority()),
        "share" => Box::new(Streams::share()),
        "wait" => Box::new(Preemptive::wait()),
        "reef" => Box::new(Preemptive::reef()),
        // Preemption only; `reef` and `reef-dkp-mv` add dynamic kernel
        // padding when run through `dkp::PaddingScheduler` (which needs the
        // kernels' offline profiles); by name alone they preempt only.
        "reef-nodkp" => Box::new(Preemptive::reef_named("reef-nodkp")),
        "reef-dkp-mv" => Box::new(Preemptive::reef_named("reef-dkp-mv")),
        // FIKIT without model knowledge: anonymous per-position kernel IDs
        // and no profiles, so every task measures first. reef-exec builds
        // it with the models' kernel IDs and measured profiles.
        "fikit" | "fikit-nofill" | "fikit-noearly" => Box::new(fikit_named(
            name,
            crate::fikit::FikitConfig::default(),
            Vec::new(),
            Vec::new(),
        )?),
        // reef-max and its ablations (`crate::dkp::max`): by name alone the
        // preemption half with the fill after the last kernel; padding,
        // multi-version and waves through `dkp::PaddingScheduler`.
        n if n.starts_with("reef-max") => {
            let Some(m) = crate::dkp::MaxConfig::parse(n) else {
                return Err(UnknownPolicy {
                    name: name.to_string(),
                });
            };
            Box::new(Preemptive::reef_max(m.static_name(), m.preempt, m.tail))
        }
        _ => {
            return Err(UnknownPolicy {
                name: name.to_string(),
            })
        }
    })
}

/// FIKIT or one of its ablations by name, with `base` as its parameters
/// (the ablation switches `fill` or `early_stop` off).
pub fn fikit_named(
    name: &str,
    mut base: crate::fikit::FikitConfig,
    kernel_ids: Vec<Vec<crate::fikit::profile::KernelId>>,
    profiles: Vec<crate::fikit::profile::Profile>,
) -> Result<crate::fikit::Fikit, UnknownPolicy> {
    let name: &'static str = match name {
        "fikit" => "fikit",
        "fikit-nofill" => {
            base.fill = false;
            "fikit-nofill"
        }
        "fikit-noearly" => {
            base.early_stop = false;
            "fikit-noearly"
        }
        _ => {
            return Err(UnknownPolicy {
                name: name.to_string(),
            })
        }
    };
    Ok(crate::fikit::Fikit::new(base, kernel_ids, profiles).named(name))
}

/// Serves real-time requests one at a time on the shared real-time stream.
fn serve_rt(core: &mut Core) {
    let rt = StreamId(0);
    if core.is_idle(rt) {
        if let Some(p) = core.pop_rt() {
            core.start(rt, p);
        }
    }
}

/// RT-Only: best-effort requests are refused.
pub struct RtOnly;

impl Policy for RtOnly {
    fn name(&self) -> &'static str {
        "rt-only"
    }
    fn layout(&self, clients: &[ClientSpec], _: &Config) -> Layout {
        Layout::shared_rt(clients, None)
    }
    fn admits(&self, class: Class) -> bool {
        class == Class::RealTime
    }
    fn schedule(&mut self, core: &mut Core) {
        serve_rt(core);
    }
}

/// SEQ: one request on the GPU at a time; real-time requests go first among
/// the waiting ones, best-effort clients are served round robin.
#[derive(Default)]
pub struct Seq {
    next_be: usize,
}

impl Policy for Seq {
    fn name(&self) -> &'static str {
        "seq"
    }
    fn layout(&self, clients: &[ClientSpec], _: &Config) -> Layout {
        Layout::shared_rt(clients, None)
    }
    fn schedule(&mut self, core: &mut Core) {
        if core.any_request_active() {
            return;
        }
        if let Some(p) = core.pop_rt() {
            let s = core.stream_of(p.client);
            core.start(s, p);
            return;
        }
        let n = core.clients().len();
        for k in 0..n {
            let c = (self.next_be + k) % n;
            if core.clients()[c].class != Class::BestEffort {
                continue;
            }
            if let Some(p) = core.pop_be(ClientId(c as u32)) {
                self.next_be = c + 1;
                let s = core.stream_of(p.client);
                core.start(s, p);
                return;
            }
        }
    }
}

/// Every client on its own stream, all running concurrently; the three
/// baselines differ only in how the streams are laid out (module docs).
pub struct Streams {
    name: &'static str,
    kind: StreamsKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamsKind {
    /// One context, no stream priorities (REEF §6.1 GPUStreams).
    Plain,
    /// One context, real-time streams at high priority (REEF §6.6).
    Priority,
    /// A context per client (FIKIT's default sharing).
    Processes,
}

impl Streams {
    /// `streams`: REEF's GPUStreams (§6.1).
    pub fn gpu_streams() -> Self {
        Self {
            name: "streams",
            kind: StreamsKind::Plain,
        }
    }
    /// `streams-prio`: Triton with stream priorities (REEF §6.6, Fig. 28).
    pub fn with_priority() -> Self {
        Self {
            name: "streams-prio",
            kind: StreamsKind::Priority,
        }
    }
    /// `share`: one process per client (FIKIT §2, §4.5).
    pub fn share() -> Self {
        Self {
            name: "share",
            kind: StreamsKind::Processes,
        }
    }
}

impl Policy for Streams {
    fn name(&self) -> &'static str {
        self.name
    }
    fn layout(&self, clients: &[ClientSpec], _: &Config) -> Layout {
        match self.kind {
            StreamsKind::Plain => Layout::per_client(clients, StreamPriority::Normal),
            StreamsKind::Priority => Layout::per_client(clients, StreamPriority::High),
            StreamsKind::Processes => Layout::per_process(clients),
        }
    }
    fn schedule(&mut self, core: &mut Core) {
        loop {
            let idle: Vec<bool> = (0..core.stream_count())
                .map(|s| core.is_idle(StreamId(s as u32)))
                .collect();
            let client_stream: Vec<StreamId> = (0..core.clients().len())
                .map(|c| core.stream_of(ClientId(c as u32)))
                .collect();
            let Some(p) =
                core.pop_rt_where(|p| idle[client_stream[p.client.0 as usize].0 as usize])
            else {
                break;
            };
            let s = core.stream_of(p.client);
            core.start(s, p);
        }
        start_idle_be(core);
    }
}

fn start_idle_be(core: &mut Core) {
    for c in 0..core.clients().len() {
        let client = ClientId(c as u32);
        if core.clients()[c].class != Class::BestEffort {
            continue;
        }
        let s = core.stream_of(client);
        if core.is_idle(s) {
            if let Some(p) = core.pop_be(client) {
                core.start(s, p);
            }
        }
    }
}

/// Normal or real-time mode (§3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    RealTime,
}

/// Preemptive scheduling with normal and real-time modes: `reef`
/// (reset-based, capped device queues) and `wait` (wait-based with lazy
/// eviction, uncapped device queues).
pub struct Preemptive {
    name: &'static str,
    level: PreemptLevel,
    capped: bool,
    /// Launch real-time work only once the preemption has drained.
    rt_waits: bool,
    mode: Mode,
    /// `reef-max`'s fill after the last real-time kernel (fikit.txt §3.2,
    /// Algorithm 1: low-priority kernels fill the idle time after each
    /// high-priority kernel, the last one's included): normal mode resumes as soon
    /// as the real-time request's last kernel has started and no other
    /// real-time request waits, instead of when it completes.
    tail_fill: bool,
    /// The real-time request whose last kernel has started.
    last_started: Option<RequestId>,
}

impl Preemptive {
    /// Reset-based preemption (§4): host-queue reset, lazy eviction, kill.
    pub fn reef() -> Self {
        Self {
            name: "reef",
            level: PreemptLevel::Kill,
            capped: true,
            // Fig. 8: preempt() returns once the CUs are reset and the real-
            // time task is launched at once; lazily evicted kernels drain
            // from the best-effort device queues meanwhile.
            rt_waits: false,
            mode: Mode::Normal,
            tail_fill: false,
            last_started: None,
        }
    }
    /// `reef-max`'s preemption half (`crate::dkp::max`): reset-based
    /// (`reset`) or, switched off, wait-based with lazy eviction (§6.4,
    /// capped device queues as REEF's runtime keeps them), with the fill
    /// after the last real-time kernel when `tail_fill`.
    pub fn reef_max(name: &'static str, reset: bool, tail_fill: bool) -> Self {
        Self {
            name,
            level: if reset {
                PreemptLevel::Kill
            } else {
                PreemptLevel::LazyEviction
            },
            rt_waits: !reset,
            tail_fill,
            ..Self::reef()
        }
    }
    /// [`Self::reef`] under another name (`reef-nodkp`, and the preemption
    /// half of the padding schedulers in [`crate::dkp`]).
    pub fn reef_named(name: &'static str) -> Self {
        Self {
            name,
            ..Self::reef()
        }
    }
    /// Wait-based preemption extended with lazy eviction and no launch
    /// limit (§6.4): running blocks are waited for.
    pub fn wait() -> Self {
        Self {
            name: "wait",
            level: PreemptLevel::LazyEviction,
            capped: false,
            // Fig. 4b: the real-time task waits until the running blocks
            // have completed (and the queued kernels are evicted).
            rt_waits: true,
            mode: Mode::Normal,
            tail_fill: false,
            last_started: None,
        }
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

impl Policy for Preemptive {
    fn name(&self) -> &'static str {
        self.name
    }
    fn layout(&self, clients: &[ClientSpec], cfg: &Config) -> Layout {
        let capped = self.capped || cfg.runtime_caps_every_stream;
        Layout::shared_rt(clients, capped.then_some(cfg.dq_capacity))
    }
    fn observe(&mut self, core: &Core, ev: &Event) {
        if !self.tail_fill {
            return;
        }
        if let Event::KernelStarted { stream, tag } = ev {
            let last = core.active_request(*stream).and_then(|(req, client)| {
                let m = core.clients()[client.0 as usize].model;
                let n = core.models()[m.0 as usize].kernels;
                (req == tag.req && tag.kernel + 1 == n).then_some(req)
            });
            if *stream == StreamId(0) && last.is_some() {
                self.last_started = last;
            }
        }
    }
    fn schedule(&mut self, core: &mut Core) {
        let rt = StreamId(0);
        // Built only when the mode changes, not on every call: `schedule`
        // runs for every event (issue 28's decision cost).
        let be = |core: &Core| -> Vec<StreamId> {
            (1..core.stream_count() as u32).map(StreamId).collect()
        };
        // The fill after the last kernel: the running request no longer
        // holds the best-effort streams once its last kernel has started.
        let tail = self.tail_fill
            && core.rt_waiting() == 0
            && core
                .active_request(rt)
                .is_some_and(|(req, _)| self.last_started == Some(req));
        if core.rt_waiting() > 0 || (core.has_request(rt) && !tail) {
            if self.mode == Mode::Normal {
                self.mode = Mode::RealTime;
                core.preempt_streams(&be(core), self.level);
            }
            if !(self.rt_waits && core.preemption_in_progress()) {
                serve_rt(core);
            }
        } else if self.mode == Mode::RealTime {
            self.mode = Mode::Normal;
            for s in be(core) {
                core.resume(s);
            }
        }
        if self.mode == Mode::Normal {
            start_idle_be(core);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Class, ModelId};

    /// `wait` leaves its best-effort device queues uncapped (§6.4) unless
    /// the runtime caps every stream (REEFnv, §4.6); `reef` caps either way.
    #[test]
    fn wait_is_capped_only_where_the_runtime_caps_every_stream() {
        let clients = [
            ClientSpec {
                name: "rt".into(),
                model: ModelId(0),
                class: Class::RealTime,
            },
            ClientSpec {
                name: "be".into(),
                model: ModelId(1),
                class: Class::BestEffort,
            },
        ];
        let mut cfg = Config {
            dq_capacity: 3,
            ..Config::default()
        };
        let be_cap = |p: &Preemptive, cfg: &Config| p.layout(&clients, cfg).streams[1].1;
        assert_eq!(be_cap(&Preemptive::wait(), &cfg), None);
        assert_eq!(be_cap(&Preemptive::reef(), &cfg), Some(3));
        cfg.runtime_caps_every_stream = true;
        assert_eq!(be_cap(&Preemptive::wait(), &cfg), Some(3));
        assert_eq!(be_cap(&Preemptive::reef(), &cfg), Some(3));
    }
}
