//! The simulated driver's state: contexts, modules, functions, streams,
//! events and device memory on one or several reef-sim GPUs (one [`Sim`]
//! each, with its own memory and clock-paced work), with the checks a CUDA
//! driver makes. The exported C functions (crate root) lock one [`Driver`]
//! and call its methods; every method returns the driver's error code on
//! refusal.
//!
//! Time: the simulated GPU is paced by the wall clock (DESIGN.md "clocks":
//! wall, for a live process): every call first runs the simulator up to
//! the nanoseconds elapsed since `cuInit`, so kernels take their simulated
//! time in real time, as they would on a GPU.
//!
//! Streams and the legacy default stream: a stream created with flags 0 is
//! a *blocking* stream, which the synchronous copies (`cuMemcpyHtoD_v2`,
//! `cuMemcpyDtoH_v2`, issued on the legacy default stream) wait for, as the
//! CUDA programming guide's "Implicit Synchronization" and the driver API's
//! stream-sync-behaviour notes describe. A preempt-flag write through a
//! blocking stream's context would wait for the very kernels it should
//! evict; `CU_STREAM_NON_BLOCKING` streams are not waited for.
//!
//! Several devices (`REEF_LIBCUDA_SIM_DEVICE=gv100,gv100`): a context
//! belongs to the device it was created on, and its modules, streams,
//! events and allocations live on that device's simulated GPU. Every
//! context has its own address space (CUDA driver API reference, "Context
//! Management": "each context has its own distinct address space … CUdeviceptr
//! values from different contexts reference different memory locations"),
//! so a kernel given a pointer of another context, on the same device or
//! another one, faults (CUDA_ERROR_ILLEGAL_ADDRESS, sticky for its context)
//! as an unmapped access does on a GPU; a launch on a stream or of a
//! function of another context is refused (CUDA_ERROR_INVALID_CONTEXT).
//! Host copies (`cuMemcpyHtoD_v2`/`DtoH_v2`) are routed by the pointer, as
//! under unified addressing (CUDA programming guide, "Unified Virtual
//! Address Space": the device a pointer belongs to is found from its
//! value), so they are not refused across contexts.
//!
//! What the stand-in does that a GPU does and a kinder model would not
//! (DESIGN.md "Stand-ins: never kinder than the hardware"):
//! - **The preempt flag is read by every block at its dispatch** (REEF
//!   §4.3 Fig. 8 lines 1-2: the check is the first instruction of the
//!   kernel, so every block runs it; trap-handler/src/ptx.rs inserts it at
//!   each entry). A kernel running when the flag is set finishes the blocks
//!   already placed; its later blocks exit at entry, so it has run only
//!   partly and its outputs are partly written ([`Driver::finish_partial`]).
//!   Blocks placed are asked of the simulator when the flag changes
//!   (`Sim::blocks_placed`; no block records are kept). Timing
//!   limit: reef-sim still runs the exited blocks for their full time
//!   (it checks the flag once per kernel, at dispatch), so a partly-run
//!   kernel here ends later than on a GPU: slower, never kinder.
//! - **Contexts time-slice** ([`TIMESLICE_NS`]): without MPS "a kernel
//!   from one CUDA context cannot execute concurrently with a kernel from
//!   another CUDA context" (CUDA C Programming Guide, "Concurrent Kernel
//!   Execution"). One context of a device runs at a time; the driver
//!   holds the launches of the others and switches when the running
//!   context idles, or when its time slice has ended and another context
//!   has work (round robin). The switch lets the running context's
//!   dispatched kernels finish instead of saving their state, as compute
//!   preemption would; no save cost is modelled (no published figure).
//! - **Stream priorities** (`cuStreamCreateWithPriority`, range
//!   [`STREAM_PRIORITY_GREATEST`, `STREAM_PRIORITY_LEAST`]): the block
//!   scheduler places pending blocks of higher-priority streams first;
//!   running blocks are not preempted (driver API reference,
//!   cuStreamCreateWithPriority: "Priorities provide a hint to
//!   preferentially run work with higher priority when possible, but do
//!   not preempt already-running work"). reef-sim places the pending blocks
//!   of its active kernels in stream-priority order.
//! - **A fault poisons its context**: a kernel that touches memory its
//!   context does not own, or one chosen by fault injection
//!   (each library's fault-injection variable and hook, e.g.
//!   libcuda-sim's `REEF_LIBCUDA_SIM_FAULT`), sets
//!   CUDA_ERROR_ILLEGAL_ADDRESS on its context; every later call on that
//!   context (or on its streams, events, modules and memory) returns it,
//!   its queued and held work is dropped, and only `cuCtxDestroy` is left
//!   (driver API reference, "Error Handling": a sticky error "leaves the
//!   process in an inconsistent state and any further CUDA work will
//!   return the same error"; per context without MPS). Other contexts go
//!   on.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUresult;
use reef_sim::costmodel;
use reef_sim::shape::fnv1a;
use reef_sim::{DeviceSpec, EventKind, KernelLaunch, KernelShape, LaunchId, Sim, SimConfig, Tags};

