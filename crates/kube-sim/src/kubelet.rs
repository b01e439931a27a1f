//! The simulated kubelet: moves bound pods through their phases as the
//! `sim.federation.tfjob.io/` annotations say
//! (docs/src/testing/simulated-clusters.md), and finishes graceful
//! deletions.
//!
//! | annotation | meaning | default |
//! |---|---|---|
//! | `pending-seconds` | time from binding to Running | 0.2 |
//! | `run-seconds` | time Running before the containers exit | 1 |
//! | `exit-codes` | comma list, one per attempt of this pod name in this cluster; the last repeats | `0` |
//! | `waiting-reason` | keep the containers waiting with this reason (e.g. `ImagePullBackOff`) | none |
//! | `termination-reason` | the terminated reason for a non-zero exit (e.g. `OOMKilled` for 137) | `Error` |
//!
//! A pod whose `restartPolicy` is `Always` or `OnFailure` has its containers
//! restarted in place, as a real kubelet does; the controller's pods use
//! `Never`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Cluster;
use super::scheduler::{PODS, set_condition};
use super::store::{Change, DeleteOptions, EventKind, Scope, Stored, WriteMeta, now};

const ANNOTATION_PREFIX: &str = "sim.federation.tfjob.io/";
/// How long a container takes to exit after SIGTERM.
const TERMINATION_DELAY: Duration = Duration::from_millis(100);
/// Back-off before an in-place container restart.
const RESTART_DELAY: Duration = Duration::from_millis(200);

type Key = (String, String);

/// The kubelet's memory: which pods it already drives and how many attempts
/// each pod name has had.
#[derive(Default)]
struct Kubelet {
    started: HashMap<String, Key>,
    terminating: HashMap<String, Key>,
    attempts: Arc<std::sync::Mutex<HashMap<Key, usize>>>,
    addresses: Arc<AtomicU64>,
}

/// Behaviour a pod asked for through its annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub pending: Duration,
    pub run: Duration,
    pub exit_codes: Vec<i32>,
    pub waiting_reason: Option<String>,
    pub termination_reason: Option<String>,
}

/// The longest phase a script may ask for.
const MAX_SCRIPT_SECONDS: f64 = 10.0 * 365.0 * 86_400.0;

impl Script {
    pub fn from_pod(pod: &Value) -> Script {
        let annotation = |name: &str| {
            pod.pointer("/metadata/annotations")
                .and_then(|a| a.get(format!("{ANNOTATION_PREFIX}{name}")))
                .and_then(Value::as_str)
        };
        // A time from the user: not negative nor NaN, and `inf` or 1e308
        // mean "ten years" (a Duration cannot hold them).
        let seconds = |name: &str, default: f64| {
            Duration::from_secs_f64(
                annotation(name)
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .filter(|s| *s >= 0.0)
                    .unwrap_or(default)
                    .min(MAX_SCRIPT_SECONDS),
            )
        };
        let exit_codes: Vec<i32> = annotation("exit-codes")
            .map(|v| v.split(',').filter_map(|c| c.trim().parse().ok()).collect())
            .unwrap_or_default();
        Script {
            pending: seconds("pending-seconds", 0.2),
            run: seconds("run-seconds", 1.0),
            exit_codes: if exit_codes.is_empty() {
                vec![0]
            } else {
                exit_codes
            },
            waiting_reason: annotation("waiting-reason").map(str::to_string),
            termination_reason: annotation("termination-reason").map(str::to_string),
        }
    }

    /// The exit code of the `attempt`-th run (0-based); the last code repeats.
    pub fn exit_code(&self, attempt: usize) -> i32 {
        self.exit_codes
            .get(attempt)
            .or(self.exit_codes.last())
            .copied()
            .unwrap_or(0)
    }
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn write_meta() -> WriteMeta {
    WriteMeta {
        manager: "kubelet".into(),
        now: now(),
        dry_run: false,
    }
}

/// Runs the kubelet of every node of `cluster` until it shuts down.
pub async fn run(cluster: Arc<Cluster>) {
    let mut shutdown = cluster.shutdown.clone();
    let mut kubelet = Kubelet::default();
    'resync: loop {
        let (objects, mut events) = cluster.store.subscribe(&[PODS]);
        for (_, pod) in &objects {
            kubelet.observe(&cluster, EventKind::Added, pod);
        }
        loop {
            let received = tokio::select! {
                e = events.recv() => e,
                _ = shutdown.changed() => return,
            };
            match received {
                Ok(event) if &*event.type_id == PODS => {
                    kubelet.observe(&cluster, event.kind, &event.object)
                }
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => continue 'resync,
                Err(RecvError::Closed) => return,
            }
        }
    }
}

