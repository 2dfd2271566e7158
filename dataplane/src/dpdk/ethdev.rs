//! Ethernet devices (NICs and virtual devices): configuration, RSS, offload
//! detection, and per-queue receive and transmit.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::ptr::NonNull;

use dpdk_sys::consts as c;
use dpdk_sys::rte_mbuf;

use super::{check, DpdkError, Mbuf, Mempool, MemsegFds};

/// A DPDK ethdev port id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortId(pub u16);

/// A queue index on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueId(pub u16);

/// The symmetric Toeplitz key: the 16-bit pattern 0x6d5a repeated, which
/// hashes (a, b) and (b, a) alike so both directions of a flow reach one
/// queue. 52 bytes covers NICs with long keys (i40e); shorter ones take a
/// prefix.
/// Drivers that report RSS but do not spread received flows by the
/// configured Toeplitz key and redirection table (engines steer in software
/// on their ports).
const DRIVERS_WITHOUT_TOEPLITZ_RSS: [&str; 1] = ["net_tap"];

/// Drivers that report a 1500-byte MTU at most (DPDK 22.11) but carry
/// larger frames whole: memif in chained ring descriptors, af_packet up to
/// its `framesz` argument. Their ethdev stays at what it reports, and a
/// larger port MTU is kept by tlsdp alone (its mbufs sized to fit).
const DRIVERS_CARRYING_LARGER_FRAMES: [&str; 2] = ["net_memif", "net_af_packet"];

pub static SYMMETRIC_RSS_KEY: [u8; 52] = {
    let mut k = [0u8; 52];
    let mut i = 0;
    while i < 52 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Port `id`'s link now (down for an id DPDK does not know).
pub fn link_status(id: PortId) -> LinkStatus {
    // SAFETY: rte_eth_link is plain data and a valid out pointer.
    let mut link: dpdk_sys::rte_eth_link = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer; DPDK checks the port id.
    let rc = unsafe { dpdk_sys::rte_eth_link_get_nowait(id.0, &mut link) };
    LinkStatus {
        up: rc == 0 && link.link_status() != 0,
        speed_mbps: link.link_speed,
    }
}

/// What port `id`'s device counted since it started (DPDK's basic
/// statistics; a bond's are its members' sums). `None` for an id DPDK
/// does not know or a driver without statistics. Reads counters the
/// driver keeps; safe beside the engines' bursts.
pub fn device_counters(id: PortId) -> Option<DeviceCounters> {
    // SAFETY: rte_eth_stats is plain data and a valid out pointer.
    let mut stats: dpdk_sys::rte_eth_stats = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer; DPDK checks the port id.
    let rc = unsafe { dpdk_sys::rte_eth_stats_get(id.0, &mut stats) };
    (rc == 0).then_some(DeviceCounters {
        rx_packets: stats.ipackets,
        rx_bytes: stats.ibytes,
        rx_missed: stats.imissed,
        rx_errors: stats.ierrors,
        rx_no_mbuf: stats.rx_nombuf,
        tx_packets: stats.opackets,
        tx_bytes: stats.obytes,
        tx_errors: stats.oerrors,
    })
}

/// A device's own counts ([`device_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Frames the device dropped because its receive queue was full (the
    /// engines did not poll in time).
    pub rx_missed: u64,
    /// Frames received with errors (bad CRC, too long, ...).
    pub rx_errors: u64,
    /// Receive buffers (mbufs) the driver could not get.
    pub rx_no_mbuf: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames the device failed to send.
    pub tx_errors: u64,
}

/// The members of bond `id` its partner aggregates now (802.3ad:
/// collecting and distributing); `None` when `id` is not a bond.
pub fn bond_active_members(id: PortId) -> Option<u16> {
    // SAFETY: the shim reads the bonding driver's list for a port id it
    // checks; a port that is not a bond gets an error back.
    let n = unsafe { dpdk_sys::tlsdp_bond_active_members(id.0) };
    u16::try_from(n).ok()
}

