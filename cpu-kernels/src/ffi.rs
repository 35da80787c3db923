//! Loading `cpu.so` and calling one of its functions through tvm-ffi's C
//! calling convention, without TVM's runtime.
//!
//! TVM 0.27 exports each TIR function compiled for `llvm` as
//! `int __tvm_ffi_<name>(void* self, const TVMFFIAny* args, int32_t n,
//! TVMFFIAny* result)` (tvm_ffi/c_api.h, `TVMFFISafeCallType`), every
//! argument a `DLTensor*` (type index `kTVMFFIDLTensorPtr` = 7). The code
//! checks each tensor's ndim, dtype, shape, strides (none: compact) and
//! device (CPU) and reports a mismatch through
//! `TVMFFIErrorSetRaisedFromCStrParts`, which reef-compile links into the
//! library itself (it keeps the message per thread, read back here through
//! `reef_cpu_last_error`). Functions that need a scratch buffer larger than
//! the stack call through the library's `__TVMBackendAllocWorkspace` /
//! `__TVMBackendFreeWorkspace` pointers, which a TVM runtime would fill in
//! when loading the module; [`Library::open`] fills them with malloc and free.

use crate::{DType, Error};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `kTVMFFIDLTensorPtr` (tvm_ffi/c_api.h `TVMFFITypeIndex`).
const TYPE_DLTENSOR_PTR: i32 = 7;
/// `kDLCPU` (dlpack.h).
const DL_CPU: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct FfiAny {
    type_index: i32,
    zero_padding: u32,
    value: *mut c_void,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype: DType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

type SafeCall = unsafe extern "C" fn(*mut c_void, *const FfiAny, i32, *mut FfiAny) -> c_int;
type AllocWorkspace = unsafe extern "C" fn(c_int, c_int, u64, c_int, c_int) -> *mut c_void;
type FreeWorkspace = unsafe extern "C" fn(c_int, c_int, *mut c_void) -> c_int;
type LastError = unsafe extern "C" fn() -> *const c_char;

unsafe extern "C" fn alloc_workspace(
    _dev_type: c_int,
    _dev_id: c_int,
    nbytes: u64,
    _code: c_int,
    _bits: c_int,
) -> *mut c_void {
    let mut p: *mut c_void = std::ptr::null_mut();
    // 64 bytes: TVM's kAllocAlignment, which its vectorised loads assume.
    if libc::posix_memalign(&mut p, 64, (nbytes as usize).max(1)) != 0 {
        return std::ptr::null_mut();
    }
    p
}

unsafe extern "C" fn free_workspace(_dev_type: c_int, _dev_id: c_int, p: *mut c_void) -> c_int {
    libc::free(p);
    0
}

/// A loaded CPU library (`cpu.so` of a reef-compile model directory).
pub struct Library {
    lib: libloading::Library,
    path: PathBuf,
    last_error: Option<LastError>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("path", &self.path).finish()
    }
}

impl Library {
    /// Loads the library and points its workspace allocator at malloc.
    pub fn open(path: &Path) -> Result<Arc<Library>, Error> {
        // SAFETY: loading runs the library's initialisers; reef-compile's
        // libraries have none beyond the C runtime's.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| Error::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        // SAFETY: the symbols are the data pointers TVM's codegen declares
        // (`void* (*__TVMBackendAllocWorkspace)(...)`), written before any
        // function of the library runs.
        unsafe {
            if let Ok(p) = lib.get::<*mut Option<AllocWorkspace>>(b"__TVMBackendAllocWorkspace\0") {
                **p = Some(alloc_workspace);
            }
            if let Ok(p) = lib.get::<*mut Option<FreeWorkspace>>(b"__TVMBackendFreeWorkspace\0") {
                **p = Some(free_workspace);
            }
        }
        // SAFETY: reef-compile's shim defines it as `const char* (void)`.
        let last_error = unsafe { lib.get::<LastError>(b"reef_cpu_last_error\0") }
            .ok()
            .map(|s| *s);
        Ok(Arc::new(Library {
            lib,
            path: path.to_path_buf(),
            last_error,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The function TVM exported as `__tvm_ffi_<name>`.
    pub fn function(self: &Arc<Self>, name: &str) -> Result<Function, Error> {
        let symbol = format!("__tvm_ffi_{name}\0");
        // SAFETY: TVM exports these with the `TVMFFISafeCallType` signature.
        let call = unsafe { self.lib.get::<SafeCall>(symbol.as_bytes()) }
            .map(|s| *s)
            .map_err(|_| Error::MissingFunction {
                library: self.path.clone(),
                function: name.to_string(),
            })?;
        Ok(Function {
            lib: self.clone(),
            name: name.to_string(),
            call,
        })
    }
}

/// One tensor argument: `len` bytes at `data`, read as `dtype` in `shape`
/// (row-major, compact).
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    pub data: *mut u8,
    pub len: usize,
    pub dtype: DType,
    pub shape: &'a [i64],
}

/// A function of a loaded CPU library.
#[derive(Clone)]
pub struct Function {
    lib: Arc<Library>,
    name: String,
    call: SafeCall,
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Function")
            .field("name", &self.name)
            .finish()
    }
}

impl Function {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs the function on `args` (its TIR parameters, in order).
    ///
    /// # Safety
    /// Each `data` must be valid for reads and writes of `len` bytes for the
    /// duration of the call, and 64-byte aligned (TVM's code assumes it for
    /// vector loads); arguments may alias only as the TIR function allows
    /// (reef-compile's calls never pass one storage as two parameters that
    /// are written).
    pub unsafe fn call_raw(&self, args: &[RawTensor<'_>]) -> Result<(), Error> {
        for (i, a) in args.iter().enumerate() {
            let need = a.dtype.bytes_for(a.shape);
            if need > a.len {
                return Err(Error::Argument {
                    function: self.name.clone(),
                    index: i,
                    problem: format!(
                        "{:?} {} needs {need} bytes, the buffer has {}",
                        a.shape, a.dtype, a.len
                    ),
                });
            }
            if (a.data as usize) % 64 != 0 {
                return Err(Error::Argument {
                    function: self.name.clone(),
                    index: i,
                    problem: format!("data at {:p} is not 64-byte aligned", a.data),
                });
            }
        }
        let tensors: Vec<DlTensor> = args
            .iter()
            .map(|a| DlTensor {
                data: a.data as *mut c_void,
                device_type: DL_CPU,
                device_id: 0,
                ndim: a.shape.len() as i32,
                dtype: a.dtype,
                shape: a.shape.as_ptr(),
                strides: std::ptr::null(),
                byte_offset: 0,
            })
            .collect();
        let anys: Vec<FfiAny> = tensors
            .iter()
            .map(|t| FfiAny {
                type_index: TYPE_DLTENSOR_PTR,
                zero_padding: 0,
                value: t as *const DlTensor as *mut c_void,
            })
            .collect();
        let mut result = FfiAny {
            type_index: 0,
            zero_padding: 0,
            value: std::ptr::null_mut(),
        };
        let rc = (self.call)(
            std::ptr::null_mut(),
            anys.as_ptr(),
            anys.len() as i32,
            &mut result,
        );
        if rc != 0 {
            let message = match self.lib.last_error {
                Some(f) => CStr::from_ptr(f()).to_string_lossy().into_owned(),
                None => String::new(),
            };
            return Err(Error::Call {
                function: self.name.clone(),
                code: rc,
                message,
            });
        }
        Ok(())
    }
}
