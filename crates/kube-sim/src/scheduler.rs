//! The simulated scheduler: binds Pending pods to nodes by their resource
//! requests and node selector, like kube-scheduler's filter and
//! least-allocated score, and leaves the rest Pending with upstream's
//! `Unschedulable` condition and message. It runs `default-scheduler` and
//! `t9k-scheduler`; the latter binds the pods of a PodGroup all-or-nothing
//! once `minMember` of them fit (gang). Pods naming any other scheduler stay
//! Pending untouched, as on a real cluster.
//!
//! Event-driven: it keeps its own view of nodes, bound pods and the pending
//! queue from the store's change stream, and retries pending pods when
//! capacity frees up.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Cluster;
use super::store::{Change, Event, EventKind, Scope, Stored, WriteMeta, now};
use kube_quantity as quantity;

pub const GROUP_LABEL: &str = "scheduler.tensorstack.dev/group-name";
const GANG_SCHEDULER: &str = "t9k-scheduler";
const DEFAULT_SCHEDULER: &str = "default-scheduler";
pub const PODS: &str = "/pods";
pub const NODES: &str = "/nodes";
pub const POD_GROUPS: &str = "scheduler.tensorstack.dev/podgroups";

type Resources = BTreeMap<String, i64>;
type Key = (String, String);

/// What the scheduler knows of a node.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    pub requested: Resources,
    pub ready: bool,
    pub unschedulable: bool,
}

impl NodeState {
    fn from_object(node: &Value) -> NodeState {
        let labels = super::rules::string_map(node.pointer("/metadata/labels"));
        let ready = node
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type") == Some(&json!("Ready")) && c.get("status") == Some(&json!("True"))
            });
        NodeState {
            name: node
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            labels,
            allocatable: quantity::resource_list(node.pointer("/status/allocatable")),
            requested: Resources::new(),
            ready,
            unschedulable: node.pointer("/spec/unschedulable") == Some(&json!(true)),
        }
    }

    /// Why the pod cannot go here (upstream's first failing filter plugin,
    /// in its order: NodeUnschedulable, TaintToleration, NodeAffinity,
    /// NodeResourcesFit), if it cannot.
    fn misfit(&self, requests: &Resources, selector: &BTreeMap<String, String>) -> Option<Misfit> {
        let unresolvable = |reason: &str| {
            Some(Misfit {
                reasons: vec![reason.to_string()],
                resolvable: false,
            })
        };
        if self.unschedulable {
            return unresolvable("node(s) were unschedulable");
        }
        if !self.ready {
            return unresolvable("node(s) had untolerated taint {node.kubernetes.io/not-ready: }");
        }
        if selector.iter().any(|(k, v)| self.labels.get(k) != Some(v)) {
            return unresolvable("node(s) didn't match Pod's node affinity/selector");
        }
        let mut reasons = Vec::new();
        let mut resolvable = true;
        for (name, need) in requests {
            let used = self.requested.get(name).copied().unwrap_or(0);
            let allocatable = self.allocatable.get(name).copied().unwrap_or(0);
            if *need > 0 && used + need > allocatable {
                reasons.push(if name == "pods" {
                    "Too many pods".to_string()
                } else {
                    format!("Insufficient {name}")
                });
                // More than the whole node has: evicting pods cannot help.
                if name != "pods" && *need > allocatable {
                    resolvable = false;
                }
            }
        }
        (!reasons.is_empty()).then_some(Misfit {
            reasons,
            resolvable,
        })
    }

    /// Least-allocated score after placing the pod (higher is emptier).
    fn score(&self, requests: &Resources) -> f64 {
        let shares: Vec<f64> = ["cpu", "memory"]
            .iter()
            .filter_map(|r| {
                let allocatable = *self.allocatable.get(*r)? as f64;
                (allocatable > 0.0).then(|| {
                    let used = (self.requested.get(*r).copied().unwrap_or(0)
                        + requests.get(*r).copied().unwrap_or(0))
                        as f64;
                    (allocatable - used) / allocatable
                })
            })
            .collect();
        if shares.is_empty() {
            0.0
        } else {
            shares.iter().sum::<f64>() / shares.len() as f64
        }
    }

    fn add(&mut self, requests: &Resources, sign: i64) {
        for (name, amount) in requests {
            *self.requested.entry(name.clone()).or_default() += sign * amount;
        }
    }
}

