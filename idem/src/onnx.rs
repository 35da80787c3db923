//! ONNX input: lowers an ONNX graph to the memory-access trace one eager
//! inference (PyTorch-style) would record, so the idempotence analysis of
//! REEF §4.4 can be run on real topologies. REEF Table 1 (§2.1) reports that
//! PyTorch and TensorRT produce non-idempotent kernels "primarily due to
//! in-place tensor operations" (§4.4); this module reproduces that mechanism
//! with an explicit memory planner:
//!
//! - each graph input gets a device buffer written by a host-to-device
//!   memcpy; each graph output is read by a device-to-host memcpy at the end;
//! - weights (initializers, and everything computed only from constants, such
//!   as the `ConstantOfShape` placeholders of the onnx package's "light"
//!   models) live in static parameter buffers, only read by kernels;
//! - view operations (Reshape, Flatten, (Un)Squeeze, Dropout and Identity at
//!   inference) launch nothing and alias their input's buffer;
//! - every other node is one kernel reading its inputs and writing its
//!   outputs; an output gets the best-fitting freed buffer (a caching
//!   allocator, sizes rounded to 512 bytes, no block splitting) or a new one;
//!   a buffer is freed when no later node reads any tensor aliasing it;
//! - element-wise nodes (Relu, LeakyRelu, Clip, Sigmoid, Tanh,
//!   BatchNormalization, Add, Sum, Mul, Sub, Div) run *in place* when an
//!   activation input of the output's size is read by nothing later, as
//!   PyTorch's `relu_`/`add_`; such a kernel reads and writes one range and
//!   is not idempotent.
//!
//! The protobuf is decoded with prost using message structs derived by hand
//! from onnx.proto (only the fields this lowering needs; unknown fields are
//! skipped). Tensor shapes come from shape inference implemented here for the
//! operators listed in [`SUPPORTED_OPS`]; any other operator is an error
//! naming the node.

use crate::trace::{Op, OpKind, Range, Trace};
use std::collections::HashMap;
use std::path::Path;

