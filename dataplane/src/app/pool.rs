//! Backend pools: members with weights and states, and the choice of a
//! member for each new connection. Each engine keeps its own copy (its own
//! connection counts and cursors): share-nothing, as everything per core.

use std::net::{IpAddr, SocketAddr};

pub use control::config::{Balance, MemberState};

/// One backend server of a pool.
#[derive(Debug, Clone)]
pub struct Member {
    pub addr: SocketAddr,
    pub weight: u32,
    pub state: MemberState,
    /// Connections to it open now (from this engine).
    pub active: u32,
    /// Connections it was given, and connects that failed (refused, or
    /// not established in time).
    pub picked: u64,
    pub failed: u64,
    /// Until then new connections pass it over: a connect to it failed
    /// (its pool's `fail_timeout`, as nginx's `fail_timeout`).
    pub passed_over_until: crate::time::Instant,
    /// Health as checked by this engine.
    pub health: super::health::MemberHealth,
    /// Taken out of the configuration; kept (down) while connections to it
    /// are open, so their counts stay right.
    pub removed: bool,
    /// Smooth weighted round robin's running weight.
    current: i64,
    /// What source hashing keys this member on: its address, so a client
    /// keeps its member whatever the member's place in the list (which
    /// differs between engines, nodes and restarts).
    hash_key: u64,
}

impl Member {
    pub fn new(addr: impl Into<SocketAddr>, weight: u32, state: MemberState) -> Self {
        let addr = addr.into();
        Self {
            addr,
            weight: weight.max(1),
            state,
            active: 0,
            picked: 0,
            failed: 0,
            passed_over_until: crate::time::Instant::ZERO,
            health: super::health::MemberHealth::default(),
            removed: false,
            current: 0,
            hash_key: mix(fold_ip(addr.ip()) ^ u64::from(addr.port()).rotate_left(48)),
        }
    }
}

/// A pool as one engine sees it.
#[derive(Debug, Clone)]
pub struct Pool {
    pub name: String,
    pub balance: Balance,
    pub members: Vec<Member>,
    /// Health checks, when configured (members' results in `Member::health`).
    pub check: Option<super::health::HealthCheck>,
    /// Backend connections start with a PROXY protocol v2 header.
    pub proxy_protocol: bool,
    /// How long a backend connect may take before the next member is tried.
    pub connect_timeout: std::time::Duration,
    /// How long new connections pass over a member a connect failed to
    /// (zero: never).
    pub fail_timeout: std::time::Duration,
    /// Members one client's connection is tried on at most.
    pub connect_tries: u32,
    /// Taken out of the configuration; kept while connections use it
    /// (those that started before still get members), never health checked.
    pub retired: bool,
    cursor: usize,
}

/// A set of member indices (pools have at most 64 members).
pub type Tried = u64;

/// How long a member a connect failed to is passed over, unless its pool
/// says otherwise (`fail_timeout_ms`; nginx's default too).
pub const DEFAULT_FAIL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Members one client's connection is tried on, unless its pool says
/// otherwise (`connect_tries`; HAProxy's `retries 3`).
pub const DEFAULT_CONNECT_TRIES: u32 = 4;

impl Pool {
    pub fn new(name: String, balance: Balance, members: Vec<Member>) -> Self {
        Self {
            name,
            balance,
            members,
            check: None,
            proxy_protocol: false,
            connect_timeout: std::time::Duration::from_secs(3),
            fail_timeout: DEFAULT_FAIL_TIMEOUT,
            connect_tries: DEFAULT_CONNECT_TRIES,
            retired: false,
            cursor: 0,
        }
    }

