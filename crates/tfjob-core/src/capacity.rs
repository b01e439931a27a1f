//! A cluster's capacity as placement needs it: per node, allocatable minus
//! the requests of the pods bound there; pods not yet bound (this
//! controller's, waiting for the scheduler) are charged first-fit, so
//! capacity promised to them is not offered twice. Pure: the [`Tally`] is
//! kept up to date node by node and pod by pod, so that reading a
//! cluster's capacity costs its nodes and unbound pods, not all its pods.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::core::ObjectMeta;
use serde::{Deserialize, Deserializer};

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

fn resource_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
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

/// What free capacity needs of a pod, read straight from its JSON: its
/// identity, node, requests (as [`pod_requests`] counts them) and whether it
/// is still active. Everything else — `managedFields` above all — is
/// skipped, not decoded: the capacity informers watch every active pod of
/// every cluster, which makes pods the controller's most decoded object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodUsage {
    /// Name, namespace, uid and resourceVersion only.
    pub metadata: ObjectMeta,
    pub node: Option<String>,
    pub requests: Resources,
    /// Neither Succeeded nor Failed.
    pub active: bool,
}

impl PodUsage {
    /// `namespace/name`, the pod's key in a [`Tally`].
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}

/// The fields of a pod [`PodUsage`] reads; `null` reads as absent.
mod wire {
    use super::*;

    #[derive(Deserialize)]
    pub struct Pod {
        pub metadata: Option<Meta>,
        pub spec: Option<Spec>,
        pub status: Option<Status>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Meta {
        pub name: Option<String>,
        pub namespace: Option<String>,
        pub uid: Option<String>,
        pub resource_version: Option<String>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Spec {
        pub node_name: Option<String>,
        pub containers: Option<Vec<Container>>,
        pub init_containers: Option<Vec<Container>>,
    }

    #[derive(Deserialize)]
    pub struct Container {
        pub resources: Option<Requirements>,
    }

    #[derive(Deserialize)]
    pub struct Requirements {
        pub limits: Option<BTreeMap<String, Quantity>>,
        pub requests: Option<BTreeMap<String, Quantity>>,
    }

    #[derive(Deserialize)]
    pub struct Status {
        pub phase: Option<String>,
    }
}

impl<'de> Deserialize<'de> for PodUsage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pod = wire::Pod::deserialize(deserializer)?;
        let meta = pod.metadata;
        let asked = |c: &wire::Container| {
            let resources = c.resources.as_ref();
            quantity::container_requests(
                resource_list(resources.and_then(|r| r.limits.as_ref())),
                resource_list(resources.and_then(|r| r.requests.as_ref())),
            )
        };
        let (node, requests) = match &pod.spec {
            Some(spec) => (
                spec.node_name.clone(),
                quantity::pod_total(
                    spec.containers.iter().flatten().map(asked),
                    spec.init_containers.iter().flatten().map(asked),
                ),
            ),
            None => (None, Resources::new()),
        };
        let phase = pod.status.and_then(|s| s.phase);
        Ok(PodUsage {
            metadata: match meta {
                Some(m) => ObjectMeta {
                    name: m.name,
                    namespace: m.namespace,
                    uid: m.uid,
                    resource_version: m.resource_version,
                    ..ObjectMeta::default()
                },
                None => ObjectMeta::default(),
            },
            node,
            requests,
            active: !matches!(phase.as_deref(), Some("Succeeded" | "Failed")),
        })
    }
}

crate::observed::pod_resource!(PodUsage);

/// The node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn schedulable(node: &Node) -> bool {
    node_ready(node)
        && !node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
}

/// A cluster's nodes and what its active pods take of them, kept up to date
/// by one call per informer event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    /// Allocatable of each schedulable, Ready node, by name.
    nodes: BTreeMap<String, Resources>,
    /// Requests of each active pod bound to a node: (node, requests).
    bound: HashMap<String, (String, Resources)>,
    /// Sum of `bound` per node.
    used: HashMap<String, Resources>,
    /// Requests of each active pod not bound yet (ordered: first fit is
    /// the same every time).
    unbound: BTreeMap<String, Resources>,
}

fn add(total: &mut Resources, amounts: &Resources, sign: i64) {
    for (k, v) in amounts {
        *total.entry(k.clone()).or_default() += sign * v;
    }
}

