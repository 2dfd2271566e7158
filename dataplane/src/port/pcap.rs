//! A port wrapper that writes every frame it receives and transmits to a
//! pcap file (microsecond timestamps, Ethernet link type), for debugging.
//! It does file I/O per packet: never wrap a production port with it.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use smoltcp::wire::EthernetAddress;

use super::{ChecksumOffload, PacketBuf, Port};
use crate::time::Instant;

const SNAPLEN: u32 = 65535;
const LINKTYPE_ETHERNET: u32 = 1;

/// A [`Port`] that records its traffic.
#[derive(Debug)]
pub struct PcapTap<P: Port> {
    inner: P,
    out: BufWriter<File>,
    written: u64,
    failed: Option<io::Error>,
    /// Records of frames offered to `tx_burst`, kept until we know how many
    /// were sent; reused between calls.
    stage: Vec<u8>,
    stage_ends: Vec<usize>,
}

impl<P: Port> PcapTap<P> {
    /// Wraps `inner`, creating (truncating) `path`.
    ///
    /// # Errors
    /// When the file cannot be created or its header written.
    pub fn create(inner: P, path: &Path) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&SNAPLEN.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        Ok(Self {
            inner,
            out,
            written: 0,
            failed: None,
            stage: Vec::new(),
            stage_ends: Vec::new(),
        })
    }

    /// Frames written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes the file and returns the inner port.
    ///
    /// # Errors
    /// The first write error met while capturing, or the flush's.
    pub fn finish(mut self) -> io::Result<P> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.inner)
    }

    fn record(&mut self, frame: &[u8]) {
        self.stage.clear();
        write_record(&mut self.stage, frame);
        let stage = std::mem::take(&mut self.stage);
        self.write(&stage, 1);
        self.stage = stage;
    }

    fn write(&mut self, bytes: &[u8], records: u64) {
        if self.failed.is_some() || records == 0 {
            return;
        }
        match self.out.write_all(bytes) {
            Ok(()) => self.written += records,
            Err(e) => {
                log::warn!("pcap capture stopped: {e}");
                self.failed = Some(e);
            }
        }
    }
}

/// Appends one pcap record (header and frame) to `buf`.
fn write_record(buf: &mut Vec<u8>, frame: &[u8]) {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let caplen = frame.len().min(SNAPLEN as usize);
    buf.extend_from_slice(&(t.as_secs() as u32).to_le_bytes());
    buf.extend_from_slice(&t.subsec_micros().to_le_bytes());
    buf.extend_from_slice(&(caplen as u32).to_le_bytes());
    buf.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    buf.extend_from_slice(&frame[..caplen]);
}

impl<P: Port> Port for PcapTap<P> {
    type Buf = P::Buf;

    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }

    fn rx_burst(&mut self, now: Instant, out: &mut Vec<P::Buf>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.rx_burst(now, out, max);
        for b in &out[start..] {
            self.record(b.data());
        }
        n
    }

    fn tx_burst(&mut self, now: Instant, batch: &mut Vec<P::Buf>) -> usize {
        // The inner port takes the buffers it sends: stage every record
        // first, then write only those of the frames that left.
        self.stage.clear();
        self.stage_ends.clear();
        for b in batch.iter() {
            write_record(&mut self.stage, b.data());
            self.stage_ends.push(self.stage.len());
        }
        let sent = self.inner.tx_burst(now, batch);
        if sent > 0 {
            let end = self.stage_ends[sent - 1];
            let stage = std::mem::take(&mut self.stage);
            self.write(&stage[..end], sent as u64);
            self.stage = stage;
        }
        sent
    }

    fn alloc(&mut self) -> Option<P::Buf> {
        self.inner.alloc()
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        self.inner.checksum_offload()
    }

    fn segmentation(&self) -> Option<usize> {
        self.inner.segmentation()
    }

    fn errors(&self) -> u64 {
        self.inner.errors()
    }

    fn alloc_large(&mut self) -> Option<P::Buf> {
        self.inner.alloc_large()
    }

    fn rss_steering(&self) -> Option<super::RssSteering> {
        self.inner.rss_steering()
    }

    fn on_tick(&mut self) {
        self.inner.on_tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::{link, MemBuf};

    #[test]
    fn records_rx_and_sent_tx_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pcap");
        let (a, mut b) = link(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            2,
            16,
        );
        let mut a = PcapTap::create(a, &path).unwrap();
        let mut batch: Vec<MemBuf> = (0..3u8)
            .map(|i| {
                let mut f = a.alloc().unwrap();
                f.set_len(60 + usize::from(i));
                f.data_mut().fill(i);
                f
            })
            .collect();
        assert_eq!(a.tx_burst(Instant::ZERO, &mut batch), 2, "link holds two");
        drop(batch);
        let mut got = Vec::new();
        b.rx_burst(Instant::ZERO, &mut got, 8);
        b.tx_burst(Instant::ZERO, &mut got);
        let mut sink = Vec::new();
        assert_eq!(a.rx_burst(Instant::ZERO, &mut sink, 8), 2);
        assert_eq!(a.written(), 4);
        a.finish().unwrap();

        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(bytes[20..24].try_into().unwrap()),
            LINKTYPE_ETHERNET
        );
        let mut off = 24;
        let mut lens = Vec::new();
        while off < bytes.len() {
            let caplen = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
            lens.push((caplen, bytes[off + 16]));
            off += 16 + caplen;
        }
        assert_eq!(off, bytes.len());
        assert_eq!(
            lens,
            vec![(60, 0), (61, 1), (60, 0), (61, 1)],
            "unsent frame 2 not recorded"
        );
    }
}
