//! DISB metrics as REEF §6.2 defines them: each real-time request's
//! end-to-end latency normalised by its model's stand-alone latency (mean,
//! p50, p99), and each client's throughput normalised by its model's
//! stand-alone maximum throughput, summed for the overall throughput
//! (Fig. 15). Preemption latency as DESIGN.md "Measuring" defines it: from
//! the preempt decision to the moment no best-effort kernel is queued or
//! running (Figs. 17, 18).

use super::runner::{ClientPlan, RunOutcome};
use reef_sched::Class;
use serde::Serialize;
use std::collections::BTreeMap;

/// One client's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ClientResult {
    pub name: String,
    pub model: String,
    pub class: &'static str,
    pub requests: u64,
    pub throughput_rps: f64,
    pub throughput_norm: f64,
    pub latency_us_mean: Option<f64>,
    pub latency_norm_mean: Option<f64>,
}

/// One (workload, policy) result: the `--json` object.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyResult {
    pub workload: String,
    pub policy: String,
    pub device: String,
    pub seed: u64,
    pub duration_s: f64,
    pub rt_requests: u64,
    pub rt_latency_norm_mean: Option<f64>,
    pub rt_latency_norm_p50: Option<f64>,
    pub rt_latency_norm_p99: Option<f64>,
    pub rt_latency_us_mean: Option<f64>,
    pub throughput_norm_overall: f64,
    /// Per client name.
    pub throughput_norm: BTreeMap<String, f64>,
    pub be_throughput_norm: f64,
    pub preemptions: usize,
    pub preempt_latency_us_mean: Option<f64>,
    pub preempt_latency_us_p99: Option<f64>,
    /// Highest preemption level used (1 host queue, 2 lazy eviction, 3 kill);
    /// null when the policy never preempted.
    pub preempt_level: Option<u8>,
    pub restores: u64,
    pub redundant_kernels: u64,
    pub kernels_launched: u64,
    pub device_events: u64,
    pub clients: Vec<ClientResult>,
    /// The largest DRAM draw of resident blocks over the run, as a fraction
    /// of the device's memory bandwidth (docs/simulator.md "Shared memory
    /// bandwidth"; above 1 it was oversubscribed); null for a live run.
    pub dram_load_peak: Option<f64>,
    /// Wall-clock time of the simulation, ms.
    pub wall_ms: f64,
    /// Aker managers (`aker`, `baymax`, `tacker`): fused launches, and RT
    /// queries beyond their QoS target out of all finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_launches: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_missed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_queries: Option<u64>,
    /// Where the device's CU time went (`--lost`, [`super::lost`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<super::lost::Lost>,
    /// The scheduler's own time per decision (`--decision-cost`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_ns: Option<DecisionNs>,
    /// With it, for a padding policy: each selection made ahead of its
    /// launch, timed apart from the decisions, and how many launches took
    /// one (`reef_sched::dkp::padded::ahead`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare_ns: Option<DecisionNs>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ahead: Option<AheadCounts>,
    /// The padding policies' launch counts; null for the others and for a
    /// live run (its `live.padded_launches` is what the daemon reports).
    pub padding: Option<PaddingCounts>,
}

/// What a padding policy did with the real-time kernels of a run
/// (`reef_exec::pad::PadStats`, without its per-launch lists).
#[derive(Debug, Clone, Serialize)]
pub struct PaddingCounts {
    pub rt_launches: u64,
    /// Real-time kernels launched padded (REEF §5.1).
    pub padded_launches: u64,
    pub be_blocks_padded: u64,
    /// Best-effort kernels completed entirely inside padded launches.
    pub be_kernels_completed: u64,
    pub rest_launches: u64,
    /// Real-time requests whose first kernel waited for a best-effort
    /// task's reset.
    pub reset_waits: u64,
    /// Real-time kernels `reef-max`'s `guard` launched unpadded to hold the
    /// RT mean (docs/results-max.md, "The real-time guard").
    pub guard_held: u64,
}

/// How a padding policy's selections made ahead of their launch fared
/// (`reef_sched::dkp::padded::ahead`).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AheadCounts {
    /// Selections made ahead.
    pub made: u64,
    /// Padded-launch selections that took one made ahead.
    pub hits: u64,
    /// Selections made on the launch's own path.
    pub misses: u64,
}

/// The scheduler's own time per decision over a run, ns
/// (`reef_exec::drive::cost`): one decision is the handling of the events
/// since the last and the draining of their actions, padding's kernel
/// selection included; `timer_ns` is one timed call's two clock reads,
/// included in every figure once per call.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionNs {
    pub decisions: u64,
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub timer_ns: u64,
    /// p50, p99 and p99.9 net of the clock: less `timer_ns` per timed
    /// call of the decision (`reef_exec::drive::cost::DecisionCost`).
    pub net_p50: u64,
    pub net_p99: u64,
    pub net_p999: u64,
}

