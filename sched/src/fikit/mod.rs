//! FIKIT: filling inter-kernel idle time with lower-priority kernels
//! (Wu et al., "FIKIT: Priority-Based Real-time GPU Multi-tasking
//! Scheduling with Kernel Identification", ../shared/papers/fikit.txt).
//!
//! Implements §3.2: kernel IDs and task keys ([`profile`], Fig. 4), the
//! measuring stage (Figs. 3 and 6: a task without a profile runs T times
//! exclusively and measured, then shares), ten priority queues Q0–Q9
//! scanned in order (Fig. 7), Algorithm 1 (Fig. 9: after a high-priority
//! kernel, a predicted gap above ε is filled) with Algorithm 2 BestPrioFit
//! ([`fit`], Fig. 10), and the early stop of "Real time feedback to stop
//! error propagation" (Fig. 12). docs/scheduler.md "FIKIT" says how it maps
//! onto reef's core; docs/results-fikit.md reports it against §4.
//!
//! In reef's terms FIKIT is a level-1 policy: it never kills or evicts.
//! Its "preemption" withholds the next launch of every task below the top
//! priority (a launch gate of 0 in the core); kernels already in a device
//! queue run on and delay the holder (the paper's "overhead 2").
//!
//! Decisions the paper leaves open, taken here:
//! * **Holders.** The tasks at the highest priority level that has a
//!   request on the GPU hold it and launch freely. Several tasks at that
//!   level (DISB D and E have five real-time clients) all hold it and share
//!   the GPU as plain CUDA sharing does (§3.1 (2), Fig. 11 case C: equal
//!   priorities interleave in launch order). A gap is filled only while
//!   every holder is in a predicted gap, up to the earliest predicted end.
//! * **Candidates.** A task's kernels run in order, so each waiting task
//!   offers one candidate: its next kernel that its host has issued and that
//!   is not launched yet (the paper's hook client, blocked on its next
//!   launch, offers exactly that one). A granted fill is followed by the
//!   task's next kernel as a candidate as soon as it is issued.
//! * **When a gap opens.** reef's core sees completions, so the gap after
//!   holder kernel k opens when k completes with nothing of the holder left
//!   on the device and its kernel k+1 not yet issued; it is predicted to
//!   last SG(k). The remaining gap is the predicted end minus the later of
//!   now and the predicted end of the fills already granted (Algorithm 1
//!   line 15, plus the elapsed time: the runtime adjustment of §3.2).
//! * **Early stop.** The holder's next launch request
//!   ([`Event::KernelsIssued`]) closes its gap at once; without early stop
//!   the gap stays open until its predicted end.
//! * **Measuring.** A measuring request runs alone on the GPU (§3.2 "the
//!   task exclusively uses the GPU"): everything else is withheld until the
//!   device is empty, and the measured request is not preempted by higher
//!   priorities (a preempted run would not measure the task). The kernel
//!   time is its start-to-completion time from the device's events, the gap
//!   from its completion to the next kernel's start. T runs, then the
//!   profile is built and the task shares.

pub mod fit;
pub mod profile;

use crate::core::{ClientSpec, Config, Core, Layout};
use crate::policy::Policy;
use crate::types::*;
use fit::{best_prio_fit, PrioQueues};
use profile::{KernelId, Predict, Predictions, Profile, ProfileBuilder};
use std::collections::{HashMap, HashSet};

/// FIKIT's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FikitConfig {
    /// Gaps predicted at or below ε are not filled (Algorithm 1 lines 6–8;
    /// §3.2: 0.1 ms).
    pub epsilon_ns: u64,
    /// Runs measured before a task shares (T; §3.2: T ∈ [10, 1000]; the
    /// lower end by default, the cheapest measuring stage the paper uses).
    pub runs: u32,
    /// Fill gaps (off: priority withholding only, the "no filling" ablation).
    pub fill: bool,
    /// End filling at the holder's next launch (off: fill up to the
    /// predicted gap end, the "no early stop" ablation of Fig. 12 case C).
    pub early_stop: bool,
    /// Per-ID means (the paper) or per-position means.
    pub predict: Predict,
}

impl Default for FikitConfig {
    fn default() -> Self {
        Self {
            epsilon_ns: 100_000,
            runs: 10,
            fill: true,
            early_stop: true,
            predict: Predict::KernelId,
        }
    }
}

