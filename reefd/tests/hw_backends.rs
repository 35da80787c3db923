//! reefd's hardware backends (REEF §4.5 Figure 7 on AMD, §4.6 Figure 8 on
//! NVIDIA) driven through real ioctl(2) calls against reef-ioctl's FUSE fake
//! KFD and fake nvidiactl, and `reefd start --device kfd:N|cuda:N` failing
//! cleanly. Tests with `fuse` in their name skip, saying why, only where
//! /dev/fuse cannot be opened.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use reef_ioctl::fake::NvObjectKind;
use reef_ioctl::fake::{fuse_unavailable, report_skip, FakeKfd, FakeMount, FakeNvidiaCtl};
use reef_ioctl::nv::abi::{Nv0080AllocParameters, NvHandle, KEPLER_CHANNEL_GROUP_A};
use reef_ioctl::NvRm;
use reef_sched::PreemptLevel;
use reefd::device::preempt::{
    BackendError, CudaBackend, CudaContextHandles, CudaOptions, HardwareBackend, KfdBackend,
    KfdOptions,
};

const GPU_A: u32 = 0x1a2b;
const GPU_B: u32 = 0x3c4d;

fn me() -> u32 {
    std::process::id()
}

fn fuse_ok(test: &str) -> bool {
    match fuse_unavailable() {
        None => true,
        Some(why) => {
            report_skip(test, &why);
            false
        }
    }
}

/// A KFD topology with a CPU node (gpu_id 0) and GPUs A and B.
fn topology() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (node, id) in [(0, 0), (1, GPU_A), (2, GPU_B)] {
        let d = t.path().join(node.to_string());
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("gpu_id"), format!("{id}\n")).unwrap();
    }
    t
}

fn kfd_opts(path: &Path, topo: &Path, index: u32) -> KfdOptions {
    KfdOptions {
        path: path.to_path_buf(),
        topology_dir: topo.to_path_buf(),
        index,
        enable_runtime: true,
        grace_period_us: 0,
    }
}

fn mount_kfd() -> FakeMount<FakeKfd> {
    FakeMount::mount(FakeKfd::new(&[GPU_A, GPU_B])).expect("mounting the fake KFD")
}

fn gpu_resets(m: &FakeMount<FakeKfd>, gpu: u32) -> (u32, u64) {
    let st = m.device().state();
    let g = st.gpus.iter().find(|g| g.gpu_id == gpu).unwrap();
    (g.wave_resets, g.waves_killed)
}

