//! `reef-trap`: writes the raw machine code REEF patches into the GPU trap
//! handler (REEF §4.6 "Kernel killing"): load the preempt flag, end every
//! thread when it is set, else fall through to the original handler.
//!
//! ```text
//! reef-trap nvidia --sm 90 --flag-addr 0x7f1234567890 -o patch.bin
//! reef-trap nvidia --sm 80 --flag-addr 0x7f1234567890 \
//!     --base 0x7f0000100000 --resume-at 0x7f0000002340 -o cave.bin
//! reef-trap amd --gfx 906 --flag-addr 0x7f1234567890 -o patch.bin
//! ```

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use reef_trap::{amdgpu, sass};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    about = "Generate REEF's trap-handler patch as raw code bytes"
)]
struct Cli {
    #[command(subcommand)]
    target: Target,
}

#[derive(Subcommand)]
enum Target {
    /// NVIDIA SASS (128-bit instructions with control bits).
    Nvidia {
        /// Compute capability: 75, 80, 86, 89 or 90.
        #[arg(long)]
        sm: u32,
        /// Device address of the 32-bit preempt flag (hex with 0x, or decimal).
        #[arg(long, value_parser = parse_addr)]
        flag_addr: u64,
        /// Even general register; the patch clobbers R<reg> and R<reg+1>.
        #[arg(long, default_value_t = sass::NvRegs::default().gpr)]
        reg: u8,
        /// Predicate register the patch clobbers (0-6).
        #[arg(long, default_value_t = sass::NvRegs::default().pred)]
        pred: u8,
        /// Even uniform register for the memory descriptor (sm_80+); clobbers UR<ureg> and UR<ureg+1>.
        #[arg(long, default_value_t = sass::NvRegs::default().ureg)]
        ureg: u8,
        /// Address the patch will be placed at (code-cave mode, with --resume-at).
        #[arg(long, value_parser = parse_addr, requires = "resume_at")]
        base: Option<u64>,
        /// End the patch with `BRA` to this address instead of falling through.
        #[arg(long, value_parser = parse_addr, requires = "base")]
        resume_at: Option<u64>,
        /// Output file for the raw instruction bytes.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// AMD GCN (GFX9) scalar code.
    Amd {
        /// Target: 906 (MI50) or 90a (MI200).
        #[arg(long)]
        gfx: String,
        /// Device address of the 32-bit preempt flag (hex with 0x, or decimal).
        #[arg(long, value_parser = parse_addr)]
        flag_addr: u64,
        /// Output file for the raw instruction bytes.
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn parse_addr(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => t.replace('_', "").parse::<u64>(),
    };
    parsed.map_err(|e| {
        format!("`{s}` is not a 64-bit address ({e}); write it as 0x7f1234567890 or in decimal")
    })
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reef-trap: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let (bytes, output, what) = match cli.target {
        Target::Nvidia {
            sm,
            flag_addr,
            reg,
            pred,
            ureg,
            base,
            resume_at,
            output,
        } => {
            let sm = sass::Sm::from_number(sm)?;
            let regs = sass::NvRegs {
                gpr: reg,
                pred,
                ureg,
            };
            let code = match (base, resume_at) {
                (Some(base), Some(resume)) => {
                    sass::trap_patch_cave(sm, flag_addr, regs, base, resume)?
                }
                _ => sass::trap_patch(sm, flag_addr, regs)?,
            };
            let what = format!("{} SASS instructions for sm_{}", code.len(), sm.number());
            (sass::to_bytes(&code), output, what)
        }
        Target::Amd {
            gfx,
            flag_addr,
            output,
        } => {
            let gfx = amdgpu::Gfx::parse(&gfx)?;
            let bytes = amdgpu::trap_patch(gfx, flag_addr)?;
            (bytes, output, format!("GCN code for {}", gfx.mcpu()))
        }
    };
    std::fs::write(&output, &bytes)
        .with_context(|| format!("cannot write the patch to {}", output.display()))?;
    eprintln!(
        "reef-trap: wrote {} bytes ({what}) to {}",
        bytes.len(),
        output.display()
    );
    Ok(())
}
