use super::*;

fn models(spec: &DeviceSpec, names: &[&str]) -> Vec<PreparedModel> {
    let dir = reef_model::default_models_dir();
    names
        .iter()
        .map(|n| PreparedModel::new(reef_model::load_named(&dir, n).unwrap(), spec).unwrap())
        .collect()
}

fn pair(policy: &str, secs: f64) -> runner::RunOutcome {
    pair_on(DeviceSpec::preset("mi50").unwrap(), policy, secs)
}

fn pair_on(spec: DeviceSpec, policy: &str, secs: f64) -> runner::RunOutcome {
    run_on(spec, "vgg", "resnet152", policy, secs)
}

#[test]
fn padding_gives_be_progress_without_touching_rt_and_keeps_values() {
    // DISB B-like: closed-loop RT vgg, closed-loop BE resnet152.
    let base = pair("reef-nodkp", 0.5);
    let mv = pair("reef-dkp-mv", 0.5);
    let mean = |o: &runner::RunOutcome| {
        let l = &o.clients[0].latencies;
        l.iter().sum::<u64>() as f64 / l.len() as f64
    };
    assert_eq!(base.corrupted_outputs, 0);
    assert_eq!(mv.corrupted_outputs, 0);
    // Preemption alone starves BE under a closed-loop RT client.
    assert_eq!(base.clients[1].completed, 0);
    let p = mv.padding.as_ref().unwrap();
    assert!(p.padded_launches > 0);
    assert!(p.be_kernels_completed_by_padding > 0);
    assert!(
        mv.clients[1].completed > 0,
        "BE requests completed by padding"
    );
    // RT latency within 3% of preemption alone.
    assert!(
        mean(&mv) <= 1.03 * mean(&base),
        "{} vs {}",
        mean(&mv),
        mean(&base)
    );
    // Rule 1: a padded launch outlasts its RT kernel only through what
    // the whole device shares, its memory bandwidth (docs/simulator.md
    // "Shared memory bandwidth"), and the dkp kernel's own cost on every
    // block (REEF §6.5 Fig. 25, `padded_block_ns`); this pair never
    // oversubscribes the MI50's bandwidth (peak draw below 1), so no
    // launch outlasts its RT kernel by more than that cost (plus one ns
    // of rounding per block wave).
    let peak = mv.dram_load_peak.unwrap();
    assert!(peak > 0.0 && peak < 1.0, "{peak}");
    assert_eq!(p.overhead_ns.len(), p.overhead_rt_ns.len());
    assert!(!p.overhead_ns.is_empty());
    for (&o, &rt) in p.overhead_ns.iter().zip(&p.overhead_rt_ns) {
        let cost = reef_sim::spec::padded_block_ns(rt) - rt;
        assert!(o <= (cost + 64) as i64, "{o} ns over a {rt} ns RT kernel");
    }
    assert!(p.overhead_ns.iter().any(|&o| o > 0), "the dkp kernel costs");
    assert!(base.padding.is_none());
}

fn run(rt: &str, be: &str, policy: &str, secs: f64) -> runner::RunOutcome {
    run_on(DeviceSpec::preset("mi50").unwrap(), rt, be, policy, secs)
}

/// Runs one pairwise configuration (closed-loop RT and BE clients).
fn run_on(spec: DeviceSpec, rt: &str, be: &str, policy: &str, secs: f64) -> runner::RunOutcome {
    let ms = models(&spec, &[rt, be]);
    let plans = pair_plans(rt, be, None);
    let opts = RunOptions {
        policy: policy.into(),
        seed: 1,
        dq_capacity: 4,
        track_values: true,
        ..RunOptions::default()
    };
    runner::simulate(&spec, &ms, plans, (secs * 1e9) as u64, &opts).unwrap()
}

