//! Device-level contention between launches (docs/simulator.md "Contention
//! between launches"; REEF §6.5, Fig. 27). The expectations are computed
//! here from the documented formula, not by calling the engine's code:
//!
//! - weight `w = sqrt(g)`, `g` = least-squares slope of the block curve over
//!   k = 1..K divided by the curve's first point, clamped to [0, 1];
//! - a block of duration `d` placed while other launches have blocks
//!   resident runs `floor(d x (1 + share x w x P / CUs))`, where `P` sums
//!   over those blocks `w_o x exec_o(1) / exec_o(k_o)` (each block counted
//!   at the rate it issues work at its own co-residency `k_o`).

use reef_model::{default_models_dir, load_named};
use reef_sim::*;
use std::sync::Arc;

fn mi50(share: f64) -> DeviceSpec {
    let mut s = DeviceSpec::preset("mi50").unwrap();
    s.contention_share = share;
    s
}

/// Launch path of an isolated kernel on mi50: host 4 + fetch 4 + dispatch 2 us.
const PATH: u64 = 10_000;

/// Curve with g = 2000 / 8000 = 0.25, so w = 0.5.
const HALF: [u64; 4] = [8_000, 10_000, 12_000, 14_000];
/// Curve with g = 4000 / 4000 = 1 (block time proportional to co-residency), w = 1.
const FULL: [u64; 3] = [4_000, 8_000, 12_000];
/// A flat curve: g = 0, w = 0.
const FLAT: [u64; 4] = [8_000, 8_000, 8_000, 8_000];

fn shape(name: &str, blocks: u32, curve: &[u64], spec: &DeviceSpec) -> Arc<KernelShape> {
    // 256 threads: 4 waves, so co-residency = blocks per CU here.
    Arc::new(KernelShape::synthetic(name, blocks, 256, 0, 0, curve.to_vec(), spec).unwrap())
}

fn tags(task: u64) -> Tags {
    Tags {
        task,
        kernel: 0,
        user: 0,
    }
}

fn drain(sim: &mut Sim) -> Vec<DeviceEvent> {
    let mut all = Vec::new();
    while let Some((_, evs)) = sim.step() {
        sim.check_invariants().unwrap();
        all.extend(evs);
    }
    all
}

fn time_of(evs: &[DeviceEvent], id: LaunchId, kind: EventKind) -> u64 {
    evs.iter()
        .find(|e| e.launch == id && e.kind == kind)
        .unwrap_or_else(|| panic!("{id:?}: no {kind:?} in {evs:?}"))
        .time
}

/// The documented stretch, in floating point (exact for these numbers).
/// `others`: (weight, blocks, exec(1), exec(k)) of each other launch.
fn stretched(d: u64, share: f64, w: f64, others: &[(f64, u32, u64, u64)], cus: u32) -> u64 {
    let p: f64 = others
        .iter()
        .map(|&(wo, n, e1, ek)| wo * n as f64 * e1 as f64 / ek as f64)
        .sum();
    (d as f64 * (1.0 + share * w * p / cus as f64)).floor() as u64
}

#[test]
fn weights_come_from_the_measured_curve() {
    let spec = mi50(0.5);
    assert_eq!(shape("h", 1, &HALF, &spec).contention_weight, 512);
    assert_eq!(shape("f", 1, &FULL, &spec).contention_weight, 1024);
    assert_eq!(shape("z", 1, &FLAT, &spec).contention_weight, 0);
    // One point: no information, no contention.
    assert_eq!(shape("o", 1, &[50_000], &spec).contention_weight, 0);
    // Shrinking curve: clamped at 0; superlinear: clamped at 1.
    assert_eq!(
        shape("d", 1, &[9_000, 8_000, 7_000], &spec).contention_weight,
        0
    );
    assert_eq!(
        shape("s", 1, &[1_000, 4_000, 9_000], &spec).contention_weight,
        1024
    );
    // Noisy curve: least squares over every point. 10,14,12,16: slope 1.6,
    // g = 0.16, w = 0.4 -> 409.6 -> 410.
    assert_eq!(
        shape("n", 1, &[10_000, 14_000, 12_000, 16_000], &spec).contention_weight,
        410
    );
    // The measured models: small element-wise kernels with flat curves are
    // not bound by anything shared; vgg's conv2d_add_nn_relu_6 (94, 154,
    // 222, 292 us ... measured, i.e. 84, 144, ... us of block time) is.
    let m = load_named(&default_models_dir(), "vgg").unwrap();
    let shapes = KernelShape::for_model(&m, &spec).unwrap();
    let w = |suffix: &str| {
        shapes
            .iter()
            .find(|s| s.name.ends_with(suffix))
            .unwrap()
            .contention_weight
    };
    assert_eq!(w("fused_add_nn_relu_kernel0"), 0);
    assert!(w("conv2d_add_nn_relu_6_kernel0") > 700);
}

