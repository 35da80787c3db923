//! A model's code package: what a GPU needs to run a model, read from its
//! directory. One reader for every device kind (DESIGN.md layer 1: the
//! model layer reads files, the devices load what it read).
//!
//! Two layouts:
//! - a reef-compile output (`NAME.json` with `format: reef-compile/1`,
//!   `kernels.ARCH.ptx` per architecture, `weights.bin`; docs/compile.md
//!   "The model directory"): the schedule is [`Model::load`]'s, storages
//!   take their roles from its `inputs`/`params`/`outputs`, and the weights
//!   come from `weights.bin` at their recorded offsets;
//! - a hand-written `model.toml` naming its code file, storages (with
//!   roles), kernels (grid, block, arguments) and weights file
//!   (libcuda-sim/models/two-kernel).
//!
//! Every read is bounded ([`crate::files`]): a code file by
//! [`files::MAX_CODE_BYTES`], the weights by the sizes the model declares
//! and by [`Limits::weight_bytes`] (a device sets its memory), and nothing
//! outside the declared weights is read. Errors name the file and what is
//! wrong, never the file's contents (issue 25, D2).
//!
//! What the code is (PTX text, an AMD code object) is the device's
//! concern: it picks the architecture (`choose_arch`) and loads the bytes.

use crate::files::{self, FileError};
use crate::Model;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What a storage holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Input,
    Weight,
    Activation,
    Output,
}

/// One device buffer of the model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Storage {
    pub name: String,
    pub bytes: u64,
    pub role: Role,
}

/// A kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// The device address of storage `i`.
    Storage(usize),
    /// A 32-bit scalar (`u32:N` in model.toml).
    U32(u32),
}

/// One kernel launch of an inference, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub name: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
    /// Dynamic shared memory per block (`sharedMemBytes`): a reef-compile
    /// schedule's `shared_mem_bytes` less the first architecture's static
    /// shared memory; 0 in model.toml.
    pub dynamic_shared: u32,
}

/// Limits a device sets on what it reads.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most weight bytes the model may declare (a device: its memory).
    pub weight_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            weight_bytes: 64 << 30,
        }
    }
}

/// A model read from its directory.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    /// The architecture whose code was read (`None`: model.toml, whose code
    /// file is named directly).
    pub arch: Option<String>,
    /// The code file and its bytes.
    pub code_path: PathBuf,
    pub code: Vec<u8>,
    pub storages: Vec<Storage>,
    pub launches: Vec<Launch>,
    /// Bytes of each weight storage, by storage index.
    pub weights: HashMap<usize, Vec<u8>>,
    /// The storages a request fills, in the model's order (a compiled
    /// model's ONNX inputs; model.toml's `input` storages in file order).
    pub inputs: Vec<usize>,
    /// The storages a request reads back, in the same manner.
    pub outputs: Vec<usize>,
    /// The reef-compile schedule (recorded work, resources, read and write
    /// sets per kernel); `None` for model.toml.
    pub schedule: Option<Model>,
}

/// Why a package could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("model {path}: {detail}")]
    Invalid { path: PathBuf, detail: String },
}