/// Hand-derived subset of onnx.proto (field numbers from the ONNX IR spec).
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ModelProto {
        #[prost(int64, tag = "1")]
        pub ir_version: i64,
        #[prost(string, tag = "2")]
        pub producer_name: String,
        #[prost(message, optional, tag = "7")]
        pub graph: Option<GraphProto>,
        #[prost(message, repeated, tag = "8")]
        pub opset_import: Vec<OperatorSetIdProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OperatorSetIdProto {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(int64, tag = "2")]
        pub version: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct GraphProto {
        #[prost(message, repeated, tag = "1")]
        pub node: Vec<NodeProto>,
        #[prost(string, tag = "2")]
        pub name: String,
        #[prost(message, repeated, tag = "5")]
        pub initializer: Vec<TensorProto>,
        #[prost(message, repeated, tag = "11")]
        pub input: Vec<ValueInfoProto>,
        #[prost(message, repeated, tag = "12")]
        pub output: Vec<ValueInfoProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NodeProto {
        #[prost(string, repeated, tag = "1")]
        pub input: Vec<String>,
        #[prost(string, repeated, tag = "2")]
        pub output: Vec<String>,
        #[prost(string, tag = "3")]
        pub name: String,
        #[prost(string, tag = "4")]
        pub op_type: String,
        #[prost(message, repeated, tag = "5")]
        pub attribute: Vec<AttributeProto>,
        #[prost(string, tag = "7")]
        pub domain: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AttributeProto {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(float, tag = "2")]
        pub f: f32,
        #[prost(int64, tag = "3")]
        pub i: i64,
        #[prost(bytes = "vec", tag = "4")]
        pub s: Vec<u8>,
        #[prost(message, optional, tag = "5")]
        pub t: Option<TensorProto>,
        #[prost(float, repeated, tag = "7")]
        pub floats: Vec<f32>,
        #[prost(int64, repeated, tag = "8")]
        pub ints: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorProto {
        #[prost(int64, repeated, tag = "1")]
        pub dims: Vec<i64>,
        #[prost(int32, tag = "2")]
        pub data_type: i32,
        #[prost(int32, repeated, tag = "5")]
        pub int32_data: Vec<i32>,
        #[prost(int64, repeated, tag = "7")]
        pub int64_data: Vec<i64>,
        #[prost(string, tag = "8")]
        pub name: String,
        #[prost(bytes = "vec", tag = "9")]
        pub raw_data: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueInfoProto {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(message, optional, tag = "2")]
        pub r#type: Option<TypeProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeProto {
        #[prost(message, optional, tag = "1")]
        pub tensor_type: Option<TypeProtoTensor>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeProtoTensor {
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorShapeProto {
        #[prost(message, repeated, tag = "1")]
        pub dim: Vec<Dimension>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dimension {
        #[prost(int64, optional, tag = "1")]
        pub dim_value: Option<i64>,
        #[prost(string, optional, tag = "2")]
        pub dim_param: Option<String>,
    }
}

use proto::{AttributeProto, NodeProto, TensorProto};

/// Operators this lowering understands.
pub const SUPPORTED_OPS: &[&str] = &[
    "Conv",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Gemm",
    "MatMul",
    "LRN",
    "Softmax",
    "LogSoftmax",
    "Concat",
    "Transpose",
    "BatchNormalization",
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Add",
    "Sum",
    "Mul",
    "Sub",
    "Div",
    "Reshape",
    "Flatten",
    "Unsqueeze",
    "Squeeze",
    "Dropout",
    "Identity",
    "ConstantOfShape",
    "Constant",
];

const VIEW_OPS: &[&str] = &[
    "Reshape",
    "Flatten",
    "Unsqueeze",
    "Squeeze",
    "Dropout",
    "Identity",
];
/// Element-wise operators that may run in place (the default set).
pub const INPLACE_OPS: &[&str] = &[
    "Relu",
    "LeakyRelu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "BatchNormalization",
    "Add",
    "Sum",
    "Mul",
    "Sub",
    "Div",
];

/// Allocation granularity of the caching allocator (PyTorch rounds block
/// sizes to 512 bytes).
const ROUND: u64 = 512;
/// Parameter buffers are placed from here up, activations below.
const PARAM_BASE: u64 = 1 << 40;
/// The largest tensor the lowering accepts: every activation must fit below
/// [`PARAM_BASE`], so no single tensor may be larger.
const MAX_TENSOR_BYTES: u64 = PARAM_BASE;

/// Checks that a tensor's dimensions are non-negative and that its size in
/// bytes fits [`MAX_TENSOR_BYTES`], so that size arithmetic cannot overflow.
fn check_shape(shape: &[i64], elem: u64) -> Result<(), String> {
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(format!("dimension {d} in {shape:?} is negative"));
    }
    shape
        .iter()
        .try_fold(elem, |acc, &d| acc.checked_mul(d as u64))
        .filter(|&b| b <= MAX_TENSOR_BYTES)
        .map(|_| ())
        .ok_or_else(|| format!("a tensor of shape {shape:?} would exceed {MAX_TENSOR_BYTES} bytes"))
}

/// The product of `dims`, or an error when it overflows.
fn checked_product(dims: &[i64]) -> Result<i64, String> {
    dims.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| format!("the element count of {dims:?} overflows"))
}

/// Why an ONNX model could not be lowered.
/// The underlying error is part of the message (field `cause`), not a
/// `source()`, so printing the chain (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    #[error("{path}: cannot read ONNX model: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("{path}: not a valid ONNX protobuf: {cause}")]
    Decode {
        path: String,
        cause: prost::DecodeError,
    },
    #[error("{path}: {what}")]
    Invalid { path: String, what: String },
}

/// Options of the lowering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Operators (from [`INPLACE_OPS`]) that run in place when an input dies
    /// (PyTorch style). Empty: every kernel gets a fresh or reused output
    /// buffer.
    pub in_place_ops: Vec<String>,
}

impl Default for Options {
    /// Every operator of [`INPLACE_OPS`] runs in place when it can.
    fn default() -> Self {
        Options {
            in_place_ops: INPLACE_OPS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

impl Options {
    /// No operator runs in place.
    pub fn no_in_place() -> Self {
        Options {
            in_place_ops: Vec::new(),
        }
    }

    /// Parses a comma-separated operator list, e.g. `Relu,Add,Sum`.
    pub fn with_ops(list: &str) -> Result<Self, String> {
        let ops: Vec<String> = list
            .split(',')
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        for o in &ops {
            if !INPLACE_OPS.contains(&o.as_str()) {
                return Err(format!(
                    "{o:?} cannot run in place; choose from {}",
                    INPLACE_OPS.join(",")
                ));
            }
        }
        Ok(Options { in_place_ops: ops })
    }
}

#[derive(Debug, Clone)]
struct TensorInfo {
    shape: Vec<i64>,
    elem: u64,
    /// Integer contents, for constants that are shapes or axes.
    ints: Option<Vec<i64>>,
    constant: bool,
}

impl TensorInfo {
    /// The size in bytes; every shape is checked by [`check_shape`] when it
    /// enters the lowering, so this cannot overflow.
    fn bytes(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product::<u64>() * self.elem
    }
}

fn elem_size(data_type: i32) -> Option<u64> {
    Some(match data_type {
        1 | 6 | 12 => 4,
        2 | 3 | 9 => 1,
        4 | 5 | 10 | 16 => 2,
        7 | 11 | 13 => 8,
        _ => return None,
    })
}

fn tensor_ints(t: &TensorProto) -> Option<Vec<i64>> {
    match t.data_type {
        7 if !t.raw_data.is_empty() => Some(
            t.raw_data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        7 => Some(t.int64_data.clone()),
        6 if !t.raw_data.is_empty() => Some(
            t.raw_data
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as i64)
                .collect(),
        ),
        6 => Some(t.int32_data.iter().map(|&v| v as i64).collect()),
        _ => None,
    }
}

fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map(|a| a.i).unwrap_or(default)
}

fn attr_ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

fn broadcast(shapes: &[&[i64]]) -> Result<Vec<i64>, String> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    Ok(out)
}

fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r.max(1)).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("axis {a} out of range for rank {rank}"))
    }
}

