//! An HTTP/2 server connection whose request streams run on the
//! connection's own task.
//!
//! hyper's HTTP/2 server hands every request stream's future (decode the
//! call, run the service, send the answer) to its executor; tonic's
//! `Server` gives it tokio's, so each gRPC call is a task of its own. A
//! call then crosses two task wake-ups inside the daemon besides the one
//! that delivers its answer: the connection task reads the request and
//! wakes the stream's task to decode and run it, and the stream's task,
//! once the answer is sent, wakes the connection task to write it.
//!
//! Here the executor keeps the futures, and the connection's task polls
//! them itself, right after the connection has read and right before it
//! writes: a request is decoded and submitted in the poll that read it,
//! and an answer is written in the poll that produced it. Calls on one
//! connection share its task, as they share its socket; connections are
//! still tasks of their own, so one slow client holds only itself.
//! Measured against tonic's `Server` (docs/kserve.md, "The calls on their
//! connection's task"): what the daemon adds to a gRPC call over the
//! native socket fell from about 39 to 21 us at the median, and it no
//! longer grows after a thousand connections have come and gone.
//!
//! The settings and the per-connection shutdown are tonic's `Server`'s
//! (tonic 0.14 `transport/server/mod.rs`), and so is the `grpc-timeout`
//! deadline a client sends (gRPC over HTTP/2, "Requests": `Timeout`).

use futures_util::stream::{FuturesUnordered, StreamExt};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection: it queues what hyper spawns (the
/// request streams' futures) for [`serve`] to poll on the connection's task.
#[derive(Clone, Default)]
pub struct InlineExec {
    spawned: Arc<Mutex<Vec<Task>>>,
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for InlineExec {
    fn execute(&self, fut: F) {
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::pin(fut));
    }
}

impl InlineExec {
    fn take(&self) -> Vec<Task> {
        std::mem::take(&mut *self.spawned.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The HTTP/2 settings of a connection (those the gRPC front sets).
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_FRAME_SIZE.
    pub max_frame_size: u32,
    /// After this long the connection is shut down gracefully (GOAWAY,
    /// the calls in flight finish); `None`: never.
    pub max_age: Option<Duration>,
}

/// Serves one connection until it closes, its request streams polled on
/// this task (see the module's documentation).
pub async fn serve<I, S, B>(io: I, svc: S, settings: Settings) -> Result<(), hyper::Error>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let exec = InlineExec::default();
    let mut builder = hyper::server::conn::http2::Builder::new(exec.clone());
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_frame_size(settings.max_frame_size);
    let mut conn = std::pin::pin!(builder.serve_connection(io, svc));
    let mut age = settings.max_age.map(|a| Box::pin(tokio::time::sleep(a)));
    let mut streams: FuturesUnordered<Task> = FuturesUnordered::new();
    std::future::poll_fn(|cx: &mut Context<'_>| {
        if let Some(sleep) = age.as_mut() {
            if sleep.as_mut().poll(cx).is_ready() {
                age = None;
                conn.as_mut().graceful_shutdown();
            }
        }
        loop {
            // The streams first: one whose answer came queues its frames,
            // which the connection then writes in this same poll.
            while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {}
            if let Poll::Ready(r) = conn.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            // What the connection read and spawned runs now, not at the
            // next wake-up.
            let new = exec.take();
            if new.is_empty() {
                return Poll::Pending;
            }
            streams.extend(new);
        }
    })
    .await
}

/// The `grpc-timeout` header's deadline (gRPC over HTTP/2: at most 8
/// digits and a unit of H, M, S, m, u or n); `None` when absent or not of
/// that form, as tonic's server reads it.
pub fn grpc_timeout(headers: &hyper::HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    if !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Eight calls in flight on one connection add no task: they run on
    /// the connection's (with tokio's executor, as tonic's `Server` had
    /// it, each would be a task of its own), and all are answered.
    #[tokio::test(flavor = "current_thread")]
    async fn calls_run_on_their_connections_task_and_are_all_answered() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (release, released) = tokio::sync::watch::channel(false);
        let entered = Arc::new(AtomicUsize::new(0));
        let inside = Arc::clone(&entered);
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let svc = hyper::service::service_fn(move |req: hyper::Request<_>| {
                let mut go = released.clone();
                inside.fetch_add(1, Ordering::SeqCst);
                async move {
                    let _ = go.wait_for(|v| *v).await;
                    let path = req.uri().path().to_string();
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(path))
                }
            });
            let settings = Settings {
                max_concurrent_streams: 128,
                max_frame_size: 16 * 1024,
                max_age: None,
            };
            serve(hyper_util::rt::TokioIo::new(s), svc, settings).await
        });
        // The client on a runtime of its own (hyper's client spawns a
        // task per request), so this runtime's tasks are the server's.
        let (done, answers) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let bodies = rt.block_on(async {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let (send, conn) = hyper::client::conn::http2::handshake(
                    hyper_util::rt::TokioExecutor::new(),
                    hyper_util::rt::TokioIo::new(tcp),
                )
                .await
                .unwrap();
                tokio::spawn(conn);
                let calls = (0..8).map(|i| {
                    let mut send = send.clone();
                    let req = hyper::Request::builder()
                        .uri(format!("http://{addr}/call/{i}"))
                        .body(String::new())
                        .unwrap();
                    async move {
                        use http_body_util::BodyExt;
                        let a = send.send_request(req).await.unwrap();
                        assert_eq!(a.status(), 200);
                        a.into_body().collect().await.unwrap().to_bytes()
                    }
                });
                futures_util::future::join_all(calls).await
            });
            let _ = done.send(bodies);
        });
        let all_in = async {
            while entered.load(Ordering::SeqCst) < 8 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), all_in)
            .await
            .expect("the eight calls reached the service");
        // The server's connection task, and no more.
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        release.send(true).unwrap();
        assert_eq!(alive, 1, "tasks alive with eight calls in flight");
        let bodies = tokio::time::timeout(Duration::from_secs(20), answers)
            .await
            .expect("the eight calls were answered")
            .expect("the client ran to its end");
        for (i, body) in bodies.into_iter().enumerate() {
            assert_eq!(&body[..], format!("/call/{i}").as_bytes());
        }
        server.await.unwrap().unwrap();
    }

    #[test]
    fn grpc_timeouts_are_read_as_the_protocol_writes_them() {
        let h = |v: &str| {
            let mut m = hyper::HeaderMap::new();
            m.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&m)
        };
        assert_eq!(h("2S"), Some(Duration::from_secs(2)));
        assert_eq!(h("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(h("5M"), Some(Duration::from_secs(300)));
        assert_eq!(h("250m"), Some(Duration::from_millis(250)));
        assert_eq!(h("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(h("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "S", "123456789S", "12x", "-1S", "+1S", "1.5S"] {
            assert_eq!(h(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&hyper::HeaderMap::new()), None);
    }
}
