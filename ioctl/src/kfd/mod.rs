//! Safe wrappers over the AMD KFD ioctls reefd's `kfd` backend needs: open
//! and version check, RUNTIME_ENABLE, the debug trap (ENABLE, DISABLE,
//! SUSPEND_QUEUES, RESUME_QUEUES, GET_QUEUE_SNAPSHOT), SET_CU_MASK, and the
//! REEF patch's WAVE_RESET and CLEAR_QUEUE.
//!
//! Paper: REEF §4.5 and Figure 7: preempting best-effort work on an AMD GPU
//! means evicting the queued kernels of its device queues (❷, here
//! SUSPEND_QUEUES then CLEAR_QUEUE) and killing the running ones (❸, here
//! WAVE_RESET), then resuming the queues for the restored work.
//!
//! One thin wrapper per ioctl, in the manner of rust-vmm's kvm-ioctls; the
//! device path is always the caller's (from reefd's configuration), never a
//! hard-coded one.

pub mod abi;
pub mod reef_patch;

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::error::{open_device, Device, Error, Result};
use abi::*;
use reef_patch::*;

/// The KFD interface version a device reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KfdVersion {
    pub major: u32,
    pub minor: u32,
}

impl KfdVersion {
    /// Whether RUNTIME_ENABLE and DBG_TRAP exist (interface 1.13, Linux 6.4).
    pub fn has_debugger_api(&self) -> bool {
        self.major == KFD_IOCTL_MAJOR_VERSION && self.minor >= KFD_MINOR_VERSION_DEBUGGER_API
    }
}

/// The outcome of SUSPEND_QUEUES or RESUME_QUEUES for each queue asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOpOutcome {
    /// How many queues the driver suspended (or resumed): the ioctl's return.
    pub done: u32,
    /// Per requested queue, in request order.
    pub queues: Vec<QueueStatus>,
}

/// What the driver reported for one queue id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStatus {
    pub queue_id: u32,
    /// `KFD_DBG_QUEUE_ERROR_MASK`: the hardware failed on this queue.
    pub hw_error: bool,
    /// `KFD_DBG_QUEUE_INVALID_MASK`: no such queue, or new, or being destroyed.
    pub invalid: bool,
}

impl QueueStatus {
    /// Neither error bit is set.
    pub fn ok(&self) -> bool {
        !self.hw_error && !self.invalid
    }
}

/// An open KFD device (`/dev/kfd` on a real host).
#[derive(Debug)]
pub struct Kfd {
    file: File,
    path: PathBuf,
    version: KfdVersion,
}

/// Exception mask bit for an exception code: `KFD_EC_MASK(ecode)`
/// (kfd_ioctl.h:973).
pub const fn kfd_ec_mask(ecode: u32) -> u64 {
    1u64 << (ecode - 1)
}

impl Kfd {
    /// Opens the KFD device at `path` read-write and checks, with
    /// GET_VERSION, that it is one and speaks interface major version 1.
    pub fn open(path: impl AsRef<Path>) -> Result<Kfd> {
        let path = path.as_ref().to_path_buf();
        let file = open_device(Device::Kfd, &path)?;
        let mut kfd = Kfd {
            file,
            path,
            version: KfdVersion { major: 0, minor: 0 },
        };
        kfd.version = kfd.get_version().map_err(|e| match e.errno() {
            Some(Errno::ENOTTY | Errno::EINVAL | Errno::ENOSYS) => Error::NotADevice {
                device: Device::Kfd,
                path: kfd.path.clone(),
                detail: "it does not answer AMDKFD_IOC_GET_VERSION (a regular file, or another \
                         driver's device); point reefd at the KFD node, normally /dev/kfd"
                    .into(),
            },
            _ => e,
        })?;
        if kfd.version.major != KFD_IOCTL_MAJOR_VERSION {
            return Err(Error::UnsupportedVersion {
                path: kfd.path.clone(),
                major: kfd.version.major,
                minor: kfd.version.minor,
                detail: format!(
                    "reef-ioctl implements major version {KFD_IOCTL_MAJOR_VERSION} only"
                ),
            });
        }
        Ok(kfd)
    }

