//! The daemon's CUDA engine (reefd/src/engine/cuda.rs) driven in-process
//! through the `Engine` trait, as the runtime drives it, on the simulated
//! libcuda (reef-libcuda-sim, built as a dev-dependency) or, with
//! `REEF_TEST_CUDA=system`, on the system's libcuda.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reefd::backend::cuda_launch::StreamClass;
use reefd::engine::cuda::{class, CudaEngine};
use reefd::engine::{Engine, EngineError, EngineEvent, EngineModel};
use reefd::protocol::Priority;

fn model_dir() -> PathBuf {
    common::two_kernel_dir()
}

fn engine_model(name: &str) -> EngineModel {
    EngineModel {
        name: name.into(),
        model: Arc::new(reef_model::Model::load(&model_dir()).unwrap()),
        idempotence: None,
    }
}

/// The runtime's side: a clock and the events seen.
struct Driver {
    e: CudaEngine,
    epoch: Instant,
    events: Vec<EngineEvent>,
}

impl Driver {
    fn open() -> Driver {
        let e = CudaEngine::open(0, common::cuda_library(), 4, "reef")
            .unwrap_or_else(|e| panic!("{e}"));
        Driver {
            e,
            epoch: Instant::now(),
            events: Vec::new(),
        }
    }
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn advance(&mut self) {
        let now = self.now();
        self.e.advance(now, &mut self.events);
    }
    /// Advances until `f` holds (or 10 s pass).
    fn until(&mut self, mut f: impl FnMut(&Driver) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f(self) {
            assert!(
                Instant::now() < deadline,
                "timed out; events {:?}",
                self.events
            );
            self.advance();
            std::thread::sleep(Duration::from_micros(10));
        }
    }
    fn submit(&mut self, task: u64, stream: u64) {
        let now = self.now();
        self.e
            .submit(now, task, stream, "two-kernel", &mut self.events)
            .unwrap();
    }
    fn done(&self) -> HashMap<u64, Option<bool>> {
        self.events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::TaskDone { task, verified, .. } => Some((*task, *verified)),
                _ => None,
            })
            .collect()
    }
    fn count(&self, f: impl Fn(&EngineEvent) -> bool) -> usize {
        self.events.iter().filter(|e| f(e)).count()
    }
}

#[test]
fn priority_levels_map_to_rt_and_be_contexts() {
    assert_eq!(class(Priority::Rt), StreamClass::RealTime);
    assert_eq!(class(Priority::Be), StreamClass::BestEffort);
    for n in 1..=9 {
        assert_eq!(
            class(Priority::level(n).unwrap()),
            StreamClass::BestEffort,
            "level {n}"
        );
    }
}

