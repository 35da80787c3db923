//! What a completed kernel leaves in device memory: the stand-in function
//! of its inputs, a partly-run kernel's half-written outputs, or a compiled
//! kernel's CPU build (crate::cpu), with a split call's earlier passes
//! checked (module doc of driver.rs).

use super::*;

impl Driver {
    /// Fig. 8 line 3: the first block that passes the flag check stores
    /// the kernel's execution index in the module's `reef_exec_index`.
    pub(super) fn started(&mut self, l: Launch, t: u64) {
        let Some(f) = self.inflight.get_mut(&l) else {
            return;
        };
        f.started_at = Some(t);
        if f.fault {
            // An injected fault: the kernel's first access is illegal.
            let c = f.ctx;
            self.stats.faults += 1;
            let dev = f.dev;
            self.gpus[dev].stats.faults += 1;
            self.inflight.remove(&l);
            self.fault(c);
            return;
        }
        let (Some(idx), Some(m)) = (f.exec_index, self.modules.get(&f.module)) else {
            return;
        };
        if let Some(&(addr, 4)) = m.globals.get(INDEX_SYMBOL) {
            if let Some(a) = self.allocs.get_mut(&addr) {
                a.write(0, &idx.to_le_bytes());
            }
        }
    }

    /// A completed kernel's outputs: kernels cannot execute PTX here, so each
    /// written buffer (from the pointer to the end of its allocation) is
    /// filled with a deterministic function of the kernel's name, the bytes
    /// of every buffer it reads (pointer to end of allocation; each hashed
    /// with FNV-1a, cached per allocation until it is written) and its scalar
    /// arguments: `splitmix64` words seeded by an FNV-1a hash of them. Equal
    /// inputs give equal outputs; a kernel that did not run leaves its
    /// outputs as they were; a kernel that ran partly writes part of them
    /// ([`Self::finish_partial`]).
    pub(super) fn completed(&mut self, l: Launch) {
        let Some(mut f) = self.inflight.remove(&l) else {
            return;
        };
        if self.sticky.contains_key(&f.ctx) {
            return;
        }
        // Every block has been placed by its completion.
        if let Some(p) = f.skip_from.take() {
            f.skipped += f.blocks.saturating_sub(p);
        }
        let skipped = f.skipped.min(f.blocks);
        if self
            .modules
            .get(&f.module)
            .is_some_and(|m| m.parts.contains(&f.kernel))
        {
            if let Some(p) = self
                .streams
                .get_mut(&f.stream)
                .and_then(|s| s.parts.get_mut(&(f.module, f.kernel.clone())))
            {
                p.1 = skipped == 0;
            }
        }
        if let Some((k, ptrs)) = &f.cpu {
            // A split call whose earlier kernel did not run whole since
            // its launch: on a GPU the last pass reads that pass's stale
            // workspace, so its outputs are not the function's.
            let parts_whole = k.after.iter().all(|a| {
                self.streams
                    .get(&f.stream)
                    .and_then(|s| s.parts.get(&(f.module, a.clone())))
                    .is_some_and(|p| p.1)
            });
            if skipped > 0 || !parts_whole {
                // A partly-run compiled kernel: its CPU build computes
                // whole outputs only, so the blocks that did not run are
                // marked as a kill leaves them (stale bytes) and the part
                // that ran keeps its old bytes: corrupted either way until
                // it is executed again. After an earlier pass that did not
                // run whole, every byte written is marked.
                if skipped > 0 {
                    self.count_partial(f.dev, skipped, f.blocks);
                } else {
                    self.stats.split_stale += 1;
                }
                let writes: Vec<u64> = k.writes.iter().map(|&w| ptrs[w]).collect();
                for w in writes {
                    if let Some((base, off)) = self.find_in(f.ctx, w) {
                        let a = self.allocs.get_mut(&base).unwrap();
                        let n = a.data.len() - off;
                        let ran = if parts_whole {
                            (n as u64 * (f.blocks - skipped) as u64 / f.blocks.max(1) as u64)
                                as usize
                        } else {
                            0
                        };
                        a.write(off + ran, &vec![0xde; n - ran]);
                    }
                }
                return;
            }
            if self.compute(f.ctx, k, ptrs) {
                self.gpus[f.dev].stats.cpu_calls += 1;
                return;
            }
        }
        let mut h = fnv1a(f.kernel.as_bytes(), 0x5eef_c0da);
        for &r in &f.reads {
            match self.find_in(f.ctx, r) {
                Some((base, off)) => {
                    let c = self.allocs.get_mut(&base).unwrap().content_hash(off);
                    h = fnv1a(&c.to_le_bytes(), h);
                }
                None => {
                    self.stats.faults += 1;
                    self.fault(f.ctx);
                    return;
                }
            }
        }
        h = fnv1a(&f.scalars, h);
        if skipped > 0 {
            self.count_partial(f.dev, skipped, f.blocks);
        }
        for (i, &w) in f.writes.iter().enumerate() {
            let Some((base, off)) = self.find_in(f.ctx, w) else {
                self.stats.faults += 1;
                self.fault(f.ctx);
                return;
            };
            let seed = h ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let a = self.allocs.get_mut(&base).unwrap();
            if skipped == 0 {
                a.kernel_write(off, seed);
            } else {
                Self::finish_partial(a, off, seed, f.blocks - skipped, f.blocks);
            }
        }
    }

