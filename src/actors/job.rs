//! JobActor: carries out one job's state machine (`lifecycle::machine`).
//! It turns what it hears — the job's updates, its replicas' reports,
//! placements, lost clusters, timers, the results of its own API calls —
//! into the machine's events, and the machine's effects into messages and
//! API calls. It decides nothing about phases or conditions itself; what it
//! owns is the plumbing: the replica actors, the clusters of the current
//! placement, and coalescing status writes (a change of what users act upon
//! soon, replica details less often, and at once when the machine needs a
//! write to be durable before it goes on).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::Shared;
use super::call::{self, Backoff, Kind, Outcome};
use super::members::{
    MemberSupervisor, Place, Placed, PlacementDecided, Release, Resolve, Target, Targets,
};
use super::replica::{
    Abandon, Desired, Finish, Recipe, ReplicaActor, ReplicaReport, ReplicaSetup, Restart, Teardown,
    TornDown, Trust,
};
use crate::api::{
    FailoverScope, ListedJob, ReplicaKey, ReplicaSpec, TensorFlowTrainingJob,
    TensorFlowTrainingJobStatus,
};
use crate::builders::{self, Topology};
use crate::lifecycle::machine::{
    Assignment, Effect, Epochs, Event, Intent, JobState, Milestone, PodMode, Refusal, Replicas,
    Spec, Stage, reason,
};
use crate::record;
use crate::signing::Signer;
use crate::status;
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::JobCensus;
use crate::validation;

pub use crate::record::FINALIZER;

/// The job's `replicaSpecs` as accepted when it was admitted (JSON): pods
/// are built from these, whatever later edits say.
pub const ACCEPTED_REPLICA_SPECS_ANNOTATION: &str = "federation.tfjob.io/replica-specs";

/// A newer version of the job object.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobUpdated(pub Arc<TensorFlowTrainingJob>);

/// The member clusters lost now (see `Shared::lost_clusters`).
#[derive(Message)]
#[rtype(result = "()")]
struct LostClusters(BTreeSet<String>);

/// The job's TensorBoard as the manager's watch last saw it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct TensorBoardChanged(pub DynamicObject);

/// Asks the JobManager to watch TensorBoards (sent once one was created, so
/// a cluster without the TensorBoard CRD is never watched for them).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchTensorBoards;

/// The job's latest version cannot be read (`ListedJob::Unreadable`): the
/// job fails with InvalidSpec, or, being deleted, goes.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobUnreadable {
    pub error: String,
    pub deleting: bool,
}

/// The job object is gone from the API.
#[derive(Message)]
#[rtype(result = "()")]
pub struct JobGone;

/// A replica's actor and the cluster it works on.
struct Replica {
    cluster: String,
    actor: Addr<ReplicaActor>,
    /// What its pod was built from, to build it again for a restart.
    built_from: Option<BuiltFrom>,
}

/// The placement and mode a replica's pod was built for.
#[derive(Clone)]
struct BuiltFrom {
    epoch: u64,
    mode: PodMode,
    assignment: Arc<Assignment>,
}

/// Where status writes stand.
#[derive(Default)]
struct Writes {
    /// What the API has.
    written: Option<TensorFlowTrainingJobStatus>,
    /// When the last write was sent (writes are `statusWriteIntervalMs`
    /// apart unless the machine asks for one at once).
    last: Option<Instant>,
    /// When the scheduled write is due, and its timer.
    due: Option<(Instant, SpawnHandle)>,
    in_flight: bool,
    /// The status changed while a write was in flight.
    again: bool,
    /// Writes of replica details alone since the last summary change.
    detail_writes: u32,
    /// When the status first differed from what was written, since the
    /// last write was sent.
    changed_since: Option<Instant>,
    /// The highest `Persist` sequence number a landed write covered.
    persisted: u64,
    /// Someone else wrote the status: write ours even if it looks the same.
    overwritten: bool,
}

pub struct JobActor {
    shared: Arc<Shared>,
    placer: Addr<MemberSupervisor>,
    tensorboards: Recipient<WatchTensorBoards>,
    job: Arc<TensorFlowTrainingJob>,
    /// The job as of its last spec that validated: what pods are built from.
    valid_job: Arc<TensorFlowTrainingJob>,
    machine: JobState,
    replicas: BTreeMap<ReplicaKey, Replica>,
    /// The clusters of the current placement.
    targets: Targets,
    /// Every cluster a placement of this job used, for its PodGroups.
    used: Targets,
    writes: Writes,
    deadline: Option<SpawnHandle>,
    /// Removing the finalizer failed: the next update of the job retries.
    finalizer_removal_failed: bool,
    /// This actor and its job's stored phase, in the metrics.
    census: JobCensus,
    /// Where to say the job has started, while it holds a share of the
    /// JobManager's start gate (`start_gate`).
    start_gate: Option<Recipient<DoneStarting>>,
}

/// A job that held a share of the start gate has started (every replica has
/// its pod, or it waits, or it ended, or `START_GATE_TIMEOUT` passed), or
/// its actor stopped: its share goes to the next queued job.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DoneStarting(pub String);

/// A job holds its share of the start gate at most this long: a job whose
/// creates keep failing (a cluster that does not answer) must not hold the
/// gate for the others.
const START_GATE_TIMEOUT: Duration = Duration::from_secs(30);

