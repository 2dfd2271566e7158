//! New connections on a listener (RFC 9293 §3.10.7.2, LISTEN): SYNs
//! answered with state or with a cookie (RFC 4987), cookie ACKs, ISNs
//! (RFC 6528), and resets for segments to no connection (§3.10.7.1).

use std::collections::HashMap;

use super::*;

/// A retransmitted FIN restarts TIME-WAIT's 2 MSL; a restart by less than
/// a 32nd of it (under a second with the default 30 s) changes the
/// entry's deadline where it is in the table's ring rather than moving
/// it, so a FIN flood on one 4-tuple cannot fill the ring with holes.
const RESTART_STEPS: u32 = 32;

/// How far past the old connection's SND.NXT a 4-tuple reopened from
/// TIME-WAIT starts: beyond any window it offered (Linux adds the same).
const REOPEN_GAP: i32 = 65_535 + 2;

impl<A: Default> TcpEngine<A> {
    // RFC 9293 §3.10.7.2, LISTEN.
    /// `after`: the SND.NXT of the connection in TIME-WAIT this SYN
    /// reopens, if it does.
    pub(super) fn on_listen<I: FlowAddr>(
        &mut self,
        now: Instant,
        key: FlowKey<I>,
        repr: &TcpRepr<'_>,
        after: Option<Seq>,
    ) -> Result<(), SegmentDrop> {
        if self.denied(&key, repr, now) {
            return Err(SegmentDrop::Denied);
        }
        if !self.accepting {
            // Draining: no new connection (a reset tells the client at once).
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        }
        match (repr.control, repr.ack_number) {
            (TcpControl::Rst, _) => return Err(SegmentDrop::NoConnection),
            (TcpControl::Syn, Some(_)) => {
                self.reset_for(&key, repr);
                return Err(SegmentDrop::NoConnection);
            }
            (_, Some(ack)) => return self.on_cookie_ack(now, key, repr, Seq(ack.0 as u32)),
            (TcpControl::Syn, None) => {}
            _ => return Err(SegmentDrop::NoConnection),
        }
        if self.flows.conns() >= self.cfg.max_conns {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        if !self.buffers.can_take() {
            self.counters.syn_no_memory += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        let Some(listener) = self.listener_for(key.local, key.local_port) else {
            // A SYN reopening a TIME-WAIT 4-tuple no listener takes.
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        };
        if !self.listeners[listener].allows(key.remote.ip()) {
            // Not on the VIP's allow list: as a denied source, no answer.
            self.count_refusal(listener, limits::Refusal::Denied, key.remote, now);
            return Err(SegmentDrop::Denied);
        }
        if self.admit(listener, &key, now).is_err() {
            self.reset_for(&key, repr);
            return Err(SegmentDrop::Refused);
        }
        let full = self.states[State::SynReceived as usize] as usize >= self.cfg.max_half_open;
        match self.cfg.syn_cookies {
            SynCookies::Always => return self.send_cookie(now, key, repr),
            SynCookies::WhenFull if full => return self.send_cookie(now, key, repr),
            SynCookies::Off if full => {
                self.counters.syn_dropped += 1;
                return Err(SegmentDrop::ListenOverflow);
            }
            _ => {}
        }
        let mut iss = self.isn(&key, now);
        // Reopening a 4-tuple from TIME-WAIT: our ISN past the old
        // connection's sequence space by a window at least (RFC 1122
        // §4.2.2.13, as Linux), so none of its duplicates still in the
        // network fits the new one (its peer may have no timestamps to
        // tell them apart).
        if let Some(old) = after {
            if iss.diff(old) < REOPEN_GAP {
                iss = old + REOPEN_GAP as u32;
            }
        }
        let id = self.alloc_slot();
        let link = self.link_for(key.local);
        let conn = Conn::accept(I::inline_key(key), I::IPV6, repr, iss, now, &self.cfg, link);
        self.install(id, key, conn);
        self.listener_opened(listener, id);
        I::table_mut(&mut self.flows).insert_conn(key, id);
        self.account(None, Some(State::SynReceived));
        let c = live_mut(&mut self.conns, id).expect("just made");
        mark_dirty(&mut self.dirty, c, id);
        self.rearm(id, now);
        Ok(())
    }

    /// Whether listener `i` admits a SYN for `key` now (counted if not).
    fn admit<I: FlowAddr>(
        &mut self,
        i: usize,
        key: &FlowKey<I>,
        now: Instant,
    ) -> Result<(), limits::Refusal> {
        let source = key.remote.source_id();
        let secret = &self.secret;
        let result = self.listeners[i].admit(source, || source_hash(secret, source), now);
        if let Err(why) = result {
            self.count_refusal(i, why, key.remote, now);
        }
        result
    }

    /// Whether the source of `repr`, a segment to no connection, is
    /// denied (`[access] deny`): dropped unanswered, whatever it is (a
    /// reset would tell a scanner what listens), a SYN counted under its
    /// listener.
    fn denied<I: FlowAddr>(&mut self, key: &FlowKey<I>, repr: &TcpRepr<'_>, now: Instant) -> bool {
        if self.deny.is_empty() || !self.deny.contains(key.remote.ip()) {
            return false;
        }
        if (repr.control, repr.ack_number) == (TcpControl::Syn, None) {
            if let Some(i) = self.listener_for(key.local, key.local_port) {
                self.count_refusal(i, limits::Refusal::Denied, key.remote, now);
            }
        }
        true
    }

    /// Takes `deny` as the networks refused from now on, and resets the
    /// connections accepted from them (counted); connections we opened
    /// (to backends) are not looked at. One pass over the slab when the
    /// set changed, none otherwise.
    pub fn set_deny(&mut self, deny: Arc<PrefixSet>) {
        self.replace_deny(deny, true);
    }

    /// As [`Self::set_deny`], the pass over the slab only when `added`
    /// (the set holds a network the one it replaces did not: without one,
    /// no open connection can be from a network now denied).
    pub fn replace_deny(&mut self, deny: Arc<PrefixSet>, added: bool) {
        if Arc::ptr_eq(&deny, &self.deny) {
            return;
        }
        self.deny = deny;
        if added && !self.deny.is_empty() {
            let deny = Arc::clone(&self.deny);
            let n = self.reset_accepted(CloseReason::Denied, |_, key, _| {
                deny.contains(key.remote_addr().ip())
            });
            self.counters.denied_resets += n;
        }
    }

    /// Takes `allow` as the client networks listener `addr:port` takes
    /// connections from (`None`: any), and resets the connections it has
    /// from others (counted as denied). One pass over the slab when the
    /// list changed, none otherwise.
    pub fn set_allow(&mut self, addr: IpAddr, port: u16, allow: Option<Arc<PrefixSet>>) {
        let Some(l) = self
            .listeners
            .iter_mut()
            .find(|l| l.addr == addr && l.port == port)
        else {
            return;
        };
        let same = match (&l.allow, &allow) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        if same {
            return;
        }
        l.allow = allow;
        let Some(allow) = l.allow.clone() else {
            return;
        };
        let n = self.reset_accepted(CloseReason::Denied, |l, key, _| {
            let ours = listener_addr(l, key) == addr && key.local_addr().port() == port;
            ours && !allow.contains(key.remote_addr().ip())
        });
        self.counters.denied_resets += n;
    }

    /// Resets every connection a listener accepted whose listener,
    /// 4-tuple and state `gone` picks, and returns how many (the caller
    /// counts them); connections we opened (to backends) are not looked
    /// at.
    pub(super) fn reset_accepted(
        &mut self,
        reason: CloseReason,
        gone: impl Fn(conn::ListenerAddr, AnyFlowKey, &Conn<A>) -> bool,
    ) -> u64 {
        let mut ids = Vec::new();
        for slot in 0..self.conns.len() {
            let Some((c, l)) = self.conns[slot]
                .as_ref()
                .and_then(|c| Some((c, c.listener?)))
            else {
                continue;
            };
            let id = ConnId::new(slot as u32, c.gen);
            if self.key(id).is_some_and(|k| gone(l, k, c)) {
                ids.push(id);
            }
        }
        for &id in &ids {
            self.abort_for(id, reason);
        }
        ids.len() as u64
    }

    /// Counts a refusal by listener `i` of a SYN (or handshake) from
    /// `source`: under the listener's VIP, and in the table of sources
    /// refused lately.
    fn count_refusal<I: FlowAddr>(
        &mut self,
        i: usize,
        why: limits::Refusal,
        source: I,
        now: Instant,
    ) {
        let id = source.source_id();
        let hash = source_hash(&self.secret, id);
        let vip = self.listeners[i].tag;
        self.refused_sources
            .record(id, I::IPV6, vip, hash, why, now);
        let tag = self.listeners[i].tag.map(usize::from);
        if let Some(r) = tag.and_then(|t| self.refused.get_mut(t)) {
            r.count(why);
        }
    }

    /// Connection `id`, just installed, counts as listener `i`'s.
    fn listener_opened(&mut self, i: usize, id: ConnId) {
        let l = &mut self.listeners[i];
        l.open += 1;
        if let Some(c) = live_mut(&mut self.conns, id) {
            c.listener = Some(if l.addr.is_unspecified() {
                conn::ListenerAddr::Any
            } else {
                conn::ListenerAddr::Own
            });
        }
    }

    /// Connection `id`, opened by a listener, completed its handshake: it
    /// spends one of its source's new connections there (where the
    /// listener limits their rate) and counts against its source's
    /// established connections until it ends (where the listener caps
    /// them). False when its source is over either: the caller resets it
    /// (counted).
    pub(super) fn count_source(&mut self, id: ConnId, now: Instant) -> bool {
        let Some(key) = self.key(id) else {
            return true;
        };
        let Some(l) = live(&self.conns, id).and_then(|c| c.listener) else {
            return true;
        };
        let (addr, port) = (listener_addr(l, key), key.local_addr().port());
        let Some(i) = self
            .listeners
            .iter()
            .position(|x| x.addr == addr && x.port == port)
        else {
            return true;
        };
        let source = source_id(key);
        let secret = &self.secret;
        match self.listeners[i].source_established(source, || source_hash(secret, source), now) {
            Ok(counted) => {
                if let Some(c) = live_mut(&mut self.conns, id) {
                    c.source_counted = counted;
                }
                true
            }
            Err(why) => {
                match key {
                    AnyFlowKey::V4(k) => self.count_refusal(i, why, k.remote, now),
                    AnyFlowKey::V6(k) => self.count_refusal(i, why, k.remote, now),
                }
                // Never reported: its reset frees it unseen.
                if let Some(c) = live_mut(&mut self.conns, id) {
                    c.accepted = false;
                }
                false
            }
        }
    }

    /// The client addresses (IPv6: /64 networks, as the per-source
    /// limits count them) with the most connections accepted from them
    /// open now, to `local` only when given: at most `max`, most first.
    /// One pass over the slab, for `dpctl sources`.
    pub fn sources(&self, local: Option<(IpAddr, u16)>, max: usize) -> Vec<SourceCount> {
        let mut by_source: HashMap<IpAddr, SourceCount> = HashMap::new();
        for (slot, c) in self.conns.iter().enumerate() {
            let Some(c) = c
                .as_ref()
                .filter(|c| c.listener.is_some() && c.state != State::TimeWait)
            else {
                continue;
            };
            let Some(key) = self.key(ConnId::new(slot as u32, c.gen)) else {
                continue;
            };
            if local.is_some_and(|l| l != listened_at(c, key)) {
                continue;
            }
            let source = match key.remote_addr().ip() {
                IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !u128::from(u64::MAX)).into()),
                v4 => v4,
            };
            let n = by_source.entry(source).or_insert(SourceCount {
                source,
                established: 0,
                half_open: 0,
            });
            if c.state == State::SynReceived {
                n.half_open += 1;
            } else {
                n.established += 1;
            }
        }
        let mut all: Vec<SourceCount> = by_source.into_values().collect();
        let most_first = |a: &SourceCount, b: &SourceCount| {
            (b.established + b.half_open, b.established, a.source).cmp(&(
                a.established + a.half_open,
                a.established,
                b.source,
            ))
        };
        // The first `max` picked in linear time, only they sorted: under a
        // flood from a million sources (when an operator asks) this runs
        // inside the engine's loop.
        if max < all.len() {
            all.select_nth_unstable_by(max, most_first);
            all.truncate(max);
        }
        all.sort_unstable_by(most_first);
        all
    }

