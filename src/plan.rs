//! `tfjob-federator plan`: a dry run of placement. It reads the clusters
//! the way the controller sees them (MemberClusters, their kubeconfig
//! Secrets, nodes and active pods) once, places the job, and says where
//! each replica would go and why the other clusters were passed over.
//! Nothing is written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::{MemberCluster, MemberClusterStatus, TensorFlowTrainingJob};
use crate::capacity;
use crate::placement::{self, ClusterState, Policy};

/// How long one cluster may take to answer the dry run.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("listing MemberClusters on home: {0}")]
    Members(kube::Error),
    #[error("reading home's nodes and pods: {0}")]
    Home(String),
}

/// Nodes and active pods of a cluster, read once.
async fn read_cluster(client: &Client) -> Result<capacity::Capacity, String> {
    let read = async {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let active = ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed");
        let pods = Api::<capacity::PodUsage>::all(client.clone())
            .list(&active)
            .await?;
        Ok::<_, kube::Error>(capacity::compute(nodes.items.iter(), pods.items.iter()))
    };
    match tokio::time::timeout(CLUSTER_TIMEOUT, read).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", CLUSTER_TIMEOUT.as_secs())),
    }
}

async fn member_client(home: &Client, member: &MemberCluster) -> Result<Client, String> {
    let backoff = crate::actors::call::Backoff::from(std::time::Duration::from_millis(200));
    let wrap = |config: kube::Config| Client::try_from(config).map_err(|e| e.to_string());
    crate::clusters::member_client(home, member, backoff, wrap)
        .await
        .map(|(client, _)| client)
        .map_err(|e| e.to_string())
}

/// The clusters placement would consider: home (when it is a target) and
/// every member; an unreachable member counts as not Ready.
pub async fn cluster_states(
    home: &Client,
    home_name: &str,
    home_is_target: bool,
) -> Result<Vec<ClusterState>, PlanError> {
    let mut states = Vec::new();
    if home_is_target {
        let capacity = read_cluster(home).await.map_err(PlanError::Home)?;
        states.push(ClusterState {
            name: home_name.to_string(),
            ready: true,
            nodes: capacity.nodes,
            ..Default::default()
        });
    }
    let members = Api::<MemberCluster>::all(home.clone())
        .list(&ListParams::default())
        .await
        .map_err(PlanError::Members)?;
    for member in members.items {
        let ready = member
            .status
            .as_ref()
            .is_some_and(MemberClusterStatus::is_ready);
        let (nodes, pod_security) = match member_client(home, &member).await {
            Ok(client) if ready => (
                read_cluster(&client)
                    .await
                    .map(|c| c.nodes)
                    .unwrap_or_default(),
                pod_security_levels(&client).await.unwrap_or_default(),
            ),
            _ => Default::default(),
        };
        states.push(ClusterState {
            name: member.name_any(),
            member: true,
            pod_policy: member.spec.pod_policy.clone(),
            labels: member.labels().clone(),
            pod_security,
            ready,
            unschedulable: member.spec.unschedulable,
            nodes,
        });
    }
    Ok(states)
}

/// The Pod Security level of each labelled namespace of a cluster.
async fn pod_security_levels(
    client: &Client,
) -> kube::Result<BTreeMap<String, crate::api::PodSecurityLevel>> {
    let labelled = ListParams::default().labels(crate::api::PodSecurityLevel::ENFORCE_LABEL);
    let namespaces = Api::<Namespace>::all(client.clone())
        .list_metadata(&labelled)
        .await?;
    Ok(crate::isolation::enforced_levels(
        namespaces
            .items
            .into_iter()
            .map(|ns| (ns.name_any(), ns.labels().clone())),
    ))
}

/// The dry run's report, as printed.
pub fn report(job: &TensorFlowTrainingJob, clusters: &[ClusterState]) -> String {
    let demands = placement::demands(job);
    let policy = Policy::of_job(job);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "job {}/{}: {} replicas, strategy {}, allowSplit {}",
        job.namespace().unwrap_or_else(|| "default".into()),
        job.name_any(),
        demands.len(),
        policy.strategy.as_str(),
        policy.allow_split
    );
    match placement::place(&demands, clusters, &policy) {
        Ok(assignment) => {
            for (key, cluster) in &assignment {
                let _ = writeln!(out, "  {:<14} -> {cluster}", key.to_string());
            }
            let passed = placement::passed_over(&demands, clusters, &policy, &assignment);
            if !passed.is_empty() {
                let _ = writeln!(out, "passed over:");
                for (cluster, why) in passed {
                    let _ = writeln!(out, "  {cluster}: {why}");
                }
            }
        }
        Err(unplaceable) => {
            let _ = writeln!(out, "cannot be placed now; it would wait for capacity:");
            for (cluster, why) in &unplaceable.reasons {
                let _ = writeln!(out, "  {cluster}: {why}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lists_replicas_and_passed_over_clusters() {
        let job: TensorFlowTrainingJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob", "metadata": {"name": "j", "namespace": "ml"},
            "spec": {"replicaSpecs": [{"type": "worker", "replicas": 2, "template": {"spec": {"containers": [
                {"name": "tensorflow", "image": "tf", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}}]},
        }))
        .expect("valid job");
        let node = |gpus: i64| {
            placement::Resources::from([
                (placement::GPU.to_string(), gpus * 1000),
                ("cpu".to_string(), 8000),
                ("pods".to_string(), 110_000),
            ])
        };
        let clusters = vec![
            ClusterState {
                name: "home".into(),
                ready: true,
                nodes: vec![node(1)],
                ..Default::default()
            },
            ClusterState {
                name: "member-1".into(),
                ready: true,
                nodes: vec![node(4)],
                ..Default::default()
            },
            ClusterState {
                name: "member-2".into(),
                ready: false,
                ..Default::default()
            },
        ];
        let text = report(&job, &clusters);
        assert!(
            text.starts_with("job ml/j: 2 replicas, strategy Pack, allowSplit true\n"),
            "{text}"
        );
        assert!(
            text.contains("worker-0       -> member-1")
                && text.contains("worker-1       -> member-1"),
            "{text}"
        );
        assert!(
            text.contains("home: insufficient nvidia.com/gpu (need 4)"),
            "{text}"
        );
        assert!(text.contains("member-2: not Ready"), "{text}");
    }
}