    /// The path this device was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The interface version reported when the device was opened.
    pub fn version(&self) -> KfdVersion {
        self.version
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn fail(&self, request: &'static str, errno: Errno, hint: String) -> Error {
        Error::Ioctl {
            device: Device::Kfd,
            path: self.path.clone(),
            request,
            errno,
            hint,
        }
    }

    fn require_debugger_api(&self, request: &'static str) -> Result<()> {
        if self.version.has_debugger_api() {
            return Ok(());
        }
        Err(Error::UnsupportedVersion {
            path: self.path.clone(),
            major: self.version.major,
            minor: self.version.minor,
            detail: format!(
                "{request} needs KFD interface 1.{KFD_MINOR_VERSION_DEBUGGER_API} or later \
                 (Linux 6.4+, or a ROCm amdgpu-dkms driver reporting it)"
            ),
        })
    }

    /// AMDKFD_IOC_GET_VERSION.
    pub fn get_version(&self) -> Result<KfdVersion> {
        let mut args = KfdIoctlGetVersionArgs::default();
        // SAFETY: `args` is a valid, writable kfd_ioctl_get_version_args.
        unsafe { kfd_get_version(self.fd(), &mut args) }
            .map_err(|errno| self.fail("AMDKFD_IOC_GET_VERSION", errno, generic_hint(errno)))?;
        Ok(KfdVersion {
            major: args.major_version,
            minor: args.minor_version,
        })
    }

    /// AMDKFD_IOC_RUNTIME_ENABLE for the calling process: tells KFD that the
    /// process's runtime is ready for a debugger (`r_debug` is the address of
    /// the runtime's `r_debug` structure, shared with the debugger). Returns
    /// the capability mask KFD reported.
    pub fn runtime_enable(&self, r_debug: u64, ttmp_save: bool) -> Result<u32> {
        self.require_debugger_api("AMDKFD_IOC_RUNTIME_ENABLE")?;
        let mut args = KfdIoctlRuntimeEnableArgs {
            r_debug,
            mode_mask: KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK
                | if ttmp_save {
                    KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK
                } else {
                    0
                },
            capabilities_mask: 0,
        };
        self.runtime_enable_raw(&mut args)?;
        Ok(args.capabilities_mask)
    }

    /// AMDKFD_IOC_RUNTIME_ENABLE with the mode cleared: disables the runtime.
    pub fn runtime_disable(&self) -> Result<()> {
        self.require_debugger_api("AMDKFD_IOC_RUNTIME_ENABLE")?;
        let mut args = KfdIoctlRuntimeEnableArgs::default();
        self.runtime_enable_raw(&mut args)
    }

    fn runtime_enable_raw(&self, args: &mut KfdIoctlRuntimeEnableArgs) -> Result<()> {
        // SAFETY: `args` is a valid kfd_ioctl_runtime_enable_args.
        unsafe { kfd_runtime_enable(self.fd(), args) }
            .map(drop)
            .map_err(|errno| {
                let hint = match errno {
                    Errno::EBUSY => "a runtime-enable call of this process is already pending \
                                     (its debugger has not yet sent EC_PROCESS_RUNTIME)"
                        .into(),
                    Errno::EEXIST => "this process already has user queues: the runtime must \
                                      be enabled before the first queue is created"
                        .into(),
                    _ => generic_hint(errno),
                };
                self.fail("AMDKFD_IOC_RUNTIME_ENABLE", errno, hint)
            })
    }

    fn dbg_trap(
        &self,
        request: &'static str,
        pid: u32,
        args: &mut KfdIoctlDbgTrapArgs,
    ) -> Result<i32> {
        self.require_debugger_api(request)?;
        // SAFETY: `args` is a valid kfd_ioctl_dbg_trap_args whose pointer
        // members (set by the callers below) point at live buffers of the
        // sizes they state.
        unsafe { kfd_dbg_trap(self.fd(), args) }
            .map_err(|errno| self.fail(request, errno, dbg_trap_hint(errno, pid, args.op)))
    }

    /// KFD_IOC_DBG_TRAP_ENABLE: starts a debug session on process `pid`,
    /// whose raised exceptions in `exception_mask` are signalled on `dbg_fd`
    /// (a pipe's write end: the kernel writes one byte per event, which an
    /// eventfd would reject). Returns the runtime information KFD saved for `pid`.
    ///
    /// The caller must be `pid` itself or be ptrace-attached to it.
    pub fn dbg_trap_enable(
        &self,
        pid: u32,
        exception_mask: u64,
        dbg_fd: BorrowedFd<'_>,
    ) -> Result<KfdRuntimeInfo> {
        let mut info = KfdRuntimeInfo::default();
        let fd = u32::try_from(dbg_fd.as_raw_fd()).map_err(|_| Error::InvalidArgument {
            call: "dbg_trap_enable",
            detail: "the debug event fd is negative".into(),
        })?;
        let mut args = KfdIoctlDbgTrapArgs {
            pid,
            op: KFD_IOC_DBG_TRAP_ENABLE,
            args: KfdIoctlDbgTrapOpArgs {
                enable: KfdIoctlDbgTrapEnableArgs {
                    exception_mask,
                    rinfo_ptr: &mut info as *mut KfdRuntimeInfo as u64,
                    rinfo_size: std::mem::size_of::<KfdRuntimeInfo>() as u32,
                    dbg_fd: fd,
                },
            },
        };
        self.dbg_trap("KFD_IOC_DBG_TRAP_ENABLE", pid, &mut args)?;
        Ok(info)
    }

    /// KFD_IOC_DBG_TRAP_DISABLE: ends the debug session on `pid`.
    pub fn dbg_trap_disable(&self, pid: u32) -> Result<()> {
        let mut args = KfdIoctlDbgTrapArgs {
            pid,
            op: KFD_IOC_DBG_TRAP_DISABLE,
            args: KfdIoctlDbgTrapOpArgs::default(),
        };
        self.dbg_trap("KFD_IOC_DBG_TRAP_DISABLE", pid, &mut args)
            .map(drop)
    }

    /// KFD_IOC_DBG_TRAP_SUSPEND_QUEUES: stops the command processor from
    /// fetching from the given queues of `pid`, giving running waves
    /// `grace_period_us` to reach a trap, and clears the exceptions in
    /// `exception_mask`.
    pub fn suspend_queues(
        &self,
        pid: u32,
        queue_ids: &[u32],
        grace_period_us: u32,
        exception_mask: u64,
    ) -> Result<QueueOpOutcome> {
        let mut ids = queue_ids.to_vec();
        let n = queue_count("suspend_queues", &ids)?;
        let mut args = KfdIoctlDbgTrapArgs {
            pid,
            op: KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
            args: KfdIoctlDbgTrapOpArgs {
                suspend_queues: KfdIoctlDbgTrapSuspendQueuesArgs {
                    exception_mask,
                    queue_array_ptr: ids.as_mut_ptr() as u64,
                    num_queues: n,
                    grace_period: grace_period_us,
                },
            },
        };
        let done = self.dbg_trap("KFD_IOC_DBG_TRAP_SUSPEND_QUEUES", pid, &mut args)?;
        Ok(outcome(done, queue_ids, &ids))
    }

    /// KFD_IOC_DBG_TRAP_RESUME_QUEUES: lets the command processor fetch from
    /// the given queues of `pid` again.
    pub fn resume_queues(&self, pid: u32, queue_ids: &[u32]) -> Result<QueueOpOutcome> {
        let mut ids = queue_ids.to_vec();
        let n = queue_count("resume_queues", &ids)?;
        // Start from the zeroed 24-byte union: this member is 16 bytes.
        let mut op_args = KfdIoctlDbgTrapOpArgs::default();
        op_args.resume_queues = KfdIoctlDbgTrapResumeQueuesArgs {
            queue_array_ptr: ids.as_mut_ptr() as u64,
            num_queues: n,
            pad: 0,
        };
        let mut args = KfdIoctlDbgTrapArgs {
            pid,
            op: KFD_IOC_DBG_TRAP_RESUME_QUEUES,
            args: op_args,
        };
        let done = self.dbg_trap("KFD_IOC_DBG_TRAP_RESUME_QUEUES", pid, &mut args)?;
        Ok(outcome(done, queue_ids, &ids))
    }

    /// KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT: the queues of `pid`, clearing the
    /// exceptions in `exception_mask`. Asks for the count first, then reads
    /// that many entries (retrying if queues appeared in between).
    pub fn queue_snapshot(
        &self,
        pid: u32,
        exception_mask: u64,
    ) -> Result<Vec<KfdQueueSnapshotEntry>> {
        let entry_size = std::mem::size_of::<KfdQueueSnapshotEntry>() as u32;
        let mut capacity = 0u32;
        for _ in 0..4 {
            let mut buf = vec![KfdQueueSnapshotEntry::default(); capacity as usize];
            let mut args = KfdIoctlDbgTrapArgs {
                pid,
                op: KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT,
                args: KfdIoctlDbgTrapOpArgs {
                    queue_snapshot: KfdIoctlDbgTrapQueueSnapshotArgs {
                        exception_mask,
                        snapshot_buf_ptr: buf.as_mut_ptr() as u64,
                        num_queues: capacity,
                        entry_size,
                    },
                },
            };
            self.dbg_trap("KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT", pid, &mut args)?;
            // SAFETY: the union member written above is the one KFD updates.
            let out = unsafe { args.args.queue_snapshot };
            if out.num_queues <= capacity {
                buf.truncate(out.num_queues as usize);
                return Ok(buf);
            }
            capacity = out.num_queues;
        }
        Err(self.fail(
            "KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT",
            Errno::EAGAIN,
            format!("the queue count of process {pid} kept changing between calls"),
        ))
    }

    /// AMDKFD_IOC_CREATE_QUEUE: a user-mode queue of the calling process
    /// (what ROCr does through libhsakmt's `hsaKmtCreateQueue` for each HSA
    /// queue it opens). `args.queue_id` and the pointer fields come back
    /// filled. Used by the simulated libamdhip64 where it is given a KFD
    /// node; reefd itself creates no queue.
    pub fn create_queue(&self, args: &mut KfdIoctlCreateQueueArgs) -> Result<u32> {
        // SAFETY: `args` is a valid, writable kfd_ioctl_create_queue_args.
        unsafe { kfd_create_queue(self.fd(), args) }
            .map_err(|errno| self.fail("AMDKFD_IOC_CREATE_QUEUE", errno, generic_hint(errno)))?;
        Ok(args.queue_id)
    }

    /// AMDKFD_IOC_DESTROY_QUEUE of a queue of the calling process.
    pub fn destroy_queue(&self, queue_id: u32) -> Result<()> {
        let mut args = KfdIoctlDestroyQueueArgs { queue_id, pad: 0 };
        // SAFETY: `args` is a valid, writable kfd_ioctl_destroy_queue_args.
        unsafe { kfd_destroy_queue(self.fd(), &mut args) }
            .map(drop)
            .map_err(|errno| self.fail("AMDKFD_IOC_DESTROY_QUEUE", errno, generic_hint(errno)))
    }

    /// AMDKFD_IOC_SET_CU_MASK: restricts queue `queue_id` of the calling
    /// process to the compute units whose bits are set in `mask` (bit i of
    /// word w is CU 32*w + i).
    pub fn set_cu_mask(&self, queue_id: u32, mask: &[u32]) -> Result<()> {
        if mask.is_empty() {
            return Err(Error::InvalidArgument {
                call: "set_cu_mask",
                detail: "the CU mask is empty; give at least one 32-bit word".into(),
            });
        }
        let bits = u32::try_from(mask.len() * 32).map_err(|_| Error::InvalidArgument {
            call: "set_cu_mask",
            detail: format!("a mask of {} words is too long", mask.len()),
        })?;
        let args = KfdIoctlSetCuMaskArgs {
            queue_id,
            num_cu_mask: bits,
            cu_mask_ptr: mask.as_ptr() as u64,
        };
        // SAFETY: `args` points at `mask`, which outlives the call.
        unsafe { kfd_set_cu_mask(self.fd(), &args) }
            .map(drop)
            .map_err(|errno| {
                let hint = match errno {
                    Errno::EINVAL => format!(
                        "queue {queue_id} is not a queue of this process, or the mask is \
                         malformed ({bits} CUs)"
                    ),
                    _ => generic_hint(errno),
                };
                self.fail("AMDKFD_IOC_SET_CU_MASK", errno, hint)
            })
    }

    /// AMDKFD_IOC_WAVE_RESET (REEF patch): kills every wave this process
    /// runs on GPU `gpu_id` (REEF §4.5 "Kernel killing"): an SQ_CMD KILL
    /// limited to the process's VMID, so other processes' waves survive, and
    /// so do the waves of queues that are suspended or evicted (the hardware
    /// scheduler saved them at the unmap and restores them at the map).
    pub fn wave_reset(&self, gpu_id: u32) -> Result<()> {
        let args = KfdIoctlWaveResetArgs { gpu_id };
        // SAFETY: `args` is a valid wave-reset argument.
        unsafe { kfd_wave_reset(self.fd(), &args) }
            .map(drop)
            .map_err(|errno| {
                self.fail(
                    "AMDKFD_IOC_WAVE_RESET",
                    errno,
                    patch_hint(errno, gpu_id, None),
                )
            })
    }

    /// AMDKFD_IOC_CLEAR_QUEUE (REEF patch): drops the packets not yet fetched
    /// from queue `queue_id` on GPU `gpu_id` (REEF Figure 7 ❷): the kernel
    /// dispatches between its read and write dispatch ids become no-op
    /// barriers that still signal completion. The patched driver unmaps the
    /// queue itself while it edits and maps it again afterwards (unless it
    /// was suspended or evicted, which stays as it was), so the queue need
    /// not be suspended first.
    pub fn clear_queue(&self, gpu_id: u32, queue_id: u32) -> Result<()> {
        let args = KfdIoctlClearQueueArgs { gpu_id, queue_id };
        // SAFETY: `args` is a valid clear-queue argument.
        unsafe { kfd_clear_queue(self.fd(), &args) }
            .map(drop)
            .map_err(|errno| {
                self.fail(
                    "AMDKFD_IOC_CLEAR_QUEUE",
                    errno,
                    patch_hint(errno, gpu_id, Some(queue_id)),
                )
            })
    }
}

/// What [`Kfd::evict_and_kill`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The suspension, per queue.
    pub suspended: QueueOpOutcome,
    /// Queues whose unfetched packets were dropped.
    pub cleared: Vec<u32>,
}

