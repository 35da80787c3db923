//! What a scheduler core is built from: the models it runs
//! ([`ModelInfo`], with the idempotent groups a restore starts from, REEF
//! §4.4, Fig. 9), its clients ([`ClientSpec`]), the device's preemption
//! levels ([`DeviceCaps`]), the knobs ([`Config`]: device-queue capacity,
//! §4.2; real-time order) and the client → stream mapping a policy chooses
//! ([`Layout`], §3.1, Fig. 5).

use crate::types::*;
use reef_model::idempotence::IdempotenceMetadata;

/// What the scheduler needs to know about a model.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub name: String,
    /// Number of kernels of one inference.
    pub kernels: u32,
    /// Per-kernel idempotence (§4.4); `None` means every kernel is idempotent
    /// (as for all TVM kernels, Table 1).
    pub idempotence: Option<IdempotenceMetadata>,
    /// Per kernel, how many kernels right after it write nothing it reads
    /// or writes (`reef_model::Model::successors_clear_of`); `None`:
    /// unknown, taken as 0.
    pub successors_clear: Option<Vec<u32>>,
    /// Its latency alone on the device, ns, where known (the benchmark
    /// measures it before its runs); `reef-max`'s `guard` learns it
    /// otherwise ([`crate::dkp::guard`]).
    pub alone_ns: Option<u64>,
}

impl ModelInfo {
    /// A model whose kernels are all idempotent.
    pub fn idempotent(name: impl Into<String>, kernels: u32) -> Self {
        Self {
            name: name.into(),
            kernels,
            idempotence: None,
            successors_clear: None,
            alone_ns: None,
        }
    }

    /// How many kernels right after kernel `k` write nothing `k` reads or
    /// writes (0 when unknown).
    pub fn successors_clear(&self, k: u32) -> u32 {
        self.successors_clear
            .as_ref()
            .and_then(|v| v.get(k as usize).copied())
            .unwrap_or(0)
    }

    /// Kernel index a restore must start from when kernel `index` was the
    /// last one to begin (Fig. 8 line 17, `find_idem_entry`).
    pub fn restore_point(&self, index: u32) -> u32 {
        match &self.idempotence {
            Some(m) => m.restore_point(index as usize) as u32,
            None => index,
        }
    }
}

/// A client as the scheduler sees it.
#[derive(Debug, Clone)]
pub struct ClientSpec {
    pub name: String,
    pub model: ModelId,
    pub class: Class,
}

/// Order of the real-time queue (§3.1: FIFO in REEF; any policy that treats
/// the GPU as one device, such as EDF, may replace it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RtOrder {
    #[default]
    Fifo,
    /// Earliest deadline first; requests without a deadline go last (FIFO
    /// among themselves).
    Edf,
}

/// What the device can do, as its backend reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Highest preemption level available (DESIGN.md "Device").
    pub max_level: PreemptLevel,
    /// Whether the device queue can be dropped outright.
    pub can_clear_device_queue: bool,
    /// Whether a kill (CU reset) takes effect before any launch issued after
    /// it can start blocks. REEF resets the CUs synchronously before it
    /// launches the real-time task (SJTU-IPADS/reef `preempt_reset`
    /// synchronises the preemption stream; REEF §3.1 "first ... preempt
    /// ... and then immediately launches the real-time task"); a simulated
    /// device has it when its kill latency is below its launch path. With
    /// it, dynamic kernel padding may pad a best-effort task whose stream
    /// is still lazily evicting its queued kernels (no kernel of it runs
    /// any more), so the first real-time kernels of a request can be
    /// padded too (docs/padding.md "Padding from the first real-time
    /// kernel").
    pub kill_precedes_later_launches: bool,
}

impl DeviceCaps {
    /// The capabilities of a device that reports these preemption level
    /// numbers. The device queue is never dropped outright: REEF on AMD
    /// cannot do so safely (§4.2) and relies on lazy eviction instead.
    pub fn from_levels(numbers: impl IntoIterator<Item = u8>) -> Self {
        Self {
            max_level: PreemptLevel::highest(numbers),
            can_clear_device_queue: false,
            kill_precedes_later_launches: false,
        }
    }
}

