//! Container logs: the simulated kubelet writes a few deterministic lines
//! per attempt of a container, and `GET
//! /api/v1/namespaces/{ns}/pods/{name}/log` serves them as kube-apiserver
//! does (text/plain; `container`, `follow`, `tailLines`, `previous`).
//!
//! Lines of attempt `n` (1-based, counted per pod name in the cluster, as
//! the `exit-codes` annotation counts them) of pod `p`:
//!
//! ```text
//! p attempt n: started
//! p attempt n: running
//! p attempt n: exited with code C
//! ```
//!
//! `follow` streams lines as they are written and ends when the container
//! exits or the pod is gone.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, header};
use serde_json::Value;
use tokio::sync::Notify;

use super::Cluster;
use super::error::{ApiError, ApiResult, Target};
use super::http::{Body, Query, bytes_response};

/// The lines attempt `attempt` (0-based) of a container of `pod` writes
/// when it starts.
fn started_lines(pod: &str, attempt: usize) -> Vec<String> {
    let n = attempt + 1;
    vec![
        format!("{pod} attempt {n}: started"),
        format!("{pod} attempt {n}: running"),
    ]
}

/// One container's log: the lines of its current instance and, after an
/// in-place restart, of the one before.
#[derive(Debug, Clone, Default, PartialEq)]
struct ContainerLog {
    pod: String,
    attempt: usize,
    current: Vec<String>,
    previous: Option<Vec<String>>,
    /// Instances started so far: a follower sees when its instance was replaced.
    instances: usize,
    exited: bool,
}

/// Each container's log, by container name.
type PodLogs = BTreeMap<String, ContainerLog>;

/// Every container log of a cluster, by pod uid, and a signal for followers.
#[derive(Default)]
pub struct Logs {
    pods: Mutex<HashMap<String, PodLogs>>,
    changed: Notify,
}

impl Logs {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, PodLogs>) -> T) -> T {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let result = f(&mut pods);
        drop(pods);
        self.changed.notify_waiters();
        result
    }

    /// Attempt `attempt` (0-based) of the containers of pod `uid` starts;
    /// the lines of an earlier instance become `previous`.
    pub fn start(&self, uid: &str, pod: &str, containers: &[String], attempt: usize) {
        self.with(|pods| {
            let logs = pods.entry(uid.to_string()).or_default();
            for container in containers {
                let log = logs.entry(container.clone()).or_default();
                if log.instances > 0 {
                    log.previous = Some(std::mem::take(&mut log.current));
                }
                log.pod = pod.to_string();
                log.attempt = attempt;
                log.current = started_lines(pod, attempt);
                log.instances += 1;
                log.exited = false;
            }
        });
    }

    /// The running containers of pod `uid` exit with `code`; a container
    /// that never started writes nothing.
    pub fn exit(&self, uid: &str, code: i32) {
        self.with(|pods| {
            for log in pods
                .get_mut(uid)
                .into_iter()
                .flat_map(|logs| logs.values_mut())
            {
                if !log.exited {
                    let n = log.attempt + 1;
                    log.current
                        .push(format!("{} attempt {n}: exited with code {code}", log.pod));
                    log.exited = true;
                }
            }
        });
    }

    /// The pod is gone: its logs go with it.
    pub fn forget(&self, uid: &str) {
        self.with(|pods| pods.remove(uid));
    }

    fn get(&self, uid: &str, container: &str) -> Option<ContainerLog> {
        let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        pods.get(uid)?.get(container).cloned()
    }
}

/// The last `tail` of `lines` (all without a tail), each ending in a newline.
fn text(lines: &[String], tail: Option<usize>) -> String {
    let skip = tail.map_or(0, |t| lines.len().saturating_sub(t));
    lines[skip..].iter().map(|l| format!("{l}\n")).collect()
}

fn names(list: Option<&Value>) -> Vec<String> {
    list.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

/// The container a log request is about, as kube-apiserver's
/// `validateContainer` decides and words it.
fn container_of(pod: &Value, pod_name: &str, asked: Option<&str>) -> ApiResult<String> {
    let containers = names(pod.pointer("/spec/containers"));
    match asked {
        Some(name) if containers.iter().any(|c| c == name) => Ok(name.to_string()),
        Some(name) => Err(ApiError::bad_request(format!(
            "container {name} is not valid for pod {pod_name}"
        ))),
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}"
            ))),
            many => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                many.join(" ")
            ))),
        },
    }
}

/// Why a container has no log yet: its waiting reason, as the kubelet says.
fn waiting_reason(pod: &Value, container: &str) -> String {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
        .and_then(|s| s.pointer("/state/waiting/reason"))
        .and_then(Value::as_str)
        .unwrap_or("ContainerCreating")
        .to_string()
}

fn plain(body: String) -> Response<Body> {
    bytes_response(StatusCode::OK, "text/plain", Bytes::from(body))
}

