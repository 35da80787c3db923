//! Shared memory bandwidth between launches (docs/simulator.md "Shared
//! memory bandwidth"; REEF §6.5, Fig. 27). The expectations are computed
//! here from the documented rule, not by calling the engine's code:
//!
//! - a resident group draws `blocks x b / d` bytes/s (`b` its kernel's DRAM
//!   bytes per block, `d` its duration); `R` = the sum over all resident
//!   groups, the groups placed in the same pass included unstretched;
//! - a block at co-residency `k` with duration `d` was measured under the
//!   load `R_ref = k x b x CUs / d`, and alone (its own launch drawing
//!   `R_own`); when `R > c = max(W, R_ref, R_own)` it runs
//!   `d + min(d, t_mem) x (R - c) / c`, `t_mem = k x b x CUs / W`, rounded
//!   down; otherwise `d`.

use reef_model::{default_models_dir, load_named};
mod common;

use common::{drain, event_time, tags};
use reef_sim::*;
use std::sync::Arc;

fn mi50() -> DeviceSpec {
    DeviceSpec::preset("mi50").unwrap()
}

/// Launch path of an isolated kernel on mi50: host 4 + fetch 4 + dispatch 2 us.
const PATH: u64 = 10_000;
/// One block, 10 us, whatever its co-residency (a flat curve).
const FLAT: [u64; 1] = [10_000];

/// 30 one-block-per-CU blocks (256 threads) moving `bytes` each.
fn half(name: &str, bytes: u64, spec: &DeviceSpec) -> Arc<KernelShape> {
    Arc::new(
        KernelShape::synthetic(name, 30, 256, 0, 0, FLAT.to_vec(), spec)
            .unwrap()
            .with_dram_bytes(bytes),
    )
}

/// Bytes per 10 us block so that 30 such blocks draw `frac` of W.
fn bytes_for(frac: f64, spec: &DeviceSpec) -> u64 {
    (frac * spec.memory_bandwidth_bytes_per_s as f64 * 10e-6 / 30.0).round() as u64
}

/// The documented stretch of a block (k = 1 here) of `b` bytes placed while
/// the groups draw `r` bytes/s in all.
fn stretched(d: u64, b: u64, r: f64, spec: &DeviceSpec) -> u64 {
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    let cus = spec.compute_units as f64;
    let r_ref = b as f64 * cus / (d as f64 * 1e-9);
    let c = w.max(r_ref);
    if r <= c {
        return d;
    }
    let t_mem = b as f64 * cus / w * 1e9;
    (d as f64 + t_mem.min(d as f64) * (r - c) / c).floor() as u64
}

/// Runs `first` on CUs 0..30 and, `gap` ns later, `second` on CUs 30..60
/// (two streams); returns (first's, second's) execution times, from
/// `Started` to `Completed`.
fn pair(first: Arc<KernelShape>, second: Arc<KernelShape>, gap: u64) -> (u64, u64, Sim) {
    let mut sim = Sim::new(mi50(), SimConfig::default());
    let (s0, s1) = (
        sim.create_stream(0, 4).unwrap(),
        sim.create_stream(0, 4).unwrap(),
    );
    let a = sim
        .launch(
            s0,
            KernelLaunch::new(first, tags(0)).with_cus(CuSet::range(0, 30)),
        )
        .unwrap();
    let mut evs = sim.advance_to(gap);
    let b = sim
        .launch(
            s1,
            KernelLaunch::new(second, tags(1)).with_cus(CuSet::range(30, 60)),
        )
        .unwrap();
    evs.extend(drain(&mut sim));
    let t =
        |id| event_time(&evs, id, EventKind::Completed) - event_time(&evs, id, EventKind::Started);
    (t(a), t(b), sim)
}

/// The measured models' kernels carry the bytes of their class's memory
/// utilisation (Aker §3.1) at full occupancy on this device; kernels of an
/// unknown class carry none.
#[test]
fn model_bytes_come_from_the_class_utilisation() {
    let spec = mi50();
    let dir = default_models_dir();
    let m = load_named(&dir, "resnet152").unwrap();
    let shapes = KernelShape::for_model(&m, &spec).unwrap();
    let (mut conv, mut mem) = (0, 0);
    for s in &shapes {
        let k = s.curve_len() as u32;
        use reef_sim::resources::{class_of_name, Class};
        let util = match class_of_name(&s.name) {
            Class::ComputePrefer => {
                conv += 1;
                0.0315
            }
            Class::MemoryPrefer => {
                mem += 1;
                0.856
            }
            _ => {
                assert_eq!(s.dram_bytes_per_block, 0, "{}", s.name);
                continue;
            }
        };
        let want = util * spec.memory_bandwidth_bytes_per_s as f64 * s.exec_ns(k) as f64
            / 1e9
            / (spec.compute_units as f64 * k as f64);
        assert!(
            (s.dram_bytes_per_block as f64 - want).abs() <= 0.5,
            "{}: {} vs {want}",
            s.name,
            s.dram_bytes_per_block
        );
    }
    assert!(conv > 10 && mem > 10, "{conv} {mem}");
    // A synthetic kernel declares none.
    let s = KernelShape::synthetic("s", 1, 64, 0, 0, vec![1000], &spec).unwrap();
    assert_eq!(s.dram_bytes_per_block, 0);
}

