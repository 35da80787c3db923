//! The NVIDIA Resource Manager (RM) ioctl ABI on `/dev/nvidiactl` that reefd
//! uses: the three escapes NV_ESC_RM_ALLOC / NV_ESC_RM_CONTROL / NV_ESC_RM_FREE
//! with their parameter structs, the debugger object (class 0x83de,
//! `GT200_DEBUGGER`) and its controls, and the channel-group (TSG, class
//! 0xa06c, `KEPLER_CHANNEL_GROUP_A`) controls.
//!
//! Paper: REEF §4.6 ("Reset-Based Preemption on Closed-Source GPUs"),
//! "Kernel killing": the trap interface "exposed by the recently open-source
//! NVIDIA GPU driver via the ioctl system call and compatible with the
//! closed-source driver"; Figure 8 (the preemptor and the trap handler).
//!
//! ABI source: NVIDIA/open-gpu-kernel-modules. Values are facts read from the
//! driver's sources; each carries `file:line` at the commit named (the
//! repository's files are stable across the 530–570 releases the paper
//! names). Paths are relative to the repository root:
//! - `kernel-open/common/inc/nv-ioctl-numbers.h` @2c7bfb47
//! - `src/nvidia/arch/nvalloc/unix/include/nv_escape.h` @1739a20e
//! - `src/common/sdk/nvidia/inc/nvos.h` @448d5cc6
//! - `src/common/sdk/nvidia/inc/class/cl83de.h` @1739a20e
//! - `src/common/sdk/nvidia/inc/ctrl/ctrl83de/ctrl83dedebug.h` @877fd23c
//! - `src/common/sdk/nvidia/inc/ctrl/ctrla06c.h` @1739a20e
//! - `src/common/sdk/nvidia/inc/ctrl/ctrl2080/ctrl2080gpu.h` @448d5cc6 (REG_OP:
//!   the struct, READ_32/WRITE_32, TYPE_GLOBAL/GR_CTX, STATUS_SUCCESS/INVALID_OP;
//!   a large generated file, so no line numbers)
//! - `src/common/sdk/nvidia/inc/nvstatuscodes.h` @307159f2
//!
//! How userspace encodes an escape: `_IOWR(NV_IOCTL_MAGIC, NV_ESC_*,
//! sizeof(params))`; the driver (`kernel-open/nvidia/nv.c`, `nvidia_ioctl`)
//! takes the escape from `_IOC_NR` and the copy size from `_IOC_SIZE`. So
//! NV_ESC_RM_CONTROL with the 32-byte NVOS54 is 0xC020462A. The same three
//! codes are the ones envytools' ioctl tracer for the NVIDIA driver decodes
//! (envytools/valgrind, `mmt/mmt_nv_ioctl.c`: 0xc020462b "create gpu
//! object", 0xc020462a "call method", 0xc0104629 "destroy object"); no
//! trace was recorded here.

use std::mem::{offset_of, size_of};

/// An RM object handle (`NvHandle`, a 32-bit integer).
pub type NvHandle = u32;

/// `NV_IOCTL_MAGIC` (nv-ioctl-numbers.h:33).
pub const NV_IOCTL_MAGIC: u8 = b'F';
/// `NV_IOCTL_BASE` (nv-ioctl-numbers.h:34): the OS-level escapes start here.
pub const NV_IOCTL_BASE: u8 = 200;

/// `NV_ESC_RM_FREE` (nv_escape.h:29).
pub const NV_ESC_RM_FREE: u8 = 0x29;
/// `NV_ESC_RM_CONTROL` (nv_escape.h:30).
pub const NV_ESC_RM_CONTROL: u8 = 0x2A;
/// `NV_ESC_RM_ALLOC` (nv_escape.h:31).
pub const NV_ESC_RM_ALLOC: u8 = 0x2B;

/// `NVOS00_PARAMETERS` (nvos.h, "NvRmFree"): argument of NV_ESC_RM_FREE.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nvos00Parameters {
    pub h_root: NvHandle,
    pub h_object_parent: NvHandle,
    pub h_object_old: NvHandle,
    /// Out: an `NV_STATUS`.
    pub status: u32,
}

