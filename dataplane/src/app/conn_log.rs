//! The connection log's records (docs/architecture.md, "The connection
//! log"): each client connection, as it ends, becomes one fixed-size
//! [`ConnRecord`] that its engine pushes into a bounded queue of its own
//! ([`ConnLogQueues`]); the control side's writer thread takes them and
//! writes one JSON line each ([`ConnRecord::json_line`]). An engine never
//! waits for the writer: a record that finds its queue full is dropped
//! and counted (`conn_log_dropped`).

use std::net::SocketAddr;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use crypto::session::{Failure, Negotiated, GROUPS, KEY_TYPES, SUITES, VERSIONS};

use super::deadlines::Wait;
use super::proxy::BackendTrouble;
use super::role::{Entry, Inner, Role};
use super::{Cx, Services};
use crate::tcp::{CloseReason, ConnId, Ended};
use crate::time::Instant;

/// How a client connection ended, as the log names it (defined with the
/// configuration, whose `connection_ends` names them).
pub use control::config::ConnEnd as End;

/// Records each engine's queue holds (2 MiB): 20 ms, the writer's round,
/// of 400,000 connection ends a second, more than an engine ends here.
pub const QUEUE_RECORDS: usize = 8_192;

/// A record stays small: a queue is its size times [`QUEUE_RECORDS`].
const _: () = assert!(std::mem::size_of::<ConnRecord>() <= 256);

/// One queue of records per engine, made when the log is first turned on
/// and kept while dpd runs.
#[derive(Debug)]
pub struct ConnLogQueues {
    queues: Vec<ArrayQueue<ConnRecord>>,
}

impl ConnLogQueues {
    pub fn new(engines: usize) -> Self {
        Self::with_capacity(engines, QUEUE_RECORDS)
    }

    /// Queues of `capacity` records (tests).
    pub fn with_capacity(engines: usize, capacity: usize) -> Self {
        Self {
            queues: (0..engines.max(1))
                .map(|_| ArrayQueue::new(capacity.max(1)))
                .collect(),
        }
    }

    /// Engine `engine`'s queue.
    pub fn of(&self, engine: usize) -> Option<&ArrayQueue<ConnRecord>> {
        self.queues.get(engine)
    }

    /// Takes every record queued now, engine by engine.
    pub fn drain(&self, mut each: impl FnMut(ConnRecord)) {
        for q in &self.queues {
            // Bounded by what is there now: an engine pushing meanwhile
            // waits for the next round.
            for _ in 0..q.len() {
                match q.pop() {
                    Some(r) => each(r),
                    None => break,
                }
            }
        }
    }
}

/// How the connection with close `reason` ended, given what it waited for,
/// whether TLS failed on it, and (proxied) what its backend did.
pub fn end_of(
    reason: CloseReason,
    wait: Wait,
    tls_failed: bool,
    backend: Option<BackendTrouble>,
) -> End {
    match (backend, reason) {
        // The client's own reset or silence came first.
        (
            _,
            CloseReason::Reset
            | CloseReason::TimedOut
            | CloseReason::Deadline
            | CloseReason::Denied
            | CloseReason::Operator
            | CloseReason::Stopped,
        ) => {}
        (Some(BackendTrouble::NoMember), _) => return End::NoBackend,
        (Some(BackendTrouble::Reset), _) => return End::BackendReset,
        (None, _) => {}
    }
    match reason {
        CloseReason::Normal if tls_failed => End::TlsFailure,
        CloseReason::Normal => End::Closed,
        CloseReason::Reset => End::ClientReset,
        CloseReason::TimedOut => End::TcpTimeout,
        CloseReason::Deadline => match wait {
            Wait::Handshake => End::HandshakeTimeout,
            Wait::Linger => End::TcpTimeout,
            Wait::Request(_) | Wait::Nothing => End::RequestTimeout,
        },
        CloseReason::SendTimeout => End::SendTimeout,
        CloseReason::Denied => End::Denied,
        CloseReason::Operator => End::OperatorReset,
        CloseReason::Stopped => End::Stopped,
        CloseReason::Aborted | CloseReason::Refused if tls_failed => End::TlsFailure,
        CloseReason::Aborted | CloseReason::Refused => End::Reset,
    }
}

