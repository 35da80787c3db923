//! Inputs of `reef-check-idem`, recognised by extension or content, each
//! turned into the memory-access trace REEF §4.4's checker analyses:
//!
//! - a REEF schedule (a model directory or its `.json`, as in
//!   ../shared/models): buffer level, one address range per storage buffer;
//!   each kernel reads and writes the sets the compiler recorded (reef-compile
//!   model directories, docs/compile.md: known exactly at compile time, no
//!   inference), else the TVM convention (the last argument is written, the
//!   others read);
//! - an ONNX model (`.onnx`, or any protobuf that decodes as one), lowered by
//!   [`crate::onnx`];
//! - a `reef-trace` file (JSON lines whose first line is the header);
//! - a TensorRT `.engine`: engines are opaque, so its recorded trace
//!   `MODEL.engine.reeftrace` beside it is read instead.

use crate::onnx;
use crate::trace::{Op, OpKind, Range, Trace, TRACE_FORMAT};
use anyhow::{bail, Context, Result};
use reef_model::Model;
use std::io::Read;
use std::path::{Path, PathBuf};

/// What an input file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Schedule,
    Onnx,
    Trace,
    Engine,
}

/// Decides the kind of `path` from its extension, else from its first bytes.
pub fn detect(path: &Path) -> Result<InputKind> {
    if path.is_dir() {
        return Ok(InputKind::Schedule);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name.ends_with(".engine") || name.ends_with(".plan") {
        return Ok(InputKind::Engine);
    }
    if name.ends_with(".onnx") {
        return Ok(InputKind::Onnx);
    }
    if name.ends_with(".reeftrace") || name.ends_with(".jsonl") {
        return Ok(InputKind::Trace);
    }
    let mut head = vec![0u8; 4096];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("{}: cannot read input", path.display()))?;
    head.truncate(n);
    let text = String::from_utf8_lossy(&head);
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let first = trimmed.lines().next().unwrap_or("");
        if first.contains(TRACE_FORMAT) {
            return Ok(InputKind::Trace);
        }
        return Ok(InputKind::Schedule);
    }
    // ONNX ModelProto starts with field 1 (ir_version, varint): tag byte 0x08.
    if head.first() == Some(&0x08) {
        return Ok(InputKind::Onnx);
    }
    // Not JSON inside, but named as a schedule: let the schedule loader say
    // what is wrong with it.
    if name.ends_with(".json") {
        return Ok(InputKind::Schedule);
    }
    bail!(
        "{}: cannot tell what this file is; expected a REEF schedule (directory or .json), \
         an ONNX model (.onnx), a reef-trace (.reeftrace) or a TensorRT engine (.engine)",
        path.display()
    )
}

/// Lowers a REEF schedule to a buffer-level trace: buffer `i` occupies its
/// own address range, kernels read [`reef_model::Kernel::reads`] and write
/// [`reef_model::Kernel::writes`]: the recorded sets of a compiled model,
/// else every argument but the last and the last (../shared/models/README.md). Fails when the buffers together do
/// not fit a 64-bit address space.
pub fn schedule_trace(model: &Model) -> Result<Trace> {
    let mut addr = Vec::with_capacity(model.buffers.len());
    let mut next = 0u64;
    for b in &model.buffers {
        addr.push(Range {
            addr: next,
            len: b.bytes,
        });
        // Keep buffers apart even when a size is 0.
        next = next.checked_add(b.bytes.max(1)).with_context(|| {
            format!(
                "storage[{}] ({}): the buffers up to this one need more than 2^64 bytes",
                b.index, b.name
            )
        })?;
    }
    let ops = model
        .kernels
        .iter()
        .map(|k| Op {
            kind: OpKind::Kernel,
            name: k.name.clone(),
            reads: k.reads.iter().map(|&b| addr[b]).collect(),
            writes: k.writes.iter().map(|&b| addr[b]).collect(),
        })
        .collect();
    Ok(Trace {
        model: model.name.clone(),
        ops,
    })
}

/// The recorded trace that stands for a TensorRT engine.
pub fn engine_trace_path(engine: &Path) -> PathBuf {
    let mut s = engine.as_os_str().to_owned();
    s.push(".reeftrace");
    PathBuf::from(s)
}

/// Loads any supported input as a trace.
pub fn load(path: &Path, onnx_opts: &onnx::Options) -> Result<Trace> {
    if !path.exists() {
        bail!("{}: no such file or directory", path.display());
    }
    match detect(path)? {
        InputKind::Schedule => {
            let m = Model::load(path).map_err(anyhow::Error::new)?;
            schedule_trace(&m).with_context(|| path.display().to_string())
        }
        InputKind::Onnx => Ok(onnx::load(path, onnx_opts)?),
        InputKind::Trace => Ok(Trace::load(path)?),
        InputKind::Engine => {
            let t = engine_trace_path(path);
            if !t.is_file() {
                bail!(
                    "{}: a TensorRT engine is opaque (its kernels' memory accesses cannot be \
                     read from the file). Record one inference's memory-access trace on a GPU \
                     host with the NVBit recording mode, which writes the reef-trace format \
                     (docs/idempotence.md), and save it as {}; then run reef-check-idem on the \
                     engine again",
                    path.display(),
                    t.display()
                );
            }
            let mut trace = Trace::load(&t)?;
            if trace.model.is_empty() {
                trace.model = path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
            }
            Ok(trace)
        }
    }
}
