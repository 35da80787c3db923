//! Generates `$OUT_DIR/reef_patch_bindings.rs` with bindgen from the REEF
//! KFD patch's UAPI part applied to Linux 6.12's `kfd_ioctl.h`.
//!
//! Inputs, both real: every `rocm-patch/*.patch` (only its
//! `include/uapi/*` hunks are applied, with `git apply`, which allows no
//! fuzz) and the `linux/kfd_ioctl.h` of Debian's linux-libc-dev 6.12 that
//! scripts/setup.d/20-kernel-headers.sh unpacks into
//! `.tools/linux-libc-dev` (or the include directory in
//! `REEF_KERNEL_HEADERS`). The patched header is not committed: it is made
//! from those two at every build, so it cannot drift from the patch.
//!
//! Where an input or libclang is missing, or the patch does not apply, the
//! build still succeeds with `cfg(reef_no_bindings)` and the reason in
//! `REEF_BINDGEN_MISSING`, and the crate's tests fail with that reason.

use std::path::PathBuf;
use std::process::Command;

/// The request codes are function-like macros (`AMDKFD_IOW(0x85, struct
/// ...)`), which bindgen does not expand; an enum makes clang evaluate them.
const WRAPPER: &str = r#"#include <linux/kfd_ioctl.h>
enum reef_patch_request {
	REEF_AMDKFD_IOC_WAVE_RESET = AMDKFD_IOC_WAVE_RESET,
	REEF_AMDKFD_IOC_CLEAR_QUEUE = AMDKFD_IOC_CLEAR_QUEUE,
};
"#;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(reef_no_bindings)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=REEF_KERNEL_HEADERS");
    if let Err(why) = generate() {
        println!("cargo::warning=no bindgen bindings of the REEF patch: {why}");
        println!("cargo::rustc-cfg=reef_no_bindings");
        println!(
            "cargo::rustc-env=REEF_BINDGEN_MISSING={}",
            why.replace('\n', " ")
        );
    }
}

fn generate() -> Result<(), String> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());

    let patch_dir = root.join("rocm-patch");
    println!("cargo::rerun-if-changed={}", patch_dir.display());
    let mut patches: Vec<PathBuf> = std::fs::read_dir(&patch_dir)
        .map_err(|e| format!("reading {}: {e}", patch_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "patch"))
        .collect();
    patches.sort();
    if patches.is_empty() {
        return Err(format!("no *.patch in {}", patch_dir.display()));
    }
    for p in &patches {
        println!("cargo::rerun-if-changed={}", p.display());
    }

    let headers = std::env::var_os("REEF_KERNEL_HEADERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".tools/linux-libc-dev/usr/include"));
    let header = headers.join("linux/kfd_ioctl.h");
    println!("cargo::rerun-if-changed={}", header.display());
    let text = std::fs::read_to_string(&header).unwrap_or_default();
    if !text.contains("AMDKFD_IOC_DBG_TRAP") {
        return Err(format!(
            "{} is missing or older than Linux 6.4; run scripts/setup.sh (it unpacks \
             linux-libc-dev 6.12 from bookworm-backports into .tools/) or set \
             REEF_KERNEL_HEADERS",
            header.display()
        ));
    }

    // Outside any repository: inside one (target/ is in the work tree),
    // git apply skips paths that are not below the current directory.
    let tmp = std::env::temp_dir().join(format!("reef-bindgen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let uapi = tmp.join("include/uapi/linux");
    std::fs::create_dir_all(&uapi).map_err(|e| format!("creating {}: {e}", uapi.display()))?;
    std::fs::copy(&header, uapi.join("kfd_ioctl.h")).map_err(|e| format!("copying: {e}"))?;
    let applied = Command::new("git")
        .current_dir(&tmp)
        .args(["apply", "--include=include/uapi/*"])
        .args(&patches)
        .output()
        .map_err(|e| format!("running git apply: {e}"))?;
    if !applied.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(format!(
            "the patch's UAPI part does not apply to {}: {}",
            header.display(),
            String::from_utf8_lossy(&applied.stderr).trim()
        ));
    }
    let inc = out.join("include/linux");
    std::fs::create_dir_all(&inc).map_err(|e| format!("creating {}: {e}", inc.display()))?;
    std::fs::copy(uapi.join("kfd_ioctl.h"), inc.join("kfd_ioctl.h"))
        .map_err(|e| format!("copying the patched header: {e}"))?;
    let _ = std::fs::remove_dir_all(&tmp);
    let wrapper = out.join("reef_patch_wrapper.h");
    std::fs::write(&wrapper, WRAPPER).map_err(|e| format!("writing the wrapper: {e}"))?;

    // Debian's multiarch directory holds <asm/ioctl.h>.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = headers.join(format!("{arch}-linux-gnu"));
    let builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_arg(format!("-I{}", out.join("include").display()))
        .clang_arg(format!("-I{}", headers.display()))
        .clang_arg(format!("-I{}", multiarch.display()))
        .allowlist_type("kfd_ioctl_(wave_reset|clear_queue)_args")
        .allowlist_type("reef_patch_request")
        .allowlist_var("AMDKFD_(REEF_)?COMMAND_(START|END)|AMDKFD_IOCTL_BASE|REEF_AMDKFD_IOC_.*")
        .constified_enum("reef_patch_request")
        .prepend_enum_name(false)
        .derive_default(true);
    // In runtime mode a missing libclang is a panic inside bindgen.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()))
            .map_err(|_| {
                "bindgen could not load libclang (Debian's libclang1-14; scripts/setup.sh \
             installs it)"
                    .to_string()
            })?
            .map_err(|e| format!("bindgen failed on the patched header: {e}"))?;
    generated
        .write_to_file(out.join("reef_patch_bindings.rs"))
        .map_err(|e| format!("writing the bindings: {e}"))?;
    Ok(())
}
