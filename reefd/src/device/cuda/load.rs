//! Loading a model on `cuda:N` outside the daemon's lock (issue 25 item 2:
//! no request holds the state lock while it does device work of unbounded
//! length). A load is three steps:
//!
//! 1. under the lock, [`super::kernels::CudaKernels::prepare`] takes what
//!    the load needs from the device (its context, shared: the driver API
//!    is thread-safe and a context may be current on several threads) and
//!    the model's files, already read by the runtime;
//! 2. outside it, [`LoadJob::run`], on the thread that serves the load:
//!    the memory check, the weights' upload (in pieces of
//!    [`UPLOAD_CHUNK`]) and the reference runs (one unpreempted run per
//!    input seed on a private stream of the same context, waited for),
//!    while the daemon serves other requests, RT inferences included, on
//!    the same context;
//! 3. under the lock again, [`super::kernels::CudaKernels::install`]:
//!    the model, its references and stand-alone latency added, unless the
//!    context was rebuilt after a fault meanwhile (then the load fails and
//!    is retried by its client; its weights went with the old context).
//!
//! A load is cancelled (shutdown) at its next step: between two pieces of
//! the upload or two reference runs. A reference run is one inference of
//! the model and is waited for once started: its kernels use the buffers
//! the cancelled load then frees. What a load holds on the device is freed
//! when it fails, is cancelled, or is not installed ([`Uploaded`]'s drop).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};

use super::driver::{check, EVENT_DISABLE_TIMING, STREAM_NON_BLOCKING};
use super::kernels::{put_inputs, read_outputs, INPUT_SEEDS};
use super::{
    alloc, free_all, free_instance, htod, instance_of, launch_kernel, Ctx, CudaError, Instance,
    Loaded, ModelFiles,
};

/// The largest piece of weights copied in one call: a load checks for
/// cancellation between pieces (64 MiB: tens of milliseconds over PCIe).
pub const UPLOAD_CHUNK: usize = 64 << 20;

/// A model load's device work, to run outside the daemon's lock.
pub struct LoadJob {
    pub(super) ctx: Arc<Ctx>,
    pub(super) device: String,
    pub(super) name: String,
    /// Scheduler streams that may run one model, each with an instance
    /// (`CudaKernels::footprint`).
    pub(super) streams_per_model: usize,
}

/// A model uploaded by a [`LoadJob`]: its weights on the device, its
/// reference outputs by seed and its stand-alone latency. Freed on drop
/// unless installed.
pub struct Uploaded {
    pub(super) ctx: Arc<Ctx>,
    pub(super) name: String,
    pub(super) loaded: Option<Loaded>,
    pub(super) references: Vec<Vec<u8>>,
    pub(super) standalone: u64,
    /// Each kernel's stand-alone time (ns), see [`references`].
    pub(super) kernel_ns: Vec<u64>,
}

/// What a model's load-time runs found.
struct References {
    outputs: Vec<Vec<u8>>,
    standalone: u64,
    kernel_ns: Vec<u64>,
}

/// Times each kernel is run alone at load for its prediction (the
/// fastest is kept).
const KERNEL_PASSES: usize = 3;

impl Drop for Uploaded {
    fn drop(&mut self) {
        if let Some(l) = self.loaded.take() {
            free_all(self.ctx.0, &l.weights);
        }
    }
}

fn cancelled(cancel: &AtomicBool, name: &str) -> Result<(), CudaError> {
    if cancel.load(Ordering::Relaxed) {
        return Err(CudaError::Invalid(format!(
            "the load of model {name} was cancelled: reefd is shutting down"
        )));
    }
    Ok(())
}

