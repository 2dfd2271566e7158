//! TLS VIPs against real clients over veth: curl and openssl s_client, TLS
//! 1.2 and 1.3, RSA-2048, P-256 and P-384 certificates chosen by SNI,
//! verified against the test CA; byte-exact downloads; refusals.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::{make_cert, make_certs, verify_pattern_file, Dpd, KeySpec, Lab};

/// A TLS VIP on port 443 with the certificates `files` (`FILE.pem` and
/// `FILE.key` in `certs`); the first one's name is the default.
fn tls_config_with(lab: &Lab, socket: &Path, certs: &Path, files: &[&str]) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|n| {
            format!(
                "{{ cert = \"{0}/{n}.pem\", key = \"{0}/{n}.key\" }}",
                certs.display()
            )
        })
        .collect();
    format!(
        "{}\n[[vip]]\nname = \"tls\"\nlisten = \"{}:443\"\nrespond = \"builtin\"\ncerts = [{}]\n",
        lab.config("net_af_packet", socket, ""),
        lab.dut_ip(),
        list.join(", ")
    )
}

/// The VIP with [`make_certs`]' three certificates (p256.test the default).
fn tls_config(lab: &Lab, socket: &Path, certs: &Path) -> String {
    tls_config_with(lab, socket, certs, &["p256", "rsa", "p384"])
}

/// curl from the client namespace to `https://NAME/PATH` on the VIP,
/// verifying against the test CA, the body saved to `out`. `extra` are more
/// curl arguments (TLS versions, groups; a later `--max-time` overrides the
/// 60 s default). Returns success and "http_code size ssl_verify_result"
/// (then stderr).
fn curl(
    lab: &Lab,
    certs: &Path,
    name: &str,
    extra: &[&str],
    path: &str,
    out: &Path,
) -> (bool, String) {
    let resolve = format!("{name}:443:{}", lab.dut_ip());
    let url = format!("https://{name}{path}");
    let ca = certs.join("ca.pem");
    let mut args = vec![
        "curl",
        "-sS",
        "--max-time",
        "60",
        "--cacert",
        ca.to_str().unwrap(),
        "--resolve",
        &resolve,
    ];
    args.extend_from_slice(extra);
    let fmt = "%{http_code} %{size_download} %{ssl_verify_result}";
    args.extend_from_slice(&["-o", out.to_str().unwrap(), "-w", fmt, &url]);
    let o = lab.client(&args);
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// `openssl s_client` to the VIP from the client namespace, verifying the
/// chain against the test CA: sends `request`, waits for the server to close
/// (at most 10 s) and returns stdout then stderr.
fn s_client(lab: &Lab, certs: &Path, args: &[&str], request: &str) -> String {
    let connect = format!("{}:443", lab.dut_ip());
    let ca = certs.join("ca.pem");
    let mut cmd_args = vec![
        "timeout",
        "10",
        "openssl",
        "s_client",
        "-connect",
        &connect,
        "-CAfile",
        ca.to_str().unwrap(),
        "-verify_return_error",
        "-ign_eof",
    ];
    cmd_args.extend_from_slice(args);
    let mut child = lab
        .client_command(&cmd_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(request.as_bytes())
        .expect("request to s_client");
    let o = child.wait_with_output().expect("s_client output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A counter of a by-name map (`tls_groups`, `tls_versions`), 0 if absent.
fn count(map: &BTreeMap<String, u64>, name: &str) -> u64 {
    map.get(name).copied().unwrap_or(0)
}

#[test]
fn curl_over_tls_12_and_13_with_each_key_type() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("tls");
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let out = certs.path().join("body");
    let mut n = 0;
    for tls in [&["--tlsv1.3"][..], &["--tlsv1.2", "--tls-max", "1.2"][..]] {
        for name in ["rsa.test", "p256.test", "p384.test"] {
            let (ok, text) = curl(&lab, certs.path(), name, tls, "/bytes/100000", &out);
            assert!(ok, "{name} {tls:?}: {text}\n{}", dpd.log_text());
            assert_eq!(text, "200 100000 0", "{name} {tls:?}");
            verify_pattern_file(&out, 100_000);
            n += 1;
        }
    }
    // A bigger transfer, byte-exact.
    let (ok, text) = curl(
        &lab,
        certs.path(),
        "p256.test",
        &[],
        "/bytes/20000000",
        &out,
    );
    assert!(ok && text.starts_with("200 20000000"), "{text}");
    verify_pattern_file(&out, 20_000_000);
    std::thread::sleep(Duration::from_millis(50));
    let stats = dpd.stats();
    assert_eq!(stats.tls_handshakes, n + 1, "{stats:?}");
    assert_eq!(stats.tls_failures, 0);
    // Counted by what was negotiated: 3 TLS 1.2 handshakes, 4 TLS 1.3.
    assert_eq!(stats.tls_versions.get("TLSv1.2"), Some(&3), "{stats:?}");
    assert_eq!(stats.tls_versions.get("TLSv1.3"), Some(&4), "{stats:?}");
    assert_eq!(stats.tls_suites.values().sum::<u64>(), n + 1, "{stats:?}");
    assert_eq!(stats.tls_groups.values().sum::<u64>(), n + 1, "{stats:?}");
    assert!(
        !stats.tls_suites.contains_key("other") && !stats.tls_groups.contains_key("other"),
        "{stats:?}"
    );
    // TLS 1.2 with an RSA certificate is an ECDHE_RSA suite.
    assert!(
        stats
            .tls_suites
            .keys()
            .any(|k| k.starts_with("TLS_ECDHE_RSA_")),
        "{stats:?}"
    );
}

#[test]
fn openssl_s_client_verifies_the_chain() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("sc");
    let _dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let text = s_client(
        &lab,
        certs.path(),
        &["-servername", "p384.test"],
        "GET /bytes/10 HTTP/1.0\r\n\r\n",
    );
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(
        text.contains("CN = p384.test"),
        "SNI picked the P-384 certificate: {text}"
    );
    assert!(text.contains("0123456789"), "the response body: {text}");
}

#[test]
fn old_protocols_and_plain_http_are_refused_and_counted() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("old");
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let out = certs.path().join("body");
    let (ok, text) = curl(
        &lab,
        certs.path(),
        "p256.test",
        &["--tlsv1.1", "--tls-max", "1.1"],
        "/",
        &out,
    );
    assert!(!ok, "TLS 1.1 must be refused: {text}");
    // Cleartext HTTP to the TLS port: an alert, the connection closed.
    let o = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "5",
        &format!("http://{}:443/", lab.dut_ip()),
    ]);
    assert!(!o.status.success());
    std::thread::sleep(Duration::from_millis(50));
    let stats = dpd.stats();
    assert!(stats.tls_failures >= 2, "{stats:?}");
    // Still serving.
    let (ok, text) = curl(&lab, certs.path(), "p256.test", &[], "/bytes/10", &out);
    assert!(ok, "{text}");
}

