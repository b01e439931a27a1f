//! ReplicaActor: the one writer of one replica's pod and service on its
//! cluster. Started with an intent (`lifecycle::machine::Intent`): run (make
//! sure pod and service exist, replace the pod when the job asks for a
//! restart), finish (the job ended: apply the clean-up policy to whatever
//! pod there is — also one an earlier controller left), or retire (delete
//! pod and service, report `TornDown`, stop). It reports every change of its
//! pod to the JobActor and never writes the job.
//!
//! A replica belongs to one placement epoch (its pod's `placement-epoch`
//! label). A pod of another epoch under the same name — left by an earlier
//! placement — is not its pod: it is deleted, never reported, and the
//! replica's own pod is created once it is gone. A pod or service under the
//! replica's name that this controller did not make (no managed-by label) is
//! never touched: the replica reports the name taken and tries again, with
//! backoff, until the name is free.

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::{Client, Resource, ResourceExt};

use super::call::{self, Backoff, Kind, Outcome};
use crate::api::{CleanUpPolicy, ReplicaKey, ReplicaPhase, TensorFlowTrainingJob};
use crate::builders::{
    MANAGED_BY_LABEL, MANAGER, PLACEMENT_EPOCH_LABEL, PodParams, Topology, build_pod, build_service,
};
use crate::clusters::{ClusterHandle, PodChanged, PodKey};
use crate::lifecycle::{
    self,
    machine::{Blocked, Intent, PodMode, Refusal, reason},
    refusal::{RefusalKind, classify},
};
use crate::observed::ObservedPod;
use crate::signing::{self, SIGNATURE_ANNOTATION, Signer};
use crate::status::ReplicaView;
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::ReplicaCensus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// A replica's current state, for its job, from the replica of `epoch`.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ReplicaReport {
    pub view: ReplicaView,
    pub epoch: u64,
    /// Its pod or service cannot be created: an object it does not own has
    /// the name (this says which).
    pub blocked: Option<Blocked>,
    /// The cluster refused its pod or service for good.
    pub refusal: Option<Refusal>,
}

/// The replica's pod and service are gone (after `Teardown`).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct TornDown(pub ReplicaKey);

/// Delete the pod (of this uid) and create a new one from `desired` (None:
/// it could not be built, and the job is told so).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Restart {
    pub uid: String,
    pub desired: Option<Desired>,
}

/// The job is done with this replica: no new pod; the clean-up policy
/// decides, by the state of the replica's pod, whether pod and service go
/// (also for a pod that shows up later, e.g. from a create in flight).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Finish {
    pub clean_up: CleanUpPolicy,
}

/// Delete pod and service, report `TornDown` once the pod is gone, stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Teardown;

/// Stop at once, leaving pod and service as they are: their cluster was
/// lost, and its garbage sweep removes them when it returns.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Abandon;

/// What a replica actor is given.
pub struct ReplicaSetup {
    pub key: ReplicaKey,
    pub job_name: String,
    pub namespace: String,
    pub epoch: u64,
    pub cluster: ClusterHandle,
    /// The pod and service to create; needed only to run.
    pub desired: Option<Desired>,
    /// Export the service to the clusterset (the member's `exportServices`).
    pub export_services: bool,
    pub intent: Intent,
    pub job: Recipient<ReplicaReport>,
    pub torn_down: Recipient<TornDown>,
    pub backoff: Backoff,
    pub trust: Trust,
}

/// What one start of a job builds its replicas' pods and services from,
/// shared by all of them.
pub struct Recipe {
    /// The job with the replicaSpecs it runs.
    pub job: Arc<TensorFlowTrainingJob>,
    pub topology: Arc<Topology>,
    pub epoch: u64,
    pub mode: PodMode,
    /// The owner reference to the job, on home only.
    pub owner: Option<OwnerReference>,
}

/// A replica's pod and service as a recipe, kept by the replica until each
/// exists (a restart brings the pod's anew). The bodies are built only when
/// their create is sent, in one of the cluster's create slots
/// (`ClusterHandle::create_slot`), and dropped once it is answered: a job
/// of thousands of replicas holds a few bodies at a time, not thousands.
#[derive(Clone)]
pub struct Desired {
    recipe: Arc<Recipe>,
    key: ReplicaKey,
}

impl Desired {
    pub fn new(recipe: Arc<Recipe>, key: ReplicaKey) -> Desired {
        Desired { recipe, key }
    }