/// What FIKIT did, for reports (`reef-bench`, `reefctl stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FikitStats {
    /// Gaps seen after a holder kernel (its next kernel not issued yet).
    pub gaps_seen: u64,
    /// Of those, predicted at or below ε (not filled).
    pub gaps_below_epsilon: u64,
    /// Gaps into which at least one kernel was launched.
    pub gaps_filled: u64,
    /// Fill kernels launched.
    pub fill_kernels: u64,
    /// Gaps closed by the holder's next launch before their predicted end.
    pub early_stops: u64,
    /// Holder launches that found fill kernels still on the device (a
    /// prediction that was too long: the fill overran the real gap).
    pub overruns: u64,
    /// Time from such a launch until the last fill kernel left, summed.
    pub overrun_ns: u64,
    /// Runs measured in the measuring stage.
    pub measured_runs: u64,
    /// Profiles built by the measuring stage.
    pub profiles_built: u64,
    /// Tasks sent to measuring because their profile was missing or stale.
    pub profiles_missing_or_stale: u64,
}

/// A task's stage (Fig. 3).
#[derive(Debug, Clone)]
enum Stage {
    Measuring(ProfileBuilder),
    Sharing(Predictions),
}

/// A task's measuring stage, as `reefctl status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasuringTask {
    pub task_key: String,
    pub runs_done: u32,
    pub runs: u32,
}

#[derive(Debug, Clone, Copy)]
struct Gap {
    /// Predicted end.
    end: Time,
    filled: bool,
}

/// Candidate payload: the stream and the kernel.
#[derive(Debug, Clone, Copy)]
struct Fill {
    stream: StreamId,
    tag: KernelTag,
}

/// The FIKIT policy. One stream per client, each capped at the core's
/// device-queue capacity.
pub struct Fikit {
    name: &'static str,
    cfg: FikitConfig,
    /// Kernel IDs per model as given (empty: anonymous per position).
    given_ids: Vec<Vec<KernelId>>,
    ids: Vec<Vec<KernelId>>,
    /// Task key of each model.
    keys: Vec<String>,
    /// Profiles by task key: loaded ones, then the measured ones.
    profiles: HashMap<String, Profile>,
    /// Per model (the task key is the model's name: one service per model).
    stage: Vec<Stage>,
    stale: Vec<Option<String>>,
    init: bool,
    bound: Vec<Option<RequestId>>,
    gap: Vec<Option<Gap>>,
    horizon: Time,
    fills: HashSet<KernelTag>,
    exclusive: Option<ClientId>,
    /// (start, end) of each kernel of the exclusive (measured) request.
    meas: Vec<(Option<Time>, Option<Time>)>,
    meas_ok: bool,
    overrun_since: Option<Time>,
    stats: FikitStats,
    queues: PrioQueues<Fill>,
}

impl Fikit {
    /// FIKIT with the kernel IDs of each model (indexed by `ModelId`; an
    /// empty list gives anonymous per-position IDs) and the profiles known
    /// so far (by task key = model name). A task whose profile is missing
    /// or stale measures first.
    pub fn new(cfg: FikitConfig, kernel_ids: Vec<Vec<KernelId>>, profiles: Vec<Profile>) -> Self {
        Self {
            name: "fikit",
            cfg,
            given_ids: kernel_ids,
            ids: Vec::new(),
            keys: Vec::new(),
            profiles: profiles
                .into_iter()
                .map(|p| (p.task_key.clone(), p))
                .collect(),
            stage: Vec::new(),
            stale: Vec::new(),
            init: false,
            bound: Vec::new(),
            gap: Vec::new(),
            horizon: 0,
            fills: HashSet::new(),
            exclusive: None,
            meas: Vec::new(),
            meas_ok: false,
            overrun_since: None,
            stats: FikitStats::default(),
            queues: PrioQueues::default(),
        }
    }

