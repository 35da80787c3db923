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
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

mod after;
mod dram;
mod events;
mod launch;
mod observe;
mod placement;
mod preempt;
mod streams;

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
    /// A part of a padded launch ([`Sim::launch_padded`]): run through the
    /// dkp kernel, each block charged [`crate::PADDED_LAUNCH_OVERHEAD_PPM`].
    dkp: bool,
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
