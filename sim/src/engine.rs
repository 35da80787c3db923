//! The discrete-event engine (DESIGN.md "The simulator"; REEF §4.1 Fig. 7
//! for host queue → device queue → CUs, §4.2 for lazy eviction through a
//! preempt flag checked at kernel entry, §4.3 for killing running kernels,
//! §5 Fig. 12 for CU-restricted launches used by dynamic kernel padding).
//!
//! Time is integer nanoseconds. The caller owns time: it asks
//! [`Sim::next_event_time`], calls [`Sim::advance_to`] (or [`Sim::step`]),
//! and interleaves its own actions (launch, set a flag, kill, clear a queue)
//! at the current time [`Sim::now`]. Nothing here knows a scheduling policy.
//!
//! Per stream: a bounded device queue; the command processor fetches the
//! head packet (`cp_fetch_ns`, overlapping the previous kernel of the same
//! stream), then, once that previous kernel has finished (streams are in
//! order), dispatches it (`cp_dispatch_ns`). A launch becomes visible in the
//! device queue `host_launch_ns` after the call (launches of one stream are
//! serialised on the host). The preempt flag is read by every block when
//! it is dispatched to a CU (REEF §4.3 Fig. 8, the check at the entry of
//! each block; `trap-handler/src/ptx.rs` injects it there): blocks placed
//! before the flag was set run to their end, the kernel's later blocks exit
//! at entry, all of them within one `flag_check_ns` once there is room for
//! a block. A kernel none of whose blocks passed is reported evicted; one
//! whose blocks partly ran is reported completed, as a GPU's completion
//! event fires for it too, and its outputs are partly written
//! ([`EventKind::Completed`]).
//!
//! Blocks are placed on compute units under the per-CU limits (threads,
//! waves, blocks, LDS, registers), spread evenly over the allowed CUs
//! (water-filling from a rotating start CU), highest stream priority first,
//! then in dispatch order. Blocks are simulated in aggregate: the blocks a
//! placement puts on CUs with the same (blocks placed, resulting
//! co-residency) form one group with one completion event; every block still
//! runs exactly once and is accounted on its own CU. A block's duration is
//! fixed when it is placed, from the kernel's curve at the CU's co-residency
//! then: `k = ceil(resident waves on the CU / waves per block)`, so blocks of
//! different kernels contend in the same way as blocks of one kernel, unless
//! their declared pipe demands differ: then the resource mix (Aker §3,
//! [`crate::mix`]) counts a neighbour only by the load it puts on the
//! block's own pipes, and `k` may be fractional (the curve interpolated).
//! A launch may be capped to persistent blocks per CU (Aker §5.3,
//! [`KernelLaunch::persistent`]).
//! Across CUs, launches share the device's memory bandwidth (REEF §6.5
//! Fig. 27, "contention on GPU memory"): every resident block group draws
//! its kernel's DRAM bytes per block over its duration; when the groups
//! together ask more than `memory_bandwidth_bytes_per_s`, more than the
//! load a block's own curve was measured under and more than its own
//! launch draws, a block placed then has
//! the memory-bound part of its time stretched by the excess
//! ([`Sim::time_fresh_groups`]); fixed at placement too, and nil below
//! saturation. A kill
//! removes the running groups of the targeted kernels after `kill_latency_ns`
//! and discards their unplaced blocks; a kernel with no block running on a
//! flagged stream is left to exit at its blocks' flag check (REEF §4.6).

use crate::cuset::CuSet;
use crate::shape::KernelShape;
use crate::spec::{DeviceSpec, PreemptLevel};
use crate::values::{BufferId, ValueTracker};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

mod after;
mod dram;

/// A stream (one device queue), as returned by [`Sim::create_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u32);

/// A process context (a CUDA context, a ROCm process), as returned by
/// [`Sim::create_context`]. Context 0 exists from the start and holds the
/// streams of [`Sim::create_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextId(pub u32);

/// One accepted launch. Unique for the life of a [`Sim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaunchId(pub u64);

/// Caller tags carried through to every event of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tags {
    /// The caller's task / request id.
    pub task: u64,
    /// Kernel index within the task's model.
    pub kernel: u32,
    /// Anything else the caller wants back.
    pub user: u64,
}

/// A kernel launch request.
#[derive(Debug, Clone)]
pub struct KernelLaunch {
    pub shape: Arc<KernelShape>,
    pub tags: Tags,
    /// Buffers read (value tracking).
    pub reads: Vec<BufferId>,
    /// Buffers written (value tracking).
    pub writes: Vec<BufferId>,
    /// Run only these blocks of the kernel (default: all).
    pub blocks: Option<Range<u32>>,
    /// Run only on these compute units (default: all).
    pub cus: Option<CuSet>,
    /// Persistent thread blocks (Aker §5.3): at most this many of the
    /// launch's blocks resident on one CU at a time, each freed slot taking
    /// the next block, as `a` persistent blocks per CU looping over the
    /// kernel's blocks would. Every block still runs exactly once. `None`:
    /// as many as fit.
    pub persistent: Option<u32>,
    /// In a padded launch ([`Sim::launch_padded`]): `(i, delay)`, place
    /// no block of this part until part `i` (an earlier part of the same
    /// launch) has completed, and then `delay` ns later: a device-wide
    /// barrier between two kernels inside one persistent launch (CUDA C++
    /// Programming Guide, Cooperative Groups, "Grid Synchronization":
    /// `grid.sync()` in a cooperative launch; HIP's cooperative groups the
    /// same). See the `after` module.
    pub after: Option<(usize, u64)>,
}

impl KernelLaunch {
    pub fn new(shape: Arc<KernelShape>, tags: Tags) -> Self {
        KernelLaunch {
            shape,
            tags,
            reads: Vec::new(),
            writes: Vec::new(),
            blocks: None,
            cus: None,
            persistent: None,
            after: None,
        }
    }

    pub fn with_buffers(mut self, reads: Vec<BufferId>, writes: Vec<BufferId>) -> Self {
        self.reads = reads;
        self.writes = writes;
        self
    }

    pub fn with_blocks(mut self, blocks: Range<u32>) -> Self {
        self.blocks = Some(blocks);
        self
    }

    /// At most `per_cu` blocks of this launch resident per CU (persistent
    /// thread blocks, Aker §5.3); see [`KernelLaunch::persistent`].
    pub fn with_persistent(mut self, per_cu: u32) -> Self {
        self.persistent = Some(per_cu);
        self
    }

    pub fn with_cus(mut self, cus: CuSet) -> Self {
        self.cus = Some(cus);
        self
    }
}

/// Why a launch or a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("device queue of stream {stream} is full ({capacity} kernels)")]
    QueueFull { stream: u32, capacity: usize },
    #[error("no stream {0}")]
    NoSuchStream(u32),
    #[error("no context {0}")]
    NoSuchContext(u32),
    #[error("kernel {kernel}: block range {start}..{end} is empty or outside its {blocks} blocks")]
    BadBlockRange {
        kernel: String,
        start: u32,
        end: u32,
        blocks: u32,
    },
    #[error("kernel {kernel}: CU set names no compute unit of this {cus}-CU device")]
    EmptyCuSet { kernel: String, cus: u32 },
    #[error("device {device} does not support preemption level {level:?}")]
    Unsupported { device: String, level: PreemptLevel },
    #[error("stream capacity must be at least 1")]
    ZeroCapacity,
    #[error("a padded launch needs at least one part")]
    EmptyPaddedLaunch,
    #[error("part {part} waits for part {after}, not an earlier part of its padded launch")]
    BadAfter { part: usize, after: usize },
    #[error("kernel {0}: persistent blocks per CU must be at least 1")]
    ZeroPersistent(String),
    #[error("kernel {kernel}: a block does not fit on an empty {device} CU (shape built for another device?)")]
    DoesNotFit { kernel: String, device: String },
    #[error("out of device memory: {requested} B requested, {free} B of {total} B free")]
    OutOfMemory {
        requested: u64,
        free: u64,
        total: u64,
    },
}

/// What happened to a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Its first block was placed on a CU.
    Started,
    /// Its stream moved past it: all its blocks finished, or, when its
    /// stream's preempt flag was set while blocks of it were still waiting
    /// for dispatch, the blocks dispatched before finished and the rest
    /// exited at their entry check (a partly run kernel: its outputs are
    /// partly written, see [`crate::ValueTracker`]). A GPU's host cannot
    /// tell the two apart: the kernel's completion event fires either way,
    /// and REEF's execution index says only that some block of it passed
    /// its check (REEF §4.4), so the event does not either.
    Completed,
    /// Every block of it exited at its entry check because its stream's
    /// preempt flag was set (REEF §4.2): no block ran, no buffer was
    /// touched, and the execution index never named it.
    Evicted,
    /// Removed from the device queue by [`Sim::clear_queue`] before dispatch.
    Cleared,
    /// Its running blocks were killed; outputs are corrupted.
    Killed { blocks_done: u32 },
}

/// An event reported to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceEvent {
    pub time: u64,
    pub stream: StreamId,
    pub launch: LaunchId,
    pub tags: Tags,
    pub kind: EventKind,
}

/// Engine options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Seed of the block-duration jitter generator.
    pub seed: u64,
    /// Each block group's duration is multiplied by a factor drawn uniformly
    /// from [1 - jitter, 1 + jitter]. 0 (default) = deterministic durations.
    pub jitter: f64,
    /// Record every block group (for tests; costs memory).
    pub record_blocks: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            jitter: 0.0,
            record_blocks: false,
        }
    }
}