    /// A kernel that ran `ran` of its `blocks` blocks (the others exited at
    /// the flag check) wrote only their share of each output: the first
    /// `ran / blocks` of the buffer gets the complete run's bytes, the rest
    /// keeps what it held. Its outputs differ from a complete run's (they
    /// are corrupted) until it is executed again.
    pub(super) fn finish_partial(a: &mut Alloc, off: usize, seed: u64, ran: u32, blocks: u32) {
        let n = a.data.len() - off;
        let mut full = vec![0u8; n];
        generate(seed, &mut full);
        let part = (n as u64 * ran as u64 / blocks.max(1) as u64) as usize;
        a.write(off, &full[..part]);
    }

    pub(super) fn count_partial(&mut self, dev: usize, skipped: u32, blocks: u32) {
        for st in [&mut self.stats, &mut self.gpus[dev].stats] {
            st.partial += 1;
            st.blocks_exited += skipped as u64;
            st.blocks_ran_partial += (blocks - skipped) as u64;
        }
    }

    /// A compiled kernel's real function (crate::cpu): its TIR function's
    /// CPU build, queued to the CPU worker with its arguments' bytes
    /// (shared, copied on a later write: [`Alloc::data`]); each written argument's allocation gets a slot the worker
    /// fills. `false` when it cannot run (an argument past its
    /// allocation): the caller falls back to the stand-in function.
    pub(super) fn compute(
        &mut self,
        ctx: u64,
        k: &Arc<crate::cpu::CpuKernel>,
        ptrs: &[u64],
    ) -> bool {
        let mut places = Vec::with_capacity(ptrs.len());
        for (&p, (_, dt, shape)) in ptrs.iter().zip(&k.args) {
            let need = dt.bytes_for(shape);
            let Some((base, off)) = self.find_in(ctx, p) else {
                self.stats.faults += 1;
                self.fault(ctx);
                return true;
            };
            if off + need > self.allocs[&base].data.len() {
                return false;
            }
            places.push((base, off, need));
        }
        let mut inputs = Vec::with_capacity(places.len());
        for &(base, off, need) in &places {
            let a = self.allocs.get_mut(&base).unwrap();
            a.materialize_seed();
            let slots = a
                .cpu
                .iter()
                .filter(|s| s.overlaps(off, need))
                .cloned()
                .collect();
            // The allocation's bytes as they are now, shared (no copy on
            // the driver's path).
            inputs.push(crate::cpu::Input {
                data: a.data.clone(),
                off,
                len: need,
                slots,
            });
        }
        let mut outputs = Vec::with_capacity(k.writes.len());
        for &w in &k.writes {
            let (base, off, need) = places[w];
            let slot = crate::cpu::Slot::new(off, need);
            let a = self.allocs.get_mut(&base).unwrap();
            // Earlier slots inside this one are overwritten whole by it
            // (jobs queued before keep theirs): an activation no host copy
            // ever reads kept every inference's bytes until it was.
            a.cpu.retain(|s| s.off < off || s.off + s.len > off + need);
            a.cpu.push(slot.clone());
            a.hash = None;
            outputs.push((w, slot));
        }
        crate::cpu::submit(crate::cpu::Job {
            kernel: k.clone(),
            inputs,
            outputs,
        });
        self.stats.cpu_calls += 1;
        true
    }
}
