//! Unit tests of the scheduler core on the scripted fake device.

use reef_model::idempotence::IdempotenceMetadata;
use reef_sched::fake::{drive, FakeDevice, FakeKernel, FakeModel};
use reef_sched::*;

const US: Time = 1_000;

fn clients(rt: usize, be: usize) -> Vec<ClientSpec> {
    let mut v = Vec::new();
    for i in 0..rt {
        v.push(ClientSpec {
            name: format!("rt{i}"),
            model: ModelId(0),
            class: Class::RealTime,
        });
    }
    for i in 0..be {
        v.push(ClientSpec {
            name: format!("be{i}"),
            model: ModelId(1),
            class: Class::BestEffort,
        });
    }
    v
}

/// RT model: 5 kernels of 100 us; BE model: 20 kernels of 200 us.
fn setup(policy: &str, caps: DeviceCaps) -> (Scheduler, FakeDevice, FakeModel) {
    let rt = FakeModel::chain(5, 100 * US);
    let be = FakeModel::chain(20, 200 * US);
    let models = vec![
        ModelInfo::idempotent("rt", rt.kernels.len() as u32),
        ModelInfo::idempotent("be", be.kernels.len() as u32),
    ];
    let cfg = Config {
        device: caps,
        ..Config::default()
    };
    let s = Scheduler::new(policy_by_name(policy).unwrap(), cfg, models, clients(1, 1)).unwrap();
    let dev = FakeDevice::new(vec![rt, be.clone()], 20 * US, 3 * US);
    (s, dev, be)
}

fn arrivals() -> Vec<(Time, RequestId, ClientId, usize)> {
    // BE request at 0; RT request in the middle of BE kernel 5.
    vec![
        (0, RequestId(100), ClientId(1), 1),
        (1_150 * US, RequestId(1), ClientId(0), 0),
    ]
}

fn launches_on(log: &fake::RunLog, s: u32) -> Vec<KernelTag> {
    log.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Launch { stream, tag } if stream.0 == s => Some(*tag),
            _ => None,
        })
        .collect()
}

#[test]
fn reef_kills_evicts_and_restores_from_the_interrupted_kernel() {
    let (mut s, mut dev, be) = setup("reef", DeviceCaps::default());
    let log = drive(&mut s, &mut dev, arrivals());
    let at = 1_150 * US;
    let ctl: Vec<&Action> = log
        .actions
        .iter()
        .filter(|(t, _)| *t == at)
        .map(|(_, a)| a)
        .collect();
    let pos = |f: &dyn Fn(&Action) -> bool| ctl.iter().position(|a| f(a));
    let reclaim = pos(&|a| {
        matches!(
            a,
            Action::ReclaimHostQueue {
                stream: StreamId(1),
                ..
            }
        )
    })
    .expect("host queue reset");
    let flag = pos(&|a| {
        matches!(
            a,
            Action::SetPreemptFlag {
                stream: StreamId(1),
                value: true
            }
        )
    })
    .expect("flag set");
    let kill = pos(&|a| {
        matches!(
            a,
            Action::KillStream {
                stream: StreamId(1)
            }
        )
    })
    .expect("kill");
    let rt_launch = pos(&|a| {
        matches!(
            a,
            Action::Launch {
                stream: StreamId(0),
                ..
            }
        )
    })
    .expect("rt launch");
    assert!(reclaim < flag && flag < kill && kill < rt_launch, "{ctl:?}");
    // REEF launches the real-time task right after preempt() (Fig. 8).
    assert!(s.preemptions()[0].end.unwrap() > at);

    // The preemption finished quickly: kill latency plus evicting <= 3
    // queued kernels at 20 us each, not the 200 us kernel.
    let p = s.preemptions();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].level, PreemptLevel::Kill);
    assert_eq!(p[0].killed, 1);
    let lat = p[0].latency().unwrap();
    assert!(lat <= 3 * US + 3 * 20 * US, "preemption latency {lat}");

    // Restored from the interrupted kernel (execution index), not from 0.
    let restore = log
        .actions
        .iter()
        .find_map(|(_, a)| match a {
            Action::Restore {
                exec_index,
                from_kernel,
                ..
            } => Some((*exec_index, *from_kernel)),
            _ => None,
        })
        .expect("restore");
    assert_eq!(restore.1, restore.0.unwrap());
    assert!(restore.1 >= 4 && restore.1 <= 6, "{restore:?}");

    // Both requests finish and the BE output equals an unpreempted run.
    assert!(log.done.contains_key(&RequestId(1)));
    assert!(log.done.contains_key(&RequestId(100)));
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
    // RT ran as soon as the device queue let it: 5 x (20 + 100) us after arrival.
    let rt_lat = log.done[&RequestId(1)] - at;
    assert!(rt_lat <= 5 * 120 * US + 80 * US, "rt latency {rt_lat}");
}

