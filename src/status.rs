//! Folding replica states into a job's status: the replica view of a pod,
//! `tasks[]`, `aggregate` and conditions that keep their transition times.
//! Pure: no API calls.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    Aggregate, ConditionStatus, ContainerStatus, JobCondition, JobConditionType, ReplicaKey,
    ReplicaPhase, ReplicaStatus, ReplicaType, TaskStatus,
};

/// What the job knows about one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaView {
    pub key: ReplicaKey,
    pub pod_name: String,
    pub uid: Option<String>,
    pub phase: ReplicaPhase,
    pub containers: Vec<ContainerStatus>,
    pub cluster: Option<String>,
    /// The exit code of the main (`tensorflow`) container, once terminated.
    pub exit_code: Option<i32>,
}

impl ReplicaView {
    /// A replica whose pod is being created.
    pub fn creating(key: ReplicaKey, pod_name: String, cluster: Option<String>) -> ReplicaView {
        ReplicaView {
            key,
            pod_name,
            uid: None,
            phase: ReplicaPhase::Creating,
            containers: Vec::new(),
            cluster,
            exit_code: None,
        }
    }

    /// A replica as its pod shows it; a pod being deleted counts as Deleted.
    pub fn of_pod(key: ReplicaKey, pod: &Pod, cluster: Option<String>) -> ReplicaView {
        let status = pod.status.as_ref();
        let phase = match status.and_then(|s| s.phase.as_deref()) {
            _ if pod.metadata.deletion_timestamp.is_some() => ReplicaPhase::Deleted,
            Some("Pending") | None => ReplicaPhase::Pending,
            Some("Running") => ReplicaPhase::Running,
            Some("Succeeded") => ReplicaPhase::Succeeded,
            Some("Failed") => ReplicaPhase::Failed,
            Some(_) => ReplicaPhase::Unknown,
        };
        let mut exit_code = None;
        let containers = status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|statuses| {
                statuses
                    .iter()
                    .map(|c| {
                        let state = c.state.as_ref();
                        let (text, code) =
                            if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                                (
                                    format!("Terminated({})", t.reason.as_deref().unwrap_or("")),
                                    Some(t.exit_code),
                                )
                            } else if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                                (
                                    format!("Waiting({})", w.reason.as_deref().unwrap_or("")),
                                    None,
                                )
                            } else if state.and_then(|s| s.running.as_ref()).is_some() {
                                ("Running".to_string(), None)
                            } else {
                                ("Unknown".to_string(), None)
                            };
                        if c.name == crate::api::TENSORFLOW_CONTAINER {
                            exit_code = code;
                        }
                        ContainerStatus {
                            name: c.name.clone(),
                            state: Some(text),
                            exit_code: code,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        ReplicaView {
            key,
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
            phase,
            containers,
            cluster,
            exit_code,
        }
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, ReplicaPhase::Succeeded | ReplicaPhase::Failed)
    }
}

/// `tasks[]`: one entry per replica type present, in chief, worker, ps,
/// evaluator order, each replica in index order.
pub fn tasks(
    views: &[ReplicaView],
    restart_counts: &BTreeMap<ReplicaType, i32>,
    types: &[ReplicaType],
) -> Vec<TaskStatus> {
    types
        .iter()
        .map(|t| {
            let mut replicas: Vec<&ReplicaView> =
                views.iter().filter(|v| v.key.replica_type == *t).collect();
            replicas.sort_by_key(|v| v.key.index);
            TaskStatus {
                replica_type: t.as_str().to_string(),
                restart_count: restart_counts.get(t).copied().unwrap_or(0),
                replica_status: replicas
                    .into_iter()
                    .map(|v| ReplicaStatus {
                        name: v.pod_name.clone(),
                        uid: v.uid.clone(),
                        phase: v.phase,
                        containers: v.containers.clone(),
                        cluster: v.cluster.clone(),
                    })
                    .collect(),
            }
        })
        .collect()
}

pub fn aggregate(views: &[ReplicaView]) -> Aggregate {
    let mut a = Aggregate::default();
    for v in views {
        let slot = match v.phase {
            ReplicaPhase::Creating => &mut a.creating,
            ReplicaPhase::Pending => &mut a.pending,
            ReplicaPhase::Running => &mut a.running,
            ReplicaPhase::Succeeded => &mut a.succeeded,
            ReplicaPhase::Failed => &mut a.failed,
            ReplicaPhase::Deleted => &mut a.deleted,
            ReplicaPhase::Unknown => &mut a.unknown,
        };
        *slot += 1;
    }
    a
}

/// Sets a condition; its lastTransitionTime moves only when its status
/// changes. Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<JobCondition>,
    condition_type: JobConditionType,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let existing = conditions
        .iter_mut()
        .find(|c| c.condition_type == condition_type);
    match existing {
        Some(c)
            if c.status == status
                && c.reason.as_deref() == Some(reason)
                && c.message.as_deref() == Some(message) =>
        {
            false
        }
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(now.clone());
            }
            c.status = status;
            c.reason = Some(reason.to_string());
            c.message = Some(message.to_string());
            c.last_update_time = Some(now.clone());
            true
        }
        None => {
            conditions.push(JobCondition {
                condition_type,
                status,
                last_transition_time: Some(now.clone()),
                last_update_time: Some(now.clone()),
                reason: Some(reason.to_string()),
                message: Some(message.to_string()),
            });
            conditions.sort_by_key(|c| c.condition_type);
            true
        }
    }
}

