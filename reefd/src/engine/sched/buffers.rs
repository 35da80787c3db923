//! Value-tracking buffers: which buffers a request's kernels read and
//! write on the device (reef-sim's version tracking and real values).

use super::{Prepared, TaskRec};
use crate::engine::sched::clients::Slot;
use reef_sim::BufferId;
use std::collections::HashMap;
use std::sync::Arc;

/// The reads and writes of kernel `k` of task `task`, in its stream's
/// value-tracking namespace (empty for an unknown task).
pub(super) fn buffers_of(
    tasks: &HashMap<u64, TaskRec>,
    models: &[Prepared],
    slots: &[Slot],
    task: u64,
    k: usize,
) -> (Vec<BufferId>, Vec<BufferId>) {
    let Some(rec) = tasks.get(&task) else {
        return (Vec::new(), Vec::new());
    };
    let mi = slots[rec.slot].model;
    let kern = &models[mi].model.kernels[k];
    (
        kern.reads.iter().map(|&x| buffer(rec.ns, mi, x)).collect(),
        kern.writes.iter().map(|&x| buffer(rec.ns, mi, x)).collect(),
    )
}

/// Each output buffer of a request with its value after an unpreempted run.
pub(super) type Expected = Arc<[(BufferId, u64)]>;

/// Models whose buffers [`buffer`] keeps apart on one daemon stream.
const NS_MODELS: u64 = 1 << 10;

/// Storage `storage` of model `model` (its index in the engine's models)
/// in value-tracking namespace `ns` (one per daemon stream, reused after
/// the stream and its last request are gone). Each model of a stream has
/// its own buffers, as each has its own instance on a GPU: with real
/// values a buffer keeps its size and, for a parameter, its weights, so
/// two models' storage `i` on one stream must not be one buffer. The
/// namespace is the high 32 bits (reef-sim's real values' convention).
pub(super) fn buffer(ns: u32, model: usize, storage: usize) -> BufferId {
    let space = (ns as u64 + 1) * NS_MODELS + model as u64 % NS_MODELS;
    BufferId((space << 32) | storage as u64)
}
