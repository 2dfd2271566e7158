//! Deterministic simulation: smoltcp's TCP socket (an independent TCP
//! implementation) downloads from our engine's built-in responder over the
//! in-memory link, with the seeded impairment wrapper on both directions.
//! Simulated time, so megabytes move in milliseconds of wall time and every
//! run with the same seed is the same run.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use dataplane::app::responder::fill_pattern;
use dataplane::engine::{Engine, EngineConfig};
use dataplane::net::InterfaceConfig;
use dataplane::port::{
    link, link_with_segmentation, ImpairConfig, Impaired, MemBuf, MemPort, PacketBuf, Port,
};
use dataplane::stats::SharedCounters;
use dataplane::time::Instant;
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

const DUT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const CLI_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const DUT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLI_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

struct SimDevice {
    port: Impaired<MemPort>,
    now: Instant,
    rx: Vec<MemBuf>,
    /// The longest frame received.
    largest_rx: usize,
    /// The link's NIC checks received checksums (and fills the engine's).
    nic_checksums: bool,
}

struct Rx(MemBuf);
struct Tx<'a>(&'a mut Impaired<MemPort>, Instant);

impl smoltcp::phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.0.data())
    }
}

impl smoltcp::phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut b = self.0.alloc().expect("simulation buffers");
        b.set_len(len);
        let r = f(b.data_mut());
        let mut batch = vec![b];
        self.0.tx_burst(self.1, &mut batch);
        r
    }
}

impl Device for SimDevice {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _t: smoltcp::time::Instant) -> Option<(Rx, Tx<'_>)> {
        if self.rx.is_empty() {
            self.port.rx_burst(self.now, &mut self.rx, 64);
            self.rx.reverse();
        }
        let b = self.rx.pop()?;
        self.largest_rx = self.largest_rx.max(b.data().len());
        Some((Rx(b), Tx(&mut self.port, self.now)))
    }

    fn transmit(&mut self, _t: smoltcp::time::Instant) -> Option<Tx<'_>> {
        Some(Tx(&mut self.port, self.now))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        if self.nic_checksums {
            // What the engine left to the NIC arrives judged, not filled.
            caps.checksum.ipv4 = smoltcp::phy::Checksum::Tx;
            caps.checksum.tcp = smoltcp::phy::Checksum::Tx;
        }
        caps
    }
}

struct Outcome {
    received: u64,
    sim_time: Duration,
    tcp: dataplane::tcp::TcpCounters,
    /// The longest frame the client received.
    largest_rx: usize,
}

/// The link between engine and client.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Plain,
    /// Checksum and TCP segmentation offload.
    Segmentation,
}

/// Downloads `size` bytes through links impaired by `cfg` (each direction
/// its own seed) and checks every byte.
fn download(size: u64, cfg: ImpairConfig) -> Outcome {
    download_with(size, cfg, EngineConfig::default(), Link::Plain)
}

fn download_with(size: u64, cfg: ImpairConfig, engine_cfg: EngineConfig, kind: Link) -> Outcome {
    let (dut_port, cli_port) = match kind {
        Link::Plain => link(DUT_MAC, CLI_MAC, 4096, 16384),
        Link::Segmentation => link_with_segmentation(DUT_MAC, CLI_MAC, 4096, 16384),
    };
    let mut engine = Engine::new(engine_cfg, Arc::new(SharedCounters::default()));
    engine.add_port(
        Impaired::new(
            dut_port,
            ImpairConfig {
                seed: cfg.seed ^ 0xdead,
                ..cfg
            },
        ),
        InterfaceConfig {
            mac: DUT_MAC,
            addr: DUT_IP,
            prefix_len: 24,
            gateway: None,
        },
    );
    engine.listen(DUT_IP, 80);

    let mut dev = SimDevice {
        port: Impaired::new(cli_port, cfg),
        now: Instant::ZERO,
        rx: Vec::new(),
        largest_rx: 0,
        nic_checksums: kind == Link::Segmentation,
    };
    let mut iface_cfg = Config::new(HardwareAddress::Ethernet(CLI_MAC));
    iface_cfg.random_seed = cfg.seed;
    let mut iface = Interface::new(iface_cfg, &mut dev, smoltcp::time::Instant::ZERO);
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(IpAddress::Ipv4(CLI_IP), 24)).unwrap();
    });
    let mut sockets = SocketSet::new(vec![]);
    let sock = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 1 << 20]),
        tcp::SocketBuffer::new(vec![0; 4096]),
    );
    let handle = sockets.add(sock);
    sockets
        .get_mut::<tcp::Socket<'_>>(handle)
        .connect(iface.context(), (IpAddress::Ipv4(DUT_IP), 80), 49152)
        .unwrap();

    let request = format!("GET /bytes/{size} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n");
    let mut sent = false;
    let mut head: Vec<u8> = Vec::new();
    let mut body_pos = 0u64;
    let mut want = vec![0u8; 64 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    let step = Duration::from_micros(50);
    let mut now = Instant::ZERO;
    let limit = Instant::ZERO + Duration::from_secs(600);
    loop {
        now = now + step;
        assert!(
            now < limit,
            "download stalled at {body_pos} of {size} bytes"
        );
        dev.now = now;
        iface.poll(
            smoltcp::time::Instant::from_micros(now.as_nanos() as i64 / 1000),
            &mut dev,
            &mut sockets,
        );
        engine.poll(now);
        let s = sockets.get_mut::<tcp::Socket<'_>>(handle);
        if !sent && s.may_send() {
            assert_eq!(s.send_slice(request.as_bytes()).unwrap(), request.len());
            sent = true;
        }
        while s.can_recv() {
            let n = s.recv_slice(&mut buf).unwrap();
            let mut data = &buf[..n];
            if !head.ends_with(b"\r\n\r\n") {
                while !data.is_empty() && !head.ends_with(b"\r\n\r\n") {
                    head.push(data[0]);
                    data = &data[1..];
                }
                if head.ends_with(b"\r\n\r\n") {
                    let text = String::from_utf8_lossy(&head);
                    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
                    assert!(
                        text.contains(&format!("Content-Length: {size}\r\n")),
                        "{text}"
                    );
                }
            }
            fill_pattern(&mut want[..data.len()], body_pos);
            assert!(data == &want[..data.len()], "body differs at {body_pos}");
            body_pos += data.len() as u64;
        }
        if sent && !s.may_recv() && s.state() == tcp::State::CloseWait {
            s.close();
        }
        if body_pos == size
            && matches!(
                s.state(),
                tcp::State::Closed | tcp::State::TimeWait | tcp::State::LastAck
            )
        {
            break;
        }
    }
    assert_eq!(body_pos, size);
    Outcome {
        received: body_pos,
        sim_time: now - Instant::ZERO,
        tcp: engine.tcp().counters(),
        largest_rx: dev.largest_rx,
    }
}

