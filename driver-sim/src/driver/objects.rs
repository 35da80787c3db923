//! Modules, functions, globals, the preempt flag's mirror, streams and
//! events of the simulated driver.

use super::*;

impl Driver {
    /// REEF Fig. 8 lines 1-2: a kernel whose module's flag is set exits at
    /// its entry check. reef-sim models the check per stream, so each
    /// stream carries the flag of the modules whose functions it has
    /// launched (their OR). This is exact when a stream runs the functions
    /// of one module, as reefd's streams do (one module instance per stream
    /// and model, backend/cuda_launch.rs); a stream that mixes modules
    /// would see a kernel evicted while another module's flag is set, which
    /// a GPU would not do. The flag of one module never reaches a stream
    /// that has not launched it (a preemption of one stream leaves the
    /// others of its context running).
    pub(super) fn flag_changed(&mut self, module: u64) {
        let Some(ctx) = self.modules.get(&module).map(|m| m.ctx) else {
            return;
        };
        let streams: Vec<u64> = self.contexts[&ctx]
            .streams
            .iter()
            .copied()
            .filter(|s| {
                self.streams
                    .get(s)
                    .is_some_and(|s| s.modules.contains(&module))
            })
            .collect();
        for s in streams {
            self.mirror_flag(s);
        }
    }

    pub(super) fn mirror_flag(&mut self, stream: u64) {
        let s = &self.streams[&stream];
        let (dev, sim, on) = (s.dev, s.sim, s.modules.iter().any(|&m| self.module_flag(m)));
        if self.gpus[dev].sim.preempt_flag(sim) == on {
            return;
        }
        // gv100/h100/mi50 presets all have level 2.
        let _ = self.gpus[dev].sim.set_preempt_flag(sim, on);
        // Per block (module doc): blocks placed from now while the flag is
        // set exit at entry.
        let sim = &self.gpus[dev].sim;
        for f in self.inflight.values_mut().filter(|f| f.stream == stream) {
            let placed = f.sim_id.and_then(|id| sim.blocks_placed(id)).unwrap_or(0);
            if on {
                f.skip_from = Some(placed);
            } else if let Some(p) = f.skip_from.take() {
                f.skipped += placed.saturating_sub(p);
            }
        }
    }

    pub(super) fn module_flag(&self, m: u64) -> bool {
        self.modules.get(&m).is_some_and(|m| {
            m.globals
                .get(FLAG_SYMBOL)
                .and_then(|&(addr, _)| self.allocs.get(&addr))
                .is_some_and(|a| a.data.iter().any(|&b| b != 0))
        })
    }

    // --- modules ----------------------------------------------------------

    pub fn module_load(&mut self, ctx: u64, image: &[u8]) -> R<u64> {
        self.check_sticky(ctx)?;
        let text = std::str::from_utf8(image).map_err(|_| CUresult::CUDA_ERROR_INVALID_IMAGE)?;
        let parsed = ptx::parse(text).map_err(|_| CUresult::CUDA_ERROR_INVALID_PTX)?;
        // A compiled model's CPU build; a module whose library cannot be
        // loaded keeps the stand-in function (and says so once).
        let cpu = crate::cpu::load(text).unwrap_or_else(|e| {
            eprintln!("reef-driver-sim: kernels keep stand-in values: {e}");
            HashMap::new()
        });
        self.module_load_parsed(ctx, parsed, cpu)
    }

    /// A module already read by the library's own loader (PTX for the
    /// simulated libcuda, an AMDGPU code object for the simulated
    /// libamdhip64): its entries, globals (allocated on the context's
    /// device) and the CPU build of its compiled kernels.
    pub fn module_load_parsed(
        &mut self,
        ctx: u64,
        parsed: ptx::Module,
        cpu: HashMap<String, Arc<crate::cpu::CpuKernel>>,
    ) -> R<u64> {
        self.check_sticky(ctx)?;
        let id = self.fresh();
        let dev = self.contexts[&ctx].dev;
        let mut globals = HashMap::new();
        for g in &parsed.globals {
            let addr = self.alloc_raw(dev, g.size.max(1), Owner::Global(id))?;
            globals.insert(g.name.clone(), (addr, g.size));
        }
        self.modules.insert(
            id,
            Module {
                ctx,
                entries: parsed.entries,
                parts: cpu.values().flat_map(|k| k.after.iter().cloned()).collect(),
                cpu,
                globals,
                functions: Vec::new(),
            },
        );
        self.contexts.get_mut(&ctx).unwrap().modules.push(id);
        Ok(handle(Kind::Module, id))
    }

    /// A live module of a context without a sticky error.
    pub(super) fn module(&self, h: u64) -> R<u64> {
        let id = id_of(Kind::Module, h)
            .filter(|id| self.modules.contains_key(id))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        self.check_sticky(self.modules[&id].ctx)?;
        Ok(id)
    }