impl Kubelet {
    fn observe(&mut self, cluster: &Arc<Cluster>, kind: EventKind, pod: &Stored) {
        if kind == EventKind::Deleted {
            cluster.logs.forget(&pod.uid);
            self.started.remove(&pod.uid);
            self.terminating.remove(&pod.uid);
            return;
        }
        let key = (pod.namespace.clone(), pod.name.clone());
        let bound = pod.field("spec.nodeName").is_some_and(|n| !n.is_empty());
        if pod.deleting {
            if bound && !self.terminating.contains_key(&pod.uid) {
                self.terminating.insert(pod.uid.clone(), key.clone());
                tokio::spawn(terminate(cluster.clone(), key, pod.uid.clone()));
            }
            return;
        }
        if bound
            && !self.started.contains_key(&pod.uid)
            && pod.field("status.phase").as_deref() == Some("Pending")
        {
            // Only this cluster's nodes run pods: one bound to a node that
            // does not exist stays Pending, as on a real cluster.
            let Some(host_ip) = pod
                .field("spec.nodeName")
                .and_then(|node| node_ip(cluster, &node))
            else {
                return;
            };
            self.started.insert(pod.uid.clone(), key.clone());
            let ip = self.addresses.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(drive(
                cluster.clone(),
                key,
                pod.uid.clone(),
                Script::from_pod(&pod.value()),
                self.attempts.clone(),
                ip,
                host_ip,
            ));
        }
    }
}

/// Sleeps unless the cluster shuts down first; false on shutdown.
async fn pause(cluster: &Cluster, duration: Duration) -> bool {
    let mut shutdown = cluster.shutdown.clone();
    tokio::select! {
        _ = tokio::time::sleep(duration) => true,
        _ = shutdown.changed() => false,
    }
}

/// Writes the pod's status through `change` if it is still the same,
/// undeleted pod; false when it is gone or being deleted.
fn update_pod(cluster: &Cluster, key: &Key, uid: &str, change: &dyn Fn(&mut Value)) -> bool {
    let Some(pods) = cluster.store.resource_type("", "pods") else {
        return false;
    };
    let alive = std::cell::Cell::new(false);
    let patch = |mut pod: Value| -> super::error::ApiResult<Value> {
        if text(&pod, "/metadata/uid") == uid
            && pod.pointer("/metadata/deletionTimestamp").is_none()
        {
            change(&mut pod);
            alive.set(true);
        }
        Ok(pod)
    };
    cluster
        .store
        .update(
            &pods,
            &key.0,
            &key.1,
            Scope::Whole,
            Change::Patch(&patch),
            &write_meta(),
        )
        .is_ok()
        && alive.get()
}

fn container_names(pod: &Value) -> Vec<(String, String)> {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .map(|c| (text(c, "/name"), text(c, "/image")))
                .collect()
        })
        .unwrap_or_default()
}

fn container_status(
    name: &str,
    image: &str,
    uid: &str,
    state: Value,
    ready: bool,
    restarts: usize,
    last_state: Value,
) -> Value {
    json!({
        "name": name, "image": image, "imageID": format!("{image}@sha256:0000"),
        "containerID": format!("containerd://{}-{name}-{restarts}", &uid[..uid.len().min(8)]),
        "ready": ready, "started": ready, "restartCount": restarts, "state": state, "lastState": last_state,
    })
}

fn pod_conditions(pod: &mut Value, ready: bool, at: &str, reason: Option<&str>) {
    for type_ in ["Initialized", "ContainersReady", "Ready"] {
        let status = if ready || type_ == "Initialized" {
            "True"
        } else {
            "False"
        };
        let mut condition = json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": at});
        if let (Some(reason), "False") = (reason, status) {
            condition["reason"] = json!(reason);
        }
        set_condition(pod, condition);
    }
}

