//! Tensors as the Open Inference Protocol carries them: a datatype name
//! (`FP32`, `INT64`, … — the protocol's "Tensor Data Types" table), a shape,
//! and the data either as JSON numbers (row-major, flattened or nested), as
//! raw little-endian bytes (HTTP's binary tensor data extension, gRPC's
//! `raw_input_contents`), or in a registered shared memory region.

use super::V2Error;

/// Size in bytes of one element of `datatype`, `None` for `BYTES` (variable
/// length) and for names the protocol does not define.
pub fn element_size(datatype: &str) -> Option<usize> {
    Some(match datatype {
        "BOOL" | "UINT8" | "INT8" => 1,
        "UINT16" | "INT16" | "FP16" | "BF16" => 2,
        "UINT32" | "INT32" | "FP32" => 4,
        "UINT64" | "INT64" | "FP64" => 8,
        _ => return None,
    })
}

/// Elements of `shape`, refusing negative dimensions (a request's shape is
/// concrete) and overflow.
pub fn elements(shape: &[i64]) -> Result<usize, V2Error> {
    shape.iter().try_fold(1usize, |n, &d| {
        let d = usize::try_from(d)
            .map_err(|_| V2Error::bad(format!("shape {shape:?} has a negative dimension")))?;
        n.checked_mul(d)
            .ok_or_else(|| V2Error::bad(format!("shape {shape:?} is too large")))
    })
}

/// Bytes a tensor of `datatype` and `shape` takes.
pub fn byte_size(datatype: &str, shape: &[i64]) -> Result<usize, V2Error> {
    let e = element_size(datatype).ok_or_else(|| {
        V2Error::bad(format!(
            "datatype {datatype:?} is not one reefd serves (BOOL, UINT8-64, INT8-64, FP16, BF16, FP32, FP64)"
        ))
    })?;
    elements(shape)?
        .checked_mul(e)
        .ok_or_else(|| V2Error::bad(format!("shape {shape:?} is too large")))
}

/// JSON `data` (nested or flat arrays of numbers or booleans) as the
/// little-endian bytes of `count` elements of `datatype`.
pub fn json_to_bytes(
    name: &str,
    datatype: &str,
    count: usize,
    data: &serde_json::Value,
) -> Result<Vec<u8>, V2Error> {
    let size = byte_size(datatype, &[count as i64])?;
    let mut out = Vec::with_capacity(size);
    let mut n = 0usize;
    let mut bad = None;
    flatten(data, &mut |v| {
        if bad.is_some() {
            return;
        }
        n += 1;
        if n > count {
            return;
        }
        if let Err(e) = push(&mut out, datatype, v) {
            bad = Some(e);
        }
    });
    if let Some(e) = bad {
        return Err(V2Error::bad(format!("input {name:?}: {e}")));
    }
    if n != count {
        return Err(V2Error::bad(format!(
            "input {name:?}: data has {n} elements but its shape says {count}"
        )));
    }
    Ok(out)
}

fn flatten(v: &serde_json::Value, f: &mut impl FnMut(&serde_json::Value)) {
    match v {
        serde_json::Value::Array(a) => a.iter().for_each(|x| flatten(x, f)),
        other => f(other),
    }
}

fn push(out: &mut Vec<u8>, datatype: &str, v: &serde_json::Value) -> Result<(), String> {
    use serde_json::Value;
    let int = || -> Result<i128, String> {
        match v {
            Value::Number(n) if n.is_i64() => Ok(n.as_i64().unwrap() as i128),
            Value::Number(n) if n.is_u64() => Ok(n.as_u64().unwrap() as i128),
            Value::Bool(b) => Ok(*b as i128),
            other => Err(format!("{other} is not an integer of {datatype}")),
        }
    };
    let float = || -> Result<f64, String> {
        match v {
            Value::Number(n) => Ok(n.as_f64().unwrap_or(f64::NAN)),
            other => Err(format!("{other} is not a number")),
        }
    };
    macro_rules! int_as {
        ($t:ty) => {{
            let x = int()?;
            let y = <$t>::try_from(x).map_err(|_| format!("{x} does not fit {datatype}"))?;
            out.extend_from_slice(&y.to_le_bytes());
        }};
    }
    match datatype {
        "BOOL" => match v {
            Value::Bool(b) => out.push(*b as u8),
            other => return Err(format!("{other} is not a boolean")),
        },
        "UINT8" => int_as!(u8),
        "INT8" => int_as!(i8),
        "UINT16" => int_as!(u16),
        "INT16" => int_as!(i16),
        "UINT32" => int_as!(u32),
        "INT32" => int_as!(i32),
        "UINT64" => int_as!(u64),
        "INT64" => int_as!(i64),
        "FP32" => out.extend_from_slice(&(float()? as f32).to_le_bytes()),
        "FP64" => out.extend_from_slice(&float()?.to_le_bytes()),
        other => {
            return Err(format!(
                "{other} data cannot be sent as JSON; send it as binary data"
            ))
        }
    }
    Ok(())
}

