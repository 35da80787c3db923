//! End-to-end behaviour of the reefd process: bad input, dead clients,
//! ownership, and shutdown on SIGTERM.

mod common;

use common::{wait_until, Daemon};
use nix::sys::signal::Signal;
use reefd::client::ClientError;
use reefd::protocol::{ErrorCode, Event, PreemptTarget, Priority, RequestBody, ServerMessage};
use std::os::unix::process::CommandExt;
use std::time::Duration;

fn expect_error(msg: ServerMessage, code: ErrorCode) -> (Option<u64>, String) {
    match msg {
        ServerMessage::Error {
            id,
            code: c,
            message,
        } if c == code => (id, message),
        other => panic!("expected {code} error, got {other:?}"),
    }
}

#[test]
fn malformed_and_oversized_requests_get_errors_and_the_connection_lives_on() {
    let d = Daemon::start("max_frame_bytes = 4096");
    let mut c = d.client();
    let t = Some(Duration::from_secs(10));

    // Not JSON.
    let mut frame = 6u32.to_be_bytes().to_vec();
    frame.extend(b"\xff{oops");
    c.send_raw(&frame).unwrap();
    let (id, m) = expect_error(c.read_message(t).unwrap(), ErrorCode::BadRequest);
    assert_eq!(id, None);
    assert!(m.contains("not valid JSON"), "{m}");

    // JSON, unknown op: the id is echoed.
    let body = br#"{"id":42,"op":"launch_missiles"}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend(body);
    c.send_raw(&frame).unwrap();
    let (id, _) = expect_error(c.read_message(t).unwrap(), ErrorCode::BadRequest);
    assert_eq!(id, Some(42));

    // Oversized: announced 1 MiB, over the 4096-byte limit; sent in full.
    let len = 1 << 20;
    let mut frame = (len as u32).to_be_bytes().to_vec();
    frame.extend(std::iter::repeat_n(b'a', len));
    c.send_raw(&frame).unwrap();
    let (_, m) = expect_error(c.read_message(t).unwrap(), ErrorCode::FrameTooLarge);
    assert!(m.contains("4096"), "{m}");

    // Empty frame.
    c.send_raw(&0u32.to_be_bytes()).unwrap();
    expect_error(c.read_message(t).unwrap(), ErrorCode::BadRequest);

    // The same connection still serves, and so does the daemon.
    let s = c.status().expect("status after bad frames");
    assert_eq!(s.device, "sim:mi50");
    let stats = d.client().stats().unwrap();
    assert_eq!(stats.bad_requests, 4);

    // Bad arguments to a valid op.
    let e = c.infer(999, "vgg").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotFound));
    let e = c.load_model("no-such-model", None).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotFound));
    assert!(e.to_string().contains("no model"), "{e}");
    let s = c.register(Priority::Rt, None).unwrap();
    let e = c.infer(s.stream, "vgg").unwrap_err();
    assert!(e.to_string().contains("models load vgg"), "{e}");
}

#[test]
fn a_client_killed_mid_inference_frees_its_stream_and_tasks() {
    let d = Daemon::start("");
    let mut admin = d.client();
    admin.load_model("resnet152", None).unwrap();
    // A separate process that registers and runs inferences back to back.
    let mut child = std::process::Command::new(common::reefctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(["infer", "resnet152", "--count", "1000", "--priority", "be"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(
        wait_until(Duration::from_secs(10), || {
            admin
                .tasks()
                .unwrap()
                .iter()
                .any(|t| t.model == "resnet152")
        }),
        "the child's inference never showed up"
    );
    let streams = admin.streams().unwrap();
    assert!(streams.iter().any(|s| s.owner_pid == Some(pid as i32)));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            admin.streams().unwrap().is_empty() && admin.tasks().unwrap().is_empty()
        }),
        "stream or task left behind: {:?} {:?}",
        admin.streams(),
        admin.tasks()
    );
    assert_eq!(admin.status().unwrap().tasks_in_flight, 0);
    // The device is free: a new inference completes in about its stand-alone time.
    let s = admin.register(Priority::Rt, None).unwrap();
    let r = admin.infer(s.stream, "resnet152").unwrap();
    assert!(r.normalized_latency.unwrap() < 1.5, "{r:?}");
}

