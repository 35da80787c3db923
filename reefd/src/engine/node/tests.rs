use super::*;
use std::sync::Arc;

fn node_settings() -> SchedSettings {
    SchedSettings {
        preset: "mi50".into(),
        policy: "reef".into(),
        dq_capacity: 4,
        be_streams_per_model: 1,
        seed: 0,
        fikit: Default::default(),
        fikit_profile_dir: None,
        host_gap_ns: None,
    }
}

fn node() -> NodeEngine {
    NodeEngine::new(&["mi50".to_string(), "mi50".to_string()], node_settings()).unwrap()
}

fn model(name: &str) -> EngineModel {
    let m = reef_model::load_named(&reef_model::default_models_dir(), "vgg").unwrap();
    EngineModel {
        name: name.into(),
        model: Arc::new(m),
        idempotence: None,
        package: None,
    }
}

#[test]
fn a_model_that_fits_nowhere_is_refused_with_the_figures() {
    let mut n = node();
    let need = model_needs(&model("a").model).memory;
    let total = n.placer.device(0).unwrap().memory_total;
    // Leave each device less free memory than the model needs.
    for d in 0..2 {
        let filler = TaskNeeds {
            memory: total - need + 1,
            threads_per_block: 64,
            blocks: 1,
        };
        assert!(n
            .placer
            .task_begin_on(JobId(9), TaskId(d as u64 + 1), filler, d)
            .unwrap());
    }
    let e = n.add_model_on(model("a"), None).unwrap_err().to_string();
    assert!(e.contains("more than any device has"), "{e}");
    assert!(e.contains(&format!("({need} B")), "{e}");
    assert!(e.contains("device 1:"), "{e}");
    let e = n.add_model_on(model("a"), Some(1)).unwrap_err().to_string();
    assert!(e.contains("the pinned device"), "{e}");
    assert_eq!(n.counters.models_refused, 2);
    assert!(n.model_device("a").is_none());
    // Memory freed on device 1: the model goes there, and only there.
    n.placer.task_end(TaskId(2)).unwrap();
    assert_eq!(n.add_model_on(model("a"), None).unwrap(), 1);
    assert_eq!(n.placer.device(1).unwrap().memory_used, need);
    // Unloading releases exactly what loading reserved.
    n.remove_model("a");
    assert_eq!(n.placer.device(1).unwrap().memory_used, 0);
}

/// A simulated device whose "driver" reports `used` bytes in use (as a
/// CUDA engine's `cuMemGetInfo` does) and a model footprint of its own.
struct Reported {
    inner: SchedEngine,
    used: std::sync::Arc<std::sync::atomic::AtomicU64>,
    total: u64,
}

impl Engine for Reported {
    fn info(&self) -> EngineInfo {
        self.inner.info()
    }
    fn set_policy(&mut self, now: Nanos, p: &str) -> Result<(), EngineError> {
        self.inner.set_policy(now, p)
    }
    fn add_model(&mut self, m: EngineModel) -> Result<(), EngineError> {
        self.inner.add_model(m)
    }
    fn remove_model(&mut self, name: &str) {
        self.inner.remove_model(name)
    }
    fn open_stream(&mut self, s: u64, p: Priority) -> Result<(), EngineError> {
        self.inner.open_stream(s, p)
    }
    fn close_stream(&mut self, now: Nanos, s: u64, out: &mut Vec<EngineEvent>) -> Vec<u64> {
        self.inner.close_stream(now, s, out)
    }
    fn submit(
        &mut self,
        now: Nanos,
        t: u64,
        s: u64,
        m: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        self.inner.submit(now, t, s, m, out)
    }
    fn preempt(
        &mut self,
        now: Nanos,
        s: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        self.inner.preempt(now, s, out)
    }
    fn resume(
        &mut self,
        now: Nanos,
        s: u64,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        self.inner.resume(now, s, out)
    }
    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        self.inner.advance(now, out)
    }
    fn next_event_time(&self) -> Option<Nanos> {
        self.inner.next_event_time()
    }
    fn queue_depths(&self, s: u64) -> (usize, usize) {
        self.inner.queue_depths(s)
    }
    fn task_progress(&self, t: u64) -> Option<TaskProgress> {
        self.inner.task_progress(t)
    }
    fn model_memory(&self, _m: &EngineModel) -> Option<Result<u64, EngineError>> {
        Some(Ok(MIB))
    }
    fn device_memory(&self) -> Option<(u64, u64)> {
        let used = self.used.load(std::sync::atomic::Ordering::SeqCst);
        Some((self.total - used, self.total))
    }
}

/// On devices whose driver reports memory (CUDA GPUs), a model declares
/// the engine's footprint, and memory the driver reports in use beyond
/// placement's reservations (another process) is not placed on;
/// status shows the driver's figures.
#[test]
fn memory_a_driver_reports_in_use_is_passed_over() {
    let total = 4 * MIB;
    let used: Vec<_> = (0..2)
        .map(|_| std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0)))
        .collect();
    let devs: Vec<Box<dyn Engine>> = used
        .iter()
        .map(|u| {
            Box::new(Reported {
                inner: SchedEngine::new(node_settings()).unwrap(),
                used: u.clone(),
                total,
            }) as Box<dyn Engine>
        })
        .collect();
    let lims = vec![
        reef_sched::place::DeviceLimits {
            memory: total,
            ..limits(&DeviceSpec::preset("gv100").unwrap())
        };
        2
    ];
    let mut n = NodeEngine::with_devices(
        "test".into(),
        vec!["cuda:0".into(), "cuda:1".into()],
        devs,
        lims,
        "the engine's footprint".into(),
    )
    .unwrap();
    // Another process holds 3.5 MiB of device 0: the idle device 0
    // (Alg. 3's tie-break) is passed over for a 1 MiB model.
    used[0].store(3 * MIB + MIB / 2, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(n.add_model_on(model("a"), None).unwrap(), 1);
    assert_eq!(
        n.placer.device(1).unwrap().memory_used,
        MIB,
        "the footprint"
    );
    let st = n.status();
    assert_eq!(
        (st[0].memory_used, st[0].memory_total),
        (3 * MIB + MIB / 2, total)
    );
    // A pin there is refused with the driver's free figure (0.5 MiB).
    let e = n.add_model_on(model("b"), Some(0)).unwrap_err().to_string();
    assert!(
        e.contains("1048576 B: the engine's footprint") && e.contains("device 0: 0.00 GiB free"),
        "{e}"
    );
    // The other process exits: device 0 is used again.
    used[0].store(0, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(n.add_model_on(model("b"), None).unwrap(), 0);
}

#[test]
fn models_spread_by_load_and_pins_are_honoured() {
    let mut n = node();
    assert_eq!(n.add_model_on(model("a"), None).unwrap(), 0);
    // Device 0 now carries a's warps: Alg. 3 picks the idle device.
    assert_eq!(n.add_model_on(model("b"), None).unwrap(), 1);
    assert_eq!(n.add_model_on(model("c"), Some(0)).unwrap(), 0);
    let st = n.status();
    assert_eq!(st[0].models, vec!["a".to_string(), "c".to_string()]);
    assert_eq!(st[1].models, vec!["b".to_string()]);
    assert!(n.add_model_on(model("c"), None).is_err());
}
