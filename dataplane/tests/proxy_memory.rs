//! The proxy over the in-memory link, with a hand-driven peer: the test
//! plays both the client and the backend (one host, two roles) segment by
//! segment, so the order frames reach the engine in one burst is chosen,
//! not left to timing.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use dataplane::app::health::{HealthCheck, HealthKind};
use dataplane::app::pool::{Balance, Member, MemberState, Pool};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, IpAddress,
    IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

const DUT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const VIP_PORT: u16 = 8080;
const BACKEND_PORT: u16 = 8081;
const CLIENT_PORT: u16 = 40000;

/// A TCP segment as the host sees it.
#[derive(Debug, Clone)]
struct Seg {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: Option<u32>,
    control: TcpControl,
    payload: Vec<u8>,
}

impl Seg {
    fn to(dst_port: u16, src_port: u16, seq: u32, ack: Option<u32>) -> Self {
        Self {
            src_port,
            dst_port,
            seq,
            ack,
            control: TcpControl::None,
            payload: Vec::new(),
        }
    }

    fn with(mut self, control: TcpControl, payload: &[u8]) -> Self {
        self.control = control;
        self.payload = payload.to_vec();
        self
    }

    /// The sequence number after this segment.
    fn end(&self) -> u32 {
        let flags = u32::from(matches!(self.control, TcpControl::Syn | TcpControl::Fin));
        self.seq
            .wrapping_add(self.payload.len() as u32)
            .wrapping_add(flags)
    }

    /// The host's frame carrying it to the engine.
    fn frame(&self) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            control: self.control,
            seq_number: TcpSeqNumber(self.seq as i32),
            ack_number: self.ack.map(|a| TcpSeqNumber(a as i32)),
            window_len: 65535,
            window_scale: None,
            max_seg_size: (self.control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &self.payload,
        };
        let ip = Ipv4Repr {
            src_addr: HOST_IP,
            dst_addr: DUT_IP,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |payload| {
            tcp.emit(
                &mut TcpPacket::new_unchecked(payload),
                &IpAddress::Ipv4(HOST_IP),
                &IpAddress::Ipv4(DUT_IP),
                &ChecksumCapabilities::default(),
            );
        })
    }

    /// The segment an engine frame carries, if it is TCP.
    fn parse(frame: &[u8]) -> Option<Self> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != EthernetProtocol::Ipv4 {
            return None;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        if ip.next_header() != IpProtocol::Tcp {
            return None;
        }
        let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
        let repr = TcpRepr::parse(
            &tcp,
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr()),
            &ChecksumCapabilities::ignored(),
        )
        .ok()?;
        Some(Self {
            src_port: repr.src_port,
            dst_port: repr.dst_port,
            seq: repr.seq_number.0 as u32,
            ack: repr.ack_number.map(|a| a.0 as u32),
            control: repr.control,
            payload: repr.payload.to_vec(),
        })
    }
}

/// The engine with a proxied VIP on one end of the link; the test's host
/// on the other answers ARP by itself and hands over the TCP segments.
struct Lab {
    mem: common::MemLab,
}

impl Lab {
    fn new() -> Self {
        let mut mem = common::MemLab::new(DUT_MAC, HOST_MAC, DUT_IP, None);
        let member = Member::new(SocketAddrV4::new(HOST_IP, BACKEND_PORT), 1, MemberState::Up);
        let mut pool = Pool::new("web".into(), Balance::RoundRobin, vec![member]);
        pool.check = Some(HealthCheck {
            kind: HealthKind::Http,
            request: b"GET / HTTP/1.0\r\n\r\n".to_vec(),
            expect: 200,
            // Long enough that no second check starts during the test.
            interval: Duration::from_secs(60),
            timeout: Duration::from_secs(30),
            rise: 1,
            fall: 1,
        });
        let p = mem.engine.add_pool(pool);
        mem.engine.listen_pool(DUT_IP, VIP_PORT, None, p);
        Self { mem }
    }

    /// Sends `segs` in one burst, runs the engine until it is idle, and
    /// returns the TCP segments it sent (ARP requests answered here).
    fn exchange(&mut self, segs: &[Seg]) -> Vec<Seg> {
        let mut frames: Vec<Vec<u8>> = segs.iter().map(Seg::frame).collect();
        let mut out = Vec::new();
        for _ in 0..4 {
            let sent = self.mem.exchange(std::mem::take(&mut frames));
            for f in &sent {
                match arp_reply_to(f) {
                    Some(reply) => frames.push(reply),
                    None => out.extend(Seg::parse(f)),
                }
            }
            if frames.is_empty() {
                break;
            }
        }
        out
    }

    /// Advances time a millisecond at a time until the engine sends a SYN.
    fn wait_for_syn(&mut self) -> Seg {
        for _ in 0..1000 {
            self.mem.now = self.mem.now + Duration::from_millis(1);
            if let Some(s) = self
                .exchange(&[])
                .into_iter()
                .find(|s| s.control == TcpControl::Syn)
            {
                return s;
            }
        }
        panic!("the engine opened no connection");
    }
}

