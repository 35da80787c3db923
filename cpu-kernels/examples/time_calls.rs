//! Times each call of a compiled model's CPU build on zero inputs:
//! `cargo run --release -p reef-cpu-kernels --example time_calls -- DIR [RUNS]`.
//! What real values cost the host per kernel (docs/compile.md "CPU build").

use reef_cpu_kernels::Program;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: time_calls DIR [RUNS]"));
    let runs: u32 = args.next().map(|r| r.parse().expect("RUNS")).unwrap_or(20);
    let p = Program::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let mut st = p.new_storages();
    let mut per = vec![0f64; p.calls.len()];
    for _ in 0..runs {
        for (i, t) in per.iter_mut().enumerate() {
            let t0 = Instant::now();
            p.run_call(i, &mut st).unwrap_or_else(|e| panic!("{e}"));
            *t += t0.elapsed().as_secs_f64() * 1e6;
        }
    }
    let mut total = 0.0;
    for (c, t) in p.calls.iter().zip(&per) {
        println!("{:>10.1} us  {}", t / runs as f64, c.function.name());
        total += t / runs as f64;
    }
    println!(
        "{total:>10.1} us  total, {} calls (mean of {runs} runs)",
        p.calls.len()
    );
}
