//! The `kfd` backend: REEF's reset-based preemption on AMD GPUs through the
//! KFD device (REEF §4.5, Figure 7).
//!
//! Preempting best-effort (BE) work, at level 3 (Figure 7 ❷ and ❸):
//! 1. SUSPEND_QUEUES on the BE queues: the command processor stops fetching
//!    from them (KFD debug API, interface 1.13+);
//! 2. CLEAR_QUEUE on each suspended BE queue: the packets not yet fetched
//!    become no-ops (REEF driver patch, `rocm-patch/`);
//! 3. WAVE_RESET on the GPU: the running waves of this process end (REEF
//!    patch; the patch limits the kill to the caller's VMID, so only reefd's
//!    own waves die — REEF kills before the real-time kernels are launched,
//!    so at that moment they are BE waves).
//!
//! Restoring resumes the queues (RESUME_QUEUES); the runtime relaunches the
//! killed work from the execution index (REEF §4.4).
//!
//! Levels: 3 when the debug API is there and the REEF patch's WAVE_RESET
//! answers; without the patch (`ENOTTY` from an unpatched kernel, `EINVAL`,
//! or `EOPNOTSUPP` from a non-GFX9 GPU) or without the debug API (interface
//! older than 1.13) the backend reports level 2 and says why. At level 2
//! `preempt_be` issues no driver call: the kernels already in the device
//! queues are evicted lazily by the preempt flag in device memory, which
//! the HIP runtime writes (REEF §4.2), and the running kernel finishes.
//! Suspending the queues without being able to clear them would keep the
//! queued kernels from draining through their flag check, so it is not done.
//!
//! The probe: at open the backend calls WAVE_RESET once on its GPU. Before
//! reefd has launched anything its process has no VMID mapped, and the
//! patch returns 0 at once without touching the GPU.
//!
//! Kernels: this build cannot execute them ([`HIP_MISSING`]). The debug
//! session is reefd's own (it debugs itself, so no ptrace is needed); the
//! event pipe KFD writes to is held for the backend's lifetime.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use reef_ioctl::Kfd;
use reef_sched::PreemptLevel;

use crate::device::preempt::{BackendError, HardwareBackend, Levels, PreemptReport};

/// Where KFD publishes its topology on a GPU host (one directory per node,
/// each with a `gpu_id` file; CPU nodes have gpu_id 0).
pub const DEFAULT_TOPOLOGY_DIR: &str = "/sys/class/kfd/kfd/topology/nodes";

/// Grace period given to running waves before a suspension takes effect.
/// 0: suspend at once (REEF kills the waves right after).
pub const DEFAULT_GRACE_PERIOD_US: u32 = 0;

/// Why kernels cannot be executed through this backend.
pub const HIP_MISSING: &str = "executing inference kernels on an AMD GPU needs the HIP runtime \
    (ROCm) on a GPU host to load the models' code objects and launch them \
    (hipModuleLaunchKernel), and this build of reefd has no HIP launch path; the kfd backend \
    covers REEF's preemption ioctls (suspend, clear, wave reset, resume) only";

/// Where the backend's device is and how it should start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdOptions {
    /// The KFD device file (`device.kfd_path`, normally `/dev/kfd`).
    pub path: PathBuf,
    /// The KFD topology nodes directory (`device.kfd_topology`).
    pub topology_dir: PathBuf,
    /// N of `kfd:N`: the N-th GPU node of the topology (CPU nodes skipped).
    pub index: u32,
    /// Call RUNTIME_ENABLE for this process. True when reefd is the only KFD
    /// user in its process; a ROCm runtime enables itself when it starts
    /// (a second enable answers EBUSY, which is taken as "already enabled").
    pub enable_runtime: bool,
    /// Passed to SUSPEND_QUEUES.
    pub grace_period_us: u32,
}

/// An open `kfd:N` device with a debug session on reefd's own process.
#[derive(Debug)]
pub struct KfdBackend {
    kfd: Kfd,
    index: u32,
    gpu_id: u32,
    pid: u32,
    grace_period_us: u32,
    levels: Levels,
    /// The read end of the pipe KFD reports debug events on (the write end
    /// was handed to DBG_TRAP_ENABLE and is held in `_event_write`).
    _event_read: Option<OwnedFd>,
    _event_write: Option<OwnedFd>,
    debugging: bool,
    be_queues: Vec<u32>,
    /// Queues suspended by the last `preempt_be` and not yet resumed.
    suspended: Vec<u32>,
}

