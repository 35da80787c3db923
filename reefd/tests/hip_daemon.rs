//! `reefd start --device kfd:0` end to end on the simulated libamdhip64
//! (reef-libhip-sim, a dev-dependency built beside this test) named by
//! `device.hip_library`: a model compiled by reef-compile for gfx906 (its
//! code object chosen by the GPU's gcnArchName, REEF's flag check injected)
//! served to an RT and a BE client with lazy eviction (level 2), every
//! output verified against its input's unpreempted output, and
//! `reefctl preempt --stream N` holding a stream's work until `resume`;
//! as root with the FUSE fake KFD linked to the simulated GPU, the same at
//! level 3 (the REEF patch's wave reset and queue clear on each BE
//! stream's own KFD queue).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Daemon;
use reefd::protocol::{Event, Priority, Reply, RequestBody, TaskResult};

const T: Option<Duration> = Some(Duration::from_secs(20));

fn hip_library() -> PathBuf {
    let lib = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("libreef_libhip_sim.so");
    assert!(
        lib.is_file(),
        "{} missing: build reef-libhip-sim",
        lib.display()
    );
    lib
}

/// The tiny network with `depth` conv + relu layers, compiled for sm_80
/// (the schedule's and the CPU build's) and gfx906, in `<tmp>/tiny`.
fn compiled_tiny_gfx906(depth: u32) -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let venv = root.join(".venv/bin");
    assert!(venv.join("reef-compile").is_file(), "run scripts/setup.sh");
    let t = tempfile::tempdir().unwrap();
    let onnx = t.path().join("tiny.onnx");
    let run = |c: &mut Command| {
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new(venv.join("python"))
        .arg(root.join("compile/tests/make_tiny.py"))
        .arg(&onnx)
        .args(["--depth", &depth.to_string()]));
    run(Command::new(venv.join("python"))
        .env("PYTHONPATH", root.join("compile"))
        .args(["-m", "reef_compile.cli"])
        .arg(&onnx)
        .args([
            "--arch",
            "sm_80",
            "--arch",
            "gfx906",
            "--no-reference",
            "-o",
        ])
        .arg(t.path().join("tiny")));
    t
}

/// A BE client keeping up to 16 inferences in flight until the RT client
/// is done, and an RT client sending 100 one after another, each while the
/// BE stream has work queued: (RT results, BE results).
fn rt_and_be(d: &Daemon, model: &str) -> (Vec<TaskResult>, Vec<TaskResult>) {
    let rt_done = Arc::new(AtomicBool::new(false));
    let be_going = Arc::new(AtomicBool::new(false));
    let be = {
        let mut c = d.client();
        let (rt_done, be_going) = (rt_done.clone(), be_going.clone());
        let model = model.to_string();
        std::thread::spawn(move || {
            let s = c.register(Priority::Be, Some("be")).unwrap();
            let (mut sent, mut results) = (0, Vec::new());
            while results.len() < sent || sent == 0 {
                let more = sent < 100 || !rt_done.load(Ordering::SeqCst);
                let mut ids = Vec::new();
                while more && sent + ids.len() - results.len() < 16 {
                    ids.push(
                        c.send(RequestBody::Infer {
                            stream: s.stream,
                            model: model.clone(),
                            wait: false,
                            qos_ms: None,
                            inputs: None,
                            outputs: Vec::new(),
                        })
                        .unwrap(),
                    );
                }
                for id in ids {
                    match c.wait_reply(id).unwrap() {
                        Reply::InferQueued { .. } => sent += 1,
                        other => panic!("BE: {other:?}"),
                    }
                }
                be_going.store(true, Ordering::SeqCst);
                match c.next_event(T).unwrap() {
                    Event::TaskDone(r) => results.push(r),
                    other => panic!("BE: {other:?}"),
                }
            }
            results
        })
    };
    let mut rt = d.client();
    let s = rt.register(Priority::Rt, Some("rt")).unwrap();
    assert!(common::wait_until(Duration::from_secs(20), || be_going.load(Ordering::SeqCst)));
    let mut rt_results = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for _ in 0..100 {
        while std::time::Instant::now() < deadline
            && !rt
                .streams()
                .unwrap()
                .iter()
                .any(|x| x.label.as_deref() == Some("be") && x.tasks_in_flight >= 2)
        {
            std::thread::sleep(Duration::from_micros(20));
        }
        rt_results.push(rt.infer(s.stream, model).unwrap());
    }
    rt_done.store(true, Ordering::SeqCst);
    let be_results = be.join().unwrap();
    (rt_results, be_results)
}

