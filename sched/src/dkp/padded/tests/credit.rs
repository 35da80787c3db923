//! What a padded launch that leaves the device early (evicted or killed)
//! or partly does is credited, and how credit converts between versions.

use super::*;
use crate::dkp::padded::credit::convert_blocks;

#[test]
fn an_evicted_or_killed_padded_launch_is_padded_again_and_not_credited() {
    let (rt, be) = (StreamId(0), StreamId(1));
    for killed in [false, true] {
        let mut s = setup(1);
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        for (t, req, client) in [(0, 100, 1), (1, 1, 0)] {
            step(
                &mut s,
                t,
                Event::RequestArrived {
                    req: RequestId(req),
                    client: ClientId(client),
                    deadline: None,
                },
            );
        }
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
        let a = step(
            &mut s,
            10,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 0),
            },
        );
        assert_eq!(first_padded(&a), Some((tag(1, 1), tag(100, 0), 0..100)));
        // The padded launch of RT kernel 1 ends without running (or with
        // its blocks killed): no credit; the next padded launch pads the
        // same blocks again.
        let ev = if killed {
            Event::KernelKilled {
                stream: rt,
                tag: tag(1, 1),
            }
        } else {
            Event::KernelEvicted {
                stream: rt,
                tag: tag(1, 1),
            }
        };
        let a = step(&mut s, 20, ev);
        assert_eq!(s.dkp_counters().be_kernels_completed, 0);
        let again = first_padded(&a).map(|p| (p.1, p.2));
        assert_eq!(again, Some((tag(100, 0), 0..100)), "killed {killed}: {a:?}");
    }
}

#[test]
fn an_evicted_rest_keeps_the_credit_and_a_killed_one_drops_it() {
    let (rt, be) = (StreamId(0), StreamId(1));
    for killed in [false, true] {
        let mut s = setup(1);
        let _ = std::iter::from_fn(|| s.poll_action()).count();
        arrive(&mut s, 0, 100, 1);
        arrive(&mut s, 1, 1, 0);
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
        // RT kernels 1 and 2 pad BE kernel 0 and blocks 0..160 of kernel 1.
        for i in 0..3u32 {
            step(
                &mut s,
                10 + i as u64,
                Event::KernelCompleted {
                    stream: rt,
                    tag: tag(1, i),
                },
            );
        }
        // RT kernel 3 (padded with blocks 160..300) is evicted: its
        // padding is not credited; kernel 1 has 160 blocks done.
        step(
            &mut s,
            20,
            Event::KernelEvicted {
                stream: rt,
                tag: tag(1, 3),
            },
        );
        assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
        // A relaunch of BE kernel 1 on its own stream ends killed or evicted.
        let ev = if killed {
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 1),
            }
        } else {
            Event::KernelEvicted {
                stream: be,
                tag: tag(100, 1),
            }
        };
        step(&mut s, 30, ev);
        let c = s.be[1].credit.map(|c| c.done);
        if killed {
            assert_eq!(c, None, "killed blocks corrupt the output: redo all");
        } else {
            assert_eq!(c, Some(160), "an evicted relaunch ran no block");
        }
    }
}

#[test]
fn a_running_next_kernel_is_padded_once_its_kill_is_issued() {
    let (rt, be) = (StreamId(0), StreamId(1));
    // (kill lands before later launches, BE kernels the device queue
    // holds): with a successor queued the running kernel may already
    // have completed and the successor started, unseen (see
    // `next_plan`): no padding before the kill lands.
    for (kill_first_dev, dq) in [(false, 4), (true, 4), (true, 1)] {
        let mut cfg = if kill_first_dev {
            kill_first()
        } else {
            Config::default()
        };
        cfg.dq_capacity = dq;
        let mut s = setup_on(1, cfg);
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
        // Normal mode: BE kernel 0 starts running on its own stream.
        step(
            &mut s,
            5,
            Event::KernelStarted {
                stream: be,
                tag: tag(100, 0),
            },
        );
        // A real-time request: the BE stream is killed and RT kernel 0
        // transmitted at once. Where the kill lands first and nothing
        // follows the running kernel on its stream, it is padded with
        // BE kernel 0 from block 0 (REEF pads after the synchronous CU
        // reset); elsewhere the kill is waited for.
        let a = step(
            &mut s,
            10,
            Event::RequestArrived {
                req: RequestId(1),
                client: ClientId(0),
                deadline: None,
            },
        );
        let kill = a
            .iter()
            .position(|x| *x == DkpAction::Core(Action::KillStream { stream: be }));
        let pad = a.iter().position(|x| matches!(x, DkpAction::Padded(_)));
        if !kill_first_dev || dq > 1 {
            assert!(kill.is_some() && pad.is_none(), "{a:?}");
            continue;
        }
        assert!(kill.unwrap() < pad.expect("RT kernel 0 padded"), "{a:?}");
        let DkpAction::Padded(p) = &a[pad.unwrap()] else {
            unreachable!()
        };
        assert_eq!(p.tag, tag(1, 0));
        assert_eq!(
            (p.parts[0].tag, p.parts[0].blocks.clone()),
            (tag(100, 0), 0..100)
        );
        // The kill lands; the padded launch then completes: kernel 0 is
        // done by padding.
        step(
            &mut s,
            13,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 0),
            },
        );
        step(
            &mut s,
            60,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 0),
            },
        );
        assert_eq!(s.dkp_counters().be_kernels_completed, 1);
        assert_eq!(s.be[1].done_upto, 1);
    }
}

