//! Placement: which cluster each replica of a job runs on, from the job's
//! `spec.scheduler.federation` policy and the free capacity of the clusters.
//! Pure: the inputs are snapshots, the output a decision or the reasons,
//! cluster by cluster, why there is none.
//!
//! - Eligibility: Ready, not `unschedulable`, matched by `clusterSelector`,
//!   listed in `clusterNames` (when given), positive weight (Weighted).
//! - Capacity is checked per node (first fit, largest replicas first), so a
//!   replica is only placed where some node can hold it.
//! - Strategies: `Pack` uses the fewest clusters — one if any fits the whole
//!   job (best fit: least GPU, then cpu, left over), else the roomiest first —
//!   and moves a ps next to workers when there is room; `Spread` deals each
//!   replica type round-robin over the eligible clusters; `Weighted` splits
//!   the replicas in proportion to `weights` (largest remainder).
//! - `allowSplit: false` keeps the whole job on one cluster.
//! - All or nothing: either every replica has a cluster or none does.
//! - The [`Ledger`] holds capacity promised to placed jobs whose pods the
//!   clusters do not show yet, so concurrent placements never over-commit.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{FederationStrategy, ReplicaKey, ReplicaType, TensorFlowTrainingJob};
use crate::capacity;

/// Resource amounts in milli-units, by resource name.
pub use crate::capacity::Resources;

pub const GPU: &str = "nvidia.com/gpu";

/// One replica's needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    pub key: ReplicaKey,
    pub requests: Resources,
}

/// A cluster as placement sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterState {
    pub name: String,
    /// A member cluster (not home).
    pub member: bool,
    /// What pods placed here may ask for (members; home's own admission
    /// governs home).
    pub pod_policy: crate::api::PodPolicy,
    pub labels: BTreeMap<String, String>,
    /// The Pod Security level each namespace with a
    /// `pod-security.kubernetes.io/enforce` label enforces (members).
    pub pod_security: BTreeMap<String, crate::api::PodSecurityLevel>,
    pub ready: bool,
    pub unschedulable: bool,
    /// Free capacity of each schedulable node.
    pub nodes: Vec<Resources>,
}

impl ClusterState {
    fn free_total(&self, resource: &str) -> i64 {
        self.nodes
            .iter()
            .map(|n| n.get(resource).copied().unwrap_or(0))
            .sum()
    }
}

/// Namespaces of a member that are its own, or the controller's: no job's
/// replicas land there, whatever the job's namespace on home.
pub const SYSTEM_NAMESPACES: [&str; 4] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    crate::api::SECRETS_NAMESPACE,
];

/// The job's placement policy (`spec.scheduler.federation`, defaults applied).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// The job's namespace, on home and on every member.
    pub namespace: String,
    /// The job's namespace is a member's system namespace: members may not
    /// run it.
    pub system_namespace: Option<String>,
    /// What the job's pods ask of a cluster beyond capacity.
    pub privileges: crate::isolation::Privileges,
    pub strategy: FederationStrategy,
    pub selector: Option<LabelSelector>,
    pub names: Vec<String>,
    pub weights: BTreeMap<String, i64>,
    pub allow_split: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            namespace: String::new(),
            system_namespace: None,
            privileges: Default::default(),
            strategy: FederationStrategy::Pack,
            selector: None,
            names: Vec::new(),
            weights: BTreeMap::new(),
            allow_split: true,
        }
    }
}

impl Policy {
    /// The policy of a job; unknown strategies (rejected by validation) fall back to Pack.
    pub fn of_job(job: &TensorFlowTrainingJob) -> Policy {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let system_namespace = SYSTEM_NAMESPACES
            .contains(&namespace.as_str())
            .then(|| namespace.clone());
        let mut privileges = crate::isolation::Privileges::default();
        for spec in &job.spec.replica_specs {
            if let Some(pod) = spec.template.parse().ok().and_then(|t| t.spec) {
                privileges.add(&pod);
            }
        }
        let Some(f) = job.spec.federation() else {
            return Policy {
                namespace,
                system_namespace,
                privileges,
                ..Policy::default()
            };
        };
        Policy {
            namespace,
            system_namespace,
            privileges,
            strategy: FederationStrategy::parse(&f.strategy).unwrap_or(FederationStrategy::Pack),
            selector: f.cluster_selector.clone(),
            names: f.cluster_names.clone(),
            weights: f
                .weights
                .iter()
                .map(|(k, v)| (k.clone(), i64::from(*v)))
                .collect(),
            allow_split: f.allow_split,
        }
    }
}