#[test]
fn fuse_kfd_backend_preempt_suspends_clears_kills_and_restore_resumes() {
    if !fuse_ok("fuse_kfd_backend_preempt_suspends_clears_kills_and_restore_resumes") {
        return;
    }
    let m = mount_kfd();
    let topo = topology();
    let mut b = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 1)).expect("open kfd:1");
    assert_eq!(b.device(), "kfd:1");
    assert_eq!(b.gpu_id(), GPU_B);
    assert_eq!(b.levels().numbers(), vec![1, 2, 3]);
    assert!(b.levels().notes.is_empty(), "{:?}", b.levels().notes);
    assert!(b.summary().contains("gpu_id 0x3c4d"), "{}", b.summary());
    {
        // Open enabled the runtime and a debug session on reefd's own process.
        let st = m.device().state();
        let p = &st.processes[&me()];
        assert!(p.runtime_enabled);
        assert_eq!(p.debugger, Some(me()));
    }
    // The probe reached the GPU once and killed nothing.
    assert_eq!(gpu_resets(&m, GPU_B), (1, 0));

    // Two BE queues and one RT queue on GPU B, one queue on GPU A.
    let fake = m.device();
    let be0 = fake.add_queue(me(), GPU_B, 5, 8).unwrap();
    let be1 = fake.add_queue(me(), GPU_B, 3, 4).unwrap();
    let rt = fake.add_queue(me(), GPU_B, 2, 0).unwrap();
    let other = fake.add_queue(me(), GPU_A, 7, 6).unwrap();
    let e = b.set_be_queues(&[be0, other]).unwrap_err();
    assert!(e.to_string().contains("not on this device"), "{e}");
    let e = b.set_be_queues(&[be0, 99]).unwrap_err();
    assert!(e.to_string().contains("queue 99 is not a queue"), "{e}");
    b.set_be_queues(&[be0, be1]).unwrap();

    let r = b.preempt_be().expect("preempt");
    assert_eq!(r.level, PreemptLevel::Kill);
    assert_eq!(
        r.steps,
        vec![
            "wave_reset gpu 0x3c4d".to_string(),
            format!("suspend_queues [{be0}, {be1}]"),
            format!("clear_queue {be0}"),
            format!("clear_queue {be1}"),
        ]
    );
    assert!(r.refused.is_empty());
    {
        let st = fake.state();
        let qs = &st.processes[&me()].queues;
        // BE queues: suspended, nothing left to fetch, no wave running.
        for q in [be0, be1] {
            assert!(qs[&q].suspended);
            assert_eq!((qs[&q].pending_packets, qs[&q].running_waves), (0, 0));
        }
        // The RT queue keeps its packets and runs; GPU A is untouched.
        assert!(!qs[&rt].suspended);
        assert_eq!(qs[&rt].pending_packets, 2);
        assert_eq!(
            (qs[&other].pending_packets, qs[&other].running_waves),
            (7, 6)
        );
    }
    assert_eq!(gpu_resets(&m, GPU_B), (2, 12));
    assert_eq!(gpu_resets(&m, GPU_A), (0, 0));

    // A second preemption before the restore is refused, not stacked.
    let e = b.preempt_be().unwrap_err();
    assert!(matches!(e, BackendError::InvalidState { .. }), "{e}");

    let steps = b.restore_be().expect("restore");
    assert_eq!(steps, vec![format!("resume_queues [{be0}, {be1}]")]);
    {
        let st = fake.state();
        let qs = &st.processes[&me()].queues;
        assert!(!qs[&be0].suspended && !qs[&be1].suspended);
    }
    // Nothing left to restore.
    assert!(b.restore_be().unwrap().is_empty());

    // The next preemption works again; dropping the backend ends the debug
    // session and resumes what it left suspended.
    b.preempt_be().expect("second preempt");
    assert!(fake.state().processes[&me()].queues[&be0].suspended);
    drop(b);
    let st = fake.state();
    assert_eq!(st.processes[&me()].debugger, None);
    assert!(!st.processes[&me()].queues[&be0].suspended);
}

#[test]
fn fuse_kfd_backend_reports_a_destroyed_queue() {
    if !fuse_ok("fuse_kfd_backend_reports_a_destroyed_queue") {
        return;
    }
    let m = mount_kfd();
    let topo = topology();
    let mut b = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).unwrap();
    let q0 = m.device().add_queue(me(), GPU_A, 4, 2).unwrap();
    let q1 = m.device().add_queue(me(), GPU_A, 4, 2).unwrap();
    b.set_be_queues(&[q0, q1]).unwrap();
    // The runtime destroys q1 behind the backend's back.
    m.device()
        .state()
        .processes
        .get_mut(&me())
        .unwrap()
        .queues
        .remove(&q1);
    let r = b.preempt_be().unwrap();
    assert_eq!(
        r.refused,
        vec![format!("queue {q1}: no such queue (destroyed, or new)")]
    );
    assert!(r.steps.contains(&format!("clear_queue {q0}")));
    assert!(!r.steps.contains(&format!("clear_queue {q1}")));
    assert_eq!(gpu_resets(&m, GPU_A), (2, 2));
}

