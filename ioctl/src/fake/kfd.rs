//! A stateful fake AMD KFD: processes (created when they open the device),
//! whether their runtime enabled debugging, which debugger holds them, their
//! user-mode queues (created by CREATE_QUEUE as ROCr does, or seeded by a
//! test; suspended or not, packets pending, waves running, CU mask) and the
//! REEF patch's reset ioctls. Linked to a simulated GPU
//! ([`FakeKfd::link_gpu`]: the simulated libamdhip64's, whose HSA queues
//! these are), WAVE_RESET ends the running work groups of the caller's
//! mapped queues on it and CLEAR_QUEUE turns a queue's unfetched kernels
//! there into no-ops (libhip-sim/src/kfd.rs, driver-sim/src/driver/reset.rs).
//! Not modelled: a process's exit does not end its debug session or
//! destroy its queues (the real driver's process release does both).
//!
//! Paper: REEF §4.5 and Figure 7 (the queues preemption acts on). The rules
//! follow the kernel's documentation of the debug API (kfd_ioctl.h 6.12,
//! `enum kfd_dbg_trap_operations` and the per-operation comments) and
//! `kfd_chardev.c`'s ptrace check (the caller must be the target or its
//! tracer thread). Where the kernel leaves a detail open, the fake's choice
//! is stated on the item.

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;

use super::{proc_status_field, Caller, FakeDevice, IoctlReply};
use crate::kfd::abi::*;
use crate::kfd::reef_patch::*;
use crate::plain::{bytes_of, from_bytes};

/// One GPU of the fake.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeKfdGpu {
    pub gpu_id: u32,
    /// WAVE_RESET calls that reached this GPU.
    pub wave_resets: u32,
    /// Waves killed by those resets, summed.
    pub waves_killed: u64,
}

/// One user-mode compute queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeKfdQueue {
    pub queue_id: u32,
    pub gpu_id: u32,
    pub suspended: bool,
    /// AQL packets written but not yet fetched by the command processor.
    pub pending_packets: u32,
    /// Waves of this queue's kernels currently on the CUs.
    pub running_waves: u32,
    /// The CU mask last set (empty: all CUs).
    pub cu_mask: Vec<u32>,
    pub ring_base_address: u64,
    pub ring_size: u32,
    /// Exception bits raised on this queue.
    pub exception_status: u64,
}

/// One process that opened the fake KFD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeKfdProcess {
    pub runtime_enabled: bool,
    pub r_debug: u64,
    /// The debugging process (tgid), when a debug session is enabled.
    pub debugger: Option<u32>,
    pub exception_mask: u64,
    pub queues: BTreeMap<u32, FakeKfdQueue>,
}

/// The whole state of a [`FakeKfd`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdState {
    pub major: u32,
    pub minor: u32,
    /// Whether the REEF patch's WAVE_RESET and CLEAR_QUEUE exist (an
    /// unpatched kernel answers them with ENOTTY).
    pub reef_patch: bool,
    pub gpus: Vec<FakeKfdGpu>,
    /// By tgid.
    pub processes: BTreeMap<u32, FakeKfdProcess>,
    /// The simulated GPU behind the fake ([`FakeKfd::link_gpu`]): where
    /// WAVE_RESET and CLEAR_QUEUE reach the work the queues run.
    pub gpu_link: Option<std::path::PathBuf>,
    next_queue_id: u32,
}

/// The fake KFD device model; mount it with [`super::FakeMount::mount`].
#[derive(Debug)]
pub struct FakeKfd {
    state: Mutex<KfdState>,
}

impl FakeKfd {
    /// A fake KFD of interface 1.17, with the REEF patch, on GPUs `gpu_ids`.
    pub fn new(gpu_ids: &[u32]) -> FakeKfd {
        FakeKfd {
            state: Mutex::new(KfdState {
                major: KFD_IOCTL_MAJOR_VERSION,
                minor: KFD_IOCTL_MINOR_VERSION,
                reef_patch: true,
                gpus: gpu_ids
                    .iter()
                    .map(|&gpu_id| FakeKfdGpu {
                        gpu_id,
                        ..Default::default()
                    })
                    .collect(),
                processes: BTreeMap::new(),
                gpu_link: None,
                next_queue_id: 0,
            }),
        }
    }