#[test]
fn reef_caps_the_best_effort_device_queue() {
    let (mut s, mut dev, _) = setup("reef", DeviceCaps::default());
    let log = drive(&mut s, &mut dev, vec![(0, RequestId(100), ClientId(1), 1)]);
    assert!(log.done.contains_key(&RequestId(100)));
    assert!(dev.max_queued <= 4, "max queued {}", dev.max_queued);
    let mut s2 = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config {
            dq_capacity: 2,
            ..Config::default()
        },
        vec![
            ModelInfo::idempotent("rt", 5),
            ModelInfo::idempotent("be", 20),
        ],
        clients(1, 1),
    )
    .unwrap();
    let mut dev2 = FakeDevice::new(
        vec![
            FakeModel::chain(5, 100 * US),
            FakeModel::chain(20, 200 * US),
        ],
        20 * US,
        3 * US,
    );
    drive(
        &mut s2,
        &mut dev2,
        vec![(0, RequestId(100), ClientId(1), 1)],
    );
    assert_eq!(dev2.max_queued, 2);
}

#[test]
fn wait_never_kills_and_waits_for_the_running_kernel() {
    let (mut s, mut dev, be) = setup("wait", DeviceCaps::default());
    let log = drive(&mut s, &mut dev, arrivals());
    assert!(!log
        .actions
        .iter()
        .any(|(_, a)| matches!(a, Action::KillStream { .. })));
    let p = s.preemptions()[0];
    assert_eq!(p.level, PreemptLevel::LazyEviction);
    assert_eq!(p.killed, 0);
    // Uncapped: all 14 remaining kernels were in the device queue and each
    // is fetched to be evicted, after the running kernel completes.
    assert!(p.evicted >= 13, "{p:?}");
    assert!(p.latency().unwrap() >= 13 * 20 * US, "{p:?}");
    // Fig. 4b: the real-time task starts only once the GPU is free.
    let rt_first_launch = log
        .actions
        .iter()
        .find(|(_, a)| {
            matches!(
                a,
                Action::Launch {
                    stream: StreamId(0),
                    ..
                }
            )
        })
        .unwrap()
        .0;
    assert_eq!(rt_first_launch, p.end.unwrap());
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
}

#[test]
fn reef_degrades_when_the_device_cannot_kill() {
    let caps = DeviceCaps {
        max_level: PreemptLevel::LazyEviction,
        can_clear_device_queue: false,
        kill_precedes_later_launches: false,
    };
    let (mut s, mut dev, be) = setup("reef", caps);
    let log = drive(&mut s, &mut dev, arrivals());
    assert!(!log
        .actions
        .iter()
        .any(|(_, a)| matches!(a, Action::KillStream { .. })));
    let p = s.preemptions()[0];
    assert_eq!(p.level, PreemptLevel::LazyEviction);
    assert_eq!(p.killed, 0);
    assert!(p.completed_during >= 1);
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );

    let caps = DeviceCaps {
        max_level: PreemptLevel::HostQueue,
        can_clear_device_queue: false,
        kill_precedes_later_launches: false,
    };
    let (mut s, mut dev, be) = setup("reef", caps);
    let log = drive(&mut s, &mut dev, arrivals());
    assert!(!log
        .actions
        .iter()
        .any(|(_, a)| matches!(a, Action::SetPreemptFlag { .. } | Action::KillStream { .. })));
    let p = s.preemptions()[0];
    assert_eq!(p.level, PreemptLevel::HostQueue);
    assert_eq!(p.evicted + p.killed, 0);
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
}

#[test]
fn seq_makes_real_time_wait_for_the_launched_best_effort_request() {
    let (mut s, mut dev, _) = setup("seq", DeviceCaps::default());
    let log = drive(&mut s, &mut dev, arrivals());
    assert!(s.preemptions().is_empty());
    let be_done = log.done[&RequestId(100)];
    let rt_first_launch = log
        .actions
        .iter()
        .find(|(_, a)| {
            matches!(
                a,
                Action::Launch {
                    stream: StreamId(0),
                    ..
                }
            )
        })
        .unwrap()
        .0;
    assert_eq!(rt_first_launch, be_done);
    assert!(log.done[&RequestId(1)] > be_done);
}

