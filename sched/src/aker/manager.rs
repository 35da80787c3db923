//! The `aker`, `baymax` and `tacker` schedulers: Aker's QoS-aware kernel
//! manager (../shared/papers/aker-adaptive-kernel-fusion.txt §8.3, Fig. 13,
//! Eq. 3–5) and its two baselines (§9.3) over the scheduler core, sans-IO
//! like every other policy (events in, [`DkpAction`]s out; no clock, no
//! thread, no socket: the caller supplies `now` and the predictions).
//!
//! Execution model (§4 "We maintain a kernel queue for each BE
//! application", §8.1 Fig. 13): the manager issues kernels one after
//! another on one device stream (the first stream the core creates), at
//! most [`AkerConfig::depth`] launches on the device at once (issued ahead,
//! so one launch's host path overlaps the previous kernel), and decides at
//! each issue which kernel goes next:
//! - an LC query is active: the earliest one's next kernel (§8.3.2: early
//!   queries complete first). Its QoS headroom is Eq. 5 over every active
//!   query (the smallest of `T_qos − (t − arrival) − Σ predicted remaining
//!   GPU time of it and the queries before it`, `t` the predicted time the
//!   device frees). [`super::decide`] then chooses (§8.3.1): a fused kernel
//!   of the LC kernel with part of a ready BE kernel (Eq. 4, largest
//!   `T_gain`), a BE kernel launched directly before it (its predicted time
//!   below the headroom), or the LC kernel alone;
//! - no LC query active: the ready BE kernels round robin.
//!
//! The three managers differ in the fusion they may use:
//! - `baymax`: none (non-preemptive, duration-predicting reordering, §9.3);
//! - `aker`: compute-prefer × memory-prefer and TC × CD pairs (§5.1), the
//!   best fused version at its opportune load ratio (§7), the BE kernel
//!   split so that only the blocks that fit that ratio are fused (§8.2);
//!   the rest stays ready for later (another fused kernel, or a launch of
//!   the remaining blocks, [`DkpAction::Rest`]);
//! - `tacker`: TC × CD pairs only, the whole remaining BE kernel fused (no
//!   split at the opportune ratio: Tacker "has to suffer from the solo-run
//!   stage of the fused kernel", §9.4). On a device or models without
//!   tensor-core kernels (the MI50, and reef's MI50 models on every preset:
//!   their kernels classify as compute- or memory-prefer, never TC) no pair
//!   qualifies and `tacker` is `baymax`.
//!
//! QoS targets (§8.3: "T_qos of a query Q"): per real-time client, either
//! given ([`AkerConfig::qos_ns`], reefctl's `--qos-ms`) or
//! [`AkerConfig::qos_x`] × the model's predicted stand-alone latency (the sum
//! of its kernels' predicted times), default [`DEFAULT_QOS_X`] for every
//! policy and benchmark. A query meets its QoS when its latency (arrival to
//! reply) is at most the target ([`AkerStats`]).
//!
//! Not built: fusing two BE kernels once every LC kernel is launched
//! (§8.3.1 last paragraph); timestamp resynchronisation every 10 ms and
//! online retraining (§9.1, §6.3): the caller's clock at every event is
//! used instead; operator preemption (`PreemptCommand`) is ignored: these
//! managers never preempt (Baymax and Aker are non-preemptive).

use super::{decide, split_blocks, Decision, FuseCandidate, KernelModel, Line, TwoStage};
use crate::core::{ClientSpec, Config, ConfigError, Core, Layout, ModelInfo};
use crate::dkp::DkpAction;
use crate::policy::Policy;
use crate::types::*;
use crate::Scheduler;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// Policy names served by [`AkerScheduler`].
pub const AKER_POLICIES: &[&str] = &["aker", "baymax", "tacker"];

/// Default QoS target as a multiple of the LC model's predicted stand-alone
/// latency: 3×, the co-location experiment's choice (docs/aker.md; the
/// paper uses a fixed 50 ms at the largest batch meeting it, §9.2, which
/// has no counterpart for reef's batch-1 models).
pub const DEFAULT_QOS_X: f64 = 3.0;

