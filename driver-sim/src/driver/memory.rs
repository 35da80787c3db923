//! Device memory of the simulated driver: allocations (their bytes, held
//! lazily as a seed or as queued CPU-build slots), the lookups a kernel's
//! pointer goes through, and the host copies.

use super::*;

#[derive(Debug)]
pub(super) struct Alloc {
    /// The device whose memory holds it.
    pub(super) dev: usize,
    /// Shared with the CPU computations queued on it (crate::cpu): a
    /// completion takes a reference, not a copy, and a write while one is
    /// held copies the allocation first (copy on write), so weights, read
    /// by every inference and never written, are never copied.
    pub(super) data: Arc<Vec<u8>>,
    pub(super) owner: Owner,
    /// FNV-1a of `data`, computed when a kernel first reads the whole
    /// allocation and dropped at every write: weights are uploaded once and
    /// read by every inference, and hashing them again per kernel made a
    /// 100 MB model (ResNet-50's weights) cost ~0.3 s of host time per
    /// inference (measured: 330 ms stand-alone through reefd).
    pub(super) hash: Option<u64>,
    /// The allocation was last written whole by a kernel whose output is
    /// the `splitmix64` stream from this seed: `data` is stale and is
    /// generated only when the host reads it or writes part of it
    /// (filling every activation of a 143-kernel model per inference cost
    /// more host time than the simulated GPU time). Its hash is then the
    /// seed's, not the bytes': a buffer's hash follows its writes.
    pub(super) pending: Option<u64>,
    /// Parts a compiled kernel's CPU build will write (crate::cpu), in
    /// completion order, copied in when the allocation is next read or
    /// written. Never together with `pending` (that is generated first).
    pub(super) cpu: Vec<Arc<crate::cpu::Slot>>,
}