impl Tally {
    /// A node appeared or changed (one that is not schedulable and Ready
    /// offers nothing).
    pub fn set_node(&mut self, node: &Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        if schedulable(node) {
            let allocatable =
                resource_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
            self.nodes.insert(name, allocatable);
        } else {
            self.nodes.remove(&name);
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// The pod under `key` (its namespace/name) appeared or changed; an
    /// ended pod takes nothing.
    pub fn set_pod(&mut self, key: &str, pod: &PodUsage) {
        self.remove_pod(key);
        if !pod.active {
            return;
        }
        let requests = pod.requests.clone();
        match pod.node.clone() {
            Some(node) => {
                add(self.used.entry(node.clone()).or_default(), &requests, 1);
                self.bound.insert(key.to_string(), (node, requests));
            }
            None => {
                self.unbound.insert(key.to_string(), requests);
            }
        }
    }

    pub fn remove_pod(&mut self, key: &str) {
        self.unbound.remove(key);
        if let Some((node, requests)) = self.bound.remove(key) {
            let used = self.used.entry(node.clone()).or_default();
            add(used, &requests, -1);
            if used.values().all(|v| *v == 0) {
                self.used.remove(&node);
            }
        }
    }

    /// Whether the active pod `key` is charged, bound or not.
    pub fn has_pod(&self, key: &str) -> bool {
        self.bound.contains_key(key) || self.unbound.contains_key(key)
    }

    /// Forgets every pod (a relist follows).
    pub fn clear_pods(&mut self) {
        self.bound.clear();
        self.used.clear();
        self.unbound.clear();
    }

    /// Forgets every node (a relist follows).
    pub fn clear_nodes(&mut self) {
        self.nodes.clear();
    }

    /// The capacity now: costs the nodes and the unbound pods.
    pub fn capacity(&self) -> Capacity {
        let mut allocatable = Resources::new();
        let mut nodes: Vec<Resources> = Vec::with_capacity(self.nodes.len());
        for (name, alloc) in &self.nodes {
            add(&mut allocatable, alloc, 1);
            let mut free = alloc.clone();
            if let Some(used) = self.used.get(name) {
                add(&mut free, used, -1);
            }
            nodes.push(free);
        }
        for requests in self.unbound.values() {
            let fits = |n: &Resources| {
                requests
                    .iter()
                    .all(|(k, v)| n.get(k).copied().unwrap_or(0) >= *v)
            };
            if let Some(node) = nodes.iter_mut().find(|n| fits(n)) {
                add(node, requests, -1);
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
}

/// Capacity from the cluster's nodes, its active bound pods, and this
/// controller's pods still waiting for a node (each listed pod counts once).
pub fn compute<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    pods: impl IntoIterator<Item = &'a PodUsage>,
) -> Capacity {
    let mut tally = Tally::default();
    for node in nodes {
        tally.set_node(node);
    }
    for (index, pod) in pods.into_iter().enumerate() {
        tally.set_pod(&format!("{index:08}"), pod);
    }
    tally.capacity()
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

    fn pod(node: Option<&str>, gpus: i64, phase: &str) -> PodUsage {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}, "requests": {"cpu": "1"}}}]},
            "status": {"phase": phase}}))
        .expect("valid pod")
    }

    #[test]
    fn a_pods_usage_is_read_as_the_typed_pod_counts_it() {
        let cases = [
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
                "spec": {"nodeName": "a", "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2"}, "requests": {"cpu": "500m"}}},
                    {"name": "d", "resources": {"requests": {"memory": "1Gi"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}]},
                "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c"}]}}),
            json!({"metadata": {"name": "r"}, "spec": {"nodeName": null, "containers": [
                {"name": "c", "resources": {"limits": null, "requests": {"cpu": "1"}}}]},
                "status": {"phase": "Succeeded"}}),
            json!({"metadata": {"name": "s"}}),
        ];
        for case in cases {
            let typed: Pod = serde_json::from_value(case.clone()).expect("a pod");
            let usage: PodUsage = serde_json::from_value(case.clone()).expect("a pod's usage");
            assert_eq!(usage.requests, pod_requests(&typed), "{case}");
            assert_eq!(
                usage.node,
                typed.spec.as_ref().and_then(|s| s.node_name.clone())
            );
            assert_eq!(
                usage.active,
                !matches!(
                    typed.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                ),
                "{case}"
            );
            assert_eq!(usage.metadata.name, typed.metadata.name);
            assert_eq!(
                usage.metadata.resource_version,
                typed.metadata.resource_version
            );
            assert!(usage.metadata.managed_fields.is_none(), "skipped, not kept");
        }
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

    #[test]
    fn a_tally_follows_events_and_agrees_with_a_fresh_count() {
        let mut tally = Tally::default();
        tally.set_node(&node("a", 4, true));
        tally.set_node(&node("b", 4, true));
        tally.set_pod("ns/x", &pod(None, 2, "Pending"));
        assert!(tally.has_pod("ns/x"), "charged before it is bound");
        // Bound: the charge moves from the unbound pods to node b.
        tally.set_pod("ns/x", &pod(Some("b"), 2, "Running"));
        tally.set_pod("ns/y", &pod(Some("a"), 3, "Running"));
        assert!(tally.has_pod("ns/x") && tally.has_pod("ns/y"));
        let now = tally.capacity();
        assert_eq!(
            now,
            compute(
                &[node("a", 4, true), node("b", 4, true)],
                &[pod(Some("b"), 2, "Running"), pod(Some("a"), 3, "Running")]
            )
        );
        assert_eq!(now.free["nvidia.com/gpu"], 3000);
        // y ends, b goes NotReady: only a's 4 GPUs are left, all free.
        tally.set_pod("ns/y", &pod(Some("a"), 3, "Succeeded"));
        assert!(!tally.has_pod("ns/y"), "an ended pod is not charged");
        tally.set_node(&node("b", 4, false));
        assert_eq!(tally.capacity().free["nvidia.com/gpu"], 4000);
        tally.remove_pod("ns/x");
        tally.set_node(&node("b", 4, true));
        assert_eq!(tally.capacity().free["nvidia.com/gpu"], 8000);
        tally.remove_node("a");
        tally.clear_pods();
        assert_eq!(tally.capacity().allocatable["nvidia.com/gpu"], 4000);
    }
}