/// Whether `e` came from a system call failing with one of `want` (compared
/// by number: reef-ioctl and reefd may link different nix versions).
fn errno_is(e: &reef_ioctl::Error, want: &[Errno]) -> bool {
    e.errno()
        .is_some_and(|got| want.iter().any(|w| *w as i32 == got as i32))
}

/// The gpu_id of the `index`-th GPU node under `topology_dir` (nodes in
/// numeric order, CPU nodes — gpu_id 0 — skipped).
pub fn gpu_id_from_topology(topology_dir: &Path, index: u32) -> Result<u32, BackendError> {
    let device = format!("kfd:{index}");
    let entries = std::fs::read_dir(topology_dir).map_err(|e| BackendError::NoSuchGpu {
        device: device.clone(),
        detail: format!(
            "cannot read the KFD topology at {} ({e}): the amdgpu driver is not loaded or this \
             host has no AMD GPU; check device.kfd_topology",
            topology_dir.display()
        ),
    })?;
    let mut nodes: Vec<(u64, u32)> = Vec::new();
    for entry in entries.flatten() {
        let Some(node) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let file = entry.path().join("gpu_id");
        let text = std::fs::read_to_string(&file).map_err(|e| BackendError::NoSuchGpu {
            device: device.clone(),
            detail: format!("cannot read {}: {e}", file.display()),
        })?;
        let gpu_id = text
            .trim()
            .parse::<u32>()
            .map_err(|_| BackendError::NoSuchGpu {
                device: device.clone(),
                detail: format!("{} holds {:?}, not a gpu_id", file.display(), text.trim()),
            })?;
        if gpu_id != 0 {
            nodes.push((node, gpu_id));
        }
    }
    nodes.sort_unstable();
    nodes
        .get(index as usize)
        .map(|&(_, id)| id)
        .ok_or_else(|| BackendError::NoSuchGpu {
            device,
            detail: format!(
                "the KFD topology at {} lists {} GPU(s); kfd:N counts them from 0",
                topology_dir.display(),
                nodes.len()
            ),
        })
}

