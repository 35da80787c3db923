//! Reset-based preemption and restore, the core's flag and drain
//! bookkeeping (REEF §4.1–4.4): preempting a set of streams (Fig. 7: host
//! queue reset with asynchronous reclamation, lazy eviction through the
//! preemption flag, killing running kernels), the preemption records and
//! their latency, draining, operator preempt/resume commands, and the
//! restore from the kernel execution index (Fig. 8 lines 15–18, from the
//! interrupted kernel or the start of its idempotent group, Fig. 9).

use super::*;

/// One preemption: from the decision to the moment every preempted stream
/// has no kernel left in its device queue or on the compute units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionRecord {
    pub start: Time,
    /// `None` while still draining.
    pub end: Option<Time>,
    /// Level used (the policy's wish degraded to what the device offers).
    pub level: PreemptLevel,
    pub streams: u32,
    /// Launches dropped from host queues.
    pub dropped_from_host_queue: u32,
    /// Kernels that terminated at entry (lazy eviction).
    pub evicted: u32,
    /// Kernels whose running blocks were killed.
    pub killed: u32,
    /// Kernels that ran to completion after the decision.
    pub completed_during: u32,
}

impl PreemptionRecord {
    /// Preemption latency in nanoseconds, once finished.
    pub fn latency(&self) -> Option<Time> {
        self.end.map(|e| e - self.start)
    }
}

impl Core {
    /// The preemption records kept: all of them, unless
    /// [`Core::forget_finished_preemptions`] was called; the first is number
    /// [`Core::preemptions_base`].
    pub fn preemptions(&self) -> &[PreemptionRecord] {
        &self.preemptions
    }
    /// How many preemption records were forgotten (the number of the first
    /// one [`Core::preemptions`] returns).
    pub fn preemptions_base(&self) -> usize {
        self.preemptions_base
    }
    /// Drops the finished preemption records before the first unfinished
    /// one. A long-running user (the daemon, which reads each record when it
    /// is made) calls this so that the records do not grow without bound
    /// (one per preemption); a benchmark that reports on all of them at the
    /// end does not.
    pub fn forget_finished_preemptions(&mut self) {
        let n = self
            .preemptions
            .iter()
            .position(|r| r.end.is_none())
            .unwrap_or(self.preemptions.len());
        self.preemptions.drain(..n);
        self.preemptions_base += n;
    }
    pub(super) fn record(&mut self, r: usize) -> &mut PreemptionRecord {
        &mut self.preemptions[r - self.preemptions_base]
    }

    /// Opens a preemption record for a set of streams about to be preempted
    /// together, and preempts them. Returns the record index, or `None` when
    /// none of the streams had work to preempt (no record is kept then).
    pub fn preempt_streams(&mut self, streams: &[StreamId], wanted: PreemptLevel) -> Option<usize> {
        for &s in streams {
            self.streams[s.0 as usize].by_policy = true;
        }
        self.preempt_streams_inner(streams, wanted)
    }

    fn preempt_streams_inner(
        &mut self,
        streams: &[StreamId],
        wanted: PreemptLevel,
    ) -> Option<usize> {
        let level = wanted.min(self.cfg.device.max_level);
        let targets: Vec<StreamId> = streams
            .iter()
            .copied()
            .filter(|&s| {
                let st = &self.streams[s.0 as usize];
                st.active.is_some() && st.pause == Pause::Running
            })
            .collect();
        if targets.is_empty() {
            return None;
        }
        let idx = self.preemptions_base + self.preemptions.len();
        self.preemptions.push(PreemptionRecord {
            start: self.now,
            end: None,
            level,
            streams: targets.len() as u32,
            dropped_from_host_queue: 0,
            evicted: 0,
            killed: 0,
            completed_during: 0,
        });
        for s in targets {
            self.preempt_one(s, level, Some(idx));
        }
        self.finish_record_if_drained(idx);
        Some(idx)
    }

    fn preempt_one(&mut self, s: StreamId, level: PreemptLevel, record: Option<usize>) {
        let can_clear = self.cfg.device.can_clear_device_queue;
        let st = &mut self.streams[s.0 as usize];
        let Some(a) = &st.active else { return };
        // ❶ reset the host queue: drop the untransmitted launches in O(1)
        // (the cursor stops) and hand their memory to the reclaimer.
        let dropped = a.kernels - a.next_launch;
        st.pause = Pause::Draining {
            record,
            resume_when_drained: false,
        };
        if dropped > 0 {
            self.out
                .push_back(Action::ReclaimHostQueue { stream: s, dropped });
        }
        if let Some(r) = record {
            self.record(r).dropped_from_host_queue += dropped;
        }
        let st = &mut self.streams[s.0 as usize];
        if st.outstanding > 0 {
            // ❷ reset the device queue: lazy eviction through the flag.
            if level >= PreemptLevel::LazyEviction {
                st.flag = true;
                self.out.push_back(Action::SetPreemptFlag {
                    stream: s,
                    value: true,
                });
                if can_clear {
                    self.out.push_back(Action::ClearDeviceQueue { stream: s });
                }
            }
            // ❸ reset the compute units.
            if level >= PreemptLevel::Kill {
                self.out.push_back(Action::KillStream { stream: s });
            }
        }
        self.check_drained(s);
    }