/// Looks up a port by its device name (`net_af_packet0`, `0000:01:00.0`).
///
/// # Errors
/// When no probed device has that name.
pub fn port_id_by_name(name: &str) -> Result<PortId, DpdkError> {
    let cname = CString::new(name)
        .map_err(|_| DpdkError::new("rte_eth_dev_get_port_by_name", libc::EINVAL))?;
    let mut id = 0u16;
    // SAFETY: cname is NUL-terminated and id a valid out pointer.
    let rc = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    check("rte_eth_dev_get_port_by_name", rc).map_err(|e| e.context(name.to_string()))?;
    Ok(PortId(id))
}

/// What a device is and can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub driver: String,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    pub rx_offload_capa: u64,
    pub tx_offload_capa: u64,
    /// RSS hash types the device supports (`RTE_ETH_RSS_*`); 0 without RSS.
    pub rss_offloads: u64,
    pub hash_key_size: u8,
    pub reta_size: u16,
    pub socket: i32,
    /// The MTUs the device reports it takes, and its largest frame.
    pub min_mtu: u16,
    pub max_mtu: u16,
    pub max_rx_pktlen: u32,
}

impl PortInfo {
    /// The largest MTU `rte_eth_dev_configure` accepts: `max_mtu`, and no
    /// more than `max_rx_pktlen` less the Ethernet overhead (DPDK's own
    /// rule: the gap between the two where the driver gives both, else
    /// header and FCS).
    pub fn mtu_limit(&self) -> u16 {
        let overhead = if self.max_mtu != u16::MAX && self.max_rx_pktlen > u32::from(self.max_mtu) {
            self.max_rx_pktlen - u32::from(self.max_mtu)
        } else {
            14 + 4
        };
        let by_frame = self.max_rx_pktlen.saturating_sub(overhead);
        self.max_mtu
            .min(u16::try_from(by_frame).unwrap_or(u16::MAX))
    }
}

/// How to set a port up.
#[derive(Debug, Clone, Copy)]
pub struct EthPortConfig {
    pub queues: u16,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub mempool: Mempool,
    /// Use the device's IPv4 and TCP checksum offloads where it has them
    /// (off: every checksum in software).
    pub checksum_offload: bool,
    /// Mbufs with a 64 KiB data room for TCP segmentation offload: TSO is
    /// used where the device has it, with both transmit checksums
    /// (`None`: one MSS per frame).
    pub segmentation: Option<Mempool>,
    /// The link's MTU; `mempool`'s mbufs must hold its frames (with an
    /// 802.1Q tag).
    pub mtu: u16,
    /// Leave the port configured and stopped, its queues paused: starting
    /// it connects to a peer (a memif client), which the control thread
    /// does once dpd is up, and again whenever the link is lost
    /// ([`restart`]).
    pub start_later: bool,
}

/// An Ethernet header with an 802.1Q tag: a frame's bytes beyond its MTU.
pub const FRAME_OVERHEAD: usize = 14 + 4;

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    pub up: bool,
    pub speed_mbps: u32,
}

/// Checksum offloads in use on a port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    pub rx_ipv4_cksum: bool,
    pub rx_tcp_cksum: bool,
    pub tx_ipv4_cksum: bool,
    pub tx_tcp_cksum: bool,
    /// TCP segmentation (`RTE_ETH_TX_OFFLOAD_TCP_TSO`).
    pub tx_tcp_tso: bool,
}

/// A configured and started ethdev port. Stopped and closed on drop.
#[derive(Debug)]
pub struct EthPort {
    id: PortId,
    info: PortInfo,
    mac: [u8; 6],
    queues: u16,
    rss: bool,
    offloads: Offloads,
    mempool: Mempool,
    /// Large mbufs, with TSO on.
    large: Option<Mempool>,
    started: bool,
}

