//! Scenarios reproducing the reference reports' tables (`../shared/reference`):
//! each runs the report's tests on every target and prints a table shaped
//! like the report's, with the report's own figures beside ours. Where a
//! report used an insecure suite (CBC, RSA key exchange, 1024-bit RSA) the
//! nearest secure one is run instead and the table says so.

use std::fmt::Write as _;

use crate::alone::Pausable;
use crate::loadgen::Load;
use crate::report::fmt_num;
use crate::run::{self, TestKind, TestResult, TestSpec};
use crate::target::{KeyType, Target};
use crate::tls::{Group, TlsVersion};

/// The reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Name {
    /// F5 VIPRION B4450 / Ixia CloudStorm: CPS and throughput per cipher and key.
    F5,
    /// loadbalancer.org: TPS of a 107 B page through stunnel + HAProxy to a pool.
    Lbo,
    /// NetScaler VPX with `abs -n 50000 -c 100 -f TLS1.2`.
    Abs,
    /// NetScaler VPX service-provider table (six metrics).
    Sp,
}

/// Error running a scenario.
#[derive(Debug)]
pub struct ScenarioError(pub String);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scenario: {}", self.0)
    }
}
impl std::error::Error for ScenarioError {}

/// Builds a spec from the command line's options for a test and key.
pub type SpecFn<'a> = dyn Fn(TestKind, Option<KeyType>) -> Result<TestSpec, String> + 'a;

struct Row {
    label: String,
    reference: String,
    spec: TestSpec,
}

fn cell(r: &TestResult) -> String {
    if let Some(why) = &r.skipped {
        return format!("n/a ({why})");
    }
    match (r.best_value, r.median_value) {
        (Some(b), Some(m)) => {
            let sat = r.best_run().map_or("", |x| x.saturated);
            format!("{} ({}) [{}]", fmt_num(b), fmt_num(m), sat)
        }
        _ => {
            let why = r
                .runs
                .iter()
                .find_map(|x| x.rejected.clone())
                .unwrap_or_default();
            format!("rejected: {why}")
        }
    }
}

fn run_rows(rows: &[Row], targets: &[Target]) -> Vec<Vec<TestResult>> {
    let others = Pausable::new(targets);
    rows.iter()
        .map(|row| {
            targets
                .iter()
                .map(|t| run::run_repeated(&row.spec, t, &others))
                .collect()
        })
        .collect()
}

fn table(
    title: &str,
    first: &str,
    rows: &[Row],
    targets: &[Target],
    results: &[Vec<TestResult>],
    notes: &[&str],
) -> String {
    let mut s = format!("\n## {title}\n\n| {first} | test as run |");
    let mut sep = String::from("|---|---|");
    for t in targets {
        let _ = write!(s, " {} |", t.name);
        sep.push_str("---|");
    }
    let _ = writeln!(s, " report |\n{sep}---|");
    for (row, rs) in rows.iter().zip(results) {
        let _ = write!(s, "| {} | {} |", row.label, row.spec.describe());
        for r in rs {
            let _ = write!(s, " {} |", cell(r));
        }
        let _ = writeln!(s, " {} |", row.reference);
    }
    let _ = writeln!(
        s,
        "\nCells: best (median) of accepted runs [side that saturated]; session reuse {}. The report's figures come from its own hardware: compare ratios between targets, not absolute figures.",
        crate::report::reuse_text(&results.iter().flatten().cloned().collect::<Vec<_>>())
    );
    for n in notes {
        let _ = writeln!(s, "- {n}");
    }
    s
}

fn spec_for(
    f: &SpecFn<'_>,
    kind: TestKind,
    key: Option<KeyType>,
) -> Result<TestSpec, ScenarioError> {
    f(kind, key).map_err(ScenarioError)
}

