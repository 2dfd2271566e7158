//! A port wrapper that impairs what it transmits: seeded loss, duplication,
//! reordering and delay, as a network would. Wrap both ends of a link to
//! impair both directions. Same seed, same inputs: same impairments.

use std::collections::VecDeque;
use std::time::Duration;

use smoltcp::wire::EthernetAddress;

use super::{ChecksumOffload, PacketBuf, Port};
use crate::time::Instant;

/// What to do to transmitted frames. Probabilities are 0.0 to 1.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImpairConfig {
    pub seed: u64,
    /// Chance a frame is dropped.
    pub loss: f64,
    /// Chance a frame is sent twice.
    pub duplicate: f64,
    /// Chance a frame is held back by `reorder_delay` so later frames pass it.
    pub reorder: f64,
    pub reorder_delay: Duration,
    /// Delay added to every frame.
    pub delay: Duration,
    /// Extra delay, uniform in `0..jitter`.
    pub jitter: Duration,
    /// Most frames held back at once; more are left with the caller.
    pub max_held: usize,
}

impl Default for ImpairConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            max_held: 4096,
        }
    }
}

/// What the wrapper did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    pub offered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub delivered: u64,
}

/// A [`Port`] whose transmissions are impaired.
#[derive(Debug)]
pub struct Impaired<P: Port> {
    inner: P,
    cfg: ImpairConfig,
    rng: SplitMix64,
    /// Frames waiting for their release time, sorted by it (FIFO on ties).
    held: VecDeque<(Instant, P::Buf)>,
    out: Vec<P::Buf>,
    stats: ImpairStats,
}

impl<P: Port> Impaired<P> {
    pub fn new(inner: P, cfg: ImpairConfig) -> Self {
        Self {
            inner,
            rng: SplitMix64(cfg.seed),
            held: VecDeque::with_capacity(cfg.max_held.min(65536)),
            out: Vec::with_capacity(64),
            cfg,
            stats: ImpairStats::default(),
        }
    }

    pub fn stats(&self) -> ImpairStats {
        self.stats
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Frames held back (delayed or reordered), not yet sent.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Hands frames whose time has come to the inner port.
    fn release(&mut self, now: Instant) {
        while self.held.front().is_some_and(|(t, _)| *t <= now) && self.out.len() < 64 {
            let (_, b) = self.held.pop_front().expect("front exists");
            self.out.push(b);
        }
        if self.out.is_empty() {
            return;
        }
        let sent = self.inner.tx_burst(now, &mut self.out);
        self.stats.delivered += sent as u64;
        // The inner port is full: put the rest back at the head, in order.
        while let Some(b) = self.out.pop() {
            self.held.push_front((now, b));
        }
    }
}

impl<P: Port> Port for Impaired<P> {
    type Buf = P::Buf;

    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }

    fn rx_burst(&mut self, now: Instant, out: &mut Vec<P::Buf>, max: usize) -> usize {
        self.release(now);
        self.inner.rx_burst(now, out, max)
    }

    fn tx_burst(&mut self, now: Instant, batch: &mut Vec<P::Buf>) -> usize {
        let taken = batch
            .len()
            .min(self.cfg.max_held.saturating_sub(self.held.len()));
        for buf in batch.drain(..taken) {
            self.stats.offered += 1;
            if self.rng.chance(self.cfg.loss) {
                self.stats.dropped += 1;
                continue;
            }
            let mut at = now + self.cfg.delay;
            if !self.cfg.jitter.is_zero() {
                at = at + Duration::from_nanos(self.rng.below(self.cfg.jitter.as_nanos() as u64));
            }
            if self.rng.chance(self.cfg.reorder) {
                self.stats.reordered += 1;
                at = at + self.cfg.reorder_delay;
            }
            if self.rng.chance(self.cfg.duplicate) {
                let len = buf.data().len();
                let copy = match self.inner.alloc() {
                    Some(c) if c.capacity() >= len => Some(c),
                    _ => self.inner.alloc_large().filter(|c| c.capacity() >= len),
                };
                if let Some(mut copy) = copy {
                    copy.set_len(buf.data().len());
                    copy.data_mut().copy_from_slice(buf.data());
                    copy.copy_offload_from(&buf);
                    self.stats.duplicated += 1;
                    hold(&mut self.held, at, copy);
                }
            }
            hold(&mut self.held, at, buf);
        }
        self.release(now);
        taken
    }

