//! Value tracking (DESIGN.md "The simulator", value tracking): every buffer
//! carries a version hash; a kernel's outputs become a hash of its identity
//! and its inputs; a killed kernel leaves its outputs corrupted. Restores
//! (REEF §4.4, reset-based preemption with idempotent re-execution, Fig. 9)
//! are correct exactly when the final outputs equal an unpreempted run.
//!
//! A kernel spread over several launches (a block range each, as dynamic
//! kernel padding does, REEF §5 Fig. 12) produces its full output only once
//! its ranges cover every block; until then the buffer holds a partial value
//! that equals no complete one. Ranges are tracked as parts of the output
//! (block `i` of a shape of `B` blocks writes its `i`-th `1/B`), so block
//! ranges of different shapes of one kernel identity (versions of a kernel
//! with 2×, 4×, ... the blocks, §5.3) add up exactly; overlapping ranges
//! count once and a killed range un-writes its part.
//!
//! For models compiled by reef-compile the buffers also hold real bytes,
//! computed by the CPU build of each kernel's TIR function
//! ([`crate::realvalues`], [`ValueTracker::load_compiled`]); the version
//! hashes are kept alongside, unchanged.

use crate::realvalues::RealValues;
use crate::shape::fnv1a;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

/// Multiplicative hasher for the buffer maps (keys are small integers; the
/// default SipHash showed up in profiles of `reef-bench simspeed`).
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type Map<V> = HashMap<BufferId, V, BuildHasherDefault<IdHasher>>;

/// A device buffer, named by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u64);

const CORRUPT: u64 = 0xdead_beef_0bad_f00d;
const PARTIAL: u64 = 0x9a47_1a1b_10c4_5eed;

/// The part of a kernel's output its completed blocks wrote, as disjoint
/// sorted intervals of `[0, den)`. Block `i` of a launch's shape of `B`
/// blocks writes `[i·den/B, (i+1)·den/B)`: a kernel's blocks tile its
/// output evenly, and shapes of one identity (versions of one kernel with
/// 2×, 4×, ... the blocks, REEF §5.3 tile sizes) tile the same output, a
/// block of a coarse shape covering exactly the blocks of a finer one it
/// is split into. `den` is the least common multiple of the block counts
/// seen, so every range is exact whichever shapes ran the blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Coverage {
    den: u64,
    ivs: Vec<(u64, u64)>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Coverage {
    /// Makes `den` a multiple of `total` and returns the units per block.
    fn unit(&mut self, total: u64) -> u64 {
        let total = total.max(1);
        if self.den == 0 {
            self.den = total;
        } else if self.den % total != 0 {
            let l = self.den / gcd(self.den, total) * total;
            let f = l / self.den;
            for iv in &mut self.ivs {
                *iv = (iv.0 * f, iv.1 * f);
            }
            self.den = l;
        }
        self.den / total
    }

    fn add(&mut self, blocks: &Range<u64>, total: u64) {
        let u = self.unit(total);
        let (mut a, mut b) = (blocks.start * u, blocks.end.min(total) * u);
        if a >= b {
            return;
        }
        let mut out = Vec::with_capacity(self.ivs.len() + 1);
        for &(s, e) in &self.ivs {
            if e < a || s > b {
                out.push((s, e));
            } else {
                a = a.min(s);
                b = b.max(e);
            }
        }
        out.push((a, b));
        out.sort_unstable();
        self.ivs = out;
    }

    fn remove(&mut self, blocks: &Range<u64>, total: u64) {
        let u = self.unit(total);
        let (a, b) = (blocks.start * u, blocks.end.min(total) * u);
        let mut out = Vec::with_capacity(self.ivs.len() + 1);
        for &(s, e) in &self.ivs {
            if e <= a || s >= b {
                out.push((s, e));
                continue;
            }
            if s < a {
                out.push((s, a));
            }
            if e > b {
                out.push((b, e));
            }
        }
        self.ivs = out;
    }

    /// Every block of a kernel of `total` blocks.
    fn full(total: u64) -> Self {
        let den = total.max(1);
        Self {
            den,
            ivs: vec![(0, den)],
        }
    }

    fn is_full(&self) -> bool {
        self.ivs.len() == 1 && self.ivs[0] == (0, self.den)
    }

    /// A hash of the covered part, independent of `den`'s scale.
    fn digest(&self) -> u64 {
        let g = self
            .ivs
            .iter()
            .fold(self.den, |g, &(s, e)| gcd(gcd(g, s), e))
            .max(1);
        let mut h = fnv1a(&(self.den / g).to_le_bytes(), 0x7a11);
        for &(s, e) in &self.ivs {
            h = fnv1a(&[(s / g).to_le_bytes(), (e / g).to_le_bytes()].concat(), h);
        }
        h
    }
}

