use super::*;
use crate::PreparedModel;
use reef_sched::{Class, ClientSpec, ModelId, ModelInfo};

/// vgg (RT client 0) and resnet152 (BE client 1) on the MI50 under
/// `policy`; a request's id is its client in the high bits.
fn driver(policy: &str, host_gap_ns: Option<Time>) -> (Driver, Vec<PreparedModel>) {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let sim = Sim::new(spec.clone(), SimConfig::default());
    let (d, models) = driver_on(policy, host_gap_ns, sim).unwrap();
    (d, models)
}

/// The same on device `dev`.
fn driver_on<D: Device>(
    policy: &str,
    host_gap_ns: Option<Time>,
    dev: D,
) -> anyhow::Result<(Driver<D>, Vec<PreparedModel>)> {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let dir = reef_model::default_models_dir();
    let models: Vec<PreparedModel> = ["vgg", "resnet152"]
        .iter()
        .map(|n| PreparedModel::new(reef_model::load_named(&dir, n).unwrap(), &spec).unwrap())
        .collect();
    let infos = models
        .iter()
        .map(|m| ModelInfo {
            name: m.name.clone(),
            kernels: m.shapes.len() as u32,
            idempotence: None,
            successors_clear: None,
            alone_ns: None,
        })
        .collect();
    let clients = vec![
        ClientSpec {
            name: "rt".into(),
            model: ModelId(0),
            class: Class::RealTime,
        },
        ClientSpec {
            name: "be".into(),
            model: ModelId(1),
            class: Class::BestEffort,
        },
    ];
    let d = Driver::with_device(
        Setup {
            spec: &spec,
            models: &models,
            infos,
            clients,
            policy,
            dq_capacity: 4,
            priorities: Vec::new(),
            seed: 1,
            host_gap_ns,
            fikit: Default::default(),
            fikit_profiles: Vec::new(),
            aker: Default::default(),
            aker_profiles: None,
        },
        dev,
    )?;
    Ok((d, models))
}

/// A device that does not place blocks: reef-sim behind the
/// interface, without padded launches or values (as a vendor GPU).
struct Opaque(Sim);
impl Device for Opaque {
    fn now(&self) -> Time {
        self.0.now()
    }
    fn create_stream(&mut self, p: i32, c: usize, own: bool) -> Result<reef_sim::StreamId, String> {
        Device::create_stream(&mut self.0, p, c, own)
    }
    fn launch(&mut self, s: reef_sim::StreamId, l: KernelLaunch) -> Result<(), String> {
        Device::launch(&mut self.0, s, l)
    }
    fn set_preempt_flag(&mut self, s: reef_sim::StreamId, on: bool) -> Result<(), String> {
        Device::set_preempt_flag(&mut self.0, s, on)
    }
    fn kill_stream(&mut self, s: reef_sim::StreamId) -> Result<(), String> {
        Device::kill_stream(&mut self.0, s)
    }
    fn clear_queue(&mut self, s: reef_sim::StreamId) -> Result<(), String> {
        Device::clear_queue(&mut self.0, s)
    }
    fn queue_len(&self, s: reef_sim::StreamId) -> usize {
        self.0.queue_len(s)
    }
    fn next_event_time(&self) -> Option<Time> {
        self.0.next_event_time()
    }
    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>) {
        self.0.advance_into(t, out)
    }
    fn reset(&mut self) {
        Device::reset(&mut self.0)
    }
}

#[test]
fn a_device_that_cannot_place_blocks_refuses_padding_and_runs_preemption() {
    let opaque = || {
        Opaque(Sim::new(
            DeviceSpec::preset("mi50").unwrap(),
            SimConfig::default(),
        ))
    };
    for p in ["reef", "reef-dkp-mv", "aker"] {
        let e = driver_on(p, None, opaque()).err().expect(p).to_string();
        assert!(e.contains("cannot do") && e.contains("reef-nodkp"), "{e}");
    }
    let (mut d, _) = driver_on("reef-nodkp", None, opaque()).unwrap();
    let work = Book { known: true };
    let mut out = Vec::new();
    let be = RequestId(1 << 32 | 1);
    d.arrive(0, be, ClientId(1), 1, None);
    d.apply(&work, &mut out);
    d.step(2_000_000, &work, &mut out);
    d.arrive(d.dev.now(), RequestId(1), ClientId(0), 0, None);
    drain(&mut d, &work, &mut out);
    assert!(failures(&out).is_empty(), "{out:?}");
    for (req, client) in [(RequestId(1), ClientId(0)), (be, ClientId(1))] {
        assert!(out.contains(&Outcome::Done { req, client }), "{req:?}");
    }
    assert_eq!(d.sched.preemptions().len(), 1);
}

