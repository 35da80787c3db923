//! Plain-data marker for the ABI structs, so they can be handed to the kernel
//! by pointer and (in the fake devices) read from and written to raw bytes.
//!
//! Paper: none (an implementation detail of the ABI modules for REEF §4.5–4.6).

/// A `#[repr(C)]` struct made only of integers and arrays of them, with any
/// padding the C layout has spelled out as explicit fields, so that every bit
/// pattern is a valid value and no byte is uninitialised.
///
/// # Safety
/// Implementors must be `#[repr(C)]` (or a primitive integer) with no
/// references, pointers-as-references, `bool`s or enums, so that any bytes of
/// the right length form a valid value.
pub unsafe trait Plain: Copy + 'static {}

macro_rules! plain {
    ($($t:ty),* $(,)?) => {
        // SAFETY: each type is #[repr(C)] with integer fields only (see the
        // layout assertions in the abi modules).
        $(unsafe impl Plain for $t {})*
    };
}

use crate::kfd::abi::*;
use crate::kfd::reef_patch::*;
use crate::nv::abi::*;

plain!(
    u32,
    u64,
    KfdIoctlGetVersionArgs,
    KfdIoctlSetCuMaskArgs,
    KfdIoctlCreateQueueArgs,
    KfdIoctlDestroyQueueArgs,
    KfdRuntimeInfo,
    KfdIoctlRuntimeEnableArgs,
    KfdQueueSnapshotEntry,
    KfdIoctlDbgTrapEnableArgs,
    KfdIoctlDbgTrapSuspendQueuesArgs,
    KfdIoctlDbgTrapResumeQueuesArgs,
    KfdIoctlDbgTrapQueueSnapshotArgs,
    KfdIoctlDbgTrapArgs,
    KfdIoctlWaveResetArgs,
    KfdIoctlClearQueueArgs,
    Nvos00Parameters,
    Nvos21Parameters,
    Nvos54Parameters,
    Nv0080AllocParameters,
    Nv83deAllocParameters,
    Nv83deCtrlDebugSetExceptionMaskParams,
    Nv83deCtrlDebugSuspendContextParams,
    Nv2080CtrlGpuRegOp,
    Nv83deCtrlDebugExecRegOpsParams,
    Nva06cCtrlTimesliceParams,
    Nva06cCtrlPreemptParams,
    Nva06cCtrlInterleaveLevelParams,
);

/// The bytes of a plain value.
pub fn bytes_of<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: T is plain data of size_of::<T>() bytes without implicit
    // padding (the C layout's padding is explicit fields), so every byte is
    // initialised.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// A plain value read from the start of `bytes`, or `None` if too short.
pub fn from_bytes<T: Plain>(bytes: &[u8]) -> Option<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: enough bytes, any bit pattern is a valid T, and the read is
    // unaligned-safe.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_short_input() {
        let a = KfdIoctlDbgTrapSuspendQueuesArgs {
            exception_mask: 0x0102_0304_0506_0708,
            queue_array_ptr: 0xdead_beef,
            num_queues: 3,
            grace_period: 9,
        };
        let bytes = bytes_of(&a).to_vec();
        assert_eq!(bytes.len(), 24);
        assert_eq!(&bytes[16..20], &3u32.to_ne_bytes());
        assert_eq!(
            from_bytes::<KfdIoctlDbgTrapSuspendQueuesArgs>(&bytes),
            Some(a)
        );
        assert_eq!(
            from_bytes::<KfdIoctlDbgTrapSuspendQueuesArgs>(&bytes[..23]),
            None
        );
    }
}