    /// Takes the settings and members of `next` (the same pool in a new
    /// configuration snapshot), keeping each remaining member's state
    /// (connections, health, turns) by address. Members not in `next` are
    /// marked removed and kept while connections to them are open; a new
    /// member takes the place of a removed one without connections when
    /// the pool is full (64). A changed check runs at once (the next
    /// tick), not when the old interval would have ended: a reload from
    /// 60 s to 1 s is not left a minute without a check. False when a
    /// member found no place.
    pub fn update_from(&mut self, next: &Pool) -> bool {
        self.balance = next.balance;
        if self.check != next.check {
            for m in &mut self.members {
                m.health.next_at = crate::time::Instant::ZERO;
                m.health.last_failure = None; // of a check no longer run
            }
        }
        // A changed fail timeout holds from now on: a member passed over
        // under the old one is taken again (it is passed over anew at its
        // next failed connect).
        if self.fail_timeout != next.fail_timeout {
            for m in &mut self.members {
                m.passed_over_until = crate::time::Instant::ZERO;
            }
        }
        self.check.clone_from(&next.check);
        self.proxy_protocol = next.proxy_protocol;
        self.connect_timeout = next.connect_timeout;
        self.fail_timeout = next.fail_timeout;
        self.connect_tries = next.connect_tries;
        self.retired = false;
        for m in &mut self.members {
            m.removed = true;
        }
        // Every member still configured keeps its place first; only then
        // do new ones take places (a new member placed first could take
        // the place of one still configured further down the list).
        let mut new_members = Vec::new();
        for nm in &next.members {
            if let Some(m) = self.members.iter_mut().find(|m| m.addr == nm.addr) {
                m.weight = nm.weight;
                m.state = nm.state;
                m.removed = false;
            } else {
                new_members.push(nm);
            }
        }
        let mut placed = true;
        for nm in new_members {
            if self.members.len() < 64 {
                self.members.push(nm.clone());
            } else if let Some(m) = self.members.iter_mut().find(|m| m.removed && m.active == 0) {
                *m = nm.clone();
            } else {
                placed = false;
            }
        }
        for m in self.members.iter_mut().filter(|m| m.removed) {
            m.state = MemberState::Down;
        }
        // No check any more: a member marked down by the last one would
        // otherwise never be taken again.
        if self.check.is_none() {
            for m in &mut self.members {
                m.health.unchecked();
            }
        }
        placed
    }

    /// Pools of `waiting` (the latest definitions of pools of `pools`
    /// whose new members found no place: all 64 held by members still
    /// serving) are taken again; those whose members all have a place now
    /// leave `waiting`. Done at ticks, so a member added to a full pool
    /// arrives as soon as a removed member's last connection ends.
    pub fn place_waiting(pools: &mut [Pool], waiting: &mut Vec<Pool>) {
        waiting.retain(
            |next| match pools.iter_mut().find(|p| p.name == next.name) {
                Some(p) => {
                    let placed = p.update_from(next);
                    if placed {
                        log::info!(
                            "pool {}: the members that waited have their place",
                            next.name
                        );
                    }
                    !placed
                }
                None => false,
            },
        );
    }

    /// A connect to member `m` failed (refused, or not established within
    /// the connect timeout): counted, and new connections pass it over for
    /// `fail_timeout` (nginx's `max_fails=1 fail_timeout=...`).
    pub fn connect_failed(&mut self, m: usize, now: crate::time::Instant) {
        let fail_timeout = self.fail_timeout;
        if let Some(member) = self.members.get_mut(m) {
            member.failed += 1;
            if !fail_timeout.is_zero() {
                member.passed_over_until = now + fail_timeout;
            }
        }
    }