/// Every replica's requests, from its template (limits standing in for
/// missing requests, as the scheduler counts them).
pub fn demands(job: &TensorFlowTrainingJob) -> Vec<Demand> {
    job.spec
        .replica_keys()
        .into_iter()
        .map(|key| {
            let spec = job
                .spec
                .replica_spec(key.replica_type)
                .and_then(|s| s.template.parse().ok())
                .and_then(|t| t.spec);
            let pod = k8s_openapi::api::core::v1::Pod {
                spec,
                ..Default::default()
            };
            Demand {
                key,
                requests: capacity::pod_requests(&pod),
            }
        })
        .collect()
}

/// Replica → cluster name.
pub type Assignment = BTreeMap<ReplicaKey, String>;

/// Why a job cannot be placed now, cluster by cluster.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Unplaceable {
    pub reasons: BTreeMap<String, String>,
    /// How many clusters were eligible (their capacity fell short).
    pub eligible: usize,
}

impl Unplaceable {
    fn describe(&self) -> String {
        if self.reasons.is_empty() {
            return "no cluster is registered".into();
        }
        self.reasons
            .iter()
            .map(|(c, r)| format!("{c}: {r}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Whether a cluster's labels satisfy a metav1 LabelSelector.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    exact && expressions
}

fn fits(requests: &Resources, free: &Resources) -> bool {
    requests
        .iter()
        .all(|(r, need)| *need <= 0 || free.get(r).copied().unwrap_or(0) >= *need)
}

fn take(free: &mut Resources, requests: &Resources) {
    for (r, need) in requests {
        *free.entry(r.clone()).or_default() -= need;
    }
}

/// The biggest replicas first (GPUs, then cpu, then memory) make first fit tight.
fn by_size_desc<'a>(demands: impl Iterator<Item = &'a Demand>) -> Vec<&'a Demand> {
    let mut sorted: Vec<&Demand> = demands.collect();
    let size = |d: &Demand| {
        (
            d.requests.get(GPU).copied().unwrap_or(0),
            d.requests.get("cpu").copied().unwrap_or(0),
            d.requests.get("memory").copied().unwrap_or(0),
        )
    };
    sorted.sort_by_key(|d| std::cmp::Reverse(size(d)));
    sorted
}

/// First-fit of `demands` onto `nodes` (consumed on success); on failure,
/// why the cluster cannot take them.
fn pack_onto(nodes: &mut [Resources], demands: &[&Demand]) -> Result<(), String> {
    let mut trial = nodes.to_vec();
    for d in by_size_desc(demands.iter().copied()) {
        match trial.iter_mut().find(|n| fits(&d.requests, n)) {
            Some(node) => take(node, &d.requests),
            None => return Err(shortfall(nodes, demands, d)),
        }
    }
    nodes.clone_from_slice(&trial);
    Ok(())
}

/// The reason a set of replicas does not fit: a resource short in total,
/// or a replica no single node can hold.
fn shortfall(nodes: &[Resources], demands: &[&Demand], stuck: &Demand) -> String {
    let mut need: Resources = BTreeMap::new();
    for d in demands {
        for (r, v) in &d.requests {
            *need.entry(r.clone()).or_default() += v;
        }
    }
    for (r, total) in &need {
        let free: i64 = nodes.iter().map(|n| n.get(r).copied().unwrap_or(0)).sum();
        if *total > free && r != "pods" {
            return format!(
                "insufficient {r} (need {}, free {})",
                show(r, *total),
                show(r, free)
            );
        }
    }
    format!("no node can hold replica {} as a whole", stuck.key)
}

/// A milli-unit amount in the unit people read: cores, GiB, GPUs.
fn show(resource: &str, milli: i64) -> String {
    match resource {
        "memory" => format!("{:.1}Gi", milli as f64 / 1000.0 / (1u64 << 30) as f64),
        "cpu" if milli % 1000 != 0 => format!("{milli}m"),
        _ => format!("{}", milli / 1000),
    }
}

/// Eligible clusters, and the reasons the others are passed over.
fn eligible<'a>(
    clusters: &'a [ClusterState],
    policy: &Policy,
    reasons: &mut BTreeMap<String, String>,
) -> Vec<&'a ClusterState> {
    let mut out = Vec::new();
    for c in clusters {
        let refused = c
            .member
            .then(|| {
                crate::isolation::namespace_refused(&c.pod_policy, &policy.namespace)
                    .or_else(|| policy.privileges.refused_by(&c.pod_policy))
                    .or_else(|| pod_security_refusal(c, policy))
            })
            .flatten();
        let reason = if c.member && policy.system_namespace.is_some() {
            Some("the job's namespace is a system namespace there")
        } else if let Some(refused) = &refused {
            Some(refused.as_str())
        } else if !policy.names.is_empty() && !policy.names.contains(&c.name) {
            Some("not in clusterNames")
        } else if policy
            .selector
            .as_ref()
            .is_some_and(|s| !selector_matches(s, &c.labels))
        {
            Some("not selected by clusterSelector")
        } else if !c.ready {
            Some("not Ready")
        } else if c.unschedulable {
            Some("unschedulable")
        } else if policy.strategy == FederationStrategy::Weighted
            && policy.weights.get(&c.name).copied().unwrap_or(0) <= 0
        {
            Some("no weight")
        } else {
            None
        };
        match reason {
            Some(r) => {
                reasons.insert(c.name.clone(), r.to_string());
            }
            None => out.push(c),
        }
    }
    out
}

