//! Level 3 on NVIDIA: REEF's reset-based preemption through the RM control
//! device (REEF §4.6, Figure 8). **Not wired into serving:** `cuda:N`
//! serves through [`super`] at levels 1–2; this path is built and tested
//! against the FUSE fake nvidiactl (reefd/tests/hw_backends.rs) and needs
//! libcuda's context handles to be wired (docs/hardware.md).
//!
//! Preempting best-effort (BE) work:
//! - queue eviction: host-queue work is reefd's own (virtual host queues,
//!   level 1) and work already handed to CUDA is evicted lazily by the
//!   preempt flag checked at every kernel's entry (level 2, Figure 8 lines
//!   1–4). The backend additionally preempts the BE channel group
//!   (NVA06C_CTRL_CMD_PREEMPT), so the GPU switches away from it at once;
//! - kernel killing (level 3, "Kernel killing" in §4.6): with the preempt
//!   flag set, the debugger object (class 0x83de) attached to the BE
//!   context suspends it (NV83DE_CTRL_CMD_DEBUG_SUSPEND_CONTEXT), which sends
//!   every running warp into the GPU trap handler; the handler patched by
//!   `reef-trap nvidia` reads the flag and `EXIT`s them (docs/hardware.md,
//!   Part 2). Restoring resumes the context (RESUME_CONTEXT); the runtime
//!   relaunches from the execution index (§4.4).
//!
//! Levels: 1 and 2 always; 3 once a BE context is attached
//! ([`CudaBackend::attach_be_context`]) and its trap handler is declared
//! patched. The debugger acts on a whole CUDA context, so the BE work must
//! live in a context of its own (the real-time work in another), or the
//! kill must happen before real-time kernels are launched, as REEF does.
//!
//! Kernels: this path does not launch them; [`super`] does (cudarc's
//! driver API, the PTX injected by `reef-ptx-inject`). Its `launch` is
//! refused with the reason.
//!
//! The RM handles of the BE context (its client, channel group and compute
//! object) are libcuda's; learning them needs libcuda on a GPU host, so
//! they are passed in by the caller ([`CudaContextHandles`]), with
//! libcuda's own RM descriptor (a `dup` of it). RM validates every call's
//! client against the open file the client was created through
//! (NV_ERR_INVALID_CLIENT otherwise; docs/hardware.md "RM client ownership"),
//! so the backend issues every control on libcuda's objects through that
//! descriptor, and allocates its debugger object in libcuda's client; its
//! own client (on its own descriptor) holds only the device object it
//! opens to check the GPU.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reef_ioctl::nv::abi::status::NV_ERR_INVALID_ARGUMENT;
use reef_ioctl::nv::abi::{NvHandle, NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP};
use reef_ioctl::NvRm;
use reef_sched::PreemptLevel;

use crate::device::preempt::{BackendError, HardwareBackend, Levels, PreemptReport};

/// Handle of the device object in the backend's own RM client.
pub const DEVICE_HANDLE: NvHandle = 0x5eef_0080;
/// Handle of the debugger object, allocated in libcuda's RM client (a
/// handle libcuda does not use is assumed: libcuda's handle choice is not
/// documented; a collision is refused by RM with
/// NV_ERR_INSERT_DUPLICATE_NAME, reported at attach).
pub const DEBUGGER_HANDLE: NvHandle = 0x5eef_83de;
/// How long a channel-group preemption may take before RM gives up (the
/// driver's maximum is 1 s).
pub const PREEMPT_TIMEOUT: Duration = Duration::from_millis(100);

/// Where the backend's device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// The RM control device (`device.nvidiactl_path`, normally
    /// `/dev/nvidiactl`).
    pub nvidiactl_path: PathBuf,
    /// N of `cuda:N`: the RM device instance (`deviceId` of NV01_DEVICE_0).
    pub index: u32,
}

/// The RM handles of the CUDA context that runs best-effort work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaContextHandles {
    /// libcuda's RM client of the context.
    pub app_client: NvHandle,
    /// The context's channel group (TSG).
    pub be_tsg: NvHandle,
    /// The context's compute-class object (the debugger's target).
    pub compute_object: NvHandle,
}