impl Kfd {
    /// REEF's reset-based preemption of best-effort queues on one GPU
    /// (§4.5, Figure 7), for reefd's `kfd` backend: kill the waves this
    /// process runs on the GPU (❸, WAVE_RESET), suspend the queues so the
    /// command processor stops fetching from them, then drop the packets
    /// they had not yet fetched (❷, CLEAR_QUEUE). The kill comes first
    /// because suspending unmaps the queues, and with CWSR (GFX9's default)
    /// the hardware scheduler saves the waves of an unmapped queue and
    /// restores them when it is mapped again: killed after the suspension,
    /// they would not be on the CUs to be killed. Resetting the runtime's
    /// host queues is reefd's own business. Needs a debug session on `pid` (reefd runs the
    /// best-effort work in its own process, so `pid` is its own and no
    /// ptrace is needed). Queues the driver could not suspend are not
    /// cleared; the outcome says which.
    pub fn evict_and_kill(
        &self,
        pid: u32,
        gpu_id: u32,
        queue_ids: &[u32],
        grace_period_us: u32,
    ) -> Result<Eviction> {
        self.wave_reset(gpu_id)?;
        let suspended = self.suspend_queues(pid, queue_ids, grace_period_us, 0)?;
        let mut cleared = Vec::new();
        for q in suspended.queues.iter().filter(|q| q.ok()) {
            self.clear_queue(gpu_id, q.queue_id)?;
            cleared.push(q.queue_id);
        }
        Ok(Eviction { suspended, cleared })
    }

