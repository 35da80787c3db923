//! The devices reefd serves on, one room per kind (DESIGN.md layer 2), and
//! the choice among them (`--device`; REEF §4.5 and §4.6: reset-based
//! preemption on AMD GPUs through KFD and on NVIDIA GPUs through the
//! closed-source driver).
//!
//! - [`sim`]: the simulated GPU (`sim:NAME`, the default without a GPU):
//!   reef-sim is reef-exec's `Device` itself; levels 1–3 per preset.
//! - [`cuda`]: an NVIDIA GPU (`cuda:N`). **This is what serves requests on
//!   NVIDIA:** the driver API through cudarc ([`cuda::driver`]), the GPU
//!   opened with its levels probed and models loaded ([`cuda`]), the
//!   kernel-level device the engine launches on ([`cuda::kernels`]), and
//!   the engine on it ([`cuda::engine`]). [`cuda::rm`] is the RM ioctl path
//!   of level 3 (kill through the debugger object, §4.6), built and tested
//!   against the FUSE fake nvidiactl but not wired into serving: it needs
//!   libcuda's context handles (docs/hardware.md).
//! - [`kfd`]: an AMD GPU (`kfd:N`): the KFD preemption paths (queue
//!   suspend, wave kill) probed through reef-ioctl; no launch path yet, so
//!   `reefd start --device kfd:N` stops after the probe saying why.
//! - [`preempt`]: what a hardware preemption path reports (levels, why one
//!   is missing) and the probe `reefd start` runs before serving.
//!
//! `auto` probes for a real GPU, AMD through `/dev/kfd` and NVIDIA through
//! cudarc's presence check of the driver library, and otherwise serves on
//! the simulated MI50 with a notice.

pub mod cuda;
pub mod hip;
pub mod kfd;
pub mod preempt;
pub mod sim;

use std::fmt;
use std::path::Path;

/// Simulator presets the daemon accepts (`sim:NAME`).
pub const SIM_PRESETS: &[&str] = &["mi50", "gv100", "h100"];

/// A `--device` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSpec {
    Auto,
    Sim(String),
    /// One NVIDIA GPU (`cuda:0`) or a node of them (`cuda:0,cuda:1`), by
    /// driver ordinal, without repeats.
    Cuda(Vec<u32>),
    Kfd(u32),
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Sim(p) => write!(f, "sim:{p}"),
            DeviceSpec::Cuda(n) => {
                let items: Vec<String> = n.iter().map(|i| format!("cuda:{i}")).collect();
                f.write_str(&items.join(","))
            }
            DeviceSpec::Kfd(n) => write!(f, "kfd:{n}"),
        }
    }
}

impl DeviceSpec {
    pub fn parse(s: &str) -> Result<DeviceSpec, String> {
        let usage = "use auto, sim:mi50, sim:gv100, sim:h100, a node such as sim:mi50x4 or sim:mi50,gv100, cuda:N, a node of GPUs such as cuda:0,cuda:1, or kfd:N";
        if s == "auto" {
            return Ok(DeviceSpec::Auto);
        }
        if s.contains(',') {
            let items: Vec<&str> = s.split(',').map(str::trim).collect();
            let kinds: Vec<&str> = items
                .iter()
                .filter_map(|i| i.split_once(':').map(|(k, _)| k))
                .collect();
            let mixed = kinds.iter().any(|&k| k != kinds[0]);
            if mixed {
                return Err(format!(
                    "device {s:?} mixes kinds of device: a node is all simulated \
                     (sim:mi50,gv100) or all NVIDIA GPUs (cuda:0,cuda:1)"
                ));
            }
            if kinds.first() == Some(&"cuda") {
                let mut n = Vec::new();
                for item in items {
                    let i = item
                        .strip_prefix("cuda:")
                        .and_then(|a| a.parse::<u32>().ok())
                        .ok_or_else(|| format!("device {s:?}: {item:?} is not cuda:N; {usage}"))?;
                    if n.contains(&i) {
                        return Err(format!(
                            "device {s:?}: cuda:{i} is listed twice; name each GPU once"
                        ));
                    }
                    n.push(i);
                }
                return Ok(DeviceSpec::Cuda(n));
            }
            if kinds.first() == Some(&"kfd") {
                return Err(format!(
                    "device {s:?}: a node of AMD GPUs is not supported (kfd:N cannot execute \
                     kernels in this build); {usage}"
                ));
            }
        }
        let Some((kind, arg)) = s.split_once(':') else {
            return Err(format!("device {s:?} is not recognised; {usage}"));
        };
        let index = || {
            arg.parse::<u32>()
                .map_err(|_| format!("device {s:?}: {arg:?} is not a GPU index; {usage}"))
        };
        match kind {
            "sim" if SIM_PRESETS.contains(&arg) => Ok(DeviceSpec::Sim(arg.to_string())),
            "sim" if sim_node(arg).is_some() => Ok(DeviceSpec::Sim(arg.to_string())),
            "sim" => Err(format!(
                "device {s:?}: no simulator preset {arg:?}; {usage}"
            )),
            "cuda" => Ok(DeviceSpec::Cuda(vec![index()?])),
            "kfd" => Ok(DeviceSpec::Kfd(index()?)),
            _ => Err(format!("device {s:?} is not recognised; {usage}")),
        }
    }
}