/// Why a pod does not fit a node: the filter's reasons, and whether
/// preemption (evicting pods of lower priority) might make it fit.
#[derive(Debug, Clone, PartialEq)]
struct Misfit {
    reasons: Vec<String>,
    resolvable: bool,
}

/// Preemption's verdict on a node where evicting pods might help: every pod
/// has the same priority here (no PriorityClasses), so none can be evicted.
const NO_VICTIMS: &str = "No preemption victims found for incoming pod";
const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// `n reason` for every reason, sorted as strings (upstream sorts the
/// formatted histogram), joined by `, `.
fn histogram<'a>(reasons: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in reasons {
        *counts.entry(reason).or_default() += 1;
    }
    let mut listed: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    listed.sort();
    listed.join(", ")
}

/// Picks the node for a pod, or returns kube-scheduler's message for why
/// none fits: the filter reasons counted over the nodes, then preemption's
/// verdict per node, e.g. `0/4 nodes are available: 4 Insufficient
/// nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not
/// helpful for scheduling.`
pub fn pick_node(
    requests: &Resources,
    selector: &BTreeMap<String, String>,
    nodes: &[NodeState],
) -> Result<usize, String> {
    if nodes.is_empty() {
        return Err("no nodes available to schedule pods".into());
    }
    let mut misfits = Vec::new();
    let mut best: Option<(usize, f64)> = None;
    for (i, node) in nodes.iter().enumerate() {
        match node.misfit(requests, selector) {
            Some(misfit) => misfits.push(misfit),
            None => {
                let score = node.score(requests);
                if best.is_none_or(|(_, s)| score > s) {
                    best = Some((i, score));
                }
            }
        }
    }
    match best {
        Some((i, _)) => Ok(i),
        None => {
            let filter = histogram(
                misfits
                    .iter()
                    .flat_map(|m| m.reasons.iter().map(String::as_str)),
            );
            let preemption = histogram(misfits.iter().map(|m| {
                if m.resolvable {
                    NO_VICTIMS
                } else {
                    NOT_HELPFUL
                }
            }));
            let total = nodes.len();
            Err(format!(
                "0/{total} nodes are available: {filter}. preemption: 0/{total} nodes are available: {preemption}."
            ))
        }
    }
}

#[derive(Debug, Clone)]
struct PendingPod {
    uid: String,
    order: u64,
    requests: Resources,
    selector: BTreeMap<String, String>,
    gang: Option<String>,
    /// The Unschedulable message last written, so it is written once.
    message: Option<String>,
}

