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
//! | `Placing` | a placement (new, or the recorded one resolved) | Pending, Resuming |
//! | `Admitting` | the finalizer (and accepted replicaSpecs) to land, after the status that records its placement (a job created paused: after its first status) | Pending |
//! | `Preparing` | namespaces and PodGroups on the placement's clusters | Pending, Resuming |
//! | `Active` | its replicas to end | Pending, Resuming, Running |
//! | `Retiring` | its old replicas to be gone (failover, pause, mode switch) | Pending, Paused, Resuming, Running |
//! | `Paused` | a resume | Paused |
//! | `Finished` | nothing (replicas apply the clean-up policy) | Succeeded, Failed |
//! | `Deleting` | its replicas to be gone, then the finalizer goes | as stored |
//! | `Unverified` | nothing: its record is not the controller's (`record`) | as stored |
//!
//! The machine by concern, one file each: `events` (what it reads and
//! says), `admission` (the first spec and edits), `placement`, `running`
//! (replicas' exits, restarts, the deadline, the end), `failover`, `pause`
//! (pause, resume and debug), `teardown` (deletion) and `views` (the
//! replicas' views, with the status's `tasks` and `aggregate`); this file
//! holds the state, the dispatch of events and the status that follows.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::restart::{self, Budget, Exit, Verdict};
use crate::api::{
    Aggregate, CleanUpPolicy, ConditionStatus, FailoverScope, JobConditionType as Cond, JobPhase,
    PlacementRecord, ReplicaKey, ReplicaPhase, ReplicaSpec, ReplicaType, RestartPolicy, TaskStatus,
    TensorFlowTrainingJobStatus,
};
use crate::status::{self, ReplicaView};

pub use crate::api::reason;
use crate::api::reason::Failure;
pub use events::*;

mod admission;
mod events;
mod failover;
mod pause;
mod placement;
mod running;
mod teardown;
mod views;

use admission::RefusedEdit;
pub use admission::SPEC_CHANGE_REFUSED_MESSAGE;

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
    /// The status to write; its `tasks` and `aggregate` change with
    /// `views` and `restart_counts` (see `views.rs`).
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
    /// The edit the job does not take, while it stands.
    refused: Option<RefusedEdit>,
    lost: BTreeSet<String>,
    /// Why the job failed, once it did.
    failure: Option<Failure>,
    /// Clusters that refused the job's pods for good, with why: it is
    /// placed without them.
    excluded: BTreeMap<String, String>,
    admitting: bool,
    /// Not admitted yet, and placed before it is: the finalizer follows
    /// the status write that records the placement.
    admit_with_placement: bool,
    /// Replicas a partial failover moves, until they start again.
    moving: Option<Moving>,
}

/// Replicas a partial failover (`failover: LostReplicas`) moves off lost
/// clusters, while every other replica keeps its pod: first waiting for
/// their new clusters, then for those clusters to be prepared.
#[derive(Clone, Debug, PartialEq)]
pub enum Moving {
    Placing(BTreeSet<ReplicaKey>),
    Preparing(Assignment),
}

