//! A kernel-bypass HTTP load generator on tlsdp's own stack: an
//! [`Application`] ([`LoadClient`]) on the same engine loop as dpd's, on
//! any [`Port`]. It opens connections (active open), sends `GET /bytes/N`,
//! reads and checks the length of each response, and closes, keeping a
//! fixed number of connections in flight. Used for in-memory benchmarks of
//! the engine and for simulation tests.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::app::role::Roles;
use crate::app::{Application, Cx, Tcp};
use crate::engine::{Engine, EngineConfig};
use crate::net::InterfaceConfig;
use crate::port::Port;
use crate::stats::SharedCounters;
use crate::tcp::{CloseReason, ConnId, Event, FlowKey, TcpConfig};
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
    /// Connections established (plain) or TLS handshakes completed.
    pub handshakes: u64,
    pub completed: u64,
    pub failed: u64,
    pub responses: u64,
    pub body_bytes: u64,
    /// Responses that were no success with a length (a status outside
    /// 2xx, or no Content-Length): their connection was aborted, and
    /// neither counted as completed nor as failed.
    pub bad_responses: u64,
}

/// One client connection: the load generator's only role.
#[derive(Debug, Default)]
pub struct ClientConn {
    requests_left: u32,
    /// Bytes of the current response still expected (head unknown: None).
    body_left: Option<u64>,
    head: Vec<u8>,
    /// TLS mode: the client session.
    tls: Option<Box<LoadClientSession>>,
    /// Its last response arrived: it counts as completed at once, not when
    /// TIME-WAIT ends.
    finished: bool,
    /// TLS mode: the handshake completed (and was counted).
    handshaken: bool,
    /// Its response was no success ([`LoadStats::bad_responses`]): what
    /// follows is not read, and its close is not counted again.
    bad: bool,
}

/// The load generator's application: opens connections, asks, reads.
#[derive(Debug)]
pub struct LoadClient {
    cfg: LoadConfig,
    stats: LoadStats,
    conns: Roles<ClientConn>,
    /// The first source address (the others follow it).
    source: Ipv4Addr,
    /// The server's next hop is resolved: connections may open.
    ready: bool,
    /// Connections established and held open (hold mode).
    held: u64,
    /// Completed connections that later ended abnormally (reset, timeout).
    held_lost: u64,
    /// 4-tuples skipped because still in use.
    skipped: u64,
    in_flight: usize,
    request: Vec<u8>,
    /// TLS mode: client settings, and buffers shared by all connections.
    tls: Option<LoadClientConfig>,
    /// TLS mode: the server name sent (SNI).
    sni: String,
    /// The first source port (then upwards, wrapping at 65,535).
    first_port: u16,
    /// The run is over: each connection's current response is its last.
    winding_down: bool,
    tls_out: Vec<u8>,
    plain: Vec<u8>,
}

/// The load generator: [`LoadClient`] on an engine of its own.
pub struct LoadGen<P: Port> {
    engine: Engine<P, LoadClient>,
    /// Its addresses were announced (gratuitous ARP).
    announced: bool,
}

impl<P: Port> std::fmt::Debug for LoadGen<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadGen")
            .field("client", self.engine.app())
            .finish_non_exhaustive()
    }
}

impl<P: Port> LoadGen<P> {
    pub fn new(port: P, iface_cfg: InterfaceConfig, tcp: TcpConfig, cfg: LoadConfig) -> Self {
        let close = if cfg.requests_per_conn <= 1 {
            "close"
        } else {
            "keep-alive"
        };
        let request = request_for(&format!("/bytes/{}", cfg.body), "tlsdp", close);
        let client = LoadClient {
            cfg,
            stats: LoadStats::default(),
            conns: Roles::default(),
            source: iface_cfg.addr,
            ready: false,
            held: 0,
            held_lost: 0,
            skipped: 0,
            in_flight: 0,
            request,
            tls: None,
            sni: "tlsdp.test".to_string(),
            first_port: 10_000,
            winding_down: false,
            tls_out: Vec::new(),
            plain: Vec::new(),
        };
        // A client takes what comes in big bursts: up to 1024 frames an
        // iteration.
        let engine_cfg = EngineConfig {
            tcp,
            burst: 64,
            rx_bursts: 16,
            isn_key: Some(0x9e37_79b9),
            ..EngineConfig::default()
        };
        let mut engine = Engine::with_app(engine_cfg, Arc::new(SharedCounters::default()), client);
        engine.add_port(port, iface_cfg);
        for i in 1..u32::from(cfg.sources.max(1)) {
            engine.add_address(Ipv4Addr::from(u32::from(iface_cfg.addr) + i));
        }
        Self {
            engine,
            announced: false,
        }
    }

