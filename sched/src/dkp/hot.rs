//! Helpers that keep the padding scheduler's decision path free of
//! hashing and heap allocation (issue 28: "the decision cost per kernel
//! stays ≤ 0.2 µs p99"). Nothing here decides anything: the scheduler's
//! decisions are the same with the standard library's equivalents.
//!
//! - [`IdHash`]: a multiplicative hash for the request-id maps looked up
//!   once or twice per decision. The ids are the scheduler's own counters
//!   (no adversary chooses them), so SipHash's resistance to chosen keys
//!   buys nothing here, and its ~20 ns per lookup is a tenth of the budget.
//!   The maps are never iterated, so no order depends on the hash.
//! - [`recycle`]: reuses a buffer of borrowed [`super::select::Candidate`]s
//!   across selections (a `Vec` cannot hold borrows of the table past the
//!   selection, but its allocation can be kept empty).

use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for small integer keys (Fx-style: rotate, xor, multiply by an
/// odd constant; the high bits, which `HashMap`'s groups use, mix every
/// input bit).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(K);
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

/// [`IdHasher`] for `HashMap`.
pub type IdHash = BuildHasherDefault<IdHasher>;

/// The allocation of `v`, emptied, as a `Vec` of another lifetime of the
/// same type (`T` and `U` of one layout). The standard library collects a
/// mapped `into_iter` of a `Vec` in place when the layouts agree, so no
/// allocation happens; the map is never called, the vector being empty.
pub fn recycle<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter()
        .map(|_| unreachable!("emptied above"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn recycle_keeps_the_allocation() {
        let mut v: Vec<&u32> = Vec::with_capacity(16);
        let x = 7;
        v.push(&x);
        let p = v.as_ptr() as usize;
        let w: Vec<&u32> = recycle(v);
        assert!(w.is_empty());
        assert_eq!(w.capacity(), 16);
        assert_eq!(w.as_ptr() as usize, p);
    }

    #[test]
    fn id_hash_maps_hold_what_std_maps_hold() {
        let mut a: HashMap<u64, u32, IdHash> = HashMap::default();
        let mut b: HashMap<u64, u32> = HashMap::new();
        for i in 0..10_000u64 {
            let k = i.wrapping_mul(2_654_435_761) % 7919 + (i << 20);
            a.insert(k, i as u32);
            b.insert(k, i as u32);
            if i % 3 == 0 {
                a.remove(&(k / 2));
                b.remove(&(k / 2));
            }
        }
        assert_eq!(a.len(), b.len());
        for (k, v) in &b {
            assert_eq!(a.get(k), Some(v));
        }
    }
}
