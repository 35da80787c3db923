//! reefd on a simulated node of four MI50s (issue 16 items 1, 2, 4 and 5;
//! CASE/MGB §III-C Algorithm 3 and §IV; engine/node.rs): models are placed
//! across devices by memory and load, a model can be pinned, RT and BE
//! clients are served by REEF inside the device holding their model with
//! outputs verified, and a client's task_begin/task_end place and release
//! work on the device the policy chose.

mod common;

use common::Daemon;
use reefd::client::ClientError;
use reefd::protocol::{ErrorCode, Priority, TaskResult};

const GIB: u64 = 1 << 30;

/// Device memory in use, per device, as `reefctl status` reports it.
fn memory_used(c: &mut reefd::client::Client) -> Vec<u64> {
    c.status()
        .unwrap()
        .devices
        .iter()
        .map(|x| x.memory_used)
        .collect()
}

#[test]
fn node_places_models_serves_clients_and_tasks() {
    let d = Daemon::start_on("sim:mi50x4", "", "");
    let mut admin = d.client();
    let st = admin.status().unwrap();
    assert_eq!(st.devices.len(), 4, "{st:?}");
    assert!(st.devices.iter().all(|x| x.memory_used == 0));

    // Four models by placement (Alg. 3: most available warps, memory-safe):
    // each lands on a device no other model holds.
    let mut on = Vec::new();
    for m in ["vgg", "resnet152", "inception", "densenet"] {
        let info = admin.load_model(m, None).unwrap();
        on.push(info.device.expect("a node answers the device"));
    }
    let mut distinct = on.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "models placed on {on:?}");
    // A device that does not exist: a one-line error naming the range.
    let bad = d.reefctl(&["models", "load", "bert", "--device-index", "9"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("devices 0..3"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // The fifth is pinned: it goes where asked, and its memory is counted.
    let before = admin.status().unwrap().devices[on[0]].memory_used;
    let bert = d.reefctl(&[
        "models",
        "load",
        "bert",
        "--device-index",
        &on[0].to_string(),
    ]);
    assert!(
        bert.status.success(),
        "{}",
        String::from_utf8_lossy(&bert.stderr)
    );
    assert!(
        String::from_utf8_lossy(&bert.stdout).contains(&format!("placed bert on device {}", on[0]))
    );
    let st = admin.status().unwrap();
    let dev0 = &st.devices[on[0]];
    assert!(dev0.models.contains(&"bert".to_string()), "{dev0:?}");
    // bert's buffers + 256 MiB workspace + 300 MiB context.
    assert!(dev0.memory_used - before > 556 << 20, "{dev0:?}");
    for x in &st.devices {
        assert!(x.memory_used <= x.memory_total, "{x:?}");
    }
    // DISB-style clients: one RT (vgg), two BE (bert shares vgg's device,
    // so REEF preempts BE work for RT there; resnet152 runs elsewhere).
    let mut be = Vec::new();
    for (i, m) in ["bert", "resnet152"].into_iter().enumerate() {
        let mut c = d.client();
        be.push(std::thread::spawn(move || -> Vec<TaskResult> {
            let s = c.register(Priority::Be, Some(&format!("be{i}"))).unwrap();
            (0..8).map(|_| c.infer(s.stream, m).unwrap()).collect()
        }));
    }
    let mut rtc = d.client();
    let s = rtc.register(Priority::Rt, Some("rt")).unwrap();
    let rt: Vec<TaskResult> = (0..10)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(3));
            rtc.infer(s.stream, "vgg").unwrap()
        })
        .collect();
    // The RT stream is bound to vgg's device; a model held elsewhere opens
    // it there too.
    let st = admin.status().unwrap();
    assert_eq!(st.devices[on[0]].rt_streams, 1, "{st:?}");
    let r = rtc.infer(s.stream, "densenet").unwrap();
    assert_eq!(r.outputs_verified, Some(true));
    let st = admin.status().unwrap();
    assert_eq!(st.devices[on[3]].rt_streams, 1, "{st:?}");
    let be: Vec<TaskResult> = be.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert_eq!(be.len(), 16);
    for r in rt.iter().chain(&be) {
        assert_eq!(r.outputs_verified, Some(true), "{r:?}");
    }

    // task_begin from a client: placed by Alg. 3 on the device with the
    // most available warps that has the memory; task_end releases it.
    let mut app = d.client();
    let before = memory_used(&mut admin);
    let (task, dev) = app.task_begin(4 * GIB, 256, 1024).unwrap();
    let dev = dev.expect("memory is free: placed at once");
    let st = admin.status().unwrap();
    assert_eq!(st.devices[dev].memory_used, before[dev] + 4 * GIB);
    assert_eq!(st.devices[dev].declared_tasks, 1);
    // Too large for any device: refused, with the figures.
    let e = app.task_begin(40 * GIB, 256, 1024).unwrap_err();
    match &e {
        ClientError::Server { code, message } => {
            assert_eq!(*code, ErrorCode::BadRequest);
            assert!(message.contains("more than any device"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    // Another connection cannot end it.
    assert!(admin.task_end(task).is_err());
    app.task_end(task).unwrap();
    let after = memory_used(&mut admin);
    assert_eq!(after, before);
    // A connection that closes releases its tasks.
    let (_, dev2) = app.task_begin(GIB, 128, 64).unwrap();
    assert!(dev2.is_some());
    drop(app);
    assert!(common::wait_until(
        std::time::Duration::from_secs(5),
        || { memory_used(&mut admin) == before }
    ));

    let stats = admin.stats().unwrap();
    let p = stats.placement.expect("a node reports placement");
    assert_eq!(p.models_placed, 5);
    assert_eq!(p.tasks_placed, 2);
    assert_eq!(p.tasks_refused, 1);
    assert_eq!(p.streams_bound, 4);
    assert_eq!(stats.corrupted_outputs, 0);
}

#[test]
fn one_device_daemon_refuses_task_begin_and_foreign_pins() {
    let d = Daemon::start("");
    let mut c = d.client();
    assert!(c.status().unwrap().devices.is_empty());
    let e = c.task_begin(GIB, 128, 64).unwrap_err();
    assert!(e.to_string().contains("sim:mi50x4"), "{e}");
    let e = c.load_model_on("vgg", None, Some(1)).unwrap_err();
    assert!(e.to_string().contains("one device"), "{e}");
    let m = c.load_model_on("vgg", None, Some(0)).unwrap();
    assert_eq!(m.device, None);
}

/// Device operations that only record which device each one ran on (the
/// placement is what is tested; the daemon's devices run inferences).
#[derive(Default)]
struct Recorder {
    ops: Vec<(String, u32)>,
    next: u64,
}

impl reefd::lazy::DeviceOps for Recorder {
    type Ptr = u64;
    fn malloc(&mut self, d: u32, _bytes: u64) -> Result<u64, String> {
        self.ops.push(("malloc".into(), d));
        self.next += 1;
        Ok(self.next)
    }
    fn memcpy_h2d(&mut self, d: u32, _dst: u64, _data: &[u8]) -> Result<(), String> {
        self.ops.push(("h2d".into(), d));
        Ok(())
    }
    fn memset(&mut self, d: u32, _dst: u64, _v: u8, _n: u64) -> Result<(), String> {
        self.ops.push(("memset".into(), d));
        Ok(())
    }
    fn memcpy_d2h(&mut self, d: u32, _src: u64, bytes: u64) -> Result<Vec<u8>, String> {
        self.ops.push(("d2h".into(), d));
        Ok(vec![0; bytes as usize])
    }
    fn free(&mut self, d: u32, _ptr: u64) -> Result<(), String> {
        self.ops.push(("free".into(), d));
        Ok(())
    }
    fn launch(&mut self, d: u32, k: &str, _b: u64, _t: u32, _a: &[u64]) -> Result<(), String> {
        self.ops.push((k.into(), d));
        Ok(())
    }
}

#[test]
fn lazy_runtime_places_its_task_through_the_daemon() {
    let d = Daemon::start_on("sim:mi50x4", "", "");
    let mut admin = d.client();
    // vgg on device 0 (pinned) carries warps there: Alg. 3 places the task
    // on a device with more available warps.
    admin.load_model_on("vgg", None, Some(0)).unwrap();
    let base = memory_used(&mut admin);
    let mut rt = reefd::lazy::LazyRuntime::new(Recorder::default(), d.client());
    let a = rt.malloc(2 * GIB).unwrap();
    let b = rt.malloc(GIB).unwrap();
    rt.memcpy_h2d(a, &[1, 2, 3]).unwrap();
    rt.memset(b, 0).unwrap();
    assert_eq!(rt.device(), None, "nothing placed before the first launch");
    let dev = rt.launch("vecadd", 1024, 256, &[a, b]).unwrap();
    assert_ne!(dev, 0, "Alg. 3 avoids the loaded device");
    let st = admin.status().unwrap();
    let x = &st.devices[dev as usize];
    assert_eq!(x.declared_tasks, 1);
    // Both objects plus the 8 MiB device heap (§III-A-3).
    assert_eq!(x.memory_used, base[dev as usize] + 3 * GIB + (8 << 20));
    // Every replayed operation ran on the chosen device.
    assert!(
        rt.device_ops().ops.iter().all(|(_, od)| *od == dev),
        "{:?}",
        rt.device_ops().ops
    );
    rt.free(a).unwrap();
    rt.free(b).unwrap();
    let after = memory_used(&mut admin);
    assert_eq!(
        after, base,
        "task_end released exactly what task_begin reserved"
    );
}

#[test]
fn a_task_that_fits_nowhere_now_waits_and_is_placed_on_a_release() {
    let d = Daemon::start_on("sim:mi50x4", "", "");
    let mut app = d.client();
    let mut admin = d.client();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (t, dev) = app.task_begin(12 * GIB, 256, 64).unwrap();
        tasks.push((t, dev.expect("each device has 16 GiB free")));
    }
    let mut devs: Vec<usize> = tasks.iter().map(|t| t.1).collect();
    devs.sort();
    assert_eq!(devs, vec![0, 1, 2, 3]);
    let (waiting, dev) = app.task_begin(12 * GIB, 256, 64).unwrap();
    assert_eq!(dev, None, "4 GiB free per device: the fifth waits");
    assert_eq!(app.task_poll(waiting).unwrap(), None);
    app.task_end(tasks[2].0).unwrap();
    assert_eq!(app.task_poll(waiting).unwrap(), Some(tasks[2].1));
    let p = admin.stats().unwrap().placement.unwrap();
    assert_eq!((p.tasks_placed, p.tasks_waited), (5, 1));
    for x in admin.status().unwrap().devices {
        assert!(x.memory_used <= x.memory_total);
    }
}

/// Issue 16 "a fifth refused or placed by memory with a clear message": with
/// every device's memory taken by declared tasks, a model load is refused
/// by memory (one line naming what it needs and what each device has free,
/// non-zero exit, nothing loaded); once a task ends, the same load is
/// placed on the device that task freed.
#[test]
fn a_model_that_fits_on_no_device_is_refused_then_placed_where_memory_was_released() {
    const MIB: u64 = 1 << 20;
    let d = Daemon::start_on("sim:mi50x4", "", "");
    let mut admin = d.client();
    let mut app = d.client();
    // Fill each device to 400 MiB short of its capacity: bert needs its
    // buffers + 256 MiB workspace + 300 MiB context, more than that.
    let mut held = Vec::new();
    for _ in 0..4 {
        let st = admin.status().unwrap();
        let free = st
            .devices
            .iter()
            .map(|x| x.memory_total - x.memory_used)
            .max()
            .unwrap();
        let (task, dev) = app.task_begin(free - 400 * MIB, 256, 64).unwrap();
        held.push((task, dev.expect("fits where the most memory is free")));
    }
    let mut devs: Vec<usize> = held.iter().map(|&(_, d)| d).collect();
    devs.sort();
    devs.dedup();
    assert_eq!(devs.len(), 4, "one filler per device: {held:?}");

    let out = d.reefctl(&["models", "load", "bert"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("model bert needs"), "{err}");
    assert!(err.contains("more than any device has"), "{err}");
    for i in 0..4 {
        assert!(err.contains(&format!("device {i}: 0.39 GiB free")), "{err}");
    }
    let st = admin.status().unwrap();
    assert!(st.devices.iter().all(|x| x.models.is_empty()), "{st:?}");

    // Release the filler on one device: the same load is placed there.
    let (task, freed) = held[2];
    app.task_end(task).unwrap();
    let out = d.reefctl(&["models", "load", "bert"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("placed bert on device {freed}")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let st = admin.status().unwrap();
    assert!(st.devices[freed].models.contains(&"bert".to_string()));
    for x in &st.devices {
        assert!(x.memory_used <= x.memory_total, "{x:?}");
    }
    let p = admin.stats().unwrap().placement.expect("placement stats");
    assert_eq!(p.models_placed, 1);
}