/// Output spatial sizes of a convolution or pooling window.
fn window_out(
    n: &NodeProto,
    spatial: &[i64],
    kernel: &[i64],
    dilated: bool,
) -> Result<Vec<i64>, String> {
    let k = spatial.len();
    if kernel.len() != k {
        return Err(format!(
            "kernel_shape {kernel:?} does not match spatial dims {spatial:?}"
        ));
    }
    let strides = attr_ints(n, "strides").unwrap_or_else(|| vec![1; k]);
    let dil = if dilated {
        attr_ints(n, "dilations").unwrap_or_else(|| vec![1; k])
    } else {
        vec![1; k]
    };
    let pads = attr_ints(n, "pads").unwrap_or_else(|| vec![0; 2 * k]);
    if strides.len() != k || dil.len() != k || pads.len() != 2 * k {
        return Err("strides/dilations/pads have the wrong length".into());
    }
    let ceil = attr_i(n, "ceil_mode", 0) != 0;
    let auto_pad = attr(n, "auto_pad")
        .map(|a| String::from_utf8_lossy(&a.s).into_owned())
        .unwrap_or_default();
    (0..k)
        .map(|i| {
            let s = strides[i];
            if s <= 0 {
                return Err(format!("stride {s} is not positive"));
            }
            // In i128: attribute values are arbitrary i64s, and no sum or
            // product of two of them overflows i128.
            let (s, x) = (i128::from(s), i128::from(spatial[i]));
            let eff = (i128::from(kernel[i]) - 1) * i128::from(dil[i]) + 1;
            let v = match auto_pad.as_str() {
                "SAME_UPPER" | "SAME_LOWER" => (x + s - 1) / s,
                "VALID" => (x - eff) / s + 1,
                _ => {
                    let span = x + i128::from(pads[i]) + i128::from(pads[i + k]) - eff;
                    if ceil {
                        (span + s - 1) / s + 1
                    } else {
                        span / s + 1
                    }
                }
            };
            let v = i64::try_from(v)
                .map_err(|_| format!("window output size {v} does not fit 64 bits"))?;
            if v <= 0 {
                Err(format!("window output size {v} is not positive"))
            } else {
                Ok(v)
            }
        })
        .collect()
}

