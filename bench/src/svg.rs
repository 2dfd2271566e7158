//! SVG charts, drawn by hand (no dependency): connections per second over
//! time, latency percentiles, comparison bars.

use std::fmt::Write as _;

use crate::run::{TestKind, TestResult};

const W: f64 = 720.0;
const H: f64 = 360.0;
const L: f64 = 70.0;
const R: f64 = 190.0;
const T: f64 = 40.0;
const B: f64 = 50.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        esc(title)
    )
}

/// A round number ≥ v for axis tops.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn axes(s: &mut String, ymax: f64, ylabel: &str, xlabel: &str) {
    let (x0, y0, x1, y1) = (L, H - B, W - R, T);
    let _ = writeln!(
        s,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"black\"/><line x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\" stroke=\"black\"/>"
    );
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        let y = y0 - (y0 - y1) * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            "<line x1=\"{x0}\" y1=\"{y}\" x2=\"{x1}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            x0 - 5.0,
            y + 4.0,
            crate::report::fmt_num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text><text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">{}</text>",
        (x0 + x1) / 2.0,
        H - 12.0,
        esc(xlabel),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(ylabel)
    );
}

fn legend(s: &mut String, i: usize, label: &str) {
    let y = T + 10.0 + 18.0 * i as f64;
    let x = W - R + 10.0;
    let _ = writeln!(
        s,
        "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
        y - 10.0,
        COLORS[i % COLORS.len()],
        x + 16.0,
        y,
        esc(label)
    );
}

/// Line chart of one metric per second, one line per labelled series.
#[must_use]
pub fn time_series(title: &str, ylabel: &str, lines: &[(String, Vec<(u64, f64)>)]) -> String {
    let mut s = header(title);
    let ymax = nice_max(
        lines
            .iter()
            .flat_map(|l| l.1.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let xmax = lines
        .iter()
        .flat_map(|l| l.1.iter().map(|p| p.0))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    axes(&mut s, ymax, ylabel, "seconds");
    for (i, (label, pts)) in lines.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|&(t, v)| {
                format!(
                    "{:.1},{:.1}",
                    L + (W - R - L) * t as f64 / xmax,
                    (H - B) - (H - B - T) * v / ymax
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>",
            COLORS[i % COLORS.len()],
            path.join(" ")
        );
        legend(&mut s, i, label);
    }
    s.push_str("</svg>\n");
    s
}

/// Grouped bars: groups along x, one bar per series within a group.
#[must_use]
pub fn bars(
    title: &str,
    ylabel: &str,
    groups: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    let mut s = header(title);
    let ymax = nice_max(
        series
            .iter()
            .flat_map(|x| x.1.iter().flatten().copied())
            .fold(0.0, f64::max),
    );
    axes(&mut s, ymax, ylabel, "");
    let gw = (W - R - L) / groups.len().max(1) as f64;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let gx = L + gw * g as f64 + gw * 0.1;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">{}</text>",
            gx + gw * 0.4,
            H - B + 15.0,
            esc(name)
        );
        for (i, (_, vals)) in series.iter().enumerate() {
            if let Some(Some(v)) = vals.get(g) {
                let h = (H - B - T) * v / ymax;
                let _ = writeln!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                    gx + bw * i as f64,
                    H - B - h,
                    bw * 0.95,
                    h,
                    COLORS[i % COLORS.len()],
                    crate::report::fmt_num(*v)
                );
            }
        }
    }
    for (i, (label, _)) in series.iter().enumerate() {
        legend(&mut s, i, label);
    }
    s.push_str("</svg>\n");
    s
}

fn label(r: &TestResult) -> String {
    match r.key {
        Some(k) => format!("{} {} {}", r.target, r.test.name(), k.name()),
        None => format!("{} {}", r.target, r.test.name()),
    }
}

fn group_of(r: &TestResult) -> String {
    r.key
        .map_or_else(|| r.test.name().to_string(), |k| k.name().to_string())
}

/// Charts for a set of results, as (file name, SVG text).
#[must_use]
/// The run a chart shows for `r`, and its label: the best accepted run,
/// else the first, marked `(rejected)` (a chart of a rejected run looked
/// like an accepted one).
fn shown_run(r: &TestResult) -> Option<(&crate::run::RunResult, String)> {
    match r.best_run() {
        Some(run) => Some((run, label(r))),
        None => Some((r.runs.first()?, format!("{} (rejected)", label(r)))),
    }
}

