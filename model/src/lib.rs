//! reef-model: the model layer (DESIGN.md layer 1). Pure data: kernels,
//! buffers, measured profiles, idempotence metadata, and their loaders.

pub mod files;
pub mod idempotence;
pub mod package;
pub mod schedule;
pub use schedule::*;
