//! FIKIT (fikit.txt §3.2) on hand-driven events: withholding, Algorithm 1
//! filling with BestPrioFit, early stop, the measuring stage and stale
//! profiles.

use reef_sched::fikit::profile::{KernelId, Profile, ProfileBuilder};
use reef_sched::fikit::{Fikit, FikitConfig, FikitStats};
use reef_sched::*;

const US: Time = 1_000;

/// A profile of `n` anonymous kernels, every kernel `sk` long with `sg`
/// after it, measured once.
fn profile(key: &str, sk: &[u64], sg: &[u64]) -> Profile {
    let ids: Vec<KernelId> = (0..sk.len() as u32).map(KernelId::anonymous).collect();
    let mut b = ProfileBuilder::new(key, ids);
    let run: Vec<(u64, Option<u64>)> = sk
        .iter()
        .enumerate()
        .map(|(i, &k)| (k, (i + 1 < sk.len()).then(|| sg[i])))
        .collect();
    assert!(b.add_run(&run));
    b.finish()
}

type Launches = Vec<(u32, u64, u32)>;

struct H {
    s: Scheduler,
}

impl H {
    fn new(
        name: &str,
        cfg: FikitConfig,
        models: Vec<ModelInfo>,
        prios: &[u8],
        profiles: Vec<Profile>,
    ) -> Self {
        let clients = prios
            .iter()
            .enumerate()
            .map(|(i, &p)| ClientSpec {
                name: format!("c{i}"),
                model: ModelId(i as u32),
                class: Class::of_priority(p),
            })
            .collect();
        let pol = fikit_named(name, cfg, Vec::new(), profiles).unwrap();
        let config = Config {
            priorities: prios.to_vec(),
            host_paced: true,
            ..Config::default()
        };
        let mut s = Scheduler::new(Box::new(pol), config, models, clients).unwrap();
        let mut v = Vec::new();
        s.drain_actions(&mut v);
        Self { s }
    }
    /// Handles `ev` at `t`; returns the launches it caused as
    /// (stream, request, kernel).
    fn ev(&mut self, t: Time, ev: Event) -> Vec<(u32, u64, u32)> {
        self.s.handle(t, ev);
        let mut v = Vec::new();
        self.s.drain_actions(&mut v);
        v.iter()
            .filter_map(|a| match a {
                Action::Launch { stream, tag } => Some((stream.0, tag.req.0, tag.kernel)),
                _ => None,
            })
            .collect()
    }
    fn arrive(&mut self, t: Time, req: u64, client: u32) -> Vec<(u32, u64, u32)> {
        self.ev(
            t,
            Event::RequestArrived {
                req: RequestId(req),
                client: ClientId(client),
                deadline: None,
            },
        )
    }
    fn issue(&mut self, t: Time, req: u64, n: u32) -> Vec<(u32, u64, u32)> {
        self.ev(
            t,
            Event::KernelsIssued {
                req: RequestId(req),
                issued: n,
            },
        )
    }
    fn done(&mut self, t: Time, stream: u32, req: u64, k: u32) -> Vec<(u32, u64, u32)> {
        let tag = KernelTag {
            req: RequestId(req),
            kernel: k,
        };
        let s = StreamId(stream);
        self.ev(t, Event::KernelStarted { stream: s, tag });
        self.ev(t, Event::KernelCompleted { stream: s, tag })
    }
    /// Kernel `k` of `req` runs on `stream` from `start` to `end`.
    fn kernel(&mut self, start: Time, end: Time, stream: u32, req: u64, k: u32) {
        let tag = KernelTag {
            req: RequestId(req),
            kernel: k,
        };
        let s = StreamId(stream);
        self.ev(start, Event::KernelStarted { stream: s, tag });
        self.ev(end, Event::KernelCompleted { stream: s, tag });
    }
    fn fikit(&self) -> &Fikit {
        self.s
            .policy()
            .as_any()
            .and_then(|a| a.downcast_ref::<Fikit>())
            .unwrap()
    }
    fn stats(&self) -> FikitStats {
        self.fikit().stats()
    }
}

fn two_tasks(name: &str, cfg: FikitConfig) -> H {
    let models = vec![
        ModelInfo::idempotent("hi", 3),
        ModelInfo::idempotent("lo", 10),
    ];
    let profiles = vec![
        profile("hi", &[10 * US; 3], &[500 * US, 500 * US]),
        profile("lo", &[150 * US; 10], &[0; 9]),
    ];
    H::new(name, cfg, models, &[0, 5], profiles)
}

