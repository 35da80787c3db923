//! The Open Inference Protocol over HTTP/REST (KServe v2, "HTTP/REST"
//! section; Triton's model repository, system shared memory, statistics and
//! binary tensor data extensions), on axum.
//!
//! Binary tensor data: a request whose JSON header is followed by raw bytes
//! says so with `Inference-Header-Content-Length: N` (the JSON is the first
//! N bytes of the body); each input with a `binary_data_size` parameter
//! takes that many bytes of the rest, in input order. Outputs asked for
//! with `binary_data: true` (or the request's `binary_data_output`) come
//! back the same way, after the JSON header of the answer.

use super::{level_of_priority, tensor, Front, Input, Kind, Schedule, V2Error};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The header that says how much of the body is the JSON part.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

impl IntoResponse for V2Error {
    fn into_response(self) -> Response {
        let status = match self.kind {
            Kind::BadRequest => StatusCode::BAD_REQUEST,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Unauthenticated => StatusCode::UNAUTHORIZED,
            Kind::Unavailable | Kind::Exhausted => StatusCode::SERVICE_UNAVAILABLE,
            // Triton answers an expired queue timeout as unavailable.
            Kind::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            Kind::SlowClient => StatusCode::REQUEST_TIMEOUT,
            Kind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Kind::Unsupported => StatusCode::NOT_IMPLEMENTED,
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}

type Ctx = State<Arc<Front>>;
type Peer = ConnectInfo<super::limit::PeerAddr>;

/// The token a request presents, if any.
fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn check(
    front: &Front,
    peer: &super::limit::PeerAddr,
    h: &HeaderMap,
    admin: bool,
) -> Result<(), V2Error> {
    front
        .opts
        .access
        .check(
            peer.addr.map(|a| a.ip()),
            peer.client_cert,
            bearer(h),
            admin,
        )
        .map_err(|_| V2Error::unauthenticated(admin))
}

/// The router of every v2 endpoint reefd serves.
pub fn router(front: Arc<Front>) -> Router {
    let limit = front.opts.max_body_bytes;
    Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata))
        .route("/v2/models/stats", get(stats_all))
        .route("/v2/models/{model}", get(model_metadata))
        .route("/v2/models/{model}/versions/{version}", get(model_metadata_v))
        .route("/v2/models/{model}/ready", get(model_ready))
        .route("/v2/models/{model}/versions/{version}/ready", get(model_ready_v))
        .route("/v2/models/{model}/stats", get(stats_model))
        .route("/v2/models/{model}/versions/{version}/stats", get(stats_model_v))
        .route("/v2/models/{model}/infer", post(infer))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer_v))
        .route("/v2/repository/index", post(repository_index))
        .route("/v2/repository/models/{model}/load", post(repository_load))
        .route("/v2/repository/models/{model}/unload", post(repository_unload))
        .route("/v2/systemsharedmemory/status", get(shm_status_all))
        .route("/v2/systemsharedmemory/region/{region}/status", get(shm_status))
        .route("/v2/systemsharedmemory/region/{region}/register", post(shm_register))
        .route("/v2/systemsharedmemory/region/{region}/unregister", post(shm_unregister))
        .route("/v2/systemsharedmemory/unregister", post(shm_unregister_all))
        .fallback(|| async {
            V2Error::new(Kind::NotFound, "no such endpoint: reefd serves the Open Inference Protocol under /v2 (docs/kserve.md)")
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&front),
            read_body_in_time,
        ))
        .with_state(front)
}

/// Serves `listener` until the task is aborted: at most
/// `kserve.max_connections` connections at once (more wait in the
/// backlog), each on its own task so a slow client stalls only itself.
/// A connection whose request header is not complete within
/// `kserve.header_read_timeout` is closed (hyper's HTTP/1 header timer;
/// axum::serve sets no timer, so it has none), and a request whose body
/// is not complete within `kserve.body_read_timeout` after its header is
/// answered 408 ([`read_body_in_time`]): a client sending a byte a second
/// holds its slot for a bounded time only. A connection whose answer has
/// waited `kserve.body_read_timeout` for the socket to take it (a client
/// that pipelines requests and never reads) is closed too
/// ([`super::limit::Conn::watch_writes`]). Over TLS (`kserve.tls_cert`),
/// the handshake runs on the connection's task within the header timeout
/// too, and the header timer starts once it is done.
pub async fn serve(front: Arc<Front>, listener: tokio::net::TcpListener) {
    let max = front.opts.max_connections.max(1);
    let header_timeout = front.opts.header_read_timeout;
    let write_within = front.opts.body_read_timeout;
    let tls = front.opts.tls.as_ref().map(|t| Arc::clone(&t.http));
    let app = router(front);
    let mut listener = super::limit::Limited::new(listener, max);
    loop {
        let (conn, addr) = listener.accept_limited().await;
        let conn = conn.watch_writes(write_within);
        let app = app.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let peer = conn.peer();
                    serve_one(app, conn, peer, header_timeout).await
                }
                Some(tls) => match super::tls::handshake(tls, conn, header_timeout).await {
                    Ok((s, client_cert)) => {
                        let peer = super::limit::PeerAddr {
                            addr: Some(addr),
                            client_cert,
                        };
                        serve_one(app, s, peer, header_timeout).await
                    }
                    Err(e) => {
                        tracing::debug!(peer = %addr, error = %e, "HTTP TLS handshake failed");
                        return;
                    }
                },
            };
            if let Err(e) = served {
                tracing::debug!(peer = %addr, error = %e, "HTTP connection ended");
            }
        });
    }
}