/// `GET /api/v1/namespaces/{namespace}/pods/{name}/log`.
pub fn serve(
    cluster: &Arc<Cluster>,
    namespace: &str,
    name: &str,
    query: &Query,
) -> ApiResult<Response<Body>> {
    let pods = cluster
        .store
        .resource_type("", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let stored = cluster.store.get(&pods, namespace, name).map_err(|_| {
        ApiError::not_found(&Target {
            group: "",
            plural: "pods",
            name,
        })
    })?;
    let pod = stored.value();
    let container = container_of(&pod, name, query.get("container"))?;
    let tail = match query.number("tailLines")? {
        Some(t) if t < 0 => {
            return Err(ApiError::invalid(
                &Target {
                    group: "",
                    plural: "pods",
                    name,
                },
                "PodLogOptions",
                "tailLines",
                &format!("Invalid value: {t}: must be greater than or equal to 0"),
            ));
        }
        t => t.map(|t| t as usize),
    };
    // A pod not bound to a node has no log, and no error either.
    if pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Ok(plain(String::new()));
    }
    let Some(log) = cluster.logs.get(&stored.uid, &container) else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {}",
            waiting_reason(&pod, &container)
        )));
    };
    if query.flag("previous") {
        return match &log.previous {
            Some(lines) => Ok(plain(text(lines, tail))),
            None => Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            ))),
        };
    }
    if !query.flag("follow") || log.exited {
        return Ok(plain(text(&log.current, tail)));
    }
    Ok(follow(
        cluster.clone(),
        stored.uid.clone(),
        container,
        log,
        tail,
    ))
}

type Sender = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

/// A streamed log: the lines so far, then each new one, until the
/// container's instance exits or the pod is gone.
fn follow(
    cluster: Arc<Cluster>,
    uid: String,
    container: String,
    first: ContainerLog,
    tail: Option<usize>,
) -> Response<Body> {
    let (mut tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let instance = first.instances;
        if send(&mut tx, text(&first.current, tail)).await.is_err() {
            return;
        }
        let mut sent = first.current.len();
        let mut shutdown = cluster.shutdown.clone();
        // A client that went away ends the follower at the next change.
        while !tx.is_closed() {
            let changed = cluster.logs.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let Some(log) = cluster.logs.get(&uid, &container) else {
                return;
            };
            // After an in-place restart this follower's instance is `previous`.
            let (lines, ended) = match (&log.previous, log.instances == instance) {
                (_, true) => (&log.current, log.exited),
                (Some(previous), false) => (previous, true),
                (None, false) => return,
            };
            let new = &lines[sent.min(lines.len())..];
            if !new.is_empty() && send(&mut tx, text(new, None)).await.is_err() {
                return;
            }
            sent = lines.len();
            if ended {
                return;
            }
            tokio::select! {
                _ = changed => {}
                _ = shutdown.changed() => return,
            }
        }
    });
    let mut resp = Response::new(StreamBody::new(rx).boxed_unsync());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    resp
}

