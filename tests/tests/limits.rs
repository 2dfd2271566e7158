//! A VIP's connection limits against real kernel clients over veth: SYNs
//! over `max_new_per_source`, `max_connections` or
//! `max_connections_per_source` are refused with a reset
//! (the client's connect fails at once with ECONNREFUSED), counted per
//! VIP, while other client addresses and other VIPs go on.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::{Dpd, Lab};

const PYTHON: &str = "/usr/bin/python3";

/// Opens `count` connections to `dut:port` from `src` one after another
/// and keeps them open for `hold_s`; prints one word per attempt ("open"
/// or the errno's name), then closes `close` of the open ones and opens
/// `reopen` more, printing their words on a second line.
const CLIENT: &str = r#"
import errno, socket, sys, time
dut, port, src, count, close, reopen = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def attempt(n, held):
    words = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(3)
        s.bind((src, 0))
        try:
            s.connect((dut, port))
            words.append("open")
            held.append(s)
        except OSError as e:
            words.append(errno.errorcode.get(e.errno, str(e.errno)))
            s.close()
    return " ".join(words)
held = []
print(attempt(count, held), flush=True)
for s in held[:close]:
    s.close()
held = held[close:]
if reopen:
    # The closes reach dpd, and its connections end, before the reopen.
    time.sleep(1.0)
    print(attempt(reopen, held), flush=True)
"#;

fn config(lab: &Lab, socket: &Path) -> String {
    format!(
        "{}\n[[vip]]\nname = \"rated\"\nlisten = \"{ip}:80\"\nrespond = \"builtin\"\nmax_new_per_source = 5\n\
         [[vip]]\nname = \"capped\"\nlisten = \"{ip}:81\"\nrespond = \"builtin\"\nmax_connections = 8\n\
         [[vip]]\nname = \"per-source\"\nlisten = \"{ip}:82\"\nrespond = \"builtin\"\nmax_connections_per_source = 4\n",
        lab.config("net_af_packet", socket, ""),
        ip = lab.dut_ip(),
    )
}

