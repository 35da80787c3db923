//! The connections of the load phase: benign clients and the four kinds of
//! hostile ones, each driven by a few threads, each loop bounded by a count
//! or by the run's stop flag and deadline.

use super::Shared;
use reefd::client::{Client, ClientError};
use reefd::protocol::{encode, Priority, Reply, Request, RequestBody, ServerMessage, HEADER_LEN};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long any reply may take before it counts as unanswered.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// What one group of connections saw.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Tally {
    /// Connections opened (accepted by connect(2)).
    pub connections: u64,
    /// connect(2) failures.
    pub connect_failed: u64,
    /// Requests or frames sent.
    pub sent: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Answers by kind: `ok`, or the daemon's error code.
    pub answers: BTreeMap<String, u64>,
    /// Requests with no answer within the reply timeout.
    pub unanswered: u64,
    /// Connections the daemon closed.
    pub closed_by_daemon: u64,
    /// Other failures (i/o errors, unreadable answers), with a count each.
    pub errors: BTreeMap<String, u64>,
}

impl Tally {
    pub fn answer(&mut self, what: &str) {
        *self.answers.entry(what.to_string()).or_default() += 1;
    }

    pub fn error(&mut self, what: impl Into<String>) {
        let mut w: String = what.into();
        w.truncate(160);
        *self.errors.entry(w).or_default() += 1;
    }

    /// Records the outcome of waiting for an answer.
    pub fn outcome(&mut self, r: &Result<ServerMessage, ClientError>) {
        match r {
            Ok(ServerMessage::Reply { .. }) | Ok(ServerMessage::Event { .. }) => self.answer("ok"),
            Ok(ServerMessage::Error { code, .. }) => self.answer(&code.to_string()),
            Err(ClientError::Timeout) => self.unanswered += 1,
            Err(ClientError::Closed) => self.closed_by_daemon += 1,
            Err(e) => self.error(e.to_string()),
        }
    }

    pub fn merge(&mut self, o: &Tally) {
        self.connections += o.connections;
        self.connect_failed += o.connect_failed;
        self.sent += o.sent;
        self.bytes += o.bytes;
        for (k, v) in &o.answers {
            *self.answers.entry(k.clone()).or_default() += v;
        }
        self.unanswered += o.unanswered;
        self.closed_by_daemon += o.closed_by_daemon;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }
}

/// A frame for `body` with request id `id`.
fn frame(id: u64, body: RequestBody) -> Vec<u8> {
    encode(&Request { id, body })
}

/// A raw frame: the length prefix and `payload`.
fn raw_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(payload);
    f
}

/// Connects with bounded reads and writes (the socket's send timeout, so a
/// daemon that stops reading cannot block a writer forever).
fn connect(socket: &Path, t: &mut Tally) -> Option<Client> {
    match Client::connect(socket) {
        Ok(c) => {
            let _ = c.socket().set_write_timeout(Some(REPLY_TIMEOUT));
            t.connections += 1;
            Some(c)
        }
        Err(e) => {
            t.connect_failed += 1;
            t.error(e.to_string());
            None
        }
    }
}

/// Waits up to `timeout` for the answer to `id` (or an answer without an
/// id), skipping events and other answers.
pub fn wait_for(c: &mut Client, id: u64, timeout: Duration) -> Result<ServerMessage, ClientError> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let m = c.read_message(Some(left))?;
        match &m {
            ServerMessage::Reply { id: r, .. } if *r == id => return Ok(m),
            ServerMessage::Error { id: r, .. } if *r == Some(id) || r.is_none() => return Ok(m),
            _ => {}
        }
    }
}

