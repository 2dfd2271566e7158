//! Deadlines for what a client owes, over the in-memory link with the
//! test's host as client and backend: a client that sends nothing,
//! trickles a request head or a ClientHello, or goes quiet between
//! requests is reset at its VIP's deadline (counted by kind) instead of
//! being held until TCP's 300 s idle timeout; a proxied TLS client that
//! closes mid-handshake is closed at once. Simulated time, one second a
//! step.

mod common;

use std::time::Duration;

use common::host::{HostConn, HostLab, Seg, DUT_IP};
use common::vips::{lab, BACKEND, PLAIN, PROXY, PROXY_TLS, TLS};
use dataplane::app::deadlines::Timeouts;
use smoltcp::wire::TcpControl;

/// The host's side of the lab: its clients and the backend connections
/// the engine opened to it (each accepted at once).
struct Host {
    lab: HostLab,
    backends: Vec<HostConn>,
}

impl Host {
    fn new(lab: HostLab) -> Self {
        Self {
            lab,
            backends: Vec::new(),
        }
    }

    /// Sends `segs`, hands what came back to `clients` and the backends,
    /// and accepts new backend connections.
    fn exchange(&mut self, segs: &[Seg], clients: &mut [&mut HostConn]) {
        let mut out = self.lab.exchange(segs);
        loop {
            for c in clients.iter_mut() {
                c.absorb(&out);
            }
            for b in &mut self.backends {
                b.absorb(&out);
            }
            let mut accept = Vec::new();
            for syn in out
                .iter()
                .filter(|s| s.dst_port == BACKEND && s.control == TcpControl::Syn)
            {
                let mut b = HostConn::accepted(syn, 9_000);
                accept.push(b.next(TcpControl::Syn, b""));
                self.backends.push(b);
            }
            if accept.is_empty() {
                return;
            }
            out = self.lab.exchange(&accept);
        }
    }

    /// A connection to `port`, its handshake done.
    fn connect(&mut self, port: u16, vip: u16) -> HostConn {
        let mut c = HostConn::client(port, vip, 1_000);
        let syn = c.next(TcpControl::Syn, b"");
        self.exchange(&[syn], &mut [&mut c]);
        let ack = c.next(TcpControl::None, b"");
        self.exchange(&[ack], &mut [&mut c]);
        assert!(c.rcv_nxt.is_some() && !c.reset, "connected to :{vip}");
        c
    }

    /// Runs up to `max_s` seconds, one a step, sending what `each(second,
    /// conn)` gives at each; the second at which `c` was reset. (Each
    /// exchange takes a few simulated µs, so a deadline of `d` seconds
    /// passes in step `d` or `d + 1`: see [`within_a_second_of`].)
    fn reset_after(
        &mut self,
        c: &mut HostConn,
        max_s: u64,
        mut each: impl FnMut(u64, &mut HostConn) -> Vec<Seg>,
    ) -> Option<u64> {
        for s in 1..=max_s {
            self.lab.mem.now = self.lab.mem.now + Duration::from_secs(1);
            let segs = each(s, c);
            self.exchange(&segs, &mut [&mut *c]);
            if c.reset {
                return Some(s);
            }
        }
        None
    }

    fn counters(&self) -> dataplane::stats::Counters {
        *self.lab.mem.engine.counters()
    }
}

/// Whether a reset seen at step `at` is the deadline of `d` seconds.
fn within_a_second_of(at: Option<u64>, d: u64) -> bool {
    at.is_some_and(|s| s == d || s == d + 1)
}

/// Nothing, each second.
fn silent(_: u64, _: &mut HostConn) -> Vec<Seg> {
    Vec::new()
}

#[test]
fn a_client_that_sends_nothing_is_reset_at_its_deadline() {
    let mut host = Host::new(lab());
    // TLS: 10 s from the SYN to the handshake's end; plain: 30 s for the
    // request head (the responder) or the first bytes (the proxy).
    for (i, (vip, deadline)) in [(TLS, 10), (PROXY_TLS, 10), (PLAIN, 30), (PROXY, 30)]
        .into_iter()
        .enumerate()
    {
        let mut c = host.connect(40_000 + i as u16, vip);
        let at = host.reset_after(&mut c, 120, silent);
        assert!(
            within_a_second_of(at, deadline),
            "a silent client of :{vip}: {at:?}"
        );
    }
    let n = host.counters();
    assert_eq!((n.tls_handshake_timeouts, n.request_timeouts), (2, 2));
    assert_eq!(n.tls_abandoned, 0, "timeouts are not counted as abandoned");
    // The plain proxy's backend connection went with its client.
    assert!(host.backends.iter().all(|b| b.reset), "backends reset");
    assert_eq!(host.lab.mem.engine.tcp().counters().active, 0);
}

