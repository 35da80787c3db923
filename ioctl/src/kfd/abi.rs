//! The AMD KFD ioctl ABI (`/dev/kfd`) that reefd uses: `#[repr(C)]` argument
//! structs with size and offset assertions, and the request codes built with
//! nix's `request_code_*` macros.
//!
//! Paper: REEF §4.5 ("Reset-Based Preemption on Open-Source GPUs"), Figure 7
//! (the queues a preemption acts on) — suspending and resuming a best-effort
//! process's device queues, and (with the REEF driver patch, see
//! [`crate::kfd::reef_patch`]) killing running waves.
//!
//! ABI source: Linux `include/uapi/linux/kfd_ioctl.h` as shipped by Debian's
//! `linux-libc-dev` 6.12 (bookworm-backports), interface version 1.17; the
//! debugger API (RUNTIME_ENABLE, DBG_TRAP) appeared in interface 1.13
//! (Linux 6.4). Line numbers below refer to that header (6.12.95). Every
//! request code, struct size and field offset here is compared against the
//! header by a C program in `tests/kfd_header.rs`.

use std::mem::{offset_of, size_of};

/// ioctl type letter, `AMDKFD_IOCTL_BASE` (kfd_ioctl.h:1544).
pub const AMDKFD_IOCTL_BASE: u8 = b'K';

/// Interface version this crate was checked against (kfd_ioctl.h:47-48).
pub const KFD_IOCTL_MAJOR_VERSION: u32 = 1;
/// See [`KFD_IOCTL_MAJOR_VERSION`].
pub const KFD_IOCTL_MINOR_VERSION: u32 = 17;
/// First minor version with the debugger API (kfd_ioctl.h:41, "1.13 - Add
/// debugger API").
pub const KFD_MINOR_VERSION_DEBUGGER_API: u32 = 13;

/// `AMDKFD_IOC_GET_VERSION` number (kfd_ioctl.h:1550).
pub const NR_GET_VERSION: u8 = 0x01;
/// `AMDKFD_IOC_CREATE_QUEUE` number (kfd_ioctl.h:1553).
pub const NR_CREATE_QUEUE: u8 = 0x02;
/// `AMDKFD_IOC_DESTROY_QUEUE` number (kfd_ioctl.h:1556).
pub const NR_DESTROY_QUEUE: u8 = 0x03;
/// `AMDKFD_IOC_SET_CU_MASK` number (kfd_ioctl.h:1626).
pub const NR_SET_CU_MASK: u8 = 0x1A;
/// `AMDKFD_IOC_RUNTIME_ENABLE` number (kfd_ioctl.h:1658).
pub const NR_RUNTIME_ENABLE: u8 = 0x25;
/// `AMDKFD_IOC_DBG_TRAP` number (kfd_ioctl.h:1661).
pub const NR_DBG_TRAP: u8 = 0x26;
/// `AMDKFD_COMMAND_END` (kfd_ioctl.h:1665): upstream numbers stay below it.
pub const AMDKFD_COMMAND_END: u8 = 0x27;

/// `struct kfd_ioctl_get_version_args` (kfd_ioctl.h:50).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlGetVersionArgs {
    /// Out.
    pub major_version: u32,
    /// Out.
    pub minor_version: u32,
}

/// `KFD_IOC_QUEUE_TYPE_COMPUTE_AQL` (kfd_ioctl.h:58): the queue type ROCr
/// creates for HSA (AQL) queues.
pub const KFD_IOC_QUEUE_TYPE_COMPUTE_AQL: u32 = 0x2;

/// `struct kfd_ioctl_create_queue_args` (kfd_ioctl.h:67): what a runtime
/// (ROCr, through libhsakmt's `hsaKmtCreateQueue`) passes to create a
/// user-mode queue; KFD returns its `queue_id`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlCreateQueueArgs {
    pub ring_base_address: u64,
    /// Out.
    pub write_pointer_address: u64,
    /// Out.
    pub read_pointer_address: u64,
    /// Out.
    pub doorbell_offset: u64,
    pub ring_size: u32,
    pub gpu_id: u32,
    pub queue_type: u32,
    pub queue_percentage: u32,
    pub queue_priority: u32,
    /// Out.
    pub queue_id: u32,
    pub eop_buffer_address: u64,
    pub eop_buffer_size: u64,
    pub ctx_save_restore_address: u64,
    pub ctx_save_restore_size: u32,
    pub ctl_stack_size: u32,
    pub sdma_engine_id: u32,
    pub pad: u32,
}

