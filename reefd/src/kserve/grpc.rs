//! The Open Inference Protocol over gRPC: `inference.GRPCInferenceService`
//! (proto/kserve_v2.proto) on tonic and prost.
//!
//! Tensor data comes as `raw_input_contents` (one little-endian buffer per
//! input, in input order: what tritonclient sends), as typed `contents`,
//! or in a registered shared memory region; outputs go back as
//! `raw_output_contents`, except those asked into a region.

use super::{level_of_priority, tensor, Front, Input, Kind, Schedule, V2Error};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The code generated from proto/kserve_v2.proto.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("inference");
}

use pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use pb::infer_parameter::ParameterChoice;

impl From<V2Error> for Status {
    fn from(e: V2Error) -> Status {
        match e.kind {
            Kind::BadRequest | Kind::TooLarge => Status::invalid_argument(e.message),
            Kind::NotFound => Status::not_found(e.message),
            Kind::Unauthenticated => Status::unauthenticated(e.message),
            Kind::Unavailable => Status::unavailable(e.message),
            Kind::Exhausted => Status::resource_exhausted(e.message),
            Kind::Timeout | Kind::SlowClient => Status::deadline_exceeded(e.message),
            Kind::Unsupported => Status::unimplemented(e.message),
            Kind::Internal => Status::internal(e.message),
        }
    }
}

use super::limit::PeerAddr;

/// What a call knows of its connection: the peer, and when the connection
/// last read bytes (the call's `reef_timeline` begins there).
#[derive(Clone)]
pub struct GrpcPeer {
    peer: PeerAddr,
    last_read: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// When the connection of `req` last read bytes (ns of CLOCK_MONOTONIC;
/// 0: unknown). Read at the call's entry it is when the last of the
/// request's bytes came in, for a client with one call at a time on its
/// connection (the bench's).
fn last_read<T>(req: &Request<T>) -> u64 {
    req.extensions()
        .get::<GrpcPeer>()
        .and_then(|p| p.last_read.as_ref())
        .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed))
}

/// The gRPC service on a [`Front`].
#[derive(Clone)]
pub struct Service {
    front: Arc<Front>,
}

impl Service {
    fn check<T>(&self, req: &Request<T>, admin: bool) -> Result<(), Status> {
        let p = req.extensions().get::<GrpcPeer>().map(|p| &p.peer);
        let peer = p.and_then(|p| p.addr).map(|a| a.ip());
        let client_cert = p.is_some_and(|p| p.client_cert);
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        self.front
            .opts
            .access
            .check(peer, client_cert, token, admin)
            .map_err(|_| V2Error::unauthenticated(admin).into())
    }
}

/// Serves `listener` until the task is aborted: over TLS when
/// `kserve.tls_cert` is set, each connection's handshake on a task of its
/// own within `kserve.header_read_timeout_ms`, so a client that trickles
/// its handshake holds only its own slot, and only for that long.
pub async fn serve(front: Arc<Front>, listener: tokio::net::TcpListener) {
    let max = front.opts.max_body_bytes;
    let conns = front.opts.max_connections.max(1);
    let (frame_within, request_within) =
        (front.opts.header_read_timeout, front.opts.body_read_timeout);
    let (age, grace) = (
        front.opts.grpc_max_connection_age,
        front.opts.grpc_max_connection_age_grace,
    );
    let tls = front.opts.tls.as_ref().map(|t| Arc::clone(&t.grpc));
    let svc = GrpcInferenceServiceServer::new(Service { front })
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    // The settings tonic's `Server` was given before inline.rs (and its
    // defaults for the rest): tonic's default is no limit on streams;
    // h2watch's MAX_OPEN bounds open request halves, this the calls a
    // connection runs at once. HTTP/2's default frame, 16 KiB, cuts a
    // 48 KiB tensor into four DATA frames, which the client writes one at
    // a time and the connection reads one at a time; with 64 KiB it goes
    // as one (docs/kserve.md, "Where the round trip goes"). h2watch then
    // wants a frame whole within header_read_timeout_ms: 6.4 KiB/s at the
    // default 10 s. The age alone goes to the connection: it sends GOAWAY
    // then, and h2watch closes the connection after the grace.
    let settings = super::inline::Settings {
        max_concurrent_streams: 128,
        max_frame_size: MAX_FRAME,
        max_age: age,
    };
    let mut limited = super::limit::Limited::new(listener, conns);
    let close_after = age.map(|a| a + grace);
    loop {
        let (c, addr) = limited.accept_limited().await;
        let (svc, tls) = (svc.clone(), tls.clone());
        // Each connection, its TLS handshake included, on a task of its
        // own: a client that trickles its handshake holds only its slot.
        tokio::spawn(async move {
            let c = match tls {
                None => c
                    .plain()
                    .watch_http2(frame_within, request_within, close_after),
                Some(tls) => {
                    let c = c.watch_tls_records(frame_within, request_within);
                    match super::tls::handshake(tls, c, frame_within).await {
                        Ok((s, client_cert)) => super::limit::Conn::over_tls(s, client_cert)
                            .watch_http2(frame_within, request_within, close_after),
                        Err(e) => {
                            tracing::debug!(peer = %addr, error = %e, "gRPC TLS handshake failed");
                            return;
                        }
                    }
                }
            };
            let peer = GrpcPeer {
                peer: c.peer(),
                last_read: c.last_read(),
            };
            let call = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
                req.extensions_mut().insert(peer.clone());
                let deadline = super::inline::grpc_timeout(req.headers());
                let call = tower::ServiceExt::oneshot(svc.clone(), req);
                async move {
                    let Some(d) = deadline else { return call.await };
                    match tokio::time::timeout(d, call).await {
                        Ok(r) => r,
                        Err(_) => Ok(Status::deadline_exceeded("Timeout expired").into_http()),
                    }
                }
            });
            let io = hyper_util::rt::TokioIo::new(c);
            if let Err(e) = super::inline::serve(io, call, settings).await {
                tracing::debug!(peer = %addr, error = %e, "gRPC connection ended");
            }
        });
    }
}

