//! A Linux tap device with virtio-net headers (`IFF_VNET_HDR`), driven by
//! tlsdp itself with DPDK mbufs: the lab port whose offloads reach the
//! kernel peer as a NIC's would.
//!
//! Every frame crosses the tap's file descriptor behind a 10-byte
//! `virtio_net_hdr`. On transmit the header asks the kernel to finish the
//! TCP checksum (`NEEDS_CSUM`) and, for a segment of many MSS, to treat it
//! as one TCP GSO packet (`GSO_TCPV4`): the kernel peer's stack takes the
//! 64 KB segment whole, as from a NIC's TSO and the peer's GRO, so one
//! `write` carries up to 45 segments. On receive, `TUNSETOFFLOAD` with
//! `TUN_F_CSUM` lets the kernel hand over frames whose TCP checksum it
//! left partial (its own traffic, not yet summed): the header says so and
//! the frame is marked checked. With segmentation on, `TUN_F_TSO4` too:
//! the kernel hands over its TCP segments of many MSS whole (as a NIC's
//! LRO would), read into a large mbuf; a frame that fits an ordinary one
//! is copied down into one (the large mbuf is kept for the next read;
//! with no ordinary one free, the frame stays in the large one). A frame
//! longer than the mbuf it was read into (which the kernel cuts) is
//! dropped and counted (`rx_too_long`), never passed on cut. DPDK's
//! `net_tap` was not used: its TSO and checksum
//! offloads are done in software inside the PMD (`rte_gso` and its own
//! checksum code) before a plain write, so the kernel never sees a large
//! segment (docs/architecture.md, "Ports").
//!
//! The device is a persistent tap made beforehand (`ip tuntap add ...`),
//! found by name, optionally in another network namespace (the lab puts
//! the tap in the client's namespace; the calling thread enters it just
//! for the attach and comes back).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use super::{last_errno as errno, DpdkError, Mbuf, Mempool};
use dpdk_sys::consts as c;

/// `virtio_net_hdr` (legacy layout, the tap's default 10 bytes, little
/// endian on the hosts DPDK runs on here).
const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_F_DATA_VALID: u8 = 2;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
/// Where the TCP checksum field lies in its header.
const TCP_CSUM_OFFSET: u16 = 16;

/// How to attach to a tap.
#[derive(Debug, Clone)]
pub struct VnetTapConfig {
    /// The tap's name (a persistent tap, made beforehand).
    pub iface: String,
    /// The network namespace (a name under `/run/netns`) the tap is in;
    /// `None`: this process's.
    pub netns: Option<String>,
    /// Checksums left to the kernel both ways.
    pub checksum_offload: bool,
    /// Segments of many MSS handed to the kernel whole (needs
    /// `checksum_offload` and `large`).
    pub segmentation: bool,
    /// Mbufs for received frames and ordinary transmits.
    pub mempool: Mempool,
    /// Mbufs for segments of many MSS (a 64 KiB data room).
    pub large: Option<Mempool>,
}

/// Counters of one tap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetTapStats {
    /// Frames the kernel refused on write (dropped).
    pub tx_errors: u64,
    /// Reads that failed other than for want of frames.
    pub rx_errors: u64,
    /// TCP segments of many MSS received whole (the kernel's GSO).
    pub rx_large: u64,
    /// Frames longer than the mbuf they were read into (the kernel cut
    /// them): dropped, never passed on cut.
    pub rx_too_long: u64,
    /// Reads that brought no frame past the virtio-net header: dropped.
    pub rx_empty: u64,
}

/// One attached tap: its receive and transmit path (one queue).
/// [`VnetTap::handle`] gives other engines a handle that shares the file
/// descriptor for buffers and identity; only one engine reads from it.
#[derive(Debug)]
pub struct VnetTap {
    fd: Arc<OwnedFd>,
    mac: [u8; 6],
    mempool: Mempool,
    large: Option<Mempool>,
    /// With segmentation on: the large mbuf the next read goes into.
    spare: Option<Mbuf>,
    checksum_offload: bool,
    stats: VnetTapStats,
}

