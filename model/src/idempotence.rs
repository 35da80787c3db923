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
    /// Operation index in the analysed trace where re-execution must begin,
    /// present when the trace had memory copies or sets: a group may begin
    /// with a memcpy/memset (REEF §4.4: "many groups contain only one kernel
    /// because they included other GPU operations (e.g., memory set)"), which
    /// a restore must replay before kernel `group_start`. Absent when
    /// operations are kernels only (then it equals `group_start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_start_op: Option<usize>,
}

/// Why a metadata file could not be used.
/// The underlying error is part of the message (field `cause`), not a
/// `source()`, so printing the chain (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{path}: not valid idempotence metadata JSON: {cause}")]
    Json {
        path: String,
        cause: serde_json::Error,
    },
    #[error("{path}: {what}")]
    Invalid { path: String, what: String },
    /// Not a regular file, too large, or unreadable ([`crate::files`]).
    #[error(transparent)]
    File(Box<crate::files::FileError>),
}

/// Conventional file name of a model's metadata, `<model>.idem.json`
/// (what `reef-check-idem MODEL -o` should be given, so loaders can find it).
pub fn file_name(model: &str) -> String {
    format!("{model}.idem.json")
}

impl IdempotenceMetadata {
    /// Checks that the metadata describes this launch sequence (same number
    /// of kernels, same names in order), so metadata written for another
    /// model or an older schedule is refused instead of giving wrong
    /// restore points.
    pub fn check_kernels<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), String> {
        let names: Vec<&str> = names.into_iter().collect();
        if names.len() != self.kernels.len() {
            return Err(format!(
                "metadata for {:?} has {} kernels but the model has {}; re-run reef-check-idem \
                 on the model",
                self.model,
                self.kernels.len(),
                names.len()
            ));
        }
        for (k, name) in self.kernels.iter().zip(names) {
            if k.name != name {
                return Err(format!(
                    "kernel {} is {name:?} in the model but {:?} in the metadata; re-run \
                     reef-check-idem on the model",
                    k.index, k.name
                ));
            }
        }
        Ok(())
    }

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
        let text =
            crate::files::read_text(path, "idempotence metadata", crate::files::MAX_TEXT_BYTES)
                .map_err(|e| MetadataError::File(Box::new(e)))?;
        let meta: Self = serde_json::from_str(&text).map_err(|source| MetadataError::Json {
            path: p.clone(),
            cause: source,
        })?;
        meta.validate()
            .map_err(|what| MetadataError::Invalid { path: p, what })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(kernels: Vec<(bool, usize)>) -> IdempotenceMetadata {
        IdempotenceMetadata {
            format: FORMAT.into(),
            version: VERSION,
            model: "m".into(),
            kernels: kernels
                .into_iter()
                .enumerate()
                .map(|(index, (idempotent, group_start))| KernelIdempotence {
                    index,
                    name: format!("k{index}"),
                    idempotent,
                    group_start,
                    group_start_op: None,
                })
                .collect(),
        }
    }

    #[test]
    fn restore_point_uses_group_start() {
        let m = meta(vec![(true, 0), (true, 1), (false, 0), (true, 3)]);
        m.validate().unwrap();
        assert_eq!(m.restore_point(1), 1);
        assert_eq!(m.restore_point(2), 0);
        assert_eq!(m.restore_point(3), 3);
        // Beyond the metadata: treated as idempotent.
        assert_eq!(m.restore_point(9), 9);
    }

    #[test]
    fn validate_rejects_inconsistent_entries() {
        let e = meta(vec![(true, 0), (false, 2)]).validate().unwrap_err();
        assert!(e.contains("after itself"), "{e}");
        let e = meta(vec![(true, 0), (true, 0)]).validate().unwrap_err();
        assert!(e.contains("idempotent but"), "{e}");
        let mut m = meta(vec![(true, 0)]);
        m.format = "x".into();
        assert!(m.validate().unwrap_err().contains("reef-check-idem"));
        let mut m = meta(vec![(true, 0)]);
        m.version = VERSION + 1;
        assert!(m.validate().unwrap_err().contains("version"));
        let mut m = meta(vec![(true, 0), (true, 1)]);
        m.kernels[1].index = 5;
        assert!(m.validate().unwrap_err().contains("index 5"));
    }

    #[test]
    fn check_kernels_refuses_stale_metadata() {
        let m = meta(vec![(true, 0), (false, 0)]);
        m.check_kernels(["k0", "k1"]).unwrap();
        assert!(m
            .check_kernels(["k0"])
            .unwrap_err()
            .contains("has 2 kernels"));
        assert!(m
            .check_kernels(["k0", "other"])
            .unwrap_err()
            .contains("kernel 1 is \"other\""));
        assert_eq!(file_name("vgg"), "vgg.idem.json");
    }

    #[test]
    fn load_round_trip_and_errors() {
        let dir = std::env::temp_dir().join(format!("reef-idem-meta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = meta(vec![(true, 0), (false, 0)]);
        m.kernels[1].group_start_op = Some(1);
        let path = dir.join("m.idem.json");
        std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(IdempotenceMetadata::load(&path).unwrap(), m);
        // Files without group_start_op (kernel-only traces) still load.
        let text = r#"{"format":"reef-idempotence","version":1,"model":"m","kernels":[{"index":0,"name":"k","idempotent":true,"group_start":0}]}"#;
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            IdempotenceMetadata::load(&path).unwrap().kernels[0].group_start_op,
            None
        );
        std::fs::write(&path, "{").unwrap();
        assert!(matches!(
            IdempotenceMetadata::load(&path),
            Err(MetadataError::Json { .. })
        ));
        assert!(matches!(
            IdempotenceMetadata::load(&dir.join("missing.json")),
            Err(MetadataError::File(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