/// The streams each policy creates: (stream, priority, context).
fn creates(log: &fake::RunLog) -> Vec<(StreamId, StreamPriority, u32)> {
    log.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::CreateStream {
                stream,
                priority,
                context,
                ..
            } => Some((*stream, *priority, *context)),
            _ => None,
        })
        .collect()
}

/// `streams` (REEF §6.1 GPUStreams: one context, no stream priorities),
/// `streams-prio` (§6.6: RT streams at high priority) and `share` (FIKIT's
/// default sharing: a context per client) all run the clients side by side;
/// only the layout differs.
#[test]
fn streams_streams_prio_and_share_run_clients_concurrently() {
    use StreamPriority::{High, Normal};
    for (policy, want) in [
        ("streams", [(0, Normal, 0), (1, Normal, 0)]),
        ("streams-prio", [(0, High, 0), (1, Normal, 0)]),
        ("share", [(0, Normal, 1), (1, Normal, 2)]),
    ] {
        let (mut s, mut dev, _) = setup(policy, DeviceCaps::default());
        let log = drive(&mut s, &mut dev, arrivals());
        let want: Vec<_> = want.iter().map(|&(i, p, c)| (StreamId(i), p, c)).collect();
        assert_eq!(creates(&log), want, "{policy}");
        assert!(s.preemptions().is_empty());
        // RT finished before BE: they ran side by side.
        assert!(
            log.done[&RequestId(1)] < log.done[&RequestId(100)],
            "{policy}"
        );
        assert_eq!(launches_on(&log, 1).len(), 20);
    }
}

#[test]
fn rt_only_refuses_best_effort_requests() {
    let (mut s, mut dev, _) = setup("rt-only", DeviceCaps::default());
    let log = drive(&mut s, &mut dev, arrivals());
    assert_eq!(log.rejected, vec![RequestId(100)]);
    assert!(log.done.contains_key(&RequestId(1)));
    assert!(launches_on(&log, 1).is_empty());
}

#[test]
fn unknown_policy_names_are_a_clear_error() {
    let e = policy_by_name("fifo").err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains("fifo") && msg.contains("reef") && msg.contains("rt-only"));
    for n in POLICY_NAMES {
        assert_eq!(policy_by_name(n).unwrap().name(), *n);
    }
}

fn meta(groups: &[usize]) -> IdempotenceMetadata {
    // Built through the file format so optional fields keep their defaults.
    let kernels: Vec<serde_json::Value> = groups
        .iter()
        .enumerate()
        .map(|(i, &g)| {
            serde_json::json!({"index": i, "name": format!("k{i}"), "idempotent": g == i, "group_start": g})
        })
        .collect();
    let m: IdempotenceMetadata = serde_json::from_value(serde_json::json!({
        "format": reef_model::idempotence::FORMAT,
        "version": reef_model::idempotence::VERSION,
        "model": "m",
        "kernels": kernels,
    }))
    .unwrap();
    m.validate().unwrap();
    m
}

/// BE model with an in-place kernel 3 (reads and writes buffer 3, which
/// kernel 2 writes): its minimal idempotent group is (2, 3).
fn inplace_model() -> (FakeModel, Vec<usize>) {
    let mut m = FakeModel::chain(6, 200 * US);
    m.kernels[3] = FakeKernel {
        duration: 200 * US,
        reads: vec![3],
        writes: vec![3],
    };
    for k in 4..6 {
        m.kernels[k].reads = vec![k - 1];
        m.kernels[k].writes = vec![k];
    }
    (m, vec![0, 1, 2, 2, 4, 5])
}

/// (final buffers, reference buffers, (exec index, restore point)).
type InplaceRun = (Vec<u64>, Vec<u64>, Option<(Option<u32>, u32)>);