/// How a recorded group of blocks ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOutcome {
    Running,
    Finished,
    Killed,
}

/// A recorded group of blocks (with [`SimConfig::record_blocks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub launch: LaunchId,
    /// Kernel block indices run by this group.
    pub blocks: Range<u32>,
    pub cus: CuSet,
    pub per_cu: u32,
    pub start: u64,
    pub end: u64,
    pub outcome: BlockOutcome,
}

/// Resources in use on one compute unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CuUsage {
    pub threads: u32,
    pub waves: u32,
    pub blocks: u32,
    pub lds: u32,
    pub regs: u32,
}

/// Per-CU usage packed in one u128, one 25-bit lane per resource (threads,
/// waves, blocks, LDS bytes, registers): 24 value bits (every per-CU limit
/// is below 2^24) and a guard bit, so charging or freeing a CU is one add or
/// subtract, and whether one more block fits is one subtract and a mask
/// ([`fits`]). Lanes never go negative or past a CU's limit, so no carry
/// crosses lanes.
type Packed = u128;
/// Value bits per resource lane; `DeviceSpec` validation refuses limits
/// that do not fit one.
pub(crate) const LANE: u32 = 24;
/// Lane stride: the value bits and a guard bit.
const STRIDE: u32 = LANE + 1;
const LANE_MASK: u128 = (1 << LANE) - 1;
const BLOCKS_SHIFT: u32 = 2 * STRIDE;
const WAVES_SHIFT: u32 = STRIDE;
/// The guard bit of every lane.
const GUARD: Packed = {
    let mut g = 0;
    let mut i = 0;
    while i < 5 {
        g |= 1 << (i * STRIDE + LANE);
        i += 1;
    }
    g
};

/// True when `need` fits in `free` in every lane (both guard-free): setting
/// the guards and subtracting borrows from a lane's guard exactly when that
/// lane lacks room, and never crosses into the next lane.
fn fits(free: Packed, need: Packed) -> bool {
    ((free | GUARD) - need) & GUARD == GUARD
}

fn pack(u: &CuUsage) -> Packed {
    u.threads as u128
        | (u.waves as u128) << WAVES_SHIFT
        | (u.blocks as u128) << BLOCKS_SHIFT
        | (u.lds as u128) << (3 * STRIDE)
        | (u.regs as u128) << (4 * STRIDE)
}

fn unpack(p: Packed) -> CuUsage {
    let lane = |i: u32| ((p >> (i * STRIDE)) & LANE_MASK) as u32;
    CuUsage {
        threads: lane(0),
        waves: lane(1),
        blocks: lane(2),
        lds: lane(3),
        regs: lane(4),
    }
}

fn blocks_of(p: Packed) -> u32 {
    ((p >> BLOCKS_SHIFT) & LANE_MASK) as u32
}

