//! Hostile bursts over the in-memory link: many connections at once, each
//! sending several segments in one receive burst, interleaved across
//! connections, so that TCP queues events of a connection it has already
//! released (the handshake-completing ACK and an RST at RCV.NXT in one
//! burst once aborted dpd: `Accepted` then `Closed` for the same id). Every
//! kind of connection is played: clients of plain, TLS and proxied VIPs,
//! backends and health-check targets. The engine must survive each burst,
//! deliver what a peer sent before its FIN or close_notify, and in the end
//! hold nothing: no connection, no VIP or member count.

mod common;

use std::net::SocketAddrV4;
use std::time::Duration;

use common::host::{HostConn, HostLab, Seg, HOST_IP};
use common::vips::{lab, BACKEND, PLAIN, PROXY, PROXY_TLS, TLS, VIPS};
use crypto::client::{LoadClientConfig, LoadClientSession};
use dataplane::app::health::{HealthCheck, HealthKind};
use dataplane::app::pool::{Balance, Member, MemberState, Pool};
use dataplane::app::responder::PATTERN;
use smoltcp::wire::TcpControl;

/// Health-checked members listen from here up.
const CHECKED: u16 = 9000;
const REQUEST: &[u8] = b"GET /bytes/100 HTTP/1.1\r\nHost: tlsdp\r\n\r\n";
/// Connections per pattern and VIP.
const EACH: usize = 8;

/// The responder's body of `GET /bytes/n`.
fn body(n: usize) -> String {
    PATTERN
        .iter()
        .cycle()
        .take(n)
        .map(|&b| char::from(b))
        .collect()
}

/// Runs the engine for simulated minutes (every retransmission given up,
/// TIME-WAIT over) and checks that nothing is held any more.
fn settle_and_check_nothing_held(lab: &mut HostLab) {
    for _ in 0..900 {
        lab.advance(Duration::from_secs(1));
        if lab.mem.engine.tcp().counters().active == 0 {
            // A connection retired to TIME-WAIT while transmitting is
            // `Closed` for the application in the next iteration.
            lab.advance(Duration::from_secs(1));
            break;
        }
    }
    let e = &lab.mem.engine;
    assert_eq!(e.tcp().counters().active, 0, "connections left");
    let outside = e.tcp().buffers().bytes_outside();
    assert_eq!(outside, 0, "TLS buffers left charged to the pool");
    for (slot, port) in VIPS.iter().enumerate() {
        let vc = e.vip_counters(slot as u16);
        assert_eq!(vc.active, 0, "VIP :{port} still counts open connections");
    }
    for pool in e.pools() {
        for m in &pool.members {
            assert_eq!(m.active, 0, "member {} still counts connections", m.addr);
        }
    }
}

/// One plain request, answered: the engine still serves.
fn still_serves(lab: &mut HostLab, port: u16) {
    let mut c = HostConn::client(port, PLAIN, 77_000);
    let syn = c.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[syn]);
    c.absorb(&out);
    let ack = c.next(TcpControl::None, b"");
    let get = c.next(TcpControl::Psh, b"GET /bytes/10 HTTP/1.0\r\n\r\n");
    let out = lab.exchange(&[ack, get]);
    c.absorb(&out);
    let text = String::from_utf8_lossy(&c.received);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("0123456789"), "{text}");
}

/// Interleaves per-connection segment lists into one burst: the first
/// half of the connections one segment of each in turn, the others each
/// connection's segments back to back.
fn interleave(per_conn: Vec<Vec<Seg>>) -> Vec<Seg> {
    let half = per_conn.len() / 2;
    let mut burst = Vec::new();
    let (spread, together) = per_conn.split_at(half);
    let longest = spread.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        burst.extend(spread.iter().filter_map(|segs| segs.get(i).cloned()));
    }
    burst.extend(together.iter().flatten().cloned());
    burst
}

/// What a client sends in one burst after the engine's SYN-ACK: the
/// handshake's ACK, then this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientBurst {
    /// An RST at RCV.NXT (the crash).
    Rst,
    Fin,
    DataRst,
    /// A request and FIN: the whole response must come before our FIN.
    DataFin,
    /// A segment after the RST: answered with a reset, nothing else.
    RstThenAck,
}

const CLIENT_BURSTS: [ClientBurst; 5] = [
    ClientBurst::Rst,
    ClientBurst::Fin,
    ClientBurst::DataRst,
    ClientBurst::DataFin,
    ClientBurst::RstThenAck,
];

fn client_segments(c: &mut HostConn, burst: ClientBurst) -> Vec<Seg> {
    let ack = c.next(TcpControl::None, b"");
    let rest = match burst {
        ClientBurst::Rst => vec![c.next(TcpControl::Rst, b"")],
        ClientBurst::Fin => vec![c.next(TcpControl::Fin, b"")],
        ClientBurst::DataRst => {
            vec![
                c.next(TcpControl::Psh, REQUEST),
                c.next(TcpControl::Rst, b""),
            ]
        }
        ClientBurst::DataFin => {
            vec![
                c.next(TcpControl::Psh, REQUEST),
                c.next(TcpControl::Fin, b""),
            ]
        }
        ClientBurst::RstThenAck => {
            vec![c.next(TcpControl::Rst, b""), c.next(TcpControl::None, b"")]
        }
    };
    std::iter::once(ack).chain(rest).collect()
}

#[test]
fn client_bursts_on_every_kind_of_vip() {
    let mut lab = lab();
    let mut port = 20_000;
    for vip in VIPS {
        // SYNs of every connection in one burst; SYN+RST ones end there.
        let mut conns: Vec<(ClientBurst, HostConn)> = Vec::new();
        let mut syns = Vec::new();
        for burst in CLIENT_BURSTS {
            for _ in 0..EACH {
                let mut c = HostConn::client(port, vip, 1_000 * u32::from(port));
                port += 1;
                syns.push(c.next(TcpControl::Syn, b""));
                conns.push((burst, c));
            }
        }
        for _ in 0..EACH {
            let mut c = HostConn::client(port, vip, 1_000 * u32::from(port));
            port += 1;
            syns.push(c.next(TcpControl::Syn, b""));
            syns.push(c.next(TcpControl::Rst, b""));
        }
        let out = lab.exchange(&syns);
        for (_, c) in &mut conns {
            c.absorb(&out);
            assert!(c.rcv_nxt.is_some(), ":{vip}: no SYN-ACK for {}", c.port);
        }
        assert_eq!(
            lab.mem.engine.tcp().counters().half_open,
            conns.len() as u64,
            ":{vip}: a SYN and an RST in one burst leave nothing half-open"
        );

        // Then every other connection's segments in one burst.
        let per_conn = conns
            .iter_mut()
            .map(|(b, c)| client_segments(c, *b))
            .collect();
        let out = lab.exchange(&interleave(per_conn));
        for (burst, c) in &mut conns {
            c.absorb(&out);
            if vip != PLAIN {
                continue;
            }
            match burst {
                ClientBurst::Fin => assert_eq!(c.fin_at, Some(0), "FIN answered with FIN"),
                ClientBurst::DataFin => {
                    let text = String::from_utf8_lossy(&c.received);
                    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                    assert!(text.ends_with(&body(100)), "the whole body: {text}");
                    assert_eq!(c.fin_at, Some(c.received.len()), "FIN after the response");
                }
                ClientBurst::RstThenAck => assert!(c.reset, "a segment after RST gets RST"),
                _ => {}
            }
        }
    }
    settle_and_check_nothing_held(&mut lab);
    still_serves(&mut lab, 60_000);
}

