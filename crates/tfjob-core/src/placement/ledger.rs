//! The reservation ledger: capacity promised to placed jobs whose pods the
//! clusters do not show yet, so concurrent placements never over-commit.
//!
//! A hold is per pod: once the cluster's own pod tally shows a pod
//! ([`Ledger::forget_shown`]), the tally charges it and the hold goes. The
//! pod is counted once, by the ledger until the cluster shows it and by the
//! cluster after, never by both: a hold kept until the job's last pod ran
//! would charge its pods twice and keep a nearly full cluster waiting for
//! capacity that is there. (A pod of an earlier epoch that still holds the
//! name on that cluster ends the hold early: the old pod is charged in its
//! place until it goes.)

use std::collections::BTreeMap;

use super::{Assignment, ClusterState, Demand, GPU, Resources, fits, take};
use crate::api::ReplicaKey;

/// How a job's pods are named on every cluster: `namespace/<job>-<type>-<index>`,
/// the key a cluster's pod tally knows them by.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodNames {
    pub namespace: String,
    pub job: String,
}

impl PodNames {
    pub fn key(&self, replica: &ReplicaKey) -> String {
        format!("{}/{}", self.namespace, replica.object_name(&self.job))
    }
}

/// Capacity promised to one pod not shown by its cluster yet.
#[derive(Debug, Clone)]
struct Hold {
    cluster: String,
    pod: String,
    requests: Resources,
}

/// Capacity promised to placed jobs' pods that the clusters do not show yet.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    held: BTreeMap<String, Vec<Hold>>,
}

impl Ledger {
    /// Holds the capacity `assignment` takes, pod by pod, under the job's uid.
    pub fn reserve(
        &mut self,
        job: &str,
        pods: &PodNames,
        demands: &[Demand],
        assignment: &Assignment,
    ) {
        let holds = demands
            .iter()
            .filter_map(|d| {
                Some(Hold {
                    cluster: assignment.get(&d.key)?.clone(),
                    pod: pods.key(&d.key),
                    requests: d.requests.clone(),
                })
            })
            .collect();
        self.held.insert(job.to_string(), holds);
    }

    /// The job ended, paused or runs: whatever it still holds goes.
    pub fn release(&mut self, job: &str) {
        self.held.remove(job);
    }

    /// Drops the hold of every pod that `shown(cluster, pod key)` says its
    /// cluster's tally now charges. Ask before taking the clusters'
    /// snapshot: a pod shown after it would otherwise be counted by neither.
    pub fn forget_shown(&mut self, mut shown: impl FnMut(&str, &str) -> bool) {
        self.held.retain(|_, holds| {
            holds.retain(|hold| !shown(&hold.cluster, &hold.pod));
            !holds.is_empty()
        });
    }

    /// The clusters with every hold taken out of their free capacity.
    /// Each cluster's next charge looks first from the node its last one
    /// took (holds come job by job, a job's pods alike, and the nodes
    /// before it were too full for the last): a pass costs about holds +
    /// nodes, not holds × nodes (a 5,000-job backlog spent a fifth of the
    /// controller's CPU here, scanning full nodes from the first).
    pub fn apply(&self, clusters: &[ClusterState]) -> Vec<ClusterState> {
        let mut out = clusters.to_vec();
        let mut last_taken: BTreeMap<&str, usize> = BTreeMap::new();
        for hold in self.held.values().flatten() {
            let from = last_taken.entry(hold.cluster.as_str()).or_default();
            if let Some(taken) = charge_from(&mut out, &hold.cluster, &hold.requests, *from) {
                *from = taken;
            }
        }
        out
    }
}

/// Takes `requests` out of the free capacity of `cluster` (a node that
/// holds it, else the roomiest: the snapshot may have moved).
pub fn charge(clusters: &mut [ClusterState], cluster: &str, requests: &Resources) {
    charge_from(clusters, cluster, requests, 0);
}

/// As [`charge`], the nodes looked at from node `from` on, then from the
/// first: the index of the node charged, if the cluster has any.
fn charge_from(
    clusters: &mut [ClusterState],
    cluster: &str,
    requests: &Resources,
    from: usize,
) -> Option<usize> {
    let c = clusters.iter_mut().find(|c| c.name == cluster)?;
    let count = c.nodes.len();
    let taken = (0..count)
        .map(|i| (from + i) % count)
        .find(|&i| fits(requests, &c.nodes[i]))
        .or_else(|| (0..count).max_by_key(|&i| c.nodes[i].get(GPU).copied().unwrap_or(0)))?;
    take(&mut c.nodes[taken], requests);
    Some(taken)
}