/// The scenario of Fig. 12 case D: the gap after the high-priority kernel
/// is predicted at 500 us; the low-priority task's kernels (150 us each)
/// are issued one by one; the high-priority task's next launch arrives
/// after 100 us. Returns the launches of the low-priority task and the
/// stats.
fn gap_scenario(name: &str) -> (Launches, Launches, FikitStats) {
    let mut h = two_tasks(name, FikitConfig::default());
    let mut lo = Vec::new();
    assert!(h.arrive(0, 1, 0).is_empty(), "nothing issued yet");
    assert!(h.arrive(0, 2, 1).is_empty());
    lo.extend(h.issue(0, 2, 1));
    assert!(lo.is_empty(), "a lower priority is withheld: {lo:?}");
    assert_eq!(h.issue(0, 1, 1), vec![(0, 1, 0)], "the holder launches");
    // hi k0 completes at 10 us; its k1 is not issued: a 500 us gap opens
    // and lo's k0 (issued) fills it.
    lo.extend(h.done(10 * US, 0, 1, 0));
    assert_eq!(lo, vec![(1, 2, 0)]);
    // lo issues its k1 at 60 us: 500 - 150 - 50 left, it fits.
    lo.extend(h.issue(60 * US, 2, 2));
    assert_eq!(lo.len(), 2, "{lo:?}");
    // The holder's next launch at 110 us: the real gap was 100 us.
    let hi = h.issue(110 * US, 1, 2);
    assert_eq!(hi, vec![(0, 1, 1)], "the holder is never held back");
    // lo issues its k2 at 120 us: within the predicted gap, but after the
    // gap really ended.
    lo.extend(h.issue(120 * US, 2, 3));
    (lo, hi, h.stats())
}

#[test]
fn early_stop_ends_filling_at_the_holders_next_launch() {
    let (lo, _, st) = gap_scenario("fikit");
    assert_eq!(lo, vec![(1, 2, 0), (1, 2, 1)]);
    assert_eq!(st.gaps_seen, 1);
    assert_eq!(st.gaps_filled, 1);
    assert_eq!(st.fill_kernels, 2);
    assert_eq!(st.early_stops, 1);
    // Both fills were still on the device when the holder launched.
    assert_eq!(st.overruns, 1);
}

#[test]
fn without_early_stop_filling_runs_to_the_predicted_gap_end() {
    let (lo, _, st) = gap_scenario("fikit-noearly");
    assert_eq!(lo, vec![(1, 2, 0), (1, 2, 1), (1, 2, 2)]);
    assert_eq!(st.fill_kernels, 3);
    assert_eq!(st.early_stops, 0);
}

#[test]
fn without_filling_lower_priorities_wait_for_the_holder() {
    let mut h = two_tasks("fikit-nofill", FikitConfig::default());
    h.arrive(0, 1, 0);
    h.arrive(0, 2, 1);
    h.issue(0, 2, 10);
    h.issue(0, 1, 1);
    assert!(h.done(10 * US, 0, 1, 0).is_empty());
    h.issue(510 * US, 1, 2);
    h.done(520 * US, 0, 1, 1);
    h.issue(1020 * US, 1, 3);
    // The holder's last kernel: the low-priority task gets the GPU.
    let l = h.done(1030 * US, 0, 1, 2);
    assert_eq!(l, vec![(1, 2, 0), (1, 2, 1), (1, 2, 2), (1, 2, 3)]);
    assert_eq!(h.stats().fill_kernels, 0);
}

#[test]
fn gaps_at_or_below_epsilon_are_not_filled() {
    let models = vec![
        ModelInfo::idempotent("hi", 3),
        ModelInfo::idempotent("lo", 4),
    ];
    let profiles = vec![
        profile("hi", &[10 * US; 3], &[100 * US, 101 * US]),
        profile("lo", &[50 * US; 4], &[0; 3]),
    ];
    let mut h = H::new("fikit", FikitConfig::default(), models, &[0, 9], profiles);
    h.arrive(0, 1, 0);
    h.arrive(0, 2, 1);
    h.issue(0, 2, 4);
    h.issue(0, 1, 1);
    // SG = 100 us = ε: skipped (Algorithm 1 line 6, idleTime <= ε).
    assert!(h.done(10 * US, 0, 1, 0).is_empty());
    assert_eq!(h.issue(110 * US, 1, 2), vec![(0, 1, 1)]);
    // SG = 101 us > ε: one 50 us kernel fits, two do not (50+50 < 101 but
    // the cap of outstanding fills is the device queue: both fit).
    let l = h.done(120 * US, 0, 1, 1);
    assert_eq!(l, vec![(1, 2, 0), (1, 2, 1)]);
    let st = h.stats();
    assert_eq!((st.gaps_seen, st.gaps_below_epsilon), (2, 1));
}

