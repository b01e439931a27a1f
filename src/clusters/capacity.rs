//! The informers placement reads on every cluster it may use: nodes and
//! active pods (free capacity), and the namespaces that enforce a Pod
//! Security level. Each tells `changed` when a waiting job may fit now.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::PodSecurityLevel;
use crate::capacity::{self, Capacity};

/// Called when capacity may have grown; cheap, it only sends a message.
pub type Changed = Arc<dyn Fn() + Send + Sync>;

/// The node and active-pod caches of one cluster.
#[derive(Clone)]
pub struct CapacityWatch {
    nodes: Store<Node>,
    pods: Store<Pod>,
    _informers: Arc<Informers>,
}

/// The informer tasks, stopped when the last watch holding them goes.
struct Informers(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Informers {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs `stream` until its watch is dropped, calling `changed` for the
/// events `matters` picks.
fn inform<T>(
    stream: impl futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send + 'static,
    matters: fn(&watcher::Event<T>) -> bool,
    changed: Changed,
) -> tokio::task::JoinHandle<()>
where
    T: Send + 'static,
{
    tokio::spawn(stream.for_each(move |event| {
        if event.as_ref().is_ok_and(matters) {
            changed();
        }
        futures::future::ready(())
    }))
}

impl CapacityWatch {
    /// Starts the two informers on `client`; `changed` hears of every pod
    /// that ends or goes, and of every node listed or changed.
    pub fn start(client: &Client, changed: Changed) -> CapacityWatch {
        let (nodes, node_writer) = reflector::store();
        let (pods, pod_writer) = reflector::store();
        let node_stream = reflector::reflector(
            node_writer,
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).default_backoff(),
        );
        let active =
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
        let pod_stream = reflector::reflector(
            pod_writer,
            watcher(Api::<Pod>::all(client.clone()), active).default_backoff(),
        );
        let informers = Informers(vec![
            // Nodes listed (at last) or changed: a job tried against a
            // snapshot without them is worth trying again.
            inform(
                node_stream,
                |event| matches!(event, watcher::Event::Apply(_) | watcher::Event::InitDone),
                changed.clone(),
            ),
            inform(
                pod_stream,
                |event| matches!(event, watcher::Event::Delete(_)),
                changed,
            ),
        ]);
        CapacityWatch {
            nodes,
            pods,
            _informers: Arc::new(informers),
        }
    }

    pub fn snapshot(&self) -> Capacity {
        let nodes = self.nodes.state();
        let pods = self.pods.state();
        capacity::compute(
            nodes.iter().map(|n| n.as_ref()),
            pods.iter().map(|p| p.as_ref()),
        )
    }
}

/// The Pod Security level each labelled namespace of a member enforces.
#[derive(Clone)]
pub struct PodSecurityWatch {
    namespaces: Store<PartialObjectMeta<Namespace>>,
    _informer: Arc<Informers>,
}

impl PodSecurityWatch {
    /// Watches the metadata of the namespaces that carry the enforce label;
    /// `changed` hears of every change (a waiting job may fit now).
    pub fn start(client: &Client, changed: Changed) -> PodSecurityWatch {
        let (namespaces, writer) = reflector::store();
        let labelled = watcher::Config::default().labels(PodSecurityLevel::ENFORCE_LABEL);
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                labelled,
            )
            .default_backoff(),
        );
        PodSecurityWatch {
            namespaces,
            _informer: Arc::new(Informers(vec![inform(stream, |_| true, changed)])),
        }
    }

    pub fn levels(&self) -> BTreeMap<String, PodSecurityLevel> {
        crate::isolation::enforced_levels(
            self.namespaces
                .state()
                .iter()
                .map(|ns| (ns.name_any(), ns.labels().clone())),
        )
    }
}
