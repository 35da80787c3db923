//! Throughput of the interval algorithm (REEF §4.4 checker) on a synthetic
//! trace of a million operations. Prints operations and ranges analysed per
//! second, plus the parse rate of the same trace in the reef-trace format.
//!
//! Run: `cargo bench -p reef-idem --bench throughput` (optionally
//! `-- OPS` to change the operation count).

use reef_idem::{analyze, Op, OpKind, Range, Trace};
use std::time::Instant;

/// Deterministic xorshift generator (no external randomness).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A DNN-like trace: 4096 activation buffers of 4 KiB-1 MiB reused by a
/// planner, 16384 weight ranges; kernels read 1-3 ranges (sometimes a
/// sub-range) and write one; one op in ten runs in place, one in fifty is a
/// memset, one in a hundred a memcpy.
fn synth(ops: usize) -> Trace {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bufs: Vec<Range> = (0..4096u64)
        .map(|i| Range {
            addr: i << 20,
            len: 4096 + (i * 7919 % 256) * 4096,
        })
        .collect();
    let weights = 1u64 << 40;
    let mut out = Vec::with_capacity(ops);
    let mut last = bufs[0];
    for i in 0..ops {
        let roll = rng.below(100);
        let dst = bufs[rng.below(bufs.len() as u64) as usize];
        let op = if roll == 0 {
            Op {
                kind: OpKind::Memcpy,
                name: format!("memcpy{i}"),
                reads: vec![],
                writes: vec![dst],
            }
        } else if roll < 3 {
            Op {
                kind: OpKind::Memset,
                name: format!("memset{i}"),
                reads: vec![],
                writes: vec![dst],
            }
        } else if roll < 13 {
            // In place on the last output, sometimes on half of it.
            let r = if rng.below(2) == 0 {
                last
            } else {
                Range {
                    addr: last.addr,
                    len: last.len / 2,
                }
            };
            Op {
                kind: OpKind::Kernel,
                name: format!("inplace{i}"),
                reads: vec![r],
                writes: vec![r],
            }
        } else {
            let mut reads = vec![last];
            for _ in 0..rng.below(3) {
                let w = weights + rng.below(16384) * 65536;
                reads.push(Range {
                    addr: w,
                    len: 4096 + rng.below(16) * 4096,
                });
            }
            Op {
                kind: OpKind::Kernel,
                name: format!("k{i}"),
                reads,
                writes: vec![dst],
            }
        };
        last = op.writes[0];
        out.push(op);
    }
    Trace {
        model: "synthetic".into(),
        ops: out,
    }
}

fn main() {
    let ops: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let trace = synth(ops);
    let ranges = trace.range_count();

    let mut text = Vec::new();
    trace.write(&mut text).expect("in-memory write");
    let t0 = Instant::now();
    let parsed = Trace::read(text.as_slice(), "synthetic").expect("parses");
    let parse_s = t0.elapsed().as_secs_f64();
    assert_eq!(parsed.ops.len(), ops);

    let t0 = Instant::now();
    let a = analyze(&trace).expect("analyses");
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "synthetic trace: {ops} operations, {} kernels, {ranges} ranges, {:.1} MB as reef-trace",
        a.kernels.len(),
        text.len() as f64 / 1e6
    );
    println!(
        "analysis: {secs:.3} s, {:.0} ops/s, {:.0} ranges/s ({} non-idempotent kernels, largest group {} kernels)",
        ops as f64 / secs,
        ranges as f64 / secs,
        a.kernels.len() - a.idempotent_count(),
        a.max_group()
    );
    println!(
        "parse:    {parse_s:.3} s, {:.0} ops/s, {:.0} ranges/s",
        ops as f64 / parse_s,
        ranges as f64 / parse_s
    );
}
