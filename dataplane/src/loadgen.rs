//! A kernel-bypass HTTP load generator on tlsdp's own stack: a client
//! TCP engine behind an [`Interface`] on any [`Port`]. It opens connections
//! (active open), sends `GET /bytes/N`, reads and checks the length of each
//! response, and closes, keeping a fixed number of connections in flight.
//! Used for in-memory benchmarks of the engine and for simulation tests.

use std::net::Ipv4Addr;

use crate::net::{Interface, InterfaceConfig, Verdict};
use crate::port::{PacketBuf, Port};
use crate::stats::Counters;
use crate::tcp::{CloseReason, ConnId, Event, FlowKey, TcpConfig, TcpEngine};
use crate::time::Instant;
use crypto::client::{LoadClientConfig, LoadClientSession};

/// What to ask for.
#[derive(Debug, Clone, Copy)]
pub struct LoadConfig {
    pub server: Ipv4Addr,
    pub port: u16,
    /// Response body size (`GET /bytes/N`).
    pub body: u64,
    /// Requests per connection (1: HTTP/1.0-style close after each; 0:
    /// open and hold the connection without a request).
    pub requests_per_conn: u32,
    /// Connections kept open at once.
    pub concurrency: usize,
    /// Connections to open in all.
    pub total_conns: u64,
    /// Source addresses: the interface's address and the next ones (each
    /// gives 55 535 ports), so many connections can be open at once.
    pub sources: u16,
}

/// Results so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadStats {
    pub opened: u64,
    pub completed: u64,
    pub failed: u64,
    pub responses: u64,
    pub body_bytes: u64,
}

/// Per-connection client state.
#[derive(Debug, Default)]
pub struct ClientConn {
    requests_left: u32,
    /// Bytes of the current response still expected (head unknown: None).
    body_left: Option<u64>,
    head: Vec<u8>,
    /// TLS mode: the client session.
    tls: Option<Box<LoadClientSession>>,
}

/// The load generator.
#[derive(Debug)]
pub struct LoadGen<P: Port> {
    port: P,
    iface: Interface,
    tcp: TcpEngine<ClientConn>,
    cfg: LoadConfig,
    stats: LoadStats,
    counters: Counters,
    rx: Vec<P::Buf>,
    tx: Vec<P::Buf>,
    events: Vec<Event>,
    /// Connections established and held open (hold mode).
    held: u64,
    /// Completed connections that later ended abnormally (reset, timeout).
    held_lost: u64,
    /// 4-tuples skipped because still in use.
    skipped: u64,
    in_flight: usize,
    request: Vec<u8>,
    /// Connections (by slot) whose last response arrived: they count as
    /// completed at once, not when TIME-WAIT ends.
    finished: Vec<bool>,
    /// TLS mode: client settings, and buffers shared by all connections.
    tls: Option<LoadClientConfig>,
    tls_out: Vec<u8>,
    plain: Vec<u8>,
}

impl<P: Port> LoadGen<P> {
    pub fn new(port: P, mut iface_cfg: InterfaceConfig, tcp: TcpConfig, cfg: LoadConfig) -> Self {
        iface_cfg.mac = port.mac();
        let mut iface = Interface::new(iface_cfg);
        for i in 1..u32::from(cfg.sources.max(1)) {
            iface.add_address(Ipv4Addr::from(u32::from(iface_cfg.addr) + i));
        }
        let close = if cfg.requests_per_conn <= 1 {
            "close"
        } else {
            "keep-alive"
        };
        let request = format!(
            "GET /bytes/{} HTTP/1.1\r\nHost: tlsdp\r\nConnection: {close}\r\n\r\n",
            cfg.body
        )
        .into_bytes();
        Self {
            port,
            iface,
            tcp: TcpEngine::new(tcp, Instant::ZERO, 0x9e37_79b9),
            cfg,
            stats: LoadStats::default(),
            counters: Counters::default(),
            rx: Vec::with_capacity(64),
            tx: Vec::with_capacity(64),
            events: Vec::with_capacity(256),
            skipped: 0,
            held: 0,
            held_lost: 0,
            in_flight: 0,
            request,
            finished: Vec::new(),
            tls: None,
            tls_out: Vec::new(),
            plain: Vec::new(),
        }
    }

    /// Speaks TLS to the server (full handshake per connection).
    pub fn with_tls(mut self, cfg: LoadClientConfig) -> Self {
        self.tls = Some(cfg);
        self.plain = vec![0; 64 * 1024];
        self
    }

    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// Connections established and held (hold mode).
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Completed connections that ended abnormally afterwards.
    pub fn lost_after_completion(&self) -> u64 {
        self.held_lost
    }

    /// All connections opened and all their responses received (the last
    /// closes may still be under way).
    pub fn done(&self) -> bool {
        self.stats.opened == self.cfg.total_conns && self.in_flight == 0
    }

    pub fn tcp(&self) -> &TcpEngine<ClientConn> {
        &self.tcp
    }