#[test]
fn bad_certificates_are_refused_at_start_naming_the_file() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let dir = certs.path().display();
    let config = format!(
        "[eal]\nlcores = [1]\n[[port]]\nname = \"p0\"\ndevice = \"net_ring0\"\naddress = \"10.97.0.1/24\"\n[[vip]]\nname = \"tls\"\nlisten = \"10.97.0.1:443\"\nrespond = \"builtin\"\ncerts = [{{ cert = \"{dir}/p256.pem\", key = \"{dir}/rsa.key\" }}]\n"
    );
    let (status, stderr) = e2e::dpd_refuses(&config);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("vip[0].certs[0]")
            && stderr.contains("rsa.key")
            && stderr.contains("does not match"),
        "{stderr}"
    );
    let missing = config.replace("p256.pem", "nope.pem");
    let (status, stderr) = e2e::dpd_refuses(&missing);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nope.pem"), "{stderr}");
}

#[test]
fn gnutls_cli_interoperates() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("gnu");
    let _dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let ca = certs.path().join("ca.pem");
    for (name, prio) in [
        ("rsa.test", "NORMAL:-VERS-ALL:+VERS-TLS1.3"),
        ("p384.test", "NORMAL:-VERS-ALL:+VERS-TLS1.2"),
    ] {
        let cmd = format!(
            "printf 'GET /bytes/32 HTTP/1.0\\r\\n\\r\\n' | timeout 10 gnutls-cli --x509cafile {} --sni-hostname {name} --verify-hostname {name} --priority {prio} --port 443 {} 2>&1",
            ca.display(),
            lab.dut_ip()
        );
        let o = lab.client(&["sh", "-c", &cmd]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("Handshake was completed"), "{name}: {text}");
        assert!(
            text.contains("0123456789abcdefghijklmnopqrstuv"),
            "{name}: the body: {text}"
        );
    }
}

