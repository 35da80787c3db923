use super::*;
use reef_sim::Sim;

fn models(spec: &DeviceSpec, names: &[&str]) -> Vec<PreparedModel> {
    let dir = reef_model::default_models_dir();
    names
        .iter()
        .map(|n| {
            let model = reef_model::load_named(&dir, n).unwrap();
            let shapes = KernelShape::for_model(&model, spec).unwrap();
            PreparedModel {
                name: n.to_string(),
                model,
                shapes,
            }
        })
        .collect()
}

#[test]
fn grid_limited_curves_carry_no_register_demand() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let ms = models(&spec, &["resnet152"]);
    let shapes = &ms[0].shapes;
    // The softmax: one block, a one-point curve.
    let one = shapes.iter().find(|s| s.blocks == 1).unwrap();
    let k = kernel_char(&spec, one).unwrap();
    assert_eq!(k.regs_per_block, 0);
    assert!(k.occupancy > 1);
    // A kernel whose curve is shorter than its grid keeps the inference.
    let big = shapes
        .iter()
        .find(|s| (s.curve_len() as u32) < s.blocks)
        .unwrap();
    let k = kernel_char(&spec, big).unwrap();
    assert_eq!(k.regs_per_block, big.regs_per_block);
}

#[test]
fn schedule_only_table_equals_the_simulated_shapes() {
    // The table any caller builds from the schedules alone is exactly
    // what the simulator executes, on a device with measured profiles
    // and on one with the cost model.
    for dev in ["mi50", "gv100"] {
        let spec = DeviceSpec::preset(dev).unwrap();
        let ms = models(
            &spec,
            &["resnet152", "vgg", "densenet", "inception", "bert"],
        );
        let t = table(&spec, &ms, Variant::Single).unwrap();
        for (m, ks) in ms.iter().zip(&t.kernels) {
            assert_eq!(ks.len(), m.shapes.len());
            for (s, v) in m.shapes.iter().zip(ks) {
                assert_eq!(
                    Some(&v[0]),
                    kernel_char(&spec, s).as_ref(),
                    "{dev} {}",
                    s.name
                );
            }
        }
    }
}

/// A padded launch of an RT resnet152 kernel of fewer blocks than CUs
/// (long enough to pad) with the first vgg kernel: (table, models, RT
/// kernel index, the launch).
fn padded_fixture(spec: &DeviceSpec) -> (Arc<DkpTable>, Vec<PreparedModel>, usize, PaddedLaunch) {
    use reef_sched::dkp::BePart;
    use reef_sched::{ClientId, KernelTag, ModelId, RequestId, StreamId};
    let ms = models(spec, &["resnet152", "vgg"]);
    let t = Arc::new(table(spec, &ms, Variant::Single).unwrap());
    let (rk, rc) = t.kernels[0]
        .iter()
        .enumerate()
        .map(|(i, v)| (i, &v[0]))
        .find(|(_, c)| c.blocks < 40 && c.kernel_ns > 20_000)
        .unwrap();
    let bc = &t.kernels[1][0][0];
    assert!(bc.block_ns(1) < rc.kernel_ns);
    let rt_cus = rc.blocks;
    let p = PaddedLaunch {
        stream: StreamId(0),
        tag: KernelTag {
            req: RequestId(1),
            kernel: rk as u32,
        },
        model: ModelId(0),
        rt_cus,
        proxy_level: 8,
        regs_per_thread: 32,
        lds: rc.lds.max(bc.lds),
        parts: vec![BePart {
            stream: StreamId(1),
            client: ClientId(1),
            model: ModelId(1),
            tag: KernelTag {
                req: RequestId(2),
                kernel: 0,
            },
            version: 0,
            blocks: 0..bc.blocks.min(60 - rt_cus),
            cus: rt_cus..60,
            per_cu: 1,
            extra: 0..0,
            after: None,
        }],
    };
    (t, ms, rk, p)
}

fn launch_fixture(
    px: &mut PadExec,
    sim: &mut Sim,
    s0: reef_sim::StreamId,
    ms: &[PreparedModel],
    p: PaddedLaunch,
) {
    let rt_base = ms[0].shapes[p.tag.kernel as usize].clone();
    px.launch(
        sim,
        s0,
        p,
        &rt_base,
        &|part| ms[part.model.0 as usize].shapes[part.tag.kernel as usize].clone(),
        (Vec::new(), Vec::new()),
        &|_| (Vec::new(), Vec::new()),
    )
    .unwrap();
}

