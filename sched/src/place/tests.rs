//! Tests of the placement layer (issue 16, "Must show").

use super::*;
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

/// A V100 as placement sees it: 80 SMs, 64 warps, 32 blocks and 2048
/// threads per SM (NVIDIA Volta tuning guide), 16 GiB (the paper's p3.8xlarge).
fn v100() -> DeviceLimits {
    DeviceLimits {
        sms: 80,
        warp_size: 32,
        max_warps_per_sm: 64,
        max_blocks_per_sm: 32,
        max_threads_per_sm: 2048,
        memory: 16 * GIB,
    }
}

fn small(mem_gib: u64) -> DeviceLimits {
    DeviceLimits {
        sms: 4,
        warp_size: 32,
        max_warps_per_sm: 8,
        max_blocks_per_sm: 4,
        max_threads_per_sm: 256,
        memory: mem_gib * GIB,
    }
}

fn needs(mem: u64, tpb: u32, blocks: u64) -> TaskNeeds {
    TaskNeeds {
        memory: mem,
        threads_per_block: tpb,
        blocks,
    }
}

fn placer(p: PlacePolicy, devs: Vec<DeviceLimits>) -> Placer {
    Placer::new(p, devs).unwrap()
}

fn views(p: &Placer) -> Vec<DeviceView> {
    (0..p.devices()).map(|d| p.device(d).unwrap()).collect()
}

fn sm_state(p: &Placer) -> Vec<Vec<SmUse>> {
    p.devs.iter().map(|d| d.sm.clone()).collect()
}

/// Builds a state where device d carries `warps[d]` warps and `used[d]` GiB
/// with one task each (job 1000+d), placed with the Alg. 3 placer itself
/// on single-device placers is not possible, so set the fields directly.
fn alg3_state(warps: &[u64], used_gib: &[u64]) -> Placer {
    let mut p = placer(PlacePolicy::Alg3, vec![v100(); warps.len()]);
    for (d, dev) in p.devs.iter_mut().enumerate() {
        dev.warps = warps[d];
        dev.mem_used = used_gib[d] * GIB;
    }
    p
}

#[test]
fn alg3_picks_fewest_warps_among_devices_with_memory() {
    // Device 1 has the fewest warps but not the memory; of 0, 2, 3 the
    // fewest warps are on 2.
    let mut p = alg3_state(&[900, 10, 300, 600], &[2, 15, 4, 0]);
    let b = p
        .task_begin(JobId(1), TaskId(1), needs(4 * GIB, 256, 10))
        .unwrap();
    assert_eq!(b, Begin::Placed(2));
    assert_eq!(p.device(2).unwrap().warps, 300 + 8 * 10);
    assert_eq!(p.device(2).unwrap().memory_used, 8 * GIB);
}

#[test]
fn alg3_prefers_an_idle_device_unlike_the_printed_pseudocode() {
    // The printed pseudocode (MinWarps <- 0; switch when MinWarps < InUse)
    // would pick device 0, the most loaded; the prose picks the idle one.
    let mut p = alg3_state(&[5000, 0, 2000], &[1, 1, 1]);
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(GIB, 128, 4))
            .unwrap(),
        Begin::Placed(1)
    );
}

#[test]
fn alg3_ties_go_to_the_lowest_index_and_exact_fit_fits() {
    let mut p = alg3_state(&[40, 40, 40], &[16, 6, 6]);
    // Exactly the 10 GiB free on devices 1 and 2.
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(10 * GIB, 32, 1))
            .unwrap(),
        Begin::Placed(1)
    );
    // No device has 10 GiB left now but 2; then none.
    assert_eq!(
        p.task_begin(JobId(1), TaskId(2), needs(10 * GIB, 32, 1))
            .unwrap(),
        Begin::Placed(2)
    );
    assert_eq!(
        p.task_begin(JobId(1), TaskId(3), needs(GIB, 32, 1))
            .unwrap(),
        Begin::Waiting
    );
}

