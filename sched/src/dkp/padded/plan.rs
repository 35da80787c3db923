//! The DKP transmitter's selection: which best-effort plan each stream
//! would pad with, and the padded launch chosen for a real-time kernel as
//! it enters the device queue (REEF §5.2-5.3, Fig. 12 line 10).

use super::*;

impl PaddingScheduler {
    /// The plan best-effort stream `si` would pad with now (its stored plan,
    /// or one started from its credit or completed prefix, moved past a
    /// version whose blocks are all planned), with its client and model;
    /// `None` while the stream may not pad. Changes nothing: `select_for`
    /// stores the plan (also when it lies past the model's last kernel, so
    /// that blocks in flight are not planned twice).
    pub(super) fn next_plan(
        &self,
        si: usize,
        table: &DkpTable,
    ) -> Option<(Plan, ClientId, ModelId)> {
        let s = StreamId(si as u32);
        if s == self.rt {
            return None;
        }
        let b = &self.be[si];
        let (_, client) = b.req?;
        let core = self.inner.core();
        // A stream stopped by command stays stopped (docs/protocol.md).
        if !(core.is_paused(s) && core.has_request(s)) || core.is_stopped_by_command(s) {
            return None;
        }
        // Preempted and drained; or, when the device's kill lands before
        // a later launch can start (REEF resets the CUs before launching
        // the real-time task), preempted with nothing of it running: its
        // queued kernels are lazily evicted and write nothing, so its
        // next kernel can pad this real-time kernel at once (§3.1, Fig.
        // 6: the DKP module pads the real-time task's kernels from the
        // preempted tasks). On such a device a running kernel that is
        // the task's next one (a whole launch of it, or the rest of it
        // after the blocks padding completed) does not hold the task
        // back either once the stream's kill has been issued: the kill
        // precedes this launch in the action order and ends the kernel
        // before any padded block starts (REEF §4: the CU reset kills
        // the running kernel; `preempt_reset` is synchronous before
        // `dynamic_kernel_padding`, §3.1). Padding then continues that
        // kernel from the task's credit, as a restore would re-execute
        // it: a killed rest leaves the credited blocks valid (see the
        // `KernelKilled` arm), a killed whole launch had no credit.
        // Should it complete before the kill lands instead, the padded
        // blocks recompute the same outputs from the same inputs and
        // their credit is refused (the kernel is done). Waiting for the
        // kill event left the request's first `window` RT kernels
        // unpadded whenever normal mode (an RT client's think time) had
        // started the task's next kernel: densenet-resnet152,
        // densenet-vgg and densenet-bert starved with a 50 µs gap
        // (docs/padding.md).
        //
        // Only while no later kernel of the task is on the device: the
        // scheduler hears of the device's events late (a GPU's completion
        // reaches the host after it happened; the daemon catches its
        // device up in steps), so the kernel it takes as running may
        // already have completed and its successor passed its check
        // before the flag and the kill landed. The kill then ends the
        // successor, whose blocks wrote part of its outputs, and those
        // may be the running kernel's inputs (buffers are reused: vgg's
        // kernel 70 writes what kernel 69 reads): the padded blocks of
        // the kernel would read them (`reef-bench hostile` on sim:mi50,
        // a stale answer). REEF pads only after the synchronous reset,
        // from the execution index it then reads (§3.1, §4.3): with no
        // later kernel launched on the stream there is no successor to
        // start, and the padded blocks recompute what the kernel computed
        // (counted from the launches, not the outstanding ones: a
        // completion heard under the flag does not count, so the kernel
        // may have ended with only its successors outstanding).
        // Unless the kernels after it on the device write nothing it reads
        // or writes (`ModelInfo::successors_clear`): then running its
        // blocks again after them still computes what it computed.
        // Or once the kill's outcome has been heard and no kernel after
        // the clear ones can write any more (`BeState::silent_from`, the
        // point REEF's synchronous reset establishes before it pads; see
        // `reset`).
        if self.drain_state(si) != reset::Drain::Clear {
            return None;
        }
        Some(self.plan_of(b, client, table))
    }

    /// The plan best-effort stream `si` would pad with now
    /// ([`Self::next_plan`]) and, unless that plan lies past its model's
    /// last kernel, the task it offers the selection. What `select_for`
    /// and [`Self::prepare`] both select over.
    pub(super) fn pad_task(&self, si: usize) -> Option<(Plan, Option<Task>)> {
        let (plan, client, m) = self.next_plan(si, &self.table)?;
        let task = (plan.kernel < self.models[m.0 as usize]).then_some((
            StreamId(si as u32),
            client,
            m,
            plan.kernel,
            plan.locked,
            plan.next_block,
        ));
        Some((plan, task))
    }

    /// The plan of `b` (its stored one, or one started from its credit or
    /// completed prefix), moved past a version whose blocks are all
    /// planned, with its client and model.
    pub(super) fn plan_of(
        &self,
        b: &BeState,
        client: ClientId,
        table: &DkpTable,
    ) -> (Plan, ClientId, ModelId) {
        let m = self.clients[client.0 as usize].model;
        let mut plan = b.plan.unwrap_or(match b.credit {
            Some(c) if c.kernel == b.done_upto => Plan {
                kernel: c.kernel,
                locked: Some(c.version),
                next_block: c.done,
            },
            _ => Plan {
                kernel: b.done_upto,
                locked: None,
                next_block: 0,
            },
        });
        if let Some(v) = plan.locked {
            if plan.next_block >= table.versions(m, plan.kernel)[v as usize].blocks {
                plan = Plan {
                    kernel: plan.kernel + 1,
                    locked: None,
                    next_block: 0,
                };
            }
        }
        (plan, client, m)
    }

