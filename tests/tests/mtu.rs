//! A port's MTU (`mtu` in `[[port]]`) against Linux over veth: jumbo
//! frames both ways (a kernel client uploading and downloading, a kernel
//! backend behind the proxy), a jumbo backend network beside a 1500-byte
//! client one, connections made from SYN cookies, and an MTU below
//! Ethernet's. What went over the link is read from a capture in the
//! client namespace, so the kernel's own view decides: the MSS each SYN
//! offered and the largest IP packet each way.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use control::api::{Body, Client, Request};
use e2e::capture::{largest, set_link_mtu, syn_mss, Capture};
use e2e::transfer::{fetch_page, no_frame_dropped_for_its_size, page, responder_download};
use e2e::{run, Dpd, HttpBackend, Lab, UploadSink};

/// A dpd on the lab's veth with port MTU `mtu` (above 1500, af_packet's
/// ring frames sized for it: docs/architecture.md, "Ports") and `extra`
/// sections.
fn config(lab: &Lab, socket: &Path, mtu: u16, extra: &str) -> String {
    let frames = if mtu > 1500 {
        ",framesz=9216,blocksz=36864"
    } else {
        ""
    };
    lab.config("net_af_packet", socket, "")
        .replace("iface=veth-dut\"", &format!("iface=veth-dut{frames}\""))
        .replace("[control]", &format!("mtu = {mtu}\n\n[control]"))
        + extra
}

/// The first port's MTU as `dpctl status` reports it.
fn status_mtu(dpd: &Dpd) -> u16 {
    let reply = Client::connect(&dpd.socket)
        .and_then(|mut c| c.call(&Request::Status))
        .unwrap();
    match reply.body {
        Some(Body::Status(s)) => s.ports[0].mtu,
        other => panic!("{other:?}"),
    }
}

#[test]
fn jumbo_frames_carry_full_size_segments_both_ways() {
    let lab = Lab::up("mj");
    set_link_mtu(&lab, 9000);
    let sink_ip = lab.add_client_address(11);
    let web_ip = lab.add_client_address(12);
    let _sink = UploadSink::start(&lab, &sink_ip, 8000);
    let page = page();
    let _web = HttpBackend::start(&lab, &web_ip, 8001, &page);
    let ip = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        config(
            &lab,
            s,
            9000,
            &format!(
                "\n[[vip]]\nname = \"plain\"\nlisten = \"{ip}:80\"\nrespond = \"builtin\"\n\
                 [[vip]]\nname = \"up\"\nlisten = \"{ip}:8000\"\npool = \"up\"\n\
                 [[pool]]\nname = \"up\"\nmembers = [{{ addr = \"{sink_ip}:8000\" }}]\n\
                 [[vip]]\nname = \"web\"\nlisten = \"{ip}:8001\"\npool = \"web\"\n\
                 [[pool]]\nname = \"web\"\nmembers = [{{ addr = \"{web_ip}:8001\" }}]\n"
            ),
        )
    });
    assert_eq!(status_mtu(&dpd), 9000);
    let capture = Capture::start(&lab, "veth-cli");

    // Client to dpd to backend: an upload through the proxy.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upload");
    let out = run(Command::new("head")
        .args(["-c", "6000000", "/dev/urandom"])
        .stdout(std::fs::File::create(&file).unwrap()));
    assert!(out.status.success());
    let answer = UploadSink::upload(
        &lab,
        "/dev/null",
        &format!("up.test:8000:{ip}"),
        "http://up.test:8000/",
        &file,
    );
    assert_eq!(answer, UploadSink::expected(&file));
    // Backend to dpd to client: a download through the proxy.
    fetch_page(&lab, &format!("http://{ip}:8001/"), &page);
    // dpd's own responder.
    responder_download(&lab, &ip, 6_000_000);

    let segs = capture.stop();
    let (dut, sink, web): (Ipv4Addr, Ipv4Addr, Ipv4Addr) = (
        ip.parse().unwrap(),
        sink_ip.parse().unwrap(),
        web_ip.parse().unwrap(),
    );
    // dpd offers the port's MTU less 40 on every SYN-ACK and SYN it sends.
    let offered = syn_mss(&segs, dut);
    assert!(offered.len() >= 5, "{offered:?}");
    assert!(offered.iter().all(|m| *m == Some(8960)), "{offered:?}");
    // Full-size packets each way, none above the MTU: dpd's to the
    // client and to the backend, the client's and the backend's to dpd.
    for (what, src, dst) in [
        ("dpd to the client", Some(dut), None),
        ("client to dpd (upload)", None, Some(dut)),
        ("dpd to the upload backend", Some(dut), Some(sink)),
        ("web backend to dpd", Some(web), Some(dut)),
    ] {
        assert_eq!(largest(&segs, src, dst), 9000, "{what}");
    }
    assert_eq!(largest(&segs, None, None), 9000);
    no_frame_dropped_for_its_size(&dpd);
}

