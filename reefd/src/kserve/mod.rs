//! The Open Inference Protocol (KServe v2) front of reefd, over HTTP/REST
//! ([`http`]) and gRPC ([`grpc`]): the protocol Triton, KServe, Seldon
//! MLServer and OpenVINO Model Server implement and `tritonclient` speaks,
//! so a client already written for Triton points at reefd and changes only
//! the address. REEF §6.1 puts REEF beside Triton's GPUStreams and §6.6
//! (Fig. 28) beside Triton with priorities; this front is how Triton's
//! clients get REEF's real-time class.
//!
//! Both fronts share one request path with the native Unix-socket protocol:
//! a [`Front`] is a client *inside* the daemon. It holds one connection to
//! the [`Runtime`] (a [`Conn`] whose outbox hands each answer to its
//! waiting request on the thread that completed it) and a pool of streams
//! per priority level, and turns each v2 request into
//! the native request the runtime already serves (`infer`, `load_model`,
//! `unload_model`, `list_models`). Nothing below the runtime knows a request
//! came over HTTP.
//!
//! Scheduling from the request, as Triton's schedule-policy extension
//! defines it: the `priority` parameter 1 is the highest and selects RT
//! (level 0); 2–10 select levels 1–9 (FIKIT's levels; best-effort for
//! REEF's policies); 0 or absent selects `kserve.default_priority` (BE
//! unless configured). `timeout` (µs) fails a request that has not reached
//! the GPU in time; `qos_ms` reaches `aker`/`baymax` as on the native
//! protocol.
//!
//! Access ([`Access`]): TCP carries no peer credentials, so the listeners
//! bind loopback unless `kserve.allow_remote` is set, and a non-loopback
//! address also needs `kserve.token` (a bearer token) or mutual TLS
//! (`kserve.tls_client_ca`, [`tls`]). Model load and unload over the
//! network need the token always: they are the daemon's admin operations.

pub mod grpc;
pub mod h2watch;
pub mod http;
pub mod inline;
pub mod limit;
pub mod shm;
pub mod tensor;
pub mod tls;
mod v2;
pub use v2::*;

use crate::protocol::{ErrorCode, ModelInfo, Priority, Reply, RequestBody, ServerMessage};
use crate::runtime::{Conn, Failure, Handled, Peer, Runtime};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{oneshot, Semaphore};

/// The protocol extensions reefd implements, and only those (server
/// metadata lists them; tritonclient's callers check this list).
pub const EXTENSIONS: &[&str] = &[
    "model_repository",
    "schedule_policy",
    "statistics",
    "system_shared_memory",
    "binary_tensor_data",
];

/// The server's name in server metadata.
pub const SERVER_NAME: &str = "reefd";

/// Connection ids of fronts start here, far from the socket's (which count
/// up from 1), so logs and `list_streams` tell them apart.
const FRONT_CONN_BASE: u64 = 1 << 62;

/// Settings of the v2 fronts (`[kserve]` in reefd.toml).
#[derive(Debug, Clone)]
pub struct KserveOptions {
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    pub access: Access,
    /// Largest request body (HTTP) or message (gRPC) accepted, bytes.
    pub max_body_bytes: usize,
    /// Open TCP connections per listener; more wait in the backlog.
    pub max_connections: usize,
    /// Inference requests being served at once over both fronts; more are
    /// refused at once (HTTP 503, gRPC RESOURCE_EXHAUSTED).
    pub max_in_flight: usize,
    /// The class of a request whose `priority` is 0 or absent.
    pub default_priority: Priority,
    /// Best-effort streams per level (BE requests of many clients share
    /// them round-robin, as the native protocol's BE clients each hold one).
    pub be_streams: usize,
    /// Users whose shared memory objects may be registered (besides the
    /// daemon's own).
    pub shm_uids: Vec<u32>,
    /// HTTP: a connection that has not sent a request's whole header this
    /// long after it began (or after the previous reply, on a kept-alive
    /// connection) is closed, so slow senders cannot hold the connection
    /// slots (`max_connections`) for ever. gRPC: a connection whose
    /// HTTP/2 preface has not arrived this long after it was accepted is
    /// closed.
    pub header_read_timeout: std::time::Duration,
    /// HTTP: a request whose body has not arrived this long after its
    /// header is answered 408 and its connection closed.
    pub body_read_timeout: std::time::Duration,
    /// gRPC: a connection this old is asked to go away (HTTP/2 GOAWAY, as
    /// gRPC's own `MAX_CONNECTION_AGE`); clients reconnect transparently.
    /// This bounds an idle connection's hold on a slot. None: never.
    pub grpc_max_connection_age: Option<std::time::Duration>,
    /// gRPC: a connection still open this long after it was asked to go
    /// away is closed.
    pub grpc_max_connection_age_grace: std::time::Duration,
    /// TLS on both fronts, and mutual TLS if it has client CAs.
    pub tls: Option<tls::Tls>,
}

