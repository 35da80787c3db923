//! Property tests of reset-based preemption and restore (REEF §4.4, Figs. 8
//! and 9): preempting best-effort work at random moments never changes its
//! final outputs, whatever the policy and the preemption level; and restoring
//! a non-idempotent kernel from itself instead of from its idempotent group's
//! start is caught by value tracking.

use proptest::prelude::*;
use reef_model::idempotence::IdempotenceMetadata;
use reef_sched::fake::{drive, FakeDevice, FakeKernel, FakeModel};
use reef_sched::*;

const US: Time = 1_000;

/// A random model: kernel 0 reads the input; each later kernel either reads
/// the current buffer and writes a fresh one (idempotent) or updates the
/// current buffer in place (non-idempotent; its minimal idempotent group
/// starts at the kernel that wrote that buffer fresh).
fn model(kinds: &[(bool, u16)]) -> (FakeModel, Vec<usize>) {
    let mut kernels = Vec::new();
    let mut groups = Vec::new();
    let mut cur = 0usize;
    let mut buffers = 1usize;
    let mut last_fresh = 0usize;
    for (k, &(inplace, dur)) in kinds.iter().enumerate() {
        let duration = (10 + dur as Time % 290) * US;
        if inplace && k > 0 {
            kernels.push(FakeKernel {
                duration,
                reads: vec![cur],
                writes: vec![cur],
            });
            groups.push(last_fresh);
        } else {
            kernels.push(FakeKernel {
                duration,
                reads: vec![cur],
                writes: vec![buffers],
            });
            cur = buffers;
            buffers += 1;
            last_fresh = k;
            groups.push(k);
        }
    }
    (FakeModel { buffers, kernels }, groups)
}

