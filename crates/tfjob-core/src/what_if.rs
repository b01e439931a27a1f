//! What losing clusters now would do (`plan --lose`): for each live job the
//! decision the job machine takes when a member is lost (`lifecycle::Loss`:
//! whole or partial, the restarts it counts, the budget), then where the
//! placer would put what moves — jobs taken in the placer's queue order
//! (higher priority, then older), each placement taking its capacity from
//! the clusters as they are without the lost ones. Pure: the command reads
//! the snapshot and writes nothing.
//!
//! A whole failover tears the job's other replicas down before it is placed
//! again, so their requests are given back to their clusters first (to a
//! cluster's first node: the snapshot does not say which node runs them).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::api::{FailoverScope, JobPhase, ReplicaKey, ReplicaType, TensorFlowTrainingJob};
use crate::lifecycle::{Budget, Loss, Verdict};
use crate::placement::{self, Assignment, ClusterState, Demand, Policy, Resources};

/// A job that runs now, as its spec and status say.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveJob {
    /// `namespace/name`.
    pub name: String,
    pub priority: i32,
    /// RFC 3339 creation time.
    pub created: String,
    pub scope: FailoverScope,
    pub master: Option<ReplicaKey>,
    /// Each replica's recorded cluster (those of a move in progress have none).
    pub assignment: Assignment,
    pub demands: Vec<Demand>,
    pub policy: Policy,
    pub budget: Budget,
    pub restart_counts: BTreeMap<ReplicaType, i32>,
}

impl LiveJob {
    /// The job, if it runs: its status records a placement and it has not
    /// ended.
    pub fn of(job: &TensorFlowTrainingJob) -> Option<LiveJob> {
        let status = job.status.as_ref()?;
        if status.phase.is_some_and(JobPhase::is_terminal) {
            return None;
        }
        let recorded = status.placement.as_ref()?.assignment.as_ref()?;
        let keys = job.spec.replica_keys();
        let assignment: Assignment = keys
            .iter()
            .filter_map(|k| Some((*k, recorded.get(&k.to_string())?.clone())))
            .collect();
        if assignment.is_empty() {
            return None;
        }
        let meta = &job.metadata;
        Some(LiveJob {
            name: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or_default()
            ),
            priority: job
                .spec
                .t9k_scheduler()
                .and_then(|t| t.priority)
                .unwrap_or(0),
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            scope: job.spec.failover_scope(),
            master: job.spec.master(),
            assignment,
            demands: placement::demands(job),
            policy: Policy::of_job(job),
            budget: Budget {
                limit: job.spec.run_policy.as_ref().and_then(|p| p.backoff_limit),
                used: status.backoff_count,
            },
            restart_counts: status
                .tasks
                .iter()
                .filter_map(|t| Some((ReplicaType::parse(&t.replica_type)?, t.restart_count)))
                .collect(),
        })
    }
}

/// What the loss would do to one job.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Prediction {
    pub job: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum Outcome {
    /// No replica of the job runs on the lost clusters.
    Untouched,
    /// The replicas that move (all of them when `whole`) and their new
    /// clusters; the restart counts afterwards.
    #[serde(rename_all = "camelCase")]
    Moves {
        whole: bool,
        moved: BTreeMap<String, String>,
        backoff_count: i32,
        restart_counts: BTreeMap<String, i32>,
    },
    /// As `Moves`, but no cluster has room now: the replicas would wait,
    /// for these reasons, cluster by cluster.
    #[serde(rename_all = "camelCase")]
    Waits {
        whole: bool,
        replicas: Vec<String>,
        backoff_count: i32,
        restart_counts: BTreeMap<String, i32>,
        reasons: BTreeMap<String, String>,
    },
    /// The job would fail: its restarts would pass `backoffLimit`.
    Fails { message: String },
}