#[test]
fn a_successor_passing_its_check_moves_padding_past_a_completion_heard_under_the_flag() {
    let mut s = setup(1);
    let (rt, be) = (StreamId(0), StreamId(1));
    let _ = std::iter::from_fn(|| s.poll_action()).count();
    arrive(&mut s, 0, 100, 1);
    step(
        &mut s,
        5,
        Event::KernelStarted {
            stream: be,
            tag: tag(100, 0),
        },
    );
    arrive(&mut s, 10, 1, 0);
    for (t, ev) in [
        (
            11,
            Event::KernelCompleted {
                stream: be,
                tag: tag(100, 0),
            },
        ),
        (
            11,
            Event::KernelStarted {
                stream: be,
                tag: tag(100, 1),
            },
        ),
        (
            12,
            Event::KernelKilled {
                stream: be,
                tag: tag(100, 1),
            },
        ),
    ] {
        step(&mut s, t, ev);
    }
    assert_eq!(s.be[1].done_upto, 1);
    let a = step(
        &mut s,
        60,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(1, 0),
        },
    );
    assert_eq!(
        first_padded(&a).map(|p| (p.1, p.2.start)),
        Some((tag(100, 1), 0)),
        "{a:?}"
    );
}

#[test]
fn a_killed_rest_keeps_the_credit_and_its_kernel_is_padded_on() {
    let mut s = setup_on(1, kill_first());
    let (rt, be) = (StreamId(0), StreamId(1));
    let _ = std::iter::from_fn(|| s.poll_action()).count();
    // Real-time request 1 arrives first; a queued BE request is padded:
    // kernel 0 with RT kernel 1, blocks 0..160 of kernel 1 with RT
    // kernel 2; RT kernel 3's padding (blocks 160..300) is evicted.
    arrive(&mut s, 0, 1, 0);
    arrive(&mut s, 1, 100, 1);
    for i in 0..3u32 {
        step(
            &mut s,
            10 * (i as u64 + 1),
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, i),
            },
        );
    }
    let a = step(
        &mut s,
        40,
        Event::KernelEvicted {
            stream: rt,
            tag: tag(1, 3),
        },
    );
    assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
    // The evicted RT kernel is launched again (padded again), completes,
    // and normal mode relaunches the rest of BE kernel 1.
    let _ = a;
    let mut rest = None;
    for t in 41..50 {
        let a = step(
            &mut s,
            t,
            Event::KernelCompleted {
                stream: rt,
                tag: tag(1, 3),
            },
        );
        rest = a.iter().find_map(|x| match x {
            DkpAction::Rest { tag, blocks, .. } => Some((*tag, blocks.clone())),
            _ => None,
        });
        if rest.is_some() || s.be[1].req.is_none() {
            break;
        }
    }
    let Some((rtag, blocks)) = rest else {
        // The re-padded launch finished the kernel: nothing to test.
        panic!("expected a rest launch");
    };
    assert_eq!((rtag, blocks.start), (tag(100, 1), 160));
    step(
        &mut s,
        60,
        Event::KernelStarted {
            stream: be,
            tag: tag(100, 1),
        },
    );
    // The next real-time request kills the rest and pads on from block
    // 160 at once; the kill keeps the credited 160 blocks.
    let a = arrive(&mut s, 70, 2, 0);
    assert_eq!(
        first_padded(&a).map(|p| (p.1, p.2.start)),
        Some((tag(100, 1), 160))
    );
    step(
        &mut s,
        73,
        Event::KernelKilled {
            stream: be,
            tag: tag(100, 1),
        },
    );
    assert_eq!(s.be[1].credit.map(|c| (c.kernel, c.done)), Some((1, 160)));
    step(
        &mut s,
        120,
        Event::KernelCompleted {
            stream: rt,
            tag: tag(2, 0),
        },
    );
    assert_eq!(s.dkp_counters().be_kernels_completed, 2);
}

