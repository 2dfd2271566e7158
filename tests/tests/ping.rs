//! A kernel client in its own network namespace pings and arpings `dpd`,
//! which owns the other end of the veth link through DPDK's AF_PACKET and
//! AF_XDP virtual devices. ICMP and ARP carry no TCP checksums, so the
//! client-side checksum offload setting does not matter here (lab.sh turns
//! it off).

use std::process::Command;
use std::time::Duration;

use e2e::{dpd_refuses_in, Dpd, Lab};

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
fn a_second_dpd_on_the_same_socket_or_metrics_stops_before_its_eal() {
    // A second dpd given the running one's configuration (a unit started
    // twice, an operator trying it by hand) found the control socket in
    // use only after its EAL, ports and engines were up: on an af_packet
    // port each process gets every frame, so its engines reset the
    // running one's connections as strays until it gave up. It must stop
    // before DPDK starts, naming why.
    let lab = Lab::up("dd");
    let dpd = Dpd::start(&lab, |sock| lab.config("net_af_packet", sock, ""));
    let same = lab.config("net_af_packet", &dpd.socket, "");
    let (status, stderr) = dpd_refuses_in(&lab, &same);
    assert!(!status.success());
    assert!(stderr.contains("in use by a running dpd"), "{stderr}");
    assert!(!stderr.contains("EAL: "), "DPDK never started: {stderr}");
    assert!(dpd.socket.exists(), "the running one's socket left alone");
    // Its own socket, the same metrics endpoint (the default,
    // 127.0.0.1:9464): refused as early.
    let other = lab.config("net_af_packet", &dpd.dir.path().join("other.sock"), "");
    let (status, stderr) = dpd_refuses_in(&lab, &other);
    assert!(!status.success());
    assert!(
        stderr.contains("metrics endpoint 127.0.0.1:9464"),
        "{stderr}"
    );
    assert!(!stderr.contains("EAL: "), "DPDK never started: {stderr}");
    assert!(!dpd.dir.path().join("other.sock").exists());
    // The running one serves on.
    let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", &lab.dut_ip()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
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

/// IPv6 on a port (`addresses` with an IPv6 prefix): the client's kernel
/// resolves dpd by Neighbor Discovery and pings its global and link-local
/// addresses (both shown by `dpctl status`), large echoes too; hand-built
/// bad packets (scapy: a fragment, an option that says discard, a routing
/// header asking to be forwarded, answered with a Parameter Problem, a
/// wrong ICMPv6 checksum) are dropped, counted, and leave it answering.
#[test]
fn ping6_and_neighbor_discovery_through_af_packet() {
    let lab = Lab::up("6");
    let prefix = lab.prefix6();
    let (dut6, cli6) = (format!("{prefix}::1"), format!("{prefix}::2"));
    lab.add_client_ipv6("veth-cli", &format!("{cli6}/64"));
    let mut dpd = Dpd::start(&lab, |sock| {
        lab.config("net_af_packet", sock, "").replace(
            &format!("address = \"{}/24\"", lab.dut_ip()),
            &format!("addresses = [\"{}/24\", \"{dut6}/64\"]", lab.dut_ip()),
        )
    });
    let ping = |dst: &str, extra: &[&str]| {
        let mut args = vec!["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2"];
        args.extend_from_slice(extra);
        args.push(dst);
        let out = lab.client(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && text.contains("3 received"),
            "ping -6 {dst}:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ping(&dut6, &[]);
    ping(&dut6, &["-s", "1400"]);
    // The kernel learned dpd's MAC by Neighbor Discovery.
    let out = lab.client(&["ip", "-6", "neigh", "show", &dut6, "dev", "veth-cli"]);
    let neigh = String::from_utf8_lossy(&out.stdout).into_owned();
    let mac = neigh
        .split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .unwrap_or_else(|| panic!("no neighbour entry for {dut6}: {neigh:?}"))
        .to_string();

    // `dpctl status` shows both addresses; the link-local one answers.
    let out = e2e::run(
        Command::new(e2e::bin("dpctl"))
            .arg("--socket")
            .arg(&dpd.socket)
            .arg("status"),
    );
    let status = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(status.contains(&format!("{dut6}/64")), "{status}");
    let link_local = status
        .split_whitespace()
        .find(|w| w.starts_with("fe80::"))
        .and_then(|w| w.strip_suffix("/64"))
        .unwrap_or_else(|| panic!("no link-local address in:\n{status}"))
        .to_string();
    ping(&format!("{link_local}%veth-cli"), &[]);

    let before = dpd.stats();
    let sent = lab.client(&[
        "/usr/bin/python3",
        "-c",
        &format!(
            "from scapy.all import *\n\
             conf.verb = 0\n\
             e = Ether(dst='{mac}')\n\
             ip = IPv6(src='{cli6}', dst='{dut6}')\n\
             sendp(e/ip/IPv6ExtHdrFragment(m=1)/ICMPv6EchoRequest(data=b'x'*64), iface='veth-cli')\n\
             sendp(e/ip/IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x41, optdata=b'ab')])/ICMPv6EchoRequest(), iface='veth-cli')\n\
             r = srp1(e/ip/IPv6ExtHdrRouting(addresses=['{cli6}'])/ICMPv6EchoRequest(), iface='veth-cli', timeout=3)\n\
             print('problem', r[ICMPv6ParamProblem].code, r[ICMPv6ParamProblem].ptr)\n\
             sendp(e/ip/ICMPv6EchoRequest(cksum=0x1234), iface='veth-cli')\n"
        ),
    ]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // RFC 8200 §4.4: a routing header with segments left is answered with
    // a Parameter Problem pointing at its routing type.
    assert!(
        String::from_utf8_lossy(&sent.stdout).contains("problem 0 42"),
        "{}",
        String::from_utf8_lossy(&sent.stdout)
    );
    let drops = |s: &control::api::CoreStats| {
        (
            s.drops["fragment"],
            s.drops["bad_extension_header"],
            s.drops["bad_icmp_checksum"],
        )
    };
    let (f0, x0, c0) = drops(&before);
    let after = dpd.stats_when(Duration::from_secs(5), |s| {
        drops(s) == (f0 + 1, x0 + 2, c0 + 1)
    });
    assert_eq!(drops(&after), (f0 + 1, x0 + 2, c0 + 1), "{after:?}");
    ping(&dut6, &[]);

    let stats = dpd.stats_when(Duration::from_secs(5), |s| s.icmpv6_echo_replies >= 12);
    assert!(stats.icmpv6_echo_replies >= 12, "{stats:?}");
    assert!(stats.nd_advertisements >= 1, "{stats:?}");
    // Its solicited-node groups were reported at start (RFC 3810 §6.1),
    // its two addresses checked for duplicates, none found.
    assert_eq!(stats.mld_reports, 2, "{stats:?}");
    assert!(stats.nd_solicitations >= 2, "{stats:?}");
    assert_eq!(stats.nd_conflicts, 0, "{stats:?}");
    assert_eq!(stats.drops["malformed"], 0, "{stats:?}");
    let status = dpd.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert!(status.success(), "{}", dpd.log_text());
}
