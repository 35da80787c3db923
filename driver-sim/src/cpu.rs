//! What kernels compute, for a model compiled by reef-compile (issue 30):
//! the CPU build of the kernel's TIR function (`cpu.so`, crate
//! reef-cpu-kernels) run on the bytes of the device buffers its parameters
//! point to, when the kernel completes. reef-compile appends to each PTX it
//! writes:
//!
//! ```text
//! // reef-cpu: library=/abs/dir/cpu.so
//! // reef-cpu: kernel=NAME function=F args=P:DTYPE:SHAPE,... writes=P,...
//! ```
//!
//! one `kernel=` line per kernel that is the last kernel of its TIR
//! function's call: `P` is the PTX parameter holding the argument's device
//! pointer, `SHAPE` its dimensions joined by `x` (`_` for a scalar),
//! `writes` the parameters the function writes. A function TVM split into
//! several kernels adds `after=K0,K1,...`, its earlier kernels, and an
//! argument the last kernel does not take is written `K.P`: parameter `P`
//! of kernel `K`'s latest launch on the stream. The call computes only if
//! every earlier kernel ran whole since its launch (driver.rs `completed`):
//! on a GPU a killed pass that is not run again leaves its workspace stale
//! for the last pass, so the CPU build, which recomputes the function
//! whole, must not hide it. A later `library=` line replaces an earlier one
//! (a loader that moved the model directory can append its own). Kernels
//! without a line, and modules whose library cannot be loaded, keep the
//! deterministic stand-in function (driver.rs `completed`).
//!
//! Off the driver's path: at the completion the driver only takes a shared
//! reference to each argument's allocation (copied on its next write while
//! the job holds it, driver.rs `Alloc::data`) and queues a [`Job`]; one worker thread per process
//! runs the jobs in completion order and fills a [`Slot`] per written
//! argument. The allocation keeps the slot and copies its bytes in the
//! first time anything reads or writes it (driver.rs `Alloc`), so a host
//! copy of an output waits for exactly the work it depends on, and the
//! simulated device and the launching host never wait for the CPU.

use reef_cpu_kernels::{Buffer, DType, Function, Library, RawTensor};
use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// The bytes a queued computation will write at `off..off + len` of one
/// allocation.
#[derive(Debug)]
pub struct Slot {
    pub off: usize,
    pub len: usize,
    bytes: Mutex<Option<Vec<u8>>>,
    ready: Condvar,
}

impl Slot {
    pub fn new(off: usize, len: usize) -> Arc<Slot> {
        Arc::new(Slot {
            off,
            len,
            bytes: Mutex::new(None),
            ready: Condvar::new(),
        })
    }

    fn fill(&self, b: Vec<u8>) {
        *self.bytes.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
        self.ready.notify_all();
    }

    /// Waits for the bytes and copies the part overlapping `at..at +
    /// out.len()` (allocation offsets) into `out`.
    pub fn overlay(&self, at: usize, out: &mut [u8]) {
        let (a, e) = (self.off.max(at), (self.off + self.len).min(at + out.len()));
        if a >= e {
            return;
        }
        let mut g = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        while g.is_none() {
            g = self.ready.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let b = g.as_ref().expect("filled");
        out[a - at..e - at].copy_from_slice(&b[a - self.off..e - self.off]);
    }

    pub fn overlaps(&self, at: usize, len: usize) -> bool {
        self.off < at + len && at < self.off + self.len
    }
}

/// An argument of a [`Job`]: bytes `off..off + len` of its allocation's
/// data as they were at the completion, and the slots of earlier jobs that
/// will overwrite parts of them.
pub struct Input {
    pub data: Arc<Vec<u8>>,
    pub off: usize,
    pub len: usize,
    pub slots: Vec<Arc<Slot>>,
}

/// One completed kernel's computation: its arguments; the slots of its
/// written arguments.
pub struct Job {
    pub kernel: Arc<CpuKernel>,
    pub inputs: Vec<Input>,
    pub outputs: Vec<(usize, Arc<Slot>)>,
}

fn run(job: Job) {
    let mut bufs: Vec<Buffer> = job
        .inputs
        .iter()
        .map(|i| {
            let mut b = Buffer::from_bytes(&i.data[i.off..i.off + i.len]);
            for s in &i.slots {
                s.overlay(i.off, b.as_bytes_mut());
            }
            b
        })
        .collect();
    let tensors: Vec<RawTensor<'_>> = bufs
        .iter_mut()
        .zip(&job.kernel.args)
        .map(|(b, (_, dt, shape))| RawTensor {
            data: b.as_mut_ptr(),
            len: b.len(),
            dtype: *dt,
            shape,
        })
        .collect();
    // SAFETY: each tensor is one of `bufs`, aligned and as long as said.
    if let Err(e) = unsafe { job.kernel.function.call_raw(&tensors) } {
        // The outputs keep their bytes (the written arguments' snapshot).
        eprintln!("reef-driver-sim: {e}");
    }
    for (i, slot) in job.outputs {
        slot.fill(bufs[i].as_bytes().to_vec());
    }
}

/// Queues a job to the process's worker thread.
pub fn submit(job: Job) {
    static WORKER: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let tx = WORKER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("reef-libcuda-cpu".into())
            .spawn(move || {
                while let Ok(j) = rx.recv() {
                    run(j);
                }
            })
            .expect("spawn the CPU-build worker");
        Mutex::new(tx)
    });
    let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(job);
}

