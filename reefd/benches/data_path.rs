//! The data path's cost (issue 30, "Must show"): the per-request overhead
//! of carrying tensors, inline (in the request's frame) and through shared
//! memory (a registered memfd region), for 4 KiB, 1 MiB and 16 MiB inputs,
//! on `sim:h100` and on `cuda:0` (the simulated libcuda), side by side in
//! one run.
//!
//! Each size is a copy of the two-kernel test model (x → relu(x·w + b))
//! whose storages are that size. For each device and size the bench runs
//! the same RT requests three ways, interleaved: without tensors (the
//! baseline: the device's own inputs), with the input inline and the
//! output returned inline, and with input and output in one registered
//! region. The overhead is the median round trip (client send to answer
//! read) less the baseline's median. On `sim:h100` the simulator computes
//! no values, so only the input path is measured there (the answer says
//! why there are no outputs); on `cuda:0` the output comes back too.
//!
//! Run: `cargo bench -p reefd --bench data_path` (REEF_BENCH_DATA_REPS
//! sets the requests per way for 4 KiB, default 200; fewer for the larger
//! sizes). The copies each way makes are counted in docs/protocol.md.

use reefd::client::{Client, Input, ShmRegion};
use reefd::protocol::{OutputRef, Priority};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [(&str, usize); 3] = [("4 KiB", 4 << 10), ("1 MiB", 1 << 20), ("16 MiB", 16 << 20)];

fn two_kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../libcuda-sim/models/two-kernel")
        .canonicalize()
        .expect("libcuda-sim/models/two-kernel")
}

