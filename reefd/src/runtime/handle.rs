//! The request dispatcher: one native request (REEF §3.1: the RPC of a
//! client to the daemon, which puts its task in a task queue) from a
//! connection's frame to what the runtime does with it, under the state
//! lock, and the limits a request's model names and paths must keep.

use super::*;

impl Runtime {
    /// Handles request `id` of `conn`; `arrival` is when its last byte was
    /// read. A blocking `infer`'s reply goes straight to the connection's
    /// [`Outbox`](super::Outbox) when the task ends ([`Handled::Sent`]).
    pub fn handle(&self, conn: &Conn, id: u64, body: RequestBody, arrival: Instant) -> Handled {
        self.handle_data(conn, id, body, None, arrival)
    }

    /// As [`Runtime::handle`], for a request whose frame had a data
    /// section (an `infer` with inline tensors).
    pub fn handle_data(
        &self,
        conn: &Conn,
        id: u64,
        body: RequestBody,
        frame: Option<crate::protocol::FrameData>,
        arrival: Instant,
    ) -> Handled {
        self.handle_within(conn, id, body, frame, arrival, None)
    }

    /// As [`Runtime::handle_data`]; an `infer` that has not reached the
    /// device by `start_by` is withdrawn and fails with `timeout` (Triton's
    /// `timeout` parameter, docs/kserve.md). A request the device's
    /// scheduler already holds runs to its end.
    pub fn handle_within(
        &self,
        conn: &Conn,
        id: u64,
        body: RequestBody,
        frame: Option<crate::protocol::FrameData>,
        arrival: Instant,
        start_by: Option<Instant>,
    ) -> Handled {
        if let Some(f) = oversized_name(&body) {
            self.lock().metrics.requests += 1;
            return Handled::Error(f);
        }
        if let RequestBody::LoadModel {
            name,
            path,
            idempotence,
            device_index,
        } = body
        {
            return self.load_model(conn, name, path, idempotence, device_index);
        }
        let mut st = self.lock();
        st.metrics.requests += 1;
        let r = self.handle_locked(&mut st, conn, id, body, frame, arrival, start_by);
        // Device events already due are caught up here, by whichever
        // request holds the lock, so their completions are delivered now
        // rather than when the poll loop next gets the thread: with many
        // busy connections on the socket thread that turn came late (RT
        // p99 1.2-1.3x quiet under reef-bench hostile, all of it after
        // completion). Catching up is exact at any instant.
        if st
            .engine
            .next_event_time()
            .is_some_and(|t| t <= self.now_ns())
        {
            self.catch_up(&mut st);
        }
        self.wake_pacer_if_needed(&st);
        self.unlock(st);
        r
    }

