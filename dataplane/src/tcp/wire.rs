//! TCP headers on the engine's hot path: parsed into and written from
//! smoltcp's [`TcpRepr`] exactly as `TcpRepr::parse` and `TcpRepr::emit`
//! do (a differential test holds the two to each other byte for byte),
//! in one pass over the options instead of smoltcp's option enum and
//! field-by-field accessors, which cost a quarter of a small
//! connection's receive path. The checksum is the caller's.

use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

const FIN: u16 = 0x001;
const SYN: u16 = 0x002;
const RST: u16 = 0x004;
const PSH: u16 = 0x008;
const ACK: u16 = 0x010;

const OPT_END: u8 = 0;
const OPT_NOP: u8 = 1;
const OPT_MSS: u8 = 2;
const OPT_WS: u8 = 3;
const OPT_SACK_PERMITTED: u8 = 4;
const OPT_SACK: u8 = 5;
const OPT_TIMESTAMP: u8 = 8;

/// Bytes of a header without options.
const BASE_LEN: usize = 20;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Whether `b` is long enough for its header, and the header for its
/// fixed part (what `TcpPacket::new_checked` checks).
pub fn well_sized(b: &[u8]) -> bool {
    let header_len = b.get(12).map_or(0, |&off| usize::from(off >> 4) * 4);
    b.len() >= BASE_LEN && (BASE_LEN..=b.len()).contains(&header_len)
}

/// Parses a segment (header, options and payload); `None` where smoltcp's
/// parser fails: a short or inconsistent header, a zero port, SYN or FIN
/// with RST, SYN with FIN, a malformed MSS, window scale, SACK-permitted
/// or SACK option, an option running past the header. Unknown options
/// are passed over; a window scale above 14 is taken as 14 (RFC 7323
/// §2.3); a fourth SACK block is dropped.
#[inline(always)]
pub fn parse(b: &[u8]) -> Option<TcpRepr<'_>> {
    if !well_sized(b) {
        return None;
    }
    let src_port = be16(b, 0)?;
    let dst_port = be16(b, 2)?;
    if src_port == 0 || dst_port == 0 {
        return None;
    }
    let flags = be16(b, 12)?;
    let header_len = usize::from(flags >> 12) * 4;
    let control = match (flags & SYN != 0, flags & FIN != 0, flags & RST != 0) {
        (false, false, false) if flags & PSH != 0 => TcpControl::Psh,
        (false, false, false) => TcpControl::None,
        (true, false, false) => TcpControl::Syn,
        (false, true, false) => TcpControl::Fin,
        (false, false, true) => TcpControl::Rst,
        _ => return None,
    };
    let mut repr = TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: TcpSeqNumber(be32(b, 4)? as i32),
        ack_number: (flags & ACK != 0).then(|| TcpSeqNumber(be32(b, 8).unwrap_or(0) as i32)),
        window_len: be16(b, 14)?,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: b.get(header_len..)?,
    };
    let mut opts = b.get(BASE_LEN..header_len)?;
    while let Some(&kind) = opts.first() {
        match kind {
            OPT_END => break,
            OPT_NOP => {
                opts = &opts[1..];
                continue;
            }
            _ => {}
        }
        let len = usize::from(*opts.get(1)?);
        // A length below 2 or past the header is malformed.
        let data = opts.get(2..len)?;
        match (kind, len) {
            (OPT_MSS, 4) => repr.max_seg_size = be16(data, 0),
            (OPT_WS, 3) => repr.window_scale = Some(data[0].min(14)),
            (OPT_SACK_PERMITTED, 2) => repr.sack_permitted = true,
            (OPT_MSS | OPT_WS | OPT_SACK_PERMITTED, _) => return None,
            (OPT_SACK, n) => {
                if n < 10 || (n - 2) % 8 != 0 {
                    return None;
                }
                for (i, range) in repr.sack_ranges.iter_mut().enumerate() {
                    *range = be32(data, i * 8).zip(be32(data, i * 8 + 4));
                }
            }
            (OPT_TIMESTAMP, 10) => {
                repr.timestamp = Some(TcpTimestampRepr::new(be32(data, 0)?, be32(data, 4)?));
            }
            _ => {} // unknown: passed over
        }
        opts = &opts[len..];
    }
    Some(repr)
}