impl Default for KserveOptions {
    fn default() -> Self {
        KserveOptions {
            http: None,
            grpc: None,
            access: Access::default(),
            max_body_bytes: 64 << 20,
            max_connections: 1024,
            max_in_flight: 1024,
            default_priority: Priority::Be,
            be_streams: 4,
            shm_uids: Vec::new(),
            header_read_timeout: std::time::Duration::from_secs(10),
            body_read_timeout: std::time::Duration::from_secs(30),
            grpc_max_connection_age: Some(std::time::Duration::from_secs(300)),
            grpc_max_connection_age_grace: std::time::Duration::from_secs(60),
            tls: None,
        }
    }
}

/// Who may use the v2 fronts.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// A bearer token (`Authorization: Bearer TOKEN` over HTTP, the
    /// `authorization` metadata over gRPC). Required from non-loopback
    /// peers, and for model load and unload from any peer.
    pub token: Option<String>,
}

/// Why a request was refused by [`Access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No or a wrong token.
    Unauthenticated,
}

impl Access {
    /// Checks a request from `peer` carrying `presented` (the token in its
    /// `Authorization` header, without `Bearer `). `client_cert`: the peer
    /// presented a client certificate the TLS layer verified against
    /// `kserve.tls_client_ca`, which stands for the token from any peer,
    /// except for `admin` operations (load, unload): they need the token
    /// even from loopback. A wrong token is refused in any case.
    pub fn check(
        &self,
        peer: Option<IpAddr>,
        client_cert: bool,
        presented: Option<&str>,
        admin: bool,
    ) -> Result<(), Denied> {
        // A verified client certificate stands for being on this machine.
        let loopback = client_cert || peer.is_some_and(|ip| ip.is_loopback());
        match &self.token {
            Some(t) => {
                let ok = presented.is_some_and(|p| constant_time_eq(p.as_bytes(), t.as_bytes()));
                if ok || (loopback && !admin && presented.is_none()) {
                    Ok(())
                } else {
                    Err(Denied::Unauthenticated)
                }
            }
            // No token configured: loopback may serve, never administer;
            // the listener cannot be bound elsewhere (config validation).
            None if loopback && !admin => Ok(()),
            None => Err(Denied::Unauthenticated),
        }
    }
}

/// Compares two secrets in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Per-model counters of the statistics extension, from the daemon's own
/// stamps: `queue` is the control path (arrival to the first kernel in the
/// device queue), `compute_infer` the rest of the task's latency.
#[derive(Debug, Clone, Default)]
pub struct ModelStats {
    pub success: (u64, u64),
    pub fail: (u64, u64),
    pub queue: (u64, u64),
    pub compute_infer: (u64, u64),
    /// Milliseconds since the Unix epoch of the last inference.
    pub last_inference_ms: u64,
}

/// A client of the runtime inside the daemon, shared by the HTTP and gRPC
/// fronts.
pub struct Front {
    rt: Arc<Runtime>,
    conn: Conn,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Reply, Failure>>>>,
    /// Streams by level: RT and the middle levels one each, BE a few
    /// shared round-robin.
    streams: tokio::sync::Mutex<BTreeMap<u8, Vec<u64>>>,
    next_be: AtomicUsize,
    in_flight: Arc<Semaphore>,
    pub opts: KserveOptions,
    stats: Mutex<BTreeMap<String, ModelStats>>,
    pub shm: shm::Regions,
    started: Instant,
}

