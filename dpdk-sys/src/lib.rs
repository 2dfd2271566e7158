//! Raw bindings to the installed DPDK, generated at build time by bindgen
//! against the headers pkg-config names (`libdpdk`), plus tlsdp's C shim
//! (`tlsdp_*`) for DPDK's static-inline functions and the bit-flag constants
//! that bindgen cannot evaluate.
//!
//! This is the only crate that declares DPDK's C functions. Everything here is
//! unsafe to call; the safe layer lives in `dataplane::dpdk`.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
#![allow(missing_debug_implementations, clippy::all, rust_2018_idioms)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// DPDK's bit flags and sizes, read from the installed headers at build time.
pub mod consts {
    include!(concat!(env!("OUT_DIR"), "/consts.rs"));
}

/// The DPDK version these bindings were generated against.
pub const DPDK_VERSION: &str = env!("TLSDP_DPDK_VERSION");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mbuf_is_two_cache_lines() {
        // The data path indexes mbuf fields through the shim, but Rust code
        // holds `rte_mbuf` pointers in arrays: the layout must match C's.
        assert_eq!(std::mem::size_of::<rte_mbuf>(), 128);
        assert_eq!(std::mem::align_of::<rte_mbuf>(), 64);
    }

    #[test]
    fn flag_constants_are_single_bits() {
        for flag in [
            consts::RTE_ETH_RSS_IPV4,
            consts::RTE_ETH_RSS_NONFRAG_IPV4_TCP,
            consts::RTE_ETH_RSS_IPV6,
            consts::RTE_ETH_RSS_NONFRAG_IPV6_TCP,
            consts::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM,
            consts::RTE_ETH_TX_OFFLOAD_TCP_CKSUM,
            consts::RTE_MBUF_F_TX_TCP_CKSUM,
        ] {
            assert_eq!(flag.count_ones(), 1, "{flag:#x}");
        }
        assert!(consts::RTE_MBUF_DEFAULT_BUF_SIZE >= 2048 + consts::RTE_PKTMBUF_HEADROOM);
    }

    #[test]
    fn version_is_reported() {
        assert!(DPDK_VERSION.split('.').count() >= 2, "{DPDK_VERSION}");
    }
}
