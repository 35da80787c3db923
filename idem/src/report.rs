//! Outputs of `reef-check-idem` (REEF §4.4: "The results of this offline
//! analysis are saved in a metadata file that maps each kernel to its
//! idempotence property and group information"): the metadata file model
//! loading reads, the `--json` summary, and the human report with Table 1's
//! `#idempotent/#total` and Fig. 10's group-size histogram. Formats are
//! documented in docs/idempotence.md.

use crate::analysis::Analysis;
use reef_model::idempotence::{IdempotenceMetadata, KernelIdempotence, FORMAT, VERSION};
use serde::Serialize;
use std::fmt::Write;

/// The metadata model loading reads. `kernels_only` says the trace had no
/// memcpy/memset, so operation indices equal kernel indices and
/// `group_start_op` is omitted.
pub fn metadata(a: &Analysis, kernels_only: bool) -> IdempotenceMetadata {
    IdempotenceMetadata {
        format: FORMAT.into(),
        version: VERSION,
        model: a.model.clone(),
        kernels: a
            .kernels
            .iter()
            .map(|k| KernelIdempotence {
                index: k.index,
                name: k.name.clone(),
                idempotent: k.idempotent,
                group_start: k.start_kernel,
                group_start_op: if kernels_only {
                    None
                } else {
                    Some(k.start_op.unwrap_or(0))
                },
            })
            .collect(),
    }
}

/// One non-idempotent kernel in the `--json` summary.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct GroupJson {
    pub kernel: usize,
    pub start: usize,
    pub size: usize,
}

/// The `--json` summary.
#[derive(Debug, Serialize)]
pub struct SummaryJson {
    pub model: String,
    pub kernels: usize,
    pub idempotent: usize,
    pub groups: Vec<GroupJson>,
    pub max_group: usize,
    /// Kernels no group can restore (not even re-running the whole trace);
    /// omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrestorable: Vec<usize>,
}

pub fn summary(a: &Analysis) -> SummaryJson {
    SummaryJson {
        model: a.model.clone(),
        kernels: a.kernels.len(),
        idempotent: a.idempotent_count(),
        groups: a
            .groups()
            .map(|k| GroupJson {
                kernel: k.index,
                start: k.start_kernel,
                size: k.size,
            })
            .collect(),
        max_group: a.max_group(),
        unrestorable: a.unrestorable().map(|k| k.index).collect(),
    }
}

/// The default human report.
pub fn human(a: &Analysis) -> String {
    let mut s = String::new();
    let total = a.kernels.len();
    let idem = a.idempotent_count();
    let _ = writeln!(
        s,
        "{}: {idem}/{total} kernels idempotent ({} operations, {} ranges)",
        a.model, a.ops, a.ranges
    );
    if idem == total {
        let _ = writeln!(s, "every kernel can be restored by re-executing it alone");
        return s;
    }
    let _ = writeln!(
        s,
        "minimal idempotent group size of the {} non-idempotent kernels (kernels: count):",
        total - idem
    );
    let hist = a.histogram();
    let peak = hist.values().copied().max().unwrap_or(1);
    for (size, count) in &hist {
        let bar = "#".repeat((count * 40).div_ceil(peak));
        let _ = writeln!(s, "  {size:>3}: {count:>4} {bar}");
    }
    let _ = writeln!(s, "largest group: {} kernels", a.max_group());
    for k in a.unrestorable() {
        let _ = writeln!(
            s,
            "warning: kernel {} ({}) reads memory that it or a later kernel overwrites and \
             that no earlier operation writes: no re-execution restores it",
            k.index, k.name
        );
    }
    s
}
