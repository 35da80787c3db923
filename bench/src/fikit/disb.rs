//! DISB A–E with `fikit` beside the other policies, for back-to-back and
//! host-paced clients, with ε swept and FIKIT's ablations.

use super::*;

/// One DISB row: workload, host, policy label, result, FIKIT counters.
struct DisbRow {
    host: String,
    label: String,
    r: PolicyResult,
    fikit: Option<reef_sched::fikit::FikitStats>,
}

pub(super) fn disb(ctx: &Ctx, args: &FikitArgs, threads: usize) -> Result<()> {
    let hosts = parse_list(&args.disb_hosts, "disb-hosts", Host::parse)?;
    let eps = parse_list(&args.epsilon_sweep_us, "epsilon-sweep-us", us)?;
    let shared = reef_model::shared_dir();
    let mut wls = Vec::new();
    for w in args
        .workloads
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        for p in workload::resolve(w, &shared) {
            wls.push(Workload::load(&p)?);
        }
    }
    let secs = args.disb_secs;
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--disb-secs must be a positive number of seconds, got {secs}");
    }
    let mut level1 = ctx.spec.clone();
    level1.preempt_levels = vec![1];
    println!(
        "\n## DISB on {} ({} s virtual per run): RT latency normalised by the stand-alone latency under the same host model",
        ctx.spec.name, secs
    );
    for &host in &hosts {
        let n = ctx.models.len();
        let per_model: Vec<Result<(Profile, f64)>> =
            par(&(0..n).collect::<Vec<_>>(), threads, |&m| {
                let (p, _) = ctx.measure(m, host, args.runs)?;
                let sa = ctx.alone(m, host, "rt-only", &[], 5)?;
                Ok((p, sa))
            });
        let mut profiles = Vec::new();
        let mut sa = Vec::new();
        for r in per_model {
            let (p, s) = r?;
            profiles.push(p);
            sa.push(s);
        }
        // (workload, label, policy, spec, fikit config)
        let mut jobs: Vec<(usize, String, String, bool, FikitConfig)> = Vec::new();
        for w in 0..wls.len() {
            for p in [
                "seq",
                "streams",
                "share",
                "reef",
                "fikit",
                "fikit-nofill",
                "fikit-noearly",
            ] {
                jobs.push((w, p.into(), p.into(), false, ctx.fikit.clone()));
            }
            for &e in &eps {
                jobs.push((
                    w,
                    format!("fikit-e{}", e / 1000),
                    "fikit".into(),
                    false,
                    FikitConfig {
                        epsilon_ns: e,
                        ..ctx.fikit.clone()
                    },
                ));
            }
            for p in ["reef-nodkp", "fikit"] {
                jobs.push((w, format!("{p}@L1"), p.into(), true, ctx.fikit.clone()));
            }
        }
        let names: Vec<String> = ctx.models.iter().map(|m| m.name.clone()).collect();
        let rows: Vec<Result<DisbRow>> = par(&jobs, threads, |(w, label, policy, l1, fc)| {
            let wl = &wls[*w];
            let idx = |d: &str| names.iter().position(|n| n == d).expect("model loaded");
            let plans = runner::plan_clients(wl, &idx, &sa, ctx.seed);
            let t0 = Instant::now();
            let out = runner::simulate(
                if *l1 { &level1 } else { &ctx.spec },
                &ctx.models,
                plans.clone(),
                (secs * 1e9) as Time,
                &RunOptions {
                    policy: policy.clone(),
                    seed: ctx.seed,
                    dq_capacity: 4,
                    track_values: false,
                    host_gap_ns: host.gap_ns(),
                    priorities: Vec::new(),
                    fikit: fc.clone(),
                    fikit_profiles: profiles.clone(),
                    ..RunOptions::default()
                },
            )
            .with_context(|| format!("DISB {} {label} host {}", wl.name, host.label()))?;
            let r = metrics::summarize(
                &wl.name,
                label,
                &ctx.spec.name,
                ctx.seed,
                &plans,
                &names,
                &sa,
                &out,
                t0.elapsed().as_secs_f64() * 1e3,
            );
            Ok(DisbRow {
                host: host.label(),
                label: label.clone(),
                fikit: out.fikit,
                r,
            })
        });
        println!(
            "{:<3} {:<6} {:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>10}",
            "wl",
            "host",
            "policy",
            "rt_mean",
            "rt_p99",
            "rt_us",
            "thr_all",
            "thr_be",
            "gaps",
            "filled",
            "fills",
            "overrun",
            "overrun_us"
        );
        for row in rows {
            let row = row?;
            let r = &row.r;
            let o = |v: Option<f64>, p: usize| v.map_or("-".into(), |x| format!("{x:.p$}"));
            let (g, gf, fl, ov, ovu) = row.fikit.map_or(
                ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
                |s| {
                    (
                        s.gaps_seen.to_string(),
                        s.gaps_filled.to_string(),
                        s.fill_kernels.to_string(),
                        s.overruns.to_string(),
                        format!("{:.0}", s.overrun_ns as f64 / 1e3),
                    )
                },
            );
            println!(
                "{:<3} {:<6} {:<16} {:>8} {:>8} {:>8} {:>8.3} {:>8.3} {:>7} {:>7} {:>7} {:>8} {:>10}",
                r.workload,
                row.host,
                row.label,
                o(r.rt_latency_norm_mean, 3),
                o(r.rt_latency_norm_p99, 3),
                o(r.rt_latency_us_mean, 0),
                r.throughput_norm_overall,
                r.be_throughput_norm,
                g,
                gf,
                fl,
                ov,
                ovu
            );
        }
    }
    Ok(())
}
