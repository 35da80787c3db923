//! The data of a request (DESIGN.md layer 4: "Requests carry their
//! tensors ... and answers carry the outputs"; REEF's RegisterBlob, SetBlob
//! and GetBlob): shared-memory regions a client registers, the bytes of a
//! request's inputs (ranges of its frame or of a region, never copied on
//! the way to the device), where its outputs go, and a model's declared
//! inputs and outputs.
//!
//! Copies (docs/protocol.md, "Copies per path"): an inline input is read
//! from the socket into its frame's buffer and copied once more, to the
//! device; an input in a region is copied once, from the region to the
//! device. An output is copied from the device into a buffer written to
//! the socket (inline) or straight into its region.

use crate::protocol::{FrameData, TensorSpec};
use std::ops::Range;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// A shared-memory region a client registered: a memfd it sent over the
/// socket (SCM_RIGHTS), sealed against shrinking, mapped here. The seal is
/// what makes the mapping safe: the client cannot truncate the file under
/// it (a read past the end of a truncated file is SIGBUS, which would take
/// the daemon down). What the client does to its own mapping (unmap it,
/// close its descriptor) does not touch this one; the pages live until the
/// last mapping is gone.
#[derive(Debug)]
pub struct Region {
    pub id: u64,
    pub uid: u32,
    map: memmap2::MmapRaw,
    writable: bool,
}

impl Region {
    /// Maps the memfd `fd` as region `id` of user `uid`; refused, saying
    /// why, when it is not a sealed memfd of 1 to `max_bytes` bytes.
    pub fn open(id: u64, uid: u32, fd: OwnedFd, max_bytes: u64) -> Result<Region, String> {
        let raw = fd.as_raw_fd();
        // SAFETY: a zeroed stat buffer that fstat fills; `raw` is open.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err(format!(
                "cannot stat the descriptor sent: {}",
                std::io::Error::last_os_error()
            ));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(
                "the descriptor sent is not a memfd (memfd_create with MFD_ALLOW_SEALING)".into(),
            );
        }
        // SAFETY: F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(raw, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(
                "the region must be a memfd sealed against shrinking: create it with memfd_create(MFD_ALLOW_SEALING), size it, then fcntl(F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)"
                    .into(),
            );
        }
        let bytes = st.st_size as u64;
        if bytes == 0 || bytes > max_bytes {
            return Err(format!(
                "a region of {bytes} bytes: regions are 1 to {max_bytes} bytes (daemon.max_region_bytes)"
            ));
        }
        // SAFETY: F_GETFL takes no argument.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
        let writable = flags >= 0
            && flags & libc::O_ACCMODE == libc::O_RDWR
            && seals & (libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE) == 0;
        let file = std::fs::File::from(fd);
        let opts = memmap2::MmapOptions::new();
        let map = if writable {
            opts.map_raw(&file)
        } else {
            opts.map_raw_read_only(&file)
        }
        .map_err(|e| format!("cannot map the region: {e}"))?;
        // The mapping holds the pages; the descriptor closes here.
        drop(file);
        Ok(Region {
            id,
            uid,
            map,
            writable,
        })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Whether outputs may be written into it.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// The range `offset..offset + bytes` if it lies inside the region.
    pub fn range(&self, offset: u64, bytes: u64) -> Option<Range<usize>> {
        let end = offset.checked_add(bytes)?;
        (end <= self.len() as u64).then_some(offset as usize..end as usize)
    }

    /// Writes `src` at `at` (within the region, checked when the request
    /// was read; a range outside is ignored).
    pub fn write(&self, at: usize, src: &[u8]) {
        if !self.writable || at.checked_add(src.len()).is_none_or(|e| e > self.len()) {
            return;
        }
        // SAFETY: the destination lies inside the writable mapping, which
        // lives as long as `self`; the client may touch the same bytes at
        // the same time, which can only garble its own data.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.map.as_mut_ptr().add(at), src.len())
        }
    }

    /// A pointer to byte `at` (for a device's copy from the region).
    pub fn ptr(&self, at: usize) -> *const u8 {
        // SAFETY: callers pass offsets of checked ranges (at <= len).
        unsafe { self.map.as_ptr().add(at.min(self.len())) }
    }

    /// A mutable pointer to byte `at` (for a device's copy into the
    /// region); `None` when the region is read-only.
    pub fn ptr_mut(&self, at: usize) -> Option<*mut u8> {
        // SAFETY: as for `ptr`.
        self.writable
            .then(|| unsafe { self.map.as_mut_ptr().add(at.min(self.len())) })
    }
}

/// Where an input's bytes are: a range of its request's frame, or of a
/// registered region.
#[derive(Debug, Clone)]
pub enum Bytes {
    Inline {
        data: FrameData,
        range: Range<usize>,
    },
    Shm {
        region: Arc<Region>,
        range: Range<usize>,
    },
}