/// Serves HTTP/1.1 on one connection (plain or TLS) until it ends.
async fn serve_one<I>(
    app: Router,
    io: I,
    peer: super::limit::PeerAddr,
    header_timeout: std::time::Duration,
) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt;
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        app.clone().oneshot(req)
    });
    hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await
}

/// Reads the whole request body before the handler runs, within
/// `kserve.body_read_timeout` and `kserve.max_body_bytes`: a body that
/// arrives too slowly is answered 408 and one too large 413, with the
/// protocol's error object.
async fn read_body_in_time(
    State(f): Ctx,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, V2Error> {
    let (parts, body) = req.into_parts();
    let limit = f.opts.max_body_bytes;
    let bytes = match tokio::time::timeout(
        f.opts.body_read_timeout,
        axum::body::to_bytes(body, limit),
    )
    .await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return Err(V2Error::new(
                Kind::TooLarge,
                format!("the request body could not be read (at most {limit} bytes are accepted, kserve.max_body_bytes): {e}"),
            ))
        }
        Err(_) => {
            return Err(V2Error::new(
                Kind::SlowClient,
                format!(
                    "the request body did not arrive within {} ms of its header (kserve.body_read_timeout_ms)",
                    f.opts.body_read_timeout.as_millis()
                ),
            ))
        }
    };
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    Ok(next.run(req).await)
}

async fn live(State(f): Ctx, ConnectInfo(p): Peer, h: HeaderMap) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    Ok(StatusCode::OK)
}

async fn ready(State(f): Ctx, ConnectInfo(p): Peer, h: HeaderMap) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    Ok(if f.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    })
}

async fn server_metadata(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    Ok(axum::Json(json!({
        "name": super::SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": super::EXTENSIONS,
    }))
    .into_response())
}

fn meta_json(t: &[super::TensorMeta]) -> Value {
    Value::Array(
        t.iter()
            .map(|(n, d, s)| json!({"name": n, "datatype": d, "shape": s}))
            .collect(),
    )
}

async fn metadata(f: &Front, model: &str, version: &str) -> Result<Response, V2Error> {
    let m = f.model(model, version).await?;
    let (inputs, outputs) = super::model_io(&m);
    Ok(axum::Json(json!({
        "name": m.name,
        "versions": ["1"],
        "platform": "reef",
        "inputs": meta_json(&inputs),
        "outputs": meta_json(&outputs),
    }))
    .into_response())
}

async fn model_metadata(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    metadata(&f, &model, "").await
}

async fn model_metadata_v(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path((model, version)): Path<(String, String)>,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    metadata(&f, &model, &version).await
}

async fn model_ready(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    f.model(&model, "").await?;
    Ok(StatusCode::OK)
}

async fn model_ready_v(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path((model, version)): Path<(String, String)>,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    f.model(&model, &version).await?;
    Ok(StatusCode::OK)
}

fn duration(d: (u64, u64)) -> Value {
    json!({"count": d.0, "ns": d.1})
}

fn stats_json(f: &Front, model: Option<&str>) -> Value {
    let stats: Vec<Value> = f
        .statistics(model)
        .into_iter()
        .map(|(name, s)| {
            json!({
                "name": name,
                "version": "1",
                "last_inference": s.last_inference_ms,
                "inference_count": s.success.0,
                "execution_count": s.success.0,
                "inference_stats": {
                    "success": duration(s.success),
                    "fail": duration(s.fail),
                    "queue": duration(s.queue),
                    "compute_input": duration((0, 0)),
                    "compute_infer": duration(s.compute_infer),
                    "compute_output": duration((0, 0)),
                },
                "batch_stats": [],
            })
        })
        .collect();
    json!({ "model_stats": stats })
}

async fn stats_all(State(f): Ctx, ConnectInfo(p): Peer, h: HeaderMap) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    Ok(axum::Json(stats_json(&f, None)).into_response())
}

async fn stats_model(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    f.model(&model, "").await?;
    Ok(axum::Json(stats_json(&f, Some(&model))).into_response())
}

