//! An SVG chart of latency distributions, drawn with `plotters`' SVG backend.
//!
//! Design: one panel per distribution (TTFT, ITL, end-to-end, and long-prompt TTFT in mixed-load
//! mode), side by side; each panel is the empirical CDF as a step line over a linear millisecond axis
//! from 0 to a round number at or above the largest sample, with dashed markers at p50 and p99. A
//! CDF shows the whole tail, which is what these benchmarks are about, and needs no binning choice.
//! `plotters` is built without its font features: text is written as SVG `<text>` elements for the
//! viewer to render, so neither the build nor the run needs system fonts, and the chart stays a
//! plain, diff-able text file.
//!
//! Invariants: the output is well-formed SVG for any input — empty panels say "no samples", every
//! coordinate is finite (non-finite samples are dropped), and text is XML-escaped by the backend.

use plotters::{
    coord::{types::RangedCoordf64, Shift},
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use crate::stats::{percentile, sorted_ms};

const PANEL_W: u32 = 360;
const PANEL_H: u32 = 280;
const HEADER_H: u32 = 30;
/// More points than pixels only bloat the file; the CDF is thinned to about this many.
const MAX_POINTS: usize = 1000;
/// The CDF line's colour; tests find the curve by it.
const CDF_COLOUR: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const P50_COLOUR: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const P99_COLOUR: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const FONT: &str = "sans-serif";

/// One distribution to draw: a title and samples in seconds.
pub struct Series<'a> {
    pub title: &'a str,
    pub samples_s: &'a [f64],
}

/// Renders the panels side by side under a one-line `caption`.
pub fn latency_cdf_svg(caption: &str, series: &[Series<'_>]) -> anyhow::Result<String> {
    let size = (PANEL_W * series.len().max(1) as u32, PANEL_H + HEADER_H);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let (header, body) = root.split_vertically(HEADER_H);
        header
            .draw_text(caption, &(FONT, 16).into_text_style(&header), (8, 8))
            .map_err(draw_error)?;
        for (area, one) in body
            .split_evenly((1, series.len().max(1)))
            .iter()
            .zip(series)
        {
            panel(area, one).map_err(draw_error)?;
        }
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// Drawing into a string fails only on a formatting error; keep its text.
fn draw_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the chart: {e}")
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult<T> = Result<T, DrawingAreaErrorKind<std::io::Error>>;

fn panel(area: &Area<'_>, series: &Series<'_>) -> DrawResult<()> {
    let sorted = sorted_ms(series.samples_s);
    let x_max = sorted.last().map_or(1.0, |&max| nice_ceiling(max));
    let title = format!("{} (n={})", series.title, sorted.len());
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 15).into_font().style(FontStyle::Bold))
        .margin(8)
        .margin_right(16)
        .x_label_area_size(36)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..x_max, 0f64..1f64)?;
    let x_tick = |v: &f64| fmt_tick(*v);
    let y_tick = |v: &f64| format!("{:.0}%", v * 100.0);
    chart
        .configure_mesh()
        // An empty panel's axis has no scale to show.
        .x_labels(if sorted.is_empty() { 0 } else { 5 })
        .y_labels(6)
        .max_light_lines(0)
        .bold_line_style(RGBColor(0xee, 0xee, 0xee))
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .x_desc("milliseconds (CDF)")
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 13))
        .draw()?;
    if sorted.is_empty() {
        let centre = (x_max / 2.0, 0.5);
        let style = (FONT, 14)
            .into_font()
            .color(&RGBColor(0x88, 0x88, 0x88))
            .pos(Pos::new(HPos::Center, VPos::Center));
        chart.draw_series(std::iter::once(Text::new("no samples", centre, style)))?;
        return Ok(());
    }
    chart.draw_series(LineSeries::new(
        cdf_steps(&sorted),
        CDF_COLOUR.stroke_width(2),
    ))?;
    for (p, colour) in [(50.0, P50_COLOUR), (99.0, P99_COLOUR)] {
        if let Some(v) = percentile(&sorted, p) {
            marker(&mut chart, p, v, x_max, colour)?;
        }
    }
    Ok(())
}

