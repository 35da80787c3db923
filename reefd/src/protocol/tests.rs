use super::*;

#[test]
fn priorities_are_levels_0_to_9_with_rt_and_be_as_aliases() {
    assert_eq!("rt".parse::<Priority>(), Ok(Priority::Rt));
    assert_eq!("be".parse::<Priority>(), Ok(Priority::Be));
    assert_eq!("0".parse::<Priority>(), Ok(Priority::Rt));
    assert_eq!("9".parse::<Priority>(), Ok(Priority::Be));
    assert_eq!("5".parse::<Priority>().map(Priority::get), Ok(5));
    for bad in ["10", "-1", "high", ""] {
        let e = bad.parse::<Priority>().unwrap_err();
        assert!(e.contains("0-9"), "{e}");
    }
    // Wire form: 0 and 9 as before levels existed, the others numbers.
    let five = Priority::level(5).unwrap();
    assert_eq!(serde_json::to_string(&Priority::Rt).unwrap(), "\"rt\"");
    assert_eq!(serde_json::to_string(&Priority::Be).unwrap(), "\"be\"");
    assert_eq!(serde_json::to_string(&five).unwrap(), "5");
    for (text, want) in [
        ("\"rt\"", Priority::Rt),
        ("0", Priority::Rt),
        ("\"5\"", five),
        ("5", five),
    ] {
        assert_eq!(serde_json::from_str::<Priority>(text).unwrap(), want);
    }
    assert!(serde_json::from_str::<Priority>("12").is_err());
    assert!(five > Priority::Rt && !five.is_rt() && Priority::Rt.is_rt());
}

#[test]
fn the_infer_fast_path_agrees_with_the_general_parser() {
    let cases = [
        r#"{"id":7,"op":"infer","stream":3,"model":"vgg","wait":true}"#,
        r#"{"id":7,"op":"infer","stream":3,"model":"vgg"}"#,
        r#"{"op":"infer","model":"vgg","stream":3,"id":7,"wait":false}"#,
        r#"{"id":7,"op":"infer","stream":3,"model":"v\"g\u0067"}"#,
        r#"{"id":7,"op":"in\u0066er","stream":3,"model":"vgg"}"#,
        r#"{"id":7,"op":"infer","stream":3,"model":"vgg","extra":1}"#,
        r#"{"id":7,"op":"infer","stream":3,"stream":4,"model":"vgg"}"#,
        r#"{"id":7,"op":"infer","stream":-3,"model":"vgg"}"#,
        r#"{"id":7,"op":"infer","model":"vgg"}"#,
        r#"{"id":7,"op":"stats"}"#,
        r#"{"id":7,"op":"infer","stream":3,"model":7}"#,
        r#"[1,2]"#,
    ];
    for c in cases {
        let general = serde_json::from_slice::<Request>(c.as_bytes());
        match (parse_request(c.as_bytes()), general) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{c}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{c}: fast path {a:?}, general {b:?}"),
        }
    }
}

#[test]
fn request_round_trip_and_wire_shape() {
    let r = Request {
        id: 7,
        body: RequestBody::Infer {
            stream: 3,
            model: "vgg".into(),
            wait: false,
            qos_ms: None,
            inputs: None,
            outputs: Vec::new(),
        },
    };
    let frame = encode(&r);
    let mut d = FrameDecoder::new(DEFAULT_MAX_FRAME);
    d.push(&frame);
    let Some(Decoded::Frame(p)) = d.next_frame() else {
        panic!("no frame")
    };
    let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
    assert_eq!(v["op"], "infer");
    assert_eq!(v["id"], 7);
    assert_eq!(parse_request(&p).unwrap(), r);
}

#[test]
fn wait_defaults_to_true() {
    let r = parse_request(br#"{"id":1,"op":"infer","stream":2,"model":"vgg"}"#).unwrap();
    assert!(matches!(r.body, RequestBody::Infer { wait: true, .. }));
}

#[test]
fn bad_request_keeps_id() {
    let e = parse_request(br#"{"id":9,"op":"fly"}"#).unwrap_err();
    assert_eq!(e.id, Some(9));
    let e = parse_request(b"\xff\x00").unwrap_err();
    assert_eq!(e.id, None);
    assert!(e.message.contains("not valid JSON"));
}

#[test]
fn oversized_frame_is_skipped_and_stream_resyncs() {
    let mut d = FrameDecoder::new(16);
    let mut bytes = (100u32).to_be_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 100));
    bytes.extend(encode(&Request {
        id: 1,
        body: RequestBody::Stats,
    }));
    // Feed in small pieces to cover the skip path across pushes.
    let mut out = Vec::new();
    for chunk in bytes.chunks(7) {
        d.push(chunk);
        while let Some(f) = d.next_frame() {
            out.push(f);
        }
    }
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0], Decoded::TooLarge { len: 100 });
    // The stats request is 26 bytes: also over 16, so it is skipped too.
    assert!(matches!(out[1], Decoded::TooLarge { .. }));
    let mut d = FrameDecoder::new(64);
    let mut bytes = (100u32).to_be_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 100));
    let stats = encode(&Request {
        id: 1,
        body: RequestBody::Stats,
    });
    bytes.extend(&stats);
    for chunk in bytes.chunks(5) {
        d.push(chunk);
    }
    assert_eq!(d.next_frame(), Some(Decoded::TooLarge { len: 100 }));
    assert_eq!(d.next_frame(), Some(Decoded::Frame(stats[4..].to_vec())));
    assert_eq!(d.next_frame(), None);
}