/// `struct kfd_ioctl_destroy_queue_args` (kfd_ioctl.h:89).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlDestroyQueueArgs {
    pub queue_id: u32,
    pub pad: u32,
}

/// `struct kfd_ioctl_set_cu_mask_args` (kfd_ioctl.h:103).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlSetCuMaskArgs {
    /// A queue of the calling process.
    pub queue_id: u32,
    /// Number of CUs described, i.e. bits in the mask (a multiple of 32).
    pub num_cu_mask: u32,
    /// User pointer to `num_cu_mask / 32` u32 words.
    pub cu_mask_ptr: u64,
}

/// `struct kfd_runtime_info` (kfd_ioctl.h:1029): written by DBG_TRAP ENABLE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdRuntimeInfo {
    pub r_debug: u64,
    /// One of the `DEBUG_RUNTIME_STATE_*` values.
    pub runtime_state: u32,
    pub ttmp_setup: u32,
}

/// `enum kfd_dbg_runtime_state` values (kfd_ioctl.h:1021-1026).
pub const DEBUG_RUNTIME_STATE_DISABLED: u32 = 0;
/// See [`DEBUG_RUNTIME_STATE_DISABLED`].
pub const DEBUG_RUNTIME_STATE_ENABLED: u32 = 1;
/// See [`DEBUG_RUNTIME_STATE_DISABLED`].
pub const DEBUG_RUNTIME_STATE_ENABLED_BUSY: u32 = 2;
/// See [`DEBUG_RUNTIME_STATE_DISABLED`].
pub const DEBUG_RUNTIME_STATE_ENABLED_ERROR: u32 = 3;

/// `KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK` (kfd_ioctl.h:1036).
pub const KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK: u32 = 1;
/// `KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK` (kfd_ioctl.h:1037).
pub const KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK: u32 = 2;

/// `struct kfd_ioctl_runtime_enable_args` (kfd_ioctl.h:1058).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlRuntimeEnableArgs {
    pub r_debug: u64,
    pub mode_mask: u32,
    pub capabilities_mask: u32,
}

/// `struct kfd_queue_snapshot_entry` (kfd_ioctl.h:1065).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdQueueSnapshotEntry {
    pub exception_status: u64,
    pub ring_base_address: u64,
    pub write_pointer_address: u64,
    pub read_pointer_address: u64,
    pub ctx_save_restore_address: u64,
    pub queue_id: u32,
    pub gpu_id: u32,
    pub ring_size: u32,
    pub queue_type: u32,
    pub ctx_save_restore_area_size: u32,
    pub reserved: u32,
}

/// `KFD_DBG_QUEUE_ERROR_MASK` (kfd_ioctl.h:1082): set in a queue id returned
/// by suspend/resume when the hardware failed on that queue.
pub const KFD_DBG_QUEUE_ERROR_MASK: u32 = 1 << 30;
/// `KFD_DBG_QUEUE_INVALID_MASK` (kfd_ioctl.h:1083): the queue does not exist,
/// is new, or is being destroyed.
pub const KFD_DBG_QUEUE_INVALID_MASK: u32 = 1 << 31;

/// `enum kfd_dbg_trap_operations` values used here (kfd_ioctl.h:1124-1140).
pub const KFD_IOC_DBG_TRAP_ENABLE: u32 = 0;
/// See [`KFD_IOC_DBG_TRAP_ENABLE`].
pub const KFD_IOC_DBG_TRAP_DISABLE: u32 = 1;
/// See [`KFD_IOC_DBG_TRAP_ENABLE`].
pub const KFD_IOC_DBG_TRAP_SUSPEND_QUEUES: u32 = 6;
/// See [`KFD_IOC_DBG_TRAP_ENABLE`].
pub const KFD_IOC_DBG_TRAP_RESUME_QUEUES: u32 = 7;
/// See [`KFD_IOC_DBG_TRAP_ENABLE`].
pub const KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT: u32 = 13;

/// `struct kfd_ioctl_dbg_trap_enable_args` (kfd_ioctl.h:1165).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlDbgTrapEnableArgs {
    pub exception_mask: u64,
    /// User pointer to a [`KfdRuntimeInfo`].
    pub rinfo_ptr: u64,
    /// In: size of the buffer; out: size KFD saved.
    pub rinfo_size: u32,
    /// A file descriptor the KFD signals raised exceptions on by writing one
    /// byte (a pipe; an eventfd would reject one-byte writes).
    pub dbg_fd: u32,
}