    /// The pod, signed (not serialized).
    pub fn pod(&self, trust: &Trust) -> Result<Pod, BuildError> {
        let recipe = &self.recipe;
        let params = PodParams {
            topology: &recipe.topology,
            epoch: recipe.epoch,
            mode: recipe.mode,
            owner: recipe.owner.clone(),
        };
        let mut pod = build_pod(&recipe.job, self.key, &params)?;
        trust.sign(&mut pod.metadata, recipe.epoch, "Pod");
        Ok(pod)
    }

    fn pod_body(&self, trust: &Trust) -> Result<Vec<u8>, BuildError> {
        Ok(serde_json::to_vec(&self.pod(trust)?)?)
    }

    fn service_body(&self, trust: &Trust) -> Result<Vec<u8>, BuildError> {
        let recipe = &self.recipe;
        let mut service = build_service(&recipe.job, self.key, recipe.epoch, recipe.owner.clone())?;
        trust.sign(&mut service.metadata, recipe.epoch, "Service");
        Ok(serde_json::to_vec(&service)?)
    }
}

/// A replica's pod or service cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0}")]
    Spec(#[from] crate::builders::BuildError),
    #[error("serializing it: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Why a create did not end in an object.
#[derive(Debug, thiserror::Error)]
enum CreateError {
    #[error("{0}")]
    Build(#[from] BuildError),
    #[error(transparent)]
    Api(#[from] kube::Error),
}

pub struct ReplicaActor {
    setup: ReplicaSetup,
    pod_key: PodKey,
    /// The pod and service still to create (see [`Desired`]).
    pod_body: Option<Desired>,
    service_body: Option<Desired>,
    current: Option<Arc<ObservedPod>>,
    /// The uid of a pod of another epoch holding the name, being deleted.
    obstacle: Option<String>,
    /// The uid of the last pod seen, reported once the pod is gone.
    last_uid: Option<String>,
    /// Whether the replica should have a pod (false once finished or retiring).
    wants_pod: bool,
    /// The uid of the pod the job asked to replace (`Restart`).
    replacing: Option<String>,
    /// Our pod went away without being asked to (deleted by someone else,
    /// evicted): the job decides whether it is replaced (`Restart`).
    vanished: bool,
    /// The job ended with this clean-up policy.
    finished: Option<CleanUpPolicy>,
    /// The pod uid a clean-up delete was sent for.
    cleaning: Option<String>,
    /// A delete of the service was sent / succeeded.
    service_deleted: bool,
    service_gone: bool,
    /// A create request is in flight.
    creating: bool,
    tearing_down: bool,
    /// Why the pod or service cannot be created now, and the failed tries.
    pod_blocked: Option<Blocked>,
    service_blocked: Option<Blocked>,
    blocked_tries: u32,
    /// The cluster refused the pod or service for good: no more tries.
    refusal: Option<Refusal>,
    /// This actor and its replica's cluster and phase, in the metrics.
    census: ReplicaCensus,
}

impl ReplicaActor {
    pub fn new(mut setup: ReplicaSetup) -> ReplicaActor {
        let pod_key = (
            setup.namespace.clone(),
            setup.key.object_name(&setup.job_name),
        );
        let (wants_pod, finished, tearing_down) = match setup.intent {
            Intent::Run(_) => (setup.desired.is_some(), None, false),
            Intent::Finish(policy) => (false, Some(policy), false),
            Intent::Retire => (false, None, true),
        };
        let (pod_body, service_body) = match setup.desired.take() {
            Some(desired) => (Some(desired.clone()), Some(desired)),
            None => (None, None),
        };
        ReplicaActor {
            census: setup.cluster.metrics.replica_census(&setup.cluster.name),
            setup,
            pod_key,
            pod_body,
            service_body,
            current: None,
            obstacle: None,
            last_uid: None,
            wants_pod,
            replacing: None,
            vanished: false,
            finished,
            cleaning: None,
            service_deleted: false,
            service_gone: false,
            creating: false,
            tearing_down,
            pod_blocked: None,
            service_blocked: None,
            blocked_tries: 0,
            refusal: None,
        }
    }

    fn cluster(&self) -> &ClusterHandle {
        &self.setup.cluster
    }

    /// Names the replica in the log and in API-call retries.
    fn what(&self, action: &str) -> String {
        format!(
            "{action} {}/{} on {}",
            self.pod_key.0,
            self.pod_key.1,
            self.cluster().name
        )
    }

    fn pods(&self) -> Api<ObservedPod> {
        Api::namespaced(self.cluster().client.clone(), &self.pod_key.0)
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.cluster().client.clone(), &self.pod_key.0)
    }

    fn report(&self) {
        let cluster = Some(self.cluster().name.clone());
        let view = match &self.current {
            Some(pod) => ReplicaView::of_pod(self.setup.key, pod, cluster),
            None => {
                let mut view =
                    ReplicaView::creating(self.setup.key, self.pod_key.1.clone(), cluster);
                if !self.wants_pod || self.vanished {
                    view.phase = ReplicaPhase::Deleted;
                    view.uid = self.last_uid.clone();
                }
                view
            }
        };
        self.census.show(view.phase);
        super::tell(
            &self.setup.job,
            ReplicaReport {
                view,
                epoch: self.setup.epoch,
                blocked: self
                    .pod_blocked
                    .clone()
                    .or_else(|| self.service_blocked.clone()),
                refusal: self.refusal.clone(),
            },
            &self.cluster().metrics,
            ActorKind::Job,
        );
    }

    /// The name is taken by an object not ours (a pod, or else a
    /// service): say so, try again later.
    fn blocked_by(&mut self, ctx: &mut Context<Self>, pod: bool) {
        let message = format!(
            "{} {}/{} on cluster {} exists and is not managed by {MANAGER}; replica {} \
             waits for the name to be free",
            if pod { "pod" } else { "service" },
            self.pod_key.0,
            self.pod_key.1,
            self.cluster().name,
            self.setup.key
        );
        let blocked = Blocked {
            reason: reason::OBJECT_NAME_TAKEN,
            message,
        };
        self.blocked(ctx, pod, blocked);
    }

    /// The API refused to create the pod (or else the service) as sent.
    /// The namespace gone, or soon different: say why, try again later. For
    /// good (`refusal::classify`): the job hears it and decides, and this
    /// replica tries no more.
    fn refused(&mut self, ctx: &mut Context<Self>, pod: bool, error: &kube::Error) {
        let kind = if pod { "pod" } else { "service" };
        let (ns, name, cluster) = (&self.pod_key.0, &self.pod_key.1, &self.cluster().name);
        let class = match error {
            kube::Error::Api(e) => classify(e.code, &e.message),
            _ => RefusalKind::Transient,
        };
        if let (kube::Error::Api(e), RefusalKind::ThisCluster | RefusalKind::Everywhere) =
            (error, class)
        {
            let refusal = Refusal {
                key: self.setup.key,
                epoch: self.setup.epoch,
                cluster: cluster.clone(),
                everywhere: class == RefusalKind::Everywhere,
                message: format!(
                    "cluster {cluster} refused to create {kind} {ns}/{name}: {}",
                    crate::shown_error::shown_status(e)
                ),
            };
            tracing::warn!(replica = %name, %cluster, "{}", refusal.message);
            self.refusal = Some(refusal);
            self.report();
            return;
        }
        let blocked = match error {
            kube::Error::Api(_) if class == RefusalKind::NamespaceMissing => {
                self.cluster().namespace_missing(ns);
                Blocked {
                    reason: reason::NAMESPACE_MISSING,
                    message: format!(
                        "namespace {ns} on cluster {cluster} does not exist (or is being deleted); \
                     replica {} waits for it",
                        self.setup.key
                    ),
                }
            }
            kube::Error::Api(e) => Blocked {
                reason: reason::CREATE_REFUSED,
                message: format!(
                    "creating {kind} {ns}/{name} on cluster {cluster} was refused: {}",
                    crate::shown_error::shown_status(e)
                ),
            },
            other => Blocked {
                reason: reason::CREATE_REFUSED,
                message: format!(
                    "creating {kind} {ns}/{name} on cluster {cluster} failed: {}",
                    crate::telemetry::shown(other)
                ),
            },
        };
        self.blocked(ctx, pod, blocked);
    }

    /// The pod (or service) cannot be built: as a refusal no cluster would
    /// change, the job hears it (and fails).
    fn unbuildable(&mut self, pod: bool, error: &BuildError) {
        let kind = if pod { "pod" } else { "service" };
        self.refusal = Some(Refusal {
            key: self.setup.key,
            epoch: self.setup.epoch,
            cluster: self.cluster().name.clone(),
            everywhere: true,
            message: format!("its {kind} cannot be built: {error}"),
        });
        self.report();
    }

    fn blocked(&mut self, ctx: &mut Context<Self>, pod: bool, blocked: Blocked) {
        let current = if pod {
            &self.pod_blocked
        } else {
            &self.service_blocked
        };
        if current.as_ref() != Some(&blocked) {
            tracing::warn!(replica = %self.pod_key.1, cluster = %self.cluster().name, reason = blocked.reason, "{}", blocked.message);
            if pod {
                self.pod_blocked = Some(blocked);
            } else {
                self.service_blocked = Some(blocked);
            }
            self.report();
        }
        self.blocked_tries = self.blocked_tries.saturating_add(1);
        let delay = self.setup.backoff.delay(self.blocked_tries);
        ctx.run_later(delay, move |act, ctx| {
            if pod {
                act.ensure_pod(ctx)
            } else {
                act.ensure_service(ctx)
            }
        });
    }

    /// The pod's (or else the service's) name is ours now.
    fn unblocked(&mut self, pod: bool) {
        let slot = if pod {
            &mut self.pod_blocked
        } else {
            &mut self.service_blocked
        };
        if slot.take().is_some() {
            self.blocked_tries = 0;
            self.report();
        }
    }

    fn ensure_service(&mut self, ctx: &mut Context<Self>) {
        let Some(service) = self.service_body.clone() else {
            return;
        };
        if !self.wants_pod {
            return;
        }
        let api = self.services();
        let (client, namespace) = (self.cluster().client.clone(), self.pod_key.0.clone());
        let (backoff, what) = (self.setup.backoff, self.what("creating service"));
        let name = self.pod_key.1.clone();
        let trust = self.setup.trust.clone();
        let slots = self.cluster().create_slots();
        let signing = trust.clone();
        ctx.spawn(
            async move {
                let _slot = slots.acquire().await;
                let body = service.service_body(&signing)?;
                let create = || create::<Service>(&client, &namespace, body.clone());
                match call::call(Kind::Create, backoff, &what, create).await? {
                    Outcome::Done(created) => Ok(Some(created)),
                    // An existing service (after a restart) is kept as it is, if ours.
                    _ => match call::call(Kind::Write, backoff, &what, || api.get(&name)).await? {
                        Outcome::Done(existing) => Ok(Some(existing)),
                        // Deleted meanwhile: the next try creates it.
                        _ => Ok(None),
                    },
                }
            }
            .into_actor(self)
            .map(
                move |result: Result<Option<Service>, CreateError>, act, ctx| match result {
                    Ok(Some(service)) if trust.owns(&service, "Service") => {
                        act.service_body = None;
                        act.unblocked(false);
                        act.export_service(ctx, &service)
                    }
                    Ok(Some(_)) => act.blocked_by(ctx, false),
                    // Deleted between our create and our read: create it again.
                    Ok(None) => act.ensure_service(ctx),
                    Err(CreateError::Api(e)) => act.refused(ctx, false, &e),
                    Err(CreateError::Build(e)) => act.unbuildable(false, &e),
                },
            ),
        );
    }

    /// With the member's `exportServices`, a ServiceExport per service.
    fn export_service(&self, ctx: &mut Context<Self>, service: &Service) {
        if !self.setup.export_services {
            return;
        }
        let Some(export) = crate::builders::build_service_export(service) else {
            return;
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.cluster().client.clone(),
            &self.pod_key.0,
            &crate::builders::service_export_resource(),
        );
        let (backoff, what) = (self.setup.backoff, self.what("exporting service"));
        let cluster = self.cluster().name.clone();
        ctx.spawn(
            async move {
                let post = PostParams::default();
                match call::call(Kind::Create, backoff, &what, || api.create(&post, &export)).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        tracing::warn!(%cluster, "cannot export services: the ServiceExport CRD (multicluster.x-k8s.io) is not installed");
                    }
                    Err(e) => tracing::warn!(%cluster, error = %crate::telemetry::shown(&e), "{what} refused"),
                }
            }
            .into_actor(self),
        );
    }

    /// Creates the pod unless one exists, is being created, or is not wanted.
    fn ensure_pod(&mut self, ctx: &mut Context<Self>) {
        let Some(desired) = &self.pod_body else {
            return;
        };
        if !self.wants_pod
            || self.creating
            || self.current.is_some()
            || self.obstacle.is_some()
            || self.tearing_down
            || self.vanished
        {
            return;
        }
        let desired = desired.clone();
        self.creating = true;
        let api = self.pods();
        let (client, namespace) = (self.cluster().client.clone(), self.pod_key.0.clone());
        let (backoff, what) = (self.setup.backoff, self.what("creating pod"));
        let name = self.pod_key.1.clone();
        let trust = self.setup.trust.clone();
        let slots = self.cluster().create_slots();
        let signing = trust.clone();
        ctx.spawn(
            async move {
                let _slot = slots.acquire().await;
                let body = desired.pod_body(&signing)?;
                let create = || create::<ObservedPod>(&client, &namespace, body.clone());
                match call::call(Kind::Create, backoff, &what, create).await? {
                    Outcome::Done(created) => Ok(Some((created, true))),
                    _ => match call::call(Kind::Write, backoff, &what, || api.get(&name)).await? {
                        Outcome::Done(existing) => Ok(Some((existing, false))),
                        _ => Ok(None),
                    },
                }
            }
            .into_actor(self)
            .map(
                move |result: Result<Option<(ObservedPod, bool)>, CreateError>, act, ctx| {
                    act.creating = false;
                    match result {
                        Ok(Some((pod, created))) if created || trust.owns(&pod, "Pod") => {
                            act.unblocked(true);
                            // The informer reports it too; taking it now avoids a second create.
                            if act.current.is_none() {
                                act.observe(ctx, Some(Arc::new(pod)));
                                act.report();
                                act.apply_clean_up(ctx);
                                if act.tearing_down {
                                    act.delete_pod(ctx, None);
                                }
                            }
                        }
                        Ok(Some(_)) => act.blocked_by(ctx, true),
                        // Deleted between our create and our read: create it again.
                        Ok(None) => act.ensure_pod(ctx),
                        Err(CreateError::Api(e)) => act.refused(ctx, true, &e),
                        Err(CreateError::Build(e)) => act.unbuildable(true, &e),
                    }
                    act.finish_teardown_if_gone(ctx);
                },
            ),
        );
    }

    /// Deletes the replica's pod of this uid; without one, the pod that
    /// holds the name now, if it is ours (the cache may not show it yet).
    fn delete_pod(&mut self, ctx: &mut Context<Self>, uid: Option<String>) {
        let api = self.pods();
        let name = self.pod_key.1.clone();
        let (backoff, what) = (self.setup.backoff, self.what("deleting pod"));
        let trust = self.setup.trust.clone();
        ctx.spawn(
            async move {
                let uid = match uid {
                    Some(uid) => uid,
                    None => {
                        match call::call(Kind::Write, backoff, &what, || api.get(&name)).await {
                            Ok(Outcome::Done(pod)) if trust.owns(&pod, "Pod") => {
                                pod.metadata.uid.unwrap_or_default()
                            }
                            Ok(_) => return,
                            Err(e) => return tracing::warn!(error = %crate::telemetry::shown(&e), "{what} refused"),
                        }
                    }
                };
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                // 409: a newer pod took the name; nothing to delete.
                match call::call(Kind::Delete, backoff, &what, || api.delete(&name, &params)).await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!(error = %crate::telemetry::shown(&e), "{what} refused"),
                }
            }
            .into_actor(self),
        );
    }

    fn delete_service(&mut self, ctx: &mut Context<Self>) {
        self.service_deleted = true;
        let api = self.services();
        let name = self.pod_key.1.clone();
        let (backoff, what) = (self.setup.backoff, self.what("deleting service"));
        let trust = self.setup.trust.clone();
        ctx.spawn(
            async move {
                // Never a service that is not ours.
                match call::call(Kind::Write, backoff, &what, || api.get(&name)).await {
                    Ok(Outcome::Done(service)) if !trust.owns(&service, "Service") => return,
                    _ => {}
                }
                let params = DeleteParams::background();
                if let Err(e) =
                    call::call(Kind::Delete, backoff, &what, || api.delete(&name, &params)).await
                {
                    tracing::warn!(error = %crate::telemetry::shown(&e), "{what} refused");
                }
            }
            .into_actor(self)
            .map(|(), act, ctx| {
                act.service_gone = true;
                act.finish_teardown_if_gone(ctx);
            }),
        );
    }

    /// Takes a pod seen for the replica's name: its own, or (another
    /// epoch's) one to delete before its own can be created.
    fn observe(&mut self, ctx: &mut Context<Self>, pod: Option<Arc<ObservedPod>>) {
        match pod {
            // Labelled like ours but not made by us: never adopted nor deleted.
            Some(pod) if !self.setup.trust.owns(pod.as_ref(), "Pod") => {
                self.set_current(None);
                self.obstacle = None;
                if self.wants_pod && !self.creating && self.pod_blocked.is_none() {
                    self.blocked_by(ctx, true);
                }
            }
            Some(pod) if epoch_of(&pod) != Some(self.setup.epoch) => {
                self.set_current(None);
                let uid = pod.metadata.uid.clone();
                if pod.metadata.deletion_timestamp.is_none() && self.obstacle != uid {
                    tracing::info!(replica = %self.pod_key.1, cluster = %self.cluster().name, epoch = ?epoch_of(&pod), "deleting a pod of an earlier placement");
                    self.delete_pod(ctx, uid.clone());
                }
                self.obstacle = uid;
            }
            pod => {
                self.obstacle = None;
                // Its own pod exists: nothing to create until a restart, but
                // the pod being replaced is not the new one.
                if pod
                    .as_ref()
                    .is_some_and(|p| p.metadata.uid != self.replacing)
                {
                    self.pod_body = None;
                }
                self.set_current(pod);
            }
        }
    }

    fn set_current(&mut self, pod: Option<Arc<ObservedPod>>) {
        if let Some(uid) = pod.as_ref().and_then(|p| p.metadata.uid.clone()) {
            self.last_uid = Some(uid);
        }
        self.current = pod;
    }

    /// Once the job ended: deletes the pod and service if the clean-up
    /// policy says so for the pod's state.
    fn apply_clean_up(&mut self, ctx: &mut Context<Self>) {
        let Some(policy) = self.finished else { return };
        let phase = self.current.as_ref().and_then(|p| p.phase.clone());
        if !lifecycle::clean_up_deletes(policy, phase.as_deref()) {
            return;
        }
        if let Some(pod) = &self.current {
            let uid = pod.metadata.uid.clone();
            if pod.metadata.deletion_timestamp.is_none() && self.cleaning != uid {
                self.cleaning = uid.clone();
                self.delete_pod(ctx, uid);
            }
        }
        if !self.service_deleted {
            self.delete_service(ctx);
        }
    }

    fn begin_teardown(&mut self, ctx: &mut Context<Self>) {
        self.wants_pod = false;
        self.tearing_down = true;
        // Without the cache's uid, by name if ours: right after a restart
        // the cache may not show an earlier controller's pod yet.
        let uid = self.current.as_ref().and_then(|p| p.metadata.uid.clone());
        self.delete_pod(ctx, uid);
        if !self.service_deleted {
            self.delete_service(ctx);
        }
        self.finish_teardown_if_gone(ctx);
    }

    /// Reports `TornDown` once both the pod and the service are gone.
    fn finish_teardown_if_gone(&self, ctx: &mut Context<Self>) {
        // A create in flight must land first, so its pod gets deleted too.
        if self.tearing_down && self.current.is_none() && self.service_gone && !self.creating {
            super::tell(
                &self.setup.torn_down,
                TornDown(self.setup.key),
                &self.cluster().metrics,
                ActorKind::Job,
            );
            ctx.stop();
        }
    }
}