#[test]
fn padded_parts_start_together_with_the_rt_part_on_their_cus() {
    use reef_sim::SimConfig;
    let spec = DeviceSpec::preset("mi50").unwrap();
    let (t, ms, rk, p) = padded_fixture(&spec);
    let rc = &t.kernels[0][rk][0];
    let rt_cus = p.rt_cus;
    let mut sim = Sim::new(
        spec.clone(),
        SimConfig {
            record_blocks: true,
            ..SimConfig::default()
        },
    );
    let s0 = sim.create_stream(0, 64).unwrap();
    let mut px = PadExec::new(&spec, t.clone());
    // A plain RT launch ahead of the padded one.
    let tags = Tags {
        task: 1,
        kernel: 0,
        user: 0,
    };
    sim.launch(s0, KernelLaunch::new(ms[0].shapes[0].clone(), tags))
        .unwrap();
    launch_fixture(&mut px, &mut sim, s0, &ms, p);
    let mut seen = Vec::new();
    while let Some((_, evs)) = sim.step() {
        for e in evs {
            if let Some(f) = px.filter(&e) {
                seen.push((f.tags.kernel, f.kind, f.time, f.tags.user));
            }
        }
    }
    // Only RT-tagged events reach the scheduler: the plain launch's
    // start and completion, the padded launch's start and completion.
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|e| e.3 == 0));
    let at = |k: u32, kind: EventKind| {
        seen.iter()
            .find(|e| e.0 == k && e.1 == kind)
            .map(|e| e.2)
            .unwrap()
    };
    let plain_done = at(0, EventKind::Completed);
    let rt_start = at(rk as u32, EventKind::Started);
    let done = at(rk as u32, EventKind::Completed);
    // The padded launch (fetched meanwhile) is dispatched right after
    // the plain one, as one kernel.
    assert_eq!(rt_start, plain_done + spec.cp_dispatch_ns);
    // BE blocks start with the RT blocks, on the CUs left over; RT
    // blocks stay on theirs.
    let recs = sim.block_records();
    let be_first = recs
        .iter()
        .filter(|r| r.start >= rt_start && r.cus.iter().all(|c| c >= rt_cus as usize))
        .map(|r| r.start)
        .min()
        .unwrap();
    assert_eq!(be_first, rt_start);
    assert!(recs.iter().filter(|r| r.start >= rt_start).all(|r| r
        .cus
        .iter()
        .all(|c| c >= rt_cus as usize)
        || r.cus.iter().all(|c| c < rt_cus as usize)));
    // Rule 1 held: the padded launch lasted as long as the RT kernel
    // run through the dkp kernel, whose every block pays the padded-launch
    // overhead (REEF §6.5 Fig. 25; one wave here).
    let through_dkp = reef_sim::padded_block_ns(rc.kernel_ns);
    assert!(through_dkp > rc.kernel_ns);
    assert_eq!(done - rt_start, through_dkp);
    assert_eq!(
        px.stats.overhead_ns,
        vec![(through_dkp - rc.kernel_ns) as i64]
    );
}

#[test]
fn a_part_beside_the_rt_blocks_is_placed_first_and_slows_them() {
    // `reef-max`'s `share`: a BE part on the RT kernel's own CUs. The
    // simulator times a block when it is placed, so the part goes
    // first and the RT blocks are charged the co-residency.
    use reef_sim::SimConfig;
    let spec = DeviceSpec::preset("mi50").unwrap();
    let (t, ms, _, mut p) = padded_fixture(&spec);
    // An RT kernel of fewer blocks than CUs whose blocks are slower
    // two to a CU than alone.
    let (rk, rc) = t.kernels[0]
        .iter()
        .enumerate()
        .map(|(i, v)| (i, &v[0]))
        .find(|(i, c)| {
            let s = &ms[0].shapes[*i];
            c.blocks < 40 && c.kernel_ns > 20_000 && s.exec_ns(2) > s.exec_ns(1) * 21 / 20
        })
        .unwrap();
    p.tag.kernel = rk as u32;
    p.rt_cus = rc.blocks;
    p.lds = rc.lds.max(t.kernels[1][0][0].lds);
    p.parts[0].cus = 0..rc.blocks;
    p.parts[0].blocks = 0..rc.blocks;
    let mut sim = Sim::new(
        spec.clone(),
        SimConfig {
            record_blocks: true,
            ..SimConfig::default()
        },
    );
    let s0 = sim.create_stream(0, 64).unwrap();
    let mut px = PadExec::new(&spec, t.clone());
    launch_fixture(&mut px, &mut sim, s0, &ms, p);
    let mut seen = Vec::new();
    while let Some((_, evs)) = sim.step() {
        for e in evs {
            if let Some(f) = px.filter(&e) {
                seen.push((f.tags.kernel, f.kind, f.time, f.tags.user));
            }
        }
    }
    // Reported once, as the RT kernel.
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|e| e.0 == rk as u32 && e.3 == 0));
    let (start, done) = (seen[0].2, seen[1].2);
    // One BE block beside each RT block: the RT blocks take longer
    // than alone (at least the curve at two blocks per CU when the
    // kernels' demands are alike; the resource mix may charge less).
    assert!(
        done - start > rc.kernel_ns,
        "{} vs {}",
        done - start,
        rc.kernel_ns
    );
    let recs = sim.block_records();
    assert!(recs
        .iter()
        .all(|r| r.cus.iter().all(|c| c < rc.blocks as usize)));
}

#[test]
fn killed_or_evicted_padded_launches_are_reported_once_as_the_rt_kernel() {
    use reef_sim::SimConfig;
    let spec = DeviceSpec::preset("mi50").unwrap();
    let (t, ms, rk, p) = padded_fixture(&spec);
    for kill in [true, false] {
        let mut sim = Sim::new(spec.clone(), SimConfig::default());
        let s0 = sim.create_stream(1, 64).unwrap();
        let mut px = PadExec::new(&spec, t.clone());
        if !kill {
            sim.set_preempt_flag(s0, true).unwrap();
        }
        launch_fixture(&mut px, &mut sim, s0, &ms, p.clone());
        let mut seen = Vec::new();
        let mut killed = false;
        while let Some((_, evs)) = sim.step() {
            for e in evs {
                if let Some(f) = px.filter(&e) {
                    if kill && f.kind == EventKind::Started && !killed {
                        sim.kill_stream(s0).unwrap();
                        killed = true;
                    }
                    seen.push((f.tags.task, f.tags.kernel, f.kind));
                }
            }
        }
        let last = *seen.last().unwrap();
        assert_eq!((last.0, last.1), (1, rk as u32));
        if kill {
            assert_eq!(seen.len(), 2, "{seen:?}");
            assert!(matches!(last.2, EventKind::Killed { .. }));
        } else {
            assert_eq!(seen, vec![(1, rk as u32, EventKind::Evicted)]);
        }
        assert!(px.pending.is_empty() && px.part_of.is_empty());
        assert!(px.stats.overhead_ns.is_empty());
    }
}
