//! Every reason the controller writes into a job's conditions, a
//! dependent's status or an Event, in one place: dashboards, alerts and
//! users' scripts match on these words.

/// The spec cannot run as written (the message names the field).
pub const INVALID_SPEC: &str = "InvalidSpec";
/// A replica failed and its restart policy does not restart it.
pub const REPLICA_FAILED: &str = "ReplicaFailed";
/// More restarts than `runPolicy.backoffLimit` allows.
pub const BACKOFF_LIMIT: &str = "BackoffLimitExceeded";
/// Running longer than `runPolicy.activeDeadlineSeconds`.
pub const DEADLINE: &str = "DeadlineExceeded";
/// A member the job ran on was lost.
pub const CLUSTER_LOST: &str = "ClusterLost";
/// Debug mode turned on or off: every pod is being replaced.
pub const RUN_MODE_CHANGED: &str = "RunModeChanged";
pub const PAUSED: &str = "Paused";
pub const RESUMING: &str = "Resuming";
/// No eligible cluster has room (the message says why, per cluster).
pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
/// No cluster is eligible, and `clusterNames` names clusters no
/// MemberCluster has (yet): the job waits for them, not for capacity.
pub const UNKNOWN_CLUSTER: &str = "UnknownCluster";
/// An edit of the spec is not applied: `replicaSpecs` after the job
/// started, or any edit that does not validate (the message names the field).
pub const SPEC_CHANGE_REFUSED: &str = "SpecChangeRefused";
/// An object we did not make holds a replica's pod or service name.
pub const OBJECT_NAME_TAKEN: &str = "ObjectNameTaken";
/// The job's namespace is gone on the replica's cluster.
pub const NAMESPACE_MISSING: &str = "NamespaceMissing";
/// A PodGroup the job's pods need (`scheduler.t9kScheduler`) could not be
/// made: no pod is created until it is.
pub const POD_GROUP_FAILED: &str = "PodGroupFailed";
/// The cluster refused to create a replica's pod or service.
pub const CREATE_REFUSED: &str = "CreateRefused";
/// The job's stored record (status, accepted replicaSpecs) is not the
/// controller's: nothing is decided from it.
pub const RECORD_UNVERIFIED: &str = "RecordUnverified";
/// Someone other than the controller wrote the job's status: the
/// controller wrote its own back.
pub const STATUS_OVERWRITTEN: &str = "StatusOverwritten";
/// The TensorBoard dependent: ready, not yet, its CRD missing, or failing.
pub const DEPENDENT_READY: &str = "DependentReady";
pub const DEPENDENT_NOT_READY: &str = "DependentNotReady";
pub const CRD_NOT_INSTALLED: &str = "CRDNotInstalled";
pub const DEPENDENT_ERROR: &str = "DependentError";
/// A MemberCluster's Ready condition: its API server answered the probe
/// (and it takes replicas), or not.
pub const PROBE_SUCCEEDED: &str = "ProbeSucceeded";
pub const PROBE_FAILED: &str = "ProbeFailed";
/// The job's course, in its conditions and Events: waiting for its
/// replicas, placed, all of them running, one restarting, resumed, ended,
/// succeeded or failed, being deleted.
pub const PENDING: &str = "Pending";
pub const PLACED: &str = "Placed";
pub const INITIALIZED: &str = "Initialized";
pub const NO_REPLICA_FAILED: &str = "NoReplicaFailed";
pub const RUNNING: &str = "Running";
pub const RESTARTING: &str = "Restarting";
pub const RESUMED: &str = "Resumed";
pub const ENDED: &str = "Ended";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";
pub const DELETING: &str = "Deleting";

/// Why a job failed: its `Failed` condition's reason, as a type, so that
/// what follows a failure never depends on the reason's wording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    InvalidSpec,
    ReplicaFailed,
    BackoffLimit,
    Deadline,
    ClusterLost,
    CreateRefused,
}

impl Failure {
    pub const ALL: [Failure; 6] = [
        Failure::InvalidSpec,
        Failure::ReplicaFailed,
        Failure::BackoffLimit,
        Failure::Deadline,
        Failure::ClusterLost,
        Failure::CreateRefused,
    ];

    pub fn reason(self) -> &'static str {
        match self {
            Failure::InvalidSpec => INVALID_SPEC,
            Failure::ReplicaFailed => REPLICA_FAILED,
            Failure::BackoffLimit => BACKOFF_LIMIT,
            Failure::Deadline => DEADLINE,
            Failure::ClusterLost => CLUSTER_LOST,
            Failure::CreateRefused => CREATE_REFUSED,
        }
    }

    /// The failure a stored condition's reason names (a status an earlier
    /// controller wrote).
    pub fn of_reason(reason: &str) -> Option<Failure> {
        Failure::ALL.into_iter().find(|f| f.reason() == reason)
    }

    /// A replica failed for good: the `ReplicaFailure` condition says so too.
    pub fn is_a_replicas(self) -> bool {
        matches!(self, Failure::ReplicaFailed | Failure::BackoffLimit)
    }

    /// Every pod goes, whatever the clean-up policy: the job must not run
    /// on (a deadline) or never ran as asked (an invalid or refused spec).
    pub fn deletes_every_pod(self) -> bool {
        matches!(
            self,
            Failure::Deadline | Failure::InvalidSpec | Failure::CreateRefused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reads_back_from_its_reason() {
        for failure in Failure::ALL {
            assert_eq!(Failure::of_reason(failure.reason()), Some(failure));
        }
        assert_eq!(Failure::of_reason("Succeeded"), None);
    }
}