/// What the host, as the backend, answers the engine's SYN with, in one
/// burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendBurst {
    SynAckRst,
    /// The backend's whole answer and FIN before it heard the request:
    /// the client gets all of it, then FIN.
    SynAckDataFin,
    SynAckFin,
    /// Data, then RST: the client gets the data, then a reset.
    SynAckDataRst,
    Refused,
}

const BACKEND_BURSTS: [BackendBurst; 5] = [
    BackendBurst::SynAckRst,
    BackendBurst::SynAckDataFin,
    BackendBurst::SynAckFin,
    BackendBurst::SynAckDataRst,
    BackendBurst::Refused,
];

const REPLY: &[u8] = b"HTTP/1.0 200 OK\r\n\r\nfrom the backend";

#[test]
fn backend_bursts() {
    let mut lab = lab();
    // Clients connect and ask; each accepted one opens a backend connection.
    let n = BACKEND_BURSTS.len() * EACH;
    let mut clients: Vec<HostConn> = (0..n)
        .map(|i| HostConn::client(30_000 + i as u16, PROXY, 5_000 * i as u32))
        .collect();
    let syns: Vec<Seg> = clients
        .iter_mut()
        .map(|c| c.next(TcpControl::Syn, b""))
        .collect();
    let out = lab.exchange(&syns);
    let mut burst = Vec::new();
    for c in &mut clients {
        c.absorb(&out);
        burst.push(c.next(TcpControl::None, b""));
        burst.push(c.next(TcpControl::Psh, REQUEST));
    }
    let out = lab.exchange(&burst);
    let backend_syns: Vec<&Seg> = out
        .iter()
        .filter(|s| s.dst_port == BACKEND && s.control == TcpControl::Syn)
        .collect();
    assert_eq!(backend_syns.len(), n, "one backend connection per client");

    // Every backend answers in one burst, a pattern per connection.
    let per_conn = backend_syns
        .iter()
        .enumerate()
        .map(|(i, syn)| {
            let mut b = HostConn::accepted(syn, 900_000 + 1_000 * i as u32);
            let synack = b.next(TcpControl::Syn, b"");
            let rest = match BACKEND_BURSTS[i % BACKEND_BURSTS.len()] {
                BackendBurst::SynAckRst => vec![b.next(TcpControl::Rst, b"")],
                BackendBurst::SynAckDataFin => {
                    vec![b.next(TcpControl::Psh, REPLY), b.next(TcpControl::Fin, b"")]
                }
                BackendBurst::SynAckFin => vec![b.next(TcpControl::Fin, b"")],
                BackendBurst::SynAckDataRst => {
                    vec![b.next(TcpControl::Psh, REPLY), b.next(TcpControl::Rst, b"")]
                }
                BackendBurst::Refused => {
                    return vec![Seg::to(syn.src_port, BACKEND, 0, Some(syn.end()))
                        .with(TcpControl::Rst, b"")]
                }
            };
            std::iter::once(synack).chain(rest).collect()
        })
        .collect();
    let out = lab.exchange(&interleave(per_conn));
    for c in &mut clients {
        c.absorb(&out);
    }
    // The clients acknowledge what they got (a client whose backend reset
    // after its answer is reset once the answer is delivered).
    let acks: Vec<Seg> = clients
        .iter_mut()
        .filter(|c| !c.reset)
        .map(|c| c.next(TcpControl::None, b""))
        .collect();
    let out = lab.exchange(&acks);
    for c in &mut clients {
        c.absorb(&out);
    }
    let cut = clients
        .iter()
        .filter(|c| c.received == REPLY && c.reset && c.fin_at.is_none())
        .count();
    assert_eq!(
        cut, EACH,
        "an answer cut by a reset: all of it, then a reset"
    );
    let whole = clients
        .iter()
        .filter(|c| c.received == REPLY && c.fin_at == Some(REPLY.len()))
        .count();
    let fin_only = clients
        .iter()
        .filter(|c| c.received.is_empty() && c.fin_at == Some(0) && !c.reset)
        .count();
    let reset = clients.iter().filter(|c| c.reset).count();
    assert_eq!(
        whole, EACH,
        "the backend's answer then FIN reaches its client"
    );
    assert_eq!(fin_only, EACH, "a backend's FIN reaches its client");
    assert_eq!(
        reset,
        3 * EACH,
        "clients whose backend reset or refused (the only member) are reset"
    );
    settle_and_check_nothing_held(&mut lab);
    still_serves(&mut lab, 60_001);
}

/// What a health-check target answers in one burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckBurst {
    /// SYN-ACK, a 200 status line and FIN: the check passes.
    Pass,
    SynAckRst,
    SynAckFin,
    /// SYN-ACK, a status line that is not HTTP, FIN.
    Garbage,
    SynAckDataRst,
    Refused,
}

const CHECK_BURSTS: [CheckBurst; 6] = [
    CheckBurst::Pass,
    CheckBurst::SynAckRst,
    CheckBurst::SynAckFin,
    CheckBurst::Garbage,
    CheckBurst::SynAckDataRst,
    CheckBurst::Refused,
];

#[test]
fn health_check_bursts() {
    let mut lab = HostLab::new();
    let members = (0..2 * CHECK_BURSTS.len() as u16)
        .map(|i| Member::new(SocketAddrV4::new(HOST_IP, CHECKED + i), 1, MemberState::Up))
        .collect();
    let mut pool = Pool::new("checked".into(), Balance::RoundRobin, members);
    pool.check = Some(HealthCheck {
        kind: HealthKind::Http,
        request: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        expect: control::config::StatusRange::exact(200),
        interval: Duration::from_millis(500),
        timeout: Duration::from_millis(200),
        rise: 1,
        fall: 1,
    });
    lab.mem.engine.add_pool(pool);
    let per_round = 2 * CHECK_BURSTS.len();
    for round in 0..3u64 {
        let mut syns = Vec::new();
        for _ in 0..600 {
            syns.extend(
                lab.advance(Duration::from_millis(1))
                    .into_iter()
                    .filter(|s| s.control == TcpControl::Syn),
            );
            if syns.len() == per_round {
                break;
            }
        }
        assert_eq!(syns.len(), per_round, "round {round}: every member checked");
        let before = lab.mem.engine.counters().health_checks;
        let per_conn = syns
            .iter()
            .map(|syn| {
                let pattern =
                    CHECK_BURSTS[usize::from(syn.dst_port - CHECKED) % CHECK_BURSTS.len()];
                let mut t = HostConn::accepted(syn, 40_000);
                let synack = t.next(TcpControl::Syn, b"");
                let rest = match pattern {
                    CheckBurst::Pass => vec![
                        t.next(TcpControl::Psh, b"HTTP/1.0 200 OK\r\n\r\n"),
                        t.next(TcpControl::Fin, b""),
                    ],
                    CheckBurst::SynAckRst => vec![t.next(TcpControl::Rst, b"")],
                    CheckBurst::SynAckFin => vec![t.next(TcpControl::Fin, b"")],
                    CheckBurst::Garbage => vec![
                        t.next(TcpControl::Psh, b"SSH-2.0-OpenSSH_9.2\r\n"),
                        t.next(TcpControl::Fin, b""),
                    ],
                    CheckBurst::SynAckDataRst => vec![
                        t.next(TcpControl::Psh, b"HTTP/1.0 200 OK\r\n\r\n"),
                        t.next(TcpControl::Rst, b""),
                    ],
                    CheckBurst::Refused => {
                        return vec![Seg::to(syn.src_port, syn.dst_port, 0, Some(syn.end()))
                            .with(TcpControl::Rst, b"")]
                    }
                };
                std::iter::once(synack).chain(rest).collect()
            })
            .collect();
        lab.exchange(&interleave(per_conn));
        // Results come in the burst or at the check's timeout.
        lab.advance(Duration::from_millis(250));
        let e = &lab.mem.engine;
        assert_eq!(
            e.counters().health_checks - before,
            per_round as u64,
            "round {round}: one result per check"
        );
        for m in &e.pools()[0].members {
            let pattern = CHECK_BURSTS[usize::from(m.addr.port() - CHECKED) % CHECK_BURSTS.len()];
            match pattern {
                CheckBurst::Pass => assert!(m.health.healthy, "{} passes", m.addr),
                CheckBurst::SynAckDataRst => {}
                _ => assert!(!m.health.healthy, "{} ({pattern:?}) fails", m.addr),
            }
        }
    }
}

