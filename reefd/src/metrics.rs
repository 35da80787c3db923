//! Daemon metrics: counters, latency histograms and summaries, rendered in the
//! Prometheus text exposition format. The figures follow REEF §6.2 (RT
//! end-to-end latency, normalised by the model's stand-alone latency) and
//! §6.4 (preemption, by the level used: DESIGN.md's 1 = host-queue eviction,
//! 2 = lazy eviction via the preemption flag, 3 = killing running blocks).
//! Hand-formatted: the format is a few lines of text and a crate for it would
//! cost more build time than it saves.

use crate::protocol::LatencySummary;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;

/// Upper bounds of the latency histogram buckets, in seconds.
pub const LATENCY_BUCKETS_S: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0,
];
/// Samples kept for percentile summaries (a sliding window).
const WINDOW: usize = 100_000;

#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: Vec<u64>,
    sum_s: f64,
    count: u64,
    window: VecDeque<f64>,
}

impl Histogram {
    pub fn observe_us(&mut self, us: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; LATENCY_BUCKETS_S.len()];
        }
        let s = us / 1e6;
        for (i, b) in LATENCY_BUCKETS_S.iter().enumerate() {
            if s <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum_s += s;
        self.count += 1;
        if self.window.len() == WINDOW {
            self.window.pop_front();
        }
        self.window.push_back(us);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean, p50, p99 and max over the recent window.
    pub fn summary(&self) -> LatencySummary {
        summarize(self.window.iter().copied())
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in LATENCY_BUCKETS_S.iter().enumerate() {
            let c = self.counts.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum_s);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// Mean, p50 (nearest rank), p99 and max of samples in microseconds.
pub fn summarize(samples: impl Iterator<Item = f64>) -> LatencySummary {
    let mut v: Vec<f64> = samples.collect();
    if v.is_empty() {
        return LatencySummary::default();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = |p: f64| v[(((p * v.len() as f64).ceil() as usize).max(1) - 1).min(v.len() - 1)];
    LatencySummary {
        count: v.len() as u64,
        mean_us: v.iter().sum::<f64>() / v.len() as f64,
        p50_us: rank(0.50),
        p99_us: rank(0.99),
        max_us: v[v.len() - 1],
    }
}

/// Everything the daemon counts.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    pub requests: u64,
    pub bad_requests: u64,
    pub tasks_submitted: u64,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub kernels_launched: u64,
    /// Preemptions by level (1..=3).
    pub preemptions: BTreeMap<u8, u64>,
    /// Kernels taken off the device by preemptions.
    pub preempted_kernels: u64,
    pub restores: u64,
    pub corrupted_outputs: u64,
    /// Device actions refused or failed (`EngineEvent::DeviceError`).
    pub device_errors: u64,
    pub rt_latency: Histogram,
    pub be_latency: Histogram,
    pub control_path: Histogram,
    pub rt_normalized: VecDeque<f64>,
}

impl Metrics {
    pub fn observe_rt_normalized(&mut self, x: f64) {
        if self.rt_normalized.len() == WINDOW {
            self.rt_normalized.pop_front();
        }
        self.rt_normalized.push_back(x);
    }
}

/// One stream's queue depths for the queue-depth gauges.
pub struct QueueDepth {
    pub stream: u64,
    pub priority: String,
    pub host: usize,
    pub device: usize,
}

/// The Prometheus lines of a node daemon (issue 16 item 5): per-device
/// memory and work, and the placement decisions (CASE/MGB Alg. 3).
pub fn render_node(
    devices: &[crate::protocol::DeviceStatus],
    p: &crate::protocol::PlacementStats,
) -> String {
    let mut o = String::new();
    let gauge = |o: &mut String,
                 name: &str,
                 help: &str,
                 f: &dyn Fn(&crate::protocol::DeviceStatus) -> u64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for d in devices {
            let _ = writeln!(o, "{name}{{device=\"{}\"}} {}", d.index, f(d));
        }
    };
    gauge(
        &mut o,
        "reef_device_memory_total_bytes",
        "Device memory.",
        &|d| d.memory_total,
    );
    gauge(
        &mut o,
        "reef_device_memory_used_bytes",
        "Device memory reserved by loaded models and placed tasks (declared needs).",
        &|d| d.memory_used,
    );
    gauge(
        &mut o,
        "reef_device_models",
        "Models loaded on the device.",
        &|d| d.models.len() as u64,
    );
    gauge(
        &mut o,
        "reef_device_rt_streams",
        "Real-time streams bound to the device.",
        &|d| d.rt_streams as u64,
    );
    gauge(
        &mut o,
        "reef_device_be_streams",
        "Best-effort streams bound to the device.",
        &|d| d.be_streams as u64,
    );
    gauge(
        &mut o,
        "reef_device_tasks_in_flight",
        "Inferences in flight on the device.",
        &|d| d.tasks as u64,
    );
    gauge(
        &mut o,
        "reef_device_declared_tasks",
        "Tasks placed on the device by task_begin and not ended.",
        &|d| d.declared_tasks as u64,
    );
    let _ = writeln!(
        o,
        "# HELP reef_placement_decisions_total Placement decisions by kind.\n# TYPE reef_placement_decisions_total counter"
    );
    for (k, v) in [
        ("model_placed", p.models_placed),
        ("model_refused", p.models_refused),
        ("stream_bound", p.streams_bound),
        ("task_placed", p.tasks_placed),
        ("task_waited", p.tasks_waited),
        ("task_refused", p.tasks_refused),
    ] {
        let _ = writeln!(o, "reef_placement_decisions_total{{decision=\"{k}\"}} {v}");
    }
    o
}

/// Renders the metrics in the Prometheus text format (version 0.0.4).
/// `padding`: padded launches and BE blocks padded so far, when the
/// policy pads (REEF §5).
pub fn render(
    m: &Metrics,
    uptime_s: f64,
    queues: &[QueueDepth],
    padding: Option<(u64, u64)>,
) -> String {
    let mut o = String::new();
    let counter = |o: &mut String, name: &str, help: &str, v: u64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
    };
    counter(
        &mut o,
        "reef_requests_total",
        "Protocol requests received.",
        m.requests,
    );
    counter(
        &mut o,
        "reef_bad_requests_total",
        "Malformed or oversized requests answered with an error.",
        m.bad_requests,
    );
    counter(
        &mut o,
        "reef_tasks_submitted_total",
        "Inference tasks submitted.",
        m.tasks_submitted,
    );
    counter(
        &mut o,
        "reef_tasks_completed_total",
        "Inference tasks completed.",
        m.tasks_completed,
    );
    counter(
        &mut o,
        "reef_tasks_failed_total",
        "Inference tasks cancelled, rejected or failed at shutdown.",
        m.tasks_failed,
    );
    counter(
        &mut o,
        "reef_kernels_launched_total",
        "Kernels pushed into device queues.",
        m.kernels_launched,
    );
    counter(
        &mut o,
        "reef_preempted_kernels_total",
        "Kernels dropped from host queues, evicted from device queues or killed by preemptions.",
        m.preempted_kernels,
    );
    let (padded, be_blocks) = padding.unwrap_or((0, 0));
    counter(
        &mut o,
        "reef_padded_launches_total",
        "RT kernels launched padded with best-effort blocks (REEF section 5).",
        padded,
    );
    counter(
        &mut o,
        "reef_be_blocks_padded_total",
        "Best-effort blocks run inside padded launches.",
        be_blocks,
    );
    counter(
        &mut o,
        "reef_restores_total",
        "Preempted tasks restored from their restore point.",
        m.restores,
    );
    counter(
        &mut o,
        "reef_corrupted_outputs_total",
        "Finished tasks whose outputs differ from an unpreempted run (value tracking); should stay 0.",
        m.corrupted_outputs,
    );
    counter(
        &mut o,
        "reef_device_errors_total",
        "Scheduler actions the device refused or failed (preempt flag, kill, queue clear, launch, completion query); each is logged with the action.",
        m.device_errors,
    );
    let _ = writeln!(
        o,
        "# HELP reef_preemptions_total Preemptions, by the level used (1 host-queue eviction, 2 lazy eviction, 3 kill running blocks).\n# TYPE reef_preemptions_total counter"
    );
    for level in 1..=3u8 {
        let v = m.preemptions.get(&level).copied().unwrap_or(0);
        let _ = writeln!(o, "reef_preemptions_total{{level=\"{level}\"}} {v}");
    }
    for (name, help, h) in [
        (
            "reef_rt_latency_seconds",
            "End-to-end latency of real-time inferences, from arrival at the socket to completion.",
            &m.rt_latency,
        ),
        (
            "reef_be_latency_seconds",
            "End-to-end latency of best-effort inferences.",
            &m.be_latency,
        ),
        (
            "reef_control_path_seconds",
            "From a request's arrival at the socket to its first kernel entering the device queue.",
            &m.control_path,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        h.render(&mut o, name, "");
    }
    let _ = writeln!(
        o,
        "# HELP reef_queue_depth Kernels buffered per stream, in the host queue and the device queue.\n# TYPE reef_queue_depth gauge"
    );
    for q in queues {
        for (queue, v) in [("host", q.host), ("device", q.device)] {
            let _ = writeln!(
                o,
                "reef_queue_depth{{stream=\"{}\",priority=\"{}\",queue=\"{queue}\"}} {v}",
                q.stream, q.priority
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP reef_uptime_seconds Seconds since the daemon started.\n# TYPE reef_uptime_seconds gauge\nreef_uptime_seconds {uptime_s}"
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_percentiles() {
        let s = summarize((1..=100).map(f64::from));
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_us, 50.0);
        assert_eq!(s.p99_us, 99.0);
        assert_eq!(s.max_us, 100.0);
        assert!((s.mean_us - 50.5).abs() < 1e-9);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let mut m = Metrics::default();
        m.rt_latency.observe_us(30.0); // 30 us
        m.rt_latency.observe_us(3000.0); // 3 ms
        m.preemptions.insert(3, 2);
        let text = render(&m, 1.0, &[], Some((5, 70)));
        assert!(
            text.contains("reef_rt_latency_seconds_bucket{le=\"0.00005\"} 1"),
            "{text}"
        );
        assert!(text.contains("reef_rt_latency_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("reef_rt_latency_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("reef_rt_latency_seconds_count 2"));
        assert!(text.contains("reef_preemptions_total{level=\"3\"} 2"));
        assert!(text.contains("reef_preemptions_total{level=\"1\"} 0"));
        assert!(text.contains("reef_padded_launches_total 5"), "{text}");
        assert!(text.contains("reef_be_blocks_padded_total 70"), "{text}");
    }

    #[test]
    fn node_metrics_have_one_line_per_device_and_decision() {
        let d = |i: usize, used: u64| crate::protocol::DeviceStatus {
            index: i,
            preset: "mi50".into(),
            memory_total: 100,
            memory_used: used,
            models: vec!["vgg".into()],
            rt_streams: 1,
            be_streams: 0,
            tasks: 0,
            declared_tasks: 0,
            policy: "reef".into(),
        };
        let p = crate::protocol::PlacementStats {
            models_refused: 3,
            ..Default::default()
        };
        let text = render_node(&[d(0, 40), d(1, 7)], &p);
        assert!(
            text.contains("reef_device_memory_used_bytes{device=\"0\"} 40"),
            "{text}"
        );
        assert!(
            text.contains("reef_device_memory_used_bytes{device=\"1\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("reef_placement_decisions_total{decision=\"model_refused\"} 3"),
            "{text}"
        );
    }
}
