//! A fake NVIDIA RM control device (`nvidiactl`): clients and object handles
//! in a tree, NV_ESC_RM_ALLOC / NV_ESC_RM_CONTROL / NV_ESC_RM_FREE, and
//! control dispatch for the debugger object (class 0x83de) and channel
//! groups (class 0xa06c).
//!
//! Paper: REEF §4.6, Figure 8 (the open driver's ioctl interface to the GPU trap and
//! to channel-group preemption). Status codes and parameter rules follow the
//! open driver's headers (see [`crate::nv::abi`]); simplifications are stated
//! on the items: a compute object may be allocated directly under a TSG (in
//! RM it sits under a GPFIFO channel of the TSG), and allocation parameters of
//! TSGs and compute objects are not interpreted.
//!
//! Per-file client ownership, as RM enforces it by default: a client belongs
//! to the open file it was allocated through, and an alloc, control or free
//! naming it through another open file is refused with NV_ERR_INVALID_CLIENT
//! (open-gpu-kernel-modules: `arch/nvalloc/unix/src/escape.c` `RmIoctl` sets
//! `secInfo.clientOSInfo = nvfp->ctl_nvfp` (else `nvfp`);
//! `src/kernel/rmapi/client.c` `rmclientValidate_IMPL` returns
//! NV_ERR_INVALID_CLIENT when `pClient->pOSInfo != pSecInfo->clientOSInfo`
//! under `PDB_PROP_SYS_VALIDATE_CLIENT_HANDLE_STRICT`, which
//! `generated/g_system_nvoc.c` enables by default). A `dup(2)` of the
//! descriptor is the same open file (one FUSE file handle) and passes. Not
//! modelled: the access-rights check a debugger allocation makes on the
//! target object when `hAppClient` is another client
//! (`ksmdbgssnConstruct_IMPL`, RS_ACCESS_DEBUG), and NV_ESC_RM_DUP_OBJECT.

use std::collections::BTreeMap;
use std::mem::size_of;
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;

use super::{Caller, FakeDevice, IoctlReply};
use crate::nv::abi::status::*;
use crate::nv::abi::*;
use crate::plain::{bytes_of, from_bytes, Plain};

/// Compute classes the fake accepts as debugger targets: VOLTA_COMPUTE_A
/// (clc3c0.h), TURING_COMPUTE_A (clc5c0.h), AMPERE_COMPUTE_A (clc6c0.h),
/// HOPPER_COMPUTE_A (clcbc0.h).
pub const COMPUTE_CLASSES: [u32; 4] = [0xc3c0, 0xc5c0, 0xc6c0, 0xcbc0];

/// What an RM object is, with its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvObjectKind {
    Client,
    Device {
        device_id: u32,
    },
    Subdevice,
    /// A channel group (KEPLER_CHANNEL_GROUP_A).
    Tsg {
        timeslice_us: u64,
        interleave_level: u32,
        preempts: u32,
    },
    /// A compute-class object (the debuggee's context).
    Compute {
        class: u32,
    },
    /// A debugger object (GT200_DEBUGGER) bound to a debuggee.
    Debugger {
        app_client: NvHandle,
        target: NvHandle,
        exception_mask: u32,
        suspended: bool,
        /// Registers written through EXEC_REG_OPS, by offset.
        registers: BTreeMap<u32, u32>,
    },
}

/// One RM object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvObject {
    pub class: u32,
    pub parent: NvHandle,
    pub kind: NvObjectKind,
}

/// The whole state of a [`FakeNvidiaCtl`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvState {
    /// Number of GPUs (valid `deviceId`s are below it).
    pub gpus: u32,
    /// Objects by (client, handle); a client is stored under (h, h).
    pub objects: BTreeMap<(NvHandle, NvHandle), NvObject>,
    /// Which open file allocated each client (freed when it closes).
    pub client_files: BTreeMap<NvHandle, u64>,
    /// The uid treated as a privileged RM client (`None`: nobody).
    pub privileged_uid: Option<u32>,
    /// The timeslice a new TSG reports before SET_TIMESLICE (the fake's
    /// choice; the hardware default depends on the GPU).
    pub default_timeslice_us: u64,
    next_client: NvHandle,
}

