//! The PROXY protocol v2 header (haproxy.org's proxy-protocol.txt §2.2)
//! sent first on a backend connection, so the backend sees the client's
//! address and, for TLS VIPs, the TLS facts: an SSL TLV with the version
//! and cipher, and the SNI as the authority TLV.

use std::net::{IpAddr, SocketAddr};

const SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const PP2_TYPE_AUTHORITY: u8 = 0x02;
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
const PP2_CLIENT_SSL: u8 = 0x01;

/// What the backend is told about a TLS client.
#[derive(Debug, Clone, Copy)]
pub struct TlsFacts<'a> {
    pub version: &'a str,
    pub cipher: &'a str,
    pub sni: Option<&'a str>,
}

fn tlv(out: &mut Vec<u8>, typ: u8, value: &[u8]) {
    out.push(typ);
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value);
}

/// Appends the header for a TCP connection from `client` to `vip`:
/// `TCP4` when both are IPv4 addresses, else `TCP6` (§2.2: an IPv4
/// address beside an IPv6 one is written IPv4-mapped).
pub fn header_v2(
    client: SocketAddr,
    vip: SocketAddr,
    tls: Option<TlsFacts<'_>>,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    out.extend_from_slice(&SIGNATURE);
    out.push(0x21); // version 2, PROXY
    out.extend_from_slice(&[0, 0, 0]); // family, length: filled below
    match (client.ip(), vip.ip()) {
        (IpAddr::V4(c), IpAddr::V4(v)) => {
            out[start + 13] = 0x11; // AF_INET, STREAM
            out.extend_from_slice(&c.octets());
            out.extend_from_slice(&v.octets());
        }
        (c, v) => {
            out[start + 13] = 0x21; // AF_INET6, STREAM
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            out.extend_from_slice(&v6(c).octets());
            out.extend_from_slice(&v6(v).octets());
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&vip.port().to_be_bytes());
    if let Some(t) = tls {
        if let Some(sni) = t.sni {
            tlv(out, PP2_TYPE_AUTHORITY, sni.as_bytes());
        }
        let mut ssl = vec![PP2_CLIENT_SSL];
        // verify: non-zero, no client certificate was verified.
        ssl.extend_from_slice(&1u32.to_be_bytes());
        tlv(&mut ssl, PP2_SUBTYPE_SSL_VERSION, t.version.as_bytes());
        tlv(&mut ssl, PP2_SUBTYPE_SSL_CIPHER, t.cipher.as_bytes());
        tlv(out, PP2_TYPE_SSL, &ssl);
    }
    let len = (out.len() - start - 16) as u16;
    out[start + 14..start + 16].copy_from_slice(&len.to_be_bytes());
}

/// Appends a header with the LOCAL command (§2.2: `0x20`, family
/// `AF_UNSPEC`, no addresses), for connections of our own such as health
/// checks: a backend that requires the header takes the connection as
/// from its real endpoints.
pub fn local_v2(out: &mut Vec<u8>) {
    out.extend_from_slice(&SIGNATURE);
    out.extend_from_slice(&[0x20, 0x00, 0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

    #[test]
    fn a_local_header_is_the_signature_then_local_unspec_and_no_length() {
        let mut h = vec![7];
        local_v2(&mut h);
        assert_eq!(h[0], 7, "appended");
        assert_eq!(&h[1..13], &SIGNATURE);
        assert_eq!(&h[13..], &[0x20, 0x00, 0, 0]);
    }

    #[test]
    fn ipv6_connections_get_the_tcp6_layout() {
        let c: Ipv6Addr = "2001:db8::7".parse().unwrap();
        let v: Ipv6Addr = "2001:db8:77::1".parse().unwrap();
        let mut h = Vec::new();
        header_v2(
            SocketAddrV6::new(c, 40_000, 0, 0).into(),
            SocketAddrV6::new(v, 443, 0, 0).into(),
            None,
            &mut h,
        );
        // §2.2: 0x21 = AF_INET6 + STREAM, then 36 bytes of addresses and ports.
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
        assert_eq!(&h[16..32], &c.octets());
        assert_eq!(&h[32..48], &v.octets());
        assert_eq!(&h[48..52], &[0x9c, 0x40, 0x01, 0xbb]);
        assert_eq!(h.len(), 52);
        // An IPv4 client beside an IPv6 VIP is written IPv4-mapped.
        let mut h = Vec::new();
        header_v2(
            SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 1).into(),
            SocketAddrV6::new(v, 443, 0, 0).into(),
            None,
            &mut h,
        );
        assert_eq!(h[13], 0x21);
        assert_eq!(
            &h[16..32],
            &Ipv4Addr::new(192, 0, 2, 7).to_ipv6_mapped().octets()
        );
    }

    #[test]
    fn layout_matches_the_spec() {
        let c = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 40_000);
        let v = SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 1), 443);
        let mut h = Vec::new();
        header_v2(c.into(), v.into(), None, &mut h);
        assert_eq!(h.len(), 28);
        assert_eq!(
            &h[..12],
            b"\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a"
        );
        assert_eq!(&h[12..16], &[0x21, 0x11, 0, 12]);
        assert_eq!(&h[16..20], &[192, 0, 2, 7]);
        assert_eq!(&h[20..24], &[10, 77, 0, 1]);
        assert_eq!(&h[24..28], &[0x9c, 0x40, 0x01, 0xbb]);

        let mut h = Vec::new();
        let facts = TlsFacts {
            version: "TLSv1.3",
            cipher: "TLS13_AES_128_GCM_SHA256",
            sni: Some("www.test"),
        };
        header_v2(c.into(), v.into(), Some(facts), &mut h);
        let len = usize::from(u16::from_be_bytes([h[14], h[15]]));
        assert_eq!(h.len(), 16 + len);
        // Authority TLV, then the SSL TLV with its two sub-TLVs.
        let tlvs = &h[28..];
        assert_eq!(&tlvs[..3], &[0x02, 0, 8]);
        assert_eq!(&tlvs[3..11], b"www.test");
        let ssl = &tlvs[11..];
        assert_eq!(ssl[0], 0x20);
        let ssl_len = usize::from(u16::from_be_bytes([ssl[1], ssl[2]]));
        assert_eq!(ssl.len(), 3 + ssl_len);
        assert_eq!(ssl[3], 0x01, "client used SSL");
        assert_eq!(&ssl[8..11], &[0x21, 0, 7]);
        assert_eq!(&ssl[11..18], b"TLSv1.3");
        assert_eq!(&ssl[18..21], &[0x23, 0, 24]);
        assert_eq!(&ssl[21..], b"TLS13_AES_128_GCM_SHA256");
    }
}