impl EthPort {
    /// Reads a port's capabilities.
    ///
    /// # Errors
    /// When the port id is invalid.
    pub fn info(id: PortId) -> Result<PortInfo, DpdkError> {
        let mut raw = MaybeUninit::<dpdk_sys::rte_eth_dev_info>::zeroed();
        // SAFETY: raw is a valid out pointer for rte_eth_dev_info.
        check("rte_eth_dev_info_get", unsafe {
            dpdk_sys::rte_eth_dev_info_get(id.0, raw.as_mut_ptr())
        })?;
        // SAFETY: the call succeeded and filled the struct (zeroed before).
        let raw = unsafe { raw.assume_init() };
        let driver = if raw.driver_name.is_null() {
            String::from("?")
        } else {
            // SAFETY: driver_name is a static NUL-terminated string of the PMD.
            unsafe { CStr::from_ptr(raw.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: plain query of a valid port id.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id.0) };
        Ok(PortInfo {
            driver,
            max_rx_queues: raw.max_rx_queues,
            max_tx_queues: raw.max_tx_queues,
            rx_offload_capa: raw.rx_offload_capa,
            tx_offload_capa: raw.tx_offload_capa,
            rss_offloads: raw.flow_type_rss_offloads,
            hash_key_size: raw.hash_key_size,
            reta_size: raw.reta_size,
            socket,
            min_mtu: raw.min_mtu,
            max_mtu: raw.max_mtu,
            max_rx_pktlen: raw.max_rx_pktlen,
        })
    }

    /// Configures `cfg.queues` RX and TX queue pairs (RSS with the symmetric
    /// key when more than one and the device supports it; checksum offloads
    /// where supported) and starts the port.
    ///
    /// # Errors
    /// When the device has fewer queues than asked, or any configure, queue
    /// setup or start call fails.
    pub fn start(id: PortId, cfg: EthPortConfig) -> Result<Self, DpdkError> {
        let info = Self::info(id)?;
        if cfg.queues == 0 || cfg.queues > info.max_rx_queues || cfg.queues > info.max_tx_queues {
            return Err(
                DpdkError::new("rte_eth_dev_configure", libc::EINVAL).context(format!(
                    "{} queues asked, device {} has {} rx / {} tx",
                    cfg.queues, info.driver, info.max_rx_queues, info.max_tx_queues
                )),
            );
        }
        let limit = info.mtu_limit();
        let beyond = DRIVERS_CARRYING_LARGER_FRAMES.contains(&info.driver.as_str());
        if cfg.mtu < info.min_mtu || (cfg.mtu > limit && !beyond) {
            return Err(
                DpdkError::new("rte_eth_dev_configure", libc::EINVAL).context(format!(
                    "MTU {} asked, device {} takes {} to {}",
                    cfg.mtu, info.driver, info.min_mtu, limit
                )),
            );
        }
        let frame = usize::from(cfg.mtu) + FRAME_OVERHEAD;
        if frame > cfg.mempool.frame_room() {
            return Err(
                DpdkError::new("rte_eth_rx_queue_setup", libc::EINVAL).context(format!(
                    "frames of MTU {} need {frame} bytes, the mbufs hold {}",
                    cfg.mtu,
                    cfg.mempool.frame_room()
                )),
            );
        }
        // SAFETY: rte_eth_conf is plain data; all-zero is DPDK's default.
        let mut conf: dpdk_sys::rte_eth_conf = unsafe { std::mem::zeroed() };
        conf.rxmode.mtu = u32::from(cfg.mtu.min(limit));
        if cfg.mtu > limit {
            log::info!(
                "{}: reports an MTU of {limit} at most but carries larger frames; MTU {} kept by tlsdp",
                info.driver,
                cfg.mtu
            );
        }
        let rss_hf = rss_hash_types(info.rss_offloads);
        // Otherwise the daemon has the engines steer in software (and says
        // so).
        let rss = cfg.queues > 1 && spreads_by_our_key(&info);
        if rss {
            conf.rxmode.mq_mode = dpdk_sys::rte_eth_rx_mq_mode::RTE_ETH_MQ_RX_RSS;
            // The driver reads the key (never writes it), possibly after
            // this call returns: it must be static.
            conf.rx_adv_conf.rss_conf.rss_key = SYMMETRIC_RSS_KEY.as_ptr().cast_mut();
            conf.rx_adv_conf.rss_conf.rss_key_len = info.hash_key_size;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        let wanted = |capa: u64, flag: u64| cfg.checksum_offload && capa & flag != 0;
        let mut offloads = Offloads {
            rx_ipv4_cksum: wanted(info.rx_offload_capa, c::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM),
            rx_tcp_cksum: wanted(info.rx_offload_capa, c::RTE_ETH_RX_OFFLOAD_TCP_CKSUM),
            tx_ipv4_cksum: wanted(info.tx_offload_capa, c::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM),
            tx_tcp_cksum: wanted(info.tx_offload_capa, c::RTE_ETH_TX_OFFLOAD_TCP_CKSUM),
            tx_tcp_tso: false,
        };
        // TSO fills both checksums of every segment: only with them.
        offloads.tx_tcp_tso = cfg.segmentation.is_some()
            && offloads.tx_ipv4_cksum
            && offloads.tx_tcp_cksum
            && wanted(info.tx_offload_capa, c::RTE_ETH_TX_OFFLOAD_TCP_TSO);
        let flag = |on: bool, flag: u64| if on { flag } else { 0 };
        conf.rxmode.offloads = flag(offloads.rx_ipv4_cksum, c::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM)
            | flag(offloads.rx_tcp_cksum, c::RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
        conf.txmode.offloads = flag(offloads.tx_ipv4_cksum, c::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM)
            | flag(offloads.tx_tcp_cksum, c::RTE_ETH_TX_OFFLOAD_TCP_CKSUM)
            | flag(offloads.tx_tcp_tso, c::RTE_ETH_TX_OFFLOAD_TCP_TSO);

        // SAFETY: conf is fully initialised and outlives the call; the RSS
        // key it points to is static.
        check("rte_eth_dev_configure", unsafe {
            dpdk_sys::rte_eth_dev_configure(id.0, cfg.queues, cfg.queues, &conf)
        })
        .map_err(|e| e.context(info.driver.clone()))?;
        let mut port = Self {
            id,
            info,
            mac: [0; 6],
            queues: cfg.queues,
            rss,
            offloads,
            mempool: cfg.mempool,
            large: cfg.segmentation.filter(|_| offloads.tx_tcp_tso),
            started: false,
        };
        let (mut rx_desc, mut tx_desc) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: valid out pointers.
        check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id.0, &mut rx_desc, &mut tx_desc)
        })?;
        let socket = u32::try_from(port.info.socket).unwrap_or(dpdk_sys::SOCKET_ID_ANY as u32);
        for q in 0..cfg.queues {
            // SAFETY: a null rx_conf asks for the driver's defaults; the
            // mempool lives for the process.
            check("rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    id.0,
                    q,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    cfg.mempool.as_ptr(),
                )
            })?;
            // SAFETY: a null tx_conf asks for the driver's defaults.
            check("rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(id.0, q, tx_desc, socket, std::ptr::null())
            })?;
        }
        let mut mac = MaybeUninit::<dpdk_sys::rte_ether_addr>::zeroed();
        // SAFETY: valid out pointer.
        check("rte_eth_macaddr_get", unsafe {
            dpdk_sys::rte_eth_macaddr_get(id.0, mac.as_mut_ptr())
        })?;
        // SAFETY: filled by the successful call.
        port.mac = unsafe { mac.assume_init() }.addr_bytes;
        if cfg.start_later {
            return Ok(port);
        }
        // SAFETY: the port is configured with all its queues.
        check("rte_eth_dev_start", unsafe {
            dpdk_sys::rte_eth_dev_start(id.0)
        })
        .map_err(|e| e.context(port.info.driver.clone()))?;
        port.started = true;
        // Multicast in: IPv6 Neighbor Discovery arrives at solicited-node
        // groups, and a bond passes broadcast and multicast frames up only
        // with it on. A device without it (most deliver every group
        // anyway) is not an error.
        // SAFETY: a started port we own.
        let rc = unsafe { dpdk_sys::rte_eth_allmulticast_enable(id.0) };
        if rc != 0 {
            log::debug!("{}: all-multicast not enabled ({rc})", port.info.driver);
        }
        if rss {
            port.program_reta();
        }
        Ok(port)
    }

    /// Sets the RSS redirection table to entry `i` → queue `i % queues`,
    /// the table the engines' source-port choice assumes. Most drivers
    /// start with it; those that refuse the update keep theirs (logged).
    fn program_reta(&self) {
        let size = usize::from(self.info.reta_size);
        if size == 0 {
            return;
        }
        let groups = size.div_ceil(64);
        // SAFETY: plain data; zero is a valid value.
        let mut conf: Vec<dpdk_sys::rte_eth_rss_reta_entry64> =
            (0..groups).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (g, entry) in conf.iter_mut().enumerate() {
            for i in 0..64 {
                let n = g * 64 + i;
                if n < size {
                    entry.mask |= 1 << i;
                    entry.reta[i] = (n % usize::from(self.queues)) as u16;
                }
            }
        }
        // SAFETY: `conf` holds reta_size entries (in groups of 64), as the
        // call reads.
        let rc = unsafe {
            dpdk_sys::rte_eth_dev_rss_reta_update(self.id.0, conf.as_mut_ptr(), self.info.reta_size)
        };
        if rc != 0 {
            log::warn!(
                "port {}: RSS redirection table not set ({}); assuming the driver's default (i % queues)",
                self.id.0,
                DpdkError::new("rte_eth_dev_rss_reta_update", rc)
            );
        }
    }

    pub fn id(&self) -> PortId {
        self.id
    }

    pub fn port_info(&self) -> &PortInfo {
        &self.info
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Whether RSS spreads flows over the queues.
    pub fn rss(&self) -> bool {
        self.rss
    }

    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// With TSO on: the largest frame a segment of many MSS may take.
    pub fn segmentation(&self) -> Option<usize> {
        self.large.map(|p| p.frame_room())
    }

    /// The link state, without waiting.
    pub fn link(&self) -> LinkStatus {
        link_status(self.id)
    }

    /// Whether [`EthPort::start`] started the port (one that connects to
    /// its peer is left stopped).
    pub fn started(&self) -> bool {
        self.started
    }

    /// A handle for queue `q`, to be used by exactly one thread (DPDK
    /// queues are not thread-safe).
    ///
    /// # Panics
    /// When `q` is not a configured queue.
    pub fn queue(&self, q: QueueId) -> EthQueue {
        assert!(q.0 < self.queues, "queue {} of {}", q.0, self.queues);
        EthQueue {
            port: self.id,
            queue: q,
            mempool: self.mempool,
            large: self.large,
            mac: self.mac,
            offloads: self.offloads,
            rss_spread: (self.rss && self.queues > 1).then_some((self.queues, self.info.reta_size)),
            bond: self.is_bond(),
            paused: !self.started,
            rx_invalid: 0,
        }
    }

    /// Whether this port is a bond of DPDK's bonding driver.
    pub fn is_bond(&self) -> bool {
        self.info.driver == "net_bonding"
    }

    /// The bond's members the partner aggregates now (802.3ad: those
    /// collecting and distributing), when this port is a bond.
    pub fn active_members(&self) -> Option<u16> {
        self.is_bond()
            .then(|| bond_active_members(self.id))
            .flatten()
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        // Stopped whether or not [`restart`] started it since (stopping a
        // stopped port is a no-op).
        // SAFETY: engines using this port's queues have stopped (their
        // owner waits for them before dropping the port).
        unsafe {
            dpdk_sys::rte_eth_dev_stop(self.id.0);
            dpdk_sys::rte_eth_dev_close(self.id.0);
        }
    }
}

