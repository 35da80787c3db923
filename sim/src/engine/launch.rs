//! Accepting launches: validating a request against the device, enqueueing
//! it on its stream's device queue after `host_launch_ns` (docs/simulator.md
//! "Launch path"), and padded launches whose parts run on disjoint CU sets
//! as one `dkp` kernel (REEF §5.1, Fig. 12; each block charged the dkp
//! kernel's overhead, REEF §6.5 Fig. 25), possibly behind grid-wide
//! barriers (the `after` module), and statically fused launches (Aker
//! §5.4) placed the same way without that overhead.

use super::{unit_of, Ev, KernelLaunch, LState, Launch, LaunchId, Sim, SimError, StreamId};
use crate::cuset::CuSet;
use crate::shape::KernelShape;

impl Sim {
    /// Enqueues a kernel on a stream's device queue.
    pub fn launch(&mut self, s: StreamId, req: KernelLaunch) -> Result<LaunchId, SimError> {
        let st = self.stream(s)?;
        if st.dq.len() >= st.capacity {
            return Err(SimError::QueueFull {
                stream: s.0,
                capacity: st.capacity,
            });
        }
        if let Some((after, _)) = req.after {
            return Err(SimError::BadAfter { part: 0, after });
        }
        let (start, end, cus) = self.check_launch(&req)?;
        let st = &mut self.streams[s.0 as usize];
        let visible_at = st.host_free_at.max(self.now) + self.spec.host_launch_ns;
        st.host_free_at = visible_at;
        let slot = self.alloc_launch(s, req, start, end, cus, visible_at);
        self.streams[s.0 as usize].dq.push_back(slot);
        let q = self.streams[s.0 as usize].hwq;
        self.schedule(visible_at, Ev::Stream(q));
        Ok(self.launches[slot as usize].id)
    }

