//! The safe DPDK layer against real DPDK, on the `net_ring` virtual device
//! (a loopback: what queue 0 transmits, queue 0 receives) without hugepages
//! or PCI. One EAL per process, shared by the tests in this file.

use std::sync::{Mutex, OnceLock};

use dataplane::dpdk::{self, register_thread, Eal, EthPort, EthPortConfig, Mbuf, Mempool, QueueId};

struct Dpdk {
    _eal: Eal,
    pool: Mempool,
    port: EthPort,
}

const POOL_SIZE: u32 = 4095;

/// EAL, a pool without per-lcore cache (so `available()` is exact) and the
/// ring port. Tests take the lock: the port's queue is single-threaded.
fn dpdk() -> &'static Mutex<Dpdk> {
    static DPDK: OnceLock<Mutex<Dpdk>> = OnceLock::new();
    DPDK.get_or_init(|| {
        let args: Vec<String> = [
            "-l",
            "0",
            "--no-pci",
            "--no-huge",
            "-m",
            "256",
            "--no-shconf",
            "--vdev=net_ring0",
            "--log-level=lib.eal:warning",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let eal = Eal::init(&args).expect("EAL init on net_ring");
        let pool = Mempool::create("test-pool", POOL_SIZE, 0, 2176, -1).expect("mempool");
        let id = dpdk::port_id_by_name("net_ring0").expect("net_ring0 probed");
        let port = EthPort::start(
            id,
            EthPortConfig {
                queues: 1,
                rx_desc: 1024,
                tx_desc: 1024,
                mempool: pool,
                checksum_offload: true,
                segmentation: None,
                mtu: 1500,
                start_later: false,
            },
        )
        .expect("port start");
        Mutex::new(Dpdk {
            _eal: eal,
            pool,
            port,
        })
    })
}

fn frame(pool: &Mempool, tag: u32) -> Mbuf {
    let mut m = pool.alloc().expect("pool has mbufs");
    m.set_len(64);
    m.data_mut().fill(0);
    m.data_mut()[..4].copy_from_slice(&tag.to_be_bytes());
    m
}

#[test]
fn tx_burst_never_leaks_unsent_mbufs() {
    let d = dpdk().lock().unwrap();
    let pool = d.pool;
    let mut q = d.port.queue(QueueId(0));
    assert_eq!(pool.available(), POOL_SIZE);

    // Fill the ring until a burst is only partly taken.
    let mut in_ring = 0usize;
    let mut tag = 0u32;
    let mut batch: Vec<Mbuf> = Vec::with_capacity(64);
    loop {
        while batch.len() < 64 {
            batch.push(frame(&pool, tag));
            tag += 1;
        }
        let before = batch.len();
        let sent = q.tx_burst(&mut batch);
        in_ring += sent;
        assert_eq!(
            batch.len(),
            before - sent,
            "sent mbufs leave the batch, unsent stay"
        );
        if !batch.is_empty() {
            break;
        }
        assert!(in_ring < POOL_SIZE as usize, "ring never filled");
    }
    let unsent = batch.len();
    assert!(unsent > 0);
    // Every mbuf is accounted for: in the ring, in our batch, or in the pool.
    assert_eq!(
        pool.available() as usize,
        POOL_SIZE as usize - in_ring - unsent
    );
    // The unsent ones are the tail, in order, and still ours to read.
    let first_unsent = u32::from_be_bytes(batch[0].data()[..4].try_into().unwrap());
    assert_eq!(first_unsent as usize, in_ring);
    drop(batch);
    assert_eq!(
        pool.available() as usize,
        POOL_SIZE as usize - in_ring,
        "dropping unsent mbufs frees them"
    );

    // Drain the ring: every frame comes back intact, in order.
    let mut got: Vec<Mbuf> = Vec::new();
    let mut next = 0u32;
    while q.rx_burst(&mut got, 32) > 0 {
        for m in got.drain(..) {
            assert_eq!(u32::from_be_bytes(m.data()[..4].try_into().unwrap()), next);
            assert_eq!(m.data().len(), 64);
            next += 1;
        }
    }
    assert_eq!(next as usize, in_ring);
    assert_eq!(pool.available(), POOL_SIZE, "all mbufs back in the pool");
}

#[test]
fn mempool_exhaustion_and_mbuf_lengths() {
    let d = dpdk().lock().unwrap();
    let pool = d.pool;
    let mut all: Vec<Mbuf> = Vec::new();
    while let Some(m) = pool.alloc() {
        all.push(m);
    }
    assert_eq!(all.len(), POOL_SIZE as usize);
    assert!(pool.alloc().is_none(), "exhausted pool gives None");
    let m = &mut all[0];
    assert_eq!(m.data().len(), 0);
    assert!(m.capacity() >= 2048);
    m.set_len(1500);
    assert_eq!((m.data().len(), m.pkt_len(), m.segments()), (1500, 1500, 1));
    drop(all);
    assert_eq!(pool.available(), POOL_SIZE);
}

