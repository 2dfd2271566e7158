//! A hashed timer wheel (1 ms slots): O(1) to arm, no per-connection heap
//! churn. Each connection records the entries it has in the wheel
//! ([`Armed`], at most three); a new entry is added only for a deadline
//! earlier than all of them, and when one fires the connection looks at
//! its deadlines again. Entries a connection no longer records (pushed out
//! by a fourth, a reused slot, a closed connection) are skipped when they
//! fire; none is placed more than [`HORIZON`] ahead.

use super::ConnId;
use crate::time::Instant;

const SLOTS: usize = 4096;
const TICK_NS: u64 = 1_000_000;

/// How far ahead an entry is placed at most (under one turn of the
/// wheel, 4.096 s): a later deadline gets an entry at the horizon, which
/// finds nothing due and places the next. So an entry a connection leaves
/// behind when it closes is gone within this long (an idle deadline is
/// 300 s away by default: held that long, a client opening and closing
/// idle connections would fill the wheel at its connection rate × 300 s),
/// and no slot holds entries for a later turn.
pub const HORIZON: std::time::Duration = std::time::Duration::from_secs(4);

/// One turn of the wheel: a slot is visited again this long after.
pub const TURN: std::time::Duration = std::time::Duration::from_nanos(SLOTS as u64 * TICK_NS);

/// The wheel entries one connection has (their deadlines, in ns;
/// `u64::MAX`: none). Typically an ACK delay, a retransmission and an idle
/// deadline: a deadline that moves later needs no new entry (the earlier
/// one fires, finds nothing due and re-arms), so keep-alive traffic does
/// not pile entries up.
#[derive(Debug, Clone, Copy)]
pub struct Armed([u64; 3]);

impl Default for Armed {
    fn default() -> Self {
        Self([u64::MAX; 3])
    }
}

impl Armed {
    /// Whether an entry fires at or before `at` (then none is needed for
    /// `at`: the connection re-arms when that one fires).
    pub fn covers(&self, at: Instant) -> bool {
        self.0.iter().any(|&t| t <= at.as_nanos())
    }

    /// Records a new entry at `at`; with three recorded, the latest is
    /// forgotten (its entry goes stale).
    pub fn add(&mut self, at: Instant) {
        let slot = match self.0.iter().position(|&t| t == u64::MAX) {
            Some(i) => i,
            None => (0..3).max_by_key(|&i| self.0[i]).unwrap_or(0),
        };
        self.0[slot] = at.as_nanos();
    }

    /// An entry at `at` fired: whether it was recorded (else it is stale).
    pub fn take(&mut self, at: Instant) -> bool {
        match self.0.iter().position(|&t| t == at.as_nanos()) {
            Some(i) => {
                self.0[i] = u64::MAX;
                true
            }
            None => false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    conn: ConnId,
    at: Instant,
}

/// The wheel. Slot vectors keep their capacity, so arming allocates only
/// while the wheel warms up. A bitmap of non-empty slots lets a long
/// pause (an idle engine, simulated time) visit only the slots that hold
/// something.
#[derive(Debug)]
pub struct TimerWheel {
    slots: Vec<Vec<Entry>>,
    /// Bit `i` set: slot `i` holds entries.
    occupied: [u64; SLOTS / 64],
    /// The next tick not yet processed.
    tick: u64,
    fired: Vec<Entry>,
    len: usize,
}

impl TimerWheel {
    pub fn new(now: Instant) -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; SLOTS / 64],
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

    /// Entries in the wheel (live and stale).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Every entry's deadline (live and stale).
    #[cfg(test)]
    pub fn deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.slots.iter().flatten().map(|e| e.at)
    }

    /// Arms a timer for `conn` at `at` (rounded up to the next tick).
    pub fn arm(&mut self, conn: ConnId, at: Instant) {
        let t = at.as_nanos().div_ceil(TICK_NS).max(self.tick);
        let i = (t % SLOTS as u64) as usize;
        self.slots[i].push(Entry { conn, at });
        self.occupied[i / 64] |= 1 << (i % 64);
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
        // After a long pause, one pass over every slot is enough; only
        // occupied slots are visited.
        let last = end.min(self.tick + SLOTS as u64 - 1);
        let mut t = self.tick;
        while t <= last {
            let i = (t % SLOTS as u64) as usize;
            // The next occupied slot at or after `i` in this word.
            let word = self.occupied[i / 64] >> (i % 64);
            if word == 0 {
                t += 64 - (i % 64) as u64; // the rest of this word is empty
                continue;
            }
            let skip = u64::from(word.trailing_zeros());
            if skip > 0 {
                t += skip;
                continue;
            }
            let slot = &mut self.slots[i];
            let mut k = 0;
            while k < slot.len() {
                if slot[k].at <= now {
                    self.fired.push(slot.swap_remove(k));
                } else {
                    k += 1;
                }
            }
            if slot.is_empty() {
                self.occupied[i / 64] &= !(1 << (i % 64));
            }
            t += 1;
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

    /// Against a plain model: timers at pseudo-random times over several
    /// turns of the wheel, expired at irregular steps (some long pauses);
    /// each fires exactly once, at the first expiry at or after its time.
    #[test]
    fn agrees_with_a_plain_model() {
        let mut w = TimerWheel::new(Instant::ZERO);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut due: Vec<(u32, u64)> = Vec::new();
        for c in 0..2_000u32 {
            let at = next() % 20_000;
            w.arm(ConnId::new(c, 0), Instant::from_millis(at));
            due.push((c, at));
        }
        let mut now = 0;
        let mut fired = std::collections::HashSet::new();
        while now < 25_000 {
            now += match next() % 10 {
                0 => 5_000,
                1..=3 => 1,
                _ => next() % 300,
            };
            let mut got = Vec::new();
            w.expire(Instant::from_millis(now), |c, _| got.push(c.slot() as u32));
            for c in got {
                let (_, at) = due[c as usize];
                assert!(at <= now, "timer {c} at {at} fired at {now}");
                assert!(fired.insert(c), "timer {c} fired twice");
            }
            for &(c, at) in &due {
                assert!(
                    at > now || fired.contains(&c),
                    "timer {c} at {at} missed at {now}"
                );
            }
        }
        assert!(w.is_empty());
    }
}
