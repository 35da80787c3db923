//! `reef-bench multigpu`: the experiments of CASE/MGB §V
//! (../shared/papers/case-mgb-compiler-guided-sharing.txt) on simulated
//! multi-GPU nodes, each figure printed beside the paper's:
//! Fig. 4 (Alg. 3 vs Alg. 2), Fig. 5 (throughput of SA, CG and MGB
//! normalised to SA), Table II (CG's crashed jobs by worker count),
//! Table III (MGB's turnaround speedup over SA), Table IV (kernel
//! slowdowns), and §V-E (MGB vs schedGPU on neural-network jobs, and a
//! 128-job neural-network mix against SA). Jobs: `jobs.rs` (Rodinia-like
//! jobs of §V-A, reef's DNN models as the neural-network jobs); runner:
//! `run.rs`. docs/results-multigpu.md discusses every difference.

pub mod disb;
pub mod jobs;
pub mod run;

use anyhow::{bail, Result};
use clap::Args;
use jobs::{Job, Rng, GIB};
use reef_sched::place::PlacePolicy;
use reef_sim::DeviceSpec;
use run::Outcome;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct MultigpuArgs {
    /// Which experiments: rodinia (Figs. 4, 5, Tables II–IV), nn (§V-E),
    /// disb (REEF inside each device after placement), or all.
    #[arg(long, default_value = "all")]
    pub part: String,
    /// Seed of the job mixes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Inferences per neural-network job.
    #[arg(long, default_value_t = 40)]
    pub inferences: u32,
    #[arg(long)]
    pub models_dir: Option<PathBuf>,
    /// Share of a Rodinia job's stand-alone time spent in kernels (default
    /// 0.30 from the paper's §I; other values are for sensitivity runs).
    #[arg(long, default_value_t = jobs::GPU_SHARE)]
    pub gpu_share: f64,
    /// DISB workloads for --part disb: A..E, all, or a path.
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// Virtual seconds of each DISB run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
}

/// Table I: W1–W4 are 16 jobs, W5–W8 32, at 1:1, 2:1, 3:1, 5:1.
const MIXES: [(usize, usize); 8] = [
    (16, 1),
    (16, 2),
    (16, 3),
    (16, 5),
    (32, 1),
    (32, 2),
    (32, 3),
    (32, 5),
];

struct Platform {
    name: &'static str,
    spec: DeviceSpec,
    gpus: usize,
    /// §V-A: "a reasonable median across our experiments for MGB was 10
    /// workers for the 2xP100s and 16 workers for the 4xV100s".
    mgb_workers: usize,
    /// Table II's worker counts for CG.
    cg_workers: [usize; 4],
    paper_table2: [[u32; 4]; 4],
    paper_table3: [[f64; 4]; 2],
    paper_fig5: &'static str,
}

fn platforms() -> Result<Vec<Platform>> {
    Ok(vec![
        Platform {
            name: "2xP100",
            spec: jobs::p100()?,
            gpus: 2,
            mgb_workers: 10,
            cg_workers: [3, 4, 5, 6],
            paper_table2: [
                [0, 3, 8, 0],
                [14, 6, 6, 9],
                [13, 13, 20, 22],
                [16, 17, 16, 16],
            ],
            paper_table3: [[4.9, 2.3, 4.9, 4.3], [4.6, 3.2, 3.6, 2.0]],
            paper_fig5: "MGB 1.8-2.5x (mean 2.2x) over SA, +64% over CG; CG <= SA on W6, W7",
        },
        Platform {
            name: "4xV100",
            spec: jobs::v100()?,
            gpus: 4,
            mgb_workers: 16,
            cg_workers: [6, 8, 10, 12],
            paper_table2: [
                [0, 6, 17, 0],
                [13, 19, 25, 13],
                [15, 25, 20, 25],
                [33, 29, 38, 50],
            ],
            paper_table3: [[2.4, 2.0, 3.5, 2.6], [3.8, 2.9, 2.9, 2.6]],
            paper_fig5:
                "MGB 1.4-2.5x (mean 2.0x) over SA, +41% over CG; CG <= SA on W3, W6; CG > MGB on W1",
        },
    ])
}

const PAPER_TABLE4: [[f64; 8]; 2] = [
    [-0.3, 1.0, 0.3, 4.1, 2.9, 5.1, 1.1, 0.6],
    [-0.7, 0.8, 7.0, 3.1, 2.2, 4.1, 0.4, 2.9],
];

