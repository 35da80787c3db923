//! reef-idem: the offline idempotence checker of REEF §4.4 (Figs. 9, 10;
//! Table 1 of §2.1). It turns a model (a REEF schedule, an ONNX graph, a
//! recorded `reef-trace`, or a TensorRT engine's recorded trace) into a
//! memory-access [`trace::Trace`], finds for every kernel whether it is
//! idempotent and otherwise its minimal idempotent group
//! ([`analysis::analyze`]), and writes the metadata that model loading reads
//! ([`reef_model::idempotence::IdempotenceMetadata`]).

pub mod analysis;
pub mod input;
pub mod onnx;
pub mod report;
pub mod trace;

pub use analysis::{analyze, Analysis, KernelResult};
pub use trace::{Op, OpKind, Range, Trace};
