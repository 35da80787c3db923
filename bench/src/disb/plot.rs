//! A plot like REEF Fig. 15: (a) normalised end-to-end latency of real-time
//! requests and (b) normalised overall throughput, per DISB workload, one bar
//! per policy, each policy in its own colour (fixed by its name), and the
//! paper's figure beside a bar where the paper's text gives one
//! ([`crate::fidelity::disb_paper_figures`]: Fig. 15 on the MI50, Fig. 16 on
//! the GV100). Written as SVG with plotters; the legend sits below the
//! panels, off the data.

use super::metrics::PolicyResult;
use crate::fidelity::{disb_paper_figures, DisbMetric, Paper};
use plotters::prelude::*;
use std::path::Path;

/// The colour of every policy `reef-bench disb` knows, one each (the
/// Okabe-Ito palette, then distinct extras). A name not listed (a new
/// policy, a level suffix such as `reef-nodkp@L1`) takes [`EXTRA`] by a
/// hash of its name: stable from run to run.
const NAMED: [(&str, RGBColor); 13] = [
    ("rt-only", RGBColor(120, 120, 120)),
    ("seq", RGBColor(230, 159, 0)),
    ("streams", RGBColor(86, 180, 233)),
    ("wait", RGBColor(0, 158, 115)),
    ("reef-nodkp", RGBColor(213, 94, 0)),
    ("reef", RGBColor(0, 114, 178)),
    ("reef-dkp-mv", RGBColor(204, 121, 167)),
    ("fikit", RGBColor(240, 228, 66)),
    ("aker", RGBColor(106, 61, 154)),
    ("baymax", RGBColor(140, 86, 75)),
    ("tacker", RGBColor(102, 166, 30)),
    ("fikit-nofill", RGBColor(251, 154, 153)),
    ("fikit-noearly", RGBColor(23, 190, 207)),
];