    /// Listener `i`'s per-source cap was set where there was none, or
    /// taken away: its connections that completed their handshake are
    /// counted against their sources afresh (or no longer), as if the cap
    /// had always been there, so that new connections see them and their
    /// ends lower only counts they raised. One pass over the slab, on a
    /// configuration change.
    pub(super) fn recount_sources(&mut self, i: usize) {
        let Some(listener) = self.listeners.get(i) else {
            return;
        };
        let (addr, port, counting) = (listener.addr, listener.port, listener.counts_sources());
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_ref() else {
                continue;
            };
            let Some(l) = c.listener.filter(|_| c.accepted) else {
                continue;
            };
            let Some(key) = self.key(ConnId::new(slot as u32, c.gen)) else {
                continue;
            };
            if listener_addr(l, key) != addr || key.local_addr().port() != port {
                continue;
            }
            if counting {
                self.listeners[i].source_recounted(source_id(key));
            }
            if let Some(c) = self.conns[slot].as_mut() {
                c.source_counted = counting;
            }
        }
    }

    /// A connection of listener `addr:port` ended (from `source`, when it
    /// was counted against it).
    pub(super) fn listener_closed(&mut self, addr: IpAddr, port: u16, source: Option<u64>) {
        if let Some(i) = self
            .listeners
            .iter()
            .position(|l| l.addr == addr && l.port == port)
        {
            let l = &mut self.listeners[i];
            l.open = l.open.saturating_sub(1);
            if let Some(s) = source {
                l.source_ended(s);
            }
            if !l.accepting && l.open == 0 {
                self.listeners.swap_remove(i);
            }
        }
    }

    /// Answers a SYN statelessly with a cookie SYN-ACK.
    fn send_cookie<I: FlowAddr>(
        &mut self,
        now: Instant,
        key: FlowKey<I>,
        syn: &TcpRepr<'_>,
    ) -> Result<(), SegmentDrop> {
        if self.cookie_synacks.len() >= MAX_COOKIE_SYNACKS {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        let client_isn = Seq(syn.seq_number.0 as u32);
        // The MSS this link takes (a jumbo port's, where the VIP is on
        // one): offered in the SYN-ACK, and the cap on the SYN's.
        let our_mss = self.link_for(key.local).mss;
        let params = cookie::SynParams {
            mss: syn.max_seg_size.unwrap_or(536).min(our_mss),
            wscale: syn.window_scale,
            sack: syn.sack_permitted,
        };
        let iss = cookie::encode(&self.secret, &key, client_isn, now, params);
        self.last_cookie = Some(now);
        self.cookie_synacks.push(CookieSynAck {
            key: I::any(key),
            iss,
            ack: client_isn + 1,
            mss: our_mss,
            wscale: syn.window_scale.is_some(),
            sack: syn.sack_permitted,
            ts_echo: syn.timestamp.map(|t| t.tsval),
        });
        self.counters.syn_cookies_sent += 1;
        Ok(())
    }

    /// An ACK to a listener with no connection: the third step of a
    /// handshake answered with a cookie, or a stray segment (reset).
    fn on_cookie_ack<I: FlowAddr>(
        &mut self,
        now: Instant,
        key: FlowKey<I>,
        repr: &TcpRepr<'_>,
        ack: Seq,
    ) -> Result<(), SegmentDrop> {
        let client_isn = Seq(repr.seq_number.0 as u32) + u32::MAX; // SEG.SEQ − 1
        let cookies_out = self.cfg.syn_cookies != SynCookies::Off
            && self
                .last_cookie
                .is_some_and(|t| cookie::period(now) <= cookie::period(t) + 1);
        if !cookies_out {
            // No cookie of ours can be out: a stray segment (RFC 9293
            // §3.10.7.2: an ACK to LISTEN gets a reset).
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        }
        let Some(params) = cookie::decode(&self.secret, &key, client_isn, ack + u32::MAX, now)
        else {
            self.counters.syn_cookies_rejected += 1;
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        };
        if self.flows.conns() >= self.cfg.max_conns {
            self.counters.syn_dropped += 1;
            return Err(SegmentDrop::ListenOverflow);
        }
        // The connection cap is looked at again now; the per-source
        // limits as the handshake completes (`count_source`).
        let Some(listener) = self.listener_for(key.local, key.local_port) else {
            self.reset_for(&key, repr);
            return Err(SegmentDrop::NoConnection);
        };
        if !self.listeners[listener].allows(key.remote.ip()) {
            return Err(SegmentDrop::Denied);
        }
        if self.listeners[listener].at_conn_limit() {
            self.count_refusal(listener, limits::Refusal::ConnLimit, key.remote, now);
            self.reset_for(&key, repr);
            return Err(SegmentDrop::Refused);
        }
        self.counters.syn_cookies_accepted += 1;
        let id = self.alloc_slot();
        let mut conn = Conn::from_cookie(
            I::inline_key(key),
            I::IPV6,
            repr,
            ack + u32::MAX,
            client_isn,
            params.mss,
            params.wscale,
            params.sack,
            now,
            &self.cfg,
            self.link_for(key.local),
        );
        let out = conn.input(now, repr, &self.cfg, &mut self.buffers, &mut self.counters);
        let state = conn.state;
        self.install(id, key, conn);
        self.listener_opened(listener, id);
        I::table_mut(&mut self.flows).insert_conn(key, id);
        self.account(None, Some(state));
        if !self.count_source(id, now) {
            // Its source is over the listener's cap or rate (counted).
            self.abort(id);
            return Ok(());
        }
        self.counters.accepted += 1;
        self.events.push(Event::Accepted(id));
        self.apply(id, out, now);
        Ok(())
    }

    /// RFC 6528 §3: ISN = M + F(4-tuple, secretkey), M a 4 µs clock and F
    /// SipHash-2-4 under the engine's secret. The secret stays for the
    /// process's life: F must not change for a 4-tuple, or a new
    /// connection's ISN could fall below an old one's still in a peer's
    /// TIME-WAIT (RFC 6528 §3 on changing the key).
    pub(super) fn isn<I: FlowAddr>(&self, key: &FlowKey<I>, now: Instant) -> Seq {
        let mut h = self.secret.prf(b'i');
        key.hash_tuple(&mut h);
        Seq(h.finish() as u32) + (now.as_nanos() / 4000) as u32
    }

    /// A segment for a 4-tuple in the TIME-WAIT table (RFC 9293 §3.10.7.4,
    /// TIME-WAIT). An RST is ignored (RFC 1337: it would end TIME-WAIT
    /// early). A new SYN reopens the 4-tuple when it is newer than the old
    /// connection: a higher TSval when both used timestamps (RFC 6191),
    /// else a sequence number above the old one's (§3.6.1). Anything else
    /// but a bare ACK at RCV.NXT gets our ACK; a FIN (the peer did not get
    /// our last ACK) restarts the 2 MSL wait (`RESTART_STEPS`).
    pub(super) fn on_time_wait<I: FlowAddr>(
        &mut self,
        now: Instant,
        tw: TimeWait<I>,
        repr: &TcpRepr<'_>,
    ) -> Result<(), SegmentDrop> {
        let seq = Seq(repr.seq_number.0 as u32);
        match repr.control {
            TcpControl::Rst => return Ok(()),
            TcpControl::Syn if repr.ack_number.is_none() => {
                let newer = match (tw.ts_recent, repr.timestamp) {
                    (Some(recent), Some(ts)) => (ts.tsval.wrapping_sub(recent) as i32) > 0,
                    _ => seq > tw.rcv_nxt,
                };
                if newer {
                    I::table_mut(&mut self.flows).end_time_wait(&tw.key);
                    return self.on_listen(now, tw.key, repr, Some(tw.snd_nxt));
                }
            }
            // Only the FIN we took, sent again (RFC 9293 §3.10.7.4: "a
            // retransmission of the remote FIN"), restarts the wait: any
            // other, whoever knows the 4-tuple could keep it forever.
            TcpControl::Fin if seq + repr.payload.len() as u32 + 1 == tw.rcv_nxt => {
                let until = now + self.cfg.time_wait;
                let step = self.cfg.time_wait / RESTART_STEPS;
                I::table_mut(&mut self.flows).restart_time_wait(&tw.key, until, step);
            }
            _ => {}
        }
        if repr.segment_len() == 0 && seq == tw.rcv_nxt && repr.control != TcpControl::Syn {
            return Ok(());
        }
        if self.time_wait_acks.len() < MAX_RESETS {
            self.time_wait_acks.push(output::TimeWaitAck::new(&tw));
        }
        Ok(())
    }

    // RFC 9293 §3.10.7.1, CLOSED: answer with a reset.
    pub(super) fn reset_for<I: FlowAddr>(&mut self, key: &FlowKey<I>, repr: &TcpRepr<'_>) {
        if repr.control == TcpControl::Rst {
            return;
        }
        match repr.ack_number {
            Some(ack) => self.queue_reset(I::any(*key), Seq(ack.0 as u32), None),
            None => {
                let ack = Seq(repr.seq_number.0 as u32) + repr.segment_len() as u32;
                self.queue_reset(I::any(*key), Seq(0), Some(ack));
            }
        }
    }
}

