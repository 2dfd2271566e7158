//! The load generator: worker threads, each pinned to a core and driving many
//! non-blocking connections through one `mio::Poll`.
//!
//! A worker runs one of two load models:
//! - closed loop: keep `concurrency` connections in flight (CPS, TPS, RPS,
//!   throughput);
//! - open loop: start connections on a fixed schedule whatever the server
//!   does (latency, concurrency). Latency is measured from the *scheduled*
//!   start, so a slow server cannot hide its stalls by slowing the client
//!   down (no coordinated omission).
//!
//! Both follow the run's phases (ramp up, sustain, ramp down).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use socket2::{Domain, Protocol, Socket, Type};

use crate::http::{self, Progress, ResponseReader};

/// Counters a worker publishes; the sampler reads them every second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Counter {
    /// Connections started (connect called).
    Started,
    /// TCP connections established.
    Connected,
    /// TLS handshakes completed (equal to `Connected` for plain TCP).
    Handshakes,
    /// Transactions completed: a connection that did all its requests.
    Transactions,
    /// HTTP responses completed.
    Requests,
    /// Response body bytes received.
    BodyBytes,
    /// Connections currently open and idle after their requests (a gauge).
    Held,
    /// Connect refused, unreachable, or no source port left.
    ErrConnect,
    /// TCP reset or broken pipe.
    ErrReset,
    /// TLS handshake failure or TLS alert.
    ErrTls,
    /// No progress for the request timeout.
    ErrTimeout,
    /// Body shorter than announced or than expected, or the peer closed early.
    ErrShort,
    /// Bad HTTP header or status other than 200.
    ErrHttp,
    /// The open-loop schedule could not start a connection (in-flight cap).
    ErrOverload,
}

impl Counter {
    pub const ALL: [Counter; 14] = [
        Counter::Started,
        Counter::Connected,
        Counter::Handshakes,
        Counter::Transactions,
        Counter::Requests,
        Counter::BodyBytes,
        Counter::Held,
        Counter::ErrConnect,
        Counter::ErrReset,
        Counter::ErrTls,
        Counter::ErrTimeout,
        Counter::ErrShort,
        Counter::ErrHttp,
        Counter::ErrOverload,
    ];
    pub const ERRORS: [Counter; 7] = [
        Counter::ErrConnect,
        Counter::ErrReset,
        Counter::ErrTls,
        Counter::ErrTimeout,
        Counter::ErrShort,
        Counter::ErrHttp,
        Counter::ErrOverload,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Counter::Started => "started",
            Counter::Connected => "connected",
            Counter::Handshakes => "handshakes",
            Counter::Transactions => "transactions",
            Counter::Requests => "requests",
            Counter::BodyBytes => "body_bytes",
            Counter::Held => "held",
            Counter::ErrConnect => "connect_errors",
            Counter::ErrReset => "resets",
            Counter::ErrTls => "handshake_failures",
            Counter::ErrTimeout => "timeouts",
            Counter::ErrShort => "short_bodies",
            Counter::ErrHttp => "http_errors",
            Counter::ErrOverload => "schedule_misses",
        }
    }
}

/// One worker's counters.
#[derive(Debug, Default)]
pub struct Counters([AtomicU64; 14]);

impl Counters {
    pub(crate) fn add(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_add(n, Ordering::Relaxed);
    }
    fn sub(&self, c: Counter, n: u64) {
        self.0[c as usize].fetch_sub(n, Ordering::Relaxed);
    }
    #[must_use]
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize].load(Ordering::Relaxed)
    }
}

/// A snapshot of summed counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot(pub [u64; 14]);

impl Snapshot {
    #[must_use]
    pub fn sum(all: &[Arc<Counters>]) -> Self {
        let mut s = [0u64; 14];
        for w in all {
            for c in Counter::ALL {
                s[c as usize] += w.get(c);
            }
        }
        Snapshot(s)
    }
    #[must_use]
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
    #[must_use]
    pub fn errors(&self) -> u64 {
        Counter::ERRORS.iter().map(|&c| self.get(c)).sum()
    }
    /// Counter deltas (gauges keep the later value).
    #[must_use]
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut s = [0u64; 14];
        for c in Counter::ALL {
            s[c as usize] = if c == Counter::Held {
                self.get(c)
            } else {
                self.get(c).saturating_sub(earlier.get(c))
            };
        }
        Snapshot(s)
    }
}