fn run_inplace(groups: &[usize]) -> InplaceRun {
    let (be, _) = inplace_model();
    let rt = FakeModel::chain(2, 100 * US);
    let models = vec![
        ModelInfo::idempotent("rt", 2),
        ModelInfo {
            name: "be".into(),
            kernels: 6,
            idempotence: Some(meta(groups)),
            successors_clear: None,
            alone_ns: None,
        },
    ];
    let mut s = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config::default(),
        models,
        clients(1, 1),
    )
    .unwrap();
    let mut dev = FakeDevice::new(vec![rt, be.clone()], 20 * US, 3 * US);
    // Kernel 3 runs from 3*220+20 = 680 us to 880 us: preempt at 800 us.
    let log = drive(
        &mut s,
        &mut dev,
        vec![
            (0, RequestId(100), ClientId(1), 1),
            (800 * US, RequestId(1), ClientId(0), 0),
        ],
    );
    let restore = log.actions.iter().find_map(|(_, a)| match a {
        Action::Restore {
            exec_index,
            from_kernel,
            ..
        } => Some((*exec_index, *from_kernel)),
        _ => None,
    });
    (
        dev.values(RequestId(100)).unwrap().to_vec(),
        be.reference_output(RequestId(100)),
        restore,
    )
}

#[test]
fn non_idempotent_kernel_restores_from_its_group_start() {
    let (_, groups) = inplace_model();
    let (got, want, restore) = run_inplace(&groups);
    assert_eq!(restore, Some((Some(3), 2)));
    assert_eq!(got, want);
}

#[test]
fn restoring_a_non_idempotent_kernel_from_itself_is_detected_as_corrupted() {
    // Wrong metadata: claims kernel 3 is idempotent.
    let (got, want, restore) = run_inplace(&[0, 1, 2, 3, 4, 5]);
    assert_eq!(restore, Some((Some(3), 3)));
    assert_ne!(got, want);
}

#[test]
fn edf_orders_real_time_requests_by_deadline() {
    let models = vec![ModelInfo::idempotent("rt", 1)];
    let cl = vec![
        ClientSpec {
            name: "a".into(),
            model: ModelId(0),
            class: Class::RealTime,
        },
        ClientSpec {
            name: "b".into(),
            model: ModelId(0),
            class: Class::RealTime,
        },
    ];
    let mut order = Vec::new();
    for rt_order in [RtOrder::Fifo, RtOrder::Edf] {
        let cfg = Config {
            rt_order,
            ..Config::default()
        };
        let mut s = Scheduler::new(
            policy_by_name("reef").unwrap(),
            cfg,
            models.clone(),
            cl.clone(),
        )
        .unwrap();
        let mut v = Vec::new();
        s.drain_actions(&mut v);
        for (req, client, dl) in [(1, 0, 1_000), (2, 0, 900), (3, 1, 500)] {
            s.handle(
                0,
                Event::RequestArrived {
                    req: RequestId(req),
                    client: ClientId(client),
                    deadline: Some(dl),
                },
            );
        }
        let mut launched = Vec::new();
        for _ in 0..3 {
            v.clear();
            s.drain_actions(&mut v);
            let tag = v
                .iter()
                .find_map(|a| match a {
                    Action::Launch { tag, .. } => Some(*tag),
                    _ => None,
                })
                .unwrap();
            launched.push(tag.req.0);
            s.handle(
                1,
                Event::KernelCompleted {
                    stream: StreamId(0),
                    tag,
                },
            );
        }
        order.push(launched);
    }
    assert_eq!(order[0], vec![1, 2, 3]);
    assert_eq!(order[1], vec![1, 3, 2]);
}

