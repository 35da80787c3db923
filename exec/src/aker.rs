//! Aker's fused kernels on the simulated device (Aker §5.3 PTB versions,
//! §5.4 flexible-ratio fusion, Fig. 7; §8.2 kernel split, Fig. 12).
//!
//! A fused kernel of two components at ratio `a:b` is one launch whose
//! blocks each hold `a` persistent blocks of component 1 and `b` of
//! component 2, one fused block per CU. On reef-sim it is executed like a
//! padded launch ([`Sim::launch_padded`]: one queue slot, one fetch, one
//! dispatch, parts started together) but both parts run on the same CUs,
//! each capped at its persistent blocks per CU
//! ([`KernelLaunch::with_persistent`]): a freed persistent slot takes the
//! component's next block, as the PTB loop of Fig. 12 does. Each part keeps
//! its kernel's shape (identity, buffers, tags, block range), so value
//! tracking sees each component's computation intact, and the resource mix
//! (reef-sim `mix.rs`) decides how much the two slow each other.
//!
//! Kernel split (§8.2): a component's block range is any sub-range of its
//! grid (`start_block_id..=end_block_id` of Fig. 12); the rest runs later
//! as an ordinary launch with the complementary range.
//!
//! Not modelled: the PTB loop's own overhead (recomputing the block id per
//! iteration) and the fused block's single register/LDS allocation (each
//! part is placed with its own shape's per-block resources).

use reef_sim::{
    DeviceSpec, EventKind, KernelLaunch, KernelShape, LaunchId, Sim, SimError, StreamId,
};
use std::ops::Range;
use std::sync::Arc;

/// One component of a fused launch.
#[derive(Debug, Clone)]
pub struct Component {
    pub launch: KernelLaunch,
    /// Persistent blocks per CU (the fusion ratio's share).
    pub per_cu: u32,
}

/// Persistent blocks of `shape` that fit on an empty CU of `spec` (its
/// PTB version's largest useful ratio share).
pub fn max_per_cu(spec: &DeviceSpec, s: &KernelShape) -> u32 {
    let mut cap = spec.max_threads_per_cu / s.threads_per_block.max(1);
    cap = cap.min(spec.max_waves_per_cu / s.waves_per_block.max(1));
    cap = cap.min(spec.max_blocks_per_cu);
    if let Some(c) = spec.lds_bytes_per_cu.checked_div(s.lds_per_block) {
        cap = cap.min(c);
    }
    if let Some(c) = spec.registers_per_cu.checked_div(s.regs_per_block) {
        cap = cap.min(c);
    }
    cap
}

/// The fusion ratios `a:b` (a, b ≥ 1) whose fused block fits on one CU of
/// `spec` (§5.4: "the SM could support the possible 4:2, 3:3, 2:4 fusion
/// ratios, but not 4:4"), each side at most what its kernel can use alone.
pub fn ratios(spec: &DeviceSpec, k1: &KernelShape, k2: &KernelShape) -> Vec<(u32, u32)> {
    let (m1, m2) = (max_per_cu(spec, k1), max_per_cu(spec, k2));
    let fits = |a: u32, b: u32| {
        let t = a as u64 * k1.threads_per_block as u64 + b as u64 * k2.threads_per_block as u64;
        let w = a as u64 * k1.waves_per_block as u64 + b as u64 * k2.waves_per_block as u64;
        let l = a as u64 * k1.lds_per_block as u64 + b as u64 * k2.lds_per_block as u64;
        let r = a as u64 * k1.regs_per_block as u64 + b as u64 * k2.regs_per_block as u64;
        t <= spec.max_threads_per_cu as u64
            && w <= spec.max_waves_per_cu as u64
            && l <= spec.lds_bytes_per_cu as u64
            && r <= spec.registers_per_cu as u64
            && a + b <= spec.max_blocks_per_cu
    };
    let mut v = Vec::new();
    for a in 1..=m1 {
        for b in 1..=m2 {
            if fits(a, b) {
                v.push((a, b));
            }
        }
    }
    v
}

/// Enqueues a fused launch of two components on stream `s` (see the module
/// doc). Returns the two parts' launch ids, component 1 first.
pub fn launch_fused(
    sim: &mut Sim,
    s: StreamId,
    c1: Component,
    c2: Component,
) -> Result<[LaunchId; 2], SimError> {
    let ids = sim.launch_padded(
        s,
        vec![
            c1.launch.with_persistent(c1.per_cu),
            c2.launch.with_persistent(c2.per_cu),
        ],
    )?;
    Ok([ids[0], ids[1]])
}

/// Device time of one launch run alone on an idle device, from dispatch
/// (the launch path excluded) to the last block's completion.
pub fn time_alone(
    spec: &DeviceSpec,
    shape: &Arc<KernelShape>,
    blocks: Range<u32>,
) -> Result<u64, SimError> {
    let mut sim = Sim::new(spec.clone(), Default::default());
    let s = sim.create_stream(0, 4)?;
    sim.launch(
        s,
        KernelLaunch::new(shape.clone(), Default::default()).with_blocks(blocks),
    )?;
    Ok(run_out(&mut sim) - spec.launch_path_ns())
}

