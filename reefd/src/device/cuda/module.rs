//! A model's CUDA module: the package reef-model read
//! ([`reef_model::package`]) with its PTX chosen for the GPU ([`pick_arch`])
//! and rewritten by reef-ptx-inject (REEF §4.6: the preempt-flag check at
//! each block's entry and the execution index, Fig. 8), ready for
//! `cuModuleLoadData`.
//!
//! A compiled model's recorded work, resources and read/write sets are
//! written into the module as `// reef-sim:` comments: a real driver
//! ignores them; the simulated libcuda takes kernel durations and value
//! dependencies from them with reef-sim's cost model
//! (libcuda-sim/src/ptx.rs).

use std::collections::HashSet;
use std::ffi::CString;
use std::path::Path;
use std::sync::Arc;

use reef_model::package::{Limits, Package};

use super::driver::CudaError;

/// A model read from its directory and made ready for the driver.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// Shared with the runtime that read it: its weights are not copied.
    pub pkg: Arc<Package>,
    /// The PTX after reef-ptx-inject, NUL-terminated for cuModuleLoadData.
    pub(crate) ptx: CString,
}

impl std::ops::Deref for ModelFiles {
    type Target = Package;
    fn deref(&self) -> &Package {
        &self.pkg
    }
}

impl ModelFiles {
    /// Reads and checks a model directory for a GPU of unknown compute
    /// capability (a compiled model's highest architecture is taken).
    pub fn read(dir: &Path) -> Result<ModelFiles, CudaError> {
        Self::read_for(dir, None, &Limits::default())
    }

    /// Reads a model directory for a GPU of compute capability `cc`
    /// (major, minor), within `limits`, and injects its PTX.
    pub fn read_for(
        dir: &Path,
        cc: Option<(i32, i32)>,
        limits: &Limits,
    ) -> Result<ModelFiles, CudaError> {
        let pkg = Package::read(dir, &|archs| pick_arch(archs, cc), limits)?;
        Self::from_package(dir, Arc::new(pkg))
    }

    /// A package already read (by the runtime, with the client's rights)
    /// made ready for the driver: its PTX injected.
    pub fn from_package(dir: &Path, pkg: Arc<Package>) -> Result<ModelFiles, CudaError> {
        let err = |detail: String| CudaError::Model {
            path: dir.display().to_string(),
            detail,
        };
        let src = std::str::from_utf8(&pkg.code).map_err(|_| {
            err(format!(
                "{} is not PTX text (not UTF-8)",
                pkg.code_path.display()
            ))
        })?;
        // The parser's message quotes the token it stopped at: a file's
        // contents never go into a reply (issue 25, D2), only where.
        let inj = reef_trap::ptx::inject(
            src,
            &pkg.code_path.display().to_string(),
            &Default::default(),
        )
        .map_err(|e| {
            let at = match &e {
                reef_trap::Error::Ptx { line, .. } => format!(" (line {line})"),
                _ => String::new(),
            };
            err(format!(
                "{}{at} is not PTX that reef-ptx-inject can rewrite; run `reef-ptx-inject {}` \
                     to see why",
                pkg.code_path.display(),
                pkg.code_path.display()
            ))
        })?;
        for k in &pkg.launches {
            if !inj.entries.contains(&k.name) {
                return Err(err(format!(
                    "kernel {} is not an .entry of {}",
                    k.name,
                    pkg.code_path.display()
                )));
            }
        }
        let annotations = match (&pkg.schedule, &pkg.arch) {
            (Some(m), Some(arch)) => annotations(m, arch).map_err(err)?,
            _ => String::new(),
        };
        let text = match (&pkg.schedule, &pkg.arch) {
            (Some(_), Some(arch)) => format!(
                "// reef: {} for {arch}, injected by reef-ptx-inject; recorded work below.\n\
                 {annotations}{}",
                pkg.name, inj.ptx
            ),
            _ => inj.ptx,
        };
        let ptx = CString::new(text).map_err(|_| err("the PTX contains a NUL byte".into()))?;
        Ok(ModelFiles { pkg, ptx })
    }

    /// The kernels in execution order.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.pkg.launches.iter().map(|k| k.name.as_str()).collect()
    }
}

/// One `// reef-sim:` line per kernel of a compiled schedule.
pub(crate) fn annotations(m: &reef_model::Model, arch: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut annotated = HashSet::new();
    for k in &m.kernels {
        if !annotated.insert(k.name.clone()) {
            continue;
        }
        let Some(w) = k.work else {
            return Err(format!(
                "kernel {} has no recorded work (flops, bytes)",
                k.name
            ));
        };
        let pos = |set: &[usize]| -> String {
            let v: Vec<String> = (0..k.args.len())
                .filter(|&p| set.contains(&k.args[p]))
                .map(|p| p.to_string())
                .collect();
            v.join(",")
        };
        let mut line = format!(
            "// reef-sim: kernel={} flops={} bytes={}",
            k.name,
            w.flops,
            w.bytes_read.saturating_add(w.bytes_written)
        );
        if let Some(r) = k.resources.get(arch) {
            line += &format!(" regs={} shared={}", r.registers, r.shared_static);
        }
        // A storage the kernel both reads and writes is given as written
        // only: the recorded sets come from TIR's loads and stores, and
        // TVM's in-place accumulations (max pool, reductions) initialise
        // their output before reading it back (kernels.cu), so its previous
        // contents are no input. Limit: level 2 re-executes a kernel the
        // flag cut short (kernels.rs: its index is its own), and the
        // simulated driver's value model then cannot see a kernel that
        // truly accumulates into old contents run twice (a compiled kernel
        // computes its whole TIR function again from its inputs); such a
        // kernel needs an idempotent group (reef-check-idem) on a GPU.
        let inputs: Vec<usize> = k
            .reads
            .iter()
            .copied()
            .filter(|r| !k.writes.contains(r))
            .collect();
        for (key, set) in [("reads", &inputs), ("writes", &k.writes)] {
            let p = pos(set);
            if !p.is_empty() {
                line += &format!(" {key}={p}");
            }
        }
        out += &line;
        out.push('\n');
    }
    Ok(out)
}

/// `sm_90a` → 90.
fn arch_number(arch: &str) -> Option<i32> {
    let digits: String = arch
        .strip_prefix("sm_")?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// The architecture whose PTX a GPU of compute capability `cc` loads: the
/// highest one compiled for that is not newer than the GPU (a driver
/// JIT-compiles PTX for its own or a later architecture, never an earlier
/// one: CUDA C Programming Guide, "Binary Compatibility"/"PTX
/// Compatibility"). Without a compute capability (a driver that does not
/// report it), the highest architecture compiled for.
pub fn pick_arch(archs: &[String], cc: Option<(i32, i32)>) -> Result<String, String> {
    let mut known: Vec<(i32, &String)> = archs
        .iter()
        .filter_map(|a| arch_number(a).map(|n| (n, a)))
        .collect();
    known.sort();
    let Some(&(_, highest)) = known.last() else {
        return Err(format!("no sm_NN architecture among {archs:?}"));
    };
    let Some((major, minor)) = cc else {
        return Ok(highest.clone());
    };
    let gpu = major * 10 + minor;
    known
        .iter()
        .rev()
        .find(|(n, _)| *n <= gpu)
        .map(|(_, a)| (*a).clone())
        .ok_or_else(|| {
            format!(
                "compiled for {} only, and this GPU is compute capability {major}.{minor} \
                 (sm_{gpu}), which cannot run PTX for a newer architecture: recompile with \
                 reef-compile --arch sm_{gpu}",
                archs.join(", ")
            )
        })
}