#[test]
fn alg3_spreads_equal_tasks_over_devices() {
    let mut p = placer(PlacePolicy::Alg3, vec![v100(); 4]);
    let mut got = Vec::new();
    for t in 0..8 {
        match p
            .task_begin(JobId(t), TaskId(t), needs(GIB, 256, 100))
            .unwrap()
        {
            Begin::Placed(d) => got.push(d),
            Begin::Waiting => panic!("waited"),
        }
    }
    assert_eq!(got, vec![0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn task_end_releases_exactly_what_task_begin_reserved() {
    for pol in [
        PlacePolicy::Sa,
        PlacePolicy::Cg { jobs_per_device: 2 },
        PlacePolicy::SchedGpu,
        PlacePolicy::Alg2,
        PlacePolicy::Alg3,
    ] {
        let mut p = placer(pol, vec![v100(); 3]);
        // Background load from two other jobs.
        p.task_begin(JobId(1), TaskId(1), needs(3 * GIB, 256, 300))
            .unwrap();
        p.task_begin(JobId(2), TaskId(2), needs(5 * GIB, 100, 77))
            .unwrap();
        let before = (views(&p), sm_state(&p));
        let b = p
            .task_begin(JobId(3), TaskId(3), needs(2 * GIB + 12345, 192, 1000))
            .unwrap();
        let Begin::Placed(d) = b else {
            panic!("{pol:?}: task 3 waited");
        };
        assert_ne!(views(&p)[d], before.0[d], "{pol:?}: nothing reserved");
        if pol.binds_jobs() {
            // SA and CG keep the job's device until job_end.
            p.task_end(TaskId(3)).unwrap();
            p.job_end(JobId(3));
        } else {
            p.task_end(TaskId(3)).unwrap();
        }
        assert_eq!((views(&p), sm_state(&p)), before, "{pol:?}");
        assert_eq!(
            p.task_end(TaskId(3)),
            Err(PlaceError::UnknownTask(TaskId(3)))
        );
    }
}

#[test]
fn a_crashed_job_frees_everything_it_held_and_nothing_else() {
    for pol in [PlacePolicy::Alg2, PlacePolicy::Alg3, PlacePolicy::SchedGpu] {
        let mut p = placer(pol, vec![v100(), v100()]);
        p.task_begin(JobId(1), TaskId(10), needs(8 * GIB, 256, 100))
            .unwrap();
        let alone = (views(&p), sm_state(&p));
        let d10 = p.device_of(TaskId(10));
        // Job 2: two running tasks and one waiting.
        p.task_begin(JobId(2), TaskId(20), needs(6 * GIB, 128, 200))
            .unwrap();
        p.task_begin(JobId(2), TaskId(21), needs(7 * GIB, 64, 50))
            .unwrap();
        assert_eq!(
            p.task_begin(JobId(2), TaskId(22), needs(11 * GIB, 64, 50))
                .unwrap(),
            Begin::Waiting,
            "{pol:?}"
        );
        p.job_end(JobId(2));
        assert_eq!((views(&p), sm_state(&p)), alone, "{pol:?}");
        assert_eq!(p.device_of(TaskId(10)), d10);
        assert_eq!(p.waiting(), 0);
        assert!(p.device_of(TaskId(20)).is_none());
        assert_eq!(
            p.task_end(TaskId(22)),
            Err(PlaceError::UnknownTask(TaskId(22)))
        );
        // The survivor still ends cleanly.
        p.task_end(TaskId(10)).unwrap();
        assert!(views(&p).iter().all(|v| v.memory_used == 0 && v.warps == 0));
    }
}

#[test]
fn waiting_tasks_are_placed_in_arrival_order_with_backfill() {
    let mut p = placer(PlacePolicy::Alg3, vec![v100()]);
    p.task_begin(JobId(0), TaskId(0), needs(12 * GIB, 64, 1))
        .unwrap();
    // Free: 4 GiB. 10 waits, 11 waits (too big), 12 fits now.
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(10 * GIB, 64, 1))
            .unwrap(),
        Begin::Waiting
    );
    assert_eq!(
        p.task_begin(JobId(2), TaskId(2), needs(9 * GIB, 64, 1))
            .unwrap(),
        Begin::Waiting
    );
    assert_eq!(
        p.task_begin(JobId(3), TaskId(3), needs(3 * GIB, 64, 1))
            .unwrap(),
        Begin::Placed(0)
    );
    // 13 GiB free after the end of task 0: task 1 (10) first, then task 2
    // (9) does not fit any more and keeps waiting.
    p.task_end(TaskId(0)).unwrap();
    assert_eq!(p.poll_placed(), Some((TaskId(1), 0)));
    assert_eq!(p.poll_placed(), None);
    assert_eq!(p.waiting(), 1);
    p.task_end(TaskId(1)).unwrap();
    assert_eq!(p.poll_placed(), Some((TaskId(2), 0)));
    let c = p.counters();
    assert_eq!(
        (c.placed_at_begin, c.waited, c.placed_after_wait),
        (2, 2, 2)
    );
}

#[test]
fn alg2_emulates_blocks_per_sm_and_waits_when_sms_are_full() {
    // 4 SMs x 4 blocks (128 threads: 4 warps; 8 warps/SM -> 2 blocks/SM).
    let mut p = placer(PlacePolicy::Alg2, vec![small(16), small(16)]);
    assert_eq!(
        p.task_begin(JobId(0), TaskId(0), needs(GIB, 128, 6))
            .unwrap(),
        Begin::Placed(0)
    );
    // Device 0 has room for 2 more blocks of this size; 3 do not fit there.
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(GIB, 128, 3))
            .unwrap(),
        Begin::Placed(1)
    );
    assert_eq!(
        p.task_begin(JobId(2), TaskId(2), needs(GIB, 128, 2))
            .unwrap(),
        Begin::Placed(0)
    );
    assert_eq!(p.device(0).unwrap().sm_blocks, 8);
    // Both full for a 6-block task (device 1 has 5 slots).
    assert_eq!(
        p.task_begin(JobId(3), TaskId(3), needs(GIB, 128, 6))
            .unwrap(),
        Begin::Waiting
    );
    // Alg. 3 would have placed it (compute is soft there).
    let mut q = placer(PlacePolicy::Alg3, vec![small(16), small(16)]);
    for t in 0..4 {
        let b = [6, 3, 2, 6][t as usize];
        assert!(matches!(
            q.task_begin(JobId(t), TaskId(t), needs(GIB, 128, b))
                .unwrap(),
            Begin::Placed(_)
        ));
    }
    p.task_end(TaskId(1)).unwrap();
    assert_eq!(p.poll_placed(), Some((TaskId(3), 1)));
}

