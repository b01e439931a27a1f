//! Simulated Kubernetes clusters: an in-memory API server per cluster that
//! serves real HTTP on 127.0.0.1, so kubectl and kube-rs talk to it
//! unchanged. Nothing here imports the controller, and the controller never
//! imports this: they meet only over HTTP.

mod apply;
mod cel;
mod discovery;
mod error;
mod event_apis;
mod faults;
mod http;
mod kubelet;
mod logs;
mod namespaces;
mod nodes;
mod openapi;
mod patch;
mod pod_security;
mod pod_validation;
mod protobuf;
mod resources;
mod rules;
mod scheduler;
mod schema;
mod selector;
mod server;
mod store;
mod table;
mod validate;
mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;

pub use faults::Faults;
pub use nodes::NodeShape;

/// Options shared by every simulated cluster.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Events kept for watches and continue tokens (the compaction window).
    pub watch_history: usize,
    /// The nodes every cluster gets.
    pub nodes: NodeShape,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            watch_history: 10_000,
            nodes: NodeShape::default(),
        }
    }
}

/// One simulated cluster: its store, fault settings and address.
pub struct Cluster {
    pub name: String,
    pub address: SocketAddr,
    store: store::Store,
    faults: faults::FaultState,
    drop_watches: signal::Sender<u64>,
    shutdown: signal::Receiver<bool>,
    /// Every kind of request served, by client (`GET /_sim/requests`).
    accesses: std::sync::Mutex<std::collections::BTreeSet<Access>>,
    /// What the kubelet's containers wrote.
    logs: logs::Logs,
}

/// One kind of resource request a client made: what an RBAC rule would
/// have to allow.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    pub user_agent: String,
    pub verb: &'static str,
    pub api_group: String,
    /// The plural, with `/status` for the status subresource.
    pub resource: String,
}

/// A running simulated cluster; dropping it does not stop it, `stop` does.
pub struct RunningCluster {
    pub name: String,
    pub address: SocketAddr,
    /// The same cluster past every fault (`faults::DIRECT`): for what runs
    /// inside the cluster, such as a member's fence.
    pub direct_address: SocketAddr,
    stop: signal::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningCluster {
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig with one cluster, user and context, all named after the cluster.
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.name, &self.url())
    }

    /// The kubeconfig of the direct port, which no fault reaches.
    pub fn direct_kubeconfig(&self) -> String {
        kubeconfig_yaml(&self.name, &format!("http://{}", self.direct_address))
    }

    /// Stops accepting requests and closes open watches.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

pub fn kubeconfig_yaml(name: &str, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\nusers:\n- name: {name}\n  user:\n    token: simulated\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\ncurrent-context: {name}\n"
    )
}

/// Starts one simulated cluster on a free port of 127.0.0.1.
pub async fn start_cluster(name: &str, options: &SimOptions) -> std::io::Result<RunningCluster> {
    start(name, options).await.map(|(running, _)| running)
}

/// Starts one cluster; the cluster itself too, for the simulator's own tests.
async fn start(
    name: &str,
    options: &SimOptions,
) -> std::io::Result<(RunningCluster, Arc<Cluster>)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let address = listener.local_addr()?;
    let direct = TcpListener::bind(("127.0.0.1", 0)).await?;
    let direct_address = direct.local_addr()?;
    let (stop, shutdown) = signal::channel(false);
    let cluster = Arc::new(Cluster {
        name: name.to_string(),
        address,
        store: store::Store::new(options.watch_history),
        faults: faults::FaultState::default(),
        drop_watches: signal::channel(0).0,
        shutdown: shutdown.clone(),
        accesses: Default::default(),
        logs: Default::default(),
    });
    install_ground_crds(&cluster);
    nodes::create(&cluster, &options.nodes);
    tokio::spawn(namespaces::run(cluster.clone()));
    tokio::spawn(scheduler::run(cluster.clone()));
    tokio::spawn(kubelet::run(cluster.clone()));
    tokio::spawn(nodes::heartbeat(cluster.clone(), options.nodes.clone()));
    let (faulty, past_faults) = (
        accept_loop(listener, cluster.clone(), shutdown.clone(), false),
        accept_loop(direct, cluster.clone(), shutdown, true),
    );
    let task = tokio::spawn(async move {
        tokio::join!(faulty, past_faults);
    });
    tracing::info!(cluster = name, %address, "simulated cluster serving");
    let running = RunningCluster {
        name: name.to_string(),
        address,
        direct_address,
        stop,
        task,
    };
    Ok((running, cluster))
}

