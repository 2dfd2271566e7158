//! Scale-out (docs/cluster.md): dpd nodes announce their VIPs over BGP
//! through BIRD to a router doing Linux ECMP (`scripts/lab.sh cluster`),
//! and are taken out by withdrawal: a drain, a death, a failed backend.
//! The router's tables (`birdc show route`, `ip route`) are checked at
//! each step.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use e2e::cluster::Cluster;
use e2e::{dpbench_result, make_certs, Dpd};

const VIP: &str = "10.90.0.1";
const WEB: &str = "[[vip]]\nname = \"web\"\nlisten = \"10.90.0.1:80\"\nrespond = \"builtin\"\n";

/// One cluster at a time: each runs several dpds, BIRDs and a load
/// generator on this machine's two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn hops(c: &Cluster, nodes: &[u32]) -> Vec<String> {
    let mut v: Vec<String> = nodes.iter().map(|&i| c.node_ip(i)).collect();
    v.sort();
    v
}

/// `n` plain HTTP connections to the VIP from the client, one after the
/// other (each from a new source port); how many got a 200.
fn connections(c: &Cluster, n: u32) -> (u32, String) {
    let out = c.client_sh(&format!(
        "for i in $(seq {n}); do curl -s -o /dev/null -m 3 -w '%{{http_code}}\\n' http://{VIP}/; done"
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text.lines().filter(|l| *l == "200").count() as u32, text)
}

/// BGP routes for `prefix` in the router's BIRD (one line per node).
fn bird_paths(c: &Cluster, prefix: &str) -> usize {
    c.birdc("rtr", &["show", "route", "for", prefix])
        .lines()
        .filter(|l| l.contains("[node"))
        .count()
}

fn accepted(d: &Dpd) -> u64 {
    d.stats().tcp_accepted
}

#[test]
fn every_node_takes_a_share_and_a_dead_node_is_withdrawn_at_once() {
    let _one = serial();
    let c = Cluster::up("sp", 3, "hash");
    let mut nodes: Vec<Dpd> = (1..=3).map(|i| c.start_node(i, 500, WEB)).collect();
    c.await_next_hops(VIP, &hops(&c, &[1, 2, 3]), Duration::from_secs(20));
    assert_eq!(bird_paths(&c, "10.90.0.1/32"), 3);

    let (ok, text) = connections(&c, 60);
    assert_eq!(ok, 60, "{text}");
    let shares: Vec<u64> = nodes.iter().map(accepted).collect();
    assert!(
        shares.iter().all(|&n| n > 0),
        "connections per node: {shares:?}"
    );
    eprintln!("60 connections spread over 3 nodes: {shares:?}");

    // dpd dies: its announce interface goes with it, so BIRD withdraws
    // the route without dpd's help.
    let t0 = std::time::Instant::now();
    let status = nodes[2].stop_with(libc::SIGKILL, Duration::from_secs(5));
    assert!(!status.success());
    let took = c.await_next_hops(VIP, &hops(&c, &[1, 2]), Duration::from_secs(3));
    eprintln!(
        "dpd killed on node 3: withdrawn from the router's kernel in {:?}",
        t0.elapsed().max(took)
    );
    assert_eq!(bird_paths(&c, "10.90.0.1/32"), 2);
    let (ok, text) = connections(&c, 30);
    assert_eq!(ok, 30, "after node 3 died: {text}");

    // Node 2 hangs silently (its BIRD stopped: no FIN, no more BFD): the
    // router's BFD takes the session down within its detection time
    // (3 × 100 ms).
    let pid = std::fs::read_to_string(format!("/run/tlsdp-lab/{}/n2.pid", c.name)).unwrap();
    let signal = |sig: &str| {
        assert!(std::process::Command::new("kill")
            .args([sig, pid.trim()])
            .status()
            .unwrap()
            .success());
    };
    let t0 = std::time::Instant::now();
    signal("-STOP");
    c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(2));
    let took = t0.elapsed();
    signal("-CONT");
    eprintln!("node 2 hung (BIRD stopped): withdrawn by BFD in {took:?}");
    assert!(
        c.birdc("rtr", &["show", "protocols"])
            .contains("BFD session down"),
        "{}",
        c.birdc("rtr", &["show", "protocols"])
    );
    let (ok, text) = connections(&c, 20);
    assert_eq!(ok, 20, "after node 2 died: {text}");
}

