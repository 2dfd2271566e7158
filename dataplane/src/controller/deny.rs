//! `[access] deny_until` over time: networks denied for a time are taken
//! off when it comes, and with `[access] auto_deny` sources the
//! per-source limits keep refusing are put on it, each by a change like
//! any other (docs/control-api.md).

use control::config::{prefix_text, DenyUntil, AUTO_DENY_EVERY_S, MAX_DENIED};

use super::views::RefusedSums;
use super::*;

/// How long after a failed expiry (an engine that did not take the
/// change) it is tried again.
const RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

impl Controller {
    /// Takes off `deny_until` the networks whose time has come (`now`),
    /// as one change; called by the tick. An engine that cannot take the
    /// change leaves them denied until the next try, a second later.
    pub fn expire_denies(&mut self, now: jiff::Timestamp) {
        let due = self.cfg.access.next_expiry().is_some_and(|t| t <= now);
        if !due || self.deny_retry_at.is_some_and(|at| now < at) {
            return;
        }
        let mut next = self.cfg.clone();
        let expired = next.access.take_expired(now);
        let what = format!("deny of {} ended", expired.join(" "));
        let reply = self.push_change(next, Reload::Nothing, false, what);
        self.deny_retry_at = (!reply.ok).then(|| now.checked_add(RETRY).ok()).flatten();
    }

    /// The networks denied for a time, soonest due first, with the
    /// seconds each has left at `now` (rounded up).
    pub(super) fn temporary_denies(&self, now: jiff::Timestamp) -> Vec<TemporaryDeny> {
        let mut list: Vec<_> = self.cfg.access.deny_until.iter().collect();
        list.sort_by_key(|d| d.until);
        list.iter()
            .map(|d| {
                let left = now.duration_until(d.until);
                let secs = left.as_secs() + i64::from(left.subsec_nanos() > 0);
                TemporaryDeny {
                    prefix: d.net.clone(),
                    until: d.until.to_string(),
                    left_s: u64::try_from(secs).unwrap_or(0),
                }
            })
            .collect()
    }
}

impl Controller {
    /// `[access] auto_deny`, every [`AUTO_DENY_EVERY_S`] seconds (`now`):
    /// asks the engines for the sources refused lately and denies, until
    /// `wall` and the rule's time, those its per-source limits refused
    /// often enough that are not denied already, as one change. Called
    /// by the tick.
    pub fn auto_deny(&mut self, now: Instant, wall: jiff::Timestamp) {
        let Some(rule) = self.cfg.access.auto_deny else {
            return;
        };
        if self.auto_deny_at.is_some_and(|at| now < at) {
            return;
        }
        self.auto_deny_at = Some(now + Duration::from_secs(AUTO_DENY_EVERY_S));
        let refused = match self.gather_refused(None) {
            Ok(r) => r,
            Err(e) => {
                log::warn!("auto_deny: not looked at: {e}");
                return;
            }
        };
        let access = &self.cfg.access;
        let room = MAX_DENIED.saturating_sub(access.deny.len() + access.deny_until.len());
        self.pardoned
            .retain(|&(_, at)| now.saturating_duration_since(at) < PARDON_KEPT);
        let pardoned = PrefixSet::new(self.pardoned.iter().map(|&(net, _)| net));
        let spared = |ip: IpAddr| self.deny.contains(ip) || pardoned.contains(ip);
        let (found, left_out) = offenders(&refused, rule.refused, spared, room);
        if left_out > 0 {
            log::warn!(
                "auto_deny: {left_out} source(s) earned a deny, but [access] holds {MAX_DENIED} networks"
            );
        }
        if found.is_empty() {
            return;
        }
        let span = jiff::SignedDuration::from_secs(rule.for_s.cast_signed());
        let Ok(until) = wall.checked_add(span) else {
            return;
        };
        let mut next = self.cfg.clone();
        let mut names = Vec::new();
        for &(ip, n) in &found {
            let net = prefix_text((ip, if ip.is_ipv4() { 32 } else { 64 }));
            names.push(format!("{net} ({n})"));
            next.access.deny_until.push(DenyUntil { net, until });
        }
        let what = format!(
            "auto_deny: {} denied for {} s (refused by their per-source limits in the last minute or two)",
            names.join(", "),
            rule.for_s
        );
        if self.push_change(next, Reload::Nothing, false, what).ok {
            let mut state = self.config_state.write().expect("not poisoned");
            state.auto_denied += found.len() as u64;
        }
    }
}

impl Controller {
    /// Notes that `prefixes` were taken off the deny lists at `now` (by
    /// an operator): `auto_deny` leaves them be for two minutes.
    pub(super) fn pardon(&mut self, prefixes: &[String], now: Instant) {
        // Taken off the list, so each read.
        let nets = prefixes.iter().filter_map(|p| parse_prefix(p).ok());
        note_pardons(&mut self.pardoned, nets, now);
    }
}

