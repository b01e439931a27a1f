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
//!   job (best fit: least GPU, then cpu, left over; among clusters whose
//!   room is within a tenth of the best fit's, the roomiest, so that a
//!   burst is spread: see `whole_job_cluster`), else the roomiest first —
//!   and moves a ps next to workers when there is room; `Spread` deals each
//!   replica type round-robin over the eligible clusters (over the roomiest
//!   of them, as many as can take a share, when some are full); `Weighted` splits
//!   the replicas in proportion to `weights` (largest remainder).
//! - `allowSplit: false` keeps the whole job on one cluster.
//! - All or nothing: either every replica has a cluster or none does.
//! - The [`Ledger`] holds capacity promised to placed jobs whose pods the
//!   clusters do not show yet, so concurrent placements never over-commit.
//! - The [`queue::Queue`] orders the jobs waiting for a placement and
//!   decides when each is worth another try.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::api::{
    FailoverScope, FederationStrategy, ReplicaKey, ReplicaType, TensorFlowTrainingJob,
};
use crate::capacity;

mod eligibility;
mod ledger;
pub mod queue;
#[cfg(test)]
mod tests;

use eligibility::eligible;
pub use eligibility::{SYSTEM_NAMESPACES, selector_matches, unreachable_across_clusters};
pub use ledger::{Ledger, PodNames, charge};

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
    /// Replicas here have a cluster-independent address: the MCS name
    /// (`{service}.{namespace}.svc.clusterset.local`) of an exported
    /// Service (members).
    pub stable_addresses: bool,
    /// Why replicas here cannot be reached from other clusters by the
    /// address a split job's `TF_CONFIG` names them with (None: they can).
    /// A job is split only over clusters that can be reached.
    pub unreachable: Option<String>,
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
    /// Clusters that refused this job's pods for good, with why: the job
    /// is placed without them.
    pub excluded: BTreeMap<String, String>,
    /// Only members whose replicas keep their address wherever they run
    /// (`failover: LostReplicas`).
    pub stable_addresses: bool,
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
            excluded: BTreeMap::new(),
            stable_addresses: false,
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
            if let Ok(template) = spec.template.parse()
                && let Some(pod) = &template.spec
            {
                privileges.add(&template.metadata.clone().unwrap_or_default(), pod);
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
            excluded: BTreeMap::new(),
            stable_addresses: job.spec.failover_scope() == FailoverScope::LostReplicas,
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
    /// Names in `clusterNames` that no cluster has (yet).
    pub unknown: Vec<String>,
}

impl Unplaceable {
    /// The job waits for clusters that do not exist, not for capacity: none
    /// was eligible, and some it names are unknown.
    pub fn waits_for_unknown_clusters(&self) -> bool {
        self.eligible == 0 && !self.unknown.is_empty()
    }

