//! TCP and TLS over IPv6 against the kernel's clients and servers over a
//! veth link (docs/ipv6.md): curl -6 and openssl s_client -6 to VIPs on
//! IPv6 addresses; proxied to nginx backends on IPv6 and IPv4 (and from
//! an IPv4 VIP to an IPv6 backend); PROXY v2 telling an IPv6 client's
//! address; health checks over IPv6; a byte-exact download under 2 %
//! drops; a SYN flood on IPv6.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use e2e::{make_certs, verify_pattern_file, Dpd, Lab, Nginx};

/// A lab with IPv6 on both ends: dpd's port gets `PREFIX::1/64` (and its
/// IPv4 address), the client `PREFIX::2` and the backends `PREFIX::11`
/// and `PREFIX::13` (added without duplicate address detection, so they
/// are usable at once).
struct Lab6 {
    lab: Lab,
    prefix: String,
}

impl Lab6 {
    fn up(tag: &str) -> Self {
        let lab = Lab::up(tag);
        let prefix = lab.prefix6();
        for host in ["2", "11", "13"] {
            lab.add_client_ipv6("veth-cli", &format!("{prefix}::{host}/64"));
        }
        Self { lab, prefix }
    }

    fn dut6(&self) -> String {
        format!("{}::1", self.prefix)
    }

