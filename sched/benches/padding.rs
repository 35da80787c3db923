//! Padding's per-kernel decision cost on the real MI50 data (issue 28: "the
//! decision cost per kernel stays ≤ 0.2 µs p99 (`cargo bench -p
//! reef-sched`), side by side with `reef`'s").
//!
//! What is timed: one [`Selector::select`] call, the kernel selection REEF
//! runs for every real-time kernel while best-effort tasks wait (§5.2,
//! §5.3; REEF reports 0.4–1.2 µs for it, §6.5 Fig. 26), with `reef`'s
//! selector (one version per kernel) and `reef-max`'s (multi-version
//! kernels, `waves`, `share`, `chain`), each on the padding table built from
//! the measured models in `<shared>/models/mi50` (read in place) by
//! [`build_table`] with the MI50's block-cost parameters, read from the
//! simulator's preset `sim/devices/mi50.toml`. Not timed: the rest of a
//! scheduling decision (the event's handling, the plans, the launch);
//! `reef-bench disb W --decision-cost` measures whole decisions in a run.
//!
//! The states: the real-time kernel is drawn from the five models'
//! kernels; one or five best-effort tasks (models drawn, one per model for
//! five) each stand at a drawn kernel, fresh or started under a drawn
//! version at a drawn block offset; `reef-max`'s chained kernels are the
//! next kernels of the task, up to the scheduler's 8, not narrowed by their
//! buffer dependences (`ModelInfo::successors_clear` needs the models'
//! idempotence metadata): at most the walk `chain` does in a run.
//!
//! Each selection is timed alone (two `Instant::now` reads around it; their
//! own cost, measured back to back, is printed as `timer` and included in
//! every figure), over 4,096 states in turn (a quarter as many selections when evicted),
//! in two cache states:
//! - `warm`: selections back to back; the table stays in the caches as far
//!   as they hold it;
//! - `evicted`: 4 MiB of other memory (twice this machine's per-core L2)
//!   is written between selections, as the simulator's and the executor's
//!   work between decisions does in a run: the table is read from the L3
//!   or memory, which is what a run's p99 pays (docs/results-max.md,
//!   "Decision cost").
//!
//! Beside `reef-max`, the same selector with one of its mechanisms off
//! (`-share`, `-chain`, `-spread`, `-rate`): where its cost sits.
//!
//! Padding policies make this selection ahead of the launch it is for
//! (`reef_sched::dkp::padded::ahead`): in a run most launches take a
//! selection made ahead and pay none of this on their own path;
//! `reef-bench disb W --decision-cost` prints both.
//!
//! Not criterion: criterion reports the mean of batches, not the p99 of
//! single calls the issue asks about. Run: `cargo bench -p reef-sched
//! --bench padding` (set `REEF_SHARED` to use another shared directory).

use reef_sched::dkp::share::BUDGET_PERMILLE;
use reef_sched::dkp::{build_table, BlockCost, Candidate, DeviceLimits, Padding, Variant};
use reef_sched::dkp::{floor::Floors, DkpTable, KernelChar, Selector};
use std::hint::black_box;
use std::time::Instant;

/// splitmix64: deterministic draws.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Integer `key = value` of the MI50 preset (the simulator's device file).
fn preset_value(text: &str, key: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split('#').next())
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .and_then(|(_, v)| v.trim().replace('_', "").parse().ok())
        .unwrap_or_else(|| panic!("{key} in sim/devices/mi50.toml"))
}

fn mi50() -> (DeviceLimits, BlockCost, u64) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../sim/devices/mi50.toml");
    let text = std::fs::read_to_string(path).expect("sim/devices/mi50.toml");
    let v = |k| preset_value(&text, k);
    let limits = DeviceLimits {
        compute_units: v("compute_units") as u32,
        wave_size: v("wave_size") as u32,
        max_waves_per_cu: v("max_waves_per_cu") as u32,
        max_threads_per_cu: v("max_threads_per_cu") as u32,
        max_blocks_per_cu: v("max_blocks_per_cu") as u32,
        lds_bytes_per_cu: v("lds_bytes_per_cu") as u32,
        registers_per_cu: v("registers_per_cu") as u32,
        // GCN / Vega: 4 SIMD units per CU (reef_exec::limits).
        simds_per_cu: 4,
    };
    let cost = BlockCost {
        launch_path_ns: v("host_launch_ns") + v("cp_fetch_ns") + v("cp_dispatch_ns"),
        min_block_ns: v("min_block_ns"),
        // measured_profiles = true on the MI50.
        profile_scale: None,
        memory_bandwidth_bytes_per_s: v("memory_bandwidth_bytes_per_s"),
    };
    // reef_exec::pad::barrier_ns: max(2 DRAM round trips, cp_dispatch_ns).
    let barrier = (2 * v("dram_latency_ns")).max(v("cp_dispatch_ns"));
    (limits, cost, barrier)
}

/// One drawn state: the real-time kernel and the best-effort tasks.
struct State {
    rt: (usize, usize),
    /// (model, kernel, locked, next_block)
    tasks: Vec<(usize, usize, Option<u16>, u32)>,
    start: usize,
}

