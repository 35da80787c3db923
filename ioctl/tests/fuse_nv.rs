//! Round trips of the NVIDIA RM wrappers through real ioctl(2) calls against
//! the FUSE fake nvidiactl (REEF §4.6: preempting the best-effort channel
//! group and driving the debugger object). Each test skips, saying why, only
//! where /dev/fuse cannot be opened.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use reef_ioctl::fake::{fuse_unavailable, FakeMount, FakeNvidiaCtl, NvObjectKind};
use reef_ioctl::nv::abi::status::*;
use reef_ioctl::nv::abi::*;
use reef_ioctl::nv::{InterleaveLevel, RegOp};
use reef_ioctl::{Error, NvRm};

const DEVICE: NvHandle = 0xd000_0001;
const TSG: NvHandle = 0x7000_0001;
const COMPUTE: NvHandle = 0xc000_0001;
const DEBUGGER: NvHandle = 0xdb00_0001;
const VOLTA_COMPUTE_A: u32 = 0xc3c0;

fn mount() -> Option<FakeMount<FakeNvidiaCtl>> {
    if let Some(why) = fuse_unavailable() {
        reef_ioctl::fake::report_skip(module_path!(), &why);
        return None;
    }
    Some(FakeMount::mount(FakeNvidiaCtl::new(2)).expect("mounting the fake nvidiactl"))
}

/// A client with device 0 and a channel group holding a compute object, as a
/// CUDA context would have.
fn app_context(rm: &NvRm) -> NvHandle {
    let client = rm.alloc_client().expect("client");
    rm.alloc_device(client, DEVICE, 0).expect("device");
    rm.alloc::<Nv0080AllocParameters>(client, DEVICE, TSG, KEPLER_CHANNEL_GROUP_A, None)
        .expect("channel group");
    rm.alloc::<Nv0080AllocParameters>(client, TSG, COMPUTE, VOLTA_COMPUTE_A, None)
        .expect("compute object");
    client
}

#[test]
fn fuse_nvidiactl_channel_group_controls() {
    let Some(m) = mount() else { return };
    let rm = NvRm::open(m.path()).unwrap();
    let client = app_context(&rm);
    assert_eq!(client & 0xffff_0000, 0xc1d0_0000, "RM-style client handle");

    rm.tsg_set_timeslice(client, TSG, Duration::from_micros(2000))
        .unwrap();
    assert_eq!(
        rm.tsg_get_timeslice(client, TSG).unwrap(),
        Duration::from_micros(2000)
    );
    rm.tsg_preempt(client, TSG, true, Some(Duration::from_micros(100)))
        .unwrap();
    rm.tsg_preempt(client, TSG, false, None).unwrap();
    rm.tsg_set_interleave_level(client, TSG, InterleaveLevel::High)
        .unwrap();
    match &m.device().state().objects[&(client, TSG)].kind {
        NvObjectKind::Tsg {
            timeslice_us,
            interleave_level,
            preempts,
        } => assert_eq!((*timeslice_us, *interleave_level, *preempts), (2000, 2, 2)),
        other => panic!("not a TSG: {other:?}"),
    }
    // Over the driver's 1 s maximum: refused before the ioctl.
    let err = rm
        .tsg_preempt(client, TSG, true, Some(Duration::from_secs(2)))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    // A zero timeslice is refused by the (fake) driver.
    let err = rm
        .tsg_set_timeslice(client, TSG, Duration::ZERO)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_ARGUMENT));
}

#[test]
fn fuse_nvidiactl_debugger_suspend_reg_ops_resume() {
    let Some(m) = mount() else { return };
    let rm = NvRm::open(m.path()).unwrap();
    let app = app_context(&rm);
    let dbg_client = rm.alloc_client().unwrap();
    rm.alloc_debugger(dbg_client, DEBUGGER, app, COMPUTE)
        .expect("debugger");
    rm.debugger_set_exception_mask(
        dbg_client,
        DEBUGGER,
        NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP,
    )
    .unwrap();

    let s = rm
        .debugger_suspend_context(dbg_client, DEBUGGER)
        .expect("suspend");
    assert_eq!(s.resident_channel, TSG);
    let err = rm
        .debugger_suspend_context(dbg_client, DEBUGGER)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_STATE));

    let mut ops = [
        RegOp {
            reg_op: NV2080_CTRL_GPU_REG_OP_WRITE_32,
            reg_type: NV2080_CTRL_GPU_REG_OP_TYPE_GR_CTX,
            reg_offset: 0x419e10,
            reg_value_lo: 0x5,
            reg_and_n_mask_lo: 0xf,
            ..Default::default()
        },
        RegOp {
            reg_op: NV2080_CTRL_GPU_REG_OP_READ_32,
            reg_type: NV2080_CTRL_GPU_REG_OP_TYPE_GR_CTX,
            reg_offset: 0x419e10,
            reg_value_lo: 0xffff_ffff,
            ..Default::default()
        },
    ];
    rm.debugger_exec_reg_ops(dbg_client, DEBUGGER, &mut ops, false)
        .unwrap();
    assert_eq!(ops[1].reg_value_lo, 0x5);
    assert!(ops
        .iter()
        .all(|o| o.reg_status == NV2080_CTRL_GPU_REG_OP_STATUS_SUCCESS));
    // One bad op in a transactional batch: nothing runs.
    let mut bad = [
        RegOp {
            reg_op: NV2080_CTRL_GPU_REG_OP_WRITE_32,
            reg_offset: 0x419e10,
            reg_value_lo: 0x9,
            reg_and_n_mask_lo: 0xf,
            ..Default::default()
        },
        RegOp {
            reg_op: 0x7,
            ..Default::default()
        },
    ];
    let err = rm
        .debugger_exec_reg_ops(dbg_client, DEBUGGER, &mut bad, false)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_ARGUMENT));
    match &m.device().state().objects[&(dbg_client, DEBUGGER)].kind {
        NvObjectKind::Debugger {
            registers,
            exception_mask,
            suspended,
            ..
        } => {
            assert_eq!(registers.get(&0x419e10), Some(&0x5));
            assert_eq!(*exception_mask, NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP);
            assert!(*suspended);
        }
        other => panic!("not a debugger: {other:?}"),
    }
    assert!(matches!(
        rm.debugger_exec_reg_ops(dbg_client, DEBUGGER, &mut [], false),
        Err(Error::InvalidArgument { .. })
    ));

    rm.debugger_resume_context(dbg_client, DEBUGGER)
        .expect("resume");
    let err = rm
        .debugger_resume_context(dbg_client, DEBUGGER)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_STATE));
    assert!(err.to_string().contains("not suspended"), "{err}");

    // The debuggee's context goes away: suspending now fails clearly.
    rm.free(app, TSG, COMPUTE).unwrap();
    let err = rm
        .debugger_suspend_context(dbg_client, DEBUGGER)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_OBJECT_NOT_FOUND));
    assert!(err.to_string().contains("destroyed"), "{err}");
}

