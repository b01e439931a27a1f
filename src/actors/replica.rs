//! ReplicaActor: owns one replica (type, index) of a job. It makes sure the
//! replica's pod and service exist on its cluster, re-creates the pod when
//! the job asks for a restart, deletes it when the job is done with it, and
//! reports every change of its pod to the JobActor. It never writes the job.

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::cluster::{ClusterHandle, PodChanged, PodKey};
use crate::api::ReplicaKey;
use crate::status::ReplicaView;

/// A replica's current state, for its job.
#[derive(Message, Clone, Debug)]
#[rtype(result = "()")]
pub struct ReplicaReport(pub ReplicaView);

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

/// The job is done with this replica: delete its pod (and service) or keep them.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Finish {
    pub delete: bool,
}

/// Delete pod and service, report `TornDown` once the pod is gone, stop.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Teardown;

pub struct ReplicaActor {
    key: ReplicaKey,
    pod_key: PodKey,
    cluster: ClusterHandle,
    desired_pod: Pod,
    desired_service: Service,
    job: Recipient<ReplicaReport>,
    torn_down: Recipient<TornDown>,
    current: Option<Arc<Pod>>,
    /// Whether the replica should have a pod (false once finished or paused).
    wants_pod: bool,
    /// A create request is in flight.
    creating: bool,
    tearing_down: bool,
    retry: std::time::Duration,
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
            key,
            pod_key,
            cluster,
            desired_pod,
            desired_service,
            job,
            torn_down,
            current: None,
            wants_pod: true,
            creating: false,
            tearing_down: false,
            retry,
        }
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
                view
            }
        };
        self.job.do_send(ReplicaReport(view));
    }

    fn ensure_service(&self, ctx: &mut Context<Self>) {
        let api: Api<Service> = Api::namespaced(self.cluster.client.clone(), &self.pod_key.0);
        let service = self.desired_service.clone();
        let retry = self.retry;
        ctx.spawn(
            async move { api.create(&PostParams::default(), &service).await }.into_actor(self).map(move |result, act, ctx| match result {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(replica = %act.pod_key.1, error = %e, "creating service failed; retrying");
                    ctx.run_later(retry, |act, ctx| act.ensure_service(ctx));
                }
            }),
        );
    }

    /// Creates the pod unless one exists, is being created, or is not wanted.
    fn ensure_pod(&mut self, ctx: &mut Context<Self>) {
        if !self.wants_pod || self.creating || self.current.is_some() || self.tearing_down {
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
                        act.current = Some(Arc::new(pod));
                        act.report();
                    }
                }
                // The pod exists (we are catching up after a restart): its event follows.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(replica = %act.pod_key.1, error = %e, "creating pod failed; retrying");
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
                tracing::warn!(replica = %act.pod_key.1, error = %e, "deleting pod failed; retrying");
                let uid = act.current.as_ref().and_then(|p| p.metadata.uid.clone());
                let retry = act.retry;
                ctx.run_later(retry, move |act, ctx| act.delete_pod(ctx, uid));
            }
        }));
    }

    fn delete_service(&self, ctx: &mut Context<Self>) {
        let api: Api<Service> = Api::namespaced(self.cluster.client.clone(), &self.pod_key.0);
        let name = self.pod_key.1.clone();
        ctx.spawn(async move { api.delete(&name, &DeleteParams::background()).await }.into_actor(self).map(|result, act, ctx| match result {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(replica = %act.pod_key.1, error = %e, "deleting service failed; retrying");
                let retry = act.retry;
                ctx.run_later(retry, |act, ctx| act.delete_service(ctx));
            }
        }));
    }

    fn finish_teardown_if_gone(&self, ctx: &mut Context<Self>) {
        if self.tearing_down && self.current.is_none() {
            self.torn_down.do_send(TornDown(self.key));
            ctx.stop();
        }
    }
}

impl Actor for ReplicaActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.current = self
            .cluster
            .register(self.pod_key.clone(), ctx.address().recipient());
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
        let same = match (&self.current, &msg.0) {
            (Some(a), Some(b)) => {
                a.metadata.resource_version == b.metadata.resource_version
                    && a.metadata.uid == b.metadata.uid
            }
            (None, None) => true,
            _ => false,
        };
        self.current = msg.0;
        if !same {
            self.report();
        }
        self.ensure_pod(ctx);
        self.finish_teardown_if_gone(ctx);
    }
}

impl Handler<Restart> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, msg: Restart, ctx: &mut Self::Context) {
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
        self.wants_pod = false;
        if msg.delete {
            if let Some(uid) = self.current.as_ref().map(|p| p.metadata.uid.clone()) {
                self.delete_pod(ctx, uid);
            }
            self.delete_service(ctx);
        }
    }
}

impl Handler<Teardown> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, _msg: Teardown, ctx: &mut Self::Context) {
        self.wants_pod = false;
        self.tearing_down = true;
        if self.current.is_some() {
            self.delete_pod(ctx, None);
        }
        self.delete_service(ctx);
        self.finish_teardown_if_gone(ctx);
    }
}