pub fn main(args: MultigpuArgs) -> Result<()> {
    match args.part.as_str() {
        "rodinia" => rodinia(&args),
        "nn" => nn(&args),
        "disb" => disb::run(
            &args.workload,
            args.models_dir.as_deref(),
            args.seed,
            args.duration,
            4,
        ),
        "all" => {
            rodinia(&args)?;
            nn(&args)?;
            disb::run(
                &args.workload,
                args.models_dir.as_deref(),
                args.seed,
                args.duration,
                4,
            )
        }
        p => bail!("unknown --part {p:?}: use rodinia, nn, disb or all"),
    }
}

fn workloads(spec: &DeviceSpec, seed: u64, share: f64) -> Result<Vec<Vec<Job>>> {
    let (large, small) = jobs::rodinia_pools(spec, share)?;
    Ok(MIXES
        .iter()
        .enumerate()
        .map(|(w, &(n, ratio))| {
            let mut rng = Rng(seed.wrapping_mul(1000).wrapping_add(w as u64));
            jobs::mix(&large, &small, n, ratio, &mut rng)
        })
        .collect())
}

fn devices(p: &Platform) -> Vec<DeviceSpec> {
    vec![p.spec.clone(); p.gpus]
}

fn pct(x: usize, n: usize) -> f64 {
    100.0 * x as f64 / n.max(1) as f64
}