impl PackageError {
    /// Whether a file of the model exists but may not be read.
    pub fn is_permission_denied(&self) -> bool {
        matches!(self, PackageError::File(f) if f.is_permission_denied())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: String,
    ptx: String,
    weights: Option<String>,
    storage: Vec<Storage>,
    kernel: Vec<KernelDecl>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelDecl {
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    args: Vec<String>,
}

/// The part of a reef-compile schedule [`Model`] does not keep.
#[derive(Deserialize)]
struct RawCompiled {
    weights: Option<RawWeights>,
}

#[derive(Deserialize)]
struct RawWeights {
    file: String,
    entries: Vec<RawWeight>,
}

#[derive(Deserialize)]
struct RawWeight {
    storage: usize,
    name: String,
    offset: u64,
    bytes: u64,
}

impl Package {
    /// Reads model directory `dir`: `model.toml` when it has one, else the
    /// reef-compile schedule `NAME.json` (NAME = the directory's name), with
    /// the code of the architecture `choose_arch` picks from those compiled.
    pub fn read(
        dir: &Path,
        choose_arch: &dyn Fn(&[String]) -> Result<String, String>,
        limits: &Limits,
    ) -> Result<Package, PackageError> {
        let err = |detail: String| PackageError::Invalid {
            path: dir.to_path_buf(),
            detail,
        };
        if dir.join("model.toml").exists() {
            return Self::read_toml(dir, limits);
        }
        let stem = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !dir.join(format!("{stem}.json")).exists() {
            return Err(err(format!(
                "neither model.toml nor {stem}.json is there: compile the model with \
                 `reef-compile MODEL.onnx -o {}` (docs/compile.md)",
                dir.display()
            )));
        }
        Self::read_compiled(dir, &stem, choose_arch, limits)
    }

    fn read_compiled(
        dir: &Path,
        stem: &str,
        choose_arch: &dyn Fn(&[String]) -> Result<String, String>,
        limits: &Limits,
    ) -> Result<Package, PackageError> {
        let err = |detail: String| PackageError::Invalid {
            path: dir.to_path_buf(),
            detail,
        };
        let m = Model::load(dir).map_err(|e| match e {
            crate::LoadError::File(f) => PackageError::File(f),
            e => err(e.to_string()),
        })?;
        let Some(c) = m.compiled.as_ref() else {
            return Err(err(format!(
                "{stem}.json is a REEF schedule without code (no format reef-compile/1), and \
                 there is no model.toml: a GPU runs models compiled by reef-compile \
                 (docs/compile.md)"
            )));
        };
        if c.inputs.is_empty() || c.outputs.is_empty() {
            return Err(err(format!(
                "{} inputs and {} outputs: a model takes at least one of each",
                c.inputs.len(),
                c.outputs.len()
            )));
        }
        let (inputs, outputs) = (c.inputs.clone(), c.outputs.clone());
        let arch = choose_arch(&c.archs).map_err(err)?;
        let code_path = c
            .ptx
            .get(&arch)
            .map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    dir.join(p)
                }
            })
            .ok_or_else(|| err(format!("{stem}.json names no code file for {arch}")))?;
        let code = files::read(&code_path, "kernel code", files::MAX_CODE_BYTES)?;
        let params: HashSet<usize> = c.params.iter().copied().collect();
        let storages: Vec<Storage> = m
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| Storage {
                name: b.name.clone(),
                bytes: b.bytes,
                role: if inputs.contains(&i) {
                    Role::Input
                } else if outputs.contains(&i) {
                    Role::Output
                } else if params.contains(&i) {
                    Role::Weight
                } else {
                    Role::Activation
                },
            })
            .collect();
        if let Some(s) = storages.iter().find(|s| s.bytes == 0) {
            return Err(err(format!("storage {} has 0 bytes", s.name)));
        }
        let first_arch = c.archs.first();
        let launches: Vec<Launch> = m
            .kernels
            .iter()
            .map(|k| {
                // shared_mem_bytes = the first architecture's static shared
                // memory + the dynamic (reef-model); the launch passes the
                // dynamic.
                let first_static = first_arch
                    .and_then(|a| k.resources.get(a))
                    .map_or(0, |r| r.shared_static);
                Launch {
                    name: k.name.clone(),
                    grid: k.grid,
                    block: k.block,
                    args: k.args.iter().map(|&i| Arg::Storage(i)).collect(),
                    dynamic_shared: k.shared_mem_bytes.saturating_sub(first_static),
                }
            })
            .collect();
        if launches.is_empty() {
            return Err(err(format!("{stem}.json has no kernels")));
        }
        // Weights at their recorded offsets in weights.bin.
        let json = dir.join(format!("{stem}.json"));
        let text = files::read_text(&json, "schedule", files::MAX_TEXT_BYTES)?;
        let raw: RawCompiled =
            serde_json::from_str(&text).map_err(|e| err(format!("{stem}.json: {e}")))?;
        let mut weights = HashMap::new();
        if !params.is_empty() {
            let wsec = raw.weights.ok_or_else(|| {
                err(format!(
                    "{stem}.json has parameters but no `weights` section"
                ))
            })?;
            let mut declared = 0u64;
            for e in &wsec.entries {
                match storages.get(e.storage) {
                    Some(s) if s.role == Role::Weight && s.bytes == e.bytes => {}
                    _ => {
                        return Err(err(format!(
                            "weight {} names storage {} which is not a parameter of {} B",
                            e.name, e.storage, e.bytes
                        )))
                    }
                }
                if e.offset.checked_add(e.bytes).is_none() {
                    return Err(err(format!(
                        "weight {} at {}+{} B overflows",
                        e.name, e.offset, e.bytes
                    )));
                }
                declared = declared.saturating_add(e.bytes);
            }
            check_weight_limit(&err, declared, limits)?;
            let ranges: Vec<(u64, u64)> =
                wsec.entries.iter().map(|e| (e.offset, e.bytes)).collect();
            let data = files::read_ranges(&dir.join(&wsec.file), "weights", &ranges)?;
            for (e, bytes) in wsec.entries.iter().zip(data) {
                weights.insert(e.storage, bytes);
            }
            if let Some(&p) = params.iter().find(|p| !weights.contains_key(p)) {
                return Err(err(format!(
                    "parameter storage {p} ({}) has no entry in weights.entries",
                    storages[p].name
                )));
            }
        }
        Ok(Package {
            name: stem.to_string(),
            arch: Some(arch),
            code_path,
            code,
            storages,
            launches,
            weights,
            inputs,
            outputs,
            schedule: Some(m),
        })
    }

    /// A hand-written `model.toml` directory.
    fn read_toml(dir: &Path, limits: &Limits) -> Result<Package, PackageError> {
        let err = |detail: String| PackageError::Invalid {
            path: dir.to_path_buf(),
            detail,
        };
        let text = files::read_text(&dir.join("model.toml"), "manifest", files::MAX_TEXT_BYTES)?;
        // toml's Display quotes the offending line of the file: only its
        // message and position are shown.
        let m: Manifest = toml::from_str(&text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            err(format!("model.toml{at}: {}", e.message()))
        })?;
        let index: HashMap<&str, usize> = m
            .storage
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let some = |role: Role| -> Result<Vec<usize>, PackageError> {
            let v: Vec<usize> = (0..m.storage.len())
                .filter(|&i| m.storage[i].role == role)
                .collect();
            if v.is_empty() {
                return Err(err(format!("needs a storage with role {role:?}, has none")));
            }
            Ok(v)
        };
        let (inputs, outputs) = (some(Role::Input)?, some(Role::Output)?);
        if let Some(s) = m.storage.iter().find(|s| s.bytes == 0) {
            return Err(err(format!("storage {} has 0 bytes", s.name)));
        }
        let mut launches = Vec::new();
        for k in &m.kernel {
            let mut args = Vec::new();
            for a in &k.args {
                if let Some(n) = a.strip_prefix("u32:") {
                    let v = n
                        .parse()
                        .map_err(|_| err(format!("kernel {}: bad scalar {a:?}", k.name)))?;
                    args.push(Arg::U32(v));
                } else {
                    let i = *index.get(a.as_str()).ok_or_else(|| {
                        err(format!(
                            "kernel {}: argument {a:?} names no storage (or write u32:N)",
                            k.name
                        ))
                    })?;
                    args.push(Arg::Storage(i));
                }
            }
            launches.push(Launch {
                name: k.name.clone(),
                grid: k.grid,
                block: k.block,
                args,
                dynamic_shared: 0,
            });
        }
        if launches.is_empty() {
            return Err(err("no [[kernel]]".into()));
        }
        let code_path = dir.join(&m.ptx);
        let code = files::read(&code_path, "kernel code", files::MAX_CODE_BYTES)?;
        let mut weights = HashMap::new();
        let mut declared = 0u64;
        for s in m.storage.iter().filter(|s| s.role == Role::Weight) {
            declared = declared
                .checked_add(s.bytes)
                .ok_or_else(|| err("the weight storages' sizes overflow 64 bits".into()))?;
        }
        if declared > 0 {
            check_weight_limit(&err, declared, limits)?;
            let wf = m
                .weights
                .as_ref()
                .ok_or_else(|| err("weight storages but no weights file".into()))?;
            // The file must be exactly the weight storages, in order.
            let bytes = files::read(&dir.join(wf), "weights", declared).map_err(|e| match e {
                FileError::TooLarge { size, .. } => err(format!(
                    "{wf} has {size} B, the weight storages {declared} B"
                )),
                e => e.into(),
            })?;
            if bytes.len() as u64 != declared {
                return Err(err(format!(
                    "{wf} has {} B, the weight storages {declared} B",
                    bytes.len()
                )));
            }
            let mut off = 0usize;
            for (i, s) in m
                .storage
                .iter()
                .enumerate()
                .filter(|(_, s)| s.role == Role::Weight)
            {
                weights.insert(i, bytes[off..off + s.bytes as usize].to_vec());
                off += s.bytes as usize;
            }
        }
        Ok(Package {
            name: m.name,
            arch: None,
            code_path,
            code,
            storages: m.storage,
            launches,
            weights,
            inputs,
            outputs,
            schedule: None,
        })
    }

    /// The files [`Package::read`] would read from `dir` (manifest or
    /// schedule, every architecture's code file, weights), without reading
    /// the code or weights: for a caller that must check who may open them
    /// before a device reads them.
    pub fn files(dir: &Path) -> Result<Vec<PathBuf>, PackageError> {
        let err = |detail: String| PackageError::Invalid {
            path: dir.to_path_buf(),
            detail,
        };
        let toml_path = dir.join("model.toml");
        if toml_path.exists() {
            let text = files::read_text(&toml_path, "manifest", files::MAX_TEXT_BYTES)?;
            let m: Manifest =
                toml::from_str(&text).map_err(|e| err(format!("model.toml: {}", e.message())))?;
            let mut v = vec![toml_path, dir.join(&m.ptx)];
            v.extend(m.weights.map(|w| dir.join(w)));
            return Ok(v);
        }
        let stem = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let json = dir.join(format!("{stem}.json"));
        let m = Model::load(dir).map_err(|e| match e {
            crate::LoadError::File(f) => PackageError::File(f),
            e => err(e.to_string()),
        })?;
        let mut v = vec![json.clone()];
        if let Some(c) = &m.compiled {
            v.extend(c.ptx.values().map(|p| {
                if p.is_absolute() {
                    p.clone()
                } else {
                    dir.join(p)
                }
            }));
            let text = files::read_text(&json, "schedule", files::MAX_TEXT_BYTES)?;
            let raw: RawCompiled =
                serde_json::from_str(&text).map_err(|e| err(format!("{stem}.json: {e}")))?;
            v.extend(raw.weights.map(|w| dir.join(w.file)));
        }
        Ok(v)
    }

    /// Bytes of each of a request's inputs, in [`Self::inputs`]' order.
    pub fn input_bytes(&self) -> Vec<usize> {
        self.inputs
            .iter()
            .map(|&i| self.storages[i].bytes as usize)
            .collect()
    }

    /// Bytes of all weights.
    pub fn weight_bytes(&self) -> u64 {
        self.weights.values().map(|w| w.len() as u64).sum()
    }

    /// Device memory one stream's instance takes (inputs, activations,
    /// outputs).
    pub fn stream_bytes(&self) -> u64 {
        self.storages
            .iter()
            .filter(|s| s.role != Role::Weight)
            .map(|s| s.bytes)
            .sum()
    }
}