#[test]
fn fuse_kfd_backend_without_the_reef_patch_degrades_to_level_2() {
    if !fuse_ok("fuse_kfd_backend_without_the_reef_patch_degrades_to_level_2") {
        return;
    }
    let m = mount_kfd();
    // An unpatched kernel: WAVE_RESET and CLEAR_QUEUE answer ENOTTY.
    m.device().state().reef_patch = false;
    let topo = topology();
    let mut b = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).expect("open");
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    assert_eq!(b.levels().highest(), PreemptLevel::LazyEviction);
    let note = b.levels().notes.join(" ");
    assert!(
        note.contains("REEF driver patch") && note.contains("ENOTTY"),
        "{note}"
    );
    assert!(
        b.summary().contains("preemption levels 1,2"),
        "{}",
        b.summary()
    );
    let q = m.device().add_queue(me(), GPU_A, 5, 8).unwrap();
    b.set_be_queues(&[q]).unwrap();
    // Level 2: no driver call; the queued kernels drain through their
    // preempt-flag check, the running ones finish.
    let r = b.preempt_be().unwrap();
    assert_eq!(r.level, PreemptLevel::LazyEviction);
    assert!(r.steps.is_empty());
    {
        let st = m.device().state();
        let fq = &st.processes[&me()].queues[&q];
        assert!(!fq.suspended);
        assert_eq!((fq.pending_packets, fq.running_waves), (5, 8));
    }
    assert!(b.restore_be().unwrap().is_empty());
}

#[test]
fn fuse_kfd_backend_without_the_debug_api_degrades_to_level_2() {
    if !fuse_ok("fuse_kfd_backend_without_the_debug_api_degrades_to_level_2") {
        return;
    }
    let m = mount_kfd();
    m.device().state().minor = 12;
    let topo = topology();
    let b = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).expect("open");
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    let note = b.levels().notes.join(" ");
    assert!(
        note.contains("1.12") && note.contains("needs 1.13"),
        "{note}"
    );
    // No debug session was attempted.
    assert_eq!(m.device().state().processes[&me()].debugger, None);
}

#[test]
fn fuse_kfd_backend_errors_are_clear() {
    if !fuse_ok("fuse_kfd_backend_errors_are_clear") {
        return;
    }
    let m = mount_kfd();
    let topo = topology();
    let e = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 2)).unwrap_err();
    assert!(matches!(e, BackendError::NoSuchGpu { .. }), "{e}");
    assert!(e.to_string().contains("lists 2 GPU(s)"), "{e}");
    // A debugger (here: a first backend) already holds reefd's process:
    // the driver's EINVAL is explained, and the runtime enabled by the
    // first is not an error for the second.
    let first = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).unwrap();
    let e = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).unwrap_err();
    assert!(e.to_string().contains("already being debugged"), "{e}");
    drop(first);
    KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).expect("open after the first closed");
}

#[test]
fn fuse_kfd_backend_launch_is_a_clear_error() {
    if !fuse_ok("fuse_kfd_backend_launch_is_a_clear_error") {
        return;
    }
    let m = mount_kfd();
    let topo = topology();
    let mut b = KfdBackend::open(&kfd_opts(m.path(), topo.path(), 0)).unwrap();
    let e = b.launch("conv2d_0", 7).unwrap_err();
    assert!(matches!(e, BackendError::CannotExecute { .. }), "{e}");
    let s = e.to_string();
    assert!(
        s.contains("kfd:0") && s.contains("conv2d_0") && s.contains("HIP runtime"),
        "{s}"
    );
}

#[test]
fn kfd_backend_refuses_a_non_device_file() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("kfd");
    std::fs::write(&file, "not a device").unwrap();
    let topo = topology();
    let e = KfdBackend::open(&kfd_opts(&file, topo.path(), 0)).unwrap_err();
    assert!(matches!(e, BackendError::Ioctl(_)), "{e}");
    assert!(e.to_string().contains("is not an AMD KFD device"), "{e}");
    let e = KfdBackend::open(&kfd_opts(&t.path().join("nope"), topo.path(), 0)).unwrap_err();
    assert!(e.to_string().contains("no such file"), "{e}");
}

// ---- NVIDIA -------------------------------------------------------------

const APP_DEVICE: NvHandle = 0xd000_0001;
const BE_TSG: NvHandle = 0x7000_0001;
const COMPUTE: NvHandle = 0xc000_0001;
const VOLTA_COMPUTE_A: u32 = 0xc3c0;

fn mount_nv() -> FakeMount<FakeNvidiaCtl> {
    FakeMount::mount(FakeNvidiaCtl::new(2)).expect("mounting the fake nvidiactl")
}

