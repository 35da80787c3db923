//! The CUDA driver API as the launch path calls it: the driver library
//! loaded (cudarc's dynamic loading, [`load_library`]), each call's result
//! checked into a [`CudaError`] with the driver's name for the code and a
//! hint for the operator, and thin wrappers for allocation, copies and
//! module symbols. Everything above (contexts, models, streams) is in
//! [`super`] and [`super::kernels`].

use std::ffi::{c_void, CStr, CString};
use std::path::Path;

use cudarc::driver::sys::{self, CUdeviceptr, CUfunction, CUmodule, CUresult, CUstream};

/// `CU_STREAM_NON_BLOCKING`: reefd's streams must not synchronise with the
/// legacy default stream, on which the synchronous preempt-flag write runs;
/// otherwise the write would wait for the very kernels it evicts.
pub(crate) const STREAM_NON_BLOCKING: u32 = 1;
/// `CU_EVENT_DISABLE_TIMING`: completion events only.
pub(crate) const EVENT_DISABLE_TIMING: u32 = 2;

/// Everything the launch path can fail with. Texts are for the operator.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("the CUDA driver library cannot be used: {0}")]
    NoLibrary(String),
    #[error("{call} failed: {name} ({text}); {hint}")]
    Driver {
        call: &'static str,
        code: CUresult,
        name: String,
        text: String,
        hint: &'static str,
    },
    #[error(
        "model {model} does not fit on {device}: it needs {needed} B of device memory and {free} B \
         are free (of {total} B); nothing was loaded: unload a model or use a GPU with more memory"
    )]
    DoesNotFit {
        model: String,
        device: String,
        needed: u64,
        free: u64,
        total: u64,
    },
    #[error("model {path}: {detail}")]
    Model { path: String, detail: String },
    #[error(transparent)]
    Package(#[from] reef_model::package::PackageError),
    #[error("{0}")]
    Invalid(String),
}

impl CudaError {
    /// The driver's code, for a failed driver call.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }
}

fn hint(code: CUresult) -> &'static str {
    use CUresult::*;
    match code {
        CUDA_ERROR_INVALID_HANDLE => {
            "a CUDA object (module, function, stream, event) was used after it was destroyed or \
             is unknown to the driver: a reefd bug, report it and restart reefd"
        }
        CUDA_ERROR_INVALID_VALUE => {
            "the driver refused an argument: a launch shape outside the GPU's limits, a copy past \
             the end of an allocation, or a freed pointer; check the model's model.toml (grid, \
             block, storage sizes)"
        }
        CUDA_ERROR_ILLEGAL_ADDRESS => {
            "a kernel accessed memory it does not own; the CUDA context is unusable: restart \
             reefd, and check the model's storage sizes"
        }
        CUDA_ERROR_OUT_OF_MEMORY => "the GPU is out of memory: unload a model",
        CUDA_ERROR_INVALID_PTX | CUDA_ERROR_INVALID_IMAGE => {
            "the driver could not compile the model's PTX: check its .target against the GPU"
        }
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES => {
            "the kernel needs more registers or shared memory than the GPU has per block"
        }
        CUDA_ERROR_NOT_FOUND => "a kernel or symbol named by the model is missing from its PTX",
        CUDA_ERROR_NOT_SUPPORTED => {
            "this driver does not implement the call (the simulated libcuda implements only the \
             calls reefd makes)"
        }
        CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE => {
            "no such GPU: cuda:N counts the GPUs nvidia-smi lists from 0"
        }
        CUDA_ERROR_INVALID_CONTEXT => "no usable CUDA context: a reefd bug, restart reefd",
        _ => "see the CUDA driver API documentation for this code",
    }
}

pub(crate) fn check(call: &'static str, code: CUresult) -> Result<(), CudaError> {
    if code == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (mut name, mut text) = (std::ptr::null(), std::ptr::null());
    // SAFETY: both out-pointers are valid; the driver returns static strings.
    let (name, text) = unsafe {
        let n = sys::cuGetErrorName(code, &mut name);
        let t = sys::cuGetErrorString(code, &mut text);
        (
            if n == CUresult::CUDA_SUCCESS && !name.is_null() {
                CStr::from_ptr(name).to_string_lossy().into_owned()
            } else {
                format!("{code:?}")
            },
            if t == CUresult::CUDA_SUCCESS && !text.is_null() {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            } else {
                "no description".into()
            },
        )
    };
    Err(CudaError::Driver {
        call,
        code,
        name,
        text,
        hint: hint(code),
    })
}