impl VnetTap {
    /// Attaches to the tap `cfg.iface`, in `cfg.netns` if given.
    ///
    /// # Errors
    /// When the namespace or the tap cannot be opened (no such tap, no
    /// permission, a tap already attached by another process), or the
    /// kernel refuses the vnet header or the offloads.
    pub fn open(cfg: &VnetTapConfig) -> Result<Self, DpdkError> {
        let fd = match &cfg.netns {
            Some(ns) => in_netns(ns, || attach(&cfg.iface))?,
            None => attach(&cfg.iface)?,
        };
        let large = cfg
            .large
            .filter(|_| cfg.segmentation && cfg.checksum_offload);
        let offloads = match (cfg.checksum_offload, large.is_some()) {
            (false, _) => 0,
            (true, false) => libc::TUN_F_CSUM,
            (true, true) => libc::TUN_F_CSUM | libc::TUN_F_TSO4,
        };
        // SAFETY: fd is an open tun file; TUNSETOFFLOAD takes the flags
        // by value.
        let rc = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                libc::c_ulong::from(offloads),
            )
        };
        if rc < 0 {
            return Err(DpdkError::new("ioctl(TUNSETOFFLOAD)", errno()).context(cfg.iface.clone()));
        }
        Ok(Self {
            fd: Arc::new(fd),
            mac: mac_for(&cfg.iface),
            mempool: cfg.mempool,
            large,
            spare: None,
            checksum_offload: cfg.checksum_offload,
            stats: VnetTapStats::default(),
        })
    }

    /// Another handle on the same tap (for an engine that transmits
    /// through it but does not read it).
    pub fn handle(&self) -> Self {
        Self {
            fd: self.fd.clone(),
            mac: self.mac,
            mempool: self.mempool,
            large: self.large,
            spare: None,
            checksum_offload: self.checksum_offload,
            stats: VnetTapStats::default(),
        }
    }

    /// Our MAC on the link: locally administered, from the tap's name
    /// (the kernel side has its own).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Whether checksums are left to the kernel.
    pub fn checksum_offload(&self) -> bool {
        self.checksum_offload
    }

    /// The largest frame a segment of many MSS may take (the large
    /// mbufs' room), when segmentation is on.
    pub fn segmentation(&self) -> Option<usize> {
        self.large.map(|p| p.frame_room())
    }

    pub fn stats(&self) -> VnetTapStats {
        self.stats
    }

    pub fn alloc(&self) -> Option<Mbuf> {
        self.mempool.alloc()
    }

    pub fn alloc_large(&self) -> Option<Mbuf> {
        match self.large {
            Some(p) => p.alloc(),
            None => self.mempool.alloc(),
        }
    }

    /// Reads up to `max` frames into mbufs appended to `out`; returns
    /// how many. A frame whose TCP checksum the kernel left partial, or
    /// vouched for, is marked good. At most `max` reads: frames dropped
    /// (too long, or empty) count against it too, so a peer writing only
    /// those cannot keep the engine reading.
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: usize) -> usize {
        let mut n = 0;
        for _ in 0..max {
            // Large segments come whole: read into a large mbuf when
            // there is one (the spare), else an ordinary one.
            let spare = match (self.spare.take(), self.large) {
                (Some(m), _) => Some(m),
                (None, Some(pool)) => pool.alloc(),
                (None, None) => None,
            };
            let Some(mut m) = spare.or_else(|| self.mempool.alloc()) else {
                break;
            };
            let room = m.capacity();
            m.set_len(room);
            let mut hdr = [0u8; VNET_HDR_LEN];
            // A byte past the room: a frame that reaches it was too long
            // (the kernel cuts a frame to the room given, silently).
            let mut past = [0u8; 1];
            let data = m.data_mut();
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_mut_ptr().cast(),
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: data.as_mut_ptr().cast(),
                    iov_len: data.len(),
                },
                libc::iovec {
                    iov_base: past.as_mut_ptr().cast(),
                    iov_len: past.len(),
                },
            ];
            // SAFETY: the iovecs point at live, writable memory of their
            // stated lengths (the header array, the mbuf's room, a byte).
            let got = unsafe { libc::readv(self.fd.as_raw_fd(), iov.as_ptr(), 3) };
            if got < 0 {
                let e = errno();
                if e != libc::EAGAIN && e != libc::EINTR {
                    self.stats.rx_errors += 1;
                }
                self.keep_spare(m);
                break;
            }
            let got = got as usize; // non-negative: checked above
            if got <= VNET_HDR_LEN {
                self.stats.rx_empty += 1;
                self.keep_spare(m);
                continue; // nothing but a header: not a frame
            }
            let len = got - VNET_HDR_LEN;
            if len > room {
                self.stats.rx_too_long += 1;
                self.keep_spare(m);
                continue;
            }
            let is_large = self.large.is_some_and(|p| room == p.frame_room());
            let small = if is_large && len <= self.mempool.frame_room() {
                self.mempool.alloc()
            } else {
                None
            };
            let mut m = match small {
                // Fits an ordinary mbuf: copied down, the large one kept
                // (with none free, the frame stays in the large one).
                Some(mut small) => {
                    small.set_len(len);
                    small.data_mut().copy_from_slice(&m.data()[..len]);
                    self.keep_spare(m);
                    small
                }
                None => {
                    m.set_len(len);
                    m
                }
            };
            if hdr[0] & (VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID) != 0 {
                m.set_ol_flags(c::RTE_MBUF_F_RX_L4_CKSUM_GOOD);
            }
            if hdr[1] != 0 {
                self.stats.rx_large += 1;
            }
            out.push(m);
            n += 1;
        }
        n
    }

    /// Keeps a large mbuf for the next read (an ordinary one goes back).
    fn keep_spare(&mut self, m: Mbuf) {
        if self.large.is_some_and(|p| m.capacity() == p.frame_room()) {
            self.spare = Some(m);
        }
    }

    /// Writes frames from the front of `batch`, each with its header;
    /// returns how many left it. The kernel takes a frame or refuses it
    /// (counted, dropped): only a full socket buffer (`EAGAIN`) leaves
    /// frames with the caller.
    pub fn tx_burst(&mut self, batch: &mut Vec<Mbuf>) -> usize {
        let mut taken = 0;
        for m in batch.iter_mut() {
            let hdr = vnet_header(m);
            let data = m.data();
            let iov = [
                libc::iovec {
                    iov_base: hdr.as_ptr() as *mut libc::c_void,
                    iov_len: VNET_HDR_LEN,
                },
                libc::iovec {
                    iov_base: data.as_ptr() as *mut libc::c_void,
                    iov_len: data.len(),
                },
            ];
            // SAFETY: both iovecs point at live memory of their stated
            // lengths; writev only reads them.
            let rc = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), 2) };
            if rc < 0 {
                let e = errno();
                if e == libc::EAGAIN || e == libc::EINTR {
                    break;
                }
                self.stats.tx_errors += 1;
            }
            taken += 1;
        }
        batch.drain(..taken);
        taken
    }
}