/// What libcuda would have set up for the BE context: a client, device 0, a
/// channel group with a compute object. Made through RM calls on a
/// descriptor of its own, as libcuda's are.
fn be_context(rm: &NvRm) -> CudaContextHandles {
    let app_client = rm.alloc_client().unwrap();
    rm.alloc_device(app_client, APP_DEVICE, 0).unwrap();
    rm.alloc::<Nv0080AllocParameters>(app_client, APP_DEVICE, BE_TSG, KEPLER_CHANNEL_GROUP_A, None)
        .unwrap();
    rm.alloc::<Nv0080AllocParameters>(app_client, BE_TSG, COMPUTE, VOLTA_COMPUTE_A, None)
        .unwrap();
    CudaContextHandles {
        app_client,
        be_tsg: BE_TSG,
        compute_object: COMPUTE,
    }
}

fn tsg_preempts(m: &FakeMount<FakeNvidiaCtl>, client: NvHandle) -> u32 {
    match &m.device().state().objects[&(client, BE_TSG)].kind {
        NvObjectKind::Tsg { preempts, .. } => *preempts,
        k => panic!("not a TSG: {k:?}"),
    }
}

fn debugger_state(m: &FakeMount<FakeNvidiaCtl>, client: NvHandle) -> (u32, bool) {
    match &m.device().state().objects[&(client, reefd::device::cuda::rm::DEBUGGER_HANDLE)].kind {
        NvObjectKind::Debugger {
            exception_mask,
            suspended,
            ..
        } => (*exception_mask, *suspended),
        k => panic!("not a debugger: {k:?}"),
    }
}

fn cuda_opts(path: &Path, index: u32) -> CudaOptions {
    CudaOptions {
        nvidiactl_path: path.to_path_buf(),
        index,
    }
}

#[test]
fn fuse_nvidiactl_backend_preempt_traps_and_restore_resumes() {
    if !fuse_ok("fuse_nvidiactl_backend_preempt_traps_and_restore_resumes") {
        return;
    }
    let m = mount_nv();
    let app = NvRm::open(m.path()).unwrap();
    let ctx = be_context(&app);
    let mut b = CudaBackend::open(&cuda_opts(m.path(), 1)).expect("open cuda:1");
    assert_eq!(b.device(), "cuda:1");
    // Without a context: levels 1 and 2, and preempting is refused.
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    assert!(b.levels().notes[0].contains("no best-effort CUDA context"));
    let e = b.preempt_be().unwrap_err();
    assert!(e.to_string().contains("attach_be_context"), "{e}");
    match &m.device().state().objects[&(b.client(), reefd::device::cuda::rm::DEVICE_HANDLE)].kind {
        NvObjectKind::Device { device_id } => assert_eq!(*device_id, 1),
        k => panic!("not a device: {k:?}"),
    }

    b.attach_be_context(app.try_clone().unwrap(), ctx, true)
        .expect("attach");
    assert_eq!(b.levels().numbers(), vec![1, 2, 3]);
    // The debugger lives in libcuda's client, made through libcuda's file.
    let (mask, suspended) = debugger_state(&m, ctx.app_client);
    assert_eq!(
        (mask, suspended),
        (
            reef_ioctl::nv::abi::NV83DE_CTRL_DEBUG_SET_EXCEPTION_MASK_TRAP,
            false
        )
    );

    let r = b.preempt_be().expect("preempt");
    assert_eq!(r.level, PreemptLevel::Kill);
    assert_eq!(r.steps[0], format!("tsg_preempt 0x{BE_TSG:x}"));
    assert!(
        r.steps[1].starts_with("debugger_suspend_context (resident channel 0x70000001"),
        "{:?}",
        r.steps
    );
    assert_eq!(tsg_preempts(&m, ctx.app_client), 1);
    assert!(debugger_state(&m, ctx.app_client).1, "context suspended");
    let e = b.preempt_be().unwrap_err();
    assert!(matches!(e, BackendError::InvalidState { .. }), "{e}");
    assert_eq!(tsg_preempts(&m, ctx.app_client), 1);

    assert_eq!(b.restore_be().unwrap(), vec!["debugger_resume_context"]);
    assert!(!debugger_state(&m, ctx.app_client).1);
    assert!(b.restore_be().unwrap().is_empty());
    b.preempt_be().expect("second preempt");
    assert_eq!(tsg_preempts(&m, ctx.app_client), 2);
    let client = b.client();
    drop(b);
    // Dropping resumed the context, freed the debugger from libcuda's
    // client (which lives on) and freed reefd's client.
    let st = m.device().state();
    assert!(!st.objects.contains_key(&(client, client)));
    assert!(!st
        .objects
        .contains_key(&(ctx.app_client, reefd::device::cuda::rm::DEBUGGER_HANDLE)));
    assert!(st.objects.contains_key(&(ctx.app_client, BE_TSG)));
}