async fn send(tx: &mut Sender, text: String) -> Result<(), mpsc::SendError> {
    if text.is_empty() {
        return Ok(());
    }
    tx.send(Ok(Frame::data(Bytes::from(text)))).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_the_only_one_or_must_be_named() {
        let one = json!({"spec": {"containers": [{"name": "tensorflow"}]}});
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(
            container_of(&one, "p", None).ok(),
            Some("tensorflow".into())
        );
        assert_eq!(container_of(&two, "p", Some("b")).ok(), Some("b".into()));
        for (pod, asked, message) in [
            (&one, Some("x"), "container x is not valid for pod p"),
            (
                &two,
                None,
                "a container name must be specified for pod p, choose one of: [a b]",
            ),
        ] {
            let error = container_of(pod, "p", asked).expect_err("refused");
            assert_eq!((error.code, error.message.as_str()), (400, message));
        }
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let lines: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        assert_eq!(text(&lines, None), "a\nb\nc\n");
        assert_eq!(text(&lines, Some(1)), "c\n");
        assert_eq!(text(&lines, Some(0)), "");
        assert_eq!(text(&lines, Some(9)), "a\nb\nc\n");
    }

    #[test]
    fn a_restart_keeps_the_previous_instance_and_exit_writes_once() {
        let logs = Logs::default();
        let containers = ["c".to_string()];
        logs.exit("u", 1);
        assert_eq!(logs.get("u", "c"), None, "exit does not create a log");
        logs.start("u", "p", &containers, 0);
        logs.exit("u", 1);
        logs.exit("u", 143);
        logs.start("u", "p", &containers, 1);
        let log = logs.get("u", "c").expect("a log");
        let first = [
            "p attempt 1: started",
            "p attempt 1: running",
            "p attempt 1: exited with code 1",
        ]
        .map(String::from);
        assert_eq!(log.previous.as_deref(), Some(&first[..]));
        assert_eq!(log.current, started_lines("p", 1));
        assert_eq!((log.instances, log.exited), (2, false));
        logs.forget("u");
        assert_eq!(logs.get("u", "c"), None);
    }

    /// A pod of one container `tensorflow` with these sim annotations,
    /// once the namespace's default ServiceAccount exists.
    async fn create_pod(cluster: &Cluster, name: &str, annotations: Value) {
        let pods = cluster.store.resource_type("", "pods").expect("pods");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "tensorflow", "image": "tf"}]}});
        let write = super::super::store::WriteMeta {
            manager: "test".into(),
            now: super::super::store::now(),
            dry_run: false,
        };
        for _ in 0..200 {
            match cluster.store.create(&pods, "default", pod.clone(), &write) {
                Ok(_) => return,
                Err(e) if e.code == 403 => {
                    tokio::time::sleep(std::time::Duration::from_millis(25)).await
                }
                Err(e) => panic!("creating {name}: {e}"),
            }
        }
        panic!("{name} was never admitted");
    }

    async fn wait_phase(cluster: &Cluster, name: &str, phase: &str) {
        let pods = cluster.store.resource_type("", "pods").expect("pods");
        for _ in 0..200 {
            let pod = cluster.store.get(&pods, "default", name).expect("pod");
            if pod.field("status.phase").as_deref() == Some(phase) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("{name} never reached {phase}");
    }

    async fn log(cluster: &Arc<Cluster>, name: &str, query: &str) -> ApiResult<String> {
        let resp = serve(cluster, "default", name, &Query::parse(Some(query)))?;
        assert_eq!(
            resp.headers()
                .get(header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            Some(&b"text/plain"[..])
        );
        let body = resp.into_body().collect().await.expect("a body").to_bytes();
        Ok(String::from_utf8(body.to_vec()).expect("UTF-8"))
    }

    const EXITS_3: &str =
        "p attempt 1: started\np attempt 1: running\np attempt 1: exited with code 3\n";

    #[tokio::test]
    async fn a_finished_pod_logs_its_attempt_and_exit_code_and_tail_keeps_the_end() {
        let (running, cluster) = crate::start("logs", &Default::default())
            .await
            .expect("a cluster");
        create_pod(
            &cluster,
            "p",
            json!({
                "sim.federation.tfjob.io/pending-seconds": "0",
                "sim.federation.tfjob.io/run-seconds": "0.1",
                "sim.federation.tfjob.io/exit-codes": "3",
            }),
        )
        .await;
        wait_phase(&cluster, "p", "Failed").await;
        assert_eq!(log(&cluster, "p", "").await.ok().as_deref(), Some(EXITS_3));
        assert_eq!(
            log(&cluster, "p", "tailLines=1&container=tensorflow")
                .await
                .ok()
                .as_deref(),
            Some("p attempt 1: exited with code 3\n")
        );
        let previous = log(&cluster, "p", "previous=true")
            .await
            .expect_err("no previous");
        assert_eq!(previous.code, 400);
        let negative = log(&cluster, "p", "tailLines=-1")
            .await
            .expect_err("refused");
        assert_eq!(negative.code, 422, "{}", negative.message);
        running.stop().await;
    }

    #[tokio::test]
    async fn follow_streams_until_the_container_exits() {
        let (running, cluster) = crate::start("logs", &Default::default())
            .await
            .expect("a cluster");
        create_pod(
            &cluster,
            "p",
            json!({
                "sim.federation.tfjob.io/pending-seconds": "0",
                "sim.federation.tfjob.io/run-seconds": "0.5",
                "sim.federation.tfjob.io/exit-codes": "3",
            }),
        )
        .await;
        wait_phase(&cluster, "p", "Running").await;
        let followed = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            log(&cluster, "p", "follow=true"),
        )
        .await
        .expect("the stream ends when the container exits");
        assert_eq!(followed.ok().as_deref(), Some(EXITS_3));
        running.stop().await;
    }

    #[tokio::test]
    async fn errors_are_worded_as_kube_apiserver_words_them() {
        let (running, cluster) = crate::start("logs", &Default::default())
            .await
            .expect("a cluster");
        let missing = log(&cluster, "nope", "").await.expect_err("no such pod");
        assert_eq!(
            (missing.code, missing.message.as_str()),
            (404, "pods \"nope\" not found")
        );
        create_pod(
            &cluster,
            "w",
            json!({
                "sim.federation.tfjob.io/pending-seconds": "0",
                "sim.federation.tfjob.io/waiting-reason": "ImagePullBackOff",
            }),
        )
        .await;
        let pods = cluster.store.resource_type("", "pods").expect("pods");
        for _ in 0..200 {
            let pod = cluster
                .store
                .get(&pods, "default", "w")
                .expect("pod")
                .value();
            if pod.pointer("/status/containerStatuses").is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        let waiting = log(&cluster, "w", "").await.expect_err("waiting");
        assert_eq!(
            (waiting.code, waiting.message.as_str()),
            (
                400,
                "container \"tensorflow\" in pod \"w\" is waiting to start: ImagePullBackOff"
            )
        );
        let bad = log(&cluster, "w", "container=sidecar")
            .await
            .expect_err("no such container");
        assert_eq!(
            (bad.code, bad.message.as_str()),
            (400, "container sidecar is not valid for pod w")
        );
        running.stop().await;
    }
}
