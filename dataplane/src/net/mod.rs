//! The network layer of one engine port: Ethernet, ARP (replies, a cache,
//! resolution of next hops), IPv4 and ICMP echo. Frames are parsed and
//! rewritten in place with `smoltcp::wire`; replies reuse the received
//! buffer, so answering costs no allocation.

pub mod arp;
pub use crate::checksum;
mod iface;
pub mod toeplitz;

pub use arp::{ArpCache, ArpLookup};
pub use iface::{set_destination, Interface, InterfaceConfig, Verdict};
