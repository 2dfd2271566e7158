//! tlsdp's tap with virtio-net headers (`dataplane::dpdk::VnetTap`) against
//! the real kernel, in a namespace of its own: frames the kernel sends are
//! read whole, a frame we write reaches the kernel's stack, and a frame
//! the kernel refuses is counted and leaves the tap working; a frame too
//! long for its mbuf is dropped and counted, never passed on cut, and a
//! frame read while no ordinary mbuf is free is kept in the large one.
//! (The port carrying TLS and TSO end to end is in `offload.rs`.)

use std::process::Command;
use std::sync::Once;
use std::time::{Duration, Instant};

use dataplane::dpdk::{Eal, Mempool, VnetTap, VnetTapConfig};
use dataplane::port::Port;
use e2e::{require_root, run};

/// A namespace with a persistent tap (`scripts/lab.sh tap on` does the
/// same in the lab); removed on drop.
struct TapNs(String);

impl TapNs {
    /// `tag`: one letter per test (they run at once, in one process).
    fn new(tag: char) -> Self {
        require_root();
        let ns = format!("vtt{tag}{}", std::process::id() % 100_000);
        let _ = run(Command::new("ip").args(["netns", "del", &ns]));
        for args in [
            vec!["netns", "add", &ns],
            vec![
                "-n", &ns, "tuntap", "add", "dev", "vtap0", "mode", "tap", "vnet_hdr",
            ],
            vec!["-n", &ns, "addr", "add", "192.168.201.2/24", "dev", "vtap0"],
            vec!["-n", &ns, "link", "set", "vtap0", "up"],
        ] {
            let o = run(Command::new("ip").args(&args));
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        TapNs(ns)
    }
}

impl Drop for TapNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// DPDK's EAL, up once for the process (both tests use it).
fn eal() {
    static UP: Once = Once::new();
    UP.call_once(|| {
        let args: Vec<String> = [
            "-l",
            "0",
            "--no-pci",
            "--no-huge",
            "-m",
            "256",
            "--no-shconf",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Kept up until the process ends.
        std::mem::forget(Eal::init(&args).expect("EAL"));
    });
}

#[test]
fn vnet_tap_moves_frames_to_and_from_the_kernel() {
    let ns = TapNs::new('a');
    eal();
    let pool = Mempool::create("vtt", 1023, 0, 2176, -1).expect("mempool");
    let mut tap = VnetTap::open(&VnetTapConfig {
        iface: "vtap0".into(),
        netns: Some(ns.0.clone()),
        checksum_offload: true,
        segmentation: true,
        mempool: pool,
        large: None,
    })
    .expect("attach to the tap");
    assert_eq!(tap.segmentation(), None, "no large mbufs: no TSO");
    let now = dataplane::time::Instant::ZERO;

    // Kernel → us: a ping to 192.168.201.1 makes the kernel ask for it.
    let mut ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.0,
            "ping",
            "-c",
            "3",
            "-i",
            "0.3",
            "-W",
            "1",
            "192.168.201.1",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("ping");
    let mut got = Vec::new();
    let t0 = Instant::now();
    let asked = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no ARP request read from the tap"
        );
        got.clear();
        Port::rx_burst(&mut tap, now, &mut got, 8);
        if let Some(f) = got.iter().find(|f| {
            let d = f.data();
            d.len() >= 42 && d[12..14] == [0x08, 0x06] && d[38..42] == [192, 168, 201, 1]
        }) {
            break f.data().to_vec();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let kernel_mac: [u8; 6] = asked[6..12].try_into().unwrap();
    assert_eq!(&asked[0..6], &[0xff; 6], "a broadcast request");

    // Us → kernel: the reply, and the kernel's neighbour table has us.
    let mine = tap.mac();
    let mut f = [0u8; 42];
    f[0..6].copy_from_slice(&kernel_mac);
    f[6..12].copy_from_slice(&mine);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..22].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 2]);
    f[22..28].copy_from_slice(&mine);
    f[28..32].copy_from_slice(&[192, 168, 201, 1]);
    f[32..38].copy_from_slice(&kernel_mac);
    f[38..42].copy_from_slice(&[192, 168, 201, 2]);
    let frame = |tap: &mut VnetTap, bytes: &[u8]| {
        let mut m = Port::alloc(tap).expect("mbuf");
        m.set_len(bytes.len());
        m.data_mut().copy_from_slice(bytes);
        m
    };
    let reply = frame(&mut tap, &f);
    assert_eq!(Port::tx_burst(&mut tap, now, &mut vec![reply]), 1);
    let want = mine
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let t0 = Instant::now();
    loop {
        let o = run(Command::new("ip").args(["-n", &ns.0, "neigh", "show", "192.168.201.1"]));
        if String::from_utf8_lossy(&o.stdout).contains(&want) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the kernel did not learn {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = ping.kill();
    let _ = ping.wait();

    // A frame shorter than an Ethernet header: refused by the kernel,
    // counted, and the tap goes on.
    assert_eq!(Port::errors(&tap), 0);
    let runt = frame(&mut tap, &f[..10]);
    assert_eq!(
        Port::tx_burst(&mut tap, now, &mut vec![runt]),
        1,
        "taken (dropped)"
    );
    assert_eq!(Port::errors(&tap), 1);
    let again = frame(&mut tap, &f);
    assert_eq!(Port::tx_burst(&mut tap, now, &mut vec![again]), 1);
    assert_eq!(Port::errors(&tap), 1);
}

#[test]
fn vnet_tap_drops_cut_frames_and_keeps_frames_when_ordinary_mbufs_run_out() {
    let ns = TapNs::new('b');
    eal();
    // Frames up to 9000 bytes from the kernel; our large mbufs hold 4096.
    let ip = |args: &[&str]| {
        let mut all = vec!["-n", &ns.0];
        all.extend_from_slice(args);
        let o = run(Command::new("ip").args(&all));
        assert!(
            o.status.success(),
            "ip {all:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ip(&["link", "set", "vtap0", "mtu", "9000"]);
    let small = Mempool::create("vttb-small", 15, 0, 2176, -1).expect("mempool");
    let large = Mempool::create("vttb-large", 15, 0, 4096 + 128, -1).expect("mempool");
    let mut tap = VnetTap::open(&VnetTapConfig {
        iface: "vtap0".into(),
        netns: Some(ns.0.clone()),
        checksum_offload: true,
        segmentation: true,
        mempool: small,
        large: Some(large),
    })
    .expect("attach to the tap");
    assert_eq!(tap.segmentation(), Some(4096));
    // The kernel knows our address: its pings come without ARP first.
    let mac = tap
        .mac()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    ip(&[
        "neigh",
        "replace",
        "192.168.201.1",
        "lladdr",
        &mac,
        "dev",
        "vtap0",
    ]);
    let now = dataplane::time::Instant::ZERO;
    // Reads until an ICMP echo request of `size` bytes of payload comes;
    // any other frame (the kernel's own IPv6 chatter) is let go.
    let ping_and_read = |tap: &mut VnetTap, size: usize, held: &mut Vec<_>| {
        let o = run(Command::new("ip").args([
            "netns",
            "exec",
            &ns.0,
            "ping",
            "-c",
            "1",
            "-W",
            "0.1",
            "-s",
            &size.to_string(),
            "192.168.201.1",
        ]));
        assert!(!o.status.success(), "nobody answers the ping");
        let mut got = Vec::new();
        let t0 = Instant::now();
        let errors_before = Port::errors(tap);
        while t0.elapsed() < Duration::from_secs(2) {
            got.clear();
            Port::rx_burst(tap, now, &mut got, 8);
            for f in got.drain(..) {
                let d = f.data();
                if d.len() == 14 + 20 + 8 + size && d[12..14] == [8, 0] && d[23] == 1 {
                    return Some(f);
                }
                held.push(f); // kept, so ordinary mbufs stay taken
            }
            if Port::errors(tap) > errors_before {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    };

    // A frame longer than any mbuf here: dropped and counted.
    let mut held = Vec::new();
    assert_eq!(Port::errors(&tap), 0);
    assert!(ping_and_read(&mut tap, 6000, &mut held).is_none());
    assert_eq!(tap.stats().rx_too_long, 1, "{:?}", tap.stats());
    assert_eq!(Port::errors(&tap), 1);
    held.clear();

    // Forty more queued (each ping's fragments too long here): one burst
    // of 8 reads 8 at most (dropped ones count), the rest wait for the
    // next. Before, a burst read on
    // until the queue was empty, however many it dropped.
    let o = run(Command::new("ip").args([
        "netns",
        "exec",
        &ns.0,
        "ping",
        "-c",
        "40",
        "-i",
        "0.002",
        "-w",
        "2",
        "-s",
        "6000",
        "192.168.201.1",
    ]));
    assert!(!o.status.success(), "nobody answers the pings");
    let before = tap.stats().rx_too_long;
    let mut got = Vec::new();
    Port::rx_burst(&mut tap, now, &mut got, 8);
    let one_burst = tap.stats().rx_too_long - before;
    assert!(one_burst <= 8, "{one_burst} read in one burst of 8");
    for _ in 0..100 {
        Port::rx_burst(&mut tap, now, &mut got, 8);
    }
    // Each ping's fragments are all too long here: far more than 8.
    assert!(tap.stats().rx_too_long - before >= 40, "{:?}", tap.stats());
    got.clear();

    // Every ordinary mbuf taken: a small frame stays in its large mbuf.
    let errors = Port::errors(&tap);
    while let Some(m) = Port::alloc(&mut tap) {
        held.push(m);
    }
    let echo = ping_and_read(&mut tap, 100, &mut held).expect("the echo request read");
    assert_eq!(echo.capacity(), 4096, "kept in the large mbuf");
    assert_eq!(Port::errors(&tap), errors);
}
