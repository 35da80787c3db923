//! reefd's incremental frame decoder (`reefd::protocol::FrameDecoder`):
//! arbitrary bytes pushed in arbitrary chunks, frames drained at arbitrary
//! points. Besides not panicking, the frames must be exactly those a
//! one-pass reading of the whole stream finds (the decoder's contract:
//! chunking does not change what is decoded).
//!
//! Input: byte 0 sets the frame limit (0..=63, small so both the accepted
//! and the oversized path are reached), byte 1 seeds the chunk sizes and
//! the drain points, the rest is the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reefd::protocol::{Decoded, FrameDecoder};

const HEADER_LEN: usize = 4;

/// The stream read in one pass: what the decoder must produce.
fn reference(max: usize, mut s: &[u8]) -> Vec<Decoded> {
    let mut out = Vec::new();
    while s.len() >= HEADER_LEN {
        let len = u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
        let rest = &s[HEADER_LEN..];
        if len > max {
            out.push(Decoded::TooLarge { len });
            if rest.len() < len {
                break;
            }
            s = &rest[len..];
        } else {
            if rest.len() < len {
                break;
            }
            out.push(Decoded::Frame(rest[..len].to_vec()));
            s = &rest[len..];
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max = (data[0] % 64) as usize;
    let mut seed = u32::from(data[1]) | 1;
    let stream = &data[2..];

    let mut dec = FrameDecoder::new(max);
    let mut got = Vec::new();
    let mut pushed = 0usize;
    let mut rest = stream;
    while !rest.is_empty() {
        // xorshift: chunk sizes 1..=17 and whether to drain after this push
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let n = (1 + (seed % 17) as usize).min(rest.len());
        dec.push(&rest[..n]);
        pushed += n;
        rest = &rest[n..];
        assert!(dec.buffered() <= pushed);
        if seed & 0x100 != 0 {
            while let Some(d) = dec.next_frame() {
                got.push(d);
            }
        }
    }
    while let Some(d) = dec.next_frame() {
        got.push(d);
    }
    assert_eq!(got, reference(max, stream));
});