/// `NVOS21_PARAMETERS` (nvos.h, "NvRmAlloc"): argument of NV_ESC_RM_ALLOC.
/// `pAllocParms` is `NvP64 NV_ALIGN_BYTES(8)`, hence the 8-byte alignment.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nvos21Parameters {
    pub h_root: NvHandle,
    pub h_object_parent: NvHandle,
    /// In: the handle to create, or 0 for RM to choose (clients only); out:
    /// the handle created.
    pub h_object_new: NvHandle,
    pub h_class: u32,
    /// User pointer to the class's allocation parameters.
    pub p_alloc_parms: u64,
    pub params_size: u32,
    /// Out: an `NV_STATUS`.
    pub status: u32,
}

/// `NVOS54_PARAMETERS` (nvos.h, "NvRmControl"): argument of
/// NV_ESC_RM_CONTROL.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nvos54Parameters {
    pub h_client: NvHandle,
    pub h_object: NvHandle,
    /// The control command, `0xCCCCGGMM`: class, category, message id.
    pub cmd: u32,
    pub flags: u32,
    /// User pointer to the command's parameter struct.
    pub params: u64,
    pub params_size: u32,
    /// Out: an `NV_STATUS`.
    pub status: u32,
}

/// `NV01_ROOT_CLIENT` (class/cl0041.h): a client, allocated with hRoot =
/// hObjectParent = 0.
pub const NV01_ROOT_CLIENT: u32 = 0x41;
/// `NV01_DEVICE_0` (class/cl0080.h; also nvos.h "NV01_DEVICE_0 0x80").
pub const NV01_DEVICE_0: u32 = 0x80;
/// `NV20_SUBDEVICE_0` (class/cl2080.h).
pub const NV20_SUBDEVICE_0: u32 = 0x2080;
/// `KEPLER_CHANNEL_GROUP_A` (class/cla06c.h): a TSG.
pub const KEPLER_CHANNEL_GROUP_A: u32 = 0xa06c;
/// `GT200_DEBUGGER` (cl83de.h:33).
pub const GT200_DEBUGGER: u32 = 0x83de;

/// `NV0080_ALLOC_PARAMETERS` (class/cl0080.h), allocation parameters of
/// `NV01_DEVICE_0`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nv0080AllocParameters {
    pub device_id: u32,
    pub h_client_share: NvHandle,
    pub h_target_client: NvHandle,
    pub h_target_device: NvHandle,
    pub flags: u32,
    /// Explicit padding (C aligns the next field to 8).
    pub _pad0: u32,
    pub va_space_size: u64,
    pub va_start_internal: u64,
    pub va_limit_internal: u64,
    pub va_mode: u32,
    /// Explicit tail padding (the C struct's alignment is 8).
    pub _pad1: u32,
}

/// `NV83DE_ALLOC_PARAMETERS` (cl83de.h:51-55). The debugger is allocated in
/// the debugger's own client: `NvRmAlloc(hDebuggerClient, hDebuggerClient,
/// hDebugger, GT200_DEBUGGER, &params)` (cl83de.h:46).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nv83deAllocParameters {
    /// Must be zero (cl83de.h:52, "No longer supported").
    pub h_debugger_client_obsolete: NvHandle,
    /// The debuggee's client (the CUDA context's RM client).
    pub h_app_client: NvHandle,
    /// The debuggee's compute (or 3D) class object.
    pub h_class3d_object: NvHandle,
}

/// `NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK` (ctrl83dedebug.h,
/// "(FINN_GT200_DEBUGGER_DEBUG_INTERFACE_ID << 8) | 0x9").
pub const NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK: u32 = 0x83de_0309;
/// `NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT` (ctrl83dedebug.h, message id 0x17).
pub const NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT: u32 = 0x83de_0317;
/// `NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT` (ctrl83dedebug.h, message id 0x18).
pub const NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT: u32 = 0x83de_0318;
/// `NV83DE_CTRL_CMD_DEBUG_EXEC_REG_OPS` (ctrl83dedebug.h, message id 0x1D).
pub const NV83DE_CTRL_CMD_DEBUG_EXEC_REG_OPS: u32 = 0x83de_031d;

/// `NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_PARAMS` (ctrl83dedebug.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nv83deCtrlDebugSetExceptionMaskParams {
    /// `NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_*` bits.
    pub exception_mask: u32,
}

/// `NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_*` (ctrl83dedebug.h).
pub const NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL: u32 = 0x01;
/// See [`NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL`].
pub const NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP: u32 = 0x02;
/// See [`NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL`].
pub const NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_SINGLE_STEP: u32 = 0x04;
/// See [`NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL`].
pub const NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_INT: u32 = 0x08;
/// See [`NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL`].
pub const NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_NONE: u32 = 0x00;

