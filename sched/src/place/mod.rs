//! Placement of GPU tasks across the devices of a node (DESIGN.md layer 3:
//! "place first, then schedule inside the device").
//!
//! Specification: Chen, Porter, Pande, "Effective GPU Sharing Under Compiler
//! Guidance" (CASE/MGB, ../shared/papers/case-mgb-compiler-guided-sharing.txt):
//! §III-A (GPU tasks; a probe `task_begin(memory, threads per block, blocks)`
//! before the task's first GPU operation, Fig. 3), §III-B (the scheduler,
//! Algorithms 2 and 3), §IV (the prototype: the device id is returned by
//! `task_begin`; "once a GPU task completes and associated resources are
//! released, MGB will attempt to pack more processes in the newly available
//! space"; the SA and CG baselines) and §V-E (schedGPU, Reaño et al. \[11\]).
//!
//! Sans-IO, like the rest of reef-sched: [`Placer::task_begin`] answers at
//! once with a device or "wait"; [`Placer::task_end`] and [`Placer::job_end`]
//! release what was reserved and reconsider the waiting tasks, whose
//! placements the caller collects with [`Placer::poll_placed`]. No clock, no
//! thread, no I/O.
//!
//! # Policies ([`PlacePolicy`]), named as the paper names them
//! - **SA** (§IV, "single assignment", as Slurm \[12\]): a job (process) is
//!   bound at its first task to the first device no job holds and keeps it
//!   until [`Placer::job_end`]; one job per device. It knows no needs: a job
//!   larger than a device is placed anyway (and crashes on the device).
//! - **CG** (§IV, "core-to-GPU", MPS packing): jobs are bound at their first
//!   task to devices in round-robin order until each device holds
//!   `jobs_per_device` jobs (the CG ratio). It knows no needs either, so it
//!   may oversubscribe memory (Table II's crashes).
//! - **schedGPU** (§V-E, \[11\]): memory is the only criterion and there is
//!   no device reassignment: every task goes to device 0, waiting while its
//!   memory does not fit ("schedGPU would schedule all jobs to run on one
//!   device, since the memory capacity is not exceeded").
//! - **Alg. 2** (§III-B, Algorithm 2): first fit over the devices; a device
//!   fits when the task's memory is free and the hardware's round-robin
//!   placement of its thread blocks, emulated per SM (blocks, warps and
//!   threads per SM against the device's limits), places every block. Both
//!   are hard constraints. *Cap* (the paper is silent): a grid larger than
//!   the device can hold resident at once (one inception kernel has 2738
//!   blocks, more than an MI50 holds at its occupancy) could never be placed
//!   by the literal algorithm; the emulation places at most one full wave of
//!   the grid, `min(blocks, resident capacity of an empty device for this
//!   block size)`, which is what the hardware itself keeps resident — the
//!   rest of the grid runs as those blocks finish. Such a task therefore
//!   needs a device with no other task's blocks emulated on it.
//!   The round-robin cursor of each device persists from task to task, as
//!   the hardware dispatcher's does.
//! - **Alg. 3** (§III-B, Algorithm 3, the one MGB is evaluated with): among
//!   the devices whose free memory covers the task, the one with the fewest
//!   warps in use; compute is a soft constraint. The printed pseudocode
//!   contradicts this: it starts `MinWarps ← 0` and switches device when
//!   `MinWarps < G.InUseWarps`, which selects the *most* loaded device and
//!   never an idle one. The prose ("picks the device with the least load in
//!   terms of number of warps currently scheduled on it") and the caption
//!   ("max available warps") agree with each other, and this module follows
//!   them. Ties go to the lowest device index. The pseudocode's strict
//!   `MemReq < FreeMem` is taken as `<=` (a task that exactly fits fits).
//!   A task's warps are its whole grid's, `blocks × ⌈threads / warp size⌉`.
//!
//! # Waiting
//! A task that fits nowhere now waits. The paper only says MGB "will attempt
//! to pack more processes in the newly available space" when resources are
//! released; the order is not given. Here every release reconsiders the
//! waiting tasks in arrival order and places each one that now fits (first
//! come first considered, later tasks may pass a waiting one that still does
//! not fit: backfilling). Cost (sched/benches/place.rs): a decision looks
//! at every device once (Alg. 2: at every SM of every device); a release
//! skips a waiting task with one comparison when its memory exceeds every
//! device's free memory, or when a task of the same grid and no more memory
//! already failed in the same pass. A task no device could ever hold (memory larger
//! than every device under a memory-safe policy, or a block larger than an
//! SM under Alg. 2) is refused at `task_begin` instead of waiting forever.

