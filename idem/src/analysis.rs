//! Single- and multi-kernel idempotence (REEF §4.4, Figs. 9 and 10; Table 1
//! counts the single-kernel result).
//!
//! A group of consecutive operations `[s, k]` is idempotent when every byte
//! it touches is either only read, or first written inside the group (no
//! clobber anti-dependence: no group input is overwritten). The minimal group
//! of operation `k` is `[s, k]` with the largest such `s` (the paper's search
//! extends backwards from `k` one predecessor at a time and stops at the first
//! idempotent group). A kernel is idempotent alone when `s = k`.
//!
//! Instead of repeating that search per kernel, this module derives, in one
//! forward pass over interval maps (never per byte), the set of group starts
//! each clobber forbids:
//!
//! for a byte `b`, take an *epoch* between two consecutive writes of `b` at
//! operations `p < j` (`p = -1` when nothing wrote `b` before), and let `r` be
//! the last operation in `(p, j]` that reads `b` (reads of an operation come
//! before its writes). Then a group ending at `k >= j` that starts at
//! `s in (p, r]` reads `b` before writing it and later writes it: it is not
//! idempotent. Conversely every clobber is caught by such an epoch. So the
//! minimal group of `k` starts at the largest `s <= k` not covered by an
//! interval `(p, r]` *activated* at some `j <= k`. Intervals are marked in a
//! union-find over operation indices ("nearest uncovered index to the left"),
//! so the whole pass costs O((ops + ranges) log(segments)).
//!
//! Memory copies and memory sets are group members like kernels; group sizes
//! (Fig. 10) count kernels only.

use crate::trace::{OpKind, Trace};
use std::collections::BTreeMap;

const NONE: u32 = u32::MAX;

/// State of one maximal address segment with uniform access history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seg {
    end: u64,
    /// Last operation that wrote the segment, or `NONE`.
    last_write: u32,
    /// Last operation that read it since `last_write`, or `NONE`.
    last_read: u32,
}

/// Interval map over the address space: start -> segment. Only addresses
/// touched so far are present; segments never overlap.
#[derive(Default)]
struct SegMap {
    map: BTreeMap<u64, Seg>,
    scratch: Vec<u64>,
    gaps: Vec<(u64, u64)>,
}

impl SegMap {
    /// Splits the segment containing `x` (if any) so a segment starts at `x`.
    fn split_at(&mut self, x: u64) {
        let Some((&s, seg)) = self.map.range_mut(..x).next_back() else {
            return;
        };
        if seg.end > x {
            let tail = Seg {
                end: seg.end,
                ..*seg
            };
            seg.end = x;
            debug_assert!(s < x);
            self.map.insert(x, tail);
        }
    }

    /// Makes `[a, b)` fully covered by segments (gaps become fresh segments)
    /// and leaves their start keys in `self.scratch`.
    fn cover(&mut self, a: u64, b: u64) {
        self.split_at(a);
        self.split_at(b);
        self.scratch.clear();
        self.gaps.clear();
        let mut pos = a;
        for (&s, seg) in self.map.range(a..b) {
            if s > pos {
                self.gaps.push((pos, s));
            }
            self.scratch.push(s);
            pos = seg.end;
        }
        if pos < b {
            self.gaps.push((pos, b));
        }
        for &(s, e) in &self.gaps {
            self.map.insert(
                s,
                Seg {
                    end: e,
                    last_write: NONE,
                    last_read: NONE,
                },
            );
            self.scratch.push(s);
        }
    }

    /// Merges equal-state neighbours in and around `[a, b)`.
    fn coalesce(&mut self, a: u64, b: u64) {
        let first = self
            .map
            .range(..a)
            .next_back()
            .or_else(|| self.map.range(a..).next())
            .map(|(&s, &seg)| (s, seg));
        let Some((mut cur, mut c)) = first else {
            return;
        };
        // Segments are non-empty, so `c.end > cur` and `c.end` is the
        // smallest key that can follow `cur`.
        while let Some((&k, &n)) = self.map.range(c.end..).next() {
            if k > b {
                break;
            }
            if c.end == k && c.last_write == n.last_write && c.last_read == n.last_read {
                self.map.remove(&k);
                c.end = n.end;
                self.map.get_mut(&cur).expect("present").end = n.end;
            } else {
                cur = k;
                c = n;
            }
        }
    }
}

/// "Nearest uncovered index at or left of x" over operation indices, with
/// path compression. Index `x` lives at slot `x + 1`; slot 0 means "none".
struct Uncovered {
    parent: Vec<u32>,
}

impl Uncovered {
    fn new(n: usize) -> Self {
        Uncovered {
            parent: (0..=n as u32).collect(),
        }
    }

    fn find(&mut self, slot: u32) -> u32 {
        let mut root = slot;
        while self.parent[root as usize] != root {
            root = self.parent[root as usize];
        }
        let mut x = slot;
        while self.parent[x as usize] != root {
            let next = self.parent[x as usize];
            self.parent[x as usize] = root;
            x = next;
        }
        root
    }

