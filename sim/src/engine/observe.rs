//! What the caller can read of the device state: CU usage, resident
//! blocks, the DRAM and L2 load (docs/simulator.md "Shared memory
//! bandwidth", "L2 capacity"), the value tracker's buffers
//! (docs/simulator.md "Value tracking"), device memory allocation, block
//! records, and the invariant check used by tests.

use super::{blocks_of, unpack, BlockRecord, CuUsage, LaunchId, Sim, SimError, Tags};
use crate::cuset::CuSet;
use crate::values::ValueTracker;

impl Sim {
    /// Buffer values (value tracking).
    pub fn values(&self) -> &ValueTracker {
        &self.values
    }

    /// Mutable buffer values (to set inputs).
    pub fn values_mut(&mut self) -> &mut ValueTracker {
        &mut self.values
    }

    /// Resources in use on a CU.
    pub fn cu_usage(&self, cu: usize) -> CuUsage {
        unpack(self.usage[cu])
    }

    /// CUs with at least one resident block.
    pub fn busy_cus(&self) -> usize {
        self.busy
    }

    /// The set of CUs with at least one resident block.
    pub fn busy_cu_set(&self) -> CuSet {
        self.usage
            .iter()
            .enumerate()
            .filter(|(_, &u)| blocks_of(u) > 0)
            .map(|(i, _)| i)
            .collect()
    }

    /// Blocks resident on the device.
    pub fn resident_blocks(&self) -> u64 {
        self.usage.iter().map(|&u| blocks_of(u) as u64).sum()
    }

    /// DRAM bandwidth the resident blocks draw now, as a fraction of the
    /// device's `memory_bandwidth_bytes_per_s` (docs/simulator.md "Shared
    /// memory bandwidth"). Above 1 the bandwidth is oversubscribed.
    pub fn dram_load(&self) -> f64 {
        self.dram_rate as f64 / self.spec.memory_bandwidth_bytes_per_s as f64
    }

    /// The summed footprints of the launches with resident blocks, as a
    /// fraction of the preset's `l2_bytes` (docs/simulator.md "L2
    /// capacity"); 0 when the preset has no L2 term. Above 1 the resident
    /// launches' data cannot all stay in the L2.
    pub fn l2_load(&self) -> f64 {
        if self.spec.l2_bytes == 0 {
            return 0.0;
        }
        self.l2_used as f64 / self.spec.l2_bytes as f64
    }

    /// The largest [`Sim::l2_load`] any placement saw so far.
    pub fn l2_load_peak(&self) -> f64 {
        if self.spec.l2_bytes == 0 {
            return 0.0;
        }
        self.l2_peak as f64 / self.spec.l2_bytes as f64
    }

    /// Every resident block group now: its launch, the launch's tags,
    /// the CUs it occupies and its blocks on each of them. For observers
    /// that account device time from the event trace (`reef-bench
    /// lost`): between two events the resident groups do not change.
    pub fn for_each_resident(&self, mut f: impl FnMut(LaunchId, &Tags, &CuSet, u32)) {
        for g in self.groups.iter().filter(|g| g.live) {
            let l = &self.launches[g.launch as usize];
            f(l.id, &l.req.tags, &g.cus, g.per_cu);
        }
    }

    /// The largest [`Sim::dram_load`] any placement saw so far.
    pub fn dram_load_peak(&self) -> f64 {
        self.dram_peak as f64 / self.spec.memory_bandwidth_bytes_per_s as f64
    }

    /// Reserves device memory (model weights, activations); fails when the
    /// device's `memory_bytes` would be exceeded.
    pub fn alloc(&mut self, bytes: u64) -> Result<(), SimError> {
        let total = self.spec.memory_bytes;
        let free = total - self.memory_used;
        if bytes > free {
            return Err(SimError::OutOfMemory {
                requested: bytes,
                free,
                total,
            });
        }
        self.memory_used += bytes;
        Ok(())
    }

    /// Releases device memory reserved with [`Sim::alloc`].
    pub fn free(&mut self, bytes: u64) {
        self.memory_used = self.memory_used.saturating_sub(bytes);
    }

    /// Device memory in use.
    pub fn memory_used(&self) -> u64 {
        self.memory_used
    }

    /// Kernels completed so far.
    pub fn completed_kernels(&self) -> u64 {
        self.completed
    }

    /// Blocks of live launch `id` placed on compute units so far (`None`:
    /// not live). reef-libcuda-sim reads it when a preempt flag changes,
    /// to know which blocks passed the check (issue 26), without keeping
    /// every block record for a process's life.
    pub fn blocks_placed(&self, id: LaunchId) -> Option<u32> {
        let l = self.launches.get((id.0 & 0xffff_ffff) as usize)?;
        (l.live && l.id == id).then(|| l.next_block - l.start)
    }

    /// Recorded block groups (with [`SimConfig::record_blocks`]).
    pub fn block_records(&self) -> &[BlockRecord] {
        &self.records
    }

    /// Checks that no CU exceeds its limits and that per-CU usage equals the
    /// sum over the resident block groups. For tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let s = &self.spec;
        let mut sum = vec![CuUsage::default(); self.usage.len()];
        for g in self.groups.iter().filter(|g| g.live) {
            let sh = &self.launches[g.launch as usize].req.shape;
            for cu in g.cus.iter() {
                let u = &mut sum[cu];
                u.threads += g.per_cu * sh.threads_per_block;
                u.waves += g.per_cu * sh.waves_per_block;
                u.blocks += g.per_cu;
                u.lds += g.per_cu * sh.lds_per_block;
                u.regs += g.per_cu * sh.regs_per_block;
            }
        }
        for (cu, (&p, e)) in self.usage.iter().zip(&sum).enumerate() {
            let u = &unpack(p);
            if u != e {
                return Err(format!("CU {cu}: usage {u:?} != resident groups {e:?}"));
            }
            if u.threads > s.max_threads_per_cu
                || u.waves > s.max_waves_per_cu
                || u.blocks > s.max_blocks_per_cu
                || u.lds > s.lds_bytes_per_cu
                || u.regs > s.registers_per_cu
            {
                return Err(format!("CU {cu} over its limits: {u:?}"));
            }
        }
        let rate: u128 = self.groups.iter().filter(|g| g.live).map(|g| g.rate).sum();
        if rate != self.dram_rate {
            return Err(format!(
                "DRAM draw {} B/s != resident groups' {rate} B/s",
                self.dram_rate
            ));
        }
        let l2: u128 = self
            .launches
            .iter()
            .filter(|l| !l.groups.is_empty())
            .map(|l| l.req.shape.footprint_bytes as u128)
            .sum();
        if l2 != self.l2_used || self.launches.iter().any(|l| l.in_l2 == l.groups.is_empty()) {
            return Err(format!(
                "L2 footprint {} B != resident launches' {l2} B",
                self.l2_used
            ));
        }
        let busy = self.usage.iter().filter(|&&u| blocks_of(u) > 0).count();
        if busy != self.busy {
            return Err(format!("busy CU count {} != {busy}", self.busy));
        }
        for (i, st) in self.streams.iter().enumerate() {
            if st.dq.len() > st.capacity {
                return Err(format!(
                    "stream {i}: device queue holds {} > capacity {}",
                    st.dq.len(),
                    st.capacity
                ));
            }
        }
        Ok(())
    }
}