/// Shape inference for one node: the shapes of its outputs.
fn infer(n: &NodeProto, ins: &[Option<&TensorInfo>]) -> Result<Vec<TensorInfo>, String> {
    let get = |i: usize| -> Result<&TensorInfo, String> {
        ins.get(i)
            .copied()
            .flatten()
            .ok_or_else(|| format!("input #{i} is missing"))
    };
    let same = |t: &TensorInfo| TensorInfo {
        shape: t.shape.clone(),
        elem: t.elem,
        ints: None,
        constant: false,
    };
    let mk = |shape: Vec<i64>, elem: u64| TensorInfo {
        shape,
        elem,
        ints: None,
        constant: false,
    };
    let op = n.op_type.as_str();
    let out = match op {
        "Conv" => {
            let x = get(0)?;
            let w = get(1)?;
            if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
                return Err(format!(
                    "input shape {:?} and weight shape {:?} do not fit a convolution",
                    x.shape, w.shape
                ));
            }
            let kernel = attr_ints(n, "kernel_shape").unwrap_or_else(|| w.shape[2..].to_vec());
            let mut s = vec![x.shape[0], w.shape[0]];
            s.extend(window_out(n, &x.shape[2..], &kernel, true)?);
            vec![mk(s, x.elem)]
        }
        "MaxPool" | "AveragePool" => {
            let x = get(0)?;
            if x.shape.len() < 3 {
                return Err(format!("input shape {:?} has no spatial dims", x.shape));
            }
            let kernel = attr_ints(n, "kernel_shape")
                .ok_or_else(|| "attribute kernel_shape is missing".to_string())?;
            let mut s = x.shape[..2].to_vec();
            s.extend(window_out(n, &x.shape[2..], &kernel, op == "MaxPool")?);
            let mut v = vec![mk(s.clone(), x.elem)];
            if n.output.len() > 1 {
                v.push(mk(s, 8));
            }
            v
        }
        "GlobalAveragePool" | "GlobalMaxPool" => {
            let x = get(0)?;
            let mut s = x.shape.clone();
            for d in s.iter_mut().skip(2) {
                *d = 1;
            }
            vec![mk(s, x.elem)]
        }
        "Gemm" => {
            let a = get(0)?;
            let b = get(1)?;
            if a.shape.len() != 2 || b.shape.len() != 2 {
                return Err(format!(
                    "Gemm needs 2-D inputs, got {:?} and {:?}",
                    a.shape, b.shape
                ));
            }
            let m = if attr_i(n, "transA", 0) != 0 {
                a.shape[1]
            } else {
                a.shape[0]
            };
            let nn = if attr_i(n, "transB", 0) != 0 {
                b.shape[0]
            } else {
                b.shape[1]
            };
            vec![mk(vec![m, nn], a.elem)]
        }
        "MatMul" => {
            let a = get(0)?;
            let b = get(1)?;
            if a.shape.len() < 2 || b.shape.len() < 2 {
                return Err("MatMul with 1-D operands is not supported".into());
            }
            let (ra, rb) = (a.shape.len(), b.shape.len());
            let mut s = broadcast(&[&a.shape[..ra - 2], &b.shape[..rb - 2]])?;
            s.push(a.shape[ra - 2]);
            s.push(b.shape[rb - 1]);
            vec![mk(s, a.elem)]
        }
        "LRN" | "Softmax" | "LogSoftmax" | "Relu" | "LeakyRelu" | "Clip" | "Sigmoid" | "Tanh"
        | "BatchNormalization" | "Identity" => {
            vec![same(get(0)?)]
        }
        "Dropout" => {
            let x = get(0)?;
            let mut v = vec![same(x)];
            if n.output.len() > 1 {
                v.push(mk(x.shape.clone(), 1));
            }
            v
        }
        "Add" | "Sum" | "Mul" | "Sub" | "Div" => {
            let all: Vec<&TensorInfo> = (0..n.input.len()).map(get).collect::<Result<_, _>>()?;
            let first = all.first().ok_or_else(|| format!("{op} has no inputs"))?;
            let shapes: Vec<&[i64]> = all.iter().map(|t| t.shape.as_slice()).collect();
            vec![mk(broadcast(&shapes)?, first.elem)]
        }
        "Concat" => {
            let all: Vec<&TensorInfo> = (0..n.input.len()).map(get).collect::<Result<_, _>>()?;
            let first = all.first().ok_or("Concat has no inputs")?;
            if first.shape.is_empty() {
                return Err("Concat of scalars (rank 0) is not supported".into());
            }
            let ax = axis(attr_i(n, "axis", 1), first.shape.len())?;
            let mut s = first.shape.clone();
            s[ax] = all
                .iter()
                .try_fold(0i64, |acc, t| {
                    acc.checked_add(t.shape.get(ax).copied().unwrap_or(0))
                })
                .ok_or("the concatenated dimension overflows")?;
            vec![mk(s, first.elem)]
        }
        "Transpose" => {
            let x = get(0)?;
            let r = x.shape.len();
            let perm =
                attr_ints(n, "perm").unwrap_or_else(|| (0..r as i64).rev().collect::<Vec<_>>());
            if perm.len() != r {
                return Err(format!("perm {perm:?} does not match rank {r}"));
            }
            let s = perm
                .iter()
                .map(|&p| axis(p, r).map(|a| x.shape[a]))
                .collect::<Result<_, _>>()?;
            vec![mk(s, x.elem)]
        }
        "Reshape" => {
            let x = get(0)?;
            let spec = match attr_ints(n, "shape") {
                Some(s) => s,
                None => get(1)?
                    .ints
                    .clone()
                    .ok_or("the shape input is not a constant integer tensor")?,
            };
            let total = checked_product(&x.shape)?;
            let mut s: Vec<i64> = spec
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if d == 0 {
                        x.shape.get(i).copied().unwrap_or(0)
                    } else {
                        d
                    }
                })
                .collect();
            let known = s
                .iter()
                .filter(|&&d| d != -1)
                .try_fold(1i64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| format!("the element count of {spec:?} overflows"))?;
            if let Some(p) = s.iter().position(|&d| d == -1) {
                if known == 0 {
                    return Err("cannot infer -1 with a zero-sized dimension".into());
                }
                s[p] = total / known;
            }
            if checked_product(&s)? != total {
                return Err(format!(
                    "cannot reshape {:?} to {spec:?} ({total} elements)",
                    x.shape
                ));
            }
            vec![mk(s, x.elem)]
        }
        "Flatten" => {
            let x = get(0)?;
            let ax = attr_i(n, "axis", 1);
            let ax = if ax == x.shape.len() as i64 {
                x.shape.len()
            } else {
                axis(ax, x.shape.len())?
            };
            let a: i64 = x.shape[..ax].iter().product();
            let b: i64 = x.shape[ax..].iter().product();
            vec![mk(vec![a, b], x.elem)]
        }
        "Unsqueeze" => {
            let x = get(0)?;
            let axes = match attr_ints(n, "axes") {
                Some(a) => a,
                None => get(1)?.ints.clone().ok_or("axes input is not constant")?,
            };
            let r = x.shape.len() + axes.len();
            let mut ax: Vec<usize> = axes.iter().map(|&a| axis(a, r)).collect::<Result<_, _>>()?;
            ax.sort_unstable();
            let mut s = x.shape.clone();
            for a in ax {
                s.insert(a.min(s.len()), 1);
            }
            vec![mk(s, x.elem)]
        }
        "Squeeze" => {
            let x = get(0)?;
            let axes = match attr_ints(n, "axes") {
                Some(a) => Some(a),
                None => ins.get(1).copied().flatten().and_then(|t| t.ints.clone()),
            };
            let s = match axes {
                Some(a) => {
                    let ax: Vec<usize> = a
                        .iter()
                        .map(|&v| axis(v, x.shape.len()))
                        .collect::<Result<_, _>>()?;
                    x.shape
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !ax.contains(i))
                        .map(|(_, &d)| d)
                        .collect()
                }
                None => x.shape.iter().copied().filter(|&d| d != 1).collect(),
            };
            vec![mk(s, x.elem)]
        }
        "ConstantOfShape" => {
            let shape = get(0)?
                .ints
                .clone()
                .ok_or("the shape input is not a constant integer tensor")?;
            let elem = attr(n, "value")
                .and_then(|a| a.t.as_ref())
                .and_then(|t| elem_size(t.data_type))
                .unwrap_or(4);
            vec![mk(shape, elem)]
        }
        "Constant" => {
            let t = attr(n, "value")
                .and_then(|a| a.t.as_ref())
                .ok_or("Constant without a tensor `value` attribute is not supported")?;
            let elem = elem_size(t.data_type)
                .ok_or_else(|| format!("unsupported tensor data type {}", t.data_type))?;
            vec![TensorInfo {
                shape: t.dims.clone(),
                elem,
                ints: tensor_ints(t),
                constant: true,
            }]
        }
        other => {
            return Err(format!(
                "unsupported operator {other:?}; supported: {}",
                SUPPORTED_OPS.join(", ")
            ))
        }
    };
    if out.iter().any(|t| t.shape.iter().any(|&d| d < 0)) {
        return Err("inferred a negative dimension".into());
    }
    for t in &out {
        check_shape(&t.shape, t.elem)?;
    }
    Ok(out)
}

/// A device block of the caching allocator.
#[derive(Debug, Clone)]
struct Block {
    addr: u64,
    size: u64,
    /// Remaining reads of tensors living in the block.
    live: usize,
    /// Never freed (graph inputs and outputs).
    pinned: bool,
}

#[derive(Default)]
struct Planner {
    blocks: Vec<Block>,
    free: Vec<usize>,
    next_addr: u64,
}