/// Which objects under a replica's name are its own: made by this
/// controller for this replica (labels, and a signature that verifies — see
/// `signing`), so a user's pod that copies the labels is never adopted.
#[derive(Clone)]
pub struct Trust {
    pub signer: Arc<Signer>,
    pub job_uid: String,
    pub replica: ReplicaKey,
}

impl Trust {
    pub fn owns(&self, object: &impl ResourceExt, kind: &str) -> bool {
        let labels = object.labels();
        if labels.get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGER) {
            return false;
        }
        let epoch = labels.get(PLACEMENT_EPOCH_LABEL).map_or("", String::as_str);
        let subject = signing::subject(&self.job_uid, &self.replica.to_string(), epoch, kind);
        let signature = object
            .annotations()
            .get(SIGNATURE_ANNOTATION)
            .map(String::as_str);
        let created = object.meta().creation_timestamp.as_ref().map(|t| t.0);
        self.signer.trusts(&subject, signature, created)
    }

    /// Signs an object this controller is about to create.
    pub fn sign(&self, meta: &mut ObjectMeta, epoch: u64, kind: &str) {
        let subject = signing::subject(
            &self.job_uid,
            &self.replica.to_string(),
            &epoch.to_string(),
            kind,
        );
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(SIGNATURE_ANNOTATION.to_string(), self.signer.sign(&subject));
    }
}