/// The InternalIP of `node` if it is a node of this cluster.
fn node_ip(cluster: &Cluster, node: &str) -> Option<String> {
    let nodes = cluster.store.resource_type("", "nodes")?;
    let node = cluster.store.get(&nodes, "", node).ok()?.value();
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array);
    let internal = addresses
        .into_iter()
        .flatten()
        .find(|a| a.get("type") == Some(&json!("InternalIP")));
    Some(internal.map(|a| text(a, "/address")).unwrap_or_default())
}

/// One pod's life: pending, running attempts, termination.
async fn drive(
    cluster: Arc<Cluster>,
    key: Key,
    uid: String,
    script: Script,
    attempts: Arc<std::sync::Mutex<HashMap<Key, usize>>>,
    serial: u64,
    node_ip: String,
) {
    if !pause(&cluster, script.pending).await {
        return;
    }
    let pod_ip = format!("10.244.{}.{}", (serial / 250) % 250, serial % 250 + 2);
    if let Some(reason) = &script.waiting_reason {
        update_pod(&cluster, &key, &uid, &|pod| {
            let at = now();
            let statuses: Vec<Value> = container_names(pod)
                .iter()
                .map(|(n, i)| container_status(n, i, &uid, json!({"waiting": {"reason": reason, "message": format!("simulated: {reason}")}}), false, 0, json!({})))
                .collect();
            pod["status"]["hostIP"] = json!(node_ip);
            pod["status"]["podIP"] = json!(pod_ip);
            pod["status"]["startTime"] = json!(at);
            pod["status"]["containerStatuses"] = json!(statuses);
            pod_conditions(pod, false, &at, Some("ContainersNotReady"));
        });
        return;
    }
    let containers: Vec<String> = current(&cluster, &key)
        .map(|pod| container_names(&pod).into_iter().map(|(n, _)| n).collect())
        .unwrap_or_default();
    let mut restarts = 0usize;
    let mut last_state = json!({});
    loop {
        let attempt = {
            let mut map = attempts.lock().unwrap_or_else(|e| e.into_inner());
            let n = map.entry(key.clone()).or_default();
            *n += 1;
            *n - 1
        };
        // Logged before the pod shows Running, so that a client that sees
        // Running finds the container's log.
        cluster.logs.start(&uid, &key.1, &containers, attempt);
        let started_at = now();
        let running = update_pod(&cluster, &key, &uid, &|pod| {
            let statuses: Vec<Value> = container_names(pod)
                .iter()
                .map(|(n, i)| {
                    container_status(
                        n,
                        i,
                        &uid,
                        json!({"running": {"startedAt": started_at}}),
                        true,
                        restarts,
                        last_state.clone(),
                    )
                })
                .collect();
            pod["status"]["phase"] = json!("Running");
            pod["status"]["hostIP"] = json!(node_ip);
            pod["status"]["hostIPs"] = json!([{"ip": node_ip}]);
            pod["status"]["podIP"] = json!(pod_ip);
            pod["status"]["podIPs"] = json!([{"ip": pod_ip}]);
            if pod.pointer("/status/startTime").is_none() {
                pod["status"]["startTime"] = json!(started_at);
            }
            pod["status"]["containerStatuses"] = json!(statuses);
            pod_conditions(pod, true, &started_at, None);
        });
        if !running {
            cluster.logs.forget(&uid);
            return;
        }
        if !pause(&cluster, script.run).await {
            return;
        }
        let code = script.exit_code(attempt);
        let reason = match (code, &script.termination_reason) {
            (0, _) => "Completed".to_string(),
            (_, Some(reason)) => reason.clone(),
            _ => "Error".to_string(),
        };
        let finished_at = now();
        let terminated = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": finished_at, "containerID": format!("containerd://{}", &uid[..uid.len().min(8)])}});
        cluster.logs.exit(&uid, code);
        let mut restart = false;
        let alive = update_pod(&cluster, &key, &uid, &|pod| {
            let policy = text(pod, "/spec/restartPolicy");
            let restarting = policy == "Always" || (policy == "OnFailure" && code != 0);
            let statuses: Vec<Value> = container_names(pod)
                .iter()
                .map(|(n, i)| {
                    if restarting {
                        let waiting = json!({"waiting": {"reason": "CrashLoopBackOff"}});
                        container_status(n, i, &uid, waiting, false, restarts, terminated.clone())
                    } else {
                        container_status(
                            n,
                            i,
                            &uid,
                            terminated.clone(),
                            false,
                            restarts,
                            last_state.clone(),
                        )
                    }
                })
                .collect();
            pod["status"]["containerStatuses"] = json!(statuses);
            if !restarting {
                pod["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            }
            pod_conditions(
                pod,
                false,
                &finished_at,
                Some(if restarting {
                    "ContainersNotReady"
                } else {
                    "PodCompleted"
                }),
            );
        });
        if alive && let Some(pod) = current(&cluster, &key) {
            let policy = text(&pod, "/spec/restartPolicy");
            restart = policy == "Always" || (policy == "OnFailure" && code != 0);
        }
        if !alive || !restart || !pause(&cluster, RESTART_DELAY).await {
            return;
        }
        restarts += 1;
        last_state = terminated;
    }
}

fn current(cluster: &Cluster, key: &Key) -> Option<Value> {
    let pods = cluster.store.resource_type("", "pods")?;
    cluster
        .store
        .get(&pods, &key.0, &key.1)
        .ok()
        .map(|p| p.value())
}

/// A pod being deleted: running containers get SIGTERM and exit 143, then
/// the kubelet removes the pod (a delete with grace period 0).
async fn terminate(cluster: Arc<Cluster>, key: Key, uid: String) {
    if !pause(&cluster, TERMINATION_DELAY).await {
        return;
    }
    let Some(pods) = cluster.store.resource_type("", "pods") else {
        return;
    };
    let stop = |mut pod: Value| -> super::error::ApiResult<Value> {
        if text(&pod, "/metadata/uid") != uid
            || !matches!(text(&pod, "/status/phase").as_str(), "Running" | "Pending")
        {
            return Ok(pod);
        }
        let at = now();
        if let Some(statuses) = pod
            .pointer_mut("/status/containerStatuses")
            .and_then(Value::as_array_mut)
        {
            for status in statuses.iter_mut() {
                if status.pointer("/state/running").is_some() {
                    let started = status
                        .pointer("/state/running/startedAt")
                        .cloned()
                        .unwrap_or(Value::Null);
                    status["state"] = json!({"terminated": {"exitCode": 143, "reason": "Error", "startedAt": started, "finishedAt": at}});
                    status["ready"] = json!(false);
                    status["started"] = json!(false);
                }
            }
        }
        pod["status"]["phase"] = json!("Failed");
        pod_conditions(&mut pod, false, &at, Some("PodCompleted"));
        cluster.logs.exit(&uid, 143);
        Ok(pod)
    };
    let _ = cluster.store.update(
        &pods,
        &key.0,
        &key.1,
        Scope::Whole,
        Change::Patch(&stop),
        &write_meta(),
    );
    let still_ours = current(&cluster, &key).is_some_and(|p| text(&p, "/metadata/uid") == uid);
    if still_ours {
        let options = DeleteOptions {
            grace_period_seconds: Some(0),
            precondition_uid: Some(uid),
            ..Default::default()
        };
        let _ = cluster.store.delete(&pods, &key.0, &key.1, &options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_reads_annotations_with_defaults() {
        let pod = json!({"metadata": {"annotations": {
            "sim.federation.tfjob.io/run-seconds": "2.5",
            "sim.federation.tfjob.io/exit-codes": "137, 0",
        }}});
        let script = Script::from_pod(&pod);
        assert_eq!(script.pending, Duration::from_millis(200));
        assert_eq!(script.run, Duration::from_millis(2500));
        assert_eq!(
            (
                script.exit_code(0),
                script.exit_code(1),
                script.exit_code(5)
            ),
            (137, 0, 0),
            "the last code repeats"
        );
        assert_eq!(Script::from_pod(&json!({})).exit_codes, vec![0]);
    }

    #[test]
    fn absurd_times_are_bounded_not_a_panic() {
        for (value, expected) in [
            ("inf", MAX_SCRIPT_SECONDS),
            ("1e308", MAX_SCRIPT_SECONDS),
            ("NaN", 1.0),
            ("-3", 1.0),
            ("two", 1.0),
        ] {
            let pod = json!({"metadata": {"annotations": {
                "sim.federation.tfjob.io/run-seconds": value,
                "sim.federation.tfjob.io/pending-seconds": value,
            }}});
            let script = Script::from_pod(&pod);
            assert_eq!(script.run.as_secs_f64(), expected, "{value}");
        }
    }
}