use crate::ptx;

mod launch;
mod memory;
mod objects;
mod reset;
mod slice;
mod values;

use memory::{generate, Alloc};

pub type R<T> = Result<T, CUresult>;

/// A launch's arguments as both drivers read them (`cuLaunchKernel`'s and
/// `hipModuleLaunchKernel`'s `kernelParams`): `params[i]` points at the
/// `sizes[i]` bytes of argument `i`; a null array (with arguments) or a
/// null entry is INVALID_VALUE.
///
/// # Safety
/// `params` is null or holds `sizes.len()` pointers, each null or to at
/// least its argument's bytes (the launch calls' contract).
pub unsafe fn kernel_params(
    sizes: &[usize],
    params: *mut *mut std::ffi::c_void,
) -> R<Vec<Vec<u8>>> {
    if !sizes.is_empty() && params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let mut args = Vec::with_capacity(sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        // SAFETY: per the contract, params[i] is null or points at n bytes.
        let p = unsafe { *params.add(i) } as *const u8;
        if p.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        args.push(unsafe { std::slice::from_raw_parts(p, n) }.to_vec());
    }
    Ok(args)
}

/// The name of the module global the injected preemptor reads (reef-ptx-inject).
pub const FLAG_SYMBOL: &str = "reef_preempt_flag";
/// The module global the injected preemptor writes the execution index to.
pub const INDEX_SYMBOL: &str = "reef_exec_index";
/// The parameter reef-ptx-inject appends to every kernel.
pub const INDEX_PARAM: &str = "__reef_exec_idx";

/// Launches a stream may hold before `cuLaunchKernel` blocks. NVIDIA does
/// not document the depth of a channel's pushbuffer; 1024 is an assumption
/// (of the order of the pending-launch limit reported for CUDA streams),
/// far above reefd's own device-queue cap (REEF §4.3), which is what bounds
/// in-flight work here.
pub const STREAM_QUEUE_DEPTH: usize = 1024;

/// A channel group's (context's) time slice: 1024 us, the open driver's
/// default for Volta and later, `kfifoChannelGroupGetDefaultTimeslice_GV100`
/// = `NV_RAMRL_ENTRY_TSG_TIMESLICE_TIMEOUT_128 <<
/// NV_RAMRL_ENTRY_TSG_TIMESLICE_SCALE_3` = 128 << 3 us
/// (NVIDIA/open-gpu-kernel-modules 595.45.04,
/// src/nvidia/src/kernel/gpu/fifo/arch/volta/kernel_fifo_gv100.c:51 and
/// src/common/inc/swref/published/volta/gv100/dev_ram.h:64-65).
pub const TIMESLICE_NS: u64 = 1_024_000;

/// `cuCtxGetStreamPriorityRange`: least 0 (the default priority) and
/// greatest -5, the range current drivers report on Volta and later GPUs
/// (CUDA 12; older drivers reported smaller ranges). Lower numbers are
/// greater priorities; a value outside is clamped into the range (driver
/// API reference, cuStreamCreateWithPriority).
pub const STREAM_PRIORITY_LEAST: i32 = 0;
pub const STREAM_PRIORITY_GREATEST: i32 = -5;

