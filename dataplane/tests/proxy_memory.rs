//! The proxy over the in-memory link, with a hand-driven peer: the test
//! plays both the client and the backend (one host, two roles) segment by
//! segment, so the order frames reach the engine in one burst is chosen,
//! not left to timing.

mod common;

use std::net::SocketAddrV4;
use std::time::Duration;

use common::host::{HostConn, HostLab, Seg, DUT_IP, HOST_IP};
use dataplane::app::health::{HealthCheck, HealthKind};
use dataplane::app::pool::{Balance, Member, MemberState, Pool};
use smoltcp::wire::TcpControl;

const VIP_PORT: u16 = 8080;
const BACKEND_PORT: u16 = 8081;
const CLIENT_PORT: u16 = 40000;

/// The engine with a proxied VIP (one member, health-checked over HTTP)
/// and the test's host on the other end.
struct Lab {
    host: HostLab,
}

impl Lab {
    fn new() -> Self {
        Self::with_check(true)
    }

    /// With the pool's HTTP health check, or without one.
    fn with_check(check: bool) -> Self {
        let mut host = HostLab::new();
        let member = Member::new(SocketAddrV4::new(HOST_IP, BACKEND_PORT), 1, MemberState::Up);
        let mut pool = Pool::new("web".into(), Balance::RoundRobin, vec![member]);
        pool.check = check.then_some(HealthCheck {
            kind: HealthKind::Http,
            request: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
            expect: control::config::StatusRange::exact(200),
            // Long enough that no second check starts during the test.
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(30),
            rise: 1,
            fall: 1,
        });
        let p = host.mem.engine.add_pool(pool);
        host.mem.engine.listen_pool(DUT_IP, VIP_PORT, None, p);
        Self { host }
    }

    fn exchange(&mut self, segs: &[Seg]) -> Vec<Seg> {
        self.host.exchange(segs)
    }

    fn wait_for_syn(&mut self) -> Seg {
        self.host.wait_for_syn()
    }

    /// A client connects and sends `request`; the backend connection it
    /// opens is accepted (the request then reaches it). The host's two
    /// ends.
    fn proxied_request(&mut self, request: &[u8]) -> (HostConn, HostConn) {
        let mut client = HostConn::client(CLIENT_PORT, VIP_PORT, 1_000);
        let syn = client.next(TcpControl::Syn, b"");
        client.absorb(&self.exchange(&[syn]));
        let ask = client.next(TcpControl::Psh, request);
        let sent = self.exchange(&[ask]);
        let backend_syn = sent
            .iter()
            .find(|s| s.dst_port == BACKEND_PORT && s.control == TcpControl::Syn)
            .expect("the backend connection opens")
            .clone();
        let mut backend = HostConn::accepted(&backend_syn, 7_000);
        let synack = backend.next(TcpControl::Syn, b"");
        backend.absorb(&self.exchange(&[synack]));
        (client, backend)
    }
}

/// What the proxied tests' client asks.
const REQUEST: &[u8] = b"GET / HTTP/1.0\r\n\r\n";

