use super::*;
use crate::core::ModelInfo;
use crate::dkp::profile::mi50;

fn k(blocks: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
    KernelChar::new(&mi50(), blocks, 256, 0, 65536 / occ, curve).unwrap()
}

fn setup(window: usize) -> PaddingScheduler {
    setup_on(window, Config::default())
}

pub(super) fn setup_on(window: usize, cfg: Config) -> PaddingScheduler {
    setup_variant(window, cfg, Variant::Single)
}

fn setup_variant(window: usize, cfg: Config, variant: Variant) -> PaddingScheduler {
    // RT model: 4 kernels of 20 blocks, 50 us each. BE model: kernel 0
    // of 100 blocks, kernel 1 of 300 blocks, 10 us blocks (+10 per
    // co-resident block).
    let rt: Vec<KernelChar> = (0..4).map(|_| k(20, 4, vec![50_000])).collect();
    let curve = vec![
        10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 80_000,
    ];
    let be = vec![k(100, 8, curve.clone()), k(300, 8, curve)];
    let table = DkpTable::new(Selector::new(mi50()), vec![rt, be], variant, 1_000);
    let models = vec![
        ModelInfo::idempotent("rt", 4),
        ModelInfo::idempotent("be", 2),
    ];
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
    PaddingScheduler::new(variant, Arc::new(table), cfg, models, clients, window).unwrap()
}

pub(super) fn step(s: &mut PaddingScheduler, now: Time, ev: Event) -> Vec<DkpAction> {
    s.handle(now, ev);
    std::iter::from_fn(|| s.poll_action()).collect()
}

pub(super) fn arrive(s: &mut PaddingScheduler, t: Time, req: u64, client: u32) -> Vec<DkpAction> {
    step(
        s,
        t,
        Event::RequestArrived {
            req: RequestId(req),
            client: ClientId(client),
            deadline: None,
        },
    )
}

/// The first padded launch among `a`: (RT kernel, first part's BE
/// kernel, its block range).
pub(super) fn first_padded(
    a: &[DkpAction],
) -> Option<(KernelTag, KernelTag, std::ops::Range<u32>)> {
    a.iter().find_map(|x| match x {
        DkpAction::Padded(p) => Some((p.tag, p.parts[0].tag, p.parts[0].blocks.clone())),
        _ => None,
    })
}

pub(super) fn tag(req: u64, kernel: u32) -> KernelTag {
    KernelTag {
        req: RequestId(req),
        kernel,
    }
}

/// An RT request arriving over a BE one, the BE task's kill and
/// eviction, the RT kernels' completions and the BE kernels': the script
/// the tests that must change no decision replay.
fn scripted_events() -> Vec<(Time, Event)> {
    let (rt, be) = (StreamId(0), StreamId(1));
    let arrived = |req: u64, client: u32| Event::RequestArrived {
        req: RequestId(req),
        client: ClientId(client),
        deadline: None,
    };
    let done = |stream: StreamId, req: u64, k: u32| Event::KernelCompleted {
        stream,
        tag: tag(req, k),
    };
    let mut events = vec![
        (0, arrived(100, 1)),
        (10, arrived(1, 0)),
        (
            12,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 0),
            },
        ),
        (
            13,
            Event::KernelEvicted {
                stream: be,
                tag: tag(100, 1),
            },
        ),
    ];
    for k in 0..4 {
        events.push((50 * (k as Time + 1), done(rt, 1, k)));
    }
    events.push((210, done(be, 100, 0)));
    events.push((220, done(be, 100, 1)));
    events
}

/// `rehearse` (reefd calls it between requests) must change nothing:
/// a scheduler rehearsing before every event decides exactly as one
/// that never does, through preemption, padding and completion.
#[test]
fn rehearsing_the_selection_changes_no_decision() {
    let (mut a, mut b) = (setup(2), setup(2));
    let events = scripted_events();
    let _ = std::iter::from_fn(|| a.poll_action()).count();
    let _ = std::iter::from_fn(|| b.poll_action()).count();
    let mut selected = 0;
    for (t, ev) in events {
        selected += a.rehearse() as u32;
        assert_eq!(step(&mut a, t, ev.clone()), step(&mut b, t, ev));
        selected += a.rehearse() as u32;
    }
    assert_eq!(a.dkp_counters(), b.dkp_counters());
    assert!(a.dkp_counters().padded_launches > 0);
    assert!(selected > 0, "the rehearsal never found a task to pad");
}

