//! Checksum offload on a port whose driver has it: DPDK's `net_tap` takes
//! transmit checksum requests in the mbuf (`RTE_MBUF_F_TX_IP_CKSUM`,
//! `RTE_MBUF_F_TX_TCP_CKSUM`) and fills them before the frame reaches the
//! kernel, and flags received frames' checksums good or bad. dpd then
//! leaves the IPv4 checksum zero and only the pseudo-header sum in the TCP
//! field: a frame the driver did not finish would be dropped by the
//! kernel peer, so byte-exact transfers (plain, TLS, and plain under 2 %
//! loss both ways) prove the path. The same runs with `checksum_offload =
//! false` prove the software path; a SYN with a wrong checksum is dropped
//! and counted either way.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use control::api::{Body, ChecksumOffloads, Client, PortStatus, Request};
use e2e::transfer::responder_download;
use e2e::{make_certs, run, verify_pattern_file, Dpd, Lab, UploadSink};

const DUT: &str = "192.168.78.1";
const CLIENT: &str = "192.168.78.2";

#[test]
fn tap_port_offloads_checksums() {
    transfers_on_a_tap(true);
}

#[test]
fn tap_port_with_offload_off_checksums_in_software() {
    transfers_on_a_tap(false);
}

/// tlsdp's own tap port with virtio-net headers: TCP segments of many
/// MSS go to the kernel whole (GSO) and come from it whole (an upload),
/// checksums are the kernel's to finish.
#[test]
fn vnet_tap_port_segments_and_offloads() {
    transfers_on_a_vnet_tap(true);
}

/// The same port with `checksum_offload = false`: every frame one MSS,
/// every checksum in software.
#[test]
fn vnet_tap_port_with_offloads_off() {
    transfers_on_a_vnet_tap(false);
}

