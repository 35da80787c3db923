//! The `reef` and `reef-dkp-mv` schedulers: reset-based preemption (the
//! `reef-nodkp` policy, REEF §4) plus dynamic kernel padding (§5, Fig. 12)
//! in real-time mode (§3.1: "before launching a real-time kernel, the DKP
//! module will select appropriate best-effort kernels and dynamically pad
//! them to the real-time kernel").
//!
//! [`PaddingScheduler`] wraps a [`Scheduler`] running the preemption policy
//! and stays sans-IO: events in, [`DkpAction`]s out.
//! - Real-time launches pass through a DKP transmitter that keeps at most
//!   `window` real-time kernels on the device, so the best-effort blocks are
//!   selected when the kernel is transmitted (Fig. 12 line 10), from the
//!   best-effort tasks that are preempted and fully drained, and from the
//!   front of every best-effort queue whose stream holds no request: such a
//!   request is started in the preempted state (§5.2, the selection "checks
//!   best-effort task queues"; REEF's `dynamic_kernel_padding` pads from the
//!   front task of each queue whether it has run or not).
//! - A padded launch completes as one kernel: the caller reports one
//!   `KernelCompleted` for the real-time tag once every part has finished.
//!   The best-effort blocks it ran are then credited to their tasks (block
//!   offsets per task); a task kernel whose blocks are all done is reported
//!   to the preemption core as started and completed, so a later restore
//!   resumes after it, and a request finished entirely by padding replies.
//! - Back in normal mode, a kernel that padding left partly done is
//!   relaunched for its remaining blocks only ([`DkpAction::Rest`]), in the
//!   version it started with, its credit converted to that version's
//!   blocks when padding continued it in another one (a finer or coarser
//!   tiling of the same output: `Selector::select`, REEF §5.3;
//!   docs/padding.md step 5).

use super::floor::Floors;
use super::hot::{recycle, IdHash};
use super::profile::KernelChar;
use super::select::{Candidate, Padding, Selector};
use super::versions;
use crate::core::{ClientSpec, Config, ConfigError, ModelInfo};
use crate::policy::Preemptive;
use crate::types::*;
use crate::{Counters, PreemptionRecord, Scheduler};
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

mod ahead;
mod credit;
mod plan;
mod reset;

pub use ahead::AheadCounts;

/// Most kernels a padded part is followed by (`reef-max`'s `chain`).
const CHAIN_MAX: u32 = 8;

/// Single-version padding (`reef`, "DKP" in §6.5) or multi-version
/// (`reef-dkp-mv`, "DKP-MV").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Single,
    MultiVersion,
}

/// The padding variant a policy name asks for (`reef`, `reef-dkp-mv`).
pub fn variant_of(policy: &str) -> Option<Variant> {
    match policy {
        "reef" => Some(Variant::Single),
        "reef-dkp-mv" => Some(Variant::MultiVersion),
        _ => None,
    }
}

/// The offline profile the selection policy uses: every kernel of every
/// registered model, with its versions (index 0 is the compiled default).
#[derive(Debug, Clone)]
pub struct DkpTable {
    pub selector: Selector,
    /// `kernels[model][kernel]` = versions.
    pub kernels: Vec<Vec<Vec<KernelChar>>>,
    /// Each kernel's rule-1 floor ([`super::floor`]), from `kernels`.
    floors: Floors,
}

impl DkpTable {
    /// Builds the table from each model's default kernels. With
    /// [`Variant::MultiVersion`] the versions of §5.3 are derived
    /// ([`versions::versions`], `t0` the fixed per-block cost) and pruned.
    pub fn new(
        selector: Selector,
        models: Vec<Vec<KernelChar>>,
        variant: Variant,
        t0: u64,
    ) -> Self {
        let limits = *selector.limits();
        let kernels: Vec<Vec<Vec<KernelChar>>> = models
            .into_iter()
            .map(|ks| {
                ks.into_iter()
                    .map(|k| match variant {
                        Variant::Single => vec![k],
                        Variant::MultiVersion => versions::versions(&limits, &k, t0),
                    })
                    .collect()
            })
            .collect();
        let floors = Floors::new(&kernels);
        Self {
            selector,
            kernels,
            floors,
        }
    }