    /// The state, locked (for tests to seed and inspect).
    pub fn state(&self) -> MutexGuard<'_, KfdState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connects the fake to a simulated GPU listening on the Unix socket
    /// `path` (the simulated libamdhip64's, `REEF_LIBHIP_SIM_KFD_LINK`):
    /// from then on WAVE_RESET ends the running work groups of the
    /// caller's mapped queues there, and CLEAR_QUEUE turns the queue's
    /// unfetched kernels into no-ops there ([`gpu_request`]). The socket
    /// stands for what the real driver reaches by register writes (SQ_CMD)
    /// and by editing the ring in user memory.
    pub fn link_gpu(&self, path: impl Into<std::path::PathBuf>) {
        self.state().gpu_link = Some(path.into());
    }

    /// Registers process `pid` (as opening the device would).
    pub fn add_process(&self, pid: u32) {
        self.state().processes.entry(pid).or_default();
    }

    /// Creates a queue for process `pid` on `gpu_id` (as CREATE_QUEUE would)
    /// and returns its id. `None` if the process or GPU is unknown.
    pub fn add_queue(
        &self,
        pid: u32,
        gpu_id: u32,
        pending_packets: u32,
        running_waves: u32,
    ) -> Option<u32> {
        let mut st = self.state();
        if !st.gpus.iter().any(|g| g.gpu_id == gpu_id) {
            return None;
        }
        let queue_id = st.next_queue_id;
        let proc_ = st.processes.get_mut(&pid)?;
        proc_.queues.insert(
            queue_id,
            FakeKfdQueue {
                queue_id,
                gpu_id,
                pending_packets,
                running_waves,
                ring_base_address: 0x7f00_0000_0000 + u64::from(queue_id) * 0x10_0000,
                ring_size: 0x10_0000,
                ..Default::default()
            },
        );
        st.next_queue_id += 1;
        Some(queue_id)
    }
}

fn nr(cmd: u32) -> u8 {
    (cmd & 0xff) as u8
}

/// Decodes the fixed argument struct, insisting on the exact request code
/// (type, number, direction and size).
fn args<T: crate::plain::Plain>(cmd: u32, expected: u32, input: &[u8]) -> Result<T, Errno> {
    if cmd != expected {
        return Err(Errno::EINVAL);
    }
    from_bytes(input).ok_or(Errno::EINVAL)
}

fn reply<T: crate::plain::Plain>(result: i32, v: &T) -> Result<IoctlReply, Errno> {
    Ok(IoctlReply {
        result,
        data: bytes_of(v).to_vec(),
    })
}

