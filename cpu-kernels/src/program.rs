//! A reef-compile model directory's CPU build: the schedule's `cpu` section
//! with its functions loaded, and the storages' sizes and weights.

use crate::{DType, Error, Function, Library, RawTensor};
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// Bytes at a 64-byte aligned address (what TVM's code assumes of a
/// tensor's data), zeroed when made.
#[derive(Clone)]
pub struct Buffer {
    lines: Vec<Line>,
    len: usize,
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes)", self.len)
    }
}

impl PartialEq for Buffer {
    fn eq(&self, o: &Self) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}
impl Eq for Buffer {}

impl Buffer {
    pub fn zeroed(len: usize) -> Buffer {
        Buffer {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
            len,
        }
    }

    pub fn from_bytes(b: &[u8]) -> Buffer {
        let mut out = Buffer::zeroed(b.len());
        out.as_bytes_mut().copy_from_slice(b);
        out
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.len) }
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut u8, self.len) }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr() as *mut u8
    }
}

/// One argument of a call: the tensor at offset 0 of a storage.
#[derive(Debug, Clone)]
pub struct CallArg {
    pub storage: usize,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

/// One call of a TIR function by the model, in launch order.
#[derive(Debug, Clone)]
pub struct Call {
    pub function: Function,
    pub args: Vec<CallArg>,
    /// The kernels (schedule indices) the call became on the GPU; its CPU
    /// build runs when the last of them completes.
    pub kernels: Vec<usize>,
    /// The argument storages its kernels write.
    pub writes: Vec<usize>,
}

#[derive(Deserialize)]
struct Sched {
    storage: Vec<SStorage>,
    kernels: Vec<SKernel>,
    #[serde(default)]
    inputs: Vec<usize>,
    #[serde(default)]
    outputs: Vec<usize>,
    weights: Option<SWeights>,
    cpu: Option<SCpu>,
}

#[derive(Deserialize)]
struct SStorage {
    name: String,
    size: u64,
    stype: String,
}

#[derive(Deserialize)]
struct SKernel {
    #[serde(default)]
    writes: Vec<usize>,
}

#[derive(Deserialize)]
struct SWeights {
    file: String,
    entries: Vec<SWeight>,
}

#[derive(Deserialize)]
struct SWeight {
    storage: usize,
    offset: u64,
    bytes: u64,
}

#[derive(Deserialize)]
struct SCpu {
    library: String,
    calls: Vec<SCall>,
}

#[derive(Deserialize)]
struct SCall {
    function: String,
    args: Vec<SArg>,
    kernels: Vec<usize>,
}

#[derive(Deserialize)]
struct SArg {
    storage: usize,
    dtype: String,
    shape: Vec<i64>,
}

/// A model's CPU build, ready to run on storages.
#[derive(Debug)]
pub struct Program {
    pub dir: PathBuf,
    pub storage_names: Vec<String>,
    pub storage_bytes: Vec<usize>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub calls: Vec<Call>,
    /// Per kernel: the call whose last kernel it is.
    last_of: Vec<Option<usize>>,
    weights: Vec<(usize, Vec<u8>)>,
}

fn sched_err(path: &Path, message: impl Into<String>) -> Error {
    Error::Schedule {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

impl Program {
    /// The schedule of a model directory: `DIR/NAME.json`, NAME = the
    /// directory's last component (reef-model's layout).
    pub fn schedule_path(dir: &Path) -> PathBuf {
        let name = dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_owned()))
            .unwrap_or_default();
        dir.join(format!("{}.json", name.to_string_lossy()))
    }

    /// Whether the model directory has a CPU build (reef-compile writes one;
    /// the measured REEF schedules have none).
    pub fn has_code(dir: &Path) -> bool {
        Self::file_has_code(&Self::schedule_path(dir))
    }

    /// [`Program::has_code`] of a schedule file.
    pub fn file_has_code(p: &Path) -> bool {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v.get("cpu").is_some_and(|c| c.is_object()))
    }

    /// Loads the schedule, the library and the weights of model directory
    /// `dir`.
    pub fn load(dir: &Path) -> Result<Arc<Program>, Error> {
        Self::load_file(&Self::schedule_path(dir))
    }