impl Planner {
    fn alloc(&mut self, bytes: u64) -> usize {
        let size = bytes.max(1).div_ceil(ROUND) * ROUND;
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, &b)| self.blocks[b].size >= size)
            .min_by_key(|(_, &b)| (self.blocks[b].size, self.blocks[b].addr));
        if let Some((pos, &b)) = best {
            self.free.swap_remove(pos);
            self.blocks[b].live = 0;
            return b;
        }
        let b = self.blocks.len();
        self.blocks.push(Block {
            addr: self.next_addr,
            size,
            live: 0,
            pinned: false,
        });
        // Saturating: `lower` refuses a plan that reaches PARAM_BASE.
        self.next_addr = self.next_addr.saturating_add(size);
        b
    }
}

/// Reads an ONNX file and lowers it to a trace.
pub fn load(path: &Path, opts: &Options) -> Result<Trace, OnnxError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: p.clone(),
        cause: source,
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    from_bytes(&bytes, &p, &name, opts)
}

/// Decodes an ONNX model held in memory and lowers it to a trace: what
/// [`load`] does after reading the file. `path` names the model in errors,
/// `name` is the trace's model name.
pub fn from_bytes(
    bytes: &[u8],
    path: &str,
    name: &str,
    opts: &Options,
) -> Result<Trace, OnnxError> {
    let model: proto::ModelProto =
        prost::Message::decode(bytes).map_err(|source| OnnxError::Decode {
            path: path.to_string(),
            cause: source,
        })?;
    lower(&model, name, opts).map_err(|what| OnnxError::Invalid {
        path: path.to_string(),
        what,
    })
}