/// A TLS client over a [`HostConn`].
struct TlsClient {
    tcp: HostConn,
    tls: LoadClientSession,
    /// Received TCP bytes already given to the TLS session.
    fed: usize,
    plain: Vec<u8>,
}

impl TlsClient {
    fn new(cfg: &LoadClientConfig, port: u16, vip: u16) -> Self {
        Self {
            tcp: HostConn::client(port, vip, 3_000 * u32::from(port)),
            tls: LoadClientSession::new(cfg, "tlsdp.test").unwrap(),
            fed: 0,
            plain: Vec::new(),
        }
    }

    /// Takes what the engine sent, through TCP and TLS.
    fn absorb(&mut self, segs: &[Seg]) {
        self.tcp.absorb(segs);
        while self.fed < self.tcp.received.len() {
            let n = self
                .tls
                .receive(&self.tcp.received[self.fed..])
                .expect("the engine's TLS is valid");
            self.fed += n;
            let mut buf = [0u8; 4096];
            loop {
                let k = self.tls.read_plain(&mut buf);
                if k == 0 {
                    break;
                }
                self.plain.extend_from_slice(&buf[..k]);
            }
            if n == 0 {
                break;
            }
        }
    }

    /// Segments carrying what the TLS session has to send.
    fn tls_segments(&mut self) -> Vec<Seg> {
        let mut bytes = Vec::new();
        self.tls.take_tls(&mut bytes);
        bytes
            .chunks(1400)
            .map(|chunk| self.tcp.next(TcpControl::Psh, chunk))
            .collect()
    }
}

/// What a TLS client sends with its last handshake flight, in one burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsBurst {
    FinishedCloseNotifyFin,
    FinishedRst,
    /// A request with the Finished, then close_notify and FIN: the whole
    /// response must still come (TLS half-close).
    FinishedRequestCloseFin,
    /// ClientHello and FIN together: given up mid-handshake.
    HelloFin,
}

const TLS_BURSTS: [TlsBurst; 4] = [
    TlsBurst::FinishedCloseNotifyFin,
    TlsBurst::FinishedRst,
    TlsBurst::FinishedRequestCloseFin,
    TlsBurst::HelloFin,
];

#[test]
fn tls_handshake_end_and_close_in_one_burst() {
    let mut lab = lab();
    let cfg = LoadClientConfig::new(true, true);
    let mut port = 50_000;
    for vip in [TLS, PROXY_TLS] {
        let mut clients: Vec<(TlsBurst, TlsClient)> = Vec::new();
        for burst in TLS_BURSTS {
            for _ in 0..EACH {
                clients.push((burst, TlsClient::new(&cfg, port, vip)));
                port += 1;
            }
        }
        let syns: Vec<Seg> = clients
            .iter_mut()
            .map(|(_, c)| c.tcp.next(TcpControl::Syn, b""))
            .collect();
        let out = lab.exchange(&syns);
        // The ACK and the ClientHello; HelloFin clients give up there.
        let mut per_conn = Vec::new();
        for (burst, c) in &mut clients {
            c.absorb(&out);
            let mut segs = vec![c.tcp.next(TcpControl::None, b"")];
            segs.extend(c.tls_segments());
            if *burst == TlsBurst::HelloFin {
                segs.push(c.tcp.next(TcpControl::Fin, b""));
            }
            per_conn.push(segs);
        }
        let out = lab.exchange(&interleave(per_conn));
        let mut per_conn = Vec::new();
        for (burst, c) in &mut clients {
            c.absorb(&out);
            if *burst == TlsBurst::HelloFin {
                continue;
            }
            assert!(!c.tls.is_handshaking(), ":{vip}: the server's flight came");
            if *burst == TlsBurst::FinishedRequestCloseFin {
                c.tls.write_plain(REQUEST);
            }
            let mut segs = c.tls_segments();
            match burst {
                TlsBurst::FinishedRst => segs.push(c.tcp.next(TcpControl::Rst, b"")),
                _ => {
                    c.tls.close_notify();
                    segs.extend(c.tls_segments());
                    segs.push(c.tcp.next(TcpControl::Fin, b""));
                }
            }
            per_conn.push(segs);
        }
        let out = lab.exchange(&interleave(per_conn));
        for (burst, c) in &mut clients {
            c.absorb(&out);
            if vip == TLS && *burst == TlsBurst::FinishedRequestCloseFin {
                let text = String::from_utf8_lossy(&c.plain);
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                assert!(text.ends_with(&body(100)), "the whole body: {text}");
                assert!(c.tcp.fin_at.is_some(), "FIN after the response");
            }
        }
    }
    settle_and_check_nothing_held(&mut lab);
    still_serves(&mut lab, 60_002);
}

/// A client from `port` (ISS `iss`) whose SYN to `vip` the engine
/// answered; the handshake's ACK not sent yet.
fn syn_acked(lab: &mut HostLab, port: u16, vip: u16, iss: u32) -> HostConn {
    let mut c = HostConn::client(port, vip, iss);
    let syn = c.next(TcpControl::Syn, b"");
    c.absorb(&lab.exchange(&[syn]));
    c
}

/// The engine's SYN to the pool's member in `out`.
fn backend_syn(out: &[Seg]) -> &Seg {
    out.iter()
        .find(|s| s.dst_port == BACKEND && s.control == TcpControl::Syn)
        .expect("the backend connection opens")
}

/// A TLS 1.3 client from `port` on the proxied TLS VIP, its Finished not
/// sent yet (the server's flight came).
fn tls_client_at_finished(lab: &mut HostLab, port: u16) -> TlsClient {
    tls_client_at_finished_on(lab, port, PROXY_TLS)
}