/// `NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT_PARAMS`, a typedef of
/// `NV83DE_CTRL_CMD_DEBUG_SUSPEND_ALL_CONTEXTS_FOR_CLIENT_PARAMS`
/// (ctrl83dedebug.h). RESUME_CONTEXT takes no parameters.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nv83deCtrlDebugSuspendContextParams {
    /// Out: non-zero when RM had to issue a preempt and the caller may need to
    /// wait for it.
    pub wait_for_event: u32,
    /// Out: the channel that was resident on the GR engine, if any.
    pub h_resident_channel: NvHandle,
}

/// `NV2080_CTRL_GPU_REG_OP` (ctrl2080gpu.h): one register operation.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nv2080CtrlGpuRegOp {
    /// `NV2080_CTRL_GPU_REG_OP_READ_32` etc.
    pub reg_op: u8,
    /// `NV2080_CTRL_GPU_REG_OP_TYPE_*`.
    pub reg_type: u8,
    /// Out: `NV2080_CTRL_GPU_REG_OP_STATUS_*`.
    pub reg_status: u8,
    pub reg_quad: u8,
    pub reg_group_mask: u32,
    pub reg_sub_group_mask: u32,
    pub reg_offset: u32,
    pub reg_value_hi: u32,
    pub reg_value_lo: u32,
    pub reg_and_n_mask_hi: u32,
    pub reg_and_n_mask_lo: u32,
}

/// `NV2080_CTRL_GPU_REG_OP_READ_32` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_READ_32: u8 = 0x00;
/// `NV2080_CTRL_GPU_REG_OP_WRITE_32` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_WRITE_32: u8 = 0x01;
/// `NV2080_CTRL_GPU_REG_OP_TYPE_GLOBAL` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_TYPE_GLOBAL: u8 = 0x00;
/// `NV2080_CTRL_GPU_REG_OP_TYPE_GR_CTX` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_TYPE_GR_CTX: u8 = 0x01;
/// `NV2080_CTRL_GPU_REG_OP_STATUS_SUCCESS` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_STATUS_SUCCESS: u8 = 0x00;
/// `NV2080_CTRL_GPU_REG_OP_STATUS_INVALID_OP` (ctrl2080gpu.h).
pub const NV2080_CTRL_GPU_REG_OP_STATUS_INVALID_OP: u8 = 0x01;

/// `NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS` (ctrl83dedebug.h).
pub const NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS: usize = 100;

/// `NV83DE_CTRL_DEBUG_EXEC_REG_OPS_PARAMS` (ctrl83dedebug.h): the operations
/// are inline, not behind a pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nv83deCtrlDebugExecRegOpsParams {
    /// `NvBool`.
    pub b_non_transactional: u8,
    /// Explicit padding (C aligns `regOpCount` to 4).
    pub _pad: [u8; 3],
    pub reg_op_count: u32,
    pub reg_ops: [Nv2080CtrlGpuRegOp; NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS],
}

impl Default for Nv83deCtrlDebugExecRegOpsParams {
    fn default() -> Self {
        Self {
            b_non_transactional: 0,
            _pad: [0; 3],
            reg_op_count: 0,
            reg_ops: [Nv2080CtrlGpuRegOp::default(); NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS],
        }
    }
}

/// `NVA06C_CTRL_CMD_SET_TIMESLICE` (ctrla06c.h:153).
pub const NVA06C_CTRL_CMD_SET_TIMESLICE: u32 = 0xa06c_0103;
/// `NVA06C_CTRL_CMD_GET_TIMESLICE` (ctrla06c.h:171).
pub const NVA06C_CTRL_CMD_GET_TIMESLICE: u32 = 0xa06c_0104;
/// `NVA06C_CTRL_CMD_PREEMPT` (ctrla06c.h:202).
pub const NVA06C_CTRL_CMD_PREEMPT: u32 = 0xa06c_0105;
/// `NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL` (ctrla06c.h:267). Needs a
/// privileged client (ctrla06c.h:253).
pub const NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL: u32 = 0xa06c_0107;

/// `NVA06C_CTRL_TIMESLICE_PARAMS` (ctrla06c.h:173-175), for SET and GET.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nva06cCtrlTimesliceParams {
    pub timeslice_us: u64,
}