    /// Versions of kernel `k` of model `m`.
    pub fn versions(&self, m: ModelId, k: u32) -> &[KernelChar] {
        &self.kernels[m.0 as usize][k as usize]
    }
}

/// Best-effort blocks of one task inside a padded launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BePart {
    /// The task's own stream (its blocks run inside the real-time launch).
    pub stream: StreamId,
    pub client: ClientId,
    pub model: ModelId,
    pub tag: KernelTag,
    pub version: u16,
    pub blocks: Range<u32>,
    /// Compute units given to these blocks.
    pub cus: Range<u32>,
    pub per_cu: u32,
    /// More compute units, beside `cus` (a chained part, [`super::chain`]).
    pub extra: Range<u32>,
    /// A chained part: the index in [`PaddedLaunch::parts`] of the part it
    /// runs after, behind a grid barrier ([`super::chain`]).
    pub after: Option<usize>,
}

/// One padded launch on the real-time stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaddedLaunch {
    pub stream: StreamId,
    pub tag: KernelTag,
    pub model: ModelId,
    /// The real-time kernel runs on CUs `0..rt_cus`.
    pub rt_cus: u32,
    pub proxy_level: u8,
    /// Registers per thread the proxy kernel gives every part.
    pub regs_per_thread: u32,
    /// Dynamic shared memory per block.
    pub lds: u32,
    pub parts: Vec<BePart>,
}

/// What the caller performs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DkpAction {
    /// An action of the preemption core, unchanged.
    Core(Action),
    /// A real-time kernel padded with best-effort blocks. Report
    /// `KernelStarted`/`KernelCompleted` for `tag` on `stream` as for a
    /// launch; completed means every part has completed.
    Padded(PaddedLaunch),
    /// Launch only `blocks` of version `version` of the kernel (the rest of
    /// a kernel partly run by padding); events as for a `Launch`.
    Rest {
        stream: StreamId,
        tag: KernelTag,
        version: u16,
        blocks: Range<u32>,
    },
    /// An Aker fused kernel (`aker`, `tacker`; [`crate::aker::AkerScheduler`]):
    /// an LC kernel and a block range of a BE kernel in one launch on the
    /// same compute units. Report `KernelStarted`/`KernelCompleted` for
    /// the LC tag as for a launch; completed means both parts completed.
    Fused(crate::aker::FusedLaunch),
}

/// Counters of the padding module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DkpCounters {
    pub rt_launches: u64,
    pub padded_launches: u64,
    pub be_blocks_padded: u64,
    /// Best-effort kernels completed entirely inside padded launches.
    pub be_kernels_completed: u64,
    pub rest_launches: u64,
    /// Queued best-effort requests started by padding in real-time mode.
    pub be_requests_started: u64,
    /// Real-time requests whose first kernel the transmitter held until a
    /// preempted best-effort task's reset was heard (`reset`: REEF §3.1
    /// pads after its synchronous reset).
    pub reset_waits: u64,
    /// Real-time kernels `reef-max`'s `guard` launched unpadded
    /// ([`super::guard`]): too few free CUs for its level, or a probe.
    pub guard_held: u64,
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    kernel: u32,
    locked: Option<u16>,
    next_block: u32,
}

#[derive(Debug, Clone, Copy)]
struct Credit {
    kernel: u32,
    /// The version of the last credited part: a continuation in a finer
    /// version converts `done` to its blocks (`credit`).
    version: u16,
    /// The version the kernel started with (normal-mode rests use it).
    first: u16,
    done: u32,
}