    /// The same policy under another name (ablations).
    pub fn named(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    pub fn config(&self) -> &FikitConfig {
        &self.cfg
    }
    pub fn stats(&self) -> FikitStats {
        self.stats
    }
    /// Every profile known: loaded and measured.
    pub fn profiles(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.values()
    }
    /// Tasks in their measuring stage, with the runs measured so far.
    pub fn measuring(&self) -> Vec<MeasuringTask> {
        self.stage
            .iter()
            .enumerate()
            .filter_map(|(m, s)| match s {
                Stage::Measuring(b) => Some(MeasuringTask {
                    task_key: self.task_key(m).to_string(),
                    runs_done: b.runs(),
                    runs: self.cfg.runs,
                }),
                Stage::Sharing(_) => None,
            })
            .collect()
    }
    /// Why each model's loaded profile was not used (missing or stale), by
    /// model index; `None` for a model whose profile served.
    pub fn profile_problems(&self) -> &[Option<String>] {
        &self.stale
    }

    fn task_key(&self, model: usize) -> &str {
        self.keys.get(model).map(String::as_str).unwrap_or("")
    }
}

impl Fikit {
    fn initialise(&mut self, core: &Core) {
        if self.init {
            return;
        }
        self.init = true;
        for (m, info) in core.models().iter().enumerate() {
            let ids = match self.given_ids.get(m) {
                Some(v) if v.len() == info.kernels as usize => v.clone(),
                _ => (0..info.kernels).map(KernelId::anonymous).collect(),
            };
            let key = info.name.clone();
            let (stage, problem) = match self.profiles.get(&key) {
                Some(p) => match p.predictions(&ids, self.cfg.predict) {
                    Ok(pred) => (Stage::Sharing(pred), None),
                    Err(e) => (
                        Stage::Measuring(ProfileBuilder::new(&key, ids.clone())),
                        Some(e.to_string()),
                    ),
                },
                None => (
                    Stage::Measuring(ProfileBuilder::new(&key, ids.clone())),
                    Some(format!("no profile of {key}")),
                ),
            };
            if problem.is_some() {
                self.stats.profiles_missing_or_stale += 1;
            }
            self.stage.push(stage);
            self.stale.push(problem);
            self.ids.push(ids);
            self.keys.push(key);
        }
        let n = core.clients().len();
        self.bound = vec![None; n];
        self.gap = vec![None; n];
    }

    fn model_of(core: &Core, c: usize) -> usize {
        core.clients()[c].model.0 as usize
    }

    fn sharing(&self, core: &Core, c: usize) -> Option<&Predictions> {
        match &self.stage[Self::model_of(core, c)] {
            Stage::Sharing(p) => Some(p),
            Stage::Measuring(_) => None,
        }
    }

    /// The top priority level among bound requests of sharing tasks.
    fn top(&self, core: &Core) -> Option<u8> {
        (0..self.bound.len())
            .filter(|&c| self.bound[c].is_some() && self.sharing(core, c).is_some())
            .map(|c| core.priority(ClientId(c as u32)))
            .min()
    }

    fn client_of_req(&self, req: RequestId) -> Option<usize> {
        self.bound.iter().position(|b| *b == Some(req))
    }

    fn fill_left(&mut self, now: Time) {
        if self.fills.is_empty() {
            if let Some(t) = self.overrun_since.take() {
                self.stats.overrun_ns += now.saturating_sub(t);
            }
        }
    }

    fn finish_measured_run(&mut self, core: &Core, c: usize) {
        let m = Self::model_of(core, c);
        let ok = self.meas_ok && self.meas.iter().all(|(_, e)| e.is_some());
        self.meas_ok = false;
        if !ok {
            return;
        }
        let n = self.meas.len();
        let mut run = Vec::with_capacity(n);
        for i in 0..n {
            let end = self.meas[i].1.unwrap_or(0);
            // Without a start report the kernel is taken to start when the
            // one before it ended (or at its own end: 0 ns).
            let prev_end = if i > 0 { self.meas[i - 1].1 } else { None };
            let start = self.meas[i].0.or(prev_end).unwrap_or(end).min(end);
            let gap = (i + 1 < n).then(|| {
                let next_start = self.meas[i + 1]
                    .0
                    .unwrap_or(self.meas[i + 1].1.unwrap_or(end));
                next_start.saturating_sub(end)
            });
            run.push((end - start, gap));
        }
        let runs = self.cfg.runs.max(1);
        let Stage::Measuring(b) = &mut self.stage[m] else {
            return;
        };
        if !b.add_run(&run) {
            return;
        }
        self.stats.measured_runs += 1;
        if b.runs() >= runs {
            let p = b.finish();
            match p.predictions(&self.ids[m], self.cfg.predict) {
                Ok(pred) => {
                    self.stats.profiles_built += 1;
                    self.profiles.insert(p.task_key.clone(), p);
                    self.stage[m] = Stage::Sharing(pred);
                    self.stale[m] = None;
                }
                // Cannot happen for a profile built from these IDs; measure
                // again rather than panic.
                Err(_) => {
                    self.stage[m] =
                        Stage::Measuring(ProfileBuilder::new(&self.keys[m], self.ids[m].clone()))
                }
            }
        }
    }

