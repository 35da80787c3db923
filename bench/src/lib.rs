//! reef-bench: benchmarks over the simulated GPU. One module per subcommand
//! of the `reef-bench` binary.

pub mod disb;
pub mod dkp;
pub mod fidelity;
pub mod kernels;
pub mod run;
pub mod simspeed;
pub mod standalone;
