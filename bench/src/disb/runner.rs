//! The virtual-time runner: DISB clients drive the sans-IO scheduler
//! (reef-sched) on the block-level simulator (reef-sim).
//!
//! Clients follow DISB's client loop (REEF §6.2; SJTU-IPADS/disb
//! `src/load.cpp`): each waits for its next launch time, issues one request
//! and waits for the reply, so a client has at most one request outstanding.
//! Periodic, Poisson and trace launches that are already late for the next
//! slot are dropped; priority-0 periodic clients of equal frequency are
//! staggered by the stand-alone latencies of the ones before them, as DISB's
//! load coordinator does. A request's latency runs from its launch to the
//! reply.
//!
//! The runner interleaves the simulator's events with client launches in time
//! order and performs the scheduler's actions at the instant of the event
//! that caused them. Host-queue reclamation is asynchronous (REEF §4.2) and
//! therefore costs nothing on the simulated critical path.
//!
//! The client's host (the launching framework) is modelled by
//! [`RunOptions::host_gap_ns`]: `None` launches every kernel of a request at
//! once (back to back, as reef's clients do); `Some(g)` models an eager-mode
//! framework whose CPU spends g per operator: kernel 0 is issued g after the
//! request, and kernel i+1 g after kernel i was transmitted to the device.
//! A launch call returns only once the scheduler lets the kernel through
//! (FIKIT's hook client blocks it while the task is withheld, §3.2) and the
//! device queue has room (a full CUDA/HIP launch queue blocks the caller),
//! so a withheld task's host does not run ahead. The gaps this leaves
//! between kernels are what FIKIT fills (fikit.txt §1, Fig. 1).

use super::workload::{Load, Workload};
use reef_exec::{Device, Driver, Outcome, PadStats, Setup, Work};
use reef_sched::fikit::profile::Profile;
use reef_sched::fikit::{Fikit, FikitConfig, FikitStats};
use reef_sched::{
    Class, ClientId, ClientSpec, ModelId, ModelInfo, PreemptLevel, PreemptionRecord, RequestId,
    Time,
};
use reef_sim::{BufferId, DeviceSpec};
use std::collections::BTreeMap;

const SEC: f64 = 1e9;

pub use reef_exec::PreparedModel;

/// When a client issues requests.
#[derive(Debug, Clone)]
pub enum Gen {
    Continuous,
    Periodic {
        next: Time,
        interval: Time,
    },
    Poisson {
        next: Time,
        rate_per_ns: f64,
        rng: u64,
    },
    Trace {
        offsets: Vec<Time>,
        idx: usize,
    },
    /// Issues when every task in `prev` has returned a result of one serial.
    Dependent {
        prev: Vec<usize>,
    },
    /// Closed loop, a fixed number of requests (stand-alone measurement).
    Count {
        remaining: u32,
    },
}

/// One client of a run.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    pub name: String,
    /// Index into the run's models.
    pub model: usize,
    pub class: Class,
    pub gen: Gen,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CState {
    /// Will issue at this time.
    At(Time),
    /// Waiting for its dependencies.
    Waiting,
    InFlight {
        issued: Time,
    },
    Finished,
}

/// Per-client measurements.
#[derive(Debug, Clone, Default)]
pub struct ClientStats {
    pub issued: u64,
    pub completed: u64,
    /// Latencies of completed requests, ns.
    pub latencies: Vec<Time>,
    pub rejected: bool,
}

/// Raw outcome of one run.
pub struct RunOutcome {
    pub clients: Vec<ClientStats>,
    pub preemptions: Vec<PreemptionRecord>,
    /// Virtual time covered, ns.
    pub duration: Time,
    pub restores: u64,
    pub redundant_kernels: u64,
    pub kernels_launched: u64,
    pub device_events: u64,
    /// Value-tracking mismatches found (only with `track_values`).
    pub corrupted_outputs: u64,
    /// Preemption levels the device offers.
    pub device_max_level: PreemptLevel,
    /// Dynamic kernel padding figures (policies `reef`, `reef-dkp-mv`).
    pub padding: Option<PadStats>,
    /// FIKIT's figures (policies `fikit*`).
    pub fikit: Option<FikitStats>,
    /// Every profile FIKIT knew at the end (loaded and measured).
    pub fikit_profiles: Vec<Profile>,
    /// The largest DRAM draw of the resident blocks, as a fraction of the
    /// device's memory bandwidth (`Sim::dram_load_peak`); `None` when not
    /// simulated here (a live daemon run).
    pub dram_load_peak: Option<f64>,
    /// The Aker managers' figures (policies `aker`, `baymax`, `tacker`).
    pub aker: Option<reef_sched::aker::AkerStats>,
    /// Where the device's CU time went (with [`RunOptions::account`]).
    pub lost: Option<super::lost::Lost>,
    /// The scheduler's own time per decision (with
    /// [`RunOptions::decision_cost`]).
    pub decision_cost: Option<reef_exec::drive::cost::DecisionCost>,
    /// With it, the time of each padding selection made ahead of its
    /// launch, and how they fared (`reef_sched::dkp::padded::ahead`).
    pub prepare_cost: Option<reef_exec::drive::cost::DecisionCost>,
    pub ahead: Option<reef_sched::dkp::padded::AheadCounts>,
}

