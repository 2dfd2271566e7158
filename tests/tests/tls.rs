//! TLS VIPs against real clients over veth: curl, openssl s_client,
//! gnutls-cli and testssl.sh; TLS 1.2 and 1.3, each key-exchange group,
//! RSA-2048, P-256 and P-384 certificates chosen by SNI and signature
//! algorithms, verified against the test CA; byte-exact downloads (also
//! with drops), key updates mid-transfer; refusals.

use std::collections::BTreeMap;
use std::io::{Read, Write};
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
    assert_eq!(stats.tls_abandoned, 0, "refusals are failures: {stats:?}");
    // A client that connects and leaves without a ClientHello (a port
    // scan, a TCP health check) abandons: counted apart from failures.
    let o = lab.client(&[
        "bash",
        "-c",
        &format!("exec 3<>/dev/tcp/{}/443; exec 3>&-", lab.dut_ip()),
    ]);
    assert!(o.status.success());
    let after = dpd.stats_when(Duration::from_secs(5), |s| s.tls_abandoned > 0);
    assert_eq!(
        (after.tls_abandoned, after.tls_failures),
        (1, stats.tls_failures),
        "{after:?}"
    );
    // A ClientHello announcing 2^16 - 1 bytes in 1-byte records (six bytes
    // held for each one of the message): refused with illegal_parameter
    // once 20 KiB of it is held, then closed, not held to the deadline.
    let script = "import socket, sys\n\
        s = socket.create_connection((sys.argv[1], 443), timeout=10)\n\
        hello = bytes([1, 0, 0xff, 0xff]) + bytes(0xffff)\n\
        wire = b''.join(bytes([22, 3, 1, 0, 1, b]) for b in hello)\n\
        s.sendall(wire[:24000])\n\
        got = b''\n\
        while True:\n\
        \x20   d = s.recv(100)\n\
        \x20   if not d: break\n\
        \x20   got += d\n\
        print(got.hex())\n";
    let o = lab.client(&["timeout", "20", "python3", "-c", script, &lab.dut_ip()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        text.trim(),
        "1503030002022f",
        "illegal_parameter (47), then EOF"
    );
    let stats = dpd.stats_when(Duration::from_secs(5), |s| {
        count(&s.tls_failure_reasons, "handshake_too_large") > 0
    });
    assert_eq!(
        count(&stats.tls_failure_reasons, "handshake_too_large"),
        1,
        "{stats:?}"
    );
    // What its session held was charged to the buffer cap, and given back.
    assert_eq!(stats.tcp_buffer_outside_bytes, 0, "{stats:?}");
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

/// An interactive `openssl s_client` (commands on: no `-quiet`, no
/// `-ign_eof`) whose stdin the test writes and whose stdout it reads at its
/// own pace: while the test does not read, s_client blocks on its stdout,
/// TCP's window closes, and s_client acts on stdin (its `K`/`k` commands).
struct Interactive {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::process::ChildStdout,
    /// Everything read from stdout, less s_client's `read R BLOCK` lines.
    out: Vec<u8>,
}

impl Interactive {
    /// s_client prints this to stdout (amid the data) when a read consumed
    /// only non-data records (a KeyUpdate, a close_notify).
    const NOISE: &'static [u8] = b"read R BLOCK\n";

    fn send(&mut self, text: &str) {
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("write to s_client");
    }

    /// Reads until `done(out)`; false at end of file first.
    fn read_until(&mut self, done: impl Fn(&[u8]) -> bool) -> bool {
        let mut chunk = vec![0u8; 1 << 16];
        while !done(&self.out) {
            let n = self.stdout.read(&mut chunk).expect("read s_client");
            if n == 0 {
                return false;
            }
            let from = self.out.len().saturating_sub(Self::NOISE.len());
            self.out.extend_from_slice(&chunk[..n]);
            let mut at = from;
            while let Some(i) = self.out[at..]
                .windows(Self::NOISE.len())
                .position(|w| w == Self::NOISE)
            {
                self.out.drain(at + i..at + i + Self::NOISE.len());
                at += i;
            }
        }
        true
    }
}

/// Where the body of the first response in `out` starts (the head must be
/// complete).
fn body_start(out: &[u8]) -> Option<usize> {
    let head = out.windows(9).position(|w| w == b"HTTP/1.1 ")?;
    let end = out[head..].windows(4).position(|w| w == b"\r\n\r\n")?;
    Some(head + end + 4)
}

/// One line of `s_client -msg` output: direction and what it was.
#[derive(Debug, PartialEq)]
enum Msg {
    Record { sent: bool },
    KeyUpdate { sent: bool, requested: bool },
    Alert { sent: bool, what: String },
}

/// Parses `s_client -msg` output ("<<< TLS 1.3, Handshake [length 0005],
/// KeyUpdate" followed by its bytes "18 00 00 01 01").
fn parse_msgs(text: &str) -> Vec<Msg> {
    let mut msgs = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let sent = line.starts_with(">>> ");
        if !sent && !line.starts_with("<<< ") {
            continue;
        }
        if line.contains("RecordHeader") {
            msgs.push(Msg::Record { sent });
        } else if line.ends_with(", KeyUpdate") {
            let bytes = lines.peek().map(|l| l.trim()).unwrap_or_default();
            assert!(bytes.starts_with("18 00 00 01 "), "{line}: {bytes}");
            msgs.push(Msg::KeyUpdate {
                sent,
                requested: bytes.ends_with("01"),
            });
        } else if line.contains(" Alert ") {
            let what = line.rsplit("], ").next().unwrap_or(line).to_string();
            msgs.push(Msg::Alert { sent, what });
        }
    }
    msgs
}