#[derive(Debug, Clone)]
struct BoundPod {
    node: String,
    requests: Resources,
    gang: Option<String>,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, NodeState>,
    bound: HashMap<Key, BoundPod>,
    pending: HashMap<Key, PendingPod>,
    /// PodGroup (namespace, name) → minMember.
    groups: HashMap<Key, i64>,
    /// Capacity or groups changed: every pending pod deserves another try.
    retry_all: bool,
    fresh: Vec<Key>,
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl State {
    fn observe(&mut self, type_id: &str, kind: EventKind, obj: &Stored) {
        let key = (obj.namespace.clone(), obj.name.clone());
        match type_id {
            NODES => {
                if kind == EventKind::Deleted {
                    self.nodes.remove(&obj.name);
                } else {
                    let mut node = NodeState::from_object(&obj.value());
                    if let Some(old) = self.nodes.get(&obj.name) {
                        node.requested = old.requested.clone();
                    }
                    self.nodes.insert(obj.name.clone(), node);
                }
                self.retry_all = true;
            }
            POD_GROUPS => {
                if kind == EventKind::Deleted {
                    self.groups.remove(&key);
                } else {
                    let min = obj
                        .value()
                        .pointer("/spec/minMember")
                        .and_then(Value::as_i64)
                        .unwrap_or(1);
                    self.groups.insert(key, min);
                }
                self.retry_all = true;
            }
            PODS => self.observe_pod(kind, obj, key),
            _ => {}
        }
    }

    fn observe_pod(&mut self, kind: EventKind, obj: &Stored, key: Key) {
        let pod = obj.value();
        let node = text(&pod, "/spec/nodeName");
        let phase = text(&pod, "/status/phase");
        let active =
            kind != EventKind::Deleted && !matches!(phase.as_str(), "Succeeded" | "Failed");
        if !node.is_empty() || !active {
            self.pending.remove(&key);
        }
        if !node.is_empty() && active {
            if !self.bound.contains_key(&key) {
                let requests = quantity::pod_requests(&pod);
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.add(&requests, 1);
                }
                self.bound.insert(
                    key,
                    BoundPod {
                        node,
                        requests,
                        gang: obj.labels.get(GROUP_LABEL).cloned(),
                    },
                );
            }
            return;
        }
        if let Some(gone) = self.bound.remove(&key) {
            if let Some(n) = self.nodes.get_mut(&gone.node) {
                n.add(&gone.requests, -1);
            }
            self.retry_all = true;
        }
        let scheduler = text(&pod, "/spec/schedulerName");
        let ours = matches!(scheduler.as_str(), DEFAULT_SCHEDULER | GANG_SCHEDULER | "");
        if !active || !node.is_empty() || !ours || obj.deleting {
            return;
        }
        let gang = (scheduler == GANG_SCHEDULER)
            .then(|| obj.labels.get(GROUP_LABEL).cloned().unwrap_or_default());
        let message = self
            .pending
            .get(&key)
            .filter(|p| p.uid == obj.uid)
            .and_then(|p| p.message.clone());
        let order = self
            .pending
            .get(&key)
            .filter(|p| p.uid == obj.uid)
            .map_or(obj.rv, |p| p.order);
        let selector = super::rules::string_map(pod.pointer("/spec/nodeSelector"));
        if !self.pending.contains_key(&key) {
            self.fresh.push(key.clone());
        }
        self.pending.insert(
            key,
            PendingPod {
                uid: obj.uid.clone(),
                order,
                requests: quantity::pod_requests(&pod),
                selector,
                gang,
                message,
            },
        );
    }

    /// Decides bindings and Unschedulable messages for the pods due a try.
    fn plan(&mut self) -> Vec<Decision> {
        let mut due: Vec<Key> = if std::mem::take(&mut self.retry_all) {
            self.pending.keys().cloned().collect()
        } else {
            self.fresh
                .iter()
                .filter(|k| self.pending.contains_key(*k))
                .cloned()
                .collect()
        };
        self.fresh.clear();
        due.sort_by_key(|k| self.pending.get(k).map_or(0, |p| p.order));
        let mut nodes: Vec<NodeState> = self.nodes.values().cloned().collect();
        let mut decisions = Vec::new();
        let mut failed: HashMap<(Resources, BTreeMap<String, String>), String> = HashMap::new();
        let mut gangs_done: Vec<Key> = Vec::new();
        for key in due {
            let Some(pod) = self.pending.get(&key).cloned() else {
                continue;
            };
            if let Some(group) = &pod.gang {
                let group_key = (key.0.clone(), group.clone());
                if !gangs_done.contains(&group_key) {
                    self.plan_gang(&group_key, &mut nodes, &mut decisions);
                    gangs_done.push(group_key);
                }
                continue;
            }
            let signature = (pod.requests.clone(), pod.selector.clone());
            let outcome = match failed.get(&signature) {
                Some(message) => Err(message.clone()),
                None => pick_node(&pod.requests, &pod.selector, &nodes),
            };
            match outcome {
                Ok(i) => {
                    nodes[i].add(&pod.requests, 1);
                    decisions.push(Decision::Bind {
                        key,
                        uid: pod.uid,
                        node: nodes[i].name.clone(),
                    });
                }
                Err(message) => {
                    failed.insert(signature, message.clone());
                    decisions.push(Decision::Unschedulable {
                        key,
                        uid: pod.uid,
                        message,
                    });
                }
            }
        }
        decisions.retain(|d| match d {
            Decision::Unschedulable { key, message, .. } => self
                .pending
                .get(key)
                .is_some_and(|p| p.message.as_ref() != Some(message)),
            Decision::Bind { .. } => true,
        });
        for d in &decisions {
            if let Decision::Unschedulable { key, message, .. } = d
                && let Some(p) = self.pending.get_mut(key)
            {
                p.message = Some(message.clone());
            }
        }
        decisions
    }