    fn client_ok(&self, args: &[&str]) -> String {
        let out = self.lab.client(args);
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// dpd's base configuration with the port dual-stack.
    fn config(&self, socket: &Path) -> String {
        self.lab.config("net_af_packet", socket, "").replace(
            &format!("address = \"{}/24\"", self.lab.dut_ip()),
            &format!(
                "addresses = [\"{}/24\", \"{}/64\"]",
                self.lab.dut_ip(),
                self.dut6()
            ),
        )
    }
}

/// nginx in the client namespace: `[PREFIX::11]:80` answers "v6 backend",
/// `NET.12:80` "v4 backend", `[PREFIX::13]:80` "v6 sick" (503 on
/// /health), and `[PREFIX::11]:8081` takes PROXY v2 and answers with the
/// client address and port it was told. Stopped on drop.
fn backends(l: &Lab6, dir: &Path) -> Nginx {
    let ip4 = format!("{}.12", l.lab.net);
    l.client_ok(&["ip", "addr", "add", &format!("{ip4}/24"), "dev", "veth-cli"]);
    let p = &l.prefix;
    let servers = format!(
        "server {{ listen [{p}::11]:80; location / {{ return 200 \"v6 backend\\n\"; }} location = /health {{ return 200; }} }}\n\
         server {{ listen [{p}::13]:80; location / {{ return 200 \"v6 sick\\n\"; }} location = /health {{ return 503; }} }}\n\
         server {{ listen {ip4}:80; location / {{ return 200 \"v4 backend\\n\"; }} }}\n\
         server {{ listen [{p}::11]:8081 proxy_protocol; location / {{ return 200 \"$proxy_protocol_addr $proxy_protocol_port\\n\"; }} }}"
    );
    Nginx::start(&l.lab, dir, &servers, &format!("http://[{p}::11]/"))
}

/// curl from the client namespace, `--resolve`ing `p256.test` to `ip`
/// (brackets for IPv6); its stdout, the run's exit asserted.
fn curl(l: &Lab6, certs: &Path, ip: &str, url: &str, extra: &[&str]) -> String {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(443);
    let ca = format!("{}/ca.pem", certs.display());
    let resolve = format!("p256.test:{port}:{ip}");
    let mut args = vec![
        "curl",
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        &ca,
        "--resolve",
        &resolve,
    ];
    args.extend_from_slice(extra);
    args.push(url);
    l.client_ok(&args)
}

#[test]
fn tls_and_plain_vips_on_ipv6_proxy_to_both_families() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let l = Lab6::up("v6p");
    let _backends = backends(&l, certs.path());
    let (c, p, dut6, dut4, net) = (
        certs.path().display(),
        &l.prefix,
        l.dut6(),
        l.lab.dut_ip(),
        &l.lab.net,
    );
    let tls = format!("certs = [{{ cert = \"{c}/p256.pem\", key = \"{c}/p256.key\" }}]");
    let health = "health = { kind = \"http\", path = \"/health\", interval_ms = 200, timeout_ms = 150, rise = 1, fall = 1 }";
    let dpd = Dpd::start(&l.lab, |s| {
        format!(
            "{base}\n\
             [[vip]]\nname = \"plain6\"\nlisten = \"[{dut6}]:80\"\nrespond = \"builtin\"\n\
             [[vip]]\nname = \"tls6\"\nlisten = \"[{dut6}]:443\"\npool = \"v6\"\n{tls}\n\
             [[vip]]\nname = \"v6to4\"\nlisten = \"[{dut6}]:8443\"\npool = \"v4\"\n{tls}\n\
             [[vip]]\nname = \"v4to6\"\nlisten = \"{dut4}:8444\"\npool = \"v6\"\n{tls}\n\
             [[vip]]\nname = \"pp6\"\nlisten = \"[{dut6}]:7443\"\npool = \"pp6\"\n{tls}\n\
             [[pool]]\nname = \"v6\"\n{health}\nmembers = [{{ addr = \"[{p}::11]:80\" }}, {{ addr = \"[{p}::13]:80\" }}]\n\
             [[pool]]\nname = \"v4\"\nmembers = [{{ addr = \"{net}.12:80\" }}]\n\
             [[pool]]\nname = \"pp6\"\nproxy_protocol = true\nmembers = [{{ addr = \"[{p}::11]:8081\" }}]\n",
            base = l.config(s)
        )
    });
    let b6 = format!("[{dut6}]");
    // The built-in responder over plain TCP/IPv6.
    let page = l.client_ok(&[
        "curl",
        "-6",
        "-sS",
        "--max-time",
        "10",
        &format!("http://{b6}/"),
    ]);
    assert!(page.contains("<h1>tlsdp</h1>"), "{page}");
    // Health checks over IPv6 take the sick member out; then every request
    // over TLS/IPv6 reaches the IPv6 backend that is up.
    let s = dpd.stats_when(Duration::from_secs(5), |s| s.health_changes >= 1);
    assert_eq!(s.health_changes, 1, "{s:?}\n{}", dpd.log_text());
    assert!(
        s.health_checks > s.health_failures,
        "the IPv6 member answers: {s:?}"
    );
    assert!(dpd
        .log_text()
        .contains("is down (health checks fail: status 503)"));
    for _ in 0..6 {
        let got = curl(&l, certs.path(), &b6, "https://p256.test/", &["-6"]);
        assert_eq!(got, "v6 backend\n", "{}", dpd.log_text());
    }
    // TLS 1.2 too (the loop above negotiated 1.3).
    let got = curl(
        &l,
        certs.path(),
        &b6,
        "https://p256.test/",
        &["--tls-max", "1.2"],
    );
    assert_eq!(got, "v6 backend\n");
    // An IPv6 VIP to an IPv4 backend, an IPv4 VIP to an IPv6 backend.
    let got = curl(&l, certs.path(), &b6, "https://p256.test:8443/", &[]);
    assert_eq!(got, "v4 backend\n");
    let got = curl(&l, certs.path(), &dut4, "https://p256.test:8444/", &[]);
    assert_eq!(got, "v6 backend\n");
    // PROXY v2 with INET6 addresses: the backend hears the client's IPv6
    // address and port.
    let got = curl(
        &l,
        certs.path(),
        &b6,
        "https://p256.test:7443/",
        &["--local-port", "45678", "--interface", &format!("{p}::2")],
    );
    assert_eq!(got, format!("{p}::2 45678\n"), "{}", dpd.log_text());
    // openssl s_client -6 negotiates TLS 1.3 and 1.2 with the VIP.
    for (flag, proto) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
        let sh = format!(
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 10 openssl s_client -6 -connect [{dut6}]:443 -servername p256.test -CAfile {c}/ca.pem {flag} -ign_eof 2>&1"
        );
        let out = l.client_ok(&["sh", "-c", &sh]);
        assert!(
            out.contains(&format!("Protocol  : {proto}")) || out.contains(&format!("New, {proto}")),
            "{out}"
        );
        assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
        assert!(out.contains("v6 backend"), "{out}");
    }
    let stats = dpd.stats();
    assert_eq!(stats.drops["bad_tcp_checksum"], 0, "{stats:?}");
    assert_eq!(stats.proxy_backend_failures, 0, "{stats:?}");
}

