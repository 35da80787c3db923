//! The hardware preemption paths of REEF, driven through the `reef-ioctl`
//! wrappers: what they report and the probe `reefd start` runs.
//!
//! Paper: REEF §4.5 "Reset-Based Preemption on Open-Source GPUs" (AMD,
//! [`crate::device::kfd`]: suspend the best-effort queues, drop their
//! unfetched packets, kill the running waves; Figure 7 ❷ and ❸) and §4.6
//! "Reset-Based Preemption on Closed-Source GPUs" (NVIDIA,
//! [`crate::device::cuda::rm`]: preempt the best-effort channel group and
//! raise the GPU trap through the debugger object, whose patched handler
//! exits the running blocks; Figure 8 lines 12–16). DESIGN.md layer 2: a
//! device reports the preemption levels it has (1 = evict host-queue work,
//! 2 = lazy eviction by the preempt flag checked at kernel entry, 3 = kill
//! running blocks) and degrades to a lower one, saying why, when a piece is
//! missing.
//!
//! The ioctl paths cannot execute kernels; every launch returns
//! [`BackendError::CannotExecute`] naming what is missing, never a panic.
//! `reefd start --device kfd:N` therefore opens the configured device
//! through the KFD path (so a wrong path, a non-device file or a missing
//! privilege is reported exactly) and then stops with that error
//! ([`check_hardware`]). NVIDIA kernels are executed by
//! [`crate::device::cuda`] (levels 1 and 2). docs/hardware.md says what
//! each path needs on a GPU host.

use std::fmt;

use reef_sched::PreemptLevel;

use super::kfd;
use crate::config::Config;
use crate::device::DeviceSpec;

pub use super::cuda::rm::{CudaBackend, CudaContextHandles, CudaOptions};
pub use super::kfd::{KfdBackend, KfdOptions};

/// Everything a hardware backend can fail with. The texts are for the
/// operator: what was refused, where, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A driver call failed; reef-ioctl's text names the file and the fix.
    #[error(transparent)]
    Ioctl(#[from] reef_ioctl::Error),
    /// Hardware devices are driven through privileged ioctls.
    #[error("device {0} needs root: hardware GPUs are driven through privileged ioctls; run `sudo reefd start`, or use --device sim:mi50")]
    NeedsRoot(String),
    /// The GPU index does not name a GPU of this host.
    #[error("device {device}: {detail}")]
    NoSuchGpu { device: String, detail: String },
    /// The backend would have to execute a kernel, which needs the vendor
    /// runtime on a GPU host.
    #[error("device {device}: cannot execute kernels: {reason}")]
    CannotExecute { device: String, reason: String },
    /// A preemption call came in an order the backend cannot honour.
    #[error("device {device}: {detail}")]
    InvalidState { device: String, detail: String },
}

/// The preemption levels a backend offers, with the reasons for any level
/// it lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Levels {
    /// Ascending; always includes [`PreemptLevel::HostQueue`].
    pub available: Vec<PreemptLevel>,
    /// Why a level is missing (empty when all three are there).
    pub notes: Vec<String>,
}

impl Levels {
    /// The highest level available: the one the scheduler uses.
    pub fn highest(&self) -> PreemptLevel {
        self.available
            .iter()
            .copied()
            .max()
            .unwrap_or(PreemptLevel::HostQueue)
    }

    /// Whether running kernels can be killed (level 3).
    pub fn can_kill(&self) -> bool {
        self.highest() == PreemptLevel::Kill
    }

    /// The level numbers, as `EngineInfo::preemption_levels` carries them.
    pub fn numbers(&self) -> Vec<u8> {
        self.available.iter().map(|l| l.number()).collect()
    }

    pub(crate) fn up_to(highest: PreemptLevel, notes: Vec<String>) -> Levels {
        Levels {
            available: [
                PreemptLevel::HostQueue,
                PreemptLevel::LazyEviction,
                PreemptLevel::Kill,
            ]
            .into_iter()
            .filter(|l| *l <= highest)
            .collect(),
            notes,
        }
    }
}