    pub(super) fn unload(&mut self, id: u64) {
        let Some(m) = self.modules.remove(&id) else {
            return;
        };
        for f in m.functions {
            self.functions.remove(&f);
        }
        for (addr, _) in m.globals.values() {
            if let Some(a) = self.allocs.remove(addr) {
                self.gpus[a.dev].sim.free(a.data.len() as u64);
            }
        }
        if let Some(c) = self.contexts.get_mut(&m.ctx) {
            c.modules.retain(|&x| x != id);
        }
        let streams: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.modules.contains(&id))
            .map(|(&k, _)| k)
            .collect();
        for k in streams {
            self.streams
                .get_mut(&k)
                .unwrap()
                .modules
                .retain(|&x| x != id);
            self.mirror_flag(k);
        }
    }

    pub fn module_unload(&mut self, h: u64) -> R<()> {
        let id = self.module(h)?;
        self.unload(id);
        Ok(())
    }

    pub fn module_function(&mut self, h: u64, name: &str) -> R<u64> {
        let id = self.module(h)?;
        let entry = self.modules[&id]
            .entries
            .iter()
            .position(|e| e.name == name)
            .ok_or(CUresult::CUDA_ERROR_NOT_FOUND)?;
        let f = self.fresh();
        self.functions.insert(f, Function { module: id, entry });
        self.modules.get_mut(&id).unwrap().functions.push(f);
        Ok(handle(Kind::Function, f))
    }

    pub fn module_global(&self, h: u64, name: &str) -> R<(u64, usize)> {
        let id = self.module(h)?;
        self.modules[&id]
            .globals
            .get(name)
            .copied()
            .ok_or(CUresult::CUDA_ERROR_NOT_FOUND)
    }

    /// The byte sizes of a function's parameters (what the launch reads
    /// from `kernelParams`).
    pub fn param_sizes(&self, f: u64) -> R<Vec<usize>> {
        let (m, e) = self.entry(f)?;
        Ok(self.modules[&m].entries[e]
            .params
            .iter()
            .map(|p| p.size)
            .collect())
    }

    pub(super) fn entry(&self, f: u64) -> R<(u64, usize)> {
        let func = id_of(Kind::Function, f)
            .and_then(|id| self.functions.get(&id))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        Ok((func.module, func.entry))
    }

    // --- streams and events -----------------------------------------------

    /// A stream of context `ctx` with CUDA priority `priority` (clamped
    /// into [`STREAM_PRIORITY_GREATEST`, `STREAM_PRIORITY_LEAST`]; lower is
    /// greater). reef-sim places the pending blocks of a higher simulator
    /// priority first, so the priority is negated.
    pub fn stream_create(&mut self, ctx: u64, flags: u32, priority: i32) -> R<u64> {
        self.check_sticky(ctx)?;
        if flags & !1 != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let p = priority.clamp(STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST);
        let dev = self.contexts[&ctx].dev;
        let s = self.gpus[dev]
            .sim
            .create_stream(-p, STREAM_QUEUE_DEPTH)
            .map_err(|_| CUresult::CUDA_ERROR_UNKNOWN)?;
        let id = self.fresh();
        self.streams.insert(
            id,
            Stream {
                ctx,
                dev,
                sim: s,
                blocking: flags & 1 == 0,
                last: None,
                held: Default::default(),
                modules: Vec::new(),
                parts: HashMap::new(),
            },
        );
        self.contexts.get_mut(&ctx).unwrap().streams.push(id);
        Ok(handle(Kind::Stream, id))
    }

    pub(super) fn stream(&self, h: u64) -> R<&Stream> {
        id_of(Kind::Stream, h)
            .and_then(|id| self.streams.get(&id))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
    }

    pub fn stream_destroy(&mut self, h: u64) -> R<()> {
        let ctx = self.stream(h)?.ctx;
        self.check_sticky(ctx)?;
        let id = id_of(Kind::Stream, h).unwrap();
        self.streams.remove(&id);
        if let Some(c) = self.contexts.get_mut(&ctx) {
            c.streams.retain(|&s| s != id);
        }
        Ok(())
    }

    /// The stream's context and last launch (what a synchronize waits for).
    pub fn stream_last(&self, h: u64) -> R<(u64, Option<Launch>)> {
        let s = self.stream(h)?;
        self.check_sticky(s.ctx)?;
        Ok((s.ctx, s.last))
    }

    pub fn event_create(&mut self, ctx: u64, flags: u32) -> R<u64> {
        self.check_sticky(ctx)?;
        // CU_EVENT_DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS.
        if flags & !0x7 != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let id = self.fresh();
        self.events.insert(id, Event { ctx, target: None });
        Ok(handle(Kind::Event, id))
    }

    pub(super) fn event_id(&self, h: u64) -> R<u64> {
        id_of(Kind::Event, h)
            .filter(|id| self.events.contains_key(id))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
    }

    pub fn event_record(&mut self, ev: u64, stream: u64) -> R<()> {
        let id = self.event_id(ev)?;
        let s = self.stream(stream)?;
        self.check_sticky(s.ctx)?;
        if s.ctx != self.events[&id].ctx {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        let last = s.last;
        self.events.get_mut(&id).unwrap().target = last;
        Ok(())
    }

    /// The event's context and the launch it waits for (`None`: complete).
    pub fn event_target(&self, ev: u64) -> R<(u64, Option<Launch>)> {
        let id = self.event_id(ev)?;
        self.check_sticky(self.events[&id].ctx)?;
        Ok((self.events[&id].ctx, self.events[&id].target))
    }

    pub fn event_done(&mut self, ev: u64) -> R<bool> {
        self.catch_up();
        let (ctx, target) = self.event_target(ev)?;
        self.check_sticky(ctx)?;
        Ok(match target {
            Some(l) => !self.inflight.contains_key(&l),
            None => true,
        })
    }

    pub fn event_destroy(&mut self, ev: u64) -> R<()> {
        let id = self.event_id(ev)?;
        self.check_sticky(self.events[&id].ctx)?;
        self.events.remove(&id);
        Ok(())
    }
}