/// Why the member's PodSecurity admission would refuse the job's pods in
/// the job's namespace there.
fn pod_security_refusal(c: &ClusterState, policy: &Policy) -> Option<String> {
    let level = c
        .pod_security
        .get(&policy.namespace)
        .copied()
        .unwrap_or(c.pod_policy.default_pod_security);
    let why = policy.privileges.refused_at(level)?;
    Some(format!(
        "namespace {} enforces Pod Security {:?}: {why}",
        policy.namespace,
        level.as_str()
    ))
}

/// What decides whether a job can be placed: its policy and each replica's
/// type and requests, not names or indexes. Jobs of one shape fit or fail
/// alike on the same capacity, so a queue tries one shape once per pass.
pub fn shape(demands: &[Demand], policy: &Policy) -> String {
    let mut replicas: Vec<(ReplicaType, &Resources)> = demands
        .iter()
        .map(|d| (d.key.replica_type, &d.requests))
        .collect();
    replicas.sort();
    format!("{policy:?}{replicas:?}")
}

/// Places every replica or explains why none can be placed.
pub fn place(
    demands: &[Demand],
    clusters: &[ClusterState],
    policy: &Policy,
) -> Result<Assignment, Unplaceable> {
    let mut reasons = BTreeMap::new();
    let candidates = eligible(clusters, policy, &mut reasons);
    let all: Vec<&Demand> = demands.iter().collect();
    let single = |reasons: &mut BTreeMap<String, String>| -> Option<Assignment> {
        let mut best: Option<(&ClusterState, (i64, i64))> = None;
        for c in &candidates {
            let mut nodes = c.nodes.clone();
            match pack_onto(&mut nodes, &all) {
                Ok(()) => {
                    let left = |r: &str| {
                        nodes
                            .iter()
                            .map(|n| n.get(r).copied().unwrap_or(0))
                            .sum::<i64>()
                    };
                    let score = (left(GPU), left("cpu"));
                    if best.is_none_or(|(_, s)| score < s) {
                        best = Some((c, score));
                    }
                }
                Err(why) => {
                    reasons.insert(c.name.clone(), why);
                }
            }
        }
        best.map(|(c, _)| demands.iter().map(|d| (d.key, c.name.clone())).collect())
    };
    let placed = match (policy.strategy, policy.allow_split) {
        (_, false) | (FederationStrategy::Pack, true) => single(&mut reasons).or_else(|| {
            if policy.allow_split {
                pack_split(demands, &candidates)
            } else {
                None
            }
        }),
        (FederationStrategy::Spread, true) => {
            // Dealt over the clusters in name order; when that does not fit,
            // over the roomiest first, so a job never waits while clusters
            // it could spread over have room.
            let mut roomiest = candidates.clone();
            roomiest.sort_by_key(|c| {
                (
                    std::cmp::Reverse(c.free_total(GPU)),
                    std::cmp::Reverse(c.free_total("cpu")),
                )
            });
            deal(
                demands,
                &candidates,
                &spread_quota(demands, &candidates),
                &mut reasons,
            )
            .or_else(|| {
                deal(
                    demands,
                    &roomiest,
                    &spread_quota(demands, &roomiest),
                    &mut BTreeMap::new(),
                )
            })
        }
        (FederationStrategy::Weighted, true) => deal(
            demands,
            &candidates,
            &weighted_quota(demands.len(), &candidates, &policy.weights),
            &mut reasons,
        ),
    };
    placed.ok_or(Unplaceable {
        reasons,
        eligible: candidates.len(),
    })
}