/// Which manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Aker,
    Baymax,
    Tacker,
}

impl Manager {
    pub fn of_name(name: &str) -> Option<Self> {
        match name {
            "aker" => Some(Self::Aker),
            "baymax" => Some(Self::Baymax),
            "tacker" => Some(Self::Tacker),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Aker => "aker",
            Self::Baymax => "baymax",
            Self::Tacker => "tacker",
        }
    }
    /// Whether this manager may fuse an LC kernel of class `lc` with a BE
    /// kernel of class `be` (§5.1: TC with CD; compute-prefer with
    /// memory-prefer).
    pub fn fuses(self, lc: KClass, be: KClass) -> bool {
        use KClass::*;
        let cd = |c: KClass| matches!(c, ComputePrefer | MemoryPrefer | Neutral);
        let tc_cd = (lc == Tensor && cd(be)) || (cd(lc) && be == Tensor);
        match self {
            Self::Baymax => false,
            Self::Tacker => tc_cd,
            Self::Aker => {
                tc_cd
                    || matches!(
                        (lc, be),
                        (ComputePrefer, MemoryPrefer) | (MemoryPrefer, ComputePrefer)
                    )
            }
        }
    }
}

/// Aker §5.1 kernel classes as the manager sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KClass {
    Tensor,
    ComputePrefer,
    MemoryPrefer,
    Neutral,
    Unknown,
}

/// A kernel's prediction: its grid and its predicted stand-alone time
/// (profiled, §6.3 step 1; a BE block range is predicted pro rata).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelPred {
    pub blocks: u32,
    pub solo_ns: f64,
    pub class: KClass,
}

impl KernelPred {
    /// Predicted time of `n` of its blocks.
    pub fn of_blocks(&self, n: u32) -> f64 {
        self.model().predict(n)
    }
    /// The block-count model: a line through the origin and the profiled
    /// whole kernel.
    pub fn model(&self) -> KernelModel {
        KernelModel(Line {
            a: 0.0,
            b: self.solo_ns / self.blocks.max(1) as f64,
        })
    }
}

/// The best fused version of an (LC kernel, BE kernel) pair (§7): its
/// persistent blocks per CU `a:b` and its two-stage model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    pub ratio: (u32, u32),
    pub model: TwoStage,
}

/// Where the manager's predictions come from: the offline profiles (§6.3)
/// of the caller (reef-exec profiles on a scratch simulated device; the
/// core only does arithmetic on them).
pub trait Predictor: Send {
    /// Kernel `k` of model `m`.
    fn kernel(&self, m: ModelId, k: u32) -> KernelPred;
    /// The best fused version of LC kernel `lc` with BE kernel `be`, or
    /// `None` when no version reduces the makespan (§7). May profile on
    /// first use and remember the answer.
    fn fusion(&mut self, lc: (ModelId, u32), be: (ModelId, u32)) -> Option<Fusion>;
}

/// Parameters of the managers.
#[derive(Debug, Clone)]
pub struct AkerConfig {
    /// QoS target = `qos_x` × the model's predicted stand-alone latency,
    /// for real-time clients without an explicit target.
    pub qos_x: f64,
    /// Explicit QoS targets per client (ns), indexed by `ClientId`.
    pub qos_ns: Vec<Option<Time>>,
    /// Launches on the device at once (issued ahead).
    pub depth: usize,
}

impl Default for AkerConfig {
    fn default() -> Self {
        Self {
            qos_x: DEFAULT_QOS_X,
            qos_ns: Vec::new(),
            // Two: one running, one fetched behind it, as the co-location
            // experiment issues them (docs/aker.md).
            depth: 2,
        }
    }
}