/// [`tls_client_at_finished`] on VIP port `vip`.
fn tls_client_at_finished_on(lab: &mut HostLab, port: u16, vip: u16) -> TlsClient {
    let cfg = LoadClientConfig::new(true, true);
    let mut c = TlsClient::new(&cfg, port, vip);
    let syn = c.tcp.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[syn]);
    c.absorb(&out);
    let mut hello = vec![c.tcp.next(TcpControl::None, b"")];
    hello.extend(c.tls_segments());
    let out = lab.exchange(&hello);
    c.absorb(&out);
    assert!(!c.tls.is_handshaking(), "the server's flight came");
    c
}

/// A TLS 1.3 client from `port` on the proxied TLS VIP: its handshake
/// and a request, and the backend connection the engine opens for it,
/// accepted (ISS 700,000) with the request received.
fn tls_proxied_request(lab: &mut HostLab, port: u16) -> (TlsClient, HostConn) {
    let mut c = tls_client_at_finished(lab, port);
    c.tls.write_plain(REQUEST);
    let finished = c.tls_segments();
    let out = lab.exchange(&finished);
    let syn = backend_syn(&out);
    let mut backend = HostConn::accepted(syn, 700_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack]));
    assert_eq!(backend.received, REQUEST);
    (c, backend)
}

/// A TLS client of a proxied VIP sends a record that fails to open (its
/// request cut there), gets the engine's alert and FIN, and closes too:
/// the backend is reset, not closed, so the cut request never looks
/// whole. Before, the client's clean TCP close passed on as a FIN.
#[test]
fn a_tls_client_whose_record_fails_resets_its_backend() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_005);
    let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x40];
    forged.extend((0..0x40).map(|i| i as u8));
    let bad = c.tcp.next(TcpControl::Psh, &forged);
    let out = lab.exchange(&[bad]);
    c.tcp.absorb(&out);
    backend.absorb(&out);
    assert!(c.tcp.fin_at.is_some(), "the engine's alert, then FIN");
    let fin = c.tcp.next(TcpControl::Fin, b"");
    let out = lab.exchange(&[fin]);
    backend.absorb(&out);
    ack_until_reset(&mut lab, &mut backend, 20);
    assert!(backend.reset, "the backend is reset");
    assert_eq!(backend.fin_at, None, "no FIN: the request was cut");
    assert_eq!(backend.received, REQUEST, "nothing of the bad record");
    settle_and_check_nothing_held(&mut lab);
}

/// A TLS client of a proxied VIP sends a record, the start of another
/// and its FIN in one segment: no more bytes can complete the second, so
/// the stream was cut. The backend gets the first record's bytes, then a
/// reset (not a FIN: the cut stream never looks whole), the client our
/// FIN, counted as a TLS failure. Before, the cut record's bytes waited
/// in the client's ring forever, the FIN was never passed on, and the
/// pair was held to the idle timeout.
#[test]
fn a_tls_client_record_cut_by_its_fin_resets_its_backend_at_once() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_006);
    let failures = lab.mem.engine.counters().tls_failures;
    c.tls.write_plain(b"MORE");
    let mut bytes = Vec::new();
    c.tls.take_tls(&mut bytes);
    bytes.extend_from_slice(&[0x17, 0x03, 0x03, 0x00, 0x40, 1, 2, 3, 4, 5, 6, 7]);
    let fin = c.tcp.next(TcpControl::Fin, &bytes);
    let out = lab.exchange(&[fin]);
    c.tcp.absorb(&out);
    backend.absorb(&out);
    assert!(c.tcp.fin_at.is_some(), "the engine closes too");
    let last = c.tcp.next(TcpControl::None, b"");
    backend.absorb(&lab.exchange(&[last]));
    ack_until_reset(&mut lab, &mut backend, 5);
    assert!(backend.reset, "the backend is reset");
    assert_eq!(backend.fin_at, None, "no FIN: the stream was cut");
    let mut want = REQUEST.to_vec();
    want.extend_from_slice(b"MORE");
    assert_eq!(
        backend.received, want,
        "the whole record before the cut one"
    );
    lab.mem.engine.publish();
    assert_eq!(lab.mem.engine.counters().tls_failures, failures + 1);
    settle_and_check_nothing_held(&mut lab);
}

/// As [`a_tls_client_record_cut_by_its_fin_resets_its_backend_at_once`],
/// the cut record in the segment of the client's Finished: the session
/// holds its start from the handshake, not the TCP ring. Before, the
/// start was dropped unseen and the backend got a FIN: the cut request
/// looked whole.
#[test]
fn a_record_cut_by_the_fin_behind_the_finished_resets_the_backend() {
    let mut lab = lab();
    let mut c = tls_client_at_finished(&mut lab, 51_007);
    c.tls.write_plain(REQUEST);
    let mut bytes = Vec::new();
    c.tls.take_tls(&mut bytes);
    bytes.extend_from_slice(&[0x17, 0x03, 0x03, 0x00, 0x40, 1, 2, 3, 4, 5, 6, 7]);
    let fin = c.tcp.next(TcpControl::Fin, &bytes);
    let out = lab.exchange(&[fin]);
    c.tcp.absorb(&out);
    let syn = backend_syn(&out);
    let mut backend = HostConn::accepted(syn, 710_000);
    let synack = backend.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[synack]);
    backend.absorb(&out);
    c.tcp.absorb(&out);
    assert!(c.tcp.fin_at.is_some(), "the engine closes the client too");
    let last = c.tcp.next(TcpControl::None, b"");
    backend.absorb(&lab.exchange(&[last]));
    ack_until_reset(&mut lab, &mut backend, 5);
    assert_eq!(backend.received, REQUEST, "the whole record before the cut");
    assert!(backend.reset, "the backend is reset");
    assert_eq!(backend.fin_at, None, "no FIN: the stream was cut");
    settle_and_check_nothing_held(&mut lab);
}

/// Bytes after the client's close_notify, in the flight of its Finished
/// and request, with its FIN: nothing after close_notify counts, so the
/// backend gets the request, then a FIN (never a reset: nothing was cut).
#[test]
fn bytes_after_close_notify_behind_the_finished_cut_nothing() {
    let mut lab = lab();
    let mut c = tls_client_at_finished(&mut lab, 51_008);
    c.tls.write_plain(REQUEST);
    c.tls.close_notify();
    let mut bytes = Vec::new();
    c.tls.take_tls(&mut bytes);
    bytes.extend_from_slice(&[0x17, 0x03, 0x03, 0x00, 0x40, 1, 2, 3]);
    let fin = c.tcp.next(TcpControl::Fin, &bytes);
    let out = lab.exchange(&[fin]);
    c.tcp.absorb(&out);
    let syn = backend_syn(&out);
    let mut backend = HostConn::accepted(syn, 720_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack]));
    let ack = backend.next(TcpControl::None, b"");
    backend.absorb(&lab.exchange(&[ack]));
    assert_eq!(backend.received, REQUEST);
    assert_eq!(backend.fin_at, Some(REQUEST.len()), "the FIN passed on");
    assert!(!backend.reset);
    // The backend answers and closes: the client gets it all.
    let answer = backend.next(TcpControl::Psh, b"HTTP/1.0 200 OK\r\n\r\nhi");
    let out = lab.exchange(&[answer]);
    c.absorb(&out);
    let fin = backend.next(TcpControl::Fin, b"");
    let out = lab.exchange(&[fin]);
    c.absorb(&out);
    assert!(
        c.plain.ends_with(b"hi"),
        "{:?}",
        String::from_utf8_lossy(&c.plain)
    );
    assert!(!c.tcp.reset);
    settle_and_check_nothing_held(&mut lab);
}