#[test]
fn dkp_mv_gets_past_kernels_only_one_rt_kernel_admits() {
    // RT densenet with BE resnet152 (and vgg): BE kernel 192 (56) is
    // admitted only by densenet's first RT kernel. Under a closed-loop
    // RT client that kernel is transmitted while the BE stream still
    // lazily evicts what the zero-length normal mode before it
    // launched; it used to go unpadded, and the task stopped there.
    // The MI50's kill lands before a later launch starts, so it is
    // padded now. Since 1397c6a the task then stops later, at a
    // kernel that a later kernel on the device rewrites the inputs of
    // (resnet152's 201, rewritten by 203), which padding may not take
    // before the kill lands (docs/padding.md): no BE request of these
    // two pairs completes (docs/results-max.md).
    let spec = DeviceSpec::preset("mi50").unwrap();
    assert!(
        reef_exec::sched_config(&spec, 4)
            .device
            .kill_precedes_later_launches
    );
    for (be, stuck_at) in [("resnet152", 192u64), ("vgg", 56)] {
        let ms = models(&spec, &["densenet", be]);
        let b = blockers(&spec, &ms[0], &ms[1], Variant::MultiVersion).unwrap();
        assert!(b.blocked.is_empty() && b.first_only_early.is_none());
        let out = run("densenet", be, "reef-dkp-mv", 0.5);
        assert_eq!(out.corrupted_outputs, 0);
        let p = out.padding.unwrap();
        assert!(p.be_kernels_completed_by_padding > stuck_at, "{be}");
    }
    // RT bert with BE inception: kernel 63's half-register versions
    // reach occupancy 4 now that they halve the block's registers
    // (rounded down), so bert's occupancy-4 RT kernels admit them
    // (rule 2) and the task gets past it.
    let ms = models(&spec, &["bert", "inception"]);
    let b = blockers(&spec, &ms[0], &ms[1], Variant::MultiVersion).unwrap();
    assert!(b.blocked.is_empty(), "{:?}", b.first);
    let out = run("bert", "inception", "reef-dkp-mv", 0.5);
    assert_eq!(out.corrupted_outputs, 0);
    assert!(out.padding.unwrap().be_kernels_completed_by_padding > 63);
    assert!(out.clients[1].completed > 0, "bert-inception: BE progress");
    // RT densenet with BE inception: inception kernel 52 (272 blocks of
    // 328 us) has versions only densenet's RT kernel 0 admitted, and a
    // kernel kept the version it started in, so ~20 blocks ran per RT
    // request and no BE request completed in 2 s. With splits finer
    // than 8 (while a block exceeds 18 us, Fig. 14) and started
    // kernels continued in a finer version, the short RT kernels pad
    // it too; the outputs of kernels run in two versions verify.
    let out = run("densenet", "inception", "reef-dkp-mv", 2.0);
    assert_eq!(out.corrupted_outputs, 0);
    assert!(out.padding.unwrap().be_kernels_completed_by_padding > 146);
    assert!(
        out.clients[1].completed > 0,
        "densenet-inception: BE progress"
    );
    // Where the kill may land after a later launch starts (the GV100
    // preset's 15 us against its 10 us launch path), the first RT
    // kernels are not padded from a stream still draining, and the
    // pair stops at that kernel as before.
    let gv = DeviceSpec::preset("gv100").unwrap();
    assert!(
        !reef_exec::sched_config(&gv, 4)
            .device
            .kill_precedes_later_launches
    );
}

#[test]
fn dkp_mv_pads_densenet_resnet152_with_an_rt_think_time() {
    // RT densenet waits 50 us after each reply. Every gap restores the
    // BE task, whose kernel 192 (admitted only by densenet's RT kernel
    // 0) starts on its own stream and cannot finish before the next RT
    // request. Kernel 0 used to be transmitted unpadded while it ran
    // (the task waited for the kill event) and BE starved; now it is
    // padded once the kill is issued, and values stay correct. (The
    // task then stops at kernel 201, as in the closed loop above.)
    let spec = DeviceSpec::preset("mi50").unwrap();
    let ms = models(&spec, &["densenet", "resnet152"]);
    let alone = crate::disb::standalone_ns(&spec, &ms[0], 3, 1).unwrap();
    let plans = pair_plans("densenet", "resnet152", Some((alone + 50e3) as Time));
    let opts = RunOptions {
        policy: "reef-dkp-mv".into(),
        seed: 1,
        dq_capacity: 4,
        track_values: true,
        ..RunOptions::default()
    };
    let out = runner::simulate(&spec, &ms, plans, 500_000_000, &opts).unwrap();
    assert_eq!(out.corrupted_outputs, 0);
    let p = out.padding.unwrap();
    assert!(
        p.be_kernels_completed_by_padding > 192,
        "{}",
        p.be_kernels_completed_by_padding
    );
}

#[test]
fn explain_predicts_where_a_closed_loop_pair_stops() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    // DKP with RT densenet and BE inception: the first BE kernel no RT
    // kernel admits is where the run stops. (Under DKP-MV kernel 52
    // stopped it until finer splits gave it a version short RT kernels
    // admit: no kernel is blocked there now.)
    let ms = models(&spec, &["densenet", "inception"]);
    let mv = blockers(&spec, &ms[0], &ms[1], Variant::MultiVersion).unwrap();
    assert!(mv.blocked.is_empty() && mv.first.is_none());
    let b = blockers(&spec, &ms[0], &ms[1], Variant::Single).unwrap();
    let first = b.first.as_ref().expect("a blocked BE kernel").0;
    assert!(b
        .first
        .as_ref()
        .unwrap()
        .2
        .iter()
        .all(|(v, _)| *v != "padded"));
    let out = run("densenet", "inception", "reef", 1.0);
    assert_eq!(out.corrupted_outputs, 0);
    assert_eq!(out.clients[1].completed, 0);
    let p = out.padding.unwrap();
    assert_eq!(p.be_kernels_completed_by_padding, first as u64);
    // DKP with RT vgg and BE resnet152: every BE kernel is admitted by
    // some RT kernel past the first four, and BE requests complete.
    let ms = models(&spec, &["vgg", "resnet152"]);
    let b = blockers(&spec, &ms[0], &ms[1], Variant::Single).unwrap();
    assert!(b.blocked.is_empty() && b.first_only_early.is_none());
    let out = run("vgg", "resnet152", "reef", 1.0);
    assert_eq!(out.corrupted_outputs, 0);
    assert!(out.clients[1].completed > 0);
}

#[test]
fn selection_time_runs_over_ten_versions() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let ms = models(&spec, &["resnet152", "inception"]);
    let r = selection_time(&spec, &ms[0], &ms[1], 5, 10, 1000).unwrap();
    assert_eq!(r.be_clients, 5);
    assert_eq!(r.versions_per_kernel, 10);
    assert!(r.padded_share > 0.0);
}
