//! `[access] deny_until` over time: networks denied for a time are taken
//! off when it comes, by a change like any other (docs/control-api.md).

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
