//! What the demo shows of the objects it watches, as data: a job's phase,
//! replicas, restarts, wait and failure read from its status on home (a
//! [`JobView`]), and why a member cannot take jobs yet. Apart from `render`,
//! which turns this into text, so that what is known and how it is shown
//! change separately.

use std::collections::BTreeMap;
use std::fmt;

use kube::ResourceExt;

use crate::api::{
    ConditionStatus, JobCondition, JobConditionType, JobPhase, MemberCluster, ReplicaPhase,
    TaskStatus, TensorFlowTrainingJob,
};

/// The Initialized condition's reason while a job waits for a placement.
const WAITING_REASON: &str = "WaitingForCapacity";

/// A job's identity on home. Shown as its name in `default`, else `ns/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobKey {
    pub namespace: String,
    pub name: String,
}

impl JobKey {
    pub fn of(job: &TensorFlowTrainingJob) -> JobKey {
        JobKey {
            namespace: job.namespace().unwrap_or_else(|| "default".to_string()),
            name: job.name_any(),
        }
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace == "default" {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A phase a manifest may expect, in any letter case (`Unknown` is no goal).
pub fn parse_phase(text: &str) -> Option<JobPhase> {
    JobPhase::ALL
        .into_iter()
        .filter(|p| *p != JobPhase::Unknown)
        .find(|p| p.as_str().eq_ignore_ascii_case(text.trim()))
}

/// One replica as the job's status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    /// The replica without the job's name, e.g. `worker-3`.
    pub name: String,
    pub cluster: Option<String>,
    pub phase: ReplicaPhase,
    /// Why it failed or is stuck, e.g. `exit code 137, OOMKilled`.
    pub detail: Option<String>,
}

/// Waiting reasons every starting pod goes through: not worth a line.
const ROUTINE_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The reason inside a container state such as `Terminated(OOMKilled)`.
fn state_reason(state: &str) -> Option<&str> {
    let inner = state.split_once('(')?.1.strip_suffix(')')?;
    (!inner.is_empty()).then_some(inner)
}

fn replica_detail(replica: &crate::api::ReplicaStatus) -> Option<String> {
    let main = replica
        .containers
        .iter()
        .find(|c| c.name == crate::api::TENSORFLOW_CONTAINER)
        .or(replica.containers.first())?;
    let reason = main.state.as_deref().and_then(state_reason);
    match replica.phase {
        ReplicaPhase::Failed => match (main.exit_code, reason) {
            (Some(code), Some(reason)) => Some(format!("exit code {code}, {reason}")),
            (Some(code), None) => Some(format!("exit code {code}")),
            (None, reason) => reason.map(str::to_string),
        },
        ReplicaPhase::Pending | ReplicaPhase::Unknown => reason
            .filter(|r| !ROUTINE_WAITING.contains(r))
            .map(str::to_string),
        _ => None,
    }
}

/// What the demo shows of one job, read from its object on home.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobView {
    pub phase: Option<JobPhase>,
    /// In status order: chief, worker, ps, evaluator, each by index.
    pub replicas: Vec<ReplicaState>,
    /// `tasks[].restartCount` by replica type, in status order.
    pub restarts: Vec<(String, i32)>,
    /// The WaitingForCapacity message while the job waits for a placement.
    pub waiting: Option<String>,
    /// `Reason: message` of the Failed condition, once it is True.
    pub failure: Option<String>,
    /// The controller has placed the job, or knows it must wait, or ended
    /// it: the next job may be submitted without racing it for capacity.
    pub admitted: bool,
}

fn condition(conditions: &[JobCondition], kind: JobConditionType) -> Option<&JobCondition> {
    conditions.iter().find(|c| c.condition_type == kind)
}

impl JobView {
    pub fn of(job: &TensorFlowTrainingJob) -> JobView {
        let status = job.status.clone().unwrap_or_default();
        let prefix = format!("{}-", job.name_any());
        let replicas = status
            .tasks
            .iter()
            .flat_map(|t: &TaskStatus| t.replica_status.iter())
            .map(|r| ReplicaState {
                name: r.name.strip_prefix(&prefix).unwrap_or(&r.name).to_string(),
                cluster: r.cluster.clone(),
                phase: r.phase,
                detail: replica_detail(r),
            })
            .collect();
        let restarts = status
            .tasks
            .iter()
            .map(|t| (t.replica_type.clone(), t.restart_count))
            .collect();
        let waiting = condition(&status.conditions, JobConditionType::Initialized)
            .filter(|c| {
                c.status == ConditionStatus::False && c.reason.as_deref() == Some(WAITING_REASON)
            })
            .map(|c| {
                c.message
                    .clone()
                    .unwrap_or_else(|| WAITING_REASON.to_string())
            });
        let failure = condition(&status.conditions, JobConditionType::Failed)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| match (&c.reason, &c.message) {
                (Some(reason), Some(message)) => format!("{reason}: {message}"),
                (Some(text), None) | (None, Some(text)) => text.clone(),
                (None, None) => "Failed".to_string(),
            });
        let admitted = status
            .placement
            .as_ref()
            .is_some_and(|p| p.assignment.is_some())
            || waiting.is_some()
            || matches!(
                status.phase,
                Some(JobPhase::Paused | JobPhase::Succeeded | JobPhase::Failed)
            );
        JobView {
            phase: status.phase,
            replicas,
            restarts,
            waiting,
            failure,
            admitted,
        }
    }

    pub fn total_restarts(&self) -> i32 {
        self.restarts.iter().map(|(_, n)| n).sum()
    }

