//! Framing: encoding a message as a frame, the incremental decoder, and
//! the request parser (with the allocation-free fast path of `infer`).

use super::*;

/// Encodes one message as a frame (length prefix + JSON).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serialising these types cannot fail: no maps with non-string keys.
    let body = serde_json::to_vec(msg).unwrap_or_else(|e| {
        format!(r#"{{"type":"error","id":null,"code":"internal","message":"encode: {e}"}}"#)
            .into_bytes()
    });
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// What the decoder produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole frame payload.
    Frame(Vec<u8>),
    /// A frame announced `len` bytes, over the limit; its payload is being
    /// skipped and the stream resynchronises after it.
    TooLarge { len: usize },
}

/// Incremental frame decoder: push bytes as they arrive, pull frames.
#[derive(Debug)]
pub struct FrameDecoder {
    max: usize,
    buf: Vec<u8>,
    /// Bytes of an oversized payload still to discard.
    skip: usize,
}

impl FrameDecoder {
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            max: max_frame,
            buf: Vec::new(),
            skip: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Decoded> {
        if self.skip > 0 || self.buf.len() < HEADER_LEN {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max {
            let avail = self.buf.len() - HEADER_LEN;
            let drop_now = avail.min(len);
            self.buf.drain(..HEADER_LEN + drop_now);
            self.skip = len - drop_now;
            return Some(Decoded::TooLarge { len });
        }
        if self.buf.len() < HEADER_LEN + len {
            return None;
        }
        let payload = self.buf[HEADER_LEN..HEADER_LEN + len].to_vec();
        self.buf.drain(..HEADER_LEN + len);
        Some(Decoded::Frame(payload))
    }
}

/// The wire form of an `infer` request, read without buffering (see
/// [`parse_request`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastInfer<'a> {
    id: u64,
    op: &'a str,
    stream: u64,
    model: String,
    #[serde(default = "default_true")]
    wait: bool,
    #[serde(default)]
    qos_ms: Option<f64>,
}

/// A request that could not be parsed: the id when it could be recovered,
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRequest {
    pub id: Option<u64>,
    pub message: String,
}

/// Parses a request payload. On failure the error names the problem and,
/// when the payload was a JSON object with a numeric `id`, that id.
pub fn parse_request(payload: &[u8]) -> Result<Request, BadRequest> {
    // The RT control path starts here: an `infer` request is read into a
    // plain struct first. The general form (`id` flattened beside an
    // internally tagged body) makes serde buffer the object twice, which on
    // a cold cache costs microseconds. Anything the fast form does not take
    // exactly (another op, an unknown or duplicate field, a bad value) goes
    // through the general parser, so errors and semantics are the same.
    if let Ok(f) = serde_json::from_slice::<FastInfer>(payload) {
        if f.op == "infer" {
            return Ok(Request {
                id: f.id,
                body: RequestBody::Infer {
                    stream: f.stream,
                    model: f.model,
                    wait: f.wait,
                    qos_ms: f.qos_ms,
                },
            });
        }
    }
    match serde_json::from_slice::<Request>(payload) {
        Ok(r) => Ok(r),
        Err(e) => {
            let value: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
            let id = value
                .as_ref()
                .and_then(|v| v.get("id"))
                .and_then(|v| v.as_u64());
            let message = match &value {
                None => format!(
                    "the frame is not valid JSON ({e}); send a 4-byte big-endian length then a JSON object, see docs/protocol.md"
                ),
                Some(v) if !v.is_object() => {
                    "the request must be a JSON object with \"id\" and \"op\"".to_string()
                }
                Some(_) => format!("invalid request: {e} (see docs/protocol.md for the ops and their fields)"),
            };
            Err(BadRequest { id, message })
        }
    }
}
