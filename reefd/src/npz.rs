//! numpy's `.npz` archives for `reefctl infer --inputs/--outputs`: a zip
//! of `.npy` arrays keyed by name (here, the model's ONNX input and output
//! names). Headers are read with npyz; arrays must be little-endian (or
//! byte-sized) and in C order, as `np.savez` writes arrays numpy made.

use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::path::Path;

/// One array: its name in the archive, numpy's dtype name, shape and raw
/// little-endian C-order bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data: Vec<u8>,
}

/// numpy's name of a `.npy` type string (`<f4` → `float32`).
fn dtype_name(t: &str) -> Option<(&'static str, bool)> {
    let (endian, rest) = t.split_at(1);
    let name = match rest {
        "b1" => "bool",
        "i1" => "int8",
        "u1" => "uint8",
        "i2" => "int16",
        "u2" => "uint16",
        "f2" => "float16",
        "i4" => "int32",
        "u4" => "uint32",
        "f4" => "float32",
        "i8" => "int64",
        "u8" => "uint64",
        "f8" => "float64",
        _ => return None,
    };
    Some((name, endian == ">" && !rest.ends_with('1')))
}

/// The `.npy` type string of numpy's dtype name.
fn type_str(dtype: &str) -> Option<&'static str> {
    Some(match dtype {
        "bool" => "|b1",
        "int8" => "|i1",
        "uint8" => "|u1",
        "int16" => "<i2",
        "uint16" => "<u2",
        "float16" => "<f2",
        "int32" => "<i4",
        "uint32" => "<u4",
        "float32" => "<f4",
        "int64" => "<i8",
        "uint64" => "<u8",
        "float64" => "<f8",
        _ => return None,
    })
}

/// Reads every array of the `.npz` file `path`.
pub fn read(path: &Path) -> anyhow::Result<Vec<Array>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut z = zip::ZipArchive::new(f)
        .with_context(|| format!("{} is not an .npz (zip) archive", path.display()))?;
    let mut out = Vec::new();
    for i in 0..z.len() {
        let mut e = z.by_index(i)?;
        let Some(name) = e.name().strip_suffix(".npy").map(str::to_string) else {
            continue;
        };
        let mut bytes = Vec::with_capacity(e.size() as usize);
        e.read_to_end(&mut bytes)?;
        let mut cur = std::io::Cursor::new(&bytes[..]);
        let h = npyz::NpyHeader::from_reader(&mut cur)
            .with_context(|| format!("{}: array {name}: not a .npy array", path.display()))?;
        let at = cur.position() as usize;
        let ts = match h.dtype() {
            npyz::DType::Plain(t) => t.to_string(),
            d => bail!(
                "{}: array {name} has a structured dtype ({}); reef takes plain numeric arrays",
                path.display(),
                d.descr()
            ),
        };
        let Some((dtype, big)) = dtype_name(&ts) else {
            bail!(
                "{}: array {name} has dtype {ts}, which reef does not take",
                path.display()
            );
        };
        if big {
            bail!(
                "{}: array {name} is big-endian ({ts}); save it little-endian (arr.astype('<{}'))",
                path.display(),
                &ts[1..]
            );
        }
        if h.order() == npyz::Order::Fortran && h.shape().len() > 1 {
            bail!(
                "{}: array {name} is in Fortran order; save np.ascontiguousarray(arr)",
                path.display()
            );
        }
        let data = bytes.split_off(at);
        out.push(Array {
            name,
            dtype: dtype.to_string(),
            shape: h.shape().to_vec(),
            data,
        });
    }
    Ok(out)
}

/// Writes `arrays` to the `.npz` file `path` (stored, as `np.savez` does).
pub fn write(path: &Path, arrays: &[Array]) -> anyhow::Result<()> {
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(arrays.iter().any(|a| a.data.len() > (1 << 31)));
    for a in arrays {
        let Some(ts) = type_str(&a.dtype) else {
            bail!("array {}: dtype {} has no .npy type", a.name, a.dtype);
        };
        z.start_file(format!("{}.npy", a.name), opts)?;
        z.write_all(&npy_header(ts, &a.shape))?;
        z.write_all(&a.data)?;
    }
    z.finish()?;
    Ok(())
}

/// A `.npy` version 1.0 header (magic, version, length, the dict padded
/// with spaces and a newline to a multiple of 64 bytes).
fn npy_header(ts: &str, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [n] => format!("({n},)"),
        s => format!(
            "({})",
            s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
        ),
    };
    let mut dict = format!("{{'descr': '{ts}', 'fortran_order': False, 'shape': {dims}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    dict.push('\n');
    let mut h = b"\x93NUMPY\x01\x00".to_vec();
    h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_npyz() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a.npz");
        let arrays = vec![
            Array {
                name: "image:0".into(),
                dtype: "float32".into(),
                shape: vec![2, 3],
                data: (0..24).collect(),
            },
            Array {
                name: "ids".into(),
                dtype: "int64".into(),
                shape: vec![1],
                data: 7i64.to_le_bytes().to_vec(),
            },
        ];
        write(&p, &arrays).unwrap();
        assert_eq!(read(&p).unwrap(), arrays);
    }
}