#[test]
fn clean_link_moves_tens_of_megabytes_exactly() {
    let o = download(32_000_000, ImpairConfig::default());
    assert_eq!(o.received, 32_000_000);
    assert_eq!(o.tcp.retransmits, 0, "no loss, no retransmission");
}

/// TCP segmentation offload: the engine hands the port segments of
/// many MSS, the link cuts them as a NIC does, and every byte arrives
/// in frames no longer than the MTU's, on a clean link and through
/// loss, reordering and duplication in both directions.
#[test]
fn segmentation_offload_moves_bytes_exactly_through_loss() {
    let clean = download_with(
        16_000_000,
        ImpairConfig::default(),
        EngineConfig::default(),
        Link::Segmentation,
    );
    assert_eq!(clean.tcp.retransmits, 0);
    // Each large segment is at least two MSS, so the engine handed the
    // port fewer segments than the wire carried.
    assert!(clean.tcp.offload_segments > 100, "{:?}", clean.tcp);
    assert!(
        clean.tcp.segments_out < 16_000_000 / 1448,
        "{:?}",
        clean.tcp
    );
    assert!(
        clean.largest_rx <= 1514,
        "a frame of {} bytes",
        clean.largest_rx
    );
    let lossy = ImpairConfig {
        seed: 7,
        loss: 0.02,
        reorder: 0.02,
        duplicate: 0.01,
        delay: Duration::from_micros(500),
        jitter: Duration::from_micros(100),
        ..ImpairConfig::default()
    };
    let o = download_with(
        4_000_000,
        lossy,
        EngineConfig::default(),
        Link::Segmentation,
    );
    assert!(
        o.tcp.retransmits > 0 && o.tcp.offload_segments > 0,
        "{:?}",
        o.tcp
    );
    assert!(o.largest_rx <= 1514, "a frame of {} bytes", o.largest_rx);
    // Without the offload, not one segment is handed over to cut.
    let plain = download(1_000_000, ImpairConfig::default());
    assert_eq!(plain.tcp.offload_segments, 0);
    assert!(plain.largest_rx <= 1514);
}

#[test]
fn loss_reordering_duplication_and_delay() {
    for (loss, reorder, dup) in [(0.01, 0.0, 0.0), (0.05, 0.02, 0.01)] {
        let cfg = ImpairConfig {
            seed: 42,
            loss,
            reorder,
            duplicate: dup,
            delay: Duration::from_micros(500),
            jitter: Duration::from_micros(100),
            ..ImpairConfig::default()
        };
        let o = download(if loss < 0.02 { 12_000_000 } else { 4_000_000 }, cfg);
        eprintln!(
            "loss {:.0} %: {} bytes in {:?} simulated ({:.1} Mbit/s), {} retransmissions",
            loss * 100.0,
            o.received,
            o.sim_time,
            o.received as f64 * 8.0 / o.sim_time.as_secs_f64() / 1e6,
            o.tcp.retransmits
        );
        assert!(o.tcp.retransmits > 0);
    }
}

#[test]
fn syn_cookies_carry_the_handshake() {
    let mut engine_cfg = EngineConfig::default();
    engine_cfg.tcp.syn_cookies = dataplane::tcp::SynCookies::Always;
    let o = download_with(1_000_000, ImpairConfig::default(), engine_cfg, Link::Plain);
    assert_eq!(o.received, 1_000_000);
    assert_eq!(
        (o.tcp.syn_cookies_sent, o.tcp.syn_cookies_accepted),
        (1, 1),
        "{:?}",
        o.tcp
    );
    assert_eq!(o.tcp.half_open, 0);
}