impl JobActor {
    pub fn new(
        shared: Arc<Shared>,
        placer: Addr<MemberSupervisor>,
        tensorboards: Recipient<WatchTensorBoards>,
        job: Arc<TensorFlowTrainingJob>,
        start_gate: Option<Recipient<DoneStarting>>,
    ) -> JobActor {
        let machine = believed_machine(&shared.signer, &job);
        JobActor {
            census: shared
                .metrics
                .job_census(job.status.as_ref().and_then(|s| s.phase)),
            machine,
            writes: Writes {
                written: job.status.clone().map(unsealed),
                // The first write waits one interval, so it carries the
                // first pods' progress too.
                last: Some(Instant::now()),
                ..Writes::default()
            },
            shared,
            placer,
            tensorboards,
            valid_job: job.clone(),
            job,
            replicas: BTreeMap::new(),
            targets: BTreeMap::new(),
            used: BTreeMap::new(),
            deadline: None,
            finalizer_removal_failed: false,
            start_gate,
        }
    }

    /// Gives the job's share of the start gate back (once).
    fn leave_start_gate(&mut self) {
        if let Some(gate) = self.start_gate.take() {
            super::tell(
                &gate,
                DoneStarting(self.uid()),
                &self.shared.metrics,
                ActorKind::JobManager,
            );
        }
    }

    fn name(&self) -> String {
        self.job.name_any()
    }

    fn uid(&self) -> String {
        self.job.uid().unwrap_or_default()
    }

    fn namespace(&self) -> String {
        self.job.namespace().unwrap_or_default()
    }

    /// The job's API, its answers read as `ListedJob`: the answer to a
    /// write of a job made too deep to read must not fail the write.
    fn api(&self) -> Api<ListedJob> {
        Api::namespaced_with(
            self.shared.home.client.clone(),
            &self.namespace(),
            &super::manager::job_resource(),
        )
    }

    fn backoff(&self) -> Backoff {
        Backoff::from(self.shared.config.retry_interval())
    }

    fn has_finalizer(&self) -> bool {
        self.job.finalizers().iter().any(|f| f == FINALIZER)
    }

    /// The replicaSpecs recorded at admission, as far as the job's record
    /// vouches for them (see `record::accepted_specs`).
    fn recorded_replica_specs(&self) -> Option<Vec<ReplicaSpec>> {
        vouched_specs(&self.job, self.machine.recorded_spec_digest())
            .ok()
            .flatten()
    }

    /// The job pods are built from: its last spec the machine took (an
    /// edit that does not validate is refused, see `JobUpdated`), with the
    /// replicaSpecs it runs.
    fn running_job(&self) -> Arc<TensorFlowTrainingJob> {
        self.running_job_of(&self.valid_job)
    }

    /// `job` with the replicaSpecs the job runs: the accepted ones once it
    /// started, else its own.
    fn running_job_of(&self, job: &Arc<TensorFlowTrainingJob>) -> Arc<TensorFlowTrainingJob> {
        let accepted = match self.machine.stage {
            Stage::New => self
                .machine
                .started()
                .then(|| self.recorded_replica_specs())
                .flatten(),
            _ if self.machine.started() => Some(self.machine.accepted_specs().to_vec()),
            _ => None,
        };
        match accepted {
            Some(specs) if specs != job.spec.replica_specs => {
                let mut job = (**job).clone();
                job.spec.replica_specs = specs;
                Arc::new(job)
            }
            _ => job.clone(),
        }
    }

    fn spec(&self) -> Spec {
        let running = self.running_job_of(&self.job);
        let accepted = self.recorded_replica_specs().map(|specs| {
            let mut job = (*self.job).clone();
            job.spec.replica_specs = specs;
            Replicas::of(&job)
        });
        let problem = validation::validate(&running).err().map(|e| e.to_string());
        Spec::of(&self.job, accepted, problem, self.has_finalizer())
    }

    /// Feeds one event to the machine and carries out what follows.
    fn feed(&mut self, ctx: &mut Context<Self>, event: Event) {
        let effects = self.machine.step(event, jiff::Timestamp::now());
        let mut persist = false;
        for effect in effects {
            persist |= matches!(effect, Effect::Persist(_));
            self.carry_out(ctx, effect);
        }
        if persist {
            self.flush(ctx);
        } else {
            self.schedule_flush(ctx);
        }
        if self.start_gate.is_some() && !self.machine.starting() {
            self.leave_start_gate();
        }
    }

