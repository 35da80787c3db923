//! The JSON of a schedule as read, before [`super::Model::load`] checks it.

use super::KernelResources;
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize, Default)]
pub(super) struct RawReference {
    #[serde(default)]
    pub(super) inputs: Vec<RawTensor>,
    #[serde(default)]
    pub(super) outputs: Vec<RawTensor>,
}

#[derive(Deserialize)]
pub(super) struct RawTensor {
    pub(super) storage: i64,
    #[serde(default)]
    pub(super) shape: Vec<u64>,
}

#[derive(Deserialize)]
pub(super) struct RawSchedule {
    pub(super) storage: Vec<RawStorage>,
    pub(super) kernels: Vec<RawKernel>,
    #[serde(default)]
    pub(super) args: Vec<i64>,
    #[serde(default)]
    pub(super) shared_memory: BTreeMap<String, i64>,
    // reef-compile extensions (docs/compile.md)
    #[serde(default)]
    pub(super) format: Option<String>,
    #[serde(default)]
    pub(super) archs: Vec<String>,
    #[serde(default)]
    pub(super) ptx: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) inputs: Vec<i64>,
    #[serde(default)]
    pub(super) params: Vec<i64>,
    #[serde(default)]
    pub(super) outputs: Vec<i64>,
    #[serde(default)]
    pub(super) resources: BTreeMap<String, BTreeMap<String, KernelResources>>,
    #[serde(default)]
    pub(super) names: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) reference: Option<RawReference>,
}

#[derive(Deserialize)]
pub(super) struct RawStorage {
    pub(super) name: String,
    pub(super) size: i64,
    pub(super) stype: String,
    /// An input's or output's tensor shape (reef-compile writes it with or
    /// without a reference run).
    #[serde(default)]
    pub(super) shape: Option<Vec<u64>>,
}

#[derive(Deserialize)]
pub(super) struct RawKernel {
    pub(super) name: String,
    pub(super) launch_params: Vec<i64>,
    pub(super) args: Vec<i64>,
    #[serde(default)]
    pub(super) reads: Option<Vec<i64>>,
    #[serde(default)]
    pub(super) writes: Option<Vec<i64>>,
    #[serde(default)]
    pub(super) flops: Option<f64>,
    #[serde(default)]
    pub(super) bytes_read: Option<u64>,
    #[serde(default)]
    pub(super) bytes_written: Option<u64>,
}

#[derive(Deserialize)]
pub(super) struct RawProfile {
    pub(super) model_latency: f64,
    pub(super) kernel_latency: BTreeMap<String, RawKernelProfile>,
}

#[derive(Deserialize)]
pub(super) struct RawKernelProfile {
    pub(super) total_latency: f64,
    pub(super) latency: Vec<f64>,
}