pub fn condition(
    conditions: &[JobCondition],
    condition_type: JobConditionType,
) -> Option<&JobCondition> {
    conditions
        .iter()
        .find(|c| c.condition_type == condition_type)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("valid pod")
    }

    #[test]
    fn pod_states_map_to_replica_phases_and_exit_codes() {
        let key = ReplicaKey::new(ReplicaType::Worker, 1);
        let failed = pod(
            json!({"metadata": {"name": "j-worker-1", "uid": "u1"}, "status": {"phase": "Failed",
            "containerStatuses": [{"name": "tensorflow", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}}),
        );
        let view = ReplicaView::of_pod(key, &failed, Some("home".into()));
        assert_eq!(view.phase, ReplicaPhase::Failed);
        assert_eq!(view.exit_code, Some(137));
        assert_eq!(
            view.containers[0].state.as_deref(),
            Some("Terminated(Error)")
        );
        let deleting = pod(
            json!({"metadata": {"name": "j", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}}),
        );
        assert_eq!(
            ReplicaView::of_pod(key, &deleting, None).phase,
            ReplicaPhase::Deleted
        );
    }

    #[test]
    fn aggregate_counts_each_phase() {
        let key = |i| ReplicaKey::new(ReplicaType::Worker, i);
        let mut views = vec![
            ReplicaView::creating(key(0), "a".into(), None),
            ReplicaView::creating(key(1), "b".into(), None),
        ];
        views[1].phase = ReplicaPhase::Running;
        let a = aggregate(&views);
        assert_eq!((a.creating, a.running, a.pending), (1, 1, 0));
    }

    #[test]
    fn tasks_list_types_in_order_with_restart_counts() {
        let views = vec![
            ReplicaView::creating(
                ReplicaKey::new(ReplicaType::Worker, 1),
                "j-worker-1".into(),
                None,
            ),
            ReplicaView::creating(
                ReplicaKey::new(ReplicaType::Worker, 0),
                "j-worker-0".into(),
                None,
            ),
            ReplicaView::creating(
                ReplicaKey::new(ReplicaType::Chief, 0),
                "j-chief-0".into(),
                None,
            ),
        ];
        let counts = BTreeMap::from([(ReplicaType::Worker, 2)]);
        let t = tasks(&views, &counts, &[ReplicaType::Chief, ReplicaType::Worker]);
        assert_eq!(t[0].replica_type, "chief");
        assert_eq!(t[1].restart_count, 2);
        assert_eq!(
            t[1].replica_status
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["j-worker-0", "j-worker-1"]
        );
    }

    #[test]
    fn conditions_keep_transition_time_while_status_holds() {
        let t1 = Time(jiff::Timestamp::from_second(1).expect("valid"));
        let t2 = Time(jiff::Timestamp::from_second(2).expect("valid"));
        let mut c = Vec::new();
        assert!(set_condition(
            &mut c,
            JobConditionType::Running,
            ConditionStatus::True,
            "Running",
            "m",
            &t1
        ));
        assert!(
            !set_condition(
                &mut c,
                JobConditionType::Running,
                ConditionStatus::True,
                "Running",
                "m",
                &t2
            ),
            "no change, no write"
        );
        assert!(set_condition(
            &mut c,
            JobConditionType::Running,
            ConditionStatus::True,
            "Running",
            "m2",
            &t2
        ));
        assert_eq!(c[0].last_transition_time, Some(t1.clone()));
        assert!(set_condition(
            &mut c,
            JobConditionType::Running,
            ConditionStatus::False,
            "Succeeded",
            "m",
            &t2
        ));
        assert_eq!(c[0].last_transition_time, Some(t2));
    }
}