/// One block of `sh`, packed.
fn unit_of(sh: &KernelShape) -> Packed {
    pack(&CuUsage {
        threads: sh.threads_per_block,
        waves: sh.waves_per_block,
        blocks: 1,
        lds: sh.lds_per_block,
        regs: sh.regs_per_block,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cp {
    Idle,
    Fetching(u64),
    Fetched,
    Dispatching(u64),
}

#[derive(Debug)]
struct Stream {
    priority: i32,
    capacity: usize,
    dq: VecDeque<u32>,
    host_free_at: u64,
    flag: bool,
    /// The kernel of this stream dispatched and not finished.
    running: Option<u32>,
    /// The hardware queue its packets go to.
    hwq: u32,
    /// Its process context.
    ctx: u32,
}

/// A process context's state on the device (docs/simulator.md "Contexts").
#[derive(Debug, Clone, Copy, Default)]
struct Ctx {
    /// Its blocks may be resident (it holds one of the device's
    /// `concurrent_contexts` slots).
    resident: bool,
    /// Resident, but its blocks may be placed only from this time on (the
    /// context switch that brought it in).
    ready_at: u64,
    /// End of its current time slice (meaningful while resident).
    slice_end: u64,
    /// Its slice ended while another context waited: no new block of it is
    /// placed, and it leaves once its resident blocks have finished.
    leaving: bool,
}

/// A hardware queue (docs/simulator.md "Hardware queues"): what the command
/// processor actually services. Streams of one priority share at most
/// `spec.hw_queues` of them; the packets of every stream mapped to one are
/// processed in the order they were written, each dispatched after the
/// previous one has finished (the in-order barrier the runtime sets on
/// every kernel packet), so streams sharing a queue serialise.
#[derive(Debug)]
struct HwQueue {
    priority: i32,
    /// The context whose runtime opened it (queue pools are per process).
    ctx: u32,
    /// Opened for one stream outside the runtime's pool
    /// ([`Sim::create_stream_own_queue`]); no other stream joins it.
    own: bool,
    /// Streams mapped here, in creation order.
    members: Vec<u32>,
    cp: Cp,
    /// The stream whose head packet the command processor is fetching or
    /// dispatching (meaningful while `cp` is not `Idle`).
    cur: u32,
    /// The kernel dispatched from this queue and not finished.
    running: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LState {
    Queued,
    Active,
    /// A padded launch's leader that finished before its other parts.
    Done,
}

#[derive(Debug)]
struct Launch {
    id: LaunchId,
    gen: u32,
    live: bool,
    stream: u32,
    req: KernelLaunch,
    start: u32,
    end: u32,
    next_block: u32,
    done: u32,
    visible_at: u64,
    state: LState,
    started: bool,
    /// Order key among active kernels: (priority desc, dispatch sequence).
    seq: u64,
    groups: Vec<u32>,
    cus: CuSet,
    /// Slot of the padded launch's first part (itself for a plain launch).
    leader: u32,
    /// On a leader: parts not yet finished.
    parts_left: u32,
    /// On a leader: the other parts' slots.
    followers: Vec<u32>,
    /// While blocks are unplaced: the allowed CUs that may have room for
    /// one. A placement attempt either places every block or fills every
    /// allowed CU, so after one only CUs freed since can take a block: the
    /// set is emptied by each attempt, grown by every group retirement, and
    /// the next attempt scans just these CUs (none: skipped).
    scan: CuSet,
    /// A part waiting for an earlier part of its padded launch
    /// (`KernelLaunch::after`): no block is placed while set.
    held: bool,
    /// On the part waited for: the waiting part's slot and the barrier's
    /// delay.
    then: Option<(u32, u64)>,
    /// One block's resources, packed.
    unit: Packed,
    /// Blocks that fit on an empty CU.
    cap_empty: u32,
    /// DRAM bandwidth its resident groups draw (sum of their `rate`).
    rate: u128,
    /// Blocks that exited at their preempt-flag check (never ran).
    skipped: u32,
    /// Its flagged blocks are exiting (an `Ev::EvictDone` is pending).
    exiting: bool,
    /// Persistent blocks per CU (0: no limit) and, when set, the launch's
    /// resident blocks on each CU.
    ptb: u32,
    resident: Vec<u32>,
    /// It has resident groups, and its footprint counts in `Sim::l2_used`.
    in_l2: bool,
}

/// A scheduled event. The heap is a max-heap: the earliest time, then the
/// first scheduled, compares greatest. `key` = time << 64 | scheduling
/// sequence number, unique, so one integer comparison orders events.
#[derive(Debug, Clone, Copy)]
struct Pending {
    key: u128,
    ev: Ev,
}

impl Pending {
    fn time(&self) -> u64 {
        (self.key >> 64) as u64
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

#[derive(Debug)]
struct Group {
    launch: u32,
    gen: u32,
    live: bool,
    cus: CuSet,
    per_cu: u32,
    record: usize,
    /// DRAM bandwidth the group draws, bytes/s: its blocks x the kernel's
    /// DRAM bytes per block / its duration (shared memory bandwidth).
    rate: u128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Re-evaluate a stream's command processor.
    Stream(u32),
    /// A block group finished (slot, generation).
    Group(u32, u32),
    /// A kernel's flagged blocks finished their exit (launch slot,
    /// generation).
    EvictDone(u32, u32),
    /// A kill takes effect: on one stream, or all (u32::MAX).
    Kill(u32),
    /// Re-evaluate which contexts are resident (a slice ended or a context
    /// switch completed).
    Contexts,
    /// A held part's barrier has passed (launch slot, generation).
    Release(u32, u32),
}

/// The simulated GPU.
pub struct Sim {
    spec: DeviceSpec,
    cfg: SimConfig,
    now: u64,
    seq: u64,
    heap: BinaryHeap<Pending>,
    streams: Vec<Stream>,
    hwqs: Vec<HwQueue>,
    launches: Vec<Launch>,
    free_launches: Vec<u32>,
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    active: Vec<u32>,
    usage: Vec<Packed>,
    /// The per-CU limits, packed.
    limits: Packed,
    all_cus: CuSet,
    /// CUs with at least one resident block.
    busy: usize,
    rr: usize,
    rng: u64,
    dispatch_seq: u64,
    values: ValueTracker,
    out: Vec<DeviceEvent>,
    records: Vec<BlockRecord>,
    completed: u64,
    memory_used: u64,
    /// DRAM bandwidth drawn by every resident group (sum of their `rate`).
    dram_rate: u128,
    /// The largest `dram_rate` any placement pass saw.
    dram_peak: u128,
    /// Summed footprints of the launches with resident groups (L2
    /// capacity, `time_fresh_groups`).
    l2_used: u128,
    /// The largest `l2_used` any placement pass saw.
    l2_peak: u128,
    /// Groups placed in the current placement pass, not yet timed: (group
    /// slot, generation, duration before bandwidth sharing, co-residency
    /// in 1/1024).
    fresh: Vec<(u32, u32, u64, u64)>,
    // scratch
    cand: Vec<(usize, u32, u32)>,
    /// Placement buckets: (blocks per CU, co-residency, CUs).
    buckets: Vec<(u32, u64, CuSet)>,
    /// Per CU: the resource-mix load of its resident waves (`mix.rs`).
    load: Vec<crate::mix::Load>,
    /// Process contexts; context 0 always exists.
    ctxs: Vec<Ctx>,
    /// The context that last left the device (a switch to another one
    /// costs `context_switch_ns`), and the last one brought in (round
    /// robin among the waiting ones starts after it).
    last_out: Option<u32>,
    last_in: u32,
    /// Context switches so far.
    switches: u64,
    /// Times of the pending `Ev::Contexts` events.
    ctx_wakes: std::collections::BTreeSet<u64>,
}

impl Sim {
    /// A device of `spec`, idle at time 0. A jitter outside [0, 1) is
    /// clamped into it.
    pub fn new(spec: DeviceSpec, mut cfg: SimConfig) -> Self {
        cfg.jitter = if cfg.jitter.is_finite() {
            cfg.jitter.clamp(0.0, 0.999)
        } else {
            0.0
        };
        let n = spec.compute_units as usize;
        Sim {
            all_cus: CuSet::first(n),
            usage: vec![0; n],
            limits: pack(&CuUsage {
                threads: spec.max_threads_per_cu,
                waves: spec.max_waves_per_cu,
                blocks: spec.max_blocks_per_cu,
                lds: spec.lds_bytes_per_cu,
                regs: spec.registers_per_cu,
            }),
            cand: Vec::with_capacity(n),
            buckets: Vec::new(),
            load: vec![[0; crate::mix::PIPES]; n],
            dram_rate: 0,
            dram_peak: 0,
            l2_used: 0,
            l2_peak: 0,
            fresh: Vec::new(),
            rng: cfg.seed ^ crate::rng::GOLDEN_GAMMA,
            spec,
            cfg,
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            streams: Vec::new(),
            hwqs: Vec::new(),
            launches: Vec::new(),
            free_launches: Vec::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            active: Vec::new(),
            rr: 0,
            busy: 0,
            dispatch_seq: 0,
            values: ValueTracker::new(),
            out: Vec::new(),
            records: Vec::new(),
            completed: 0,
            memory_used: 0,
            ctxs: vec![Ctx::default()],
            last_out: None,
            last_in: 0,
            switches: 0,
            ctx_wakes: std::collections::BTreeSet::new(),
        }
    }

    /// The options the simulator was built with.
    pub fn config(&self) -> SimConfig {
        self.cfg
    }

    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// Current simulated time (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Preemption levels this device supports.
    pub fn preempt_levels(&self) -> Vec<PreemptLevel> {
        self.spec.levels()
    }

    /// A new stream. Higher `priority` kernels are placed on CUs first.
    /// `device_queue_capacity` bounds its device queue (REEF §4.2 uses 4).
    /// Its packets go to a hardware queue of the runtime's pool for its
    /// priority (at most `spec.hw_queues`, shared round robin beyond that;
    /// docs/simulator.md "Hardware queues").
    pub fn create_stream(
        &mut self,
        priority: i32,
        device_queue_capacity: usize,
    ) -> Result<StreamId, SimError> {
        self.new_stream(ContextId(0), priority, device_queue_capacity, false)
    }

    /// A new process context (docs/simulator.md "Contexts"): its kernels
    /// run concurrently with those of at most `concurrent_contexts - 1`
    /// other contexts (none on NVIDIA presets); past that the device
    /// time-slices between the contexts that have work.
    pub fn create_context(&mut self) -> ContextId {
        self.ctxs.push(Ctx::default());
        ContextId(self.ctxs.len() as u32 - 1)
    }

    /// Process contexts (context 0 included).
    pub fn contexts(&self) -> usize {
        self.ctxs.len()
    }

    /// Context switches so far.
    pub fn context_switches(&self) -> u64 {
        self.switches
    }

    /// The context of a stream.
    pub fn context_of(&self, s: StreamId) -> Option<ContextId> {
        self.streams.get(s.0 as usize).map(|st| ContextId(st.ctx))
    }

    /// [`Sim::create_stream`] (or, with `own_queue`,
    /// [`Sim::create_stream_own_queue`]) in context `ctx`. Hardware-queue
    /// pools are per context, as each process's runtime opens its own.
    pub fn create_stream_in(
        &mut self,
        ctx: ContextId,
        priority: i32,
        device_queue_capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, SimError> {
        if ctx.0 as usize >= self.ctxs.len() {
            return Err(SimError::NoSuchContext(ctx.0));
        }
        self.new_stream(ctx, priority, device_queue_capacity, own_queue)
    }

    /// A new stream with a hardware queue of its own, outside the pool of
    /// [`Sim::create_stream`]: one device queue per stream, as REEF's
    /// modified runtime gives every stream (REEF §4.1 Fig. 7, §4.5
    /// `hip_set_stream_cap` "the DQ used by a GPU stream").
    pub fn create_stream_own_queue(
        &mut self,
        priority: i32,
        device_queue_capacity: usize,
    ) -> Result<StreamId, SimError> {
        self.new_stream(ContextId(0), priority, device_queue_capacity, true)
    }

    fn new_stream(
        &mut self,
        ctx: ContextId,
        priority: i32,
        device_queue_capacity: usize,
        own: bool,
    ) -> Result<StreamId, SimError> {
        if device_queue_capacity == 0 {
            return Err(SimError::ZeroCapacity);
        }
        let id = self.streams.len() as u32;
        let hwq = if own {
            self.push_hw_queue(ctx.0, priority, id, true)
        } else {
            self.map_hw_queue(ctx.0, priority, id)
        };
        self.streams.push(Stream {
            priority,
            capacity: device_queue_capacity,
            dq: VecDeque::with_capacity(device_queue_capacity.min(64)),
            host_free_at: 0,
            flag: false,
            running: None,
            hwq,
            ctx: ctx.0,
        });
        Ok(StreamId(id))
    }

    /// The hardware queue a new stream of `priority` goes to: a new one
    /// while its priority has fewer than `spec.hw_queues`, else the one of
    /// that priority with the fewest streams (the lowest index on a tie),
    /// as ROCclr's queue pool per priority does (`GPU_MAX_HW_QUEUES`);
    /// streams created in turn therefore go round robin.
    fn map_hw_queue(&mut self, ctx: u32, priority: i32, stream: u32) -> u32 {
        let mut same = 0u32;
        let mut best: Option<(usize, u32)> = None;
        for (i, q) in self.hwqs.iter().enumerate() {
            if q.priority != priority || q.own || q.ctx != ctx {
                continue;
            }
            same += 1;
            if best.is_none_or(|(n, _)| q.members.len() < n) {
                best = Some((q.members.len(), i as u32));
            }
        }
        if same < self.spec.hw_queues {
            return self.push_hw_queue(ctx, priority, stream, false);
        }
        let (_, q) = best.expect("a full pool has a queue");
        self.hwqs[q as usize].members.push(stream);
        q
    }

    fn push_hw_queue(&mut self, ctx: u32, priority: i32, stream: u32, own: bool) -> u32 {
        self.hwqs.push(HwQueue {
            priority,
            ctx,
            own,
            members: vec![stream],
            cp: Cp::Idle,
            cur: stream,
            running: None,
        });
        self.hwqs.len() as u32 - 1
    }

    /// The hardware queue a stream's packets go to (streams sharing one
    /// serialise; docs/simulator.md "Hardware queues").
    pub fn hw_queue_of(&self, s: StreamId) -> Option<u32> {
        self.streams.get(s.0 as usize).map(|st| st.hwq)
    }

    fn stream(&self, s: StreamId) -> Result<&Stream, SimError> {
        self.streams
            .get(s.0 as usize)
            .ok_or(SimError::NoSuchStream(s.0))
    }

    /// Kernels in the stream's device queue (not yet dispatched).
    pub fn queue_len(&self, s: StreamId) -> usize {
        self.stream(s).map(|st| st.dq.len()).unwrap_or(0)
    }

    /// Device queue capacity of a stream.
    pub fn queue_capacity(&self, s: StreamId) -> usize {
        self.stream(s).map(|st| st.capacity).unwrap_or(0)
    }

    /// True when the stream has nothing queued or running.
    pub fn stream_idle(&self, s: StreamId) -> bool {
        self.stream(s)
            .map(|st| st.dq.is_empty() && st.running.is_none())
            .unwrap_or(true)
    }

    /// Enqueues a kernel on a stream's device queue.
    pub fn launch(&mut self, s: StreamId, req: KernelLaunch) -> Result<LaunchId, SimError> {
        let st = self.stream(s)?;
        if st.dq.len() >= st.capacity {
            return Err(SimError::QueueFull {
                stream: s.0,
                capacity: st.capacity,
            });
        }
        if let Some((after, _)) = req.after {
            return Err(SimError::BadAfter { part: 0, after });
        }
        let (start, end, cus) = self.check_launch(&req)?;
        let st = &mut self.streams[s.0 as usize];
        let visible_at = st.host_free_at.max(self.now) + self.spec.host_launch_ns;
        st.host_free_at = visible_at;
        let slot = self.alloc_launch(s, req, start, end, cus, visible_at);
        self.streams[s.0 as usize].dq.push_back(slot);
        let q = self.streams[s.0 as usize].hwq;
        self.schedule(visible_at, Ev::Stream(q));
        Ok(self.launches[slot as usize].id)
    }

    /// Enqueues a padded launch (REEF §5.1, Fig. 12: one `dkp` kernel whose
    /// blocks run a real-time kernel and best-effort kernels): the parts
    /// occupy one device-queue slot, are fetched and dispatched once, and
    /// become runnable together, part 0 placed first. Each part has its own
    /// block range, CU set, buffers and tags, and its own events and id; the
    /// stream's next kernel is dispatched when every part has finished. The
    /// preempt flag evicts all parts; a kill kills the parts still running.
    pub fn launch_padded(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, SimError> {
        let st = self.stream(s)?;
        if st.dq.len() >= st.capacity {
            return Err(SimError::QueueFull {
                stream: s.0,
                capacity: st.capacity,
            });
        }
        if parts.is_empty() {
            return Err(SimError::EmptyPaddedLaunch);
        }
        let mut checked = Vec::with_capacity(parts.len());
        for (i, req) in parts.iter().enumerate() {
            if let Some((after, _)) = req.after.filter(|&(a, _)| a >= i) {
                return Err(SimError::BadAfter { part: i, after });
            }
            checked.push(self.check_launch(req)?);
        }
        let st = &mut self.streams[s.0 as usize];
        let visible_at = st.host_free_at.max(self.now) + self.spec.host_launch_ns;
        st.host_free_at = visible_at;
        let nparts = parts.len() as u32;
        let mut slots = Vec::with_capacity(parts.len());
        let mut ids = Vec::with_capacity(parts.len());
        for (req, (start, end, cus)) in parts.into_iter().zip(checked) {
            let slot = self.alloc_launch(s, req, start, end, cus, visible_at);
            ids.push(self.launches[slot as usize].id);
            slots.push(slot);
        }
        let leader = slots[0];
        for &slot in &slots {
            self.launches[slot as usize].leader = leader;
        }
        self.link_after(&slots);
        let l = &mut self.launches[leader as usize];
        l.parts_left = nparts;
        l.followers = slots[1..].to_vec();
        self.streams[s.0 as usize].dq.push_back(leader);
        let q = self.streams[s.0 as usize].hwq;
        self.schedule(visible_at, Ev::Stream(q));
        Ok(ids)
    }

    /// Validates one launch: (first block, end block, allowed CUs).
    fn check_launch(&self, req: &KernelLaunch) -> Result<(u32, u32, CuSet), SimError> {
        let nb = req.shape.blocks;
        let (start, end) = match &req.blocks {
            Some(r) => (r.start, r.end),
            None => (0, nb),
        };
        if start >= end || end > nb {
            return Err(SimError::BadBlockRange {
                kernel: req.shape.name.clone(),
                start,
                end,
                blocks: nb,
            });
        }
        if req.persistent == Some(0) {
            return Err(SimError::ZeroPersistent(req.shape.name.clone()));
        }
        if self.empty_cu_capacity(&req.shape) == 0 {
            return Err(SimError::DoesNotFit {
                kernel: req.shape.name.clone(),
                device: self.spec.name.clone(),
            });
        }
        let cus = match &req.cus {
            Some(c) => c.and(&self.all_cus),
            None => self.all_cus,
        };
        if cus.is_empty() {
            return Err(SimError::EmptyCuSet {
                kernel: req.shape.name.clone(),
                cus: self.spec.compute_units,
            });
        }
        Ok((start, end, cus))
    }

    fn alloc_launch(
        &mut self,
        s: StreamId,
        req: KernelLaunch,
        start: u32,
        end: u32,
        cus: CuSet,
        visible_at: u64,
    ) -> u32 {
        let (unit, cap_empty) = (unit_of(&req.shape), self.empty_cu_capacity(&req.shape));
        let slot = match self.free_launches.pop() {
            Some(i) => i,
            None => {
                self.launches.push(Launch {
                    id: LaunchId(0),
                    gen: 0,
                    live: false,
                    stream: 0,
                    req: req.clone(),
                    start: 0,
                    end: 0,
                    next_block: 0,
                    done: 0,
                    visible_at: 0,
                    state: LState::Queued,
                    started: false,
                    seq: 0,
                    groups: Vec::new(),
                    cus,
                    leader: 0,
                    parts_left: 0,
                    followers: Vec::new(),
                    held: false,
                    then: None,
                    scan: CuSet::empty(),
                    unit: 0,
                    cap_empty: 0,
                    rate: 0,
                    skipped: 0,
                    exiting: false,
                    ptb: 0,
                    resident: Vec::new(),
                    in_l2: false,
                });
                self.launches.len() as u32 - 1
            }
        };
        let l = &mut self.launches[slot as usize];
        l.gen = l.gen.wrapping_add(1);
        l.id = LaunchId(((l.gen as u64) << 32) | slot as u64);
        l.live = true;
        l.stream = s.0;
        l.req = req;
        l.start = start;
        l.end = end;
        l.next_block = start;
        l.done = 0;
        l.visible_at = visible_at;
        l.state = LState::Queued;
        l.started = false;
        l.seq = 0;
        l.groups.clear();
        l.cus = cus;
        l.leader = slot;
        l.parts_left = 1;
        l.followers.clear();
        l.held = false;
        l.then = None;
        l.scan = CuSet::empty();
        l.unit = unit;
        l.ptb = l.req.persistent.unwrap_or(0);
        l.resident.clear();
        if l.ptb > 0 {
            l.cap_empty = cap_empty.min(l.ptb);
            l.resident.resize(self.spec.compute_units as usize, 0);
        } else {
            l.cap_empty = cap_empty;
        }
        debug_assert!(!l.in_l2, "a launch slot reused with resident groups");
        l.rate = 0;
        l.skipped = 0;
        l.exiting = false;
        l.in_l2 = false;
        slot
    }

    /// Blocks of `sh` that fit on one empty CU of this device.
    fn empty_cu_capacity(&self, sh: &KernelShape) -> u32 {
        let spec = &self.spec;
        let mut cap = spec.max_threads_per_cu / sh.threads_per_block.max(1);
        cap = cap.min(spec.max_waves_per_cu / sh.waves_per_block.max(1));
        cap = cap.min(spec.max_blocks_per_cu);
        if let Some(c) = spec.lds_bytes_per_cu.checked_div(sh.lds_per_block) {
            cap = cap.min(c);
        }
        if let Some(c) = spec.registers_per_cu.checked_div(sh.regs_per_block) {
            cap = cap.min(c);
        }
        cap
    }

    /// Sets or clears a stream's preempt flag in device memory (level 2).
    /// Every block reads it when it is dispatched to a CU (REEF §4.3
    /// Fig. 8): while it is set, the stream's blocks not yet dispatched
    /// exit at entry (`flag_check_ns`), blocks already running finish. A
    /// kernel with no block run is [`EventKind::Evicted`]; one with some
    /// blocks run ends [`EventKind::Completed`] with its outputs partly
    /// written.
    pub fn set_preempt_flag(&mut self, s: StreamId, on: bool) -> Result<(), SimError> {
        self.require(PreemptLevel::PreemptFlag)?;
        self.stream(s)?;
        self.streams[s.0 as usize].flag = on;
        Ok(())
    }

    /// The stream's preempt flag.
    pub fn preempt_flag(&self, s: StreamId) -> bool {
        self.stream(s).map(|st| st.flag).unwrap_or(false)
    }

    fn require(&self, level: PreemptLevel) -> Result<(), SimError> {
        if self.spec.levels().contains(&level) {
            Ok(())
        } else {
            Err(SimError::Unsupported {
                device: self.spec.name.clone(),
                level,
            })
        }
    }

    /// Kills the running blocks of the stream's dispatched kernel(s) after
    /// the device's kill latency (level 3). Their outputs are corrupted.
    pub fn kill_stream(&mut self, s: StreamId) -> Result<(), SimError> {
        self.require(PreemptLevel::KillRunning)?;
        self.stream(s)?;
        let t = self.now + self.spec.kill_latency_ns;
        self.schedule(t, Ev::Kill(s.0));
        Ok(())
    }

    /// Kills every running kernel on the device (a CU reset) after the kill
    /// latency (level 3).
    pub fn kill_all(&mut self) -> Result<(), SimError> {
        self.require(PreemptLevel::KillRunning)?;
        let t = self.now + self.spec.kill_latency_ns;
        self.schedule(t, Ev::Kill(u32::MAX));
        Ok(())
    }

    /// Empties a stream's device queue now (REEF's CLEAR_QUEUE), except a
    /// packet the command processor is already dispatching. Each removed
    /// kernel (every part of a padded launch) is reported as
    /// [`EventKind::Cleared`]; their ids are returned in queue order.
    pub fn clear_queue(&mut self, s: StreamId) -> Result<Vec<LaunchId>, SimError> {
        self.stream(s)?;
        let q = &mut self.hwqs[self.streams[s.0 as usize].hwq as usize];
        // The command processor holds this stream's head packet when it is
        // fetching or dispatching it from the shared queue.
        let holds = q.cur == s.0 && q.cp != Cp::Idle;
        let keep = holds && matches!(q.cp, Cp::Dispatching(_));
        if holds && !keep {
            q.cp = Cp::Idle;
        }
        let st = &mut self.streams[s.0 as usize];
        let mut removed = Vec::new();
        let drained: Vec<u32> = if keep {
            st.dq.drain(1..).collect()
        } else {
            st.dq.drain(..).collect()
        };
        for leader in drained {
            for slot in self.parts_of(leader) {
                removed.push(self.launches[slot as usize].id);
                self.emit(slot, EventKind::Cleared);
                self.release_launch(slot);
            }
        }
        if holds && !keep {
            // Another stream sharing the queue may have a packet waiting.
            let q = self.streams[s.0 as usize].hwq;
            self.hwq_step(q);
        }
        Ok(removed)
    }

    /// Time of the next internal event, if any.
    pub fn next_event_time(&self) -> Option<u64> {
        self.heap.peek().map(Pending::time)
    }

    /// Processes every event up to and including `t`, then sets the time to
    /// `t` (never backwards). Returns the events, in order.
    pub fn advance_to(&mut self, t: u64) -> Vec<DeviceEvent> {
        let mut v = Vec::new();
        self.advance_into(t, &mut v);
        v
    }

    /// [`Sim::advance_to`] appending into a caller's buffer.
    pub fn advance_into(&mut self, t: u64, out: &mut Vec<DeviceEvent>) {
        out.append(&mut self.out);
        while let Some(&p) = self.heap.peek() {
            let et = p.time();
            if et > t {
                break;
            }
            self.heap.pop();
            self.now = self.now.max(et);
            self.handle(p.ev);
            out.append(&mut self.out);
        }
        self.now = self.now.max(t);
    }

    /// Processes the events of the next event time. Returns that time and
    /// its events, or None when nothing is pending.
    pub fn step(&mut self) -> Option<(u64, Vec<DeviceEvent>)> {
        let t = self.next_event_time()?;
        Some((t, self.advance_to(t)))
    }

    /// Like [`Sim::advance_to`], but paced by `clock` (wall time for the
    /// live daemon, virtual time otherwise).
    pub fn advance_with_clock(
        &mut self,
        clock: &mut dyn crate::clock::Clock,
        t: u64,
    ) -> Vec<DeviceEvent> {
        let mut out = Vec::new();
        while let Some(et) = self.next_event_time() {
            if et > t {
                break;
            }
            clock.wait_until(et);
            self.advance_into(et, &mut out);
        }
        clock.wait_until(t);
        self.advance_into(t, &mut out);
        out
    }

    /// Buffer values (value tracking).
    pub fn values(&self) -> &ValueTracker {
        &self.values
    }

    /// Mutable buffer values (to set inputs).
    pub fn values_mut(&mut self) -> &mut ValueTracker {
        &mut self.values
    }

    /// Resources in use on a CU.
    pub fn cu_usage(&self, cu: usize) -> CuUsage {
        unpack(self.usage[cu])
    }

    /// CUs with at least one resident block.
    pub fn busy_cus(&self) -> usize {
        self.busy
    }

    /// The set of CUs with at least one resident block.
    pub fn busy_cu_set(&self) -> CuSet {
        self.usage
            .iter()
            .enumerate()
            .filter(|(_, &u)| blocks_of(u) > 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// Blocks resident on the device.
    pub fn resident_blocks(&self) -> u64 {
        self.usage.iter().map(|&u| blocks_of(u) as u64).sum()
    }

    /// DRAM bandwidth the resident blocks draw now, as a fraction of the
    /// device's `memory_bandwidth_bytes_per_s` (docs/simulator.md "Shared
    /// memory bandwidth"). Above 1 the bandwidth is oversubscribed.
    pub fn dram_load(&self) -> f64 {
        self.dram_rate as f64 / self.spec.memory_bandwidth_bytes_per_s as f64
    }

    /// The summed footprints of the launches with resident blocks, as a
    /// fraction of the preset's `l2_bytes` (docs/simulator.md "L2
    /// capacity"); 0 when the preset has no L2 term. Above 1 the resident
    /// launches' data cannot all stay in the L2.
    pub fn l2_load(&self) -> f64 {
        if self.spec.l2_bytes == 0 {
            return 0.0;
        }
        self.l2_used as f64 / self.spec.l2_bytes as f64
    }

    /// The largest [`Sim::l2_load`] any placement saw so far.
    pub fn l2_load_peak(&self) -> f64 {
        if self.spec.l2_bytes == 0 {
            return 0.0;
        }
        self.l2_peak as f64 / self.spec.l2_bytes as f64
    }

    /// Every resident block group now: its launch, the launch's tags and
    /// the CUs it occupies. For observers that account device time from
    /// the event trace (`reef-bench lost`): between two events the
    /// resident groups do not change.
    pub fn for_each_resident(&self, mut f: impl FnMut(LaunchId, &Tags, &CuSet)) {
        for g in self.groups.iter().filter(|g| g.live) {
            let l = &self.launches[g.launch as usize];
            f(l.id, &l.req.tags, &g.cus);
        }
    }

    /// The largest [`Sim::dram_load`] any placement saw so far.
    pub fn dram_load_peak(&self) -> f64 {
        self.dram_peak as f64 / self.spec.memory_bandwidth_bytes_per_s as f64
    }

    /// Reserves device memory (model weights, activations); fails when the
    /// device's `memory_bytes` would be exceeded.
    pub fn alloc(&mut self, bytes: u64) -> Result<(), SimError> {
        let total = self.spec.memory_bytes;
        let free = total - self.memory_used;
        if bytes > free {
            return Err(SimError::OutOfMemory {
                requested: bytes,
                free,
                total,
            });
        }
        self.memory_used += bytes;
        Ok(())
    }

    /// Releases device memory reserved with [`Sim::alloc`].
    pub fn free(&mut self, bytes: u64) {
        self.memory_used = self.memory_used.saturating_sub(bytes);
    }

    /// Device memory in use.
    pub fn memory_used(&self) -> u64 {
        self.memory_used
    }

    /// Kernels completed so far.
    pub fn completed_kernels(&self) -> u64 {
        self.completed
    }

    /// Blocks of live launch `id` placed on compute units so far (`None`:
    /// not live). reef-libcuda-sim reads it when a preempt flag changes,
    /// to know which blocks passed the check (issue 26), without keeping
    /// every block record for a process's life.
    pub fn blocks_placed(&self, id: LaunchId) -> Option<u32> {
        let l = self.launches.get((id.0 & 0xffff_ffff) as usize)?;
        (l.live && l.id == id).then(|| l.next_block - l.start)
    }

    /// Recorded block groups (with [`SimConfig::record_blocks`]).
    pub fn block_records(&self) -> &[BlockRecord] {
        &self.records
    }

    /// Checks that no CU exceeds its limits and that per-CU usage equals the
    /// sum over the resident block groups. For tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let s = &self.spec;
        let mut sum = vec![CuUsage::default(); self.usage.len()];
        for g in self.groups.iter().filter(|g| g.live) {
            let sh = &self.launches[g.launch as usize].req.shape;
            for cu in g.cus.iter() {
                let u = &mut sum[cu];
                u.threads += g.per_cu * sh.threads_per_block;
                u.waves += g.per_cu * sh.waves_per_block;
                u.blocks += g.per_cu;
                u.lds += g.per_cu * sh.lds_per_block;
                u.regs += g.per_cu * sh.regs_per_block;
            }
        }
        for (cu, (&p, e)) in self.usage.iter().zip(&sum).enumerate() {
            let u = &unpack(p);
            if u != e {
                return Err(format!("CU {cu}: usage {u:?} != resident groups {e:?}"));
            }
            if u.threads > s.max_threads_per_cu
                || u.waves > s.max_waves_per_cu
                || u.blocks > s.max_blocks_per_cu
                || u.lds > s.lds_bytes_per_cu
                || u.regs > s.registers_per_cu
            {
                return Err(format!("CU {cu} over its limits: {u:?}"));
            }
        }
        let rate: u128 = self.groups.iter().filter(|g| g.live).map(|g| g.rate).sum();
        if rate != self.dram_rate {
            return Err(format!(
                "DRAM draw {} B/s != resident groups' {rate} B/s",
                self.dram_rate
            ));
        }
        let l2: u128 = self
            .launches
            .iter()
            .filter(|l| !l.groups.is_empty())
            .map(|l| l.req.shape.footprint_bytes as u128)
            .sum();
        if l2 != self.l2_used || self.launches.iter().any(|l| l.in_l2 == l.groups.is_empty()) {
            return Err(format!(
                "L2 footprint {} B != resident launches' {l2} B",
                self.l2_used
            ));
        }
        let busy = self.usage.iter().filter(|&&u| blocks_of(u) > 0).count();
        if busy != self.busy {
            return Err(format!("busy CU count {} != {busy}", self.busy));
        }
        for (i, st) in self.streams.iter().enumerate() {
            if st.dq.len() > st.capacity {
                return Err(format!(
                    "stream {i}: device queue holds {} > capacity {}",
                    st.dq.len(),
                    st.capacity
                ));
            }
        }
        Ok(())
    }

    // ---- internals ----

    fn schedule(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Pending {
            key: (t as u128) << 64 | self.seq as u128,
            ev,
        });
    }

    fn emit(&mut self, slot: u32, kind: EventKind) {
        let l = &self.launches[slot as usize];
        self.out.push(DeviceEvent {
            time: self.now,
            stream: StreamId(l.stream),
            launch: l.id,
            tags: l.req.tags,
            kind,
        });
    }

    /// The slots of a padded launch, leader first.
    fn parts_of(&self, leader: u32) -> Vec<u32> {
        let mut v = Vec::with_capacity(1 + self.launches[leader as usize].followers.len());
        v.push(leader);
        v.extend_from_slice(&self.launches[leader as usize].followers);
        v
    }

    /// A part finished (completed or killed): frees it, and when it was the
    /// last part of its launch, frees the stream for its next kernel.
    fn finish_part(&mut self, slot: u32) {
        self.remove_active(slot);
        let (s, leader) = {
            let l = &self.launches[slot as usize];
            (l.stream, l.leader)
        };
        let ld = &mut self.launches[leader as usize];
        ld.parts_left -= 1;
        let last = ld.parts_left == 0;
        if slot != leader {
            self.release_launch(slot);
        } else if !last {
            self.launches[slot as usize].state = LState::Done;
        }
        if last {
            if slot != leader {
                self.release_launch(leader);
            } else {
                self.release_launch(slot);
            }
            self.streams[s as usize].running = None;
            let q = self.streams[s as usize].hwq;
            self.hwqs[q as usize].running = None;
            self.hwq_step(q);
        }
    }

    fn release_launch(&mut self, slot: u32) {
        let l = &mut self.launches[slot as usize];
        l.live = false;
        l.req.reads = Vec::new();
        l.req.writes = Vec::new();
        self.free_launches.push(slot);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Stream(q) => self.hwq_step(q),
            Ev::Group(g, gen) => self.group_done(g, gen),
            Ev::EvictDone(slot, gen) => {
                let l = &mut self.launches[slot as usize];
                if l.live && l.gen == gen && l.exiting {
                    l.exiting = false;
                    if l.done + l.skipped == l.end - l.start {
                        self.end_launch(slot);
                    }
                }
            }
            Ev::Kill(target) => self.kill_effect(target),
            Ev::Contexts => {
                self.ctx_wakes.remove(&self.now);
                self.place();
            }
            Ev::Release(slot, gen) => self.release(slot, gen),
        }
    }

    /// Advances a hardware queue's command processor: fetch the packet
    /// written first among its streams' heads (`cp_fetch_ns`, overlapping
    /// the running kernel), dispatch it once the queue's previous kernel has
    /// finished (`cp_dispatch_ns`), then make it runnable (or, if its
    /// stream's preempt flag is set, let it exit after `flag_check_ns`).
    fn hwq_step(&mut self, q: u32) {
        let now = self.now;
        loop {
            let hq = &self.hwqs[q as usize];
            match hq.cp {
                Cp::Idle => {
                    // The head written first (ring order); a single member
                    // is the common case.
                    let mut pick: Option<(u64, u64, u32)> = None;
                    for &m in &hq.members {
                        if let Some(&head) = self.streams[m as usize].dq.front() {
                            let l = &self.launches[head as usize];
                            let key = (l.visible_at, l.id.0, m);
                            if pick.is_none_or(|p| key < p) {
                                pick = Some(key);
                            }
                        }
                    }
                    let Some((vis, _, m)) = pick else { break };
                    if vis <= now {
                        let until = now + self.spec.cp_fetch_ns;
                        let hq = &mut self.hwqs[q as usize];
                        hq.cp = Cp::Fetching(until);
                        hq.cur = m;
                        self.schedule(until, Ev::Stream(q));
                    }
                    // else: an Ev::Stream at `vis` was scheduled by launch().
                    break;
                }
                Cp::Fetching(until) => {
                    if until <= now {
                        self.hwqs[q as usize].cp = Cp::Fetched;
                        continue;
                    }
                    break;
                }
                Cp::Fetched => {
                    if hq.running.is_none() {
                        let until = now + self.spec.cp_dispatch_ns;
                        self.hwqs[q as usize].cp = Cp::Dispatching(until);
                        self.schedule(until, Ev::Stream(q));
                    }
                    break;
                }
                Cp::Dispatching(until) => {
                    if until > now {
                        break;
                    }
                    let s = hq.cur;
                    let st = &mut self.streams[s as usize];
                    let slot = st.dq.pop_front().expect("dispatching a queued kernel");
                    st.running = Some(slot);
                    let prio = st.priority;
                    let hq = &mut self.hwqs[q as usize];
                    hq.cp = Cp::Idle;
                    hq.running = Some(slot);
                    // The blocks read the preempt flag when they are placed
                    // (`place`), not here: a kernel dispatched while it is
                    // set exits once its first blocks get a CU.
                    let nf = self.launches[slot as usize].followers.len();
                    for i in 0..=nf {
                        let part = if i == 0 {
                            slot
                        } else {
                            self.launches[slot as usize].followers[i - 1]
                        };
                        self.dispatch_seq += 1;
                        let l = &mut self.launches[part as usize];
                        l.state = LState::Active;
                        l.seq = self.dispatch_seq;
                        l.scan = l.cus;
                        // Insert keeping (priority desc, seq asc) order.
                        let key = (Reverse(prio), self.dispatch_seq);
                        let pos = self.active.partition_point(|&a| {
                            let la = &self.launches[a as usize];
                            (Reverse(self.streams[la.stream as usize].priority), la.seq) < key
                        });
                        self.active.insert(pos, part);
                    }
                    self.place();
                    continue;
                }
            }
        }
    }

    /// The context mechanism (docs/simulator.md "Contexts"; CUDA C
    /// Programming Guide "Concurrent Kernel Execution": kernels of
    /// different contexts never run concurrently without MPS; the NVIDIA
    /// driver's channel-group timeslice): a context holds one of the
    /// device's `concurrent_contexts` slots, idle or not, until a context
    /// with work needs the slot. Such a context gets a free slot, else
    /// that of a resident context with no work left (it idled), or that of
    /// a resident context whose time slice has ended:
    /// that one stops dispatching blocks and leaves once its resident
    /// blocks have finished (a switch at block boundaries; the hardware's
    /// instruction-level compute preemption would save them instead).
    /// Bringing a context in after another left costs `context_switch_ns`,
    /// during which none of its blocks is placed; with one context (every
    /// caller that never calls [`Sim::create_context`]) nothing of this
    /// runs.
    fn switch_contexts(&mut self) {
        let now = self.now;
        let n = self.ctxs.len();
        // Work: a dispatched kernel, or a packet visible in a device queue.
        let mut work = vec![false; n];
        let mut blocks = vec![false; n];
        for &a in &self.active {
            let l = &self.launches[a as usize];
            let c = self.streams[l.stream as usize].ctx as usize;
            work[c] = true;
            if !l.groups.is_empty() || l.exiting {
                blocks[c] = true;
            }
        }
        for st in &self.streams {
            if let Some(&h) = st.dq.front() {
                if self.launches[h as usize].visible_at <= now {
                    work[st.ctx as usize] = true;
                }
            }
        }
        let waiting = |ctxs: &[Ctx], work: &[bool]| (0..n).any(|c| work[c] && !ctxs[c].resident);
        // An idle context keeps its slot (the runlist keeps it mapped)
        // until a waiting context needs one.
        let want = (0..n)
            .filter(|&c| work[c] && !self.ctxs[c].resident)
            .count() as u32;
        let held = self.ctxs.iter().filter(|c| c.resident).count() as u32;
        let mut to_free = (held + want).saturating_sub(self.spec.concurrent_contexts);
        let slice = self.spec.context_timeslice_ns;
        for c in 0..n {
            let cx = self.ctxs[c];
            if !cx.resident {
                continue;
            }
            let gone = if cx.leaving {
                !blocks[c]
            } else if !work[c] && cx.ready_at <= now && to_free > 0 {
                to_free -= 1;
                true
            } else {
                false
            };
            if gone {
                self.ctxs[c].resident = false;
                self.ctxs[c].leaving = false;
                self.last_out = Some(c as u32);
                continue;
            }
            if slice > 0 && !cx.leaving && cx.ready_at <= now && waiting(&self.ctxs, &work) {
                if cx.slice_end <= now {
                    // Its slice is over and a context waits: it leaves.
                    self.ctxs[c].leaving = true;
                    if !blocks[c] {
                        self.ctxs[c].resident = false;
                        self.ctxs[c].leaving = false;
                        self.last_out = Some(c as u32);
                    }
                } else {
                    self.wake_contexts_at(cx.slice_end);
                }
            } else if slice > 0 && cx.slice_end <= now {
                // Alone (or still coming in): the next slice starts.
                let k = (now - cx.slice_end) / slice + 1;
                self.ctxs[c].slice_end = cx.slice_end + k * slice;
            }
        }
        // Fill free slots, round robin from the context brought in last.
        let mut resident = self.ctxs.iter().filter(|c| c.resident).count() as u32;
        let mut i = 0;
        while resident < self.spec.concurrent_contexts && i < n {
            let c = (self.last_in as usize + 1 + i) % n;
            i += 1;
            if !work[c] || self.ctxs[c].resident {
                continue;
            }
            // A switch when the device last held another context and none
            // is resident now (contexts beside resident ones are mapped
            // concurrently, at no switch).
            let cost = match self.last_out {
                Some(o) if o as usize != c && resident == 0 => self.spec.context_switch_ns,
                _ => 0,
            };
            if self.last_out.is_some_and(|o| o as usize != c) && resident == 0 {
                self.switches += 1;
            }
            let ready = now + cost;
            self.ctxs[c] = Ctx {
                resident: true,
                ready_at: ready,
                slice_end: ready + slice,
                leaving: false,
            };
            self.last_in = c as u32;
            resident += 1;
            // Its blocks may go wherever there is room once it is ready.
            for &a in &self.active {
                let l = &mut self.launches[a as usize];
                if self.streams[l.stream as usize].ctx as usize == c && l.next_block < l.end {
                    l.scan = l.cus;
                }
            }
            if cost > 0 {
                self.wake_contexts_at(ready);
            }
        }
    }

    /// Schedules a context re-evaluation at `t` unless one is pending then.
    fn wake_contexts_at(&mut self, t: u64) {
        if self.ctx_wakes.insert(t) {
            self.schedule(t, Ev::Contexts);
        }
    }

    fn next_jitter(&mut self) -> f64 {
        let u = crate::rng::unit_f64(crate::rng::splitmix64(&mut self.rng));
        1.0 + self.cfg.jitter * (2.0 * u - 1.0)
    }

    /// Places pending blocks of active kernels, in priority/dispatch order,
    /// then times the groups placed (see [`Sim::time_fresh_groups`]).
    fn place(&mut self) {
        let multi = self.ctxs.len() > 1;
        if multi {
            self.switch_contexts();
        }
        let now = self.now;
        let mut i = 0;
        while i < self.active.len() {
            let slot = self.active[i];
            let l = &self.launches[slot as usize];
            if multi {
                // Only the blocks of a resident, ready context that is not
                // leaving are dispatched (its waiting blocks, flagged ones
                // included, wait; their CU scan is kept for later).
                let c = &self.ctxs[self.streams[l.stream as usize].ctx as usize];
                if !c.resident || c.leaving || c.ready_at > now {
                    i += 1;
                    continue;
                }
            }
            let flag = self.streams[l.stream as usize].flag;
            if l.held && !flag {
                // Waiting at its barrier; flagged, its blocks exit at
                // their check as any part's.
                i += 1;
                continue;
            }
            if l.next_block < l.end && !l.scan.is_empty() {
                if flag {
                    self.flag_exit(slot);
                } else {
                    self.place_launch(slot);
                }
            }
            i += 1;
        }
        if !self.fresh.is_empty() {
            self.time_fresh_groups();
        }
    }

    fn place_launch(&mut self, slot: u32) {
        let spec = &self.spec;
        let n = spec.compute_units as usize;
        let l = &self.launches[slot as usize];
        let sh = &*l.req.shape;
        let (tpb, wpb, lds, regs) = (
            sh.threads_per_block,
            sh.waves_per_block,
            sh.lds_per_block,
            sh.regs_per_block,
        );
        let (allowed, scan, unit, cap_empty) = (l.cus, l.scan, l.unit, l.cap_empty);
        let mut remaining = l.end - l.next_block;
        // Capacity of a CU in use (an empty CU's is `cap_empty`).
        let cap_of = |u: &CuUsage| -> u32 {
            let mut cap = (spec.max_threads_per_cu - u.threads) / tpb;
            cap = cap.min((spec.max_waves_per_cu - u.waves) / wpb);
            cap = cap.min(spec.max_blocks_per_cu - u.blocks);
            if let Some(c) = (spec.lds_bytes_per_cu - u.lds).checked_div(lds) {
                cap = cap.min(c);
            }
            if let Some(c) = (spec.registers_per_cu - u.regs).checked_div(regs) {
                cap = cap.min(c);
            }
            cap
        };
        // After this attempt every block is placed or every allowed CU is
        // full for this kernel (see `Launch::scan`).
        self.launches[slot as usize].scan = CuSet::empty();
        self.buckets.clear();
        if self.busy == 0 && allowed == self.all_cus {
            // Fast path, idle device: an even spread, at most two buckets.
            let per = cap_empty.min(remaining / n as u32);
            let extra = if per < cap_empty {
                (remaining - per * n as u32) as usize
            } else {
                0
            };
            // CUs rr, rr+1, ... (wrapping) get one block more.
            let end = self.rr + extra;
            let more =
                CuSet::range(self.rr, end.min(n)).or(&CuSet::range(0, end.saturating_sub(n)));
            if extra > 0 {
                self.rr = (self.rr + extra) % n;
            }
            let rest = self.all_cus.minus(&more);
            for (a, set) in [(per + 1, more), (per, rest)] {
                if a == 0 || set.is_empty() {
                    continue;
                }
                let charge = a as u128 * unit;
                let demand = self.launches[slot as usize].req.shape.demand;
                let ptb = self.launches[slot as usize].ptb;
                for cu in set.iter() {
                    if ptb > 0 {
                        self.launches[slot as usize].resident[cu] += a;
                    }
                    self.usage[cu] = charge;
                    self.load[cu] = [0; crate::mix::PIPES];
                    crate::mix::charge(&mut self.load[cu], &demand, (a * wpb) as u64, true);
                }
                self.busy += set.len();
                self.buckets
                    .push((a, a as u64 * crate::mix::ONE as u64, set));
            }
            self.make_groups(slot);
            return;
        }
        // Candidates (cu, capacity left, blocks allotted) in rotating order
        // from self.rr. With fewer blocks than candidates each of the first
        // `remaining` candidates gets one block, so the scan stops there.
        // Only the CUs of `scan` can have room (the others are full for this
        // kernel), so only they are visited, in the same order.
        self.cand.clear();
        let mut early = false;
        for cu in scan.iter_from(self.rr) {
            let u = self.usage[cu];
            let mut cap = if u == 0 {
                cap_empty
            } else if !fits(self.limits - u, unit) {
                0
            } else {
                cap_of(&unpack(u))
            };
            let l = &self.launches[slot as usize];
            if l.ptb > 0 {
                cap = cap.min(l.ptb - l.resident[cu]);
            }
            if cap > 0 {
                self.cand.push((cu, cap, 0));
                if self.cand.len() as u32 == remaining {
                    early = true;
                    break;
                }
            }
        }
        let Some(&(last_cand, _, _)) = self.cand.last() else {
            return;
        };
        if early {
            for c in self.cand.iter_mut() {
                c.2 = 1;
            }
            self.rr = (last_cand + 1) % n;
        } else {
            // Water-filling: spread blocks evenly over the candidate CUs.
            let mut active = self.cand.len() as u32;
            while remaining > 0 && active > 0 {
                let even = remaining / active;
                if even == 0 {
                    let mut last = 0;
                    for c in self
                        .cand
                        .iter_mut()
                        .filter(|c| c.1 > 0)
                        .take(remaining as usize)
                    {
                        c.1 -= 1;
                        c.2 += 1;
                        last = c.0;
                    }
                    self.rr = (last + 1) % n;
                    break;
                }
                let min_cap = self
                    .cand
                    .iter()
                    .filter(|c| c.1 > 0)
                    .map(|c| c.1)
                    .min()
                    .unwrap_or(0);
                let t = min_cap.min(even);
                remaining -= t * active;
                for c in self.cand.iter_mut().filter(|c| c.1 > 0) {
                    c.1 -= t;
                    c.2 += t;
                    if c.1 == 0 {
                        active -= 1;
                    }
                }
            }
        }
        // Bucket CUs by (blocks placed, resulting co-residency).
        let demand = self.launches[slot as usize].req.shape.demand;
        for &(cu, _, a) in &self.cand {
            if a == 0 {
                continue;
            }
            let u = &mut self.usage[cu];
            if *u == 0 {
                self.busy += 1;
            }
            *u += a as u128 * unit;
            let waves = ((*u >> WAVES_SHIFT) & LANE_MASK) as u32;
            // Co-residency seen by the block, in 1/1024 (resource mix,
            // mix.rs): ceil(waves / wpb) when every resident wave has this
            // kernel's demand, less when its neighbours use other pipes.
            let load = &mut self.load[cu];
            crate::mix::charge(load, &demand, (a * wpb) as u64, true);
            let l = &mut self.launches[slot as usize];
            if l.ptb > 0 {
                l.resident[cu] += a;
            }
            let k = crate::mix::Mix::k_fixed(&demand, wpb, waves, load);
            match self.buckets.iter_mut().find(|b| b.0 == a && b.1 == k) {
                Some(b) => b.2.insert(cu),
                None => {
                    let mut set = CuSet::empty();
                    set.insert(cu);
                    self.buckets.push((a, k, set));
                }
            }
        }
        self.make_groups(slot);
    }

    /// Creates one block group per bucket (blocks per CU, co-residency, CUs);
    /// CU usage has already been charged.
    fn make_groups(&mut self, slot: u32) {
        let buckets = std::mem::take(&mut self.buckets);
        let now = self.now;
        if !self.launches[slot as usize].started {
            self.launches[slot as usize].started = true;
            self.emit(slot, EventKind::Started);
        }
        for &(per_cu, k, set) in &buckets {
            let count = per_cu * set.len() as u32;
            let mut dur = self.launches[slot as usize].req.shape.exec_ns_fixed(k);
            if self.cfg.jitter > 0.0 {
                dur = ((dur as f64 * self.next_jitter()) as u64).max(1);
            }
            let l = &mut self.launches[slot as usize];
            let first = l.next_block;
            l.next_block += count;
            let lid = l.id;
            let gslot = match self.free_groups.pop() {
                Some(g) => g,
                None => {
                    self.groups.push(Group {
                        launch: 0,
                        gen: 0,
                        live: false,
                        cus: CuSet::empty(),
                        per_cu: 0,
                        record: usize::MAX,
                        rate: 0,
                    });
                    self.groups.len() as u32 - 1
                }
            };
            let record = if self.cfg.record_blocks {
                self.records.push(BlockRecord {
                    launch: lid,
                    blocks: first..first + count,
                    cus: set,
                    per_cu,
                    start: now,
                    end: now + dur,
                    outcome: BlockOutcome::Running,
                });
                self.records.len() - 1
            } else {
                usize::MAX
            };
            // DRAM draw of the group: its blocks' bytes over its duration.
            let rate = (count as u128)
                .saturating_mul(self.launches[slot as usize].req.shape.dram_bytes_per_block as u128)
                .saturating_mul(1_000_000_000)
                / dur.max(1) as u128;
            let g = &mut self.groups[gslot as usize];
            g.launch = slot;
            g.gen = g.gen.wrapping_add(1);
            g.live = true;
            g.cus = set;
            g.per_cu = per_cu;
            g.record = record;
            g.rate = rate;
            let gen = g.gen;
            let l = &mut self.launches[slot as usize];
            l.groups.push(gslot);
            l.rate += rate;
            if !l.in_l2 {
                l.in_l2 = true;
                self.l2_used += l.req.shape.footprint_bytes as u128;
            }
            self.dram_rate += rate;
            // Timed once the whole pass is placed (`time_fresh_groups`).
            self.fresh.push((gslot, gen, dur, k));
        }
        self.buckets = buckets;
    }

    /// Frees a group's resources; returns (launch slot, blocks).
    fn retire_group(&mut self, gslot: u32, outcome: BlockOutcome) -> (u32, u32) {
        let g = &mut self.groups[gslot as usize];
        g.live = false;
        let (slot, per_cu, cus, record, rate) = (g.launch, g.per_cu, g.cus, g.record, g.rate);
        self.free_groups.push(gslot);
        self.dram_rate -= rate;
        self.launches[slot as usize].rate -= rate;
        let free = per_cu as u128 * self.launches[slot as usize].unit;
        let (demand, wpb) = {
            let sh = &self.launches[slot as usize].req.shape;
            (sh.demand, sh.waves_per_block)
        };
        for cu in cus.iter() {
            crate::mix::charge(&mut self.load[cu], &demand, (per_cu * wpb) as u64, false);
            let l = &mut self.launches[slot as usize];
            if l.ptb > 0 {
                l.resident[cu] -= per_cu;
            }
            let u = &mut self.usage[cu];
            *u -= free;
            if *u == 0 {
                self.busy -= 1;
            }
        }
        // Kernels waiting for room may now fit on these CUs.
        for &a in &self.active {
            let l = &mut self.launches[a as usize];
            if l.next_block < l.end {
                l.scan = l.scan.or(&cus.and(&l.cus));
            }
        }
        if record != usize::MAX {
            let r = &mut self.records[record];
            r.outcome = outcome;
            if outcome == BlockOutcome::Killed {
                r.end = self.now;
            }
        }
        let l = &mut self.launches[slot as usize];
        if let Some(p) = l.groups.iter().position(|&x| x == gslot) {
            l.groups.swap_remove(p);
        }
        if l.groups.is_empty() && l.in_l2 {
            l.in_l2 = false;
            self.l2_used -= l.req.shape.footprint_bytes as u128;
        }
        (slot, per_cu * cus.len() as u32)
    }

    fn group_done(&mut self, gslot: u32, gen: u32) {
        let g = &self.groups[gslot as usize];
        if !g.live || g.gen != gen {
            return;
        }
        let (slot, blocks) = self.retire_group(gslot, BlockOutcome::Finished);
        let l = &mut self.launches[slot as usize];
        l.done += blocks;
        if l.done + l.skipped == l.end - l.start && !l.exiting {
            self.end_launch(slot);
        }
        self.place();
    }

    /// The blocks of `slot` not yet dispatched read its stream's preempt
    /// flag, set, and exit at entry (REEF §4.3 Fig. 8: the check is the
    /// first thing every block does). A block needs a CU slot to run its
    /// check, so this happens only once one of the launch's allowed CUs has
    /// room for a block; then all of them exit, and the exit costs the
    /// device's `flag_check_ns` (REEF §6.4 Fig. 20(b), the per-kernel cost
    /// of a lazily evicted kernel: the exiting blocks pass through the free
    /// slots together in that time, holding no resources afterwards).
    fn flag_exit(&mut self, slot: u32) {
        let l = &self.launches[slot as usize];
        let (scan, unit, ptb) = (l.scan, l.unit, l.ptb);
        let room = scan.iter().any(|cu| {
            let u = self.usage[cu];
            let fits_cu = u == 0 || fits(self.limits - u, unit);
            fits_cu && (ptb == 0 || self.launches[slot as usize].resident[cu] < ptb)
        });
        let l = &mut self.launches[slot as usize];
        l.scan = CuSet::empty();
        if !room {
            return;
        }
        l.skipped = l.end - l.next_block;
        l.next_block = l.end;
        l.exiting = true;
        let gen = l.gen;
        self.schedule(self.now + self.spec.flag_check_ns, Ev::EvictDone(slot, gen));
    }

    /// Every block of the launch has finished or exited at its flag check.
    fn end_launch(&mut self, slot: u32) {
        let l = &self.launches[slot as usize];
        if l.done == 0 {
            // No block passed its check: evicted, nothing written.
            self.emit(slot, EventKind::Evicted);
            self.finish_part(slot);
            return;
        }
        let sh = &l.req.shape;
        // The blocks that ran are the first ones of its range (blocks are
        // dispatched in index order): they wrote their part of the outputs.
        let ran = l.start as u64..(l.end - l.skipped) as u64;
        self.values.complete(
            sh.identity,
            &l.req.reads,
            &l.req.writes,
            ran,
            sh.blocks as u64,
        );
        if l.skipped == 0 {
            self.completed += 1;
        }
        self.emit(slot, EventKind::Completed);
        self.passed(slot);
        self.finish_part(slot);
    }

    fn remove_active(&mut self, slot: u32) {
        if let Some(p) = self.active.iter().position(|&a| a == slot) {
            self.active.remove(p);
        }
    }

    fn kill_effect(&mut self, target: u32) {
        let victims: Vec<u32> = self
            .active
            .iter()
            .copied()
            .filter(|&a| target == u32::MAX || self.launches[a as usize].stream == target)
            // A launch with no block running is not killed when none of it
            // is left to dispatch (it is only finishing its flagged blocks'
            // exit), nor when its stream's preempt flag is set: the kill
            // interrupts running threads only, and "inactive thread blocks
            // of the running kernel are then evicted by the preemptor in
            // Figure 8 since they have not been executed yet" (REEF §4.6,
            // "Kernel killing"; the preemptor is the flag check at kernel
            // entry, §4.2, Fig. 8 lines 1-4). Its blocks exit at their check
            // once a CU has room for one (`flag_exit`), writing nothing: it
            // ends `Evicted`, or `Completed` (partly run) when blocks of it
            // had finished before the flag was set. Killed, its outputs were
            // marked corrupted although no block of it had run, and the
            // restore then read them: the kernel before it finished under
            // the flag, so the scheduler could not count that completion and
            // re-ran it (the execution index names it, §4.4), over an input
            // the never-run kernel writes (TVM reuses storage: resnet152's
            // softmax writes the buffer the dense kernel before it reads).
            // With the GV100's 15 us trap (§4.6) the predecessor often ends
            // and its successor is dispatched, without room beside the
            // real-time kernels, before the kill lands; with the MI50's 3 us
            // CU reset (§4.5) rarely.
            .filter(|&a| {
                let l = &self.launches[a as usize];
                !(l.groups.is_empty()
                    && (l.next_block == l.end || self.streams[l.stream as usize].flag))
            })
            .collect();
        for slot in victims {
            let gs = self.launches[slot as usize].groups.clone();
            for g in gs {
                self.retire_group(g, BlockOutcome::Killed);
            }
            let l = &self.launches[slot as usize];
            let (done, id) = (l.done, l.id.0);
            let (identity, total) = (l.req.shape.identity, l.req.shape.blocks as u64);
            let range = l.start as u64..l.end as u64;
            let (reads, writes) = (l.req.reads.clone(), l.req.writes.clone());
            self.values
                .kill(identity, &reads, &writes, range, total, id);
            self.emit(slot, EventKind::Killed { blocks_done: done });
            self.finish_part(slot);
        }
        self.place();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_lanes_and_fit_test() {
        let max = (1 << LANE) - 1;
        let u = CuUsage {
            threads: max,
            waves: 7,
            blocks: 0,
            lds: 65_536,
            regs: max - 1,
        };
        assert_eq!(unpack(pack(&u)), u);
        assert_eq!(pack(&u) & GUARD, 0);
        let limits = CuUsage {
            threads: 2560,
            waves: 40,
            blocks: 40,
            lds: 65_536,
            regs: 65_536,
        };
        let one = |threads, waves, lds, regs| CuUsage {
            threads,
            waves,
            blocks: 1,
            lds,
            regs,
        };
        let block = pack(&one(256, 4, 4096, 1024));
        let (lim, empty) = (pack(&limits), 0);
        assert!(fits(lim - empty, block));
        // Exactly full in one lane, short by one in another.
        let used = pack(&one(2304, 36, 61_440, 64_512));
        assert!(fits(lim - used, block));
        let used = pack(&one(2305, 36, 61_440, 64_512));
        assert!(!fits(lim - used, block));
        let used = pack(&one(0, 0, 61_441, 0));
        assert!(!fits(lim - used, block));
        let used = pack(&CuUsage {
            blocks: 40,
            ..CuUsage::default()
        });
        assert!(!fits(lim - used, block));
        assert!(fits(
            lim - pack(&one(0, 0, 65_536, 0)),
            pack(&one(1, 1, 0, 1))
        ));
    }
}