/// Ramp up, sustain, ramp down, in whole seconds (RFC 9411).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Phases {
    pub ramp_up: u64,
    pub sustain: u64,
    pub ramp_down: u64,
}

impl Phases {
    #[must_use]
    pub fn total(&self) -> u64 {
        self.ramp_up + self.sustain + self.ramp_down
    }
    /// Load level in [0, 1] at `t` seconds.
    #[must_use]
    pub fn level(&self, t: f64) -> f64 {
        let (u, s, d) = (
            self.ramp_up as f64,
            self.sustain as f64,
            self.ramp_down as f64,
        );
        if t < u {
            t / u
        } else if t < u + s {
            1.0
        } else if t < u + s + d {
            1.0 - (t - u - s) / d
        } else {
            0.0
        }
    }
    /// Phase name at second `t`.
    #[must_use]
    pub fn name(&self, t: u64) -> &'static str {
        if t < self.ramp_up {
            "ramp-up"
        } else if t < self.ramp_up + self.sustain {
            "sustain"
        } else {
            "ramp-down"
        }
    }
}

/// How connections are started.
#[derive(Clone, Copy, Debug, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Keep this many connections in flight (all workers together).
    Closed { concurrency: u32 },
    /// Start this many connections per second (all workers together), never
    /// more than `max_inflight` at once.
    Open { rate: f64, max_inflight: u32 },
}

/// What every connection does.
#[derive(Clone, Debug)]
pub struct Workload {
    pub addr: SocketAddr,
    /// Source addresses, used in turn (many, so ports never run out).
    pub sources: Vec<IpAddr>,
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    pub host: String,
    pub path: String,
    pub http11: bool,
    /// Requests per connection; 0 = keep going until the run ends.
    pub reqs_per_conn: u32,
    /// Body size every response must have, if known.
    pub expect_body: Option<u64>,
    /// No progress for this long is a timeout.
    pub timeout: Duration,
    /// After its requests, keep the connection open until the sustain phase
    /// ends (the concurrency test).
    pub hold: bool,
    /// Start at most this many connections (all workers together).
    pub max_conns: Option<u64>,
    pub load: Load,
    pub phases: Phases,
}

/// Latency histograms (microseconds) of connections that finished in the
/// sustain phase.
#[derive(Debug, Clone)]
pub struct Latencies {
    /// Intended start to TCP established.
    pub connect: Histogram<u64>,
    /// Intended start to handshake done (= connect for plain TCP).
    pub handshake: Histogram<u64>,
    /// Intended start to the first byte of the first response.
    pub ttfb: Histogram<u64>,
    /// Request sent to response complete, every request.
    pub response: Histogram<u64>,
}

impl Latencies {
    /// # Panics
    /// Never: the bounds are constants.
    #[must_use]
    pub fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds");
        Self {
            connect: h(),
            handshake: h(),
            ttfb: h(),
            response: h(),
        }
    }
    /// Adds another worker's histograms.
    pub fn merge(&mut self, o: &Latencies) {
        // Same bounds everywhere, so `add` cannot fail.
        let _ = self.connect.add(&o.connect);
        let _ = self.handshake.add(&o.handshake);
        let _ = self.ttfb.add(&o.ttfb);
        let _ = self.response.add(&o.response);
    }
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

/// What the first completed handshake negotiated.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Negotiated {
    pub version: String,
    pub suite: String,
    pub group: String,
    pub resumed_seen: u64,
}