#[test]
fn reefd_serves_kfd0_on_the_simulated_libamdhip64() {
    let t = compiled_tiny_gfx906(8);
    let dir = t.path().join("tiny");
    let lib = hip_library();
    let d = Daemon::start_env("kfd:0", "", &format!("hip_library = {lib:?}"), "", &[]);

    let s = d.client().status().unwrap();
    assert_eq!(s.device, "kfd:0");
    assert_eq!(s.policy, "reef-nodkp", "reef is served without padding");
    assert_eq!(s.preemption_levels, vec![1, 2], "{:?}", s.preemption_notes);
    assert!(
        s.preemption_notes
            .iter()
            .any(|n| n.contains("no kill (level 3)")),
        "{:?}",
        s.preemption_notes
    );
    assert!(
        s.engine.contains("test device") && s.engine.contains("gfx906"),
        "{}",
        s.engine
    );
    let out = d.reefctl(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["kfd:0", "levels [1, 2]", "no kill (level 3)"] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }

    let out = d.reefctl(&["models", "load", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let model = "tiny";
    let alone = d.client().models().unwrap()[0]
        .standalone_us
        .expect("stand-alone latency measured at load");

    let (rt_results, be_results) = rt_and_be(&d, model);
    for r in rt_results.iter().chain(&be_results) {
        assert_eq!(r.outputs_verified, Some(true), "task {} ({r:?})", r.task);
    }
    let stats = d.client().stats().unwrap();
    let preemptions = stats.preemptions.get("2").copied().unwrap_or(0);
    let restores: u32 = be_results.iter().map(|r| r.preemptions).sum();
    eprintln!(
        "kfd:0 (simulated MI50): RT mean {:.0} us p99 {:.0} us (alone {alone:.0} us); {} BE, \
         mean {:.0} us; {preemptions} preemptions (level 2), {restores} BE restores",
        stats.rt_latency.mean_us,
        stats.rt_latency.p99_us,
        be_results.len(),
        stats.be_latency.mean_us,
    );
    assert!(
        preemptions >= 50,
        "{preemptions} preemptions by 100 RT arrivals; {stats:?}"
    );
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.device_errors, 0);
    assert_eq!(stats.tasks_completed, 100 + be_results.len() as u64);

    // reefctl preempt --stream N: the stream's work waits until resume,
    // then completes correctly.
    let drain = |c: &mut reefd::client::Client, wait_ms| {
        let mut n = 0;
        while let Ok(Event::TaskDone(r)) = c.next_event(Some(Duration::from_millis(wait_ms))) {
            assert_eq!(r.outputs_verified, Some(true));
            n += 1;
        }
        n
    };
    let mut c = d.client();
    let s = c
        .register(Priority::level(5).unwrap(), Some("held"))
        .unwrap();
    let n = s.stream.to_string();
    let out = d.reefctl(&["preempt", "--stream", &n]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for _ in 0..5 {
        c.infer_async(s.stream, model).unwrap();
    }
    assert_eq!(drain(&mut c, 300), 0, "the stream ran while preempted");
    let out = d.reefctl(&["resume", "--stream", &n]);
    assert!(out.status.success());
    let mut finished = 0;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while finished < 5 && std::time::Instant::now() < until {
        finished += drain(&mut c, 100);
    }
    assert_eq!(finished, 5);
    let out = d.reefctl(&["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("device errors 0"), "{text}");
    assert!(
        text.contains("outputs differing from an unpreempted run 0"),
        "{text}"
    );
}

/// Without a HIP runtime: one line, non-zero exit, nothing left behind.
#[test]
fn reefd_start_kfd_without_a_hip_runtime_says_so_in_one_line() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("no-libamdhip64.so");
    let cfg = t.path().join("reefd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {:?}\npid_file = {:?}\n[device]\nhip_library = {missing:?}\n\
             [metrics]\nenabled = false\n",
            t.path().join("reefd.sock"),
            t.path().join("reefd.pid")
        ),
    )
    .unwrap();
    let out = Command::new(common::reefd_bin())
        .args(["start", "--foreground", "--device", "kfd:0", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for want in [
        "reefd: error: device kfd:0: the HIP runtime library",
        &missing.display().to_string(),
        "(set by device.hip_library)",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    assert!(!t.path().join("reefd.sock").exists());
}

/// Level 3 on kfd:0 (device/hip/queues.rs): the simulated libamdhip64
/// creates its HSA queues through the FUSE fake KFD (AMDKFD_IOC_CREATE_QUEUE,
/// `REEF_LIBHIP_SIM_KFD`), one per stream (`GPU_MAX_HW_QUEUES=16`), and
/// listens on the link the fake reaches its GPU through
/// (`REEF_LIBHIP_SIM_KFD_LINK`); reefd learns each stream's queue from
/// GET_QUEUE_SNAPSHOT and kills with the REEF patch's WAVE_RESET and
/// CLEAR_QUEUE, which end the running kernels of that queue on the
/// simulated GPU. RT and BE clients with ≥ 50 level-3 preemptions, every
/// output verified; `reefctl preempt --stream N` resets a running BE
/// stream. Needs root and /dev/fuse (REEF_REQUIRE_HW_FAKES=1 makes a skip
/// a failure).
#[test]
fn reefd_kills_be_streams_on_kfd0_through_the_fuse_fake_kfd() {
    use reef_ioctl::fake::{fuse_unavailable, report_skip, FakeKfd, FakeMount};
    use std::os::unix::fs::PermissionsExt;
    const TEST: &str = "reefd_kills_be_streams_on_kfd0_through_the_fuse_fake_kfd";
    const GPU: u32 = 0x5e1f;
    if let Some(why) = fuse_unavailable() {
        report_skip(TEST, &why);
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        report_skip(TEST, "the KFD's ioctls need root");
        return;
    }
    let t = compiled_tiny_gfx906(8);
    let dir = t.path().join("tiny");
    // The tiny network's kernels run for some 20 us each, shorter than the
    // FUSE round trips between the flag's write and the wave reset, by
    // which they have finished: the schedule's recorded work (flops,
    // bytes), from which the simulated GPU takes each kernel's time, is
    // scaled 300-fold so kernels run for milliseconds, as a large
    // network's do, and a kill finds one running. Values are unchanged
    // (the CPU build computes them).
    let json = dir.join("tiny.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut scaled = 0;
    for k in v["kernels"].as_array_mut().expect("kernels") {
        for key in ["flops", "bytes_read", "bytes_written"] {
            let x = k[key].as_u64().expect("recorded work");
            k[key] = (x * 300).into();
        }
        scaled += 1;
    }
    assert!(scaled > 0);
    std::fs::write(&json, v.to_string()).unwrap();
    let lib = hip_library();
    let m = FakeMount::mount(FakeKfd::new(&[GPU])).expect("mounting the fake KFD");
    let topo = tempfile::tempdir().unwrap();
    std::fs::set_permissions(topo.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (node, id) in [(0, 0), (1, GPU)] {
        let n = topo.path().join(node.to_string());
        std::fs::create_dir(&n).unwrap();
        std::fs::write(n.join("gpu_id"), format!("{id}\n")).unwrap();
    }
    let link = topo.path().join("gpu.sock");
    m.device().link_gpu(&link);
    let d = Daemon::start_env(
        "kfd:0",
        "",
        &format!(
            "kfd_path = {:?}\nkfd_topology = {:?}\nhip_library = {lib:?}",
            m.path(),
            topo.path().join("")
        ),
        "",
        &[
            ("REEF_LIBHIP_SIM_KFD", m.path().to_str().unwrap()),
            (
                "REEF_LIBHIP_SIM_KFD_TOPOLOGY",
                topo.path().to_str().unwrap(),
            ),
            ("REEF_LIBHIP_SIM_KFD_LINK", link.to_str().unwrap()),
            ("GPU_MAX_HW_QUEUES", "16"),
        ],
    );
    let s = d.client().status().unwrap();
    assert_eq!(
        s.preemption_levels,
        vec![1, 2, 3],
        "{:?}",
        s.preemption_notes
    );
    assert!(
        s.preemption_notes
            .iter()
            .any(|n| n.contains("kill (level 3) through the KFD") && n.contains("0x5e1f")),
        "{:?}",
        s.preemption_notes
    );
    let out = d.reefctl(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("levels [1, 2, 3]"), "{text}");
    let out = d.reefctl(&["models", "load", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resets = |m: &FakeMount<FakeKfd>| {
        let st = m.device().state();
        (st.gpus[0].wave_resets, st.gpus[0].waves_killed)
    };
    let (r0, _) = resets(&m);

    let (rt_results, be_results) = rt_and_be(&d, "tiny");
    for r in rt_results.iter().chain(&be_results) {
        assert_eq!(r.outputs_verified, Some(true), "task {} ({r:?})", r.task);
    }
    let stats = d.client().stats().unwrap();
    let level3 = stats.preemptions.get("3").copied().unwrap_or(0);
    let (r1, killed) = resets(&m);
    eprintln!(
        "kfd:0 level 3: {level3} preemptions, {} wave resets, {killed} kernels killed on the \
         simulated GPU; RT mean {:.0} us; {} BE",
        r1 - r0,
        stats.rt_latency.mean_us,
        be_results.len()
    );
    assert!(level3 >= 50, "{level3} level-3 preemptions; {stats:?}");
    assert!(
        r1 - r0 >= level3 as u32,
        "{} wave resets for {level3}",
        r1 - r0
    );
    assert!(killed > 0, "no running kernel was killed");
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.device_errors, 0);
    assert_eq!(stats.tasks_completed, 100 + be_results.len() as u64);

    // reefctl preempt --stream N on a BE stream while it runs: its queue
    // is reset, and its work completes correctly after resume.
    let mut c = d.client();
    let s = c.register(Priority::Be, Some("held")).unwrap();
    for _ in 0..20 {
        c.infer_async(s.stream, "tiny").unwrap();
    }
    assert!(common::wait_until(Duration::from_secs(20), || {
        d.client()
            .streams()
            .unwrap()
            .iter()
            .any(|x| x.label.as_deref() == Some("held") && x.tasks_in_flight >= 1)
    }));
    let (before, _) = resets(&m);
    let n = s.stream.to_string();
    let out = d.reefctl(&["preempt", "--stream", &n]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        common::wait_until(Duration::from_secs(5), || resets(&m).0 > before),
        "no wave reset for reefctl preempt"
    );
    let out = d.reefctl(&["resume", "--stream", &n]);
    assert!(out.status.success());
    let mut finished = 0;
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while finished < 20 && std::time::Instant::now() < until {
        if let Ok(Event::TaskDone(r)) = c.next_event(Some(Duration::from_millis(200))) {
            assert_eq!(r.outputs_verified, Some(true), "{r:?}");
            finished += 1;
        }
    }
    assert_eq!(finished, 20);
    let stats = d.client().stats().unwrap();
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.device_errors, 0);
    drop(c);
    drop(d);
    // The simulated libamdhip64 created its HSA queues in the fake, one
    // per stream: the probes' and reference runs', RT's, BE's and "held"'s.
    let st = m.device().state();
    assert!(
        st.processes.values().any(|p| p.queues.len() >= 4),
        "{:?}",
        st.processes
    );
}
