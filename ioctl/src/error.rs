//! Typed errors of the ioctl wrappers, worded for the operator who has to fix
//! the cause: what was refused, on which device file, and what to do.
//!
//! Paper: REEF §4.5–4.6 (the kernel interfaces the preemption module drives).
//! The errno meanings for KFD's debug trap are the kernel's own documentation
//! of `enum kfd_dbg_trap_operations` (kfd_ioctl.h:1101-1122, Linux 6.12):
//! ESRCH (no such process), EINVAL (debugging not enabled / no hardware
//! scheduler), EPERM (not ptrace-attached), EACCES (runtime not enabled),
//! ENODEV (a GPU cannot debug).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// Which driver interface an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// AMD's Kernel Fusion Driver, normally `/dev/kfd`.
    Kfd,
    /// NVIDIA's RM control device, normally `/dev/nvidiactl`.
    NvidiaCtl,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Kfd => f.write_str("AMD KFD"),
            Device::NvidiaCtl => f.write_str("NVIDIA RM control"),
        }
    }
}

/// Everything the wrappers can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The device file could not be opened.
    #[error("cannot open the {device} device at {}: {hint} ({source})", path.display())]
    Open {
        device: Device,
        path: PathBuf,
        hint: String,
        #[source]
        source: io::Error,
    },
    /// The file opened, but it is not the driver's device.
    #[error("{} is not an {device} device: {detail}", path.display())]
    NotADevice {
        device: Device,
        path: PathBuf,
        detail: String,
    },
    /// The driver speaks an interface version this crate does not support.
    #[error("{} speaks KFD interface {major}.{minor}: {detail}", path.display())]
    UnsupportedVersion {
        path: PathBuf,
        major: u32,
        minor: u32,
        detail: String,
    },
    /// The ioctl system call failed with an errno.
    #[error("{device} ioctl {request} on {} failed with {errno}: {hint}", path.display())]
    Ioctl {
        device: Device,
        path: PathBuf,
        request: &'static str,
        errno: Errno,
        hint: String,
    },
    /// NVIDIA RM accepted the ioctl but refused the call with an NV_STATUS.
    #[error("NVIDIA RM {call} on {} returned {name} (0x{status:x}): {hint}", path.display())]
    RmStatus {
        path: PathBuf,
        call: String,
        status: u32,
        name: &'static str,
        hint: String,
    },
    /// The caller passed an argument the driver would reject anyway.
    #[error("invalid argument to {call}: {detail}")]
    InvalidArgument { call: &'static str, detail: String },
}

impl Error {
    /// The errno behind this error, if it came from a system call.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Ioctl { errno, .. } => Some(*errno),
            Error::Open { source, .. } => source.raw_os_error().map(Errno::from_raw),
            _ => None,
        }
    }

    /// The NV_STATUS behind this error, if RM returned one.
    pub fn rm_status(&self) -> Option<u32> {
        match self {
            Error::RmStatus { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Opens the device node at `path` read-write and close-on-exec; a failure
/// is explained by [`open_error`].
pub(crate) fn open_device(device: Device, path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| open_error(device, path.to_path_buf(), e))
}

/// Explains a failed `open(2)` of a device file.
pub(crate) fn open_error(device: Device, path: PathBuf, source: io::Error) -> Error {
    let errno = source.raw_os_error().map(Errno::from_raw);
    let hint = match (device, errno) {
        (Device::Kfd, Some(Errno::ENOENT)) => "no such file: the amdgpu driver is not loaded \
            or this host has no AMD GPU; check the configured KFD path (normally /dev/kfd)"
            .to_string(),
        (Device::NvidiaCtl, Some(Errno::ENOENT)) => "no such file: the nvidia kernel module is \
            not loaded (nvidia-modprobe creates the node) or this host has no NVIDIA GPU; check \
            the configured path (normally /dev/nvidiactl)"
            .to_string(),
        (Device::Kfd, Some(Errno::EACCES | Errno::EPERM)) => "permission denied: run reefd as \
            root or add its user to the group owning the node (usually 'render', and 'video' on \
            older distributions)"
            .to_string(),
        (Device::NvidiaCtl, Some(Errno::EACCES | Errno::EPERM)) => "permission denied: the node \
            is normally mode 0666; check the nvidia module parameters NVreg_DeviceFileUID/GID/Mode \
            or run reefd as root"
            .to_string(),
        (_, Some(Errno::ENXIO | Errno::ENODEV)) => {
            "the device node exists but no driver is bound to it: load the kernel module".into()
        }
        (_, Some(Errno::EISDIR)) => "this is a directory, not a device node".into(),
        (_, Some(Errno::EBUSY)) => {
            "the device is held exclusively by another process (a GPU reset or another \
             debugger); retry when it is released"
                .into()
        }
        _ => "check that the path names the driver's device node".into(),
    };
    Error::Open {
        device,
        path,
        hint,
        source,
    }
}
