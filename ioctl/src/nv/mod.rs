//! Safe wrappers over the NVIDIA RM interface on `/dev/nvidiactl` that
//! reefd's `cuda` backend needs: allocating and freeing RM objects, the
//! debugger object (class 0x83de) with SET_EXCEPTION_MASK, SUSPEND_CONTEXT,
//! RESUME_CONTEXT and EXEC_REG_OPS, and the channel-group (TSG) controls
//! PREEMPT, SET_TIMESLICE, GET_TIMESLICE and SET_INTERLEAVE_LEVEL.
//!
//! Paper: REEF §4.6 and Figure 8, "Kernel killing" (the trap raised through the open
//! driver's debugger interface, after which the patched trap handler exits
//! the running blocks; see docs/hardware.md, Part 2) and "Queue eviction"
//! (preempting the best-effort channel group).
//!
//! RM reports most failures in the `status` field of a successful ioctl;
//! both layers are turned into [`Error`]s here.

pub mod abi;

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;

use crate::error::{open_device, Device, Error, Result};
use abi::status::*;
use abi::*;

/// Parameter structs that may be passed to [`NvRm::control`] and
/// [`NvRm::alloc`]: plain `#[repr(C)]` integer data (see [`crate::plain`]).
pub use crate::plain::Plain as RmParams;

/// A TSG interleave level (how often the group appears in the runlist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterleaveLevel {
    Low,
    Medium,
    High,
}

impl InterleaveLevel {
    fn raw(self) -> u32 {
        match self {
            InterleaveLevel::Low => NVA06C_CTRL_INTERLEAVE_LEVEL_LOW,
            InterleaveLevel::Medium => NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM,
            InterleaveLevel::High => NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH,
        }
    }
}

/// What SUSPEND_CONTEXT reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuspendOutcome {
    /// RM had to issue a preempt that may still be in progress.
    pub wait_for_event: bool,
    /// The channel that was resident on the graphics engine (0 if none).
    pub resident_channel: NvHandle,
}

/// One register operation for [`NvRm::debugger_exec_reg_ops`].
pub type RegOp = Nv2080CtrlGpuRegOp;

/// An open NVIDIA RM control device (`/dev/nvidiactl` on a real host).
#[derive(Debug)]
pub struct NvRm {
    file: File,
    path: PathBuf,
}

impl NvRm {
    /// Opens the RM control device at `path` read-write. Whether it is one is
    /// known at the first RM call (normally [`NvRm::alloc_client`]), which
    /// reports a non-RM file as [`Error::NotADevice`].
    pub fn open(path: impl AsRef<Path>) -> Result<NvRm> {
        let path = path.as_ref().to_path_buf();
        let file = open_device(Device::NvidiaCtl, &path)?;
        Ok(NvRm { file, path })
    }

    /// The path this device was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another descriptor of the same open file (`dup(2)`). RM checks a
    /// call's client against the open file it was created through
    /// (open-gpu-kernel-modules: `escape.c` `RmIoctl` passes the file as
    /// `secInfo.clientOSInfo`, `rmapi/client.c` `rmclientValidate_IMPL`
    /// answers NV_ERR_INVALID_CLIENT when it differs), and a duplicate is
    /// the same open file: calls through it act on the clients created
    /// through this one, which a second `open` of the device cannot.
    pub fn try_clone(&self) -> Result<NvRm> {
        let file = self.file.try_clone().map_err(|e| Error::Ioctl {
            device: Device::NvidiaCtl,
            path: self.path.clone(),
            request: "dup",
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(Errno::EIO as i32)),
            hint: "cannot duplicate the descriptor (out of file descriptors?)".into(),
        })?;
        Ok(NvRm {
            file,
            path: self.path.clone(),
        })
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn ioctl_error(&self, request: &'static str, errno: Errno) -> Error {
        match errno {
            Errno::ENOTTY | Errno::ENOSYS => Error::NotADevice {
                device: Device::NvidiaCtl,
                path: self.path.clone(),
                detail: format!(
                    "it does not answer {request} (a regular file, or another driver's device); \
                     point reefd at the RM control node, normally /dev/nvidiactl"
                ),
            },
            _ => Error::Ioctl {
                device: Device::NvidiaCtl,
                path: self.path.clone(),
                request,
                errno,
                hint: match errno {
                    Errno::EINVAL => "the driver rejected the parameter block: a driver whose \
                                      RM ABI differs from the open-gpu-kernel-modules layout"
                        .into(),
                    Errno::EFAULT => "the driver could not access a buffer of this process".into(),
                    Errno::EPERM | Errno::EACCES => "permission denied by the driver".into(),
                    _ => "see the kernel log (dmesg) for NVRM's reason".into(),
                },
            },
        }
    }

