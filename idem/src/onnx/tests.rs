use super::proto::*;
use super::*;
use crate::analysis::analyze;

fn node(op: &str, ins: &[&str], outs: &[&str]) -> NodeProto {
    NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        name: outs[0].to_string(),
        op_type: op.into(),
        ..Default::default()
    }
}

fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: Some(d),
                            dim_param: None,
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn weight(name: &str, dims: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: 1,
        name: name.into(),
        ..Default::default()
    }
}

fn model(nodes: Vec<NodeProto>, inits: Vec<TensorProto>, out: &str) -> ModelProto {
    ModelProto {
        graph: Some(GraphProto {
            node: nodes,
            initializer: inits,
            input: vec![input("x", &[1, 4, 8, 8])],
            output: vec![ValueInfoProto {
                name: out.into(),
                r#type: None,
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn conv_bn_relu_in_place_chain() {
    let m = model(
        vec![
            node("Conv", &["x", "w"], &["c"]),
            node("BatchNormalization", &["c", "s", "b", "m", "v"], &["n"]),
            node("Relu", &["n"], &["r"]),
            node("Flatten", &["r"], &["f"]),
            node("Gemm", &["f", "fc"], &["y"]),
        ],
        vec![
            weight("w", &[4, 4, 3, 3]),
            weight("s", &[4]),
            weight("b", &[4]),
            weight("m", &[4]),
            weight("v", &[4]),
            weight("fc", &[256, 10]),
        ],
        "y",
    );
    let t = lower(&m, "m", &Options::default()).unwrap();
    // memcpy in, 4 kernels (Flatten is a view), memcpy out.
    assert_eq!(t.ops.len(), 6);
    assert_eq!(t.kernel_count(), 4);
    let bn = &t.ops[2];
    assert_eq!(
        bn.reads[0], bn.writes[0],
        "BatchNormalization runs in place"
    );
    let a = analyze(&t).unwrap();
    let sizes: Vec<(bool, usize)> = a.kernels.iter().map(|k| (k.idempotent, k.size)).collect();
    assert_eq!(sizes, vec![(true, 1), (false, 2), (false, 3), (true, 1)]);
    // Conv reads the input 4*8*8 floats; with padding 0 the output is 6x6.
    assert_eq!(t.ops[1].writes[0].len, 4 * 6 * 6 * 4);

    let t = lower(&m, "m", &Options::no_in_place()).unwrap();
    let a = analyze(&t).unwrap();
    assert_eq!(a.idempotent_count(), 4, "no in-place ops, all idempotent");
}

#[test]
fn input_read_later_blocks_in_place() {
    // Residual: x1 = relu(conv(x)); y = conv(x1) + x1. The Relu's input c
    // dies there (in place), but x1 is read twice, so the Add may run in
    // place on the conv output (its first input) only.
    let m = model(
        vec![
            node("Conv", &["x", "w"], &["c"]),
            node("Relu", &["c"], &["x1"]),
            node("Conv", &["x1", "w2"], &["c2"]),
            node("Add", &["c2", "x1"], &["y"]),
        ],
        vec![weight("w", &[4, 4, 1, 1]), weight("w2", &[4, 4, 1, 1])],
        "y",
    );
    let t = lower(&m, "m", &Options::default()).unwrap();
    let add = &t.ops[4];
    assert_eq!(add.writes[0], add.reads[0], "Add runs in place on c2");
    assert_ne!(add.writes[0], add.reads[1], "x1 is not clobbered");
    let a = analyze(&t).unwrap();
    assert!(!a.kernels[3].idempotent);
    assert_eq!(a.kernels[3].start_kernel, 2);
}

#[test]
fn unsupported_op_names_node() {
    let m = model(vec![node("NonMaxSuppression", &["x"], &["y"])], vec![], "y");
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(
        e.contains("node #0") && e.contains("NonMaxSuppression"),
        "{e}"
    );
}

#[test]
fn in_place_operator_set_is_configurable() {
    let m = model(
        vec![
            node("Conv", &["x", "w"], &["c"]),
            node("BatchNormalization", &["c", "s", "b", "m", "v"], &["n"]),
            node("Relu", &["n"], &["y"]),
        ],
        ["w", "s", "b", "m", "v"]
            .iter()
            .map(|n| weight(n, if *n == "w" { &[4, 4, 1, 1] } else { &[4] }))
            .collect(),
        "y",
    );
    let relu_only = Options::with_ops("Relu").unwrap();
    let t = lower(&m, "m", &relu_only).unwrap();
    let a = analyze(&t).unwrap();
    let flags: Vec<bool> = a.kernels.iter().map(|k| k.idempotent).collect();
    assert_eq!(flags, vec![true, true, false]);
    assert_eq!(a.kernels[2].start_kernel, 1, "Relu's group is (BN, Relu)");
    let e = Options::with_ops("Relu,Conv").unwrap_err();
    assert!(e.contains("\"Conv\" cannot run in place"), "{e}");
}

#[test]
fn optional_outputs_without_shapes_are_skipped() {
    // Training-mode BatchNormalization lists statistics outputs that
    // this lowering does not infer: they are not written, and a node
    // reading one is a clear error rather than a panic.
    let bn = node(
        "BatchNormalization",
        &["c", "s", "b", "m", "v"],
        &["n", "mean", "var"],
    );
    let inits = ["w", "s", "b", "m", "v"]
        .iter()
        .map(|n| weight(n, if *n == "w" { &[4, 4, 1, 1] } else { &[4] }))
        .collect::<Vec<_>>();
    let ok = model(
        vec![node("Conv", &["x", "w"], &["c"]), bn.clone()],
        inits.clone(),
        "n",
    );
    let t = lower(&ok, "m", &Options::default()).unwrap();
    assert_eq!(t.ops[2].writes.len(), 1);
    let bad = model(
        vec![
            node("Conv", &["x", "w"], &["c"]),
            bn,
            node("Relu", &["mean"], &["y"]),
        ],
        inits,
        "y",
    );
    let e = lower(&bad, "m", &Options::default()).unwrap_err();
    assert!(e.contains("node #2") && e.contains("\"mean\""), "{e}");
}

#[test]
fn dropout_mask_is_not_produced() {
    let m = model(
        vec![
            node("Relu", &["x"], &["r"]),
            node("Dropout", &["r"], &["d", "mask"]),
            node("Relu", &["mask"], &["y"]),
        ],
        vec![],
        "y",
    );
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(e.contains("node #2") && e.contains("Dropout's mask"), "{e}");
}

#[test]
fn freed_buffers_are_reused() {
    let m = model(
        vec![
            node("Conv", &["x", "w"], &["a"]),
            node("Conv", &["a", "w"], &["b"]),
            node("Conv", &["b", "w"], &["c"]),
        ],
        vec![weight("w", &[4, 4, 1, 1])],
        "c",
    );
    let t = lower(&m, "m", &Options::default()).unwrap();
    // a is freed after the second conv, so the third conv writes into it.
    assert_eq!(t.ops[3].writes[0].addr, t.ops[1].writes[0].addr);
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// Nodes with no inputs, or scalars where a rank is needed, are errors.
#[test]
fn inputless_and_scalar_nodes_are_errors() {
    for op in ["Add", "Sum", "Concat"] {
        let m = model(vec![node(op, &[], &["y"])], vec![], "y");
        let e = lower(&m, "m", &Options::default()).unwrap_err();
        assert!(e.contains("no inputs"), "{op}: {e}");
    }
    let mut m = model(vec![node("Concat", &["x", "x"], &["y"])], vec![], "y");
    m.graph.as_mut().unwrap().input = vec![input("x", &[])];
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(e.contains("rank 0"), "{e}");
}

/// Sizes from the file are arbitrary 64-bit numbers: sizes that do not
/// fit are errors naming the tensor or node, never an overflow panic.
#[test]
fn huge_sizes_are_errors_not_overflows() {
    let big = 1i64 << 40;
    let mut m = model(vec![node("Relu", &["x"], &["y"])], vec![], "y");
    m.graph.as_mut().unwrap().input = vec![input("x", &[big, big, big])];
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(
        e.contains("graph input \"x\"") && e.contains("exceed"),
        "{e}"
    );

    let m = model(
        vec![node("Relu", &["x"], &["y"])],
        vec![weight("w", &[big, big])],
        "y",
    );
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(
        e.contains("initializer \"w\"") && e.contains("exceed"),
        "{e}"
    );

    let mut shape = weight("s", &[3]);
    shape.data_type = 7; // int64
    shape.int64_data = vec![big, big, big];
    let m = model(vec![node("Reshape", &["x", "s"], &["y"])], vec![shape], "y");
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(e.contains("node #0") && e.contains("overflows"), "{e}");

    let mut conv = node("Conv", &["x", "w"], &["y"]);
    conv.attribute = vec![
        ints_attr("pads", &[i64::MAX, i64::MAX, i64::MAX, i64::MAX]),
        ints_attr("dilations", &[i64::MAX, 1]),
    ];
    let m = model(vec![conv], vec![weight("w", &[4, 4, 3, 3])], "y");
    let e = lower(&m, "m", &Options::default()).unwrap_err();
    assert!(e.contains("node #0"), "{e}");

    // Many activations that each fit but together reach the parameters.
    let half = 1i64 << 37; // 2^37 f32 = 512 GiB per tensor, 4 of them live
    let mut m = model(
        vec![
            node("Relu", &["x"], &["a"]),
            node("Sigmoid", &["x"], &["b"]),
            node("Add", &["a", "b"], &["y"]),
        ],
        vec![],
        "y",
    );
    m.graph.as_mut().unwrap().input = vec![input("x", &[half])];
    let e = lower(&m, "m", &Options::no_in_place()).unwrap_err();
    assert!(e.contains("activations need"), "{e}");
}