/// One fused launch (§5.4 flexible-ratio fusion with a §8.2 split).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FusedLaunch {
    /// The device stream it goes to.
    pub stream: StreamId,
    /// The LC kernel (component 1, whole) and its model.
    pub lc: KernelTag,
    pub lc_model: ModelId,
    /// The BE kernel (component 2), its model and the blocks fused.
    pub be: KernelTag,
    pub be_model: ModelId,
    pub be_blocks: Range<u32>,
    /// Persistent blocks per CU of each component.
    pub ratio: (u32, u32),
    /// `T_k_fuse`, ns, and the headroom it was checked against (Eq. 4).
    pub predicted_ns: u64,
    pub lc_ns: u64,
    pub headroom_ns: i64,
}

/// What the managers did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AkerStats {
    /// LC kernels launched alone.
    pub lc_launches: u64,
    /// Fused kernels launched (LC kernel + BE blocks).
    pub fused_launches: u64,
    pub be_blocks_fused: u64,
    /// BE kernels (or their remaining blocks) launched while an LC query
    /// was active, within its headroom (§8.3.1 "launched directly").
    pub be_direct_in_headroom: u64,
    /// BE launches while no LC query was active.
    pub be_launches_idle: u64,
    /// Launches of the blocks a split left over.
    pub rest_launches: u64,
    /// LC queries finished within / beyond their QoS target.
    pub qos_met: u64,
    pub qos_missed: u64,
    /// Fused launches whose predicted extra time was not below the
    /// headroom when chosen (Eq. 4 violated): must stay 0.
    pub beyond_headroom: u64,
}

#[derive(Debug, Clone)]
struct Head {
    stream: StreamId,
    tag: KernelTag,
    model: ModelId,
    blocks: u32,
    /// First block not yet given to a launch.
    next_block: u32,
}

#[derive(Debug, Clone)]
struct Flight {
    /// The LC kernel it carries (stream, tag).
    lc: Option<(StreamId, KernelTag)>,
    /// BE blocks it carries (stream, kernel, blocks).
    be: Option<(StreamId, KernelTag, u32)>,
}

#[derive(Debug, Clone)]
struct Query {
    req: RequestId,
    stream: StreamId,
    model: ModelId,
    arrival: Time,
    qos: f64,
    /// LC kernels put on the device so far.
    launched: u32,
}

/// The `aker` / `baymax` / `tacker` scheduler (see the module doc).
pub struct AkerScheduler {
    mgr: Manager,
    cfg: AkerConfig,
    /// The core under [`AkerPolicy`] (requests bound to streams, every
    /// stream gated: kernels leave the core only when pulled here).
    sched: Scheduler,
    pred: Box<dyn Predictor>,
    /// Predicted stand-alone latency per model, ns.
    model_ns: Vec<f64>,
    heads: Vec<Option<Head>>,
    /// BE kernels pulled from the core and not completed: (stream,
    /// blocks, blocks completed).
    be_launched: HashMap<KernelTag, (StreamId, u32, u32)>,
    /// On the device, by the tag its events carry.
    flights: HashMap<KernelTag, Flight>,
    /// Stream of each request bound to one (for the events of its kernels).
    req_stream: HashMap<RequestId, StreamId>,
    queries: Vec<Query>,
    /// When the device is predicted to be free of what was issued.
    free_at: f64,
    next_be: usize,
    out: VecDeque<DkpAction>,
    stats: AkerStats,
    /// Latencies of finished LC queries, ns, with their targets.
    lc_done: Vec<(Time, f64)>,
}

/// The device stream every launch goes to.
const DEV: StreamId = StreamId(0);