/// A device that refuses the launch of `refuse` (task, kernel) and
/// records how many kernels were on the stream when `watch` (task,
/// kernel) was launched.
struct Refusing {
    dev: Opaque,
    refuse: (u64, u32),
    watch: (u64, u32),
    seen: Option<usize>,
}
impl Device for Refusing {
    fn now(&self) -> Time {
        self.dev.now()
    }
    fn create_stream(&mut self, p: i32, c: usize, own: bool) -> Result<reef_sim::StreamId, String> {
        self.dev.create_stream(p, c, own)
    }
    fn launch(&mut self, s: reef_sim::StreamId, l: KernelLaunch) -> Result<(), String> {
        let at = (l.tags.task, l.tags.kernel);
        if at == self.refuse {
            return Err("refused by the test device".into());
        }
        if at == self.watch {
            self.seen = Some(self.dev.queue_len(s));
        }
        self.dev.launch(s, l)
    }
    fn set_preempt_flag(&mut self, s: reef_sim::StreamId, on: bool) -> Result<(), String> {
        self.dev.set_preempt_flag(s, on)
    }
    fn kill_stream(&mut self, s: reef_sim::StreamId) -> Result<(), String> {
        self.dev.kill_stream(s)
    }
    fn clear_queue(&mut self, s: reef_sim::StreamId) -> Result<(), String> {
        self.dev.clear_queue(s)
    }
    fn queue_len(&self, s: reef_sim::StreamId) -> usize {
        self.dev.queue_len(s)
    }
    fn next_event_time(&self) -> Option<Time> {
        self.dev.next_event_time()
    }
    fn advance_into(&mut self, t: Time, out: &mut Vec<DeviceEvent>) {
        self.dev.advance_into(t, out)
    }
    fn reset(&mut self) {
        self.dev.reset()
    }
}

/// Issue 25, D6: a request whose last launch is refused while its
/// earlier kernels are still on the device stream ends only once they
/// are done, so the stream's next request never runs beside them (a
/// GPU instance holds one request's buffers; told at once, the
/// scheduler launched the next request onto the still-busy stream).
#[test]
fn a_refused_last_launch_ends_its_request_after_its_stream_drains() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let n = reef_model::load_named(&reef_model::default_models_dir(), "vgg")
        .unwrap()
        .kernels
        .len() as u32;
    let dev = Refusing {
        dev: Opaque(Sim::new(spec, SimConfig::default())),
        refuse: (1, n - 1),
        watch: (2, 0),
        seen: None,
    };
    let (mut d, _) = driver_on("reef-nodkp", None, dev).unwrap();
    let work = Book { known: true };
    let mut out = Vec::new();
    d.arrive(0, RequestId(1), ClientId(0), 0, None);
    d.arrive(0, RequestId(2), ClientId(0), 0, None);
    drain(&mut d, &work, &mut out);
    assert_eq!(failures(&out).len(), 1, "{out:?}");
    for r in [1, 2] {
        assert!(
            out.iter()
                .any(|o| matches!(o, Outcome::Done { req, .. } if req.0 == r)),
            "request {r}: {out:?}"
        );
    }
    assert_eq!(
        d.dev.seen,
        Some(0),
        "request 2 was launched while request 1's kernels were on the stream"
    );
}

/// Requests 1.. of client 0, 1<<32.. of client 1; `known: false`
/// answers that no request is known.
struct Book {
    known: bool,
}
impl Work for Book {
    fn model_of(&self, req: RequestId) -> Option<usize> {
        self.known.then_some((req.0 >> 32) as usize)
    }
    fn buffers(&self, _: RequestId, _: usize) -> Buffers {
        (Vec::new(), Vec::new())
    }
}

