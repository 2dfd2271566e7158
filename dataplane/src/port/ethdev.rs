//! [`Port`] for a DPDK ethdev queue pair.

use smoltcp::wire::EthernetAddress;

use super::{ChecksumOffload, PacketBuf, Port};
use crate::dpdk::{EthQueue, Mbuf};
use crate::time::Instant;

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

    fn rss_steering(&self) -> Option<super::RssSteering> {
        let (queues, reta_size) = self.rss_spread()?;
        Some(super::RssSteering {
            key: &crate::dpdk::SYMMETRIC_RSS_KEY,
            queues,
            reta_size,
            queue: self.queue_id().0,
        })
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        let o = self.offloads();
        ChecksumOffload {
            rx_ipv4: o.rx_ipv4_cksum,
            // Transmit offload also needs per-mbuf flags and l2/l3 lengths;
            // the engine fills checksums in software until the TCP engine
            // sets those.
            tx_ipv4: false,
        }
    }
}