/// The backend acknowledges what it has, at most `rounds` times, until
/// the engine resets it.
fn ack_until_reset(lab: &mut HostLab, backend: &mut HostConn, rounds: usize) {
    for _ in 0..rounds {
        if backend.reset {
            return;
        }
        let ack = backend.next(TcpControl::None, b"");
        backend.absorb(&lab.exchange(&[ack]));
    }
}

/// A TLS client of a proxied VIP sends records and resets in one burst:
/// the backend gets every byte those records carried, then a reset.
#[test]
fn a_tls_client_reset_after_records_delivers_their_bytes_to_the_backend() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_000);

    // More than the engine decrypts ahead of its backend (32 KiB), in
    // records, and the reset after them.
    let upload: Vec<u8> = (0..40_000).map(|i| (i % 251) as u8).collect();
    c.tls.write_plain(&upload);
    let mut burst = c.tls_segments();
    burst.push(c.tcp.next(TcpControl::Rst, b""));
    backend.absorb(&lab.exchange(&burst));
    ack_until_reset(&mut lab, &mut backend, 100);
    assert_eq!(
        backend.received.len() - REQUEST.len(),
        upload.len(),
        "every byte before the reset"
    );
    assert!(backend.received[REQUEST.len()..] == upload[..], "in order");
    assert!(backend.reset, "then a reset");
    assert_eq!(backend.fin_at, None, "no FIN: the stream was cut");
    settle_and_check_nothing_held(&mut lab);
}

/// A TLS client uploads to a backend that acknowledges nothing until the
/// engine holds all it can for the pair (the backend's send ring, the
/// decrypted bytes, the client's receive ring), then resets: once the
/// backend acknowledges again it gets the bytes of every whole record
/// the engine accepted, then a reset.
#[test]
fn a_tls_client_reset_with_the_backend_behind_still_delivers_every_record() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_001);

    // Rounds of one 8,000-byte record each until the engine stops taking
    // them; the backend listens without acknowledging.
    const ROUND: usize = 8_000;
    let upload: Vec<u8> = (0..4_000_000).map(|i| (i % 251) as u8).collect();
    let mut whole_rounds = 0;
    loop {
        assert!((whole_rounds + 1) * ROUND <= upload.len(), "never filled");
        let start = c.tcp.snd_nxt;
        c.tls
            .write_plain(&upload[whole_rounds * ROUND..(whole_rounds + 1) * ROUND]);
        let segs = c.tls_segments();
        let out = lab.exchange(&segs);
        backend.absorb(&out);
        let acked = out
            .iter()
            .filter(|s| s.dst_port == c.tcp.port)
            .filter_map(|s| s.ack)
            .max_by_key(|a| a.wrapping_sub(start))
            .unwrap_or(start);
        if acked != c.tcp.snd_nxt {
            c.tcp.snd_nxt = acked; // the rest was not taken
            break;
        }
        whole_rounds += 1;
    }
    let before = backend.received.len() - REQUEST.len();
    assert!(before < whole_rounds * ROUND, "the backend is behind");
    let rst = c.tcp.next(TcpControl::Rst, b"");
    backend.absorb(&lab.exchange(&[rst]));
    ack_until_reset(&mut lab, &mut backend, 400);
    let got = &backend.received[REQUEST.len()..];
    assert!(
        got.len() >= whole_rounds * ROUND,
        "every whole record: {} of {} bytes ({before} before the reset)",
        got.len(),
        whole_rounds * ROUND
    );
    assert!(got == &upload[..got.len()], "in order");
    assert!(backend.reset, "then a reset");
    settle_and_check_nothing_held(&mut lab);
    assert_eq!(
        lab.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// The backend answers while the TLS client takes the engine's records
/// but acknowledges none, until the engine takes no more (the client's
/// send ring, the backend's receive ring): what the engine took, in
/// order.
fn backend_answers_until_full(
    lab: &mut HostLab,
    c: &mut TlsClient,
    backend: &mut HostConn,
) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut stalled = 0;
    while stalled < 3 {
        let start = backend.snd_nxt;
        let burst: Vec<Seg> = (0..16)
            .map(|_| {
                let chunk: Vec<u8> = (answer.len()..answer.len() + 1000)
                    .map(|i| (i % 241) as u8)
                    .collect();
                answer.extend_from_slice(&chunk);
                backend.next(TcpControl::Psh, &chunk)
            })
            .collect();
        let out = lab.exchange(&burst);
        c.absorb(&out);
        let acked = out
            .iter()
            .filter(|s| s.dst_port == BACKEND)
            .filter_map(|s| s.ack)
            .max_by_key(|a| a.wrapping_sub(start))
            .unwrap_or(start);
        let took = acked.wrapping_sub(start) as usize;
        answer.truncate(answer.len() - 16 * 1000 + took);
        backend.snd_nxt = acked;
        stalled = if took == 0 { stalled + 1 } else { 0 };
        assert!(answer.len() < 64 << 20, "the engine's buffers never filled");
    }
    answer
}

/// The TLS client acknowledges what it got, round after round, until the
/// engine has ended its connection (a FIN or a reset).
fn client_acks_until_the_end(lab: &mut HostLab, c: &mut TlsClient) {
    for _ in 0..400 {
        if c.tcp.reset || c.tcp.fin_at.is_some() {
            return;
        }
        let ack = c.tcp.next(TcpControl::None, b"");
        let out = lab.exchange(&[ack]);
        c.absorb(&out);
    }
}

/// A backend answers a TLS client and resets, the answer and the reset in
/// one burst: the client gets every byte of it, sealed, then a reset.
/// Before, the backend was gone by the time the client's side read its
/// bytes, and the client got only the reset.
#[test]
fn a_backend_reset_after_data_reaches_a_tls_client_whole_then_a_reset() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_002);
    let answer: Vec<u8> = (0..3000).map(|i| (i % 241) as u8).collect();
    let mut burst: Vec<Seg> = answer
        .chunks(1000)
        .map(|chunk| backend.next(TcpControl::Psh, chunk))
        .collect();
    burst.push(backend.next(TcpControl::Rst, b""));
    let out = lab.exchange(&burst);
    c.absorb(&out);
    client_acks_until_the_end(&mut lab, &mut c);
    assert!(
        c.plain == answer,
        "every byte: {} of {}",
        c.plain.len(),
        answer.len()
    );
    assert!(c.tcp.reset, "then a reset");
    assert!(!c.tls.peer_closed(), "no close_notify: the answer was cut");
    settle_and_check_nothing_held(&mut lab);
}

/// A backend answers a TLS client that reads nothing until the engine
/// holds all it can for the pair, then resets: once the client
/// acknowledges again it gets every byte the engine took, then a reset.
#[test]
fn a_backend_reset_with_a_tls_client_behind_still_delivers_every_byte() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_003);
    let answer = backend_answers_until_full(&mut lab, &mut c, &mut backend);
    assert!(c.plain.len() < answer.len(), "the client is behind");
    let rst = backend.next(TcpControl::Rst, b"");
    c.absorb(&lab.exchange(&[rst]));
    client_acks_until_the_end(&mut lab, &mut c);
    assert_eq!(c.plain.len(), answer.len(), "every byte the engine took");
    assert!(c.plain == answer, "in order");
    assert!(c.tcp.reset, "then a reset");
    assert!(!c.tls.peer_closed(), "no close_notify: the answer was cut");
    settle_and_check_nothing_held(&mut lab);
}

