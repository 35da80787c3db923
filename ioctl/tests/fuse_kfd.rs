//! Round trips of the KFD wrappers through real ioctl(2) calls against the
//! FUSE fake KFD (REEF §4.5, Figure 7: suspend, clear and kill best-effort
//! queues, then resume them). Each test skips, saying why, only where
//! /dev/fuse cannot be opened.

use std::os::fd::AsFd;
use std::process::{Child, Command};

use nix::errno::Errno;
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::ptrace;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use reef_ioctl::fake::{fuse_unavailable, FakeKfd, FakeMount};
use reef_ioctl::kfd::abi::DEBUG_RUNTIME_STATE_ENABLED;
use reef_ioctl::{Error, Kfd};

const GPU_A: u32 = 0x1a2b;
const GPU_B: u32 = 0x3c4d;

fn mount() -> Option<FakeMount<FakeKfd>> {
    if let Some(why) = fuse_unavailable() {
        reef_ioctl::fake::report_skip(module_path!(), &why);
        return None;
    }
    Some(FakeMount::mount(FakeKfd::new(&[GPU_A, GPU_B])).expect("mounting the fake KFD"))
}

fn me() -> u32 {
    std::process::id()
}

fn event_fd() -> EventFd {
    EventFd::from_flags(EfdFlags::EFD_CLOEXEC).expect("eventfd")
}

#[test]
fn fuse_kfd_open_reads_the_version() {
    let Some(m) = mount() else { return };
    m.device().state().minor = 14;
    let kfd = Kfd::open(m.path()).expect("opening the fake KFD");
    assert_eq!((kfd.version().major, kfd.version().minor), (1, 14));
    assert!(kfd.version().has_debugger_api());
    // Opening registered this process, as the real KFD creates a kfd_process.
    assert!(m.device().state().processes.contains_key(&me()));
}

#[test]
fn fuse_kfd_old_interface_refuses_the_debug_api() {
    let Some(m) = mount() else { return };
    m.device().state().minor = 12;
    let kfd = Kfd::open(m.path()).unwrap();
    let err = kfd.runtime_enable(0, false).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedVersion { minor: 12, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("1.13"), "{err}");
}

#[test]
fn fuse_kfd_suspend_clear_reset_resume_round_trip() {
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    kfd.runtime_enable(0xdead_b000, true)
        .expect("runtime enable");
    let fake = m.device();
    let q0 = fake.add_queue(me(), GPU_A, 5, 8).unwrap();
    let q1 = fake.add_queue(me(), GPU_A, 3, 4).unwrap();
    let q2 = fake.add_queue(me(), GPU_B, 7, 2).unwrap();

    let efd = event_fd();
    let info = kfd
        .dbg_trap_enable(me(), u64::MAX, efd.as_fd())
        .expect("debug trap enable");
    assert_eq!(info.r_debug, 0xdead_b000);
    assert_eq!(info.runtime_state, DEBUG_RUNTIME_STATE_ENABLED);

    let snap = kfd.queue_snapshot(me(), 0).expect("queue snapshot");
    let ids: Vec<(u32, u32)> = snap.iter().map(|e| (e.queue_id, e.gpu_id)).collect();
    assert_eq!(ids, vec![(q0, GPU_A), (q1, GPU_A), (q2, GPU_B)]);
    assert_eq!(
        snap[1].ring_base_address,
        fake.state().processes[&me()].queues[&q1].ring_base_address
    );

    // ❸ kill the running waves of GPU A only, before the suspension: a
    // suspended queue's waves were saved by the unmap and survive a kill.
    kfd.wave_reset(GPU_A).expect("wave reset");
    {
        let st = fake.state();
        let qs = &st.processes[&me()].queues;
        assert_eq!(
            (
                qs[&q0].running_waves,
                qs[&q1].running_waves,
                qs[&q2].running_waves
            ),
            (0, 0, 2)
        );
        let gpu = st.gpus.iter().find(|g| g.gpu_id == GPU_A).unwrap();
        assert_eq!((gpu.wave_resets, gpu.waves_killed), (1, 12));
    }
    // ❷ evict: suspend the best-effort queues (one id does not exist) ...
    let out = kfd
        .suspend_queues(me(), &[q0, q1, 999], 100, 0)
        .expect("suspend");
    assert_eq!(out.done, 2);
    assert!(out.queues[0].ok() && out.queues[1].ok());
    assert!(out.queues[2].invalid && !out.queues[2].hw_error);
    // ... and drop what they had not yet fetched.
    kfd.clear_queue(GPU_A, q0).expect("clear queue");
    {
        let st = fake.state();
        let qs = &st.processes[&me()].queues;
        assert!(qs[&q0].suspended && qs[&q1].suspended && !qs[&q2].suspended);
        assert_eq!((qs[&q0].pending_packets, qs[&q1].pending_packets), (0, 3));
    }
    // Waves of a suspended queue are not on the CUs: a kill now ends none.
    fake.state()
        .processes
        .get_mut(&me())
        .unwrap()
        .queues
        .get_mut(&q1)
        .unwrap()
        .running_waves = 5;
    kfd.wave_reset(GPU_A).expect("wave reset");
    {
        let st = fake.state();
        assert_eq!(st.processes[&me()].queues[&q1].running_waves, 5);
        let gpu = st.gpus.iter().find(|g| g.gpu_id == GPU_A).unwrap();
        assert_eq!((gpu.wave_resets, gpu.waves_killed), (2, 12));
    }
    // Restore: resume them.
    let out = kfd.resume_queues(me(), &[q0, q1]).expect("resume");
    assert_eq!(out.done, 2);
    assert!(!fake.state().processes[&me()].queues[&q0].suspended);
    kfd.dbg_trap_disable(me()).expect("disable");
    assert_eq!(fake.state().processes[&me()].debugger, None);
}

