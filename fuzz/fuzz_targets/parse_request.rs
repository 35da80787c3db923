//! reefd's request parser (`reefd::protocol::parse_request`), fed arbitrary
//! frame payloads. Besides not panicking: the `infer` fast path must agree
//! with the general parser (the parser's own contract: "errors and
//! semantics are the same"), and an accepted request must survive its own
//! encoding (what a client sends after building the same request).
#![no_main]

use libfuzzer_sys::fuzz_target;
use reefd::protocol::{encode, parse_request, Request};

fuzz_target!(|data: &[u8]| {
    let parsed = parse_request(data);
    let general = serde_json::from_slice::<Request>(data);
    match (&parsed, &general) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "fast path and general parser disagree"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("fast path {a:?}, general parser {b:?}"),
    }
    match parsed {
        Ok(r) => {
            let frame = encode(&r);
            let again = parse_request(&frame[4..])
                .unwrap_or_else(|e| panic!("{r:?} encodes to a frame it refuses: {e:?}"));
            assert_eq!(
                std::mem::discriminant(&again.body),
                std::mem::discriminant(&r.body)
            );
            assert_eq!(again.id, r.id);
        }
        Err(e) => assert!(!e.message.is_empty()),
    }
});
