//! The announce interface (docs/cluster.md): a kernel tap that `dpd`
//! creates and holds open, whose addresses are the VIPs this node can
//! serve, each as a /32 or /128. A routing daemon on the node (BIRD's
//! `protocol direct`) announces what it finds there.
//!
//! The tap is not persistent: the kernel deletes it, and its addresses,
//! the moment the process holding it ends, however it ends. A dead `dpd`
//! is withdrawn without its help. No frame is ever read or written on it.
//!
//! Addresses are set with rtnetlink (`RTM_NEWADDR` / `RTM_DELADDR`), so no
//! tool has to be spawned. Like the rest of this module, the OS layer's
//! unsafe calls stay here.

use std::ffi::CString;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{ifreq, last_errno as errno, DpdkError};

/// `IFA_F_NODAD`: an IPv6 address usable at once (a /128 of ours on an
/// interface that carries no traffic has no one to collide with).
const IFA_F_NODAD: u32 = 0x02;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;

/// The held tap and an rtnetlink socket to set its addresses.
#[derive(Debug)]
pub struct VipIface {
    name: String,
    index: u32,
    /// Holding this keeps the interface; dropping it deletes it.
    _tap: OwnedFd,
    netlink: OwnedFd,
    seq: u32,
}

impl VipIface {
    /// Creates the tap `name` (not persistent), brings it up, and removes
    /// any address it has.
    ///
    /// # Errors
    /// A bad name, no `/dev/net/tun`, or an interface of that name that
    /// exists already (another `dpd`, or a persistent tap: refused so two
    /// processes never announce through one interface).
    pub fn create(name: &str) -> Result<Self, DpdkError> {
        let cname = CString::new(name)
            .ok()
            .filter(|n| !n.as_bytes().is_empty() && n.as_bytes().len() < libc::IFNAMSIZ)
            .ok_or_else(|| {
                DpdkError::new("interface name", libc::EINVAL).context(name.to_string())
            })?;
        if std::path::Path::new("/sys/class/net").join(name).exists() {
            return Err(
                DpdkError::new("create announce interface", libc::EEXIST).context(format!(
                    "{name} exists already (another dpd announcing here?)"
                )),
            );
        }
        // SAFETY: the path is NUL-terminated; open returns a new fd or -1.
        let raw = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(DpdkError::new("open(/dev/net/tun)", errno()));
        }
        // SAFETY: raw is a fresh fd we own.
        let tap = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut req = ifreq(&cname);
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: tap is an open tun file; req is a valid ifreq.
        if unsafe { libc::ioctl(tap.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            return Err(DpdkError::new("ioctl(TUNSETIFF)", errno()).context(name.to_string()));
        }
        set_up(&cname)?;
        // SAFETY: cname is NUL-terminated.
        let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if index == 0 {
            return Err(DpdkError::new("if_nametoindex", errno()).context(name.to_string()));
        }
        // SAFETY: plain socket call; returns a new fd or -1.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if raw < 0 {
            return Err(DpdkError::new("socket(AF_NETLINK)", errno()));
        }
        // SAFETY: raw is a fresh fd we own.
        let netlink = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            name: name.to_string(),
            index,
            _tap: tap,
            netlink,
            seq: 0,
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Puts `ip` on the interface as a host route (/32 or /128); an
    /// address already there is fine.
    ///
    /// # Errors
    /// The kernel refused (errno from its answer).
    pub fn add(&mut self, ip: IpAddr) -> Result<(), DpdkError> {
        self.put(ip).map(|_| ())
    }

    /// Puts `ip` on the interface: whether it was missing (`false`: it
    /// was there already).
    ///
    /// # Errors
    /// The kernel refused (errno from its answer).
    pub fn put(&mut self, ip: IpAddr) -> Result<bool, DpdkError> {
        match self.request(libc::RTM_NEWADDR, ip) {
            Ok(()) => Ok(true),
            Err(e) if e.errno == libc::EEXIST => Ok(false),
            Err(e) => Err(e),
        }
        .map_err(|e| e.context(format!("add {ip} to {}", self.name)))
    }

    /// Sets the interface up again: whether it was down (someone took it
    /// down, and the kernel dropped its IPv6 addresses with it).
    ///
    /// # Errors
    /// The kernel refused.
    pub fn ensure_up(&self) -> Result<bool, DpdkError> {
        let cname = CString::new(self.name.as_str())
            .map_err(|_| DpdkError::new("interface name", libc::EINVAL))?;
        set_up(&cname)
    }

    /// Takes `ip` off the interface; one not there is fine.
    ///
    /// # Errors
    /// The kernel refused (errno from its answer).
    pub fn remove(&mut self, ip: IpAddr) -> Result<(), DpdkError> {
        match self.request(libc::RTM_DELADDR, ip) {
            Err(e) if e.errno == libc::EADDRNOTAVAIL || e.errno == libc::ENOENT => Ok(()),
            other => other,
        }
        .map_err(|e| e.context(format!("remove {ip} from {}", self.name)))
    }

