//! What `kubectl tfjob` shows, decided without I/O: table rows, the
//! replica `logs` reads, what a waiting job waits for, ages, and the
//! kubectl-like table text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jiff::{SignedDuration, Timestamp};

use crate::api::{
    ConditionStatus, JobConditionType, MemberCluster, ReplicaKey, ReplicaStatus,
    TensorFlowTrainingJob, reason,
};

/// What kubectl prints for an absent value.
pub const NONE: &str = "<none>";

/// A kubectl-like table: upper-case headers, columns three spaces apart,
/// no trailing spaces.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// An age as kubectl prints it (`45s`, `3m12s`, `2h5m`, `3d4h`, `400d`).
pub fn age(elapsed: SignedDuration) -> String {
    let seconds = elapsed.as_secs().max(0);
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 => format!("{minutes}m{}s", seconds % 60),
        _ if hours < 3 => format!("{minutes}m"),
        _ if hours < 8 => format!("{hours}h{}m", minutes % 60),
        _ if hours < 48 => format!("{hours}h"),
        _ if days < 8 => format!("{days}d{}h", hours % 24),
        _ if days < 365 * 2 => format!("{days}d"),
        _ => format!("{}y", days / 365),
    }
}

/// The age of an object created at `created`, at `now`.
pub fn age_of(created: Option<Timestamp>, now: Timestamp) -> String {
    created.map_or_else(|| NONE.to_string(), |c| age(now.duration_since(c)))
}

/// Replicas per cluster, as `member-1:2,member-2:1`; the recorded
/// placement first, else the clusters the replicas' pods report.
pub fn placement(job: &TensorFlowTrainingJob) -> String {
    let status = job.status.as_ref();
    let recorded = status
        .and_then(|s| s.placement.as_ref())
        .and_then(|p| p.assignment.as_ref());
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    match recorded {
        Some(assignment) => {
            for cluster in assignment.values() {
                *counts.entry(cluster).or_default() += 1;
            }
        }
        None => {
            for replica in replicas(job) {
                if let Some(cluster) = &replica.cluster {
                    *counts.entry(cluster).or_default() += 1;
                }
            }
        }
    }
    if counts.is_empty() {
        return NONE.to_string();
    }
    counts
        .iter()
        .map(|(cluster, n)| format!("{cluster}:{n}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn replicas(job: &TensorFlowTrainingJob) -> impl Iterator<Item = &ReplicaStatus> {
    job.status
        .iter()
        .flat_map(|s| &s.tasks)
        .flat_map(|t| &t.replica_status)
}

/// Restarts the controller performed, over every replica type.
pub fn restarts(job: &TensorFlowTrainingJob) -> i32 {
    job.status
        .iter()
        .flat_map(|s| &s.tasks)
        .map(|t| t.restart_count)
        .sum()
}

pub fn phase(job: &TensorFlowTrainingJob) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or_else(|| NONE.to_string(), |p| p.as_str().to_string())
}

/// Headers of `get`: NAMESPACE with `-A`, more columns with `-o wide`.
pub fn job_headers(all_namespaces: bool, wide: bool) -> Vec<&'static str> {
    let mut headers = Vec::new();
    if all_namespaces {
        headers.push("NAMESPACE");
    }
    headers.extend(["NAME", "PHASE", "PLACEMENT", "RESTARTS", "AGE"]);
    if wide {
        headers.extend(["REPLICAS", "RUNNING", "SUCCEEDED", "FAILED", "WAITING"]);
    }
    headers
}

/// One row of `get`, in the order of [`job_headers`].
pub fn job_row(
    job: &TensorFlowTrainingJob,
    all_namespaces: bool,
    wide: bool,
    now: Timestamp,
) -> Vec<String> {
    let mut row = Vec::new();
    if all_namespaces {
        row.push(job.metadata.namespace.clone().unwrap_or_default());
    }
    row.extend([
        job.metadata.name.clone().unwrap_or_default(),
        phase(job),
        placement(job),
        restarts(job).to_string(),
        age_of(created(&job.metadata), now),
    ]);
    if wide {
        let aggregate = job.status.as_ref().map(|s| s.aggregate).unwrap_or_default();
        let waiting = waits_for(job);
        row.extend([
            job.spec.replica_keys().len().to_string(),
            aggregate.running.to_string(),
            aggregate.succeeded.to_string(),
            aggregate.failed.to_string(),
            if waiting.is_empty() {
                NONE.to_string()
            } else {
                waiting.join("; ")
            },
        ]);
    }
    row
}