/// Launch limits: CUDA C Programming Guide, "Technical Specifications per
/// Compute Capability" (7.0 to 9.0 alike).
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
pub const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
pub const MAX_GRID_DIM: [u32; 3] = [i32::MAX as u32, 65535, 65535];
/// Shared memory a block may use without the opt-in attribute (same source).
pub const MAX_SHARED_PER_BLOCK: u32 = 48 * 1024;
/// Registers per thread (same source).
pub const MAX_REGS_PER_THREAD: u32 = 255;
/// Where the simulated address space starts, and the allocation alignment
/// (cuMemAlloc: "The allocated memory is suitably aligned for any kind of
/// variable"; 256 B per the CUDA guide, device memory accesses).
const ADDR_BASE: u64 = 0x2_0000_0000;
const ALIGN: u64 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Context = 0xc7,
    Module = 0x3d,
    Function = 0xf7,
    Stream = 0x57,
    Event = 0xe7,
}

fn handle(kind: Kind, id: u64) -> u64 {
    ((kind as u64) << 56) | id
}

fn id_of(kind: Kind, h: u64) -> Option<u64> {
    (h >> 56 == kind as u64).then_some(h & ((1 << 56) - 1))
}

/// A launch: the driver's own id (a launch held for a context that is not
/// running has no simulator id yet).
pub type Launch = u64;

#[derive(Debug)]
struct Ctx {
    /// The device ordinal the context was created on.
    dev: usize,
    streams: Vec<u64>,
    modules: Vec<u64>,
}

#[derive(Debug)]
struct Module {
    ctx: u64,
    entries: Vec<ptx::Entry>,
    /// The CPU build of compiled kernels, by kernel name (crate::cpu).
    cpu: HashMap<String, Arc<crate::cpu::CpuKernel>>,
    /// Kernels that are earlier parts of a split call (`after=`): their
    /// launches are recorded on their stream ([`Stream::parts`]).
    parts: std::collections::HashSet<String>,
    /// name -> device address
    globals: HashMap<String, (u64, usize)>,
    functions: Vec<u64>,
}

#[derive(Debug)]
struct Function {
    module: u64,
    entry: usize,
}

#[derive(Debug)]
struct Stream {
    ctx: u64,
    sim: reef_sim::StreamId,
    blocking: bool,
    last: Option<Launch>,
    /// Launches held by the driver while the stream's context is not the
    /// one running on its device (time slicing), in order.
    held: std::collections::VecDeque<Launch>,
    /// The device the stream's context is on.
    dev: usize,
    /// Modules whose functions were launched on this stream: the flags its
    /// kernels read at entry (see [`Driver::flag_changed`]).
    modules: Vec<u64>,
    /// The latest launch on this stream of each earlier kernel of a split
    /// call (crate::cpu `after=`): its pointer parameters (None where a
    /// parameter is not a pointer) and whether it has since completed
    /// with every block run.
    /// Keyed by module and kernel name.
    parts: HashMap<(u64, String), PartLaunch>,
}

/// An earlier kernel of a split call as last launched on a stream: its
/// pointer parameters (None where one is not a pointer) and whether it has
/// since completed with every block run.
type PartLaunch = (Vec<Option<u64>>, bool);

#[derive(Debug)]
struct Event {
    ctx: u64,
    target: Option<Launch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    User(u64),
    Global(u64),
}

/// A launch the GPU has not finished.
#[derive(Debug)]
struct InFlight {
    ctx: u64,
    dev: usize,
    /// The driver stream id.
    stream: u64,
    /// The simulator's launch, built and not yet submitted (held).
    req: Option<KernelLaunch>,
    /// The same, kept to submit again after a recall (time slicing).
    launch: KernelLaunch,
    /// The kernel's blocks, and its simulator launch once submitted.
    blocks: u32,
    sim_id: Option<LaunchId>,
    /// Blocks placed while the flag was set (they exited at entry), and the
    /// placed count when the flag was last set, while it is.
    skipped: u32,
    skip_from: Option<u32>,
    /// Fault injection: the kernel faults when it runs.
    fault: bool,
    /// When its first block was placed.
    started_at: Option<u64>,
    module: u64,
    kernel: String,
    exec_index: Option<u32>,
    reads: Vec<u64>,
    writes: Vec<u64>,
    /// Scalar arguments, less the execution index: they are inputs too.
    scalars: Vec<u8>,
    /// A compiled kernel's CPU build and the device pointers of its
    /// arguments (crate::cpu).
    cpu: Option<(Arc<crate::cpu::CpuKernel>, Vec<u64>)>,
}