/// Little-endian `bytes` of `datatype` as a flat JSON array.
pub fn bytes_to_json(datatype: &str, bytes: &[u8]) -> Result<serde_json::Value, V2Error> {
    use serde_json::Value;
    let e = element_size(datatype)
        .ok_or_else(|| V2Error::bad(format!("datatype {datatype:?} is unknown")))?;
    if bytes.len() % e != 0 {
        return Err(V2Error::new(
            super::Kind::Internal,
            format!(
                "{} bytes is not a whole number of {datatype} elements",
                bytes.len()
            ),
        ));
    }
    macro_rules! each {
        ($t:ty, $f:expr) => {
            bytes
                .chunks_exact(std::mem::size_of::<$t>())
                .map(|c| $f(<$t>::from_le_bytes(c.try_into().unwrap())))
                .collect()
        };
    }
    let v: Vec<Value> = match datatype {
        "BOOL" => bytes.iter().map(|b| Value::Bool(*b != 0)).collect(),
        "UINT8" => each!(u8, Value::from),
        "INT8" => each!(i8, Value::from),
        "UINT16" => each!(u16, Value::from),
        "INT16" => each!(i16, Value::from),
        "UINT32" => each!(u32, Value::from),
        "INT32" => each!(i32, Value::from),
        "UINT64" => each!(u64, Value::from),
        "INT64" => each!(i64, Value::from),
        // Widened to f64 and written as that f64 (0.1f32 reads
        // 0.10000000149011612), as Triton's server writes FP32 outputs
        // (src/http_server.cc, `WriteDataToJson`: `AppendDouble` of each
        // float): longer than the float's shortest form, but the same text
        // a Triton client gets, and it reads back as the same f32.
        "FP32" => each!(f32, |x: f32| Value::from(x as f64)),
        "FP64" => each!(f64, |x: f64| Value::from(x)),
        other => {
            return Err(V2Error::bad(format!(
                "{other} outputs cannot be returned as JSON; ask for binary_data"
            )))
        }
    };
    Ok(Value::Array(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_data_becomes_little_endian_bytes_and_back() {
        let b = json_to_bytes("x", "FP32", 4, &json!([[1.0, 2.5], [-3, 4]])).unwrap();
        assert_eq!(b.len(), 16);
        assert_eq!(f32::from_le_bytes(b[4..8].try_into().unwrap()), 2.5);
        assert_eq!(
            bytes_to_json("FP32", &b).unwrap(),
            json!([1.0, 2.5, -3.0, 4.0])
        );
        let i = json_to_bytes("ids", "INT64", 2, &json!([7, -1])).unwrap();
        assert_eq!(bytes_to_json("INT64", &i).unwrap(), json!([7, -1]));
    }

    #[test]
    fn data_that_disagrees_with_shape_or_type_is_refused() {
        let e = json_to_bytes("x", "FP32", 3, &json!([1, 2])).unwrap_err();
        assert!(e.message.contains("2 elements but its shape says 3"), "{e}");
        let e = json_to_bytes("x", "UINT8", 1, &json!([300])).unwrap_err();
        assert!(e.message.contains("does not fit UINT8"), "{e}");
        let e = json_to_bytes("x", "INT32", 1, &json!(["a"])).unwrap_err();
        assert!(e.message.contains("not an integer"), "{e}");
        assert!(byte_size("STRING", &[1]).is_err());
        assert!(byte_size("FP32", &[-1, 2]).is_err());
        assert_eq!(byte_size("FP16", &[2, 3]).unwrap(), 12);
    }
}