/// Mean over jobs completed in both runs of (kernel time / SA's) - 1, in %.
fn kernel_slowdown(o: &Outcome, sa: &Outcome) -> f64 {
    let v: Vec<f64> = o
        .jobs
        .iter()
        .zip(&sa.jobs)
        .filter(|(a, b)| !a.crashed && !b.crashed && b.kernel_ns > 0)
        .map(|(a, b)| a.kernel_ns as f64 / b.kernel_ns as f64 - 1.0)
        .collect();
    100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn rodinia(args: &MultigpuArgs) -> Result<()> {
    println!(
        "# CASE/MGB §V on simulated nodes (reef-bench multigpu, seed {}, kernels {:.0}% of a Rodinia job's stand-alone time)",
        args.seed,
        100.0 * args.gpu_share
    );
    println!("# Rodinia-like jobs (bench/src/multigpu/jobs.rs; sources and assumptions in docs/results-multigpu.md)");
    for p in platforms()? {
        let (large, small) = jobs::rodinia_pools(&p.spec, args.gpu_share)?;
        println!(
            "\n## job pool on one {} (stand-alone, SA on one device)",
            p.spec.name
        );
        println!(
            "{:<12} {:>5} {:>6} {:>9} {:>9} {:>8}",
            "job", "GiB", "thr/b", "blocks", "time_s", "gpu_%"
        );
        for j in large.iter().chain(&small) {
            let o = run::run(
                std::slice::from_ref(&p.spec),
                PlacePolicy::Sa,
                std::slice::from_ref(j),
                1,
            )?;
            let jo = &o.jobs[0];
            println!(
                "{:<12} {:>5.1} {:>6} {:>9} {:>9.2} {:>8.1}",
                j.name,
                j.needs.memory as f64 / GIB as f64,
                j.needs.threads_per_block,
                j.needs.blocks,
                jo.end_ns as f64 / 1e9,
                100.0 * jo.kernel_ns as f64 / jo.end_ns.max(1) as f64
            );
        }

        let ws = workloads(&p.spec, args.seed, args.gpu_share)?;
        let dev = devices(&p);
        let mut sa = Vec::new();
        let mut mgb = Vec::new();
        let mut cg: Vec<Vec<Outcome>> = Vec::new();
        for w in &ws {
            sa.push(run::run(&dev, PlacePolicy::Sa, w, p.gpus)?);
            mgb.push(run::run(&dev, PlacePolicy::Alg3, w, p.mgb_workers)?);
            let mut v = Vec::new();
            for &n in &p.cg_workers {
                let ratio = n.div_ceil(p.gpus) as u32;
                v.push(run::run(
                    &dev,
                    PlacePolicy::Cg {
                        jobs_per_device: ratio,
                    },
                    w,
                    n,
                )?);
            }
            cg.push(v);
        }

        println!(
            "\n## Fig. 5 on {}: throughput normalised to SA (MGB = Alg. 3, {} workers; CG = its best run over {:?} workers: \
             without a crash where one exists (as the paper), else the best counting completed jobs only, with its crashes)",
            p.name, p.mgb_workers, p.cg_workers
        );
        println!(
            "{:<4} {:>10} {:>8} {:>22} {:>8}",
            "W", "SA_jobs/h", "MGB", "CG(workers,crashed)", "MGB/CG"
        );
        let (mut sum_mgb, mut sum_cg_all, mut sum_cg_safe, mut n_safe) = (0.0, 0.0, 0.0, 0);
        for (w, ((s, m), c)) in sa.iter().zip(&mgb).zip(&cg).enumerate() {
            let base = s.throughput();
            let by_tp = |a: &(&Outcome, usize), b: &(&Outcome, usize)| {
                a.0.throughput().total_cmp(&b.0.throughput())
            };
            let safe = c
                .iter()
                .zip(p.cg_workers)
                .filter(|(o, _)| o.crashed() == 0)
                .max_by(by_tp);
            let (o, n) = safe
                .or_else(|| c.iter().zip(p.cg_workers).max_by(by_tp))
                .expect("four CG runs");
            let r = m.throughput() / o.throughput();
            sum_cg_all += r;
            if safe.is_some() {
                sum_cg_safe += r;
                n_safe += 1;
            }
            sum_mgb += m.throughput() / base;
            println!(
                "W{:<3} {:>10.1} {:>7.2}x {:>22} {:>7.2}x",
                w + 1,
                base * 3600.0,
                m.throughput() / base,
                format!(
                    "{:.2}x ({n}, {:.0}%)",
                    o.throughput() / base,
                    pct(o.crashed(), o.jobs.len())
                ),
                r,
            );
        }
        println!(
            "mean MGB/SA {:.2}x; MGB/CG {:.2}x over all 8, {} over the {} with a crash-free CG run | paper: {}",
            sum_mgb / 8.0,
            sum_cg_all / 8.0,
            if n_safe > 0 { format!("{:.2}x", sum_cg_safe / n_safe as f64) } else { "n/a".into() },
            n_safe,
            p.paper_fig5
        );

        println!("\n## Table II on {}: % of jobs crashed under CG (16- and 32-job workloads of each mix), sim | paper", p.name);
        println!(
            "{:<8} {:>12} {:>12} {:>12} {:>12}",
            "workers", "1:1", "2:1", "3:1", "5:1"
        );
        for (k, &n) in p.cg_workers.iter().enumerate() {
            let mut line = format!("{n:<8}");
            for m in 0..4 {
                let (a, b) = (&cg[m][k], &cg[m + 4][k]);
                let c = a.crashed() + b.crashed();
                let t = a.jobs.len() + b.jobs.len();
                line += &format!(" {:>5.0}% | {:>2}%", pct(c, t), p.paper_table2[k][m]);
            }
            println!("{line}");
        }

        println!(
            "\n## Table III on {}: MGB mean turnaround speedup over SA, sim | paper",
            p.name
        );
        println!(
            "{:<8} {:>12} {:>12} {:>12} {:>12}",
            "jobs", "1:1", "2:1", "3:1", "5:1"
        );
        let mut all = Vec::new();
        for (row, n) in [16, 32].iter().enumerate() {
            let mut line = format!("{n:<8}");
            for m in 0..4 {
                let w = row * 4 + m;
                let r = sa[w].mean_turnaround_ns() / mgb[w].mean_turnaround_ns();
                all.push(r);
                line += &format!(" {:>5.2}x | {:.1}x", r, p.paper_table3[row][m]);
            }
            println!("{line}");
        }
        let paper_mean: f64 = p.paper_table3.iter().flatten().sum::<f64>() / 8.0;
        println!(
            "mean {:.2}x | paper {:.1}x",
            all.iter().sum::<f64>() / all.len() as f64,
            paper_mean
        );

        if p.gpus == 4 {
            let mut alg2 = Vec::new();
            for w in &ws {
                alg2.push(run::run(&dev, PlacePolicy::Alg2, w, p.mgb_workers)?);
            }
            println!(
                "\n## Fig. 4 on {}: Alg. 3 throughput over Alg. 2 ({} workers each)",
                p.name, p.mgb_workers
            );
            println!("{:<4} {:>10} {:>16}", "W", "Alg3/Alg2", "Alg2 wait/Alg3");
            let (mut s, mut sw, mut nw) = (0.0, 0.0, 0);
            for (w, (a2, a3)) in alg2.iter().zip(&mgb).enumerate() {
                let r = a3.throughput() / a2.throughput();
                s += r;
                let wr = if a3.mean_wait_ns() > 0.0 {
                    sw += a2.mean_wait_ns() / a3.mean_wait_ns();
                    nw += 1;
                    format!("{:.2}x", a2.mean_wait_ns() / a3.mean_wait_ns())
                } else {
                    format!("{:.2} s vs 0 s", a2.mean_wait_ns() / 1e9)
                };
                println!("W{:<3} {:>9.2}x {:>16}", w + 1, r, wr);
            }
            println!(
                "mean Alg3/Alg2 {:.2}x, Alg. 2 wait {} | paper: 1.21x, Alg. 2 waits 30% longer",
                s / 8.0,
                if nw > 0 {
                    format!("{:.2}x Alg. 3's", sw / nw as f64)
                } else {
                    "n/a".into()
                }
            );

            println!(
                "\n## Table IV on {}: kernel slowdown vs SA, % (sim | paper)",
                p.name
            );
            println!(
                "{:<6} {}",
                "sched",
                (1..=8)
                    .map(|w| format!("{:>13}", format!("W{w}")))
                    .collect::<String>()
                    + "          avg"
            );
            for (name, runs, row) in [("Alg2", &alg2, 0), ("Alg3", &mgb, 1)] {
                let v: Vec<f64> = runs
                    .iter()
                    .zip(&sa)
                    .map(|(o, s)| kernel_slowdown(o, s))
                    .collect();
                let mut line = format!("{name:<6}");
                for (w, x) in v.iter().enumerate() {
                    line += &format!(" {:>5.1} | {:>4.1}", x, PAPER_TABLE4[row][w]);
                }
                let pa: f64 = PAPER_TABLE4[row].iter().sum::<f64>() / 8.0;
                line += &format!(" {:>5.1} | {:.1}", v.iter().sum::<f64>() / 8.0, pa);
                println!("{line}");
            }
        }
    }
    Ok(())
}

fn nn(args: &MultigpuArgs) -> Result<()> {
    let dir = args
        .models_dir
        .clone()
        .unwrap_or_else(reef_model::default_models_dir);
    let spec = jobs::v100()?;
    let dev = vec![spec.clone(); 4];
    let models = reef_model::load_all(&dir)?;
    if models.is_empty() {
        bail!(
            "no models in {}: pass --models-dir or set REEF_SHARED",
            dir.display()
        );
    }
    println!(
        "\n## §V-E on 4xV100: neural-network jobs ({} inferences each, reef's models from {})",
        args.inferences,
        dir.display()
    );
    println!("footprint = model buffers + {} MiB workspace + {} MiB context (assumed; docs/results-multigpu.md)", jobs::NN_WORKSPACE >> 20, jobs::NN_CONTEXT >> 20);
    println!(
        "{:<10} {:>10} {:>10} {:>10} {:>10} {:>12}",
        "model", "foot_GiB", "alone_s", "schedGPU_s", "MGB_s", "MGB/schedGPU"
    );
    let mut pool = Vec::new();
    for m in &models {
        let j = jobs::nn_job(m, &spec, args.inferences)?;
        let alone = run::run(
            std::slice::from_ref(&spec),
            PlacePolicy::Sa,
            std::slice::from_ref(&j),
            1,
        )?;
        let w: Vec<Job> = vec![j.clone(); 8];
        let sg = run::run(&dev, PlacePolicy::SchedGpu, &w, 8)?;
        let mg = run::run(&dev, PlacePolicy::Alg3, &w, 8)?;
        println!(
            "{:<10} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>11.2}x",
            m.name,
            j.needs.memory as f64 / GIB as f64,
            alone.makespan_ns as f64 / 1e9,
            sg.makespan_ns as f64 / 1e9,
            mg.makespan_ns as f64 / 1e9,
            mg.throughput() / sg.throughput()
        );
        pool.push(j);
    }
    println!("paper (Darknet on 4xV100, 8 jobs per workload): predict 1.4x, generate 2.2x, train 3.1x, detect ~1x");

    let mut rng = Rng(args.seed.wrapping_add(77));
    let mix: Vec<Job> = (0..128)
        .map(|_| pool[rng.below(pool.len())].clone())
        .collect();
    let sa = run::run(&dev, PlacePolicy::Sa, &mix, 4)?;
    let mg = run::run(&dev, PlacePolicy::Alg3, &mix, 32)?;
    println!(
        "128-job random mix: SA (4 workers) {:.2} s, MGB (32 workers) {:.2} s: {:.2}x | paper 2.7x",
        sa.makespan_ns as f64 / 1e9,
        mg.makespan_ns as f64 / 1e9,
        mg.throughput() / sa.throughput()
    );
    Ok(())
}
