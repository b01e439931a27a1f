//! The simulated nodes of a cluster: created at start with the capacity the
//! `sim` flags give, a Ready condition, labels for hostname and zone, and a
//! heartbeat (a Lease per node in `kube-node-lease`, as kubelets keep).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Cluster;
use super::store::{Change, Scope, WriteMeta, now};

/// How often each node renews its Lease.
const LEASE_RENEWAL: Duration = Duration::from_secs(10);

/// The shape of every node of a cluster.
#[derive(Debug, Clone)]
pub struct NodeShape {
    pub count: usize,
    pub cpu: String,
    pub memory: String,
    pub gpus: u32,
    pub max_pods: u32,
}

impl Default for NodeShape {
    fn default() -> Self {
        NodeShape {
            count: 4,
            cpu: "32".into(),
            memory: "128Gi".into(),
            gpus: 4,
            max_pods: 110,
        }
    }
}

pub fn node_name(cluster: &str, index: usize) -> String {
    format!("{cluster}-node-{index}")
}

fn node_object(cluster: &str, index: usize, shape: &NodeShape, now: &str) -> Value {
    let name = node_name(cluster, index);
    let capacity = json!({"cpu": shape.cpu, "memory": shape.memory, "pods": shape.max_pods.to_string(), "nvidia.com/gpu": shape.gpus.to_string(), "ephemeral-storage": "100Gi"});
    let condition = |type_: &str, status: &str, reason: &str, message: &str| json!({"type": type_, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "sim-gpu",
            "topology.kubernetes.io/region": cluster,
            "topology.kubernetes.io/zone": format!("{cluster}-zone-{}", ["a", "b"][index % 2]),
        }},
        "spec": {"podCIDR": format!("10.244.{index}.0/24"), "podCIDRs": [format!("10.244.{index}.0/24")]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": format!("172.18.0.{}", index + 2)}, {"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": "v1.32.0-sim", "kubeProxyVersion": "v1.32.0-sim", "architecture": "amd64",
                "operatingSystem": "linux", "osImage": "tfjob-federator simulated node",
                "containerRuntimeVersion": "containerd://1.7.0-sim", "kernelVersion": "6.1.0",
                "machineID": "", "systemUUID": "", "bootID": "",
            },
        },
    })
}

fn system_write(manager: &str) -> WriteMeta {
    WriteMeta {
        manager: manager.into(),
        now: now(),
        dry_run: false,
    }
}

/// Creates the nodes and their Leases.
pub fn create(cluster: &Cluster, shape: &NodeShape) {
    let store = &cluster.store;
    let (Some(nodes), Some(leases)) = (
        store.resource_type("", "nodes"),
        store.resource_type("coordination.k8s.io", "leases"),
    ) else {
        return;
    };
    let write = system_write("kubelet");
    for i in 0..shape.count {
        let name = node_name(&cluster.name, i);
        // Creating fresh objects in a fresh store cannot collide.
        let _ = store.create(
            &nodes,
            "",
            node_object(&cluster.name, i, shape, &write.now),
            &write,
        );
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()}});
        let _ = store.create(&leases, "kube-node-lease", lease, &write);
    }
}

fn micro_now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Renews every node's Lease until the cluster shuts down.
pub async fn heartbeat(cluster: Arc<Cluster>, shape: NodeShape) {
    let Some(leases) = cluster.store.resource_type("coordination.k8s.io", "leases") else {
        return;
    };
    let mut shutdown = cluster.shutdown.clone();
    let mut ticker = tokio::time::interval(LEASE_RENEWAL);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = shutdown.changed() => return,
        }
        for i in 0..shape.count {
            let renew = |mut lease: Value| -> super::error::ApiResult<Value> {
                lease["spec"]["renewTime"] = json!(micro_now());
                Ok(lease)
            };
            let _ = cluster.store.update(
                &leases,
                "kube-node-lease",
                &node_name(&cluster.name, i),
                Scope::Whole,
                Change::Patch(&renew),
                &system_write("kubelet"),
            );
        }
    }
}
