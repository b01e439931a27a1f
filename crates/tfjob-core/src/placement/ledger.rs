//! The reservation ledger: capacity promised to placed jobs whose pods the
//! clusters do not show yet, so concurrent placements never over-commit.

use std::collections::BTreeMap;

use super::{Assignment, ClusterState, Demand, GPU, Resources, fits, take};

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
            charge(&mut out, cluster, requests);
        }
        out
    }
}

/// Takes `requests` out of the free capacity of `cluster` (a node that
/// holds it, else the roomiest: the snapshot may have moved).
pub fn charge(clusters: &mut [ClusterState], cluster: &str, requests: &Resources) {
    let Some(c) = clusters.iter_mut().find(|c| c.name == cluster) else {
        return;
    };
    match c.nodes.iter_mut().find(|n| fits(requests, n)) {
        Some(node) => take(node, requests),
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
