//! Software RSS for ports whose receive side does not spread flows over the
//! engines by our Toeplitz hash (no RSS, fewer queues than engines, or a
//! virtual device that spreads by another hash).
//!
//! Every engine that receives a TCP segment hashes its 4-tuple with the
//! symmetric key ([`Toeplitz`]) and hands it to the engine that owns the
//! flow (`hash % engines`, the same choice `Engine::open_to` makes for the
//! source ports of its own connections) over that engine's inbox, a
//! lock-free bounded queue; ARP frames are copied to every engine (each
//! keeps its own neighbour cache). An engine without a transmit queue of
//! its own on a port hands its frames to the engine that has the queue.
//! A frame crosses cores at most once; with hardware RSS nothing does.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::net::toeplitz::{RssSteering, Toeplitz};

/// A frame passed from one engine to another.
#[derive(Debug)]
pub enum Steered<B> {
    /// Received on port `port`; the receiver processes it as its own.
    Rx { port: u8, buf: B },
    /// To transmit on port `port` for an engine without a queue there.
    Tx { port: u8, buf: B },
    /// A copy of an ARP or Neighbor Discovery frame that another engine
    /// received on port `port` and answers: the receiver only learns its
    /// neighbours from it (one answer on the wire, not one per engine).
    Learn { port: u8, buf: B },
}

/// One engine's end of the software-RSS rings.
#[derive(Debug)]
pub struct SteerLink<B> {
    /// This engine's index.
    pub engine: u16,
    pub engines: u16,
    /// Every engine's inbox (index: engine).
    pub inboxes: Arc<Vec<ArrayQueue<Steered<B>>>>,
    pub table: Arc<Toeplitz>,
    pub key: &'static [u8],
    /// Engines that, stopping, have handed over every frame they had
    /// ([`crate::engine::Engine::run`]).
    pub stopped: Arc<AtomicUsize>,
}

impl<B> Clone for SteerLink<B> {
    fn clone(&self) -> Self {
        Self {
            engine: self.engine,
            engines: self.engines,
            inboxes: self.inboxes.clone(),
            table: self.table.clone(),
            key: self.key,
            stopped: self.stopped.clone(),
        }
    }
}

/// Frames an inbox holds (a few bursts from each other engine).
pub const INBOX_FRAMES: usize = 4096;

impl<B> SteerLink<B> {
    /// The links of `engines` engines hashing with `key`.
    pub fn new_set(engines: u16, key: &'static [u8]) -> Vec<Self> {
        let inboxes: Arc<Vec<_>> = Arc::new(
            (0..engines)
                .map(|_| ArrayQueue::new(INBOX_FRAMES))
                .collect(),
        );
        let table = Arc::new(Toeplitz::new(key));
        let stopped = Arc::new(AtomicUsize::new(0));
        (0..engines)
            .map(|engine| Self {
                engine,
                engines,
                inboxes: inboxes.clone(),
                table: table.clone(),
                key,
                stopped: stopped.clone(),
            })
            .collect()
    }

    /// The engine owning a flow with hash `h`.
    #[inline]
    pub fn owner(&self, h: u32) -> u16 {
        (h % u32::from(self.engines.max(1))) as u16
    }

    /// How this engine's own connections must pick source ports (the
    /// replies' hash must make this engine their owner).
    pub fn steering(&self) -> RssSteering {
        RssSteering {
            key: self.key,
            queues: self.engines,
            reta_size: self.engines,
            queue: self.engine,
        }
    }

    /// Hands `msg` to engine `to`; gives it back when the inbox is full.
    #[inline]
    pub fn send(&self, to: u16, msg: Steered<B>) -> Result<(), Steered<B>> {
        self.inboxes[usize::from(to)].push(msg)
    }

    /// The next frame for this engine.
    #[inline]
    pub fn recv(&self) -> Option<Steered<B>> {
        self.inboxes[usize::from(self.engine)].pop()
    }
}

/// How an engine uses one port when steering is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortShare {
    /// Hash received TCP segments and pass other engines' flows on.
    pub steer: bool,
    /// The engine polls an RX queue of its own on this port.
    pub rx: bool,
    /// The engine that transmits for this one (it has no TX queue here).
    pub tx_via: Option<u16>,
}

impl PortShare {
    /// A queue pair of its own, flows spread by the NIC.
    pub const OWN: PortShare = PortShare {
        steer: false,
        rx: true,
        tx_via: None,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn owners_match_the_source_port_choice() {
        let links = SteerLink::<u8>::new_set(3, &crate::dpdk::SYMMETRIC_RSS_KEY);
        let (client, server) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 1));
        for port in 32768..33768u16 {
            // A reply from the backend to our source port `port`.
            let h = links[0].table.tcp4(client, server, 80, port);
            let owner = links[0].owner(h);
            for l in &links {
                let s = l.steering();
                assert_eq!(s.queue_of(h) == s.queue, l.engine == owner);
            }
        }
    }

    #[test]
    fn inboxes_carry_frames_between_engines() {
        let links = SteerLink::<u32>::new_set(2, &crate::dpdk::SYMMETRIC_RSS_KEY);
        links[0].send(1, Steered::Rx { port: 0, buf: 7 }).unwrap();
        assert!(links[0].recv().is_none());
        assert!(matches!(
            links[1].recv(),
            Some(Steered::Rx { port: 0, buf: 7 })
        ));
        for i in 0..INBOX_FRAMES as u32 {
            links[0].send(1, Steered::Tx { port: 0, buf: i }).unwrap();
        }
        assert!(links[0].send(1, Steered::Tx { port: 0, buf: 0 }).is_err());
    }
}
