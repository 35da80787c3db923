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

/// A tensor frame (JSON head, then the data section) passes a decoder
/// whose JSON limit it exceeds, up to the tensor limit; a large one is
/// gathered in its own buffer across pushes, and the frames after it
/// follow in order; the request's inline tensors are ranges of its frame.
#[test]
fn tensor_frames_have_their_own_limit_and_keep_their_data_in_place() {
    let body = RequestBody::Infer {
        stream: 1,
        model: "m".into(),
        wait: true,
        qos_ms: None,
        inputs: Some(vec![TensorRef {
            name: "image:0".into(),
            dtype: "float32".into(),
            shape: vec![1, 50_000],
            region: None,
            offset: 0,
            bytes: 200_000,
        }]),
        outputs: Vec::new(),
    };
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut bytes = encode_tensor_head(&Request { id: 4, body }, data.len());
    bytes.extend(&data);
    let stats = encode(&Request {
        id: 5,
        body: RequestBody::Stats,
    });
    bytes.extend(&stats);
    // Over the tensor limit: skipped whole.
    let mut too_big = encode_tensor_head(
        &Request {
            id: 6,
            body: RequestBody::Stats,
        },
        2 << 20,
    );
    too_big.extend(std::iter::repeat_n(0u8, 2 << 20));
    bytes.extend(&too_big);
    // A JSON frame over the JSON limit: skipped.
    let mut json = (100u32).to_be_bytes().to_vec();
    json.extend(std::iter::repeat_n(b'{', 100));
    bytes.extend(&json);
    bytes.extend(&stats);
    let mut d = FrameDecoder::with_limits(64, 1 << 20);
    let mut out = Vec::new();
    for chunk in bytes.chunks(4093) {
        d.push(chunk);
        while let Some(f) = d.next_frame() {
            out.push(f);
        }
    }
    assert_eq!(
        out.len(),
        5,
        "{:?}",
        out.iter()
            .map(|f| match f {
                Decoded::Frame(p) => p.len(),
                Decoded::TooLarge { len } => *len,
            })
            .collect::<Vec<_>>()
    );
    let Decoded::Frame(p) = out.remove(0) else {
        panic!("the tensor frame")
    };
    let (req, frame) = parse_frame(p).unwrap();
    assert_eq!(req.id, 4);
    let frame = frame.expect("a data section");
    assert_eq!(frame.len(), data.len());
    assert_eq!(&frame.frame[frame.start..], &data[..]);
    assert_eq!(out[0], Decoded::Frame(stats[4..].to_vec()));
    assert!(matches!(out[1], Decoded::TooLarge { .. }));
    assert_eq!(out[2], Decoded::TooLarge { len: 100 });
    assert_eq!(out[3], Decoded::Frame(stats[4..].to_vec()));
    // Only an infer carries data.
    let mut stats_data = encode_tensor_head(
        &Request {
            id: 7,
            body: RequestBody::Stats,
        },
        3,
    );
    stats_data.extend([1, 2, 3]);
    let e = parse_frame(stats_data[4..].to_vec()).unwrap_err();
    assert_eq!(e.id, Some(7));
    // A JSON length past the frame's end.
    let e = parse_frame(vec![TENSOR_FRAME, 0, 0, 1, 0, b'{']).unwrap_err();
    assert!(e.message.contains("runs past its end"), "{}", e.message);
}

/// An answer with inline outputs is a tensor frame whose data section the
/// client gets back as the result's data.
#[test]
fn answers_with_outputs_round_trip() {
    let t = TaskResult {
        task: 1,
        stream: 2,
        model: "m".into(),
        latency_us: 1.0,
        normalized_latency: None,
        control_path_us: None,
        first_kernel_monotonic_ns: None,
        timeline: None,
        preemptions: 0,
        outputs_verified: None,
        outputs: vec![
            OutputTensor {
                name: "a".into(),
                dtype: "uint8".into(),
                shape: vec![3],
                region: None,
                offset: 0,
                bytes: 3,
            },
            OutputTensor {
                name: "probs/out".into(),
                dtype: "uint8".into(),
                shape: vec![2],
                region: None,
                offset: 3,
                bytes: 2,
            },
        ],
        outputs_missing: None,
        data: vec![vec![1, 2, 3], vec![4, 5]],
        hold: DataHold::default(),
    };
    let msg = ServerMessage::Reply {
        id: 9,
        result: Reply::InferDone(t.clone()),
    };
    let (head, data) = encode_message(&msg);
    let mut wire = head.clone();
    for d in data {
        wire.extend(d);
    }
    let mut dec = FrameDecoder::new(1 << 20);
    dec.push(&wire);
    let Some(Decoded::Frame(p)) = dec.next_frame() else {
        panic!("a frame")
    };
    let ServerMessage::Reply {
        result: Reply::InferDone(got),
        ..
    } = decode_message(p).unwrap()
    else {
        panic!("an infer_done")
    };
    assert_eq!(got.output_bytes("a"), Some(&[1u8, 2, 3][..]));
    assert_eq!(got.output_bytes("probs/out"), Some(&[4u8, 5][..]));
    assert_eq!(got.outputs, t.outputs);
    // Without outputs, an answer is plain JSON.
    let plain = ServerMessage::Reply {
        id: 9,
        result: Reply::InferDone(TaskResult {
            data: Vec::new(),
            outputs: Vec::new(),
            ..t
        }),
    };
    assert_eq!(encode_message(&plain).0, encode(&plain));
}
