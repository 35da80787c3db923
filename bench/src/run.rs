//! Shared drivers: run inferences of a model back to back on one stream of
//! the simulator, as the REEF profiler measured `model_latency` (REEF §6.2:
//! stand-alone latency is the normalisation base of every DISB metric).

use anyhow::{Context, Result};
use reef_model::Model;
use reef_sim::{
    BufferId, DeviceEvent, EventKind, HostQueues, KernelLaunch, KernelShape, Sim, StreamId, Tags,
};
use std::sync::Arc;

/// Device-queue capacity REEF uses by default (REEF §4.2 and §6.4: "REEF
/// adopts a default capacity of 4 for the DQ").
pub const REEF_DQ_CAPACITY: usize = 4;

/// The launch of kernel `i` of `model` for task `task`.
pub fn kernel_launch(
    model: &Model,
    shapes: &[Arc<KernelShape>],
    i: usize,
    task: u64,
) -> KernelLaunch {
    let k = &model.kernels[i];
    KernelLaunch::new(
        shapes[i].clone(),
        Tags {
            task,
            kernel: i as u32,
            user: 0,
        },
    )
    .with_buffers(
        k.reads.iter().map(|&b| BufferId(b as u64)).collect(),
        k.writes.iter().map(|&b| BufferId(b as u64)).collect(),
    )
}

/// Outcome of a back-to-back run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackToBack {
    /// Simulated time when the last kernel completed (ns from the first launch).
    pub end_ns: u64,
    /// Kernel completions.
    pub kernels: u64,
    /// Completion time of each inference (ns).
    pub inference_end_ns: Vec<u64>,
}

/// Runs `inferences` inferences of `model` back to back on one stream (host
/// queue feeding a device queue of `dq_capacity`), starting at the sim's
/// current time. Returns when all have completed.
pub fn back_to_back(
    sim: &mut Sim,
    model: &Model,
    shapes: &[Arc<KernelShape>],
    inferences: u64,
    dq_capacity: usize,
) -> Result<BackToBack> {
    let s: StreamId = sim
        .create_stream(0, dq_capacity)
        .context("creating the stream")?;
    let t0 = sim.now();
    let n = model.kernels.len();
    let mut host = HostQueues::new();
    let mut next_task = 0u64;
    let mut next_kernel = 0usize;
    // Feed the host queue lazily so memory stays flat for long runs.
    let feed = |host: &mut HostQueues, next_task: &mut u64, next_kernel: &mut usize| {
        while host.len(s) < 2 * dq_capacity && *next_task < inferences {
            host.submit(s, kernel_launch(model, shapes, *next_kernel, *next_task));
            *next_kernel += 1;
            if *next_kernel == n {
                *next_kernel = 0;
                *next_task += 1;
            }
        }
    };
    let mut out = BackToBack {
        end_ns: 0,
        kernels: 0,
        inference_end_ns: Vec::with_capacity(inferences as usize),
    };
    let mut evs: Vec<DeviceEvent> = Vec::new();
    let mut ids = Vec::new();
    feed(&mut host, &mut next_task, &mut next_kernel);
    host.pump_into(sim, &mut ids)?;
    while let Some(t) = sim.next_event_time() {
        evs.clear();
        sim.advance_into(t, &mut evs);
        for e in &evs {
            match e.kind {
                EventKind::Completed => {
                    out.kernels += 1;
                    if e.tags.kernel as usize == n - 1 {
                        out.inference_end_ns.push(e.time - t0);
                    }
                }
                EventKind::Started => {}
                other => anyhow::bail!("unexpected {other:?} in a back-to-back run"),
            }
        }
        feed(&mut host, &mut next_task, &mut next_kernel);
        ids.clear();
        host.pump_into(sim, &mut ids)?;
    }
    out.end_ns = sim.now() - t0;
    anyhow::ensure!(
        out.inference_end_ns.len() as u64 == inferences,
        "only {} of {inferences} inferences completed",
        out.inference_end_ns.len()
    );
    Ok(out)
}

/// The device and the models a calibration subcommand (`standalone`,
/// `kernels`) runs on.
#[derive(Debug, clap::Args)]
pub struct DeviceModels {
    /// Device preset (mi50, gv100, h100) or a device spec .toml file.
    #[arg(long, default_value = "mi50")]
    pub device: String,
    /// Directory of model schedules (default: <shared>/models/mi50).
    #[arg(long)]
    pub models_dir: Option<std::path::PathBuf>,
    /// Model to run (directory or DISB name); repeatable. Default: all.
    #[arg(long = "model")]
    pub models: Vec<String>,
}

impl DeviceModels {
    /// The device spec, the models directory and the model names to run
    /// (every model of the directory when none was named).
    pub fn resolve(&self) -> Result<(reef_sim::DeviceSpec, std::path::PathBuf, Vec<String>)> {
        let spec = reef_sim::DeviceSpec::by_name_or_path(&self.device)?;
        let dir = self
            .models_dir
            .clone()
            .unwrap_or_else(reef_model::default_models_dir);
        let names = if self.models.is_empty() {
            reef_model::list_models(&dir)?
        } else {
            self.models.clone()
        };
        Ok((spec, dir, names))
    }
}

/// Worker threads for a batch of independent simulations: `--jobs` when
/// given, else the machine's cores.
pub fn threads(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// Runs `f` over `items` on `threads` workers and returns the results in
/// the items' order. Items are taken in `order` (indices into `items`,
/// e.g. longest first so the workers finish together; `None`: in order).
/// While it runs, a progress bar on standard error (only when it is a
/// terminal) counts finished items and names the last one by `label`.
pub fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    order: Option<&[usize]>,
    label: impl Fn(&T) -> String + Sync,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    use std::io::IsTerminal;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(items.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        b
    });
    let next = AtomicUsize::new(0);
    let out: std::sync::Mutex<Vec<Option<R>>> =
        std::sync::Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let i = match order {
                    Some(o) => match o.get(k) {
                        Some(&i) => i,
                        None => break,
                    },
                    None => k,
                };
                let Some(it) = items.get(i) else { break };
                let r = f(it);
                if let Some(b) = &bar {
                    b.set_message(label(it));
                    b.inc(1);
                }
                out.lock().expect("no panic holds the lock")[i] = Some(r);
            });
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    out.into_inner()
        .expect("joined")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}