    /// All-or-nothing: the group's pending pods are bound only if, together
    /// with the members already bound, at least minMember of them fit.
    fn plan_gang(&self, group: &Key, nodes: &mut [NodeState], decisions: &mut Vec<Decision>) {
        let mut members: Vec<(&Key, &PendingPod)> = self
            .pending
            .iter()
            .filter(|(k, p)| k.0 == group.0 && p.gang.as_ref() == Some(&group.1))
            .collect();
        members.sort_by_key(|(_, p)| p.order);
        let Some(min_member) = self.groups.get(group) else {
            for (key, pod) in members {
                let message = format!("pod group \"{}\" not found", group.1);
                decisions.push(Decision::Unschedulable {
                    key: key.clone(),
                    uid: pod.uid.clone(),
                    message,
                });
            }
            return;
        };
        let already = self
            .bound
            .iter()
            .filter(|(k, b)| k.0 == group.0 && b.gang.as_ref() == Some(&group.1))
            .count() as i64;
        let mut scratch = nodes.to_vec();
        let mut placed = Vec::new();
        let mut last_reason = String::new();
        for (key, pod) in &members {
            match pick_node(&pod.requests, &pod.selector, &scratch) {
                Ok(i) => {
                    scratch[i].add(&pod.requests, 1);
                    placed.push((*key, *pod, i));
                }
                Err(reason) => last_reason = reason,
            }
        }
        if already + placed.len() as i64 >= *min_member {
            nodes.clone_from_slice(&scratch);
            for (key, pod, i) in &placed {
                decisions.push(Decision::Bind {
                    key: (*key).clone(),
                    uid: pod.uid.clone(),
                    node: scratch[*i].name.clone(),
                });
            }
            for (key, pod) in members
                .iter()
                .filter(|(k, _)| !placed.iter().any(|(pk, _, _)| pk == k))
            {
                decisions.push(Decision::Unschedulable {
                    key: (*key).clone(),
                    uid: pod.uid.clone(),
                    message: last_reason.clone(),
                });
            }
        } else {
            let message = format!(
                "pod group \"{}\": {} of minMember {} pods can be scheduled{}",
                group.1,
                already + placed.len() as i64,
                min_member,
                if last_reason.is_empty() {
                    String::new()
                } else {
                    format!("; {last_reason}")
                }
            );
            for (key, pod) in members {
                decisions.push(Decision::Unschedulable {
                    key: key.clone(),
                    uid: pod.uid.clone(),
                    message: message.clone(),
                });
            }
        }
    }
}

#[derive(Debug)]
enum Decision {
    Bind {
        key: Key,
        uid: String,
        node: String,
    },
    Unschedulable {
        key: Key,
        uid: String,
        message: String,
    },
}

/// Runs the scheduler of `cluster` until the cluster shuts down.
pub async fn run(cluster: Arc<Cluster>) {
    let mut shutdown = cluster.shutdown.clone();
    'resync: loop {
        let (objects, mut events) = cluster.store.subscribe(&[NODES, POD_GROUPS, PODS]);
        let mut state = State::default();
        for (id, obj) in &objects {
            state.observe(id, EventKind::Added, obj);
        }
        state.retry_all = true;
        loop {
            apply(&cluster, state.plan());
            let first = tokio::select! {
                e = events.recv() => e,
                _ = shutdown.changed() => return,
            };
            let mut next = Some(first);
            while let Some(received) = next {
                match received {
                    Ok(event) => observe(&mut state, &event),
                    Err(RecvError::Lagged(_)) => continue 'resync,
                    Err(RecvError::Closed) => return,
                }
                next = match events.try_recv() {
                    Ok(e) => Some(Ok(e)),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) => {
                        Some(Err(RecvError::Lagged(n)))
                    }
                    Err(_) => None,
                };
            }
        }
    }
}

fn observe(state: &mut State, event: &Event) {
    state.observe(&event.type_id, event.kind, &event.object);
}