/// A backend answers a TLS client that reads nothing until the engine
/// holds all it can for the pair, then closes; the client sends
/// close_notify and FIN, the engine closes the backend connection and the
/// backend acknowledges (its connection ends with bytes unread): the
/// client still gets every byte, then close_notify and a FIN.
#[test]
fn a_backend_that_closed_with_a_tls_client_behind_still_delivers_every_byte() {
    let mut lab = lab();
    let (mut c, mut backend) = tls_proxied_request(&mut lab, 51_004);
    let answer = backend_answers_until_full(&mut lab, &mut c, &mut backend);
    let ack = c.tcp.next(TcpControl::None, b"");
    let out = lab.exchange(&[ack]);
    c.absorb(&out);
    let fin = backend.next(TcpControl::Fin, b"");
    let out = lab.exchange(&[fin]);
    c.absorb(&out);
    assert!(
        out.iter()
            .any(|s| s.dst_port == BACKEND && s.ack == Some(backend.snd_nxt)),
        "the backend's FIN taken: {out:?}"
    );
    c.tls.close_notify();
    let mut bye = c.tls_segments();
    bye.push(c.tcp.next(TcpControl::Fin, b""));
    let out = lab.exchange(&bye);
    c.absorb(&out);
    backend.absorb(&out);
    assert!(backend.fin_at.is_some(), "the client's end passed on");
    let ack = backend.next(TcpControl::None, b"");
    let out = lab.exchange(&[ack]);
    c.absorb(&out);
    assert!(c.plain.len() < answer.len(), "the client is behind");
    client_acks_until_the_end(&mut lab, &mut c);
    assert_eq!(c.plain.len(), answer.len(), "every byte the backend sent");
    assert!(c.plain == answer, "in order");
    assert!(c.tls.peer_closed(), "then close_notify");
    assert!(c.tcp.fin_at.is_some() && !c.tcp.reset, "and a FIN");
    let ack = c.tcp.next(TcpControl::None, b"");
    lab.exchange(&[ack]);
    settle_and_check_nothing_held(&mut lab);
}

/// Answers the engine's SYN to the backend in `out` (the host's ISS
/// 900,000), and acknowledges what comes until the engine resets it.
fn backend_answers(lab: &mut HostLab, out: &[Seg]) -> HostConn {
    let syn = backend_syn(out);
    let mut backend = HostConn::accepted(syn, 900_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack]));
    ack_until_reset(lab, &mut backend, 100);
    backend
}

/// Asserts that `backend` got `want`, then a reset and no FIN.
fn got_then_reset(backend: &HostConn, want: &[u8]) {
    assert_eq!(
        String::from_utf8_lossy(&backend.received),
        String::from_utf8_lossy(want),
        "every byte the client sent before its reset"
    );
    assert!(backend.reset, "then a reset");
    assert_eq!(backend.fin_at, None, "no FIN: the client's stream was cut");
}

/// A plain client of a proxied VIP sends the handshake's ACK, a request
/// and an RST, in one burst (the engine learns of the connection in the
/// burst that ends it) or the RST in a burst of its own, while the
/// backend connection is still opening: once it is up the backend gets
/// the request, then a reset. Before, the backend connection was dropped
/// at once (or, in one burst, never opened) and the request lost.
#[test]
fn a_client_reset_while_its_backend_connects_still_delivers_its_request() {
    let mut lab = lab();
    for (port, one_burst) in [(52_003, false), (52_000, true)] {
        let mut c = syn_acked(&mut lab, port, PROXY, 5_000_000);
        let mut burst = client_segments(&mut c, ClientBurst::DataRst);
        let mut out = Vec::new();
        if !one_burst {
            let rst = burst.pop();
            out = lab.exchange(&burst);
            burst = rst.into_iter().collect();
        }
        out.extend(lab.exchange(&burst));
        let backend = backend_answers(&mut lab, &out);
        got_then_reset(&backend, REQUEST);
    }
    settle_and_check_nothing_held(&mut lab);
    assert_eq!(lab.mem.engine.tcp().buffers().in_use(), 0, "no ring held");
    still_serves(&mut lab, 60_003);
}

/// A TLS client of a proxied VIP sends its Finished, a request in
/// records and an RST in one burst, the burst that opens the backend
/// connection: once it is up, the backend gets the request, then a reset.
#[test]
fn a_tls_client_reset_while_its_backend_connects_still_delivers_its_request() {
    let mut lab = lab();
    let mut c = tls_client_at_finished(&mut lab, 52_001);
    c.tls.write_plain(REQUEST);
    let mut burst = c.tls_segments();
    burst.push(c.tcp.next(TcpControl::Rst, b""));
    let out = lab.exchange(&burst);
    // The decrypted request waits for the backend, charged to the buffer
    // cap as it was while the client was open.
    let carried = lab.mem.engine.tcp().buffers().bytes_outside();
    assert!(carried >= REQUEST.len(), "charged {carried}");
    let backend = backend_answers(&mut lab, &out);
    got_then_reset(&backend, REQUEST);
    settle_and_check_nothing_held(&mut lab);
    assert_eq!(lab.mem.engine.tcp().buffers().in_use(), 0, "no ring held");
}

/// A VIP on `port` (TLS with `tls`) whose pool, one member on the host,
/// sends the PROXY protocol header.
fn proxy_protocol_vip(lab: &mut HostLab, port: u16, tls: Option<crypto::session::TlsConfig>) {
    let e = &mut lab.mem.engine;
    let member = Member::new(SocketAddrV4::new(HOST_IP, BACKEND), 1, MemberState::Up);
    let mut pool = Pool::new("pp".into(), Balance::RoundRobin, vec![member]);
    pool.proxy_protocol = true;
    let pool = e.add_pool(pool);
    e.listen_pool(common::host::DUT_IP, port, tls, pool);
}

/// As above, to a pool that sends the PROXY protocol header: the header
/// the client never saw go (it reset first) still goes before its
/// request, naming the client.
#[test]
fn a_client_reset_while_its_backend_connects_still_gets_its_proxy_header() {
    const PP_VIP: u16 = 8090;
    let mut lab = lab();
    proxy_protocol_vip(&mut lab, PP_VIP, None);
    let mut c = syn_acked(&mut lab, 52_002, PP_VIP, 6_000_000);
    let burst = client_segments(&mut c, ClientBurst::DataRst);
    let out = lab.exchange(&burst);
    let backend = backend_answers(&mut lab, &out);
    let mut want = Vec::new();
    dataplane::app::proxy_protocol::header_v2(
        SocketAddrV4::new(HOST_IP, 52_002).into(),
        SocketAddrV4::new(common::host::DUT_IP, PP_VIP).into(),
        None,
        &mut want,
    );
    want.extend_from_slice(REQUEST);
    assert_eq!(backend.received, want, "the header, then the request");
    assert!(backend.reset, "then a reset");
    settle_and_check_nothing_held(&mut lab);
}

