//! reef-ioctl: the kernel interfaces reefd uses to reach real GPUs — AMD's
//! KFD (`/dev/kfd`) for suspending, clearing and killing best-effort queues,
//! and NVIDIA's RM (`/dev/nvidiactl`) for preempting channel groups and
//! driving the debugger object whose trap kills running kernels.
//!
//! Paper: REEF (reef-tocs2025) §4.5 "Reset-Based Preemption on Open-Source
//! GPUs" and §4.6 "Reset-Based Preemption on Closed-Source GPUs", Figures 7
//! and 8.
//!
//! No GPU is available where this is built, so every number is checked
//! against the kernel's own definitions (`tests/kfd_header.rs` compiles a C
//! program against the 6.x UAPI header; the NVIDIA values cite the open
//! driver's sources) and every wrapper is exercised through real `ioctl(2)`
//! calls against the FUSE fake devices in [`fake`]. See docs/hardware.md.
//!
//! Layout: [`kfd`] and [`nv`] hold the ABI (`abi` submodules) and one safe
//! wrapper per ioctl; [`kfd::reef_patch`] holds the REEF driver patch's two
//! out-of-tree ioctls; [`error`] the operator-facing errors.

pub mod error;
#[cfg(feature = "fake")]
pub mod fake;
pub mod kfd;
pub mod nv;
pub mod plain;

pub use error::{Device, Error, Result};
pub use kfd::Kfd;
pub use nv::NvRm;
