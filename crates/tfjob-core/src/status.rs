//! Folding replica states into a job's status: the replica view of a pod,
//! `tasks[]`, `aggregate` and conditions that keep their transition times.
//! Pure: no API calls.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    Aggregate, ConditionStatus, ContainerStatus, DependentReference, DependentStatus, JobCondition,
    JobConditionType, JobPhase, ReplicaKey, ReplicaPhase, ReplicaStatus, ReplicaType, TaskStatus,
    TensorFlowTrainingJobStatus,
};
use crate::observed::{ContainerState, ObservedPod};

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
    pub fn of_pod(key: ReplicaKey, pod: &ObservedPod, cluster: Option<String>) -> ReplicaView {
        let deleting = pod.is_deleting();
        let phase = match pod.phase.as_deref() {
            _ if deleting => ReplicaPhase::Deleted,
            Some("Pending") | None => ReplicaPhase::Pending,
            Some("Running") => ReplicaPhase::Running,
            Some("Succeeded") => ReplicaPhase::Succeeded,
            Some("Failed") => ReplicaPhase::Failed,
            Some(_) => ReplicaPhase::Unknown,
        };
        let mut view = ReplicaView {
            key,
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone(),
            phase,
            containers: Vec::new(),
            cluster,
            exit_code: None,
        };
        if deleting {
            // A pod on its way out: its last container states (SIGTERM, 143)
            // are noise, and leaving them out keeps the view, and so the
            // status, from changing until the pod is gone.
            return view;
        }
        for container in &pod.containers {
            let (text, code) = match &container.state {
                ContainerState::Terminated { exit_code, reason } => (
                    format!("Terminated({})", reason.as_deref().unwrap_or("")),
                    Some(*exit_code),
                ),
                ContainerState::Waiting { reason } => (
                    format!("Waiting({})", reason.as_deref().unwrap_or("")),
                    None,
                ),
                ContainerState::Running => ("Running".to_string(), None),
                ContainerState::Unknown => ("Unknown".to_string(), None),
            };
            if container.name == crate::api::TENSORFLOW_CONTAINER {
                view.exit_code = code;
            }
            view.containers.push(ContainerStatus {
                name: container.name.clone(),
                state: Some(text),
                exit_code: code,
            });
        }
        view
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, ReplicaPhase::Succeeded | ReplicaPhase::Failed)
    }

    /// The replica as `tasks[].replicaStatus[]` shows it.
    pub fn replica_status(&self) -> ReplicaStatus {
        ReplicaStatus {
            name: self.pod_name.clone(),
            uid: self.uid.clone(),
            phase: self.phase,
            containers: self.containers.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

/// `tasks[]`: one entry per replica type present, in chief, worker, ps,
/// evaluator order, each replica in index order.
pub fn tasks<'a>(
    views: impl IntoIterator<Item = &'a ReplicaView>,
    restart_counts: &BTreeMap<ReplicaType, i32>,
    types: &[ReplicaType],
) -> Vec<TaskStatus> {
    let mut views: Vec<&ReplicaView> = views.into_iter().collect();
    views.sort_by_key(|v| v.key);
    types
        .iter()
        .map(|t| TaskStatus {
            replica_type: t.as_str().to_string(),
            restart_count: restart_counts.get(t).copied().unwrap_or(0),
            replica_status: views
                .iter()
                .filter(|v| v.key.replica_type == *t)
                .map(|v| v.replica_status())
                .collect(),
        })
        .collect()
}

/// How long to wait before writing a job's status: nothing when the last
/// write (`since_last`, None if none yet) is at least `interval` ago, else
/// the rest of the interval.
pub fn write_delay(since_last: Option<Duration>, interval: Duration) -> Duration {
    since_last.map_or(Duration::ZERO, |since| interval.saturating_sub(since))
}

/// The wait before a write of replica details alone, after `earlier` such
/// writes since the last summary change: `base`, doubling each time, at
/// most 2^[`DETAIL_DOUBLINGS`] × `base`.
pub fn detail_interval(base: Duration, earlier: u32) -> Duration {
    base.saturating_mul(2u32.pow(earlier.min(DETAIL_DOUBLINGS)))
}

/// The wait before a write of replica details alone: the spacing after the
/// previous write (`interval`, see [`detail_interval`]), and at least `base`
/// after the first change it would carry (`since_change` ago), so that a
/// summary change coming meanwhile (the job's next phase, usually within a
/// moment of its replicas' changes) carries the details in the same write.
pub fn detail_delay(
    since_last: Option<Duration>,
    interval: Duration,
    since_change: Duration,
    base: Duration,
) -> Duration {
    write_delay(since_last, interval).max(base.saturating_sub(since_change))
}

/// How often the wait before a detail-only write doubles.
pub const DETAIL_DOUBLINGS: u32 = 2;

/// The count of detail-only writes to assume after a write: one more after
/// a detail-only write; none after a summary change, except where the
/// longest wait applies at once ([`details_wait_longest`]).
pub fn detail_writes_after(earlier: u32, summary_changed: bool, phase: Option<JobPhase>) -> u32 {
    match (summary_changed, details_wait_longest(phase)) {
        (false, _) => earlier.saturating_add(1),
        (true, false) => 0,
        (true, true) => DETAIL_DOUBLINGS,
    }
}

/// Whether replica details alone wait the longest after a summary change
/// that left the job in `phase`: Pending, while its replicas start (the
/// Running phase usually comes first and carries them), and once it ended
/// (its clean-up still changing replica states costs one more write).
pub fn details_wait_longest(phase: Option<JobPhase>) -> bool {
    matches!(
        phase,
        Some(JobPhase::Pending | JobPhase::Succeeded | JobPhase::Failed)
    )
}

/// Whether `new` differs from what was written (`old`) in what users act
/// upon: phase, conditions (but Initialized, which only says every pod was
/// created), restart counts or the TensorBoard — as opposed to replica
/// states and counts alone.
pub fn summary_changed(
    old: Option<&TensorFlowTrainingJobStatus>,
    new: &TensorFlowTrainingJobStatus,
) -> bool {
    let Some(old) = old else { return true };
    let restarts = |s: &TensorFlowTrainingJobStatus| -> Vec<(String, i32)> {
        s.tasks
            .iter()
            .map(|t| (t.replica_type.clone(), t.restart_count))
            .collect()
    };
    let conditions = |s: &'_ TensorFlowTrainingJobStatus| -> Vec<JobCondition> {
        s.conditions
            .iter()
            .filter(|c| c.condition_type != JobConditionType::Initialized)
            .cloned()
            .collect()
    };
    old.phase != new.phase
        || conditions(old) != conditions(new)
        || old.backoff_count != new.backoff_count
        || old.tensorboard != new.tensorboard
        || restarts(old) != restarts(new)
}