/// What losing `lost` now would do to each of `jobs`, in the order the
/// placer would take them.
pub fn predict(
    jobs: &[LiveJob],
    clusters: &[ClusterState],
    lost: &BTreeSet<String>,
) -> Vec<Prediction> {
    let mut free: Vec<ClusterState> = clusters
        .iter()
        .cloned()
        .map(|mut c| {
            c.ready &= !lost.contains(&c.name);
            c
        })
        .collect();
    let mut order: Vec<&LiveJob> = jobs.iter().collect();
    order.sort_by(|a, b| {
        (std::cmp::Reverse(a.priority), &a.created, &a.name).cmp(&(
            std::cmp::Reverse(b.priority),
            &b.created,
            &b.name,
        ))
    });
    let losses: Vec<(&LiveJob, Loss)> = order
        .into_iter()
        .map(|job| (job, Loss::of(job.scope, &job.assignment, job.master, lost)))
        .collect();
    // Whole failovers first give back what their other replicas hold.
    for (job, loss) in &losses {
        if matches!(loss, Loss::Whole { .. }) {
            for demand in &job.demands {
                if let Some(cluster) = job.assignment.get(&demand.key)
                    && !lost.contains(cluster)
                {
                    give_back(&mut free, cluster, &demand.requests);
                }
            }
        }
    }
    losses
        .into_iter()
        .map(|(job, loss)| Prediction {
            job: job.name.clone(),
            outcome: outcome(job, &loss, lost, &mut free),
        })
        .collect()
}

fn outcome(
    job: &LiveJob,
    loss: &Loss,
    lost: &BTreeSet<String>,
    free: &mut [ClusterState],
) -> Outcome {
    let (whole, moving): (bool, BTreeSet<ReplicaKey>) = match loss {
        Loss::Untouched => return Outcome::Untouched,
        Loss::Whole { .. } => (true, job.demands.iter().map(|d| d.key).collect()),
        Loss::Partial { moved } => (false, moved.clone()),
    };
    let hit: Vec<&str> = job
        .assignment
        .values()
        .filter(|c| lost.contains(*c))
        .map(String::as_str)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let why = format!("member cluster {} was lost", hit.join(", "));
    if let Verdict::FailJob { message, .. } = loss.verdict(&why, job.budget) {
        return Outcome::Fails { message };
    }
    let mut restart_counts = job.restart_counts.clone();
    match loss {
        Loss::Whole { charged } => *restart_counts.entry(charged.replica_type).or_default() += 1,
        Loss::Partial { moved } => {
            for key in moved {
                *restart_counts.entry(key.replica_type).or_default() += 1;
            }
        }
        Loss::Untouched => {}
    }
    let restart_counts: BTreeMap<String, i32> = restart_counts
        .into_iter()
        .map(|(t, n)| (t.as_str().to_string(), n))
        .collect();
    let backoff_count = job.budget.used + loss.restarts();
    let demands: Vec<Demand> = job
        .demands
        .iter()
        .filter(|d| moving.contains(&d.key))
        .cloned()
        .collect();
    match placement::place(&demands, free, &job.policy) {
        Ok(placed) => {
            for demand in &demands {
                if let Some(cluster) = placed.get(&demand.key) {
                    placement::charge(free, cluster, &demand.requests);
                }
            }
            Outcome::Moves {
                whole,
                moved: placed
                    .iter()
                    .map(|(k, c)| (k.to_string(), c.clone()))
                    .collect(),
                backoff_count,
                restart_counts,
            }
        }
        Err(unplaceable) => Outcome::Waits {
            whole,
            replicas: moving.iter().map(ReplicaKey::to_string).collect(),
            backoff_count,
            restart_counts,
            reasons: unplaceable.reasons,
        },
    }
}