#[derive(Debug, Clone, Default)]
struct BeState {
    /// Mirror of the core's request on this stream and its completed prefix.
    req: Option<(RequestId, ClientId)>,
    done_upto: u32,
    /// Blocks assigned to padded launches (valid while the stream stays
    /// preempted).
    plan: Option<Plan>,
    /// Blocks of `kernel` completed inside padded launches (a prefix).
    credit: Option<Credit>,
    /// A kernel of the request that started on the stream itself and has
    /// not finished: while it may still run (until its kill lands), the
    /// task is not padded, unless it is the task's next kernel and a kill
    /// of the stream has been issued on a device whose kill lands before
    /// later launches (see `select_for`).
    running: Option<u32>,
    /// A kill of the stream was issued after its last launch.
    kill_issued: bool,
    /// Since the stream's last launch: no kernel of its launch sequence
    /// from this index on writes anything (a launch of this kernel was
    /// heard evicted, or of the one before it killed: the stream runs in
    /// order, and every later launch reaches its blocks' flag check after
    /// the flag landed, REEF §4.2–4.3). See `reset`.
    silent_from: Option<u32>,
    /// One past the last kernel launched on the stream itself (its launch
    /// sequence runs in order up to there).
    launched_end: u32,
    /// The rest of a kernel partly done by padding launched on the task's
    /// own stream: (kernel, first block), until it finishes.
    rest: Option<(u32, u32)>,
}

impl BeState {
    /// A launch of `kernel` on the task's own stream has finished.
    fn finished(&mut self, kernel: u32) {
        if self.running == Some(kernel) {
            self.running = None;
        }
        if self.rest.is_some_and(|r| r.0 == kernel) {
            self.rest = None;
        }
    }

    /// No launch of the stream from `kernel` on writes anything (see
    /// `silent_from`).
    fn silenced(&mut self, kernel: u32) {
        self.silent_from = Some(self.silent_from.map_or(kernel, |w| w.min(kernel)));
    }
}

/// How a real-time launch left the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RtEnd {
    Completed,
    Evicted,
    Killed,
}

/// A best-effort task eligible for a selection: (stream, client, model,
/// kernel, locked version, next block).
type Task = (StreamId, ClientId, ModelId, u32, Option<u16>, u32);

struct InFlight {
    tag: KernelTag,
    parts: Vec<BePart>,
    /// Launched unpadded although best-effort tasks were offered: the
    /// selection's rules admitted none of them (accounting only).
    refused: bool,
}

/// Preemption plus dynamic kernel padding.
pub struct PaddingScheduler {
    inner: Scheduler,
    table: Arc<DkpTable>,
    clients: Vec<ClientSpec>,
    models: Vec<u32>,
    rt: StreamId,
    window: usize,
    req_client: HashMap<RequestId, ClientId, IdHash>,
    rt_pending: VecDeque<KernelTag>,
    inflight: VecDeque<InFlight>,
    be: Vec<BeState>,
    out: VecDeque<DkpAction>,
    rr: usize,
    padding: Padding,
    scratch: Vec<Action>,
    /// Buffers the selection reuses ([`super::hot`]): the eligible tasks,
    /// their candidates, and emptied part lists of finished launches.
    tasks: Vec<Task>,
    cands: Vec<Candidate<'static>>,
    part_pool: Vec<Vec<BePart>>,
    counters: DkpCounters,
    /// The last selection had candidates and admitted none.
    last_refused: bool,
    /// `reef-max`'s fill after the last kernel ([`super::max`]): the last
    /// kernel of a real-time request is launched unpadded.
    tail_fill: bool,
    /// The real-time kernel the transmitter holds for a best-effort task's
    /// reset (`reset`), counted once.
    held: Option<KernelTag>,
    /// `reef-max`'s `guard` ([`super::guard`]), when on.
    guard: Option<super::guard::Guard>,
    /// The selection made ahead of its launch ([`ahead`]).
    ahead: ahead::Ahead,
}

impl PaddingScheduler {
    /// `window`: real-time kernels kept on the device at once (the DKP
    /// transmitter's device-queue cap; `Config::dq_capacity` is the natural
    /// choice). The policy name is `reef` or `reef-dkp-mv` after `variant`.
    pub fn new(
        variant: Variant,
        table: Arc<DkpTable>,
        cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
        window: usize,
    ) -> Result<Self, ConfigError> {
        let name = match variant {
            Variant::Single => "reef",
            Variant::MultiVersion => "reef-dkp-mv",
        };
        Self::with_policy(
            Preemptive::reef_named(name),
            false,
            table,
            cfg,
            models,
            clients,
            window,
        )
    }