    /// Replicas per cluster, e.g. `{"member-1": 3, "member-2": 2}`.
    pub fn placement(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for cluster in self.replicas.iter().filter_map(|r| r.cluster.as_ref()) {
            *counts.entry(cluster.clone()).or_default() += 1;
        }
        counts
    }
}

/// Why a member cannot take jobs yet, or `None` once its probe says Ready
/// and its capacity is reported (placement needs both).
pub fn member_not_ready(member: &MemberCluster) -> Option<String> {
    let status = member.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.condition_type == crate::api::READY_CONDITION);
    match ready {
        Some(c) if c.status == "True" && !status.allocatable.is_empty() => None,
        Some(c) if c.status == "True" => Some("no capacity reported yet".to_string()),
        Some(c) => Some(format!(
            "not Ready: {}",
            c.message.as_deref().unwrap_or("no message")
        )),
        None => Some("not probed yet".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::demo::progress::changes;
    use crate::demo::progress::fixtures::{job, running};

    #[test]
    fn a_view_reads_phase_replicas_placement_and_restarts() {
        let view = JobView::of(&job("split", running("split")));
        assert_eq!(view.phase, Some(JobPhase::Running));
        assert_eq!(view.replicas[1].name, "worker-0");
        assert_eq!(view.replicas[2].cluster.as_deref(), Some("member-2"));
        assert_eq!(
            view.placement(),
            BTreeMap::from([("member-1".to_string(), 2), ("member-2".to_string(), 2)])
        );
        assert_eq!(view.total_restarts(), 0);
        assert!(!view.admitted, "no placement annotation, not waiting");
    }

    #[test]
    fn waiting_failure_and_admission_come_from_conditions_and_annotation() {
        let waiting = JobView::of(&job(
            "whole",
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
                "reason": "WaitingForCapacity", "message": "waiting for capacity: member-1: insufficient nvidia.com/gpu (need 16)"}]}),
        ));
        assert_eq!(
            waiting.waiting.as_deref(),
            Some("waiting for capacity: member-1: insufficient nvidia.com/gpu (need 16)")
        );
        assert!(waiting.admitted);
        let failed = JobView::of(&job(
            "bad",
            json!({"phase": "Failed", "conditions": [
                {"type": "Completed", "status": "False", "reason": "Failed", "message": "The job has failed."},
                {"type": "Failed", "status": "True", "reason": "ReplicaFailed", "message": "replica worker-0 exited with code 1"},
            ]}),
        ));
        assert_eq!(
            failed.failure.as_deref(),
            Some("ReplicaFailed: replica worker-0 exited with code 1")
        );
        let succeeded = JobView::of(&job(
            "fine",
            json!({"phase": "Succeeded", "conditions": [{"type": "Failed", "status": "False", "reason": "Succeeded"}]}),
        ));
        assert_eq!(
            succeeded.failure, None,
            "a False Failed condition is no failure"
        );
        let placed = JobView::of(&job(
            "placed",
            json!({"placement": {"epoch": 0, "assignment": {"worker-0": "home"}}}),
        ));
        assert!(placed.admitted);
    }

    #[test]
    fn a_failed_replica_shows_its_exit_code_and_reason() {
        let view = JobView::of(&job(
            "retry",
            json!({"phase": "Running", "tasks": [{"type": "worker", "restartCount": 1, "replicaStatus": [{
                "name": "retry-worker-0", "phase": "Failed", "cluster": "home",
                "containers": [{"name": "tensorflow", "state": "Terminated(OOMKilled)", "exitCode": 137}]},
                {"name": "retry-worker-1", "phase": "Pending", "cluster": "home",
                "containers": [{"name": "tensorflow", "state": "Waiting(ContainerCreating)"}]}]}]}),
        ));
        assert_eq!(
            changes(&JobView::default(), &view)[1..3],
            [
                "worker-0 on home: Failed (exit code 137, OOMKilled)",
                "worker-1 on home: Pending",
            ],
            "routine waiting reasons are left out"
        );
    }

    #[test]
    fn expected_phases_parse_in_any_case_but_unknown_is_no_goal() {
        assert_eq!(parse_phase("failed"), Some(JobPhase::Failed));
        assert_eq!(parse_phase(" Running "), Some(JobPhase::Running));
        assert_eq!(parse_phase("Unknown"), None);
        assert_eq!(parse_phase("Done"), None);
    }

    #[test]
    fn a_member_is_ready_with_a_true_condition_and_capacity() {
        let member = |status: serde_json::Value| -> MemberCluster {
            serde_json::from_value(json!({
                "apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": "member-1"},
                "spec": {"kubeconfigSecretRef": {"name": "member-1", "namespace": "tfjob-federator"}},
                "status": status,
            }))
            .expect("a member")
        };
        assert_eq!(
            member_not_ready(&member(json!({}))).as_deref(),
            Some("not probed yet")
        );
        let ready = json!({"type": "Ready", "status": "True", "message": "the API server answers"});
        assert_eq!(
            member_not_ready(&member(json!({"conditions": [ready]}))).as_deref(),
            Some("no capacity reported yet")
        );
        assert_eq!(
            member_not_ready(&member(
                json!({"conditions": [ready], "allocatable": {"cpu": "128"}})
            )),
            None
        );
        assert_eq!(
            member_not_ready(&member(json!({"conditions": [
                {"type": "Ready", "status": "False", "message": "probe failed"}]})))
            .as_deref(),
            Some("not Ready: probe failed")
        );
    }
}
