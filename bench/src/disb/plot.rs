//! A plot like REEF Fig. 15: (a) normalised end-to-end latency of real-time
//! requests and (b) normalised overall throughput, per DISB workload, one bar
//! per policy. Written as SVG with plotters.

use super::metrics::PolicyResult;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(120, 120, 120),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(0, 114, 178),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
];

/// Writes the two-panel bar chart to `path` (SVG).
pub fn write_fig15(path: &Path, results: &[PolicyResult]) -> anyhow::Result<()> {
    let mut workloads: Vec<&str> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for r in results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let get = |w: &str, p: &str| results.iter().find(|r| r.workload == w && r.policy == p);
    let root = SVGBackend::new(path, (1100, 420)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let (left, right) = root.split_horizontally(550);
    type Metric = fn(&PolicyResult) -> Option<f64>;
    let panels: [(&str, Metric, _); 2] = [
        (
            "(a) RT latency (norm. to stand-alone)",
            (|r| r.rt_latency_norm_mean) as Metric,
            left,
        ),
        (
            "(b) overall throughput (normalized)",
            (|r| Some(r.throughput_norm_overall)) as Metric,
            right,
        ),
    ];
    for (title, metric, area) in panels {
        let ymax = results
            .iter()
            .filter_map(metric)
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.15;
        let mut chart = ChartBuilder::on(&area)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(0f64..workloads.len() as f64, 0f64..ymax)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let names = workloads.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(workloads.len() * 2 + 1)
            .x_label_formatter(&move |x| {
                let i = (x - 0.5).round();
                if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                    format!("DISB {}", names[i as usize])
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let bw = 0.8 / policies.len() as f64;
        for (pi, p) in policies.iter().enumerate() {
            let color = COLORS[pi % COLORS.len()];
            let bars: Vec<Rectangle<(f64, f64)>> = workloads
                .iter()
                .enumerate()
                .filter_map(|(wi, w)| {
                    let v = get(w, p).and_then(metric)?;
                    let x0 = wi as f64 + 0.1 + pi as f64 * bw;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + bw * 0.9, v)],
                        color.filled(),
                    ))
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
                .label(*p)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("{}: cannot write plot: {e}", path.display()))?;
    Ok(())
}
