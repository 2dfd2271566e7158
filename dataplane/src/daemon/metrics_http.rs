//! The metrics endpoint's HTTP side: `GET /metrics` answered with the
//! Prometheus text, to several scrapers at once, none able to hold it. Each
//! connection has [`EXCHANGE`] for its whole exchange (request head read,
//! answer written) and at most [`MAX_HEAD`] bytes of head; at most
//! [`MAX_CONNS`] are served at once, [`MAX_PER_SOURCE`] from one address
//! (an IPv6 client's /64: one host holds a whole /64 as easily as one
//! address); past that a new connection is closed at once, and one step
//! takes at most [`MAX_ACCEPTS`] (a flood of connections does not keep
//! the thread accepting, its scrapes unanswered). Sockets are
//! non-blocking: a client that sends slowly or reads nothing costs a slot
//! until its deadline, never the thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Time one connection may take from accept to the last byte written.
pub const EXCHANGE: Duration = Duration::from_secs(2);
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
            if self.conns.len() >= MAX_CONNS || from_peer >= MAX_PER_SOURCE {
                continue; // dropped: closed at once
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.conns.push(Exchange {
                stream,
                peer,
                until: now + EXCHANGE,
                head: Vec::with_capacity(512),
                answer: None,
            });
        }
        MAX_ACCEPTS
    }
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
                    if c.head.len() >= MAX_HEAD || c.head.windows(4).any(|w| w == b"\r\n\r\n") {
                        c.answer = Some((answer(&c.head, body), 0));
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
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return (progress, false),
            Err(_) => return (true, true),
        }
    }
    (true, true)
}

/// The HTTP answer to a request head.
fn answer(head: &[u8], body: &mut impl FnMut() -> String) -> Vec<u8> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, body) = if line.starts_with(b"GET /metrics ") || line == b"GET /metrics" {
        ("200 OK", body())
    } else if head.len() >= MAX_HEAD && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        ("431 Request Header Fields Too Large", String::new())
    } else {
        ("404 Not Found", "try GET /metrics\n".to_string())
    };
    format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Serves on a loopback port in a thread while `f` runs.
    fn serving(f: impl FnOnce(std::net::SocketAddr)) {
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
                let mut body = || "tlsdp_up 1\n".to_string();
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
            assert!(started.elapsed() >= EXCHANGE - Duration::from_millis(100));
            assert!(started.elapsed() < EXCHANGE + Duration::from_secs(1));
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
}