pub fn created(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<Timestamp> {
    meta.creation_timestamp.as_ref().map(|t| t.0)
}

/// What a job that has not started (or resumed) yet waits for, one line per
/// reason: per cluster (as the controller words it, clusters failing alike
/// named together) while it waits for capacity, the condition's reason
/// otherwise, and each replica whose pod has not started. Empty for a job
/// that waits for nothing.
pub fn waits_for(job: &TensorFlowTrainingJob) -> Vec<String> {
    let Some(status) = &job.status else {
        return vec!["the controller to see the job (no status yet)".to_string()];
    };
    if status.phase.is_some_and(|p| p.is_terminal()) {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let initialized = status
        .conditions
        .iter()
        .find(|c| c.condition_type == JobConditionType::Initialized);
    if let Some(condition) = initialized.filter(|c| c.status == ConditionStatus::False) {
        let message = condition.message.clone().unwrap_or_default();
        match condition.reason.as_deref() {
            Some(reason::WAITING_FOR_CAPACITY) => {
                let clusters = message
                    .strip_prefix("waiting for capacity: ")
                    .unwrap_or(&message);
                lines.extend(clusters.split("; ").map(|c| format!("capacity: {c}")));
            }
            Some(reason) => lines.push(format!("{reason}: {message}")),
            None => lines.push(message),
        }
    }
    if status.phase == Some(crate::api::JobPhase::Paused) {
        lines.push("a resume (spec.runMode.pause)".to_string());
    }
    for replica in replicas(job) {
        let waiting = replica
            .containers
            .iter()
            .filter_map(|c| c.state.as_deref())
            .find(|s| s.starts_with("Waiting"));
        let on = replica.cluster.as_deref().unwrap_or("home");
        match (replica.phase.as_str(), waiting) {
            ("Creating" | "Pending", Some(state)) => {
                lines.push(format!("pod {} on {on}: {state}", replica.name))
            }
            ("Creating" | "Pending", None) => lines.push(format!(
                "pod {} on {on}: {}",
                replica.name,
                replica.phase.as_str()
            )),
            _ => {}
        }
    }
    lines
}

/// One replica as `describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRow {
    pub replica: String,
    pub cluster: String,
    pub pod: String,
    pub phase: String,
    pub exit_code: String,
}

/// Every replica of the job's spec, with its pod's state when it has one
/// and its cluster from the pod or the recorded placement.
pub fn replica_rows(job: &TensorFlowTrainingJob) -> Vec<ReplicaRow> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let assignment = job
        .status
        .as_ref()
        .and_then(|s| s.placement.as_ref())
        .and_then(|p| p.assignment.as_ref());
    job.spec
        .replica_keys()
        .into_iter()
        .map(|key| {
            let pod = key.object_name(&name);
            let status = replicas(job).find(|r| r.name == pod);
            let cluster = status
                .and_then(|s| s.cluster.clone())
                .or_else(|| assignment.and_then(|a| a.get(&key.to_string()).cloned()))
                .unwrap_or_else(|| NONE.to_string());
            let exit_code = status
                .and_then(|s| {
                    let main = s
                        .containers
                        .iter()
                        .find(|c| c.name == crate::api::TENSORFLOW_CONTAINER);
                    main.or(s.containers.first())?.exit_code
                })
                .map_or_else(|| NONE.to_string(), |c| c.to_string());
            ReplicaRow {
                replica: key.to_string(),
                cluster,
                pod: if status.is_some() { pod } else { NONE.into() },
                phase: status.map_or_else(|| NONE.into(), |s| s.phase.as_str().into()),
                exit_code,
            }
        })
        .collect()
}

/// Why `logs` cannot pick a replica.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplicaChoiceError {
    #[error("job {job} has no replica {asked}; its replicas: {known}")]
    Unknown {
        job: String,
        asked: String,
        known: String,
    },
    #[error("job {job} has neither a chief nor a worker: name the replica (its replicas: {known})")]
    NoMaster { job: String, known: String },
    #[error("replica {replica} of job {job} has no pod yet (phase {phase})")]
    NoPod {
        job: String,
        replica: String,
        phase: String,
    },
}