/// A model alone, back to back on one stream, runs exactly as without its
/// bytes: its kernels never draw more than the load their curves were
/// measured under, so the calibration (docs/simulator.md) is untouched.
#[test]
fn a_model_alone_is_unchanged() {
    let dir = default_models_dir();
    for name in ["vgg", "bert", "densenet", "inception", "resnet152"] {
        let m = load_named(&dir, name).unwrap();
        let run = |bytes: bool| {
            let spec = mi50();
            let shapes = KernelShape::for_model(&m, &spec).unwrap();
            assert!(shapes.iter().any(|s| s.dram_bytes_per_block > 0));
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
                let b = if bytes { sh.dram_bytes_per_block } else { 0 };
                let sh = Arc::new((**sh).clone().with_dram_bytes(b));
                host.submit(s, KernelLaunch::new(sh, tags(0)));
            }
            host.pump(&mut sim).unwrap();
            let mut evs = Vec::new();
            while let Some((_, e)) = sim.step() {
                evs.extend(e);
                host.pump(&mut sim).unwrap();
            }
            (evs, sim.block_records().to_vec(), sim.dram_load_peak())
        };
        let (on, off) = (run(true), run(false));
        assert!(on.0.len() > 100);
        assert_eq!((&on.0, &on.1), (&off.0, &off.1), "{name}");
        assert!(on.2 > 0.0 && off.2 == 0.0, "{name}: peak {}", on.2);
    }
}

/// One kernel alone drawing twice the bandwidth, placed unevenly (two
/// groups at different co-residency): never stretched by its own draw.
#[test]
fn a_kernel_alone_is_never_stretched_by_itself() {
    let spec = mi50();
    let curve = vec![10_000, 20_000, 30_000, 40_000];
    // 150 blocks on 60 CUs: 30 CUs with 3, 30 with 2.
    let bytes = (2.0 * spec.memory_bandwidth_bytes_per_s as f64 * 10e-6 / 60.0) as u64;
    let sh = Arc::new(
        KernelShape::synthetic("big", 150, 256, 0, 0, curve.clone(), &spec)
            .unwrap()
            .with_dram_bytes(bytes),
    );
    let mut sim = Sim::new(
        spec,
        SimConfig {
            record_blocks: true,
            ..SimConfig::default()
        },
    );
    let s = sim.create_stream(0, 4).unwrap();
    sim.launch(s, KernelLaunch::new(sh, tags(0))).unwrap();
    drain(&mut sim);
    let recs = sim.block_records();
    assert_eq!(recs.len(), 2);
    for r in recs {
        assert_eq!(r.end - r.start, curve[r.per_cu as usize - 1], "{r:?}");
    }
    assert!(sim.dram_load_peak() > 1.0);
}

/// Below the device's bandwidth nothing is stretched: two kernels drawing
/// 0.45 W each co-run as if alone.
#[test]
fn below_the_bandwidth_nothing_changes() {
    let spec = mi50();
    let b = bytes_for(0.45, &spec);
    let (ta, tb, sim) = pair(half("a", b, &spec), half("b", b, &spec), 2_000);
    assert_eq!((ta, tb), (FLAT[0], FLAT[0]));
    let peak = sim.dram_load_peak();
    assert!((peak - 0.9).abs() < 1e-3, "{peak}");
    assert_eq!(sim.dram_load(), 0.0);
}

/// Oversubscribed: a kernel drawing 0.4 W placed beside one drawing 0.9 W
/// (R = 1.3 W) has the memory-bound part of its time stretched by the
/// formula; the heavy one, placed first, is not re-timed.
#[test]
fn oversubscribed_bandwidth_stretches_the_newcomer() {
    let spec = mi50();
    let (bh, bl) = (bytes_for(0.9, &spec), bytes_for(0.4, &spec));
    let (th, tl, sim) = pair(half("heavy", bh, &spec), half("light", bl, &spec), 2_000);
    assert_eq!(th, FLAT[0]);
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    let rate = |b: u64| 30.0 * b as f64 / 10e-6;
    let want = stretched(FLAT[0], bl, rate(bh) + rate(bl), &spec);
    assert!(want > FLAT[0] + 1000, "{want}");
    assert!(tl.abs_diff(want) <= 1, "{tl} vs {want}");
    assert!(sim.dram_load_peak() > 1.29 && sim.dram_load_peak() < 1.31 * w / w);
}

