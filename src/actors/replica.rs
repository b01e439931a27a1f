//! ReplicaActor: owns one replica (type, index) of a job. It makes sure the
//! replica's pod and service exist on its cluster, re-creates the pod when
//! the job asks for a restart, deletes it when the job is done with it, and
//! reports every change of its pod to the JobActor. It never writes the job.
//!
//! A replica belongs to one placement epoch (its pod's
//! `placement-epoch` label). A pod of another epoch under the same name —
//! left by an earlier placement — is not its pod: it is deleted, never
//! reported, and the replica's own pod is created once it is gone.

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::cluster::{ClusterHandle, PodChanged, PodKey};
use crate::api::{CleanUpPolicy, ReplicaKey};
use crate::lifecycle;
use crate::status::ReplicaView;
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::ReplicaCensus;

/// A replica's current state, for its job, from the replica of `epoch`.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ReplicaReport {
    pub view: ReplicaView,
    pub epoch: Option<u64>,
}

/// The replica's pod and service are gone (after `Teardown`).
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct TornDown(pub ReplicaKey);

/// Delete the pod (of this uid) and create a new one.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Restart {
    pub uid: Option<String>,
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

pub struct ReplicaActor {
    key: ReplicaKey,
    /// The placement epoch of `desired_pod` (its label).
    epoch: Option<u64>,
    /// Export the service to the clusterset (the member's `exportServices`).
    export_services: bool,
    pod_key: PodKey,
    cluster: ClusterHandle,
    desired_pod: Pod,
    desired_service: Service,
    job: Recipient<ReplicaReport>,
    torn_down: Recipient<TornDown>,
    current: Option<Arc<Pod>>,
    /// The uid of a pod of another epoch holding the name, being deleted.
    obstacle: Option<String>,
    /// The uid of the last pod seen, reported once the pod is gone.
    last_uid: Option<String>,
    /// Whether the replica should have a pod (false once finished or paused).
    wants_pod: bool,
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
    retry: std::time::Duration,
    /// This actor and its replica's cluster and phase, in the metrics.
    census: ReplicaCensus,
}

