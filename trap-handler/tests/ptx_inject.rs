//! REEF's code transformer (Fig. 8 lines 1–4) on real nvcc output: CUDA
//! kernels are compiled to PTX by nvcc for each target, `reef-ptx-inject`
//! adds the preemptor, ptxas assembles the result and nvdisasm shows that
//! every kernel starts with the flag load, the compare and `@P EXIT`.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const KERNELS: &str = "tests/data/kernels.cu";

/// The kernels of tests/data/kernels.cu as they appear in the cubin.
const ENTRIES: [&str; 5] = [
    "dense",
    "_Z10reduce_sumPKfPf5Shape",
    "_Z5scaleIfEvPT_S0_j",
    "_Z5scaleIdEvPT_S0_j",
    "tick",
];

fn nvcc_ptx(sm: u32, dir: &Path) -> PathBuf {
    nvcc_ptx_with(sm, dir, &[])
}

fn nvcc_ptx_with(sm: u32, dir: &Path, flags: &[&str]) -> PathBuf {
    let out = dir.join(format!("kernels-sm{sm}.ptx"));
    run(nvidia("nvcc")
        .args(flags)
        .args(["-ptx", &format!("-arch=sm_{sm}"), "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(KERNELS)));
    out
}

fn ptxas(sm: u32, ptx: &Path) -> PathBuf {
    let cubin = ptx.with_extension("cubin");
    run(nvidia("ptxas")
        .arg(format!("-arch=sm_{sm}"))
        .arg(ptx)
        .arg("-o")
        .arg(&cubin));
    cubin
}

/// What nvdisasm shows of a cubin: each function's instructions and the
/// symbols whose addresses ptxas placed in constant bank 4.
struct Cubin {
    functions: BTreeMap<String, Vec<String>>,
    bank4: BTreeMap<u64, String>,
}

fn disassemble(cubin: &Path) -> Cubin {
    let text = stdout(nvidia("nvdisasm").arg(cubin));
    let (mut functions, mut bank4) = (BTreeMap::new(), BTreeMap::new());
    let mut section = String::new();
    let mut func: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(s) = t
            .strip_prefix(".section")
            .filter(|s| s.starts_with(char::is_whitespace))
        {
            section = s.trim().split(',').next().unwrap_or("").to_string();
            func = None;
        } else if section.starts_with(".text.") {
            if let Some(label) = t.strip_suffix(':') {
                if !label.starts_with('.') && !label.contains(char::is_whitespace) {
                    func = Some(label.to_string());
                }
            } else if let (Some(f), Some(rest)) = (&func, t.strip_prefix("/*")) {
                if let Some((_, body)) = rest.split_once("*/") {
                    let instr = body.trim().trim_end_matches(';').trim();
                    functions
                        .entry(f.clone())
                        .or_insert_with(Vec::new)
                        .push(instr.to_string());
                }
            }
        } else if section == ".nv.constant4" {
            // `/*0000*/ 	.dword	reef_preempt_flag`
            if let Some(rest) = t.strip_prefix("/*") {
                if let Some((off, body)) = rest.split_once("*/") {
                    let mut words = body.split_whitespace();
                    if let (Ok(off), Some(".dword"), Some(sym)) =
                        (u64::from_str_radix(off, 16), words.next(), words.next())
                    {
                        bank4.insert(off, sym.to_string());
                    }
                }
            }
        }
    }
    Cubin { functions, bank4 }
}

/// Offsets into constant bank 4 an instruction reads (`c[0x4][0x8]`,
/// `c[0x4][RZ]` = 0).
fn bank4_offsets(instr: &str) -> Vec<u64> {
    instr
        .split("c[0x4][")
        .skip(1)
        .filter_map(|s| s.split(']').next())
        .filter_map(|o| match o {
            "RZ" => Some(0),
            hex => u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok(),
        })
        .collect()
}

/// Checks that `code` starts with the preemptor: one volatile global load of
/// the flag (address from `flag`'s slot in bank 4), a compare of the loaded
/// register with zero, `@P EXIT` on that predicate, and no store before it;
/// the index store (`.STRONG.SYS`) follows. Returns a description of what is
/// wrong.
fn check_preemptor(name: &str, code: &[String], cubin: &Cubin) -> Result<(), String> {
    let flag_slots: Vec<u64> = cubin
        .bank4
        .iter()
        .filter(|(_, s)| s.as_str() == "reef_preempt_flag")
        .map(|(o, _)| *o)
        .collect();
    let exit_at = code
        .iter()
        .position(|i| i.starts_with('@') && i.ends_with(" EXIT"))
        .ok_or(format!("{name}: no predicated EXIT"))?;
    let prefix = &code[..exit_at];
    let loads: Vec<&String> = prefix
        .iter()
        .filter(|i| i.starts_with("LDG") || i.starts_with("LD."))
        .collect();
    let [load] = loads[..] else {
        return Err(format!(
            "{name}: expected one load before the EXIT, got {loads:?}"
        ));
    };
    if !load.starts_with("LDG.E.STRONG.SYS ") && !load.starts_with("LD.E.STRONG.SYS ") {
        return Err(format!(
            "{name}: the flag load `{load}` is not volatile (.STRONG.SYS)"
        ));
    }
    let dst = load
        .split_once(' ')
        .map_or("", |(_, ops)| ops)
        .split(',')
        .next()
        .unwrap()
        .trim()
        .to_string();
    if !prefix
        .iter()
        .flat_map(|i| bank4_offsets(i))
        .any(|o| flag_slots.contains(&o))
    {
        return Err(format!(
            "{name}: the load's address is not reef_preempt_flag's (bank 4 {:?}): {prefix:?}",
            cubin.bank4
        ));
    }
    let guard = code[exit_at].split_whitespace().next().unwrap();
    let pred = guard.trim_start_matches('@');
    let want = format!("ISETP.NE.U32.AND {pred}, PT, {dst}, RZ, PT");
    if !prefix.contains(&want) {
        return Err(format!(
            "{name}: no `{want}` before `{}`: {prefix:?}",
            code[exit_at]
        ));
    }
    if let Some(st) = prefix
        .iter()
        .find(|i| i.starts_with("ST") && !i.starts_with("STS") || i.starts_with("BAR"))
    {
        return Err(format!("{name}: `{st}` runs before the preempt check"));
    }
    // Fig. 8 line 3: the kernel's index parameter (constant bank 0) is
    // stored to reef_exec_index (its slot in bank 4) after the check.
    let index_slots: Vec<u64> = cubin
        .bank4
        .iter()
        .filter(|(_, s)| s.as_str() == "reef_exec_index")
        .map(|(o, _)| *o)
        .collect();
    let ok = (exit_at..code.len())
        .filter(|&k| code[k].starts_with("STG.E.STRONG.SYS "))
        .any(|k| {
            let ops = code[k].split_once(' ').map_or("", |(_, o)| o);
            let (addr, value) = ops.rsplit_once(", ").unwrap_or(("", ""));
            // `[R2.64]`, `[UR4]`, `desc[UR4][R2.64]`: the last bracket is the base.
            let base = addr
                .rsplit('[')
                .next()
                .unwrap_or("")
                .trim_end_matches(']')
                .trim_end_matches(".64");
            let addr_ok = defining(code, k, base)
                .is_some_and(|d| bank4_offsets(d).iter().any(|o| index_slots.contains(o)));
            let value_ok = defining(code, k, value).is_some_and(|d| d.contains("c[0x0]["));
            addr_ok && value_ok
        });
    if !ok {
        return Err(format!(
            "{name}: no store of the index parameter to reef_exec_index after the check \
             (bank 4 {:?})",
            cubin.bank4
        ));
    }
    Ok(())
}

/// The last instruction before `before` whose destination is `reg`; a
/// `.64` load (`LDC.64 R6, …`) defines R6 and R7.
fn defining<'a>(code: &'a [String], before: usize, reg: &str) -> Option<&'a String> {
    let split = |r: &str| -> Option<(String, u32)> {
        let digits = r.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        Some((
            r[..r.len() - digits.len()].to_string(),
            digits.parse().ok()?,
        ))
    };
    let (class, num) = split(reg)?;
    code[..before].iter().rev().find(|i| {
        let body = if i.starts_with('@') {
            i.split_once(' ').map_or("", |(_, b)| b)
        } else {
            i.as_str()
        };
        let Some((opcode, ops)) = body.split_once(' ') else {
            return false;
        };
        let width = if opcode.contains(".64") { 2 } else { 1 };
        split(ops.split(',').next().unwrap_or("").trim())
            .is_some_and(|(c, n)| c == class && (n..n + width).contains(&num))
    })
}