/// Per-operator CPU time of an eager-mode framework: 3.3 us, PyTorch's own
/// operator micro-benchmark for an eager op on CUDA tensors
/// (`split_M8_N8_parts2_cuda`, "Forward Execution Time (us) : 3.333",
/// pytorch/pytorch PR #32194). It is the framework's dispatch alone; the
/// runtime's launch call is the device's `host_launch_ns`, which the
/// simulator already charges. Real models' operators cost more (Python
/// module calls, shape logic), hence the sweep in `reef-bench fikit`.
pub const EAGER_OP_NS: Time = 3_333;
pub use reef_exec::{own_device_queues, reefnv_runtime};

/// Knobs of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub policy: String,
    pub seed: u64,
    pub dq_capacity: usize,
    /// Track buffer versions and check every finished request's outputs
    /// against an unpreempted run.
    pub track_values: bool,
    /// Host time per kernel launch of the clients' framework (`None`: back
    /// to back). See the module doc.
    pub host_gap_ns: Option<Time>,
    /// Per model, its own host time per launch (0: back to back),
    /// replacing `host_gap_ns` for every model; empty: none
    /// (`reef_exec::Driver::set_model_host_gaps`).
    pub model_host_gaps: Vec<Time>,
    /// Per model, whether its host waits for each kernel to complete
    /// before its host time for the next (with `model_host_gaps`).
    pub model_host_sync: Vec<bool>,
    /// Priority level per client (empty: RT 0, BE 9).
    pub priorities: Vec<u8>,
    /// FIKIT's parameters and the profiles it starts with.
    pub fikit: FikitConfig,
    pub fikit_profiles: Vec<Profile>,
    /// QoS targets of the Aker managers (`aker`, `baymax`, `tacker`).
    pub aker: reef_sched::aker::AkerConfig,
    /// Their profiles, shared between runs on one device and model set
    /// (built on first use when `None`).
    pub aker_profiles: Option<std::sync::Arc<reef_exec::aker::SimPredictor>>,
    /// Account the device's CU time from the event trace
    /// ([`super::lost`], `--lost`).
    pub account: bool,
    /// Time the scheduler's every decision (`--decision-cost`,
    /// `reef_exec::drive::cost`).
    pub decision_cost: bool,
    /// Padding policies make the selection for the next real-time kernel
    /// ahead of its launch (`reef_sched::dkp::padded::ahead`; the same
    /// decisions either way); false: only at the launch
    /// (`--select-at-launch`).
    pub select_ahead: bool,
    /// Per model, its stand-alone latency, ns, as measured before the run
    /// (`reef_sched::ModelInfo::alone_ns`: `reef-max`'s `guard` holds the
    /// real-time requests to a target over it); empty: not given.
    pub alone_ns: Vec<f64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            policy: "reef".into(),
            seed: 1,
            dq_capacity: 4,
            track_values: false,
            host_gap_ns: None,
            model_host_gaps: Vec::new(),
            model_host_sync: Vec::new(),
            priorities: Vec::new(),
            fikit: FikitConfig::default(),
            fikit_profiles: Vec::new(),
            aker: Default::default(),
            aker_profiles: None,
            account: false,
            decision_cost: false,
            select_ahead: true,
            alone_ns: Vec::new(),
        }
    }
}