/// Makes the driver library available to cudarc: loads `library` first if
/// given, then runs cudarc's presence check.
pub fn load_library(library: Option<&Path>) -> Result<(), CudaError> {
    if let Some(path) = library {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| CudaError::NoLibrary(format!("{}: path contains NUL", path.display())))?;
        // SAFETY: dlopen with a valid C string; the handle is kept for the
        // life of the process (never dlclosed), as cudarc keeps its own.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a C string or null.
            let e = unsafe { libc::dlerror() };
            let why = if e.is_null() {
                "unknown error".into()
            } else {
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            return Err(CudaError::NoLibrary(format!(
                "cannot load {}: {why}",
                path.display()
            )));
        }
    }
    // SAFETY: only tries to dlopen the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::NoLibrary(
            "libcuda.so is not on the library search path (install the NVIDIA driver on a GPU \
             host, or point device.cuda_library or REEF_CUDA_LIBRARY at a driver library such \
             as the simulated test device target/release/libreef_libcuda_sim.so)"
                .into(),
        ));
    }
    Ok(())
}

pub fn alloc(bytes: usize) -> Result<CUdeviceptr, CudaError> {
    let mut p = 0;
    // SAFETY: valid out-pointer.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&mut p, bytes)
    })?;
    Ok(p)
}

pub fn htod(p: CUdeviceptr, data: &[u8]) -> Result<(), CudaError> {
    // SAFETY: data is valid for its length.
    check("cuMemcpyHtoD_v2", unsafe {
        sys::cuMemcpyHtoD_v2(p, data.as_ptr() as *const c_void, data.len())
    })
}

pub fn dtoh(out: &mut [u8], p: CUdeviceptr) -> Result<(), CudaError> {
    // SAFETY: out is valid for its length.
    check("cuMemcpyDtoH_v2", unsafe {
        sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut c_void, p, out.len())
    })
}

pub(crate) fn function(m: CUmodule, name: &str) -> Result<CUfunction, CudaError> {
    let c = CString::new(name).map_err(|_| CudaError::Invalid(format!("kernel name {name:?}")))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: valid pointers.
    check("cuModuleGetFunction", unsafe {
        sys::cuModuleGetFunction(&mut f, m, c.as_ptr())
    })?;
    Ok(f)
}

pub(crate) fn global(m: CUmodule, name: &str) -> Result<CUdeviceptr, CudaError> {
    let c = CString::new(name).map_err(|_| CudaError::Invalid(format!("symbol {name:?}")))?;
    let (mut p, mut n) = (0, 0);
    // SAFETY: valid pointers.
    check("cuModuleGetGlobal_v2", unsafe {
        sys::cuModuleGetGlobal_v2(&mut p, &mut n, m, c.as_ptr())
    })?;
    Ok(p)
}

/// Raw driver calls for tests that provoke the driver's errors through the
/// backend's own error path.
///
/// # Safety (every function taking a handle)
/// The handles are passed to the driver as they are. The simulated libcuda
/// validates any value; NVIDIA's driver is only specified for handles it
/// returned and not yet destroyed, so a made-up or destroyed handle is
/// undefined behaviour there.
pub mod raw {
    use super::*;

    /// `cuModuleGetFunction`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn function(m: CUmodule, name: &str) -> Result<CUfunction, CudaError> {
        super::function(m, name)
    }

    /// # Safety
    /// See the module documentation.
    ///
    /// Launches `f` with no arguments on a fresh stream of the current
    /// context with the given shape.
    pub unsafe fn launch(
        f: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        stream: CUstream,
    ) -> Result<(), CudaError> {
        // SAFETY: driver call; a kernel without parameters takes no array.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                0,
                stream,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        })
    }
    pub use super::{alloc, dtoh, htod};

    /// `cuModuleLoadData` of a PTX text (not injected).
    pub fn module_load(ptx: &str) -> Result<CUmodule, CudaError> {
        let c = CString::new(ptx).map_err(|_| CudaError::Invalid("PTX with NUL".into()))?;
        let mut m = std::ptr::null_mut();
        // SAFETY: NUL-terminated image, valid out-pointer.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, c.as_ptr() as *const c_void)
        })?;
        Ok(m)
    }

    /// `cuModuleUnload`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn module_unload(m: CUmodule) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuModuleUnload", unsafe { sys::cuModuleUnload(m) })
    }

    /// `cuStreamCreate` (non-blocking) in the current context.
    pub fn stream() -> Result<CUstream, CudaError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, STREAM_NON_BLOCKING)
        })?;
        Ok(s)
    }

    /// `cuStreamSynchronize`.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn sync(s: CUstream) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(s)
        })
    }

    /// `cuMemFree_v2`.
    pub fn free(p: CUdeviceptr) -> Result<(), CudaError> {
        // SAFETY: driver call.
        check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(p) })
    }
}
