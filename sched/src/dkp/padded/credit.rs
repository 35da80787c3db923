//! Crediting a padded launch's best-effort blocks to their tasks when it
//! leaves the device, and draining the preemption core's actions through
//! the DKP transmitter (REEF §5, Fig. 12; docs/padding.md steps 4-5).

use super::*;

impl PaddingScheduler {
    /// A real-time launch left the device: credit its padding when it
    /// completed (before the core sees it, so a restore it triggers already
    /// knows the progress). An evicted padded launch ran no block: its
    /// tasks plan again from their credit. A killed one corrupted the
    /// outputs of the kernels it padded: their credit is dropped too, so
    /// every block runs again.
    pub(super) fn rt_finished(&mut self, now: Time, tag: KernelTag, end: RtEnd) {
        let Some(pos) = self.inflight.iter().position(|f| f.tag == tag) else {
            return;
        };
        let mut f = self.inflight.remove(pos).expect("position is valid");
        for p in f.parts.drain(..) {
            if end == RtEnd::Completed {
                self.credit(now, &p);
                continue;
            }
            let b = &mut self.be[p.stream.0 as usize];
            if b.req.map(|r| r.0) != Some(p.tag.req) {
                continue;
            }
            b.plan = None;
            if end == RtEnd::Killed && b.credit.is_some_and(|c| c.kernel == p.tag.kernel) {
                b.credit = None;
            }
        }
        if f.parts.capacity() > 0 {
            self.part_pool.push(f.parts);
        }
    }

    pub(super) fn credit(&mut self, now: Time, p: &BePart) {
        let total = self.table.versions(p.model, p.tag.kernel)[p.version as usize].blocks;
        let b = &mut self.be[p.stream.0 as usize];
        if b.req.map(|r| r.0) != Some(p.tag.req) || p.tag.kernel < b.done_upto {
            return;
        }
        if p.tag.kernel > b.done_upto {
            // A later kernel than the next one: the blocks before it were
            // lost (a kill dropped their credit). Its outputs cannot be
            // trusted; plan again from the task's progress.
            b.plan = None;
            return;
        }
        if let Some(c) = &mut b.credit {
            if c.kernel == p.tag.kernel && c.version != p.version {
                let bc = self.table.versions(p.model, c.kernel)[c.version as usize].blocks;
                match convert_blocks(c.done, bc, total) {
                    // Continued in a finer version, or in a coarser one at
                    // one of its block boundaries (`Selector::select`):
                    // the credited prefix converts exactly.
                    Some(done) => {
                        c.done = done;
                        c.version = p.version;
                    }
                    // Not a tiling of the credited version, or a coarser
                    // block the prefix ends inside of (the selection plans
                    // neither): credit nothing, keep the credited prefix.
                    None => {
                        b.plan = None;
                        return;
                    }
                }
            }
        }
        let c = match &mut b.credit {
            Some(c) if c.kernel == p.tag.kernel && c.version == p.version => c,
            slot => slot.insert(Credit {
                kernel: p.tag.kernel,
                version: p.version,
                first: p.version,
                done: 0,
            }),
        };
        if p.blocks.start > c.done {
            // Not adjacent to the credited prefix (cannot happen with
            // in-order launches); keep the credit conservative.
            return;
        }
        // The next prefix, or one overlapping it (blocks planned again
        // after a plan was dropped, run in order on the real-time stream):
        // blocks are independent, so the union is a prefix.
        c.done = c.done.max(p.blocks.end);
        if c.done < total {
            return;
        }
        b.credit = None;
        b.done_upto = p.tag.kernel + 1;
        self.counters.be_kernels_completed += 1;
        // Not a launch of the task's own stream: the stream may still be
        // draining its preemption, and its outstanding launches are its own.
        self.inner.completed_elsewhere(now, p.stream, p.tag);
        self.drain_inner(now);
    }

