//! The connection log in memory: each client connection of every kind of
//! VIP, ended in every way (several in one burst), is recorded once, as
//! it ends, with its VIP, client, how it ended, what served it, its bytes
//! and its TLS outcome; a full queue drops records and counts them;
//! nothing is recorded once the log is off.

mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::host::{HostConn, HostLab, Seg, DUT_IP, HOST_IP};
use common::vips::{lab, BACKEND, PLAIN, PROXY, TLS};
use crypto::client::{LoadClientConfig, LoadClientSession};
use dataplane::app::conn_log::{ConnLogQueues, ConnRecord, End};
use smoltcp::wire::TcpControl;

const REQUEST: &[u8] = b"GET /bytes/100 HTTP/1.1\r\nHost: tlsdp\r\n\r\n";
const LAST_REQUEST: &[u8] = b"GET /bytes/10 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Every record queued now, by client port.
fn records(queues: &ConnLogQueues) -> HashMap<u16, ConnRecord> {
    let mut by_port = HashMap::new();
    queues.drain(|r| {
        let old = by_port.insert(r.client.port(), r.clone());
        assert!(old.is_none(), "logged twice: {r:?}");
    });
    by_port
}

/// The client ports of `records`, in order.
fn ports_of(records: &HashMap<u16, ConnRecord>) -> Vec<u16> {
    let mut ports: Vec<u16> = records.keys().copied().collect();
    ports.sort_unstable();
    ports
}

/// A record's JSON line, parsed.
fn json_of(r: &ConnRecord) -> serde_json::Value {
    serde_json::from_str(&r.json_line("vip")).unwrap()
}

/// The lab's engine with its four VIPs, logging into queues of
/// `capacity` records.
fn logging_lab(capacity: usize) -> (HostLab, Arc<ConnLogQueues>) {
    let mut lab = lab();
    let queues = Arc::new(ConnLogQueues::with_capacity(1, capacity));
    lab.mem.engine.log_connections(Some(queues.clone()));
    (lab, queues)
}

/// Clients from `ports` to `vip`, their SYNs sent in one burst and each
/// given the engine's SYN-ACK (their handshake's ACK not sent yet).
fn syn_acked(lab: &mut HostLab, ports: std::ops::Range<u16>, vip: u16) -> Vec<HostConn> {
    let mut conns: Vec<HostConn> = ports
        .map(|p| HostConn::client(p, vip, 1_000 * u32::from(p)))
        .collect();
    let syns: Vec<Seg> = conns
        .iter_mut()
        .map(|c| c.next(TcpControl::Syn, b""))
        .collect();
    let out = lab.exchange(&syns);
    conns.iter_mut().for_each(|c| c.absorb(&out));
    conns
}

/// Proxied clients from `ports`, each sending `REQUEST` once connected,
/// all in one burst: the clients and the engine's SYNs to the backend, in
/// the order of their requests.
fn proxied_asking(lab: &mut HostLab, ports: std::ops::Range<u16>) -> (Vec<HostConn>, Vec<Seg>) {
    let n = ports.len();
    let mut clients = syn_acked(lab, ports, PROXY);
    let mut burst = Vec::new();
    for c in &mut clients {
        burst.push(c.next(TcpControl::None, b""));
        burst.push(c.next(TcpControl::Psh, REQUEST));
    }
    let out = lab.exchange(&burst);
    let syns: Vec<Seg> = (out.iter())
        .filter(|s| s.dst_port == BACKEND && s.control == TcpControl::Syn)
        .cloned()
        .collect();
    assert_eq!(syns.len(), n, "a backend connection each");
    (clients, syns)
}

/// A TLS client over a host connection (rustls, certificates unchecked).
struct TlsClient {
    tcp: HostConn,
    tls: LoadClientSession,
    fed: usize,
}

impl TlsClient {
    fn new(port: u16) -> Self {
        let cfg = LoadClientConfig::new(true, true);
        Self {
            tcp: HostConn::client(port, TLS, 5_000 * u32::from(port)),
            tls: LoadClientSession::new(&cfg, "tlsdp.test").unwrap(),
            fed: 0,
        }
    }