/// A health check's connection ends (its answer read, then reset) in the
/// same burst as a client's handshake completes: the client's backend
/// connection takes the freed slot. The health check's FIN, later in that
/// burst, belongs to the connection that is gone; the new backend
/// connection must not take it as its own (it would end the client's
/// connection before the backend answered: an empty reply).
#[test]
fn events_of_a_closed_connection_do_not_reach_the_next_in_its_slot() {
    let mut lab = Lab::new();
    const BACKEND_ISS: u32 = 7_000;

    // The health check connects and asks.
    let check_syn = lab.wait_for_syn();
    assert_eq!(check_syn.dst_port, BACKEND_PORT);
    let check_port = check_syn.src_port;
    let synack = Seg::to(check_port, BACKEND_PORT, BACKEND_ISS, Some(check_syn.end()))
        .with(TcpControl::Syn, b"");
    let sent = lab.exchange(&[synack]);
    let request_end = sent
        .iter()
        .filter(|s| s.src_port == check_port)
        .map(Seg::end)
        .max()
        .expect("the check's ACK and request");
    assert!(
        sent.iter()
            .any(|s| s.payload.starts_with(b"GET / HTTP/1.0")),
        "{sent:?}"
    );

    // A client's SYN, answered; its ACK waits for the burst below.
    let client_syn = Seg::to(VIP_PORT, CLIENT_PORT, 1_000, None).with(TcpControl::Syn, b"");
    let client_synack = lab
        .exchange(std::slice::from_ref(&client_syn))
        .into_iter()
        .find(|s| s.dst_port == CLIENT_PORT && s.control == TcpControl::Syn)
        .expect("SYN-ACK");

    // One burst: the check's answer, the client's ACK (accepted: its
    // backend connection opens), the check's FIN.
    let answer = b"HTTP/1.0 200 OK\r\n\r\n";
    let check_answer = Seg::to(check_port, BACKEND_PORT, BACKEND_ISS + 1, Some(request_end))
        .with(TcpControl::Psh, answer);
    let client_ack = Seg::to(
        VIP_PORT,
        CLIENT_PORT,
        client_syn.end(),
        Some(client_synack.end()),
    );
    let check_fin = Seg::to(
        check_port,
        BACKEND_PORT,
        check_answer.end(),
        Some(request_end),
    )
    .with(TcpControl::Fin, b"");
    let sent = lab.exchange(&[check_answer, client_ack, check_fin]);
    let backend_syn = sent
        .iter()
        .find(|s| s.dst_port == BACKEND_PORT && s.control == TcpControl::Syn)
        .expect("the client's backend connection opens")
        .clone();
    let backend_port = backend_syn.src_port;
    assert_ne!(backend_port, check_port);

    // The backend accepts; the client asks; the backend answers and closes.
    let mut to_client = Vec::new();
    let synack = Seg::to(
        backend_port,
        BACKEND_PORT,
        BACKEND_ISS,
        Some(backend_syn.end()),
    )
    .with(TcpControl::Syn, b"");
    to_client.extend(lab.exchange(&[synack]));
    let request = b"GET / HTTP/1.0\r\n\r\n";
    let client_request = Seg::to(
        VIP_PORT,
        CLIENT_PORT,
        client_syn.end(),
        Some(client_synack.end()),
    )
    .with(TcpControl::Psh, request);
    let sent = lab.exchange(&[client_request]);
    let forwarded: Vec<u8> = sent
        .iter()
        .filter(|s| s.src_port == backend_port)
        .flat_map(|s| s.payload.clone())
        .collect();
    assert_eq!(forwarded, request, "the request reaches the backend");
    to_client.extend(sent);
    let reply = b"HTTP/1.0 200 OK\r\n\r\nhello from the backend";
    let backend_reply = Seg::to(
        backend_port,
        BACKEND_PORT,
        BACKEND_ISS + 1,
        Some(backend_syn.end() + request.len() as u32),
    )
    .with(TcpControl::Fin, reply);
    to_client.extend(lab.exchange(&[backend_reply]));

    let to_client: Vec<&Seg> = to_client
        .iter()
        .filter(|s| s.dst_port == CLIENT_PORT)
        .collect();
    let mut received = Vec::new();
    let mut fin_after = None;
    for s in &to_client {
        received.extend_from_slice(&s.payload);
        if s.control == TcpControl::Fin && fin_after.is_none() {
            fin_after = Some(received.len());
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&received),
        String::from_utf8_lossy(reply),
        "the client gets the backend's reply: {to_client:?}"
    );
    assert_eq!(fin_after, Some(reply.len()), "FIN after the reply");
    assert_eq!(lab.host.mem.engine.counters().proxy_backend_connects, 1);
}

/// A client reads the whole answer, then resets (as curl does when it
/// closes with bytes of ours unread), with its ACK and reset in one burst:
/// the backend had said all it had, so its connection ends with a FIN,
/// not a reset. (Before, the backend was reset: the pair's end was
/// decided by whether the client's RST came in the burst after its FIN
/// or in the same one.)
#[test]
fn a_client_reset_after_the_whole_answer_closes_the_backend_cleanly() {
    for with_fin in [false, true] {
        let mut lab = Lab::with_check(false);
        let (mut client, mut backend) = lab.proxied_request(REQUEST);
        assert_eq!(backend.received, REQUEST, "the request reaches the backend");
        let reply = b"HTTP/1.0 200 OK\r\n\r\nhello";
        let answer = backend.next(TcpControl::Fin, reply);
        let sent = lab.exchange(&[answer]);
        client.absorb(&sent);
        backend.absorb(&sent);
        assert_eq!(client.received, reply);
        assert_eq!(
            client.fin_at,
            Some(reply.len()),
            "the backend's FIN passed on"
        );

        let mut burst = vec![client.next(TcpControl::None, b"")];
        if with_fin {
            burst.push(client.next(TcpControl::Fin, b""));
        }
        burst.push(client.next(TcpControl::Rst, b""));
        let sent = lab.exchange(&burst);
        backend.absorb(&sent);
        assert!(!backend.reset, "with_fin {with_fin}: {sent:?}");
        assert_eq!(
            backend.fin_at,
            Some(REQUEST.len()),
            "with_fin {with_fin}: {sent:?}"
        );
        assert_eq!(lab.host.mem.engine.counters().tcp_resets_sent, 0);
    }
}

/// A backend that answers and resets in one burst: the client gets every
/// byte the backend sent before its reset, then a reset (not a FIN: the
/// answer was cut short, and must not look complete).
#[test]
fn a_backend_reset_after_data_delivers_the_data_then_resets_the_client() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let chunk = [b'x'; 1000];
    let mut burst: Vec<Seg> = (0..3)
        .map(|_| backend.next(TcpControl::Psh, &chunk))
        .collect();
    burst.push(backend.next(TcpControl::Rst, b""));
    let mut sent = lab.exchange(&burst);
    // The client acknowledges what it got until the engine has sent all.
    for _ in 0..10 {
        client.absorb(&sent);
        if client.reset {
            break;
        }
        let ack = client.next(TcpControl::None, b"");
        sent = lab.exchange(&[ack]);
    }
    assert_eq!(client.received.len(), 3000, "every byte before the reset");
    assert!(client.reset, "then a reset");
    assert_eq!(client.fin_at, None, "no FIN: the answer was cut");
}

