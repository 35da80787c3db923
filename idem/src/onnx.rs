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

mod infer;
/// Hand-derived subset of onnx.proto (field numbers from the ONNX IR spec).
pub mod proto;

use infer::*;

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
mod tests;