    /// `reef-max` with padding ([`super::max`]): `max.pad` must be on; the
    /// table is built for `max.mv` (versions) and `max.waves` (its
    /// selector, [`Selector::with_waves`]) by the caller.
    pub fn reef_max(
        max: super::MaxConfig,
        table: Arc<DkpTable>,
        cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
        window: usize,
    ) -> Result<Self, ConfigError> {
        let alone: Vec<Option<u64>> = models.iter().map(|m| m.alone_ns).collect();
        let mut s = Self::with_policy(
            Preemptive::reef_max(max.static_name(), max.preempt, max.tail),
            max.tail,
            table,
            cfg,
            models,
            clients,
            window,
        )?;
        if max.guard {
            s.guard = Some(super::guard::Guard::new(alone));
        }
        Ok(s)
    }

    fn with_policy(
        policy: Preemptive,
        tail_fill: bool,
        table: Arc<DkpTable>,
        cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
        window: usize,
    ) -> Result<Self, ConfigError> {
        let kernels: Vec<u32> = models.iter().map(|m| m.kernels).collect();
        for (i, &n) in kernels.iter().enumerate() {
            if table.kernels.get(i).map(|v| v.len()) != Some(n as usize) {
                return Err(ConfigError::EmptyModel(format!(
                    "{} (no padding profile for its {n} kernels)",
                    models[i].name
                )));
            }
        }
        let inner = Scheduler::new(Box::new(policy), cfg, models, clients.clone())?;
        let streams = inner.core().stream_count();
        let mut s = Self {
            inner,
            table,
            clients,
            models: kernels,
            rt: StreamId(0),
            window: window.max(1),
            req_client: HashMap::default(),
            rt_pending: VecDeque::new(),
            inflight: VecDeque::new(),
            be: vec![BeState::default(); streams],
            out: VecDeque::new(),
            rr: 0,
            padding: Padding::default(),
            scratch: Vec::new(),
            tasks: Vec::new(),
            cands: Vec::new(),
            part_pool: Vec::new(),
            counters: DkpCounters::default(),
            last_refused: false,
            tail_fill,
            held: None,
            guard: None,
            ahead: ahead::Ahead::new(),
        };
        s.drain_inner(0);
        Ok(s)
    }

