//! Deadlines for a gRPC connection's bytes, read off its HTTP/2 framing.
//!
//! tonic (hyper's HTTP/2 server) has no read timeouts: a client that sends
//! its preface and then trickles a frame a byte at a time, or opens a
//! request and sends its body one small DATA frame every few seconds,
//! holds a connection slot (`kserve.max_connections`) for as long as it
//! likes. The HTTP/1 front bounds the same clients with hyper's header
//! timer and a body deadline; this gives the gRPC front the same two
//! bounds, from the frame layout of RFC 9113:
//!
//! - the 24-byte client preface (§3.4), then frames of a 9-byte header
//!   (24-bit payload length, type, flags, 31-bit stream id; §4.1);
//! - HEADERS (type 0x1) opens a request stream unless it carries
//!   END_STREAM (flag 0x1); DATA (0x0) or trailing HEADERS with END_STREAM
//!   end the client's half (§5.1); RST_STREAM (0x3) from either side ends
//!   the stream; the server's first HEADERS or DATA on it ends the rule
//!   too (the server has the request: tonic answers a unary call once its
//!   message arrived whole, and opens a streaming call's answer at once).
//!
//! Rules: the preface, and every frame once its first byte arrived, must
//! be whole within `frame_within` (`kserve.header_read_timeout_ms`); a
//! request stream must have its client half ended within `request_within`
//! (`kserve.body_read_timeout_ms`) of its first HEADERS frame. A
//! connection with more open request streams than `MAX_OPEN` is refused as
//! well (the gRPC front also caps concurrent streams per connection, but a
//! client could open streams and abandon them). Last, a connection is closed a grace period after
//! its maximum age, when tonic has sent it GOAWAY: tonic 0.14 given both an
//! age and a grace sleeps through both and closes without ever sending
//! GOAWAY (`connection_timeout_future` in its server module), so reefd
//! gives tonic the age alone and enforces the grace here.
//!
//! While a write of the server's is pending (the socket takes no more: the
//! client is not reading), h2 reads nothing, so a client whose frame or
//! request cannot go on because the server is not reading would be charged
//! for the server's wait: the frame and request clocks stop while a write
//! is pending and go on from where they stopped once it is done. A write
//! pending for `request_within` closes the connection (a client that does
//! not read its answers), whatever the maximum age, which can be off.
//!
//! The same watch, given TLS's record layout (RFC 8446 §5.1: type,
//! version, 16-bit length; no preface, no streams), holds TLS records to
//! the frame rule beneath rustls on the gRPC front over TLS: the HTTP/2
//! frames are only seen once their record is whole.
//!
//! The watch is pure bookkeeping over bytes and instants, so it is tested
//! without sockets; [`super::limit::Conn`] feeds it and owns the timer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Open request streams one connection may hold at once.
pub const MAX_OPEN: usize = 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const END_STREAM: u8 = 0x1;

/// One direction's frame reader: where the next frame header begins.
#[derive(Debug, Default)]
struct Framer {
    /// TLS records (a 5-byte header) rather than HTTP/2 frames (9 bytes).
    tls: bool,
    /// Bytes of the current frame header seen so far.
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// Frames read whole so far.
    done: u64,
}

/// A frame header that has been read whole: (type, flags, stream id).
type Frame = (u8, u8, u32);

impl Framer {
    /// Reads `bytes`, calling `on` with each frame header as it completes.
    fn feed(&mut self, mut bytes: &[u8], mut on: impl FnMut(Frame)) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
                if self.payload_left == 0 {
                    self.done += 1;
                }
                continue;
            }
            let size = if self.tls { 5 } else { 9 };
            let n = (size - self.head_len).min(bytes.len());
            self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
            self.head_len += n;
            bytes = &bytes[n..];
            if self.head_len == size {
                let h = self.head;
                self.head_len = 0;
                if self.tls {
                    self.payload_left = (h[3] as usize) << 8 | h[4] as usize;
                } else {
                    self.payload_left =
                        (h[0] as usize) << 16 | (h[1] as usize) << 8 | h[2] as usize;
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    on((h[3], h[4], stream));
                }
                if self.payload_left == 0 {
                    self.done += 1;
                }
            }
        }
    }

    /// Whether a frame has begun and is not yet whole.
    fn mid_frame(&self) -> bool {
        self.head_len > 0 || self.payload_left > 0
    }
}

/// Why a connection broke a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    Slow(&'static str),
    TooManyStreams,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Slow(what) => write!(f, "{what}"),
            Broken::TooManyStreams => write!(
                f,
                "the client holds more than {MAX_OPEN} request streams open"
            ),
        }
    }
}