    /// The member for a new connection from `client` at `now`, other than
    /// those in `tried`: one a connect recently failed to only when no
    /// other is left (then it is tried anyway, as nginx does).
    pub fn pick_at(
        &mut self,
        now: crate::time::Instant,
        client: impl Into<IpAddr>,
        tried: Tried,
    ) -> Option<usize> {
        let client = client.into();
        let passed_over = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.passed_over_until > now)
            .fold(0, |mask: Tried, (i, _)| mask | 1 << i);
        match self.pick(client, tried | passed_over) {
            None if passed_over & !tried != 0 => self.pick(client, tried),
            chosen => chosen,
        }
    }

    /// Whether some member would take a new connection (up, and healthy
    /// as this engine sees it).
    pub fn any_usable(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.state == MemberState::Up && m.health.healthy)
    }

    /// The member for a new connection from `client`, other than those in
    /// `tried`; `None` when no member is up. Counts it as picked.
    pub fn pick(&mut self, client: impl Into<IpAddr>, tried: Tried) -> Option<usize> {
        // What source hashing keys on: an IPv4 address as it is, an IPv6
        // one folded to 64 bits.
        let client = fold_ip(client.into());
        let usable = |i: usize, m: &Member| {
            m.state == MemberState::Up && m.health.healthy && tried & (1 << i) == 0
        };
        let n = self.members.len();
        let chosen = match self.balance {
            Balance::RoundRobin => (0..n)
                .map(|k| (self.cursor + k) % n)
                .find(|&i| usable(i, &self.members[i])),
            Balance::WeightedRoundRobin => {
                // nginx's smooth weighted round robin: spreads a member's
                // turns evenly instead of in bursts.
                let mut total = 0i64;
                let mut best: Option<(usize, i64)> = None;
                for (i, m) in self.members.iter_mut().enumerate() {
                    if m.state != MemberState::Up || !m.health.healthy || tried & (1 << i) != 0 {
                        continue;
                    }
                    m.current += i64::from(m.weight);
                    total += i64::from(m.weight);
                    if best.is_none_or(|(_, c)| m.current > c) {
                        best = Some((i, m.current));
                    }
                }
                let best = best.map(|(i, _)| i);
                if let Some(b) = best {
                    self.members[b].current -= total;
                }
                best
            }
            Balance::LeastConn | Balance::WeightedLeastConn => {
                let weighted = self.balance == Balance::WeightedLeastConn;
                // Fewest active (per weight); ties go round robin.
                (0..n)
                    .map(|k| (self.cursor + k) % n)
                    .filter(|&i| usable(i, &self.members[i]))
                    .min_by(|&a, &b| {
                        let (ma, mb) = (&self.members[a], &self.members[b]);
                        let (wa, wb) = if weighted {
                            (u64::from(ma.weight), u64::from(mb.weight))
                        } else {
                            (1, 1)
                        };
                        (u64::from(ma.active) * wb).cmp(&(u64::from(mb.active) * wa))
                    })
            }
            Balance::SourceHash => {
                // Rendezvous hashing, weighted (score = w / -ln(u)): a
                // client keeps its member while that member is up, and only
                // the clients of a member that goes away move. Keyed on
                // the member's address, not its place in the list.
                let client = mix(client);
                (0..n)
                    .filter(|&i| usable(i, &self.members[i]))
                    .map(|i| {
                        let h = mix(client ^ self.members[i].hash_key);
                        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                        (i, f64::from(self.members[i].weight) / -u.ln())
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(i, _)| i)
            }
        };
        if let Some(i) = chosen {
            self.cursor = (i + 1) % n;
            self.members[i].picked += 1;
        }
        chosen
    }
}

/// An address as 64 bits: IPv4 as it is, IPv6 folded.
fn fold_ip(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => u64::from(u32::from(a)),
        IpAddr::V6(a) => {
            let a = u128::from(a);
            mix((a >> 64) as u64 ^ a as u64)
        }
    }
}