fn inject_cli(input: &Path, output: &Path, extra: &[&str]) -> String {
    let out = run(reef_bin("reef-ptx-inject")
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(extra));
    String::from_utf8(out.stderr).unwrap()
}

fn check_target(sm: u32) {
    let dir = tempfile::tempdir().unwrap();
    let ptx = nvcc_ptx(sm, dir.path());
    let injected = dir.path().join(format!("kernels-sm{sm}.reef.ptx"));
    let msg = inject_cli(&ptx, &injected, &[]);
    assert!(msg.contains("5 kernel(s)"), "{msg}");

    let plain = disassemble(&ptxas(sm, &ptx));
    let patched = disassemble(&ptxas(sm, &injected));
    for name in ENTRIES {
        let code = patched
            .functions
            .get(name)
            .unwrap_or_else(|| panic!("sm_{sm}: no {name} in {:?}", patched.functions.keys()));
        if let Err(e) = check_preemptor(name, code, &patched) {
            panic!("sm_{sm}: {e}\n{}", code.join("\n"));
        }
        // The same check rejects the kernel as nvcc compiled it.
        assert!(
            check_preemptor(name, &plain.functions[name], &plain).is_err(),
            "sm_{sm}: {name} passes without injection"
        );
    }
}

#[test]
fn nvcc_ptxas_sm75_every_entry_checks_the_flag() {
    check_target(75);
}

