//! Header comparisons: a small C program, compiled with `cc` against the
//! Linux 6.x UAPI `kfd_ioctl.h` that scripts/setup.sh unpacks into
//! `.tools/linux-libc-dev`, prints the request codes, constants, struct sizes
//! and field offsets; each test compares them with reef-ioctl's values.
//!
//! Paper: REEF §4.5 (the KFD interface the AMD backend drives).

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use reef_ioctl::kfd::abi::*;
use reef_ioctl::kfd::reef_patch::*;

fn header_root() -> PathBuf {
    if let Some(p) = std::env::var_os("REEF_KERNEL_HEADERS") {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/linux-libc-dev/usr/include")
}

/// One C expression per entry, printed as `name value`.
const C_ITEMS: &[(&str, &str)] = &[
    ("AMDKFD_IOC_GET_VERSION", "AMDKFD_IOC_GET_VERSION"),
    ("AMDKFD_IOC_SET_CU_MASK", "AMDKFD_IOC_SET_CU_MASK"),
    ("AMDKFD_IOC_RUNTIME_ENABLE", "AMDKFD_IOC_RUNTIME_ENABLE"),
    ("AMDKFD_IOC_DBG_TRAP", "AMDKFD_IOC_DBG_TRAP"),
    ("AMDKFD_COMMAND_END", "AMDKFD_COMMAND_END"),
    ("KFD_IOCTL_MAJOR_VERSION", "KFD_IOCTL_MAJOR_VERSION"),
    ("KFD_IOCTL_MINOR_VERSION", "KFD_IOCTL_MINOR_VERSION"),
    ("KFD_DBG_QUEUE_ERROR_MASK", "KFD_DBG_QUEUE_ERROR_MASK"),
    // `(1 << 31)` is a negative int in C; KFD ORs it into __u32 queue ids.
    (
        "KFD_DBG_QUEUE_INVALID_MASK",
        "(__u32)KFD_DBG_QUEUE_INVALID_MASK",
    ),
    ("KFD_IOC_DBG_TRAP_ENABLE", "KFD_IOC_DBG_TRAP_ENABLE"),
    ("KFD_IOC_DBG_TRAP_DISABLE", "KFD_IOC_DBG_TRAP_DISABLE"),
    (
        "KFD_IOC_DBG_TRAP_SUSPEND_QUEUES",
        "KFD_IOC_DBG_TRAP_SUSPEND_QUEUES",
    ),
    (
        "KFD_IOC_DBG_TRAP_RESUME_QUEUES",
        "KFD_IOC_DBG_TRAP_RESUME_QUEUES",
    ),
    (
        "KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT",
        "KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT",
    ),
    (
        "KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK",
        "KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK",
    ),
    (
        "KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK",
        "KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK",
    ),
    (
        "DEBUG_RUNTIME_STATE_DISABLED",
        "DEBUG_RUNTIME_STATE_DISABLED",
    ),
    ("DEBUG_RUNTIME_STATE_ENABLED", "DEBUG_RUNTIME_STATE_ENABLED"),
    (
        "DEBUG_RUNTIME_STATE_ENABLED_BUSY",
        "DEBUG_RUNTIME_STATE_ENABLED_BUSY",
    ),
    (
        "DEBUG_RUNTIME_STATE_ENABLED_ERROR",
        "DEBUG_RUNTIME_STATE_ENABLED_ERROR",
    ),
    ("KFD_EC_MASK(EC_QUEUE_NEW)", "KFD_EC_MASK(EC_QUEUE_NEW)"),
    // The REEF patch's codes, encoded by the kernel's own _IOW macro with
    // the patch's argument layouts (this checks the encoding, not the patch).
    ("REEF_WAVE_RESET", "_IOW('K', 0x85, struct reef_wave_reset)"),
    (
        "REEF_CLEAR_QUEUE",
        "_IOW('K', 0x86, struct reef_clear_queue)",
    ),
];

macro_rules! layout {
    ($($cty:literal => $rty:ty { $($cf:literal => $rf:ident),* $(,)? }),* $(,)?) => {
        /// (C expression, Rust value) for every size and offset.
        fn layout_items() -> Vec<(String, u64)> {
            let mut v = Vec::new();
            $(
                v.push((format!("sizeof(struct {})", $cty), size_of::<$rty>() as u64));
                $(
                    v.push((format!("offsetof(struct {}, {})", $cty, $cf), offset_of!($rty, $rf) as u64));
                )*
            )*
            v
        }
    };
}

layout! {
    "kfd_ioctl_get_version_args" => KfdIoctlGetVersionArgs {
        "major_version" => major_version, "minor_version" => minor_version },
    "kfd_ioctl_set_cu_mask_args" => KfdIoctlSetCuMaskArgs {
        "queue_id" => queue_id, "num_cu_mask" => num_cu_mask, "cu_mask_ptr" => cu_mask_ptr },
    "kfd_runtime_info" => KfdRuntimeInfo {
        "r_debug" => r_debug, "runtime_state" => runtime_state, "ttmp_setup" => ttmp_setup },
    "kfd_ioctl_runtime_enable_args" => KfdIoctlRuntimeEnableArgs {
        "r_debug" => r_debug, "mode_mask" => mode_mask, "capabilities_mask" => capabilities_mask },
    "kfd_queue_snapshot_entry" => KfdQueueSnapshotEntry {
        "exception_status" => exception_status, "ring_base_address" => ring_base_address,
        "write_pointer_address" => write_pointer_address,
        "read_pointer_address" => read_pointer_address,
        "ctx_save_restore_address" => ctx_save_restore_address, "queue_id" => queue_id,
        "gpu_id" => gpu_id, "ring_size" => ring_size, "queue_type" => queue_type,
        "ctx_save_restore_area_size" => ctx_save_restore_area_size, "reserved" => reserved },
    "kfd_ioctl_dbg_trap_enable_args" => KfdIoctlDbgTrapEnableArgs {
        "exception_mask" => exception_mask, "rinfo_ptr" => rinfo_ptr,
        "rinfo_size" => rinfo_size, "dbg_fd" => dbg_fd },
    "kfd_ioctl_dbg_trap_suspend_queues_args" => KfdIoctlDbgTrapSuspendQueuesArgs {
        "exception_mask" => exception_mask, "queue_array_ptr" => queue_array_ptr,
        "num_queues" => num_queues, "grace_period" => grace_period },
    "kfd_ioctl_dbg_trap_resume_queues_args" => KfdIoctlDbgTrapResumeQueuesArgs {
        "queue_array_ptr" => queue_array_ptr, "num_queues" => num_queues, "pad" => pad },
    "kfd_ioctl_dbg_trap_queue_snapshot_args" => KfdIoctlDbgTrapQueueSnapshotArgs {
        "exception_mask" => exception_mask, "snapshot_buf_ptr" => snapshot_buf_ptr,
        "num_queues" => num_queues, "entry_size" => entry_size },
    "kfd_ioctl_dbg_trap_args" => KfdIoctlDbgTrapArgs {
        "pid" => pid, "op" => op, "enable" => args },
}

/// Compiles and runs the C program once; returns its `name value` lines.
fn c_values() -> &'static BTreeMap<String, u64> {
    static VALUES: OnceLock<BTreeMap<String, u64>> = OnceLock::new();
    VALUES.get_or_init(|| {
        let root = header_root();
        let header = root.join("linux/kfd_ioctl.h");
        let text = std::fs::read_to_string(&header).unwrap_or_default();
        assert!(
            text.contains("AMDKFD_IOC_DBG_TRAP"),
            "the Linux 6.x UAPI header {} is missing or predates the KFD debug API; run \
             scripts/setup.sh (it unpacks linux-libc-dev from bookworm-backports into .tools/), \
             or set REEF_KERNEL_HEADERS to an include directory that has it",
            header.display()
        );
        let multiarch = Command::new("cc")
            .arg("-print-multiarch")
            .output()
            .expect("running `cc -print-multiarch`: install a C compiler (scripts/setup.sh does)");
        let multiarch = String::from_utf8_lossy(&multiarch.stdout)
            .trim()
            .to_string();

        let mut src = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <linux/kfd_ioctl.h>\n\
             struct reef_wave_reset { __u32 gpu_id; };\n\
             struct reef_clear_queue { __u32 gpu_id; __u32 queue_id; };\n\
             int main(void) {\n",
        );
        let mut names: Vec<String> = C_ITEMS.iter().map(|(n, _)| n.to_string()).collect();
        for (name, expr) in C_ITEMS {
            src +=
                &format!("  printf(\"%s %llu\\n\", \"{name}\", (unsigned long long)({expr}));\n");
        }
        for (expr, _) in layout_items() {
            src +=
                &format!("  printf(\"%s %llu\\n\", \"{expr}\", (unsigned long long)({expr}));\n");
            names.push(expr);
        }
        src += "  return 0;\n}\n";

        let dir = std::env::temp_dir().join(format!("reef-kfd-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a temporary directory");
        let c = dir.join("kfd_values.c");
        let exe = dir.join("kfd_values");
        std::fs::write(&c, src).expect("writing the C program");
        let mut cc = Command::new("cc");
        cc.arg("-std=gnu11").arg("-Wall").arg("-Werror");
        if !multiarch.is_empty() {
            cc.arg("-I").arg(root.join(&multiarch));
        }
        cc.arg("-I").arg(&root).arg("-o").arg(&exe).arg(&c);
        let out = cc.output().expect("running cc");
        assert!(
            out.status.success(),
            "compiling the header probe against {} failed:\n{}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let run = Command::new(&exe)
            .output()
            .expect("running the header probe");
        assert!(run.status.success(), "the header probe failed");
        let _ = std::fs::remove_dir_all(&dir);
        let values: BTreeMap<String, u64> = String::from_utf8_lossy(&run.stdout)
            .lines()
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect();
        for n in names {
            assert!(
                values.contains_key(&n),
                "the C probe printed no value for {n}"
            );
        }
        values
    })
}

fn compare(what: &str, items: &[(String, u64)]) {
    let c = c_values();
    let mismatches: Vec<String> = items
        .iter()
        .filter(|(k, v)| c.get(k) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k}: reef-ioctl has {v:#x}, the header says {:#x?}",
                c.get(k)
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{what} differ from kfd_ioctl.h:\n{}",
        mismatches.join("\n")
    );
    println!("{what}: {} values equal to kfd_ioctl.h", items.len());
}

#[test]
fn kfd_header_request_codes_match() {
    compare(
        "request codes",
        &[
            (
                "AMDKFD_IOC_GET_VERSION".into(),
                u64::from(AMDKFD_IOC_GET_VERSION),
            ),
            (
                "AMDKFD_IOC_SET_CU_MASK".into(),
                u64::from(AMDKFD_IOC_SET_CU_MASK),
            ),
            (
                "AMDKFD_IOC_RUNTIME_ENABLE".into(),
                u64::from(AMDKFD_IOC_RUNTIME_ENABLE),
            ),
            ("AMDKFD_IOC_DBG_TRAP".into(), u64::from(AMDKFD_IOC_DBG_TRAP)),
            ("REEF_WAVE_RESET".into(), u64::from(AMDKFD_IOC_WAVE_RESET)),
            ("REEF_CLEAR_QUEUE".into(), u64::from(AMDKFD_IOC_CLEAR_QUEUE)),
        ],
    );
}

#[test]
fn kfd_header_constants_match() {
    let c = c_values();
    // The header must be new enough for what this crate was built against.
    assert!(c["KFD_IOCTL_MINOR_VERSION"] >= u64::from(KFD_IOCTL_MINOR_VERSION));
    compare(
        "constants",
        &[
            ("AMDKFD_COMMAND_END".into(), u64::from(AMDKFD_COMMAND_END)),
            (
                "KFD_IOCTL_MAJOR_VERSION".into(),
                u64::from(KFD_IOCTL_MAJOR_VERSION),
            ),
            (
                "KFD_DBG_QUEUE_ERROR_MASK".into(),
                u64::from(KFD_DBG_QUEUE_ERROR_MASK),
            ),
            (
                "KFD_DBG_QUEUE_INVALID_MASK".into(),
                u64::from(KFD_DBG_QUEUE_INVALID_MASK),
            ),
            (
                "KFD_IOC_DBG_TRAP_ENABLE".into(),
                u64::from(KFD_IOC_DBG_TRAP_ENABLE),
            ),
            (
                "KFD_IOC_DBG_TRAP_DISABLE".into(),
                u64::from(KFD_IOC_DBG_TRAP_DISABLE),
            ),
            (
                "KFD_IOC_DBG_TRAP_SUSPEND_QUEUES".into(),
                u64::from(KFD_IOC_DBG_TRAP_SUSPEND_QUEUES),
            ),
            (
                "KFD_IOC_DBG_TRAP_RESUME_QUEUES".into(),
                u64::from(KFD_IOC_DBG_TRAP_RESUME_QUEUES),
            ),
            (
                "KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT".into(),
                u64::from(KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT),
            ),
            (
                "KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK".into(),
                u64::from(KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK),
            ),
            (
                "KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK".into(),
                u64::from(KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK),
            ),
            (
                "DEBUG_RUNTIME_STATE_DISABLED".into(),
                u64::from(DEBUG_RUNTIME_STATE_DISABLED),
            ),
            (
                "DEBUG_RUNTIME_STATE_ENABLED".into(),
                u64::from(DEBUG_RUNTIME_STATE_ENABLED),
            ),
            (
                "DEBUG_RUNTIME_STATE_ENABLED_BUSY".into(),
                u64::from(DEBUG_RUNTIME_STATE_ENABLED_BUSY),
            ),
            (
                "DEBUG_RUNTIME_STATE_ENABLED_ERROR".into(),
                u64::from(DEBUG_RUNTIME_STATE_ENABLED_ERROR),
            ),
            // EC_QUEUE_NEW is exception code 31 (kfd_ioctl.h:959).
            (
                "KFD_EC_MASK(EC_QUEUE_NEW)".into(),
                reef_ioctl::kfd::kfd_ec_mask(31),
            ),
        ],
    );
}

#[test]
fn kfd_header_struct_layouts_match() {
    compare("struct sizes and offsets", &layout_items());
}

#[test]
fn reef_patch_numbers_sit_outside_the_upstream_range() {
    // An unpatched kernel must not mistake them for one of its own ioctls.
    let end = c_values()["AMDKFD_COMMAND_END"];
    assert!(u64::from(NR_WAVE_RESET) >= end && u64::from(NR_CLEAR_QUEUE) >= end);
}