#[test]
fn alg2_caps_a_grid_larger_than_the_device_holds_resident() {
    // 2738 blocks of 256 threads (8 warps): a V100 holds 8 per SM, 640.
    let mut p = placer(PlacePolicy::Alg2, vec![v100(), v100()]);
    assert_eq!(
        p.task_begin(JobId(0), TaskId(0), needs(GIB, 256, 2738))
            .unwrap(),
        Begin::Placed(0)
    );
    assert_eq!(p.device(0).unwrap().sm_blocks, 640);
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(GIB, 256, 2738))
            .unwrap(),
        Begin::Placed(1)
    );
    // A third needs a whole empty device.
    assert_eq!(
        p.task_begin(JobId(2), TaskId(2), needs(GIB, 256, 2738))
            .unwrap(),
        Begin::Waiting
    );
    p.task_end(TaskId(0)).unwrap();
    assert_eq!(p.poll_placed(), Some((TaskId(2), 0)));
    // Blocks too large for any SM are refused, not queued forever.
    assert!(matches!(
        p.task_begin(JobId(3), TaskId(3), needs(GIB, 4096, 1)),
        Err(PlaceError::NeverFitsBlock { .. })
    ));
}

#[test]
fn schedgpu_uses_device_0_only() {
    let mut p = placer(PlacePolicy::SchedGpu, vec![v100(); 4]);
    for t in 0..3 {
        assert_eq!(
            p.task_begin(JobId(t), TaskId(t), needs(5 * GIB, 256, 1000))
                .unwrap(),
            Begin::Placed(0)
        );
    }
    assert_eq!(
        p.task_begin(JobId(3), TaskId(3), needs(5 * GIB, 256, 1))
            .unwrap(),
        Begin::Waiting
    );
    assert!((1..4).all(|d| p.device(d).unwrap().tasks == 0));
}

