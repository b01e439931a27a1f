//! ReplicaActor: the one writer of one replica's pod and service on its
//! cluster, started to run, finish or retire (`lifecycle::machine::Intent`).
//! Every decision — a pod of another epoch, a pod that vanished, a name
//! taken by an object not ours, clean-up by the pod's phase, when a
//! teardown is done — is the replica's machine's (`lifecycle::replica`):
//! this actor feeds it what the pod cache shows and what its API calls
//! answer, and carries out its effects. It never writes the job.

use std::sync::Arc;

use actix::prelude::*;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};
use kube::core::NamespaceResourceScope;
use kube::{Client, Resource};

use super::call::{self, Backoff, Kind, Outcome};
use crate::api::{CleanUpPolicy, ReplicaKey};
pub use crate::builders::{Desired, Recipe};
use crate::builders::{RecipeError, build_service_export, service_export_resource};
use crate::clusters::{ClusterHandle, PodChanged, PodKey};
use crate::lifecycle::machine::{Blocked, Intent, Refusal};
use crate::lifecycle::replica::{
    Created, Effect, Event, Failure, Identity, PodSighting, Read, ReplicaState, Report,
    ServiceSighting,
};
use crate::observed::ObservedPod;
pub use crate::signing::Trust;
use crate::status::ReplicaView;
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::ReplicaCensus;

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

pub struct ReplicaActor {
    setup: ReplicaSetup,
    pod_key: PodKey,
    machine: ReplicaState<Desired>,
    /// The service the API answered last, for its export: kept only on a
    /// member that exports services, boxed and without its managedFields
    /// (a whole Service is several KB, most of a replica's memory).
    service: Option<Box<Service>>,
    /// This actor and its replica's cluster and phase, in the metrics.
    census: ReplicaCensus,
}

impl ReplicaActor {
    pub fn new(mut setup: ReplicaSetup) -> ReplicaActor {
        let name = setup.key.object_name(&setup.job_name);
        let identity = Identity {
            key: setup.key,
            epoch: setup.epoch,
            namespace: setup.namespace.clone(),
            name: name.clone(),
            cluster: setup.cluster.name.clone(),
            export_services: setup.export_services,
        };
        let machine = ReplicaState::new(identity, setup.intent, setup.desired.take());
        ReplicaActor {
            census: setup.cluster.metrics.replica_census(&setup.cluster.name),
            pod_key: (setup.namespace.clone(), name),
            setup,
            machine,
            service: None,
        }
    }

    fn cluster(&self) -> &ClusterHandle {
        &self.setup.cluster
    }

    /// Names the replica in the log and in API-call retries.
    fn what(&self, verb: &str, object: &str) -> String {
        let ((namespace, name), cluster) = (&self.pod_key, &self.cluster().name);
        format!("{verb} {object} {namespace}/{name} on {cluster}")
    }

    /// The replica's pods or services.
    fn api<K: ReplicaObject>(&self) -> Api<K> {
        Api::namespaced(self.cluster().client.clone(), &self.pod_key.0)
    }

    fn feed(&mut self, ctx: &mut Context<Self>, event: Event<Desired>) {
        let effects = self.machine.step(event);
        tracing::trace!(replica = %self.pod_key.1, stage = ?self.machine.stage(), "replica stepped");
        self.carry_out(ctx, effects);
    }

    fn carry_out(&mut self, ctx: &mut Context<Self>, effects: Vec<Effect<Desired>>) {
        for effect in effects {
            match effect {
                Effect::CreatePod(desired) => self.create::<ObservedPod>(ctx, desired),
                Effect::CreateService(desired) => self.create::<Service>(ctx, desired),
                Effect::DeletePod { uid } => self.delete_pod(uid),
                Effect::ReadPod => self.read::<ObservedPod>(ctx),
                Effect::ReadService => self.read::<Service>(ctx),
                Effect::DeleteService { uid } => self.delete_service(ctx, uid),
                Effect::ExportService => self.export_service(ctx),
                Effect::Report(report) => self.report(*report),
                Effect::RetryAfter { object, tries } => {
                    ctx.run_later(self.setup.backoff.delay(tries), move |act, ctx| {
                        act.feed(ctx, Event::RetryDue(object))
                    });
                }
                Effect::NamespaceMissing => self.cluster().namespace_missing(&self.pod_key.0),
                Effect::Log { warning, message } => {
                    let (replica, cluster) = (&self.pod_key.1, &self.cluster().name);
                    match warning {
                        true => tracing::warn!(%replica, %cluster, "{message}"),
                        false => tracing::info!(%replica, %cluster, "{message}"),
                    }
                }
                Effect::TornDown => {
                    let (to, metrics) = (&self.setup.torn_down, &self.cluster().metrics);
                    super::tell(to, TornDown(self.setup.key), metrics, ActorKind::Job);
                    ctx.stop();
                }
            }
        }
    }

