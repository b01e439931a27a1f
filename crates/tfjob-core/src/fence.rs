//! The member-side fence, as pure decisions (docs/src/members/fence.md).
//!
//! While the controller reaches a member it renews a Lease there
//! ([`CONTROLLER_LEASE`], in [`NAMESPACE`]) at every good probe. A fence
//! (`tfjob-federator fence`) runs in the member with the member's own
//! identity and watches that Lease: once it has not been renewed for
//! `fenceAfterMs` the fence deletes every pod this federation placed there
//! (only pods whose fence signature verifies, `signing::FenceVerifier`),
//! and keeps deleting new ones until the Lease is renewed again. The fence
//! renews a Lease of its own ([`FENCE_LEASE`]), which the controller reads
//! for the member's `Fenced` condition.
//!
//! The guarantee rests on one inequality, checked before the controller
//! starts ([`check`]): a lost member's replicas are placed again only after
//! `clusterLostTimeoutMs`, counted from the last good probe, and by then
//! the fence has stopped their pods — `fenceAfterMs` after the last
//! renewal (stamped no later than that probe), plus at most
//! `fencePodGraceMs` of termination grace, plus the clocks' skew.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use kube::ResourceExt;

use crate::builders::{
    JOB_UID_LABEL, MANAGED_BY_LABEL, MANAGER, PLACEMENT_EPOCH_LABEL, REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
};
use crate::signing::{FENCE_SIGNATURE_ANNOTATION, FenceVerifier, subject};

/// Where the Leases and the fence key live on a member: the controller's
/// namespace there.
pub const NAMESPACE: &str = crate::api::SECRETS_NAMESPACE;
/// The Lease the controller renews on each member it reaches.
pub const CONTROLLER_LEASE: &str = "tfjob-federator-controller";
/// The Lease a member's fence renews, read by the controller.
pub const FENCE_LEASE: &str = "tfjob-federator-fence";
/// The Secret (on each member) holding the fence key, written by the controller.
pub const KEY_SECRET: &str = "tfjob-federator-fence-key";
pub const KEY_FIELD: &str = "key";
/// On the controller's Lease: the controller's `fenceAfterMs`, which the
/// fence obeys (so the two cannot disagree).
pub const FENCE_AFTER_ANNOTATION: &str = "federation.tfjob.io/fence-after-ms";
/// On the controller's Lease: the controller's `fencePodGraceMs`.
pub const POD_GRACE_ANNOTATION: &str = "federation.tfjob.io/fence-pod-grace-ms";
/// The MemberCluster condition that says whether the member has a fence.
pub const FENCED_CONDITION: &str = "Fenced";
/// The words an unfenced member's condition starts with.
pub const NO_FENCE: &str = "no fence: copies of a replica may overlap during a partition";

pub mod reason {
    /// The fence renews its Lease.
    pub const FENCE_RENEWING: &str = "FenceRenewing";
    /// The fence's Lease was not renewed for longer than it holds.
    pub const FENCE_STALE: &str = "FenceStale";
    /// There is no fence Lease on the member.
    pub const NO_FENCE: &str = "NoFence";
    /// The fence's Lease cannot be read.
    pub const FENCE_UNKNOWN: &str = "FenceUnknown";
    /// The controller cannot renew its own Lease on the member.
    pub const LEASE_NOT_RENEWED: &str = "ControllerLeaseNotRenewed";
    /// The Event a fence records when it stops the federation's pods.
    pub const FENCED: &str = "Fenced";
    /// The Event a fence records when the controller's Lease is renewed again.
    pub const UNFENCED: &str = "Unfenced";
}

/// The settings the fence's guarantee depends on (milliseconds, as in the
/// controller's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub cluster_lost_timeout_ms: u64,
    pub fence_after_ms: u64,
    pub fence_pod_grace_ms: u64,
    pub clock_skew_margin_ms: u64,
    pub member_probe_interval_ms: u64,
}

/// A configuration under which the fence cannot keep its guarantee, or
/// would stop pods of a member that is not cut off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "clusterLostTimeoutMs ({lost}) must exceed fenceAfterMs ({fence_after}) + fencePodGraceMs ({grace}) + clockSkewMarginMs ({skew}) = {sum}: otherwise a lost member's replicas may be placed again before its fence has stopped their pods there"
    )]
    LostBeforeFenced {
        lost: u64,
        fence_after: u64,
        grace: u64,
        skew: u64,
        sum: u64,
    },
    #[error(
        "fenceAfterMs ({fence_after}) must be at least 2 × memberProbeIntervalMs ({probe}) + clockSkewMarginMs ({skew}) = {least}: the controller renews its Lease on a member at each good probe, and one late renewal must not fence a member that is not cut off"
    )]
    FenceTooEager {
        fence_after: u64,
        probe: u64,
        skew: u64,
        least: u64,
    },
    #[error(
        "fencePodGraceMs ({grace}) must be at least 1000: the fence gives pods whole seconds of grace, and none would force-delete them (the pod object goes at once while its process may still run)"
    )]
    GraceTooShort { grace: u64 },
}

