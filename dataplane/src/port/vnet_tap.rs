//! [`Port`] for a tap with virtio-net headers ([`VnetTap`]): checksums
//! and TCP segmentation left to the kernel peer.

use smoltcp::wire::EthernetAddress;

use super::{ChecksumOffload, Port};
use crate::dpdk::{Mbuf, VnetTap};
use crate::time::Instant;

impl Port for VnetTap {
    type Buf = Mbuf;

    fn mac(&self) -> EthernetAddress {
        EthernetAddress(VnetTap::mac(self))
    }

    #[inline]
    fn rx_burst(&mut self, _now: Instant, out: &mut Vec<Mbuf>, max: usize) -> usize {
        VnetTap::rx_burst(self, out, max)
    }

    #[inline]
    fn tx_burst(&mut self, _now: Instant, batch: &mut Vec<Mbuf>) -> usize {
        VnetTap::tx_burst(self, batch)
    }

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        VnetTap::alloc(self)
    }

    #[inline]
    fn alloc_large(&mut self) -> Option<Mbuf> {
        VnetTap::alloc_large(self)
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        // The kernel checks IPv4 headers of nothing it hands over: those
        // stay with software (20 bytes); the IPv4 checksum of what we send
        // is filled by the port itself, as a driver would.
        let on = VnetTap::checksum_offload(self);
        ChecksumOffload {
            rx_ipv4: false,
            rx_tcp: on,
            tx_ipv4: on,
            tx_tcp: on,
        }
    }

    fn segmentation(&self) -> Option<usize> {
        VnetTap::segmentation(self)
    }

    fn errors(&self) -> u64 {
        let s = self.stats();
        s.rx_errors + s.rx_too_long + s.rx_empty + s.tx_errors
    }
}