#[test]
fn references_are_computed_by_polling_and_policies_are_checked() {
    let _s = common::cuda_serial();
    let mut d = Driver::open();
    let info = d.e.info();
    assert_eq!(info.policy, "reef-nodkp", "reef is served without padding");
    assert_eq!(info.preemption_levels, vec![1, 2]);
    assert!(
        d.e.preemption_notes()
            .iter()
            .any(|n| n.contains("no kill (level 3)")),
        "{:?}",
        d.e.preemption_notes()
    );
    let e = d.e.set_policy(0, "fikit").unwrap_err();
    assert!(matches!(e, EngineError::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("--device sim:gv100"), "{e}");
    assert!(CudaEngine::open(0, common::cuda_library(), 4, "seq").is_err());

    // add_model returns at once: the references are requests on the device.
    let t0 = Instant::now();
    d.e.add_model(engine_model("two-kernel")).unwrap();
    assert!(
        !d.e.references_done(),
        "references computed inside add_model"
    );
    assert!(
        d.e.next_event_time().is_some(),
        "the engine has work to poll"
    );
    // A request submitted before the references are known is held, then
    // verified.
    d.e.open_stream(1, Priority::Be).unwrap();
    d.submit(100, 1);
    d.until(|d| d.done().contains_key(&100));
    assert_eq!(d.done()[&100], Some(true));
    d.until(|d| d.e.references_done());
    eprintln!("references and one request in {:?}", t0.elapsed());
    // Idle: the reference stream is closed, nothing to poll.
    d.advance();
    assert_eq!(d.e.next_event_time(), None);
    // A schedule that disagrees with model.toml is refused.
    let mut m = engine_model("other");
    Arc::make_mut(&mut m.model).kernels.pop();
    let e = d.e.add_model(m).unwrap_err();
    assert!(e.to_string().contains("differ from the CUDA model"), "{e}");
}

#[test]
fn rt_arrival_preempts_be_streams_of_every_be_level_and_restores_them() {
    let _s = common::cuda_serial();
    let mut d = Driver::open();
    d.e.add_model(engine_model("two-kernel")).unwrap();
    d.e.open_stream(1, Priority::Rt).unwrap();
    d.e.open_stream(2, Priority::Be).unwrap();
    d.e.open_stream(3, Priority::level(4).unwrap()).unwrap();
    d.until(|d| d.e.references_done());
    let mut task = 1000;
    let mut be = Vec::new();
    let mut rt = Vec::new();
    let mut pending_at_rt = 0;
    for round in 0..30u64 {
        // Two BE requests per BE stream, then an RT request once the BE
        // kernels are on the device.
        for s in [2, 3] {
            for _ in 0..2 {
                task += 1;
                d.submit(task, s);
                be.push(task);
            }
        }
        let t = Instant::now();
        let wait = Duration::from_micros([0, 20, 60][round as usize % 3]);
        while t.elapsed() < wait {
            d.advance();
        }
        // BE work still queued or running when the RT request arrives (a
        // descheduled test thread may find it all done).
        let done = d.done();
        if be.iter().any(|t| !done.contains_key(t)) {
            pending_at_rt += 1;
        }
        task += 1;
        d.submit(task, 1);
        rt.push(task);
        let rt_task = task;
        d.until(|d| d.done().contains_key(&rt_task));
    }
    d.until(|d| be.iter().all(|t| d.done().contains_key(t)));
    let done = d.done();
    for t in rt.iter().chain(&be) {
        assert_eq!(done[t], Some(true), "task {t}");
    }
    let preemptions = d.count(|e| matches!(e, EngineEvent::Preempted { level: 2, .. }));
    let evicting =
        d.count(|e| matches!(e, EngineEvent::Preempted { level: 2, kernels } if *kernels > 0));
    let restored = d.count(|e| matches!(e, EngineEvent::Restored { .. }));
    // Every RT arrival that found BE work stopped it.
    assert_eq!(
        preemptions, pending_at_rt,
        "RT arrivals that stopped BE work"
    );
    // Timing-dependent counts hold for the simulated kernels' 40 and 30 us
    // (kernels.ptx); on a GPU these kernels take microseconds.
    if common::cuda_library().is_some() {
        assert!(
            pending_at_rt >= 20,
            "only {pending_at_rt} of 30 RT arrivals found BE work"
        );
        assert!(evicting > 0, "no preemption took a kernel back");
        assert!(restored > 0, "no preempted task was restored");
    }
    let launched: u64 = d
        .events
        .iter()
        .map(|e| match e {
            EngineEvent::KernelsLaunched { count } => *count,
            _ => 0,
        })
        .sum();
    // 150 requests of 2 kernels (the references' 16 included, evicted
    // kernels launched again on restore).
    assert!(launched >= 2 * (rt.len() + be.len()) as u64, "{launched}");
    let first: Vec<u64> = d
        .events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::FirstKernelQueued { task, .. } => Some(*task),
            _ => None,
        })
        .collect();
    for t in rt.iter().chain(&be) {
        assert_eq!(
            first.iter().filter(|f| *f == t).count(),
            1,
            "first kernel of task {t} reported once"
        );
    }
    assert_eq!(d.count(|e| matches!(e, EngineEvent::DeviceError { .. })), 0);
    eprintln!(
        "{preemptions} preemptions ({evicting} took kernels back), {restored} restores, \
         {launched} kernels launched"
    );
}

