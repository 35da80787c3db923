//! The two out-of-tree KFD ioctls added by the REEF driver patch: killing the
//! running waves of the calling process on a GPU (`AMDKFD_IOC_WAVE_RESET`)
//! and dropping the unfetched kernel dispatches of one of its user-mode
//! queues (`AMDKFD_IOC_CLEAR_QUEUE`).
//!
//! Paper: REEF §4.5, "Kernel killing": REEF retrofits the amdgpu driver's GPU
//! reset so that the command processor kills all running kernels on the CUs
//! (< 3 us on the MI50 testbed), exposed to the preemption module through
//! `ioctl` and to HIP as `hip_reset_kern`; and Figure 7 (❷ resetting a DQ).
//!
//! These numbers are **not** in any upstream kernel: they are provided by the
//! REEF patch to amdkfd in `rocm-patch/`, written for Linux 6.12 and compiled
//! against Debian's linux-source-6.12 by `scripts/check-rocm-patch.sh`. The
//! values below are hand-written; `ioctl/bindgen-check` generates them with
//! bindgen from the patch applied to the 6.12 `kfd_ioctl.h` and its test
//! compares request codes, numbers, sizes, alignments and field offsets with
//! these (all equal; see docs/hardware.md). They sit above the 6.12 command
//! range (`AMDKFD_COMMAND_END` = 0x27, after the debug API's 0x25 and 0x26),
//! so an unpatched kernel answers them with `ENOTTY` ("nr >=
//! AMDKFD_CORE_IOCTL_COUNT" in `kfd_chardev.c`), which [`crate::kfd::Kfd`]
//! reports as "this kernel lacks the REEF patch". Both carry input only, so
//! they are `_IOW`.

use std::mem::size_of;

use super::abi::AMDKFD_IOCTL_BASE;

/// ioctl number of `AMDKFD_IOC_WAVE_RESET` (REEF patch).
pub const NR_WAVE_RESET: u8 = 0x85;
/// ioctl number of `AMDKFD_IOC_CLEAR_QUEUE` (REEF patch).
pub const NR_CLEAR_QUEUE: u8 = 0x86;

/// `struct kfd_ioctl_wave_reset_args` of the REEF patch.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlWaveResetArgs {
    /// The KFD gpu_id (`/sys/class/kfd/kfd/topology/nodes/N/gpu_id`).
    pub gpu_id: u32,
}

/// `struct kfd_ioctl_clear_queue_args` of the REEF patch.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KfdIoctlClearQueueArgs {
    pub gpu_id: u32,
    /// A queue id of the calling process, as returned by CREATE_QUEUE.
    pub queue_id: u32,
}

/// `AMDKFD_IOC_WAVE_RESET`: `_IOW('K', 0x85, struct kfd_ioctl_wave_reset_args)`.
pub const AMDKFD_IOC_WAVE_RESET: u32 = nix::request_code_write!(
    AMDKFD_IOCTL_BASE,
    NR_WAVE_RESET,
    size_of::<KfdIoctlWaveResetArgs>()
) as u32;
/// `AMDKFD_IOC_CLEAR_QUEUE`: `_IOW('K', 0x86, struct kfd_ioctl_clear_queue_args)`.
pub const AMDKFD_IOC_CLEAR_QUEUE: u32 = nix::request_code_write!(
    AMDKFD_IOCTL_BASE,
    NR_CLEAR_QUEUE,
    size_of::<KfdIoctlClearQueueArgs>()
) as u32;

nix::ioctl_write_ptr!(
    kfd_wave_reset,
    AMDKFD_IOCTL_BASE,
    NR_WAVE_RESET,
    KfdIoctlWaveResetArgs
);
nix::ioctl_write_ptr!(
    kfd_clear_queue,
    AMDKFD_IOCTL_BASE,
    NR_CLEAR_QUEUE,
    KfdIoctlClearQueueArgs
);

const _: () = {
    assert!(size_of::<KfdIoctlWaveResetArgs>() == 4);
    assert!(size_of::<KfdIoctlClearQueueArgs>() == 8);
    assert!(AMDKFD_IOC_WAVE_RESET == 0x4004_4B85);
    assert!(AMDKFD_IOC_CLEAR_QUEUE == 0x4008_4B86);
};