impl LoadJob {
    /// Uploads model `files` and runs its references (see the module
    /// documentation); stops with an error at its next step once `cancel`
    /// is set. Refused with the figures when the model's footprint
    /// (`CudaKernels::footprint`) and its reference run's buffers exceed
    /// the free memory.
    pub fn run(self, files: ModelFiles, cancel: &AtomicBool) -> Result<Uploaded, CudaError> {
        let LoadJob {
            ctx,
            device,
            name,
            streams_per_model,
        } = self;
        let needed = files.weight_bytes() + (streams_per_model as u64 + 1) * files.stream_bytes();
        // SAFETY: our context, alive while `ctx` is held.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx.0) })?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        check("cuMemGetInfo_v2", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        if needed > free as u64 {
            return Err(CudaError::DoesNotFit {
                model: name,
                device,
                needed,
                free: free as u64,
                total: total as u64,
            });
        }
        tracing::debug!(model = %name, %device, "uploading the model and running its references outside the daemon's lock");
        // Held by `up` from the first allocation on, so that every exit
        // frees what was uploaded.
        let mut up = Uploaded {
            ctx,
            name,
            loaded: Some(Loaded {
                files,
                weights: HashMap::new(),
            }),
            references: Vec::new(),
            standalone: 0,
            kernel_ns: Vec::new(),
        };
        let loaded = up.loaded.as_mut().expect("set above");
        for (&i, bytes) in &loaded.files.weights {
            let p = alloc(bytes.len())?;
            loaded.weights.insert(i, p);
            for (k, piece) in bytes.chunks(UPLOAD_CHUNK).enumerate() {
                cancelled(cancel, &up.name)?;
                htod(p + (k * UPLOAD_CHUNK) as CUdeviceptr, piece)?;
            }
        }
        let inst = instance_of(loaded)?;
        let r = references(loaded, &inst, cancel, &up.name);
        free_instance(inst);
        let r = r?;
        (up.references, up.standalone, up.kernel_ns) = (r.outputs, r.standalone, r.kernel_ns);
        Ok(up)
    }
}

/// One unpreempted run of model `m` per input seed, on a private stream
/// of the current context with instance `inst`, waited for: the outputs,
/// by seed, and the fastest run's wall time (ns, from its input copy,
/// which a request also makes when its first kernel is launched, to the
/// synchronisation returning; the output copy after is not counted).
/// Then each kernel alone, [`KERNEL_PASSES`] times: the fastest time of
/// each, the predictions `aker` and `baymax` take on this GPU (Aker §5
/// trains its predictor on the GPU it serves; issue 26 item 6). It is a
/// host wall time from the launch call to the synchronisation returning,
/// so it includes one launch and one synchronisation (CUDA events with
/// timing would exclude them; the simulated libcuda does not time
/// events). Checks `cancel` before each run.
fn references(
    m: &Loaded,
    inst: &Instance,
    cancel: &AtomicBool,
    name: &str,
) -> Result<References, CudaError> {
    let mut cu = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the context is current.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(&mut cu, STREAM_NON_BLOCKING)
    })?;
    let mut ev = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the context is current.
    let r = check("cuEventCreate", unsafe {
        sys::cuEventCreate(&mut ev, EVENT_DISABLE_TIMING)
    })
    .and_then(|()| {
        let sync = || {
            // SAFETY: our stream.
            check("cuStreamSynchronize", unsafe {
                sys::cuStreamSynchronize(cu)
            })
        };
        let mut exec = 1;
        let mut outs = Vec::new();
        let mut fastest = u64::MAX;
        for seed in 0..INPUT_SEEDS {
            cancelled(cancel, name)?;
            let t0 = std::time::Instant::now();
            put_inputs(&m.files, inst, seed)?;
            for k in 0..m.files.launches.len() {
                launch_kernel(m, inst, cu, k, exec, ev)?;
                exec += 1;
            }
            sync()?;
            fastest = fastest.min(t0.elapsed().as_nanos() as u64);
            outs.push(read_outputs(&m.files, inst)?);
        }
        let mut kernel_ns = vec![u64::MAX; m.files.launches.len()];
        for _ in 0..KERNEL_PASSES {
            cancelled(cancel, name)?;
            put_inputs(&m.files, inst, 0)?;
            for (k, best) in kernel_ns.iter_mut().enumerate() {
                let t0 = std::time::Instant::now();
                launch_kernel(m, inst, cu, k, exec, ev)?;
                sync()?;
                *best = (*best).min((t0.elapsed().as_nanos() as u64).max(1));
                exec += 1;
            }
        }
        Ok(References {
            outputs: outs,
            standalone: fastest,
            kernel_ns,
        })
    });
    // SAFETY: our stream and event; the stream is idle after the
    // synchronisations, or its work failed.
    unsafe {
        let _ = sys::cuStreamSynchronize(cu);
        if !ev.is_null() {
            let _ = sys::cuEventDestroy_v2(ev);
        }
        let _ = sys::cuStreamDestroy_v2(cu);
    }
    r
}