/// Why each cluster the assignment does not use was passed over.
pub fn passed_over(
    demands: &[Demand],
    clusters: &[ClusterState],
    policy: &Policy,
    assignment: &Assignment,
) -> BTreeMap<String, String> {
    let mut reasons = BTreeMap::new();
    let candidates = eligible(clusters, policy, &mut reasons);
    let all: Vec<&Demand> = demands.iter().collect();
    for c in candidates {
        if assignment.values().any(|used| *used == c.name) {
            continue;
        }
        let reason = match pack_onto(&mut c.nodes.clone(), &all) {
            Err(why) => why,
            Ok(()) => "could hold the job, but the chosen placement fits better".to_string(),
        };
        reasons.insert(c.name.clone(), reason);
    }
    reasons
}

/// Pack across clusters: roomiest first, each taking what fits; then a ps
/// alone on a cluster moves next to workers when there is room.
fn pack_split(demands: &[Demand], candidates: &[&ClusterState]) -> Option<Assignment> {
    let mut order: Vec<&ClusterState> = candidates.to_vec();
    order.sort_by_key(|c| std::cmp::Reverse((c.free_total(GPU), c.free_total("cpu"))));
    let mut free: BTreeMap<&str, Vec<Resources>> = order
        .iter()
        .map(|c| (c.name.as_str(), c.nodes.clone()))
        .collect();
    let mut assignment = Assignment::new();
    for c in &order {
        let nodes = free.get_mut(c.name.as_str())?;
        for d in by_size_desc(demands.iter().filter(|d| !assignment.contains_key(&d.key))) {
            if let Some(node) = nodes.iter_mut().find(|n| fits(&d.requests, n)) {
                take(node, &d.requests);
                assignment.insert(d.key, c.name.clone());
            }
        }
        if assignment.len() == demands.len() {
            break;
        }
    }
    if assignment.len() < demands.len() {
        return None;
    }
    let computes = |a: &Assignment, cluster: &str| {
        a.iter().any(|(k, c)| {
            c == cluster && matches!(k.replica_type, ReplicaType::Worker | ReplicaType::Chief)
        })
    };
    for d in demands
        .iter()
        .filter(|d| d.key.replica_type == ReplicaType::Ps)
    {
        let here = assignment.get(&d.key).cloned().unwrap_or_default();
        if computes(&assignment, &here) {
            continue;
        }
        let target = order.iter().map(|c| c.name.clone()).find(|c| {
            computes(&assignment, c)
                && free
                    .get(c.as_str())
                    .is_some_and(|ns| ns.iter().any(|n| fits(&d.requests, n)))
        });
        if let Some(target) = target
            && let Some(nodes) = free.get_mut(target.as_str())
            && let Some(node) = nodes.iter_mut().find(|n| fits(&d.requests, n))
        {
            take(node, &d.requests);
            assignment.insert(d.key, target);
        }
    }
    Some(assignment)
}

/// The cluster of each replica for Spread: dealt round-robin in replica
/// order (types in turn), so each type and the totals stay even.
fn spread_quota(demands: &[Demand], candidates: &[&ClusterState]) -> Vec<usize> {
    if candidates.is_empty() {
        return Vec::new();
    }
    (0..demands.len()).map(|i| i % candidates.len()).collect()
}

