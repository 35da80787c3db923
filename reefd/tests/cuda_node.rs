//! `reefd start --device cuda:0,cuda:1` end to end (issue 18, a node of
//! NVIDIA GPUs; CASE/MGB §III-C Algorithm 3; engine/node.rs over
//! engine/gpu.rs): two GPUs of the simulated libcuda
//! (`REEF_LIBCUDA_SIM_DEVICE` a list of two spec files with little memory,
//! so that a few copies of the two-kernel model fill them), models placed
//! on the free memory the driver reports, inferences served on both GPUs
//! with outputs verified, a model that fits neither refused with the
//! figures, and bad device lists refused in one line.

mod common;

use std::path::Path;
use std::process::Command;

use common::Daemon;
use reefd::protocol::Priority;

const KIB: u64 = 1024;
/// The two-kernel model's footprint on the CUDA engine with one BE client
/// per model (`be_streams_per_model = 1`): weights (w, b: 16 KiB) in its
/// one context, and one request's buffers (x, h, y: 24 KiB) for
/// each of the two streams that run it (`CudaKernels::footprint`). A load
/// also needs one more request's buffers for its reference run.
const FOOTPRINT: u64 = 16 * KIB + 2 * 24 * KIB;

/// A GV100 spec file with `memory` bytes of device memory.
fn small_gv100(dir: &Path, name: &str, memory: u64) -> String {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/devices/gv100.toml");
    let text = std::fs::read_to_string(spec).unwrap();
    let small = text.replace(
        "memory_bytes = 34359738368",
        &format!("memory_bytes = {memory}"),
    );
    assert_ne!(small, text);
    let path = dir.join(name);
    std::fs::write(&path, small).unwrap();
    path.to_str().unwrap().to_string()
}

fn library() -> String {
    format!("cuda_library = {:?}", common::sim_library())
}

