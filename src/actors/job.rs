//! JobActor: owns one TensorFlowTrainingJob. It validates the job, keeps
//! the finalizer, starts one ReplicaActor per replica, applies the restart
//! policy and the shared backoff budget to what they report, runs the
//! deadline timer, pause and resume, clean-up, and writes the job's status —
//! coalesced, and only when it changed.
//!
//! Failover: when a cluster holding replicas of an unfinished job is lost,
//! the job's replicas there are abandoned (that cluster's garbage sweep
//! removes them when it returns), the others torn down, one restart is
//! counted, the placement epoch goes up (recorded on the job first, so a
//! restarted controller neither reuses the old placement nor counts again),
//! and the whole job is placed anew. Reports of replicas of older epochs
//! are ignored, so their pods never show in the status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Shared;
use super::cluster::ClusterHandle;
use super::members::{MemberSupervisor, Place, Placed, PlacementDecided, Release, Resolve, Target};
use super::replica::{Abandon, Finish, ReplicaActor, ReplicaReport, Restart, Teardown, TornDown};
use crate::api::{
    CleanUpPolicy, ConditionStatus, JobConditionType as Cond, JobPhase, ReplicaKey, ReplicaPhase,
    ReplicaType, RestartPolicy, RunModeKind, TensorFlowTrainingJob, TensorFlowTrainingJobStatus,
};
use crate::builders::{self, PodMode, PodParams, Topology};
use crate::lifecycle::{self, Budget, Exit, Verdict};
use crate::status::{self, ReplicaView};
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::JobCensus;
use crate::validation;

pub const FINALIZER: &str = "federation.tfjob.io/cleanup";

/// A newer version of the job object.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobUpdated(pub Arc<TensorFlowTrainingJob>);

/// The member clusters lost now (see `Shared::lost_clusters`).
#[derive(Message)]
#[rtype(result = "()")]
struct LostClusters(BTreeSet<String>);

/// A replica's actor and the cluster it works on.
struct Replica {
    cluster: String,
    actor: Addr<ReplicaActor>,
}

/// A failover under way: the old epoch's replicas on reachable clusters are
/// being torn down, and the new epoch is being recorded on the job.
struct Failover {
    retiring: BTreeSet<ReplicaKey>,
    epoch_recorded: bool,
}

/// Clusters of an earlier placement that were not lost: their PodGroups go
/// unless the new placement uses them too.
type RetiredTargets = BTreeMap<String, Target>;

/// The job's TensorBoard as the manager's watch last saw it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TensorBoardChanged(pub DynamicObject);

/// Asks the JobManager to watch TensorBoards (sent once one was created, so
/// a cluster without the TensorBoard CRD is never watched for them).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchTensorBoards;

/// The job object is gone from the API.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobGone;

pub struct JobActor {
    shared: Arc<Shared>,
    placer: Addr<MemberSupervisor>,
    tensorboards: Recipient<WatchTensorBoards>,
    /// Where the replicas run, once decided.
    placement: Option<Placed>,
    /// A placement was asked for and is not decided yet.
    placing: bool,
    /// The pod mode to start replicas in once placed.
    start_mode: PodMode,
    /// The placement's capacity hold was released.
    released: bool,
    /// Namespaces and PodGroups exist on the placement's clusters.
    clusters_prepared: bool,
    /// The `activeDeadlineSeconds` timer runs (it counts while a job waits
    /// for capacity too).
    deadline_armed: bool,
    job: Arc<TensorFlowTrainingJob>,
    /// The placement epoch of the replicas this actor starts.
    epoch: u64,
    failover: Option<Failover>,
    retired_targets: RetiredTargets,
    replicas: BTreeMap<ReplicaKey, Replica>,
    views: BTreeMap<ReplicaKey, ReplicaView>,
    /// Pod uids whose exit was already acted upon.
    handled: BTreeSet<String>,
    /// Of those, the ones the status showed when this actor started (acted
    /// upon by an earlier controller), not yet seen again.
    adopted_exits: BTreeSet<String>,
    /// Restarts decided and counted, sent to their replicas once a status
    /// write holding the count succeeded.
    pending_restarts: Vec<(ReplicaKey, String)>,
    status: TensorFlowTrainingJobStatus,
    restart_counts: BTreeMap<ReplicaType, i32>,
    written: Option<TensorFlowTrainingJobStatus>,
    /// When the last status write was sent (writes are at least
    /// `statusWriteIntervalMs` apart, except the terminal one).
    last_write: Option<Instant>,
    /// When the scheduled status write is due, and its timer.
    flush_due: Option<(Instant, SpawnHandle)>,
    writing: bool,
    /// The status changed while a write was in flight.
    flush_after_write: bool,
    /// Writes of replica details alone since the last summary change.
    detail_writes: u32,
    /// A finalizer patch is in flight.
    adding_finalizer: bool,
    /// The finalizer patch succeeded (its watch event may still be on the way).
    finalizer_added: bool,
    /// Validation failed: the job is Failed and owns nothing.
    invalid: bool,
    tearing_down: bool,
    /// This actor and its job's stored phase, in the metrics.
    census: JobCensus,
}

/// Applies JSON-patch operations (with their `test` guards) to the job.
async fn json_patch_job(
    api: Api<TensorFlowTrainingJob>,
    name: String,
    operations: serde_json::Value,
) -> kube::Result<TensorFlowTrainingJob> {
    let patch: json_patch::Patch =
        serde_json::from_value(operations).map_err(kube::Error::SerdeError)?;
    api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
}

