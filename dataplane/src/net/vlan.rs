//! IEEE 802.1Q tags in software (docs/vlan.md): a received frame's tag is
//! read and taken out before the interface of its VLAN sees the frame,
//! and a frame an interface on a VLAN sends gets the tag put in. The
//! interfaces themselves only ever see untagged Ethernet frames.

use crate::port::PacketBuf;
use crate::stats::DropReason;

/// The Tag Protocol Identifier of a customer VLAN tag (802.1Q).
pub const TPID: u16 = 0x8100;
/// The service tag of 802.1ad (QinQ): not taken.
const TPID_SERVICE: u16 = 0x88a8;
/// Bytes of a tag.
pub const TAG_LEN: usize = 4;
/// Where the tag goes: after the destination and source MACs.
const AT: usize = 12;

/// The VLAN of a received frame, its tag taken out: `None` for an
/// untagged frame or one tagged with VLAN 0 (a priority tag: 802.1Q
/// §9.6, the frame belongs to the port's untagged network).
///
/// # Errors
/// `Malformed` for a tag cut short or VLAN 4095 (reserved), and
/// `UnsupportedEtherType` for stacked (802.1ad) tags.
#[inline]
pub fn untag<B: PacketBuf>(buf: &mut B) -> Result<Option<u16>, DropReason> {
    // Untagged frames (nearly all on most ports) cost this compare.
    let ty = match buf.data().get(AT..AT + 2) {
        Some(t) => u16::from_be_bytes([t[0], t[1]]),
        None => return Ok(None),
    };
    match ty {
        TPID => take_tag(buf),
        TPID_SERVICE => Err(DropReason::UnsupportedEtherType),
        _ => Ok(None),
    }
}

/// [`untag`] for a frame with an 802.1Q tag.
#[inline(never)]
fn take_tag<B: PacketBuf>(buf: &mut B) -> Result<Option<u16>, DropReason> {
    let Some(tci) = buf.data().get(AT + 2..AT + 4) else {
        return Err(DropReason::Malformed);
    };
    // Priority (3 bits) and drop eligibility (1) are not kept: the
    // engine has one class of service.
    let vid = u16::from_be_bytes([tci[0], tci[1]]) & 0x0fff;
    if vid == 0x0fff || buf.data().len() < AT + TAG_LEN + 2 {
        return Err(DropReason::Malformed);
    }
    if !buf.remove_bytes(AT, TAG_LEN) {
        return Err(DropReason::Malformed);
    }
    Ok((vid != 0).then_some(vid))
}

/// Tags a frame for VLAN `vid` (priority 0); nothing to do for `None`.
/// Offload requests already made count the tag in their link-layer
/// length. False when the frame has no room for the tag.
#[inline]
pub fn tag<B: PacketBuf>(buf: &mut B, vid: Option<u16>) -> bool {
    let Some(vid) = vid else {
        return true;
    };
    if !buf.insert_bytes(AT, TAG_LEN) {
        return false;
    }
    let d = buf.data_mut();
    d[AT..AT + 2].copy_from_slice(&TPID.to_be_bytes());
    d[AT + 2..AT + 4].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    buf.grow_l2(TAG_LEN as u8);
    true
}

/// Where a frame's EtherType is and which VLAN tags it, without changing
/// it (for steering): `(offset of the EtherType, vid)`.
#[inline]
pub fn peek(frame: &[u8]) -> (usize, Option<u16>) {
    match frame.get(AT..AT + 4) {
        Some([0x81, 0x00, hi, lo]) => (AT + TAG_LEN, Some(u16::from_be_bytes([*hi, *lo]) & 0x0fff)),
        _ => (AT, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain buffer for the default byte-moving methods.
    struct Buf(Vec<u8>, usize);

    impl PacketBuf for Buf {
        fn data(&self) -> &[u8] {
            &self.0[..self.1]
        }
        fn data_mut(&mut self) -> &mut [u8] {
            &mut self.0[..self.1]
        }
        fn capacity(&self) -> usize {
            self.0.len()
        }
        fn set_len(&mut self, len: usize) {
            assert!(len <= self.0.len());
            self.1 = len;
        }
    }

    fn frame(len: usize) -> Buf {
        let mut v = vec![0u8; 2048];
        for (i, b) in v.iter_mut().enumerate().take(len) {
            *b = i as u8;
        }
        v[12] = 0x08;
        v[13] = 0x00;
        Buf(v, len)
    }

    #[test]
    fn tagging_then_untagging_gives_the_frame_back() {
        for len in [60, 61, 1514] {
            let plain = frame(len);
            let mut f = frame(len);
            assert!(tag(&mut f, Some(100)));
            assert_eq!(f.data().len(), len + 4);
            assert_eq!(&f.data()[..12], &plain.data()[..12], "MACs stay");
            assert_eq!(&f.data()[12..16], &[0x81, 0x00, 0x00, 100]);
            assert_eq!(&f.data()[16..], &plain.data()[12..], "the rest follows");
            assert_eq!(peek(f.data()), (16, Some(100)));
            assert_eq!(untag(&mut f), Ok(Some(100)));
            assert_eq!(f.data(), plain.data());
        }
        let mut f = frame(60);
        assert!(tag(&mut f, None), "untagged: nothing to do");
        assert_eq!(f.data().len(), 60);
        assert_eq!(untag(&mut f), Ok(None));
        assert_eq!(peek(f.data()), (12, None));
    }

    #[test]
    fn priority_tags_reserved_and_stacked_tags() {
        let mut f = frame(64);
        tag(&mut f, Some(0));
        assert_eq!(untag(&mut f), Ok(None), "VLAN 0: a priority tag");
        assert_eq!(f.data().len(), 64);
        let mut f = frame(64);
        tag(&mut f, Some(0x0fff));
        assert_eq!(
            untag(&mut f),
            Err(DropReason::Malformed),
            "4095 is reserved"
        );
        let mut f = frame(64);
        f.data_mut()[12..14].copy_from_slice(&TPID_SERVICE.to_be_bytes());
        assert_eq!(untag(&mut f), Err(DropReason::UnsupportedEtherType));
        let mut f = frame(64);
        tag(&mut f, Some(7));
        f.set_len(15);
        assert_eq!(untag(&mut f), Err(DropReason::Malformed), "tag cut short");
        let mut full = Buf(vec![0u8; 64], 64);
        full.0[12] = 0x08;
        assert!(!tag(&mut full, Some(5)), "no room for the tag");
    }
}