    /// Enqueues a padded launch (REEF §5.1, Fig. 12: one `dkp` kernel whose
    /// blocks run a real-time kernel and best-effort kernels): the parts
    /// occupy one device-queue slot, are fetched and dispatched once, and
    /// become runnable together, part 0 placed first. Each part has its own
    /// block range, CU set, buffers and tags, and its own events and id; the
    /// stream's next kernel is dispatched when every part has finished. The
    /// preempt flag evicts all parts; a kill kills the parts still running.
    ///
    /// Every block of every part (those waiting at a barrier, `after`,
    /// included: they run inside the same kernel) runs the dkp kernel's
    /// branch on the CU partition and the set-up of its global function
    /// pointer before the part's own code, and takes
    /// [`crate::PADDED_LAUNCH_OVERHEAD_PPM`] longer than the same block
    /// launched plain (REEF §6.5 Fig. 25, 0.8 % of execution time; §5.1,
    /// "around 1%").
    pub fn launch_padded(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, SimError> {
        self.launch_parts(s, parts, true)
    }

    /// Enqueues a statically fused launch (Aker §5.4, Fig. 7: one kernel
    /// compiled from its components, each running its blocks on its share
    /// of every CU): queued, dispatched, placed and ended exactly as a
    /// padded launch ([`Sim::launch_padded`]), but its blocks pay no
    /// padded-launch overhead, since the fused kernel calls its components'
    /// code directly (no function pointer, no branch on a CU partition).
    pub fn launch_fused(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
    ) -> Result<Vec<LaunchId>, SimError> {
        self.launch_parts(s, parts, false)
    }

    /// A multi-part launch; `dkp`: run through the dkp kernel (each block
    /// charged the padded-launch overhead).
    fn launch_parts(
        &mut self,
        s: StreamId,
        parts: Vec<KernelLaunch>,
        dkp: bool,
    ) -> Result<Vec<LaunchId>, SimError> {
        let st = self.stream(s)?;
        if st.dq.len() >= st.capacity {
            return Err(SimError::QueueFull {
                stream: s.0,
                capacity: st.capacity,
            });
        }
        if parts.is_empty() {
            return Err(SimError::EmptyPaddedLaunch);
        }
        let mut checked = Vec::with_capacity(parts.len());
        for (i, req) in parts.iter().enumerate() {
            if let Some((after, _)) = req.after.filter(|&(a, _)| a >= i) {
                return Err(SimError::BadAfter { part: i, after });
            }
            checked.push(self.check_launch(req)?);
        }
        let st = &mut self.streams[s.0 as usize];
        let visible_at = st.host_free_at.max(self.now) + self.spec.host_launch_ns;
        st.host_free_at = visible_at;
        let nparts = parts.len() as u32;
        let mut slots = Vec::with_capacity(parts.len());
        let mut ids = Vec::with_capacity(parts.len());
        for (req, (start, end, cus)) in parts.into_iter().zip(checked) {
            let slot = self.alloc_launch(s, req, start, end, cus, visible_at);
            self.launches[slot as usize].dkp = dkp;
            ids.push(self.launches[slot as usize].id);
            slots.push(slot);
        }
        let leader = slots[0];
        for &slot in &slots {
            self.launches[slot as usize].leader = leader;
        }
        self.link_after(&slots);
        let l = &mut self.launches[leader as usize];
        l.parts_left = nparts;
        l.followers = slots[1..].to_vec();
        self.streams[s.0 as usize].dq.push_back(leader);
        let q = self.streams[s.0 as usize].hwq;
        self.schedule(visible_at, Ev::Stream(q));
        Ok(ids)
    }

    /// Validates one launch: (first block, end block, allowed CUs).
    pub(super) fn check_launch(&self, req: &KernelLaunch) -> Result<(u32, u32, CuSet), SimError> {
        let nb = req.shape.blocks;
        let (start, end) = match &req.blocks {
            Some(r) => (r.start, r.end),
            None => (0, nb),
        };
        if start >= end || end > nb {
            return Err(SimError::BadBlockRange {
                kernel: req.shape.name.clone(),
                start,
                end,
                blocks: nb,
            });
        }
        if req.persistent == Some(0) {
            return Err(SimError::ZeroPersistent(req.shape.name.clone()));
        }
        if self.empty_cu_capacity(&req.shape) == 0 {
            return Err(SimError::DoesNotFit {
                kernel: req.shape.name.clone(),
                device: self.spec.name.clone(),
            });
        }
        let cus = match &req.cus {
            Some(c) => c.and(&self.all_cus),
            None => self.all_cus,
        };
        if cus.is_empty() {
            return Err(SimError::EmptyCuSet {
                kernel: req.shape.name.clone(),
                cus: self.spec.compute_units,
            });
        }
        Ok((start, end, cus))
    }

    pub(super) fn alloc_launch(
        &mut self,
        s: StreamId,
        req: KernelLaunch,
        start: u32,
        end: u32,
        cus: CuSet,
        visible_at: u64,
    ) -> u32 {
        let (unit, cap_empty) = (unit_of(&req.shape), self.empty_cu_capacity(&req.shape));
        let slot = match self.free_launches.pop() {
            Some(i) => i,
            None => {
                self.launches.push(Launch {
                    id: LaunchId(0),
                    gen: 0,
                    live: false,
                    stream: 0,
                    req: req.clone(),
                    start: 0,
                    end: 0,
                    next_block: 0,
                    done: 0,
                    visible_at: 0,
                    state: LState::Queued,
                    started: false,
                    seq: 0,
                    groups: Vec::new(),
                    cus,
                    leader: 0,
                    parts_left: 0,
                    followers: Vec::new(),
                    held: false,
                    then: None,
                    scan: CuSet::empty(),
                    unit: 0,
                    cap_empty: 0,
                    rate: 0,
                    skipped: 0,
                    exiting: false,
                    ptb: 0,
                    resident: Vec::new(),
                    in_l2: false,
                    dkp: false,
                });
                self.launches.len() as u32 - 1
            }
        };
        let l = &mut self.launches[slot as usize];
        l.gen = l.gen.wrapping_add(1);
        l.id = LaunchId(((l.gen as u64) << 32) | slot as u64);
        l.live = true;
        l.stream = s.0;
        l.req = req;
        l.start = start;
        l.end = end;
        l.next_block = start;
        l.done = 0;
        l.visible_at = visible_at;
        l.state = LState::Queued;
        l.started = false;
        l.seq = 0;
        l.groups.clear();
        l.cus = cus;
        l.leader = slot;
        l.parts_left = 1;
        l.followers.clear();
        l.held = false;
        l.then = None;
        l.scan = CuSet::empty();
        l.unit = unit;
        l.ptb = l.req.persistent.unwrap_or(0);
        l.resident.clear();
        if l.ptb > 0 {
            l.cap_empty = cap_empty.min(l.ptb);
            l.resident.resize(self.spec.compute_units as usize, 0);
        } else {
            l.cap_empty = cap_empty;
        }
        debug_assert!(!l.in_l2, "a launch slot reused with resident groups");
        l.rate = 0;
        l.skipped = 0;
        l.exiting = false;
        l.in_l2 = false;
        l.dkp = false;
        slot
    }

    /// Blocks of `sh` that fit on one empty CU of this device.
    pub(super) fn empty_cu_capacity(&self, sh: &KernelShape) -> u32 {
        let spec = &self.spec;
        let mut cap = spec.max_threads_per_cu / sh.threads_per_block.max(1);
        cap = cap.min(spec.max_waves_per_cu / sh.waves_per_block.max(1));
        cap = cap.min(spec.max_blocks_per_cu);
        if let Some(c) = spec.lds_bytes_per_cu.checked_div(sh.lds_per_block) {
            cap = cap.min(c);
        }
        if let Some(c) = spec.registers_per_cu.checked_div(sh.regs_per_block) {
            cap = cap.min(c);
        }
        cap
    }
}