/// The empirical CDF as a step line: at sample k (ascending), the fraction jumps to (k + 1) / n.
/// Thinned to about [`MAX_POINTS`] steps; the last sample is always kept, so the line reaches 100%.
fn cdf_steps(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let stride = n.div_ceil(MAX_POINTS).max(1);
    let mut pts = vec![(0.0, 0.0)];
    let mut prev = 0.0;
    for (k, &v) in sorted.iter().enumerate() {
        if k % stride != 0 && k + 1 != n {
            continue;
        }
        let frac = (k + 1) as f64 / n as f64;
        pts.extend([(v, prev), (v, frac)]);
        prev = frac;
    }
    pts
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A dashed vertical line at the `p`-th percentile `v`, labelled with its value.
fn marker(
    chart: &mut Chart<'_, '_>,
    p: f64,
    v: f64,
    x_max: f64,
    colour: RGBColor,
) -> DrawResult<()> {
    chart.draw_series(DashedLineSeries::new(
        [(v, 0.0), (v, 1.0)],
        4,
        3,
        colour.stroke_width(1),
    ))?;
    // Labels sit low, where a CDF right of its median leaves the panel empty (p99's a row above
    // p50's, so they cannot collide); near the right edge a label goes left of its line, still
    // below the curve, so it stays inside the panel.
    let y = if p < 90.0 { 0.04 } else { 0.14 };
    let (dx, h_pos) = if v > 0.7 * x_max {
        (-3, HPos::Right)
    } else {
        (3, HPos::Left)
    };
    let style = (FONT, 13)
        .into_font()
        .color(&colour)
        .pos(Pos::new(h_pos, VPos::Center));
    let label =
        EmptyElement::at((v, y)) + Text::new(format!("p{p:.0} {}", fmt_ms(v)), (dx, 0), style);
    chart.draw_series(std::iter::once(label))?;
    Ok(())
}

/// The smallest of 1, 2, 4, 5, 8 or 10 times a power of ten that is >= `v` (so quarter ticks are
/// round numbers).
fn nice_ceiling(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let base = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 4.0, 5.0, 8.0, 10.0]
        .iter()
        .map(|m| m * base)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * base)
}

/// Axis ticks are round numbers: no decimals unless they are needed.
fn fmt_tick(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_drop_needless_decimals() {
        assert_eq!(fmt_tick(50.0), "50");
        assert_eq!(fmt_tick(1.25), "1.25");
        assert_eq!(fmt_tick(0.5), "0.5");
    }

    #[test]
    fn nice_ceiling_rounds_up_to_a_round_number() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.3), 8.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(123.0), 200.0);
        assert_eq!(nice_ceiling(4100.0), 5000.0);
    }

    #[test]
    fn chart_has_one_panel_per_series_and_escapes_text() {
        let a = [0.010, 0.020, 0.030];
        let svg = latency_cdf_svg(
            "model <x> & y",
            &[
                Series {
                    title: "TTFT",
                    samples_s: &a,
                },
                Series {
                    title: "ITL",
                    samples_s: &[],
                },
            ],
        )
        .expect("svg");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("model &lt;x&gt; &amp; y"));
        // One CDF curve: the TTFT panel's; the empty panel draws none.
        assert_eq!(svg.matches(&cdf_stroke()).count(), 1);
        assert!(
            svg.contains("TTFT (n=3)") && svg.contains("ITL (n=0)") && svg.contains("no samples")
        );
        assert!(svg.contains("p50 20.0") && svg.contains("p99 29.8"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn large_samples_are_thinned_but_reach_the_top() {
        let v: Vec<f64> = (0..50_000).map(|i| i as f64 * 1e-5).collect();
        let svg = latency_cdf_svg(
            "x",
            &[Series {
                title: "ITL",
                samples_s: &v,
            }],
        )
        .expect("svg");
        let line = svg
            .lines()
            .find(|l| l.starts_with("<polyline") && l.contains(&cdf_stroke()))
            .expect("a polyline");
        let points = line.matches(',').count();
        assert!(points < 2 * MAX_POINTS + 10, "{points} points");
        // The last point is at 100% (the plot's top edge): the height of the "100%" tick label.
        let lines: Vec<&str> = svg.lines().collect();
        let label = lines
            .windows(2)
            .find(|w| w[1] == "100%")
            .map(|w| w[0])
            .expect("a 100% tick label");
        let top_y = attr(label, "y").expect("label y");
        let last = attr(line, "points")
            .and_then(|p| p.split_whitespace().last())
            .expect("points");
        assert_eq!(last.split(',').nth(1), Some(top_y), "{line}");
        // Exactly, before pixel rounding: the thinned steps end on the largest sample at 100%.
        let steps = cdf_steps(&sorted_ms(&v));
        assert!(steps.len() <= 2 * MAX_POINTS + 3, "{} steps", steps.len());
        assert_eq!(steps.last(), Some(&(49_999.0 * 1e-5 * 1000.0, 1.0)));
    }

    fn cdf_stroke() -> String {
        let RGBColor(r, g, b) = CDF_COLOUR;
        format!("stroke=\"#{r:02X}{g:02X}{b:02X}\"")
    }

    /// The value of attribute `name` in one SVG element's line.
    fn attr<'a>(element: &'a str, name: &str) -> Option<&'a str> {
        let start = element.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = element[start..].find('"')?;
        Some(&element[start..start + len])
    }
}
