//! `reefd start --device cuda:0` end to end (issue 18 item 4): the daemon
//! process serves reef-sched's policies on the CUDA launch path
//! (engine/gpu.rs: the daemon's SchedEngine on the kernel-level device of
//! backend/cuda_launch/kernels.rs, cudarc's driver API) with the simulated libcuda
//! (reef-libcuda-sim, a dev-dependency built beside this test) named by
//! `device.cuda_library`; with `REEF_TEST_CUDA=system`, a second test runs
//! the same against the system's libcuda on a GPU host (as root).

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{log_skip, Daemon};
use reefd::protocol::{Event, Priority, Reply, RequestBody};

fn model_dir() -> PathBuf {
    common::two_kernel_dir()
}

const MODEL: &str = "two-kernel";

/// What `serve_end_to_end` serves: a model directory (loaded under its
/// directory's name), the daemon's environment.
struct Served<'a> {
    dir: PathBuf,
    env: &'a [(&'a str, &'a str)],
}

impl Served<'_> {
    fn two_kernel() -> Served<'static> {
        Served {
            dir: model_dir(),
            env: &[],
        }
    }
}
const T: Option<Duration> = Some(Duration::from_secs(20));

/// Serves 100 RT and 100 BE inferences from two clients, preempts a BE
/// stream by command, and checks status and stats. `lib`: the driver
/// library (`None`: the system's).
/// The end-to-end runs count preemptions that depend on the BE client
/// keeping work queued: two of them at once (or one beside a TVM compile)
/// on a 2-core machine starve each other's clients, so they run one at a
/// time.
static END_TO_END: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    END_TO_END.lock().unwrap_or_else(|p| p.into_inner())
}