/// The byte at offset `i` of what the tests' clients upload.
fn upload_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// The backend acknowledges what it got, round after round, until the
/// engine resets it (or nothing more comes).
fn drain_backend(lab: &mut Lab, backend: &mut HostConn) {
    for _ in 0..400 {
        if backend.reset {
            return;
        }
        let ack = backend.next(TcpControl::None, b"");
        let sent = lab.exchange(&[ack]);
        backend.absorb(&sent);
    }
}

/// A client sends data and resets in one burst: the backend gets every
/// byte the client sent before its reset, then a reset (not a FIN: the
/// request was cut). Before, the backend was reset at once and the bytes,
/// queued for it in the same iteration, were lost.
#[test]
fn a_client_reset_after_data_delivers_the_data_then_resets_the_backend() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let upload: Vec<u8> = (0..3000).map(upload_byte).collect();
    let mut burst: Vec<Seg> = upload
        .chunks(1000)
        .map(|c| client.next(TcpControl::Psh, c))
        .collect();
    burst.push(client.next(TcpControl::Rst, b""));
    let sent = lab.exchange(&burst);
    backend.absorb(&sent);
    drain_backend(&mut lab, &mut backend);
    assert_eq!(
        backend.received.len() - REQUEST.len(),
        upload.len(),
        "every byte before the reset"
    );
    assert!(backend.received[REQUEST.len()..] == upload[..], "in order");
    assert!(backend.reset, "then a reset");
    assert_eq!(backend.fin_at, None, "no FIN: the request was cut");
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// `sender` sends (its byte at offset `i` being `byte(i)`) while
/// `listener`, the other end of the pair, takes the engine's segments but
/// acknowledges none, until the engine takes no more (its send ring
/// towards `listener` full, then its receive ring from `sender`): what
/// the engine took, in order.
fn send_until_full(
    lab: &mut Lab,
    sender: &mut HostConn,
    listener: &mut HostConn,
    byte: fn(usize) -> u8,
) -> Vec<u8> {
    let mut took_all = Vec::new();
    let mut stalled = 0;
    while stalled < 3 {
        let start = sender.snd_nxt;
        let burst: Vec<Seg> = (0..16)
            .map(|k| {
                let at = took_all.len() + k * 1000;
                let chunk: Vec<u8> = (at..at + 1000).map(byte).collect();
                sender.next(TcpControl::Psh, &chunk)
            })
            .collect();
        let sent = lab.exchange(&burst);
        listener.absorb(&sent);
        let acked = sent
            .iter()
            .filter(|s| s.dst_port == sender.port)
            .filter_map(|s| s.ack)
            .max_by_key(|a| a.wrapping_sub(start))
            .unwrap_or(start);
        let took = acked.wrapping_sub(start) as usize;
        // What the engine did not take is not sent: the sender goes back.
        let from = took_all.len();
        took_all.extend((from..from + took).map(byte));
        sender.snd_nxt = acked;
        stalled = if took == 0 { stalled + 1 } else { 0 };
        assert!(
            took_all.len() < 64 << 20,
            "the engine's buffers never filled"
        );
    }
    took_all
}

/// The client uploads until the engine holds all it can for the pair
/// ([`send_until_full`]); the backend listens.
fn client_uploads_until_full(
    lab: &mut Lab,
    client: &mut HostConn,
    backend: &mut HostConn,
) -> Vec<u8> {
    send_until_full(lab, client, backend, upload_byte)
}