impl Front {
    /// A front on `rt`. Its requests act as `peer` (the daemon's own user:
    /// the network clients have no credentials of their own; `Access`
    /// decides who they are).
    pub fn new(rt: Arc<Runtime>, opts: KserveOptions, peer: Peer, conn_id: u64) -> Arc<Front> {
        Arc::new_cyclic(|me: &std::sync::Weak<Front>| {
            // Answers of blocking infers go straight to their request's
            // waiter, by id, from the thread that completed the task: no
            // task between them (an outbox read by a dispatcher task cost
            // one more wake-up per request; docs/kserve.md, "Where the
            // round trip goes").
            let me = me.clone();
            let outbox = crate::runtime::Outbox::Direct(Arc::new(move |msg| {
                if let Some(front) = me.upgrade() {
                    front.answer(msg);
                }
            }));
            let conn = Conn {
                id: FRONT_CONN_BASE + conn_id,
                peer,
                outbox,
                warm: Arc::new(tokio::sync::Notify::new()),
            };
            let shm = shm::Regions::with_uids(opts.shm_uids.clone());
            Front {
                rt,
                conn,
                next_id: AtomicU64::new(1),
                pending: Mutex::new(HashMap::new()),
                streams: tokio::sync::Mutex::new(BTreeMap::new()),
                next_be: AtomicUsize::new(0),
                in_flight: Arc::new(Semaphore::new(opts.max_in_flight.max(1))),
                opts,
                stats: Mutex::new(BTreeMap::new()),
                shm,
                started: Instant::now(),
            }
        })
    }

    /// Hands a message of the runtime to the request it answers (events
    /// and errors without an id: none of the front's requests asks for
    /// them).
    fn answer(&self, msg: ServerMessage) {
        let (id, r) = match msg {
            ServerMessage::Reply { id, result } => (id, Ok(result)),
            ServerMessage::Error {
                id: Some(id),
                code,
                message,
            } => (id, Err(Failure::new(code, message))),
            _ => return,
        };
        let waiter = self.pending.lock().unwrap().remove(&id);
        if let Some(tx) = waiter {
            let _ = tx.send(r);
        }
    }

    /// Sends one native request and waits for its answer.
    async fn call(&self, body: RequestBody) -> Result<Reply, Failure> {
        self.call_within(body, None, None).await
    }