/// The cluster of each replica for Weighted: counts in proportion to the
/// weights (largest remainder), filled in replica order.
fn weighted_quota(
    total: usize,
    candidates: &[&ClusterState],
    weights: &BTreeMap<String, i64>,
) -> Vec<usize> {
    let w: Vec<i64> = candidates
        .iter()
        .map(|c| weights.get(&c.name).copied().unwrap_or(0))
        .collect();
    let sum: i64 = w.iter().sum();
    if sum <= 0 {
        return Vec::new();
    }
    let exact: Vec<f64> = w
        .iter()
        .map(|x| total as f64 * *x as f64 / sum as f64)
        .collect();
    let mut counts: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|a, b| {
        (exact[*b] - exact[*b].floor())
            .total_cmp(&(exact[*a] - exact[*a].floor()))
            .then(a.cmp(b))
    });
    let mut missing = total - counts.iter().sum::<usize>();
    for i in order {
        if missing == 0 {
            break;
        }
        counts[i] += 1;
        missing -= 1;
    }
    counts
        .iter()
        .enumerate()
        .flat_map(|(i, n)| std::iter::repeat_n(i, *n))
        .collect()
}

/// Assigns each replica to the candidate its quota slot names (replica
/// order) and checks each cluster's share fits its nodes.
fn deal(
    demands: &[Demand],
    candidates: &[&ClusterState],
    quota: &[usize],
    reasons: &mut BTreeMap<String, String>,
) -> Option<Assignment> {
    if quota.len() != demands.len() {
        return None;
    }
    let mut shares: BTreeMap<usize, Vec<&Demand>> = BTreeMap::new();
    for (d, cluster) in demands.iter().zip(quota) {
        shares.entry(*cluster).or_default().push(d);
    }
    let mut ok = true;
    for (i, share) in &shares {
        let c = candidates[*i];
        let mut nodes = c.nodes.clone();
        if let Err(why) = pack_onto(&mut nodes, share) {
            reasons.insert(c.name.clone(), why);
            ok = false;
        }
    }
    ok.then(|| {
        shares
            .iter()
            .flat_map(|(i, share)| share.iter().map(|d| (d.key, candidates[*i].name.clone())))
            .collect()
    })
}

/// Capacity promised to placed jobs whose pods the clusters do not show yet.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    held: BTreeMap<String, Vec<(String, Resources)>>,
}

impl Ledger {
    /// Holds the capacity `assignment` takes, under the job's uid.
    pub fn reserve(&mut self, job: &str, demands: &[Demand], assignment: &Assignment) {
        let entries = demands
            .iter()
            .filter_map(|d| Some((assignment.get(&d.key)?.clone(), d.requests.clone())))
            .collect();
        self.held.insert(job.to_string(), entries);
    }

    /// The job's pods are visible (or the job ended): its hold is no longer needed.
    pub fn release(&mut self, job: &str) {
        self.held.remove(job);
    }