    fn absorb(&mut self, segs: &[Seg]) {
        self.tcp.absorb(segs);
        if self.fed < self.tcp.received.len() {
            let n = self.tls.receive(&self.tcp.received[self.fed..]).unwrap();
            self.fed += n;
        }
    }

    fn tls_segments(&mut self) -> Vec<Seg> {
        let mut bytes = Vec::new();
        self.tls.take_tls(&mut bytes);
        (bytes.chunks(1400))
            .map(|c| self.tcp.next(TcpControl::Psh, c))
            .collect()
    }
}

#[test]
fn each_client_connection_is_logged_once_as_it_ends_with_how_it_ended() {
    let (mut lab, queues) = logging_lab(1024);

    // Plain clients: SYNs in one burst, then in one burst: a request and
    // FIN (21000), a reset (21001), a request and a reset (21002), a
    // keep-alive request then a closing one (21003), nothing (21004:
    // waits for its request's deadline).
    let mut plain = syn_acked(&mut lab, 21_000..21_005, PLAIN);
    let mut burst = Vec::new();
    for (i, c) in plain.iter_mut().enumerate() {
        burst.push(c.next(TcpControl::None, b""));
        match i {
            0 => {
                burst.push(c.next(TcpControl::Psh, REQUEST));
                burst.push(c.next(TcpControl::Fin, b""));
            }
            1 => burst.push(c.next(TcpControl::Rst, b"")),
            2 => {
                burst.push(c.next(TcpControl::Psh, REQUEST));
                burst.push(c.next(TcpControl::Rst, b""));
            }
            3 => {
                burst.push(c.next(TcpControl::Psh, REQUEST));
                burst.push(c.next(TcpControl::Psh, LAST_REQUEST));
            }
            _ => {}
        }
    }
    let out = lab.exchange(&burst);
    plain.iter_mut().for_each(|c| c.absorb(&out));
    // 21000 and 21003 got their answers and our FIN: they ACK it (21003
    // with its own FIN).
    let acks = vec![
        plain[0].next(TcpControl::None, b""),
        plain[3].next(TcpControl::Fin, b""),
    ];
    let out = lab.exchange(&acks);
    plain.iter_mut().for_each(|c| c.absorb(&out));
    assert!(plain[0].fin_at.is_some() && plain[3].fin_at.is_some());

    // TLS clients: a handshake, a request, close_notify and FIN (22000);
    // bytes that are not TLS (22001); a silent one (22002: waits for its
    // handshake's deadline).
    let mut done = TlsClient::new(22_000);
    let mut not_tls = HostConn::client(22_001, TLS, 77);
    let mut silent = HostConn::client(22_002, TLS, 99);
    let syns = [
        done.tcp.next(TcpControl::Syn, b""),
        not_tls.next(TcpControl::Syn, b""),
        silent.next(TcpControl::Syn, b""),
    ];
    let out = lab.exchange(&syns);
    done.absorb(&out);
    not_tls.absorb(&out);
    silent.absorb(&out);
    let mut burst = vec![done.tcp.next(TcpControl::None, b"")];
    burst.extend(done.tls_segments());
    burst.push(not_tls.next(TcpControl::None, b""));
    burst.push(not_tls.next(TcpControl::Psh, &REQUEST[..10]));
    burst.push(silent.next(TcpControl::None, b""));
    let out = lab.exchange(&burst);
    done.absorb(&out);
    not_tls.absorb(&out);
    assert!(!done.tls.is_handshaking());
    done.tls.write_plain(LAST_REQUEST);
    let mut segs = done.tls_segments();
    let out = lab.exchange(&segs);
    done.absorb(&out);
    done.tls.close_notify();
    segs = done.tls_segments();
    segs.push(done.tcp.next(TcpControl::Fin, b""));
    let out = lab.exchange(&segs);
    done.absorb(&out);
    let ack = done.tcp.next(TcpControl::None, b"");
    let out = lab.exchange(&[ack]);
    done.absorb(&out);
    // It closes too, once it has the alert and our FIN (acknowledged
    // first, then its own FIN a moment later).
    assert!(not_tls.fin_at.is_some());
    // The rest of its bytes come after the alert.
    let ack = not_tls.next(TcpControl::Psh, &REQUEST[10..]);
    not_tls.absorb(&lab.exchange(&[ack]));
    lab.advance(Duration::from_millis(5));
    let fin = not_tls.next(TcpControl::Fin, b"");
    not_tls.absorb(&lab.exchange(&[fin]));

    // A proxied client: its request reaches the backend (the host), whose
    // answer and FIN reach it; it closes too.
    let mut proxied = HostConn::client(23_000, PROXY, 4_242);
    let syn = proxied.next(TcpControl::Syn, b"");
    proxied.absorb(&lab.exchange(&[syn]));
    let burst = [
        proxied.next(TcpControl::None, b""),
        proxied.next(TcpControl::Psh, REQUEST),
    ];
    let out = lab.exchange(&burst);
    let syn = (out.iter())
        .find(|s| s.dst_port == BACKEND && s.control == TcpControl::Syn)
        .expect("a backend connection")
        .clone();
    let mut backend = HostConn::accepted(&syn, 800_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack]));
    assert_eq!(backend.received, REQUEST);
    let reply = b"HTTP/1.0 200 OK\r\n\r\nfrom the backend";
    let burst = [
        backend.next(TcpControl::Psh, reply),
        backend.next(TcpControl::Fin, b""),
    ];
    let out = lab.exchange(&burst);
    proxied.absorb(&out);
    backend.absorb(&out);
    assert_eq!(proxied.received, reply);
    let fin = proxied.next(TcpControl::Fin, b"");
    let out = lab.exchange(&[fin]);
    proxied.absorb(&out);
    backend.absorb(&out);
    let ack = backend.next(TcpControl::None, b"");
    lab.exchange(&[ack]);

    let early = records(&queues);
    let mut ended: Vec<u16> = early.keys().copied().collect();
    ended.sort_unstable();
    assert_eq!(
        ended,
        [21_000, 21_001, 21_002, 21_003, 22_000, 22_001, 23_000],
        "logged as they end; not the two waiting for their deadlines, nor the backend"
    );
    // The deadlines pass: the two still open end.
    for _ in 0..320 {
        lab.advance(Duration::from_millis(100));
    }
    let late = records(&queues);
    let ports = ports_of(&late);
    assert_eq!(ports, [21_004, 22_002]);

    let all: HashMap<u16, ConnRecord> = early.into_iter().chain(late).collect();
    let counters = lab.mem.engine.counters();
    assert_eq!(counters.conn_log_records, all.len() as u64);
    assert_eq!(counters.conn_log_dropped, 0);
    let vip = |port| SocketAddr::new(IpAddr::V4(DUT_IP), port);
    for (port, r) in &all {
        assert_eq!(r.client, SocketAddr::new(IpAddr::V4(HOST_IP), *port));
        assert_eq!(r.engine, 0);
    }
    let r = &all[&21_000];
    assert_eq!(
        (r.local, r.vip, r.end, r.role),
        (vip(PLAIN), 0, End::Closed, "http")
    );
    assert_eq!(r.requests, Some(1));
    assert_eq!(r.bytes_in, REQUEST.len() as u64);
    assert_eq!(
        r.bytes_out,
        plain[0].received.len() as u64,
        "the whole answer"
    );
    assert!(r.tls.is_none() && r.backend.is_none());
    // Reset in the burst that ended their handshake: never served.
    let r = &all[&21_001];
    assert_eq!(
        (r.vip, r.end, r.role, r.requests),
        (0, End::ClientReset, "", None)
    );
    assert_eq!((r.bytes_in, r.bytes_out), (0, 0));
    let r = &all[&21_002];
    assert_eq!((r.end, r.role), (End::ClientReset, ""));
    assert_eq!(
        r.bytes_in,
        REQUEST.len() as u64,
        "its request came before its reset"
    );
    let r = &all[&21_003];
    assert_eq!((r.end, r.requests), (End::Closed, Some(2)));
    assert_eq!(r.bytes_in, (REQUEST.len() + LAST_REQUEST.len()) as u64);
    assert_eq!(r.bytes_out, plain[3].received.len() as u64);
    let r = &all[&21_004];
    assert_eq!((r.end, r.requests), (End::RequestTimeout, Some(0)));
    assert!(
        (Duration::from_secs(30)..Duration::from_millis(30_200)).contains(&r.duration),
        "reset at the request deadline, 30 s after the handshake: {:?}",
        r.duration
    );

    let r = &all[&22_000];
    assert_eq!(
        (r.local, r.vip, r.end, r.role),
        (vip(TLS), 1, End::Closed, "tls")
    );
    assert_eq!(r.requests, Some(1));
    assert_eq!(r.bytes_out, done.tcp.received.len() as u64);
    let tls = r.tls.as_ref().expect("a TLS connection's outcome");
    let n = tls.negotiated.expect("its handshake finished");
    assert_eq!(crypto::session::VERSIONS[n.version], "TLSv1.3");
    assert_eq!(tls.sni.as_deref(), Some("tlsdp.test"));
    assert_eq!(tls.failure, None);
    assert!(tls.close_notify, "it sent close_notify");
    let handshake = Duration::from_micros(u64::from(tls.handshake_us.expect("timed")));
    assert!(handshake <= r.duration, "{r:?}");
    assert_eq!(r.bytes_unacked, 0, "all of it acknowledged");
    let r = &all[&22_001];
    assert_eq!(r.end, End::TlsFailure);
    let tls = r.tls.as_ref().unwrap();
    assert!(tls.negotiated.is_none() && tls.failure.is_some());
    assert_eq!(r.bytes_in, REQUEST.len() as u64);
    let r = &all[&22_002];
    assert_eq!(r.end, End::HandshakeTimeout);
    assert!(r
        .tls
        .as_ref()
        .is_some_and(|t| t.negotiated.is_none() && t.failure.is_none()));
    assert!(
        (Duration::from_secs(10)..Duration::from_millis(10_200)).contains(&r.duration),
        "10 s from its SYN: {:?}",
        r.duration
    );

    let r = &all[&23_000];
    assert_eq!(
        (r.local, r.vip, r.end, r.role),
        (vip(PROXY), 2, End::Closed, "proxy")
    );
    assert_eq!(r.requests, None);
    assert_eq!(
        r.backend,
        Some(SocketAddr::new(IpAddr::V4(HOST_IP), BACKEND))
    );
    assert_eq!(r.to_backend, REQUEST.len() as u64);
    assert_eq!(
        (r.bytes_in, r.bytes_out),
        (REQUEST.len() as u64, reply.len() as u64)
    );

    let line = all[&22_000].json_line("web-tls");
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["client"], "10.78.0.2:22000");
    assert_eq!(v["sni"], "tlsdp.test");
}