pub fn charts(results: &[TestResult]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    // CPS over time (best run of each connection-rate test, all phases).
    let lines: Vec<(String, Vec<(u64, f64)>)> = results
        .iter()
        .filter(|r| matches!(r.test, TestKind::Cps | TestKind::Tps | TestKind::L4cps))
        .filter_map(|r| {
            let (run, label) = shown_run(r)?;
            Some((
                label,
                run.series
                    .iter()
                    .map(|p| (p.t, p.conns_per_s as f64))
                    .collect(),
            ))
        })
        .collect();
    if !lines.is_empty() {
        out.push((
            "cps-over-time.svg".into(),
            time_series(
                "Connections per second (best run, all phases)",
                "conn/s",
                &lines,
            ),
        ));
    }
    // Latency percentiles (handshake and time to first byte).
    let lat: Vec<&TestResult> = results
        .iter()
        .filter(|r| r.test == TestKind::Latency)
        .collect();
    if !lat.is_empty() {
        let groups: Vec<String> = [
            "hs p50",
            "hs p99",
            "hs p99.9",
            "ttfb p50",
            "ttfb p99",
            "ttfb p99.9",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let series: Vec<(String, Vec<Option<f64>>)> = lat
            .iter()
            .filter_map(|r| {
                let (run, label) = shown_run(r)?;
                let l = run.latency;
                let ms = |v: u64| Some(v as f64 / 1000.0);
                Some((
                    label,
                    vec![
                        ms(l.handshake.p50),
                        ms(l.handshake.p99),
                        ms(l.handshake.p999),
                        ms(l.ttfb.p50),
                        ms(l.ttfb.p99),
                        ms(l.ttfb.p999),
                    ],
                ))
            })
            .collect();
        out.push((
            "latency-percentiles.svg".into(),
            bars(
                "Latency at a fixed offered rate (ms from scheduled start)",
                "ms",
                &groups,
                &series,
            ),
        ));
    }
    // Comparison bars: one chart per test, targets side by side.
    let mut kinds: Vec<TestKind> = results.iter().map(|r| r.test).collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        let rs: Vec<&TestResult> = results.iter().filter(|r| r.test == kind).collect();
        let mut groups: Vec<String> = Vec::new();
        let mut targets: Vec<String> = Vec::new();
        for r in &rs {
            let g = group_of(r);
            if !groups.contains(&g) {
                groups.push(g);
            }
            if !targets.contains(&r.target) {
                targets.push(r.target.clone());
            }
        }
        let series: Vec<(String, Vec<Option<f64>>)> = targets
            .iter()
            .map(|t| {
                let vals = groups
                    .iter()
                    .map(|g| {
                        rs.iter()
                            .find(|r| r.target == *t && group_of(r) == *g)
                            .and_then(|r| r.best_value)
                    })
                    .collect();
                (t.clone(), vals)
            })
            .collect();
        out.push((
            format!("compare-{}.svg", kind.name()),
            bars(
                &format!("{}: best of accepted runs", kind.name()),
                kind.unit(),
                &groups,
                &series,
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test whose runs were all rejected is charted marked so; one with
    /// an accepted run shows that run, unmarked.
    #[test]
    fn a_rejected_run_is_charted_marked() {
        use crate::run::tests::fake_run;
        let result = |runs: Vec<crate::run::RunResult>, best| TestResult {
            test: TestKind::Cps,
            target: "dpd".into(),
            spec: String::new(),
            key: None,
            group: crate::tls::Group::X25519,
            runs,
            best,
            best_value: None,
            median_value: None,
            unit: "conn/s",
            skipped: None,
        };
        let rejected = result(vec![fake_run(1.0, true)], None);
        let cps = &charts(&[rejected])[0].1;
        assert!(cps.contains("(rejected)"), "{cps}");
        let accepted = result(vec![fake_run(1.0, true), fake_run(2.0, false)], Some(1));
        let cps = &charts(&[accepted])[0].1;
        assert!(!cps.contains("(rejected)"), "{cps}");
    }

    #[test]
    fn nice_axis() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(1439.0), 2000.0);
        assert_eq!(nice_max(230.0), 250.0);
    }

    #[test]
    fn svg_is_well_formed_enough() {
        let s = time_series("t <x>", "y", &[("a".into(), vec![(1, 1.0), (2, 3.0)])]);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("t &lt;x&gt;"));
        let b = bars(
            "b",
            "y",
            &["g".into()],
            &[("s".into(), vec![Some(2.0)]), ("n".into(), vec![None])],
        );
        // One bar plus two legend boxes (and the background).
        assert_eq!(b.matches("<rect x=").count(), 3);
    }
}