/// A TLS client's reset that came once everything before our
/// close_notify was acknowledged refused only our close (a client that
/// closed its socket, as curl does, or as a browser closing an idle
/// connection, resets the close_notify it will not read; RFC 8446 §6.1
/// lets it close without waiting for ours): the client got all it was
/// sent, and the connection ended as `closed`.
fn refused_only_our_close(role: &Role, ended: &Ended) -> bool {
    let Role::Tls(t) = role else {
        return false;
    };
    let acked = ended
        .bytes_queued
        .saturating_sub(u64::from(ended.bytes_unacked));
    t.conn.close_sent_at.is_some_and(|before| acked >= before)
}

/// The ends a connection log takes (`[log] connection_ends`): a bit per
/// [`End`], checked before a record is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndSet(u16);

impl EndSet {
    /// Every end: the default.
    pub const ALL: EndSet = EndSet((1 << End::ALL.len()) - 1);

    pub fn of(ends: &[End]) -> Self {
        Self(ends.iter().fold(0, |bits, &e| bits | Self::bit(e)))
    }

    pub fn contains(self, end: End) -> bool {
        self.0 & Self::bit(end) != 0
    }

    fn bit(end: End) -> u16 {
        1 << end as u16
    }
}

impl Default for EndSet {
    fn default() -> Self {
        Self::ALL
    }
}

/// A TLS connection's part of its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsEnd {
    /// What its handshake negotiated (`None`: it did not finish).
    pub negotiated: Option<Negotiated>,
    pub failure: Option<Failure>,
    /// The name the client asked for (SNI), moved out of the session.
    pub sni: Option<Box<str>>,
    /// The client closed its session with close_notify.
    pub close_notify: bool,
    /// From the connection's SYN to its handshake's end, microseconds
    /// (kept small: a record's size is bounded).
    pub handshake_us: Option<u32>,
}

/// One client connection's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRecord {
    /// When it ended: nanoseconds since the Unix epoch.
    pub unix_ns: u64,
    /// From its SYN to its end.
    pub duration: Duration,
    pub engine: u16,
    /// Its VIP's counter slot (named by the writer).
    pub vip: u16,
    /// The VIP's address and port, and the client's.
    pub local: SocketAddr,
    pub client: SocketAddr,
    pub end: End,
    /// What served it, as `dpctl conn list` names it.
    pub role: &'static str,
    /// Requests the built-in responder answered (`None`: proxied).
    pub requests: Option<u32>,
    /// TCP payload bytes from the client, and queued to it (TLS records
    /// included).
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Of `bytes_out`, those the client had not acknowledged at the end
    /// (a reset lost them).
    pub bytes_unacked: u32,
    pub tls: Option<TlsEnd>,
    /// Proxied: the backend it went to, and the bytes passed to it.
    pub backend: Option<SocketAddr>,
    pub to_backend: u64,
}

