//! `reef-bench aker --colocate`: Aker §9.3/§9.4 on reef's LC/BE pairs under
//! the reef-sched policies `aker`, `baymax`, `tacker`, `reef` and
//! `streams`, all through `reef-bench disb`'s runner (the same scheduler
//! code the daemon runs). The earlier self-contained experiment with its
//! private managers (`colocate.rs`: aker, baymax, lc-first, streams on one
//! hand-driven stream) stays available as `--colocate-private`.
//!
//! Setup (choices, the paper gives neither an arrival rate nor a violation
//! rate, §9.2): one LC model served to open-loop-like Poisson queries at
//! utilisation `ρ` of the LC model alone (rate = ρ / stand-alone latency),
//! issued by [`LC_CLIENTS`] DISB clients of rate ρ/4 each (a DISB client has
//! one query outstanding and drops a launch already late, REEF §6.2; four
//! make overlapping queries possible, as open-loop arrivals have them); one
//! BE client running its model back to back. One QoS target for every
//! policy: `qos_x` × the LC model's measured stand-alone latency, given to
//! the Aker managers as their explicit target and used to count
//! violations for every policy. BE throughput: BE inferences completed per
//! second. Gains: BE throughput ratio − 1 (Eq. 6 as printed would make a
//! win negative).

use crate::disb::runner::{self, ClientPlan, Gen, RunOptions};
use anyhow::Result;
use reef_exec::PreparedModel;
use reef_sched::Class;
use reef_sim::DeviceSpec;
use serde::Serialize;

/// Policies compared, in print order.
pub const POLICIES: &[&str] = &["aker", "baymax", "tacker", "reef", "streams"];

/// DISB clients that issue the LC queries (see the module doc).
pub const LC_CLIENTS: usize = 4;

/// One result row.
#[derive(Debug, Clone, Serialize)]
pub struct PairRow {
    pub policy: String,
    pub lc: String,
    pub be: String,
    pub utilisation: f64,
    pub qos_ms: f64,
    pub queries: u64,
    pub violations: u64,
    /// Beyond 1.01 × the target (near misses excluded).
    pub violations_beyond_1pct: u64,
    pub p99_ms: f64,
    pub be_per_s: f64,
    pub fused_launches: Option<u64>,
    pub corrupted_outputs: u64,
}

/// Runs one (LC, BE, utilisation) under every policy of [`POLICIES`].
#[allow(clippy::too_many_arguments)]
pub fn run_pair(
    spec: &DeviceSpec,
    lc: &PreparedModel,
    lc_ns: f64,
    be: &PreparedModel,
    util: f64,
    qos_x: f64,
    queries: usize,
    seed: u64,
    check_values: bool,
    profiles: &reef_exec::aker::SimPredictor,
) -> Result<Vec<PairRow>> {
    let profiles = std::sync::Arc::new(profiles.share());
    let models = vec![lc.clone(), be.clone()];
    let qos = qos_x * lc_ns;
    let duration = (queries as f64 * lc_ns / util) as u64;
    let mut plans: Vec<ClientPlan> = (0..LC_CLIENTS)
        .map(|i| ClientPlan {
            name: format!("lc{i}"),
            model: 0,
            class: Class::RealTime,
            gen: Gen::Poisson {
                next: 0,
                rate_per_ns: util / lc_ns / LC_CLIENTS as f64,
                rng: seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)) | 1,
            },
        })
        .collect();
    plans.push(ClientPlan {
        name: "be".into(),
        model: 1,
        class: Class::BestEffort,
        gen: Gen::Continuous,
    });
    let mut rows = Vec::new();
    for p in POLICIES {
        let aker = reef_sched::aker::AkerConfig {
            qos_ns: vec![Some(qos as u64); LC_CLIENTS],
            ..Default::default()
        };
        let out = runner::simulate(
            spec,
            &models,
            plans.clone(),
            duration,
            &RunOptions {
                policy: p.to_string(),
                seed,
                track_values: check_values,
                aker,
                aker_profiles: Some(profiles.clone()),
                ..RunOptions::default()
            },
        )?;
        let mut lat: Vec<u64> = out.clients[..LC_CLIENTS]
            .iter()
            .flat_map(|c| c.latencies.iter().copied())
            .collect();
        lat.sort_unstable();
        let p99 = lat
            .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0);
        rows.push(PairRow {
            policy: p.to_string(),
            lc: lc.name.clone(),
            be: be.name.clone(),
            utilisation: util,
            qos_ms: qos / 1e6,
            queries: lat.len() as u64,
            violations: lat.iter().filter(|&&l| l as f64 > qos).count() as u64,
            violations_beyond_1pct: lat.iter().filter(|&&l| l as f64 > 1.01 * qos).count() as u64,
            p99_ms: p99 as f64 / 1e6,
            be_per_s: out.clients[LC_CLIENTS].completed as f64 / (duration as f64 / 1e9),
            fused_launches: out.aker.map(|a| a.fused_launches),
            corrupted_outputs: out.corrupted_outputs,
        });
    }
    Ok(rows)
}