fn xorshift(s: &mut u64) -> f64 {
    // xorshift64*: the arrival process only needs a seeded uniform source.
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    let v = s.wrapping_mul(0x2545_f491_4f6c_dd1d);
    ((v >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

impl Gen {
    /// Next launch time for an idle client at `now` (DISB's
    /// `waitUntilNextLaunch`), or `None` when it has no more launches
    /// before `end`. Dependent clients return `Some(now)` only when ready
    /// (checked by the caller).
    pub fn next(&mut self, now: Time, end: Time) -> Option<Time> {
        match self {
            Gen::Continuous | Gen::Dependent { .. } => (now < end).then_some(now),
            Gen::Count { remaining } => {
                if *remaining == 0 {
                    None
                } else {
                    *remaining -= 1;
                    Some(now)
                }
            }
            Gen::Periodic { next, interval } => {
                // Skip to the last slot whose successor has not passed
                // (DISB drops launches already late for the next slot).
                let iv = (*interval).max(1);
                let mut nl = *next;
                if nl + iv < now {
                    nl += ((now - nl).div_ceil(iv) - 1) * iv;
                }
                let nnl = nl + iv;
                if nl >= end {
                    return None;
                }
                *next = nnl;
                Some(nl.max(now))
            }
            Gen::Poisson {
                next,
                rate_per_ns,
                rng,
            } => {
                let draw = |rng: &mut u64| (-(xorshift(rng)).ln() / *rate_per_ns) as Time;
                let mut nl = *next;
                let mut nnl = nl + draw(rng);
                while nnl < now {
                    nl = nnl;
                    nnl = nl + draw(rng);
                }
                if nl >= end {
                    return None;
                }
                *next = nnl;
                Some(nl.max(now))
            }
            Gen::Trace { offsets, idx } => {
                if *idx >= offsets.len() {
                    return None;
                }
                let mut nl = offsets[*idx];
                let mut j = *idx + 1;
                while j < offsets.len() && offsets[j] < now {
                    nl = offsets[j];
                    j += 1;
                }
                *idx = j;
                if nl >= end {
                    return None;
                }
                Some(nl.max(now))
            }
        }
    }

    /// Relative deadline used for EDF ordering: the period.
    fn period(&self) -> Option<Time> {
        match self {
            Gen::Periodic { interval, .. } => Some(*interval),
            Gen::Poisson { rate_per_ns, .. } => Some((1.0 / rate_per_ns) as Time),
            _ => None,
        }
    }
}

/// Builds the client plans of a workload. `standalone_ns[m]` is model m's
/// stand-alone latency (for DISB's periodic coordination); `model_index`
/// maps a task's model directory to the run's model index.
pub fn plan_clients(
    w: &Workload,
    model_index: &dyn Fn(&str) -> usize,
    standalone_ns: &[f64],
    seed: u64,
) -> Vec<ClientPlan> {
    let mut delay_by_freq: BTreeMap<u64, f64> = BTreeMap::new();
    w.tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let model = model_index(&t.model_dir);
            let gen = match &t.load {
                Load::Continuous => Gen::Continuous,
                Load::Periodic {
                    priority,
                    frequency,
                } => {
                    let interval = (SEC / frequency) as Time;
                    let mut start = 0.0;
                    if *priority <= 0 {
                        let d = delay_by_freq.entry(frequency.to_bits()).or_default();
                        start = *d;
                        *d += standalone_ns[model];
                    }
                    Gen::Periodic {
                        next: start as Time,
                        interval,
                    }
                }
                Load::Poisson { frequency, .. } => Gen::Poisson {
                    next: 0,
                    rate_per_ns: frequency / SEC,
                    rng: seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)) | 1,
                },
                Load::Trace { offsets_ms, .. } => Gen::Trace {
                    offsets: offsets_ms
                        .iter()
                        .map(|&ms| ms as Time * 1_000_000)
                        .collect(),
                    idx: 0,
                },
                Load::Dependent { prev } => Gen::Dependent {
                    prev: prev
                        .iter()
                        .map(|p| w.tasks.iter().position(|u| &u.id == p).expect("validated"))
                        .collect(),
                },
            };
            ClientPlan {
                name: t.id.clone(),
                model,
                class: if t.real_time {
                    Class::RealTime
                } else {
                    Class::BestEffort
                },
                gen,
            }
        })
        .collect()
}

const CLIENT_SHIFT: u32 = 40;

fn req_id(client: usize, seq: u64) -> RequestId {
    RequestId(((client as u64) << CLIENT_SHIFT) | seq)
}

fn req_client(r: RequestId) -> usize {
    (r.0 >> CLIENT_SHIFT) as usize
}

fn buffer(client: usize, storage: usize) -> BufferId {
    BufferId(((client as u64 + 1) << 32) | storage as u64)
}