/// Stops port `id` (when `started`) and starts it again: a memif client
/// connects to its server only in `rte_eth_dev_start` (DPDK 22.11). A
/// zero-copy one shares EAL's memory files, which its last disconnection
/// closed: `memory` puts them back first.
///
/// Contract: no thread is inside a burst on the port's queues, and none
/// enters one until this returns `Ok` (the engines pause them:
/// [`EthQueue::set_paused`]): stopping swaps the port's burst functions.
///
/// # Errors
/// When the start fails (the peer is not there), or the memory files
/// cannot be put back: the port stays stopped.
pub fn restart(id: PortId, started: bool, memory: Option<&mut MemsegFds>) -> Result<(), DpdkError> {
    if started {
        // SAFETY: a configured port; the caller keeps its queues unused.
        unsafe { dpdk_sys::rte_eth_dev_stop(id.0) };
    }
    if let Some(m) = memory {
        m.restore().and_then(|_| m.keep_new()).map_err(|e| {
            DpdkError::new(
                "restoring EAL's memory files",
                e.raw_os_error().unwrap_or(libc::EIO),
            )
            .context(e.to_string())
        })?;
    }
    // SAFETY: a configured port with all its queues set up.
    check("rte_eth_dev_start", unsafe {
        dpdk_sys::rte_eth_dev_start(id.0)
    })
    .map(drop)
}