/// The selection made ahead (`prepare`, [`ahead`]) must change nothing:
/// a scheduler preparing after every step decides exactly as one that
/// selects only at the launch, and its launches take what it prepared.
#[test]
fn ahead_changes_no_decision() {
    let (mut a, mut b) = (setup(1), setup(1));
    b.set_select_ahead(false);
    let events = scripted_events();
    let _ = std::iter::from_fn(|| a.poll_action()).count();
    let _ = std::iter::from_fn(|| b.poll_action()).count();
    for (t, ev) in events {
        assert_eq!(step(&mut a, t, ev.clone()), step(&mut b, t, ev));
        a.prepare();
        assert!(!b.prepare(), "prepare selected while switched off");
    }
    assert_eq!(a.dkp_counters(), b.dkp_counters());
    let padded = a.dkp_counters().padded_launches;
    assert!(padded >= 2, "{padded} padded launches");
    let (ah, bh) = (a.ahead_counts(), b.ahead_counts());
    assert_eq!(bh, AheadCounts::default());
    // Every RT kernel after the first was prepared for and taken; the
    // first was selected on its own path.
    assert!(ah.hits >= 1 && ah.hits + ah.misses >= padded, "{ah:?}");
    assert!(ah.made >= ah.hits, "{ah:?}");
}

/// Selections are made when the caller polls (the first RT kernel is
/// issued before the selections for the kernels behind it), yet from
/// the state they were due in: a caller that handles the next events
/// before polling gets the same actions, in the same order.
#[test]
fn polling_late_changes_no_selection() {
    let (mut a, mut b) = (setup(4), setup(4));
    let (rt, be) = (StreamId(0), StreamId(1));
    let done = |stream: StreamId, req: u64, k: u32| Event::KernelCompleted {
        stream,
        tag: tag(req, k),
    };
    let killed = Event::KernelKilled {
        stream: be,
        tag: tag(100, 0),
    };
    let evicted = Event::KernelEvicted {
        stream: be,
        tag: tag(100, 1),
    };
    let _ = std::iter::from_fn(|| a.poll_action()).count();
    let _ = std::iter::from_fn(|| b.poll_action()).count();
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    got_a.extend(arrive(&mut a, 0, 100, 1));
    got_b.extend(arrive(&mut b, 0, 100, 1));
    // A second RT request queued behind the first: its kernels are
    // selected once the first request's leave the device queue.
    for (t, req, client) in [(10, 1, 0), (11, 2, 0)] {
        got_a.extend(arrive(&mut a, t, req, client));
        b.handle(
            t,
            Event::RequestArrived {
                req: RequestId(req),
                client: ClientId(client),
                deadline: None,
            },
        );
    }
    got_a.extend(step(&mut a, 12, killed.clone()));
    b.handle(12, killed);
    got_a.extend(step(&mut a, 13, evicted.clone()));
    b.handle(13, evicted);
    got_b.extend(std::iter::from_fn(|| b.poll_action()));
    for (t, k) in [(50, 0), (100, 1), (150, 2), (200, 3)] {
        got_a.extend(step(&mut a, t, done(rt, 1, k)));
        b.handle(t, done(rt, 1, k));
    }
    got_b.extend(std::iter::from_fn(|| b.poll_action()));
    assert_eq!(got_a, got_b);
    assert!(got_a.iter().any(|x| matches!(x, DkpAction::Padded(_))));
}

