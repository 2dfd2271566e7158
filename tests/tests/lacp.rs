//! An 802.3ad (LACP) bond of two links between two dpds (docs/lacp.md).
//! The kernel here has no bonding driver, so the partner is DPDK's own
//! mode 4 in a second dpd. Each link is a pair of `net_tap` devices, one
//! per dpd, joined by tc (mirred redirect both ways: a Linux bridge would
//! not pass LACP frames); a tap set down is a cable pulled, and `net_tap`
//! reports its link down. The client (curl, over the lab's veth) talks to
//! a VIP on dpd A, whose pool member is a VIP on dpd B across the bond.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use control::api::{Body, Client, PortStatus, Request};
use e2e::{dpd_refuses_in, verify_pattern_file, Dpd, Lab};

/// dpd's port `name` as `dpctl status` shows it.
fn port(dpd: &Dpd, name: &str) -> PortStatus {
    let reply = Client::connect(&dpd.socket)
        .and_then(|mut c| c.call(&Request::Status))
        .expect("status");
    match reply.body {
        Some(Body::Status(s)) => s
            .ports
            .into_iter()
            .find(|p| p.name == name)
            .expect("the port"),
        other => panic!("{other:?}"),
    }
}

/// Waits (up to `limit`) until both bonds aggregate `n` members.
fn wait_aggregated(a: &Dpd, b: &Dpd, n: u16, limit: Duration) -> (Option<u16>, Option<u16>) {
    let t0 = Instant::now();
    loop {
        let got = (
            port(a, "bond0").active_members,
            port(b, "bond0").active_members,
        );
        if got == (Some(n), Some(n)) || t0.elapsed() > limit {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ns(lab: &Lab, args: &[&str]) {
    let ns = format!("{}-dut", lab.name);
    let out = e2e::run(Command::new("ip").args(["netns", "exec", &ns]).args(args));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Joins tap `a` and tap `b` as one cable: what one dpd writes into its
/// tap leaves through the other's.
fn cable(lab: &Lab, a: &str, b: &str) {
    for (from, to) in [(a, b), (b, a)] {
        ns(lab, &["tc", "qdisc", "add", "dev", from, "ingress"]);
        ns(
            lab,
            &[
                "tc", "filter", "add", "dev", from, "ingress", "protocol", "all", "u32", "match",
                "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", to,
            ],
        );
    }
}

fn config(lab: &Lab, socket: &Path, body: &str) -> String {
    // Two dpds in one namespace: one metrics endpoint is enough.
    lab.config("net_af_packet", socket, "")
        .replace("[control]\n", "[control]\nmetrics = \"\"\n")
        + body
}

#[test]
fn a_member_link_cut_mid_transfer_loses_no_connection() {
    let lab = Lab::up("lc");
    // The taps must not carry the kernel's own IPv6 chatter.
    ns(
        &lab,
        &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
    );
    let a = Dpd::start(&lab, |s| {
        config(
            &lab,
            s,
            "[[port]]\nname = \"bond0\"\ndevice = \"net_bonding0\"\n\
             bond_members = [\"net_tap0,iface=ta1\", \"net_tap1,iface=ta2\"]\n\
             address = \"10.250.0.1/24\"\n\
             [[vip]]\nname = \"front\"\nlisten = \"LAB:80\"\npool = \"b\"\n\
             [[pool]]\nname = \"b\"\nmembers = [{ addr = \"10.250.0.2:80\" }]\n",
        )
        .replace("LAB", &lab.dut_ip())
    });
    let b = Dpd::start(&lab, |s| {
        // dpd B has only the bond: the lab's config without its port.
        let eal = config(&lab, s, "");
        let eal = eal.split("[[port]]").next().unwrap_or_default();
        format!(
            "{eal}[control]\nmetrics = \"\"\nsocket = \"{}\"\n\
             [[port]]\nname = \"bond0\"\ndevice = \"net_bonding0\"\n\
             bond_members = [\"net_tap0,iface=tb1\", \"net_tap1,iface=tb2\"]\n\
             address = \"10.250.0.2/24\"\n\
             [[vip]]\nname = \"back\"\nlisten = \"10.250.0.2:80\"\nrespond = \"builtin\"\n",
            s.display()
        )
    });
    cable(&lab, "ta1", "tb1");
    cable(&lab, "ta2", "tb2");
    // LACP: each side aggregates both links once it has heard its
    // partner on them.
    let got = wait_aggregated(&a, &b, 2, Duration::from_secs(40));
    assert_eq!(
        got,
        (Some(2), Some(2)),
        "{}\n{}",
        a.log_text(),
        b.log_text()
    );
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let size: u64 = 100_000_000;
    let url = format!("http://{}/bytes/{size}", lab.dut_ip());
    let curl = lab
        .client_command(&[
            "curl",
            "-sS",
            "--max-time",
            "120",
            "-o",
            body.to_str().unwrap(),
            "-w",
            "%{http_code} %{size_download}",
            &url,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    // Mid-transfer (data flowing from B), the cable carrying it is
    // pulled: both its ends lose their link.
    let before = b.stats_when(Duration::from_secs(10), |s| s.tx_bytes > 10_000_000);
    assert!(
        before.tx_bytes > 10_000_000,
        "the transfer started: {before:?}"
    );
    // The link carrying B's data (the bond's hash keeps a flow on one).
    let from_b = |tap: &str| -> u64 {
        let ns_name = format!("{}-dut", lab.name);
        let out = e2e::run(Command::new("ip").args([
            "netns",
            "exec",
            &ns_name,
            "cat",
            &format!("/sys/class/net/{tap}/statistics/rx_bytes"),
        ]));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let link = if from_b("tb1") > from_b("tb2") {
        "1"
    } else {
        "2"
    };
    ns(&lab, &["ip", "link", "set", &format!("ta{link}"), "down"]);
    ns(&lab, &["ip", "link", "set", &format!("tb{link}"), "down"]);
    let got = wait_aggregated(&a, &b, 1, Duration::from_secs(5));
    assert_eq!(got, (Some(1), Some(1)), "the bonds dropped the cut link");
    let out = curl.wait_with_output().expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("200 {size}"),
        "{}\n{}",
        a.log_text(),
        b.log_text()
    );
    verify_pattern_file(&body, size);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.proxy_backend_failures, 0, "{sa:?}");
    assert_eq!((sa.tcp_timeouts, sb.tcp_timeouts), (0, 0));
    assert_eq!((sa.tcp_resets_sent, sb.tcp_resets_sent), (0, 0));
    eprintln!(
        "after the cut: B retransmitted {} segments ({} RACK losses, {} tail loss probes, {} RTOs)",
        sb.tcp_retransmits, sb.tcp_rack_losses, sb.tcp_tail_loss_probes, sb.tcp_rto_expiries
    );
    // dpctl status tells the operator.
    let out = e2e::run(
        Command::new(e2e::bin("dpctl"))
            .arg("--socket")
            .arg(&a.socket)
            .arg("status"),
    );
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("bond 802.3ad: 1 of 2 members aggregated"),
        "{status}"
    );
}

/// DPDK 22.11's `net_tap` takes frames of 1,522 bytes at most, and a bond hands
/// its MTU to its members: a bond of two taps asked for 9000 is refused
/// at start, naming the member and what it takes (DPDK alone answered
/// "rte_eth_dev_configure failed: Operation not permitted").
#[test]
fn a_bond_whose_members_cannot_take_its_mtu_is_refused_by_name() {
    let lab = Lab::up("lm");
    let dir = tempfile::tempdir().unwrap();
    let body = "[[port]]\nname = \"bond0\"\ndevice = \"net_bonding0\"\n\
                bond_members = [\"net_tap0,iface=ta1\", \"net_tap1,iface=ta2\"]\n\
                address = \"10.250.0.1/24\"\nmtu = 9000\n";
    let (status, stderr) = dpd_refuses_in(&lab, &config(&lab, &dir.path().join("dpd.sock"), body));
    assert_eq!(status.code(), Some(2), "{stderr}");
    for needle in [
        "port[1].mtu",
        "\"9000\"",
        // 1522-byte frames: 1504 by DPDK's rule.
        "bond member net_tap0,iface=ta1 (driver net_tap) takes an MTU of 1504 at most",
    ] {
        assert!(stderr.contains(needle), "lacks {needle:?}:\n{stderr}");
    }
}