    /// The port (tests wrap it to record traffic).
    pub fn port_mut(&mut self) -> &mut P {
        &mut self.port
    }

    /// One iteration: receive, react, open connections, transmit.
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while n < 1024 {
            let got = self.port.rx_burst(now, &mut self.rx, 64);
            if got == 0 {
                break;
            }
            n += got;
        }
        for mut buf in self.rx.drain(..) {
            match self.iface.process(now, &mut buf, &mut self.counters) {
                Verdict::Tcp {
                    src,
                    dst,
                    start,
                    end,
                } => {
                    let _ = self.tcp.input(now, src, dst, &buf.data()[start..end]);
                }
                // ARP and ICMP replies, rewritten in place.
                Verdict::Transmit => self.tx.push(buf),
                _ => {}
            }
        }
        self.tcp.poll_timers(now);
        self.tcp.drain_events(&mut self.events);
        let mut events = std::mem::take(&mut self.events);
        for ev in events.drain(..) {
            self.on_event(ev);
        }
        self.events = events;
        // Resolve the server first, so no SYN waits on ARP.
        let resolved = self.iface.resolve(self.cfg.server, now).is_some();
        while resolved
            && self.in_flight < self.cfg.concurrency
            && self.stats.opened < self.cfg.total_conns
        {
            self.open(now);
        }
        let (port, iface, tx) = (&mut self.port, &mut self.iface, &mut self.tx);
        self.tcp.transmit(now, |seg| {
            let Some(mut buf) = port.alloc() else {
                return false;
            };
            if iface.write_tcp(now, seg, &mut buf) == Verdict::Transmit {
                tx.push(buf);
            }
            true
        });
        while let Some(ip) = self.iface.take_probe() {
            if let Some(mut buf) = self.port.alloc() {
                self.iface.write_arp_request(ip, &mut buf);
                self.tx.push(buf);
            }
        }
        while !self.tx.is_empty() {
            if self.port.tx_burst(now, &mut self.tx) == 0 {
                self.tx.clear();
            }
        }
        n
    }

    fn open(&mut self, now: Instant) {
        let sources = u64::from(self.cfg.sources.max(1));
        let n = self.stats.opened + self.skipped;
        let source = Ipv4Addr::from(u32::from(self.iface.config().addr) + (n % sources) as u32);
        let port = 10_000 + ((n / sources) % 55_535) as u16;
        let key = FlowKey {
            local: source,
            local_port: port,
            remote: self.cfg.server,
            remote_port: self.cfg.port,
        };
        let Ok(id) = self.tcp.connect(now, key) else {
            // That 4-tuple is still in use: try the next one next time.
            self.skipped += 1;
            return;
        };
        if let Some(c) = self.tcp.app(id) {
            c.requests_left = self.cfg.requests_per_conn.max(1);
        }
        self.stats.opened += 1;
        self.in_flight += 1;
    }

    /// Counts a connection as completed now (its close may follow later).
    fn finish(&mut self, id: ConnId) {
        let slot = id.slot();
        if self.finished.len() <= slot {
            self.finished.resize(slot + 1, false);
        }
        self.finished[slot] = true;
        self.in_flight -= 1;
        self.stats.completed += 1;
    }

    fn send_request(&mut self, id: ConnId) {
        let req = std::mem::take(&mut self.request);
        if let Some(c) = self.tcp.app(id) {
            c.body_left = None;
            c.head.clear();
            if let Some(t) = &mut c.tls {
                t.write_plain(&req);
                self.request = req;
                self.flush_tls(id);
                return;
            }
        }
        let n = self.tcp.send(id, &req);
        debug_assert_eq!(n, req.len());
        self.request = req;
    }

    /// Moves the session's TLS bytes into the send buffer (as they fit).
    fn flush_tls(&mut self, id: ConnId) {
        let mut out = std::mem::take(&mut self.tls_out);
        if let Some(t) = self.tcp.app(id).and_then(|c| c.tls.as_mut()) {
            t.take_tls(&mut out);
        }
        let n = self.tcp.send(id, &out);
        out.drain(..n);
        if !out.is_empty() {
            // Does not happen with 256 KiB send buffers and one request.
            self.tcp.abort(id);
            out.clear();
        }
        self.tls_out = out;
    }

    /// TLS mode: ciphertext from TCP into the session, plaintext through
    /// the response parser.
    fn read_tls(&mut self, id: ConnId) {
        loop {
            let (a, b) = self.tcp.peek(id);
            if a.is_empty() && b.is_empty() {
                break;
            }
            let Some(c) = self.tcp.app(id) else { return };
            let Some(mut t) = c.tls.take() else { return };
            let (a, b) = self.tcp.peek(id);
            let chunk = if a.is_empty() { b } else { a };
            let taken = t.receive(chunk);
            let Ok(taken) = taken else {
                self.tcp.abort(id);
                return;
            };
            self.tcp.consume(id, taken);
            let mut plain = std::mem::take(&mut self.plain);
            loop {
                let n = t.read_plain(&mut plain);
                if n == 0 {
                    break;
                }
                if let Some(c) = self.tcp.app(id) {
                    c.tls = Some(t);
                }
                self.feed(id, &plain[..n]);
                let Some(back) = self.tcp.app(id).and_then(|c| c.tls.take()) else {
                    self.plain = plain;
                    return;
                };
                t = back;
            }
            self.plain = plain;
            if let Some(c) = self.tcp.app(id) {
                c.tls = Some(t);
            }
            if taken == 0 {
                break;
            }
        }
        self.flush_tls(id);
    }

    /// Runs the response parser over plaintext (all of it is taken).
    fn feed(&mut self, id: ConnId, mut data: &[u8]) {
        while !data.is_empty() {
            let Some(c) = self.tcp.app(id) else { return };
            match c.body_left {
                None => {
                    let mut used = data.len();
                    for (i, &byte) in data.iter().enumerate() {
                        c.head.push(byte);
                        if c.head.ends_with(b"\r\n\r\n") {
                            used = i + 1;
                            c.body_left = Some(content_length(&c.head).unwrap_or(0));
                            break;
                        }
                    }
                    data = &data[used..];
                    if c.body_left == Some(0) {
                        self.response_done(id);
                    }
                }
                Some(left) => {
                    let n = (data.len() as u64).min(left);
                    data = &data[n as usize..];
                    self.stats.body_bytes += n;
                    c.body_left = Some(left - n);
                    if left == n {
                        self.response_done(id);
                    }
                }
            }
        }
    }

    /// The current response is complete: the next request, or close.
    fn response_done(&mut self, id: ConnId) {
        self.stats.responses += 1;
        let Some(c) = self.tcp.app(id) else { return };
        c.requests_left -= 1;
        if c.requests_left == 0 {
            self.tcp.close(id);
            self.finish(id);
        } else {
            self.send_request(id);
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Connected(id) => {
                if let Some(cfg) = &self.tls {
                    match LoadClientSession::new(cfg, "tlsdp.test") {
                        Ok(t) => {
                            if let Some(c) = self.tcp.app(id) {
                                c.tls = Some(Box::new(t));
                            }
                        }
                        Err(_) => self.tcp.abort(id),
                    }
                    // The ClientHello goes now (also when only holding).
                    self.flush_tls(id);
                }
                if self.cfg.requests_per_conn == 0 {
                    // Hold mode: the connection counts once established.
                    self.finish(id);
                    self.held += 1;
                } else {
                    self.send_request(id);
                }
            }
            Event::Readable(id) if self.tls.is_some() => self.read_tls(id),
            Event::Readable(id) => self.read(id),
            Event::PeerClosed(id) => self.tcp.close(id),
            Event::Closed(id, reason) => {
                let slot = id.slot();
                if self.finished.get(slot).copied().unwrap_or(false) {
                    self.finished[slot] = false;
                    if reason != CloseReason::Normal {
                        self.held_lost += 1;
                    }
                } else {
                    // Ended before its last response.
                    self.in_flight -= 1;
                    debug_assert_ne!(reason, CloseReason::Normal);
                    self.stats.failed += 1;
                }
            }
            Event::Accepted(_) | Event::Writable(_) => {}
        }
    }

    fn read(&mut self, id: ConnId) {
        loop {
            let (a, b) = self.tcp.peek(id);
            let avail = a.len() + b.len();
            if avail == 0 {
                return;
            }
            let Some(body_left) = self.tcp.app(id).map(|c| c.body_left) else {
                return;
            };
            match body_left {
                None => {
                    // Collect the head (small) until the blank line.
                    let mut used = 0;
                    let c_head_done;
                    {
                        let Some(c) = self.tcp.app(id) else { return };
                        let mut head = std::mem::take(&mut c.head);
                        let (a, b) = self.tcp.peek(id);
                        for &byte in a.iter().chain(b.iter()) {
                            head.push(byte);
                            used += 1;
                            if head.ends_with(b"\r\n\r\n") {
                                break;
                            }
                        }
                        c_head_done = head.ends_with(b"\r\n\r\n");
                        let len = c_head_done.then(|| content_length(&head)).flatten();
                        let Some(c) = self.tcp.app(id) else { return };
                        c.head = head;
                        if c_head_done {
                            c.body_left = Some(len.unwrap_or(0));
                        }
                    }
                    self.tcp.consume(id, used);
                    if !c_head_done {
                        return;
                    }
                }
                Some(left) => {
                    let n = (avail as u64).min(left);
                    self.tcp.consume(id, n as usize);
                    self.stats.body_bytes += n;
                    let Some(c) = self.tcp.app(id) else { return };
                    let left = left - n;
                    c.body_left = Some(left);
                    if left == 0 {
                        self.stats.responses += 1;
                        c.requests_left -= 1;
                        if c.requests_left == 0 {
                            self.tcp.close(id);
                            self.finish(id);
                        } else {
                            self.send_request(id);
                        }
                    }
                }
            }
        }
    }
}

fn content_length(head: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(head).ok()?;
    text.split("\r\n").find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}