/// A worker's result.
#[derive(Debug)]
pub struct WorkerResult {
    pub lat: Latencies,
    pub negotiated: Negotiated,
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum State {
    Connecting,
    Handshaking,
    Requesting,
    /// Done; waiting for the server's close so TIME-WAIT lands on its side.
    Closing,
    Holding,
}

#[derive(Debug)]
struct Conn {
    sock: TcpStream,
    tls: Option<ClientConnection>,
    state: State,
    t_sched: Instant,
    t_req: Instant,
    first_byte: bool,
    reqs_done: u32,
    resp: ResponseReader,
    out: Vec<u8>,
    out_pos: usize,
    deadline: Option<Instant>,
}

enum Step {
    Continue,
    Finished,
    Failed(Counter),
}

fn io_error_kind(e: &io::Error) -> Counter {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => Counter::ErrReset,
        io::ErrorKind::TimedOut => Counter::ErrTimeout,
        _ => Counter::ErrConnect,
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One worker: call [`Worker::run`] on its own (pinned) thread.
#[derive(Debug)]
pub struct Worker {
    w: Workload,
    index: usize,
    workers: usize,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    inflight: usize,
    started: u64,
    next_source: usize,
    scratch: Vec<u8>,
    lat: Latencies,
    negotiated: Negotiated,
    start: Instant,
}

impl Worker {
    #[must_use]
    pub fn new(
        w: Workload,
        index: usize,
        workers: usize,
        counters: Arc<Counters>,
        stop: Arc<AtomicBool>,
        start: Instant,
    ) -> Self {
        Self {
            w,
            index,
            workers,
            counters,
            stop,
            conns: Vec::new(),
            free: Vec::new(),
            inflight: 0,
            started: 0,
            next_source: index,
            scratch: vec![0; 64 * 1024],
            lat: Latencies::new(),
            negotiated: Negotiated::default(),
            start,
        }
    }

    fn share(&self, total: f64) -> f64 {
        total / self.workers as f64
    }

    fn in_sustain(&self, now: Instant) -> bool {
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        let p = self.w.phases;
        t >= p.ramp_up as f64 && t < (p.ramp_up + p.sustain) as f64
    }

    fn max_conns(&self) -> Option<u64> {
        self.w.max_conns.map(|m| {
            let base = m / self.workers as u64;
            base + u64::from((self.index as u64) < m % self.workers as u64)
        })
    }

    /// Runs until the phases are over and in-flight connections are done (or
    /// the stop flag is raised).
    ///
    /// # Errors
    /// Only when `mio::Poll` itself fails.
    pub fn run(mut self) -> io::Result<WorkerResult> {
        let mut poll = Poll::new()?;
        let mut events = Events::with_capacity(1024);
        let p = self.w.phases;
        let end = self.start + Duration::from_secs(p.total());
        let sustain_end = self.start + Duration::from_secs(p.ramp_up + p.sustain);
        let grace = self.w.timeout + Duration::from_secs(1);
        let mut next_sched = self.start;
        let mut last_sweep = self.start;
        let max_conns = self.max_conns();
        let mut released_held = false;
        loop {
            let now = Instant::now();
            if self.stop.load(Ordering::Relaxed) || now >= end + grace {
                break;
            }
            let t = now.saturating_duration_since(self.start).as_secs_f64();
            let may_start = now < end && max_conns.is_none_or(|m| self.started < m);
            match self.w.load {
                Load::Closed { concurrency } => {
                    if may_start {
                        let level = p.level(t);
                        let target = (self.share(f64::from(concurrency)) * level).ceil() as usize;
                        // Bounded per iteration: a connect that fails at once
                        // (no route, no port) must not spin here forever.
                        let mut budget = 256;
                        while budget > 0
                            && self.inflight < target
                            && max_conns.is_none_or(|m| self.started < m)
                        {
                            budget -= 1;
                            self.start_conn(&poll, now, now);
                        }
                    }
                }
                Load::Open { rate, max_inflight } => {
                    let cap = self.share(f64::from(max_inflight)).ceil() as usize;
                    while may_start
                        && next_sched <= now
                        && max_conns.is_none_or(|m| self.started < m)
                    {
                        let sched = next_sched;
                        let st = sched.saturating_duration_since(self.start).as_secs_f64();
                        // Ramps start (and end) at 2 % of the rate, so the
                        // schedule never waits on a near-zero rate.
                        let r = self.share(rate) * p.level(st).max(0.02);
                        next_sched += Duration::from_secs_f64(1.0 / r);
                        if self.inflight >= cap {
                            self.counters.add(Counter::ErrOverload, 1);
                            continue;
                        }
                        self.start_conn(&poll, sched, now);
                    }
                }
            }
            if !released_held && self.w.hold && now >= sustain_end {
                released_held = true;
                self.release_held();
            }
            if now >= end
                && (!self.w.hold || released_held)
                && self.inflight == self.counters_held()
            {
                break;
            }
            // A count-bounded run is over when its last connection is.
            if !self.w.hold && self.inflight == 0 && max_conns.is_some_and(|m| self.started >= m) {
                break;
            }
            let timeout = match self.w.load {
                Load::Open { .. } => Duration::from_micros(500),
                Load::Closed { .. } => Duration::from_millis(5),
            };
            poll.poll(&mut events, Some(timeout))?;
            for ev in &events {
                let i = ev.token().0;
                self.drive(&poll, i);
            }
            let now = Instant::now();
            if now.duration_since(last_sweep) >= Duration::from_millis(100) {
                last_sweep = now;
                self.sweep_timeouts(&poll, now);
            }
        }
        // Whatever is still open now is neither a success nor an error of the
        // device: the run is over. Close it.
        for i in 0..self.conns.len() {
            if let Some(c) = self.conns[i].take() {
                if c.state == State::Holding {
                    self.counters.sub(Counter::Held, 1);
                }
                let mut c = c;
                let _ = poll.registry().deregister(&mut c.sock);
            }
        }
        Ok(WorkerResult {
            lat: self.lat,
            negotiated: self.negotiated,
        })
    }

    fn counters_held(&self) -> usize {
        self.conns
            .iter()
            .filter(|c| c.as_ref().is_some_and(|c| c.state == State::Holding))
            .count()
    }

    fn release_held(&mut self) {
        for slot in &mut self.conns {
            if slot.as_ref().is_some_and(|c| c.state == State::Holding) {
                *slot = None;
                self.inflight -= 1;
                self.counters.sub(Counter::Held, 1);
            }
        }
        self.free = (0..self.conns.len())
            .filter(|&i| self.conns[i].is_none())
            .collect();
    }

    fn new_socket(&mut self) -> io::Result<TcpStream> {
        let sock = Socket::new(
            Domain::IPV4,
            Type::STREAM.nonblocking(),
            Some(Protocol::TCP),
        )?;
        sock.set_nodelay(true)?;
        if !self.w.sources.is_empty() {
            let ip = self.w.sources[self.next_source % self.w.sources.len()];
            self.next_source = self.next_source.wrapping_add(1);
            sock.bind(&SocketAddr::new(ip, 0).into())?;
        }
        match sock.connect(&self.w.addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(115) || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(TcpStream::from_std(sock.into()))
    }

    fn start_conn(&mut self, poll: &Poll, sched: Instant, now: Instant) {
        self.started += 1;
        self.counters.add(Counter::Started, 1);
        let mut sock = match self.new_socket() {
            Ok(s) => s,
            Err(e) => {
                self.counters.add(io_error_kind(&e), 1);
                return;
            }
        };
        let tls = match &self.w.tls {
            Some((cfg, name)) => match ClientConnection::new(cfg.clone(), name.clone()) {
                Ok(c) => Some(c),
                Err(_) => {
                    self.counters.add(Counter::ErrTls, 1);
                    return;
                }
            },
            None => None,
        };
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        if let Err(e) =
            poll.registry()
                .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)
        {
            self.counters.add(io_error_kind(&e), 1);
            self.free.push(i);
            return;
        }
        self.conns[i] = Some(Conn {
            sock,
            tls,
            state: State::Connecting,
            t_sched: sched.min(now),
            t_req: now,
            first_byte: false,
            reqs_done: 0,
            resp: ResponseReader::new(),
            out: Vec::new(),
            out_pos: 0,
            deadline: Some(now + self.w.timeout),
        });
        self.inflight += 1;
    }

    fn sweep_timeouts(&mut self, poll: &Poll, now: Instant) {
        for i in 0..self.conns.len() {
            let expired = self.conns[i]
                .as_ref()
                .is_some_and(|c| c.deadline.is_some_and(|d| now >= d));
            if expired {
                let closing = self.conns[i]
                    .as_ref()
                    .is_some_and(|c| c.state == State::Closing);
                // A server that answered fully but never closes costs us a
                // socket, not a transaction: not an error.
                self.finish(
                    poll,
                    i,
                    if closing {
                        Step::Finished
                    } else {
                        Step::Failed(Counter::ErrTimeout)
                    },
                );
            }
        }
    }

    fn finish(&mut self, poll: &Poll, i: usize, how: Step) {
        if let Some(mut c) = self.conns[i].take() {
            let _ = poll.registry().deregister(&mut c.sock);
            if c.state == State::Holding {
                self.counters.sub(Counter::Held, 1);
            }
            if let Step::Failed(kind) = how {
                self.counters.add(kind, 1);
            }
            self.inflight -= 1;
            self.free.push(i);
        }
    }

    fn drive(&mut self, poll: &Poll, i: usize) {
        let Some(mut c) = self.conns[i].take() else {
            return;
        };
        let step = self.step(&mut c);
        self.conns[i] = Some(c);
        match step {
            Step::Continue => {}
            s => self.finish(poll, i, s),
        }
    }

    fn send_request(&mut self, c: &mut Conn, now: Instant) {
        let n = c.reqs_done + 1;
        let last = self.w.reqs_per_conn != 0 && n >= self.w.reqs_per_conn;
        let stopping = now >= self.start + Duration::from_secs(self.w.phases.total());
        // The last request asks the server to close, so it closes first.
        let close = !self.w.hold && (last || stopping);
        let req = http::request(&self.w.host, &self.w.path, self.w.http11, close);
        c.resp = ResponseReader::new();
        c.t_req = now;
        c.deadline = Some(now + self.w.timeout);
        match &mut c.tls {
            Some(tls) => {
                // Buffered by rustls until written to the socket; cannot fail
                // after the handshake.
                let _ = tls.writer().write_all(&req);
            }
            None => {
                c.out = req;
                c.out_pos = 0;
            }
        }
        c.state = State::Requesting;
    }

    /// A response finished. Returns what the connection does next.
    fn response_done(&mut self, c: &mut Conn, now: Instant) -> Option<Step> {
        c.reqs_done += 1;
        let body = c.resp.body_len();
        self.counters.add(Counter::Requests, 1);
        self.counters.add(Counter::BodyBytes, body);
        if self.in_sustain(now) {
            let _ = self.lat.response.record(us(now - c.t_req));
        }
        if let Some(want) = self.w.expect_body {
            if body != want {
                return Some(Step::Failed(Counter::ErrShort));
            }
        }
        let end = self.start + Duration::from_secs(self.w.phases.total());
        let more = (self.w.reqs_per_conn == 0 || c.reqs_done < self.w.reqs_per_conn) && now < end;
        if more && !c.resp.server_closes() {
            self.send_request(c, now);
            return None;
        }
        self.counters.add(Counter::Transactions, 1);
        if self.w.hold
            && now < self.start + Duration::from_secs(self.w.phases.ramp_up + self.w.phases.sustain)
        {
            c.state = State::Holding;
            c.deadline = None;
            self.counters.add(Counter::Held, 1);
            return None;
        }
        if c.resp.server_closes() {
            c.state = State::Closing;
            c.deadline = Some(now + self.w.timeout);
            None
        } else {
            if let Some(tls) = &mut c.tls {
                tls.send_close_notify();
                let _ = tls.write_tls(&mut c.sock);
            }
            Some(Step::Finished)
        }
    }

    fn on_plaintext(&mut self, c: &mut Conn, mut data: &[u8], now: Instant) -> Option<Step> {
        while !data.is_empty() {
            match c.state {
                State::Requesting => {}
                // Anything after the last response (keep-alive junk, or bytes
                // while held) is ignored.
                _ => return None,
            }
            if !c.first_byte {
                c.first_byte = true;
                if c.reqs_done == 0 && self.in_sustain(now) {
                    let _ = self.lat.ttfb.record(us(now - c.t_sched));
                }
            }
            match c.resp.feed(data) {
                Err(_) => return Some(Step::Failed(Counter::ErrHttp)),
                Ok(Progress::More) => return None,
                Ok(Progress::Done { extra }) => {
                    let consumed = data.len() - extra;
                    data = &data[consumed..];
                    if let Some(s) = self.response_done(c, now) {
                        return Some(s);
                    }
                }
            }
        }
        None
    }

    fn on_eof(&mut self, c: &mut Conn, now: Instant) -> Step {
        match c.state {
            State::Closing => Step::Finished,
            State::Requesting if c.resp.eof_completes() => match self.response_done(c, now) {
                Some(s) => s,
                None if c.state == State::Requesting => Step::Failed(Counter::ErrShort),
                None => Step::Finished,
            },
            State::Requesting => Step::Failed(Counter::ErrShort),
            State::Handshaking => Step::Failed(Counter::ErrTls),
            State::Connecting => Step::Failed(Counter::ErrReset),
            // The server dropped a held connection.
            State::Holding => Step::Failed(Counter::ErrReset),
        }
    }

    fn connected(&mut self, c: &mut Conn, now: Instant) {
        self.counters.add(Counter::Connected, 1);
        let sustain = self.in_sustain(now);
        if sustain {
            let _ = self.lat.connect.record(us(now - c.t_sched));
        }
        if c.tls.is_some() {
            c.state = State::Handshaking;
        } else {
            self.counters.add(Counter::Handshakes, 1);
            if sustain {
                let _ = self.lat.handshake.record(us(now - c.t_sched));
            }
            self.send_request(c, now);
        }
    }

    fn handshake_done(&mut self, c: &mut Conn, now: Instant) {
        self.counters.add(Counter::Handshakes, 1);
        if self.in_sustain(now) {
            let _ = self.lat.handshake.record(us(now - c.t_sched));
        }
        if let Some(tls) = &c.tls {
            if self.negotiated.version.is_empty() {
                self.negotiated.version = format!(
                    "{:?}",
                    tls.protocol_version()
                        .unwrap_or(rustls::ProtocolVersion::Unknown(0))
                );
                self.negotiated.suite = tls
                    .negotiated_cipher_suite()
                    .map(|s| format!("{:?}", s.suite()))
                    .unwrap_or_default();
                self.negotiated.group = tls
                    .negotiated_key_exchange_group()
                    .map(|g| format!("{:?}", g.name()))
                    .unwrap_or_default();
            }
            if tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                self.negotiated.resumed_seen += 1;
            }
        }
        self.send_request(c, now);
    }

    /// Moves one connection as far as its socket allows.
    fn step(&mut self, c: &mut Conn) -> Step {
        let now = Instant::now();
        if c.state == State::Connecting {
            match c.sock.take_error() {
                Ok(Some(e)) | Err(e) => return Step::Failed(io_error_kind(&e)),
                Ok(None) => {}
            }
            match c.sock.peer_addr() {
                Ok(_) => self.connected(c, now),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Step::Continue,
                Err(e) => return Step::Failed(io_error_kind(&e)),
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let step = self.pump(c, &mut scratch, now);
        self.scratch = scratch;
        step
    }

    fn pump(&mut self, c: &mut Conn, scratch: &mut [u8], now: Instant) -> Step {
        // Edge-triggered: keep going until the socket would block both ways,
        // or no event would come to wake us again.
        loop {
            let mut progressed = false;
            // Write what is pending.
            if let Some(tls) = &mut c.tls {
                while tls.wants_write() {
                    match tls.write_tls(&mut c.sock) {
                        Ok(_) => progressed = true,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Step::Failed(io_error_kind(&e)),
                    }
                }
            } else {
                while c.out_pos < c.out.len() {
                    match c.sock.write(&c.out[c.out_pos..]) {
                        Ok(n) => {
                            c.out_pos += n;
                            progressed = true;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Step::Failed(io_error_kind(&e)),
                    }
                }
            }
            // Read what arrived.
            let mut eof = false;
            if c.tls.is_some() {
                let r = c.tls.as_mut().map(|t| t.read_tls(&mut c.sock));
                match r {
                    Some(Ok(0)) => eof = true,
                    Some(Ok(_)) => {
                        progressed = true;
                        let processed = c.tls.as_mut().map(|t| t.process_new_packets());
                        if let Some(Err(e)) = processed {
                            if std::env::var_os("DPBENCH_DEBUG").is_some() {
                                eprintln!("dpbench: TLS error: {e}");
                            }
                            if let Some(t) = c.tls.as_mut() {
                                let _ = t.write_tls(&mut c.sock);
                            }
                            return if c.state == State::Handshaking {
                                Step::Failed(Counter::ErrTls)
                            } else {
                                Step::Failed(Counter::ErrReset)
                            };
                        }
                        if c.state == State::Handshaking
                            && c.tls.as_ref().is_some_and(|t| !t.is_handshaking())
                        {
                            self.handshake_done(c, now);
                        }
                        loop {
                            let r = c.tls.as_mut().map(|t| t.reader().read(scratch));
                            match r {
                                Some(Ok(0)) => {
                                    eof = true;
                                    break;
                                }
                                Some(Ok(n)) => {
                                    if let Some(s) = self.on_plaintext(c, &scratch[..n], now) {
                                        return s;
                                    }
                                }
                                Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                                Some(Err(_)) | None => {
                                    eof = true;
                                    break;
                                }
                            }
                        }
                    }
                    Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Some(Err(e)) => return Step::Failed(io_error_kind(&e)),
                    None => {}
                }
            } else {
                match c.sock.read(scratch) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        progressed = true;
                        if let Some(s) = self.on_plaintext(c, &scratch[..n], now) {
                            return s;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Step::Failed(io_error_kind(&e)),
                }
            }
            if eof {
                return self.on_eof(c, now);
            }
            if !progressed {
                return Step::Continue;
            }
        }
    }
}
