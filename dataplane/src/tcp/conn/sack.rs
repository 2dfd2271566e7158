//! The SACK scoreboard (RFC 2018, RFC 6675): what the peer holds above
//! SND.UNA.

use crate::tcp::Seq;

/// Up to four SACKed ranges above SND.UNA, sorted and disjoint.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Scoreboard {
    ranges: [(Seq, Seq); 4],
    pub(in crate::tcp) len: u8,
}

impl Scoreboard {
    pub(in crate::tcp) fn ranges(&self) -> &[(Seq, Seq)] {
        &self.ranges[..usize::from(self.len)]
    }

    pub(in crate::tcp) fn clear(&mut self) {
        self.len = 0;
    }

    /// Bytes covered.
    pub(in crate::tcp) fn bytes(&self) -> u32 {
        self.ranges().iter().map(|&(l, r)| r - l).sum()
    }

    /// The highest SACKed sequence number.
    pub(in crate::tcp) fn highest(&self) -> Option<Seq> {
        self.ranges().last().map(|&(_, r)| r)
    }

    /// Adds a block (clipped to `una..max`), merging overlaps.
    pub(in crate::tcp) fn add(&mut self, left: Seq, right: Seq, una: Seq, max: Seq) {
        let left = left.max(una);
        let right = if right.diff(max) > 0 { max } else { right };
        if right.diff(left) <= 0 {
            return;
        }
        let mut v: [(Seq, Seq); 5] = [(Seq(0), Seq(0)); 5];
        let n = usize::from(self.len);
        v[..n].copy_from_slice(&self.ranges[..n]);
        v[n] = (left, right);
        let v = &mut v[..=n];
        v.sort_by(|a, b| a.0.diff(b.0).cmp(&0));
        let mut out: [(Seq, Seq); 5] = [(Seq(0), Seq(0)); 5];
        let mut m = 0;
        for &(l, r) in v.iter() {
            if m > 0 && l.diff(out[m - 1].1) <= 0 {
                if r.diff(out[m - 1].1) > 0 {
                    out[m - 1].1 = r;
                }
            } else {
                out[m] = (l, r);
                m += 1;
            }
        }
        // Keep the four highest ranges (those matter for recovery).
        let skip = m.saturating_sub(4);
        self.len = (m - skip) as u8;
        self.ranges[..m - skip].copy_from_slice(&out[skip..m]);
    }

    /// Forgets what lies below `una`.
    pub(in crate::tcp) fn prune(&mut self, una: Seq) {
        let mut out = [(Seq(0), Seq(0)); 4];
        let mut m = 0;
        for &(l, r) in self.ranges() {
            if r.diff(una) > 0 {
                out[m] = (l.max(una), r);
                m += 1;
            }
        }
        self.ranges = out;
        self.len = m as u8;
    }

    /// Bytes SACKed above `seq`.
    pub(in crate::tcp) fn above(&self, seq: Seq) -> u32 {
        self.ranges()
            .iter()
            .filter(|&&(l, _)| l.diff(seq) > 0)
            .map(|&(l, r)| r - l)
            .sum()
    }

    /// Whether some byte of `from..to` is not SACKed.
    pub(in crate::tcp) fn has_gap(&self, from: Seq, to: Seq) -> bool {
        let mut at = from;
        while at.diff(to) < 0 {
            match self.covering(at) {
                Some(end) => at = end,
                None => return true,
            }
        }
        false
    }

    /// The end of the SACKed range containing `seq`, if any.
    pub(in crate::tcp) fn covering(&self, seq: Seq) -> Option<Seq> {
        self.ranges()
            .iter()
            .find(|&&(l, r)| seq.diff(l) >= 0 && seq.diff(r) < 0)
            .map(|&(_, r)| r)
    }
}
