//! reef-sim: the embedded simulated GPU (DESIGN.md "The simulator", layer 2
//! backend `sim`). A block-level discrete-event model of a GPU in integer
//! nanoseconds, calibrated on the REEF authors' MI50 measurements
//! (docs/simulator.md). It knows no scheduling policy.
//!
//! # API for callers (scheduler, daemon, benchmarks)
//! - [`DeviceSpec::preset`]`("mi50")` (or `from_file`): the device, from
//!   `sim/devices/*.toml`.
//! - [`Sim::new`]`(spec, `[`SimConfig`]`)`: seeded, deterministic.
//! - [`Sim::create_stream`]`(priority, device_queue_capacity)`.
//! - [`KernelShape::for_model`]: per-kernel shapes (grid, block, resources,
//!   block-duration curve) for a [`reef_model::Model`]; build once, share the
//!   `Arc`s across launches.
//! - [`Sim::launch`]`(stream, `[`KernelLaunch`]`)` → [`LaunchId`] or
//!   [`SimError::QueueFull`]. A launch carries caller [`Tags`], the buffers
//!   it reads and writes, an optional block range and an optional [`CuSet`].
//!   [`Sim::launch_padded`] enqueues several such parts as one padded
//!   launch (REEF §5.1 Fig. 12: dispatched together, one queue slot),
//!   each block of every part [`PADDED_LAUNCH_OVERHEAD_PPM`] longer (the
//!   dkp kernel's branch and function-pointer set-up, REEF §6.5 Fig. 25);
//!   [`Sim::launch_fused`] the same without that cost (a statically fused
//!   kernel, Aker §5.4).
//! - Resource mix inside a CU (Aker §3, [`mix`]): a shape's pipe demand
//!   ([`KernelShape::with_demand`], [`Demand`]); MI50 model kernels get
//!   theirs from [`resources`]. [`KernelLaunch::with_persistent`] caps a
//!   launch's blocks per CU (persistent thread blocks, Aker §5.3).
//! - Shared memory bandwidth across CUs (REEF §6.5 Fig. 27, engine
//!   `time_fresh_groups`): a shape's DRAM bytes per block
//!   ([`KernelShape::with_dram_bytes`]; MI50 model kernels from their
//!   class, compiled kernels from their work); blocks stretch only when
//!   the resident launches oversubscribe the preset's bandwidth
//!   ([`Sim::dram_load`], [`Sim::dram_load_peak`]).
//! - Time: [`Sim::next_event_time`], [`Sim::advance_to`] / [`Sim::step`]
//!   return [`DeviceEvent`]s (Started, Completed, Evicted, Cleared, Killed)
//!   with the time, stream, launch id and tags. Act between calls at
//!   [`Sim::now`]. [`Sim::advance_with_clock`] paces by a [`Clock`]
//!   ([`VirtualClock`] or [`WallClock`]).
//! - Preemption ([`Sim::preempt_levels`]): level 1 is the caller's host queue
//!   ([`HostQueues::reset`]); level 2 [`Sim::set_preempt_flag`]; level 3
//!   [`Sim::kill_stream`] / [`Sim::kill_all`]; and [`Sim::clear_queue`].
//! - Queries: [`Sim::queue_len`], [`Sim::busy_cus`], [`Sim::resident_blocks`],
//!   [`Sim::cu_usage`]; value tracking via [`Sim::values`] and
//!   [`ValueTracker::diff`] against an unpreempted run.
//!
//! ```
//! use reef_sim::*;
//! let spec = DeviceSpec::preset("mi50").unwrap();
//! let shape = std::sync::Arc::new(
//!     KernelShape::synthetic("k", 120, 256, 0, 0, vec![5_000], &spec).unwrap());
//! let mut sim = Sim::new(spec, SimConfig::default());
//! let s = sim.create_stream(0, 4).unwrap();
//! let id = sim.launch(s, KernelLaunch::new(shape, Tags::default())).unwrap();
//! let mut done = None;
//! while let Some((t, evs)) = sim.step() {
//!     for e in evs {
//!         if e.kind == EventKind::Completed { done = Some((t, e.launch)); }
//!     }
//! }
//! // host 4 us + fetch 4 us + dispatch 2 us + one wave of 2 blocks/CU: 5 us.
//! assert_eq!(done, Some((15_000, id)));
//! ```

pub mod clock;
pub mod costmodel;
pub mod cuset;
pub mod engine;
pub mod host;
pub mod mix;
pub mod node;
pub mod realvalues;
pub mod resources;
pub mod rng;
pub mod shape;
pub mod spec;
pub mod values;

pub use clock::{Clock, VirtualClock, WallClock};
pub use cuset::CuSet;
pub use engine::{
    BlockOutcome, BlockRecord, ContextId, CuUsage, DeviceEvent, EventKind, KernelLaunch, LaunchId,
    Sim, SimConfig, SimError, StreamId, Tags,
};
pub use host::HostQueues;
pub use mix::{Demand, PipeRates};
pub use node::{node_devices, parse_device_list, Node, NodeError, OwnerId};
pub use rng::{splitmix64, unit_f64};
pub use shape::{KernelShape, ShapeError};
pub use spec::{
    field_source, padded_block_ns, DeviceSpec, PreemptLevel, SpecError, PADDED_LAUNCH_OVERHEAD_PPM,
    PRESETS, SOURCED_FIELDS,
};
pub use values::{BufferId, Mismatch, TraceOp, ValueTracker};