/// As above, a TLS client, with the connection log on: the header the
/// backend gets still names the client's SNI. Before, logging the
/// client's end took the name out of its session before the header was
/// built, and the header went without it.
#[test]
fn a_tls_client_reset_while_its_backend_connects_keeps_its_sni_in_the_proxy_header() {
    const PP_TLS_VIP: u16 = 8092;
    let mut lab = lab();
    proxy_protocol_vip(&mut lab, PP_TLS_VIP, Some(common::vips::tls_config()));
    let e = &mut lab.mem.engine;
    let queues = std::sync::Arc::new(dataplane::app::conn_log::ConnLogQueues::with_capacity(
        1, 64,
    ));
    e.log_connections(Some(queues.clone()));
    let mut c = tls_client_at_finished_on(&mut lab, 52_006, PP_TLS_VIP);
    c.tls.write_plain(REQUEST);
    let mut burst = c.tls_segments();
    burst.push(c.tcp.next(TcpControl::Rst, b""));
    let out = lab.exchange(&burst);
    let backend = backend_answers(&mut lab, &out);
    let got = &backend.received;
    assert!(
        got.starts_with(&[0x0d, 0x0a, 0x0d, 0x0a]),
        "a PROXY v2 header"
    );
    assert!(
        got.windows(10).any(|w| w == b"tlsdp.test"),
        "its SNI: {got:?}"
    );
    // The cipher as OpenSSL names it, as HAProxy and nginx send it.
    let cipher = b"TLS_AES_128_GCM_SHA256";
    assert!(
        got.windows(cipher.len()).any(|w| w == cipher),
        "its cipher, OpenSSL's name: {}",
        String::from_utf8_lossy(got)
    );
    assert!(got.ends_with(REQUEST) && backend.reset);
    assert_eq!(queues.of(0).unwrap().len(), 1, "the end logged");
    settle_and_check_nothing_held(&mut lab);
}

/// As above, the backend's SYN-ACK and the client's reset in one burst,
/// the SYN-ACK first: the engine learns the backend is up before it
/// learns the client left, and the backend (which sends nothing more of
/// its own) still gets the header and the request at once, then a reset.
/// Before, they waited for an event of the backend's that never came.
#[test]
fn a_backend_up_in_the_burst_of_its_clients_reset_still_gets_the_request() {
    const PP_VIP: u16 = 8091;
    let mut lab = lab();
    proxy_protocol_vip(&mut lab, PP_VIP, None);
    let mut c = syn_acked(&mut lab, 52_004, PP_VIP, 6_500_000);
    let mut burst = client_segments(&mut c, ClientBurst::DataRst);
    let rst = burst.pop().expect("the reset ends the burst");
    let out = lab.exchange(&burst);
    let mut backend = HostConn::accepted(backend_syn(&out), 950_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack, rst]));
    let mut want = Vec::new();
    dataplane::app::proxy_protocol::header_v2(
        SocketAddrV4::new(HOST_IP, 52_004).into(),
        SocketAddrV4::new(common::host::DUT_IP, PP_VIP).into(),
        None,
        &mut want,
    );
    want.extend_from_slice(REQUEST);
    assert_eq!(
        backend.received, want,
        "the header, then the request, at once"
    );
    ack_until_reset(&mut lab, &mut backend, 100);
    assert!(backend.reset, "then a reset");
    settle_and_check_nothing_held(&mut lab);
}

/// A client resets while its backend connects, and the backend refuses:
/// what the client sent is dropped with the backend connection, nothing
/// is held, and the engine goes on serving.
#[test]
fn a_client_reset_then_a_refused_backend_holds_nothing() {
    let mut lab = lab();
    let mut c = syn_acked(&mut lab, 52_004, PROXY, 7_000_000);
    let burst = client_segments(&mut c, ClientBurst::DataRst);
    let out = lab.exchange(&burst);
    let syn = backend_syn(&out);
    let mut backend = HostConn::accepted(syn, 910_000);
    let refusal = backend.next(TcpControl::Rst, b"");
    lab.exchange(&[refusal]);
    settle_and_check_nothing_held(&mut lab);
    assert_eq!(lab.mem.engine.tcp().buffers().in_use(), 0, "no ring held");
    still_serves(&mut lab, 60_004);
}

/// Bytes a client sends after the engine is done with it (after a TLS
/// error's alert, after the answer to its `Connection: close` request)
/// are read and dropped, several clients in each burst: once each closes,
/// its connection leaves for the compact TIME-WAIT table at once, holding
/// no byte ring, and its VIP no longer counts it. (They used to stay in
/// their slot with the bytes for the whole of TIME-WAIT, their `Closed`
/// event, and the VIP's count, that late.)
#[test]
fn bytes_after_the_engine_is_done_are_dropped_and_hold_nothing() {
    let mut lab = lab();
    let mut clients: Vec<HostConn> = Vec::new();
    for i in 0..EACH as u16 {
        clients.push(HostConn::client(24_000 + i, TLS, 9_000 + u32::from(i)));
        clients.push(HostConn::client(25_000 + i, PLAIN, 19_000 + u32::from(i)));
    }
    let syns: Vec<Seg> = clients
        .iter_mut()
        .map(|c| c.next(TcpControl::Syn, b""))
        .collect();
    let out = lab.exchange(&syns);
    // Not TLS, to the TLS VIP; a request that closes and more, to the
    // plain one.
    let per_conn = clients
        .iter_mut()
        .map(|c| {
            c.absorb(&out);
            let first: &[u8] = if c.dut_port == TLS {
                b"GET / HTTP/1.1\r\n"
            } else {
                b"GET /bytes/5 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /bytes/6 HTTP/1.1\r\n"
            };
            vec![
                c.next(TcpControl::None, b""),
                c.next(TcpControl::Psh, first),
            ]
        })
        .collect();
    let out = lab.exchange(&interleave(per_conn));
    for c in &mut clients {
        c.absorb(&out);
        assert!(
            c.fin_at.is_some(),
            ":{} {}: done with it",
            c.dut_port,
            c.port
        );
    }
    // More bytes, then (next burst) FIN.
    let more: Vec<Seg> = (clients.iter_mut())
        .map(|c| c.next(TcpControl::Psh, b"Host: x\r\n\r\n"))
        .collect();
    let out = lab.exchange(&more);
    clients.iter_mut().for_each(|c| c.absorb(&out));
    let fins: Vec<Seg> = clients
        .iter_mut()
        .map(|c| c.next(TcpControl::Fin, b""))
        .collect();
    lab.exchange(&fins);
    let e = &lab.mem.engine;
    assert_eq!(e.tcp().buffers().in_use(), 0, "no byte ring held");
    assert_eq!(e.vip_counters(0).active, 0, "the plain VIP");
    assert_eq!(e.vip_counters(1).active, 0, "the TLS VIP");
    assert_eq!(e.tcp().counters().active, 0);
    settle_and_check_nothing_held(&mut lab);
    still_serves(&mut lab, 60_004);
}

