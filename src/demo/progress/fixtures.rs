//! The jobs and trackers the unit tests of the tracker, the view and the
//! rendering share: job objects with a given status, and trackers part way
//! through a demo.

use std::time::Duration;

use serde_json::json;

use super::{JobKey, Tracker};
use crate::api::{JobPhase, TensorFlowTrainingJob};

pub(super) fn job(name: &str, status: serde_json::Value) -> TensorFlowTrainingJob {
    serde_json::from_value(json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicaSpecs": []},
        "status": status,
    }))
    .expect("a job")
}

pub(super) fn replica(name: &str, cluster: &str, phase: &str) -> serde_json::Value {
    json!({"name": name, "phase": phase, "cluster": cluster})
}

/// A running job `name` with replicas on member-1 and member-2.
pub(super) fn running(name: &str) -> serde_json::Value {
    let r = |replica_name: &str, cluster: &str, phase: &str| {
        replica(&format!("{name}-{replica_name}"), cluster, phase)
    };
    json!({"phase": "Running", "tasks": [
        {"type": "chief", "restartCount": 0, "replicaStatus": [r("chief-0", "member-1", "Running")]},
        {"type": "worker", "restartCount": 0, "replicaStatus": [
            r("worker-0", "member-1", "Running"),
            r("worker-1", "member-2", "Pending"),
            r("worker-2", "member-2", "Running"),
        ]},
    ]})
}

pub(super) fn key(name: &str) -> JobKey {
    JobKey {
        namespace: "default".into(),
        name: name.into(),
    }
}

pub(super) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(super) fn tracker() -> Tracker {
    Tracker::new(
        vec![
            (key("a"), JobPhase::Succeeded),
            (key("b"), JobPhase::Succeeded),
            (key("c"), JobPhase::Running),
        ],
        secs(60),
        secs(5),
    )
}

pub(super) fn finished_tracker() -> Tracker {
    let mut t = tracker();
    for i in 0..3 {
        t.submitted(i, secs(i as u64));
    }
    t.observe(
        &job(
            "a",
            json!({"phase": "Succeeded", "tasks": [{"type": "worker", "restartCount": 2, "replicaStatus": [
                replica("a-worker-0", "home", "Succeeded"), replica("a-worker-1", "member-1", "Succeeded")]}]}),
        ),
        secs(10),
    );
    t.observe(
        &job(
            "b",
            json!({"phase": "Failed", "conditions": [{"type": "Failed", "status": "True", "reason": "ReplicaFailed",
                "message": "replica worker-0 (pod b-worker-0) exited with code 1; restartPolicy Never does not restart it"}],
                "tasks": [{"type": "worker", "replicaStatus": [replica("b-worker-0", "member-2", "Failed")]}]}),
        ),
        secs(11),
    );
    t.observe(&job("c", json!({"phase": "Running"})), secs(12));
    t
}