    /// Restores a stream preempted by the policy (no-op when it is running
    /// or was preempted by an operator command). If it is still draining,
    /// the restore happens as soon as it has drained.
    pub fn resume(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        st.by_policy = false;
        if st.by_command {
            return;
        }
        self.resume_inner(s);
    }

    fn resume_inner(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        match st.pause {
            Pause::Running => {}
            Pause::Draining {
                ref mut resume_when_drained,
                ..
            } => *resume_when_drained = true,
            Pause::Preempted => self.restore(s),
        }
    }

    /// Fig. 8 lines 15–18: read the execution index, clear the flag, find the
    /// idempotent entry and relaunch from there.
    fn restore(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        debug_assert_eq!(st.outstanding, 0);
        st.pause = Pause::Running;
        st.by_command = false;
        st.by_policy = false;
        if st.flag {
            st.flag = false;
            self.out.push_back(Action::SetPreemptFlag {
                stream: s,
                value: false,
            });
        }
        if let Some(a) = &mut st.active {
            // Streams run in order, so kernels 0..c completed and the global
            // execution index l is c (kernel c was interrupted), c-1 (it
            // completed and kernel c never passed its flag check), or past c
            // after a restore to an earlier group start. Fig. 8 restarts from
            // find_idem_entry(l) in every case, re-running a completed kernel
            // in the second; the core restarts at c there (nothing of c
            // ran), but only for a completion it saw before the flag was
            // set: one reported while the flag was set for the kernel the
            // index names may be a partial run and was not counted
            // (`on_finished`), so that kernel is c and is re-executed, as
            // §4.4 does. With a closed-loop real-time client that preempts
            // right after every restore, re-running a completed kernel each
            // time would stop best-effort progress.
            // Without start reports, c is assumed interrupted.
            let c = a.completed_upto;
            let model = &self.models[a.model.0 as usize];
            let from = match a.last_started {
                Some(l) if l + 1 == c => c,
                Some(l) if l >= c => model.restore_point(l).min(c),
                _ => model.restore_point(c).min(c),
            };
            self.counters.restores += 1;
            self.counters.redundant_kernels += u64::from(a.completed_upto - from);
            a.next_launch = from;
            a.completed_upto = from;
            self.out.push_back(Action::Restore {
                stream: s,
                req: a.req,
                exec_index: a.last_started,
                from_kernel: from,
            });
        }
        self.pump(s);
    }

    pub(crate) fn command_preempt(&mut self, s: StreamId) {
        if s.0 as usize >= self.streams.len() {
            return;
        }
        let level = self.cfg.device.max_level;
        let st = &mut self.streams[s.0 as usize];
        st.by_command = true;
        if st.pause == Pause::Running {
            if st.active.is_some() {
                let rec = self.preempt_streams_inner(&[s], level);
                if rec.is_none() {
                    self.streams[s.0 as usize].pause = Pause::Preempted;
                }
            } else {
                st.pause = Pause::Preempted;
            }
        }
    }

    pub(crate) fn command_resume(&mut self, s: StreamId) {
        if s.0 as usize >= self.streams.len() {
            return;
        }
        let st = &mut self.streams[s.0 as usize];
        st.by_command = false;
        if st.by_policy {
            // The policy still holds it (an RT task runs): it is restored
            // when the policy resumes it.
            return;
        }
        self.resume_inner(s);
    }

    pub(super) fn check_drained(&mut self, s: StreamId) {
        let st = &mut self.streams[s.0 as usize];
        if st.outstanding != 0 {
            return;
        }
        if let Pause::Draining {
            record,
            resume_when_drained,
        } = st.pause
        {
            st.pause = Pause::Preempted;
            if let Some(r) = record {
                self.finish_record_if_drained(r);
            }
            let st = &self.streams[s.0 as usize];
            if resume_when_drained && !st.by_command && !st.by_policy {
                self.restore(s);
            }
        }
    }

    fn finish_record_if_drained(&mut self, r: usize) {
        if self.record(r).end.is_some() {
            return;
        }
        let still = self
            .streams
            .iter()
            .any(|st| matches!(st.pause, Pause::Draining { record: Some(x), .. } if x == r));
        if !still {
            let now = self.now;
            self.record(r).end = Some(now);
        }
    }
}