/// The virtio-net header for `m` as its offload requests say; the frame
/// gets what the kernel does not do: its IPv4 header checksum, and for a
/// segment to cut, the pseudo-header sum over the whole TCP length (DPDK
/// asks for it without the length).
fn vnet_header(m: &mut Mbuf) -> [u8; VNET_HDR_LEN] {
    let mut hdr = [0u8; VNET_HDR_LEN];
    let flags = m.ol_flags();
    let seg = flags & c::RTE_MBUF_F_TX_TCP_SEG != 0;
    let csum = seg || flags & c::RTE_MBUF_F_TX_L4_MASK == c::RTE_MBUF_F_TX_TCP_CKSUM;
    if !csum {
        return hdr;
    }
    let (l2, l3, l4, segsz) = m.tx_lens();
    let (l2, l3) = (usize::from(l2), usize::from(l3));
    let ipv6 = flags & c::RTE_MBUF_F_TX_IPV6 != 0;
    let frame = m.data_mut();
    let min = if ipv6 { 40 } else { 20 };
    let Some(ip) = frame.get_mut(l2..l2 + l3).filter(|ip| ip.len() >= min) else {
        return hdr; // not as asked: sent as it is
    };
    if !ipv6 && flags & c::RTE_MBUF_F_TX_IP_CKSUM != 0 {
        ip[10..12].fill(0);
        let sum = crate::checksum::ipv4_header(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
    }
    let tcp_len = frame.len().saturating_sub(l2 + l3);
    if tcp_len < 20 {
        return hdr;
    }
    // The pseudo-header sum over the whole TCP length (a segment to cut
    // arrives with DPDK's, without the length).
    let pseudo = if ipv6 {
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src.copy_from_slice(&frame[l2 + 8..l2 + 24]);
        dst.copy_from_slice(&frame[l2 + 24..l2 + 40]);
        crate::checksum::tcp6_pseudo_header(src, dst, tcp_len)
    } else {
        let ip = &frame[l2..l2 + 20];
        let (src, dst) = (
            [ip[12], ip[13], ip[14], ip[15]],
            [ip[16], ip[17], ip[18], ip[19]],
        );
        crate::checksum::tcp_pseudo_header(src, dst, tcp_len)
    };
    let start = (l2 + l3) as u16; // a few dozen bytes
    hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM;
    hdr[6..8].copy_from_slice(&start.to_le_bytes());
    hdr[8..10].copy_from_slice(&TCP_CSUM_OFFSET.to_le_bytes());
    if seg {
        let at = l2 + l3 + 16;
        frame[at..at + 2].copy_from_slice(&pseudo.to_be_bytes());
        hdr[1] = if ipv6 {
            VIRTIO_NET_HDR_GSO_TCPV6
        } else {
            VIRTIO_NET_HDR_GSO_TCPV4
        };
        let headers = start + u16::from(l4);
        hdr[2..4].copy_from_slice(&headers.to_le_bytes());
        hdr[4..6].copy_from_slice(&segsz.to_le_bytes());
    }
    hdr
}

/// Opens `/dev/net/tun` and attaches to the tap `iface` with vnet
/// headers, non-blocking.
fn attach(iface: &str) -> Result<OwnedFd, DpdkError> {
    let name = CString::new(iface)
        .ok()
        .filter(|n| n.as_bytes().len() < libc::IFNAMSIZ)
        .ok_or_else(|| DpdkError::new("tap name", libc::EINVAL).context(iface.to_string()))?;
    let path = c"/dev/net/tun";
    // SAFETY: path is NUL-terminated; open returns a new fd or -1.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(DpdkError::new("open(/dev/net/tun)", errno()));
    }
    // SAFETY: raw is a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = super::ifreq(&name);
    req.ifr_ifru.ifru_flags =
        (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short;
    // SAFETY: fd is an open tun file; req is a valid ifreq the kernel
    // reads and writes.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    if rc < 0 {
        return Err(DpdkError::new("ioctl(TUNSETIFF)", errno()).context(format!(
            "tap {iface} (made beforehand with `ip tuntap add dev {iface} mode tap vnet_hdr`?)"
        )));
    }
    let hdr_len = VNET_HDR_LEN as libc::c_int;
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr_len) };
    if rc < 0 {
        return Err(DpdkError::new("ioctl(TUNSETVNETHDRSZ)", errno()).context(iface.to_string()));
    }
    Ok(fd)
}