fn meta(groups: &[usize]) -> IdempotenceMetadata {
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

struct Outcome {
    got: Vec<Vec<u64>>,
    want: Vec<Vec<u64>>,
    /// Restores that re-ran a started non-idempotent kernel from itself.
    restored_inplace: usize,
    all_done: bool,
    preemptions: usize,
}

fn run(
    policy: &str,
    level: PreemptLevel,
    cap: usize,
    be_models: &[(FakeModel, Vec<usize>)],
    claimed_groups: &[Vec<usize>],
    rt_arrivals: &[u32],
) -> Outcome {
    let rt = FakeModel::chain(3, 50 * US);
    let mut models = vec![ModelInfo::idempotent("rt", 3)];
    let mut dev_models = vec![rt];
    let mut clients = vec![ClientSpec {
        name: "rt".into(),
        model: ModelId(0),
        class: Class::RealTime,
    }];
    for (i, ((m, _), groups)) in be_models.iter().zip(claimed_groups).enumerate() {
        models.push(ModelInfo {
            name: format!("be{i}"),
            kernels: m.kernels.len() as u32,
            idempotence: Some(meta(groups)),
            successors_clear: None,
            alone_ns: None,
        });
        dev_models.push(m.clone());
        clients.push(ClientSpec {
            name: format!("be{i}"),
            model: ModelId(i as u32 + 1),
            class: Class::BestEffort,
        });
    }
    let cfg = Config {
        dq_capacity: cap,
        device: DeviceCaps {
            max_level: level,
            can_clear_device_queue: false,
            kill_precedes_later_launches: false,
        },
        ..Config::default()
    };
    let mut s = Scheduler::new(policy_by_name(policy).unwrap(), cfg, models, clients).unwrap();
    let mut dev = FakeDevice::new(dev_models, 20 * US, 3 * US);
    let mut arrivals = Vec::new();
    for i in 0..be_models.len() {
        arrivals.push((0, RequestId(1000 + i as u64), ClientId(i as u32 + 1), i + 1));
    }
    for (j, &t) in rt_arrivals.iter().enumerate() {
        arrivals.push((t as Time * US, RequestId(j as u64 + 1), ClientId(0), 0));
    }
    let log = drive(&mut s, &mut dev, arrivals);
    let mut restored_inplace = 0;
    for (_, a) in &log.actions {
        if let Action::Restore {
            stream,
            exec_index: Some(e),
            from_kernel,
            ..
        } = a
        {
            // A restore that re-runs an in-place kernel which had started.
            let groups = &be_models[stream.0 as usize - 1].1;
            if from_kernel == e && groups[*e as usize] != *e as usize {
                restored_inplace += 1;
            }
        }
    }
    let mut got = Vec::new();
    let mut want = Vec::new();
    for (i, (m, _)) in be_models.iter().enumerate() {
        let r = RequestId(1000 + i as u64);
        got.push(dev.values(r).unwrap().to_vec());
        want.push(m.reference_output(r));
    }
    let total = be_models.len() + rt_arrivals.len();
    Outcome {
        got,
        want,
        restored_inplace,
        all_done: log.done.len() == total,
        preemptions: s.preemptions().len(),
    }
}

fn kinds() -> impl Strategy<Value = Vec<(bool, u16)>> {
    prop::collection::vec((prop::bool::weighted(0.3), any::<u16>()), 2..24)
}

fn level() -> impl Strategy<Value = PreemptLevel> {
    prop_oneof![
        Just(PreemptLevel::HostQueue),
        Just(PreemptLevel::LazyEviction),
        Just(PreemptLevel::Kill),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn preempting_at_random_moments_preserves_outputs(
        be in prop::collection::vec(kinds(), 1..3),
        rt in prop::collection::vec(0u32..4000, 0..5),
        policy in prop_oneof![Just("reef"), Just("wait")],
        level in level(),
        cap in 1usize..6,
    ) {
        let models: Vec<_> = be.iter().map(|k| model(k)).collect();
        let groups: Vec<_> = models.iter().map(|m| m.1.clone()).collect();
        let o = run(policy, level, cap, &models, &groups, &rt);
        prop_assert!(o.all_done);
        prop_assert_eq!(o.got, o.want);
        if rt.is_empty() {
            prop_assert_eq!(o.preemptions, 0);
        }
    }

    #[test]
    fn restoring_a_non_idempotent_kernel_from_itself_is_detected(
        be in kinds(),
        rt in prop::collection::vec(0u32..4000, 1..5),
    ) {
        let m = model(&be);
        // Wrong metadata: every kernel claims to be idempotent. A kill
        // interrupts the in-place kernel (levels 1-2 let it complete).
        let claimed: Vec<usize> = (0..m.1.len()).collect();
        let o = run("reef", PreemptLevel::Kill, 4, std::slice::from_ref(&m), &[claimed], &rt);
        prop_assert!(o.all_done);
        if o.restored_inplace > 0 {
            prop_assert_ne!(&o.got, &o.want);
        }
    }
}

#[test]
fn the_detection_property_is_exercised() {
    // A model whose only long kernel is in place: a preemption during it
    // must restore from it, and with wrong metadata corrupt the output.
    let kinds = [(false, 0), (false, 0), (true, 280), (false, 0)];
    let m = model(&kinds);
    assert_eq!(m.1, vec![0, 1, 1, 3]);
    // Kernel 2 runs from 20+10+20+10+20 = 80 us to 80+290 us.
    let wrong = run(
        "reef",
        PreemptLevel::Kill,
        4,
        std::slice::from_ref(&m),
        &[vec![0, 1, 2, 3]],
        &[200],
    );
    assert_eq!(wrong.restored_inplace, 1);
    assert_ne!(wrong.got, wrong.want);
    let right = run(
        "reef",
        PreemptLevel::Kill,
        4,
        std::slice::from_ref(&m),
        std::slice::from_ref(&m.1),
        &[200],
    );
    // Correct metadata restarts from the group start instead.
    assert_eq!(right.restored_inplace, 0);
    assert_eq!(right.preemptions, 1);
    assert_eq!(right.got, right.want);
}