#[test]
fn a_kernel_continued_in_a_finer_version_keeps_an_exact_credit() {
    let mut s = setup_variant(1, Config::default(), Variant::MultiVersion);
    let vs = s.table.versions(ModelId(1), 1).to_vec();
    let (v, w) = (
        0u16,
        vs.iter()
            .position(|k| k.blocks == 4 * vs[0].blocks)
            .unwrap() as u16,
    );
    let (req, be) = (RequestId(100), StreamId(1));
    let b = &mut s.be[1];
    b.req = Some((req, ClientId(1)));
    b.done_upto = 1;
    b.credit = Some(Credit {
        kernel: 1,
        version: v,
        first: v,
        done: 10,
    });
    let part = |version: u16, blocks: Range<u32>| BePart {
        stream: be,
        client: ClientId(1),
        model: ModelId(1),
        tag: KernelTag { req, kernel: 1 },
        version,
        blocks,
        cus: 20..60,
        per_cu: 1,
        extra: 0..0,
        after: None,
    };
    // Blocks 40..50 of the version with 4× the blocks follow the 10
    // credited blocks of the default exactly: 50 of the finer version.
    s.credit(0, &part(w, 40..50));
    let c = s.be[1].credit.unwrap();
    assert_eq!((c.version, c.done, c.first), (w, 50, v));
    // A coarser part is never credited over a finer prefix that ends
    // inside one of its blocks (50 of 4× is inside block 12); the
    // credit stays.
    s.credit(0, &part(v, 12..13));
    let c = s.be[1].credit.unwrap();
    assert_eq!((c.version, c.done), (w, 50));
    // Once the finer prefix ends on a coarse block boundary (52 = 13 ×
    // 4), a part of the coarser version continues it exactly.
    s.credit(0, &part(w, 50..52));
    s.credit(0, &part(v, 13..15));
    let c = s.be[1].credit.unwrap();
    assert_eq!((c.version, c.done, c.first), (v, 15, v));
}

/// Parts that overlap the credited prefix (blocks planned again while
/// earlier parts were in flight) extend it to their union; before,
/// such a part was dropped and the kernel's completed blocks ran again
/// after later kernels had overwritten its inputs.
#[test]
fn overlapping_padded_parts_extend_the_credit_to_their_union() {
    let mut s = setup(1);
    let (req, be) = (RequestId(100), StreamId(1));
    let b = &mut s.be[1];
    b.req = Some((req, ClientId(1)));
    b.done_upto = 1;
    let part = |blocks: Range<u32>| BePart {
        stream: be,
        client: ClientId(1),
        model: ModelId(1),
        tag: KernelTag { req, kernel: 1 },
        version: 0,
        blocks,
        cus: 20..60,
        per_cu: 1,
        extra: 0..0,
        after: None,
    };
    s.credit(0, &part(0..100));
    s.credit(0, &part(0..250));
    assert_eq!(s.be[1].credit.map(|c| c.done), Some(250));
    // A gap is never credited over.
    s.credit(0, &part(260..270));
    assert_eq!(s.be[1].credit.map(|c| c.done), Some(250));
    s.credit(0, &part(240..300));
    assert!(s.be[1].credit.is_none());
    assert_eq!(s.be[1].done_upto, 2);
}

#[test]
fn credited_blocks_convert_between_nested_versions_only_when_exact() {
    // Finer: always exact.
    assert_eq!(convert_blocks(10, 60, 240), Some(40));
    // Coarser: only on a block boundary of the coarser version.
    assert_eq!(convert_blocks(52, 240, 60), Some(13));
    assert_eq!(convert_blocks(50, 240, 60), None);
    // Not nested tilings.
    assert_eq!(convert_blocks(4, 60, 90), None);
    assert_eq!(convert_blocks(4, 0, 60), None);
}