/// RM validates a client against the open file it was created through
/// (NV_ERR_INVALID_CLIENT otherwise; docs/hardware.md "RM client
/// ownership"). The backend's choice, controls on libcuda's own file, works;
/// the alternative of issuing them on a descriptor of its own, as the
/// backend did before, is refused by the fake as by RM.
#[test]
fn fuse_nvidiactl_backend_acts_on_libcudas_objects_through_libcudas_file() {
    if !fuse_ok("fuse_nvidiactl_backend_acts_on_libcudas_objects_through_libcudas_file") {
        return;
    }
    let m = mount_nv();
    let app = NvRm::open(m.path()).unwrap();
    let ctx = be_context(&app);
    let mut b = CudaBackend::open(&cuda_opts(m.path(), 0)).unwrap();
    // A descriptor of another open file (reefd's own, or a second open of
    // the device): attaching is refused, with the reason.
    let wrong = NvRm::open(m.path()).unwrap();
    let e = b.attach_be_context(wrong, ctx, true).unwrap_err();
    assert!(e.to_string().contains("NV_ERR_INVALID_CLIENT"), "{e}");
    assert!(e.to_string().contains("libcuda's descriptor"), "{e}");
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    // The channel-group preemption the backend used to issue through its
    // own descriptor is refused there.
    let own = NvRm::open(m.path()).unwrap();
    let e = own
        .tsg_preempt(
            ctx.app_client,
            BE_TSG,
            true,
            Some(std::time::Duration::from_millis(10)),
        )
        .unwrap_err();
    assert_eq!(
        e.rm_status(),
        Some(reef_ioctl::nv::abi::status::NV_ERR_INVALID_CLIENT)
    );
    // Through a dup of libcuda's descriptor: attach, preempt, kill, restore.
    b.attach_be_context(app.try_clone().unwrap(), ctx, true)
        .unwrap();
    assert_eq!(b.preempt_be().unwrap().level, PreemptLevel::Kill);
    assert_eq!(tsg_preempts(&m, ctx.app_client), 1);
    assert_eq!(b.restore_be().unwrap(), vec!["debugger_resume_context"]);
}

#[test]
fn fuse_nvidiactl_backend_without_patched_trap_handler_is_level_2() {
    if !fuse_ok("fuse_nvidiactl_backend_without_patched_trap_handler_is_level_2") {
        return;
    }
    let m = mount_nv();
    let app = NvRm::open(m.path()).unwrap();
    let ctx = be_context(&app);
    let mut b = CudaBackend::open(&cuda_opts(m.path(), 0)).unwrap();
    b.attach_be_context(app.try_clone().unwrap(), ctx, false)
        .unwrap();
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    assert!(b.levels().notes[0].contains("reef-trap nvidia"));
    let r = b.preempt_be().unwrap();
    assert_eq!(r.level, PreemptLevel::LazyEviction);
    assert_eq!(r.steps, vec![format!("tsg_preempt 0x{BE_TSG:x}")]);
    assert_eq!(tsg_preempts(&m, ctx.app_client), 1);
    assert!(!debugger_state(&m, ctx.app_client).1, "no trap raised");
    assert!(b.restore_be().unwrap().is_empty());
}