/// Version hashes of buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueTracker {
    values: Map<u64>,
    /// Partial writes of a kernel spread over block ranges: (full hash,
    /// the part of the output written).
    partial: Map<(u64, Coverage)>,
    corruptions: u64,
    /// Real bytes, once a compiled model is registered.
    real: Option<Box<RealValues>>,
    /// What happened to the buffers, when tracing is on (diagnostics:
    /// which kernel read which version, [`ValueTracker::trace_on`]).
    trace: Option<Vec<TraceOp>>,
}

/// One value-tracking operation, recorded while tracing is on. Versions are
/// the buffers' values at the operation (`reads`: before it, `writes`:
/// after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOp {
    Set {
        buffer: BufferId,
        value: u64,
    },
    Complete {
        identity: u64,
        reads: Vec<(BufferId, u64)>,
        writes: Vec<(BufferId, u64)>,
        blocks: Range<u64>,
        total: u64,
    },
    Kill {
        identity: u64,
        reads: Vec<(BufferId, u64)>,
        writes: Vec<(BufferId, u64)>,
        blocks: Range<u64>,
        total: u64,
    },
    Corrupt {
        writes: Vec<BufferId>,
    },
    /// A caller's note (a restore, a launch).
    Note(String),
}

/// Trace entries kept at most (the oldest half is dropped past it).
const TRACE_MAX: usize = 1 << 21;

/// One buffer whose final value differs between two runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub buffer: BufferId,
    pub got: u64,
    pub expected: u64,
}

