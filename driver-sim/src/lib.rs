//! **TEST DEVICE core.** `reef-driver-sim`: the state of a simulated GPU
//! driver on reef-sim, shared by the two test-device libraries that stand in
//! for the vendors' drivers: the simulated libcuda (`libcuda-sim/`, CUDA's
//! driver API) and the simulated libamdhip64 (`libhip-sim/`, HIP's module
//! API). Both export C functions that lock one [`driver::Driver`] and call
//! its methods; what differs between them is the API's names, handle
//! types, error codes and the module format each loader reads (PTX text for
//! CUDA, an AMDGPU code object for HIP), so the strict rules of the
//! stand-ins (DESIGN.md "Stand-ins: never kinder than the hardware": the
//! preempt flag read by every block at its dispatch, stream priorities
//! ordering pending blocks only, contexts time-slicing, sticky faults) are
//! written once, in [`driver`].
//!
//! - [`driver`]: contexts, modules, functions, streams, events and device
//!   memory on one or several reef-sim GPUs, with the checks a driver makes.
//! - [`ptx`]: what a module holds (entries with their parameters, globals,
//!   recorded work), and the PTX parser that reads it from CUDA modules.
//! - [`cpu`]: a compiled kernel's real function, its CPU build.

pub mod cpu;
pub mod driver;
pub mod ptx;