fn apply(cluster: &Cluster, decisions: Vec<Decision>) {
    let Some(pods) = cluster.store.resource_type("", "pods") else {
        return;
    };
    for decision in decisions {
        let (key, uid, manager) = match &decision {
            Decision::Bind { key, uid, .. } => (key, uid, DEFAULT_SCHEDULER),
            Decision::Unschedulable { key, uid, .. } => (key, uid, DEFAULT_SCHEDULER),
        };
        let write = WriteMeta {
            manager: manager.into(),
            now: now(),
            dry_run: false,
        };
        let topology = match &decision {
            Decision::Bind { node, .. } => topology_labels(cluster, node),
            Decision::Unschedulable { .. } => Vec::new(),
        };
        let change = |mut pod: Value| -> super::error::ApiResult<Value> {
            if text(&pod, "/metadata/uid") != *uid || !text(&pod, "/spec/nodeName").is_empty() {
                return Ok(pod);
            }
            let condition = match &decision {
                Decision::Bind { node, .. } => {
                    pod["spec"]["nodeName"] = json!(node);
                    if !topology.is_empty() && !pod["metadata"]["labels"].is_object() {
                        pod["metadata"]["labels"] = json!({});
                    }
                    for (key, value) in &topology {
                        pod["metadata"]["labels"][key] = json!(value);
                    }
                    json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": write.now})
                }
                // The generation of the pod it judged, as kube-scheduler writes it.
                Decision::Unschedulable { message, .. } => json!({
                    "type": "PodScheduled", "status": "False", "lastProbeTime": null, "lastTransitionTime": write.now,
                    "reason": "Unschedulable", "message": message,
                    "observedGeneration": pod.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
                }),
            };
            set_condition(&mut pod, condition);
            Ok(pod)
        };
        // The pod may be gone meanwhile; the next event corrects the view.
        let _ = cluster.store.update(
            &pods,
            &key.0,
            &key.1,
            Scope::Whole,
            Change::Patch(&change),
            &write,
        );
    }
}

/// The node's zone and region labels, which kube-apiserver's PodTopologyLabels
/// admission copies onto a pod when it is bound (on by default since 1.35).
fn topology_labels(cluster: &Cluster, node: &str) -> Vec<(String, String)> {
    let Some(nodes) = cluster.store.resource_type("", "nodes") else {
        return Vec::new();
    };
    let Ok(node) = cluster.store.get(&nodes, "", node) else {
        return Vec::new();
    };
    [
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
    ]
    .into_iter()
    .filter_map(|key| {
        let value = node
            .value()
            .pointer("/metadata/labels")?
            .get(key)?
            .as_str()?
            .to_string();
        Some((key.to_string(), value))
    })
    .collect()
}