/// An IPv6 VIP is announced as a /128 with the node's IPv6 address as
/// next hop (over the same BGP session), spread, and withdrawn with dpd.
#[test]
fn ipv6_vips_are_announced_as_host_routes_and_withdrawn_with_dpd() {
    let _one = serial();
    let c = Cluster::up("v6", 2, "resilient");
    let vip6 = "[[vip]]\nname = \"web6\"\nlisten = \"[fd00:90::1]:80\"\nrespond = \"builtin\"\n";
    let mut nodes: Vec<Dpd> = (1..=2)
        .map(|i| c.start_node(i, 500, &format!("{WEB}\n{vip6}")))
        .collect();
    let both: Vec<String> = {
        let mut v = vec![c.node_ip6(1), c.node_ip6(2)];
        v.sort();
        v
    };
    c.await_next_hops("fd00:90::1", &both, Duration::from_secs(20));
    c.await_next_hops(VIP, &hops(&c, &[1, 2]), Duration::from_secs(5));
    assert_eq!(bird_paths(&c, "fd00:90::1/128"), 2);
    let out = c.client_sh(
        "for i in $(seq 30); do curl -s -o /dev/null -m 3 -w '%{http_code}\\n' 'http://[fd00:90::1]/'; done",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(text.lines().filter(|l| *l == "200").count(), 30, "{text}");
    assert!(nodes.iter().all(|d| d.stats().tcp_accepted > 0));
    nodes[1].stop_with(libc::SIGKILL, Duration::from_secs(5));
    c.await_next_hops("fd00:90::1", &[c.node_ip6(1)], Duration::from_secs(3));
    let out = c.client_sh("curl -s -o /dev/null -m 3 -w '%{http_code}' 'http://[fd00:90::1]/'");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    // SIGINT (a stop without a drain): the routes go before the engines
    // do, not after DPDK is taken down with the VIPs still announced.
    let status = nodes[0].stop_with(libc::SIGINT, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let log = nodes[0].log_text();
    let at = |what: &str| log.find(what).unwrap_or_else(|| panic!("{what}: {log}"));
    assert!(
        at("address(es) withdrawn: stopping") < at("stopping engines"),
        "{log}"
    );
}

#[test]
fn vips_are_announced_only_while_they_can_be_served() {
    let _one = serial();
    let c = Cluster::up("hl", 1, "hash+pin");
    // A VIP whose pool member (in the client namespace) is down at first.
    let app = "[[vip]]\nname = \"app\"\nlisten = \"10.90.0.3:80\"\npool = \"app\"\n\n\
               [[pool]]\nname = \"app\"\nmembers = [{ addr = \"10.80.0.2:8080\" }]\n\
               health = { kind = \"tcp\", interval_ms = 200, timeout_ms = 150 }\n";
    let mut dpd = c.start_node(1, 500, &format!("{WEB}\n{app}"));
    c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(20));
    let status = String::from_utf8_lossy(&Cluster::dpctl(&dpd, &["status"]).stdout).into_owned();
    assert!(
        status.contains("routing: tlsdp-vips announces 10.90.0.1")
            && status.contains("withheld: app: no healthy member in pool app"),
        "{status}"
    );
    assert!(c.next_hops("10.90.0.3").is_empty());

    let mut backend = c
        .command(
            "cli",
            &[
                "python3",
                "-m",
                "http.server",
                "8080",
                "--bind",
                "10.80.0.2",
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    c.await_next_hops("10.90.0.3", &hops(&c, &[1]), Duration::from_secs(10));
    let out = c.client_sh("curl -s -o /dev/null -m 3 -w '%{http_code}' http://10.90.0.3/");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    backend.kill().unwrap();
    backend.wait().unwrap();
    c.await_next_hops("10.90.0.3", &[], Duration::from_secs(10));

    // Disabled: withdrawn; enabled: announced again.
    let off = Cluster::dpctl(&dpd, &["vip", "disable", "web"]);
    assert!(off.status.success(), "{off:?}");
    c.await_next_hops(VIP, &[], Duration::from_secs(5));
    assert_eq!(bird_paths(&c, "10.90.0.1/32"), 0);
    assert!(Cluster::dpctl(&dpd, &["vip", "enable", "web"])
        .status
        .success());
    c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(5));

    // The traffic link down (BIRD's session, on the node's kernel link,
    // stays up): withdrawn, and announced again once it is back. Before,
    // link state was not looked at and the router kept sending here.
    let link = |state: &str| {
        let out = c.exec("n1", &["ip", "link", "set", "dp0", state]);
        assert!(out.status.success(), "{out:?}");
    };
    link("down");
    c.await_next_hops(VIP, &[], Duration::from_secs(5));
    let status = String::from_utf8_lossy(&Cluster::dpctl(&dpd, &["status"]).stdout).into_owned();
    assert!(status.contains("web: no port's link is up"), "{status}");
    link("up");
    c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(10));
    // The announce interface's addresses flushed, then the interface
    // taken down, by something else: put back within seconds, each
    // logged. Before, dpd still counted them announced and never looked.
    for how in [
        &["ip", "addr", "flush", "dev", "tlsdp-vips"][..],
        &["ip", "link", "set", "tlsdp-vips", "down"],
    ] {
        let out = c.exec("n1", how);
        assert!(out.status.success(), "{out:?}");
        c.await_next_hops(VIP, &[], Duration::from_secs(5));
        c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(10));
    }
    let log = dpd.log_text();
    assert!(
        log.contains("routing: 10.90.0.1 was gone from tlsdp-vips: put back")
            && log.contains("routing: tlsdp-vips was down: set up again"),
        "{log}"
    );

    // SIGTERM withdraws first and stops once the open download is done
    // (the router keeps the open flow on the node: `+pin`).
    let download = c
        .command(
            "cli",
            &[
                "curl",
                "-s",
                "-o",
                "/dev/null",
                "--limit-rate",
                "2M",
                "-w",
                "%{http_code} %{size_download}",
                &format!("http://{VIP}/bytes/5000000"),
            ],
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    dpd.stats_when(Duration::from_secs(5), |s| s.tcp_active > 0);
    let pid = dpd.pid().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    c.await_next_hops(VIP, &[], Duration::from_secs(2));
    assert_eq!(bird_paths(&c, "10.90.0.1/32"), 0);
    let got = download.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&got.stdout), "200 5000000");
    let status = dpd.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    let log = dpd.log_text();
    assert!(
        log.contains("routing: withdrew 10.90.0.1") && log.contains("drained (0 connections"),
        "{log}"
    );
}

