//! DISB A under the padding policies on models in the reef-compile format
//! (recorded work and ptxas resources, no measured curve): padding must
//! never make a real-time inference faster than running alone
//! (docs/fidelity.md; the padding table once gave such kernels their memory
//! time alone, and a padded launch ran the compute-bound real-time kernels
//! at it: RT latency 0.70 of stand-alone under `reef`, 0.31 under
//! `reef-max`, on ResNet-50 64x64 compiled by reef-compile on the mi50).
//!
//! The models are synthetic schedules (no TVM needed): a chain of
//! convolution-like kernels, compute bound, with grids from 8 blocks (most
//! CUs left for padding) to 480, written as both DISB A slots. Their
//! numbers are chosen to exercise padding, not measured.

use std::path::Path;
use std::process::Command;

/// `(blocks, MFLOP per block)` of each kernel of the chain.
const KERNELS: [(u32, u64); 8] = [
    (8, 10),
    (16, 10),
    (32, 10),
    (480, 2),
    (8, 20),
    (64, 5),
    (240, 4),
    (16, 10),
];

/// A compiled-format schedule `name` in `dir/name/name.json`.
fn write_model(dir: &Path, name: &str) {
    let bytes: u64 = 1 << 20;
    let storage: Vec<String> = (0..=KERNELS.len())
        .map(|i| {
            format!(
                r#"{{"name": "t{i}", "size": {}, "stype": "float32"}}"#,
                bytes / 4
            )
        })
        .collect();
    let kernels: Vec<String> = KERNELS
        .iter()
        .enumerate()
        .map(|(i, &(blocks, mflop))| {
            format!(
                r#"{{"name": "conv{i}", "launch_params": [{blocks},1,1,256,1,1],
                    "args": [{i}, {o}], "reads": [{i}], "writes": [{o}],
                    "flops": {f}, "bytes_read": {bytes}, "bytes_written": {bytes}}}"#,
                o = i + 1,
                f = blocks as u64 * mflop * 1_000_000,
            )
        })
        .collect();
    let res: Vec<String> = (0..KERNELS.len())
        .map(|i| format!(r#""conv{i}": {{"registers": 64, "shared_static": 0}}"#))
        .collect();
    let res = res.join(", ");
    let text = format!(
        r#"{{"storage": [{}], "kernels": [{}], "args": [0],
            "format": "reef-compile/1", "archs": ["sm_80", "gfx906"],
            "ptx": {{"sm_80": "kernels.sm_80.ptx", "gfx906": "kernels.gfx906.hsaco"}},
            "inputs": [0], "params": [], "outputs": [{}],
            "resources": {{"sm_80": {{{res}}}, "gfx906": {{{res}}}}}}}"#,
        storage.join(", "),
        kernels.join(", "),
        KERNELS.len()
    );
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(format!("{name}.json")), text).unwrap();
}

#[test]
fn padding_never_speeds_up_a_compiled_rt_model() {
    let t = tempfile::tempdir().unwrap();
    for m in ["vgg", "resnet152"] {
        write_model(t.path(), m);
    }
    for device in ["mi50", "gv100"] {
        let out = Command::new(env!("CARGO_BIN_EXE_reef-bench"))
            .args(["disb", "A", "--device", device, "--duration", "2"])
            .args(["--policy", "reef-nodkp,reef,reef-dkp-mv,reef-max"])
            .args(["--seed", "1", "--no-plot", "--json", "--models-dir"])
            .arg(t.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 4, "{text}");
        let be = |p: &str| {
            rows.iter().find(|r| r["policy"] == p).unwrap()["be_throughput_norm"]
                .as_f64()
                .unwrap()
        };
        for r in &rows {
            let rt = r["rt_latency_norm_mean"].as_f64().unwrap();
            assert!(
                rt >= 0.98,
                "{device} {}: RT latency {rt} of stand-alone",
                r["policy"]
            );
        }
        // Padding ran: it gave best-effort work more than preemption alone.
        assert!(be("reef-max") > be("reef-nodkp"), "{device}: {text}");
    }
}