impl ValueTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of a buffer never written: a hash of its id.
    pub fn initial(b: BufferId) -> u64 {
        fnv1a(&b.0.to_le_bytes(), 0x1417)
    }

    /// Current version hash of a buffer.
    pub fn get(&self, b: BufferId) -> u64 {
        self.values
            .get(&b)
            .copied()
            .unwrap_or_else(|| Self::initial(b))
    }

    /// Sets a buffer's value (a host-to-device copy of new input data).
    pub fn set(&mut self, b: BufferId, v: u64) {
        self.partial.remove(&b);
        self.values.insert(b, v);
        self.record(|| TraceOp::Set {
            buffer: b,
            value: v,
        });
    }

    /// Starts recording every operation ([`ValueTracker::trace`]).
    pub fn trace_on(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// The operations recorded since tracing was turned on (the most
    /// recent ones, at most about two million).
    pub fn trace(&self) -> &[TraceOp] {
        self.trace.as_deref().unwrap_or(&[])
    }

    /// Records a caller's note in the trace (when tracing is on).
    pub fn note(&mut self, f: impl FnOnce() -> String) {
        self.record(|| TraceOp::Note(f()));
    }

    fn record(&mut self, f: impl FnOnce() -> TraceOp) {
        if let Some(t) = &mut self.trace {
            if t.len() >= TRACE_MAX {
                t.drain(..TRACE_MAX / 2);
            }
            t.push(f());
        }
    }

    fn versions(&self, bs: &[BufferId]) -> Vec<(BufferId, u64)> {
        bs.iter().map(|&b| (b, self.get(b))).collect()
    }

    /// The output hash a kernel of `identity` produces from `reads`' current
    /// values.
    pub fn output_hash(&self, identity: u64, reads: &[BufferId]) -> u64 {
        let mut h = fnv1a(&identity.to_le_bytes(), 0);
        for &r in reads {
            h = fnv1a(&self.get(r).to_le_bytes(), h);
        }
        h
    }

    /// Records a completed launch that ran blocks `blocks` of a kernel of
    /// `total_blocks` blocks.
    pub fn complete(
        &mut self,
        identity: u64,
        reads: &[BufferId],
        writes: &[BufferId],
        blocks: Range<u64>,
        total_blocks: u64,
    ) {
        let h = self.output_hash(identity, reads);
        let before = self.trace.is_some().then(|| self.versions(reads));
        let whole = blocks.start == 0 && blocks.end >= total_blocks;
        for &w in writes {
            if whole {
                self.partial.remove(&w);
                self.values.insert(w, h);
                continue;
            }
            let mut covered = match self.partial.remove(&w) {
                Some((ph, c)) if ph == h => c,
                // The buffer already holds the full output of the same
                // kernel on the same inputs (this computation's, or a
                // previous request's): every block's part holds what
                // these blocks write again (REEF §4.4: re-executing an
                // idempotent kernel gives the same result), so all of it
                // counts. A later killed range then un-writes only its
                // own part (see `kill`). Until the branch `corrupt` only
                // the re-run blocks were counted, so a range killed after
                // them left the rest of the buffer stale although it held
                // the output (vgg kernel 65 under reef-max beside a
                // periodic densenet, `bench/tests/reef_max.rs`).
                _ if self.get(w) == h => Coverage::full(total_blocks),
                _ => Coverage::default(),
            };
            covered.add(&blocks, total_blocks);
            if covered.is_full() {
                self.values.insert(w, h);
            } else {
                self.values.insert(w, h ^ PARTIAL ^ covered.digest());
                self.partial.insert(w, (h, covered));
            }
        }
        if let Some(reads) = before {
            let writes = self.versions(writes);
            let blocks = blocks.clone();
            self.record(|| TraceOp::Complete {
                identity,
                reads,
                writes,
                blocks,
                total: total_blocks,
            });
        }
        self.blocks_ran(identity, writes, blocks, total_blocks);
    }

    /// Real values only: blocks `blocks` of a kernel of `total_blocks`
    /// blocks ran to completion, so their part of `writes` holds the
    /// computed bytes (the rest keeps its stale bytes). [`Self::complete`]
    /// calls it; an engine that runs a killed launch's blocks partly calls
    /// it for the blocks that completed before the kill ([`Self::kill`]
    /// itself writes no bytes: the killed blocks' part stays stale).
    /// Queued to a worker thread: it costs the simulator no time.
    pub fn blocks_ran(
        &mut self,
        identity: u64,
        writes: &[BufferId],
        blocks: Range<u64>,
        total_blocks: u64,
    ) {
        if let Some(r) = &self.real {
            r.ran(identity, writes, blocks, total_blocks);
        }
    }

    /// Registers a compiled model for real values: `identities[k]` is the
    /// shape identity of kernel `k` (`KernelShape::for_model`).
    pub fn register_program(
        &mut self,
        identities: &[u64],
        program: std::sync::Arc<reef_cpu_kernels::Program>,
    ) {
        self.real
            .get_or_insert_with(|| Box::new(RealValues::new()))
            .register(identities, program);
    }

    /// Registers `model` for real values when its directory has a CPU build
    /// (reef-compile's `cpu.so`); `Ok(false)` for a schedule without code
    /// (the measured REEF/MI50 models), which keeps version tracking only.
    pub fn load_compiled(
        &mut self,
        model: &reef_model::Model,
        shapes: &[std::sync::Arc<crate::KernelShape>],
    ) -> Result<bool, reef_cpu_kernels::Error> {
        if model.compiled.is_none() || !reef_cpu_kernels::Program::file_has_code(&model.path) {
            return Ok(false);
        }
        let program = reef_cpu_kernels::Program::load_file(&model.path)?;
        let ids: Vec<u64> = shapes.iter().map(|s| s.identity).collect();
        self.register_program(&ids, program);
        Ok(true)
    }

    /// Writes a buffer's bytes (a host-to-device copy of an input); real
    /// values only, a no-op until a compiled model is registered.
    pub fn set_bytes(&mut self, b: BufferId, bytes: Vec<u8>) {
        if let Some(r) = &self.real {
            r.set(b, bytes);
        }
    }

    /// A buffer's bytes, after every completion so far was computed
    /// (`None`: no compiled model, or the buffer was never touched).
    pub fn bytes(&self, b: BufferId) -> Option<Vec<u8>> {
        self.real.as_ref().and_then(|r| r.bytes(b))
    }

    /// [`ValueTracker::bytes`] without waiting: the bytes arrive on the
    /// receiver once the completions before were computed (`None`: no
    /// compiled model is registered).
    pub fn bytes_later(&self, b: BufferId) -> Option<std::sync::mpsc::Receiver<Option<Vec<u8>>>> {
        self.real.as_ref().map(|r| r.bytes_later(b))
    }

    /// The real-values state, when a compiled model is registered.
    pub fn real(&self) -> Option<&RealValues> {
        self.real.as_deref()
    }

    /// Records a killed launch of blocks `blocks` of a kernel of
    /// `total_blocks` blocks. A block writes only its own part of the
    /// outputs (what lets REEF §5 spread a kernel's blocks over padded
    /// launches), so a killed block range leaves intact the blocks other
    /// launches of the same kernel on the same inputs completed (the
    /// buffer keeps that partial value, less the killed range's part);
    /// otherwise (a whole launch, or no such partial value) the outputs
    /// are corrupted.
    pub fn kill(
        &mut self,
        identity: u64,
        reads: &[BufferId],
        writes: &[BufferId],
        blocks: Range<u64>,
        total_blocks: u64,
        salt: u64,
    ) {
        let before = self.trace.is_some().then(|| self.versions(reads));
        self.kill_inner(identity, reads, writes, blocks.clone(), total_blocks, salt);
        if let Some(reads) = before {
            let writes = self.versions(writes);
            self.record(|| TraceOp::Kill {
                identity,
                reads,
                writes,
                blocks,
                total: total_blocks,
            });
        }
    }

    fn kill_inner(
        &mut self,
        identity: u64,
        reads: &[BufferId],
        writes: &[BufferId],
        blocks: Range<u64>,
        total_blocks: u64,
        salt: u64,
    ) {
        if !(blocks.start == 0 && blocks.end >= total_blocks) {
            let h = self.output_hash(identity, reads);
            // A buffer holds blocks of this computation: a partial value of
            // it, or its full output (every block of it completed, in one
            // launch or spread over several, or a previous identical
            // computation's).
            let holds = |t: &Self, w: &BufferId| match t.partial.get(w) {
                Some((ph, _)) => *ph == h,
                None => t.get(*w) == h,
            };
            if writes.iter().all(|w| holds(self, w)) {
                // The killed blocks' part of the outputs is corrupted: what
                // stays valid is the blocks other launches completed (the
                // partial value, also where the buffer held the full output
                // of this or a previous identical computation: a killed
                // range after the kernel's blocks all completed un-writes
                // only its own part, so running that range again completes
                // the kernel; REEF §5 spreads a kernel's blocks over
                // launches because each block writes only its own part,
                // §4.4 re-executes what the kill interrupted).
                self.corruptions += 1;
                for &w in writes {
                    let c = &mut self
                        .partial
                        .entry(w)
                        .or_insert_with(|| (h, Coverage::full(total_blocks)))
                        .1;
                    c.remove(&blocks, total_blocks);
                    let v = h ^ PARTIAL ^ c.digest();
                    self.values.insert(w, v);
                }
                return;
            }
        }
        self.corrupt_inner(writes, salt);
    }

    /// Records a killed launch: its outputs are corrupted.
    pub fn corrupt(&mut self, writes: &[BufferId], salt: u64) {
        self.corrupt_inner(writes, salt);
        self.record(|| TraceOp::Corrupt {
            writes: writes.to_vec(),
        });
    }

    fn corrupt_inner(&mut self, writes: &[BufferId], salt: u64) {
        self.corruptions += 1;
        for &w in writes {
            self.partial.remove(&w);
            let v = fnv1a(
                &[salt.to_le_bytes(), self.corruptions.to_le_bytes()].concat(),
                CORRUPT,
            );
            self.values.insert(w, v);
        }
    }

    /// Number of kills that corrupted outputs so far.
    pub fn corruptions(&self) -> u64 {
        self.corruptions
    }

    /// Buffers among `buffers` whose value differs from `expected`'s.
    pub fn diff(&self, expected: &ValueTracker, buffers: &[BufferId]) -> Vec<Mismatch> {
        buffers
            .iter()
            .filter_map(|&b| {
                let (got, exp) = (self.get(b), expected.get(b));
                (got != exp).then_some(Mismatch {
                    buffer: b,
                    got,
                    expected: exp,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_follow_inputs_and_kills_corrupt() {
        let (a, b, c) = (BufferId(1), BufferId(2), BufferId(3));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..4, 4);
        clean.complete(8, &[b], &[c], 0..4, 4);

        // Killed then re-run: equal to the clean run.
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..4, 4);
        t.corrupt(&[c], 1);
        assert_eq!(t.diff(&clean, &[c]).len(), 1);
        t.complete(8, &[b], &[c], 0..4, 4);
        assert!(t.diff(&clean, &[a, b, c]).is_empty());

        // Run in a different order: differs.
        let mut w = ValueTracker::new();
        w.complete(8, &[b], &[c], 0..4, 4);
        w.complete(7, &[a], &[b], 0..4, 4);
        assert_eq!(w.diff(&clean, &[b, c]).len(), 1);

        // Spread over block ranges: complete only when all blocks ran.
        let mut r = ValueTracker::new();
        r.complete(7, &[a], &[b], 0..1, 4);
        assert_ne!(r.get(b), clean.get(b));
        r.complete(7, &[a], &[b], 1..4, 4);
        assert_eq!(r.get(b), clean.get(b));
    }

    #[test]
    fn the_trace_records_the_versions_each_operation_read_and_wrote() {
        let (a, b) = (BufferId(1), BufferId(2));
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..4, 4);
        assert!(t.trace().is_empty(), "off until asked for");
        t.trace_on();
        let (va, vb) = (t.get(a), t.get(b));
        t.note(|| "restore".into());
        t.kill(8, &[b], &[a], 0..4, 4, 1);
        t.set(b, 5);
        let after_kill = t.get(a);
        assert_eq!(
            t.trace(),
            &[
                TraceOp::Note("restore".into()),
                TraceOp::Kill {
                    identity: 8,
                    reads: vec![(b, vb)],
                    writes: vec![(a, after_kill)],
                    blocks: 0..4,
                    total: 4,
                },
                TraceOp::Set {
                    buffer: b,
                    value: 5
                },
            ]
        );
        assert_ne!(after_kill, va);
        t.complete(7, &[a], &[b], 0..2, 4);
        let TraceOp::Complete { reads, writes, .. } = t.trace().last().unwrap() else {
            panic!("{:?}", t.trace());
        };
        assert_eq!(reads, &[(a, after_kill)]);
        assert_eq!(writes, &[(b, t.get(b))]);
    }

    #[test]
    fn a_killed_block_range_keeps_the_blocks_other_ranges_completed() {
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..4, 4);
        // Blocks 0..1 completed, the launch of blocks 1..4 killed, then
        // run again: the output is the clean one.
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..1, 4);
        t.kill(7, &[a], &[b], 1..4, 4, 9);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 1..4, 4);
        assert_eq!(t.get(b), clean.get(b));
        assert_eq!(t.corruptions(), 1);
        // A killed whole launch corrupts: the earlier range does not count.
        let mut w = ValueTracker::new();
        w.complete(7, &[a], &[b], 0..1, 4);
        w.kill(7, &[a], &[b], 0..4, 4, 9);
        w.complete(7, &[a], &[b], 1..4, 4);
        assert_ne!(w.get(b), clean.get(b));
        // A killed range of a kernel with no partial value corrupts.
        let mut n = ValueTracker::new();
        n.kill(7, &[a], &[b], 1..4, 4, 9);
        n.complete(7, &[a], &[b], 0..1, 4);
        assert_ne!(n.get(b), clean.get(b));
        // Blocks re-run over the full output of the same inputs leave it.
        let mut f = ValueTracker::new();
        f.complete(7, &[a], &[b], 0..4, 4);
        f.complete(7, &[a], &[b], 0..1, 4);
        assert_eq!(f.get(b), clean.get(b));
    }

    #[test]
    fn a_killed_rest_over_a_previous_full_output_keeps_only_the_completed_blocks() {
        // DISB E under reef-dkp-mv: a BE request's kernel (same inputs as the
        // previous request, whose full output is still in the buffer) had
        // blocks 0..1 padded, its rest 1..4 killed, then padded on 1..4. The
        // tracker did not count the first range (it left the full output
        // untouched) and so corrupted the buffer at the kill, and the
        // re-run rest never covered the kernel.
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..4, 4);
        let mut t = clean.clone();
        t.complete(7, &[a], &[b], 0..1, 4);
        assert_eq!(t.get(b), clean.get(b));
        t.kill(7, &[a], &[b], 1..4, 4, 9);
        // The killed blocks' part is corrupted until they run again.
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 1..3, 4);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 3..4, 4);
        assert_eq!(t.get(b), clean.get(b));
        // The rest completing instead ends the computation too.
        let mut u = clean.clone();
        u.complete(7, &[a], &[b], 0..1, 4);
        u.complete(7, &[a], &[b], 1..4, 4);
        assert_eq!(u.get(b), clean.get(b));
        u.kill(7, &[a], &[b], 1..4, 4, 9);
        assert_ne!(u.get(b), clean.get(b));
        // The killed range runs again: the kernel is complete.
        u.complete(7, &[a], &[b], 1..4, 4);
        assert_eq!(u.get(b), clean.get(b));
    }

    #[test]
    fn a_range_killed_after_the_kernel_completed_leaves_the_other_blocks_valid() {
        // vgg kernel 56 (128 blocks in its version 3) under reef-dkp-mv
        // beside a periodic densenet (`bench/tests/reef_max.rs`): padding
        // completed blocks 0..80, the normal-mode rest 80..128 completed
        // while the preempt flag was set (the scheduler cannot tell it
        // from a partial run, REEF §4.3, and runs the rest again), the
        // rest's relaunch was killed, and padding completed 80..128. Every
        // block's part holds the kernel's output. The tracker had dropped
        // the coverage once it was full and corrupted the whole buffer at
        // the kill, so the answer was counted stale.
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..16, 16);
        for first in [0..80, 0..128] {
            let mut t = ValueTracker::new();
            t.complete(7, &[a], &[b], first.clone(), 128);
            if first.end < 128 {
                t.complete(7, &[a], &[b], 80..128, 128);
            }
            assert_eq!(t.get(b), clean.get(b));
            t.kill(7, &[a], &[b], 80..128, 128, 9);
            assert_ne!(t.get(b), clean.get(b));
            t.complete(7, &[a], &[b], 80..100, 128);
            assert_ne!(t.get(b), clean.get(b));
            // A finer version's blocks cover the same tiles.
            t.complete(7, &[a], &[b], 200..256, 256);
            assert_eq!(t.get(b), clean.get(b));
        }
        // reef-max, vgg kernel 65: blocks 20..40 padded again after the
        // rest 20..128 completed, then a rest 40..128 killed: blocks 0..40
        // still hold the output (only 20..40 were counted, so the buffer
        // never became complete again).
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..20, 128);
        t.complete(7, &[a], &[b], 20..128, 128);
        t.complete(7, &[a], &[b], 20..40, 128);
        assert_eq!(t.get(b), clean.get(b));
        t.kill(7, &[a], &[b], 40..128, 128, 9);
        t.complete(7, &[a], &[b], 40..60, 128);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 60..128, 128);
        assert_eq!(t.get(b), clean.get(b));
        // A killed whole launch still corrupts everything, and a killed
        // range over another computation's output too.
        let mut t = clean.clone();
        t.kill(7, &[a], &[b], 0..16, 16, 9);
        t.complete(7, &[a], &[b], 8..16, 16);
        assert_ne!(t.get(b), clean.get(b));
        let mut t = clean.clone();
        t.kill(8, &[a], &[b], 8..16, 16, 9);
        t.complete(8, &[a], &[b], 8..16, 16);
        assert_ne!(t.get(b), clean.get(b));
    }

    #[test]
    fn blocks_of_a_coarse_version_then_the_rest_in_a_finer_one_complete_the_kernel() {
        // A kernel run as blocks 0..3 of a 16-block version, then in a
        // version of 64 blocks (4 sub-tiles per block) from block 12 on:
        // the same output tiles, so the kernel is complete. Counting blocks
        // in each launch's own units (3 + 52 of 64) never completed it.
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..16, 16);
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..3, 16);
        t.complete(7, &[a], &[b], 12..40, 64);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 40..64, 64);
        assert_eq!(t.get(b), clean.get(b));
        // Overlapping ranges of the two versions count once: 0..3 and
        // 12..13 of the finer one and then the coarse 13..16 leave the
        // finer 13..52 to run.
        let mut g = ValueTracker::new();
        g.complete(7, &[a], &[b], 0..3, 16);
        g.complete(7, &[a], &[b], 12..13, 64);
        g.complete(7, &[a], &[b], 13..16, 16);
        assert_ne!(g.get(b), clean.get(b));
        g.complete(7, &[a], &[b], 13..52, 64);
        assert_eq!(g.get(b), clean.get(b));
    }

    #[test]
    fn a_kill_between_versions_keeps_only_the_completed_prefix() {
        // Blocks 0..3 of 16 completed, then the rest in the 64-block
        // version killed (blocks 12..64): the first three coarse blocks
        // stay valid, so re-running exactly 12..64 finishes the kernel.
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 0..16, 16);
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 0..3, 16);
        t.kill(7, &[a], &[b], 12..64, 64, 9);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 12..64, 64);
        assert_eq!(t.get(b), clean.get(b));
        // A killed range over blocks completed earlier corrupts them: the
        // coarse blocks 0..3 completed, then a finer launch of 8..16
        // (coarse blocks 2..4) killed; re-running only 12..64 leaves
        // 8..12 (coarse block 2) to run again.
        let mut k = ValueTracker::new();
        k.complete(7, &[a], &[b], 0..3, 16);
        k.kill(7, &[a], &[b], 8..16, 64, 9);
        k.complete(7, &[a], &[b], 12..64, 64);
        assert_ne!(k.get(b), clean.get(b));
        k.complete(7, &[a], &[b], 8..12, 64);
        assert_eq!(k.get(b), clean.get(b));
    }
}