    fn carry_out(&mut self, ctx: &mut Context<Self>, effect: Effect) {
        match effect {
            Effect::Admit => self.admit(ctx),
            Effect::RequestPlacement { recorded: None } => self.ask_placement(ctx, None),
            Effect::PlaceReplicas(keys) => self.ask_placement(ctx, Some(&keys)),
            Effect::RequestPlacement {
                recorded: Some(recorded),
            } => self.resolve(ctx, recorded),
            Effect::ReleasePlacement => {
                self.placer
                    .do_send(Release(self.job.uid().unwrap_or_default()));
            }
            Effect::PrepareClusters(assignment) => self.prepare_clusters(ctx, &assignment),
            Effect::StartReplicas {
                epochs,
                assignment,
                intent,
            } => self.start_replicas(ctx, &epochs, &assignment, intent),
            Effect::RestartReplica { key, uid } => {
                let Some(replica) = self.replicas.get(&key) else {
                    return;
                };
                let desired = match &replica.built_from {
                    Some(from) => match self
                        .recipe(
                            &self.running_job(),
                            &Arc::new(self.topology(&from.assignment)),
                            &replica.cluster,
                            from,
                        )
                        .and_then(|recipe| self.desired(&recipe, key, &replica.cluster))
                    {
                        Ok(desired) => Some(desired),
                        Err(event) => {
                            ctx.notify(Fed(*event));
                            None
                        }
                    },
                    None => None,
                };
                replica.actor.do_send(Restart { uid, desired });
            }
            Effect::RetireReplicas => {
                for replica in self.replicas.values() {
                    replica.actor.do_send(Teardown);
                }
            }
            Effect::AbandonReplicasOn(clusters) => {
                self.replicas.retain(|_, replica| {
                    let lost = clusters.contains(&replica.cluster);
                    if lost {
                        replica.actor.do_send(Abandon);
                    }
                    !lost
                });
            }
            Effect::FinishReplicas(clean_up) => {
                for replica in self.replicas.values() {
                    replica.actor.do_send(Finish { clean_up });
                }
            }
            Effect::RetryLater => {
                ctx.run_later(self.shared.config.retry_interval(), |act, ctx| {
                    act.feed(ctx, Event::RetryDue);
                });
            }
            Effect::EnsureTensorBoard => {
                let job = self.running_job();
                self.ensure_tensorboard(ctx, &job);
            }
            Effect::DeleteMemberPodGroups => {
                let members: Vec<Arc<Target>> =
                    self.used.values().filter(|t| !t.home).cloned().collect();
                self.delete_pod_groups(&members);
            }
            Effect::Persist(_) => {}
            Effect::Record {
                warning,
                reason,
                message,
            } => self.record(warning, reason, message),
            Effect::ArmDeadline { at } => {
                if let Some(handle) = self.deadline.take() {
                    ctx.cancel_future(handle);
                }
                let wait = jiff::Timestamp::now().duration_until(at);
                let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
                self.deadline = Some(ctx.run_later(wait, move |act, ctx| {
                    act.deadline = None;
                    act.feed(ctx, Event::DeadlineReached { at });
                }));
            }
            Effect::RemoveFinalizer => self.remove_finalizer(ctx),
            Effect::Milestone(milestone) => match milestone {
                Milestone::PodsCreated => self.shared.metrics.job_pods_created(&self.job),
                Milestone::Running { previous } => {
                    self.shared.metrics.job_running(&self.job, previous)
                }
                Milestone::Restarted(view) => self.shared.metrics.replica_restarted(&view),
            },
        }
    }

    fn record(&self, warning: bool, reason: &str, note: String) {
        let recorder = self.shared.recorder.clone();
        let reference = self.job.object_ref(&());
        let event = KubeEvent {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
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

    /// Adds the finalizer (if missing) and records the accepted
    /// replicaSpecs, in one JSON patch whose `test`s make it fail (422) if
    /// the finalizers or annotations changed meanwhile.
    fn admit(&mut self, ctx: &mut Context<Self>) {
        let finalizers = self.job.finalizers();
        let mut operations = Vec::new();
        if !self.has_finalizer() {
            if finalizers.is_empty() {
                operations
                    .push(json!({"op": "test", "path": "/metadata/finalizers", "value": null}));
                operations.push(
                    json!({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}),
                );
            } else {
                operations.push(
                    json!({"op": "test", "path": "/metadata/finalizers", "value": finalizers}),
                );
                operations.push(
                    json!({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}),
                );
            }
        }
        let accepted = self.machine.accepted_replica_specs().to_string();
        if self
            .job
            .annotations()
            .get(ACCEPTED_REPLICA_SPECS_ANNOTATION)
            != Some(&accepted)
        {
            if self.job.metadata.annotations.is_none() {
                operations
                    .push(json!({"op": "test", "path": "/metadata/annotations", "value": null}));
                operations.push(json!({"op": "add", "path": "/metadata/annotations",
                    "value": {ACCEPTED_REPLICA_SPECS_ANNOTATION: accepted}}));
            } else {
                let path = format!(
                    "/metadata/annotations/{}",
                    ACCEPTED_REPLICA_SPECS_ANNOTATION
                        .replace('~', "~0")
                        .replace('/', "~1")
                );
                operations.push(json!({"op": "add", "path": path, "value": accepted}));
            }
        }
        if operations.is_empty() {
            ctx.notify(Fed(Event::Admitted));
            return;
        }
        let what = format!("admitting job {}", self.name());
        ctx.spawn(
            json_patch(
                self.api(),
                self.name(),
                json!(operations),
                self.backoff(),
                what,
            )
            .into_actor(self)
            .map(|result, act, ctx| match result {
                Ok(Outcome::Done(_)) => act.feed(ctx, Event::Admitted),
                // Gone: `JobGone` follows.
                Ok(_) => {}
                // The finalizers or annotations changed meanwhile (the
                // patch's test failed; a metadata-only edit brings no new
                // spec): it is tried again, from the job as it is then.
                Err(e) => {
                    tracing::debug!(job = %act.name(), error = %e, "admitting the job deferred");
                    act.feed(ctx, Event::AdmitFailed);
                    ctx.run_later(act.shared.config.retry_interval(), |act, ctx| {
                        let spec = act.spec();
                        act.feed(ctx, Event::SpecChanged(spec));
                    });
                }
            }),
        );
    }

    fn remove_finalizer(&mut self, ctx: &mut Context<Self>) {
        let Some(index) = self.job.finalizers().iter().position(|f| f == FINALIZER) else {
            ctx.stop();
            return;
        };
        let patch = json!([{"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": FINALIZER}, {"op": "remove", "path": format!("/metadata/finalizers/{index}")}]);
        let what = format!("removing the finalizer of {}", self.name());
        ctx.spawn(
            json_patch(self.api(), self.name(), patch, self.backoff(), what)
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(_) => ctx.stop(),
                    // A stale index (the finalizers changed): the next update
                    // shows the job again, and the machine is still Deleting.
                    Err(e) => {
                        tracing::warn!(job = %act.name(), error = %e, "removing finalizer failed");
                        act.finalizer_removal_failed = true;
                    }
                }),
        );
    }

