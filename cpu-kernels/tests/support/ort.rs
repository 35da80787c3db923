//! ONNX Runtime as the reference for compiled models' outputs (issue 30),
//! shared by the tests that check values (reef-cpu-kernels' `ort`, reefd's
//! `onnx_values`, which includes this file by path): the repository's
//! `.venv` runs reef-compile (this checkout's `compile/`), the model
//! makers and `compile/tests/ort_reference.py`.
//!
//! Tolerance ([`compare`]): |got - want| <= 1e-4 |want| + 1e-5. The
//! absolute term covers values near zero (a softmax probability of 1e-7, a
//! ReLU output summed to ~0), where a relative bound is meaningless: TVM
//! and ONNX Runtime sum in different orders, so results differ in the
//! last bits.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (every crate sits one level below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The venv's python with this checkout's compiler first on the path
/// (whichever checkout the venv's .pth names).
pub fn python() -> Command {
    let py = root().join(".venv/bin/python");
    assert!(
        py.is_file(),
        "{} not found: run scripts/setup.sh (scripts/setup.d installs apache-tvm and onnxruntime)",
        py.display()
    );
    let mut c = Command::new(py);
    c.env("PYTHONPATH", root().join("compile"));
    c
}

/// Runs `c`, panicking with its output when it fails; returns its stdout.
pub fn ok(c: &mut Command) -> String {
    let out = c.output().expect("run python");
    assert!(
        out.status.success(),
        "{c:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory under the system's temporary directory.
pub fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("reef-ort-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// reef-compile `onnx` for sm_80 (which the simulated h100 runs too) into
/// `dir`, with its CPU build.
pub fn compile(onnx: &Path, dir: &Path) {
    compile_with(onnx, dir, &[]);
}

/// [`compile`] with more reef-compile arguments (e.g. `--fp16`).
pub fn compile_with(onnx: &Path, dir: &Path, extra: &[&str]) {
    ok(python()
        .args(["-m", "reef_compile.cli"])
        .arg(onnx)
        .args(["--arch", "sm_80", "--no-reference"])
        .args(extra)
        .arg("-o")
        .arg(dir));
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Tensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub file: String,
}

/// What `ort_reference.py` wrote: the seeded inputs and ONNX Runtime's
/// outputs, in the graph's order, each a raw little-endian file in `dir`.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Manifest {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Manifest {
    pub fn read(&self, t: &Tensor) -> Vec<u8> {
        std::fs::read(self.dir.join(&t.file)).unwrap()
    }
}

/// ONNX Runtime on `onnx` with inputs seeded by `seed` (integers uniform
/// in [0, int_high)), written to `out`.
pub fn ort(onnx: &Path, out: &Path, seed: u64, int_high: u32) -> Manifest {
    ok(python()
        .arg(root().join("compile/tests/ort_reference.py"))
        .arg(onnx)
        .arg(out)
        .args(["--seed", &seed.to_string()])
        .args(["--int-high", &int_high.to_string()]));
    let mut m: Manifest =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    m.dir = out.to_path_buf();
    m
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Max |diff| / |want| over elements with |want| > 1e-3, and the count of
/// elements outside the tolerance (NaN counts as outside).
pub fn compare(got: &[f32], want: &[f32]) -> (f64, usize) {
    compare_within(got, want, 1e-4)
}

/// The relative tolerance of a model's outputs against ONNX Runtime's:
/// 1e-4 (each sums float32 terms in its own order), except where a model's
/// depth makes the two orders drift further apart in a run that nothing
/// preempted, measured by the CPU build alone:
/// - densenet121: 1e-3. 121 layers of concatenated features: seed 2 of the
///   serving test gives one of 1000 values 3.8e-4 apart (0.036907 against
///   ORT's 0.036921) on every run of the CPU build by itself, the same
///   bytes reefd answers with or without preemption.
pub fn rel_tolerance(model: &str) -> f64 {
    match model {
        "densenet121" => 1e-3,
        _ => 1e-4,
    }
}

/// [`compare`] with relative tolerance `rel` (and the same 1e-5 absolute
/// term for values near zero).
pub fn compare_within(got: &[f32], want: &[f32], rel: f64) -> (f64, usize) {
    compare_abs(got, want, rel, 1e-5)
}

/// [`compare_within`] with absolute term `abs`.
pub fn compare_abs(got: &[f32], want: &[f32], rel: f64, abs: f64) -> (f64, usize) {
    assert_eq!(got.len(), want.len());
    let mut worst = 0f64;
    let mut bad = 0;
    for (&g, &w) in got.iter().zip(want) {
        let (g, w) = (g as f64, w as f64);
        let d = (g - w).abs();
        if d.is_nan() || d > rel * w.abs() + abs {
            bad += 1;
        }
        if w.abs() > 1e-3 {
            worst = worst.max(d / w.abs());
        }
    }
    (worst, bad)
}

/// The model of `compile/tests/make_two_io.py` (two inputs, one int64;
/// two outputs) written to `work/two_io.onnx`.
pub fn two_io_onnx(work: &Path) -> PathBuf {
    let onnx = work.join("two_io.onnx");
    ok(python()
        .arg(root().join("compile/tests/make_two_io.py"))
        .arg(&onnx));
    onnx
}

/// `compile/tests/make_pool.py --split`'s model (Relu, AveragePool,
/// Dropout): TVM splits its pooling function into three kernels.
pub fn split_onnx(work: &Path) -> PathBuf {
    let onnx = work.join("split.onnx");
    ok(python()
        .arg(root().join("compile/tests/make_pool.py"))
        .arg(&onnx)
        .arg("--split"));
    onnx
}

/// `compile/tests/make_pool.py`'s model (Relu, MaxPool, grouped Conv):
/// its max pooling kernel accumulates into its output in global memory.
pub fn pool_onnx(work: &Path) -> PathBuf {
    let onnx = work.join("pool.onnx");
    ok(python()
        .arg(root().join("compile/tests/make_pool.py"))
        .arg(&onnx));
    onnx
}

/// The onnx package's `light_NAME.onnx` with random weights
/// (`compile/tests/randomize_light.py`: the light models build each
/// weight as one constant, so their outputs are all equal), written to
/// `work/NAME_random.onnx`.
pub fn light_onnx(name: &str, work: &Path) -> PathBuf {
    let dir = ok(python().args([
        "-c",
        "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), \
         'backend/test/data/light'))",
    ]));
    let light = PathBuf::from(dir.trim()).join(format!("light_{name}.onnx"));
    assert!(
        light.is_file(),
        "the onnx package ships {}",
        light.display()
    );
    let onnx = work.join(format!("{name}_random.onnx"));
    ok(python()
        .arg(root().join("compile/tests/randomize_light.py"))
        .arg(&light)
        .arg(&onnx));
    onnx
}