#[test]
fn a_trickled_head_or_client_hello_is_reset_at_its_deadline() {
    let mut host = Host::new(lab());
    // One byte a second of a request head that never ends.
    let mut c = host.connect(41_000, PLAIN);
    let head =
        b"GET / HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let at = host.reset_after(&mut c, 120, |s, c| {
        vec![c.next(TcpControl::Psh, &head[s as usize - 1..s as usize])]
    });
    assert!(
        within_a_second_of(at, 30),
        "a trickled request head: {at:?}"
    );
    // One byte a second of a ClientHello record (a 512-byte handshake
    // record that never completes).
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.resize(512, 0x42);
    for (vip, port) in [(TLS, 41_001), (PROXY_TLS, 41_002)] {
        let mut c = host.connect(port, vip);
        let at = host.reset_after(&mut c, 120, |s, c| {
            vec![c.next(TcpControl::Psh, &hello[s as usize - 1..s as usize])]
        });
        assert!(
            within_a_second_of(at, 10),
            "a trickled ClientHello to :{vip}: {at:?}"
        );
    }
    let n = host.counters();
    assert_eq!((n.tls_handshake_timeouts, n.request_timeouts), (2, 1));
}

#[test]
fn keep_alive_waits_the_request_timeout_for_each_next_request() {
    let mut host = Host::new(lab());
    let mut c = host.connect(42_000, PLAIN);
    let get = b"GET /bytes/10 HTTP/1.1\r\nHost: t\r\n\r\n";
    // A request every 20 s keeps it: each answer starts a new 30 s wait.
    let at = host.reset_after(&mut c, 100, |s, c| {
        let mut segs = vec![c.next(TcpControl::None, b"")];
        if s % 20 == 0 {
            segs.push(c.next(TcpControl::Psh, get));
        }
        segs
    });
    assert_eq!(at, None, "a request every 20 s keeps the connection");
    let answers = String::from_utf8_lossy(&c.received)
        .matches("HTTP/1.1 200")
        .count();
    assert_eq!(answers, 5, "every request answered");
    // Then quiet once the last answer is acknowledged: reset 30 s later.
    let ack = c.next(TcpControl::None, b"");
    host.exchange(&[ack], &mut [&mut c]);
    let at = host.reset_after(&mut c, 60, silent);
    assert!(within_a_second_of(at, 30), "{at:?}");
    assert_eq!(host.counters().request_timeouts, 1);
}

#[test]
fn a_vips_own_timeouts_replace_the_defaults() {
    let mut host = Host::new(lab());
    let app = host.lab.mem.engine.app_mut();
    let short = Timeouts {
        handshake: Duration::from_secs(2),
        request: Duration::from_secs(60),
        idle: Some(Duration::from_secs(5)),
        ..Timeouts::default()
    };
    app.set_vip_timeouts(DUT_IP, TLS, short);
    app.set_vip_timeouts(DUT_IP, PLAIN, short);
    let mut c = host.connect(43_000, TLS);
    let at = host.reset_after(&mut c, 30, silent);
    assert!(within_a_second_of(at, 2), "handshake 2 s: {at:?}");
    // Silence ends the plain connection at its idle timeout (5 s) before
    // its request deadline (60 s).
    let mut c = host.connect(43_001, PLAIN);
    let at = host.reset_after(&mut c, 90, silent);
    assert!(within_a_second_of(at, 5), "idle 5 s: {at:?}");
    let n = host.counters();
    assert_eq!((n.tls_handshake_timeouts, n.request_timeouts), (1, 0));
}

#[test]
fn a_proxied_tls_client_that_closes_mid_handshake_is_closed_at_once() {
    let mut host = Host::new(lab());
    let mut c = host.connect(44_000, PROXY_TLS);
    let part = c.next(TcpControl::Psh, &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]);
    let fin = c.next(TcpControl::Fin, b"");
    host.exchange(&[part, fin], &mut [&mut c]);
    host.lab.mem.now = host.lab.mem.now + Duration::from_millis(10);
    host.exchange(&[], &mut [&mut c]);
    assert!(
        c.fin_at.is_some() || c.reset,
        "the engine closed its side too (it used to sit in CLOSE-WAIT for 300 s)"
    );
    assert_eq!(host.backends.len(), 0, "no backend was opened");
}