#[test]
fn sni_and_signature_algorithms_pick_the_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_certs(dir);
    // An RSA and an ECDSA certificate for each of: the default (listed
    // first), an exact name and a wildcard; RSA listed before ECDSA, so that
    // ECDSA winning when the client takes both is the store's preference,
    // not the order.
    for (file, key, name) in [
        ("default-rsa", KeySpec::Rsa2048, "default.test"),
        ("default-ec", KeySpec::P256, "default.test"),
        ("both-rsa", KeySpec::Rsa2048, "both.test"),
        ("both-ec", KeySpec::P256, "both.test"),
        ("wild-rsa", KeySpec::Rsa2048, "*.wild.test"),
        ("wild-ec", KeySpec::P256, "*.wild.test"),
    ] {
        make_cert(dir, file, key, &[name]);
    }
    let lab = Lab::up("sni");
    let dpd = Dpd::start(&lab, |s| {
        tls_config_with(
            &lab,
            s,
            dir,
            &[
                "default-rsa",
                "default-ec",
                "both-rsa",
                "both-ec",
                "wild-rsa",
                "wild-ec",
                "p256",
                "rsa",
                "p384",
            ],
        )
    });
    // (SNI sent, the certificate's name expected, whether to check the
    // hostname against it)
    let names = [
        (Some("both.test"), "both.test", true),
        (Some("api.wild.test"), "*.wild.test", true),
        (Some("unknown.test"), "default.test", false),
        // A wildcard covers one label only.
        (Some("a.b.wild.test"), "default.test", false),
        (None, "default.test", false),
    ];
    // (-sigalgs, key bits, "Peer signature type")
    let algs = [
        (Some("rsa_pss_rsae_sha256"), 2048, "RSA-PSS"),
        (Some("ECDSA+SHA256"), 256, "ECDSA"),
        (None, 256, "ECDSA"),
    ];
    let mut n = 0;
    for version in ["-tls1_3", "-tls1_2"] {
        for (sni, cn, check_host) in names {
            for (sigalgs, bits, sig_type) in algs {
                let mut args = vec![version];
                match sni {
                    Some(sni) => args.extend(["-servername", sni]),
                    None => args.push("-noservername"),
                }
                if check_host {
                    args.extend(["-verify_hostname", sni.unwrap()]);
                }
                if let Some(sigalgs) = sigalgs {
                    args.extend(["-sigalgs", sigalgs]);
                }
                let text = s_client(&lab, dir, &args, "GET /bytes/10 HTTP/1.0\r\n\r\n");
                let case = format!("{args:?}");
                assert!(
                    text.contains("Verify return code: 0 (ok)"),
                    "{case}: {text}"
                );
                assert!(
                    text.contains(&format!("subject=CN = {cn}\n")),
                    "{case}: want the certificate of {cn}: {text}"
                );
                assert!(
                    text.contains(&format!("Server public key is {bits} bit")),
                    "{case}: want a {bits}-bit key: {text}"
                );
                assert!(
                    text.contains(&format!("Peer signature type: {sig_type}\n")),
                    "{case}: want a {sig_type} signature: {text}"
                );
                assert!(
                    text.contains("\r\n\r\n0123456789"),
                    "{case}: the body: {text}"
                );
                n += 1;
            }
        }
    }
    let stats = dpd.stats_when(Duration::from_secs(2), |s| s.tls_handshakes >= n);
    assert_eq!(stats.tls_handshakes, n, "{stats:?}");
    assert_eq!(stats.tls_failures, 0, "{stats:?}");
}