    /// Binds every waiting request to its client's idle stream, withheld.
    fn bind_waiting(&mut self, core: &mut Core) {
        for c in 0..core.clients().len() {
            let client = ClientId(c as u32);
            let s = core.stream_of(client);
            match core.active_request(s) {
                Some((r, _)) => self.bound[c] = Some(r),
                None => {
                    self.bound[c] = None;
                    self.gap[c] = None;
                    if self.exclusive == Some(client) {
                        self.exclusive = None;
                    }
                }
            }
            if self.bound[c].is_some() || !core.is_idle(s) {
                continue;
            }
            let p = match core.clients()[c].class {
                Class::RealTime => core.pop_rt_where(|p| p.client == client),
                Class::BestEffort => core.pop_be(client),
            };
            if let Some(p) = p {
                core.set_gate(s, Some(0));
                core.start(s, p);
                self.bound[c] = Some(p.req);
            }
        }
    }

    /// The measuring stage: one measured request at a time, alone on the
    /// GPU. Returns true while it holds the GPU.
    fn measure(&mut self, core: &mut Core) -> bool {
        if self.exclusive.is_none() {
            let pick = (0..self.bound.len())
                .filter(|&c| self.bound[c].is_some() && self.sharing(core, c).is_none())
                .min_by_key(|&c| (core.priority(ClientId(c as u32)), c));
            if let Some(c) = pick {
                let s = core.stream_of(ClientId(c as u32));
                // Nothing of it may have run yet, or the run is not whole.
                let n = core.models()[Self::model_of(core, c)].kernels as usize;
                self.meas = vec![(None, None); n];
                self.meas_ok = core.outstanding(s) == 0;
                self.exclusive = Some(ClientId(c as u32));
            }
        }
        let Some(x) = self.exclusive else {
            return false;
        };
        let xs = core.stream_of(x);
        let mut others_busy = false;
        for si in 0..core.stream_count() {
            let s = StreamId(si as u32);
            if s == xs {
                continue;
            }
            if core.gate(s) != Some(0) {
                core.set_gate(s, Some(0));
            }
            others_busy |= core.outstanding(s) > 0;
        }
        if !others_busy && core.gate(xs).is_some() {
            core.set_gate(xs, None);
        }
        true
    }

    fn fill(&mut self, core: &mut Core, top: u8) {
        let n = self.bound.len();
        let now = core.now();
        let mut end = Time::MAX;
        for c in 0..n {
            if self.bound[c].is_none() || core.priority(ClientId(c as u32)) != top {
                continue;
            }
            match self.gap[c] {
                Some(g) if g.end > now => end = end.min(g.end),
                _ => return,
            }
        }
        if end == Time::MAX {
            return;
        }
        let mut start = now.max(self.horizon);
        loop {
            if end <= start {
                return;
            }
            let idle = end - start;
            self.queues.clear();
            for c in 0..n {
                let client = ClientId(c as u32);
                let p = core.priority(client);
                if p == top || self.bound[c].is_none() {
                    continue;
                }
                let Stage::Sharing(pred) = &self.stage[Self::model_of(core, c)] else {
                    continue;
                };
                let s = core.stream_of(client);
                if core.is_paused(s) || core.gate(s) != Some(0) || !core.has_room(s) {
                    continue;
                }
                let Some(k) = core.next_unlaunched(s) else {
                    continue;
                };
                let Some((req, _)) = core.active_request(s) else {
                    continue;
                };
                self.queues.push(
                    p,
                    pred.sk[k as usize],
                    Fill {
                        stream: s,
                        tag: KernelTag { req, kernel: k },
                    },
                );
            }
            let Some((p, i)) = best_prio_fit(&self.queues, idle) else {
                return;
            };
            let (predicted, &item) = self.queues.get(p, i);
            core.grant(item.stream, 1);
            self.fills.insert(item.tag);
            self.stats.fill_kernels += 1;
            for c in 0..n {
                if self.bound[c].is_some() && core.priority(ClientId(c as u32)) == top {
                    if let Some(g) = &mut self.gap[c] {
                        if !g.filled {
                            g.filled = true;
                            self.stats.gaps_filled += 1;
                        }
                    }
                }
            }
            start += predicted;
            self.horizon = start;
        }
    }
}

impl Policy for Fikit {
    fn name(&self) -> &'static str {
        self.name
    }