/// The watch over one gRPC connection.
#[derive(Debug)]
pub struct H2Watch {
    frame_within: Duration,
    request_within: Duration,
    /// Preface bytes still expected.
    preface_left: usize,
    inbound: Framer,
    outbound: Framer,
    /// When the preface or the partial inbound frame began.
    partial_since: Option<Instant>,
    /// Request streams whose client half is open, and when each opened.
    open: HashMap<u32, Instant>,
    broken: Option<Broken>,
    /// When the connection is closed whatever it does: its maximum age
    /// (at which tonic sends GOAWAY) plus the grace after it.
    close_at: Option<Instant>,
    /// Since when a write of the server's has been pending: the client's
    /// clocks stand still meanwhile.
    write_pending_since: Option<Instant>,
    /// Watching TLS records rather than HTTP/2.
    tls: bool,
    /// Watching writes only (the HTTP/1 front, whose reads hyper's header
    /// timer and the body deadline bound): the bytes read are not parsed.
    writes_only: bool,
}

impl H2Watch {
    /// A watch for a connection accepted at `now`.
    pub fn new(frame_within: Duration, request_within: Duration, now: Instant) -> Self {
        H2Watch {
            frame_within,
            request_within,
            preface_left: PREFACE.len(),
            inbound: Framer::default(),
            outbound: Framer::default(),
            partial_since: Some(now),
            open: HashMap::new(),
            broken: None,
            close_at: None,
            write_pending_since: None,
            tls: false,
            writes_only: false,
        }
    }

    /// A watch over the writes alone of a connection: a write pending
    /// longer than `write_within` (a client that sends requests and does
    /// not read the answers) breaks it; what the client sends is not
    /// looked at. The HTTP/1 front's reads have hyper's header timer and
    /// the body deadline; without this, a client pipelining requests and
    /// never reading holds its connection slot for ever, because hyper
    /// stops reading while its answer waits for the socket.
    pub fn writes_only(write_within: Duration, now: Instant) -> Self {
        let mut w = H2Watch::new(write_within, write_within, now);
        w.preface_left = 0;
        w.partial_since = None;
        w.writes_only = true;
        w
    }

    /// A watch over the TLS records of a connection accepted at `now`: each
    /// whole within `frame_within` of its first byte (the ClientHello's
    /// too), and a write pending no longer than `write_within`.
    pub fn tls_records(frame_within: Duration, write_within: Duration, now: Instant) -> Self {
        let mut w = H2Watch::new(frame_within, write_within, now);
        w.preface_left = 0;
        w.tls = true;
        w.inbound.tls = true;
        w.outbound.tls = true;
        w
    }

    /// A write of the server's is pending at `now` (the socket takes no
    /// more): the client's clocks stop.
    pub fn write_pending(&mut self, now: Instant) {
        self.write_pending_since.get_or_insert(now);
    }

    /// No write of the server's is pending at `now`: the client's clocks go
    /// on from where they stopped. A time that began during the wait
    /// counts from now.
    pub fn write_done(&mut self, now: Instant) {
        let Some(since) = self.write_pending_since.take() else {
            return;
        };
        let resume = |t: &mut Instant| {
            *t += now.saturating_duration_since((*t).max(since));
        };
        if let Some(t) = &mut self.partial_since {
            resume(t);
        }
        for t in self.open.values_mut() {
            resume(t);
        }
    }

    /// The rule broken by `now` of those that hold while the server
    /// writes: the close time, and a write pending too long.
    pub fn broken_writing(&self, now: Instant) -> Option<Broken> {
        if self.close_at.is_some_and(|t| now >= t) {
            return Some(Broken::Slow(
                "the connection was still open kserve.grpc_max_connection_age_grace_ms after \
                 it was asked to go away",
            ));
        }
        if self
            .write_pending_since
            .is_some_and(|t| now >= t + self.request_within)
        {
            return Some(Broken::Slow(
                "the client did not read the server's bytes within kserve.body_read_timeout_ms",
            ));
        }
        None
    }

    /// Closes the connection at `at` whatever it does (see
    /// [`H2Watch::close_at`]).
    pub fn close_at(mut self, at: Instant) -> Self {
        self.close_at = Some(at);
        self
    }

