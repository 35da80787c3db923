//! Identifiers, events in and actions out of the sans-IO scheduler core.
//!
//! The vocabulary follows REEF §3.1 (Fig. 5: task queues, scheduler, kernel
//! interceptor, preemption module) and §4 (Figs. 7 and 8: host queue reset,
//! preemption flag, CU reset, execution index, restore). Time is an opaque
//! nanosecond count supplied by the caller with every event: the core never
//! reads a clock.

use std::fmt;

/// Nanoseconds on the caller's clock (virtual in benchmarks, wall in the daemon).
pub type Time = u64;

macro_rules! id {
    ($(#[$m:meta])* $name:ident, $t:ty) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub $t);
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id!(
    /// A client (one DISB task): it submits requests for one model.
    ClientId,
    u32
);
id!(
    /// A GPU stream: a host queue in front of a bounded device queue (§4.1).
    StreamId,
    u32
);
id!(
    /// One inference request.
    RequestId,
    u64
);
id!(
    /// A model registered with the scheduler.
    ModelId,
    u32
);

/// Identifies one launched kernel: the request it belongs to and its
/// execution index (the kernel's position in launch order, §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelTag {
    pub req: RequestId,
    pub kernel: u32,
}

/// Real-time or best-effort (§2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    RealTime,
    BestEffort,
}

impl Class {
    /// The priority level the class stands for when a client has none of
    /// its own: real-time 0, best-effort 9 (`reefctl --priority rt|be`).
    pub fn default_priority(self) -> u8 {
        match self {
            Class::RealTime => 0,
            Class::BestEffort => PRIORITY_LEVELS - 1,
        }
    }
    /// The class REEF's policies serve a priority level in: 0 is
    /// real-time, every other level best-effort.
    pub fn of_priority(p: u8) -> Self {
        if p == 0 {
            Class::RealTime
        } else {
            Class::BestEffort
        }
    }
}

/// Priority levels, Q0 (highest) to Q9 (FIKIT §3.2, Fig. 7).
pub const PRIORITY_LEVELS: u8 = 10;

/// Hardware priority of a stream, for devices that honour it (GPU streams
/// with priorities, the Triton-like `streams` policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamPriority {
    Normal,
    High,
}

/// Preemption levels a device offers (DESIGN.md "Device"): each level
/// includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PreemptLevel {
    /// Evict work still in the host queue only; work already in the device
    /// queue and running blocks run to completion.
    HostQueue = 1,
    /// Also evict work already in the device queue lazily: a preemption flag
    /// checked at kernel entry makes fetched kernels terminate at once (§4.2).
    LazyEviction = 2,
    /// Also kill running blocks (CU reset on AMD, trap handler on NVIDIA; §4.3).
    Kill = 3,
}

impl PreemptLevel {
    /// The level as the number DESIGN.md uses (1, 2 or 3).
    pub fn number(self) -> u8 {
        self as u8
    }
    /// Level from its number; `None` outside 1..=3.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::HostQueue),
            2 => Some(Self::LazyEviction),
            3 => Some(Self::Kill),
            _ => None,
        }
    }

    /// The highest level among the numbers a backend reports: numbers above
    /// 3 count as 3, and an empty report (or only 0) as level 1, which every
    /// device has because the host queue is the caller's own.
    pub fn highest(numbers: impl IntoIterator<Item = u8>) -> Self {
        numbers
            .into_iter()
            .filter_map(|n| Self::from_number(n.min(3)))
            .max()
            .unwrap_or(Self::HostQueue)
    }
}

/// Events the caller feeds into the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A client submitted a request. `deadline` is used by EDF ordering of
    /// real-time requests and ignored otherwise.
    RequestArrived {
        req: RequestId,
        client: ClientId,
        deadline: Option<Time>,
    },
    /// The kernel passed its preemption-flag check and began running: it has
    /// written its execution index to the stream's global index (Fig. 8 line 3).
    KernelStarted { stream: StreamId, tag: KernelTag },
    /// The kernel ran to completion.
    KernelCompleted { stream: StreamId, tag: KernelTag },
    /// The kernel left the device queue and terminated at entry because the
    /// stream's preemption flag was set (lazy eviction, §4.2), or was dropped
    /// by a device-queue clear.
    KernelEvicted { stream: StreamId, tag: KernelTag },
    /// The kernel's running blocks were killed (§4.3); its outputs may be
    /// partially written.
    KernelKilled { stream: StreamId, tag: KernelTag },
    /// The client's host (the launching framework) has issued kernels
    /// `0..issued` of request `req` (host-paced clients,
    /// [`crate::Config::host_paced`]): the gaps a framework leaves between
    /// kernels that FIKIT fills (FIKIT §1, Fig. 1). Also FIKIT's early-stop
    /// signal (§3.2 "Real time feedback"): the high-priority task's next
    /// launch request has arrived.
    KernelsIssued { req: RequestId, issued: u32 },
    /// An operator asked to preempt one stream (`reefctl preempt --stream N`).
    PreemptCommand { stream: StreamId },
    /// An operator asked to resume a stream preempted by command.
    ResumeCommand { stream: StreamId },
}

/// Actions the core asks the caller to perform, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create a stream with a priority and a device-queue capacity
    /// (`None`: unbounded), in process context `context` (0 for every
    /// stream unless the policy gives each client a process of its own,
    /// `share`). Emitted once per stream when the core is built.
    CreateStream {
        stream: StreamId,
        priority: StreamPriority,
        dq_capacity: Option<usize>,
        context: u32,
    },
    /// Push kernel `tag.kernel` of request `tag.req`'s model into the stream's
    /// device queue (the core holds the host queue and transmits only while
    /// the device queue has room).
    Launch { stream: StreamId, tag: KernelTag },
    /// Write the stream's preemption flag in device memory.
    SetPreemptFlag { stream: StreamId, value: bool },
    /// Kill the running blocks of the stream's kernels (reset the CUs, §4.3).
    KillStream { stream: StreamId },
    /// Drop the stream's device queue outright (only on devices that can).
    ClearDeviceQueue { stream: StreamId },
    /// The stream's host queue was reset (head pointer nulled) dropping
    /// `dropped` buffered launches; their memory is to be reclaimed in the
    /// background (asynchronous reclamation, §4.2).
    ReclaimHostQueue { stream: StreamId, dropped: u32 },
    /// A preempted request restarts from kernel `from_kernel`: the restore
    /// point of the execution index `exec_index` read back from the device
    /// (Fig. 8 lines 15–18). `Launch` actions follow as the queue has room.
    Restore {
        stream: StreamId,
        req: RequestId,
        exec_index: Option<u32>,
        from_kernel: u32,
    },
    /// The request's last kernel completed: reply to the client.
    RequestDone { req: RequestId, client: ClientId },
    /// The request was refused (e.g. a best-effort request under `rt-only`).
    RequestRejected { req: RequestId, client: ClientId },
}

impl Action {
    /// True for actions that are part of the preemption control path.
    pub fn is_preemption_control(&self) -> bool {
        matches!(
            self,
            Action::SetPreemptFlag { .. }
                | Action::KillStream { .. }
                | Action::ClearDeviceQueue { .. }
                | Action::ReclaimHostQueue { .. }
        )
    }
}
