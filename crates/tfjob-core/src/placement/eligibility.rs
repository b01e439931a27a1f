//! Which clusters may take a job at all, and why the others may not:
//! system namespaces, a member's allowed namespaces, podPolicy and Pod
//! Security, `clusterNames`, `clusterSelector`, readiness, cordons, weights.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{ClusterState, Policy};
use crate::api::FederationStrategy;
use crate::builders::DEFAULT_ADDRESS_TEMPLATE;

/// Namespaces of a member that are its own, or the controller's: no job's
/// replicas land there, whatever the job's namespace on home.
pub const SYSTEM_NAMESPACES: [&str; 4] = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    crate::api::SECRETS_NAMESPACE,
];

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

/// Eligible clusters, and the reasons the others are passed over.
pub(super) fn eligible<'a>(
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
        } else if let Some(why) = policy.excluded.get(&c.name) {
            Some(why.as_str())
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
        } else if policy.stable_addresses && c.member && !c.stable_addresses {
            Some(UNSTABLE_ADDRESSES)
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
    for name in &policy.names {
        if !clusters.iter().any(|c| &c.name == name) {
            reasons.insert(name.clone(), UNKNOWN_CLUSTER.to_string());
        }
    }
    out
}

/// Why a job that fails over replica by replica passes over a member.
pub const UNSTABLE_ADDRESSES: &str = "spec.scheduler.federation.failover LostReplicas needs the clusterset.local address of an exported Service here (addressTemplate {service}.{namespace}.svc.clusterset.local, exportServices: true), so that a moved replica keeps its address";

/// Why peers on other clusters cannot reach a replica on a cluster by the
/// address a split job's `TF_CONFIG` gives it (None: they can). The default
/// template is the Multi-Cluster Services name, which resolves only once
/// the Service is exported; any other template is the operator's own
/// (their DNS or gateway answers it), and trusted. `setting` names the
/// switch that would export (the MemberCluster's or the controller's).
pub fn unreachable_across_clusters(
    address_template: &str,
    exports: bool,
    setting: &str,
) -> Option<String> {
    (address_template == DEFAULT_ADDRESS_TEMPLATE && !exports).then(|| {
        format!(
            "peers on other clusters would reach its replicas at {address_template}, which no one answers: its Services are not exported ({setting}: false)"
        )
    })
}

/// Why a job waits for a cluster its `clusterNames` lists but no
/// MemberCluster has registered (yet): not for capacity.
pub const UNKNOWN_CLUSTER: &str = "unknown cluster: no MemberCluster of this name is registered (spec.scheduler.federation.clusterNames)";

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