/// The presets of a simulated node (issue 16 item 5): `mi50x4`,
/// `mi50,gv100`, `mi50x2,h100`, each item a preset of [`SIM_PRESETS`] with
/// an optional `xN` count; `None` for anything else (a single preset is a
/// node of one).
pub fn sim_node(arg: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for item in arg.split(',') {
        let item = item.trim();
        let (name, n) = match item.rsplit_once('x') {
            Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                (name, n.parse::<usize>().ok()?)
            }
            _ => (item, 1),
        };
        if n == 0 || !SIM_PRESETS.contains(&name) || out.len() + n > 64 {
            return None;
        }
        out.extend(std::iter::repeat_n(name.to_string(), n));
    }
    (!out.is_empty()).then_some(out)
}

/// What the probe found on this machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Probe {
    /// `/dev/kfd` exists (an AMD GPU with the amdgpu KFD driver).
    pub kfd: bool,
    /// The CUDA driver library (libcuda) can be loaded.
    pub cuda: bool,
}

/// Probes for GPUs. The CUDA check goes through cudarc's
/// `is_culib_present`, which tries to load libcuda dynamically and reports
/// absence instead of panicking.
pub fn probe() -> Probe {
    // SAFETY: is_culib_present only attempts to dlopen the driver library
    // and returns whether that succeeded; it has no preconditions.
    let cuda = unsafe { cudarc::driver::sys::is_culib_present() };
    Probe {
        kfd: Path::new("/dev/kfd").exists(),
        cuda,
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("device {0} needs root: hardware GPUs are driven through privileged ioctls; run `sudo reefd start`, or use --device sim:mi50")]
    NeedsRoot(DeviceSpec),
    #[error("device {spec}: {what}")]
    Absent { spec: DeviceSpec, what: String },
    #[error("device {spec}: {what}")]
    NoBackend { spec: DeviceSpec, what: String },
}

/// The device the daemon will serve on, and the notice to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// The simulator preset (empty for `cuda:N`).
    pub preset: String,
    pub notice: Option<String>,
    /// `cuda:N` (or a node `cuda:0,cuda:1`): served through the CUDA
    /// launch path (engine/gpu.rs; a node through engine/node.rs).
    pub cuda: Option<Vec<u32>>,
    /// `kfd:N`: served through the HIP launch path (device/hip/), level 3
    /// through the KFD where /dev/kfd answers.
    pub kfd: Option<u32>,
}