    /// The clusters with every hold taken out of their free capacity.
    pub fn apply(&self, clusters: &[ClusterState]) -> Vec<ClusterState> {
        let mut out = clusters.to_vec();
        for (cluster, requests) in self.held.values().flatten() {
            if let Some(c) = out.iter_mut().find(|c| &c.name == cluster) {
                match c.nodes.iter_mut().find(|n| fits(requests, n)) {
                    Some(node) => take(node, requests),
                    // No node holds it (the snapshot moved): charge the roomiest.
                    None => {
                        if let Some(node) = c
                            .nodes
                            .iter_mut()
                            .max_by_key(|n| n.get(GPU).copied().unwrap_or(0))
                        {
                            take(node, requests);
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpu: i64, gpu: i64) -> Resources {
        BTreeMap::from([
            ("cpu".to_string(), cpu * 1000),
            (GPU.to_string(), gpu * 1000),
        ])
    }

    fn cluster(name: &str, nodes: usize, gpus_per_node: i64) -> ClusterState {
        ClusterState {
            name: name.into(),
            ready: true,
            nodes: vec![res(32, gpus_per_node); nodes],
            ..Default::default()
        }
    }

    fn job(workers: i32, ps: i32, gpus_per_worker: i64) -> Vec<Demand> {
        let mut d = vec![Demand {
            key: ReplicaKey::new(ReplicaType::Chief, 0),
            requests: res(1, gpus_per_worker),
        }];
        d.extend((0..workers).map(|i| Demand {
            key: ReplicaKey::new(ReplicaType::Worker, i),
            requests: res(1, gpus_per_worker),
        }));
        d.extend((0..ps).map(|i| Demand {
            key: ReplicaKey::new(ReplicaType::Ps, i),
            requests: res(1, 0),
        }));
        d
    }

    fn per_cluster(a: &Assignment) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for c in a.values() {
            *counts.entry(c.clone()).or_default() += 1;
        }
        counts
    }

    #[test]
    fn demands_and_policy_come_from_the_job() {
        let job: TensorFlowTrainingJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob", "metadata": {"name": "j"},
            "spec": {"scheduler": {"federation": {"strategy": "Spread", "allowSplit": false}}, "replicaSpecs": [{"type": "worker", "replicas": 2, "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"cpu": "500m"}}}]}}}]},
        }))
        .expect("valid job");
        let d = demands(&job);
        assert_eq!(d.len(), 2);
        assert_eq!(d[1].key, ReplicaKey::new(ReplicaType::Worker, 1));
        assert_eq!((d[0].requests[GPU], d[0].requests["cpu"]), (2000, 500));
        let policy = Policy::of_job(&job);
        assert_eq!(
            (policy.strategy, policy.allow_split),
            (FederationStrategy::Spread, false)
        );
    }

    #[test]
    fn pack_puts_a_job_that_fits_on_the_tightest_single_cluster() {
        let clusters = vec![
            cluster("home", 4, 4),
            cluster("member-1", 2, 4),
            cluster("member-2", 1, 4),
        ];
        let a = place(&job(3, 1, 1), &clusters, &Policy::default()).expect("fits");
        assert_eq!(
            per_cluster(&a),
            BTreeMap::from([("member-2".to_string(), 5)]),
            "4 GPUs needed: member-2 is the best fit"
        );
    }

    #[test]
    fn pack_splits_over_the_fewest_clusters_and_keeps_ps_with_workers() {
        let clusters = vec![
            cluster("home", 1, 4),
            cluster("member-1", 2, 4),
            cluster("member-2", 1, 4),
        ];
        // 1 chief + 9 workers with 1 GPU each = 10 GPUs; 8 fit on member-1, the rest elsewhere.
        let a = place(&job(9, 2, 1), &clusters, &Policy::default()).expect("fits when split");
        let counts = per_cluster(&a);
        assert_eq!(counts.len(), 2, "two clusters suffice: {counts:?}");
        assert_eq!(
            counts.get("member-1"),
            Some(&10),
            "the roomiest takes 8 GPU replicas and both ps: {counts:?}"
        );
        for i in 0..2 {
            let ps = a
                .get(&ReplicaKey::new(ReplicaType::Ps, i))
                .expect("ps placed");
            assert!(
                a.iter()
                    .any(|(k, c)| c == ps && k.replica_type == ReplicaType::Worker),
                "ps {i} shares a cluster with workers"
            );
        }
    }

    #[test]
    fn no_split_explains_cluster_by_cluster() {
        let mut down = cluster("member-2", 4, 4);
        down.ready = false;
        let clusters = vec![cluster("member-1", 1, 4), down];
        let policy = Policy {
            allow_split: false,
            ..Policy::default()
        };
        let err = place(&job(7, 0, 1), &clusters, &policy).expect_err("8 GPUs fit nowhere");
        assert_eq!(
            err.to_string(),
            "member-1: insufficient nvidia.com/gpu (need 8, free 4); member-2: not Ready"
        );
    }

    #[test]
    fn a_replica_no_node_can_hold_is_reported() {
        let clusters = vec![cluster("member-1", 4, 2)];
        let err =
            place(&job(0, 0, 4), &clusters, &Policy::default()).expect_err("4 GPUs on one node");
        assert_eq!(
            err.to_string(),
            "member-1: no node can hold replica chief-0 as a whole"
        );
    }

    #[test]
    fn spread_deals_replicas_evenly() {
        let clusters = vec![cluster("home", 4, 4), cluster("member-1", 4, 4)];
        let policy = Policy {
            strategy: FederationStrategy::Spread,
            ..Policy::default()
        };
        let a = place(&job(3, 0, 1), &clusters, &policy).expect("fits");
        assert_eq!(
            per_cluster(&a),
            BTreeMap::from([("home".to_string(), 2), ("member-1".to_string(), 2)])
        );
    }

    #[test]
    fn spread_uses_the_clusters_with_room_when_the_first_ones_are_full() {
        let clusters = vec![
            cluster("home", 1, 0),
            cluster("member-1", 1, 0),
            cluster("member-2", 4, 4),
            cluster("member-3", 4, 4),
        ];
        let policy = Policy {
            strategy: FederationStrategy::Spread,
            ..Policy::default()
        };
        // A chief and one worker, a GPU each: dealt in name order they would
        // go to the full home and member-1.
        let a = place(&job(1, 0, 1), &clusters, &policy).expect("members 2 and 3 have room");
        assert_eq!(
            per_cluster(&a),
            BTreeMap::from([("member-2".to_string(), 1), ("member-3".to_string(), 1)])
        );
    }

    #[test]
    fn weighted_follows_the_weights() {
        let clusters = vec![
            cluster("home", 4, 4),
            cluster("member-1", 4, 4),
            cluster("member-2", 4, 4),
        ];
        let weights = BTreeMap::from([("member-1".to_string(), 3), ("member-2".to_string(), 1)]);
        let policy = Policy {
            strategy: FederationStrategy::Weighted,
            weights,
            ..Policy::default()
        };
        let a = place(&job(7, 0, 1), &clusters, &policy).expect("fits");
        assert_eq!(
            per_cluster(&a),
            BTreeMap::from([("member-1".to_string(), 6), ("member-2".to_string(), 2)])
        );
    }

    #[test]
    fn eligibility_honours_names_selector_and_unschedulable() {
        let mut gpu = cluster("member-1", 1, 4);
        gpu.labels.insert("tier".into(), "gpu".into());
        let mut cordoned = cluster("member-2", 4, 4);
        cordoned.unschedulable = true;
        let clusters = vec![cluster("home", 4, 4), gpu, cordoned];
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("tier".to_string(), "gpu".to_string())])),
            ..Default::default()
        };
        let policy = Policy {
            selector: Some(selector),
            ..Policy::default()
        };
        let a = place(&job(1, 0, 1), &clusters, &policy).expect("member-1 fits");
        assert!(a.values().all(|c| c == "member-1"));
        let policy = Policy {
            names: vec!["member-2".into()],
            ..Policy::default()
        };
        let err =
            place(&job(1, 0, 1), &clusters, &policy).expect_err("only a cordoned cluster is named");
        assert_eq!(
            err.reasons.get("member-2").map(String::as_str),
            Some("unschedulable")
        );
        assert_eq!(
            err.reasons.get("home").map(String::as_str),
            Some("not in clusterNames")
        );
    }

