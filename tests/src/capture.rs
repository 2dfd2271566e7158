//! What went over a lab link, from the kernel's side: a `tcpdump`
//! capture in the client namespace read back as IPv4 TCP segments (an
//! 802.1Q tag noted and looked past), and the link's MTU set on both ends.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::{run, Lab};

/// Sets the MTU of both ends of the lab's veth link.
pub fn set_link_mtu(lab: &Lab, mtu: u16) {
    for (ns, dev) in [("cli", "veth-cli"), ("dut", "veth-dut")] {
        let out = run(Command::new("ip").args([
            "netns",
            "exec",
            &format!("{}-{ns}", lab.name),
            "ip",
            "link",
            "set",
            dev,
            "mtu",
            &mtu.to_string(),
        ]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// tcpdump on a veth of the client namespace, writing frame heads to a
/// pcap file.
#[derive(Debug)]
pub struct Capture {
    child: Child,
    /// Its standard error, kept open (a closed pipe would end it at its
    /// first later message) and read at the end.
    err: BufReader<std::process::ChildStderr>,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Capture {
    /// Starts it on `dev` and returns once tcpdump says it is listening.
    pub fn start(lab: &Lab, dev: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("link.pcap");
        let mut child = lab
            .client_command(&[
                "timeout",
                "120",
                "tcpdump",
                "-i",
                dev,
                "-s",
                "128",
                "-c",
                "200000",
                // Each packet at once: a ring block left part full at the
                // end would be lost.
                "--immediate-mode",
                "-U",
                "-w",
                file.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while err.read_line(&mut line).unwrap() > 0 && !line.contains("listening on") {
            line.clear();
        }
        assert!(line.contains("listening on"), "tcpdump: {line}");
        Self {
            child,
            err,
            file,
            _dir: dir,
        }
    }

    /// Stops tcpdump (SIGINT: it writes out what it holds) and returns
    /// the TCP segments it saw.
    pub fn stop(mut self) -> Vec<Segment> {
        // The `timeout` wrapper passes SIGINT on to tcpdump.
        let pid = self.child.id().to_string();
        let _ = run(Command::new("kill").args(["-INT", &pid]));
        let _ = self.child.wait();
        let mut said = String::new();
        let _ = std::io::Read::read_to_string(&mut self.err, &mut said);
        let segs = segments(&std::fs::read(&self.file).unwrap());
        assert!(!segs.is_empty(), "tcpdump captured nothing: {said}");
        segs
    }
}

/// One captured IPv4 TCP segment.
#[derive(Debug)]
pub struct Segment {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// The IP packet's total length.
    pub ip_len: usize,
    /// Its frame's 802.1Q VLAN, when tagged.
    pub vlan: Option<u16>,
    pub syn: bool,
    pub mss: Option<u16>,
}

/// The IPv4 TCP segments of a pcap file (Ethernet link type), tagged or
/// not.
pub fn segments(pcap: &[u8]) -> Vec<Segment> {
    assert_eq!(&pcap[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "pcap magic");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..(at + 16 + caplen).min(pcap.len())];
        at += 16 + caplen;
        let (vlan, l2) = if frame.len() >= 18 && frame[12..14] == [0x81, 0x00] {
            let tci = u16::from_be_bytes([frame[14], frame[15]]);
            (Some(tci & 0x0fff), 18)
        } else {
            (None, 14)
        };
        if frame.len() < l2 + 40 || frame[l2 - 2..l2] != [0x08, 0x00] {
            continue;
        }
        let ip = &frame[l2..];
        if ip[9] != 6 {
            continue;
        }
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let tcp = &ip[ihl..];
        let syn = tcp[13] & 0x02 != 0;
        let mut mss = None;
        let opts = &tcp[20..(usize::from(tcp[12] >> 4) * 4).min(tcp.len())];
        let mut i = 0;
        while i < opts.len() {
            match opts[i] {
                0 => break,
                1 => i += 1,
                kind => {
                    let len = usize::from(*opts.get(i + 1).unwrap_or(&2)).max(2);
                    if kind == 2 && i + 4 <= opts.len() {
                        mss = Some(u16::from_be_bytes([opts[i + 2], opts[i + 3]]));
                    }
                    i += len;
                }
            }
        }
        out.push(Segment {
            src: Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
            dst: Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
            ip_len: usize::from(u16::from_be_bytes([ip[2], ip[3]])),
            vlan,
            syn,
            mss,
        });
    }
    out
}

/// The largest IP packet from `src` to `dst` (either may be any).
pub fn largest(segs: &[Segment], src: Option<Ipv4Addr>, dst: Option<Ipv4Addr>) -> usize {
    segs.iter()
        .filter(|s| src.is_none_or(|a| s.src == a) && dst.is_none_or(|a| s.dst == a))
        .map(|s| s.ip_len)
        .max()
        .unwrap_or(0)
}

/// The MSS options of the SYNs (and SYN-ACKs) `from` sent.
pub fn syn_mss(segs: &[Segment], from: Ipv4Addr) -> Vec<Option<u16>> {
    segs.iter()
        .filter(|s| s.syn && s.src == from)
        .map(|s| s.mss)
        .collect()
}