    fn layout(&self, clients: &[ClientSpec], cfg: &Config) -> Layout {
        Layout {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams: clients
                .iter()
                .map(|_| (StreamPriority::Normal, Some(cfg.dq_capacity)))
                .collect(),
            contexts: Vec::new(),
        }
    }

    fn observe(&mut self, core: &Core, ev: &Event) {
        self.initialise(core);
        let now = core.now();
        match *ev {
            Event::KernelStarted { stream, tag } => {
                if let Some(x) = self.exclusive {
                    if core.stream_of(x) == stream && self.bound[x.0 as usize] == Some(tag.req) {
                        if let Some(m) = self.meas.get_mut(tag.kernel as usize) {
                            m.0 = Some(now);
                        }
                    }
                }
            }
            Event::KernelCompleted { stream, tag } => {
                if self.fills.remove(&tag) {
                    self.fill_left(now);
                }
                let c = stream.0 as usize;
                if c >= self.bound.len() || self.bound[c] != Some(tag.req) {
                    return;
                }
                let kernels = core.models()[Self::model_of(core, c)].kernels;
                if self.exclusive == Some(ClientId(c as u32)) {
                    if let Some(m) = self.meas.get_mut(tag.kernel as usize) {
                        m.1 = Some(now);
                    }
                    if tag.kernel + 1 == kernels {
                        self.finish_measured_run(core, c);
                    }
                    return;
                }
                let next = tag.kernel + 1;
                if next >= kernels || core.outstanding(stream) > 0 {
                    return;
                }
                if core.issued(stream).is_some_and(|i| i > next) {
                    return;
                }
                let Some(pred) = self.sharing(core, c) else {
                    return;
                };
                let sg = pred.sg[tag.kernel as usize];
                self.stats.gaps_seen += 1;
                if sg <= self.cfg.epsilon_ns {
                    self.stats.gaps_below_epsilon += 1;
                    self.gap[c] = None;
                } else {
                    self.gap[c] = Some(Gap {
                        end: now + sg,
                        filled: false,
                    });
                }
            }
            Event::KernelEvicted { stream, tag } | Event::KernelKilled { stream, tag } => {
                if self.fills.remove(&tag) {
                    self.fill_left(now);
                }
                if self.exclusive.is_some_and(|x| core.stream_of(x) == stream) {
                    self.meas_ok = false;
                }
            }
            Event::KernelsIssued { req, .. } => {
                let Some(c) = self.client_of_req(req) else {
                    return;
                };
                let holder = self.top(core) == Some(core.priority(ClientId(c as u32)));
                if !holder {
                    return;
                }
                if !self.fills.is_empty() {
                    self.stats.overruns += 1;
                    self.overrun_since.get_or_insert(now);
                }
                if self.cfg.early_stop {
                    if let Some(g) = self.gap[c].take() {
                        if g.end > now {
                            self.stats.early_stops += 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn schedule(&mut self, core: &mut Core) {
        self.initialise(core);
        self.bind_waiting(core);
        if self.measure(core) {
            return;
        }
        let Some(top) = self.top(core) else {
            return;
        };
        for c in 0..self.bound.len() {
            if self.bound[c].is_none() {
                continue;
            }
            let client = ClientId(c as u32);
            let s = core.stream_of(client);
            if core.priority(client) == top {
                if core.gate(s).is_some() {
                    core.set_gate(s, None);
                }
            } else if core.gate(s).is_none() {
                // Withhold the next launch; what is on the device runs on.
                core.set_gate(s, Some(0));
            }
        }
        if self.cfg.fill {
            self.fill(core, top);
        }
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