    fn alloc(&mut self) -> Option<P::Buf> {
        self.inner.alloc()
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        self.inner.checksum_offload()
    }

    fn segmentation(&self) -> Option<usize> {
        self.inner.segmentation()
    }

    fn errors(&self) -> u64 {
        self.inner.errors()
    }

    fn alloc_large(&mut self) -> Option<P::Buf> {
        self.inner.alloc_large()
    }

    fn rss_steering(&self) -> Option<super::RssSteering> {
        self.inner.rss_steering()
    }

    fn on_tick(&mut self) {
        self.inner.on_tick();
    }
}

/// Inserts a frame in release-time order (after frames due at the same time).
fn hold<B>(held: &mut VecDeque<(Instant, B)>, at: Instant, buf: B) {
    let pos = held.partition_point(|(t, _)| *t <= at);
    held.insert(pos, (at, buf));
}

/// A small, fast, seedable generator (SplitMix64); not for cryptography.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::{link, MemBuf, MemPort};

    fn ports() -> (MemPort, MemPort) {
        link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            4096,
            8192,
        )
    }

    fn send(port: &mut Impaired<MemPort>, now: Instant, n: u32) {
        let mut batch = Vec::new();
        for i in 0..n {
            let mut b = port.alloc().unwrap();
            b.set_len(64);
            b.data_mut()[..4].copy_from_slice(&i.to_be_bytes());
            batch.push(b);
            if batch.len() == 32 {
                port.tx_burst(now, &mut batch);
            }
        }
        port.tx_burst(now, &mut batch);
        assert!(batch.is_empty());
    }

    fn recv(port: &mut MemPort) -> Vec<u32> {
        let mut got: Vec<MemBuf> = Vec::new();
        while port.rx_burst(Instant::ZERO, &mut got, 64) > 0 {}
        got.iter()
            .map(|b| u32::from_be_bytes(b.data()[..4].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn loss_rate_is_close_and_seeded() {
        let run = |seed| {
            let (a, mut b) = ports();
            let mut a = Impaired::new(
                a,
                ImpairConfig {
                    seed,
                    loss: 0.05,
                    ..Default::default()
                },
            );
            send(&mut a, Instant::ZERO, 4000);
            (recv(&mut b), a.stats())
        };
        let (got, stats) = run(7);
        assert_eq!(stats.offered, 4000);
        assert!((150..=250).contains(&stats.dropped), "{stats:?}");
        assert_eq!(got.len() as u64, 4000 - stats.dropped);
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "loss alone keeps order"
        );
        assert_eq!(run(7).0, got, "same seed, same losses");
        assert_ne!(run(8).0, got, "another seed, other losses");
    }

    #[test]
    fn delay_holds_until_due() {
        let (a, mut b) = ports();
        let mut a = Impaired::new(
            a,
            ImpairConfig {
                delay: Duration::from_millis(5),
                ..Default::default()
            },
        );
        send(&mut a, Instant::from_millis(1), 10);
        assert_eq!(a.held(), 10);
        assert!(recv(&mut b).is_empty());
        let mut sink = Vec::new();
        a.rx_burst(Instant::from_millis(5), &mut sink, 32);
        assert!(recv(&mut b).is_empty(), "not yet due at 5 ms");
        a.rx_burst(Instant::from_millis(6), &mut sink, 32);
        assert_eq!(recv(&mut b), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn reorder_and_duplicate_happen() {
        let (a, mut b) = ports();
        let cfg = ImpairConfig {
            seed: 3,
            reorder: 0.1,
            duplicate: 0.05,
            ..Default::default()
        };
        let mut a = Impaired::new(a, cfg);
        for i in 0..100u64 {
            send(&mut a, Instant::from_nanos(i * 10_000), 10);
        }
        let mut sink = Vec::new();
        a.rx_burst(Instant::from_millis(100), &mut sink, 32);
        let got = recv(&mut b);
        let stats = a.stats();
        assert!(stats.reordered > 0 && stats.duplicated > 0, "{stats:?}");
        assert_eq!(got.len() as u64, 1000 + stats.duplicated);
        assert!(got.windows(2).any(|w| w[0] > w[1]), "some frames overtaken");
        assert_eq!(a.held(), 0);
    }
}
