//! What goes into a model instance and comes out of it. A request with
//! data: its outputs copied device to host ([`copy_outputs`]; its inputs
//! go in at kernel 0's launch, kernels.rs). A request without: seed `t % INPUT_SEEDS` fills every input storage of
//! the model ([`put_inputs`]), and every output storage is read back
//! ([`read_outputs`]) and compared with the same seed's outputs computed
//! unpreempted when the model was loaded
//! (device/cuda/load.rs; `Device::verified`).

use cudarc::driver::sys;

use super::super::driver::{check, dtoh, htod, CudaError};
use super::super::{Instance, ModelFiles};

/// Distinct inputs a model's requests cycle through (each verified against
/// its unpreempted output, computed at load).
pub const INPUT_SEEDS: u64 = 8;

/// The input bytes of seed `seed`: a fixed function, so a request's output
/// can be compared with the reference computed for its seed (request `t`
/// without data takes seed `t % INPUT_SEEDS`).
pub fn input(seed: u64, bytes: usize) -> Vec<u8> {
    // Byte i is (131 seed + 7 i) mod 251: one period of 251 bytes,
    // repeated (copies, not a division per byte: a 16 MiB input took
    // longer to make than its request took to run).
    let period: Vec<u8> = (0..251u64)
        .map(|i| (seed.wrapping_mul(131).wrapping_add(i * 7) % 251) as u8)
        .collect();
    let mut v = Vec::with_capacity(bytes);
    while v.len() < bytes {
        let n = (bytes - v.len()).min(period.len());
        v.extend_from_slice(&period[..n]);
    }
    v
}

/// Seed `seed`'s bytes into each input storage of `files` in `inst`: input
/// `j` takes seed `seed + j`'s bytes, so two inputs of one size differ.
pub(in crate::device::cuda) fn put_inputs(
    files: &ModelFiles,
    inst: &Instance,
    seed: u64,
) -> Result<(), CudaError> {
    for (j, (&s, bytes)) in files.inputs.iter().zip(files.input_bytes()).enumerate() {
        htod(inst.buffers[&s], &input(seed + j as u64, bytes))?;
    }
    Ok(())
}

/// Every output storage of `files` in `inst`, one after another in the
/// model's order.
pub(in crate::device::cuda) fn read_outputs(
    files: &ModelFiles,
    inst: &Instance,
) -> Result<Vec<u8>, CudaError> {
    let mut out = Vec::new();
    for &o in &files.outputs {
        let at = out.len();
        out.resize(at + files.storages[o].bytes as usize, 0);
        dtoh(&mut out[at..], inst.buffers[&o])?;
    }
    Ok(out)
}

/// Request `data`'s outputs from instance `inst` of `model`, device to
/// host, into the answer's buffer or straight into the client's region:
/// one copy each.
pub(super) fn copy_outputs(
    data: &crate::tensors::RequestData,
    inst: &Instance,
    model: &str,
) -> crate::tensors::Outputs {
    let mut got = Vec::with_capacity(data.outputs.len());
    for o in &data.outputs {
        let Some(&p) = inst.buffers.get(&o.storage) else {
            return Err(format!("model {model} has no storage {}", o.storage));
        };
        match &o.region {
            Some((region, range)) => {
                let Some(dst) = region.ptr_mut(range.start) else {
                    return Err("a read-only region".into());
                };
                // SAFETY: `range` lies in the writable mapping, held by the
                // request's data.
                check("cuMemcpyDtoH_v2", unsafe {
                    sys::cuMemcpyDtoH_v2(dst.cast(), p, range.len())
                })
                .map_err(|e| e.to_string())?;
                got.push(crate::tensors::OutputBytes::Written);
            }
            None => {
                let mut b = vec![0u8; o.bytes];
                dtoh(&mut b, p).map_err(|e| e.to_string())?;
                got.push(crate::tensors::OutputBytes::Inline(b));
            }
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    /// The seeded input is the same bytes as the per-byte formula the
    /// references were defined by.
    #[test]
    fn seeded_input_repeats_its_period() {
        for seed in 0..super::INPUT_SEEDS {
            for bytes in [0, 1, 250, 251, 252, 8192, 100_003] {
                let want: Vec<u8> = (0..bytes)
                    .map(|i| (seed.wrapping_mul(131).wrapping_add(i as u64 * 7) % 251) as u8)
                    .collect();
                assert_eq!(
                    super::input(seed, bytes),
                    want,
                    "seed {seed}, {bytes} bytes"
                );
            }
        }
    }
}