/// The replica `logs JOB [REPLICA]` reads: the one named (`worker-1` or
/// its pod name `JOB-worker-1`), else the job's master (chief-0, else
/// worker-0), whose end decides the job.
pub fn choose_replica<'a>(
    job: &'a TensorFlowTrainingJob,
    asked: Option<&str>,
) -> Result<&'a ReplicaStatus, ReplicaChoiceError> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let keys = job.spec.replica_keys();
    let known = keys
        .iter()
        .map(ReplicaKey::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let key = match asked {
        Some(asked) => keys
            .iter()
            .find(|k| k.to_string() == asked || k.object_name(&name) == asked)
            .copied()
            .ok_or_else(|| ReplicaChoiceError::Unknown {
                job: name.clone(),
                asked: asked.to_string(),
                known: known.clone(),
            })?,
        None => job
            .spec
            .master()
            .ok_or_else(|| ReplicaChoiceError::NoMaster {
                job: name.clone(),
                known: known.clone(),
            })?,
    };
    let pod = key.object_name(&name);
    replicas(job)
        .find(|r| r.name == pod && r.uid.is_some())
        .ok_or_else(|| ReplicaChoiceError::NoPod {
            job: name,
            replica: key.to_string(),
            phase: replicas(job)
                .find(|r| r.name == pod)
                .map_or("none".into(), |r| r.phase.as_str().to_string()),
        })
}

/// Headers of `clusters`.
pub fn cluster_headers(wide: bool) -> Vec<&'static str> {
    let mut headers = vec!["NAME", "READY", "FREE-GPU", "AGE"];
    if wide {
        headers.extend([
            "ALLOCATABLE-GPU",
            "FREE-CPU",
            "FREE-MEMORY",
            "UNSCHEDULABLE",
            "MESSAGE",
        ]);
    }
    headers
}

/// One member as `clusters` shows it: what the controller records in the
/// MemberCluster's status (free = allocatable minus what pods request).
pub fn cluster_row(member: &MemberCluster, wide: bool, now: Timestamp) -> Vec<String> {
    let status = member.status.clone().unwrap_or_default();
    let value = |map: &BTreeMap<String, String>, resource: &str| {
        map.get(resource).cloned().unwrap_or_else(|| NONE.into())
    };
    let ready = status.ready_status().unwrap_or("Unknown").to_string();
    let mut row = vec![
        member.metadata.name.clone().unwrap_or_default(),
        ready,
        value(&status.free, crate::placement::GPU),
        age_of(created(&member.metadata), now),
    ];
    if wide {
        let message = status
            .conditions
            .iter()
            .find(|c| c.condition_type == crate::api::READY_CONDITION)
            .and_then(|c| c.message.clone())
            .unwrap_or_else(|| NONE.into());
        row.extend([
            value(&status.allocatable, crate::placement::GPU),
            value(&status.free, "cpu"),
            value(&status.free, "memory"),
            member.spec.unschedulable.to_string(),
            message,
        ]);
    }
    row
}

/// One Event about a job, as `describe` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLine {
    /// Normal or Warning.
    pub kind: String,
    pub reason: String,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
    /// How often it happened: recorders fold repeats into one Event (a
    /// series) that keeps the first message.
    pub count: i32,
    pub from: String,
    pub message: String,
}

/// When an Event happened, as kubectl shows it: `5s`, or `5s (x3 over 40s)`.
fn event_age(event: &EventLine, now: Timestamp) -> String {
    let last = age_of(event.last.or(event.first), now);
    if event.count > 1 {
        format!(
            "{last} (x{} over {})",
            event.count,
            age_of(event.first, now)
        )
    } else {
        last
    }
}

/// Per replica type: its replicas and the restarts the controller made.
fn task_rows(job: &TensorFlowTrainingJob) -> Vec<Vec<String>> {
    let tasks = job
        .status
        .as_ref()
        .map(|s| s.tasks.as_slice())
        .unwrap_or_default();
    crate::api::ReplicaType::ALL
        .into_iter()
        .filter(|t| job.spec.replicas_of(*t) > 0)
        .map(|t| {
            let restarts = tasks
                .iter()
                .find(|task| task.replica_type == t.as_str())
                .map_or(0, |task| task.restart_count);
            vec![
                t.as_str().to_string(),
                job.spec.replicas_of(t).to_string(),
                restarts.to_string(),
            ]
        })
        .collect()
}