fn draw(t: &DkpTable, r: &mut Rng, be: usize) -> State {
    let models = t.kernels.len();
    let rm = r.below(models);
    let rt = (rm, r.below(t.kernels[rm].len()));
    let tasks = (0..be)
        .map(|i| {
            let m = if be >= models {
                i % models
            } else {
                r.below(models)
            };
            let k = r.below(t.kernels[m].len());
            let vs = &t.kernels[m][k];
            if r.below(2) == 0 {
                (m, k, None, 0)
            } else {
                let v = r.below(vs.len());
                (m, k, Some(v as u16), r.below(vs[v].blocks as usize) as u32)
            }
        })
        .collect();
    State {
        rt,
        tasks,
        start: r.below(be),
    }
}

const CHAIN_MAX: usize = 8;

fn candidates<'a>(t: &'a DkpTable, floors: &Floors, s: &State) -> Vec<Candidate<'a>> {
    let chains = t.selector.chains();
    s.tasks
        .iter()
        .map(|&(m, k, locked, next_block)| {
            let ks = &t.kernels[m];
            let end = if chains {
                (k + 1 + CHAIN_MAX).min(ks.len())
            } else {
                k + 1
            };
            Candidate {
                versions: &ks[k],
                locked,
                next_block,
                following: &ks[k + 1..end],
                rule1_floor: floors.get(m, k),
            }
        })
        .collect()
}

struct Figures {
    p50: u64,
    p99: u64,
    p999: u64,
    mean: f64,
    padded: f64,
}

fn quantile(v: &[u64], q: f64) -> u64 {
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn run(t: &DkpTable, be: usize, evict: Option<&mut Vec<u8>>, n: usize) -> Figures {
    let floors = Floors::new(&t.kernels);
    let mut r = Rng(0x5eed_0000 + be as u64);
    let states: Vec<State> = (0..4096).map(|_| draw(t, &mut r, be)).collect();
    let cands: Vec<Vec<Candidate<'_>>> = states.iter().map(|s| candidates(t, &floors, s)).collect();
    let mut out = Padding::default();
    let mut ns = Vec::with_capacity(n);
    let mut padded = 0usize;
    let mut evict = evict;
    for i in 0..n {
        let j = i % states.len();
        let (m, k) = states[j].rt;
        let rt: &KernelChar = &t.kernels[m][k][0];
        if let Some(buf) = evict.as_deref_mut() {
            for x in buf.iter_mut().step_by(64) {
                *x = x.wrapping_add(1);
            }
            black_box(&buf);
        }
        let t0 = Instant::now();
        let p = t
            .selector
            .select(black_box(rt), &cands[j], states[j].start, &mut out);
        let d = t0.elapsed();
        padded += p as usize;
        ns.push(d.as_nanos() as u64);
    }
    let mean = ns.iter().sum::<u64>() as f64 / n as f64;
    ns.sort_unstable();
    Figures {
        p50: quantile(&ns, 0.5),
        p99: quantile(&ns, 0.99),
        p999: quantile(&ns, 0.999),
        mean,
        padded: padded as f64 / n as f64,
    }
}

fn timer_ns() -> u64 {
    let mut v: Vec<u64> = (0..100_000)
        .map(|_| {
            let t0 = Instant::now();
            t0.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    quantile(&v, 0.5)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks policies.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (limits, cost, barrier) = mi50();
    let dir = reef_model::default_models_dir();
    let models = reef_model::load_all(&dir).expect("the MI50 models");
    let refs: Vec<&reef_model::Model> = models.iter().collect();
    let reef = build_table(&limits, &cost, &refs, Variant::Single).expect("table");
    let mut max = build_table(&limits, &cost, &refs, Variant::MultiVersion).expect("table");
    max.selector = max
        .selector
        .clone()
        .with_waves(true)
        .with_most(true)
        .with_spread(true)
        .with_rate(true)
        .with_share(BUDGET_PERMILLE)
        .with_chain(Some(barrier));
    let n: usize = std::env::var("REEF_BENCH_SELECTIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    println!(
        "padding selection per real-time kernel, ns (MI50 models in {}; {} selections each; timer {} ns included)",
        dir.display(),
        n,
        timer_ns()
    );
    println!(
        "{:<10} {:>3} {:<8} {:>6} {:>6} {:>7} {:>8} {:>7}",
        "policy", "be", "cache", "p50", "p99", "p99.9", "mean", "padded"
    );
    // `reef-max` with one mechanism off at a time: where its cost sits.
    let off = |f: fn(Selector) -> Selector| {
        let mut t = max.clone();
        t.selector = f(t.selector);
        t
    };
    let no_share = off(|s| s.with_share(0));
    let no_chain = off(|s| s.with_chain(None));
    let no_spread = off(|s| s.with_spread(false));
    let no_rate = off(|s| s.with_rate(false));
    let mut buf = vec![0u8; 4 << 20];
    for (name, t) in [
        ("reef", &reef),
        ("reef-max", &max),
        ("-share", &no_share),
        ("-chain", &no_chain),
        ("-spread", &no_spread),
        ("-rate", &no_rate),
    ] {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        for be in [1, 5] {
            for evict in [false, true] {
                // The evicting pass costs tens of us a selection: fewer of them.
                let runs = if evict { n / 4 } else { n };
                let f = run(t, be, evict.then_some(&mut buf), runs);
                println!(
                    "{:<10} {:>3} {:<8} {:>6} {:>6} {:>7} {:>8.1} {:>7.3}",
                    name,
                    be,
                    if evict { "evicted" } else { "warm" },
                    f.p50,
                    f.p99,
                    f.p999,
                    f.mean,
                    f.padded
                );
            }
        }
    }
}
