//! 802.1Q VLANs against the kernel over a veth link (docs/vlan.md). This
//! kernel has no 8021q module, so the client namespace tags and untags in
//! tc: `tests/vlan/vlan_tag.c`, built here with clang, tags frames to
//! 192.168.100.0/24 with VLAN 100 and to 192.168.200.0/24 with VLAN 200,
//! and takes the tag off what comes back. dpd's port has its untagged
//! network and both VLANs; a TLS VIP on VLAN 100 forwards to an nginx
//! backend on VLAN 200.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use e2e::capture::{largest, set_link_mtu, syn_mss, Capture};
use e2e::transfer::{fetch_page, no_frame_dropped_for_its_size, page, responder_download};
use e2e::{make_certs, verify_pattern_file, Dpd, HttpBackend, Lab, Nginx};

const CLIENT: &str = "192.168.100.2";
const VIP: &str = "192.168.100.80";
const BACKEND: &str = "192.168.200.11";

/// Builds the two tc programs into `dir` (tag.o, untag.o).
fn build_bpf(dir: &Path) {
    let src = e2e::repo_root().join("tests/vlan/vlan_tag.c");
    for (obj, define) in [("tag.o", Some("-DTAG")), ("untag.o", None)] {
        let mut cmd = Command::new("clang");
        cmd.args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
        ]);
        cmd.args(define);
        cmd.arg("-c").arg(&src).arg("-o").arg(dir.join(obj));
        let out = e2e::run(&mut cmd);
        assert!(
            out.status.success(),
            "clang (scripts/setup.sh installs clang and libbpf-dev): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Attaches the programs to the client veth and gives the namespace an
/// address on each VLAN's subnet (the client's and the backend's).
fn tag_client_side(lab: &Lab, dir: &Path) {
    let tag = dir.join("tag.o");
    let untag = dir.join("untag.o");
    let steps: Vec<Vec<&str>> = vec![
        vec!["tc", "qdisc", "add", "dev", "veth-cli", "clsact"],
        vec![
            "tc",
            "filter",
            "add",
            "dev",
            "veth-cli",
            "egress",
            "bpf",
            "da",
            "obj",
            tag.to_str().unwrap(),
            "sec",
            "tc",
        ],
        vec![
            "tc",
            "filter",
            "add",
            "dev",
            "veth-cli",
            "ingress",
            "bpf",
            "da",
            "obj",
            untag.to_str().unwrap(),
            "sec",
            "tc",
        ],
        vec!["ip", "addr", "add", "192.168.100.2/24", "dev", "veth-cli"],
        vec!["ip", "addr", "add", "192.168.200.11/24", "dev", "veth-cli"],
    ];
    for args in steps {
        let out = lab.client(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_vip_on_vlan_100_forwards_to_a_backend_on_vlan_200() {
    let dir = tempfile::tempdir().unwrap();
    build_bpf(dir.path());
    make_certs(dir.path());
    let lab = Lab::up("vl");
    tag_client_side(&lab, dir.path());
    let _backend = Nginx::start(
        &lab,
        dir.path(),
        &format!("server {{ listen {BACKEND}:80; location / {{ return 200 \"vlan 200 backend\\n\"; }} }}"),
        &format!("http://{BACKEND}/"),
    );
    let c = dir.path().display();
    let dpd = Dpd::start(&lab, |s| {
        let base = lab.config("net_af_packet", s, "");
        let vlans = "[[port.vlan]]\nid = 100\naddress = \"192.168.100.1/24\"\n\
                     [[port.vlan]]\nid = 200\naddress = \"192.168.200.1/24\"\n\n[control]";
        format!(
            "{}\n[[vip]]\nname = \"tls\"\nlisten = \"{VIP}:443\"\npool = \"b\"\n\
             certs = [{{ cert = \"{c}/p256.pem\", key = \"{c}/p256.key\" }}]\n\
             [[vip]]\nname = \"plain\"\nlisten = \"{VIP}:80\"\nrespond = \"builtin\"\n\
             [[pool]]\nname = \"b\"\nmembers = [{{ addr = \"{BACKEND}:80\" }}]\n",
            base.replace("[control]", vlans)
        )
    });
    // Each VLAN's address answers on its VLAN (the untagged network does
    // not have them: the tags are what reach them).
    for ip in ["192.168.100.1", "192.168.200.1", VIP] {
        let out = lab.client(&["ping", "-c", "2", "-i", "0.2", "-W", "2", ip]);
        assert!(
            out.status.success(),
            "ping {ip}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // TLS on VLAN 100, proxied to the backend on VLAN 200.
    let out = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        &format!("{c}/ca.pem"),
        "--resolve",
        &format!("p256.test:443:{VIP}"),
        "https://p256.test/",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "vlan 200 backend\n",
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        dpd.log_text()
    );
    // 20 MB from the responder on VLAN 100, byte-exact.
    let body = dir.path().join("body");
    let size: u64 = 20_000_000;
    let out = lab.client(&[
        "curl",
        "-sS",
        "--max-time",
        "60",
        "-o",
        body.to_str().unwrap(),
        "-w",
        "%{http_code} %{size_download}",
        &format!("http://{VIP}/bytes/{size}"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("200 {size}"));
    verify_pattern_file(&body, size);
    // A frame tagged for a VLAN the port does not have (scapy sends it as
    // it is): dropped and counted.
    let sent = lab.client(&[
        "/usr/bin/python3",
        "-c",
        &format!(
            "from scapy.all import *\nconf.verb = 0\n\
             sendp(Ether(dst='ff:ff:ff:ff:ff:ff')/Dot1Q(vlan=300)/ARP(psrc='{CLIENT}', pdst='192.168.100.1'), iface='veth-cli', count=3)\n"
        ),
    ]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let stats = dpd.stats_when(Duration::from_secs(3), |s| s.drops["unknown_vlan"] >= 3);
    assert_eq!(stats.drops["unknown_vlan"], 3, "{stats:?}");
    assert_eq!(stats.proxy_backend_failures, 0);
    // dpctl status lists the VLANs under the port.
    let out = e2e::run(
        Command::new(e2e::bin("dpctl"))
            .arg("--socket")
            .arg(&dpd.socket)
            .arg("status"),
    );
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("vlan 100  192.168.100.1/24"), "{status}");
    assert!(status.contains("vlan 200  192.168.200.1/24"), "{status}");
}

#[test]
fn jumbo_frames_on_vlans_carry_full_size_segments() {
    let dir = tempfile::tempdir().unwrap();
    build_bpf(dir.path());
    let lab = Lab::up("vj");
    // The link takes 9000-byte IP packets: 9,018-byte tagged frames.
    set_link_mtu(&lab, 9000);
    tag_client_side(&lab, dir.path());
    let page = page();
    let _backend = HttpBackend::start(&lab, BACKEND, 8080, &page);
    let dpd = Dpd::start(&lab, |s| {
        let base = lab.config("net_af_packet", s, "").replace(
            "iface=veth-dut\"",
            "iface=veth-dut,framesz=9216,blocksz=36864\"",
        );
        let vlans = "mtu = 9000\n\
                     [[port.vlan]]\nid = 100\naddress = \"192.168.100.1/24\"\n\
                     [[port.vlan]]\nid = 200\naddress = \"192.168.200.1/24\"\n\n[control]";
        format!(
            "{}\n[[vip]]\nname = \"plain\"\nlisten = \"{VIP}:80\"\nrespond = \"builtin\"\n\
             [[vip]]\nname = \"web\"\nlisten = \"{VIP}:8080\"\npool = \"b\"\n\
             [[pool]]\nname = \"b\"\nmembers = [{{ addr = \"{BACKEND}:8080\" }}]\n",
            base.replace("[control]", vlans)
        )
    });
    let capture = Capture::start(&lab, "veth-cli");
    // 6 MB from the responder on VLAN 100, byte-exact.
    responder_download(&lab, VIP, 6_000_000);
    // 3 MB from the backend on VLAN 200, through the proxy to VLAN 100.
    fetch_page(&lab, &format!("http://{VIP}:8080/"), &page);
    let segs = capture.stop();
    let (vip, dpd200, backend): (Ipv4Addr, Ipv4Addr, Ipv4Addr) = (
        VIP.parse().unwrap(),
        "192.168.200.1".parse().unwrap(),
        BACKEND.parse().unwrap(),
    );
    // dpd offers the jumbo MSS on both VLANs: to clients from the VIP, to
    // the backend from its VLAN 200 address.
    let offered = syn_mss(&segs, vip);
    assert!(offered.len() >= 2, "{offered:?}");
    assert!(offered.iter().all(|m| *m == Some(8960)), "{offered:?}");
    assert_eq!(syn_mss(&segs, dpd200), vec![Some(8960)]);
    // Full-size packets, each with its VLAN's tag, none above the MTU.
    assert_eq!(largest(&segs, Some(vip), None), 9000, "dpd to the client");
    assert_eq!(
        largest(&segs, Some(backend), Some(dpd200)),
        9000,
        "backend to dpd"
    );
    assert_eq!(largest(&segs, None, None), 9000);
    for s in &segs {
        let want = if s.src == vip || s.dst == vip {
            Some(100)
        } else if s.src == dpd200 || s.dst == dpd200 {
            Some(200)
        } else {
            continue;
        };
        assert_eq!(s.vlan, want, "{s:?}");
    }
    no_frame_dropped_for_its_size(&dpd);
    assert_eq!(dpd.stats().proxy_backend_failures, 0);
}
