//! The Open Inference Protocol's inference request over HTTP/REST (KServe
//! v2, "HTTP/REST" section, `POST v2/models/{name}[/versions/{v}]/infer`):
//! the request's JSON header and binary tensor data (Triton's binary data
//! extension, see http.rs), tensors in system shared memory (Triton's
//! shared-memory extension), the schedule its parameters ask for, and the
//! answer, JSON or JSON followed by the outputs' raw bytes.

use super::*;

/// A shared memory reference in a tensor's parameters, if any
/// ([`super::super::shm::reference`] on JSON's types: a size or offset that is not a
/// non-negative integer counts as absent).
fn shm_ref(
    params: Option<&Map<String, Value>>,
    what: &str,
) -> Result<Option<super::super::ShmRef>, V2Error> {
    let Some(p) = params else { return Ok(None) };
    let int = |k: &str| Ok(p.get(k).and_then(Value::as_u64).map(i128::from));
    super::super::shm::reference(
        what,
        p.get("shared_memory_region").map(Value::as_str),
        || int("shared_memory_byte_size"),
        || int("shared_memory_offset"),
    )
}

/// Parses a request's parameters into its schedule.
pub fn schedule_of(f: &Front, params: Option<&Map<String, Value>>) -> Result<Schedule, V2Error> {
    let get_i = |k: &str| -> Result<Option<i64>, V2Error> {
        match params.and_then(|p| p.get(k)) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| V2Error::bad(format!("parameter {k} must be an integer, got {v}"))),
        }
    };
    let level = level_of_priority(get_i("priority")?, f.opts.default_priority)?;
    let timeout = match get_i("timeout")? {
        None | Some(0) => None,
        Some(us) if us > 0 => Some(std::time::Duration::from_micros(us as u64)),
        Some(us) => {
            return Err(V2Error::bad(format!(
                "timeout must be a positive number of microseconds, got {us}"
            )))
        }
    };
    let qos_ms = match params.and_then(|p| p.get("qos_ms")) {
        None => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|q| q.is_finite() && *q > 0.0)
                .ok_or_else(|| {
                    V2Error::bad(format!(
                        "qos_ms must be a positive number of milliseconds, got {v}"
                    ))
                })?,
        ),
    };
    Ok(Schedule {
        level,
        timeout,
        qos_ms,
    })
}

