//! BestPrioFit (FIKIT §3.2, Algorithm 2, Fig. 10): the kernel request that
//! fills an idle gap.
//!
//! Priority levels are scanned from Q0 to Q9; within the first level that
//! has any request whose predicted duration fits the remaining gap, the
//! longest such request wins (lines 13–18: `bestKernelTime <
//! predictedKernelTime < idleTime`, so a tie keeps the first one found, the
//! oldest in queue order); lower levels are not looked at once a level had a
//! fit (lines 20–22). One deviation, on purpose: a request predicted at 0 ns
//! counts as a fit and ends the scan at its level (Algorithm 2 tests
//! `bestKernelTime > 0` and would go on to lower levels, which lets a lower
//! priority overtake a zero-length higher-priority kernel).

use super::PRIORITY_LEVELS;

/// The waiting kernel requests by priority level: each request's predicted
/// duration (SK) and what the caller needs to launch it. Durations are kept
/// apart from the items, as 32-bit nanoseconds (saturating at 4.29 s, far
/// above any kernel), so that a level's scan is a vectorised max over a
/// contiguous array: the selection benchmark of `reef-bench fikit` holds it
/// under 1 us for 10 queues of 100 requests.
#[derive(Debug, Clone)]
pub struct PrioQueues<T> {
    pred: Vec<Vec<u32>>,
    items: Vec<Vec<T>>,
}

impl<T> Default for PrioQueues<T> {
    fn default() -> Self {
        Self {
            pred: (0..PRIORITY_LEVELS).map(|_| Vec::new()).collect(),
            items: (0..PRIORITY_LEVELS).map(|_| Vec::new()).collect(),
        }
    }
}

fn ns32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

impl<T> PrioQueues<T> {
    /// Empties every level (keeping the memory).
    pub fn clear(&mut self) {
        self.pred.iter_mut().for_each(Vec::clear);
        self.items.iter_mut().for_each(Vec::clear);
    }
    /// Queues a request at `level` (0..=9; higher levels count as 9).
    pub fn push(&mut self, level: u8, predicted_ns: u64, item: T) {
        let l = usize::from(level.min(PRIORITY_LEVELS - 1));
        self.pred[l].push(ns32(predicted_ns));
        self.items[l].push(item);
    }
    /// The request at `(level, index)`.
    pub fn get(&self, level: usize, i: usize) -> (u64, &T) {
        (u64::from(self.pred[level][i]), &self.items[level][i])
    }
    /// BestPrioFit: see [`best_prio_fit`].
    pub fn best_fit(&self, idle_ns: u64) -> Option<(usize, usize)> {
        let idle = ns32(idle_ns);
        for (p, q) in self.pred.iter().enumerate() {
            // The longest fit as predicted + 1 (0: none): a branch-free
            // max over the level; then the first request of that length
            // (the oldest of a tie).
            let best = q
                .iter()
                .map(|&t| if t < idle { t + 1 } else { 0 })
                .max()
                .unwrap_or(0);
            if best > 0 {
                let i = q.iter().position(|&t| t + 1 == best)?;
                return Some((p, i));
            }
        }
        None
    }
}

/// The best fit for a gap of `idle_ns` among the queued requests:
/// `(level, index in that level)`, or `None` when no request fits. Does not
/// remove it.
pub fn best_prio_fit<T>(queues: &PrioQueues<T>, idle_ns: u64) -> Option<(usize, usize)> {
    queues.best_fit(idle_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(levels: &[&[u64]]) -> PrioQueues<u32> {
        let mut qs = PrioQueues::default();
        let mut id = 0;
        for (p, l) in levels.iter().enumerate() {
            for &t in *l {
                id += 1;
                qs.push(p as u8, t, id);
            }
        }
        qs
    }

    #[test]
    fn highest_priority_first_then_longest_that_fits() {
        // Q0 empty, Q1 has 30 and 80, Q2 has 95 (longer, lower priority).
        let qs = q(&[&[], &[30, 80, 120], &[95]]);
        assert_eq!(best_prio_fit(&qs, 100), Some((1, 1)));
        // A gap that only Q2's fits... none of Q1 fits under 25.
        let qs = q(&[&[], &[30, 80], &[20, 10]]);
        assert_eq!(best_prio_fit(&qs, 25), Some((2, 0)));
    }

    #[test]
    fn a_kernel_must_be_strictly_shorter_than_the_gap() {
        let qs = q(&[&[100, 50]]);
        assert_eq!(best_prio_fit(&qs, 100), Some((0, 1)));
        assert_eq!(best_prio_fit(&qs, 101), Some((0, 0)));
    }

    #[test]
    fn ties_keep_the_oldest_request() {
        let qs = q(&[&[], &[40, 70, 70, 10]]);
        assert_eq!(best_prio_fit(&qs, 100), Some((1, 1)));
    }

    #[test]
    fn no_fit_and_empty_queues_give_none() {
        assert_eq!(best_prio_fit(&PrioQueues::<u32>::default(), 1_000), None);
        let qs = q(&[&[500], &[], &[], &[], &[], &[], &[], &[], &[], &[900]]);
        assert_eq!(best_prio_fit(&qs, 400), None);
        assert_eq!(best_prio_fit(&qs, 0), None);
        // The lowest level is reached when nothing above fits.
        assert_eq!(best_prio_fit(&qs, 901), Some((0, 0)));
        let qs = q(&[&[950], &[], &[], &[], &[], &[], &[], &[], &[], &[900]]);
        assert_eq!(best_prio_fit(&qs, 901), Some((9, 0)));
    }
}