/// Sends `body` and waits for its answer.
pub fn call(c: &mut Client, body: RequestBody, timeout: Duration) -> Result<Reply, String> {
    let id = c.send(body).map_err(|e| e.to_string())?;
    match wait_for(c, id, timeout) {
        Ok(ServerMessage::Reply { result, .. }) => Ok(result),
        Ok(ServerMessage::Error { code, message, .. }) => {
            let mut m = message;
            m.truncate(200);
            Err(format!("{code}: {m}"))
        }
        Ok(ServerMessage::Event { .. }) => Err("unexpected event".into()),
        Err(ClientError::Timeout) => Err(format!("no answer within {REPLY_TIMEOUT:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until the run says go (or stops).
fn wait_go(sh: &Shared) {
    while !sh.go.load(Ordering::Acquire) && !sh.stopped() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sleeps up to `d`, waking early when the run stops.
fn nap(sh: &Shared, d: Duration) {
    let end = Instant::now() + d;
    while !sh.stopped() {
        let now = Instant::now();
        if now >= end {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
}

/// A small deterministic generator (xorshift) for staggering.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [lo, hi) milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next_u64() % (hi - lo).max(1))
    }
}

// ---------------------------------------------------------------- benign

struct Benign {
    c: Client,
    role: Role,
    stream: Option<u64>,
    be_left: usize,
    pending: Option<(u64, Instant)>,
    next: Instant,
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    /// hello, then nothing.
    Idle,
    /// hello, then `status` every 1–3 s.
    Status,
    /// hello, a BE stream, a few BE inferences, then `status`.
    Be,
}

/// Benign clients `ids` (indices among the benign ones): connect and say
/// hello, then idle, ask `status` now and then, or run a few BE
/// inferences, until the run stops.
pub fn benign(sh: Arc<Shared>, ids: Vec<usize>) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng::new(ids.first().copied().unwrap_or(0) as u64 + 1);
    let mut conns = Vec::with_capacity(ids.len());
    for &i in &ids {
        if sh.stopped() {
            break;
        }
        let role = if i % sh.cfg.be_every == 0 {
            Role::Be
        } else if i % 2 == 1 {
            Role::Idle
        } else {
            Role::Status
        };
        let Some(mut c) = connect(&sh.socket, &mut t) else {
            sh.opened.fetch_add(1, Ordering::AcqRel);
            continue;
        };
        sh.opened.fetch_add(1, Ordering::AcqRel);
        t.sent += 1;
        match call(&mut c, RequestBody::Hello, REPLY_TIMEOUT) {
            Ok(_) => t.answer("ok"),
            Err(e) => {
                t.error(format!("hello: {e}"));
                continue;
            }
        }
        let mut stream = None;
        if role == Role::Be {
            t.sent += 1;
            match call(
                &mut c,
                RequestBody::Register {
                    priority: Priority::Be,
                    label: Some("hostile-bench benign".into()),
                },
                REPLY_TIMEOUT,
            ) {
                Ok(Reply::Registered(s)) => {
                    t.answer("ok");
                    stream = Some(s.stream);
                }
                Ok(_) => t.error("register: unexpected reply"),
                Err(e) => t.error(format!("register: {e}")),
            }
        }
        conns.push(Benign {
            c,
            role,
            stream,
            be_left: if role == Role::Be {
                sh.cfg.be_infers
            } else {
                0
            },
            pending: None,
            next: Instant::now(),
        });
    }
    wait_go(&sh);
    for b in conns.iter_mut() {
        b.next = Instant::now() + rng.ms(0, 2000);
    }
    while !sh.stopped() {
        let now = Instant::now();
        for b in conns.iter_mut() {
            if let Some((id, since)) = b.pending {
                match b.c.read_message(Some(Duration::ZERO)) {
                    Err(ClientError::Timeout) => {
                        if since.elapsed() > 3 * REPLY_TIMEOUT {
                            t.unanswered += 1;
                            b.pending = None;
                        }
                    }
                    Ok(ServerMessage::Event { .. }) => {}
                    Ok(ServerMessage::Reply { id: r, .. }) if r != id => {}
                    r => {
                        t.outcome(&r);
                        b.pending = None;
                        if matches!(r, Err(ClientError::Closed)) {
                            b.role = Role::Idle;
                            b.next = now + Duration::from_secs(3600);
                        }
                    }
                }
                continue;
            }
            if b.role == Role::Idle || now < b.next {
                continue;
            }
            let body = match (b.stream, b.be_left) {
                (Some(stream), n) if n > 0 => {
                    b.be_left -= 1;
                    RequestBody::Infer {
                        stream,
                        model: sh.cfg.be_model.clone(),
                        wait: true,
                        qos_ms: None,
                        inputs: None,
                        outputs: Vec::new(),
                    }
                }
                _ => RequestBody::Status,
            };
            match b.c.send(body) {
                Ok(id) => {
                    t.sent += 1;
                    b.pending = Some((id, now));
                }
                Err(e) => {
                    t.error(format!("send: {e}"));
                    b.role = Role::Idle;
                }
            }
            b.next = now + rng.ms(1000, 3000);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    t
}

// ------------------------------------------------- hostile (a): oversized

/// A JSON request whose `name` (or `model`) fills it to `total` bytes.
fn sized_request(id: u64, op: &str, total: usize) -> Vec<u8> {
    let head = match op {
        "infer" => format!(r#"{{"id":{id},"op":"infer","stream":1,"wait":true,"model":""#),
        _ => format!(r#"{{"id":{id},"op":"load_model","name":""#),
    };
    let tail = r#""}"#;
    let fill = total.saturating_sub(head.len() + tail.len());
    let mut p = head.into_bytes();
    p.extend(std::iter::repeat_n(b'n', fill));
    p.extend_from_slice(tail.as_bytes());
    raw_frame(&p)
}

/// Hostile (a): model names near and over the frame limit: `load_model`
/// and `infer` frames just under `max_frame_bytes`, and a `load_model`
/// frame 4 KiB over it, every `period` on each connection.
pub fn oversized(sh: Arc<Shared>, n: usize, max_frame: usize) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng::new(0xA);
    let mut conns: Vec<Client> = Vec::new();
    for _ in 0..n {
        if let Some(c) = connect(&sh.socket, &mut t) {
            conns.push(c);
        }
        sh.opened.fetch_add(1, Ordering::AcqRel);
    }
    wait_go(&sh);
    let mut id = 1u64;
    let mut dead = vec![false; conns.len()];
    let gap = sh.cfg.oversized_period / conns.len().max(1) as u32;
    while !sh.stopped() {
        for (k, c) in conns.iter_mut().enumerate() {
            if sh.stopped() {
                break;
            }
            if dead[k] {
                continue;
            }
            let frames = [
                (sized_request(id, "load_model", max_frame - 64), id),
                (sized_request(id + 1, "infer", max_frame - 64), id + 1),
                (sized_request(id + 2, "load_model", max_frame + 4096), 0),
            ];
            id += 3;
            for (f, fid) in frames {
                if let Err(e) = c.send_raw(&f) {
                    t.error(format!("send: {e}"));
                    dead[k] = true;
                    break;
                }
                t.sent += 1;
                t.bytes += f.len() as u64;
                let r = wait_for(c, fid, REPLY_TIMEOUT);
                t.outcome(&r);
                if matches!(r, Err(ClientError::Closed)) {
                    dead[k] = true;
                    break;
                }
            }
            nap(&sh, gap + rng.ms(0, 20));
        }
        if dead.iter().all(|d| *d) {
            break;
        }
    }
    t
}

// ------------------------------------------------ hostile (b): slow senders

struct Slow {
    c: Client,
    frame: Vec<u8>,
    frame_id: u64,
    pos: usize,
    next: Instant,
    waiting: Option<(u64, Instant)>,
    dead: bool,
}

/// Hostile (b): slow senders: each sends a `hello` or `status` frame one
/// byte every `slow_byte` (with a pause of 25–50 times that inside a
/// quarter of the frames: 0.5–1 s by default),
/// waits for the answer, and starts again.
pub fn slow(sh: Arc<Shared>, n: usize) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng::new(0xB);
    let mut conns: Vec<Slow> = Vec::new();
    for _ in 0..n {
        if let Some(c) = connect(&sh.socket, &mut t) {
            conns.push(Slow {
                c,
                frame: Vec::new(),
                frame_id: 0,
                pos: 0,
                next: Instant::now(),
                waiting: None,
                dead: false,
            });
        }
        sh.opened.fetch_add(1, Ordering::AcqRel);
    }
    wait_go(&sh);
    let mut id = 1u64;
    let byte_ms = sh.cfg.slow_byte.as_millis() as u64;
    for s in conns.iter_mut() {
        s.next = Instant::now() + rng.ms(0, 10 * byte_ms + 1);
    }
    while !sh.stopped() {
        let now = Instant::now();
        for s in conns.iter_mut().filter(|s| !s.dead) {
            if let Some((wid, since)) = s.waiting {
                match s.c.read_message(Some(Duration::ZERO)) {
                    Err(ClientError::Timeout) if since.elapsed() < REPLY_TIMEOUT => continue,
                    Ok(ServerMessage::Reply { id: r, .. }) if r != wid => continue,
                    r => {
                        t.outcome(&r);
                        s.dead = matches!(r, Err(ClientError::Closed));
                        s.waiting = None;
                        s.next = now + rng.ms(10, 200);
                    }
                }
                continue;
            }
            if now < s.next {
                continue;
            }
            if s.pos == 0 {
                let body = if id % 2 == 0 {
                    RequestBody::Hello
                } else {
                    RequestBody::Status
                };
                s.frame = frame(id, body);
                s.frame_id = id;
                id += 1;
            }
            match s.c.send_raw(&s.frame[s.pos..s.pos + 1]) {
                Ok(()) => {
                    t.bytes += 1;
                    s.pos += 1;
                }
                Err(e) => {
                    t.error(format!("send: {e}"));
                    s.dead = true;
                    continue;
                }
            }
            s.next = now + sh.cfg.slow_byte;
            if s.pos == HEADER_LEN + 1 && rng.next_u64() % 4 == 0 {
                s.next += rng.ms(25 * byte_ms, 50 * byte_ms + 1);
            }
            if s.pos == s.frame.len() {
                t.sent += 1;
                s.pos = 0;
                s.waiting = Some((s.frame_id, now));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    t
}

// ------------------------------------------- hostile (c): killed mid-frame

/// Arguments of the hidden `hostile-child` subcommand.
#[derive(Debug, clap::Args)]
pub struct ChildArgs {
    #[arg(long)]
    pub socket: PathBuf,
    /// A model to submit one BE inference of (not waited for) before the
    /// half frame; empty: none.
    #[arg(long, default_value = "")]
    pub model: String,
    /// Exit by itself after this many seconds if nobody kills it.
    #[arg(long, default_value_t = 120)]
    pub max_life_s: u64,
}

/// The child: connects, says hello, registers a BE stream and leaves one
/// inference in flight, writes half of a frame, prints `ready`, and waits
/// to be SIGKILLed (exits by itself after `max_life_s`).
pub fn child_main(a: ChildArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut c = Client::connect(&a.socket)?;
    let _ = c.socket().set_write_timeout(Some(REPLY_TIMEOUT));
    call(&mut c, RequestBody::Hello, REPLY_TIMEOUT).map_err(anyhow::Error::msg)?;
    if !a.model.is_empty() {
        let s = match call(
            &mut c,
            RequestBody::Register {
                priority: Priority::Be,
                label: Some("hostile-bench child".into()),
            },
            REPLY_TIMEOUT,
        ) {
            Ok(Reply::Registered(s)) => s.stream,
            Ok(_) => anyhow::bail!("register: unexpected reply"),
            Err(e) => anyhow::bail!("register: {e}"),
        };
        call(
            &mut c,
            RequestBody::Infer {
                stream: s,
                model: a.model.clone(),
                wait: false,
                qos_ms: None,
                inputs: None,
                outputs: Vec::new(),
            },
            REPLY_TIMEOUT,
        )
        .map_err(anyhow::Error::msg)?;
    }
    let f = frame(1 << 40, RequestBody::ListStreams);
    c.send_raw(&f[..f.len() / 2])?;
    println!("ready");
    std::io::stdout().flush()?;
    std::thread::sleep(Duration::from_secs(a.max_life_s));
    Ok(())
}

/// Hostile (c): `n` slots, each a child process (this binary's hidden
/// `hostile-child`) that is SIGKILLed mid-frame `kill_after` (1.5–3 s by
/// default) after the load starts, and then replaced, until the run stops.
pub fn killer(sh: Arc<Shared>, n: usize, exe: PathBuf) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng::new(0xC);
    let spawn = |t: &mut Tally| -> Option<(Child, mpsc::Receiver<String>)> {
        let mut ch = match Command::new(&exe)
            .arg("hostile-child")
            .arg("--socket")
            .arg(&sh.socket)
            .args(["--model", &sh.cfg.be_model])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                t.error(format!("spawn: {e}"));
                return None;
            }
        };
        let out = ch.stdout.take().expect("piped");
        let err = ch.stderr.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(out).read_line(&mut line);
            if line.trim() != "ready" {
                let mut e = String::new();
                let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(err), &mut e);
                line = format!("child failed: {}", e.trim());
            }
            let _ = tx.send(line);
        });
        Some((ch, rx))
    };
    // Start every slot's first child and wait until each is connected with
    // half a frame written.
    let mut slots: Vec<Option<(Child, mpsc::Receiver<String>, Instant)>> = Vec::new();
    let ready = |t: &mut Tally, c: Option<(Child, mpsc::Receiver<String>)>| {
        let (mut ch, rx) = c?;
        match rx.recv_timeout(REPLY_TIMEOUT) {
            Ok(l) if l.trim() == "ready" => {
                t.connections += 1;
                t.sent += 1;
                Some((ch, rx, Instant::now()))
            }
            Ok(l) => {
                t.connect_failed += 1;
                t.error(l);
                let _ = ch.kill();
                let _ = ch.wait();
                None
            }
            Err(_) => {
                t.connect_failed += 1;
                t.error("child not ready within the reply timeout");
                let _ = ch.kill();
                let _ = ch.wait();
                None
            }
        }
    };
    let mut kill_at = Vec::new();
    for _ in 0..n {
        let c = if sh.stopped() { None } else { spawn(&mut t) };
        slots.push(ready(&mut t, c));
        sh.opened.fetch_add(1, Ordering::AcqRel);
        kill_at.push(Instant::now());
    }
    wait_go(&sh);
    for k in kill_at.iter_mut() {
        *k = Instant::now() + rng.ms(sh.cfg.kill_after.0, sh.cfg.kill_after.1);
    }
    let mut kills = 0u64;
    while !sh.stopped() {
        let now = Instant::now();
        for (slot, at) in slots.iter_mut().zip(kill_at.iter_mut()) {
            if now < *at || sh.stopped() {
                continue;
            }
            if let Some((mut ch, _, _)) = slot.take() {
                let _ = ch.kill(); // SIGKILL
                let _ = ch.wait();
                kills += 1;
            }
            let c = spawn(&mut t);
            *slot = ready(&mut t, c);
            *at = Instant::now() + rng.ms(sh.cfg.kill_after.0, sh.cfg.kill_after.1);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for (mut ch, _, _) in slots.into_iter().flatten() {
        let _ = ch.kill();
        let _ = ch.wait();
        kills += 1;
    }
    t.answers.insert("sigkilled".into(), kills);
    t
}

// ---------------------------------------------- hostile (d): garbage

/// The garbage of round `k`: (label, bytes, whether an answer is due).
fn garbage(k: u64, rng: &mut Rng) -> (&'static str, Vec<u8>) {
    match k % 8 {
        0 => {
            let junk: Vec<u8> = (0..256).map(|_| (rng.next_u64() & 0xff) as u8).collect();
            ("random bytes", raw_frame(&junk))
        }
        1 => ("not an object", raw_frame(b"[1,2,3]")),
        2 => (
            "unknown op",
            raw_frame(br#"{"id":7,"op":"format_disk","all":true}"#),
        ),
        3 => (
            "missing field",
            raw_frame(br#"{"id":8,"op":"infer","wait":true}"#),
        ),
        4 => ("empty frame", raw_frame(b"")),
        5 => {
            let mut p = vec![b'['; 100_000];
            p.extend(std::iter::repeat_n(b']', 100_000));
            ("nested 100000 deep", raw_frame(&p))
        }
        6 => ("truncated JSON", raw_frame(br#"{"id":9,"op":"hel"#)),
        _ => {
            // A length prefix of 2^31 (or 2^32 - 1) and some junk: the
            // daemon must answer frame_too_large without reading 2 GiB
            // into memory; the connection is then useless and is replaced.
            let len: u32 = if rng.next_u64() % 2 == 0 {
                1 << 31
            } else {
                u32::MAX
            };
            let mut f = len.to_be_bytes().to_vec();
            f.extend(std::iter::repeat_n(b'x', 64 * 1024));
            ("length 2^31", f)
        }
    }
}

/// Hostile (d): garbage frames, bad JSON, and a length prefix of 2^31,
/// one every `garbage_period` per connection; a connection that sent the
/// 2^31 prefix is closed and replaced by a new one.
pub fn garbage_senders(sh: Arc<Shared>, n: usize) -> Tally {
    let mut t = Tally::default();
    let mut rng = Rng::new(0xD);
    let mut conns: Vec<Option<Client>> = Vec::new();
    for _ in 0..n {
        conns.push(connect(&sh.socket, &mut t));
        sh.opened.fetch_add(1, Ordering::AcqRel);
    }
    wait_go(&sh);
    let gap = sh.cfg.garbage_period / conns.len().max(1) as u32;
    let mut round = 0u64;
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    while !sh.stopped() {
        for (k, slot) in conns.iter_mut().enumerate() {
            if sh.stopped() {
                break;
            }
            if slot.is_none() {
                *slot = connect(&sh.socket, &mut t);
            }
            let Some(c) = slot.as_mut() else {
                nap(&sh, gap);
                continue;
            };
            let (label, f) = garbage(round + k as u64, &mut rng);
            match c.send_raw(&f) {
                Ok(()) => {
                    t.sent += 1;
                    t.bytes += f.len() as u64;
                }
                Err(e) => {
                    t.error(format!("send {label}: {e}"));
                    *slot = None;
                    continue;
                }
            }
            let r = c.read_message(Some(REPLY_TIMEOUT));
            t.outcome(&r);
            let code = match &r {
                Ok(ServerMessage::Error { code, .. }) => code.to_string(),
                Ok(_) => "answered".into(),
                Err(ClientError::Timeout) => "no answer".into(),
                Err(ClientError::Closed) => "closed".into(),
                Err(_) => "error".into(),
            };
            *by_kind.entry(format!("{label} -> {code}")).or_default() += 1;
            if label == "length 2^31" || matches!(r, Err(ClientError::Closed)) {
                *slot = None;
            }
            nap(&sh, gap);
        }
        round += 1;
    }
    // Answers per kind of garbage, folded into the error map's neighbour.
    for (k, v) in by_kind {
        t.answers.insert(format!("[{k}]"), v);
    }
    t
}

// ------------------------------------ probe: a client that never reads

/// What the daemon did with a client that never reads its answers.
#[derive(Debug, Default, Clone, Serialize)]
pub struct NonReader {
    /// Frames sent (each a `load_model` just under the frame limit).
    pub frames: u64,
    pub bytes: u64,
    /// Whether the daemon stopped reading (a send timed out) before the
    /// count was reached: backpressure.
    pub backpressure: bool,
    pub rss_before_kib: u64,
    /// Half a second after the last frame, the connection still open.
    pub rss_open_kib: u64,
    /// A second after the connection closed.
    pub rss_closed_kib: u64,
}

/// Sends `frames` `load_model` frames just under the frame limit on one
/// connection and never reads an answer; reads the daemon's RSS before,
/// with the connection still open, and after it closed. Bounded by the
/// count and by a 2 s send timeout.
pub fn non_reader(socket: &Path, pid: u32, max_frame: usize, frames: u64) -> Option<NonReader> {
    let mut r = NonReader {
        rss_before_kib: super::daemon::sample(pid)?.rss_kib,
        ..Default::default()
    };
    let mut c = Client::connect(socket).ok()?;
    let _ = c.socket().set_write_timeout(Some(Duration::from_secs(2)));
    for i in 0..frames {
        let f = sized_request(i + 1, "load_model", max_frame - 64);
        if c.send_raw(&f).is_err() {
            r.backpressure = true;
            break;
        }
        r.frames += 1;
        r.bytes += f.len() as u64;
    }
    std::thread::sleep(Duration::from_millis(500));
    r.rss_open_kib = super::daemon::sample(pid)?.rss_kib;
    drop(c);
    std::thread::sleep(Duration::from_secs(1));
    r.rss_closed_kib = super::daemon::sample(pid)?.rss_kib;
    Some(r)
}