    /// Speaks TLS to the server (full handshake per connection).
    pub fn with_tls(mut self, cfg: LoadClientConfig) -> Self {
        let c = self.engine.app_mut();
        c.tls = Some(cfg);
        c.plain = vec![0; 64 * 1024];
        self
    }

    /// Asks for `path` from `host` (the Host header, and the TLS server
    /// name) instead of `/bytes/N`; the body must then be `cfg.body`
    /// bytes long only if the caller checks it (every response is read to
    /// its Content-Length).
    pub fn with_target(mut self, path: &str, host: &str) -> Self {
        let c = self.engine.app_mut();
        let close = if c.cfg.requests_per_conn <= 1 {
            "close"
        } else {
            "keep-alive"
        };
        c.request = request_for(path, host, close);
        c.sni = host.to_string();
        self
    }

    /// Source ports start at `port` (10,000 by default): a second run
    /// against the same server starts where the first one's 4-tuples are
    /// not in the server's TIME-WAIT.
    pub fn with_first_port(mut self, port: u16) -> Self {
        self.engine.app_mut().first_port = port.max(1024);
        self
    }

    /// Keeps `n` connections in flight from now on (a ramp).
    pub fn set_concurrency(&mut self, n: usize) {
        self.engine.app_mut().cfg.concurrency = n;
    }

    /// The run is over: opens no more connections, and each one in
    /// flight ends (completed) after the response under way.
    pub fn stop_opening(&mut self) {
        let c = self.engine.app_mut();
        c.cfg.total_conns = c.stats.opened;
        c.winding_down = true;
    }

    /// Connections open now, not yet completed.
    pub fn in_flight(&self) -> usize {
        self.engine.app().in_flight
    }

    pub fn stats(&self) -> LoadStats {
        self.engine.app().stats
    }

    /// Connections established and held (hold mode).
    pub fn held(&self) -> u64 {
        self.engine.app().held
    }

    /// Completed connections that ended abnormally afterwards.
    pub fn lost_after_completion(&self) -> u64 {
        self.engine.app().held_lost
    }

    /// All connections opened and all their responses received (the last
    /// closes may still be under way).
    pub fn done(&self) -> bool {
        let c = self.engine.app();
        c.stats.opened == c.cfg.total_conns && c.in_flight == 0
    }

    pub fn tcp(&self) -> &Tcp {
        self.engine.tcp()
    }

    /// The port (tests wrap it to record traffic).
    pub fn port_mut(&mut self) -> &mut P {
        self.engine.port_mut(0)
    }

    /// One iteration of its engine; connections open once the server's
    /// next hop is resolved (so no SYN waits on ARP).
    pub fn poll(&mut self, now: Instant) -> usize {
        if !self.announced {
            // Our addresses may be known at another MAC (a previous run).
            self.engine.announce(now);
            self.announced = true;
        }
        if !self.engine.app().ready {
            let server = self.engine.app().cfg.server;
            self.engine.app_mut().ready = self.engine.resolve(server, now);
        }
        self.engine.poll(now)
    }
}

impl Application for LoadClient {
    fn resume(&mut self, cx: &mut Cx<'_>) {
        while self.ready
            && self.in_flight < self.cfg.concurrency
            && self.stats.opened < self.cfg.total_conns
        {
            self.open(cx);
        }
    }

    fn pending(&self) -> usize {
        0
    }