/// The fake nvidiactl device model; mount it with
/// [`super::FakeMount::mount`].
#[derive(Debug)]
pub struct FakeNvidiaCtl {
    state: Mutex<NvState>,
}

impl FakeNvidiaCtl {
    /// A fake RM with `gpus` GPUs; root (uid 0) is privileged.
    pub fn new(gpus: u32) -> FakeNvidiaCtl {
        FakeNvidiaCtl {
            state: Mutex::new(NvState {
                gpus,
                objects: BTreeMap::new(),
                client_files: BTreeMap::new(),
                privileged_uid: Some(0),
                default_timeslice_us: 1024,
                next_client: 0xc1d0_0000,
            }),
        }
    }

    /// The state, locked (for tests to seed and inspect).
    pub fn state(&self) -> MutexGuard<'_, NvState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn read_params<T: Plain>(caller: &Caller, ptr: u64, size: u32) -> Result<T, u32> {
    if size as usize != size_of::<T>() {
        return Err(NV_ERR_INVALID_PARAM_STRUCT);
    }
    let raw = caller
        .read_mem(ptr, size as usize)
        .map_err(|_| NV_ERR_INVALID_ARGUMENT)?;
    from_bytes(&raw).ok_or(NV_ERR_INVALID_PARAM_STRUCT)
}

fn write_params<T: Plain>(caller: &Caller, ptr: u64, v: &T) -> Result<(), u32> {
    caller
        .write_mem(ptr, bytes_of(v))
        .map_err(|_| NV_ERR_INVALID_ARGUMENT)
}

impl NvState {
    fn alloc(&mut self, caller: &Caller, fh: u64, a: &mut Nvos21Parameters) -> u32 {
        if a.h_class == NV01_ROOT_CLIENT {
            let h = if a.h_object_new == 0 {
                self.next_client += 1;
                self.next_client
            } else {
                a.h_object_new
            };
            if self.objects.contains_key(&(h, h)) {
                return NV_ERR_INSERT_DUPLICATE_NAME;
            }
            self.objects.insert(
                (h, h),
                NvObject {
                    class: NV01_ROOT_CLIENT,
                    parent: 0,
                    kind: NvObjectKind::Client,
                },
            );
            self.client_files.insert(h, fh);
            a.h_object_new = h;
            return NV_OK;
        }
        let client = a.h_root;
        if !self.owns(fh, client) {
            return NV_ERR_INVALID_CLIENT;
        }
        let Some(parent) = self.objects.get(&(client, a.h_object_parent)) else {
            return NV_ERR_INVALID_OBJECT_PARENT;
        };
        if a.h_object_new == 0 {
            return NV_ERR_INVALID_OBJECT_NEW;
        }
        if self.objects.contains_key(&(client, a.h_object_new)) {
            return NV_ERR_INSERT_DUPLICATE_NAME;
        }
        let parent_class = parent.class;
        let kind = match (a.h_class, parent_class) {
            (NV01_DEVICE_0, NV01_ROOT_CLIENT) => {
                let p: Nv0080AllocParameters =
                    match read_params(caller, a.p_alloc_parms, a.params_size) {
                        Ok(p) => p,
                        Err(s) => return s,
                    };
                if p.device_id >= self.gpus {
                    return NV_ERR_INVALID_ARGUMENT;
                }
                NvObjectKind::Device {
                    device_id: p.device_id,
                }
            }
            (NV20_SUBDEVICE_0, NV01_DEVICE_0) => NvObjectKind::Subdevice,
            (KEPLER_CHANNEL_GROUP_A, NV01_DEVICE_0) => NvObjectKind::Tsg {
                timeslice_us: self.default_timeslice_us,
                interleave_level: NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM,
                preempts: 0,
            },
            (c, KEPLER_CHANNEL_GROUP_A) if COMPUTE_CLASSES.contains(&c) => {
                NvObjectKind::Compute { class: c }
            }
            (GT200_DEBUGGER, NV01_ROOT_CLIENT) => {
                let p: Nv83deAllocParameters =
                    match read_params(caller, a.p_alloc_parms, a.params_size) {
                        Ok(p) => p,
                        Err(s) => return s,
                    };
                if p.h_debugger_client_obsolete != 0 {
                    return NV_ERR_INVALID_ARGUMENT;
                }
                match self.objects.get(&(p.h_app_client, p.h_class3d_object)) {
                    Some(NvObject {
                        kind: NvObjectKind::Compute { .. },
                        ..
                    }) => {}
                    Some(_) => return NV_ERR_INVALID_ARGUMENT,
                    None => return NV_ERR_INVALID_OBJECT_HANDLE,
                }
                NvObjectKind::Debugger {
                    app_client: p.h_app_client,
                    target: p.h_class3d_object,
                    exception_mask: NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_FATAL
                        | NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP
                        | NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_SINGLE_STEP
                        | NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_INT,
                    suspended: false,
                    registers: BTreeMap::new(),
                }
            }
            (c, _)
                if [
                    NV01_DEVICE_0,
                    NV20_SUBDEVICE_0,
                    KEPLER_CHANNEL_GROUP_A,
                    GT200_DEBUGGER,
                ]
                .contains(&c)
                    || COMPUTE_CLASSES.contains(&c) =>
            {
                return NV_ERR_INVALID_OBJECT_PARENT
            }
            _ => return NV_ERR_INVALID_CLASS,
        };
        self.objects.insert(
            (client, a.h_object_new),
            NvObject {
                class: a.h_class,
                parent: a.h_object_parent,
                kind,
            },
        );
        NV_OK
    }