#[test]
fn a_full_queue_drops_records_and_counts_them_and_a_log_turned_off_records_nothing() {
    let (mut lab, queues) = logging_lab(2);
    let reset_five = |lab: &mut HostLab, from: u16| {
        let mut burst = Vec::new();
        for c in &mut syn_acked(lab, from..from + 5, PLAIN) {
            burst.push(c.next(TcpControl::None, b""));
            burst.push(c.next(TcpControl::Rst, b""));
        }
        lab.exchange(&burst);
    };
    reset_five(&mut lab, 30_000);
    let c = lab.mem.engine.counters();
    assert_eq!((c.conn_log_records, c.conn_log_dropped), (2, 3));
    assert_eq!(records(&queues).len(), 2, "the first two");

    lab.mem.engine.log_connections(None);
    reset_five(&mut lab, 31_000);
    assert!(records(&queues).is_empty());
    let c = lab.mem.engine.counters();
    assert_eq!((c.conn_log_records, c.conn_log_dropped), (2, 3));

    // On again: TCP kept nothing meanwhile, and each end is its own.
    lab.mem.engine.log_connections(Some(queues.clone()));
    reset_five(&mut lab, 32_000);
    let mut ports: Vec<u16> = records(&queues).into_keys().collect();
    ports.sort_unstable();
    assert_eq!(ports, [32_000, 32_001]);
}

