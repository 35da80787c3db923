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
//! machine it is a sizeable part of a ~50 ns decision; the net figures
//! take it off once per timed call.
//!
//! Padding's selections made ahead of their launch
//! (`reef_sched::dkp::padded::ahead`) run after the actions are performed
//! and are timed apart (`Driver::prepare_cost`), not in any decision.

use std::time::Instant;

/// Nanoseconds below which samples are counted exactly.
const EXACT: usize = 8192;

/// A histogram of nanoseconds, exact below 8 µs.
#[derive(Debug, Clone, Default)]
struct Hist {
    counts: Vec<u64>,
    over: Vec<u64>,
    n: u64,
}

impl Hist {
    fn new() -> Self {
        Self {
            counts: vec![0; EXACT],
            ..Self::default()
        }
    }

    fn record(&mut self, ns: u64) {
        self.n += 1;
        match self.counts.get_mut(ns as usize) {
            Some(c) => *c += 1,
            None => self.over.push(ns),
        }
    }

    fn quantile(&self, q: f64) -> Option<u64> {
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

    fn mean(&self) -> Option<f64> {
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

/// Decision times: as measured (each timed call's clock reads included),
/// and net of the clock: less the mean cost of one pair of reads
/// ([`timer_ns`], measured when the histogram is made) per timed call.
/// A decision of one event and two actions is three timed calls, ~60 ns
/// of clock reads on this machine; the net figure is an estimate, the
/// clock's own cost varying from read to read.
#[derive(Debug, Clone, Default)]
pub struct DecisionCost {
    gross: Hist,
    net: Hist,
    timer: u64,
    /// The decision being summed, and its timed calls.
    pub(super) acc: u64,
    pub(super) calls: u64,
}

impl DecisionCost {
    pub fn new() -> Self {
        Self {
            gross: Hist::new(),
            net: Hist::new(),
            timer: timer_ns(),
            ..Self::default()
        }
    }

    /// One decision of `ns` over `calls` timed calls.
    pub fn record(&mut self, ns: u64, calls: u64) {
        self.gross.record(ns);
        self.net
            .record(ns.saturating_sub(calls.saturating_mul(self.timer)));
    }

    /// The decision summed so far ([`Self::acc`], [`Self::calls`]),
    /// recorded and reset.
    pub(super) fn close(&mut self) {
        let (ns, calls) = (
            std::mem::take(&mut self.acc),
            std::mem::take(&mut self.calls),
        );
        self.record(ns, calls);
    }

    /// Decisions recorded.
    pub fn len(&self) -> u64 {
        self.gross.n
    }

    pub fn is_empty(&self) -> bool {
        self.gross.n == 0
    }

    /// The `q` quantile (0..=1), ns, clock reads included; `None` when
    /// empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        self.gross.quantile(q)
    }

    /// The `q` quantile net of the clock reads (see the type's doc).
    pub fn net_quantile(&self, q: f64) -> Option<u64> {
        self.net.quantile(q)
    }

    pub fn mean(&self) -> Option<f64> {
        self.gross.mean()
    }

    /// The clock pair's cost subtracted per timed call, ns.
    pub fn timer(&self) -> u64 {
        self.timer
    }
}

/// The mean time of one timed call's two `Instant::now()` reads with
/// nothing between them, ns, over 100 000 pairs (pairs interrupted for
/// over a microsecond left out). The mean, not the median: this machine's
/// clock reads in steps of about 10 ns, so single pairs read 20 or 30 ns
/// and their median flips between the two, while their mean (about 25)
/// is what a sum over many calls pays.
pub fn timer_ns() -> u64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for _ in 0..100_000 {
        let t = Instant::now();
        let e = t.elapsed().as_nanos() as u64;
        if e < 1_000 {
            sum += e;
            n += 1;
        }
    }
    (sum + n / 2) / n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_known_sample() {
        let mut c = DecisionCost::new();
        assert_eq!(c.quantile(0.5), None);
        for ns in 1..=100 {
            c.record(ns, 0);
        }
        c.record(20_000, 0);
        assert_eq!(c.len(), 101);
        assert_eq!(c.quantile(0.5), Some(51));
        assert_eq!(c.quantile(0.99), Some(100));
        assert_eq!(c.quantile(1.0), Some(20_000));
        assert_eq!(c.quantile(0.0), Some(1));
        let m = c.mean().unwrap();
        assert!((m - (5050.0 + 20_000.0) / 101.0).abs() < 1e-9, "{m}");
        assert_eq!(c.net_quantile(0.5), Some(51));
    }

    #[test]
    fn net_figures_take_the_clock_off_each_timed_call() {
        let mut c = DecisionCost::new();
        let t = c.timer();
        c.record(10 * t + 500, 3);
        assert_eq!(c.quantile(1.0), Some(10 * t + 500));
        assert_eq!(c.net_quantile(1.0), Some(7 * t + 500));
        // Never below zero.
        c.record(t, 5);
        assert_eq!(c.net_quantile(0.0), Some(0));
    }
}