    /// Asks for clusters for every replica, or for `only` these (a partial
    /// failover's; the others keep theirs).
    fn ask_placement(&self, ctx: &Context<Self>, only: Option<&BTreeSet<ReplicaKey>>) {
        let job = &self.valid_job;
        let mut demands = crate::placement::demands(&self.running_job());
        if let Some(only) = only {
            demands.retain(|demand| only.contains(&demand.key));
        }
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
            demands,
            pods: crate::placement::PodNames {
                namespace: job.namespace().unwrap_or_default(),
                job: job.name_any(),
            },
            policy: crate::placement::Policy {
                excluded: self.machine.excluded().clone(),
                ..crate::placement::Policy::of_job(job)
            },
            reply: ctx.address().recipient(),
        });
    }

    /// Resolves the clusters of the recorded placement (after a restart).
    fn resolve(&self, ctx: &mut Context<Self>, recorded: Assignment) {
        let clusters: Vec<String> = recorded
            .values()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        ctx.spawn(self.placer.send(Resolve(clusters)).into_actor(self).map(
            move |resolved, act, ctx| match resolved {
                Ok(Ok(targets)) => {
                    act.use_targets(targets);
                    act.feed(ctx, Event::Placed(recorded));
                }
                Ok(Err(why)) => act.feed(ctx, Event::RecordedUnusable(why)),
                Err(e) => act.feed(ctx, Event::RecordedUnusable(e.to_string())),
            },
        ));
    }

    fn use_targets(&mut self, targets: Targets) {
        for (name, target) in &targets {
            self.used.insert(name.clone(), target.clone());
        }
        self.targets = targets;
    }

    /// The namespace on every member used, a PodGroup (t9kScheduler) on
    /// every cluster used, and the TensorBoard on the home cluster; the
    /// PodGroups of clusters an earlier placement used and this one does
    /// not go (but on lost clusters: their sweep removes them).
    fn prepare_clusters(&mut self, ctx: &mut Context<Self>, assignment: &Assignment) {
        let lost = self.shared.lost_clusters.borrow().clone();
        let retired: Vec<Arc<Target>> = self
            .used
            .iter()
            .filter(|(name, _)| !self.targets.contains_key(*name) && !lost.contains(*name))
            .map(|(_, t)| t.clone())
            .collect();
        self.delete_pod_groups(&retired);
        self.used
            .retain(|name, _| self.targets.contains_key(name) || lost.contains(name));
        let job = self.running_job();
        let topology = self.topology(assignment);
        let keys: Vec<ReplicaKey> = assignment.keys().copied().collect();
        let owner = builders::owner_reference(&job).ok();
        let ns = self.namespace();
        let backoff = self.backoff();
        let mut preparations = Vec::new();
        for (cluster, target) in &self.targets {
            let client = target.handle.client.clone();
            let group = builders::build_pod_group(
                &job,
                topology.replicas_on(&keys, cluster),
                if target.home { owner.clone() } else { None },
            );
            let handle = target.handle.clone();
            let namespace = (!target.home && !handle.has_namespace(&ns)).then(|| {
                k8s_openapi::api::core::v1::Namespace {
                    metadata: kube::api::ObjectMeta {
                        name: Some(ns.clone()),
                        labels: Some(
                            [(
                                builders::MANAGED_BY_LABEL.to_string(),
                                builders::MANAGER.to_string(),
                            )]
                            .into(),
                        ),
                        ..Default::default()
                    },
                    ..Default::default()
                }
            });
            let ns = ns.clone();
            let cluster = cluster.clone();
            preparations.push(async move {
                let mut failed = None;
                if let Some(namespace) = namespace {
                    // The member may lack the job's namespace: it is created
                    // (never deleted); one that exists is left as it is.
                    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
                    let (post, what) = (
                        PostParams::default(),
                        format!("creating namespace {ns} on {cluster}"),
                    );
                    match call::call(Kind::Create, backoff, &what, || {
                        api.create(&post, &namespace)
                    })
                    .await
                    {
                        Ok(Outcome::Done(_) | Outcome::Exists) => handle.namespace_exists(&ns),
                        Ok(Outcome::Gone) => {}
                        Err(e) => tracing::warn!(error = %e, "{what} refused"),
                    }
                }
                match group {
                    Ok(Some(group)) => {
                        let api: Api<DynamicObject> =
                            Api::namespaced_with(client, &ns, &builders::pod_group_resource());
                        // Applied, not created: after a failover the cluster's share
                        // of the job (minMember) may differ from an earlier epoch's.
                        let params = PatchParams::apply(builders::MANAGER).force();
                        let name = group.name_any();
                        let what = format!("applying PodGroup {ns}/{name} on {cluster}");
                        let patch = Patch::Apply(&group);
                        match call::call(Kind::Write, backoff, &what, || {
                            api.patch(&name, &params, &patch)
                        })
                        .await
                        {
                            Ok(Outcome::Done(_) | Outcome::Exists) => {}
                            // An apply answered 404: the kind is not served there.
                            Ok(Outcome::Gone) => {
                                failed = Some(format!(
                                    "{what}: the cluster does not serve PodGroups (is T9k's \
                                     PodGroup CRD installed?)"
                                ));
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "{what} refused");
                                failed = Some(format!(
                                    "{what}: {}",
                                    crate::telemetry::client::shown(&e)
                                ));
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(e) => failed = Some(format!("building the PodGroup for {cluster}: {e}")),
                }
                failed
            });
        }
        // Pods wait for these: a gang pod must not meet a missing PodGroup.
        let prepared = futures::future::join_all(preparations);
        ctx.spawn(prepared.into_actor(self).map(|failures, act, ctx| {
            let failures: Vec<String> = failures.into_iter().flatten().collect();
            let event = if failures.is_empty() {
                Event::Prepared
            } else {
                Event::PreparationFailed(failures.join("; "))
            };
            act.feed(ctx, event);
        }));
    }

    fn ensure_tensorboard(&self, ctx: &mut Context<Self>, job: &TensorFlowTrainingJob) {
        let Ok(Some(board)) = builders::build_tensorboard(job) else {
            return;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.shared.home.client.clone(),
            &self.namespace(),
            &builders::tensorboard_resource(),
        );
        let name = board.name_any();
        let (backoff, what) = (self.backoff(), format!("creating TensorBoard {name}"));
        ctx.spawn(
            async move {
                let post = PostParams::default();
                match call::call(Kind::Create, backoff, &what, || api.create(&post, &board)).await?
                {
                    Outcome::Done(created) => Ok(created),
                    _ => api.get(&name).await,
                }
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                let board_name = act.name();
                let seen = match result {
                    Ok(board) => {
                        // Its readiness comes from the manager's TensorBoard watch.
                        act.tensorboards.do_send(WatchTensorBoards);
                        status::tensorboard(&serde_json::to_value(&board).unwrap_or_default())
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        status::tensorboard_failed(&board_name, true, &e.to_string())
                    }
                    Err(e) => status::tensorboard_failed(&board_name, false, &e.to_string()),
                };
                act.feed(ctx, Event::TensorBoard(seen));
            }),
        );
    }

    fn topology(&self, assignment: &Assignment) -> Topology {
        let home = &self.shared.home.name;
        let mut topology = Topology::new(home.clone());
        for (key, cluster) in assignment {
            topology.assign(*key, cluster.clone());
        }
        // Replicas that may move one by one keep their addresses wherever
        // they run (on members: home alone has no failover).
        if self.valid_job.spec.failover_scope() == FailoverScope::LostReplicas
            && assignment.values().any(|cluster| cluster != home)
        {
            topology.use_stable_addresses();
        }
        for (name, target) in &self.targets {
            topology.set_address_template(name.clone(), target.address_template.clone());
        }
        topology
    }

    /// What the replicas of `job` on `cluster` are built from, for the
    /// placement and mode of `from` (`topology`: of `from.assignment`).
    fn recipe(
        &self,
        job: &Arc<TensorFlowTrainingJob>,
        topology: &Arc<Topology>,
        cluster: &str,
        from: &BuiltFrom,
    ) -> Result<Arc<Recipe>, Box<Event>> {
        let target = self.targets.get(cluster).ok_or_else(|| {
            Box::new(Event::BuildFailed(format!(
                "no connection to cluster {cluster}"
            )))
        })?;
        Ok(Arc::new(Recipe {
            job: job.clone(),
            topology: topology.clone(),
            epoch: from.epoch,
            mode: from.mode,
            // Owner references cannot cross clusters: members' objects are
            // removed by the finalizer instead.
            owner: target
                .home
                .then(|| builders::owner_reference(job).ok())
                .flatten(),
        }))
    }

    /// Replica `key`'s pod and service from `recipe`, once its pod was
    /// seen to build and the cluster to admit it: every pod built for a
    /// member meets the member's policy as it is now, whatever placement
    /// decided earlier. (Replicas of one type differ only in their index,
    /// so `start_replicas` checks one per type and cluster.)
    fn desired(
        &self,
        recipe: &Arc<Recipe>,
        key: ReplicaKey,
        cluster: &str,
    ) -> Result<Desired, Box<Event>> {
        let desired = Desired::new(recipe.clone(), key);
        let pod = desired
            .pod(&self.trust(key))
            .map_err(|e| Box::new(Event::BuildFailed(format!("replica {key}: {e}"))))?;
        let refused = self
            .targets
            .get(cluster)
            .and_then(|target| target.admission.as_ref())
            .and_then(|admission| admission.refuses(&pod, &self.namespace()));
        match refused {
            Some(why) => Err(Box::new(Event::Refused(Refusal {
                key,
                epoch: recipe.epoch,
                cluster: cluster.to_string(),
                everywhere: false,
                message: format!("cluster {cluster} does not admit the pod: {why}"),
            }))),
            None => Ok(desired),
        }
    }

    fn trust(&self, key: ReplicaKey) -> Trust {
        Trust {
            signer: self.shared.signer.clone(),
            job_uid: self.job.uid().unwrap_or_default(),
            replica: key,
        }
    }

    /// A replica actor for each replica of `assignment` that has none, of
    /// its epoch in `epochs`. Pods are built for the whole placement: the
    /// replicas that run already and those of `assignment`.
    fn start_replicas(
        &mut self,
        ctx: &mut Context<Self>,
        epochs: &Epochs,
        assignment: &Assignment,
        intent: Intent,
    ) {
        let mut placement: Assignment = self
            .replicas
            .iter()
            .map(|(key, replica)| (*key, replica.cluster.clone()))
            .collect();
        placement.extend(assignment.iter().map(|(k, c)| (*k, c.clone())));
        let (job, topology) = (self.running_job(), Arc::new(self.topology(&placement)));
        let shared_assignment = Arc::new(placement);
        // One recipe per cluster and epoch; one pod built and checked per
        // replica type and cluster, the rest built only when each is created.
        let mut recipes: BTreeMap<(String, u64), Arc<Recipe>> = BTreeMap::new();
        let mut checked: BTreeSet<(crate::api::ReplicaType, String)> = BTreeSet::new();
        for (key, cluster) in assignment {
            if self.replicas.contains_key(key) {
                continue;
            }
            let Some(target) = self.targets.get(cluster) else {
                tracing::warn!(job = %self.name(), %cluster, "no connection to the placement's cluster");
                continue;
            };
            let epoch = epochs.of(*key);
            let built_from = match intent {
                Intent::Run(mode) => Some(BuiltFrom {
                    epoch,
                    mode,
                    assignment: shared_assignment.clone(),
                }),
                Intent::Finish(_) | Intent::Retire => None,
            };
            let desired = match &built_from {
                Some(from) => {
                    let recipe = match recipes.get(&(cluster.clone(), epoch)) {
                        Some(recipe) => Ok(recipe.clone()),
                        None => self.recipe(&job, &topology, cluster, from),
                    };
                    let recipe = match recipe {
                        Ok(recipe) => recipe,
                        Err(event) => {
                            ctx.notify(Fed(*event));
                            return;
                        }
                    };
                    recipes.insert((cluster.clone(), epoch), recipe.clone());
                    if checked.insert((key.replica_type, cluster.clone()))
                        && let Err(event) = self.desired(&recipe, *key, cluster)
                    {
                        ctx.notify(Fed(*event));
                        return;
                    }
                    Some(Desired::new(recipe, *key))
                }
                None => None,
            };
            let actor = ReplicaActor::new(ReplicaSetup {
                key: *key,
                job_name: self.name(),
                namespace: self.namespace(),
                epoch,
                cluster: target.handle.clone(),
                desired,
                export_services: target.export_services,
                intent,
                job: ctx.address().recipient(),
                torn_down: ctx.address().recipient(),
                backoff: self.backoff(),
                trust: self.trust(*key),
            });
            self.replicas.insert(
                *key,
                Replica {
                    cluster: cluster.clone(),
                    actor: actor.start(),
                    built_from,
                },
            );
        }
    }

    /// Deletes the job's PodGroup on each of `targets`.
    fn delete_pod_groups(&self, targets: &[Arc<Target>]) {
        if self.valid_job.spec.t9k_scheduler().is_none() {
            return;
        }
        for target in targets {
            let api: Api<DynamicObject> = Api::namespaced_with(
                target.handle.client.clone(),
                &self.namespace(),
                &builders::pod_group_resource(),
            );
            let name = self.name();
            let (backoff, what) = (
                self.backoff(),
                format!("deleting PodGroup {name} on {}", target.handle.name),
            );
            tokio::spawn(async move {
                let params = Default::default();
                if let Err(e) =
                    call::call(Kind::Delete, backoff, &what, || api.delete(&name, &params)).await
                {
                    tracing::warn!(error = %e, "{what} refused");
                }
            });
        }
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
        if self.writes.in_flight {
            self.writes.again = true;
            return;
        }
        if self.machine.first_status_awaits_placement() {
            return;
        }
        let config = &self.shared.config;
        let since_last = self.writes.last.map(|t| t.elapsed());
        let now = Instant::now();
        // (A delay too long for an Instant, from an absurd setting: a year.)
        let due_after = |delay: Duration| {
            now.checked_add(delay)
                .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400))
        };
        if let Some((scheduled, _)) = self.writes.due
            && scheduled
                <= due_after(status::write_delay(
                    since_last,
                    config.status_write_interval(),
                ))
        {
            // Already due as soon as any write may be.
            return;
        }
        let desired = self.machine.status();
        if self.writes.written.as_ref() == Some(desired) {
            return;
        }
        let changed_since = *self.writes.changed_since.get_or_insert(now);
        let delay = if status::summary_changed(self.writes.written.as_ref(), desired) {
            status::write_delay(since_last, config.status_write_interval())
        } else {
            status::detail_delay(
                since_last,
                status::detail_interval(config.status_detail_interval(), self.writes.detail_writes),
                now.saturating_duration_since(changed_since),
                config.status_detail_interval(),
            )
        };
        let due = due_after(delay);
        if let Some((scheduled, handle)) = self.writes.due {
            if scheduled <= due {
                return;
            }
            ctx.cancel_future(handle);
        }
        let handle = ctx.run_later(delay, |act, ctx| {
            act.writes.due = None;
            act.flush(ctx);
        });
        self.writes.due = Some((due, handle));
    }

    /// Writes the status now if it differs from what was last written.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if self.writes.in_flight {
            self.writes.again = true;
            return;
        }
        let covers = self.machine.persist_requested();
        if self.writes.written.as_ref() == Some(self.machine.status()) && !self.writes.overwritten {
            if covers > self.writes.persisted {
                self.writes.persisted = covers;
                self.feed(ctx, Event::Persisted(covers));
            }
            return;
        }
        let desired = self.machine.status().clone();
        if let Some((_, handle)) = self.writes.due.take() {
            ctx.cancel_future(handle);
        }
        let summary_changed = status::summary_changed(self.writes.written.as_ref(), &desired);
        tracing::debug!(
            job = %self.name(),
            phase = ?desired.phase,
            summary_changed,
            persist = covers > self.writes.persisted,
            aggregate = ?desired.aggregate,
            "writing the status"
        );
        self.writes.detail_writes =
            status::detail_writes_after(self.writes.detail_writes, summary_changed, desired.phase);
        self.writes.in_flight = true;
        self.writes.changed_since = None;
        self.writes.overwritten = false;
        self.writes.last = Some(Instant::now());
        let api = self.api();
        let name = self.name();
        let stored = if self.machine.is_verified() {
            record::seal(&self.shared.signer, &self.uid(), desired.clone())
        } else {
            // Never sealed: that would make a record nobody verified ours.
            desired.clone()
        };
        let body: json_patch::Patch =
            serde_json::from_value(status::replacement(&stored)).unwrap_or_default();
        let (backoff, what) = (self.backoff(), format!("writing the status of {name}"));
        ctx.spawn(
            async move {
                let (params, patch) = (PatchParams::default(), Patch::Json::<()>(body));
                call::call(Kind::Write, backoff, &what, || api.patch_status(&name, &params, &patch)).await
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                act.writes.in_flight = false;
                match result {
                    Ok(Outcome::Done(_)) => {
                        act.census.written(act.writes.written.as_ref(), &desired);
                        act.writes.written = Some(desired);
                        if covers > act.writes.persisted {
                            act.writes.persisted = covers;
                            act.feed(ctx, Event::Persisted(covers));
                        }
                    }
                    // Gone: `JobGone` follows.
                    Ok(_) => return,
                    Err(e) => {
                        tracing::warn!(job = %act.name(), error = %e, "writing status refused; retrying");
                        let retry = act.shared.config.retry_interval();
                        ctx.run_later(retry, |act, ctx| act.flush(ctx));
                        return;
                    }
                }
                if act.machine.persist_requested() > act.writes.persisted {
                    act.flush(ctx);
                } else if std::mem::take(&mut act.writes.again) {
                    act.schedule_flush(ctx);
                }
            }),
        );
    }
}

