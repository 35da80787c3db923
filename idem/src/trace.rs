//! The memory-access trace of one inference: the ordered GPU operations
//! (kernels, memory copies, memory sets) with the device byte ranges each one
//! reads and writes. This is what REEF's idempotence checker records by
//! pre-executing a model (REEF §4.4, "Checking multi-kernel idempotence":
//! "a trace of the memory addresses accessed by each GPU operations, including
//! GPU kernels, memory copy, and memory set").
//!
//! The `reef-trace` file format (JSON lines) is documented in
//! docs/idempotence.md. Within one operation all reads are taken to happen
//! before all writes, the conservative order for a kernel whose threads may
//! interleave arbitrarily.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// The `format` field of a trace header line.
pub const TRACE_FORMAT: &str = "reef-trace";
/// The trace format version this crate reads and writes.
pub const TRACE_VERSION: u32 = 1;

/// The kind of a GPU operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Kernel,
    Memcpy,
    Memset,
}

impl OpKind {
    /// The `op` field value in a trace line.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Kernel => "kernel",
            OpKind::Memcpy => "memcpy",
            OpKind::Memset => "memset",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "kernel" => Some(OpKind::Kernel),
            "memcpy" => Some(OpKind::Memcpy),
            "memset" => Some(OpKind::Memset),
            _ => None,
        }
    }
}

/// A half-open device byte range `[addr, addr + len)`; `addr + len` never
/// overflows a `u64` (the parser and [`Range::new`] check it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range {
    pub addr: u64,
    pub len: u64,
}

impl Range {
    /// A range, or `None` when `addr + len` overflows the 64-bit address space.
    pub fn new(addr: u64, len: u64) -> Option<Self> {
        addr.checked_add(len).map(|_| Range { addr, len })
    }

    /// The first byte past the range.
    pub fn end(&self) -> u64 {
        self.addr + self.len
    }
}

/// One GPU operation of the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub name: String,
    pub reads: Vec<Range>,
    pub writes: Vec<Range>,
}

/// The ordered operations of one inference.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trace {
    pub model: String,
    pub ops: Vec<Op>,
}

/// Why a trace could not be read. Line numbers count from 1.
/// The underlying error is part of the message (field `cause`), not a
/// `source()`, so printing the chain (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read trace: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("{path}:{line}: {what}")]
    Line {
        path: String,
        line: usize,
        what: String,
    },
}

#[derive(Deserialize)]
struct RawHeader {
    format: Option<String>,
    version: Option<u32>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct RawOp {
    op: String,
    name: String,
    #[serde(default)]
    reads: Vec<(Num, Num)>,
    #[serde(default)]
    writes: Vec<(Num, Num)>,
}

#[derive(Serialize)]
struct OutHeader<'a> {
    format: &'a str,
    version: u32,
    model: &'a str,
}

#[derive(Serialize)]
struct OutOp<'a> {
    op: &'a str,
    name: &'a str,
    reads: Vec<[u64; 2]>,
    writes: Vec<[u64; 2]>,
}

const FIX_HINT: &str = "see docs/idempotence.md for the reef-trace format";

/// A JSON number as written: non-negative integers up to `u64::MAX`,
/// negative integers, and anything else (fractions, integers too large for
/// 64 bits, which serde_json reads as floating point).
#[derive(Debug, Clone, Copy)]
enum Num {
    U(u64),
    Neg(i64),
    Other(f64),
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::U(v) => write!(f, "{v}"),
            Num::Neg(v) => write!(f, "{v}"),
            Num::Other(v) => write!(f, "{v}"),
        }
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer byte address or length")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num::U(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(if v >= 0 {
                    Num::U(v as u64)
                } else {
                    Num::Neg(v)
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num::Other(v))
            }
        }
        d.deserialize_any(V)
    }
}