/// dpbench CPS (TLS 1.3, full handshakes) from 64 client addresses for
/// `secs`; connections made and failed.
fn dpbench(c: &Cluster, secs: u32, out: &std::path::Path) -> std::process::Child {
    let extra = ["--src", "10.80.0.10-73", "--tolerance", "1"];
    let args = e2e::dpbench_args("cps", VIP, 443, secs, out, &extra);
    c.command("cli", &args.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("dpbench")
}

fn tls_vip(certs: &std::path::Path, tickets: Option<&std::path::Path>) -> String {
    let c = certs.display();
    let tickets = tickets.map_or(String::new(), |k| {
        format!(
            "[vip.tls]\ntickets = {{ rotate_s = 3600, key_file = \"{}\" }}\n",
            k.display()
        )
    });
    format!(
        "[[cert]]\nname = \"p256\"\ncert = \"{c}/p256.pem\"\nkey = \"{c}/p256.key\"\n\n\
         [[vip]]\nname = \"tls\"\nlisten = \"{VIP}:443\"\nrespond = \"builtin\"\n\
         certs = [\"p256\"]\n{tickets}"
    )
}

/// A drain withdraws the node's routes; the router sends new flows to the
/// other nodes and, being flow-aware (`+pin`, as an L4 tier would be),
/// keeps the drained node's open connections on it until they end.
#[test]
fn a_node_drained_during_a_cps_run_fails_no_connection() {
    let _one = serial();
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let c = Cluster::up("dr", 3, "resilient+pin");
    let vip = tls_vip(certs.path(), None);
    let nodes: Vec<Dpd> = (1..=3).map(|i| c.start_node(i, 500, &vip)).collect();
    c.await_next_hops(VIP, &hops(&c, &[1, 2, 3]), Duration::from_secs(20));

    let out = tempfile::tempdir().unwrap();
    let bench = dpbench(&c, 6, out.path());
    // Until every node has taken connections, then drain node 1.
    for d in &nodes {
        d.stats_when(Duration::from_secs(10), |s| s.tcp_accepted > 0);
    }
    let drain = Cluster::dpctl(&nodes[0], &["drain", "--wait"]);
    let text = String::from_utf8_lossy(&drain.stdout).into_owned();
    assert!(drain.status.success(), "{drain:?}");
    assert!(
        text.contains("withdrawn") && text.contains("drained"),
        "{text}"
    );
    assert_eq!(c.next_hops(VIP), hops(&c, &[2, 3]));
    assert_eq!(bird_paths(&c, "10.90.0.1/32"), 2);
    let after = accepted(&nodes[0]);
    let (conns, errors) = dpbench_result(bench, out.path());
    eprintln!("node 1 drained during a CPS run: {conns} connections, {errors} failed");
    assert!(conns > 100, "{conns} connections");
    assert_eq!(errors, 0, "{conns} connections, {errors} failed");
    assert_eq!(
        accepted(&nodes[0]),
        after,
        "node 1 took connections once drained"
    );
    assert!(accepted(&nodes[1]) > 0 && accepted(&nodes[2]) > 0);

    // Undrained: announced again, and it takes connections again.
    let undrain = Cluster::dpctl(&nodes[0], &["undrain"]);
    assert!(undrain.status.success(), "{undrain:?}");
    c.await_next_hops(VIP, &hops(&c, &[1, 2, 3]), Duration::from_secs(5));
    // Buckets move back to node 1 within the group's unbalanced timer
    // (2 s); pinned flows do not notice.
    let bench = dpbench(&c, 5, out.path());
    let (_, errors) = dpbench_result(bench, out.path());
    assert_eq!(errors, 0);
    assert!(
        accepted(&nodes[0]) > after,
        "node 1 takes connections again"
    );
}

/// Ticket keys from one key file on every node: a session from node 1
/// resumes on node 2. Which node a connection reaches is set by draining
/// the other one.
#[test]
fn a_ticket_from_one_node_resumes_on_another() {
    let _one = serial();
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let key = certs.path().join("ticket.key");
    std::fs::write(&key, [7u8; 48]).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let c = Cluster::up("tk", 2, "hash");
    let vip = tls_vip(certs.path(), Some(&key));
    let nodes: Vec<Dpd> = (1..=2).map(|i| c.start_node(i, 300, &vip)).collect();
    c.await_next_hops(VIP, &hops(&c, &[1, 2]), Duration::from_secs(20));
    let session = certs.path().join("session.pem");
    let s_client = |extra: &str| {
        let out = c.client_sh(&format!(
            "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | openssl s_client -connect {VIP}:443 \
             -servername p256.test -CAfile {}/ca.pem -ign_eof {extra} 2>&1",
            certs.path().display()
        ));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    assert!(Cluster::dpctl(&nodes[1], &["drain", "--wait"])
        .status
        .success());
    c.await_next_hops(VIP, &hops(&c, &[1]), Duration::from_secs(5));
    let first = s_client(&format!("-sess_out {}", session.display()));
    assert!(first.contains("New, TLSv1.3"), "{first}");
    // The engine publishes its counters once a tick: wait for the one
    // after the handshake rather than sample the one before it.
    let on1 = nodes[0].stats_when(Duration::from_secs(2), |s| s.tls_handshakes == 1);
    assert_eq!(on1.tls_handshakes, 1);

    assert!(Cluster::dpctl(&nodes[1], &["undrain"]).status.success());
    assert!(Cluster::dpctl(&nodes[0], &["drain", "--wait"])
        .status
        .success());
    c.await_next_hops(VIP, &hops(&c, &[2]), Duration::from_secs(5));
    let second = s_client(&format!("-sess_in {}", session.display()));
    assert!(second.contains("Reused, TLSv1.3"), "{second}");
    let on2 = nodes[1].stats_when(Duration::from_secs(2), |s| s.tls_resumed == 1);
    assert_eq!((on2.tls_handshakes, on2.tls_resumed), (1, 1));
}

/// `tests/cluster/hold.py` in the client namespace: keep-alive
/// connections held open and checked on demand.
struct Holder {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn open(c: &Cluster, n: u32) -> Self {
        let script = e2e::repo_root().join("tests/cluster/hold.py");
        let mut child = c
            .command(
                "cli",
                &[
                    "python3",
                    script.to_str().unwrap(),
                    VIP,
                    "80",
                    &n.to_string(),
                ],
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), format!("open {n}"));
        Self { child, stdin, out }
    }

    /// One request on every connection: (worked, broken).
    fn check(&mut self) -> (u32, u32) {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "check").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let v: Vec<u32> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(v.len(), 2, "hold.py said {line:?}");
        (v[0], v[1])
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Connections broken when a node goes and when it comes back, under
/// `ecmp` routing, and how many the node that went held.
struct Rehash {
    held_by_removed: u64,
    broken_on_remove: u32,
    broken_on_add: u32,
}

fn rehash(ecmp: &str) -> Rehash {
    const HELD: u32 = 300;
    let c = Cluster::up("rh", 3, ecmp);
    let mut nodes: Vec<Dpd> = (1..=3).map(|i| c.start_node(i, 300, WEB)).collect();
    c.await_next_hops(VIP, &hops(&c, &[1, 2, 3]), Duration::from_secs(20));
    let mut held = Holder::open(&c, HELD);
    assert_eq!(held.check(), (HELD, 0));
    for d in &nodes {
        d.stats_when(Duration::from_secs(2), |s| s.tcp_active > 0);
    }
    // The node whose hash range comes first: with plain hash-threshold
    // multipath, removing it moves flows of another node too.
    let first = c.exec("rtr", &["ip", "-j", "route", "show", VIP]);
    let first: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let gone = match first[0]["nexthops"][0]["gateway"].as_str() {
        Some(gw) => (1..=3).find(|&i| c.node_ip(i) == gw).unwrap(),
        None => 1,
    };
    let held_by_removed = nodes[gone as usize - 1].stats().tcp_active;
    let total: u64 = nodes.iter().map(|d| d.stats().tcp_active).sum();
    assert_eq!(total, u64::from(HELD));
    nodes[gone as usize - 1].stop_with(libc::SIGKILL, Duration::from_secs(5));
    let rest: Vec<u32> = (1..=3).filter(|&i| i != gone).collect();
    c.await_next_hops(VIP, &hops(&c, &rest), Duration::from_secs(5));
    let (_, broken_on_remove) = held.check();

    nodes[gone as usize - 1] = c.start_node(gone, 300, WEB);
    c.await_next_hops(VIP, &hops(&c, &[1, 2, 3]), Duration::from_secs(20));
    let (_, broken_on_add) = held.check();
    eprintln!(
        "ECMP {ecmp}, {HELD} connections over 3 nodes: node {gone} held {held_by_removed}; \
         its removal broke {broken_on_remove}, its return {broken_on_add}"
    );
    Rehash {
        held_by_removed,
        broken_on_remove,
        broken_on_add,
    }
}

/// Linux's plain multipath (hash-threshold, what BIRD programs) moves
/// flows of nodes that stayed when one goes or comes; resilient next-hop
/// groups move only the flows of the node that went, and none when one
/// comes (new flows fill its buckets as they go idle).
#[test]
fn resilient_next_hop_groups_move_only_the_flows_that_must_move() {
    let _one = serial();
    let hash = rehash("hash");
    assert!(
        hash.broken_on_remove > u32::try_from(hash.held_by_removed).unwrap(),
        "hash-threshold: {} broken, {} on the removed node",
        hash.broken_on_remove,
        hash.held_by_removed
    );
    assert!(hash.broken_on_add > 0);
    let resilient = rehash("resilient");
    assert_eq!(
        u64::from(resilient.broken_on_remove),
        resilient.held_by_removed
    );
    assert_eq!(resilient.broken_on_add, 0);
}
