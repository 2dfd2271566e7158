//! What the control thread tells the engines, and what they answer
//! (docs/architecture.md, `snapshot`): configuration snapshots, pool views and
//! packet captures, over one lock-free ring per engine each way. Engines
//! read their ring at the top of a tick, between packets.

use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

pub use crate::app::config::{MemberView, PoolView, Snapshot, VipSpec};
pub use crate::app::health::{HealthNews, HealthRelay, HealthShare, HealthSink, RING_RESERVE};
pub use crate::stats::MAX_VIPS;

/// A message to an engine.
#[derive(Debug)]
pub enum ToEngine {
    /// Switch to this snapshot; answer [`FromEngine::Applied`].
    Apply(Arc<Snapshot>),
    /// Keep this snapshot ready (replacing one kept before); answer
    /// [`FromEngine::Prepared`]. Nothing changes until its `Commit`.
    Prepare(Arc<Snapshot>),
    /// Switch to the snapshot kept with this version, if it is the one
    /// kept; answer [`FromEngine::Applied`].
    Commit(u64),
    /// Drop the snapshot kept with this version, if it is the one kept.
    Abort(u64),
    /// Answer [`FromEngine::Pools`]. `ask`, in each question, is its
    /// number, echoed in the answer: a late answer to an earlier question
    /// is never taken for this one's.
    Pools { ask: u64 },
    /// Copy frames received and sent on port `port` (index) into `capture`
    /// until its count is spent or it is dropped by the other side.
    Capture { port: usize, capture: Capture },
    /// Another engine's health checks found a member up or down.
    Health(HealthNews),
    /// Stop (`paused`) or resume using port `port` (index), while the
    /// control thread restarts it; answer [`FromEngine::Paused`] with the
    /// question's number (`ask`): a late answer to an earlier pause is
    /// never taken for this one's, so a port is never restarted under an
    /// engine that still uses it.
    Pause { port: usize, paused: bool, ask: u64 },
    /// Answer [`FromEngine::Sources`]: the `max` client addresses with
    /// the most connections open, to `local` only when given.
    Sources {
        ask: u64,
        local: Option<(std::net::IpAddr, u16)>,
        max: usize,
    },
    /// Answer [`FromEngine::Conns`]: the `max` oldest accepted
    /// connections `filter` picks.
    Conns {
        ask: u64,
        filter: crate::tcp::ConnFilter,
        max: usize,
    },
    /// Answer [`FromEngine::Serving`]: which of `addrs` (removed VIPs'
    /// addresses) the engine's connections still use.
    Serving { ask: u64, addrs: Vec<IpAddr> },
    /// Reset the accepted connections `filter` picks; answer
    /// [`FromEngine::ConnsReset`] with how many.
    ConnsReset {
        ask: u64,
        filter: crate::tcp::ConnFilter,
    },
    /// Answer [`FromEngine::Refused`]: the `max` sources refused most
    /// lately, at VIP slot `vip` only when given.
    Refused {
        ask: u64,
        vip: Option<u16>,
        max: usize,
    },
}

/// An engine's answer; `engine` is its index.
#[derive(Debug)]
pub enum FromEngine {
    Prepared {
        engine: usize,
        version: u64,
    },
    Applied {
        engine: usize,
        version: u64,
    },
    Pools {
        engine: usize,
        ask: u64,
        pools: Vec<PoolView>,
    },
    /// Port `port` is paused or in use again, as asked.
    Paused {
        engine: usize,
        port: usize,
        paused: bool,
        ask: u64,
    },
    Sources {
        engine: usize,
        ask: u64,
        sources: Vec<crate::tcp::SourceCount>,
    },
    /// Each with what the application does with it.
    Conns {
        engine: usize,
        ask: u64,
        conns: Vec<(crate::tcp::ConnView, crate::app::ConnUse)>,
    },
    ConnsReset {
        engine: usize,
        ask: u64,
        reset: u64,
    },
    Serving {
        engine: usize,
        ask: u64,
        serving: Vec<IpAddr>,
    },
    Refused {
        engine: usize,
        ask: u64,
        sources: Vec<crate::tcp::RefusedSource>,
    },
}

