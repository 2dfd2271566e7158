//! The TCP engine's clock and output: timers due, then every segment
//! owed (resets, cookie SYN-ACKs, connections with something to send).

use super::*;

/// The ACK a segment to a TIME-WAIT entry is owed (RFC 9293 §3.10.7.4).
#[derive(Debug, Clone, Copy)]
pub(super) struct TimeWaitAck {
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    dst_port: u16,
    snd_nxt: Seq,
    rcv_nxt: Seq,
    ts_recent: Option<u32>,
    window: u16,
}

impl TimeWaitAck {
    pub fn new<I: FlowAddr>(tw: &TimeWait<I>) -> Self {
        Self {
            src: tw.key.local.ip(),
            dst: tw.key.remote.ip(),
            src_port: tw.key.local_port,
            dst_port: tw.key.remote_port,
            snd_nxt: tw.snd_nxt,
            rcv_nxt: tw.rcv_nxt,
            ts_recent: tw.ts_recent,
            window: tw.window,
        }
    }
}

impl<A: Default> TcpEngine<A> {
    /// Runs due timers; returns how many connection timers fired (stale
    /// wheel entries and TIME-WAIT's expiry not counted).
    pub fn poll_timers(&mut self, now: Instant) -> usize {
        self.flows.v4.expire(now);
        self.flows.v6.expire(now);
        let mut due = std::mem::take(&mut self.fired);
        self.timers.expire(now, |id, at| due.push((id, at)));
        let mut fired = 0;
        for &(id, at) in &due {
            let Some(c) = live_mut(&mut self.conns, id) else {
                continue;
            };
            if !c.armed.take(at) {
                continue; // stale entry
            }
            fired += 1;
            let before = c.state;
            let out = c.on_timer(now, &self.cfg, &mut self.counters);
            let after = c.state;
            self.transition(before, after);
            self.apply(id, out, now);
        }
        due.clear();
        self.fired = due;
        fired
    }

    /// Sends the queued resets (ours, or those for stray segments); false
    /// when `emit` could not take one (it stays queued).
    fn send_resets(&mut self, own: bool, emit: &mut impl FnMut(&Outgoing<'_>) -> bool) -> bool {
        loop {
            let queue = if own {
                &mut self.own_resets
            } else {
                &mut self.resets
            };
            let Some(r) = queue.pop() else {
                return true;
            };
            let repr = TcpRepr {
                src_port: r.src_port,
                dst_port: r.dst_port,
                control: TcpControl::Rst,
                seq_number: TcpSeqNumber(r.seq.0 as i32),
                ack_number: r.ack.map(|a| TcpSeqNumber(a.0 as i32)),
                window_len: 0,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: None,
                payload: &[],
            };
            if !emit(&Outgoing {
                src: r.src,
                dst: r.dst,
                repr,
                segment_size: 0,
            }) {
                queue.push(r);
                return false;
            }
            self.counters.resets_sent += 1;
            self.counters.segments_out += 1;
        }
    }

    /// Produces every segment owed: resets, handshakes, data, FINs, ACKs.
    /// `emit` builds and queues the frame; it returns false when it cannot
    /// (no buffer), and transmission stops there until the next call.
    pub fn transmit(&mut self, now: Instant, mut emit: impl FnMut(&Outgoing<'_>) -> bool) {
        for own in [true, false] {
            if !self.send_resets(own, &mut emit) {
                return;
            }
        }
        while let Some(tw) = self.time_wait_acks.pop() {
            let repr = TcpRepr {
                src_port: tw.src_port,
                dst_port: tw.dst_port,
                control: TcpControl::None,
                seq_number: TcpSeqNumber(tw.snd_nxt.0 as i32),
                ack_number: Some(TcpSeqNumber(tw.rcv_nxt.0 as i32)),
                window_len: tw.window,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: tw
                    .ts_recent
                    .map(|r| TcpTimestampRepr::new((now.as_nanos() / 1_000_000) as u32, r)),
                payload: &[],
            };
            if !emit(&Outgoing {
                src: tw.src,
                dst: tw.dst,
                repr,
                segment_size: 0,
            }) {
                self.time_wait_acks.push(tw);
                return;
            }
            self.counters.segments_out += 1;
        }
        while let Some(c) = self.cookie_synacks.pop() {
            let (local, remote) = (c.key.local_addr(), c.key.remote_addr());
            let repr = TcpRepr {
                src_port: local.port(),
                dst_port: remote.port(),
                control: TcpControl::Syn,
                seq_number: TcpSeqNumber(c.iss.0 as i32),
                ack_number: Some(TcpSeqNumber(c.ack.0 as i32)),
                window_len: self.cfg.buffer_size.min(65535) as u16,
                window_scale: c.wscale.then_some(self.cfg.window_scale),
                max_seg_size: Some(c.mss),
                sack_permitted: c.sack,
                sack_ranges: [None; 3],
                timestamp: c
                    .ts_echo
                    .map(|e| TcpTimestampRepr::new((now.as_nanos() / 1_000_000) as u32, e)),
                payload: &[],
            };
            if !emit(&Outgoing {
                src: local.ip(),
                dst: remote.ip(),
                repr,
                segment_size: 0,
            }) {
                self.cookie_synacks.push(c);
                return;
            }
            self.counters.segments_out += 1;
        }
        let mut i = 0;
        while i < self.dirty.len() {
            let id = self.dirty[i];
            i += 1;
            let Some(c) = live_mut(&mut self.conns, id) else {
                continue;
            };
            c.queued = false;
            let Some(path) = Self::path(&self.keys6, c, id) else {
                continue;
            };
            let before = c.state;
            let blocked = !c.transmit(now, &self.cfg, &mut self.counters, path, &mut emit);
            if blocked {
                c.queued = true;
            }
            let after = c.state;
            let retire = after == State::TimeWait && !blocked && c.drained();
            self.transition(before, after);
            if blocked {
                self.dirty.drain(..i - 1);
                return;
            }
            if retire {
                self.retire_to_time_wait(id, now);
                continue;
            }
            self.rearm(id, now);
        }
        self.dirty.clear();
    }
}
