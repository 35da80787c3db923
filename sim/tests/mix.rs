//! The resource mix (sim/src/mix.rs) in the engine: two launches that
//! share every CU slow each other by what they use, not by how many blocks
//! they have; undeclared kernels behave as before (also sim/tests/golden.rs).

use reef_sim::*;
use std::sync::Arc;

fn kernel(name: &str, d: Demand, spec: &DeviceSpec) -> Arc<KernelShape> {
    // Saturated pipe: a block's time grows with its co-residency.
    let curve = (1..=8).map(|k| k * 10_000).collect();
    Arc::new(
        KernelShape::synthetic(name, spec.compute_units * 4, 256, 0, 0, curve, spec)
            .unwrap()
            .with_demand(d),
    )
}

/// Two launches on two streams, each 4 blocks per CU, started together:
/// the time until both complete.
fn corun(a: &Arc<KernelShape>, b: &Arc<KernelShape>, spec: &DeviceSpec) -> u64 {
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s1 = sim.create_stream(0, 4).unwrap();
    let s2 = sim.create_stream(0, 4).unwrap();
    sim.launch(s1, KernelLaunch::new(a.clone(), Tags::default()))
        .unwrap();
    sim.launch(s2, KernelLaunch::new(b.clone(), Tags::default()))
        .unwrap();
    let mut end = 0;
    while let Some((t, _)) = sim.step() {
        sim.check_invariants().unwrap();
        end = t;
    }
    end
}

#[test]
fn complementary_kernels_corun_same_kinds_queue() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let alu = Demand::from_times([0.0, 1.0, 0.0]).unwrap();
    let mem = Demand::from_times([0.0, 0.0, 1.0]).unwrap();
    let (c1, c2, m) = (
        kernel("c1", alu, &spec),
        kernel("c2", alu, &spec),
        kernel("m", mem, &spec),
    );
    let same = corun(&c1, &c2, &spec);
    let mixed = corun(&c1, &m, &spec);
    // 8 blocks per CU at 10 us per co-resident block: 80 us for the same
    // kind, 40 us for opposite kinds (each sees only its own 4 blocks).
    let lp = spec.launch_path_ns();
    assert_eq!(same - lp, 80_000);
    assert_eq!(mixed - lp, 40_000);
    // Undeclared kernels: the old rule, the same as one kind.
    let (u1, u2) = (
        kernel("u1", Demand::UNKNOWN, &spec),
        kernel("u2", Demand::UNKNOWN, &spec),
    );
    assert_eq!(corun(&u1, &u2, &spec), same);
}