/// The host's reply to an ARP request for its address.
fn arp_reply_to(frame: &[u8]) -> Option<Vec<u8>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr,
        source_protocol_addr,
        target_protocol_addr,
        ..
    } = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?
    else {
        return None;
    };
    if target_protocol_addr != HOST_IP {
        return None;
    }
    Some(common::arp_frame(
        ArpOperation::Reply,
        HOST_MAC,
        HOST_IP,
        source_hardware_addr,
        source_protocol_addr,
    ))
}

/// A health check's connection ends (its answer read, then reset) in the
/// same burst as a client's handshake completes: the client's backend
/// connection takes the freed slot. The health check's FIN, later in that
/// burst, belongs to the connection that is gone; the new backend
/// connection must not take it as its own (it would end the client's
/// connection before the backend answered: an empty reply).
#[test]
fn events_of_a_closed_connection_do_not_reach_the_next_in_its_slot() {
    let mut lab = Lab::new();
    const BACKEND_ISS: u32 = 7_000;

    // The health check connects and asks.
    let check_syn = lab.wait_for_syn();
    assert_eq!(check_syn.dst_port, BACKEND_PORT);
    let check_port = check_syn.src_port;
    let synack = Seg::to(check_port, BACKEND_PORT, BACKEND_ISS, Some(check_syn.end()))
        .with(TcpControl::Syn, b"");
    let sent = lab.exchange(&[synack]);
    let request_end = sent
        .iter()
        .filter(|s| s.src_port == check_port)
        .map(Seg::end)
        .max()
        .expect("the check's ACK and request");
    assert!(
        sent.iter()
            .any(|s| s.payload.starts_with(b"GET / HTTP/1.0")),
        "{sent:?}"
    );

    // A client's SYN, answered; its ACK waits for the burst below.
    let client_syn = Seg::to(VIP_PORT, CLIENT_PORT, 1_000, None).with(TcpControl::Syn, b"");
    let client_synack = lab
        .exchange(std::slice::from_ref(&client_syn))
        .into_iter()
        .find(|s| s.dst_port == CLIENT_PORT && s.control == TcpControl::Syn)
        .expect("SYN-ACK");

    // One burst: the check's answer, the client's ACK (accepted: its
    // backend connection opens), the check's FIN.
    let answer = b"HTTP/1.0 200 OK\r\n\r\n";
    let check_answer = Seg::to(check_port, BACKEND_PORT, BACKEND_ISS + 1, Some(request_end))
        .with(TcpControl::Psh, answer);
    let client_ack = Seg::to(
        VIP_PORT,
        CLIENT_PORT,
        client_syn.end(),
        Some(client_synack.end()),
    );
    let check_fin = Seg::to(
        check_port,
        BACKEND_PORT,
        check_answer.end(),
        Some(request_end),
    )
    .with(TcpControl::Fin, b"");
    let sent = lab.exchange(&[check_answer, client_ack, check_fin]);
    let backend_syn = sent
        .iter()
        .find(|s| s.dst_port == BACKEND_PORT && s.control == TcpControl::Syn)
        .expect("the client's backend connection opens")
        .clone();
    let backend_port = backend_syn.src_port;
    assert_ne!(backend_port, check_port);

    // The backend accepts; the client asks; the backend answers and closes.
    let mut to_client = Vec::new();
    let synack = Seg::to(
        backend_port,
        BACKEND_PORT,
        BACKEND_ISS,
        Some(backend_syn.end()),
    )
    .with(TcpControl::Syn, b"");
    to_client.extend(lab.exchange(&[synack]));
    let request = b"GET / HTTP/1.0\r\n\r\n";
    let client_request = Seg::to(
        VIP_PORT,
        CLIENT_PORT,
        client_syn.end(),
        Some(client_synack.end()),
    )
    .with(TcpControl::Psh, request);
    let sent = lab.exchange(&[client_request]);
    let forwarded: Vec<u8> = sent
        .iter()
        .filter(|s| s.src_port == backend_port)
        .flat_map(|s| s.payload.clone())
        .collect();
    assert_eq!(forwarded, request, "the request reaches the backend");
    to_client.extend(sent);
    let reply = b"HTTP/1.0 200 OK\r\n\r\nhello from the backend";
    let backend_reply = Seg::to(
        backend_port,
        BACKEND_PORT,
        BACKEND_ISS + 1,
        Some(backend_syn.end() + request.len() as u32),
    )
    .with(TcpControl::Fin, reply);
    to_client.extend(lab.exchange(&[backend_reply]));

    let to_client: Vec<&Seg> = to_client
        .iter()
        .filter(|s| s.dst_port == CLIENT_PORT)
        .collect();
    let mut received = Vec::new();
    let mut fin_after = None;
    for s in &to_client {
        received.extend_from_slice(&s.payload);
        if s.control == TcpControl::Fin && fin_after.is_none() {
            fin_after = Some(received.len());
        }
    }
    assert_eq!(
        String::from_utf8_lossy(&received),
        String::from_utf8_lossy(reply),
        "the client gets the backend's reply: {to_client:?}"
    );
    assert_eq!(fin_after, Some(reply.len()), "FIN after the reply");
    assert_eq!(lab.mem.engine.counters().proxy_backend_connects, 1);
}