/// The runner's requests as the interpreter sees them: which model a
/// request runs and which buffers its kernels touch.
struct Book<'a> {
    models: &'a [PreparedModel],
    clients: Vec<ClientPlan>,
    track_values: bool,
}

impl Work for Book<'_> {
    fn model_of(&self, req: RequestId) -> Option<usize> {
        self.clients.get(req_client(req)).map(|c| c.model)
    }
    fn buffers(&self, req: RequestId, k: usize) -> reef_exec::Buffers {
        if !self.track_values {
            return (Vec::new(), Vec::new());
        }
        let ci = req_client(req);
        let kern = &self.models[self.clients[ci].model].model.kernels[k];
        (
            kern.reads.iter().map(|&b| buffer(ci, b)).collect(),
            kern.writes.iter().map(|&b| buffer(ci, b)).collect(),
        )
    }
}

struct Run<'a> {
    /// The scheduler, its executors and the simulated device, driven by
    /// reef-exec's interpreter (the daemon's engine takes the same steps).
    drv: Driver,
    book: Book<'a>,
    opts: &'a RunOptions,
    duration: Time,
    state: Vec<CState>,
    stats: Vec<ClientStats>,
    seq: Vec<u64>,
    dep_ready: Vec<BTreeMap<u64, usize>>,
    dependents: Vec<Vec<usize>>,
    reference: Vec<reef_sim::ValueTracker>,
    corrupted: u64,
    out: Vec<Outcome>,
    acct: Option<super::lost::Accountant>,
}

impl Run<'_> {
    /// Performs the scheduler's pending actions at the current instant.
    fn apply_actions(&mut self) -> anyhow::Result<()> {
        self.drv.apply(&self.book, &mut self.out);
        self.absorb()
    }

    /// What the actions did: replies reach their clients; a device refusal
    /// ends the run (its figures would not describe the policy).
    fn absorb(&mut self) -> anyhow::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let now = Device::now(&self.drv.dev);
        let mut out = std::mem::take(&mut self.out);
        for o in out.drain(..) {
            match o {
                Outcome::Done { client, .. } => self.request_done(client.0 as usize, now),
                Outcome::Rejected { client, .. } => {
                    let ci = client.0 as usize;
                    self.stats[ci].rejected = true;
                    self.state[ci] = CState::Finished;
                }
                Outcome::Failed { action, error, .. } => {
                    anyhow::bail!("policy {}: {action}: {error}", self.opts.policy)
                }
                Outcome::Queued { .. } | Outcome::Launched(_) | Outcome::Restored { .. } => {}
            }
        }
        self.out = out;
        Ok(())
    }

    fn request_done(&mut self, ci: usize, now: Time) {
        if let CState::InFlight { issued } = self.state[ci] {
            self.stats[ci].completed += 1;
            self.stats[ci].latencies.push(now - issued);
        }
        if let Some(reference) = self.reference.get_mut(ci) {
            let m = &self.book.models[self.book.clients[ci].model];
            let mut outs: Vec<BufferId> = Vec::new();
            reef_exec::replay_unpreempted(reference, m, |b| buffer(ci, b), &mut outs);
            let values =
                Device::values(&mut self.drv.dev).expect("the simulated device tracks values");
            if !values.diff(reference, &outs).is_empty() {
                self.corrupted += 1;
            }
        }
        let serial = self.stats[ci].completed;
        for &d in &self.dependents[ci] {
            *self.dep_ready[d].entry(serial).or_default() += 1;
        }
        let clients = &mut self.book.clients;
        let dependent = matches!(clients[ci].gen, Gen::Dependent { .. });
        self.state[ci] = match clients[ci].gen.next(now, self.duration) {
            Some(_) if dependent => CState::Waiting,
            Some(t) => CState::At(t),
            None => CState::Finished,
        };
    }

    /// Dependent clients whose inputs are all in become ready now.
    fn release_dependents(&mut self) {
        let now = Device::now(&self.drv.dev);
        for d in 0..self.book.clients.len() {
            if self.state[d] != CState::Waiting {
                continue;
            }
            let Gen::Dependent { prev } = &self.book.clients[d].gen else {
                continue;
            };
            let need = prev.len();
            if let Some((&serial, _)) = self.dep_ready[d].iter().find(|(_, &c)| c >= need) {
                // DISB gives up older incomplete serials.
                self.dep_ready[d] = self.dep_ready[d].split_off(&(serial + 1));
                if now < self.duration {
                    self.state[d] = CState::At(now);
                }
            }
        }
    }

    fn issue(&mut self, ci: usize, t: Time) {
        self.seq[ci] += 1;
        let req = req_id(ci, self.seq[ci]);
        self.stats[ci].issued += 1;
        self.state[ci] = CState::InFlight { issued: t };
        let c = &self.book.clients[ci];
        let deadline = c.gen.period().map(|p| t + p);
        self.drv
            .arrive(t, req, ClientId(ci as u32), c.model, deadline);
    }

    /// Accounts the device's CU time up to `t` ([`super::lost`]).
    fn account(&mut self, t: Time) {
        let Some(acct) = self.acct.as_mut() else {
            return;
        };
        if let Some(log) = self.drv.event_log.as_mut() {
            for ev in log.drain(..) {
                acct.event(&ev);
            }
        }
        let clients = &self.book.clients;
        let be_waits = clients
            .iter()
            .zip(&self.state)
            .any(|(c, s)| c.class == Class::BestEffort && matches!(s, CState::InFlight { .. }));
        let is_rt = |tags: &reef_sim::Tags| {
            clients
                .get(req_client(RequestId(tags.task)))
                .is_some_and(|c| c.class == Class::RealTime)
        };
        let sched = &self.drv.sched;
        let refused = |tags: &reef_sim::Tags| {
            sched.refused_by_selection(reef_sched::KernelTag {
                req: RequestId(tags.task),
                kernel: tags.kernel,
            })
        };
        acct.advance(&self.drv.dev, t, be_waits, &is_rt, &refused);
    }

    fn run(&mut self) -> anyhow::Result<()> {
        loop {
            self.apply_actions()?;
            self.release_dependents();
            let t_dev = Device::next_event_time(&self.drv.dev);
            let t_cli = self
                .state
                .iter()
                .filter_map(|s| match s {
                    CState::At(t) => Some(*t),
                    _ => None,
                })
                .min();
            let t_host = self.drv.next_host_time();
            let Some(t) = [t_dev, t_cli, t_host].into_iter().flatten().min() else {
                break;
            };
            if t > self.duration {
                break;
            }
            self.account(t);
            // Device events, then the host's issues at t (reef-exec's step).
            self.drv.step(t, &self.book, &mut self.out);
            self.absorb()?;
            if t_dev != Some(t) || t_cli == Some(t) {
                self.apply_actions()?;
                self.release_dependents();
                for ci in 0..self.book.clients.len() {
                    if self.state[ci] == CState::At(t) {
                        self.issue(ci, t);
                    }
                }
            }
        }
        self.account(self.duration);
        Ok(())
    }
}

