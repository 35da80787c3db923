//! The NVIDIA trap-handler patch (REEF §4.6 "Kernel killing") as NVIDIA's own
//! disassembler reads it: `reef-trap nvidia` writes raw bytes, `nvdisasm -b
//! SMxx` must print exactly the intended instructions, and the control words
//! must match what ptxas writes for the same load → compare → exit chain.

mod common;
use common::*;
use reef_trap::sass::{from_bytes, Ctrl, Sm};

fn generate(sm: u32, args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("trap-sm{sm}.bin"));
    let out = run(reef_bin("reef-trap")
        .args(["nvidia", "--sm", &sm.to_string()])
        .args(args)
        .arg("-o")
        .arg(&file));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("sm_{sm}")));
    (dir, file)
}

/// Default registers (R2/R3, P0, UR4/UR5), the flag at 0x7f1234567890.
fn expected_default(sm: u32) -> Vec<&'static str> {
    match sm {
        75 => vec![
            "MOV R2, 0x34567890",
            "MOV R3, 0x7f12",
            "LD.E.STRONG.SYS R2, [R2]",
            "ISETP.NE.U32.AND P0, PT, R2, RZ, PT",
            "@P0 EXIT",
        ],
        80 | 86 | 89 => vec![
            "MOV R2, 0x34567890",
            "MOV R3, 0x7f12",
            "ULDC.64 UR4, c[0x0][0x118]",
            "LD.E.STRONG.SYS R2, [R2.64]",
            "ISETP.NE.U32.AND P0, PT, R2, RZ, PT",
            "@P0 EXIT",
        ],
        90 => vec![
            "MOV R2, 0x34567890",
            "MOV R3, 0x7f12",
            "ULDC.64 UR4, c[0x0][0x208]",
            "LD.E.STRONG.SYS R2, desc[UR4][R2.64]",
            "ISETP.NE.U32.AND P0, PT, R2, RZ, PT",
            "@P0 EXIT",
        ],
        _ => unreachable!("not a tested target"),
    }
}

/// Other registers (R10/R11, P3, UR6/UR7) and a flag below 4 GiB.
fn expected_other_regs(sm: u32) -> Vec<&'static str> {
    match sm {
        75 => vec![
            "MOV R10, 0xdead0",
            "MOV R11, 0x0",
            "LD.E.STRONG.SYS R10, [R10]",
            "ISETP.NE.U32.AND P3, PT, R10, RZ, PT",
            "@P3 EXIT",
        ],
        80 | 86 | 89 => vec![
            "MOV R10, 0xdead0",
            "MOV R11, 0x0",
            "ULDC.64 UR6, c[0x0][0x118]",
            "LD.E.STRONG.SYS R10, [R10.64]",
            "ISETP.NE.U32.AND P3, PT, R10, RZ, PT",
            "@P3 EXIT",
        ],
        90 => vec![
            "MOV R10, 0xdead0",
            "MOV R11, 0x0",
            "ULDC.64 UR6, c[0x0][0x208]",
            "LD.E.STRONG.SYS R10, desc[UR6][R10.64]",
            "ISETP.NE.U32.AND P3, PT, R10, RZ, PT",
            "@P3 EXIT",
        ],
        _ => unreachable!("not a tested target"),
    }
}

fn check_disassembly(sm: u32) {
    let (_d, file) = generate(sm, &["--flag-addr", "0x7f1234567890"]);
    assert_eq!(
        nvdisasm_raw(&format!("SM{sm}"), &file),
        expected_default(sm),
        "sm_{sm}"
    );
    let (_d, file) = generate(
        sm,
        &[
            "--flag-addr",
            "912080",
            "--reg",
            "10",
            "--pred",
            "3",
            "--ureg",
            "6",
        ],
    );
    assert_eq!(
        nvdisasm_raw(&format!("SM{sm}"), &file),
        expected_other_regs(sm),
        "sm_{sm}"
    );
}