/// The kinds every simulated cluster serves from the start, as the real
/// ground's clusters do: the T9k scheduler's PodGroups (every simulated
/// cluster runs it) and Multi-Cluster Services' ServiceExport (the
/// simulated clusters are one clusterset).
fn install_ground_crds(cluster: &Cluster) {
    let Some(crds) = cluster
        .store
        .resource_type("apiextensions.k8s.io", "customresourcedefinitions")
    else {
        return;
    };
    let pod_groups = schemaless_crd(
        ("scheduler.tensorstack.dev", "v1beta1"),
        ("PodGroup", "podgroups", "pg"),
        serde_json::json!([
            {"name": "MinMember", "type": "integer", "jsonPath": ".spec.minMember"},
            {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    );
    let service_exports = schemaless_crd(
        ("multicluster.x-k8s.io", "v1alpha1"),
        ("ServiceExport", "serviceexports", "svcex"),
        serde_json::json!([]),
    );
    let write = store::WriteMeta {
        manager: "kube-apiserver".into(),
        now: store::now(),
        dry_run: false,
    };
    for crd in [pod_groups, service_exports] {
        // A fresh store has no CRD of these names.
        let _ = cluster.store.create(&crds, "", crd, &write);
    }
}

/// A namespaced CRD of one version that keeps any field, with a status
/// subresource and the given printer columns.
fn schemaless_crd(
    (group, version): (&str, &str),
    (kind, plural, short_name): (&str, &str, &str),
    columns: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List"), "shortNames": [short_name]},
            "versions": [{
                "name": version, "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

async fn accept_loop(
    listener: TcpListener,
    cluster: Arc<Cluster>,
    mut shutdown: signal::Receiver<bool>,
    direct: bool,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        let (socket, _) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!(cluster = %cluster.name, error = %e, "accept failed");
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let cluster = cluster.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(faults::DIRECT.scope(direct, async move {
            let service = service_fn(move |req| {
                let cluster = cluster.clone();
                async move { Ok::<_, std::convert::Infallible>(server::handle(cluster, req).await) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(socket), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = conn_shutdown.changed() => {}
            }
        }));
    }
}

/// The clusters `sim` and `demo` start: `home`, then `member-1`, `member-2`, ….
pub fn cluster_names(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            if i == 0 {
                "home".to_string()
            } else {
                format!("member-{i}")
            }
        })
        .collect()
}

/// Writes `DIR/<name>.kubeconfig` and `DIR/<name>.direct.kubeconfig` (past
/// every fault) for every cluster, then `DIR/ready`.
pub fn write_kubeconfigs(dir: &Path, clusters: &[RunningCluster]) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut paths = Vec::new();
    for c in clusters {
        let path = dir.join(format!("{}.kubeconfig", c.name));
        std::fs::write(&path, c.kubeconfig())?;
        paths.push(path);
        std::fs::write(
            dir.join(format!("{}.direct.kubeconfig", c.name)),
            c.direct_kubeconfig(),
        )?;
    }
    std::fs::write(
        dir.join("ready"),
        clusters
            .iter()
            .map(|c| format!("{} {}\n", c.name, c.url()))
            .collect::<String>(),
    )?;
    Ok(paths)
}
