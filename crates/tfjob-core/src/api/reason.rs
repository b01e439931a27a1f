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
pub const PAUSED: &str = "Paused";
pub const RESUMING: &str = "Resuming";
/// No eligible cluster has room (the message says why, per cluster).
pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
/// No cluster is eligible, and `clusterNames` names clusters no
/// MemberCluster has (yet): the job waits for them, not for capacity.
pub const UNKNOWN_CLUSTER: &str = "UnknownCluster";
/// A `replicaSpecs` edit after the job started is not applied.
pub const SPEC_CHANGE_REFUSED: &str = "SpecChangeRefused";
/// An object we did not make holds a replica's pod or service name.
pub const OBJECT_NAME_TAKEN: &str = "ObjectNameTaken";
/// The job's namespace is gone on the replica's cluster.
pub const NAMESPACE_MISSING: &str = "NamespaceMissing";
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
