//! A hashed timer wheel (1 ms slots): O(1) to arm, no per-connection heap
//! churn. Each connection keeps at most one live entry, for its earliest
//! deadline; stale entries (a later re-arm, a reused slot) are skipped when
//! they fire.

use super::ConnId;
use crate::time::Instant;

const SLOTS: usize = 4096;
const TICK_NS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    conn: ConnId,
    at: Instant,
}

/// The wheel. Slot vectors keep their capacity, so arming allocates only
/// while the wheel warms up.
#[derive(Debug)]
pub struct TimerWheel {
    slots: Vec<Vec<Entry>>,
    /// The next tick not yet processed.
    tick: u64,
    fired: Vec<Entry>,
    len: usize,
}

impl TimerWheel {
    pub fn new(now: Instant) -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            tick: now.as_nanos() / TICK_NS,
            fired: Vec::new(),
            len: 0,
        }
    }

    /// Bytes held by the wheel's slots.
    pub fn entry_bytes(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.capacity() * std::mem::size_of::<Entry>())
            .sum()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Arms a timer for `conn` at `at` (rounded up to the next tick).
    pub fn arm(&mut self, conn: ConnId, at: Instant) {
        let t = at.as_nanos().div_ceil(TICK_NS).max(self.tick);
        self.slots[(t % SLOTS as u64) as usize].push(Entry { conn, at });
        self.len += 1;
    }

    /// Calls `f(conn, at)` for every entry due by `now`.
    pub fn expire(&mut self, now: Instant, mut f: impl FnMut(ConnId, Instant)) {
        let end = now.as_nanos() / TICK_NS;
        if end < self.tick {
            return;
        }
        if self.len == 0 {
            // Nothing armed: no slot to visit.
            self.tick = end + 1;
            return;
        }
        // After a long pause, one pass over every slot is enough.
        let last = end.min(self.tick + SLOTS as u64 - 1);
        for t in self.tick..=last {
            let slot = &mut self.slots[(t % SLOTS as u64) as usize];
            let mut i = 0;
            while i < slot.len() {
                if slot[i].at <= now {
                    self.fired.push(slot.swap_remove(i));
                } else {
                    i += 1;
                }
            }
        }
        self.tick = end + 1;
        self.len -= self.fired.len();
        for e in self.fired.drain(..) {
            f(e.conn, e.at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_time_and_not_before() {
        let mut w = TimerWheel::new(Instant::ZERO);
        w.arm(ConnId::new(1, 0), Instant::from_millis(5));
        w.arm(ConnId::new(2, 0), Instant::from_millis(10_000)); // beyond one turn
        let mut got = Vec::new();
        w.expire(Instant::from_millis(4), |c, _| got.push(c));
        assert!(got.is_empty());
        w.expire(Instant::from_millis(5), |c, _| got.push(c));
        assert_eq!(got, vec![ConnId::new(1, 0)]);
        w.expire(Instant::from_millis(9_999), |c, _| got.push(c));
        assert_eq!(got.len(), 1, "a far timer survives earlier turns");
        w.expire(Instant::from_millis(10_001), |c, _| got.push(c));
        assert_eq!(got, vec![ConnId::new(1, 0), ConnId::new(2, 0)]);
        assert!(w.is_empty());
    }
}