impl ReplicaActor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: ReplicaKey,
        cluster: ClusterHandle,
        desired_pod: Pod,
        desired_service: Service,
        job: Recipient<ReplicaReport>,
        torn_down: Recipient<TornDown>,
        retry: std::time::Duration,
    ) -> ReplicaActor {
        let pod_key = (
            desired_pod.metadata.namespace.clone().unwrap_or_default(),
            desired_pod.metadata.name.clone().unwrap_or_default(),
        );
        ReplicaActor {
            epoch: epoch_of(&desired_pod),
            census: cluster.metrics.replica_census(&cluster.name),
            key,
            export_services: false,
            pod_key,
            cluster,
            desired_pod,
            desired_service,
            job,
            torn_down,
            current: None,
            obstacle: None,
            last_uid: None,
            wants_pod: true,
            finished: None,
            cleaning: None,
            service_deleted: false,
            service_gone: false,
            creating: false,
            tearing_down: false,
            retry,
        }
    }

    /// Also create a ServiceExport for the replica's service.
    pub fn exporting_services(mut self, export: bool) -> ReplicaActor {
        self.export_services = export;
        self
    }

    /// The job's name, for logs (from the pod's label).
    fn job_name(&self) -> &str {
        self.desired_pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::builders::JOB_NAME_LABEL))
            .map_or("", String::as_str)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), &self.pod_key.0)
    }

    fn report(&self) {
        let view = match &self.current {
            Some(pod) => ReplicaView::of_pod(self.key, pod, Some(self.cluster.name.clone())),
            None if self.wants_pod => ReplicaView::creating(
                self.key,
                self.pod_key.1.clone(),
                Some(self.cluster.name.clone()),
            ),
            None => {
                let mut view = ReplicaView::creating(
                    self.key,
                    self.pod_key.1.clone(),
                    Some(self.cluster.name.clone()),
                );
                view.phase = crate::api::ReplicaPhase::Deleted;
                view.uid = self.last_uid.clone();
                view
            }
        };
        self.census.show(view.phase);
        super::tell(
            &self.job,
            ReplicaReport {
                view,
                epoch: self.epoch,
            },
            &self.cluster.metrics,
            ActorKind::Job,
        );
    }

    fn ensure_service(&self, ctx: &mut Context<Self>) {
        let api: Api<Service> = Api::namespaced(self.cluster.client.clone(), &self.pod_key.0);
        let service = self.desired_service.clone();
        let retry = self.retry;
        ctx.spawn(
            async move {
                match api.create(&PostParams::default(), &service).await {
                    // An existing service (after a restart) is exported as it is.
                    Err(kube::Error::Api(e)) if e.code == 409 => api.get(&service.metadata.name.clone().unwrap_or_default()).await,
                    other => other,
                }
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok(service) => act.export_service(ctx, &service),
                Err(e) => {
                    tracing::warn!(job = %act.job_name(), replica = %act.key, cluster = %act.cluster.name, error = %e, "creating service failed; retrying");
                    ctx.run_later(retry, |act, ctx| act.ensure_service(ctx));
                }
            }),
        );
    }

    /// With the member's `exportServices`, a ServiceExport per service.
    fn export_service(&self, ctx: &mut Context<Self>, service: &Service) {
        if !self.export_services {
            return;
        }
        let Some(export) = crate::builders::build_service_export(service) else {
            return;
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.cluster.client.clone(),
            &self.pod_key.0,
            &crate::builders::service_export_resource(),
        );
        let cluster = self.cluster.name.clone();
        let (job, replica) = (self.job_name().to_string(), self.key);
        ctx.spawn(
            async move {
                match api.create(&PostParams::default(), &export).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        tracing::warn!(%job, %replica, %cluster, "cannot export services: the ServiceExport CRD (multicluster.x-k8s.io) is not installed");
                    }
                    Err(e) => tracing::warn!(%job, %replica, %cluster, error = %e, "creating ServiceExport failed"),
                }
            }
            .into_actor(self),
        );
    }

    /// Creates the pod unless one exists, is being created, or is not wanted.
    fn ensure_pod(&mut self, ctx: &mut Context<Self>) {
        if !self.wants_pod
            || self.creating
            || self.current.is_some()
            || self.obstacle.is_some()
            || self.tearing_down
        {
            return;
        }
        self.creating = true;
        let api = self.pods();
        let pod = self.desired_pod.clone();
        ctx.spawn(async move { api.create(&PostParams::default(), &pod).await }.into_actor(self).map(|result, act, ctx| {
            act.creating = false;
            match result {
                Ok(pod) => {
                    // The informer reports it too; taking it now avoids a second create.
                    if act.current.is_none() {
                        act.set_current(Some(Arc::new(pod)));
                        act.report();
                        act.apply_clean_up(ctx);
                        if act.tearing_down {
                            act.delete_pod(ctx, None);
                        }
                    }
                }
                // The pod exists (we are catching up after a restart): its event follows.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(job = %act.job_name(), replica = %act.key, cluster = %act.cluster.name, error = %e, "creating pod failed; retrying");
                    let retry = act.retry;
                    ctx.run_later(retry, |act, ctx| act.ensure_pod(ctx));
                }
            }
        }));
    }

    fn delete_pod(&mut self, ctx: &mut Context<Self>, uid: Option<String>) {
        let api = self.pods();
        let name = self.pod_key.1.clone();
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        ctx.spawn(async move { api.delete(&name, &params).await }.into_actor(self).map(|result, act, ctx| match result {
            Ok(_) => {}
            // Gone already, or a newer pod took the name: nothing to delete.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                tracing::warn!(job = %act.job_name(), replica = %act.key, cluster = %act.cluster.name, error = %e, "deleting pod failed; retrying");
                let uid = act.current.as_ref().and_then(|p| p.metadata.uid.clone());
                let retry = act.retry;
                ctx.run_later(retry, move |act, ctx| act.delete_pod(ctx, uid));
            }
        }));
    }

    fn delete_service(&mut self, ctx: &mut Context<Self>) {
        self.service_deleted = true;
        let api: Api<Service> = Api::namespaced(self.cluster.client.clone(), &self.pod_key.0);
        let name = self.pod_key.1.clone();
        ctx.spawn(async move { api.delete(&name, &DeleteParams::background()).await }.into_actor(self).map(|result, act, ctx| match result {
            Ok(_) => {
                act.service_gone = true;
                act.finish_teardown_if_gone(ctx);
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                act.service_gone = true;
                act.finish_teardown_if_gone(ctx);
            }
            Err(e) => {
                tracing::warn!(job = %act.job_name(), replica = %act.key, cluster = %act.cluster.name, error = %e, "deleting service failed; retrying");
                let retry = act.retry;
                ctx.run_later(retry, |act, ctx| act.delete_service(ctx));
            }
        }));
    }

    /// Takes a pod seen for the replica's name: its own, or (another
    /// epoch's) one to delete before its own can be created.
    fn observe(&mut self, ctx: &mut Context<Self>, pod: Option<Arc<Pod>>) {
        match pod {
            Some(pod) if epoch_of(&pod) != self.epoch => {
                self.set_current(None);
                let uid = pod.metadata.uid.clone();
                if pod.metadata.deletion_timestamp.is_none() && self.obstacle != uid {
                    tracing::info!(replica = %self.pod_key.1, cluster = %self.cluster.name, epoch = ?epoch_of(&pod), "deleting a pod of an earlier placement");
                    self.delete_pod(ctx, uid.clone());
                }
                self.obstacle = uid;
            }
            pod => {
                self.obstacle = None;
                self.set_current(pod);
            }
        }
    }

    fn set_current(&mut self, pod: Option<Arc<Pod>>) {
        if let Some(uid) = pod.as_ref().and_then(|p| p.metadata.uid.clone()) {
            self.last_uid = Some(uid);
        }
        self.current = pod;
    }

    /// Once the job ended: deletes the pod and service if the clean-up
    /// policy says so for the pod's state.
    fn apply_clean_up(&mut self, ctx: &mut Context<Self>) {
        let Some(policy) = self.finished else { return };
        let phase = self
            .current
            .as_ref()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.phase.clone());
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

    /// Reports `TornDown` once both the pod and the service are gone.
    fn finish_teardown_if_gone(&self, ctx: &mut Context<Self>) {
        // A create in flight must land first, so its pod gets deleted too.
        if self.tearing_down && self.current.is_none() && self.service_gone && !self.creating {
            super::tell(
                &self.torn_down,
                TornDown(self.key),
                &self.cluster.metrics,
                ActorKind::Job,
            );
            ctx.stop();
        }
    }
}

