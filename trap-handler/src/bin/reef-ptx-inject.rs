//! `reef-ptx-inject`: REEF's code transformer (REEF §4.2, §4.4, Fig. 8 lines
//! 1–4). Every `.entry` of a PTX module checks the preempt flag on entry,
//! exits when it is set, and records its execution index.
//!
//! ```text
//! reef-ptx-inject kernels.ptx -o kernels.reef.ptx [--flag-symbol NAME]
//! ```

use anyhow::{Context, Result};
use clap::Parser;
use reef_trap::ptx::{inject, InjectOptions};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    version,
    about = "Inject REEF's preempt-flag check and execution-index store into every PTX kernel"
)]
struct Cli {
    /// Input PTX (e.g. from `nvcc -ptx`).
    input: PathBuf,
    /// Output PTX.
    #[arg(short, long)]
    output: PathBuf,
    /// Module-scope .global .u32 holding the preempt flag.
    #[arg(long, default_value_t = InjectOptions::default().flag_symbol)]
    flag_symbol: String,
    /// Module-scope .global .u32 receiving the index of the last started kernel.
    #[arg(long, default_value_t = InjectOptions::default().index_symbol)]
    index_symbol: String,
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reef-ptx-inject: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let src = std::fs::read_to_string(&cli.input)
        .with_context(|| format!("cannot read PTX from {}", cli.input.display()))?;
    let opts = InjectOptions {
        flag_symbol: cli.flag_symbol,
        index_symbol: cli.index_symbol,
        ..InjectOptions::default()
    };
    let out = inject(&src, &cli.input.display().to_string(), &opts)?;
    std::fs::write(&cli.output, &out.ptx)
        .with_context(|| format!("cannot write PTX to {}", cli.output.display()))?;
    eprintln!(
        "reef-ptx-inject: {} kernel(s) for {} now check `{}`: {}",
        out.entries.len(),
        out.target,
        opts.flag_symbol,
        out.entries.join(", ")
    );
    Ok(())
}