/// `assignment` without the moved replicas not started yet: they have no
/// actor (and no pod) to tear down.
fn without_unstarted(mut assignment: Assignment, moving: Option<&Moving>) -> Assignment {
    if let Some(Moving::Preparing(placed)) = moving {
        assignment.retain(|key, _| !placed.contains_key(key));
    }
    assignment
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
        let mut status = status.cloned().unwrap_or_default();
        let handled = status::handled_exits(&status);
        let failure = status::condition(&status.conditions, Cond::Failed)
            .filter(|c| c.status == ConditionStatus::True)
            .and_then(|c| Failure::of_reason(c.reason.as_deref()?));
        let restart_counts = status
            .tasks
            .iter()
            .filter_map(|t| Some((ReplicaType::parse(&t.replica_type)?, t.restart_count)))
            .collect();
        let views = status::views_of(&status, job_name);
        // `aggregate` counts the stored replicas as read back; `tasks` lists
        // them once the first spec says which types the job runs.
        status.aggregate = status::aggregate(views.values());
        status.tasks = Vec::new();
        JobState {
            stage: Stage::New,
            name: job_name.to_string(),
            has_actors: false,
            views,
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
            failure,
            lost: BTreeSet::new(),
            excluded: BTreeMap::new(),
            admitting: false,
            admit_with_placement: false,
            moving: None,
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

    /// The status to write. An unverified job's is as stored, but for
    /// what the machine says of it (its condition): it has no replicas of
    /// its own to count.
    pub fn status(&self) -> &TensorFlowTrainingJobStatus {
        &self.status
    }

    /// Whether the status waits to be written: a new job's first status is
    /// the one that records its placement (or says why it waits for one),
    /// which the controller's own placer answers within moments; written
    /// before, it would be a write that says only "Pending".
    pub fn first_status_awaits_placement(&self) -> bool {
        self.admit_with_placement
            && self.stage == (Stage::Placing { recorded: false })
            && self.waiting.is_none()
    }

    /// The highest `Persist` sequence number asked for so far.
    pub fn persist_requested(&self) -> u64 {
        self.persist_requested
    }

    /// The placement epoch of the replicas the job runs or will run.
    pub fn epoch(&self) -> u64 {
        self.status.placement.as_ref().map_or(0, |p| p.epoch)
    }

    /// The placement epoch of each replica.
    pub fn epochs(&self) -> Epochs {
        let kept = self
            .status
            .placement
            .as_ref()
            .and_then(|p| p.replica_epochs.as_ref());
        Epochs {
            job: self.epoch(),
            kept: self
                .replicas
                .keys
                .iter()
                .filter_map(|k| Some((*k, *kept?.get(&k.to_string())?)))
                .collect(),
        }
    }

    /// The placement epoch of `key`'s pod.
    fn replica_epoch(&self, key: ReplicaKey) -> u64 {
        let Some(record) = self.status.placement.as_ref() else {
            return 0;
        };
        record
            .replica_epochs
            .as_ref()
            .and_then(|kept| kept.get(&key.to_string()).copied())
            .unwrap_or(record.epoch)
    }

    /// Replicas a partial failover is moving: they have no pod yet.
    pub fn moving(&self) -> bool {
        self.moving.is_some()
    }

    /// The replicaSpecs (JSON) pods are built from.
    pub fn accepted_replica_specs(&self) -> &str {
        &self.replicas.json
    }

    /// The replicaSpecs pods are built from, typed.
    pub fn accepted_specs(&self) -> &[ReplicaSpec] {
        &self.replicas.specs
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

    /// Whether the job is still starting: its placement is not answered
    /// yet (a job that waits for one is not starting, it waits), its
    /// clusters are being prepared, or a replica has no pod yet and is not
    /// blocked. The controller starts a bounded number of jobs at once
    /// (`start_gate`); a job frees its share once this turns false.
    pub fn starting(&self) -> bool {
        match &self.stage {
            Stage::New | Stage::Admitting | Stage::Preparing => true,
            Stage::Placing { .. } => self.waiting.is_none(),
            Stage::Active => self.replicas.keys.iter().any(|key| {
                !self.blocked.contains_key(key)
                    && self
                        .views
                        .get(key)
                        .is_none_or(|view| view.phase == ReplicaPhase::Creating)
            }),
            Stage::Retiring { .. }
            | Stage::Paused
            | Stage::Finished
            | Stage::Deleting { .. }
            | Stage::Unverified { .. } => false,
        }
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

    /// `Running` False for `reason`, and a Warning Event saying the same.
    fn warn_not_running(&mut self, reason: &'static str, message: String) {
        self.set(Cond::Running, ConditionStatus::False, reason, &message);
        self.record(true, reason, message);
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

    /// The recorded cluster of each replica that has one: all of them but
    /// while a partial failover waits for the moved ones' new clusters.
    fn assignment(&self) -> Option<Assignment> {
        let record = self.job.status.placement.as_ref()?;
        let assigned = record.assignment.as_ref()?;
        Some(
            self.job
                .replicas
                .keys
                .iter()
                .filter_map(|k| Some((*k, assigned.get(&k.to_string())?.clone())))
                .collect(),
        )
    }

    /// The replicas the recorded placement has no cluster for (a partial
    /// failover's, until their new clusters are recorded).
    fn unplaced(&self, assignment: &Assignment) -> BTreeSet<ReplicaKey> {
        self.job
            .replicas
            .keys
            .iter()
            .filter(|k| !assignment.contains_key(k))
            .copied()
            .collect()
    }

    /// Records a placement of every replica at `epoch` (none while
    /// `assignment` is `None`).
    fn set_placement(&mut self, epoch: u64, assignment: Option<&Assignment>) {
        self.set_partial_placement(epoch, assignment, &BTreeMap::new());
    }

    /// Records a placement at `epoch` but for the replicas of `kept`, which
    /// keep their pods of earlier epochs.
    fn set_partial_placement(
        &mut self,
        epoch: u64,
        assignment: Option<&Assignment>,
        kept: &BTreeMap<ReplicaKey, u64>,
    ) {
        let active_seconds = self.active_seconds();
        self.job.status.placement = Some(PlacementRecord {
            epoch,
            assignment: assignment
                .map(|a| a.iter().map(|(k, c)| (k.to_string(), c.clone())).collect()),
            replica_specs_digest: Some(crate::record::spec_digest(&self.job.replicas.json)),
            replica_epochs: (!kept.is_empty())
                .then(|| kept.iter().map(|(k, e)| (k.to_string(), *e)).collect()),
            active_seconds: (active_seconds > 0).then_some(active_seconds),
        });
    }

    /// Seconds the current span was active before its latest failover.
    fn active_seconds(&self) -> u64 {
        self.job
            .status
            .placement
            .as_ref()
            .and_then(|p| p.active_seconds)
            .unwrap_or(0)
    }

    /// The deadline's clock stops (a failover): the time active so far is
    /// kept, and a new `startTime` is set when replicas start again.
    fn stop_clock(&mut self) {
        let Some(start) = self.job.status.start_time.take() else {
            return;
        };
        let active = self.now.as_second().saturating_sub(start.0.as_second());
        let total = self.active_seconds() + u64::try_from(active).unwrap_or(0);
        if let Some(placement) = &mut self.job.status.placement {
            placement.active_seconds = (total > 0).then_some(total);
        }
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
                // The spec describes the TensorBoard to be created: it is
                // there from admission on, also while the job waits.
                self.emit(Effect::EnsureTensorBoard);
                if self.job.stage == Stage::Admitting {
                    if self.job.holding
                        && let Some(assignment) = self.assignment()
                    {
                        // Placed before admission: what was seen meanwhile
                        // (a pause, a lost cluster) applies now, as it
                        // would have while preparing.
                        self.job.stage = Stage::Preparing;
                        if self.job.spec.pause {
                            self.pause();
                        } else if self.names_lost(&assignment) {
                            let lost = self.job.lost.clone();
                            self.clusters_lost(lost);
                        } else {
                            self.emit(Effect::PrepareClusters(assignment));
                        }
                    } else {
                        self.go_on();
                    }
                }
            }
            Event::AdmitFailed => self.job.admitting = false,
            Event::Placed(assignment) => self.placed(assignment),
            Event::Unplaceable(why) => {
                if matches!(self.job.stage, Stage::Placing { .. })
                    || matches!(self.job.moving, Some(Moving::Placing(_)))
                {
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
                    self.job.waiting = None;
                    self.start(Intent::Run(self.mode()));
                } else {
                    self.moved_prepared();
                }
            }
            Event::PreparationFailed(why) => self.preparation_failed(why),
            Event::RetryDue => {
                if self.job.stage == Stage::Preparing
                    && let Some(assignment) = self.assignment()
                {
                    self.emit(Effect::PrepareClusters(assignment));
                } else if let Some(Moving::Preparing(moved)) = &self.job.moving {
                    self.emit(Effect::PrepareClusters(moved.clone()));
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
                        Failure::Deadline,
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
        let (state, why, message) = if let Some(refused) = &self.job.refused {
            let state =
                if all_created || self.condition_is(Cond::Initialized, ConditionStatus::True) {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                };
            (state, reason::SPEC_CHANGE_REFUSED, refused.message())
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
                reason::INITIALIZED,
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
                reason::NO_REPLICA_FAILED,
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
            // No Event: it would repeat the condition word for word.
            self.set(
                Cond::Running,
                ConditionStatus::True,
                reason::RUNNING,
                "All replicas are running.",
            );
        }
    }
}

#[cfg(test)]
mod tests;