const EXTRA: [RGBColor; 6] = [
    RGBColor(31, 31, 31),
    RGBColor(188, 189, 34),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// The colour of policy `name`.
pub fn policy_color(name: &str) -> RGBColor {
    if let Some((_, c)) = NAMED.iter().find(|(n, _)| *n == name) {
        return *c;
    }
    // FNV-1a: the same name, the same colour.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    EXTRA[(h % EXTRA.len() as u64) as usize]
}

fn err(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("{}: {e}", path.display())
}

/// Legend entries per row below the panels.
const LEGEND_PER_ROW: usize = 10;

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
    // The paper's figures for this device (one device per run).
    let paper = results
        .first()
        .map(|r| disb_paper_figures(&r.device))
        .unwrap_or_default();
    let paper_of = |w: &str, p: &str, m: DisbMetric| {
        paper
            .iter()
            .find(|(pp, pw, pm, _)| *pp == p && *pw == w && *pm == m)
            .map(|x| x.3)
    };
    let entries = policies.len() + usize::from(!paper.is_empty());
    let legend_rows = entries.div_ceil(LEGEND_PER_ROW).max(1);
    let legend_h = 24 * legend_rows as u32 + 12;
    let root = SVGBackend::new(path, (1100, 420 + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    let (top, bottom) = root.split_vertically(420);
    let (left, right) = top.split_horizontally(550);
    type Metric = fn(&PolicyResult) -> Option<f64>;
    let panels: [(&str, Metric, DisbMetric, _); 2] = [
        (
            "(a) RT latency (norm. to stand-alone)",
            (|r| r.rt_latency_norm_mean) as Metric,
            DisbMetric::RtLatency,
            left,
        ),
        (
            "(b) overall throughput (normalized)",
            (|r| Some(r.throughput_norm_overall)) as Metric,
            DisbMetric::Throughput,
            right,
        ),
    ];
    for (title, metric, which, area) in panels {
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
            .map_err(|e| err(path, e))?;
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
            .map_err(|e| err(path, e))?;
        let bw = 0.8 / policies.len() as f64;
        for (pi, p) in policies.iter().enumerate() {
            let color = policy_color(p);
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
            chart.draw_series(bars).map_err(|e| err(path, e))?;
        }
        // The paper's figures: a black bar-wide tick at a value, a vertical
        // line with caps over a range; above the axis, a tick at the top
        // with the figure written beside it.
        let mut marks: Vec<PathElement<(f64, f64)>> = Vec::new();
        let mut labels: Vec<Text<(f64, f64), String>> = Vec::new();
        for (wi, w) in workloads.iter().enumerate() {
            for (pi, p) in policies.iter().enumerate() {
                let Some(fig) = paper_of(w, p, which) else {
                    continue;
                };
                let x0 = wi as f64 + 0.1 + pi as f64 * bw;
                let (x1, xm) = (x0 + bw * 0.9, x0 + bw * 0.45);
                let top = ymax * 0.97;
                let tick = |v: f64| PathElement::new(vec![(x0, v), (x1, v)], BLACK.stroke_width(2));
                match fig {
                    Paper::Is(v) | Paper::AtMost(v) => {
                        marks.push(tick(v.min(top)));
                        if v > top {
                            labels.push(Text::new(
                                format!("{v}"),
                                (x1, top),
                                ("sans-serif", 11).into_font(),
                            ));
                        }
                    }
                    Paper::Within(lo, hi) => {
                        let (lo, hi) = (lo.min(top), hi.min(top));
                        marks.push(PathElement::new(
                            vec![(xm, lo), (xm, hi)],
                            BLACK.stroke_width(2),
                        ));
                        marks.push(tick(lo));
                        marks.push(tick(hi));
                    }
                }
            }
        }
        chart.draw_series(marks).map_err(|e| err(path, e))?;
        chart.draw_series(labels).map_err(|e| err(path, e))?;
    }
    // The legend, below the panels.
    let font = ("sans-serif", 14).into_font();
    let col = 1060 / LEGEND_PER_ROW as i32;
    for (i, p) in policies.iter().enumerate() {
        let (x, y) = (
            15 + (i % LEGEND_PER_ROW) as i32 * col,
            12 + (i / LEGEND_PER_ROW) as i32 * 24,
        );
        bottom
            .draw(&Rectangle::new(
                [(x, y), (x + 14, y + 14)],
                policy_color(p).filled(),
            ))
            .map_err(|e| err(path, e))?;
        bottom
            .draw(&Text::new(p.to_string(), (x + 19, y), font.clone()))
            .map_err(|e| err(path, e))?;
    }
    if !paper.is_empty() {
        let i = policies.len();
        let (x, y) = (
            15 + (i % LEGEND_PER_ROW) as i32 * col,
            12 + (i / LEGEND_PER_ROW) as i32 * 24,
        );
        bottom
            .draw(&PathElement::new(
                vec![(x, y + 7), (x + 14, y + 7)],
                BLACK.stroke_width(2),
            ))
            .map_err(|e| err(path, e))?;
        bottom
            .draw(&Text::new(
                "REEF paper".to_string(),
                (x + 19, y),
                font.clone(),
            ))
            .map_err(|e| err(path, e))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("{}: cannot write plot: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every policy of `reef-bench disb`'s default list has a colour of
    /// its own, and a policy's colour does not depend on the others.
    #[test]
    fn every_default_policy_has_its_own_colour() {
        let args = crate::disb::DisbArgs::defaults("A");
        let names: Vec<&str> = args.policy.split(',').collect();
        assert!(names.len() >= 9, "{names:?}");
        let colours: Vec<RGBColor> = names.iter().map(|n| policy_color(n)).collect();
        for i in 0..names.len() {
            for j in 0..i {
                assert_ne!(
                    colours[i], colours[j],
                    "{} and {} share a colour",
                    names[i], names[j]
                );
            }
        }
        // Every listed name, too (the ablations and the Aker managers).
        for (i, (a, ca)) in NAMED.iter().enumerate() {
            for (b, cb) in &NAMED[..i] {
                assert_ne!(ca, cb, "{a} and {b}");
            }
        }
        // Stable: by name, not by position.
        assert_eq!(policy_color("aker"), policy_color("aker"));
        assert_eq!(policy_color("x@L1"), policy_color("x@L1"));
    }

    /// The paper's figures the plot marks are the comparison's, on the
    /// paper's two testbeds only.
    #[test]
    fn paper_marks_come_from_the_fidelity_quotes() {
        let mi50 = disb_paper_figures("mi50");
        assert!(mi50.contains(&("reef", "A", DisbMetric::Throughput, Paper::Is(1.12))));
        assert!(mi50.contains(&("seq", "A", DisbMetric::RtLatency, Paper::Is(2.87))));
        assert!(!disb_paper_figures("gv100").is_empty());
        assert!(disb_paper_figures("h100").is_empty());
    }
}
