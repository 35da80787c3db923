//! The padded launch's own cost (REEF TOCS 2025 §6.5 Fig. 25: a real-time
//! kernel launched through the dkp kernel, no best-effort kernel padded,
//! takes 0.8 % longer on average, from "the logic branch of CU partition
//! and the initial state preparation for global function pointers"; §5.1
//! "around 1%"): every block of every part of a padded launch pays it; a
//! plain launch and a statically fused launch (Aker §5.4) do not.

mod common;

use common::{drain, event_time};
use reef_sim::*;
use std::sync::Arc;

fn mi50() -> DeviceSpec {
    DeviceSpec::preset("mi50").unwrap()
}

fn shape(blocks: u32, curve: Vec<u64>) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("k", blocks, 64, 0, 0, curve, &mi50()).unwrap())
}

/// One block per CU (40 KiB of LDS each).
fn wide(blocks: u32, curve: Vec<u64>) -> Arc<KernelShape> {
    Arc::new(KernelShape::synthetic("w", blocks, 64, 40 << 10, 0, curve, &mi50()).unwrap())
}

fn tags(task: u64, kernel: u32) -> Tags {
    Tags {
        task,
        kernel,
        user: 0,
    }
}

/// A way to queue parts: [`Sim::launch_padded`], [`Sim::launch_fused`] or
/// one plain launch each.
type LaunchFn = fn(&mut Sim, StreamId, Vec<KernelLaunch>) -> Result<Vec<LaunchId>, SimError>;

/// Device time of each launch of `parts` (from the end of the launch path
/// to its completion), queued on an idle MI50 by `how`.
fn device_times(parts: Vec<KernelLaunch>, how: LaunchFn) -> Vec<u64> {
    let spec = mi50();
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s = sim.create_stream(0, 2).unwrap();
    let ids = how(&mut sim, s, parts).unwrap();
    let evs = drain(&mut sim);
    ids.iter()
        .map(|&id| event_time(&evs, id, EventKind::Completed) - spec.launch_path_ns())
        .collect()
}

fn plain(sim: &mut Sim, s: StreamId, parts: Vec<KernelLaunch>) -> Result<Vec<LaunchId>, SimError> {
    parts.into_iter().map(|p| sim.launch(s, p)).collect()
}

#[test]
fn an_rt_kernel_launched_padded_alone_takes_0_8_percent_longer() {
    // 120 one-per-CU blocks of 30 us on 60 CUs: two waves, 60 us plain.
    let rt = || vec![KernelLaunch::new(wide(120, vec![30_000]), tags(1, 0))];
    let t_plain = device_times(rt(), plain)[0];
    let t_padded = device_times(rt(), Sim::launch_padded)[0];
    assert_eq!(t_plain, 60_000);
    // Fig. 25's ProxyKernel: 1.008 x.
    assert_eq!(t_padded * 1000, t_plain * 1008, "{t_padded} vs {t_plain}");
    assert_eq!(PADDED_LAUNCH_OVERHEAD_PPM, 8_000);
    assert_eq!(padded_block_ns(30_000), 30_240);
    // Rounded up: never kinder than the paper's fraction.
    assert_eq!(padded_block_ns(1), 2);
}

#[test]
fn every_part_of_a_padded_launch_pays_it_a_fused_launch_does_not() {
    // RT on CUs 0..20, BE on 20..60, and a chained BE part after the
    // first BE part's barrier: all three run inside the dkp kernel.
    let parts = || {
        vec![
            KernelLaunch::new(shape(20, vec![50_000]), tags(1, 0)).with_cus(CuSet::range(0, 20)),
            KernelLaunch::new(shape(40, vec![20_000]), tags(2, 7)).with_cus(CuSet::range(20, 60)),
            KernelLaunch {
                after: Some((1, 2_000)),
                ..KernelLaunch::new(shape(40, vec![15_000]), tags(2, 8))
                    .with_cus(CuSet::range(20, 60))
            },
        ]
    };
    let padded = device_times(parts(), Sim::launch_padded);
    let p = padded_block_ns;
    assert_eq!(
        padded,
        vec![p(50_000), p(20_000), p(20_000) + 2_000 + p(15_000)]
    );
    // The same parts statically fused: the plain block times.
    let fused = device_times(parts(), Sim::launch_fused);
    assert_eq!(fused, vec![50_000, 20_000, 20_000 + 2_000 + 15_000]);
}
