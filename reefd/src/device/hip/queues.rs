//! Level 3 on HIP's queues: reefd learns which KFD queue carries each of
//! its streams, and kills through the REEF driver patch on that queue
//! (REEF §4.5 "Kernel killing", Fig. 7 ❷ ❸; the restore relaunches from
//! the execution index, §4.3–4.4).
//!
//! Which queue is a stream's: HIP gives no handle to the HSA queue behind
//! a stream, so reefd compares its process's queues (the KFD debug API's
//! GET_QUEUE_SNAPSHOT on its own pid) before a stream is created and after
//! it: clr acquires the stream's HSA queue when the stream is created
//! (since clr e3633dc8f, ROCm 5.5; libhip-sim/src/kfd.rs cites the code),
//! ROCm 5.2's runtime at the stream's first use, so when creation shows no
//! new queue the comparison is made again after the stream's first launch.
//! Exactly one new queue is the stream's own. None means the runtime gave
//! the stream a queue it already had (clr's pool per priority is bounded
//! by `GPU_MAX_HW_QUEUES`, default 4, and an idle queue of a destroyed
//! stream is handed to the next one): such a stream cannot be killed
//! without reaching other streams' kernels, so level 3 is offered only
//! when `GPU_MAX_HW_QUEUES` is set (to at least reefd's streams per
//! priority), and reefd never destroys a stream while it serves (probes
//! and reference runs share one stream, mod.rs; streams are kept for reuse
//! across a reset, kernels.rs).
//!
//! The kill: the patch's WAVE_RESET ends every running wave of the process
//! on the GPU, so every other queue of reefd's is suspended around it and
//! resumed after (their waves are saved by CWSR at the unmap and restored
//! at the map), then CLEAR_QUEUE turns the stream's unfetched kernels into
//! no-ops whose completion signals still fire (KfdBackend::kill_queue).

use std::collections::BTreeSet;

use reef_sched::PreemptLevel;

use super::HipDevice;
use crate::device::kfd::{KfdBackend, KfdOptions};
use crate::device::preempt::{HardwareBackend, Levels};

/// clr's queue-pool bound (libhip-sim/src/kfd.rs).
pub const MAX_HW_QUEUES_ENV: &str = "GPU_MAX_HW_QUEUES";

/// A stream's KFD queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueOf {
    /// Its own queue.
    Own(u32),
    /// Not seen at creation: the queues before it, compared again after
    /// its first launch.
    Pending(BTreeSet<u32>),
    /// No queue of its own was found.
    Unknown,
}

/// The KFD behind a `kfd:N` HIP device, when it can kill.
pub struct HipKfd {
    backend: KfdBackend,
    /// Every queue of reefd's process seen on the GPU (status).
    known: BTreeSet<u32>,
    /// Kills issued.
    pub kills: u64,
}

impl HipKfd {
    /// Opens the KFD for `dev` (after its HIP runtime, which enabled the
    /// KFD runtime itself) and decides level 3: returned when the KFD can
    /// kill and `GPU_MAX_HW_QUEUES` is set; the device's levels and notes
    /// are updated either way.
    pub fn attach(dev: &mut HipDevice, opts: &KfdOptions) -> Option<HipKfd> {
        let b = match KfdBackend::open(opts) {
            Ok(b) => b,
            Err(e) => {
                dev.add_note(format!("no kill (level 3): {e}"));
                return None;
            }
        };
        if !b.levels().can_kill() {
            dev.add_note(format!("no kill (level 3): {}", b.summary()));
            return None;
        }
        let Some(n) = std::env::var(MAX_HW_QUEUES_ENV)
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
        else {
            dev.add_note(format!(
                "no kill (level 3): the KFD answers ({}), but {MAX_HW_QUEUES_ENV} is not set: \
                 with clr's default of 4 HSA queues per priority, streams share queues and a \
                 queue's reset would reach another stream's kernels; start reefd with \
                 {MAX_HW_QUEUES_ENV} at least its streams per priority",
                b.summary()
            ));
            return None;
        };
        let known = match b.own_queues() {
            Ok(q) => q.into_iter().collect(),
            Err(e) => {
                dev.add_note(format!("no kill (level 3): queue snapshot: {e}"));
                return None;
            }
        };
        if dev.levels.highest() < PreemptLevel::LazyEviction {
            dev.add_note("no kill (level 3): it needs the preempt flag (level 2)".into());
            return None;
        }
        let mut notes: Vec<String> = dev
            .levels
            .notes
            .iter()
            .filter(|n| !n.starts_with("no kill (level 3) through HIP"))
            .cloned()
            .collect();
        notes.push(format!(
            "kill (level 3) through the KFD: {}; each stream's KFD queue learnt from \
             GET_QUEUE_SNAPSHOT before and after its creation ({MAX_HW_QUEUES_ENV}={n})",
            b.summary()
        ));
        dev.levels = Levels::up_to(PreemptLevel::Kill, notes);
        Some(HipKfd {
            backend: b,
            known,
            kills: 0,
        })
    }

    /// The process's queues now (every one remembered).
    pub fn snapshot(&mut self) -> Result<BTreeSet<u32>, String> {
        let now: BTreeSet<u32> = self
            .backend
            .own_queues()
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        self.known.extend(now.iter().copied());
        Ok(now)
    }

    /// The stream's queue from the queues `before` it and now.
    pub fn identify(&mut self, before: &BTreeSet<u32>, first_launch: bool) -> QueueOf {
        let now = match self.snapshot() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("kfd: queue snapshot: {e}");
                return QueueOf::Unknown;
            }
        };
        let new: Vec<u32> = now.difference(before).copied().collect();
        match new.as_slice() {
            [q] => QueueOf::Own(*q),
            [] if !first_launch => QueueOf::Pending(before.clone()),
            _ => QueueOf::Unknown,
        }
    }

    /// Kills the running waves of queue `target` and clears it (module
    /// doc); the queues in `protect` (those of the other streams with
    /// kernels in flight) are suspended around the wave reset.
    pub fn kill(&mut self, target: u32, protect: &[u32]) -> Result<Vec<String>, String> {
        let steps = self
            .backend
            .kill_queue(target, protect)
            .map_err(|e| e.to_string())?;
        self.kills += 1;
        Ok(steps)
    }
}