/// Adds `requests` back to the free capacity of `cluster`.
fn give_back(clusters: &mut [ClusterState], cluster: &str, requests: &Resources) {
    let Some(node) = clusters
        .iter_mut()
        .find(|c| c.name == cluster)
        .and_then(|c| c.nodes.first_mut())
    else {
        return;
    };
    for (resource, amount) in requests {
        *node.entry(resource.clone()).or_default() += amount;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(gpus: i64) -> Resources {
        Resources::from([
            (placement::GPU.to_string(), gpus * 1000),
            ("cpu".to_string(), 16_000),
            ("pods".to_string(), 110_000),
        ])
    }

    fn member(name: &str, gpus: i64) -> ClusterState {
        ClusterState {
            name: name.into(),
            member: true,
            ready: true,
            stable_addresses: true,
            nodes: vec![node(gpus)],
            ..Default::default()
        }
    }

    /// A running job of 1 chief, 1 ps and 2 workers (1 GPU each but the
    /// ps) as recorded: `on` gives each replica's cluster.
    fn live(name: &str, scope: &str, backoff: (i32, i32), on: [&str; 4]) -> LiveJob {
        let keys = ["chief-0", "ps-0", "worker-0", "worker-1"];
        let specs: Vec<serde_json::Value> = ["chief", "ps", "worker"]
            .iter()
            .map(|t| {
                serde_json::json!({
                    "type": t, "replicas": if *t == "worker" { 2 } else { 1 },
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf",
                        "resources": {"limits": {"nvidia.com/gpu": if *t == "ps" { 0 } else { 1 }}}}]}}
                })
            })
            .collect();
        let assignment: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .zip(on)
            .map(|(k, c)| (k.to_string(), serde_json::json!(c)))
            .collect();
        let job: TensorFlowTrainingJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": format!("2026-12-01T00:00:0{}Z", name.len() % 10)},
            "spec": {
                "scheduler": {"federation": {"strategy": "Pack", "failover": scope}},
                "runPolicy": {"backoffLimit": backoff.1},
                "replicaSpecs": specs},
            "status": {"phase": "Running", "backoffCount": backoff.0,
                "tasks": [{"type": "worker", "restartCount": backoff.0}],
                "placement": {"epoch": 3, "assignment": assignment}},
        }))
        .expect("a job");
        LiveJob::of(&job).expect("a live job")
    }

    fn lose(name: &str) -> BTreeSet<String> {
        [name.to_string()].into_iter().collect()
    }

    #[test]
    fn a_partial_failover_moves_the_lost_workers_and_counts_each() {
        let jobs = [live("ps", "LostReplicas", (1, 5), ["a", "a", "a", "b"])];
        let clusters = [member("a", 1), member("b", 4), member("c", 2)];
        let predicted = predict(&jobs, &clusters, &lose("b"));
        assert_eq!(
            predicted,
            [Prediction {
                job: "ml/ps".into(),
                outcome: Outcome::Moves {
                    whole: false,
                    moved: [("worker-1".to_string(), "a".to_string())].into(),
                    backoff_count: 2,
                    restart_counts: [("worker".to_string(), 2)].into(),
                },
            }]
        );
    }

    #[test]
    fn a_lost_ps_a_job_scope_and_a_spent_budget() {
        let jobs = [
            live("ps-lost", "LostReplicas", (0, 5), ["a", "b", "a", "a"]),
            live("whole", "Job", (0, 5), ["c", "c", "c", "b"]),
            live("spent", "LostReplicas", (2, 2), ["a", "a", "a", "b"]),
            live("far", "Job", (0, 5), ["c", "c", "c", "c"]),
        ];
        // No GPU is free on a; c has 2. The whole failovers give back what
        // their other replicas hold: 3 GPUs on a (ps-lost's chief and
        // workers), 2 on c (whole's chief and worker-0).
        let clusters = [member("a", 0), member("b", 8), member("c", 2)];
        let predicted: BTreeMap<String, Outcome> = predict(&jobs, &clusters, &lose("b"))
            .into_iter()
            .map(|p| (p.job, p.outcome))
            .collect();
        assert_eq!(predicted["ml/far"], Outcome::Untouched);
        match &predicted["ml/spent"] {
            Outcome::Fails { message } => {
                assert!(message.contains("member cluster b was lost"), "{message}");
                assert!(message.contains("backoff limit of 2"), "{message}");
            }
            other => panic!("spent: {other:?}"),
        }
        // Older first: `whole` (3 GPUs) takes the tightest fit, a (3 free);
        // then `ps-lost`, whose ps went (the whole job moves), takes c (4).
        let moved_to = |job: &str| match &predicted[job] {
            Outcome::Moves {
                whole: true,
                moved,
                backoff_count: 1,
                restart_counts,
            } => {
                assert_eq!(moved.len(), 4, "{job}: {moved:?}");
                let clusters: BTreeSet<&String> = moved.values().collect();
                (clusters, restart_counts.clone())
            }
            other => panic!("{job}: {other:?}"),
        };
        let (on, counts) = moved_to("ml/whole");
        assert_eq!(on, BTreeSet::from([&"a".to_string()]));
        assert_eq!(
            counts.get("worker"),
            Some(&1),
            "worker-1 was lost: {counts:?}"
        );
        let (on, counts) = moved_to("ml/ps-lost");
        assert_eq!(on, BTreeSet::from([&"c".to_string()]));
        assert_eq!(counts.get("ps"), Some(&1), "ps-0 was lost: {counts:?}");
    }
}