impl Actor for ReplicaActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let cached = self
            .cluster()
            .register(self.pod_key.clone(), ctx.address().recipient());
        self.observe(ctx, cached);
        if self.tearing_down {
            self.begin_teardown(ctx);
            return;
        }
        self.ensure_service(ctx);
        self.ensure_pod(ctx);
        self.apply_clean_up(ctx);
        self.report();
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        self.cluster()
            .unregister(&self.pod_key, &ctx.address().recipient());
    }
}

impl Handler<PodChanged> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: PodChanged, ctx: &mut Self::Context) {
        let _timer = self.cluster().metrics.handling(ActorKind::Replica);
        // An older pod of the name went after this actor took its own from
        // its create's answer (a user's pod in the way, an earlier epoch's).
        if msg.pod.is_none()
            && let (Some(gone), Some(current)) = (&msg.gone, &self.current)
            && current.metadata.uid.as_ref() != Some(gone)
        {
            return;
        }
        let same = match (&self.current, &msg.pod) {
            (Some(a), Some(b)) => {
                a.metadata.resource_version == b.metadata.resource_version
                    && a.metadata.uid == b.metadata.uid
            }
            (None, None) => true,
            _ => false,
        };
        let had = self.current.as_ref().and_then(|p| p.metadata.uid.clone());
        self.observe(ctx, msg.pod);
        if let Some(gone) = had.filter(|_| self.current.is_none() && self.obstacle.is_none())
            && self.wants_pod
            && self.replacing.as_deref() != Some(gone.as_str())
        {
            self.vanished = true;
        }
        if !same {
            self.report();
        }
        self.ensure_pod(ctx);
        self.apply_clean_up(ctx);
        if self.tearing_down
            && self
                .current
                .as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        {
            // A pod that appeared after the teardown began (a create in flight).
            self.delete_pod(ctx, None);
        }
        self.finish_teardown_if_gone(ctx);
    }
}