#[test]
fn async_infer_notifies_completion() {
    let d = Daemon::start("");
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    let s = c.register(Priority::Be, Some("async")).unwrap();
    let tasks: Vec<u64> = (0..3)
        .map(|_| c.infer_async(s.stream, "vgg").unwrap())
        .collect();
    let mut done = Vec::new();
    for _ in 0..3 {
        match c.next_event(Some(Duration::from_secs(10))).unwrap() {
            Event::TaskDone(r) => {
                assert_eq!(r.model, "vgg");
                assert!(r.latency_us >= 4000.0, "{r:?}");
                done.push(r.task);
            }
            e => panic!("{e:?}"),
        }
    }
    assert_eq!(done, tasks);
}

/// Runs reefctl as uid/gid 65534 (nobody/nogroup).
fn reefctl_as_nobody(d: &Daemon, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::reefctl_bin())
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap()
}

#[test]
fn only_the_owner_or_root_may_preempt_or_unload() {
    if !nix::unistd::geteuid().is_root() {
        // The test switches a child to another uid, which needs root; the
        // project's tests run as root (scripts/test.sh under CI).
        reef_ioctl::fake::skip(
            "only_the_owner_or_root_may_preempt_or_unload",
            "needs root to run a child as another user",
        );
        return;
    }
    let d = Daemon::start("socket_group = \"nogroup\"");
    let mut root = d.client();
    root.load_model("vgg", None).unwrap();
    let s = root.register(Priority::Be, Some("root's")).unwrap();
    let stream = s.stream.to_string();

    let out = reefctl_as_nobody(&d, &["preempt", "--stream", &stream]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("permission_denied") && err.contains("only its owner or root"),
        "{err}"
    );

    let out = reefctl_as_nobody(&d, &["models", "unload", "vgg"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("permission_denied") && err.contains("only that user or root"),
        "{err}"
    );
    assert_eq!(root.models().unwrap().len(), 1, "vgg must still be loaded");

    let out = reefctl_as_nobody(&d, &["policy", "seq"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("permission_denied"));

    // nobody may use the daemon (via the socket group) and sees its own uid.
    let out = reefctl_as_nobody(&d, &["--json", "streams"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let streams: Vec<reefd::protocol::StreamInfo> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(streams[0].owner_uid, 0);

    // Root passes the ownership check for every stream: whatever the engine
    // answers, it is not a permission error.
    match root.preempt(PreemptTarget::Stream(s.stream)) {
        Ok((streams, _)) => assert_eq!(streams, vec![s.stream]),
        Err(e) => assert_ne!(e.code(), Some(ErrorCode::PermissionDenied), "{e}"),
    }
    root.unload_model("vgg").unwrap();
    assert!(root.models().unwrap().is_empty());
}

#[test]
fn a_peer_outside_the_socket_group_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        reef_ioctl::fake::skip(
            "a_peer_outside_the_socket_group_is_refused",
            "needs root to run a child as another user",
        );
        return;
    }
    // Mode 0666 lets anyone open the socket file; the peer-credential check
    // still refuses a uid that is neither root, the daemon's, nor in the group.
    let d = Daemon::start("socket_mode = \"0666\"");
    let out = reefctl_as_nobody(&d, &["status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("permission_denied") && err.contains("uid 65534"),
        "{err}"
    );
}

#[test]
fn sigterm_answers_every_request_removes_the_socket_and_exits_zero() {
    // A short grace period so that some work is still queued at the end.
    let mut d = Daemon::start("shutdown_grace_ms = 30");
    let mut c = d.client();
    c.load_model("resnet152", None).unwrap();
    let s = c.register(Priority::Be, None).unwrap();
    // 20 x 13 ms of work queued asynchronously, plus one blocking request
    // on a second connection.
    let tasks: Vec<u64> = (0..20)
        .map(|_| c.infer_async(s.stream, "resnet152").unwrap())
        .collect();
    let mut c2 = d.client();
    let s2 = c2.register(Priority::Rt, None).unwrap();
    let blocking_id = c2
        .send(RequestBody::Infer {
            stream: s2.stream,
            model: "resnet152".into(),
            wait: true,
            qos_ms: None,
            inputs: None,
            outputs: Vec::new(),
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let status = d.signal_and_wait(Signal::SIGTERM);
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        d.log()
    );
    assert!(!d.socket.exists(), "socket file left behind");
    assert!(!d.pid_file.exists(), "PID file left behind");

    // Every accepted async request got an event: done or shutting_down.
    let mut done = 0;
    let mut failed = 0;
    let mut seen = Vec::new();
    for _ in 0..tasks.len() {
        match c.next_event(Some(Duration::from_secs(5))) {
            Ok(Event::TaskDone(r)) => {
                done += 1;
                seen.push(r.task)
            }
            Ok(Event::TaskFailed { task, code, .. }) => {
                assert_eq!(code, ErrorCode::ShuttingDown);
                failed += 1;
                seen.push(task)
            }
            Err(e) => panic!("missing answer after {} events: {e}", seen.len()),
        }
    }
    seen.sort();
    assert_eq!(seen, tasks);
    assert!(
        failed > 0,
        "the grace period should have cut some work short"
    );
    assert!(done + failed == tasks.len());
    // The blocking request was answered too.
    match c2.wait_reply(blocking_id) {
        Ok(_) => {}
        Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::ShuttingDown),
        Err(e) => panic!("blocking request not answered: {e}"),
    }
    // Then the connection closes.
    assert!(matches!(
        c.read_message(Some(Duration::from_secs(5))),
        Err(ClientError::Closed)
    ));
    assert!(d.log().contains("SIGTERM received"));
}

#[test]
fn requests_after_shutdown_begins_are_refused_explicitly() {
    let mut d = Daemon::start("shutdown_grace_ms = 2000");
    let mut c = d.client();
    c.load_model("resnet152", None).unwrap();
    let s = c.register(Priority::Be, None).unwrap();
    let first = c.infer_async(s.stream, "resnet152").unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), Signal::SIGINT).unwrap();
    // The daemon is draining: a new inference is refused, not dropped.
    std::thread::sleep(Duration::from_millis(5));
    let id = c
        .send(RequestBody::Infer {
            stream: s.stream,
            model: "resnet152".into(),
            wait: false,
            qos_ms: None,
            inputs: None,
            outputs: Vec::new(),
        })
        .unwrap();
    let mut refused = false;
    let mut finished = false;
    for _ in 0..2 {
        match c.read_message(Some(Duration::from_secs(5))).unwrap() {
            ServerMessage::Error {
                id: Some(i), code, ..
            } if i == id => {
                assert_eq!(code, ErrorCode::ShuttingDown);
                refused = true;
            }
            ServerMessage::Event {
                event: Event::TaskDone(r),
            } => {
                assert_eq!(r.task, first);
                finished = true;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(refused && finished);
    // The SIGINT-initiated shutdown completes on its own with exit code 0.
    let mut child = d.child.take().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || child
            .try_wait()
            .unwrap()
            .is_some()),
        "reefd did not exit after SIGINT"
    );
    assert!(child.wait().unwrap().success());
    assert!(!d.socket.exists());
}

#[test]
fn metrics_endpoint_serves_prometheus_text() {
    use std::io::{Read, Write};
    // A free loopback port for the metrics listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Daemon::start_with(
        "",
        &format!("[metrics]\nenabled = true\nlisten = \"127.0.0.1:{port}\"\n"),
    );
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    let s = c.register(Priority::Rt, None).unwrap();
    c.infer(s.stream, "vgg").unwrap();
    let get = |path: &str| {
        let mut t = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(t, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        t.read_to_string(&mut body).unwrap();
        body
    };
    let text = get("/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.contains("reef_tasks_completed_total 1"), "{text}");
    assert!(text.contains("reef_rt_latency_seconds_count 1"), "{text}");
    assert!(text.contains("reef_kernels_launched_total 71"), "{text}");
    assert!(
        text.contains(&format!(
            "reef_queue_depth{{stream=\"{}\",priority=\"rt\",queue=\"host\"}} 0",
            s.stream
        )),
        "{text}"
    );
    assert!(get("/other").starts_with("HTTP/1.1 404"));
}

#[test]
fn policy_switch_and_model_load_while_busy_take_effect_without_losing_work() {
    let d = Daemon::start("");
    let mut c = d.client();
    c.load_model("resnet152", None).unwrap();
    let be = c.register(Priority::Be, None).unwrap();
    let queued: Vec<u64> = (0..4)
        .map(|_| c.infer_async(be.stream, "resnet152").unwrap())
        .collect();
    // Loading a model rebuilds the scheduler once nothing is inside it.
    let mut c2 = d.client();
    c2.load_model("vgg", None).unwrap();
    assert_eq!(c2.set_policy("seq").unwrap(), "seq");
    let rt = c2.register(Priority::Rt, None).unwrap();
    let r = c2.infer(rt.stream, "vgg").unwrap();
    assert_eq!(r.outputs_verified, Some(true));
    assert_eq!(c2.status().unwrap().policy, "seq");
    let mut done = Vec::new();
    for _ in 0..queued.len() {
        match c.next_event(Some(Duration::from_secs(20))).unwrap() {
            Event::TaskDone(r) => {
                assert_eq!(r.outputs_verified, Some(true));
                done.push(r.task)
            }
            e => panic!("{e:?}"),
        }
    }
    assert_eq!(done, queued);
    let e = c2.set_policy("fastest").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::BadRequest));
}

#[test]
fn hello_reports_the_peer_credentials() {
    let d = Daemon::start("");
    let h = d.client().hello().unwrap();
    assert_eq!(h.peer_uid, nix::unistd::geteuid().as_raw());
    assert_eq!(h.peer_pid, Some(std::process::id() as i32));
    assert_eq!(h.protocol, reefd::protocol::PROTOCOL_VERSION);
}

/// Both ways of serving (daemon.poll: one thread polls the socket and runs
/// the device; or sleeping socket threads and a pacer that catches the
/// device up every tick) run RT and BE work to completion with verified
/// outputs and RT latency close to stand-alone.
#[test]
fn poll_and_pacer_modes_serve_rt_and_be_with_verified_outputs() {
    for mode in ["poll = true", "poll = false\npacer_tick_us = 50"] {
        let d = Daemon::start(mode);
        let mut be = d.client();
        be.load_model("vgg", None).unwrap();
        be.load_model("resnet152", None).unwrap();
        let bs = be.register(Priority::Be, Some("be")).unwrap();
        let tasks: Vec<u64> = (0..3)
            .map(|_| be.infer_async(bs.stream, "resnet152").unwrap())
            .collect();
        let mut rt = d.client();
        let rs = rt.register(Priority::Rt, Some("rt")).unwrap();
        for _ in 0..3 {
            let r = rt.infer(rs.stream, "vgg").unwrap();
            assert_eq!(r.outputs_verified, Some(true), "{mode}: {r:?}");
            let n = r.normalized_latency.expect("vgg has a stand-alone latency");
            assert!(n < 1.05, "{mode}: RT normalized latency {n}");
            assert!(r.control_path_us.is_some(), "{mode}: {r:?}");
        }
        let mut done = Vec::new();
        for _ in 0..3 {
            match be.next_event(Some(Duration::from_secs(20))).unwrap() {
                Event::TaskDone(r) => {
                    assert_eq!(r.outputs_verified, Some(true), "{mode}: {r:?}");
                    done.push(r.task);
                }
                e => panic!("{mode}: {e:?}"),
            }
        }
        assert_eq!(done, tasks, "{mode}");
    }
}

/// CPU time (user + system) the process has used, in seconds.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may contain spaces) start at
    // field 3; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// Poll mode polls only while the device has work: once the last inference
/// is done, the daemon sleeps (a polling thread would use ~1 s of CPU per
/// second).
#[test]
fn an_idle_daemon_in_poll_mode_does_not_spin() {
    let d = Daemon::start("poll = true");
    let mut c = d.client();
    c.load_model("vgg", None).unwrap();
    let s = c.register(Priority::Rt, None).unwrap();
    c.infer(s.stream, "vgg").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let before = cpu_seconds(d.pid());
    std::thread::sleep(Duration::from_millis(1000));
    let used = cpu_seconds(d.pid()) - before;
    assert!(used < 0.3, "an idle daemon used {used:.2} s of CPU in 1 s");
}