fn serve_end_to_end(lib: Option<&Path>, served: &Served) {
    let device_extra = lib
        .map(|p| format!("cuda_library = {p:?}"))
        .unwrap_or_default();
    let d = Daemon::start_env("cuda:0", "", &device_extra, "", served.env);
    let dir = &served.dir;
    let model = dir.file_name().unwrap().to_str().unwrap().to_string();
    let model = model.as_str();

    // status: the device, the engine naming the GPU, the probed levels.
    let s = d.client().status().unwrap();
    assert_eq!(s.device, "cuda:0");
    assert_eq!(s.policy, "reef-nodkp", "reef is served without padding");
    assert_eq!(s.preemption_levels, vec![1, 2]);
    assert!(
        s.preemption_notes
            .iter()
            .any(|n| n.contains("no kill (level 3)")),
        "{:?}",
        s.preemption_notes
    );
    if lib.is_some() {
        assert!(
            s.engine.contains("simulated GPU, test device"),
            "{}",
            s.engine
        );
    }
    let out = d.reefctl(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "cuda:0",
        "through cudarc",
        "levels [1, 2]",
        "no kill (level 3)",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }

    // Load the model by its directory: registered under the directory's
    // name.
    let out = d.reefctl(&["models", "load", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = &d.client().models().unwrap()[0];
    assert_eq!(loaded.name, model);
    // Its stand-alone latency, measured at load (the fastest reference
    // run): never below the device time of its kernels run one after
    // another (two-kernel: 40 + 30 us on the simulated GPU, which is paced
    // by the wall clock; a compiled model's are shorter than that).
    let alone = loaded
        .standalone_us
        .expect("stand-alone latency measured at load");
    assert!(alone > 0.0 && alone < 1e6, "stand-alone {alone} us");
    if lib.is_some() && model == "two-kernel" {
        assert!(
            alone >= 70.0,
            "stand-alone {alone} us below the kernels' 70 us"
        );
    }

    // A BE client with 16 inferences in flight (about 1.6 ms of device
    // work, so a BE client thread the OS does not run for a while still
    // leaves work queued), at least 100 and until the RT client is done,
    // and an RT client with 100 inferences one after another, started once
    // the BE client's first window is sent (on a loaded machine the BE
    // thread may start later than the 100 RT requests take: ~20 ms).
    const BE_WINDOW: usize = 16;
    let rt_done = Arc::new(AtomicBool::new(false));
    let be_going = Arc::new(AtomicBool::new(false));
    let be = {
        let mut c = d.client();
        let rt_done = rt_done.clone();
        let be_going = be_going.clone();
        let model = model.to_string();
        std::thread::spawn(move || {
            let model = model.as_str();
            let s = c.register(Priority::Be, Some("be")).unwrap();
            let (mut sent, mut results) = (0, Vec::new());
            while results.len() < sent || sent == 0 {
                let more = sent < 100 || !rt_done.load(Ordering::SeqCst);
                // The window's requests go out together and their
                // acknowledgements are read after: one at a time, a
                // request per round trip, a fast daemon finishes each
                // before the next arrives and the stream never queues.
                let mut ids = Vec::new();
                while more && sent + ids.len() - results.len() < BE_WINDOW {
                    let body = RequestBody::Infer {
                        stream: s.stream,
                        model: model.to_string(),
                        wait: false,
                        qos_ms: None,
                        inputs: None,
                        outputs: Vec::new(),
                    };
                    ids.push(c.send(body).unwrap());
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
    assert!(
        common::wait_until(Duration::from_secs(20), || be_going.load(Ordering::SeqCst)),
        "the BE client sent nothing in 20 s"
    );
    // Each RT request is sent while the BE stream has work queued (two
    // inferences or more in flight), so that RT arrivals meet BE work to
    // preempt whatever the timing of the BE client and the daemon (an
    // unoptimised reefd once kept the BE stream empty: 0 preemptions in
    // CI). Where the BE client has not caught up the request goes anyway
    // (at most 20 s of waiting in all).
    let mut rt_results = Vec::new();
    let mut unmet = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for _ in 0..100 {
        let met = loop {
            let busy = rt
                .streams()
                .unwrap()
                .iter()
                .any(|x| x.label.as_deref() == Some("be") && x.tasks_in_flight >= 2);
            if busy {
                break true;
            }
            if std::time::Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_micros(20));
        };
        unmet += usize::from(!met);
        rt_results.push(rt.infer(s.stream, model).unwrap());
    }
    rt_done.store(true, Ordering::SeqCst);
    let be_results = be.join().unwrap();
    assert!(be_results.len() >= 100);
    for r in rt_results.iter().chain(&be_results) {
        assert_eq!(r.outputs_verified, Some(true), "task {} ({r:?})", r.task);
    }
    for r in &rt_results {
        let n = r
            .normalized_latency
            .expect("normalised by the measured stand-alone");
        assert!(
            (n - r.latency_us / alone).abs() < 1e-6 * n.max(1.0),
            "{r:?}"
        );
    }
    let stats = d.client().stats().unwrap();
    let preemptions = stats.preemptions.get("2").copied().unwrap_or(0);
    let be_restored: u32 = be_results.iter().map(|r| r.preemptions).sum();
    eprintln!(
        "RT mean {:.0} us p99 {:.0} us; {} BE, mean {:.0} us; {preemptions} preemptions \
         (level 2), {be_restored} BE restores; {unmet} RT requests sent without BE work \
         queued",
        stats.rt_latency.mean_us,
        stats.rt_latency.p99_us,
        be_results.len(),
        stats.be_latency.mean_us,
    );
    // The counts depend on kernel durations: the simulated kernels take
    // 40 and 30 us (two-kernel's kernels.ptx, stated assumptions) or what the
    // cost model gives a compiled model's recorded work; on a GPU tiny
    // kernels take microseconds and BE work is rarely still queued. Every
    // RT request here is sent with BE work queued (above), so each arrival
    // should take BE kernels back: at least 50 of the 100 (issue 18; 88-100
    // measured, also under load).
    if lib.is_some() && preemptions < 50 {
        let log = d.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "BE preempted {preemptions} times by 100 RT arrivals ({unmet} sent without BE \
             work queued); {stats:?}; reefd log \
             (last 40 lines, newest first):\n{}",
            tail.join("\n")
        );
    }
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.device_errors, 0);
    assert_eq!(stats.tasks_completed, 100 + be_results.len() as u64);
    assert!(
        stats.kernels_launched >= 400,
        "{} kernels",
        stats.kernels_launched
    );
    assert_eq!(stats.rt_latency.count, 100);
    assert!(stats.control_path.count > 0);

    // Preemption by command: a BE stream's work stops until `resume`, then
    // completes correctly. First through reefctl (a process start takes
    // milliseconds, so the stream is preempted before its work arrives),
    // then through the client while 200 requests are queued.
    const HELD: usize = 200;
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
    let queued = |d: &Daemon| {
        d.client()
            .tasks()
            .unwrap()
            .iter()
            .filter(|t| t.stream == s.stream)
            .count()
    };
    assert_eq!(queued(&d), 5);
    let out = d.reefctl(&["resume", "--stream", &n]);
    assert!(out.status.success());
    let mut finished = 0;
    while finished < 5 {
        finished += drain(&mut c, 100);
        assert!(finished > 0 || queued(&d) > 0, "tasks lost");
    }
    // Sent without waiting for the replies, so the requests are queued
    // faster than the device completes them; the preempting client is
    // connected first. A loaded machine may still finish them all before
    // the preemption lands: then nothing was held, and the round is tried
    // again (at most 3 times).
    let mut admin = d.client();
    for round in 1..=3 {
        let ids: Vec<u64> = (0..HELD)
            .map(|_| {
                c.send(reefd::protocol::RequestBody::Infer {
                    stream: s.stream,
                    model: model.into(),
                    wait: false,
                    qos_ms: None,
                    inputs: None,
                    outputs: Vec::new(),
                })
                .unwrap()
            })
            .collect();
        let (_, taken_back) = admin
            .preempt(reefd::protocol::PreemptTarget::Stream(s.stream))
            .unwrap();
        for id in ids {
            c.wait_reply(id).unwrap();
        }
        // What finished before the preemption (and the request running at it).
        let mut finished = drain(&mut c, 100);
        assert_eq!(drain(&mut c, 300), 0, "the stream ran while preempted");
        eprintln!(
            "round {round}: preempted with {finished} of {HELD} finished, {taken_back} kernels \
             taken back"
        );
        admin
            .resume(reefd::protocol::PreemptTarget::Stream(s.stream))
            .unwrap();
        let held = finished < HELD;
        while finished < HELD {
            match c.next_event(T).unwrap() {
                Event::TaskDone(r) => {
                    assert_eq!(r.outputs_verified, Some(true));
                    finished += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        if held || lib.is_none() {
            break;
        }
        assert!(
            round < 3,
            "all {HELD} finished before the preemption, 3 times"
        );
    }
    let out = d.reefctl(&["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("device errors 0"), "{text}");
    assert!(
        text.contains("outputs differing from an unpreempted run 0"),
        "{text}"
    );
    // Padding needs the simulator: refused with the reason.
    let e = d.client().set_policy("reef-dkp-mv").unwrap_err();
    assert!(e.to_string().contains("reef-nodkp"), "{e}");
    // reef-sched's other policies run on the GPU: FIKIT serves.
    d.client().set_policy("fikit").unwrap();
    assert_eq!(d.client().status().unwrap().policy, "fikit");
    let mut c = d.client();
    let s = c.register(Priority::Rt, Some("fikit-rt")).unwrap();
    for _ in 0..3 {
        let r = c.infer(s.stream, model).unwrap();
        assert_eq!(r.outputs_verified, Some(true));
    }
}

#[test]
fn reefd_serves_cuda0_on_the_simulated_libcuda() {
    let _one = one_at_a_time();
    serve_end_to_end(Some(&common::sim_library()), &Served::two_kernel());
}

/// A model compiled by reef-compile, loaded from its output directory as
/// is (no model.toml): the PTX for the device's compute capability (the
/// simulated H100 reports 9.0: sm_90), weights at their recorded offsets,
/// kernel durations from the recorded work and resources. Eight conv + relu
/// layers (10 kernels): with the 3 kernels of depth 1, each a few
/// microseconds on the H100's cost model, BE requests rarely had kernels
/// left to take back when an RT request arrived.
#[test]
fn reefd_serves_a_reef_compile_model_on_cuda0() {
    let _one = one_at_a_time();
    let t = common::compiled_tiny(8);
    let dir = t.path().join("models/tiny");
    assert!(!dir.join("model.toml").exists());
    serve_end_to_end(
        Some(&common::sim_library()),
        &Served {
            dir,
            env: &[("REEF_LIBCUDA_SIM_DEVICE", "h100")],
        },
    );
}

#[test]
fn reefd_serves_cuda0_on_the_system_libcuda() {
    if std::env::var("REEF_TEST_CUDA").as_deref() != Ok("system") {
        log_skip(
            "reefd_serves_cuda0_on_the_system_libcuda",
            "REEF_TEST_CUDA is not `system` (set it on a GPU host, as root, to serve cuda:0 on \
             NVIDIA's libcuda)",
        );
        return;
    }
    // SAFETY: only tries to dlopen libcuda.
    assert!(
        unsafe { cudarc::driver::sys::is_culib_present() },
        "REEF_TEST_CUDA=system but no libcuda on the library search path"
    );
    let _one = one_at_a_time();
    serve_end_to_end(None, &Served::two_kernel());
}

#[test]
fn a_policy_that_pads_stops_the_start_on_cuda() {
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("reefd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {:?}\npid_file = {:?}\n[device]\ndevice = \"cuda:0\"\ncuda_library = {:?}\n[scheduler]\npolicy = \"reef-dkp-mv\"\n[metrics]\nenabled = false\n",
            t.path().join("s.sock"),
            t.path().join("p.pid"),
            common::sim_library()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::reefd_bin())
        .args(["start", "--foreground", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "device cuda:0: scheduler: policy reef-dkp-mv places blocks on chosen compute units"
        ) && err.contains("reef-nodkp"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// The simulated libcuda needs no root (NVIDIA hardware does: daemon.rs
/// refuses a GPU whose driver does not name itself a test device).
#[test]
fn the_simulated_device_serves_without_root() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !nix::unistd::geteuid().is_root() {
        // Already unprivileged: the end-to-end test above shows it.
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = t.path().join("s.sock");
    let cfg = t.path().join("reefd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {socket:?}\npid_file = {:?}\n[device]\ndevice = \"cuda:0\"\ncuda_library = {:?}\n[metrics]\nenabled = false\n",
            t.path().join("p.pid"),
            common::sim_library()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = std::process::Command::new(common::reefd_bin())
        .args(["start", "--foreground", "--config"])
        .arg(&cfg)
        .uid(65534)
        .gid(65534)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let up = common::wait_until(Duration::from_secs(20), || {
        reefd::client::Client::connect(&socket)
            .and_then(|mut c| c.status())
            .is_ok_and(|s| s.device == "cuda:0")
    });
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        up,
        "reefd as uid 65534 did not serve cuda:0: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A driver error is counted in stats and Prometheus, logged with its
/// action, and fails only its request (issue 18 item 6). The test device
/// refuses the 12th launch of kernel `scale` (REEF_LIBCUDA_SIM_FAIL_LAUNCH):
/// the first 8 compute the reference outputs at load and the next 3 time
/// each kernel alone (device/cuda/load.rs), the 12th is the first
/// request's. A model whose kernel the driver refuses outright is refused
/// at load, with the driver's words.
#[test]
fn driver_errors_are_counted_logged_and_answered() {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Daemon::start_env(
        "cuda:0",
        "",
        &format!("cuda_library = {:?}", common::sim_library()),
        &format!("[metrics]\nenabled = true\nlisten = \"127.0.0.1:{port}\"\n"),
        &[("REEF_LIBCUDA_SIM_FAIL_LAUNCH", "scale@12")],
    );
    let t = common::refused_model("wide");
    let mut c = d.client();
    let e = c
        .load_model(t.path().join("wide").to_str().unwrap(), None)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"),
        "{e}"
    );
    assert!(c.models().unwrap().is_empty());
    c.load_model(model_dir().to_str().unwrap(), None).unwrap();
    let s = c.register(Priority::Rt, None).unwrap();
    let e = c.infer(s.stream, MODEL).unwrap_err();
    assert_eq!(e.code(), Some(reefd::protocol::ErrorCode::Internal), "{e}");
    assert!(
        e.to_string()
            .contains("cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        "{e}"
    );
    // The stream and the device go on.
    let r = c.infer(s.stream, MODEL).unwrap();
    assert_eq!(r.outputs_verified, Some(true));
    let stats = c.stats().unwrap();
    assert_eq!(stats.device_errors, 1);
    assert_eq!(stats.tasks_failed, 1);
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(tcp, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).unwrap();
    assert!(text.contains("reef_device_errors_total 1"), "{text}");
    let log = d.log();
    assert!(
        log.lines().any(|l| l.contains("ERROR")
            && l.contains("device error")
            && l.contains("launch request")
            && l.contains("kernel 0")),
        "{log}"
    );
}

/// A launch the driver refuses in the middle of a request (its last
/// kernel, while its first may still run) fails that request only: the
/// next request on the same stream is served (issue 25, D6; before, it
/// failed with "stream 0 still runs request ..."). As in the issue's
/// probe, an RT and a BE client each queue 100 inferences at once, so the
/// GPU is busy and requests follow each other on their streams. Whether the
/// refused kernel's first kernel is still on the GPU here depends on
/// timing; the ordering rule itself is pinned by reef-exec's
/// `a_refused_last_launch_ends_its_request_after_its_stream_drains`.
#[test]
fn a_request_whose_later_launch_is_refused_leaves_its_stream_free() {
    let d = Daemon::start_env(
        "cuda:0",
        "",
        &format!("cuda_library = {:?}", common::sim_library()),
        "",
        // bias_relu is kernel 1 of 2; its 100th launch is a request's (the
        // first 11 are the reference runs and kernel timings at load).
        &[("REEF_LIBCUDA_SIM_FAIL_LAUNCH", "bias_relu@100")],
    );
    let mut c = d.client();
    c.load_model(model_dir().to_str().unwrap(), None).unwrap();
    let (done, failed) = rt_and_be_clients_queue_100_each(&d);
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert!(
        failed[0].1.contains("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
        "{failed:?}"
    );
    assert_eq!(done, 199);
    let stats = c.stats().unwrap();
    assert_eq!((stats.tasks_failed, stats.device_errors), (1, 1));
}

/// Issue 25, D3: under `baymax` (and `aker`) every client's kernels go to
/// one scheduler stream (Aker §8.3's serial issue), so requests of one
/// model from an RT and a BE client run on one CUDA stream at once. Each
/// takes its own instance of the model (buffers, flag, index); the issue's
/// probe saw 70 of 100 RT requests fail with "stream 0 still runs request
/// ...". Here the overlap depends on timing; the rule is pinned on the
/// device by cuda_launch.rs's
/// `two_requests_of_one_model_on_one_stream_each_have_their_own_buffers`.
#[test]
fn baymax_serves_rt_and_be_requests_of_one_model_on_its_one_stream() {
    let d = Daemon::start_env(
        "cuda:0",
        "",
        &format!("cuda_library = {:?}", common::sim_library()),
        "[scheduler]\npolicy = \"baymax\"\n",
        &[],
    );
    let mut c = d.client();
    c.load_model(model_dir().to_str().unwrap(), None).unwrap();
    let (done, failed) = rt_and_be_clients_queue_100_each(&d);
    assert_eq!(done + failed.len(), 200);
    assert!(
        failed.is_empty(),
        "{} failed: {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(c.stats().unwrap().tasks_failed, 0);
}

/// An RT and a BE client each queue 100 asynchronous inferences of the
/// test model at once; the inferences done (each output verified) and the
/// failures (task, message).
fn rt_and_be_clients_queue_100_each(d: &Daemon) -> (usize, Vec<(u64, String)>) {
    let mut clients = Vec::new();
    for p in [Priority::Rt, Priority::Be] {
        let mut c = d.client();
        let s = c.register(p, None).unwrap();
        for _ in 0..100 {
            c.infer_async(s.stream, MODEL).unwrap();
        }
        clients.push(c);
    }
    let (mut done, mut failed) = (0, Vec::new());
    for c in &mut clients {
        for _ in 0..100 {
            match c
                .next_event(Some(std::time::Duration::from_secs(30)))
                .unwrap()
            {
                reefd::protocol::Event::TaskDone(r) => {
                    assert_eq!(r.outputs_verified, Some(true), "task {}", r.task);
                    done += 1;
                }
                reefd::protocol::Event::TaskFailed { task, message, .. } => {
                    failed.push((task, message))
                }
            }
        }
    }
    (done, failed)
}

/// Issue 26 B4: a fault of the context (here an illegal address injected
/// into the 60th launch of `scale`, REEF_LIBCUDA_SIM_FAULT; the first 8
/// are the reference runs at load) fails the requests that hold buffers on
/// it, with the driver's words, and nothing else: the context is rebuilt
/// with the model reloaded and serving resumes, within a bounded time
/// (measured here from the first failure to the next answer), and the
/// fault is counted once as a device error. Before, the failed query left
/// the kernel in flight and the daemon polled it every 20 us for ever.
#[test]
fn a_fault_fails_only_its_contexts_requests_and_serving_resumes() {
    use std::time::{Duration, Instant};
    let d = Daemon::start_env(
        "cuda:0",
        "",
        &format!("cuda_library = {:?}", common::sim_library()),
        "",
        &[("REEF_LIBCUDA_SIM_FAULT", "scale@60")],
    );
    let mut c = d.client();
    c.load_model(model_dir().to_str().unwrap(), None).unwrap();
    // Two clients, RT and BE, each sending 100 inferences one after
    // another; per client, in order: (when the answer arrived, failure
    // message or None for done).
    let per_client: Vec<Vec<(Instant, Option<String>)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = [Priority::Rt, Priority::Be]
            .into_iter()
            .map(|p| {
                let mut c = d.client();
                sc.spawn(move || {
                    let s = c.register(p, None).unwrap();
                    let mut v = Vec::new();
                    for _ in 0..100 {
                        match c.infer(s.stream, MODEL) {
                            Ok(r) => {
                                assert_eq!(r.outputs_verified, Some(true), "task {}", r.task);
                                v.push((Instant::now(), None));
                            }
                            Err(e) => v.push((Instant::now(), Some(e.to_string()))),
                        }
                    }
                    v
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let events: Vec<(Instant, Option<String>)> = per_client.iter().flatten().cloned().collect();
    let failed: Vec<&(Instant, Option<String>)> = events.iter().filter(|e| e.1.is_some()).collect();
    assert!(!failed.is_empty(), "no request failed");
    // One request per scheduler stream holds buffers at a time: RT's, BE's.
    assert!(failed.len() <= 2, "{failed:#?}");
    for (_, m) in &failed {
        let m = m.as_deref().unwrap();
        assert!(m.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{m}");
    }
    // Serving resumes: the failed request's client sends its next request
    // when the failure arrives (the context is rebuilt by then), and it is
    // answered.
    let mut gap = Duration::ZERO;
    for v in &per_client {
        for (i, e) in v.iter().enumerate() {
            if e.1.is_some() {
                let next = v[i + 1..]
                    .iter()
                    .find(|x| x.1.is_none())
                    .expect("no request of the stream was served after the fault");
                gap = gap.max(next.0 - e.0);
            }
        }
    }
    let log = d.log();
    let rebuilt = log
        .lines()
        .find(|l| l.contains("context rebuilt in"))
        .unwrap_or_else(|| panic!("{log}"));
    eprintln!(
        "fault: {} requests failed, {} served; the failed stream's next answer {:.0} us after \
         the failure; {}",
        failed.len(),
        events.len() - failed.len(),
        gap.as_secs_f64() * 1e6,
        rebuilt.rsplit(": ").next().unwrap_or(rebuilt)
    );
    // The gap is printed, not bounded: it is about 2 ms, but a loaded
    // 2-core CI machine once stretched it past 2 s (a timed assertion that
    // flakes). That the stream is served again is asserted above.
    let stats = c.stats().unwrap();
    assert_eq!(stats.device_errors, 1);
    assert_eq!(stats.tasks_failed, failed.len() as u64);
}