/// Lowers a decoded model to the trace of one inference.
pub fn lower(model: &proto::ModelProto, name: &str, opts: &Options) -> Result<Trace, String> {
    let graph = model
        .graph
        .as_ref()
        .ok_or("the model has no graph (field 7); is this an ONNX model?")?;
    if graph.node.is_empty() {
        return Err("the graph has no nodes".into());
    }
    let mut info: HashMap<String, TensorInfo> = HashMap::new();
    for t in &graph.initializer {
        let elem = elem_size(t.data_type).ok_or_else(|| {
            format!(
                "initializer {:?}: unsupported data type {}",
                t.name, t.data_type
            )
        })?;
        check_shape(&t.dims, elem).map_err(|e| format!("initializer {:?}: {e}", t.name))?;
        info.insert(
            t.name.clone(),
            TensorInfo {
                shape: t.dims.clone(),
                elem,
                ints: tensor_ints(t),
                constant: true,
            },
        );
    }
    let mut graph_inputs = Vec::new();
    for vi in &graph.input {
        if info.contains_key(&vi.name) {
            continue; // older exporters list initializers as inputs too
        }
        let tt = vi
            .r#type
            .as_ref()
            .and_then(|t| t.tensor_type.as_ref())
            .ok_or_else(|| format!("graph input {:?} is not a tensor", vi.name))?;
        let shape = tt
            .shape
            .as_ref()
            .map(|s| {
                s.dim
                    .iter()
                    .map(|d| match (d.dim_value, &d.dim_param) {
                        (Some(v), _) if v > 0 => Ok(v),
                        // A symbolic batch dimension: one inference of batch 1.
                        (_, Some(_)) | (None, None) => Ok(1),
                        (Some(v), _) => Err(format!(
                            "graph input {:?} has dimension {v}; dimensions must be positive",
                            vi.name
                        )),
                    })
                    .collect::<Result<Vec<i64>, String>>()
            })
            .transpose()?
            .ok_or_else(|| format!("graph input {:?} has no shape", vi.name))?;
        let elem = elem_size(tt.elem_type).ok_or_else(|| {
            format!(
                "graph input {:?}: unsupported element type {}",
                vi.name, tt.elem_type
            )
        })?;
        check_shape(&shape, elem).map_err(|e| format!("graph input {:?}: {e}", vi.name))?;
        info.insert(
            vi.name.clone(),
            TensorInfo {
                shape,
                elem,
                ints: None,
                constant: false,
            },
        );
        graph_inputs.push(vi.name.clone());
    }

    // Pass 1: shapes, constness, node kinds.
    #[derive(PartialEq)]
    enum Kind {
        Fold,
        View,
        Kernel,
    }
    let mut kinds = Vec::with_capacity(graph.node.len());
    for (idx, n) in graph.node.iter().enumerate() {
        let label = || format!("node #{idx} ({:?}, op {})", n.name, n.op_type);
        if !n.domain.is_empty() && n.domain != "ai.onnx" {
            return Err(format!(
                "{}: operator domain {:?} is not supported (only the default ONNX domain)",
                label(),
                n.domain
            ));
        }
        let ins: Vec<Option<&TensorInfo>> = n
            .input
            .iter()
            .map(|i| if i.is_empty() { None } else { info.get(i) })
            .collect();
        for (k, i) in n.input.iter().enumerate() {
            if !i.is_empty() && ins[k].is_none() {
                return Err(format!(
                    "{}: input {i:?} is produced by no earlier node, initializer or graph input \
                     (nodes must be in topological order; optional outputs such as \
                     Dropout's mask or training statistics are not produced at inference)",
                    label()
                ));
            }
        }
        let constant = ins.iter().flatten().all(|t| t.constant);
        let mut outs = infer(n, &ins).map_err(|e| format!("{}: {e}", label()))?;
        let kind = if constant {
            // Fold the few integer computations the light models need.
            if n.op_type == "Unsqueeze" || n.op_type == "Identity" {
                if let Some(v) = ins.first().copied().flatten().and_then(|t| t.ints.clone()) {
                    outs[0].ints = Some(v);
                }
            }
            Kind::Fold
        } else if VIEW_OPS.contains(&n.op_type.as_str())
            && ins.first().copied().flatten().is_some_and(|t| !t.constant)
        {
            Kind::View
        } else {
            Kind::Kernel
        };
        // A view produces only its first output (e.g. no Dropout mask at
        // inference).
        let produced = if kind == Kind::View { 1 } else { outs.len() };
        for (o, mut t) in n.output.iter().zip(outs).take(produced) {
            if o.is_empty() {
                continue;
            }
            t.constant = kind == Kind::Fold;
            info.insert(o.clone(), t);
        }
        kinds.push(kind);
    }
    let outputs: Vec<String> = graph.output.iter().map(|o| o.name.clone()).collect();
    for o in &outputs {
        if !info.contains_key(o) {
            return Err(format!("graph output {o:?} is produced by no node"));
        }
    }

    // Remaining reads per activation tensor (from kernels and views).
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for (n, k) in graph.node.iter().zip(&kinds) {
        if *k == Kind::Fold {
            continue;
        }
        let used = if *k == Kind::View {
            &n.input[..1]
        } else {
            &n.input[..]
        };
        for i in used {
            if !i.is_empty() && !info[i].constant {
                *uses.entry(i.as_str()).or_insert(0) += 1;
            }
        }
    }

    let mut ops = Vec::new();
    let mut plan = Planner::default();
    let mut tensor_block: HashMap<String, usize> = HashMap::new();
    let mut params: HashMap<String, Range> = HashMap::new();
    let mut next_param = PARAM_BASE;
    let range_of = |t: &TensorInfo, b: &Block| Range {
        addr: b.addr,
        len: t.bytes().min(b.size),
    };

    for gi in &graph_inputs {
        let t = &info[gi];
        let b = plan.alloc(t.bytes());
        plan.blocks[b].pinned = true;
        plan.blocks[b].live = uses.get(gi.as_str()).copied().unwrap_or(0);
        tensor_block.insert(gi.clone(), b);
        ops.push(Op {
            kind: OpKind::Memcpy,
            name: format!("memcpy HtoD {gi}"),
            reads: vec![],
            writes: vec![range_of(t, &plan.blocks[b])],
        });
    }

    for (idx, (n, kind)) in graph.node.iter().zip(&kinds).enumerate() {
        match kind {
            Kind::Fold => {}
            Kind::View => {
                let src = &n.input[0];
                let b = tensor_block[src];
                if let Some(o) = n.output.first().filter(|o| !o.is_empty()) {
                    tensor_block.insert(o.clone(), b);
                    plan.blocks[b].live += uses.get(o.as_str()).copied().unwrap_or(0);
                    if outputs.contains(o) {
                        plan.blocks[b].pinned = true;
                    }
                }
                release(&mut plan, b, 1);
            }
            Kind::Kernel => {
                let mut reads = Vec::new();
                let mut consumed: Vec<usize> = Vec::new();
                for i in n.input.iter().filter(|i| !i.is_empty()) {
                    let t = &info[i];
                    if t.constant {
                        let r = match params.get(i) {
                            Some(&r) => r,
                            None => {
                                let len = t.bytes();
                                let r = Range {
                                    addr: next_param,
                                    len,
                                };
                                next_param = next_param
                                    .checked_add(len.max(1).div_ceil(ROUND) * ROUND)
                                    .ok_or("the parameters exceed the 64-bit address space")?;
                                params.insert(i.clone(), r);
                                r
                            }
                        };
                        reads.push(r);
                    } else {
                        let b = tensor_block[i];
                        reads.push(range_of(t, &plan.blocks[b]));
                        consumed.push(b);
                    }
                }
                // In place: an activation input whose block nothing later reads.
                let out_bytes = n
                    .output
                    .first()
                    .filter(|o| !o.is_empty())
                    .map(|o| info[o].bytes());
                let in_place_block = if opts.in_place_ops.contains(&n.op_type) {
                    let cands: &[String] = if n.op_type == "BatchNormalization" {
                        &n.input[..1]
                    } else {
                        &n.input[..]
                    };
                    cands.iter().find_map(|i| {
                        let t = info.get(i)?;
                        if t.constant || Some(t.bytes()) != out_bytes {
                            return None;
                        }
                        let b = tensor_block[i];
                        let here = consumed.iter().filter(|&&c| c == b).count();
                        let blk = &plan.blocks[b];
                        (!blk.pinned && blk.live == here).then_some(b)
                    })
                } else {
                    None
                };
                let mut writes = Vec::new();
                for (k, o) in n.output.iter().enumerate() {
                    // Optional outputs shape inference does not produce
                    // (e.g. training-mode statistics) are not written.
                    let Some(t) = info.get(o).filter(|_| !o.is_empty()) else {
                        continue;
                    };
                    let b = match (k, in_place_block) {
                        (0, Some(b)) => b,
                        _ => plan.alloc(t.bytes()),
                    };
                    let live = uses.get(o.as_str()).copied().unwrap_or(0);
                    if in_place_block == Some(b) {
                        plan.blocks[b].live += live;
                    } else {
                        plan.blocks[b].live = live;
                    }
                    if outputs.contains(o) {
                        plan.blocks[b].pinned = true;
                    }
                    tensor_block.insert(o.clone(), b);
                    writes.push(range_of(t, &plan.blocks[b]));
                }
                ops.push(Op {
                    kind: OpKind::Kernel,
                    name: format!(
                        "{}:{}",
                        n.op_type,
                        if n.name.is_empty() {
                            n.output.first().cloned().unwrap_or_else(|| idx.to_string())
                        } else {
                            n.name.clone()
                        }
                    ),
                    reads,
                    writes,
                });
                for b in consumed {
                    release(&mut plan, b, 1);
                }
                // Outputs nobody reads are freed at once.
                for o in n.output.iter() {
                    if let Some(&b) = tensor_block.get(o) {
                        release(&mut plan, b, 0);
                    }
                }
            }
        }
    }
    for o in &outputs {
        let t = &info[o];
        if t.constant {
            continue;
        }
        let b = tensor_block[o];
        ops.push(Op {
            kind: OpKind::Memcpy,
            name: format!("memcpy DtoH {o}"),
            reads: vec![range_of(t, &plan.blocks[b])],
            writes: vec![],
        });
    }
    if plan.next_addr > PARAM_BASE {
        return Err(format!(
            "the activations need {} bytes, more than the {PARAM_BASE} bytes the lowering \
             reserves for them below the parameters",
            plan.next_addr
        ));
    }
    Ok(Trace {
        model: name.to_string(),
        ops,
    })
}

