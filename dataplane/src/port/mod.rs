//! Ports: where an engine's packets come from and go to.
//!
//! One trait, several backends: a queue pair of a DPDK ethdev (NICs and
//! virtual devices), an in-memory link joining two ports in one process, and
//! wrappers that impair traffic (loss, reordering, duplication, delay) or
//! write it to a pcap file. The engine is generic over [`Port`], so tests and
//! simulations run the very code the daemon runs.

mod ethdev;
pub mod impair;
pub mod memory;
pub mod pcap;

pub use impair::{ImpairConfig, ImpairStats, Impaired};
pub use memory::{link, MemBuf, MemPort};
pub use pcap::PcapTap;

use smoltcp::wire::EthernetAddress;

use crate::time::Instant;

/// A packet buffer: one contiguous frame.
pub trait PacketBuf: Send {
    /// The frame's bytes.
    fn data(&self) -> &[u8];
    /// The frame's bytes, mutable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Largest length [`PacketBuf::set_len`] accepts.
    fn capacity(&self) -> usize;
    /// Grows or shrinks the frame; new bytes are unspecified until written.
    ///
    /// # Panics
    /// When `len > capacity()`.
    fn set_len(&mut self, len: usize);
}

/// Checksum work a port does in hardware.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumOffload {
    /// Received IPv4 header checksums are verified by the port (bad ones are
    /// flagged, so software need not recompute).
    pub rx_ipv4: bool,
    /// The port fills IPv4 header checksums on transmit.
    pub tx_ipv4: bool,
}

/// One RX/TX queue pair seen by one engine.
///
/// Contract for `tx_burst`: packets are taken from the front of `batch`;
/// those accepted leave it, **those not accepted stay in `batch`**, still
/// owned by the caller.
pub trait Port {
    type Buf: PacketBuf;

    /// The port's MAC address.
    fn mac(&self) -> EthernetAddress;

    /// Appends up to `max` received frames to `out`; returns how many.
    fn rx_burst(&mut self, now: Instant, out: &mut Vec<Self::Buf>, max: usize) -> usize;

    /// Transmits frames from the front of `batch`; returns how many left it.
    fn tx_burst(&mut self, now: Instant, batch: &mut Vec<Self::Buf>) -> usize;

    /// A fresh, empty buffer to build a frame in; `None` when out of buffers.
    fn alloc(&mut self) -> Option<Self::Buf>;

    /// Checksum offloads in effect.
    fn checksum_offload(&self) -> ChecksumOffload {
        ChecksumOffload::default()
    }

    /// How the port's RSS spreads received flows, when it has several
    /// queues with RSS (`None`: every flow comes to this queue).
    fn rss_steering(&self) -> Option<RssSteering> {
        None
    }
}

/// How a port spreads received flows over its queues, and which is ours.
#[derive(Debug, Clone, Copy)]
pub struct RssSteering {
    pub key: &'static [u8],
    pub queues: u16,
    /// Redirection table size (entries; the table maps entry `i` to queue
    /// `i % queues`); 0 when the device has none (then `h % queues`).
    pub reta_size: u16,
    pub queue: u16,
}

impl RssSteering {
    /// The queue a segment with RSS hash `h` lands on.
    pub fn queue_of(&self, h: u32) -> u16 {
        let queues = u32::from(self.queues.max(1));
        let reta = match self.reta_size {
            0 => queues,
            n => u32::from(n),
        };
        ((h % reta) % queues) as u16
    }
}