/// Whether the settings keep the fence's guarantee (see the module's comment).
pub fn check(s: &Settings) -> Result<(), SettingsError> {
    if s.fence_pod_grace_ms < 1000 {
        return Err(SettingsError::GraceTooShort {
            grace: s.fence_pod_grace_ms,
        });
    }
    let sum = s
        .fence_after_ms
        .saturating_add(s.fence_pod_grace_ms)
        .saturating_add(s.clock_skew_margin_ms);
    if s.cluster_lost_timeout_ms <= sum {
        return Err(SettingsError::LostBeforeFenced {
            lost: s.cluster_lost_timeout_ms,
            fence_after: s.fence_after_ms,
            grace: s.fence_pod_grace_ms,
            skew: s.clock_skew_margin_ms,
            sum,
        });
    }
    let least = s
        .member_probe_interval_ms
        .saturating_mul(2)
        .saturating_add(s.clock_skew_margin_ms);
    if s.fence_after_ms < least {
        return Err(SettingsError::FenceTooEager {
            fence_after: s.fence_after_ms,
            probe: s.member_probe_interval_ms,
            skew: s.clock_skew_margin_ms,
            least,
        });
    }
    Ok(())
}

/// The grace (whole seconds) the fence deletes a pod with: the pod's own
/// (Kubernetes' default 30 s when unset), at most `fencePodGraceMs`, and at
/// least one second (none would be a force delete).
pub fn grace_seconds(pod_grace_ms: u64, pod_termination_grace: Option<i64>) -> i64 {
    let most = i64::try_from(pod_grace_ms / 1000).unwrap_or(i64::MAX);
    pod_termination_grace.unwrap_or(30).min(most).max(1)
}

/// Whether the fence may stop `pod`: placed by this federation (managed-by
/// label, job uid, replica and epoch labels) with a fence signature of
/// exactly those that verifies. A user's pod that copies the labels has no
/// such signature; a pod made before fencing began has none either, and is
/// left alone.
pub fn stoppable(verifier: &FenceVerifier, pod: &impl ResourceExt) -> bool {
    let labels = pod.labels();
    if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGER) {
        return false;
    }
    let (Some(uid), Some(kind), Some(index)) = (
        labels.get(JOB_UID_LABEL),
        labels.get(REPLICA_TYPE_LABEL),
        labels.get(REPLICA_INDEX_LABEL),
    ) else {
        return false;
    };
    let epoch = labels.get(PLACEMENT_EPOCH_LABEL).map_or("", String::as_str);
    let Some(signature) = pod.annotations().get(FENCE_SIGNATURE_ANNOTATION) else {
        return false;
    };
    verifier.verifies(
        &subject(uid, &format!("{kind}-{index}"), epoch, "Pod"),
        signature,
    )
}

/// The controller's Lease as the fence reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerLease {
    /// `spec.renewTime`, stamped by the controller's clock.
    pub renew_time: Option<Timestamp>,
    /// The controller's `fenceAfterMs` (its annotation), when it says.
    pub fence_after: Option<Duration>,
    /// The controller's `fencePodGraceMs` (its annotation), when it says.
    pub pod_grace_ms: Option<u64>,
}

/// What the fence learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The controller's Lease as it is now; `None`: there is none.
    Lease(Option<ControllerLease>),
    /// Time passed (the timer the last decision asked for).
    Tick,
}

/// What the fence does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is no controller Lease here (none yet, or it was deleted):
    /// there is nothing to fence against; the pods run.
    Idle,
    /// The Lease is fresh: the pods run; decide again in `recheck_in` if
    /// nothing is renewed before.
    Keep { recheck_in: Duration },
    /// It turned stale now: delete every stoppable pod, and say why.
    Stop { why: String },
    /// Still stale: delete every stoppable pod that appears.
    Stopping,
    /// Renewed again after being stale: stop no more.
    Resume,
}

impl Decision {
    /// Whether stoppable pods are deleted after this decision.
    pub fn stops(&self) -> bool {
        matches!(self, Decision::Stop { .. } | Decision::Stopping)
    }
}

/// The fence's state (see the module's comment). The Lease is stale when
/// `fenceAfter` has passed since its `renewTime` by this member's clock,
/// or since this fence first saw that `renewTime` by its own monotonic
/// clock: whichever comes first, so that neither a member clock behind
/// the controller's nor a slow watch delays the stop. (A fence started
/// during a partition stops the pods by the first measure.)
#[derive(Debug, Clone)]
pub struct Fence {
    /// `fenceAfterMs` when the controller's Lease does not say.
    default_fence_after: Duration,
    lease: Option<ControllerLease>,
    /// When this fence first saw the Lease's current `renewTime`.
    seen_at: Option<Instant>,
    stopping: bool,
}