/// Counters the crate's tests and docs read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub launches: u64,
    /// Ran every block (partly-run kernels included: see `partial`).
    pub completed: u64,
    /// Exited at the preempt-flag check (REEF Fig. 8 lines 1-2).
    pub evicted: u64,
    /// Completed with some blocks exited at the flag check: run partly.
    pub partial: u64,
    /// Killed by a wave reset (driver/reset.rs).
    pub killed: u64,
    /// Blocks that exited at the flag check in partly-run kernels, and
    /// the blocks those kernels ran.
    pub blocks_exited: u64,
    pub blocks_ran_partial: u64,
    /// Times a device switched to another context (time slicing).
    pub context_switches: u64,
    /// Kernels that faulted (their context is poisoned).
    pub faults: u64,
    /// Last kernels of a split call that completed after an earlier kernel
    /// of the call had not run whole: their outputs are marked stale
    /// (crate::cpu `after=`).
    pub split_stale: u64,
    /// Completions computed by a compiled kernel's CPU build (crate::cpu)
    /// rather than the stand-in function.
    pub cpu_calls: u64,
}

/// One simulated GPU of the driver.
struct Gpu {
    spec: DeviceSpec,
    sim: Sim,
    stats: Stats,
    /// simulator launch -> the driver's.
    ids: HashMap<LaunchId, Launch>,
    /// The context whose kernels the device runs (time slicing), the end
    /// of its slice, and whether it is draining to hand over.
    active: Option<u64>,
    slice_end: u64,
    /// The context that had the device last.
    slice_end_ctx: u64,
    draining: bool,
    /// Each context's kernel intervals on the device (first block placed,
    /// end), for tests: `(ctx, start, end)`; bounded ([`MAX_INTERVALS`]).
    intervals: std::collections::VecDeque<(u64, u64, u64)>,
}

/// Kernel intervals kept per device for tests (the oldest are dropped).
pub const MAX_INTERVALS: usize = 4096;

/// The most devices `REEF_LIBCUDA_SIM_DEVICE` may list (a node of 64
/// GPUs is far beyond any host reefd serves; the bound keeps a typo such
/// as `gv100x10000` from building thousands of simulators).
pub const MAX_DEVICES: usize = 64;

/// The devices of a `REEF_LIBCUDA_SIM_DEVICE` value: a comma-separated
/// list of reef-sim presets or spec files, a preset optionally followed by
/// `xN` (`gv100x2` = `gv100,gv100`), device ordinal 0 first.
pub fn device_list(s: &str) -> Result<Vec<DeviceSpec>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(format!("{s:?}: an empty item in the device list"));
        }
        let (name, n) = match item.rsplit_once('x') {
            Some((name, n))
                if !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && DeviceSpec::preset(name).is_ok() =>
            {
                (
                    name,
                    n.parse::<usize>().map_err(|e| format!("{item}: {e}"))?,
                )
            }
            _ => (item, 1),
        };
        if n == 0 || out.len() + n > MAX_DEVICES {
            return Err(format!(
                "{s:?}: between 1 and {MAX_DEVICES} devices, please"
            ));
        }
        let spec = DeviceSpec::by_name_or_path(name).map_err(|e| format!("{name}: {e}"))?;
        out.extend(std::iter::repeat_n(spec, n));
    }
    Ok(out)
}

/// The driver.
pub struct Driver {
    gpus: Vec<Gpu>,
    epoch: Instant,
    next_id: u64,
    next_addr: u64,
    contexts: HashMap<u64, Ctx>,
    modules: HashMap<u64, Module>,
    functions: HashMap<u64, Function>,
    streams: HashMap<u64, Stream>,
    events: HashMap<u64, Event>,
    allocs: BTreeMap<u64, Alloc>,
    inflight: HashMap<Launch, InFlight>,
    /// An error that leaves the process's contexts unusable (a kernel
    /// touched memory it does not own: CUDA_ERROR_ILLEGAL_ADDRESS is
    /// "sticky", the driver API reference says, and every later call
    /// returns it).
    sticky: HashMap<u64, CUresult>,
    pub stats: Stats,
    /// Fault injection (libcuda-sim's `REEF_LIBCUDA_SIM_FAIL_LAUNCH`): the launch of this
    /// kernel name with this 1-based count is refused.
    fail_launch: Option<(String, u64)>,
    /// Fault injection (libcuda-sim's `REEF_LIBCUDA_SIM_FAULT`): the launch of this kernel
    /// name with this 1-based count faults when it runs.
    fault_launch: Vec<(String, u64)>,
    next_launch: u64,
    /// Launches accepted or refused so far, by kernel name.
    launches_by_name: HashMap<String, u64>,
}