/// How long `auto_deny` spares a network an operator took off the lists.
const PARDON_KEPT: Duration = Duration::from_secs(2 * crate::tcp::REFUSED_WINDOW.as_secs());

/// Pardons kept at most: the oldest go first past it.
const MAX_PARDONED: usize = MAX_DENIED;

/// Adds `nets`, pardoned at `now`, to `pardoned`, with those older than
/// [`PARDON_KEPT`] taken out first and at most [`MAX_PARDONED`] kept: a
/// block list cycled through `deny add` and `deny remove` (without
/// `auto_deny`, which prunes them too) must not grow it for good.
fn note_pardons(
    pardoned: &mut Vec<((IpAddr, u8), Instant)>,
    nets: impl Iterator<Item = (IpAddr, u8)>,
    now: Instant,
) {
    pardoned.retain(|&(_, at)| now.saturating_duration_since(at) < PARDON_KEPT);
    pardoned.extend(nets.map(|net| (net, now)));
    let over = pardoned.len().saturating_sub(MAX_PARDONED);
    pardoned.drain(..over);
}

/// The sources of `refused` that its per-source limits (rate and cap,
/// summed over VIPs) refused at least `threshold` times and that are not
/// `spared` (denied already, or pardoned lately), most first, at most
/// `room`; and how many more there were.
fn offenders(
    refused: &RefusedSums,
    threshold: u64,
    spared: impl Fn(IpAddr) -> bool,
    room: usize,
) -> (Vec<(IpAddr, u64)>, usize) {
    let mut by_source: HashMap<IpAddr, u64> = HashMap::new();
    for (&(ip, _), c) in refused {
        *by_source.entry(ip).or_default() += c[1] + c[2];
    }
    let mut list: Vec<(IpAddr, u64)> = by_source
        .into_iter()
        .filter(|&(ip, n)| n >= threshold && !spared(ip))
        .collect();
    list.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let left_out = list.len().saturating_sub(room);
    list.truncate(room);
    (list, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pardons leave after [`PARDON_KEPT`] and past [`MAX_PARDONED`], the
    /// oldest first. Before, without `auto_deny` (which alone pruned
    /// them), every `deny remove` added for good.
    #[test]
    fn pardons_are_bounded_in_time_and_number() {
        let net = |i: u32| (IpAddr::from(std::net::Ipv4Addr::from(i)), 32u8);
        let t0 = Instant::now();
        let mut pardoned = Vec::new();
        for round in 0..10u32 {
            let now = t0 + PARDON_KEPT * round;
            note_pardons(
                &mut pardoned,
                (0..1_000).map(|i| net(round * 1_000 + i)),
                now,
            );
            assert_eq!(pardoned.len(), 1_000, "round {round}: the last one's only");
        }
        let now = t0 + PARDON_KEPT * 10;
        note_pardons(&mut pardoned, (0..MAX_PARDONED as u32 + 5).map(net), now);
        assert_eq!(pardoned.len(), MAX_PARDONED);
        assert_eq!(pardoned[0].0, net(5), "the oldest went");
    }

    #[test]
    fn offenders_are_those_their_own_limits_refused_often_and_not_denied_yet() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut refused = RefusedSums::new();
        // By limit: connection cap, source rate, source cap, denied.
        refused.insert((ip("192.0.2.1"), Some(0)), [0, 600, 0, 0]);
        refused.insert((ip("192.0.2.1"), Some(1)), [0, 0, 400, 0]);
        refused.insert((ip("192.0.2.2"), Some(0)), [5_000, 0, 0, 9_000]);
        refused.insert((ip("192.0.2.3"), Some(0)), [0, 999, 0, 0]);
        refused.insert((ip("2001:db8:0:7::"), None), [0, 3_000, 0, 0]);
        refused.insert((ip("198.51.100.9"), Some(0)), [0, 5_000, 0, 0]);
        let denied = PrefixSet::new([(ip("198.51.100.0"), 24)]);
        let spared = |ip| denied.contains(ip);
        let (found, left_out) = offenders(&refused, 1_000, spared, 10);
        assert_eq!(
            found,
            [(ip("2001:db8:0:7::"), 3_000), (ip("192.0.2.1"), 1_000)],
            "a VIP's cap and deny lists count nothing; one below the line, one denied already"
        );
        assert_eq!(left_out, 0);
        let (found, left_out) = offenders(&refused, 1_000, spared, 1);
        assert_eq!(
            (found.len(), left_out),
            (1, 1),
            "no room past the list's bound"
        );
    }
}
