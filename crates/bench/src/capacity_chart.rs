//! The capacity chart: p90 TTFT and p90 TPOT against offered request rate, one series per run,
//! the latency targets as dashed lines.
//!
//! Design: two panels side by side (TTFT, TPOT), each with a linear rate axis from 0 and a
//! logarithmic latency axis (past capacity, latencies grow by orders of magnitude; a log axis keeps
//! the knee and the targets readable). A series is one capacity run (`--find-capacity`), or one
//! JSON file with `--plot`: its probes sorted by rate, joined by a line, with a filled dot for a
//! passing probe and a hollow one for a failing probe. Each run's targets are drawn in its colour
//! (identical targets overlap). The legend is plain text in the header, in the series' colours.
//!
//! Invariants: well-formed SVG for any input (probes without samples are skipped; an empty chart
//! says so); every coordinate finite and positive on the log axis.

use std::path::Path;

use anyhow::Context as _;
use plotters::{coord::Shift, prelude::*};

use crate::capacity::CapacityReport;

const PANEL_W: u32 = 480;
const PANEL_H: u32 = 340;
const FONT: &str = "sans-serif";
const COLOURS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Reads a capacity JSON written by `--find-capacity --json`.
pub fn read_report(path: &Path) -> anyhow::Result<CapacityReport> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--plot {}: cannot read", path.display()))?;
    let r: CapacityReport = serde_json::from_str(&text).with_context(|| {
        format!(
            "--plot {}: not a capacity JSON from --find-capacity --json",
            path.display()
        )
    })?;
    anyhow::ensure!(
        r.kind == "capacity",
        "--plot {}: kind is {:?}, not \"capacity\"",
        path.display(),
        r.kind
    );
    Ok(r)
}

/// A series' name: its label, else its model and URL.
fn name(r: &CapacityReport) -> String {
    r.label
        .clone()
        .unwrap_or_else(|| format!("{} @ {}", r.model, r.url))
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Which latency a panel shows.
#[derive(Clone, Copy)]
enum Metric {
    Ttft,
    Tpot,
}

impl Metric {
    fn title(self) -> &'static str {
        match self {
            Self::Ttft => "p90 TTFT (ms)",
            Self::Tpot => "p90 TPOT (ms)",
        }
    }

    /// (rate, p90 ms, passed) of a run's probes, by rate.
    fn points(self, r: &CapacityReport) -> Vec<(f64, f64, bool)> {
        let mut v: Vec<(f64, f64, bool)> = r
            .probes
            .iter()
            .filter_map(|p| {
                let d = match self {
                    Self::Ttft => &p.ttft_ms,
                    Self::Tpot => &p.tpot_ms,
                };
                d.p90
                    .filter(|x| x.is_finite() && *x > 0.0 && p.rate.is_finite())
                    .map(|y| (p.rate, y, p.passed))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }

    fn target(self, r: &CapacityReport) -> Option<f64> {
        let t = &r.capacity.targets;
        match self {
            Self::Ttft => t.ttft_ms,
            Self::Tpot => t.tpot_ms,
        }
        .filter(|x| x.is_finite() && *x > 0.0)
    }
}

/// The chart of `runs`, one series each.
pub fn capacity_svg(runs: &[CapacityReport]) -> anyhow::Result<String> {
    let header_h = 30 + 18 * runs.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (2 * PANEL_W, PANEL_H + header_h))
            .into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let (header, body) = root.split_vertically(header_h);
        let style = (FONT, 16).into_text_style(&header);
        header
            .draw_text(
                "Latency against offered load (dashed: targets; hollow: probe failed)",
                &style,
                (8, 8),
            )
            .map_err(draw_error)?;
        for (i, r) in runs.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let capacity = r
                .answer
                .capacity_rps
                .map_or("capacity below the lowest rate probed".to_string(), |c| {
                    format!("capacity {c:.3} req/s")
                });
            let line = format!(
                "■ {} — {} (targets {})",
                name(r),
                capacity,
                r.capacity.targets
            );
            let style = (FONT, 14).into_font().color(&colour);
            header
                .draw_text(&line, &style, (8, 30 + 18 * i as i32))
                .map_err(draw_error)?;
        }
        let panels = body.split_evenly((1, 2));
        for (area, metric) in panels.iter().zip([Metric::Ttft, Metric::Tpot]) {
            panel(area, metric, runs).map_err(draw_error)?;
        }
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// Draws the runs read from `paths` into one chart.
pub fn plot_files(paths: &[std::path::PathBuf]) -> anyhow::Result<String> {
    let runs: Vec<CapacityReport> = paths
        .iter()
        .map(|p| read_report(p))
        .collect::<Result<_, _>>()?;
    capacity_svg(&runs)
}

fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e}")
}

fn panel(
    area: &Area<'_>,
    metric: Metric,
    runs: &[CapacityReport],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let series: Vec<Vec<(f64, f64, bool)>> = runs.iter().map(|r| metric.points(r)).collect();
    let targets: Vec<f64> = runs.iter().filter_map(|r| metric.target(r)).collect();
    let ys = series
        .iter()
        .flatten()
        .map(|p| p.1)
        .chain(targets.iter().copied());
    let (y_min, y_max) = ys.fold((f64::INFINITY, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (y_min, y_max) = if y_max > 0.0 {
        (y_min / 1.5, y_max * 1.5)
    } else {
        (1.0, 1000.0)
    };
    let x_max = series
        .iter()
        .flatten()
        .map(|p| p.0)
        .fold(0f64, f64::max)
        .max(1e-3)
        * 1.08;
    let mut chart = ChartBuilder::on(area)
        .caption(
            metric.title(),
            (FONT, 15).into_font().style(FontStyle::Bold),
        )
        .margin(8)
        .margin_right(18)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())?;
    let x_fmt = |v: &f64| format!("{v:.2}");
    let y_fmt = |v: &f64| format!("{v:.0}");
    chart
        .configure_mesh()
        .x_labels(6)
        .y_labels(8)
        .max_light_lines(0)
        .bold_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_desc("offered rate (requests/s)")
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 13))
        .draw()?;
    if series.iter().all(Vec::is_empty) {
        let style = (FONT, 14).into_font().color(&RGBColor(0x88, 0x88, 0x88));
        chart.draw_series(std::iter::once(Text::new(
            "no probes",
            (x_max / 3.0, (y_min * y_max).sqrt()),
            style,
        )))?;
    }
    for (i, (r, pts)) in runs.iter().zip(&series).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        if let Some(t) = metric.target(r) {
            chart.draw_series(DashedLineSeries::new(
                [(0.0, t), (x_max, t)],
                6,
                4,
                colour.stroke_width(1),
            ))?;
        }
        chart.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.0, p.1)),
            colour.stroke_width(2),
        ))?;
        chart.draw_series(pts.iter().map(|&(x, y, passed)| {
            let style = if passed {
                colour.filled()
            } else {
                colour.stroke_width(2)
            };
            Circle::new((x, y), 4, style)
        }))?;
    }
    Ok(())
}