/// Proxied clients ended by what their backend did: its pool's only
/// member refusing (`no_backend`), and a backend resetting mid-answer
/// (`backend_reset`, after the client got what it had sent); a client
/// that resets while its backend is fine stays `client_reset`.
#[test]
fn proxied_clients_ended_by_their_backend_say_so() {
    let (mut lab, queues) = logging_lab(64);
    let (mut clients, syns) = proxied_asking(&mut lab, 27_000..27_003);
    // The backend connections in the order of their clients' requests.
    let reply = b"HTTP/1.0 200 OK\r\n\r\nhalf an ans";
    let mut answers = Vec::new();
    let mut backends = Vec::new();
    for (i, syn) in syns.iter().enumerate() {
        let mut b = HostConn::accepted(syn, 600_000 + 1_000 * i as u32);
        match i {
            0 => answers.push(
                Seg::to(syn.src_port, BACKEND, 0, Some(syn.end())).with(TcpControl::Rst, b""),
            ),
            1 => {
                answers.push(b.next(TcpControl::Syn, b""));
                answers.push(b.next(TcpControl::Psh, reply));
                answers.push(b.next(TcpControl::Rst, b""));
            }
            _ => answers.push(b.next(TcpControl::Syn, b"")),
        }
        backends.push(b);
    }
    let out = lab.exchange(&answers);
    clients.iter_mut().for_each(|c| c.absorb(&out));
    // The second client acknowledges what came; the third resets.
    let ack = clients[1].next(TcpControl::None, b"");
    let rst = clients[2].next(TcpControl::Rst, b"");
    let out = lab.exchange(&[ack, rst]);
    clients.iter_mut().for_each(|c| c.absorb(&out));
    for _ in 0..50 {
        lab.advance(Duration::from_millis(100));
    }
    let all = records(&queues);
    let port = |i: usize| clients[i].port;
    assert!(clients[0].reset, "no member: reset");
    assert_eq!(all[&port(0)].end, End::NoBackend, "{:?}", all[&port(0)]);
    let member = Some(SocketAddr::new(IpAddr::V4(HOST_IP), BACKEND));
    assert_eq!(all[&port(0)].backend, member, "the member tried last");
    assert_eq!(
        clients[1].received, reply,
        "what the backend sent came first"
    );
    assert!(clients[1].reset);
    let r = &all[&port(1)];
    assert_eq!(r.end, End::BackendReset, "{r:?}");
    assert_eq!(r.backend, member);
    assert_eq!(r.bytes_out, reply.len() as u64);
    assert_eq!(all[&port(2)].end, End::ClientReset);
    assert_eq!(all.len(), 3);
    let v = json_of(&all[&port(0)]);
    assert_eq!(v["end"], "no_backend");
}

