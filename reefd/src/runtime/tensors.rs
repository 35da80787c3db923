//! A request's tensors, checked against its model (issue 30): names,
//! dtypes, shapes and byte counts, each refusal `bad_request` naming what
//! was expected; shared-memory regions registered per connection and
//! counted per user; the outputs of a finished request put in its answer.

use super::*;
use crate::protocol::{FrameData, OutputRef, OutputTensor, TensorRef, TensorSpec};
use crate::tensors::{Bytes, ModelIo, OutputBytes, OutputPlace, Region, RequestData};
use std::os::fd::OwnedFd;

/// A registered region and the connection it belongs to.
pub(super) struct RegionRec {
    pub(super) conn: u64,
    pub(super) region: Arc<Region>,
}

fn bad(msg: String) -> Failure {
    Failure::new(ErrorCode::BadRequest, msg)
}

fn describe(t: &TensorSpec) -> String {
    format!("{:?} ({} {:?})", t.name, t.dtype, t.shape)
}

fn list(specs: &[(TensorSpec, usize)]) -> String {
    if specs.is_empty() {
        return "none".into();
    }
    specs
        .iter()
        .map(|(t, _)| describe(t))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model's inputs and outputs as `models show` lists them.
pub(super) fn specs(v: &[(TensorSpec, usize)]) -> Vec<TensorSpec> {
    v.iter().map(|(t, _)| t.clone()).collect()
}

impl Runtime {
    /// Registers the memfd `fd` for `conn` (register_region): mapped
    /// outside the lock, then counted against the connection's and the
    /// user's limits.
    pub fn register_region(&self, conn: &Conn, fd: Option<OwnedFd>) -> Handled {
        let Some(fd) = fd else {
            self.lock().metrics.requests += 1;
            return Handled::Error(bad(
                "register_region needs a memfd sent with its frame as SCM_RIGHTS ancillary data (docs/protocol.md, \"Shared memory\")".into(),
            ));
        };
        let id = {
            let mut st = self.lock();
            st.metrics.requests += 1;
            if st.shutting_down {
                return Handled::Error(shutting_down());
            }
            let on_conn = st.regions.values().filter(|r| r.conn == conn.id).count();
            if on_conn >= self.settings.limits.max_regions_per_connection {
                return Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "this connection already has {on_conn} regions (daemon.max_regions_per_connection); unregister one first"
                    ),
                ));
            }
            let uid = conn.peer.uid;
            let of_uid = st.regions.values().filter(|r| r.region.uid == uid).count();
            if !conn.peer.is_root() && of_uid >= self.settings.limits.max_regions_per_uid {
                return Handled::Error(Failure::new(
                    ErrorCode::Busy,
                    format!(
                        "uid {uid} already has {of_uid} regions (daemon.max_regions_per_uid); unregister one first"
                    ),
                ));
            }
            st.next_region += 1;
            st.next_region
        };
        let region =
            match Region::open(id, conn.peer.uid, fd, self.settings.limits.max_region_bytes) {
                Ok(r) => Arc::new(r),
                Err(e) => return Handled::Error(bad(e)),
            };
        let (bytes, writable) = (region.len() as u64, region.writable());
        let mut st = self.lock();
        st.regions.insert(
            id,
            RegionRec {
                conn: conn.id,
                region,
            },
        );
        tracing::debug!(
            conn = conn.id,
            region = id,
            bytes,
            writable,
            "region registered"
        );
        Handled::Reply(Reply::RegionRegistered {
            region: id,
            bytes,
            writable,
        })
    }

    pub(super) fn unregister_region(&self, st: &mut State, conn: &Conn, region: u64) -> Handled {
        match st.regions.get(&region) {
            Some(r) if r.conn == conn.id => {
                // Requests in flight keep their mapping until they end.
                st.regions.remove(&region);
                Handled::Reply(Reply::RegionUnregistered { region })
            }
            _ => Handled::Error(Failure::new(
                ErrorCode::NotFound,
                format!("region {region} is not registered on this connection"),
            )),
        }
    }

    /// Regions registered now (all connections).
    pub fn regions(&self) -> usize {
        self.lock().regions.len()
    }
}

