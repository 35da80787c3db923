//! bindgen's layouts of the REEF KFD patch (generated from the real patch
//! applied to Linux 6.12's kfd_ioctl.h, see build.rs) equal the hand-written
//! ones in `reef_ioctl::kfd::reef_patch`: request codes, ioctl numbers, the
//! command range, argument sizes, alignments and field offsets.
//!
//! Paper: REEF §4.5 ("Kernel killing": the driver's kill exposed through
//! `ioctl`) and Fig. 7.

#[cfg(reef_no_bindings)]
#[test]
fn bindings_were_generated() {
    panic!(
        "bindgen produced no bindings of the REEF patch: {}",
        reef_ioctl_bindgen::MISSING.unwrap_or("unknown reason")
    );
}

#[cfg(not(reef_no_bindings))]
mod with_bindings {
    use std::mem::{align_of, offset_of, size_of};

    use reef_ioctl::kfd::abi::AMDKFD_IOCTL_BASE;
    use reef_ioctl::kfd::reef_patch::*;
    use reef_ioctl_bindgen::sys;

    #[test]
    fn request_codes_equal() {
        assert_eq!(
            sys::REEF_AMDKFD_IOC_WAVE_RESET,
            AMDKFD_IOC_WAVE_RESET,
            "AMDKFD_IOC_WAVE_RESET: bindgen {:#x}, reef-ioctl {:#x}",
            sys::REEF_AMDKFD_IOC_WAVE_RESET,
            AMDKFD_IOC_WAVE_RESET
        );
        assert_eq!(
            sys::REEF_AMDKFD_IOC_CLEAR_QUEUE,
            AMDKFD_IOC_CLEAR_QUEUE,
            "AMDKFD_IOC_CLEAR_QUEUE: bindgen {:#x}, reef-ioctl {:#x}",
            sys::REEF_AMDKFD_IOC_CLEAR_QUEUE,
            AMDKFD_IOC_CLEAR_QUEUE
        );
        println!(
            "request codes: WAVE_RESET {:#x}, CLEAR_QUEUE {:#x}",
            AMDKFD_IOC_WAVE_RESET, AMDKFD_IOC_CLEAR_QUEUE
        );
    }

    /// `_IOC(dir, type, nr, size)`: nr in bits 0-7, type 8-15, size 16-29,
    /// direction 30-31 (asm-generic/ioctl.h).
    fn decode(code: u32) -> (u32, u32, u32, u32) {
        (
            code >> 30,
            (code >> 16) & 0x3fff,
            (code >> 8) & 0xff,
            code & 0xff,
        )
    }

    #[test]
    fn numbers_type_direction_and_size_equal() {
        for (name, code, nr, size) in [
            (
                "WAVE_RESET",
                sys::REEF_AMDKFD_IOC_WAVE_RESET,
                NR_WAVE_RESET,
                size_of::<sys::kfd_ioctl_wave_reset_args>(),
            ),
            (
                "CLEAR_QUEUE",
                sys::REEF_AMDKFD_IOC_CLEAR_QUEUE,
                NR_CLEAR_QUEUE,
                size_of::<sys::kfd_ioctl_clear_queue_args>(),
            ),
        ] {
            let (dir, sz, ty, n) = decode(code);
            assert_eq!(dir, 1, "{name}: _IOC_WRITE only (_IOW)");
            assert_eq!(ty, u32::from(sys::AMDKFD_IOCTL_BASE), "{name}: ioctl type");
            assert_eq!(ty, u32::from(AMDKFD_IOCTL_BASE), "{name}: ioctl type");
            assert_eq!(n, u32::from(nr), "{name}: ioctl number");
            assert_eq!(sz as usize, size, "{name}: encoded argument size");
        }
    }

    #[test]
    fn numbers_sit_in_the_patch_range_above_upstream() {
        // AMDKFD_COMMAND_END of 6.12 (0x27): the debug API took 0x25, 0x26.
        assert_eq!(sys::AMDKFD_COMMAND_END, 0x27);
        const _: () = assert!(sys::AMDKFD_REEF_COMMAND_START >= sys::AMDKFD_COMMAND_END);
        for nr in [NR_WAVE_RESET, NR_CLEAR_QUEUE] {
            let nr = u32::from(nr);
            assert!(
                (sys::AMDKFD_REEF_COMMAND_START..sys::AMDKFD_REEF_COMMAND_END).contains(&nr),
                "{nr:#x} outside the patch's range"
            );
        }
    }

    #[test]
    fn argument_layouts_equal() {
        let mut checked = 0;
        let mut eq = |what: &str, bindgen: usize, ours: usize| {
            assert_eq!(
                bindgen, ours,
                "{what}: bindgen {bindgen}, reef-ioctl {ours}"
            );
            checked += 1;
        };
        eq(
            "sizeof(kfd_ioctl_wave_reset_args)",
            size_of::<sys::kfd_ioctl_wave_reset_args>(),
            size_of::<KfdIoctlWaveResetArgs>(),
        );
        eq(
            "alignof(kfd_ioctl_wave_reset_args)",
            align_of::<sys::kfd_ioctl_wave_reset_args>(),
            align_of::<KfdIoctlWaveResetArgs>(),
        );
        eq(
            "offsetof(kfd_ioctl_wave_reset_args, gpu_id)",
            offset_of!(sys::kfd_ioctl_wave_reset_args, gpu_id),
            offset_of!(KfdIoctlWaveResetArgs, gpu_id),
        );
        eq(
            "sizeof(kfd_ioctl_clear_queue_args)",
            size_of::<sys::kfd_ioctl_clear_queue_args>(),
            size_of::<KfdIoctlClearQueueArgs>(),
        );
        eq(
            "alignof(kfd_ioctl_clear_queue_args)",
            align_of::<sys::kfd_ioctl_clear_queue_args>(),
            align_of::<KfdIoctlClearQueueArgs>(),
        );
        eq(
            "offsetof(kfd_ioctl_clear_queue_args, gpu_id)",
            offset_of!(sys::kfd_ioctl_clear_queue_args, gpu_id),
            offset_of!(KfdIoctlClearQueueArgs, gpu_id),
        );
        eq(
            "offsetof(kfd_ioctl_clear_queue_args, queue_id)",
            offset_of!(sys::kfd_ioctl_clear_queue_args, queue_id),
            offset_of!(KfdIoctlClearQueueArgs, queue_id),
        );
        // Same field types too: a value written through one reads back
        // through the other.
        let ours = KfdIoctlClearQueueArgs {
            gpu_id: 0x1234,
            queue_id: 7,
        };
        let theirs = sys::kfd_ioctl_clear_queue_args {
            gpu_id: ours.gpu_id,
            queue_id: ours.queue_id,
        };
        assert_eq!((theirs.gpu_id, theirs.queue_id), (0x1234, 7));
        let _ = sys::kfd_ioctl_wave_reset_args { gpu_id: 1u32 };
        println!("argument layouts: {checked} sizes, alignments and offsets equal");
    }
}