#[test]
fn preempt_command_holds_a_stream_until_resumed() {
    let (mut s, mut dev, be) = setup("streams", DeviceCaps::default());
    let mut v = Vec::new();
    let pump = |s: &mut Scheduler, dev: &mut FakeDevice, v: &mut Vec<Action>| {
        let start = v.len();
        s.drain_actions(v);
        for a in &v[start..] {
            dev.apply(a);
        }
    };
    pump(&mut s, &mut dev, &mut v);
    dev.bind(RequestId(100), 1);
    s.handle(
        0,
        Event::RequestArrived {
            req: RequestId(100),
            client: ClientId(1),
            deadline: None,
        },
    );
    pump(&mut s, &mut dev, &mut v);
    // Run until kernel 1 is running, then preempt by command.
    while let Some((t, ev)) = dev.step(Time::MAX) {
        let k1 = matches!(ev, Event::KernelStarted { tag, .. } if tag.kernel == 1);
        s.handle(t, ev);
        pump(&mut s, &mut dev, &mut v);
        if k1 {
            s.handle(
                t + 50 * US,
                Event::PreemptCommand {
                    stream: StreamId(1),
                },
            );
            break;
        }
    }
    let before = v.len();
    pump(&mut s, &mut dev, &mut v);
    assert!(v[before..].contains(&Action::KillStream {
        stream: StreamId(1)
    }));
    // Drain every device event: the stream stays held, nothing relaunches.
    while let Some((t, ev)) = dev.step(Time::MAX) {
        s.handle(t, ev);
        pump(&mut s, &mut dev, &mut v);
    }
    assert!(s.core().is_paused(StreamId(1)));
    assert_eq!(s.core().outstanding(StreamId(1)), 0);
    assert!(s.preemptions()[0].latency().is_some());
    let mark = v.len();
    s.handle(
        10_000 * US,
        Event::ResumeCommand {
            stream: StreamId(1),
        },
    );
    pump(&mut s, &mut dev, &mut v);
    assert!(v[mark..].iter().any(|a| matches!(
        a,
        Action::Restore {
            from_kernel: 1,
            exec_index: Some(1),
            ..
        }
    )));
    while let Some((t, ev)) = dev.step(Time::MAX) {
        s.handle(t, ev);
        pump(&mut s, &mut dev, &mut v);
    }
    assert!(v.contains(&Action::RequestDone {
        req: RequestId(100),
        client: ClientId(1)
    }));
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
}

#[test]
fn unknown_clients_are_rejected_not_panicked_on() {
    let (mut s, _, _) = setup("reef", DeviceCaps::default());
    s.handle(
        0,
        Event::RequestArrived {
            req: RequestId(7),
            client: ClientId(99),
            deadline: None,
        },
    );
    let mut v = Vec::new();
    s.drain_actions(&mut v);
    assert!(v.contains(&Action::RequestRejected {
        req: RequestId(7),
        client: ClientId(99)
    }));
}

#[test]
fn device_caps_take_the_highest_reported_level() {
    assert_eq!(PreemptLevel::highest([1, 3, 2]), PreemptLevel::Kill);
    assert_eq!(PreemptLevel::highest([2, 1]), PreemptLevel::LazyEviction);
    assert_eq!(PreemptLevel::highest([7]), PreemptLevel::Kill);
    assert_eq!(PreemptLevel::highest([]), PreemptLevel::HostQueue);
    assert_eq!(PreemptLevel::highest([0]), PreemptLevel::HostQueue);
    let caps = DeviceCaps::from_levels([1, 2]);
    assert_eq!(caps.max_level, PreemptLevel::LazyEviction);
    assert!(!caps.can_clear_device_queue);
}

