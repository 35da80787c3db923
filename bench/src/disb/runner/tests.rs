use super::*;
use crate::disb::workload::Workload;
use std::path::Path;

fn setup(w: &Workload) -> (DeviceSpec, Vec<PreparedModel>, Vec<f64>) {
    setup_on(w, "mi50")
}

fn setup_on(w: &Workload, device: &str) -> (DeviceSpec, Vec<PreparedModel>, Vec<f64>) {
    let spec = DeviceSpec::preset(device).unwrap();
    let dir = reef_model::default_models_dir();
    let mut models: Vec<PreparedModel> = Vec::new();
    for t in &w.tasks {
        if !models.iter().any(|m| m.name == t.model_dir) {
            let m = reef_model::load_named(&dir, &t.model_dir).unwrap();
            models.push(PreparedModel::new(m, &spec).unwrap());
        }
    }
    let sa = models
        .iter()
        .map(|m| m.model.measured_latency_ns().unwrap() as f64)
        .collect();
    (spec, models, sa)
}

/// DISB workload `wl` on the MI50: the device, its models and the
/// clients' plans (seed 7).
fn planned(wl: &str) -> (DeviceSpec, Vec<PreparedModel>, Vec<ClientPlan>) {
    let path = reef_model::shared_dir().join(format!("disb/workloads/{wl}.json"));
    let w = Workload::load(&path).unwrap();
    let (spec, models, sa) = setup(&w);
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    let plans = plan_clients(&w, &idx, &sa, 7);
    (spec, models, plans)
}

fn opts(policy: &str, track: bool) -> RunOptions {
    RunOptions {
        policy: policy.into(),
        seed: 7,
        dq_capacity: 4,
        track_values: track,
        ..RunOptions::default()
    }
}

#[test]
fn reef_restores_preempted_work_without_corrupting_outputs() {
    let w = Workload::load(&reef_model::shared_dir().join("disb/workloads/A.json")).unwrap();
    let (spec, models, sa) = setup(&w);
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    let plans = plan_clients(&w, &idx, &sa, 7);
    let out = simulate(&spec, &models, plans, 300_000_000, &opts("reef", true)).unwrap();
    assert!(out.preemptions.len() >= 25, "{}", out.preemptions.len());
    assert!(out.restores >= 20);
    assert_eq!(out.corrupted_outputs, 0);
    assert!(out.clients[0].completed >= 29, "{:?}", out.clients[0]);
    assert!(out.clients[1].completed >= 5, "{:?}", out.clients[1]);
    assert!(out
        .preemptions
        .iter()
        .all(|p| p.level == PreemptLevel::Kill && p.latency().unwrap() < 200_000));
}

/// Padding under the per-block preempt flag (issue 26): a BE kernel
/// whose own launch ran partly (its later blocks exited at their
/// check) while padded launches ran other blocks of it, in the
/// workloads where lazy eviction meets padding. Every request's
/// outputs equal an unpreempted run's. Failed before padding kept its
/// plan across such a completion and credited overlapping parts
/// (`sched/src/dkp/padded.rs`): C reef-dkp-mv corrupted 43 requests.
#[test]
fn padding_keeps_values_when_be_kernels_run_partly() {
    for wl in ["C", "D", "E"] {
        let w = Workload::load(&reef_model::shared_dir().join(format!("disb/workloads/{wl}.json")))
            .unwrap();
        let (spec, models, sa) = setup(&w);
        let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
        for policy in ["reef", "reef-dkp-mv"] {
            let plans = plan_clients(&w, &idx, &sa, 7);
            let out = simulate(&spec, &models, plans, 2_000_000_000, &opts(policy, true)).unwrap();
            assert!(
                out.preemptions.len() >= 20,
                "{wl} {policy}: {}",
                out.preemptions.len()
            );
            assert_eq!(out.corrupted_outputs, 0, "{wl} {policy}");
        }
    }
}

