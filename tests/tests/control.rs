//! The control plane of a running dpd through `dpctl`: every command, run-
//! time changes while clients connect (certificate rotation during a
//! dpbench CPS run, VIPs added and removed under load), refused changes
//! that leave everything as it was, and a socket only root may use.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use e2e::{bin, dpbench_result, make_cert, make_certs, run, Dpd, HttpBackend, KeySpec, Lab};

/// Runs `dpctl --socket S ARGS...`.
fn dpctl(dpd: &Dpd, args: &[&str]) -> Output {
    dpd.dpctl(args)
}

/// `dpctl` that must succeed; its stdout.
fn ok(dpd: &Dpd, args: &[&str]) -> String {
    let o = dpctl(dpd, args);
    assert!(
        o.status.success(),
        "dpctl {args:?} failed ({}): {}{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        dpd.log_text()
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `dpctl` that dpd must refuse (exit 1); its stderr.
fn refused(dpd: &Dpd, args: &[&str]) -> String {
    let o = dpctl(dpd, args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "dpctl {args:?} should be refused: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dpctl --json ARGS` parsed.
fn json(dpd: &Dpd, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(dpd, &all)).expect("JSON reply")
}

/// A curl in the client namespace; (exit code, body).
fn curl(lab: &Lab, certs: &Path, url: &str, resolve: Option<&str>) -> (i32, String) {
    let mut args = vec![
        "curl".to_string(),
        "-sS".into(),
        "--max-time".into(),
        "5".into(),
        "--cacert".into(),
        format!("{}/ca.pem", certs.display()),
    ];
    if let Some(r) = resolve {
        args.extend(["--resolve".into(), r.into()]);
    }
    args.push(url.into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = lab.client(&args);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// The SHA-256 fingerprint (lowercase hex) of the certificate a TLS server
/// presents for `sni` at `addr`.
fn served_fingerprint(lab: &Lab, addr: &str, sni: &str) -> String {
    let sh = format!(
        "openssl s_client -connect {addr} -servername {sni} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
    );
    let o = lab.client(&["sh", "-c", &sh]);
    let text = String::from_utf8_lossy(&o.stdout);
    text.trim()
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .replace(':', "")
        .to_ascii_lowercase()
}

/// The fingerprint of the leaf in a PEM file.
fn file_fingerprint(pem: &Path) -> String {
    let o = run(Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .replace(':', "")
        .to_ascii_lowercase()
}

/// `dpctl cert rotate web-cert` to the files `FILE.pem` and `FILE.key` in
/// the certificate folder `c`.
fn rotate(dpd: &Dpd, c: &str, file: &str) {
    ok(
        dpd,
        &[
            "cert",
            "rotate",
            "web-cert",
            "--cert",
            &format!("{c}/{file}.pem"),
            "--key",
            &format!("{c}/{file}.key"),
        ],
    );
}

/// A dpd with a TLS VIP `web` on :443 serving certificate `web-cert`
/// (`p256.test`, files `cert-a`), and a plain VIP `plain` on :80.
fn start_web(lab: &Lab, certs: &Path) -> Dpd {
    let c = certs.display();
    Dpd::start(lab, |s| {
        format!(
            "{}\n[[cert]]\nname = \"web-cert\"\ncert = \"{c}/cert-a.pem\"\nkey = \"{c}/cert-a.key\"\n\n[[vip]]\nname = \"web\"\nlisten = \"{}:443\"\nrespond = \"builtin\"\ncerts = [\"web-cert\"]\n",
            lab.config_with_vip("net_af_packet", s),
            lab.dut_ip()
        )
    })
}

fn certs_dir() -> tempfile::TempDir {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    make_cert(certs.path(), "cert-a", KeySpec::P256, &["p256.test"]);
    make_cert(certs.path(), "cert-b", KeySpec::P256, &["p256.test"]);
    certs
}

#[test]
fn every_dpctl_command_against_a_running_dpd() {
    let certs = certs_dir();
    let cp = certs.path();
    let c = cp.display().to_string();
    let lab = Lab::up("ct");
    let dpd = start_web(&lab, cp);
    let dut = lab.dut_ip();

    // status
    let s = ok(&dpd, &["status"]);
    assert!(s.contains("configuration 1"), "{s}");
    assert!(s.contains("p0"), "{s}");
    assert_eq!(json(&dpd, &["status"])["status"]["config_version"], 1);

    // cert list / show / add
    let list = ok(&dpd, &["cert", "list"]);
    assert!(
        list.contains("web-cert") && list.contains("ECDSA-P256"),
        "{list}"
    );
    ok(
        &dpd,
        &[
            "cert",
            "add",
            "rsa",
            "--cert",
            &format!("{c}/rsa.pem"),
            "--key",
            &format!("{c}/rsa.key"),
        ],
    );
    let show = json(&dpd, &["cert", "show", "rsa"]);
    let info = &show["certs"][0];
    assert_eq!(info["key_type"], "RSA-2048");
    assert_eq!(info["names"][0], "rsa.test");
    assert_eq!(
        info["sha256"].as_str().unwrap(),
        file_fingerprint(&cp.join("rsa.pem"))
    );
    assert!(ok(&dpd, &["cert", "show", "rsa"]).contains("used by      no VIP"));

    // vip add (TLS, built-in responder) / list / show / disable / enable
    let applied = ok(
        &dpd,
        &[
            "vip",
            "add",
            "second",
            "--listen",
            &format!("{dut}:8443"),
            "--builtin",
            "--cert",
            "rsa",
        ],
    );
    assert!(applied.contains("configuration 3"), "{applied}");
    let url = "https://rsa.test:8443/bytes/5";
    let resolve = format!("rsa.test:8443:{dut}");
    assert_eq!(curl(&lab, cp, url, Some(&resolve)).0, 0);
    let vips = json(&dpd, &["vip", "list"]);
    let second = vips["vips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "second")
        .unwrap()
        .clone();
    assert_eq!(second["counters"]["connections"], 1);
    assert_eq!(second["counters"]["tls_handshakes"], 1);
    let table = ok(&dpd, &["vip", "list"]);
    assert!(
        table.contains("second") && table.contains("enabled"),
        "{table}"
    );
    assert!(ok(&dpd, &["vip", "show", "second"]).contains("certificates rsa"));
    ok(&dpd, &["vip", "disable", "second"]);
    let (code, _) = curl(&lab, cp, url, Some(&resolve));
    assert_eq!(
        code, 7,
        "a disabled VIP refuses connections (curl: connect failed)"
    );
    assert!(ok(&dpd, &["vip", "list"]).contains("disabled"));
    ok(&dpd, &["vip", "enable", "second"]);
    assert_eq!(curl(&lab, cp, url, Some(&resolve)).0, 0);

    // vip add with a TLS policy: TLS 1.3 only
    ok(
        &dpd,
        &[
            "vip",
            "add",
            "strict",
            "--listen",
            &format!("{dut}:8444"),
            "--builtin",
            "--cert",
            "rsa",
            "--tls-version",
            "TLSv1.3",
        ],
    );
    let strict = "https://rsa.test:8444/bytes/2";
    let strict_resolve = format!("rsa.test:8444:{dut}");
    assert_eq!(curl(&lab, cp, strict, Some(&strict_resolve)).0, 0);
    // Whether a TLS 1.2 client gets through.
    let tls12 = |lab: &Lab| {
        lab.client(&[
            "curl",
            "-sS",
            "--max-time",
            "5",
            "--tls-max",
            "1.2",
            "--cacert",
            &format!("{c}/ca.pem"),
            "--resolve",
            &strict_resolve,
            strict,
        ])
        .status
        .success()
    };
    assert!(!tls12(&lab), "TLS 1.2 refused on the TLS 1.3-only VIP");
    assert!(ok(&dpd, &["vip", "show", "strict"]).contains("tls policy   versions TLSv1.3;"));
    // vip set: the policy changed in place, only the part given.
    ok(
        &dpd,
        &["vip", "set", "strict", "--tls-version", "TLSv1.2,TLSv1.3"],
    );
    assert!(tls12(&lab), "TLS 1.2 taken once the VIP allows it");
    ok(&dpd, &["vip", "set", "strict", "--tickets", "600"]);
    let shown = ok(&dpd, &["vip", "show", "strict"]);
    assert!(
        shown.contains("versions TLSv1.2, TLSv1.3;") && shown.contains("rotated every 600 s"),
        "versions kept, tickets on: {shown}"
    );
    // Bad changes are refused and change nothing.
    assert!(refused(&dpd, &["vip", "set", "strict"]).contains("nothing to change"));
    assert!(refused(&dpd, &["vip", "set", "strict", "--cert", "nope"]).contains("no [[cert]]"));
    assert!(
        refused(&dpd, &["vip", "set", "ghost", "--tls-version", "TLSv1.3"])
            .contains("no VIP has this name")
    );
    // A policy dpd cannot build (checked where TLS configurations are made).
    assert!(refused(&dpd, &["vip", "set", "strict", "--tls-version", "SSLv3"]).contains("SSLv3"));
    // The built-in responder cannot answer a client that negotiated h2.
    assert!(
        refused(&dpd, &["vip", "set", "strict", "--alpn", "h2,http/1.1"]).contains("HTTP/1.x only")
    );
    assert!(tls12(&lab), "the refused changes left the policy as it was");
    ok(
        &dpd,
        &[
            "vip",
            "set",
            "strict",
            "--tls-version",
            "TLSv1.3",
            "--no-tickets",
        ],
    );
    assert!(!tls12(&lab), "TLS 1.3 only again");
    let err = refused(
        &dpd,
        &[
            "vip",
            "add",
            "old",
            "--listen",
            &format!("{dut}:8445"),
            "--builtin",
            "--cert",
            "rsa",
            "--tls-version",
            "SSLv3",
        ],
    );
    assert!(err.contains("vip[") && err.contains("SSLv3"), "{err}");
    ok(&dpd, &["vip", "remove", "strict"]);

    // pool add / show, a VIP forwarding to it, member add / weight / drain
    // / enable / remove
    let b1 = lab.add_client_address(21);
    let b2 = lab.add_client_address(22);
    let _one = HttpBackend::start(&lab, &b1, 8081, "backend-one");
    let _two = HttpBackend::start(&lab, &b2, 8081, "backend-two");
    ok(
        &dpd,
        &[
            "pool",
            "add",
            "app",
            "--member",
            &format!("{b1}:8081"),
            "--health",
            "http",
            "--health-interval-ms",
            "200",
        ],
    );
    ok(
        &dpd,
        &[
            "vip",
            "add",
            "app",
            "--listen",
            &format!("{dut}:8080"),
            "--pool",
            "app",
        ],
    );
    let app_url = format!("http://{dut}:8080/");
    assert_eq!(curl(&lab, cp, &app_url, None).1, "backend-one");
    std::thread::sleep(Duration::from_millis(500)); // a health check or two
    let pool = ok(&dpd, &["pool", "show", "app"]);
    assert!(pool.contains(&format!("{b1}:8081")), "{pool}");
    assert!(pool.contains("http GET / expects 200"), "{pool}");
    assert!(pool.contains(" up "), "{pool}");
    ok(
        &dpd,
        &[
            "member",
            "add",
            "app",
            &format!("{b2}:8081"),
            "--weight",
            "2",
        ],
    );
    ok(
        &dpd,
        &["member", "weight", "app", &format!("{b2}:8081"), "3"],
    );
    ok(&dpd, &["member", "drain", "app", &format!("{b1}:8081")]);
    for _ in 0..4 {
        assert_eq!(curl(&lab, cp, &app_url, None).1, "backend-two");
    }
    let members = json(&dpd, &["pool", "show", "app"]);
    assert_eq!(members["pools"][0]["members"][0]["state"], "drain");
    assert_eq!(members["pools"][0]["members"][1]["weight"], 3);
    ok(&dpd, &["member", "enable", "app", &format!("{b1}:8081")]);
    ok(&dpd, &["member", "remove", "app", &format!("{b2}:8081")]);
    for _ in 0..3 {
        assert_eq!(curl(&lab, cp, &app_url, None).1, "backend-one");
    }
    assert!(ok(&dpd, &["pool", "list"]).contains("pool app (round_robin) for app"));

    // stats, per core, watch
    let stats = ok(&dpd, &["stats"]);
    assert!(stats.contains("vip app: connections"), "{stats}");
    assert!(ok(&dpd, &["stats", "--per-core"]).contains("core 1 (configuration"));
    let watch = ok(&dpd, &["stats", "--watch", "0.2", "--count", "2"]);
    assert_eq!(watch.lines().count(), 3, "header and two lines: {watch}");
    assert!(watch.contains("CONN/S"), "{watch}");
    assert!(watch.contains("ACTIVE TIME-WAIT"), "{watch}");
    let rows = ok(&dpd, &["--json", "stats", "--watch", "0.2", "--count", "2"]);
    for row in rows.lines() {
        let v: serde_json::Value = serde_json::from_str(row).unwrap();
        assert!(v["busy_percent"].as_f64().is_some(), "{row}");
        assert!(v["time_wait"].as_u64().is_some(), "{row}");
    }

    // tickets rotate
    assert!(ok(&dpd, &["tickets", "rotate"]).contains("ticket keys rotated"));

    // capture, while a client talks to the plain VIP
    let pcap = dpd.dir.path().join("p0.pcap");
    let capture = {
        let (sock, pcap) = (dpd.socket.clone(), pcap.clone());
        std::thread::spawn(move || {
            run(Command::new(bin("dpctl"))
                .arg("--socket")
                .arg(sock)
                .args(["capture", "--port", "p0", "--count", "6", "--file"])
                .arg(pcap))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(curl(&lab, cp, &format!("http://{dut}/bytes/10"), None).0, 0);
    let out = capture.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("6 frames written"));
    let frames = read_pcap(&pcap);
    assert_eq!(frames.len(), 6);
    assert!(
        frames
            .iter()
            .all(|f| f.len() >= 14 && (f[12..14] == [0x08, 0x00] || f[12..14] == [0x08, 0x06])),
        "Ethernet frames carrying IPv4 or ARP"
    );
    assert!(refused(
        &dpd,
        &["capture", "--port", "nope", "--file", "/tmp/x.pcap"]
    )
    .contains("no port is named \"nope\""));
    // A capture longer than dpctl's usual 10 s wait for a reply: dpctl
    // waits it out, other commands are answered meanwhile, and a second
    // capture is refused while it runs.
    let long = {
        let (sock, pcap) = (dpd.socket.clone(), dpd.dir.path().join("long.pcap"));
        std::thread::spawn(move || {
            run(Command::new(bin("dpctl"))
                .arg("--socket")
                .arg(sock)
                .args(["capture", "--port", "p0", "--count", "100000"])
                .args(["--timeout", "11", "--file"])
                .arg(pcap))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    assert!(ok(&dpd, &["status"]).contains("p0"));
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "status answered during a capture in {:?}",
        t0.elapsed()
    );
    assert!(refused(
        &dpd,
        &["capture", "--port", "p0", "--file", "/tmp/second.pcap"]
    )
    .contains("a capture is already running"));
    let out = long.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("frames written"));

    // config show / save (to a file, and back to dpd's own file)
    let shown = ok(&dpd, &["config", "show"]);
    assert!(shown.contains("name = \"second\""), "{shown}");
    let saved = dpd.dir.path().join("saved.toml");
    ok(&dpd, &["config", "save", saved.to_str().unwrap()]);
    let check = run(Command::new(bin("dpd"))
        .arg("--check")
        .arg("--config")
        .arg(&saved));
    assert!(
        check.status.success(),
        "the saved configuration is valid: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(
        text.contains("[[pool]]") && text.contains("name = \"rsa\""),
        "{text}"
    );
    ok(&dpd, &["config", "save"]);
    let own = std::fs::read_to_string(dpd.dir.path().join("dpd.toml")).unwrap();
    assert!(own.contains("name = \"second\""), "{own}");

    // removals: in use first, then free
    assert!(refused(&dpd, &["pool", "remove", "app"]).contains("VIP app forwards to it"));
    ok(&dpd, &["vip", "remove", "app"]);
    ok(&dpd, &["pool", "remove", "app"]);
    assert!(refused(&dpd, &["cert", "remove", "rsa"]).contains("VIP second serves it"));
    ok(&dpd, &["vip", "remove", "second"]);
    ok(&dpd, &["cert", "remove", "rsa"]);
    assert_eq!(curl(&lab, cp, url, Some(&resolve)).0, 7, "VIP gone");

    // cert rotate: the new chain is served
    rotate(&dpd, &c, "cert-b");
    assert_eq!(
        served_fingerprint(&lab, &format!("{dut}:443"), "p256.test"),
        file_fingerprint(&cp.join("cert-b.pem"))
    );

    // completions need no dpd
    let o = run(Command::new(bin("dpctl")).args(["completions", "bash"]));
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("_dpctl"));

    // Every change was logged with its configuration number.
    let log = dpd.log_text();
    assert!(
        log.contains("configuration 2: certificate rsa added"),
        "{log}"
    );
}

/// Frames of a pcap file (little-endian, as dpd writes it).
fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "pcap magic");
    let mut frames = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        frames.push(b[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    frames
}

/// A dpbench run from the client namespace: `kind` against `port` for
/// `secs`, its results.json.
fn dpbench(lab: &Lab, kind: &str, port: u16, secs: u32, out: &Path) -> Child {
    let args = e2e::dpbench_args(kind, &lab.dut_ip(), port, secs, out, &[]);
    lab.client_command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dpbench")
}

#[test]
fn certificate_rotation_during_a_cps_run_fails_no_handshake() {
    let certs = certs_dir();
    let cp = certs.path();
    let c = cp.display().to_string();
    let lab = Lab::up("cr");
    let dpd = start_web(&lab, cp);
    let out = tempfile::tempdir().unwrap();
    let load = dpbench(&lab, "cps", 443, 6, out.path());
    std::thread::sleep(Duration::from_millis(1500));
    // Swap back and forth every 300 ms while handshakes go on, ending on B.
    let mut rotations = 0;
    for i in 0..10 {
        let file = if i % 2 == 0 { "cert-b" } else { "cert-a" };
        rotate(&dpd, &c, file);
        rotations += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    rotate(&dpd, &c, "cert-b");
    let (conns, errors) = dpbench_result(load, out.path());
    let stats = dpd.stats();
    eprintln!(
        "{rotations} rotations during {conns} connections: {errors} client errors, {} TLS failures",
        stats.tls_failures
    );
    assert!(conns > 500, "the load ran: {conns} connections");
    assert_eq!(errors, 0, "no connection failed during rotations");
    assert_eq!(stats.tls_failures, 0, "no handshake failed in dpd");
    assert_eq!(
        served_fingerprint(&lab, &format!("{}:443", lab.dut_ip()), "p256.test"),
        file_fingerprint(&cp.join("cert-b.pem")),
        "the new certificate is served"
    );
}

#[test]
fn vips_added_and_removed_under_load() {
    let certs = certs_dir();
    let cp = certs.path();
    let lab = Lab::up("va");
    let dpd = start_web(&lab, cp);
    let dut = lab.dut_ip();
    let out = tempfile::tempdir().unwrap();
    let load = dpbench(&lab, "cps", 443, 5, out.path());
    std::thread::sleep(Duration::from_millis(1000));
    for round in 0..4 {
        let port = 9000 + round;
        ok(
            &dpd,
            &[
                "vip",
                "add",
                "extra",
                "--listen",
                &format!("{dut}:{port}"),
                "--builtin",
                "--cert",
                "web-cert",
            ],
        );
        let (code, body) = curl(
            &lab,
            cp,
            &format!("https://p256.test:{port}/bytes/3"),
            Some(&format!("p256.test:{port}:{dut}")),
        );
        assert_eq!((code, body.len()), (0, 3), "the added VIP serves at once");
        ok(&dpd, &["vip", "remove", "extra"]);
        let (code, _) = curl(
            &lab,
            cp,
            &format!("https://p256.test:{port}/bytes/3"),
            Some(&format!("p256.test:{port}:{dut}")),
        );
        assert_eq!(code, 7, "the removed VIP refuses connections");
    }
    let (conns, errors) = dpbench_result(load, out.path());
    assert!(conns > 300, "the load ran: {conns} connections");
    assert_eq!(
        errors, 0,
        "the loaded VIP lost nothing while others changed"
    );
    assert_eq!(dpd.stats().tls_failures, 0);
}

#[test]
fn bad_requests_get_clear_errors_and_change_nothing() {
    let certs = certs_dir();
    let cp = certs.path();
    let c = cp.display().to_string();
    std::fs::write(
        cp.join("garbage.pem"),
        "-----BEGIN CERTIFICATE-----\nnot base64\n",
    )
    .unwrap();
    let lab = Lab::up("br");
    let dpd = start_web(&lab, cp);
    let dut = lab.dut_ip();
    let before = ok(&dpd, &["config", "show"]);
    let cert_args = |name: &str, pem: &str, key: &str| -> Vec<String> {
        vec![
            "cert".into(),
            "add".into(),
            name.into(),
            "--cert".into(),
            format!("{c}/{pem}"),
            "--key".into(),
            format!("{c}/{key}"),
        ]
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["vip".into(), "remove".into(), "nope".into()],
            "no VIP has this name",
        ),
        (
            vec!["vip".into(), "show".into(), "nope".into()],
            "no VIP is named",
        ),
        (cert_args("bad", "garbage.pem", "p256.key"), "garbage.pem"),
        (
            cert_args("mismatch", "rsa.pem", "p256.key"),
            "does not match",
        ),
        (
            cert_args("web-cert", "rsa.pem", "rsa.key"),
            "exists already",
        ),
        (
            vec![
                "vip".into(),
                "add".into(),
                "web".into(),
                "--listen".into(),
                format!("{dut}:444"),
                "--builtin".into(),
            ],
            "a VIP with this name exists already",
        ),
        (
            vec![
                "vip".into(),
                "add".into(),
                "clash".into(),
                "--listen".into(),
                format!("{dut}:443"),
                "--builtin".into(),
            ],
            "another VIP listens here",
        ),
        (
            vec![
                "vip".into(),
                "add".into(),
                "x".into(),
                "--listen".into(),
                format!("{dut}:445"),
                "--builtin".into(),
                "--cert".into(),
                "missing".into(),
            ],
            "no [[cert]] has this name",
        ),
        (
            vec![
                "pool".into(),
                "add".into(),
                "p".into(),
                "--member".into(),
                format!("{}.2:80@300", lab.net),
            ],
            "must be 1 to 256",
        ),
        (
            vec![
                "member".into(),
                "weight".into(),
                "nope".into(),
                "1.2.3.4:80".into(),
                "2".into(),
            ],
            "no pool has this name",
        ),
    ];
    for (args, want) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = refused(&dpd, &args);
        assert!(err.contains(want), "dpctl {args:?}: {err:?} lacks {want:?}");
        assert_eq!(ok(&dpd, &["config", "show"]), before, "after {args:?}");
    }
    // Malformed and unknown requests straight on the socket.
    let mut client = control::api::Client::connect(&dpd.socket).unwrap();
    for (line, want) in [
        (&b"{\"cmd\": \"vip_add\"\n"[..], "malformed request"),
        (b"{\"cmd\": \"vip_add\", \"vip\": {}}\n", "missing field"),
        (b"{\"cmd\": \"reboot\"}\n", "unknown variant"),
        (
            b"{\"cmd\": \"member_weight\", \"pool\": \"p\", \"addr\": \"a\", \"weight\": -1}\n",
            "invalid value",
        ),
    ] {
        let r = client.call_raw(line).unwrap();
        assert!(!r.ok);
        let e = r.error.unwrap();
        assert!(e.contains(want), "{e:?} lacks {want:?}");
    }
    // Still version 1, still serving.
    assert_eq!(json(&dpd, &["status"])["status"]["config_version"], 1);
    let (code, body) = curl(
        &lab,
        cp,
        "https://p256.test/bytes/4",
        Some(&format!("p256.test:443:{dut}")),
    );
    assert_eq!((code, body.len()), (0, 4));
}

#[test]
fn control_socket_is_root_only() {
    let certs = certs_dir();
    let lab = Lab::up("so");
    let dpd = start_web(&lab, certs.path());
    // Let others reach the folder, so only the socket's own mode decides.
    let dir: PathBuf = dpd.socket.parent().unwrap().to_path_buf();
    let o = run(Command::new("chmod").arg("755").arg(&dir));
    assert!(o.status.success());
    let meta = run(Command::new("stat").args(["-c", "%a %U"]).arg(&dpd.socket));
    assert_eq!(String::from_utf8_lossy(&meta.stdout).trim(), "600 root");
    // A copy of dpctl that user nobody may run.
    let tools = tempfile::tempdir().unwrap();
    let dpctl_copy = tools.path().join("dpctl");
    std::fs::copy(bin("dpctl"), &dpctl_copy).unwrap();
    for p in [tools.path(), dpctl_copy.as_path()] {
        assert!(run(Command::new("chmod").arg("755").arg(p))
            .status
            .success());
    }
    let o = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&dpctl_copy)
        .arg("--socket")
        .arg(&dpd.socket)
        .arg("status"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains("run dpctl as root"), "{err}");
    // Root still gets in.
    assert!(ok(&dpd, &["status"]).contains("configuration 1"));
}

#[test]
fn logs_follow_the_log_section() {
    let lab = Lab::up("lg");
    let dpd = Dpd::start(&lab, |s| {
        format!(
            "{}\n[log]\nlevel = \"info\"\nformat = \"json\"\n",
            lab.config_with_vip("net_af_packet", s)
        )
    });
    ok(&dpd, &["vip", "disable", "plain"]);
    let log = dpd.log_text();
    // Every line is a JSON object, DPDK's own (EAL, drivers) too.
    let ours: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}\n{log}")))
        .collect();
    assert!(ours.len() >= 5, "{log}");
    assert!(ours
        .iter()
        .all(|v| v["ts"].is_string() && v["level"].is_string() && v["target"].is_string()));
    assert!(
        ours.iter()
            .any(|v| v["msg"] == "configuration 2: VIP plain disabled" && v["level"] == "INFO"),
        "{log}"
    );
    assert!(
        ours.iter()
            .any(|v| v["target"] == "dpdk"
                && v["msg"].as_str().is_some_and(|m| m.starts_with("EAL: "))),
        "DPDK's EAL lines, target dpdk: {log}"
    );

    // level = "warn": start-up information is not logged.
    let lab2 = Lab::up("lq");
    let quiet = Dpd::start(&lab2, |s| {
        format!(
            "{}\n[log]\nlevel = \"warn\"\n",
            lab2.config("net_af_packet", s, "")
        )
    });
    let log = quiet.log_text();
    assert!(!log.contains("control socket"), "{log}");
    assert!(
        !log.contains("EAL: Detected"),
        "DPDK's information lines follow the level too: {log}"
    );
}

/// Waits up to 10 s for `dpctl vip list` to satisfy `want`; the list.
fn vips_until(dpd: &Dpd, want: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let list = ok(dpd, &["vip", "list"]);
        if want(&list) {
            return list;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "vip list never changed as wanted:\n{list}\n{}",
            dpd.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP (which used to end dpd: no handler) and `dpctl config reload`
/// read dpd's file again: a VIP added there is served, and a certificate
/// renewed in place (same file names, as an ACME client does) is served;
/// a file that does not parse, or that changes `[tcp]`, is refused with
/// its reason and nothing changed, dpd serving on.
#[test]
fn a_reload_applies_the_file_and_refuses_what_needs_a_restart() {
    let certs = certs_dir();
    let cp = certs.path();
    let lab = Lab::up("rl");
    let dpd = start_web(&lab, cp);
    let dut = lab.dut_ip();
    let file = dpd.dir.path().join("dpd.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let with_more = format!(
        "{original}\n[[vip]]\nname = \"more\"\nlisten = \"{dut}:8080\"\nrespond = \"builtin\"\n"
    );
    let more_url = format!("http://{dut}:8080/bytes/3");
    let served = |lab: &Lab| served_fingerprint(lab, &format!("{dut}:443"), "p256.test");
    assert_eq!(served(&lab), file_fingerprint(&cp.join("cert-a.pem")));

    // Renewed in place, and a VIP more; SIGHUP.
    for ext in ["pem", "key"] {
        std::fs::copy(
            cp.join(format!("cert-b.{ext}")),
            cp.join(format!("cert-a.{ext}")),
        )
        .unwrap();
    }
    std::fs::write(&file, &with_more).unwrap();
    let hup = |dpd: &Dpd| {
        let o = run(Command::new("kill").args(["-HUP", &dpd.pid().to_string()]));
        assert!(o.status.success(), "kill -HUP");
    };
    hup(&dpd);
    vips_until(&dpd, |l| l.contains("more"));
    assert_eq!(curl(&lab, cp, &more_url, None), (0, "012".to_string()));
    assert_eq!(
        served(&lab),
        file_fingerprint(&cp.join("cert-b.pem")),
        "the certificate renewed in place is served"
    );
    assert!(
        dpd.log_text().contains("reloaded from"),
        "{}",
        dpd.log_text()
    );

    // A file that does not parse: refused by both, nothing changed.
    std::fs::write(&file, format!("{with_more}\nthis = = not toml\n")).unwrap();
    let e = refused(&dpd, &["config", "reload"]);
    assert!(
        e.contains("not reloaded") && e.contains("invalid config"),
        "{e}"
    );
    hup(&dpd);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !dpd.log_text().contains("SIGHUP: not reloaded") {
        assert!(std::time::Instant::now() < deadline, "{}", dpd.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    // A section only a restart applies.
    std::fs::write(
        &file,
        format!("{with_more}\n[tcp]\nmax_connections = 5000\n"),
    )
    .unwrap();
    let e = refused(&dpd, &["config", "reload"]);
    assert!(e.contains("[tcp]") && e.contains("restart"), "{e}");
    // Where an operator looks first.
    let status = ok(&dpd, &["status"]);
    assert!(
        status.contains("last reload") && status.contains("REFUSED: not reloaded: [tcp]"),
        "{status}"
    );
    let j = json(&dpd, &["status"]);
    assert_eq!(j["status"]["last_reload"]["ok"], false, "{j}");
    assert!(ok(&dpd, &["vip", "list"]).contains("more"));
    assert_eq!(curl(&lab, cp, &more_url, None), (0, "012".to_string()));

    // The VIP taken out of the file again.
    std::fs::write(&file, &original).unwrap();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    vips_until(&dpd, |l| !l.contains("more"));
    let j = json(&dpd, &["status"]);
    assert_eq!(j["status"]["last_reload"]["ok"], true, "{j}");
    assert!(
        j["status"]["last_reload"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("reloaded from ")),
        "{j}"
    );
}

/// Nodes sharing ticket keys through a key file rotate them by rewriting
/// the file and reloading each node, as with nginx: a reload reads the
/// file again. Found as it was, a ticket issued before still resumes;
/// rewritten, it does not, and new tickets do.
#[test]
fn a_reload_reads_a_rewritten_ticket_key_file() {
    use std::os::unix::fs::PermissionsExt;
    let certs = certs_dir();
    let cp = certs.path();
    let key = cp.join("ticket.key");
    let write_key = |byte: u8| {
        std::fs::write(&key, [byte; 48]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write_key(7);
    let lab = Lab::up("tk");
    let dut = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        format!(
            "{}\n[[cert]]\nname = \"web-cert\"\ncert = \"{c}/cert-a.pem\"\nkey = \"{c}/cert-a.key\"\n\n\
             [[vip]]\nname = \"web\"\nlisten = \"{dut}:443\"\nrespond = \"builtin\"\ncerts = [\"web-cert\"]\n\
             tls = {{ tickets = {{ rotate_s = 3600, key_file = \"{k}\" }} }}\n",
            lab.config("net_af_packet", s, ""),
            c = cp.display(),
            k = key.display()
        )
    });
    let session = cp.join("session.pem");
    let s_client = |extra: &str| {
        let sh = format!(
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | openssl s_client -connect {dut}:443 \
             -servername p256.test -CAfile {}/ca.pem -ign_eof {extra} 2>&1",
            cp.display()
        );
        String::from_utf8_lossy(&lab.client(&["sh", "-c", &sh]).stdout).into_owned()
    };
    let sess_in = format!("-sess_in {}", session.display());
    let sess_out = format!("-sess_out {}", session.display());
    let first = s_client(&sess_out);
    assert!(first.contains("New, TLSv1.3"), "{first}");

    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    let again = s_client(&sess_in);
    assert!(again.contains("Reused, TLSv1.3"), "the same file: {again}");

    write_key(9);
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    let after = s_client(&format!("{sess_in} {sess_out}"));
    assert!(
        after.contains("New, TLSv1.3"),
        "a ticket under the old keys: {after}"
    );
    let next = s_client(&sess_in);
    assert!(
        next.contains("Reused, TLSv1.3"),
        "a ticket under the new keys: {next}"
    );
}

/// At 3 a.m., more (or less) logging without a restart: `dpctl log level`
/// replaces the filter at once, `status` shows it, a filter that does not
/// read is refused, and a reload takes a changed `[log] level` but not a
/// changed format.
#[test]
fn the_log_level_changes_while_dpd_runs() {
    let lab = Lab::up("lg");
    let dpd = Dpd::start(&lab, |s| lab.config_with_vip("net_af_packet", s));
    let file = dpd.dir.path().join("dpd.toml");
    let original = std::fs::read_to_string(&file).unwrap();

    assert!(ok(&dpd, &["log", "level", "warn"]).contains("log level warn"));
    assert_eq!(ok(&dpd, &["log", "level"]).trim(), "warn");
    assert!(ok(&dpd, &["status"]).contains("log level: warn"));
    ok(&dpd, &["vip", "disable", "plain"]);
    ok(&dpd, &["log", "level", "info,dataplane::app=debug"]);
    ok(&dpd, &["vip", "enable", "plain"]);
    // Written before the reply went out.
    let log = dpd.log_text();
    assert!(log.contains(": VIP plain enabled"), "{log}");
    assert!(
        !log.contains(": VIP plain disabled"),
        "logged at warn: {log}"
    );
    assert_eq!(
        json(&dpd, &["status"])["status"]["log_level"],
        "info,dataplane::app=debug"
    );

    let e = refused(&dpd, &["log", "level", "debgu"]);
    assert!(e.contains("log.level") && e.contains("not a level"), "{e}");
    assert_eq!(
        ok(&dpd, &["log", "level"]).trim(),
        "info,dataplane::app=debug"
    );

    // The file's level on reload, and its format: lines after it are JSON.
    std::fs::write(&file, format!("{original}\n[log]\nlevel = \"error\"\n")).unwrap();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    assert_eq!(ok(&dpd, &["log", "level"]).trim(), "error");
    std::fs::write(
        &file,
        format!("{original}\n[log]\nlevel = \"info\"\nformat = \"json\"\n"),
    )
    .unwrap();
    let before = dpd.log_text().len();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    ok(&dpd, &["vip", "disable", "plain"]);
    let log = dpd.log_text();
    let lines: Vec<serde_json::Value> = log[before..]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}\n{log}")))
        .collect();
    assert!(lines.iter().any(|v| v["msg"] == "log format json"), "{log}");
    assert!(
        (lines.iter()).any(|v| v["msg"]
            .as_str()
            .is_some_and(|m| m.ends_with("VIP plain disabled"))),
        "{log}"
    );
    // And back.
    std::fs::write(&file, &original).unwrap();
    let before = dpd.log_text().len();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    let log = dpd.log_text();
    assert!(
        log[before..].contains("INFO  dataplane::controller: log format text"),
        "{log}"
    );
}

/// The shipped systemd unit: `systemd-analyze verify` finds nothing to say
/// (with the binaries where they are here), a reload goes through `dpctl
/// config reload` on the socket the configuration names by default (so a
/// refused reload fails `systemctl reload`), a start is checked first with
/// `dpd --check`, and a stop waits longer than the default drain.
#[test]
fn the_systemd_unit_verifies_and_reloads_through_dpctl() {
    let unit = std::fs::read_to_string(e2e::repo_root().join("examples/tlsdp.service")).unwrap();
    let key = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in the unit"))
            .to_string()
    };
    let defaults = control::config::Control::default();
    assert_eq!(
        key("ExecReload"),
        format!(
            "/usr/local/bin/dpctl --socket {} config reload",
            defaults.socket.display()
        )
    );
    assert!(key("ExecStartPre").contains("dpd --check --config /etc/tlsdp/dpd.toml"));
    assert_eq!(
        defaults.socket.parent(),
        Some(Path::new("/run").join(key("RuntimeDirectory")).as_path())
    );
    let stop: u32 = key("TimeoutStopSec").parse().unwrap();
    assert!(stop > defaults.drain_timeout_s, "{stop} s");
    let dir = tempfile::tempdir().unwrap();
    let here = bin("dpd");
    let here = here.parent().unwrap();
    let copy = dir.path().join("tlsdp.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/", &format!("{}/", here.display())),
    )
    .unwrap();
    let o = run(Command::new("systemd-analyze").arg("verify").arg(&copy));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && said.trim().is_empty(), "{said}");
}

/// The lines of the connection log `file` once it has at least `n`
/// (parsed), within 10 s; what it has then otherwise.
fn conn_log_lines(file: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
            .collect();
        if lines.len() >= n || std::time::Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `[log] connection_ends` and the stop. Logging only `stopped`, a curl
/// that ends `closed` is not logged, and `status` says so; a reload
/// naming `closed` too logs the next one. A client still connected when
/// dpd stops (SIGTERM's drain out of time) gets a reset at once, rather
/// than waiting on a peer that is gone, and its line says `stopped`.
#[test]
fn a_client_open_when_dpd_stops_is_reset_and_logged_as_stopped() {
    let lab = Lab::up("cst");
    let dut = lab.dut_ip();
    let mut dpd = Dpd::start(&lab, |s| {
        let log = s.with_file_name("connections.log");
        format!(
            "{}\n[log]\nconnections = \"{}\"\nconnection_ends = [\"stopped\"]\n",
            lab.config_with_vip("net_af_packet", s)
                .replace("[control]\n", "[control]\ndrain_timeout_s = 1\n"),
            log.display()
        )
    });
    let log = dpd.dir.path().join("connections.log");
    let url = format!("http://{dut}/bytes/10");
    let fetch = || lab.client(&["curl", "-sS", "--max-time", "5", &url]);
    assert_eq!(String::from_utf8_lossy(&fetch().stdout), "0123456789");
    let s = dpd.stats_when(Duration::from_secs(10), |s| {
        s.tcp_accepted == 1 && s.tcp_active == 0
    });
    assert_eq!(
        (s.tcp_active, s.conn_log_records),
        (0, 0),
        "closed: not logged"
    );
    assert!(ok(&dpd, &["status"]).contains("only stopped"));
    let file = dpd.dir.path().join("dpd.toml");
    let config = std::fs::read_to_string(&file).unwrap();
    let both = "connection_ends = [\"closed\", \"stopped\"]";
    std::fs::write(
        &file,
        config.replace("connection_ends = [\"stopped\"]", both),
    )
    .unwrap();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    assert!(ok(&dpd, &["status"]).contains("only closed stopped"));
    assert_eq!(String::from_utf8_lossy(&fetch().stdout), "0123456789");
    let lines = conn_log_lines(&log, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["end"], "closed", "{}", lines[0]);
    // Half a request head, then it waits for an answer.
    let client = lab.half_request_client(30);
    let open = dpd.stats_when(Duration::from_secs(10), |s| {
        s.tcp_accepted == 3 && s.tcp_active == 1
    });
    assert_eq!(open.tcp_active, 1, "{}", dpd.log_text());
    assert!(dpd
        .stop_with(libc::SIGTERM, Duration::from_secs(30))
        .success());
    e2e::assert_reset(client);
    let text = dpd.log_text();
    assert!(
        text.contains("drained (1 connections still open): stopping"),
        "{text}"
    );
    assert!(
        text.contains("reset 1 connections still open at stop"),
        "{text}"
    );
    let lines = conn_log_lines(&log, 2);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1]["end"], "stopped", "{}", lines[1]);
    assert_eq!(lines[1]["bytes_in"], 8, "{}", lines[1]);
}

/// `[log] connections`: curl over plain HTTP and TLS, and a client sending
/// a TLS VIP bytes that are not TLS, each get one JSON line as their
/// connection ends (VIP, client, end, role, requests, bytes, TLS version,
/// SNI, failure); `status` counts them. Renamed away and reloaded (what
/// logrotate does), the log starts a new file; a reload naming a file
/// that cannot be opened is refused and logging goes on; a reload without
/// the setting turns it off.
#[test]
fn the_connection_log_gets_a_line_per_connection_and_follows_reloads() {
    let certs = certs_dir();
    let cp = certs.path();
    let c = cp.display();
    let lab = Lab::up("cl");
    let dut = lab.dut_ip();
    let mut dpd = Dpd::start(&lab, |s| {
        let log = s.with_file_name("connections.log");
        format!(
            "{}\n[log]\nconnections = \"{}\"\n\n[[cert]]\nname = \"web-cert\"\ncert = \"{c}/cert-a.pem\"\nkey = \"{c}/cert-a.key\"\n\n[[vip]]\nname = \"web\"\nlisten = \"{dut}:443\"\nrespond = \"builtin\"\ncerts = [\"web-cert\"]\n",
            lab.config_with_vip("net_af_packet", s),
            log.display()
        )
    });
    let log = dpd.dir.path().join("connections.log");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o640, "made by dpd, not readable by others");
    assert!(ok(&dpd, &["status"]).contains(&format!("connection log: {}", log.display())));

    let plain = format!("http://{dut}/bytes/10");
    let tls_url = "https://p256.test/bytes/100";
    let resolve = format!("p256.test:443:{dut}");
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    let (code, body) = curl(&lab, cp, tls_url, Some(&resolve));
    assert_eq!((code, body.len()), (0, 100));
    let not_tls = format!(
        "exec 3<>/dev/tcp/{dut}/443; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3 >/dev/null"
    );
    lab.client(&["timeout", "5", "bash", "-c", &not_tls]);

    let lines = conn_log_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}\n{}", dpd.log_text());
    let client_ip = format!("{}.2:", lab.dut_ip().rsplit_once('.').unwrap().0);
    for l in &lines {
        assert!(l["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
        assert!(
            l["client"]
                .as_str()
                .is_some_and(|a| a.starts_with(&client_ip)),
            "{l}"
        );
        assert!(l["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{l}");
    }
    let by_vip = |vip: &str, end: &str| {
        (lines.iter())
            .find(|l| l["vip"] == vip && l["end"] == end)
            .unwrap_or_else(|| panic!("no {vip} line ending {end}: {lines:?}"))
            .clone()
    };
    let p = by_vip("plain", "closed");
    assert_eq!(p["vip_addr"], format!("{dut}:80"));
    assert_eq!(
        (p["role"].as_str(), p["requests"].as_u64()),
        (Some("http"), Some(1))
    );
    assert!(p["bytes_in"].as_u64().is_some_and(|n| n > 20), "{p}");
    assert!(p["bytes_out"].as_u64().is_some_and(|n| n > 10), "{p}");
    assert!(p.get("tls_handshake").is_none(), "{p}");
    // curl leaves with our close_notify unread (its kernel resets it),
    // having had all it was sent before: closed.
    let t = (lines.iter())
        .find(|l| l["vip"] == "web" && l["tls_handshake"] == "done")
        .unwrap_or_else(|| panic!("no TLS line: {lines:?}"));
    assert_eq!(t["end"], "closed", "{t}");
    assert_eq!(
        (t["role"].as_str(), t["requests"].as_u64()),
        (Some("tls"), Some(1))
    );
    assert_eq!(t["tls_handshake"], "done");
    assert_eq!(t["tls_version"], "TLSv1.3");
    assert_eq!(t["tls_key"], "ECDSA-P256");
    assert_eq!(t["sni"], "p256.test");
    assert_eq!(t["tls_close_notify"], true, "curl closes its session: {t}");
    let (hs, all) = (t["tls_handshake_ms"].as_f64(), t["duration_ms"].as_f64());
    assert!(
        hs.zip(all).is_some_and(|(hs, all)| hs > 0.0 && hs <= all),
        "{t}"
    );
    assert!(t["bytes_out"].as_u64().is_some_and(|n| n > 100), "{t}");
    let f = by_vip("web", "tls_failure");
    assert_eq!(f["tls_handshake"], "failed");
    assert!(f["tls_failure"].is_string(), "{f}");
    let j = json(&dpd, &["status"]);
    assert_eq!(j["status"]["conn_log"]["written"], 3, "{j}");
    assert_eq!(j["status"]["conn_log"]["dropped"], 0, "{j}");
    assert_eq!(dpd.stats().conn_log_records, 3);

    // logrotate: renamed away, then SIGUSR1: a new file, the old one
    // whole, and nothing else read again (a level set at run time stays,
    // where a reload of the file would have put the file's back).
    ok(&dpd, &["log", "level", "debug"]);
    let rotated = dpd.dir.path().join("connections.log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let o = run(Command::new("kill").args(["-USR1", &dpd.pid().to_string()]));
    assert!(o.status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !log.exists() {
        assert!(std::time::Instant::now() < deadline, "{}", dpd.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ok(&dpd, &["log", "level"]).contains("debug"));
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    let lines = conn_log_lines(&log, 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["vip"], "plain");
    assert_eq!(conn_log_lines(&rotated, 3).len(), 3);
    // Again with `dpctl log reopen`.
    let rotated2 = dpd.dir.path().join("connections.log.2");
    std::fs::rename(&log, &rotated2).unwrap();
    assert!(ok(&dpd, &["log", "reopen"]).contains("opened again"));
    assert!(log.exists());
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    assert_eq!(conn_log_lines(&log, 1).len(), 1);
    assert_eq!(conn_log_lines(&rotated2, 1).len(), 1);
    ok(&dpd, &["log", "level", "info"]);

    // A file that cannot be opened: refused, the log goes on where it was.
    let file = dpd.dir.path().join("dpd.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let elsewhere = original.replace(
        &log.display().to_string(),
        "/nonexistent-dir/connections.log",
    );
    std::fs::write(&file, &elsewhere).unwrap();
    let e = refused(&dpd, &["config", "reload"]);
    assert!(
        e.contains("log.connections") && e.contains("/nonexistent-dir"),
        "{e}"
    );
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    assert_eq!(conn_log_lines(&log, 2).len(), 2);

    // Taken out of the file: off.
    let without: String = (original.lines())
        .filter(|l| !l.starts_with("connections = "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, &without).unwrap();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    assert!(!ok(&dpd, &["status"]).contains("connection log"));
    let before = dpd.stats();
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    let after = dpd.stats_when(Duration::from_secs(10), |s| {
        s.tcp_accepted > before.tcp_accepted && s.tcp_active == 0
    });
    assert_eq!(after.tcp_active, 0, "curl's connection ended");
    assert_eq!(
        after.conn_log_records, before.conn_log_records,
        "none queued once off"
    );
    assert_eq!(conn_log_lines(&log, 2).len(), 2);
    assert!(dpd.log_text().contains("connection log: no longer writing"));
    assert!(refused(&dpd, &["log", "reopen"]).contains("no connection log"));

    // On again; a connection that ends as dpd is told to stop is in the
    // file once dpd has exited.
    std::fs::write(&file, &original).unwrap();
    assert!(ok(&dpd, &["config", "reload"]).contains("reloaded from"));
    assert_eq!(curl(&lab, cp, &plain, None), (0, "0123456789".into()));
    let queued = dpd.stats_when(Duration::from_secs(10), |s| {
        s.conn_log_records > after.conn_log_records
    });
    assert_eq!(queued.conn_log_records, after.conn_log_records + 1);
    assert!(dpd
        .stop_with(libc::SIGTERM, Duration::from_secs(30))
        .success());
    assert_eq!(
        conn_log_lines(&log, 3).len(),
        3,
        "written before dpd exited"
    );
}

/// `vip remove` of a VIP on an address of its own, on two engines, while
/// a client downloads from it: the address stays dpd's (ping and ARP are
/// answered, `status` lists it) and the download ends byte-exact; once it
/// has, the address goes (within a few of the control thread's ticks) and
/// a new connection to it finds no one.
#[test]
fn a_removed_vips_address_stays_until_its_download_ends() {
    let lab = Lab::up("lg");
    let vip = format!("{}.9", lab.net);
    let dut = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        format!(
            "[eal]\nlcores = [1, 2]\ncpus = [0, 1]\nidle_sleep_us = 20\n\n\
             [[port]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=veth-dut,qpairs=2\"\n\
             address = \"{dut}/24\"\n\n\
             [[vip]]\nname = \"extra\"\nlisten = \"{vip}:80\"\nrespond = \"builtin\"\n\n\
             [control]\nsocket = \"{}\"\n",
            s.display()
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let bytes = 6_000_000;
    let download = lab
        .client_command(&[
            "curl",
            "-sS",
            "--max-time",
            "30",
            "--limit-rate",
            "2M",
            "-o",
            body.to_str().unwrap(),
            "-w",
            "%{http_code} %{size_download}",
            &format!("http://{vip}/bytes/{bytes}"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Under way once its first bytes are written.
    let started = std::time::Instant::now();
    while std::fs::metadata(&body).map_or(0, |m| m.len()) == 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "no download");
        std::thread::sleep(Duration::from_millis(20));
    }
    ok(&dpd, &["vip", "remove", "extra"]);
    let kept = format!("kept for open connections of removed VIPs: {vip}");
    let status = ok(&dpd, &["status"]);
    assert!(status.contains(&kept), "{status}");
    // Its neighbours may ask again: ARP (and ping) still answered.
    let cli = format!("{}-cli", lab.name);
    run(Command::new("ip").args(["-n", &cli, "neigh", "flush", "all"]));
    let ping = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &vip]);
    assert!(
        ping.status.success(),
        "ping {vip}: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    let out = download.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("200 {bytes}"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    e2e::verify_pattern_file(&body, bytes);
    // The last connection ended: the address goes.
    let ended = std::time::Instant::now();
    while ok(&dpd, &["status"]).contains(&kept) {
        assert!(
            ended.elapsed() < Duration::from_secs(5),
            "still kept 5 s after its last connection ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(dpd.log_text().contains(&format!("address {vip} released")));
    let late = lab.client(&[
        "curl",
        "-sS",
        "--connect-timeout",
        "1",
        &format!("http://{vip}/bytes/3"),
    ]);
    assert!(!late.status.success(), "served after its address went");
}
