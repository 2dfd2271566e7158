//! TCP conformance: `tests/conformance/tcp_conformance.py` sends hand-built
//! segments (scapy) from the client namespace to dpd's built-in HTTP
//! responder and checks each answer against the RFC rule it names (RFC
//! 9293, 5961, 7323, 2018, 5681, 6298, 8985, 1337, 4987). One line per check,
//! `PASS name` or `FAIL name: why`; the test fails if any check failed and
//! shows them all. The list and how to run it: docs/testing.md.
//!
//! Run just this: `cargo test -p e2e --test tcp_conformance` (root;
//! `python3-scapy`, which scripts/setup.sh installs).

use std::process::Command;

use e2e::{Dpd, Lab};

/// Debian's python3, which has python3-scapy (scripts/setup.sh).
const PYTHON: &str = "/usr/bin/python3";

/// Sets the MTU of both ends of the lab's veth link to 9000, so that a
/// segment dpd sends over 1500 bytes (one check is that none is) reaches
/// the script and is measured instead of being dropped by the veth. dpd
/// does not read the link's MTU: its own MSS stays 1460.
fn raise_mtu(lab: &Lab) {
    for (ns, dev) in [("cli", "veth-cli"), ("dut", "veth-dut")] {
        let ns = format!("{}-{ns}", lab.name);
        let out = e2e::run(Command::new("ip").args(["-n", &ns, "link", "set", dev, "mtu", "9000"]));
        assert!(
            out.status.success(),
            "ip link set {dev} mtu 9000: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Which family the checks run over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    /// dpd's port gets `fd00:A:B::1/64` beside its IPv4 address, the VIP
    /// listens there, the client sends from `fd00:A:B::2`.
    V6,
}

/// Runs the script's checks of `group` against a dpd (in a lab of its own)
/// with `[tcp]` options `tcp`, over `family`; returns whether they all
/// passed, and the script's output.
fn conformance(tag: &str, tcp: &str, group: &str, family: Family) -> (bool, String) {
    let lab = Lab::up(tag);
    raise_mtu(&lab);
    let prefix = lab.prefix6();
    let (dut, src) = match family {
        Family::V4 => (lab.dut_ip(), format!("{}.2", lab.net)),
        Family::V6 => {
            lab.add_client_ipv6("veth-cli", &format!("{prefix}::2/64"));
            (format!("{prefix}::1"), format!("{prefix}::2"))
        }
    };
    let dpd = Dpd::start(&lab, |s| {
        let config = lab.config_with_vip_tcp("net_af_packet", s, tcp);
        match family {
            Family::V4 => config,
            Family::V6 => config
                .replace(
                    &format!("address = \"{}/24\"", lab.dut_ip()),
                    &format!("addresses = [\"{}/24\", \"{dut}/64\"]", lab.dut_ip()),
                )
                .replace(
                    &format!("listen = \"{}:80\"", lab.dut_ip()),
                    &format!("listen = \"[{dut}]:80\""),
                ),
        }
    });
    let script = e2e::repo_root().join("tests/conformance/tcp_conformance.py");
    let socket = dpd.socket.to_str().expect("utf-8 path").to_owned();
    // Bounded: the checks take about 30 s; timeout stops a stuck run.
    let out = lab.client(&[
        "timeout",
        "120",
        PYTHON,
        script.to_str().expect("utf-8 path"),
        "--dut",
        &dut,
        "--src",
        &src,
        "--control",
        &socket,
        "--group",
        group,
    ]);
    let over = if family == Family::V6 {
        " over IPv6"
    } else {
        ""
    };
    let text = format!(
        "== {group}{over} ({})\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    (out.status.success(), text)
}

/// Every check, over IPv4 then IPv6, each in two runs one after the other
/// (not as tests in parallel: two busy-polling dpds on one core would
/// batch each other's segments, and the challenge-ACK rate check needs its
/// RSTs processed one by one). First most checks, with a small half-open budget and cookies
/// `when_full` so that the flood check (the last) reaches it with 200
/// SYNs; then, with SYN cookies off, the forged-cookie check.
#[test]
fn tcp_conformance() {
    let runs = [
        conformance(
            "c",
            "syn_cookies = \"when_full\"\nmax_half_open = 16",
            "main",
            Family::V4,
        ),
        conformance(
            "k",
            "syn_cookies = \"off\"\nmax_half_open = 16",
            "cookies_off",
            Family::V4,
        ),
        // The same checks over IPv6 (docs/ipv6.md): the VIP on an IPv6
        // address, segments built with scapy's `IPv6()`, dpd found by
        // Neighbor Discovery.
        conformance(
            "c6",
            "syn_cookies = \"when_full\"\nmax_half_open = 16",
            "main",
            Family::V6,
        ),
        conformance(
            "k6",
            "syn_cookies = \"off\"\nmax_half_open = 16",
            "cookies_off",
            Family::V6,
        ),
    ];
    assert!(
        runs.iter().all(|(ok, _)| *ok),
        "TCP conformance checks failed:\n{}",
        runs.iter()
            .map(|(_, text)| text.as_str())
            .collect::<String>()
    );
}