    /// The client sent `bytes` at `now`.
    pub fn read(&mut self, mut bytes: &[u8], now: Instant) {
        if bytes.is_empty() || self.writes_only {
            return;
        }
        if self.preface_left > 0 {
            let n = self.preface_left.min(bytes.len());
            self.preface_left -= n;
            bytes = &bytes[n..];
            if self.preface_left > 0 {
                return;
            }
            self.partial_since = None;
        }
        if bytes.is_empty() {
            return;
        }
        // Bytes read while a write is pending count from the wait's end.
        let now = self.write_pending_since.map_or(now, |t| t.min(now));
        let (was_mid, done_before) = (self.inbound.mid_frame(), self.inbound.done);
        let open = &mut self.open;
        self.inbound.feed(bytes, |(ty, flags, id)| match ty {
            HEADERS | DATA if flags & END_STREAM != 0 => {
                open.remove(&id);
            }
            HEADERS if id != 0 => {
                open.entry(id).or_insert(now);
            }
            RST_STREAM => {
                open.remove(&id);
            }
            _ => {}
        });
        if self.open.len() > MAX_OPEN {
            self.broken = Some(Broken::TooManyStreams);
        }
        if !self.inbound.mid_frame() {
            self.partial_since = None;
        } else if !was_mid || self.inbound.done != done_before {
            // The partial frame began in this read; otherwise its time
            // still counts from the earlier read that began it.
            self.partial_since = Some(now);
        }
    }

    /// The server wrote `bytes` (those the socket took). Its HEADERS on a
    /// stream end the request rule for it: the server has begun to answer,
    /// which tonic does for a unary call only once the request arrived
    /// whole, and for a streaming call (`ModelStreamInfer`, whose client
    /// half stays open for the session) at once. DATA or a reset from it
    /// end the rule too.
    pub fn wrote(&mut self, bytes: &[u8]) {
        if self.writes_only {
            return;
        }
        let open = &mut self.open;
        self.outbound.feed(bytes, |(ty, _, id)| {
            if matches!(ty, HEADERS | DATA | RST_STREAM) {
                open.remove(&id);
            }
        });
    }

    /// When the connection breaks a rule if nothing changes.
    pub fn deadline(&self) -> Option<Instant> {
        if let Some(w) = self.write_pending_since {
            let write = w + self.request_within;
            return Some(self.close_at.map_or(write, |c| c.min(write)));
        }
        let frame = self.partial_since.map(|t| t + self.frame_within);
        let request = self.open.values().min().map(|&t| t + self.request_within);
        [frame, request, self.close_at].into_iter().flatten().min()
    }

