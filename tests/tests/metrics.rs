//! The Prometheus endpoint of a running dpd: parsed by the official Python
//! client's parser, its numbers agree with `dpctl stats`; bad requests get
//! a 404 and leave it serving.

use std::process::Command;
use std::time::Duration;

use e2e::{make_certs, Dpd, Lab};

fn in_dut(lab: &Lab, args: &[&str]) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", &format!("{}-dut", lab.name)])
        .args(args)
        .output()
        .expect("ip netns exec");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The exposition, fetched in the DUT namespace as a scraper would.
fn scrape(lab: &Lab) -> String {
    in_dut(
        lab,
        &[
            "curl",
            "-sS",
            "--max-time",
            "5",
            "http://127.0.0.1:9464/metrics",
        ],
    )
}

/// Samples as `name{labels as sorted JSON}` → value, by prometheus_client.
fn parse(text: &str) -> serde_json::Value {
    let script = r#"
import sys, json
from prometheus_client.parser import text_string_to_metric_families as families
out = {}
for f in families(sys.stdin.read()):
    for s in f.samples:
        out[s.name + json.dumps(s.labels, sort_keys=True)] = s.value
print(json.dumps(out))
"#;
    // Debian's python3 with python3-prometheus-client (scripts/setup.sh).
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "the parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The first port's device counts, as `dpctl status` reports them.
fn port_device(dpd: &Dpd) -> control::api::DeviceCounts {
    let reply = control::api::Client::connect(&dpd.socket)
        .and_then(|mut c| c.call(&control::api::Request::Status))
        .unwrap();
    match reply.body {
        Some(control::api::Body::Status(s)) => s.ports[0]
            .device_counts
            .expect("a DPDK port has device counts"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn metrics_parse_and_agree_with_dpctl() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("mx");
    let c = certs.path().display();
    let dpd = Dpd::start(&lab, |s| {
        format!(
            "{}\n[[vip]]\nname = \"tls\"\nlisten = \"{}:443\"\nrespond = \"builtin\"\ncerts = [{{ cert = \"{c}/p256.pem\", key = \"{c}/p256.key\" }}]\n",
            lab.config_with_vip("net_af_packet", s),
            lab.dut_ip()
        )
    });
    for _ in 0..3 {
        let o = lab.client(&[
            "curl",
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            &format!("{c}/ca.pem"),
            "--resolve",
            &format!("p256.test:443:{}", lab.dut_ip()),
            "https://p256.test/bytes/10",
        ]);
        assert!(o.status.success());
    }
    for _ in 0..2 {
        let o = lab.client(&[
            "curl",
            "-sS",
            "--max-time",
            "10",
            &format!("http://{}/bytes/10", lab.dut_ip()),
        ]);
        assert!(o.status.success());
    }
    let stats = dpd.stats_when(Duration::from_secs(5), |s| s.http_requests >= 5);
    let text = scrape(&lab);
    let m = parse(&text);
    let core = r#"{"core": "1"}"#;
    let get = |name: &str, labels: &str| {
        m[format!("{name}{labels}")]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name}{labels} in\n{text}"))
    };
    assert_eq!(
        get("tlsdp_tls_handshakes_total", core),
        stats.tls_handshakes as f64
    );
    assert_eq!(stats.tls_handshakes, 3);
    assert_eq!(
        get("tlsdp_http_requests_total", core),
        stats.http_requests as f64
    );
    assert_eq!(
        get("tlsdp_tcp_accepted_total", core),
        stats.tcp_accepted as f64
    );
    assert_eq!(get("tlsdp_tcp_time_wait", core), stats.tcp_time_wait as f64);
    assert_eq!(get("tlsdp_tcp_connections", core), stats.tcp_active as f64);
    assert_eq!(
        get(
            "tlsdp_tls_handshakes_by_version_total",
            r#"{"core": "1", "version": "TLSv1.3"}"#
        ),
        3.0
    );
    assert_eq!(
        get(
            "tlsdp_tls_handshakes_by_key_type_total",
            r#"{"core": "1", "key_type": "ECDSA-P256"}"#
        ),
        3.0
    );
    assert!(get("tlsdp_busy_seconds_total", core) > 0.0);
    // Per VIP and core, as dpctl counts them.
    for (vip, conns, handshakes) in [("tls", 3, 3), ("plain", 2, 0)] {
        let labels = format!(r#"{{"core": "1", "vip": "{vip}"}}"#);
        let v = stats.vips[vip];
        assert_eq!((v.connections, v.tls_handshakes), (conns, handshakes));
        assert_eq!(
            get("tlsdp_vip_connections_total", &labels),
            conns as f64,
            "{vip}"
        );
        assert_eq!(
            get("tlsdp_vip_tls_handshakes_total", &labels),
            handshakes as f64
        );
        assert_eq!(get("tlsdp_vip_connections", &labels), v.active as f64);
    }
    assert_eq!(get("tlsdp_config_version", core), 1.0);
    // The device's own counts: every frame the engine got or sent went
    // through it, and it dropped none; `dpctl status` reads them now, the
    // metrics once a second.
    let engines = dpd.stats();
    let device = port_device(&dpd);
    assert!(
        device.rx_packets >= engines.rx_packets
            && device.rx_bytes >= 60 * engines.rx_packets
            && device.tx_packets >= engines.tx_packets
            && engines.rx_packets > 20,
        "{device:?} against {} received, {} sent",
        engines.rx_packets,
        engines.tx_packets
    );
    assert_eq!(
        (device.rx_errors, device.rx_no_mbuf, device.tx_errors),
        (0, 0, 0)
    );
    let p0 = r#"{"port": "p0"}"#;
    let t0 = std::time::Instant::now();
    let m = loop {
        let m = parse(&scrape(&lab));
        let frames = m[format!("tlsdp_port_rx_frames_total{p0}")].as_f64();
        if frames >= Some(engines.rx_packets as f64) || t0.elapsed() > Duration::from_secs(5) {
            break m;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let device_get = |name: &str| {
        m[format!("tlsdp_port_{name}_total{p0}")]
            .as_f64()
            .unwrap_or_else(|| panic!("no tlsdp_port_{name}_total in {m}"))
    };
    assert!(device_get("rx_frames") >= engines.rx_packets as f64);
    assert!(device_get("tx_frames") >= engines.tx_packets as f64);
    assert!(device_get("rx_bytes") >= 60.0 * engines.rx_packets as f64);
    for zero in ["rx_errors", "rx_no_mbuf", "tx_errors"] {
        assert_eq!(device_get(zero), 0.0, "{zero}");
    }
    assert!(device_get("rx_missed") >= 0.0);
    let human = dpd.dpctl(&["status"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("device: rx "), "{human}");
    // The certificate's expiry, as openssl reads the leaf; no reload yet.
    let end = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "date -d \"$(openssl x509 -noout -enddate -in {c}/p256.pem | cut -d= -f2)\" +%s"
        ))
        .output()
        .unwrap();
    let end: f64 = String::from_utf8_lossy(&end.stdout).trim().parse().unwrap();
    assert_eq!(
        get("tlsdp_cert_not_after_seconds", r#"{"cert": "tls-0"}"#),
        end
    );
    assert_eq!(get("tlsdp_config_last_reload_successful", "{}"), 1.0);
    // Anything else: 404, and the endpoint goes on serving.
    let other = in_dut(
        &lab,
        &[
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "http://127.0.0.1:9464/",
        ],
    );
    assert_eq!(other, "404");
    in_dut(
        &lab,
        &[
            "bash",
            "-c",
            "exec 3<>/dev/tcp/127.0.0.1/9464; printf 'garbage\\r\\n\\r\\n' >&3; cat <&3 >/dev/null",
        ],
    );
    let again = scrape(&lab);
    assert!(
        again.contains("tlsdp_tls_handshakes_total{core=\"1\"} 3"),
        "{again}"
    ); // A reload that fails shows until one applies.
    let file = dpd.dir.path().join("dpd.toml");
    let good = std::fs::read_to_string(&file).unwrap();
    let reload = || {
        e2e::run(
            Command::new(e2e::bin("dpctl"))
                .arg("--socket")
                .arg(&dpd.socket)
                .args(["config", "reload"]),
        )
        .status
        .success()
    };
    std::fs::write(&file, format!("{good}\n[[nonsense]]\n")).unwrap();
    assert!(!reload());
    assert!(scrape(&lab).contains("\ntlsdp_config_last_reload_successful 0\n"));
    std::fs::write(&file, good).unwrap();
    assert!(reload());
    assert!(scrape(&lab).contains("\ntlsdp_config_last_reload_successful 1\n"));

    // The deny lists' sizes, lasting and timed.
    let denied =
        |kind: &str, n: u32| format!("\ntlsdp_access_denied_networks{{kind=\"{kind}\"}} {n}\n");
    let text = scrape(&lab);
    assert!(
        text.contains(&denied("lasting", 0)) && text.contains(&denied("timed", 0)),
        "{text}"
    );
    assert!(dpd.dpctl(&["deny", "add", "192.0.2.0/24"]).status.success());
    let timed = [
        "deny",
        "add",
        "198.51.100.7",
        "203.0.113.0/24",
        "--for",
        "1h",
    ];
    assert!(dpd.dpctl(&timed).status.success());
    let text = scrape(&lab);
    assert!(
        text.contains(&denied("lasting", 1)) && text.contains(&denied("timed", 2)),
        "{text}"
    );
    assert!(
        text.contains("\ntlsdp_access_auto_denied_total 0\n"),
        "{text}"
    );

    // The drain phase: serving, then drained (no [routing], no
    // connection open: at once), then serving again.
    let phase =
        |text: &str, p: &str| text.contains(&format!("\ntlsdp_drain_phase{{phase=\"{p}\"}} 1\n"));
    assert!(phase(&scrape(&lab), "serving"));
    assert!(dpd.dpctl(&["drain"]).status.success());
    let t0 = std::time::Instant::now();
    while !phase(&scrape(&lab), "drained") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", scrape(&lab));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(dpd.dpctl(&["undrain"]).status.success());
    assert!(phase(&scrape(&lab), "serving"));
}

/// `[control] metrics` with port 0: the log names the port bound, and a
/// scrape there is answered. Before, the log said `:0`.
#[test]
fn a_metrics_port_of_zero_is_logged_as_bound() {
    let lab = Lab::up("mz");
    let dpd = Dpd::start(&lab, |s| {
        lab.config_with_vip("net_af_packet", s)
            .replace("[control]\n", "[control]\nmetrics = \"127.0.0.1:0\"\n")
    });
    let log = dpd.log_text();
    let url = (log.lines())
        .find_map(|l| l.split("metrics on ").nth(1))
        .unwrap_or_else(|| panic!("{log}"))
        .trim()
        .to_string();
    assert!(!url.contains(":0/"), "{url}");
    let text = in_dut(&lab, &["curl", "-sS", "--max-time", "5", &url]);
    assert!(text.contains("tlsdp_rx_packets_total"), "{url}: {text}");
}