    #[test]
    fn members_run_only_what_their_namespace_pod_security_admits() {
        use crate::api::PodSecurityLevel;
        let member = |name: &str, level: Option<PodSecurityLevel>| {
            let mut c = cluster(name, 4, 4);
            c.member = true;
            if let Some(level) = level {
                c.pod_security.insert("ml".into(), level);
            }
            c
        };
        let mut strict_default = member("member-3", None);
        strict_default.pod_policy.default_pod_security = PodSecurityLevel::Restricted;
        let clusters = vec![
            member("member-1", Some(PodSecurityLevel::Restricted)),
            member("member-2", Some(PodSecurityLevel::Baseline)),
            strict_default,
        ];
        let mut privileges = crate::isolation::Privileges::default();
        privileges.add(
            &serde_json::from_value(serde_json::json!({"containers": [{"name": "tensorflow"}]}))
                .expect("a pod spec"),
        );
        let policy = Policy {
            namespace: "ml".into(),
            privileges,
            ..Policy::default()
        };
        let a = place(&job(2, 0, 1), &clusters, &policy).expect("member-2 admits it");
        assert!(a.values().all(|c| c == "member-2"), "{a:?}");
        let err = place(&job(9, 0, 2), &clusters, &policy).expect_err("too big for member-2");
        let why = "enforces Pod Security \"restricted\": container tensorflow must set \
                   securityContext.allowPrivilegeEscalation=false";
        assert_eq!(
            err.reasons.get("member-1").map(String::as_str),
            Some(format!("namespace ml {why}").as_str())
        );
        assert_eq!(
            err.reasons.get("member-3").map(String::as_str),
            Some(format!("namespace ml {why}").as_str()),
            "no label: the member's default"
        );
    }