use std::collections::{HashMap, HashSet, VecDeque};

mod clients;
pub use clients::place_inference_clients;

/// Index of a device in the node, 0-based.
pub type DeviceIdx = usize;

/// A job: one process, which runs one or more GPU tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(pub u64);

/// A GPU task (§III-A): the unit placed on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

/// What a task declares at `task_begin` (Fig. 3: `task_begin(N*3, 128,
/// N/128)`): device memory, threads per block, thread blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskNeeds {
    pub memory: u64,
    pub threads_per_block: u32,
    pub blocks: u64,
}

const MIB: u64 = 1 << 20;
/// Framework context of a neural-network process (a CUDA context with the
/// cuDNN and cuBLAS kernels loaded), assumed 300 MiB: the paper gives only
/// each network's total, 0.5–1.5 GB (§V-E). Used by `reef-bench multigpu`
/// and reefd's node engine alike.
pub const NN_CONTEXT: u64 = 300 * MIB;
/// Convolution workspace of a neural-network process, assumed 256 MiB (no
/// figure in the paper).
pub const NN_WORKSPACE: u64 = 256 * MIB;

/// What a neural-network task running `m` declares at `task_begin`: its
/// buffers (weights and activations from the schedule) + [`NN_WORKSPACE`] +
/// [`NN_CONTEXT`], and the launch shape of its widest kernel (blocks ×
/// threads), as §III-A's probe takes the largest kernel of a task.
pub fn model_needs(m: &reef_model::Model) -> TaskNeeds {
    let buffers: u64 = m.buffers.iter().map(|b| b.bytes).sum();
    let widest = m
        .kernels
        .iter()
        .max_by_key(|k| k.num_blocks() * k.threads_per_block() as u64);
    TaskNeeds {
        memory: buffers + NN_WORKSPACE + NN_CONTEXT,
        threads_per_block: widest.map_or(1, |k| k.threads_per_block().max(1)),
        blocks: widest.map_or(1, |k| k.num_blocks().max(1)),
    }
}

/// One device's capacities as placement sees them. Built by the caller
/// from the device (reef-sim's `DeviceSpec`, or a hardware query).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    pub sms: u32,
    pub warp_size: u32,
    pub max_warps_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub max_threads_per_sm: u32,
    pub memory: u64,
}

impl DeviceLimits {
    fn warps_per_block(&self, threads: u32) -> u32 {
        threads.div_ceil(self.warp_size.max(1))
    }

    /// Blocks of `threads` threads one empty SM holds.
    fn blocks_per_empty_sm(&self, threads: u32) -> u32 {
        let wpb = self.warps_per_block(threads).max(1);
        self.max_blocks_per_sm
            .min(self.max_warps_per_sm / wpb)
            .min(self.max_threads_per_sm / threads.max(1))
    }
}

/// The placement policies (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacePolicy {
    Sa,
    Cg { jobs_per_device: u32 },
    SchedGpu,
    Alg2,
    Alg3,
}

/// Names accepted by [`PlacePolicy::by_name`].
pub const PLACE_POLICY_NAMES: &[&str] = &["sa", "cg:N", "schedgpu", "alg2", "alg3 (mgb)"];