/// One RX/TX queue pair of a started port, owned by one engine thread.
#[derive(Debug)]
pub struct EthQueue {
    port: PortId,
    queue: QueueId,
    mempool: Mempool,
    /// Large mbufs, with TSO on.
    large: Option<Mempool>,
    mac: [u8; 6],
    offloads: Offloads,
    /// With RSS over several queues: the queue count and RETA size.
    rss_spread: Option<(u16, u16)>,
    /// A bond (DPDK's bonding driver): its LACP frames go out only from
    /// within a transmit burst, so an idle engine calls an empty one.
    bond: bool,
    /// No burst is called: the port is stopped, or is being restarted.
    paused: bool,
    /// Received mbufs whose length ran past their buffer (a memif peer
    /// writes the length in zero-copy mode): freed unread, counted.
    rx_invalid: u64,
}

/// Most mbufs moved by one burst call.
pub const MAX_BURST: usize = 64;

impl EthQueue {
    /// This queue's index on its port.
    pub fn queue_id(&self) -> QueueId {
        self.queue
    }

    /// With RSS over several queues (the symmetric key, the default
    /// redirection table): the queue count and RETA size.
    pub fn rss_spread(&self) -> Option<(u16, u16)> {
        self.rss_spread
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    pub fn mempool(&self) -> Mempool {
        self.mempool
    }

    /// The large mbufs' pool, with TSO on.
    pub fn large_mempool(&self) -> Option<Mempool> {
        self.large
    }

    /// Stops (`true`) or resumes calling the driver: while paused, bursts
    /// receive and send nothing (unsent frames stay with the caller).
    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Receives up to `max` (≤ [`MAX_BURST`]) packets, appended to `out`.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        if self.paused {
            return 0;
        }
        let mut raw: [*mut rte_mbuf; MAX_BURST] = [std::ptr::null_mut(); MAX_BURST];
        let max = max.min(MAX_BURST) as u16;
        // SAFETY: raw has room for `max` pointers; the queue belongs to this
        // thread.
        let n = unsafe {
            dpdk_sys::tlsdp_eth_rx_burst(self.port.0, self.queue.0, raw.as_mut_ptr(), max)
        };
        let mut taken = 0;
        for &m in &raw[..usize::from(n)] {
            let Some(m) = NonNull::new(m) else { continue };
            // SAFETY: reads two fields of an mbuf the driver just returned.
            let fits = unsafe {
                dpdk_sys::tlsdp_pktmbuf_data_len(m.as_ptr())
                    <= dpdk_sys::tlsdp_pktmbuf_capacity(m.as_ptr())
            };
            // SAFETY: the driver hands us ownership of each returned mbuf.
            let m = unsafe { Mbuf::from_raw(m) };
            if fits {
                out.push(m);
                taken += 1;
            } else {
                // Its bytes would be read past its buffer: freed unread.
                self.rx_invalid += 1;
            }
        }
        taken
    }