/// One kernel's CPU computation.
#[derive(Debug)]
pub struct CpuKernel {
    pub function: Function,
    /// (PTX parameter, dtype, shape) per argument of the TIR function.
    pub args: Vec<(usize, DType, Vec<i64>)>,
    /// Per argument: the earlier kernel of the call whose parameter
    /// `args[i].0` carries it (its latest launch on the stream), or None
    /// for this kernel's own parameter.
    pub carried_by: Vec<Option<String>>,
    /// Indices into `args` of the arguments written.
    pub writes: Vec<usize>,
    /// The call's earlier kernels, in launch order (a TIR function TVM
    /// split into several kernels): the call gives real values only if
    /// each ran whole, as on a GPU, where a skipped pass leaves its
    /// workspace stale and the last pass reads it.
    pub after: Vec<String>,
}

struct Line {
    kernel: String,
    function: String,
    args: Vec<(usize, DType, Vec<i64>)>,
    carried_by: Vec<Option<String>>,
    writes: Vec<usize>,
    after: Vec<String>,
}

/// `P` or `KERNEL.P`: the parameter and the earlier kernel carrying it.
fn parse_param(p: &str) -> Result<(Option<String>, usize), String> {
    let (k, n) = match p.rsplit_once('.') {
        Some((k, n)) if !k.is_empty() => (Some(k.to_string()), n),
        _ => (None, p),
    };
    let n = n
        .parse()
        .map_err(|_| format!("reef-cpu annotation: parameter {p:?}"))?;
    Ok((k, n))
}

