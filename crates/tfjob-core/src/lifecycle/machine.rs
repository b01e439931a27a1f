//! The job's state machine: every decision about a job's phase, conditions,
//! placement epoch, restarts, pause, resume, debug, deadline, clean-up and
//! deletion is taken here, in `JobState::step`, from one event at a time.
//! No I/O: the `JobActor` carries the effects out and feeds their results
//! back as events.
//!
//! Ordering that must survive a controller restart is the machine's too:
//! an effect that must follow a durable status write (a replica's restart
//! after its counted restart; a teardown after the new placement epoch) is
//! held back until `Event::Persisted` says the write that carries it landed.
//!
//! The stages, and the phase users see in each:
//!
//! | stage | what the job waits for | phase |
//! |---|---|---|
//! | `New` | its first spec | as stored |
//! | `Admitting` | the finalizer (and accepted replicaSpecs) to land | Pending |
//! | `Placing` | a placement (new, or the recorded one resolved) | Pending, Resuming |
//! | `Preparing` | namespaces and PodGroups on the placement's clusters | Pending, Resuming |
//! | `Active` | its replicas to end | Pending, Resuming, Running |
//! | `Retiring` | its old replicas to be gone (failover, pause, mode switch) | Pending, Paused, Resuming, Running |
//! | `Paused` | a resume | Paused |
//! | `Finished` | nothing (replicas apply the clean-up policy) | Succeeded, Failed |
//! | `Deleting` | its replicas to be gone, then the finalizer goes | as stored |
//! | `Unverified` | nothing: its record is not the controller's (`record`) | as stored |

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::restart::{self, Budget, Exit, Verdict};
use crate::api::{
    CleanUpPolicy, ConditionStatus, DependentStatus, JobConditionType as Cond, JobPhase,
    PlacementRecord, ReplicaKey, ReplicaPhase, ReplicaType, RestartPolicy, RunModeKind,
    TensorFlowTrainingJob, TensorFlowTrainingJobStatus,
};
use crate::status::{self, ReplicaView};

pub use crate::api::reason;

/// Why a replica cannot get its pod or service now (it tries again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// One of `reason::OBJECT_NAME_TAKEN`, `NAMESPACE_MISSING`, `CREATE_REFUSED`.
    pub reason: &'static str,
    pub message: String,
}

/// Which replica each cluster runs, by replica.
pub type Assignment = BTreeMap<ReplicaKey, String>;

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
    /// The `replicaSpecs` as JSON: an edit changes it.
    pub json: String,
    pub keys: Vec<ReplicaKey>,
    pub master: Option<ReplicaKey>,
    pub policies: BTreeMap<ReplicaType, RestartPolicy>,
}

impl Replicas {
    pub fn of(job: &TensorFlowTrainingJob) -> Replicas {
        let spec = &job.spec;
        Replicas {
            json: serde_json::to_string(&spec.replica_specs).unwrap_or_default(),
            keys: spec.replica_keys(),
            master: spec.master(),
            policies: ReplicaType::ALL
                .into_iter()
                .filter_map(|t| Some((t, spec.replica_spec(t)?.parsed_restart_policy()?)))
                .collect(),
        }
    }

