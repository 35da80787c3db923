//! Real values (DESIGN.md "The simulator", values; issue 30): for a model
//! compiled by reef-compile, every buffer holds bytes, and a kernel's
//! completion runs the CPU build of its TIR function (`cpu.so`, crate
//! reef-cpu-kernels) on them, so outputs are the model's real numbers.
//!
//! - Which kernel is which: a model's kernels are registered by their shape
//!   identity ([`RealValues::register`]; reef-sim's identity names the
//!   model, the kernel and its index, and stays the same for every padded
//!   version of the kernel). A launch of a registered kernel that is the last
//!   kernel of its TIR function's call runs the call; other kernels (the
//!   first kernels of a function split in several, which write only device
//!   workspace) change no bytes. So the bytes alone would not show a
//!   restore that skipped such a kernel (the call recomputes from the
//!   function's inputs; a GPU's last kernel would read stale workspace):
//!   the version tracker, run alongside, does (the workspace's version is
//!   an input of the last kernel), and reefd checks every request with it.
//!   Neither light_shufflenet nor the two-input model has a split
//!   function; a stale verdict with right bytes there came from read sets
//!   that listed a kernel's own accumulated output as its input
//!   (reef-compile's `_loads_before_stores`).
//! - Which bytes: a launch's buffers are `BufferId(ns | storage)`, the
//!   convention of every caller (reefd and reef-bench give each client or
//!   daemon stream a namespace in the high 32 bits, the low 32 bits are the
//!   schedule's storage index). A buffer first touched gets the storage's
//!   size, zeroed, with the weights in place for a parameter.
//! - Partial runs: blocks `a..b` of a kernel of `B` blocks write the part
//!   `a/B..b/B` of each written buffer (the version tracker's convention);
//!   the rest keeps its stale bytes. A killed launch writes nothing (the
//!   blocks that completed before the kill are reported through
//!   [`crate::ValueTracker::blocks_ran`], the hook for per-block partial
//!   runs), so a wrong restore point leaves stale bytes in the answer.
//! - Off the simulated clock: the computation runs on a worker thread, in
//!   the order the device completed the kernels; the simulator only sends
//!   it a message per completion, so simulated time never depends on it,
//!   and reading a buffer ([`RealValues::bytes`]) waits for the work queued
//!   before it.
//!
//! Models without code (the measured REEF/MI50 schedules) are not
//! registered and keep version tracking only.

use crate::values::BufferId;
use reef_cpu_kernels::{Buffer, Program};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

const NS_MASK: u64 = !0xffff_ffff;

enum Op {
    Set(BufferId, Vec<u8>),
    Run {
        program: Arc<Program>,
        call: usize,
        ns: u64,
        blocks: Range<u64>,
        total: u64,
    },
    Read(BufferId, Sender<Option<Vec<u8>>>),
    Snapshot(Sender<(HashMap<BufferId, Buffer>, Vec<String>, u64)>),
}

struct Worker {
    buffers: HashMap<BufferId, Buffer>,
    errors: Vec<String>,
    calls: u64,
}

impl Worker {
    fn run(&mut self, program: &Program, call: usize, ns: u64, blocks: Range<u64>, total: u64) {
        let c = &program.calls[call];
        let mut at: Vec<(usize, *mut u8, usize)> = Vec::with_capacity(c.args.len());
        for a in &c.args {
            let id = BufferId(ns | a.storage as u64);
            let need = program.storage_bytes[a.storage];
            let b = self.buffers.entry(id).or_insert_with(|| {
                let mut b = Buffer::zeroed(need);
                if let Some((_, w)) = program.weights().iter().find(|(s, _)| *s == a.storage) {
                    b.as_bytes_mut()[..w.len()].copy_from_slice(w);
                }
                b
            });
            if b.len() < need {
                self.errors.push(format!(
                    "{}: buffer {:#x} holds {} bytes, storage {} needs {need}",
                    c.function.name(),
                    id.0,
                    b.len(),
                    a.storage
                ));
                return;
            }
        }
        for a in &c.args {
            if at.iter().any(|p| p.0 == a.storage) {
                continue;
            }
            let b = self
                .buffers
                .get_mut(&BufferId(ns | a.storage as u64))
                .expect("inserted above");
            at.push((a.storage, b.as_mut_ptr(), b.len()));
        }
        let lookup = |s: usize| {
            let p = at.iter().find(|p| p.0 == s).expect("an argument's storage");
            (p.1, p.2)
        };
        // SAFETY: each pointer is a distinct buffer of the map, 64-byte
        // aligned, valid until the map changes (not during the call).
        let r = unsafe { program.apply_blocks_raw(call, &lookup, blocks, total) };
        self.calls += 1;
        if let Err(e) = r {
            self.errors.push(e.to_string());
        }
    }

