//! An SVG chart of latency distributions, written by hand.
//!
//! Design: one panel per distribution (TTFT, ITL, end-to-end, and long-prompt TTFT in mixed-load
//! mode), side by side; each panel is the empirical CDF as a step line over a linear millisecond axis
//! from 0 to the largest sample, with dashed markers at p50 and p99. A CDF shows the whole tail, which
//! is what these benchmarks are about, and needs no binning choice. Plotting crates were not used: a
//! few polylines and labels are ~200 lines, and the chart stays a plain, diff-able text file.
//!
//! Invariants: the output is well-formed SVG for any input — empty panels say "no samples", all
//! coordinates are finite, and text is XML-escaped.

use std::fmt::Write as _;

use crate::stats::{percentile, sorted_ms};

const PANEL_W: f64 = 360.0;
const PANEL_H: f64 = 280.0;
const MARGIN_L: f64 = 52.0;
const MARGIN_R: f64 = 16.0;
const MARGIN_T: f64 = 34.0;
const MARGIN_B: f64 = 44.0;
const HEADER_H: f64 = 30.0;
/// More points than pixels only bloat the file; the CDF is thinned to about this many.
const MAX_POINTS: usize = 1000;

/// One distribution to draw: a title and samples in seconds.
pub struct Series<'a> {
    pub title: &'a str,
    pub samples_s: &'a [f64],
}

/// Renders the panels side by side under a one-line `caption`.
pub fn latency_cdf_svg(caption: &str, series: &[Series<'_>]) -> String {
    let width = PANEL_W * series.len().max(1) as f64;
    let height = PANEL_H + HEADER_H;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="8" y="19" font-size="13">{}</text>"#,
        escape(caption)
    );
    for (i, one) in series.iter().enumerate() {
        panel(&mut s, i as f64 * PANEL_W, HEADER_H, one);
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, x0: f64, y0: f64, series: &Series<'_>) {
    let sorted = sorted_ms(series.samples_s);
    let (left, top) = (x0 + MARGIN_L, y0 + MARGIN_T);
    let (w, h) = (PANEL_W - MARGIN_L - MARGIN_R, PANEL_H - MARGIN_T - MARGIN_B);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" font-weight="bold">{} (n={})</text>"#,
        left,
        y0 + 20.0,
        escape(series.title),
        sorted.len()
    );
    let _ = writeln!(
        s,
        r##"<rect x="{left:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#888"/>"##
    );
    let Some(&max) = sorted.last() else {
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#888">no samples</text>"##,
            left + w / 2.0,
            top + h / 2.0
        );
        return;
    };
    let x_max = nice_ceiling(max);
    let px = |ms: f64| left + (ms / x_max).clamp(0.0, 1.0) * w;
    let py = |frac: f64| top + (1.0 - frac.clamp(0.0, 1.0)) * h;
    axes(s, left, top, w, h, x_max);
    // Empirical CDF as a step line: at sample k (sorted), the fraction jumps to (k + 1) / n.
    let n = sorted.len();
    let stride = n.div_ceil(MAX_POINTS).max(1);
    let mut pts = format!("{:.1},{:.1}", px(0.0), py(0.0));
    let mut prev = 0.0;
    for (k, &v) in sorted.iter().enumerate() {
        if k % stride != 0 && k + 1 != n {
            continue;
        }
        let frac = (k + 1) as f64 / n as f64;
        let _ = write!(
            pts,
            " {:.1},{:.1} {:.1},{:.1}",
            px(v),
            py(prev),
            px(v),
            py(frac)
        );
        prev = frac;
    }
    let _ = writeln!(
        s,
        r##"<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>"##
    );
    for (p, colour) in [(50.0, "#2ca02c"), (99.0, "#d62728")] {
        if let Some(v) = percentile(&sorted, p) {
            let x = px(v);
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="{colour}" stroke-dasharray="4 3"/>"#,
                top + h
            );
            let label_y = if p < 90.0 { top + h - 6.0 } else { top + 12.0 };
            // Near the right edge the label goes left of its line so it stays inside the panel.
            let (label_x, anchor) = if x > left + 0.7 * w {
                (x - 3.0, "end")
            } else {
                (x + 3.0, "start")
            };
            let _ = writeln!(
                s,
                r#"<text x="{label_x:.1}" y="{label_y:.1}" text-anchor="{anchor}" fill="{colour}">p{p:.0} {}</text>"#,
                fmt_ms(v)
            );
        }
    }
}

fn axes(s: &mut String, left: f64, top: f64, w: f64, h: f64, x_max: f64) {
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = top + (1.0 - frac) * h;
        let _ = writeln!(
            s,
            r##"<line x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}%</text>"##,
            left + w,
            left - 4.0,
            y + 4.0,
            frac * 100.0
        );
    }
    let step = x_max / 4.0;
    for i in 0..=4 {
        let v = step * i as f64;
        let x = left + w * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            top + h + 14.0,
            fmt_tick(v)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">milliseconds (CDF)</text>"#,
        left + w / 2.0,
        top + h + 32.0
    );
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("model &lt;x&gt; &amp; y"));
        assert_eq!(svg.matches("<polyline").count(), 1);
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
        );
        let line = svg
            .lines()
            .find(|l| l.starts_with("<polyline"))
            .expect("a polyline");
        let points = line.matches(',').count();
        assert!(points < 2 * MAX_POINTS + 10, "{points} points");
        // The last point is at 100% (the plot's top edge).
        let top = format!(",{:.1}\"", HEADER_H + MARGIN_T);
        assert!(line.contains(&top), "{line}");
    }
}