impl Actor for ReplicaActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let cached = self
            .cluster
            .register(self.pod_key.clone(), ctx.address().recipient());
        self.observe(ctx, cached);
        self.ensure_service(ctx);
        self.ensure_pod(ctx);
        self.report();
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.cluster.unregister(&self.pod_key);
    }
}

impl Handler<PodChanged> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: PodChanged, ctx: &mut Self::Context) {
        let _timer = self.cluster.metrics.handling(ActorKind::Replica);
        let same = match (&self.current, &msg.0) {
            (Some(a), Some(b)) => {
                a.metadata.resource_version == b.metadata.resource_version
                    && a.metadata.uid == b.metadata.uid
            }
            (None, None) => true,
            _ => false,
        };
        self.observe(ctx, msg.0);
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
        let _timer = self.cluster.metrics.handling(ActorKind::Replica);
        self.wants_pod = true;
        match &self.current {
            Some(pod) if pod.metadata.uid == msg.uid || msg.uid.is_none() => {
                self.delete_pod(ctx, msg.uid)
            }
            Some(_) => {}
            None => self.ensure_pod(ctx),
        }
    }
}

impl Handler<Finish> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: Finish, ctx: &mut Self::Context) {
        let _timer = self.cluster.metrics.handling(ActorKind::Replica);
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
        let _timer = self.cluster.metrics.handling(ActorKind::Replica);
        self.wants_pod = false;
        self.tearing_down = true;
        if self.current.is_some() {
            self.delete_pod(ctx, None);
        }
        if !self.service_deleted {
            self.delete_service(ctx);
        }
        self.finish_teardown_if_gone(ctx);
    }
}

/// The placement epoch a pod was created under (its label).
fn epoch_of(pod: &Pod) -> Option<u64> {
    pod.labels()
        .get(crate::builders::PLACEMENT_EPOCH_LABEL)?
        .parse()
        .ok()
}
