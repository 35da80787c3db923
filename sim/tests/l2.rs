//! L2 capacity between launches (docs/simulator.md "L2 capacity"), and
//! the spec fields that must carry their source. The expectations are
//! computed here from the documented rule, not by calling the engine's
//! code:
//!
//! - `S` = the summed footprints of the launches with resident blocks, `C`
//!   the preset's `l2_bytes`, `F` a kernel's footprint; when `S > C` a group
//!   placed then draws, per block, `(min(F, C) - F x C / S) / blocks` bytes
//!   beyond its own, charged by the shared memory bandwidth (see
//!   `bandwidth.rs`); nothing when `S <= C` or alone.

mod common;

use common::{drain, event_time, tags};
use reef_sim::*;
use std::sync::Arc;

fn mi50() -> DeviceSpec {
    DeviceSpec::preset("mi50").unwrap()
}

const FLAT: [u64; 1] = [10_000];

/// 30 one-block-per-CU blocks of 10 us moving `bytes` each, touching
/// `footprint` bytes in all.
fn shape(name: &str, bytes: u64, footprint: u64, spec: &DeviceSpec) -> Arc<KernelShape> {
    Arc::new(
        KernelShape::synthetic(name, 30, 256, 0, 0, FLAT.to_vec(), spec)
            .unwrap()
            .with_dram_bytes(bytes)
            .with_footprint(footprint),
    )
}

/// `first` on CUs 0..30, then 2 us later `second` on CUs 30..60; returns
/// their execution times, and the DRAM load just after the second is placed.
fn pair(first: Arc<KernelShape>, second: Arc<KernelShape>) -> (u64, u64, f64, Sim) {
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
    let mut evs = sim.advance_to(2_000);
    let b = sim
        .launch(
            s1,
            KernelLaunch::new(second, tags(1)).with_cus(CuSet::range(30, 60)),
        )
        .unwrap();
    // Past the second's launch path (10 us), before the first ends.
    evs.extend(sim.advance_to(12_500));
    sim.check_invariants().unwrap();
    let load = sim.dram_load();
    evs.extend(drain(&mut sim));
    sim.check_invariants().unwrap();
    let t =
        |id| event_time(&evs, id, EventKind::Completed) - event_time(&evs, id, EventKind::Started);
    (t(a), t(b), load, sim)
}

fn rate(bytes_per_block: f64) -> f64 {
    30.0 * bytes_per_block / 10e-6
}

/// Footprints that fit together: no extra traffic, the load is the two
/// kernels' own.
#[test]
fn footprints_that_fit_together_cost_nothing() {
    let spec = mi50();
    let c = spec.l2_bytes;
    let (ta, tb, load, sim) = pair(
        shape("a", 1000, c / 2, &spec),
        shape("b", 1000, c / 2, &spec),
    );
    assert_eq!((ta, tb), (FLAT[0], FLAT[0]));
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    assert!((load - 2.0 * rate(1000.0) / w).abs() < 1e-9, "{load}");
    assert!((sim.l2_load_peak() - 1.0).abs() < 1e-9);
    assert_eq!(sim.l2_load(), 0.0);
}

/// Footprints that do not fit together: the newcomer draws the bytes the
/// L2 no longer holds for it, by the rule above; the first, placed alone,
/// draws only its own.
#[test]
fn footprints_beyond_the_l2_add_dram_traffic() {
    let spec = mi50();
    let c = spec.l2_bytes as f64;
    let (fa, fb) = (3 << 20, 3 << 20);
    let (_, _, load, sim) = pair(shape("a", 1000, fa, &spec), shape("b", 1000, fb, &spec));
    let s = (fa + fb) as f64;
    let lost = (fb as f64).min(c) - fb as f64 * c / s;
    let extra = (lost / 30.0).floor();
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    let want = (rate(1000.0) + rate(1000.0 + extra)) / w;
    assert!(extra > 10_000.0, "{extra}");
    assert!((load - want).abs() < 1e-6, "{load} vs {want}");
    assert!((sim.l2_load_peak() - s / c).abs() < 1e-9);
}