/// Checks a request's tensors against its model and says where each
/// input's bytes are and where each output goes. `regions`: the
/// connection's registered regions.
pub(super) fn request_data(
    model: &str,
    io: &ModelIo,
    inputs: &[TensorRef],
    outputs: &[OutputRef],
    frame: Option<&FrameData>,
    region_of: &dyn Fn(u64) -> Option<Arc<Region>>,
) -> Result<RequestData, Failure> {
    if io.inputs.is_empty() && io.outputs.is_empty() {
        return Err(bad(format!(
            "model {model} declares no inputs or outputs (a measured REEF schedule without code): send infer without \"inputs\"; tensors are taken by models compiled by reef-compile or packaged with a model.toml"
        )));
    }
    let mut data = RequestData::default();
    for (i, t) in inputs.iter().enumerate() {
        let Some((spec, storage)) = io.inputs.iter().find(|(s, _)| s.name == t.name) else {
            return Err(bad(format!(
                "model {model} has no input {:?}; its inputs: {}",
                t.name,
                list(&io.inputs)
            )));
        };
        if inputs[..i].iter().any(|o| o.name == t.name) {
            return Err(bad(format!("input {:?} is given twice", t.name)));
        }
        if t.dtype != spec.dtype {
            return Err(bad(format!(
                "input {:?} of model {model} is {}, not {}",
                t.name, spec.dtype, t.dtype
            )));
        }
        if t.shape != spec.shape {
            return Err(bad(format!(
                "input {:?} of model {model} has shape {:?}, not {:?}",
                t.name, spec.shape, t.shape
            )));
        }
        let want = spec.bytes().unwrap_or(0);
        if t.bytes != want {
            return Err(bad(format!(
                "input {} is {want} bytes, the request gives {}",
                describe(spec),
                t.bytes
            )));
        }
        let bytes = match t.region {
            None => {
                let Some(f) = frame else {
                    return Err(bad(format!(
                        "input {:?} is inline (no \"region\") but the request has no data section: send it as a tensor frame (docs/protocol.md, \"Tensors\")",
                        t.name
                    )));
                };
                let end = t.offset.checked_add(t.bytes);
                match end.filter(|&e| e <= f.len() as u64) {
                    Some(e) => Bytes::Inline {
                        data: f.clone(),
                        range: t.offset as usize..e as usize,
                    },
                    None => {
                        return Err(bad(format!(
                        "input {:?}: offset {} + {} bytes runs past the data section of {} bytes",
                        t.name,
                        t.offset,
                        t.bytes,
                        f.len()
                    )))
                    }
                }
            }
            Some(r) => {
                let region = region_of(r).ok_or_else(|| {
                    bad(format!(
                        "input {:?}: region {r} is not registered on this connection (register_region first)",
                        t.name
                    ))
                })?;
                let range = in_region(&region, t.offset, t.bytes, "input", &t.name)?;
                Bytes::Shm { region, range }
            }
        };
        data.inputs.push((*storage, bytes));
    }
    if let Some((spec, _)) = io
        .inputs
        .iter()
        .find(|(s, _)| !inputs.iter().any(|t| t.name == s.name))
    {
        return Err(bad(format!(
            "model {model} needs input {}; the request has none for it",
            describe(spec)
        )));
    }
    for o in outputs {
        if !io.outputs.iter().any(|(s, _)| s.name == o.name) {
            return Err(bad(format!(
                "model {model} has no output {:?}; its outputs: {}",
                o.name,
                list(&io.outputs)
            )));
        }
    }
    for (i, (spec, storage)) in io.outputs.iter().enumerate() {
        let bytes = spec.bytes().unwrap_or(0);
        let place = outputs.iter().find(|o| o.name == spec.name);
        if io.outputs[..i].iter().any(|(s, _)| s.name == spec.name)
            || outputs.iter().filter(|o| o.name == spec.name).count() > 1
        {
            return Err(bad(format!("output {:?} is named twice", spec.name)));
        }
        let region = match place {
            None => None,
            Some(o) => {
                if o.bytes != bytes {
                    return Err(bad(format!(
                        "output {} is {bytes} bytes, the request gives {}",
                        describe(spec),
                        o.bytes
                    )));
                }
                let region = region_of(o.region).ok_or_else(|| {
                    bad(format!(
                        "output {:?}: region {} is not registered on this connection (register_region first)",
                        o.name, o.region
                    ))
                })?;
                if !region.writable() {
                    return Err(bad(format!(
                        "output {:?}: region {} is read-only (send the memfd open for writing, without F_SEAL_WRITE)",
                        o.name, o.region
                    )));
                }
                let range = in_region(&region, o.offset, o.bytes, "output", &o.name)?;
                Some((region, range))
            }
        };
        data.outputs.push(OutputPlace {
            storage: *storage,
            bytes: bytes as usize,
            region,
        });
    }
    Ok(data)
}