    /// Lets the evicted queues run again once the real-time work is done
    /// (REEF §4.3: the restored kernels are relaunched by the runtime).
    pub fn restore(&self, pid: u32, queue_ids: &[u32]) -> Result<QueueOpOutcome> {
        self.resume_queues(pid, queue_ids)
    }
}

fn queue_count(call: &'static str, ids: &[u32]) -> Result<u32> {
    if ids.is_empty() {
        return Err(Error::InvalidArgument {
            call,
            detail: "no queue ids given".into(),
        });
    }
    u32::try_from(ids.len()).map_err(|_| Error::InvalidArgument {
        call,
        detail: format!("{} queue ids is too many", ids.len()),
    })
}

fn outcome(done: i32, asked: &[u32], returned: &[u32]) -> QueueOpOutcome {
    QueueOpOutcome {
        done: done.max(0) as u32,
        queues: asked
            .iter()
            .zip(returned)
            .map(|(&queue_id, &r)| QueueStatus {
                queue_id,
                hw_error: r & KFD_DBG_QUEUE_ERROR_MASK != 0,
                invalid: r & KFD_DBG_QUEUE_INVALID_MASK != 0,
            })
            .collect(),
    }
}

fn generic_hint(errno: Errno) -> String {
    match errno {
        Errno::ENOTTY => "the device does not know this ioctl: it is not a KFD device, or the \
                          kernel is too old for it"
            .into(),
        Errno::EPERM | Errno::EACCES => "permission denied by the driver".into(),
        Errno::EBUSY => "the device is busy (a GPU reset is in progress, or another client holds \
                         it); retry"
            .into(),
        Errno::ENODEV => "the GPU is gone or does not support this operation".into(),
        Errno::EFAULT => "the driver could not access a buffer of this process".into(),
        _ => "see the kernel log (dmesg) for the driver's reason".into(),
    }
}

