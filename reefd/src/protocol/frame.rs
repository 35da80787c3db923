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

/// The first payload byte of a *tensor frame* (docs/protocol.md,
/// "Tensors"): a JSON text never starts with NUL, so a frame whose payload
/// starts with it is `0x00`, a 4-byte big-endian length `H`, `H` bytes of
/// JSON, then the data section (the raw bytes of inline tensors) up to the
/// frame's end.
pub const TENSOR_FRAME: u8 = 0;

/// Bytes before a tensor frame's JSON: the marker and the JSON length.
pub const TENSOR_HEAD: usize = 5;

/// The head of a tensor frame whose data section is `data_len` bytes:
/// length prefix, marker, JSON length and JSON. The data section follows
/// it on the wire, written from where it is (not copied into the head).
pub fn encode_tensor_head<T: Serialize>(msg: &T, data_len: usize) -> Vec<u8> {
    let body = serde_json::to_vec(msg).unwrap_or_else(|e| {
        format!(r#"{{"type":"error","id":null,"code":"internal","message":"encode: {e}"}}"#)
            .into_bytes()
    });
    let total = TENSOR_HEAD + body.len() + data_len;
    let mut out = Vec::with_capacity(HEADER_LEN + TENSOR_HEAD + body.len());
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.push(TENSOR_FRAME);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// A tensor frame's payload split into its JSON and the offset of its data
/// section; `None` when the payload is not a well-formed tensor frame.
pub fn split_tensor_frame(payload: &[u8]) -> Option<(&[u8], usize)> {
    if payload.first() != Some(&TENSOR_FRAME) || payload.len() < TENSOR_HEAD {
        return None;
    }
    let h = u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]) as usize;
    let end = TENSOR_HEAD.checked_add(h)?;
    (end <= payload.len()).then(|| (&payload[TENSOR_HEAD..end], end))
}

/// Encodes a server message: the frame, or for an answer carrying inline
/// outputs, a tensor frame's head followed by the data buffers to write
/// after it.
pub fn encode_message(msg: &ServerMessage) -> (Vec<u8>, &[Vec<u8>]) {
    let data: &[Vec<u8>] = match msg {
        ServerMessage::Reply {
            result: Reply::InferDone(t),
            ..
        }
        | ServerMessage::Event {
            event: Event::TaskDone(t),
        } => &t.data,
        _ => &[],
    };
    if data.is_empty() {
        return (encode(msg), data);
    }
    let n = data.iter().map(Vec::len).sum();
    (encode_tensor_head(msg, n), data)
}