/// Preemption on the GV100 preset (REEFnv: 15 us trap, REEF §4.6)
/// keeps every request's outputs equal to an unpreempted run's under
/// every preempting policy. Failed before a kill spared a flagged
/// kernel with no block running (`sim/src/engine/preempt.rs` `kill_effect`):
/// the kill marked the outputs of a kernel that never ran corrupted,
/// and the restore re-ran its predecessor (completed under the flag,
/// §4.4) over them; the first of these runs (C, `reef-nodkp`)
/// returned one corrupted request then.
#[test]
fn gv100_preemption_keeps_values() {
    for wl in ["C", "D"] {
        let w = Workload::load(&reef_model::shared_dir().join(format!("disb/workloads/{wl}.json")))
            .unwrap();
        let (spec, models, sa) = setup_on(&w, "gv100");
        let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
        for policy in ["reef-nodkp", "reef", "reef-dkp-mv", "reef-max"] {
            let plans = plan_clients(&w, &idx, &sa, 7);
            let out = simulate(&spec, &models, plans, 5_000_000_000, &opts(policy, true)).unwrap();
            assert!(
                out.preemptions.len() >= 50,
                "{wl} {policy}: {}",
                out.preemptions.len()
            );
            assert_eq!(out.corrupted_outputs, 0, "{wl} {policy}");
        }
    }
}

/// Aker's fused launches carry BE blocks beside RT kernels (split BE
/// kernels finished by later launches), and every request's outputs,
/// BE ones included, equal an unpreempted run; baymax never fuses.
#[test]
fn aker_fused_be_work_keeps_its_values() {
    let w = Workload::load(&reef_model::shared_dir().join("disb/workloads/C.json")).unwrap();
    let (spec, models, sa) = setup(&w);
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    for policy in ["aker", "baymax"] {
        let plans = plan_clients(&w, &idx, &sa, 7);
        let out = simulate(&spec, &models, plans, 300_000_000, &opts(policy, true)).unwrap();
        let a = out.aker.unwrap();
        assert_eq!(a.fused_launches > 0, policy == "aker", "{policy}: {a:?}");
        assert_eq!(a.beyond_headroom, 0);
        assert_eq!(out.corrupted_outputs, 0, "{policy}");
        assert!(a.qos_met + a.qos_missed >= 10, "{policy}: {a:?}");
        let be_done: u64 = w
            .tasks
            .iter()
            .zip(&out.clients)
            .filter(|(t, _)| !t.real_time)
            .map(|(_, c)| c.completed)
            .sum();
        assert!(be_done >= 3, "{policy}: {be_done}");
        if policy == "aker" {
            assert!(a.be_blocks_fused > 0 && a.rest_launches > 0, "{a:?}");
        }
    }
}

#[test]
fn a_device_without_kill_degrades_to_lazy_eviction_and_records_it() {
    let w = Workload::load(&reef_model::shared_dir().join("disb/workloads/A.json")).unwrap();
    let (mut spec, models, sa) = setup(&w);
    spec.preempt_levels = vec![1, 2];
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    for (levels, want) in [
        (vec![1, 2], PreemptLevel::LazyEviction),
        (vec![1], PreemptLevel::HostQueue),
    ] {
        spec.preempt_levels = levels;
        let plans = plan_clients(&w, &idx, &sa, 7);
        let out = simulate(
            &spec,
            &models,
            plans,
            300_000_000,
            &opts("reef-nodkp", true),
        )
        .unwrap();
        assert!(out.preemptions.len() >= 25);
        assert!(out
            .preemptions
            .iter()
            .all(|p| p.level == want && p.killed == 0));
        assert_eq!(out.device_max_level, want);
        assert_eq!(out.corrupted_outputs, 0);
        assert!(out.clients[1].completed >= 5);
    }
}

