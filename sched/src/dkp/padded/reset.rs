//! When a preempted best-effort task whose stream still drains may be
//! padded, and the transmitter's wait for its reset (REEF §3.1, §4.3–4.4).
//!
//! REEF resets the CUs synchronously (`preempt_reset` in SJTU-IPADS/reef
//! `scheduler.cpp`), reads the execution index (§4.4, Fig. 8 line 15) and
//! only then launches the real-time task, padded from the preempted tasks
//! (§3.1: "first uses the preemption module to instantly preempt ... and
//! then immediately launches the real-time task"; Fig. 6). At that point
//! the index says which kernel of each task was interrupted and nothing
//! after it can start: its queued kernels exit at their flag check (§4.2).
//!
//! This scheduler hears of the device's events late (a completion reaches
//! the host after it happened; reefd catches its device up in steps), so
//! the kernel it takes as a task's next may have completed, and its
//! successors started and rewritten what it reads, before the flag and the
//! kill landed (`next_plan`: vgg's kernel 70 rewrites what 69 reads, a
//! stale answer under `reef-bench hostile`). Padding such a task at once is
//! allowed only when every kernel it has on the device after its next one
//! writes nothing that one reads or writes
//! (`ModelInfo::successors_clear`). Otherwise it waits for an event that
//! establishes what REEF's reset establishes: the end of one of its
//! launches other than a completion. A launch heard evicted exited at its
//! flag check, so the flag had landed and every launch after it on the
//! in-order stream exits at its check too (§4.2); a launch heard killed
//! ran partly, and every launch after it reaches its check after the kill
//! (§4.3). From then on the kernels that may have written after the task's
//! next one are known ([`super::BeState::silent_from`]); if they are all
//! clear of it, its blocks recompute what any run of it computes.
//!
//! Under a closed-loop real-time client that event came too late: normal
//! mode lasts no time between two requests but relaunches the task's next
//! `dq_capacity` kernels, the new request's first `window` real-time
//! kernels went out while their eviction was pending, and where only the
//! first admits the task's kernel (densenet's kernel 0 for resnet152's 201
//! and vgg's 56: 203 rewrites what 201 reads) the task never moved again
//! (`reef-bench dkp`, docs/results-max.md). So, as REEF's reset is
//! synchronous, the transmitter holds a request's first kernel while the
//! real-time stream is empty, a task waits for that event, and the
//! selection would pad the kernel with it; the hold ends at the task's next
//! event on its stream (its launches are outstanding, so one comes:
//! within the kill latency for a running kernel, the launch path for a
//! queued one).

use super::super::select::Candidate;
use super::PaddingScheduler;
use crate::types::*;
use std::sync::Arc;

/// Whether a preempted best-effort task's own launches still keep it from
/// padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drain {
    /// Nothing of it can write what its next kernel reads any more.
    Clear,
    /// It may pad once the outcome of its kill is heard.
    AwaitsReset,
    /// It waits for its launches to finish.
    Blocked,
}

impl PaddingScheduler {
    /// Whether the launches best-effort stream `si` still has on the
    /// device keep its next kernel from padding. The caller has checked
    /// that the stream is preempted with a request.
    pub(super) fn drain_state(&self, si: usize) -> Drain {
        let s = StreamId(si as u32);
        let b = &self.be[si];
        let core = self.inner.core();
        if core.outstanding(s) == 0 {
            return Drain::Clear;
        }
        // Only where the kill lands before a later launch starts blocks
        // (`DeviceCaps::kill_precedes_later_launches`), and with nothing of
        // the task running but its next kernel, whose kill has been issued
        // (`next_plan`).
        let kill_first = core.config().device.kill_precedes_later_launches;
        let next_running = |k: u32| b.kill_issued && k == b.done_upto;
        // Launches outstanding although none of this request was made
        // (`launched_end` 0): an earlier request's, which padding finished
        // while they drained; what they write is not known here.
        if !kill_first || !b.running.is_none_or(next_running) || b.launched_end == 0 {
            return Drain::Blocked;
        }
        let Some((_, client)) = b.req else {
            return Drain::Blocked;
        };
        let m = self.clients[client.0 as usize].model;
        let clear = core.models()[m.0 as usize].successors_clear(b.done_upto);
        // The kernels after the next one that may have written: those
        // launched on the stream after it, up to the first known silent
        // one. (Not the outstanding ones: a completion heard under the
        // flag does not count, `Core::completion_unconfirmed`, so the
        // next kernel may have ended and only its successors be
        // outstanding.)
        let end = b
            .silent_from
            .map_or(b.launched_end, |w| w.min(b.launched_end));
        if end <= b.done_upto + 1 + clear {
            return Drain::Clear;
        }
        if b.kill_issued && b.silent_from.is_none() {
            Drain::AwaitsReset
        } else {
            Drain::Blocked
        }
    }

