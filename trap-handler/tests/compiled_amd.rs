//! reef-compile for AMD GPUs (issue 29, docs/compile.md "AMD GPUs"): a model
//! compiled with `--arch gfx906 --arch sm_80` gets a code object
//! `kernels.gfx906.hsaco` beside the PTX, for the same schedule. Checked
//! with LLVM's own tools (Debian's llvm-19, scripts/setup.d/16-rocm-compile.sh)
//! and the ELF header read here: an ELF for amdgcn-amd-amdhsa (EM_AMDGPU,
//! ELFOSABI_AMDGPU_HSA, code object version 4, the gfx906 machine in
//! e_flags, target id
//! `amdgcn-amd-amdhsa--gfx906` in the AMDHSA metadata note); its kernel
//! symbols are exactly the schedule's kernel names, each with a kernel
//! descriptor and code llvm-objdump disassembles to `s_endpgm`; the
//! resources recorded in the schedule equal the metadata as llvm-readelf
//! prints it (read again here); each launch fits the kernel's maximum work
//! group; reef-model still loads the directory. Run on the tiny model with
//! two inputs (compile/tests/make_tiny.py --two-inputs; also for gfx90a) and on the onnx
//! package's light_squeezenet. Missing ROCm bitcode and AMD-only or unknown
//! architectures give one-line errors.

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// EF_AMDGPU_MACH_AMDGCN_GFX906 (the low byte of e_flags).
const MACH_GFX906: u32 = 0x2f;

fn venv_bin(tool: &str) -> PathBuf {
    let p = repo_root().join(".venv").join("bin").join(tool);
    assert!(
        p.is_file(),
        "{} not found: run scripts/setup.sh (scripts/setup.d/15-compile.sh installs reef-compile)",
        p.display()
    );
    p
}

/// The venv's reef-compile running this checkout's compiler (the venv's
/// `.pth` names whichever checkout ran the setup).
fn reef_compile() -> Command {
    let mut c = Command::new(venv_bin("reef-compile"));
    c.env("PYTHONPATH", repo_root().join("compile"));
    c
}

fn llvm19(tool: &str) -> Command {
    let p = PathBuf::from(format!("/usr/lib/llvm-19/bin/{tool}"));
    assert!(
        p.is_file(),
        "{} not found: run scripts/setup.sh (scripts/setup.d/16-rocm-compile.sh installs llvm-19)",
        p.display()
    );
    Command::new(p)
}

fn compile(onnx: &Path, dir: &Path, extra: &[&str]) {
    run(reef_compile()
        .arg(onnx)
        .args(["--arch", "gfx906", "--arch", "sm_80"])
        .args(extra)
        .arg("--no-reference")
        .arg("-o")
        .arg(dir));
}

/// Per kernel (`.name`) of the NT_AMDGPU_METADATA note as llvm-readelf
/// prints it: the kernel-level numeric fields (not those of its `.args`).
fn notes_metadata(text: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    let mut cur: Option<BTreeMap<String, u64>> = None;
    let mut name = None;
    let mut in_kernels = false;
    let flush = |cur: &mut Option<BTreeMap<String, u64>>,
                 name: &mut Option<String>,
                 out: &mut BTreeMap<String, BTreeMap<String, u64>>| {
        if let (Some(c), Some(n)) = (cur.take(), name.take()) {
            out.insert(n, c);
        }
    };
    for line in text.lines() {
        if line.trim_start().starts_with("amdhsa.kernels:") {
            in_kernels = true;
            continue;
        }
        if !in_kernels {
            continue;
        }
        if line.trim_start().starts_with("amdhsa.") {
            break;
        }
        // A kernel's map starts with `  - .` at the list's indentation; its
        // fields are indented by 4, the arguments' deeper.
        if line.starts_with("  - ") {
            flush(&mut cur, &mut name, &mut out);
            cur = Some(BTreeMap::new());
        }
        let field = line
            .strip_prefix("  - ")
            .or_else(|| line.strip_prefix("    "));
        let Some(field) = field.filter(|f| f.starts_with('.')) else {
            continue;
        };
        let Some((k, v)) = field[1..].split_once(':') else {
            continue;
        };
        let v = v.trim();
        if k == "name" {
            name = Some(v.to_string());
        } else if let (Some(c), Ok(n)) = (cur.as_mut(), v.parse::<u64>()) {
            c.insert(k.to_string(), n);
        }
    }
    flush(&mut cur, &mut name, &mut out);
    out
}

