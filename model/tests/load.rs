//! Loader tests: the five measured MI50 models load with the counts of
//! ../shared/models/README.md, and malformed files give errors naming the
//! file, the item and the problem.

use reef_model::{default_models_dir, load_all, load_named, Model};
use std::fs;
use std::path::Path;

const SCHEDULE: &str = r#"{
  "storage": [
    {"name": "data", "size": 16, "stype": "float32"},
    {"name": "p0", "size": 4, "stype": "int64"},
    {"name": "null", "size": 8, "stype": "uint1"}
  ],
  "kernels": [
    {"name": "k_a", "launch_params": [2, 1, 1, 64, 1, 1], "args": [0, 1, 2]},
    {"name": "k_b", "launch_params": [1, 3, 1, 32, 2, 1], "args": [2, 0]}
  ],
  "args": [0, 1],
  "shared_memory": {"k_a": 1024}
}"#;

const PROFILE: &str = r#"{"model_latency": 30, "kernel_latency": {
  "k_a": {"total_latency": 20, "latency": [10, 12, 15]},
  "k_b": {"total_latency": 14, "latency": [7]}
}}"#;

fn write_model(dir: &Path, schedule: &str, profile: Option<&str>) -> std::path::PathBuf {
    let m = dir.join("toy");
    fs::create_dir_all(&m).unwrap();
    fs::write(m.join("toy.json"), schedule).unwrap();
    if let Some(p) = profile {
        fs::write(m.join("toy.profile.json"), p).unwrap();
    }
    m
}

fn err_of(schedule: &str, profile: Option<&str>) -> String {
    let t = tempfile::tempdir().unwrap();
    let m = write_model(t.path(), schedule, profile);
    Model::load(&m).unwrap_err().to_string()
}

#[test]
fn toy_model_fields() {
    let t = tempfile::tempdir().unwrap();
    let m = write_model(t.path(), SCHEDULE, Some(PROFILE));
    let model = Model::load(&m).unwrap();
    assert_eq!(model.name, "toy");
    assert_eq!(model.buffers[0].bytes, 64);
    assert_eq!(model.buffers[1].bytes, 32);
    assert_eq!(model.buffers[2].bytes, 8);
    let a = &model.kernels[0];
    assert_eq!(a.reads, vec![0, 1]);
    assert_eq!(a.writes, vec![2]);
    assert_eq!(a.shared_mem_bytes, 1024);
    assert_eq!(a.num_blocks(), 2);
    let b = &model.kernels[1];
    assert_eq!(b.num_blocks(), 3);
    assert_eq!(b.threads_per_block(), 64);
    assert_eq!(b.shared_mem_bytes, 0);
    assert_eq!(b.writes, vec![0]);
    let pa = a.profile.as_ref().unwrap();
    assert_eq!(pa.total_latency_ns, 20_000);
    assert_eq!(pa.block_latency_ns, vec![10_000, 12_000, 15_000]);
    // Past the measured range the curve continues with its last slope.
    assert_eq!(pa.block_ns(4), 18_000);
    assert_eq!(pa.block_ns(2), 12_000);
    assert_eq!(model.measured_latency_ns(), Some(30_000));
    // Loading the schedule file directly gives the same model.
    let direct = Model::load(&m.join("toy.json")).unwrap();
    assert_eq!(direct, model);
}

#[test]
fn profile_is_optional() {
    let t = tempfile::tempdir().unwrap();
    let m = write_model(t.path(), SCHEDULE, None);
    let model = Model::load(&m).unwrap();
    assert!(model.profile.is_none());
    assert!(model.kernels.iter().all(|k| k.profile.is_none()));
}

#[test]
fn not_json() {
    let e = err_of("this is not json", None);
    assert!(e.contains("toy.json"), "{e}");
    assert!(e.contains("not a valid kernel schedule JSON"), "{e}");
}

#[test]
fn profile_not_json() {
    let e = err_of(SCHEDULE, Some("{oops"));
    assert!(e.contains("toy.profile.json"), "{e}");
    assert!(e.contains("not a valid kernel profile JSON"), "{e}");
}