/// A fault to inject, `NAME@N` (the N-th launch of kernel NAME), from
/// libcuda-sim's `REEF_LIBCUDA_SIM_FAIL_LAUNCH`.
pub fn parse_fail_launch(v: &str) -> Result<(String, u64), String> {
    let (name, n) = v
        .rsplit_once('@')
        .ok_or_else(|| format!("{v:?}: expected KERNEL@N"))?;
    let n: u64 = n
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{v:?}: N must be a launch count from 1"))?;
    if name.is_empty() {
        return Err(format!("{v:?}: no kernel name"));
    }
    Ok((name.to_string(), n))
}

/// What a wait is for.
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// A launch of a context.
    Launch(u64, Launch),
    /// A free slot in a stream's queue (the driver stream id).
    QueueSlot(u64),
}

/// What a caller that must wait does next.
pub enum Poll {
    Ready,
    /// Sleep this long (ns) and poll again.
    Sleep(u64),
}

impl Driver {
    /// The devices `devices` names (`REEF_LIBCUDA_SIM_DEVICE`: reef-sim
    /// presets or spec files, [`device_list`]; default `gv100`, REEF's
    /// NVIDIA testbed), each its own simulated GPU.
    pub fn new(devices: &str) -> Result<Driver, String> {
        Ok(Driver::from_specs(device_list(devices)?))
    }

    /// The driver on the devices `specs` (ordinal 0 first).
    pub fn from_specs(specs: Vec<DeviceSpec>) -> Driver {
        let gpus = specs
            .into_iter()
            .map(|spec| Gpu {
                sim: Sim::new(spec.clone(), SimConfig::default()),
                spec,
                stats: Stats::default(),
                ids: HashMap::new(),
                active: None,
                slice_end: 0,
                slice_end_ctx: 0,
                draining: false,
                intervals: Default::default(),
            })
            .collect();
        Driver {
            gpus,
            epoch: Instant::now(),
            next_id: 1,
            next_addr: ADDR_BASE,
            contexts: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            allocs: BTreeMap::new(),
            inflight: HashMap::new(),
            sticky: HashMap::new(),
            stats: Stats::default(),
            fail_launch: None,
            fault_launch: Vec::new(),
            next_launch: 1,
            launches_by_name: HashMap::new(),
        }
    }

    /// Refuses the `n`-th launch of kernel `name` with
    /// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (fault injection for tests).
    pub fn fail_launch(&mut self, name: &str, n: u64) {
        self.fail_launch = Some((name.to_string(), n));
    }

    /// Makes the `n`-th launch of kernel `name` from now (1: the next)
    /// fault when it runs: CUDA_ERROR_ILLEGAL_ADDRESS, sticky for its
    /// context (fault injection for tests).
    pub fn inject_fault(&mut self, name: &str, n: u64) {
        let base = self.launches_by_name.get(name).copied().unwrap_or(0);
        self.fault_launch.push((name.to_string(), base + n));
    }

    /// Each context's kernel intervals on device `dev` (first block placed,
    /// end), oldest first: `(context handle, start ns, end ns)`. For tests.
    pub fn intervals(&self, dev: usize) -> Vec<(u64, u64, u64)> {
        self.gpus.get(dev).map_or(Vec::new(), |g| {
            g.intervals
                .iter()
                .map(|&(c, a, b)| (handle(Kind::Context, c), a, b))
                .collect()
        })
    }

    /// How many devices the driver has (`cuDeviceGetCount`).
    pub fn device_count(&self) -> usize {
        self.gpus.len()
    }