/// A kernel whose first instructions are ptxas's own version of the patch:
/// a volatile (strong, system-scope) load, a compare with zero and `@P EXIT`.
const REFERENCE_PTX: &str = r#".version 8.0
.target SM
.address_size 64
.visible .entry k(.param .u64 flag, .param .u64 out)
{
	.reg .b64 %a<3>;
	.reg .b32 %f;
	.reg .pred %p;
	ld.param.u64 %a1, [flag];
	ld.param.u64 %a2, [out];
	ld.volatile.u32 %f, [%a1];
	setp.ne.u32 %p, %f, 0;
	@%p exit;
	st.volatile.u32 [%a2], 7;
	ret;
}
"#;

fn ptxas_reference(sm: u32) -> Vec<SassLine> {
    let dir = tempfile::tempdir().unwrap();
    let ptx = dir.path().join("ref.ptx");
    let cubin = dir.path().join("ref.cubin");
    std::fs::write(&ptx, REFERENCE_PTX.replace("SM", &format!("sm_{sm}"))).unwrap();
    run(nvidia("ptxas")
        .arg(format!("-arch=sm_{sm}"))
        .arg(&ptx)
        .arg("-o")
        .arg(&cubin));
    parse_nvdisasm(&stdout(nvidia("nvdisasm").args(["-hex", "-c"]).arg(&cubin)))
}

fn check_control_words(sm: u32) {
    let reference = ptxas_reference(sm);
    let ctrl_of = |prefix: &str| -> Ctrl {
        let l = reference
            .iter()
            .find(|l| l.text.starts_with(prefix))
            .unwrap_or_else(|| panic!("ptxas sm_{sm} output has no {prefix}: {reference:?}"));
        Ctrl::from_hi(l.words.expect("nvdisasm -hex words").1)
    };
    let (ref_ld, ref_isetp, ref_exit) = (
        ctrl_of("LD.E.STRONG.SYS"),
        ctrl_of("ISETP.NE.U32.AND"),
        ctrl_of("@P0 EXIT"),
    );
    let (_d, file) = generate(sm, &["--flag-addr", "0x7f1234567890"]);
    let ours = from_bytes(&std::fs::read(&file).unwrap()).unwrap();
    let n = ours.len();
    let (ld, isetp, exit) = (ours[n - 3].ctrl(), ours[n - 2].ctrl(), ours[n - 1].ctrl());
    // The load: same scoreboard and stall as ptxas. (ptxas's load may also
    // wait on the scoreboard of an `LDC` that fetched its address from the
    // parameter bank; ours builds the address with fixed-latency MOVs.)
    assert_eq!(
        Ctrl {
            wait_mask: 0,
            ..ref_ld
        },
        ld,
        "sm_{sm} LD control word"
    );
    assert_eq!(ld.wait_mask, 0);
    let sb = ld
        .write_sb
        .expect("the flag load must release a scoreboard");
    // The compare waits for exactly that scoreboard, and leaves at least as
    // many cycles as ptxas before the predicate is read.
    assert_eq!(
        isetp.wait_mask,
        1 << sb,
        "sm_{sm} ISETP must wait on SB{sb}"
    );
    assert_eq!(ref_isetp.wait_mask, 1 << ref_ld.write_sb.unwrap());
    assert!(
        isetp.stall >= ref_isetp.stall,
        "sm_{sm}: ISETP stall {} < ptxas's {}",
        isetp.stall,
        ref_isetp.stall
    );
    assert_eq!(exit, ref_exit, "sm_{sm} EXIT control word");
    // Nothing before the load uses a scoreboard: all fixed-latency.
    for (i, instr) in ours[..n - 3].iter().enumerate() {
        let c = instr.ctrl();
        assert_eq!(
            (c.write_sb, c.read_sb, c.wait_mask),
            (None, None, 0),
            "#{i}"
        );
    }
    // The address registers are ready when the load issues: at least as many
    // cycles between the last MOV and the load as ptxas leaves (5).
    let cycles: u8 = ours[1..n - 3].iter().map(|i| i.ctrl().stall).sum();
    assert!(cycles >= 5, "sm_{sm}: only {cycles} cycles before the load");
}

