//! What TVM 0.27's dlight Matmul rule emits for fp16 GEMMs on sm_80 and
//! sm_89 (issue 31 item 3, step 2; docs/compile.md "Tensor cores"), run by
//! `compile/tests/tensorcore_probe.py`:
//!
//! - dlight asks for wmma tensorization for an fp16 GEMM whose extents are
//!   all above 64, not for fp32 nor for an extent of 64;
//! - the CUDA-core fallback it builds when tensorization declines has no
//!   tensor-core instruction (`mma.sync`, `wmma.mma`, `wgmma`) in its PTX;
//! - `Schedule.tensorize` works with the apache-tvm-ffi the setup pins
//!   (0.1.14.post1; with 0.1.15.post2 it died with SIGSEGV, on dlight's
//!   wmma path and on a trivial copy intrinsic alike), and the tensorized
//!   kernel's PTX has `wmma.mma` instructions that ptxas assembles for both
//!   architectures.

mod common;
use common::*;
use std::process::Command;

#[test]
fn dlight_tensorizes_fp16_gemms_into_wmma_that_ptxas_assembles() {
    let py = repo_root().join(".venv/bin/python");
    assert!(py.is_file(), "run scripts/setup.sh (reef-compile's venv)");
    let out = Command::new(&py)
        .arg(repo_root().join("compile/tests/tensorcore_probe.py"))
        .args(["sm_80", "sm_89"])
        .env("PYTHONPATH", repo_root().join("compile"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["tvm"], "0.27.0.post1", "{v}");
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for c in cases {
        let fp16 = c["dtype"] == "float16";
        let big = c["mkn"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x.as_u64() > Some(64));
        assert_eq!(c["tensorize_asked"], fp16 && big, "{c}");
        assert_eq!(c["fallback_tc_instructions"], 0, "{c}");
    }
    assert_eq!(v["tvm_ffi"], "0.1.14.post1", "{v}");
    for (k, code) in v["tensorize_exit"].as_object().unwrap() {
        assert_eq!(code, 0, "{k}: Schedule.tensorize failed");
    }
    for arch in ["sm_80", "sm_89"] {
        let t = &v["tensorized"][arch];
        assert!(t["tc_instructions"].as_u64() > Some(0), "{arch}: {t}");
        assert_eq!(
            t["mma_per_entry"]["mm_kernel"], t["tc_instructions"],
            "{arch}: {t}"
        );
        assert_eq!(t["ptxas_exit"], 0, "{arch}: {t}");
    }
}