#[test]
fn pads_rt_kernels_with_preempted_be_blocks_and_resumes_the_rest() {
    let mut s = setup(2);
    let (rt, be) = (StreamId(0), StreamId(1));
    let _created: Vec<_> = std::iter::from_fn(|| s.poll_action()).collect();
    // A best-effort request starts on its stream.
    let a = step(
        &mut s,
        0,
        Event::RequestArrived {
            req: RequestId(100),
            client: ClientId(1),
            deadline: None,
        },
    );
    assert!(a.contains(&DkpAction::Core(Action::Launch {
        stream: be,
        tag: tag(100, 0)
    })));
    // A real-time request preempts it; the BE stream is still draining,
    // so the first two real-time kernels (the window) go unpadded.
    let a = step(
        &mut s,
        10,
        Event::RequestArrived {
            req: RequestId(1),
            client: ClientId(0),
            deadline: None,
        },
    );
    assert!(a.contains(&DkpAction::Core(Action::KillStream { stream: be })));
    let rt_launches: Vec<_> = a
        .iter()
        .filter(|x| matches!(x, DkpAction::Core(Action::Launch { stream, .. }) if *stream == rt))
        .collect();
    assert_eq!(rt_launches.len(), 2);
    assert!(!a.iter().any(|x| matches!(x, DkpAction::Padded(_))));
    step(
        &mut s,
        12,
        Event::KernelKilled {
            stream: be,
            tag: tag(100, 0),
        },
    );
    step(
        &mut s,
        13,
        Event::KernelEvicted {
            stream: be,
            tag: tag(100, 1),
        },
    );
    // Real-time kernel 0 completes: kernel 2 is transmitted, padded with
    // all 100 blocks of BE kernel 0 (4 per CU on 25 of the 40 free CUs).
    let a = step(
        &mut s,
        50,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 0),
        },
    );
    let p = a
        .iter()
        .find_map(|x| match x {
            DkpAction::Padded(p) => Some(p.clone()),
            _ => None,
        })
        .expect("padded launch");
    assert_eq!(p.tag, tag(1, 2));
    assert_eq!(p.rt_cus, 20);
    assert_eq!(p.parts.len(), 1);
    assert_eq!(p.parts[0].tag, tag(100, 0));
    assert_eq!(p.parts[0].blocks, 0..100);
    assert_eq!(p.parts[0].cus, 20..45);
    // Kernel 3 pads the first 160 blocks of BE kernel 1 (its offset).
    let a = step(
        &mut s,
        100,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 1),
        },
    );
    let p = a
        .iter()
        .find_map(|x| match x {
            DkpAction::Padded(p) => Some(p.clone()),
            _ => None,
        })
        .expect("padded launch");
    assert_eq!(p.parts[0].tag, tag(100, 1));
    assert_eq!(p.parts[0].blocks, 0..160);
    step(
        &mut s,
        150,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 2),
        },
    );
    assert_eq!(s.dkp_counters().be_kernels_completed, 1);
    // The last real-time kernel completes: normal mode resumes the BE
    // request after kernel 0 (kernel 0 again as the redundant restore
    // kernel) and kernel 1 only for its remaining blocks.
    let a = step(
        &mut s,
        200,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 3),
        },
    );
    assert!(a.contains(&DkpAction::Core(Action::RequestDone {
        req: RequestId(1),
        client: ClientId(0)
    })));
    assert!(a.contains(&DkpAction::Rest {
        stream: be,
        tag: tag(100, 1),
        version: 0,
        blocks: 160..300
    }));
    assert!(!a.contains(&DkpAction::Core(Action::Launch {
        stream: be,
        tag: tag(100, 1)
    })));
    // Completing the rest finishes the BE request.
    step(
        &mut s,
        210,
        Event::KernelCompleted {
            stream: be,
            tag: tag(100, 0),
        },
    );
    let a = step(
        &mut s,
        220,
        Event::KernelCompleted {
            stream: be,
            tag: tag(100, 1),
        },
    );
    assert!(a.contains(&DkpAction::Core(Action::RequestDone {
        req: RequestId(100),
        client: ClientId(1)
    })));
    let c = s.dkp_counters();
    assert_eq!(c.padded_launches, 2);
    assert_eq!(c.be_blocks_padded, 260);
    assert_eq!(c.rest_launches, 1);
}