#[test]
fn sa_binds_one_job_per_device_and_cg_packs_to_its_ratio() {
    let mut p = placer(PlacePolicy::Sa, vec![v100(); 2]);
    assert_eq!(
        p.task_begin(JobId(0), TaskId(0), needs(GIB, 32, 1))
            .unwrap(),
        Begin::Placed(0)
    );
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(GIB, 32, 1))
            .unwrap(),
        Begin::Placed(1)
    );
    assert_eq!(
        p.task_begin(JobId(2), TaskId(2), needs(GIB, 32, 1))
            .unwrap(),
        Begin::Waiting
    );
    // Job 0's next task stays on its device even after its first ended.
    p.task_end(TaskId(0)).unwrap();
    assert_eq!(p.poll_placed(), None);
    assert_eq!(
        p.task_begin(JobId(0), TaskId(3), needs(GIB, 32, 1))
            .unwrap(),
        Begin::Placed(0)
    );
    p.job_end(JobId(0));
    assert_eq!(p.poll_placed(), Some((TaskId(2), 0)));
    // SA knows no needs: an oversized job is placed anyway.
    let mut p = placer(PlacePolicy::Sa, vec![v100()]);
    p.task_begin(JobId(0), TaskId(0), needs(20 * GIB, 32, 1))
        .unwrap();
    assert!(p.device(0).unwrap().memory_used > p.device(0).unwrap().memory_total);

    let mut p = placer(PlacePolicy::Cg { jobs_per_device: 2 }, vec![v100(); 2]);
    let ds: Vec<_> = (0..5)
        .map(|t| {
            p.task_begin(JobId(t), TaskId(t), needs(9 * GIB, 32, 1))
                .unwrap()
        })
        .collect();
    use Begin::*;
    assert_eq!(
        ds,
        vec![Placed(0), Placed(1), Placed(0), Placed(1), Waiting]
    );
    // CG oversubscribes: 18 GiB declared on a 16 GiB device.
    assert_eq!(p.device(0).unwrap().memory_used, 18 * GIB);
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    assert!(matches!(
        PlacePolicy::by_name("cg:0"),
        Err(PlaceError::UnknownPolicy(_))
    ));
    assert!(matches!(
        PlacePolicy::by_name("best"),
        Err(PlaceError::UnknownPolicy(_))
    ));
    assert_eq!(
        PlacePolicy::by_name("cg:6").unwrap(),
        PlacePolicy::Cg { jobs_per_device: 6 }
    );
    assert_eq!(PlacePolicy::by_name("mgb").unwrap(), PlacePolicy::Alg3);
    assert!(matches!(
        Placer::new(PlacePolicy::Alg3, vec![]),
        Err(PlaceError::NoDevices)
    ));
    let mut p = placer(PlacePolicy::Alg3, vec![v100()]);
    let e = p
        .task_begin(JobId(0), TaskId(0), needs(17 * GIB, 32, 1))
        .unwrap_err();
    assert!(e.to_string().contains("more than any device"), "{e}");
    assert_eq!(
        p.task_begin(JobId(0), TaskId(1), needs(GIB, 0, 1)),
        Err(PlaceError::EmptyTask(TaskId(1)))
    );
    p.task_begin(JobId(0), TaskId(2), needs(GIB, 32, 1))
        .unwrap();
    assert_eq!(
        p.task_begin(JobId(0), TaskId(2), needs(GIB, 32, 1)),
        Err(PlaceError::DuplicateTask(TaskId(2)))
    );
}

#[derive(Debug, Clone)]
enum Op {
    Begin {
        job: u64,
        mem_mib: u64,
        tpb: u32,
        blocks: u64,
    },
    End(usize),
    JobEnd(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..12, 1u64..20_000, 1u32..1025, 1u64..5000)
            .prop_map(|(job, mem_mib, tpb, blocks)| Op::Begin { job, mem_mib, tpb, blocks }),
        2 => (0usize..64).prop_map(Op::End),
        1 => (0u64..12).prop_map(Op::JobEnd),
    ]
}