macro_rules! per_sm {
    ($($sm:literal => $dis:ident, $ctrl:ident;)*) => {$(
        #[test]
        fn $dis() {
            check_disassembly($sm);
        }
        #[test]
        fn $ctrl() {
            check_control_words($sm);
        }
    )*};
}

per_sm! {
    75 => nvdisasm_sm75_exact_sequence, ptxas_sm75_control_words;
    80 => nvdisasm_sm80_exact_sequence, ptxas_sm80_control_words;
    86 => nvdisasm_sm86_exact_sequence, ptxas_sm86_control_words;
    89 => nvdisasm_sm89_exact_sequence, ptxas_sm89_control_words;
    90 => nvdisasm_sm90_exact_sequence, ptxas_sm90_control_words;
}

/// Code-cave mode: the patch ends with `BRA` back into the handler;
/// nvdisasm, told where the bytes sit, prints the absolute target.
#[test]
fn nvdisasm_code_cave_branches_back_on_every_target() {
    for sm in [75, 80, 86, 89, 90] {
        for (base, resume) in [
            ("0x7f0000100000", "0x7f0000002340"),
            ("0x2000", "0x7fff00001230"),
        ] {
            let (_d, file) = generate(
                sm,
                &[
                    "--flag-addr",
                    "0x7f1234567890",
                    "--base",
                    base,
                    "--resume-at",
                    resume,
                ],
            );
            let out = stdout(
                nvidia("nvdisasm")
                    .args(["-b", &format!("SM{sm}"), "-base", base])
                    .arg(&file),
            );
            let lines: Vec<String> = parse_nvdisasm(&out).into_iter().map(|l| l.text).collect();
            let mut want: Vec<String> =
                expected_default(sm).iter().map(|s| s.to_string()).collect();
            want.push(format!("BRA {resume}"));
            assert_eq!(lines, want, "sm_{sm} base {base}");
        }
    }
    let out = reef_bin("reef-trap")
        .args([
            "nvidia",
            "--sm",
            "80",
            "--flag-addr",
            "0x1000",
            "--base",
            "0x2000",
        ])
        .args(["-o", "/dev/null"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "--base without --resume-at accepted");
}

/// Without the virtualenv the tests stop with a message saying what to run.
#[test]
fn missing_tools_say_to_run_setup() {
    let empty = tempfile::tempdir().unwrap();
    let err = nvidia_bin_dir_in(empty.path(), "nvdisasm").unwrap_err();
    assert!(err.contains("run scripts/setup.sh"), "{err}");
    assert!(err.contains("nvidia-cuda-nvdisasm"), "{err}");
    assert!(nvidia_bin_dir_in(&repo_root(), "nvdisasm").is_ok());
}

#[test]
fn every_target_is_covered() {
    let tested = [75, 80, 86, 89, 90];
    assert_eq!(Sm::ALL.map(Sm::number), tested);
}

#[test]
fn bad_arguments_exit_non_zero_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.bin");
    for (args, needle) in [
        (vec!["--sm", "70", "--flag-addr", "0x1000"], "sm_70"),
        (vec!["--sm", "80", "--flag-addr", "0x1002"], "aligned"),
        (
            vec!["--sm", "80", "--flag-addr", "zz"],
            "not a 64-bit address",
        ),
        (
            vec!["--sm", "80", "--flag-addr", "0x1000", "--reg", "3"],
            "even",
        ),
    ] {
        let out = reef_bin("reef-trap")
            .arg("nvidia")
            .args(&args)
            .arg("-o")
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!file.exists(), "{args:?} wrote output");
    }
}