    // The request and where it came from: each argument is one of its parts.
    #[allow(clippy::too_many_arguments)]
    fn handle_locked(
        &self,
        st: &mut State,
        conn: &Conn,
        id: u64,
        body: RequestBody,
        frame: Option<crate::protocol::FrameData>,
        arrival: Instant,
        start_by: Option<Instant>,
    ) -> Handled {
        use Handled::{Error as Err_, Reply as Ok_};
        let peer = conn.peer;
        match body {
            RequestBody::Infer {
                stream,
                model,
                wait,
                qos_ms,
                inputs,
                outputs,
            } => {
                if let Some(q) = qos_ms.filter(|q| !(q.is_finite() && *q > 0.0)) {
                    return Err_(Failure::new(
                        ErrorCode::BadRequest,
                        format!("qos_ms must be a positive number of milliseconds, got {q}"),
                    ));
                }
                let qos_ns = qos_ms.map(|q| (q * 1e6).round() as u64);
                let before = st.next_task;
                let tensors = inputs.map(|i| (i, outputs, frame));
                let h = self.infer(
                    st,
                    conn,
                    stream,
                    &model,
                    wait.then_some(id),
                    qos_ns,
                    tensors,
                    arrival,
                );
                if let Some(by) = start_by.filter(|_| st.next_task > before) {
                    // The task just submitted, if it waits for the device.
                    let task = before;
                    if st.tasks.get(&task).is_some_and(|t| t.first_queued.is_none()) {
                        st.start_deadlines.insert((by, task));
                    }
                }
                h
            }
            RequestBody::Hello => Ok_(Reply::Hello(crate::protocol::HelloInfo {
                daemon_version: env!("CARGO_PKG_VERSION").into(),
                protocol: crate::protocol::PROTOCOL_VERSION,
                peer_uid: peer.uid,
                peer_gid: peer.gid,
                peer_pid: peer.pid,
                max_frame_bytes: self.settings.max_frame_bytes,
            })),
            RequestBody::Status => Ok_(Reply::Status(Box::new(self.status_locked(st)))),
            RequestBody::LoadModel { .. } => Err_(Failure::new(
                ErrorCode::Internal,
                "load_model is handled outside the lock",
            )),
            RequestBody::UnloadModel { name } => self.unload_model(st, peer, name),
            RequestBody::ListModels => Ok_(Reply::Models {
                models: st.models.values().map(|m| m.info.clone()).collect(),
            }),
            RequestBody::Register { priority, label } => self.register(st, conn, priority, label),
            RequestBody::Unregister { stream } => self.unregister(st, peer, stream),
            RequestBody::ListStreams => Ok_(Reply::Streams {
                streams: st.streams.keys().map(|id| stream_info(st, *id)).collect(),
            }),
            RequestBody::ListTasks => self.list_tasks(st),
            RequestBody::Stats => Ok_(Reply::Stats(Box::new(self.stats_locked(st)))),
            RequestBody::Preempt { target } => self.preempt(st, peer, target, false),
            RequestBody::Resume { target } => self.preempt(st, peer, target, true),
            RequestBody::TaskBegin {
                memory,
                threads_per_block,
                blocks,
            } => self.task_begin(
                st,
                conn,
                reef_sched::place::TaskNeeds {
                    memory,
                    threads_per_block,
                    blocks,
                },
            ),
            RequestBody::TaskPoll { task } | RequestBody::TaskEnd { task }
                if st.declared.get(&task) != Some(&conn.id) =>
            {
                Err_(Failure::new(
                    ErrorCode::NotFound,
                    format!("task {task} was not begun on this connection (or has ended): call task_begin first"),
                ))
            }
            RequestBody::TaskPoll { task } => Ok_(Reply::TaskPlaced {
                task,
                device: st.engine.task_device(task),
            }),
            RequestBody::TaskEnd { task } => match st.engine.task_end(task) {
                Ok(()) => {
                    st.declared.remove(&task);
                    Ok_(Reply::TaskEnded { task })
                }
                Err(e) => Err_(engine_failure(e)),
            },
            RequestBody::SetPolicy { policy } => self.set_policy(st, peer, policy),
            RequestBody::RegisterRegion { .. } => Err_(Failure::new(
                ErrorCode::Internal,
                "register_region is handled with its descriptor",
            )),
            RequestBody::UnregisterRegion { region } => self.unregister_region(st, conn, region),
        }
    }
}

/// Longest model name and path a request may carry (a name is a file or
/// directory name: NAME_MAX; a path: PATH_MAX).
const MAX_NAME_BYTES: usize = 255;
const MAX_PATH_BYTES: usize = 4096;

/// A request whose model name or path is longer than any file's is refused
/// without echoing it (a 900 KB name was echoed twice in a reply larger
/// than `max_frame_bytes`).
fn oversized_name(body: &RequestBody) -> Option<Failure> {
    let (names, paths): (Vec<&str>, Vec<&Path>) = match body {
        RequestBody::Infer { model, .. } => (vec![model], vec![]),
        RequestBody::UnloadModel { name } => (vec![name], vec![]),
        RequestBody::LoadModel {
            name,
            path,
            idempotence,
            ..
        } => (
            vec![],
            [
                Some(Path::new(name.as_str())),
                path.as_deref(),
                idempotence.as_deref(),
            ]
            .into_iter()
            .flatten()
            .collect(),
        ),
        _ => return None,
    };
    if let Some(n) = names.iter().find(|n| n.len() > MAX_NAME_BYTES) {
        return Some(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "a model name of {} bytes: names are at most {MAX_NAME_BYTES} bytes",
                n.len()
            ),
        ));
    }
    if let Some(p) = paths.iter().find(|p| p.as_os_str().len() > MAX_PATH_BYTES) {
        return Some(Failure::new(
            ErrorCode::BadRequest,
            format!(
                "a model path of {} bytes: paths are at most {MAX_PATH_BYTES} bytes",
                p.as_os_str().len()
            ),
        ));
    }
    None
}
