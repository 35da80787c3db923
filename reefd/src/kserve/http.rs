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

mod infer;
use infer::infer_on;
pub use infer::schedule_of;

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

/// When the request's connection last read bytes
/// ([`super::limit::Conn::last_read`]): read at the handler's entry, when
/// the last of the request's body came in (the body is read whole before
/// the handler runs, [`read_body_in_time`]), for a client with one request
/// at a time on its connection; where `reef_timeline` begins.
#[derive(Clone)]
struct ReadAt(Option<Arc<std::sync::atomic::AtomicU64>>);

impl ReadAt {
    fn ns(read_at: &Option<axum::Extension<ReadAt>>) -> u64 {
        read_at
            .as_ref()
            .and_then(|r| r.0 .0.as_ref())
            .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))
    }
}

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
        let read_at = ReadAt(conn.last_read());
        let app = app.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let served = match tls {
                None => {
                    let peer = conn.peer();
                    serve_one(app, conn, (peer, read_at), header_timeout).await
                }
                Some(tls) => match super::tls::handshake(tls, conn, header_timeout).await {
                    Ok((s, client_cert)) => {
                        let peer = super::limit::PeerAddr {
                            addr: Some(addr),
                            client_cert,
                        };
                        serve_one(app, s, (peer, read_at), header_timeout).await
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
    (peer, read_at): (super::limit::PeerAddr, ReadAt),
    header_timeout: std::time::Duration,
) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use tower::ServiceExt;
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        req.extensions_mut().insert(read_at.clone());
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
    read_at: Option<axum::Extension<ReadAt>>,
    h: HeaderMap,
    Path(model): Path<String>,
    body: Bytes,
) -> Result<Response, V2Error> {
    let stamps = (ReadAt::ns(&read_at), crate::protocol::monotonic_ns());
    check(&f, &p, &h, false)?;
    infer_on(&f, &h, (&model, ""), &body, stamps).await
}

async fn infer_v(
    State(f): Ctx,
    ConnectInfo(p): Peer,
    read_at: Option<axum::Extension<ReadAt>>,
    h: HeaderMap,
    Path((model, version)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, V2Error> {
    let stamps = (ReadAt::ns(&read_at), crate::protocol::monotonic_ns());
    check(&f, &p, &h, false)?;
    infer_on(&f, &h, (&model, &version), &body, stamps).await
}