impl PlacePolicy {
    /// `sa`, `cg:N` (N jobs per device), `schedgpu`, `alg2`, `alg3` or `mgb`.
    pub fn by_name(s: &str) -> Result<Self, PlaceError> {
        let bad = || PlaceError::UnknownPolicy(s.to_string());
        Ok(match s {
            "sa" => PlacePolicy::Sa,
            "schedgpu" => PlacePolicy::SchedGpu,
            "alg2" => PlacePolicy::Alg2,
            "alg3" | "mgb" => PlacePolicy::Alg3,
            _ => {
                let n = s.strip_prefix("cg:").ok_or_else(bad)?;
                let n: u32 = n.parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                PlacePolicy::Cg { jobs_per_device: n }
            }
        })
    }

    pub fn name(&self) -> String {
        match self {
            PlacePolicy::Sa => "SA".into(),
            PlacePolicy::Cg { jobs_per_device } => format!("CG {jobs_per_device}:1"),
            PlacePolicy::SchedGpu => "schedGPU".into(),
            PlacePolicy::Alg2 => "MGB Alg.2".into(),
            PlacePolicy::Alg3 => "MGB Alg.3".into(),
        }
    }

    /// True for the policies that never place a task whose memory does not
    /// fit (everything but SA and CG, which know no needs).
    pub fn memory_safe(&self) -> bool {
        matches!(
            self,
            PlacePolicy::SchedGpu | PlacePolicy::Alg2 | PlacePolicy::Alg3
        )
    }

    /// True when a job is bound to one device for its lifetime.
    fn binds_jobs(&self) -> bool {
        matches!(self, PlacePolicy::Sa | PlacePolicy::Cg { .. })
    }
}

/// Why a placement call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error(
        "unknown placement policy {0:?}: use sa, cg:N (N jobs per device), schedgpu, alg2, alg3 or mgb"
    )]
    UnknownPolicy(String),
    #[error("a node needs at least one device")]
    NoDevices,
    #[error("task {0:?} is already known")]
    DuplicateTask(TaskId),
    #[error("task {0:?} is not known (never begun, or already ended)")]
    UnknownTask(TaskId),
    #[error("task {0:?}: threads per block and blocks must be positive")]
    EmptyTask(TaskId),
    #[error(
        "task {task:?} needs {memory} B of device memory, more than any device of this node has \
         ({largest} B): split the job or run it on a larger GPU"
    )]
    NeverFitsMemory {
        task: TaskId,
        memory: u64,
        largest: u64,
    },
    #[error(
        "task {task:?}: a block of {threads} threads fits on no SM of this node: use smaller blocks"
    )]
    NeverFitsBlock { task: TaskId, threads: u32 },
}

/// The answer to `task_begin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// Run the task on this device now (§IV: `task_begin` returns the id).
    Placed(DeviceIdx),
    /// Nothing fits now; [`Placer::poll_placed`] names the device later.
    Waiting,
}

/// Per-SM usage under Alg. 2's emulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct SmUse {
    blocks: u32,
    warps: u32,
    threads: u32,
}

#[derive(Debug, Clone)]
struct Dev {
    lim: DeviceLimits,
    mem_used: u64,
    /// Memory in use that no placement reserved, as the device's driver
    /// reports it ([`Placer::set_unreserved_memory`]).
    unreserved: u64,
    warps: u64,
    tasks: u32,
    jobs: u32,
    sm: Vec<SmUse>,
    cursor: u32,
}

impl Dev {
    fn free_mem(&self) -> u64 {
        self.lim
            .memory
            .saturating_sub(self.mem_used)
            .saturating_sub(self.unreserved)
    }

    fn sm_cap(&self, i: usize, tpb: u32, wpb: u32) -> u32 {
        let u = self.sm[i];
        let l = &self.lim;
        l.max_blocks_per_sm
            .saturating_sub(u.blocks)
            .min(l.max_warps_per_sm.saturating_sub(u.warps) / wpb.max(1))
            .min(l.max_threads_per_sm.saturating_sub(u.threads) / tpb.max(1))
    }

