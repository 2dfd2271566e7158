//! The built-in HTTP/1.x responder.
//!
//! - targets in origin-form (`/p`) or absolute-form (`http://h/p`,
//!   answered for `/p`);
//! - `GET /bytes/N` answers 200 with N bytes (up to 1 TiB) of the
//!   [`PATTERN`], streamed into the send buffer as it drains, never held
//!   whole;
//! - `GET /` answers a small HTML page;
//! - `GET /64b`, `/1k`, `/250k`, `/1m`, `/2m`: the pages the benchmark
//!   peers serve (64, 1024, 256 000, 1 MiB, 2 MiB bytes of the pattern), so
//!   dpbench asks every device under test for the same thing;
//! - anything else: 404 (unknown path), 405 (other methods, with `Allow`),
//!   400 (malformed: RFC 9112's framing rules are held to, so no
//!   front-end proxy and this one read a head differently; an HTTP/1.1
//!   request needs exactly one Host), 414 (a
//!   request line over 8 KiB), 431 (headers over 8 KiB), the last three
//!   then close; `HEAD` gets GET's head.
//!
//! HTTP/1.1 keeps the connection open unless the request says
//! `Connection: close`; HTTP/1.0 closes unless it says `keep-alive`
//! (`close` wins over both). Pipelined requests are answered in order. A
//! head arriving in pieces is scanned once: each piece from where the
//! last scan stopped.

use crate::tcp::{ConnId, Event, TcpEngine};

/// The body byte at offset `i` is `PATTERN[i % 64]`.
pub const PATTERN: &[u8; 64] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/";
/// Largest request head accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// Largest `/bytes/N`.
pub const MAX_BODY: u64 = 1 << 40;

const INDEX: &[u8] = b"<!doctype html><html><head><title>tlsdp</title></head><body><h1>tlsdp</h1><p>Served by the tlsdp dataplane's built-in responder. Try /bytes/1024.</p></body></html>\n";

/// Per-connection state of the responder.
#[derive(Debug, Default)]
pub struct Session {
    /// Pattern bytes of the current body still to queue.
    body_left: u64,
    /// Offset of the next pattern byte.
    body_pos: u64,
    /// A fixed body (index page, error text) still to queue.
    fixed: Option<(&'static [u8], usize)>,
    /// Close after the current response.
    close_after: bool,
    /// The peer closed its side.
    pub(crate) peer_closed: bool,
    /// We called close.
    closing: bool,
    /// Requests answered on this connection (wrapping).
    answered: u32,
    /// Bytes of the head in progress scanned without finding its end: the
    /// next scan starts there (a head sent a byte at a time would be
    /// scanned from its start again for each).
    scanned: usize,
}

impl Session {
    /// Requests answered so far (wrapping): a new wait for a head starts
    /// with each.
    pub fn answered(&self) -> u32 {
        self.answered
    }

    /// Our last answer is queued and our side closed: what the client
    /// still sends is read and dropped (a lingering close).
    pub fn lingering(&self) -> bool {
        self.closing
    }

    /// Waiting for a request head: no response in progress, not closing.
    pub fn awaiting_head(&self) -> bool {
        self.body_left == 0
            && self.fixed.is_none()
            && !self.close_after
            && !self.closing
            && !self.peer_closed
    }
}

/// Counters of the responder.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponderCounters {
    pub requests: u64,
    pub responses_2xx: u64,
    pub responses_4xx: u64,
    pub body_bytes: u64,
}

/// Handles TCP events for connections of responder VIPs.
#[derive(Debug, Default)]
pub struct Responder {
    pub counters: ResponderCounters,
    head: Vec<u8>,
    date: HttpDate,
}

/// The `Date` field's value (RFC 9110 §5.6.7, IMF-fixdate), made again
/// only when the second changes.
#[derive(Debug, Clone, Copy)]
struct HttpDate {
    second: Option<u64>,
    text: [u8; 29],
}

impl Default for HttpDate {
    fn default() -> Self {
        Self {
            second: None,
            text: *b"Thu, 01 Jan 1970 00:00:00 GMT",
        }
    }
}

impl HttpDate {
    fn set(&mut self, unix_secs: u64) {
        if self.second == Some(unix_secs) {
            return;
        }
        self.second = Some(unix_secs);
        let t = i64::try_from(unix_secs)
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let text = t.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
        if let Ok(text) = <[u8; 29]>::try_from(text.as_bytes()) {
            self.text = text;
        }
    }
}

#[derive(Debug, PartialEq)]
struct Request {
    status: u16,
    body: Body,
    close: bool,
    head_len: usize,
    /// `HEAD`: the head GET would get, without its body.
    head_only: bool,
}