/// A client uploads to a backend that acknowledges nothing until the
/// engine's buffers for the pair are full (its send ring to the backend,
/// then the client's receive ring), then resets: once the backend
/// acknowledges again, it gets every byte the engine accepted from the
/// client, then a reset. The bytes the backend's ring could not take when
/// the client reset are carried (they were dropped with the client).
#[test]
fn a_client_reset_with_the_backend_behind_still_delivers_every_byte() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let upload = client_uploads_until_full(&mut lab, &mut client, &mut backend);
    let accepted = upload.len();
    assert!(
        backend.received.len() < REQUEST.len() + accepted,
        "the backend is behind when the client resets"
    );
    let rst = client.next(TcpControl::Rst, b"");
    let sent = lab.exchange(&[rst]);
    backend.absorb(&sent);
    drain_backend(&mut lab, &mut backend);
    assert_eq!(
        backend.received.len() - REQUEST.len(),
        accepted,
        "every byte the engine accepted"
    );
    assert!(backend.received[REQUEST.len()..] == upload[..], "in order");
    assert!(backend.reset, "then a reset");
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// A client uploads to a backend that reads nothing until the engine
/// holds all it can for the pair, then half-closes; the backend answers
/// and closes, and the client acknowledges the engine's FIN (its
/// connection ends from LAST-ACK with bytes unread): once the backend
/// acknowledges again, it gets every byte of the upload, then a FIN (not
/// a reset: nothing was cut). Before, it got the FIN at once, without the
/// upload's end, which looked whole.
#[test]
fn a_client_that_closed_with_the_backend_behind_still_delivers_every_byte_then_a_fin() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let upload = client_uploads_until_full(&mut lab, &mut client, &mut backend);
    // The backend takes a little: the client's window opens for its FIN.
    let ack = backend.next(TcpControl::None, b"");
    backend.absorb(&lab.exchange(&[ack]));
    let fin = client.next(TcpControl::Fin, b"");
    let sent = lab.exchange(&[fin]);
    backend.absorb(&sent);
    assert!(
        sent.iter()
            .any(|s| s.dst_port == CLIENT_PORT && s.ack == Some(client.snd_nxt)),
        "the client's FIN taken: {sent:?}"
    );
    // The backend answers and closes; the client acknowledges the FIN
    // passed on to it.
    let reply = b"HTTP/1.0 200 OK\r\n\r\n";
    let answer = backend.next(TcpControl::Fin, reply);
    let sent = lab.exchange(&[answer]);
    client.absorb(&sent);
    backend.absorb(&sent);
    assert_eq!(client.fin_at, Some(reply.len()), "the answer, then a FIN");
    let ack = client.next(TcpControl::None, b"");
    backend.absorb(&lab.exchange(&[ack]));
    assert!(
        backend.received.len() < REQUEST.len() + upload.len(),
        "the backend is behind when the client's connection ends"
    );
    for _ in 0..400 {
        if backend.reset || backend.fin_at.is_some() {
            break;
        }
        let ack = backend.next(TcpControl::None, b"");
        let sent = lab.exchange(&[ack]);
        backend.absorb(&sent);
    }
    assert_eq!(
        backend.received.len() - REQUEST.len(),
        upload.len(),
        "every byte of the upload"
    );
    assert!(backend.received[REQUEST.len()..] == upload[..], "in order");
    assert_eq!(
        backend.fin_at,
        Some(REQUEST.len() + upload.len()),
        "then a FIN"
    );
    assert!(!backend.reset);
    let ack = backend.next(TcpControl::None, b"");
    lab.exchange(&[ack]);
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// A client uploads and resets while its backend keeps its window closed,
/// acknowledging every zero-window probe (it is there, so TCP alone never
/// gives up on it): the VIP's send timeout (60 s) ends the backend
/// connection, and with it what the client left for it. Before, backends
/// had no send timeout, and the pair's memory stayed held for as long as
/// the backend went on answering probes.
#[test]
fn a_backend_that_keeps_its_window_closed_is_ended_by_the_send_timeout() {
    let mut lab = Lab::with_check(false);
    let (mut client, backend) = lab.proxied_request(REQUEST);
    let took = backend.rcv_nxt.expect("the request came");
    // The backend closes its window; the client uploads, then resets.
    let closed = Seg::to(backend.dut_port, backend.port, backend.snd_nxt, Some(took)).window(0);
    lab.exchange(&[closed]);
    let upload: Vec<u8> = (0..3000).map(upload_byte).collect();
    let mut burst: Vec<Seg> = upload
        .chunks(1000)
        .map(|c| client.next(TcpControl::Psh, c))
        .collect();
    burst.push(client.next(TcpControl::Rst, b""));
    lab.exchange(&burst);
    assert!(lab.host.mem.engine.tcp().buffers().in_use() > 0, "carried");
    // Every probe is answered: still nothing taken, window still closed.
    let mut reset_at = None;
    for s in 1..=90 {
        let out = lab.host.advance(Duration::from_secs(1));
        let to_backend: Vec<&Seg> = out.iter().filter(|s| s.dst_port == BACKEND_PORT).collect();
        if to_backend.iter().any(|s| s.control == TcpControl::Rst) {
            reset_at = Some(s);
            break;
        }
        if !to_backend.is_empty() {
            let ack =
                Seg::to(backend.dut_port, backend.port, backend.snd_nxt, Some(took)).window(0);
            lab.exchange(&[ack]);
        }
    }
    let reset_at = reset_at.expect("the backend is reset");
    assert!(
        (55..=65).contains(&reset_at),
        "at the send timeout: {reset_at} s"
    );
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "what the client left is freed"
    );
}

/// The byte at offset `i` of what the tests' backends answer.
fn answer_byte(i: usize) -> u8 {
    (i % 241) as u8
}

/// The backend answers until the engine holds all it can for the pair
/// ([`send_until_full`]); the client listens.
fn backend_answers_until_full(
    lab: &mut Lab,
    client: &mut HostConn,
    backend: &mut HostConn,
) -> Vec<u8> {
    send_until_full(lab, backend, client, answer_byte)
}

/// The client acknowledges what it got, round after round, until the
/// engine has ended its connection (a FIN or a reset) or sends nothing
/// more.
fn drain_client(lab: &mut Lab, client: &mut HostConn) {
    for _ in 0..400 {
        if client.reset || client.fin_at.is_some() {
            return;
        }
        let ack = client.next(TcpControl::None, b"");
        let sent = lab.exchange(&[ack]);
        client.absorb(&sent);
    }
}

