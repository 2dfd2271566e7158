//! Reports: Markdown tables to stdout, CSV and JSON files, SVG charts.

use std::fmt::Write as _;
use std::path::Path;

use crate::ceiling::{self, Ceiling, OpCost};
use crate::run::{TestKind, TestResult};
use crate::target::Target;

/// Error writing report files.
#[derive(Debug)]
pub struct ReportError(pub String);

impl std::fmt::Display for ReportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "report: {}", self.0)
    }
}
impl std::error::Error for ReportError {}

/// Formats a figure with sensible precision.
#[must_use]
pub fn fmt_num(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn pct(v: f64) -> String {
    format!("{:.0} %", v * 100.0)
}

/// Every run of every test, with its verdict.
#[must_use]
pub fn runs_markdown(results: &[TestResult]) -> String {
    let mut s = String::new();
    for r in results {
        let _ = writeln!(s, "\n### {} on {} — {}\n", r.test.name(), r.target, r.spec);
        if let Some(why) = &r.skipped {
            let _ = writeln!(s, "skipped: {why}\n");
            continue;
        }
        let _ = writeln!(
            s,
            "| run | {} | conn/s | hs/s | req/s | Gbit/s | hs p50/p99/p999 ms | ttfb p99 ms | errors | client core | client µs/conn | DUT core | DUT µs/conn | saturated | verdict |",
            r.unit
        );
        let _ = writeln!(
            s,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for run in &r.runs {
            let h = run.latency.handshake;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.2}/{:.2}/{:.2} | {:.2} | {} ({:.3} %) | {} | {} | {} | {} | {} | {} |",
                run.run,
                fmt_num(run.headline(r.test)),
                fmt_num(run.transactions_per_s),
                fmt_num(run.handshakes_per_s),
                fmt_num(run.requests_per_s),
                fmt_num(run.gbit_per_s),
                h.p50 as f64 / 1e3,
                h.p99 as f64 / 1e3,
                h.p999 as f64 / 1e3,
                run.latency.ttfb.p99 as f64 / 1e3,
                run.errors,
                run.error_rate * 100.0,
                pct(run.client_core_busy),
                run.client_us_per_conn.map_or("-".into(), fmt_num),
                run.dut_core_busy.map_or("-".into(), pct),
                run.dut_us_per_conn.map_or("-".into(), fmt_num),
                run.saturated,
                run.rejected.as_deref().map_or("ok".to_string(), |w| format!("REJECTED: {w}")),
            );
        }
        match (r.best_value, r.median_value) {
            (Some(b), Some(m)) => {
                let _ = writeln!(
                    s,
                    "\nbest {} {}, median {} {}",
                    fmt_num(b),
                    r.unit,
                    fmt_num(m),
                    r.unit
                );
            }
            _ => {
                let _ = writeln!(s, "\nno accepted run: the test counts for nothing");
            }
        }
        if let Some(run) = r.best_run() {
            if !run.negotiated.version.is_empty() {
                let _ = writeln!(
                    s,
                    "negotiated {} {} {}; resumed handshakes seen: {}",
                    run.negotiated.version,
                    run.negotiated.suite,
                    run.negotiated.group,
                    run.negotiated.resumed_seen
                );
            }
            if let Some(m) = run.dut_mem_bytes {
                let _ = writeln!(
                    s,
                    "DUT memory growth at {} held: {:.1} MiB ({:.0} B/conn)",
                    run.max_held,
                    m as f64 / 1048576.0,
                    m as f64 / run.max_held.max(1) as f64
                );
            }
        }
    }
    s
}

fn row_key(r: &TestResult) -> String {
    match r.key {
        Some(k) => format!("{} {}", r.test.name(), k.name()),
        None => r.test.name().to_string(),
    }
}