#[derive(Debug, PartialEq)]
enum Body {
    Pattern(u64),
    Fixed(&'static [u8]),
}

/// A byte stream the responder reads requests from and writes responses
/// to: a TCP connection directly, or the plaintext side of a TLS session.
pub trait Stream {
    /// The responder's state of this connection (`None` once it is gone).
    fn http(&mut self) -> Option<&mut Session>;
    /// Received bytes not consumed yet (up to two slices).
    fn peek(&self) -> (&[u8], &[u8]);
    fn consume(&mut self, n: usize);
    /// Bytes `send` would take now.
    fn send_space(&self) -> usize;
    fn send(&mut self, data: &[u8]) -> usize;
    /// Lets `fill` write up to `max` bytes in place; returns how many.
    fn send_with(&mut self, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> usize;
    /// Sends a prefix of `data` (for TLS, one record's worth, encrypted
    /// from where it is); returns how many bytes it took.
    fn send_from(&mut self, data: &[u8]) -> usize;
    /// Ends our side once everything sent has been delivered.
    fn close(&mut self);
}

/// A plain TCP connection, with its responder session, as a [`Stream`].
#[derive(Debug)]
pub struct TcpStream<'a, A> {
    pub tcp: &'a mut TcpEngine<A>,
    pub id: ConnId,
    pub http: &'a mut Session,
}

impl<A: Default> Stream for TcpStream<'_, A> {
    fn http(&mut self) -> Option<&mut Session> {
        if self.tcp.state(self.id).is_some() {
            Some(&mut *self.http)
        } else {
            None
        }
    }
    fn peek(&self) -> (&[u8], &[u8]) {
        self.tcp.peek(self.id)
    }
    fn consume(&mut self, n: usize) {
        self.tcp.consume(self.id, n);
    }
    fn send_space(&self) -> usize {
        self.tcp.send_space(self.id)
    }
    fn send(&mut self, data: &[u8]) -> usize {
        self.tcp.send(self.id, data)
    }
    fn send_with(&mut self, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> usize {
        self.tcp.send_with(self.id, max, fill)
    }
    fn send_from(&mut self, data: &[u8]) -> usize {
        self.tcp.send(self.id, data)
    }
    fn close(&mut self) {
        self.tcp.close(self.id);
    }
}

impl Responder {
    pub fn new() -> Self {
        Self {
            counters: ResponderCounters::default(),
            head: Vec::with_capacity(256),
            date: HttpDate::default(),
        }
    }

    /// The wall-clock time (Unix seconds) for the `Date` of answers from
    /// now on (RFC 9110 §6.6.1: an origin server with a clock sends one):
    /// set by the engine once an iteration, the field made again once a
    /// second.
    pub fn set_clock(&mut self, unix_secs: u64) {
        self.date.set(unix_secs);
    }

    /// Reacts to one TCP event of a plain (cleartext) connection whose
    /// responder session is `http`.
    pub fn on_event<A: Default>(
        &mut self,
        tcp: &mut TcpEngine<A>,
        http: &mut Session,
        event: Event,
    ) {
        match event {
            // Closing: the last answer is queued whole, so room to send is
            // no news.
            Event::Writable(_) if http.closing => {}
            Event::Accepted(id) | Event::Readable(id) | Event::Writable(id) => {
                self.pump(&mut TcpStream { tcp, id, http })
            }
            Event::PeerClosed(id) => {
                http.peer_closed = true;
                self.pump(&mut TcpStream { tcp, id, http });
            }
            Event::Closed(..) | Event::Connected(_) => {}
        }
    }

    /// Moves a connection forward as far as buffers allow: finish the body
    /// in progress, then parse and answer the next request.
    pub fn pump(&mut self, s: &mut impl Stream) {
        loop {
            if !self.fill_body(s) {
                return; // send buffer full: wait for Writable
            }
            let Some(h) = s.http() else { return };
            let start_close = h.close_after && !h.closing;
            h.closing |= start_close;
            let (closing, peer_closed, scanned) = (h.closing, h.peer_closed, h.scanned);
            if start_close {
                s.close();
            }
            if closing {
                // What the client sends after our last answer is read and
                // dropped (a lingering close): it holds no buffer, and the
                // connection can leave for the compact TIME-WAIT table.
                let (a, b) = s.peek();
                let unread = a.len() + b.len();
                if unread > 0 {
                    s.consume(unread);
                }
                return;
            }
            let (a, b) = s.peek();
            let pending = a.len() + b.len();
            // A head seen in part before is parsed only once its end
            // comes, looked for in what came since; a fresh one at once
            // (the parse finds its end, or that it has none yet).
            let parsed = if scanned == 0
                || pending > scanned && head_ends_after(a, b, scanned.saturating_sub(3))
            {
                parse_request(a, b)
            } else {
                None
            };
            match parsed {
                None => {
                    if pending != scanned {
                        if let Some(h) = s.http() {
                            h.scanned = pending.min(MAX_HEAD);
                        }
                    }
                    let (a, b) = s.peek();
                    if pending >= MAX_HEAD {
                        // RFC 9112 §3: a request line that long is 414.
                        let line_ended = a.iter().chain(b).take(MAX_HEAD).any(|&c| c == b'\n');
                        let (status, text): (u16, &'static [u8]) = if line_ended {
                            (431, b"request head too large\n")
                        } else {
                            (414, b"request line too long\n")
                        };
                        let req = Request {
                            status,
                            body: Body::Fixed(text),
                            close: true,
                            head_len: pending,
                            head_only: false,
                        };
                        if !self.respond(s, req) {
                            return;
                        }
                        continue;
                    }
                    if peer_closed {
                        // Nothing more will come: finish our side.
                        if let Some(h) = s.http() {
                            h.closing = true;
                        }
                        s.close();
                    }
                    return;
                }
                Some(req) => {
                    if !self.respond(s, req) {
                        return;
                    }
                }
            }
        }
    }

