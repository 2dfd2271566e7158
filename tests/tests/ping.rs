//! A kernel client in its own network namespace pings and arpings `dpd`,
//! which owns the other end of the veth link through DPDK's AF_PACKET and
//! AF_XDP virtual devices. ICMP and ARP carry no TCP checksums, so the
//! client-side checksum offload setting does not matter here (lab.sh turns
//! it off).

use std::time::Duration;

use e2e::{Dpd, Lab};

fn ping_and_arping(driver: &str, tag: &str) {
    let lab = Lab::up(tag);
    let mut dpd = Dpd::start(&lab, |sock| lab.config(driver, sock, ""));
    let ip = lab.dut_ip();

    let out = lab.client(&["ping", "-c", "5", "-i", "0.2", "-W", "2", &ip]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ping failed:\n{text}\n{}",
        dpd.log_text()
    );
    assert!(text.contains("5 packets transmitted, 5 received"), "{text}");

    // Flush the client's neighbour entry so the next ping starts with ARP.
    lab.client(&["ip", "neigh", "flush", "dev", "veth-cli"]);
    let out = lab.client(&["arping", "-c", "3", "-w", "5", "-I", "veth-cli", &ip]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "arping failed:\n{text}");
    assert!(text.contains("Received 3 response(s)"), "{text}");

    // Large echo requests come back whole.
    let out = lab.client(&["ping", "-c", "3", "-i", "0.2", "-s", "1400", "-W", "2", &ip]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 received"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // The engine counted what the clients saw (published once a tick).
    std::thread::sleep(Duration::from_millis(50));
    let stats = dpd.stats();
    assert!(stats.icmp_echo_replies >= 8, "{stats:?}");
    assert!(stats.arp_replies >= 3, "{stats:?}");
    assert_eq!(
        stats.drops["bad_ip_checksum"]
            + stats.drops["bad_icmp_checksum"]
            + stats.drops["malformed"],
        0,
        "{stats:?}"
    );

    let status = dpd.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert!(
        status.success(),
        "dpd exit on SIGTERM: {status}\n{}",
        dpd.log_text()
    );
    assert!(!dpd.socket.exists(), "control socket removed on stop");
    let log = dpd.log_text();
    assert!(log.contains(&format!("driver {driver}")), "{log}");
    assert!(log.contains("stopped"), "{log}");
}

#[test]
fn ping_and_arping_through_af_packet() {
    ping_and_arping("net_af_packet", "p");
}

#[test]
fn ping_and_arping_through_af_xdp() {
    ping_and_arping("net_af_xdp", "x");
}

#[test]
fn sigint_stops_cleanly_and_nothing_else_answers() {
    let lab = Lab::up("s");
    // Before dpd runs, nobody owns the DUT address: the kernel must not
    // answer on dpd's behalf (the DUT side has no kernel address).
    let out = lab.client(&["ping", "-c", "1", "-W", "1", &lab.dut_ip()]);
    assert!(!out.status.success(), "something answered before dpd ran");

    let mut dpd = Dpd::start(&lab, |sock| lab.config("net_af_packet", sock, ""));
    let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &lab.dut_ip()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let status = dpd.stop_with(libc::SIGINT, Duration::from_secs(10));
    assert!(
        status.success(),
        "dpd exit on SIGINT: {status}\n{}",
        dpd.log_text()
    );

    lab.client(&["ip", "neigh", "flush", "dev", "veth-cli"]);
    let out = lab.client(&["ping", "-c", "1", "-W", "1", &lab.dut_ip()]);
    assert!(!out.status.success(), "replies after dpd stopped");
}

#[test]
fn dpctl_status_and_stats_against_a_running_dpd() {
    let lab = Lab::up("c");
    let dpd = Dpd::start(&lab, |sock| lab.config("net_af_packet", sock, ""));
    let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &lab.dut_ip()]);
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(50));

    let dpctl = |args: &[&str]| {
        e2e::run(
            std::process::Command::new(e2e::bin("dpctl"))
                .arg("--socket")
                .arg(&dpd.socket)
                .args(args),
        )
    };
    let out = dpctl(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("net_af_packet") && text.contains(&format!("{}/24", lab.dut_ip())),
        "{text}"
    );
    let out = dpctl(&["stats"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("icmp: echo_replies 2"), "{text}");
    let out = dpctl(&["stats", "--busy-seconds"]);
    let busy: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a number of seconds");
    assert!(busy > 0.0 && busy < 60.0, "engine busy seconds {busy}");
    let out = dpctl(&["--json", "stats", "--per-core"]);
    let reply: control::api::Reply =
        serde_json::from_slice(&out.stdout).expect("dpctl --json prints a reply");
    match reply.body {
        Some(control::api::Body::Stats(s)) => assert_eq!(s.cores.len(), 1),
        other => panic!("{other:?}"),
    }

    let mode = std::fs::metadata(&dpd.socket)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.unwrap(), 0o600, "control socket is owner-only");

    // Bad requests get an error reply; dpd carries on.
    let mut c = control::api::Client::connect(&dpd.socket).unwrap();
    let r = c.call_raw(b"this is not json\n").unwrap();
    assert!(!r.ok && r.error.unwrap().contains("malformed"));
    assert!(c.call(&control::api::Request::Status).unwrap().ok);

    let out = e2e::run(std::process::Command::new(e2e::bin("dpctl")).args([
        "--socket",
        "/nonexistent/dpd.sock",
        "status",
    ]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is dpd running?"));
}
