//! REEF's AMD resets on the simulated GPU (REEF §4.5, Fig. 7 ❷ ❸), applied
//! by the hardware queue the KFD names: what the REEF driver patch
//! (rocm-patch/) does on a GFX9 GPU, reached here through the FUSE fake
//! KFD (reef-ioctl's `fake::kfd`, `gpu_request`) and the simulated
//! libamdhip64's link (libhip-sim/src/kfd.rs).
//!
//! - [`Driver::kill_hw_queues`]: the patch's WAVE_RESET is an SQ_CMD KILL
//!   limited to the caller's VMID; the running waves of every mapped queue
//!   of the process on that GPU end (the fake passes the mapped queues).
//!   Here each such queue's dispatched kernel is killed after the device's
//!   kill latency (`kill_latency_ns`, REEF §6.4: under 3 us): its blocks
//!   stop, its outputs are corrupted, and its completion fires (the CP
//!   retires a dispatch whose waves all ended, so the runtime's completion
//!   signal is decremented as for a finished one).
//! - [`Driver::clear_hw_queue`]: the patch's CLEAR_QUEUE turns every kernel
//!   dispatch between the queue's read and write dispatch ids into a
//!   barrier-AND packet that keeps the dispatch's completion signal. Here
//!   the kernels of the queue's streams not yet dispatched (queued on the
//!   device or held by the driver) are dropped without running, and the
//!   events after them complete.

use super::*;

impl Driver {
    /// The device and hardware queue of stream handle `h` (reef-sim's
    /// queue pool per priority; several streams share one past
    /// `hw_queues`).
    pub fn stream_hw_queue(&self, h: u64) -> R<(usize, u32)> {
        let s = self.stream(h)?;
        let q = self.gpus[s.dev]
            .sim
            .hw_queue_of(s.sim)
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        Ok((s.dev, q))
    }

    fn streams_on(&self, dev: usize, hwqs: &[u32]) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| {
                s.dev == dev
                    && self.gpus[dev]
                        .sim
                        .hw_queue_of(s.sim)
                        .is_some_and(|q| hwqs.contains(&q))
            })
            .map(|(&id, _)| id)
            .collect();
        v.sort_unstable();
        v
    }

    /// WAVE_RESET on hardware queues `hwqs` of device `dev` (module doc):
    /// the kernels of those queues with a block on the CUs are killed.
    /// Returns how many.
    pub fn kill_hw_queues(&mut self, dev: usize, hwqs: &[u32]) -> u64 {
        self.catch_up();
        let mut killed = 0;
        for sid in self.streams_on(dev, hwqs) {
            let sim_stream = self.streams[&sid].sim;
            let running = self
                .inflight
                .values()
                .any(|f| f.stream == sid && f.started_at.is_some() && f.sim_id.is_some());
            if running && self.gpus[dev].sim.kill_stream(sim_stream).is_ok() {
                killed += 1;
            }
        }
        killed
    }

    /// CLEAR_QUEUE on hardware queue `hwq` of device `dev` (module doc):
    /// its streams' kernels not yet dispatched never run. Returns how many.
    pub fn clear_hw_queue(&mut self, dev: usize, hwq: u32) -> u64 {
        self.catch_up();
        let mut cleared = 0;
        for sid in self.streams_on(dev, &[hwq]) {
            let sim_stream = self.streams[&sid].sim;
            // Reported as Cleared events at the next catch-up, which
            // drop them from `inflight` (device_event).
            if let Ok(ids) = self.gpus[dev].sim.clear_queue(sim_stream) {
                cleared += ids.len() as u64;
            }
            let held: Vec<Launch> = self
                .streams
                .get_mut(&sid)
                .map(|s| s.held.drain(..).collect())
                .unwrap_or_default();
            for l in held {
                if self.inflight.remove(&l).is_some() {
                    cleared += 1;
                    self.stats.evicted += 1;
                    self.gpus[dev].stats.evicted += 1;
                }
            }
        }
        self.catch_up();
        cleared
    }
}
