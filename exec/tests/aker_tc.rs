//! Tensor-core kernels of reef-compile in Aker's classes and fusion
//! (issue 31 item 3; Aker §5.1 classes, §7 fused kernels; docs/aker.md).
//!
//! The TC kernel is a reef-compile schedule with the numbers reef-compile
//! wrote for BERT-base's first dense layer (`compile/tests/make_bert.py
//! --layers 12 --batch 64 --seq 128`, `reef-compile --fp16 --arch sm_89`,
//! kernel `fused_matmul_cast_add_kernel`: grid 64x6, block 32x16, 72 KB
//! dynamic shared memory, ptxas sm_89 120 registers, 32 `wmma.mma` in its
//! PTX, 2 x 8192 x 768 x 768 flops). The BE kernel is Parboil's sgemm as
//! described in bench/aker-be. What they show:
//!
//! - a kernel whose PTX has MMA instructions (`mma` in its resources) is a
//!   TC kernel: matrix-pipe demand, the preset's tensor-core peak, class
//!   `Tensor`; the same kernel without them is a CUDA-core kernel;
//! - TVM's wmma schedule holds 61,440 of the SM's 65,536 registers, so no
//!   block of another kernel fits beside one of its blocks: Aker's TC x CD
//!   fusion has no ratio to run at (`ratios` is empty). With 64 registers
//!   per thread the same kernel leaves room for sgemm blocks.

use reef_exec::aker::{kclass, ratios};
use reef_model::Model;
use reef_sched::aker::{KClass, Manager};
use reef_sim::{DeviceSpec, KernelShape};
use std::path::Path;

fn dense(regs: u32, mma: u32) -> Model {
    let text = format!(
        r#"{{"storage": [{{"name": "x", "size": 6291456, "stype": "float16"}},
                        {{"name": "w", "size": 589824, "stype": "float16"}},
                        {{"name": "y", "size": 6291456, "stype": "float32"}}],
            "kernels": [{{"name": "fused_matmul_cast_add_kernel", "launch_params": [64,6,1,32,16,1],
                          "args": [0, 1, 2], "reads": [0, 1], "writes": [2],
                          "flops": 9669967872, "bytes_read": 13764096, "bytes_written": 50331648}}],
            "shared_memory": {{"fused_matmul_cast_add_kernel": 73728}},
            "args": [0, 1], "format": "reef-compile/1", "archs": ["sm_89"],
            "ptx": {{"sm_89": "kernels.sm_89.ptx"}},
            "inputs": [0], "params": [1], "outputs": [2],
            "resources": {{"sm_89": {{"fused_matmul_cast_add_kernel":
                {{"registers": {regs}, "shared_static": 0, "mma": {mma}}}}}}}}}"#
    );
    Model::parse("dense", Path::new("/d/dense/dense.json"), &text, None).unwrap()
}

fn shape(m: &Model, spec: &DeviceSpec) -> KernelShape {
    KernelShape::for_model(m, spec).unwrap()[0].as_ref().clone()
}

fn sgemm(spec: &DeviceSpec) -> KernelShape {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/aker-be");
    let m = reef_model::load_named(&dir, "sgemm").unwrap();
    shape(&m, spec)
}

#[test]
fn mma_instructions_make_a_tensor_core_kernel() {
    let spec = DeviceSpec::preset("ada6000").unwrap();
    let tc = shape(&dense(120, 32), &spec);
    let cd = shape(&dense(120, 0), &spec);
    assert_eq!(kclass(&tc.name, &tc), KClass::Tensor);
    assert!(tc.demand.u[0] > 0, "{:?}", tc.demand);
    assert_eq!(cd.demand.u[0], 0, "{:?}", cd.demand);
    assert_ne!(kclass(&cd.name, &cd), KClass::Tensor);
    // At the tensor-core peak (4x the FP32 rate on ada6000) the block is
    // shorter, bounded by its bytes.
    assert!(
        tc.exec_ns(1) < cd.exec_ns(1),
        "{} vs {}",
        tc.exec_ns(1),
        cd.exec_ns(1)
    );
    // The manager's rule (Aker §5.1) then pairs it with a CUDA-core BE.
    let be = sgemm(&spec);
    assert!(Manager::Tacker.fuses(KClass::Tensor, kclass(&be.name, &be)));
    // Without matrix units the MMA count changes nothing.
    let mut no_tc = spec.clone();
    no_tc.matrix_flops = 0;
    assert_eq!(
        shape(&dense(120, 32), &no_tc).demand,
        shape(&dense(120, 0), &no_tc).demand
    );
}

