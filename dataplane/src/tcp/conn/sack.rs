//! The SACK scoreboard (RFC 2018, RFC 6675): what the peer holds above
//! SND.UNA (and, on the receive side, what we hold above RCV.NXT).
//!
//! Four ranges fit in the connection's slot. A peer whose losses leave
//! more holes (a drop-tail queue that overflowed in slow start drops
//! every other segment) gets a board of 256 from the engine's spares
//! (`BoardSpares`, at most 1,024 boards, 2 KiB each), given back when four
//! fit again. Without one, the lowest ranges are forgotten: what lies in
//! them then counts as missing, and recovery resends it. The ranges'
//! byte total is kept as they change, and lookups (`covering`,
//! `has_gap`, `next_above`) are binary searches, so a peer that leaves
//! many holes, or chooses its SACK blocks to, costs no walk over all of
//! them per segment.

use crate::tcp::Seq;

/// Ranges held in the connection's slot.
const INLINE: usize = 4;
/// Ranges in a board from the spares.
const SPILLED: usize = 256;

/// A scoreboard's ranges when four do not fit.
pub(in crate::tcp) type Board = Box<[(Seq, Seq); SPILLED]>;

/// The engine's spare boards: taken by a connection whose scoreboard
/// outgrows its slot, given back when it fits again or the connection's
/// buffers go. Made as needed, at most [`BoardSpares::MAX`]; then kept for
/// reuse, so after the first no board costs an allocation.
#[derive(Debug, Default)]
pub(in crate::tcp) struct BoardSpares {
    free: Vec<Board>,
    out: usize,
}

impl BoardSpares {
    /// Most boards one engine makes (2 MiB).
    pub const MAX: usize = 1024;

    fn take(&mut self) -> Option<Board> {
        let board = match self.free.pop() {
            Some(b) => b,
            None if self.out < Self::MAX => Box::new([(Seq(0), Seq(0)); SPILLED]),
            None => return None,
        };
        self.out += 1;
        Some(board)
    }

    fn give(&mut self, board: Board) {
        self.out -= 1;
        self.free.push(board);
    }

    /// Boards held by connections now.
    #[cfg(test)]
    pub fn out(&self) -> usize {
        self.out
    }

    /// Bytes of the boards made (held by connections, or spare).
    pub fn bytes(&self) -> usize {
        (self.out + self.free.len()) * std::mem::size_of::<[(Seq, Seq); SPILLED]>()
    }
}

/// SACKed (or received out-of-order) ranges, sorted, disjoint and not
/// touching, with the bytes they cover.
#[derive(Debug, Default)]
pub(super) struct Scoreboard {
    inline: [(Seq, Seq); INLINE],
    spill: Option<Board>,
    len: u16,
    bytes: u32,
}

impl Scoreboard {
    fn slots(&self) -> &[(Seq, Seq)] {
        match &self.spill {
            Some(b) => &b[..],
            None => &self.inline,
        }
    }

    fn slots_mut(&mut self) -> &mut [(Seq, Seq)] {
        match &mut self.spill {
            Some(b) => &mut b[..],
            None => &mut self.inline,
        }
    }

    pub(in crate::tcp) fn ranges(&self) -> &[(Seq, Seq)] {
        &self.slots()[..usize::from(self.len)]
    }

    /// Number of ranges.
    pub(in crate::tcp) fn count(&self) -> usize {
        usize::from(self.len)
    }

