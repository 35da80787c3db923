use super::*;

#[test]
fn periodic_launches_late_for_the_next_slot_are_dropped() {
    // The virtual runner's expectations (runner.rs), on the live copy.
    let mut g = Gen::Periodic {
        next: 0,
        interval: 10,
    };
    assert_eq!(next_launch(&mut g, 0, 1000), Some(0));
    assert_eq!(next_launch(&mut g, 35, 1000), Some(35));
    assert_eq!(next_launch(&mut g, 36, 1000), Some(40));
    assert_eq!(next_launch(&mut g, 60, 1000), Some(60));
    assert_eq!(next_launch(&mut g, 61, 1000), Some(61));
    assert_eq!(next_launch(&mut g, 995, 1000), Some(995));
    assert_eq!(next_launch(&mut g, 996, 1000), None);
}

#[test]
fn poisson_arrivals_depend_only_on_the_seed_and_skip_missed_ones() {
    let w = Workload::parse(
        Path::new("p.json"),
        r#"{"time": 1, "tasks": [{"id": "a_rt", "load": {"type": "poisson", "frequency": 1000},
            "client": {"model_name": "vgg19-imagenet"}}]}"#,
    )
    .unwrap();
    let plan = |seed| runner::plan_clients(&w, &|_| 0, &[1e6], seed).remove(0).gen;
    let launches = |mut g: Gen, busy: Time| {
        let mut v = Vec::new();
        let mut now = 0;
        while let Some(t) = next_launch(&mut g, now, 1_000_000_000) {
            v.push(t);
            now = t + busy;
        }
        v
    };
    let a = launches(plan(1), 0);
    assert_eq!(a, launches(plan(1), 0));
    assert_ne!(a, launches(plan(2), 0));
    // About 1000 arrivals in a second at 1000/s.
    assert!((850..1150).contains(&a.len()), "{}", a.len());
    // A client busy for 5 ms at every launch drops the arrivals it
    // missed: launches are at least 5 ms apart and fewer.
    let b = launches(plan(1), 5_000_000);
    assert!(b.windows(2).all(|p| p[1] - p[0] >= 5_000_000));
    assert!(b.len() < 210, "{}", b.len());
}

#[test]
fn trace_launches_skip_passed_offsets() {
    let mut g = Gen::Trace {
        offsets: vec![0, 100, 101, 102, 300],
        idx: 0,
    };
    assert_eq!(next_launch(&mut g, 0, 1000), Some(0));
    assert_eq!(next_launch(&mut g, 50, 1000), Some(100));
    assert_eq!(next_launch(&mut g, 103, 1000), Some(103));
    assert_eq!(next_launch(&mut g, 104, 1000), Some(300));
    assert_eq!(next_launch(&mut g, 400, 1000), None);
}

#[test]
fn no_daemon_is_a_clear_error_that_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let e = format!("{:#}", connect(&sock).err().unwrap());
    assert!(e.contains("no reefd answers at"), "{e}");
    assert!(
        e.contains(&format!(
            "reefd start --foreground --device sim:mi50 --socket {}",
            sock.display()
        )),
        "{e}"
    );
    // Something that is not reefd listening there.
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let l2 = _l.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l2.accept().unwrap();
        use std::io::Write;
        let _ = s.write_all(b"\x00\x00\x00\x05hello");
    });
    let e = format!("{:#}", connect(&sock).err().unwrap());
    t.join().unwrap();
    assert!(e.contains("does not speak reefd's protocol"), "{e}");
}

/// The base is the mean after the warm-up, and the run's RT latencies
/// are normalised by it (the figure the table prints).
#[test]
fn the_measured_base_normalises_the_run() {
    // A warm-up of 900 us (first-use costs), then 100 and 300 us.
    let base = standalone_base(&[900e3, 100e3, 300e3], 1).unwrap();
    assert_eq!(base, 200e3);
    assert_eq!(standalone_base(&[900e3], 1), None);
    assert_eq!(standalone_base(&[], 0), None);
    let w = Workload::parse(
        Path::new("a.json"),
        r#"{"time": 1, "tasks": [{"id": "r_rt", "load": {"type": "continuous"},
            "client": {"model_name": "vgg19-imagenet"}}]}"#,
    )
    .unwrap();
    let plans = runner::plan_clients(&w, &|_| 0, &[base], 1);
    assert_eq!(plans[0].class, Class::RealTime);
    let outcome = RunOutcome {
        clients: vec![ClientStats {
            issued: 2,
            completed: 2,
            // 1x and 3x the base: mean 2.
            latencies: vec![200_000, 600_000],
            rejected: false,
        }],
        preemptions: Vec::new(),
        duration: 1_000_000_000,
        restores: 0,
        redundant_kernels: 0,
        kernels_launched: 0,
        device_events: 0,
        corrupted_outputs: 0,
        device_max_level: PreemptLevel::LazyEviction,
        padding: None,
        fikit: None,
        fikit_profiles: Vec::new(),
        dram_load_peak: None,
        aker: None,
        lost: None,
        decision_cost: None,
        prepare_cost: None,
        ahead: None,
    };
    let r = metrics::summarize(
        "a",
        "reef-nodkp",
        "cuda:0",
        1,
        &plans,
        &["vgg".to_string()],
        &[base],
        &outcome,
        0.0,
    );
    assert_eq!(r.rt_latency_norm_mean, Some(2.0));
    assert_eq!(r.rt_latency_norm_p99.map(|x| (x * 1e9).round()), Some(3e9));
    assert!(standalone_method().contains("REEF §7"));
}

#[test]
fn unset_flags_are_told_from_given_ones() {
    assert_eq!(default_of("device").as_deref(), Some("mi50"));
    assert_eq!(default_of("dq_capacity").as_deref(), Some("4"));
    assert!(default_of("policy").is_some());
}