/// A kernel alone is never charged, even with a footprint larger than the
/// L2 (its own curve holds that).
#[test]
fn a_kernel_alone_is_never_charged() {
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 4).unwrap();
    let k = shape("big", 1000, 4 * spec.l2_bytes, &spec);
    let id = sim.launch(s, KernelLaunch::new(k, tags(0))).unwrap();
    let mut evs = sim.advance_to(10_500);
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    assert!((sim.dram_load() - rate(1000.0) / w).abs() < 1e-9);
    evs.extend(drain(&mut sim));
    let t = event_time(&evs, id, EventKind::Completed) - event_time(&evs, id, EventKind::Started);
    assert_eq!(t, FLAT[0]);
}

/// Heavy traffic plus lost L2 capacity past the bandwidth: the newcomer is
/// stretched more than the bandwidth term alone would stretch it.
#[test]
fn lost_capacity_past_saturation_stretches_more() {
    let spec = mi50();
    let heavy = (0.9 * spec.memory_bandwidth_bytes_per_s as f64 * 10e-6 / 30.0) as u64;
    let light = (0.3 * spec.memory_bandwidth_bytes_per_s as f64 * 10e-6 / 30.0) as u64;
    let small = 1 << 20;
    let (_, t_fit, _, _) = pair(
        shape("h", heavy, small, &spec),
        shape("l", light, small, &spec),
    );
    let big = 3 << 20;
    let (_, t_lost, _, _) = pair(shape("h", heavy, big, &spec), shape("l", light, big, &spec));
    assert!(t_fit > FLAT[0], "{t_fit}");
    assert!(t_lost > t_fit, "{t_lost} vs {t_fit}");
}

