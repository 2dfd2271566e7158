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

/// Runs the script's checks of `group` against a dpd (in a lab of its own)
/// with `[tcp]` options `tcp`; returns whether they all passed, and the
/// script's output.
fn conformance(tag: &str, tcp: &str, group: &str) -> (bool, String) {
    let lab = Lab::up(tag);
    raise_mtu(&lab);
    let dpd = Dpd::start(&lab, |s| lab.config_with_vip_tcp("net_af_packet", s, tcp));
    let script = e2e::repo_root().join("tests/conformance/tcp_conformance.py");
    let socket = dpd.socket.to_str().expect("utf-8 path").to_owned();
    let src = format!("{}.2", lab.net);
    // Bounded: the checks take about 30 s; timeout stops a stuck run.
    let out = lab.client(&[
        "timeout",
        "120",
        PYTHON,
        script.to_str().expect("utf-8 path"),
        "--dut",
        &lab.dut_ip(),
        "--src",
        &src,
        "--control",
        &socket,
        "--group",
        group,
    ]);
    let text = format!(
        "== {group} ({})\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    (out.status.success(), text)
}

/// Every check, in two runs one after the other (not as two tests in
/// parallel: two busy-polling dpds on one core would batch each other's
/// segments, and the challenge-ACK rate check needs its RSTs processed one
/// by one). First most checks, with a small half-open budget and cookies
/// `when_full` so that the flood check (the last) reaches it with 200
/// SYNs; then, with SYN cookies off, the forged-cookie check.
#[test]
fn tcp_conformance() {
    let runs = [
        conformance(
            "c",
            "syn_cookies = \"when_full\"\nmax_half_open = 16",
            "main",
        ),
        conformance(
            "k",
            "syn_cookies = \"off\"\nmax_half_open = 16",
            "cookies_off",
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