impl Default for DeviceCaps {
    fn default() -> Self {
        Self {
            max_level: PreemptLevel::Kill,
            can_clear_device_queue: false,
            kill_precedes_later_launches: false,
        }
    }
}

/// Scheduler configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Device-queue capacity for preemptible streams under `reef` (§4.2:
    /// 4 on the MI50 testbed).
    pub dq_capacity: usize,
    pub device: DeviceCaps,
    pub rt_order: RtOrder,
    /// Priority level of each client (0 highest .. 9 lowest, FIKIT §3.2
    /// "Executing kernels by task-level priorities", Fig. 7), indexed by
    /// `ClientId`. A client without an entry takes its class's alias:
    /// real-time 0, best-effort 9 ([`Class::default_priority`]). REEF's
    /// policies go by class (0 is real-time, the rest best-effort); FIKIT
    /// uses all ten levels.
    pub priorities: Vec<u8>,
    /// Host-paced clients (a framework that launches kernel by kernel from
    /// the CPU): a request arrives with none of its kernels issued and the
    /// caller reports [`Event::KernelsIssued`] as the framework issues them;
    /// a kernel is transmitted only once issued. `false` (the default): every
    /// kernel is issued when the request arrives (back-to-back launches).
    pub host_paced: bool,
    /// The runtime bounds every stream's outstanding kernels at
    /// `dq_capacity`, whatever the policy asks: REEFnv (REEF §4.6) keeps
    /// kernels in a virtual host queue whose background thread "transmits
    /// a fixed number of kernels to the CUDA runtime in a closed loop", so
    /// a policy without a device-queue cap of its own (`wait`) is capped
    /// there too. `false` (the default): only policies that cap (`reef`).
    pub runtime_caps_every_stream: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            dq_capacity: 4,
            device: DeviceCaps::default(),
            rt_order: RtOrder::Fifo,
            priorities: Vec::new(),
            host_paced: false,
            runtime_caps_every_stream: false,
        }
    }
}

/// How a policy maps clients to streams.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Stream of each client, indexed by `ClientId`.
    pub client_stream: Vec<StreamId>,
    /// Priority and device-queue capacity of each stream, indexed by `StreamId`.
    pub streams: Vec<(StreamPriority, Option<usize>)>,
    /// Process context of each stream, indexed by `StreamId`; empty: every
    /// stream in context 0 (one process, the daemon's or the runtime's).
    pub contexts: Vec<u32>,
}

impl Layout {
    /// REEF's layout (§3.1): all real-time clients share stream 0 (one
    /// real-time queue, served one request at a time); each best-effort
    /// client has its own stream with device-queue capacity `be_cap`.
    pub fn shared_rt(clients: &[ClientSpec], be_cap: Option<usize>) -> Self {
        let mut streams = vec![(StreamPriority::Normal, None)];
        let client_stream = clients
            .iter()
            .map(|c| match c.class {
                Class::RealTime => StreamId(0),
                Class::BestEffort => {
                    streams.push((StreamPriority::Normal, be_cap));
                    StreamId(streams.len() as u32 - 1)
                }
            })
            .collect();
        Self {
            client_stream,
            streams,
            contexts: Vec::new(),
        }
    }

    /// One stream per client; real-time streams get `rt_priority`.
    pub fn per_client(clients: &[ClientSpec], rt_priority: StreamPriority) -> Self {
        let streams = clients
            .iter()
            .map(|c| match c.class {
                Class::RealTime => (rt_priority, None),
                Class::BestEffort => (StreamPriority::Normal, None),
            })
            .collect();
        Self {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams,
            contexts: Vec::new(),
        }
    }

    /// One process per client (FIKIT §2, §4.5 "default GPU sharing
    /// mode"): each client's stream in a context of its own, no priority.
    /// How the device shares itself between the contexts is the device's
    /// (time slices on NVIDIA GPUs, docs/simulator.md "Contexts").
    pub fn per_process(clients: &[ClientSpec]) -> Self {
        Self {
            client_stream: (0..clients.len() as u32).map(StreamId).collect(),
            streams: vec![(StreamPriority::Normal, None); clients.len()],
            contexts: (1..=clients.len() as u32).collect(),
        }
    }
}