/// Now, in whole seconds as the API stores a `Time`: a condition that
/// changes and changes back within a second then costs no status write.
fn now() -> Time {
    let now = jiff::Timestamp::now();
    Time(jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

impl JobActor {
    pub fn new(
        shared: Arc<Shared>,
        placer: Addr<MemberSupervisor>,
        tensorboards: Recipient<WatchTensorBoards>,
        job: Arc<TensorFlowTrainingJob>,
    ) -> JobActor {
        let status = job.status.clone().unwrap_or_default();
        // Exits the status already shows were acted upon before a restart.
        let handled = status::handled_exits(&status);
        let restart_counts = status
            .tasks
            .iter()
            .filter_map(|t| Some((ReplicaType::parse(&t.replica_type)?, t.restart_count)))
            .collect();
        JobActor {
            census: shared.metrics.job_census(status.phase),
            shared,
            placer,
            tensorboards,
            placement: None,
            placing: false,
            start_mode: PodMode::Normal,
            released: false,
            clusters_prepared: false,
            deadline_armed: false,
            written: job.status.clone(),
            epoch: crate::placement::Recorded::of(job.annotations()).epoch,
            failover: None,
            retired_targets: RetiredTargets::new(),
            job,
            replicas: BTreeMap::new(),
            views: BTreeMap::new(),
            adopted_exits: handled.clone(),
            handled,
            pending_restarts: Vec::new(),
            status,
            restart_counts,
            // The first write waits one interval, so it carries the first
            // pods' progress too.
            last_write: Some(Instant::now()),
            flush_due: None,
            writing: false,
            flush_after_write: false,
            detail_writes: 0,
            adding_finalizer: false,
            finalizer_added: false,
            invalid: false,
            tearing_down: false,
        }
    }

    /// The restarts `runPolicy.backoffLimit` still allows.
    fn budget(&self) -> Budget {
        Budget {
            limit: self
                .job
                .spec
                .run_policy
                .as_ref()
                .and_then(|p| p.backoff_limit),
            used: self.status.backoff_count,
        }
    }

    fn name(&self) -> String {
        self.job.name_any()
    }

    fn namespace(&self) -> String {
        self.job.namespace().unwrap_or_default()
    }

    fn api(&self) -> Api<TensorFlowTrainingJob> {
        Api::namespaced(self.shared.home.client.clone(), &self.namespace())
    }

    fn phase(&self) -> Option<JobPhase> {
        self.status.phase
    }

    fn terminal(&self) -> bool {
        self.phase().is_some_and(JobPhase::is_terminal)
    }

    fn event(&self, type_: EventType, reason: &str, note: String) {
        let recorder = self.shared.recorder.clone();
        let reference = self.job.object_ref(&());
        let event = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        let job = self.name();
        tracing::info!(%job, reason, "{}", event.note.as_deref().unwrap_or_default());
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(%job, error = %e, "publishing event failed");
            }
        });
    }

    fn set_condition(&mut self, kind: Cond, status: ConditionStatus, reason: &str, message: &str) {
        status::set_condition(
            &mut self.status.conditions,
            kind,
            status,
            reason,
            message,
            &now(),
        );
    }

    /// Starts (or resumes) the job's replicas and job-level objects, once
    /// the job is placed.
    fn start_replicas(&mut self, ctx: &mut Context<Self>, mode: PodMode) {
        self.arm_deadline(ctx);
        if self.failover.is_some() {
            // The failover starts them once the old epoch is cleared away.
            self.start_mode = mode;
            return;
        }
        let Some(placed) = self.placement.clone() else {
            self.start_mode = mode;
            self.request_placement(ctx);
            return;
        };
        let job = self.job.clone();
        let mut topology = Topology::new(self.shared.home.name.clone());
        for (key, cluster) in &placed.assignment {
            topology.assign(*key, cluster.clone());
        }
        for (name, target) in &placed.targets {
            topology.set_address_template(name.clone(), target.address_template.clone());
        }
        let owner = builders::owner_reference(&job).ok();
        let keys = job.spec.replica_keys();
        if !self.clusters_prepared {
            // Replicas start once namespaces and PodGroups exist.
            self.ensure_job_objects(ctx, &placed, &topology, &keys, mode);
            return;
        }
        for key in keys {
            if self.replicas.contains_key(&key) {
                continue;
            }
            let Some(target) = placed
                .assignment
                .get(&key)
                .and_then(|c| placed.targets.get(c))
            else {
                continue;
            };
            // Owner references cannot cross clusters: members' objects are
            // removed by the finalizer instead.
            let owner = if target.home { owner.clone() } else { None };
            let params = PodParams {
                topology: &topology,
                epoch: self.epoch,
                mode,
                owner: owner.clone(),
            };
            let built = builders::build_pod(&job, key, &params)
                .and_then(|pod| Ok((pod, builders::build_service(&job, key, self.epoch, owner)?)));
            let (pod, service) = match built {
                Ok(objects) => objects,
                Err(e) => {
                    self.fail(
                        ctx,
                        validation::INVALID_SPEC_REASON,
                        &format!("replica {key}: {e}"),
                    );
                    return;
                }
            };
            let actor = ReplicaActor::new(
                key,
                target.handle.clone(),
                pod,
                service,
                ctx.address().recipient(),
                ctx.address().recipient(),
                self.shared.config.retry_interval(),
            )
            .exporting_services(target.export_services);
            self.views.insert(
                key,
                ReplicaView::creating(
                    key,
                    key.object_name(&self.name()),
                    Some(target.handle.name.clone()),
                ),
            );
            self.replicas.insert(
                key,
                Replica {
                    cluster: target.handle.name.clone(),
                    actor: actor.start(),
                },
            );
        }
        // The first status write then carries the initial conditions too.
        self.update_phase();
    }

    /// The placement recorded on the job by an earlier decision of this epoch.
    fn recorded_placement(&self) -> Option<crate::placement::Assignment> {
        let recorded = crate::placement::Recorded::of(self.job.annotations());
        if recorded.epoch != self.epoch {
            return None;
        }
        recorded.assignment(&self.job.spec.replica_keys())
    }

    /// Reuses the recorded placement, or asks for a new one.
    fn request_placement(&mut self, ctx: &mut Context<Self>) {
        if self.placing {
            return;
        }
        self.placing = true;
        let Some(recorded) = self.recorded_placement() else {
            self.ask_placement(ctx);
            return;
        };
        let clusters: Vec<String> = recorded
            .values()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ctx.spawn(self.placer.send(Resolve(clusters)).into_actor(self).map(
            move |resolved, act, ctx| match resolved {
                Ok(Ok(targets)) => {
                    act.placing = false;
                    act.placement = Some(Placed {
                        assignment: recorded,
                        targets,
                    });
                    let mode = act.start_mode;
                    act.start_replicas(ctx, mode);
                }
                Ok(Err(why)) => act.recorded_placement_unusable(ctx, &why),
                Err(e) => act.recorded_placement_unusable(ctx, &e.to_string()),
            },
        ));
    }

    /// A recorded cluster is lost or gone: the job fails over as if it had
    /// been lost while running.
    fn recorded_placement_unusable(&mut self, ctx: &mut Context<Self>, why: &str) {
        tracing::warn!(job = %self.name(), why, "the recorded placement cannot be used");
        self.placing = false;
        self.fail_over(ctx, why);
    }

    /// Replicas on lost clusters stop at once; their objects wait for the
    /// cluster's garbage sweep.
    fn abandon_replicas_on(&mut self, lost: &BTreeSet<String>) {
        let abandoned: Vec<ReplicaKey> = self
            .replicas
            .iter()
            .filter(|(_, r)| lost.contains(&r.cluster))
            .map(|(k, _)| *k)
            .collect();
        for key in abandoned {
            if let Some(replica) = self.replicas.remove(&key) {
                replica.actor.do_send(Abandon);
            }
            if let Some(failover) = &mut self.failover {
                failover.retiring.remove(&key);
            }
        }
    }

    /// Reacts to the lost clusters changing.
    fn on_lost_clusters(&mut self, ctx: &mut Context<Self>, lost: &BTreeSet<String>) {
        if self.tearing_down {
            self.abandon_replicas_on(lost);
            self.begin_teardown(ctx);
            return;
        }
        if self.terminal() || self.invalid {
            return;
        }
        if self.failover.is_some() {
            self.abandon_replicas_on(lost);
            self.continue_failover(ctx);
            return;
        }
        let Some(placed) = &self.placement else {
            return;
        };
        let hit: Vec<&str> = placed
            .targets
            .keys()
            .filter(|c| lost.contains(*c))
            .map(String::as_str)
            .collect();
        if !hit.is_empty() {
            let why = format!("member cluster {} was lost", hit.join(", "));
            self.fail_over(ctx, &why);
        }
    }

    /// Re-places the whole job under a new epoch (one restart), or fails it
    /// when the restart budget is spent.
    fn fail_over(&mut self, ctx: &mut Context<Self>, why: &str) {
        let lost = self.shared.lost_clusters.borrow().clone();
        self.abandon_replicas_on(&lost);
        if self.failover.is_some() {
            return;
        }
        let budget = self.budget();
        if let Verdict::FailJob { reason, message } = lifecycle::on_cluster_lost(why, budget) {
            self.fail(ctx, reason, &message);
            return;
        }
        self.status.backoff_count += 1;
        self.epoch += 1;
        for replica in self.replicas.values() {
            replica.actor.do_send(Teardown);
        }
        self.failover = Some(Failover {
            retiring: self.replicas.keys().copied().collect(),
            epoch_recorded: false,
        });
        self.views.clear();
        if let Some(placed) = self.placement.take() {
            self.retired_targets = placed
                .targets
                .into_iter()
                .filter(|(name, _)| !lost.contains(name))
                .collect();
        }
        self.clusters_prepared = false;
        self.released = false;
        self.status.phase = Some(JobPhase::Pending);
        let message = format!(
            "{why}; re-placing the job (restart {} of the job)",
            self.status.backoff_count
        );
        self.set_condition(
            Cond::Running,
            ConditionStatus::False,
            lifecycle::REASON_CLUSTER_LOST,
            &message,
        );
        self.event(EventType::Warning, lifecycle::REASON_CLUSTER_LOST, message);
        self.record_epoch(ctx);
        self.flush(ctx);
    }

    /// Writes the new epoch onto the job and removes the old placement.
    fn record_epoch(&mut self, ctx: &mut Context<Self>) {
        let body = crate::placement::Recorded::patch(self.epoch, None);
        let api = self.api();
        let name = self.name();
        ctx.spawn(async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&body)).await }.into_actor(self).map(|result, act, ctx| match result {
            Ok(_) => {
                if let Some(failover) = &mut act.failover {
                    failover.epoch_recorded = true;
                }
                act.continue_failover(ctx);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(job = %act.name(), error = %e, "recording the placement epoch failed; retrying");
                let retry = act.shared.config.retry_interval();
                ctx.run_later(retry, |act, ctx| act.record_epoch(ctx));
            }
        }));
    }

    /// Places the job anew once the epoch is recorded and the old replicas
    /// on reachable clusters are gone.
    fn continue_failover(&mut self, ctx: &mut Context<Self>) {
        let Some(failover) = &self.failover else {
            return;
        };
        if !failover.epoch_recorded || !failover.retiring.is_empty() || self.tearing_down {
            return;
        }
        self.failover = None;
        if self.terminal() || self.phase() == Some(JobPhase::Paused) {
            return;
        }
        let mode = self.mode();
        self.start_replicas(ctx, mode);
    }

    /// Writes the placement onto the job, then starts the replicas where it says.
    fn record_placement(&mut self, ctx: &mut Context<Self>, placed: Placed) {
        let body = crate::placement::Recorded::patch(self.epoch, Some(&placed.assignment));
        let api = self.api();
        let name = self.name();
        ctx.spawn(async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&body)).await }.into_actor(self).map(move |result, act, ctx| match result {
            Ok(_) => {
                act.placing = false;
                let mut by_cluster: BTreeMap<&str, usize> = BTreeMap::new();
                for cluster in placed.assignment.values() {
                    *by_cluster.entry(cluster.as_str()).or_default() += 1;
                }
                let summary: Vec<String> = by_cluster.iter().map(|(c, n)| format!("{n} on {c}")).collect();
                act.event(EventType::Normal, "Placed", format!("Replicas placed: {}.", summary.join(", ")));
                act.placement = Some(placed);
                let mode = act.start_mode;
                act.start_replicas(ctx, mode);
            }
            Err(e) => {
                tracing::warn!(job = %act.name(), error = %e, "recording the placement failed; retrying");
                let retry = act.shared.config.retry_interval();
                ctx.run_later(retry, move |act, ctx| act.record_placement(ctx, placed));
            }
        }));
    }

    fn ask_placement(&self, ctx: &Context<Self>) {
        let job = &self.job;
        self.placer.do_send(Place {
            job_uid: job.uid().unwrap_or_default(),
            priority: job
                .spec
                .t9k_scheduler()
                .and_then(|t| t.priority)
                .unwrap_or(0),
            created: job
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            demands: crate::placement::demands(job),
            policy: crate::placement::Policy::of_job(job),
            reply: ctx.address().recipient(),
        });
    }

    /// The capacity held for this job is no longer needed.
    fn release_placement(&mut self) {
        if !self.released {
            self.released = true;
            self.placer
                .do_send(Release(self.job.uid().unwrap_or_default()));
        }
    }

    /// The namespace on every member used, a PodGroup (t9kScheduler) on
    /// every cluster used, and the TensorBoard on the home cluster.
    fn ensure_job_objects(
        &mut self,
        ctx: &mut Context<Self>,
        placed: &Placed,
        topology: &Topology,
        keys: &[ReplicaKey],
        mode: PodMode,
    ) {
        let retired = std::mem::take(&mut self.retired_targets);
        self.delete_pod_groups(
            retired
                .iter()
                .filter(|(name, _)| !placed.targets.contains_key(*name))
                .map(|(_, target)| target),
        );
        let owner = builders::owner_reference(&self.job).ok();
        let ns = self.namespace();
        let mut preparations = Vec::new();
        for (cluster, target) in &placed.targets {
            let job = self.name();
            let client = target.handle.client.clone();
            let group = builders::build_pod_group(
                &self.job,
                topology.replicas_on(keys, cluster),
                if target.home { owner.clone() } else { None },
            );
            let namespace = (!target.home).then(
                || json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            );
            let ns = ns.clone();
            let cluster = cluster.clone();
            preparations.push(async move {
                if let Some(namespace) = namespace {
                    // The member may lack the job's namespace: it is created, never deleted.
                    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
                    let params = PatchParams::apply("tfjob-federator");
                    if let Err(e) = api.patch(&ns, &params, &Patch::Apply(&namespace)).await {
                        tracing::warn!(%job, %cluster, error = %e, "creating namespace failed");
                    }
                }
                if let Ok(Some(group)) = group {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client, &ns, &builders::pod_group_resource());
                    // Applied, not created: after a failover the cluster's share
                    // of the job (minMember) may differ from an earlier epoch's.
                    let params = PatchParams::apply("tfjob-federator").force();
                    if let Err(e) = api
                        .patch(&group.name_any(), &params, &Patch::Apply(&group))
                        .await
                    {
                        tracing::warn!(%job, %cluster, error = %e, "applying PodGroup failed");
                    }
                }
            });
        }
        // Pods wait for these: a gang pod must not meet a missing PodGroup.
        let prepared = futures::future::join_all(preparations);
        ctx.spawn(prepared.into_actor(self).map(move |_, act, ctx| {
            act.clusters_prepared = true;
            act.start_replicas(ctx, mode);
        }));
        let client = self.shared.home.client.clone();
        if let Ok(Some(board)) = builders::build_tensorboard(&self.job) {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client, &ns, &builders::tensorboard_resource());
            let name = board.name_any();
            let board_name = name.clone();
            ctx.spawn(
                async move {
                    match api.create(&PostParams::default(), &board).await {
                        Ok(created) => Ok(created),
                        Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await,
                        Err(e) => Err(e),
                    }
                }
                .into_actor(self)
                .map(move |result, act, ctx| {
                    act.status.tensorboard = Some(match result {
                        Ok(board) => {
                            // Its readiness comes from the manager's TensorBoard watch.
                            act.tensorboards.do_send(WatchTensorBoards);
                            status::tensorboard(&board)
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {
                            status::tensorboard_failed(&board_name, true, &e.to_string())
                        }
                        Err(e) => status::tensorboard_failed(&board_name, false, &e.to_string()),
                    });
                    act.schedule_flush(ctx);
                }),
            );
        }
    }

    /// `activeDeadlineSeconds` counts from the job's creation, so a
    /// restarted controller keeps the same deadline.
    fn arm_deadline(&mut self, ctx: &mut Context<Self>) {
        if self.deadline_armed {
            return;
        }
        self.deadline_armed = true;
        let Some(seconds) = self
            .job
            .spec
            .run_policy
            .as_ref()
            .and_then(|p| p.active_deadline_seconds)
        else {
            return;
        };
        let created = self
            .job
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(jiff::Timestamp::now);
        let elapsed = jiff::Timestamp::now()
            .duration_since(created)
            .as_secs_f64()
            .max(0.0);
        let remaining = Duration::from_secs_f64((seconds as f64 - elapsed).max(0.0));
        ctx.run_later(remaining, move |act, ctx| {
            if !act.terminal() && act.phase() != Some(JobPhase::Paused) {
                let message =
                    format!("the job was active longer than activeDeadlineSeconds ({seconds}s)");
                act.fail(ctx, lifecycle::REASON_DEADLINE, &message);
            }
        });
    }

    fn fail(&mut self, ctx: &mut Context<Self>, reason: &str, message: &str) {
        self.release_placement();
        if self.terminal() {
            return;
        }
        self.status.phase = Some(JobPhase::Failed);
        self.set_condition(Cond::Failed, ConditionStatus::True, reason, message);
        self.set_condition(
            Cond::Completed,
            ConditionStatus::False,
            "Failed",
            "The job has failed.",
        );
        if crate::status::condition(&self.status.conditions, Cond::Running).is_some() {
            self.set_condition(
                Cond::Running,
                ConditionStatus::False,
                "Failed",
                "The job has failed.",
            );
        }
        self.event(EventType::Warning, "Failed", message.to_string());
        // A deadline deletes every pod; other failures follow the clean-up policy.
        self.clean_up(reason == lifecycle::REASON_DEADLINE);
        self.flush(ctx);
    }

    fn succeed(&mut self, ctx: &mut Context<Self>, master: ReplicaKey) {
        self.release_placement();
        if self.terminal() {
            return;
        }
        self.status.phase = Some(JobPhase::Succeeded);
        self.set_condition(
            Cond::Completed,
            ConditionStatus::True,
            "Succeeded",
            "The job has finished successfully.",
        );
        self.set_condition(
            Cond::Running,
            ConditionStatus::False,
            "Succeeded",
            "The job has finished successfully.",
        );
        self.set_condition(
            Cond::Failed,
            ConditionStatus::False,
            "Succeeded",
            "The job has finished successfully.",
        );
        self.event(
            EventType::Normal,
            "Succeeded",
            format!("The job succeeded: its master {master} finished."),
        );
        self.clean_up(false);
        self.flush(ctx);
    }

    /// Applies `cleanUpPolicy` (or deletes everything) once the job ended.
    fn clean_up(&mut self, everything: bool) {
        let policy = if everything {
            CleanUpPolicy::All
        } else {
            self.job
                .spec
                .clean_up_policy()
                .unwrap_or(CleanUpPolicy::Unfinished)
        };
        // Each replica decides by its own pod's state, which may be newer
        // than the job's view of it (e.g. right after a controller restart).
        for Replica { actor, .. } in self.replicas.values() {
            actor.do_send(Finish { clean_up: policy });
        }
    }

    fn reject(&mut self, ctx: &mut Context<Self>, error: &str) {
        self.release_placement();
        self.invalid = true;
        self.status.phase = Some(JobPhase::Failed);
        self.set_condition(
            Cond::Failed,
            ConditionStatus::True,
            validation::INVALID_SPEC_REASON,
            error,
        );
        self.event(
            EventType::Warning,
            validation::INVALID_SPEC_REASON,
            error.to_string(),
        );
        for Replica { actor, .. } in self.replicas.values() {
            actor.do_send(Finish {
                clean_up: CleanUpPolicy::All,
            });
        }
        self.flush(ctx);
    }

    fn ensure_finalizer(&mut self, ctx: &mut Context<Self>) {
        if self.adding_finalizer
            || self.finalizer_added
            || self.job.finalizers().iter().any(|f| f == FINALIZER)
        {
            return;
        }
        self.adding_finalizer = true;
        let api = self.api();
        let name = self.name();
        // The test makes the patch fail (422) if the finalizers changed meanwhile.
        let patch = if self.job.finalizers().is_empty() {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null}, {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}])
        } else {
            json!([{"op": "test", "path": "/metadata/finalizers", "value": self.job.finalizers()}, {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}])
        };
        ctx.spawn(
            json_patch_job(api, name, patch).into_actor(self)
            .map(|result, act, _| {
                act.adding_finalizer = false;
                match result {
                    // Its watch event follows; until then do not add it again.
                    Ok(_) => act.finalizer_added = true,
                    // The job is gone, or its finalizers changed meanwhile (the
                    // patch's test failed): the next job update retries if needed.
                    Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409 | 422) => {
                        tracing::debug!(job = %act.name(), error = %e, "adding finalizer deferred")
                    }
                    Err(e) => {
                        tracing::warn!(job = %act.name(), error = %e, "adding finalizer failed; the next job update retries")
                    }
                }
            }),
        );
    }

    fn remove_finalizer(&self, ctx: &mut Context<Self>) {
        let api = self.api();
        let name = self.name();
        let Some(index) = self.job.finalizers().iter().position(|f| f == FINALIZER) else {
            ctx.stop();
            return;
        };
        let patch = json!([{"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": FINALIZER}, {"op": "remove", "path": format!("/metadata/finalizers/{index}")}]);
        ctx.spawn(
            json_patch_job(api, name, patch).into_actor(self).map(
                |result, act, ctx| match result {
                    Ok(_) => ctx.stop(),
                    Err(kube::Error::Api(e)) if e.code == 404 => ctx.stop(),
                    // A stale index (the finalizers changed): the next update retries.
                    Err(e) => {
                        tracing::warn!(job = %act.name(), error = %e, "removing finalizer failed")
                    }
                },
            ),
        );
    }

    fn begin_teardown(&mut self, ctx: &mut Context<Self>) {
        self.release_placement();
        if !self.tearing_down {
            self.tearing_down = true;
            self.event(
                EventType::Normal,
                "Deleting",
                "Deleting the job's pods and services.".into(),
            );
            for Replica { actor, .. } in self.replicas.values() {
                actor.do_send(Teardown);
            }
            // PodGroups on members have no owner there: the finalizer removes
            // them (home's go with the job through its owner reference).
            if let Some(placed) = &self.placement {
                self.delete_pod_groups(placed.targets.values().filter(|t| !t.home));
            }
        }
        let lost = self.shared.lost_clusters.borrow().clone();
        self.abandon_replicas_on(&lost);
        if self.replicas.is_empty() {
            self.remove_finalizer(ctx);
        }
    }

    /// Deletes the job's PodGroup on each of `targets`.
    fn delete_pod_groups<'a>(&self, targets: impl Iterator<Item = &'a Target>) {
        if self.job.spec.t9k_scheduler().is_none() {
            return;
        }
        for target in targets {
            let api: Api<DynamicObject> = Api::namespaced_with(
                target.handle.client.clone(),
                &self.namespace(),
                &builders::pod_group_resource(),
            );
            let name = self.name();
            let cluster = target.handle.name.clone();
            tokio::spawn(async move {
                match api.delete(&name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        tracing::warn!(job = %name, %cluster, error = %e, "deleting PodGroup failed")
                    }
                }
            });
        }
    }

    fn pause(&mut self, ctx: &mut Context<Self>) {
        for Replica { actor, .. } in self.replicas.values() {
            actor.do_send(Teardown);
        }
        self.tearing_down = false;
        self.status.phase = Some(JobPhase::Paused);
        self.set_condition(
            Cond::Paused,
            ConditionStatus::True,
            "Paused",
            "The job is paused: its replicas are deleted.",
        );
        self.event(EventType::Normal, "Paused", "The job is paused.".into());
        self.schedule_flush(ctx);
    }

    fn mode(&self) -> PodMode {
        match self.job.spec.run_mode_kind() {
            RunModeKind::Debug => PodMode::Debug,
            _ if status::condition(&self.status.conditions, Cond::Paused).is_some() => {
                PodMode::Resumed
            }
            _ => PodMode::Normal,
        }
    }

    /// Brings the job in line with its spec: used at start and on updates.
    fn reconcile(&mut self, ctx: &mut Context<Self>, previous: Option<&TensorFlowTrainingJob>) {
        if self.job.meta().deletion_timestamp.is_some() {
            self.begin_teardown(ctx);
            return;
        }
        if self.invalid {
            return;
        }
        if self.terminal() {
            // Nothing changes a finished job; clean-up may have been interrupted.
            if self.replicas.is_empty() {
                self.clean_up_leftovers(ctx);
            }
            return;
        }
        let checked = validation::validate(&self.job).and_then(|()| {
            previous.map_or(Ok(()), |old| validation::validate_update(old, &self.job))
        });
        if let Err(e) = checked {
            self.reject(ctx, &e.to_string());
            return;
        }
        self.ensure_finalizer(ctx);
        let paused = self.job.spec.run_mode_kind() == RunModeKind::Pause;
        match (paused, self.phase()) {
            (true, Some(JobPhase::Paused)) => {}
            (true, _) => self.pause(ctx),
            (false, Some(JobPhase::Paused)) => {
                self.status.phase = Some(JobPhase::Resuming);
                self.set_condition(
                    Cond::Paused,
                    ConditionStatus::False,
                    "Resumed",
                    "The job is resuming.",
                );
                self.event(EventType::Normal, "Resuming", "The job is resuming.".into());
                self.start_replicas(ctx, PodMode::Resumed);
                self.schedule_flush(ctx);
            }
            (false, _) => {
                if self.phase().is_none() {
                    self.status.phase = Some(JobPhase::Pending);
                    self.set_condition(
                        Cond::Running,
                        ConditionStatus::False,
                        "Pending",
                        "The job is waiting for its replicas.",
                    );
                    self.event(
                        EventType::Normal,
                        "Created",
                        "Creating the job's pods and services.".into(),
                    );
                    self.schedule_flush(ctx);
                }
                let mode = self.mode();
                self.start_replicas(ctx, mode);
            }
        }
    }

    /// After a restart, a finished job's pods (and their services) that the
    /// clean-up policy removes may still exist, on any cluster of its
    /// placement: each cluster's cache, once synced, says which.
    fn clean_up_leftovers(&mut self, ctx: &mut Context<Self>) {
        let uid = self.job.uid().unwrap_or_default();
        let policy = self
            .job
            .spec
            .clean_up_policy()
            .unwrap_or(CleanUpPolicy::Unfinished);
        let deadline = status::condition(&self.status.conditions, Cond::Failed)
            .and_then(|c| c.reason.as_deref())
            == Some(lifecycle::REASON_DEADLINE);
        let home = self.shared.home.clone();
        let mut clusters = crate::placement::Recorded::of(self.job.annotations())
            .clusters()
            .unwrap_or_default();
        clusters.insert(home.name.clone());
        let resolve = self.placer.send(Resolve(clusters.into_iter().collect()));
        let namespace = self.namespace();
        let job = self.name();
        ctx.spawn(
            async move {
                let handles: Vec<ClusterHandle> = match resolve.await {
                    Ok(Ok(targets)) => targets.into_values().map(|t| t.handle).collect(),
                    // A member lost or gone: its sweep, if it returns, is all we can do.
                    _ => vec![home],
                };
                for cluster in handles {
                    cluster.wait_synced().await;
                    let leftovers = cluster
                        .cached_pods(|p| p.labels().get(builders::JOB_UID_LABEL) == Some(&uid));
                    let pods: Api<k8s_openapi::api::core::v1::Pod> =
                        Api::namespaced(cluster.client.clone(), &namespace);
                    let services: Api<k8s_openapi::api::core::v1::Service> =
                        Api::namespaced(cluster.client.clone(), &namespace);
                    for pod in leftovers {
                        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                        let delete = deadline || lifecycle::clean_up_deletes(policy, phase);
                        if !delete || pod.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        // The replica's service has the pod's name.
                        let name = pod.name_any();
                        for result in [
                            pods.delete(&name, &Default::default()).await.map(|_| ()),
                            services.delete(&name, &Default::default()).await.map(|_| ()),
                        ] {
                            match result {
                                Ok(()) => {}
                                Err(kube::Error::Api(e)) if e.code == 404 => {}
                                Err(e) => {
                                    tracing::warn!(%job, cluster = %cluster.name, object = %name, error = %e, "cleaning up after the job failed")
                                }
                            }
                        }
                    }
                }
            }
            .into_actor(self),
        );
    }

    fn on_exit(&mut self, ctx: &mut Context<Self>, view: &ReplicaView) {
        let Some(uid) = view.uid.clone() else { return };
        if self.terminal() {
            return;
        }
        let exit = Exit {
            replica: view.key,
            succeeded: view.phase == ReplicaPhase::Succeeded,
            exit_code: view.exit_code,
        };
        let debug = self.job.spec.run_mode_kind() == RunModeKind::Debug;
        let policy = self
            .job
            .spec
            .replica_spec(view.key.replica_type)
            .and_then(|s| s.parsed_restart_policy())
            .unwrap_or(RestartPolicy::Never);
        let budget = self.budget();
        if !self.handled.insert(uid.clone()) {
            // An exit an earlier controller counted a restart for, whose pod is
            // still there: it was stopped before replacing it. Replace it now,
            // without counting again.
            if self.adopted_exits.remove(&uid)
                && lifecycle::restart_still_due(exit, &view.pod_name, policy, budget, debug)
                && let Some(Replica { actor, .. }) = self.replicas.get(&view.key)
            {
                actor.do_send(Restart { uid: Some(uid) });
            }
            return;
        }
        if exit.succeeded && Some(view.key) == self.job.spec.master() && !debug {
            self.succeed(ctx, view.key);
            return;
        }
        match lifecycle::decide(exit, &view.pod_name, policy, budget, debug) {
            Verdict::Restart => {
                self.shared.metrics.replica_restarted(view);
                self.status.backoff_count += 1;
                *self
                    .restart_counts
                    .entry(view.key.replica_type)
                    .or_default() += 1;
                let code = view
                    .exit_code
                    .map_or("no exit code".to_string(), |c| format!("exit code {c}"));
                self.event(
                    EventType::Normal,
                    "Restarting",
                    format!(
                        "Restarting replica {} after {code} (restart {} of the job).",
                        view.key, self.status.backoff_count
                    ),
                );
                // The count is written first, at once, and the pod replaced once
                // it is stored: a controller restart in between neither loses
                // nor repeats the count (see `adopted_exits`).
                self.pending_restarts.push((view.key, uid));
                self.flush(ctx);
            }
            Verdict::Done => {}
            Verdict::FailJob { reason, message } => self.fail(ctx, reason, &message),
            Verdict::ReplicaFailure { message } => {
                self.set_condition(
                    Cond::ReplicaFailure,
                    ConditionStatus::True,
                    "ReplicaFailed",
                    &message,
                );
                self.event(EventType::Warning, "ReplicaFailed", message);
            }
        }
    }

    fn update_phase(&mut self) {
        if self.terminal()
            || self.invalid
            || self.phase() == Some(JobPhase::Paused)
            || self.views.is_empty()
        {
            return;
        }
        let all_created = self
            .views
            .values()
            .all(|v| v.phase != ReplicaPhase::Creating);
        if all_created {
            self.shared
                .metrics
                .job_pods_created(&self.job, &self.status);
            self.set_condition(
                Cond::Initialized,
                ConditionStatus::True,
                "Initialized",
                "The job has been initialized successfully.",
            );
        }
        if status::condition(&self.status.conditions, Cond::ReplicaFailure).is_none() {
            self.set_condition(
                Cond::ReplicaFailure,
                ConditionStatus::False,
                "NoReplicaFailed",
                "No replica has failed for good.",
            );
        }
        let all_up = self.views.values().all(|v| {
            matches!(
                v.phase,
                ReplicaPhase::Running | ReplicaPhase::Succeeded | ReplicaPhase::Failed
            )
        });
        if all_up
            && matches!(
                self.phase(),
                Some(JobPhase::Pending | JobPhase::Resuming) | None
            )
        {
            self.shared.metrics.job_running(&self.job, self.phase());
            self.status.phase = Some(JobPhase::Running);
            self.set_condition(
                Cond::Running,
                ConditionStatus::True,
                "Running",
                "All replicas are running.",
            );
            self.event(
                EventType::Normal,
                "Running",
                "All replicas are running.".into(),
            );
        }
    }

    /// The status as it should be written now.
    fn desired_status(&self) -> TensorFlowTrainingJobStatus {
        let mut status = self.status.clone();
        let views: Vec<ReplicaView> = self.views.values().cloned().collect();
        let types: Vec<ReplicaType> = ReplicaType::ALL
            .into_iter()
            .filter(|t| self.job.spec.replicas_of(*t) > 0)
            .collect();
        status.tasks = status::tasks(&views, &self.restart_counts, &types);
        status.aggregate = status::aggregate(&views);
        status
    }

    /// Writes the status soon. A change of what users act upon (phase,
    /// conditions, restart counts, TensorBoard) is written at once after a
    /// quiet spell, else `statusWriteIntervalMs` after the previous write; a
    /// change of replica states and counts alone waits for
    /// `statusDetailIntervalMs` after it, doubling with each such write (up
    /// to 4×) until the next summary change. So a job writes few statuses
    /// however fast or slowly its pods progress, and each new phase shows
    /// promptly.
    fn schedule_flush(&mut self, ctx: &mut Context<Self>) {
        if self.writing {
            self.flush_after_write = true;
            return;
        }
        let config = &self.shared.config;
        let since_last = self.last_write.map(|t| t.elapsed());
        let now = Instant::now();
        // (A delay too long for an Instant, from an absurd setting: a year.)
        let due_after = |delay: Duration| {
            now.checked_add(delay)
                .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400))
        };
        if let Some((scheduled, _)) = self.flush_due
            && scheduled
                <= due_after(status::write_delay(
                    since_last,
                    config.status_write_interval(),
                ))
        {
            // Already due as soon as any write may be.
            return;
        }
        let desired = self.desired_status();
        if self.written.as_ref() == Some(&desired) {
            return;
        }
        let interval = if status::summary_changed(self.written.as_ref(), &desired) {
            config.status_write_interval()
        } else {
            status::detail_interval(config.status_detail_interval(), self.detail_writes)
        };
        let delay = status::write_delay(since_last, interval);
        let due = due_after(delay);
        if let Some((scheduled, handle)) = self.flush_due {
            if scheduled <= due {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(delay, |act, ctx| {
            act.flush_due = None;
            act.flush(ctx);
        });
        self.flush_due = Some((due, handle));
    }

    fn send_restarts(&self, restarts: Vec<(ReplicaKey, String)>) {
        for (key, uid) in restarts {
            if let Some(Replica { actor, .. }) = self.replicas.get(&key) {
                actor.do_send(Restart { uid: Some(uid) });
            }
        }
    }

    /// Writes the status if it differs from what was last written.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.writing {
            self.flush_after_write = true;
            return;
        }
        let desired = self.desired_status();
        let restarts = std::mem::take(&mut self.pending_restarts);
        if self.written.as_ref() == Some(&desired) {
            self.send_restarts(restarts);
            return;
        }
        self.detail_writes = status::detail_writes_after(
            self.detail_writes,
            status::summary_changed(self.written.as_ref(), &desired),
            desired.phase.is_some_and(JobPhase::is_terminal),
        );
        self.writing = true;
        self.last_write = Some(Instant::now());
        let api = self.api();
        let name = self.name();
        let body = json!({"status": desired});
        ctx.spawn(
            async move { api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body)).await }.into_actor(self).map(move |result, act, ctx| {
                act.writing = false;
                match result {
                    Ok(_) => {
                        act.census.written(act.written.as_ref(), &desired);
                        act.written = Some(desired);
                        act.send_restarts(restarts);
                        if std::mem::take(&mut act.flush_after_write) || !act.pending_restarts.is_empty() {
                            act.schedule_flush(ctx);
                        }
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        act.pending_restarts.extend(restarts);
                        tracing::warn!(job = %act.name(), error = %e, "writing status failed; retrying");
                        let retry = act.shared.config.retry_interval();
                        ctx.run_later(retry, |act, ctx| act.flush(ctx));
                    }
                }
            }),
        );
    }
}