impl ConnRecord {
    /// The record as one line of JSON (with its newline); `vip` names its
    /// VIP. Fields without a value for this connection are left out.
    pub fn json_line(&self, vip: &str) -> String {
        let mut out = Vec::with_capacity(320);
        self.write_json_line(vip, &mut LineClock::default(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// [`ConnRecord::json_line`] appended to `out`, written by hand (a
    /// `serde_json` map cost the writer 2.6 µs a line, fewer lines a
    /// second than one engine ends connections); `clock` keeps the text
    /// of the current second.
    pub fn write_json_line(&self, vip: &str, clock: &mut LineClock, out: &mut Vec<u8>) {
        use std::io::Write;
        out.extend_from_slice(b"{\"time\":\"");
        clock.write(self.unix_ns, out);
        out.extend_from_slice(b"\",\"vip\":");
        json_string(vip, out);
        let _ = write!(
            out,
            ",\"vip_addr\":\"{}\",\"client\":\"{}\",\"engine\":{}",
            self.local, self.client, self.engine
        );
        let us = self.duration.as_micros();
        let _ = write!(out, ",\"duration_ms\":{}.{:03}", us / 1000, us % 1000);
        let _ = write!(out, ",\"end\":\"{}\"", self.end.name());
        if !self.role.is_empty() {
            let _ = write!(out, ",\"role\":\"{}\"", self.role);
        }
        if let Some(n) = self.requests {
            let _ = write!(out, ",\"requests\":{n}");
        }
        let _ = write!(
            out,
            ",\"bytes_in\":{},\"bytes_out\":{}",
            self.bytes_in, self.bytes_out
        );
        if self.bytes_unacked > 0 {
            let _ = write!(out, ",\"bytes_unacked\":{}", self.bytes_unacked);
        }
        if let Some(t) = &self.tls {
            let handshake = match (t.negotiated, t.failure) {
                (Some(_), _) => "done",
                (None, Some(_)) => "failed",
                (None, None) => "incomplete",
            };
            let _ = write!(out, ",\"tls_handshake\":\"{handshake}\"");
            if let Some(us) = t.handshake_us {
                let _ = write!(out, ",\"tls_handshake_ms\":{}.{:03}", us / 1000, us % 1000);
            }
            if let Some(n) = t.negotiated {
                let name =
                    |list: &[&'static str], i: usize| list.get(i).copied().unwrap_or("other");
                let _ = write!(
                    out,
                    ",\"tls_version\":\"{}\",\"tls_suite\":\"{}\",\"tls_group\":\"{}\",\"tls_key\":\"{}\",\"tls_resumed\":{}",
                    name(&VERSIONS, n.version),
                    name(&SUITES, n.suite),
                    name(&GROUPS, n.group),
                    name(&KEY_TYPES, n.key),
                    n.resumed
                );
            }
            if let Some(f) = t.failure {
                let _ = write!(out, ",\"tls_failure\":\"{}\"", f.name());
            }
            if t.close_notify {
                out.extend_from_slice(b",\"tls_close_notify\":true");
            }
            if let Some(sni) = &t.sni {
                out.extend_from_slice(b",\"sni\":");
                json_string(sni, out);
            }
        }
        if let Some(b) = self.backend {
            let _ = write!(
                out,
                ",\"backend\":\"{b}\",\"to_backend\":{}",
                self.to_backend
            );
        }
        out.extend_from_slice(b"}\n");
    }
}

/// `s` as a JSON string: quotes, backslashes and control characters
/// escaped (RFC 8259 §7).
fn json_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in s.bytes() {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => {
                let hex = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(hex[usize::from(c >> 4)]);
                out.push(hex[usize::from(c & 15)]);
            }
            _ => out.push(c),
        }
    }
    out.push(b'"');
}

/// The text of a time stamp's second (`2026-12-07T03:00:00`), made once a
/// second: lines of the same second add only their microseconds.
#[derive(Debug, Default)]
pub struct LineClock {
    second: Option<(u64, String)>,
}

impl LineClock {
    /// Appends `unix_ns` as RFC 3339 UTC with microseconds.
    fn write(&mut self, unix_ns: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        let secs = unix_ns / 1_000_000_000;
        if self.second.as_ref().is_none_or(|(s, _)| *s != secs) {
            let t = i64::try_from(secs)
                .ok()
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            self.second = Some((secs, t.strftime("%Y-%m-%dT%H:%M:%S").to_string()));
        }
        if let Some((_, text)) = &self.second {
            out.extend_from_slice(text.as_bytes());
        }
        let _ = write!(out, ".{:06}Z", unix_ns % 1_000_000_000 / 1000);
    }
}

/// Engine time to wall-clock time: an engine reads the wall clock at most
/// once a second (`SystemTime`, a vDSO read, not a system call) and dates
/// its records from the engine clock since.
#[derive(Debug, Default, Clone, Copy)]
pub struct WallClock {
    /// An engine time and the Unix time at it (nanoseconds), once read.
    anchor: Option<(Instant, u64)>,
}

impl WallClock {
    /// How often the wall clock is read again.
    const REFRESH: Duration = Duration::from_secs(1);

    /// Unix nanoseconds at engine time `now`.
    pub fn unix_ns(&mut self, now: Instant) -> u64 {
        let fresh = self
            .anchor
            .filter(|&(at, _)| now.saturating_since(at) < Self::REFRESH && now >= at);
        let (at, unix) = match fresh {
            Some(a) => a,
            None => {
                let unix = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                self.anchor = Some((now, unix));
                (now, unix)
            }
        };
        unix + now.saturating_since(at).as_nanos() as u64
    }
}

impl Services {
    /// Records the end of client connection `entry` in its engine's
    /// queue, or counts it dropped when the queue is full.
    pub(super) fn log_end(&mut self, cx: &mut Cx<'_>, entry: &mut Entry, reason: CloseReason) {
        let Some(vip) = entry.vip else {
            return;
        };
        let Some(ended) = cx.tcp.take_ended(entry.id) else {
            return; // never expected: TCP keeps the end of every accepted one
        };
        let tls_failed = matches!(&entry.role, Role::Tls(t) if t.conn.failure().is_some());
        let trouble = entry.role.link().and_then(|l| l.backend_trouble);
        let mut end = end_of(reason, entry.wait, tls_failed, trouble);
        if end == End::ClientReset && refused_only_our_close(&entry.role, &ended) {
            end = End::Closed;
        }
        if !self.conn_log_ends.contains(end) {
            return;
        }
        let described = self.describe_entry(entry);
        let (requests, tls) = match &mut entry.role {
            Role::Responder(http) => (Some(http.answered()), None),
            Role::Client(_) => (None, None),
            Role::Tls(t) => {
                let requests = match &t.inner {
                    Inner::Responder(http) => Some(http.answered()),
                    Inner::Proxy(_) => None,
                };
                let tls = TlsEnd {
                    negotiated: t.conn.session().negotiated(),
                    failure: t.conn.failure(),
                    // A proxied client's backend may still be opening,
                    // its PROXY header still to name it: copied then.
                    sni: match t.inner {
                        Inner::Proxy(_) => t.conn.session().server_name().map(Box::from),
                        Inner::Responder(_) => t.conn.take_server_name(),
                    },
                    close_notify: t.conn.session().peer_closed(),
                    handshake_us: (t.conn.handshake_done).map(|at| {
                        let us = at.saturating_since(ended.opened).as_micros();
                        u32::try_from(us).unwrap_or(u32::MAX)
                    }),
                };
                (requests, Some(tls))
            }
            Role::Backend(_) | Role::Probe(_) => return,
        };
        let record = ConnRecord {
            role: described.role,
            requests,
            tls,
            backend: described.backend,
            to_backend: described.to_backend,
            ..self.record_of(cx, &ended, vip, end)
        };
        self.queue_record(cx, record);
    }

    /// Records the end of accepted connection `id`, which ended before it
    /// had a role: its handshake's ACK and its end came in one burst, or
    /// it was refused as it was accepted (its VIP had gone).
    pub(super) fn log_unserved_end(&mut self, cx: &mut Cx<'_>, id: ConnId, reason: CloseReason) {
        let Some(ended) = cx.tcp.take_ended(id) else {
            return;
        };
        let vip = super::services::vip_taking(&self.vips, ended.key.local_addr());
        let end = end_of(reason, Wait::Nothing, false, None);
        if !self.conn_log_ends.contains(end) {
            return;
        }
        let record = ConnRecord {
            tls: vip.and_then(|v| v.tls.as_ref()).map(|_| TlsEnd {
                negotiated: None,
                failure: None,
                sni: None,
                close_notify: false,
                handshake_us: None,
            }),
            ..self.record_of(cx, &ended, vip.map_or(UNKNOWN_VIP, |v| v.slot), end)
        };
        self.queue_record(cx, record);
    }

    /// A record of `ended` at VIP slot `vip` with TCP's figures; what
    /// served it (role, requests, TLS, backend) left for the caller.
    fn record_of(&mut self, cx: &Cx<'_>, ended: &Ended, vip: u16, end: End) -> ConnRecord {
        ConnRecord {
            unix_ns: self.wall.unix_ns(cx.now),
            duration: cx.now.saturating_since(ended.opened),
            engine: u16::try_from(self.engine_index).unwrap_or(u16::MAX),
            vip,
            local: ended.key.local_addr(),
            client: ended.key.remote_addr(),
            end,
            role: "",
            requests: None,
            bytes_in: ended.bytes_received,
            bytes_out: ended.bytes_queued,
            bytes_unacked: ended.bytes_unacked,
            tls: None,
            backend: None,
            to_backend: 0,
        }
    }

    fn queue_record(&mut self, cx: &mut Cx<'_>, record: ConnRecord) {
        let Some(queue) = (self.conn_log.as_ref()).and_then(|q| q.of(self.engine_index)) else {
            return;
        };
        if queue.push(record).is_ok() {
            cx.counters.conn_log_records += 1;
        } else {
            cx.counters.conn_log_dropped += 1;
        }
    }
}

/// The VIP slot of a record whose VIP is gone (no name: the writer
/// leaves `vip` empty).
pub const UNKNOWN_VIP: u16 = u16::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ConnRecord {
        ConnRecord {
            unix_ns: 1_796_612_400_123_456_789,
            duration: Duration::from_micros(12_345_678),
            engine: 1,
            vip: 3,
            local: "10.77.0.1:443".parse().unwrap(),
            client: "[2001:db8::7]:50123".parse().unwrap(),
            end: End::Closed,
            role: "tls-proxy",
            requests: None,
            bytes_in: 517,
            bytes_out: 4096,
            bytes_unacked: 31,
            tls: Some(TlsEnd {
                negotiated: Some(Negotiated {
                    version: 1,
                    suite: 0,
                    group: 1,
                    key: 3,
                    resumed: false,
                }),
                failure: None,
                sni: Some("a.test".into()),
                close_notify: true,
                handshake_us: Some(2_345),
            }),
            backend: Some("10.0.0.5:80".parse().unwrap()),
            to_backend: 77,
        }
    }

    #[test]
    fn a_record_is_one_json_line_naming_every_field_it_has() {
        let line = record().json_line("web \"1\"");
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2026-12-07T03:00:00.123456Z");
        assert_eq!(v["vip"], "web \"1\"");
        assert_eq!(v["vip_addr"], "10.77.0.1:443");
        assert_eq!(v["client"], "[2001:db8::7]:50123");
        assert_eq!(v["engine"], 1);
        assert_eq!(v["duration_ms"], 12345.678);
        assert_eq!(v["end"], "closed");
        assert_eq!(v["role"], "tls-proxy");
        assert_eq!(v["bytes_in"], 517);
        assert_eq!(v["bytes_out"], 4096);
        assert_eq!(v["tls_handshake"], "done");
        assert_eq!(v["tls_version"], "TLSv1.3");
        assert_eq!(v["tls_suite"], "TLS13_AES_128_GCM_SHA256");
        assert_eq!(v["tls_group"], "X25519");
        assert_eq!(v["tls_key"], "ECDSA-P256");
        assert_eq!(v["tls_resumed"], false);
        assert_eq!(v["sni"], "a.test");
        assert_eq!(v["tls_close_notify"], true);
        assert_eq!(v["tls_handshake_ms"], 2.345);
        assert_eq!(v["bytes_unacked"], 31);
        assert_eq!(v["backend"], "10.0.0.5:80");
        assert_eq!(v["to_backend"], 77);
        assert!(v.get("requests").is_none() && v.get("tls_failure").is_none());

        let mut odd = record();
        odd.tls.as_mut().unwrap().sni = Some("a\\b\u{1}\"c".into());
        let v: serde_json::Value = serde_json::from_str(&odd.json_line("v")).unwrap();
        assert_eq!(v["sni"], "a\\b\u{1}\"c", "escaped");

        let mut plain = record();
        plain.tls = None;
        plain.backend = None;
        plain.role = "http";
        plain.requests = Some(2);
        plain.bytes_unacked = 0;
        plain.end = End::RequestTimeout;
        let v: serde_json::Value = serde_json::from_str(&plain.json_line("web")).unwrap();
        assert_eq!(v["requests"], 2);
        assert_eq!(v["end"], "request_timeout");
        for absent in [
            "tls_handshake",
            "sni",
            "backend",
            "to_backend",
            "bytes_unacked",
        ] {
            assert!(v.get(absent).is_none(), "{absent}");
        }

        let mut failed = record();
        failed.tls = Some(TlsEnd {
            negotiated: None,
            failure: Some(Failure::NoSharedParameters),
            sni: None,
            close_notify: false,
            handshake_us: None,
        });
        let v: serde_json::Value = serde_json::from_str(&failed.json_line("web")).unwrap();
        assert_eq!(v["tls_handshake"], "failed");
        assert_eq!(v["tls_failure"], "no_shared_parameters");
        assert!(v.get("tls_version").is_none() && v.get("tls_close_notify").is_none());
    }

    #[test]
    fn lines_written_in_turn_carry_their_own_second() {
        let mut clock = LineClock::default();
        let mut out = Vec::new();
        let mut r = record();
        for (ns, want) in [
            (1_796_612_400_000_000_001, "2026-12-07T03:00:00.000000Z"),
            (1_796_612_400_999_999_000, "2026-12-07T03:00:00.999999Z"),
            (1_796_612_401_000_001_000, "2026-12-07T03:00:01.000001Z"),
            (1_796_612_399_500_000_000, "2026-12-07T02:59:59.500000Z"),
        ] {
            r.unix_ns = ns;
            out.clear();
            r.write_json_line("v", &mut clock, &mut out);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["time"], want);
        }
    }