    fn status_error(&self, call: String, status: u32) -> Error {
        let hint = match status {
            NV_ERR_INSUFFICIENT_PERMISSIONS => {
                "this call needs a privileged RM client (SET_INTERLEAVE_LEVEL does): run \
                 reefd as root"
            }
            NV_ERR_INVALID_OBJECT_HANDLE | NV_ERR_OBJECT_NOT_FOUND => {
                "the handle does not name a live object of this client: the CUDA context or \
                 channel group may have been destroyed"
            }
            NV_ERR_INVALID_CLIENT => {
                "RM knows no such client on this open file: a client is usable only through \
                 the file it was created on (or a dup of that descriptor), so a call on \
                 libcuda's client must go through libcuda's descriptor; or the CUDA context \
                 may have been destroyed"
            }
            NV_ERR_INVALID_OBJECT_PARENT => "the parent handle does not name a live object",
            NV_ERR_INVALID_CLASS => "this driver or GPU does not offer that object class",
            NV_ERR_NOT_SUPPORTED => {
                "this GPU or driver does not support the call (the debugger \
                controls need Fermi or later, TSG controls Kepler or later)"
            }
            NV_ERR_INVALID_STATE => {
                "the object is not in a state for this call (for example \
                resuming a context that is not suspended)"
            }
            NV_ERR_INVALID_PARAM_STRUCT => {
                "the parameter size does not match what this driver \
                expects: the driver's ABI differs from the one reef-ioctl was built against"
            }
            NV_ERR_INVALID_ARGUMENT => "the driver rejected a parameter value",
            NV_ERR_INSERT_DUPLICATE_NAME => "that handle is already in use in this client",
            NV_ERR_TIMEOUT => "the GPU did not complete the operation in time",
            _ => "see nvstatuscodes.h and the kernel log",
        };
        Error::RmStatus {
            path: self.path.clone(),
            call,
            status,
            name: status::name(status),
            hint: hint.to_string(),
        }
    }

    /// NV_ESC_RM_ALLOC with untyped parameters: allocates object `h_new`
    /// (0 lets RM choose, for clients) of `class` under `h_parent` in client
    /// `h_root`. Returns the new handle.
    pub fn alloc<P: RmParams>(
        &self,
        h_root: NvHandle,
        h_parent: NvHandle,
        h_new: NvHandle,
        class: u32,
        params: Option<&mut P>,
    ) -> Result<NvHandle> {
        let (ptr, size) = match params {
            Some(p) => (p as *mut P as u64, std::mem::size_of::<P>() as u32),
            None => (0, 0),
        };
        let mut args = Nvos21Parameters {
            h_root,
            h_object_parent: h_parent,
            h_object_new: h_new,
            h_class: class,
            p_alloc_parms: ptr,
            params_size: size,
            status: 0,
        };
        // SAFETY: `args` is a valid NVOS21 whose pointer refers to a live
        // `P` of the stated size (or is null with size 0).
        unsafe { nv_rm_alloc(self.fd(), &mut args) }
            .map_err(|errno| self.ioctl_error("NV_ESC_RM_ALLOC", errno))?;
        if args.status != NV_OK {
            return Err(self.status_error(format!("alloc of class 0x{class:x}"), args.status));
        }
        Ok(args.h_object_new)
    }

    /// Allocates a new RM client (`NV01_ROOT_CLIENT`) and returns its handle.
    pub fn alloc_client(&self) -> Result<NvHandle> {
        self.alloc::<Nv83deAllocParameters>(0, 0, 0, NV01_ROOT_CLIENT, None)
    }