    /// Whether the transmitter holds real-time kernel `tag` until a
    /// best-effort task's reset is heard (module doc): only a request's
    /// kernel sent while the real-time stream holds nothing, and only when
    /// the selection would pad it with a task waiting for that.
    pub(super) fn waits_for_reset(&mut self, tag: KernelTag) -> bool {
        if !self.inflight.is_empty() {
            return false;
        }
        let Some(&client) = self.req_client.get(&tag.req) else {
            return false;
        };
        let model = self.clients[client.0 as usize].model;
        if self.tail_fill && tag.kernel + 1 == self.models[model.0 as usize] {
            return false;
        }
        let waiting = |si: usize| {
            let s = StreamId(si as u32);
            let core = self.inner.core();
            s != self.rt
                && self.be[si].req.is_some()
                && core.is_paused(s)
                && core.has_request(s)
                && !core.is_stopped_by_command(s)
                && self.drain_state(si) == Drain::AwaitsReset
        };
        if !(0..self.be.len()).any(waiting) {
            return false;
        }
        let table = Arc::clone(&self.table);
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        for si in (0..self.be.len()).filter(|&si| waiting(si)) {
            let b = &self.be[si];
            let Some((_, c)) = b.req else { continue };
            let (plan, _, m) = self.plan_of(b, c, &table);
            if plan.kernel < self.models[m.0 as usize] {
                cands.push(Candidate {
                    versions: table.versions(m, plan.kernel),
                    locked: plan.locked,
                    next_block: plan.next_block,
                    following: &[],
                    rule1_floor: 0,
                });
            }
        }
        if cands.is_empty() {
            return false;
        }
        let rt_char = &table.versions(model, tag.kernel)[0];
        table.selector.select(rt_char, &cands, 0, &mut self.padding)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{arrive, first_padded, kill_first, setup_on, step, tag};
    use super::super::DkpAction;
    use super::*;

    /// No action of `a` sends real-time kernel `rt` (padded or not).
    fn holds(a: &[DkpAction], rt: KernelTag) -> bool {
        !a.iter().any(|x| match x {
            DkpAction::Padded(p) => p.tag == rt,
            DkpAction::Core(Action::Launch { tag, .. }) => *tag == rt,
            _ => false,
        })
    }

    /// BE request 100 (kernels 0 and 1 on its stream, kernel 1 rewriting
    /// what 0 reads: `successors_clear` 0), kernel 0 started when `started`,
    /// then RT request 1 on a device whose kill lands first.
    fn preempted(started: bool) -> (PaddingScheduler, Vec<DkpAction>) {
        let mut s = setup_on(1, kill_first());
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        arrive(&mut s, 0, 100, 1);
        if started {
            step(
                &mut s,
                5,
                Event::KernelStarted {
                    stream: StreamId(1),
                    tag: tag(100, 0),
                },
            );
        }
        let a = arrive(&mut s, 10, 1, 0);
        (s, a)
    }

    #[test]
    fn the_first_rt_kernel_waits_for_the_reset_then_pads_the_task() {
        let be = StreamId(1);
        // Kernel 0 queued (its eviction is heard) or running (its kill).
        for started in [false, true] {
            let (mut s, a) = preempted(started);
            assert!(a.contains(&DkpAction::Core(Action::KillStream { stream: be })));
            // Kernel 1 may have run unseen: the task may not pad yet, and
            // RT kernel 0, the one that admits its kernel, is held.
            assert_eq!(s.drain_state(1), Drain::AwaitsReset);
            assert!(holds(&a, tag(1, 0)), "{a:?}");
            assert_eq!(s.dkp_counters().reset_waits, 1);
            let ev = if started {
                Event::KernelKilled {
                    stream: be,
                    tag: tag(100, 0),
                }
            } else {
                Event::KernelEvicted {
                    stream: be,
                    tag: tag(100, 0),
                }
            };
            // Kernel 1 is still queued, but can write nothing any more.
            let a = step(&mut s, 13, ev);
            assert_eq!(s.inner().core().outstanding(be), 1);
            assert_eq!(s.drain_state(1), Drain::Clear);
            assert_eq!(
                first_padded(&a),
                Some((tag(1, 0), tag(100, 0), 0..100)),
                "{a:?}"
            );
            assert_eq!(s.dkp_counters().reset_waits, 1);
        }
    }

    #[test]
    fn a_completion_heard_under_the_flag_does_not_end_the_wait() {
        // Heard late: kernel 0 completed and kernel 1 passed its check
        // before the flag landed; the kill ended kernel 1. The completion
        // alone proves nothing (kernel 0 may have run partly, and kernel
        // 1 may be rewriting its inputs), so the hold goes on; the start
        // of kernel 1 moves the task past kernel 0, and padding continues
        // kernel 1, never kernel 0 from inputs kernel 1 rewrote.
        let be = StreamId(1);
        let (mut s, _) = preempted(true);
        let a = step(
            &mut s,
            11,
            Event::KernelCompleted {
                stream: be,
                tag: tag(100, 0),
            },
        );
        assert_eq!(s.inner().core().outstanding(be), 1);
        assert_eq!(s.drain_state(1), Drain::AwaitsReset);
        assert!(holds(&a, tag(1, 0)), "{a:?}");
        let a = step(
            &mut s,
            11,
            Event::KernelStarted {
                stream: be,
                tag: tag(100, 1),
            },
        );
        assert_eq!(
            first_padded(&a).map(|p| (p.0, p.1, p.2.start)),
            Some((tag(1, 0), tag(100, 1), 0)),
            "{a:?}"
        );
    }

    #[test]
    fn no_wait_without_a_kill_that_lands_first_or_with_rt_kernels_in_flight() {
        let be = StreamId(1);
        // A device whose kill may land after later launches: the task waits
        // for its drain and nothing is held.
        let mut s = setup_on(1, crate::core::Config::default());
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        arrive(&mut s, 0, 100, 1);
        let a = arrive(&mut s, 10, 1, 0);
        assert_eq!(s.drain_state(1), Drain::Blocked);
        assert!(!holds(&a, tag(1, 0)), "{a:?}");
        assert_eq!(s.dkp_counters().reset_waits, 0);
        // Only a request's first kernel waits: once RT kernel 0 is on the
        // device, kernel 1 goes out when its turn comes, unpadded.
        let (mut s, _) = preempted(false);
        step(
            &mut s,
            11,
            Event::KernelEvicted {
                stream: be,
                tag: tag(100, 0),
            },
        );
        assert!(!s.inflight.is_empty());
        s.be[1].silent_from = None;
        assert!(!s.waits_for_reset(tag(1, 1)));
    }
}