/// A model run alone, back to back on one stream, gives exactly the same
/// events with contention on as with it off: no other launch is ever
/// resident, so the calibration (docs/simulator.md) is untouched.
#[test]
fn a_model_alone_is_unchanged() {
    let dir = default_models_dir();
    for name in ["vgg", "bert"] {
        let m = load_named(&dir, name).unwrap();
        let run = |share: f64| {
            let spec = mi50(share);
            let shapes = KernelShape::for_model(&m, &spec).unwrap();
            let mut sim = Sim::new(
                spec,
                SimConfig {
                    record_blocks: true,
                    ..SimConfig::default()
                },
            );
            let s = sim.create_stream(0, 4).unwrap();
            let mut host = HostQueues::new();
            for sh in &shapes {
                host.submit(s, KernelLaunch::new(sh.clone(), tags(0)));
            }
            host.pump(&mut sim).unwrap();
            let mut evs = Vec::new();
            while let Some((_, e)) = sim.step() {
                evs.extend(e);
                host.pump(&mut sim).unwrap();
            }
            (evs, sim.block_records().to_vec())
        };
        let (on, off) = (run(0.5), run(0.0));
        assert!(on.0.len() > 100);
        assert_eq!(on, off, "{name}");
        // And the shapes do carry weights, so it is not a vacuous check.
        let shapes = KernelShape::for_model(&m, &mi50(0.5)).unwrap();
        assert!(shapes.iter().any(|s| s.contention_weight > 0));
    }
}

