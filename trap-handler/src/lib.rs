//! reef-trap: the device-side code REEF adds to make GPU work preemptible.
//!
//! - [`sass`]: the NVIDIA trap-handler patch (REEF §4.6 "Kernel killing"):
//!   load the preempt flag, `EXIT` every thread when it is set, else fall
//!   through to the original handler; sm_75, sm_80, sm_86, sm_89, sm_90.
//! - [`amdgpu`]: the same patch for AMD gfx906 and gfx90a.
//! - [`ptx`]: REEF's code transformer for kernels we can compile (§4.2
//!   "lazy eviction" and §4.4 "kernel execution index", Fig. 8 lines 1–4):
//!   every `.entry` checks the preempt flag on entry and records its
//!   execution index.
//!
//! The binaries `reef-trap` and `reef-ptx-inject` wrap these. Nothing here
//! needs a GPU; the tests check the generated code with NVIDIA's `nvdisasm`
//! and `ptxas` and LLVM's AMDGPU disassembler (docs/hardware.md, Part 2, says what
//! that does and does not prove).

pub mod amdgpu;
pub mod ptx;
pub mod sass;

/// What can go wrong generating a patch or transforming PTX.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unsupported target {0}")]
    UnsupportedTarget(String),
    #[error("bad preempt-flag address: {0}")]
    BadFlagAddress(String),
    #[error("bad scratch register: {0}")]
    BadRegister(String),
    #[error("bad branch: {0}")]
    BadBranch(String),
    #[error("bad option: {0}")]
    BadOption(String),
    #[error("code of {0} bytes is not a whole number of 16-byte SASS instructions")]
    Truncated(usize),
    #[error("{file}:{line}: {msg}")]
    Ptx {
        file: String,
        line: usize,
        msg: String,
    },
}