/// Runs `clients` on a fresh simulated `spec` for `duration` ns of virtual
/// time (or until every client has finished).
pub fn simulate(
    spec: &DeviceSpec,
    models: &[PreparedModel],
    mut clients: Vec<ClientPlan>,
    duration: Time,
    opts: &RunOptions,
) -> anyhow::Result<RunOutcome> {
    let infos: Vec<ModelInfo> = models
        .iter()
        .enumerate()
        .map(|(i, m)| ModelInfo {
            name: m.name.clone(),
            kernels: m.shapes.len() as u32,
            idempotence: None,
            // More than any BE device queue (`dq_capacity`) holds.
            successors_clear: Some(m.model.successors_clear_of(16)),
            alone_ns: opts.alone_ns.get(i).map(|&a| a.round() as u64),
        })
        .collect();
    let specs: Vec<ClientSpec> = clients
        .iter()
        .map(|c| ClientSpec {
            name: c.name.clone(),
            model: ModelId(c.model as u32),
            class: c.class,
        })
        .collect();
    let mut drv = Driver::new(Setup {
        spec,
        models,
        infos,
        clients: specs,
        policy: &opts.policy,
        dq_capacity: opts.dq_capacity,
        priorities: opts.priorities.clone(),
        seed: opts.seed,
        host_gap_ns: opts
            .host_gap_ns
            .or((!opts.model_host_gaps.is_empty()).then_some(0)),
        fikit: opts.fikit.clone(),
        fikit_profiles: opts.fikit_profiles.clone(),
        aker: opts.aker.clone(),
        aker_profiles: opts.aker_profiles.clone(),
    })?;
    if !opts.model_host_gaps.is_empty() {
        drv.set_model_host_gaps(opts.model_host_gaps.clone(), opts.model_host_sync.clone())?;
    }
    let max_level = drv.sched.scheduler().core().config().device.max_level;
    if opts.account {
        drv.event_log = Some(Vec::new());
    }
    if opts.decision_cost {
        drv.decision_cost = Some(reef_exec::drive::cost::DecisionCost::new());
        drv.prepare_cost = Some(reef_exec::drive::cost::DecisionCost::new());
    }
    drv.sched.set_select_ahead(opts.select_ahead);
    let n = clients.len();
    let mut state = vec![CState::Waiting; n];
    for (i, c) in clients.iter_mut().enumerate() {
        if !matches!(c.gen, Gen::Dependent { .. }) {
            state[i] = match c.gen.next(0, duration) {
                Some(t) => CState::At(t),
                None => CState::Finished,
            };
        }
    }
    let dependents: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            (0..n)
                .filter(
                    |&j| matches!(&clients[j].gen, Gen::Dependent { prev } if prev.contains(&i)),
                )
                .collect()
        })
        .collect();
    // Reference values: per client, a tracker that runs the same sequence
    // of requests unpreempted (a request may read state an earlier one
    // left, so the reference advances one clean inference per reply).
    let reference = if opts.track_values {
        vec![reef_sim::ValueTracker::new(); n]
    } else {
        Vec::new()
    };
    let mut run = Run {
        drv,
        book: Book {
            models,
            clients,
            track_values: opts.track_values,
        },
        opts,
        duration,
        state,
        stats: vec![ClientStats::default(); n],
        seq: vec![0; n],
        dep_ready: vec![BTreeMap::new(); n],
        dependents,
        reference,
        corrupted: 0,
        out: Vec::new(),
        acct: opts
            .account
            .then(|| super::lost::Accountant::new(spec.compute_units as usize)),
    };
    run.run()?;
    let c = run.drv.sched.counters();
    let fikit = run
        .drv
        .sched
        .scheduler()
        .policy()
        .as_any()
        .and_then(|a| a.downcast_ref::<Fikit>());
    Ok(RunOutcome {
        fikit: fikit.map(Fikit::stats),
        fikit_profiles: fikit.map_or_else(Vec::new, |f| f.profiles().cloned().collect()),
        clients: run.stats,
        preemptions: run.drv.sched.preemptions().to_vec(),
        duration,
        restores: c.restores,
        redundant_kernels: c.redundant_kernels,
        kernels_launched: c.launches,
        device_events: run.drv.device_events,
        corrupted_outputs: run.corrupted,
        device_max_level: max_level,
        padding: run.drv.pad.as_ref().map(|p| run.drv.sched.pad_stats(p)),
        dram_load_peak: Device::dram_load_peak(&run.drv.dev),
        aker: run.drv.sched.aker_stats(),
        lost: run.acct.as_ref().map(|a| {
            let mut l = a.finish(duration);
            if let Some(p) = run.drv.pad.as_ref() {
                let total = (spec.compute_units as u128 * duration as u128).max(1) as f64;
                l.part_early = p.stats.be_early_cu_ns as f64 / total;
                l.part_early_done = p.stats.be_early_done_cu_ns as f64 / total;
            }
            l
        }),
        decision_cost: run.drv.decision_cost.take(),
        prepare_cost: run.drv.prepare_cost.take(),
        ahead: run.drv.sched.ahead_counts(),
    })
}