/// One table: a row per test, a column per target, ratios against the first
/// target, DUT busy µs per connection, which side saturated.
#[must_use]
pub fn comparison_markdown(
    results: &[TestResult],
    targets: &[Target],
    ceilings: &[Ceiling],
) -> String {
    let mut rows: Vec<(String, TestKind)> = Vec::new();
    for r in results {
        let k = row_key(r);
        if !rows.iter().any(|(x, _)| *x == k) {
            rows.push((k, r.test));
        }
    }
    let base = targets.first().map(|t| t.name.clone()).unwrap_or_default();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## Comparison (best of accepted runs; median in brackets; session reuse {}; ratio = target / {base})\n",
        reuse_text(results)
    );
    let mut head = "| test | unit |".to_string();
    let mut sep = "|---|---|".to_string();
    for t in targets {
        let _ = write!(
            head,
            " {} | {} ratio | {} DUT µs/conn | {} saturated |",
            t.name, t.name, t.name, t.name
        );
        sep.push_str("---|---|---|---|");
    }
    if !ceilings.is_empty() {
        head.push_str(" ceiling hs/s |");
        sep.push_str("---|");
    }
    let _ = writeln!(s, "{head}\n{sep}");
    for (key, kind) in &rows {
        let find = |t: &str| results.iter().find(|r| row_key(r) == *key && r.target == t);
        let base_v = find(&base).and_then(|r| r.best_value);
        let mut line = format!("| {key} | {} |", kind.unit());
        for t in targets {
            match find(&t.name) {
                Some(r) if r.skipped.is_some() => line.push_str(" n/a | | | |"),
                Some(r) => match (r.best_value, r.median_value) {
                    (Some(b), Some(m)) => {
                        let ratio = base_v
                            .filter(|&x| x > 0.0)
                            .map_or("-".into(), |x| format!("{:.2}", b / x));
                        let run = r.best_run();
                        let _ = write!(
                            line,
                            " {} ({}) | {} | {} | {} |",
                            fmt_num(b),
                            fmt_num(m),
                            ratio,
                            run.and_then(|x| x.dut_us_per_conn)
                                .map_or("-".into(), fmt_num),
                            run.map_or("-", |x| x.saturated),
                        );
                    }
                    _ => line.push_str(" rejected | | | |"),
                },
                None => line.push_str(" - | | | |"),
            }
        }
        if !ceilings.is_empty() {
            let c = if matches!(kind, TestKind::Cps | TestKind::Tps) {
                results
                    .iter()
                    .find(|r| row_key(r) == *key)
                    .and_then(|r| ceiling::for_handshake(ceilings, r.group, r.key?))
                    .map_or("-".into(), fmt_num)
            } else {
                "-".into()
            };
            let _ = write!(line, " {c} |");
        }
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(
        s,
        "\nDUT µs/conn: busy core-microseconds of the DUT per connection in the sustain phase (per request for rps and throughput) (kernel peers: worker CPU + DUT core softirq). \
         saturated: the side whose core was ≥ 90 % busy. Suites offered: TLS 1.3 AES-128-GCM / TLS 1.2 ECDHE-*-AES128-GCM only; the reports' CBC and RSA-key-exchange suites are insecure and not offered."
    );
    s
}

/// The per-core rate of each run against the crypto ceiling measured
/// right before and after it (`--ceiling-each`); empty when no run has
/// one.
#[must_use]
pub fn ceiling_each_markdown(results: &[TestResult]) -> String {
    let mut s = String::new();
    for r in results {
        let runs: Vec<_> = r
            .runs
            .iter()
            .filter_map(|run| Some((run, run.ceiling?, run.per_core_of_ceiling()?)))
            .collect();
        if runs.is_empty() {
            continue;
        }
        if s.is_empty() {
            let _ = writeln!(
                s,
                "\n## Per-core rate against the ceiling measured around each run\n\n\
                 The handshake's public-key work (its signature, X25519) timed on the DUT core right before and right after each run, every `pause=` process stopped; per-core rate = 10^6 ÷ DUT µs/conn, over the mean of the two.\n\n\
                 | test | target | run | DUT µs/conn | ceiling before hs/s | ceiling after hs/s | per-core ÷ ceiling | verdict |\n\
                 |---|---|---|---|---|---|---|---|"
            );
        }
        let mut ratios = Vec::new();
        for (run, (before, after), ratio) in runs {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.3} | {} |",
                row_key(r),
                r.target,
                run.run,
                run.dut_us_per_conn.map_or("-".into(), fmt_num),
                fmt_num(before),
                fmt_num(after),
                ratio,
                if run.rejected.is_some() {
                    "rejected"
                } else {
                    "ok"
                },
            );
            if run.rejected.is_none() {
                ratios.push(ratio);
            }
        }
        ratios.sort_by(f64::total_cmp);
        if let Some(median) = crate::run::median(&ratios) {
            let n = ratios.len();
            let _ = writeln!(
                s,
                "| {} | {} | median of {n} | | | | **{median:.3}** | |",
                row_key(r),
                r.target
            );
        }
    }
    s
}

