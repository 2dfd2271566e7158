//! The network layer of one engine port: Ethernet, ARP (replies, a cache,
//! resolution of next hops), IPv4 and ICMP echo; IPv6 with Neighbor
//! Discovery and ICMPv6 echo on ports that have IPv6 addresses. Frames are parsed and
//! rewritten in place with `smoltcp::wire`; replies reuse the received
//! buffer, so answering costs no allocation.

pub mod arp;
pub use crate::checksum;
mod iface;
pub mod ipv6;
pub mod prefix_set;
pub mod toeplitz;
pub mod vlan;

pub use arp::{ArpCache, ArpLookup, NdCache, NeighborCache};
pub use iface::{set_destination, Interface, InterfaceConfig, Verdict};
pub use ipv6::Ipv6Config;
pub use prefix_set::PrefixSet;
