//! Value tracking (DESIGN.md "The simulator", value tracking): every buffer
//! carries a version hash; a kernel's outputs become a hash of its identity
//! and its inputs; a killed kernel leaves its outputs corrupted. Restores
//! (REEF §4.4, reset-based preemption with idempotent re-execution, Fig. 9)
//! are correct exactly when the final outputs equal an unpreempted run.
//!
//! A kernel spread over several launches (a block range each, as dynamic
//! kernel padding does, REEF §5 Fig. 12) produces its full output only once
//! its ranges cover every block; until then the buffer holds a partial value
//! that equals no complete one.

use crate::shape::fnv1a;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// Version hashes of buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValueTracker {
    values: Map<u64>,
    /// Partial writes of a kernel spread over block ranges: (full hash,
    /// blocks covered).
    partial: Map<(u64, u64)>,
    corruptions: u64,
}

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

    /// Records a completed launch that ran blocks `range_len` of a kernel of
    /// `total_blocks` blocks.
    pub fn complete(
        &mut self,
        identity: u64,
        reads: &[BufferId],
        writes: &[BufferId],
        range_len: u64,
        total_blocks: u64,
    ) {
        let h = self.output_hash(identity, reads);
        for &w in writes {
            if range_len >= total_blocks {
                self.partial.remove(&w);
                self.values.insert(w, h);
                continue;
            }
            let covered = match self.partial.get(&w) {
                Some(&(ph, c)) if ph == h => c + range_len,
                _ => range_len,
            };
            if covered >= total_blocks {
                self.partial.remove(&w);
                self.values.insert(w, h);
            } else if self.get(w) == h {
                // Blocks of a kernel whose full output from the same inputs
                // is already there (a previous request's) write the same
                // values again (REEF §4.4: re-executing an idempotent kernel
                // gives the same result): the buffer keeps its full value,
                // but the blocks this computation completed are still
                // counted, so that a later killed range of it (the rest
                // launch, whose blocks the kill corrupts) leaves the partial
                // value of exactly those blocks (see `kill`).
                self.partial.insert(w, (h, covered));
            } else {
                self.partial.insert(w, (h, covered));
                self.values.insert(w, h ^ PARTIAL ^ covered);
            }
        }
    }

    /// Records a killed launch of blocks `range_len` of a kernel of
    /// `total_blocks` blocks. A block writes only its own part of the
    /// outputs (what lets REEF §5 spread a kernel's blocks over padded
    /// launches), so a killed block range leaves intact the blocks other
    /// launches of the same kernel on the same inputs completed before it
    /// (the buffer keeps that partial value); otherwise (a whole launch, or
    /// no such partial value) the outputs are corrupted.
    pub fn kill(
        &mut self,
        identity: u64,
        reads: &[BufferId],
        writes: &[BufferId],
        range_len: u64,
        total_blocks: u64,
        salt: u64,
    ) {
        if range_len < total_blocks {
            let h = self.output_hash(identity, reads);
            if writes
                .iter()
                .all(|w| self.partial.get(w).is_some_and(|&(ph, _)| ph == h))
            {
                // The killed blocks' part of the outputs is corrupted: what
                // stays valid is the blocks other launches completed (the
                // partial value, also where the buffer held the full output
                // of a previous identical computation).
                self.corruptions += 1;
                for &w in writes {
                    let c = self.partial[&w].1;
                    self.values.insert(w, h ^ PARTIAL ^ c);
                }
                return;
            }
        }
        self.corrupt(writes, salt);
    }

    /// Records a killed launch: its outputs are corrupted.
    pub fn corrupt(&mut self, writes: &[BufferId], salt: u64) {
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
        clean.complete(7, &[a], &[b], 4, 4);
        clean.complete(8, &[b], &[c], 4, 4);

        // Killed then re-run: equal to the clean run.
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 4, 4);
        t.corrupt(&[c], 1);
        assert_eq!(t.diff(&clean, &[c]).len(), 1);
        t.complete(8, &[b], &[c], 4, 4);
        assert!(t.diff(&clean, &[a, b, c]).is_empty());

        // Run in a different order: differs.
        let mut w = ValueTracker::new();
        w.complete(8, &[b], &[c], 4, 4);
        w.complete(7, &[a], &[b], 4, 4);
        assert_eq!(w.diff(&clean, &[b, c]).len(), 1);

        // Spread over block ranges: complete only when all blocks ran.
        let mut r = ValueTracker::new();
        r.complete(7, &[a], &[b], 1, 4);
        assert_ne!(r.get(b), clean.get(b));
        r.complete(7, &[a], &[b], 3, 4);
        assert_eq!(r.get(b), clean.get(b));
    }

    #[test]
    fn a_killed_block_range_keeps_the_blocks_other_ranges_completed() {
        let (a, b) = (BufferId(1), BufferId(2));
        let mut clean = ValueTracker::new();
        clean.complete(7, &[a], &[b], 4, 4);
        // Blocks 0..1 completed, the launch of blocks 1..4 killed, then
        // run again: the output is the clean one.
        let mut t = ValueTracker::new();
        t.complete(7, &[a], &[b], 1, 4);
        t.kill(7, &[a], &[b], 3, 4, 9);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 3, 4);
        assert_eq!(t.get(b), clean.get(b));
        assert_eq!(t.corruptions(), 1);
        // A killed whole launch corrupts: the earlier range does not count.
        let mut w = ValueTracker::new();
        w.complete(7, &[a], &[b], 1, 4);
        w.kill(7, &[a], &[b], 4, 4, 9);
        w.complete(7, &[a], &[b], 3, 4);
        assert_ne!(w.get(b), clean.get(b));
        // A killed range of a kernel with no partial value corrupts.
        let mut n = ValueTracker::new();
        n.kill(7, &[a], &[b], 3, 4, 9);
        n.complete(7, &[a], &[b], 1, 4);
        assert_ne!(n.get(b), clean.get(b));
        // Blocks re-run over the full output of the same inputs leave it.
        let mut f = ValueTracker::new();
        f.complete(7, &[a], &[b], 4, 4);
        f.complete(7, &[a], &[b], 1, 4);
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
        clean.complete(7, &[a], &[b], 4, 4);
        let mut t = clean.clone();
        t.complete(7, &[a], &[b], 1, 4);
        assert_eq!(t.get(b), clean.get(b));
        t.kill(7, &[a], &[b], 3, 4, 9);
        // The killed blocks' part is corrupted until they run again.
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 2, 4);
        assert_ne!(t.get(b), clean.get(b));
        t.complete(7, &[a], &[b], 1, 4);
        assert_eq!(t.get(b), clean.get(b));
        // The rest completing instead ends the computation too.
        let mut u = clean.clone();
        u.complete(7, &[a], &[b], 1, 4);
        u.complete(7, &[a], &[b], 3, 4);
        assert_eq!(u.get(b), clean.get(b));
        u.kill(7, &[a], &[b], 3, 4, 9);
        assert_ne!(u.get(b), clean.get(b));
    }
}
