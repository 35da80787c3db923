//! `reef-bench`: benchmarks on the simulated GPU. Each subcommand lives in
//! its own module of the reef-bench library.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "reef-bench", about = "REEF benchmarks on the simulated GPU")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Simulated vs measured stand-alone latency of each model.
    Standalone(reef_bench::standalone::StandaloneArgs),
    /// Simulator speed: kernel completions per wall second.
    Simspeed(reef_bench::simspeed::SimspeedArgs),
    /// Per-kernel calibration detail: launch-path overhead and CU usage.
    Kernels(reef_bench::kernels::KernelsArgs),
    /// DISB workloads under the scheduling policies (REEF Fig. 15, 17).
    Disb(reef_bench::disb::DisbArgs),
    /// A held-out DISB workload drawn from a seed (issue 28), written in DISB's format for `reef-bench disb FILE`.
    DisbGen(reef_bench::disb::gen::GenArgs),
    /// Dynamic kernel padding: RT-BE pairs (REEF Fig. 23, 24, 27) and kernel selection time (Fig. 26).
    Dkp(reef_bench::dkp::DkpArgs),
    /// Preemption latency, reset-based vs wait-based (REEF Fig. 18, 19).
    Preempt(reef_bench::disb::preempt::PreemptArgs),
    /// Several GPUs per node: CASE/MGB placement (Figs. 4, 5, Tables II-IV, schedGPU).
    Multigpu(reef_bench::multigpu::MultigpuArgs),
    /// Compiled-kernel cost model vs measured kernels, layer by layer (issue 14).
    Crosscheck(reef_bench::crosscheck::CrosscheckArgs),
    /// FIKIT: the paper's experiments (fikit.txt §4.3–4.5), DISB sweeps over host gaps and ε, selection cost.
    Fikit(reef_bench::fikit::FikitArgs),
    /// Aker (issue 19): Table 1 micro-benchmarks, fused-kernel duration predictor.
    Aker(reef_bench::aker::AkerArgs),
    /// Every DISB and preemption figure the REEF paper's text quotes beside the simulator's (issue 15); fails when one is off by more than ±25 %.
    Fidelity(reef_bench::fidelity::FidelityArgs),
    /// Load test of a live reefd (issue 25): a closed-loop RT client quiet, then beside 1000 connections of which 100 hostile (oversized names, slow senders, SIGKILL mid-frame, garbage); the daemon's RSS and fds before, at the peak and after.
    Hostile(reef_bench::hostile::HostileArgs),
    /// (internal) A child of `hostile` that is SIGKILLed mid-frame.
    #[command(hide = true)]
    HostileChild(reef_bench::hostile::ChildArgs),
}

fn main() -> std::process::ExitCode {
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
        return std::process::ExitCode::SUCCESS;
    }
    let r = match cli.cmd {
        Cmd::Standalone(a) => reef_bench::standalone::main(a),
        Cmd::Simspeed(a) => reef_bench::simspeed::main(a),
        Cmd::Kernels(a) => reef_bench::kernels::main(a),
        Cmd::Disb(a) => reef_bench::disb::main(a),
        Cmd::DisbGen(a) => reef_bench::disb::gen::main(a),
        Cmd::Dkp(a) => reef_bench::dkp::main(a),
        Cmd::Preempt(a) => reef_bench::disb::preempt::main(a),
        Cmd::Multigpu(a) => reef_bench::multigpu::main(a),
        Cmd::Crosscheck(a) => reef_bench::crosscheck::main(a),
        Cmd::Fikit(a) => reef_bench::fikit::main(a),
        Cmd::Aker(a) => reef_bench::aker::main(a),
        Cmd::Fidelity(a) => reef_bench::fidelity::main(a),
        Cmd::Hostile(a) => reef_bench::hostile::main(a),
        Cmd::HostileChild(a) => reef_bench::hostile::child_main(a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("reef-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