impl HealthSink for ControlLink {
    fn room(&self) -> usize {
        self.to_engine.capacity() - self.to_engine.len()
    }

    fn push_news(&self, news: HealthNews) -> bool {
        self.to_engine.push(ToEngine::Health(news)).is_ok()
    }
}

/// The rings between the control thread and one engine.
#[derive(Debug, Clone)]
pub struct ControlLink {
    pub engine: usize,
    pub to_engine: Arc<ArrayQueue<ToEngine>>,
    /// Shared by all engines.
    pub from_engines: Arc<ArrayQueue<FromEngine>>,
}

impl ControlLink {
    /// Links for `engines` engines.
    pub fn new_set(engines: usize) -> Vec<ControlLink> {
        let from = Arc::new(ArrayQueue::new(16 * engines.max(1)));
        (0..engines)
            .map(|engine| ControlLink {
                engine,
                to_engine: Arc::new(ArrayQueue::new(256)),
                from_engines: from.clone(),
            })
            .collect()
    }
}

/// A frame copied for a capture.
#[derive(Debug)]
pub struct CapturedFrame {
    /// Wall-clock time, nanoseconds since the Unix epoch.
    pub unix_ns: u64,
    /// The frame's first [`CAPTURE_SNAPLEN`] bytes.
    pub data: Vec<u8>,
    /// The frame's whole length (a jumbo or TSO frame is longer than
    /// `data`: pcap readers then show it cut, not malformed).
    pub len: u32,
}

/// A capture in progress on one port of every engine: frames go to a
/// bounded queue the control thread empties; `remaining` (shared by the
/// engines) counts down.
#[derive(Debug, Clone)]
pub struct Capture {
    pub remaining: Arc<AtomicI64>,
    pub frames: Arc<ArrayQueue<CapturedFrame>>,
}

/// Longest part of a frame kept (Ethernet MTU and headers).
pub const CAPTURE_SNAPLEN: usize = 1600;

impl Capture {
    /// A capture of `count` frames.
    pub fn new(count: u32) -> Self {
        Self {
            remaining: Arc::new(AtomicI64::new(i64::from(count))),
            frames: Arc::new(ArrayQueue::new(count.max(1) as usize)),
        }
    }

    /// Ends the capture (the control thread gave up waiting).
    pub fn stop(&self) {
        self.remaining.store(0, Ordering::Relaxed);
    }

    /// Copies `frame` if the count is not spent; false once it is (or the
    /// capture was stopped), and the engine stops capturing. Only runs
    /// while a capture is asked for: it allocates.
    pub fn take(&self, frame: &[u8]) -> bool {
        if self.remaining.fetch_sub(1, Ordering::Relaxed) <= 0 {
            return false;
        }
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let data = frame[..frame.len().min(CAPTURE_SNAPLEN)].to_vec();
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let _ = self.frames.push(CapturedFrame { unix_ns, data, len });
        true
    }
}