/// Resolves a device spec against a probe. `cuda:N` needs the CUDA driver
/// library (the launch path, backend/cuda_launch.rs, executes kernels
/// through it). `kfd:N` needs root and /dev/kfd, and even then this build
/// cannot execute kernels on it (reef-ioctl's KFD path covers the
/// preemption ioctls, not a kernel-launching runtime), which is said
/// plainly rather than pretended.
pub fn select(spec: &DeviceSpec, probe: &Probe, is_root: bool) -> Result<Selected, DeviceError> {
    match spec {
        DeviceSpec::Sim(p) => Ok(Selected {
            preset: p.clone(),
            notice: None,
            cuda: None,
            kfd: None,
        }),
        // The launch path needs the driver library only; whether root is
        // needed is decided once the driver names its GPU (daemon.rs).
        DeviceSpec::Cuda(n) => {
            if !probe.cuda {
                return Err(DeviceError::Absent {
                    spec: spec.clone(),
                    what: "the NVIDIA driver library libcuda.so cannot be loaded: install the NVIDIA driver, point device.cuda_library or REEF_CUDA_LIBRARY at a driver library, or use --device sim:gv100".into(),
                });
            }
            Ok(Selected {
                preset: String::new(),
                notice: None,
                cuda: Some(n.clone()),
                kfd: None,
            })
        }
        DeviceSpec::Auto => {
            let found: Vec<&str> = [
                (probe.kfd, "an AMD GPU (/dev/kfd)"),
                (probe.cuda, "the NVIDIA driver (libcuda)"),
            ]
            .iter()
            .filter(|(f, _)| *f)
            .map(|(_, n)| *n)
            .collect();
            let notice = if found.is_empty() {
                "no GPU found (no /dev/kfd, no libcuda): serving on the simulated GPU sim:mi50"
                    .to_string()
            } else {
                format!(
                    "found {}: auto serves on the simulated GPU sim:mi50 (the AMD backend cannot execute kernels in this build; NVIDIA GPUs are served with --device cuda:N)",
                    found.join(" and ")
                )
            };
            Ok(Selected {
                preset: "mi50".into(),
                notice: Some(notice),
                cuda: None,
                kfd: None,
            })
        }
        // The HIP launch path needs the HIP runtime only (daemon.rs loads
        // it); root is decided once HIP names its GPU, as for cuda:N, and
        // level 3 (the KFD) is probed where /dev/kfd answers.
        DeviceSpec::Kfd(n) => {
            // (/dev/kfd and root matter to level 3 only: daemon.rs.)
            let _ = (probe.kfd, is_root);
            Ok(Selected {
                preset: String::new(),
                notice: None,
                cuda: None,
                kfd: Some(*n),
            })
        }
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_all_forms() {
        assert_eq!(DeviceSpec::parse("auto"), Ok(DeviceSpec::Auto));
        assert_eq!(
            DeviceSpec::parse("sim:gv100"),
            Ok(DeviceSpec::Sim("gv100".into()))
        );
        assert_eq!(DeviceSpec::parse("cuda:1"), Ok(DeviceSpec::Cuda(vec![1])));
        assert_eq!(
            DeviceSpec::parse("cuda:0,cuda:1"),
            Ok(DeviceSpec::Cuda(vec![0, 1]))
        );
        assert_eq!(
            DeviceSpec::Cuda(vec![2, 0]).to_string(),
            "cuda:2,cuda:0",
            "a node keeps the operator's order"
        );
        let e = DeviceSpec::parse("sim:mi50,cuda:0").unwrap_err();
        assert!(e.contains("mixes kinds of device"), "{e}");
        let e = DeviceSpec::parse("cuda:0,cuda:0").unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = DeviceSpec::parse("cuda:0,1").unwrap_err();
        assert!(e.contains("\"1\" is not cuda:N"), "{e}");
        // A simulated node is unchanged.
        assert_eq!(
            DeviceSpec::parse("sim:mi50,gv100"),
            Ok(DeviceSpec::Sim("mi50,gv100".into()))
        );
        assert_eq!(DeviceSpec::parse("kfd:0"), Ok(DeviceSpec::Kfd(0)));
        for bad in ["", "gpu", "sim:a100", "cuda:x", "kfd:-1", "tpu:0"] {
            assert!(DeviceSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn auto_falls_back_with_notice() {
        let s = select(&DeviceSpec::Auto, &Probe::default(), false).unwrap();
        assert_eq!(s.preset, "mi50");
        assert!(s.notice.unwrap().contains("no GPU found"));
        let s = select(
            &DeviceSpec::Auto,
            &Probe {
                kfd: true,
                cuda: false,
            },
            true,
        )
        .unwrap();
        assert!(s.notice.unwrap().contains("/dev/kfd"));
    }

    #[test]
    fn hardware_needs_root_and_presence() {
        let p = Probe::default();
        // kfd:N: the HIP runtime decides (daemon.rs), as libcuda does for
        // cuda:N; root is checked once HIP names its GPU.
        assert_eq!(select(&DeviceSpec::Kfd(2), &p, false).unwrap().kfd, Some(2));
        // cuda:N: the driver library decides (root is checked once the
        // driver names its GPU).
        let e = select(&DeviceSpec::Cuda(vec![0]), &p, false).unwrap_err();
        assert!(e.to_string().contains("REEF_CUDA_LIBRARY"), "{e}");
        let s = select(
            &DeviceSpec::Cuda(vec![1]),
            &Probe {
                kfd: false,
                cuda: true,
            },
            false,
        )
        .unwrap();
        assert_eq!(s.cuda, Some(vec![1]));
    }

    #[test]
    fn probe_does_not_panic_without_gpu() {
        let p = probe();
        // This machine has neither; the call must return, not panic.
        assert_eq!(p.kfd, Path::new("/dev/kfd").exists());
    }
}