impl AkerScheduler {
    /// Builds the scheduler. Emits a `CreateStream` per client first; the
    /// first one is the device stream the manager issues on.
    pub fn new(
        mgr: Manager,
        cfg: AkerConfig,
        pred: Box<dyn Predictor>,
        core_cfg: Config,
        models: Vec<ModelInfo>,
        clients: Vec<ClientSpec>,
    ) -> Result<Self, ConfigError> {
        let model_ns = models
            .iter()
            .enumerate()
            .map(|(m, info)| {
                (0..info.kernels)
                    .map(|k| pred.kernel(ModelId(m as u32), k).solo_ns)
                    .sum()
            })
            .collect();
        let sched = Scheduler::new(Box::new(AkerPolicy(mgr)), core_cfg, models, clients)?;
        let n = sched.core().stream_count();
        let mut me = Self {
            mgr,
            cfg,
            sched,
            pred,
            model_ns,
            heads: vec![None; n],
            be_launched: HashMap::new(),
            flights: HashMap::new(),
            req_stream: HashMap::new(),
            queries: Vec::new(),
            free_at: 0.0,
            next_be: 0,
            out: VecDeque::new(),
            stats: AkerStats::default(),
            lc_done: Vec::new(),
        };
        me.step();
        Ok(me)
    }