/// `struct kfd_ioctl_dbg_trap_suspend_queues_args` (kfd_ioctl.h:1288).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlDbgTrapSuspendQueuesArgs {
    pub exception_mask: u64,
    /// User pointer to `num_queues` u32 queue ids (status bits come back in
    /// the same array).
    pub queue_array_ptr: u64,
    pub num_queues: u32,
    /// Microseconds the waves get to reach a trap before the CP forces them.
    pub grace_period: u32,
}

/// `struct kfd_ioctl_dbg_trap_resume_queues_args` (kfd_ioctl.h:1313).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlDbgTrapResumeQueuesArgs {
    pub queue_array_ptr: u64,
    pub num_queues: u32,
    pub pad: u32,
}

/// `struct kfd_ioctl_dbg_trap_queue_snapshot_args` (kfd_ioctl.h:1468).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlDbgTrapQueueSnapshotArgs {
    pub exception_mask: u64,
    /// User pointer to `num_queues` entries of `entry_size` bytes.
    pub snapshot_buf_ptr: u64,
    /// In: capacity; out: number of queues that exist.
    pub num_queues: u32,
    /// In: the caller's entry size; out: bytes KFD filled per entry.
    pub entry_size: u32,
}

/// The anonymous union of `struct kfd_ioctl_dbg_trap_args`
/// (kfd_ioctl.h:1526-1541), with the members reefd uses. `raw` spans the
/// largest member (24 bytes: enable, suspend_queues, queue_snapshot and
/// others all have that size), so the union has the C size.
#[repr(C)]
#[derive(Clone, Copy)]
pub union KfdIoctlDbgTrapOpArgs {
    pub enable: KfdIoctlDbgTrapEnableArgs,
    pub suspend_queues: KfdIoctlDbgTrapSuspendQueuesArgs,
    pub resume_queues: KfdIoctlDbgTrapResumeQueuesArgs,
    pub queue_snapshot: KfdIoctlDbgTrapQueueSnapshotArgs,
    pub raw: [u64; 3],
}

impl Default for KfdIoctlDbgTrapOpArgs {
    fn default() -> Self {
        Self { raw: [0; 3] }
    }
}

impl std::fmt::Debug for KfdIoctlDbgTrapOpArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: every member is plain integers covering the same 24 bytes.
        let raw = unsafe { self.raw };
        f.debug_struct("KfdIoctlDbgTrapOpArgs")
            .field("raw", &raw)
            .finish()
    }
}

/// `struct kfd_ioctl_dbg_trap_args` (kfd_ioctl.h:1522).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdIoctlDbgTrapArgs {
    /// The process to debug (a tgid).
    pub pid: u32,
    /// One of the `KFD_IOC_DBG_TRAP_*` operations.
    pub op: u32,
    pub args: KfdIoctlDbgTrapOpArgs,
}

/// `AMDKFD_IOC_GET_VERSION`: `_IOR('K', 0x01, struct kfd_ioctl_get_version_args)`.
pub const AMDKFD_IOC_GET_VERSION: u32 = nix::request_code_read!(
    AMDKFD_IOCTL_BASE,
    NR_GET_VERSION,
    size_of::<KfdIoctlGetVersionArgs>()
) as u32;
/// `AMDKFD_IOC_SET_CU_MASK`: `_IOW('K', 0x1A, struct kfd_ioctl_set_cu_mask_args)`.
pub const AMDKFD_IOC_SET_CU_MASK: u32 = nix::request_code_write!(
    AMDKFD_IOCTL_BASE,
    NR_SET_CU_MASK,
    size_of::<KfdIoctlSetCuMaskArgs>()
) as u32;
/// `AMDKFD_IOC_CREATE_QUEUE`: `_IOWR('K', 0x02, struct kfd_ioctl_create_queue_args)`.
pub const AMDKFD_IOC_CREATE_QUEUE: u32 = nix::request_code_readwrite!(
    AMDKFD_IOCTL_BASE,
    NR_CREATE_QUEUE,
    size_of::<KfdIoctlCreateQueueArgs>()
) as u32;
/// `AMDKFD_IOC_DESTROY_QUEUE`: `_IOWR('K', 0x03, struct kfd_ioctl_destroy_queue_args)`.
pub const AMDKFD_IOC_DESTROY_QUEUE: u32 = nix::request_code_readwrite!(
    AMDKFD_IOCTL_BASE,
    NR_DESTROY_QUEUE,
    size_of::<KfdIoctlDestroyQueueArgs>()
) as u32;
/// `AMDKFD_IOC_RUNTIME_ENABLE`: `_IOWR('K', 0x25, struct kfd_ioctl_runtime_enable_args)`.
pub const AMDKFD_IOC_RUNTIME_ENABLE: u32 = nix::request_code_readwrite!(
    AMDKFD_IOCTL_BASE,
    NR_RUNTIME_ENABLE,
    size_of::<KfdIoctlRuntimeEnableArgs>()
) as u32;
/// `AMDKFD_IOC_DBG_TRAP`: `_IOWR('K', 0x26, struct kfd_ioctl_dbg_trap_args)`.
pub const AMDKFD_IOC_DBG_TRAP: u32 = nix::request_code_readwrite!(
    AMDKFD_IOCTL_BASE,
    NR_DBG_TRAP,
    size_of::<KfdIoctlDbgTrapArgs>()
) as u32;