fn in_region(
    region: &Region,
    offset: u64,
    bytes: u64,
    what: &str,
    name: &str,
) -> Result<std::ops::Range<usize>, Failure> {
    if offset >= region.len() as u64 && bytes > 0 {
        return Err(bad(format!(
            "{what} {name:?}: offset {offset} is past the end of region {} ({} bytes)",
            region.id,
            region.len()
        )));
    }
    region.range(offset, bytes).ok_or_else(|| {
        bad(format!(
            "{what} {name:?}: {bytes} bytes at offset {offset} do not fit region {} ({} bytes): the region is too small",
            region.id,
            region.len()
        ))
    })
}

/// An output whose bytes are read after the daemon's lock is released
/// ([`OutputBytes::Later`]).
pub(super) struct PendingOutput {
    later: crate::tensors::Later,
    name: String,
    bytes: usize,
    /// The region range it goes to, or its index in the answer's data.
    to: Result<(Arc<Region>, std::ops::Range<usize>), usize>,
}

/// The outputs of a finished request for its answer: each output's
/// metadata, inline ones with their bytes in the data section. Outputs
/// not read yet are returned, to be read and placed by [`resolve_outputs`]
/// off the lock.
pub(super) fn answer_outputs(
    io: &ModelIo,
    data: &RequestData,
    got: crate::tensors::Outputs,
    result: &mut TaskResult,
) -> Vec<PendingOutput> {
    let got = match got {
        Ok(g) => g,
        Err(why) => {
            result.outputs_missing = Some(why);
            return Vec::new();
        }
    };
    let mut later = Vec::new();
    let mut offset = 0u64;
    for (((spec, _), place), bytes) in io.outputs.iter().zip(&data.outputs).zip(got) {
        let (region, at) = match &place.region {
            Some((r, range)) => (Some(r.id), range.start as u64),
            None => (None, offset),
        };
        match bytes {
            OutputBytes::Inline(b) => {
                offset += b.len() as u64;
                result.data.push(b);
            }
            OutputBytes::Written => {}
            OutputBytes::Later(l) => {
                let to = match &place.region {
                    Some((r, range)) => Ok((r.clone(), range.clone())),
                    None => {
                        offset += place.bytes as u64;
                        result.data.push(Vec::new());
                        Err(result.data.len() - 1)
                    }
                };
                later.push(PendingOutput {
                    later: l,
                    name: spec.name.clone(),
                    bytes: place.bytes,
                    to,
                });
            }
        }
        result.outputs.push(OutputTensor {
            name: spec.name.clone(),
            dtype: spec.dtype.clone(),
            shape: spec.shape.clone(),
            region,
            offset: at,
            bytes: place.bytes as u64,
        });
    }
    later
}

/// Reads the outputs [`answer_outputs`] left pending and puts them where
/// they go. If one has no bytes, the answer carries none, and says why.
pub(super) fn resolve_outputs(result: &mut TaskResult, pending: Vec<PendingOutput>) {
    for p in pending {
        let want = p.bytes;
        match p.later.read() {
            Some(b) if b.len() == want => match p.to {
                Ok((r, range)) => r.write(range.start, &b),
                Err(i) => result.data[i] = b,
            },
            got => {
                result.outputs.clear();
                result.data.clear();
                result.outputs_missing = Some(format!(
                    "the device has no value for output {:?} ({})",
                    p.name,
                    match got {
                        Some(b) => format!("{} bytes, not {want}", b.len()),
                        None => "its buffer was never written".into(),
                    }
                ));
                return;
            }
        }
    }
}