#[test]
fn a_request_finished_by_padding_replies_in_real_time_mode() {
    let mut s = setup(1);
    let (rt, be) = (StreamId(0), StreamId(1));
    let _ = std::iter::from_fn(|| s.poll_action()).count();
    step(
        &mut s,
        0,
        Event::RequestArrived {
            req: RequestId(100),
            client: ClientId(1),
            deadline: None,
        },
    );
    step(
        &mut s,
        1,
        Event::RequestArrived {
            req: RequestId(1),
            client: ClientId(0),
            deadline: None,
        },
    );
    step(
        &mut s,
        2,
        Event::KernelKilled {
            stream: be,
            tag: tag(100, 0),
        },
    );
    step(
        &mut s,
        3,
        Event::KernelEvicted {
            stream: be,
            tag: tag(100, 1),
        },
    );
    // Window 1: kernels 1, 2 and 3 are padded one after the other:
    // BE kernel 0 (100 blocks), then BE kernel 1 in two pieces.
    let mut done_be = false;
    let mut padded = Vec::new();
    for i in 0..4u32 {
        let a = step(
            &mut s,
            10 + i as u64,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, i),
            },
        );
        for x in &a {
            match x {
                DkpAction::Padded(p) => padded.push(p.parts[0].blocks.clone()),
                DkpAction::Core(Action::RequestDone { req, .. }) if *req == RequestId(100) => {
                    done_be = true;
                }
                _ => {}
            }
        }
    }
    assert_eq!(padded, vec![0..100, 0..160, 160..300]);
    assert!(done_be, "the BE request completed inside padded launches");
    assert_eq!(s.dkp_counters().be_kernels_completed, 2);
}

#[test]
fn queued_be_requests_are_started_and_padded_in_real_time_mode() {
    let mut s = setup(1);
    let (rt, be) = (StreamId(0), StreamId(1));
    let _ = std::iter::from_fn(|| s.poll_action()).count();
    let done = |a: &[DkpAction], r: u64| {
        a.contains(&DkpAction::Core(Action::RequestDone {
            req: RequestId(r),
            client: ClientId(1),
        }))
    };
    // Real-time mode first; then a best-effort request arrives and is
    // queued (the policy starts best-effort requests in normal mode
    // only), and a second real-time request waits behind the first.
    let a = arrive(&mut s, 0, 1, 0);
    assert!(a.contains(&DkpAction::Core(Action::Launch {
        stream: rt,
        tag: tag(1, 0)
    })));
    let a = arrive(&mut s, 1, 100, 1);
    assert!(a.is_empty(), "{a:?}");
    arrive(&mut s, 2, 2, 0);
    // The next real-time kernel is padded from the queued request, which
    // padding starts (preempted, nothing launched on its stream).
    let a = step(
        &mut s,
        10,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 0),
        },
    );
    assert_eq!(first_padded(&a), Some((tag(1, 1), tag(100, 0), 0..100)));
    assert!(!a
        .iter()
        .any(|x| matches!(x, DkpAction::Core(Action::Launch { stream, .. }) if *stream == be)));
    assert!(s.inner().core().has_request(be) && s.inner().core().is_paused(be));
    let a = step(
        &mut s,
        20,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 1),
        },
    );
    assert_eq!(first_padded(&a), Some((tag(1, 2), tag(100, 1), 0..160)));
    let a = step(
        &mut s,
        30,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 2),
        },
    );
    assert_eq!(first_padded(&a), Some((tag(1, 3), tag(100, 1), 160..300)));
    // Padding finishes request 100 as real-time request 1 ends; request
    // 2 starts at once (still real-time mode).
    let a = step(
        &mut s,
        40,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 3),
        },
    );
    assert!(done(&a, 100));
    assert!(a.contains(&DkpAction::Core(Action::Launch {
        stream: rt,
        tag: tag(2, 0)
    })));
    // The client's next request arrives during real-time mode: the next
    // real-time kernel pads it.
    arrive(&mut s, 41, 101, 1);
    let a = step(
        &mut s,
        50,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(2, 0),
        },
    );
    assert_eq!(first_padded(&a), Some((tag(2, 1), tag(101, 0), 0..100)));
    assert_eq!(s.dkp_counters().be_requests_started, 2);
    for k in 1..4 {
        step(
            &mut s,
            60 + k as u64,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(2, k),
            },
        );
    }
    // RT kernel 3's padding (kernel 1, blocks 160..300) finished it.
    assert_eq!(s.dkp_counters().be_kernels_completed, 4);
    assert_eq!(s.counters().requests_done, 4);
    // Normal mode: nothing left to restore or launch for request 101,
    // and the stream takes the next request as usual.
    assert!(!s.inner().core().has_request(be));
    let a = arrive(&mut s, 70, 102, 1);
    assert!(a.contains(&DkpAction::Core(Action::Launch {
        stream: be,
        tag: tag(102, 0)
    })));
}

/// The MI50 preset's capabilities: its kill lands before later launches.
pub(super) fn kill_first() -> Config {
    let mut cfg = Config::default();
    cfg.device.kill_precedes_later_launches = true;
    cfg
}

mod credit;
