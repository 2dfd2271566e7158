//! SYN cookies (RFC 4987 §3.6): when the half-open budget is spent, the
//! listener answers a SYN without keeping state and encodes what it must
//! remember in its initial sequence number:
//!
//! ```text
//!  31    27 26  25 24      21 20   19                    0
//! +--------+------+----------+----+-----------------------+
//! | t mod32| mss  | wscale+1 |sack|  MAC (20 bits)        |
//! +--------+------+----------+----+-----------------------+
//! ```
//!
//! `t` counts 64-second periods; a cookie is good for the period it was made
//! in and the next. The MAC is a keyed hash of the 4-tuple, the client's ISN
//! and the upper 12 bits, so none of them can be forged or replayed onto
//! another flow. Timestamps need no bit: the final ACK carries the option iff
//! the SYN did.

use std::hash::Hasher;

use super::{FlowKey, FxHasher, Seq};
use crate::time::Instant;

/// MSS values a cookie can carry (the largest not above the peer's is used).
const MSS_TABLE: [u16; 4] = [536, 1220, 1440, 1460];
const PERIOD_NS: u64 = 64_000_000_000;

/// What a cookie remembers of the SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SynParams {
    pub mss: u16,
    pub wscale: Option<u8>,
    pub sack: bool,
}

fn mac(key: u64, flow: &FlowKey, client_isn: Seq, upper: u32) -> u32 {
    let mut h = FxHasher(key ^ 0x5bd1_e995_7a3c_1f0d);
    h.write_u32(u32::from(flow.local));
    h.write_u32(u32::from(flow.remote));
    h.write_u16(flow.local_port);
    h.write_u16(flow.remote_port);
    h.write_u32(client_isn.0);
    h.write_u32(upper);
    let x = h.finish();
    let x = (x ^ (x >> 31)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((x ^ (x >> 29)) & 0xf_ffff) as u32
}

fn period(now: Instant) -> u32 {
    ((now.as_nanos() / PERIOD_NS) & 31) as u32
}

/// The cookie (our ISN) for a SYN.
pub(super) fn encode(key: u64, flow: &FlowKey, client_isn: Seq, now: Instant, p: SynParams) -> Seq {
    let mss_idx = MSS_TABLE.iter().rposition(|&m| m <= p.mss).unwrap_or(0) as u32;
    let ws = p.wscale.map_or(0, |s| u32::from(s.min(14)) + 1);
    let upper = (period(now) << 27) | (mss_idx << 25) | (ws << 21) | (u32::from(p.sack) << 20);
    Seq(upper | mac(key, flow, client_isn, upper))
}

/// Checks a cookie returned in an ACK (`cookie` = SEG.ACK − 1,
/// `client_isn` = SEG.SEQ − 1) and recovers the SYN's parameters.
pub(super) fn decode(
    key: u64,
    flow: &FlowKey,
    client_isn: Seq,
    cookie: Seq,
    now: Instant,
) -> Option<SynParams> {
    let upper = cookie.0 & !0xf_ffff;
    if mac(key, flow, client_isn, upper) != cookie.0 & 0xf_ffff {
        return None;
    }
    let age = period(now).wrapping_sub(upper >> 27) & 31;
    if age > 1 {
        return None;
    }
    let ws = (upper >> 21) & 0xf;
    Some(SynParams {
        mss: MSS_TABLE[((upper >> 25) & 3) as usize],
        wscale: (ws > 0).then(|| (ws - 1) as u8),
        sack: (upper >> 20) & 1 == 1,
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
        let t0 = Instant::from_millis(1000);
        let c = encode(7, &flow(5000), Seq(99), t0, p);
        assert_eq!(decode(7, &flow(5000), Seq(99), c, t0), Some(p));
        assert_eq!(
            decode(7, &flow(5000), Seq(99), c, t0 + Duration::from_secs(100)),
            Some(p),
            "next period ok"
        );
        assert_eq!(
            decode(7, &flow(5000), Seq(99), c, t0 + Duration::from_secs(140)),
            None,
            "expired"
        );
        assert_eq!(decode(7, &flow(5001), Seq(99), c, t0), None, "other flow");
        assert_eq!(decode(7, &flow(5000), Seq(98), c, t0), None, "other ISN");
        assert_eq!(decode(8, &flow(5000), Seq(99), c, t0), None, "other key");
        assert_eq!(
            decode(7, &flow(5000), Seq(99), Seq(c.0 ^ (1 << 25)), t0),
            None,
            "forged MSS bits"
        );
        let small = SynParams {
            mss: 1000,
            wscale: None,
            sack: false,
        };
        let c = encode(7, &flow(1), Seq(5), t0, small);
        assert_eq!(
            decode(7, &flow(1), Seq(5), c, t0),
            Some(SynParams { mss: 536, ..small })
        );
    }
}
