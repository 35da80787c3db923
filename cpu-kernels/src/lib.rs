//! reef-cpu-kernels: runs a compiled model's computation on the CPU, kernel
//! by kernel, on byte buffers (issue 30, docs/compile.md "CPU build").
//!
//! reef-compile writes `cpu.so` beside the PTX: TVM's llvm build of every
//! TIR function the model launches, from the same fused module that produced
//! the GPU kernels (same names, same buffer signatures), and the schedule's
//! `cpu` section says which storages each call takes and which kernels it
//! became. [`Program`] loads both; [`Program::run_call`] runs one call on a
//! set of storages, so the simulated devices can compute a kernel's real
//! outputs when it (or the last kernel of its function) completes, and
//! [`Program::apply_blocks`] writes only the part a range of blocks wrote.
//!
//! No TVM runtime is needed: the functions are called through tvm-ffi's C
//! calling convention ([`ffi`]).

pub mod ffi;
mod program;

pub use ffi::{Function, Library, RawTensor};
pub use program::{Buffer, Call, CallArg, Program};

use std::path::PathBuf;

/// What went wrong, naming the file, function or argument.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load the CPU library {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("{library} has no function {function} (symbol __tvm_ffi_{function})")]
    MissingFunction { library: PathBuf, function: String },
    #[error("{function}: argument {index}: {problem}")]
    Argument {
        function: String,
        index: usize,
        problem: String,
    },
    #[error("{function} failed (code {code}): {message}")]
    Call {
        function: String,
        code: i32,
        message: String,
    },
    #[error("dtype {0:?} has no DLPack code here")]
    DType(String),
    #[error("{path}: {message}")]
    Schedule { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// DLPack's `DLDataType` (code, bits, lanes), as TVM checks it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

impl DType {
    /// From TVM's name (`float32`, `int64`, `bool`, ...).
    pub fn parse(name: &str) -> Result<DType, Error> {
        // dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6.
        let (code, bits) = match name {
            "bool" => (6, 8),
            "bfloat16" => (4, 16),
            _ => {
                let (code, rest) = if let Some(r) = name.strip_prefix("float") {
                    (2, r)
                } else if let Some(r) = name.strip_prefix("uint") {
                    (1, r)
                } else if let Some(r) = name.strip_prefix("int") {
                    (0, r)
                } else {
                    return Err(Error::DType(name.into()));
                };
                match rest.parse::<u8>() {
                    Ok(b @ (8 | 16 | 32 | 64)) => (code, b),
                    _ => return Err(Error::DType(name.into())),
                }
            }
        };
        Ok(DType {
            code,
            bits,
            lanes: 1,
        })
    }

    /// Bytes of one element.
    pub fn size(&self) -> usize {
        (self.bits as usize).div_ceil(8) * self.lanes as usize
    }

    /// Bytes of a compact tensor of `shape`.
    pub fn bytes_for(&self, shape: &[i64]) -> usize {
        shape.iter().map(|&d| d.max(0) as usize).product::<usize>() * self.size()
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.code {
            0 => "int",
            1 => "uint",
            2 => "float",
            4 => "bfloat",
            6 => return write!(f, "bool"),
            _ => "?",
        };
        write!(f, "{kind}{}", self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_parse_to_dlpack_codes() {
        assert_eq!(
            DType::parse("float32").unwrap(),
            DType {
                code: 2,
                bits: 32,
                lanes: 1
            }
        );
        assert_eq!(DType::parse("int64").unwrap().size(), 8);
        assert_eq!(DType::parse("uint8").unwrap().code, 1);
        assert_eq!(DType::parse("bool").unwrap().size(), 1);
        assert_eq!(DType::parse("float16").unwrap().to_string(), "float16");
        assert!(DType::parse("float7").is_err());
        assert!(DType::parse("complex64").is_err());
        assert_eq!(DType::parse("float32").unwrap().bytes_for(&[2, 3]), 24);
    }
}