    pub(in crate::tcp) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every range (the board, if any, stays until
    /// [`Scoreboard::release`] or the next [`Scoreboard::prune`]).
    pub(in crate::tcp) fn clear(&mut self) {
        self.len = 0;
        self.bytes = 0;
    }

    /// Forgets every range and gives the board back.
    pub(in crate::tcp) fn release(&mut self, spares: &mut BoardSpares) {
        self.clear();
        self.fit_inline(spares);
    }

    /// Bytes covered.
    pub(in crate::tcp) fn bytes(&self) -> u32 {
        self.bytes
    }

    /// The highest SACKed sequence number.
    pub(in crate::tcp) fn highest(&self) -> Option<Seq> {
        self.ranges().last().map(|&(_, r)| r)
    }

    /// Adds a block (clipped to `una..max`), merging what it overlaps or
    /// touches. When the ranges are full and no board is to be had, the
    /// lowest goes (the highest matter for recovery).
    pub(in crate::tcp) fn add(
        &mut self,
        left: Seq,
        right: Seq,
        (una, max): (Seq, Seq),
        spares: &mut BoardSpares,
    ) {
        let left = left.max(una);
        let right = if right.diff(max) > 0 { max } else { right };
        if right.diff(left) <= 0 {
            return;
        }
        let n = usize::from(self.len);
        let ranges = self.ranges();
        // Ranges first..end overlap or touch the block.
        let first = ranges
            .iter()
            .position(|&(_, r)| r.diff(left) >= 0)
            .unwrap_or(n);
        let end = ranges
            .iter()
            .position(|&(l, _)| l.diff(right) > 0)
            .unwrap_or(n);
        if first < end {
            let (l0, r0) = (ranges[first].0, ranges[end - 1].1);
            let merged: u32 = ranges[first..end].iter().map(|&(l, r)| r - l).sum();
            let l = if l0.diff(left) < 0 { l0 } else { left };
            let r = if r0.diff(right) > 0 { r0 } else { right };
            let slots = self.slots_mut();
            slots[first] = (l, r);
            slots.copy_within(end..n, first + 1);
            self.len -= (end - first - 1) as u16;
            self.bytes = self.bytes - merged + (r - l);
            self.fit_inline(spares);
            return;
        }
        let (mut at, mut n) = (first, n);
        if n == self.slots().len() && self.spill.is_none() {
            if let Some(mut board) = spares.take() {
                board[..n].copy_from_slice(&self.inline[..n]);
                self.spill = Some(board);
            }
        }
        if n == self.slots().len() {
            if at == 0 {
                return;
            }
            let (l, r) = self.slots()[0];
            self.bytes -= r - l;
            self.slots_mut().copy_within(1..n, 0);
            n -= 1;
            at -= 1;
        }
        let slots = self.slots_mut();
        slots.copy_within(at..n, at + 1);
        slots[at] = (left, right);
        self.len = (n + 1) as u16;
        self.bytes += right - left;
    }

    /// Forgets what lies below `una`; the board goes back once four
    /// ranges fit.
    pub(in crate::tcp) fn prune(&mut self, una: Seq, spares: &mut BoardSpares) {
        let n = usize::from(self.len);
        let gone = self
            .ranges()
            .iter()
            .position(|&(_, r)| r.diff(una) > 0)
            .unwrap_or(n);
        let below: u32 = self.ranges()[..gone].iter().map(|&(l, r)| r - l).sum();
        let slots = self.slots_mut();
        slots.copy_within(gone..n, 0);
        let mut cut = 0;
        if gone < n && slots[0].0.diff(una) < 0 {
            cut = una - slots[0].0;
            slots[0].0 = una;
        }
        self.len = (n - gone) as u16;
        self.bytes -= below + cut;
        self.fit_inline(spares);
    }

    /// Back into the slot when four ranges fit.
    fn fit_inline(&mut self, spares: &mut BoardSpares) {
        let n = usize::from(self.len);
        if n <= INLINE {
            if let Some(board) = self.spill.take() {
                self.inline[..n].copy_from_slice(&board[..n]);
                spares.give(board);
            }
        }
    }

    /// Bytes SACKed above `seq`.
    pub(in crate::tcp) fn above(&self, seq: Seq) -> u32 {
        self.ranges()
            .iter()
            .filter(|&&(l, _)| l.diff(seq) > 0)
            .map(|&(l, r)| r - l)
            .sum()
    }

    /// Where the first range starting above `seq` starts (binary search).
    pub(in crate::tcp) fn next_above(&self, seq: Seq) -> Option<Seq> {
        let ranges = self.ranges();
        let after = ranges.partition_point(|&(l, _)| l.diff(seq) <= 0);
        ranges.get(after).map(|&(l, _)| l)
    }

    /// Whether some byte of `from..to` is not SACKed. Ranges never touch,
    /// so none is unless one range holds all of it: O(log n), as a peer
    /// choosing its SACK blocks could otherwise make each ACK walk every
    /// range for every stretch RACK looks at.
    pub(in crate::tcp) fn has_gap(&self, from: Seq, to: Seq) -> bool {
        to.diff(from) > 0 && self.covering(from).is_none_or(|end| end.diff(to) < 0)
    }

    /// The end of the SACKed range containing `seq`, if any (a binary
    /// search: the ranges are sorted).
    pub(in crate::tcp) fn covering(&self, seq: Seq) -> Option<Seq> {
        let ranges = self.ranges();
        let after = ranges.partition_point(|&(l, _)| l.diff(seq) <= 0);
        let &(_, r) = ranges.get(after.checked_sub(1)?)?;
        (seq.diff(r) < 0).then_some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(b: &Scoreboard) -> Vec<(u32, u32)> {
        b.ranges().iter().map(|&(l, r)| (l.0, r.0)).collect()
    }

    fn check_bytes(b: &Scoreboard) {
        let sum: u32 = b.ranges().iter().map(|&(l, r)| r - l).sum();
        assert_eq!(b.bytes(), sum, "{:?}", ranges(b));
    }

    #[test]
    fn blocks_merge_when_they_overlap_or_touch_and_stay_sorted() {
        let mut spares = BoardSpares::default();
        let mut b = Scoreboard::default();
        let w = (Seq(0), Seq(10_000));
        b.add(Seq(300), Seq(400), w, &mut spares);
        b.add(Seq(100), Seq(200), w, &mut spares);
        b.add(Seq(500), Seq(600), w, &mut spares);
        assert_eq!(ranges(&b), [(100, 200), (300, 400), (500, 600)]);
        b.add(Seq(200), Seq(300), w, &mut spares);
        assert_eq!(ranges(&b), [(100, 400), (500, 600)]);
        b.add(Seq(50), Seq(700), w, &mut spares);
        assert_eq!(ranges(&b), [(50, 700)]);
        check_bytes(&b);
        b.prune(Seq(120), &mut spares);
        assert_eq!(ranges(&b), [(120, 700)]);
        check_bytes(&b);
    }

    /// A peer that dropped every other segment of 300 reports 300
    /// ranges: a board holds the highest 256, the rest are forgotten,
    /// and the board goes back once four fit again.
    #[test]
    fn many_holes_take_a_board_and_give_it_back() {
        let mut spares = BoardSpares::default();
        let mut b = Scoreboard::default();
        let w = (Seq(0), Seq(1_000_000));
        for i in 0..300u32 {
            b.add(Seq(i * 200 + 100), Seq(i * 200 + 200), w, &mut spares);
            check_bytes(&b);
        }
        assert_eq!((b.count(), spares.out()), (256, 1));
        assert_eq!(ranges(&b)[0], (44 * 200 + 100, 44 * 200 + 200));
        assert_eq!(b.highest(), Some(Seq(299 * 200 + 200)));
        assert!(b.has_gap(Seq(44 * 200), Seq(45 * 200)));
        b.prune(Seq(296 * 200), &mut spares);
        assert_eq!((b.count(), spares.out()), (4, 0));
        check_bytes(&b);
        // The board is reused: no second one is made.
        for i in 0..10u32 {
            b.add(
                Seq(100_000 + i * 200),
                Seq(100_100 + i * 200),
                w,
                &mut spares,
            );
        }
        assert_eq!((spares.out(), spares.free.len()), (1, 0));
        b.release(&mut spares);
        assert_eq!((b.count(), spares.out(), spares.free.len()), (0, 0, 1));
    }

    /// Random blocks and prunes against a byte map: the ranges are
    /// exactly the bytes added and not pruned (while they fit), sorted,
    /// disjoint and not touching, their byte total right, the board
    /// back once four fit.
    #[test]
    fn random_blocks_and_prunes_match_a_byte_map() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n)) as u32
        };
        let mut spares = BoardSpares::default();
        for round in 0..200 {
            let mut b = Scoreboard::default();
            let mut map = vec![false; 4000];
            // Near the wrap for half the rounds.
            let base = if round % 2 == 0 {
                0u32
            } else {
                0u32.wrapping_sub(2000)
            };
            let mut una = 0u32;
            for _ in 0..300 {
                if next(10) == 0 {
                    una = (una + next(200)).min(3999);
                    b.prune(Seq(base.wrapping_add(una)), &mut spares);
                    map[..una as usize].iter_mut().for_each(|x| *x = false);
                } else {
                    let l = next(4000);
                    let r = (l + 1 + next(40)).min(4000);
                    let w = (Seq(base.wrapping_add(una)), Seq(base.wrapping_add(4000)));
                    let (bl, br) = (Seq(base.wrapping_add(l)), Seq(base.wrapping_add(r)));
                    b.add(bl, br, w, &mut spares);
                    if r > l.max(una) {
                        map[l.max(una) as usize..r as usize]
                            .iter_mut()
                            .for_each(|x| *x = true);
                    }
                }
                let mut want = Vec::new();
                let mut i = 0;
                while i < 4000 {
                    if map[i] {
                        let start = i;
                        while i < 4000 && map[i] {
                            i += 1;
                        }
                        want.push((base.wrapping_add(start as u32), base.wrapping_add(i as u32)));
                    }
                    i += 1;
                }
                assert!(want.len() <= 256, "more ranges than a board");
                assert_eq!(ranges(&b), want, "round {round}");
                check_bytes(&b);
                // Lookups agree with the map.
                let at = next(4000);
                let seq = Seq(base.wrapping_add(at));
                assert_eq!(b.covering(seq).is_some(), map[at as usize], "round {round}");
                let to = (at + 1 + next(60)).min(4000);
                let gap = map[at as usize..to as usize].iter().any(|&x| !x);
                let to = Seq(base.wrapping_add(to));
                assert_eq!(b.has_gap(seq, to), gap, "round {round}: {at}");
                let next = b.ranges().iter().find(|&&(l, _)| l.diff(seq) > 0);
                assert_eq!(b.next_above(seq), next.map(|&(l, _)| l), "round {round}");
                assert_eq!(
                    spares.out(),
                    usize::from(b.count() > INLINE),
                    "round {round}"
                );
            }
            b.release(&mut spares);
            assert_eq!(spares.out(), 0);
        }
    }

    #[test]
    fn without_a_board_the_lowest_ranges_are_forgotten() {
        let mut spares = BoardSpares {
            free: Vec::new(),
            out: BoardSpares::MAX,
        };
        let mut b = Scoreboard::default();
        let w = (Seq(0), Seq(100_000));
        for i in 0..6u32 {
            b.add(Seq(i * 200 + 100), Seq(i * 200 + 200), w, &mut spares);
        }
        assert_eq!(
            ranges(&b),
            [(500, 600), (700, 800), (900, 1000), (1100, 1200)]
        );
        // A block below all four, with no room: not kept.
        b.add(Seq(0), Seq(50), w, &mut spares);
        assert_eq!(b.count(), 4);
        check_bytes(&b);
    }
}