/// A client that stops reading holds its window closed and ACKs every
/// probe, so TCP never gives it up (RFC 9293 §3.8.6.1): without more, a
/// few thousand of them would hold the connection table and their send
/// rings for ever. Once none of what waits for it has been acknowledged
/// for the VIP's send timeout (60 s by default), it is reset and counted
/// (RFC 6429 leaves that to the application). A client that reads
/// slowly, acknowledging some every 30 s, is not.
#[test]
fn a_client_that_stops_reading_is_reset_at_its_send_timeout() {
    let mut host = Host::new(lab());
    let get = b"GET /bytes/10000000 HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut stopped = host.connect(45_000, PLAIN);
    let mut slow = host.connect(45_001, PLAIN);
    let (g1, g2) = (
        stopped.next(TcpControl::Psh, get),
        slow.next(TcpControl::Psh, get),
    );
    host.exchange(&[g1, g2], &mut [&mut stopped, &mut slow]);
    // A few round trips with the window open, then ACKs with it closed.
    for _ in 0..4 {
        host.lab.mem.now = host.lab.mem.now + Duration::from_millis(1);
        let acks = [
            stopped.next(TcpControl::None, b""),
            slow.next(TcpControl::None, b""),
        ];
        host.exchange(&acks, &mut [&mut stopped, &mut slow]);
    }
    assert!(
        stopped.received.len() > 20_000,
        "{}",
        stopped.received.len()
    );
    let closed =
        |c: &HostConn, ack: u32| Seg::to(c.dut_port, c.port, c.snd_nxt, Some(ack)).window(0);
    // `stopped` ACKs every second with its window closed, never taking
    // more; `slow` too, but every 30 s it takes what came and offers two
    // segments' worth of window.
    let held = stopped.rcv_nxt.expect("connected");
    let mut slow_acked = slow.rcv_nxt.expect("connected");
    let slow_before = slow.received.len();
    let mut stopped_at = None;
    for s in 1..=300u64 {
        host.lab.mem.now = host.lab.mem.now + Duration::from_secs(1);
        let mut segs = Vec::new();
        if !stopped.reset {
            segs.push(closed(&stopped, held));
        }
        if s % 30 == 0 {
            slow_acked = slow.rcv_nxt.expect("connected");
            segs.push(
                Seg::to(slow.dut_port, slow.port, slow.snd_nxt, Some(slow_acked)).window(2_920),
            );
        } else {
            segs.push(closed(&slow, slow_acked));
        }
        let out = host.lab.exchange(&segs);
        stopped.absorb(&out);
        slow.absorb(&out);
        if let Some(rst) = out
            .iter()
            .find(|g| g.dst_port == stopped.port && g.control == TcpControl::Rst)
        {
            // At the edge of the closed window, where the client takes it
            // (after a probe's byte, SND.NXT is past it).
            assert_eq!(rst.seq, held, "the reset's sequence number");
            stopped_at.get_or_insert(s);
        }
    }
    // The ACK closing the window, at second 1, took the last of its data.
    assert!(
        within_a_second_of(stopped_at, 61),
        "reset at {stopped_at:?} s"
    );
    assert!(
        host.lab.mem.engine.tcp().counters().window_probes > 0,
        "probed"
    );
    assert!(!slow.reset, "a slow reader is not a stopped one");
    assert!(slow.received.len() >= slow_before + 9 * 2_920, "it read on");
    assert_eq!(host.counters().send_timeouts, 1);
}

