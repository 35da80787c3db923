//! Parts of a padded launch that wait for an earlier part
//! ([`super::KernelLaunch::after`]): a device-wide barrier between two
//! kernels run one after the other by the same persistent launch.
//!
//! The hardware behaviour modelled: a cooperative (persistent) kernel whose
//! threads run kernel `A`'s blocks and then, after a grid-wide barrier,
//! kernel `B`'s (CUDA C++ Programming Guide, Cooperative Groups, "Grid
//! Synchronization": `this_grid().sync()` in a kernel launched with
//! `cudaLaunchCooperativeKernel`, whose blocks must all be co-resident; HIP
//! provides the same, `hipLaunchCooperativeKernel` and
//! `cooperative_groups::grid_group::sync`). The barrier is a counter in
//! global memory that each arriving block increments atomically and the
//! waiting ones poll; `B`'s blocks start once the last of `A`'s has arrived
//! and the waiters have seen it, the caller's `delay` later. `A`'s writes
//! are visible to `B` after the barrier (the sync includes a device-scope
//! fence), so value tracking needs nothing more: `B` runs after `A`
//! completed.
//!
//! A waiting part places no block. The slots that wait keep no CU resource
//! in the model: the waiting part runs on its own CU set, which in a padded
//! launch is the part it waits for, and nothing else is placed there while
//! its launch runs; a caller that lets other launches onto those CUs gets
//! them placed in the barrier's gap, which the hardware would not allow.
//! If the stream's preempt flag is set, the waiting part's blocks exit at
//! their check like any other part's; a kill discards them as unplaced
//! blocks. If the part waited for does not complete (evicted or killed),
//! the waiting part is never released by it: it ends by the flag or the
//! kill that ended the other.

use super::{Ev, Sim};

impl Sim {
    /// Links each part of a freshly queued padded launch (`slots`, in the
    /// order of its parts) that waits for an earlier one.
    pub(super) fn link_after(&mut self, slots: &[u32]) {
        for (i, &slot) in slots.iter().enumerate() {
            let Some((a, delay)) = self.launches[slot as usize].req.after else {
                continue;
            };
            debug_assert!(a < i, "checked by launch_padded");
            self.launches[slot as usize].held = true;
            self.launches[slots[a] as usize].then = Some((slot, delay));
        }
    }

    /// Part `slot` completed: the part waiting for it, if any, is released
    /// after its barrier's delay.
    pub(super) fn passed(&mut self, slot: u32) {
        let Some((next, delay)) = self.launches[slot as usize].then.take() else {
            return;
        };
        let n = &self.launches[next as usize];
        if n.live && n.held {
            let gen = n.gen;
            self.schedule(self.now + delay, Ev::Release(next, gen));
        }
    }

    /// The barrier before part `slot` has passed: its blocks may be placed.
    pub(super) fn release(&mut self, slot: u32, gen: u32) {
        let l = &mut self.launches[slot as usize];
        if !l.live || l.gen != gen || !l.held {
            return;
        }
        l.held = false;
        l.scan = l.cus;
        self.place();
    }
}
