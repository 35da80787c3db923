//! Property: a fused launch (Aker §5.4, reef-exec `aker`) runs every block
//! of both components exactly once, on CUs where the component has at most
//! its persistent blocks, whatever the shapes, the ratio, the split and the
//! resource mix of the two kernels.

use proptest::prelude::*;
use reef_exec::aker::{launch_fused, ratios, Component};
use reef_sim::*;
use std::sync::Arc;

fn shape(
    name: &str,
    blocks: u32,
    threads: u32,
    curve: Vec<u64>,
    d: [u32; 3],
    spec: &DeviceSpec,
) -> Arc<KernelShape> {
    let dm = Demand::from_times([d[0] as f64, d[1] as f64, d[2] as f64]).unwrap_or(Demand::UNKNOWN);
    Arc::new(
        KernelShape::synthetic(name, blocks, threads, 0, 0, curve, spec)
            .unwrap()
            .with_demand(dm),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_block_of_both_components_runs_exactly_once(
        dev in 0usize..3,
        b1 in 1u32..3000, b2 in 1u32..3000,
        t1 in 1u32..16, t2 in 1u32..16,
        c1 in proptest::collection::vec(1_000u64..50_000, 1..6),
        c2 in proptest::collection::vec(1_000u64..50_000, 1..6),
        d1 in proptest::array::uniform3(0u32..10), d2 in proptest::array::uniform3(0u32..10),
        pick in 0usize..1000, s1 in 0u32..1000, s2 in 0u32..1000,
        other in proptest::bool::ANY,
    ) {
        let spec = DeviceSpec::preset(PRESETS[dev]).unwrap();
        let k1 = shape("k1", b1, t1 * 64, c1, d1, &spec);
        let k2 = shape("k2", b2, t2 * 64, c2, d2, &spec);
        let rs = ratios(&spec, &k1, &k2);
        prop_assume!(!rs.is_empty());
        let (a, b) = rs[pick % rs.len()];
        // Kernel split: each component runs a prefix of its grid.
        let (e1, e2) = (1 + s1 % b1, 1 + s2 % b2);
        let mut sim = Sim::new(spec.clone(), SimConfig { seed: 1, jitter: 0.0, record_blocks: true });
        let s = sim.create_stream(1, 4).unwrap();
        if other {
            // Something else resident too (another stream's kernel).
            let o = sim.create_stream(0, 4).unwrap();
            sim.launch(o, KernelLaunch::new(k2.clone(), Tags::default())).unwrap();
        }
        let ids = launch_fused(
            &mut sim,
            s,
            Component { launch: KernelLaunch::new(k1.clone(), Tags::default()).with_blocks(0..e1), per_cu: a },
            Component { launch: KernelLaunch::new(k2.clone(), Tags::default()).with_blocks(0..e2), per_cu: b },
        ).unwrap();
        let mut done = 0;
        while let Some((_, evs)) = sim.step() {
            sim.check_invariants().unwrap();
            done += evs.iter().filter(|e| e.kind == EventKind::Completed && ids.contains(&e.launch)).count();
        }
        prop_assert_eq!(done, 2);
        for (id, end, cap) in [(ids[0], e1, a), (ids[1], e2, b)] {
            let mut seen = vec![0u32; end as usize];
            let recs: Vec<_> = sim.block_records().iter().filter(|r| r.launch == id).collect();
            for r in &recs {
                prop_assert_eq!(r.outcome, BlockOutcome::Finished);
                prop_assert!(r.per_cu <= cap);
                for blk in r.blocks.clone() {
                    seen[blk as usize] += 1;
                }
            }
            prop_assert!(seen.iter().all(|&n| n == 1), "blocks not run exactly once: {:?}", seen);
            // At no time more than `cap` blocks of the component on a CU.
            let mut times: Vec<u64> = recs.iter().map(|r| r.start).collect();
            times.sort();
            times.dedup();
            for t in times {
                let mut per = vec![0u32; spec.compute_units as usize];
                for r in recs.iter().filter(|r| r.start <= t && t < r.end) {
                    for cu in r.cus.iter() {
                        per[cu] += r.per_cu;
                    }
                }
                prop_assert!(per.iter().all(|&n| n <= cap));
            }
        }
    }
}