/// Applies JSON-patch `operations` (with their `test` guards) to the job.
async fn json_patch(
    api: Api<ListedJob>,
    name: String,
    operations: serde_json::Value,
    backoff: Backoff,
    what: String,
) -> kube::Result<Outcome<ListedJob>> {
    let patch: json_patch::Patch =
        serde_json::from_value(operations).map_err(kube::Error::SerdeError)?;
    let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
    call::call(Kind::Write, backoff, &what, || {
        api.patch(&name, &params, &patch)
    })
    .await
}

/// An event the actor feeds itself later (after the current one).
#[derive(Message)]
#[rtype(result = "()")]
struct Fed(Event);

impl Handler<Fed> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: Fed, ctx: &mut Self::Context) {
        self.feed(ctx, msg.0);
    }
}

impl Actor for JobActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.leave_start_gate();
    }

    fn started(&mut self, ctx: &mut Self::Context) {
        // A replica report per pod event: a roomy mailbox for busy jobs.
        ctx.set_mailbox_capacity(1024);
        if self.start_gate.is_some() {
            ctx.run_later(START_GATE_TIMEOUT, |act, _| act.leave_start_gate());
        }
        let lost = self.shared.lost_clusters.subscribe();
        if self
            .job
            .status
            .as_ref()
            .and_then(|s| s.tensorboard.as_ref())
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
        let lost = self.shared.lost_clusters.borrow().clone();
        let spec = self.spec();
        self.feed(ctx, Event::SpecChanged(spec));
        if !lost.is_empty() {
            self.feed(ctx, Event::ClustersLost(lost));
        }
    }
}

