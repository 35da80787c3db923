//! Finding and running the external tools the tests check our code with:
//! NVIDIA's nvdisasm/ptxas/nvcc from the repository's virtualenv (PyPI
//! packages nvidia-cuda-nvdisasm and nvidia-cuda-nvcc, installed by
//! scripts/setup.sh) and LLVM 14's llvm-mc.
#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    std::env::var_os("REEF_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// The directory holding nvdisasm, ptxas and nvcc inside `.venv`
/// (`lib/python3.X/site-packages/nvidia/<cu13|cuda_nvcc|…>/bin`).
pub fn nvidia_bin_dir(tool: &str) -> PathBuf {
    nvidia_bin_dir_in(&repo_root(), tool).unwrap_or_else(|e| panic!("{e}"))
}

/// [`nvidia_bin_dir`] under another repository root; the error says what
/// to run.
pub fn nvidia_bin_dir_in(root: &Path, tool: &str) -> Result<PathBuf, String> {
    let venv = root.join(".venv");
    let mut found = Vec::new();
    if let Ok(libs) = std::fs::read_dir(venv.join("lib")) {
        for py in libs.flatten() {
            let nv = py.path().join("site-packages").join("nvidia");
            if let Ok(pkgs) = std::fs::read_dir(&nv) {
                for pkg in pkgs.flatten() {
                    let bin = pkg.path().join("bin");
                    if bin.join(tool).is_file() {
                        found.push(bin);
                    }
                }
            }
        }
    }
    found.sort();
    found.pop().ok_or_else(|| {
        format!(
            "`{tool}` not found under {}/lib/python*/site-packages/nvidia/*/bin: \
             run scripts/setup.sh (it installs the PyPI packages nvidia-cuda-nvdisasm \
             and nvidia-cuda-nvcc into the repository's .venv)",
            venv.display()
        )
    })
}

/// A command for one of NVIDIA's tools, with its bin directory first on PATH
/// (nvcc finds cicc, ptxas and fatbinary there).
pub fn nvidia(tool: &str) -> Command {
    let dir = nvidia_bin_dir(tool);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![dir.clone()];
    paths.extend(std::env::split_paths(&path));
    let mut c = Command::new(dir.join(tool));
    c.env("PATH", std::env::join_paths(paths).expect("PATH entries"));
    c
}

/// LLVM's MC layer (for the AMDGPU disassembler): llvm-mc-14 or llvm-mc.
pub fn llvm_mc() -> Command {
    for cand in [
        "/usr/lib/llvm-14/bin/llvm-mc",
        "/usr/bin/llvm-mc-14",
        "/usr/bin/llvm-mc",
    ] {
        if Path::new(cand).is_file() {
            return Command::new(cand);
        }
    }
    panic!(
        "llvm-mc (LLVM 14, with the AMDGPU target) not found: run scripts/setup.sh \
         (scripts/setup.d/30-trap-tools.sh installs the Debian package llvm-14)"
    )
}

/// Runs a command, panicking with its stderr when it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).expect("tool output is UTF-8")
}

/// One instruction as nvdisasm prints it: offset, text (without the ` ;`),
/// and with `-hex` its two 64-bit words.
#[derive(Debug, Clone)]
pub struct SassLine {
    pub offset: u64,
    pub text: String,
    pub words: Option<(u64, u64)>,
}

/// Parses nvdisasm output (`/*0010*/  MOV R3, 0x7f12 ;  /* 0x… */` lines,
/// with `-hex` followed by a line holding the second word).
pub fn parse_nvdisasm(text: &str) -> Vec<SassLine> {
    let mut out: Vec<SassLine> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("/*") {
            if let Some((off, body)) = rest.split_once("*/") {
                if let Ok(offset) = u64::from_str_radix(off, 16) {
                    let (instr, hex) = match body.split_once("/*") {
                        Some((i, h)) => (i, Some(h)),
                        None => (body, None),
                    };
                    let text = instr.trim().trim_end_matches(';').trim().to_string();
                    let lo = hex.and_then(parse_word);
                    out.push(SassLine {
                        offset,
                        text,
                        words: lo.map(|lo| (lo, 0)),
                    });
                    continue;
                }
            }
            // `/* 0x000fe20000000f00 */`: the second word of the previous line.
            if let (Some(hi), Some(last)) = (parse_word(rest), out.last_mut()) {
                if let Some((lo, 0)) = last.words {
                    last.words = Some((lo, hi));
                }
            }
        }
    }
    out
}

fn parse_word(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches("*/").trim();
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Disassembles raw SASS bytes with `nvdisasm -b SMxx`.
pub fn nvdisasm_raw(arch: &str, file: &Path) -> Vec<String> {
    let out = stdout(nvidia("nvdisasm").arg("-b").arg(arch).arg(file));
    parse_nvdisasm(&out).into_iter().map(|l| l.text).collect()
}

/// Runs one of this crate's binaries.
pub fn reef_bin(name: &str) -> Command {
    let path = match name {
        "reef-trap" => env!("CARGO_BIN_EXE_reef-trap"),
        "reef-ptx-inject" => env!("CARGO_BIN_EXE_reef-ptx-inject"),
        other => panic!("no binary {other}"),
    };
    Command::new(path)
}
