//! Limits a client cannot get past: the byte-ring memory a connection
//! pins, the engine's cap on it, and a VIP's caps on open connections and
//! on new connections per source address. Clients come from thousands of
//! addresses (the engine routes them through the test's host), with the
//! default settings unless a test says otherwise.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use common::host::{HostConn, HostLab, Seg, DUT_IP, HOST_IP};
use common::vips::{PLAIN, TLS};
use dataplane::app::pool::{Balance, Member, MemberState, Pool};
use dataplane::net::PrefixSet;
use dataplane::stats::DropReason;
use dataplane::tcp::{ListenLimits, SynCookies, TcpConfig};
use smoltcp::wire::TcpControl;

/// The `i`-th client address (100.64.0.0/10, off the engine's subnet).
fn client_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x6440_0000 + i)
}

/// The engine with the four VIPs, clients from anywhere.
fn lab(tcp: TcpConfig) -> HostLab {
    let mut lab = HostLab::routed(tcp);
    let tls = common::vips::tls_config();
    let e = &mut lab.mem.engine;
    e.listen(DUT_IP, PLAIN);
    e.listen_tls(DUT_IP, TLS, tls);
    lab
}

/// A client connection from `addr`.
struct Client {
    addr: Ipv4Addr,
    conn: HostConn,
}

impl Client {
    fn new(i: u32, dut_port: u16) -> Self {
        Self {
            addr: client_addr(i),
            conn: HostConn::client(40_000 + (i % 20_000) as u16, dut_port, 1_000 + i * 7),
        }
    }

    fn absorb(&mut self, out: &[(Ipv4Addr, Seg)]) {
        let mine: Vec<Seg> = out
            .iter()
            .filter(|(a, _)| *a == self.addr)
            .map(|(_, s)| s.clone())
            .collect();
        self.conn.absorb(&mine);
    }
}

/// `n` clients from address `addr` to `dut_port`, on source ports
/// `port0`, `port0 + 1`, ...
fn clients(addr: u32, n: u16, port0: u16, dut_port: u16) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let mut c = Client::new(addr, dut_port);
            c.conn.port = port0 + i;
            c
        })
        .collect()
}

/// Sends one segment per client (`make` builds it), in bursts of 128, and
/// gives each client what the engine sent back.
fn round(lab: &mut HostLab, clients: &mut [Client], make: impl Fn(&mut Client) -> Option<Seg>) {
    for chunk in clients.chunks_mut(128) {
        let segs: Vec<(Ipv4Addr, Seg)> = chunk
            .iter_mut()
            .filter_map(|c| make(c).map(|s| (c.addr, s)))
            .collect();
        let out = lab.exchange_from(&segs);
        for c in chunk.iter_mut() {
            c.absorb(&out);
        }
    }
}

/// Opens every client's connection (SYN, then the ACK of the SYN-ACK).
fn open(lab: &mut HostLab, clients: &mut [Client]) {
    round(lab, clients, |c| Some(c.conn.next(TcpControl::Syn, b"")));
    round(lab, clients, |c| {
        c.conn.rcv_nxt.map(|_| c.conn.next(TcpControl::None, b""))
    });
}

#[test]
fn a_slowloris_of_ten_thousand_pins_small_rings_until_its_deadlines() {
    // Half on the responder (the start of a request head), half on TLS
    // (the start of a record header), each from its own address.
    const CLIENTS: u32 = 10_000;
    let mut lab = lab(TcpConfig::default());
    let port = |i: u32| if i.is_multiple_of(2) { PLAIN } else { TLS };
    let mut clients: Vec<Client> = (0..CLIENTS).map(|i| Client::new(i, port(i))).collect();
    open(&mut lab, &mut clients);
    let heap_before = malloc_in_use();
    round(&mut lab, &mut clients, |c| {
        let first: &[u8] = if c.conn.dut_port == PLAIN {
            b"GE"
        } else {
            &[0x16, 0x03]
        };
        Some(c.conn.next(TcpControl::None, first))
    });
    let heap = malloc_in_use() - heap_before;
    let tcp = lab.mem.engine.tcp();
    assert_eq!(tcp.counters().active, u64::from(CLIENTS), "all held");
    let (rings, in_use) = (tcp.buffers().in_use(), tcp.buffers().bytes_in_use());
    let (tls_conns, tls_bytes) = lab.mem.engine.tls_buffers();
    eprintln!(
        "{CLIENTS} connections with 2 bytes each: heap +{} KiB; TCP: {rings} rings, {} KiB (a full ring is {} KiB); TLS: {tls_conns} connections, {} KiB buffered",
        heap >> 10,
        in_use >> 10,
        tcp.config().buffer_size >> 10,
        tls_bytes >> 10,
    );
    // The responder reads a head in place: its bytes stay in TCP's ring,
    // the smallest one. TLS takes a record's first bytes into its own
    // (bounded) buffer.
    assert_eq!(rings, CLIENTS as usize / 2);
    assert_eq!(in_use, CLIENTS as usize / 2 * 4096, "one 4 KiB ring each");
    assert!(heap < CLIENTS as usize * 8192, "{heap} bytes of heap");
    assert!(clients.iter().all(|c| !c.conn.reset));
    // The handshake deadline (10 s from the SYN) frees the TLS ones, the
    // request deadline (30 s) the others.
    let mut resets = count_resets(lab.advance(Duration::from_millis(10_100)));
    resets += drain_resets(&mut lab);
    assert_eq!(
        lab.mem.engine.tcp().counters().active,
        u64::from(CLIENTS) / 2
    );
    resets += count_resets(lab.advance(Duration::from_secs(20)));
    resets += drain_resets(&mut lab);
    let tcp = lab.mem.engine.tcp();
    assert_eq!(tcp.counters().active, 0);
    assert_eq!(tcp.buffers().bytes_in_use(), 0);
    assert_eq!(tcp.buffers().bytes_outside(), 0, "TLS's charge refunded");
    // Each was told, though thousands ended in one iteration (resets for
    // stray segments stay at 64 an iteration; these are not those): as
    // fast as the link takes them.
    assert_eq!(tcp.counters().resets_sent, u64::from(CLIENTS));
    assert_eq!(resets, CLIENTS as usize);
    let c = lab.mem.engine.counters();
    assert_eq!(
        (c.tls_handshake_timeouts, c.request_timeouts),
        (u64::from(CLIENTS) / 2, u64::from(CLIENTS) / 2)
    );
}

fn count_resets(segs: Vec<Seg>) -> usize {
    segs.iter().filter(|s| s.control == TcpControl::Rst).count()
}

/// Runs the engine until it sends nothing more; the resets it sent.
fn drain_resets(lab: &mut HostLab) -> usize {
    let mut n = 0;
    loop {
        let out = lab.exchange(&[]);
        if out.is_empty() {
            return n;
        }
        n += count_resets(out);
    }
}

/// Bytes malloc has handed out and not taken back (Rust and AWS-LC).
fn malloc_in_use() -> usize {
    // SAFETY: mallinfo2 has no preconditions; it reads allocator totals.
    unsafe { libc::mallinfo2() }.uordblks
}