#[test]
fn fuse_kfd_set_cu_mask_reaches_the_queue() {
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    let q = m.device().add_queue(me(), GPU_A, 0, 0).unwrap();
    kfd.set_cu_mask(q, &[0xffff_0000, 0x0000_0001])
        .expect("set cu mask");
    assert_eq!(
        m.device().state().processes[&me()].queues[&q].cu_mask,
        vec![0xffff_0000, 1]
    );
    let err = kfd.set_cu_mask(q + 100, &[1]).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL));
    assert!(
        err.to_string().contains("not a queue of this process"),
        "{err}"
    );
    assert!(matches!(
        kfd.set_cu_mask(q, &[]),
        Err(Error::InvalidArgument { .. })
    ));
}

struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fuse_kfd_debug_trap_needs_the_target_or_its_tracer() {
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    let child = Sleeper(
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawning sleep"),
    );
    let pid = child.0.id();
    m.device().add_process(pid);
    let efd = event_fd();

    let err = kfd.dbg_trap_enable(pid, 0, efd.as_fd()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EPERM));
    assert!(err.to_string().contains("ptrace-attached"), "{err}");

    // Attach from this thread (the tracer must be the calling thread).
    ptrace::attach(Pid::from_raw(pid as i32)).expect("ptrace attach (needs CAP_SYS_PTRACE)");
    waitpid(Pid::from_raw(pid as i32), None).expect("waiting for the tracee to stop");
    let enabled = kfd.dbg_trap_enable(pid, 0, efd.as_fd());
    let _ = ptrace::detach(Pid::from_raw(pid as i32), None);
    enabled.expect("enable while ptrace-attached");
    assert_eq!(m.device().state().processes[&pid].debugger, Some(me()));
}

#[test]
fn fuse_kfd_errors_explain_the_cause() {
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    let fake = m.device();
    let q = fake.add_queue(me(), GPU_A, 4, 0).unwrap();

    // No such process in KFD.
    let err = kfd.suspend_queues(4_000_000, &[q], 0, 0).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ESRCH));
    // No debug session yet.
    let err = kfd.suspend_queues(me(), &[q], 0, 0).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL));
    assert!(err.to_string().contains("dbg_trap_enable first"), "{err}");
    // A session, but the runtime never enabled debugging.
    let efd = event_fd();
    kfd.dbg_trap_enable(me(), 0, efd.as_fd()).unwrap();
    let err = kfd.suspend_queues(me(), &[q], 0, 0).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EACCES));
    assert!(err.to_string().contains("RUNTIME_ENABLE"), "{err}");
    // A second debugger.
    let err = kfd.dbg_trap_enable(me(), 0, efd.as_fd()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL));
    assert!(err.to_string().contains("already being debugged"), "{err}");
    // Runtime enable after queues exist.
    let err = kfd.runtime_enable(0, false).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EEXIST));
    // A queue that is not suspended: the patched driver parks it itself.
    kfd.clear_queue(GPU_A, q).expect("clear an active queue");
    {
        let st = fake.state();
        let fq = &st.processes[&me()].queues[&q];
        assert_eq!((fq.pending_packets, fq.suspended), (0, false));
    }
    // Someone else's queue, or a queue on another GPU.
    let err = kfd.clear_queue(GPU_B, q).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL));
    assert!(
        err.to_string().contains("not a queue of this process"),
        "{err}"
    );
    // Unknown GPU.
    let err = kfd.wave_reset(0x9999).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL));
    assert!(err.to_string().contains("gpu_id 39321"), "{err}");
    // A kernel without the REEF patch.
    fake.state().reef_patch = false;
    let err = kfd.wave_reset(GPU_A).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOTTY));
    assert!(err.to_string().contains("REEF driver patch"), "{err}");
}

#[test]
fn fuse_kfd_missing_permission_is_explained() {
    let Some(m) = mount() else { return };
    m.fail_open_with(Some(Errno::EACCES));
    let err = Kfd::open(m.path()).unwrap_err();
    assert!(matches!(err, Error::Open { .. }), "{err}");
    assert_eq!(err.errno(), Some(Errno::EACCES));
    assert!(err.to_string().contains("'render'"), "{err}");
    m.fail_open_with(None);
    Kfd::open(m.path()).expect("opens again once permitted");
}

