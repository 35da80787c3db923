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
//! - Off the simulated clock: the computation runs on a worker thread per
//!   buffer namespace, in the order the device completed the namespace's
//!   kernels; the simulator only sends it a message per completion, so
//!   simulated time never depends on it, and reading a buffer
//!   ([`RealValues::bytes`]) waits for the work queued before it in its
//!   namespace only (a real-time client's answer does not wait for a
//!   best-effort client's slow CPU build).
//!
//! Models without code (the measured REEF/MI50 schedules) are not
//! registered and keep version tracking only.

use crate::values::BufferId;
use reef_cpu_kernels::{Buffer, Program};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

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

/// What one namespace's worker holds: its buffers, the failed calls' errors
/// and the calls run.
type State = (HashMap<BufferId, Buffer>, Vec<String>, u64);

/// Registered programs and the workers computing on the buffers' bytes:
/// one per buffer namespace (a model instance: reefd's daemon stream,
/// reef-bench's client), spawned at its first use. A namespace's work runs
/// in the order the device completed its kernels; namespaces share no
/// buffer, so one's backlog (a best-effort stream's slow CPU build) never
/// delays another's reads (a real-time stream's answer).
pub struct RealValues {
    kernels: HashMap<u64, (Arc<Program>, usize)>,
    workers: Mutex<HashMap<u64, Sender<Op>>>,
}

impl std::fmt::Debug for RealValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealValues")
            .field("kernels", &self.kernels.len())
            .finish()
    }
}

fn spawn(state: State) -> Sender<Op> {
    let (tx, rx) = channel();
    let (buffers, errors, calls) = state;
    let w = Worker {
        buffers,
        errors,
        calls,
    };
    std::thread::Builder::new()
        .name("reef-sim-values".into())
        .spawn(move || w.serve(rx))
        .expect("spawn a real-values worker");
    tx
}

impl RealValues {
    pub fn new() -> Self {
        RealValues {
            kernels: HashMap::new(),
            workers: Mutex::new(HashMap::new()),
        }
    }

    /// Namespace `ns`'s worker, spawned if it has none yet.
    fn send(&self, ns: u64, op: Op) {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let tx = w
            .entry(ns)
            .or_insert_with(|| spawn((HashMap::new(), Vec::new(), 0)));
        let _ = tx.send(op);
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
        let ns = w.0 & NS_MASK;
        self.send(
            ns,
            Op::Run {
                program: program.clone(),
                call: *call,
                ns,
                blocks,
                total,
            },
        );
    }

    /// Writes a buffer's bytes (a host-to-device copy).
    pub fn set(&self, b: BufferId, bytes: Vec<u8>) {
        self.send(b.0 & NS_MASK, Op::Set(b, bytes));
    }

    /// A buffer's bytes once the work queued before is done (`None`: never
    /// written nor used by a registered kernel).
    pub fn bytes(&self, b: BufferId) -> Option<Vec<u8>> {
        self.bytes_later(b).recv().ok().flatten()
    }

    /// A buffer's bytes once the work queued before is done, without
    /// waiting for it here: the answer arrives on the receiver (`None`
    /// inside: never written nor used by a registered kernel; the
    /// receiver disconnected: the worker is gone).
    pub fn bytes_later(&self, b: BufferId) -> Receiver<Option<Vec<u8>>> {
        let (tx, rx) = channel();
        self.send(b.0 & NS_MASK, Op::Read(b, tx));
        rx
    }

    /// Every namespace's state once the work queued before is done.
    fn snapshot(&self) -> HashMap<u64, State> {
        let workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers
            .iter()
            .map(|(&ns, w)| {
                let (tx, rx) = channel();
                w.send(Op::Snapshot(tx)).expect("real-values worker alive");
                (ns, rx.recv().expect("real-values worker alive"))
            })
            .collect()
    }

    /// Failed CPU calls so far (a shape or size the library refused).
    pub fn errors(&self) -> Vec<String> {
        let mut s: Vec<_> = self.snapshot().into_iter().collect();
        s.sort_by_key(|(ns, _)| *ns);
        s.into_iter().flat_map(|(_, st)| st.1).collect()
    }

    /// CPU calls run so far.
    pub fn calls(&self) -> u64 {
        self.snapshot().values().map(|st| st.2).sum()
    }
}

impl Default for RealValues {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for RealValues {
    fn clone(&self) -> Self {
        let workers = self
            .snapshot()
            .into_iter()
            .map(|(ns, st)| (ns, spawn(st)))
            .collect();
        RealValues {
            kernels: self.kernels.clone(),
            workers: Mutex::new(workers),
        }
    }
}

impl PartialEq for RealValues {
    fn eq(&self, o: &Self) -> bool {
        let all = |v: &RealValues| -> HashMap<BufferId, Buffer> {
            v.snapshot().into_values().flat_map(|st| st.0).collect()
        };
        all(self) == all(o)
    }
}
impl Eq for RealValues {}

impl Drop for RealValues {
    fn drop(&mut self) {
        // Closing the channels ends each worker's loop once it has done the
        // work queued before. They are not joined: reads still pending
        // ([`RealValues::bytes_later`]) get their answers from them, and
        // the dropper (reefd's engine rebuild, under the daemon's lock)
        // does not wait for a backlog of CPU work.
        self.workers
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