#[test]
fn openssl_key_update_mid_transfer() {
    const N: usize = 30_000_000;
    const MB: usize = 1_000_000;
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let lab = Lab::up("ku");
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let connect = format!("{}:443", lab.dut_ip());
    let ca = certs.path().join("ca.pem");
    let msg_file = certs.path().join("msgs");
    let err_file = certs.path().join("stderr");
    let mut child = lab
        .client_command(&[
            "timeout",
            "60",
            "openssl",
            "s_client",
            "-connect",
            &connect,
            "-servername",
            "p256.test",
            "-CAfile",
            ca.to_str().unwrap(),
            "-verify_return_error",
            "-tls1_3",
            "-crlf",
            "-msg",
            "-msgfile",
            msg_file.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .expect("openssl s_client");
    let mut sc = Interactive {
        stdin: child.stdin.take().unwrap(),
        stdout: child.stdout.take().unwrap(),
        child,
        out: Vec::new(),
    };
    let report = |sc: &Interactive, what: &str| -> String {
        format!(
            "{what}; {} bytes read; stderr:\n{}\nstdout head:\n{}\ndpd:\n{}",
            sc.out.len(),
            std::fs::read_to_string(&err_file).unwrap_or_default(),
            String::from_utf8_lossy(&sc.out[..sc.out.len().min(3000)]),
            dpd.log_text()
        )
    };
    // -crlf: s_client sends each "\n" as "\r\n".
    sc.send(&format!("GET /bytes/{N} HTTP/1.1\nHost: x\n\n"));
    let body_at =
        |at: usize| move |out: &[u8]| body_start(out).is_some_and(|b| out.len() >= b + at);
    // Key update, update_requested, 5 MB into the body; key update without
    // request at 15 MB (the test pauses reading, so both go out mid-body).
    for (at, command) in [(5 * MB, "K\n"), (15 * MB, "k\n")] {
        assert!(sc.read_until(body_at(at)), "{}", report(&sc, "ended early"));
        sc.send(command);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(sc.read_until(body_at(N)), "{}", report(&sc, "ended early"));
    // A second request on the same connection, under the client's third
    // keys, answered under the server's second.
    sc.send("GET /bytes/1000 HTTP/1.1\nHost: x\nConnection: close\n\n");
    sc.read_until(|_| false);
    let status = sc.child.wait().expect("s_client exit");
    assert!(
        status.success(),
        "{}",
        report(&sc, &format!("s_client {status}"))
    );

    // stdout: s_client's summary, then exactly the two responses.
    let out = &sc.out;
    let summary = String::from_utf8_lossy(&out[..body_start(out).unwrap()]);
    assert!(summary.contains("Verify return code: 0 (ok)"), "{summary}");
    assert!(summary.contains("New, TLSv1.3"), "{summary}");
    assert!(
        summary.contains(&format!("Content-Length: {N}\r\n")),
        "{summary}"
    );
    let b1 = body_start(out).unwrap();
    e2e::verify_pattern(&out[b1..b1 + N], N as u64);
    let rest = &out[b1 + N..];
    let b2 = body_start(rest).expect("a second response");
    let head2 = String::from_utf8_lossy(&rest[..b2]);
    assert!(
        head2.starts_with("HTTP/1.1 200 OK\r\n")
            && head2.contains("Content-Length: 1000\r\n")
            && head2.contains("Connection: close\r\n"),
        "{head2}"
    );
    e2e::verify_pattern(&rest[b2..(b2 + 1000).min(rest.len())], 1000);
    assert_eq!(
        String::from_utf8_lossy(&rest[b2 + 1000..]),
        "closed\n",
        "after the second response: the server's close_notify"
    );
    // stderr: the verification and one KEYUPDATE per command, nothing else.
    let stderr = std::fs::read_to_string(&err_file).unwrap();
    for line in stderr.lines() {
        assert!(
            line.starts_with("depth=") || line == "verify return:1" || line == "KEYUPDATE",
            "unexpected s_client stderr line {line:?}:\n{stderr}"
        );
    }
    assert_eq!(stderr.matches("KEYUPDATE").count(), 2, "{stderr}");

    // The records, in order: our KeyUpdate (update_requested) after some
    // of the body; the server's KeyUpdate (update_not_requested) in answer,
    // and most of the body after it, under its new keys; our second
    // KeyUpdate mid-body; then our second request; alerts only close_notify.
    let msgs = parse_msgs(&std::fs::read_to_string(&msg_file).unwrap());
    let pos = |m: &Msg| msgs.iter().position(|x| x == m);
    let received_between = |a: usize, b: usize| {
        msgs[a..b]
            .iter()
            .filter(|m| **m == Msg::Record { sent: false })
            .count()
    };
    let ours: Vec<usize> = msgs
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Msg::KeyUpdate { sent: true, .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        ours.iter().map(|&i| &msgs[i]).collect::<Vec<_>>(),
        [
            &Msg::KeyUpdate {
                sent: true,
                requested: true
            },
            &Msg::KeyUpdate {
                sent: true,
                requested: false
            }
        ],
        "our key updates"
    );
    let answer = pos(&Msg::KeyUpdate {
        sent: false,
        requested: false,
    })
    .expect("the server answers update_requested with a KeyUpdate of its own");
    assert!(
        pos(&Msg::KeyUpdate {
            sent: false,
            requested: true
        })
        .is_none(),
        "the server must not request an update back"
    );
    // 16 KB records: 5 MB are ~300 of them, the body ~1830. What was in
    // flight when a command went out (the client's receive window, at most
    // a few MB) still comes under the old keys; the bounds leave room.
    let records = msgs.len();
    assert!(
        received_between(0, ours[0]) >= 100,
        "K mid-body: {}",
        received_between(0, ours[0])
    );
    assert!(ours[0] < answer, "the server's KeyUpdate answers ours");
    assert!(
        received_between(answer, records) >= 500,
        "the rest of the body after the server's KeyUpdate: {}",
        received_between(answer, records)
    );
    assert!(
        received_between(ours[1], records) >= 200,
        "k mid-body: {}",
        received_between(ours[1], records)
    );
    assert!(
        msgs[ours[1]..].contains(&Msg::Record { sent: true }),
        "the second request went out after the second key update"
    );
    let alerts: Vec<&Msg> = msgs
        .iter()
        .filter(|m| matches!(m, Msg::Alert { .. }))
        .collect();
    assert_eq!(
        alerts,
        [
            &Msg::Alert {
                sent: false,
                what: "warning close_notify".into()
            },
            &Msg::Alert {
                sent: true,
                what: "warning close_notify".into()
            }
        ],
        "alerts"
    );

    let stats = dpd.stats_when(Duration::from_secs(2), |s| s.http_requests >= 2);
    assert_eq!(stats.tls_handshakes, 1, "{stats:?}");
    assert_eq!(stats.tls_failures, 0, "{stats:?}");
    assert_eq!(stats.http_requests, 2, "{stats:?}");
}

#[test]
fn testssl_finds_no_weak_protocol_or_cipher() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_certs(dir);
    // The default name with an ECDSA and an RSA certificate, so that the
    // scan (no SNI) meets both families of suites.
    make_cert(dir, "p256-rsa", KeySpec::Rsa2048, &["p256.test"]);
    let lab = Lab::up("ssl");
    let _dpd = Dpd::start(&lab, |s| {
        tls_config_with(&lab, s, dir, &["p256", "p256-rsa", "rsa", "p384"])
    });
    let json = dir.join("testssl.json");
    let target = format!("{}:443", lab.dut_ip());
    let t0 = Instant::now();
    // Protocols, cipher categories and forward secrecy only: the checks
    // that matter here, in ~30 s.
    let o = lab.client(&[
        "timeout",
        "150",
        "testssl",
        "--protocols",
        "--std",
        "--fs",
        "--warnings",
        "off",
        "--quiet",
        "--color",
        "0",
        "--nodns",
        "none",
        "--connect-timeout",
        "5",
        "--openssl-timeout",
        "5",
        "--jsonfile",
        json.to_str().unwrap(),
        &target,
    ]);
    let elapsed = t0.elapsed();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_ne!(
        o.status.code(),
        Some(127),
        "testssl not found: apt-get install testssl.sh (scripts/setup.sh does)"
    );
    assert!(o.status.success(), "testssl {}: {text}", o.status);
    let findings: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&json).expect("testssl's JSON")).expect("JSON");
    let by_id: BTreeMap<&str, (&str, &str)> = findings
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap_or_default(),
                (
                    f["severity"].as_str().unwrap_or_default(),
                    f["finding"].as_str().unwrap_or_default(),
                ),
            )
        })
        .collect();
    let finding = |id: &str| {
        by_id
            .get(id)
            .unwrap_or_else(|| panic!("no {id} in testssl's findings: {text}"))
            .1
    };
    for id in [
        "SSLv2",
        "SSLv3",
        "TLS1",
        "TLS1_1",
        // cipher categories
        "cipherlist_NULL",
        "cipherlist_aNULL",
        "cipherlist_EXPORT",
        "cipherlist_LOW",
        "cipherlist_3DES_IDEA",
        "cipherlist_AVERAGE",
    ] {
        assert_eq!(finding(id), "not offered", "{id}: {text}");
    }
    assert_eq!(finding("TLS1_2"), "offered", "{text}");
    assert!(finding("TLS1_3").starts_with("offered"), "{text}");
    assert_eq!(finding("cipherlist_STRONG"), "offered", "{text}");
    assert_eq!(finding("PFS"), "offered", "{text}");
    // Every suite has forward secrecy and is an AEAD, for both key types.
    let fs = finding("PFS_ciphers");
    for suite in fs.split_whitespace() {
        assert!(
            suite.contains("GCM") || suite.contains("CHACHA20"),
            "{suite} in {fs}"
        );
    }
    assert!(
        fs.contains("ECDHE-ECDSA-") && fs.contains("ECDHE-RSA-"),
        "{fs}"
    );
    let bad: Vec<_> = by_id
        .iter()
        .filter(|(_, (severity, _))| ["LOW", "MEDIUM", "HIGH", "CRITICAL"].contains(severity))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    eprintln!(
        "testssl: {elapsed:?} (its scanTime: {} s)",
        by_id.get("scanTime").map_or("?", |f| f.1)
    );
}