/// Replaces (or adds) the pod condition of the same type, keeping its
/// lastTransitionTime when the status stays the same.
pub fn set_condition(pod: &mut Value, condition: Value) {
    if !pod.get("status").is_some_and(Value::is_object) {
        pod["status"] = json!({});
    }
    let conditions = pod["status"]
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = conditions {
        let mut condition = condition;
        if let Some(existing) = list.iter().find(|c| c.get("type") == condition.get("type"))
            && existing.get("status") == condition.get("status")
            && let Some(since) = existing.get("lastTransitionTime")
        {
            // The status did not change, so neither does its transition time.
            condition["lastTransitionTime"] = since.clone();
        }
        list.retain(|c| c.get("type") != condition.get("type"));
        list.push(condition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: i64) -> NodeState {
        NodeState {
            name: name.into(),
            allocatable: [
                ("cpu".to_string(), 8000),
                ("memory".to_string(), 1 << 40),
                ("nvidia.com/gpu".to_string(), gpus * 1000),
                ("pods".to_string(), 110_000),
            ]
            .into(),
            ready: true,
            ..Default::default()
        }
    }

    fn req(cpu: i64, gpus: i64) -> Resources {
        [
            ("cpu".to_string(), cpu * 1000),
            ("nvidia.com/gpu".to_string(), gpus * 1000),
            ("pods".to_string(), 1000),
        ]
        .into()
    }

    #[test]
    fn picks_the_least_allocated_node_that_fits() {
        let mut busy = node("a", 4);
        busy.add(&req(6, 0), 1);
        let nodes = vec![busy, node("b", 4)];
        assert_eq!(pick_node(&req(1, 1), &BTreeMap::new(), &nodes), Ok(1));
    }

    #[test]
    fn reports_upstream_style_reasons() {
        // Messages of kube-scheduler v1.37 on a real cluster (the
        // simulator's known differences, docs/src/testing/simulated-clusters.md,
        // have none for these).
        let nodes = vec![node("a", 4), node("b", 4), node("c", 4), node("d", 4)];
        assert_eq!(
            pick_node(&req(1, 8), &BTreeMap::new(), &nodes),
            Err("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.".to_string())
        );
        let full: Vec<NodeState> = nodes
            .iter()
            .cloned()
            .map(|mut n| {
                n.add(&req(1, 4), 1);
                n
            })
            .collect();
        assert_eq!(
            pick_node(&req(1, 1), &BTreeMap::new(), &full),
            Err("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.".to_string())
        );
        // One unresolvable resource makes the node's verdict unresolvable.
        assert_eq!(
            pick_node(&req(40, 1), &BTreeMap::new(), &full),
            Err("0/4 nodes are available: 4 Insufficient cpu, 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.".to_string())
        );
        let mut zoned = full.clone();
        for n in &mut zoned[..2] {
            n.labels.insert("zone".into(), "a".into());
        }
        let selector: BTreeMap<String, String> = [("zone".to_string(), "a".to_string())].into();
        assert_eq!(
            pick_node(&req(1, 1), &selector, &zoned),
            Err("0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.".to_string())
        );
        // Sorted as formatted strings: the counts come first.
        let mut cordoned = full.clone();
        cordoned[3].unschedulable = true;
        assert_eq!(
            pick_node(&req(1, 2), &BTreeMap::new(), &cordoned),
            Err("0/4 nodes are available: 1 node(s) were unschedulable, 3 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.".to_string())
        );
        assert_eq!(
            pick_node(&req(1, 1), &BTreeMap::new(), &[]),
            Err("no nodes available to schedule pods".to_string())
        );
    }

    #[test]
    fn honours_node_selector() {
        let mut labelled = node("b", 1);
        labelled.labels.insert("zone".into(), "z1".into());
        let nodes = vec![node("a", 1), labelled];
        let selector: BTreeMap<String, String> = [("zone".to_string(), "z1".to_string())].into();
        assert_eq!(pick_node(&req(1, 0), &selector, &nodes), Ok(1));
        let selector: BTreeMap<String, String> = [("zone".to_string(), "z2".to_string())].into();
        assert_eq!(
            pick_node(&req(1, 0), &selector, &nodes),
            Err(
                "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
                    .to_string()
            )
        );
    }

    fn pending(state: &mut State, name: &str, gpus: i64, gang: Option<&str>, order: u64) {
        let key = ("ns".to_string(), name.to_string());
        state.pending.insert(
            key.clone(),
            PendingPod {
                uid: name.into(),
                order,
                requests: req(1, gpus),
                selector: BTreeMap::new(),
                gang: gang.map(str::to_string),
                message: None,
            },
        );
        state.fresh.push(key);
    }

    #[test]
    fn gang_binds_all_or_nothing() {
        let mut state = State::default();
        state.nodes.insert("a".into(), node("a", 4));
        state.groups.insert(("ns".into(), "g".into()), 3);
        for (i, name) in ["p0", "p1", "p2"].iter().enumerate() {
            pending(&mut state, name, 2, Some("g"), i as u64);
        }
        let decisions = state.plan();
        assert_eq!(
            decisions
                .iter()
                .filter(|d| matches!(d, Decision::Bind { .. }))
                .count(),
            0,
            "only 2 of 3 fit: nothing binds"
        );
        assert!(decisions.iter().all(|d| matches!(d, Decision::Unschedulable { message, .. } if message.starts_with("pod group \"g\": 2 of minMember 3"))));
        state.nodes.insert("b".into(), node("b", 4));
        state.retry_all = true;
        let decisions = state.plan();
        assert_eq!(
            decisions
                .iter()
                .filter(|d| matches!(d, Decision::Bind { .. }))
                .count(),
            3,
            "with room for all, all bind"
        );
    }

    #[test]
    fn unschedulable_message_is_written_once() {
        let mut state = State::default();
        state.nodes.insert("a".into(), node("a", 1));
        pending(&mut state, "big", 8, None, 0);
        assert_eq!(state.plan().len(), 1);
        state.retry_all = true;
        assert!(state.plan().is_empty(), "same message, no second write");
    }
}
