//! A per-kernel summary of its versions for the selection's rule 1 (REEF
//! §5.2: a best-effort block must be shorter than the real-time kernel),
//! kept beside the versions in the padding table ([`super::padded::DkpTable`])
//! so that a task none of whose versions can pass rule 1 is passed over
//! without reading them.
//!
//! The selection ([`super::select::Selector::select`]) skips a version
//! whose one-block time is not below the real-time kernel's time
//! (`k.block_ns(1) >= rt.kernel_ns`) before any other check of it; a task
//! whose every version is skipped so gets no part. The floor is the least
//! one-block time over the versions: when it is not below the real-time
//! kernel's time, every version is skipped by that check, whatever the
//! versions a locked kernel may continue in (a subset of them): the
//! pre-check `floor >= rt.kernel_ns` rejects exactly a subset of the tasks
//! the full walk rejects, and decides nothing else. A floor of 0 is always
//! a valid bound (no pre-check). docs/results-max.md "Decision cost" has
//! what it saves: the first loads of each version's profile and curve are
//! the cache misses of the slowest decisions.

use super::profile::KernelChar;

/// The least one-block time (ns) over `versions`; `u64::MAX` for none
/// (a kernel with no version is never padded).
pub fn first_block_floor(versions: &[KernelChar]) -> u64 {
    versions
        .iter()
        .map(|k| k.block_ns(1))
        .min()
        .unwrap_or(u64::MAX)
}

/// `floors[model][kernel]`: [`first_block_floor`] of each kernel's versions.
#[derive(Debug, Clone, Default)]
pub struct Floors(Vec<Vec<u64>>);

impl Floors {
    /// The floors of `kernels[model][kernel]` = versions.
    pub fn new(kernels: &[Vec<Vec<KernelChar>>]) -> Self {
        Self(
            kernels
                .iter()
                .map(|ks| ks.iter().map(|vs| first_block_floor(vs)).collect())
                .collect(),
        )
    }

    /// The floor of kernel `k` of model `m`; 0 (no pre-check) when the
    /// table has no such kernel.
    pub fn get(&self, m: usize, k: usize) -> u64 {
        self.0.get(m).and_then(|ks| ks.get(k)).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::select::{Candidate, Padding, Selector};
    use super::super::versions;
    use super::*;

    /// splitmix64 (`reef_sim::rng`'s algorithm; this crate does not
    /// depend on the simulator): deterministic random kernels.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn kernel(r: &mut Rng) -> Option<KernelChar> {
        let blocks = 1 + r.below(400) as u32;
        let threads = 64 << r.below(4);
        let lds = [0, 1024, 8192, 32768][r.below(4) as usize];
        let regs = threads * (16 << r.below(4)) as u32;
        let len = 1 + r.below(8) as usize;
        let mut t = 500 + r.below(60_000);
        let curve = (0..len)
            .map(|_| {
                t += r.below(20_000);
                t
            })
            .collect();
        KernelChar::new(&mi50(), blocks, threads, lds, regs, curve)
    }

    /// Property: over random real-time kernels and tasks (single and
    /// multi-version, fresh and locked at random offsets), the selection
    /// with each task's floor gives the same padding as without it, and a
    /// task the pre-check rejects gets no part without it.
    #[test]
    fn the_floor_never_rejects_a_task_the_full_selection_pads() {
        let mut r = Rng(0x5eed_f100);
        let mut rejected = 0;
        let mut padded = 0;
        for chain in [None, Some(2_000)] {
            for waves in [false, true] {
                let s = Selector::new(mi50()).with_waves(waves).with_chain(chain);
                for _ in 0..600 {
                    let Some(rt) = kernel(&mut r) else { continue };
                    let mut tasks: Vec<Vec<KernelChar>> = Vec::new();
                    for _ in 0..1 + r.below(4) {
                        let Some(k) = kernel(&mut r) else { continue };
                        tasks.push(if r.below(2) == 0 {
                            vec![k]
                        } else {
                            versions::versions(&mi50(), &k, 1_000)
                        });
                    }
                    if tasks.is_empty() {
                        continue;
                    }
                    let following: Vec<Vec<KernelChar>> = tasks.iter().take(1).cloned().collect();
                    let cands = |floor: bool| -> Vec<Candidate<'_>> {
                        tasks
                            .iter()
                            .enumerate()
                            .map(|(i, vs)| {
                                let locked = (i % 2 == 1).then_some(0u16);
                                Candidate {
                                    versions: vs,
                                    locked,
                                    next_block: if locked.is_some() {
                                        (i as u32 * 7) % vs[0].blocks
                                    } else {
                                        0
                                    },
                                    following: if i == 0 { &following } else { &[] },
                                    rule1_floor: if floor { first_block_floor(vs) } else { 0 },
                                }
                            })
                            .collect()
                    };
                    let (with, without) = (cands(true), cands(false));
                    let start = r.below(with.len() as u64) as usize;
                    let (mut a, mut b) = (Padding::default(), Padding::default());
                    let pa = s.select(&rt, &with, start, &mut a);
                    let pb = s.select(&rt, &without, start, &mut b);
                    assert_eq!((pa, &a), (pb, &b));
                    padded += pa as u32;
                    for (i, c) in with.iter().enumerate() {
                        if c.rule1_floor >= rt.kernel_ns {
                            rejected += 1;
                            // Not padded in the main walk (a part of its
                            // own kernel on the CUs left over).
                            assert!(!b.parts.iter().any(|p| p.task == i
                                && p.ahead == 0
                                && p.after.is_none()
                                && p.cus.start >= b.rt_cus));
                        }
                    }
                }
            }
        }
        // The draw exercises both outcomes.
        assert!(rejected > 100 && padded > 100, "{rejected} {padded}");
    }

    #[test]
    fn floors_follow_the_table_shape() {
        let k = |t| KernelChar::new(&mi50(), 10, 64, 0, 64 * 32, vec![t]).unwrap();
        let f = Floors::new(&[vec![vec![k(5_000), k(3_000)], vec![]]]);
        assert_eq!(f.get(0, 0), 3_000);
        assert_eq!(f.get(0, 1), u64::MAX);
        assert_eq!(f.get(1, 0), 0);
    }
}