    /// Alg. 2's emulated block count for a grid (the documented cap).
    fn alg2_blocks(&self, n: &TaskNeeds) -> u64 {
        let resident =
            self.lim.blocks_per_empty_sm(n.threads_per_block) as u64 * self.lim.sms as u64;
        n.blocks.min(resident)
    }

    /// Would Alg. 2's round-robin place every (capped) block now?
    fn alg2_fits(&self, n: &TaskNeeds) -> bool {
        let need = self.alg2_blocks(n);
        if need == 0 {
            return false;
        }
        let wpb = self.lim.warps_per_block(n.threads_per_block);
        let mut have = 0u64;
        for i in 0..self.sm.len() {
            have += self.sm_cap(i, n.threads_per_block, wpb) as u64;
            if have >= need {
                return true;
            }
        }
        false
    }

    /// Algorithm 2's GETNEXTSM / ADD loop and COMMITSMCHANGES: one block at
    /// a time on the next SM (round robin from the cursor) with room for it.
    /// Call only after [`Self::alg2_fits`]. Returns the blocks per SM.
    fn alg2_commit(&mut self, n: &TaskNeeds) -> Vec<(u32, u32)> {
        let mut left = self.alg2_blocks(n);
        let tpb = n.threads_per_block;
        let wpb = self.lim.warps_per_block(tpb);
        let sms = self.sm.len();
        let mut per_sm = vec![0u32; sms];
        let mut i = self.cursor as usize % sms;
        let mut misses = 0;
        while left > 0 && misses < sms {
            if self.sm_cap(i, tpb, wpb) > 0 {
                let u = &mut self.sm[i];
                u.blocks += 1;
                u.warps += wpb;
                u.threads += tpb;
                per_sm[i] += 1;
                left -= 1;
                misses = 0;
            } else {
                misses += 1;
            }
            i = (i + 1) % sms;
        }
        debug_assert_eq!(left, 0, "alg2_commit called on a task that does not fit");
        self.cursor = i as u32;
        per_sm
            .into_iter()
            .enumerate()
            .filter(|&(_, b)| b > 0)
            .map(|(i, b)| (i as u32, b))
            .collect()
    }
}

#[derive(Debug, Clone)]
struct Placed {
    job: JobId,
    dev: DeviceIdx,
    memory: u64,
    warps: u64,
    sm_blocks: Vec<(u32, u32)>,
    tpb: u32,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    task: TaskId,
    job: JobId,
    needs: TaskNeeds,
}

#[derive(Debug, Clone, Default)]
struct JobState {
    bound: Option<DeviceIdx>,
    tasks: Vec<TaskId>,
}

/// A read-only view of one device's placement state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceView {
    /// Memory reserved by the tasks placed here (declared needs).
    pub memory_used: u64,
    pub memory_total: u64,
    /// Warps of the tasks placed here (Alg. 3's load).
    pub warps: u64,
    /// Blocks emulated on the SMs (Alg. 2 only, else 0).
    pub sm_blocks: u64,
    pub tasks: u32,
    /// Jobs bound here (SA and CG only, else 0).
    pub jobs: u32,
}

/// Counters of placement decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlaceCounters {
    /// Tasks placed at `task_begin`.
    pub placed_at_begin: u64,
    /// Tasks that waited, then were placed after a release.
    pub placed_after_wait: u64,
    /// Tasks that had to wait at `task_begin`.
    pub waited: u64,
    /// Tasks refused at `task_begin` (never fit).
    pub refused: u64,
}

/// The placement state machine of a node.
#[derive(Debug, Clone)]
pub struct Placer {
    policy: PlacePolicy,
    devs: Vec<Dev>,
    placed: HashMap<TaskId, Placed>,
    waiting: VecDeque<Waiting>,
    waiting_ids: HashSet<TaskId>,
    jobs: HashMap<JobId, JobState>,
    out: VecDeque<(TaskId, DeviceIdx)>,
    rr: usize,
    counters: PlaceCounters,
}

