//! `reef-max`'s `pool` (issue 28): `share`'s slowdown budget held per
//! real-time request rather than per kernel.
//!
//! Aker §8.3.1 ("Calculating QoS Headroom") budgets a latency-critical
//! *query*: its headroom `T_hr` is computed from the query's predicted
//! solo-run duration when its first kernel is issued, each co-run that is
//! launched spends its predicted extra time (`T_k_fuse − T_tc`, Eq. 4) and
//! `T_hr` is reduced by it, and a co-run is admitted only while its extra
//! time fits what is left. `share` ([`super::share`]) alone gives each
//! real-time kernel its own budget, `β` of its time alone
//! ([`super::share::BUDGET_PERMILLE`]): a kernel whose co-residency curve
//! steps by more than `β` at the next block is never shared, however
//! little the request's other kernels used.
//!
//! Here, as in Aker, the request's headroom is its QoS target less its
//! predicted solo time and its queueing: `T_hr = β · T_solo − T_queue`,
//! `β` [`super::share::BUDGET_PERMILLE`] and `T_solo` its kernels' times
//! alone (their sum is at most the request's solo latency). It is earned
//! kernel by kernel: when kernel `i` is selected the pooled allowance is
//! `β · (t_0 + … + t_i) − T_queue − spent`, `spent` the predicted slowdowns
//! (the curves' ceiling, [`super::share::fill`]) of the request's kernels
//! shared so far, and the kernel may spend the larger of that and its own
//! `β · t_i` (what `share` alone gives it). Hence
//! - a request's kernels are predicted at most `β` of their time slower in
//!   total (by induction: `spent ≤ β · (t_0 + … + t_i)` after kernel `i`),
//!   the bound `share` gives it kernel by kernel;
//! - every kernel may spend at least what `share` gives it alone, so
//!   `pool` admits every co-run `share` admits, and more where a steep
//!   kernel follows flat ones.
//!
//! `T_queue` is measured when the request's first kernel is selected: the
//! time since its arrival less the times alone of its kernels before the
//! selected one (an upper bound of the wait where those ran unpadded).
//! Aker §8.3.2 (Eq. 5) subtracts from a query's headroom the remaining GPU
//! time of every other active latency-critical query: a slowdown of this
//! request delays each request queued behind it. Any waiting real-time
//! request's remaining time is far above `β` of any request here (β is
//! 1 %), so while one waits the pooled allowance is 0 and only `share`'s
//! own per-kernel budget applies (a first version without the two terms
//! broke the target on GV100 D: RT mean 1.034, docs/results-max.md).
//!
//! Aker spends the whole `T_hr` from the first kernel on; carrying it
//! forward instead keeps the second property.

use super::padded::DkpTable;
use crate::types::{ModelId, RequestId, Time};
use std::collections::VecDeque;

/// The per-request headroom of the real-time stream's current request.
#[derive(Debug, Clone)]
pub struct Pool {
    permille: u32,
    /// `prefix[m][k]`: the times alone of kernels `0..=k` of model `m`, ns
    /// (their compiled versions, which the real-time requests run).
    prefix: Vec<Vec<u64>>,
    /// Arrival times of the real-time requests not yet selected for, in
    /// arrival order (the real-time stream serves them in that order).
    arrivals: VecDeque<(RequestId, Time)>,
    req: Option<RequestId>,
    /// The current request's queueing time, ns.
    queued: u64,
    spent: u64,
}

impl Pool {
    /// For the models of `table`, with budget `permille` of the kernels'
    /// time alone.
    pub fn new(table: &DkpTable, permille: u32) -> Self {
        let prefix = table
            .kernels
            .iter()
            .map(|ks| {
                ks.iter()
                    .scan(0u64, |sum, v| {
                        *sum = sum.saturating_add(v.first().map_or(0, |k| k.kernel_ns));
                        Some(*sum)
                    })
                    .collect()
            })
            .collect();
        Self {
            permille,
            prefix,
            arrivals: VecDeque::new(),
            req: None,
            queued: 0,
            spent: 0,
        }
    }

