//! SYN cookies (RFC 4987 §3.6): when the half-open budget is spent, the
//! listener answers a SYN without keeping state and encodes what it must
//! remember in its initial sequence number:
//!
//! ```text
//!  31 30 29  28 27   24  23   22                     0
//! +-----+------+-------+----+------------------------+
//! |t%4  | mss  |wscale+1|sack|  MAC (23 bits)         |
//! +-----+------+-------+----+------------------------+
//! ```
//!
//! `t` counts 64-second periods; a cookie is good for the period it was made
//! in and the next. The MAC is SipHash-2-4 under the engine's secret of the
//! 4-tuple, the client's ISN, the whole period number `t` (not just the two
//! bits carried) and the upper bits, so none of them can be forged, moved
//! to another flow or replayed in a later period: the key is in effect a
//! new one every period. Timestamps need no bit: the final ACK carries the
//! option iff the SYN did.

use std::hash::Hasher;

use super::{FlowAddr, FlowKey, Secret, Seq};
use crate::time::Instant;

/// MSS values a cookie can carry (the largest not above the peer's is used).
const MSS_TABLE: [u16; 4] = [536, 1220, 1440, 1460];
const PERIOD_NS: u64 = 64_000_000_000;
const MAC_BITS: u32 = 23;
const MAC_MASK: u32 = (1 << MAC_BITS) - 1;

/// What a cookie remembers of the SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SynParams {
    pub mss: u16,
    pub wscale: Option<u8>,
    pub sack: bool,
}

fn mac<I: FlowAddr>(
    secret: &Secret,
    flow: &FlowKey<I>,
    client_isn: Seq,
    period: u64,
    upper: u32,
) -> u32 {
    let mut h = secret.prf(b'c');
    flow.hash_tuple(&mut h);
    h.write_u32(client_isn.0);
    h.write_u64(period);
    h.write_u32(upper);
    h.finish() as u32 & MAC_MASK
}

/// The 64-second period `now` is in.
pub(super) fn period(now: Instant) -> u64 {
    now.as_nanos() / PERIOD_NS
}

/// The cookie (our ISN) for a SYN.
pub(super) fn encode<I: FlowAddr>(
    secret: &Secret,
    flow: &FlowKey<I>,
    client_isn: Seq,
    now: Instant,
    p: SynParams,
) -> Seq {
    let t = period(now);
    let mss_idx = MSS_TABLE.iter().rposition(|&m| m <= p.mss).unwrap_or(0) as u32;
    let ws = p.wscale.map_or(0, |s| u32::from(s.min(14)) + 1);
    let upper = ((t & 3) as u32) << 30 | mss_idx << 28 | ws << 24 | u32::from(p.sack) << 23;
    Seq(upper | mac(secret, flow, client_isn, t, upper))
}

/// Checks a cookie returned in an ACK (`cookie` = SEG.ACK − 1,
/// `client_isn` = SEG.SEQ − 1) and recovers the SYN's parameters.
pub(super) fn decode<I: FlowAddr>(
    secret: &Secret,
    flow: &FlowKey<I>,
    client_isn: Seq,
    cookie: Seq,
    now: Instant,
) -> Option<SynParams> {
    let upper = cookie.0 & !MAC_MASK;
    let now_t = period(now);
    // The period it was made in: this one or the one before, whichever
    // has the two bits it carries.
    let t = [now_t, now_t.wrapping_sub(1)]
        .into_iter()
        .find(|t| (t & 3) as u32 == upper >> 30)?;
    if mac(secret, flow, client_isn, t, upper) != cookie.0 & MAC_MASK {
        return None;
    }
    let ws = (upper >> 24) & 0xf;
    Some(SynParams {
        mss: MSS_TABLE[((upper >> 28) & 3) as usize],
        wscale: (ws > 0).then(|| (ws - 1) as u8),
        sack: (upper >> 23) & 1 == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn flow(port: u16) -> FlowKey {
        FlowKey {
            local: Ipv4Addr::new(10, 0, 0, 1),
            local_port: 80,
            remote: Ipv4Addr::new(10, 0, 0, 2),
            remote_port: port,
        }
    }

    #[test]
    fn round_trip_and_rejections() {
        let p = SynParams {
            mss: 1460,
            wscale: Some(7),
            sack: true,
        };
        let k7 = Secret::from_seed(7);
        let t0 = Instant::from_millis(1000);
        let c = encode(&k7, &flow(5000), Seq(99), t0, p);
        assert_eq!(decode(&k7, &flow(5000), Seq(99), c, t0), Some(p));
        assert_eq!(
            decode(&k7, &flow(5000), Seq(99), c, t0 + Duration::from_secs(100)),
            Some(p),
            "next period ok"
        );
        assert_eq!(
            decode(&k7, &flow(5000), Seq(99), c, t0 + Duration::from_secs(140)),
            None,
            "expired"
        );
        // The same two period bits come back every 4 periods (~4 min):
        // the MAC covers the whole period, so a captured cookie is dead.
        for later in [256, 2048, 4096] {
            assert_eq!(
                decode(
                    &k7,
                    &flow(5000),
                    Seq(99),
                    c,
                    t0 + Duration::from_secs(later)
                ),
                None,
                "replayed {later} s later"
            );
        }
        assert_eq!(decode(&k7, &flow(5001), Seq(99), c, t0), None, "other flow");
        assert_eq!(decode(&k7, &flow(5000), Seq(98), c, t0), None, "other ISN");
        assert_eq!(
            decode(&Secret::from_seed(8), &flow(5000), Seq(99), c, t0),
            None,
            "other key"
        );
        assert_eq!(
            decode(&k7, &flow(5000), Seq(99), Seq(c.0 ^ (1 << 25)), t0),
            None,
            "forged MSS bits"
        );
        let small = SynParams {
            mss: 1000,
            wscale: None,
            sack: false,
        };
        let c = encode(&k7, &flow(1), Seq(5), t0, small);
        assert_eq!(
            decode(&k7, &flow(1), Seq(5), c, t0),
            Some(SynParams { mss: 536, ..small })
        );
    }
}