/// The parts of a padded launch are placed in one pass and each part sees
/// the other's blocks: both run longer than alone, by the formula.
#[test]
fn co_resident_parts_both_run_longer_by_the_model() {
    let share = 0.5;
    let spec = mi50(share);
    let cus = spec.compute_units;
    // A: 30 blocks, one per CU on CUs 0..30, w = 0.5, block 8 us (k = 1).
    // B: 60 blocks, two per CU on CUs 30..60, w = 1, block 8 us (k = 2).
    let a = shape("a", 30, &HALF, &spec);
    let b = shape("b", 60, &FULL, &spec);
    let run = |spec: DeviceSpec| {
        let mut sim = Sim::new(spec, SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        let ids = sim
            .launch_padded(
                s,
                vec![
                    KernelLaunch::new(a.clone(), tags(1)).with_cus(CuSet::range(0, 30)),
                    KernelLaunch::new(b.clone(), tags(2)).with_cus(CuSet::range(30, 60)),
                ],
            )
            .unwrap();
        let evs = drain(&mut sim);
        let start = time_of(&evs, ids[0], EventKind::Started);
        assert_eq!(start, time_of(&evs, ids[1], EventKind::Started));
        (
            time_of(&evs, ids[0], EventKind::Completed) - start,
            time_of(&evs, ids[1], EventKind::Completed) - start,
        )
    };
    // Alone (contention off): the curve values.
    assert_eq!(run(mi50(0.0)), (8_000, 8_000));
    let (da, db) = run(spec);
    // A sees B's 60 blocks of weight 1, two per CU, each issuing work at
    // exec(1)/exec(2) = 4/8 of the rate of a block alone on its CU:
    // P = 1 x 60 x 0.5 = 30, A runs 8 x (1 + 0.5 x 0.5 x 30/60) = 9 us.
    let want_a = stretched(8_000, share, 0.5, &[(1.0, 60, 4_000, 8_000)], cus);
    // B sees A's 30 blocks of weight 0.5, one per CU (full rate):
    // P = 15, B runs 8 x (1 + 0.5 x 1 x 15/60) = 9 us.
    let want_b = stretched(8_000, share, 1.0, &[(0.5, 30, 8_000, 8_000)], cus);
    assert_eq!((want_a, want_b), (9_000, 9_000));
    assert_eq!((da, db), (want_a, want_b));
}

/// Plain co-running on two streams (the `streams` policy case), and a
/// kernel that is not bound by shared resources.
#[test]
fn streams_co_run_with_placement_time_stretch() {
    let share = 0.5;
    let spec = mi50(share);
    let cus = spec.compute_units;
    let a = shape("a", 30, &HALF, &spec);
    let b = shape("b", 60, &FULL, &spec);
    let z = shape("z", 30, &FLAT, &spec);
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s0 = sim.create_stream(0, 4).unwrap();
    let s1 = sim.create_stream(0, 4).unwrap();
    let s2 = sim.create_stream(0, 4).unwrap();
    // Both dispatched at 10 us, stream 0 first: A is placed on an idle
    // device and keeps its 8 us; B, placed after it, sees A's blocks.
    let ia = sim
        .launch(
            s0,
            KernelLaunch::new(a, tags(1)).with_cus(CuSet::range(0, 30)),
        )
        .unwrap();
    let ib = sim
        .launch(
            s1,
            KernelLaunch::new(b, tags(2)).with_cus(CuSet::range(30, 60)),
        )
        .unwrap();
    // Z (flat curve) is dispatched at 10 us too, placed last, beside A and
    // B: weight 0, so unaffected, and it adds no pressure either.
    let iz = sim
        .launch(
            s2,
            KernelLaunch::new(z, tags(3)).with_cus(CuSet::range(0, 30)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    assert_eq!(time_of(&evs, ia, EventKind::Completed), PATH + 8_000);
    let want_b = stretched(8_000, share, 1.0, &[(0.5, 30, 8_000, 8_000)], cus);
    assert_eq!(time_of(&evs, ib, EventKind::Completed), PATH + want_b);
    assert!(want_b > 8_000);
    // Z shares CUs with A: co-residency 2 (A's 4 waves + its own) on the
    // flat curve is still 8 us.
    assert_eq!(time_of(&evs, iz, EventKind::Completed), PATH + 8_000);
}

/// Kernels that do not overlap in time do not slow each other down.
#[test]
fn disjoint_in_time_no_effect() {
    let spec = mi50(0.5);
    let a = shape("a", 30, &HALF, &spec);
    let b = shape("b", 60, &FULL, &spec);
    let mut sim = Sim::new(spec, SimConfig::default());
    let s0 = sim.create_stream(0, 4).unwrap();
    let s1 = sim.create_stream(0, 4).unwrap();
    let ia = sim
        .launch(
            s0,
            KernelLaunch::new(a, tags(1)).with_cus(CuSet::range(0, 30)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    let done_a = time_of(&evs, ia, EventKind::Completed);
    assert_eq!(done_a, PATH + 8_000);
    // B launched after A has gone: alone on the device.
    let ib = sim
        .launch(
            s1,
            KernelLaunch::new(b, tags(2)).with_cus(CuSet::range(30, 60)),
        )
        .unwrap();
    let evs = drain(&mut sim);
    let start_b = time_of(&evs, ib, EventKind::Started);
    assert_eq!(time_of(&evs, ib, EventKind::Completed) - start_b, 8_000);
}

/// Ten streams of the measured models with jitter: the same seed gives the
/// same trace, and contention does change it (the models' kernels carry
/// weights and overlap).
#[test]
fn deterministic_and_effective_on_concurrent_models() {
    let trace = |share: f64, seed: u64| {
        let spec = mi50(share);
        let dir = default_models_dir();
        let mut sim = Sim::new(
            spec.clone(),
            SimConfig {
                seed,
                jitter: 0.05,
                record_blocks: false,
            },
        );
        let mut host = HostQueues::new();
        for (i, name) in ["vgg", "resnet152", "inception"].iter().enumerate() {
            let m = load_named(&dir, name).unwrap();
            let shapes = KernelShape::for_model(&m, &spec).unwrap();
            let s = sim.create_stream(i as i32, 4).unwrap();
            for sh in &shapes {
                host.submit(s, KernelLaunch::new(sh.clone(), tags(i as u64)));
            }
        }
        host.pump(&mut sim).unwrap();
        let mut evs = Vec::new();
        while let Some((_, e)) = sim.step() {
            sim.check_invariants().unwrap();
            evs.extend(e);
            host.pump(&mut sim).unwrap();
        }
        evs
    };
    let a = trace(0.5, 7);
    assert_eq!(a, trace(0.5, 7));
    let off = trace(0.0, 7);
    assert_eq!(a.len(), off.len());
    // Co-running models take longer with contention.
    assert!(a.last().unwrap().time > off.last().unwrap().time);
}

#[test]
fn contention_share_is_validated() {
    let text = include_str!("../devices/mi50.toml");
    let line = "contention_share = 0.2";
    assert!(text.contains(line));
    for bad in ["-0.1", "1.5", "nan"] {
        let t = text.replace(line, &format!("contention_share = {bad}"));
        assert_ne!(t, text);
        let e = DeviceSpec::parse(std::path::Path::new("x.toml"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("contention_share"), "{e}");
    }
    let t = text.replace(&format!("{line}\n"), "");
    let e = DeviceSpec::parse(std::path::Path::new("x.toml"), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("contention_share"), "{e}");
}