    /// A real-time request arrived at `now`.
    pub fn arrived(&mut self, req: RequestId, now: Time) {
        self.arrivals.push_back((req, now));
    }

    fn earned(&self, m: ModelId, kernel: Option<u32>) -> u64 {
        let Some(kernel) = kernel else { return 0 };
        self.prefix
            .get(m.0 as usize)
            .and_then(|p| p.get(kernel as usize))
            .map_or(0, |&t| t.saturating_mul(self.permille as u64) / 1000)
    }

    fn alone(&self, m: ModelId, kernel: Option<u32>) -> u64 {
        let Some(kernel) = kernel else { return 0 };
        self.prefix
            .get(m.0 as usize)
            .and_then(|p| p.get(kernel as usize))
            .copied()
            .unwrap_or(0)
    }

    /// What kernel `kernel` of request `req` (model `m`) may be slowed by,
    /// ns, selected at `now` with `others_waiting` real-time requests
    /// queued behind it. The padding scheduler's real-time requests go
    /// through one stream, one at a time, so a new request id starts a
    /// new headroom.
    pub fn allowance(
        &mut self,
        m: ModelId,
        req: RequestId,
        kernel: u32,
        now: Time,
        others_waiting: bool,
    ) -> u64 {
        let before = kernel.checked_sub(1);
        if self.req != Some(req) {
            self.req = Some(req);
            self.spent = 0;
            // Drop the arrivals of requests before it (served already).
            let mut arrival = None;
            while let Some(&(r, t)) = self.arrivals.front() {
                self.arrivals.pop_front();
                if r == req {
                    arrival = Some(t);
                    break;
                }
            }
            // Unknown arrival: no pooled headroom.
            self.queued = arrival.map_or(u64::MAX, |t| {
                now.saturating_sub(t).saturating_sub(self.alone(m, before))
            });
        }
        let own = self
            .earned(m, Some(kernel))
            .saturating_sub(self.earned(m, before));
        let pooled = if others_waiting {
            0
        } else {
            self.earned(m, Some(kernel))
                .saturating_sub(self.queued)
                .saturating_sub(self.spent)
        };
        pooled.max(own)
    }

    /// Spends `ns` of the current request's headroom (the predicted
    /// slowdown of the kernel just selected).
    pub fn spend(&mut self, ns: u64) {
        self.spent = self.spent.saturating_add(ns);
    }

    /// The current request's predicted slowdown so far, ns.
    pub fn spent(&self) -> u64 {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::super::profile::mi50;
    use super::super::select::{Candidate, Padding, Selector};
    use super::super::share::BUDGET_PERMILLE;
    use super::super::Variant;
    use super::*;
    use crate::dkp::KernelChar;

    fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
        KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
    }

    fn one(versions: &[KernelChar]) -> [Candidate<'_>; 1] {
        [Candidate {
            versions,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }]
    }

    /// A request of three kernels: two flat ones and then a steep one,
    /// whose next co-residency step (+1.6 %) is above `share`'s 1 % per
    /// kernel but within what the two before it left unspent.
    fn request() -> (KernelChar, KernelChar) {
        let flat = k(120, 4, vec![50_000, 50_200, 50_200, 70_000]);
        let steep = k(120, 4, vec![50_000, 50_200, 51_000, 70_000]);
        (flat, steep)
    }

