//! [`Port`] for any device `dpd` runs on: a DPDK ethdev queue pair or
//! tlsdp's tap with virtio-net headers. One engine type serves both; the
//! choice costs a branch per burst and per buffer.

use smoltcp::wire::EthernetAddress;

use super::{ChecksumOffload, Port, RssSteering};
use crate::dpdk::{EthQueue, Mbuf, VnetTap};
use crate::time::Instant;

/// One engine's queue on a device.
#[derive(Debug)]
pub enum DeviceQueue {
    Eth(EthQueue),
    Tap(VnetTap),
}

macro_rules! each {
    ($self:expr, $q:ident => $e:expr) => {
        match $self {
            DeviceQueue::Eth($q) => $e,
            DeviceQueue::Tap($q) => $e,
        }
    };
}

impl Port for DeviceQueue {
    type Buf = Mbuf;

    fn mac(&self) -> EthernetAddress {
        each!(self, q => Port::mac(q))
    }

    #[inline]
    fn rx_burst(&mut self, now: Instant, out: &mut Vec<Mbuf>, max: usize) -> usize {
        each!(self, q => Port::rx_burst(q, now, out, max))
    }

    #[inline]
    fn tx_burst(&mut self, now: Instant, batch: &mut Vec<Mbuf>) -> usize {
        each!(self, q => Port::tx_burst(q, now, batch))
    }

    #[inline]
    fn alloc(&mut self) -> Option<Mbuf> {
        each!(self, q => Port::alloc(q))
    }

    #[inline]
    fn alloc_large(&mut self) -> Option<Mbuf> {
        each!(self, q => Port::alloc_large(q))
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        each!(self, q => Port::checksum_offload(q))
    }

    fn segmentation(&self) -> Option<usize> {
        each!(self, q => Port::segmentation(q))
    }

    fn errors(&self) -> u64 {
        each!(self, q => Port::errors(q))
    }

    fn rss_steering(&self) -> Option<RssSteering> {
        each!(self, q => Port::rss_steering(q))
    }

    fn on_tick(&mut self) {
        each!(self, q => Port::on_tick(q))
    }

    fn set_paused(&mut self, paused: bool) {
        each!(self, q => Port::set_paused(q, paused))
    }
}
