//! `tfjob-federator plan`: a dry run of placement. It reads the clusters
//! the way the controller sees them (MemberClusters, their kubeconfig
//! Secrets, nodes and active pods) once, places the job, and says where
//! each replica would go and why the other clusters were passed over.
//! With `--lose`, it reads the live jobs too and says what losing those
//! clusters now would do to each (`what_if`, the controller's own rules).
//! Nothing is written.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::{ListedJob, MemberCluster, MemberClusterStatus, TensorFlowTrainingJob};
use crate::capacity;
use crate::config::ControllerConfig;
use crate::placement::{self, ClusterState, Policy};
use crate::what_if::{LiveJob, Outcome, Prediction};

/// How long one cluster may take to answer the dry run.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("listing MemberClusters on home: {0}")]
    Members(kube::Error),
    #[error("reading home's nodes and pods: {0}")]
    Home(String),
    #[error("listing TensorFlowTrainingJobs on home: {0}")]
    Jobs(kube::Error),
    #[error("TensorFlowTrainingJob {0} not found, or not running")]
    NotRunning(String),
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
    config: &ControllerConfig,
) -> Result<Vec<ClusterState>, PlanError> {
    let mut states = Vec::new();
    if config.home_is_target {
        let capacity = read_cluster(home).await.map_err(PlanError::Home)?;
        states.push(ClusterState {
            name: config.home_cluster_name.clone(),
            ready: true,
            unreachable: config.home_unreachable(),
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
            stable_addresses: member.spec.gives_stable_addresses(),
            unreachable: member.spec.unreachable_across_clusters(),
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

/// The jobs that run on home (in `namespace`, else every namespace; only
/// `name` when given), as their status records them. A status is taken as
/// written: the dry run holds no signing key to verify it.
pub async fn live_jobs(
    home: &Client,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<Vec<LiveJob>, PlanError> {
    let resource = crate::actors::manager::job_resource();
    let api: Api<ListedJob> = match namespace {
        Some(ns) => Api::namespaced_with(home.clone(), ns, &resource),
        None => Api::all_with(home.clone(), &resource),
    };
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(PlanError::Jobs)?;
    let live: Vec<LiveJob> = listed
        .items
        .iter()
        .filter_map(|job| match job {
            ListedJob::Readable(job) => Some(job),
            ListedJob::Unreadable(_) => None,
        })
        .filter(|job| name.is_none_or(|n| job.metadata.name.as_deref() == Some(n)))
        .filter_map(|job| LiveJob::of(job))
        .collect();
    match name {
        Some(name) if live.is_empty() => Err(PlanError::NotRunning(name.to_string())),
        _ => Ok(live),
    }
}

/// What losing `lost` now would do to the jobs that run (see `live_jobs`).
pub async fn predict_loss(
    home: &Client,
    config: &ControllerConfig,
    lost: &BTreeSet<String>,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<Vec<Prediction>, PlanError> {
    let clusters = cluster_states(home, config).await?;
    let jobs = live_jobs(home, namespace, name).await?;
    Ok(crate::what_if::predict(&jobs, &clusters, lost))
}

/// `plan --lose`'s report, as printed: one row per job.
pub fn loss_report(lost: &BTreeSet<String>, predictions: &[Prediction]) -> String {
    let lost: Vec<&str> = lost.iter().map(String::as_str).collect();
    let mut rows = vec![[
        "JOB".to_string(),
        "FAILOVER".to_string(),
        "RESULT".to_string(),
        "RESTARTS AFTER".to_string(),
        "REPLICAS".to_string(),
    ]];
    let counted = |backoff: i32, counts: &BTreeMap<String, i32>| {
        let types: Vec<String> = counts.iter().map(|(t, n)| format!("{t} {n}")).collect();
        format!("{backoff} ({})", types.join(", "))
    };
    let scope = |whole: bool| if whole { "whole" } else { "partial" }.to_string();
    for p in predictions {
        let job = p.job.clone();
        rows.push(match &p.outcome {
            Outcome::Untouched => [job, "-".into(), "untouched".into(), "-".into(), "-".into()],
            Outcome::Moves {
                whole,
                moved,
                backoff_count,
                restart_counts,
            } => {
                let moves: Vec<String> = moved.iter().map(|(r, c)| format!("{r}->{c}")).collect();
                [
                    job,
                    scope(*whole),
                    "moves".into(),
                    counted(*backoff_count, restart_counts),
                    moves.join(" "),
                ]
            }
            Outcome::Waits {
                whole,
                replicas,
                backoff_count,
                restart_counts,
                reasons,
            } => {
                let why: Vec<String> = reasons.iter().map(|(c, w)| format!("{c}: {w}")).collect();
                [
                    job,
                    scope(*whole),
                    "waits".into(),
                    counted(*backoff_count, restart_counts),
                    format!("{} (no room: {})", replicas.join(" "), why.join("; ")),
                ]
            }
            Outcome::Fails { message } => {
                [job, "-".into(), "fails".into(), "-".into(), message.clone()]
            }
        });
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = format!("losing {}:\n", lost.join(", "));
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
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
    fn the_loss_report_has_a_row_per_job() {
        let predictions = [
            Prediction {
                job: "ml/ps".into(),
                outcome: Outcome::Moves {
                    whole: false,
                    moved: [("worker-1".to_string(), "member-2".to_string())].into(),
                    backoff_count: 2,
                    restart_counts: [("worker".to_string(), 2)].into(),
                },
            },
            Prediction {
                job: "ml/big".into(),
                outcome: Outcome::Waits {
                    whole: true,
                    replicas: vec!["worker-0".into(), "worker-1".into()],
                    backoff_count: 1,
                    restart_counts: [("worker".to_string(), 1)].into(),
                    reasons: [("member-2".to_string(), "insufficient nvidia.com/gpu (need 8)".to_string())].into(),
                },
            },
            Prediction {
                job: "ml/spent".into(),
                outcome: Outcome::Fails {
                    message: "member cluster member-1 was lost; the backoff limit of 0 restarts is reached".into(),
                },
            },
            Prediction {
                job: "ml/far".into(),
                outcome: Outcome::Untouched,
            },
        ];
        let lost = ["member-1".to_string()].into_iter().collect();
        let text = loss_report(&lost, &predictions);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "losing member-1:");
        assert!(
            lines[1].starts_with("JOB       FAILOVER  RESULT     RESTARTS AFTER  REPLICAS"),
            "{text}"
        );
        assert_eq!(
            lines[2],
            "ml/ps     partial   moves      2 (worker 2)    worker-1->member-2"
        );
        assert_eq!(
            lines[3],
            "ml/big    whole     waits      1 (worker 1)    worker-0 worker-1 (no room: member-2: insufficient nvidia.com/gpu (need 8))"
        );
        assert!(
            lines[4].starts_with(
                "ml/spent  -         fails      -               member cluster member-1 was lost"
            ),
            "{text}"
        );
        assert_eq!(lines[5], "ml/far    -         untouched  -               -");
        // -o json: the same predictions, one object each.
        let json = serde_json::to_value(&predictions).expect("json");
        assert_eq!(
            json[0],
            serde_json::json!({"job": "ml/ps", "result": "moves", "whole": false,
                "moved": {"worker-1": "member-2"}, "backoffCount": 2, "restartCounts": {"worker": 2}})
        );
        assert_eq!(
            json[3],
            serde_json::json!({"job": "ml/far", "result": "untouched"})
        );
    }

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