    /// Whether `client` exists and was allocated through open file `fh`
    /// (RM's strict client validation; see the module documentation).
    fn owns(&self, fh: u64, client: NvHandle) -> bool {
        self.objects.contains_key(&(client, client)) && self.client_files.get(&client) == Some(&fh)
    }

    fn free(&mut self, fh: u64, a: &Nvos00Parameters) -> u32 {
        let client = a.h_root;
        if !self.owns(fh, client) {
            return NV_ERR_INVALID_CLIENT;
        }
        if a.h_object_old == client {
            self.objects.retain(|&(c, _), _| c != client);
            self.client_files.remove(&client);
            return NV_OK;
        }
        match self.objects.get(&(client, a.h_object_old)) {
            None => return NV_ERR_INVALID_OBJECT_HANDLE,
            Some(o) if o.parent != a.h_object_parent => return NV_ERR_INVALID_OBJECT_PARENT,
            Some(_) => {}
        }
        // Free the object and its descendants.
        let mut doomed = vec![a.h_object_old];
        let mut i = 0;
        while i < doomed.len() {
            let h = doomed[i];
            doomed.extend(
                self.objects
                    .iter()
                    .filter(|(&(c, _), o)| c == client && o.parent == h)
                    .map(|(&(_, child), _)| child),
            );
            i += 1;
        }
        for h in doomed {
            self.objects.remove(&(client, h));
        }
        NV_OK
    }