/// Runs a scenario and returns its Markdown and every test result.
///
/// # Errors
/// [`ScenarioError`] when a spec cannot be built.
pub fn run(
    name: Name,
    targets: &[Target],
    f: &SpecFn<'_>,
) -> Result<(String, Vec<TestResult>), ScenarioError> {
    match name {
        Name::F5 => f5(targets, f),
        Name::Lbo => lbo(targets, f),
        Name::Abs => abs(targets, f),
        Name::Sp => sp(targets, f),
    }
}

fn f5(targets: &[Target], f: &SpecFn<'_>) -> Result<(String, Vec<TestResult>), ScenarioError> {
    let mut rows = Vec::new();
    let lines = [
        (
            "ECDHE-ECDSA P-384 (report: ECDHE-ECDSA-AES128-SHA256 secp384r1)",
            KeyType::P384,
            Group::P384,
            "53 Gbps",
            "64 k",
        ),
        (
            "ECDHE-ECDSA P-256 (report: ECDHE-ECDSA-AES128-SHA256 prime256v1)",
            KeyType::P256,
            Group::P256,
            "53 Gbps",
            "105 k",
        ),
        (
            "ECDHE-RSA 2048 P-256 (report: AES128-GCM-SHA256, RSA key exchange)",
            KeyType::Rsa2048,
            Group::P256,
            "90 Gbps",
            "160 k",
        ),
    ];
    for (label, key, group, tput, cps) in lines {
        for kind in [TestKind::Throughput, TestKind::Cps] {
            let mut spec = spec_for(f, kind, Some(key))?;
            spec.tls.version = TlsVersion::Tls12;
            spec.tls.group = group;
            rows.push(Row {
                label: format!(
                    "{label} — {}",
                    if kind == TestKind::Cps {
                        "CPS (SR=0)"
                    } else {
                        "Throughput"
                    }
                ),
                reference: if kind == TestKind::Cps {
                    cps.into()
                } else {
                    tput.into()
                },
                spec,
            });
        }
    }
    let res = run_rows(&rows, targets);
    let md = table(
        "F5 VIPRION B4450 / Ixia CloudStorm: client SSL, server cleartext",
        "cipher and key",
        &rows,
        targets,
        &res,
        &[
            "TLS 1.2 as in the report; CPS: HTTP/1.0 GET of 1024 B, new connection each; throughput: HTTP/1.1 keep-alive GETs of 1 MB.",
            "Changed: the report's ECDHE-ECDSA-AES128-SHA256 (CBC) runs as ECDHE-ECDSA-AES128-GCM-SHA256; its AES128-GCM-SHA256 (RSA key exchange, no forward secrecy) runs as ECDHE-RSA-AES128-GCM-SHA256 over P-256. CBC and RSA key exchange are insecure and not offered.",
            "The report used two 100GE blades; we use one core of this machine.",
        ],
    );
    Ok((md, res.into_iter().flatten().collect()))
}