/// TSO over IPv6 on the vnet tap: dpd's segments of many MSS go to the
/// kernel as `GSO_TCPV6` packets (a wrong virtio-net header and the kernel
/// drops them), 200 MB byte-exact.
#[test]
fn vnet_tap_port_segments_ipv6() {
    const DUT: &str = "192.168.79.1";
    const DUT6: &str = "fd00:79::1";
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let c = certs.path().display().to_string();
    let lab = Lab::up("v6o");
    lab.add_vnet_tap("192.168.79");
    lab.add_client_ipv6("tap-cli", "fd00:79::2/64");
    let ns = format!("{}-cli", lab.name);
    let device = format!("vnet_tap,iface=tap-cli,netns={ns}");
    let vip6 =
        format!("[[vip]]\nname = \"plain6\"\nlisten = \"[{DUT6}]:80\"\nrespond = \"builtin\"\n");
    let dpd = Dpd::start(&lab, |s| {
        config(&device, DUT, true, &c, &vip6, s).replace(
            &format!("address = \"{DUT}/24\""),
            &format!("addresses = [\"{DUT}/24\", \"{DUT6}/64\"]"),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let size: u64 = 200_000_000;
    let out = lab.client(&[
        "curl",
        "-6",
        "-sS",
        "--max-time",
        "120",
        "-o",
        body.to_str().unwrap(),
        "-w",
        "%{http_code} %{size_download}",
        &format!("http://[{DUT6}]/bytes/{size}"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("200 {size}"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    verify_pattern_file(&body, size);
    let stats = dpd.stats();
    assert!(stats.tcp_segmentation_offloads > 1_000, "{stats:?}");
    assert_eq!(stats.drops["oversize"], 0);
    assert_eq!(stats.drops["port_error"], 0);
    assert_eq!(stats.drops["bad_tcp_checksum"], 0);
}

/// A port that cuts segments beside one that does not, in one engine: the
/// vnet tap's connections keep their segments of many MSS, and the
/// af_packet port's never get one (it would drop them as oversize).
#[test]
fn a_vnet_tap_keeps_tso_beside_an_af_packet_port() {
    const TAP_DUT: &str = "192.168.76.1";
    let lab = Lab::up("vmix");
    lab.add_vnet_tap("192.168.76");
    let ns = format!("{}-cli", lab.name);
    let veth_dut = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        let tap = format!(
            "[[port]]\nname = \"tap\"\ndevice = \"vnet_tap,iface=tap-cli,netns={ns}\"\n\
             address = \"{TAP_DUT}/24\"\n\n[control]"
        );
        format!(
            "{}\n[[vip]]\nname = \"veth\"\nlisten = \"{veth_dut}:80\"\nrespond = \"builtin\"\n\
             [[vip]]\nname = \"tap\"\nlisten = \"{TAP_DUT}:80\"\nrespond = \"builtin\"\n",
            lab.config("net_af_packet", s, "")
                .replace("[control]", &tap)
        )
    });
    // 20 MB over af_packet: whole frames only.
    responder_download(&lab, &veth_dut, 20_000_000);
    let stats = dpd.stats();
    assert_eq!(stats.tcp_segmentation_offloads, 0, "{stats:?}");
    assert_eq!(stats.drops["oversize"], 0);
    // 200 MB over the tap: in segments of many MSS. Before, the port
    // without TSO turned it off for every connection of the engine.
    responder_download(&lab, TAP_DUT, 200_000_000);
    let stats = dpd.stats();
    assert!(stats.tcp_segmentation_offloads > 1_000, "{stats:?}");
    assert_eq!(stats.drops["oversize"], 0);
    assert_eq!(stats.drops["port_error"], 0);
}

fn transfers_on_a_vnet_tap(offload: bool) {
    const DUT: &str = "192.168.79.1";
    const CLIENT: &str = "192.168.79.2";
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let c = certs.path().display().to_string();
    let lab = Lab::up(if offload { "vo" } else { "vs" });
    lab.add_vnet_tap("192.168.79");
    let ns = format!("{}-cli", lab.name);
    let sink = format!(
        r#"[[vip]]
name = "up"
listen = "{DUT}:6443"
pool = "sink"
certs = ["p256"]

[[pool]]
name = "sink"
members = [{{ addr = "{CLIENT}:8082" }}]
"#
    );
    let device = format!("vnet_tap,iface=tap-cli,netns={ns}");
    let dpd = Dpd::start(&lab, |s| config(&device, DUT, offload, &c, &sink, s));
    let _sink = UploadSink::start(&lab, CLIENT, 8082);
    let status = port_status(&dpd);
    assert_eq!(status.driver, "vnet_tap");
    assert!(status.link_up);
    if offload {
        assert_eq!(
            status.checksum_offload,
            ChecksumOffloads {
                rx_ipv4: false,
                rx_tcp: true,
                tx_ipv4: true,
                tx_tcp: true,
            }
        );
        assert!(status.segmentation_max_frame > 60_000, "{status:?}");
    } else {
        assert_eq!(status.checksum_offload, ChecksumOffloads::default());
        assert_eq!(status.segmentation_max_frame, 0);
    }

    // A gigabyte each, plain and TLS, every byte checked.
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let resolve = format!("p256.test:443:{DUT}");
    let plain = format!("http://{DUT}/bytes/1000000000");
    download(&lab, &plain, &resolve, certs.path(), &body);
    verify_pattern_file(&body, 1_000_000_000);
    let tls = "https://p256.test/bytes/1000000000";
    download(&lab, tls, &resolve, certs.path(), &body);
    verify_pattern_file(&body, 1_000_000_000);
    // 200 MB up through a TLS VIP to a sink behind the same tap: the
    // client's kernel hands its segments of many MSS over whole (GSO, as
    // a NIC's LRO), and the sink's SHA-256 is the file's.
    let up = dir.path().join("up");
    let o = run(Command::new("head")
        .args(["-c", "200000000", "/dev/urandom"])
        .stdout(std::fs::File::create(&up).unwrap()));
    assert!(o.status.success());
    let got = UploadSink::upload(
        &lab,
        &format!("{}/ca.pem", certs.path().display()),
        &format!("p256.test:6443:{DUT}"),
        "https://p256.test:6443/upload",
        &up,
    );
    assert_eq!(got, UploadSink::expected(&up));
    let stats = dpd.stats();
    if offload {
        // At least a gigabyte in segments of many MSS: ~20,000 of ~1.4 M.
        assert!(stats.tcp_segmentation_offloads > 10_000, "{stats:?}");
        assert!(stats.tcp_large_segments_in > 100, "{stats:?}");
    } else {
        assert_eq!(stats.tcp_segmentation_offloads, 0);
        assert_eq!(stats.tcp_large_segments_in, 0);
    }
    assert_eq!(stats.drops["oversize"], 0);
    assert_eq!(stats.drops["port_error"], 0);

    bad_checksums_are_dropped(&lab, &dpd, DUT, CLIENT, "tap-cli");

    // 2 % of TCP segments each way dropped (on the kernel side, where a
    // segment of many MSS is one packet): retransmissions take the same
    // path, plain and TLS.
    lab.drop_tcp(2);
    lab.drop_tcp_port(443, 2);
    download(
        &lab,
        &format!("http://{DUT}/bytes/30000000"),
        &resolve,
        certs.path(),
        &body,
    );
    verify_pattern_file(&body, 30_000_000);
    download(
        &lab,
        "https://p256.test/bytes/30000000",
        &resolve,
        certs.path(),
        &body,
    );
    verify_pattern_file(&body, 30_000_000);
    let lossy = dpd.stats();
    assert!(lossy.tcp_retransmits > stats.tcp_retransmits, "{lossy:?}");
}

fn transfers_on_a_tap(offload: bool) {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let c = certs.path().display().to_string();
    let lab = Lab::up(if offload { "of" } else { "so" });
    let dpd = Dpd::start(&lab, |s| {
        config("net_tap0,iface=otap0", DUT, offload, &c, "", s)
    });
    tap_to_client_namespace(&lab, "otap0", CLIENT);

    let offloads = port_offloads(&dpd);
    let want = if offload {
        // What net_tap offers in DPDK 22.11 (tap_rx_offload_get_port_capa,
        // tap_tx_offload_get_port_capa).
        ChecksumOffloads {
            rx_ipv4: true,
            rx_tcp: true,
            tx_ipv4: true,
            tx_tcp: true,
        }
    } else {
        ChecksumOffloads::default()
    };
    assert_eq!(offloads, want, "dpctl status shows what is in use");
    let log = dpd.log_text();
    let said = if offload {
        "checksum offload rx ipv4+tcp, tx ipv4+tcp"
    } else {
        "checksum offload off (checksum_offload = false)"
    };
    assert!(
        log.contains(said),
        "dpd says which offloads it uses:\n{log}"
    );

    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let resolve = format!("p256.test:443:{DUT}");
    download(
        &lab,
        &format!("http://{DUT}/bytes/100000000"),
        &resolve,
        certs.path(),
        &body,
    );
    verify_pattern_file(&body, 100_000_000);
    download(
        &lab,
        "https://p256.test/bytes/50000000",
        &resolve,
        certs.path(),
        &body,
    );
    verify_pattern_file(&body, 50_000_000);

    // A SYN whose TCP checksum is wrong: dropped and counted (by the
    // driver's verdict with offload, by software without), not answered.
    bad_checksums_are_dropped(&lab, &dpd, DUT, CLIENT, "otap0");

    // Retransmissions are built by the same path: 2 % of the segments
    // each way dropped.
    lab.drop_tcp(2);
    download(
        &lab,
        &format!("http://{DUT}/bytes/20000000"),
        &resolve,
        certs.path(),
        &body,
    );
    verify_pattern_file(&body, 20_000_000);
}

/// dpd on one port (`device`, at `dut`, checksum offload as given) with a
/// plain and a TLS (P-256, certificates in `certs`) responder VIP; `extra`
/// (more VIPs and pools) appended.
fn config(
    device: &str,
    dut: &str,
    offload: bool,
    certs: &str,
    extra: &str,
    socket: &Path,
) -> String {
    format!(
        r#"[eal]
lcores = [1]
idle_sleep_us = 20

[[port]]
name = "p0"
device = "{device}"
address = "{dut}/24"
checksum_offload = {offload}

[[cert]]
name = "p256"
cert = "{certs}/p256.pem"
key = "{certs}/p256.key"

[[vip]]
name = "plain"
listen = "{dut}:80"
respond = "builtin"

[[vip]]
name = "tls"
listen = "{dut}:443"
respond = "builtin"
certs = ["p256"]

{extra}
[control]
socket = "{}"
"#,
        socket.display()
    )
}

/// Two SYNs from `client` on `iface`, one with a wrong TCP checksum, one
/// with a wrong IPv4 checksum: each dropped and counted, neither taken.
fn bad_checksums_are_dropped(lab: &Lab, dpd: &Dpd, dut: &str, client: &str, iface: &str) {
    let before = dpd.stats();
    let sent = lab.client(&[
        "/usr/bin/python3",
        "-c",
        &format!(
            "from scapy.all import *\n\
             conf.verb = 0\n\
             mac = getmacbyip('{dut}')\n\
             sendp(Ether(dst=mac)/IP(src='{client}', dst='{dut}')/TCP(sport=40001, dport=80, flags='S', seq=1, chksum=0x1234), iface='{iface}')\n\
             sendp(Ether(dst=mac)/IP(src='{client}', dst='{dut}', chksum=0x1234)/TCP(sport=40002, dport=80, flags='S', seq=1), iface='{iface}')\n"
        ),
    ]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let after = dpd.stats_when(Duration::from_secs(5), |s| {
        s.drops["bad_tcp_checksum"] > before.drops["bad_tcp_checksum"]
            && s.drops["bad_ip_checksum"] > before.drops["bad_ip_checksum"]
    });
    assert_eq!(
        after.drops["bad_tcp_checksum"],
        before.drops["bad_tcp_checksum"] + 1
    );
    assert_eq!(
        after.drops["bad_ip_checksum"],
        before.drops["bad_ip_checksum"] + 1
    );
    assert_eq!(after.tcp_accepted, before.tcp_accepted, "no SYN taken");
}

/// Moves the kernel side of dpd's tap into the client namespace with
/// `addr`; the kernel's transmit checksums are filled in (no partial
/// checksums towards dpd).
fn tap_to_client_namespace(lab: &Lab, tap: &str, addr: &str) {
    let cli = format!("{}-cli", lab.name);
    let o = run(Command::new("ip").args([
        "-n",
        &format!("{}-dut", lab.name),
        "link",
        "set",
        tap,
        "netns",
        &cli,
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let prefix = format!("{addr}/24");
    for args in [
        &["ip", "addr", "add", &prefix, "dev", tap][..],
        &["ip", "link", "set", tap, "up"],
        &["ethtool", "-K", tap, "tx", "off"],
    ] {
        let o = lab.client(args);
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The checksum offloads `dpctl status` reports for the port.
fn port_offloads(dpd: &Dpd) -> ChecksumOffloads {
    port_status(dpd).checksum_offload
}

/// The first port as `dpctl status` reports it.
fn port_status(dpd: &Dpd) -> PortStatus {
    let reply = Client::connect(&dpd.socket)
        .and_then(|mut c| c.call(&Request::Status))
        .unwrap();
    match reply.body {
        Some(Body::Status(s)) => s.ports[0].clone(),
        other => panic!("{other:?}"),
    }
}

/// curl `url` from the client namespace into `out`; panics unless it got
/// a 200 with every byte.
fn download(lab: &Lab, url: &str, resolve: &str, certs: &Path, out: &Path) {
    let o = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "120",
        "--cacert",
        &format!("{}/ca.pem", certs.display()),
        "--resolve",
        resolve,
        "-o",
        out.to_str().unwrap(),
        "-w",
        "%{http_code} %{size_download}",
        url,
    ]);
    let got = String::from_utf8_lossy(&o.stdout);
    if !(o.status.success() && got.starts_with("200 ")) {
        // The client kernel's TCP counters (checksum errors, PAWS,
        // retransmissions) tell which side stopped; dpd's follow from
        // its post-mortem.
        let nstat = lab.client(&["nstat", "-a", "-s"]);
        panic!(
            "{url}: {got} {}\nclient nstat:\n{}",
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&nstat.stdout)
        );
    }
}
