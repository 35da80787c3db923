//! HIP's module API loaded at run time (libloading): the calls the `kfd:N`
//! launch path makes, by the names and C signatures of ROCm 5.2's
//! `hip/hip_runtime_api.h` (Debian's libamdhip64-dev 5.2.3), and their
//! errors in HIP's words (`hipGetErrorString`).
//!
//! The library: `device.hip_library`, else `REEF_HIP_LIBRARY`, else
//! `libamdhip64.so` through the dynamic loader's search path (Debian's
//! libamdhip64-5 installs `libamdhip64.so.5`; the unversioned name comes
//! with libamdhip64-dev, so `libamdhip64.so.5` is tried after it). Loaded
//! once per process; every symbol is resolved at load, so a library that
//! lacks one is refused there, naming it, never at the first call.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `hipError_t`.
pub type HipCode = c_int;
pub const HIP_SUCCESS: HipCode = 0;
pub const HIP_ERROR_NOT_READY: HipCode = 600;
/// `hipStreamNonBlocking`: not synchronised with the null stream, so a
/// flag write (`hipMemcpyHtoD` on the null stream) does not wait for the
/// kernels it should evict.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `hipEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;
/// A `hipDeviceProp_t` layout: its size and the offsets read (`name[256]`
/// is at 0 in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropLayout {
    pub size: usize,
    pub gcn_arch_name: usize,
    pub multi_processor_count: usize,
}

/// ROCm 5.2's `hipDeviceProp_t`, read with `hipGetDeviceProperties`: 792
/// bytes, `gcnArchName[256]` at 396, `multiProcessorCount` at 336
/// (offsetof on the libamdhip64-dev 5.2.3 header, x86-64). ROCm 6 keeps
/// exporting `hipGetDeviceProperties` with this layout, as
/// `hipDeviceProp_tR0000` (clr f9f995c hipamd/src/hip_device.cpp:788,
/// `extern "C" hipError_t hipGetDeviceProperties(hipDeviceProp_tR0000*, …)`;
/// HIP c5e11fc include/hip/hip_deprecated.h: the same 792/396/336 by
/// offsetof with cc).
pub const PROP_R0000: PropLayout = PropLayout {
    size: 792,
    gcn_arch_name: 396,
    multi_processor_count: 336,
};

/// ROCm 6's `hipDeviceProp_t` (`hipDeviceProp_tR0600`), read with
/// `hipGetDevicePropertiesR0600`, which a ROCm 6 library exports (clr
/// hipamd/src/hip_hcc.map.in): 1472 bytes, `gcnArchName[256]` at 1160,
/// `multiProcessorCount` at 388 (offsetof with cc on HIP c5e11fc
/// include/hip/hip_runtime_api.h `hipDeviceProp_t`, x86-64).
pub const PROP_R0600: PropLayout = PropLayout {
    size: 1472,
    gcn_arch_name: 1160,
    multi_processor_count: 388,
};

/// What went wrong, in HIP's words where HIP said it.
#[derive(Debug, thiserror::Error)]
pub enum HipError {
    #[error("the HIP runtime library {name} cannot be loaded: {detail}")]
    Library { name: String, detail: String },
    #[error("{call} failed: {text} (hipError_t {code})")]
    Call {
        call: &'static str,
        code: HipCode,
        text: String,
    },
    #[error("model {path}: {detail}")]
    Model { path: String, detail: String },
    #[error("{0}")]
    Invalid(String),
}

