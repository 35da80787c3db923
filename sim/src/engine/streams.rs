//! Streams, process contexts and hardware queues, and the command processor
//! that services the queues (docs/simulator.md "Launch path", "Hardware
//! queues", "Contexts"). One device queue per stream as REEF's modified
//! runtime gives every stream (REEF §4.1 Fig. 7, §4.5); streams of one
//! priority share at most `spec.hw_queues` hardware queues, whose packets
//! are fetched (`cp_fetch_ns`) and dispatched (`cp_dispatch_ns`) in order
//! ([`Sim::hwq_step`]). Contexts take the device's `concurrent_contexts`
//! slots in turn, switching at block boundaries (CUDA C Programming Guide,
//! "Concurrent Kernel Execution"; [`Sim::switch_contexts`]).

use super::{ContextId, Cp, Ctx, Ev, HwQueue, LState, Sim, SimError, Stream, StreamId};
use std::cmp::Reverse;
use std::collections::VecDeque;

impl Sim {
    /// A new stream. Higher `priority` kernels are placed on CUs first.
    /// `device_queue_capacity` bounds its device queue (REEF §4.2 uses 4).
    /// Its packets go to a hardware queue of the runtime's pool for its
    /// priority (at most `spec.hw_queues`, shared round robin beyond that;
    /// docs/simulator.md "Hardware queues").
    pub fn create_stream(
        &mut self,
        priority: i32,
        device_queue_capacity: usize,
    ) -> Result<StreamId, SimError> {
        self.new_stream(ContextId(0), priority, device_queue_capacity, false)
    }

    /// A new process context (docs/simulator.md "Contexts"): its kernels
    /// run concurrently with those of at most `concurrent_contexts - 1`
    /// other contexts (none on NVIDIA presets); past that the device
    /// time-slices between the contexts that have work.
    pub fn create_context(&mut self) -> ContextId {
        self.ctxs.push(Ctx::default());
        ContextId(self.ctxs.len() as u32 - 1)
    }

    /// Process contexts (context 0 included).
    pub fn contexts(&self) -> usize {
        self.ctxs.len()
    }

    /// Context switches so far.
    pub fn context_switches(&self) -> u64 {
        self.switches
    }

    /// The context of a stream.
    pub fn context_of(&self, s: StreamId) -> Option<ContextId> {
        self.streams.get(s.0 as usize).map(|st| ContextId(st.ctx))
    }

    /// [`Sim::create_stream`] (or, with `own_queue`,
    /// [`Sim::create_stream_own_queue`]) in context `ctx`. Hardware-queue
    /// pools are per context, as each process's runtime opens its own.
    pub fn create_stream_in(
        &mut self,
        ctx: ContextId,
        priority: i32,
        device_queue_capacity: usize,
        own_queue: bool,
    ) -> Result<StreamId, SimError> {
        if ctx.0 as usize >= self.ctxs.len() {
            return Err(SimError::NoSuchContext(ctx.0));
        }
        self.new_stream(ctx, priority, device_queue_capacity, own_queue)
    }

    /// A new stream with a hardware queue of its own, outside the pool of
    /// [`Sim::create_stream`]: one device queue per stream, as REEF's
    /// modified runtime gives every stream (REEF §4.1 Fig. 7, §4.5
    /// `hip_set_stream_cap` "the DQ used by a GPU stream").
    pub fn create_stream_own_queue(
        &mut self,
        priority: i32,
        device_queue_capacity: usize,
    ) -> Result<StreamId, SimError> {
        self.new_stream(ContextId(0), priority, device_queue_capacity, true)
    }

    pub(super) fn new_stream(
        &mut self,
        ctx: ContextId,
        priority: i32,
        device_queue_capacity: usize,
        own: bool,
    ) -> Result<StreamId, SimError> {
        if device_queue_capacity == 0 {
            return Err(SimError::ZeroCapacity);
        }
        let id = self.streams.len() as u32;
        let hwq = if own {
            self.push_hw_queue(ctx.0, priority, id, true)
        } else {
            self.map_hw_queue(ctx.0, priority, id)
        };
        self.streams.push(Stream {
            priority,
            capacity: device_queue_capacity,
            dq: VecDeque::with_capacity(device_queue_capacity.min(64)),
            host_free_at: 0,
            flag: false,
            running: None,
            hwq,
            ctx: ctx.0,
        });
        Ok(StreamId(id))
    }

    /// The hardware queue a new stream of `priority` goes to: a new one
    /// while its priority has fewer than `spec.hw_queues`, else the one of
    /// that priority with the fewest streams (the lowest index on a tie),
    /// as ROCclr's queue pool per priority does (`GPU_MAX_HW_QUEUES`);
    /// streams created in turn therefore go round robin.
    pub(super) fn map_hw_queue(&mut self, ctx: u32, priority: i32, stream: u32) -> u32 {
        let mut same = 0u32;
        let mut best: Option<(usize, u32)> = None;
        for (i, q) in self.hwqs.iter().enumerate() {
            if q.priority != priority || q.own || q.ctx != ctx {
                continue;
            }
            same += 1;
            if best.is_none_or(|(n, _)| q.members.len() < n) {
                best = Some((q.members.len(), i as u32));
            }
        }
        if same < self.spec.hw_queues {
            return self.push_hw_queue(ctx, priority, stream, false);
        }
        let (_, q) = best.expect("a full pool has a queue");
        self.hwqs[q as usize].members.push(stream);
        q
    }