/// An operator's resume while an RT task runs must not put the BE stream
/// back on the device beside it: the policy still holds the stream (it
/// preempted it for the RT task) and restores it when the RT task is done.
/// (Found in reefd's end-to-end test: an RT request ran 1.8x its stand-alone
/// time when `reefctl resume` landed during it.)
#[test]
fn operator_resume_during_an_rt_task_waits_for_the_policy() {
    enum In {
        Arrive(RequestId, ClientId, usize),
        Cmd(Event),
    }
    let (mut s, mut dev, be) = setup("reef-nodkp", DeviceCaps::default());
    let be_stream = StreamId(1);
    let mut script: std::collections::VecDeque<(Time, In)> = vec![
        (0, In::Arrive(RequestId(100), ClientId(1), 1)),
        (
            500 * US,
            In::Cmd(Event::PreemptCommand { stream: be_stream }),
        ),
        (1_150 * US, In::Arrive(RequestId(1), ClientId(0), 0)),
        (
            1_200 * US,
            In::Cmd(Event::ResumeCommand { stream: be_stream }),
        ),
    ]
    .into();
    let mut log: Vec<(Time, Action)> = Vec::new();
    let mut now = 0;
    loop {
        while let Some(a) = s.poll_action() {
            dev.apply(&a);
            log.push((now, a));
        }
        let next_dev = dev.next_event_time();
        let next_in = script.front().map(|x| x.0);
        match (next_dev, next_in) {
            (None, None) => break,
            (Some(d), i) if i.is_none_or(|i| d < i) => {
                let (t, ev) = dev.step(d).expect("due event");
                now = t;
                s.handle(t, ev);
            }
            _ => {
                let (at, what) = script.pop_front().expect("scripted input");
                dev.advance_clock(at);
                now = at;
                match what {
                    In::Arrive(req, client, model) => {
                        dev.bind(req, model);
                        s.handle(
                            at,
                            Event::RequestArrived {
                                req,
                                client,
                                deadline: None,
                            },
                        );
                    }
                    In::Cmd(ev) => s.handle(at, ev),
                }
            }
        }
    }
    let rt_done = log
        .iter()
        .find(|(_, a)| matches!(a, Action::RequestDone { req, .. } if *req == RequestId(1)))
        .map(|(t, _)| *t)
        .expect("the RT request completes");
    // Between the operator's resume and the RT task's end, nothing of the
    // BE stream is restored or launched.
    let be_work_during_rt: Vec<&(Time, Action)> = log
        .iter()
        .filter(|(t, a)| {
            *t >= 1_200 * US
                && *t < rt_done
                && matches!(a,
                    Action::Restore { stream, .. } | Action::Launch { stream, .. }
                        if *stream == be_stream)
        })
        .collect();
    assert!(
        be_work_during_rt.is_empty(),
        "BE work put on the device during the RT task: {be_work_during_rt:?}"
    );
    // Once the RT task is done the policy restores it, and it completes
    // with the outputs of an unpreempted run.
    assert!(log.iter().any(|(t, a)| *t >= rt_done
        && matches!(a, Action::Restore { stream, .. } if *stream == be_stream)));
    assert!(log
        .iter()
        .any(|(_, a)| matches!(a, Action::RequestDone { req, .. } if *req == RequestId(100))));
    assert_eq!(
        dev.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
}

/// The daemon forgets finished preemption records (one per preemption, read
/// when made) so that they do not grow for its whole life. Forgetting must
/// not change a single decision, and the records made after some were
/// forgotten (their numbers no longer index the kept ones from 0) must still
/// be kept up to date.
#[test]
fn forgetting_finished_preemption_records_changes_no_decision() {
    // Three RT requests during one long BE request: three preemptions.
    let arrivals = || {
        vec![
            (0, RequestId(100), ClientId(1), 1),
            (1_150 * US, RequestId(1), ClientId(0), 0),
            (2_370 * US, RequestId(2), ClientId(0), 0),
            (3_610 * US, RequestId(3), ClientId(0), 0),
        ]
    };
    let (mut kept, mut dev_a, be) = setup("reef", DeviceCaps::default());
    let log_a = fake::drive(&mut kept, &mut dev_a, arrivals());
    let (mut forgot, mut dev_b, _) = setup("reef", DeviceCaps::default());
    let log_b = fake::drive_with(&mut forgot, &mut dev_b, arrivals(), true);

    assert_eq!(log_a.actions, log_b.actions);
    assert_eq!(log_a.done, log_b.done);
    assert_eq!(
        dev_b.values(RequestId(100)).unwrap(),
        be.reference_output(RequestId(100)).as_slice()
    );
    assert_eq!(kept.preemptions().len(), 3);
    assert!(kept.preemptions().iter().all(|r| r.end.is_some()));
    assert_eq!(kept.core().preemptions_base(), 0);
    // All three finished, so all three were forgotten, in order.
    assert!(forgot.preemptions().is_empty());
    assert_eq!(forgot.core().preemptions_base(), 3);
}

/// The (execution index, restore point) of the restore on `stream` among
/// `acts`; panics when there is none.
fn restore_on(acts: &[Action], stream: StreamId) -> (Option<u32>, u32) {
    acts.iter()
        .find_map(|a| match a {
            Action::Restore {
                stream: s,
                exec_index,
                from_kernel,
                ..
            } if *s == stream => Some((*exec_index, *from_kernel)),
            _ => None,
        })
        .expect("the BE request is restored")
}

/// Issue 26, finding 1 (REEF §4.3 Fig. 8, §4.4): the flag is checked at the
/// entry of every block, so a best-effort kernel already running when a
/// lazy eviction (level 2, no kill) sets the flag finishes the blocks it
/// had dispatched, its later blocks exit, and the completion event fires
/// as for a whole run. The execution index names it, so the restore must
/// re-execute it. The rule of 68f6349 counted that completion and resumed
/// after the kernel, leaving its outputs partly written.
#[test]
fn a_kernel_partly_run_at_preemption_is_re_executed() {
    let caps = DeviceCaps {
        max_level: PreemptLevel::LazyEviction,
        ..DeviceCaps::default()
    };
    let rt = ModelInfo::idempotent("rt", 2);
    let be = ModelInfo::idempotent("be", 6);
    let mut s = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config {
            device: caps,
            ..Config::default()
        },
        vec![rt, be],
        clients(1, 1),
    )
    .unwrap();
    let mut acts = Vec::new();
    let (rt_s, be_s) = (StreamId(0), StreamId(1));
    let be_req = RequestId(100);
    let tag = |req, kernel| KernelTag { req, kernel };
    s.handle(
        0,
        Event::RequestArrived {
            req: be_req,
            client: ClientId(1),
            deadline: None,
        },
    );
    // Kernel 0 runs whole; kernel 1 passes its check (index 1).
    s.handle(
        10 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    s.handle(
        20 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    s.handle(
        21 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    s.drain_actions(&mut acts);
    let launched: Vec<u32> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Launch { stream, tag } if *stream == be_s => Some(tag.kernel),
            _ => None,
        })
        .collect();
    assert!(launched.len() > 2, "{launched:?}");
    // An RT request: the BE stream is lazily evicted (flag, no kill).
    s.handle(
        25 * US,
        Event::RequestArrived {
            req: RequestId(1),
            client: ClientId(0),
            deadline: None,
        },
    );
    acts.clear();
    s.drain_actions(&mut acts);
    assert!(acts.contains(&Action::SetPreemptFlag {
        stream: be_s,
        value: true
    }));
    assert!(!acts.iter().any(|a| matches!(a, Action::KillStream { .. })));
    // Kernel 1's dispatched blocks finish, the rest exit at entry: its
    // completion event fires. The queued kernels exit whole.
    s.handle(
        40 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    for &k in &launched[2..] {
        s.handle(
            48 * US,
            Event::KernelEvicted {
                stream: be_s,
                tag: tag(be_req, k),
            },
        );
    }
    // The RT request runs and ends; the BE request is restored.
    for k in 0..2 {
        s.handle(
            100 * US,
            Event::KernelStarted {
                stream: rt_s,
                tag: tag(RequestId(1), k),
            },
        );
        s.handle(
            100 * US,
            Event::KernelCompleted {
                stream: rt_s,
                tag: tag(RequestId(1), k),
            },
        );
    }
    acts.clear();
    s.drain_actions(&mut acts);
    let restore = restore_on(&acts, be_s);
    assert_eq!(
        restore,
        (Some(1), 1),
        "kernel 1 ran partly and must run again"
    );
    let first = acts.iter().find_map(|a| match a {
        Action::Launch { stream, tag } if *stream == be_s => Some(tag.kernel),
        _ => None,
    });
    assert_eq!(first, Some(1));
}

/// The same for a request's last kernel: a partial run of it under the
/// flag must not end the request (its output is partly written); the
/// restore re-executes it and only its completion after that does.
#[test]
fn a_last_kernel_partly_run_at_preemption_does_not_end_the_request() {
    let caps = DeviceCaps {
        max_level: PreemptLevel::LazyEviction,
        ..DeviceCaps::default()
    };
    let mut s = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config {
            device: caps,
            ..Config::default()
        },
        vec![
            ModelInfo::idempotent("rt", 1),
            ModelInfo::idempotent("be", 2),
        ],
        clients(1, 1),
    )
    .unwrap();
    let mut acts = Vec::new();
    let (rt_s, be_s) = (StreamId(0), StreamId(1));
    let (be_req, rt_req) = (RequestId(100), RequestId(1));
    let tag = |req, kernel| KernelTag { req, kernel };
    let arrive = |s: &mut Scheduler, t, req, client| {
        s.handle(
            t,
            Event::RequestArrived {
                req,
                client: ClientId(client),
                deadline: None,
            },
        )
    };
    arrive(&mut s, 0, be_req, 1);
    s.handle(
        10 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    s.handle(
        20 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    s.handle(
        21 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    arrive(&mut s, 25 * US, rt_req, 0);
    s.handle(
        40 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    s.drain_actions(&mut acts);
    let done = |acts: &[Action]| {
        acts.iter()
            .any(|a| matches!(a, Action::RequestDone { req, .. } if *req == be_req))
    };
    assert!(
        !done(&acts),
        "a partial run of the last kernel ended the request"
    );
    s.handle(
        100 * US,
        Event::KernelStarted {
            stream: rt_s,
            tag: tag(rt_req, 0),
        },
    );
    s.handle(
        100 * US,
        Event::KernelCompleted {
            stream: rt_s,
            tag: tag(rt_req, 0),
        },
    );
    acts.clear();
    s.drain_actions(&mut acts);
    assert!(acts.contains(&Action::Launch {
        stream: be_s,
        tag: tag(be_req, 1)
    }));
    s.handle(
        110 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    s.handle(
        120 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    acts.clear();
    s.drain_actions(&mut acts);
    assert!(done(&acts));
}

/// The flag's write can reach the device after a kernel ended and its
/// successor passed its check, while the scheduler, which set the flag
/// first, hears of the completion only after that: the completion looks
/// partial (the index still names the kernel), and then the successor's
/// start moves the index past it. The successor is killed. The kernel ran
/// whole, so the restore starts at the successor (REEF §4.3 Fig. 8,
/// `find_idem_entry(l)` with l the killed kernel); re-running the completed
/// kernel after its killed successor overwrote what it reads gave a stale
/// vgg answer under `reef-bench hostile` (sim:mi50, kernels 69 and 70).
#[test]
fn a_successor_passing_its_check_confirms_a_completion_seen_under_the_flag() {
    let mut s = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config::default(),
        vec![
            ModelInfo::idempotent("rt", 1),
            ModelInfo::idempotent("be", 6),
        ],
        clients(1, 1),
    )
    .unwrap();
    let mut acts = Vec::new();
    let (rt_s, be_s) = (StreamId(0), StreamId(1));
    let (be_req, rt_req) = (RequestId(100), RequestId(1));
    let tag = |req, kernel| KernelTag { req, kernel };
    let ev = |s: &mut Scheduler, t: Time, e: Event| s.handle(t, e);
    ev(
        &mut s,
        0,
        Event::RequestArrived {
            req: be_req,
            client: ClientId(1),
            deadline: None,
        },
    );
    ev(
        &mut s,
        10 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    ev(
        &mut s,
        20 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 0),
        },
    );
    ev(
        &mut s,
        21 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    s.drain_actions(&mut acts);
    let launched: Vec<u32> = acts
        .iter()
        .filter_map(|a| match a {
            Action::Launch { stream, tag } if *stream == be_s => Some(tag.kernel),
            _ => None,
        })
        .collect();
    assert!(launched.len() > 3, "{launched:?}");
    // The RT request: flag and kill for the BE stream.
    ev(
        &mut s,
        25 * US,
        Event::RequestArrived {
            req: rt_req,
            client: ClientId(0),
            deadline: None,
        },
    );
    acts.clear();
    s.drain_actions(&mut acts);
    assert!(acts.contains(&Action::SetPreemptFlag {
        stream: be_s,
        value: true
    }));
    assert!(acts.contains(&Action::KillStream { stream: be_s }));
    // Heard after the flag was set: kernel 1 completed (index 1), then
    // kernel 2 passed its check (the flag had not reached the device),
    // and the kill ends kernel 2; the queued rest exits.
    ev(
        &mut s,
        26 * US,
        Event::KernelCompleted {
            stream: be_s,
            tag: tag(be_req, 1),
        },
    );
    ev(
        &mut s,
        26 * US,
        Event::KernelStarted {
            stream: be_s,
            tag: tag(be_req, 2),
        },
    );
    ev(
        &mut s,
        27 * US,
        Event::KernelKilled {
            stream: be_s,
            tag: tag(be_req, 2),
        },
    );
    for &k in &launched[3..] {
        ev(
            &mut s,
            27 * US,
            Event::KernelEvicted {
                stream: be_s,
                tag: tag(be_req, k),
            },
        );
    }
    ev(
        &mut s,
        100 * US,
        Event::KernelStarted {
            stream: rt_s,
            tag: tag(rt_req, 0),
        },
    );
    ev(
        &mut s,
        110 * US,
        Event::KernelCompleted {
            stream: rt_s,
            tag: tag(rt_req, 0),
        },
    );
    acts.clear();
    s.drain_actions(&mut acts);
    let restore = restore_on(&acts, be_s);
    assert_eq!(
        restore,
        (Some(2), 2),
        "kernel 1 ran whole (kernel 2 passed its check after it); only the killed kernel 2 runs again"
    );
}