#[test]
fn each_group_and_version_interoperates() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("grp");
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let out = certs.path().join("body");
    // X25519MLKEM768 needs a client Debian's OpenSSL 3.0 is not (a rustls
    // client covers it). In TLS 1.2 the groups the client offers also bound
    // the curve of an ECDSA certificate (RFC 8422 §5.1; OpenSSL clients
    // refuse others with "wrong curve"), so TLS 1.2 runs each group on the
    // RSA certificate and P-256 on the P-256 one.
    let groups = [
        ("X25519", "X25519"),
        ("P-256", "secp256r1"),
        ("P-384", "secp384r1"),
    ];
    let tls13 = (&["--tlsv1.3"][..], "TLSv1.3");
    let tls12 = (&["--tlsv1.2", "--tls-max", "1.2"][..], "TLSv1.2");
    let mut cases = Vec::new();
    for group in groups {
        cases.push(("p256.test", group, tls13));
        cases.push(("rsa.test", group, tls12));
    }
    cases.push(("p256.test", groups[1], tls12));
    for (name, (curve, group), (tls, version)) in cases {
        let before = dpd.stats();
        let args = [tls, &["--curves", curve]].concat();
        let case = format!("{name} {args:?}");
        let (ok, text) = curl(&lab, certs.path(), name, &args, "/bytes/1000", &out);
        assert!(ok, "{case}: {text}\n{}", dpd.log_text());
        assert_eq!(text, "200 1000 0", "{case}");
        verify_pattern_file(&out, 1000);
        let after = dpd.stats_when(Duration::from_secs(2), |s| {
            s.tls_handshakes > before.tls_handshakes
        });
        assert_eq!(after.tls_handshakes, before.tls_handshakes + 1, "{case}");
        for (map_after, map_before, counted) in [
            (&after.tls_groups, &before.tls_groups, group),
            (&after.tls_versions, &before.tls_versions, version),
        ] {
            assert_eq!(
                count(map_after, counted),
                count(map_before, counted) + 1,
                "{case}: counted as {counted}: {after:?}"
            );
            assert_eq!(
                map_after.values().sum::<u64>(),
                map_before.values().sum::<u64>() + 1,
                "{case}: counted once: {after:?}"
            );
        }
    }
    let stats = dpd.stats();
    assert_eq!(stats.tls_failures, 0, "{stats:?}");
    assert_eq!(count(&stats.tls_groups, "X25519"), 2, "{stats:?}");
    assert_eq!(count(&stats.tls_groups, "secp256r1"), 3, "{stats:?}");
    assert_eq!(count(&stats.tls_groups, "secp384r1"), 2, "{stats:?}");
    assert_eq!(count(&stats.tls_groups, "X25519MLKEM768"), 0, "{stats:?}");
    assert_eq!(count(&stats.tls_versions, "TLSv1.3"), 3, "{stats:?}");
    assert_eq!(count(&stats.tls_versions, "TLSv1.2"), 4, "{stats:?}");
}

#[test]
#[ignore = "known bug: for a TLS 1.2 client whose groups lack P-256, dpd serves the P-256 ECDSA certificate although the name has an RSA one (RFC 8422 §5.1); OpenSSL clients fail with `wrong curve`"]
fn tls12_client_without_the_ecdsa_curve_gets_the_rsa_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_certs(dir);
    make_cert(dir, "both-ec", KeySpec::P256, &["both.test"]);
    make_cert(dir, "both-rsa", KeySpec::Rsa2048, &["both.test"]);
    let lab = Lab::up("crv");
    let dpd = Dpd::start(&lab, |s| {
        tls_config_with(&lab, s, dir, &["both-ec", "both-rsa"])
    });
    let out = dir.join("body");
    for curve in ["X25519", "P-384"] {
        let args = ["--tlsv1.2", "--tls-max", "1.2", "--curves", curve];
        let (ok, text) = curl(&lab, dir, "both.test", &args, "/bytes/10", &out);
        assert!(ok && text == "200 10 0", "{args:?}: {text}");
    }
    let stats = dpd.stats_when(Duration::from_secs(2), |s| s.tls_handshakes >= 2);
    let rsa_suites: u64 = stats
        .tls_suites
        .iter()
        .filter(|(suite, _)| suite.starts_with("TLS_ECDHE_RSA_"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(rsa_suites, 2, "the RSA certificate served: {stats:?}");
}

#[test]
fn a_100_mb_download_over_tls_is_byte_exact_with_2_percent_drops() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("tdl");
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    lab.drop_tcp_port(443, 2);
    let out = certs.path().join("body");
    let t0 = Instant::now();
    let (ok, text) = curl(
        &lab,
        certs.path(),
        "p256.test",
        &["--max-time", "240"],
        "/bytes/100000000",
        &out,
    );
    assert!(ok, "{text}\n{}", dpd.log_text());
    assert_eq!(text, "200 100000000 0");
    verify_pattern_file(&out, 100_000_000);
    eprintln!("100 MB over TLS with 2 % drops in {:?}", t0.elapsed());
    let stats = dpd.stats_when(Duration::from_secs(2), |s| s.tls_handshakes >= 1);
    assert!(
        stats.tcp_retransmits > 0,
        "drops must have caused retransmissions: {stats:?}"
    );
    assert_eq!(stats.tls_handshakes, 1, "{stats:?}");
    assert_eq!(stats.tls_failures, 0, "{stats:?}");
}