    /// Runs the selection for the first kernel of each real-time model over
    /// the best-effort tasks as if they were preempted now, and discards the
    /// result: nothing the scheduler decides changes. A daemon that simulates the
    /// device between real-time requests calls this every few tens of
    /// microseconds, so that the selection a request's first kernel needs
    /// finds its code and data in the CPU caches (reefd's control path,
    /// docs/daemon.md). The selection itself is REEF §5.2. True when a
    /// best-effort task could pad, so that a selection ran.
    pub fn rehearse(&mut self) -> bool {
        let table = Arc::clone(&self.table);
        let mut cands: Vec<Candidate<'_>> = Vec::new();
        let core = self.inner.core();
        for (si, b) in self.be.iter().enumerate() {
            // Every best-effort task, as if preempted now: between real-time
            // requests none is, and the next request preempts them all.
            let s = StreamId(si as u32);
            let Some((_, client)) = b.req else { continue };
            if s != self.rt && core.has_request(s) {
                let (plan, _, m) = self.plan_of(b, client, &table);
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
        }
        if cands.is_empty() {
            return false;
        }
        for c in self.clients.iter().filter(|c| c.class == Class::RealTime) {
            let rt_char = &table.versions(c.model, 0)[0];
            let start = self.rr % cands.len();
            table
                .selector
                .select(rt_char, &cands, start, &mut self.padding);
        }
        true
    }

    /// Runs the selection policy for real-time kernel `tag` of `model` over
    /// the preempted, drained best-effort tasks, and commits the chosen
    /// block ranges to their plans.
    pub(super) fn select_for(&mut self, model: ModelId, tag: KernelTag) -> Option<PaddedLaunch> {
        self.last_refused = false;
        self.start_queued();
        // The selection's buffers are kept across calls (no allocation on
        // the decision path, [`crate::dkp::hot`]).
        let mut tasks = std::mem::take(&mut self.tasks);
        tasks.clear();
        for si in 0..self.be.len() {
            let Some((plan, task)) = self.pad_task(si) else {
                continue;
            };
            self.be[si].plan = Some(plan);
            tasks.extend(task);
        }
        if tasks.is_empty() {
            self.tasks = tasks;
            return None;
        }
        let start = self.rr % tasks.len();
        self.rr = self.rr.wrapping_add(1);
        // The selection made ahead for this kernel from these very tasks
        // ([`Self::prepare`]) is the one made now: taken, not repeated.
        let padded = match self
            .ahead
            .take(&self.table, model, tag.kernel, start, &tasks)
        {
            Some(padded) => {
                std::mem::swap(&mut self.padding, &mut self.ahead.padding);
                padded
            }
            None => {
                let cands = std::mem::take(&mut self.cands);
                let (padded, cands) = select_over(
                    &self.table,
                    self.inner.core(),
                    &tasks,
                    (model, tag.kernel),
                    start,
                    cands,
                    &mut self.padding,
                );
                self.cands = cands;
                padded
            }
        };
        if !padded {
            self.tasks = tasks;
            self.last_refused = true;
            return None;
        }
        let mut parts = Vec::with_capacity(self.padding.parts.len());
        for p in &self.padding.parts {
            let (s, client, m, k, _, _) = tasks[p.task];
            let k = k + p.ahead;
            let b = &mut self.be[s.0 as usize];
            let req = b.req.expect("eligible tasks have a request").0;
            let plan = b.plan.as_mut().expect("planned above");
            // A chained part (`chain`) comes after the part it follows:
            // the plan moves on to its kernel.
            plan.kernel = k;
            plan.locked = Some(p.version);
            plan.next_block = p.blocks.end;
            parts.push(BePart {
                stream: s,
                client,
                model: m,
                tag: KernelTag { req, kernel: k },
                version: p.version,
                blocks: p.blocks.clone(),
                cus: p.cus.clone(),
                per_cu: p.per_cu,
                extra: p.extra.clone(),
                after: p.after,
            });
        }
        self.tasks = tasks;
        Some(PaddedLaunch {
            stream: self.rt,
            tag,
            model,
            rt_cus: self.padding.rt_cus,
            proxy_level: self.padding.proxy_level,
            regs_per_thread: self.padding.regs_per_thread,
            lds: self.padding.lds,
            parts,
        })
    }
}

/// Runs the selection for real-time kernel `kernel` of `model` over
/// `tasks` from task `start` on into `out`, building the candidates in
/// `cands` (returned emptied, its allocation kept); whether any block was
/// chosen. What `select_for` and [`PaddingScheduler::prepare`] both run.
pub(super) fn select_over(
    table: &DkpTable,
    core: &crate::core::Core,
    tasks: &[Task],
    (model, kernel): (ModelId, u32),
    start: usize,
    cands: Vec<Candidate<'static>>,
    out: &mut Padding,
) -> (bool, Vec<Candidate<'static>>) {
    let rt_char = &table.versions(model, kernel)[0];
    let chains = table.selector.chains();
    let mut cands: Vec<Candidate<'_>> = recycle(cands);
    cands.extend(tasks.iter().map(|&(_, _, m, k, locked, next_block)| {
        let ks = &table.kernels[m.0 as usize];
        let l = if chains {
            let info = &core.models()[m.0 as usize];
            crate::dkp::chain::chain_len(k, ks.len() as u32, CHAIN_MAX, |i| {
                info.successors_clear(i)
            })
        } else {
            0
        };
        Candidate {
            versions: table.versions(m, k),
            locked,
            next_block,
            following: &ks[k as usize + 1..(k + 1 + l) as usize],
            rule1_floor: table.floors.get(m.0 as usize, k as usize),
        }
    }));
    let padded = table.selector.select(rt_char, &cands, start, out);
    (padded, recycle(cands))
}