impl Actor for JobActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // A replica report per pod event: a roomy mailbox for busy jobs.
        ctx.set_mailbox_capacity(1024);
        let lost = self.shared.lost_clusters.subscribe();
        if self
            .status
            .tensorboard
            .as_ref()
            .is_some_and(|t| t.dependent.is_some())
        {
            // Made by an earlier controller: keep following its readiness.
            self.tensorboards.do_send(WatchTensorBoards);
        }
        ctx.add_stream(futures::stream::unfold(lost, |mut lost| async move {
            lost.changed().await.ok()?;
            let now = lost.borrow_and_update().clone();
            Some((LostClusters(now), lost))
        }));
        self.reconcile(ctx, None);
    }
}

impl StreamHandler<LostClusters> for JobActor {
    fn handle(&mut self, msg: LostClusters, ctx: &mut Self::Context) {
        self.on_lost_clusters(ctx, &msg.0);
    }

    /// The stream ends only with the controller: nothing to do, and the
    /// actor must not stop with it (the default).
    fn finished(&mut self, _ctx: &mut Self::Context) {}
}

impl Handler<JobUpdated> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: JobUpdated, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        let previous = std::mem::replace(&mut self.job, msg.0);
        if previous.metadata.generation == self.job.metadata.generation
            && self.job.meta().deletion_timestamp.is_none()
        {
            // Only metadata or status moved (often our own write): nothing to redo,
            // but a finalizer that failed to land is retried.
            if !self.invalid && !self.terminal() {
                self.ensure_finalizer(ctx);
            }
            return;
        }
        self.reconcile(ctx, Some(&previous));
    }
}

