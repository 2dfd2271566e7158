//! Deadlines against real sockets over veth: `tests/clients/slow_clients.py`
//! opens 200 connections from the client namespace at once (silent and
//! trickling, to a TLS and a plain VIP with short deadlines) and times how
//! long dpd holds each; every one must end at its VIP's deadline (they
//! used to be held until TCP's 300 s idle timeout), counted by kind, while
//! curl is still served.

use std::path::Path;
use std::time::Duration;

use e2e::{make_certs, Dpd, Lab};

const PYTHON: &str = "/usr/bin/python3";

/// A TLS VIP on :443 with a 2 s handshake deadline and a plain one on :80
/// with a 3 s request deadline.
fn config(lab: &Lab, socket: &Path, certs: &Path) -> String {
    let c = certs.display();
    format!(
        "{}\n[[vip]]\nname = \"tls\"\nlisten = \"{ip}:443\"\nrespond = \"builtin\"\n\
         certs = [{{ cert = \"{c}/p256.pem\", key = \"{c}/p256.key\" }}]\nhandshake_timeout_ms = 2000\n\
         [[vip]]\nname = \"plain\"\nlisten = \"{ip}:80\"\nrespond = \"builtin\"\nrequest_timeout_ms = 3000\n",
        lab.config("net_af_packet", socket, ""),
        ip = lab.dut_ip(),
    )
}

/// The `(shortest, longest)` hold of `kind` in the script's output, and
/// whether all its connections ended.
fn held(text: &str, kind: &str) -> (f64, f64, bool) {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{kind} ")))
        .unwrap_or_else(|| panic!("no {kind} line in:\n{text}"));
    // "KIND ended N/M held LO..HI s"
    let words: Vec<&str> = line.split_whitespace().collect();
    let (n, m) = words[2].split_once('/').expect("N/M");
    let (lo, hi) = words[4].split_once("..").expect("LO..HI");
    (
        lo.parse().expect("seconds"),
        hi.parse().expect("seconds"),
        n == m,
    )
}

#[test]
fn silent_and_trickling_clients_are_reset_at_their_vips_deadlines() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("dl");
    let dpd = Dpd::start(&lab, |s| config(&lab, s, certs.path()));
    let script = e2e::repo_root().join("tests/clients/slow_clients.py");
    let out = lab.client(&[
        "timeout",
        "60",
        PYTHON,
        script.to_str().expect("utf-8 path"),
        "--dut",
        &lab.dut_ip(),
        "--count",
        "50",
        "--limit",
        "20",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{report}");
    for (kind, deadline) in [
        ("silent-tls", 2.0),
        ("trickle-tls", 2.0),
        ("silent-plain", 3.0),
        ("trickle-plain", 3.0),
    ] {
        let (lo, hi, all) = held(&text, kind);
        assert!(all, "every {kind} connection ended:\n{report}");
        // Each is held from its own SYN until its deadline (the script
        // times from its connect, and polls every 50 ms).
        assert!(
            lo >= deadline - 0.2 && hi <= deadline + 1.0,
            "{kind}: held {lo}..{hi} s for a {deadline} s deadline:\n{report}"
        );
    }
    let stats = dpd.stats_when(Duration::from_secs(5), |s| s.tcp_active == 0);
    assert_eq!(
        (
            stats.tls_handshake_timeouts,
            stats.request_timeouts,
            stats.tcp_active
        ),
        (100, 100, 0),
        "{stats:?}"
    );
    assert_eq!(stats.tls_abandoned, 0);
    // Real clients are still served.
    let o = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        &certs.path().join("ca.pem").display().to_string(),
        "--resolve",
        &format!("p256.test:443:{}", lab.dut_ip()),
        "https://p256.test/bytes/10",
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0123456789");
}

/// Clients that stop reading (a kernel socket with a small receive buffer
/// that is never read: the kernel holds the window closed and answers
/// every zero-window probe) are reset at the VIP's send timeout, plain and
/// TLS, and counted; before, they were held for as long as they answered.
#[test]
fn clients_that_stop_reading_are_reset_at_the_send_timeout() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("sr");
    let dpd = Dpd::start(&lab, |s| {
        config(&lab, s, certs.path()).replace(
            "respond = \"builtin\"\n",
            "respond = \"builtin\"\nsend_timeout_ms = 2000\n",
        )
    });
    let script = e2e::repo_root().join("tests/clients/stopped_reader.py");
    let script = script.to_str().expect("utf-8 path");
    for (port, tls) in [("80", false), ("443", true)] {
        let dut = lab.dut_ip();
        let mut args = vec![
            PYTHON, script, "--dut", &dut, "--port", port, "--limit", "15",
        ];
        if tls {
            args.push("--tls");
        }
        let out = lab.client(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let after: f64 = text
            .trim()
            .strip_prefix("reset after ")
            .and_then(|t| t.strip_suffix(" s"))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!(":{port}: {text}{}", String::from_utf8_lossy(&out.stderr)));
        // The window closes within milliseconds of the request; then 2 s.
        assert!(
            (1.8..5.0).contains(&after),
            ":{port}: reset after {after} s"
        );
    }
    let stats = dpd.stats_when(Duration::from_secs(5), |s| s.tcp_active == 0);
    assert_eq!((stats.send_timeouts, stats.tcp_active), (2, 0), "{stats:?}");
}