impl KfdBackend {
    /// Opens the KFD device at `opts.path`, finds the GPU, enables the
    /// runtime (if asked) and a debug session on reefd's own process, and
    /// probes the REEF patch to decide between level 3 and level 2.
    pub fn open(opts: &KfdOptions) -> Result<KfdBackend, BackendError> {
        let kfd = Kfd::open(&opts.path)?;
        let gpu_id = gpu_id_from_topology(&opts.topology_dir, opts.index)?;
        let pid = std::process::id();
        let mut b = KfdBackend {
            kfd,
            index: opts.index,
            gpu_id,
            pid,
            grace_period_us: opts.grace_period_us,
            levels: Levels::up_to(PreemptLevel::LazyEviction, Vec::new()),
            _event_read: None,
            _event_write: None,
            debugging: false,
            be_queues: Vec::new(),
            suspended: Vec::new(),
        };
        let v = b.kfd.version();
        if !v.has_debugger_api() {
            b.levels.notes.push(format!(
                "no kill: {} speaks KFD interface {}.{}, which has no debug API to suspend \
                 queues (needs 1.13: Linux 6.4+ or a ROCm amdgpu-dkms driver reporting it)",
                opts.path.display(),
                v.major,
                v.minor
            ));
            return Ok(b);
        }
        if opts.enable_runtime {
            match b.kfd.runtime_enable(0, true) {
                Ok(_) => {}
                // Already enabled, by this process's ROCm runtime.
                Err(e) if errno_is(&e, &[Errno::EBUSY]) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // KFD writes one byte ('.') per debug event to this file with
        // kernel_write (kfd_debug.c, debug_event_write_work_handler and
        // kfd_dbg_ev_raise). A non-blocking pipe takes that; an eventfd
        // would refuse writes shorter than 8 bytes and lose the events.
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| BackendError::InvalidState {
                    device: b.device(),
                    detail: format!("cannot create the debug event pipe: {e}"),
                })?;
        b.kfd.dbg_trap_enable(pid, 0, w.as_fd())?;
        b._event_read = Some(r);
        b._event_write = Some(w);
        b.debugging = true;
        match b.kfd.wave_reset(gpu_id) {
            Ok(()) => b.levels = Levels::up_to(PreemptLevel::Kill, Vec::new()),
            Err(e) if errno_is(&e, &[Errno::ENOTTY, Errno::EINVAL, Errno::EOPNOTSUPP]) => {
                b.levels.notes.push(format!(
                    "no kill: WAVE_RESET was refused ({e}); without the REEF driver patch \
                     (rocm-patch/) running kernels finish and queued ones are evicted by the \
                     preempt flag"
                ));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(b)
    }

    /// The KFD gpu_id this backend acts on.
    pub fn gpu_id(&self) -> u32 {
        self.gpu_id
    }

    /// The device file this backend opened.
    pub fn path(&self) -> &Path {
        self.kfd.path()
    }

    /// One line for logs: path, interface, GPU, levels.
    pub fn summary(&self) -> String {
        let v = self.kfd.version();
        format!(
            "{} (KFD interface {}.{}, gpu_id 0x{:x}, {})",
            self.kfd.path().display(),
            v.major,
            v.minor,
            self.gpu_id,
            self.levels
        )
    }

    /// Declares which queues of reefd's process carry best-effort work (the
    /// HIP streams of BE clients; their ids as KFD's queue snapshot lists
    /// them). Every id must be a queue of this process on this backend's
    /// GPU, checked with GET_QUEUE_SNAPSHOT when the debug API is there.
    pub fn set_be_queues(&mut self, queue_ids: &[u32]) -> Result<(), BackendError> {
        if self.debugging && !queue_ids.is_empty() {
            let snapshot = self.kfd.queue_snapshot(self.pid, 0)?;
            for &q in queue_ids {
                match snapshot.iter().find(|e| e.queue_id == q) {
                    Some(e) if e.gpu_id == self.gpu_id => {}
                    Some(e) => {
                        return Err(BackendError::InvalidState {
                            device: self.device(),
                            detail: format!(
                                "queue {q} is on gpu_id 0x{:x}, not on this device's gpu_id 0x{:x}",
                                e.gpu_id, self.gpu_id
                            ),
                        })
                    }
                    None => {
                        return Err(BackendError::InvalidState {
                            device: self.device(),
                            detail: format!("queue {q} is not a queue of reefd's process"),
                        })
                    }
                }
            }
        }
        self.be_queues = queue_ids.to_vec();
        Ok(())
    }
}

impl KfdBackend {
    /// The ids of reefd's own queues on this backend's GPU, from
    /// GET_QUEUE_SNAPSHOT (the debug API; empty without it).
    pub fn own_queues(&self) -> Result<Vec<u32>, BackendError> {
        if !self.debugging {
            return Ok(Vec::new());
        }
        Ok(self
            .kfd
            .queue_snapshot(self.pid, 0)?
            .iter()
            .filter(|e| e.gpu_id == self.gpu_id)
            .map(|e| e.queue_id)
            .collect())
    }

    /// Level 3 on one queue of reefd's own process (REEF §4.5, Fig. 7 ❷
    /// ❸): the patch's WAVE_RESET kills every running wave of the process
    /// on the GPU, so the queues in `protect` are suspended around it (the
    /// hardware scheduler saves their waves at the unmap, CWSR, and
    /// restores them at the map: hardware.md Part 1, "kill before
    /// suspend"); then CLEAR_QUEUE turns `target`'s unfetched kernels into
    /// no-ops. Returns the calls made.
    pub fn kill_queue(
        &mut self,
        target: u32,
        protect: &[u32],
    ) -> Result<Vec<String>, BackendError> {
        if !self.levels.can_kill() {
            return Err(BackendError::InvalidState {
                device: self.device(),
                detail: "no kill (level 3) on this KFD".into(),
            });
        }
        let mut steps = Vec::new();
        if !protect.is_empty() {
            self.kfd
                .suspend_queues(self.pid, protect, self.grace_period_us, 0)?;
            steps.push(format!("suspend_queues {protect:?}"));
        }
        let killed = self.kfd.wave_reset(self.gpu_id);
        if !protect.is_empty() {
            self.kfd.resume_queues(self.pid, protect)?;
            steps.push(format!("resume_queues {protect:?}"));
        }
        killed?;
        steps.insert(
            usize::from(!protect.is_empty()),
            format!("wave_reset gpu 0x{:x}", self.gpu_id),
        );
        self.kfd.clear_queue(self.gpu_id, target)?;
        steps.push(format!("clear_queue {target}"));
        Ok(steps)
    }
}

impl HardwareBackend for KfdBackend {
    fn device(&self) -> String {
        format!("kfd:{}", self.index)
    }

    fn levels(&self) -> &Levels {
        &self.levels
    }

    fn preempt_be(&mut self) -> Result<PreemptReport, BackendError> {
        if !self.levels.can_kill() {
            return Ok(PreemptReport {
                level: PreemptLevel::LazyEviction,
                steps: Vec::new(),
                refused: Vec::new(),
            });
        }
        if !self.suspended.is_empty() {
            return Err(BackendError::InvalidState {
                device: self.device(),
                detail: format!(
                    "queues {:?} are still suspended by the previous preemption: restore_be first",
                    self.suspended
                ),
            });
        }
        let mut steps = Vec::new();
        let mut refused = Vec::new();
        if self.be_queues.is_empty() {
            // No BE queue to evict; the running BE waves are still killed.
            self.kfd.wave_reset(self.gpu_id)?;
            steps.push(format!("wave_reset gpu 0x{:x}", self.gpu_id));
            return Ok(PreemptReport {
                level: PreemptLevel::Kill,
                steps,
                refused,
            });
        }
        // Remember the queues before the sequence: if it fails half-way,
        // restore_be still resumes whatever was suspended.
        self.suspended = self.be_queues.clone();
        let ev = self.kfd.evict_and_kill(
            self.pid,
            self.gpu_id,
            &self.be_queues,
            self.grace_period_us,
        )?;
        // In the order evict_and_kill issues them: the kill first (a
        // suspended queue's waves are saved by CWSR, not on the CUs to be
        // killed), then suspend, then clear.
        steps.push(format!("wave_reset gpu 0x{:x}", self.gpu_id));
        steps.push(format!("suspend_queues {:?}", self.be_queues));
        for q in &ev.cleared {
            steps.push(format!("clear_queue {q}"));
        }
        for q in ev.suspended.queues.iter().filter(|q| !q.ok()) {
            refused.push(format!(
                "queue {}: {}",
                q.queue_id,
                if q.invalid {
                    "no such queue (destroyed, or new)"
                } else {
                    "hardware error"
                }
            ));
        }
        Ok(PreemptReport {
            level: PreemptLevel::Kill,
            steps,
            refused,
        })
    }

    fn restore_be(&mut self) -> Result<Vec<String>, BackendError> {
        if !self.levels.can_kill() || self.suspended.is_empty() {
            return Ok(Vec::new());
        }
        let queues = std::mem::take(&mut self.suspended);
        match self.kfd.restore(self.pid, &queues) {
            Ok(_) => Ok(vec![format!("resume_queues {queues:?}")]),
            Err(e) => {
                self.suspended = queues;
                Err(e.into())
            }
        }
    }

    fn launch(&mut self, name: &str, _exec_index: u32) -> Result<(), BackendError> {
        Err(BackendError::CannotExecute {
            device: self.device(),
            reason: format!("kernel {name}: {HIP_MISSING}"),
        })
    }
}

impl Drop for KfdBackend {
    fn drop(&mut self) {
        if !self.suspended.is_empty() {
            let _ = self.kfd.restore(self.pid, &self.suspended);
        }
        if self.debugging {
            // Ending the session also resumes anything left suspended.
            let _ = self.kfd.dbg_trap_disable(self.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(dir: &Path, n: u32, gpu_id: &str) {
        let d = dir.join(n.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("gpu_id"), gpu_id).unwrap();
    }

    #[test]
    fn topology_skips_cpu_nodes_and_orders_numerically() {
        let t = tempfile::tempdir().unwrap();
        node(t.path(), 0, "0\n");
        node(t.path(), 2, "222\n");
        node(t.path(), 10, "1010\n");
        node(t.path(), 1, "111\n");
        std::fs::write(t.path().join("README"), "not a node").unwrap();
        assert_eq!(gpu_id_from_topology(t.path(), 0).unwrap(), 111);
        assert_eq!(gpu_id_from_topology(t.path(), 1).unwrap(), 222);
        assert_eq!(gpu_id_from_topology(t.path(), 2).unwrap(), 1010);
        let e = gpu_id_from_topology(t.path(), 3).unwrap_err();
        assert!(e.to_string().contains("lists 3 GPU(s)"), "{e}");
    }

    #[test]
    fn topology_errors_name_the_file() {
        let e = gpu_id_from_topology(Path::new("/nonexistent/kfd/nodes"), 0).unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/kfd/nodes") && e.to_string().contains("amdgpu"),
            "{e}"
        );
        let t = tempfile::tempdir().unwrap();
        node(t.path(), 1, "gfx906");
        let e = gpu_id_from_topology(t.path(), 0).unwrap_err();
        assert!(e.to_string().contains("not a gpu_id"), "{e}");
    }
}