/// Writes `frames` as a pcap file (microsecond timestamps, Ethernet),
/// atomically and mode 0600 (frames may carry cleartext):
/// [`crate::files::write_atomically`].
///
/// # Errors
/// When the file cannot be written.
pub fn write_pcap(path: &std::path::Path, frames: &[CapturedFrame]) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(24 + frames.iter().map(|f| 16 + f.data.len()).sum::<usize>());
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(CAPTURE_SNAPLEN as u32).to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for f in frames {
        let kept = f.data.len() as u32; // at most CAPTURE_SNAPLEN
        out.extend_from_slice(&((f.unix_ns / 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((f.unix_ns % 1_000_000_000 / 1000) as u32).to_le_bytes());
        out.extend_from_slice(&kept.to_le_bytes());
        out.extend_from_slice(&f.len.max(kept).to_le_bytes());
        out.extend_from_slice(&f.data);
    }
    crate::files::write_atomically(path, &out, 0o600)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddrV4};

    use super::*;

    #[test]
    fn capture_counts_down_and_stops_when_abandoned() {
        let c = Capture::new(2);
        let engine_copy = c.clone();
        assert!(engine_copy.take(&[1; 60]));
        assert!(engine_copy.take(&[2; 2000]));
        assert!(!engine_copy.take(&[3; 60]), "count spent");
        assert_eq!(c.frames.len(), 2);
        assert_eq!(c.frames.pop().unwrap().data, [1; 60]);
        assert_eq!(c.frames.pop().unwrap().data.len(), CAPTURE_SNAPLEN);
        let stopped = Capture::new(5);
        let engine_copy = stopped.clone();
        stopped.stop();
        assert!(!engine_copy.take(&[1; 60]));
    }

    #[test]
    fn each_member_is_checked_by_exactly_one_engine() {
        let (shares, _) = HealthShare::new_set(3);
        let mut per_engine = [0; 3];
        for port in 8000..8300u16 {
            let addr = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), port).into();
            let owners: Vec<u16> = shares
                .iter()
                .filter(|s| s.checks("web", addr))
                .map(|s| s.engine)
                .collect();
            assert_eq!(owners.len(), 1);
            per_engine[usize::from(owners[0])] += 1;
        }
        assert!(per_engine.iter().all(|&n| n > 60), "{per_engine:?}");
    }

    /// An engine whose ring is full misses no member's last state, and
    /// the ring keeps room for the control thread's requests.
    #[test]
    fn health_news_waits_for_a_busy_engine_latest_state_only() {
        let links = ControlLink::new_set(2);
        let (_, news) = HealthShare::new_set(2);
        let mut relay = HealthRelay::new(2);
        let member = |port, up| HealthNews {
            pool: "web".into(),
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 9), port).into(),
            up,
        };
        // Engine 1 is busy: its ring is full up to the reserve.
        let ring = &links[1].to_engine;
        while ring.len() < ring.capacity() - RING_RESERVE {
            ring.push(ToEngine::Pools { ask: 0 }).unwrap();
        }
        for n in [member(80, false), member(81, false), member(80, true)] {
            news.push(n).unwrap();
        }
        relay.relay(&news, &links);
        let got = |l: &ControlLink| {
            let mut v = Vec::new();
            while let Some(m) = l.to_engine.pop() {
                if let ToEngine::Health(n) = m {
                    v.push((n.addr.port(), n.up));
                }
            }
            v
        };
        assert_eq!(got(&links[0]), [(81, false), (80, true)]);
        assert_eq!(ring.len(), ring.capacity() - RING_RESERVE, "reserve kept");
        assert_eq!(relay.waiting(1), 2);
        // Once engine 1 read its ring: the latest state of each member.
        assert_eq!(got(&links[1]), []);
        relay.relay(&news, &links);
        assert_eq!(got(&links[1]), [(81, false), (80, true)]);
        assert_eq!(relay.waiting(1), 0);
    }

    #[test]
    fn pcap_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.pcap");
        let c = Capture::new(2);
        assert!(c.take(&[0xab; 42]));
        // A jumbo frame: its first CAPTURE_SNAPLEN bytes kept, its whole
        // length said (incl_len < orig_len: shown cut, not malformed).
        assert!(c.take(&[0xcd; 9014]));
        let mut frames = Vec::new();
        while let Some(f) = c.frames.pop() {
            frames.push(f);
        }
        frames[0].unix_ns = 1_700_000_000_123_456_789;
        write_pcap(&path, &frames).unwrap();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(b.len(), 24 + 16 + 42 + 16 + CAPTURE_SNAPLEN);
        let second = 24 + 16 + 42;
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!(word(second + 8), CAPTURE_SNAPLEN as u32, "kept");
        assert_eq!(word(second + 12), 9014, "on the wire");
        assert_eq!(word(24 + 12), 42);
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(b[24..28].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(u32::from_le_bytes(b[28..32].try_into().unwrap()), 123_456);
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 42);
    }
}