/// Connections dpd resets on purpose say why: an operator's `conn
/// reset` (`operator_reset`), and a deny list naming the client
/// (`denied`), each in the middle of a request or a TLS handshake.
#[test]
fn resets_by_an_operator_or_a_deny_say_so() {
    use dataplane::net::PrefixSet;
    use dataplane::tcp::ConnFilter;
    let (mut lab, queues) = logging_lab(64);
    let open = |lab: &mut HostLab, ports: std::ops::Range<u16>, vip: u16| {
        let mut conns = syn_acked(lab, ports, vip);
        let mut burst = Vec::new();
        for c in &mut conns {
            burst.push(c.next(TcpControl::None, b""));
            if vip != TLS {
                burst.push(c.next(TcpControl::Psh, b"GET / HT"));
            }
        }
        lab.exchange(&burst);
        conns
    };
    open(&mut lab, 28_000..28_002, PLAIN);
    open(&mut lab, 28_100..28_102, PROXY);
    let now = lab.mem.now;
    let filter = ConnFilter {
        local: Some((IpAddr::V4(DUT_IP), PLAIN)),
        ..ConnFilter::default()
    };
    assert_eq!(lab.mem.engine.reset_connections(filter, now), 2);
    lab.advance(Duration::from_millis(1));
    let operator = records(&queues);
    let ports = ports_of(&operator);
    assert_eq!(ports, [28_000, 28_001]);
    assert!(operator.values().all(|r| r.end == End::OperatorReset));

    open(&mut lab, 28_200..28_202, TLS);
    let host = std::iter::once((IpAddr::V4(HOST_IP), 32));
    lab.mem.engine.set_deny(Arc::new(PrefixSet::new(host)));
    lab.advance(Duration::from_millis(1));
    let denied = records(&queues);
    let ports = ports_of(&denied);
    assert_eq!(
        ports,
        [28_100, 28_101, 28_200, 28_201],
        "proxied and TLS clients"
    );
    assert!(denied.values().all(|r| r.end == End::Denied), "{denied:?}");
    let v = json_of(&denied[&28_200]);
    assert_eq!(
        (v["end"].as_str(), v["tls_handshake"].as_str()),
        (Some("denied"), Some("incomplete"))
    );
}