    /// Allocates device `device_id` (`NV01_DEVICE_0`) as `h_device` in
    /// client `h_client`.
    pub fn alloc_device(
        &self,
        h_client: NvHandle,
        h_device: NvHandle,
        device_id: u32,
    ) -> Result<()> {
        let mut p = Nv0080AllocParameters {
            device_id,
            ..Default::default()
        };
        self.alloc(h_client, h_client, h_device, NV01_DEVICE_0, Some(&mut p))
            .map(drop)
    }

    /// NV_ESC_RM_FREE: frees `h_object` (and everything under it). Freeing a
    /// client passes its handle as all three.
    pub fn free(&self, h_root: NvHandle, h_parent: NvHandle, h_object: NvHandle) -> Result<()> {
        let mut args = Nvos00Parameters {
            h_root,
            h_object_parent: h_parent,
            h_object_old: h_object,
            status: 0,
        };
        // SAFETY: `args` is a valid NVOS00.
        unsafe { nv_rm_free(self.fd(), &mut args) }
            .map_err(|errno| self.ioctl_error("NV_ESC_RM_FREE", errno))?;
        if args.status != NV_OK {
            return Err(self.status_error(format!("free of 0x{h_object:x}"), args.status));
        }
        Ok(())
    }

    /// NV_ESC_RM_CONTROL: runs control `cmd` on `h_object` of `h_client`
    /// with `params` (read and written by RM), or with none.
    pub fn control<P: RmParams>(
        &self,
        h_client: NvHandle,
        h_object: NvHandle,
        cmd: u32,
        params: Option<&mut P>,
    ) -> Result<()> {
        let (ptr, size) = match params {
            Some(p) => (p as *mut P as u64, std::mem::size_of::<P>() as u32),
            None => (0, 0),
        };
        let mut args = Nvos54Parameters {
            h_client,
            h_object,
            cmd,
            flags: 0,
            params: ptr,
            params_size: size,
            status: 0,
        };
        // SAFETY: `args` is a valid NVOS54 whose pointer refers to a live
        // `P` of the stated size (or is null with size 0).
        unsafe { nv_rm_control(self.fd(), &mut args) }
            .map_err(|errno| self.ioctl_error("NV_ESC_RM_CONTROL", errno))?;
        if args.status != NV_OK {
            return Err(self.status_error(format!("control 0x{cmd:08x}"), args.status));
        }
        Ok(())
    }

    /// Allocates a debugger object (`GT200_DEBUGGER`) `h_debugger` in client
    /// `h_client`, attached to the compute object `h_class3d_object` of the
    /// debuggee client `h_app_client` (cl83de.h's recipe).
    pub fn alloc_debugger(
        &self,
        h_client: NvHandle,
        h_debugger: NvHandle,
        h_app_client: NvHandle,
        h_class3d_object: NvHandle,
    ) -> Result<()> {
        let mut p = Nv83deAllocParameters {
            h_debugger_client_obsolete: 0,
            h_app_client,
            h_class3d_object,
        };
        self.alloc(h_client, h_client, h_debugger, GT200_DEBUGGER, Some(&mut p))
            .map(drop)
    }

    /// NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK.
    pub fn debugger_set_exception_mask(
        &self,
        h_client: NvHandle,
        h_debugger: NvHandle,
        mask: u32,
    ) -> Result<()> {
        let mut p = Nv83deCtrlDebugSetExceptionMaskParams {
            exception_mask: mask,
        };
        self.control(
            h_client,
            h_debugger,
            NV83DE_CTRL_CMD_DEBUG_SET_EXCEPTION_MASK,
            Some(&mut p),
        )
    }

    /// NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT: stops the debuggee's context
    /// on every SM.
    pub fn debugger_suspend_context(
        &self,
        h_client: NvHandle,
        h_debugger: NvHandle,
    ) -> Result<SuspendOutcome> {
        let mut p = Nv83deCtrlDebugSuspendContextParams::default();
        self.control(
            h_client,
            h_debugger,
            NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT,
            Some(&mut p),
        )?;
        Ok(SuspendOutcome {
            wait_for_event: p.wait_for_event != 0,
            resident_channel: p.h_resident_channel,
        })
    }