    /// Sends one address request and waits for the kernel's answer.
    fn request(&mut self, kind: u16, ip: IpAddr) -> Result<(), DpdkError> {
        self.seq = self.seq.wrapping_add(1);
        let msg = address_message(kind, self.seq, self.index, ip);
        // SAFETY: msg is a valid buffer of msg.len() bytes; the netlink
        // socket's default destination is the kernel.
        let sent =
            unsafe { libc::send(self.netlink.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(DpdkError::new("netlink send", errno()));
        }
        let mut buf = [0u8; 1024];
        loop {
            // SAFETY: buf is writable for its length.
            let got = unsafe {
                libc::recv(
                    self.netlink.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                )
            };
            if got < 0 {
                return Err(DpdkError::new("netlink recv", errno()));
            }
            let got = usize::try_from(got).unwrap_or(0);
            match ack_of(&buf[..got], self.seq) {
                Some(0) => return Ok(()),
                Some(code) => return Err(DpdkError::new("netlink address request", code)),
                None => {} // an answer to an older request: read on
            }
        }
    }
}

/// An `RTM_NEWADDR`/`RTM_DELADDR` request for `ip` as a host address on
/// interface `index`, asking for an acknowledgement.
fn address_message(kind: u16, seq: u32, index: u32, ip: IpAddr) -> Vec<u8> {
    let (family, prefix, bytes): (u8, u8, Vec<u8>) = match ip {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128, a.octets().to_vec()),
    };
    let mut body = Vec::with_capacity(64);
    // struct ifaddrmsg: family, prefixlen, flags, scope, index.
    body.extend_from_slice(&[family, prefix, IFA_F_NODAD as u8, 0]);
    body.extend_from_slice(&index.to_ne_bytes());
    let mut attr = |kind: u16, value: &[u8]| {
        let len = 4 + value.len();
        body.extend_from_slice(&(len as u16).to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(value);
        body.resize(body.len().next_multiple_of(4), 0);
    };
    attr(IFA_LOCAL, &bytes);
    attr(IFA_ADDRESS, &bytes);
    attr(IFA_FLAGS, &IFA_F_NODAD.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST
        | libc::NLM_F_ACK
        | if kind == libc::RTM_NEWADDR {
            libc::NLM_F_CREATE | libc::NLM_F_EXCL
        } else {
            0
        };
    let mut msg = Vec::with_capacity(16 + body.len());
    // struct nlmsghdr: len, type, flags, seq, pid.
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&(flags as u16).to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(&body);
    msg
}

/// The error code (0: success; positive errno) of the `NLMSG_ERROR`
/// answering request `seq` in `buf`, if there is one.
fn ack_of(buf: &[u8], seq: u32) -> Option<i32> {
    let mut at = 0;
    while let Some(hdr) = buf.get(at..at + 16) {
        let len = u32::from_ne_bytes(hdr[0..4].try_into().ok()?) as usize;
        let kind = u16::from_ne_bytes(hdr[4..6].try_into().ok()?);
        let this_seq = u32::from_ne_bytes(hdr[8..12].try_into().ok()?);
        if len < 16 {
            return None;
        }
        if kind == libc::NLMSG_ERROR as u16 && this_seq == seq {
            let code = buf.get(at + 16..at + 20)?;
            return Some(i32::from_ne_bytes(code.try_into().ok()?).abs());
        }
        at += len.next_multiple_of(4);
    }
    None
}

/// Sets `IFF_UP` on the interface (a tap has carrier while it is held):
/// whether it was not set.
fn set_up(name: &CString) -> Result<bool, DpdkError> {
    // SAFETY: plain socket call; returns a new fd or -1.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(DpdkError::new("socket(AF_INET)", errno()));
    }
    // SAFETY: raw is a fresh fd we own.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut req = ifreq(name);
    // SAFETY: SIOCGIFFLAGS fills ifr_flags of a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(DpdkError::new("ioctl(SIOCGIFFLAGS)", errno()));
    }
    let up = libc::IFF_UP as libc::c_short;
    // SAFETY: the union's flags member was just written by the kernel.
    let was_up = unsafe { req.ifr_ifru.ifru_flags } & up != 0;
    if was_up {
        return Ok(false);
    }
    // SAFETY: as above.
    unsafe {
        req.ifr_ifru.ifru_flags |= up;
    }
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(DpdkError::new("ioctl(SIOCSIFFLAGS)", errno()));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_requests_are_well_formed_netlink() {
        let msg = address_message(libc::RTM_NEWADDR, 7, 3, "10.90.0.1".parse().unwrap());
        assert_eq!(
            msg.len() as u32,
            u32::from_ne_bytes(msg[0..4].try_into().unwrap())
        );
        assert_eq!(msg.len() % 4, 0);
        assert_eq!(&msg[16..18], &[libc::AF_INET as u8, 32]);
        assert_eq!(u32::from_ne_bytes(msg[20..24].try_into().unwrap()), 3);
        let v6 = address_message(libc::RTM_DELADDR, 8, 3, "2001:db8::1".parse().unwrap());
        assert_eq!(&v6[16..18], &[libc::AF_INET6 as u8, 128]);
        assert_eq!(v6.len() % 4, 0);
    }

    #[test]
    fn acks_are_matched_by_sequence_and_bad_lengths_end_the_walk() {
        let mut buf = Vec::new();
        for (seq, code) in [(4u32, 0i32), (5, -17)] {
            buf.extend_from_slice(&36u32.to_ne_bytes());
            buf.extend_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&seq.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&code.to_ne_bytes());
            buf.extend_from_slice(&[0; 16]);
        }
        assert_eq!(ack_of(&buf, 4), Some(0));
        assert_eq!(ack_of(&buf, 5), Some(17));
        assert_eq!(ack_of(&buf, 6), None);
        let mut bad = buf.clone();
        bad[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(ack_of(&bad, 5), None);
        assert_eq!(ack_of(&buf[..10], 4), None);
    }
}
