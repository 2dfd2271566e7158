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

/// Entries a slot keeps room for however few it held (256 bytes).
const SLOT_KEEP: usize = 16;

/// The wheel. Slot vectors keep their capacity while the load they saw
/// lasts, so arming allocates only while the wheel warms up or the rate
/// climbs; a slot that held under a quarter of its room in a turn is
/// cut to twice what it held (at least [`SLOT_KEEP`]), so the memory a
/// burst of connections took is given back one turn after it ends. A
/// bitmap of non-empty slots lets a long pause (an idle engine,
/// simulated time) visit only the slots that hold something or room to
/// give back.
#[derive(Debug)]
pub struct TimerWheel {
    slots: Vec<Vec<Entry>>,
    /// Bit `i` set: slot `i` holds entries.
    occupied: [u64; SLOTS / 64],
    /// Bit `i` set: slot `i` has room for more than [`SLOT_KEEP`]
    /// entries (visited when empty too, to give it back).
    roomy: [u64; SLOTS / 64],
    /// Bits set in `roomy`.
    roomy_slots: usize,
    /// Entries the slots have room for (the sum of their capacities).
    room: usize,
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
            roomy: [0; SLOTS / 64],
            roomy_slots: 0,
            room: 0,
            tick: now.as_nanos() / TICK_NS,
            fired: Vec::new(),
            len: 0,
        }
    }

    /// Bytes held by the wheel's slots (kept as they change: O(1)).
    pub fn entry_bytes(&self) -> usize {
        self.room * std::mem::size_of::<Entry>()
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
        let slot = &mut self.slots[i];
        let before = slot.capacity();
        slot.push(Entry { conn, at });
        self.room += slot.capacity() - before;
        self.occupied[i / 64] |= 1 << (i % 64);
        self.len += 1;
    }

    /// Calls `f(conn, at)` for every entry due by `now`.
    pub fn expire(&mut self, now: Instant, mut f: impl FnMut(ConnId, Instant)) {
        let end = now.as_nanos() / TICK_NS;
        if end < self.tick {
            return;
        }
        if self.len == 0 && self.roomy_slots == 0 {
            // Nothing armed and no room to give back: no slot to visit.
            self.tick = end + 1;
            return;
        }
        // After a long pause, one pass over every slot is enough; only
        // slots that hold entries or room to give back are visited.
        let last = end.min(self.tick + SLOTS as u64 - 1);
        let mut t = self.tick;
        while t <= last {
            let i = (t % SLOTS as u64) as usize;
            // The next slot to visit at or after `i` in this word.
            let word = (self.occupied[i / 64] | self.roomy[i / 64]) >> (i % 64);
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
            let held = slot.len();
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
            self.fit_room(i, held);
            t += 1;
        }
        self.tick = end + 1;
        self.len -= self.fired.len();
        for e in self.fired.drain(..) {
            f(e.conn, e.at);
        }
    }

    /// Slot `i` held `held` entries this turn: cuts its room to twice that
    /// (at least [`SLOT_KEEP`]) when it used under a quarter of it, and
    /// keeps `roomy` true to what is left.
    fn fit_room(&mut self, i: usize, held: usize) {
        let slot = &mut self.slots[i];
        if slot.capacity() > SLOT_KEEP && slot.capacity() / 4 > held {
            let before = slot.capacity();
            slot.shrink_to((2 * held).max(SLOT_KEEP));
            self.room -= before - slot.capacity();
        }
        let bit = 1 << (i % 64);
        let was = self.roomy[i / 64] & bit != 0;
        let is = slot.capacity() > SLOT_KEEP;
        if was != is {
            self.roomy[i / 64] ^= bit;
            if is {
                self.roomy_slots += 1;
            } else {
                self.roomy_slots -= 1;
            }
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

    /// The slots' room, counted the long way.
    fn scanned_bytes(w: &TimerWheel) -> usize {
        w.slots
            .iter()
            .map(|s| s.capacity() * std::mem::size_of::<Entry>())
            .sum()
    }

    /// Arms `per_tick` entries in each of the next `ticks` ticks, each due
    /// one second on, and expires up to now as it goes.
    fn steady(w: &mut TimerWheel, from_ms: u64, ticks: u64, per_tick: u32) -> u64 {
        let mut fired = 0;
        for t in from_ms..from_ms + ticks {
            for c in 0..per_tick {
                w.arm(ConnId::new(c, 0), Instant::from_millis(t + 1_000));
            }
            w.expire(Instant::from_millis(t), |_, _| fired += 1);
        }
        fired
    }

    /// A burst of entries grows the slots it lands in; one turn after it
    /// has fired, with nothing armed since, their room is given back.
    #[test]
    fn gives_back_the_room_a_burst_took() {
        let mut w = TimerWheel::new(Instant::ZERO);
        steady(&mut w, 0, 1_000, 200); // 200 k entries in a second
        let peak = w.entry_bytes();
        assert_eq!(peak, scanned_bytes(&w));
        assert!(peak >= 200 * 1_000 * std::mem::size_of::<Entry>());
        let mut fired = 0;
        w.expire(Instant::from_millis(2_100), |_, _| fired += 1);
        assert_eq!(fired, 200 * 1_000);
        assert!(w.is_empty());
        assert_eq!(
            w.entry_bytes(),
            peak,
            "the turn that fired them keeps the room"
        );
        // One more turn: every slot it grew held nothing.
        w.expire(Instant::from_millis(2_100 + 4_096), |_, _| fired += 1);
        assert_eq!(fired, 200 * 1_000);
        assert!(
            w.entry_bytes() <= SLOTS * SLOT_KEEP * std::mem::size_of::<Entry>(),
            "{} bytes kept",
            w.entry_bytes()
        );
        assert_eq!(w.entry_bytes(), scanned_bytes(&w));
        assert_eq!(w.roomy_slots, 0);
        // Arming and firing work as before.
        w.arm(ConnId::new(7, 0), Instant::from_millis(7_000));
        let mut got = Vec::new();
        w.expire(Instant::from_millis(7_000), |c, _| got.push(c));
        assert_eq!(got, vec![ConnId::new(7, 0)]);
    }

    /// Under a load that changes little from turn to turn the slots keep
    /// their room: no allocation after the first turn.
    #[test]
    fn keeps_its_room_under_a_steady_load() {
        let mut w = TimerWheel::new(Instant::ZERO);
        steady(&mut w, 0, 5_000, 40);
        let warm = w.entry_bytes();
        let ptrs: Vec<*const Entry> = w.slots.iter().map(|s| s.as_ptr()).collect();
        let fired = steady(&mut w, 5_000, 3 * 4_096, 40);
        assert_eq!(fired, 3 * 4_096 * 40);
        assert_eq!(w.entry_bytes(), warm);
        assert_eq!(warm, scanned_bytes(&w));
        assert!(w.slots.iter().zip(&ptrs).all(|(s, &p)| s.as_ptr() == p));
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
        assert_eq!(w.entry_bytes(), scanned_bytes(&w));
    }
}