impl Placer {
    pub fn new(policy: PlacePolicy, devices: Vec<DeviceLimits>) -> Result<Self, PlaceError> {
        if devices.is_empty() {
            return Err(PlaceError::NoDevices);
        }
        let devs = devices
            .into_iter()
            .map(|lim| Dev {
                sm: if policy == PlacePolicy::Alg2 {
                    vec![SmUse::default(); lim.sms.max(1) as usize]
                } else {
                    Vec::new()
                },
                lim,
                mem_used: 0,
                unreserved: 0,
                warps: 0,
                tasks: 0,
                jobs: 0,
                cursor: 0,
            })
            .collect();
        Ok(Self {
            policy,
            devs,
            placed: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_ids: HashSet::new(),
            jobs: HashMap::new(),
            out: VecDeque::new(),
            rr: 0,
            counters: PlaceCounters::default(),
        })
    }

    pub fn policy(&self) -> PlacePolicy {
        self.policy
    }

    pub fn devices(&self) -> usize {
        self.devs.len()
    }

    pub fn device(&self, d: DeviceIdx) -> Option<DeviceView> {
        self.devs.get(d).map(|v| DeviceView {
            memory_used: v.mem_used,
            memory_total: v.lim.memory,
            warps: v.warps,
            sm_blocks: v.sm.iter().map(|u| u.blocks as u64).sum(),
            tasks: v.tasks,
            jobs: v.jobs,
        })
    }

    /// Device `d`'s driver reports `used` bytes in use: whatever exceeds
    /// what this placer reserved there (another process's memory, driver
    /// state, allocations made after placement) is counted as taken, so
    /// the memory-safe policies see the smaller of the placer's and the
    /// driver's free memory (CASE/MGB §III-C: a task is placed only where
    /// its memory fits). The caller passes the driver's figure; nothing
    /// here queries a device. Waiting tasks are not reconsidered (the next
    /// `task_end` does).
    pub fn set_unreserved_memory(&mut self, d: DeviceIdx, used: u64) {
        if let Some(dev) = self.devs.get_mut(d) {
            dev.unreserved = used.saturating_sub(dev.mem_used);
        }
    }

    /// Tasks waiting for a device.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The device a placed task runs on.
    pub fn device_of(&self, t: TaskId) -> Option<DeviceIdx> {
        self.placed.get(&t).map(|p| p.dev)
    }

    pub fn counters(&self) -> PlaceCounters {
        self.counters
    }

    /// The probe (§III-A, §IV): the task's needs before its first GPU
    /// operation. Answers with its device, or `Waiting`.
    pub fn task_begin(
        &mut self,
        job: JobId,
        task: TaskId,
        needs: TaskNeeds,
    ) -> Result<Begin, PlaceError> {
        if self.placed.contains_key(&task) || self.waiting_ids.contains(&task) {
            return Err(PlaceError::DuplicateTask(task));
        }
        if needs.threads_per_block == 0 || needs.blocks == 0 {
            return Err(PlaceError::EmptyTask(task));
        }
        self.check_ever_fits(task, &needs)?;
        self.jobs.entry(job).or_default();
        match self.choose(job, &needs) {
            Some(d) => {
                self.commit(job, task, needs, d);
                self.counters.placed_at_begin += 1;
                Ok(Begin::Placed(d))
            }
            None => {
                self.waiting.push_back(Waiting { task, job, needs });
                self.waiting_ids.insert(task);
                self.counters.waited += 1;
                Ok(Begin::Waiting)
            }
        }
    }