/// The address of the listener a connection of `key` counts against.
pub(super) fn listener_addr(l: conn::ListenerAddr, key: AnyFlowKey) -> IpAddr {
    match (l, key.local_addr().ip()) {
        (conn::ListenerAddr::Own, ip) => ip,
        (conn::ListenerAddr::Any, IpAddr::V4(_)) => Ipv4Addr::UNSPECIFIED.into(),
        (conn::ListenerAddr::Any, IpAddr::V6(_)) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// The listener address and port connection `c` (at `key`) came through:
/// a wildcard VIP's `0.0.0.0:P` or `[::]:P` for the connections it took,
/// the local address otherwise.
pub(super) fn listened_at<A>(c: &conn::Conn<A>, key: AnyFlowKey) -> (IpAddr, u16) {
    let local = key.local_addr();
    let ip = c.listener.map_or(local.ip(), |l| listener_addr(l, key));
    (ip, local.port())
}

/// What a per-source limit counts the remote end of `key` as
/// ([`FlowAddr::source_id`]).
pub(super) fn source_id(key: AnyFlowKey) -> u64 {
    match key {
        AnyFlowKey::V4(k) => k.remote.source_id(),
        AnyFlowKey::V6(k) => k.remote.source_id(),
    }
}

/// `source`'s keyed hash, which picks its set in the rate table.
fn source_hash(secret: &Secret, source: u64) -> u64 {
    let mut h = secret.prf(b's');
    h.write_u64(source);
    h.finish()
}

/// Connections from one client address (an IPv6 /64) open now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceCount {
    /// The address, or the /64's first address.
    pub source: IpAddr,
    /// Past the handshake (closing ones too; TIME-WAIT not counted).
    pub established: u32,
    /// SYN-RECEIVED.
    pub half_open: u32,
}
