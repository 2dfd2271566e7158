//! tlsdp's tap with virtio-net headers (`dataplane::dpdk::VnetTap`) against
//! the real kernel, in a namespace of its own: frames the kernel sends are
//! read whole, a frame we write reaches the kernel's stack, and a frame
//! the kernel refuses is counted and leaves the tap working. (The port
//! carrying TLS and TSO end to end is in `offload.rs`.)

use std::process::Command;
use std::time::{Duration, Instant};

use dataplane::dpdk::{Eal, Mempool, VnetTap, VnetTapConfig};
use dataplane::port::Port;
use e2e::{require_root, run};

/// A namespace with a persistent tap (`scripts/lab.sh tap on` does the
/// same in the lab); removed on drop.
struct TapNs(String);

impl TapNs {
    fn new() -> Self {
        require_root();
        let ns = format!("vtt{}", std::process::id() % 100_000);
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

#[test]
fn vnet_tap_moves_frames_to_and_from_the_kernel() {
    let ns = TapNs::new();
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
    let _eal = Eal::init(&args).expect("EAL");
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