/// A backend answers a client that reads nothing until the engine holds
/// all it can for the pair, then resets: once the client acknowledges
/// again, it gets every byte the engine took from the backend, then a
/// reset. Before, what was still in the backend's receive ring at its
/// reset was dropped with it.
#[test]
fn a_backend_reset_with_the_client_behind_still_delivers_every_byte() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let answer = backend_answers_until_full(&mut lab, &mut client, &mut backend);
    assert!(
        client.received.len() < answer.len(),
        "the client is behind when the backend resets"
    );
    let rst = backend.next(TcpControl::Rst, b"");
    client.absorb(&lab.exchange(&[rst]));
    drain_client(&mut lab, &mut client);
    assert_eq!(
        client.received.len(),
        answer.len(),
        "every byte the engine took"
    );
    assert!(client.received == answer, "in order");
    assert!(client.reset, "then a reset");
    assert_eq!(client.fin_at, None, "no FIN: the answer was cut");
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// A backend answers a client that reads nothing until the engine holds
/// all it can for the pair, then closes; the client half-closes, the
/// engine closes the backend connection, and the backend acknowledges
/// that FIN (its connection ends from LAST-ACK with bytes unread): once
/// the client acknowledges again, it gets every byte the backend sent,
/// then a FIN. Before, what was still in the backend's receive ring was
/// dropped as its connection ended, and the client never got a FIN.
#[test]
fn a_backend_that_closed_with_the_client_behind_still_delivers_every_byte_then_a_fin() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let answer = backend_answers_until_full(&mut lab, &mut client, &mut backend);
    // The client takes a little: the backend's window opens for its FIN.
    let ack = client.next(TcpControl::None, b"");
    client.absorb(&lab.exchange(&[ack]));
    let fin = backend.next(TcpControl::Fin, b"");
    let sent = lab.exchange(&[fin]);
    client.absorb(&sent);
    assert!(
        sent.iter()
            .any(|s| s.dst_port == BACKEND_PORT && s.ack == Some(backend.snd_nxt)),
        "the backend's FIN taken: {sent:?}"
    );
    // The client half-closes: its FIN goes on to the backend, which
    // acknowledges the engine's FIN.
    let fin = client.next(TcpControl::Fin, b"");
    let sent = lab.exchange(&[fin]);
    client.absorb(&sent);
    backend.absorb(&sent);
    assert!(backend.fin_at.is_some(), "the client's FIN passed on");
    let ack = backend.next(TcpControl::None, b"");
    client.absorb(&lab.exchange(&[ack]));
    assert!(
        client.received.len() < answer.len(),
        "the client is behind when the backend's connection ends"
    );
    drain_client(&mut lab, &mut client);
    assert_eq!(
        client.received.len(),
        answer.len(),
        "every byte the backend sent"
    );
    assert!(client.received == answer, "in order");
    assert_eq!(client.fin_at, Some(answer.len()), "then a FIN");
    assert!(!client.reset);
    let ack = client.next(TcpControl::None, b"");
    lab.exchange(&[ack]);
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(
        lab.host.mem.engine.tcp().buffers().in_use(),
        0,
        "every ring back in the pool"
    );
}

/// A backend that answers a client behind, closes (FIN), then resets
/// (as a kernel does to bytes that reach a socket closed after its
/// answer): the client gets every byte, then a FIN, not a reset. Before,
/// the reset was passed on, and a whole answer looked cut (curl: error
/// 56; the connection log: a backend reset).
#[test]
fn a_backend_reset_after_its_fin_ends_the_client_with_a_fin() {
    let mut lab = Lab::with_check(false);
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    let answer = backend_answers_until_full(&mut lab, &mut client, &mut backend);
    // The client takes a little: the backend's window opens for its FIN.
    let ack = client.next(TcpControl::None, b"");
    client.absorb(&lab.exchange(&[ack]));
    let fin = backend.next(TcpControl::Fin, b"");
    client.absorb(&lab.exchange(&[fin]));
    let rst = backend.next(TcpControl::Rst, b"");
    client.absorb(&lab.exchange(&[rst]));
    assert!(
        client.received.len() < answer.len(),
        "the client is behind when the backend resets"
    );
    drain_client(&mut lab, &mut client);
    assert!(client.received == answer, "every byte, in order");
    assert_eq!(client.fin_at, Some(answer.len()), "then a FIN");
    assert!(!client.reset, "no reset");
    let fin = client.next(TcpControl::Fin, b"");
    lab.exchange(&[fin]);
    assert_eq!(lab.host.mem.engine.tcp().counters().active, 0);
    assert_eq!(lab.host.mem.engine.tcp().buffers().in_use(), 0);
}

/// dpd stopping with a health check in flight and a proxied client open:
/// the check's connection, the client and its backend connection are
/// reset, and the cut check counts as no failure (with `fall = 1` it
/// would take the member down and say so as dpd stops).
#[test]
fn a_health_check_cut_by_the_stop_is_no_failure() {
    use dataplane::port::{PacketBuf, Port};
    let mut lab = Lab::new();
    let check_syn = lab.wait_for_syn();
    let mut check = HostConn::accepted(&check_syn, 3_000);
    let synack = check.next(TcpControl::Syn, b"");
    check.absorb(&lab.exchange(&[synack]));
    assert!(check.received.starts_with(b"GET / HTTP/1.0"));
    let (mut client, mut backend) = lab.proxied_request(REQUEST);
    assert_eq!(backend.received, REQUEST);

    let now = lab.host.mem.now;
    assert_eq!(lab.host.mem.engine.reset_at_stop(now), 3);
    let mut frames = Vec::new();
    lab.host.mem.host.rx_burst(now, &mut frames, 64);
    let out: Vec<Seg> = frames.iter().filter_map(|f| Seg::parse(f.data())).collect();
    for c in [&mut check, &mut client, &mut backend] {
        c.absorb(&out);
        assert!(c.reset, ":{} reset: {out:?}", c.port);
    }
    assert!(!out.iter().any(|s| s.control == TcpControl::Syn));
    let member = &lab.host.mem.engine.pools()[0].members[0];
    assert_eq!(member.health.failures, 0);
    assert!(member.health.healthy);
    assert_eq!(lab.host.mem.engine.counters().health_failures, 0);
}

