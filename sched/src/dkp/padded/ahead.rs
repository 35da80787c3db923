//! The padding selection made ahead of the launch it is for (issue 28's
//! decision cost: "≤ 0.2 µs p99 … side by side with `reef`'s").
//!
//! REEF makes the kernel selection when the DKP transmitter sends a
//! real-time kernel to the device (§5.2, Fig. 12 line 10) and counts its
//! cost on that path (§6.5, Fig. 26: 0.4–1.2 µs per kernel). The
//! selection's inputs are few and mostly known one kernel early: the
//! real-time kernel comes next in its request's sequence, and between two
//! real-time kernels the best-effort tasks are preempted and move only as
//! padding moves them, by the block ranges the last padded launch already
//! committed to their plans (`select_for`). So once the scheduler has
//! handed its actions over, [`PaddingScheduler::prepare`] runs the
//! selection for the real-time kernel it will transmit next over the tasks
//! as they stand, and keeps the result with its inputs: the table, the
//! real-time kernel, the round-robin start and every task's plan (stream,
//! client, model, kernel, locked version, next block). When the kernel is
//! transmitted, `select_for` takes the kept result if and only if those
//! inputs are equal to its own, and selects as before otherwise. The
//! selection is a function of exactly these inputs (the candidates'
//! versions, floors and chain lengths are the table's and the models'
//! fixed metadata), so the launch is the same either way: this changes
//! when the work is done, never what is decided
//! (`tests::ahead_changes_no_decision`; on the measured models and DISB
//! D, reef-bench's `selecting_ahead_changes_no_outcome`, which fails when
//! the tasks are left out of the comparison).
//!
//! What it costs: the selection's time moves from the transmit path to
//! the moment after the scheduler's actions are handed over, when the
//! device runs the kernel before. A real daemon's scheduler thread is busy
//! for that time; an event arriving in it waits (the drivers time
//! `prepare` apart from decisions, `reef-bench disb --decision-cost`).
//! A miss (a best-effort request started or finished, a kill, the guard
//! or another kernel than predicted) pays the selection on the path as
//! before.

use super::*;

/// What a prepared selection was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    table: usize,
    model: ModelId,
    kernel: u32,
    start: usize,
}

/// The selection made ahead and its inputs.
#[derive(Debug, Default)]
pub(super) struct Ahead {
    /// Whether [`PaddingScheduler::prepare`] selects ahead.
    pub(super) on: bool,
    key: Option<Key>,
    tasks: Vec<Task>,
    scratch: Vec<Task>,
    /// The prepared selection (swapped into the scheduler's when taken).
    pub(super) padding: Padding,
    padded: bool,
    /// Selections taken at the launch, made at the launch, and made ahead.
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) made: u64,
}

/// How the selections ahead fared (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AheadCounts {
    /// Selections made ahead ([`PaddingScheduler::prepare`]).
    pub made: u64,
    /// Launches that took a selection made ahead.
    pub hits: u64,
    /// Launches that selected on their own path (nothing prepared for
    /// them, or prepared from other inputs).
    pub misses: u64,
}

impl Ahead {
    /// On: the scheduler selects ahead unless told not to.
    pub(super) fn new() -> Self {
        Self {
            on: true,
            ..Self::default()
        }
    }

    /// The prepared selection's result, when it was made from exactly
    /// these inputs; its padding is then in `self.padding`. Used once.
    pub(super) fn take(
        &mut self,
        table: &Arc<DkpTable>,
        model: ModelId,
        kernel: u32,
        start: usize,
        tasks: &[Task],
    ) -> Option<bool> {
        if !self.on {
            return None;
        }
        let key = Key {
            table: Arc::as_ptr(table) as usize,
            model,
            kernel,
            start,
        };
        if self.key.take() == Some(key) && self.tasks == tasks {
            self.hits += 1;
            Some(self.padded)
        } else {
            self.misses += 1;
            None
        }
    }
}

impl PaddingScheduler {
    /// Selects ahead ([`Self::prepare`]) or only at the launch. On by
    /// default; the decisions are the same either way.
    pub fn set_select_ahead(&mut self, on: bool) {
        self.ahead.on = on;
        self.ahead.key = None;
    }

    pub fn ahead_counts(&self) -> AheadCounts {
        AheadCounts {
            made: self.ahead.made,
            hits: self.ahead.hits,
            misses: self.ahead.misses,
        }
    }

    /// The real-time kernel the transmitter sends next: the front of the
    /// held launches, else the one after the last kernel sent, if its
    /// request has one.
    fn next_rt_kernel(&self) -> Option<(ModelId, KernelTag)> {
        let tag = match self.rt_pending.front() {
            Some(&t) => t,
            None => {
                let last = self.inflight.back()?.tag;
                KernelTag {
                    req: last.req,
                    kernel: last.kernel + 1,
                }
            }
        };
        let client = *self.req_client.get(&tag.req)?;
        let model = self.clients[client.0 as usize].model;
        (tag.kernel < self.models[model.0 as usize]).then_some((model, tag))
    }

    /// Makes the selection for the real-time kernel the transmitter sends
    /// next, from the best-effort tasks as they stand, and keeps it for
    /// that launch (see the module doc). Changes no decision. Called by the
    /// driver after it has performed the scheduler's actions; true when a
    /// selection ran.
    pub fn prepare(&mut self) -> bool {
        if !self.ahead.on {
            return false;
        }
        let Some((model, tag)) = self.next_rt_kernel() else {
            return false;
        };
        // Launched unpadded without a selection (see `pump_one`).
        let n = self.table.selector.limits().compute_units;
        let rt_cus = self.table.versions(model, tag.kernel)[0].rt_cus.min(n);
        if (self.tail_fill && tag.kernel + 1 == self.models[model.0 as usize])
            || self
                .guard
                .as_ref()
                .is_some_and(|g| !g.admits(tag.req, n - rt_cus, n))
        {
            return false;
        }
        let mut tasks = std::mem::take(&mut self.ahead.scratch);
        tasks.clear();
        for si in 0..self.be.len() {
            if let Some((_, Some(task))) = self.pad_task(si) {
                tasks.push(task);
            }
        }
        if tasks.is_empty() {
            self.ahead.scratch = tasks;
            return false;
        }
        let key = Key {
            table: Arc::as_ptr(&self.table) as usize,
            model,
            kernel: tag.kernel,
            start: self.rr % tasks.len(),
        };
        if self.ahead.key == Some(key) && self.ahead.tasks == tasks {
            self.ahead.scratch = tasks;
            return false;
        }
        let cands = std::mem::take(&mut self.cands);
        let (padded, cands) = plan::select_over(
            &self.table,
            self.inner.core(),
            &tasks,
            (model, tag.kernel),
            key.start,
            cands,
            &mut self.ahead.padding,
        );
        self.cands = cands;
        self.ahead.padded = padded;
        self.ahead.key = Some(key);
        self.ahead.scratch = std::mem::replace(&mut self.ahead.tasks, tasks);
        self.ahead.made += 1;
        true
    }
}
