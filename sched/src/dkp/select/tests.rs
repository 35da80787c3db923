use super::super::profile::mi50;
use super::*;

fn k(blocks: u32, threads: u32, lds: u32, occ: u32, curve: Vec<u64>) -> KernelChar {
    KernelChar::new(&mi50(), blocks, threads, lds, 65536 / occ, curve).unwrap()
}

#[test]
fn reserves_rt_cus_and_fills_the_rest() {
    let s = Selector::new(mi50());
    let rt = k(20, 256, 0, 4, vec![50_000]);
    let be = vec![k(1000, 256, 0, 8, vec![10_000, 20_000, 30_000, 40_000])];
    let cands = [Candidate {
        versions: &be,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(s.select(&rt, &cands, 0, &mut out));
    assert_eq!(out.rt_cus, 20);
    let p = &out.parts[0];
    // Rule 1 at co-residency 4: 40 us < 50 us; 5 would extend to 50.
    assert_eq!(p.per_cu, 4);
    assert_eq!(p.cus, 20..60);
    assert_eq!(p.blocks, 0..160);
    assert_eq!(out.be_cus(), 40);
}

#[test]
fn rule1_rejects_long_blocks_and_rule2_low_occupancy() {
    let s = Selector::new(mi50());
    let rt = k(20, 256, 0, 4, vec![15_000]);
    let long = vec![k(100, 256, 0, 8, vec![20_000])];
    // 100 blocks on 50 CUs, 2 per CU (12 us; one per CU would take
    // two waves, 20 us).
    let rt2 = k(100, 256, 0, 4, vec![10_000, 12_000]);
    // Occupancy 1: the proxy hosting it leaves one RT block per CU.
    let low_occ = vec![k(100, 256, 0, 1, vec![1_000])];
    let mut out = Padding::default();
    for (rt, be) in [(&rt, &long), (&rt2, &low_occ)] {
        let c = [Candidate {
            versions: be,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        assert!(!s.select(rt, &c, 0, &mut out));
        assert!(out.parts.is_empty());
    }
    // Rule 2 is about the co-residency the RT kernel runs at (REEF's
    // `min_occupancy`), not the kernels' own occupancies: beside an RT
    // kernel of one block per CU, the occupancy-2 kernel is padded
    // (issue 28: the literal comparison starved `reef`'s BE client).
    let low = vec![k(100, 256, 0, 2, vec![1_000])];
    assert!(low[0].occupancy < rt.occupancy);
    let c = [Candidate {
        versions: &low,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.rt_cus, 20);
    assert_eq!(out.parts[0].cus, 20..60);
    // Rule 1 is strict: a block as long as the real-time kernel fails,
    // a shorter one passes (the parts start together, Fig. 12).
    for (t, ok) in [(15_000, false), (14_999, true)] {
        let be = vec![k(100, 256, 0, 8, vec![t])];
        let c = [Candidate {
            versions: &be,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        assert_eq!(s.select(&rt, &c, 0, &mut out), ok);
    }
}

#[test]
fn rt_kernels_the_proxy_cannot_host_are_not_padded() {
    let s = Selector::new(mi50());
    // 289 threads with the whole register file: 227 registers per
    // thread, rounded up to the level-1 proxy's 256 = 73984 > 65536.
    let rt = KernelChar::new(&mi50(), 10, 289, 0, 65536, vec![100_000]).unwrap();
    let be = vec![k(10, 64, 0, 8, vec![1_000])];
    let c = [Candidate {
        versions: &be,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(!s.select(&rt, &c, 0, &mut out));
}

#[test]
fn rt_kernels_of_more_blocks_than_cus_keep_enough_cus_and_pad_the_rest() {
    let s = Selector::new(mi50());
    // 100 blocks at occupancy 4: alone, the busiest CUs hold 2 (20 us).
    let rt = k(100, 256, 0, 4, vec![10_000, 20_000, 30_000, 40_000]);
    assert_eq!(rt.kernel_ns, 20_000);
    let be = vec![k(1000, 256, 0, 8, vec![15_000, 30_000])];
    let c = [Candidate {
        versions: &be,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(s.select(&rt, &c, 0, &mut out));
    // 50 CUs x 2 blocks run it as fast; 10 CUs are left over.
    assert_eq!(out.rt_cus, 50);
    assert_eq!(out.parts[0].cus, 50..60);
    assert_eq!(out.parts[0].per_cu, 1);
    assert_eq!(out.parts[0].blocks, 0..10);
    assert_eq!(s.explain(&rt, &be), Verdict::Padded);
    // 150 blocks (3 on the busiest CU alone, 14 us) on 50 CUs. A
    // best-effort kernel needing 100 registers per thread (occupancy 5,
    // rule 2 holds) forces the 128-register proxy, under which only 2
    // real-time blocks fit a CU: 12 + 10 us instead of 14: not padded.
    // With 64 registers per thread it keeps the proxy and is padded.
    let rt = k(150, 256, 0, 4, vec![10_000, 12_000, 14_000, 16_000]);
    assert_eq!(rt.kernel_ns, 14_000);
    for (regs, ok) in [(100, false), (64, true)] {
        let be = vec![KernelChar::new(&mi50(), 100, 128, 0, regs * 128, vec![1_000]).unwrap()];
        assert!(be[0].occupancy >= rt.occupancy);
        let c = [Candidate {
            versions: &be,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        assert_eq!(s.select(&rt, &c, 0, &mut out), ok, "{regs} registers");
        if ok {
            assert_eq!(out.rt_cus, 50);
        } else {
            assert_eq!(s.explain(&rt, &be), Verdict::Rule2);
        }
    }
}

#[test]
fn explain_names_the_check_that_stops_a_kernel() {
    let s = Selector::new(mi50());
    let rt = k(20, 256, 0, 4, vec![15_000]);
    // 2 per CU on 50 CUs (see rule1_rejects_long_blocks...).
    let rt2 = k(100, 256, 0, 4, vec![10_000, 12_000]);
    let cases = [
        (&rt, k(100, 256, 0, 8, vec![10_000]), Verdict::Padded),
        (&rt2, k(100, 256, 0, 1, vec![1_000]), Verdict::Rule2),
        (&rt, k(100, 256, 0, 8, vec![15_000]), Verdict::Rule1),
    ];
    for (rt, be, want) in cases {
        let be = vec![be];
        assert_eq!(s.explain(rt, &be), want);
        let c = [Candidate {
            versions: &be,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        }];
        let mut out = Padding::default();
        assert_eq!(s.select(rt, &c, 0, &mut out), want == Verdict::Padded);
    }
    // Several versions: one passing both rules is enough.
    let vs = vec![
        k(100, 256, 0, 1, vec![1_000]),
        k(100, 256, 0, 8, vec![20_000]),
        k(200, 256, 0, 8, vec![9_000]),
    ];
    assert_eq!(s.explain(&rt2, &vs), Verdict::Padded);
    assert_eq!(s.explain(&rt2, &vs[..2]), Verdict::Rule1);
    let whole = k(120, 256, 0, 4, vec![50_000, 60_000]);
    assert_eq!(s.explain(&whole, &vs), Verdict::RtWholeGpu);
}

#[test]
fn whole_gpu_rt_kernels_are_not_padded() {
    let s = Selector::new(mi50());
    let rt = k(60, 256, 0, 4, vec![100_000]);
    let be = vec![k(10, 64, 0, 8, vec![1_000])];
    let c = [Candidate {
        versions: &be,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(!s.select(&rt, &c, 0, &mut out));
}

#[test]
fn greedy_over_queues_with_block_offsets() {
    let s = Selector::new(mi50());
    let rt = k(40, 256, 0, 4, vec![50_000]);
    // Task 0: 30 blocks left of 100 (offset 70), 1 per CU is all it may
    // take (rule 1 at 2 would be 60 us).
    let a = vec![k(100, 256, 0, 8, vec![30_000, 60_000])];
    let b = vec![k(500, 256, 0, 8, vec![10_000, 20_000])];
    let c = [
        Candidate {
            versions: &a,
            locked: Some(0),
            next_block: 70,
            following: &[],
            rule1_floor: 0,
        },
        Candidate {
            versions: &b,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        },
    ];
    let mut out = Padding::default();
    assert!(s.select(&rt, &c, 0, &mut out));
    // 20 free CUs, 1 per CU → blocks 70..90; nothing left for task 1.
    assert_eq!(out.parts.len(), 1);
    assert_eq!(out.parts[0].task, 0);
    assert_eq!(out.parts[0].blocks, 70..90);
    assert_eq!(out.parts[0].cus, 40..60);
}

#[test]
fn round_robin_start_and_partial_tail() {
    let s = Selector::new(mi50());
    let rt = k(40, 256, 0, 4, vec![50_000]);
    let a = vec![k(5, 256, 0, 8, vec![10_000, 20_000, 30_000, 40_000])];
    let b = vec![k(500, 256, 0, 8, vec![10_000, 20_000])];
    let c = [
        Candidate {
            versions: &a,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        },
        Candidate {
            versions: &b,
            locked: None,
            next_block: 0,
            following: &[],
            rule1_floor: 0,
        },
    ];
    let mut out = Padding::default();
    // From task 0: its 5 blocks fit on 2 CUs at 4 per CU (40 us < 50 us).
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].blocks, 0..5);
    assert_eq!(out.parts[0].cus, 40..42);
    assert_eq!(out.parts[1].task, 1);
    assert_eq!(out.parts[1].cus, 42..60);
    // 4 per CU (the curve extends to 40 us at 4) on 18 CUs.
    assert_eq!(out.parts[1].blocks, 0..72);
    // From task 1: it takes every free CU.
    assert!(s.select(&rt, &c, 1, &mut out));
    assert_eq!(out.parts.len(), 1);
    assert_eq!(out.parts[0].task, 1);
    assert_eq!(out.parts[0].blocks, 0..80);
}

#[test]
fn multi_version_picks_shortest_kernel_satisfying_both_rules() {
    let s = Selector::new(mi50());
    let rt = k(30, 256, 0, 4, vec![20_000]);
    let versions = vec![
        // Default: fastest kernel, but blocks too long (rule 1).
        k(60, 256, 0, 8, vec![30_000]),
        // Needs 300 registers per thread: no proxy hosts it.
        KernelChar::new(&mi50(), 120, 64, 0, 300 * 64, vec![10_000]).unwrap(),
        // Both rules hold; slower kernel (4 per CU: 51 us).
        k(240, 256, 0, 8, vec![8_000, 9_000, 30_000]),
        // Both rules hold; shortest of the admissible (2 per CU: 16 us).
        k(120, 256, 0, 8, vec![15_000, 16_000, 40_000]),
    ];
    assert!(versions[1].kernel_ns < versions[3].kernel_ns);
    assert!(versions[3].kernel_ns < versions[2].kernel_ns);
    let c = [Candidate {
        versions: &versions,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 3);
    assert_eq!(out.parts[0].per_cu, 2);
    // Locked to version 2, which admits, 11 blocks in: the shorter
    // version 3 (half its blocks) cannot continue it, since block 11
    // of 240 ends inside block 5 of 120: version 2 is kept.
    let c = [Candidate {
        versions: &versions,
        locked: Some(2),
        next_block: 11,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 2);
    assert_eq!(out.parts[0].per_cu, 2);
    assert_eq!(out.parts[0].blocks, 11..71);
    // 10 blocks in, on a block boundary of version 3: continued in the
    // shorter coarser version from 10 / 2.
    let c = [Candidate {
        versions: &versions,
        locked: Some(2),
        next_block: 10,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 3);
    assert_eq!(out.parts[0].blocks, 5..65);
    // Locked to the default, whose blocks fail rule 1: continued in the
    // shortest finer version that admits (120 blocks, 2 per block of
    // the default), from the converted offset 5 × 2.
    let c = [Candidate {
        versions: &versions,
        locked: Some(0),
        next_block: 5,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 3);
    assert_eq!(out.parts[0].blocks, 10..70);
    // Locked to version 1 (120 blocks, no proxy): version 3 has as
    // many blocks, not a finer tiling, so only version 2 (240) may
    // continue it, from 7 × 2.
    let c = [Candidate {
        versions: &versions,
        locked: Some(1),
        next_block: 7,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 2);
    assert_eq!(out.parts[0].blocks, 14..74);
    // Never to a coarser version that does not admit (version 0's
    // blocks fail rule 1, version 1 has no proxy), even on its
    // block boundary: 200 of 240 is block 50 of 60 and 100 of 120;
    // version 3 (120) admits and is shorter, so it continues.
    let c = [Candidate {
        versions: &versions,
        locked: Some(2),
        next_block: 200,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 3);
    assert_eq!(out.parts[0].blocks, 100..120);
    // Nor to a coarser version from inside one of its blocks: locked to
    // version 2 at 201 it stays.
    let c = [Candidate {
        versions: &versions,
        locked: Some(2),
        next_block: 201,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.parts[0].version, 2);
    assert_eq!(out.parts[0].blocks, 201..240);
}

#[test]
fn proxy_and_shared_memory_cover_the_largest_demand() {
    let s = Selector::new(mi50());
    // RT: 32 regs/thread (occupancy 8 at 256 threads).
    let rt = k(30, 256, 1024, 8, vec![50_000]);
    // BE: 64 regs/thread at 128 threads (occupancy 8), 4 KiB LDS.
    let be = vec![KernelChar::new(&mi50(), 400, 128, 4096, 64 * 128, vec![10_000; 8]).unwrap()];
    let c = [Candidate {
        versions: &be,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    let mut out = Padding::default();
    assert!(s.select(&rt, &c, 0, &mut out));
    assert_eq!(out.regs_per_thread, 64);
    assert_eq!(out.proxy_level, 4);
    assert_eq!(out.lds, 4096);
    assert_eq!(out.parts[0].per_cu, 8);
    // A version needing more registers than any proxy offers (and so
    // of too low an occupancy) is skipped.
    let huge = vec![KernelChar::new(&mi50(), 40, 64, 0, 300 * 64, vec![1_000]).unwrap()];
    let c = [Candidate {
        versions: &huge,
        locked: None,
        next_block: 0,
        following: &[],
        rule1_floor: 0,
    }];
    assert!(!s.select(&rt, &c, 0, &mut out));
}