/// A client that resets before acknowledging all of its answer: the
/// record says how much of what it was sent it never acknowledged.
#[test]
fn a_reset_records_the_bytes_the_client_never_acknowledged() {
    let (mut lab, queues) = logging_lab(8);
    let mut c = syn_acked(&mut lab, 29_500..29_501, PLAIN).remove(0);
    let burst = [
        c.next(TcpControl::None, b""),
        c.next(
            TcpControl::Psh,
            b"GET /bytes/200000 HTTP/1.1\r\nHost: x\r\n\r\n",
        ),
    ];
    c.absorb(&lab.exchange(&burst));
    // It acknowledges the first flight only, then resets.
    let got = c.received.len();
    assert!(got > 0);
    let ack = c.next(TcpControl::None, b"");
    c.absorb(&lab.exchange(&[ack]));
    let rst = c.next(TcpControl::Rst, b"");
    lab.exchange(&[rst]);
    let r = records(&queues).remove(&29_500).expect("logged");
    assert_eq!(r.end, End::ClientReset);
    assert!(r.bytes_out > got as u64, "{r:?}");
    assert_eq!(
        r.bytes_out - u64::from(r.bytes_unacked),
        got as u64,
        "acknowledged: the first flight; {r:?}"
    );
}

/// dpd stopping with connections open (`SIGINT`, or a `SIGTERM` drain out
/// of time): every client connection of every kind, half-open, in its
/// request, in its TLS handshake or proxied, and every backend
/// connection (connected or still opening) is reset, so neither side
/// waits for its own timeouts; each accepted client's record says
/// `stopped`; no
/// other pool member is tried; nothing stays open. One already closed
/// and logged is neither reset nor logged again.
#[test]
fn connections_open_when_dpd_stops_are_reset_and_logged_as_stopped() {
    let (mut lab, queues) = logging_lab(64);

    // Plain: two in their request, one half-open (no ACK of our
    // SYN-ACK), one that asked with `Connection: close` and closed.
    let mut plain = syn_acked(&mut lab, 30_000..30_004, PLAIN);
    let mut burst = Vec::new();
    for (i, c) in plain.iter_mut().enumerate() {
        match i {
            0 | 1 => {
                burst.push(c.next(TcpControl::None, b""));
                burst.push(c.next(TcpControl::Psh, b"GET / HT"));
            }
            3 => {
                burst.push(c.next(TcpControl::None, b""));
                burst.push(c.next(TcpControl::Psh, LAST_REQUEST));
            }
            _ => {}
        }
    }
    let out = lab.exchange(&burst);
    plain.iter_mut().for_each(|c| c.absorb(&out));
    assert!(plain[3].fin_at.is_some());
    let fin = plain[3].next(TcpControl::Fin, b"");
    plain[3].absorb(&lab.exchange(&[fin]));
    let closed = records(&queues);
    assert_eq!(closed[&30_003].end, End::Closed);
    assert_eq!(closed.len(), 1);

    // TLS: one done with its handshake and idle, one with its
    // ClientHello answered, one that sent only its handshake's ACK.
    let mut done = TlsClient::new(31_000);
    let mut hello = TlsClient::new(31_001);
    let mut silent = HostConn::client(31_002, TLS, 99);
    let syns = [
        done.tcp.next(TcpControl::Syn, b""),
        hello.tcp.next(TcpControl::Syn, b""),
        silent.next(TcpControl::Syn, b""),
    ];
    let out = lab.exchange(&syns);
    done.absorb(&out);
    hello.absorb(&out);
    silent.absorb(&out);
    let mut burst = vec![done.tcp.next(TcpControl::None, b"")];
    burst.extend(done.tls_segments());
    burst.push(hello.tcp.next(TcpControl::None, b""));
    burst.extend(hello.tls_segments());
    burst.push(silent.next(TcpControl::None, b""));
    let out = lab.exchange(&burst);
    done.absorb(&out);
    hello.absorb(&out);
    assert!(!done.tls.is_handshaking());
    let finished = done.tls_segments();
    done.absorb(&lab.exchange(&finished));

    // Proxied: two whose requests reached their backends, one whose
    // backend has not answered its SYN.
    let (mut proxied, syns) = proxied_asking(&mut lab, 32_000..32_003);
    let mut backends: Vec<HostConn> = (syns.iter().take(2).enumerate())
        .map(|(i, syn)| HostConn::accepted(syn, 900_000 + 1_000 * i as u32))
        .collect();
    let synacks: Vec<Seg> = (backends.iter_mut())
        .map(|b| b.next(TcpControl::Syn, b""))
        .collect();
    let out = lab.exchange(&synacks);
    backends.iter_mut().for_each(|b| b.absorb(&out));
    assert!(backends.iter().all(|b| b.received == REQUEST));
    let open = lab.mem.engine.tcp().counters().active;
    assert_eq!(open, 3 + 3 + 3 + 3, "clients and backend connections");

    // dpd stops: what the engine sends as it does.
    use dataplane::port::{PacketBuf, Port};
    let now = lab.mem.now;
    assert_eq!(lab.mem.engine.reset_at_stop(now), open);
    let mut frames = Vec::new();
    lab.mem.host.rx_burst(now, &mut frames, 1024);
    let out: Vec<Seg> = frames.iter().filter_map(|f| Seg::parse(f.data())).collect();
    for c in plain.iter_mut().take(3).chain(proxied.iter_mut()) {
        c.absorb(&out);
        assert!(c.reset, "client :{} reset", c.port);
    }
    for c in [&mut done.tcp, &mut hello.tcp, &mut silent] {
        c.absorb(&out);
        assert!(c.reset, "TLS client :{} reset", c.port);
    }
    for b in &mut backends {
        b.absorb(&out);
        assert!(b.reset, "backend connection :{} reset", b.port);
    }
    assert!(
        !out.iter().any(|s| s.control == TcpControl::Syn),
        "no other member tried: {out:?}"
    );
    assert!(
        !out.iter().any(|s| s.dst_port == 30_003),
        "the closed client is left alone"
    );
    assert_eq!(lab.mem.engine.tcp().counters().active, 0);
    for (slot, port) in common::vips::VIPS.iter().enumerate() {
        let vc = lab.mem.engine.vip_counters(slot as u16);
        assert_eq!(vc.active, 0, "VIP :{port} still counts open connections");
    }

    // The half-open one (30002) was never accepted: reset, not logged.
    let stopped = records(&queues);
    let ports = ports_of(&stopped);
    assert_eq!(
        ports,
        [30_000, 30_001, 31_000, 31_001, 31_002, 32_000, 32_001, 32_002]
    );
    assert!(
        stopped.values().all(|r| r.end == End::Stopped),
        "{stopped:?}"
    );
    let v = json_of(&stopped[&31_000]);
    assert_eq!(
        (v["end"].as_str(), v["tls_handshake"].as_str()),
        (Some("stopped"), Some("done"))
    );
}