fn parse_line(rest: &str) -> Result<Result<String, Line>, String> {
    let mut kernel = None;
    let mut function = None;
    let mut args = Vec::new();
    let mut carried_by = Vec::new();
    let mut writes: Vec<(Option<String>, usize)> = Vec::new();
    let mut after = Vec::new();
    for kv in rest.split_whitespace() {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("reef-cpu annotation: {kv:?} is not key=value"))?;
        match k {
            "library" => return Ok(Ok(v.to_string())),
            "kernel" => kernel = Some(v.to_string()),
            "function" => function = Some(v.to_string()),
            "args" => {
                for a in v.split(',').filter(|a| !a.is_empty()) {
                    let mut it = a.split(':');
                    let (Some(p), Some(dt), Some(sh), None) =
                        (it.next(), it.next(), it.next(), it.next())
                    else {
                        return Err(format!(
                            "reef-cpu annotation: argument {a:?} is not P:DTYPE:SHAPE"
                        ));
                    };
                    let (by, p) = parse_param(p)?;
                    carried_by.push(by);
                    let dt = DType::parse(dt).map_err(|e| e.to_string())?;
                    let shape = if sh == "_" {
                        Vec::new()
                    } else {
                        sh.split('x')
                            .map(|d| {
                                d.parse::<i64>()
                                    .map_err(|_| format!("reef-cpu annotation: shape {sh:?}"))
                            })
                            .collect::<Result<Vec<_>, _>>()?
                    };
                    args.push((p, dt, shape));
                }
            }
            "writes" => {
                for w in v.split(',').filter(|w| !w.is_empty()) {
                    writes.push(parse_param(w)?);
                }
            }
            "after" => {
                after = v
                    .split(',')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            }
            _ => return Err(format!("reef-cpu annotation: unknown key {k:?}")),
        }
    }
    let kernel = kernel.ok_or("reef-cpu annotation without kernel=")?;
    let function =
        function.ok_or_else(|| format!("reef-cpu annotation of {kernel}: no function="))?;
    // Written parameters as indices into args.
    let writes = writes
        .iter()
        .map(|(by, w)| {
            (0..args.len())
                .find(|&i| args[i].0 == *w && carried_by[i] == *by)
                .ok_or_else(|| {
                    format!("reef-cpu annotation of {kernel}: written parameter {w} is no argument")
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(k) = carried_by.iter().flatten().find(|k| !after.contains(k)) {
        return Err(format!(
            "reef-cpu annotation of {kernel}: an argument is carried by {k}, which is not in after="
        ));
    }
    Ok(Err(Line {
        kernel,
        function,
        args,
        carried_by,
        writes,
        after,
    }))
}

/// The CPU computations of a module's kernels (empty when the module has
/// no `reef-cpu` annotation), or why they cannot be had.
pub fn load(src: &str) -> Result<HashMap<String, Arc<CpuKernel>>, String> {
    let mut library = None;
    let mut lines = Vec::new();
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("// reef-cpu:") else {
            continue;
        };
        match parse_line(rest)? {
            Ok(lib) => library = Some(lib),
            Err(l) => lines.push(l),
        }
    }
    let mut out = HashMap::new();
    if lines.is_empty() {
        return Ok(out);
    }
    let library = library.ok_or("reef-cpu annotations without library=")?;
    let lib = Library::open(Path::new(&library)).map_err(|e| e.to_string())?;
    for l in lines {
        let function = lib.function(&l.function).map_err(|e| e.to_string())?;
        out.insert(
            l.kernel,
            Arc::new(CpuKernel {
                function,
                args: l.args,
                carried_by: l.carried_by,
                writes: l.writes,
                after: l.after,
            }),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_parse_and_refuse_what_is_malformed() {
        let Ok(Err(l)) = parse_line(" kernel=k function=f args=2:float32:2x16,0:int64:_ writes=2")
        else {
            panic!("a kernel line");
        };
        assert_eq!((l.kernel.as_str(), l.function.as_str()), ("k", "f"));
        assert_eq!(l.args[0].2, vec![2, 16]);
        assert!(l.args[1].2.is_empty());
        assert_eq!(l.writes, vec![0]);
        assert!(matches!(parse_line(" library=/x/cpu.so"), Ok(Ok(p)) if p == "/x/cpu.so"));
        assert!(parse_line(" kernel=k function=f args=1:float32:2 writes=3").is_err());
        assert!(parse_line(" kernel=k args=1:float32:2").is_err());
        assert!(parse_line(" kernel=k function=f args=1:float9:2").is_err());
        assert!(parse_line(" kernel=k function=f bogus=1").is_err());
        // A split call: an argument carried by an earlier kernel, which
        // must be named in after=.
        let Ok(Err(l)) = parse_line(
            " kernel=k2 function=f args=k1.3:float32:4,0:float32:4 writes=0 after=k0,k1",
        ) else {
            panic!("a split call's line");
        };
        assert_eq!(l.carried_by, vec![Some("k1".to_string()), None]);
        assert_eq!((l.args[0].0, l.writes.clone()), (3, vec![1]));
        assert_eq!(l.after, vec!["k0".to_string(), "k1".to_string()]);
        assert!(parse_line(" kernel=k2 function=f args=k1.3:float32:4 writes=").is_err());
        assert!(parse_line(" kernel=k2 function=f args=k1.x:float32:4 after=k1").is_err());
        assert!(load("// reef-cpu: kernel=k function=f args=0:float32:1 writes=0").is_err());
        assert!(load(".version 8.0").unwrap().is_empty());
        let e = load("// reef-cpu: library=/nonexistent/cpu.so\n// reef-cpu: kernel=k function=f args=0:float32:1")
            .unwrap_err();
        assert!(e.contains("/nonexistent/cpu.so"), "{e}");
    }
}