impl StreamHandler<LostClusters> for JobActor {
    fn handle(&mut self, msg: LostClusters, ctx: &mut Self::Context) {
        self.feed(ctx, Event::ClustersLost(msg.0));
    }

    /// The stream ends only with the controller: nothing to do, and the
    /// actor must not stop with it (the default).
    fn finished(&mut self, _ctx: &mut Self::Context) {}
}

impl Handler<JobUpdated> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: JobUpdated, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        let had_finalizer = self.has_finalizer();
        let previous = std::mem::replace(&mut self.job, msg.0);
        if std::mem::take(&mut self.finalizer_removal_failed) {
            self.remove_finalizer(ctx);
        }
        self.correct_foreign_status(ctx);
        let changed = previous.metadata.generation != self.job.metadata.generation
            || previous.metadata.deletion_timestamp != self.job.metadata.deletion_timestamp
            || had_finalizer != self.has_finalizer();
        // Else only metadata or status moved (often our own write).
        if changed {
            let spec = self.spec();
            if spec.problem.is_none() {
                self.valid_job = self.job.clone();
            }
            self.feed(ctx, Event::SpecChanged(spec));
        } else if Arc::ptr_eq(&self.valid_job, &previous) {
            // The same spec as the valid one: keep one copy of the job, not
            // the one of its last spec change beside the latest.
            self.valid_job = self.job.clone();
        }
    }
}

