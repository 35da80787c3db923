//! Padded launches of compiled kernels (reef-compile: recorded work and
//! ptxas resources, no measured curve; docs/fidelity.md, the fault this
//! guards against). A padded launch (REEF §5.1, Fig. 12) gives its
//! real-time part the proxy kernel's register allocation, so the real-time
//! kernel runs as a derived shape; its blocks must take the time the
//! simulator's cost model (`reef_sim::costmodel`) gives the kernel unpadded,
//! so a padded real-time kernel is never shorter than the same kernel alone.
//! The padding table was once built from a memory roofline alone for such
//! kernels, with no register demand, and a compute-bound convolution then
//! ran padded at its memory time.
//!
//! The models are synthetic schedules in the reef-compile format (the
//! numbers are chosen to make the real-time kernel compute bound, not
//! measured): a convolution-like real-time kernel of 16 blocks (fewer than
//! the MI50's 60 CUs, so padding has CUs to fill) and a best-effort kernel
//! of 480 blocks.

use reef_exec::{compiled_char, table, PadExec, PreparedModel};
use reef_model::Model;
use reef_sched::dkp::{BePart, PaddedLaunch, Variant};
use reef_sched::{ClientId, KernelTag, ModelId, RequestId, StreamId};
use reef_sim::{DeviceSpec, EventKind, KernelLaunch, Sim, SimConfig, Tags};
use std::path::Path;
use std::sync::Arc;

/// A one-kernel compiled model: `blocks` blocks of 256 threads, `flops` and
/// `bytes` (read, and as many written), `regs` registers per thread on
/// gfx906 and sm_80.
fn compiled(name: &str, blocks: u32, flops: u64, bytes: u64, regs: u32) -> Model {
    let elems = bytes / 4;
    let text = format!(
        r#"{{"storage": [{{"name": "x", "size": {elems}, "stype": "float32"}},
                        {{"name": "y", "size": {elems}, "stype": "float32"}}],
            "kernels": [{{"name": "conv", "launch_params": [{blocks},1,1,256,1,1],
                          "args": [0, 1], "reads": [0], "writes": [1],
                          "flops": {flops}, "bytes_read": {bytes}, "bytes_written": {bytes}}}],
            "args": [0], "format": "reef-compile/1", "archs": ["sm_80", "gfx906"],
            "ptx": {{"sm_80": "k.ptx", "gfx906": "k.hsaco"}},
            "inputs": [0], "params": [], "outputs": [1],
            "resources": {{"sm_80": {{"conv": {{"registers": {regs}, "shared_static": 0}}}},
                          "gfx906": {{"conv": {{"registers": {regs}, "shared_static": 0}}}}}}}}"#
    );
    Model::parse(
        name,
        Path::new(&format!("/d/{name}/{name}.json")),
        &text,
        None,
    )
    .unwrap()
}

fn models(spec: &DeviceSpec) -> Vec<PreparedModel> {
    vec![
        // 16 blocks x 20 MFLOP, 1 MB each way: compute bound.
        PreparedModel::new(compiled("rt", 16, 16 * 20_000_000, 1 << 20, 64), spec).unwrap(),
        PreparedModel::new(compiled("be", 480, 480 * 2_000_000, 8 << 20, 32), spec).unwrap(),
    ]
}

/// The time from the real-time part's start to its own completion (the
/// best-effort part's blocks may outlast it), when launched padded with
/// `regs_per_thread` (0: its own allocation), or alone when `padded` is
/// false.
fn rt_duration(spec: &DeviceSpec, padded: Option<u32>) -> u64 {
    let ms = models(spec);
    let t = Arc::new(table(spec, &ms, Variant::Single).unwrap());
    let mut sim = Sim::new(spec.clone(), SimConfig::default());
    let s0 = sim.create_stream(1, 64).unwrap();
    let rt_shape = ms[0].shapes[0].clone();
    let rtags = Tags {
        task: 1,
        kernel: 0,
        user: 0,
    };
    match padded {
        None => {
            sim.launch(s0, KernelLaunch::new(rt_shape, rtags)).unwrap();
        }
        Some(regs_per_thread) => {
            let rc = &t.kernels[0][0][0];
            let bc = &t.kernels[1][0][0];
            let rt_cus = rc.blocks;
            let p = PaddedLaunch {
                stream: StreamId(0),
                tag: KernelTag {
                    req: RequestId(1),
                    kernel: 0,
                },
                model: ModelId(0),
                rt_cus,
                proxy_level: 0,
                regs_per_thread,
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
                    blocks: 0..spec.compute_units - rt_cus,
                    cus: rt_cus..spec.compute_units,
                    per_cu: 1,
                    extra: 0..0,
                    after: None,
                }],
            };
            let mut px = PadExec::new(spec, t.clone());
            px.launch(
                &mut sim,
                s0,
                p,
                &rt_shape,
                &|part| ms[part.model.0 as usize].shapes[0].clone(),
                (Vec::new(), Vec::new()),
                &|_| (Vec::new(), Vec::new()),
            )
            .unwrap();
        }
    }
    let (mut start, mut end) = (None, None);
    while let Some((_, evs)) = sim.step() {
        for e in evs.iter().filter(|e| e.tags.user == 0) {
            match e.kind {
                EventKind::Started => start = Some(e.time),
                EventKind::Completed => end = Some(e.time),
                k => panic!("{k:?}"),
            }
        }
    }
    end.unwrap() - start.unwrap()
}

#[test]
fn a_compiled_kernels_profile_is_its_cost_model_shape() {
    for dev in ["mi50", "gv100", "h100"] {
        let spec = DeviceSpec::preset(dev).unwrap();
        let ms = models(&spec);
        let t = table(&spec, &ms, Variant::Single).unwrap();
        for (m, ks) in ms.iter().zip(&t.kernels) {
            let s = &m.shapes[0];
            let c = &ks[0][0];
            assert_eq!(Some(c), compiled_char(&spec, s).as_ref(), "{dev}");
            // The cost model's curve, the compiler's registers.
            let curve: Vec<u64> = (1..=s.curve_len() as u32).map(|k| s.exec_ns(k)).collect();
            assert_eq!(c.curve(), &curve[..], "{dev}");
            assert!(c.regs_per_block > 0 && c.regs_per_block == s.regs_per_block);
        }
        // The schedule-only builder has no cost model: it refuses.
        let l = reef_exec::limits(&spec);
        let e =
            reef_sched::dkp::table::kernel_char(&l, &reef_exec::block_cost(&spec), &ms[0].model, 0)
                .unwrap_err();
        assert!(e.problem.contains("compiled kernel"), "{e}");
    }
}

#[test]
fn a_padded_compiled_rt_kernel_is_never_shorter_than_alone() {
    let spec = DeviceSpec::preset("mi50").unwrap();
    let alone = rt_duration(&spec, None);
    // Its own allocation (64 per lane), and the larger proxy allocations a
    // padded launch can give it (never fewer registers than its own).
    for regs in [0, 64, 96, 128, 256] {
        let padded = rt_duration(&spec, Some(regs));
        assert!(
            padded >= alone,
            "{regs} registers: padded {padded} ns < alone {alone} ns"
        );
    }
    // One block per CU either way (16 blocks on 16 CUs): the same time,
    // plus the dkp kernel's per-block cost (REEF §6.5 Fig. 25).
    assert_eq!(
        rt_duration(&spec, Some(128)),
        reef_sim::padded_block_ns(alone)
    );
}