/// Backend connects past their pool's timeout are given up and their
/// clients go to the next member; those established before their time
/// are left alone. Forty clients at once, half of them first sent to a
/// member that never answers (the connects are found by their deadlines,
/// soonest first, not by a scan of all each tick).
#[test]
fn connects_past_the_timeout_go_to_the_next_member_and_established_ones_stay() {
    const SILENT: u16 = 8082;
    let mut host = HostLab::new();
    let members = [BACKEND_PORT, SILENT]
        .map(|port| Member::new(SocketAddrV4::new(HOST_IP, port), 1, MemberState::Up));
    let mut pool = Pool::new("two".into(), Balance::RoundRobin, members.to_vec());
    pool.connect_timeout = Duration::from_secs(1);
    let p = host.mem.engine.add_pool(pool);
    host.mem.engine.listen_pool(DUT_IP, VIP_PORT, None, p);
    let mut clients: Vec<HostConn> = (0..40)
        .map(|i| HostConn::client(41_000 + i, VIP_PORT, 1_000 + u32::from(i) * 10_000))
        .collect();
    let syns: Vec<Seg> = clients
        .iter_mut()
        .map(|c| c.next(TcpControl::Syn, b""))
        .collect();
    let out = host.exchange(&syns);
    clients.iter_mut().for_each(|c| c.absorb(&out));
    let asks: Vec<Seg> = (clients.iter_mut())
        .map(|c| c.next(TcpControl::Psh, REQUEST))
        .collect();
    let mut out = host.exchange(&asks);
    let mut backends: Vec<HostConn> = Vec::new();
    let mut silent_syns = 0;
    for round in 0..3 {
        let mut answers = Vec::new();
        for s in out.iter().filter(|s| s.control == TcpControl::Syn) {
            if s.dst_port == SILENT {
                silent_syns += 1;
            } else if !backends.iter().any(|b| b.port == s.src_port) {
                let mut b = HostConn::accepted(s, 500_000 + u32::from(s.src_port));
                answers.push(b.next(TcpControl::Syn, b""));
                backends.push(b);
            }
        }
        out = host.exchange(&answers);
        backends.iter_mut().for_each(|b| b.absorb(&out));
        if round == 0 {
            assert_eq!((backends.len(), silent_syns), (20, 20), "round robin");
        }
        // Past the timeout (and the SYNs' own retransmission).
        out.extend(host.advance(Duration::from_millis(1_100)));
    }
    assert_eq!(
        backends.len(),
        40,
        "every client reached the answering member"
    );
    assert!(
        backends.iter().all(|b| !b.reset && b.received == REQUEST),
        "none given up once established"
    );
}

/// A client whose pool's members all stay silent is tried on
/// `connect_tries` of them (4 by default), then given up: a reset after
/// four connect timeouts. Before, it was tried on every member, 64 at
/// most: over three minutes of the default 3 s timeout, its request held
/// all the while.
#[test]
fn a_client_is_tried_on_connect_tries_members_then_given_up() {
    let mut host = HostLab::new();
    let members: Vec<Member> = (0..8)
        .map(|i| Member::new(SocketAddrV4::new(HOST_IP, 9000 + i), 1, MemberState::Up))
        .collect();
    let mut pool = Pool::new("silent".into(), Balance::RoundRobin, members);
    pool.connect_timeout = Duration::from_secs(1);
    pool.fail_timeout = Duration::ZERO;
    let p = host.mem.engine.add_pool(pool);
    host.mem.engine.listen_pool(DUT_IP, VIP_PORT, None, p);
    let mut client = HostConn::client(42_000, VIP_PORT, 7_000);
    let syn = client.next(TcpControl::Syn, b"");
    client.absorb(&host.exchange(&[syn]));
    let ask = client.next(TcpControl::Psh, REQUEST);
    let mut out = host.exchange(&[ask]);
    let mut members_tried = std::collections::BTreeSet::new();
    for _ in 0..12 {
        for s in out.iter().filter(|s| s.control == TcpControl::Syn) {
            members_tried.insert(s.dst_port);
        }
        client.absorb(&out);
        if client.reset {
            break;
        }
        out = host.advance(Duration::from_millis(1_100));
    }
    assert_eq!(members_tried.len(), 4, "{members_tried:?}");
    assert!(client.reset, "given up");
    assert_eq!(host.mem.engine.counters().proxy_no_member, 1);
}