/// Runs `f` with this thread in the network namespace `name` (under
/// `/run/netns`), then returns the thread to its own.
fn in_netns<T>(name: &str, f: impl FnOnce() -> Result<T, DpdkError>) -> Result<T, DpdkError> {
    let open = |path: String| -> Result<OwnedFd, DpdkError> {
        let cpath = CString::new(path.clone())
            .map_err(|_| DpdkError::new("netns path", libc::EINVAL).context(path.clone()))?;
        // SAFETY: cpath is NUL-terminated; open returns a new fd or -1.
        let raw = unsafe { libc::open(cpath.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(DpdkError::new("open(netns)", errno()).context(path));
        }
        // SAFETY: raw is a fresh fd we own.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    };
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err(DpdkError::new("netns name", libc::EINVAL).context(name.to_string()));
    }
    let own = open("/proc/thread-self/ns/net".to_string())?;
    let target = open(format!("/run/netns/{name}"))?;
    // SAFETY: target is a namespace fd; setns affects only this thread.
    if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(DpdkError::new("setns", errno()).context(format!("netns {name}")));
    }
    let result = f();
    // SAFETY: as above, back to the namespace this thread came from.
    if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(DpdkError::new("setns (back)", errno()));
    }
    result
}

/// A locally administered MAC from the tap's name (stable across
/// restarts, distinct per tap).
fn mac_for(iface: &str) -> [u8; 6] {
    // FNV-1a: no secrecy needed, only spread.
    let h = iface.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let b = h.to_be_bytes();
    [0x02, 0x74, b[4], b[5], b[6], b[7]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_local_unicast_and_differ_by_name() {
        let a = mac_for("tap-cli");
        assert_eq!(a[0] & 0x03, 0x02, "locally administered unicast");
        assert_eq!(a, mac_for("tap-cli"));
        assert_ne!(a, mac_for("tap-cli2"));
    }

    #[test]
    fn bad_names_are_refused_before_any_syscall() {
        assert_eq!(attach(&"x".repeat(20)).unwrap_err().errno, libc::EINVAL);
        for ns in ["", "../etc", "a/b"] {
            let e = in_netns(ns, || Ok(())).unwrap_err();
            assert_eq!(e.errno, libc::EINVAL, "{ns:?}");
        }
    }
}