    fn on_event(&mut self, cx: &mut Cx<'_>, ev: Event) {
        match ev {
            Event::Connected(id) => self.connected(cx, id),
            Event::Readable(id) if self.tls.is_some() => self.read_tls(cx, id),
            Event::Readable(id) => self.read(cx, id),
            Event::PeerClosed(id) => cx.tcp.close(id),
            Event::Closed(id, reason) => {
                let (finished, bad) = self
                    .conns
                    .remove(id)
                    .map_or((false, false), |e| (e.role.finished, e.role.bad));
                if finished {
                    if reason != CloseReason::Normal {
                        self.held_lost += 1;
                    }
                } else if bad {
                    // Counted as a bad response when it came.
                    self.in_flight -= 1;
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

    fn on_tick(&mut self, _cx: &mut Cx<'_>) {}
}

impl LoadClient {
    fn open(&mut self, cx: &mut Cx<'_>) {
        let sources = u64::from(self.cfg.sources.max(1));
        let n = self.stats.opened + self.skipped;
        let source = Ipv4Addr::from(u32::from(self.source) + (n % sources) as u32);
        let span = u64::from(u16::MAX - 1024) + 1;
        let port = 1024 + ((u64::from(self.first_port - 1024) + n / sources) % span) as u16;
        let key = FlowKey {
            local: source,
            local_port: port,
            remote: self.cfg.server,
            remote_port: self.cfg.port,
        };
        let Ok(id) = cx.tcp.connect(cx.now, key) else {
            // That 4-tuple is still in use: try the next one next time.
            self.skipped += 1;
            return;
        };
        let conn = ClientConn {
            requests_left: self.cfg.requests_per_conn.max(1),
            ..ClientConn::default()
        };
        self.conns.insert(id, None, conn);
        self.stats.opened += 1;
        self.in_flight += 1;
    }

    fn connected(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        if self.tls.is_none() {
            self.stats.handshakes += 1;
        }
        if let Some(cfg) = &self.tls {
            match LoadClientSession::new(cfg, &self.sni) {
                Ok(t) => {
                    if let Some(e) = self.conns.get_mut(id) {
                        e.role.tls = Some(Box::new(t));
                    }
                }
                Err(_) => cx.tcp.abort(id),
            }
            // The ClientHello goes now (also when only holding).
            self.flush_tls(cx, id);
        }
        if self.cfg.requests_per_conn == 0 {
            // Hold mode: the connection counts once established.
            self.finish(id);
            self.held += 1;
        } else {
            self.send_request(cx, id);
        }
    }

    /// Counts a connection as completed now (its close may follow later).
    fn finish(&mut self, id: ConnId) {
        if let Some(e) = self.conns.get_mut(id) {
            e.role.finished = true;
        }
        self.in_flight -= 1;
        self.stats.completed += 1;
    }

    fn send_request(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        let Some(e) = self.conns.get_mut(id) else {
            return;
        };
        let c = &mut e.role;
        c.body_left = None;
        c.head.clear();
        if let Some(t) = &mut c.tls {
            t.write_plain(&self.request);
            self.flush_tls(cx, id);
            return;
        }
        let n = cx.tcp.send(id, &self.request);
        debug_assert_eq!(n, self.request.len());
    }

    /// Moves the session's TLS bytes into the send buffer (as they fit).
    fn flush_tls(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        let out = &mut self.tls_out;
        if let Some(t) = self.conns.get_mut(id).and_then(|e| e.role.tls.as_mut()) {
            t.take_tls(out);
        }
        let n = cx.tcp.send(id, out);
        out.drain(..n);
        if !out.is_empty() {
            // Does not happen with 256 KiB send buffers and one request.
            cx.tcp.abort(id);
            out.clear();
        }
    }

    /// TLS mode: ciphertext from TCP into the session, plaintext through
    /// the response parser.
    fn read_tls(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        loop {
            let Some(e) = self.conns.get_mut(id) else {
                return;
            };
            let Some(t) = e.role.tls.as_mut() else { return };
            let (a, b) = cx.tcp.peek(id);
            let chunk = if a.is_empty() { b } else { a };
            if chunk.is_empty() {
                break;
            }
            let Ok(taken) = t.receive(chunk) else {
                cx.tcp.abort(id);
                return;
            };
            if !e.role.handshaken && !t.is_handshaking() {
                e.role.handshaken = true;
                self.stats.handshakes += 1;
            }
            cx.tcp.consume(id, taken);
            loop {
                let Some(t) = self.conns.get_mut(id).and_then(|e| e.role.tls.as_mut()) else {
                    return;
                };
                let n = t.read_plain(&mut self.plain);
                if n == 0 {
                    break;
                }
                let plain = std::mem::take(&mut self.plain);
                self.feed(cx, id, &plain[..n]);
                self.plain = plain;
            }
            if taken == 0 {
                break;
            }
        }
        self.flush_tls(cx, id);
    }

    /// Runs the response parser over plaintext (all of it is taken).
    fn feed(&mut self, cx: &mut Cx<'_>, id: ConnId, mut data: &[u8]) {
        while !data.is_empty() {
            let Some(e) = self.conns.get_mut(id) else {
                return;
            };
            let c = &mut e.role;
            if c.bad {
                return;
            }
            match c.body_left {
                None => {
                    let mut used = data.len();
                    for (i, &byte) in data.iter().enumerate() {
                        c.head.push(byte);
                        if c.head.ends_with(b"\r\n\r\n") {
                            used = i + 1;
                            c.body_left = success_length(&c.head);
                            break;
                        }
                    }
                    if c.body_left.is_none() && c.head.ends_with(b"\r\n\r\n") {
                        c.bad = true;
                        self.stats.bad_responses += 1;
                        cx.tcp.abort(id);
                        return;
                    }
                    data = &data[used..];
                    if c.body_left == Some(0) {
                        self.response_done(cx, id);
                    }
                }
                Some(left) => {
                    let n = (data.len() as u64).min(left);
                    data = &data[n as usize..];
                    self.stats.body_bytes += n;
                    c.body_left = Some(left - n);
                    if left == n {
                        self.response_done(cx, id);
                    }
                }
            }
        }
    }

    /// The current response is complete: the next request, or close.
    fn response_done(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        self.stats.responses += 1;
        let Some(e) = self.conns.get_mut(id) else {
            return;
        };
        e.role.requests_left = e.role.requests_left.saturating_sub(1);
        if e.role.requests_left == 0 || self.winding_down {
            cx.tcp.close(id);
            self.finish(id);
        } else {
            self.send_request(cx, id);
        }
    }

    /// Plain mode: the response head (small, collected until the blank
    /// line), then the body, counted and consumed in place.
    fn read(&mut self, cx: &mut Cx<'_>, id: ConnId) {
        loop {
            let (a, b) = cx.tcp.peek(id);
            let avail = a.len() + b.len();
            if avail == 0 {
                return;
            }
            let Some(e) = self.conns.get_mut(id) else {
                return;
            };
            let c = &mut e.role;
            if c.bad {
                return;
            }
            match c.body_left {
                None => {
                    let mut used = 0;
                    for &byte in a.iter().chain(b.iter()) {
                        c.head.push(byte);
                        used += 1;
                        if c.head.ends_with(b"\r\n\r\n") {
                            break;
                        }
                    }
                    let head_done = c.head.ends_with(b"\r\n\r\n");
                    if head_done {
                        c.body_left = success_length(&c.head);
                        if c.body_left.is_none() {
                            c.bad = true;
                            self.stats.bad_responses += 1;
                            cx.tcp.abort(id);
                            return;
                        }
                    }
                    cx.tcp.consume(id, used);
                    if !head_done {
                        return;
                    }
                }
                Some(left) => {
                    let n = (avail as u64).min(left);
                    cx.tcp.consume(id, n as usize);
                    self.stats.body_bytes += n;
                    let left = left - n;
                    c.body_left = Some(left);
                    if left == 0 {
                        self.response_done(cx, id);
                    }
                }
            }
        }
    }
}

/// An HTTP/1.1 GET of `path` from `host`.
fn request_for(path: &str, host: &str, connection: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: {connection}\r\n\r\n").into_bytes()
}

/// The body length of a whole response head that is a success (a 2xx
/// status line) with a Content-Length; `None` for any other: dpbench's
/// kernel client rejects those too (`http_errors`).
fn success_length(head: &[u8]) -> Option<u64> {
    let status = head.strip_prefix(b"HTTP/1.")?.get(2..5)?;
    if status.first() != Some(&b'2') || !status.iter().all(u8::is_ascii_digit) {
        return None;
    }
    content_length(head)
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