/// `[log] connection_ends`: only connections that end the ways named are
/// recorded (nothing is built or queued for the rest); all again once the
/// set is every end.
#[test]
fn only_the_ends_named_are_logged() {
    use dataplane::app::conn_log::EndSet;
    let (mut lab, queues) = logging_lab(64);
    lab.mem
        .engine
        .log_connection_ends(EndSet::of(&[End::ClientReset, End::TlsFailure]));
    // One burst: a plain client asks with `Connection: close` (closed),
    // another resets, and one sends the TLS VIP bytes that are not TLS.
    let mut plain = syn_acked(&mut lab, 33_000..33_002, PLAIN);
    let mut not_tls = syn_acked(&mut lab, 33_100..33_101, TLS);
    let burst = [
        plain[0].next(TcpControl::None, b""),
        plain[0].next(TcpControl::Psh, LAST_REQUEST),
        plain[1].next(TcpControl::None, b""),
        plain[1].next(TcpControl::Rst, b""),
        not_tls[0].next(TcpControl::None, b""),
        not_tls[0].next(TcpControl::Psh, REQUEST),
    ];
    let out = lab.exchange(&burst);
    plain.iter_mut().for_each(|c| c.absorb(&out));
    not_tls[0].absorb(&out);
    assert!(plain[0].fin_at.is_some() && not_tls[0].fin_at.is_some());
    let fins = [
        plain[0].next(TcpControl::Fin, b""),
        not_tls[0].next(TcpControl::Fin, b""),
    ];
    lab.exchange(&fins);
    lab.advance(Duration::from_millis(1));
    let logged = records(&queues);
    let ports = ports_of(&logged);
    assert_eq!(ports, [33_001, 33_100], "{logged:?}");
    assert_eq!(logged[&33_001].end, End::ClientReset);
    assert_eq!(logged[&33_100].end, End::TlsFailure);
    let c = lab.mem.engine.counters();
    assert_eq!((c.conn_log_records, c.conn_log_dropped), (2, 0));

    // Every end again: the next closed connection is logged.
    lab.mem.engine.log_connection_ends(EndSet::ALL);
    let mut again = syn_acked(&mut lab, 33_200..33_201, PLAIN);
    let burst = [
        again[0].next(TcpControl::None, b""),
        again[0].next(TcpControl::Psh, LAST_REQUEST),
    ];
    again[0].absorb(&lab.exchange(&burst));
    let fin = again[0].next(TcpControl::Fin, b"");
    lab.exchange(&[fin]);
    let logged = records(&queues);
    assert_eq!(logged.keys().copied().collect::<Vec<_>>(), [33_200]);
    assert_eq!(logged[&33_200].end, End::Closed);
}