    /// Places a task on device `d` chosen by the caller (an operator's pin,
    /// `reefctl models load --device-index`), only if its memory fits
    /// there now under a memory-safe policy (Alg. 2's per-SM state is not
    /// consulted: pins bypass the block emulation). `Ok(false)`: it does
    /// not fit, nothing changed.
    pub fn task_begin_on(
        &mut self,
        job: JobId,
        task: TaskId,
        needs: TaskNeeds,
        d: DeviceIdx,
    ) -> Result<bool, PlaceError> {
        if self.placed.contains_key(&task) || self.waiting_ids.contains(&task) {
            return Err(PlaceError::DuplicateTask(task));
        }
        if needs.threads_per_block == 0 || needs.blocks == 0 {
            return Err(PlaceError::EmptyTask(task));
        }
        let Some(dev) = self.devs.get(d) else {
            return Ok(false);
        };
        if self.policy.memory_safe() && needs.memory > dev.free_mem() {
            return Ok(false);
        }
        self.jobs.entry(job).or_default();
        self.commit(job, task, needs, d);
        self.counters.placed_at_begin += 1;
        Ok(true)
    }

    /// The task finished: release exactly what its placement reserved, then
    /// reconsider the waiting tasks. A task still waiting is withdrawn.
    pub fn task_end(&mut self, task: TaskId) -> Result<(), PlaceError> {
        if let Some(p) = self.placed.remove(&task) {
            self.release(&p);
            if let Some(j) = self.jobs.get_mut(&p.job) {
                j.tasks.retain(|&t| t != task);
            }
            self.reconsider();
            return Ok(());
        }
        if !self.waiting_ids.remove(&task) {
            return Err(PlaceError::UnknownTask(task));
        }
        self.waiting.retain(|w| w.task != task);
        Ok(())
    }

    /// The job ended, normally or by a crash: every task it still holds is
    /// released, its waiting tasks are withdrawn and its device binding (SA,
    /// CG) is dropped. Nothing another job holds is touched.
    pub fn job_end(&mut self, job: JobId) {
        self.withdraw_waiting(job);
        let Some(js) = self.jobs.remove(&job) else {
            return;
        };
        for t in js.tasks {
            if let Some(p) = self.placed.remove(&t) {
                self.release(&p);
            }
        }
        if let Some(d) = js.bound {
            self.devs[d].jobs -= 1;
        }
        self.reconsider();
    }

    fn withdraw_waiting(&mut self, job: JobId) {
        let ids = &mut self.waiting_ids;
        self.waiting.retain(|w| {
            let keep = w.job != job;
            if !keep {
                ids.remove(&w.task);
            }
            keep
        });
    }

    /// Next task placed after waiting, with its device.
    pub fn poll_placed(&mut self) -> Option<(TaskId, DeviceIdx)> {
        self.out.pop_front()
    }

    fn check_ever_fits(&mut self, task: TaskId, n: &TaskNeeds) -> Result<(), PlaceError> {
        let devs: &[Dev] = match self.policy {
            PlacePolicy::SchedGpu => &self.devs[..1],
            _ => &self.devs,
        };
        if self.policy.memory_safe() {
            let largest = devs.iter().map(|d| d.lim.memory).max().unwrap_or(0);
            if n.memory > largest {
                self.counters.refused += 1;
                return Err(PlaceError::NeverFitsMemory {
                    task,
                    memory: n.memory,
                    largest,
                });
            }
        }
        if self.policy == PlacePolicy::Alg2
            && devs
                .iter()
                .all(|d| d.lim.blocks_per_empty_sm(n.threads_per_block) == 0)
        {
            self.counters.refused += 1;
            return Err(PlaceError::NeverFitsBlock {
                task,
                threads: n.threads_per_block,
            });
        }
        Ok(())
    }

