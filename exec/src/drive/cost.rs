//! The scheduler's own time per decision, measured inside a run (issue 28:
//! "the decision cost per kernel stays ≤ 0.2 µs p99, side by side with
//! `reef`'s"; REEF §6.5 reports its kernel selection at 0.4–1.2 µs).
//!
//! A decision is one [`super::Driver::apply`]: the scheduler's handling of
//! the events since the last one (`RunSched::handle`) and every
//! `RunSched::poll` that drains the actions they produced (padding's
//! kernel selection happens there), summed. The device's work on those
//! actions (the simulator's launches) is not in it. Each call is timed
//! with two `Instant::now()` reads; [`timer_ns`] measures what one pair
//! costs on the machine, printed beside the figures, since on this
//! machine it is a sizeable part of a ~50 ns decision.

use std::time::Instant;

/// Nanoseconds below which samples are counted exactly.
const EXACT: usize = 8192;

/// A histogram of decision times, exact to the nanosecond below 8 µs.
#[derive(Debug, Clone, Default)]
pub struct DecisionCost {
    counts: Vec<u64>,
    over: Vec<u64>,
    n: u64,
    /// The decision being summed.
    pub(super) acc: u64,
}

impl DecisionCost {
    pub fn new() -> Self {
        Self {
            counts: vec![0; EXACT],
            ..Self::default()
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.n += 1;
        match self.counts.get_mut(ns as usize) {
            Some(c) => *c += 1,
            None => self.over.push(ns),
        }
    }

    /// Decisions recorded.
    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The `q` quantile (0..=1), ns; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (ns, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(ns as u64);
            }
        }
        let mut over = self.over.clone();
        over.sort_unstable();
        over.get((rank - seen - 1) as usize).copied()
    }

    pub fn mean(&self) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let exact: u128 = self
            .counts
            .iter()
            .enumerate()
            .map(|(ns, &c)| ns as u128 * c as u128)
            .sum();
        let over: u128 = self.over.iter().map(|&x| x as u128).sum();
        Some((exact + over) as f64 / self.n as f64)
    }
}

/// The median time of one timed call's two `Instant::now()` reads with
/// nothing between them, ns (over 10 000 pairs).
pub fn timer_ns() -> u64 {
    let mut v: Vec<u64> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            let e = t.elapsed();
            e.as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_sample() {
        let mut c = DecisionCost::new();
        assert_eq!(c.quantile(0.5), None);
        for ns in 1..=100 {
            c.record(ns);
        }
        c.record(20_000);
        assert_eq!(c.len(), 101);
        assert_eq!(c.quantile(0.5), Some(51));
        assert_eq!(c.quantile(0.99), Some(100));
        assert_eq!(c.quantile(1.0), Some(20_000));
        assert_eq!(c.quantile(0.0), Some(1));
        let m = c.mean().unwrap();
        assert!((m - (5050.0 + 20_000.0) / 101.0).abs() < 1e-9, "{m}");
    }
}