    pub(super) fn push_hw_queue(&mut self, ctx: u32, priority: i32, stream: u32, own: bool) -> u32 {
        self.hwqs.push(HwQueue {
            priority,
            ctx,
            own,
            members: vec![stream],
            cp: Cp::Idle,
            cur: stream,
            running: None,
        });
        self.hwqs.len() as u32 - 1
    }

    /// The hardware queue a stream's packets go to (streams sharing one
    /// serialise; docs/simulator.md "Hardware queues").
    pub fn hw_queue_of(&self, s: StreamId) -> Option<u32> {
        self.streams.get(s.0 as usize).map(|st| st.hwq)
    }

    pub(super) fn stream(&self, s: StreamId) -> Result<&Stream, SimError> {
        self.streams
            .get(s.0 as usize)
            .ok_or(SimError::NoSuchStream(s.0))
    }

    /// Kernels in the stream's device queue (not yet dispatched).
    pub fn queue_len(&self, s: StreamId) -> usize {
        self.stream(s).map(|st| st.dq.len()).unwrap_or(0)
    }

    /// Device queue capacity of a stream.
    pub fn queue_capacity(&self, s: StreamId) -> usize {
        self.stream(s).map(|st| st.capacity).unwrap_or(0)
    }

    /// True when the stream has nothing queued or running.
    pub fn stream_idle(&self, s: StreamId) -> bool {
        self.stream(s)
            .map(|st| st.dq.is_empty() && st.running.is_none())
            .unwrap_or(true)
    }

    /// Advances a hardware queue's command processor: fetch the packet
    /// written first among its streams' heads (`cp_fetch_ns`, overlapping
    /// the running kernel), dispatch it once the queue's previous kernel has
    /// finished (`cp_dispatch_ns`), then make it runnable (or, if its
    /// stream's preempt flag is set, let it exit after `flag_check_ns`).
    pub(super) fn hwq_step(&mut self, q: u32) {
        let now = self.now;
        loop {
            let hq = &self.hwqs[q as usize];
            match hq.cp {
                Cp::Idle => {
                    // The head written first (ring order); a single member
                    // is the common case.
                    let mut pick: Option<(u64, u64, u32)> = None;
                    for &m in &hq.members {
                        if let Some(&head) = self.streams[m as usize].dq.front() {
                            let l = &self.launches[head as usize];
                            let key = (l.visible_at, l.id.0, m);
                            if pick.is_none_or(|p| key < p) {
                                pick = Some(key);
                            }
                        }
                    }
                    let Some((vis, _, m)) = pick else { break };
                    if vis <= now {
                        let until = now + self.spec.cp_fetch_ns;
                        let hq = &mut self.hwqs[q as usize];
                        hq.cp = Cp::Fetching(until);
                        hq.cur = m;
                        self.schedule(until, Ev::Stream(q));
                    }
                    // else: an Ev::Stream at `vis` was scheduled by launch().
                    break;
                }
                Cp::Fetching(until) => {
                    if until <= now {
                        self.hwqs[q as usize].cp = Cp::Fetched;
                        continue;
                    }
                    break;
                }
                Cp::Fetched => {
                    if hq.running.is_none() {
                        let until = now + self.spec.cp_dispatch_ns;
                        self.hwqs[q as usize].cp = Cp::Dispatching(until);
                        self.schedule(until, Ev::Stream(q));
                    }
                    break;
                }
                Cp::Dispatching(until) => {
                    if until > now {
                        break;
                    }
                    let s = hq.cur;
                    let st = &mut self.streams[s as usize];
                    let slot = st.dq.pop_front().expect("dispatching a queued kernel");
                    st.running = Some(slot);
                    let prio = st.priority;
                    let hq = &mut self.hwqs[q as usize];
                    hq.cp = Cp::Idle;
                    hq.running = Some(slot);
                    // The blocks read the preempt flag when they are placed
                    // (`place`), not here: a kernel dispatched while it is
                    // set exits once its first blocks get a CU.
                    let nf = self.launches[slot as usize].followers.len();
                    for i in 0..=nf {
                        let part = if i == 0 {
                            slot
                        } else {
                            self.launches[slot as usize].followers[i - 1]
                        };
                        self.dispatch_seq += 1;
                        let l = &mut self.launches[part as usize];
                        l.state = LState::Active;
                        l.seq = self.dispatch_seq;
                        l.scan = l.cus;
                        // Insert keeping (priority desc, seq asc) order.
                        let key = (Reverse(prio), self.dispatch_seq);
                        let pos = self.active.partition_point(|&a| {
                            let la = &self.launches[a as usize];
                            (Reverse(self.streams[la.stream as usize].priority), la.seq) < key
                        });
                        self.active.insert(pos, part);
                    }
                    self.place();
                    continue;
                }
            }
        }
    }