/// A client whose window stayed closed for 52 s, then opened with a window
/// update that was lost, answering only the engine's zero-window probes:
/// a probe must find the open window before the 60 s send timeout. The
/// probes' interval doubles (RFC 9293 §3.8.6.1) but is held to a quarter of
/// the send timeout; doubling on to 51 s, the next probe came at 102 s and
/// the send timeout reset a client that was reading again (seen on a
/// loaded CI machine over a veth with 2 % drops).
#[test]
fn a_window_reopened_unseen_is_found_by_a_probe_before_the_send_timeout() {
    let mut host = Host::new(lab());
    let get = b"GET /bytes/10000000 HTTP/1.1\r\nHost: t\r\n\r\n";
    let mut c = host.connect(45_100, PLAIN);
    let g = c.next(TcpControl::Psh, get);
    host.exchange(&[g], &mut [&mut c]);
    for _ in 0..4 {
        host.lab.mem.now = host.lab.mem.now + Duration::from_millis(1);
        let ack = c.next(TcpControl::None, b"");
        host.exchange(&[ack], &mut [&mut c]);
    }
    // Everything so far taken, the window closed.
    let held = c.rcv_nxt.expect("connected");
    let close = Seg::to(c.dut_port, c.port, c.snd_nxt, Some(held)).window(0);
    host.lab.exchange(&[close]);
    let before = c.received.len();
    let mut probes = 0;
    let mut reopened_at = None;
    for tenth in 1..=1_200u64 {
        if c.received.len() >= 10_000_000 {
            break; // the whole body (then the keep-alive wait)
        }
        host.lab.mem.now = host.lab.mem.now + Duration::from_millis(100);
        // Once open, it acknowledges what it reads.
        let acks: Vec<Seg> = reopened_at
            .map(|_| c.next(TcpControl::None, b""))
            .into_iter()
            .collect();
        let out = host.lab.exchange(&acks);
        let mine: Vec<Seg> = out
            .into_iter()
            .filter(|s| s.dst_port == c.port && s.src_port == c.dut_port)
            .collect();
        assert!(
            mine.iter().all(|s| s.control != TcpControl::Rst),
            "reset at {} s",
            tenth / 10
        );
        if mine.is_empty() {
            continue;
        }
        if reopened_at.is_some() {
            c.absorb(&mine);
        } else if tenth < 520 {
            // Closed: the probe's byte dropped, its ACK says so again.
            probes += 1;
            let ack = Seg::to(c.dut_port, c.port, c.snd_nxt, Some(held)).window(0);
            host.lab.exchange(&[ack]);
        } else {
            // Open (its update was lost): the probe's answer shows it.
            reopened_at.get_or_insert(tenth);
            c.absorb(&mine);
            let ack = c.next(TcpControl::None, b"");
            let more = host.lab.exchange(&[ack]);
            c.absorb(&more);
        }
    }
    let found = reopened_at.expect("a probe after the window opened");
    assert!(found <= 600, "found at {} s", found as f64 / 10.0);
    assert!(probes >= 6, "{probes} probes while closed");
    assert!(c.received.len() > before, "it read on");
    assert!(
        c.received.len() >= 10_000_000,
        "all of it: {}",
        c.received.len()
    );
    assert!(!c.reset);
    assert_eq!(host.counters().send_timeouts, 0);
}

/// After we close first, FIN-WAIT-2 waits for the client's FIN at most
/// `[tcp] fin_wait2_timeout_s` (60 s) from the ACK of ours or the client's
/// last data, as Linux's `tcp_fin_timeout`: a client that only ACKs now
/// and then (which refreshes the idle timer) is reset then, while one
/// still sending (a half-close) is not.
#[test]
fn fin_wait_2_ends_at_its_timeout_unless_data_comes() {
    let mut host = Host::new(lab());
    // TCP's rule alone: the responder's own bound on a lingering close
    // (its request timeout) set past the test.
    let long = Timeouts {
        request: Duration::from_secs(1000),
        ..Timeouts::default()
    };
    host.lab
        .mem
        .engine
        .app_mut()
        .set_vip_timeouts(DUT_IP, PLAIN, long);
    let get = b"GET /bytes/10 HTTP/1.0\r\n\r\n";
    let mut acking = host.connect(46_000, PLAIN);
    let mut sending = host.connect(46_001, PLAIN);
    let (g1, g2) = (
        acking.next(TcpControl::Psh, get),
        sending.next(TcpControl::Psh, get),
    );
    host.exchange(&[g1, g2], &mut [&mut acking, &mut sending]);
    assert!(
        acking.fin_at.is_some() && sending.fin_at.is_some(),
        "answered and closed"
    );
    let acks = [
        acking.next(TcpControl::None, b""),
        sending.next(TcpControl::None, b""),
    ];
    host.exchange(&acks, &mut [&mut acking, &mut sending]);
    // Every 10 s: `acking` an ACK, `sending` a byte too until second 100.
    let mut reset_at = [None, None];
    for s in 1..=200u64 {
        host.lab.mem.now = host.lab.mem.now + Duration::from_secs(1);
        let mut segs = Vec::new();
        if s % 10 == 0 {
            if !acking.reset {
                segs.push(acking.next(TcpControl::None, b""));
            }
            if !sending.reset {
                let byte: &[u8] = if s <= 100 { b"x" } else { b"" };
                segs.push(sending.next(TcpControl::None, byte));
            }
        }
        host.exchange(&segs, &mut [&mut acking, &mut sending]);
        for (at, c) in reset_at.iter_mut().zip([&acking, &sending]) {
            if c.reset {
                at.get_or_insert(s);
            }
        }
    }
    assert!(within_a_second_of(reset_at[0], 60), "acking: {reset_at:?}");
    assert!(
        within_a_second_of(reset_at[1], 160),
        "sending: {reset_at:?}"
    );
    assert_eq!(host.lab.mem.engine.tcp().counters().fin_wait2_timeouts, 2);
}

