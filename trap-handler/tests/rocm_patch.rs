//! The REEF KFD driver patch (rocm-patch/, REEF §4.5 "Kernel killing"):
//! what can be checked here without a kernel tree. The patch must be a
//! well-formed git patch; its UAPI part must apply to the kernel's own
//! kfd_ioctl.h (Debian's linux-libc-dev 6.12 from bookworm-backports, which
//! scripts/setup.sh unpacks into .tools/) and, compiled by the C compiler,
//! give the ioctl numbers the reef ioctl crate uses
//! (ioctl/src/kfd/reef_patch.rs: 0x40044B85 and 0x40084B86). The driver
//! hunks are compiled against Debian's linux-source-6.12 by
//! scripts/check-rocm-patch.sh; bindgen's view of the layouts is compared in
//! ioctl/bindgen-check.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn patch_file() -> PathBuf {
    repo_root().join("rocm-patch/0001-drm-amdkfd-REEF-wave-reset-and-clear-queue-ioctls.patch")
}

/// The Linux 6.12 UAPI include directory (REEF_KERNEL_HEADERS overrides).
fn header_root() -> PathBuf {
    std::env::var_os("REEF_KERNEL_HEADERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".tools/linux-libc-dev/usr/include"))
}

fn kernel_kfd_header() -> PathBuf {
    let h = header_root().join("linux/kfd_ioctl.h");
    let text = std::fs::read_to_string(&h).unwrap_or_default();
    assert!(
        text.contains("AMDKFD_IOC_DBG_TRAP"),
        "{} missing or older than 6.4: run scripts/setup.sh \
         (scripts/setup.d/20-kernel-headers.sh unpacks linux-libc-dev 6.12)",
        h.display()
    );
    h
}

#[test]
fn git_parses_the_whole_patch() {
    // Outside any repository: inside one, git apply skips paths that are
    // not below the current directory.
    let dir = tempfile::tempdir().unwrap();
    let out = stdout(
        Command::new("git")
            .current_dir(dir.path())
            .args(["apply", "--numstat"])
            .arg(patch_file()),
    );
    let files: Vec<&str> = out.lines().filter_map(|l| l.split('\t').nth(2)).collect();
    assert_eq!(
        files,
        [
            "drivers/gpu/drm/amd/amdkfd/kfd_chardev.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.c",
            "drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.h",
            "drivers/gpu/drm/amd/amdkfd/kfd_priv.h",
            "include/uapi/linux/kfd_ioctl.h"
        ]
    );
}

#[test]
fn uapi_applies_to_the_kernel_header_and_matches_the_ioctl_crate() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("linux");
    let uapi = tree.join("include/uapi/linux");
    std::fs::create_dir_all(&uapi).unwrap();
    std::fs::copy(kernel_kfd_header(), uapi.join("kfd_ioctl.h")).unwrap();
    run(Command::new("git")
        .current_dir(&tree)
        .args(["apply", "--include=include/uapi/*"])
        .arg(patch_file()));

    // Compile against the patched header (ahead of /usr/include).
    let inc = dir.path().join("inc/linux");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::copy(uapi.join("kfd_ioctl.h"), inc.join("kfd_ioctl.h")).unwrap();
    // kfd_ioctl.h includes <drm/drm.h> only for the __u32/__u64 types; Debian
    // ships that header in libdrm-dev, not linux-libc-dev. Stand in for it
    // with the kernel's types header when it is absent.
    if !Path::new("/usr/include/drm/drm.h").is_file() {
        let drm = dir.path().join("inc/drm");
        std::fs::create_dir_all(&drm).unwrap();
        std::fs::write(drm.join("drm.h"), "#include <linux/types.h>\n").unwrap();
    }
    let src = dir.path().join("check.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <linux/kfd_ioctl.h>
_Static_assert(sizeof(struct kfd_ioctl_wave_reset_args) == 4, "wave_reset args");
_Static_assert(sizeof(struct kfd_ioctl_clear_queue_args) == 8, "clear_queue args");
_Static_assert(AMDKFD_REEF_COMMAND_START >= AMDKFD_COMMAND_END, "collides with upstream");
_Static_assert(_IOC_NR(AMDKFD_IOC_WAVE_RESET) >= AMDKFD_REEF_COMMAND_START, "range");
_Static_assert(_IOC_NR(AMDKFD_IOC_CLEAR_QUEUE) < AMDKFD_REEF_COMMAND_END, "range");
int main(void) {
    printf("%#x %#x %u %u\n", (unsigned)AMDKFD_IOC_WAVE_RESET, (unsigned)AMDKFD_IOC_CLEAR_QUEUE,
           (unsigned)_IOC_DIR(AMDKFD_IOC_WAVE_RESET), (unsigned)_IOC_DIR(AMDKFD_IOC_CLEAR_QUEUE));
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("check");
    run(Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(dir.path().join("inc"))
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let out = stdout(&mut Command::new(&exe));
    // _IOC_WRITE = 1: both carry input only (`_IOW`).
    assert_eq!(out.trim(), "0x40044b85 0x40084b86 1 1");
}

#[test]
fn unpatched_header_has_neither_ioctl() {
    let text = std::fs::read_to_string(kernel_kfd_header()).unwrap();
    assert!(!text.contains("AMDKFD_IOC_WAVE_RESET"));
    assert!(!text.contains("AMDKFD_IOC_CLEAR_QUEUE"));
}