fn dbg_trap_hint(errno: Errno, pid: u32, op: u32) -> String {
    match errno {
        Errno::EPERM => format!(
            "KFD's debug trap needs the caller to be process {pid} itself or to be \
             ptrace-attached to it (the calling thread must be its tracer); reefd must launch \
             the best-effort workers itself or attach with PTRACE_SEIZE, which needs \
             CAP_SYS_PTRACE or kernel.yama.ptrace_scope <= 1"
        ),
        Errno::ESRCH => {
            format!("process {pid} does not exist or has not opened the KFD device")
        }
        Errno::EINVAL if op == KFD_IOC_DBG_TRAP_ENABLE => format!(
            "process {pid} is already being debugged (by a debugger such as rocgdb or another \
             reefd); disable that session first"
        ),
        Errno::EINVAL => format!(
            "no debug session is enabled on process {pid} (call dbg_trap_enable first), or the \
             GPU runs without the hardware scheduler (amdgpu.sched_policy must be 0 or 1)"
        ),
        Errno::EACCES => format!(
            "the runtime of process {pid} has not enabled debugging (AMDKFD_IOC_RUNTIME_ENABLE): \
             a ROCm runtime recent enough to use the KFD debug API does this when it starts"
        ),
        Errno::ENODEV => "a GPU of this process does not support debugging (gfx9 or later with \
                          firmware that implements the debugger interface is needed)"
            .into(),
        Errno::EBUSY => format!(
            "the queues of process {pid} are busy (being created, destroyed or reset); retry"
        ),
        _ => generic_hint(errno),
    }
}