impl Fence {
    pub fn new(default_fence_after: Duration) -> Fence {
        Fence {
            default_fence_after,
            lease: None,
            seen_at: None,
            stopping: false,
        }
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The controller's `fencePodGraceMs`, when its Lease says.
    pub fn pod_grace_ms(&self) -> Option<u64> {
        self.lease.as_ref().and_then(|l| l.pod_grace_ms)
    }

    /// Takes `event`, at `wall` by this member's clock and `now` by the
    /// monotonic one; returns what to do.
    pub fn step(&mut self, event: Event, wall: Timestamp, now: Instant) -> Decision {
        if let Event::Lease(lease) = event {
            let renewed = match (&self.lease, &lease) {
                (Some(old), Some(new)) => old.renew_time != new.renew_time,
                (None, Some(_)) => true,
                _ => false,
            };
            if renewed {
                self.seen_at = Some(now);
            }
            if lease.is_none() {
                self.seen_at = None;
            }
            self.lease = lease;
        }
        let (Some(lease), Some(seen_at)) = (&self.lease, self.seen_at) else {
            return self.turn(None);
        };
        let fence_after = lease.fence_after.unwrap_or(self.default_fence_after);
        let local_age = now.saturating_duration_since(seen_at);
        let wall_age = lease
            .renew_time
            .and_then(|renewed| Duration::try_from(wall.duration_since(renewed)).ok())
            .unwrap_or(Duration::ZERO);
        let age = local_age.max(wall_age);
        if age >= fence_after {
            let why = format!(
                "the controller's Lease {NAMESPACE}/{CONTROLLER_LEASE} was not renewed for {}ms (fenceAfterMs {}): the controller may place this member's replicas elsewhere",
                age.as_millis(),
                fence_after.as_millis()
            );
            self.turn(Some(why))
        } else {
            match self.turn(None) {
                Decision::Idle => Decision::Keep {
                    recheck_in: fence_after - age,
                },
                other => other,
            }
        }
    }

    /// Stale (`Some(why)`) or not: the decision, from where the fence was.
    fn turn(&mut self, stale: Option<String>) -> Decision {
        let was = self.stopping;
        self.stopping = stale.is_some();
        match (was, stale) {
            (false, Some(why)) => Decision::Stop { why },
            (true, Some(_)) => Decision::Stopping,
            (true, None) => Decision::Resume,
            (false, None) => Decision::Idle,
        }
    }
}

/// The fence's Lease as the controller reads it on a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceLease {
    pub holder: Option<String>,
    pub renew_time: Option<Timestamp>,
    /// `leaseDurationSeconds`: how long one renewal holds.
    pub duration: Option<Duration>,
}

/// A member's `Fenced` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub fenced: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The `Fenced` condition from whether the controller renewed its own
/// Lease on the member (or why not) and what it read of the fence's Lease
/// (`Ok(None)`: there is none) at `now`, give or take `skew`.
pub fn condition(
    renewed: &Result<(), String>,
    read: &Result<Option<FenceLease>, String>,
    now: Timestamp,
    skew: Duration,
) -> Condition {
    if let Err(why) = renewed {
        return Condition {
            fenced: false,
            reason: reason::LEASE_NOT_RENEWED,
            message: format!(
                "{NO_FENCE} (the controller cannot renew its Lease {NAMESPACE}/{CONTROLLER_LEASE} on the member: {why}; a fence there stops the federation's pods as if the member were cut off)"
            ),
        };
    }
    let lease = match read {
        Err(why) => {
            return Condition {
                fenced: false,
                reason: reason::FENCE_UNKNOWN,
                message: format!(
                    "{NO_FENCE} (the fence's Lease {NAMESPACE}/{FENCE_LEASE} cannot be read: {why})"
                ),
            };
        }
        Ok(None) => {
            return Condition {
                fenced: false,
                reason: reason::NO_FENCE,
                message: format!(
                    "{NO_FENCE} (no Lease {NAMESPACE}/{FENCE_LEASE} on the member: no fence runs there)"
                ),
            };
        }
        Ok(Some(lease)) => lease,
    };
    let holder = lease.holder.as_deref().unwrap_or("a fence");
    let Some(renewed) = lease.renew_time else {
        return Condition {
            fenced: false,
            reason: reason::FENCE_STALE,
            message: format!(
                "{NO_FENCE} (the Lease {NAMESPACE}/{FENCE_LEASE} of {holder} was never renewed)"
            ),
        };
    };
    let age = Duration::try_from(now.duration_since(renewed)).unwrap_or(Duration::ZERO);
    let holds = lease.duration.unwrap_or(Duration::ZERO) + skew;
    if age <= holds {
        Condition {
            fenced: true,
            reason: reason::FENCE_RENEWING,
            message: format!(
                "{holder} renews its Lease {NAMESPACE}/{FENCE_LEASE} (last {}s ago): if this member is cut off, it stops the federation's pods there before their replicas are placed elsewhere",
                age.as_secs()
            ),
        }
    } else {
        Condition {
            fenced: false,
            reason: reason::FENCE_STALE,
            message: format!(
                "{NO_FENCE} (the Lease {NAMESPACE}/{FENCE_LEASE} of {holder} was last renewed {}s ago, and holds {}s)",
                age.as_secs(),
                lease.duration.unwrap_or(Duration::ZERO).as_secs()
            ),
        }
    }
}

#[cfg(test)]
mod tests;