/// FIKIT's measuring stage for model `model` alone (fikit.txt §3.2, Fig. 6):
/// `cfg.runs` closed-loop requests under `fikit` without a profile, with
/// the given host model. Returns the profile built and the JCTs of the
/// measured runs.
pub fn measure_profile(
    spec: &DeviceSpec,
    models: &[PreparedModel],
    model: usize,
    host_gap_ns: Option<Time>,
    cfg: &FikitConfig,
    seed: u64,
) -> anyhow::Result<(Profile, Vec<Time>)> {
    let plan = vec![ClientPlan {
        name: models[model].name.clone(),
        model,
        class: Class::RealTime,
        gen: Gen::Count {
            remaining: cfg.runs.max(1),
        },
    }];
    let out = simulate(
        spec,
        models,
        plan,
        Time::MAX / 4,
        &RunOptions {
            policy: "fikit".into(),
            seed,
            host_gap_ns,
            fikit: cfg.clone(),
            ..RunOptions::default()
        },
    )?;
    let name = &models[model].name;
    let p = out
        .fikit_profiles
        .into_iter()
        .find(|p| &p.task_key == name)
        .ok_or_else(|| anyhow::anyhow!("measuring {name}: no profile after {} runs", cfg.runs))?;
    Ok((p, out.clients[0].latencies.clone()))
}

#[cfg(test)]
mod tests;