fn check_range(
    op: &str,
    which: &str,
    idx: usize,
    (addr, len): (Num, Num),
) -> Result<Range, String> {
    let what = || format!("operation {op:?}: {which} range #{idx} [{addr}, {len}]");
    match (addr, len) {
        (Num::U(a), Num::U(l)) => Range::new(a, l).ok_or_else(|| {
            format!(
                "{} overflows the 64-bit address space (addr + len must be at most {}; \
                 {FIX_HINT})",
                what(),
                u64::MAX
            )
        }),
        (Num::Neg(_), _) | (_, Num::Neg(_)) => Err(format!(
            "{} is negative; addresses and lengths are non-negative byte counts ({FIX_HINT})",
            what()
        )),
        (Num::Other(x), _) | (_, Num::Other(x)) if x < 0.0 => Err(format!(
            "{} is negative; addresses and lengths are non-negative byte counts ({FIX_HINT})",
            what()
        )),
        (Num::Other(x), _) | (_, Num::Other(x)) if x.fract() == 0.0 && x >= u64::MAX as f64 => {
            Err(format!(
                "{} overflows the 64-bit address space (addr + len must be at most {}; \
                 {FIX_HINT})",
                what(),
                u64::MAX
            ))
        }
        _ => Err(format!(
            "{}: addresses and lengths must be integers ({FIX_HINT})",
            what()
        )),
    }
}

impl Trace {
    /// Number of operations that are kernels.
    pub fn kernel_count(&self) -> usize {
        self.ops.iter().filter(|o| o.kind == OpKind::Kernel).count()
    }

    /// Total number of read and write ranges over all operations.
    pub fn range_count(&self) -> usize {
        self.ops
            .iter()
            .map(|o| o.reads.len() + o.writes.len())
            .sum()
    }