#[test]
fn nvcc_ptxas_sm80_every_entry_checks_the_flag() {
    check_target(80);
}

#[test]
fn nvcc_ptxas_sm86_every_entry_checks_the_flag() {
    check_target(86);
}

#[test]
fn nvcc_ptxas_sm89_every_entry_checks_the_flag() {
    check_target(89);
}

#[test]
fn nvcc_ptxas_sm90_every_entry_checks_the_flag() {
    check_target(90);
}

/// PTX with line information (`.file`/`.loc` with quoted paths) and with
/// full debug information (`-G`: DWARF `.section` blocks at module scope)
/// is injected and still assembles; with `-lineinfo` the code is optimised
/// as usual and the entry check is in place.
#[test]
fn nvcc_debug_info_ptx_assembles() {
    for flags in [&["-lineinfo"][..], &["-G"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let ptx = nvcc_ptx_with(86, dir.path(), flags);
        let text = std::fs::read_to_string(&ptx).unwrap();
        assert!(text.contains(".file"), "{flags:?}: no .file directive");
        let injected = dir.path().join("debug.reef.ptx");
        let msg = inject_cli(&ptx, &injected, &[]);
        assert!(msg.contains("5 kernel(s)"), "{flags:?}: {msg}");
        let cubin = disassemble(&ptxas(86, &injected));
        for name in ENTRIES {
            let code = &cubin.functions[name];
            if flags == ["-lineinfo"] {
                if let Err(e) = check_preemptor(name, code, &cubin) {
                    panic!("{flags:?}: {e}");
                }
            } else {
                assert!(
                    code.iter()
                        .any(|i| i.starts_with('@') && i.ends_with(" EXIT")),
                    "-G: {name} has no conditional EXIT"
                );
            }
        }
    }
}

/// `--flag-symbol` renames the flag; ptxas still accepts the module.
#[test]
fn custom_flag_symbol_assembles() {
    let dir = tempfile::tempdir().unwrap();
    let ptx = nvcc_ptx(80, dir.path());
    let injected = dir.path().join("renamed.ptx");
    inject_cli(&ptx, &injected, &["--flag-symbol", "be_stream_flag"]);
    let cubin = disassemble(&ptxas(80, &injected));
    assert!(cubin.bank4.values().any(|s| s == "be_stream_flag"));
    assert!(!cubin.bank4.values().any(|s| s == "reef_preempt_flag"));
}

#[test]
fn malformed_ptx_fails_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.ptx");
    let out_file = dir.path().join("out.ptx");
    for (src, needle) in [
        ("int main() {}\n", "bad.ptx:1: expected `.version`"),
        (
            ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(\n.param .u64 p\n{\nret;\n}\n",
            "bad.ptx:4: parameter list of kernel `k` is not closed",
        ),
        (
            ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\nret;\n",
            "bad.ptx:6: 1 unclosed `{`",
        ),
    ] {
        std::fs::write(&bad, src).unwrap();
        let out = reef_bin("reef-ptx-inject")
            .arg(&bad)
            .arg("-o")
            .arg(&out_file)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
        assert!(!out_file.exists());
    }
    let out = reef_bin("reef-ptx-inject")
        .arg(dir.path().join("missing.ptx"))
        .arg("-o")
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read PTX"));
}
