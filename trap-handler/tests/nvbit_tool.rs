//! The parts of nvbit-tool/ (REEF §4.6 "Binary instrumentation") that can be
//! checked without NVBit and a GPU:
//! - the injected device functions, built by the tool's own Makefile with
//!   NVBit's flags for each target, disassembled with nvdisasm: the
//!   preemptor loads the flag (volatile), exits when it is set and stores the
//!   execution index (Fig. 8 lines 1–3);
//! - the reef-trace writer the recording mode uses, compiled with g++, its
//!   output read back by reef-check-idem's trace parser (§4.4).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool_dir() -> PathBuf {
    repo_root().join("nvbit-tool")
}

/// `make device` for one target into a temporary build directory; returns
/// the functions of the cubin as nvdisasm prints them.
fn build_device(sm: u32) -> Vec<(String, Vec<String>)> {
    let build = tempfile::tempdir().unwrap();
    let nvcc = nvidia_bin_dir("nvcc").join("nvcc");
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(tool_dir())
        .arg("device")
        .arg(format!("SMS={sm}"))
        .arg(format!("BUILD={}", build.path().display()))
        .arg(format!("NVCC={}", nvcc.display()));
    // nvcc finds cicc and ptxas next to itself through PATH.
    make.env(
        "PATH",
        std::env::join_paths(std::iter::once(nvcc.parent().unwrap().to_path_buf()).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .unwrap(),
    );
    run(&mut make);
    let cubin = build.path().join(format!("inject_funcs.sm_{sm}.cubin"));
    functions(&stdout(nvidia("nvdisasm").arg("-c").arg(&cubin)))
}

fn functions(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(label) = t.strip_suffix(':') {
            if !label.starts_with('.') && !label.contains(char::is_whitespace) {
                out.push((label.to_string(), Vec::new()));
            }
        } else if let (Some(rest), Some(f)) = (t.strip_prefix("/*"), out.last_mut()) {
            if let Some((_, body)) = rest.split_once("*/") {
                f.1.push(body.trim().trim_end_matches(';').trim().to_string());
            }
        }
    }
    out
}

fn check_device(sm: u32) {
    let funcs = build_device(sm);
    let get = |name: &str| {
        &funcs
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("sm_{sm}: no {name} in the cubin"))
            .1
    };
    let pre = get("reef_preemptor");
    let ld = pre
        .iter()
        .position(|i| i.starts_with("LDG.E.STRONG.SYS "))
        .unwrap_or_else(|| panic!("sm_{sm}: no volatile flag load: {pre:?}"));
    let dst = pre[ld]
        .split_once(' ')
        .unwrap()
        .1
        .split(',')
        .next()
        .unwrap();
    let isetp = pre[ld..]
        .iter()
        .position(|i| i.starts_with("ISETP.NE") && i.contains(&format!(", {dst}, RZ,")))
        .map(|p| p + ld)
        .unwrap_or_else(|| panic!("sm_{sm}: flag {dst} never compared with 0: {pre:?}"));
    let pred = pre[isetp]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches(',');
    let exit = pre
        .iter()
        .position(|i| *i == format!("@{pred} EXIT"))
        .unwrap_or_else(|| panic!("sm_{sm}: no `@{pred} EXIT`: {pre:?}"));
    assert!(exit > isetp);
    let store = pre
        .iter()
        .position(|i| i.starts_with("STG.E.STRONG.SYS "))
        .unwrap_or_else(|| panic!("sm_{sm}: no execution-index store: {pre:?}"));
    assert!(store > exit, "sm_{sm}: index stored before the check");
    // Called through NVBit's trampoline: returns, does not end the kernel.
    assert!(pre.iter().any(|i| i.starts_with("RET")), "sm_{sm}: {pre:?}");

    let rec = get("reef_record_access");
    assert!(
        rec.iter().any(|i| i.starts_with("ATOMG.E.ADD.64")),
        "sm_{sm}: record slot not taken with a global 64-bit atomic: {rec:?}"
    );
    assert!(
        rec.iter().any(|i| i.starts_with("QSPC.E.G")),
        "sm_{sm}: generic addresses not filtered to global memory: {rec:?}"
    );
}

#[test]
fn nvcc_device_functions_sm75() {
    check_device(75);
}

#[test]
fn nvcc_device_functions_sm80() {
    check_device(80);
}

#[test]
fn nvcc_device_functions_sm86() {
    check_device(86);
}

#[test]
fn nvcc_device_functions_sm89() {
    check_device(89);
}

#[test]
fn nvcc_device_functions_sm90() {
    check_device(90);
}

fn gxx() -> Command {
    for cand in ["g++", "g++-12"] {
        if Command::new(cand).arg("--version").output().is_ok() {
            return Command::new(cand);
        }
    }
    panic!("g++ not found: run scripts/setup.sh (scripts/setup.d/30-trap-tools.sh installs it)")
}

#[test]
fn trace_writer_output_reads_back_with_reef_check_idem_parser() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("trace_writer_check");
    run(gxx()
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(tool_dir().join("test/trace_writer_check.cpp")));
    let text = stdout(&mut Command::new(&exe));
    let trace = reef_idem::Trace::read(text.as_bytes(), "trace_writer_check")
        .unwrap_or_else(|e| panic!("reef-check-idem rejects the trace: {e}\n{text}"));
    assert_eq!(trace.model, "tiny \"net\"");
    let r = |addr: u64, len: u64| reef_idem::Range { addr, len };
    let ops: Vec<_> = trace
        .ops
        .iter()
        .map(|o| (o.kind, o.name.as_str(), o.reads.clone(), o.writes.clone()))
        .collect();
    use reef_idem::OpKind::*;
    assert_eq!(
        ops,
        vec![
            (
                Memcpy,
                "cuMemcpyHtoD_v2",
                vec![],
                vec![r(0x7f00_0000_1000, 256)]
            ),
            (
                Kernel,
                "_Z5densePKfS0_Pf",
                // 64 adjacent 4-byte reads and an overlapping one: one range.
                vec![r(0x7f00_0000_1000, 256), r(0x7f00_0000_2000, 4)],
                vec![r(0x7f00_0000_3000, 256)]
            ),
            // The empty range is dropped.
            (
                Memset,
                "cuMemsetD32_v2",
                vec![],
                vec![r(0x7f00_0000_4000, 64)]
            ),
            (
                Kernel,
                "relu_inplace\tv2",
                vec![r(0x7f00_0000_3000, 256)],
                vec![r(0x7f00_0000_3000, 256)]
            ),
        ]
    );
    // The in-place kernel is what the analysis must flag (REEF §4.4).
    let analysis = reef_idem::analyze(&trace).expect("small trace");
    let last = analysis.kernels.last().expect("kernels analysed");
    assert!(!last.idempotent, "{last:?}");
}

#[test]
fn makefile_refuses_the_host_tool_without_nvbit() {
    let out = Command::new("make")
        .arg("-C")
        .arg(tool_dir())
        .arg("BUILD=/nonexistent-reef-build")
        .env_remove("NVBIT_PATH")
        .output()
        .expect("run make");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NVBIT_PATH"));
    assert!(!Path::new("/nonexistent-reef-build").exists());
}