#[test]
fn a_node_of_two_gpus_places_by_driver_memory_and_serves_both() {
    let _one = common::cuda_serial();
    let t = tempfile::tempdir().unwrap();
    // Device 0 holds one copy of the model (64 KiB reserved of 100), device
    // 1 two (128 of 160); a load also needs one request's buffers (24 KiB)
    // for its reference run.
    let devices = format!(
        "{},{}",
        small_gv100(t.path(), "gpu0.toml", 100 * KIB),
        small_gv100(t.path(), "gpu1.toml", 160 * KIB)
    );
    let d = Daemon::start_env(
        "cuda:0,cuda:1",
        "",
        &library(),
        "[scheduler]\nbe_streams_per_model = 1\n",
        &[("REEF_LIBCUDA_SIM_DEVICE", devices.as_str())],
    );
    let mut admin = d.client();
    let st = admin.status().unwrap();
    assert_eq!(st.device, "cuda:0,cuda:1");
    assert!(
        st.engine.contains("node of 2 CUDA GPUs") && st.engine.contains("test device"),
        "{}",
        st.engine
    );
    assert_eq!(st.preemption_levels, vec![1, 2]);
    assert_eq!(st.devices.len(), 2, "{st:?}");
    // The memory is the driver's (cuMemGetInfo): no reefd preset has it.
    assert_eq!(st.devices[0].memory_total, 100 * KIB);
    assert_eq!(st.devices[1].memory_total, 160 * KIB);
    assert_eq!(st.devices[0].preset, "cuda:0");

    let dir = common::two_kernel_dir();
    // Idle GPUs: the first model goes to device 0 (Alg. 3's tie: the lowest
    // index); the second to device 1 (fewer warps); the third to device 1
    // too, since device 0 has 36 KiB left, less than the model's 64 KiB,
    // although both devices carry one model's warps.
    let on: Vec<Option<usize>> = ["a", "b", "c"]
        .iter()
        .map(|m| admin.load_model(m, Some(&dir)).unwrap().device)
        .collect();
    assert_eq!(on, vec![Some(0), Some(1), Some(1)]);
    // Nothing fits now (36 and 32 KiB free): refused with the figures,
    // nothing loaded.
    let e = admin.load_model("d", Some(&dir)).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "model d needs 0.00 GiB of device memory ({FOOTPRINT} B"
        )) && e.contains("more than any device has")
            && e.contains("device 0:")
            && e.contains("device 1:"),
        "{e}"
    );
    assert_eq!(admin.models().unwrap().len(), 3);
    let st = admin.status().unwrap();
    assert_eq!(st.devices[0].models, vec!["a".to_string()]);
    assert_eq!(st.devices[1].models, vec!["b".to_string(), "c".to_string()]);
    // The driver's figures: two models' weights on device 1 (the
    // reference outputs' buffers may still be held).
    assert!(
        st.devices[1].memory_used >= 2 * 16 * KIB,
        "{:?}",
        st.devices[1]
    );
    assert!(st.devices[0].memory_used < st.devices[1].memory_used);

    // Inferences on both GPUs: an RT client on a (device 0), a BE client on
    // b and c (device 1), every output equal to the unpreempted run's.
    let mut rt = d.client();
    let mut be = d.client();
    let r = rt.register(Priority::Rt, Some("rt")).unwrap();
    let b = be.register(Priority::Be, Some("be")).unwrap();
    for _ in 0..10 {
        let res = [
            ("a", rt.infer(r.stream, "a").unwrap()),
            ("b", be.infer(b.stream, "b").unwrap()),
            ("c", be.infer(b.stream, "c").unwrap()),
        ];
        for (m, res) in res {
            assert_eq!(res.outputs_verified, Some(true), "{m}: {res:?}");
        }
    }
    let st = admin.status().unwrap();
    assert_eq!(
        (st.devices[0].rt_streams, st.devices[0].be_streams),
        (1, 0),
        "{:?}",
        st.devices[0]
    );
    assert_eq!(
        (st.devices[1].rt_streams, st.devices[1].be_streams),
        (0, 1),
        "{:?}",
        st.devices[1]
    );
    let stats = admin.stats().unwrap();
    assert_eq!(stats.tasks_completed, 30);
    assert_eq!(stats.corrupted_outputs, 0);
    assert_eq!(stats.device_errors, 0);
    let p = stats.placement.expect("a node reports placement");
    assert_eq!((p.models_placed, p.models_refused), (3, 1));

    // Unloading c frees device 1's reservation: d goes there now.
    admin.unload_model("c").unwrap();
    assert_eq!(admin.load_model("d", Some(&dir)).unwrap().device, Some(1));
    // A pin to a full device is refused with that device's figure.
    let e = admin
        .load_model_on("e", Some(&dir), Some(0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("the pinned device has (device 0:"), "{e}");
}

/// `reefd start` with a device list the driver or the parser refuses: one
/// line on stderr, exit status 1, no panic.
fn start_fails(device: &str, env: &[(&str, &str)]) -> String {
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("reefd.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {:?}\npid_file = {:?}\n[device]\ndevice = {device:?}\n{}\n[metrics]\nenabled = false\n",
            t.path().join("s.sock"),
            t.path().join("p.pid"),
            library()
        ),
    )
    .unwrap();
    let out = Command::new(common::reefd_bin())
        .args(["start", "--foreground", "--config"])
        .arg(&cfg)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let last = err.lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("reefd: error: "), "{err}");
    last
}

#[test]
fn a_gpu_past_the_drivers_count_and_mixed_lists_are_refused() {
    let _one = common::cuda_serial();
    let e = start_fails("cuda:0,cuda:2", &[("REEF_LIBCUDA_SIM_DEVICE", "gv100x2")]);
    assert!(
        e.contains("device cuda:2: no such GPU: the CUDA driver reports 2 GPUs (cuda:0 to cuda:1)"),
        "{e}"
    );
    let e = start_fails("cuda:1", &[]);
    assert!(
        e.contains("device cuda:1: no such GPU: the CUDA driver reports 1 GPU (cuda:0)"),
        "{e}"
    );
    let e = start_fails("sim:mi50,cuda:0", &[]);
    assert!(e.contains("mixes kinds of device"), "{e}");
    let e = start_fails("cuda:0,cuda:0", &[]);
    assert!(e.contains("cuda:0 is listed twice"), "{e}");
}