impl DecisionNs {
    pub fn of(c: &reef_exec::drive::cost::DecisionCost) -> Option<Self> {
        Some(Self {
            decisions: c.len(),
            mean: c.mean()?,
            p50: c.quantile(0.5)?,
            p99: c.quantile(0.99)?,
            p999: c.quantile(0.999)?,
            max: c.quantile(1.0)?,
            timer_ns: c.timer(),
            net_p50: c.net_quantile(0.5)?,
            net_p99: c.net_quantile(0.99)?,
            net_p999: c.net_quantile(0.999)?,
        })
    }
}

/// Nearest-rank percentile of a sorted slice.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Computes the metrics of one run. `standalone_ns[m]` is model m's
/// stand-alone latency; `model_names[m]` its name.
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    workload: &str,
    policy: &str,
    device: &str,
    seed: u64,
    plans: &[ClientPlan],
    model_names: &[String],
    standalone_ns: &[f64],
    out: &RunOutcome,
    wall_ms: f64,
) -> PolicyResult {
    let secs = out.duration as f64 / 1e9;
    let mut rt_norm = Vec::new();
    let mut rt_us = Vec::new();
    let mut clients = Vec::new();
    let mut throughput_norm = BTreeMap::new();
    let mut overall = 0.0;
    let mut be = 0.0;
    for (plan, st) in plans.iter().zip(&out.clients) {
        let base = standalone_ns[plan.model];
        let thr = st.completed as f64 / secs;
        let thr_norm = thr * base / 1e9;
        overall += thr_norm;
        if plan.class == Class::BestEffort {
            be += thr_norm;
        }
        let lat_us: Vec<f64> = st.latencies.iter().map(|&l| l as f64 / 1e3).collect();
        let lat_norm: Vec<f64> = st.latencies.iter().map(|&l| l as f64 / base).collect();
        if plan.class == Class::RealTime {
            rt_norm.extend_from_slice(&lat_norm);
            rt_us.extend_from_slice(&lat_us);
        }
        throughput_norm.insert(plan.name.clone(), thr_norm);
        clients.push(ClientResult {
            name: plan.name.clone(),
            model: model_names[plan.model].clone(),
            class: match plan.class {
                Class::RealTime => "real-time",
                Class::BestEffort => "best-effort",
            },
            requests: st.completed,
            throughput_rps: thr,
            throughput_norm: thr_norm,
            latency_us_mean: mean(&lat_us),
            latency_norm_mean: mean(&lat_norm),
        });
    }
    rt_norm.sort_by(f64::total_cmp);
    let mut pl: Vec<f64> = out
        .preemptions
        .iter()
        .filter_map(|p| p.latency())
        .map(|l| l as f64 / 1e3)
        .collect();
    pl.sort_by(f64::total_cmp);
    PolicyResult {
        workload: workload.to_string(),
        policy: policy.to_string(),
        device: device.to_string(),
        seed,
        duration_s: secs,
        rt_requests: rt_us.len() as u64,
        rt_latency_norm_mean: mean(&rt_norm),
        rt_latency_norm_p50: percentile(&rt_norm, 50.0),
        rt_latency_norm_p99: percentile(&rt_norm, 99.0),
        rt_latency_us_mean: mean(&rt_us),
        throughput_norm_overall: overall,
        throughput_norm,
        be_throughput_norm: be,
        preemptions: pl.len(),
        preempt_latency_us_mean: mean(&pl),
        preempt_latency_us_p99: percentile(&pl, 99.0),
        preempt_level: out.preemptions.iter().map(|p| p.level.number()).max(),
        restores: out.restores,
        redundant_kernels: out.redundant_kernels,
        kernels_launched: out.kernels_launched,
        device_events: out.device_events,
        clients,
        dram_load_peak: out.dram_load_peak,
        wall_ms,
        fused_launches: out.aker.map(|a| a.fused_launches),
        qos_missed: out.aker.map(|a| a.qos_missed),
        qos_queries: out.aker.map(|a| a.qos_met + a.qos_missed),
        lost: out.lost.clone(),
        decision_ns: out.decision_cost.as_ref().and_then(DecisionNs::of),
        prepare_ns: out.prepare_cost.as_ref().and_then(DecisionNs::of),
        ahead: out
            .ahead
            .filter(|_| out.decision_cost.is_some())
            .map(|a| AheadCounts {
                made: a.made,
                hits: a.hits,
                misses: a.misses,
            }),
        padding: out.padding.as_ref().map(|p| PaddingCounts {
            rt_launches: p.rt_launches,
            padded_launches: p.padded_launches,
            be_blocks_padded: p.be_blocks_padded,
            be_kernels_completed: p.be_kernels_completed_by_padding,
            rest_launches: p.rest_launches,
            reset_waits: p.reset_waits,
            guard_held: p.guard_held,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
    }
}