nix::ioctl_read!(
    kfd_get_version,
    AMDKFD_IOCTL_BASE,
    NR_GET_VERSION,
    KfdIoctlGetVersionArgs
);
nix::ioctl_readwrite!(
    kfd_create_queue,
    AMDKFD_IOCTL_BASE,
    NR_CREATE_QUEUE,
    KfdIoctlCreateQueueArgs
);
nix::ioctl_readwrite!(
    kfd_destroy_queue,
    AMDKFD_IOCTL_BASE,
    NR_DESTROY_QUEUE,
    KfdIoctlDestroyQueueArgs
);
nix::ioctl_write_ptr!(
    kfd_set_cu_mask,
    AMDKFD_IOCTL_BASE,
    NR_SET_CU_MASK,
    KfdIoctlSetCuMaskArgs
);
nix::ioctl_readwrite!(
    kfd_runtime_enable,
    AMDKFD_IOCTL_BASE,
    NR_RUNTIME_ENABLE,
    KfdIoctlRuntimeEnableArgs
);
nix::ioctl_readwrite!(
    kfd_dbg_trap,
    AMDKFD_IOCTL_BASE,
    NR_DBG_TRAP,
    KfdIoctlDbgTrapArgs
);

// Layout assertions: sizes and offsets as the C compiler lays them out on
// x86_64 (checked against the header by tests/kfd_header.rs).
const _: () = {
    assert!(size_of::<KfdIoctlGetVersionArgs>() == 8);
    assert!(size_of::<KfdIoctlCreateQueueArgs>() == 96);
    assert!(offset_of!(KfdIoctlCreateQueueArgs, queue_id) == 52);
    assert!(offset_of!(KfdIoctlCreateQueueArgs, sdma_engine_id) == 88);
    assert!(size_of::<KfdIoctlDestroyQueueArgs>() == 8);
    assert!(size_of::<KfdIoctlSetCuMaskArgs>() == 16);
    assert!(offset_of!(KfdIoctlSetCuMaskArgs, cu_mask_ptr) == 8);
    assert!(size_of::<KfdRuntimeInfo>() == 16);
    assert!(size_of::<KfdIoctlRuntimeEnableArgs>() == 16);
    assert!(offset_of!(KfdIoctlRuntimeEnableArgs, capabilities_mask) == 12);
    assert!(size_of::<KfdQueueSnapshotEntry>() == 64);
    assert!(offset_of!(KfdQueueSnapshotEntry, queue_id) == 40);
    assert!(offset_of!(KfdQueueSnapshotEntry, reserved) == 60);
    assert!(size_of::<KfdIoctlDbgTrapEnableArgs>() == 24);
    assert!(offset_of!(KfdIoctlDbgTrapEnableArgs, dbg_fd) == 20);
    assert!(size_of::<KfdIoctlDbgTrapSuspendQueuesArgs>() == 24);
    assert!(offset_of!(KfdIoctlDbgTrapSuspendQueuesArgs, grace_period) == 20);
    assert!(size_of::<KfdIoctlDbgTrapResumeQueuesArgs>() == 16);
    assert!(size_of::<KfdIoctlDbgTrapQueueSnapshotArgs>() == 24);
    assert!(size_of::<KfdIoctlDbgTrapOpArgs>() == 24);
    assert!(size_of::<KfdIoctlDbgTrapArgs>() == 32);
    assert!(offset_of!(KfdIoctlDbgTrapArgs, args) == 8);
};
