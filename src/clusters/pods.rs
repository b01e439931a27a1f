//! One cluster connection as the controller uses it: the [`ClusterHandle`]
//! (client, cache of the pods this controller manages, routes), kept fresh
//! by the informer the [`ClusterActor`] runs, which routes each pod's
//! changes to the ReplicaActor that registered for it.

use std::sync::Arc;

use actix::prelude::*;
use dashmap::{DashMap, DashSet};
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::builders::MANAGED_SELECTOR;
use crate::observed::ObservedPod;
use crate::telemetry::{ActorKind, Metrics, metrics::Alive};

/// `(namespace, name)` of a pod.
pub type PodKey = (String, String);

/// The pod of a name changed: the pod now, or None when the pod of uid
/// `gone` went (a replica may already hold a newer pod of that name, from
/// its own create's answer: the old one's going is then no news).
#[derive(Message, Clone)]
#[rtype(result = "()")]
pub struct PodChanged {
    pub pod: Option<Arc<ObservedPod>>,
    pub gone: Option<String>,
}

/// What replicas and jobs use of a cluster: its client, its pod cache and
/// the routing table. Cheap to clone.
#[derive(Clone)]
pub struct ClusterHandle {
    pub name: String,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pods: Arc<DashMap<PodKey, Arc<ObservedPod>>>,
    routes: Arc<DashMap<PodKey, Recipient<PodChanged>>>,
    /// Namespaces this connection created or found existing: a job's
    /// namespace is created on a member once, not once per job.
    namespaces: Arc<DashSet<String>>,
    /// Creates in flight to this cluster, at most `CREATE_SLOTS`: a job of
    /// thousands of replicas builds and sends a few bodies at a time.
    create_slots: Arc<tokio::sync::Semaphore>,
    synced: watch::Receiver<bool>,
}

/// Creates in flight to one cluster at once (each holds its body and the
/// answer): enough to keep an API server busy, few enough to bound memory.
pub const CREATE_SLOTS: usize = 64;

impl ClusterHandle {
    /// The create slots of this cluster (see `CREATE_SLOTS`).
    pub fn create_slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.create_slots.clone()
    }

    /// Routes the pod's changes to `recipient`; returns the pod as cached now.
    pub fn register(
        &self,
        key: PodKey,
        recipient: Recipient<PodChanged>,
    ) -> Option<Arc<ObservedPod>> {
        self.routes.insert(key.clone(), recipient);
        self.pods.get(&key).map(|p| p.clone())
    }

    /// Stops routing the pod's changes to `recipient` (not to a newer
    /// actor that registered the same pod since).
    pub fn unregister(&self, key: &PodKey, recipient: &Recipient<PodChanged>) {
        self.routes.remove_if(key, |_, routed| routed == recipient);
    }

    /// Whether the namespace was created or found here before.
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// The namespace exists (created, or a create found it).
    pub fn namespace_exists(&self, namespace: &str) {
        self.namespaces.insert(namespace.to_string());
    }

    /// A write found the namespace missing or terminating: the next job
    /// placed here creates it again.
    pub fn namespace_missing(&self, namespace: &str) {
        self.namespaces.remove(namespace);
    }

    /// Waits until the pod informer has listed the cluster once.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        // The sender lives in the informer task for the life of the process.
        let _ = synced.wait_for(|s| *s).await;
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }
}

/// Stops its informer when it stops: keep its `Addr` as long as the
/// cluster is used.
pub struct ClusterActor {
    handle: ClusterHandle,
    /// The identity of the cluster the informer should see (member
    /// clusters): a relist is checked against it before pods that vanished
    /// from it are reported gone.
    identity: Option<String>,
    synced: Option<watch::Sender<bool>>,
    informer: Option<tokio::task::JoinHandle<()>>,
    _alive: Alive,
}

impl ClusterActor {
    pub fn new(
        name: String,
        client: Client,
        metrics: Arc<Metrics>,
    ) -> (ClusterActor, ClusterHandle) {
        ClusterActor::replacing(name, client, metrics, None)
    }

    /// A new connection to a cluster that keeps the routes (and cache) of
    /// `previous`, so replicas registered there go on receiving their pods'
    /// changes from the new informer.
    pub fn replacing(
        name: String,
        client: Client,
        metrics: Arc<Metrics>,
        previous: Option<&ClusterHandle>,
    ) -> (ClusterActor, ClusterHandle) {
        let (tx, rx) = watch::channel(false);
        let handle = ClusterHandle {
            name,
            client,
            metrics,
            pods: previous.map(|p| p.pods.clone()).unwrap_or_default(),
            routes: previous.map(|p| p.routes.clone()).unwrap_or_default(),
            namespaces: Arc::default(),
            create_slots: previous.map_or_else(
                || Arc::new(tokio::sync::Semaphore::new(CREATE_SLOTS)),
                |p| p.create_slots.clone(),
            ),
            synced: rx,
        };
        (
            ClusterActor {
                handle: handle.clone(),
                identity: None,
                synced: Some(tx),
                informer: None,
                _alive: handle.metrics.alive(ActorKind::Cluster),
            },
            handle,
        )
    }
}