impl Handler<TensorBoardChanged> for JobActor {
    type Result = ();

    /// Also after the job ended: a TensorBoard is most useful then.
    fn handle(&mut self, msg: TensorBoardChanged, ctx: &mut Self::Context) {
        if self.invalid {
            return;
        }
        self.status.tensorboard = Some(status::tensorboard(&msg.0));
        self.schedule_flush(ctx);
    }
}

impl Handler<JobGone> for JobActor {
    type Result = ();

    fn handle(&mut self, _msg: JobGone, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        self.release_placement();
        for Replica { actor, .. } in self.replicas.values() {
            actor.do_send(Teardown);
        }
        ctx.stop();
    }
}

impl Handler<ReplicaReport> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: ReplicaReport, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        if msg.epoch != Some(self.epoch) {
            // A replica of an earlier placement, being torn down.
            return;
        }
        let view = msg.view;
        self.views.insert(view.key, view.clone());
        if view.is_finished() {
            self.on_exit(ctx, &view);
        }
        // Once every pod is past Pending the clusters' own capacity shows
        // them, so the placement's hold can go.
        if self
            .views
            .values()
            .all(|v| !matches!(v.phase, ReplicaPhase::Creating | ReplicaPhase::Pending))
        {
            self.release_placement();
        }
        self.update_phase();
        self.schedule_flush(ctx);
    }
}

impl Handler<PlacementDecided> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: PlacementDecided, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        match msg.0 {
            Ok(placed) => {
                if self.terminal() || self.tearing_down || self.invalid {
                    self.release_placement();
                    return;
                }
                self.record_placement(ctx, placed);
            }
            Err(reasons) => {
                let message = format!("waiting for capacity: {reasons}");
                self.set_condition(
                    Cond::Initialized,
                    ConditionStatus::False,
                    "WaitingForCapacity",
                    &message,
                );
                self.event(EventType::Warning, "WaitingForCapacity", message);
                self.schedule_flush(ctx);
            }
        }
    }
}

impl Handler<TornDown> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: TornDown, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        self.replicas.remove(&msg.0);
        if let Some(failover) = &mut self.failover
            && failover.retiring.remove(&msg.0)
            && !self.tearing_down
        {
            self.continue_failover(ctx);
            return;
        }
        if self.tearing_down {
            self.begin_teardown(ctx);
        } else {
            // Paused: the replica is gone until the job resumes.
            self.views.remove(&msg.0);
            self.schedule_flush(ctx);
        }
    }
}