    /// NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT (no parameters).
    pub fn debugger_resume_context(&self, h_client: NvHandle, h_debugger: NvHandle) -> Result<()> {
        self.control::<Nv83deCtrlDebugSetExceptionMaskParams>(
            h_client,
            h_debugger,
            NV83DE_CTRL_CMD_DEBUG_RESUME_CONTEXT,
            None,
        )
    }

    /// NV83DE_CTRL_CMD_DEBUG_EXEC_REG_OPS: runs up to 100 register
    /// operations in the debuggee's context; each op's `reg_status` and, for
    /// reads, `reg_value_*` are written back into `ops`.
    pub fn debugger_exec_reg_ops(
        &self,
        h_client: NvHandle,
        h_debugger: NvHandle,
        ops: &mut [RegOp],
        non_transactional: bool,
    ) -> Result<()> {
        if ops.is_empty() || ops.len() > NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS {
            return Err(Error::InvalidArgument {
                call: "debugger_exec_reg_ops",
                detail: format!(
                    "{} register operations given; the driver takes 1 to {} per call",
                    ops.len(),
                    NV83DE_CTRL_GPU_EXEC_REG_OPS_MAX_OPS
                ),
            });
        }
        let mut p = Box::new(Nv83deCtrlDebugExecRegOpsParams {
            b_non_transactional: u8::from(non_transactional),
            reg_op_count: ops.len() as u32,
            ..Default::default()
        });
        p.reg_ops[..ops.len()].copy_from_slice(ops);
        self.control(
            h_client,
            h_debugger,
            NV83DE_CTRL_CMD_DEBUG_EXEC_REG_OPS,
            Some(&mut *p),
        )?;
        ops.copy_from_slice(&p.reg_ops[..ops.len()]);
        Ok(())
    }

    /// NVA06C_CTRL_CMD_PREEMPT: preempts channel group `h_tsg`, waiting for
    /// completion when `wait`, with a manual `timeout` (at most 1 s).
    pub fn tsg_preempt(
        &self,
        h_client: NvHandle,
        h_tsg: NvHandle,
        wait: bool,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let timeout_us = match timeout {
            None => 0,
            Some(t) => {
                let us = t.as_micros();
                if us > u128::from(NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US) {
                    return Err(Error::InvalidArgument {
                        call: "tsg_preempt",
                        detail: format!(
                            "timeout of {us} us exceeds the driver's maximum of {} us",
                            NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US
                        ),
                    });
                }
                us as u32
            }
        };
        let mut p = Nva06cCtrlPreemptParams {
            b_wait: u8::from(wait),
            b_manual_timeout: u8::from(timeout.is_some()),
            _pad: [0; 2],
            timeout_us,
        };
        self.control(h_client, h_tsg, NVA06C_CTRL_CMD_PREEMPT, Some(&mut p))
    }

    /// NVA06C_CTRL_CMD_SET_TIMESLICE (the hardware may round it down).
    pub fn tsg_set_timeslice(
        &self,
        h_client: NvHandle,
        h_tsg: NvHandle,
        timeslice: Duration,
    ) -> Result<()> {
        let mut p = Nva06cCtrlTimesliceParams {
            timeslice_us: u64::try_from(timeslice.as_micros()).unwrap_or(u64::MAX),
        };
        self.control(h_client, h_tsg, NVA06C_CTRL_CMD_SET_TIMESLICE, Some(&mut p))
    }

    /// NVA06C_CTRL_CMD_GET_TIMESLICE: the value last set (exactly as passed).
    pub fn tsg_get_timeslice(&self, h_client: NvHandle, h_tsg: NvHandle) -> Result<Duration> {
        let mut p = Nva06cCtrlTimesliceParams::default();
        self.control(h_client, h_tsg, NVA06C_CTRL_CMD_GET_TIMESLICE, Some(&mut p))?;
        Ok(Duration::from_micros(p.timeslice_us))
    }

    /// NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL (needs a privileged client).
    pub fn tsg_set_interleave_level(
        &self,
        h_client: NvHandle,
        h_tsg: NvHandle,
        level: InterleaveLevel,
    ) -> Result<()> {
        let mut p = Nva06cCtrlInterleaveLevelParams {
            tsg_interleave_level: level.raw(),
        };
        self.control(
            h_client,
            h_tsg,
            NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL,
            Some(&mut p),
        )
    }
}