    pub fn policy_name(&self) -> &'static str {
        self.inner.policy_name()
    }
    pub fn inner(&self) -> &Scheduler {
        &self.inner
    }
    pub fn counters(&self) -> Counters {
        self.inner.counters()
    }
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        self.inner.preemptions()
    }
    /// See [`crate::Core::forget_finished_preemptions`].
    pub fn forget_finished_preemptions(&mut self) {
        self.inner.forget_finished_preemptions()
    }
    /// Whether real-time kernel `tag`, now on the device, was launched
    /// unpadded although best-effort tasks were offered to the selection
    /// (its rules, §5.2, admitted none): for accounting where best-effort
    /// time goes (`reef-bench lost`). Changes nothing.
    pub fn refused_by_selection(&self, tag: KernelTag) -> bool {
        self.inflight.iter().any(|f| f.tag == tag && f.refused)
    }

    pub fn dkp_counters(&self) -> DkpCounters {
        self.counters
    }
    pub fn table(&self) -> &DkpTable {
        &self.table
    }

    /// Next action to perform, in order.
    pub fn poll_action(&mut self) -> Option<DkpAction> {
        if self.out.is_empty() {
            self.pump_one();
        }
        self.out.pop_front()
    }

    /// Feeds one event observed at `now`.
    pub fn handle(&mut self, now: Time, ev: Event) {
        // Selections the caller's polls have not made yet, from the state
        // they were due in.
        self.pump_rt();
        match &ev {
            Event::RequestArrived { req, client, .. } => {
                self.req_client.insert(*req, *client);
                if let (Some(g), Some(c)) = (&mut self.guard, self.clients.get(client.0 as usize)) {
                    if c.class == Class::RealTime {
                        g.arrived(now, *req, c.model.0 as usize);
                    }
                }
            }
            Event::KernelCompleted { stream, tag } if *stream == self.rt => {
                self.rt_finished(now, *tag, RtEnd::Completed);
            }
            Event::KernelEvicted { stream, tag } if *stream == self.rt => {
                self.rt_finished(now, *tag, RtEnd::Evicted);
            }
            Event::KernelKilled { stream, tag } if *stream == self.rt => {
                self.rt_finished(now, *tag, RtEnd::Killed);
            }
            Event::KernelStarted { stream, tag } if *stream != self.rt => {
                if let Some(b) = self.be.get_mut(stream.0 as usize) {
                    if b.req.map(|r| r.0) == Some(tag.req) {
                        b.running = Some(tag.kernel);
                        // As in the core (`on_started`): a kernel that
                        // passed its check on the task's own in-order
                        // stream confirms every kernel before it, also
                        // one whose completion arrived under the flag.
                        b.done_upto = b.done_upto.max(tag.kernel);
                        if b.credit.is_some_and(|c| c.kernel < b.done_upto) {
                            b.credit = None;
                        }
                        if b.plan.is_some_and(|p| p.kernel < b.done_upto) {
                            b.plan = None;
                        }
                    }
                }
            }
            Event::KernelCompleted { stream, tag } => {
                // A completion under the flag of the kernel the execution
                // index names may be of a partly run launch (its later
                // blocks exited at their flag check, REEF §4.3): like the
                // core, padding does not count it. The credited prefix
                // (blocks completed by padded launches) stays valid; the
                // rest runs again from it.
                // The plan stays: the blocks it gave padded launches still
                // in flight are theirs, and planning again from the credit
                // would give them out twice (credited out of order, they
                // would be lost, and the kernel's blocks run again after a
                // later kernel overwrote what it reads).
                let unsure = self.inner.core().completion_unconfirmed(*stream, *tag);
                if let Some(b) = self.be.get_mut(stream.0 as usize) {
                    if b.req.map(|r| r.0) == Some(tag.req) && unsure {
                        b.finished(tag.kernel);
                    } else if b.req.map(|r| r.0) == Some(tag.req) {
                        b.finished(tag.kernel);
                        b.done_upto = b.done_upto.max(tag.kernel + 1);
                        if b.credit.is_some_and(|c| c.kernel < b.done_upto) {
                            b.credit = None;
                        }
                        if b.plan.is_some_and(|p| p.kernel < b.done_upto) {
                            b.plan = None;
                        }
                    }
                }
            }
            Event::KernelEvicted { stream, tag } if *stream != self.rt => {
                if let Some(b) = self.be.get_mut(stream.0 as usize) {
                    if b.req.map(|r| r.0) == Some(tag.req) {
                        b.finished(tag.kernel);
                        b.silenced(tag.kernel);
                    }
                }
            }
            Event::KernelKilled { stream, tag } => {
                // Killed blocks corrupt what they write. A killed launch of
                // the whole kernel leaves no block of it valid: the blocks
                // padding completed earlier must run again, and blocks
                // planned for padded launches after the credit are planned
                // again from it. A killed rest (blocks from the credit on)
                // writes only its own blocks' part of the outputs, so the
                // credited prefix stays valid (REEF §5 spreads a kernel's
                // blocks over launches because blocks are independent; §4
                // re-executes only what the kill interrupted).
                if let Some(b) = self.be.get_mut(stream.0 as usize) {
                    if b.req.map(|r| r.0) == Some(tag.req) {
                        let rest_of_credit = b.rest.is_some_and(|r| {
                            r.0 == tag.kernel
                                && b.credit.is_some_and(|c| c.kernel == r.0 && c.done == r.1)
                        });
                        b.finished(tag.kernel);
                        b.silenced(tag.kernel + 1);
                        if !rest_of_credit && b.credit.is_some_and(|c| c.kernel == tag.kernel) {
                            b.credit = None;
                            b.plan = None;
                        }
                    }
                }
            }
            _ => {}
        }
        self.inner.handle(now, ev);
        self.drain_inner(now);
        self.pump_one();
    }

    /// The DKP transmitter: selects padding for each real-time kernel as it
    /// enters the device queue.
    fn pump_rt(&mut self) {
        while self.pump_one() {}
    }

    /// Selects padding for the next real-time kernel that may enter the
    /// device queue, if any; false when none may. [`Self::poll_action`]
    /// calls it when its queue is empty, so that a real-time request's first
    /// kernel is issued before the selections for the kernels behind it
    /// (they are made from the same state: [`Self::handle`] first selects
    /// for any still waiting).
    fn pump_one(&mut self) -> bool {
        {
            if self.inflight.len() >= self.window {
                return false;
            }
            let Some(&tag) = self.rt_pending.front() else {
                return false;
            };
            if self.waits_for_reset(tag) {
                if self.held != Some(tag) {
                    self.held = Some(tag);
                    self.counters.reset_waits += 1;
                }
                return false;
            }
            self.rt_pending.pop_front();
            self.counters.rt_launches += 1;
            let Some(&client) = self.req_client.get(&tag.req) else {
                self.inflight.push_back(InFlight {
                    tag,
                    parts: Vec::new(),
                    refused: false,
                });
                self.out.push_back(DkpAction::Core(Action::Launch {
                    stream: self.rt,
                    tag,
                }));
                return true;
            };
            let model = self.clients[client.0 as usize].model;
            // With the fill after the last kernel, the last one goes
            // unpadded: its best-effort streams resume beside it.
            let last = tag.kernel + 1 == self.models[model.0 as usize];
            let guarded = self.guard.as_ref().is_some_and(|g| {
                let n = self.table.selector.limits().compute_units;
                let rt_cus = self.table.versions(model, tag.kernel)[0].rt_cus.min(n);
                !g.admits(tag.req, n - rt_cus, n)
            });
            let parts = if self.tail_fill && last {
                self.last_refused = false;
                None
            } else if guarded {
                self.last_refused = false;
                self.counters.guard_held += 1;
                None
            } else {
                self.select_for(model, tag)
            };
            match parts {
                Some(l) => {
                    if let Some(g) = &mut self.guard {
                        g.padded(tag.req);
                    }
                    self.counters.padded_launches += 1;
                    self.counters.be_blocks_padded +=
                        l.parts.iter().map(|p| p.blocks.len() as u64).sum::<u64>();
                    let mut parts = self.part_pool.pop().unwrap_or_default();
                    parts.extend_from_slice(&l.parts);
                    self.inflight.push_back(InFlight {
                        tag,
                        parts,
                        refused: false,
                    });
                    self.out.push_back(DkpAction::Padded(l));
                }
                None => {
                    self.inflight.push_back(InFlight {
                        tag,
                        parts: Vec::new(),
                        refused: self.last_refused,
                    });
                    self.out.push_back(DkpAction::Core(Action::Launch {
                        stream: self.rt,
                        tag,
                    }));
                }
            }
            true
        }
    }

    /// Starts, in the preempted state, the next queued request of every
    /// best-effort client whose stream holds none, so that padding can run
    /// its kernels in real-time mode (REEF §5.2 "checks best-effort task
    /// queues"; the best-effort task at the front of each queue is a
    /// candidate whether it has started or not, as in REEF's
    /// `dynamic_kernel_padding`). Without it a best-effort client whose
    /// request padding finished would wait for the next normal-mode instant
    /// to start its next one.
    fn start_queued(&mut self) {
        for (ci, c) in self.clients.iter().enumerate() {
            if c.class != Class::BestEffort {
                continue;
            }
            let client = ClientId(ci as u32);
            let core = self.inner.core_mut();
            if core.be_waiting(client) == 0 {
                continue;
            }
            let s = core.stream_of(client);
            if let Some(req) = core.start_preempted(client) {
                self.be[s.0 as usize] = BeState {
                    req: Some((req, client)),
                    ..BeState::default()
                };
                self.counters.be_requests_started += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
