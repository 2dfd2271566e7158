//! Flow keys of both address families. The engine keeps IPv4 and IPv6
//! flows in tables of their own (docs/ipv6.md, "TCP over IPv6"): an IPv4
//! key stays 12 bytes and an IPv4 segment never touches an IPv6 table.
//! Code shared by the two families is generic over [`FlowAddr`].

use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::flow_table::FlowTable;

/// A connection's addresses, from our side; `FlowKey` alone is IPv4's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey<I = Ipv4Addr> {
    pub local: I,
    pub local_port: u16,
    pub remote: I,
    pub remote_port: u16,
}

/// An IPv6 connection's addresses.
pub type FlowKey6 = FlowKey<Ipv6Addr>;

/// A flow key of either family: what the application is told and gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnyFlowKey {
    V4(FlowKey),
    V6(FlowKey6),
}

impl<I: FlowAddr> FlowKey<I> {
    /// Our address and port.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.local.ip(), self.local_port)
    }

    /// The peer's address and port.
    pub fn remote_addr(&self) -> SocketAddr {
        SocketAddr::new(self.remote.ip(), self.remote_port)
    }

    /// Writes the 4-tuple into a keyed hash (ISNs, cookies).
    #[inline]
    pub(super) fn hash_tuple(&self, h: &mut impl Hasher) {
        self.local.hash_addr(h);
        self.remote.hash_addr(h);
        h.write_u16(self.local_port);
        h.write_u16(self.remote_port);
    }
}

impl AnyFlowKey {
    /// The key of the flow from `local` to `remote`, or `None` when their
    /// families differ.
    pub fn new(local: SocketAddr, remote: SocketAddr) -> Option<Self> {
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(l), IpAddr::V4(r)) => Some(Self::V4(FlowKey {
                local: l,
                local_port: local.port(),
                remote: r,
                remote_port: remote.port(),
            })),
            (IpAddr::V6(l), IpAddr::V6(r)) => Some(Self::V6(FlowKey {
                local: l,
                local_port: local.port(),
                remote: r,
                remote_port: remote.port(),
            })),
            _ => None,
        }
    }

    /// Our address and port.
    pub fn local_addr(&self) -> SocketAddr {
        match self {
            Self::V4(k) => k.local_addr(),
            Self::V6(k) => k.local_addr(),
        }
    }

    /// The peer's address and port.
    pub fn remote_addr(&self) -> SocketAddr {
        match self {
            Self::V4(k) => k.remote_addr(),
            Self::V6(k) => k.remote_addr(),
        }
    }

    pub fn local_port(&self) -> u16 {
        self.local_addr().port()
    }

    pub fn remote_port(&self) -> u16 {
        self.remote_addr().port()
    }
}

impl From<FlowKey> for AnyFlowKey {
    fn from(k: FlowKey) -> Self {
        Self::V4(k)
    }
}

impl From<FlowKey6> for AnyFlowKey {
    fn from(k: FlowKey6) -> Self {
        Self::V6(k)
    }
}

/// The flow tables of both families.
#[derive(Debug)]
pub(super) struct Tables {
    pub v4: FlowTable<Ipv4Addr>,
    pub v6: FlowTable<Ipv6Addr>,
}

impl Tables {
    /// Live connections of both families.
    pub fn conns(&self) -> usize {
        self.v4.conns() + self.v6.conns()
    }
}

/// An address family's address as the TCP engine uses it (implemented
/// by `Ipv4Addr` and `Ipv6Addr` only).
pub trait FlowAddr: sealed::Family + Copy + Eq + Hash + Debug + 'static {
    /// The wildcard address (a listener's "any").
    const UNSPECIFIED: Self;
    /// Whether this is the IPv6 family.
    const IPV6: bool;

    fn ip(self) -> IpAddr;

    /// Writes the address into a hash.
    fn hash_addr(self, h: &mut impl Hasher);

    /// Whether a received segment's checksum is right.
    fn checksum_ok(src: Self, dst: Self, segment: &[u8]) -> bool;

    /// What a control block holds of the key: the whole of an IPv4 one,
    /// the ports of an IPv6 one (its addresses are kept by slot).
    fn inline_key(key: FlowKey<Self>) -> FlowKey;

    /// The key to keep by slot beside the control block (IPv6's).
    fn side_key(key: FlowKey<Self>) -> Option<FlowKey6>;

    /// What a per-source limit counts this source as: the IPv4 address,
    /// or the /64 of an IPv6 address (one host holds a /64, so a limit
    /// per address would be none).
    fn source_id(self) -> u64;

    /// The key in the form the application sees.
    fn any(key: FlowKey<Self>) -> AnyFlowKey;
}