/// A 64-bit mixer (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};

    fn pool(balance: Balance, weights: &[u32]) -> Pool {
        Pool::new(
            "p".into(),
            balance,
            weights
                .iter()
                .enumerate()
                .map(|(i, &w)| {
                    Member::new(
                        SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, i as u8 + 2), 80),
                        w,
                        MemberState::Up,
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn a_member_added_to_a_full_pool_arrives_once_a_removed_ones_connections_end() {
        // 64 members; the first removed while a connection uses it, and a
        // new one added: no place until that connection ends.
        let mut p = pool(Balance::RoundRobin, &[1; 64]);
        p.members[0].active = 1;
        let mut next = p.clone();
        next.members.remove(0);
        let newcomer = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 1), 80));
        next.members.push(Member::new(newcomer, 1, MemberState::Up));
        assert!(!p.update_from(&next), "no place yet");
        let mut waiting = vec![next];
        Pool::place_waiting(std::slice::from_mut(&mut p), &mut waiting);
        assert_eq!(waiting.len(), 1, "still none");
        assert!(!p.members.iter().any(|m| m.addr == newcomer));
        p.members[0].active = 0;
        Pool::place_waiting(std::slice::from_mut(&mut p), &mut waiting);
        assert!(waiting.is_empty());
        let m = p
            .members
            .iter()
            .find(|m| m.addr == newcomer)
            .expect("placed");
        assert_eq!(m.state, MemberState::Up);
        assert!(!m.removed);
        assert_eq!(p.members.len(), 64);
    }

    /// A full pool (64) whose first member is replaced by a new address
    /// while other members stay: each member still configured keeps its
    /// place and its state (connections, health); the newcomer takes the
    /// removed member's place once that has no connection. Before, the
    /// newcomer took the place of the next idle member still configured,
    /// which took the next one's, and so on: each came back with fresh
    /// state (a member down by its checks came back healthy, its counts
    /// gone) and the last
    /// found no place.
    #[test]
    fn a_full_pool_keeps_every_configured_member_in_its_place() {
        let mut p = pool(Balance::RoundRobin, &[1; 64]);
        p.members[0].active = 1;
        p.members[1].failed = 3;
        p.members[2].picked = 7;
        let before: Vec<SocketAddr> = p.members.iter().map(|m| m.addr).collect();
        let mut next = p.clone();
        let newcomer = SocketAddr::from(SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 1), 80));
        next.members[0] = Member::new(newcomer, 1, MemberState::Up);
        assert!(!p.update_from(&next), "no place while member 0 serves");
        let after: Vec<SocketAddr> = p.members.iter().map(|m| m.addr).collect();
        assert_eq!(after, before, "every member in its place");
        assert!(p.members[0].removed && p.members[0].active == 1);
        assert_eq!(p.members[1].failed, 3, "its state kept");
        assert_eq!(p.members[2].picked, 7);
        p.members[0].active = 0;
        assert!(p.update_from(&next));
        assert_eq!(p.members[0].addr, newcomer);
        let rest: Vec<SocketAddr> = p.members[1..].iter().map(|m| m.addr).collect();
        assert_eq!(rest, before[1..]);
        assert_eq!((p.members[1].failed, p.members[2].picked), (3, 7));
    }

    /// Source hashing keys on members' addresses: the same client gets
    /// the same member from pools listing the same members in other
    /// orders (another engine's or node's list after other changes, or
    /// the list after a restart). Before, it keyed on the place in the
    /// list.
    #[test]
    fn source_hash_follows_members_not_their_places() {
        let mut p = pool(Balance::SourceHash, &[1, 1, 1, 1, 1]);
        let mut q = p.clone();
        q.members.reverse();
        q.members.rotate_left(2);
        for k in 0..200u32 {
            let c = Ipv4Addr::from(0xc633_6400 + k);
            let (i, j) = (p.pick(c, 0).unwrap(), q.pick(c, 0).unwrap());
            let (a, b) = (p.members[i].addr, q.members[j].addr);
            assert_eq!(a, b, "client {c}");
        }
    }

    /// A member its check marked down, then the pool's check taken away:
    /// it is chosen again. Before, it kept its last verdict and, with no
    /// check left to change it, was never chosen again.
    #[test]
    fn taking_a_pools_check_away_brings_its_members_back() {
        use crate::app::health::{HealthCheck, HealthKind};
        let check = HealthCheck {
            kind: HealthKind::Tcp,
            request: Vec::new(),
            expect: control::config::StatusRange::exact(200),
            interval: std::time::Duration::from_secs(1),
            timeout: std::time::Duration::from_secs(1),
            rise: 2,
            fall: 1,
        };
        let mut p = pool(Balance::RoundRobin, &[1]);
        p.check = Some(check.clone());
        assert_eq!(p.members[0].health.record(false, &check), Some(false));
        assert_eq!(p.pick(Ipv4Addr::new(10, 9, 0, 1), 0), None, "down");
        let mut next = p.clone();
        next.check = None;
        assert!(p.update_from(&next));
        assert_eq!(p.pick(Ipv4Addr::new(10, 9, 0, 1), 0), Some(0));
    }

    /// A check whose interval a reload shortened runs at once; a reload
    /// that leaves it as it was keeps its turn. Before, the next check
    /// waited out the old interval (a minute, from 60 s to 1 s).
    #[test]
    fn a_changed_check_runs_at_once_and_an_unchanged_one_keeps_its_turn() {
        use crate::app::health::{HealthCheck, HealthKind};
        use crate::time::Instant;
        let check = |interval_s| HealthCheck {
            kind: HealthKind::Tcp,
            request: Vec::new(),
            expect: control::config::StatusRange::exact(200),
            interval: std::time::Duration::from_secs(interval_s),
            timeout: std::time::Duration::from_secs(1),
            rise: 2,
            fall: 1,
        };
        let mut p = pool(Balance::RoundRobin, &[1, 1]);
        p.check = Some(check(60));
        let turn = Instant::ZERO + std::time::Duration::from_secs(60);
        for m in &mut p.members {
            m.health.next_at = turn;
        }
        p.members[0].health.last_failure = Some(crate::app::health::HealthFailure::TimedOut);
        let same = p.clone();
        assert!(p.update_from(&same));
        assert!(p.members.iter().all(|m| m.health.next_at == turn));
        assert!(p.members[0].health.last_failure.is_some());
        let mut shorter = p.clone();
        shorter.check = Some(check(1));
        assert!(p.update_from(&shorter));
        assert!(p.members.iter().all(|m| m.health.next_at == Instant::ZERO));
        assert_eq!(p.check, Some(check(1)));
        assert_eq!(p.members[0].health.last_failure, None, "of the old check");
    }

    /// A reload that changes the fail timeout (to 0, "never", say) takes
    /// back a member passed over under the old one; one that keeps it
    /// keeps the member passed over.
    #[test]
    fn a_changed_fail_timeout_takes_passed_over_members_back() {
        use crate::time::Instant;
        let client = Ipv4Addr::new(10, 9, 0, 1);
        let t0 = Instant::from_millis(1000);
        let mut p = pool(Balance::RoundRobin, &[1, 1]);
        p.fail_timeout = std::time::Duration::from_secs(3600);
        p.connect_failed(0, t0);
        let same = p.clone();
        assert!(p.update_from(&same));
        assert_eq!(p.pick_at(t0, client, 0), Some(1));
        assert_eq!(p.pick_at(t0, client, 0), Some(1), "still passed over");
        let mut never = p.clone();
        never.fail_timeout = std::time::Duration::ZERO;
        assert!(p.update_from(&never));
        let picks: Vec<_> = (0..2).filter_map(|_| p.pick_at(t0, client, 0)).collect();
        assert!(picks.contains(&0), "taken again: {picks:?}");
    }

    /// A member a connect failed to is passed over for the pool's
    /// `fail_timeout`, unless every member left is; with a zero timeout,
    /// never. Before, each new client was given it again (in a pool
    /// without health checks: a connect timeout's wait each, for ever).
    #[test]
    fn a_member_a_connect_failed_to_is_passed_over_for_the_fail_timeout() {
        use crate::time::Instant;
        let client = Ipv4Addr::new(10, 9, 0, 1);
        let t0 = Instant::from_millis(1000);
        let mut p = pool(Balance::RoundRobin, &[1, 1]);
        p.connect_failed(0, t0);
        assert_eq!(p.members[0].failed, 1);
        for _ in 0..4 {
            assert_eq!(p.pick_at(t0, client, 0), Some(1));
        }
        // Member 1 tried already: the failed one is tried anyway.
        assert_eq!(p.pick_at(t0, client, 1 << 1), Some(0));
        // Both failed: both tried, in turn.
        p.connect_failed(1, t0);
        let both: Vec<_> = (0..2).filter_map(|_| p.pick_at(t0, client, 0)).collect();
        assert_eq!(both.len(), 2);
        // After the fail timeout, in the turn again.
        let later = t0 + DEFAULT_FAIL_TIMEOUT;
        let mut seen = [0; 2];
        for _ in 0..4 {
            seen[p.pick_at(later, client, 0).unwrap()] += 1;
        }
        assert_eq!(seen, [2, 2]);
        // A zero fail timeout: never passed over.
        let mut p = pool(Balance::RoundRobin, &[1, 1]);
        p.fail_timeout = std::time::Duration::ZERO;
        p.connect_failed(0, t0);
        let mut seen = [0; 2];
        for _ in 0..4 {
            seen[p.pick_at(t0, client, 0).unwrap()] += 1;
        }
        assert_eq!(seen, [2, 2]);
    }

    fn shares(p: &mut Pool, n: usize) -> Vec<usize> {
        let mut count = vec![0; p.members.len()];
        for k in 0..n {
            let client = Ipv4Addr::from(0x0a00_0000 + k as u32);
            if let Some(i) = p.pick(client, 0) {
                count[i] += 1;
            }
        }
        count
    }

    #[test]
    fn round_robin_and_weights() {
        assert_eq!(
            shares(&mut pool(Balance::RoundRobin, &[1, 5, 1]), 300),
            [100, 100, 100]
        );
        let mut p = pool(Balance::WeightedRoundRobin, &[2, 1, 1]);
        assert_eq!(shares(&mut p, 400), [200, 100, 100]);
        // Smooth: the heavy member never gets more than its share in a row.
        let seq: Vec<_> = (0..8)
            .map(|_| p.pick(Ipv4Addr::LOCALHOST, 0).unwrap())
            .collect();
        assert!(
            seq.windows(3)
                .all(|w| !(w[0] == 0 && w[1] == 0 && w[2] == 0)),
            "{seq:?}"
        );
    }

    #[test]
    fn least_connections_follow_active_counts() {
        let mut p = pool(Balance::LeastConn, &[1, 1, 1]);
        p.members[0].active = 5;
        p.members[1].active = 2;
        p.members[2].active = 3;
        assert_eq!(p.pick(Ipv4Addr::LOCALHOST, 0), Some(1));
        let mut p = pool(Balance::WeightedLeastConn, &[4, 1, 1]);
        p.members[0].active = 6; // 6/4 = 1.5 per weight
        p.members[1].active = 2; // 2
        p.members[2].active = 1; // 1
        assert_eq!(p.pick(Ipv4Addr::LOCALHOST, 0), Some(2));
        p.members[2].active = 3;
        assert_eq!(p.pick(Ipv4Addr::LOCALHOST, 0), Some(0));
    }

    #[test]
    fn drained_down_and_tried_members_are_passed_over() {
        for balance in [
            Balance::RoundRobin,
            Balance::WeightedRoundRobin,
            Balance::LeastConn,
            Balance::WeightedLeastConn,
            Balance::SourceHash,
        ] {
            let mut p = pool(balance, &[1, 1, 1]);
            p.members[0].state = MemberState::Drain;
            p.members[1].state = MemberState::Down;
            assert_eq!(shares(&mut p, 50), [0, 0, 50], "{balance:?}");
            assert_eq!(p.pick(Ipv4Addr::LOCALHOST, 1 << 2), None, "{balance:?}");
        }
    }

    #[test]
    fn source_hash_is_sticky_and_moves_only_the_lost_members_clients() {
        let mut p = pool(Balance::SourceHash, &[1, 1, 1, 1]);
        let clients: Vec<Ipv4Addr> = (0..1000).map(|k| Ipv4Addr::from(0xc0a8_0000 + k)).collect();
        let before: Vec<_> = clients.iter().map(|&c| p.pick(c, 0).unwrap()).collect();
        let again: Vec<_> = clients.iter().map(|&c| p.pick(c, 0).unwrap()).collect();
        assert_eq!(before, again, "sticky");
        let count = |v: &[usize], m| v.iter().filter(|&&x| x == m).count();
        for m in 0..4 {
            assert!(
                (180..320).contains(&count(&before, m)),
                "{m}: {}",
                count(&before, m)
            );
        }
        p.members[3].state = MemberState::Down;
        let after: Vec<_> = clients.iter().map(|&c| p.pick(c, 0).unwrap()).collect();
        for (b, a) in before.iter().zip(&after) {
            if *b != 3 {
                assert_eq!(a, b, "only member 3's clients move");
            }
        }
    }
}