    /// Received mbufs freed unread because their length ran past their
    /// buffer.
    pub fn rx_invalid(&self) -> u64 {
        self.rx_invalid
    }

    /// An empty transmit burst on a bond: its mode 4 sends the LACP frames
    /// it has queued for the members from within `rte_eth_tx_burst`, which
    /// the application must call at least every 100 ms (DPDK's bonding
    /// guide); nothing for other ports.
    /// Only queue 0 does it: one caller is enough, and the bond's rings
    /// of control frames are not meant for several.
    pub fn tx_idle(&mut self) {
        if self.bond && self.queue.0 == 0 && !self.paused {
            let mut none: [*mut rte_mbuf; 1] = [std::ptr::null_mut()];
            // SAFETY: a burst of zero mbufs on our own queue; the bond
            // sends only its own control frames.
            unsafe {
                dpdk_sys::tlsdp_eth_tx_burst(self.port.0, self.queue.0, none.as_mut_ptr(), 0)
            };
        }
    }

    /// Transmits packets from the front of `batch` (at most [`MAX_BURST`]).
    /// Sent mbufs leave the batch (the driver frees them after sending);
    /// **unsent ones stay in `batch`** (at its front, in the order the
    /// driver left them: [`settle_burst`]), still owned by the caller,
    /// who may retry or drop (free) them. Returns how many were sent.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut Vec<Mbuf>) -> usize {
        let n = batch.len().min(MAX_BURST);
        if n == 0 || self.paused {
            return 0;
        }
        let mut raw: [*mut rte_mbuf; MAX_BURST] = [std::ptr::null_mut(); MAX_BURST];
        for (slot, m) in raw.iter_mut().zip(batch.iter()) {
            *slot = m.as_ptr();
        }
        // SAFETY: raw holds n valid mbufs we own; the queue belongs to this
        // thread. The driver takes ownership of `sent` of them and leaves
        // the others at the end of `raw`.
        let sent = usize::from(unsafe {
            dpdk_sys::tlsdp_eth_tx_burst(self.port.0, self.queue.0, raw.as_mut_ptr(), n as u16)
        });
        settle_burst(batch, &raw[..n], sent, Mbuf::into_raw, |p| {
            // SAFETY: an mbuf of ours the driver did not send: still ours.
            NonNull::new(p).map(|p| unsafe { Mbuf::from_raw(p) })
        });
        sent
    }
}

