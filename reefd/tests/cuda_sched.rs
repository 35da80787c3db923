//! reef-sched's policies on `cuda:0` (reefd/src/engine/gpu.rs): the
//! daemon's SchedEngine on the kernel-level CUDA device, driven
//! in-process through the `Engine` trait as the runtime drives it, on the
//! simulated libcuda (reef-libcuda-sim) or, with `REEF_TEST_CUDA=system`,
//! on the system's libcuda. Every output is compared by the device with
//! its input's unpreempted output.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reefd::engine::sched::{SchedEngine, SchedSettings};
use reefd::engine::{Engine, EngineError, EngineEvent, EngineModel};
use reefd::protocol::Priority;

fn settings(policy: &str) -> SchedSettings {
    SchedSettings {
        preset: String::new(),
        policy: policy.into(),
        dq_capacity: 4,
        be_streams_per_model: 2,
        seed: 1,
        fikit: Default::default(),
        fikit_profile_dir: Some(std::env::temp_dir()),
        host_gap_ns: None,
    }
}

fn engine(
    policy: &str,
) -> Result<SchedEngine<reefd::device::cuda::kernels::CudaKernels>, EngineError> {
    reefd::device::cuda::engine::open(0, common::cuda_library(), settings(policy))
}

fn two_kernel() -> EngineModel {
    EngineModel {
        name: "two-kernel".into(),
        model: Arc::new(reef_model::Model::load(&common::two_kernel_dir()).unwrap()),
        idempotence: None,
        package: None,
    }
}

/// BE stream 1 keeps `be` requests queued; RT stream 2 sends `rt` requests
/// one after another while BE work is on the device. Returns the events.
fn run(e: &mut dyn Engine, be: u64, rt: u64) -> Vec<EngineEvent> {
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_nanos() as u64;
    let mut out = Vec::new();
    e.open_stream(1, Priority::Be).unwrap();
    e.open_stream(2, Priority::Rt).unwrap();
    for t in 0..be {
        e.submit(now(), 100 + t, 1, "two-kernel", &mut out).unwrap();
    }
    let done = |out: &[EngineEvent]| -> HashMap<u64, Option<bool>> {
        out.iter()
            .filter_map(|x| match x {
                EngineEvent::TaskDone { task, verified, .. } => Some((*task, *verified)),
                _ => None,
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut next_rt = 0;
    while done(&out).len() < (be + rt) as usize {
        assert!(Instant::now() < deadline, "timed out: {out:?}");
        let d = done(&out);
        let rt_busy = next_rt > 0 && !d.contains_key(&(next_rt - 1));
        // RT requests arrive while BE work is queued or running.
        let be_started = out
            .iter()
            .any(|x| matches!(x, EngineEvent::FirstKernelQueued { task, .. } if *task >= 100));
        let be_left = d.keys().filter(|&&t| t >= 100).count() < be as usize;
        if next_rt < rt && !rt_busy && be_started && be_left {
            e.submit(now(), next_rt, 2, "two-kernel", &mut out).unwrap();
            next_rt += 1;
        }
        e.advance(now(), &mut out);
        std::thread::sleep(Duration::from_micros(20));
    }
    out
}

#[test]
fn reef_sched_policies_run_on_cuda_with_every_output_verified() {
    let _s = common::cuda_serial();
    for policy in ["reef-nodkp", "streams", "seq", "fikit", "baymax"] {
        let mut e = engine(policy).unwrap_or_else(|e| panic!("{policy}: {e}"));
        let info = e.info();
        assert_eq!(info.policy, policy);
        assert!(
            info.name.starts_with("reef-sched on CUDA cuda:0"),
            "{}",
            info.name
        );
        e.add_model(two_kernel()).unwrap();
        let out = run(&mut e, 12, 4);
        let errors: Vec<_> = out
            .iter()
            .filter(|x| {
                matches!(
                    x,
                    EngineEvent::DeviceError { .. } | EngineEvent::TaskFailed { .. }
                )
            })
            .collect();
        assert!(errors.is_empty(), "{policy}: {errors:?}");
        let verified: Vec<Option<bool>> = out
            .iter()
            .filter_map(|x| match x {
                EngineEvent::TaskDone { verified, .. } => Some(*verified),
                _ => None,
            })
            .collect();
        assert_eq!(verified.len(), 16, "{policy}");
        if policy == "baymax" {
            // Predictions from this GPU's own kernel times, measured at
            // load, not a simulated preset's (issue 26 item 6).
            let a = e.aker().expect("baymax reports Aker's figures");
            assert!(a.predictions_measured, "{a:?}");
        }
        assert!(
            verified.iter().all(|v| *v == Some(true)),
            "{policy}: {verified:?}"
        );
        let preemptions = out
            .iter()
            .filter(|x| matches!(x, EngineEvent::Preempted { .. }))
            .count();
        let restored = out
            .iter()
            .filter(|x| matches!(x, EngineEvent::Restored { .. }))
            .count();
        let taken: u64 = out
            .iter()
            .map(|x| match x {
                EngineEvent::Preempted { kernels, .. } => *kernels,
                _ => 0,
            })
            .sum();
        eprintln!(
            "{policy}: {preemptions} preemptions taking {taken} kernels, {restored} restores"
        );
        if policy == "reef-nodkp" {
            assert!(
                preemptions > 0,
                "RT arrivals preempt the BE stream: {out:?}"
            );
            assert!(
                out.iter()
                    .all(|x| !matches!(x, EngineEvent::Preempted { level, .. } if *level > 2)),
                "level 3 is not on the CUDA path"
            );
        } else {
            assert_eq!(preemptions, 0, "{policy} does not preempt");
        }
    }
}

#[test]
fn policies_that_place_blocks_are_refused_and_reef_is_served_without_padding() {
    let _s = common::cuda_serial();
    for policy in ["reef-dkp-mv", "aker", "tacker"] {
        let e = engine(policy)
            .err()
            .unwrap_or_else(|| panic!("{policy} accepted"));
        assert!(e.to_string().contains("reef-nodkp"), "{e}");
    }
    let mut e = engine("reef").unwrap();
    let info = e.info();
    assert_eq!(info.policy, "reef-nodkp");
    assert_eq!(info.preemption_levels, vec![1, 2]);
    assert!(
        e.preemption_notes()
            .iter()
            .any(|n| n.contains("no kill (level 3)")),
        "{:?}",
        e.preemption_notes()
    );
    let err = e.set_policy(0, "reef-dkp-mv").unwrap_err();
    assert!(matches!(err, EngineError::Unsupported(_)), "{err}");
    e.set_policy(0, "streams").unwrap();
    assert_eq!(e.info().policy, "streams");
    // A schedule that disagrees with model.toml is refused.
    let mut m = two_kernel();
    m.name = "other".into();
    Arc::make_mut(&mut m.model).kernels.pop();
    let err = e.add_model(m).unwrap_err();
    assert!(
        err.to_string().contains("differ from the CUDA model"),
        "{err}"
    );
}