#[test]
fn at_the_buffer_cap_data_and_syns_wait_and_nothing_is_lost() {
    // 256 KiB: 64 small rings, 56 of them for received bytes.
    let tcp = TcpConfig {
        buffer_memory: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    let mut clients: Vec<Client> = (0..80).map(|i| Client::new(i, PLAIN)).collect();
    open(&mut lab, &mut clients);
    round(&mut lab, &mut clients, |c| {
        Some(c.conn.next(TcpControl::None, b"G"))
    });
    let counters = lab.mem.engine.tcp().counters();
    assert_eq!(lab.mem.engine.tcp().buffers().in_use(), 56);
    assert_eq!(counters.buffer_denied, 24, "24 first bytes had no ring");
    let (held, waiting) = clients.split_at_mut(56);
    // A new connection is not taken while no ring can be had.
    let mut late = vec![Client::new(500, PLAIN)];
    round(&mut lab, &mut late, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(late[0].conn.rcv_nxt.is_none(), "no SYN-ACK at the cap");
    assert_eq!(lab.mem.engine.tcp().counters().syn_no_memory, 1);
    assert_eq!(lab.mem.dropped(DropReason::ListenOverflow), 1);
    // The held clients finish their requests and are answered; their
    // rings come back.
    round(&mut lab, held, |c| {
        Some(
            c.conn
                .next(TcpControl::None, b"ET /bytes/5 HTTP/1.1\r\nHost: t\r\n\r\n"),
        )
    });
    for c in held.iter() {
        let text = String::from_utf8_lossy(&c.conn.received);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
    // Their ACKs free the responses' rings.
    round(&mut lab, held, |c| Some(c.conn.next(TcpControl::None, b"")));
    assert_eq!(lab.mem.engine.tcp().buffers().bytes_in_use(), 0);
    // The waiting clients send again what was dropped, with the rest.
    let waiting_starts: Vec<u32> = waiting.iter().map(|c| c.conn.snd_nxt - 1).collect();
    for (c, start) in waiting.iter_mut().zip(&waiting_starts) {
        c.conn.snd_nxt = *start;
    }
    round(&mut lab, waiting, |c| {
        Some(c.conn.next(
            TcpControl::None,
            b"GET /bytes/5 HTTP/1.1\r\nHost: t\r\n\r\n",
        ))
    });
    for c in waiting.iter() {
        let text = String::from_utf8_lossy(&c.conn.received);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
    assert_eq!(lab.mem.engine.responder().counters.requests, 80);
    // The late client's SYN, sent again, is taken now.
    late[0].conn.snd_nxt -= 1;
    round(&mut lab, &mut late, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(
        late[0].conn.rcv_nxt.is_some(),
        "SYN-ACK once rings are free"
    );
}

#[test]
fn a_vip_over_its_connection_cap_resets_new_syns_until_one_closes() {
    let mut lab = lab(TcpConfig::default());
    let limits = ListenLimits {
        max_conns: Some(3),
        ..ListenLimits::default()
    };
    lab.mem.engine.set_vip_limits(DUT_IP, PLAIN, limits);
    let mut clients: Vec<Client> = (0..5).map(|i| Client::new(i, PLAIN)).collect();
    // Five SYNs in one burst: three taken, two reset.
    round(&mut lab, &mut clients, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    let taken: Vec<bool> = clients.iter().map(|c| c.conn.rcv_nxt.is_some()).collect();
    assert_eq!(taken, [true, true, true, false, false]);
    assert!(clients[3].conn.reset && clients[4].conn.reset);
    // The TLS VIP next to it is not limited.
    let mut other = vec![Client::new(9, TLS)];
    round(&mut lab, &mut other, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(other[0].conn.rcv_nxt.is_some());
    // One of the three resets: a new SYN is taken.
    round(&mut lab, &mut clients[..1], |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    let mut again = vec![Client::new(3, PLAIN)];
    again[0].conn.port += 1;
    round(&mut lab, &mut again, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(again[0].conn.rcv_nxt.is_some(), "room again");
    lab.mem.engine.publish();
    let vip = lab.mem.engine.vip_counters(0);
    assert_eq!((vip.refused_conn_limit, vip.refused_source_rate), (2, 0));
    assert_eq!(lab.mem.dropped(DropReason::ListenRefused), 2);
}

/// `max_new_per_source` counts completed handshakes: a burst of SYNs from
/// one address is answered, a second's worth of their handshakes are
/// taken and the rest reset as they complete, then its SYNs are reset at
/// once until its rate gives it another; SYNs alone (spoofed from an
/// address) spend nothing of its rate; other addresses are not limited.
#[test]
fn a_source_over_its_rate_is_reset_and_spoofed_syns_spend_nothing() {
    for cookies in [SynCookies::WhenFull, SynCookies::Always] {
        per_source_rate(cookies);
    }
}

/// [`a_source_over_its_rate_is_reset_and_spoofed_syns_spend_nothing`]
/// with handshakes kept by the engine or carried by SYN cookies.
fn per_source_rate(syn_cookies: SynCookies) {
    let mut lab = lab(TcpConfig {
        syn_cookies,
        ..TcpConfig::default()
    });
    let limits = ListenLimits {
        per_source_rate: Some(5),
        ..ListenLimits::default()
    };
    lab.mem.engine.set_vip_limits(DUT_IP, TLS, limits);
    let from = |addr: u32, n: u16, port0: u16| clients(addr, n, port0, TLS);
    // Eight SYNs from one address in a burst: all answered; as their
    // handshakes complete, a second's worth (5) are taken.
    let mut same = from(7, 8, 41_000);
    round(&mut lab, &mut same, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(same.iter().all(|c| c.conn.rcv_nxt.is_some()));
    round(&mut lab, &mut same, |c| {
        Some(c.conn.next(TcpControl::None, b""))
    });
    let reset: Vec<bool> = same.iter().map(|c| c.conn.reset).collect();
    assert_eq!(reset, [false, false, false, false, false, true, true, true]);
    // Now its SYNs are reset at once; one from each of 1,000 others is not.
    let mut next = from(7, 1, 42_000);
    round(&mut lab, &mut next, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(next[0].conn.reset && next[0].conn.rcv_nxt.is_none());
    let mut others: Vec<Client> = (100..1_100).map(|i| Client::new(i, TLS)).collect();
    open(&mut lab, &mut others);
    assert!(others
        .iter()
        .all(|c| c.conn.rcv_nxt.is_some() && !c.conn.reset));
    // Fifty SYNs spoofed from address 8, never completed, spend nothing:
    // its own five connections then go through.
    let mut spoofed = from(8, 50, 43_000);
    round(&mut lab, &mut spoofed, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    let mut real = from(8, 5, 44_000);
    open(&mut lab, &mut real);
    assert!(real
        .iter()
        .all(|c| c.conn.rcv_nxt.is_some() && !c.conn.reset));
    // 200 ms later the limited source has one more.
    lab.advance(Duration::from_millis(200));
    let mut later = from(7, 2, 45_000);
    for c in later.iter_mut() {
        open(&mut lab, std::slice::from_mut(c));
    }
    let taken: Vec<bool> = later.iter().map(|c| !c.conn.reset).collect();
    assert_eq!(taken, [true, false], "{syn_cookies:?}");
    lab.mem.engine.publish();
    let vip = lab.mem.engine.vip_counters(1);
    assert_eq!(
        (vip.refused_conn_limit, vip.refused_source_rate),
        (0, 5),
        "{syn_cookies:?}: three at their handshake's end, two SYNs"
    );
}

#[test]
fn a_source_with_its_cap_established_is_reset_and_syns_alone_count_nothing() {
    for cookies in [SynCookies::WhenFull, SynCookies::Always] {
        per_source_cap(cookies);
    }
}

/// [`a_source_with_its_cap_established_is_reset_and_syns_alone_count_nothing`]
/// with handshakes kept by the engine or carried by SYN cookies.
fn per_source_cap(syn_cookies: SynCookies) {
    let mut lab = lab(TcpConfig {
        syn_cookies,
        ..TcpConfig::default()
    });
    let limits = ListenLimits {
        per_source_conns: Some(3),
        ..ListenLimits::default()
    };
    lab.mem.engine.set_vip_limits(DUT_IP, PLAIN, limits);
    let from = |addr: u32, n: u16, port0: u16| clients(addr, n, port0, PLAIN);
    // Six SYNs from one address (as a spoofer could send them): all
    // answered, since half-open connections count nothing.
    let mut six = from(7, 6, 41_000);
    round(&mut lab, &mut six, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(six.iter().all(|c| c.conn.rcv_nxt.is_some()));
    // Their handshakes complete: three are taken, three reset.
    round(&mut lab, &mut six, |c| {
        Some(c.conn.next(TcpControl::None, b""))
    });
    let reset: Vec<bool> = six.iter().map(|c| c.conn.reset).collect();
    assert_eq!(reset, [false, false, false, true, true, true]);
    // Now a SYN from it is reset at once; another address is not limited.
    let mut more = from(7, 1, 42_000);
    more.extend(from(8, 3, 42_000));
    round(&mut lab, &mut more, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    let taken: Vec<bool> = more.iter().map(|c| c.conn.rcv_nxt.is_some()).collect();
    assert_eq!(taken, [false, true, true, true]);
    // One of the three ends: its source has room again.
    round(&mut lab, &mut six[..1], |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    let mut again = from(7, 1, 43_000);
    open(&mut lab, &mut again);
    assert!(
        again[0].conn.rcv_nxt.is_some() && !again[0].conn.reset,
        "room again"
    );
    // The other address's three complete theirs.
    let mut others: Vec<Client> = more.split_off(1);
    round(&mut lab, &mut others, |c| {
        Some(c.conn.next(TcpControl::None, b""))
    });
    assert!(others.iter().all(|c| !c.conn.reset));
    lab.mem.engine.publish();
    let vip = lab.mem.engine.vip_counters(0);
    assert_eq!(
        vip.refused_source_conns, 4,
        "{syn_cookies:?}: three at their handshake's end, one SYN"
    );
}

/// A per-source cap set on a listener with connections open counts those
/// established already (over the cap, they stay), and one taken away and
/// set again counts afresh: their ends lower only what they raised.
#[test]
fn a_per_source_cap_set_while_connections_are_open_counts_them() {
    let mut lab = lab(TcpConfig::default());
    let from = |addr: u32, n: u16, port0: u16| clients(addr, n, port0, PLAIN);
    let cap = |lab: &mut HostLab, n: Option<u32>| {
        let limits = ListenLimits {
            per_source_conns: n,
            ..ListenLimits::default()
        };
        lab.mem.engine.set_vip_limits(DUT_IP, PLAIN, limits);
    };
    let taken = |lab: &mut HostLab, addr: u32, port: u16| -> bool {
        let mut c = from(addr, 1, port);
        open(lab, &mut c);
        c[0].conn.rcv_nxt.is_some() && !c[0].conn.reset
    };
    // Four from one address with no cap; then a cap of three.
    let mut four = from(7, 4, 41_000);
    open(&mut lab, &mut four);
    assert!(four
        .iter()
        .all(|c| c.conn.rcv_nxt.is_some() && !c.conn.reset));
    cap(&mut lab, Some(3));
    assert!(!taken(&mut lab, 7, 42_000), "its four count");
    assert!(taken(&mut lab, 8, 42_000), "another address has room");
    assert!(
        four.iter().all(|c| !c.conn.reset),
        "those open go on over the cap"
    );
    // Two end: one more fits.
    round(&mut lab, &mut four[..2], |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    assert!(taken(&mut lab, 7, 43_000), "two of four left");
    // The cap taken away and set again: the three open count again.
    cap(&mut lab, None);
    cap(&mut lab, Some(3));
    assert!(!taken(&mut lab, 7, 44_000), "three open again");
    // Without the cap, ends of once-counted connections touch nothing.
    cap(&mut lab, None);
    round(&mut lab, &mut four[2..], |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    assert!(taken(&mut lab, 7, 45_000));
    assert!(taken(&mut lab, 7, 45_001));
    cap(&mut lab, Some(3));
    assert!(!taken(&mut lab, 7, 46_000), "43000, 45000 and 45001 open");
    lab.mem.engine.publish();
    assert_eq!(lab.mem.engine.vip_counters(0).refused_source_conns, 3);
}

/// `[access] deny`: a denied network's SYNs (and, with cookies, its ACKs
/// of cookies sent before) go unanswered, counted per VIP and as drops;
/// its connections open when it is denied are reset at once; another
/// address is untouched; taken off the list, it connects again.
#[test]
fn a_denied_network_gets_no_answer_and_its_open_connections_are_reset() {
    for cookies in [SynCookies::WhenFull, SynCookies::Always] {
        denied_network(cookies);
    }
}

/// [`a_denied_network_gets_no_answer_and_its_open_connections_are_reset`]
/// with handshakes kept by the engine or carried by SYN cookies.
fn denied_network(syn_cookies: SynCookies) {
    let mut lab = lab(TcpConfig {
        syn_cookies,
        ..TcpConfig::default()
    });
    // Counted as the VIP's.
    let e = &mut lab.mem.engine;
    e.set_vip_limits(DUT_IP, PLAIN, ListenLimits::default());
    // 100.64.0.0/29: clients 0 to 7.
    let deny = |nets: &[(Ipv4Addr, u8)]| {
        Arc::new(PrefixSet::new(nets.iter().map(|&(a, l)| (a.into(), l))))
    };
    let mut open_before = vec![Client::new(7, PLAIN), Client::new(9, PLAIN)];
    open(&mut lab, &mut open_before);
    assert!(open_before.iter().all(|c| !c.conn.reset));
    // A SYN answered before the deny, its ACK still to come.
    let mut half = vec![Client::new(6, PLAIN)];
    round(&mut lab, &mut half, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(half[0].conn.rcv_nxt.is_some());

    lab.mem.engine.set_deny(deny(&[(client_addr(0), 29)]));
    let out = lab.exchange_from(&[]);
    for c in &mut open_before {
        c.absorb(&out);
    }
    assert!(
        open_before[0].conn.reset,
        "{syn_cookies:?}: 7's connection reset"
    );
    assert!(!open_before[1].conn.reset, "9 is not denied");
    // Its new SYNs and the ACK of the earlier SYN-ACK: no answer at all.
    let mut after = [Client::new(7, PLAIN), Client::new(9, PLAIN)];
    after[0].conn.port = 41_000;
    after[1].conn.port = 41_000;
    let syns: Vec<(Ipv4Addr, Seg)> = after
        .iter_mut()
        .map(|c| (c.addr, c.conn.next(TcpControl::Syn, b"")))
        .chain([(half[0].addr, half[0].conn.next(TcpControl::None, b""))])
        .collect();
    let out = lab.exchange_from(&syns);
    let to = |a: Ipv4Addr| out.iter().filter(|(d, _)| *d == a).count();
    assert_eq!(to(client_addr(7)) + to(client_addr(6)), 0, "{out:?}");
    assert_eq!(to(client_addr(9)), 1, "9's SYN is answered");
    lab.mem.engine.publish();
    // With no cookies, the handshake the engine kept was reset too.
    let resets = if syn_cookies == SynCookies::Always {
        1
    } else {
        2
    };
    assert_eq!(lab.mem.engine.counters().tcp_denied_resets, resets);
    let vip = lab.mem.engine.vip_counters(0);
    let dropped = lab.mem.dropped(DropReason::SourceDenied);
    assert_eq!(
        (vip.refused_denied, dropped),
        (1, 2),
        "{syn_cookies:?}: 7's SYN counted, 6's ACK only dropped"
    );
    // Off the list: it connects again.
    lab.mem.engine.set_deny(deny(&[]));
    let mut again = vec![Client::new(7, PLAIN)];
    again[0].conn.port = 42_000;
    open(&mut lab, &mut again);
    assert!(again[0].conn.rcv_nxt.is_some() && !again[0].conn.reset);
}

/// `dpctl sources`' count on one engine: client addresses by connections
/// open (handshakes done and half-open apart), most first, for one VIP or
/// all; connections that ended are not counted.
#[test]
fn sources_count_each_clients_open_connections_most_first() {
    let mut lab = lab(TcpConfig::default());
    let from = clients;
    let mut five = from(5, 3, 41_000, PLAIN);
    five.extend(from(5, 1, 41_100, TLS));
    open(&mut lab, &mut five);
    let mut six = from(6, 1, 42_000, PLAIN);
    open(&mut lab, &mut six);
    let mut six_half = from(6, 2, 42_100, PLAIN);
    round(&mut lab, &mut six_half, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    let mut seven = from(7, 1, 43_000, PLAIN);
    open(&mut lab, &mut seven);
    round(&mut lab, &mut seven, |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    let count = |s: &dataplane::tcp::SourceCount| (s.source, s.established, s.half_open);
    let all: Vec<_> = lab.mem.engine.sources(None, 10).iter().map(count).collect();
    assert_eq!(
        all,
        [(client_addr(5).into(), 4, 0), (client_addr(6).into(), 1, 2)],
        "7's connection ended"
    );
    let plain: Vec<_> = lab
        .mem
        .engine
        .sources(Some((DUT_IP.into(), PLAIN)), 1)
        .iter()
        .map(count)
        .collect();
    assert_eq!(plain, [(client_addr(5).into(), 3, 0)], "the first of two");
}

/// A VIP's `allow` list: its connections from other networks are reset
/// as the list arrives, their SYNs go unanswered (counted as denied),
/// the other VIP takes them still, and with the list gone they connect
/// again.
#[test]
fn a_vip_allow_list_takes_only_its_networks() {
    let mut lab = lab(TcpConfig::default());
    let e = &mut lab.mem.engine;
    e.set_vip_limits(DUT_IP, PLAIN, ListenLimits::default());
    let mut before = vec![
        Client::new(7, PLAIN),
        Client::new(9, PLAIN),
        Client::new(7, TLS),
    ];
    before[2].conn.port = 41_500;
    open(&mut lab, &mut before);
    assert!(before.iter().all(|c| !c.conn.reset));
    let only_9 = PrefixSet::new([(client_addr(9).into(), 32)]);
    lab.mem
        .engine
        .set_vip_allow(DUT_IP, PLAIN, Some(Arc::new(only_9)));
    let out = lab.exchange_from(&[]);
    for c in &mut before {
        c.absorb(&out);
    }
    let reset: Vec<bool> = before.iter().map(|c| c.conn.reset).collect();
    assert_eq!(reset, [true, false, false], "7's to PLAIN only");
    let mut after = [
        Client::new(7, PLAIN),
        Client::new(9, PLAIN),
        Client::new(7, TLS),
    ];
    for (c, port) in after.iter_mut().zip([42_000, 42_001, 42_002]) {
        c.conn.port = port;
    }
    let syns: Vec<(Ipv4Addr, Seg)> = after
        .iter_mut()
        .map(|c| (c.addr, c.conn.next(TcpControl::Syn, b"")))
        .collect();
    let out = lab.exchange_from(&syns);
    for c in &mut after {
        c.absorb(&out);
    }
    let answered: Vec<bool> = after
        .iter()
        .map(|c| c.conn.rcv_nxt.is_some() || c.conn.reset)
        .collect();
    assert_eq!(answered, [false, true, true], "{out:?}");
    lab.mem.engine.publish();
    assert_eq!(lab.mem.engine.vip_counters(0).refused_denied, 1);
    assert_eq!(lab.mem.dropped(DropReason::SourceDenied), 1);
    assert_eq!(lab.mem.engine.counters().tcp_denied_resets, 1);
    // The list taken away: 7 connects again.
    lab.mem.engine.set_vip_allow(DUT_IP, PLAIN, None);
    let mut again = vec![Client::new(7, PLAIN)];
    again[0].conn.port = 43_000;
    open(&mut lab, &mut again);
    assert!(again[0].conn.rcv_nxt.is_some() && !again[0].conn.reset);
}

/// `conn list`'s view of an engine: the connections its listeners
/// accepted (half-open ones too; ended ones not), oldest first, with
/// their state, age, idle time and the client's window, picked by VIP
/// and by network, at most `max` (the oldest); `conn reset` resets only
/// the ones picked, counted, and the address may connect again.
#[test]
fn conn_list_shows_accepted_connections_oldest_first_and_reset_takes_only_those_picked() {
    use dataplane::tcp::{ConnFilter, State};
    let mut lab = lab(TcpConfig::default());
    let mut five = clients(5, 2, 41_000, PLAIN);
    open(&mut lab, &mut five);
    lab.advance(Duration::from_secs(2));
    let mut five_tls = clients(5, 1, 41_100, TLS);
    open(&mut lab, &mut five_tls);
    let mut seven = clients(7, 1, 43_000, PLAIN);
    open(&mut lab, &mut seven);
    round(&mut lab, &mut seven, |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    lab.advance(Duration::from_secs(1));
    let mut six_half = clients(6, 1, 42_000, PLAIN);
    round(&mut lab, &mut six_half, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    lab.advance(Duration::from_millis(500));
    // The first client closes its window.
    round(&mut lab, &mut five[..1], |c| {
        Some(c.conn.next(TcpControl::None, b"").window(0))
    });

    let view = |lab: &HostLab, filter, max| {
        let now = lab.mem.now;
        let list = lab.mem.engine.connections(filter, max, now);
        list.iter()
            .map(|(v, used)| {
                let tenths = |d: Duration| d.as_millis() / 100;
                let (port, state) = (v.client.port(), v.state);
                let age = (tenths(v.tcp.age), tenths(v.tcp.idle));
                (port, v.local.port(), state, age, used.role, used.waits_for)
            })
            .collect::<Vec<_>>()
    };
    let all = ConnFilter::default();
    assert_eq!(
        view(&lab, all, 10),
        [
            (
                41_000,
                PLAIN,
                State::Established,
                (35, 0),
                "http",
                "request"
            ),
            (
                41_001,
                PLAIN,
                State::Established,
                (35, 35),
                "http",
                "request"
            ),
            (
                41_100,
                TLS,
                State::Established,
                (15, 15),
                "tls",
                "handshake"
            ),
            (42_000, PLAIN, State::SynReceived, (5, 5), "", ""),
        ],
        "oldest first; 7's reset connection gone; no role before the handshake's end"
    );
    let now = lab.mem.now;
    let windows: Vec<u32> = (lab.mem.engine.connections(all, 2, now).iter())
        .map(|(v, _)| v.tcp.peer_window)
        .collect();
    assert_eq!(windows[0], 0, "the closed window");
    assert!(windows[1] > 0);
    let first_two = view(&lab, all, 2);
    assert_eq!(
        first_two.iter().map(|r| r.0).collect::<Vec<_>>(),
        [41_000, 41_001]
    );
    let from = |i: u32, len: u8| {
        let net = u32::from(client_addr(i)) & (u32::MAX << (32 - len));
        Some((Ipv4Addr::from(net).into(), len))
    };
    let six = ConnFilter {
        source: from(6, 32),
        ..all
    };
    assert_eq!(view(&lab, six, 10).len(), 1);
    assert_eq!(
        view(
            &lab,
            ConnFilter {
                source: from(5, 24),
                ..all
            },
            10
        )
        .len(),
        4
    );
    let tls = ConnFilter {
        local: Some((DUT_IP.into(), TLS)),
        ..all
    };
    assert_eq!(view(&lab, tls, 10).len(), 1);
    let half_open = ConnFilter {
        state: Some(State::SynReceived),
        ..all
    };
    let ports = |f| view(&lab, f, 10).iter().map(|r| r.0).collect::<Vec<_>>();
    assert_eq!(ports(half_open), [42_000]);
    let quiet = ConnFilter {
        idle_over: Some(Duration::from_secs(1)),
        ..all
    };
    assert_eq!(ports(quiet), [41_001, 41_100], "1.5 s and more");
    assert_eq!(State::from_name("syn_received"), Some(State::SynReceived));
    assert_eq!(State::from_name("Fin-Wait-2"), Some(State::FinWait2));
    assert_eq!(State::from_name("LISTEN"), None);

    // Reset 5's connections to the plain VIP: those two only.
    let picked = ConnFilter {
        local: Some((DUT_IP.into(), PLAIN)),
        source: from(5, 32),
        ..all
    };
    let now = lab.mem.now;
    assert_eq!(lab.mem.engine.reset_connections(picked, now), 2);
    let out = lab.exchange_from(&[]);
    for c in five.iter_mut().chain(&mut five_tls).chain(&mut six_half) {
        c.absorb(&out);
    }
    assert!(five.iter().all(|c| c.conn.reset));
    assert!(!five_tls[0].conn.reset && !six_half[0].conn.reset);
    lab.mem.engine.publish();
    assert_eq!(lab.mem.engine.counters().tcp_operator_resets, 2);
    assert_eq!(lab.mem.engine.counters().tcp_denied_resets, 0);
    let left: Vec<u16> = view(&lab, all, 10).iter().map(|r| r.0).collect();
    assert_eq!(left, [41_100, 42_000]);
    // Those idle a second or more: the TLS client that sent no hello.
    assert_eq!(lab.mem.engine.reset_connections(quiet, now), 1);
    lab.exchange_from(&[]);
    let left: Vec<u16> = view(&lab, all, 10).iter().map(|r| r.0).collect();
    assert_eq!(left, [42_000]);
    lab.mem.engine.publish();
    assert_eq!(lab.mem.engine.counters().tcp_operator_resets, 3);
    // Not refused after.
    let mut again = clients(5, 1, 41_200, PLAIN);
    open(&mut lab, &mut again);
    assert!(again[0].conn.rcv_nxt.is_some() && !again[0].conn.reset);
}

/// `conn list` at scale: 4,000 connections from 400 addresses opened over
/// 40 ms; the `max` oldest are as old as the first `max` of the whole
/// list, oldest first, and an address's filter finds its ten.
#[test]
fn conn_list_keeps_the_oldest_of_thousands() {
    use dataplane::tcp::ConnFilter;
    let mut lab = lab(TcpConfig::default());
    for step in 0..40u32 {
        let mut batch: Vec<Client> = (0..100u32)
            .map(|i| {
                let mut c = Client::new(100 + (step * 100 + i) % 400, PLAIN);
                c.conn.port = 20_000 + (step * 100 + i) as u16;
                c
            })
            .collect();
        open(&mut lab, &mut batch);
        lab.advance(Duration::from_millis(1));
    }
    let now = lab.mem.now;
    let all = ConnFilter::default();
    let whole = lab.mem.engine.connections(all, 10_000, now);
    assert_eq!(whole.len(), 4_000);
    assert!(whole.windows(2).all(|w| w[0].0.tcp.age >= w[1].0.tcp.age));
    for max in [1, 50, 999] {
        // Ties (a burst opens together) may go either way: the ages tell.
        let ages = |l: &[(dataplane::tcp::ConnView, _)]| {
            l.iter().map(|(v, _)| v.tcp.age).collect::<Vec<_>>()
        };
        let some = lab.mem.engine.connections(all, max, now);
        assert_eq!(ages(&some), ages(&whole[..max]), "the {max} oldest");
    }
    let one = ConnFilter {
        source: Some((client_addr(150).into(), 32)),
        ..all
    };
    assert_eq!(lab.mem.engine.connections(one, 50, now).len(), 10);
}

/// A wildcard VIP (`0.0.0.0:P`, under `[routing]`): `conn list --vip`,
/// `conn reset --vip` and `sources --vip` pick the connections it took,
/// and not those a VIP on its own address and the same port took. Before,
/// the filter was compared with each connection's local address, and a
/// wildcard VIP's picked nothing ("0 connections reset").
#[test]
fn a_wildcard_vips_connections_are_picked_by_its_address_and_port() {
    use dataplane::tcp::ConnFilter;
    const WILD: u16 = 9_443;
    let any: std::net::IpAddr = Ipv4Addr::UNSPECIFIED.into();
    let mut lab = lab(TcpConfig::default());
    lab.mem.engine.listen(any, WILD);
    lab.mem.engine.listen(any, PLAIN);
    let mut wild = clients(5, 2, 41_000, WILD);
    open(&mut lab, &mut wild);
    let mut own = clients(6, 1, 42_000, PLAIN);
    open(&mut lab, &mut own);
    // Served: before, the application found no VIP on the connection's
    // own address and aborted it as its handshake ended.
    let get = wild[0]
        .conn
        .next(TcpControl::Psh, b"GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n");
    let out = lab.exchange_from(&[(wild[0].addr, get)]);
    wild[0].absorb(&out);
    let text = String::from_utf8_lossy(&wild[0].conn.received);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.ends_with("012"),
        "{text:?}"
    );
    // `0.0.0.0` is no destination of ours.
    let mut to_any = HostConn::client(44_000, WILD, 9_000);
    let syn = to_any.next(TcpControl::Syn, b"");
    assert!(lab.exchange_to(Ipv4Addr::UNSPECIFIED, &[syn]).is_empty());
    let now = lab.mem.now;
    let at = |local| ConnFilter {
        local: Some(local),
        ..ConnFilter::default()
    };
    let list = lab.mem.engine.connections(at((any, WILD)), 10, now);
    let listeners: Vec<_> = list.iter().map(|(v, _)| v.listener).collect();
    assert_eq!(listeners, [(any, WILD).into(); 2]);
    assert!(list.iter().all(|(v, _)| v.local == (DUT_IP, WILD).into()));
    let own_list = lab
        .mem
        .engine
        .connections(at((DUT_IP.into(), PLAIN)), 10, now);
    assert_eq!(own_list.len(), 1, "the VIP on its own address");
    assert_eq!(own_list[0].0.listener, (DUT_IP, PLAIN).into());
    assert!(
        (lab.mem.engine.connections(at((any, PLAIN)), 10, now)).is_empty(),
        "the wildcard on the same port took none"
    );
    let counted: Vec<_> = (lab.mem.engine.sources(Some((any, WILD)), 10).iter())
        .map(|s| (s.source, s.established))
        .collect();
    assert_eq!(counted, [(client_addr(5).into(), 2)]);
    assert_eq!(lab.mem.engine.reset_connections(at((any, WILD)), now), 2);
    let out = lab.exchange_from(&[]);
    wild.iter_mut().chain(&mut own).for_each(|c| c.absorb(&out));
    assert!(wild.iter().all(|c| c.conn.reset) && !own[0].conn.reset);
}

/// `sources --refused`'s table of an engine: each source the limits
/// refused, at its VIP, by limit, most first: handshakes over a per-source
/// cap and the SYNs after them, a VIP's connection cap, a denied address's
/// SYNs; one VIP's alone when asked; and gone two windows later.
#[test]
fn refused_sources_name_who_each_limit_refused_at_each_vip() {
    let mut lab = lab(TcpConfig::default());
    let e = &mut lab.mem.engine;
    let cap = |conns, per_source| ListenLimits {
        max_conns: conns,
        per_source_conns: per_source,
        ..ListenLimits::default()
    };
    e.set_vip_limits(DUT_IP, PLAIN, cap(None, Some(1)));
    e.set_vip_limits(DUT_IP, TLS, cap(Some(1), None));
    e.set_deny(Arc::new(PrefixSet::new([(client_addr(9).into(), 32)])));
    // 7: three handshakes to PLAIN, two reset as they complete, then a SYN
    // reset at once.
    let mut seven = clients(7, 3, 41_000, PLAIN);
    open(&mut lab, &mut seven);
    let mut more = clients(7, 1, 41_100, PLAIN);
    round(&mut lab, &mut more, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    // 6: one connection to TLS, then two SYNs over its cap.
    let mut six = clients(6, 1, 42_000, TLS);
    open(&mut lab, &mut six);
    let mut over = clients(6, 2, 42_100, TLS);
    round(&mut lab, &mut over, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    // 9 is denied: five SYNs.
    let mut nine = clients(9, 5, 43_000, PLAIN);
    round(&mut lab, &mut nine, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    // Fifty SYNs spoofed from 11, never completed: no refusal (half-open
    // connections count against no per-source limit), so nothing for
    // `auto_deny` to hold against 11.
    let mut spoofed = clients(11, 50, 44_000, PLAIN);
    round(&mut lab, &mut spoofed, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });

    let row = |r: &dataplane::tcp::RefusedSource| {
        let counts = (r.conn_limit, r.source_rate, r.source_conns, r.denied);
        (r.source, r.vip, counts)
    };
    let now = lab.mem.now;
    let table = lab.mem.engine.refused_sources(None, 10, now);
    let (plain, tls) = (Some(0), Some(1));
    assert_eq!(
        table.iter().map(row).collect::<Vec<_>>(),
        [
            (client_addr(9).into(), plain, (0, 0, 0, 5)),
            (client_addr(7).into(), plain, (0, 0, 3, 0)),
            (client_addr(6).into(), tls, (2, 0, 0, 0)),
        ]
    );
    let at_tls = lab.mem.engine.refused_sources(tls, 10, now);
    assert_eq!(at_tls.iter().map(row).collect::<Vec<_>>(), [row(&table[2])]);
    let top = lab.mem.engine.refused_sources(None, 1, now);
    assert_eq!(top.len(), 1);
    // The next window still lists them; the one after does not.
    let window = dataplane::tcp::REFUSED_WINDOW;
    assert_eq!(
        lab.mem.engine.refused_sources(None, 10, now + window).len(),
        3
    );
    assert!(lab
        .mem
        .engine
        .refused_sources(None, 10, now + window * 2)
        .is_empty());
}

#[test]
fn a_client_hello_cut_into_one_byte_records_holds_a_bounded_buffer() {
    // 500 clients, each from its own address, send a ClientHello that
    // announces 2^16 - 1 bytes, cut into 1-byte TLS records: six bytes on
    // the wire, and held until the message is whole, for each byte of it.
    // A TLS session takes no more than `HANDSHAKE_HELD_MAX` of it before
    // refusing it (before that bound, 72 KB each here, 384 KiB in all).
    use crypto::session::{Failure, HANDSHAKE_HELD_MAX};
    const CLIENTS: u32 = 500;
    let mut lab = lab(TcpConfig::default());
    let mut clients: Vec<Client> = (0..CLIENTS).map(|i| Client::new(i, TLS)).collect();
    open(&mut lab, &mut clients);
    let mut hello = vec![1u8, 0, 0xff, 0xff];
    hello.resize(4 + 0xffff, 0);
    let wire: Vec<u8> = hello.iter().flat_map(|&b| [22, 3, 1, 0, 1, b]).collect();
    let mut most_held = 0;
    for segment in wire.chunks(1200).take(60) {
        round(&mut lab, &mut clients, |c| {
            (c.conn.received.is_empty() && !c.conn.reset)
                .then(|| c.conn.next(TcpControl::None, segment))
        });
        most_held = most_held.max(lab.mem.engine.tls_buffers().1);
    }
    // Each refused with the alert OpenSSL and BoringSSL send for a
    // handshake message over their limit, then closed.
    for c in &clients {
        assert_eq!(c.conn.received, [21, 3, 3, 0, 2, 2, 47], "{}", c.addr);
        assert_eq!(c.conn.fin_at, Some(7), "{}", c.addr);
    }
    let refused = lab.mem.engine.counters().tls_failure_reasons[Failure::HandshakeTooLarge.index()];
    assert_eq!(refused, u64::from(CLIENTS));
    let per_client = most_held / CLIENTS as usize;
    eprintln!("at most {most_held} bytes held by TLS sessions, {per_client} a client");
    assert!(
        per_client <= HANDSHAKE_HELD_MAX,
        "{per_client} bytes a client"
    );
    assert_eq!(lab.mem.engine.tls_buffers().1, 0, "nothing held after");
    let pool = lab.mem.engine.tcp().buffers();
    assert_eq!(pool.bytes_outside(), 0, "nothing left charged");
}

#[test]
fn what_tls_sessions_hold_counts_against_the_buffer_cap() {
    // 256 KiB: received bytes and new connections may use 224 KiB. Forty
    // TLS clients each send 8,000 bytes of a ClientHello record that
    // announces 16 KiB: their sessions take the bytes out of TCP's rings
    // (which go back to the pool) and hold them for the rest. Charged to
    // the cap, they leave no room for another connection; uncharged, the
    // rings were empty and a SYN was taken while 320 KB were held.
    let tcp = TcpConfig {
        buffer_memory: 256 * 1024,
        ..TcpConfig::default()
    };
    let receive_cap = 224 * 1024;
    let mut lab = lab(tcp);
    let mut clients: Vec<Client> = (0..40).map(|i| Client::new(i, TLS)).collect();
    open(&mut lab, &mut clients);
    let mut record = vec![22, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc];
    record.resize(8_000, 0);
    for piece in record.chunks(1_000) {
        round(&mut lab, &mut clients, |c| {
            Some(c.conn.next(TcpControl::None, piece))
        });
    }
    let pool = lab.mem.engine.tcp().buffers();
    let (outside, rings) = (pool.bytes_outside(), pool.bytes_in_use());
    let (_, tls_bytes) = lab.mem.engine.tls_buffers();
    eprintln!("TLS sessions hold {tls_bytes} bytes, charged {outside}; rings {rings}");
    assert_eq!(outside, tls_bytes, "all of it charged");
    assert!(
        rings + outside > receive_cap - 4096,
        "at the cap: {rings} + {outside}"
    );
    assert!(
        rings + outside <= receive_cap + 16 * 1024,
        "past the cap by no more than a session's next bytes: {rings} + {outside}"
    );
    assert!(pool.denied() > 0, "segments past the cap dropped");
    // No room for another connection.
    let mut late = vec![Client::new(500, TLS)];
    round(&mut lab, &mut late, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(late[0].conn.rcv_nxt.is_none(), "no SYN-ACK at the cap");
    assert_eq!(lab.mem.engine.tcp().counters().syn_no_memory, 1);
    // The handshake deadline frees them, and with them the charge.
    lab.advance(Duration::from_millis(10_100));
    drain_resets(&mut lab);
    let pool = lab.mem.engine.tcp().buffers();
    assert_eq!((pool.bytes_outside(), pool.bytes_in_use()), (0, 0));
    late[0].conn.snd_nxt -= 1;
    round(&mut lab, &mut late, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    assert!(late[0].conn.rcv_nxt.is_some(), "SYN-ACK once freed");
}

/// `n` readers ask for responses (1 MB) in one burst and read none, so
/// the send rings take the whole 256 KiB cap, with less than the smallest
/// ring left: the readers, each of whose requests took a receive ring for
/// a moment (past seven eighths of the cap they would be refused, so one
/// burst), and whose responses then took the room left. The `n` that
/// leaves no ring depends on what else holds one.
fn hold_the_whole_cap(lab: &mut HostLab, n: u32) -> Vec<Client> {
    let mut readers: Vec<Client> = (0..n).map(|i| Client::new(i, PLAIN)).collect();
    open(lab, &mut readers);
    round(lab, &mut readers, |c| {
        Some(c.conn.next(
            TcpControl::None,
            b"GET /bytes/1000000 HTTP/1.1\r\nHost: t\r\n\r\n",
        ))
    });
    let buffers = lab.mem.engine.tcp().buffers();
    let held = buffers.bytes_in_use() + buffers.bytes_outside();
    assert!(held + 4096 > 256 * 1024, "no ring left: {held} bytes held");
    readers
}

#[test]
fn a_proxy_header_with_no_ring_left_ends_the_pair_and_no_client_byte_goes() {
    // A pool that wants the PROXY protocol header; a client connects and
    // sends bytes that look like a header of its own while the backend
    // connection opens. Responses nobody reads then take the whole cap
    // (send rings may use all of it), so when the backend comes up there
    // is no ring for the header. The pair ends: were it kept, the client's
    // bytes would reach the backend first once memory came back, and the
    // backend would take the client's header for ours.
    const PP: u16 = 9100;
    const MEMBER: u16 = 9101;
    let tcp = TcpConfig {
        buffer_memory: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    let member = Member::new(SocketAddrV4::new(HOST_IP, MEMBER), 1, MemberState::Up);
    let mut pool = Pool::new("pp".into(), Balance::RoundRobin, vec![member]);
    pool.proxy_protocol = true;
    let pool = lab.mem.engine.add_pool(pool);
    lab.mem.engine.listen_pool(DUT_IP, PP, None, pool);
    let mut client = vec![Client::new(900, PP)];
    round(&mut lab, &mut client, |c| {
        Some(c.conn.next(TcpControl::Syn, b""))
    });
    // The handshake's end opens the backend connection.
    let forged = b"PROXY TCP4 192.0.2.1 10.78.0.1 1234 9100\r\nGET / HTTP/1.0\r\n\r\n";
    let ack = client[0].conn.next(TcpControl::None, b"");
    let seg = client[0].conn.next(TcpControl::Psh, forged);
    let out = lab.exchange_from(&[(client[0].addr, ack), (client[0].addr, seg)]);
    client[0].absorb(&out);
    let syn = out
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.dst_port == MEMBER && s.control == TcpControl::Syn)
        .expect("the backend connection opens")
        .clone();
    let mut readers = hold_the_whole_cap(&mut lab, 14);
    let mut backend = HostConn::accepted(&syn, 5_000);
    let synack = backend.next(TcpControl::Syn, b"");
    let out = lab.exchange_from(&[(HOST_IP, synack)]);
    client[0].absorb(&out);
    let to_backend: Vec<Seg> = out.into_iter().map(|(_, s)| s).collect();
    backend.absorb(&to_backend);
    assert!(backend.reset, "the backend connection is reset");
    assert!(client[0].conn.reset, "and the client's");
    assert_eq!(lab.mem.engine.counters().proxy_header_no_room, 1);
    // Memory comes back; the client sends more, and the backend, still
    // there, asks for more.
    round(&mut lab, &mut readers, |c| {
        Some(c.conn.next(TcpControl::Rst, b""))
    });
    let more = client[0].conn.next(TcpControl::Psh, b"\r\n");
    let ack = backend.next(TcpControl::None, b"");
    let out = lab.exchange_from(&[(client[0].addr, more), (HOST_IP, ack)]);
    let to_backend: Vec<Seg> = out.into_iter().map(|(_, s)| s).collect();
    backend.absorb(&to_backend);
    assert!(
        backend.received.is_empty(),
        "none of the client's bytes: {:?}",
        String::from_utf8_lossy(&backend.received)
    );
}

#[test]
fn a_byte_far_past_a_gap_pins_no_full_size_ring() {
    // Five hundred clients, each from its own address, send one byte at
    // the far end of the window the engine offers (256 KiB past what it
    // has), nothing before it. A ring holds bytes up to the furthest one,
    // so keeping each byte took a full-size ring, counted against the
    // buffer cap: 128 MiB for these, the whole default cap for about
    // 3,600 such clients. The bytes lie past what a connection that
    // received nothing in order may hold ahead of its gap: dropped
    // and counted.
    const CLIENTS: u32 = 500;
    let mut lab = lab(TcpConfig::default());
    let mut clients: Vec<Client> = (0..CLIENTS).map(|i| Client::new(i, PLAIN)).collect();
    open(&mut lab, &mut clients);
    let starts: Vec<u32> = clients.iter().map(|c| c.conn.snd_nxt).collect();
    round(&mut lab, &mut clients, |c| {
        c.conn.snd_nxt = c.conn.snd_nxt.wrapping_add(262_000);
        Some(c.conn.next(TcpControl::None, b"x"))
    });
    let buffers = lab.mem.engine.tcp().buffers();
    assert_eq!(buffers.bytes_in_use(), 0, "no ring held for them");
    assert_eq!(
        lab.mem.engine.tcp().counters().ooo_beyond_reach,
        u64::from(CLIENTS)
    );
    // A request whose end comes before its start (reordered within the
    // first ring) is still put together and answered.
    let request = b"GET /bytes/5 HTTP/1.1\r\nHost: t\r\n\r\n";
    for (c, start) in clients.iter_mut().zip(&starts) {
        c.conn.snd_nxt = start.wrapping_add(10);
    }
    round(&mut lab, &mut clients, |c| {
        Some(c.conn.next(TcpControl::None, &request[10..]))
    });
    assert!(
        lab.mem.engine.tcp().buffers().bytes_in_use() <= CLIENTS as usize * 4096,
        "one small ring each while the gap is open"
    );
    for (c, start) in clients.iter_mut().zip(&starts) {
        c.conn.snd_nxt = *start;
    }
    round(&mut lab, &mut clients, |c| {
        let head = c.conn.next(TcpControl::None, &request[..10]);
        c.conn.snd_nxt = c.conn.snd_nxt.wrapping_add(request.len() as u32 - 10);
        Some(head)
    });
    for c in &clients {
        let text = String::from_utf8_lossy(&c.conn.received);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
}

#[test]
fn a_health_check_with_no_ring_for_its_request_fails_no_member() {
    // An HTTP check's connection is up when responses nobody reads hold
    // the whole buffer cap (as in the test above): its request finds no
    // send ring. That says nothing of the member: the check is dropped
    // and counted as skipped, not failed (it timed out and, with
    // fall = 1, took a healthy member down: a client holding the engine
    // at its cap could empty a pool that way).
    use dataplane::app::health::{HealthCheck, HealthKind};
    const MEMBER: u16 = 9201;
    let tcp = TcpConfig {
        buffer_memory: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    let member = Member::new(SocketAddrV4::new(HOST_IP, MEMBER), 1, MemberState::Up);
    let mut pool = Pool::new("checked".into(), Balance::RoundRobin, vec![member]);
    pool.check = Some(HealthCheck {
        kind: HealthKind::Http,
        request: b"GET /healthz HTTP/1.0\r\n\r\n".to_vec(),
        expect: control::config::StatusRange::exact(200),
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(2),
        rise: 1,
        fall: 1,
    });
    lab.mem.engine.add_pool(pool);
    let syn = lab.wait_for_syn();
    assert_eq!(syn.dst_port, MEMBER);
    // No proxied client's ring here: one reader more.
    hold_the_whole_cap(&mut lab, 15);
    let mut target = HostConn::accepted(&syn, 7_000);
    let synack = target.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[synack]);
    target.absorb(&out);
    assert!(target.received.is_empty(), "no request");
    assert!(target.reset, "the check's connection is dropped");
    // Past the check's timeout: no failure, the member still up.
    lab.advance(Duration::from_secs(3));
    let c = lab.mem.engine.counters();
    assert_eq!(c.health_checks_skipped, 1);
    assert_eq!(
        (c.health_checks, c.health_failures, c.health_changes),
        (0, 0, 0)
    );
}

#[test]
fn a_full_connection_table_fails_no_member_check() {
    // Clients hold every connection the engine may have: a health check
    // finds no slot. That says nothing of the member: the check is
    // counted as skipped, not failed (it was failed as "no source port"
    // and, with fall = 1, took a healthy member down on every engine:
    // 32k idle proxied clients could empty a pool). Once a slot is free,
    // the check runs again at its interval.
    const MEMBER: u16 = 9202;
    const SLOTS: u32 = 8;
    let tcp = TcpConfig {
        max_conns: SLOTS as usize,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    let mut clients: Vec<Client> = (0..SLOTS).map(|i| Client::new(i, PLAIN)).collect();
    open(&mut lab, &mut clients);
    assert_eq!(lab.mem.engine.tcp().counters().active, u64::from(SLOTS));
    let pool = common::vips::checked_pool(
        "checked",
        MEMBER,
        Duration::from_secs(1),
        Duration::from_millis(500),
    );
    lab.mem.engine.add_pool(pool);
    let mut syns = 0;
    for _ in 0..5 {
        syns += lab
            .advance(Duration::from_secs(1))
            .iter()
            .filter(|s| s.control == TcpControl::Syn)
            .count();
    }
    assert_eq!(syns, 0, "no slot for a check");
    let c = lab.mem.engine.counters();
    assert!(c.health_checks_skipped >= 5, "{}", c.health_checks_skipped);
    assert_eq!(
        (c.health_checks, c.health_failures, c.health_changes),
        (0, 0, 0)
    );
    // A client leaves: the check runs within its interval.
    let rst = clients[0].conn.next(TcpControl::Rst, b"");
    lab.exchange_from(&[(clients[0].addr, rst)]);
    let syn = lab.wait_for_syn();
    assert_eq!(syn.dst_port, MEMBER);
}

#[test]
fn a_passed_tcp_check_is_reset_not_left_in_fin_wait() {
    // A member whose kernel completes the handshake while its application
    // never accepts: a FIN after the check would be acknowledged and never
    // answered, leaving each check in FIN-WAIT-2 for its timeout (60 per
    // member at a 1 s interval, counted against max_connections).
    use dataplane::app::health::{HealthCheck, HealthKind};
    const MEMBER: u16 = 9203;
    let mut lab = lab(TcpConfig::default());
    let member = Member::new(SocketAddrV4::new(HOST_IP, MEMBER), 1, MemberState::Up);
    let mut pool = Pool::new("checked".into(), Balance::RoundRobin, vec![member]);
    pool.check = Some(HealthCheck {
        kind: HealthKind::Tcp,
        request: Vec::new(),
        expect: control::config::StatusRange::exact(200),
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(2),
        rise: 1,
        fall: 1,
    });
    lab.mem.engine.add_pool(pool);
    let syn = lab.wait_for_syn();
    assert_eq!(syn.dst_port, MEMBER);
    let mut target = HostConn::accepted(&syn, 7_000);
    let synack = target.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[synack]);
    target.absorb(&out);
    assert!(target.reset, "the check's connection reset: {out:?}");
    assert_eq!(lab.mem.engine.tcp().counters().active, 0, "nothing held");
    let c = lab.mem.engine.counters();
    assert_eq!((c.health_checks, c.health_failures), (1, 0));
}

#[test]
fn senders_starved_at_the_cap_are_answered_once_memory_comes_back() {
    // Responses nobody reads take the whole cap. Readers whose requests
    // came in the same burst, later, found no send ring at all: nothing
    // of theirs was in flight, so no ACK would ever wake them, and they
    // waited for their idle timeout even once memory was back. Memory
    // comes back (the others reset): they are told they may write, and
    // are answered.
    let tcp = TcpConfig {
        buffer_memory: 256 * 1024,
        ..TcpConfig::default()
    };
    let mut lab = lab(tcp);
    let readers = hold_the_whole_cap(&mut lab, 15);
    let (mut starved, mut fed): (Vec<Client>, Vec<Client>) = readers
        .into_iter()
        .partition(|c| c.conn.received.is_empty());
    assert!(!starved.is_empty(), "some got no ring");
    let resets: Vec<(Ipv4Addr, Seg)> = fed
        .iter_mut()
        .map(|c| (c.addr, c.conn.next(TcpControl::Rst, b"")))
        .collect();
    let out = lab.exchange_from(&resets);
    for c in &mut starved {
        c.absorb(&out);
    }
    round(&mut lab, &mut starved, |c| {
        Some(c.conn.next(TcpControl::None, b""))
    });
    for c in &starved {
        let text = String::from_utf8_lossy(&c.conn.received);
        assert!(
            text.starts_with("HTTP/1.1 200"),
            "answered: {:?}",
            &text[..text.len().min(40)]
        );
    }
}