impl FakeDevice for FakeKfd {
    fn file_name(&self) -> &'static str {
        "kfd"
    }

    fn open(&self, caller: &Caller, _fh: u64) -> Result<(), Errno> {
        self.add_process(caller.tgid);
        Ok(())
    }

    fn ioctl(
        &self,
        caller: &Caller,
        _fh: u64,
        cmd: u32,
        input: &[u8],
        _out: u32,
    ) -> Result<IoctlReply, Errno> {
        if (cmd >> 8) & 0xff != u32::from(AMDKFD_IOCTL_BASE) {
            return Err(Errno::ENOTTY);
        }
        let mut st = self.state();
        match nr(cmd) {
            NR_GET_VERSION => {
                if cmd != AMDKFD_IOC_GET_VERSION {
                    return Err(Errno::EINVAL);
                }
                reply(
                    0,
                    &KfdIoctlGetVersionArgs {
                        major_version: st.major,
                        minor_version: st.minor,
                    },
                )
            }
            NR_RUNTIME_ENABLE => {
                let mut a: KfdIoctlRuntimeEnableArgs = args(cmd, AMDKFD_IOC_RUNTIME_ENABLE, input)?;
                let p = st.processes.get_mut(&caller.tgid).ok_or(Errno::ESRCH)?;
                if a.mode_mask & KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK != 0 {
                    if p.runtime_enabled {
                        return Err(Errno::EBUSY);
                    }
                    if !p.queues.is_empty() {
                        return Err(Errno::EEXIST);
                    }
                    p.runtime_enabled = true;
                    p.r_debug = a.r_debug;
                } else {
                    p.runtime_enabled = false;
                }
                // The 6.12 header defines no capability bits; report none.
                a.capabilities_mask = 0;
                reply(0, &a)
            }
            NR_DBG_TRAP => {
                let mut a: KfdIoctlDbgTrapArgs = args(cmd, AMDKFD_IOC_DBG_TRAP, input)?;
                let r = dbg_trap(&mut st, caller, &mut a)?;
                reply(r, &a)
            }
            NR_CREATE_QUEUE => {
                let mut a: KfdIoctlCreateQueueArgs = args(cmd, AMDKFD_IOC_CREATE_QUEUE, input)?;
                // kfd_chardev.c, set_queue_properties_from_user: the
                // percentage (low 8 bits) at most 100, the priority at most
                // 15, a ring size that is a power of two; the GPU must be
                // one of the caller's devices.
                if (a.queue_percentage & 0xff) > 100
                    || a.queue_priority > 15
                    || (a.ring_size != 0 && !a.ring_size.is_power_of_two())
                    || !st.gpus.iter().any(|g| g.gpu_id == a.gpu_id)
                {
                    return Err(Errno::EINVAL);
                }
                let queue_id = st.next_queue_id;
                let p = st.processes.get_mut(&caller.tgid).ok_or(Errno::ESRCH)?;
                p.queues.insert(
                    queue_id,
                    FakeKfdQueue {
                        queue_id,
                        gpu_id: a.gpu_id,
                        ring_base_address: a.ring_base_address,
                        ring_size: a.ring_size.max(1024),
                        ..Default::default()
                    },
                );
                st.next_queue_id += 1;
                a.queue_id = queue_id;
                // The doorbell's mmap offset (KFD_MMAP_TYPE_DOORBELL | gpu
                // id), which the fake does not map.
                a.doorbell_offset = (0x3u64 << 62) | (u64::from(a.gpu_id) << 46);
                reply(0, &a)
            }
            NR_DESTROY_QUEUE => {
                let a: KfdIoctlDestroyQueueArgs = args(cmd, AMDKFD_IOC_DESTROY_QUEUE, input)?;
                let p = st.processes.get_mut(&caller.tgid).ok_or(Errno::ESRCH)?;
                p.queues.remove(&a.queue_id).ok_or(Errno::EINVAL)?;
                reply(0, &a)
            }
            NR_SET_CU_MASK => {
                let a: KfdIoctlSetCuMaskArgs = args(cmd, AMDKFD_IOC_SET_CU_MASK, input)?;
                if a.num_cu_mask == 0 || a.num_cu_mask % 32 != 0 {
                    return Err(Errno::EINVAL);
                }
                let words = (a.num_cu_mask / 32) as usize;
                let raw = caller.read_mem(a.cu_mask_ptr, words * 4)?;
                let q = st
                    .processes
                    .get_mut(&caller.tgid)
                    .and_then(|p| p.queues.get_mut(&a.queue_id))
                    .ok_or(Errno::EINVAL)?;
                q.cu_mask = raw
                    .chunks_exact(4)
                    .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Ok(IoctlReply {
                    result: 0,
                    data: Vec::new(),
                })
            }
            NR_WAVE_RESET if st.reef_patch => {
                let a: KfdIoctlWaveResetArgs = args(cmd, AMDKFD_IOC_WAVE_RESET, input)?;
                if !st.gpus.iter().any(|g| g.gpu_id == a.gpu_id) {
                    return Err(Errno::EINVAL);
                }
                // The patched driver (6.12 port): an SQ_CMD KILL with
                // CHECK_VMID on the caller's VMID, so only the caller's
                // waves end, and only those on the CUs: a suspended queue
                // is unmapped and its waves were saved (CWSR), to be
                // restored when it is resumed.
                let mut killed = 0u64;
                let mut mapped = Vec::new();
                if let Some(p) = st.processes.get_mut(&caller.tgid) {
                    for q in p
                        .queues
                        .values_mut()
                        .filter(|q| q.gpu_id == a.gpu_id && !q.suspended)
                    {
                        killed += u64::from(q.running_waves);
                        q.running_waves = 0;
                        mapped.push(q.queue_id);
                    }
                }
                if let Some(link) = st.gpu_link.clone() {
                    if !mapped.is_empty() {
                        killed += gpu_request(&link, "wave_reset", caller.tgid, a.gpu_id, &mapped)?;
                    }
                }
                if let Some(g) = st.gpus.iter_mut().find(|g| g.gpu_id == a.gpu_id) {
                    g.wave_resets += 1;
                    g.waves_killed += killed;
                }
                Ok(IoctlReply {
                    result: 0,
                    data: Vec::new(),
                })
            }
            NR_CLEAR_QUEUE if st.reef_patch => {
                let a: KfdIoctlClearQueueArgs = args(cmd, AMDKFD_IOC_CLEAR_QUEUE, input)?;
                let q = st
                    .processes
                    .get_mut(&caller.tgid)
                    .and_then(|p| p.queues.get_mut(&a.queue_id))
                    .filter(|q| q.gpu_id == a.gpu_id)
                    .ok_or(Errno::EINVAL)?;
                // The patched driver parks the queue itself while it
                // rewrites the packets and maps it again afterwards; a
                // suspended queue stays suspended.
                q.pending_packets = 0;
                if let Some(link) = st.gpu_link.clone() {
                    gpu_request(&link, "clear_queue", caller.tgid, a.gpu_id, &[a.queue_id])?;
                }
                Ok(IoctlReply {
                    result: 0,
                    data: Vec::new(),
                })
            }
            // kfd_chardev.c answers numbers past its table with ENOTTY.
            _ => Err(Errno::ENOTTY),
        }
    }
}

