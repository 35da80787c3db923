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

mod reset;

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
        Self::with_policy(
            Preemptive::reef_max(max.static_name(), max.preempt, max.tail),
            max.tail,
            table,
            cfg,
            models,
            clients,
            window,
        )
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

    /// A real-time launch left the device: credit its padding when it
    /// completed (before the core sees it, so a restore it triggers already
    /// knows the progress). An evicted padded launch ran no block: its
    /// tasks plan again from their credit. A killed one corrupted the
    /// outputs of the kernels it padded: their credit is dropped too, so
    /// every block runs again.
    fn rt_finished(&mut self, now: Time, tag: KernelTag, end: RtEnd) {
        let Some(pos) = self.inflight.iter().position(|f| f.tag == tag) else {
            return;
        };
        let mut f = self.inflight.remove(pos).expect("position is valid");
        for p in f.parts.drain(..) {
            if end == RtEnd::Completed {
                self.credit(now, &p);
                continue;
            }
            let b = &mut self.be[p.stream.0 as usize];
            if b.req.map(|r| r.0) != Some(p.tag.req) {
                continue;
            }
            b.plan = None;
            if end == RtEnd::Killed && b.credit.is_some_and(|c| c.kernel == p.tag.kernel) {
                b.credit = None;
            }
        }
        if f.parts.capacity() > 0 {
            self.part_pool.push(f.parts);
        }
    }

    fn credit(&mut self, now: Time, p: &BePart) {
        let total = self.table.versions(p.model, p.tag.kernel)[p.version as usize].blocks;
        let b = &mut self.be[p.stream.0 as usize];
        if b.req.map(|r| r.0) != Some(p.tag.req) || p.tag.kernel < b.done_upto {
            return;
        }
        if p.tag.kernel > b.done_upto {
            // A later kernel than the next one: the blocks before it were
            // lost (a kill dropped their credit). Its outputs cannot be
            // trusted; plan again from the task's progress.
            b.plan = None;
            return;
        }
        if let Some(c) = &mut b.credit {
            if c.kernel == p.tag.kernel && c.version != p.version {
                let bc = self.table.versions(p.model, c.kernel)[c.version as usize].blocks;
                match convert_blocks(c.done, bc, total) {
                    // Continued in a finer version, or in a coarser one at
                    // one of its block boundaries (`Selector::select`):
                    // the credited prefix converts exactly.
                    Some(done) => {
                        c.done = done;
                        c.version = p.version;
                    }
                    // Not a tiling of the credited version, or a coarser
                    // block the prefix ends inside of (the selection plans
                    // neither): credit nothing, keep the credited prefix.
                    None => {
                        b.plan = None;
                        return;
                    }
                }
            }
        }
        let c = match &mut b.credit {
            Some(c) if c.kernel == p.tag.kernel && c.version == p.version => c,
            slot => slot.insert(Credit {
                kernel: p.tag.kernel,
                version: p.version,
                first: p.version,
                done: 0,
            }),
        };
        if p.blocks.start > c.done {
            // Not adjacent to the credited prefix (cannot happen with
            // in-order launches); keep the credit conservative.
            return;
        }
        // The next prefix, or one overlapping it (blocks planned again
        // after a plan was dropped, run in order on the real-time stream):
        // blocks are independent, so the union is a prefix.
        c.done = c.done.max(p.blocks.end);
        if c.done < total {
            return;
        }
        b.credit = None;
        b.done_upto = p.tag.kernel + 1;
        self.counters.be_kernels_completed += 1;
        // Not a launch of the task's own stream: the stream may still be
        // draining its preemption, and its outstanding launches are its own.
        self.inner.completed_elsewhere(now, p.stream, p.tag);
        self.drain_inner(now);
    }

    /// Moves the core's actions out, holding real-time launches for the DKP
    /// transmitter and turning relaunches of partly padded kernels into
    /// [`DkpAction::Rest`].
    fn drain_inner(&mut self, _now: Time) {
        let mut acts = std::mem::take(&mut self.scratch);
        self.inner.drain_actions(&mut acts);
        for a in acts.drain(..) {
            match a {
                Action::Launch { stream, tag } if stream == self.rt => {
                    self.rt_pending.push_back(tag);
                }
                Action::Launch { stream, tag } => {
                    let client = self.req_client.get(&tag.req).copied();
                    let Some(b) = self.be.get_mut(stream.0 as usize) else {
                        self.out.push_back(DkpAction::Core(a));
                        continue;
                    };
                    if b.req.map(|r| r.0) != Some(tag.req) {
                        b.req = client.map(|c| (tag.req, c));
                        b.done_upto = 0;
                        b.credit = None;
                        b.running = None;
                        b.rest = None;
                    }
                    b.plan = None;
                    b.kill_issued = false;
                    b.silent_from = None;
                    b.launched_end = tag.kernel + 1;
                    // The credit stays until the relaunch completes (then
                    // the kernel is done) or is killed (then its outputs
                    // are corrupted and every block must run again); an
                    // evicted relaunch ran no block and keeps it.
                    match b.credit {
                        Some(mut c) if c.kernel == tag.kernel && c.done > 0 => {
                            let model = self.clients[client.map_or(0, |c| c.0 as usize)].model;
                            let vs = self.table.versions(model, tag.kernel);
                            if c.version != c.first {
                                // Padding continued the kernel in another
                                // version; normal mode runs the rest in the
                                // version it started with. From a finer
                                // one: from the block holding the credited
                                // prefix's end (the sub-tiles of it already
                                // done run again: same inputs, same values,
                                // REEF §4.4); from a coarser one the prefix
                                // converts exactly.
                                let (from, to) =
                                    (vs[c.version as usize].blocks, vs[c.first as usize].blocks);
                                // (Versions the selection never pairs: the
                                // whole kernel again.)
                                c.done = convert_blocks(c.done, from, to).unwrap_or(
                                    if to > 0 && from % to == 0 {
                                        c.done / (from / to)
                                    } else {
                                        0
                                    },
                                );
                                c.version = c.first;
                                b.credit = Some(c);
                            }
                            let total = vs[c.version as usize].blocks;
                            self.counters.rest_launches += 1;
                            b.rest = Some((tag.kernel, c.done));
                            self.out.push_back(DkpAction::Rest {
                                stream,
                                tag,
                                version: c.version,
                                blocks: c.done..total,
                            });
                        }
                        Some(c) if c.kernel == tag.kernel => {
                            b.credit = None;
                            self.out.push_back(DkpAction::Core(a));
                        }
                        // A redundant relaunch of an earlier kernel: the
                        // credit still applies afterwards.
                        _ => self.out.push_back(DkpAction::Core(a)),
                    }
                }
                Action::Restore {
                    stream,
                    from_kernel,
                    ..
                } => {
                    if let Some(b) = self.be.get_mut(stream.0 as usize) {
                        b.done_upto = from_kernel;
                        b.plan = None;
                        // A restore from before the credited kernel (the
                        // entry of its idempotent group, REEF §4.4: the
                        // kernel is not idempotent, e.g. it updates a
                        // buffer in place) re-runs the kernels that write
                        // what the credited blocks read or updated, so
                        // their part is undone and every block runs again.
                        if b.credit.is_some_and(|c| c.kernel > from_kernel) {
                            b.credit = None;
                            b.rest = None;
                        }
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                Action::RequestDone { req, .. } | Action::RequestRejected { req, .. } => {
                    self.req_client.remove(&req);
                    for b in &mut self.be {
                        if b.req.map(|r| r.0) == Some(req) {
                            *b = BeState::default();
                        }
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                Action::KillStream { stream } => {
                    if let Some(b) = self.be.get_mut(stream.0 as usize) {
                        b.kill_issued = true;
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                other => self.out.push_back(DkpAction::Core(other)),
            }
        }
        self.scratch = acts;
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
            let parts = if self.tail_fill && last {
                self.last_refused = false;
                None
            } else {
                self.select_for(model, tag)
            };
            match parts {
                Some(l) => {
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

    /// The plan best-effort stream `si` would pad with now (its stored plan,
    /// or one started from its credit or completed prefix, moved past a
    /// version whose blocks are all planned), with its client and model;
    /// `None` while the stream may not pad. Changes nothing: `select_for`
    /// stores the plan (also when it lies past the model's last kernel, so
    /// that blocks in flight are not planned twice).
    fn next_plan(&self, si: usize, table: &DkpTable) -> Option<(Plan, ClientId, ModelId)> {
        let s = StreamId(si as u32);
        if s == self.rt {
            return None;
        }
        let b = &self.be[si];
        let (_, client) = b.req?;
        let core = self.inner.core();
        // A stream stopped by command stays stopped (docs/protocol.md).
        if !(core.is_paused(s) && core.has_request(s)) || core.is_stopped_by_command(s) {
            return None;
        }
        // Preempted and drained; or, when the device's kill lands before
        // a later launch can start (REEF resets the CUs before launching
        // the real-time task), preempted with nothing of it running: its
        // queued kernels are lazily evicted and write nothing, so its
        // next kernel can pad this real-time kernel at once (§3.1, Fig.
        // 6: the DKP module pads the real-time task's kernels from the
        // preempted tasks). On such a device a running kernel that is
        // the task's next one (a whole launch of it, or the rest of it
        // after the blocks padding completed) does not hold the task
        // back either once the stream's kill has been issued: the kill
        // precedes this launch in the action order and ends the kernel
        // before any padded block starts (REEF §4: the CU reset kills
        // the running kernel; `preempt_reset` is synchronous before
        // `dynamic_kernel_padding`, §3.1). Padding then continues that
        // kernel from the task's credit, as a restore would re-execute
        // it: a killed rest leaves the credited blocks valid (see the
        // `KernelKilled` arm), a killed whole launch had no credit.
        // Should it complete before the kill lands instead, the padded
        // blocks recompute the same outputs from the same inputs and
        // their credit is refused (the kernel is done). Waiting for the
        // kill event left the request's first `window` RT kernels
        // unpadded whenever normal mode (an RT client's think time) had
        // started the task's next kernel: densenet-resnet152,
        // densenet-vgg and densenet-bert starved with a 50 µs gap
        // (docs/padding.md).
        //
        // Only while no later kernel of the task is on the device: the
        // scheduler hears of the device's events late (a GPU's completion
        // reaches the host after it happened; the daemon catches its
        // device up in steps), so the kernel it takes as running may
        // already have completed and its successor passed its check
        // before the flag and the kill landed. The kill then ends the
        // successor, whose blocks wrote part of its outputs, and those
        // may be the running kernel's inputs (buffers are reused: vgg's
        // kernel 70 writes what kernel 69 reads): the padded blocks of
        // the kernel would read them (`reef-bench hostile` on sim:mi50,
        // a stale answer). REEF pads only after the synchronous reset,
        // from the execution index it then reads (§3.1, §4.3): with no
        // later kernel launched on the stream there is no successor to
        // start, and the padded blocks recompute what the kernel computed
        // (counted from the launches, not the outstanding ones: a
        // completion heard under the flag does not count, so the kernel
        // may have ended with only its successors outstanding).
        // Unless the kernels after it on the device write nothing it reads
        // or writes (`ModelInfo::successors_clear`): then running its
        // blocks again after them still computes what it computed.
        // Or once the kill's outcome has been heard and no kernel after
        // the clear ones can write any more (`BeState::silent_from`, the
        // point REEF's synchronous reset establishes before it pads; see
        // `reset`).
        if self.drain_state(si) != reset::Drain::Clear {
            return None;
        }
        Some(self.plan_of(b, client, table))
    }

    /// The plan of `b` (its stored one, or one started from its credit or
    /// completed prefix), moved past a version whose blocks are all
    /// planned, with its client and model.
    fn plan_of(
        &self,
        b: &BeState,
        client: ClientId,
        table: &DkpTable,
    ) -> (Plan, ClientId, ModelId) {
        let m = self.clients[client.0 as usize].model;
        let mut plan = b.plan.unwrap_or(match b.credit {
            Some(c) if c.kernel == b.done_upto => Plan {
                kernel: c.kernel,
                locked: Some(c.version),
                next_block: c.done,
            },
            _ => Plan {
                kernel: b.done_upto,
                locked: None,
                next_block: 0,
            },
        });
        if let Some(v) = plan.locked {
            if plan.next_block >= table.versions(m, plan.kernel)[v as usize].blocks {
                plan = Plan {
                    kernel: plan.kernel + 1,
                    locked: None,
                    next_block: 0,
                };
            }
        }
        (plan, client, m)
    }

    /// Runs the selection for the first kernel of each real-time model over
    /// the best-effort tasks as if they were preempted now, and discards the
    /// result: nothing the scheduler decides changes. A daemon that simulates the
    /// device between real-time requests calls this every few tens of
    /// microseconds, so that the selection a request's first kernel needs
    /// finds its code and data in the CPU caches (reefd's control path,
    /// docs/daemon.md). The selection itself is REEF §5.2. True when a
    /// best-effort task could pad, so that a selection ran.
    pub fn rehearse(&mut self) -> bool {
        let table = Arc::clone(&self.table);
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        let core = self.inner.core();
        for (si, b) in self.be.iter().enumerate() {
            // Every best-effort task, as if preempted now: between real-time
            // requests none is, and the next request preempts them all.
            let s = StreamId(si as u32);
            let Some((_, client)) = b.req else { continue };
            if s != self.rt && core.has_request(s) {
                let (plan, _, m) = self.plan_of(b, client, &table);
                if plan.kernel < self.models[m.0 as usize] {
                    cands.push(Candidate {
                        versions: table.versions(m, plan.kernel),
                        locked: plan.locked,
                        next_block: plan.next_block,
                        following: &[],
                        rule1_floor: 0,
                    });
                }
            }
        }
        if cands.is_empty() {
            return false;
        }
        for c in self.clients.iter().filter(|c| c.class == Class::RealTime) {
            let rt_char = &table.versions(c.model, 0)[0];
            let start = self.rr % cands.len();
            table
                .selector
                .select(rt_char, &cands, start, &mut self.padding);
        }
        true
    }

    /// Runs the selection policy for real-time kernel `tag` of `model` over
    /// the preempted, drained best-effort tasks, and commits the chosen
    /// block ranges to their plans.
    fn select_for(&mut self, model: ModelId, tag: KernelTag) -> Option<PaddedLaunch> {
        self.last_refused = false;
        self.start_queued();
        // The selection's buffers are kept across calls (no allocation on
        // the decision path, [`super::hot`]).
        let mut tasks = std::mem::take(&mut self.tasks);
        tasks.clear();
        for si in 0..self.be.len() {
            let Some((plan, client, m)) = self.next_plan(si, &self.table) else {
                continue;
            };
            self.be[si].plan = Some(plan);
            if plan.kernel < self.models[m.0 as usize] {
                tasks.push((
                    StreamId(si as u32),
                    client,
                    m,
                    plan.kernel,
                    plan.locked,
                    plan.next_block,
                ));
            }
        }
        if tasks.is_empty() {
            self.tasks = tasks;
            return None;
        }
        let table = &*self.table;
        let rt_char = &table.versions(model, tag.kernel)[0];
        let chains = table.selector.chains();
        let core = self.inner.core();
        let mut cands: Vec<Candidate<'_>> = recycle(std::mem::take(&mut self.cands));
        cands.extend(tasks.iter().map(|&(_, _, m, k, locked, next_block)| {
            let ks = &table.kernels[m.0 as usize];
            let l = if chains {
                let info = &core.models()[m.0 as usize];
                super::chain::chain_len(k, ks.len() as u32, CHAIN_MAX, |i| info.successors_clear(i))
            } else {
                0
            };
            Candidate {
                versions: table.versions(m, k),
                locked,
                next_block,
                following: &ks[k as usize + 1..(k + 1 + l) as usize],
                rule1_floor: table.floors.get(m.0 as usize, k as usize),
            }
        }));
        let start = self.rr % cands.len();
        self.rr = self.rr.wrapping_add(1);
        let padded = table
            .selector
            .select(rt_char, &cands, start, &mut self.padding);
        self.cands = recycle(cands);
        if !padded {
            self.tasks = tasks;
            self.last_refused = true;
            return None;
        }
        let mut parts = Vec::with_capacity(self.padding.parts.len());
        for p in &self.padding.parts {
            let (s, client, m, k, _, _) = tasks[p.task];
            let k = k + p.ahead;
            let b = &mut self.be[s.0 as usize];
            let req = b.req.expect("eligible tasks have a request").0;
            let plan = b.plan.as_mut().expect("planned above");
            // A chained part (`chain`) comes after the part it follows:
            // the plan moves on to its kernel.
            plan.kernel = k;
            plan.locked = Some(p.version);
            plan.next_block = p.blocks.end;
            parts.push(BePart {
                stream: s,
                client,
                model: m,
                tag: KernelTag { req, kernel: k },
                version: p.version,
                blocks: p.blocks.clone(),
                cus: p.cus.clone(),
                per_cu: p.per_cu,
                extra: p.extra.clone(),
                after: p.after,
            });
        }
        self.tasks = tasks;
        Some(PaddedLaunch {
            stream: self.rt,
            tag,
            model,
            rt_cus: self.padding.rt_cus,
            proxy_level: self.padding.proxy_level,
            regs_per_thread: self.padding.regs_per_thread,
            lds: self.padding.lds,
            parts,
        })
    }
}

/// `done` blocks of a version of `from` blocks, in blocks of a version of
/// `to` blocks of the same kernel, when that is exact: the versions tile
/// the output in nested tiles (docs/padding.md, "Multi-version cost
/// model"), so `to` a multiple of `from` always converts and `from` a
/// multiple `r` of `to` converts when `done` is a multiple of `r`.
fn convert_blocks(done: u32, from: u32, to: u32) -> Option<u32> {
    if from == 0 || to == 0 {
        return None;
    }
    if to >= from && to % from == 0 {
        Some(done * (to / from))
    } else if from % to == 0 && done % (from / to) == 0 {
        Some(done / (from / to))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::*;
    use crate::core::ModelInfo;

    fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
    }

    fn setup(window: usize) -> PaddingScheduler {
        setup_on(window, Config::default())
    }

    pub(super) fn setup_on(window: usize, cfg: Config) -> PaddingScheduler {
        setup_variant(window, cfg, Variant::Single)
    }

    fn setup_variant(window: usize, cfg: Config, variant: Variant) -> PaddingScheduler {
        // RT model: 4 kernels of 20 blocks, 50 us each. BE model: kernel 0
        // of 100 blocks, kernel 1 of 300 blocks, 10 us blocks (+10 per
        // co-resident block).
        let rt: Vec<KernelChar> = (0..4).map(|_| k(20, 4, vec![50_000])).collect();
        let curve = vec![
            10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000,
        ];
        let be = vec![k(100, 8, curve.clone()), k(300, 8, curve)];
        let table = DkpTable::new(Selector::new(mi50()), vec![rt, be], variant, 1_000);
        let models = vec![
            ModelInfo::idempotent("rt", 4),
            ModelInfo::idempotent("be", 2),
        ];
        let clients = vec![
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
        PaddingScheduler::new(variant, Arc::new(table), cfg, models, clients, window).unwrap()
    }

    pub(super) fn step(s: &mut PaddingScheduler, now: Time, ev: Event) -> Vec<DkpAction> {
        s.handle(now, ev);
        std::iter::from_fn(|| s.poll_action()).collect()
    }

    pub(super) fn arrive(
        s: &mut PaddingScheduler,
        t: Time,
        req: u64,
        client: u32,
    ) -> Vec<DkpAction> {
        step(
            s,
            t,
            Event::RequestArrived {
                req: RequestId(req),
                client: ClientId(client),
                deadline: None,
            },
        )
    }

    /// The first padded launch among `a`: (RT kernel, first part's BE
    /// kernel, its block range).
    pub(super) fn first_padded(
        a: &[DkpAction],
    ) -> Option<(KernelTag, KernelTag, std::ops::Range<u32>)> {
        a.iter().find_map(|x| match x {
            DkpAction::Padded(p) => Some((p.tag, p.parts[0].tag, p.parts[0].blocks.clone())),
            _ => None,
        })
    }

    pub(super) fn tag(req: u64, kernel: u32) -> KernelTag {
        KernelTag {
            req: RequestId(req),
            kernel,
        }
    }

    /// `rehearse` (reefd calls it between requests) must change nothing:
    /// a scheduler rehearsing before every event decides exactly as one
    /// that never does, through preemption, padding and completion.
    #[test]
    fn rehearsing_the_selection_changes_no_decision() {
        let (mut a, mut b) = (setup(2), setup(2));
        let (rt, be) = (StreamId(0), StreamId(1));
        let arrived = |req: u64, client: u32| Event::RequestArrived {
            req: RequestId(req),
            client: ClientId(client),
            deadline: None,
        };
        let done = |stream: StreamId, req: u64, k: u32| Event::KernelCompleted {
            stream,
            tag: tag(req, k),
        };
        let mut events = vec![
            (0, arrived(100, 1)),
            (10, arrived(1, 0)),
            (
                12,
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 0),
                },
            ),
            (
                13,
                Event::KernelEvicted {
                    stream: be,
                    tag: tag(100, 1),
                },
            ),
        ];
        for k in 0..4 {
            events.push((50 * (k as Time + 1), done(rt, 1, k)));
        }
        events.push((210, done(be, 100, 0)));
        events.push((220, done(be, 100, 1)));
        let _ = std::iter::from_fn(|| a.poll_action()).count();
        let _ = std::iter::from_fn(|| b.poll_action()).count();
        let mut selected = 0;
        for (t, ev) in events {
            selected += a.rehearse() as u32;
            assert_eq!(step(&mut a, t, ev.clone()), step(&mut b, t, ev));
            selected += a.rehearse() as u32;
        }
        assert_eq!(a.dkp_counters(), b.dkp_counters());
        assert!(a.dkp_counters().padded_launches > 0);
        assert!(selected > 0, "the rehearsal never found a task to pad");
    }

    /// Selections are made when the caller polls (the first RT kernel is
    /// issued before the selections for the kernels behind it), yet from
    /// the state they were due in: a caller that handles the next events
    /// before polling gets the same actions, in the same order.
    #[test]
    fn polling_late_changes_no_selection() {
        let (mut a, mut b) = (setup(4), setup(4));
        let (rt, be) = (StreamId(0), StreamId(1));
        let done = |stream: StreamId, req: u64, k: u32| Event::KernelCompleted {
            stream,
            tag: tag(req, k),
        };
        let killed = Event::KernelKilled {
            stream: be,
            tag: tag(100, 0),
        };
        let evicted = Event::KernelEvicted {
            stream: be,
            tag: tag(100, 1),
        };
        let _ = std::iter::from_fn(|| a.poll_action()).count();
        let _ = std::iter::from_fn(|| b.poll_action()).count();
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        got_a.extend(arrive(&mut a, 0, 100, 1));
        got_b.extend(arrive(&mut b, 0, 100, 1));
        // A second RT request queued behind the first: its kernels are
        // selected once the first request's leave the device queue.
        for (t, req, client) in [(10, 1, 0), (11, 2, 0)] {
            got_a.extend(arrive(&mut a, t, req, client));
            b.handle(
                t,
                Event::RequestArrived {
                    req: RequestId(req),
                    client: ClientId(client),
                    deadline: None,
                },
            );
        }
        got_a.extend(step(&mut a, 12, killed.clone()));
        b.handle(12, killed);
        got_a.extend(step(&mut a, 13, evicted.clone()));
        b.handle(13, evicted);
        got_b.extend(std::iter::from_fn(|| b.poll_action()));
        for (t, k) in [(50, 0), (100, 1), (150, 2), (200, 3)] {
            got_a.extend(step(&mut a, t, done(rt, 1, k)));
            b.handle(t, done(rt, 1, k));
        }
        got_b.extend(std::iter::from_fn(|| b.poll_action()));
        assert_eq!(got_a, got_b);
        assert!(got_a.iter().any(|x| matches!(x, DkpAction::Padded(_))));
    }

    #[test]
    fn pads_rt_kernels_with_preempted_be_blocks_and_resumes_the_rest() {
        let mut s = setup(2);
        let (rt, be) = (StreamId(0), StreamId(1));
        let _created: Vec<_> = std::iter::from_fn(|| s.poll_action()).collect();
        // A best-effort request starts on its stream.
        let a = step(
            &mut s,
            0,
            Event::RequestArrived {
                req: RequestId(100),
                client: ClientId(1),
                deadline: None,
            },
        );
        assert!(a.contains(&DkpAction::Core(Action::Launch {
            stream: be,
            tag: tag(100, 0)
        })));
        // A real-time request preempts it; the BE stream is still draining,
        // so the first two real-time kernels (the window) go unpadded.
        let a = step(
            &mut s,
            10,
            Event::RequestArrived {
                req: RequestId(1),
                client: ClientId(0),
                deadline: None,
            },
        );
        assert!(a.contains(&DkpAction::Core(Action::KillStream { stream: be })));
        let rt_launches: Vec<_> = a
            .iter()
            .filter(
                |x| matches!(x, DkpAction::Core(Action::Launch { stream, .. }) if *stream == rt),
            )
            .collect();
        assert_eq!(rt_launches.len(), 2);
        assert!(!a.iter().any(|x| matches!(x, DkpAction::Padded(_))));
        step(
            &mut s,
            12,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 0),
            },
        );
        step(
            &mut s,
            13,
            Event::KernelEvicted {
                stream: be,
                tag: tag(100, 1),
            },
        );
        // Real-time kernel 0 completes: kernel 2 is transmitted, padded with
        // all 100 blocks of BE kernel 0 (4 per CU on 25 of the 40 free CUs).
        let a = step(
            &mut s,
            50,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 0),
            },
        );
        let p = a
            .iter()
            .find_map(|x| match x {
                DkpAction::Padded(p) => Some(p.clone()),
                _ => None,
            })
            .expect("padded launch");
        assert_eq!(p.tag, tag(1, 2));
        assert_eq!(p.rt_cus, 20);
        assert_eq!(p.parts.len(), 1);
        assert_eq!(p.parts[0].tag, tag(100, 0));
        assert_eq!(p.parts[0].blocks, 0..100);
        assert_eq!(p.parts[0].cus, 20..45);
        // Kernel 3 pads the first 160 blocks of BE kernel 1 (its offset).
        let a = step(
            &mut s,
            100,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 1),
            },
        );
        let p = a
            .iter()
            .find_map(|x| match x {
                DkpAction::Padded(p) => Some(p.clone()),
                _ => None,
            })
            .expect("padded launch");
        assert_eq!(p.parts[0].tag, tag(100, 1));
        assert_eq!(p.parts[0].blocks, 0..160);
        step(
            &mut s,
            150,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 2),
            },
        );
        assert_eq!(s.dkp_counters().be_kernels_completed, 1);
        // The last real-time kernel completes: normal mode resumes the BE
        // request after kernel 0 (kernel 0 again as the redundant restore
        // kernel) and kernel 1 only for its remaining blocks.
        let a = step(
            &mut s,
            200,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 3),
            },
        );
        assert!(a.contains(&DkpAction::Core(Action::RequestDone {
            req: RequestId(1),
            client: ClientId(0)
        })));
        assert!(a.contains(&DkpAction::Rest {
            stream: be,
            tag: tag(100, 1),
            version: 0,
            blocks: 160..300
        }));
        assert!(!a.contains(&DkpAction::Core(Action::Launch {
            stream: be,
            tag: tag(100, 1)
        })));
        // Completing the rest finishes the BE request.
        step(
            &mut s,
            210,
            Event::KernelCompleted {
                stream: be,
                tag: tag(100, 0),
            },
        );
        let a = step(
            &mut s,
            220,
            Event::KernelCompleted {
                stream: be,
                tag: tag(100, 1),
            },
        );
        assert!(a.contains(&DkpAction::Core(Action::RequestDone {
            req: RequestId(100),
            client: ClientId(1)
        })));
        let c = s.dkp_counters();
        assert_eq!(c.padded_launches, 2);
        assert_eq!(c.be_blocks_padded, 260);
        assert_eq!(c.rest_launches, 1);
    }

    #[test]
    fn a_request_finished_by_padding_replies_in_real_time_mode() {
        let mut s = setup(1);
        let (rt, be) = (StreamId(0), StreamId(1));
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        step(
            &mut s,
            0,
            Event::RequestArrived {
                req: RequestId(100),
                client: ClientId(1),
                deadline: None,
            },
        );
        step(
            &mut s,
            1,
            Event::RequestArrived {
                req: RequestId(1),
                client: ClientId(0),
                deadline: None,
            },
        );
        step(
            &mut s,
            2,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 0),
            },
        );
        step(
            &mut s,
            3,
            Event::KernelEvicted {
                stream: be,
                tag: tag(100, 1),
            },
        );
        // Window 1: kernels 1, 2 and 3 are padded one after the other:
        // BE kernel 0 (100 blocks), then BE kernel 1 in two pieces.
        let mut done_be = false;
        let mut padded = Vec::new();
        for i in 0..4u32 {
            let a = step(
                &mut s,
                10 + i as u64,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, i),
                },
            );
            for x in &a {
                match x {
                    DkpAction::Padded(p) => padded.push(p.parts[0].blocks.clone()),
                    DkpAction::Core(Action::RequestDone { req, .. }) if *req == RequestId(100) => {
                        done_be = true;
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(padded, vec![0..100, 0..160, 160..300]);
        assert!(done_be, "the BE request completed inside padded launches");
        assert_eq!(s.dkp_counters().be_kernels_completed, 2);
    }

    #[test]
    fn queued_be_requests_are_started_and_padded_in_real_time_mode() {
        let mut s = setup(1);
        let (rt, be) = (StreamId(0), StreamId(1));
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        let done = |a: &[DkpAction], r: u64| {
            a.contains(&DkpAction::Core(Action::RequestDone {
                req: RequestId(r),
                client: ClientId(1),
            }))
        };
        // Real-time mode first; then a best-effort request arrives and is
        // queued (the policy starts best-effort requests in normal mode
        // only), and a second real-time request waits behind the first.
        let a = arrive(&mut s, 0, 1, 0);
        assert!(a.contains(&DkpAction::Core(Action::Launch {
            stream: rt,
            tag: tag(1, 0)
        })));
        let a = arrive(&mut s, 1, 100, 1);
        assert!(a.is_empty(), "{a:?}");
        arrive(&mut s, 2, 2, 0);
        // The next real-time kernel is padded from the queued request, which
        // padding starts (preempted, nothing launched on its stream).
        let a = step(
            &mut s,
            10,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 0),
            },
        );
        assert_eq!(first_padded(&a), Some((tag(1, 1), tag(100, 0), 0..100)));
        assert!(!a
            .iter()
            .any(|x| matches!(x, DkpAction::Core(Action::Launch { stream, .. }) if *stream == be)));
        assert!(s.inner().core().has_request(be) && s.inner().core().is_paused(be));
        let a = step(
            &mut s,
            20,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 1),
            },
        );
        assert_eq!(first_padded(&a), Some((tag(1, 2), tag(100, 1), 0..160)));
        let a = step(
            &mut s,
            30,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 2),
            },
        );
        assert_eq!(first_padded(&a), Some((tag(1, 3), tag(100, 1), 160..300)));
        // Padding finishes request 100 as real-time request 1 ends; request
        // 2 starts at once (still real-time mode).
        let a = step(
            &mut s,
            40,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 3),
            },
        );
        assert!(done(&a, 100));
        assert!(a.contains(&DkpAction::Core(Action::Launch {
            stream: rt,
            tag: tag(2, 0)
        })));
        // The client's next request arrives during real-time mode: the next
        // real-time kernel pads it.
        arrive(&mut s, 41, 101, 1);
        let a = step(
            &mut s,
            50,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(2, 0),
            },
        );
        assert_eq!(first_padded(&a), Some((tag(2, 1), tag(101, 0), 0..100)));
        assert_eq!(s.dkp_counters().be_requests_started, 2);
        for k in 1..4 {
            step(
                &mut s,
                60 + k as u64,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(2, k),
                },
            );
        }
        // RT kernel 3's padding (kernel 1, blocks 160..300) finished it.
        assert_eq!(s.dkp_counters().be_kernels_completed, 4);
        assert_eq!(s.counters().requests_done, 4);
        // Normal mode: nothing left to restore or launch for request 101,
        // and the stream takes the next request as usual.
        assert!(!s.inner().core().has_request(be));
        let a = arrive(&mut s, 70, 102, 1);
        assert!(a.contains(&DkpAction::Core(Action::Launch {
            stream: be,
            tag: tag(102, 0)
        })));
    }

    #[test]
    fn an_evicted_or_killed_padded_launch_is_padded_again_and_not_credited() {
        let (rt, be) = (StreamId(0), StreamId(1));
        for killed in [false, true] {
            let mut s = setup(1);
            let _ = std::iter::from_fn(|| s.poll_action()).count();
            for (t, req, client) in [(0, 100, 1), (1, 1, 0)] {
                step(
                    &mut s,
                    t,
                    Event::RequestArrived {
                        req: RequestId(req),
                        client: ClientId(client),
                        deadline: None,
                    },
                );
            }
            step(
                &mut s,
                2,
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 0),
                },
            );
            step(
                &mut s,
                3,
                Event::KernelEvicted {
                    stream: be,
                    tag: tag(100, 1),
                },
            );
            let a = step(
                &mut s,
                10,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, 0),
                },
            );
            assert_eq!(first_padded(&a), Some((tag(1, 1), tag(100, 0), 0..100)));
            // The padded launch of RT kernel 1 ends without running (or with
            // its blocks killed): no credit; the next padded launch pads the
            // same blocks again.
            let ev = if killed {
                Event::KernelKilled {
                    stream: rt,
                    tag: tag(1, 1),
                }
            } else {
                Event::KernelEvicted {
                    stream: rt,
                    tag: tag(1, 1),
                }
            };
            let a = step(&mut s, 20, ev);
            assert_eq!(s.dkp_counters().be_kernels_completed, 0);
            let again = first_padded(&a).map(|p| (p.1, p.2));
            assert_eq!(again, Some((tag(100, 0), 0..100)), "killed {killed}: {a:?}");
        }
    }

    #[test]
    fn an_evicted_rest_keeps_the_credit_and_a_killed_one_drops_it() {
        let (rt, be) = (StreamId(0), StreamId(1));
        for killed in [false, true] {
            let mut s = setup(1);
            let _ = std::iter::from_fn(|| s.poll_action()).count();
            arrive(&mut s, 0, 100, 1);
            arrive(&mut s, 1, 1, 0);
            step(
                &mut s,
                2,
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 0),
                },
            );
            step(
                &mut s,
                3,
                Event::KernelEvicted {
                    stream: be,
                    tag: tag(100, 1),
                },
            );
            // RT kernels 1 and 2 pad BE kernel 0 and blocks 0..160 of kernel 1.
            for i in 0..3u32 {
                step(
                    &mut s,
                    10 + i as u64,
                    Event::KernelCompleted {
                        stream: rt,
                        tag: tag(1, i),
                    },
                );
            }
            // RT kernel 3 (padded with blocks 160..300) is evicted: its
            // padding is not credited; kernel 1 has 160 blocks done.
            step(
                &mut s,
                20,
                Event::KernelEvicted {
                    stream: rt,
                    tag: tag(1, 3),
                },
            );
            assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
            // A relaunch of BE kernel 1 on its own stream ends killed or evicted.
            let ev = if killed {
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 1),
                }
            } else {
                Event::KernelEvicted {
                    stream: be,
                    tag: tag(100, 1),
                }
            };
            step(&mut s, 30, ev);
            let c = s.be[1].credit.map(|c| c.done);
            if killed {
                assert_eq!(c, None, "killed blocks corrupt the output: redo all");
            } else {
                assert_eq!(c, Some(160), "an evicted relaunch ran no block");
            }
        }
    }

    /// The MI50 preset's capabilities: its kill lands before later launches.
    pub(super) fn kill_first() -> Config {
        let mut cfg = Config::default();
        cfg.device.kill_precedes_later_launches = true;
        cfg
    }

    #[test]
    fn a_running_next_kernel_is_padded_once_its_kill_is_issued() {
        let (rt, be) = (StreamId(0), StreamId(1));
        // (kill lands before later launches, BE kernels the device queue
        // holds): with a successor queued the running kernel may already
        // have completed and the successor started, unseen (see
        // `next_plan`): no padding before the kill lands.
        for (kill_first_dev, dq) in [(false, 4), (true, 4), (true, 1)] {
            let mut cfg = if kill_first_dev {
                kill_first()
            } else {
                Config::default()
            };
            cfg.dq_capacity = dq;
            let mut s = setup_on(1, cfg);
            let _ = std::iter::from_fn(|| s.poll_action()).count();
            step(
                &mut s,
                0,
                Event::RequestArrived {
                    req: RequestId(100),
                    client: ClientId(1),
                    deadline: None,
                },
            );
            // Normal mode: BE kernel 0 starts running on its own stream.
            step(
                &mut s,
                5,
                Event::KernelStarted {
                    stream: be,
                    tag: tag(100, 0),
                },
            );
            // A real-time request: the BE stream is killed and RT kernel 0
            // transmitted at once. Where the kill lands first and nothing
            // follows the running kernel on its stream, it is padded with
            // BE kernel 0 from block 0 (REEF pads after the synchronous CU
            // reset); elsewhere the kill is waited for.
            let a = step(
                &mut s,
                10,
                Event::RequestArrived {
                    req: RequestId(1),
                    client: ClientId(0),
                    deadline: None,
                },
            );
            let kill = a
                .iter()
                .position(|x| *x == DkpAction::Core(Action::KillStream { stream: be }));
            let pad = a.iter().position(|x| matches!(x, DkpAction::Padded(_)));
            if !kill_first_dev || dq > 1 {
                assert!(kill.is_some() && pad.is_none(), "{a:?}");
                continue;
            }
            assert!(kill.unwrap() < pad.expect("RT kernel 0 padded"), "{a:?}");
            let DkpAction::Padded(p) = &a[pad.unwrap()] else {
                unreachable!()
            };
            assert_eq!(p.tag, tag(1, 0));
            assert_eq!(
                (p.parts[0].tag, p.parts[0].blocks.clone()),
                (tag(100, 0), 0..100)
            );
            // The kill lands; the padded launch then completes: kernel 0 is
            // done by padding.
            step(
                &mut s,
                13,
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 0),
                },
            );
            step(
                &mut s,
                60,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, 0),
                },
            );
            assert_eq!(s.dkp_counters().be_kernels_completed, 1);
            assert_eq!(s.be[1].done_upto, 1);
        }
    }

    #[test]
    fn a_successor_passing_its_check_moves_padding_past_a_completion_heard_under_the_flag() {
        let mut s = setup(1);
        let (rt, be) = (StreamId(0), StreamId(1));
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        arrive(&mut s, 0, 100, 1);
        step(
            &mut s,
            5,
            Event::KernelStarted {
                stream: be,
                tag: tag(100, 0),
            },
        );
        arrive(&mut s, 10, 1, 0);
        for (t, ev) in [
            (
                11,
                Event::KernelCompleted {
                    stream: be,
                    tag: tag(100, 0),
                },
            ),
            (
                11,
                Event::KernelStarted {
                    stream: be,
                    tag: tag(100, 1),
                },
            ),
            (
                12,
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 1),
                },
            ),
        ] {
            step(&mut s, t, ev);
        }
        assert_eq!(s.be[1].done_upto, 1);
        let a = step(
            &mut s,
            60,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 0),
            },
        );
        assert_eq!(
            first_padded(&a).map(|p| (p.1, p.2.start)),
            Some((tag(100, 1), 0)),
            "{a:?}"
        );
    }

    #[test]
    fn a_killed_rest_keeps_the_credit_and_its_kernel_is_padded_on() {
        let mut s = setup_on(1, kill_first());
        let (rt, be) = (StreamId(0), StreamId(1));
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        // Real-time request 1 arrives first; a queued BE request is padded:
        // kernel 0 with RT kernel 1, blocks 0..160 of kernel 1 with RT
        // kernel 2; RT kernel 3's padding (blocks 160..300) is evicted.
        arrive(&mut s, 0, 1, 0);
        arrive(&mut s, 1, 100, 1);
        for i in 0..3u32 {
            step(
                &mut s,
                10 * (i as u64 + 1),
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, i),
                },
            );
        }
        let a = step(
            &mut s,
            40,
            Event::KernelEvicted {
                stream: rt,
                tag: tag(1, 3),
            },
        );
        assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
        // The evicted RT kernel is launched again (padded again), completes,
        // and normal mode relaunches the rest of BE kernel 1.
        let _ = a;
        let mut rest = None;
        for t in 41..50 {
            let a = step(
                &mut s,
                t,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, 3),
                },
            );
            rest = a.iter().find_map(|x| match x {
                DkpAction::Rest { tag, blocks, .. } => Some((*tag, blocks.clone())),
                _ => None,
            });
            if rest.is_some() || s.be[1].req.is_none() {
                break;
            }
        }
        let Some((rtag, blocks)) = rest else {
            // The re-padded launch finished the kernel: nothing to test.
            panic!("expected a rest launch");
        };
        assert_eq!((rtag, blocks.start), (tag(100, 1), 160));
        step(
            &mut s,
            60,
            Event::KernelStarted {
                stream: be,
                tag: tag(100, 1),
            },
        );
        // The next real-time request kills the rest and pads on from block
        // 160 at once; the kill keeps the credited 160 blocks.
        let a = arrive(&mut s, 70, 2, 0);
        assert_eq!(
            first_padded(&a).map(|p| (p.1, p.2.start)),
            Some((tag(100, 1), 160))
        );
        step(
            &mut s,
            73,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 1),
            },
        );
        assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
        step(
            &mut s,
            120,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(2, 0),
            },
        );
        assert_eq!(s.dkp_counters().be_kernels_completed, 2);
    }

    #[test]
    fn a_kernel_continued_in_a_finer_version_keeps_an_exact_credit() {
        let mut s = setup_variant(1, Config::default(), Variant::MultiVersion);
        let vs = s.table.versions(ModelId(1), 1).to_vec();
        let (v, w) = (
            0u16,
            vs.iter()
                .position(|k| k.blocks == 4 * vs[0].blocks)
                .unwrap() as u16,
        );
        let (req, be) = (RequestId(100), StreamId(1));
        let b = &mut s.be[1];
        b.req = Some((req, ClientId(1)));
        b.done_upto = 1;
        b.credit = Some(Credit {
            kernel: 1,
            version: v,
            first: v,
            done: 10,
        });
        let part = |version: u16, blocks: Range<u32>| BePart {
            stream: be,
            client: ClientId(1),
            model: ModelId(1),
            tag: KernelTag { req, kernel: 1 },
            version,
            blocks,
            cus: 20..60,
            per_cu: 1,
            extra: 0..0,
            after: None,
        };
        // Blocks 40..50 of the version with 4× the blocks follow the 10
        // credited blocks of the default exactly: 50 of the finer version.
        s.credit(0, &part(w, 40..50));
        let c = s.be[1].credit.unwrap();
        assert_eq!((c.version, c.done, c.first), (w, 50, v));
        // A coarser part is never credited over a finer prefix that ends
        // inside one of its blocks (50 of 4× is inside block 12); the
        // credit stays.
        s.credit(0, &part(v, 12..13));
        let c = s.be[1].credit.unwrap();
        assert_eq!((c.version, c.done), (w, 50));
        // Once the finer prefix ends on a coarse block boundary (52 = 13 ×
        // 4), a part of the coarser version continues it exactly.
        s.credit(0, &part(w, 50..52));
        s.credit(0, &part(v, 13..15));
        let c = s.be[1].credit.unwrap();
        assert_eq!((c.version, c.done, c.first), (v, 15, v));
    }

    /// Parts that overlap the credited prefix (blocks planned again while
    /// earlier parts were in flight) extend it to their union; before,
    /// such a part was dropped and the kernel's completed blocks ran again
    /// after later kernels had overwritten its inputs.
    #[test]
    fn overlapping_padded_parts_extend_the_credit_to_their_union() {
        let mut s = setup(1);
        let (req, be) = (RequestId(100), StreamId(1));
        let b = &mut s.be[1];
        b.req = Some((req, ClientId(1)));
        b.done_upto = 1;
        let part = |blocks: Range<u32>| BePart {
            stream: be,
            client: ClientId(1),
            model: ModelId(1),
            tag: KernelTag { req, kernel: 1 },
            version: 0,
            blocks,
            cus: 20..60,
            per_cu: 1,
            extra: 0..0,
            after: None,
        };
        s.credit(0, &part(0..100));
        s.credit(0, &part(0..250));
        assert_eq!(s.be[1].credit.map(|c| c.done), Some(250));
        // A gap is never credited over.
        s.credit(0, &part(260..270));
        assert_eq!(s.be[1].credit.map(|c| c.done), Some(250));
        s.credit(0, &part(240..300));
        assert!(s.be[1].credit.is_none());
        assert_eq!(s.be[1].done_upto, 2);
    }

    #[test]
    fn credited_blocks_convert_between_nested_versions_only_when_exact() {
        // Finer: always exact.
        assert_eq!(convert_blocks(10, 60, 240), Some(40));
        // Coarser: only on a block boundary of the coarser version.
        assert_eq!(convert_blocks(52, 240, 60), Some(13));
        assert_eq!(convert_blocks(50, 240, 60), None);
        // Not nested tilings.
        assert_eq!(convert_blocks(4, 60, 90), None);
        assert_eq!(convert_blocks(4, 0, 60), None);
    }
}