/// The header length `emit` writes for `repr` (options padded to 32
/// bits), as `TcpRepr::header_len`.
pub fn header_len(repr: &TcpRepr<'_>) -> usize {
    let sack_blocks = repr.sack_ranges.iter().filter(|r| r.is_some()).count();
    let options = 4 * usize::from(repr.max_seg_size.is_some())
        + 3 * usize::from(repr.window_scale.is_some())
        + 2 * usize::from(repr.sack_permitted)
        + 10 * usize::from(repr.timestamp.is_some())
        + if sack_blocks > 0 {
            2 + 8 * sack_blocks
        } else {
            0
        };
    (BASE_LEN + options).next_multiple_of(4)
}

/// Writes `repr` (header, options, payload) at the start of `out`, with
/// a zero checksum; returns the segment's length. `out` must hold
/// `header_len(repr) + repr.payload.len()` bytes (the caller sized it
/// from the same `repr`).
#[inline(always)]
pub fn emit(repr: &TcpRepr<'_>, out: &mut [u8]) -> usize {
    let header_len = header_len(repr);
    let end = header_len + repr.payload.len();
    let (head, rest) = out.split_at_mut(header_len);
    let control = match repr.control {
        TcpControl::None => 0,
        TcpControl::Psh => PSH,
        TcpControl::Syn => SYN,
        TcpControl::Fin => FIN,
        TcpControl::Rst => RST,
    };
    let flags =
        ((header_len as u16 / 4) << 12) | control | if repr.ack_number.is_some() { ACK } else { 0 };
    let ack = repr.ack_number.map_or(0, |a| a.0 as u32);
    head[0..2].copy_from_slice(&repr.src_port.to_be_bytes());
    head[2..4].copy_from_slice(&repr.dst_port.to_be_bytes());
    head[4..8].copy_from_slice(&(repr.seq_number.0 as u32).to_be_bytes());
    head[8..12].copy_from_slice(&ack.to_be_bytes());
    head[12..14].copy_from_slice(&flags.to_be_bytes());
    head[14..16].copy_from_slice(&repr.window_len.to_be_bytes());
    head[16..20].fill(0); // checksum and urgent pointer
    let opts = &mut head[BASE_LEN..];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        opts[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    if let Some(mss) = repr.max_seg_size {
        let [hi, lo] = mss.to_be_bytes();
        put(&[OPT_MSS, 4, hi, lo]);
    }
    if let Some(shift) = repr.window_scale {
        put(&[OPT_WS, 3, shift]);
    }
    let sack_blocks = repr.sack_ranges.iter().flatten().count();
    if repr.sack_permitted {
        put(&[OPT_SACK_PERMITTED, 2]);
    } else if repr.ack_number.is_some() && sack_blocks > 0 {
        put(&[OPT_SACK, (2 + 8 * sack_blocks) as u8]);
        for &(left, right) in repr.sack_ranges.iter().flatten() {
            put(&left.to_be_bytes());
            put(&right.to_be_bytes());
        }
    }
    if let Some(ts) = repr.timestamp {
        put(&[OPT_TIMESTAMP, 10]);
        put(&ts.tsval.to_be_bytes());
        put(&ts.tsecr.to_be_bytes());
    }
    opts[at..].fill(OPT_END);
    rest[..repr.payload.len()].copy_from_slice(repr.payload);
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::{Checksum, ChecksumCapabilities};
    use smoltcp::wire::{IpAddress, Ipv4Address, TcpPacket};

    const SRC: IpAddress = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1));
    const DST: IpAddress = IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2));

    fn no_checksum() -> ChecksumCapabilities {
        let mut caps = ChecksumCapabilities::default();
        caps.tcp = Checksum::None;
        caps
    }

    fn smoltcp_parse(b: &[u8]) -> Option<TcpRepr<'_>> {
        let packet = TcpPacket::new_checked(b).ok()?;
        TcpRepr::parse(&packet, &SRC, &DST, &no_checksum()).ok()
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// A segment with a random set of the options the engine sends, as
    /// smoltcp writes it.
    fn random_segment(rng: &mut Rng, payload: &[u8]) -> Vec<u8> {
        let x = rng.next();
        // SACK blocks go only on ACKs, never beside SACK-permitted.
        let blocks = if x & 1 << 40 != 0 { (x >> 20) % 4 } else { 0 };
        let repr = TcpRepr {
            src_port: (x as u16) | 1,
            dst_port: ((x >> 16) as u16) | 1,
            control: [
                TcpControl::None,
                TcpControl::Psh,
                TcpControl::Syn,
                TcpControl::Fin,
                TcpControl::Rst,
            ][(x >> 32) as usize % 5],
            seq_number: TcpSeqNumber(rng.next() as i32),
            ack_number: (x & 1 << 40 != 0).then(|| TcpSeqNumber(rng.next() as i32)),
            window_len: (x >> 41) as u16,
            // Options of a SYN, and SACK blocks, as the engine sends them:
            // never so many that the header passes 60 bytes.
            window_scale: (x & 1 << 57 != 0 && blocks < 3).then_some((x >> 58) as u8 % 15),
            max_seg_size: (x & 1 << 62 != 0 && blocks < 3).then_some(x as u16),
            sack_permitted: x & 1 << 63 != 0 && blocks == 0,
            sack_ranges: [0, 1, 2]
                .map(|i| (i < blocks).then(|| (rng.next() as u32, rng.next() as u32))),
            timestamp: (x & 1 << 39 != 0)
                .then(|| TcpTimestampRepr::new(rng.next() as u32, rng.next() as u32)),
            payload,
        };
        let mut b = vec![0u8; repr.buffer_len()];
        repr.emit(
            &mut TcpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            &no_checksum(),
        );
        b
    }

    #[test]
    fn writes_what_smoltcp_writes() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let payload: Vec<u8> = (0..=255).collect();
        for n in 0..20_000 {
            let theirs = random_segment(&mut rng, &payload[..n % 40]);
            let repr = smoltcp_parse(&theirs).expect("smoltcp reads its own");
            assert_eq!(header_len(&repr), repr.header_len());
            let mut ours = vec![0xa5; theirs.len()];
            assert_eq!(emit(&repr, &mut ours), theirs.len());
            assert_eq!(ours, theirs, "{repr:?}");
        }
    }

    /// Valid segments, then each with random bytes of its header changed
    /// (option kinds and lengths, the data offset, flags), and random
    /// bytes: both parsers agree on every one.
    #[test]
    fn reads_what_smoltcp_reads_and_refuses_what_it_refuses() {
        let mut rng = Rng(0x0bad_cafe_f00d_d00d);
        let (mut accepted, mut refused) = (0, 0);
        for n in 0..200_000 {
            let mut b = random_segment(&mut rng, &[1, 2, 3][..n % 4]);
            let edits = if n % 8 == 0 { 0 } else { 1 + rng.next() % 4 };
            for _ in 0..edits {
                let r = rng.next();
                let at = (r as usize >> 8) % b.len();
                b[at] = match r % 4 {
                    0 => r as u8 >> 4 & 0xf, // a small option kind or length
                    1 => (r >> 16) as u8,
                    2 => b[at] ^ (1 << ((r >> 16) % 8)),
                    _ => OPT_SACK,
                };
            }
            if n % 16 == 1 {
                b.truncate((rng.next() as usize) % (b.len() + 1));
            }
            let (ours, theirs) = (parse(&b), smoltcp_parse(&b));
            assert_eq!(ours, theirs, "{b:02x?}");
            if ours.is_some() {
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        assert!(
            accepted > 50_000 && refused > 20_000,
            "{accepted} / {refused}"
        );
    }
}
