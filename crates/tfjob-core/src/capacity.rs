//! A cluster's capacity as placement needs it: per node, allocatable minus
//! the requests of the pods bound there; pods not yet bound (this
//! controller's, waiting for the scheduler) are charged first-fit, so
//! capacity promised to them is not offered twice. Pure: snapshots in,
//! numbers out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::quantity;

/// Amounts by resource name, in milli-units.
pub type Resources = BTreeMap<String, i64>;

/// The resources a MemberCluster's status reports.
pub const REPORTED: [&str; 3] = ["cpu", "memory", "nvidia.com/gpu"];

/// What placement and the MemberCluster status need of a cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacity {
    /// Free capacity of each schedulable, Ready node.
    pub nodes: Vec<Resources>,
    pub allocatable: Resources,
    pub free: Resources,
}

fn resource_list(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Resources {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), quantity::parse_milli(&q.0)?)))
        .collect()
}

/// The requests a pod needs on a node (`quantity::pod_total`).
pub fn pod_requests(pod: &Pod) -> Resources {
    let asked = |c: &k8s_openapi::api::core::v1::Container| {
        let resources = c.resources.as_ref();
        quantity::container_requests(
            resource_list(resources.and_then(|r| r.limits.as_ref())),
            resource_list(resources.and_then(|r| r.requests.as_ref())),
        )
    };
    let Some(spec) = &pod.spec else {
        return Resources::new();
    };
    quantity::pod_total(
        spec.containers.iter().map(asked),
        spec.init_containers.iter().flatten().map(asked),
    )
}

fn schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    ready
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}

fn is_active(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Capacity from the cluster's nodes, its active bound pods, and this
/// controller's pods still waiting for a node.
pub fn compute<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Capacity {
    let mut by_node: BTreeMap<String, Resources> = BTreeMap::new();
    let mut allocatable = Resources::new();
    for node in nodes.into_iter().filter(|n| schedulable(n)) {
        let alloc = resource_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        for (k, v) in &alloc {
            *allocatable.entry(k.clone()).or_default() += v;
        }
        by_node.insert(node.metadata.name.clone().unwrap_or_default(), alloc);
    }
    let mut unbound = Vec::new();
    for pod in pods.into_iter().filter(|p| is_active(p)) {
        match pod.spec.as_ref().and_then(|s| s.node_name.as_ref()) {
            Some(node) => {
                if let Some(free) = by_node.get_mut(node) {
                    for (k, v) in pod_requests(pod) {
                        *free.entry(k).or_default() -= v;
                    }
                }
            }
            None => unbound.push(pod_requests(pod)),
        }
    }
    let mut nodes: Vec<Resources> = by_node.into_values().collect();
    for requests in unbound {
        let fits = |n: &Resources| {
            requests
                .iter()
                .all(|(k, v)| n.get(k).copied().unwrap_or(0) >= *v)
        };
        if let Some(node) = nodes.iter_mut().find(|n| fits(n)) {
            for (k, v) in &requests {
                *node.entry(k.clone()).or_default() -= v;
            }
        }
    }
    let mut free = Resources::new();
    for node in &nodes {
        for (k, v) in node {
            *free.entry(k.clone()).or_default() += (*v).max(0);
        }
    }
    Capacity {
        nodes,
        allocatable,
        free,
    }
}

/// `cpu`, `memory` and `nvidia.com/gpu` as status strings (cores, Mi, GPUs).
pub fn report(resources: &Resources) -> BTreeMap<String, String> {
    REPORTED
        .iter()
        .map(|r| {
            let milli = resources.get(*r).copied().unwrap_or(0).max(0);
            let text = match *r {
                "memory" => format!("{}Mi", milli / 1000 / (1024 * 1024)),
                "cpu" if milli % 1000 != 0 => format!("{milli}m"),
                _ => (milli / 1000).to_string(),
            };
            (r.to_string(), text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, gpus: i64, ready: bool) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus.to_string(), "pods": "110"},
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
        .expect("valid node")
    }

    fn pod(node: Option<&str>, gpus: i64, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}, "requests": {"cpu": "1"}}}]},
            "status": {"phase": phase}}))
        .expect("valid pod")
    }

    #[test]
    fn free_is_allocatable_minus_bound_and_waiting_pods() {
        let nodes = [
            node("a", 4, true),
            node("b", 4, true),
            node("down", 4, false),
        ];
        let pods = [
            pod(Some("a"), 3, "Running"),
            pod(None, 2, "Pending"),
            pod(Some("b"), 4, "Succeeded"),
        ];
        let c = compute(&nodes, &pods);
        assert_eq!(
            c.allocatable["nvidia.com/gpu"], 8000,
            "the NotReady node does not count"
        );
        assert_eq!(
            c.free["nvidia.com/gpu"], 3000,
            "8 - 3 bound - 2 waiting; finished pods free theirs"
        );
        assert_eq!(report(&c.free)["nvidia.com/gpu"], "3");
        assert_eq!(report(&c.free)["cpu"], "14");
        assert_eq!(report(&c.allocatable)["memory"], "65536Mi");
    }
}