/// After a transmit burst of the first `after.len()` of `batch`, which
/// sent `sent`: the driver's contract (`rte_eth_tx_burst`) is that the
/// frames not sent are the last of its array, `after[sent..]`, and not
/// necessarily those the burst began with there (a bond moves each
/// member's unsent frames to the end). All the burst's frames leave
/// `batch` (`release`: owned by the driver, or taken back below) and the
/// unsent go back to its front, as `adopt` makes them ours again, in the
/// driver's order. Nothing to rebuild when all went, or none did.
fn settle_burst<T, P: Copy>(
    batch: &mut Vec<T>,
    after: &[P],
    sent: usize,
    release: impl Fn(T) -> P,
    adopt: impl Fn(P) -> Option<T>,
) {
    let n = after.len().min(batch.len());
    if sent == 0 {
        return; // nothing taken: the array is as it was
    }
    for m in batch.drain(..n) {
        let _ = release(m);
    }
    let unsent = after.get(sent..n).unwrap_or_default();
    // Back where they were, with no allocation: `drain` left the room.
    batch.splice(0..0, unsent.iter().filter_map(|&p| adopt(p)));
}

/// Whether a port's RSS can spread flows as our Toeplitz predicts (its
/// queues then the engines' own, backend source ports picked by the
/// hash): it hashes TCP, follows a key and table we set (`net_tap`
/// reports RSS but spreads by the kernel's flow hash unless rte_flow
/// rules install its eBPF Toeplitz), and takes our symmetric key (a
/// length of 0, or past ours, leaves the device's own, unknown one).
/// Otherwise the engines steer its flows in software.
fn spreads_by_our_key(info: &PortInfo) -> bool {
    let key_len = usize::from(info.hash_key_size);
    rss_hash_types(info.rss_offloads) != 0
        && !DRIVERS_WITHOUT_TOEPLITZ_RSS.contains(&info.driver.as_str())
        && key_len > 0
        && key_len <= SYMMETRIC_RSS_KEY.len()
}