/// `NVA06C_CTRL_PREEMPT_PARAMS` (ctrla06c.h:206-210).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nva06cCtrlPreemptParams {
    /// `NvBool`: wait for the preempt to complete.
    pub b_wait: u8,
    /// `NvBool`: use `timeout_us`.
    pub b_manual_timeout: u8,
    /// Explicit padding (C aligns `timeoutUs` to 4).
    pub _pad: [u8; 2],
    pub timeout_us: u32,
}

/// `NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US` (ctrla06c.h:212).
pub const NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US: u32 = 1_000_000;

/// `NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS` (ctrla06c.h:287-289).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Nva06cCtrlInterleaveLevelParams {
    pub tsg_interleave_level: u32,
}

/// `NVA06C_CTRL_INTERLEAVE_LEVEL_LOW` (ctrla06c.h:291).
pub const NVA06C_CTRL_INTERLEAVE_LEVEL_LOW: u32 = 0;
/// `NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM` (ctrla06c.h:292).
pub const NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM: u32 = 1;
/// `NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH` (ctrla06c.h:293).
pub const NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH: u32 = 2;

/// `NV_STATUS` codes the wrappers name (nvstatuscodes.h; code `0xN` for
/// N >= 1 sits on line 29 + N of that file).
pub mod status {
    /// nvstatuscodes.h:27.
    pub const NV_OK: u32 = 0x00;
    /// nvstatuscodes.h:52.
    pub const NV_ERR_IN_USE: u32 = 0x17;
    /// nvstatuscodes.h:54.
    pub const NV_ERR_INSERT_DUPLICATE_NAME: u32 = 0x19;
    /// nvstatuscodes.h:56.
    pub const NV_ERR_INSUFFICIENT_PERMISSIONS: u32 = 0x1B;
    /// nvstatuscodes.h:60.
    pub const NV_ERR_INVALID_ARGUMENT: u32 = 0x1F;
    /// nvstatuscodes.h:63.
    pub const NV_ERR_INVALID_CLASS: u32 = 0x22;
    /// nvstatuscodes.h:64.
    pub const NV_ERR_INVALID_CLIENT: u32 = 0x23;
    /// nvstatuscodes.h:65.
    pub const NV_ERR_INVALID_COMMAND: u32 = 0x24;
    /// nvstatuscodes.h:80.
    pub const NV_ERR_INVALID_OBJECT_HANDLE: u32 = 0x33;
    /// nvstatuscodes.h:81.
    pub const NV_ERR_INVALID_OBJECT_NEW: u32 = 0x34;
    /// nvstatuscodes.h:83.
    pub const NV_ERR_INVALID_OBJECT_PARENT: u32 = 0x36;
    /// nvstatuscodes.h:87.
    pub const NV_ERR_INVALID_PARAM_STRUCT: u32 = 0x3A;
    /// nvstatuscodes.h:93.
    pub const NV_ERR_INVALID_STATE: u32 = 0x40;
    /// nvstatuscodes.h:115.
    pub const NV_ERR_NOT_SUPPORTED: u32 = 0x56;
    /// nvstatuscodes.h:116.
    pub const NV_ERR_OBJECT_NOT_FOUND: u32 = 0x57;
    /// nvstatuscodes.h:130.
    pub const NV_ERR_TIMEOUT: u32 = 0x65;

    /// The symbolic name of a status code, for error messages.
    pub fn name(status: u32) -> &'static str {
        match status {
            NV_OK => "NV_OK",
            NV_ERR_IN_USE => "NV_ERR_IN_USE",
            NV_ERR_INSERT_DUPLICATE_NAME => "NV_ERR_INSERT_DUPLICATE_NAME",
            NV_ERR_INSUFFICIENT_PERMISSIONS => "NV_ERR_INSUFFICIENT_PERMISSIONS",
            NV_ERR_INVALID_ARGUMENT => "NV_ERR_INVALID_ARGUMENT",
            NV_ERR_INVALID_CLASS => "NV_ERR_INVALID_CLASS",
            NV_ERR_INVALID_CLIENT => "NV_ERR_INVALID_CLIENT",
            NV_ERR_INVALID_COMMAND => "NV_ERR_INVALID_COMMAND",
            NV_ERR_INVALID_OBJECT_HANDLE => "NV_ERR_INVALID_OBJECT_HANDLE",
            NV_ERR_INVALID_OBJECT_NEW => "NV_ERR_INVALID_OBJECT_NEW",
            NV_ERR_INVALID_OBJECT_PARENT => "NV_ERR_INVALID_OBJECT_PARENT",
            NV_ERR_INVALID_PARAM_STRUCT => "NV_ERR_INVALID_PARAM_STRUCT",
            NV_ERR_INVALID_STATE => "NV_ERR_INVALID_STATE",
            NV_ERR_NOT_SUPPORTED => "NV_ERR_NOT_SUPPORTED",
            NV_ERR_OBJECT_NOT_FOUND => "NV_ERR_OBJECT_NOT_FOUND",
            NV_ERR_TIMEOUT => "NV_ERR_TIMEOUT",
            _ => "an NV_STATUS code (see nvstatuscodes.h)",
        }
    }
}