#[test]
fn value_tracking_detects_outputs_of_unfinished_work() {
    // The check the runner applies: a killed kernel that is not re-run
    // leaves outputs that differ from an unpreempted run.
    let w = Workload::load(&reef_model::shared_dir().join("disb/workloads/A.json")).unwrap();
    let (_, models, _) = setup(&w);
    let m = &models[0];
    let mut clean = reef_sim::ValueTracker::new();
    let mut dirty = reef_sim::ValueTracker::new();
    for (k, kern) in m.model.kernels.iter().enumerate() {
        let r: Vec<BufferId> = kern.reads.iter().map(|&b| buffer(0, b)).collect();
        let wr: Vec<BufferId> = kern.writes.iter().map(|&b| buffer(0, b)).collect();
        let sh = &m.shapes[k];
        clean.complete(sh.identity, &r, &wr, 0..sh.blocks as u64, sh.blocks as u64);
        if k == 10 {
            dirty.corrupt(&wr, 1);
        } else {
            dirty.complete(sh.identity, &r, &wr, 0..sh.blocks as u64, sh.blocks as u64);
        }
    }
    let outs: Vec<BufferId> = m
        .model
        .kernels
        .iter()
        .flat_map(|k| k.writes.iter().map(|&b| buffer(0, b)))
        .collect();
    assert!(clean.diff(&clean.clone(), &outs).is_empty());
    assert!(!dirty.diff(&clean, &outs).is_empty());
}

#[test]
fn trace_and_dependent_clients_follow_disb_semantics() {
    let text = r#"{"time": 1, "tasks": [
      {"id": "cam_rt", "load": {"type": "trace", "trace": [0, 100, 101, 102, 300]}, "client": {"model_name": "densenet201-imagenet"}},
      {"id": "post", "load": {"type": "dependent", "prev_task_ids": ["cam_rt"]}, "client": {"model_name": "distilbert"}},
      {"id": "bg", "load": {"type": "continuous"}, "client": {"model_name": "vgg19-imagenet"}}
    ]}"#;
    let w = Workload::parse(Path::new("t.json"), text).unwrap();
    let (spec, models, sa) = setup(&w);
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    let plans = plan_clients(&w, &idx, &sa, 1);
    let out = simulate(&spec, &models, plans, 500_000_000, &opts("reef", false)).unwrap();
    // Launches at 100, 101 and 102 ms: the first is late for the next
    // slot by the time the client is free only if the previous request
    // is still running; densenet (3.6 ms) is done by then, so 100 runs,
    // 101 and 102 are both passed at 100+3.6 ms: 101 is skipped, 102 runs.
    assert_eq!(out.clients[0].issued, 4, "{:?}", out.clients[0]);
    // One dependent request per camera result.
    assert_eq!(out.clients[1].issued, out.clients[0].completed);
    assert!(out.clients[2].completed > 0);
}

/// A high-priority resnet152 client every 80 ms over a continuous
/// low-priority vgg client, both eager with `gap` per launch.
fn fikit_pair(gap: Option<Time>, policy: &str) -> RunOutcome {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let dir = reef_model::default_models_dir();
    let models: Vec<PreparedModel> = ["resnet152", "vgg"]
        .iter()
        .map(|n| PreparedModel::new(reef_model::load_named(&dir, n).unwrap(), &spec).unwrap())
        .collect();
    let cfg = FikitConfig {
        runs: 2,
        ..FikitConfig::default()
    };
    let profiles: Vec<Profile> = (0..2)
        .map(|m| measure_profile(&spec, &models, m, gap, &cfg, 7).unwrap().0)
        .collect();
    let plans = vec![
        ClientPlan {
            name: "hi".into(),
            model: 0,
            class: Class::RealTime,
            gen: Gen::Periodic {
                next: 1_000_000,
                interval: 80_000_000,
            },
        },
        ClientPlan {
            name: "lo".into(),
            model: 1,
            class: Class::BestEffort,
            gen: Gen::Continuous,
        },
    ];
    let o = RunOptions {
        policy: policy.into(),
        seed: 7,
        track_values: true,
        host_gap_ns: gap,
        priorities: vec![0, 5],
        fikit: cfg,
        fikit_profiles: profiles,
        ..RunOptions::default()
    };
    simulate(&spec, &models, plans, 400_000_000, &o).unwrap()
}