/// The reverse order: the heavy kernel's curve point was measured with a
/// whole device of it (1.8 W), more than both together draw, so it is not
/// stretched by the light one; nor is the light one, placed before.
#[test]
fn a_curve_measured_under_more_load_is_not_charged_again() {
    let spec = mi50();
    let (bh, bl) = (bytes_for(0.9, &spec), bytes_for(0.4, &spec));
    let (tl, th, _) = pair(half("light", bl, &spec), half("heavy", bh, &spec), 2_000);
    assert_eq!((tl, th), (FLAT[0], FLAT[0]));
    // Same kernel on both halves (R = R_ref = 1.8 W): its curve holds it.
    let k = half("same", bh, &spec);
    let (t1, t2, sim) = pair(k.clone(), k, 2_000);
    assert_eq!((t1, t2), (FLAT[0], FLAT[0]));
    assert!(sim.dram_load_peak() > 1.7);
}

/// The parts of a multi-part launch are placed in one pass and see each
/// other: two light parts (0.8 W each, curve load 1.6 W) do not stretch; a
/// heavy part beside a light one stretches the light one only. Run as a
/// fused launch (the same placement as a padded one, without the dkp
/// kernel's per-block cost, which the padded case below adds).
#[test]
fn padded_parts_see_each_other() {
    let spec = mi50();
    let run_as = |padded: bool, ba: u64, bb: u64| {
        let mut sim = Sim::new(spec.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        let how = if padded {
            Sim::launch_padded
        } else {
            Sim::launch_fused
        };
        let ids = how(
            &mut sim,
            s,
            vec![
                KernelLaunch::new(half("a", ba, &spec), tags(0)).with_cus(CuSet::range(0, 30)),
                KernelLaunch::new(half("b", bb, &spec), tags(1)).with_cus(CuSet::range(30, 60)),
            ],
        )
        .unwrap();
        let evs = drain(&mut sim);
        let t = |id| {
            event_time(&evs, id, EventKind::Completed) - event_time(&evs, id, EventKind::Started)
        };
        (t(ids[0]), t(ids[1]))
    };
    let run = |ba, bb| run_as(false, ba, bb);
    let b8 = bytes_for(0.8, &spec);
    assert_eq!(run(b8, b8), (FLAT[0], FLAT[0]));
    // Padded: the same, each block the dkp kernel's cost longer.
    let p = padded_block_ns(FLAT[0]);
    assert_eq!(run_as(true, b8, b8), (p, p));
    let (bh, bl) = (bytes_for(1.2, &spec), bytes_for(0.3, &spec));
    let rate = |b: u64| 30.0 * b as f64 / 10e-6;
    let (th, tl) = run(bh, bl);
    assert_eq!(th, FLAT[0]);
    let want = stretched(FLAT[0], bl, rate(bh) + rate(bl), &spec);
    assert!(want > FLAT[0]);
    assert!(tl.abs_diff(want) <= 1, "{tl} vs {want}");
    // Isolated launch path is unaffected by any of this.
    let _ = PATH;
}

/// Ten streams of the measured models with jitter: the same seed gives the
/// same trace; the DRAM draw is accounted (peak above zero, back to zero
/// when the device is idle; check_invariants compares it with the groups).
#[test]
fn deterministic_on_concurrent_models() {
    let trace = |seed: u64| {
        let spec = mi50();
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
        for (i, name) in ["vgg", "resnet152", "inception", "bert", "densenet"]
            .iter()
            .enumerate()
        {
            let m = load_named(&dir, name).unwrap();
            let shapes = KernelShape::for_model(&m, &spec).unwrap();
            let s = sim.create_stream(0, 4).unwrap();
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
        assert_eq!(sim.dram_load(), 0.0);
        (evs, sim.dram_load_peak())
    };
    let (a, peak) = trace(7);
    assert!(peak > 0.0);
    assert_eq!(a, trace(7).0);
}

/// A spec that still carries the removed `contention_share` is refused with
/// the field named.
#[test]
fn old_contention_share_is_refused() {
    let text = include_str!("../devices/mi50.toml");
    let t = format!("{text}\ncontention_share = 0.2\n");
    let e = DeviceSpec::parse(std::path::Path::new("x.toml"), &t)
        .unwrap_err()
        .to_string();
    assert!(e.contains("contention_share"), "{e}");
    assert!(e.contains("delete the line"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}