    fn report(&self, report: Report) {
        self.census.show(report.view.phase);
        let report = ReplicaReport {
            view: report.view,
            epoch: self.setup.epoch,
            blocked: report.blocked,
            refusal: report.refusal,
        };
        let metrics = &self.cluster().metrics;
        super::tell(&self.setup.job, report, metrics, ActorKind::Job);
    }

    /// A pod under the replica's name, with whether it is ours.
    fn sighting(trust: &Trust, pod: Arc<ObservedPod>) -> PodSighting {
        PodSighting {
            ours: trust.owns(pod.as_ref(), "Pod"),
            pod,
        }
    }

    /// Creates the replica's pod or service from `desired` in one of the
    /// cluster's create slots, or reads the object that holds its name.
    fn create<K: ReplicaObject>(&self, ctx: &mut Context<Self>, desired: Desired) {
        let (trust, signing) = (self.setup.trust.clone(), self.setup.trust.clone());
        let (api, client) = (self.api::<K>(), self.cluster().client.clone());
        let namespace = self.pod_key.0.clone();
        let (what, name) = (self.what("creating", K::WORD), self.pod_key.1.clone());
        let backoff = self.setup.backoff;
        let slots = self.cluster().create_slots();
        let create = async move {
            let _slot = slots.acquire().await;
            // Built only now, in a create slot: a few bodies are held at a time.
            let body = match K::body(&desired, &signing) {
                Ok(body) => body,
                Err(e) => return Created::Failed(Failure::Unbuildable(e.to_string())),
            };
            let create = || create::<K>(&client, &namespace, body.clone());
            match call::call(Kind::Create, backoff, &what, create).await {
                Ok(Outcome::Done(made)) => return Created::Made(made),
                Ok(_) => {}
                Err(e) => return Created::Failed(failure(&e)),
            }
            match call::call(Kind::Write, backoff, &what, || api.get(&name)).await {
                Ok(Outcome::Done(found)) => Created::Taken(found),
                Ok(_) => Created::Freed,
                Err(e) => Created::Failed(failure(&e)),
            }
        };
        ctx.spawn(create.into_actor(self).map(move |answer, act, ctx| {
            let event = K::created(act, answer, &trust);
            act.feed(ctx, event)
        }));
    }

    /// With the member's `exportServices`, a ServiceExport per service.
    fn export_service(&self, ctx: &mut Context<Self>) {
        let Some(export) = self.service.as_deref().and_then(build_service_export) else {
            return;
        };
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.cluster().client.clone(),
            &self.pod_key.0,
            &service_export_resource(),
        );
        let (backoff, what) = (self.setup.backoff, self.what("exporting", "service"));
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

    /// Deletes the pod of `uid`, and no newer one of the name. Outlives
    /// the actor: a teardown may end before the delete of a pod of another
    /// epoch is answered.
    fn delete_pod(&self, uid: String) {
        tokio::spawn(self.delete::<ObservedPod>(uid));
    }

    fn delete_service(&self, ctx: &mut Context<Self>, uid: String) {
        let deleted = self.delete::<Service>(uid).into_actor(self);
        ctx.spawn(deleted.map(|(), act, ctx| act.feed(ctx, Event::ServiceDeleted)));
    }

    /// Deletes the object of `uid` under the replica's name, and no other.
    fn delete<K: ReplicaObject>(&self, uid: String) -> impl Future<Output = ()> + 'static {
        let (api, name) = (self.api::<K>(), self.pod_key.1.clone());
        let (backoff, what) = (self.setup.backoff, self.what("deleting", K::WORD));
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        async move {
            // 409: another object took the name; it is not ours to delete.
            match call::call(Kind::Delete, backoff, &what, || api.delete(&name, &params)).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => tracing::warn!(error = %crate::telemetry::shown(&e), "{what} refused"),
            }
        }
    }

    /// Reads the replica's pod or service, for its machine.
    fn read<K: ReplicaObject>(&self, ctx: &mut Context<Self>) {
        let (api, trust) = (self.api::<K>(), self.setup.trust.clone());
        let (what, name) = (self.what("reading", K::WORD), self.pod_key.1.clone());
        let backoff = self.setup.backoff;
        let read = async move {
            match call::call(Kind::Write, backoff, &what, || api.get(&name)).await {
                Ok(Outcome::Done(found)) => Read::Found(found),
                Ok(_) => Read::Nothing,
                Err(e) => Read::Failed(crate::telemetry::shown(&e)),
            }
        };
        let read = read.into_actor(self);
        ctx.spawn(read.map(move |read, act, ctx| act.feed(ctx, K::read(read, &trust))));
    }
}

