//! Ports: where an engine's packets come from and go to.
//!
//! One trait, several backends: a queue pair of a DPDK ethdev (NICs and
//! virtual devices), a tap with virtio-net headers (the lab's offloading
//! port), an in-memory link joining two ports in one process, and
//! wrappers that impair traffic (loss, reordering, duplication, delay) or
//! write it to a pcap file. The engine is generic over [`Port`], so tests and
//! simulations run the very code the daemon runs.

mod device;
mod ethdev;
pub mod impair;
pub mod memory;
pub mod pcap;
mod vnet_tap;

pub use device::DeviceQueue;
pub use impair::{ImpairConfig, ImpairStats, Impaired};
pub use memory::{link, link_with_offload, link_with_segmentation, MemBuf, MemPort};
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

    /// Whether the frame goes on in further segments (a driver chained
    /// buffers for a frame longer than one): [`PacketBuf::data`] is its
    /// first segment only, and replies built in place would go out with
    /// the rest attached. The engine drops such frames.
    #[inline]
    fn chained(&self) -> bool {
        false
    }

    /// What the port's receive checks found of this frame's checksums
    /// (nothing checked unless the port offloads them).
    #[inline]
    fn rx_checks(&self) -> RxChecks {
        RxChecks::default()
    }

    /// Asks the port to fill this frame's IPv4 header and TCP checksums
    /// as it transmits it. The frame is an Ethernet header of `l2_len`
    /// bytes, an IPv4 header of `l3_len` bytes with a zero checksum, and
    /// a TCP segment whose checksum field holds the pseudo-header sum.
    /// Only for frames to a port whose [`Port::checksum_offload`] has
    /// `tx_tcp` set; other buffers ignore it.
    #[inline]
    fn request_tx_checksums(&mut self, _l2_len: u8, _l3_len: u8) {}

    /// Asks the port to cut this frame into TCP segments of at most
    /// `mss` payload bytes as it transmits it (TCP segmentation offload),
    /// filling every segment's checksums. The frame is laid out as for
    /// [`PacketBuf::request_tx_checksums`] (the TCP checksum field holds
    /// the pseudo-header sum over the whole frame's TCP length), with a
    /// TCP header of `l4_len` bytes. Only for frames to a port whose
    /// [`Port::segmentation`] is set; other buffers ignore it.
    #[inline]
    fn request_segmentation(&mut self, _l2_len: u8, _l3_len: u8, _l4_len: u8, _mss: u16) {}

    /// Takes over `other`'s offload requests (a copy of a frame is sent
    /// as the original would be).
    #[inline]
    fn copy_offload_from(&mut self, _other: &Self)
    where
        Self: Sized,
    {
    }

    /// Inserts `n` bytes at `at` (they are unspecified until written),
    /// moving what follows; false when the frame would not fit.
    fn insert_bytes(&mut self, at: usize, n: usize) -> bool {
        let len = self.data().len();
        if at > len || len + n > self.capacity() {
            return false;
        }
        self.set_len(len + n);
        self.data_mut().copy_within(at..len, at + n);
        true
    }

    /// Removes `n` bytes at `at`, moving what follows; false when the
    /// frame has fewer.
    fn remove_bytes(&mut self, at: usize, n: usize) -> bool {
        let len = self.data().len();
        if at + n > len {
            return false;
        }
        self.data_mut().copy_within(at + n..len, at);
        self.set_len(len - n);
        true
    }

    /// The link-layer header grew by `n` bytes (an 802.1Q tag inserted):
    /// offload requests already made count it in their `l2_len`.
    #[inline]
    fn grow_l2(&mut self, _n: u8) {}
}

/// One checksum as the port's receive check found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Check {
    /// Not checked: software verifies it.
    #[default]
    Unknown,
    Good,
    Bad,
}

/// The port's receive checks of one frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxChecks {
    pub ipv4: Check,
    /// The TCP (or other layer-4) checksum.
    pub l4: Check,
}

/// Checksum work a port does in hardware (or its driver does for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumOffload {
    /// Received IPv4 header checksums are checked by the port; frames
    /// carry the verdict ([`PacketBuf::rx_checks`]).
    pub rx_ipv4: bool,
    /// Received TCP checksums likewise.
    pub rx_tcp: bool,
    /// The port fills IPv4 header checksums on transmit.
    pub tx_ipv4: bool,
    /// The port fills TCP checksums on transmit.
    pub tx_tcp: bool,
}

impl ChecksumOffload {
    /// Whether the engine leaves both transmit checksums of its TCP
    /// frames to the port (it asks for both or neither).
    pub fn tx(&self) -> bool {
        self.tx_ipv4 && self.tx_tcp
    }
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

    /// TCP segmentation the port does on transmit (TSO): the largest
    /// frame, Ethernet header included, it takes to cut into segments
    /// (`None`: it sends frames as they are). A port that segments also
    /// offloads both transmit checksums.
    fn segmentation(&self) -> Option<usize> {
        None
    }

    /// Frames the device refused to send, or failed to receive, so far
    /// (counted by the port; the engine shows them as `port_error` drops).
    fn errors(&self) -> u64 {
        0
    }

    /// A fresh buffer with room for the largest frame
    /// [`Port::segmentation`] allows; a port that does not segment gives
    /// an ordinary one.
    fn alloc_large(&mut self) -> Option<Self::Buf> {
        self.alloc()
    }

    /// How the port's RSS spreads received flows, when it has several
    /// queues with RSS (`None`: every flow comes to this queue).
    fn rss_steering(&self) -> Option<RssSteering> {
        None
    }

    /// Called at every engine tick (1 ms) on a port the engine transmits
    /// on: work the device needs even when idle (a bond's LACP frames).
    fn on_tick(&mut self) {}

    /// Stops (`true`) or resumes using the device, while the control
    /// thread restarts it: paused, bursts move nothing. Ports that are
    /// never restarted ignore it.
    fn set_paused(&mut self, _paused: bool) {}
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