/// A model by name from the models directory, or from a model directory
/// given as a path (a name with a `/`, e.g. `bench/aker-be/lbm`: Aker's BE
/// kernels described from Parboil's source, bench/aker-be/README.md).
fn load(dir: &std::path::Path, n: &str) -> Result<reef_model::Model> {
    let p = std::path::Path::new(n);
    match (
        n.contains('/'),
        p.parent(),
        p.file_name().and_then(|f| f.to_str()),
    ) {
        (true, Some(parent), Some(name)) => Ok(reef_model::load_named(parent, name)?),
        _ => Ok(reef_model::load_named(dir, n)?),
    }
}

/// The whole table: every LC × BE × utilisation.
#[allow(clippy::too_many_arguments)]
pub fn main(
    spec: &DeviceSpec,
    lcs: &[String],
    bes: &[String],
    utils: &[f64],
    qos_x: f64,
    queries: usize,
    check_values: bool,
    json: bool,
) -> Result<()> {
    let seed = 7;
    let dir = reef_model::default_models_dir();
    let mut names: Vec<&String> = lcs.iter().collect();
    names.extend(bes.iter().filter(|b| !lcs.contains(b)));
    let mut models = Vec::new();
    for n in &names {
        models.push(PreparedModel::new(load(&dir, n)?, spec)?);
    }
    let all = reef_exec::aker::SimPredictor::new(spec, &models)?;
    let by = |n: &String| names.iter().position(|x| *x == n).expect("loaded");
    if !json {
        println!(
            "Aker §9 co-location through reef-sched policies on {}: LC Poisson queries at utilisation u \
             ({LC_CLIENTS} DISB clients), one BE client back to back, QoS = {qos_x} x LC stand-alone latency for every policy",
            spec.name
        );
        println!(
            "{:<10} {:<9} {:<8} {:>5} {:>7} {:>6} {:>6} {:>6} {:>8} {:>8} {:>7} {:>10}",
            "LC",
            "BE",
            "policy",
            "util",
            "qos ms",
            "n",
            "viol",
            ">1.01",
            "p99 ms",
            "BE inf/s",
            "fused",
            "vs baymax"
        );
    }
    let mut gains: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for lc in lcs {
        let li = by(lc);
        let lc_ns = crate::disb::standalone_ns(spec, &models[li], 10, seed)?;
        for be in bes {
            let bi = by(be);
            for &u in utils {
                let rows = run_pair(
                    spec,
                    &models[li],
                    lc_ns,
                    &models[bi],
                    u,
                    qos_x,
                    queries,
                    seed,
                    check_values,
                    &all.select(&[li, bi]),
                )?;
                if let Some(r) = rows.iter().find(|r| r.corrupted_outputs > 0) {
                    anyhow::bail!(
                        "{} {}/{} at {u}: {} requests returned outputs that differ from an unpreempted run",
                        r.policy, lc, be, r.corrupted_outputs
                    );
                }
                let base = rows
                    .iter()
                    .find(|r| r.policy == "baymax")
                    .map_or(f64::NAN, |r| r.be_per_s);
                for r in &rows {
                    let g = r.be_per_s / base - 1.0;
                    gains.entry(r.policy.clone()).or_default().push(g);
                    if json {
                        println!("{}", serde_json::to_string(r)?);
                    } else {
                        println!(
                            "{:<10} {:<9} {:<8} {:>5.2} {:>7.2} {:>6} {:>6} {:>6} {:>8.2} {:>8.2} {:>7} {:>+9.1}%",
                            r.lc, r.be, r.policy, r.utilisation, r.qos_ms, r.queries, r.violations,
                            r.violations_beyond_1pct, r.p99_ms, r.be_per_s,
                            r.fused_launches.map_or("-".into(), |f| f.to_string()),
                            g * 100.0
                        );
                    }
                }
            }
        }
    }
    if !json {
        for p in POLICIES {
            if let Some(g) = gains.get(*p) {
                println!(
                    "{p} vs baymax, BE throughput (ratio - 1): mean {:+.1} % over {} runs",
                    g.iter().sum::<f64>() / g.len() as f64 * 100.0,
                    g.len()
                );
            }
        }
        println!(
            "paper (Aker §9.3, Fig. 14): aker +50.1 % and tacker +24.3 % over baymax on an RTX Ada6000 \
             with Parboil/Rodinia BE applications; tacker fuses only a TC kernel (reef-compile --fp16) with a CUDA-core one"
        );
    }
    Ok(())
}