/// The crypto ceiling table.
#[must_use]
pub fn ceiling_markdown(ops: &[OpCost], c: &[Ceiling], core: usize) -> String {
    let mut s = format!("\n## Crypto ceiling of core {core} (aws-lc-rs, server side of one full handshake)\n\n| operation | µs |\n|---|---|\n");
    for o in ops {
        let _ = writeln!(s, "| {} | {:.1} |", o.op, o.us);
    }
    let _ = writeln!(
        s,
        "\n| handshake | µs | handshakes/s per core |\n|---|---|---|"
    );
    for x in c {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} |",
            x.handshake,
            x.us_per_handshake,
            fmt_num(x.handshakes_per_s)
        );
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// `runs.csv`: one line per run.
#[must_use]
pub fn runs_csv(results: &[TestResult]) -> String {
    let mut s = String::from(
        "test,target,spec,run,headline,unit,conns_per_s,handshakes_per_s,requests_per_s,gbit_per_s,errors,error_rate,rejected,hs_p50_us,hs_p99_us,hs_p999_us,ttfb_p50_us,ttfb_p99_us,ttfb_p999_us,client_core_busy,client_us_per_conn,dut_core_busy,dut_us_per_conn,saturated,max_held,dut_mem_bytes\n",
    );
    for r in results {
        for run in &r.runs {
            let l = run.latency;
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{:.2},{:.2},{:.2},{:.4},{},{:.6},{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{}",
                r.test.name(),
                csv_field(&r.target),
                csv_field(&r.spec),
                run.run,
                run.headline(r.test),
                csv_field(r.unit),
                run.transactions_per_s,
                run.handshakes_per_s,
                run.requests_per_s,
                run.gbit_per_s,
                run.errors,
                run.error_rate,
                csv_field(run.rejected.as_deref().unwrap_or("")),
                l.handshake.p50,
                l.handshake.p99,
                l.handshake.p999,
                l.ttfb.p50,
                l.ttfb.p99,
                l.ttfb.p999,
                run.client_core_busy,
                run.client_us_per_conn.map_or(String::new(), |v| format!("{v:.2}")),
                run.dut_core_busy.map_or(String::new(), |v| format!("{v:.3}")),
                run.dut_us_per_conn.map_or(String::new(), |v| format!("{v:.2}")),
                run.saturated,
                run.max_held,
                run.dut_mem_bytes.map_or(String::new(), |v| v.to_string()),
            );
        }
    }
    s
}

/// `series.csv`: the per-second time series of every run.
#[must_use]
pub fn series_csv(results: &[TestResult]) -> String {
    let mut s = String::from(
        "test,target,spec,run,t,phase,conns_per_s,handshakes_per_s,requests_per_s,gbit_per_s,errors,held,client_busy,dut_busy\n",
    );
    for r in results {
        for run in &r.runs {
            for p in &run.series {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{:.4},{},{},{:.3},{}",
                    r.test.name(),
                    csv_field(&r.target),
                    csv_field(&r.spec),
                    run.run,
                    p.t,
                    p.phase,
                    p.conns_per_s,
                    p.handshakes_per_s,
                    p.requests_per_s,
                    p.gbit_per_s,
                    p.errors,
                    p.held,
                    p.client_busy,
                    p.dut_busy.map_or(String::new(), |v| format!("{v:.3}")),
                );
            }
        }
    }
    s
}