/// The uids of the pods whose end the status already shows (Succeeded,
/// Failed, or Deleted — a pod deleted by someone else counts as an exit).
/// The controller acts on an exit before it writes the status that shows it
/// (a restart is written at once), so after a controller restart these
/// exits must not be acted upon, nor counted, again.
pub fn handled_exits(status: &TensorFlowTrainingJobStatus) -> BTreeSet<String> {
    status
        .tasks
        .iter()
        .flat_map(|t| &t.replica_status)
        .filter(|r| {
            matches!(
                r.phase,
                ReplicaPhase::Succeeded | ReplicaPhase::Failed | ReplicaPhase::Deleted
            )
        })
        .filter_map(|r| r.uid.clone())
        .collect()
}

/// The replicas as a stored status shows them, so a restarted controller
/// writes them again unchanged until their actors report.
pub fn views_of(
    status: &TensorFlowTrainingJobStatus,
    job_name: &str,
) -> BTreeMap<ReplicaKey, ReplicaView> {
    let mut views = BTreeMap::new();
    for task in &status.tasks {
        let Some(replica_type) = ReplicaType::parse(&task.replica_type) else {
            continue;
        };
        let prefix = format!("{job_name}-{replica_type}-");
        for replica in &task.replica_status {
            let Some(index) = replica
                .name
                .strip_prefix(&prefix)
                .and_then(|i| i.parse().ok())
            else {
                continue;
            };
            let key = ReplicaKey::new(replica_type, index);
            views.insert(
                key,
                ReplicaView {
                    key,
                    pod_name: replica.name.clone(),
                    uid: replica.uid.clone(),
                    phase: replica.phase,
                    containers: replica.containers.clone(),
                    cluster: replica.cluster.clone(),
                    exit_code: replica
                        .containers
                        .iter()
                        .find(|c| c.name == crate::api::TENSORFLOW_CONTAINER)
                        .and_then(|c| c.exit_code),
                },
            );
        }
    }
    views
}

