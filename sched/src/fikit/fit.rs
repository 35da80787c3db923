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

/// A waiting kernel request: its predicted duration (SK) and what the
/// caller needs to launch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<T> {
    pub predicted_ns: u64,
    pub item: T,
}

/// The best fit for a gap of `idle_ns` among `queues` (index = priority
/// level, at most [`PRIORITY_LEVELS`]): `(level, index in that queue)`, or
/// `None` when no request fits. Does not remove it.
pub fn best_prio_fit<T>(queues: &[Vec<Candidate<T>>], idle_ns: u64) -> Option<(usize, usize)> {
    for (p, q) in queues.iter().enumerate().take(PRIORITY_LEVELS as usize) {
        let mut best: Option<(u64, usize)> = None;
        for (i, c) in q.iter().enumerate() {
            let fits = c.predicted_ns < idle_ns;
            let longer = best.is_none_or(|(t, _)| t < c.predicted_ns);
            if fits && longer {
                best = Some((c.predicted_ns, i));
            }
        }
        if let Some((_, i)) = best {
            return Some((p, i));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(levels: &[&[u64]]) -> Vec<Vec<Candidate<u32>>> {
        let mut id = 0;
        levels
            .iter()
            .map(|l| {
                l.iter()
                    .map(|&t| {
                        id += 1;
                        Candidate {
                            predicted_ns: t,
                            item: id,
                        }
                    })
                    .collect()
            })
            .collect()
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
        assert_eq!(best_prio_fit::<u32>(&vec![Vec::new(); 10], 1_000), None);
        let qs = q(&[&[500], &[], &[], &[], &[], &[], &[], &[], &[], &[900]]);
        assert_eq!(best_prio_fit(&qs, 400), None);
        assert_eq!(best_prio_fit(&qs, 0), None);
        // The lowest level is reached when nothing above fits.
        assert_eq!(best_prio_fit(&qs, 901), Some((0, 0)));
        let qs = q(&[&[950], &[], &[], &[], &[], &[], &[], &[], &[], &[900]]);
        assert_eq!(best_prio_fit(&qs, 901), Some((9, 0)));
    }
}