/// A TLS client that closes its session and its socket (close_notify and
/// FIN), then resets our close_notify, which it will not read (curl does:
/// RFC 8446 §6.1 lets it close without waiting for ours), got all it was
/// sent: `closed`. One that resets with part of its answer never
/// acknowledged, our close_notify queued behind it, did not:
/// `client_reset`.
#[test]
fn a_tls_client_resetting_only_our_close_notify_ended_closed() {
    let (mut lab, queues) = logging_lab(8);
    let mut curl = TlsClient::new(34_000);
    let mut cut = TlsClient::new(34_001);
    let syns = [
        curl.tcp.next(TcpControl::Syn, b""),
        cut.tcp.next(TcpControl::Syn, b""),
    ];
    let out = lab.exchange(&syns);
    curl.absorb(&out);
    cut.absorb(&out);
    let mut burst = Vec::new();
    for c in [&mut curl, &mut cut] {
        burst.push(c.tcp.next(TcpControl::None, b""));
        burst.extend(c.tls_segments());
    }
    let out = lab.exchange(&burst);
    curl.absorb(&out);
    cut.absorb(&out);
    curl.tls.write_plain(REQUEST);
    cut.tls
        .write_plain(b"GET /bytes/30000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut burst = curl.tls_segments();
    burst.extend(cut.tls_segments());
    let out = lab.exchange(&burst);
    curl.absorb(&out);
    cut.absorb(&out);
    assert!(!curl.tls.is_handshaking() && !cut.tls.is_handshaking());

    // curl: its answer acknowledged, close_notify and FIN; ours come back.
    let ack = curl.tcp.next(TcpControl::None, b"");
    curl.absorb(&lab.exchange(&[ack]));
    curl.tls.close_notify();
    let mut segs = curl.tls_segments();
    segs.push(curl.tcp.next(TcpControl::Fin, b""));
    curl.absorb(&lab.exchange(&segs));
    assert!(curl.tcp.fin_at.is_some(), "our close_notify and FIN");
    // Its socket is closed: its kernel resets what came after its FIN.
    // `cut` resets with most of its answer unacknowledged.
    let resets = [
        curl.tcp.next(TcpControl::Rst, b""),
        cut.tcp.next(TcpControl::Rst, b""),
    ];
    lab.exchange(&resets);
    let all = records(&queues);
    let r = &all[&34_000];
    assert_eq!(r.end, End::Closed, "{r:?}");
    assert!(r.tls.as_ref().is_some_and(|t| t.close_notify), "{r:?}");
    assert!(r.bytes_unacked > 0, "our close_notify, refused: {r:?}");
    let r = &all[&34_001];
    assert_eq!(r.end, End::ClientReset, "{r:?}");
    assert!(r.bytes_unacked > 10_000, "{r:?}");
}