    async fn call_within(
        &self,
        body: RequestBody,
        data: Option<crate::protocol::FrameData>,
        within: Option<Duration>,
    ) -> Result<Reply, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let load = matches!(body, RequestBody::LoadModel { .. });
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let handled = if load {
            // Reads model files: off the thread that serves the sockets.
            let (rt, conn) = (Arc::clone(&self.rt), self.conn.clone());
            tokio::task::spawn_blocking(move || rt.handle(&conn, id, body, Instant::now()))
                .await
                .unwrap_or_else(|_| {
                    Handled::Error(Failure::new(
                        ErrorCode::Internal,
                        "loading the model failed unexpectedly; see the daemon's log",
                    ))
                })
        } else {
            let now = Instant::now();
            self.rt
                .handle_within(&self.conn, id, body, data, now, within.map(|d| now + d))
        };
        match handled {
            Handled::Reply(r) => {
                self.pending.lock().unwrap().remove(&id);
                Ok(r)
            }
            Handled::Error(f) => {
                self.pending.lock().unwrap().remove(&id);
                Err(f)
            }
            Handled::Sent => rx.await.unwrap_or_else(|_| {
                Err(Failure::new(
                    ErrorCode::Internal,
                    "the daemon dropped the request",
                ))
            }),
        }
    }

    /// Whether the daemon serves requests (not shutting down).
    pub fn ready(&self) -> bool {
        !self.rt.is_shutting_down()
    }

    /// Loaded models.
    pub async fn models(&self) -> Result<Vec<ModelInfo>, V2Error> {
        match self.call(RequestBody::ListModels).await? {
            Reply::Models { models } => Ok(models),
            other => Err(unexpected(&other)),
        }
    }

    /// A loaded model by name, or `not_found` naming the loaded ones.
    pub async fn model(&self, name: &str, version: &str) -> Result<ModelInfo, V2Error> {
        if !version.is_empty() && version != "1" {
            return Err(V2Error::new(
                Kind::NotFound,
                format!("model {name} has only version 1 (reefd keeps one version of a model), not {version:?}"),
            ));
        }
        if let Some(m) = self.rt.model_info(name) {
            return Ok(m);
        }
        // Not loaded: the list, to name the loaded ones.
        let models = self.models().await?;
        match models.iter().find(|m| m.name == name) {
            Some(m) => Ok(m.clone()),
            None => Err(V2Error::new(
                Kind::NotFound,
                format!(
                    "model {name:?} is not loaded (loaded: {}); load it through the repository API or `reefctl models load`",
                    names(&models)
                ),
            )),
        }
    }

    /// The model repository index: every model in the daemon's models
    /// directory and every loaded one, with its state.
    pub async fn index(&self, ready_only: bool) -> Result<Vec<(String, &'static str)>, V2Error> {
        let loaded = self.models().await?;
        let mut all: BTreeMap<String, &'static str> = BTreeMap::new();
        if !ready_only {
            for n in reef_model::list_models(&self.rt.settings().models_dir).unwrap_or_default() {
                all.insert(n, "UNAVAILABLE");
            }
        }
        for m in loaded {
            all.insert(m.name, "READY");
        }
        Ok(all.into_iter().collect())
    }

    pub async fn load(&self, name: &str) -> Result<ModelInfo, V2Error> {
        if crate::runtime::name_is_path(name) {
            return Err(V2Error::bad(format!(
                "model name {name:?} looks like a path: the repository API loads models by name from the daemon's models directory only"
            )));
        }
        match self
            .call(RequestBody::LoadModel {
                name: name.to_string(),
                path: None,
                idempotence: None,
                device_index: None,
            })
            .await?
        {
            Reply::ModelLoaded(m) => Ok(m),
            other => Err(unexpected(&other)),
        }
    }

    pub async fn unload(&self, name: &str) -> Result<(), V2Error> {
        match self
            .call(RequestBody::UnloadModel {
                name: name.to_string(),
            })
            .await?
        {
            Reply::ModelUnloaded { .. } => Ok(()),
            other => Err(unexpected(&other)),
        }
    }

    /// The stream a request of `level` runs on, registered on first use.
    async fn stream_for(&self, level: Priority) -> Result<u64, V2Error> {
        let want = if level == Priority::Be {
            self.opts.be_streams.max(1)
        } else {
            1
        };
        let mut streams = self.streams.lock().await;
        let have = streams.entry(level.get()).or_default();
        if have.len() < want {
            let label = format!("kserve:{level}");
            match self
                .call(RequestBody::Register {
                    priority: level,
                    label: Some(label),
                })
                .await?
            {
                Reply::Registered(s) => {
                    have.push(s.stream);
                    return Ok(s.stream);
                }
                other => return Err(unexpected(&other)),
            }
        }
        let i = self.next_be.fetch_add(1, Ordering::Relaxed) % have.len();
        Ok(have[i])
    }

    /// Runs one inference of model `m` under `sched` on `inputs`. The
    /// inputs' bytes go to the runtime as one data section (the native
    /// protocol's inline tensors): one input's bytes as they came, several
    /// copied into one buffer here; then the device's own copy.
    pub async fn infer(
        &self,
        m: &ModelInfo,
        sched: Schedule,
        inputs: Vec<Input>,
    ) -> Result<Answer, V2Error> {
        let model = m.name.as_str();
        let _permit = self.in_flight.clone().try_acquire_owned().map_err(|_| {
            V2Error::new(
                Kind::Exhausted,
                format!(
                    "reefd serves at most {} inference requests at once over HTTP and gRPC (kserve.max_in_flight); retry later",
                    self.opts.max_in_flight
                ),
            )
        })?;
        // A model that declares no inputs (a measured schedule without
        // code) takes none, and the device runs it on inputs of its own;
        // for one that does, the runtime checks every input.
        let (refs, data) = if inputs.is_empty() && m.inputs.is_empty() {
            (None, None)
        } else {
            let total: usize = inputs.iter().map(|i| i.bytes.len()).sum();
            let mut refs = Vec::with_capacity(inputs.len());
            let mut bytes = Vec::with_capacity(inputs.len());
            let mut offset = 0u64;
            for i in inputs {
                let dtype = dtype_of_datatype(&i.datatype).ok_or_else(|| {
                    V2Error::bad(format!(
                        "input {:?}: datatype {} is not one reefd serves",
                        i.name, i.datatype
                    ))
                })?;
                refs.push(crate::protocol::TensorRef {
                    name: i.name,
                    dtype: dtype.to_string(),
                    shape: i.shape.iter().map(|&d| d.max(0) as u64).collect(),
                    region: None,
                    offset,
                    bytes: i.bytes.len() as u64,
                });
                offset += i.bytes.len() as u64;
                bytes.push(i.bytes);
            }
            // One input (the common case) is the data section as it came:
            // no copy of its bytes here.
            let buf = if bytes.len() == 1 {
                bytes.pop().unwrap_or_default()
            } else {
                let mut buf = Vec::with_capacity(total);
                for b in &bytes {
                    buf.extend_from_slice(b);
                }
                buf
            };
            (
                Some(refs),
                Some(crate::protocol::FrameData {
                    frame: Arc::new(buf),
                    start: 0,
                }),
            )
        };
        let with_data = refs.is_some();
        let stream = self.stream_for(sched.level).await?;
        let begun = Instant::now();
        let called_ns = crate::protocol::monotonic_ns();
        let r = self
            .call_within(
                RequestBody::Infer {
                    stream,
                    model: model.to_string(),
                    wait: true,
                    qos_ms: sched.qos_ms,
                    inputs: refs,
                    outputs: Vec::new(),
                },
                data,
                sched.timeout,
            )
            .await;
        let answered_ns = crate::protocol::monotonic_ns();
        let mut stats = self.stats.lock().unwrap();
        let s = stats.entry(model.to_string()).or_default();
        s.last_inference_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        match r {
            Ok(Reply::InferDone(task)) => {
                let total = (task.latency_us * 1e3) as u64;
                let queue = task.control_path_us.map(|c| (c * 1e3) as u64).unwrap_or(0);
                add(&mut s.success, total);
                add(&mut s.queue, queue);
                add(&mut s.compute_infer, total.saturating_sub(queue));
                drop(stats);
                if with_data {
                    if let Some(why) = &task.outputs_missing {
                        return Err(V2Error::new(
                            Kind::Unsupported,
                            format!("the inference ran but its outputs cannot be returned: {why}"),
                        ));
                    }
                }
                let mut outputs = Vec::with_capacity(task.outputs.len());
                for o in &task.outputs {
                    let bytes = task.output_bytes(&o.name).ok_or_else(|| {
                        V2Error::new(
                            Kind::Internal,
                            format!("output {:?} has no bytes in the answer", o.name),
                        )
                    })?;
                    outputs.push(Output {
                        name: o.name.clone(),
                        datatype: datatype_of_dtype(&o.dtype).unwrap_or("BYTES").to_string(),
                        shape: o.shape.iter().map(|&d| d as i64).collect(),
                        bytes: bytes.to_vec(),
                    });
                }
                Ok(Answer {
                    task,
                    outputs,
                    called_ns,
                    answered_ns,
                })
            }
            Ok(other) => Err(unexpected(&other)),
            Err(f) => {
                add(&mut s.fail, begun.elapsed().as_nanos() as u64);
                Err(f.into())
            }
        }
    }

    /// The statistics extension's counters of `model` (all when `None`).
    pub fn statistics(&self, model: Option<&str>) -> Vec<(String, ModelStats)> {
        let stats = self.stats.lock().unwrap();
        stats
            .iter()
            .filter(|(n, _)| model.is_none_or(|m| m == n.as_str()))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }
}