#[test]
fn kernel_without_profile_entry() {
    let p = r#"{"model_latency": 30, "kernel_latency": {
      "k_a": {"total_latency": 20, "latency": [10]}}}"#;
    let e = err_of(SCHEDULE, Some(p));
    assert!(e.contains("toy.profile.json"), "{e}");
    assert!(e.contains("kernels[1] (k_b)"), "{e}");
    assert!(e.contains("no entry in kernel_latency"), "{e}");
}

#[test]
fn launch_params_wrong_length() {
    let s = SCHEDULE.replace("[1, 3, 1, 32, 2, 1]", "[1, 3, 32, 2, 1]");
    let e = err_of(&s, None);
    assert!(e.contains("toy.json"), "{e}");
    assert!(e.contains("kernels[1] (k_b)"), "{e}");
    assert!(e.contains("launch_params has 5 values, expected 6"), "{e}");
}

#[test]
fn storage_index_out_of_range() {
    let s = SCHEDULE.replace("\"args\": [2, 0]", "\"args\": [7, 0]");
    let e = err_of(&s, None);
    assert!(e.contains("kernels[1] (k_b)"), "{e}");
    assert!(e.contains("7 is out of range"), "{e}");
    let s = SCHEDULE.replace("\"args\": [0, 1],", "\"args\": [0, -1],");
    let e = err_of(&s, None);
    assert!(e.contains("args[1]"), "{e}");
}

#[test]
fn unknown_stype_and_empty_curve() {
    let e = err_of(&SCHEDULE.replace("int64", "complex128"), None);
    assert!(e.contains("storage[1] (p0)"), "{e}");
    assert!(e.contains("unknown stype"), "{e}");
    let e = err_of(SCHEDULE, Some(&PROFILE.replace("[7]", "[]")));
    assert!(e.contains("kernel_latency[k_b]"), "{e}");
}

#[test]
fn missing_files() {
    let t = tempfile::tempdir().unwrap();
    let e = Model::load(t.path()).unwrap_err().to_string();
    assert!(e.contains("must contain"), "{e}");
    let e = Model::load(&t.path().join("nope.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.json"), "{e}");
    let e = load_all(t.path()).unwrap_err().to_string();
    assert!(e.contains("no subdirectory"), "{e}");
}

#[test]
fn measured_models_match_readme() {
    let dir = default_models_dir();
    let models = load_all(&dir).unwrap();
    let got: Vec<(String, usize, usize, u64)> = models
        .iter()
        .map(|m| {
            (
                m.name.clone(),
                m.kernels.len(),
                m.buffers.len(),
                m.measured_latency_ns().unwrap() / 1000,
            )
        })
        .collect();
    let want = [
        ("bert", 205, 112, 5426),
        ("densenet", 207, 411, 3743),
        ("inception", 146, 204, 8273),
        ("resnet152", 207, 317, 13233),
        ("vgg", 71, 113, 4824),
    ];
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1, g.2, g.3), w);
    }
    for m in &models {
        assert!(m.kernels.iter().all(|k| k.profile.is_some()));
    }
    let vgg = load_named(&dir, "vgg19-imagenet").unwrap();
    assert_eq!(vgg.name, "vgg");
    assert!(load_named(&dir, "alexnet").is_err());
}

/// `successors_clear_of` on the measured vgg: kernel 70 writes storage 94,
/// which kernel 69 reads (the pair behind a stale answer under
/// `reef-bench hostile`), so no successor of 69 is clear; kernel 68 reads
/// only storage 94, which 69 does not write, and writes 91, which 69 reads
/// but does not write: its successor 69 is clear and 70 (writing 94, which
/// 68 reads) is not.
#[test]
fn successors_clear_of_counts_successors_that_write_nothing_a_kernel_touches() {
    let vgg = load_named(&default_models_dir(), "vgg").unwrap();
    let ks = &vgg.kernels;
    assert!(ks[70].writes.iter().any(|b| ks[69].reads.contains(b)));
    let clear = vgg.successors_clear_of(4);
    assert_eq!(clear.len(), ks.len());
    assert_eq!(clear[69], 0);
    assert_eq!(clear[68], 1);
    assert_eq!(*clear.last().unwrap(), 0);
    // Bounded by `max`, and by the kernels left.
    assert!(clear.iter().all(|&c| c <= 4));
    assert_eq!(vgg.successors_clear_of(0), vec![0; ks.len()]);
}