    /// Largest uncovered op index `<= x`, if any.
    fn nearest(&mut self, x: u32) -> Option<u32> {
        let r = self.find(x + 1);
        (r > 0).then(|| r - 1)
    }

    /// Covers op indices `lo..=hi`.
    fn cover(&mut self, lo: u32, hi: u32) {
        let mut slot = self.find(hi + 1);
        while slot > lo {
            // slot - 1 is op index >= lo: cover it.
            self.parent[slot as usize] = slot - 1;
            slot = self.find(slot - 1);
        }
    }
}

/// The result for one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelResult {
    /// Kernel index (launch order among kernels only).
    pub index: usize,
    /// Operation index in the trace.
    pub op: usize,
    pub name: String,
    /// Re-executing the kernel alone after a kill is safe.
    pub idempotent: bool,
    /// Operation index where the minimal idempotent group starts (may be a
    /// memcpy or memset), or `None` when no group ending here is idempotent,
    /// not even the whole prefix of the trace (the kernel cannot be restored
    /// by re-execution at all).
    pub start_op: Option<usize>,
    /// Kernel index of the first kernel of the group (0 when `start_op` is
    /// `None`: the best a restore can do is to re-run from the beginning).
    pub start_kernel: usize,
    /// Number of kernels in the group (Fig. 10's x axis).
    pub size: usize,
}

/// Idempotence of every kernel of one trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    pub model: String,
    pub ops: usize,
    pub ranges: usize,
    pub kernels: Vec<KernelResult>,
}

impl Analysis {
    /// Number of kernels idempotent alone (Table 1's numerator).
    pub fn idempotent_count(&self) -> usize {
        self.kernels.iter().filter(|k| k.idempotent).count()
    }

    /// The non-idempotent kernels.
    pub fn groups(&self) -> impl Iterator<Item = &KernelResult> {
        self.kernels.iter().filter(|k| !k.idempotent)
    }

    /// Largest group size among non-idempotent kernels (0 if none).
    pub fn max_group(&self) -> usize {
        self.groups().map(|k| k.size).max().unwrap_or(0)
    }

    /// Fig. 10: (group size in kernels, number of non-idempotent kernels).
    pub fn histogram(&self) -> BTreeMap<usize, usize> {
        let mut h = BTreeMap::new();
        for k in self.groups() {
            *h.entry(k.size).or_insert(0) += 1;
        }
        h
    }

    /// Kernels whose minimal group does not exist.
    pub fn unrestorable(&self) -> impl Iterator<Item = &KernelResult> {
        self.kernels.iter().filter(|k| k.start_op.is_none())
    }
}

/// Error for traces beyond the analysis' index width.
#[derive(Debug, thiserror::Error)]
#[error("trace has {0} operations; at most {max} are supported", max = u32::MAX - 1)]
pub struct TooLarge(pub usize);

/// Operation `op` writes all of `seg`: a read since the last write opens a
/// clobber, forbidding group starts `(last_write, last_read]`.
fn write_segment(seg: &mut Seg, op: u32, forbidden: &mut Vec<(u32, u32)>) {
    if seg.last_read != NONE {
        let lo = if seg.last_write == NONE {
            0
        } else {
            seg.last_write + 1
        };
        forbidden.push((lo, seg.last_read));
    }
    seg.last_write = op;
    seg.last_read = NONE;
}

/// Analyses a trace: per-kernel idempotence and minimal idempotent groups.
pub fn analyze(trace: &Trace) -> Result<Analysis, TooLarge> {
    let n = trace.ops.len();
    if n >= (u32::MAX - 1) as usize {
        return Err(TooLarge(n));
    }
    let mut segs = SegMap::default();
    let mut unc = Uncovered::new(n);
    // kernels_before[i] = number of kernels among ops 0..i.
    let mut kernels_before = Vec::with_capacity(n + 1);
    let mut kernels = Vec::with_capacity(trace.kernel_count());
    let mut forbidden: Vec<(u32, u32)> = Vec::new();
    let mut nk = 0usize;
    for (i, op) in trace.ops.iter().enumerate() {
        kernels_before.push(nk);
        let iu = i as u32;
        for r in op.reads.iter().filter(|r| r.len > 0) {
            // Fast path: the range is exactly one existing segment (a whole
            // buffer accessed again); no split, so nothing to coalesce.
            if let Some(seg) = segs.map.get_mut(&r.addr).filter(|s| s.end == r.end()) {
                seg.last_read = iu;
                continue;
            }
            segs.cover(r.addr, r.end());
            let keys = std::mem::take(&mut segs.scratch);
            for s in &keys {
                segs.map.get_mut(s).expect("covered").last_read = iu;
            }
            segs.scratch = keys;
            segs.coalesce(r.addr, r.end());
        }
        forbidden.clear();
        for r in op.writes.iter().filter(|r| r.len > 0) {
            if let Some(seg) = segs.map.get_mut(&r.addr).filter(|s| s.end == r.end()) {
                write_segment(seg, iu, &mut forbidden);
                continue;
            }
            segs.cover(r.addr, r.end());
            let keys = std::mem::take(&mut segs.scratch);
            for s in &keys {
                write_segment(segs.map.get_mut(s).expect("covered"), iu, &mut forbidden);
            }
            segs.scratch = keys;
            segs.coalesce(r.addr, r.end());
        }
        for &(lo, hi) in &forbidden {
            unc.cover(lo, hi);
        }
        if op.kind == OpKind::Kernel {
            let start_op = unc.nearest(iu).map(|s| s as usize);
            let start_kernel = start_op.map(|s| kernels_before[s]).unwrap_or(0);
            kernels.push(KernelResult {
                index: nk,
                op: i,
                name: op.name.clone(),
                idempotent: start_op == Some(i),
                start_op,
                start_kernel,
                size: nk - start_kernel + 1,
            });
            nk += 1;
        }
    }
    Ok(Analysis {
        model: trace.model.clone(),
        ops: n,
        ranges: trace.range_count(),
        kernels,
    })
}