    /// Starts a response; false when there is no room for its head yet.
    fn respond(&mut self, s: &mut impl Stream, req: Request) -> bool {
        // The head always fits: a response head is < 256 bytes and we only
        // start one when the previous body is fully queued.
        if s.send_space() < 256 {
            return false;
        }
        s.consume(req.head_len);
        self.counters.requests += 1;
        let (len, ctype) = match req.body {
            Body::Pattern(n) => (n, "application/octet-stream"),
            Body::Fixed(b) if req.status == 200 => (b.len() as u64, "text/html"),
            Body::Fixed(b) => (b.len() as u64, "text/plain"),
        };
        let reason = match req.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            414 => "URI Too Long",
            _ => "Request Header Fields Too Large",
        };
        if req.status < 300 {
            self.counters.responses_2xx += 1;
        } else {
            self.counters.responses_4xx += 1;
        }
        // Built by hand: `write!` costs more than the rest of a small
        // response's head.
        let h = &mut self.head;
        h.clear();
        h.extend_from_slice(b"HTTP/1.1 ");
        push_decimal(h, u64::from(req.status));
        h.push(b' ');
        h.extend_from_slice(reason.as_bytes());
        h.extend_from_slice(b"\r\nServer: tlsdp\r\nDate: ");
        h.extend_from_slice(&self.date.text);
        h.extend_from_slice(b"\r\nContent-Type: ");
        h.extend_from_slice(ctype.as_bytes());
        h.extend_from_slice(b"\r\nContent-Length: ");
        push_decimal(h, len);
        h.extend_from_slice(b"\r\nConnection: ");
        h.extend_from_slice(if req.close { b"close" } else { b"keep-alive" });
        if req.status == 405 {
            // RFC 9110 §15.5.6: what is allowed.
            h.extend_from_slice(b"\r\nAllow: GET, HEAD");
        }
        h.extend_from_slice(b"\r\n\r\n");
        s.send(&self.head);
        if let Some(h) = s.http() {
            h.scanned = 0;
            h.answered = h.answered.wrapping_add(1);
            h.close_after = req.close;
            match req.body {
                _ if req.head_only => {}
                Body::Pattern(n) => {
                    h.body_left = n;
                    h.body_pos = 0;
                }
                Body::Fixed(b) => h.fixed = Some((b, 0)),
            }
        }
        true
    }

    /// Queues as much of the current body as fits. True when it is done.
    fn fill_body(&mut self, s: &mut impl Stream) -> bool {
        let Some(h) = s.http() else { return false };
        if let Some((bytes, off)) = h.fixed {
            let n = s.send(&bytes[off..]);
            let Some(h) = s.http() else { return false };
            if off + n < bytes.len() {
                h.fixed = Some((bytes, off + n));
                return false;
            }
            h.fixed = None;
            self.counters.body_bytes += bytes.len() as u64;
        }
        loop {
            let Some(h) = s.http() else { return false };
            let (left, pos) = (h.body_left, h.body_pos);
            if left == 0 {
                return true;
            }
            // One run of the pattern from this body offset's phase (RUN is
            // whole periods), read where it is: TLS seals records from it.
            let phase = (pos % PATTERN.len() as u64) as usize;
            let n = left.min(RUN as u64) as usize;
            // phase < 64 and n ≤ RUN: within PATTERN_RUN (RUN + 64 bytes).
            let n = s.send_from(&PATTERN_RUN[phase..phase + n]);
            if n == 0 {
                return false;
            }
            let Some(h) = s.http() else { return false };
            h.body_left -= n as u64;
            h.body_pos += n as u64;
            self.counters.body_bytes += n as u64;
        }
    }
}

/// Bytes of the pattern written by one copy: a TLS record's plaintext.
const RUN: usize = 16 * 1024;

/// The pattern repeated over `RUN` bytes and one more period, so that a
/// run starting at any phase is one slice of it.
static PATTERN_RUN: [u8; RUN + 64] = {
    let mut run = [0u8; RUN + 64];
    let mut i = 0;
    while i < run.len() {
        run[i] = PATTERN[i % 64];
        i += 1;
    }
    run
};