/// The two-kernel model with storages of `bytes` bytes, as `name`.
fn model(root: &Path, name: &str, bytes: usize) -> anyhow::Result<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let src = two_kernel_dir();
    std::fs::copy(src.join("kernels.ptx"), dir.join("kernels.ptx"))?;
    let n = bytes / 4;
    let toml = std::fs::read_to_string(src.join("model.toml"))?
        .replace("bytes = 8192", &format!("bytes = {bytes}"))
        .replace("u32:2048", &format!("u32:{n}"))
        .replace(
            "grid = [8, 1, 1]",
            &format!("grid = [{}, 1, 1]", n.div_ceil(256)),
        )
        .replace("name = \"two-kernel\"", &format!("name = \"{name}\""));
    std::fs::write(dir.join("model.toml"), toml)?;
    let json = std::fs::read_to_string(src.join("two-kernel.json"))?
        .replace("\"size\": 2048", &format!("\"size\": {n}"))
        .replace(
            "[8, 1, 1, 256, 1, 1]",
            &format!("[{}, 1, 1, 256, 1, 1]", n.div_ceil(256)),
        );
    std::fs::write(dir.join(format!("{name}.json")), json)?;
    // w in [0.5, 1.5], b in [-0.5, 0.5].
    let mut w = Vec::with_capacity(2 * bytes);
    for i in 0..n {
        w.extend_from_slice(&(0.5 + (i % 100) as f32 / 100.0).to_le_bytes());
    }
    for i in 0..n {
        w.extend_from_slice(&((i % 100) as f32 / 100.0 - 0.5).to_le_bytes());
    }
    std::fs::write(dir.join("weights.bin"), w)?;
    Ok(dir)
}

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(device: &str) -> anyhow::Result<Daemon> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("reefd.sock");
    let config = dir.path().join("reefd.toml");
    let mut device_extra = String::new();
    if device.starts_with("cuda") {
        let exe = std::env::current_exe()?;
        let lib = exe
            .parent()
            .map(|d| d.join("libreef_libcuda_sim.so"))
            .filter(|l| l.is_file())
            .ok_or_else(|| anyhow::anyhow!("libreef_libcuda_sim.so is not beside the bench"))?;
        device_extra = format!("cuda_library = {lib:?}\n");
    }
    std::fs::write(
        &config,
        format!(
            "[daemon]\nsocket = {socket:?}\npid_file = {:?}\nmax_tensor_frame_bytes = 67108864\n[device]\ndevice = {device:?}\n{device_extra}[metrics]\nenabled = false\n",
            dir.path().join("reefd.pid")
        ),
    )?;
    let child = Command::new(env!("CARGO_BIN_EXE_reefd"))
        .args(["start", "--foreground", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let d = Daemon {
        child,
        socket,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut c) = Client::connect(&d.socket) {
            if c.status().is_ok() {
                return Ok(d);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    anyhow::bail!("reefd on {device} did not start")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median round trips (µs) without tensors, inline and in shared memory,
/// and whether outputs came back.
fn measure(
    c: &mut Client,
    stream: u64,
    name: &str,
    bytes: usize,
    reps: usize,
) -> anyhow::Result<(f64, f64, f64, bool)> {
    let n = (bytes / 4) as u64;
    let x: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let shape = [n];
    let mut region = ShmRegion::new(2 * bytes)?;
    region.as_mut_slice()[..bytes].copy_from_slice(&x);
    let id = c.register_region(&region)?;
    let inline_in = [Input::Inline {
        name: "x",
        dtype: "float32",
        shape: &shape,
        data: &x,
    }];
    let shm_in = [Input::Shm {
        name: "x",
        dtype: "float32",
        shape: &shape,
        region: id,
        offset: 0,
        bytes: bytes as u64,
    }];
    let shm_out = [OutputRef {
        name: "y".into(),
        region: id,
        offset: bytes as u64,
        bytes: bytes as u64,
    }];
    let (mut base, mut inline, mut shm) = (Vec::new(), Vec::new(), Vec::new());
    let mut outputs = false;
    for i in 0..reps + 3 {
        let t = Instant::now();
        c.infer(stream, name)?;
        let b = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        let r = c.infer_tensors(stream, name, &inline_in, &[])?;
        let il = t.elapsed().as_secs_f64() * 1e6;
        outputs = r.output_bytes("y").is_some_and(|o| o.len() == bytes);
        let t = Instant::now();
        c.infer_tensors(stream, name, &shm_in, &shm_out)?;
        let s = t.elapsed().as_secs_f64() * 1e6;
        if i >= 3 {
            // The first rounds warm the model's instances up.
            base.push(b);
            inline.push(il);
            shm.push(s);
        }
    }
    c.unregister_region(id)?;
    Ok((
        median(&mut base),
        median(&mut inline),
        median(&mut shm),
        outputs,
    ))
}

fn main() -> anyhow::Result<()> {
    let reps: usize = std::env::var("REEF_BENCH_DATA_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let root = tempfile::tempdir()?;
    let mut dirs = Vec::new();
    for (i, (_, bytes)) in SIZES.iter().enumerate() {
        let name = format!("data{i}");
        dirs.push((name.clone(), model(root.path(), &name, *bytes)?));
    }
    let mut rows = Vec::new();
    for device in ["sim:h100", "cuda:0"] {
        let d = start(device)?;
        let mut c = Client::connect(&d.socket)?;
        let stream = c.register(Priority::Rt, Some("data-path"))?.stream;
        for (i, (label, bytes)) in SIZES.iter().enumerate() {
            let (name, dir) = &dirs[i];
            c.load_model(name, Some(dir))?;
            let r = (reps >> (2 * i)).max(20);
            let (b, il, s, outs) = measure(&mut c, stream, name, *bytes, r)?;
            rows.push((device, *label, r, b, il, s, outs));
            c.unload_model(name)?;
        }
    }
    println!(
        "data path: per-request overhead over a request without tensors (median round trip, us)"
    );
    println!(
        "{:<9} {:>7} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}  outputs",
        "device", "input", "reqs", "baseline", "inline", "+inline", "shm", "+shm"
    );
    for (device, label, r, b, il, s, outs) in rows {
        println!(
            "{device:<9} {label:>7} {r:>5} {b:>10.1} {il:>10.1} {:>10.1} {s:>10.1} {:>10.1}  {}",
            il - b,
            s - b,
            if outs {
                "returned"
            } else {
                "not computed (input path only)"
            }
        );
    }
    Ok(())
}