pub(super) fn generate(mut seed: u64, out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        let v = reef_sim::splitmix64(&mut seed).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

impl Alloc {
    pub(super) fn content_hash(&mut self, off: usize) -> u64 {
        if off != 0 {
            self.materialize();
            return fnv1a(&self.data[off..], CONTENT_SEED);
        }
        self.resolve_cpu();
        *self
            .hash
            .get_or_insert_with(|| fnv1a(&self.data, CONTENT_SEED))
    }

    pub(super) fn materialize(&mut self) {
        self.materialize_seed();
        self.resolve_cpu();
    }

    pub(super) fn materialize_seed(&mut self) {
        if let Some(seed) = self.pending.take() {
            match Arc::get_mut(&mut self.data) {
                Some(d) => generate(seed, d),
                // Shared with a queued computation: new bytes, no copy of
                // the old ones (all are overwritten).
                None => {
                    let mut d = vec![0; self.data.len()];
                    generate(seed, &mut d);
                    self.data = Arc::new(d);
                }
            }
        }
    }

    /// Copies in the bytes of the CPU computations queued on it (waiting
    /// for them).
    pub(super) fn resolve_cpu(&mut self) {
        for s in std::mem::take(&mut self.cpu) {
            let (off, len) = (s.off, s.len);
            s.overlay(off, &mut self.bytes_mut()[off..off + len]);
        }
    }

    /// A kernel wrote the allocation from `off` on with the stream of `seed`.
    pub(super) fn kernel_write(&mut self, off: usize, seed: u64) {
        if off == 0 {
            // The whole allocation is overwritten: queued parts are moot.
            self.cpu.clear();
            self.pending = Some(seed);
            self.hash = Some(fnv1a(
                &seed.to_le_bytes(),
                CONTENT_SEED ^ self.data.len() as u64,
            ));
        } else {
            self.materialize();
            generate(seed, &mut self.bytes_mut()[off..]);
            self.hash = None;
        }
    }

    /// Host write (or a kill's garbage) of `bytes` at `off`.
    pub(super) fn write(&mut self, off: usize, bytes: &[u8]) {
        self.materialize();
        self.bytes_mut()[off..off + bytes.len()].copy_from_slice(bytes);
        self.hash = None;
    }

    /// The bytes to change: copied first while a queued CPU computation
    /// holds them (its snapshot stays as it was at its kernel's completion).
    pub(super) fn bytes_mut(&mut self) -> &mut Vec<u8> {
        Arc::make_mut(&mut self.data)
    }

    pub(super) fn read(&self, off: usize, out: &mut [u8]) {
        match self.pending {
            Some(seed) => {
                let mut all = vec![0; off + out.len()];
                generate(seed, &mut all);
                out.copy_from_slice(&all[off..]);
            }
            None => out.copy_from_slice(&self.data[off..off + out.len()]),
        }
        for s in &self.cpu {
            s.overlay(off, out);
        }
    }
}

pub(super) const CONTENT_SEED: u64 = 0x0c04_7e47;

impl Driver {
    pub(super) fn find(&self, ptr: u64) -> Option<(u64, usize)> {
        let (&base, a) = self.allocs.range(..=ptr).next_back()?;
        let off = (ptr - base) as usize;
        (off < a.data.len()).then_some((base, off))
    }

    /// `ptr` as a kernel of context `ctx` sees it: only the context's own
    /// allocations and its modules' globals are mapped (module doc).
    pub(super) fn find_in(&self, ctx: u64, ptr: u64) -> Option<(u64, usize)> {
        let (base, off) = self.find(ptr)?;
        let mine = match self.allocs[&base].owner {
            Owner::User(c) => c == ctx,
            Owner::Global(m) => self.modules.get(&m).is_some_and(|m| m.ctx == ctx),
        };
        mine.then_some((base, off))
    }

    // --- memory -----------------------------------------------------------

    pub(super) fn alloc_raw(&mut self, dev: usize, bytes: usize, owner: Owner) -> R<u64> {
        if bytes == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        self.gpus[dev]
            .sim
            .alloc(bytes as u64)
            .map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        let base = self.next_addr;
        // Addresses are never reused, so every use after free is caught
        // (a real driver may hand the address out again).
        self.next_addr += (bytes as u64).div_ceil(ALIGN) * ALIGN;
        self.allocs.insert(
            base,
            Alloc {
                dev,
                data: Arc::new(vec![0; bytes]),
                owner,
                hash: None,
                pending: None,
                cpu: Vec::new(),
            },
        );
        Ok(base)
    }

    pub fn mem_alloc(&mut self, ctx: u64, bytes: usize) -> R<u64> {
        self.check_sticky(ctx)?;
        let dev = self.contexts[&ctx].dev;
        self.alloc_raw(dev, bytes, Owner::User(ctx))
    }

    pub fn mem_free(&mut self, ptr: u64) -> R<()> {
        if let Some(Owner::User(c)) = self.allocs.get(&ptr).map(|a| a.owner) {
            self.check_sticky(c)?;
        }
        match self.allocs.get(&ptr) {
            Some(a) if matches!(a.owner, Owner::User(_)) => {
                let a = self.allocs.remove(&ptr).unwrap();
                self.gpus[a.dev].sim.free(a.data.len() as u64);
                Ok(())
            }
            _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
    }

    /// (free, total) memory of the device of context `ctx` (an id from
    /// [`Driver::ctx`]).
    pub fn mem_info(&self, ctx: u64) -> (u64, u64) {
        self.device_memory(self.contexts[&ctx].dev)
    }

    /// (free, total) memory of device `dev`.
    pub fn device_memory(&self, dev: usize) -> (u64, u64) {
        let g = &self.gpus[dev];
        let total = g.spec.memory_bytes;
        (total - g.sim.memory_used(), total)
    }

    /// The allocation holding `n` bytes at `ptr`; the error of its
    /// context when that context is poisoned.
    pub(super) fn range(&self, ptr: u64, n: usize) -> R<(u64, usize)> {
        let (base, off) = self.find(ptr).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let owner = match self.allocs[&base].owner {
            Owner::User(c) => Some(c),
            Owner::Global(m) => self.modules.get(&m).map(|m| m.ctx),
        };
        if let Some(c) = owner {
            self.check_sticky(c)?;
        }
        if off + n > self.allocs[&base].data.len() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        Ok((base, off))
    }

    /// The last launch of the blocking streams that a synchronous copy in
    /// context `ctx` must wait for.
    pub fn blocking_work(&self, ctx: u64) -> Option<Launch> {
        self.streams
            .values()
            .filter(|s| s.ctx == ctx && s.blocking)
            .filter_map(|s| s.last)
            .filter(|l| self.inflight.contains_key(l))
            .max()
    }

    pub fn htod(&mut self, dst: u64, src: &[u8]) -> R<()> {
        if src.is_empty() {
            return Ok(());
        }
        let (base, off) = self.range(dst, src.len())?;
        let a = self.allocs.get_mut(&base).unwrap();
        a.write(off, src);
        if let Owner::Global(m) = a.owner {
            self.flag_changed(m);
        }
        Ok(())
    }

    pub fn dtoh(&self, dst: &mut [u8], src: u64) -> R<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let (base, off) = self.range(src, dst.len())?;
        self.allocs[&base].read(off, dst);
        Ok(())
    }
}