// The tables are the engine's own: a sealed trait reaches them without
// making them public (what `private_interfaces` warns of is the intent).
#[allow(private_interfaces)]
mod sealed {
    use super::{FlowTable, Tables};

    /// What only the engine sees of a family: its flow table.
    pub trait Family: Sized {
        fn table(t: &Tables) -> &FlowTable<Self>;
        fn table_mut(t: &mut Tables) -> &mut FlowTable<Self>;
    }

    impl Family for std::net::Ipv4Addr {
        #[inline]
        fn table(t: &Tables) -> &FlowTable<Self> {
            &t.v4
        }

        #[inline]
        fn table_mut(t: &mut Tables) -> &mut FlowTable<Self> {
            &mut t.v4
        }
    }

    impl Family for std::net::Ipv6Addr {
        #[inline]
        fn table(t: &Tables) -> &FlowTable<Self> {
            &t.v6
        }

        #[inline]
        fn table_mut(t: &mut Tables) -> &mut FlowTable<Self> {
            &mut t.v6
        }
    }
}

impl FlowAddr for Ipv4Addr {
    const UNSPECIFIED: Self = Ipv4Addr::UNSPECIFIED;
    const IPV6: bool = false;

    #[inline]
    fn ip(self) -> IpAddr {
        IpAddr::V4(self)
    }

    #[inline]
    fn hash_addr(self, h: &mut impl Hasher) {
        h.write_u32(u32::from(self));
    }

    #[inline]
    fn checksum_ok(src: Self, dst: Self, segment: &[u8]) -> bool {
        crate::checksum::tcp_ok(src.octets(), dst.octets(), segment)
    }

    #[inline]
    fn inline_key(key: FlowKey<Self>) -> FlowKey {
        key
    }

    #[inline]
    fn side_key(_: FlowKey<Self>) -> Option<FlowKey6> {
        None
    }

    #[inline]
    fn source_id(self) -> u64 {
        u64::from(u32::from(self))
    }

    #[inline]
    fn any(key: FlowKey<Self>) -> AnyFlowKey {
        AnyFlowKey::V4(key)
    }
}

impl FlowAddr for Ipv6Addr {
    const UNSPECIFIED: Self = Ipv6Addr::UNSPECIFIED;
    const IPV6: bool = true;

    #[inline]
    fn ip(self) -> IpAddr {
        IpAddr::V6(self)
    }

    #[inline]
    fn hash_addr(self, h: &mut impl Hasher) {
        h.write_u128(u128::from(self));
    }

    #[inline]
    fn checksum_ok(src: Self, dst: Self, segment: &[u8]) -> bool {
        crate::checksum::tcp6_ok(src.octets(), dst.octets(), segment)
    }

    #[inline]
    fn inline_key(key: FlowKey<Self>) -> FlowKey {
        FlowKey {
            local: Ipv4Addr::UNSPECIFIED,
            local_port: key.local_port,
            remote: Ipv4Addr::UNSPECIFIED,
            remote_port: key.remote_port,
        }
    }

    #[inline]
    fn side_key(key: FlowKey<Self>) -> Option<FlowKey6> {
        Some(key)
    }

    #[inline]
    fn source_id(self) -> u64 {
        (u128::from(self) >> 64) as u64
    }

    #[inline]
    fn any(key: FlowKey<Self>) -> AnyFlowKey {
        AnyFlowKey::V6(key)
    }
}