/// One request to the simulated GPU linked with [`FakeKfd::link_gpu`]:
/// the line `OP PID GPU_ID Q1,Q2,…`, answered with `ok N` (work groups
/// killed, or packets turned into no-ops) once the GPU has applied it, so
/// the ioctl returns after its effect, as the real ones do. A GPU that
/// cannot be reached or refuses is the device failing: EIO.
fn gpu_request(
    link: &std::path::Path,
    op: &str,
    pid: u32,
    gpu_id: u32,
    queues: &[u32],
) -> Result<u64, Errno> {
    use std::io::{BufRead, Write};
    let ids: Vec<String> = queues.iter().map(u32::to_string).collect();
    let mut s = std::os::unix::net::UnixStream::connect(link).map_err(|_| Errno::EIO)?;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    writeln!(s, "{op} {pid} {gpu_id} {}", ids.join(",")).map_err(|_| Errno::EIO)?;
    let mut line = String::new();
    std::io::BufReader::new(s)
        .read_line(&mut line)
        .map_err(|_| Errno::EIO)?;
    line.trim()
        .strip_prefix("ok ")
        .and_then(|n| n.parse().ok())
        .ok_or(Errno::EIO)
}

/// Whether `caller` may debug `target`: it is the target, or its calling
/// thread is the target's tracer (kfd_chardev.c compares
/// `ptrace_parent(target->lead_thread)` with `current`).
fn may_debug(caller: &Caller, target: u32) -> bool {
    caller.tgid == target || proc_status_field(target, "TracerPid:") == Some(caller.tid)
}