    #[test]
    fn members_run_only_the_namespaces_they_allow() {
        let mut open = cluster("member-1", 4, 4);
        open.member = true;
        let mut listing = cluster("member-2", 4, 4);
        listing.member = true;
        listing.pod_policy.allowed_namespaces = vec!["research".into()];
        let clusters = vec![open, listing];
        let in_namespace = |namespace: &str| Policy {
            namespace: namespace.into(),
            names: vec!["member-2".into()],
            ..Policy::default()
        };
        let err = place(&job(1, 0, 1), &clusters, &in_namespace("ml")).expect_err("not allowed");
        assert_eq!(
            err.reasons.get("member-2").map(String::as_str),
            Some("namespace ml is not allowed (spec.podPolicy.allowedNamespaces)")
        );
        let a = place(&job(1, 0, 1), &clusters, &in_namespace("research")).expect("allowed");
        assert!(a.values().all(|c| c == "member-2"), "{a:?}");
    }

    #[test]
    fn members_never_run_jobs_of_a_system_namespace() {
        let mut member = cluster("member-1", 4, 4);
        member.member = true;
        let clusters = vec![cluster("home", 1, 4), member];
        let policy = Policy {
            system_namespace: Some("kube-system".into()),
            ..Policy::default()
        };
        let err = place(&job(1, 0, 4), &clusters, &policy).expect_err("home is too small");
        assert_eq!(
            err.reasons.get("member-1").map(String::as_str),
            Some("the job's namespace is a system namespace there")
        );
        let a = place(&job(0, 0, 4), &clusters, &policy).expect("home fits the chief");
        assert!(a.values().all(|c| c == "home"));
        let job_in = |ns: &str| -> TensorFlowTrainingJob {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
                "metadata": {"name": "j", "namespace": ns}, "spec": {"replicaSpecs": []}}))
            .expect("a job")
        };
        assert_eq!(
            Policy::of_job(&job_in("kube-system"))
                .system_namespace
                .as_deref(),
            Some("kube-system")
        );
        assert_eq!(
            Policy::of_job(&job_in("tfjob-federator"))
                .system_namespace
                .as_deref(),
            Some("tfjob-federator")
        );
        assert_eq!(Policy::of_job(&job_in("ml")).system_namespace, None);
    }

    #[test]
    fn jobs_differing_only_in_names_share_a_shape() {
        let policy = Policy::default();
        let a = job(2, 1, 4);
        let mut b = a.clone();
        b.reverse();
        assert_eq!(shape(&a, &policy), shape(&b, &policy));
        assert_ne!(shape(&a, &policy), shape(&job(2, 1, 2), &policy));
        let spread = Policy {
            strategy: FederationStrategy::Spread,
            ..Policy::default()
        };
        assert_ne!(shape(&a, &policy), shape(&a, &spread));
    }

    #[test]
    fn the_ledger_keeps_concurrent_jobs_from_over_committing() {
        let clusters = vec![cluster("member-1", 1, 4)];
        let first = job(3, 0, 1);
        let a = place(&first, &clusters, &Policy::default()).expect("first fits");
        let mut ledger = Ledger::default();
        ledger.reserve("job-a", &first, &a);
        let err = place(&job(0, 0, 1), &ledger.apply(&clusters), &Policy::default())
            .expect_err("the 4 GPUs are promised");
        assert!(
            err.to_string()
                .contains("insufficient nvidia.com/gpu (need 1, free 0)"),
            "{err}"
        );
        ledger.release("job-a");
        assert!(place(&job(0, 0, 1), &ledger.apply(&clusters), &Policy::default()).is_ok());
    }
}