#[test]
fn an_mtu_below_ethernet_s_lowers_the_mss_and_every_packet() {
    let lab = Lab::up("ms");
    let ip = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        config(
            &lab,
            s,
            1400,
            &format!("\n[[vip]]\nname = \"plain\"\nlisten = \"{ip}:80\"\nrespond = \"builtin\"\n"),
        )
    });
    assert_eq!(status_mtu(&dpd), 1400);
    let capture = Capture::start(&lab, "veth-cli");
    responder_download(&lab, &ip, 2_000_000);
    let segs = capture.stop();
    let dut: Ipv4Addr = ip.parse().unwrap();
    assert_eq!(syn_mss(&segs, dut), vec![Some(1360)]);
    // The kernel's link is 1500, but it keeps to the MSS dpd offered.
    assert_eq!(largest(&segs, Some(dut), None), 1400);
    // The client sends its request and ACKs only.
    assert!(largest(&segs, None, Some(dut)) < 1400);
}

#[test]
fn a_jumbo_backend_network_and_a_1500_client_network_each_get_their_mss() {
    let lab = Lab::up("mm");
    // A second link for the backends, 9000 bytes end to end.
    let (cli, dut) = (format!("{}-cli", lab.name), format!("{}-dut", lab.name));
    for args in [
        vec![
            "ip", "link", "add", "veth-j", "netns", &dut, "type", "veth", "peer", "name",
            "veth-jc", "netns", &cli,
        ],
        vec![
            "ip", "-n", &dut, "link", "set", "veth-j", "mtu", "9000", "up",
        ],
        vec![
            "ip", "-n", &cli, "link", "set", "veth-jc", "mtu", "9000", "up",
        ],
        vec![
            "ip",
            "-n",
            &cli,
            "addr",
            "add",
            "172.31.0.2/24",
            "dev",
            "veth-jc",
        ],
        // Complete checksums from the kernel, as lab.sh sets for veth-cli.
        vec![
            "ip", "netns", "exec", &cli, "ethtool", "-K", "veth-jc", "tx", "off",
        ],
    ] {
        let out = run(Command::new(args[0]).args(&args[1..]));
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let page = page();
    let _web = HttpBackend::start(&lab, "172.31.0.2", 8001, &page);
    let ip = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        config(
            &lab,
            s,
            1500,
            &format!(
                "\n[[port]]\nname = \"back\"\ndevice = \"net_af_packet1,iface=veth-j,framesz=9216,blocksz=36864\"\n\
                 address = \"172.31.0.1/24\"\nmtu = 9000\n\
                 [[vip]]\nname = \"web\"\nlisten = \"{ip}:8001\"\npool = \"web\"\n\
                 [[pool]]\nname = \"web\"\nmembers = [{{ addr = \"172.31.0.2:8001\" }}]\n"
            ),
        )
    });
    let front = Capture::start(&lab, "veth-cli");
    let back = Capture::start(&lab, "veth-jc");
    for _ in 0..2 {
        fetch_page(&lab, &format!("http://{ip}:8001/"), &page);
    }
    let (front, back) = (front.stop(), back.stop());
    let (dut, dut_back): (Ipv4Addr, Ipv4Addr) =
        (ip.parse().unwrap(), "172.31.0.1".parse().unwrap());
    // Each side offers its own link's MSS.
    assert_eq!(syn_mss(&front, dut), vec![Some(1460); 2]);
    assert_eq!(syn_mss(&back, dut_back), vec![Some(8960); 2]);
    // Full-size packets on each link, none larger: the backend's 9,000-byte
    // packets go on to the client cut to 1,500.
    assert_eq!(largest(&back, None, Some(dut_back)), 9000);
    assert_eq!(largest(&front, Some(dut), None), 1500);
    no_frame_dropped_for_its_size(&dpd);
}

#[test]
fn connections_made_from_syn_cookies_keep_the_jumbo_mss() {
    let lab = Lab::up("mc");
    set_link_mtu(&lab, 9000);
    let ip = lab.dut_ip();
    let dpd = Dpd::start(&lab, |s| {
        config(
            &lab,
            s,
            9000,
            &format!(
                "\n[[vip]]\nname = \"plain\"\nlisten = \"{ip}:80\"\nrespond = \"builtin\"\n\
                 [tcp]\nsyn_cookies = \"always\"\n"
            ),
        )
    });
    let capture = Capture::start(&lab, "veth-cli");
    responder_download(&lab, &ip, 3_000_000);
    let segs = capture.stop();
    let stats = dpd.stats();
    assert_eq!(
        (stats.tcp_syn_cookies_sent, stats.tcp_syn_cookies_accepted),
        (1, 1),
        "the connection was made from a cookie"
    );
    let dut: Ipv4Addr = ip.parse().unwrap();
    // The cookie SYN-ACK offers the jumbo link's MSS, and the cookie
    // carries the client's 8960 back, so dpd's segments fill the MTU.
    assert_eq!(syn_mss(&segs, dut), vec![Some(8960)]);
    assert_eq!(largest(&segs, Some(dut), None), 9000);
    no_frame_dropped_for_its_size(&dpd);
}