impl ClusterActor {
    /// The informer's relists are checked to come from the cluster of this
    /// identity (`member_identity`) before a vanished pod is reported gone.
    pub fn expect_identity(&mut self, identity: String) {
        self.identity = Some(identity);
    }
}

impl Actor for ClusterActor {
    type Context = Context<Self>;

    fn started(&mut self, _ctx: &mut Self::Context) {
        let Some(synced) = self.synced.take() else {
            return;
        };
        // An actor started while a replica shuts down (its leader Lease
        // lost) finds no runtime left: nothing to watch for then, and
        // `tokio::spawn` would panic.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.informer = Some(runtime.spawn(run_informer(
            self.handle.clone(),
            self.identity.clone(),
            synced,
        )));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        if let Some(informer) = self.informer.take() {
            informer.abort();
        }
    }
}

fn pod_key(pod: &ObservedPod) -> PodKey {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

fn route(
    handle: &ClusterHandle,
    key: &PodKey,
    pod: Option<Arc<ObservedPod>>,
    gone: Option<String>,
) {
    if let Some(recipient) = handle.routes.get(key) {
        crate::actors::tell(
            recipient.value(),
            PodChanged { pod, gone },
            &handle.metrics,
            ActorKind::Replica,
        );
    }
}

/// Whether a relist of `handle`'s cluster may report pods gone: it comes
/// from the cluster of `identity` (when one is expected). A server that now
/// is another cluster (its address moved, the credentials' server re-used)
/// would list none of the jobs' pods, and they would count as deleted.
enum Relist {
    Trusted,
    /// Who answered cannot be read now: the vanished pods stay in the cache
    /// (a later relist reports them).
    Unverified,
    /// Another cluster answers: the informer stops (the probe refuses the
    /// member, see `member_identity`).
    OtherCluster(String),
}

async fn check_relist(handle: &ClusterHandle, identity: Option<&str>) -> Relist {
    let Some(expected) = identity else {
        return Relist::Trusted;
    };
    match super::probe::identity(&handle.client).await {
        Ok(reached) if reached == expected => Relist::Trusted,
        Ok(reached) => Relist::OtherCluster(reached),
        Err(_) => Relist::Unverified,
    }
}

/// Keeps the cache and routes changes; a relist replaces the cache and
/// reports pods that vanished meanwhile as gone (once the relist is known to
/// come from the expected cluster, see [`check_relist`]).
async fn run_informer(
    handle: ClusterHandle,
    identity: Option<String>,
    synced: watch::Sender<bool>,
) {
    let api: Api<ObservedPod> = Api::all(handle.client.clone());
    let config = watcher::Config::default().labels(MANAGED_SELECTOR);
    let mut events = watcher(api, config).default_backoff().boxed();
    let mut relisted: Vec<Arc<ObservedPod>> = Vec::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(pod)) => {
                let pod = Arc::new(pod);
                let key = pod_key(&pod);
                handle.pods.insert(key.clone(), pod.clone());
                route(&handle, &key, Some(pod), None);
            }
            Ok(watcher::Event::Delete(pod)) => {
                let key = pod_key(&pod);
                handle.pods.remove(&key);
                route(&handle, &key, None, pod.metadata.uid);
            }
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(pod)) => relisted.push(Arc::new(pod)),
            Ok(watcher::Event::InitDone) => {
                let fresh: DashMap<PodKey, Arc<ObservedPod>> =
                    relisted.drain(..).map(|p| (pod_key(&p), p)).collect();
                let mut vanished: Vec<PodKey> = handle
                    .pods
                    .iter()
                    .map(|e| e.key().clone())
                    .filter(|k| !fresh.contains_key(k))
                    .collect();
                if !vanished.is_empty() {
                    match check_relist(&handle, identity.as_deref()).await {
                        Relist::Trusted => {}
                        Relist::Unverified => vanished.clear(),
                        Relist::OtherCluster(reached) => {
                            tracing::warn!(cluster = %handle.name, expected = identity.as_deref().unwrap_or_default(), %reached, "the pod informer reached another cluster; it stops, and no pod counts as gone");
                            return;
                        }
                    }
                }
                for key in vanished {
                    let gone = handle
                        .pods
                        .remove(&key)
                        .and_then(|(_, p)| p.metadata.uid.clone());
                    route(&handle, &key, None, gone);
                }
                for entry in fresh {
                    let (key, pod) = entry;
                    handle.pods.insert(key.clone(), pod.clone());
                    route(&handle, &key, Some(pod), None);
                }
                let _ = synced.send(true);
            }
            Err(e) => {
                tracing::warn!(cluster = %handle.name, error = %crate::telemetry::shown_watch(&e), "pod watch failed; retrying")
            }
        }
    }
}
