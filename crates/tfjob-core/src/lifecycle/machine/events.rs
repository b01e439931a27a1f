//! The machine's words: what it reads of a job's spec (`Spec`), the
//! events it takes and the effects it returns.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;

use crate::api::{
    CleanUpPolicy, DependentStatus, FailoverScope, JobPhase, ReplicaKey, ReplicaSpec, ReplicaType,
    RestartPolicy, RunModeKind, TensorFlowTrainingJob,
};
use crate::status::ReplicaView;

/// Why a replica cannot get its pod or service now (it tries again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// One of `reason::OBJECT_NAME_TAKEN`, `NAMESPACE_MISSING`, `CREATE_REFUSED`.
    pub reason: &'static str,
    pub message: String,
}

/// Which replica each cluster runs, by replica.
pub type Assignment = BTreeMap<ReplicaKey, String>;

/// The placement epoch of each replica: the job's, but for the replicas
/// that kept a pod of an earlier epoch through a partial failover.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epochs {
    pub job: u64,
    pub kept: BTreeMap<ReplicaKey, u64>,
}

impl Epochs {
    /// The epoch of `key`'s pod.
    pub fn of(&self, key: ReplicaKey) -> u64 {
        self.kept.get(&key).copied().unwrap_or(self.job)
    }
}

/// What the replicas' main containers run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodMode {
    /// The template's command (the job has never been paused).
    #[default]
    Normal,
    /// The debug command (`runMode.debug` enabled).
    Debug,
    /// The resumeSpec's command and args (the job was paused and resumed).
    Resumed,
}

/// What replica actors are started for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Make sure the pod runs in this mode.
    Run(PodMode),
    /// The job ended: apply the clean-up policy to whatever pod there is.
    Finish(CleanUpPolicy),
    /// Delete pod and service, then report `TornDown`.
    Retire,
}

/// The replicas a `replicaSpecs` asks for, and how each type restarts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replicas {
    /// The `replicaSpecs`, typed: what pods are built from. Shared: the
    /// machine keeps several `Replicas` of one job (the accepted ones, the
    /// spec's now and as accepted), most often of the same text.
    pub specs: Arc<Vec<ReplicaSpec>>,
    /// The `replicaSpecs` as JSON: an edit changes it; the annotation and
    /// the record's digest hold this text.
    pub json: String,
    pub keys: Vec<ReplicaKey>,
    pub master: Option<ReplicaKey>,
    pub policies: BTreeMap<ReplicaType, RestartPolicy>,
}

impl Replicas {
    pub fn of(job: &TensorFlowTrainingJob) -> Replicas {
        let spec = &job.spec;
        Replicas {
            specs: Arc::new(spec.replica_specs.clone()),
            json: serde_json::to_string(&spec.replica_specs).unwrap_or_default(),
            keys: spec.replica_keys(),
            master: spec.master(),
            policies: ReplicaType::ALL
                .into_iter()
                .filter_map(|t| Some((t, spec.replica_spec(t)?.parsed_restart_policy()?)))
                .collect(),
        }
    }

    /// Shares `known`'s typed specs when both are of the same text.
    pub(super) fn share(&mut self, known: &Replicas) {
        if self.json == known.json && !Arc::ptr_eq(&self.specs, &known.specs) {
            self.specs = known.specs.clone();
        }
    }

    pub(super) fn types(&self) -> Vec<ReplicaType> {
        let present: BTreeSet<ReplicaType> = self.keys.iter().map(|k| k.replica_type).collect();
        present.into_iter().collect()
    }
}

/// What the machine reads of a job's spec and metadata.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spec {
    /// The job's `replicaSpecs` now.
    pub replicas: Replicas,
    /// Those accepted when the job was admitted (its annotation), if any.
    pub accepted: Option<Replicas>,
    /// Why the job (with the replicaSpecs it runs) is invalid, if it is.
    pub problem: Option<String>,
    pub pause: bool,
    pub debug: bool,
    pub backoff_limit: Option<i32>,
    pub deadline_seconds: Option<i64>,
    /// What losing a member cluster re-places.
    pub failover: FailoverScope,
    pub clean_up: CleanUpPolicy,
    /// The finalizer is on the job.
    pub has_finalizer: bool,
    /// The job is being deleted.
    pub deleting: bool,
}