    /// The rule the connection broke by `now`, if any.
    pub fn broken(&self, now: Instant) -> Option<Broken> {
        if let Some(b) = &self.broken {
            return Some(b.clone());
        }
        if let Some(b) = self.broken_writing(now) {
            return Some(b);
        }
        if self.write_pending_since.is_some() {
            // The client's clocks stand still.
            return None;
        }
        if let Some(t) = self.partial_since {
            if now >= t + self.frame_within {
                return Some(Broken::Slow(if self.preface_left > 0 {
                    "the client did not send its HTTP/2 preface within kserve.header_read_timeout_ms"
                } else if self.tls {
                    "the client did not complete a TLS record within kserve.header_read_timeout_ms"
                } else {
                    "the client did not complete a frame within kserve.header_read_timeout_ms"
                }));
            }
        }
        if self.open.values().any(|&t| now >= t + self.request_within) {
            return Some(Broken::Slow(
                "the client did not complete a request within kserve.body_read_timeout_ms",
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let n = payload.len();
        let mut v = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, ty, flags];
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    const S: Duration = Duration::from_secs(1);

    fn watch(t0: Instant) -> H2Watch {
        H2Watch::new(S, 3 * S, t0)
    }

    #[test]
    fn the_preface_must_arrive_within_the_frame_time() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        assert_eq!(w.deadline(), Some(t0 + S));
        w.read(&PREFACE[..10], t0 + S / 2);
        assert!(w.broken(t0 + S / 2).is_none());
        let b = w.broken(t0 + S).expect("a preface begun but not whole");
        assert!(b.to_string().contains("preface"), "{b}");
        let mut w = watch(t0);
        w.read(PREFACE, t0 + S / 2);
        assert_eq!(w.deadline(), None, "an idle connection has no deadline");
        assert!(w.broken(t0 + 100 * S).is_none());
    }

    #[test]
    fn a_writes_only_watch_ignores_reads_and_bounds_a_pending_write() {
        let t0 = Instant::now();
        let mut w = H2Watch::writes_only(S, t0);
        // HTTP/1 bytes, trickled or not, are not frames: no rule for them.
        w.read(b"GET /v2 HTTP/1.1\r\nHost: x\r\n", t0);
        assert_eq!(w.deadline(), None);
        assert!(w.broken(t0 + 100 * S).is_none());
        // A write that waits for the socket longer than the bound.
        w.write_pending(t0 + 100 * S);
        assert_eq!(w.deadline(), Some(t0 + 101 * S));
        assert!(w.broken_writing(t0 + 100 * S + S / 2).is_none());
        let b = w
            .broken(t0 + 101 * S)
            .expect("a write pending for the bound");
        assert!(b.to_string().contains("did not read"), "{b}");
        // One that the socket takes in time resets it.
        let mut w = H2Watch::writes_only(S, t0);
        w.write_pending(t0);
        w.write_done(t0 + S / 2);
        assert_eq!(w.deadline(), None);
        assert!(w.broken(t0 + 10 * S).is_none());
    }

    #[test]
    fn a_trickled_frame_is_cut_off_and_whole_frames_are_not() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        w.read(PREFACE, t0);
        let settings = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        // Byte by byte, each byte within the frame time of the last, but
        // the frame as a whole later than it.
        for (i, b) in settings.iter().enumerate() {
            let t = t0 + S / 4 * i as u32;
            if i > 0 && t >= t0 + S {
                assert!(w.broken(t).is_some(), "byte {i} at {:?}", t - t0);
                return;
            }
            w.read(std::slice::from_ref(b), t);
        }
        panic!("the frame took {:?} and was not cut off", S / 4 * 15);
    }

    #[test]
    fn a_request_must_end_within_the_request_time() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 0x4, 1, b"hdr"));
        w.read(&bytes, t0);
        assert_eq!(w.deadline(), Some(t0 + 3 * S));
        // Whole 1-byte DATA frames, each well within the frame time.
        for i in 1..12u32 {
            let t = t0 + S / 4 * i;
            w.read(&frame(DATA, 0, 1, b"x"), t);
            assert!(w.broken(t).is_none(), "at {:?}", t - t0);
        }
        assert!(w
            .broken(t0 + 3 * S)
            .unwrap()
            .to_string()
            .contains("body_read_timeout"));
        // Ended by END_STREAM, by a reset from either side, or by the
        // server's answer.
        for end in 0..4 {
            let mut w = watch(t0);
            w.read(&bytes, t0);
            match end {
                0 => w.read(&frame(DATA, END_STREAM, 1, b"x"), t0 + S),
                1 => w.read(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]), t0 + S),
                2 => w.wrote(&frame(RST_STREAM, 0, 1, &[0, 0, 0, 0])),
                _ => w.wrote(&frame(HEADERS, 0x4, 1, b"h")),
            }
            assert_eq!(w.deadline(), None, "end {end}");
            assert!(w.broken(t0 + 10 * S).is_none(), "end {end}");
        }
    }

    /// A streaming call (ModelStreamInfer): the client's half stays open
    /// for the session, sending a request every so often, and the server
    /// answers each; the request rule must not cut it.
    #[test]
    fn a_streaming_call_answered_by_the_server_is_not_cut() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 0x4, 1, b"hdr"));
        w.read(&bytes, t0);
        w.wrote(&frame(HEADERS, 0x4, 1, b"200"));
        for i in 1..40u32 {
            let t = t0 + S / 2 * i;
            w.read(&frame(DATA, 0, 1, &[0; 100]), t);
            w.wrote(&frame(DATA, 0, 1, &[0; 100]));
            assert!(w.broken(t).is_none(), "cut at {:?}", t - t0);
        }
    }

    #[test]
    fn frames_split_across_reads_and_writes_are_followed() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 0x4, 1, &[7; 40]));
        bytes.extend(frame(HEADERS, 0x4, 3, &[7; 40]));
        bytes.extend(frame(DATA, END_STREAM, 1, &[9; 300]));
        for chunk in bytes.chunks(7) {
            w.read(chunk, t0);
        }
        assert_eq!(w.open.keys().copied().collect::<Vec<_>>(), vec![3]);
        // The server's answer, split anywhere: a SETTINGS frame, then
        // stream 3's HEADERS.
        let mut out = frame(0x4, 0, 0, &[0; 12]);
        out.extend(frame(HEADERS, 0x4, 3, &[1; 100]));
        let split = 9 + 12 + 5; // inside stream 3's frame header
        for chunk in out[..split].chunks(5) {
            w.wrote(chunk);
        }
        assert!(w.open.contains_key(&3), "not answered yet");
        for chunk in out[split..].chunks(5) {
            w.wrote(chunk);
        }
        assert!(w.open.is_empty());
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn the_connection_is_closed_at_its_close_time() {
        let t0 = Instant::now();
        let mut w = watch(t0).close_at(t0 + 5 * S);
        w.read(PREFACE, t0);
        assert_eq!(w.deadline(), Some(t0 + 5 * S));
        assert!(w.broken(t0 + 4 * S).is_none());
        assert!(w.broken(t0 + 5 * S).is_some());
    }

    /// The server's write is pending (the client is not reading) for 10 s:
    /// h2 reads nothing meanwhile, so the client's partial frame and open
    /// request cannot go on, and that time is not charged to it. A write
    /// pending longer than the request time closes the connection.
    #[test]
    fn the_clocks_stop_while_a_write_is_pending() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, 0x4, 1, b"hdr"));
        // Half of a DATA frame: a frame begun at t0 + S/2.
        let data = frame(DATA, END_STREAM, 1, &[0; 20]);
        w.read(&bytes, t0);
        w.read(&data[..10], t0 + S / 2);
        assert_eq!(w.deadline(), Some(t0 + S / 2 + S));
        // The server's write blocks at t0 + S/2 + S/4 for 2.5 s (under the
        // request time, 3 s): only the write's own deadline is armed.
        let blocked = t0 + S / 2 + S / 4;
        w.write_pending(blocked);
        w.write_pending(blocked + S); // still the same wait
        assert_eq!(w.deadline(), Some(blocked + 3 * S));
        assert!(w.broken(blocked + 2 * S).is_none(), "the frame clock ran");
        let done = blocked + S * 5 / 2;
        w.write_done(done);
        // The frame had S/4 of its second used: S*3/4 left, from `done`.
        assert_eq!(w.deadline(), Some(done + S * 3 / 4));
        assert!(w.broken(done + S / 2).is_none());
        assert!(w
            .broken(done + S * 3 / 4)
            .unwrap()
            .to_string()
            .contains("frame"));
        // The request clock stopped as well: 3 s from t0, less the wait.
        let mut w = watch(t0);
        w.read(&bytes, t0);
        w.write_pending(t0 + S);
        w.write_done(t0 + 3 * S);
        assert_eq!(w.deadline(), Some(t0 + 5 * S));
        assert!(w.broken(t0 + 4 * S).is_none());
        assert!(w.broken(t0 + 5 * S).is_some());
        // A stream opened (bytes read) during the wait counts from its end.
        let mut w = watch(t0);
        w.read(PREFACE, t0);
        w.write_pending(t0 + S);
        w.read(&frame(HEADERS, 0x4, 1, b"hdr"), t0 + 2 * S);
        w.write_done(t0 + 4 * S);
        assert_eq!(w.deadline(), Some(t0 + 7 * S));
        // A write pending past the request time: a client that does not
        // read its answers.
        let mut w = watch(t0);
        w.read(PREFACE, t0);
        w.write_pending(t0 + S);
        assert_eq!(w.deadline(), Some(t0 + 4 * S));
        assert!(w.broken_writing(t0 + 3 * S).is_none());
        let b = w.broken_writing(t0 + 4 * S).expect("a write pending 3 s");
        assert!(b.to_string().contains("did not read"), "{b}");
        // ... and the close time still holds during a wait.
        let mut w = watch(t0).close_at(t0 + 2 * S);
        w.read(PREFACE, t0);
        w.write_pending(t0 + S);
        assert_eq!(w.deadline(), Some(t0 + 2 * S));
        assert!(w.broken_writing(t0 + 2 * S).is_some());
    }

    #[test]
    fn tls_records_must_be_whole_within_the_frame_time() {
        let t0 = Instant::now();
        let mut w = H2Watch::tls_records(S, 3 * S, t0);
        // A ClientHello-sized record, whole in two reads.
        let mut rec = vec![0x16, 3, 1, 0, 200];
        rec.extend([0u8; 200]);
        w.read(&rec[..3], t0);
        w.read(&rec[3..], t0 + S / 2);
        assert_eq!(w.deadline(), None);
        // Application data trickled: cut at the frame time.
        let mut rec = vec![0x17, 3, 3, 0, 50];
        rec.extend([0u8; 50]);
        w.read(&rec[..20], t0 + 2 * S);
        assert_eq!(w.deadline(), Some(t0 + 3 * S));
        w.read(&rec[20..40], t0 + S * 5 / 2);
        let b = w.broken(t0 + 3 * S).expect("a record trickled past 1 s");
        assert!(b.to_string().contains("TLS record"), "{b}");
    }

    #[test]
    fn too_many_open_streams_break_the_connection() {
        let t0 = Instant::now();
        let mut w = watch(t0);
        w.read(PREFACE, t0);
        for id in 0..=MAX_OPEN as u32 {
            w.read(&frame(HEADERS, 0x4, 2 * id + 1, b"h"), t0);
        }
        assert_eq!(w.broken(t0), Some(Broken::TooManyStreams));
    }
}