#[test]
fn fikit_fills_host_gaps_without_corrupting_outputs_and_finds_none_back_to_back() {
    let eager = fikit_pair(Some(300_000), "fikit");
    let st = eager.fikit.unwrap();
    assert!(st.gaps_filled > 0 && st.fill_kernels > 0, "{st:?}");
    assert_eq!(eager.corrupted_outputs, 0);
    assert!(eager.clients[0].completed >= 3, "{:?}", eager.clients[0]);
    assert!(eager.clients[1].completed > 0, "{:?}", eager.clients[1]);
    // Nothing was killed or evicted: FIKIT is level 1.
    assert!(eager.preemptions.is_empty());
    let nofill = fikit_pair(Some(300_000), "fikit-nofill").fikit.unwrap();
    assert_eq!(nofill.fill_kernels, 0);
    // Back to back: the only gaps are the dispatch, far below ε.
    let b2b = fikit_pair(None, "fikit");
    let st = b2b.fikit.unwrap();
    assert_eq!(st.fill_kernels, 0, "{st:?}");
    assert_eq!(st.gaps_seen, st.gaps_below_epsilon);
    assert_eq!(b2b.corrupted_outputs, 0);
}

/// Per-model host models (`model_host_gaps`, `model_host_sync`): a
/// synchronising host issues each kernel only after the previous one
/// completed, so alone it pays the launch path per kernel; beside a
/// back-to-back client under `share` on the GV100 its context idles at
/// every kernel and waits for the other's time slice each time, while
/// an asynchronous host (launches run ahead of the device) does not.
#[test]
fn a_synchronising_host_waits_for_each_kernel_and_for_the_other_contexts_slice() {
    let spec = DeviceSpec::preset("gv100").unwrap();
    let dir = reef_model::default_models_dir();
    let models: Vec<PreparedModel> = ["vgg", "resnet152"]
        .iter()
        .map(|n| PreparedModel::new(reef_model::load_named(&dir, n).unwrap(), &spec).unwrap())
        .collect();
    let n = models[0].shapes.len() as u64;
    let client = |model, gen| ClientPlan {
        name: format!("c{model}"),
        model,
        class: Class::BestEffort,
        gen,
    };
    let run = |plans: Vec<ClientPlan>, gaps: Vec<Time>, sync: Vec<bool>| {
        let o = RunOptions {
            policy: "share".into(),
            seed: 7,
            model_host_gaps: gaps,
            model_host_sync: sync,
            ..RunOptions::default()
        };
        let out = simulate(&spec, &models, plans, 300_000_000, &o).unwrap();
        let l = &out.clients[0].latencies;
        assert!(!l.is_empty());
        l.iter().sum::<Time>() as f64 / l.len() as f64
    };
    let alone = |sync| {
        run(
            vec![client(0, Gen::Count { remaining: 3 })],
            vec![0, 0],
            vec![sync, false],
        )
    };
    let (b2b, synced) = (alone(false), alone(true));
    let path = (spec.host_launch_ns + spec.cp_fetch_ns) as f64;
    assert!(
        synced >= b2b + 0.9 * path * (n - 1) as f64,
        "alone: b2b {b2b} ns, synchronising {synced} ns"
    );
    let pair = |sync| {
        run(
            vec![
                client(0, Gen::Count { remaining: 3 }),
                client(1, Gen::Continuous),
            ],
            vec![0, 0],
            vec![sync, false],
        )
    };
    let (async_pair, sync_pair) = (pair(false), pair(true));
    assert!(
        async_pair < 3.0 * b2b,
        "async host beside resnet152: {async_pair} ns, alone {b2b} ns"
    );
    assert!(
        sync_pair > (n - 1) as f64 * spec.context_timeslice_ns as f64 / 2.0,
        "synchronising host beside resnet152: {sync_pair} ns for {n} kernels"
    );
}

#[test]
fn periodic_launches_late_for_the_next_slot_are_dropped() {
    let mut g = Gen::Periodic {
        next: 0,
        interval: 10,
    };
    assert_eq!(g.next(0, 1000), Some(0));
    // Idle again at 35: slots 10 and 20 were missed, 30 is late but its
    // successor (40) has not passed, so it launches now.
    assert_eq!(g.next(35, 1000), Some(35));
    assert_eq!(g.next(36, 1000), Some(40));
    // At 60 the successor of slot 50 (60) has not passed yet (a slot
    // is dropped only when its successor is strictly in the past).
    assert_eq!(g.next(60, 1000), Some(60));
    assert_eq!(g.next(61, 1000), Some(61));
    // Slot 990 is the last one before the end.
    assert_eq!(g.next(995, 1000), Some(995));
    assert_eq!(g.next(996, 1000), None);
    // A huge gap is skipped in constant time.
    let mut g = Gen::Periodic {
        next: 0,
        interval: 1,
    };
    assert_eq!(g.next(u64::MAX / 4, u64::MAX / 2), Some(u64::MAX / 4));
}