/// A member its check takes down says why in the pool's view (what
/// `dpctl pool show` prints), each failure in its own words: a 503 is
/// `status 503`, an SSH banner `not an HTTP status line` (it was "status
/// 0"). Before, the reason was in the log line of the change alone.
#[test]
fn a_failed_checks_reason_is_kept_with_its_member() {
    let mut lab = Lab::new();
    let answer = |lab: &mut Lab, reply: &[u8]| {
        let syn = lab.wait_for_syn();
        assert_eq!(syn.dst_port, BACKEND_PORT);
        let mut backend = HostConn::accepted(&syn, 7_000);
        let synack = backend.next(TcpControl::Syn, b"");
        backend.absorb(&lab.exchange(&[synack]));
        assert!(backend.received.starts_with(b"GET / HTTP/1.0"));
        let seg = backend.next(TcpControl::Psh, reply);
        backend.absorb(&lab.exchange(&[seg]));
        assert!(backend.reset, "the check ends with a reset");
        let view = lab.host.mem.engine.pool_views();
        view[0].members[0]
    };
    let member = answer(&mut lab, b"HTTP/1.1 503 Service Unavailable\r\n\r\n");
    assert!(!member.healthy);
    assert_eq!(
        member.last_failure.map(|f| f.to_string()).as_deref(),
        Some("status 503")
    );
    lab.host.advance(Duration::from_secs(60));
    let member = answer(&mut lab, b"SSH-2.0-OpenSSH_9.2\r\n");
    assert_eq!(
        member.last_failure.map(|f| f.to_string()).as_deref(),
        Some("not an HTTP status line")
    );
    let c = lab.host.mem.engine.counters();
    assert_eq!((c.health_checks, c.health_failures), (2, 2));
}

/// Health news the relay's queue has no room for waits in the engine and
/// goes at the next checks' turn, the latest per member, in order. Before,
/// it was dropped with a warning: with more members changing at once than
/// the queue holds (a backend switch dying under many pools), the other
/// engines kept sending clients to members found down.
#[test]
fn health_news_the_queue_cannot_take_is_sent_later_never_lost() {
    use dataplane::app::health::HealthShare;
    let mut host = HostLab::new();
    let (shares, news) = HealthShare::with_queue(1, 1);
    host.mem.engine.set_health_share(shares[0].clone());
    for (name, port) in [("a", 9301), ("b", 9302), ("c", 9303)] {
        let pool =
            common::vips::checked_pool(name, port, Duration::from_secs(60), Duration::from_secs(1));
        host.mem.engine.add_pool(pool);
    }
    // Nobody answers the three checks: all three members go down at
    // once, and the queue holds one piece of news.
    host.advance(Duration::from_millis(10));
    host.advance(Duration::from_secs(2));
    assert_eq!(host.mem.engine.counters().health_changes, 3);
    let mut heard = Vec::new();
    for _ in 0..3 {
        let n = news.pop().expect("news, one per turn");
        assert!(!n.up);
        heard.push(n.pool);
        host.advance(Duration::from_millis(10));
    }
    heard.sort();
    assert_eq!(heard, ["a", "b", "c"]);
    assert!(news.pop().is_none());
}

/// A member's verdict goes to the other engines again while it stands:
/// at each check of a member down, at every eighth of one up. An engine
/// that placed the member after the change (its pool was full there)
/// starts it healthy and learns otherwise within a check. Before, news
/// went at a change only, and such an engine sent clients to a member
/// down until it came up and went down again.
#[test]
fn a_members_verdict_is_sent_again_while_it_stands() {
    use dataplane::app::health::HealthShare;
    let mut host = HostLab::new();
    let (shares, news) = HealthShare::with_queue(1, 64);
    host.mem.engine.set_health_share(shares[0].clone());
    let pool = common::vips::checked_pool(
        "silent",
        9401,
        Duration::from_secs(1),
        Duration::from_millis(500),
    );
    host.mem.engine.add_pool(pool);
    host.advance(Duration::from_millis(10));
    // Nobody answers: three checks, each failed.
    for _ in 0..6 {
        host.advance(Duration::from_millis(600));
    }
    let c = host.mem.engine.counters();
    assert_eq!((c.health_failures, c.health_changes), (3, 1), "{c:?}");
    let mut heard = Vec::new();
    while let Some(n) = news.pop() {
        heard.push(n.up);
    }
    assert_eq!(heard, [false, false, false], "down, at each check");
}

/// An HTTP/1.1 check (a `host` set) answered `103 Early Hints` before
/// its `200`, the interim head cut across two segments: passed (RFC 9110
/// §15.2: a client takes 1xx responses before the final one). Before, it
/// failed as "status 103" and took the member down.
#[test]
fn interim_responses_before_a_checks_answer_are_passed_over() {
    let mut lab = Lab::new();
    let syn = lab.wait_for_syn();
    let mut backend = HostConn::accepted(&syn, 7_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&lab.exchange(&[synack]));
    for part in [
        &b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n"[..],
        b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    ] {
        let seg = backend.next(TcpControl::Psh, part);
        backend.absorb(&lab.exchange(&[seg]));
    }
    assert!(backend.reset, "the check ends with a reset");
    let c = lab.host.mem.engine.counters();
    assert_eq!((c.health_checks, c.health_failures), (1, 0));
    let view = lab.host.mem.engine.pool_views();
    assert!(view[0].members[0].healthy);
    assert_eq!(view[0].members[0].last_failure, None);
}

