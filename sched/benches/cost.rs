//! The scheduler's own cost (REEF §6.5 reports kernel selection at
//! 0.4–1.2 us; the preemption control path must stay far below the ~30 us
//! device-side preemption of §6.4): nanoseconds per scheduling decision and
//! per preemption control path, for each policy.
//!
//! `decision`: replays the events of a recorded run (one real-time client,
//! five best-effort clients, on the scripted fake device) into a fresh
//! scheduler and drains its actions; the figure is per event.
//! `preempt_control`: a real-time request arrives while five best-effort
//! streams are busy; the figure covers `handle` plus draining the resulting
//! host-queue resets, flag writes, kills and the real-time launches.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use reef_sched::fake::{FakeDevice, FakeModel};
use reef_sched::*;

const US: Time = 1_000;
const BE: usize = 5;

fn models() -> (Vec<ModelInfo>, Vec<FakeModel>) {
    let rt = FakeModel::chain(71, 60 * US);
    let be = FakeModel::chain(207, 60 * US);
    (
        vec![
            ModelInfo::idempotent("rt", 71),
            ModelInfo::idempotent("be", 207),
        ],
        vec![rt, be],
    )
}

fn clients() -> Vec<ClientSpec> {
    let mut v = vec![ClientSpec {
        name: "rt".into(),
        model: ModelId(0),
        class: Class::RealTime,
    }];
    for i in 0..BE {
        v.push(ClientSpec {
            name: format!("be{i}"),
            model: ModelId(1),
            class: Class::BestEffort,
        });
    }
    v
}

fn scheduler(policy: &str) -> Scheduler {
    Scheduler::new(
        policy_by_name(policy).unwrap(),
        Config::default(),
        models().0,
        clients(),
    )
    .unwrap()
}

/// Runs the workload on the fake device and records every event handed to
/// the scheduler, to replay into fresh schedulers.
fn record(policy: &str) -> Vec<(Time, Event)> {
    let mut arrivals: Vec<(Time, Event)> = Vec::new();
    for i in 0..BE {
        arrivals.push((
            0,
            Event::RequestArrived {
                req: RequestId(1000 + i as u64),
                client: ClientId(1 + i as u32),
                deadline: None,
            },
        ));
    }
    for j in 0..20u64 {
        arrivals.push((
            j * 10_000 * US + 3_000 * US,
            Event::RequestArrived {
                req: RequestId(j + 1),
                client: ClientId(0),
                deadline: None,
            },
        ));
    }
    let mut pending: std::collections::VecDeque<(Time, Event)> = arrivals.into();
    let mut dev = FakeDevice::new(models().1, 20 * US, 3 * US);
    let mut s = scheduler(policy);
    let mut out = Vec::new();
    let mut acts = Vec::new();
    loop {
        acts.clear();
        s.drain_actions(&mut acts);
        for a in &acts {
            dev.apply(a);
        }
        let nd = dev.next_event_time();
        let na = pending.front().map(|e| e.0);
        let ev = match (nd, na) {
            (None, None) => break,
            (Some(d), a) if a.is_none_or(|a| d < a) => dev.step(d).expect("due"),
            _ => {
                let e = pending.pop_front().expect("arrival");
                if let Event::RequestArrived { req, client, .. } = e.1 {
                    dev.bind(req, usize::from(client.0 != 0));
                }
                e
            }
        };
        s.handle(ev.0, ev.1.clone());
        out.push(ev);
    }
    assert_eq!(s.counters().requests_done + s.counters().rejected, 25);
    out
}

fn decision(c: &mut Criterion) {
    let mut g = c.benchmark_group("decision");
    for policy in POLICY_NAMES {
        let evs = record(policy);
        g.throughput(Throughput::Elements(evs.len() as u64));
        g.bench_function(*policy, |b| {
            let mut acts = Vec::with_capacity(1024);
            b.iter_batched(
                || scheduler(policy),
                |mut s| {
                    for (t, e) in &evs {
                        s.handle(*t, e.clone());
                        acts.clear();
                        s.drain_actions(&mut acts);
                    }
                    s
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn preempt_control(c: &mut Criterion) {
    let mut g = c.benchmark_group("preempt_control");
    for policy in ["reef", "wait"] {
        g.bench_function(policy, |b| {
            let mut acts = Vec::with_capacity(1024);
            b.iter_batched(
                || {
                    let mut s = scheduler(policy);
                    for i in 0..BE {
                        s.handle(
                            0,
                            Event::RequestArrived {
                                req: RequestId(1000 + i as u64),
                                client: ClientId(1 + i as u32),
                                deadline: None,
                            },
                        );
                    }
                    let mut v = Vec::new();
                    s.drain_actions(&mut v);
                    s
                },
                |mut s| {
                    s.handle(
                        1_000 * US,
                        Event::RequestArrived {
                            req: RequestId(1),
                            client: ClientId(0),
                            deadline: None,
                        },
                    );
                    acts.clear();
                    s.drain_actions(&mut acts);
                    assert!(acts
                        .iter()
                        .any(|a| matches!(a, Action::SetPreemptFlag { value: true, .. })));
                    s
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, decision, preempt_control);
criterion_main!(benches);