/// Writes results.json, runs.csv, series.csv and the SVG charts into `dir`.
///
/// # Errors
/// [`ReportError`] when a file cannot be written.
pub fn write_files(
    dir: &Path,
    results: &[TestResult],
    ceilings: &[Ceiling],
) -> Result<(), ReportError> {
    let w = |name: &str, data: &str| {
        std::fs::write(dir.join(name), data)
            .map_err(|e| ReportError(format!("{}: {e}", dir.join(name).display())))
    };
    std::fs::create_dir_all(dir).map_err(|e| ReportError(format!("{}: {e}", dir.display())))?;
    let json = serde_json::json!({ "results": results, "ceilings": ceilings });
    w(
        "results.json",
        &serde_json::to_string_pretty(&json).map_err(|e| ReportError(e.to_string()))?,
    )?;
    w("runs.csv", &runs_csv(results))?;
    w("series.csv", &series_csv(results))?;
    for (name, svg) in crate::svg::charts(results) {
        w(&name, &svg)?;
    }
    Ok(())
}

/// Session reuse as the results' runs had it: `off`, `on`, or `on in
/// some tests` (each test's spec line says which).
#[must_use]
pub fn reuse_text(results: &[TestResult]) -> &'static str {
    let tls: Vec<&TestResult> = results.iter().filter(|r| r.spec.contains("TLS ")).collect();
    let on = tls
        .iter()
        .filter(|r| r.spec.contains("session reuse on"))
        .count();
    match on {
        0 => "off",
        n if n == tls.len() => "on",
        _ => "on in some tests",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(spec: &str) -> TestResult {
        TestResult {
            test: TestKind::Cps,
            target: "dpd".into(),
            spec: spec.into(),
            key: None,
            group: crate::tls::Group::X25519,
            runs: Vec::new(),
            best: None,
            best_value: None,
            median_value: None,
            unit: "conn/s",
            skipped: None,
        }
    }

    /// The ceiling column is the handshake the test ran: its group's with
    /// its key. Before, X25519's whatever `--group` asked, so a P-384
    /// run was divided by a cheaper handshake's ceiling.
    #[test]
    fn the_ceiling_is_the_groups() {
        let mut r = result("TLS 1.3 P-384 ECDSA P-256, session reuse off, GET /");
        r.key = Some(crate::target::KeyType::P256);
        r.group = crate::tls::Group::P384;
        let ceiling = |handshake: &str, rate: f64| Ceiling {
            handshake: handshake.into(),
            us_per_handshake: 1e6 / rate,
            handshakes_per_s: rate,
        };
        let ceilings = [
            ceiling("ECDHE X25519 + ECDSA P-256", 7777.0),
            ceiling("ECDHE P-384 + ECDSA P-256", 4444.0),
        ];
        let text = comparison_markdown(&[r], &[], &ceilings);
        assert!(text.contains(" 4444 |") && !text.contains("7777"), "{text}");
    }

    /// The comparison's heading says session reuse as the runs had it.
    /// Before, it said `off` whatever `--reuse` asked.
    #[test]
    fn the_heading_says_reuse_as_run() {
        let off = result("TLS 1.3 X25519 P-256, session reuse off, GET /");
        let on = result("TLS 1.3 X25519 P-256, session reuse on, GET /");
        let plain = result("plain TCP, GET /");
        assert_eq!(reuse_text(&[off.clone(), plain.clone()]), "off");
        assert_eq!(reuse_text(&[on.clone(), plain]), "on");
        assert_eq!(reuse_text(&[on, off]), "on in some tests");
        let text = comparison_markdown(
            &[result("TLS 1.3 X25519 P-256, session reuse on, GET /")],
            &[],
            &[],
        );
        assert!(text.contains("session reuse on;"), "{text}");
    }
}