#[test]
fn best_prio_fit_prefers_the_higher_priority_task_then_the_longest_kernel() {
    // Holder at 0; waiting tasks at 3 (kernel 300 us), 3 (kernel 350 us)
    // and 1 (kernel 100 us); gap 400 us.
    let models = vec![
        ModelInfo::idempotent("hi", 2),
        ModelInfo::idempotent("a", 2),
        ModelInfo::idempotent("b", 2),
        ModelInfo::idempotent("c", 2),
    ];
    let profiles = vec![
        profile("hi", &[10 * US; 2], &[400 * US]),
        profile("a", &[300 * US; 2], &[0]),
        profile("b", &[350 * US; 2], &[0]),
        profile("c", &[100 * US; 2], &[0]),
    ];
    let mut h = H::new(
        "fikit",
        FikitConfig::default(),
        models,
        &[0, 3, 3, 1],
        profiles,
    );
    for c in 0..4 {
        h.arrive(0, 10 + c as u64, c);
    }
    for c in 1..4 {
        h.issue(0, 10 + c as u64, 1);
    }
    h.issue(0, 10, 1);
    // Priority 1 first (c, 100 us), then 300 us left: at priority 3, b's
    // 350 us does not fit, a's 300 us does not either (strictly shorter),
    // so nothing more.
    let l = h.done(10 * US, 0, 10, 0);
    assert_eq!(l, vec![(3, 13, 0)]);
}

#[test]
fn several_top_priority_tasks_share_and_gaps_need_all_of_them_idle() {
    let models = vec![
        ModelInfo::idempotent("h1", 2),
        ModelInfo::idempotent("h2", 2),
        ModelInfo::idempotent("lo", 2),
    ];
    let profiles = vec![
        profile("h1", &[10 * US; 2], &[500 * US]),
        profile("h2", &[10 * US; 2], &[300 * US]),
        profile("lo", &[120 * US; 2], &[0]),
    ];
    let mut h = H::new(
        "fikit",
        FikitConfig::default(),
        models,
        &[0, 0, 7],
        profiles,
    );
    h.arrive(0, 1, 0);
    h.arrive(0, 2, 1);
    h.arrive(0, 3, 2);
    h.issue(0, 3, 2);
    assert_eq!(h.issue(0, 1, 1), vec![(0, 1, 0)]);
    assert_eq!(h.issue(0, 2, 1), vec![(1, 2, 0)], "both holders launch");
    // h1 in its gap, h2 still running: no filling.
    assert!(h.done(10 * US, 0, 1, 0).is_empty());
    // h2 in its gap too: the earliest predicted end (20 + 300 us) bounds
    // the fill: 120 us fits twice (280 us left after the first).
    let l = h.done(20 * US, 1, 2, 0);
    assert_eq!(l, vec![(2, 3, 0), (2, 3, 1)]);
}

#[test]
fn a_missing_profile_sends_the_task_to_measuring_alone_then_to_sharing() {
    let models = vec![
        ModelInfo::idempotent("hi", 2),
        ModelInfo::idempotent("lo", 2),
    ];
    let cfg = FikitConfig {
        runs: 2,
        ..FikitConfig::default()
    };
    // Only lo has a profile.
    let profiles = vec![profile("lo", &[50 * US; 2], &[0])];
    let mut h = H::new("fikit", cfg, models, &[0, 9], profiles);
    assert_eq!(h.fikit().measuring().len(), 1);
    assert!(h.fikit().profile_problems()[0].is_some());
    assert!(h.fikit().profile_problems()[1].is_none());
    // lo runs first (alone, it holds the GPU).
    h.arrive(0, 100, 1);
    assert_eq!(h.issue(0, 100, 2), vec![(1, 100, 0), (1, 100, 1)]);
    // hi arrives: it must measure alone, so it waits for lo's kernels to
    // leave the device, and lo launches nothing more meanwhile.
    h.arrive(5 * US, 1, 0);
    assert!(h.issue(5 * US, 1, 1).is_empty());
    h.done(50 * US, 1, 100, 0);
    let l = h.done(100 * US, 1, 100, 1);
    assert_eq!(l, vec![(0, 1, 0)]);
    // Measured run 1: kernel 10 us, gap 200 us, kernel 10 us.
    h.kernel(100 * US, 110 * US, 0, 1, 0);
    assert_eq!(h.issue(310 * US, 1, 2), vec![(0, 1, 1)]);
    h.kernel(310 * US, 320 * US, 0, 1, 1);
    assert_eq!(h.stats().measured_runs, 1);
    assert_eq!(h.fikit().measuring()[0].runs_done, 1);
    // Run 2: kernel 20 us, gap 300 us.
    h.arrive(400 * US, 2, 0);
    h.issue(400 * US, 2, 1);
    h.kernel(400 * US, 420 * US, 0, 2, 0);
    h.issue(720 * US, 2, 2);
    h.kernel(720 * US, 730 * US, 0, 2, 1);
    let st = h.stats();
    assert_eq!((st.measured_runs, st.profiles_built), (2, 1));
    assert!(h.fikit().measuring().is_empty());
    let p = h.fikit().profiles().find(|p| p.task_key == "hi").unwrap();
    assert_eq!(p.runs, 2);
    // Kernel 0 was 10 us then 20 us; the gap after it 200 then 300 us.
    assert_eq!(p.positions[0].sk_ns, 15_000.0);
    assert_eq!(p.positions[0].sg_ns, 250_000.0);
    // Sharing now: the 250 us gap after hi k0 is filled with lo's kernels.
    h.arrive(800 * US, 3, 0);
    h.arrive(800 * US, 101, 1);
    h.issue(800 * US, 101, 2);
    assert_eq!(h.issue(800 * US, 3, 1), vec![(0, 3, 0)]);
    let l = h.done(815 * US, 0, 3, 0);
    assert_eq!(l, vec![(1, 101, 0), (1, 101, 1)]);
}