/// The largest HTTP/2 frame the gRPC front accepts (SETTINGS_MAX_FRAME_SIZE,
/// RFC 9113 §6.5.2).
const MAX_FRAME: u32 = 64 * 1024;

fn int_param(p: &HashMap<String, pb::InferParameter>, k: &str) -> Result<Option<i64>, V2Error> {
    match p.get(k).and_then(|v| v.parameter_choice.as_ref()) {
        None => Ok(None),
        Some(ParameterChoice::Int64Param(n)) => Ok(Some(*n)),
        Some(ParameterChoice::Uint64Param(n)) => i64::try_from(*n)
            .map(Some)
            .map_err(|_| V2Error::bad(format!("parameter {k} is too large"))),
        Some(other) => Err(V2Error::bad(format!(
            "parameter {k} must be an integer, got {other:?}"
        ))),
    }
}

fn schedule_of(
    front: &Front,
    p: &HashMap<String, pb::InferParameter>,
) -> Result<Schedule, V2Error> {
    let level = level_of_priority(int_param(p, "priority")?, front.opts.default_priority)?;
    let timeout = match int_param(p, "timeout")? {
        None | Some(0) => None,
        Some(us) if us > 0 => Some(std::time::Duration::from_micros(us as u64)),
        Some(us) => {
            return Err(V2Error::bad(format!(
                "timeout must be a positive number of microseconds, got {us}"
            )))
        }
    };
    let qos_ms = match p.get("qos_ms").and_then(|v| v.parameter_choice.as_ref()) {
        None => None,
        Some(ParameterChoice::DoubleParam(q)) if q.is_finite() && *q > 0.0 => Some(*q),
        Some(ParameterChoice::Int64Param(q)) if *q > 0 => Some(*q as f64),
        Some(other) => {
            return Err(V2Error::bad(format!(
                "qos_ms must be a positive number of milliseconds, got {other:?}"
            )))
        }
    };
    Ok(Schedule {
        level,
        timeout,
        qos_ms,
    })
}

/// A shared memory reference in a tensor's parameters, if any
/// ([`super::shm::reference`] on protobuf's parameter types).
fn shm_of(
    p: &HashMap<String, pb::InferParameter>,
    what: &str,
) -> Result<Option<super::ShmRef>, V2Error> {
    let region = p
        .get("shared_memory_region")
        .and_then(|v| v.parameter_choice.as_ref())
        .map(|r| match r {
            ParameterChoice::StringParam(s) => Some(s.as_str()),
            _ => None,
        });
    let int = |k: &str| int_param(p, k).map(|n| n.map(i128::from));
    super::shm::reference(
        what,
        region,
        || int("shared_memory_byte_size"),
        || int("shared_memory_offset"),
    )
}