    /// Moves the core's actions out, holding real-time launches for the DKP
    /// transmitter and turning relaunches of partly padded kernels into
    /// [`DkpAction::Rest`].
    pub(super) fn drain_inner(&mut self, now: Time) {
        let mut acts = std::mem::take(&mut self.scratch);
        self.inner.drain_actions(&mut acts);
        for a in acts.drain(..) {
            match a {
                Action::Launch { stream, tag } if stream == self.rt => {
                    self.rt_pending.push_back(tag);
                }
                Action::Launch { stream, tag } => {
                    let client = self.req_client.get(&tag.req).copied();
                    let Some(b) = self.be.get_mut(stream.0 as usize) else {
                        self.out.push_back(DkpAction::Core(a));
                        continue;
                    };
                    if b.req.map(|r| r.0) != Some(tag.req) {
                        b.req = client.map(|c| (tag.req, c));
                        b.done_upto = 0;
                        b.credit = None;
                        b.running = None;
                        b.rest = None;
                    }
                    b.plan = None;
                    b.kill_issued = false;
                    b.silent_from = None;
                    b.launched_end = tag.kernel + 1;
                    // The credit stays until the relaunch completes (then
                    // the kernel is done) or is killed (then its outputs
                    // are corrupted and every block must run again); an
                    // evicted relaunch ran no block and keeps it.
                    match b.credit {
                        Some(mut c) if c.kernel == tag.kernel && c.done > 0 => {
                            let model = self.clients[client.map_or(0, |c| c.0 as usize)].model;
                            let vs = self.table.versions(model, tag.kernel);
                            if c.version != c.first {
                                // Padding continued the kernel in another
                                // version; normal mode runs the rest in the
                                // version it started with. From a finer
                                // one: from the block holding the credited
                                // prefix's end (the sub-tiles of it already
                                // done run again: same inputs, same values,
                                // REEF §4.4); from a coarser one the prefix
                                // converts exactly.
                                let (from, to) =
                                    (vs[c.version as usize].blocks, vs[c.first as usize].blocks);
                                // (Versions the selection never pairs: the
                                // whole kernel again.)
                                c.done = convert_blocks(c.done, from, to).unwrap_or(
                                    if to > 0 && from % to == 0 {
                                        c.done / (from / to)
                                    } else {
                                        0
                                    },
                                );
                                c.version = c.first;
                                b.credit = Some(c);
                            }
                            let total = vs[c.version as usize].blocks;
                            self.counters.rest_launches += 1;
                            b.rest = Some((tag.kernel, c.done));
                            self.out.push_back(DkpAction::Rest {
                                stream,
                                tag,
                                version: c.version,
                                blocks: c.done..total,
                            });
                        }
                        Some(c) if c.kernel == tag.kernel => {
                            b.credit = None;
                            self.out.push_back(DkpAction::Core(a));
                        }
                        // A redundant relaunch of an earlier kernel: the
                        // credit still applies afterwards.
                        _ => self.out.push_back(DkpAction::Core(a)),
                    }
                }
                Action::Restore {
                    stream,
                    from_kernel,
                    ..
                } => {
                    if let Some(b) = self.be.get_mut(stream.0 as usize) {
                        b.done_upto = from_kernel;
                        b.plan = None;
                        // A restore from before the credited kernel (the
                        // entry of its idempotent group, REEF §4.4: the
                        // kernel is not idempotent, e.g. it updates a
                        // buffer in place) re-runs the kernels that write
                        // what the credited blocks read or updated, so
                        // their part is undone and every block runs again.
                        if b.credit.is_some_and(|c| c.kernel > from_kernel) {
                            b.credit = None;
                            b.rest = None;
                        }
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                Action::RequestDone { req, .. } | Action::RequestRejected { req, .. } => {
                    self.req_client.remove(&req);
                    if let Some(g) = &mut self.guard {
                        if matches!(a, Action::RequestDone { .. }) {
                            g.completed(now, req);
                        } else {
                            g.forget(req);
                        }
                    }
                    for b in &mut self.be {
                        if b.req.map(|r| r.0) == Some(req) {
                            *b = BeState::default();
                        }
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                Action::KillStream { stream } => {
                    if let Some(b) = self.be.get_mut(stream.0 as usize) {
                        b.kill_issued = true;
                    }
                    self.out.push_back(DkpAction::Core(a));
                }
                other => self.out.push_back(DkpAction::Core(other)),
            }
        }
        self.scratch = acts;
    }
}

/// `done` blocks of a version of `from` blocks, in blocks of a version of
/// `to` blocks of the same kernel, when that is exact: the versions tile
/// the output in nested tiles (docs/padding.md, "Multi-version cost
/// model"), so `to` a multiple of `from` always converts and `from` a
/// multiple `r` of `to` converts when `done` is a multiple of `r`.
pub(super) fn convert_blocks(done: u32, from: u32, to: u32) -> Option<u32> {
    if from == 0 || to == 0 {
        return None;
    }
    if to >= from && to % from == 0 {
        Some(done * (to / from))
    } else if from % to == 0 && done % (from / to) == 0 {
        Some(done / (from / to))
    } else {
        None
    }
}