#[test]
fn a_stale_profile_is_measured_again_not_a_panic() {
    let models = vec![
        ModelInfo::idempotent("hi", 3),
        ModelInfo::idempotent("lo", 2),
    ];
    // hi's profile has 2 kernels, the model now 3; lo's was measured on
    // other kernels (named IDs, not the anonymous ones the policy uses).
    let named = vec![
        KernelId::new("conv", [1, 1, 1], [64, 1, 1]),
        KernelId::new("relu", [1, 1, 1], [64, 1, 1]),
    ];
    let mut b = ProfileBuilder::new("lo", named);
    b.add_run(&[(1, Some(1)), (1, None)]);
    let profiles = vec![profile("hi", &[10 * US; 2], &[400 * US]), b.finish()];
    let mut h = H::new("fikit", FikitConfig::default(), models, &[0, 9], profiles);
    let probs = h.fikit().profile_problems().to_vec();
    assert!(
        probs[0].as_deref().unwrap().contains("positions"),
        "{probs:?}"
    );
    assert!(probs[1].as_deref().unwrap().contains("model changed"));
    assert_eq!(h.fikit().measuring().len(), 2);
    assert_eq!(h.stats().profiles_missing_or_stale, 2);
    // Requests are still served (measured), one at a time.
    h.arrive(0, 1, 0);
    h.arrive(0, 2, 1);
    h.issue(0, 2, 2);
    assert_eq!(h.issue(0, 1, 3), vec![(0, 1, 0), (0, 1, 1), (0, 1, 2)]);
}

#[test]
fn priorities_default_to_class_aliases_and_reef_serves_zero_as_real_time() {
    assert_eq!(Class::RealTime.default_priority(), 0);
    assert_eq!(Class::BestEffort.default_priority(), 9);
    assert_eq!(Class::of_priority(0), Class::RealTime);
    assert_eq!(Class::of_priority(4), Class::BestEffort);
    let models = vec![ModelInfo::idempotent("m", 2)];
    let clients = vec![
        ClientSpec {
            name: "rt".into(),
            model: ModelId(0),
            class: Class::RealTime,
        },
        ClientSpec {
            name: "be".into(),
            model: ModelId(0),
            class: Class::BestEffort,
        },
    ];
    let s = Scheduler::new(
        policy_by_name("reef").unwrap(),
        Config {
            priorities: vec![0],
            ..Config::default()
        },
        models,
        clients,
    )
    .unwrap();
    assert_eq!(s.core().priority(ClientId(0)), 0);
    assert_eq!(s.core().priority(ClientId(1)), 9);
}

#[test]
fn host_paced_requests_launch_only_issued_kernels_under_any_policy() {
    let models = vec![ModelInfo::idempotent("m", 3)];
    let clients = vec![ClientSpec {
        name: "rt".into(),
        model: ModelId(0),
        class: Class::RealTime,
    }];
    let mut s = Scheduler::new(
        policy_by_name("streams").unwrap(),
        Config {
            host_paced: true,
            ..Config::default()
        },
        models,
        clients,
    )
    .unwrap();
    let launches = |s: &mut Scheduler| {
        let mut v = Vec::new();
        s.drain_actions(&mut v);
        v.iter()
            .filter(|a| matches!(a, Action::Launch { .. }))
            .count()
    };
    launches(&mut s);
    s.handle(
        0,
        Event::KernelsIssued {
            req: RequestId(1),
            issued: 2,
        },
    );
    assert_eq!(launches(&mut s), 0, "not arrived yet");
    s.handle(
        0,
        Event::RequestArrived {
            req: RequestId(1),
            client: ClientId(0),
            deadline: None,
        },
    );
    assert_eq!(launches(&mut s), 2, "issued before arrival counts");
    s.handle(
        5,
        Event::KernelsIssued {
            req: RequestId(1),
            issued: 3,
        },
    );
    assert_eq!(launches(&mut s), 1);
}