/// Every preset sets `l2_bytes` with its source, and a spec that sets it
/// without one (or with a `Source:` line that says not where) is refused
/// with the field named — as a removed `contention_share` is refused
/// (`bandwidth.rs`).
#[test]
fn l2_bytes_without_a_source_is_refused() {
    for name in ["mi50", "gv100", "h100"] {
        let spec = DeviceSpec::preset(name).unwrap();
        assert!(spec.l2_bytes > 0, "{name}");
    }
    for f in SOURCED_FIELDS {
        for text in [
            include_str!("../devices/mi50.toml"),
            include_str!("../devices/gv100.toml"),
            include_str!("../devices/h100.toml"),
        ] {
            let block = field_source(text, f).unwrap();
            assert!(block.contains("Source:"), "{f}: {block}");
        }
    }
    let text = include_str!("../devices/mi50.toml");
    let strip = |from: &str| -> String {
        let mut out = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            // Drop the comment block right above `l2_bytes` from `from` on.
            let above_l2 = lines[i..].iter().take_while(|x| x.starts_with('#')).count() > 0
                && lines[i..]
                    .iter()
                    .find(|x| !x.starts_with('#'))
                    .is_some_and(|x| x.starts_with("l2_bytes"));
            if above_l2 && l.contains(from) {
                continue;
            }
            out.push(*l);
        }
        out.join("\n")
    };
    let refused = |t: &str| {
        DeviceSpec::parse(std::path::Path::new("x.toml"), t)
            .unwrap_err()
            .to_string()
    };
    // No Source: line at all.
    let e = refused(&strip("#"));
    assert!(
        e.contains("l2_bytes") && e.contains("without a source"),
        "{e}"
    );
    // A Source: line that names no table, figure, section or page.
    let vague = text.replace(
        "# Source: AMD ROCm documentation, \"GPU hardware specifications\"\n# (docs/reference/gpu-arch-specs.rst), AMD Instinct GPUs table, row\n",
        "# Source: AMD.\n# (somewhere), ",
    );
    assert_ne!(vague, text, "the mi50 preset's source lines changed");
    let e = refused(&vague);
    assert!(
        e.contains("l2_bytes") && e.contains("names no table"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    // A file without the field parses (no L2 term).
    let none: String = text
        .lines()
        .filter(|l| !l.starts_with("l2_bytes"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        DeviceSpec::parse(std::path::Path::new("x.toml"), &none)
            .unwrap()
            .l2_bytes,
        0
    );
}

/// The channel queueing delay: M/D/1 per channel at the access's service
/// time, bounded by Little's law (`rho x L0`).
#[test]
fn dram_queueing_follows_the_documented_queue() {
    let spec = mi50();
    // MI50: 64 B x 32 channels / 1024 GB/s = 2 ns per access.
    let s: f64 = 64.0 * 32.0 / 1024.0;
    for rho in [0.1f64, 0.5, 0.9, 0.99] {
        let want = (s * rho / (2.0 * (1.0 - rho))).min(rho * 468.0);
        assert!((spec.dram_queueing_ns(rho) - want).abs() < 1e-9, "{rho}");
    }
    assert_eq!(spec.dram_queueing_ns(0.0), 0.0);
    // Near saturation the open queue would diverge; in-flight accesses
    // bound it.
    assert!((spec.dram_queueing_ns(0.99999) - 0.99999 * 468.0).abs() < 1e-6);
    let mut none = spec.clone();
    none.dram_latency_ns = 0;
    assert_eq!(none.dram_queueing_ns(0.9), 0.0);
}

/// Below saturation, a newcomer placed at a load above the one its curve
/// was measured under has its memory-bound part stretched by the ratio of
/// loaded latencies; the first, placed alone, is not.
#[test]
fn loaded_latency_stretches_below_saturation() {
    let spec = mi50();
    let w = spec.memory_bandwidth_bytes_per_s as f64;
    let per = |frac: f64| (frac * w * 10e-6 / 30.0).round() as u64;
    let (bh, bl) = (per(0.6), per(0.3));
    let (th, tl, _, _) = pair(
        shape("heavy", bh, 1 << 20, &spec),
        shape("light", bl, 1 << 20, &spec),
    );
    assert_eq!(th, FLAT[0]);
    // rho = R / W with both resident; the light one's curve point drew
    // k x b x CUs / d (60 CUs' worth of its blocks).
    let rate = |b: u64| 30.0 * b as f64 / 10e-6;
    let rho = (rate(bh) + rate(bl)) / w;
    let rho_ref = bl as f64 * 60.0 / 10e-6 / w;
    let q = |x: f64| spec.dram_queueing_ns(x);
    let stretch = (q(rho) - q(rho_ref)) / (468.0 + q(rho_ref));
    let t_mem = (bl as f64 * 60.0 / w * 1e9).min(FLAT[0] as f64);
    let want = FLAT[0] + (t_mem * stretch) as u64;
    assert!(want > FLAT[0] + 50, "{want}");
    assert!(tl.abs_diff(want) <= 1, "{tl} vs {want}");
}

/// The `ada6000` preset (Aker's GPU, issue 31 item 3) carries a source on
/// every field it sets, not only on [`SOURCED_FIELDS`]: each key's comment
/// block must hold a `Source:` line naming a table, figure, section or
/// page ([`field_source`]). It leaves the loaded-latency fields unset (no
/// published Ada measurement found), so that term is off, and a copy that
/// loses one of its sources is refused by this check.
#[test]
fn every_ada6000_field_has_a_source() {
    let text = include_str!("../devices/ada6000.toml");
    let keys: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains('='))
        .map(|l| l.split('=').next().unwrap().trim())
        .collect();
    assert!(keys.len() >= 25, "{keys:?}");
    let check = |t: &str| -> Result<(), String> {
        for k in &keys {
            if *k == "name" {
                continue;
            }
            let block = field_source(t, k).map_err(|e| format!("{k}: {e}"))?;
            if !block.contains("Source:") {
                return Err(format!("{k}: not set or no source"));
            }
        }
        Ok(())
    };
    check(text).unwrap();
    let spec = DeviceSpec::preset("ada6000").unwrap();
    assert_eq!(spec.compute_units, 142);
    assert!(spec.matrix_flops > spec.fp32_flops);
    assert_eq!(spec.l2_bytes, 96 << 20);
    assert_eq!(spec.dram_latency_ns, 0, "no sourced loaded latency for Ada");
    // Dropping the Source: line of one field is caught, with its name.
    let lost = text.replacen("# 960 GB/s. Source: NV spec", "# 960 GB/s, NV spec", 1);
    assert_ne!(lost, text, "the ada6000 bandwidth source lines changed");
    let e = check(&lost).unwrap_err();
    assert!(e.starts_with("memory_bandwidth_bytes_per_s"), "{e}");
}
