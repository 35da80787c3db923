//! The `reef-check-idem` binary: outputs (REEF §4.4 metadata, Table 1 counts,
//! Fig. 10 histogram) and clear, non-zero-exit errors on bad input.

use reef_model::idempotence::IdempotenceMetadata;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_reef-check-idem"))
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reef-idem-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&Path]) -> Output {
    bin().args(args).output().unwrap()
}

const HEADER: &str = r#"{"format":"reef-trace","version":1,"model":"t"}"#;

/// Fig. 9 as a reef-trace with a memset before K3's input, plus copies.
fn good_trace() -> String {
    [
        HEADER,
        r#"{"op":"memcpy","name":"in","reads":[],"writes":[[0,2]]}"#,
        r#"{"op":"kernel","name":"K0","reads":[[0,2]],"writes":[[2,1]]}"#,
        r#"{"op":"kernel","name":"K1","reads":[[2,2]],"writes":[[4,1]]}"#,
        r#"{"op":"kernel","name":"K2","reads":[[3,2]],"writes":[[5,1]]}"#,
        r#"{"op":"kernel","name":"K3","reads":[[2,1],[4,1]],"writes":[[4,1]]}"#,
        r#"{"op":"memset","name":"acc","writes":[[8,4]]}"#,
        r#"{"op":"kernel","name":"K4","reads":[[8,4],[5,1]],"writes":[[8,4]]}"#,
        r#"{"op":"memcpy","name":"out","reads":[[8,4]],"writes":[]}"#,
    ]
    .join("\n")
}

#[test]
fn json_summary_metadata_and_human_report() {
    let d = tmpdir("ok");
    let t = d.join("m.reeftrace");
    std::fs::write(&t, good_trace()).unwrap();
    let meta = d.join("m.idem.json");
    let out = bin()
        .arg(&t)
        .arg("--json")
        .arg("-o")
        .arg(&meta)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"], "t");
    assert_eq!(v["kernels"], 5);
    assert_eq!(v["idempotent"], 3);
    assert_eq!(
        v["groups"],
        serde_json::json!([{"kernel":3,"start":1,"size":3},{"kernel":4,"start":4,"size":1}])
    );
    assert_eq!(v["max_group"], 3);

    let m = IdempotenceMetadata::load(&meta).unwrap();
    assert_eq!(m.kernels.len(), 5);
    assert_eq!(m.restore_point(3), 1);
    assert_eq!(m.restore_point(2), 2);
    // K4's group begins with the memset (operation 5), one kernel.
    assert_eq!(m.kernels[4].group_start, 4);
    assert_eq!(m.kernels[4].group_start_op, Some(5));

    let dumped = d.join("dump.reeftrace");
    let out = bin()
        .arg(&t)
        .arg("--dump-trace")
        .arg(&dumped)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        reef_idem::Trace::load(&dumped).unwrap(),
        reef_idem::Trace::load(&t).unwrap(),
        "--dump-trace writes the analysed trace"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("3/5 kernels idempotent"), "{text}");
    assert!(text.contains("largest group: 3 kernels"), "{text}");
    std::fs::remove_dir_all(&d).unwrap();
}

fn expect_failure(name: &str, body: &str, want: &[&str]) {
    let d = tmpdir(name);
    let t = d.join(format!("{name}.reeftrace"));
    std::fs::write(&t, body).unwrap();
    let out = run(&[&t]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{name}: must fail");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{name}: a clean error, not a panic"
    );
    for w in want {
        assert!(err.contains(w), "{name}: stderr {err:?} lacks {w:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn malformed_traces_fail_with_line_numbers() {
    let k = r#"{"op":"kernel","name":"a","reads":[],"writes":[[0,4]]}"#;
    expect_failure(
        "badjson",
        &format!("{HEADER}\n{k}\n{{\"op\":\"kernel\""),
        &["badjson.reeftrace:3:", "bad operation JSON"],
    );
    expect_failure(
        "negative",
        &format!(
            "{HEADER}\n{k}\n{k}\n{}",
            r#"{"op":"kernel","name":"n","reads":[[4,-1]]}"#
        ),
        &["negative.reeftrace:4:", "negative"],
    );
    expect_failure(
        "overflow",
        &format!(
            "{HEADER}\n{}",
            r#"{"op":"memcpy","name":"o","writes":[[18446744073709551000,1000]]}"#
        ),
        &["overflow.reeftrace:2:", "overflows"],
    );
    expect_failure(
        "unknown",
        &format!("{HEADER}\n{}", r#"{"op":"sync","name":"s"}"#),
        &["unknown.reeftrace:2:", "unknown op \"sync\""],
    );
}

#[test]
fn engine_needs_a_recorded_trace() {
    let d = tmpdir("engine");
    let e = d.join("resnet.engine");
    std::fs::write(&e, b"opaque serialized engine").unwrap();
    let out = run(&[&e]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("resnet.engine.reeftrace") && err.contains("NVBit"),
        "{err}"
    );

    std::fs::write(d.join("resnet.engine.reeftrace"), good_trace()).unwrap();
    let out = bin().arg(&e).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["idempotent"], 3);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_inputs_are_named() {
    let d = tmpdir("bad");
    let missing = d.join("nothing.onnx");
    let out = run(&[&missing]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing.onnx"));

    let junk = d.join("junk.onnx");
    std::fs::write(&junk, [0xffu8, 0xff, 0xff, 0x01]).unwrap();
    let out = run(&[&junk]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid ONNX protobuf"));

    let sched = d.join("broken.json");
    std::fs::write(
        &sched,
        r#"{"storage":[],"kernels":[{"name":"k","launch_params":[1,1,1,1,1,1],"args":[3]}]}"#,
    )
    .unwrap();
    let out = run(&[&sched]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.json"));

    // An empty .json is read as a schedule, and the parser's message is
    // printed once, not repeated by the error chain.
    let empty = d.join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let out = run(&[&empty]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a valid kernel schedule JSON"), "{err}");
    assert_eq!(err.matches("EOF while parsing").count(), 1, "{err}");

    // Buffers that each fit 64 bits but together do not.
    let wide = d.join("wide.json");
    let b = r#"{"name":"b","size":2305843009213693952,"stype":"float32"}"#;
    std::fs::write(
        &wide,
        format!(
            r#"{{"storage":[{b},{b}],"kernels":[{{"name":"k","launch_params":[1,1,1,1,1,1],"args":[0,1]}}]}}"#
        ),
    )
    .unwrap();
    let out = run(&[&wide]);
    assert_eq!(out.status.code(), Some(1), "a clean error, not a panic");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("wide.json") && err.contains("storage[1]"),
        "{err}"
    );

    // A trace with a header and no operation has nothing to analyse.
    let hollow = d.join("hollow.reeftrace");
    std::fs::write(
        &hollow,
        r#"{"format":"reef-trace","version":1,"model":"h"}"#,
    )
    .unwrap();
    let out = run(&[&hollow]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no kernel operations"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn reef_schedule_metadata_round_trips() {
    let d = tmpdir("sched");
    let meta = d.join("vgg.idem.json");
    let model = reef_model::default_models_dir().join("vgg");
    let out = bin().arg(&model).arg("-o").arg(&meta).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("71/71"));
    let m = IdempotenceMetadata::load(&meta).unwrap();
    assert_eq!(m.kernels.len(), 71);
    assert!(m
        .kernels
        .iter()
        .all(|k| k.idempotent && k.group_start_op.is_none()));
    let loaded = reef_model::Model::load(&model).unwrap();
    m.check_kernels(loaded.kernels.iter().map(|k| k.name.as_str()))
        .unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}