    /// The policy's decision, without side effects.
    fn choose(&self, job: JobId, n: &TaskNeeds) -> Option<DeviceIdx> {
        match self.policy {
            PlacePolicy::Sa => match self.jobs.get(&job).and_then(|j| j.bound) {
                Some(d) => Some(d),
                None => self.devs.iter().position(|d| d.jobs == 0),
            },
            PlacePolicy::Cg { jobs_per_device } => {
                match self.jobs.get(&job).and_then(|j| j.bound) {
                    Some(d) => Some(d),
                    None => {
                        let k = self.devs.len();
                        (0..k)
                            .map(|i| (self.rr + i) % k)
                            .find(|&d| self.devs[d].jobs < jobs_per_device)
                    }
                }
            }
            PlacePolicy::SchedGpu => (n.memory <= self.devs[0].free_mem()).then_some(0),
            PlacePolicy::Alg2 => self
                .devs
                .iter()
                .position(|d| n.memory <= d.free_mem() && d.alg2_fits(n)),
            PlacePolicy::Alg3 => {
                let mut best: Option<(u64, DeviceIdx)> = None;
                for (i, d) in self.devs.iter().enumerate() {
                    if n.memory <= d.free_mem() && best.is_none_or(|(w, _)| d.warps < w) {
                        best = Some((d.warps, i));
                    }
                }
                best.map(|(_, i)| i)
            }
        }
    }

    fn commit(&mut self, job: JobId, task: TaskId, n: TaskNeeds, d: DeviceIdx) {
        let dev = &mut self.devs[d];
        let warps = dev.lim.warps_per_block(n.threads_per_block) as u64 * n.blocks;
        let sm_blocks = if self.policy == PlacePolicy::Alg2 {
            dev.alg2_commit(&n)
        } else {
            Vec::new()
        };
        dev.mem_used += n.memory;
        dev.warps += warps;
        dev.tasks += 1;
        let js = self.jobs.entry(job).or_default();
        if self.policy.binds_jobs() && js.bound.is_none() {
            js.bound = Some(d);
            self.devs[d].jobs += 1;
            if matches!(self.policy, PlacePolicy::Cg { .. }) {
                self.rr = (d + 1) % self.devs.len();
            }
        }
        js.tasks.push(task);
        self.placed.insert(
            task,
            Placed {
                job,
                dev: d,
                memory: n.memory,
                warps,
                sm_blocks,
                tpb: n.threads_per_block,
            },
        );
    }

    fn release(&mut self, p: &Placed) {
        let dev = &mut self.devs[p.dev];
        dev.mem_used -= p.memory;
        dev.warps -= p.warps;
        dev.tasks -= 1;
        let wpb = dev.lim.warps_per_block(p.tpb);
        for &(sm, b) in &p.sm_blocks {
            let u = &mut dev.sm[sm as usize];
            u.blocks -= b;
            u.warps -= b * wpb;
            u.threads -= b * p.tpb;
        }
    }

    /// Places, in arrival order, every waiting task that fits now.
    fn reconsider(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        // Memory-safe policies: no waiting task whose memory exceeds the
        // largest free memory can fit; skip those with one comparison.
        let mut max_free = self.max_free();
        // Memory-safe policies decide from the needs and the device state
        // only: until something is placed in this pass, a task with the
        // shape of one that did not fit and at least its memory cannot fit
        // either (shape -> least memory that failed).
        let mut failed: HashMap<(u32, u64), u64> = HashMap::new();
        let safe = self.policy.memory_safe();
        let mut i = 0;
        while i < self.waiting.len() {
            let w = self.waiting[i];
            let shape = (w.needs.threads_per_block, w.needs.blocks);
            if safe
                && (w.needs.memory > max_free
                    || failed.get(&shape).is_some_and(|&m| w.needs.memory >= m))
            {
                i += 1;
                continue;
            }
            match self.choose(w.job, &w.needs) {
                Some(d) => {
                    self.waiting.remove(i);
                    self.waiting_ids.remove(&w.task);
                    self.commit(w.job, w.task, w.needs, d);
                    self.counters.placed_after_wait += 1;
                    self.out.push_back((w.task, d));
                    max_free = self.max_free();
                    failed.clear();
                }
                None => {
                    if safe {
                        let m = failed.entry(shape).or_insert(u64::MAX);
                        *m = (*m).min(w.needs.memory);
                    }
                    i += 1;
                }
            }
        }
    }

    fn max_free(&self) -> u64 {
        match self.policy {
            PlacePolicy::SchedGpu => self.devs[0].free_mem(),
            _ => self.devs.iter().map(Dev::free_mem).max().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests;
