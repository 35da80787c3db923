//! AMD GCN (GFX9) code for the REEF trap-handler patch: gfx906 (MI50, REEF's
//! AMD testbed, §6.1) and gfx90a (MI200). Same check as the NVIDIA patch
//! (§4.6 "Kernel killing", Fig. 8 lines 1–2): load the preempt flag, and
//! `s_endpgm` the wave when it is set, else continue into the original
//! handler.
//!
//! REEF's AMD implementation kills running kernels with the driver's CU
//! reset (§4.5, the rocm-patch's WAVE_RESET ioctl); this patch is the
//! trap-based alternative for hosts where only KFD's debugger interface is
//! available: installed as the second-level trap handler with
//! `AMDKFD_IOC_SET_TRAP_HANDLER` (see docs/hardware.md, Part 2).
//!
//! ```text
//!     s_mov_b32      ttmp2, flag[31:0]
//!     s_mov_b32      ttmp3, flag[63:32]
//!     s_load_dword   ttmp2, ttmp[2:3], 0x0 glc   (glc: bypass the scalar cache)
//!     s_waitcnt      lgkmcnt(0)
//!     s_cmp_eq_u32   ttmp2, 0
//!     s_cbranch_scc1 1                            (flag clear: skip s_endpgm)
//!     s_endpgm                                    (flag set: the wave ends)
//!     ...                                         (original handler)
//! ```
//!
//! ttmp2/ttmp3 are the registers ROCr's own second-level handler uses as
//! scratch on entry (ttmp0/1 hold the trapped PC, ttmp14/15 the TMA, ttmp6,
//! ttmp11 and ttmp12 saved state), so the patch clobbers nothing the handler
//! relies on. Encodings follow the GFX9 ISA manual's SOP1, SOPC, SOPP and
//! SMEM formats; `tests/amd_llvm.rs` checks them with LLVM's disassembler.

use crate::Error;

/// An AMD target the patch can be generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gfx {
    /// Vega 20 (MI50/MI60, Radeon VII).
    Gfx906,
    /// Aldebaran (MI210/MI250).
    Gfx90a,
}

impl Gfx {
    /// Every supported target.
    pub const ALL: [Gfx; 2] = [Gfx::Gfx906, Gfx::Gfx90a];

    /// The target for its number as written after `gfx` (`906`, `90a`).
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s.trim_start_matches("gfx") {
            "906" => Ok(Gfx::Gfx906),
            "90a" | "90A" => Ok(Gfx::Gfx90a),
            other => Err(Error::UnsupportedTarget(format!(
                "gfx{other} (supported: 906, 90a)"
            ))),
        }
    }

    /// The name LLVM's `-mcpu` expects.
    pub fn mcpu(self) -> &'static str {
        match self {
            Gfx::Gfx906 => "gfx906",
            Gfx::Gfx90a => "gfx90a",
        }
    }
}

/// GFX9 scalar operand number of `ttmp0` (ttmp0–15 are 108–123 on GFX9;
/// they were 112–123 on GFX8).
const TTMP0: u32 = 108;
/// The scalar operand "32-bit literal follows".
const LITERAL: u32 = 0xff;
/// The scalar operand for the inline constant 0.
const INLINE_ZERO: u32 = 0x80;

/// `s_mov_b32 sdst, literal` (SOP1, op 0).
fn s_mov_b32_literal(sdst: u32, value: u32) -> [u32; 2] {
    [0xbe80_0000 | sdst << 16 | LITERAL, value]
}

/// `s_load_dword sdata, sbase, offset glc` (SMEM, op 0, immediate offset).
fn s_load_dword_glc(sdata: u32, sbase: u32, offset: u32) -> [u32; 2] {
    const IMM: u32 = 1 << 17;
    const GLC: u32 = 1 << 16;
    [
        0xc000_0000 | IMM | GLC | sdata << 6 | sbase >> 1,
        offset & 0xf_ffff,
    ]
}

/// `s_waitcnt lgkmcnt(0)` (SOPP op 12; vmcnt and expcnt left at their
/// maxima so only scalar memory is waited for).
const S_WAITCNT_LGKMCNT0: u32 = 0xbf8c_c07f;

/// `s_cmp_eq_u32 ssrc0, 0` (SOPC op 6).
fn s_cmp_eq_u32_zero(ssrc0: u32) -> u32 {
    0xbf00_0000 | 6 << 16 | INLINE_ZERO << 8 | ssrc0
}

/// `s_cbranch_scc1 simm16` (SOPP op 5): branch `simm16` words past the next
/// instruction when SCC is 1.
fn s_cbranch_scc1(words: i16) -> u32 {
    0xbf85_0000 | u32::from(words as u16)
}

/// `s_endpgm` (SOPP op 1).
const S_ENDPGM: u32 = 0xbf81_0000;

/// The trap-handler patch for `gfx` as 32-bit words.
pub fn trap_patch_words(_gfx: Gfx, flag_addr: u64) -> Result<Vec<u32>, Error> {
    crate::sass::check_flag_addr(flag_addr)?;
    // gfx906 and gfx90a share the GFX9 encodings used here; the target is
    // kept in the signature so a later family with other encodings cannot be
    // handed the wrong bytes silently.
    let (t2, t3) = (TTMP0 + 2, TTMP0 + 3);
    let mut w = Vec::with_capacity(11);
    w.extend(s_mov_b32_literal(t2, flag_addr as u32));
    w.extend(s_mov_b32_literal(t3, (flag_addr >> 32) as u32));
    w.extend(s_load_dword_glc(t2, t2, 0));
    w.push(S_WAITCNT_LGKMCNT0);
    w.push(s_cmp_eq_u32_zero(t2));
    w.push(s_cbranch_scc1(1));
    w.push(S_ENDPGM);
    Ok(w)
}

/// The trap-handler patch for `gfx` as raw little-endian bytes.
pub fn trap_patch(gfx: Gfx, flag_addr: u64) -> Result<Vec<u8>, Error> {
    Ok(trap_patch_words(gfx, flag_addr)?
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings printed by `llvm-mc -arch=amdgcn -mcpu=gfx906 -show-encoding`
    /// (LLVM 14) for the same source lines.
    #[test]
    fn words_match_llvm_mc_encodings() {
        let w = trap_patch_words(Gfx::Gfx906, 0x7f12_3456_7890).unwrap();
        assert_eq!(
            w,
            vec![
                0xbeee_00ff, // s_mov_b32 ttmp2, 0x34567890
                0x3456_7890,
                0xbeef_00ff, // s_mov_b32 ttmp3, 0x7f12
                0x0000_7f12,
                0xc003_1bb7, // s_load_dword ttmp2, ttmp[2:3], 0x0 glc
                0x0000_0000,
                0xbf8c_c07f, // s_waitcnt lgkmcnt(0)
                0xbf06_806e, // s_cmp_eq_u32 ttmp2, 0
                0xbf85_0001, // s_cbranch_scc1 1
                0xbf81_0000, // s_endpgm
            ]
        );
    }

    #[test]
    fn parses_targets_and_rejects_others() {
        assert_eq!(Gfx::parse("906").unwrap(), Gfx::Gfx906);
        assert_eq!(Gfx::parse("gfx90a").unwrap(), Gfx::Gfx90a);
        assert!(Gfx::parse("1030").is_err());
        assert!(trap_patch(Gfx::Gfx90a, 6).is_err());
    }
}