fn check_code_object(dir: &Path, stem: &str, inputs: usize) {
    let schedule: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{stem}.json"))).unwrap())
            .unwrap();
    assert_eq!(schedule["amd_archs"][0], "gfx906");
    let co = &schedule["code_objects"]["gfx906"];
    assert_eq!(co["file"], "kernels.gfx906.hsaco");
    assert_eq!(co["target_id"], "amdgcn-amd-amdhsa--gfx906");
    let hsaco = dir.join("kernels.gfx906.hsaco");

    // The ELF header, read here.
    let bytes = std::fs::read(&hsaco).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(bytes[4], 2, "ELFCLASS64");
    assert_eq!(bytes[7], ELFOSABI_AMDGPU_HSA);
    let e_machine = u16::from_le_bytes([bytes[18], bytes[19]]);
    assert_eq!(e_machine, EM_AMDGPU);
    let e_flags = u32::from_le_bytes(bytes[48..52].try_into().unwrap());
    assert_eq!(e_flags & 0xff, MACH_GFX906, "e_flags {e_flags:#x}");
    assert_eq!(co["e_machine"], EM_AMDGPU);
    assert_eq!(co["e_flags"], e_flags);
    assert_eq!(bytes.len() as u64, co["bytes"].as_u64().unwrap());
    // Version 4 (ROCm 5's): ELFABIVERSION_AMDGPU_HSA_V4 = 2.
    assert_eq!(bytes[8], 2, "EI_ABIVERSION");
    assert_eq!(co["code_object_version"], 4);

    // reef-model reads the schedule; the AMD resources arrive like ptxas's.
    let m = reef_model::Model::load(dir).expect("reef-model loads the directory");
    let c = m.compiled.as_ref().expect("a reef-compile directory");
    assert_eq!(c.archs, vec!["sm_80".to_string()]);
    assert_eq!(c.inputs.len(), inputs);
    let names: BTreeSet<String> = m.kernels.iter().map(|k| k.name.clone()).collect();

    // Kernel symbols: the launched names, each a global function with its
    // kernel descriptor NAME.kd.
    let syms = stdout(
        llvm19("llvm-readelf")
            .args(["--symbols", "--wide"])
            .arg(&hsaco),
    );
    let mut funcs = BTreeSet::new();
    let mut descriptors = BTreeSet::new();
    for line in syms.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 8 && cols[4] == "GLOBAL" {
            match cols[3] {
                "FUNC" => funcs.insert(cols[7].to_string()),
                "OBJECT" => descriptors.insert(cols[7].to_string()),
                _ => false,
            };
        }
    }
    assert!(names.is_subset(&funcs), "{names:?} not all in {funcs:?}");
    for n in &names {
        assert!(
            descriptors.contains(&format!("{n}.kd")),
            "{n}.kd: {descriptors:?}"
        );
    }

    // The metadata note, as llvm-readelf prints it, equals what was recorded.
    let notes = stdout(llvm19("llvm-readelf").arg("--notes").arg(&hsaco));
    assert!(notes.contains("NT_AMDGPU_METADATA"), "{notes}");
    assert!(
        notes.contains("amdhsa.target:   amdgcn-amd-amdhsa--gfx906"),
        "{notes}"
    );
    let meta = notes_metadata(&notes);
    let recorded = &schedule["resources"]["gfx906"];
    for k in &m.kernels {
        let md = meta
            .get(&k.name)
            .unwrap_or_else(|| panic!("{} has no metadata: {meta:?}", k.name));
        let rec = &recorded[&k.name];
        for f in [
            "vgpr_count",
            "sgpr_count",
            "group_segment_fixed_size",
            "private_segment_fixed_size",
            "wavefront_size",
            "kernarg_segment_size",
            "max_flat_workgroup_size",
        ] {
            assert_eq!(rec[f].as_u64(), md.get(f).copied(), "{} {f}", k.name);
        }
        assert_eq!(md["wavefront_size"], 64, "{}: gfx906 runs wave64", k.name);
        assert!(md["vgpr_count"] > 0 && md["sgpr_count"] > 0, "{}", k.name);
        // A pointer (8 bytes) per argument, at least.
        assert!(
            md["kernarg_segment_size"] >= 8 * k.args.len() as u64,
            "{}",
            k.name
        );
        assert!(
            md["max_flat_workgroup_size"] >= k.threads_per_block() as u64,
            "{}: launched with {} threads",
            k.name,
            k.threads_per_block()
        );
        let r = k.resources["gfx906"];
        assert_eq!(r.registers as u64, md["vgpr_count"]);
        assert_eq!(r.shared_static as u64, md["group_segment_fixed_size"]);
        assert_eq!(r.stack as u64, md["private_segment_fixed_size"]);
    }

    // The code disassembles for gfx906, every kernel ending in s_endpgm.
    let dis = stdout(
        llvm19("llvm-objdump")
            .args(["-d", "--mcpu=gfx906"])
            .arg(&hsaco),
    );
    for n in &names {
        let start = dis
            .find(&format!("<{n}>:"))
            .unwrap_or_else(|| panic!("{n} not disassembled"));
        let body = &dis[start..];
        let end = body[1..].find("\n\n").map_or(body.len(), |e| e + 1);
        assert!(body[..end].contains("s_endpgm"), "{n}: {}", &body[..end]);
    }
}