    fn serve(mut self, rx: Receiver<Op>) {
        while let Ok(op) = rx.recv() {
            match op {
                Op::Set(b, bytes) => {
                    self.buffers.insert(b, Buffer::from_bytes(&bytes));
                }
                Op::Run {
                    program,
                    call,
                    ns,
                    blocks,
                    total,
                } => self.run(&program, call, ns, blocks, total),
                Op::Read(b, reply) => {
                    let _ = reply.send(self.buffers.get(&b).map(|x| x.as_bytes().to_vec()));
                }
                Op::Snapshot(reply) => {
                    let _ = reply.send((self.buffers.clone(), self.errors.clone(), self.calls));
                }
            }
        }
    }
}

/// Registered programs and the worker computing on the buffers' bytes.
pub struct RealValues {
    kernels: HashMap<u64, (Arc<Program>, usize)>,
    tx: Sender<Op>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RealValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealValues")
            .field("kernels", &self.kernels.len())
            .finish()
    }
}

impl RealValues {
    fn with_state(
        kernels: HashMap<u64, (Arc<Program>, usize)>,
        buffers: HashMap<BufferId, Buffer>,
        errors: Vec<String>,
        calls: u64,
    ) -> Self {
        let (tx, rx) = channel();
        let w = Worker {
            buffers,
            errors,
            calls,
        };
        let worker = std::thread::Builder::new()
            .name("reef-sim-values".into())
            .spawn(move || w.serve(rx))
            .expect("spawn the real-values worker");
        RealValues {
            kernels,
            tx,
            worker: Some(worker),
        }
    }

    pub fn new() -> Self {
        Self::with_state(HashMap::new(), HashMap::new(), Vec::new(), 0)
    }

    /// Registers a compiled model: `identities[k]` is the shape identity of
    /// its kernel `k` ([`crate::KernelShape::for_model`]).
    pub fn register(&mut self, identities: &[u64], program: Arc<Program>) {
        for (k, &id) in identities.iter().enumerate() {
            if let Some(call) = program.call_after_kernel(k) {
                self.kernels.insert(id, (program.clone(), call));
            }
        }
    }

    /// Whether a kernel identity computes bytes.
    pub fn knows(&self, identity: u64) -> bool {
        self.kernels.contains_key(&identity)
    }

    /// Blocks `blocks` of `total` of a kernel ran to completion on the
    /// buffers `writes` (whose namespace names the model instance).
    pub fn ran(&self, identity: u64, writes: &[BufferId], blocks: Range<u64>, total: u64) {
        let Some((program, call)) = self.kernels.get(&identity) else {
            return;
        };
        let Some(w) = writes.first() else {
            return;
        };
        let _ = self.tx.send(Op::Run {
            program: program.clone(),
            call: *call,
            ns: w.0 & NS_MASK,
            blocks,
            total,
        });
    }

    /// Writes a buffer's bytes (a host-to-device copy).
    pub fn set(&self, b: BufferId, bytes: Vec<u8>) {
        let _ = self.tx.send(Op::Set(b, bytes));
    }

    /// A buffer's bytes once the work queued before is done (`None`: never
    /// written nor used by a registered kernel).
    pub fn bytes(&self, b: BufferId) -> Option<Vec<u8>> {
        let (tx, rx) = channel();
        self.tx.send(Op::Read(b, tx)).ok()?;
        rx.recv().ok().flatten()
    }

    /// A buffer's bytes once the work queued before is done, without
    /// waiting for it here: the answer arrives on the receiver (`None`
    /// inside: never written nor used by a registered kernel; the
    /// receiver disconnected: the worker is gone).
    pub fn bytes_later(&self, b: BufferId) -> Receiver<Option<Vec<u8>>> {
        let (tx, rx) = channel();
        let _ = self.tx.send(Op::Read(b, tx));
        rx
    }

    fn snapshot(&self) -> (HashMap<BufferId, Buffer>, Vec<String>, u64) {
        let (tx, rx) = channel();
        self.tx
            .send(Op::Snapshot(tx))
            .expect("real-values worker alive");
        rx.recv().expect("real-values worker alive")
    }

    /// Failed CPU calls so far (a shape or size the library refused).
    pub fn errors(&self) -> Vec<String> {
        self.snapshot().1
    }

    /// CPU calls run so far.
    pub fn calls(&self) -> u64 {
        self.snapshot().2
    }
}

impl Default for RealValues {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for RealValues {
    fn clone(&self) -> Self {
        let (buffers, errors, calls) = self.snapshot();
        Self::with_state(self.kernels.clone(), buffers, errors, calls)
    }
}

impl PartialEq for RealValues {
    fn eq(&self, o: &Self) -> bool {
        self.snapshot().0 == o.snapshot().0
    }
}
impl Eq for RealValues {}

impl Drop for RealValues {
    fn drop(&mut self) {
        // Closing the channel ends the worker's loop once it has done the
        // work queued before. It is not joined: reads still pending
        // ([`RealValues::bytes_later`]) get their answers from it, and the
        // dropper (reefd's engine rebuild, under the daemon's lock) does
        // not wait for a backlog of CPU work.
        let (tx, _) = channel();
        drop(std::mem::replace(&mut self.tx, tx));
        drop(self.worker.take());
    }
}
