use super::quotes::*;
use super::*;

#[test]
fn judging_by_value_bound_and_range() {
    // A value: ±25 % inclusive.
    assert_eq!(Paper::Is(2.0).judge(2.5), (1.25, true));
    assert!(!Paper::Is(2.0).judge(2.6).1);
    assert!(Paper::Is(2.0).judge(1.5).1);
    assert!(!Paper::Is(2.0).judge(1.4).1);
    // An upper bound: anything below passes, above by at most 25 %.
    assert!(Paper::AtMost(9.0).judge(0.5).1);
    assert!(Paper::AtMost(9.0).judge(11.0).1);
    assert!(!Paper::AtMost(9.0).judge(11.5).1);
    // A range: judged against its nearest end.
    assert_eq!(Paper::Within(1.2, 1.4).judge(1.3), (1.0, true));
    let (r, ok) = Paper::Within(1.2, 1.4).judge(1.8);
    assert!((r - 1.8 / 1.4).abs() < 1e-12 && !ok);
    assert!(!Paper::Is(1.0).judge(f64::NAN).1);
}

#[test]
fn every_quote_is_on_a_paper_testbed_and_sane() {
    let q = quotes();
    assert!(q.iter().all(|q| q.device == "mi50" || q.device == "gv100"));
    for x in &q {
        match x.paper {
            Paper::Is(v) | Paper::AtMost(v) => assert!(v > 0.0, "{}", x.what),
            Paper::Within(a, b) => assert!(0.0 < a && a < b, "{}", x.what),
        }
    }
    // Every (device, figure text) appears once.
    let mut keys: Vec<_> = q.iter().map(|x| (x.device, x.what)).collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), n);
}

#[test]
fn the_bisected_figures_carry_their_note() {
    // The notes are attached by (device, figure text): renaming a
    // quote must not drop them silently.
    let q = quotes();
    for (device, what, note) in [
        ("mi50", "REEF throughput C", CORUN_NOTE_MI50_C),
        ("gv100", "REEF throughput E", CORUN_NOTE_GV100_E),
    ] {
        let with: Vec<_> = q.iter().filter(|x| x.note == note).collect();
        assert_eq!(with.len(), 1, "{device} {what}");
        assert_eq!((with[0].device, with[0].what), (device, what));
    }
}

#[test]
fn by_construction_rows_are_marked_and_not_counted() {
    let q = quotes();
    let marked = |what: &str| {
        q.iter()
            .filter(|x| x.what == what)
            .all(|x| x.by_construction)
    };
    // SEQ's throughput is 1 by the metric's definition (normalised to
    // the saturated serial run); the reset latency comes from the
    // parameters taken from it; Fig. 21a from the calibration.
    for w in ["SEQ throughput A", "SEQ throughput B", "SEQ throughput C"] {
        assert_eq!(q.iter().filter(|x| x.what == w).count(), 2, "{w}");
        assert!(marked(w), "{w}");
    }
    assert!(marked("reset-based preemption RNET (us)"));
    assert!(marked("RNET execution, DQ capacity 1 (ms)"));
    assert!(!marked("REEF throughput A"));
    assert!(!marked("SEQ RT latency A"));
    // The counts leave them out, whether they are inside or not.
    let row = |within_bound, by_construction| Row {
        device: "mi50".into(),
        figure: "15".into(),
        what: "x".into(),
        paper: Paper::Is(1.0),
        simulated: 1.0,
        ratio: 1.0,
        within_bound,
        by_construction,
        group: if by_construction {
            Group::ByConstruction
        } else {
            Group::Device
        },
        note: String::new(),
        missing: "a term".into(),
        compiled_models: vec![],
    };
    let rows = [
        row(true, false),
        row(true, false),
        row(false, false),
        row(true, true),
        row(false, true),
    ];
    assert_eq!(
        counts(&rows),
        Counts {
            within: 2,
            outside: 1,
            by_construction: 2
        }
    );
    // Every row says whether it holds by construction in --json.
    let json = serde_json::to_value(&rows[3]).unwrap();
    assert_eq!(json["by_construction"], serde_json::Value::Bool(true));
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(json["by_construction"], serde_json::Value::Bool(false));
}