#[test]
fn two_input_model_compiles_to_a_gfx906_code_object() {
    let tmp = tempfile::tempdir().unwrap();
    let onnx = tmp.path().join("two.onnx");
    run(Command::new(venv_bin("python"))
        .arg(repo_root().join("compile/tests/make_tiny.py"))
        .arg(&onnx)
        .arg("--two-inputs"));
    let dir = tmp.path().join("two");
    compile(&onnx, &dir, &["--arch", "gfx90a"]);
    check_code_object(&dir, "two", 2);
    // gfx90a (MI200) as well: its own code object, target id and machine
    // (EF_AMDGPU_MACH_AMDGCN_GFX90A = 0x3f), the same kernel symbols.
    let schedule: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("two.json")).unwrap()).unwrap();
    assert_eq!(
        schedule["amd_archs"],
        serde_json::json!(["gfx906", "gfx90a"])
    );
    assert_eq!(
        schedule["code_objects"]["gfx90a"]["target_id"],
        "amdgcn-amd-amdhsa--gfx90a"
    );
    let bytes = std::fs::read(dir.join("kernels.gfx90a.hsaco")).unwrap();
    assert_eq!(u16::from_le_bytes([bytes[18], bytes[19]]), EM_AMDGPU);
    assert_eq!(
        u32::from_le_bytes(bytes[48..52].try_into().unwrap()) & 0xff,
        0x3f
    );
    let syms = stdout(
        llvm19("llvm-readelf")
            .args(["--symbols", "--wide"])
            .arg(dir.join("kernels.gfx90a.hsaco")),
    );
    for k in schedule["kernels"].as_array().unwrap() {
        let name = k["name"].as_str().unwrap();
        assert!(
            syms.lines()
                .any(|l| l.contains(" FUNC ") && l.ends_with(name)),
            "{name} not a gfx90a symbol"
        );
        assert!(schedule["resources"]["gfx90a"][name]["vgpr_count"].as_u64() > Some(0));
    }
}

#[test]
fn light_squeezenet_compiles_to_a_gfx906_code_object() {
    let lib = repo_root().join(".venv").join("lib");
    let light = std::fs::read_dir(&lib)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/onnx/backend/test/data/light"))
        .find(|p| p.is_dir())
        .expect("the onnx package's light models: run scripts/setup.sh");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("squeezenet");
    compile(&light.join("light_squeezenet.onnx"), &dir, &[]);
    check_code_object(&dir, "squeezenet", 1);
}

fn compile_error(onnx: &Path, archs: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = reef_compile();
    c.arg(onnx);
    for a in archs {
        c.args(["--arch", a]);
    }
    c.arg("-o").arg(onnx.with_extension("out"));
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("reef-compile: error: "), "{err}");
    err
}

#[test]
fn amd_errors_are_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let onnx = tmp.path().join("tiny.onnx");
    run(Command::new(venv_bin("python"))
        .arg(repo_root().join("compile/tests/make_tiny.py"))
        .arg(&onnx));
    let e = compile_error(
        &onnx,
        &["sm_80", "gfx906"],
        &[("ROCM_PATH", "/nonexistent")],
    );
    assert!(
        e.contains("bitcode not found") && e.contains("rocm-device-libs"),
        "{e}"
    );
    let e = compile_error(&onnx, &["gfx906"], &[]);
    assert!(e.contains("needs an NVIDIA --arch too"), "{e}");
    let e = compile_error(&onnx, &["sm_80", "gfx1100"], &[]);
    assert!(e.contains("gfx906, gfx90a"), "{e}");
}