/// Decodes a server message from a frame payload (JSON, or a tensor frame
/// whose data section becomes the result's `data`).
pub fn decode_message(mut payload: Vec<u8>) -> Result<ServerMessage, String> {
    let Some((json, at)) = split_tensor_frame(&payload) else {
        return serde_json::from_slice(&payload).map_err(|e| e.to_string());
    };
    let mut msg: ServerMessage = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    match &mut msg {
        ServerMessage::Reply {
            result: Reply::InferDone(t),
            ..
        }
        | ServerMessage::Event {
            event: Event::TaskDone(t),
        } => {
            // The data section stays where it is: the payload's head is cut
            // off its front (a move of the data, no second buffer).
            payload.drain(..at);
            t.data = vec![payload];
        }
        _ => return Err("a tensor frame that is not an inference's answer".into()),
    }
    Ok(msg)
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

/// Frames at least this large are gathered in a buffer of their own,
/// allocated once at their announced size, instead of in the decoder's
/// running buffer (which would copy them again when they are cut out).
const DIRECT_FILL: usize = 64 * 1024;

/// A large frame being gathered.
#[derive(Debug)]
struct Fill {
    buf: Vec<u8>,
    len: usize,
}

/// Incremental frame decoder: push bytes as they arrive, pull frames.
/// JSON frames are limited to `max`; tensor frames (whose payload starts
/// with [`TENSOR_FRAME`]) to `max_tensor`.
#[derive(Debug)]
pub struct FrameDecoder {
    max: usize,
    max_tensor: usize,
    buf: Vec<u8>,
    /// Bytes of an oversized payload still to discard.
    skip: usize,
    fill: Option<Fill>,
    ready: Option<Vec<u8>>,
}

impl FrameDecoder {
    /// A decoder that takes frames up to `max_frame` bytes, JSON or tensor.
    pub fn new(max_frame: usize) -> Self {
        Self::with_limits(max_frame, max_frame)
    }

    /// A decoder that takes JSON frames up to `max_frame` bytes and tensor
    /// frames up to `max_tensor_frame` bytes.
    pub fn with_limits(max_frame: usize, max_tensor_frame: usize) -> Self {
        FrameDecoder {
            max: max_frame,
            max_tensor: max_tensor_frame.max(max_frame),
            buf: Vec::new(),
            skip: 0,
            fill: None,
            ready: None,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        if let Some(f) = self.fill.as_mut() {
            let n = (f.len - f.buf.len()).min(data.len());
            f.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if f.buf.len() == f.len {
                self.ready = self.fill.take().map(|f| f.buf);
            }
        }
        self.buf.extend_from_slice(data);
    }

    /// The buffer of a large frame being gathered, for reading into it
    /// directly (append at most [`FrameDecoder::fill_remaining`] bytes,
    /// then call [`FrameDecoder::fill_check`]); `None` when no large frame
    /// is being gathered. Its capacity is the frame's size.
    pub fn fill_buf(&mut self) -> Option<&mut Vec<u8>> {
        self.fill.as_mut().map(|f| &mut f.buf)
    }

    /// Bytes the large frame being gathered still lacks (0: none).
    pub fn fill_remaining(&self) -> usize {
        self.fill
            .as_ref()
            .map_or(0, |f| f.len - f.buf.len().min(f.len))
    }

    /// Takes in what was appended to [`FrameDecoder::fill_buf`].
    pub fn fill_check(&mut self) {
        if let Some(f) = self.fill.as_mut() {
            if f.buf.len() > f.len {
                // More than the frame: the rest begins the next one.
                let rest = f.buf.split_off(f.len);
                self.buf.extend_from_slice(&rest);
            }
            if f.buf.len() == f.len {
                self.ready = self.fill.take().map(|f| f.buf);
            }
        }
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.fill.as_ref().map_or(0, |f| f.buf.len())
    }

    /// The next complete frame, if any.
    pub fn next_frame(&mut self) -> Option<Decoded> {
        if let Some(p) = self.ready.take() {
            return Some(Decoded::Frame(p));
        }
        if self.skip > 0 || self.fill.is_some() || self.buf.len() < HEADER_LEN {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max {
            // Over the JSON limit: only a tensor frame within its own limit
            // goes on, which the payload's first byte tells.
            if len <= self.max_tensor && self.buf.len() == HEADER_LEN {
                return None;
            }
            if len > self.max_tensor || self.buf[HEADER_LEN] != TENSOR_FRAME {
                let avail = self.buf.len() - HEADER_LEN;
                let drop_now = avail.min(len);
                self.buf.drain(..HEADER_LEN + drop_now);
                self.skip = len - drop_now;
                return Some(Decoded::TooLarge { len });
            }
        }
        if self.buf.len() < HEADER_LEN + len {
            if len >= DIRECT_FILL {
                // Reserved at the announced size (address space only: its
                // pages are touched as bytes arrive, so a client that
                // announces large frames and sends little holds little).
                // Growing it in steps instead cost a copy per step once
                // malloc serves such sizes from its heap (16 MiB inline:
                // 11 -> 21 ms). Reserving can fail (strict overcommit):
                // then the frame is skipped, never the daemon aborted.
                let mut b = Vec::new();
                if b.try_reserve_exact(len).is_err() {
                    let avail = self.buf.len() - HEADER_LEN;
                    self.buf.clear();
                    self.skip = len - avail;
                    return Some(Decoded::TooLarge { len });
                }
                b.extend_from_slice(&self.buf[HEADER_LEN..]);
                self.buf.clear();
                self.fill = Some(Fill { buf: b, len });
            }
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
                    inputs: None,
                    outputs: Vec::new(),
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

/// The data section of a request's tensor frame: the whole frame payload,
/// shared (inline tensors are ranges of it, never copied out), and where
/// the section starts.
#[derive(Debug, Clone)]
pub struct FrameData {
    pub frame: std::sync::Arc<Vec<u8>>,
    pub start: usize,
}

impl FrameData {
    /// Bytes of the data section.
    pub fn len(&self) -> usize {
        self.frame.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Parses a request frame: JSON ([`parse_request`]), or a tensor frame
/// whose JSON is the request and whose data section holds its inline
/// tensors.
pub fn parse_frame(payload: Vec<u8>) -> Result<(Request, Option<FrameData>), BadRequest> {
    if payload.first() != Some(&TENSOR_FRAME) {
        return parse_request(&payload).map(|r| (r, None));
    }
    let Some((json, start)) = split_tensor_frame(&payload) else {
        return Err(BadRequest {
            id: None,
            message: format!(
                "a tensor frame ({} bytes) whose JSON length runs past its end: send 0x00, a 4-byte big-endian JSON length, the JSON, then the data (docs/protocol.md, \"Tensors\")",
                payload.len()
            ),
        });
    };
    let req = parse_request(json)?;
    if !matches!(req.body, RequestBody::Infer { .. }) {
        return Err(BadRequest {
            id: Some(req.id),
            message:
                "only an infer carries a data section; send other requests as plain JSON frames"
                    .into(),
        });
    }
    Ok((
        req,
        Some(FrameData {
            frame: std::sync::Arc::new(payload),
            start,
        }),
    ))
}