    pub fn policy_name(&self) -> &'static str {
        self.mgr.name()
    }
    pub fn manager(&self) -> Manager {
        self.mgr
    }
    pub fn core(&self) -> &Core {
        self.sched.core()
    }
    /// The scheduler holding the core (its policy is `AkerPolicy`).
    pub fn inner(&self) -> &Scheduler {
        &self.sched
    }
    pub fn counters(&self) -> crate::Counters {
        self.sched.counters()
    }
    pub fn preemptions(&self) -> &[crate::PreemptionRecord] {
        self.sched.preemptions()
    }
    pub fn forget_finished_preemptions(&mut self) {
        self.sched.forget_finished_preemptions()
    }
    pub fn stats(&self) -> AkerStats {
        self.stats
    }
    /// Latency and QoS target (ns) of every finished LC query, in order.
    pub fn lc_latencies(&self) -> &[(Time, f64)] {
        &self.lc_done
    }
    /// Forgets the finished LC queries' latencies (a long-running daemon).
    pub fn forget_latencies(&mut self) {
        self.lc_done.clear();
    }
    /// The QoS target of real-time client `c`, ns.
    pub fn qos_of(&self, c: ClientId) -> f64 {
        if let Some(Some(q)) = self.cfg.qos_ns.get(c.0 as usize) {
            return *q as f64;
        }
        let m = self.core().clients()[c.0 as usize].model;
        self.cfg.qos_x * self.model_ns[m.0 as usize]
    }
    /// Sets (or clears) client `c`'s explicit QoS target from the next
    /// query on.
    pub fn set_qos(&mut self, c: ClientId, qos_ns: Option<Time>) {
        let i = c.0 as usize;
        if self.cfg.qos_ns.len() <= i {
            self.cfg.qos_ns.resize(i + 1, None);
        }
        self.cfg.qos_ns[i] = qos_ns;
    }

    pub fn poll_action(&mut self) -> Option<DkpAction> {
        self.out.pop_front()
    }

    /// Feeds one event observed at `now` (kernel events carry the device
    /// stream; the manager maps them back to their request's stream).
    pub fn handle(&mut self, now: Time, ev: Event) {
        match ev {
            Event::RequestArrived { req, client, .. } => {
                let rt = self.core().class_of(client) == Some(Class::RealTime);
                self.sched.handle(now, ev);
                if rt {
                    let qos = self.qos_of(client);
                    let c = self.core();
                    let q = Query {
                        req,
                        stream: c.stream_of(client),
                        model: c.clients()[client.0 as usize].model,
                        arrival: c.now(),
                        qos,
                        launched: 0,
                    };
                    self.queries.push(q);
                }
            }
            Event::KernelStarted { tag, .. } => {
                if let Some(&stream) = self.req_stream.get(&tag.req) {
                    self.sched.handle(now, Event::KernelStarted { stream, tag });
                }
            }
            Event::KernelCompleted { tag, .. } => self.finished(now, tag, 0),
            Event::KernelEvicted { tag, .. } => self.finished(now, tag, 1),
            Event::KernelKilled { tag, .. } => self.finished(now, tag, 2),
            Event::KernelsIssued { .. } => self.sched.handle(now, ev),
            // Non-preemptive managers: operator preemption is not served.
            Event::PreemptCommand { .. } | Event::ResumeCommand { .. } => {}
        }
        self.step();
    }

    /// A launch whose events carry `tag` left the device (`how`: 0
    /// completed, 1 evicted, 2 killed).
    fn finished(&mut self, now: Time, tag: KernelTag, how: u8) {
        let Some(f) = self.flights.remove(&tag) else {
            return;
        };
        if self.flights.is_empty() {
            self.free_at = now as f64;
        }
        let ev = |stream, tag| match how {
            0 => Event::KernelCompleted { stream, tag },
            1 => Event::KernelEvicted { stream, tag },
            _ => Event::KernelKilled { stream, tag },
        };
        if let Some((s, lc)) = f.lc {
            self.sched.handle(now, ev(s, lc));
        }
        if let Some((s, tag, n)) = f.be {
            let Some(e) = self.be_launched.get_mut(&tag) else {
                return;
            };
            e.2 += n;
            if how != 0 || e.2 >= e.1 {
                // Evicted or killed: not expected (nothing here preempts);
                // the kernel goes back to the core as it ended.
                self.be_launched.remove(&tag);
                self.sched.handle(now, ev(s, tag));
            }
        }
    }

    /// Starts requests, pulls each stream's next kernel out of the core,
    /// and issues launches while the device has room.
    fn step(&mut self) {
        loop {
            self.start_requests();
            self.pull();
            if self.flights.len() >= self.cfg.depth.max(1) || !self.issue_one() {
                break;
            }
        }
        self.pull();
    }

    fn start_requests(&mut self) {
        let n = self.core().clients().len();
        for c in 0..n {
            let client = ClientId(c as u32);
            let s = self.core().stream_of(client);
            if !self.core().is_idle(s) {
                continue;
            }
            let p = match self.core().clients()[c].class {
                Class::RealTime => self.sched.core_mut().pop_rt_where(|p| p.client == client),
                Class::BestEffort => self.sched.core_mut().pop_be(client),
            };
            if let Some(p) = p {
                self.req_stream.insert(p.req, s);
                self.sched.core_mut().start(s, p);
            }
        }
    }

    /// Every stream with a request and no head takes its next kernel.
    fn pull(&mut self) {
        for s in 0..self.heads.len() {
            let sid = StreamId(s as u32);
            if self.heads[s].is_none() && self.core().next_unlaunched(sid).is_some() {
                self.sched.core_mut().grant(sid, 1);
            }
        }
        let mut acts = Vec::new();
        self.sched.core_mut().drain_actions_into(&mut acts);
        for a in acts {
            match a {
                Action::Launch { stream, tag } => {
                    let client = self
                        .core()
                        .active_request(stream)
                        .map_or(ClientId(0), |r| r.1);
                    let m = self.core().clients()[client.0 as usize].model;
                    let blocks = self.pred.kernel(m, tag.kernel).blocks.max(1);
                    self.heads[stream.0 as usize] = Some(Head {
                        stream,
                        tag,
                        model: m,
                        blocks,
                        next_block: 0,
                    });
                    if self.core().clients()[client.0 as usize].class == Class::BestEffort {
                        self.be_launched.insert(tag, (stream, blocks, 0));
                    }
                }
                Action::RequestDone { req, client } => {
                    self.req_stream.remove(&req);
                    if let Some(i) = self.queries.iter().position(|q| q.req == req) {
                        let q = self.queries.remove(i);
                        let lat = self.core().now().saturating_sub(q.arrival);
                        if lat as f64 <= q.qos {
                            self.stats.qos_met += 1;
                        } else {
                            self.stats.qos_missed += 1;
                        }
                        self.lc_done.push((lat, q.qos));
                    }
                    self.out
                        .push_back(DkpAction::Core(Action::RequestDone { req, client }));
                }
                other => self.out.push_back(DkpAction::Core(other)),
            }
        }
    }

    /// Predicted remaining GPU time of a query: its kernels not yet on
    /// the device.
    fn remaining(&self, q: &Query) -> f64 {
        let n = self.core().models()[q.model.0 as usize].kernels;
        (q.launched..n)
            .map(|k| self.pred.kernel(q.model, k).solo_ns)
            .sum()
    }

    /// Eq. 5 over every active query at predicted device-free time `t`.
    fn headroom(&self, t: f64) -> f64 {
        let mut acc = 0.0;
        let mut hr = f64::INFINITY;
        for q in &self.queries {
            acc += self.remaining(q);
            hr = hr.min(q.qos - (t - q.arrival as f64) - acc);
        }
        hr
    }

    /// BE heads with blocks not yet launched, round robin from `next_be`.
    fn ready_be(&self) -> Vec<usize> {
        let n = self.heads.len();
        (0..n)
            .map(|i| (self.next_be + i) % n)
            .filter(|&s| {
                self.heads[s].as_ref().is_some_and(|h| {
                    h.next_block < h.blocks && self.core().clients()[s].class == Class::BestEffort
                })
            })
            .collect()
    }

    fn issue_one(&mut self) -> bool {
        let now = self.core().now() as f64;
        let t = self.free_at.max(now);
        let be = self.ready_be();
        let Some(q0) = self.queries.first().cloned() else {
            // No LC query: BE kernels round robin.
            let Some(&s) = be.first() else {
                return false;
            };
            self.stats.be_launches_idle += 1;
            self.launch_be(s, t);
            return true;
        };
        let hr = self.headroom(t);
        let lc = self.heads[q0.stream.0 as usize]
            .as_ref()
            .filter(|h| h.tag.req == q0.req)
            .cloned();
        let direct: Vec<(usize, f64)> = be
            .iter()
            .map(|&s| {
                let h = self.heads[s].as_ref().expect("ready head");
                let p = self.pred.kernel(h.model, h.tag.kernel);
                (s, p.of_blocks(h.blocks - h.next_block))
            })
            .collect();
        let Some(lc) = lc else {
            // The query's next kernel is not issued yet (host-paced):
            // only BE work within the headroom.
            if let (Decision::Direct(s), _) = decide(0.0, hr, &[], &direct) {
                self.stats.be_direct_in_headroom += 1;
                self.launch_be(s, t);
                return true;
            }
            return false;
        };
        let lp = self.pred.kernel(lc.model, lc.tag.kernel);
        let mut cands = Vec::new();
        let mut plans = Vec::new();
        if self.mgr != Manager::Baymax {
            for &s in &be {
                let h = self.heads[s].as_ref().expect("ready head").clone();
                let bp = self.pred.kernel(h.model, h.tag.kernel);
                if !self.mgr.fuses(lp.class, bp.class) {
                    continue;
                }
                let Some(f) = self
                    .pred
                    .fusion((lc.model, lc.tag.kernel), (h.model, h.tag.kernel))
                else {
                    continue;
                };
                let left = h.blocks - h.next_block;
                let n = match self.mgr {
                    Manager::Aker => {
                        split_blocks(&bp.model(), left, lp.solo_ns, f.model.opportune())
                    }
                    _ => left,
                };
                let part = bp.of_blocks(n);
                cands.push(FuseCandidate {
                    be: s,
                    fused: f.model.predict(lp.solo_ns, part),
                    be_part: part,
                });
                plans.push((s, n, f.ratio));
            }
        }
        match decide(lp.solo_ns, hr, &cands, &direct).0 {
            Decision::Fuse(i) => {
                let (s, n, ratio) = plans[i];
                let c = cands[i];
                if c.fused - lp.solo_ns >= hr {
                    self.stats.beyond_headroom += 1;
                }
                let h = self.heads[s].as_mut().expect("ready head");
                let blocks = h.next_block..h.next_block + n;
                h.next_block += n;
                let (be_tag, be_model) = (h.tag, h.model);
                self.be_all_launched(s);
                self.stats.fused_launches += 1;
                self.stats.be_blocks_fused += n as u64;
                self.out.push_back(DkpAction::Fused(FusedLaunch {
                    stream: DEV,
                    lc: lc.tag,
                    lc_model: lc.model,
                    be: be_tag,
                    be_model,
                    be_blocks: blocks,
                    ratio,
                    predicted_ns: c.fused.max(0.0) as u64,
                    lc_ns: lp.solo_ns as u64,
                    headroom_ns: hr.clamp(-9e18, 9e18) as i64,
                }));
                self.flights.insert(
                    lc.tag,
                    Flight {
                        lc: Some((lc.stream, lc.tag)),
                        be: Some((StreamId(s as u32), be_tag, n)),
                    },
                );
                self.lc_issued(&q0, lc.stream);
                self.free_at = t + c.fused;
            }
            Decision::Direct(s) => {
                self.stats.be_direct_in_headroom += 1;
                self.launch_be(s, t);
            }
            Decision::Original => {
                self.stats.lc_launches += 1;
                self.out.push_back(DkpAction::Core(Action::Launch {
                    stream: DEV,
                    tag: lc.tag,
                }));
                self.flights.insert(
                    lc.tag,
                    Flight {
                        lc: Some((lc.stream, lc.tag)),
                        be: None,
                    },
                );
                self.lc_issued(&q0, lc.stream);
                self.free_at = t + lp.solo_ns;
            }
        }
        true
    }

    fn lc_issued(&mut self, q0: &Query, s: StreamId) {
        self.heads[s.0 as usize] = None;
        if let Some(q) = self.queries.iter_mut().find(|q| q.req == q0.req) {
            q.launched += 1;
        }
    }

    /// Once every block of stream `s`'s head is launched, the kernel waits
    /// for its completions apart and the stream's next kernel may be
    /// pulled (the device stream runs launches in issue order, so the next
    /// kernel's blocks never run before these).
    fn be_all_launched(&mut self, s: usize) {
        if self.heads[s]
            .as_ref()
            .is_some_and(|h| h.next_block >= h.blocks)
        {
            self.heads[s] = None;
        }
    }

    /// Launches the not yet launched blocks of BE stream `s`'s head.
    fn launch_be(&mut self, s: usize, t: f64) {
        let h = self.heads[s].as_mut().expect("ready head");
        let blocks = h.next_block..h.blocks;
        let n = blocks.len() as u32;
        h.next_block = h.blocks;
        let tag = h.tag;
        let p = self.pred.kernel(h.model, tag.kernel);
        self.be_all_launched(s);
        if blocks.start == 0 {
            self.out
                .push_back(DkpAction::Core(Action::Launch { stream: DEV, tag }));
        } else {
            self.stats.rest_launches += 1;
            self.out.push_back(DkpAction::Rest {
                stream: DEV,
                tag,
                version: 0,
                blocks,
            });
        }
        self.flights.insert(
            tag,
            Flight {
                lc: None,
                be: Some((StreamId(s as u32), tag, n)),
            },
        );
        self.free_at = t + p.of_blocks(n);
        self.next_be = s + 1;
    }
}

/// The core-side half of the managers: one stream per client (the core's
/// bookkeeping binds one request per stream at a time), every stream gated
/// so that no kernel leaves the core unless [`AkerScheduler`] pulls it,
/// requests started on idle streams. Launches all go to stream 0 (the
/// device stream), uncapped: the manager bounds what is on the device.
struct AkerPolicy(Manager);

impl Policy for AkerPolicy {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn layout(&self, clients: &[ClientSpec], _: &Config) -> Layout {
        Layout {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams: clients
                .iter()
                .map(|c| {
                    let p = match c.class {
                        Class::RealTime => StreamPriority::High,
                        Class::BestEffort => StreamPriority::Normal,
                    };
                    (p, None)
                })
                .collect(),
            contexts: Vec::new(),
        }
    }
    fn schedule(&mut self, core: &mut Core) {
        for s in 0..core.stream_count() {
            let s = StreamId(s as u32);
            if core.gate(s).is_none() {
                core.set_gate(s, Some(0));
            }
        }
    }
}
