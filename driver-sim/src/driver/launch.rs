//! `cuLaunchKernel`'s checks and the launch's way to the simulated GPU.

use super::*;

impl Driver {
    // --- launch -------------------------------------------------------------

    /// Checks a launch as the driver does. Returns the sim stream to wait on
    /// when its queue is full, or the launch.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        ctx: u64,
        f: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: u64,
        args: &[Vec<u8>],
    ) -> R<Result<Launch, u64>> {
        self.check_sticky(ctx)?;
        let (m, e) = self.entry(f)?;
        let s = self.stream(stream)?;
        let (s_ctx, dev) = (s.ctx, s.dev);
        if s_ctx != self.modules[&m].ctx || ctx != s_ctx {
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        let spec = &self.gpus[dev].spec;
        let threads = block.iter().map(|&d| d as u64).product::<u64>();
        let blocks = grid.iter().map(|&d| d as u64).product::<u64>();
        if block.contains(&0)
            || grid.contains(&0)
            || block.iter().zip(MAX_BLOCK_DIM).any(|(&d, m)| d > m)
            || grid.iter().zip(MAX_GRID_DIM).any(|(&d, m)| d > m)
            || threads > MAX_THREADS_PER_BLOCK as u64
            || blocks > u32::MAX as u64
        {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // A full stream blocks the caller, who tries again: not a launch yet.
        if self.stream_full(stream)? {
            return Ok(Err(stream));
        }
        let entry = &self.modules[&m].entries[e];
        let count = self.launches_by_name.entry(entry.name.clone()).or_default();
        *count += 1;
        let count = *count;
        if self.fail_launch.as_ref() == Some(&(entry.name.clone(), count)) {
            return Err(CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
        }
        let fault = match self
            .fault_launch
            .iter()
            .position(|(n, c)| *n == entry.name && *c == count)
        {
            Some(i) => {
                self.fault_launch.swap_remove(i);
                true
            }
            None => false,
        };
        let entry = &self.modules[&m].entries[e];
        let work = entry.work.clone().unwrap_or(ptx::Work {
            // No recorded work: the simulator's floor per block.
            block_ns: spec.min_block_ns,
            flops: None,
            bytes: 0,
            regs_per_thread: 0,
            shared_bytes: 0,
            reads: (0..entry.params.len())
                .filter(|&i| entry.params[i].size == 8)
                .collect(),
            writes: Vec::new(),
        });
        let shared_total = shared.saturating_add(work.shared_bytes);
        if shared_total > MAX_SHARED_PER_BLOCK {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let regs = work.regs_per_thread as u64 * threads;
        if work.regs_per_thread > MAX_REGS_PER_THREAD || regs > spec.registers_per_cu as u64 {
            return Err(CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
        }
        if args.len() != entry.params.len()
            || args
                .iter()
                .zip(&entry.params)
                .any(|(a, p)| a.len() != p.size)
        {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let ptr = |i: usize| u64::from_le_bytes(args[i][..8].try_into().unwrap());
        let pointer_ok = |i: &usize| entry.params[*i].size == 8;
        if !work.reads.iter().chain(&work.writes).all(pointer_ok) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let mut exec_index = None;
        let mut scalars = Vec::new();
        for (i, p) in entry.params.iter().enumerate() {
            if p.name == INDEX_PARAM && p.size == 4 {
                exec_index = Some(u32::from_le_bytes(args[i][..4].try_into().unwrap()));
            } else if !work.reads.contains(&i) && !work.writes.contains(&i) {
                scalars.extend_from_slice(&args[i]);
            }
        }
        let (regs, curve) = block_curve(&work, blocks as u32, threads as u32, shared_total, spec)
            .unwrap_or((regs, vec![work.block_ns]));
        let shape = KernelShape::synthetic(
            &entry.name,
            blocks as u32,
            threads as u32,
            shared_total,
            regs as u32,
            curve,
            spec,
        )
        .map_err(|_| CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)?;
        let sid = id_of(Kind::Stream, stream).unwrap();
        let kl = KernelLaunch::new(Arc::new(shape), Tags::default());
        let fl = InFlight {
            ctx,
            dev,
            stream: sid,
            req: Some(kl.clone()),
            launch: kl,
            blocks: blocks as u32,
            sim_id: None,
            skipped: 0,
            skip_from: None,
            fault,
            started_at: None,
            module: m,
            kernel: entry.name.clone(),
            exec_index,
            reads: work.reads.iter().map(|&i| ptr(i)).collect(),
            writes: work.writes.iter().map(|&i| ptr(i)).collect(),
            scalars,
            cpu: self.modules[&m].cpu.get(&entry.name).and_then(|k| {
                // Own parameters, and those of the call's earlier kernels
                // as they were last launched on this stream.
                let parts = &self.streams[&sid].parts;
                k.args
                    .iter()
                    .zip(&k.carried_by)
                    .map(|(a, by)| match by {
                        None => pointer_ok(&a.0).then(|| ptr(a.0)),
                        Some(by) => parts.get(&(m, by.clone()))?.0.get(a.0).copied().flatten(),
                    })
                    .collect::<Option<Vec<u64>>>()
                    .map(|ptrs| (k.clone(), ptrs))
            }),
        };
        if self.modules[&m].parts.contains(&entry.name) {
            let ptrs = (0..args.len())
                .map(|i| pointer_ok(&i).then(|| ptr(i)))
                .collect();
            self.streams
                .get_mut(&sid)
                .unwrap()
                .parts
                .insert((m, entry.name.clone()), (ptrs, false));
        }
        if !self.streams[&sid].modules.contains(&m) {
            // The kernel reads its own module's flag at entry.
            self.streams.get_mut(&sid).unwrap().modules.push(m);
            self.mirror_flag(sid);
        }
        // Held until its context runs on the device (time slicing; at once
        // when it already does).
        let l = self.next_launch;
        self.next_launch += 1;
        self.stats.launches += 1;
        self.gpus[dev].stats.launches += 1;
        self.inflight.insert(l, fl);
        let st = self.streams.get_mut(&sid).unwrap();
        st.held.push_back(l);
        st.last = Some(l);
        self.pump(dev);
        Ok(Ok(l))
    }
}