#[test]
fn periodic_clients_of_equal_frequency_are_staggered() {
    let w = Workload::load(&reef_model::shared_dir().join("disb/workloads/D.json")).unwrap();
    let (_, models, sa) = setup(&w);
    let idx = |d: &str| models.iter().position(|m| m.name == d).unwrap();
    let plans = plan_clients(&w, &idx, &sa, 1);
    let starts: Vec<Time> = plans
        .iter()
        .filter_map(|p| match p.gen {
            Gen::Periodic { next, .. } => Some(next),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 5);
    assert_eq!(starts[0], 0);
    for i in 1..5 {
        let prev_model = plans[i - 1].model;
        assert_eq!(starts[i], starts[i - 1] + sa[prev_model] as Time);
    }
}

/// `--decision-cost`: every decision of the run is timed, padding's
/// selection included, and the same run's figures are unchanged by it
/// (timing reads the clock, never the simulation).
#[test]
fn decision_cost_times_every_decision_and_changes_nothing() {
    let (spec, models, plans) = planned("A");
    for policy in ["reef", "reef-max"] {
        let plain = simulate(
            &spec,
            &models,
            plans.clone(),
            100_000_000,
            &opts(policy, false),
        )
        .unwrap();
        assert!(plain.decision_cost.is_none());
        let timed = RunOptions {
            decision_cost: true,
            ..opts(policy, false)
        };
        let t = simulate(&spec, &models, plans.clone(), 100_000_000, &timed).unwrap();
        let c = t.decision_cost.as_ref().unwrap();
        // At least one decision per device event reaching the scheduler.
        assert!(
            c.len() >= t.device_events / 2,
            "{} decisions, {} events",
            c.len(),
            t.device_events
        );
        let (p50, p99) = (c.quantile(0.5).unwrap(), c.quantile(0.99).unwrap());
        assert!(p50 > 0 && p99 >= p50, "{policy}: p50 {p50} p99 {p99}");
        assert_eq!(t.kernels_launched, plain.kernels_launched, "{policy}");
        assert_eq!(
            t.clients[0].latencies, plain.clients[0].latencies,
            "{policy}"
        );
    }
}

/// The padding selection made ahead of its launch
/// (`reef_sched::dkp::padded::ahead`, the default) changes no outcome of a
/// run on the measured models: every client's latencies, the launches, the
/// device events and the padding figures are those of selecting only at
/// the launch; and most padded launches take a selection made ahead.
#[test]
fn selecting_ahead_changes_no_outcome() {
    let (spec, models, plans) = planned("D");
    for policy in ["reef", "reef-max"] {
        let run = |ahead: bool| {
            let o = RunOptions {
                select_ahead: ahead,
                ..opts(policy, false)
            };
            simulate(&spec, &models, plans.clone(), 1_000_000_000, &o).unwrap()
        };
        let (on, off) = (run(true), run(false));
        for (a, b) in on.clients.iter().zip(&off.clients) {
            assert_eq!(a.latencies, b.latencies, "{policy}");
            assert_eq!((a.issued, a.completed), (b.issued, b.completed));
        }
        assert_eq!(on.kernels_launched, off.kernels_launched, "{policy}");
        assert_eq!(on.device_events, off.device_events, "{policy}");
        let pad = |o: &RunOutcome| serde_json::to_string(&o.padding).unwrap();
        assert_eq!(pad(&on), pad(&off), "{policy}");
        let (a, b) = (on.ahead.unwrap(), off.ahead.unwrap());
        assert_eq!((b.made, b.hits), (0, 0), "{policy}: {b:?}");
        let padded = on.padding.as_ref().unwrap().padded_launches;
        assert!(padded > 0, "{policy}");
        // Only a request's first kernels (transmitted together on its
        // arrival, `window` of them) have nothing prepared.
        assert!(
            a.hits * 2 > a.hits + a.misses,
            "{policy}: {a:?} of {padded} padded launches"
        );
    }
}
