//! The metrics endpoint's HTTP side: `GET /metrics` answered with the
//! Prometheus text, to several scrapers at once, none able to hold it. Each
//! connection has [`HEAD_TIME`] to send its request head (at most
//! [`MAX_HEAD`] bytes), then its answer goes out for as long as the client
//! takes bytes ([`WRITE_STALL`] without any ends it; [`MAX_EXCHANGE`] in
//! all). At most [`MAX_CONNS`] are served at once, [`MAX_PER_SOURCE`]
//! from one address (an IPv6 client's /64: one host holds a whole /64 as
//! easily as one address); a new connection past the per-source limit is
//! closed at once, and one that finds every slot taken takes the slot of
//! the oldest connection still without a whole head, or else of the
//! oldest answer under way past [`HEAD_TIME`] (slow, silent or slowly
//! reading clients from a few addresses cannot keep the real scraper
//! out). One
//! step takes at most [`MAX_ACCEPTS`] (a flood of connections does not
//! keep the thread accepting, its scrapes unanswered). Sockets are
//! non-blocking: a client that sends slowly or reads nothing costs a slot
//! until its deadline, never the thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Time a connection has from accept to its whole request head.
pub const HEAD_TIME: Duration = Duration::from_secs(2);
/// Time the answer may go without a byte taken by the client.
pub const WRITE_STALL: Duration = Duration::from_secs(2);
/// Time one connection may take in all.
pub const MAX_EXCHANGE: Duration = Duration::from_secs(30);
/// Longest request head read.
pub const MAX_HEAD: usize = 8192;
/// Connections served at once.
pub const MAX_CONNS: usize = 16;
/// Connections served at once from one address (IPv6: one /64).
pub const MAX_PER_SOURCE: usize = 4;
/// Connections accepted (or refused) in one step at most.
pub const MAX_ACCEPTS: usize = 64;

/// What a client counts as for [`MAX_PER_SOURCE`]: its address, or its
/// /64 (IPv4-mapped addresses as IPv4).
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(a) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

struct Exchange {
    stream: TcpStream,
    peer: IpAddr,
    accepted: Instant,
    /// The head's deadline, then the answer's (moved on as bytes go).
    until: Instant,
    head: Vec<u8>,
    /// The answer once the head is in, and how much of it went out.
    answer: Option<(Vec<u8>, usize)>,
}

/// The endpoint's connections.
pub struct MetricsHttp {
    listener: TcpListener,
    conns: Vec<Exchange>,
}

impl MetricsHttp {
    /// # Errors
    /// When the listener cannot be made non-blocking.
    pub fn new(listener: TcpListener) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        Ok(Self {
            listener,
            conns: Vec::with_capacity(MAX_CONNS),
        })
    }

    /// Accepts, reads, answers and closes what it can now, without
    /// waiting; `body` renders the metrics text. Returns whether anything
    /// happened (the caller sleeps a little when nothing did).
    pub fn step(&mut self, now: Instant, body: &mut impl FnMut() -> String) -> bool {
        let mut busy = self.accept(now) > 0;
        let mut i = 0;
        while i < self.conns.len() {
            let (progress, done) = advance(&mut self.conns[i], now, body);
            busy |= progress;
            if done {
                self.conns.swap_remove(i);
            } else {
                i += 1;
            }
        }
        busy
    }

    /// Takes up to [`MAX_ACCEPTS`] new connections; how many.
    fn accept(&mut self, now: Instant) -> usize {
        for taken in 0..MAX_ACCEPTS {
            let (stream, peer) = match self.listener.accept() {
                Ok((stream, peer)) => (stream, source_of(peer.ip())),
                Err(_) => return taken,
            };
            let from_peer = self.conns.iter().filter(|c| c.peer == peer).count();
            if from_peer >= MAX_PER_SOURCE {
                continue; // dropped: closed at once
            }
            if self.conns.len() >= MAX_CONNS {
                // Every slot taken: the oldest that has not sent its head
                // gives its slot up, or else the oldest answer that has
                // taken longer than a head may (a fresh one is kept).
                let oldest = |answering: bool| {
                    (self.conns.iter().enumerate())
                        .filter(|(_, c)| c.answer.is_some() == answering)
                        .filter(|(_, c)| !answering || now >= c.accepted + HEAD_TIME)
                        .min_by_key(|(_, c)| c.accepted)
                        .map(|(i, _)| i)
                };
                let oldest = oldest(false).or_else(|| oldest(true));
                match oldest {
                    Some(i) => drop(self.conns.swap_remove(i)),
                    None => continue,
                }
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.conns.push(Exchange {
                stream,
                peer,
                accepted: now,
                until: now + HEAD_TIME,
                head: Vec::with_capacity(512),
                answer: None,
            });
        }
        MAX_ACCEPTS
    }
}