/// Runs `ops`; returns the largest oversubscription seen (bytes over
/// capacity on any device at any time, 0 if none) after checking the
/// bookkeeping invariants.
fn run_ops(pol: PlacePolicy, devs: &[DeviceLimits], ops: &[Op]) -> u64 {
    let mut p = placer(pol, devs.to_vec());
    let mut next = 0u64;
    let mut live: Vec<TaskId> = Vec::new();
    let mut worst = 0u64;
    for o in ops {
        match *o {
            Op::Begin {
                job,
                mem_mib,
                tpb,
                blocks,
            } => {
                let t = TaskId(next);
                next += 1;
                match p.task_begin(JobId(job), t, needs(mem_mib << 20, tpb, blocks)) {
                    Ok(_) => live.push(t),
                    Err(PlaceError::NeverFitsMemory { .. } | PlaceError::NeverFitsBlock { .. }) => {
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            Op::End(i) => {
                if !live.is_empty() {
                    let t = live.swap_remove(i % live.len());
                    // Ended already by a job_end is fine.
                    let _ = p.task_end(t);
                }
            }
            Op::JobEnd(j) => p.job_end(JobId(j)),
        }
        while p.poll_placed().is_some() {}
        for d in 0..p.devices() {
            let v = p.device(d).unwrap();
            worst = worst.max(v.memory_used.saturating_sub(v.memory_total));
        }
        // Bookkeeping: device totals equal the sum over placed tasks.
        for (d, dev) in p.devs.iter().enumerate() {
            let mem: u64 = p
                .placed
                .values()
                .filter(|x| x.dev == d)
                .map(|x| x.memory)
                .sum();
            let warps: u64 = p
                .placed
                .values()
                .filter(|x| x.dev == d)
                .map(|x| x.warps)
                .sum();
            assert_eq!(dev.mem_used, mem);
            assert_eq!(dev.warps, warps);
            for u in &dev.sm {
                assert!(u.blocks <= dev.lim.max_blocks_per_sm);
                assert!(u.warps <= dev.lim.max_warps_per_sm);
                assert!(u.threads <= dev.lim.max_threads_per_sm);
            }
        }
    }
    worst
}

fn node() -> impl Strategy<Value = Vec<DeviceLimits>> {
    prop::collection::vec((4u64..33, prop::bool::ANY), 1..5).prop_map(|v| {
        v.into_iter()
            .map(|(g, big)| DeviceLimits {
                memory: g * GIB,
                ..if big { v100() } else { small(0) }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// No memory-safe policy ever reserves more than a device holds.
    #[test]
    fn memory_safe_policies_never_oversubscribe(devs in node(), ops in prop::collection::vec(op(), 1..200)) {
        for pol in [PlacePolicy::SchedGpu, PlacePolicy::Alg2, PlacePolicy::Alg3] {
            prop_assert_eq!(run_ops(pol, &devs, &ops), 0, "{:?}", pol);
        }
    }

    /// SA oversubscribes only with a job larger than its device: with one
    /// task per job at a time of at most the smallest device's memory, never.
    #[test]
    fn sa_never_oversubscribes_without_oversized_jobs(devs in node(), ops in prop::collection::vec(op(), 1..200)) {
        let min = devs.iter().map(|d| d.memory).min().unwrap();
        // One task per job: give each Begin a fresh job id; cap its memory.
        let ops: Vec<Op> = ops.into_iter().enumerate().map(|(i, o)| match o {
            Op::Begin { mem_mib, tpb, blocks, .. } => Op::Begin {
                job: 1000 + i as u64, mem_mib: mem_mib.min(min >> 20), tpb, blocks },
            Op::JobEnd(j) => Op::JobEnd(1000 + j * 16),
            o => o,
        }).collect();
        prop_assert_eq!(run_ops(PlacePolicy::Sa, &devs, &ops), 0);
    }
}

#[test]
fn the_property_can_fail_cg_oversubscribes_random_mixes() {
    // The same checker reports CG's oversubscription on a plain mix.
    let ops: Vec<Op> = (0..8)
        .map(|j| Op::Begin {
            job: j,
            mem_mib: 6 << 10,
            tpb: 256,
            blocks: 100,
        })
        .collect();
    assert!(
        run_ops(
            PlacePolicy::Cg { jobs_per_device: 4 },
            &[v100(), v100()],
            &ops
        ) > 0
    );
    assert_eq!(run_ops(PlacePolicy::Alg3, &[v100(), v100()], &ops), 0);
}

#[test]
fn rt_clients_get_their_own_device_and_be_clients_spread() {
    let devs = vec![v100(); 4];
    // Two RT clients, six BE clients of equal needs.
    let n = needs(GIB, 256, 100);
    let mut c = vec![(false, n); 6];
    c.insert(1, (true, n));
    c.insert(5, (true, n));
    let d = place_inference_clients(&devs, &c).unwrap();
    assert_ne!(d[1], d[5], "two RT clients share a device: {d:?}");
    let mut per = [0; 4];
    for &x in &d {
        per[x] += 1;
    }
    assert_eq!(per, [2, 2, 2, 2], "{d:?}");
    // Memory still binds: a model larger than what is left is refused.
    let big = vec![
        (true, needs(10 * GIB, 32, 1)),
        (false, needs(10 * GIB, 32, 1)),
    ];
    let e = place_inference_clients(&devs[..1], &big).unwrap_err();
    assert!(
        matches!(
            e,
            PlaceError::NeverFitsMemory {
                task: TaskId(1),
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn task_begin_on_places_where_asked_only_if_the_memory_fits() {
    let mut p = placer(PlacePolicy::Alg3, vec![small(4), small(4)]);
    let g = 1u64 << 30;
    // Alg. 3 would pick device 0 (tie, lowest index); the pin wins.
    assert!(p
        .task_begin_on(JobId(1), TaskId(1), needs(3 * g, 128, 8), 1)
        .unwrap());
    assert_eq!(p.device_of(TaskId(1)), Some(1));
    // 2 GiB does not fit in device 1's remaining 1 GiB: nothing changes.
    assert!(!p
        .task_begin_on(JobId(1), TaskId(2), needs(2 * g, 128, 8), 1)
        .unwrap());
    assert_eq!(p.device(1).unwrap().memory_used, 3 * g);
    assert!(!p
        .task_begin_on(JobId(1), TaskId(3), needs(g, 128, 8), 7)
        .unwrap());
    assert_eq!(
        p.task_begin_on(JobId(1), TaskId(1), needs(g, 128, 8), 0),
        Err(PlaceError::DuplicateTask(TaskId(1)))
    );
    p.task_end(TaskId(1)).unwrap();
    assert_eq!(p.device(1).unwrap().memory_used, 0);
}

/// Memory a device's driver reports beyond the placer's reservations is
/// taken: Alg. 3 places on the smaller of the two free figures, and what
/// the placer reserved itself is not counted twice.
#[test]
fn memory_the_driver_reports_in_use_is_not_placed_on() {
    let mut p = placer(PlacePolicy::Alg3, vec![small(4), small(4)]);
    // Device 0 idle by placement but 3.5 GiB in use by the driver: a
    // 1 GiB task goes to device 1 although device 0 has fewer warps.
    p.set_unreserved_memory(0, 3 * GIB + GIB / 2);
    assert_eq!(
        p.task_begin(JobId(1), TaskId(1), needs(GIB, 64, 1))
            .unwrap(),
        Begin::Placed(1)
    );
    // Device 1: 1 GiB reserved, and the driver reports 1 GiB in use (the
    // same memory): 3 GiB still free there.
    p.set_unreserved_memory(1, GIB);
    assert!(p
        .task_begin_on(JobId(1), TaskId(2), needs(3 * GIB, 64, 1), 1)
        .unwrap());
    // Nothing fits anywhere now; freed driver memory makes device 0 usable.
    assert_eq!(
        p.task_begin(JobId(1), TaskId(3), needs(GIB, 64, 1))
            .unwrap(),
        Begin::Waiting
    );
    p.task_end(TaskId(3)).unwrap();
    p.set_unreserved_memory(0, 0);
    assert_eq!(
        p.task_begin(JobId(1), TaskId(4), needs(GIB, 64, 1))
            .unwrap(),
        Begin::Placed(0)
    );
}