/// `table`, each line indented by two spaces (a section of `describe`).
fn section(headers: &[&str], rows: &[Vec<String>]) -> String {
    table(headers, rows)
        .lines()
        .map(|l| format!("  {l}\n"))
        .collect()
}

/// `kubectl tfjob describe JOB`: kubectl-describe-like sections.
pub fn describe(job: &TensorFlowTrainingJob, events: &[EventLine], now: Timestamp) -> String {
    let mut out = String::new();
    let status = job.status.clone().unwrap_or_default();
    let field = |out: &mut String, name: &str, value: &str| {
        let _ = writeln!(out, "{:<13}{value}", format!("{name}:"));
    };
    field(
        &mut out,
        "Name",
        &job.metadata.name.clone().unwrap_or_default(),
    );
    field(
        &mut out,
        "Namespace",
        &job.metadata.namespace.clone().unwrap_or_default(),
    );
    field(&mut out, "Phase", &phase(job));
    field(&mut out, "Age", &age_of(created(&job.metadata), now));
    field(
        &mut out,
        "Restarts",
        &format!("{} (backoff count {})", restarts(job), status.backoff_count),
    );
    let epoch = status
        .placement
        .as_ref()
        .map_or_else(String::new, |p| format!(" (epoch {})", p.epoch));
    field(&mut out, "Placement", &format!("{}{epoch}", placement(job)));
    // The status counts restarts per replica type, not per replica.
    out.push_str("Tasks:\n");
    out.push_str(&section(&["TYPE", "REPLICAS", "RESTARTS"], &task_rows(job)));
    let replicas: Vec<Vec<String>> = replica_rows(job)
        .into_iter()
        .map(|r| vec![r.replica, r.cluster, r.pod, r.phase, r.exit_code])
        .collect();
    out.push_str("Replicas:\n");
    out.push_str(&section(
        &["REPLICA", "CLUSTER", "POD", "PHASE", "EXIT CODE"],
        &replicas,
    ));
    let waiting = waits_for(job);
    if !waiting.is_empty() {
        out.push_str("Waiting for:\n");
        for line in waiting {
            let _ = writeln!(out, "  {line}");
        }
    }
    out.push_str("Conditions:\n");
    if status.conditions.is_empty() {
        let _ = writeln!(out, "  {NONE}");
    } else {
        let rows: Vec<Vec<String>> = status
            .conditions
            .iter()
            .map(|c| {
                vec![
                    format!("{:?}", c.condition_type),
                    format!("{:?}", c.status),
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        out.push_str(&section(&["TYPE", "STATUS", "REASON", "MESSAGE"], &rows));
    }
    out.push_str("Events:\n");
    if events.is_empty() {
        let _ = writeln!(out, "  {NONE}");
    } else {
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                vec![
                    e.kind.clone(),
                    e.reason.clone(),
                    event_age(e, now),
                    e.from.clone(),
                    e.message.clone(),
                ]
            })
            .collect();
        out.push_str(&section(
            &["TYPE", "REASON", "AGE", "FROM", "MESSAGE"],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(status: serde_json::Value) -> TensorFlowTrainingJob {
        serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "j", "namespace": "ml", "creationTimestamp": "2026-12-02T00:00:00Z"},
            "spec": {"replicaSpecs": [
                {"type": "chief", "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}},
                {"type": "worker", "replicas": 2, "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}}},
            ]},
            "status": status,
        }))
        .expect("a job")
    }

    fn running() -> TensorFlowTrainingJob {
        job(json!({
            "phase": "Running", "backoffCount": 1,
            "aggregate": {"running": 2, "succeeded": 1},
            "placement": {"epoch": 1, "assignment": {"chief-0": "member-1", "worker-0": "member-2", "worker-1": "member-2"}},
            "tasks": [
                {"type": "chief", "restartCount": 0, "replicaStatus": [
                    {"name": "j-chief-0", "uid": "u1", "phase": "Running", "cluster": "member-1",
                     "containers": [{"name": "tensorflow", "state": "Running"}]}]},
                {"type": "worker", "restartCount": 1, "replicaStatus": [
                    {"name": "j-worker-0", "uid": "u2", "phase": "Succeeded", "cluster": "member-2",
                     "containers": [{"name": "tensorflow", "state": "Terminated(Completed)", "exitCode": 0}]},
                    {"name": "j-worker-1", "uid": "u3", "phase": "Running", "cluster": "member-2"}]},
            ],
        }))
    }

    #[test]
    fn tables_align_columns_without_trailing_spaces() {
        let rows = vec![
            vec!["a-long-name".to_string(), "Running".into(), "".into()],
            vec!["b".to_string(), "Pending".into(), "3s".into()],
        ];
        assert_eq!(
            table(&["NAME", "PHASE", "AGE"], &rows),
            "NAME          PHASE     AGE\na-long-name   Running\nb             Pending   3s\n"
        );
    }

    #[test]
    fn ages_read_like_kubectls() {
        for (seconds, expected) in [
            (-5, "0s"),
            (45, "45s"),
            (119, "119s"),
            (192, "3m12s"),
            (3_000, "50m"),
            (4 * 3600 + 5 * 60, "4h5m"),
            (30 * 3600, "30h"),
            (3 * 86_400 + 4 * 3600, "3d4h"),
            (400 * 86_400, "400d"),
            (800 * 86_400, "2y"),
        ] {
            assert_eq!(
                age(SignedDuration::from_secs(seconds)),
                expected,
                "{seconds}"
            );
        }
    }

    #[test]
    fn get_rows_show_phase_placement_restarts_and_age() {
        let now: Timestamp = "2026-12-02T00:01:05Z".parse().expect("a time");
        assert_eq!(
            job_row(&running(), true, false, now),
            ["ml", "j", "Running", "member-1:1,member-2:2", "1", "65s"]
        );
        assert_eq!(
            job_row(&running(), false, true, now)[5..],
            ["3", "2", "1", "0", NONE]
        );
        let fresh = job(json!(null));
        assert_eq!(
            job_row(&fresh, false, false, now),
            ["j", NONE, NONE, "0", "65s"]
        );
    }

    #[test]
    fn a_waiting_job_waits_for_capacity_per_cluster_or_for_its_pods() {
        let capacity = job(
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
            "reason": "WaitingForCapacity",
            "message": "waiting for capacity: member-1, member-2: insufficient nvidia.com/gpu (need 4); home: not a target"}]}),
        );
        assert_eq!(
            waits_for(&capacity),
            [
                "capacity: member-1, member-2: insufficient nvidia.com/gpu (need 4)",
                "capacity: home: not a target"
            ]
        );
        let pulling = job(
            json!({"phase": "Pending", "tasks": [{"type": "chief", "replicaStatus": [
            {"name": "j-chief-0", "uid": "u", "phase": "Pending", "cluster": "member-1",
             "containers": [{"name": "tensorflow", "state": "Waiting(ImagePullBackOff)"}]}]}]}),
        );
        assert_eq!(
            waits_for(&pulling),
            ["pod j-chief-0 on member-1: Waiting(ImagePullBackOff)"]
        );
        let blocked = job(
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
            "reason": "NamespaceMissing", "message": "namespace ml is missing on member-1"}]}),
        );
        assert_eq!(
            waits_for(&blocked),
            ["NamespaceMissing: namespace ml is missing on member-1"]
        );
        assert_eq!(
            waits_for(&job(json!(null))),
            ["the controller to see the job (no status yet)"]
        );
        assert!(waits_for(&running()).is_empty());
        assert!(waits_for(&job(json!({"phase": "Succeeded"}))).is_empty());
    }

    #[test]
    fn replica_rows_cover_the_spec_with_clusters_and_exit_codes() {
        let rows = replica_rows(&running());
        let shown: Vec<[&str; 5]> = rows
            .iter()
            .map(|r| {
                [
                    r.replica.as_str(),
                    r.cluster.as_str(),
                    r.pod.as_str(),
                    r.phase.as_str(),
                    r.exit_code.as_str(),
                ]
            })
            .collect();
        assert_eq!(
            shown,
            [
                ["chief-0", "member-1", "j-chief-0", "Running", NONE],
                ["worker-0", "member-2", "j-worker-0", "Succeeded", "0"],
                ["worker-1", "member-2", "j-worker-1", "Running", NONE],
            ]
        );
        let placed_only = job(json!({"phase": "Pending",
            "placement": {"epoch": 1, "assignment": {"chief-0": "member-1"}}}));
        let row = &replica_rows(&placed_only)[0];
        assert_eq!((row.cluster.as_str(), row.pod.as_str()), ("member-1", NONE));
    }

    #[test]
    fn logs_reads_the_named_replica_or_the_master() {
        let job = running();
        let pick = |asked| choose_replica(&job, asked).map(|r| r.name.clone());
        assert_eq!(pick(None), Ok("j-chief-0".to_string()), "chief is master");
        assert_eq!(pick(Some("worker-1")), Ok("j-worker-1".to_string()));
        assert_eq!(pick(Some("j-worker-0")), Ok("j-worker-0".to_string()));
        assert_eq!(
            pick(Some("ps-0")).map_err(|e| e.to_string()),
            Err("job j has no replica ps-0; its replicas: chief-0, worker-0, worker-1".into())
        );
        let waiting = self::job(json!({"phase": "Pending"}));
        assert_eq!(
            choose_replica(&waiting, None).map_err(|e| e.to_string()),
            Err("replica chief-0 of job j has no pod yet (phase none)".into())
        );
    }

    #[test]
    fn cluster_rows_show_readiness_and_free_gpus() {
        let member: MemberCluster = serde_json::from_value(json!({
            "apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
            "metadata": {"name": "member-1", "creationTimestamp": "2026-12-02T00:00:00Z"},
            "spec": {"kubeconfigSecretRef": {"name": "member-1", "namespace": "tfjob-federator"}},
            "status": {"conditions": [{"type": "Ready", "status": "True", "message": "answers"}],
                       "allocatable": {"nvidia.com/gpu": "4", "cpu": "32"},
                       "free": {"nvidia.com/gpu": "2", "cpu": "30", "memory": "100Gi"}},
        }))
        .expect("a member");
        let now: Timestamp = "2026-12-02T00:00:30Z".parse().expect("a time");
        assert_eq!(
            cluster_row(&member, false, now),
            ["member-1", "True", "2", "30s"]
        );
        assert_eq!(
            cluster_row(&member, true, now)[4..],
            ["4", "30", "100Gi", "false", "answers"]
        );
        let unknown = MemberCluster {
            status: None,
            ..member
        };
        assert_eq!(cluster_row(&unknown, false, now)[1..3], ["Unknown", NONE]);
    }

    #[test]
    fn describe_shows_replicas_per_cluster_conditions_and_events() {
        let now: Timestamp = "2026-12-02T00:00:30Z".parse().expect("a time");
        let at = |t: &str| Some(t.parse::<Timestamp>().expect("a time"));
        let events = [
            EventLine {
                kind: "Normal".into(),
                reason: "Placed".into(),
                first: at("2026-12-02T00:00:01Z"),
                last: None,
                count: 1,
                from: "tfjob-federator".into(),
                message: "Replicas placed: 1 on member-1, 2 on member-2.".into(),
            },
            EventLine {
                kind: "Normal".into(),
                reason: "Restarting".into(),
                first: at("2026-12-02T00:00:10Z"),
                last: at("2026-12-02T00:00:20Z"),
                count: 2,
                from: "tfjob-federator".into(),
                message: "Restarting replica worker-1 after exit code 137 (restart 1 of the job)."
                    .into(),
            },
        ];
        let text = describe(&running(), &events, now);
        let expected = "\
Name:        j
Namespace:   ml
Phase:       Running
Age:         30s
Restarts:    1 (backoff count 1)
Placement:   member-1:1,member-2:2 (epoch 1)
Tasks:
  TYPE     REPLICAS   RESTARTS
  chief    1          0
  worker   2          1
Replicas:
  REPLICA    CLUSTER    POD          PHASE       EXIT CODE
  chief-0    member-1   j-chief-0    Running     <none>
  worker-0   member-2   j-worker-0   Succeeded   0
  worker-1   member-2   j-worker-1   Running     <none>
Conditions:
  <none>
Events:
  TYPE     REASON       AGE                 FROM              MESSAGE
  Normal   Placed       29s                 tfjob-federator   Replicas placed: 1 on member-1, 2 on member-2.
  Normal   Restarting   10s (x2 over 20s)   tfjob-federator   Restarting replica worker-1 after exit code 137 (restart 1 of the job).
";
        assert_eq!(text, expected);
        let waiting = job(
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
            "reason": "WaitingForCapacity", "message": "waiting for capacity: member-1: unschedulable"}]}),
        );
        let text = describe(&waiting, &[], now);
        assert!(
            text.contains("Waiting for:\n  capacity: member-1: unschedulable\nConditions:\n  TYPE"),
            "{text}"
        );
    }
}
