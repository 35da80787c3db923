//! A compiled model for an AMD GPU: the package reef-model reads (schedule,
//! storages, launches, weights) with the code object reef-compile wrote for
//! the GPU's processor (`code_objects` of the schedule, chosen by the
//! `gcnArchName` HIP reports: `gfx906:sramecc+:xnack-` → `gfx906`), made
//! into the image `hipModuleLoadData` is given: a clang offload bundle
//! (clang-offload-bundler's format, which HIP's loader accepts, clr
//! hipamd/src/hip_fatbin.cpp) of the code object and a host entry.
//!
//! The host entry carries what the CUDA path writes as PTX comments
//! (cuda/module.rs): each kernel's recorded work, resources and read/write
//! sets (`// reef-sim:`), and the CPU build's lines of the model's PTX
//! (`// reef-cpu:`). HIP's loader takes the entry for the GPU's processor
//! and never reads the host entry; the simulated libamdhip64 takes kernel
//! durations and real values from it (libhip-sim/src/codeobj.rs).
//!
//! The code objects carry REEF's preempt-flag check (reef-compile's
//! `inject_preempt_check`, compile/reef_compile/amd.py): module globals
//! `reef_preempt_flag` and `reef_exec_index` and a trailing
//! `__reef_exec_idx` parameter, as reef-ptx-inject writes in PTX.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use reef_model::package::{Limits, Package};
use serde::Deserialize;

use super::driver::HipError;

/// The clang offload bundle's magic and the target ids it uses for code
/// object v4 and the host.
pub const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
pub const HOST_TARGET: &str = "host-x86_64-unknown-linux-gnu";

/// A model read for an AMD GPU and its module image.
#[derive(Debug, Clone)]
pub struct HipModel {
    pub pkg: Arc<Package>,
    /// The processor whose code object was taken (`gfx906`).
    pub processor: String,
    /// The offload bundle for `hipModuleLoadData`.
    pub image: Vec<u8>,
}

impl std::ops::Deref for HipModel {
    type Target = Package;
    fn deref(&self) -> &Package {
        &self.pkg
    }
}

#[derive(Deserialize)]
struct CodeObjects {
    #[serde(default)]
    code_objects: BTreeMap<String, CodeObjectEntry>,
}

#[derive(Deserialize)]
struct CodeObjectEntry {
    file: String,
}

/// `gfx906:sramecc+:xnack-` → `gfx906` (LLVM AMDGPU usage, "Target ID").
pub fn processor(gcn_arch_name: &str) -> &str {
    gcn_arch_name.split(':').next().unwrap_or(gcn_arch_name)
}

impl HipModel {
    /// Reads model directory `dir` for a GPU whose `gcnArchName` is
    /// `gcn_arch`.
    pub fn read(dir: &Path, gcn_arch: &str, limits: &Limits) -> Result<HipModel, HipError> {
        let err = |detail: String| HipError::Model {
            path: dir.display().to_string(),
            detail,
        };
        // The schedule and the PTX of any NVIDIA architecture: the
        // schedule is shared (amd.py), the PTX carries the CPU build's
        // lines.
        let pkg = Package::read(
            dir,
            &|archs| {
                archs.first().cloned().ok_or_else(|| {
                    "compiled without an NVIDIA architecture; reef-compile writes the CPU \
                     build's kernel table in the PTX: add --arch sm_80"
                        .to_string()
                })
            },
            limits,
        )?;
        Self::from_package(dir, Arc::new(pkg), gcn_arch).map_err(err)
    }

    /// A package already read, with the code object for `gcn_arch`.
    pub fn from_package(dir: &Path, pkg: Arc<Package>, gcn_arch: &str) -> Result<HipModel, String> {
        let proc_ = processor(gcn_arch).to_string();
        let stem = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let json = dir.join(format!("{stem}.json"));
        let text =
            reef_model::files::read_text(&json, "schedule", reef_model::files::MAX_TEXT_BYTES)
                .map_err(|e| e.to_string())?;
        let cos: CodeObjects =
            serde_json::from_str(&text).map_err(|e| format!("{stem}.json: {e}"))?;
        let Some(entry) = cos.code_objects.get(&proc_) else {
            let have: Vec<&String> = cos.code_objects.keys().collect();
            return Err(format!(
                "no code object for this GPU's {proc_} (compiled for {have:?}): recompile with \
                 reef-compile --arch {proc_}"
            ));
        };
        if entry.file.contains('/') {
            return Err(format!(
                "code object file {:?} is not in the model directory",
                entry.file
            ));
        }
        let co_path = dir.join(&entry.file);
        let code =
            reef_model::files::read(&co_path, "code object", reef_model::files::MAX_CODE_BYTES)
                .map_err(|e| e.to_string())?;
        let mut host = String::new();
        if let Some(m) = &pkg.schedule {
            host += &crate::device::cuda::module::annotations(m, &proc_)?;
        }
        // The CPU build's lines, from the PTX reef-compile annotated.
        for line in String::from_utf8_lossy(&pkg.code).lines() {
            if line.starts_with("// reef-cpu:") {
                host += line;
                host.push('\n');
            }
        }
        let image = bundle(&[
            (HOST_TARGET, host.as_bytes()),
            (&format!("hipv4-amdgcn-amd-amdhsa--{proc_}"), &code),
        ]);
        Ok(HipModel {
            pkg,
            processor: proc_,
            image,
        })
    }

    /// The kernels in execution order.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.pkg.launches.iter().map(|k| k.name.as_str()).collect()
    }
}

/// An offload bundle of `entries` (target id, contents), in
/// clang-offload-bundler's layout: the magic, a u64 count, then per entry
/// u64 offset, u64 size, u64 length of the id and the id; the contents
/// follow, each at its offset (little endian).
pub fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = BUNDLE_MAGIC.to_vec();
    out.extend((entries.len() as u64).to_le_bytes());
    let header: usize = out.len() + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
    let mut off = header as u64;
    for (id, body) in entries {
        out.extend(off.to_le_bytes());
        out.extend((body.len() as u64).to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
        off += body.len() as u64;
    }
    for (_, body) in entries {
        out.extend(*body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_drops_target_features() {
        assert_eq!(processor("gfx906:sramecc+:xnack-"), "gfx906");
        assert_eq!(processor("gfx90a"), "gfx90a");
    }

    #[test]
    fn bundle_layout() {
        let b = bundle(&[
            (HOST_TARGET, b"h"),
            ("hipv4-amdgcn-amd-amdhsa--gfx906", b"co"),
        ]);
        assert!(b.starts_with(BUNDLE_MAGIC));
        assert_eq!(u64::from_le_bytes(b[24..32].try_into().unwrap()), 2);
        let off0 = u64::from_le_bytes(b[32..40].try_into().unwrap()) as usize;
        assert_eq!(&b[off0..off0 + 1], b"h");
        assert_eq!(&b[b.len() - 2..], b"co");
    }
}