    fn control(&mut self, caller: &Caller, fh: u64, a: &Nvos54Parameters) -> u32 {
        let client = a.h_client;
        if !self.owns(fh, client) {
            return NV_ERR_INVALID_CLIENT;
        }
        let privileged = self.privileged_uid == Some(caller.uid);
        // Facts about a debugger's target, read before borrowing mutably.
        let target_info = match self.objects.get(&(client, a.h_object)) {
            Some(NvObject {
                kind:
                    NvObjectKind::Debugger {
                        app_client, target, ..
                    },
                ..
            }) => self.objects.get(&(*app_client, *target)).map(|o| o.parent),
            _ => None,
        };
        let Some(obj) = self.objects.get_mut(&(client, a.h_object)) else {
            return NV_ERR_INVALID_OBJECT_HANDLE;
        };
        if a.cmd >> 16 != obj.class {
            return NV_ERR_NOT_SUPPORTED;
        }
        let result = match (&mut obj.kind, a.cmd) {
            (
                NvObjectKind::Debugger { exception_mask, .. },
                NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK,
            ) => read_params::<Nv83deCtrlDebugSetExceptionMaskParams>(
                caller,
                a.params,
                a.params_size,
            )
            .map(|p| *exception_mask = p.exception_mask),
            (NvObjectKind::Debugger { suspended, .. }, NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT) => {
                match (
                    read_params::<Nv83deCtrlDebugSuspendContextParams>(
                        caller,
                        a.params,
                        a.params_size,
                    ),
                    target_info,
                ) {
                    (Err(s), _) => Err(s),
                    // The debuggee's context is gone.
                    (_, None) => Err(NV_ERR_OBJECT_NOT_FOUND),
                    (Ok(_), _) if *suspended => Err(NV_ERR_INVALID_STATE),
                    (Ok(_), Some(channel)) => {
                        *suspended = true;
                        let out = Nv83deCtrlDebugSuspendContextParams {
                            wait_for_event: 0,
                            h_resident_channel: channel,
                        };
                        write_params(caller, a.params, &out)
                    }
                }
            }
            (NvObjectKind::Debugger { suspended, .. }, NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT) => {
                if a.params_size != 0 {
                    Err(NV_ERR_INVALID_PARAM_STRUCT)
                } else if !*suspended {
                    Err(NV_ERR_INVALID_STATE)
                } else {
                    *suspended = false;
                    Ok(())
                }
            }
            (NvObjectKind::Debugger { registers, .. }, NV83DE_CTRL_CMD_DEBUG_EXEC_REG_OPS) => {
                read_params::<Nv83deCtrlDebugExecRegOpsParams>(caller, a.params, a.params_size)
                    .and_then(|mut p| {
                        let s = exec_reg_ops(registers, &mut p);
                        write_params(caller, a.params, &p)?;
                        s
                    })
            }
            (NvObjectKind::Tsg { preempts, .. }, NVA06C_CTRL_CMD_PREEMPT) => {
                read_params::<Nva06cCtrlPreemptParams>(caller, a.params, a.params_size).and_then(
                    |p| {
                        if p.b_manual_timeout != 0
                            && p.timeout_us > NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US
                        {
                            return Err(NV_ERR_INVALID_ARGUMENT);
                        }
                        *preempts += 1;
                        Ok(())
                    },
                )
            }
            (NvObjectKind::Tsg { timeslice_us, .. }, NVA06C_CTRL_CMD_SET_TIMESLICE) => {
                read_params::<Nva06cCtrlTimesliceParams>(caller, a.params, a.params_size).and_then(
                    |p| {
                        if p.timeslice_us == 0 {
                            return Err(NV_ERR_INVALID_ARGUMENT);
                        }
                        *timeslice_us = p.timeslice_us;
                        Ok(())
                    },
                )
            }
            (NvObjectKind::Tsg { timeslice_us, .. }, NVA06C_CTRL_CMD_GET_TIMESLICE) => {
                read_params::<Nva06cCtrlTimesliceParams>(caller, a.params, a.params_size).and_then(
                    |_| {
                        write_params(
                            caller,
                            a.params,
                            &Nva06cCtrlTimesliceParams {
                                timeslice_us: *timeslice_us,
                            },
                        )
                    },
                )
            }
            (
                NvObjectKind::Tsg {
                    interleave_level, ..
                },
                NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL,
            ) => {
                read_params::<Nva06cCtrlInterleaveLevelParams>(caller, a.params, a.params_size)
                    .and_then(|p| {
                        // ctrla06c.h: "setting this property requires PRIVILEGED user level".
                        if !privileged {
                            return Err(NV_ERR_INSUFFICIENT_PERMISSIONS);
                        }
                        if p.tsg_interleave_level > NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH {
                            return Err(NV_ERR_INVALID_ARGUMENT);
                        }
                        *interleave_level = p.tsg_interleave_level;
                        Ok(())
                    })
            }
            _ => Err(NV_ERR_NOT_SUPPORTED),
        };
        result.err().unwrap_or(NV_OK)
    }
}

