//! End-to-end trust tests: dpbench against a real nginx in a lab network
//! namespace. They need root, iproute2, nginx, haproxy (not used here) and
//! h2load, so they are `#[ignore]`d in the normal `cargo test` and run by
//! `scripts/bench-test.sh` (`cargo test -p bench --test trust -- --ignored`).
//! A missing tool fails the test with a clear message; nothing passes
//! silently.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn require(tool: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{tool} is not installed: run scripts/setup.sh (trust tests need it)"
    );
}

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A lab with nginx (access log on) and the backend pool; torn down on drop.
struct Lab {
    name: String,
    dir: PathBuf,
    /// Environment for peers.sh (its start, targets and stop agree).
    env: Vec<(String, String)>,
}

impl Lab {
    fn up(name: &str) -> Lab {
        Lab::with_peers(name, &["nginx"])
    }

    fn with_peers(name: &str, peers: &[&str]) -> Lab {
        Lab::with_peers_env(name, peers, &[])
    }

    fn with_peers_env(name: &str, peers: &[&str], env: &[(&str, &str)]) -> Lab {
        for t in ["ip", "nginx", "openssl", "taskset"] {
            require(t);
        }
        assert!(
            Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| o.stdout.starts_with(b"0")),
            "trust tests must run as root (network namespaces)"
        );
        let dir = std::env::temp_dir().join(format!("dpbench-trust-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        sh(Command::new(repo().join("scripts/bench-lab.sh")).args(["up", name]));
        let lab = Lab {
            name: name.to_string(),
            dir,
            env: env
                .iter()
                .map(|&(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        sh(Command::new(repo().join("scripts/peers/peers.sh"))
            .args(["start", name])
            .arg(&lab.dir)
            .args(peers)
            .envs(env.iter().copied())
            .env("PEER_ACCESS_LOG", "1"));
        lab
    }

    fn target(&self) -> String {
        self.target_of("nginx")
    }

    fn target_of(&self, peer: &str) -> String {
        sh(Command::new(repo().join("scripts/peers/peers.sh"))
            .args(["targets", &self.name])
            .arg(&self.dir)
            .arg(peer)
            .envs(self.env.iter().map(|(k, v)| (k, v))))
        .trim()
        .to_string()
    }

    /// Runs dpbench in the client namespace; returns results.json.
    fn dpbench(&self, out: &str, args: &[&str]) -> Value {
        let out = self.dir.join(out);
        sh(Command::new("ip")
            .args(["netns", "exec", &format!("{}-cli", self.name)])
            .arg(env!("CARGO_BIN_EXE_dpbench"))
            .args(args)
            .args(["--ceiling-ms", "0", "--src", "10.77.0.10-25", "--out"])
            .arg(&out));
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
    }

    /// dpd's summed counters (`dpctl stats --json`, release build).
    fn dpd_totals(&self) -> Value {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| repo().join("target"), PathBuf::from);
        let stats = sh(Command::new(target.join("release/dpctl"))
            .args(["--socket"])
            .arg(self.dir.join("run/dpd.sock"))
            .args(["stats", "--json"]));
        let v: Value = serde_json::from_str(&stats).unwrap();
        v["stats"]["total"].clone()
    }

    /// nginx's access log lines (stops nginx first, so all is flushed), then
    /// truncates it and starts nginx again.
    fn access_log(&self) -> Vec<Vec<String>> {
        let log = self.dir.join("log/nginx.access.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::write(&log, "");
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/peers/peers.sh"))
            .args(["stop", &self.name])
            .arg(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output();
        let _ = Command::new(repo().join("scripts/bench-lab.sh"))
            .args(["down", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run0(v: &Value) -> &Value {
    &v["results"][0]["runs"][0]
}

fn total(v: &Value, name: &str) -> u64 {
    run0(v)["totals"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no total {name}: {v}"))
}

/// Log fields: connection, connection_requests, ssl_protocol,
/// ssl_session_reused, status, body_bytes_sent, request_uri.
#[test]
#[ignore = "needs root and nginx: run scripts/bench-test.sh"]
fn counts_agree_with_nginx_and_no_session_is_reused() {
    let lab = Lab::up("dpbt1");
    let ca = lab.dir.join("ca.pem");
    let t = lab.target();
    // Certificate verification on (the CA made by certs.sh), 400 connections.
    let v = lab.dpbench(
        "cps",
        &[
            "test",
            "cps",
            "--target",
            &t,
            "--ca",
            ca.to_str().unwrap(),
            "--repeat",
            "1",
            "--ramp-up",
            "0",
            "--sustain",
            "30",
            "--ramp-down",
            "0",
            "-c",
            "8",
            "--conns",
            "400",
        ],
    );
    assert_eq!(total(&v, "started"), 400, "{v}");
    assert_eq!(total(&v, "transactions"), 400);
    assert_eq!(total(&v, "requests"), 400);
    assert_eq!(total(&v, "body_bytes"), 400 * 1024);
    assert!(run0(&v)["rejected"].is_null(), "{v}");
    assert_eq!(run0(&v)["negotiated"]["resumed_seen"], 0);
    let log = lab.access_log();
    let ours: Vec<&Vec<String>> = log
        .iter()
        .filter(|f| f.get(6).is_some_and(|u| u == "/1k"))
        .collect();
    assert_eq!(
        ours.len(),
        400,
        "nginx logged {} requests, dpbench counted 400",
        ours.len()
    );
    let conns: std::collections::HashSet<&String> = ours.iter().map(|f| &f[0]).collect();
    assert_eq!(conns.len(), 400, "one connection per transaction");
    for f in &ours {
        assert_eq!(f[2], "TLSv1.3");
        assert_eq!(f[3], ".", "session reused although reuse is off: {f:?}");
        assert_eq!(f[4], "200");
        assert_eq!(f[5], "1024");
    }
}

#[test]
#[ignore = "needs root and nginx: run scripts/bench-test.sh"]
fn reuse_shows_when_on_and_not_when_off() {
    let lab = Lab::up("dpbt2");
    // Port 4439: TLS 1.2 with a session cache: the server would resume.
    let t = "name=nginx-cache,host=10.77.0.1,p256=4439".to_string();
    let args = |reuse: bool| {
        let mut a = vec![
            "test",
            "cps",
            "--target",
            &t,
            "--key",
            "p256",
            "--tls",
            "1.2",
            "--dangerous-no-verify",
            "--repeat",
            "1",
            "--ramp-up",
            "0",
            "--sustain",
            "30",
            "--ramp-down",
            "0",
            "-c",
            "4",
            "--conns",
            "200",
        ];
        if reuse {
            a.push("--reuse");
        }
        a.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    let off = args(false);
    let v = lab.dpbench("off", &off.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(total(&v, "transactions"), 200);
    let log = lab.access_log();
    assert_eq!(log.len(), 200);
    assert!(
        log.iter().all(|f| f[3] == "."),
        "a session was reused with reuse off"
    );
    let on = args(true);
    let v = lab.dpbench("on", &on.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(total(&v, "transactions"), 200);
    let resumed = run0(&v)["negotiated"]["resumed_seen"].as_u64().unwrap();
    let log = lab.access_log();
    let reused = log.iter().filter(|f| f[3] == "r").count() as u64;
    assert!(
        reused >= 150,
        "with reuse on nginx saw only {reused} of 200 resumed"
    );
    assert_eq!(
        resumed, reused,
        "dpbench's resumed count must match nginx's"
    );
}

#[test]
#[ignore = "needs root, nginx and h2load: run scripts/bench-test.sh"]
fn agrees_with_h2load_within_ten_percent() {
    require("h2load");
    let lab = Lab::up("dpbt3");
    let t = lab.target();
    // Rate-limited 1 MB pages (8 MB/s per response): neither client is
    // CPU-bound, so both must measure the same request rate. dpbench's
    // median of three runs: one run in a CI machine's busy moment measured
    // 12 % low once, where runs usually agree within 2-5 %.
    let v = lab.dpbench(
        "tput",
        &[
            "test",
            "throughput",
            "--target",
            &t,
            "--dangerous-no-verify",
            "--repeat",
            "3",
            "--ramp-up",
            "1",
            "--sustain",
            "4",
            "--ramp-down",
            "0",
            "-c",
            "4",
            "--path",
            "/slow/1m",
            "--size",
            "1048576",
        ],
    );
    assert!(run0(&v)["rejected"].is_null(), "{v}");
    let mut rates: Vec<f64> = v["results"][0]["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs: {v}"))
        .iter()
        .filter_map(|r| r["requests_per_s"].as_f64())
        .collect();
    assert_eq!(rates.len(), 3, "{v}");
    rates.sort_by(f64::total_cmp);
    let ours = rates[1];
    // h2load's median of three runs too (one run alone measured 15 %
    // low once on a fresh CI machine).
    let mut theirs: Vec<f64> = (0..3)
        .map(|_| {
            let out = sh(Command::new("ip").args([
                "netns",
                "exec",
                "dpbt3-cli",
                "timeout",
                "60",
                "h2load",
                "--h1",
                "-n",
                "128",
                "-c",
                "4",
                "https://10.77.0.1:4431/slow/1m",
            ]));
            let line = out
                .lines()
                .find(|l| l.starts_with("finished in"))
                .unwrap_or_else(|| panic!("no result line from h2load:\n{out}"));
            assert!(out.contains("128 succeeded"), "h2load had failures:\n{out}");
            line.split(", ")
                .find_map(|p| p.strip_suffix(" req/s"))
                .and_then(|x| x.trim().parse().ok())
                .unwrap_or_else(|| panic!("cannot parse h2load: {line}"))
        })
        .collect();
    theirs.sort_by(f64::total_cmp);
    let theirs = theirs[1];
    let diff = (ours - theirs).abs() / theirs;
    eprintln!(
        "dpbench {ours:.2} req/s, h2load {theirs:.2} req/s, diff {:.1} %",
        diff * 100.0
    );
    assert!(
        diff <= 0.10,
        "dpbench {ours:.2} req/s vs h2load {theirs:.2} req/s differ by {:.1} %",
        diff * 100.0
    );
}

#[test]
#[ignore = "needs root and nginx: run scripts/bench-test.sh"]
fn a_run_with_errors_is_rejected_and_says_why() {
    let lab = Lab::up("dpbt4");
    // Nothing listens on port 9: every connection is refused.
    let v = lab.dpbench(
        "refused",
        &[
            "test",
            "l4cps",
            "--target",
            "name=nothing,host=10.77.0.1,http=9",
            "--repeat",
            "2",
            "--ramp-up",
            "0",
            "--sustain",
            "1",
            "--ramp-down",
            "0",
            "-c",
            "2",
        ],
    );
    let r = &v["results"][0];
    assert!(
        r["best_value"].is_null(),
        "a failing test must have no best value: {r}"
    );
    for run in r["runs"].as_array().unwrap() {
        let why = run["rejected"]
            .as_str()
            .unwrap_or_else(|| panic!("run not rejected: {run}"));
        assert!(
            why.contains("connect_errors") || why.contains("resets"),
            "{why}"
        );
    }
}

#[test]
#[ignore = "needs root, nginx, haproxy and stunnel4: run scripts/bench-test.sh"]
fn peers_send_no_session_tickets() {
    for t in ["haproxy", "stunnel4"] {
        require(t);
    }
    let lab = Lab::with_peers("dpbt5", &["nginx", "haproxy", "stunnel"]);
    let _ = &lab.dir;
    // OpenSSL 3 sends two TLS 1.3 tickets unless NumTickets = 0: count the
    // NewSessionTicket messages each peer sends after a full handshake.
    for port in ["4431", "4441", "4451"] {
        let out = sh(Command::new("sh").arg("-c").arg(format!(
            "(sleep 1; echo) | ip netns exec dpbt5-cli openssl s_client -connect 10.77.0.1:{port} -tls1_3 -msg 2>&1"
        )));
        assert!(
            out.contains("ServerHello"),
            "no TLS 1.3 handshake on {port}:\n{out}"
        );
        assert_eq!(
            out.matches("NewSessionTicket").count(),
            0,
            "port {port} sent session tickets"
        );
    }
}

/// dpd (release, as the benchmarks run it) against dpbench's rustls client
/// over veth: every key-exchange group, X25519MLKEM768 included (Debian's
/// OpenSSL clients lack it), in TLS 1.3 and 1.2, counted by dpd.
#[test]
#[ignore = "needs root and a release dpd: run scripts/bench-test.sh"]
fn dpd_negotiates_every_group_with_a_rustls_client() {
    let lab = Lab::with_peers("dpbt6", &["dpd"]);
    let t = lab.target_of("dpd");
    let runs = [
        ("1.3", "x25519mlkem768"),
        ("1.3", "x25519"),
        ("1.3", "p256"),
        ("1.3", "p384"),
        ("1.2", "x25519"),
        ("1.2", "p256"),
        ("1.2", "p384"),
    ];
    for (i, (tls, group)) in runs.iter().enumerate() {
        let v = lab.dpbench(
            &format!("g{i}"),
            &[
                "test",
                "cps",
                "--target",
                &t,
                "--key",
                "p256",
                "--tls",
                tls,
                "--group",
                group,
                "--dangerous-no-verify",
                "--repeat",
                "1",
                "--ramp-up",
                "0",
                "--sustain",
                "20",
                "--ramp-down",
                "0",
                "-c",
                "2",
                "--conns",
                "20",
            ],
        );
        assert_eq!(total(&v, "transactions"), 20, "TLS {tls} {group}: {v}");
        assert!(run0(&v)["rejected"].is_null(), "{v}");
    }
    let total = lab.dpd_totals();
    let groups = &total["tls_groups"];
    assert_eq!(groups["X25519MLKEM768"], 20, "{total}");
    assert_eq!(groups["X25519"], 40, "{groups}");
    assert_eq!(groups["secp256r1"], 40, "{groups}");
    assert_eq!(groups["secp384r1"], 40, "{groups}");
    assert_eq!(total["tls_versions"]["TLSv1.2"], 60, "{total}");
    assert_eq!(total["tls_key_types"]["ECDSA-P256"], 140, "{total}");
    assert_eq!(total["tls_failures"], 0, "{total}");
}

/// dpbench's arguments for one short P-256 run against `target` from the
/// bypass client on memif `device` (no ramps, four source addresses).
fn bypass_run<'a>(target: &'a str, device: &'a str) -> [&'a str; 15] {
    [
        "--target",
        target,
        "--key",
        "p256",
        "--dangerous-no-verify",
        "--repeat",
        "1",
        "--ramp-up",
        "0",
        "--ramp-down",
        "0",
        "--bypass",
        device,
        "--bypass-addr",
        "10.79.0.2/24,sources=4",
    ]
}

/// dpbench's kernel-bypass client (tlsdp's stack on DPDK) against dpd
/// over memif: every connection and every byte it counts, dpd counts too;
/// throughput responses arrive whole (the run's end lets the ones under
/// way finish).
#[test]
#[ignore = "needs root and a release dpd: run scripts/bench-test.sh"]
fn bypass_client_counts_agree_with_dpd() {
    let lab = Lab::with_peers_env("dpbt7", &["dpd"], &[("DPD_PORT", "memif")]);
    let t = lab.target_of("dpd");
    assert!(t.contains("host=10.79.0.1"), "{t}");
    let sock = format!(
        "net_memif0,role=client,socket={},socket-abstract=no",
        lab.dir.join("run/memif.sock").display()
    );
    let common = bypass_run(&t, &sock);
    let mut args = vec!["test", "cps", "--sustain", "20", "-c", "4", "--conns", "40"];
    args.extend(common);
    let v = lab.dpbench("bypass-cps", &args);
    assert_eq!(total(&v, "transactions"), 40, "{v}");
    assert_eq!(total(&v, "handshakes"), 40, "{v}");
    assert!(run0(&v)["rejected"].is_null(), "{v}");
    let mut args = vec!["test", "throughput", "--sustain", "2", "-c", "2"];
    args.extend(common);
    let v = lab.dpbench("bypass-tp", &args);
    let requests = total(&v, "requests");
    assert!(requests > 0, "{v}");
    assert_eq!(
        total(&v, "body_bytes"),
        requests << 20,
        "whole 1 MiB bodies: {v}"
    );
    assert_eq!(
        total(&v, "transactions"),
        2,
        "both connections finished: {v}"
    );
    let total = lab.dpd_totals();
    assert_eq!(total["tls_versions"]["TLSv1.3"], 42, "{total}");
    assert_eq!(total["tls_failures"], 0, "{total}");
    assert_eq!(total["tcp_accepted"], 42, "{total}");
}

/// dpd as a zero-copy memif client (`DPD_MEMIF=client`), started before
/// any server: it connects when dpbench's bypass (the server) comes up,
/// and again for each later run after the one before left. DPDK 22.11's
/// memif client never connects again by itself, and in zero-copy mode
/// its disconnection closes EAL's memory files (docs/architecture.md,
/// "Ports"): each run here after the first fails without dpd's
/// reconnection. Every connection and byte of every run reaches dpd.
#[test]
#[ignore = "needs root, hugepages and a release dpd: run scripts/bench-test.sh"]
fn a_zero_copy_memif_client_connects_to_each_new_server() {
    let lab = Lab::with_peers_env(
        "dpbt8",
        &["dpd"],
        &[("DPD_PORT", "memif"), ("DPD_MEMIF", "client")],
    );
    let t = lab.target_of("dpd");
    let server = format!(
        "net_memif0,role=server,socket={},socket-abstract=no",
        lab.dir.join("run/memif.sock").display()
    );
    let common = bypass_run(&t, &server);
    for run in ["zc-cps-1", "zc-cps-2", "zc-cps-3"] {
        let mut args = vec!["test", "cps", "--sustain", "20", "-c", "4", "--conns", "20"];
        args.extend(common);
        let v = lab.dpbench(run, &args);
        assert_eq!(total(&v, "transactions"), 20, "{run}: {v}");
        assert!(run0(&v)["rejected"].is_null(), "{run}: {v}");
    }
    let mut args = vec!["test", "throughput", "--sustain", "2", "-c", "2"];
    args.extend(common);
    let v = lab.dpbench("zc-tp", &args);
    let requests = total(&v, "requests");
    assert!(requests > 0, "{v}");
    assert_eq!(
        total(&v, "body_bytes"),
        requests << 20,
        "whole 1 MiB bodies from dpd's own mbufs: {v}"
    );
    let total = lab.dpd_totals();
    assert_eq!(total["tcp_accepted"], 62, "{total}");
    assert_eq!(total["tls_failures"], 0, "{total}");
    // `dpctl status` counts the four connections to a server.
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    let status = sh(Command::new(target.join("release/dpctl"))
        .args(["--socket"])
        .arg(lab.dir.join("run/dpd.sock"))
        .args(["status", "--json"]));
    let v: Value = serde_json::from_str(&status).unwrap();
    let memif = &v["status"]["ports"][0]["memif_client"];
    assert_eq!(memif["connections"], 4, "{v}");
    assert_eq!(memif["zero_copy"], true, "{v}");
}