    /// [`Program::load`] from the schedule file (`cpu.so` and the weights
    /// beside it).
    pub fn load_file(path: &Path) -> Result<Arc<Program>, Error> {
        let path = path.to_path_buf();
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let dir = dir.as_path();
        let raw = std::fs::read(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let s: Sched = serde_json::from_slice(&raw).map_err(|e| sched_err(&path, e.to_string()))?;
        let cpu = s.cpu.ok_or_else(|| {
            sched_err(
                &path,
                "no `cpu` section: the model has no CPU build (compile it with this reef-compile)",
            )
        })?;
        let storage_bytes = s
            .storage
            .iter()
            .map(|st| {
                let es = if st.stype == "uint1" {
                    1
                } else {
                    DType::parse(&st.stype)?.size()
                };
                Ok(st.size as usize * es)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let lib = Library::open(&dir.join(&cpu.library))?;
        let mut calls = Vec::with_capacity(cpu.calls.len());
        let mut last_of = vec![None; s.kernels.len()];
        for (ci, c) in cpu.calls.iter().enumerate() {
            let function = lib.function(&c.function)?;
            let mut args = Vec::with_capacity(c.args.len());
            for (i, a) in c.args.iter().enumerate() {
                let dtype = DType::parse(&a.dtype)?;
                let have = *storage_bytes.get(a.storage).ok_or_else(|| {
                    sched_err(
                        &path,
                        format!("{}: argument {i}: no storage {}", c.function, a.storage),
                    )
                })?;
                if dtype.bytes_for(&a.shape) > have {
                    return Err(sched_err(
                        &path,
                        format!(
                            "{}: argument {i} ({:?} {dtype}) is larger than storage {} ({have} B)",
                            c.function, a.shape, a.storage
                        ),
                    ));
                }
                args.push(CallArg {
                    storage: a.storage,
                    dtype,
                    shape: a.shape.clone(),
                });
            }
            let last = *c.kernels.last().ok_or_else(|| {
                sched_err(&path, format!("{}: a call with no kernel", c.function))
            })?;
            let slot = last_of
                .get_mut(last)
                .ok_or_else(|| sched_err(&path, format!("{}: no kernel {last}", c.function)))?;
            *slot = Some(ci);
            let mut writes = Vec::new();
            for &k in &c.kernels {
                for &w in &s.kernels[k].writes {
                    if args.iter().any(|a| a.storage == w) && !writes.contains(&w) {
                        writes.push(w);
                    }
                }
            }
            calls.push(Call {
                function,
                args,
                kernels: c.kernels.clone(),
                writes,
            });
        }
        let mut weights = Vec::new();
        if let Some(w) = &s.weights {
            let wp = dir.join(&w.file);
            let all = std::fs::read(&wp).map_err(|source| Error::Io {
                path: wp.clone(),
                source,
            })?;
            for e in &w.entries {
                let (a, b) = (e.offset as usize, (e.offset + e.bytes) as usize);
                let bytes = all.get(a..b).ok_or_else(|| {
                    sched_err(
                        &wp,
                        format!("storage {}: bytes {a}..{b} past the end", e.storage),
                    )
                })?;
                weights.push((e.storage, bytes.to_vec()));
            }
        }
        Ok(Arc::new(Program {
            dir: dir.to_path_buf(),
            storage_names: s.storage.into_iter().map(|st| st.name).collect(),
            storage_bytes,
            inputs: s.inputs,
            outputs: s.outputs,
            calls,
            last_of,
            weights,
        }))
    }

    /// The call that runs when kernel `k` completes (it is the last kernel
    /// of that call), if any.
    pub fn call_after_kernel(&self, k: usize) -> Option<usize> {
        self.last_of.get(k).copied().flatten()
    }

    /// The weights (params), as (storage, bytes).
    pub fn weights(&self) -> &[(usize, Vec<u8>)] {
        &self.weights
    }

    /// Fresh storages: zeroed, with the weights in place.
    pub fn new_storages(&self) -> Vec<Buffer> {
        let mut out: Vec<Buffer> = self
            .storage_bytes
            .iter()
            .map(|&n| Buffer::zeroed(n))
            .collect();
        for (s, w) in &self.weights {
            out[*s].as_bytes_mut()[..w.len()].copy_from_slice(w);
        }
        out
    }

    /// Runs call `i` on `storages` (indexed like the schedule's storage).
    pub fn run_call(&self, i: usize, storages: &mut [Buffer]) -> Result<(), Error> {
        self.check_storages(storages)?;
        let ptrs: Vec<(*mut u8, usize)> = storages
            .iter_mut()
            .map(|b| (b.as_mut_ptr(), b.len()))
            .collect();
        // SAFETY: the pointers are the storages', uniquely borrowed for the
        // call, each 64-byte aligned.
        unsafe { self.run_call_raw(i, &|s| ptrs[s]) }
    }

    /// Runs call `i`, then keeps in its written storages only the part
    /// blocks `blocks` of a grid of `total` wrote (block `b` writes the
    /// `b`-th `1/total` of each written buffer, the convention of reef-sim's
    /// value tracking); the rest keeps its previous, stale, bytes. A full
    /// range is [`Program::run_call`].
    pub fn apply_blocks(
        &self,
        i: usize,
        storages: &mut [Buffer],
        blocks: Range<u64>,
        total: u64,
    ) -> Result<(), Error> {
        self.check_storages(storages)?;
        let ptrs: Vec<(*mut u8, usize)> = storages
            .iter_mut()
            .map(|b| (b.as_mut_ptr(), b.len()))
            .collect();
        // SAFETY: as in run_call.
        unsafe { self.apply_blocks_raw(i, &|s| ptrs[s], blocks, total) }
    }

    fn check_storages(&self, storages: &[Buffer]) -> Result<(), Error> {
        if storages.len() != self.storage_bytes.len() {
            return Err(sched_err(
                &self.dir,
                format!(
                    "{} storages given, the schedule has {}",
                    storages.len(),
                    self.storage_bytes.len()
                ),
            ));
        }
        Ok(())
    }

    /// [`Program::run_call`] on storages given by address: `at(s)` is
    /// storage `s`'s data and length.
    ///
    /// # Safety
    /// Every address `at` returns for the call's storages must be valid for
    /// reads and writes of its length during the call and 64-byte aligned.
    pub unsafe fn run_call_raw(
        &self,
        i: usize,
        at: &dyn Fn(usize) -> (*mut u8, usize),
    ) -> Result<(), Error> {
        let c = &self.calls[i];
        let args: Vec<RawTensor<'_>> = c
            .args
            .iter()
            .map(|a| {
                let (data, len) = at(a.storage);
                RawTensor {
                    data,
                    len,
                    dtype: a.dtype,
                    shape: &a.shape,
                }
            })
            .collect();
        c.function.call_raw(&args)
    }

    /// [`Program::apply_blocks`] on storages given by address.
    ///
    /// # Safety
    /// As [`Program::run_call_raw`].
    pub unsafe fn apply_blocks_raw(
        &self,
        i: usize,
        at: &dyn Fn(usize) -> (*mut u8, usize),
        blocks: Range<u64>,
        total: u64,
    ) -> Result<(), Error> {
        let total = total.max(1);
        let end = blocks.end.min(total);
        if blocks.start == 0 && end == total {
            return self.run_call_raw(i, at);
        }
        if blocks.start >= end {
            return Ok(());
        }
        // The whole computation into copies of the written storages, then
        // the blocks' part copied back.
        let c = &self.calls[i];
        let mut scratch: Vec<(usize, Buffer)> = c
            .writes
            .iter()
            .map(|&w| {
                let (p, n) = at(w);
                (w, Buffer::from_bytes(std::slice::from_raw_parts(p, n)))
            })
            .collect();
        let ptrs: Vec<(usize, *mut u8, usize)> = scratch
            .iter_mut()
            .map(|(w, b)| (*w, b.as_mut_ptr(), b.len()))
            .collect();
        let redirected = |s: usize| {
            ptrs.iter()
                .find(|p| p.0 == s)
                .map(|p| (p.1, p.2))
                .unwrap_or_else(|| at(s))
        };
        self.run_call_raw(i, &redirected)?;
        for (w, b) in &scratch {
            let (p, n) = at(*w);
            let (a, e) = (
                (blocks.start as u128 * n as u128 / total as u128) as usize,
                (end as u128 * n as u128 / total as u128) as usize,
            );
            std::ptr::copy_nonoverlapping(b.as_bytes()[a..e].as_ptr(), p.add(a), e - a);
        }
        Ok(())
    }

    /// The whole model on the CPU, call by call: `inputs` in the schedule's
    /// input order, the outputs' bytes in its output order.
    pub fn run(&self, inputs: &[&[u8]]) -> Result<Vec<Vec<u8>>, Error> {
        let mut st = self.new_storages();
        self.set_inputs(&mut st, inputs)?;
        for i in 0..self.calls.len() {
            self.run_call(i, &mut st)?;
        }
        Ok(self
            .outputs
            .iter()
            .map(|&o| st[o].as_bytes().to_vec())
            .collect())
    }

    /// Copies `inputs` (schedule order) into their storages, checking sizes.
    pub fn set_inputs(&self, storages: &mut [Buffer], inputs: &[&[u8]]) -> Result<(), Error> {
        if inputs.len() != self.inputs.len() {
            return Err(sched_err(
                &self.dir,
                format!(
                    "{} inputs given, the model has {}",
                    inputs.len(),
                    self.inputs.len()
                ),
            ));
        }
        for (&s, data) in self.inputs.iter().zip(inputs) {
            if data.len() != self.storage_bytes[s] {
                return Err(sched_err(
                    &self.dir,
                    format!(
                        "input {} is {} bytes, expected {}",
                        self.storage_names[s],
                        data.len(),
                        self.storage_bytes[s]
                    ),
                ));
            }
            storages[s].as_bytes_mut().copy_from_slice(data);
        }
        Ok(())
    }
}