#[test]
fn a_download_over_ipv6_survives_two_percent_drops_byte_exact() {
    let l = Lab6::up("v6l");
    let dut6 = l.dut6();
    let dpd = Dpd::start(&l.lab, |s| {
        format!(
            "{}\n[[vip]]\nname = \"plain6\"\nlisten = \"[{dut6}]:80\"\nrespond = \"builtin\"\n",
            l.config(s)
        )
    });
    l.lab.drop_tcp(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    let size: u64 = 200_000_000;
    let t0 = std::time::Instant::now();
    let text = l.client_ok(&[
        "curl",
        "-6",
        "-sS",
        "--max-time",
        "240",
        "-o",
        file.to_str().unwrap(),
        "-w",
        "%{http_code} %{size_download} %{speed_download}",
        &format!("http://[{dut6}]/bytes/{size}"),
    ]);
    eprintln!(
        "200 MB over IPv6 with 2 % drops: {text} in {:?}",
        t0.elapsed()
    );
    assert!(text.starts_with(&format!("200 {size}")), "{text}");
    verify_pattern_file(&file, size);
    let stats = dpd.stats();
    assert!(
        stats.tcp_retransmits > 0,
        "drops caused retransmissions: {stats:?}"
    );
    assert_eq!(stats.drops["bad_tcp_checksum"], 0, "{stats:?}");
}

#[test]
fn a_syn_flood_on_ipv6_meets_cookies_and_real_clients_get_in() {
    let l = Lab6::up("v6s");
    let dut6 = l.dut6();
    let dpd = Dpd::start(&l.lab, |s| {
        format!(
            "{}\n[[vip]]\nname = \"plain6\"\nlisten = \"[{dut6}]:80\"\nrespond = \"builtin\"\n\
             [tcp]\nsyn_cookies = \"always\"\n",
            l.config(s)
        )
    });
    // 20,000 SYNs from random sources of the prefix (scapy; hping3 has no
    // IPv6) to dpd's MAC (TCP in a broadcast frame is not taken), answered
    // statelessly, while curl fetches a page again and again.
    let ns = format!("{}-cli", l.lab.name);
    let script = format!(
        "from scapy.all import *\n\
         import random\n\
         conf.verb = 0\n\
         s = conf.L2socket(iface='veth-cli')\n\
         mac = getmacbyip6('{dut6}')\n\
         assert mac, 'no neighbour advertisement from dpd'\n\
         pkts = [Ether(dst=mac)/IPv6(src='{p}::%x:%x' % (random.randint(1, 65535), random.randint(1, 65535)), dst='{dut6}')/TCP(sport=random.randint(1024, 65535), dport=80, flags='S', seq=random.randint(0, 2**32 - 1)) for _ in range(20000)]\n\
         for p in pkts: s.send(p)\n",
        p = l.prefix
    );
    let mut flood = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "timeout",
            "60",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 scapy");
    let mut ok = 0;
    let mut during_flood = 0;
    while flood.try_wait().expect("flood status").is_none() {
        let out = l.lab.client(&[
            "curl",
            "-6",
            "-sS",
            "--max-time",
            "5",
            &format!("http://[{dut6}]/bytes/1000"),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ok += 1;
        if dpd.stats().tcp_syn_cookies_sent > 1000 {
            during_flood += 1;
        }
    }
    let stats = dpd.stats();
    eprintln!("{ok} downloads ({during_flood} well into the flood); {stats:?}");
    assert!(
        stats.tcp_syn_cookies_sent >= 10_000,
        "the flood met cookies: {stats:?}"
    );
    assert!(during_flood >= 2, "real clients got in during the flood");
    assert_eq!(
        stats.tcp_accepted, stats.tcp_syn_cookies_accepted,
        "no state kept"
    );
}

/// A path narrower than the link: nftables in the client namespace drops
/// dpd's IPv6 packets over 1,280 bytes (as a router with a 1,280-byte
/// next link would), and a scapy sniffer answers each of the first 20 it
/// sees with a Packet Too Big quoting it, as that router would (RFC 4443
/// §3.2). dpd must lower the connection's segment size and resend; the
/// download completes byte-exact. Without Packet Too Big handling the
/// connection stalls (a black hole) and curl times out.
#[test]
fn a_packet_too_big_from_the_path_is_honoured() {
    use std::io::{BufRead, BufReader};
    let l = Lab6::up("v6m");
    let dut6 = l.dut6();
    let dpd = Dpd::start(&l.lab, |s| {
        format!(
            "{}\n[[vip]]\nname = \"plain6\"\nlisten = \"[{dut6}]:80\"\nrespond = \"builtin\"\n",
            l.config(s)
        )
    });
    let rules = "table inet tlsdp_pmtu {\n chain in { type filter hook input priority 0; policy accept; ip6 length > 1240 tcp sport 80 drop; }\n}\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pmtu.nft");
    std::fs::write(&file, rules).unwrap();
    l.client_ok(&["nft", "-f", file.to_str().unwrap()]);
    let router = format!("{}::fe", l.prefix);
    let script = format!(
        "from scapy.all import *\n\
         import sys, time\n\
         conf.verb = 0\n\
         s = conf.L2socket(iface='veth-cli')\n\
         sent = [0]\n\
         def on(p):\n\
         \x20   if IPv6 in p and TCP in p and p[TCP].sport == 80 and len(p[IPv6]) > 1280 and sent[0] < 20:\n\
         \x20       q = bytes(p[IPv6])[:1232]\n\
         \x20       s.send(Ether(dst=p.src)/IPv6(src='{router}', dst=p[IPv6].src)/ICMPv6PacketTooBig(mtu=1280)/Raw(q))\n\
         \x20       sent[0] += 1\n\
         t = AsyncSniffer(iface='veth-cli', prn=on, store=False, filter='ip6 and tcp src port 80')\n\
         t.start()\n\
         time.sleep(1)\n\
         print('ready', flush=True)\n\
         time.sleep(20)\n\
         t.stop()\n\
         print('sent', sent[0], flush=True)\n"
    );
    let ns = format!("{}-cli", l.lab.name);
    let mut router_proc = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns,
            "timeout",
            "40",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 scapy");
    let mut lines = BufReader::new(router_proc.stdout.take().unwrap()).lines();
    let ready = lines.next().and_then(Result::ok);
    assert_eq!(ready.as_deref(), Some("ready"), "the sniffer started");
    let body = dir.path().join("body");
    let size: u64 = 2_000_000;
    let text = l.client_ok(&[
        "curl",
        "-6",
        "-sS",
        "--max-time",
        "15",
        "-o",
        body.to_str().unwrap(),
        "-w",
        "%{http_code} %{size_download}",
        &format!("http://[{dut6}]/bytes/{size}"),
    ]);
    assert_eq!(text, format!("200 {size}"));
    verify_pattern_file(&body, size);
    let stats = dpd.stats();
    eprintln!("{stats:?}");
    assert!(stats.icmpv6_too_big >= 1, "{stats:?}");
    assert_eq!(
        stats.tcp_path_mtu_lowered, 1,
        "one connection, lowered once: {stats:?}"
    );
    let _ = router_proc.kill();
    let _ = router_proc.wait();
}
