//! A latency-versus-throughput plot written as SVG by hand (no font or
//! system dependencies): achieved throughput on a linear x axis, latency
//! percentiles on a log10 y axis, one polyline with point markers per
//! series, like the curves of the memcached baseline studies.

use std::fmt::Write;

pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    /// (throughput req/s, latency µs)
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

fn nice_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag)
}

pub fn plot(title: &str, series: &[Series<'_>]) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter().copied()).filter(|p| p.0 > 0.0 && p.1 > 0.0);
    let x_max = all().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let lo = all().map(|p| p.1).fold(f64::INFINITY, f64::min).min(1e9);
    let hi = all().map(|p| p.1).fold(1.0, f64::max);
    let (y_lo, y_hi) = (lo.max(0.1).log10().floor(), hi.log10().ceil().max(lo.max(0.1).log10().floor() + 1.0));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |x: f64| LEFT + x / x_max * pw;
    let sy = |y: f64| TOP + ph - (y.log10() - y_lo) / (y_hi - y_lo) * ph;
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#, LEFT + pw / 2.0, escape(title));
    let step = nice_step(x_max);
    let mut x = 0.0;
    while x <= x_max {
        let px = sx(x);
        let _ = writeln!(s, r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/>"##, TOP + ph);
        let _ = writeln!(s, r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}k</text>"#, TOP + ph + 18.0, x / 1000.0);
        x += step;
    }
    for decade in y_lo as i32..=y_hi as i32 {
        let py = sy(10f64.powi(decade));
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/>"##, LEFT + pw);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, LEFT - 6.0, py + 4.0, 10f64.powi(decade));
    }
    let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">throughput (requests/s)</text>"#, LEFT + pw / 2.0, H - 15.0);
    let _ = writeln!(
        s,
        r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">latency (µs, log scale)</text>"#,
        TOP + ph / 2.0
    );
    for (i, series) in series.iter().enumerate() {
        let pts: Vec<String> = series.points.iter().filter(|p| p.0 > 0.0 && p.1 > 0.0).map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
        let _ = writeln!(s, r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#, series.color, pts.join(" "));
        for p in &pts {
            let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(s, r#"<circle cx="{cx}" cy="{cy}" r="3" fill="{}"/>"#, series.color);
        }
        let ly = TOP + 20.0 + i as f64 * 20.0;
        let lx = LEFT + pw + 15.0;
        let _ = writeln!(s, r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"/>"#, lx + 25.0, series.color);
        let _ = writeln!(s, r#"<text x="{}" y="{}">{}</text>"#, lx + 32.0, ly + 4.0, escape(series.name));
    }
    s.push_str("</svg>\n");
    s
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_every_point_and_is_well_formed() {
        let s = plot("a <b>", &[Series { name: "p99", color: "red", points: vec![(1000.0, 50.0), (5000.0, 80.0), (9000.0, 4000.0)] }]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<circle").count(), 3);
        assert!(s.contains("a &lt;b&gt;"));
        assert_eq!(nice_step(10_000.0), 2000.0);
    }
}