fn check_weight_limit(
    err: &dyn Fn(String) -> PackageError,
    declared: u64,
    limits: &Limits,
) -> Result<(), PackageError> {
    if declared > limits.weight_bytes {
        return Err(err(format!(
            "its weights declare {declared} B, more than the {} B this device can hold",
            limits.weight_bytes
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any_arch(a: &[String]) -> Result<String, String> {
        a.first().cloned().ok_or_else(|| "none".into())
    }

    fn toml_model(dir: &Path, weights: &str) {
        std::fs::write(
            dir.join("model.toml"),
            format!(
                "name = \"m\"\nptx = \"k.ptx\"\n{weights}\n\
                 [[storage]]\nname = \"in\"\nbytes = 4\nrole = \"input\"\n\
                 [[storage]]\nname = \"w\"\nbytes = 8\nrole = \"weight\"\n\
                 [[storage]]\nname = \"out\"\nbytes = 4\nrole = \"output\"\n\
                 [[kernel]]\nname = \"k\"\ngrid = [1, 1, 1]\nblock = [32, 1, 1]\n\
                 args = [\"in\", \"w\", \"out\", \"u32:4\"]\n"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("k.ptx"), ".version 7.0\n").unwrap();
    }

    #[test]
    fn a_manifest_reads_its_storages_launches_and_weights() {
        let d = tempfile::tempdir().unwrap();
        toml_model(d.path(), "weights = \"w.bin\"");
        std::fs::write(d.path().join("w.bin"), [7u8; 8]).unwrap();
        let p = Package::read(d.path(), &any_arch, &Limits::default()).unwrap();
        assert_eq!(
            (p.inputs.clone(), p.outputs.clone(), p.input_bytes()),
            (vec![0], vec![2], vec![4])
        );
        assert_eq!(p.weights[&1], vec![7u8; 8]);
        assert_eq!(
            p.launches[0].args,
            vec![
                Arg::Storage(0),
                Arg::Storage(1),
                Arg::Storage(2),
                Arg::U32(4)
            ]
        );
        assert_eq!(p.stream_bytes(), 8);
    }

    #[test]
    fn weights_from_a_device_or_past_the_declared_size_are_refused_without_reading_them() {
        let d = tempfile::tempdir().unwrap();
        toml_model(d.path(), "weights = \"/dev/zero\"");
        let e = Package::read(d.path(), &any_arch, &Limits::default()).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        toml_model(d.path(), "weights = \"w.bin\"");
        let f = std::fs::File::create(d.path().join("w.bin")).unwrap();
        f.set_len(1 << 40).unwrap();
        let e = Package::read(d.path(), &any_arch, &Limits::default()).unwrap_err();
        assert!(e.to_string().contains("the weight storages 8 B"), "{e}");
        let e = Package::read(d.path(), &any_arch, &Limits { weight_bytes: 4 }).unwrap_err();
        assert!(e.to_string().contains("more than the 4 B"), "{e}");
    }

    #[test]
    fn a_manifest_error_names_the_line_but_not_the_files_contents() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("model.toml"), "root:secret-hash:0:0\n").unwrap();
        let e = Package::read(d.path(), &any_arch, &Limits::default()).unwrap_err();
        let t = e.to_string();
        assert!(t.contains("model.toml (line 1)"), "{t}");
        assert!(!t.contains("secret"), "{t}");
    }
}