impl fmt::Display for Levels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n: Vec<String> = self.numbers().iter().map(u8::to_string).collect();
        write!(f, "preemption levels {}", n.join(","))?;
        for note in &self.notes {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// What one `preempt_be` did at the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptReport {
    /// The level the preemption was carried out at.
    pub level: PreemptLevel,
    /// Driver operations issued, in order (for logs and tests), e.g.
    /// `wave_reset gpu 0x1a2b`, `suspend_queues [3, 4]`, `clear_queue 3`.
    pub steps: Vec<String>,
    /// Queues or channel groups the driver reported it could not act on.
    pub refused: Vec<String>,
}

/// The preemption interface shared by the hardware backends (REEF §4.3
/// Figure 8 lines 12–16; the preempt flag itself is device memory the
/// runtime writes, see each backend's notes).
pub trait HardwareBackend {
    /// `kfd:N` or `cuda:N`.
    fn device(&self) -> String;
    /// What this backend can do on this host.
    fn levels(&self) -> &Levels;
    /// Evicts and (at level 3) kills the best-effort work on the GPU.
    fn preempt_be(&mut self) -> Result<PreemptReport, BackendError>;
    /// Lets the best-effort work run again after the real-time work.
    fn restore_be(&mut self) -> Result<Vec<String>, BackendError>;
    /// Launches kernel `name` with execution index `exec_index` (REEF
    /// Figure 8 line 8). Always [`BackendError::CannotExecute`] in this
    /// build: see the backend's documentation for what a GPU host needs.
    fn launch(&mut self, name: &str, exec_index: u32) -> Result<(), BackendError>;
}

/// The hook `reefd start` calls before serving. Simulated devices, `auto`
/// (which falls back to the simulator), `cuda:N` and `kfd:N` (the launch
/// paths) pass: `kfd:N` serves through HIP (device/hip/), and its level 3
/// is the KFD's at [`kfd_options`] (device/hip/queues.rs).
pub fn check_hardware(spec: &DeviceSpec, cfg: &Config, is_root: bool) -> Result<(), BackendError> {
    let _ = (spec, cfg, is_root);
    Ok(())
}

/// Where `kfd:index`'s level 3 is looked for (device/hip/queues.rs): the
/// configured KFD paths as root, else the note saying why not.
pub fn kfd_options(cfg: &Config, index: u32, is_root: bool) -> Result<KfdOptions, String> {
    if !is_root {
        return Err("no kill (level 3): the KFD's queue and wave ioctls need root".into());
    }
    Ok(KfdOptions {
        path: cfg.device.kfd_path.clone(),
        topology_dir: cfg.device.kfd_topology.clone(),
        index,
        // HIP's runtime in this process enables the KFD runtime itself
        // (EBUSY then, taken as enabled); without a GPU it has not.
        enable_runtime: true,
        grace_period_us: kfd::DEFAULT_GRACE_PERIOD_US,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_report_the_highest_and_the_reasons() {
        let l = Levels::up_to(PreemptLevel::LazyEviction, vec!["no patch".into()]);
        assert_eq!(l.numbers(), vec![1, 2]);
        assert_eq!(l.highest(), PreemptLevel::LazyEviction);
        assert!(!l.can_kill());
        assert_eq!(l.to_string(), "preemption levels 1,2; no patch");
        let l = Levels::up_to(PreemptLevel::Kill, vec![]);
        assert_eq!(l.numbers(), vec![1, 2, 3]);
        assert!(l.can_kill());
    }

    #[test]
    fn devices_pass_and_the_kfd_needs_root() {
        let cfg = Config::default();
        for spec in [DeviceSpec::Auto, DeviceSpec::Sim("mi50".into())] {
            assert!(check_hardware(&spec, &cfg, false).is_ok());
        }
        assert!(check_hardware(&DeviceSpec::Cuda(vec![1]), &cfg, false).is_ok());
        assert!(check_hardware(&DeviceSpec::Kfd(0), &cfg, false).is_ok());
        assert!(kfd_options(&cfg, 0, false)
            .unwrap_err()
            .contains("need root"));
    }
}