/// The paper's definition checked byte by byte, for testing: is the group of
/// operations `[s, k]` idempotent? Quadratic and per byte; only for small
/// address spaces.
pub fn group_is_idempotent_bytewise(trace: &Trace, s: usize, k: usize) -> bool {
    use std::collections::HashMap;
    // byte -> (first access was a read, was written)
    let mut state: HashMap<u64, (bool, bool)> = HashMap::new();
    for op in &trace.ops[s..=k] {
        for r in &op.reads {
            for b in r.addr..r.end() {
                state.entry(b).or_insert((true, false));
            }
        }
        for r in &op.writes {
            for b in r.addr..r.end() {
                state.entry(b).or_insert((false, false)).1 = true;
            }
        }
    }
    state
        .values()
        .all(|&(first_read, written)| !(first_read && written))
}

/// Brute-force oracle: the paper's backward search with the byte-level check.
/// Returns, per kernel, the group start operation (`None` if none exists).
pub fn oracle_starts(trace: &Trace) -> Vec<Option<usize>> {
    trace
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind == OpKind::Kernel)
        .map(|(k, _)| {
            (0..=k)
                .rev()
                .find(|&s| group_is_idempotent_bytewise(trace, s, k))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Op, Range};

    fn kernel(name: &str, reads: &[(u64, u64)], writes: &[(u64, u64)]) -> Op {
        let rs = |v: &[(u64, u64)]| v.iter().map(|&(a, l)| Range { addr: a, len: l }).collect();
        Op {
            kind: OpKind::Kernel,
            name: name.into(),
            reads: rs(reads),
            writes: rs(writes),
        }
    }

    #[test]
    fn uncovered_union_find() {
        let mut u = Uncovered::new(10);
        assert_eq!(u.nearest(5), Some(5));
        u.cover(3, 5);
        assert_eq!(u.nearest(5), Some(2));
        assert_eq!(u.nearest(6), Some(6));
        u.cover(0, 2);
        assert_eq!(u.nearest(5), None);
        assert_eq!(u.nearest(9), Some(9));
    }

    #[test]
    fn partial_overlap_of_ranges() {
        // k0 writes [0,8); k1 reads [4,12) and writes [8,12): it reads bytes
        // 8..12 before writing them, so it is not idempotent; the group from
        // k0 still reads 8..12 first, and no earlier op writes them.
        let t = Trace {
            model: "t".into(),
            ops: vec![
                kernel("k0", &[], &[(0, 8)]),
                kernel("k1", &[(4, 8)], &[(8, 4)]),
            ],
        };
        let a = analyze(&t).unwrap();
        assert!(a.kernels[0].idempotent);
        assert!(!a.kernels[1].idempotent);
        assert_eq!(a.kernels[1].start_op, None);
        assert_eq!(oracle_starts(&t), vec![Some(0), None]);
    }

    #[test]
    fn memset_makes_group_of_one_kernel() {
        // As the paper notes, a memset writing the location first keeps the
        // group at one kernel.
        let t = Trace {
            model: "t".into(),
            ops: vec![
                kernel("k0", &[(0, 4)], &[(8, 4)]),
                Op {
                    kind: OpKind::Memset,
                    name: "zero".into(),
                    reads: vec![],
                    writes: vec![Range { addr: 16, len: 4 }],
                },
                kernel("acc", &[(8, 4), (16, 4)], &[(16, 4)]),
            ],
        };
        let a = analyze(&t).unwrap();
        let acc = &a.kernels[1];
        assert!(!acc.idempotent);
        assert_eq!(acc.start_op, Some(1));
        assert_eq!(acc.start_kernel, 1);
        assert_eq!(acc.size, 1);
    }
}