#[test]
fn a_commanded_preemption_holds_one_stream_until_resumed() {
    let _s = common::cuda_serial();
    let mut d = Driver::open();
    d.e.add_model(engine_model("two-kernel")).unwrap();
    d.e.open_stream(1, Priority::Rt).unwrap();
    d.e.open_stream(2, Priority::Be).unwrap();
    d.e.open_stream(3, Priority::Be).unwrap();
    d.until(|d| d.e.references_done());
    // Stream 2: tasks 1..=4; stream 3: task 5; RT: task 6.
    for t in 1..=4 {
        d.submit(t, 2);
    }
    d.submit(5, 3);
    // Let stream 2's first kernels reach the device, then stop it.
    d.until(|d| d.e.queue_depths(2).1 > 0);
    let now = d.now();
    let before = d.count(|e| matches!(e, EngineEvent::Preempted { .. }));
    let taken_back = d.e.preempt(now, 2, &mut d.events).unwrap();
    assert_eq!(
        d.count(|e| matches!(e, EngineEvent::Preempted { .. })),
        before + 1,
        "the preemption stopped stream 2's work"
    );
    let stream2_done = |d: &Driver| (1..=4).filter(|t| d.done().contains_key(t)).count();
    // At most the request running at the preemption (its kernels past the
    // flag check) may still finish.
    let at_preempt = stream2_done(&d) + 1;
    assert!(
        at_preempt < 4 || common::cuda_library().is_none(),
        "too slow: stream 2 finished before it was preempted"
    );
    // Stream 3 and an RT request run; stream 2 stays stopped, even after
    // the RT request (RT idle does not restore a commanded stream).
    d.submit(6, 1);
    d.until(|d| d.done().contains_key(&5) && d.done().contains_key(&6));
    for _ in 0..200 {
        d.advance();
        std::thread::sleep(Duration::from_micros(10));
    }
    assert!(
        stream2_done(&d) <= at_preempt,
        "stream 2 ran while preempted: {:?}",
        d.done()
    );
    // RT streams cannot be preempted; unknown streams are named.
    let now = d.now();
    assert!(d.e.preempt(now, 1, &mut d.events).is_err());
    assert!(matches!(
        d.e.preempt(now, 99, &mut d.events),
        Err(EngineError::NotFound(_))
    ));
    // Resume (twice: the second is a no-op, as `resume --all` needs).
    d.e.resume(now, 2, &mut d.events).unwrap();
    d.e.resume(now, 2, &mut d.events).unwrap();
    d.until(|d| (1..=4).all(|t| d.done().contains_key(&t)));
    let done = d.done();
    assert!((1..=6).all(|t| done[&t] == Some(true)), "{done:?}");
    // A task with kernels taken back is reported restored on resume.
    if taken_back > 0 {
        assert!(d.count(|e| matches!(e, EngineEvent::Restored { .. })) >= 1);
    }
    // Closing a stream with queued work drops it and names the tasks.
    for t in 10..13 {
        d.submit(t, 3);
    }
    let now = d.now();
    let mut dropped = d.e.close_stream(now, 3, &mut d.events);
    dropped.sort_unstable();
    assert!(!dropped.is_empty() && dropped.iter().all(|t| (10..13).contains(t)));
}

#[test]
fn driver_errors_are_reported_and_fail_only_their_task() {
    let _s = common::cuda_serial();
    let mut d = Driver::open();
    d.e.add_model(engine_model("two-kernel")).unwrap();
    let t = common::refused_model("wide");
    d.e.add_model(EngineModel {
        name: "wide".into(),
        model: Arc::new(reef_model::Model::load(&t.path().join("wide")).unwrap()),
        idempotence: None,
    })
    .unwrap();
    d.e.open_stream(1, Priority::Be).unwrap();
    d.until(|d| d.e.references_done());
    // Every reference launch of `wide` was refused by the driver: reported.
    let errors = |d: &Driver| -> Vec<(String, String)> {
        d.events
            .iter()
            .filter_map(|e| match e {
                EngineEvent::DeviceError { action, error } => Some((action.clone(), error.clone())),
                _ => None,
            })
            .collect()
    };
    let refs = errors(&d);
    assert_eq!(refs.len(), 8, "{refs:?}");
    for (action, error) in &refs {
        assert!(
            action.starts_with("cuda:0: reference output of wide"),
            "{action}"
        );
        assert!(
            error.starts_with("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"),
            "{error}"
        );
    }
    // A request of `wide` fails with the driver's message; one of
    // `two-kernel` queued behind it on the same stream still completes.
    let now = d.now();
    d.e.submit(now, 1, 1, "wide", &mut d.events).unwrap();
    d.e.submit(now, 2, 1, "two-kernel", &mut d.events).unwrap();
    d.until(|d| d.done().contains_key(&2));
    assert_eq!(d.done()[&2], Some(true));
    let failed: Vec<&String> = d
        .events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::TaskFailed { task: 1, reason } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].contains("CUDA_ERROR_INVALID_VALUE"),
        "{}",
        failed[0]
    );
    assert!(failed[0].contains("model.toml"), "{}", failed[0]);
    let all = errors(&d);
    assert_eq!(all.len(), 9);
    assert_eq!(all[8].0, "cuda:0: task 1 (wide on stream 1)");
}
