//! Diagnostics of value tracking (`REEF_VALUES_TRACE=<file>`): the
//! simulator records every operation on the buffers, and a request whose
//! outputs the version tracker calls stale gets a report appended to the
//! file: each kernel completion and kill of the request in device order,
//! with every buffer it read or wrote compared with one unpreempted run's
//! version at that kernel, so the first stale read names the kernel, the
//! buffer and the operation that left it stale.

use super::{buffer, Prepared};
use reef_sim::{BufferId, TraceOp, ValueTracker};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The trace file, when tracing is asked for.
pub(super) fn trace_path() -> Option<std::path::PathBuf> {
    static P: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    P.get_or_init(|| std::env::var_os("REEF_VALUES_TRACE").map(Into::into))
        .clone()
}

/// Appends the report of task `task` (model `m`, index `mi`, namespace
/// `ns`) to the trace file.
pub(super) fn report(values: &ValueTracker, m: &Prepared, ns: u32, mi: usize, task: u64) {
    let Some(path) = trace_path() else { return };
    let text = describe(values.trace(), m, ns, mi, task);
    use std::io::Write as _;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(text.as_bytes());
    }
}

/// The report: see the module documentation.
pub(super) fn describe(trace: &[TraceOp], m: &Prepared, ns: u32, mi: usize, task: u64) -> String {
    let n_buf = m.model.buffers.len();
    let storage_of: HashMap<BufferId, usize> = (0..n_buf).map(|s| (buffer(ns, mi, s), s)).collect();
    let kernel_of: HashMap<u64, usize> = m
        .shapes
        .iter()
        .enumerate()
        .map(|(k, s)| (s.identity, k))
        .collect();
    // One unpreempted run: the versions each kernel reads and writes.
    let mut reference = ValueTracker::new();
    let mut expect_read: Vec<HashMap<usize, u64>> = Vec::new();
    let mut expect_write: Vec<HashMap<usize, u64>> = Vec::new();
    for (k, kern) in m.model.kernels.iter().enumerate() {
        let r: Vec<BufferId> = kern.reads.iter().map(|&x| buffer(ns, mi, x)).collect();
        let w: Vec<BufferId> = kern.writes.iter().map(|&x| buffer(ns, mi, x)).collect();
        expect_read.push(
            kern.reads
                .iter()
                .zip(&r)
                .map(|(&s, &b)| (s, reference.get(b)))
                .collect(),
        );
        let sh = &m.shapes[k];
        reference.complete(sh.identity, &r, &w, 0..sh.blocks as u64, sh.blocks as u64);
        expect_write.push(
            kern.writes
                .iter()
                .zip(&w)
                .map(|(&s, &b)| (s, reference.get(b)))
                .collect(),
        );
    }
    // The request's operations start at its reset (the last Set of its
    // namespace's last storage).
    let last = buffer(ns, mi, n_buf.saturating_sub(1));
    let start = trace
        .iter()
        .rposition(|op| matches!(op, TraceOp::Set { buffer, .. } if *buffer == last))
        .unwrap_or(0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "== task {task} model {} ns {ns}: outputs stale; {} trace entries from its reset",
        m.name,
        trace.len() - start
    );
    let tag = format!("task {task} ");
    let mut first_stale = None;
    let ver = |v: &[(BufferId, u64)], exp: Option<&HashMap<usize, u64>>| -> (String, bool) {
        let mut out = String::new();
        let mut stale = false;
        for (b, x) in v {
            let st = storage_of.get(b).copied();
            let e = st.and_then(|st| exp.and_then(|e| e.get(&st)).copied());
            let ok = e == Some(*x);
            stale |= !ok;
            let _ = write!(
                out,
                " s{}={:016x}{}",
                st.map(|x| x.to_string())
                    .unwrap_or_else(|| format!("?{:#x}", b.0)),
                x,
                if ok {
                    String::new()
                } else {
                    format!("(!= {:016x})", e.unwrap_or(0))
                }
            );
        }
        (out, stale)
    };
    for (i, op) in trace.iter().enumerate().skip(start) {
        let mine = |bs: &[BufferId]| bs.iter().any(|b| storage_of.contains_key(b));
        match op {
            TraceOp::Complete {
                identity,
                reads,
                writes,
                blocks,
                total,
            }
            | TraceOp::Kill {
                identity,
                reads,
                writes,
                blocks,
                total,
            } => {
                if !mine(&writes.iter().map(|x| x.0).collect::<Vec<_>>()) {
                    continue;
                }
                let k = kernel_of.get(identity).copied();
                let what = if matches!(op, TraceOp::Kill { .. }) {
                    "KILL"
                } else {
                    "done"
                };
                let (r, rs) = ver(reads, k.map(|k| &expect_read[k]));
                let (w, _) = ver(writes, k.map(|k| &expect_write[k]));
                if rs && first_stale.is_none() && what == "done" {
                    first_stale = Some(i);
                }
                let _ = writeln!(
                    s,
                    "  [{i}] {what} k{} blocks {}..{}/{total}{}; reads{r}; writes{w}",
                    k.map(|k| k.to_string()).unwrap_or_else(|| "?".into()),
                    blocks.start,
                    blocks.end,
                    if rs { " STALE READ" } else { "" },
                );
            }
            TraceOp::Corrupt { writes } => {
                if mine(writes) {
                    let _ = writeln!(s, "  [{i}] corrupt {writes:?}");
                }
            }
            TraceOp::Set { buffer, value } => {
                if storage_of.contains_key(buffer) && *buffer != last {
                    // The reset's sets are not shown.
                    let _ = value;
                }
            }
            TraceOp::Note(n) => {
                if n.starts_with(&tag) {
                    let _ = writeln!(s, "  [{i}] {n}");
                }
            }
        }
    }
    let _ = writeln!(s, "  first stale read at entry {first_stale:?}");
    s
}