/// A frame over two mbufs (as a driver's scattered receive chains one
/// longer than a buffer) reads as chained, which the engine drops: its
/// data is the first segment's only. Freed whole.
#[test]
fn chained_mbufs_read_as_chained_and_are_freed_whole() {
    use dataplane::port::PacketBuf;
    let d = dpdk().lock().unwrap();
    let pool = d.pool;
    let before = pool.available();
    let mut head = frame(&pool, 1);
    assert!(!head.chained());
    let tail = frame(&pool, 2);
    assert!(head.chain(tail).is_ok());
    assert!(head.chained());
    assert_eq!(
        (head.data().len(), head.pkt_len(), head.segments()),
        (64, 128, 2)
    );
    drop(head);
    assert_eq!(pool.available(), before);
}

/// A received mbuf whose length runs past its buffer (a zero-copy memif
/// peer writes the length) is freed unread and counted, the frames beside
/// it delivered. Before, its bytes were read past the buffer.
#[test]
fn a_received_mbuf_longer_than_its_buffer_is_dropped_unread() {
    use dataplane::port::Port;
    let d = dpdk().lock().unwrap();
    let pool = d.pool;
    let before = pool.available();
    let mut q = d.port.queue(QueueId(0));
    let mut bad = frame(&pool, 7);
    // SAFETY: its bytes are never read here; the port must not either.
    unsafe { bad.set_len_unchecked(60_000) };
    let mut batch = vec![frame(&pool, 6), bad, frame(&pool, 8)];
    assert_eq!(q.tx_burst(&mut batch), 3);
    let mut got = Vec::new();
    for _ in 0..100 {
        q.rx_burst(&mut got, 32);
        if got.len() == 2 {
            break;
        }
    }
    let tags: Vec<u8> = got.iter().map(|m| m.data()[3]).collect();
    assert_eq!(tags, [6, 8]);
    assert_eq!(Port::errors(&q), 1);
    drop(got);
    assert_eq!(pool.available(), before, "the bad one freed too");
}

/// A TSO request on an mbuf is DPDK's: the segmentation flag with both
/// checksums, the three header lengths and the MSS, and the TCP field
/// holding the pseudo-header sum without the length (rte_ipv4_phdr_cksum
/// for a TSO mbuf), where the engine wrote it with.
#[test]
fn segmentation_requests_are_dpdks() {
    use dataplane::port::PacketBuf;
    use dpdk_sys::consts as c;
    let d = dpdk().lock().unwrap();
    let mut m = d.pool.alloc().expect("pool has mbufs");
    m.set_len(14 + 20 + 32 + 1900);
    let f = m.data_mut();
    f.fill(0);
    f[14] = 0x45;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let with_len = dataplane::checksum::tcp_pseudo_header([10, 0, 0, 1], [10, 0, 0, 2], 32 + 1900);
    f[50..52].copy_from_slice(&with_len.to_be_bytes());
    m.request_segmentation(14, 20, 32, 1448);
    let flags = m.ol_flags();
    for flag in [
        c::RTE_MBUF_F_TX_TCP_SEG,
        c::RTE_MBUF_F_TX_IP_CKSUM,
        c::RTE_MBUF_F_TX_IPV4,
    ] {
        assert_ne!(flags & flag, 0, "flag {flag:#x} in {flags:#x}");
    }
    assert_eq!(m.tx_lens(), (14, 20, 32, 1448));
    let without = dataplane::checksum::tcp_pseudo_header([10, 0, 0, 1], [10, 0, 0, 2], 0);
    assert_eq!(&m.data()[50..52], &without.to_be_bytes());
}

#[test]
fn too_many_queues_is_a_clear_error() {
    let d = dpdk().lock().unwrap();
    let id = d.port.id();
    let info = EthPort::info(id).unwrap();
    assert_eq!(info.driver, "net_ring");
    let err = EthPort::start(
        id,
        EthPortConfig {
            queues: 1000,
            rx_desc: 64,
            tx_desc: 64,
            mempool: d.pool,
            checksum_offload: true,
            segmentation: None,
            mtu: 1500,
            start_later: false,
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("1000 queues asked"), "{err}");
}

#[test]
fn non_eal_threads_register_and_use_mbufs() {
    // Hold the lock: other tests move mbufs of the same pool.
    let d = dpdk().lock().unwrap();
    let pool = d.pool;
    let before = pool.available();
    std::thread::spawn(move || {
        let lcore = register_thread().expect("register");
        assert_ne!(lcore.0, u32::MAX, "a registered thread has an lcore id");
        let m = pool.alloc().expect("alloc from a registered thread");
        drop(m);
    })
    .join()
    .unwrap();
    assert_eq!(pool.available(), before);
}

#[test]
fn second_eal_init_is_refused() {
    let _d = dpdk().lock().unwrap();
    let err = Eal::init(&["--no-huge".to_string()]).unwrap_err();
    assert!(err.to_string().contains("once per process"), "{err}");
}
