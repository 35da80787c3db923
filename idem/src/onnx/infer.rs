//! Shape inference for the operators in [`super::SUPPORTED_OPS`]: each
//! node's output shapes, element sizes and (for constants that are shapes
//! or axes) integer contents, checked as they enter the lowering.

use super::proto::*;
use super::*;

#[derive(Debug, Clone)]
pub(super) struct TensorInfo {
    pub(super) shape: Vec<i64>,
    pub(super) elem: u64,
    /// Integer contents, for constants that are shapes or axes.
    pub(super) ints: Option<Vec<i64>>,
    pub(super) constant: bool,
}

impl TensorInfo {
    /// The size in bytes; every shape is checked by [`check_shape`] when it
    /// enters the lowering, so this cannot overflow.
    pub(super) fn bytes(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product::<u64>() * self.elem
    }
}

pub(super) fn elem_size(data_type: i32) -> Option<u64> {
    Some(match data_type {
        1 | 6 | 12 => 4,
        2 | 3 | 9 => 1,
        4 | 5 | 10 | 16 => 2,
        7 | 11 | 13 => 8,
        _ => return None,
    })
}

pub(super) fn tensor_ints(t: &TensorProto) -> Option<Vec<i64>> {
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

pub(super) fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

pub(super) fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map(|a| a.i).unwrap_or(default)
}

pub(super) fn attr_ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

pub(super) fn broadcast(shapes: &[&[i64]]) -> Result<Vec<i64>, String> {
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

pub(super) fn axis(a: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r.max(1)).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("axis {a} out of range for rank {rank}"))
    }
}

/// Output spatial sizes of a convolution or pooling window.
pub(super) fn window_out(
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
pub(super) fn infer(n: &NodeProto, ins: &[Option<&TensorInfo>]) -> Result<Vec<TensorInfo>, String> {
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