/// The RSS hash types asked of a port offering `offered`: IPv4 and IPv6,
/// TCP (and UDP) ports included, so that a flow of either family reaches
/// the queue the Toeplitz hash over its 4-tuple names (backend source
/// ports are chosen by it: docs/ipv6.md). Without the IPv6 types, a NIC
/// sends IPv6 unhashed to queue 0 and other engines' backend connections
/// never see their SYN-ACKs.
fn rss_hash_types(offered: u64) -> u64 {
    offered
        & (c::RTE_ETH_RSS_IPV4
            | c::RTE_ETH_RSS_NONFRAG_IPV4_TCP
            | c::RTE_ETH_RSS_NONFRAG_IPV4_UDP
            | c::RTE_ETH_RSS_IPV6
            | c::RTE_ETH_RSS_NONFRAG_IPV6_TCP
            | c::RTE_ETH_RSS_NONFRAG_IPV6_UDP)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bond that sent two of four and moved the two it did not send
    /// (the second and the fourth) to the end of the array: those two,
    /// not the last two the burst began with, come back; the two sent are
    /// the driver's (not freed here); frames after the burst stay behind.
    /// Before, the burst's first two were taken as sent and the last two
    /// kept: one unsent frame leaked, one sent frame kept and freed twice.
    #[test]
    fn the_frames_a_burst_did_not_send_are_those_the_driver_left_at_the_end() {
        let mut batch: Vec<Box<u32>> = (1..=5).map(Box::new).collect();
        let mut raw: Vec<*mut u32> = batch[..4]
            .iter_mut()
            .map(|b| std::ptr::from_mut(&mut **b))
            .collect();
        // The driver sent 1 and 3 and left 2 and 4 at the end.
        raw.swap(1, 2);
        let sent_by_driver = [raw[0], raw[1]];
        // SAFETY: (test) each pointer is a leaked Box of ours, adopted once.
        let adopt = |p: *mut u32| Some(unsafe { Box::from_raw(p) });
        settle_burst(&mut batch, &raw, 2, Box::into_raw, adopt);
        let left: Vec<u32> = batch.iter().map(|b| **b).collect();
        assert_eq!(left, [2, 4, 5]);
        // The sent two: ours to free here, standing in for the driver.
        for p in sent_by_driver {
            // SAFETY: (test) released above, never adopted.
            let b = unsafe { Box::from_raw(p) };
            assert!(*b == 1 || *b == 3);
        }
        // All sent, and none: nothing rebuilt.
        let mut batch: Vec<Box<u32>> = (1..=2).map(Box::new).collect();
        let raw: Vec<*mut u32> = batch
            .iter_mut()
            .map(|b| std::ptr::from_mut(&mut **b))
            .collect();
        settle_burst(&mut batch, &raw, 0, Box::into_raw, adopt);
        assert_eq!(batch.len(), 2);
        settle_burst(&mut batch, &raw, 2, Box::into_raw, adopt);
        assert!(batch.is_empty());
        for p in raw {
            // SAFETY: (test) released by the burst that "sent" them.
            drop(unsafe { Box::from_raw(p) });
        }
    }

    /// A port spreads flows as our Toeplitz predicts only where it takes
    /// our key: a key size of 0, or past ours, leaves its own (before, RSS
    /// was on and the engines picked backend source ports for a hash the
    /// NIC did not use); `net_tap`, and a port hashing no TCP, never.
    #[test]
    fn only_a_port_that_takes_our_key_spreads_by_it() {
        let mut i = info(1500, 1518);
        i.rss_offloads = c::RTE_ETH_RSS_NONFRAG_IPV4_TCP;
        for (size, spreads) in [(40, true), (52, true), (0, false), (64, false)] {
            i.hash_key_size = size;
            assert_eq!(spreads_by_our_key(&i), spreads, "key of {size} bytes");
        }
        i.hash_key_size = 40;
        i.driver = "net_tap".into();
        assert!(!spreads_by_our_key(&i));
        i.driver = "net_ice".into();
        i.rss_offloads = 0;
        assert!(!spreads_by_our_key(&i));
    }

    #[test]
    fn rss_hashes_ipv6_tcp_as_ipv4_tcp_where_offered() {
        let both = c::RTE_ETH_RSS_NONFRAG_IPV4_TCP | c::RTE_ETH_RSS_NONFRAG_IPV6_TCP;
        assert_eq!(rss_hash_types(u64::MAX) & both, both);
        assert_eq!(
            rss_hash_types(c::RTE_ETH_RSS_NONFRAG_IPV4_TCP),
            c::RTE_ETH_RSS_NONFRAG_IPV4_TCP,
            "only what the port offers"
        );
    }

    fn info(max_mtu: u16, max_rx_pktlen: u32) -> PortInfo {
        PortInfo {
            driver: "t".into(),
            max_rx_queues: 1,
            max_tx_queues: 1,
            rx_offload_capa: 0,
            tx_offload_capa: 0,
            rss_offloads: 0,
            hash_key_size: 0,
            reta_size: 0,
            socket: 0,
            min_mtu: 68,
            max_mtu,
            max_rx_pktlen,
        }
    }

    #[test]
    fn the_mtu_limit_follows_dpdk_s_overhead_rule() {
        // Only a largest frame (memif, af_packet in 22.11): header and FCS.
        assert_eq!(info(u16::MAX, 1518).mtu_limit(), 1500);
        // Both given: the gap between them is the overhead (VLAN tags too).
        assert_eq!(info(9000, 9026).mtu_limit(), 9000);
        assert_eq!(info(9600, 9618).mtu_limit(), 9600);
        // A driver that gives neither takes any MTU.
        assert_eq!(info(u16::MAX, u32::MAX).mtu_limit(), u16::MAX);
    }
}