/// A keep-alive client reading its response slowly (two segments' worth
/// of window every 2 s, a response queued whole at once): the wait for
/// its next request starts once the response is all acknowledged, not
/// once it is queued. Before, the request deadline ran from the moment
/// the body was queued, and a client reading slower than the ring's
/// size over the request timeout (256 KiB in 30 s) was reset mid-
/// response, counted as a request timeout.
#[test]
fn the_next_request_deadline_starts_when_the_response_is_delivered() {
    let mut host = Host::new(lab());
    let mut c = host.connect(46_000, PLAIN);
    let bytes = 150_000;
    let get = format!("GET /bytes/{bytes} HTTP/1.1\r\nHost: t\r\n\r\n");
    let g = c.next(TcpControl::Psh, get.as_bytes());
    host.exchange(&[g], &mut [&mut c]);
    let (mut delivered_at, mut reset_at) = (None, None);
    for s in 1..=400u64 {
        host.lab.mem.now = host.lab.mem.now + Duration::from_secs(1);
        let mut segs = Vec::new();
        let whole = c.received.len() >= bytes;
        if s % 2 == 0 && !whole {
            let ack = c.rcv_nxt.expect("connected");
            segs.push(Seg::to(c.dut_port, c.port, c.snd_nxt, Some(ack)).window(2_920));
        } else if whole && delivered_at.is_none() {
            // Everything came: acknowledged with the window open.
            delivered_at = Some(s);
            segs.push(c.next(TcpControl::None, b""));
        }
        host.exchange(&segs, &mut [&mut c]);
        if c.reset {
            reset_at = Some(s);
            break;
        }
    }
    let delivered = delivered_at.expect("the whole response came");
    assert!(delivered > 60, "slow enough to matter: {delivered} s");
    assert!(c.received.len() >= bytes, "{}", c.received.len());
    // Then the wait for the next request: reset 30 s after delivery.
    let waited = reset_at.map(|r| r - delivered);
    assert!(within_a_second_of(waited, 30), "reset {waited:?} s after");
    assert_eq!(host.counters().request_timeouts, 1);
    assert_eq!(host.counters().send_timeouts, 0);
}

/// After its answer and our FIN, a client that trickles a byte every
/// 10 s (each dropped: the responder's lingering close) is reset one
/// request timeout (30 s) after our answer and FIN were acknowledged.
/// Before, each byte restarted FIN-WAIT-2's 60 s: a client held the
/// connection as long as it liked.
#[test]
fn a_lingering_close_is_bounded_by_the_request_timeout() {
    let mut host = Host::new(lab());
    let mut c = host.connect(47_000, PLAIN);
    let g = c.next(TcpControl::Psh, b"GET /bytes/10 HTTP/1.0\r\n\r\n");
    host.exchange(&[g], &mut [&mut c]);
    assert!(c.fin_at.is_some(), "answered and closed");
    let ack = c.next(TcpControl::None, b"");
    host.exchange(&[ack], &mut [&mut c]);
    let at = host.reset_after(&mut c, 300, |s, c| {
        if s % 10 == 0 {
            vec![c.next(TcpControl::Psh, b"x")]
        } else {
            Vec::new()
        }
    });
    // 30 s from the acknowledgement of our answer and FIN.
    assert!(within_a_second_of(at, 30), "{at:?}");
    assert_eq!(host.counters().request_timeouts, 0, "not a request's");
}