fn lbo(targets: &[Target], f: &SpecFn<'_>) -> Result<(String, Vec<TestResult>), ScenarioError> {
    let mut spec = spec_for(f, TestKind::Tps, Some(KeyType::Rsa2048))?;
    spec.tls.version = TlsVersion::Tls12;
    let mut s = String::from(
        "\n## loadbalancer.org: SSL offload TPS (107 B page from backends rip-test-N, HTTPS in, cleartext to a weighted-least-connections pool)\n\n| target | cipher as run | certificate | run 1 | run 2 | run 3 | best | median | DUT µs/conn | saturated |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut all = Vec::new();
    let others = Pausable::new(targets);
    for t in targets {
        let r = run::run_repeated(&spec, t, &others);
        let mut runs: Vec<String> = r
            .runs
            .iter()
            .map(|x| {
                if x.rejected.is_some() {
                    format!("{} (rejected)", fmt_num(x.transactions_per_s))
                } else {
                    fmt_num(x.transactions_per_s)
                }
            })
            .collect();
        runs.resize(3, "-".into());
        let best = r.best_run();
        let _ = writeln!(
            s,
            "| {} | ECDHE-RSA-AES128-GCM-SHA256 (TLS 1.2) | RSA 2048 bits | {} | {} | {} | {} | {} | {} | {} |",
            t.name,
            runs[0],
            runs[1],
            runs[2],
            r.best_value.map_or("-".into(), fmt_num),
            r.median_value.map_or("-".into(), fmt_num),
            best.and_then(|x| x.dut_us_per_conn).map_or("-".into(), fmt_num),
            best.map_or("-", |x| x.saturated),
        );
        all.push(r);
    }
    s.push_str(
        "\nReport (stunnel 4.55 + HAProxy 1.5-dev18, OpenSSL 1.0.1e, ECDHE-RSA-AES256-SHA, 1024-bit RSA, runs 1/2/3):\n\n\
         | CPU | run 1 | run 2 | run 3 |\n|---|---|---|---|\n\
         | Xeon E3-1220 V2 @ 3.10GHz | 3625 | 3629 | 3631 |\n\
         | Atom C2750 | 1147 | 1204 | 1220 |\n\
         | Xeon E5-2470 @ 2.30GHz | 2780 | 2778 | 2777 |\n\
         | Celeron 440 @ 2.00GHz | 321 | 322 | 322 |\n\
         | Xeon X3430 @ 2.40GHz | 2160 | 2234 | 2236 |\n\
         | Atom D510 @ 1.66GHz | 343 | 338 | 344 |\n\
         | Dual Xeon E5-2420 @ 1.90GHz | 6082 | 6143 | 6190 |\n\
         | Atom S1260 @ 2.00GHz | 388 | 387 | 389 |\n\n\
         Changed: 1024-bit RSA and AES256-SHA (CBC) are insecure and not offered: RSA-2048 and AES128-GCM instead (the 2048-bit signature costs several times the 1024-bit one). \
         The report used all cores of each machine; we use one DUT core. Session reuse off, every connection closed.\n",
    );
    let _ = writeln!(s, "\nTest as run: {}", spec.describe());
    Ok((s, all))
}

fn abs(targets: &[Target], f: &SpecFn<'_>) -> Result<(String, Vec<TestResult>), ScenarioError> {
    let mut spec = spec_for(f, TestKind::Cps, Some(KeyType::Rsa2048))?;
    spec.tls.version = TlsVersion::Tls12;
    if let Load::Closed { concurrency } = &mut spec.load {
        if *concurrency == 32 {
            *concurrency = 100;
        }
    }
    let mut s = String::from(
        "\n## NetScaler VPX with abs (`abs -n 50000 -c 100 -f TLS1.2 https://host/samplefile.htm`)\n\n| target | key | concurrency | transactions/s best (median) | handshake p50 / p99 ms | failed | DUT core | saturated |\n|---|---|---|---|---|---|---|---|\n",
    );
    let mut all = Vec::new();
    let others = Pausable::new(targets);
    for t in targets {
        let r = run::run_repeated(&spec, t, &others);
        let best = r.best_run();
        let _ = writeln!(
            s,
            "| {} | RSA-2048 | {} | {} ({}) | {} | {} | {} | {} |",
            t.name,
            match spec.load {
                Load::Closed { concurrency } => concurrency,
                Load::Open { max_inflight, .. } => max_inflight,
            },
            r.best_value.map_or("-".into(), fmt_num),
            r.median_value.map_or("-".into(), fmt_num),
            best.map_or("-".into(), |x| format!(
                "{:.2} / {:.2}",
                x.latency.handshake.p50 as f64 / 1e3,
                x.latency.handshake.p99 as f64 / 1e3
            )),
            best.map_or("-".into(), |x| x.errors.to_string()),
            best.and_then(|x| x.dut_core_busy)
                .map_or("-".into(), |b| format!("{:.0} %", b * 100.0)),
            best.map_or("-", |x| x.saturated),
        );
        all.push(r);
    }
    s.push_str(
        "\nReport (NetScaler VPX 1000, one packet-engine vCPU): 512-bit key ≈ 1600 SSL transactions/s; 2048-bit key ≈ 170/s \
         (≈ 400/s with 3 packet engines and 4 abs clients).\n\
         Changed: a time-bounded run (phases) instead of `-n 50000`; 512-bit RSA is not offered. TLS 1.2, ECDHE-RSA-AES128-GCM-SHA256, HTTP/1.0, session reuse off.\n",
    );
    let _ = writeln!(s, "\nTest as run: {}", spec.describe());
    Ok((s, all))
}

fn sp(targets: &[Target], f: &SpecFn<'_>) -> Result<(String, Vec<TestResult>), ScenarioError> {
    let mut rows = Vec::new();
    // Number of simultaneous TCP connections (L4, HTTP, 64 B).
    let mut c = spec_for(f, TestKind::Concurrency, None)?;
    c.use_tls = false;
    rows.push(Row {
        label: "Simultaneous TCP connections (HTTP, 64 B)".into(),
        reference: "55,000 connection".into(),
        spec: c,
    });
    rows.push(Row {
        label: "New TCP connections (HTTP, 64 B, 1 request)".into(),
        reference: "1,900 cps".into(),
        spec: spec_for(f, TestKind::L4cps, None)?,
    });
    let mut t1 = spec_for(f, TestKind::Throughput, None)?;
    t1.use_tls = false;
    t1.path = "/2m".into();
    t1.expect_body = Some(2 << 20);
    t1.reqs_per_conn = 10;
    rows.push(Row {
        label: "L7 Throughput 1 (HTTP, 2 MB, 10 requests/conn)".into(),
        reference: "3,700 Mbps".into(),
        spec: t1,
    });
    let mut t2 = spec_for(f, TestKind::Throughput, Some(KeyType::Rsa2048))?;
    t2.tls.version = TlsVersion::Tls12;
    t2.path = "/2m".into();
    t2.expect_body = Some(2 << 20);
    t2.reqs_per_conn = 10;
    rows.push(Row {
        label: "L7 Throughput 2 (HTTPS TLS 1.2 ECDHE-RSA, 2 MB, 10 requests/conn)".into(),
        reference: "420 Mbps".into(),
        spec: t2,
    });
    rows.push(Row {
        label: "New HTTP requests (20 per connection, 64 B)".into(),
        reference: "50,000 rps".into(),
        spec: spec_for(f, TestKind::Rps, None)?,
    });
    let mut ssl = spec_for(f, TestKind::Cps, Some(KeyType::Rsa2048))?;
    ssl.tls.version = TlsVersion::Tls12;
    ssl.path = "/64b".into();
    ssl.expect_body = Some(64);
    rows.push(Row {
        label: "New SSL transactions 1 (TLS 1.2 ECDHE-RSA, 64 B, 1 request)".into(),
        reference: "200 tps".into(),
        spec: ssl,
    });
    let res = run_rows(&rows, targets);
    let md = table(
        "NetScaler VPX, service provider's measurement (3000 Mbps plan, 4 CPU)",
        "measurement item",
        &rows,
        targets,
        &res,
        &[
            "Units: connections held, conn/s, Gbit/s (report: Mbps), req/s, trans/s.",
            "stunnel speaks only TLS: its cleartext rows measure the HAProxy behind it (the target's http= port).",
            "Changed: the report offered fixed new-connection rates (3000, 200, 4000 cps) and measured what passed; we run closed loop (or, for held connections, a fixed opening rate) so the DUT sets the rate. Held connections are bounded by this machine's 20000-descriptor limit.",
            "Not run: L7 Throughput 3 and New SSL transactions 2 (TLS1-AES-128-CBC-SHA): TLS 1.0 and CBC are insecure and not offered. ECDHE-RSA-AES-128-SHA256 (CBC) runs as ECDHE-RSA-AES128-GCM-SHA256.",
        ],
    );
    Ok((md, res.into_iter().flatten().collect()))
}