    /// Device `dev`'s preset (CUDA_ERROR_INVALID_DEVICE past the count).
    pub fn spec(&self, dev: i32) -> R<&DeviceSpec> {
        usize::try_from(dev)
            .ok()
            .and_then(|d| self.gpus.get(d))
            .map(|g| &g.spec)
            .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
    }

    /// Counters of device `dev`.
    pub fn device_stats(&self, dev: usize) -> Option<Stats> {
        self.gpus.get(dev).map(|g| g.stats)
    }

    /// Slots of queued or finished CPU computations the allocations hold
    /// (not yet copied in), for tests.
    pub fn cpu_slots_held(&self) -> usize {
        self.allocs.values().map(|a| a.cpu.len()).sum()
    }

    /// The device a context was created on.
    pub fn ctx_device(&self, h: u64) -> R<usize> {
        let id = self.ctx(h)?;
        Ok(self.contexts[&id].dev)
    }

    fn fresh(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Runs the simulated GPU up to the wall clock and applies what its
    /// kernels did to device memory. Event time by event time, so that a
    /// context switch (time slicing) and the submission of the next
    /// context's held launches happen at the simulated instant they would.
    pub fn catch_up(&mut self) {
        let mut evs = Vec::new();
        let now = self.now_ns();
        for dev in 0..self.gpus.len() {
            loop {
                let t = self.next_time(dev);
                let target = match t {
                    Some(t) if t <= now => t,
                    _ => now.max(self.gpus[dev].sim.now()),
                };
                evs.clear();
                self.gpus[dev].sim.advance_into(target, &mut evs);
                for e in &evs {
                    self.device_event(dev, e);
                }
                self.pump(dev);
                if t.is_none_or(|t| t > now) {
                    break;
                }
            }
        }
    }

    fn device_event(&mut self, dev: usize, e: &reef_sim::DeviceEvent) {
        let Some(&l) = self.gpus[dev].ids.get(&e.launch) else {
            return;
        };
        if !matches!(e.kind, EventKind::Started) {
            self.gpus[dev].ids.remove(&e.launch);
        }
        if !matches!(e.kind, EventKind::Started) {
            if let Some(f) = self.inflight.get(&l) {
                if let Some(s) = f.started_at {
                    let g = &mut self.gpus[dev];
                    if g.intervals.len() >= MAX_INTERVALS {
                        g.intervals.pop_front();
                    }
                    g.intervals.push_back((f.ctx, s, e.time));
                }
            }
        }
        match e.kind {
            EventKind::Started => self.started(l, e.time),
            EventKind::Completed => {
                self.stats.completed += 1;
                self.gpus[dev].stats.completed += 1;
                self.completed(l);
            }
            EventKind::Evicted | EventKind::Cleared => {
                self.stats.evicted += 1;
                self.gpus[dev].stats.evicted += 1;
                self.inflight.remove(&l);
            }
            EventKind::Killed { .. } => {
                self.stats.killed += 1;
                self.gpus[dev].stats.killed += 1;
                // REEF's WAVE_RESET (driver/reset.rs; on NVIDIA the kill is
                // an RM debugger operation, not a driver API call): the
                // kernel's outputs are left corrupted.
                if let Some(f) = self.inflight.remove(&l) {
                    for w in f.writes {
                        if let Some((base, off)) = self.find(w) {
                            let a = self.allocs.get_mut(&base).unwrap();
                            let n = a.data.len() - off;
                            a.write(off, &vec![0xde; n]);
                        }
                    }
                }
            }
        }
    }

    /// A fault in context `c` (module doc): sticky CUDA_ERROR_ILLEGAL_ADDRESS,
    /// its held and queued launches dropped (its running blocks drain on
    /// the simulated GPU; their outputs are not written).
    fn fault(&mut self, c: u64) {
        self.sticky.insert(c, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        let streams: Vec<(usize, reef_sim::StreamId, Vec<Launch>)> = self
            .streams
            .values_mut()
            .filter(|s| s.ctx == c)
            .map(|s| (s.dev, s.sim, s.held.drain(..).collect()))
            .collect();
        for (dev, sim, held) in streams {
            for l in held {
                self.inflight.remove(&l);
            }
            let _ = self.gpus[dev].sim.clear_queue(sim);
        }
    }

    /// The context's sticky error, if a kernel of it faulted.
    pub fn check_sticky(&self, ctx: u64) -> R<()> {
        match self.sticky.get(&ctx) {
            Some(&e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether `w` is ready, or how long to sleep before asking again.
    pub fn poll(&mut self, w: Wait) -> R<Poll> {
        self.catch_up();
        let ready = match w {
            Wait::Launch(ctx, l) => {
                self.check_sticky(ctx)?;
                !self.inflight.contains_key(&l)
            }
            Wait::QueueSlot(s) => !self.stream_full(s)?,
        };
        if ready {
            return Ok(Poll::Ready);
        }
        match (0..self.gpus.len()).filter_map(|d| self.next_time(d)).min() {
            Some(t) => Ok(Poll::Sleep(t.saturating_sub(self.now_ns()))),
            // Nothing will ever happen: a driver would hang; say so instead.
            None => Err(CUresult::CUDA_ERROR_UNKNOWN),
        }
    }

    /// Whether a stream holds [`STREAM_QUEUE_DEPTH`] launches not yet
    /// dispatched (held by the driver or queued on the device).
    fn stream_full(&self, h: u64) -> R<bool> {
        let s = self.stream(h)?;
        self.check_sticky(s.ctx)?;
        Ok(s.held.len() + self.gpus[s.dev].sim.queue_len(s.sim) >= STREAM_QUEUE_DEPTH)
    }

    // --- contexts ---------------------------------------------------------

    /// A context on device `dev` (CUDA_ERROR_INVALID_DEVICE past the count).
    pub fn ctx_create(&mut self, dev: i32) -> R<u64> {
        self.spec(dev)?;
        let id = self.fresh();
        self.contexts.insert(
            id,
            Ctx {
                dev: dev as usize,
                streams: Vec::new(),
                modules: Vec::new(),
            },
        );
        Ok(handle(Kind::Context, id))
    }

    pub fn ctx(&self, h: u64) -> R<u64> {
        id_of(Kind::Context, h)
            .filter(|id| self.contexts.contains_key(id))
            .ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    }

    pub fn ctx_destroy(&mut self, h: u64) -> R<()> {
        let id = self.ctx(h)?;
        let c = self.contexts.remove(&id).unwrap();
        for m in c.modules {
            self.unload(m);
        }
        for s in c.streams {
            if let Some(st) = self.streams.remove(&s) {
                // Its channels are torn down: queued kernels dropped,
                // running ones killed where the device can.
                let sim = &mut self.gpus[st.dev].sim;
                let _ = sim.clear_queue(st.sim);
                let _ = sim.kill_stream(st.sim);
            }
        }
        if self.gpus[c.dev].active == Some(id) {
            self.gpus[c.dev].active = None;
            self.pump(c.dev);
        }
        self.events.retain(|_, e| e.ctx != id);
        // Work of a destroyed context is abandoned: its outputs are gone.
        self.inflight.retain(|_, f| f.ctx != id);
        self.sticky.remove(&id);
        let freed: Vec<u64> = self
            .allocs
            .iter()
            .filter(|(_, a)| a.owner == Owner::User(id))
            .map(|(&b, _)| b)
            .collect();
        for b in freed {
            let a = self.allocs.remove(&b).unwrap();
            self.gpus[a.dev].sim.free(a.data.len() as u64);
        }
        Ok(())
    }
}

/// With recorded work (`flops=` annotation): registers one block holds
/// and its durations for 1..=K co-resident blocks from reef-sim's cost model
/// of compiled kernels, exactly as the virtual-time simulator shapes the
/// same kernel (sim/src/costmodel.rs `compiled_shape`: registers allocated
/// per warp, occupancy K under the preset's limits, roofline at full
/// occupancy with the measured co-residency shape below it). `None`: a
/// stated `block_ns` instead.
pub fn block_curve(
    work: &ptx::Work,
    blocks: u32,
    threads: u32,
    shared: u32,
    spec: &DeviceSpec,
) -> Option<(u64, Vec<u64>)> {
    let flops = work.flops?;
    let per_block = costmodel::regs_per_block(work.regs_per_thread, threads, spec.wave_size);
    let max_k = costmodel::max_resident(threads, shared, per_block, spec);
    let curve = costmodel::roofline_curve(flops, work.bytes, blocks, max_k, spec);
    Some((per_block as u64, curve))
}