impl Spec {
    /// `accepted`: the replicaSpecs the job was admitted with, as the
    /// actor read them from the job; `problem`: validation's verdict on
    /// the job with the replicaSpecs it runs.
    pub fn of(
        job: &TensorFlowTrainingJob,
        accepted: Option<Replicas>,
        problem: Option<String>,
        has_finalizer: bool,
    ) -> Spec {
        let spec = &job.spec;
        let run_policy = spec.run_policy.as_ref();
        Spec {
            replicas: Replicas::of(job),
            accepted,
            problem,
            pause: spec.run_mode_kind() == RunModeKind::Pause,
            debug: spec
                .run_mode
                .as_ref()
                .and_then(|m| m.debug.as_ref())
                .is_some_and(|d| d.is_enabled()),
            backoff_limit: run_policy.and_then(|p| p.backoff_limit),
            failover: spec.failover_scope(),
            deadline_seconds: run_policy.and_then(|p| p.active_deadline_seconds),
            clean_up: spec.clean_up_policy().unwrap_or(CleanUpPolicy::Unfinished),
            has_finalizer,
            deleting: job.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The job as stored now (the first one starts the machine).
    SpecChanged(Spec),
    /// `Effect::Admit` landed.
    Admitted,
    /// `Effect::Admit` failed (e.g. the finalizers changed meanwhile): the
    /// next `SpecChanged` tries again.
    AdmitFailed,
    /// A placement was decided, or the recorded one resolved.
    Placed(Assignment),
    /// No placement fits now: why, cluster by cluster.
    Unplaceable(crate::placement::Unplaceable),
    /// The recorded placement cannot be used (a cluster gone or lost).
    RecordedUnusable(String),
    /// Namespaces and PodGroups exist on the placement's clusters.
    Prepared,
    /// A PodGroup of the placement could not be made: why.
    PreparationFailed(String),
    /// The time asked for by `Effect::RetryLater` passed.
    RetryDue,
    /// A replica's state, from its actor of `epoch`.
    /// `blocked`: its pod or service cannot be created, the name being
    /// taken by an object this controller does not own (it says which).
    Replica {
        view: ReplicaView,
        epoch: u64,
        blocked: Option<Blocked>,
    },
    /// A retired replica's pod and service are gone.
    TornDown(ReplicaKey),
    /// The member clusters lost now (all of them, not only new ones).
    ClustersLost(BTreeSet<String>),
    /// The deadline armed for `at` passed.
    DeadlineReached { at: Timestamp },
    /// A status write that holds everything up to `Effect::Persist(seq)` landed.
    Persisted(u64),
    /// The job's TensorBoard as last seen.
    TensorBoard(DependentStatus),
    /// A replica's pod or service cannot be built from the spec.
    BuildFailed(String),
    /// A cluster refused a replica's pod or service for good (a 4xx other
    /// than a conflict or throttling, that no retry changes).
    Refused(Refusal),
}

/// A create that a cluster refused for good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub key: ReplicaKey,
    /// The replica's epoch.
    pub epoch: u64,
    pub cluster: String,
    /// No cluster would take it (the object itself is invalid); else only
    /// this cluster refuses (its policy, quota or admission).
    pub everywhere: bool,
    /// The cluster's answer, in words.
    pub message: String,
}

/// What the actor must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Add the finalizer (if missing) and record the accepted replicaSpecs.
    Admit,
    /// Ask for a placement; `recorded`: only resolve this one.
    RequestPlacement { recorded: Option<Assignment> },
    /// Ask for clusters for these replicas only (a partial failover); the
    /// others keep theirs. Answered by `Placed` with these replicas.
    PlaceReplicas(BTreeSet<ReplicaKey>),
    /// Withdraw a queued request and drop any capacity held for the job.
    ReleasePlacement,
    /// Namespaces and PodGroups on the clusters of `assignment`; answer
    /// `Prepared` or `PreparationFailed`.
    PrepareClusters(Assignment),
    /// Answer `RetryDue` after the retry interval.
    RetryLater,
    /// Create the job's TensorBoard if its spec asks for one and it is missing.
    EnsureTensorBoard,
    /// Start a replica actor for each replica of `assignment` that has none.
    StartReplicas {
        epochs: Epochs,
        assignment: Assignment,
        intent: Intent,
    },
    /// Replace the replica's pod of this uid.
    RestartReplica { key: ReplicaKey, uid: String },
    /// Every replica actor deletes its pod and service, reports `TornDown`.
    RetireReplicas,
    /// Stop the replica actors on these clusters, leaving their objects to
    /// the clusters' garbage sweep.
    AbandonReplicasOn(BTreeSet<String>),
    /// Every replica actor applies the clean-up policy.
    FinishReplicas(CleanUpPolicy),
    /// Delete the job's PodGroups on the member clusters of its placement.
    DeleteMemberPodGroups,
    /// Write the status now and answer `Persisted(seq)`.
    Persist(u64),
    /// Record a Kubernetes Event on the job.
    Record {
        warning: bool,
        reason: &'static str,
        message: String,
    },
    /// Answer `DeadlineReached { at }` once `at` has passed.
    ArmDeadline { at: Timestamp },
    /// The job may go: remove the finalizer.
    RemoveFinalizer,
    /// For the metrics.
    Milestone(Milestone),
}

/// Moments the metrics observe.
#[derive(Clone, Debug, PartialEq)]
pub enum Milestone {
    /// Every replica has a pod for the first time.
    PodsCreated,
    /// The phase turned Running from `previous`.
    Running { previous: Option<JobPhase> },
    /// A restart was decided for a replica whose pod ended like this.
    Restarted(ReplicaView),
}