impl JobActor {
    /// Someone other than the controller wrote the job's status (it differs
    /// from what was written last, and its seal is not ours): the
    /// controller's own status is written back, and the job says so.
    fn correct_foreign_status(&mut self, ctx: &mut Context<Self>) {
        if !self.machine.is_verified() {
            return;
        }
        let stored = self.job.status.clone().map(unsealed);
        if stored == self.writes.written
            || record::judge(
                &self.shared.signer,
                record::Owner::of(&self.job),
                self.job.status.as_ref(),
            )
            .is_believed()
        {
            // Ours (perhaps an earlier write of ours, seen late).
            return;
        }
        let fields = status::changed_fields(self.writes.written.as_ref(), stored.as_ref());
        self.record(
            true,
            reason::STATUS_OVERWRITTEN,
            format!(
                "the status was written by someone other than the controller ({}): the \
                 controller's own status is written back",
                if fields.is_empty() {
                    "its seal".to_string()
                } else {
                    fields.join(", ")
                }
            ),
        );
        self.writes.overwritten = true;
        self.flush(ctx);
    }
}

/// The job's machine, from what its stored record says as far as the
/// controller can verify it: a forged status or accepted `replicaSpecs`
/// give a machine that decides nothing (`Stage::Unverified`).
fn believed_machine(signer: &Signer, job: &TensorFlowTrainingJob) -> JobState {
    let name = job.name_any();
    let status = job.status.as_ref();
    if let record::Trust::Forged(why) = record::judge(signer, record::Owner::of(job), status) {
        tracing::warn!(job = %name, "{why}");
        return JobState::unverified(status, &name, why);
    }
    let machine = JobState::new(status, &name);
    if machine.started() && vouched_specs(job, machine.recorded_spec_digest()).is_err() {
        let why = format!(
            "annotation {ACCEPTED_REPLICA_SPECS_ANNOTATION}: neither it nor spec.replicaSpecs \
             is what the job started with"
        );
        tracing::warn!(job = %name, "{why}");
        return JobState::unverified(status, &name, why);
    }
    machine
}