#[derive(Debug)]
struct Attached {
    /// libcuda's descriptor (a dup): the open file its client belongs to.
    file: NvRm,
    handles: CudaContextHandles,
    trap_handler_patched: bool,
}

/// An open `cuda:N` device: reefd's own RM client with the GPU's device
/// object, and, once attached, a debugger on the BE context.
#[derive(Debug)]
pub struct CudaBackend {
    rm: NvRm,
    index: u32,
    client: NvHandle,
    attached: Option<Attached>,
    levels: Levels,
    /// The BE context is suspended by the debugger (between preempt_be and
    /// restore_be).
    suspended: bool,
}

fn no_context_note() -> String {
    "no kill yet: no best-effort CUDA context is attached (its RM handles come from libcuda on a \
     GPU host)"
        .into()
}

impl CudaBackend {
    /// Opens the RM control device at `opts.nvidiactl_path`, allocates an
    /// RM client and the device object of GPU `opts.index`.
    pub fn open(opts: &CudaOptions) -> Result<CudaBackend, BackendError> {
        let rm = NvRm::open(&opts.nvidiactl_path)?;
        let client = rm.alloc_client()?;
        let device = format!("cuda:{}", opts.index);
        if let Err(e) = rm.alloc_device(client, DEVICE_HANDLE, opts.index) {
            let _ = rm.free(client, client, client);
            return Err(if e.rm_status() == Some(NV_ERR_INVALID_ARGUMENT) {
                BackendError::NoSuchGpu {
                    device,
                    detail: format!(
                        "RM has no GPU {} ({e}); cuda:N counts the GPUs nvidia-smi lists from 0",
                        opts.index
                    ),
                }
            } else {
                e.into()
            });
        }
        Ok(CudaBackend {
            rm,
            index: opts.index,
            client,
            attached: None,
            levels: Levels::up_to(PreemptLevel::LazyEviction, vec![no_context_note()]),
            suspended: false,
        })
    }

    /// The device file this backend opened.
    pub fn path(&self) -> &Path {
        self.rm.path()
    }

    /// The backend's own RM client.
    pub fn client(&self) -> NvHandle {
        self.client
    }

    /// One line for logs: path, client, levels.
    pub fn summary(&self) -> String {
        format!(
            "{} (RM client 0x{:x}, GPU {}, {})",
            self.rm.path().display(),
            self.client,
            self.index,
            self.levels
        )
    }

    /// Attaches a debugger object to the BE context `h` and takes its
    /// channel group as the one to preempt. `app_file` is libcuda's RM
    /// descriptor (a dup of the one `h.app_client` was created through):
    /// the debugger is allocated in libcuda's client and every control goes
    /// through that file, as RM's client validation requires.
    /// `trap_handler_patched` says whether the context's trap handler
    /// carries REEF's flag check (`reef-trap nvidia`, installed as
    /// docs/hardware.md Part 2 describes); only then does the trap kill, and
    /// the backend report level 3.
    pub fn attach_be_context(
        &mut self,
        app_file: NvRm,
        h: CudaContextHandles,
        trap_handler_patched: bool,
    ) -> Result<(), BackendError> {
        if self.suspended {
            return Err(BackendError::InvalidState {
                device: self.device(),
                detail: "the attached context is suspended: restore_be first".into(),
            });
        }
        if let Some(a) = self.attached.take() {
            let c = a.handles.app_client;
            a.file
                .free(c, c, DEBUGGER_HANDLE)
                .map_err(BackendError::from)?;
        }
        app_file.alloc_debugger(
            h.app_client,
            DEBUGGER_HANDLE,
            h.app_client,
            h.compute_object,
        )?;
        if let Err(e) = app_file.debugger_set_exception_mask(
            h.app_client,
            DEBUGGER_HANDLE,
            NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP,
        ) {
            let _ = app_file.free(h.app_client, h.app_client, DEBUGGER_HANDLE);
            return Err(e.into());
        }
        self.levels = if trap_handler_patched {
            Levels::up_to(PreemptLevel::Kill, Vec::new())
        } else {
            Levels::up_to(
                PreemptLevel::LazyEviction,
                vec![
                    "no kill: the context's trap handler is not patched with REEF's flag \
                      check (reef-trap nvidia), so a trap would not end the running blocks"
                        .into(),
                ],
            )
        };
        self.attached = Some(Attached {
            file: app_file,
            handles: h,
            trap_handler_patched,
        });
        Ok(())
    }