fn dbg_trap(st: &mut KfdState, caller: &Caller, a: &mut KfdIoctlDbgTrapArgs) -> Result<i32, Errno> {
    let target = a.pid;
    let p = st.processes.get_mut(&target).ok_or(Errno::ESRCH)?;
    let op = a.op;
    if op != KFD_IOC_DBG_TRAP_DISABLE && !may_debug(caller, target) {
        return Err(Errno::EPERM);
    }
    if op != KFD_IOC_DBG_TRAP_ENABLE && p.debugger.is_none() {
        return Err(Errno::EINVAL);
    }
    let hw_op = matches!(
        op,
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES | KFD_IOC_DBG_TRAP_RESUME_QUEUES
    );
    if hw_op && !p.runtime_enabled {
        return Err(Errno::EACCES);
    }
    match op {
        KFD_IOC_DBG_TRAP_ENABLE => {
            // SAFETY: plain integer union; `enable` is the member for ENABLE.
            let mut e = unsafe { a.args.enable };
            if p.debugger.is_some() {
                return Err(Errno::EINVAL);
            }
            // KFD takes a reference to dbg_fd in the caller's fd table.
            if std::fs::symlink_metadata(format!("/proc/{}/fd/{}", caller.tgid, e.dbg_fd)).is_err()
            {
                return Err(Errno::EBADF);
            }
            let info = KfdRuntimeInfo {
                r_debug: p.r_debug,
                runtime_state: if p.runtime_enabled {
                    DEBUG_RUNTIME_STATE_ENABLED
                } else {
                    DEBUG_RUNTIME_STATE_DISABLED
                },
                ttmp_setup: 0,
            };
            let n = (e.rinfo_size as usize).min(size_of::<KfdRuntimeInfo>());
            caller.write_mem(e.rinfo_ptr, &bytes_of(&info)[..n])?;
            e.rinfo_size = size_of::<KfdRuntimeInfo>() as u32;
            a.args.enable = e;
            p.debugger = Some(caller.tgid);
            p.exception_mask = e.exception_mask;
            Ok(0)
        }
        KFD_IOC_DBG_TRAP_DISABLE => {
            p.debugger = None;
            p.exception_mask = 0;
            // Disabling the session resumes whatever the debugger suspended.
            for q in p.queues.values_mut() {
                q.suspended = false;
            }
            Ok(0)
        }
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES | KFD_IOC_DBG_TRAP_RESUME_QUEUES => {
            let suspend = op == KFD_IOC_DBG_TRAP_SUSPEND_QUEUES;
            // SAFETY: plain integer union; pick the member for this op.
            let (ptr, n, clear) = unsafe {
                if suspend {
                    let s = a.args.suspend_queues;
                    (s.queue_array_ptr, s.num_queues, s.exception_mask)
                } else {
                    let r = a.args.resume_queues;
                    (r.queue_array_ptr, r.num_queues, 0)
                }
            };
            let raw = caller.read_mem(ptr, n as usize * 4)?;
            let mut ids: Vec<u32> = raw
                .chunks_exact(4)
                .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let mut done = 0;
            for id in ids.iter_mut() {
                match p.queues.get_mut(id) {
                    None => *id |= KFD_DBG_QUEUE_INVALID_MASK,
                    // The fake's rule: a queue already in the requested state
                    // is neither counted nor flagged.
                    Some(q) if q.suspended == suspend => {}
                    Some(q) => {
                        q.suspended = suspend;
                        q.exception_status &= !clear;
                        done += 1;
                    }
                }
            }
            let out: Vec<u8> = ids.iter().flat_map(|i| i.to_ne_bytes()).collect();
            caller.write_mem(ptr, &out)?;
            Ok(done)
        }
        KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT => {
            // SAFETY: plain integer union; `queue_snapshot` is this op's member.
            let mut s = unsafe { a.args.queue_snapshot };
            let ours = size_of::<KfdQueueSnapshotEntry>();
            let stride = s.entry_size as usize;
            let fill = stride.min(ours);
            for (i, q) in p
                .queues
                .values_mut()
                .take(s.num_queues as usize)
                .enumerate()
            {
                let e = KfdQueueSnapshotEntry {
                    exception_status: q.exception_status,
                    ring_base_address: q.ring_base_address,
                    queue_id: q.queue_id,
                    gpu_id: q.gpu_id,
                    ring_size: q.ring_size,
                    queue_type: 0,
                    ..Default::default()
                };
                q.exception_status &= !s.exception_mask;
                caller.write_mem(
                    s.snapshot_buf_ptr + (i * stride) as u64,
                    &bytes_of(&e)[..fill],
                )?;
            }
            s.num_queues = p.queues.len() as u32;
            s.entry_size = fill as u32;
            a.args.queue_snapshot = s;
            Ok(0)
        }
        // Operations the fake does not model.
        _ => Err(Errno::EINVAL),
    }
}