/// Runs register operations on the fake register file: 32-bit reads and
/// writes (`new = (old & !andNMask) | value`); other ops get
/// `STATUS_INVALID_OP`. Unless non-transactional, one invalid op means none
/// is executed (ctrl83dedebug.h's description of EXEC_REG_OPS).
fn exec_reg_ops(
    regs: &mut BTreeMap<u32, u32>,
    p: &mut Nv83deCtrlDebugExecRegOpsParams,
) -> Result<(), u32> {
    let n = p.reg_op_count as usize;
    if n == 0 || n > NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS {
        return Err(NV_ERR_INVALID_ARGUMENT);
    }
    let ops = &mut p.reg_ops[..n];
    let mut any_invalid = false;
    for op in ops.iter_mut() {
        let valid = matches!(
            op.reg_op,
            NV2080_CTRL_GPU_REG_OP_READ_32 | NV2080_CTRL_GPU_REG_OP_WRITE_32
        );
        op.reg_status = if valid {
            NV2080_CTRL_GPU_REG_OP_STATUS_SUCCESS
        } else {
            NV2080_CTRL_GPU_REG_OP_STATUS_INVALID_OP
        };
        any_invalid |= !valid;
    }
    if any_invalid && p.b_non_transactional == 0 {
        return Err(NV_ERR_INVALID_ARGUMENT);
    }
    for op in ops
        .iter_mut()
        .filter(|o| o.reg_status == NV2080_CTRL_GPU_REG_OP_STATUS_SUCCESS)
    {
        let cur = regs.get(&op.reg_offset).copied().unwrap_or(0);
        if op.reg_op == NV2080_CTRL_GPU_REG_OP_WRITE_32 {
            regs.insert(
                op.reg_offset,
                (cur & !op.reg_and_n_mask_lo) | op.reg_value_lo,
            );
        } else {
            op.reg_value_lo = cur;
            op.reg_value_hi = 0;
        }
    }
    Ok(())
}

impl FakeDevice for FakeNvidiaCtl {
    fn file_name(&self) -> &'static str {
        "nvidiactl"
    }

    fn release(&self, fh: u64) {
        let mut st = self.state();
        let clients: Vec<NvHandle> = st
            .client_files
            .iter()
            .filter(|(_, &f)| f == fh)
            .map(|(&c, _)| c)
            .collect();
        for c in clients {
            st.objects.retain(|&(client, _), _| client != c);
            st.client_files.remove(&c);
        }
    }

    fn ioctl(
        &self,
        caller: &Caller,
        fh: u64,
        cmd: u32,
        input: &[u8],
        _out: u32,
    ) -> Result<IoctlReply, Errno> {
        if (cmd >> 8) & 0xff != u32::from(NV_IOCTL_MAGIC) {
            return Err(Errno::ENOTTY);
        }
        let mut st = self.state();
        // The driver copies _IOC_SIZE(cmd) bytes. The fake takes only the
        // structs the wrappers send (NVOS21 for alloc; real RM also accepts
        // the 48-byte NVOS64) and answers other sizes with EINVAL.
        match cmd {
            NV_IOCTL_RM_ALLOC => {
                let mut a: Nvos21Parameters = from_bytes(input).ok_or(Errno::EINVAL)?;
                a.status = st.alloc(caller, fh, &mut a);
                Ok(IoctlReply {
                    result: 0,
                    data: bytes_of(&a).to_vec(),
                })
            }
            NV_IOCTL_RM_FREE => {
                let mut a: Nvos00Parameters = from_bytes(input).ok_or(Errno::EINVAL)?;
                a.status = st.free(fh, &a);
                Ok(IoctlReply {
                    result: 0,
                    data: bytes_of(&a).to_vec(),
                })
            }
            NV_IOCTL_RM_CONTROL => {
                let mut a: Nvos54Parameters = from_bytes(input).ok_or(Errno::EINVAL)?;
                a.status = st.control(caller, fh, &a);
                Ok(IoctlReply {
                    result: 0,
                    data: bytes_of(&a).to_vec(),
                })
            }
            c if matches!(
                (c & 0xff) as u8,
                NV_ESC_RM_ALLOC | NV_ESC_RM_FREE | NV_ESC_RM_CONTROL
            ) =>
            {
                Err(Errno::EINVAL)
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}
