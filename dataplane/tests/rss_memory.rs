//! Two engines on a port whose NIC spreads flows by RSS, over the
//! in-memory link: each engine polls a queue of its own (an in-memory port
//! each, told how the NIC's RSS spreads flows), and the test delivers
//! every frame to the queue a NIC would: a TCP segment to its flow's
//! queue, anything else (an ICMP error among them) by its addresses alone.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;

use common::host::{HostConn, Seg, DUT_IP, DUT_MAC, HOST_IP, HOST_MAC};
use dataplane::dpdk::SYMMETRIC_RSS_KEY;
use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::toeplitz::Toeplitz;
use dataplane::net::InterfaceConfig;
use dataplane::port::{link, MemBuf, MemPort, PacketBuf, Port, RssSteering};
use dataplane::stats::{DropReason, SharedCounters};
use dataplane::steer::{PortShare, SteerLink};
use dataplane::time::Instant;
use smoltcp::wire::{
    ArpOperation, EthernetAddress, Icmpv4Packet, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl,
};

/// A router on the link (the ICMP errors' source).
const ROUTER: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 254);

fn rss(queue: u16) -> RssSteering {
    RssSteering {
        key: &SYMMETRIC_RSS_KEY,
        queues: 2,
        reta_size: 2,
        queue,
    }
}

struct Pair {
    engines: [Engine<MemPort>; 2],
    /// The host's end of each engine's queue.
    hosts: [MemPort; 2],
    now: Instant,
}

fn pair() -> Pair {
    let links = SteerLink::<MemBuf>::new_set(2, &SYMMETRIC_RSS_KEY);
    let (mut dut0, host0) = link(DUT_MAC, HOST_MAC, 256, 1024);
    let (mut dut1, host1) = link(DUT_MAC, HOST_MAC, 256, 1024);
    dut0.set_rss(rss(0));
    dut1.set_rss(rss(1));
    let engines = [(dut0, 0usize), (dut1, 1)].map(|(port, i)| {
        let mut e = Engine::new(EngineConfig::default(), Arc::new(SharedCounters::default()));
        e.add_port(
            port,
            InterfaceConfig {
                mac: DUT_MAC,
                addr: DUT_IP,
                prefix_len: 24,
                gateway: None,
            },
        );
        e.set_steering(links[i].clone(), &[PortShare::OWN]);
        e.listen(DUT_IP, 80);
        e
    });
    Pair {
        engines,
        hosts: [host0, host1],
        now: Instant::from_millis(1),
    }
}

impl Pair {
    /// Sends `frames` on queue `queue`, runs both engines until neither
    /// has work, and returns what left each queue.
    fn exchange(&mut self, queue: usize, frames: Vec<Vec<u8>>) -> [Vec<Vec<u8>>; 2] {
        let host = &mut self.hosts[queue];
        let mut batch: Vec<MemBuf> = frames
            .into_iter()
            .map(|f| {
                let mut b = host.alloc().expect("host buffers");
                b.set_len(f.len());
                b.data_mut().copy_from_slice(&f);
                b
            })
            .collect();
        host.tx_burst(self.now, &mut batch);
        self.now = self.now + std::time::Duration::from_micros(10);
        for _ in 0..4 {
            let [a, b] = &mut self.engines;
            while a.poll(self.now) + b.poll(self.now) > 0 {}
        }
        let now = self.now;
        self.hosts.each_mut().map(|h| {
            let mut got = Vec::new();
            h.rx_burst(now, &mut got, 1024);
            got.iter().map(|b| b.data().to_vec()).collect()
        })
    }
}

/// An ICMP "fragmentation needed" from `ROUTER` quoting the start of
/// `quoted` (one of the engine's frames), for a next-hop MTU of `mtu`.
fn frag_needed(quoted: &[u8], mtu: u16) -> Vec<u8> {
    let packet = &quoted[14..];
    let mut icmp = vec![3, 4, 0, 0, 0, 0];
    icmp.extend_from_slice(&mtu.to_be_bytes());
    icmp.extend_from_slice(&packet[..20 + 8]);
    Icmpv4Packet::new_unchecked(&mut icmp[..]).fill_checksum();
    let ip = Ipv4Repr {
        src_addr: ROUTER,
        dst_addr: DUT_IP,
        next_header: IpProtocol::Icmp,
        payload_len: icmp.len(),
        hop_limit: 64,
    };
    let mut f = common::ipv4_frame(HOST_MAC, DUT_MAC, &ip, |p| p.copy_from_slice(&icmp));
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    f
}

/// A router's "fragmentation needed" for a segment of a flow that engine
/// 1 serves lands on queue 0 (the NIC hashes ICMP on its addresses): it
/// is handed to engine 1, which lowers the flow's path MTU. Before, engine
/// 0 took it, found no such connection (counted `no_connection`), and the
/// sender's segments stayed too large for the path.
#[test]
fn an_icmp_error_on_another_engines_queue_reaches_the_engine_of_its_flow() {
    let mut p = pair();
    // Both engines know the host (engine 0 answers, engine 1 learns from
    // its copy).
    let arp = common::arp_frame(
        ArpOperation::Request,
        HOST_MAC,
        HOST_IP,
        EthernetAddress::BROADCAST,
        DUT_IP,
    );
    p.exchange(0, vec![arp]);
    // A client port whose flow the NIC puts on queue 1.
    let t = Toeplitz::new(&SYMMETRIC_RSS_KEY);
    let port = (40_000..41_000u16)
        .find(|&sp| rss(0).queue_of(t.tcp4(HOST_IP, DUT_IP, sp, 80)) == 1)
        .expect("a port on queue 1");
    let mut client = HostConn::client(port, 80, 1_000);
    let syn = client.next(TcpControl::Syn, b"");
    let [_, out] = p.exchange(1, vec![syn.frame()]);
    client.absorb(&out.iter().filter_map(|f| Seg::parse(f)).collect::<Vec<_>>());
    let get = client.next(TcpControl::Psh, b"GET /bytes/30000 HTTP/1.0\r\n\r\n");
    let [_, out] = p.exchange(1, vec![get.frame()]);
    let data = out
        .iter()
        .find(|f| f.len() == 1514)
        .expect("a full-size segment in flight")
        .clone();
    // The error comes on queue 0.
    p.exchange(0, vec![frag_needed(&data, 1000)]);
    assert_eq!(
        p.engines[1].tcp().counters().path_mtu_lowered,
        1,
        "engine 1 lowered the path MTU"
    );
    assert_eq!(p.engines[0].counters().dropped(DropReason::NoConnection), 0);
    assert_eq!(p.engines[0].counters().frames_steered, 1);
}
