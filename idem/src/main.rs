//! `reef-check-idem MODEL`: the offline idempotence checker of REEF §4.4
//! (Figs. 9, 10; Table 1). Prints `#idempotent/#total` and the group-size
//! histogram, or with `--json` a machine-readable summary; `-o FILE` writes the
//! metadata model loading reads. Formats: docs/idempotence.md.

use anyhow::{Context, Result};
use clap::Parser;
use reef_idem::{analyze, input, onnx, report};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "reef-check-idem",
    version,
    about = "Offline single- and multi-kernel idempotence analysis (REEF §4.4)",
    long_about = "Decides which kernels of a model may be killed and re-executed alone, and \
                  for every other kernel the first kernel of its minimal idempotent group, from \
                  which a restore must restart.\n\nMODEL is a REEF schedule (directory or \
                  .json), an ONNX model (.onnx), a reef-trace (.reeftrace) or a TensorRT \
                  engine (.engine, read through MODEL.engine.reeftrace)."
)]
struct Cli {
    /// The model to analyse.
    model: PathBuf,
    /// Print a JSON summary instead of the human report.
    #[arg(long)]
    json: bool,
    /// Write the idempotence metadata (read by model loading) to FILE.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// ONNX input: never run element-wise operations in place.
    #[arg(long, conflicts_with = "in_place_ops")]
    no_in_place: bool,
    /// ONNX input: the operators that run in place when their input dies,
    /// comma-separated (default: Relu,LeakyRelu,Clip,Sigmoid,Tanh,
    /// BatchNormalization,Add,Sum,Mul,Sub,Div).
    #[arg(long, value_name = "OPS")]
    in_place_ops: Option<String>,
    /// Write the memory-access trace the analysis used to FILE (reef-trace).
    #[arg(long, value_name = "FILE")]
    dump_trace: Option<PathBuf>,
}

fn run(cli: &Cli) -> Result<()> {
    let opts = match (&cli.in_place_ops, cli.no_in_place) {
        (_, true) => onnx::Options::no_in_place(),
        (Some(list), false) => {
            onnx::Options::with_ops(list).map_err(|e| anyhow::anyhow!("--in-place-ops: {e}"))?
        }
        (None, false) => onnx::Options::default(),
    };
    let trace = input::load(&cli.model, &opts)?;
    if trace.kernel_count() == 0 {
        anyhow::bail!(
            "{}: no kernel operations: there is nothing to analyse",
            cli.model.display()
        );
    }
    if let Some(p) = &cli.dump_trace {
        let f =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        trace
            .write(std::io::BufWriter::new(f))
            .with_context(|| format!("{}: cannot write trace", p.display()))?;
    }
    let analysis = analyze(&trace)?;
    if let Some(p) = &cli.output {
        let kernels_only = trace.kernel_count() == trace.ops.len();
        let meta = report::metadata(&analysis, kernels_only);
        let text = serde_json::to_string_pretty(&meta)?;
        std::fs::write(p, text + "\n")
            .with_context(|| format!("{}: cannot write metadata", p.display()))?;
    }
    if cli.json {
        println!("{}", serde_json::to_string(&report::summary(&analysis))?);
    } else {
        print!("{}", report::human(&analysis));
    }
    Ok(())
}

fn main() -> ExitCode {
    // Exit quietly when stdout is a closed pipe (`... --json | head`), as Unix
    // tools do, instead of panicking inside println!.
    // SAFETY: runs first in main, before any thread exists; SIG_DFL is always a
    // valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    // REEF_PARSE_ONLY=1: stop once the command line parsed (exit 0; a parse
    // error has already exited 2). The docs check (docscheck/) runs every
    // command line the docs show this way.
    if std::env::var_os("REEF_PARSE_ONLY").is_some_and(|v| v == "1") {
        return ExitCode::SUCCESS;
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reef-check-idem: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