/// Drops `n` reads from block `b` and frees it when nothing reads it any more.
fn release(plan: &mut Planner, b: usize, n: usize) {
    let blk = &mut plan.blocks[b];
    blk.live = blk.live.saturating_sub(n);
    if blk.live == 0 && !blk.pinned && !plan.free.contains(&b) {
        plan.free.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::proto::*;
    use super::*;
    use crate::analysis::analyze;

    fn node(op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
        NodeProto {
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: outs.iter().map(|s| s.to_string()).collect(),
            name: outs[0].to_string(),
            op_type: op.into(),
            ..Default::default()
        }
    }

    fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TypeProtoTensor {
                    elem_type: 1,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| Dimension {
                                dim_value: Some(d),
                                dim_param: None,
                            })
                            .collect(),
                    }),
                }),
            }),
        }
    }

    fn weight(name: &str, dims: &[i64]) -> TensorProto {
        TensorProto {
            dims: dims.to_vec(),
            data_type: 1,
            name: name.into(),
            ..Default::default()
        }
    }

    fn model(nodes: Vec<NodeProto>, inits: Vec<TensorProto>, out: &str) -> ModelProto {
        ModelProto {
            graph: Some(GraphProto {
                node: nodes,
                initializer: inits,
                input: vec![input("x", &[1, 4, 8, 8])],
                output: vec![ValueInfoProto {
                    name: out.into(),
                    r#type: None,
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn conv_bn_relu_in_place_chain() {
        let m = model(
            vec![
                node("Conv", &["x", "w"], &["c"]),
                node("BatchNormalization", &["c", "s", "b", "m", "v"], &["n"]),
                node("Relu", &["n"], &["r"]),
                node("Flatten", &["r"], &["f"]),
                node("Gemm", &["f", "fc"], &["y"]),
            ],
            vec![
                weight("w", &[4, 4, 3, 3]),
                weight("s", &[4]),
                weight("b", &[4]),
                weight("m", &[4]),
                weight("v", &[4]),
                weight("fc", &[256, 10]),
            ],
            "y",
        );
        let t = lower(&m, "m", &Options::default()).unwrap();
        // memcpy in, 4 kernels (Flatten is a view), memcpy out.
        assert_eq!(t.ops.len(), 6);
        assert_eq!(t.kernel_count(), 4);
        let bn = &t.ops[2];
        assert_eq!(
            bn.reads[0], bn.writes[0],
            "BatchNormalization runs in place"
        );
        let a = analyze(&t).unwrap();
        let sizes: Vec<(bool, usize)> = a.kernels.iter().map(|k| (k.idempotent, k.size)).collect();
        assert_eq!(sizes, vec![(true, 1), (false, 2), (false, 3), (true, 1)]);
        // Conv reads the input 4*8*8 floats; with padding 0 the output is 6x6.
        assert_eq!(t.ops[1].writes[0].len, 4 * 6 * 6 * 4);

        let t = lower(&m, "m", &Options::no_in_place()).unwrap();
        let a = analyze(&t).unwrap();
        assert_eq!(a.idempotent_count(), 4, "no in-place ops, all idempotent");
    }

    #[test]
    fn input_read_later_blocks_in_place() {
        // Residual: x1 = relu(conv(x)); y = conv(x1) + x1. The Relu's input c
        // dies there (in place), but x1 is read twice, so the Add may run in
        // place on the conv output (its first input) only.
        let m = model(
            vec![
                node("Conv", &["x", "w"], &["c"]),
                node("Relu", &["c"], &["x1"]),
                node("Conv", &["x1", "w2"], &["c2"]),
                node("Add", &["c2", "x1"], &["y"]),
            ],
            vec![weight("w", &[4, 4, 1, 1]), weight("w2", &[4, 4, 1, 1])],
            "y",
        );
        let t = lower(&m, "m", &Options::default()).unwrap();
        let add = &t.ops[4];
        assert_eq!(add.writes[0], add.reads[0], "Add runs in place on c2");
        assert_ne!(add.writes[0], add.reads[1], "x1 is not clobbered");
        let a = analyze(&t).unwrap();
        assert!(!a.kernels[3].idempotent);
        assert_eq!(a.kernels[3].start_kernel, 2);
    }

    #[test]
    fn unsupported_op_names_node() {
        let m = model(vec![node("NonMaxSuppression", &["x"], &["y"])], vec![], "y");
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(
            e.contains("node #0") && e.contains("NonMaxSuppression"),
            "{e}"
        );
    }

    #[test]
    fn in_place_operator_set_is_configurable() {
        let m = model(
            vec![
                node("Conv", &["x", "w"], &["c"]),
                node("BatchNormalization", &["c", "s", "b", "m", "v"], &["n"]),
                node("Relu", &["n"], &["y"]),
            ],
            ["w", "s", "b", "m", "v"]
                .iter()
                .map(|n| weight(n, if *n == "w" { &[4, 4, 1, 1] } else { &[4] }))
                .collect(),
            "y",
        );
        let relu_only = Options::with_ops("Relu").unwrap();
        let t = lower(&m, "m", &relu_only).unwrap();
        let a = analyze(&t).unwrap();
        let flags: Vec<bool> = a.kernels.iter().map(|k| k.idempotent).collect();
        assert_eq!(flags, vec![true, true, false]);
        assert_eq!(a.kernels[2].start_kernel, 1, "Relu's group is (BN, Relu)");
        let e = Options::with_ops("Relu,Conv").unwrap_err();
        assert!(e.contains("\"Conv\" cannot run in place"), "{e}");
    }

    #[test]
    fn optional_outputs_without_shapes_are_skipped() {
        // Training-mode BatchNormalization lists statistics outputs that
        // this lowering does not infer: they are not written, and a node
        // reading one is a clear error rather than a panic.
        let bn = node(
            "BatchNormalization",
            &["c", "s", "b", "m", "v"],
            &["n", "mean", "var"],
        );
        let inits = ["w", "s", "b", "m", "v"]
            .iter()
            .map(|n| weight(n, if *n == "w" { &[4, 4, 1, 1] } else { &[4] }))
            .collect::<Vec<_>>();
        let ok = model(
            vec![node("Conv", &["x", "w"], &["c"]), bn.clone()],
            inits.clone(),
            "n",
        );
        let t = lower(&ok, "m", &Options::default()).unwrap();
        assert_eq!(t.ops[2].writes.len(), 1);
        let bad = model(
            vec![
                node("Conv", &["x", "w"], &["c"]),
                bn,
                node("Relu", &["mean"], &["y"]),
            ],
            inits,
            "y",
        );
        let e = lower(&bad, "m", &Options::default()).unwrap_err();
        assert!(e.contains("node #2") && e.contains("\"mean\""), "{e}");
    }

    #[test]
    fn dropout_mask_is_not_produced() {
        let m = model(
            vec![
                node("Relu", &["x"], &["r"]),
                node("Dropout", &["r"], &["d", "mask"]),
                node("Relu", &["mask"], &["y"]),
            ],
            vec![],
            "y",
        );
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(e.contains("node #2") && e.contains("Dropout's mask"), "{e}");
    }

    #[test]
    fn freed_buffers_are_reused() {
        let m = model(
            vec![
                node("Conv", &["x", "w"], &["a"]),
                node("Conv", &["a", "w"], &["b"]),
                node("Conv", &["b", "w"], &["c"]),
            ],
            vec![weight("w", &[4, 4, 1, 1])],
            "c",
        );
        let t = lower(&m, "m", &Options::default()).unwrap();
        // a is freed after the second conv, so the third conv writes into it.
        assert_eq!(t.ops[3].writes[0].addr, t.ops[1].writes[0].addr);
    }

    fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            ints: v.to_vec(),
            ..Default::default()
        }
    }

    /// Nodes with no inputs, or scalars where a rank is needed, are errors.
    #[test]
    fn inputless_and_scalar_nodes_are_errors() {
        for op in ["Add", "Sum", "Concat"] {
            let m = model(vec![node(op, &[], &["y"])], vec![], "y");
            let e = lower(&m, "m", &Options::default()).unwrap_err();
            assert!(e.contains("no inputs"), "{op}: {e}");
        }
        let mut m = model(vec![node("Concat", &["x", "x"], &["y"])], vec![], "y");
        m.graph.as_mut().unwrap().input = vec![input("x", &[])];
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(e.contains("rank 0"), "{e}");
    }

    /// Sizes from the file are arbitrary 64-bit numbers: sizes that do not
    /// fit are errors naming the tensor or node, never an overflow panic.
    #[test]
    fn huge_sizes_are_errors_not_overflows() {
        let big = 1i64 << 40;
        let mut m = model(vec![node("Relu", &["x"], &["y"])], vec![], "y");
        m.graph.as_mut().unwrap().input = vec![input("x", &[big, big, big])];
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(
            e.contains("graph input \"x\"") && e.contains("exceed"),
            "{e}"
        );

        let m = model(
            vec![node("Relu", &["x"], &["y"])],
            vec![weight("w", &[big, big])],
            "y",
        );
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(
            e.contains("initializer \"w\"") && e.contains("exceed"),
            "{e}"
        );

        let mut shape = weight("s", &[3]);
        shape.data_type = 7; // int64
        shape.int64_data = vec![big, big, big];
        let m = model(vec![node("Reshape", &["x", "s"], &["y"])], vec![shape], "y");
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(e.contains("node #0") && e.contains("overflows"), "{e}");

        let mut conv = node("Conv", &["x", "w"], &["y"]);
        conv.attribute = vec![
            ints_attr("pads", &[i64::MAX, i64::MAX, i64::MAX, i64::MAX]),
            ints_attr("dilations", &[i64::MAX, 1]),
        ];
        let m = model(vec![conv], vec![weight("w", &[4, 4, 3, 3])], "y");
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(e.contains("node #0"), "{e}");

        // Many activations that each fit but together reach the parameters.
        let half = 1i64 << 37; // 2^37 f32 = 512 GiB per tensor, 4 of them live
        let mut m = model(
            vec![
                node("Relu", &["x"], &["a"]),
                node("Sigmoid", &["x"], &["b"]),
                node("Add", &["a", "b"], &["y"]),
            ],
            vec![],
            "y",
        );
        m.graph.as_mut().unwrap().input = vec![input("x", &[half])];
        let e = lower(&m, "m", &Options::no_in_place()).unwrap_err();
        assert!(e.contains("activations need"), "{e}");
    }
}
