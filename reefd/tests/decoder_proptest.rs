//! The protocol decoder never panics on arbitrary bytes, and a valid request
//! after garbage that is framed correctly is still decoded.

use proptest::prelude::*;
use reefd::protocol::{encode, parse_request, Decoded, FrameDecoder, Request, RequestBody};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                                   chunk in 1usize..64, max in 0usize..2048) {
        let mut d = FrameDecoder::new(max);
        for c in bytes.chunks(chunk) {
            d.push(c);
            while let Some(f) = d.next_frame() {
                match f {
                    Decoded::Frame(p) => {
                        prop_assert!(p.len() <= max);
                        let _ = parse_request(&p);
                    }
                    Decoded::TooLarge { len } => prop_assert!(len > max),
                }
            }
        }
        prop_assert!(d.buffered() <= bytes.len());
    }

    #[test]
    fn arbitrary_payloads_parse_or_error(payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_request(&payload);
    }

    #[test]
    fn framed_garbage_then_valid_request(garbage in proptest::collection::vec(any::<u8>(), 0..300), id in any::<u64>()) {
        let mut bytes = (garbage.len() as u32).to_be_bytes().to_vec();
        bytes.extend(&garbage);
        let req = Request { id, body: RequestBody::Status };
        bytes.extend(encode(&req));
        let mut d = FrameDecoder::new(1 << 20);
        d.push(&bytes);
        let first = d.next_frame();
        prop_assert_eq!(first, Some(Decoded::Frame(garbage.clone())));
        let Some(Decoded::Frame(p)) = d.next_frame() else { panic!("second frame missing") };
        prop_assert_eq!(parse_request(&p).unwrap(), req);
    }
}