impl Handler<Restart> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: Restart, ctx: &mut Self::Context) {
        let _timer = self.cluster().metrics.handling(ActorKind::Replica);
        if self.tearing_down || self.finished.is_some() {
            return;
        }
        self.replacing = Some(msg.uid.clone());
        self.pod_body = msg.desired;
        match &self.current {
            Some(pod) if pod.metadata.uid.as_deref() == Some(&msg.uid) => {
                self.delete_pod(ctx, Some(msg.uid))
            }
            Some(_) => {}
            None => {
                self.vanished = false;
                self.ensure_pod(ctx)
            }
        }
    }
}

impl Handler<Finish> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: Finish, ctx: &mut Self::Context) {
        let _timer = self.cluster().metrics.handling(ActorKind::Replica);
        self.wants_pod = false;
        self.finished = Some(msg.clean_up);
        self.apply_clean_up(ctx);
        if self.current.is_none() && !self.creating {
            // The replica has no pod and will get none.
            self.report();
        }
    }
}

impl Handler<Abandon> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, _msg: Abandon, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<Teardown> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, _msg: Teardown, ctx: &mut Self::Context) {
        let _timer = self.cluster().metrics.handling(ActorKind::Replica);
        if !self.tearing_down {
            self.begin_teardown(ctx);
        }
    }
}

/// Creates an object from its serialized `body`, reading the answer as `K`
/// (a pod's as [`ObservedPod`], never as a whole `Pod`).
async fn create<K>(client: &Client, namespace: &str, body: Vec<u8>) -> kube::Result<K>
where
    K: Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let mut request = kube::core::Request::new(K::url_path(&(), Some(namespace)))
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("create");
    client.request(request).await
}

/// The placement epoch a pod was created under (its label).
fn epoch_of(pod: &ObservedPod) -> Option<u64> {
    pod.labels()
        .get(crate::builders::PLACEMENT_EPOCH_LABEL)?
        .parse()
        .ok()
}
