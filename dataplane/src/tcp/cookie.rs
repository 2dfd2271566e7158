//! SYN cookies (RFC 4987 §3.6): when the half-open budget is spent, the
//! listener answers a SYN without keeping state and encodes what it must
//! remember in its initial sequence number:
//!
//! ```text
//!   31  30  28 27   24  23   22                     0
//! +----+------+--------+----+------------------------+
//! |t%2 | mss  |wscale+1|sack|  MAC (23 bits)         |
//! +----+------+--------+----+------------------------+
//! ```
//!
//! `t` counts 64-second periods; a cookie is good for the period it was
//! made in and the next, which its one period bit tells apart. The MSS is
//! an index into `MSS_TABLE`, whose values cover IPv4 and IPv6 on
//! 1,500-byte links, tunnels and PPPoE, and jumbo (9,000-byte) links, so a
//! connection made from a cookie on a jumbo link still sends full-size
//! segments (docs/architecture.md, "Ports"). The MAC is SipHash-2-4 under
//! the engine's secret of the 4-tuple, the client's ISN, the whole period
//! number `t` (not just the bit carried) and the upper bits, so none of
//! them can be forged, moved to another flow or replayed in a later
//! period: the key is in effect a new one every period. Timestamps need no
//! bit: the final ACK carries the option iff the SYN did.

use std::hash::Hasher;

use super::{FlowAddr, FlowKey, Secret, Seq};
use crate::time::Instant;

/// MSS values a cookie can carry (the largest not above the SYN's MSS
/// and ours is used): the minimum, IPv6's minimum link, common tunnel and
/// PPPoE sizes, IPv6 and IPv4 on 1,500 bytes, IPv6 and IPv4 on 9,000.
const MSS_TABLE: [u16; 8] = [536, 1220, 1380, 1440, 1452, 1460, 8940, 8960];
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
    let upper = ((t & 1) as u32) << 31 | mss_idx << 28 | ws << 24 | u32::from(p.sack) << 23;
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
    // has the parity it carries.
    let t = if (now_t & 1) as u32 == upper >> 31 {
        now_t
    } else {
        now_t.checked_sub(1)?
    };
    if mac(secret, flow, client_isn, t, upper) != cookie.0 & MAC_MASK {
        return None;
    }
    let ws = (upper >> 24) & 0xf;
    Some(SynParams {
        mss: MSS_TABLE[((upper >> 28) & 7) as usize],
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
        // The same period bit comes back every other period (~2 min): the
        // MAC covers the whole period, so a captured cookie is dead.
        for later in [128, 256, 2048, 4096] {
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

    #[test]
    fn every_mss_in_the_table_and_jumbo_peers() {
        let k = Secret::from_seed(3);
        let t0 = Instant::from_millis(5_000);
        let carried = |mss| {
            let p = SynParams {
                mss,
                wscale: Some(9),
                sack: true,
            };
            let c = encode(&k, &flow(7), Seq(1), t0, p);
            decode(&k, &flow(7), Seq(1), c, t0).map(|p| p.mss)
        };
        for &m in &MSS_TABLE {
            assert_eq!(carried(m), Some(m));
        }
        for (asked, kept) in [
            (9000, 8960),
            (8959, 8940),
            (8939, 1460),
            (1500, 1460),
            (1459, 1452),
            (1400, 1380),
            (1219, 536),
            (100, 536),
        ] {
            assert_eq!(carried(asked), Some(kept), "MSS {asked}");
        }
    }

    #[test]
    fn every_carried_bit_is_under_the_mac() {
        let k = Secret::from_seed(11);
        let t0 = Instant::from_millis(70_000);
        let p = SynParams {
            mss: 8960,
            wscale: Some(7),
            sack: true,
        };
        let c = encode(&k, &flow(9), Seq(42), t0, p);
        for bit in 0..32 {
            assert_eq!(
                decode(&k, &flow(9), Seq(42), Seq(c.0 ^ (1 << bit)), t0),
                None,
                "bit {bit} flipped"
            );
        }
        // Made at the very start of time (period 0): one period later is
        // fine, and "the period before" does not underflow.
        let c0 = encode(&k, &flow(9), Seq(42), Instant::from_millis(0), p);
        assert_eq!(
            decode(&k, &flow(9), Seq(42), c0, Instant::from_millis(0)),
            Some(p)
        );
        assert_eq!(
            decode(&k, &flow(9), Seq(42), c0, Instant::from_millis(64_001)),
            Some(p)
        );
    }
}