/// The replica's pod (as observed) or service, and how its machine hears
/// of it.
trait ReplicaObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
    + Send
    + 'static
{
    const WORD: &str;
    fn body(desired: &Desired, trust: &Trust) -> Result<Vec<u8>, RecipeError>;
    fn created(act: &mut ReplicaActor, answer: Created<Self>, trust: &Trust) -> Event<Desired>;
    fn read(answer: Read<Self>, trust: &Trust) -> Event<Desired>;
}

impl ReplicaObject for ObservedPod {
    const WORD: &str = "pod";

    fn body(desired: &Desired, trust: &Trust) -> Result<Vec<u8>, RecipeError> {
        desired.pod_body(trust)
    }

    fn created(_: &mut ReplicaActor, answer: Created<Self>, trust: &Trust) -> Event<Desired> {
        Event::PodCreated(answer.map(|pod| ReplicaActor::sighting(trust, Arc::new(pod))))
    }

    fn read(answer: Read<Self>, trust: &Trust) -> Event<Desired> {
        Event::PodRead(answer.map(|pod| ReplicaActor::sighting(trust, Arc::new(pod))))
    }
}

impl ReplicaObject for Service {
    const WORD: &str = "service";

    fn body(desired: &Desired, trust: &Trust) -> Result<Vec<u8>, RecipeError> {
        desired.service_body(trust)
    }

    /// Kept for its export, where there is one to make.
    fn created(act: &mut ReplicaActor, answer: Created<Self>, trust: &Trust) -> Event<Desired> {
        act.service = answer
            .object()
            .filter(|_| act.setup.export_services)
            .map(|service| {
                let mut kept = service.clone();
                kept.metadata.managed_fields = None;
                Box::new(kept)
            });
        Event::ServiceCreated(answer.map(|service| service_sighting(trust, &service)))
    }

    fn read(answer: Read<Self>, trust: &Trust) -> Event<Desired> {
        Event::ServiceRead(answer.map(|service| service_sighting(trust, &service)))
    }
}

fn service_sighting(trust: &Trust, service: &Service) -> ServiceSighting {
    ServiceSighting {
        uid: service.metadata.uid.clone(),
        ours: trust.owns(&service.metadata, "Service"),
    }
}

/// A failed create or read, as the replica's machine reads it.
fn failure(error: &kube::Error) -> Failure {
    match error {
        kube::Error::Api(e) => Failure::Refused {
            code: e.code,
            message: e.message.clone(),
            shown: crate::shown_error::shown_status(e),
        },
        other => Failure::NoAnswer(crate::telemetry::shown(other)),
    }
}

impl Actor for ReplicaActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let cached = self
            .cluster()
            .register(self.pod_key.clone(), ctx.address().recipient())
            .map(|pod| Self::sighting(&self.setup.trust, pod));
        let effects = self.machine.start(cached);
        self.carry_out(ctx, effects);
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
        let event = match msg.pod {
            Some(pod) => Event::PodSeen(Self::sighting(&self.setup.trust, pod)),
            None => Event::PodGone { uid: msg.gone },
        };
        self.feed(ctx, event);
    }
}

/// Each of the job's orders is an event of the replica's machine.
macro_rules! order {
    ($message:ty, |$msg:pat_param| $event:expr) => {
        impl Handler<$message> for ReplicaActor {
            type Result = ();

            fn handle(&mut self, $msg: $message, ctx: &mut Self::Context) {
                let _timer = self.cluster().metrics.handling(ActorKind::Replica);
                self.feed(ctx, $event);
            }
        }
    };
}

order!(Restart, |msg| Event::Restart {
    uid: msg.uid,
    recipe: msg.desired
});
order!(Finish, |msg| Event::Finish(msg.clean_up));
order!(Teardown, |_| Event::TearDown);

impl Handler<Abandon> for ReplicaActor {
    type Result = ();

    fn handle(&mut self, _msg: Abandon, ctx: &mut Self::Context) {
        ctx.stop();
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