async fn stats_model_v(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path((model, version)): Path<(String, String)>,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    f.model(&model, &version).await?;
    Ok(axum::Json(stats_json(&f, Some(&model))).into_response())
}

fn parse_json(body: &[u8]) -> Result<Value, V2Error> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body)
        .map_err(|e| V2Error::bad(format!("the request body is not valid JSON: {e}")))
}

async fn repository_index(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    body: Bytes,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    let req = parse_json(&body)?;
    let ready = req.get("ready").and_then(Value::as_bool).unwrap_or(false);
    let models: Vec<Value> = f
        .index(ready)
        .await?
        .into_iter()
        .map(|(n, state)| {
            if state == "READY" {
                json!({"name": n, "version": "1", "state": state})
            } else {
                json!({"name": n, "state": state, "reason": "not loaded"})
            }
        })
        .collect();
    Ok(axum::Json(Value::Array(models)).into_response())
}

async fn repository_load(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, true)?;
    let req = parse_json(&body)?;
    if req
        .get("parameters")
        .and_then(Value::as_object)
        .is_some_and(|m| m.keys().any(|k| k == "config" || k.starts_with("file:")))
    {
        return Err(V2Error::new(
            Kind::Unsupported,
            "reefd loads models from its models directory only; a config or files in the request are not accepted",
        ));
    }
    f.load(&model).await?;
    Ok(StatusCode::OK)
}

async fn repository_unload(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, true)?;
    f.unload(&model).await?;
    Ok(StatusCode::OK)
}

async fn shm_status_all(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    shm_status_of(&f, None)
}

async fn shm_status(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(region): Path<String>,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    shm_status_of(&f, Some(&region))
}

fn shm_status_of(f: &Front, region: Option<&str>) -> Result<Response, V2Error> {
    let list: Vec<Value> = f
        .shm
        .status(region)?
        .into_iter()
        .map(|(name, key, offset, size)| json!({"name": name, "key": key, "offset": offset, "byte_size": size}))
        .collect();
    Ok(axum::Json(Value::Array(list)).into_response())
}

async fn shm_register(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(region): Path<String>,
    body: Bytes,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    let req = parse_json(&body)?;
    let key = req
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| V2Error::bad("register needs \"key\" (the shm_open name)"))?;
    let offset = req.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let size = req
        .get("byte_size")
        .and_then(Value::as_u64)
        .ok_or_else(|| V2Error::bad("register needs \"byte_size\""))?;
    f.shm.register(&region, key, offset, size)?;
    Ok(StatusCode::OK)
}

async fn shm_unregister(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(region): Path<String>,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    f.shm.unregister(Some(&region));
    Ok(StatusCode::OK)
}

async fn shm_unregister_all(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
) -> Result<StatusCode, V2Error> {
    check(&f, &p, &h, false)?;
    f.shm.unregister(None);
    Ok(StatusCode::OK)
}

async fn infer(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    infer_on(&f, &h, &model, "", &body).await
}

async fn infer_v(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    h: HeaderMap,
    Path((model, version)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, V2Error> {
    check(&f, &p, &h, false)?;
    infer_on(&f, &h, &model, &version, &body).await
}

/// A shared memory reference in a tensor's parameters, if any.
fn shm_ref(
    params: Option<&Map<String, Value>>,
    what: &str,
) -> Result<Option<super::ShmRef>, V2Error> {
    let Some(p) = params else { return Ok(None) };
    let Some(region) = p.get("shared_memory_region") else {
        return Ok(None);
    };
    let region = region
        .as_str()
        .ok_or_else(|| V2Error::bad(format!("{what}: shared_memory_region must be a string")))?;
    let size = p
        .get("shared_memory_byte_size")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            V2Error::bad(format!(
                "{what}: shared_memory_region needs shared_memory_byte_size"
            ))
        })?;
    let offset = p
        .get("shared_memory_offset")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Ok(Some((region.to_string(), offset, size)))
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

async fn infer_on(
    f: &Front,
    h: &HeaderMap,
    model: &str,
    version: &str,
    body: &[u8],
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
        let bytes = if let Some((region, offset, n)) = shm_ref(params, &format!("input {name:?}"))?
        {
            if n as usize != size {
                return Err(V2Error::bad(format!(
                    "input {name:?}: shared_memory_byte_size {n} but {datatype} {shape:?} is {size} bytes"
                )));
            }
            f.shm.read(&region, offset, n)?
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
    let mut wanted: Vec<(String, bool, Option<super::ShmRef>)> = Vec::new();
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
        if let Some((region, offset, n)) = shm {
            if (n as usize) < o.bytes.len() {
                return Err(V2Error::bad(format!(
                    "output {name:?} is {} bytes but its shared memory region gives {n}",
                    o.bytes.len()
                )));
            }
            f.shm.write(&region, offset, &o.bytes)?;
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
