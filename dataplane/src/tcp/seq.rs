//! TCP sequence numbers: 32-bit values compared with wrapping arithmetic
//! (RFC 9293 §3.4), in one type so no comparison forgets the wrap.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Sub};

/// A sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self - other` as a signed distance (valid within 2^31).
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    #[inline]
    pub fn max(self, other: Seq) -> Seq {
        if self.diff(other) >= 0 {
            self
        } else {
            other
        }
    }
}

impl Add<u32> for Seq {
    type Output = Seq;
    #[inline]
    fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }
}

impl Sub<Seq> for Seq {
    type Output = u32;
    /// Distance from `rhs` forward to `self`; callers ensure `self >= rhs`.
    #[inline]
    fn sub(self, rhs: Seq) -> u32 {
        self.0.wrapping_sub(rhs.0)
    }
}

impl PartialOrd for Seq {
    #[inline]
    fn partial_cmp(&self, other: &Seq) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_across_the_wrap() {
        let a = Seq(u32::MAX - 10);
        let b = a + 20;
        assert_eq!(b.0, 9);
        assert!(a < b);
        assert!(b > a);
        assert_eq!(b - a, 20);
        assert_eq!(b.diff(a), 20);
        assert_eq!(a.diff(b), -20);
        assert_eq!(a.max(b), b);
    }
}