#[test]
fn unknown_devices_and_bad_durations_are_refused() {
    let a = |device: &str, duration| FidelityArgs {
        device: device.into(),
        duration,
        seed: 1,
        jobs: Some(1),
        json: false,
        gv100_models: None,
    };
    let e = run(&a("h100", None)).unwrap_err().to_string();
    assert!(e.contains("mi50 and gv100"), "{e}");
    let e = run(&a("mi50", Some(-1.0))).unwrap_err().to_string();
    assert!(e.contains("--duration"), "{e}");
}

#[test]
fn every_counted_figure_names_its_missing_mechanism_and_its_group() {
    for x in quotes() {
        if x.by_construction {
            assert_eq!(x.group(), Group::ByConstruction, "{}", x.what);
            assert_eq!(x.missing(), "", "{}", x.what);
        } else {
            assert_ne!(x.group(), Group::ByConstruction, "{}", x.what);
            assert!(
                x.missing().len() > 20 && x.missing() != "not named",
                "{} {}",
                x.device,
                x.what
            );
        }
    }
    let g = |device: &str, what: &str| {
        quotes()
            .into_iter()
            .find(|x| x.device == device && x.what == what)
            .unwrap()
            .group()
    };
    assert_eq!(g("mi50", "REEF throughput C"), Group::Device);
    assert_eq!(g("mi50", "padded RT kernels not slowed (%)"), Group::Device);
    assert_eq!(g("mi50", "GPUStreams RT latency C"), Group::Baseline);
    assert_eq!(g("mi50", "SEQ RT latency A"), Group::Baseline);
    assert_eq!(g("gv100", "wait/reset preemption A"), Group::Baseline);
    assert_eq!(
        g("gv100", "wait-based preemption RNET (us)"),
        Group::Baseline
    );
    assert_eq!(g("gv100", "SEQ throughput A"), Group::ByConstruction);
}

#[test]
fn the_table_is_grouped_and_names_what_is_missing_only_outside() {
    let row = |device: &str, what: &str, within_bound, group| Row {
        device: device.into(),
        figure: "15".into(),
        what: what.into(),
        paper: Paper::Is(1.0),
        simulated: 1.0,
        ratio: 1.0,
        within_bound,
        by_construction: group == Group::ByConstruction,
        group,
        note: String::new(),
        missing: format!("mechanism of {what}"),
        compiled_models: if what == "base" {
            vec!["vgg".into()]
        } else {
            vec![]
        },
    };
    let rows = [
        row("mi50", "in", true, Group::Device),
        row("mi50", "out", false, Group::Device),
        row("gv100", "base", false, Group::Baseline),
        row("mi50", "def", true, Group::ByConstruction),
    ];
    let t = table(&rows);
    let dev = t.find("== device terms").unwrap();
    let base = t.find("== baselines").unwrap();
    let byc = t.find("== by construction").unwrap();
    assert!(dev < base && base < byc, "{t}");
    assert!(t.contains("[missing: mechanism of out]"), "{t}");
    assert!(t.contains("[missing: mechanism of base]"), "{t}");
    assert!(!t.contains("mechanism of in"), "{t}");
    assert!(!t.contains("mechanism of def"), "{t}");
    assert!(t.contains("-- mi50: 1 of 2 outside"), "{t}");
    assert!(t.contains("-- gv100: 1 of 1 outside"), "{t}");
    // A row run on a compiled sm_70 build says so; the others do not.
    assert!(t.contains("{sm_70 build: vgg}"), "{t}");
    assert_eq!(t.matches("sm_70 build").count(), 1, "{t}");
}

#[test]
fn each_figure_names_the_models_it_runs_on() {
    let workloads = super::measure::workloads().unwrap();
    let all = quotes();
    let models = |dev: &str, what: &str| {
        all.iter()
            .find(|q| q.device == dev && q.what == what)
            .unwrap_or_else(|| panic!("{dev} {what}"))
            .models(&workloads)
    };
    // DISB A: an RT VGG client and a BE ResNet-152 client (Table 2).
    assert_eq!(models("gv100", "REEF throughput A"), ["vgg", "resnet152"]);
    assert_eq!(
        models("gv100", "wait/reset preemption B"),
        ["vgg", "resnet152"]
    );
    assert_eq!(models("gv100", "REEF throughput C").len(), 5);
    assert_eq!(
        models("gv100", "wait-based preemption RNET (us)"),
        ["resnet152"]
    );
    assert_eq!(
        models("mi50", "RNET execution, DQ capacity 1 (ms)"),
        ["resnet152"]
    );
    assert_eq!(models("mi50", "padded RT kernels not slowed (%)").len(), 5);
}