/// Typed contents as little-endian bytes of `datatype`.
fn contents_bytes(
    name: &str,
    datatype: &str,
    c: &pb::InferTensorContents,
) -> Result<Vec<u8>, V2Error> {
    let mut out = Vec::new();
    macro_rules! le {
        ($v:expr, $t:ty) => {
            for x in $v {
                let y = <$t>::try_from(*x).map_err(|_| {
                    V2Error::bad(format!("input {name:?}: {x} does not fit {datatype}"))
                })?;
                out.extend_from_slice(&y.to_le_bytes());
            }
        };
    }
    match datatype {
        "BOOL" => out.extend(c.bool_contents.iter().map(|b| *b as u8)),
        "INT8" => le!(&c.int_contents, i8),
        "INT16" => le!(&c.int_contents, i16),
        "INT32" => le!(&c.int_contents, i32),
        "INT64" => le!(&c.int64_contents, i64),
        "UINT8" => le!(&c.uint_contents, u8),
        "UINT16" => le!(&c.uint_contents, u16),
        "UINT32" => le!(&c.uint_contents, u32),
        "UINT64" => le!(&c.uint64_contents, u64),
        "FP32" => c
            .fp32_contents
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        "FP64" => c
            .fp64_contents
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        other => {
            return Err(V2Error::bad(format!(
                "input {name:?}: {other} cannot be sent as typed contents; send raw_input_contents"
            )))
        }
    }
    Ok(out)
}

impl Service {
    /// One inference; `read_ns`: when its connection last read bytes
    /// before the call reached the service, `entered_ns`: when it reached
    /// it (tonic had decoded the request), in ns of CLOCK_MONOTONIC.
    async fn infer_one(
        &self,
        r: pb::ModelInferRequest,
        (read_ns, entered_ns): (u64, u64),
    ) -> Result<pb::ModelInferResponse, V2Error> {
        let f = &self.front;
        let timeline = matches!(
            r.parameters
                .get("reef_timeline")
                .and_then(|v| v.parameter_choice.as_ref()),
            Some(ParameterChoice::BoolParam(true))
        );
        let m = f.model(&r.model_name, &r.model_version).await?;
        let sched = schedule_of(f, &r.parameters)?;
        if !r.raw_input_contents.is_empty() && r.raw_input_contents.len() != r.inputs.len() {
            return Err(V2Error::bad(format!(
                "{} raw_input_contents for {} inputs: give one per input, in order",
                r.raw_input_contents.len(),
                r.inputs.len()
            )));
        }
        let mut inputs = Vec::with_capacity(r.inputs.len());
        let mut raw = r.raw_input_contents.into_iter();
        for t in r.inputs {
            let size = tensor::byte_size(&t.datatype, &t.shape)
                .map_err(|e| V2Error::bad(format!("input {:?}: {e}", t.name)))?;
            let what = format!("input {:?}", t.name);
            let shm = shm_of(&t.parameters, &what)?;
            let raw_bytes = raw.next();
            let bytes = if let Some(r) = shm {
                f.shm.read_input(&what, &r, size, &t.datatype, &t.shape)?
            } else if let Some(b) = raw_bytes {
                if b.len() != size {
                    return Err(V2Error::bad(format!(
                        "{what}: {} bytes of raw_input_contents but {} {:?} is {size} bytes",
                        b.len(),
                        t.datatype,
                        t.shape
                    )));
                }
                b
            } else {
                let c = t.contents.as_ref().ok_or_else(|| {
                    V2Error::bad(format!(
                        "{what} has no contents, raw_input_contents or shared memory region"
                    ))
                })?;
                let b = contents_bytes(&t.name, &t.datatype, c)?;
                if b.len() != size {
                    return Err(V2Error::bad(format!(
                        "{what}: contents hold {} bytes but {} {:?} is {size} bytes",
                        b.len(),
                        t.datatype,
                        t.shape
                    )));
                }
                b
            };
            inputs.push(Input {
                name: t.name,
                datatype: t.datatype,
                shape: t.shape,
                bytes,
            });
        }
        let mut wanted: Vec<(String, Option<super::ShmRef>)> = Vec::new();
        for o in &r.outputs {
            wanted.push((
                o.name.clone(),
                shm_of(&o.parameters, &format!("output {:?}", o.name))?,
            ));
        }
        let answer = f.infer(&m, sched, inputs).await?;
        if wanted.is_empty() {
            wanted = answer
                .outputs
                .iter()
                .map(|o| (o.name.clone(), None))
                .collect();
        }
        let mut resp = pb::ModelInferResponse {
            model_name: m.name.clone(),
            model_version: "1".into(),
            id: r.id,
            ..Default::default()
        };
        let p = |c: ParameterChoice| pb::InferParameter {
            parameter_choice: Some(c),
        };
        resp.parameters.insert(
            "reef_task".into(),
            p(ParameterChoice::Uint64Param(answer.task.task)),
        );
        resp.parameters.insert(
            "reef_latency_us".into(),
            p(ParameterChoice::DoubleParam(answer.task.latency_us)),
        );
        resp.parameters.insert(
            "reef_preemptions".into(),
            p(ParameterChoice::Int64Param(answer.task.preemptions as i64)),
        );
        for (name, shm) in wanted {
            let o = answer
                .outputs
                .iter()
                .find(|o| o.name == name)
                .ok_or_else(|| {
                    V2Error::bad(format!("model {} has no output named {name:?}", m.name))
                })?;
            let mut t = pb::model_infer_response::InferOutputTensor {
                name: o.name.clone(),
                datatype: o.datatype.clone(),
                shape: o.shape.clone(),
                ..Default::default()
            };
            if let Some(r) = shm {
                f.shm.write_output(&name, &r, &o.bytes)?;
                let region = r.0;
                t.parameters.insert(
                    "shared_memory_region".into(),
                    p(ParameterChoice::StringParam(region)),
                );
                t.parameters.insert(
                    "shared_memory_byte_size".into(),
                    p(ParameterChoice::Int64Param(o.bytes.len() as i64)),
                );
            } else {
                resp.raw_output_contents.push(o.bytes.clone());
            }
            resp.outputs.push(t);
        }
        if timeline {
            // Where the front's time goes (docs/kserve.md, "Where the
            // round trip goes"): ns of CLOCK_MONOTONIC, the clock of every
            // process on the machine, so a client beside the daemon puts
            // them on its own time line.
            let tl = answer.task.timeline.as_deref().copied().unwrap_or_default();
            for (k, v) in [
                ("reef_read_ns", read_ns),
                ("reef_entered_ns", entered_ns),
                ("reef_called_ns", answer.called_ns),
                ("reef_done_ns", tl.done_ns),
                ("reef_seen_ns", tl.seen_ns),
                ("reef_answered_ns", answer.answered_ns),
                ("reef_built_ns", crate::protocol::monotonic_ns()),
            ] {
                resp.parameters
                    .insert(k.into(), p(ParameterChoice::Uint64Param(v)));
            }
        }
        Ok(resp)
    }
}

type InferStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(
        &self,
        req: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        self.check(&req, false)?;
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        req: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        self.check(&req, false)?;
        Ok(Response::new(pb::ServerReadyResponse {
            ready: self.front.ready(),
        }))
    }

    async fn model_ready(
        &self,
        req: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        let ready = self.front.model(&r.name, &r.version).await.is_ok();
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        req: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        self.check(&req, false)?;
        Ok(Response::new(pb::ServerMetadataResponse {
            name: super::SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: super::EXTENSIONS.iter().map(|s| s.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        let m = self.front.model(&r.name, &r.version).await?;
        let (inputs, outputs) = super::model_io(&m);
        let meta = |t: Vec<super::TensorMeta>| {
            t.into_iter()
                .map(
                    |(name, datatype, shape)| pb::model_metadata_response::TensorMetadata {
                        name,
                        datatype,
                        shape,
                    },
                )
                .collect()
        };
        Ok(Response::new(pb::ModelMetadataResponse {
            name: m.name,
            versions: vec!["1".into()],
            platform: "reef".into(),
            inputs: meta(inputs),
            outputs: meta(outputs),
        }))
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let entered_ns = crate::protocol::monotonic_ns();
        let read_ns = last_read(&req);
        self.check(&req, false)?;
        Ok(Response::new(
            self.infer_one(req.into_inner(), (read_ns, entered_ns))
                .await?,
        ))
    }

    type ModelStreamInferStream = InferStream;

    async fn model_stream_infer(
        &self,
        req: Request<tonic::Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<InferStream>, Status> {
        self.check(&req, false)?;
        let conn_read = req
            .extensions()
            .get::<GrpcPeer>()
            .and_then(|p| p.last_read.clone());
        let mut input = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let svc = self.clone();
        tokio::spawn(async move {
            // In order, one at a time: a stream's answers keep its order.
            while let Ok(Some(r)) = input.message().await {
                let entered_ns = crate::protocol::monotonic_ns();
                let read_ns = conn_read
                    .as_ref()
                    .map_or(0, |a| a.load(std::sync::atomic::Ordering::Relaxed));
                let out = match svc.infer_one(r, (read_ns, entered_ns)).await {
                    Ok(resp) => pb::ModelStreamInferResponse {
                        error_message: String::new(),
                        infer_response: Some(resp),
                    },
                    Err(e) => pb::ModelStreamInferResponse {
                        error_message: e.message,
                        infer_response: None,
                    },
                };
                if tx.send(Ok(out)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn model_statistics(
        &self,
        req: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        let which = if r.name.is_empty() {
            None
        } else {
            self.front.model(&r.name, &r.version).await?;
            Some(r.name.as_str())
        };
        let d = |x: (u64, u64)| {
            Some(pb::StatisticDuration {
                count: x.0,
                ns: x.1,
            })
        };
        let model_stats = self
            .front
            .statistics(which)
            .into_iter()
            .map(|(name, s)| pb::ModelStatistics {
                name,
                version: "1".into(),
                last_inference: s.last_inference_ms,
                inference_count: s.success.0,
                execution_count: s.success.0,
                inference_stats: Some(pb::InferStatistics {
                    success: d(s.success),
                    fail: d(s.fail),
                    queue: d(s.queue),
                    compute_input: d((0, 0)),
                    compute_infer: d(s.compute_infer),
                    compute_output: d((0, 0)),
                    cache_hit: d((0, 0)),
                    cache_miss: d((0, 0)),
                }),
            })
            .collect();
        Ok(Response::new(pb::ModelStatisticsResponse { model_stats }))
    }

    async fn repository_index(
        &self,
        req: Request<pb::RepositoryIndexRequest>,
    ) -> Result<Response<pb::RepositoryIndexResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        let models = self
            .front
            .index(r.ready)
            .await?
            .into_iter()
            .map(|(name, state)| pb::repository_index_response::ModelIndex {
                name,
                version: if state == "READY" {
                    "1".into()
                } else {
                    String::new()
                },
                state: state.into(),
                reason: if state == "READY" {
                    String::new()
                } else {
                    "not loaded".into()
                },
            })
            .collect();
        Ok(Response::new(pb::RepositoryIndexResponse { models }))
    }

    async fn repository_model_load(
        &self,
        req: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        self.check(&req, true)?;
        let r = req.into_inner();
        if r.parameters
            .keys()
            .any(|k| k == "config" || k.starts_with("file:"))
        {
            return Err(V2Error::new(
                Kind::Unsupported,
                "reefd loads models from its models directory only; a config or files in the request are not accepted",
            )
            .into());
        }
        self.front.load(&r.model_name).await?;
        Ok(Response::new(pb::RepositoryModelLoadResponse {}))
    }

    async fn repository_model_unload(
        &self,
        req: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        self.check(&req, true)?;
        self.front.unload(&req.into_inner().model_name).await?;
        Ok(Response::new(pb::RepositoryModelUnloadResponse {}))
    }

    async fn system_shared_memory_status(
        &self,
        req: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryStatusResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        let regions = self
            .front
            .shm
            .status(Some(&r.name))?
            .into_iter()
            .map(|(name, key, offset, byte_size)| {
                (
                    name.clone(),
                    pb::system_shared_memory_status_response::RegionStatus {
                        name,
                        key,
                        offset,
                        byte_size,
                    },
                )
            })
            .collect();
        Ok(Response::new(pb::SystemSharedMemoryStatusResponse {
            regions,
        }))
    }

    async fn system_shared_memory_register(
        &self,
        req: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryRegisterResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        self.front
            .shm
            .register(&r.name, &r.key, r.offset, r.byte_size)?;
        Ok(Response::new(pb::SystemSharedMemoryRegisterResponse {}))
    }

    async fn system_shared_memory_unregister(
        &self,
        req: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> Result<Response<pb::SystemSharedMemoryUnregisterResponse>, Status> {
        self.check(&req, false)?;
        let r = req.into_inner();
        self.front.shm.unregister(if r.name.is_empty() {
            None
        } else {
            Some(&r.name)
        });
        Ok(Response::new(pb::SystemSharedMemoryUnregisterResponse {}))
    }
}