/// NV_ESC_RM_FREE request: `_IOWR('F', 0x29, NVOS00_PARAMETERS)`.
pub const NV_IOCTL_RM_FREE: u32 = nix::request_code_readwrite!(
    NV_IOCTL_MAGIC,
    NV_ESC_RM_FREE,
    size_of::<Nvos00Parameters>()
) as u32;
/// NV_ESC_RM_CONTROL request: `_IOWR('F', 0x2A, NVOS54_PARAMETERS)`.
pub const NV_IOCTL_RM_CONTROL: u32 = nix::request_code_readwrite!(
    NV_IOCTL_MAGIC,
    NV_ESC_RM_CONTROL,
    size_of::<Nvos54Parameters>()
) as u32;
/// NV_ESC_RM_ALLOC request: `_IOWR('F', 0x2B, NVOS21_PARAMETERS)`.
pub const NV_IOCTL_RM_ALLOC: u32 = nix::request_code_readwrite!(
    NV_IOCTL_MAGIC,
    NV_ESC_RM_ALLOC,
    size_of::<Nvos21Parameters>()
) as u32;

nix::ioctl_readwrite!(nv_rm_free, NV_IOCTL_MAGIC, NV_ESC_RM_FREE, Nvos00Parameters);
nix::ioctl_readwrite!(
    nv_rm_control,
    NV_IOCTL_MAGIC,
    NV_ESC_RM_CONTROL,
    Nvos54Parameters
);
nix::ioctl_readwrite!(
    nv_rm_alloc,
    NV_IOCTL_MAGIC,
    NV_ESC_RM_ALLOC,
    Nvos21Parameters
);

// Layouts as the open driver's headers define them on 64-bit Linux.
const _: () = {
    assert!(size_of::<Nvos00Parameters>() == 16);
    assert!(size_of::<Nvos21Parameters>() == 32);
    assert!(offset_of!(Nvos21Parameters, p_alloc_parms) == 16);
    assert!(offset_of!(Nvos21Parameters, params_size) == 24);
    assert!(offset_of!(Nvos21Parameters, status) == 28);
    assert!(size_of::<Nvos54Parameters>() == 32);
    assert!(offset_of!(Nvos54Parameters, cmd) == 8);
    assert!(offset_of!(Nvos54Parameters, params) == 16);
    assert!(offset_of!(Nvos54Parameters, params_size) == 24);
    assert!(offset_of!(Nvos54Parameters, status) == 28);
    assert!(size_of::<Nv0080AllocParameters>() == 56);
    assert!(offset_of!(Nv0080AllocParameters, va_space_size) == 24);
    assert!(size_of::<Nv83deAllocParameters>() == 12);
    assert!(size_of::<Nv83deCtrlDebugSuspendContextParams>() == 8);
    assert!(size_of::<Nv2080CtrlGpuRegOp>() == 32);
    assert!(offset_of!(Nv2080CtrlGpuRegOp, reg_offset) == 12);
    assert!(size_of::<Nv83deCtrlDebugExecRegOpsParams>() == 8 + 100 * 32);
    assert!(offset_of!(Nv83deCtrlDebugExecRegOpsParams, reg_op_count) == 4);
    assert!(offset_of!(Nv83deCtrlDebugExecRegOpsParams, reg_ops) == 8);
    assert!(size_of::<Nva06cCtrlTimesliceParams>() == 8);
    assert!(size_of::<Nva06cCtrlPreemptParams>() == 8);
    assert!(offset_of!(Nva06cCtrlPreemptParams, timeout_us) == 4);
    assert!(size_of::<Nva06cCtrlInterleaveLevelParams>() == 4);
    // The request codes libcuda is seen to issue.
    assert!(NV_IOCTL_RM_CONTROL == 0xC020_462A);
    assert!(NV_IOCTL_RM_ALLOC == 0xC020_462B);
    assert!(NV_IOCTL_RM_FREE == 0xC010_4629);
};
