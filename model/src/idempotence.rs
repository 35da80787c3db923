//! Idempotence metadata: for each kernel of a model, whether it may be
//! re-executed alone after a kill, and otherwise the index of the first kernel
//! of its minimal idempotent group, from which a restore must restart
//! (REEF §4.4, Figs. 9 and 10). `reef-check-idem -o FILE` writes it; model
//! loading reads it so the scheduler's restore uses it.
//!
//! The file format is documented in docs/idempotence.md.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `format` field of every metadata file.
pub const FORMAT: &str = "reef-idempotence";
/// The newest format version this crate reads and writes.
pub const VERSION: u32 = 1;

/// Per-kernel idempotence of one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotenceMetadata {
    pub format: String,
    pub version: u32,
    pub model: String,
    /// One entry per kernel, in launch order (entry `i` is kernel index `i`).
    pub kernels: Vec<KernelIdempotence>,
}

/// Idempotence of one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelIdempotence {
    /// Kernel index in launch order.
    pub index: usize,
    /// The kernel's function name.
    pub name: String,
    /// True when the kernel alone can be killed and re-executed.
    pub idempotent: bool,
    /// Kernel index where a restore of this kernel must start: `index` itself
    /// when idempotent, else the start of its minimal idempotent group.
    pub group_start: usize,
}

/// Why a metadata file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{path}: cannot read idempotence metadata: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not valid idempotence metadata JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: {what}")]
    Invalid { path: String, what: String },
}

impl IdempotenceMetadata {
    /// Restore point for kernel `index`: the kernel index to restart from.
    /// Kernels beyond the metadata are treated as idempotent.
    pub fn restore_point(&self, index: usize) -> usize {
        self.kernels
            .get(index)
            .map(|k| k.group_start.min(index))
            .unwrap_or(index)
    }

    /// Reads and validates a metadata file.
    pub fn load(path: &Path) -> Result<Self, MetadataError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| MetadataError::Io {
            path: p.clone(),
            source,
        })?;
        let meta: Self = serde_json::from_str(&text).map_err(|source| MetadataError::Json {
            path: p.clone(),
            source,
        })?;
        meta.validate().map_err(|what| MetadataError::Invalid { path: p, what })?;
        Ok(meta)
    }

    /// Checks the format tag, version, index order and group starts.
    pub fn validate(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format is {:?}, expected {FORMAT:?} (write it with reef-check-idem -o)",
                self.format
            ));
        }
        if self.version != VERSION {
            return Err(format!(
                "version {} is not supported (this build reads version {VERSION})",
                self.version
            ));
        }
        for (i, k) in self.kernels.iter().enumerate() {
            if k.index != i {
                return Err(format!("kernel entry {i} has index {}", k.index));
            }
            if k.group_start > i {
                return Err(format!(
                    "kernel {i} ({}) has group_start {} after itself",
                    k.name, k.group_start
                ));
            }
            if k.idempotent && k.group_start != i {
                return Err(format!(
                    "kernel {i} ({}) is idempotent but its group starts at {}",
                    k.name, k.group_start
                ));
            }
        }
        Ok(())
    }
}
