//! The AMD trap-handler patch (gfx906, gfx90a) as LLVM's AMDGPU disassembler
//! reads it: `reef-trap amd` writes raw bytes, `llvm-mc --disassemble` must
//! print exactly the intended instructions.

mod common;
use common::*;
use std::io::Write;
use std::process::Stdio;

/// Disassembles raw bytes with `llvm-mc --disassemble -arch=amdgcn`.
fn llvm_disassemble(mcpu: &str, bytes: &[u8]) -> Vec<String> {
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:#04x}")).collect();
    let mut child = llvm_mc()
        .args(["--disassemble", "-arch=amdgcn", &format!("-mcpu={mcpu}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn llvm-mc");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(hex.join(" ").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !err.contains("invalid"),
        "llvm-mc rejected the bytes: {err}"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('.'))
        .map(|l| l.split(" ;").next().unwrap().trim().to_string())
        .collect()
}

fn generate(gfx: &str, addr: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trap.bin");
    run(reef_bin("reef-trap")
        .args(["amd", "--gfx", gfx, "--flag-addr", addr, "-o"])
        .arg(&file));
    std::fs::read(&file).unwrap()
}

/// The sequence llvm-mc must print for a flag at an address whose low and
/// high 32-bit halves print as `lo` and `hi`.
fn expected(lo: &str, hi: &str) -> Vec<String> {
    vec![
        format!("s_mov_b32 ttmp2, {lo}"),
        format!("s_mov_b32 ttmp3, {hi}"),
        "s_load_dword ttmp2, ttmp[2:3], 0x0 glc".into(),
        "s_waitcnt lgkmcnt(0)".into(),
        "s_cmp_eq_u32 ttmp2, 0".into(),
        "s_cbranch_scc1 1".into(),
        "s_endpgm".into(),
    ]
}

fn check(gfx: &str, mcpu: &str) {
    assert_eq!(
        llvm_disassemble(mcpu, &generate(gfx, "0x7f1234567890")),
        expected("0x34567890", "0x7f12"),
        "{mcpu}"
    );
    assert_eq!(
        llvm_disassemble(mcpu, &generate(gfx, "4096")),
        expected("0x1000", "0"),
        "{mcpu}"
    );
}

#[test]
fn llvm_gfx906_exact_sequence() {
    check("906", "gfx906");
}

#[test]
fn llvm_gfx90a_exact_sequence() {
    check("90a", "gfx90a");
}

/// The branch skips exactly the `s_endpgm`: its target is the first byte
/// after the patch, where the original handler continues.
#[test]
fn branch_falls_through_to_the_original_handler() {
    let bytes = generate("906", "0x1000");
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let br = words.iter().position(|w| w >> 16 == 0xbf85).unwrap();
    let simm = words[br] as u16 as i16 as isize;
    // SOPP branch target = address of next instruction + 4 * simm16.
    let target = (br as isize + 1 + simm) * 4;
    assert_eq!(target as usize, bytes.len());
    assert_eq!(words.last(), Some(&0xbf81_0000), "last word is s_endpgm");
}

#[test]
fn bad_target_exits_non_zero() {
    let out = reef_bin("reef-trap")
        .args([
            "amd",
            "--gfx",
            "1030",
            "--flag-addr",
            "0x1000",
            "-o",
            "/dev/null",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gfx1030"));
}
