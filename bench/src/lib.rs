//! reef-bench: benchmarks over the simulated GPU. One module per subcommand
//! of the `reef-bench` binary.

pub mod aker;
pub mod crosscheck;
pub mod disb;
pub mod dkp;
pub mod fidelity;
pub mod fikit;
pub mod hostile;
pub mod kernels;
pub mod multigpu;
pub mod run;
pub mod simspeed;
pub mod standalone;