#[test]
fn fuse_nvidiactl_backend_errors_are_clear() {
    if !fuse_ok("fuse_nvidiactl_backend_errors_are_clear") {
        return;
    }
    let m = mount_nv();
    let e = CudaBackend::open(&cuda_opts(m.path(), 2)).unwrap_err();
    assert!(matches!(e, BackendError::NoSuchGpu { .. }), "{e}");
    assert!(e.to_string().contains("RM has no GPU 2"), "{e}");
    // The failed open freed its client.
    assert!(m.device().state().objects.is_empty());
    // A context that was destroyed: the debugger cannot attach.
    let app = NvRm::open(m.path()).unwrap();
    let mut ctx = be_context(&app);
    ctx.compute_object = 0xdead_0001;
    let mut b = CudaBackend::open(&cuda_opts(m.path(), 0)).unwrap();
    let e = b
        .attach_be_context(app.try_clone().unwrap(), ctx, true)
        .unwrap_err();
    assert!(e.to_string().contains("may have been destroyed"), "{e}");
    assert_eq!(b.levels().numbers(), vec![1, 2]);
    // Launching explains what is missing (no libcuda on this machine).
    let e = b.launch("gemm_64", 3).unwrap_err();
    let s = e.to_string();
    assert!(matches!(e, BackendError::CannotExecute { .. }), "{s}");
    // SAFETY: only tries to dlopen libcuda.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        assert!(s.contains("launched by the CUDA device"), "{s}");
    } else {
        assert!(s.contains("libcuda.so") && s.contains("gemm_64"), "{s}");
    }
}

#[test]
fn cuda_backend_refuses_a_non_device_file() {
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("nvidiactl");
    std::fs::write(&file, "").unwrap();
    let e = CudaBackend::open(&cuda_opts(&file, 0)).unwrap_err();
    assert!(
        e.to_string().contains("is not an NVIDIA RM control device"),
        "{e}"
    );
}

// ---- reefd start --device kfd:N|cuda:N ----------------------------------