#[test]
fn fuse_nvidiactl_status_errors_are_explained() {
    let Some(m) = mount() else { return };
    let rm = NvRm::open(m.path()).unwrap();
    let client = app_context(&rm);

    let err = rm.tsg_preempt(client, 0x1234, true, None).unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_OBJECT_HANDLE));
    assert!(
        err.to_string().contains("NV_ERR_INVALID_OBJECT_HANDLE"),
        "{err}"
    );
    // A TSG control sent to the device object.
    let err = rm.tsg_preempt(client, DEVICE, true, None).unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_NOT_SUPPORTED));
    // Duplicate handle; device beyond the GPUs present.
    let err = rm
        .alloc::<Nv0080AllocParameters>(client, DEVICE, TSG, KEPLER_CHANNEL_GROUP_A, None)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INSERT_DUPLICATE_NAME));
    let err = rm.alloc_device(client, 0xd000_0002, 7).unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_ARGUMENT));
    // Not privileged.
    m.device().state().privileged_uid = None;
    let err = rm
        .tsg_set_interleave_level(client, TSG, InterleaveLevel::Low)
        .unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INSUFFICIENT_PERMISSIONS));
    assert!(err.to_string().contains("root"), "{err}");
    // After freeing the client nothing of it is left.
    rm.free(client, client, client).unwrap();
    let err = rm.tsg_get_timeslice(client, TSG).unwrap_err();
    assert_eq!(err.rm_status(), Some(NV_ERR_INVALID_CLIENT));
    assert!(m.device().state().objects.is_empty());
}

#[test]
fn fuse_nvidiactl_close_frees_the_clients() {
    let Some(m) = mount() else { return };
    let rm = NvRm::open(m.path()).unwrap();
    app_context(&rm);
    assert_eq!(m.device().state().objects.len(), 4);
    drop(rm);
    // FUSE sends RELEASE asynchronously after close(2).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !m.device().state().objects.is_empty() {
        assert!(Instant::now() < deadline, "objects left after close");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn fuse_nvidiactl_missing_permission_is_explained() {
    let Some(m) = mount() else { return };
    m.fail_open_with(Some(Errno::EACCES));
    let err = NvRm::open(m.path()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EACCES));
    assert!(err.to_string().contains("NVreg_DeviceFile"), "{err}");
}

#[test]
fn fuse_nvidiactl_clients_belong_to_their_open_file() {
    let Some(m) = mount() else { return };
    // "libcuda" creates its context through its own descriptor.
    let app_file = NvRm::open(m.path()).unwrap();
    let app = app_context(&app_file);
    // Another open file of the same device (a second process, or a daemon
    // with a descriptor of its own) cannot act on that client.
    let other = NvRm::open(m.path()).unwrap();
    let e = other
        .tsg_preempt(app, TSG, true, Some(Duration::from_millis(10)))
        .unwrap_err();
    assert_eq!(e.rm_status(), Some(NV_ERR_INVALID_CLIENT), "{e}");
    assert!(e.to_string().contains("libcuda's descriptor"), "{e}");
    let e = other
        .alloc_debugger(app, DEBUGGER, app, COMPUTE)
        .unwrap_err();
    assert_eq!(e.rm_status(), Some(NV_ERR_INVALID_CLIENT), "{e}");
    let e = other.free(app, TSG, COMPUTE).unwrap_err();
    assert_eq!(e.rm_status(), Some(NV_ERR_INVALID_CLIENT), "{e}");
    // Its own client may still attach a debugger to libcuda's context
    // (not an access to libcuda's client; RM's access-rights check on the
    // target is not modelled).
    let own = other.alloc_client().unwrap();
    other.alloc_debugger(own, DEBUGGER, app, COMPUTE).unwrap();
    // A duplicate of libcuda's descriptor is the same open file: allowed.
    let dup = app_file.try_clone().unwrap();
    dup.tsg_preempt(app, TSG, true, Some(Duration::from_millis(10)))
        .unwrap();
    dup.alloc_debugger(app, DEBUGGER, app, COMPUTE).unwrap();
    match &m.device().state().objects[&(app, TSG)].kind {
        NvObjectKind::Tsg { preempts, .. } => assert_eq!(*preempts, 1),
        k => panic!("not a TSG: {k:?}"),
    }
    // Closing the other file frees only its own client (FUSE delivers the
    // release after close returns).
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.device().state().objects.contains_key(&(own, own)) {
        assert!(
            Instant::now() < deadline,
            "the closed file's client is still there"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(m.device().state().objects.contains_key(&(app, app)));
}
