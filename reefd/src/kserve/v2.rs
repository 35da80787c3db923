//! The Open Inference Protocol's vocabulary, shared by the HTTP/REST and
//! gRPC fronts (KServe v2, "HTTP/REST" and "GRPC" sections): its errors,
//! the priority levels of Triton's schedule-policy extension (see the
//! parent module's doc), a request's inputs and outputs (tensors inline or
//! in Triton's system shared memory), the answer, and the mapping between
//! the protocol's datatypes and the model's dtypes.

use super::*;

/// A failed v2 request: the kind of failure (mapped to an HTTP status and a
/// gRPC code by each front) and a message that says what to do.
#[derive(Debug, Clone, PartialEq)]
pub struct V2Error {
    pub kind: Kind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BadRequest,
    NotFound,
    Unauthenticated,
    Unavailable,
    /// The request's `timeout` passed before it reached the GPU.
    Timeout,
    /// The client did not send its request in time (HTTP 408).
    SlowClient,
    TooLarge,
    Exhausted,
    Unsupported,
    Internal,
}

impl V2Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        V2Error {
            kind,
            message: message.into(),
        }
    }
    pub fn bad(message: impl Into<String>) -> Self {
        V2Error::new(Kind::BadRequest, message)
    }
    pub fn unauthenticated(admin: bool) -> Self {
        V2Error::new(
            Kind::Unauthenticated,
            if admin {
                "model load and unload need the daemon's token (kserve.token): send `Authorization: Bearer TOKEN`"
            } else {
                "this front needs the daemon's token from non-loopback clients (kserve.token): send `Authorization: Bearer TOKEN`, or a client certificate where mutual TLS is set (kserve.tls_client_ca)"
            },
        )
    }
}

impl std::fmt::Display for V2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Failure> for V2Error {
    fn from(f: Failure) -> Self {
        let kind = match f.code {
            ErrorCode::BadRequest | ErrorCode::FrameTooLarge => Kind::BadRequest,
            ErrorCode::NotFound => Kind::NotFound,
            ErrorCode::PermissionDenied => Kind::Unauthenticated,
            ErrorCode::Busy | ErrorCode::ShuttingDown | ErrorCode::Cancelled => Kind::Unavailable,
            ErrorCode::Timeout => Kind::Timeout,
            ErrorCode::Unsupported => Kind::Unsupported,
            ErrorCode::Internal => Kind::Internal,
        };
        V2Error::new(kind, f.message)
    }
}

/// The `priority` parameter of Triton's schedule-policy extension, mapped
/// to a reef level: 1 → 0 (RT), 2–10 → 1–9, 0 → the default class.
pub fn level_of_priority(p: Option<i64>, default: Priority) -> Result<Priority, V2Error> {
    match p {
        None | Some(0) => Ok(default),
        Some(n @ 1..=10) => Ok(Priority::level((n - 1) as u8).expect("1..=10 maps to 0..=9")),
        Some(n) => Err(V2Error::bad(format!(
            "priority {n} is outside 0-10 (1 is the highest and is served as real-time; 0 selects the model's default)"
        ))),
    }
}

/// Scheduling parameters of one inference request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    pub level: Priority,
    /// Fail the request if it has not reached the GPU by then.
    pub timeout: Option<Duration>,
    pub qos_ms: Option<f64>,
}

/// One input tensor of a v2 request, its bytes gathered (from JSON, the
/// binary section, or a shared memory region).
#[derive(Debug, Clone)]
pub struct Input {
    pub name: String,
    /// The protocol's datatype name (`FP32`).
    pub datatype: String,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// One output tensor of an answer.
#[derive(Debug, Clone)]
pub struct Output {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    pub bytes: Vec<u8>,
}

/// What an inference answered: the daemon's own stamps and the outputs.
#[derive(Debug, Clone)]
pub struct Answer {
    pub task: crate::protocol::TaskResult,
    pub outputs: Vec<Output>,
    /// When the front handed the request to the runtime and when it had
    /// the answer back, in ns of CLOCK_MONOTONIC
    /// ([`crate::protocol::monotonic_ns`]): with the task's
    /// [`crate::protocol::Timeline`], where a front's time goes (the gRPC
    /// front's `reef_timeline` parameter).
    pub called_ns: u64,
    pub answered_ns: u64,
}

/// The protocol's datatype name of a numpy dtype name (the native
/// protocol's), and back.
pub fn datatype_of_dtype(dtype: &str) -> Option<&'static str> {
    Some(match dtype {
        "bool" => "BOOL",
        "uint8" => "UINT8",
        "int8" => "INT8",
        "uint16" => "UINT16",
        "int16" => "INT16",
        "float16" => "FP16",
        "bfloat16" => "BF16",
        "uint32" => "UINT32",
        "int32" => "INT32",
        "float32" => "FP32",
        "uint64" => "UINT64",
        "int64" => "INT64",
        "float64" => "FP64",
        _ => return None,
    })
}

pub fn dtype_of_datatype(datatype: &str) -> Option<&'static str> {
    Some(match datatype {
        "BOOL" => "bool",
        "UINT8" => "uint8",
        "INT8" => "int8",
        "UINT16" => "uint16",
        "INT16" => "int16",
        "FP16" => "float16",
        "BF16" => "bfloat16",
        "UINT32" => "uint32",
        "INT32" => "int32",
        "FP32" => "float32",
        "UINT64" => "uint64",
        "INT64" => "int64",
        "FP64" => "float64",
        _ => return None,
    })
}

/// A tensor placed in a shared memory region: (region, offset, bytes).
pub type ShmRef = (String, u64, u64);

/// A model's inputs and outputs as v2 metadata: (name, datatype, shape).
pub type TensorMeta = (String, String, Vec<i64>);

/// The inputs and outputs a loaded model declares, as v2 metadata (the
/// native protocol names dtypes as numpy does).
pub fn model_io(m: &ModelInfo) -> (Vec<TensorMeta>, Vec<TensorMeta>) {
    let meta = |v: &[crate::protocol::TensorSpec]| {
        v.iter()
            .map(|t| {
                (
                    t.name.clone(),
                    datatype_of_dtype(&t.dtype).unwrap_or("BYTES").to_string(),
                    t.shape.iter().map(|&d| d as i64).collect(),
                )
            })
            .collect()
    };
    (meta(&m.inputs), meta(&m.outputs))
}