fn patch_hint(errno: Errno, gpu_id: u32, queue_id: Option<u32>) -> String {
    match (errno, queue_id) {
        (Errno::ENOTTY, _) => "this kernel does not implement the REEF driver patch's ioctls \
                               (rocm-patch/); install the patched amdgpu module"
            .into(),
        (Errno::EINVAL, None) => format!(
            "gpu_id {gpu_id} is not a GPU of this process (see \
             /sys/class/kfd/kfd/topology/nodes/*/gpu_id), or the kernel lacks the REEF patch"
        ),
        (Errno::EINVAL, Some(q)) => format!(
            "queue {q} on gpu_id {gpu_id} is not a queue of this process, or the kernel lacks \
             the REEF patch"
        ),
        // The 6.12 patch: WAVE_RESET on a GPU other than GFX9 (its SQ_CMD
        // kill is GFX9's), CLEAR_QUEUE on a queue that is not a compute AQL
        // queue, or either under MES.
        (Errno::EOPNOTSUPP, None) => format!(
            "gpu_id {gpu_id} is not a GFX9 GPU (gfx906, gfx90a) without MES: the REEF patch's \
             wave kill is GFX9's SQ_CMD"
        ),
        (Errno::EOPNOTSUPP, Some(q)) => format!(
            "queue {q} is not a compute AQL queue on a GPU without MES; the REEF patch clears \
             only those"
        ),
        (Errno::EIO, Some(q)) => format!(
            "queue {q}'s read and write dispatch ids are inconsistent (write behind read, or \
             more packets than the ring holds); nothing was cleared"
        ),
        (Errno::EACCES, Some(q)) => {
            format!("queue {q} was reset by the driver after a hang and is no longer usable")
        }
        _ => generic_hint(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_status_bits_are_decoded_per_queue() {
        let asked = [3, 4, 5];
        let returned = [
            3,
            4 | KFD_DBG_QUEUE_ERROR_MASK,
            5 | KFD_DBG_QUEUE_INVALID_MASK,
        ];
        let o = outcome(1, &asked, &returned);
        assert_eq!(o.done, 1);
        assert!(o.queues[0].ok());
        assert!(o.queues[1].hw_error && !o.queues[1].invalid);
        assert!(o.queues[2].invalid && !o.queues[2].hw_error);
        assert_eq!(o.queues[2].queue_id, 5);
    }

    #[test]
    fn debugger_api_starts_at_1_13() {
        let v = |minor| KfdVersion { major: 1, minor };
        assert!(!v(12).has_debugger_api());
        assert!(v(13).has_debugger_api());
        assert!(!KfdVersion {
            major: 2,
            minor: 20
        }
        .has_debugger_api());
    }

    #[test]
    fn eperm_on_the_debug_trap_names_ptrace() {
        let h = dbg_trap_hint(Errno::EPERM, 77, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES);
        assert!(
            h.contains("process 77") && h.contains("ptrace-attached"),
            "{h}"
        );
        let h = dbg_trap_hint(Errno::EINVAL, 77, KFD_IOC_DBG_TRAP_ENABLE);
        assert!(h.contains("already being debugged"), "{h}");
    }
}