/// Runs [`CLIENT`]; its output lines as words.
fn clients(
    lab: &Lab,
    port: u16,
    src: &str,
    count: u32,
    close: u32,
    reopen: u32,
) -> Vec<Vec<String>> {
    let (port, count, close, reopen) = (
        port.to_string(),
        count.to_string(),
        close.to_string(),
        reopen.to_string(),
    );
    let dut = lab.dut_ip();
    let out = lab.client(&[
        "timeout", "30", PYTHON, "-c", CLIENT, &dut, &port, src, &count, &close, &reopen,
    ]);
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn count(words: &[String], word: &str) -> usize {
    words.iter().filter(|w| *w == word).count()
}

#[test]
fn syns_over_a_vips_limits_are_refused_and_counted() {
    let lab = Lab::up("lim");
    let dpd = Dpd::start(&lab, |s| config(&lab, s));
    let first = format!("{}.2", lab.net);
    let second = lab.add_client_address(3);

    // Ten connects at once from one address: a second's worth (5) open.
    let lines = clients(&lab, 80, &first, 10, 0, 0);
    assert_eq!(count(&lines[0], "open"), 5, "{lines:?}");
    assert_eq!(count(&lines[0], "ECONNREFUSED"), 5, "{lines:?}");
    // Another address has its own allowance.
    let lines = clients(&lab, 80, &second, 5, 0, 0);
    assert_eq!(count(&lines[0], "open"), 5, "{lines:?}");

    // Eight open at once on the capped VIP, the rest refused; two closed
    // make room for two more.
    let lines = clients(&lab, 81, &first, 10, 2, 3);
    assert_eq!(count(&lines[0], "open"), 8, "{lines:?}");
    assert_eq!(count(&lines[0], "ECONNREFUSED"), 2, "{lines:?}");
    assert_eq!(lines[1], ["open", "open", "ECONNREFUSED"], "{lines:?}");

    // Four established at once per address: two more are refused, two
    // closed make room for two; another address has its own four.
    let lines = clients(&lab, 82, &first, 6, 2, 3);
    assert_eq!(count(&lines[0], "open"), 4, "{lines:?}");
    assert_eq!(count(&lines[0], "ECONNREFUSED"), 2, "{lines:?}");
    assert_eq!(lines[1], ["open", "open", "ECONNREFUSED"], "{lines:?}");
    let lines = clients(&lab, 82, &second, 4, 0, 0);
    assert_eq!(count(&lines[0], "open"), 4, "{lines:?}");

    let stats = dpd.stats_when(Duration::from_secs(5), |s| {
        s.vips
            .get("capped")
            .is_some_and(|v| v.refused_conn_limit == 3)
            && s.vips
                .get("per-source")
                .is_some_and(|v| v.refused_source_conns == 3)
    });
    let (rated, capped) = (&stats.vips["rated"], &stats.vips["capped"]);
    assert_eq!(
        (rated.refused_source_rate, rated.refused_conn_limit),
        (5, 0),
        "{stats:?}"
    );
    assert_eq!(
        (capped.refused_conn_limit, capped.refused_source_rate),
        (3, 0),
        "{stats:?}"
    );
    let per_source = &stats.vips["per-source"];
    assert_eq!(
        (
            per_source.refused_source_conns,
            per_source.refused_conn_limit
        ),
        (3, 0),
        "{stats:?}"
    );
    assert_eq!(stats.drops["listen_refused"], 11, "{stats:?}");

    // Who was refused, at which VIP, by which limit: the first address
    // alone, most first.
    let table = dpctl_ok(&dpd, &["sources", "--refused"]);
    let rows = table_rows(&table);
    let f = first.as_str();
    assert_eq!(
        rows,
        [
            [f, "rated", "5", "0", "5", "0", "0"],
            [f, "capped", "3", "3", "0", "0", "0"],
            [f, "per-source", "3", "0", "0", "3", "0"],
        ],
        "{table}"
    );
    let json = dpctl_json(&dpd, &["sources", "--refused", "--vip", "capped"]);
    assert_eq!(
        json["refused"],
        serde_json::json!([{"source": first, "vip": "capped", "refused": 3, "conn_limit": 3,
            "source_rate": 0, "source_conns": 0, "denied": 0}])
    );
}

/// `[access] auto_deny`: an address its per-source rate keeps refusing
/// is denied for the rule's time by dpd itself within seconds (listed
/// with its time, its connects unanswered, logged), while another address
/// goes on; taken off by `deny remove`, it is not denied again for the
/// refusals that earned it.
#[test]
fn auto_deny_denies_a_source_its_limits_keep_refusing() {
    let lab = Lab::up("autodeny");
    let dpd = Dpd::start(&lab, |s| {
        format!(
            "{}[access]\nauto_deny = {{ refused = 20, for_s = 120 }}\n",
            config(&lab, s)
        )
    });
    let first = format!("{}.2", lab.net);
    let second = lab.add_client_address(3);
    let lines = clients(&lab, 80, &first, 60, 0, 0);
    assert!(count(&lines[0], "ECONNREFUSED") >= 20, "{lines:?}");
    // dpd looks every 5 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    let list = loop {
        let list = dpctl_ok(&dpd, &["deny", "list"]);
        if list.contains(&first) {
            break list;
        }
        assert!(Instant::now() < deadline, "not denied: {list}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let row = list.lines().find(|l| l.starts_with(first.as_str()));
    assert!(row.is_some_and(|r| r.contains(" until ")), "{list}");
    assert!(!list.contains(&second), "{list}");
    let mut a = Holder::start(&lab, 80, &first);
    let mut b = Holder::start(&lab, 80, &second);
    assert_eq!(a.ask("open 1"), ["timeout"], "denied");
    assert_eq!(b.ask("open 1"), ["open"]);
    let log = dpd.log_text();
    assert!(
        log.contains(&format!("auto_deny: {first} (")) && log.contains("denied for 120 s"),
        "{log}"
    );
    let metrics = std::process::Command::new("ip")
        .args(["netns", "exec", &format!("{}-dut", lab.name)])
        .args([
            "curl",
            "-sS",
            "--max-time",
            "5",
            "http://127.0.0.1:9464/metrics",
        ])
        .output()
        .expect("curl");
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    assert!(
        metrics.contains("\ntlsdp_access_auto_denied_total 1\n"),
        "{metrics}"
    );

    dpctl_ok(&dpd, &["deny", "remove", &first]);
    assert_eq!(a.ask("open 1"), ["open"]);
    // A look later (every 5 s): not denied again.
    std::thread::sleep(Duration::from_secs(6));
    assert!(!dpctl_ok(&dpd, &["deny", "list"]).contains(&first));
}

/// Holds connections to `dut:port` from `src` on command, one per stdin
/// line: `open N` opens N one after another and prints one word per
/// attempt ("open" or the errno's name); `close N` closes the N oldest
/// and prints "closed"; `quiet` opens one, sends nothing and prints how
/// it ended ("reset" or "eof") and after how many seconds; `held` prints
/// one word per connection held: "open", "reset" or "eof".
const HOLDER: &str = r#"
import errno, socket, sys, time
dut, port, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
held = []
for line in sys.stdin:
    cmd, n = line.split()
    if cmd == "open":
        words = []
        for _ in range(int(n)):
            s = socket.socket()
            s.settimeout(3)
            s.bind((src, 0))
            try:
                s.connect((dut, port))
                words.append("open")
                held.append(s)
            except socket.timeout:
                words.append("timeout")
                s.close()
            except OSError as e:
                words.append(errno.errorcode.get(e.errno, str(e.errno)))
                s.close()
        print(" ".join(words), flush=True)
    elif cmd == "held":
        words = []
        for s in held:
            s.setblocking(False)
            try:
                words.append("eof" if s.recv(1) == b"" else "data")
            except BlockingIOError:
                words.append("open")
            except ConnectionResetError:
                words.append("reset")
        print(" ".join(words), flush=True)
    elif cmd == "close":
        for s in held[:int(n)]:
            s.close()
        held = held[int(n):]
        print("closed", flush=True)
    elif cmd == "quiet":
        s = socket.create_connection((dut, port), timeout=20, source_address=(src, 0))
        t0 = time.monotonic()
        try:
            how = "eof" if s.recv(1) == b"" else "data"
        except ConnectionResetError:
            how = "reset"
        print(f"{how} {time.monotonic() - t0:.1f}", flush=True)
"#;

/// [`HOLDER`] running in the client namespace.
struct Holder {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(lab: &Lab, port: u16, src: &str) -> Self {
        let port = port.to_string();
        let dut = lab.dut_ip();
        let mut child = lab
            .client_command(&["timeout", "120", PYTHON, "-c", HOLDER, &dut, &port, src])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the client");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Self { child, out }
    }

    /// Sends `cmd`; the words of its answer.
    fn ask(&mut self, cmd: &str) -> Vec<String> {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{cmd}").expect("to the client");
        let mut line = String::new();
        self.out.read_line(&mut line).expect("from the client");
        assert!(!line.is_empty(), "the client ended at {cmd:?}");
        line.split_whitespace().map(str::to_string).collect()
    }
}

impl Holder {
    /// What `held` answers once it is `want` (resets are on their way
    /// when a change is applied), or after 5 s.
    fn held_when(&mut self, want: &[&str]) -> Vec<String> {
        let t0 = std::time::Instant::now();
        loop {
            let held = self.ask("held 0");
            if held == want || t0.elapsed() > Duration::from_secs(5) {
                return held;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// dpd with one VIP, `name`, the built-in responder on port 80.
fn responder_vip(lab: &Lab, name: &str) -> Dpd {
    Dpd::start(lab, |s| {
        format!(
            "{}\n[[vip]]\nname = \"{name}\"\nlisten = \"{}:80\"\nrespond = \"builtin\"\n",
            lab.config("net_af_packet", s, ""),
            lab.dut_ip()
        )
    })
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// A `dpctl` table's rows after its header, as words.
fn table_rows(table: &str) -> Vec<Vec<&str>> {
    let rows = table.lines().skip(1);
    rows.map(|l| l.split_whitespace().collect()).collect()
}

/// `dpctl --json ARGS` that must succeed; its reply.
fn dpctl_json(dpd: &Dpd, args: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = std::iter::once("--json")
        .chain(args.iter().copied())
        .collect();
    serde_json::from_str(&dpctl_ok(dpd, &args)).expect("JSON")
}

/// `dpctl` that must succeed; its stdout.
fn dpctl_ok(dpd: &Dpd, args: &[&str]) -> String {
    let o = dpd.dpctl(args);
    assert!(
        o.status.success(),
        "dpctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An operator under attack sets limits and timeouts on a running VIP
/// with `dpctl vip set`: a per-source cap counts the connections already
/// open, takes effect for the next SYN, shows in `vip show`, and goes
/// with `none`; a shorter request timeout resets the next quiet client;
/// values out of range are refused and change nothing.
#[test]
fn dpctl_vip_set_changes_limits_and_timeouts_on_a_running_vip() {
    let lab = Lab::up("limset");
    let dpd = responder_vip(&lab, "live");
    let src = format!("{}.2", lab.net);
    let mut client = Holder::start(&lab, 80, &src);
    assert_eq!(client.ask("open 4"), ["open"; 4]);

    dpctl_ok(
        &dpd,
        &["vip", "set", "live", "--max-connections-per-source", "3"],
    );
    assert_eq!(client.ask("open 1"), ["ECONNREFUSED"], "its four count");
    let show = dpctl_ok(&dpd, &["vip", "show", "live"]);
    assert!(
        show.contains("per source: none new a second, 3 established"),
        "{show}"
    );
    assert!(show.contains("1 over max_connections_per_source"), "{show}");
    // Two closed: room for one.
    assert_eq!(client.ask("close 2"), ["closed"]);
    dpd.stats_when(Duration::from_secs(5), |s| {
        s.vips.get("live").is_some_and(|v| v.active == 2)
    });
    assert_eq!(client.ask("open 2"), ["open", "ECONNREFUSED"]);
    // Taken away: no refusal.
    dpctl_ok(
        &dpd,
        &["vip", "set", "live", "--max-connections-per-source", "none"],
    );
    assert_eq!(client.ask("open 2"), ["open", "open"]);
    let limits = &dpctl_json(&dpd, &["vip", "show", "live"])["vips"][0]["limits"];
    assert_eq!(
        limits["max_connections_per_source"],
        serde_json::Value::Null
    );
    assert_eq!(limits["request_timeout_ms"], 30_000, "{limits}");

    // A client that sends nothing is reset at the new request timeout.
    dpctl_ok(
        &dpd,
        &["vip", "set", "live", "--request-timeout-ms", "1000"],
    );
    let quiet = client.ask("quiet 1");
    let after: f64 = quiet[1].parse().expect("seconds");
    assert_eq!(quiet[0], "reset", "{quiet:?}");
    assert!((0.9..5.0).contains(&after), "reset after {after} s");
    assert!(dpctl_ok(&dpd, &["config", "show"]).contains("request_timeout_ms = 1000"));

    // Out of range, or not a number: refused, nothing changed.
    let o = dpd.dpctl(&["vip", "set", "live", "--send-timeout-ms", "10"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("vip[0].send_timeout_ms"),
        "{err}"
    );
    let o = dpd.dpctl(&["vip", "set", "live", "--max-connections", "lots"]);
    assert!(!o.status.success());
    let show = dpctl_ok(&dpd, &["vip", "show", "live"]);
    assert!(show.contains("send 60000 ms"), "{show}");
    assert!(show.contains("connections none;"), "{show}");
    let stats = dpd.stats_when(Duration::from_secs(5), |s| {
        s.vips.get("live").is_some_and(|v| v.request_timeouts == 1)
    });
    let live = &stats.vips["live"];
    assert_eq!(
        (live.refused_source_conns, live.request_timeouts),
        (2, 1),
        "{stats:?}"
    );
}

/// `dpctl sources` and `dpctl deny` on a running dpd: the addresses
/// holding connections, most first; an address denied has its open
/// connections reset at once and its connects go unanswered (they time
/// out), while another address connects; the list shows it with what it
/// refused and `config show` saves it; a bad network is refused; taken
/// off, the address connects again.
#[test]
fn dpctl_sources_finds_a_client_and_deny_cuts_it_off_at_once() {
    let lab = Lab::up("deny");
    let dpd = responder_vip(&lab, "live");
    let first = format!("{}.2", lab.net);
    let second = lab.add_client_address(3);
    let mut a = Holder::start(&lab, 80, &first);
    let mut b = Holder::start(&lab, 80, &second);
    assert_eq!(a.ask("open 2"), ["open"; 2]);
    assert_eq!(b.ask("open 1"), ["open"]);

    // Who holds the VIP, most first.
    let table = dpctl_ok(&dpd, &["sources"]);
    let rows = table_rows(&table);
    assert_eq!(
        rows,
        [[first.as_str(), "2", "0"], [second.as_str(), "1", "0"]],
        "{table}"
    );
    let top = dpctl_json(&dpd, &["sources", "--vip", "live", "--count", "1"]);
    assert_eq!(
        top["sources"],
        serde_json::json!([{"source": first, "established": 2, "half_open": 0}])
    );
    assert!(!dpd.dpctl(&["sources", "--vip", "nope"]).status.success());

    dpctl_ok(&dpd, &["deny", "add", &first]);
    // Its resets are on their way when the change is applied.
    assert_eq!(
        a.held_when(&["reset"; 2]),
        ["reset"; 2],
        "the denied address's connections"
    );
    assert_eq!(b.ask("held 0"), ["open"], "the other address's");
    assert_eq!(a.ask("open 1"), ["timeout"], "no answer to a denied SYN");
    assert_eq!(b.ask("open 1"), ["open"]);
    let list = dpctl_ok(&dpd, &["deny", "list"]);
    assert!(list.lines().any(|l| l == first), "{list}");
    assert!(list.contains("2 open connections reset"), "{list}");
    assert!(dpctl_ok(&dpd, &["config", "show"]).contains("[access]"));
    let stats = dpd.stats();
    assert!(stats.vips["live"].refused_denied >= 1, "{stats:?}");
    assert!(stats.drops["source_denied"] >= 1, "{stats:?}");

    let o = dpd.dpctl(&["deny", "add", "10.0.0.1/8"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("host bits set"),
        "{err}"
    );
    let o = dpd.dpctl(&["deny", "remove", "192.0.2.1"]);
    assert!(!o.status.success());
    // A block list longer than one request: sent in parts, all taken,
    // and taken off the same way.
    let block: Vec<String> = (0..8_000u32)
        .map(|i| std::net::Ipv4Addr::from(0xc633_0000 + i).to_string())
        .collect();
    let mut add = vec!["deny", "add"];
    add.extend(block.iter().map(String::as_str));
    let said = dpctl_ok(&dpd, &add);
    assert!(said.contains("part 2 of"), "{said}");
    let json = dpctl_json(&dpd, &["deny", "list"]);
    assert_eq!(
        json["deny"]["prefixes"].as_array().map(Vec::len),
        Some(8_001)
    );
    add[1] = "remove";
    dpctl_ok(&dpd, &add);

    dpctl_ok(&dpd, &["deny", "remove", &first]);
    assert_eq!(a.ask("open 1"), ["open"], "allowed again");
    assert!(dpctl_ok(&dpd, &["deny", "list"]).starts_with("0 networks denied"));
}

/// `dpctl conn list` shows each client connection (oldest first, with its
/// VIP and TCP state), by network and as JSON; `conn reset --source`
/// resets that address's connections only, and it may connect again.
#[test]
fn dpctl_conn_list_shows_who_is_connected_and_conn_reset_ends_only_theirs() {
    let lab = Lab::up("conns");
    let dpd = responder_vip(&lab, "live");
    let first = format!("{}.2", lab.net);
    let second = lab.add_client_address(3);
    let mut a = Holder::start(&lab, 80, &first);
    let mut b = Holder::start(&lab, 80, &second);
    assert_eq!(a.ask("open 2"), ["open"; 2]);
    assert_eq!(b.ask("open 1"), ["open"]);

    let table = dpctl_ok(&dpd, &["conn", "list"]);
    let rows = table_rows(&table);
    assert_eq!(rows.len(), 3, "{table}");
    for (row, ip) in rows.iter().zip([&first, &first, &second]) {
        assert!(
            row[0].starts_with(&format!("{ip}:")),
            "oldest first: {table}"
        );
        assert_eq!((row[1], row[3]), ("live", "ESTABLISHED"), "{table}");
    }
    let json = dpctl_json(
        &dpd,
        &["conn", "list", "--source", &second, "--vip", "live"],
    );
    let conns = json["conns"].as_array().expect("a list");
    assert_eq!(conns.len(), 1, "{json}");
    let c = &conns[0];
    assert!(c["client"]
        .as_str()
        .is_some_and(|s| s.starts_with(&format!("{second}:"))));
    assert_eq!(c["local"], format!("{}:80", lab.dut_ip()), "{json}");
    assert_eq!(
        (&c["vip"], &c["state"]),
        (&"live".into(), &"ESTABLISHED".into())
    );
    assert_eq!((&c["send_queue"], &c["recv_queue"]), (&0.into(), &0.into()));
    assert!(c["peer_window"].as_u64() > Some(0), "{json}");
    assert_eq!(
        (&c["role"], &c["waits_for"]),
        (&"http".into(), &"request".into())
    );
    assert!(c["backend"].is_null(), "{json}");
    let rows = |args: &[&str]| table_rows(&dpctl_ok(&dpd, args)).len();
    assert_eq!(rows(&["conn", "list", "--state", "established"]), 3);
    assert_eq!(rows(&["conn", "list", "--state", "CLOSE-WAIT"]), 0);
    assert_eq!(rows(&["conn", "list", "--idle-over", "1h"]), 0);
    for bad in [
        &["conn", "list", "--state", "LISTEN"][..],
        &["conn", "list", "--idle-over", "soon"],
        &["conn", "list", "--vip", "nope"],
        &["conn", "list", "--source", "10.0.0.1/8"],
        &["conn", "list", "--count", "0"],
        &["conn", "reset"],
    ] {
        assert!(!dpd.dpctl(bad).status.success(), "{bad:?}");
    }

    let out = dpctl_ok(&dpd, &["conn", "reset", "--source", &first]);
    assert_eq!(out.trim(), "2 connections reset");
    assert_eq!(a.held_when(&["reset"; 2]), ["reset"; 2]);
    assert_eq!(b.ask("held 0"), ["open"], "the other address's");
    assert_eq!(a.ask("open 1"), ["open"], "not refused after");
    assert_eq!(dpd.stats().tcp_operator_resets, 2);
    let log = dpd.log_text();
    assert!(
        log.contains(&format!("reset 2 client connection(s) from {first}")),
        "{log}"
    );
}

/// `dpctl deny add --for`: the address is cut off at once, listed with
/// its time, and taken off by dpd when the time comes (no command), so
/// it connects again; a time out of range or that does not read is
/// refused.
#[test]
fn dpctl_deny_for_a_time_ends_by_itself() {
    let lab = Lab::up("denyfor");
    let dpd = responder_vip(&lab, "live");
    let first = format!("{}.2", lab.net);
    let mut a = Holder::start(&lab, 80, &first);
    assert_eq!(a.ask("open 1"), ["open"]);

    // Long enough for the refused connect below (3 s) to end first.
    dpctl_ok(&dpd, &["deny", "add", &first, "--for", "7s"]);
    assert_eq!(a.held_when(&["reset"]), ["reset"]);
    assert_eq!(a.ask("open 1"), ["timeout"], "no answer while denied");
    let list = dpctl_ok(&dpd, &["deny", "list"]);
    let row = list.lines().find(|l| l.starts_with(first.as_str()));
    assert!(
        row.is_some_and(|r| r.contains(" until ") && r.contains("s left)")),
        "{list}"
    );
    assert!(list.contains("1 networks denied (1 for a time)"), "{list}");
    let json = dpctl_json(&dpd, &["deny", "list"]);
    assert_eq!(
        json["deny"]["temporary"][0]["prefix"],
        first.as_str(),
        "{json}"
    );
    assert!(
        json["deny"]["temporary"][0]["left_s"].as_u64() <= Some(7),
        "{json}"
    );
    assert!(dpctl_ok(&dpd, &["config", "show"]).contains("deny_until"));
    for bad in ["0s", "366d", "soon"] {
        let o = dpd.dpctl(&["deny", "add", "192.0.2.1", "--for", bad]);
        assert!(!o.status.success(), "--for {bad}");
    }

    // Its time comes: off the list by dpd's own doing, then connecting.
    let deadline = Instant::now() + Duration::from_secs(20);
    while dpctl_ok(&dpd, &["deny", "list"]).contains(&first) {
        assert!(Instant::now() < deadline, "still denied after 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(a.ask("open 1"), ["open"], "allowed again");
    assert!(dpd.log_text().contains(&format!("deny of {first} ended")));
    assert!(!dpctl_ok(&dpd, &["config", "show"]).contains("deny_until"));
}

/// `dpctl vip set --allow` on a running VIP: connections from other
/// addresses are reset at once and their connects go unanswered, the
/// allowed address connects, `vip show` lists the list, and
/// `--allow-all` lets everyone back.
#[test]
fn dpctl_vip_set_allow_keeps_only_the_networks_given() {
    let lab = Lab::up("allow");
    let dpd = responder_vip(&lab, "admin");
    let first = format!("{}.2", lab.net);
    let second = lab.add_client_address(3);
    let mut a = Holder::start(&lab, 80, &first);
    let mut b = Holder::start(&lab, 80, &second);
    assert_eq!(a.ask("open 1"), ["open"]);
    assert_eq!(b.ask("open 1"), ["open"]);

    let only_second = format!("{second}/32");
    dpctl_ok(&dpd, &["vip", "set", "admin", "--allow", &only_second]);
    assert_eq!(
        a.held_when(&["reset"]),
        ["reset"],
        "the address not allowed"
    );
    assert_eq!(b.ask("held 0"), ["open"]);
    assert_eq!(a.ask("open 1"), ["timeout"]);
    assert_eq!(b.ask("open 1"), ["open"]);
    let show = dpctl_ok(&dpd, &["vip", "show", "admin"]);
    assert!(
        show.contains(&format!("allow        {only_second}")),
        "{show}"
    );
    let o = dpd.dpctl(&["vip", "set", "admin", "--allow", "10.1.2.3/8"]);
    assert!(!o.status.success(), "host bits set");

    dpctl_ok(&dpd, &["vip", "set", "admin", "--allow-all"]);
    assert_eq!(a.ask("open 1"), ["open"]);
    assert!(dpctl_ok(&dpd, &["vip", "show", "admin"]).contains("allow        any client"));
    let stats = dpd.stats();
    assert!(stats.vips["admin"].refused_denied >= 1, "{stats:?}");
}