    /// The context mechanism (docs/simulator.md "Contexts"; CUDA C
    /// Programming Guide "Concurrent Kernel Execution": kernels of
    /// different contexts never run concurrently without MPS; the NVIDIA
    /// driver's channel-group timeslice): a context holds one of the
    /// device's `concurrent_contexts` slots, idle or not, until a context
    /// with work needs the slot. Such a context gets a free slot, else
    /// that of a resident context with no work left (it idled), or that of
    /// a resident context whose time slice has ended:
    /// that one stops dispatching blocks and leaves once its resident
    /// blocks have finished (a switch at block boundaries; the hardware's
    /// instruction-level compute preemption would save them instead).
    /// Bringing a context in after another left costs `context_switch_ns`,
    /// during which none of its blocks is placed; with one context (every
    /// caller that never calls [`Sim::create_context`]) nothing of this
    /// runs.
    pub(super) fn switch_contexts(&mut self) {
        let now = self.now;
        let n = self.ctxs.len();
        // Work: a dispatched kernel, or a packet visible in a device queue.
        let mut work = vec![false; n];
        let mut blocks = vec![false; n];
        for &a in &self.active {
            let l = &self.launches[a as usize];
            let c = self.streams[l.stream as usize].ctx as usize;
            work[c] = true;
            if !l.groups.is_empty() || l.exiting {
                blocks[c] = true;
            }
        }
        for st in &self.streams {
            if let Some(&h) = st.dq.front() {
                if self.launches[h as usize].visible_at <= now {
                    work[st.ctx as usize] = true;
                }
            }
        }
        let waiting = |ctxs: &[Ctx], work: &[bool]| (0..n).any(|c| work[c] && !ctxs[c].resident);
        // An idle context keeps its slot (the runlist keeps it mapped)
        // until a waiting context needs one.
        let want = (0..n)
            .filter(|&c| work[c] && !self.ctxs[c].resident)
            .count() as u32;
        let held = self.ctxs.iter().filter(|c| c.resident).count() as u32;
        let mut to_free = (held + want).saturating_sub(self.spec.concurrent_contexts);
        let slice = self.spec.context_timeslice_ns;
        for c in 0..n {
            let cx = self.ctxs[c];
            if !cx.resident {
                continue;
            }
            let gone = if cx.leaving {
                !blocks[c]
            } else if !work[c] && cx.ready_at <= now && to_free > 0 {
                to_free -= 1;
                true
            } else {
                false
            };
            if gone {
                self.ctxs[c].resident = false;
                self.ctxs[c].leaving = false;
                self.last_out = Some(c as u32);
                continue;
            }
            if slice > 0 && !cx.leaving && cx.ready_at <= now && waiting(&self.ctxs, &work) {
                if cx.slice_end <= now {
                    // Its slice is over and a context waits: it leaves.
                    self.ctxs[c].leaving = true;
                    if !blocks[c] {
                        self.ctxs[c].resident = false;
                        self.ctxs[c].leaving = false;
                        self.last_out = Some(c as u32);
                    }
                } else {
                    self.wake_contexts_at(cx.slice_end);
                }
            } else if slice > 0 && cx.slice_end <= now {
                // Alone (or still coming in): the next slice starts.
                let k = (now - cx.slice_end) / slice + 1;
                self.ctxs[c].slice_end = cx.slice_end + k * slice;
            }
        }
        // Fill free slots, round robin from the context brought in last.
        let mut resident = self.ctxs.iter().filter(|c| c.resident).count() as u32;
        let mut i = 0;
        while resident < self.spec.concurrent_contexts && i < n {
            let c = (self.last_in as usize + 1 + i) % n;
            i += 1;
            if !work[c] || self.ctxs[c].resident {
                continue;
            }
            // A switch when the device last held another context and none
            // is resident now (contexts beside resident ones are mapped
            // concurrently, at no switch).
            let cost = match self.last_out {
                Some(o) if o as usize != c && resident == 0 => self.spec.context_switch_ns,
                _ => 0,
            };
            if self.last_out.is_some_and(|o| o as usize != c) && resident == 0 {
                self.switches += 1;
            }
            let ready = now + cost;
            self.ctxs[c] = Ctx {
                resident: true,
                ready_at: ready,
                slice_end: ready + slice,
                leaving: false,
            };
            self.last_in = c as u32;
            resident += 1;
            // Its blocks may go wherever there is room once it is ready.
            for &a in &self.active {
                let l = &mut self.launches[a as usize];
                if self.streams[l.stream as usize].ctx as usize == c && l.next_block < l.end {
                    l.scan = l.cus;
                }
            }
            if cost > 0 {
                self.wake_contexts_at(ready);
            }
        }
    }

    /// Schedules a context re-evaluation at `t` unless one is pending then.
    pub(super) fn wake_contexts_at(&mut self, t: u64) {
        if self.ctx_wakes.insert(t) {
            self.schedule(t, Ev::Contexts);
        }
    }
}