    /// Why [`HardwareBackend::launch`] fails on this host.
    pub fn launch_unavailable_reason(&self) -> String {
        // SAFETY: is_culib_present only tries to dlopen the driver library
        // and reports whether that worked; it has no preconditions.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            "executing inference kernels on an NVIDIA GPU needs the CUDA driver library \
             (libcuda.so, from the NVIDIA driver) on a GPU host, and it cannot be loaded here"
                .into()
        } else {
            "the RM path covers REEF's preemption ioctls (channel-group preempt, debugger \
             trap) only; kernels are launched by the CUDA device (`reefd start --device \
             cuda:N`)"
                .into()
        }
    }
}

impl HardwareBackend for CudaBackend {
    fn device(&self) -> String {
        format!("cuda:{}", self.index)
    }

    fn levels(&self) -> &Levels {
        &self.levels
    }

    fn preempt_be(&mut self) -> Result<PreemptReport, BackendError> {
        let device = self.device();
        let Some(a) = &self.attached else {
            return Err(BackendError::InvalidState {
                device,
                detail: "no best-effort CUDA context is attached (attach_be_context first)".into(),
            });
        };
        if self.suspended {
            return Err(BackendError::InvalidState {
                device,
                detail: "the best-effort context is still suspended by the previous preemption: \
                         restore_be first"
                    .into(),
            });
        }
        let h = a.handles;
        let kill = a.trap_handler_patched;
        let mut steps = Vec::new();
        a.file
            .tsg_preempt(h.app_client, h.be_tsg, true, Some(PREEMPT_TIMEOUT))?;
        steps.push(format!("tsg_preempt 0x{:x}", h.be_tsg));
        if !kill {
            return Ok(PreemptReport {
                level: PreemptLevel::LazyEviction,
                steps,
                refused: Vec::new(),
            });
        }
        let s = a
            .file
            .debugger_suspend_context(h.app_client, DEBUGGER_HANDLE)?;
        self.suspended = true;
        steps.push(format!(
            "debugger_suspend_context (resident channel 0x{:x}{})",
            s.resident_channel,
            if s.wait_for_event {
                ", preempt in progress"
            } else {
                ""
            }
        ));
        Ok(PreemptReport {
            level: PreemptLevel::Kill,
            steps,
            refused: Vec::new(),
        })
    }

    fn restore_be(&mut self) -> Result<Vec<String>, BackendError> {
        let Some(a) = self.attached.as_ref().filter(|_| self.suspended) else {
            return Ok(Vec::new());
        };
        a.file
            .debugger_resume_context(a.handles.app_client, DEBUGGER_HANDLE)?;
        self.suspended = false;
        Ok(vec!["debugger_resume_context".into()])
    }

    fn launch(&mut self, name: &str, _exec_index: u32) -> Result<(), BackendError> {
        Err(BackendError::CannotExecute {
            device: self.device(),
            reason: format!("kernel {name}: {}", self.launch_unavailable_reason()),
        })
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if let Some(a) = &self.attached {
            let c = a.handles.app_client;
            if self.suspended {
                let _ = a.file.debugger_resume_context(c, DEBUGGER_HANDLE);
            }
            // The debugger lives in libcuda's client: free it, not the client.
            let _ = a.file.free(c, c, DEBUGGER_HANDLE);
        }
        // Freeing the client frees the device object under it.
        let _ = self.rm.free(self.client, self.client, self.client);
    }
}