impl Bytes {
    pub fn len(&self) -> usize {
        match self {
            Bytes::Inline { range, .. } | Bytes::Shm { range, .. } => range.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A pointer to the first byte, valid while `self` lives (for a
    /// device's copy, e.g. cuMemcpyHtoD).
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            Bytes::Inline { data, range } => data.frame[data.start + range.start..].as_ptr(),
            Bytes::Shm { region, range } => region.ptr(range.start),
        }
    }

    /// Replaces `v`'s contents with the bytes: one pass, no zeroing first
    /// (its allocation is reused when large enough).
    pub fn copy_into(&self, v: &mut Vec<u8>) {
        v.clear();
        v.reserve(self.len());
        // SAFETY: `as_ptr` points at `len()` readable bytes (see
        // `copy_to`), `v` has room for them, and they are initialised by
        // the copy before the length covers them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr(), v.as_mut_ptr(), self.len());
            v.set_len(self.len());
        }
    }

    /// Copies the bytes into `dst` (of the same length; a shorter `dst`
    /// takes the first bytes).
    pub fn copy_to(&self, dst: &mut [u8]) {
        let n = dst.len().min(self.len());
        // SAFETY: `as_ptr` points at `len()` readable bytes (a range
        // checked against its frame or region when the request was read),
        // and `dst` is a distinct buffer of at least `n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), dst.as_mut_ptr(), n) }
    }
}

/// Where one output goes.
#[derive(Debug, Clone)]
pub struct OutputPlace {
    /// The model storage holding it.
    pub storage: usize,
    pub bytes: usize,
    /// A range of a writable region; `None`: inline, in the answer.
    pub region: Option<(Arc<Region>, Range<usize>)>,
}

/// One output as the device produced it.
#[derive(Debug, PartialEq)]
pub enum OutputBytes {
    /// Copied from the device into this buffer, for the answer.
    Inline(Vec<u8>),
    /// Copied from the device into its region.
    Written,
    /// Not read yet: the device has it once work it queued is done (the
    /// simulated device's CPU build, `sim/src/realvalues.rs`). The daemon
    /// reads it after releasing its lock, and writes it to the output's
    /// region or puts it in the answer then ([`Later`]).
    Later(Later),
}

/// An output's bytes read later, off the daemon's lock: `None` when the
/// device has none.
pub struct Later(pub Box<dyn FnOnce() -> Option<Vec<u8>> + Send>);

impl Later {
    pub fn read(self) -> Option<Vec<u8>> {
        (self.0)()
    }
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Later(..)")
    }
}

/// Two reads not yet made are never known to be equal.
impl PartialEq for Later {
    fn eq(&self, _: &Self) -> bool {
        false
    }
}

/// A request's data as the device receives it: each input's storage and
/// bytes, and each of the model's outputs with where it goes.
#[derive(Debug, Clone, Default)]
pub struct RequestData {
    pub inputs: Vec<(usize, Bytes)>,
    pub outputs: Vec<OutputPlace>,
}

/// What a device did with a request's outputs: one entry per
/// [`RequestData::outputs`], or why it has none.
pub type Outputs = Result<Vec<OutputBytes>, String>;

/// A model's declared inputs and outputs, each with the storage that holds
/// it on the device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelIo {
    pub inputs: Vec<(TensorSpec, usize)>,
    pub outputs: Vec<(TensorSpec, usize)>,
}

/// numpy's name of a schedule's storage type (TVM's `uint1` is `bool`).
pub fn dtype_of_stype(stype: &str) -> String {
    match stype {
        "uint1" => "bool".into(),
        s => s.to_string(),
    }
}

impl ModelIo {
    /// The inputs and outputs of `model`: a reef-compile output's
    /// `inputs`/`outputs` storages with their ONNX names and shapes, else
    /// the roles of a hand-written package's storages (`roles`: storage
    /// name, bytes, role, from `model.toml`), typed by the schedule; none
    /// for a measured REEF schedule (it takes no tensors).
    pub fn of(model: &reef_model::Model, roles: Option<&[(String, u64, String)]>) -> ModelIo {
        let spec = |i: usize, name: Option<String>| -> Option<(TensorSpec, usize)> {
            let b = model.buffers.get(i)?;
            let shape = model
                .compiled
                .as_ref()
                .and_then(|c| c.shapes.get(&i).cloned())
                .unwrap_or_else(|| vec![b.elements]);
            let name = name.unwrap_or_else(|| {
                model
                    .compiled
                    .as_ref()
                    .and_then(|c| c.names.get(&b.name).cloned())
                    .unwrap_or_else(|| b.name.clone())
            });
            Some((
                TensorSpec {
                    name,
                    dtype: dtype_of_stype(&b.stype),
                    shape,
                },
                i,
            ))
        };
        if let Some(c) = &model.compiled {
            return ModelIo {
                inputs: c.inputs.iter().filter_map(|&i| spec(i, None)).collect(),
                outputs: c.outputs.iter().filter_map(|&i| spec(i, None)).collect(),
            };
        }
        let Some(roles) = roles else {
            return ModelIo::default();
        };
        let typed = roles.len() == model.buffers.len();
        let mut io = ModelIo::default();
        for (i, (name, bytes, role)) in roles.iter().enumerate() {
            let t = match (typed, model.buffers.get(i)) {
                (true, Some(b)) if b.bytes == *bytes => spec(i, Some(name.clone())),
                _ => Some((
                    TensorSpec {
                        name: name.clone(),
                        dtype: "uint8".into(),
                        shape: vec![*bytes],
                    },
                    i,
                )),
            };
            match role.as_str() {
                "input" => io.inputs.extend(t),
                "output" => io.outputs.extend(t),
                _ => {}
            }
        }
        io
    }
}