/// The JSON patch that makes the stored status exactly `status`: the
/// whole status is replaced, so that no field the controller dropped (and
/// no field someone else added) stays behind, and the status read back is
/// the one written (its seal verifies).
pub fn replacement(status: &TensorFlowTrainingJobStatus) -> serde_json::Value {
    serde_json::json!([{"op": "add", "path": "/status", "value": status}])
}

/// The top-level status fields in which `b` differs from `a`.
pub fn changed_fields(
    a: Option<&TensorFlowTrainingJobStatus>,
    b: Option<&TensorFlowTrainingJobStatus>,
) -> Vec<String> {
    let object = |s: Option<&TensorFlowTrainingJobStatus>| match s.map(serde_json::to_value) {
        Some(Ok(serde_json::Value::Object(fields))) => fields,
        _ => serde_json::Map::new(),
    };
    let (a, b) = (object(a), object(b));
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter(|name| a.get(*name) != b.get(*name))
        .cloned()
        .collect()
}

/// `aggregate`: the replicas counted by phase.
pub fn aggregate<'a>(views: impl IntoIterator<Item = &'a ReplicaView>) -> Aggregate {
    let mut a = Aggregate::default();
    for v in views {
        *phase_count(&mut a, v.phase) += 1;
    }
    a
}