#[test]
fn fuse_kfd_evict_and_kill_then_restore() {
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    kfd.runtime_enable(0, false).unwrap();
    let fake = m.device();
    let be = [
        fake.add_queue(me(), GPU_A, 6, 10).unwrap(),
        fake.add_queue(me(), GPU_A, 2, 3).unwrap(),
    ];
    let rt = fake.add_queue(me(), GPU_B, 1, 1).unwrap();
    let efd = event_fd();
    kfd.dbg_trap_enable(me(), 0, efd.as_fd()).unwrap();

    let ev = kfd
        .evict_and_kill(me(), GPU_A, &[be[0], be[1], 4242], 0)
        .expect("evict");
    assert_eq!(ev.suspended.done, 2);
    assert_eq!(ev.cleared, be.to_vec());
    {
        let st = fake.state();
        let qs = &st.processes[&me()].queues;
        for q in be {
            assert!(qs[&q].suspended);
            assert_eq!((qs[&q].pending_packets, qs[&q].running_waves), (0, 0));
        }
        assert_eq!((qs[&rt].pending_packets, qs[&rt].running_waves), (1, 1));
    }
    assert_eq!(kfd.restore(me(), &be).unwrap().done, 2);
    assert!(fake.state().processes[&me()]
        .queues
        .values()
        .all(|q| !q.suspended));
}

/// CREATE_QUEUE as ROCr issues it, with kfd_chardev.c's argument checks,
/// and the link to a simulated GPU: WAVE_RESET names the caller's mapped
/// (not suspended) queues on that GPU, CLEAR_QUEUE the one queue, and a
/// GPU that refuses or cannot be reached fails the ioctl with EIO.
#[test]
fn fuse_kfd_create_queue_and_the_gpu_link() {
    use reef_ioctl::kfd::abi::{KfdIoctlCreateQueueArgs, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL};
    use std::io::{BufRead, Write};
    let Some(m) = mount() else { return };
    let kfd = Kfd::open(m.path()).unwrap();
    kfd.runtime_enable(0, false).unwrap();
    let ring = vec![0u8; 4096];
    let args = |gpu_id, ring_size, queue_percentage| KfdIoctlCreateQueueArgs {
        ring_base_address: ring.as_ptr() as u64,
        ring_size,
        gpu_id,
        queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        queue_percentage,
        queue_priority: 7,
        ..Default::default()
    };
    for mut bad in [
        args(0xdead, 4096, 100),
        args(GPU_A, 3000, 100),
        args(GPU_A, 4096, 101),
    ] {
        let e = kfd.create_queue(&mut bad).unwrap_err();
        assert_eq!(
            e.errno().map(|e| e as i32),
            Some(Errno::EINVAL as i32),
            "{e}"
        );
    }
    let q0 = kfd.create_queue(&mut args(GPU_A, 4096, 100)).unwrap();
    let q1 = kfd.create_queue(&mut args(GPU_A, 4096, 100)).unwrap();
    let q2 = kfd.create_queue(&mut args(GPU_B, 4096, 100)).unwrap();
    let snap = kfd.queue_snapshot(me(), 0);
    // Without a debug session the snapshot is refused; with one it lists
    // the three queues with their rings.
    assert!(snap.is_err());
    let ev = event_fd();
    kfd.dbg_trap_enable(me(), 0, ev.as_fd()).unwrap();
    let snap = kfd.queue_snapshot(me(), 0).unwrap();
    assert_eq!(snap.len(), 3);
    assert!(snap
        .iter()
        .all(|e| e.ring_base_address == ring.as_ptr() as u64));

    // A simulated GPU on the link, answering what it is asked.
    let link = std::env::temp_dir().join(format!("reef-fuse-kfd-link-{}.sock", me()));
    let _ = std::fs::remove_file(&link);
    let l = std::os::unix::net::UnixListener::bind(&link).unwrap();
    m.device().link_gpu(&link);
    let gpu = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (i, c) in l.incoming().take(3).enumerate() {
            let c = c.unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&c).read_line(&mut line).unwrap();
            seen.push(line.trim().to_string());
            let answer = if i == 2 { "err no such queue" } else { "ok 2" };
            writeln!(&c, "{answer}").unwrap();
        }
        seen
    });
    kfd.suspend_queues(me(), &[q1], 0, 0).unwrap();
    kfd.wave_reset(GPU_A).unwrap();
    kfd.clear_queue(GPU_B, q2).unwrap();
    let e = kfd.wave_reset(GPU_A).unwrap_err();
    assert_eq!(e.errno().map(|e| e as i32), Some(Errno::EIO as i32), "{e}");
    let seen = gpu.join().unwrap();
    let pid = me();
    assert_eq!(
        seen,
        vec![
            format!("wave_reset {pid} {GPU_A} {q0}"),
            format!("clear_queue {pid} {GPU_B} {q2}"),
            format!("wave_reset {pid} {GPU_A} {q0}"),
        ]
    );
    assert_eq!(m.device().state().gpus[0].waves_killed, 2);
    let _ = std::fs::remove_file(&link);
    kfd.destroy_queue(q0).unwrap();
    assert!(kfd.destroy_queue(q0).is_err());
}