    #[test]
    fn a_steep_kernel_spends_what_the_request_left_and_the_total_stays_within_the_budget() {
        let (flat, steep) = request();
        let be = vec![k(1000, 8, vec![10_000, 20_000, 30_000, 40_000])];
        let s = Selector::new(mi50()).with_share(BUDGET_PERMILLE);
        let mut out = Padding::default();
        // Per kernel (`share` alone) the steep kernel is not shared.
        assert!(!s.select(&steep, &one(&be), 0, &mut out));
        let table = DkpTable::new(
            s.clone(),
            vec![vec![flat.clone(), flat.clone(), steep.clone()]],
            Variant::Single,
            0,
        );
        let mut pool = Pool::new(&table, BUDGET_PERMILLE);
        let (m, req) = (ModelId(0), RequestId(7));
        pool.arrived(req, 1_000);
        let mut spent = 0;
        let mut now = 1_000;
        for (i, rt) in [&flat, &flat, &steep].into_iter().enumerate() {
            let a = pool.allowance(m, req, i as u32, now, false);
            now += rt.kernel_ns;
            // Never less than the kernel's own budget.
            assert!(
                a >= rt.kernel_ns * BUDGET_PERMILLE as u64 / 1000,
                "{i}: {a}"
            );
            // The flat kernels cost nothing predicted (the curve is flat at
            // co-residency 3); the steep one is shared with the 1 % its
            // two predecessors left: the request's kernels sum to about
            // 150 us, so 1.5 us, against its own 0.5 us.
            assert!(s.select_within(rt, &one(&be), 0, Some(a), &mut out), "{i}");
            assert!(out.shared_extra_ns <= a);
            pool.spend(out.shared_extra_ns);
            spent += out.shared_extra_ns;
        }
        assert_eq!(pool.spent(), spent);
        assert!(spent > 0);
        let total: u64 = [&flat, &flat, &steep].iter().map(|k| k.kernel_ns).sum();
        assert!(spent <= total * BUDGET_PERMILLE as u64 / 1000);
        // A new request starts afresh.
        pool.arrived(RequestId(8), now);
        let a = pool.allowance(m, RequestId(8), 2, now, false);
        assert_eq!(a, total * BUDGET_PERMILLE as u64 / 1000);
        assert_eq!(pool.spent(), 0);
        // With another real-time request waiting behind it (Aker §8.3.2),
        // or after queueing for its whole headroom (§8.3.1), the steep
        // kernel has only its own budget, and is not shared.
        for (waiting, queued) in [(true, 0), (false, total / 100)] {
            let mut pool = Pool::new(&table, BUDGET_PERMILLE);
            pool.arrived(req, 0);
            let mut now = queued;
            for (i, rt) in [&flat, &flat, &steep].into_iter().enumerate() {
                let a = pool.allowance(m, req, i as u32, now, waiting);
                now += rt.kernel_ns;
                let shared = s.select_within(rt, &one(&be), 0, Some(a), &mut out);
                assert_eq!(shared, i < 2, "{i} {waiting} {queued}");
                pool.spend(out.shared_extra_ns);
            }
        }
    }

    #[test]
    fn the_allowance_is_what_the_kernels_so_far_earned_less_what_they_spent() {
        let (flat, steep) = request();
        let s = Selector::new(mi50()).with_share(BUDGET_PERMILLE);
        let table = DkpTable::new(
            s,
            vec![vec![flat.clone(), steep.clone()]],
            Variant::Single,
            0,
        );
        let mut pool = Pool::new(&table, 10);
        let (m, req) = (ModelId(0), RequestId(1));
        pool.arrived(RequestId(0), 0);
        pool.arrived(req, 0);
        let t0 = flat.kernel_ns / 100;
        let both = (flat.kernel_ns + steep.kernel_ns) / 100;
        // Selected 100 ns after its arrival: queued 100 ns.
        assert_eq!(pool.allowance(m, req, 0, 100, false), t0 - 100);
        pool.spend(t0 - 110);
        assert_eq!(
            pool.allowance(m, req, 1, 200, false),
            both - 100 - (t0 - 110)
        );
        // Another request waiting: the kernel's own budget only.
        assert_eq!(pool.allowance(m, req, 1, 200, true), both - t0);
        // Spent beyond it: still its own (share's per-kernel budget).
        pool.spend(u64::MAX);
        assert_eq!(pool.allowance(m, req, 1, 200, false), both - t0);
        // A request whose arrival was not seen gets no pooled headroom;
        // unknown models or kernels get nothing.
        assert_eq!(pool.allowance(m, RequestId(5), 1, 200, false), both - t0);
        assert_eq!(pool.allowance(ModelId(3), RequestId(2), 0, 0, false), 0);
    }
}