    fn types(&self) -> Vec<ReplicaType> {
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
    /// Withdraw a queued request and drop any capacity held for the job.
    ReleasePlacement,
    /// Namespaces and PodGroups on the clusters of `assignment`.
    PrepareClusters(Assignment),
    /// Start a replica actor for each replica of `assignment` that has none.
    StartReplicas {
        epoch: u64,
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

/// What follows once the retiring replicas are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Place the job anew (a failover, or a resume).
    Place,
    /// Stay paused.
    Pause,
    /// Start replicas on the same placement, in the mode then in force.
    Start,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stage {
    New,
    Admitting,
    /// `recorded`: resolving the placement recorded in the status.
    Placing {
        recorded: bool,
    },
    Preparing,
    Active,
    /// Old replicas, by key with their cluster, being torn down.
    Retiring {
        retiring: BTreeMap<ReplicaKey, String>,
        then: Then,
    },
    Paused,
    Finished,
    /// `retiring`: replicas still being torn down; `None` while the
    /// recorded placement is being resolved to find them.
    Deleting {
        retiring: Option<BTreeMap<ReplicaKey, String>>,
    },
    /// The stored record is not the controller's (forged, see `record`):
    /// no pod is built, started, restarted or deleted from it; the job
    /// says why, and may only be deleted.
    Unverified {
        why: String,
    },
}

/// One job's lifecycle state.
#[derive(Clone, Debug)]
pub struct JobState {
    pub stage: Stage,
    /// The job's name: pods are `<name>-<type>-<index>`.
    name: String,
    /// Replica actors exist (started, and not all retired since).
    has_actors: bool,
    /// The status, but `tasks` and `aggregate` (see `status()`).
    status: TensorFlowTrainingJobStatus,
    /// The replicaSpecs the job runs (accepted at admission).
    replicas: Replicas,
    spec: Spec,
    views: BTreeMap<ReplicaKey, ReplicaView>,
    restart_counts: BTreeMap<ReplicaType, i32>,
    /// Pod uids whose exit was acted upon.
    handled: BTreeSet<String>,
    /// Of those, the ones the stored status showed (acted upon by an
    /// earlier controller) and not seen again yet.
    adopted_exits: BTreeSet<String>,
    /// Effects held until the status write of their sequence number landed.
    deferred: Vec<(u64, Effect)>,
    persist_requested: u64,
    /// A placement request or capacity hold is outstanding.
    holding: bool,
    /// The mode the current replicas run in.
    running_mode: Option<PodMode>,
    /// Replicas that cannot get their pod or service now, with why.
    blocked: BTreeMap<ReplicaKey, Blocked>,
    /// Why the job waits for a placement, while it does: the reason and
    /// the message.
    waiting: Option<(&'static str, String)>,
    /// The refused replicaSpecs (JSON) an Event was recorded for.
    refused: Option<String>,
    lost: BTreeSet<String>,
    /// Clusters that refused the job's pods for good, with why: it is
    /// placed without them.
    excluded: BTreeMap<String, String>,
    admitting: bool,
}

/// Now, in whole seconds as the API stores a `Time`: a condition that
/// changes and changes back within a second then costs no status write.
fn time(now: Timestamp) -> Time {
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

impl JobState {
    /// The machine of a job whose stored status is `status`; it starts with
    /// the first `SpecChanged`.
    pub fn new(status: Option<&TensorFlowTrainingJobStatus>, job_name: &str) -> JobState {
        let status = status.cloned().unwrap_or_default();
        let handled = status::handled_exits(&status);
        let restart_counts = status
            .tasks
            .iter()
            .filter_map(|t| Some((ReplicaType::parse(&t.replica_type)?, t.restart_count)))
            .collect();
        JobState {
            stage: Stage::New,
            name: job_name.to_string(),
            has_actors: false,
            views: status::views_of(&status, job_name),
            status,
            replicas: Replicas::default(),
            spec: Spec::default(),
            restart_counts,
            adopted_exits: handled.clone(),
            handled,
            deferred: Vec::new(),
            persist_requested: 0,
            holding: false,
            running_mode: None,
            blocked: BTreeMap::new(),
            waiting: None,
            refused: None,
            lost: BTreeSet::new(),
            excluded: BTreeMap::new(),
            admitting: false,
        }
    }

    /// The machine of a job whose stored record is not the controller's:
    /// `why` names the field.
    pub fn unverified(
        status: Option<&TensorFlowTrainingJobStatus>,
        job_name: &str,
        why: String,
    ) -> JobState {
        let mut job = JobState::new(None, job_name);
        job.status = status.cloned().unwrap_or_default();
        job.status.seal = None;
        job.stage = Stage::Unverified { why };
        job
    }

    /// Whether the status is the controller's own (to be sealed).
    pub fn is_verified(&self) -> bool {
        !matches!(self.stage, Stage::Unverified { .. })
    }

    /// Clusters the job is placed without, with why.
    pub fn excluded(&self) -> &BTreeMap<String, String> {
        &self.excluded
    }

    /// The status to write: the machine's, with `tasks` and `aggregate`
    /// from the replicas' views.
    pub fn status(&self) -> TensorFlowTrainingJobStatus {
        if !self.is_verified() {
            // As stored, but for what the machine says of it (its
            // condition): it has no replicas of its own to count.
            return self.status.clone();
        }
        let mut status = self.status.clone();
        let views: Vec<ReplicaView> = self.views.values().cloned().collect();
        status.tasks = status::tasks(&views, &self.restart_counts, &self.replicas.types());
        status.aggregate = status::aggregate(&views);
        status
    }

    /// The highest `Persist` sequence number asked for so far.
    pub fn persist_requested(&self) -> u64 {
        self.persist_requested
    }

    /// The placement epoch of the replicas the job runs or will run.
    pub fn epoch(&self) -> u64 {
        self.status.placement.as_ref().map_or(0, |p| p.epoch)
    }

    /// The replicaSpecs (JSON) pods are built from.
    pub fn accepted_replica_specs(&self) -> &str {
        &self.replicas.json
    }

    pub fn phase(&self) -> Option<JobPhase> {
        self.status.phase
    }

    /// The digest of the replicaSpecs the job started with, as recorded.
    pub fn recorded_spec_digest(&self) -> Option<&str> {
        self.status
            .placement
            .as_ref()
            .and_then(|p| p.replica_specs_digest.as_deref())
    }

    /// Whether the job was ever placed: its replicaSpecs are fixed since.
    pub fn started(&self) -> bool {
        self.status.placement.is_some()
    }

    /// Takes one event; returns the effects to carry out, in order.
    pub fn step(&mut self, event: Event, now: Timestamp) -> Vec<Effect> {
        let mut step = Step {
            job: self,
            now,
            effects: Vec::new(),
        };
        step.take(event);
        step.refresh();
        step.effects
    }
}

/// One call of `step`: the state, the time, the effects so far.
struct Step<'a> {
    job: &'a mut JobState,
    now: Timestamp,
    effects: Vec<Effect>,
}

impl Step<'_> {
    fn emit(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    fn record(&mut self, warning: bool, reason: &'static str, message: impl Into<String>) {
        self.emit(Effect::Record {
            warning,
            reason,
            message: message.into(),
        });
    }

    fn set(&mut self, kind: Cond, status: ConditionStatus, reason: &str, message: &str) {
        status::set_condition(
            &mut self.job.status.conditions,
            kind,
            status,
            reason,
            message,
            &time(self.now),
        );
    }

    fn condition_is(&self, kind: Cond, status: ConditionStatus) -> bool {
        status::condition(&self.job.status.conditions, kind).is_some_and(|c| c.status == status)
    }

    /// Asks for a status write now; `then` waits for it.
    fn persist_then(&mut self, then: Vec<Effect>) {
        self.job.persist_requested += 1;
        let seq = self.job.persist_requested;
        self.emit(Effect::Persist(seq));
        self.job.deferred.extend(then.into_iter().map(|e| (seq, e)));
    }

    fn terminal(&self) -> bool {
        self.job.status.phase.is_some_and(JobPhase::is_terminal)
    }

    fn assignment(&self) -> Option<Assignment> {
        let record = self.job.status.placement.as_ref()?;
        let assigned = record.assignment.as_ref()?;
        self.job
            .replicas
            .keys
            .iter()
            .map(|k| Some((*k, assigned.get(&k.to_string())?.clone())))
            .collect()
    }

    fn set_placement(&mut self, epoch: u64, assignment: Option<&Assignment>) {
        self.job.status.placement = Some(PlacementRecord {
            epoch,
            assignment: assignment
                .map(|a| a.iter().map(|(k, c)| (k.to_string(), c.clone())).collect()),
            replica_specs_digest: Some(crate::record::spec_digest(&self.job.replicas.json)),
        });
    }

    fn budget(&self) -> Budget {
        Budget {
            limit: self.job.spec.backoff_limit,
            used: self.job.status.backoff_count,
        }
    }

    /// The mode replicas start in now.
    fn mode(&self) -> PodMode {
        if self.job.spec.debug {
            PodMode::Debug
        } else if status::condition(&self.job.status.conditions, Cond::Paused).is_some() {
            PodMode::Resumed
        } else {
            PodMode::Normal
        }
    }

    fn release(&mut self) {
        if std::mem::take(&mut self.job.holding) {
            self.emit(Effect::ReleasePlacement);
        }
    }

    fn take(&mut self, event: Event) {
        if let Stage::Unverified { why } = &self.job.stage {
            let why = why.clone();
            self.unverified(event, &why);
            return;
        }
        match event {
            Event::SpecChanged(spec) => self.spec_changed(spec),
            Event::Admitted => {
                self.job.admitting = false;
                if self.job.stage == Stage::Admitting {
                    self.go_on();
                }
            }
            Event::AdmitFailed => self.job.admitting = false,
            Event::Placed(assignment) => self.placed(assignment),
            Event::Unplaceable(why) => {
                if matches!(self.job.stage, Stage::Placing { .. }) {
                    let waiting = if why.waits_for_unknown_clusters() {
                        (
                            reason::UNKNOWN_CLUSTER,
                            format!(
                                "waiting for clusters no MemberCluster has: {}: {why}",
                                why.unknown.join(", ")
                            ),
                        )
                    } else {
                        (
                            reason::WAITING_FOR_CAPACITY,
                            format!("waiting for capacity: {why}"),
                        )
                    };
                    if self.job.waiting.as_ref() != Some(&waiting) {
                        self.record(true, waiting.0, waiting.1.clone());
                    }
                    self.job.waiting = Some(waiting);
                }
            }
            Event::RecordedUnusable(why) => {
                if matches!(self.job.stage, Stage::Placing { recorded: true }) {
                    self.recorded_unusable(&why);
                } else if self.job.stage == (Stage::Deleting { retiring: None }) {
                    // Its clusters' garbage sweep removes what is left there.
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            Event::Prepared => {
                if self.job.stage == Stage::Preparing {
                    self.start(Intent::Run(self.mode()));
                }
            }
            Event::Replica {
                view,
                epoch,
                blocked,
            } => self.replica_report(view, epoch, blocked),
            Event::TornDown(key) => self.torn_down(key),
            Event::ClustersLost(lost) => self.clusters_lost(lost),
            Event::DeadlineReached { at } => {
                if self.deadline() == Some(at) && self.running() {
                    let seconds = self.job.spec.deadline_seconds.unwrap_or_default();
                    self.fail(
                        reason::DEADLINE,
                        &format!(
                            "the job was active longer than activeDeadlineSeconds ({seconds}s)"
                        ),
                    );
                }
            }
            Event::Persisted(seq) => {
                let (due, held): (Vec<_>, Vec<_>) = std::mem::take(&mut self.job.deferred)
                    .into_iter()
                    .partition(|(s, _)| *s <= seq);
                self.job.deferred = held;
                self.effects.extend(due.into_iter().map(|(_, e)| e));
            }
            Event::BuildFailed(problem) => {
                if !self.terminal() {
                    self.reject(&problem);
                }
            }
            Event::Refused(refusal) => self.refused(refusal),
            Event::TensorBoard(board) => {
                if !self.rejected() {
                    self.job.status.tensorboard = Some(board);
                }
            }
        }
    }

    /// Whether the job is past validation's verdict (`InvalidSpec`).
    fn rejected(&self) -> bool {
        status::condition(&self.job.status.conditions, Cond::Failed)
            .is_some_and(|c| c.reason.as_deref() == Some(reason::INVALID_SPEC))
    }

    /// Whether the deadline clock runs: the job has a span and is not done.
    fn running(&self) -> bool {
        !self.terminal()
            && self.job.status.start_time.is_some()
            && !matches!(
                self.job.stage,
                Stage::Paused
                    | Stage::Finished
                    | Stage::Deleting { .. }
                    | Stage::Retiring {
                        then: Then::Pause,
                        ..
                    }
            )
    }

    /// When the deadline of the current span passes.
    fn deadline(&self) -> Option<Timestamp> {
        let start = self.job.status.start_time.as_ref()?.0;
        let seconds = self.job.spec.deadline_seconds?;
        start
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .ok()
    }

    fn arm_deadline(&mut self) {
        if let Some(at) = self.deadline()
            && self.running()
        {
            self.emit(Effect::ArmDeadline { at });
        }
    }

    fn spec_changed(&mut self, spec: Spec) {
        let first = self.job.stage == Stage::New;
        let deadline_before = self.deadline();
        let mode_before = self.mode();
        let pause_before = self.job.spec.pause;
        self.job.spec = spec;
        if first {
            self.job.replicas = self
                .job
                .spec
                .accepted
                .clone()
                .unwrap_or_else(|| self.job.spec.replicas.clone());
        }
        if self.job.spec.deleting {
            self.delete();
            return;
        }
        if first {
            self.recover();
            return;
        }
        if matches!(self.job.stage, Stage::Finished | Stage::Deleting { .. }) || self.terminal() {
            return;
        }
        if let Some(problem) = self.job.spec.problem.clone() {
            self.reject(&problem);
            return;
        }
        self.replica_specs_edited();
        if !self.job.spec.has_finalizer && !self.job.admitting {
            self.job.admitting = true;
            self.emit(Effect::Admit);
        }
        if self.job.spec.pause != pause_before {
            if self.job.spec.pause {
                self.pause();
            } else {
                self.resume();
            }
        } else if self.job.stage == Stage::Active
            && !self.job.spec.pause
            && self.mode() != mode_before
            && self.job.running_mode != Some(self.mode())
        {
            self.switch_mode();
        }
        if self.deadline() != deadline_before {
            self.arm_deadline();
        }
    }

    /// An edit of `replicaSpecs`: taken before the job is placed, refused
    /// (visibly) after.
    fn replica_specs_edited(&mut self) {
        let current = &self.job.spec.replicas;
        if current.json == self.job.replicas.json {
            self.job.refused = None;
            return;
        }
        let started = self.job.status.placement.is_some();
        if !started {
            self.job.replicas = current.clone();
            if !self.job.admitting {
                self.job.admitting = true;
                self.emit(Effect::Admit);
            }
            if matches!(self.job.stage, Stage::Placing { recorded: false }) {
                // Its demands changed: ask again.
                self.release();
                self.request_placement(None);
            }
            return;
        }
        if self.job.refused.as_deref() != Some(&current.json) {
            self.job.refused = Some(current.json.clone());
            self.record(
                true,
                reason::SPEC_CHANGE_REFUSED,
                SPEC_CHANGE_REFUSED_MESSAGE,
            );
        }
    }

    /// The first spec: where the stored status says the job is.
    fn recover(&mut self) {
        let assignment = self.assignment();
        if self.terminal() {
            self.job.stage = Stage::Finished;
            // Clean-up may have been interrupted: the replicas finish it.
            if let Some(recorded) = assignment {
                self.request_placement(Some(recorded));
            }
            return;
        }
        if let Some(problem) = self.job.spec.problem.clone() {
            self.reject(&problem);
            return;
        }
        self.replica_specs_edited();
        if self.job.status.phase.is_none() {
            if self.job.spec.pause {
                // Created paused: its first status says so.
                self.show_paused();
            } else {
                self.job.status.phase = Some(JobPhase::Pending);
                self.set(
                    Cond::Running,
                    ConditionStatus::False,
                    "Pending",
                    "The job is waiting for its replicas.",
                );
            }
        }
        let admitted = self.job.spec.has_finalizer && self.job.spec.accepted.is_some();
        if !admitted {
            self.job.admitting = true;
            // The first status lands before the finalizer: a job that has
            // the finalizer has a sealed status, so one without is not the
            // controller's (`record::judge`).
            self.persist_then(vec![Effect::Admit]);
            self.job.stage = Stage::Admitting;
            if !self.job.spec.has_finalizer {
                return;
            }
        }
        self.arm_deadline();
        match assignment {
            // Adopt what runs there, then converge.
            Some(recorded) => self.request_placement(Some(recorded)),
            None => self.go_on(),
        }
    }

    /// Places, pauses or stays: what an admitted job without replicas does.
    fn go_on(&mut self) {
        if self.job.spec.pause {
            self.enter_paused();
        } else {
            if self.job.status.phase == Some(JobPhase::Paused) {
                // Resumed while no controller ran.
                self.show_resuming();
            }
            self.request_placement(None);
        }
    }

    fn request_placement(&mut self, recorded: Option<Assignment>) {
        let is_recorded = recorded.is_some();
        if !is_recorded {
            self.job.holding = true;
        }
        if !matches!(self.job.stage, Stage::Finished | Stage::Deleting { .. }) {
            self.job.stage = Stage::Placing {
                recorded: is_recorded,
            };
        }
        self.emit(Effect::RequestPlacement { recorded });
    }

    /// A job whose record is not the controller's: it says so once, and
    /// may go when deleted; nothing else is done for it.
    fn unverified(&mut self, event: Event, why: &str) {
        let Event::SpecChanged(spec) = event else {
            return;
        };
        let deleting = spec.deleting;
        let has_finalizer = spec.has_finalizer;
        let first = self.job.spec == Spec::default();
        self.job.spec = spec;
        if first {
            let message = format!(
                "the job's record cannot be verified ({why}): no replica is created, restarted                  or deleted from it; the pods that run are left as they are (delete the job to                  remove them)"
            );
            self.set(
                Cond::ReplicaFailure,
                ConditionStatus::True,
                reason::RECORD_UNVERIFIED,
                &message,
            );
            self.record(true, reason::RECORD_UNVERIFIED, message);
        }
        if deleting && has_finalizer {
            // What it runs on members is garbage once the job is gone:
            // their sweep removes it (the sweep trusts signed pods only).
            self.emit(Effect::RemoveFinalizer);
        }
    }

    /// A cluster refused a replica for good: the job fails (no cluster would
    /// take it) or is placed anew without that cluster. Nothing ran, so no
    /// restart is counted.
    fn refused(&mut self, refusal: Refusal) {
        if refusal.epoch != self.job.epoch() || self.job.stage != Stage::Active || self.terminal() {
            return;
        }
        let Refusal {
            key,
            cluster,
            everywhere,
            message,
            ..
        } = refusal;
        if everywhere {
            self.fail(
                reason::CREATE_REFUSED,
                &format!("replica {key}: {message}; no cluster would accept it"),
            );
            return;
        }
        let why = format!("refused replica {key}: {message}");
        self.job.excluded.insert(cluster.clone(), why.clone());
        let message = format!("cluster {cluster} {why}; placing the job without {cluster}");
        self.job.status.phase = Some(JobPhase::Pending);
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::CREATE_REFUSED,
            &message,
        );
        self.record(true, reason::CREATE_REFUSED, message);
        self.release();
        let assignment = self.assignment().unwrap_or_default();
        self.retire_for(Then::Place, assignment);
    }

    fn placed(&mut self, assignment: Assignment) {
        let epoch = self.job.epoch();
        match self.job.stage.clone() {
            Stage::Finished => {
                self.job.has_actors = true;
                let policy = self.clean_up_policy();
                self.emit(Effect::StartReplicas {
                    epoch,
                    assignment,
                    intent: Intent::Finish(policy),
                });
            }
            Stage::Deleting { retiring: None } => {
                self.job.has_actors = true;
                let retiring = self.reachable(&assignment);
                let done = retiring.is_empty();
                self.job.stage = Stage::Deleting {
                    retiring: Some(retiring),
                };
                self.emit(Effect::StartReplicas {
                    epoch,
                    assignment,
                    intent: Intent::Retire,
                });
                if done {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            Stage::Placing { recorded: true } => {
                if self.job.spec.pause {
                    // Paused while no controller ran: its replicas go, once
                    // the new epoch (without a placement) is stored.
                    self.show_paused();
                    self.set_placement(epoch + 1, None);
                    let retiring = self.reachable(&assignment);
                    self.job.stage = Stage::Retiring {
                        retiring,
                        then: Then::Pause,
                    };
                    self.job.has_actors = true;
                    self.persist_then(vec![Effect::StartReplicas {
                        epoch,
                        assignment,
                        intent: Intent::Retire,
                    }]);
                    return;
                }
                self.job.stage = Stage::Preparing;
                self.emit(Effect::PrepareClusters(assignment));
            }
            Stage::Placing { recorded: false } => {
                self.job.waiting = None;
                self.set_placement(epoch, Some(&assignment));
                // From here on every replica is being created.
                self.creating_views(&assignment);
                self.no_replica_failed_yet();
                let mut by_cluster: BTreeMap<&str, usize> = BTreeMap::new();
                for cluster in assignment.values() {
                    *by_cluster.entry(cluster.as_str()).or_default() += 1;
                }
                let summary: Vec<String> = by_cluster
                    .iter()
                    .map(|(c, n)| format!("{n} on {c}"))
                    .collect();
                self.record(
                    false,
                    "Placed",
                    format!("Replicas placed: {}.", summary.join(", ")),
                );
                self.job.stage = Stage::Preparing;
                // The record lands before any pod exists: a restarted
                // controller adopts these pods instead of placing again.
                self.persist_then(vec![Effect::PrepareClusters(assignment)]);
            }
            // Paused, ended or deleted meanwhile: whatever the placer holds
            // for the job goes.
            _ => {
                self.job.holding = false;
                self.emit(Effect::ReleasePlacement);
            }
        }
    }

    fn recorded_unusable(&mut self, why: &str) {
        if self.job.spec.pause {
            let epoch = self.job.epoch() + 1;
            self.set_placement(epoch, None);
            self.persist_then(Vec::new());
            self.enter_paused();
        } else {
            self.fail_over(why);
        }
    }

    /// Starts the replicas of the recorded placement.
    fn start(&mut self, intent: Intent) {
        let Some(assignment) = self.assignment() else {
            self.request_placement(None);
            return;
        };
        let epoch = self.job.epoch();
        if let Intent::Run(mode) = intent {
            self.job.running_mode = Some(mode);
            if self.job.status.start_time.is_none() {
                self.job.status.start_time = Some(time(self.now));
            }
            self.job.stage = Stage::Active;
            self.creating_views(&assignment);
            self.arm_deadline();
        }
        self.job.has_actors = true;
        self.emit(Effect::StartReplicas {
            epoch,
            assignment,
            intent,
        });
    }

    /// A Creating view for each replica of `assignment` that has none.
    fn creating_views(&mut self, assignment: &Assignment) {
        for (key, cluster) in assignment {
            let pod = key.object_name(&self.job.name);
            self.job
                .views
                .entry(*key)
                .or_insert_with(|| ReplicaView::creating(*key, pod, Some(cluster.clone())));
        }
    }

    fn replica_report(&mut self, view: ReplicaView, epoch: u64, blocked: Option<Blocked>) {
        if epoch != self.job.epoch() || !matches!(self.job.stage, Stage::Active | Stage::Finished) {
            // A replica of an earlier placement, being torn down.
            return;
        }
        match blocked {
            Some(blocked) if self.job.stage == Stage::Active => {
                if self.job.blocked.get(&view.key) != Some(&blocked) {
                    self.record(true, blocked.reason, blocked.message.clone());
                    self.job.blocked.insert(view.key, blocked);
                }
            }
            _ => {
                self.job.blocked.remove(&view.key);
            }
        }
        self.job.views.insert(view.key, view.clone());
        if self.job.stage != Stage::Active {
            return;
        }
        if view.is_finished() || (view.phase == ReplicaPhase::Deleted && view.uid.is_some()) {
            self.on_exit(&view);
        }
        // Once every pod is past Pending the clusters' own capacity shows
        // them, so the placement's hold can go.
        if self
            .job
            .views
            .values()
            .all(|v| !matches!(v.phase, ReplicaPhase::Creating | ReplicaPhase::Pending))
        {
            self.release();
        }
    }

    fn on_exit(&mut self, view: &ReplicaView) {
        let Some(uid) = view.uid.clone() else { return };
        if self.terminal() {
            return;
        }
        // A pod deleted by someone else (or evicted) ended as a deletion
        // ends a container: SIGTERM, exit 143.
        let deleted = view.phase == ReplicaPhase::Deleted;
        let exit = Exit {
            replica: view.key,
            succeeded: view.phase == ReplicaPhase::Succeeded,
            exit_code: if deleted {
                Some(restart::DELETED_EXIT_CODE)
            } else {
                view.exit_code
            },
            deleted,
        };
        let debug = self.job.running_mode == Some(PodMode::Debug);
        let policy = self
            .job
            .replicas
            .policies
            .get(&view.key.replica_type)
            .copied()
            .unwrap_or(RestartPolicy::Never);
        let budget = self.budget();
        if !self.job.handled.insert(uid.clone()) {
            // An exit an earlier controller counted a restart for, whose pod
            // is still there: replace it now, without counting again.
            if self.job.adopted_exits.remove(&uid)
                && restart::restart_still_due(exit, &view.pod_name, policy, budget, debug)
            {
                self.emit(Effect::RestartReplica { key: view.key, uid });
            }
            return;
        }
        if exit.succeeded && Some(view.key) == self.job.replicas.master && !debug {
            self.succeed(view.key);
            return;
        }
        match restart::decide(exit, &view.pod_name, policy, budget, debug) {
            Verdict::Restart => {
                self.emit(Effect::Milestone(Milestone::Restarted(view.clone())));
                self.job.status.backoff_count += 1;
                *self
                    .job
                    .restart_counts
                    .entry(view.key.replica_type)
                    .or_default() += 1;
                let code = match exit.exit_code {
                    _ if exit.deleted => "its pod was deleted".to_string(),
                    Some(code) => format!("exit code {code}"),
                    None => "no exit code".to_string(),
                };
                let message = format!(
                    "Restarting replica {} after {code} (restart {} of the job).",
                    view.key, self.job.status.backoff_count
                );
                self.record(false, "Restarting", message);
                // The count lands first: a controller restart in between
                // neither loses nor repeats it (see `adopted_exits`).
                self.persist_then(vec![Effect::RestartReplica { key: view.key, uid }]);
            }
            Verdict::Done => {}
            Verdict::FailJob { reason, message } => self.fail(reason, &message),
            Verdict::ReplicaFailure { message } => {
                self.set(
                    Cond::ReplicaFailure,
                    ConditionStatus::True,
                    reason::REPLICA_FAILED,
                    &message,
                );
                self.record(true, reason::REPLICA_FAILED, message);
            }
        }
    }

    fn clean_up_policy(&self) -> CleanUpPolicy {
        let failed = status::condition(&self.job.status.conditions, Cond::Failed)
            .and_then(|c| c.reason.as_deref());
        // A deadline or an invalid spec deletes every pod; other ends follow
        // the policy.
        if matches!(
            failed,
            Some(reason::DEADLINE | reason::INVALID_SPEC | reason::CREATE_REFUSED)
        ) {
            CleanUpPolicy::All
        } else {
            self.job.spec.clean_up
        }
    }

    /// The job ended: replicas clean up, nothing is held any more.
    fn end(&mut self) {
        self.release();
        self.job.deferred.clear();
        if self.condition_is(Cond::Paused, ConditionStatus::True) {
            self.set(
                Cond::Paused,
                ConditionStatus::False,
                "Ended",
                "The job has ended.",
            );
        }
        let policy = self.clean_up_policy();
        self.job.stage = Stage::Finished;
        // The end lands before any clean-up: a controller that restarts
        // after a pod was deleted must know the job ended, or it would
        // make the pod again.
        self.persist_then(vec![Effect::FinishReplicas(policy)]);
    }

    fn fail(&mut self, reason: &'static str, message: &str) {
        if self.terminal() {
            return;
        }
        self.job.status.phase = Some(JobPhase::Failed);
        self.set(Cond::Failed, ConditionStatus::True, reason, message);
        self.set(
            Cond::Completed,
            ConditionStatus::False,
            "Failed",
            "The job has failed.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            "Failed",
            "The job has failed.",
        );
        if matches!(reason, reason::REPLICA_FAILED | reason::BACKOFF_LIMIT) {
            self.set(Cond::ReplicaFailure, ConditionStatus::True, reason, message);
        }
        self.record(true, "Failed", message);
        self.end();
    }

    fn succeed(&mut self, master: ReplicaKey) {
        if self.terminal() {
            return;
        }
        let done = "The job has finished successfully.";
        self.job.status.phase = Some(JobPhase::Succeeded);
        self.set(Cond::Completed, ConditionStatus::True, "Succeeded", done);
        self.set(Cond::Running, ConditionStatus::False, "Succeeded", done);
        self.set(Cond::Failed, ConditionStatus::False, "Succeeded", done);
        self.record(
            false,
            "Succeeded",
            format!("The job succeeded: its master {master} finished."),
        );
        self.end();
    }

    fn reject(&mut self, problem: &str) {
        self.job.status.phase = Some(JobPhase::Failed);
        self.set(
            Cond::Failed,
            ConditionStatus::True,
            reason::INVALID_SPEC,
            problem,
        );
        if status::condition(&self.job.status.conditions, Cond::Running).is_some() {
            self.set(
                Cond::Running,
                ConditionStatus::False,
                "Failed",
                "The job has failed.",
            );
        }
        self.record(true, reason::INVALID_SPEC, problem);
        self.end();
    }

    /// Counts one restart and places the whole job anew under a new epoch,
    /// or fails it when the budget is spent.
    fn fail_over(&mut self, why: &str) {
        let lost = self.job.lost.clone();
        if !lost.is_empty() {
            self.emit(Effect::AbandonReplicasOn(lost));
        }
        if let Verdict::FailJob { reason, message } = restart::on_cluster_lost(why, self.budget()) {
            self.fail(reason, &message);
            return;
        }
        self.job.status.backoff_count += 1;
        self.job.status.phase = Some(JobPhase::Pending);
        let message = format!(
            "{why}; re-placing the job (restart {} of the job)",
            self.job.status.backoff_count
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::CLUSTER_LOST,
            &message,
        );
        self.record(true, reason::CLUSTER_LOST, message);
        let assignment = self.assignment().unwrap_or_default();
        self.retire_for(Then::Place, assignment);
    }

    /// Moves to a new epoch (keeping the assignment only for `Then::Start`),
    /// persists it, and only then tears the old replicas down.
    fn retire_for(&mut self, then: Then, assignment: Assignment) {
        let epoch = self.job.epoch() + 1;
        let keep = (then == Then::Start).then_some(&assignment);
        self.set_placement(epoch, keep);
        let retiring = if self.job.has_actors {
            self.reachable(&assignment)
        } else {
            BTreeMap::new()
        };
        self.job.deferred.clear();
        self.job.views.clear();
        self.job.blocked.clear();
        self.job.running_mode = None;
        self.job.stage = Stage::Retiring {
            retiring: retiring.clone(),
            then,
        };
        let teardown = if retiring.is_empty() {
            Vec::new()
        } else {
            vec![Effect::RetireReplicas]
        };
        self.persist_then(teardown);
        if retiring.is_empty() {
            self.retired();
        }
    }

    /// The replicas of `assignment` on clusters not lost.
    fn reachable(&self, assignment: &Assignment) -> BTreeMap<ReplicaKey, String> {
        assignment
            .iter()
            .filter(|(_, cluster)| !self.job.lost.contains(*cluster))
            .map(|(k, c)| (*k, c.clone()))
            .collect()
    }

    fn torn_down(&mut self, key: ReplicaKey) {
        match &mut self.job.stage {
            Stage::Retiring { retiring, .. } => {
                retiring.remove(&key);
                if retiring.is_empty() {
                    self.retired();
                }
            }
            Stage::Deleting {
                retiring: Some(retiring),
            } => {
                retiring.remove(&key);
                if retiring.is_empty() {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            _ => {}
        }
    }

    /// The old replicas are gone: on to what the spec says now.
    fn retired(&mut self) {
        let Stage::Retiring { then, .. } = self.job.stage else {
            return;
        };
        self.job.has_actors = false;
        match then {
            _ if self.job.spec.pause => self.enter_paused(),
            Then::Start => self.start(Intent::Run(self.mode())),
            Then::Place | Then::Pause => self.request_placement(None),
        }
    }

    fn clusters_lost(&mut self, lost: BTreeSet<String>) {
        self.job.lost = lost.clone();
        let deleting = matches!(self.job.stage, Stage::Deleting { .. });
        match &mut self.job.stage {
            Stage::Retiring { retiring, .. }
            | Stage::Deleting {
                retiring: Some(retiring),
            } => {
                let hit: BTreeSet<String> = retiring
                    .values()
                    .filter(|c| lost.contains(*c))
                    .cloned()
                    .collect();
                if hit.is_empty() {
                    return;
                }
                retiring.retain(|_, c| !hit.contains(c));
                let done = retiring.is_empty();
                self.emit(Effect::AbandonReplicasOn(hit));
                if done && deleting {
                    self.emit(Effect::RemoveFinalizer);
                } else if done {
                    self.retired();
                }
            }
            Stage::Preparing | Stage::Active => {
                let assignment = self.assignment().unwrap_or_default();
                let mut hit: Vec<&str> = assignment
                    .values()
                    .filter(|c| lost.contains(*c))
                    .map(String::as_str)
                    .collect();
                hit.dedup();
                if !hit.is_empty() {
                    let why = format!("member cluster {} was lost", hit.join(", "));
                    self.fail_over(&why);
                }
            }
            _ => {}
        }
    }

    fn pause(&mut self) {
        match self.job.stage.clone() {
            Stage::Placing { recorded: false } => {
                self.release();
                self.enter_paused();
            }
            Stage::Preparing => {
                self.job.deferred.clear();
                self.release();
                let epoch = self.job.epoch() + 1;
                self.set_placement(epoch, None);
                self.persist_then(Vec::new());
                self.enter_paused();
            }
            Stage::Active => {
                self.release();
                let assignment = self.assignment().unwrap_or_default();
                self.show_paused();
                self.retire_for(Then::Pause, assignment);
            }
            Stage::Retiring { retiring, then } => {
                if then == Then::Start {
                    // The kept assignment goes: the job is placed anew at resume.
                    let epoch = self.job.epoch();
                    self.set_placement(epoch, None);
                    self.persist_then(Vec::new());
                }
                self.job.stage = Stage::Retiring {
                    retiring,
                    then: Then::Pause,
                };
                self.show_paused();
            }
            // Admitting and resolving a recorded placement see the spec when
            // they are done; the others are past pausing.
            _ => {}
        }
    }

    /// Phase and conditions of a paused job; its span ends.
    fn show_paused(&mut self) {
        if self.job.status.phase == Some(JobPhase::Paused) {
            return;
        }
        self.job.status.phase = Some(JobPhase::Paused);
        self.job.status.start_time = None;
        self.job.waiting = None;
        self.set(
            Cond::Paused,
            ConditionStatus::True,
            reason::PAUSED,
            "The job is paused: its replicas are deleted.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::PAUSED,
            "The job is paused.",
        );
        self.record(false, reason::PAUSED, "The job is paused.");
    }

    fn enter_paused(&mut self) {
        self.show_paused();
        self.job.views.clear();
        self.job.stage = Stage::Paused;
    }

    fn resume(&mut self) {
        let retiring = matches!(self.job.stage, Stage::Retiring { .. });
        if self.job.stage != Stage::Paused && !retiring {
            return;
        }
        self.show_resuming();
        if let Stage::Retiring { then, .. } = &mut self.job.stage {
            *then = Then::Place;
        } else {
            self.request_placement(None);
        }
    }

    fn show_resuming(&mut self) {
        self.job.status.phase = Some(JobPhase::Resuming);
        self.set(
            Cond::Paused,
            ConditionStatus::False,
            "Resumed",
            "The job is resuming.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::RESUMING,
            "The job is resuming.",
        );
        self.record(false, reason::RESUMING, "The job is resuming.");
    }

    /// Debug turned on or off: the replicas are replaced (no restart
    /// counted) on the same placement.
    fn switch_mode(&mut self) {
        let Some(assignment) = self.assignment() else {
            return;
        };
        let message = if self.job.spec.debug {
            "Debug mode is on: replacing the replicas with debug pods."
        } else {
            "Debug mode is off: replacing the replicas with training pods."
        };
        self.record(false, "RunModeChanged", message);
        self.retire_for(Then::Start, assignment);
    }

    fn delete(&mut self) {
        if matches!(self.job.stage, Stage::Deleting { .. }) {
            return;
        }
        self.release();
        self.job.deferred.clear();
        self.record(false, "Deleting", "Deleting the job's pods and services.");
        self.emit(Effect::DeleteMemberPodGroups);
        let live = match &self.job.stage {
            Stage::Retiring { retiring, .. } => Some(retiring.clone()),
            _ if self.job.has_actors => Some(self.assignment().unwrap_or_default()),
            // No replica actors: an earlier controller's may still run.
            _ => None,
        };
        match live {
            Some(live) => {
                let retiring = self.reachable(&live);
                let done = retiring.is_empty();
                self.job.stage = Stage::Deleting {
                    retiring: Some(retiring),
                };
                self.emit(Effect::RetireReplicas);
                if done {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            // Just started: find what an earlier controller left running.
            None => match self.assignment() {
                Some(recorded) => {
                    self.job.stage = Stage::Deleting { retiring: None };
                    self.emit(Effect::RequestPlacement {
                        recorded: Some(recorded),
                    });
                }
                None => {
                    self.job.stage = Stage::Deleting {
                        retiring: Some(BTreeMap::new()),
                    };
                    self.emit(Effect::RemoveFinalizer);
                }
            },
        }
    }

    /// Phase and conditions that follow from the replicas' views, after
    /// every event.
    fn refresh(&mut self) {
        if matches!(self.job.stage, Stage::New | Stage::Unverified { .. }) || self.terminal() {
            return;
        }
        let active = self.job.stage == Stage::Active;
        let all_created = active
            && !self.job.views.is_empty()
            && self
                .job
                .views
                .values()
                .all(|v| v.phase != ReplicaPhase::Creating);
        if all_created && !self.condition_is(Cond::Initialized, ConditionStatus::True) {
            self.emit(Effect::Milestone(Milestone::PodsCreated));
        }
        let (state, why, message) = if self.job.refused.is_some() {
            let state =
                if all_created || self.condition_is(Cond::Initialized, ConditionStatus::True) {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                };
            (
                state,
                reason::SPEC_CHANGE_REFUSED,
                SPEC_CHANGE_REFUSED_MESSAGE.to_string(),
            )
        } else if let Some(blocked) = self.job.blocked.values().next() {
            (
                ConditionStatus::False,
                blocked.reason,
                blocked.message.clone(),
            )
        } else if let Some((why, message)) = &self.job.waiting {
            (ConditionStatus::False, *why, message.clone())
        } else if all_created {
            (
                ConditionStatus::True,
                "Initialized",
                "The job has been initialized successfully.".to_string(),
            )
        } else {
            return self.refresh_running();
        };
        self.set(Cond::Initialized, state, why, &message);
        self.refresh_running();
    }

    /// The ReplicaFailure condition, False, once the job has replicas. Set
    /// with the placement, so that it rides on that write instead of being
    /// a change of conditions of its own when the first replica reports.
    fn no_replica_failed_yet(&mut self) {
        if status::condition(&self.job.status.conditions, Cond::ReplicaFailure).is_none() {
            self.set(
                Cond::ReplicaFailure,
                ConditionStatus::False,
                "NoReplicaFailed",
                "No replica has failed for good.",
            );
        }
    }

    fn refresh_running(&mut self) {
        if self.job.stage != Stage::Active || self.job.views.is_empty() {
            return;
        }
        self.no_replica_failed_yet();
        let all_up = self.job.views.values().all(|v| {
            matches!(
                v.phase,
                ReplicaPhase::Running | ReplicaPhase::Succeeded | ReplicaPhase::Failed
            )
        });
        let previous = self.job.status.phase;
        if all_up
            && matches!(
                previous,
                Some(JobPhase::Pending | JobPhase::Resuming) | None
            )
        {
            self.emit(Effect::Milestone(Milestone::Running { previous }));
            self.job.status.phase = Some(JobPhase::Running);
            self.set(
                Cond::Running,
                ConditionStatus::True,
                "Running",
                "All replicas are running.",
            );
            self.record(false, "Running", "All replicas are running.");
        }
    }
}

/// The condition and Event message of a refused `replicaSpecs` edit.
pub const SPEC_CHANGE_REFUSED_MESSAGE: &str = "spec.replicaSpecs may not change after the job \
    started: the edit is ignored and the job goes on with the replicaSpecs it started with \
    (restore them, or create a new job)";

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
