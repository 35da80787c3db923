//! A set of compute units (up to 256), used for CU masks (REEF §5 dynamic
//! kernel padding, Fig. 12, reserves CUs for the real-time kernel) and for
//! groups of co-resident blocks in the engine.

/// Bitset of compute-unit indices.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CuSet([u64; 4]);

impl std::fmt::Debug for CuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl CuSet {
    /// Largest number of CUs a set can name.
    pub const CAPACITY: usize = 256;

    /// The empty set.
    pub const fn empty() -> Self {
        CuSet([0; 4])
    }

    /// CUs `0..n`.
    pub fn first(n: usize) -> Self {
        Self::range(0, n)
    }

    /// CUs `start..end`.
    pub fn range(start: usize, end: usize) -> Self {
        let end = end.min(Self::CAPACITY);
        let mut s = Self::empty();
        if start >= end {
            return s;
        }
        for (w, word) in s.0.iter_mut().enumerate() {
            let (lo, hi) = (w * 64, w * 64 + 64);
            let (a, b) = (start.max(lo), end.min(hi));
            if a < b {
                let bits = b - a;
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    ((1u64 << bits) - 1) << (a - lo)
                };
                *word |= mask;
            }
        }
        s
    }

    pub fn insert(&mut self, cu: usize) {
        self.0[cu / 64] |= 1 << (cu % 64);
    }

    pub fn remove(&mut self, cu: usize) {
        self.0[cu / 64] &= !(1 << (cu % 64));
    }

    pub fn contains(&self, cu: usize) -> bool {
        cu < Self::CAPACITY && self.0[cu / 64] & (1 << (cu % 64)) != 0
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Set intersection.
    pub fn and(&self, other: &CuSet) -> CuSet {
        CuSet(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    /// Set union.
    pub fn or(&self, other: &CuSet) -> CuSet {
        CuSet(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    /// Set difference.
    pub fn minus(&self, other: &CuSet) -> CuSet {
        CuSet(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// Ascending CU indices.
    pub fn iter(&self) -> Iter {
        Iter {
            words: self.0,
            i: 0,
        }
    }

    /// CU indices from `start` upwards, then from 0 up to `start`
    /// (rotating order).
    pub fn iter_from(&self, start: usize) -> std::iter::Chain<Iter, Iter> {
        let (w, b) = (start / 64, start % 64);
        let (mut hi, mut lo) = (self.0, self.0);
        for i in 0..4 {
            if i < w {
                hi[i] = 0;
            } else if i > w {
                lo[i] = 0;
            } else {
                let below = (1u64 << b) - 1;
                hi[i] &= !below;
                lo[i] &= below;
            }
        }
        Iter {
            words: hi,
            i: w.min(4),
        }
        .chain(Iter { words: lo, i: 0 })
    }

    /// Largest index + 1 (0 when empty).
    pub fn max_end(&self) -> usize {
        self.iter().last().map(|c| c + 1).unwrap_or(0)
    }
}

/// Iterator over a [`CuSet`]'s indices, ascending.
#[derive(Debug, Clone)]
pub struct Iter {
    words: [u64; 4],
    i: usize,
}

impl Iterator for Iter {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.i < 4 {
            let w = self.words[self.i];
            if w != 0 {
                self.words[self.i] = w & (w - 1);
                return Some(self.i * 64 + w.trailing_zeros() as usize);
            }
            self.i += 1;
        }
        None
    }
}

impl FromIterator<usize> for CuSet {
    fn from_iter<T: IntoIterator<Item = usize>>(iter: T) -> Self {
        let mut s = CuSet::empty();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations() {
        assert_eq!(CuSet::range(0, 256).len(), 256);
        assert_eq!(CuSet::range(64, 128).iter().next(), Some(64));
        assert!(CuSet::range(5, 5).is_empty());
        let a = CuSet::range(3, 70);
        assert_eq!(a.len(), 67);
        assert!(a.contains(3) && a.contains(69) && !a.contains(70) && !a.contains(2));
        let b: CuSet = [1, 3, 200].into_iter().collect();
        assert_eq!(a.and(&b).iter().collect::<Vec<_>>(), vec![3]);
        assert_eq!(a.or(&b).len(), 69);
        assert_eq!(b.minus(&a).iter().collect::<Vec<_>>(), vec![1, 200]);
        assert_eq!(b.max_end(), 201);
        let mut c = b;
        c.remove(200);
        assert_eq!(c.max_end(), 4);
        assert!(CuSet::empty().is_empty());
        let d: CuSet = [0, 5, 63, 64, 100, 255].into_iter().collect();
        for start in [0, 1, 5, 6, 63, 64, 65, 100, 200, 255] {
            let want: Vec<usize> = d
                .iter()
                .filter(|&c| c >= start)
                .chain(d.iter().filter(|&c| c < start))
                .collect();
            assert_eq!(d.iter_from(start).collect::<Vec<_>>(), want, "from {start}");
        }
    }
}