/// Whether `head` holds the blank line that ends a request head (CRLF
/// CRLF, or bare LFs: RFC 9112 §2.2 lets a recipient take LF alone).
fn head_ended(head: &[u8]) -> bool {
    head.windows(2).any(|w| w == b"\n\n") || head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// Moves one exchange on: `(progress, done)`.
fn advance(c: &mut Exchange, now: Instant, body: &mut impl FnMut() -> String) -> (bool, bool) {
    if now >= c.until {
        return (true, true);
    }
    let mut progress = false;
    if c.answer.is_none() {
        let mut buf = [0u8; 1024];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => return (true, true),
                Ok(n) => {
                    progress = true;
                    c.head.extend_from_slice(&buf[..n]);
                    if c.head.len() >= MAX_HEAD || head_ended(&c.head) {
                        c.answer = Some((answer(&c.head, body), 0));
                        c.until = (now + WRITE_STALL).min(c.accepted + MAX_EXCHANGE);
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return (progress, false),
                Err(_) => return (true, true),
            }
        }
    }
    let Some((bytes, sent)) = c.answer.as_mut() else {
        return (progress, false);
    };
    while *sent < bytes.len() {
        match c.stream.write(&bytes[*sent..]) {
            Ok(0) => return (true, true),
            Ok(n) => {
                *sent += n;
                progress = true;
                // The client takes bytes: it has more time.
                c.until = (now + WRITE_STALL).min(c.accepted + MAX_EXCHANGE);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return (progress, false),
            Err(_) => return (true, true),
        }
    }
    (true, true)
}

/// The HTTP answer to a request head: the metrics to `GET /metrics` (its
/// head alone to `HEAD`), 405 to another method, 404 to another path.
fn answer(head: &[u8], body: &mut impl FnMut() -> String) -> Vec<u8> {
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = first.strip_suffix(b"\r").unwrap_or(first);
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next());
    let metrics = target == Some(b"/metrics");
    let (status, text, head_only) = if head.len() >= MAX_HEAD && !head_ended(head) {
        ("431 Request Header Fields Too Large", String::new(), false)
    } else if method != b"GET" && method != b"HEAD" {
        (
            "405 Method Not Allowed",
            "GET /metrics\n".to_string(),
            false,
        )
    } else if metrics {
        ("200 OK", body(), method == b"HEAD")
    } else {
        (
            "404 Not Found",
            "try GET /metrics\n".to_string(),
            method == b"HEAD",
        )
    };
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(text.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Serves on a loopback port in a thread while `f` runs.
    fn serving(f: impl FnOnce(std::net::SocketAddr)) {
        serving_text("tlsdp_up 1\n".to_string(), f);
    }

    /// [`serving`], the metrics being `text`.
    fn serving_text(text: String, f: impl FnOnce(std::net::SocketAddr)) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut http = MetricsHttp::new(listener).unwrap();
        /// Stops the server even when `f` panics.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut body = || text.clone();
                while !stop.load(Ordering::Relaxed) {
                    if !http.step(Instant::now(), &mut body) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
            let _stop = Stop(&stop);
            f(addr);
        });
    }

    fn scrape(addr: std::net::SocketAddr) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn slow_and_silent_clients_do_not_hold_it() {
        serving(|addr| {
            // Silent ones and a trickling one (one address: within its
            // four slots, with the scrape).
            let silent: Vec<TcpStream> =
                (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
            let mut trickle = TcpStream::connect(addr).unwrap();
            trickle.write_all(b"GET /metr").unwrap();
            let started = Instant::now();
            let text = scrape(addr);
            assert!(
                text.starts_with("HTTP/1.0 200 OK") && text.ends_with("tlsdp_up 1\n"),
                "{text}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "served beside them"
            );
            // Each is closed at its deadline.
            trickle
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut rest = Vec::new();
            assert_eq!(
                trickle.read_to_end(&mut rest).unwrap_or(0),
                0,
                "closed, no answer"
            );
            assert!(started.elapsed() >= HEAD_TIME - Duration::from_millis(100));
            assert!(started.elapsed() < HEAD_TIME + Duration::from_secs(1));
            for mut s in silent {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                assert_eq!(s.read(&mut [0u8; 16]).unwrap_or(0), 0);
            }
        });
    }

    /// One step takes at most [`MAX_ACCEPTS`] connections, the rest the
    /// next; an IPv6 client counts as its /64, an IPv4-mapped one as IPv4.
    #[test]
    fn a_step_takes_a_bounded_number_of_connections_and_a_64_is_one_source() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut http = MetricsHttp::new(listener).unwrap();
        let flood: Vec<TcpStream> = (0..MAX_ACCEPTS + 30)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let now = Instant::now();
        assert_eq!(http.accept(now), MAX_ACCEPTS);
        let mut rest = 0;
        for _ in 0..100 {
            rest += http.accept(now);
            if rest == 30 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(rest, 30);
        drop(flood);
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::7".parse().unwrap();
        assert_eq!(source_of(a), source_of(b));
        assert_ne!(source_of(a), source_of("2001:db8:1:3::1".parse().unwrap()));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(source_of(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn one_address_gets_a_few_slots_and_other_paths_get_404() {
        serving(|addr| {
            let held: Vec<TcpStream> = (0..MAX_PER_SOURCE)
                .map(|_| TcpStream::connect(addr).unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(50));
            // The next one from this address is closed at once.
            let mut extra = TcpStream::connect(addr).unwrap();
            extra
                .set_read_timeout(Some(Duration::from_secs(1)))
                .unwrap();
            let started = Instant::now();
            assert_eq!(extra.read(&mut [0u8; 16]).unwrap_or(0), 0);
            assert!(started.elapsed() < Duration::from_millis(500));
            drop(held);
            std::thread::sleep(Duration::from_millis(50));
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
            let mut text = String::new();
            c.read_to_string(&mut text).unwrap();
            assert!(text.starts_with("HTTP/1.0 404"), "{text}");
        });
    }

    /// A connection from `source` (a loopback address) to `addr`.
    fn from(source: [u8; 4], addr: std::net::SocketAddr) -> TcpStream {
        from_with(source, addr, None)
    }

    /// [`from`], its receive buffer `rcvbuf` bytes when given.
    fn from_with(source: [u8; 4], addr: std::net::SocketAddr, rcvbuf: Option<usize>) -> TcpStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        if let Some(n) = rcvbuf {
            s.set_recv_buffer_size(n).unwrap();
        }
        let local = std::net::SocketAddr::from((source, 0));
        s.bind(&local.into()).unwrap();
        s.connect(&addr.into()).unwrap();
        s.into()
    }

    /// Silent connections from four addresses fill every slot: a scraper
    /// from a fifth still gets its answer at once (it takes the slot of
    /// the oldest silent one). Before, it was closed unanswered for as
    /// long as they were held.
    #[test]
    fn silent_clients_of_a_few_addresses_cannot_keep_the_scraper_out() {
        serving(|addr| {
            let held: Vec<TcpStream> = (2..=5u8)
                .flat_map(|last| (0..MAX_PER_SOURCE).map(move |_| last))
                .map(|last| from([127, 0, 0, last], addr))
                .collect();
            assert_eq!(held.len(), MAX_CONNS);
            std::thread::sleep(Duration::from_millis(50)); // all accepted
            let started = Instant::now();
            let text = scrape(addr);
            assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
            assert!(started.elapsed() < Duration::from_secs(1));
        });
    }

    /// Clients of four addresses that ask and read their answers slowly
    /// (enough to keep them going) fill every slot: past [`HEAD_TIME`], a
    /// scraper from a fifth takes the oldest one's slot and is answered.
    #[test]
    fn answers_read_slowly_give_way_to_a_scraper() {
        let text: String = "tlsdp_x 1\n".repeat(800_000); // 8 MB
        serving_text(text, |addr| {
            let mut held: Vec<TcpStream> = (2..=5u8)
                .flat_map(|last| (0..MAX_PER_SOURCE).map(move |_| last))
                .map(|last| {
                    let mut c = from_with([127, 0, 0, last], addr, Some(4096));
                    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
                    c.set_nonblocking(true).unwrap();
                    c
                })
                .collect();
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    // 64 KiB each every 200 ms: slow, but never stalled.
                    let mut buf = vec![0u8; 64 << 10];
                    while !stop.load(Ordering::Relaxed) {
                        for c in &mut held {
                            let _ = c.read(&mut buf);
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                });
                std::thread::sleep(HEAD_TIME + Duration::from_millis(500));
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                c.write_all(b"HEAD /metrics HTTP/1.0\r\n\r\n").unwrap();
                let mut head = String::new();
                let read = c.read_to_string(&mut head);
                stop.store(true, Ordering::Relaxed);
                read.unwrap();
                assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
            });
        });
    }

    /// A head ended by bare LFs is answered (RFC 9112 §2.2); HEAD gets the
    /// head alone; another method 405 with what is allowed. Before: no
    /// answer until the deadline, and 404 to both.
    #[test]
    fn bare_lf_heads_head_and_other_methods_get_their_answers() {
        serving(|addr| {
            let ask = |req: &[u8]| {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                c.write_all(req).unwrap();
                let mut text = String::new();
                c.read_to_string(&mut text).unwrap();
                text
            };
            let started = Instant::now();
            let text = ask(b"GET /metrics HTTP/1.0\n\n");
            assert!(text.ends_with("\r\n\r\ntlsdp_up 1\n"), "{text}");
            assert!(started.elapsed() < Duration::from_secs(1));
            let text = ask(b"HEAD /metrics HTTP/1.0\r\n\r\n");
            assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
            assert!(text.contains("Content-Length: 11\r\n"), "{text}");
            assert!(text.ends_with("\r\n\r\n"), "no body: {text}");
            let text = ask(b"POST /metrics HTTP/1.0\r\n\r\n");
            assert!(
                text.starts_with("HTTP/1.0 405") && text.contains("Allow: GET, HEAD\r\n"),
                "{text}"
            );
        });
    }

    /// A scraper that takes its answer slowly, but steadily, past the
    /// head's time gets all of it. Before, every exchange was cut 2 s after
    /// its accept, however the bytes moved.
    #[test]
    fn a_slow_steady_reader_gets_the_whole_answer() {
        let text: String = "tlsdp_x 1\n".repeat(3_200_000); // 32 MB
        let len = text.len();
        serving_text(text, |addr| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let started = Instant::now();
            let mut got = 0usize;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let mut chunk = 0;
                while chunk < buf.len() {
                    match c.read(&mut buf[chunk..]) {
                        Ok(0) => break,
                        Ok(n) => chunk += n,
                        Err(e) => panic!("{e}"),
                    }
                }
                got += chunk;
                if chunk < buf.len() {
                    break;
                }
                // A reader slower than the loopback.
                std::thread::sleep(Duration::from_millis(150));
            }
            assert!(started.elapsed() > HEAD_TIME, "it was slow");
            assert!(got > len, "the whole answer: {got} of {len} and a head");
        });
    }
}
