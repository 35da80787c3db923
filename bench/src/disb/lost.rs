//! Where best-effort throughput goes (issue 28 item 1): device time
//! accounted from the simulator's event trace, not estimated.
//!
//! Between two device events the resident block groups do not change, so
//! the runner integrates, over every interval, which compute units hold a
//! real-time (RT) block, which hold only best-effort (BE) blocks, and
//! which are idle ([`reef_sim::Sim::for_each_resident`]). Idle CU time
//! counts as lost to BE work only while a BE request waits (issued and not
//! answered). It is split into:
//! - `gpu_idle`: no block on any CU (normal mode not yet resumed, the
//!   launch path, a preemption draining, REEF §3.1 / §4);
//! - `beside_rt_refused`: CUs idle beside an RT kernel that went unpadded
//!   although BE tasks were offered to the padding selection, whose rules
//!   (REEF §5.2) admitted none;
//! - `beside_rt`: CUs idle beside RT kernels otherwise (CUs a padded
//!   launch left over, BE blocks of a padded launch that ended before the
//!   RT kernel, no BE task preempted and drained to offer, or a policy
//!   without padding);
//! - `beside_be`: CUs idle while only BE blocks run (the tail of a BE
//!   kernel, its grid smaller than the device).
//!
//! Two columns say how the busy CU time is used: `be_shared`, the part
//! of `rt_busy` whose CUs hold BE blocks beside the RT ones (what
//! `streams` does everywhere and `reef-max`'s `share` within a budget;
//! REEF's padding gives the RT kernel whole CUs, §5.2 Fig. 12), and
//! `be_occupancy`, the mean BE blocks resident on a BE-only CU (a CU's BE
//! work rate rises with them up to the kernel's occupancy limit; the
//! simulator's groups say how many blocks each CU holds).
//!
//! `killed` is the CU time of BE launches that were killed (REEF §4.3:
//! a killed kernel re-executes from its start on restore; the blocks it
//! completed before the kill are thrown away too). All figures are
//! fractions of the device's CU time over the run (CUs × duration).

use reef_sim::{CuSet, DeviceEvent, EventKind, LaunchId, Sim, Tags};
use serde::Serialize;
use std::collections::HashMap;

/// The account of one run, as fractions of the device's CU time.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Lost {
    /// CU time holding an RT block.
    pub rt_busy: f64,
    /// CU time holding only BE blocks (killed ones included).
    pub be_busy: f64,
    /// Of `rt_busy`: CU time holding RT and BE blocks together (BE
    /// blocks sharing the RT kernel's CUs, as under `streams` or
    /// `reef-max`'s `share`).
    pub be_shared: f64,
    /// BE CU time thrown away by kills.
    pub killed: f64,
    /// Mean BE blocks resident on a CU that holds only BE blocks, over
    /// `be_busy`'s time: a CU's BE work rate rises with its resident
    /// blocks up to the kernel's occupancy limit, so equal `be_busy` at
    /// a lower `be_occupancy` is less BE work.
    pub be_occupancy: f64,
    pub gpu_idle: f64,
    pub beside_rt_refused: f64,
    pub beside_rt: f64,
    pub beside_be: f64,
    /// Share of the run during which a BE request waited.
    pub be_waiting: f64,
    /// Of the CU time beside RT kernels: CUs of a padded launch's BE part
    /// that finished before the launch's RT part, from the part's end to
    /// the RT part's end (`reef_exec::PadStats::be_early_cu_ns`; counted
    /// whether or not a BE request waited, so an upper bound on its part
    /// of `beside_rt`).
    pub part_early: f64,
    /// Of `part_early`: parts that ran their kernel's last block, so that
    /// the task's next kernel could have run there.
    pub part_early_done: f64,
}

/// Accumulates a run's [`Lost`] from the device's resident groups and
/// events.
pub struct Accountant {
    cus: usize,
    last: u64,
    rt_busy: u128,
    be_busy: u128,
    be_blocks: u128,
    be_shared: u128,
    killed: u128,
    gpu_idle: u128,
    beside_rt_refused: u128,
    beside_rt: u128,
    beside_be: u128,
    be_waiting: u128,
    /// BE CU time per launch still on the device.
    be_launch: HashMap<LaunchId, u128>,
    /// The BE groups of one interval (reused, not reallocated).
    scratch: Vec<(CuSet, u32)>,
}