    #[test]
    fn an_end_set_takes_the_ends_named_and_all_by_default() {
        let some = EndSet::of(&[End::TlsFailure, End::HandshakeTimeout]);
        for e in End::ALL {
            let want = matches!(e, End::TlsFailure | End::HandshakeTimeout);
            assert_eq!(some.contains(e), want, "{e:?}");
            assert!(EndSet::default().contains(e), "{e:?}");
        }
        assert_eq!(EndSet::of(&End::ALL), EndSet::ALL);
        let names: std::collections::HashSet<&str> = End::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(names.len(), End::ALL.len(), "one name each");
    }

    #[test]
    fn ends_are_named_by_reason_wait_and_tls_failure() {
        use CloseReason as R;
        let of = |r, w, t| end_of(r, w, t, None);
        assert_eq!(of(R::Normal, Wait::Nothing, false), End::Closed);
        assert_eq!(of(R::Normal, Wait::Nothing, true), End::TlsFailure);
        assert_eq!(of(R::Reset, Wait::Handshake, false), End::ClientReset);
        assert_eq!(of(R::TimedOut, Wait::Nothing, false), End::TcpTimeout);
        assert_eq!(
            of(R::Deadline, Wait::Handshake, false),
            End::HandshakeTimeout
        );
        assert_eq!(
            of(R::Deadline, Wait::Request(3), false),
            End::RequestTimeout
        );
        assert_eq!(of(R::SendTimeout, Wait::Nothing, false), End::SendTimeout);
        assert_eq!(of(R::Aborted, Wait::Nothing, false), End::Reset);
        assert_eq!(of(R::Denied, Wait::Request(0), false), End::Denied);
        assert_eq!(of(R::Operator, Wait::Handshake, false), End::OperatorReset);
        assert_eq!(of(R::Stopped, Wait::Request(0), false), End::Stopped);
        // A stop says more than a backend's trouble that came before it.
        let trouble = Some(BackendTrouble::Reset);
        assert_eq!(
            end_of(R::Stopped, Wait::Nothing, false, trouble),
            End::Stopped
        );
        assert_eq!(of(R::Aborted, Wait::Handshake, true), End::TlsFailure);
        let none = Some(BackendTrouble::NoMember);
        let reset = Some(BackendTrouble::Reset);
        assert_eq!(
            end_of(R::Aborted, Wait::Request(0), false, none),
            End::NoBackend
        );
        // A TLS client gets an alert, then our FIN.
        assert_eq!(
            end_of(R::Normal, Wait::Nothing, false, none),
            End::NoBackend
        );
        assert_eq!(
            end_of(R::Aborted, Wait::Nothing, false, reset),
            End::BackendReset
        );
        assert_eq!(
            end_of(R::Reset, Wait::Nothing, false, reset),
            End::ClientReset,
            "the client reset first"
        );
    }

    #[test]
    fn queues_drop_what_does_not_fit_and_drain_in_engine_order() {
        let queues = ConnLogQueues::with_capacity(2, 2);
        let with = |engine| ConnRecord { engine, ..record() };
        for e in [1, 0, 1, 1] {
            let _ = queues.of(usize::from(e)).unwrap().push(with(e));
        }
        assert!(queues.of(2).is_none());
        let mut got = Vec::new();
        queues.drain(|r| got.push(r.engine));
        assert_eq!(got, [0, 1, 1], "engine 1's third did not fit");
        queues.drain(|_| panic!("empty"));
    }

    #[test]
    fn wall_clock_follows_engine_time_and_reads_again_after_a_second() {
        let mut wall = WallClock::default();
        let t0 = Instant::from_millis(5_000);
        let a = wall.unix_ns(t0);
        let b = wall.unix_ns(t0 + Duration::from_millis(250));
        assert_eq!(b - a, 250_000_000, "dated from the anchor");
        let later = t0 + Duration::from_secs(3);
        let c = wall.unix_ns(later);
        assert_eq!(wall.anchor.map(|(at, _)| at), Some(later), "read again");
        assert!(c >= a);
    }
}