    fn describe(&self) -> String {
        if self.reasons.is_empty() {
            return "no cluster is registered".into();
        }
        // Clusters that fail alike are named together (the first few of
        // them), in name order: with a hundred members the message stays
        // short, and stays the same while the reasons do.
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for (cluster, reason) in &self.reasons {
            match groups.iter_mut().find(|(r, _)| r == reason) {
                Some((_, clusters)) => clusters.push(cluster),
                None => groups.push((reason, vec![cluster])),
            }
        }
        groups
            .iter()
            .map(|(reason, clusters)| format!("{}: {reason}", named(clusters)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Clusters by name: all of them up to four, else the first three and how
/// many more.
fn named(clusters: &[&str]) -> String {
    const SHOWN: usize = 3;
    if clusters.len() <= SHOWN + 1 {
        return clusters.join(", ");
    }
    format!(
        "{} and {} more",
        clusters[..SHOWN].join(", "),
        clusters.len() - SHOWN
    )
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

/// First-fit of `demands` onto `nodes`: the nodes' capacity left, or why
/// the cluster cannot take them. The totals are checked first, so a
/// cluster short of a resource costs no copy of its nodes.
fn pack_onto(nodes: &[Resources], demands: &[&Demand]) -> Result<Vec<Resources>, String> {
    if let Some(short) = short_in_total(nodes, demands) {
        return Err(short);
    }
    let mut trial = nodes.to_vec();
    for d in by_size_desc(demands.iter().copied()) {
        match trial.iter_mut().find(|n| fits(&d.requests, n)) {
            Some(node) => take(node, &d.requests),
            None => return Err(format!("no node can hold replica {} as a whole", d.key)),
        }
    }
    Ok(trial)
}

/// The resource the nodes lack in total for `demands`, if any. What is
/// free is left out of the reason: a waiting job hears again only when
/// the reason changes, which free amounts would make it do on every pod
/// that starts or ends.
fn short_in_total(nodes: &[Resources], demands: &[&Demand]) -> Option<String> {
    let mut need: Resources = BTreeMap::new();
    for d in demands {
        for (r, v) in &d.requests {
            *need.entry(r.clone()).or_default() += v;
        }
    }
    need.iter().find_map(|(r, total)| {
        let free: i64 = nodes.iter().map(|n| n.get(r).copied().unwrap_or(0)).sum();
        (*total > free && r != "pods")
            .then(|| format!("insufficient {r} (need {})", show(r, *total)))
    })
}

/// A milli-unit amount in the unit people read: cores, GiB, GPUs.
fn show(resource: &str, milli: i64) -> String {
    match resource {
        "memory" => format!("{:.1}Gi", milli as f64 / 1000.0 / (1u64 << 30) as f64),
        "cpu" if milli % 1000 != 0 => format!("{milli}m"),
        _ => format!("{}", milli / 1000),
    }
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
pub fn place<'a>(
    demands: &[Demand],
    clusters: &'a [ClusterState],
    policy: &Policy,
) -> Result<Assignment, Unplaceable> {
    let mut reasons = BTreeMap::new();
    let candidates = eligible(clusters, policy, &mut reasons);
    // A split job's replicas reach each other by their clusters' address
    // templates: a cluster whose replicas nothing outside it can reach by
    // that name takes a job only whole.
    let splittable: Vec<&ClusterState> = candidates
        .iter()
        .copied()
        .filter(|c| c.unreachable.is_none())
        .collect();
    let all: Vec<&Demand> = demands.iter().collect();
    let single = |reasons: &mut BTreeMap<String, String>| -> Option<Assignment> {
        let cluster = whole_job_cluster(&candidates, demands, &all, reasons)?;
        Some(
            demands
                .iter()
                .map(|d| (d.key, cluster.name.clone()))
                .collect(),
        )
    };
    let placed = match (policy.strategy, policy.allow_split) {
        (_, false) | (FederationStrategy::Pack, true) => single(&mut reasons).or_else(|| {
            if policy.allow_split {
                pack_split(demands, &splittable)
            } else {
                None
            }
        }),
        (FederationStrategy::Spread, true) => {
            // Dealt over the clusters in name order; when that does not fit,
            // over the roomiest first, then over fewer of them (the roomiest
            // k, k as large as fits), so a job never waits while clusters
            // it could spread over have room — a full cluster among them
            // included. Over one cluster (k = 1) the roomiest of all takes
            // the job whole.
            let roomiest_first = |clusters: &[&'a ClusterState]| {
                let mut sorted = clusters.to_vec();
                sorted.sort_by_key(|c| {
                    (
                        std::cmp::Reverse(c.free_total(GPU)),
                        std::cmp::Reverse(c.free_total("cpu")),
                    )
                });
                sorted
            };
            let roomiest = roomiest_first(&splittable);
            deal(
                demands,
                &splittable,
                &spread_quota(demands, &splittable),
                &mut reasons,
            )
            .or_else(|| {
                (2..=roomiest.len()).rev().find_map(|k| {
                    let over = &roomiest[..k];
                    deal(
                        demands,
                        over,
                        &spread_quota(demands, over),
                        &mut BTreeMap::new(),
                    )
                })
            })
            .or_else(|| {
                let over = &roomiest_first(&candidates)[..candidates.len().min(1)];
                deal(
                    demands,
                    over,
                    &spread_quota(demands, over),
                    &mut BTreeMap::new(),
                )
            })
        }
        (FederationStrategy::Weighted, true) => deal(
            demands,
            &splittable,
            &weighted_quota(demands.len(), &splittable, &policy.weights),
            &mut reasons,
        )
        .or_else(|| (splittable.len() < candidates.len()).then(|| single(&mut reasons))?),
    };
    if placed.is_none() && candidates.len() > 1 {
        for c in candidates.iter().filter(|c| c.unreachable.is_some()) {
            let why = c.unreachable.as_deref().unwrap_or_default();
            let reason = match reasons.get(&c.name) {
                Some(short) => format!("{short}; not split onto: {why}"),
                None => format!("not split onto: {why}"),
            };
            reasons.insert(c.name.clone(), reason);
        }
    }
    placed.ok_or_else(|| Unplaceable {
        reasons,
        eligible: candidates.len(),
        unknown: policy
            .names
            .iter()
            .filter(|name| !clusters.iter().any(|c| &c.name == *name))
            .cloned()
            .collect(),
    })
}

/// Clusters whose free room differs by at most 1/`NEAR_FIT_DIVISOR` of
/// the roomier one's, GPUs and cpu alike, fit a whole job equally well.
const NEAR_FIT_DIVISOR: i64 = 10;

/// Free GPUs and cpu in total: the room Pack compares.
fn room(c: &ClusterState) -> (i64, i64) {
    (c.free_total(GPU), c.free_total("cpu"))
}

fn near(a: i64, b: i64) -> bool {
    (a - b).abs().saturating_mul(NEAR_FIT_DIVISOR) <= a.max(b)
}

/// The cluster Pack puts a whole job on, or none (each cluster tried
/// gets its reason).
///
/// Best fit first: the cluster that fits the job with the least left over.
/// What is left is the cluster's free total minus the job's, so the
/// clusters are tried from the least free up and the first that fits is
/// the best: one try per decision when the least free cluster fits, not
/// one per cluster. Clusters with fewer GPUs free than the job needs in
/// all are not tried; their reasons are worked out only if no cluster fits.
///
/// Then the spread of a burst: clusters whose room is near the best fit's
/// (within a tenth of the roomier one's, in GPUs and in cpu) fit the job
/// equally well, and the job goes to the roomiest of them that fits
/// (ties in the candidates' order). Room counts this controller's pods
/// not yet bound and the holds of jobs placed whose pods do not show yet,
/// so a burst of equal jobs on equal clusters alternates between them
/// and no one member's API server and scheduler take it all. Best fit
/// still decides when it matters: a job that fits one cluster goes there;
/// a cluster with more than a tenth more room than the best fit keeps it
/// for a bigger job (a 4-GPU job fills the cluster with 4 free, not the
/// one with 8; a job needing no GPU goes where the fewest GPUs are free);
/// and once jobs are bigger than a tenth of the clusters' room — small
/// clusters, big jobs, or the end of a burst — they pack one cluster and
/// leave the other's room whole.
fn whole_job_cluster<'a>(
    candidates: &[&'a ClusterState],
    demands: &[Demand],
    all: &[&Demand],
    reasons: &mut BTreeMap<String, String>,
) -> Option<&'a ClusterState> {
    let mut least_free_first: Vec<((i64, i64), &ClusterState)> =
        candidates.iter().map(|c| (room(c), *c)).collect();
    least_free_first.sort_by_key(|(room, _)| *room);
    let needed: i64 = demands
        .iter()
        .map(|d| d.requests.get(GPU).copied().unwrap_or(0))
        .sum();
    let short = least_free_first.partition_point(|((gpu, _), _)| *gpu < needed);
    let mut best = None;
    for (i, (_, c)) in least_free_first.iter().enumerate().skip(short) {
        match pack_onto(&c.nodes, all) {
            Ok(_) => {
                best = Some(i);
                break;
            }
            Err(why) => {
                reasons.insert(c.name.clone(), why);
            }
        }
    }
    let Some(best) = best else {
        for (_, c) in &least_free_first[..short] {
            if let Err(why) = pack_onto(&c.nodes, all) {
                reasons.insert(c.name.clone(), why);
            }
        }
        return None;
    };
    let (best_room, best_cluster) = least_free_first[best];
    // Roomier clusters in GPUs stay near only up to a bound: the order
    // is by GPUs first, and a gap in GPUs only widens along it.
    let mut equally_good: Vec<((i64, i64), &ClusterState)> = least_free_first[best + 1..]
        .iter()
        .take_while(|((gpu, _), _)| near(*gpu, best_room.0))
        .filter(|((_, cpu), _)| near(*cpu, best_room.1))
        .copied()
        .collect();
    equally_good.sort_by_key(|(room, _)| std::cmp::Reverse(*room));
    let roomier = equally_good
        .into_iter()
        .take_while(|(room, _)| *room > best_room)
        .find(|(_, c)| pack_onto(&c.nodes, all).is_ok())
        .map(|(_, c)| c);
    Some(roomier.unwrap_or(best_cluster))
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
        let reason = match pack_onto(&c.nodes, &all) {
            Err(why) => why,
            Ok(_) => {
                "could hold the job, but the chosen placement fits it better or as well".to_string()
            }
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
        if let Err(why) = pack_onto(&c.nodes, share) {
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