/// Device time of a fused launch run alone on an idle device, and the
/// time each component finished (both from dispatch).
pub fn time_fused(
    spec: &DeviceSpec,
    c1: (&Arc<KernelShape>, Range<u32>, u32),
    c2: (&Arc<KernelShape>, Range<u32>, u32),
) -> Result<(u64, [u64; 2]), SimError> {
    let mut sim = Sim::new(spec.clone(), Default::default());
    let s = sim.create_stream(0, 4)?;
    let ids = launch_fused(
        &mut sim,
        s,
        Component {
            launch: KernelLaunch::new(c1.0.clone(), Default::default()).with_blocks(c1.1),
            per_cu: c1.2,
        },
        Component {
            launch: KernelLaunch::new(c2.0.clone(), Default::default()).with_blocks(c2.1),
            per_cu: c2.2,
        },
    )?;
    let lp = spec.launch_path_ns();
    let mut ends = [0u64; 2];
    while let Some((t, evs)) = sim.step() {
        for e in evs {
            if e.kind == EventKind::Completed {
                for (i, id) in ids.iter().enumerate() {
                    if e.launch == *id {
                        ends[i] = t - lp;
                    }
                }
            }
        }
    }
    Ok((ends[0].max(ends[1]), ends))
}

fn run_out(sim: &mut Sim) -> u64 {
    let mut last = 0;
    while let Some((t, _)) = sim.step() {
        last = t;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use reef_sim::{BufferId, SimConfig, Tags, ValueTracker};

    fn spec() -> DeviceSpec {
        DeviceSpec::preset("mi50").unwrap()
    }

    #[test]
    fn ratios_respect_the_cu() {
        let sp = spec();
        // 512 threads: 5 blocks of 256 + ... at most 2560 threads per CU.
        let k1 = KernelShape::synthetic("a", 100, 512, 0, 0, vec![1000], &sp).unwrap();
        let k2 = KernelShape::synthetic("b", 100, 256, 0, 0, vec![1000], &sp).unwrap();
        let r = ratios(&sp, &k1, &k2);
        assert!(!r.is_empty());
        for (a, b) in &r {
            assert!(a * 512 + b * 256 <= sp.max_threads_per_cu);
        }
        assert!(!r.contains(&(max_per_cu(&sp, &k1), max_per_cu(&sp, &k2))));
    }

    #[test]
    fn persistent_blocks_stretch_a_kernel() {
        let sp = spec();
        // Flat curve: a block takes 10 us whatever the co-residency, so a
        // kernel of 60 x 8 blocks takes 1 wave at 8 per CU, 4 at 2 per CU.
        let k = Arc::new(KernelShape::synthetic("k", 480, 64, 0, 0, vec![10_000; 8], &sp).unwrap());
        assert_eq!(time_alone(&sp, &k, 0..480).unwrap(), 10_000);
        let mut sim = Sim::new(sp.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        sim.launch(
            s,
            KernelLaunch::new(k.clone(), Tags::default()).with_persistent(2),
        )
        .unwrap();
        assert_eq!(run_out(&mut sim) - sp.launch_path_ns(), 40_000);
    }

    #[test]
    fn fused_components_keep_their_values() {
        let sp = spec();
        let k1 = Arc::new(
            KernelShape::synthetic("c", 300, 256, 0, 0, vec![8_000, 9_000, 12_000, 16_000], &sp)
                .unwrap(),
        );
        let k2 = Arc::new(
            KernelShape::synthetic("m", 500, 256, 0, 0, vec![5_000, 9_000, 13_000, 17_000], &sp)
                .unwrap(),
        );
        let run = |fused: bool| -> ValueTracker {
            let mut sim = Sim::new(sp.clone(), SimConfig::default());
            let s = sim.create_stream(0, 4).unwrap();
            let l1 = KernelLaunch::new(k1.clone(), Tags::default())
                .with_buffers(vec![BufferId(1)], vec![BufferId(2)]);
            let l2 = KernelLaunch::new(k2.clone(), Tags::default())
                .with_buffers(vec![BufferId(3)], vec![BufferId(4)]);
            if fused {
                launch_fused(
                    &mut sim,
                    s,
                    Component {
                        launch: l1,
                        per_cu: 2,
                    },
                    Component {
                        launch: l2,
                        per_cu: 1,
                    },
                )
                .unwrap();
            } else {
                sim.launch(s, l1).unwrap();
                sim.launch(s, l2).unwrap();
            }
            run_out(&mut sim);
            sim.values().clone()
        };
        let (a, b) = (run(false), run(true));
        let bufs = [BufferId(2), BufferId(4)];
        let d = b.diff(&a, &bufs);
        assert!(d.is_empty(), "{d:?}");
        // The check can fail: half of component 2 is not its output.
        let mut sim = Sim::new(sp.clone(), SimConfig::default());
        let s = sim.create_stream(0, 4).unwrap();
        sim.launch(
            s,
            KernelLaunch::new(k2.clone(), Tags::default())
                .with_buffers(vec![BufferId(3)], vec![BufferId(4)])
                .with_blocks(0..250),
        )
        .unwrap();
        run_out(&mut sim);
        assert!(!sim.values().diff(&a, &[BufferId(4)]).is_empty());
    }
}