#[test]
fn tvm_wmma_blocks_leave_no_room_for_a_be_block() {
    let spec = DeviceSpec::preset("ada6000").unwrap();
    let be = sgemm(&spec);
    let tc = shape(&dense(120, 32), &spec);
    assert_eq!(tc.regs_per_block, 61_440);
    assert!(ratios(&spec, &tc, &be).is_empty());
    // The registers are what binds: at 64 per thread sgemm blocks fit.
    let lean = shape(&dense(64, 32), &spec);
    assert!(!ratios(&spec, &lean, &be).is_empty());
}

/// End to end with TVM: BERT-base's encoder, one layer at batch 1
/// (`make_bert.py --layers 1 --batch 1 --seq 128`), compiled `--fp16` for
/// sm_89. Its six dense GEMMs (128 x 768 x 768 and the feed-forward's
/// 3072) are tensorized: `mma` > 0 in their PTX, TVM's flop count of the
/// GEMM (2 M N K, plus its fused epilogue) recorded, class `Tensor` on ada6000, and no BE block of
/// sgemm fits beside them. About 40 s (TVM, nvcc, ptxas; no CPU build).
#[test]
fn reef_compile_fp16_builds_tensor_core_gemms() {
    use std::process::Command;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv/bin");
    assert!(
        venv.join("reef-compile").is_file(),
        "run scripts/setup.sh: it installs .venv/bin/reef-compile"
    );
    let dir = std::env::temp_dir().join(format!("reef-aker-tc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let onnx = dir.join("bert1.onnx");
    let run = |c: &mut Command| {
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    run(Command::new(venv.join("python"))
        .arg(root.join("compile/tests/make_bert.py"))
        .arg(&onnx)
        .args(["--layers", "1", "--batch", "1", "--seq", "128"]));
    run(Command::new(venv.join("reef-compile"))
        .arg(&onnx)
        .args([
            "--arch",
            "sm_89",
            "--fp16",
            "--no-cpu",
            "--no-reference",
            "-o",
        ])
        .arg(dir.join("bert1")));
    let m = reef_model::load_named(&dir, "bert1").unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let spec = DeviceSpec::preset("ada6000").unwrap();
    let shapes = KernelShape::for_model(&m, &spec).unwrap();
    let be = sgemm(&spec);
    let mut tc = Vec::new();
    for (k, s) in m.kernels.iter().zip(&shapes) {
        let mma = k.resources["sm_89"].mma;
        assert_eq!(mma > 0, kclass(&s.name, s) == KClass::Tensor, "{}", k.name);
        if mma > 0 {
            assert!(ratios(&spec, s, &be).is_empty(), "{}", k.name);
            tc.push(k.work.unwrap().flops);
        }
    }
    let (m_, h, f) = (128u64, 768u64, 3072u64);
    let mut want = vec![2 * m_ * h * h; 4];
    want.extend([2 * m_ * h * f; 2]);
    tc.sort();
    want.sort();
    // TVM's count adds the fused epilogue (bias add, casts, GELU): a few
    // operations per output element, under 1 % of the GEMM here.
    assert_eq!(tc.len(), want.len(), "the six dense GEMMs: {tc:?}");
    for (got, gemm) in tc.iter().zip(&want) {
        assert!(
            *got >= *gemm && *got < gemm + gemm / 100,
            "{tc:?} vs {want:?}"
        );
    }
}