/// One inference. `read_ns`: when the connection last read bytes before
/// the handler ran (the body's last), `entered_ns`: the handler's entry,
/// in ns of CLOCK_MONOTONIC; answered with the other stamps when the
/// request's parameters ask `reef_timeline` (docs/kserve.md).
pub(super) async fn infer_on(
    f: &Front,
    h: &HeaderMap,
    (model, version): (&str, &str),
    body: &[u8],
    (read_ns, entered_ns): (u64, u64),
) -> Result<Response, V2Error> {
    // The JSON header and the binary section.
    let (head, mut binary) = match h.get(HEADER_LENGTH) {
        Some(v) => {
            let n: usize = v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| {
                    V2Error::bad("Inference-Header-Content-Length must be a number of bytes")
                })?;
            if n > body.len() {
                return Err(V2Error::bad(format!(
                    "Inference-Header-Content-Length says {n} bytes of JSON but the body has {}",
                    body.len()
                )));
            }
            (&body[..n], &body[n..])
        }
        None => (body, &body[..0]),
    };
    let req = parse_json(head)?;
    let req = req
        .as_object()
        .ok_or_else(|| V2Error::bad("the inference request must be a JSON object"))?;
    let m = f.model(model, version).await?;
    let sched = schedule_of(f, req.get("parameters").and_then(Value::as_object))?;
    let mut inputs = Vec::new();
    for (i, t) in req
        .get("inputs")
        .and_then(Value::as_array)
        .ok_or_else(|| V2Error::bad("the request needs \"inputs\", an array of tensors"))?
        .iter()
        .enumerate()
    {
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| V2Error::bad(format!("input {i} has no \"name\"")))?
            .to_string();
        let datatype = t
            .get("datatype")
            .and_then(Value::as_str)
            .ok_or_else(|| V2Error::bad(format!("input {name:?} has no \"datatype\"")))?
            .to_string();
        let shape: Vec<i64> = t
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_i64).collect())
            .ok_or_else(|| {
                V2Error::bad(format!(
                    "input {name:?} needs \"shape\", an array of integers"
                ))
            })?;
        let size = tensor::byte_size(&datatype, &shape)
            .map_err(|e| V2Error::bad(format!("input {name:?}: {e}")))?;
        let params = t.get("parameters").and_then(Value::as_object);
        let what = format!("input {name:?}");
        let bytes = if let Some(r) = shm_ref(params, &what)? {
            f.shm.read_input(&what, &r, size, &datatype, &shape)?
        } else if let Some(n) = params.and_then(|p| p.get("binary_data_size")) {
            let n = n.as_u64().ok_or_else(|| {
                V2Error::bad(format!("input {name:?}: binary_data_size must be a number"))
            })? as usize;
            if n != size {
                return Err(V2Error::bad(format!(
                    "input {name:?}: binary_data_size {n} but {datatype} {shape:?} is {size} bytes"
                )));
            }
            if n > binary.len() {
                return Err(V2Error::bad(format!(
                    "input {name:?}: binary_data_size {n} but only {} bytes of binary data remain in the body",
                    binary.len()
                )));
            }
            let (this, rest) = binary.split_at(n);
            binary = rest;
            this.to_vec()
        } else {
            let data = t.get("data").ok_or_else(|| {
                V2Error::bad(format!(
                    "input {name:?} has no \"data\", binary_data_size or shared memory region"
                ))
            })?;
            tensor::json_to_bytes(&name, &datatype, tensor::elements(&shape)?, data)?
        };
        inputs.push(Input {
            name,
            datatype,
            shape,
            bytes,
        });
    }
    if !binary.is_empty() {
        return Err(V2Error::bad(format!(
            "{} bytes of binary data follow the JSON header that no input's binary_data_size accounts for",
            binary.len()
        )));
    }
    // Requested outputs: all when none are named.
    let binary_all = req
        .get("parameters")
        .and_then(|p| p.get("binary_data_output"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut wanted: Vec<(String, bool, Option<super::super::ShmRef>)> = Vec::new();
    if let Some(outs) = req.get("outputs").and_then(Value::as_array) {
        for o in outs {
            let name = o
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| V2Error::bad("a requested output has no \"name\""))?
                .to_string();
            let params = o.get("parameters").and_then(Value::as_object);
            let bin = params
                .and_then(|p| p.get("binary_data"))
                .and_then(Value::as_bool)
                .unwrap_or(binary_all);
            let shm = shm_ref(params, &format!("output {name:?}"))?;
            wanted.push((name, bin, shm));
        }
    }
    let id = req.get("id").cloned();
    let timeline = req
        .get("parameters")
        .and_then(|p| p.get("reef_timeline"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let answer = f.infer(&m, sched, inputs).await?;
    if wanted.is_empty() {
        wanted = answer
            .outputs
            .iter()
            .map(|o| (o.name.clone(), binary_all, None))
            .collect();
    }
    let mut outs = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    for (name, bin, shm) in wanted {
        let o = answer
            .outputs
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| {
                V2Error::bad(format!("model {} has no output named {name:?}", m.name))
            })?;
        let mut t = json!({"name": o.name, "datatype": o.datatype, "shape": o.shape});
        if let Some(r) = shm {
            f.shm.write_output(&name, &r, &o.bytes)?;
            let region = r.0;
            t["parameters"] =
                json!({"shared_memory_region": region, "shared_memory_byte_size": o.bytes.len()});
        } else if bin {
            t["parameters"] = json!({"binary_data_size": o.bytes.len()});
            tail.extend_from_slice(&o.bytes);
        } else {
            t["data"] = tensor::bytes_to_json(&o.datatype, &o.bytes)?;
        }
        outs.push(t);
    }
    let mut resp = json!({
        "model_name": m.name,
        "model_version": "1",
        "outputs": outs,
        "parameters": {
            "reef_task": answer.task.task,
            "reef_latency_us": answer.task.latency_us,
            "reef_preemptions": answer.task.preemptions,
        },
    });
    if timeline {
        // The gRPC front's stamps (grpc.rs, `infer_one`), on the same
        // CLOCK_MONOTONIC.
        let tl = answer.task.timeline.as_deref().copied().unwrap_or_default();
        let p = &mut resp["parameters"];
        p["reef_read_ns"] = json!(read_ns);
        p["reef_entered_ns"] = json!(entered_ns);
        p["reef_called_ns"] = json!(answer.called_ns);
        p["reef_done_ns"] = json!(tl.done_ns);
        p["reef_seen_ns"] = json!(tl.seen_ns);
        p["reef_answered_ns"] = json!(answer.answered_ns);
        p["reef_built_ns"] = json!(crate::protocol::monotonic_ns());
    }
    if let Some(id) = id {
        resp["id"] = id;
    }
    let head = serde_json::to_vec(&resp).expect("a JSON value serialises");
    if tail.is_empty() {
        return Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            head,
        )
            .into_response());
    }
    let len = head.len();
    let mut body = head;
    body.extend_from_slice(&tail);
    Ok((
        [
            (
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (
                axum::http::HeaderName::from_static(HEADER_LENGTH),
                HeaderValue::from(len),
            ),
        ],
        body,
    )
        .into_response())
}