impl HipError {
    pub fn code(&self) -> Option<HipCode> {
        match self {
            HipError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<reef_model::package::PackageError> for HipError {
    fn from(e: reef_model::package::PackageError) -> Self {
        HipError::Invalid(e.to_string())
    }
}

type Ptr = *mut c_void;

/// The resolved entry points.
#[allow(non_snake_case)]
pub struct Hip {
    pub path: String,
    pub hipInit: unsafe extern "C" fn(c_uint) -> HipCode,
    pub hipGetDeviceCount: unsafe extern "C" fn(*mut c_int) -> HipCode,
    pub hipSetDevice: unsafe extern "C" fn(c_int) -> HipCode,
    pub hipGetDeviceProperties: unsafe extern "C" fn(Ptr, c_int) -> HipCode,
    /// ROCm 6's call, when the library exports it ([`PROP_R0600`]).
    pub hipGetDevicePropertiesR0600: Option<unsafe extern "C" fn(Ptr, c_int) -> HipCode>,
    pub hipDeviceGetStreamPriorityRange: unsafe extern "C" fn(*mut c_int, *mut c_int) -> HipCode,
    pub hipMemGetInfo: unsafe extern "C" fn(*mut usize, *mut usize) -> HipCode,
    pub hipModuleLoadData: unsafe extern "C" fn(*mut Ptr, *const c_void) -> HipCode,
    pub hipModuleUnload: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipModuleGetFunction: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> HipCode,
    pub hipModuleGetGlobal:
        unsafe extern "C" fn(*mut Ptr, *mut usize, Ptr, *const c_char) -> HipCode,
    #[allow(clippy::type_complexity)]
    pub hipModuleLaunchKernel: unsafe extern "C" fn(
        Ptr,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> HipCode,
    pub hipMalloc: unsafe extern "C" fn(*mut Ptr, usize) -> HipCode,
    pub hipFree: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipMemcpyHtoD: unsafe extern "C" fn(Ptr, *const c_void, usize) -> HipCode,
    pub hipMemcpyDtoH: unsafe extern "C" fn(Ptr, Ptr, usize) -> HipCode,
    pub hipStreamCreateWithPriority: unsafe extern "C" fn(*mut Ptr, c_uint, c_int) -> HipCode,
    pub hipStreamDestroy: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipStreamSynchronize: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipEventCreateWithFlags: unsafe extern "C" fn(*mut Ptr, c_uint) -> HipCode,
    pub hipEventRecord: unsafe extern "C" fn(Ptr, Ptr) -> HipCode,
    pub hipEventQuery: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipEventDestroy: unsafe extern "C" fn(Ptr) -> HipCode,
    pub hipGetErrorString: unsafe extern "C" fn(HipCode) -> *const c_char,
    _lib: libloading::Library,
}

static HIP: OnceLock<Result<Hip, String>> = OnceLock::new();

/// The names tried without a configured library.
pub const DEFAULT_NAMES: &[&str] = &["libamdhip64.so", "libamdhip64.so.5", "libamdhip64.so.6"];

fn open(library: Option<&Path>) -> Result<Hip, String> {
    let candidates: Vec<PathBuf> = match library {
        Some(p) => vec![p.to_path_buf()],
        None => DEFAULT_NAMES.iter().map(PathBuf::from).collect(),
    };
    let mut errors = Vec::new();
    for c in &candidates {
        // SAFETY: loading a shared library runs its initialisers; the HIP
        // runtime's (or the simulated one's) are what it is loaded for.
        match unsafe { libloading::Library::new(c) } {
            Ok(lib) => return resolve(lib, c.display().to_string()),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(errors.join("; "))
}

fn resolve(lib: libloading::Library, path: String) -> Result<Hip, String> {
    macro_rules! sym {
        ($name:ident) => {
            // SAFETY: the symbol is HIP's function of that name, whose C
            // signature is the field's type (hip_runtime_api.h, ROCm 5.2).
            *unsafe { lib.get(concat!(stringify!($name), "\0").as_bytes()) }
                .map_err(|e| format!("{path} has no {}: {e}", stringify!($name)))?
        };
    }
    Ok(Hip {
        hipInit: sym!(hipInit),
        hipGetDeviceCount: sym!(hipGetDeviceCount),
        hipSetDevice: sym!(hipSetDevice),
        hipGetDeviceProperties: sym!(hipGetDeviceProperties),
        // SAFETY: as `sym!`; ROCm 6's signature (hip_runtime_api.h).
        hipGetDevicePropertiesR0600: unsafe { lib.get(b"hipGetDevicePropertiesR0600\0") }
            .ok()
            .map(|f| *f),
        hipDeviceGetStreamPriorityRange: sym!(hipDeviceGetStreamPriorityRange),
        hipMemGetInfo: sym!(hipMemGetInfo),
        hipModuleLoadData: sym!(hipModuleLoadData),
        hipModuleUnload: sym!(hipModuleUnload),
        hipModuleGetFunction: sym!(hipModuleGetFunction),
        hipModuleGetGlobal: sym!(hipModuleGetGlobal),
        hipModuleLaunchKernel: sym!(hipModuleLaunchKernel),
        hipMalloc: sym!(hipMalloc),
        hipFree: sym!(hipFree),
        hipMemcpyHtoD: sym!(hipMemcpyHtoD),
        hipMemcpyDtoH: sym!(hipMemcpyDtoH),
        hipStreamCreateWithPriority: sym!(hipStreamCreateWithPriority),
        hipStreamDestroy: sym!(hipStreamDestroy),
        hipStreamSynchronize: sym!(hipStreamSynchronize),
        hipEventCreateWithFlags: sym!(hipEventCreateWithFlags),
        hipEventRecord: sym!(hipEventRecord),
        hipEventQuery: sym!(hipEventQuery),
        hipEventDestroy: sym!(hipEventDestroy),
        hipGetErrorString: sym!(hipGetErrorString),
        path,
        _lib: lib,
    })
}

/// Loads the HIP runtime (once per process; a second call with another
/// library gets the first one's result).
pub fn load_library(library: Option<&Path>) -> Result<&'static Hip, HipError> {
    let name = library
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| DEFAULT_NAMES.join(" or "));
    HIP.get_or_init(|| open(library))
        .as_ref()
        .map_err(|detail| HipError::Library {
            name,
            detail: format!(
                "{detail}: install ROCm's HIP runtime (Debian: libamdhip64-5), point \
                 device.hip_library or REEF_HIP_LIBRARY at one, or use --device sim:mi50"
            ),
        })
}

/// The loaded runtime (after [`load_library`]).
pub fn hip() -> Result<&'static Hip, HipError> {
    match HIP.get() {
        Some(Ok(h)) => Ok(h),
        _ => Err(HipError::Invalid("the HIP runtime is not loaded".into())),
    }
}

/// A HIP call's result as an error in HIP's words.
pub fn check(call: &'static str, code: HipCode) -> Result<(), HipError> {
    if code == HIP_SUCCESS {
        return Ok(());
    }
    let text = hip()
        .ok()
        .map(|h| {
            // SAFETY: hipGetErrorString returns a static string for any code.
            let p = unsafe { (h.hipGetErrorString)(code) };
            if p.is_null() {
                String::from("unknown error")
            } else {
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        })
        .unwrap_or_default();
    Err(HipError::Call { call, code, text })
}

pub(crate) fn alloc(bytes: usize) -> Result<Ptr, HipError> {
    let h = hip()?;
    let mut p = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    check("hipMalloc", unsafe { (h.hipMalloc)(&mut p, bytes) })?;
    Ok(p)
}

pub(crate) fn free(p: Ptr) {
    if let Ok(h) = hip() {
        // SAFETY: an allocation of ours, freed once.
        unsafe {
            let _ = (h.hipFree)(p);
        }
    }
}

pub(crate) fn htod(p: Ptr, data: &[u8]) -> Result<(), HipError> {
    let h = hip()?;
    // SAFETY: `data` is readable for its length; `p` is device memory.
    check("hipMemcpyHtoD", unsafe {
        (h.hipMemcpyHtoD)(p, data.as_ptr().cast(), data.len())
    })
}

pub(crate) fn dtoh(out: &mut [u8], p: Ptr) -> Result<(), HipError> {
    let h = hip()?;
    // SAFETY: `out` is writable for its length.
    check("hipMemcpyDtoH", unsafe {
        (h.hipMemcpyDtoH)(out.as_mut_ptr().cast(), p, out.len())
    })
}

pub(crate) fn function(m: Ptr, name: &str) -> Result<Ptr, HipError> {
    let h = hip()?;
    let c = std::ffi::CString::new(name).map_err(|_| HipError::Invalid(format!("{name:?}")))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: valid out-pointer and NUL-terminated name.
    check("hipModuleGetFunction", unsafe {
        (h.hipModuleGetFunction)(&mut f, m, c.as_ptr())
    })?;
    Ok(f)
}

pub(crate) fn global(m: Ptr, name: &str) -> Result<Ptr, HipError> {
    let h = hip()?;
    let c = std::ffi::CString::new(name).map_err(|_| HipError::Invalid(format!("{name:?}")))?;
    let (mut p, mut n) = (std::ptr::null_mut(), 0usize);
    // SAFETY: valid out-pointers and NUL-terminated name.
    check("hipModuleGetGlobal", unsafe {
        (h.hipModuleGetGlobal)(&mut p, &mut n, m, c.as_ptr())
    })?;
    Ok(p)
}