/// The replicaSpecs the job started with, as far as its record vouches
/// for them: `Ok(None)` when there is no record of them (not started, or
/// the annotation missing on a job from before digests), `Err` when neither
/// the annotation nor the current spec has the recorded digest.
fn vouched_specs(
    job: &TensorFlowTrainingJob,
    digest: Option<&str>,
) -> Result<Option<Vec<ReplicaSpec>>, Unverifiable> {
    let annotation = job
        .annotations()
        .get(ACCEPTED_REPLICA_SPECS_ANNOTATION)
        .map(String::as_str);
    let current;
    let text = match digest {
        None => annotation,
        Some(_) => {
            current = serde_json::to_string(&job.spec.replica_specs).unwrap_or_default();
            match record::accepted_specs(digest, annotation, &current) {
                record::Accepted::Verified(text) => Some(text),
                record::Accepted::Unrecorded(text) => text,
                record::Accepted::Unverifiable => return Err(Unverifiable),
            }
        }
    };
    Ok(text.and_then(|text| serde_json::from_str(text).ok()))
}

/// The accepted replicaSpecs cannot be verified (see `vouched_specs`).
#[derive(Debug)]
struct Unverifiable;

/// The status without its seal, as the machine holds it.
fn unsealed(mut status: TensorFlowTrainingJobStatus) -> TensorFlowTrainingJobStatus {
    status.seal = None;
    status
}

impl Handler<JobUnreadable> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: JobUnreadable, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        if msg.deleting {
            let mut spec = self.spec();
            spec.deleting = true;
            self.feed(ctx, Event::SpecChanged(spec));
        } else {
            let problem = format!("the job cannot be read: {}", msg.error);
            self.feed(ctx, Event::BuildFailed(problem));
        }
    }
}

impl Handler<TensorBoardChanged> for JobActor {
    type Result = ();

    /// Also after the job ended: a TensorBoard is most useful then.
    fn handle(&mut self, msg: TensorBoardChanged, ctx: &mut Self::Context) {
        let board = serde_json::to_value(&msg.0).unwrap_or_default();
        self.feed(ctx, Event::TensorBoard(status::tensorboard(&board)));
    }
}

impl Handler<JobGone> for JobActor {
    type Result = ();

    fn handle(&mut self, _msg: JobGone, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        self.placer
            .do_send(Release(self.job.uid().unwrap_or_default()));
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
        self.feed(
            ctx,
            Event::Replica {
                view: msg.view,
                epoch: msg.epoch,
                blocked: msg.blocked,
            },
        );
        if let Some(refusal) = msg.refusal {
            self.feed(ctx, Event::Refused(refusal));
        }
    }
}

impl Handler<PlacementDecided> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: PlacementDecided, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        match msg.0 {
            Ok(Placed {
                assignment,
                targets,
            }) => {
                if self.machine.moving() {
                    // Clusters for moved replicas: the others keep theirs
                    // (but the lost ones, which nothing is prepared on).
                    let lost = self.shared.lost_clusters.borrow().clone();
                    let mut all = self.targets.clone();
                    all.retain(|name, _| !lost.contains(name));
                    all.extend(targets);
                    self.use_targets(all);
                } else {
                    self.use_targets(targets);
                }
                self.feed(ctx, Event::Placed(assignment));
            }
            Err(reasons) => self.feed(ctx, Event::Unplaceable(reasons)),
        }
    }
}

impl Handler<TornDown> for JobActor {
    type Result = ();

    fn handle(&mut self, msg: TornDown, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::Job);
        self.replicas.remove(&msg.0);
        self.feed(ctx, Event::TornDown(msg.0));
    }
}