/// Minor page faults of process `pid` so far (`/proc/PID/stat`, field 10).
fn minor_faults(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which ends at the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(7).unwrap().parse().unwrap()
}

/// dpd keeps the memory it frees (docs/architecture.md, "Allocator"): once a
/// handshake load has reached its high-water mark, the same load again
/// faults in (almost) no new page. With mimalloc's default the engine
/// returned freed memory to the kernel (madvise) and faulted it back in,
/// syscalls and page zeroing inside the engine loop.
#[test]
fn a_repeated_handshake_load_faults_in_no_new_memory() {
    let lab = Lab::up("mk");
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let dpd = Dpd::start(&lab, |s| tls_config(&lab, s, certs.path()));
    let url = format!("https://{}/bytes/1024", lab.dut_ip());
    let load = || {
        // TLS 1.2: ab stalls on every TLS 1.3 connection.
        let out = lab.client(&[
            "timeout", "120", "ab", "-q", "-f", "TLS1.2", "-n", "3000", "-c", "16", &url,
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("Complete requests:      3000"),
            "ab:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Failed requests:        0"), "{text}");
    };
    load();
    let before = minor_faults(dpd.pid());
    load();
    let faults = minor_faults(dpd.pid()) - before;
    eprintln!("the second load: {faults} minor page faults in dpd");
    assert!(
        faults < 64,
        "{faults} minor page faults during the second load"
    );
}
