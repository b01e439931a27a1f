//! The informers placement reads on every cluster it may use: nodes and
//! active pods (free capacity), and the namespaces that enforce a Pod
//! Security level. Each tells `changed` when a waiting job may fit now.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::api::PodSecurityLevel;
use crate::capacity::{Capacity, PodUsage, Tally};

/// Called when capacity may have grown; cheap, it only sends a message.
pub type Changed = Arc<dyn Fn() + Send + Sync>;

/// The capacity of one cluster, kept by informers of its nodes and active
/// pods; a snapshot costs its nodes, not its pods.
#[derive(Clone)]
pub struct CapacityWatch {
    tally: Arc<Mutex<Tally>>,
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

/// How a kind of object enters the state `S` an informer keeps.
struct Follow<S, K> {
    set: fn(&mut S, &K),
    remove: fn(&mut S, &K),
    clear: fn(&mut S),
    /// Which events may have freed capacity.
    frees: fn(&watcher::Event<K>) -> bool,
}

/// Applies `events` to the state (a relist replaces what it held of the
/// kind at once, when complete) and calls `changed` as `follow` says.
fn follow<S, K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    state: Arc<Mutex<S>>,
    follow: Follow<S, K>,
    changed: Changed,
) -> tokio::task::JoinHandle<()>
where
    S: Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        let mut relisted = Vec::new();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let frees = (follow.frees)(&event);
            {
                let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                match &event {
                    watcher::Event::Apply(object) => (follow.set)(&mut state, object),
                    watcher::Event::Delete(object) => (follow.remove)(&mut state, object),
                    watcher::Event::Init => relisted.clear(),
                    watcher::Event::InitApply(_) => {}
                    watcher::Event::InitDone => {
                        (follow.clear)(&mut state);
                        for object in relisted.drain(..) {
                            (follow.set)(&mut state, &object);
                        }
                    }
                }
            }
            if let watcher::Event::InitApply(object) = event {
                relisted.push(object);
            } else if frees {
                changed();
            }
        }
    })
}

impl CapacityWatch {
    /// Starts the two informers on `client`; `changed` hears of every pod
    /// that ends or goes, and of every node listed or changed.
    pub fn start(client: &Client, changed: Changed) -> CapacityWatch {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let nodes =
            watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).default_backoff();
        let active =
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed");
        let pods = watcher(Api::<PodUsage>::all(client.clone()), active).default_backoff();
        let informers = Informers(vec![
            follow(
                nodes,
                tally.clone(),
                Follow {
                    set: Tally::set_node,
                    remove: |tally, node| tally.remove_node(&node.name_any()),
                    clear: Tally::clear_nodes,
                    // Nodes listed (at last) or changed: a job tried against
                    // a snapshot without them is worth trying again.
                    frees: |event| {
                        matches!(event, watcher::Event::Apply(_) | watcher::Event::InitDone)
                    },
                },
                changed.clone(),
            ),
            follow(
                pods,
                tally.clone(),
                Follow {
                    set: |tally, pod| tally.set_pod(&pod.key(), pod),
                    remove: |tally, pod| tally.remove_pod(&pod.key()),
                    clear: Tally::clear_pods,
                    // Ended pods leave the selected set: deleted for us.
                    frees: |event| matches!(event, watcher::Event::Delete(_)),
                },
                changed,
            ),
        ]);
        CapacityWatch {
            tally,
            _informers: Arc::new(informers),
        }
    }

    /// Whether the tally charges the active pod `key` (namespace/name).
    pub fn shows_pod(&self, key: &str) -> bool {
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .has_pod(key)
    }

    pub fn snapshot(&self) -> Capacity {
        self.tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .capacity()
    }
}

/// The enforce label of each labelled namespace of a member, by name.
type EnforceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// The Pod Security level each labelled namespace of a member enforces.
#[derive(Clone)]
pub struct PodSecurityWatch {
    labels: Arc<Mutex<EnforceLabels>>,
    _informer: Arc<Informers>,
}

impl PodSecurityWatch {
    /// Watches the metadata of the namespaces that carry the enforce label;
    /// `changed` hears of every change (a waiting job may fit now).
    pub fn start(client: &Client, changed: Changed) -> PodSecurityWatch {
        let labels = Arc::new(Mutex::new(EnforceLabels::new()));
        let labelled = watcher::Config::default().labels(PodSecurityLevel::ENFORCE_LABEL);
        let namespaces = watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            labelled,
        )
        .default_backoff();
        let informer = follow(
            namespaces,
            labels.clone(),
            Follow {
                set: |labels, ns| {
                    labels.insert(ns.name_any(), ns.labels().clone());
                },
                remove: |labels, ns| {
                    labels.remove(&ns.name_any());
                },
                clear: EnforceLabels::clear,
                frees: |_| true,
            },
            changed,
        );
        PodSecurityWatch {
            labels,
            _informer: Arc::new(Informers(vec![informer])),
        }
    }

    pub fn levels(&self) -> BTreeMap<String, PodSecurityLevel> {
        let labels = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        crate::isolation::enforced_levels(
            labels
                .iter()
                .map(|(name, labels)| (name.clone(), labels.clone())),
        )
    }
}