/// The aggregate's count of replicas in `phase`.
pub fn phase_count(aggregate: &mut Aggregate, phase: ReplicaPhase) -> &mut i32 {
    match phase {
        ReplicaPhase::Creating => &mut aggregate.creating,
        ReplicaPhase::Pending => &mut aggregate.pending,
        ReplicaPhase::Running => &mut aggregate.running,
        ReplicaPhase::Succeeded => &mut aggregate.succeeded,
        ReplicaPhase::Failed => &mut aggregate.failed,
        ReplicaPhase::Deleted => &mut aggregate.deleted,
        ReplicaPhase::Unknown => &mut aggregate.unknown,
    }
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

/// The job's `status.tensorboard` from its TensorBoard (as JSON) as last
/// seen: ready once the TensorBoard's own `status.phase` is Running. A
/// TensorBoard without a status yet was just created.
pub fn tensorboard(board: &serde_json::Value) -> DependentStatus {
    let resource = crate::builders::tensorboard_resource();
    let text = |pointer: &str| {
        board
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let name = text("/metadata/name").unwrap_or_default();
    let phase = board.pointer("/status/phase").and_then(|p| p.as_str());
    let (action, ready, note) = match phase {
        Some("Running") => ("NOP", true, format!("TensorBoard [{name}] is ready")),
        Some(phase) => (
            "NOP",
            false,
            format!("TensorBoard [{name}] is not ready: it is {phase}"),
        ),
        None => (
            "Create",
            false,
            format!("TensorBoard [{name}] is created and not ready yet"),
        ),
    };
    DependentStatus {
        action: Some(action.into()),
        dependent: Some(DependentReference {
            api_version: resource.api_version,
            kind: resource.kind,
            name,
            namespace: text("/metadata/namespace"),
            uid: text("/metadata/uid"),
        }),
        note: Some(note),
        ready,
        reason: Some(
            if ready {
                crate::api::reason::DEPENDENT_READY
            } else {
                crate::api::reason::DEPENDENT_NOT_READY
            }
            .into(),
        ),
        status_type: Some("Normal".into()),
    }
}

/// The job's `status.tensorboard` when its TensorBoard cannot be created:
/// `crd_missing` when the cluster does not serve TensorBoards at all.
pub fn tensorboard_failed(name: &str, crd_missing: bool, error: &str) -> DependentStatus {
    let resource = crate::builders::tensorboard_resource();
    let (note, reason) = if crd_missing {
        (
            format!(
                "TensorBoard {name} cannot be created: the TensorBoard CRD ({}.{}) is not installed in the cluster",
                resource.plural, resource.group
            ),
            crate::api::reason::CRD_NOT_INSTALLED,
        )
    } else {
        (
            format!("TensorBoard {name} cannot be created: {error}"),
            crate::api::reason::DEPENDENT_ERROR,
        )
    };
    DependentStatus {
        action: Some("Create".into()),
        note: Some(note),
        ready: false,
        reason: Some(reason.into()),
        status_type: Some("Warning".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> ObservedPod {
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
    fn writes_are_an_interval_apart() {
        let interval = Duration::from_millis(300);
        assert_eq!(write_delay(None, interval), Duration::ZERO);
        assert_eq!(
            write_delay(Some(Duration::from_secs(5)), interval),
            Duration::ZERO
        );
        assert_eq!(
            write_delay(Some(Duration::from_millis(100)), interval),
            Duration::from_millis(200)
        );
    }

    #[test]
    fn detail_writes_back_off() {
        let base = Duration::from_secs(1);
        let waits: Vec<u64> = (0..6).map(|n| detail_interval(base, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 4, 4, 4]);
        let running = Some(JobPhase::Running);
        assert_eq!(detail_writes_after(3, true, running), 0);
        assert_eq!(detail_writes_after(3, false, running), 4);
        for phase in [JobPhase::Pending, JobPhase::Succeeded, JobPhase::Failed] {
            assert_eq!(
                detail_interval(base, detail_writes_after(0, true, Some(phase))),
                Duration::from_secs(4),
                "{phase:?}: replicas starting, or the clean-up, wait the longest"
            );
        }
    }

    #[test]
    fn a_detail_change_waits_for_a_summary_change_to_carry_it() {
        let (base, ms) = (Duration::from_secs(1), Duration::from_millis);
        // Long after the previous write: not at once, but once the change
        // has stood for `base` (a job whose last worker ends a moment
        // before its chief is written once, Succeeded).
        assert_eq!(detail_delay(Some(ms(2000)), base, ms(0), base), base);
        assert_eq!(detail_delay(Some(ms(2000)), base, ms(400), base), ms(600));
        assert_eq!(detail_delay(Some(ms(2000)), base, ms(1500), base), ms(0));
        // The spacing after the previous write still holds when longer.
        assert_eq!(
            detail_delay(Some(ms(100)), ms(4000), ms(900), base),
            ms(3900)
        );
        assert_eq!(detail_delay(None, base, ms(0), base), base);
    }

    #[test]
    fn replica_states_alone_are_not_a_summary_change() {
        let old: TensorFlowTrainingJobStatus = serde_json::from_value(json!({"phase": "Running",
            "tasks": [{"type": "worker", "restartCount": 0, "replicaStatus": [{"name": "w", "phase": "Running"}]}],
            "aggregate": {"running": 1}}))
        .expect("status");
        assert!(summary_changed(None, &old));
        let mut new = old.clone();
        new.tasks[0].replica_status[0].phase = ReplicaPhase::Succeeded;
        new.aggregate.running = 0;
        new.aggregate.succeeded = 1;
        assert!(!summary_changed(Some(&old), &new));
        new.tasks[0].restart_count = 1;
        assert!(summary_changed(Some(&old), &new));
        let mut new = old.clone();
        new.phase = Some(crate::api::JobPhase::Succeeded);
        assert!(summary_changed(Some(&old), &new));
    }

    #[test]
    fn handled_exits_are_the_finished_replicas_in_the_status() {
        let status: TensorFlowTrainingJobStatus = serde_json::from_value(json!({"tasks": [
            {"type": "worker", "restartCount": 1, "replicaStatus": [
                {"name": "j-worker-0", "uid": "a", "phase": "Failed"},
                {"name": "j-worker-1", "uid": "b", "phase": "Running"},
                {"name": "j-worker-2", "uid": "c", "phase": "Succeeded"},
                {"name": "j-worker-3", "phase": "Creating"},
            ]},
        ]}))
        .expect("status");
        assert_eq!(
            handled_exits(&status),
            BTreeSet::from(["a".to_string(), "c".to_string()])
        );
    }

    #[test]
    fn a_pod_being_deleted_has_a_stable_view() {
        let key = ReplicaKey::new(ReplicaType::Ps, 0);
        let running = pod(
            json!({"metadata": {"name": "j-ps-0", "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Running", "containerStatuses": [{"name": "tensorflow", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {}}}]}}),
        );
        let killed = pod(
            json!({"metadata": {"name": "j-ps-0", "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "tensorflow", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 143}}}]}}),
        );
        let a = ReplicaView::of_pod(key, &running, None);
        assert_eq!(a.phase, ReplicaPhase::Deleted);
        assert_eq!(a, ReplicaView::of_pod(key, &killed, None));
        assert!(!a.is_finished(), "a deleted pod's exit is not acted upon");
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

    #[test]
    fn tensorboard_readiness_follows_its_phase() {
        let board = |status: serde_json::Value| {
            serde_json::json!({"metadata": {"name": "mnist", "namespace": "ml", "uid": "u-1"},
                "spec": {}, "status": status})
        };
        let created = tensorboard(&board(serde_json::Value::Null));
        assert!(!created.ready);
        assert_eq!(created.action.as_deref(), Some("Create"));
        assert_eq!(
            created.reason.as_deref(),
            Some(crate::api::reason::DEPENDENT_NOT_READY)
        );
        let starting = tensorboard(&board(serde_json::json!({"phase": "Initializing"})));
        assert!(!starting.ready);
        assert_eq!(
            starting.note.as_deref(),
            Some("TensorBoard [mnist] is not ready: it is Initializing")
        );
        let running = tensorboard(&board(serde_json::json!({"phase": "Running"})));
        assert!(running.ready);
        assert_eq!(running.action.as_deref(), Some("NOP"));
        assert_eq!(
            running.reason.as_deref(),
            Some(crate::api::reason::DEPENDENT_READY)
        );
        assert_eq!(
            running.note.as_deref(),
            Some("TensorBoard [mnist] is ready")
        );
        let dependent = running.dependent.expect("reference");
        assert_eq!(
            (
                dependent.api_version.as_str(),
                dependent.kind.as_str(),
                dependent.name.as_str()
            ),
            ("tensorstack.dev/v1beta1", "TensorBoard", "mnist")
        );
        assert_eq!(
            (dependent.namespace.as_deref(), dependent.uid.as_deref()),
            (Some("ml"), Some("u-1"))
        );
    }

    #[test]
    fn a_tensorboard_that_cannot_be_made_says_why() {
        let missing = tensorboard_failed("mnist", true, "404");
        assert_eq!(missing.reason.as_deref(), Some("CRDNotInstalled"));
        assert!(
            missing
                .note
                .unwrap_or_default()
                .contains("tensorboards.tensorstack.dev")
        );
        let other = tensorboard_failed("mnist", false, "forbidden");
        assert_eq!(other.reason.as_deref(), Some("DependentError"));
        assert!(!other.ready);
    }
}
