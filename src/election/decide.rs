//! Leader election decisions, pure: from what a replica has observed of the
//! Lease, what it does next. Expiry is judged by how long the Lease has
//! stayed unchanged as this replica saw it (its own clock only), never by
//! the timestamps in the Lease, so clock skew between replicas cannot make
//! two of them lead.

use std::time::Duration;

/// The Lease as this replica last read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Observed<'a> {
    /// `spec.holderIdentity`; None or empty when released.
    pub holder: Option<&'a str>,
    /// How long the Lease has been unchanged (same resourceVersion) here.
    pub unchanged_for: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nobody holds it, or the holder stopped renewing: take it.
    Take,
    /// We hold it: renew it.
    Renew,
    /// Another replica leads; look again after `recheck`.
    Follow { holder: String, recheck: Duration },
}

/// What to do about the Lease (`None`: it does not exist yet).
pub fn step(lease: Option<&Observed>, me: &str, lease_duration: Duration) -> Step {
    let Some(lease) = lease else {
        return Step::Take;
    };
    match lease.holder.filter(|h| !h.is_empty()) {
        None => Step::Take,
        Some(holder) if holder == me => Step::Renew,
        Some(_) if lease.unchanged_for >= lease_duration => Step::Take,
        Some(holder) => Step::Follow {
            holder: holder.to_string(),
            recheck: (lease_duration - lease.unchanged_for).min(retry_interval(lease_duration)),
        },
    }
}

/// How often the leader renews: three chances before the Lease expires.
pub fn renew_interval(lease_duration: Duration) -> Duration {
    lease_duration / 3
}

/// How soon a leader tries again after a failed renewal: often enough that
/// a burst of errors (a third of requests failing, say) costs it nothing
/// before `renew_deadline` (ten tries in that window), at most ten tries a
/// second.
pub fn retry_after_failure(lease_duration: Duration) -> Duration {
    (lease_duration / 30).max(Duration::from_millis(100))
}

/// How often a follower looks at the Lease.
pub fn retry_interval(lease_duration: Duration) -> Duration {
    lease_duration / 5
}

/// A leader that could not renew for this long stops leading: the Lease
/// may expire for the others before it learns of a later success.
pub fn renew_deadline(lease_duration: Duration) -> Duration {
    lease_duration * 2 / 3
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn seen(holder: Option<&str>, secs: u64) -> Observed<'_> {
        Observed {
            holder,
            unchanged_for: Duration::from_secs(secs),
        }
    }

    #[test]
    fn a_missing_or_released_lease_is_taken() {
        assert_eq!(step(None, "a", LEASE), Step::Take);
        assert_eq!(step(Some(&seen(None, 0)), "a", LEASE), Step::Take);
        assert_eq!(step(Some(&seen(Some(""), 0)), "a", LEASE), Step::Take);
    }

    #[test]
    fn the_holder_renews_and_others_follow_until_it_expires() {
        assert_eq!(step(Some(&seen(Some("a"), 100)), "a", LEASE), Step::Renew);
        assert_eq!(
            step(Some(&seen(Some("b"), 1)), "a", LEASE),
            Step::Follow {
                holder: "b".into(),
                recheck: Duration::from_secs(3)
            }
        );
        assert_eq!(
            step(Some(&seen(Some("b"), 14)), "a", LEASE),
            Step::Follow {
                holder: "b".into(),
                recheck: Duration::from_secs(1)
            },
            "looks again right when it would expire"
        );
        assert_eq!(step(Some(&seen(Some("b"), 15)), "a", LEASE), Step::Take);
    }

    #[test]
    fn renewing_leaves_room_before_expiry() {
        assert!(renew_interval(LEASE) < renew_deadline(LEASE));
        assert!(renew_deadline(LEASE) < LEASE);
        assert!(retry_interval(LEASE) < LEASE);
    }
}