/// Writes pattern bytes for body offsets `pos..pos + out.len()`: one copy
/// per 16 KiB (a copy per 64-byte period cost a fifth of dpd's time in
/// bulk transfers; docs/profile.md).
pub fn fill_pattern(out: &mut [u8], pos: u64) {
    let phase = (pos % PATTERN.len() as u64) as usize;
    // RUN is whole periods, so every run starts at the same phase.
    for piece in out.chunks_mut(RUN) {
        piece.copy_from_slice(&PATTERN_RUN[phase..phase + piece.len()]);
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Line feeds a head scan remembers; a head with more lines is split
/// again (rare: a browser sends about a dozen).
const LINE_ENDS: usize = 32;

/// Line feed positions are below `MAX_HEAD`, so they fit the `u16`s kept.
const _: () = assert!(MAX_HEAD <= u16::MAX as usize);

/// The line feeds of a request head, found by the scan that found its end
/// (`n` counts them all; only the first `LINE_ENDS` are in `at`).
struct LineEnds {
    at: [u16; LINE_ENDS],
    n: usize,
}

/// The length of the request head (through the CRLF CRLF that ends it)
/// in the received bytes, given as two slices, if it ends within the
/// first `MAX_HEAD` bytes; `ends` gets the head's line feeds when it is
/// contiguous (`a` holds it). One plain loop over the bytes: heads are
/// short, and a vectorised search's set-up costs more.
fn head_len(a: &[u8], b: &[u8], ends: &mut LineEnds) -> Option<usize> {
    let limit = (a.len() + b.len()).min(MAX_HEAD);
    ends.n = 0;
    if b.is_empty() {
        let a = &a[..limit];
        let mut found = None;
        for_each_lf(a, |i| {
            // A blank line after LF or CRLF (as `ends_head`, on a slice).
            let before = &a[..i];
            if before.ends_with(b"\n") || before.ends_with(b"\n\r") {
                found = Some(i + 1);
                return false;
            }
            if ends.n < LINE_ENDS {
                ends.at[ends.n] = i as u16; // i < limit <= MAX_HEAD
            }
            ends.n += 1;
            true
        });
        return found;
    }
    ends.n = usize::MAX; // not recorded: `head_lines` splits the head
    let at = |i: usize| if i < a.len() { a[i] } else { b[i - a.len()] };
    (1..limit)
        .find(|&i| at(i) == b'\n' && ends_head(at, i))
        .map(|i| i + 1)
}

/// Whether the line feed at `i` (of the bytes `at` reads) ends a head: a
/// blank line after a line feed, CRLF or a bare LF (RFC 9112 §2.2 lets a
/// recipient take a bare LF as a line's end; taking it for the head's
/// too, a head of bare LFs is read as one, not held to its deadline).
#[inline]
fn ends_head(at: impl Fn(usize) -> u8, i: usize) -> bool {
    i >= 1 && (at(i - 1) == b'\n' || i >= 2 && at(i - 1) == b'\r' && at(i - 2) == b'\n')
}

/// Whether a head's end lies in the received bytes (`a` then `b`) past
/// offset `from` (within the first [`MAX_HEAD`]): one pass over what came
/// since the last scan.
fn head_ends_after(a: &[u8], b: &[u8], from: usize) -> bool {
    let limit = (a.len() + b.len()).min(MAX_HEAD);
    let at = |i: usize| if i < a.len() { a[i] } else { b[i - a.len()] };
    (from.max(1)..limit).any(|i| at(i) == b'\n' && ends_head(at, i))
}

/// Calls `f` with the position of each line feed in `bytes`, in order,
/// until it returns false. Eight bytes at a time: a word's LF bytes are
/// found with the zero-byte test on `word ^ 0x0a0a..` (candidates above
/// the first true one can be false: each is checked).
fn for_each_lf(bytes: &[u8], mut f: impl FnMut(usize) -> bool) {
    const LF: u64 = 0x0a0a_0a0a_0a0a_0a0a;
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let x = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ LF;
        let mut hits = x.wrapping_sub(LOW) & !x & HIGH;
        while hits != 0 {
            let i = base + (hits.trailing_zeros() / 8) as usize;
            hits &= hits - 1;
            if bytes[i] == b'\n' && !f(i) {
                return;
            }
        }
        base += 8;
    }
    for (i, &c) in words.remainder().iter().enumerate() {
        if c == b'\n' && !f(base + i) {
            return;
        }
    }
}

/// The lines of a head, each without its LF and a CR before it (a bare
/// LF ends a line too, RFC 9112 §2.2); bytes after the last LF are not a
/// line. `ends` are the head's line feeds, if its scan kept them all.
fn head_lines<'h>(head: &'h [u8], ends: &'h LineEnds) -> impl Iterator<Item = &'h [u8]> {
    let strip = |l: &'h [u8]| l.strip_suffix(b"\r").unwrap_or(l);
    let (kept, split) = if ends.n <= LINE_ENDS {
        (&ends.at[..ends.n], None)
    } else {
        (&[][..], Some(head.split_inclusive(|&c| c == b'\n')))
    };
    // The kept ends leave out the head's last line (its blank line); they
    // rise and lie inside the head, which ends past the last of them.
    let mut start = 0;
    let from_ends = kept.iter().map(move |&lf| {
        let line = &head[start..usize::from(lf)];
        start = usize::from(lf) + 1;
        strip(line)
    });
    let from_split = split
        .into_iter()
        .flatten()
        .filter_map(|l| l.strip_suffix(b"\n"))
        .map(strip);
    from_ends.chain(from_split)
}

/// Parses one request head from the received bytes (given as two slices).
fn parse_request(a: &[u8], b: &[u8]) -> Option<Request> {
    let mut ends = LineEnds {
        at: [0; LINE_ENDS],
        n: 0,
    };
    let head_len = head_len(a, b, &mut ends)?;
    // The head is almost always contiguous: parse it in place; copy only
    // when the receive ring wrapped inside it.
    let mut wrapped = Vec::new();
    let head: &[u8] = if head_len <= a.len() {
        &a[..head_len]
    } else {
        wrapped.extend_from_slice(a);
        wrapped.extend_from_slice(&b[..head_len - a.len()]);
        &wrapped
    };
    // 400, and the connection closed; without a body to a HEAD (RFC 9110
    // §9.3.2).
    let bad = |head_only| {
        Some(Request {
            status: 400,
            body: Body::Fixed(b"bad request\n"),
            close: true,
            head_len,
            head_only,
        })
    };
    if !head.is_ascii() && std::str::from_utf8(head).is_err() {
        return bad(false);
    }
    let mut lines = head_lines(head, &ends);
    // RFC 9112 §2.2: empty lines before the request line are ignored.
    let request_line = lines.find(|l| !l.is_empty()).unwrap_or_default();
    let mut parts = request_line.split(|&c| c == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad(false);
    };
    // RFC 9112 §3.1: the method is a token; §3.2: the target has no
    // control byte (a NUL or bare CR a front end may read otherwise).
    if method.is_empty()
        || !method
            .iter()
            .all(|&c| BYTE_CLASS[usize::from(c)] & TCHAR != 0)
    {
        return bad(false);
    }
    let head_only = method == b"HEAD";
    if target.is_empty() || target.iter().any(|&c| c < 0x21 || c == 0x7f) {
        return bad(head_only);
    }
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        _ => return bad(head_only),
    };
    let (mut saw_close, mut saw_keep_alive) = (false, false);
    let mut hosts = 0u32;
    for line in lines.filter(|l| !l.is_empty()) {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return bad(head_only);
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        // RFC 9112 §5.1: no whitespace before the colon (a name that is
        // not a token), §5.2: no obs-fold (a line starting with SP or
        // HTAB has no token before its colon either); §2.2 and RFC 9110
        // §5.5: no CR, NUL or other control byte but HTAB in a value.
        // Each is 400: a front end reading the line otherwise would split
        // requests where we do not.
        if name.is_empty()
            || !name
                .iter()
                .all(|&c| BYTE_CLASS[usize::from(c)] & TCHAR != 0)
        {
            return bad(head_only);
        }
        if !value
            .iter()
            .all(|&c| BYTE_CLASS[usize::from(c)] & IN_VALUE != 0)
        {
            return bad(head_only);
        }
        if name.eq_ignore_ascii_case(b"host") {
            // RFC 9112 §3.2: a Host whose value is not `uri-host [":"
            // port]` is 400.
            hosts += 1;
            if !value
                .trim_ascii()
                .iter()
                .all(|&c| BYTE_CLASS[usize::from(c)] & IN_AUTHORITY != 0)
            {
                return bad(head_only);
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
                saw_close |= token.eq_ignore_ascii_case(b"close");
                saw_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") && value.trim_ascii() != b"0"
            || name.eq_ignore_ascii_case(b"transfer-encoding")
        {
            // Request bodies are not read: refuse rather than misparse.
            return bad(head_only);
        }
    }
    // RFC 9112 §3.2: an HTTP/1.1 request without a Host field, and any
    // request with more than one, is 400.
    if hosts > 1 || (hosts == 0 && !http10) {
        return bad(head_only);
    }
    // RFC 9112 §9.6: `close` wins, whatever else the field says.
    let close = saw_close || (http10 && !saw_keep_alive);
    if method != b"GET" && method != b"HEAD" {
        return Some(Request {
            status: 405,
            body: Body::Fixed(b"method not allowed\n"),
            close,
            head_len,
            head_only: false,
        });
    }
    let Some(path) = target_path(target) else {
        return bad(head_only);
    };
    let bench_page = match path {
        b"/64b" => Some(64),
        b"/1k" => Some(1024),
        b"/250k" => Some(256_000),
        b"/1m" => Some(1 << 20),
        b"/2m" => Some(2 << 20),
        _ => None,
    };
    let (status, body) = if path == b"/" {
        (200, Body::Fixed(INDEX))
    } else if let Some(n) = bench_page {
        (200, Body::Pattern(n))
    } else if let Some(n) = path.strip_prefix(b"/bytes/") {
        // UTF-8: the whole head was checked above.
        match std::str::from_utf8(n).map(str::parse::<u64>) {
            Ok(Ok(n)) if n <= MAX_BODY => (200, Body::Pattern(n)),
            _ => (404, Body::Fixed(b"not found\n")),
        }
    } else {
        (404, Body::Fixed(b"not found\n"))
    };
    Some(Request {
        status,
        body,
        close,
        head_len,
        head_only,
    })
}

/// The path of a GET's request target (RFC 9112 §3.2), without its query:
/// origin-form (`/p?q`) as it is; absolute-form (`http://host/p?q`), which
/// a server must accept (§3.2.2), from the first `/` after its authority,
/// or `/` when it has none. `None` for any other form: 400.
fn target_path(target: &[u8]) -> Option<&[u8]> {
    fn without_query(t: &[u8]) -> &[u8] {
        t.split(|&c| c == b'?').next().unwrap_or_default()
    }
    if target.first() == Some(&b'/') {
        return Some(without_query(target));
    }
    let scheme_len = [&b"http://"[..], b"https://"]
        .into_iter()
        .find(|s| target.len() >= s.len() && target[..s.len()].eq_ignore_ascii_case(s))?
        .len();
    let rest = &target[scheme_len..];
    let authority_end = rest
        .iter()
        .position(|&c| matches!(c, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let (authority, after) = rest.split_at(authority_end);
    if authority.is_empty()
        || !authority
            .iter()
            .all(|&c| BYTE_CLASS[usize::from(c)] & IN_AUTHORITY != 0)
    {
        return None;
    }
    match after.first() {
        Some(b'/') => Some(without_query(after)),
        _ => Some(b"/"),
    }
}

/// [`BYTE_CLASS`]: a `tchar` of RFC 9110 §5.6.2 (what a field name is
/// made of).
const TCHAR: u8 = 1;
/// [`BYTE_CLASS`]: a byte a field value may hold (RFC 9110 §5.5: VCHAR,
/// obs-text, SP, HTAB; no CR, LF, NUL or other control).
const IN_VALUE: u8 = 2;
/// [`BYTE_CLASS`]: a byte of RFC 3986's `host [":" port]` (unreserved,
/// pct-encoded, sub-delims, `:`, and `[` `]` around an IPv6 literal).
const IN_AUTHORITY: u8 = 4;

/// Each byte's classes, looked up once per byte of a head's fields.
static BYTE_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let tchar = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        let in_value = b == b'\t' || (b >= 0x20 && b != 0x7f);
        let in_authority = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b':'
                    | b'['
                    | b']'
            );
        t[c] = if tchar { TCHAR } else { 0 }
            | if in_value { IN_VALUE } else { 0 }
            | if in_authority { IN_AUTHORITY } else { 0 };
        c += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` whole and split in two at every byte (a wrapped
    /// receive ring): the answers agree.
    fn parse(text: &str) -> Option<Request> {
        let bytes = text.as_bytes();
        let whole = parse_request(bytes, b"");
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(parse_request(a, b), whole, "{text:?} cut at {cut}");
        }
        whole
    }

    #[test]
    fn long_heads_and_bytes_next_to_line_feeds() {
        // More lines than one scan keeps, the one that matters last;
        // 0x0b and 0x09 beside LFs (the word-wide search's false hits).
        // (0x0b is no field's byte: such a head is found whole, and is a
        // 400; with HTAB alone in the values it is answered.)
        for (filler, status) in [("\u{b}", 400), ("", 200)] {
            let mut text = String::from("GET /bytes/7 HTTP/1.1\r\nHost: t\r\n");
            for i in 0..40 {
                text.push_str(&format!("{filler}X-{i}: {filler}\tv\r\n"));
            }
            text.push_str("Connection: close\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n");
            let r = parse(&text).unwrap();
            assert!(r.close && r.status == status, "{r:?}");
            if status == 200 {
                assert!(matches!(r.body, Body::Pattern(7)));
            }
            assert_eq!(
                r.head_len,
                text.len() - "GET / HTTP/1.1\r\nHost: t\r\n\r\n".len()
            );
        }
        // The head ends at the first CRLF CRLF, wherever the words fall.
        for pad in 0..9 {
            let text = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(pad));
            assert_eq!(parse(&text).unwrap().head_len, text.len());
        }
    }

    /// A stream over plain buffers: what came in, what went out.
    #[derive(Default)]
    struct Mock {
        http: Session,
        input: Vec<u8>,
        output: Vec<u8>,
        closed: bool,
    }

    impl Stream for Mock {
        fn http(&mut self) -> Option<&mut Session> {
            Some(&mut self.http)
        }
        fn peek(&self) -> (&[u8], &[u8]) {
            (&self.input, &[])
        }
        fn consume(&mut self, n: usize) {
            self.input.drain(..n);
        }
        fn send_space(&self) -> usize {
            1 << 20
        }
        fn send(&mut self, data: &[u8]) -> usize {
            self.output.extend_from_slice(data);
            data.len()
        }
        fn send_with(&mut self, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> usize {
            let start = self.output.len();
            self.output.resize(start + max, 0);
            let n = fill(&mut self.output[start..]);
            self.output.truncate(start + n);
            n
        }
        fn send_from(&mut self, data: &[u8]) -> usize {
            self.send(data)
        }
        fn close(&mut self) {
            self.closed = true;
        }
    }

    /// What the responder answers to `input` fed `step` bytes at a time.
    fn answer(input: &[u8], step: usize) -> Mock {
        let mut r = Responder::new();
        let mut m = Mock::default();
        for piece in input.chunks(step.max(1)) {
            m.input.extend_from_slice(piece);
            r.pump(&mut m);
        }
        m
    }

    /// RFC 9110 §6.6.1: an origin server with a clock sends `Date`, as
    /// IMF-fixdate (§5.6.7), of the second the engine last set. Before,
    /// answers had none.
    #[test]
    fn answers_carry_the_date_the_engine_set() {
        let mut r = Responder::new();
        r.set_clock(784_111_777); // RFC 9110's own example
        let mut m = Mock::default();
        m.input
            .extend_from_slice(b"GET /bytes/1 HTTP/1.1\r\nHost: t\r\n\r\n");
        r.pump(&mut m);
        r.set_clock(1_796_601_600);
        m.input
            .extend_from_slice(b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n");
        r.pump(&mut m);
        let text = String::from_utf8_lossy(&m.output);
        assert!(
            text.contains("\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"),
            "{text}"
        );
        assert!(
            text.contains("\r\nDate: Mon, 07 Dec 2026 00:00:00 GMT\r\n"),
            "{text}"
        );
    }

    /// RFC 9112's framing rules, held to (§5.1: whitespace before the
    /// colon; §5.2: obs-fold; §2.2: a bare CR; RFC 9110 §5.5: NUL): each
    /// a 400 and close, where a front-end proxy reading the line its own
    /// way would split requests elsewhere. Before, `Content-Length : 5`
    /// was taken as an unknown field and the body read as the next
    /// request.
    #[test]
    fn heads_a_front_end_could_read_otherwise_are_refused() {
        for head in [
            "GET / HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\r\n Content-Length: 5\r\n\r\nhello",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\r2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: 1\u{0}2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: t\r\n: empty name\r\n\r\n",
            // A method that is no token, a target with a control byte
            // (RFC 9112 §3.1, §3.2): before, 405 and 404 on a kept
            // connection.
            "G\u{0}T / HTTP/1.1\r\nHost: t\r\n\r\n",
            "GE(T / HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /a\rb HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /a\u{0}b HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /a\u{7f} HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET /a\tb HTTP/1.1\r\nHost: t\r\n\r\n",
        ] {
            let r = parse(head).unwrap();
            assert_eq!((r.status, r.close), (400, true), "{head:?}");
        }
        // Blank lines before the request line are passed over; a head of
        // bare LFs ends at its blank line.
        for head in [
            "\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
            "GET / HTTP/1.1\nHost: a\n\n",
        ] {
            let r = parse(head).unwrap();
            assert_eq!((r.status, r.head_len), (200, head.len()), "{head:?}");
        }
    }

    /// RFC 9112 §9.6: `close` closes, whatever else the field (or another
    /// Connection field) says. Before, the last token won.
    #[test]
    fn close_wins_over_keep_alive() {
        for head in [
            "GET / HTTP/1.1\r\nHost: t\r\nConnection: close, keep-alive\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
            "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
        ] {
            assert!(parse(head).unwrap().close, "{head:?}");
        }
        assert!(
            !parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .close
        );
    }

    /// HEAD gets the head GET would (RFC 9110 §9.3.2: its length and
    /// type), without a body; 405 names what is allowed (§15.5.6); an
    /// 8 KiB request line is 414, 8 KiB of fields 431 (RFC 9112 §3).
    /// Before: `Content-Length: 0`, no `Allow`, 431 for both.
    #[test]
    fn head_405_414_and_431_answer_as_rfc_9110_and_9112_say() {
        let m = answer(
            b"HEAD /bytes/1000 HTTP/1.1\r\nHost: t\r\n\r\nHEAD / HTTP/1.1\r\nHost: t\r\n\r\n",
            1 << 20,
        );
        let text = String::from_utf8_lossy(&m.output);
        assert_eq!(
            text.matches("Content-Length: 1000\r\n").count(),
            1,
            "{text}"
        );
        assert!(text.contains("application/octet-stream"), "{text}");
        assert!(
            text.ends_with("Connection: keep-alive\r\n\r\n"),
            "no body: {text}"
        );
        assert_eq!(text.matches("HTTP/1.1 200").count(), 2);
        // A bad HEAD: 400 without a body (before, with one).
        let m = answer(b"HEAD / HTTP/1.1\r\n\r\n", 1 << 20);
        let text = String::from_utf8_lossy(&m.output);
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "no body: {text}");
        let m = answer(b"POST / HTTP/1.1\r\nHost: t\r\n\r\n", 1 << 20);
        let text = String::from_utf8_lossy(&m.output);
        assert!(
            text.starts_with("HTTP/1.1 405") && text.contains("\r\nAllow: GET, HEAD\r\n"),
            "{text}"
        );
        let long_line = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(MAX_HEAD));
        let m = answer(long_line.as_bytes(), 1 << 20);
        assert!(String::from_utf8_lossy(&m.output).starts_with("HTTP/1.1 414 URI Too Long"));
        let long_field = format!(
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        let m = answer(long_field.as_bytes(), 1 << 20);
        assert!(String::from_utf8_lossy(&m.output).starts_with("HTTP/1.1 431"));
    }

    /// A head sent a byte at a time is scanned once: each byte's scan
    /// starts where the last stopped (`scanned`), and it is parsed when
    /// its end comes. Before, every byte rescanned all the head so far:
    /// 8 KiB a byte at a time read 33 M bytes.
    #[test]
    fn a_head_in_pieces_is_scanned_from_where_the_last_scan_stopped() {
        let head = format!(
            "GET /bytes/3 HTTP/1.1\r\nHost: t\r\nX-A: {}\r\n\r\n",
            "a".repeat(4000)
        );
        let mut r = Responder::new();
        let mut m = Mock::default();
        for (k, &byte) in head.as_bytes().iter().enumerate() {
            m.input.push(byte);
            r.pump(&mut m);
            if k + 1 < head.len() {
                assert_eq!(m.http.scanned, k + 1, "byte {k}");
                assert!(m.output.is_empty());
            }
        }
        let text = String::from_utf8_lossy(&m.output);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("012"),
            "{text}"
        );
        assert_eq!(m.http.scanned, 0, "a new head starts");
        assert!(head_ends_after(b"x\r\n\r\n", b"", 0));
        assert!(!head_ends_after(b"x\r\n\r\n", b"", 5));
        assert!(head_ends_after(b"x\r\n", b"\r\n", 1));
    }

    /// RFC 9112 §3.2: an HTTP/1.1 request without Host, any request with
    /// two, or one whose Host is not `host[:port]`, is 400; HTTP/1.0 may
    /// leave it out. Before, all were answered.
    #[test]
    fn host_fields_are_held_to_rfc_9112() {
        for head in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: user@a\r\n\r\n",
        ] {
            let r = parse(head).unwrap();
            assert_eq!((r.status, r.close), (400, true), "{head:?}");
        }
        for head in [
            "GET / HTTP/1.0\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: \r\n\r\n",
            "GET / HTTP/1.1\r\nHOST:  [2001:db8::1]:8443 \r\n\r\n",
            "GET / HTTP/1.1\r\nHost: www.example.com:443\r\n\r\n",
        ] {
            assert_eq!(parse(head).unwrap().status, 200, "{head:?}");
        }
    }

    /// RFC 9112 §3.2.2: a server accepts the absolute-form and answers
    /// for its path; a target in no form a GET may take is 400. Before,
    /// `http://a/bytes/3` was 404 and `bytes/3` 404.
    #[test]
    fn absolute_form_targets_are_answered_for_their_path() {
        for (target, status, body) in [
            ("http://a/bytes/3", 200, Some(3)),
            ("HTTPS://a:443/bytes/4?x=/bytes/9", 200, Some(4)),
            ("http://a", 200, None),
            ("http://a?q", 200, None),
            ("http://a/nothing", 404, None),
            ("bytes/3", 400, None),
            ("http:///bytes/3", 400, None),
            ("http://a<b/", 400, None),
            ("ftp://a/bytes/3", 400, None),
            ("*", 400, None),
        ] {
            let head = format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n");
            let r = parse(&head).unwrap();
            assert_eq!(r.status, status, "{target}");
            if let Some(n) = body {
                assert!(matches!(r.body, Body::Pattern(m) if m == n), "{target}");
            }
        }
    }

    #[test]
    fn decimals() {
        for n in [0, 7, 10, 404, 1 << 20, u64::MAX] {
            let mut out = b"x".to_vec();
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
    }

    #[test]
    fn header_lines_end_in_crlf_or_a_bare_lf() {
        let r = parse("GET /bytes/5 HTTP/1.1\r\nHost: t\r\nConnection: x, Close \r\n\r\n").unwrap();
        assert!(r.close && matches!(r.body, Body::Pattern(5)));
        let r = parse("GET /bytes/5 HTTP/1.1\nConnection: close\r\n\r\n").unwrap();
        assert!(r.close, "RFC 9112 §2.2: a bare LF ends a line too");
        assert_eq!(
            parse("GET / HTTP/1.1\r\nHost: t\r\nNoColon\r\n\r\n")
                .unwrap()
                .status,
            400
        );
        assert_eq!(
            parse("GET /\u{e9} HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap()
                .status,
            404
        );
        let bad_utf8 = parse_request(b"GET /\xff HTTP/1.1\r\nHost: t\r\n\r\n", b"").unwrap();
        assert_eq!(bad_utf8.status, 400);
    }

    #[test]
    fn requests() {
        let r = parse("GET /bytes/1024 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(matches!(r.body, Body::Pattern(1024)) && r.status == 200 && !r.close);
        let r = parse("GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(r.close && r.status == 200);
        let r = parse("GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET").unwrap();
        assert!(!r.close && r.status == 404 && r.head_len == 43);
        assert!(
            parse("GET / HTTP/1.1\r\nHost: x\r\n").is_none(),
            "incomplete"
        );
        assert_eq!(
            parse("POST / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap().status,
            405
        );
        assert_eq!(parse("GARBAGE\r\n\r\n").unwrap().status, 400);
        assert_eq!(parse("GET / HTTP/2.0\r\n\r\n").unwrap().status, 400);
        assert_eq!(
            parse("GET /bytes/99999999999999999999 HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap()
                .status,
            404
        );
        assert!(
            parse("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                .unwrap()
                .close
        );
        // The benchmark peers' pages.
        let r = parse("GET /1m HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        assert!(matches!(r.body, Body::Pattern(1_048_576)));
        let r = parse("GET /64b HTTP/1.0\r\n\r\n").unwrap();
        assert!(matches!(r.body, Body::Pattern(64)) && r.close);
    }

    #[test]
    fn pattern_fills_of_every_phase_and_length_match_the_definition() {
        // Lengths across the 16 KiB run boundary, from every phase.
        for pos in (0..130u64).chain([1 << 20, (1 << 40) - 7]) {
            for len in [0, 1, 63, 64, 65, RUN - 1, RUN, RUN + 1, 3 * RUN + 17] {
                let mut out = vec![0u8; len];
                fill_pattern(&mut out, pos);
                let want = (0..len as u64).map(|i| PATTERN[((pos + i) % 64) as usize]);
                assert!(out.iter().copied().eq(want), "pos {pos} len {len}");
            }
        }
    }

    #[test]
    fn pattern_continues_across_fills() {
        let mut whole = vec![0u8; 1000];
        fill_pattern(&mut whole, 0);
        let mut parts = vec![0u8; 1000];
        let (a, b) = parts.split_at_mut(333);
        fill_pattern(a, 0);
        fill_pattern(b, 333);
        assert_eq!(whole, parts);
        assert_eq!(whole[64], b'0');
        assert_eq!(whole[65], b'1');
    }
}
