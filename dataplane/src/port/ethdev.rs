//! [`Port`] for a DPDK ethdev queue pair.

use smoltcp::wire::EthernetAddress;

use super::{Check, ChecksumOffload, PacketBuf, Port, RxChecks};
use crate::dpdk::{EthQueue, Mbuf};
use crate::time::Instant;
use dpdk_sys::consts as c;

impl PacketBuf for Mbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        Mbuf::data(self)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        Mbuf::data_mut(self)
    }
    #[inline]
    fn capacity(&self) -> usize {
        Mbuf::capacity(self)
    }
    #[inline]
    fn set_len(&mut self, len: usize) {
        Mbuf::set_len(self, len)
    }
    #[inline]
    fn chained(&self) -> bool {
        self.segments() > 1
    }

    #[inline]
    fn rx_checks(&self) -> RxChecks {
        let flags = self.ol_flags();
        // Four values under each mask: UNKNOWN (0), BAD, GOOD, and NONE
        // (both bits: the checksum field is not filled in but the data
        // was verified, as virtio's partial checksums): good too.
        let check = |mask: u64, good: u64, bad: u64| match flags & mask {
            0 => Check::Unknown,
            f if f == bad => Check::Bad,
            f if f == good || f == good | bad => Check::Good,
            _ => Check::Unknown,
        };
        RxChecks {
            ipv4: check(
                c::RTE_MBUF_F_RX_IP_CKSUM_MASK,
                c::RTE_MBUF_F_RX_IP_CKSUM_GOOD,
                c::RTE_MBUF_F_RX_IP_CKSUM_BAD,
            ),
            l4: check(
                c::RTE_MBUF_F_RX_L4_CKSUM_MASK,
                c::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
                c::RTE_MBUF_F_RX_L4_CKSUM_BAD,
            ),
        }
    }

    #[inline]
    fn request_tx_checksums(&mut self, l2_len: u8, l3_len: u8) {
        // IPv6 has no header checksum: the TCP one alone.
        let family = if ipv6_at(self.data(), l2_len) {
            c::RTE_MBUF_F_TX_IPV6
        } else {
            c::RTE_MBUF_F_TX_IPV4 | c::RTE_MBUF_F_TX_IP_CKSUM
        };
        self.set_tx_offload(
            family | c::RTE_MBUF_F_TX_TCP_CKSUM,
            l2_len,
            u16::from(l3_len),
        );
    }

    #[inline]
    fn request_segmentation(&mut self, l2_len: u8, l3_len: u8, l4_len: u8, mss: u16) {
        // DPDK's TSO starts from the pseudo-header sum without the length
        // (rte_ipv4_phdr_cksum for a TSO mbuf); the frame has it with.
        let (l2, l3) = (usize::from(l2_len), usize::from(l3_len));
        let ipv6 = ipv6_at(self.data(), l2_len);
        let frame = self.data_mut();
        let sum = match frame.get(l2..l2 + l3) {
            Some(ip) if ipv6 && ip.len() >= 40 => {
                let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
                src.copy_from_slice(&ip[8..24]);
                dst.copy_from_slice(&ip[24..40]);
                Some(crate::checksum::tcp6_pseudo_header(src, dst, 0))
            }
            Some(ip) if !ipv6 && ip.len() >= 20 => {
                let (src, dst) = (
                    [ip[12], ip[13], ip[14], ip[15]],
                    [ip[16], ip[17], ip[18], ip[19]],
                );
                Some(crate::checksum::tcp_pseudo_header(src, dst, 0))
            }
            _ => None,
        };
        if let (Some(sum), Some(field)) = (sum, frame.get_mut(l2 + l3 + 16..l2 + l3 + 18)) {
            field.copy_from_slice(&sum.to_be_bytes());
        }
        let family = if ipv6 {
            c::RTE_MBUF_F_TX_IPV6
        } else {
            c::RTE_MBUF_F_TX_IPV4 | c::RTE_MBUF_F_TX_IP_CKSUM
        };
        self.set_tso(
            family | c::RTE_MBUF_F_TX_TCP_SEG,
            l2_len,
            u16::from(l3_len),
            l4_len,
            mss,
        );
    }

    #[inline]
    fn grow_l2(&mut self, n: u8) {
        let flags = self.ol_flags();
        if flags
            & (c::RTE_MBUF_F_TX_IP_CKSUM | c::RTE_MBUF_F_TX_TCP_CKSUM | c::RTE_MBUF_F_TX_TCP_SEG)
            != 0
        {
            let (l2, l3, l4, seg) = self.tx_lens();
            self.set_tso(flags, l2 + n, l3, l4, seg);
        }
    }

    fn copy_offload_from(&mut self, other: &Self) {
        Mbuf::copy_offload_from(self, other)
    }
}

impl Port for EthQueue {
    type Buf = Mbuf;

    fn mac(&self) -> EthernetAddress {
        EthernetAddress(EthQueue::mac(self))
    }

    #[inline]
    fn rx_burst(&mut self, _now: Instant, out: &mut Vec<Mbuf>, max: usize) -> usize {
        EthQueue::rx_burst(self, out, max)
    }

    #[inline]
    fn tx_burst(&mut self, _now: Instant, batch: &mut Vec<Mbuf>) -> usize {
        EthQueue::tx_burst(self, batch)
    }

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        self.mempool().alloc()
    }

    fn errors(&self) -> u64 {
        self.rx_invalid()
    }

    fn rss_steering(&self) -> Option<super::RssSteering> {
        let (queues, reta_size) = self.rss_spread()?;
        Some(super::RssSteering {
            key: &crate::dpdk::SYMMETRIC_RSS_KEY,
            queues,
            reta_size,
            queue: self.queue_id().0,
        })
    }

    #[inline]
    fn alloc_large(&mut self) -> Option<Mbuf> {
        self.large_mempool().unwrap_or(self.mempool()).alloc()
    }

    fn segmentation(&self) -> Option<usize> {
        self.large_mempool().map(|p| p.frame_room())
    }

    fn on_tick(&mut self) {
        self.tx_idle();
    }

    fn set_paused(&mut self, paused: bool) {
        EthQueue::set_paused(self, paused);
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        let o = self.offloads();
        ChecksumOffload {
            rx_ipv4: o.rx_ipv4_cksum,
            rx_tcp: o.rx_tcp_cksum,
            tx_ipv4: o.tx_ipv4_cksum,
            tx_tcp: o.tx_tcp_cksum,
        }
    }
}

/// Whether the IP header of `frame` after `l2` link-layer bytes is IPv6.
fn ipv6_at(frame: &[u8], l2: u8) -> bool {
    frame.get(usize::from(l2)).is_some_and(|v| v >> 4 == 6)
}