/// A TLS 1.2 session at its record limit (2^24 records for AES-GCM; the
/// test hook makes it four) cannot go on without renegotiation: it ends
/// with one close_notify and a FIN, counted as a `record_limit` failure.
/// Before, it was not counted, and where a response head was still
/// queued no FIN followed the close_notify: the connection waited out its
/// idle timeout.
#[test]
fn tls12_at_its_record_limit_ends_with_close_notify_and_a_fin() {
    use crypto::session::{set_tls12_record_limit_for_tests, Failure};
    set_tls12_record_limit_for_tests(Some(4));
    let mut lab = lab();
    let cfg = LoadClientConfig::new(false, true);
    let mut c = TlsClient::new(&cfg, 51_100, TLS);
    let syn = c.tcp.next(TcpControl::Syn, b"");
    let out = lab.exchange(&[syn]);
    c.absorb(&out);
    while c.tls.is_handshaking() {
        let mut segs = vec![c.tcp.next(TcpControl::None, b"")];
        segs.extend(c.tls_segments());
        let out = lab.exchange(&segs);
        c.absorb(&out);
    }
    c.tls
        .write_plain(b"GET /bytes/200000 HTTP/1.1\r\nHost: tlsdp\r\n\r\n");
    let request = c.tls_segments();
    let out = lab.exchange(&request);
    c.absorb(&out);
    client_acks_until_the_end(&mut lab, &mut c);
    set_tls12_record_limit_for_tests(None);
    assert!(c.tcp.fin_at.is_some(), "a FIN");
    assert!(!c.tcp.reset);
    assert!(c.tls.peer_closed(), "close_notify");
    assert!(c.plain.len() < 200_000, "cut: {}", c.plain.len());
    let failures = lab.mem.engine.counters().tls_failure_reasons;
    assert_eq!(failures[Failure::RecordLimit.index()], 1, "{failures:?}");
}

/// A TLS client that half-closes with its request (the request, then
/// close_notify or not, then FIN, in one burst) gets the responder's whole
/// answer, however long, then close_notify and FIN. Before, once the body
/// filled the send ring, the engine took the client's FIN for "nothing in
/// progress", sent close_notify and cut the body short.
#[test]
fn a_half_closed_tls_client_gets_a_long_answer_whole() {
    const LEN: usize = 300_000;
    let mut lab = lab();
    for (port, notify) in [(61_000, true), (61_001, false)] {
        let mut c = tls_client_at_finished_on(&mut lab, port, TLS);
        let request = format!("GET /bytes/{LEN} HTTP/1.1\r\nHost: tlsdp\r\n\r\n");
        c.tls.write_plain(request.as_bytes());
        let mut segs = c.tls_segments();
        if notify {
            c.tls.close_notify();
            segs.extend(c.tls_segments());
        }
        segs.push(c.tcp.next(TcpControl::Fin, b""));
        let mut out = lab.exchange(&segs);
        for _ in 0..1_000 {
            c.absorb(&out);
            if c.tcp.fin_at.is_some() || c.tcp.reset {
                break;
            }
            let ack = c.tcp.next(TcpControl::None, b"");
            out = lab.exchange(&[ack]);
        }
        assert!(
            c.tcp.fin_at.is_some(),
            "close_notify {notify}: a FIN at the end"
        );
        let text = String::from_utf8_lossy(&c.plain);
        let head_end = text.find("\r\n\r\n").expect("a response head") + 4;
        assert!(text.starts_with("HTTP/1.1 200"), "{}", &text[..head_end]);
        assert_eq!(
            text.len() - head_end,
            LEN,
            "close_notify {notify}: the whole body"
        );
        assert!(text.ends_with(&body(LEN)));
    }
    // Pipelined requests past the 32 KiB of plaintext read at a time (and
    // within the 64 KiB window), then FIN: every one is answered.
    let mut c = tls_client_at_finished_on(&mut lab, 61_002, TLS);
    let pad = "p".repeat(1000);
    let request = format!("GET /bytes/10 HTTP/1.1\r\nHost: tlsdp\r\nX-Pad: {pad}\r\n\r\n");
    for _ in 0..50 {
        c.tls.write_plain(request.as_bytes());
    }
    let mut segs = c.tls_segments();
    segs.push(c.tcp.next(TcpControl::Fin, b""));
    let mut out = lab.exchange(&segs);
    for _ in 0..1_000 {
        c.absorb(&out);
        if c.tcp.fin_at.is_some() || c.tcp.reset {
            break;
        }
        let ack = c.tcp.next(TcpControl::None, b"");
        out = lab.exchange(&[ack]);
    }
    assert!(c.tcp.fin_at.is_some(), "a FIN at the end");
    let text = String::from_utf8_lossy(&c.plain);
    assert_eq!(
        text.matches("HTTP/1.1 200").count(),
        50,
        "every request answered"
    );
    settle_and_check_nothing_held(&mut lab);
}

/// A TLS 1.2 client that stopped reading a long answer (the engine's send
/// ring filled behind its window) sends a record that fails: once it
/// reads again it gets every byte queued before, then the alert
/// (bad_record_mac), then the FIN. (Where the ring has no room left at all
/// for the alert, `TlsConn::end_after_flush` holds the FIN until it has;
/// the ring here keeps a few bytes free, so this passes either way.)
#[test]
fn a_failure_alert_waits_for_room_in_a_full_ring_then_the_fin() {
    let mut lab = lab();
    let cfg = LoadClientConfig::new(false, true);
    let mut c = TlsClient::new(&cfg, 61_100, TLS);
    let syn = c.tcp.next(TcpControl::Syn, b"");
    c.absorb(&lab.exchange(&[syn]));
    let mut hello = vec![c.tcp.next(TcpControl::None, b"")];
    hello.extend(c.tls_segments());
    c.absorb(&lab.exchange(&hello));
    // The second flight, then a request for more than the ring holds.
    let second = c.tls_segments();
    c.absorb(&lab.exchange(&second));
    assert!(!c.tls.is_handshaking(), "TLS 1.2 handshake done");
    c.tls
        .write_plain(b"GET /bytes/2000000 HTTP/1.1\r\nHost: tlsdp\r\n\r\n");
    let ask = c.tls_segments();
    c.tcp.absorb(&lab.exchange(&ask));
    // Nothing acknowledged: the ring fills behind the window. Then a
    // record that fails (its tag is wrong).
    let mut forged = vec![0x17, 0x03, 0x03, 0x00, 0x40];
    forged.extend((0..0x40).map(|i| i as u8));
    let bad = c.tcp.next(TcpControl::Psh, &forged);
    let mut out = lab.exchange(&[bad]);
    for _ in 0..2_000 {
        c.tcp.absorb(&out);
        if c.tcp.fin_at.is_some() || c.tcp.reset {
            break;
        }
        let ack = c.tcp.next(TcpControl::None, b"");
        out = lab.exchange(&[ack]);
    }
    assert!(c.tcp.fin_at.is_some(), "a FIN at the end");
    // The records received, in order: the last is the alert.
    let mut types = Vec::new();
    let mut rest = &c.tcp.received[..];
    while rest.len() >= 5 {
        let len = 5 + usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        assert!(rest.len() >= len, "a whole record before the FIN");
        types.push(rest[0]);
        rest = &rest[len..];
    }
    assert!(rest.is_empty());
    assert_eq!(
        types.last(),
        Some(&21),
        "an alert last: {:?}",
        &types[types.len().saturating_sub(3)..]
    );
    settle_and_check_nothing_held(&mut lab);
}