impl Accountant {
    pub fn new(cus: usize) -> Self {
        Self {
            cus,
            last: 0,
            rt_busy: 0,
            be_busy: 0,
            be_blocks: 0,
            be_shared: 0,
            killed: 0,
            gpu_idle: 0,
            beside_rt_refused: 0,
            beside_rt: 0,
            beside_be: 0,
            be_waiting: 0,
            be_launch: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Accounts the interval from the last call to `now`, over which the
    /// device held what it holds now. `is_rt(tags)`: whether a launch is
    /// real-time work; `refused(tags)`: whether that RT kernel went
    /// unpadded with BE tasks offered; `be_waits`: a BE request waits.
    pub fn advance(
        &mut self,
        sim: &Sim,
        now: u64,
        be_waits: bool,
        is_rt: &dyn Fn(&Tags) -> bool,
        refused: &dyn Fn(&Tags) -> bool,
    ) {
        let dt = now.saturating_sub(self.last) as u128;
        self.last = self.last.max(now);
        if dt == 0 {
            return;
        }
        let (mut rt, mut be) = (CuSet::default(), CuSet::default());
        let mut any_refused = false;
        let be_launch = &mut self.be_launch;
        let mut be_groups = std::mem::take(&mut self.scratch);
        be_groups.clear();
        sim.for_each_resident(|id, tags, cus, per_cu| {
            if is_rt(tags) {
                rt = rt.or(cus);
                any_refused |= refused(tags);
            } else {
                be = be.or(cus);
                be_groups.push((*cus, per_cu));
                *be_launch.entry(id).or_default() += cus.len() as u128 * dt;
            }
        });
        let (nrt, nbe) = (rt.len(), be.minus(&rt).len());
        for (cus, per_cu) in &be_groups {
            self.be_blocks += (cus.minus(&rt).len() as u128) * (*per_cu as u128) * dt;
        }
        self.scratch = be_groups;
        self.rt_busy += nrt as u128 * dt;
        self.be_busy += nbe as u128 * dt;
        self.be_shared += be.and(&rt).len() as u128 * dt;
        if !be_waits {
            return;
        }
        self.be_waiting += dt;
        let idle = (self.cus - nrt - nbe) as u128 * dt;
        if nrt + nbe == 0 {
            self.gpu_idle += idle;
        } else if nrt > 0 && any_refused {
            self.beside_rt_refused += idle;
        } else if nrt > 0 {
            self.beside_rt += idle;
        } else {
            self.beside_be += idle;
        }
    }

    /// A raw device event: a killed BE launch's CU time is thrown away;
    /// one that ended otherwise is forgotten.
    pub fn event(&mut self, ev: &DeviceEvent) {
        match ev.kind {
            EventKind::Started => {}
            EventKind::Killed { .. } => {
                if let Some(t) = self.be_launch.remove(&ev.launch) {
                    self.killed += t;
                }
            }
            _ => {
                self.be_launch.remove(&ev.launch);
            }
        }
    }

    /// The account over `duration` ns.
    pub fn finish(&self, duration: u64) -> Lost {
        let total = (self.cus as u128 * duration as u128).max(1) as f64;
        let f = |v: u128| v as f64 / total;
        Lost {
            rt_busy: f(self.rt_busy),
            be_busy: f(self.be_busy),
            be_shared: f(self.be_shared),
            killed: f(self.killed),
            be_occupancy: self.be_blocks as f64 / self.be_busy.max(1) as f64,
            gpu_idle: f(self.gpu_idle),
            beside_rt_refused: f(self.beside_rt_refused),
            beside_rt: f(self.beside_rt),
            beside_be: f(self.beside_be),
            be_waiting: self.be_waiting as f64 / duration.max(1) as f64,
            part_early: 0.0,
            part_early_done: 0.0,
        }
    }
}

/// The table `--lost` prints: per run, the shares of CU time; `base` is
/// the row it is compared with (`streams`), by workload.
pub fn table(rows: &[(String, String, f64, Lost)]) -> String {
    let mut s = String::from(
        "where BE throughput goes (shares of CU time, from the simulator's trace; lost shares count only while a BE request waits)\n",
    );
    // The policy column as wide as its longest name (`reef-max:-spread`).
    let pw = rows.iter().map(|r| r.1.len()).fold(14, usize::max);
    s.push_str(&format!(
        "{:<22} {:<pw$} {:>7} {:>7} {:>7} {:>7} {:>6} {:>7} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
        "workload",
        "policy",
        "BE thr",
        "RT busy",
        "of: +BE",
        "BE busy",
        "BE occ",
        "killed",
        "GPU idle",
        "refused",
        "beside-RT",
        "beside-BE",
        "BE waits",
        "part-end",
        "of: done"
    ));
    for (w, p, be, l) in rows {
        s.push_str(&format!(
            "{:<22} {:<pw$} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>6.2} {:>7.3} {:>8.3} {:>9.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}\n",
            w,
            p,
            be,
            l.rt_busy,
            l.be_shared,
            l.be_busy,
            l.be_occupancy,
            l.killed,
            l.gpu_idle,
            l.beside_rt_refused,
            l.beside_rt,
            l.beside_be,
            l.be_waiting,
            l.part_early,
            l.part_early_done
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy name longer than the column (`reef-max:-spread`) widens it
    /// for every row: the rows keep one length, and the header's policy
    /// column is as wide.
    #[test]
    fn the_table_stays_aligned_with_long_policy_names() {
        let rows: Vec<(String, String, f64, Lost)> = ["reef", "reef-max:-spread", "streams-prio"]
            .iter()
            .map(|p| ("B".to_string(), p.to_string(), 0.5, Lost::default()))
            .collect();
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().skip(1).collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[1..].iter().all(|l| l.len() == lines[1].len()), "{t}");
        // "BE thr" is right-aligned over the rows' first figure.
        let head_end = lines[0].find("BE thr").unwrap() + "BE thr".len();
        for l in &lines[1..] {
            assert_eq!(l.find("0.500").unwrap() + "0.500".len(), head_end, "{t}");
        }
    }
}