    /// Reads a trace file. `path` is used in error messages only.
    pub fn load(path: &Path) -> Result<Self, TraceError> {
        let p = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
            path: p.clone(),
            cause: source,
        })?;
        Self::read(std::io::BufReader::new(file), &p)
    }

    /// Parses a trace from a reader; `name` labels error messages.
    pub fn read(reader: impl BufRead, name: &str) -> Result<Self, TraceError> {
        let err = |line: usize, what: String| TraceError::Line {
            path: name.to_string(),
            line,
            what,
        };
        let mut trace = Trace::default();
        let mut seen_header = false;
        for (i, line) in reader.lines().enumerate() {
            let lineno = i + 1;
            let line = line.map_err(|source| TraceError::Io {
                path: name.to_string(),
                cause: source,
            })?;
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            if !seen_header {
                let h: RawHeader = serde_json::from_str(text).map_err(|e| {
                    err(
                        lineno,
                        format!(
                            "bad header JSON ({e}); the first line must be \
                             {{\"format\":\"reef-trace\",\"version\":1,\"model\":\"NAME\"}}"
                        ),
                    )
                })?;
                if h.format.as_deref() != Some(TRACE_FORMAT) {
                    return Err(err(
                        lineno,
                        format!(
                            "header format is {:?}, expected \"{TRACE_FORMAT}\" ({FIX_HINT})",
                            h.format.unwrap_or_default()
                        ),
                    ));
                }
                if h.version != Some(TRACE_VERSION) {
                    return Err(err(
                        lineno,
                        format!(
                            "trace version {:?} is not supported; this build reads version \
                             {TRACE_VERSION}",
                            h.version
                        ),
                    ));
                }
                trace.model = h
                    .model
                    .ok_or_else(|| err(lineno, "header has no \"model\" field".into()))?;
                seen_header = true;
                continue;
            }
            let raw: RawOp = serde_json::from_str(text).map_err(|e| {
                err(
                    lineno,
                    format!(
                        "bad operation JSON ({e}); expected {{\"op\":\"kernel\"|\"memcpy\"|\
                         \"memset\",\"name\":\"...\",\"reads\":[[addr,len],...],\
                         \"writes\":[[addr,len],...]}}"
                    ),
                )
            })?;
            let kind = OpKind::parse(&raw.op).ok_or_else(|| {
                err(
                    lineno,
                    format!(
                        "operation {:?}: unknown op {:?}; expected \"kernel\", \"memcpy\" or \
                         \"memset\"",
                        raw.name, raw.op
                    ),
                )
            })?;
            let conv = |which: &str, v: &[(Num, Num)]| -> Result<Vec<Range>, TraceError> {
                v.iter()
                    .enumerate()
                    .map(|(k, &r)| check_range(&raw.name, which, k, r).map_err(|w| err(lineno, w)))
                    .collect()
            };
            let reads = conv("read", &raw.reads)?;
            let writes = conv("write", &raw.writes)?;
            trace.ops.push(Op {
                kind,
                name: raw.name,
                reads,
                writes,
            });
        }
        if !seen_header {
            return Err(err(
                1,
                "empty trace: expected a {\"format\":\"reef-trace\",...} header line".into(),
            ));
        }
        Ok(trace)
    }

    /// Writes the trace in the `reef-trace` format.
    pub fn write(&self, mut w: impl Write) -> std::io::Result<()> {
        let header = OutHeader {
            format: TRACE_FORMAT,
            version: TRACE_VERSION,
            model: &self.model,
        };
        serde_json::to_writer(&mut w, &header)?;
        writeln!(w)?;
        let pairs = |v: &[Range]| v.iter().map(|r| [r.addr, r.len]).collect::<Vec<_>>();
        for op in &self.ops {
            let o = OutOp {
                op: op.kind.as_str(),
                name: &op.name,
                reads: pairs(&op.reads),
                writes: pairs(&op.writes),
            };
            serde_json::to_writer(&mut w, &o)?;
            writeln!(w)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Trace, TraceError> {
        Trace::read(s.as_bytes(), "t.reeftrace")
    }

    const HEADER: &str = r#"{"format":"reef-trace","version":1,"model":"m"}"#;

    #[test]
    fn round_trip() {
        let text = format!(
            "{HEADER}\n{}\n{}\n",
            r#"{"op":"memcpy","name":"in","reads":[],"writes":[[0,16]]}"#,
            r#"{"op":"kernel","name":"k","reads":[[0,16],[100,4]],"writes":[[32,8]]}"#
        );
        let t = parse(&text).unwrap();
        assert_eq!(t.model, "m");
        assert_eq!(t.ops.len(), 2);
        assert_eq!(t.ops[1].kind, OpKind::Kernel);
        assert_eq!(t.ops[1].reads[1], Range { addr: 100, len: 4 });
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(parse(std::str::from_utf8(&out).unwrap()).unwrap(), t);
    }

    fn line_error(text: &str) -> (usize, String) {
        match parse(text) {
            Err(TraceError::Line { line, what, .. }) => (line, what),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn bad_json_names_line() {
        let (line, what) = line_error(&format!(
            "{HEADER}\n{}\n{{\"op\":\"kernel\",",
            r#"{"op":"kernel","name":"a","reads":[],"writes":[]}"#
        ));
        assert_eq!(line, 3);
        assert!(what.contains("bad operation JSON"), "{what}");
    }

    #[test]
    fn negative_range_names_line() {
        let (line, what) = line_error(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"kernel","name":"a","reads":[[-8,4]],"writes":[]}"#
        ));
        assert_eq!(line, 2);
        assert!(
            what.contains("negative") && what.contains("\"a\""),
            "{what}"
        );
    }

    #[test]
    fn overflowing_range_names_line() {
        let (line, what) = line_error(&format!(
            "{HEADER}\n\n{}\n",
            r#"{"op":"memset","name":"z","writes":[[18446744073709551615,2]]}"#
        ));
        assert_eq!(line, 3);
        assert!(what.contains("overflows"), "{what}");
    }

    #[test]
    fn huge_and_fractional_numbers_are_rejected() {
        let (line, what) = line_error(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"kernel","name":"a","reads":[[0,99999999999999999999999]]}"#
        ));
        assert_eq!(line, 2);
        assert!(what.contains("overflows"), "{what}");
        let (_, what) = line_error(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"kernel","name":"a","writes":[[0.5,4]]}"#
        ));
        assert!(what.contains("must be integers"), "{what}");
        let (_, what) = line_error(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"kernel","name":"a","writes":[[-99999999999999999999999,4]]}"#
        ));
        assert!(what.contains("negative"), "{what}");
        // The largest representable range is accepted.
        let t = parse(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"kernel","name":"a","writes":[[18446744073709551614,1]]}"#
        ))
        .unwrap();
        assert_eq!(t.ops[0].writes[0].end(), u64::MAX);
    }

    #[test]
    fn unknown_op_names_line() {
        let (line, what) = line_error(&format!(
            "{HEADER}\n{}\n",
            r#"{"op":"launch","name":"a","reads":[],"writes":[]}"#
        ));
        assert_eq!(line, 2);
        assert!(what.contains("unknown op \"launch\""), "{what}");
    }

    #[test]
    fn bad_header() {
        let (line, what) = line_error(r#"{"format":"other","version":1,"model":"m"}"#);
        assert_eq!(line, 1);
        assert!(what.contains("reef-trace"), "{what}");
        let (_, what) = line_error(r#"{"format":"reef-trace","version":9,"model":"m"}"#);
        assert!(what.contains("version"), "{what}");
        assert!(parse("").is_err());
    }
}
