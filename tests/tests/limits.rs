//! A VIP's connection limits against real kernel clients over veth: SYNs
//! over `max_new_per_source`, `max_connections` or
//! `max_connections_per_source` are refused with a reset
//! (the client's connect fails at once with ECONNREFUSED), counted per
//! VIP, while other client addresses and other VIPs go on.

use std::path::Path;
use std::time::Duration;

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
}