/// A config for `reefd start` in `dir` with the given [device] keys.
fn start_config(dir: &Path, device_keys: &str) -> PathBuf {
    let cfg = dir.join("reefd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {:?}\npid_file = {:?}\n[device]\n{device_keys}\n[metrics]\nenabled = false\n",
            dir.join("reefd.sock"),
            dir.join("reefd.pid"),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    cfg
}

fn reefd_start(cfg: &Path, device: &str) -> Command {
    let mut c = Command::new(common::reefd_bin());
    c.args(["start", "--foreground", "--device", device, "--config"])
        .arg(cfg);
    c
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn assert_failed_cleanly(out: &std::process::Output, want: &[&str], dir: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for w in want {
        assert!(err.contains(w), "missing {w:?} in: {err}");
    }
    // Nothing was left behind: it refused before binding or writing.
    assert!(!dir.join("reefd.sock").exists());
    assert!(!dir.join("reefd.pid").exists());
}

/// kfd:N serves through HIP (tests/hip_daemon.rs); the KFD only adds
/// level 3 where it answers. A KFD path that is no KFD device, or missing,
/// is said in the level-3 note (the backend's error), not fatal; without
/// root no KFD is tried.
#[test]
fn the_kfd_level3_note_names_what_the_kfd_path_is() {
    let t = tempfile::tempdir().unwrap();
    let bogus = t.path().join("not-kfd");
    std::fs::write(&bogus, "plain file").unwrap();
    let topo = topology();
    let e = KfdBackend::open(&kfd_opts(&bogus, topo.path(), 0)).unwrap_err();
    let note = format!("no kill (level 3): {e}");
    assert!(
        note.contains(&bogus.display().to_string()) && note.contains("is not an AMD KFD device"),
        "{note}"
    );
    let e = KfdBackend::open(&kfd_opts(&t.path().join("missing"), topo.path(), 0)).unwrap_err();
    assert!(
        e.to_string().contains("check the configured KFD path"),
        "{e}"
    );
    let cfg = reefd::config::Config::default();
    assert!(reefd::device::preempt::kfd_options(&cfg, 0, false)
        .unwrap_err()
        .contains("need root"));
    assert!(reefd::device::preempt::kfd_options(&cfg, 0, true).is_ok());
}

#[test]
fn reefd_start_cuda_without_a_driver_library_says_so_in_one_line() {
    let t = tempfile::tempdir().unwrap();
    // SAFETY: only tries to dlopen libcuda.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        common::log_skip(
            "reefd_start_cuda_without_a_driver_library_says_so_in_one_line",
            "not checking the missing-library message: this host has a libcuda on the library \
             search path",
        );
    } else {
        let cfg = start_config(t.path(), "");
        let out = reefd_start(&cfg, "cuda:0")
            .env_remove("REEF_CUDA_LIBRARY")
            .output()
            .unwrap();
        assert_failed_cleanly(
            &out,
            &[
                "reefd: error: device cuda:0: the CUDA driver library cannot be used",
                "libcuda.so is not on the library search path",
                "device.cuda_library or REEF_CUDA_LIBRARY",
            ],
            t.path(),
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    }
    // A library named by the configuration or the environment that cannot
    // be loaded: the message says which and where it was set.
    let missing = t.path().join("no-libcuda.so");
    let cfg = start_config(t.path(), &format!("cuda_library = {missing:?}"));
    let out = reefd_start(&cfg, "cuda:0").output().unwrap();
    assert_failed_cleanly(
        &out,
        &[
            &format!("cannot load {}", missing.display()),
            "(set by device.cuda_library)",
        ],
        t.path(),
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    let cfg = start_config(t.path(), "");
    let out = reefd_start(&cfg, "cuda:0")
        .env("REEF_CUDA_LIBRARY", &missing)
        .output()
        .unwrap();
    assert_failed_cleanly(&out, &["(set by REEF_CUDA_LIBRARY)"], t.path());
}

/// `reefd start --device kfd:1` as root with the FUSE fake KFD and the
/// simulated libamdhip64 (two MI50s) started without GPU_MAX_HW_QUEUES:
/// HIP serves levels 1-2 and the KFD's probe (the REEF patch's WAVE_RESET
/// answers on gpu_id 0x3c4d) is in the level-3 note, which says why level 3
/// is not offered; its debug session ends with the daemon.
/// (Level 3 served: tests/hip_daemon.rs.)
#[test]
fn fuse_reefd_start_kfd_serves_through_hip_and_probes_the_kfd() {
    if !fuse_ok("fuse_reefd_start_kfd_serves_through_hip_and_probes_the_kfd") {
        return;
    }
    if !is_root() {
        report_skip(
            "fuse_reefd_start_kfd_serves_through_hip_and_probes_the_kfd",
            "the KFD probe needs root",
        );
        return;
    }
    let m = mount_kfd();
    let topo = topology();
    let lib = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("libreef_libhip_sim.so");
    {
        let d = common::Daemon::start_env(
            "kfd:1",
            "",
            &format!(
                "kfd_path = {:?}\nkfd_topology = {:?}\nhip_library = {lib:?}",
                m.path(),
                topo.path()
            ),
            "",
            &[("REEF_LIBHIP_SIM_DEVICE", "mi50x2")],
        );
        let s = d.client().status().unwrap();
        assert!(std::env::var_os("GPU_MAX_HW_QUEUES").is_none());
        assert_eq!(s.device, "kfd:1");
        assert_eq!(s.preemption_levels, vec![1, 2]);
        let note = s
            .preemption_notes
            .iter()
            .find(|n| n.contains("gpu_id 0x3c4d"))
            .unwrap_or_else(|| panic!("{:?}", s.preemption_notes));
        assert!(
            note.contains("preemption levels 1,2,3") && note.contains("GPU_MAX_HW_QUEUES"),
            "{note}"
        );
    }
    // The daemon opened the fake device, probed the patch and ended its
    // debug session.
    let st = m.device().state();
    assert!(st.processes.values().all(|p| p.debugger.is_none()));
    assert_eq!(st.gpus[1].wave_resets, 1);
}