/// A member that refuses (a reset to our SYN) is passed over by the next
/// clients for the pool's fail timeout (nginx's `max_fails=1
/// fail_timeout=10s`), in a pool without health checks; after it, it is
/// tried again. Before, round robin gave it every other client, each
/// paying a refused connect (or, for a silent member, the whole connect
/// timeout) first.
#[test]
fn a_member_that_refused_is_passed_over_until_its_fail_timeout() {
    const SECOND: u16 = 8082;
    let mut host = HostLab::new();
    let members = [BACKEND_PORT, SECOND]
        .map(|port| Member::new(SocketAddrV4::new(HOST_IP, port), 1, MemberState::Up));
    let pool = Pool::new("web".into(), Balance::RoundRobin, members.to_vec());
    let p = host.mem.engine.add_pool(pool);
    host.mem.engine.listen_pool(DUT_IP, VIP_PORT, None, p);
    // A client's backend SYNs, in order, until one is accepted (the
    // refused ones answered with a reset).
    let serve = |host: &mut HostLab, client_port: u16, refuse: u16| -> Vec<u16> {
        let mut client = HostConn::client(client_port, VIP_PORT, 1_000);
        let syn = client.next(TcpControl::Syn, b"");
        client.absorb(&host.exchange(&[syn]));
        let ask = client.next(TcpControl::Psh, REQUEST);
        let mut out = host.exchange(&[ask]);
        let mut tried = Vec::new();
        for _ in 0..4 {
            let Some(syn) = out
                .iter()
                .find(|s| s.control == TcpControl::Syn && s.src_port != VIP_PORT)
                .cloned()
            else {
                break;
            };
            tried.push(syn.dst_port);
            let mut backend = HostConn::accepted(&syn, 7_000);
            if syn.dst_port == refuse {
                let mut rst = backend.next(TcpControl::Rst, b"");
                rst.ack = Some(syn.seq.wrapping_add(1));
                out = host.exchange(&[rst]);
            } else {
                let synack = backend.next(TcpControl::Syn, b"");
                backend.absorb(&host.exchange(&[synack]));
                assert!(
                    backend.received.ends_with(REQUEST),
                    "the request reached it"
                );
                break;
            }
        }
        tried
    };
    assert_eq!(
        serve(&mut host, 40_001, BACKEND_PORT),
        [BACKEND_PORT, SECOND]
    );
    for port in 40_002..40_006 {
        assert_eq!(
            serve(&mut host, port, BACKEND_PORT),
            [SECOND],
            "client {port}"
        );
    }
    host.advance(Duration::from_secs(10));
    let mut firsts: Vec<u16> = (40_006..40_008)
        .map(|port| serve(&mut host, port, 0)[0])
        .collect();
    firsts.sort();
    assert_eq!(firsts, [BACKEND_PORT, SECOND], "in the turn again");
}

/// A check that expects an interim status (`expect = 103`) passes on it:
/// the interim responses passed over are only those it does not expect.
#[test]
fn a_check_expecting_an_interim_status_passes_on_it() {
    let expect = control::config::StatusRange::exact(103);
    assert_eq!(one_check(expect, "HTTP/1.1 103 Early Hints"), (1, 0));
}

/// The health counters after one HTTP check expecting `expect` that the
/// member answers with `status_line`.
fn one_check(expect: control::config::StatusRange, status_line: &str) -> (u64, u64) {
    let mut host = HostLab::new();
    let member = Member::new(SocketAddrV4::new(HOST_IP, BACKEND_PORT), 1, MemberState::Up);
    let mut pool = Pool::new("web".into(), Balance::RoundRobin, vec![member]);
    pool.check = Some(HealthCheck {
        kind: HealthKind::Http,
        request: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        expect,
        interval: Duration::from_secs(60),
        timeout: Duration::from_secs(30),
        rise: 1,
        fall: 1,
    });
    host.mem.engine.add_pool(pool);
    let syn = host.wait_for_syn();
    let mut backend = HostConn::accepted(&syn, 7_000);
    let synack = backend.next(TcpControl::Syn, b"");
    backend.absorb(&host.exchange(&[synack]));
    let seg = backend.next(TcpControl::Psh, format!("{status_line}\r\n\r\n").as_bytes());
    backend.absorb(&host.exchange(&[seg]));
    assert!(backend.reset, "the check ends with a reset");
    let c = host.mem.engine.counters();
    (c.health_checks, c.health_failures)
}

/// By default a check passes on 200 to 399, as HAProxy's and nginx's do
/// (before, only 200: a member redirecting its health path was down); a
/// range or class narrows it.
#[test]
fn a_check_passes_on_any_status_it_expects() {
    use control::config::StatusRange;
    let passes = |expect, line| one_check(expect, line) == (1, 0);
    let any = StatusRange::default();
    assert!(passes(any, "HTTP/1.1 200 OK"));
    assert!(passes(any, "HTTP/1.1 301 Moved Permanently"));
    assert!(passes(any, "HTTP/1.0 204 No Content"));
    assert!(!passes(any, "HTTP/1.1 404 Not Found"));
    assert!(!passes(any, "HTTP/1.1 503 Service Unavailable"));
    let success = StatusRange::parse("2xx").unwrap();
    assert!(passes(success, "HTTP/1.1 204 No Content"));
    assert!(!passes(success, "HTTP/1.1 302 Found"));
    assert!(passes(StatusRange::exact(404), "HTTP/1.1 404 Not Found"));
    assert!(!passes(StatusRange::exact(404), "HTTP/1.1 200 OK"));
}