/// Steps the driver until nothing is left; the outcomes in order.
fn drain<D: Device>(d: &mut Driver<D>, work: &dyn Work, out: &mut Vec<Outcome>) {
    d.apply(work, out);
    while let Some(t) = d.next_time() {
        d.step(t, work, out);
    }
}

fn failures(out: &[Outcome]) -> Vec<&str> {
    out.iter()
        .filter_map(|o| match o {
            Outcome::Failed { action, .. } => Some(action.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_request_runs_every_kernel_once_and_is_done() {
    let (mut d, models) = driver("reef-nodkp", None);
    let mut out = Vec::new();
    d.arrive(0, RequestId(1), ClientId(0), 0, None);
    drain(&mut d, &Book { known: true }, &mut out);
    let n = models[0].shapes.len();
    let queued: Vec<u32> = out
        .iter()
        .filter_map(|o| match o {
            Outcome::Queued { req, kernel, .. } if *req == RequestId(1) => Some(*kernel),
            _ => None,
        })
        .collect();
    assert_eq!(queued, (0..n as u32).collect::<Vec<_>>());
    let launches = out
        .iter()
        .filter(|o| matches!(o, Outcome::Launched(LaunchKind::Kernel)))
        .count();
    assert_eq!(launches, n);
    assert_eq!(
        out.last(),
        Some(&Outcome::Done {
            req: RequestId(1),
            client: ClientId(0)
        })
    );
    assert!(failures(&out).is_empty(), "{out:?}");
}

#[test]
fn a_launch_for_an_unknown_request_is_reported_not_dropped() {
    let (mut d, _) = driver("reef-nodkp", None);
    let mut out = Vec::new();
    d.arrive(0, RequestId(1), ClientId(0), 0, None);
    d.apply(&Book { known: false }, &mut out);
    let f = failures(&out);
    assert!(!f.is_empty());
    assert!(
        f.iter().all(|a| a.starts_with("launch request 1 kernel")),
        "{f:?}"
    );
    assert!(!out.iter().any(|o| matches!(o, Outcome::Queued { .. })));
}

#[test]
fn a_refused_kill_is_reported_and_the_rt_request_still_completes() {
    let (mut d, _) = driver("reef-nodkp", None);
    let work = Book { known: true };
    let mut out = Vec::new();
    let be = RequestId(1 << 32 | 1);
    d.arrive(0, be, ClientId(1), 1, None);
    d.apply(&work, &mut out);
    d.step(2_000_000, &work, &mut out);
    // The BE client's stream loses its device queue, then an RT request
    // arrives and preempts it.
    let s = d.sched.scheduler().core().stream_of(ClientId(1));
    d.inject_lost_stream(s);
    d.arrive(d.dev.now(), RequestId(1), ClientId(0), 0, None);
    out.clear();
    drain(&mut d, &work, &mut out);
    let f = failures(&out);
    assert!(f.iter().any(|a| a.starts_with("kill stream")), "{f:?}");
    assert!(out.contains(&Outcome::Done {
        req: RequestId(1),
        client: ClientId(0)
    }));
}

#[test]
fn with_host_pacing_each_kernel_waits_one_gap_after_the_previous_launch() {
    let gap = 50_000;
    let (mut d, models) = driver("reef-nodkp", Some(gap));
    let work = Book { known: true };
    let mut out = Vec::new();
    d.arrive(0, RequestId(1), ClientId(0), 0, None);
    let mut launched_at = Vec::new();
    d.apply(&work, &mut out);
    while let Some(t) = d.next_time() {
        d.step(t, &work, &mut out);
        for o in out.drain(..) {
            if let Outcome::Queued { .. } = o {
                launched_at.push(d.dev.now());
            }
        }
    }
    assert_eq!(launched_at.len(), models[0].shapes.len());
    assert_eq!(launched_at[0], gap, "kernel 0 one gap after arrival");
    for w in launched_at.windows(2) {
        assert!(w[1] >= w[0] + gap, "{launched_at:?}");
    }
}