fn add(d: &mut (u64, u64), ns: u64) {
    d.0 += 1;
    d.1 += ns;
}

fn names(models: &[ModelInfo]) -> String {
    if models.is_empty() {
        "none".into()
    } else {
        models
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn unexpected(r: &Reply) -> V2Error {
    V2Error::new(
        Kind::Internal,
        format!("unexpected answer from the runtime: {r:?}"),
    )
}

/// Starts the listeners of `opts` on the current tokio runtime. Returns
/// their tasks (aborted at shutdown, after the runtime has failed what was
/// still in flight).
pub async fn start(
    rt: Arc<Runtime>,
    opts: KserveOptions,
    peer: Peer,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    use anyhow::Context;
    let front = Front::new(rt, opts.clone(), peer, 0);
    let mut tasks = Vec::new();
    if let Some(addr) = opts.http {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for HTTP on {addr} (kserve.http)"))?;
        tracing::info!(%addr, "Open Inference Protocol over HTTP on http://{addr}/v2");
        tasks.push(tokio::spawn(http::serve(Arc::clone(&front), l)));
    }
    if let Some(addr) = opts.grpc {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for gRPC on {addr} (kserve.grpc)"))?;
        tracing::info!(%addr, "Open Inference Protocol over gRPC on {addr}");
        tasks.push(tokio::spawn(grpc::serve(Arc::clone(&front), l)));
    }
    Ok(tasks)
}

#[cfg(test)]
mod tests;
