//! Dynamic kernel padding (REEF §5; Figs. 11–14; evaluated in §6.5,
//! Figs. 23–27): padding a real-time kernel with best-effort blocks that
//! use only the compute units the real-time kernel leaves idle.
//!
//! - [`profile`]: offline kernel characteristics (block and kernel execution
//!   times, occupancy, resources) and the proxy kernels of §5.1.
//! - [`select`]: the kernel selection policy of §5.2 (rules 1 and 2, greedy
//!   over the best-effort queues, block ranges) with the multi-version
//!   choice of §5.3.
//! - [`versions`]: multi-version kernels by a documented cost model and the
//!   offline dominance pruning of §5.3.
//! - [`table`]: the profile table built from the models' schedules (a pure
//!   function; the benchmarks and the daemon share it).
//! - [`padded`]: the `reef` / `reef-dkp-mv` schedulers, preemption plus
//!   padding, sans-IO like the rest of the core.
//! - [`max`]: `reef-max`'s mechanism switches (issue 28), run by the same
//!   padding scheduler.
//! - [`share`]: `reef-max`'s best-effort blocks beside a real-time
//!   kernel's own blocks within a predicted slowdown budget.
//! - [`hot`]: what keeps the decision path free of hashing and allocation
//!   (issue 28's decision cost).
//! - [`chain`]: `reef-max`'s next kernels of a task after its padded part,
//!   behind a grid barrier in the same launch.
//! - [`most`]: `reef-max`'s co-residency that runs the most blocks per
//!   padded slot.
//! - [`spread`]: `reef-max`'s left-over CUs for a part that ends its
//!   kernel, so that `chain` starts sooner.
//! - [`rate`]: `reef-max`'s version choice by the share of its kernel a
//!   version completes per CU in the launch.
//!
//! See docs/padding.md.

pub mod chain;
pub mod floor;
pub mod guard;
pub mod hot;
pub mod max;
pub mod most;
pub mod padded;
pub mod profile;
pub mod rate;
pub mod select;
pub mod share;
pub mod spread;
pub mod table;
pub mod versions;

pub use max::MaxConfig;
pub use padded::{
    variant_of, BePart, DkpAction, DkpCounters, DkpTable, PaddedLaunch, PaddingScheduler, Variant,
};
pub use profile::{DeviceLimits, KernelChar, ProxyKernels};
pub use select::{Candidate, Padding, Part, Selector, Verdict};
pub use table::{build_table, BlockCost, TableError};
