//! Helpers for the operator's integration tests, on either ground (see
//! `common/setup.rs`): jobs as the crate's type, their pods, services and
//! events, kubectl, and watches recorded. A test starts its world with
//! `Setup::on(ground).own_namespace(test).start()`; the tests only talk to
//! the cluster over HTTP, as users do.

pub use super::real::client_for;
pub use super::real::{self, Ground};
pub use super::setup::{Env, Setup};
pub use super::sim_kube::install_schemaless_crd;
pub use super::wait::eventually;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, TensorFlowTrainingJob};

use super::kubectl::kubectl_binary;
use super::setup::Typed;

/// How long a job may take to reach a state a test waits for (generous:
/// tests run in parallel on small machines).
pub const WAIT: Duration = Duration::from_secs(30);
/// Annotation prefix of the simulated kubelet's behaviour script.
pub const SIM: &str = "sim.federation.tfjob.io/";

impl Env<Typed> {
    pub fn jobs(&self) -> Api<TensorFlowTrainingJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The jobs as raw JSON: what the typed API cannot hold or would drop.
    pub fn raw_jobs(&self) -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &real::job_resource())
    }

    pub async fn submit(&self, job: &TensorFlowTrainingJob) -> TensorFlowTrainingJob {
        self.jobs()
            .create(&PostParams::default(), job)
            .await
            .unwrap_or_else(|e| panic!("create job {}: {e}", job.name_any()))
    }

    pub async fn job(&self, name: &str) -> TensorFlowTrainingJob {
        self.jobs()
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get job {name}: {e}"))
    }

    /// Polls the job until `check` holds; fails with the job's status otherwise.
    pub async fn wait_job(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&TensorFlowTrainingJob) -> bool,
    ) -> TensorFlowTrainingJob {
        let jobs = self.jobs();
        eventually(
            &format!("job {name} to be {what}"),
            WAIT,
            async || match jobs.get_opt(name).await {
                Ok(Some(job)) if check(&job) => Ok(job),
                Ok(Some(job)) => Err(format!(
                    "status {}",
                    serde_json::to_string_pretty(&job.status).unwrap_or_default()
                )),
                Ok(None) => Err("(no job)".into()),
                Err(e) => Err(e.to_string()),
            },
        )
        .await
    }

    /// Waits for the job's phase.
    pub async fn wait_phase(&self, name: &str, phase: JobPhase) -> TensorFlowTrainingJob {
        self.wait_job(name, &format!("{phase:?}"), |j| phase_of(j) == Some(phase))
            .await
    }
}

/// What every test of the operator's suites reads, whatever its view of jobs.
impl<View> Env<View> {
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn events(&self) -> Api<Event> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The pods of a job (by the job-name label), by name.
    pub async fn job_pods(&self, job: &str) -> BTreeMap<String, Pod> {
        let params = ListParams::default().labels(&format!("federation.tfjob.io/job-name={job}"));
        self.pods()
            .list(&params)
            .await
            .expect("list pods")
            .items
            .into_iter()
            .map(|p| (p.name_any(), p))
            .collect()
    }

    /// The services of a job (by the job-name label), by name.
    pub async fn job_services(&self, job: &str) -> BTreeMap<String, Service> {
        let params = ListParams::default().labels(&format!("federation.tfjob.io/job-name={job}"));
        self.services()
            .list(&params)
            .await
            .expect("list services")
            .items
            .into_iter()
            .map(|s| (s.name_any(), s))
            .collect()
    }

    /// Waits until the job's pods are exactly `names` (sorted).
    pub async fn wait_pod_names(&self, job: &str, names: &[&str]) -> BTreeMap<String, Pod> {
        let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        expected.sort();
        eventually(&format!("job {job}: pods {expected:?}"), WAIT, async || {
            let pods = self.job_pods(job).await;
            let found = pods.keys().cloned().collect::<Vec<_>>();
            if found == expected {
                Ok(pods)
            } else {
                Err(format!("{found:?}"))
            }
        })
        .await
    }

    /// The events.k8s.io/v1 Events regarding an object of this uid.
    pub async fn events_about(&self, uid: &str) -> Vec<Event> {
        self.events()
            .list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
            .collect()
    }

    /// Runs kubectl against the cluster; returns stdout, fails on a non-zero exit.
    pub async fn kubectl(&self, args: &[&str]) -> String {
        let output = tokio::time::timeout(
            WAIT,
            tokio::process::Command::new(kubectl_binary())
                .args(["--namespace", &self.namespace])
                .args(args)
                .env("KUBECONFIG", self.kubeconfig("home"))
                .env("KUBECACHEDIR", self.dir.join("kube-cache"))
                .env("HOME", &self.dir)
                .stdin(Stdio::null())
                .output(),
        )
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
        .unwrap_or_else(|e| panic!("running kubectl {args:?}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success(),
            "kubectl {args:?} failed: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

// ---------------------------------------------------------------- jobs

/// A replica spec: `replicas` of `replica_type`, a `tensorflow` container
/// with small requests, the sim script (annotation names without prefix).
pub fn replica(replica_type: &str, replicas: i32, script: &[(&str, &str)]) -> Value {
    let annotations: serde_json::Map<String, Value> = script
        .iter()
        .map(|(k, v)| (format!("{SIM}{k}"), json!(v)))
        .collect();
    json!({
        "type": replica_type,
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"team": "vision"}, "annotations": annotations},
            "spec": {"containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.15.0",
                "command": ["python", "train.py"],
                "args": ["--epochs", "1"],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }]},
        },
    })
}

/// Adds a restartPolicy to a replica spec.
pub fn with_policy(mut replica: Value, policy: &str) -> Value {
    replica["restartPolicy"] = json!(policy);
    replica
}

/// A job with the given spec (in the namespace it is submitted to).
pub fn job(name: &str, spec: Value) -> TensorFlowTrainingJob {
    serde_json::from_value(json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a TensorFlowTrainingJob")
}

pub fn phase_of(job: &TensorFlowTrainingJob) -> Option<JobPhase> {
    job.status.as_ref().and_then(|s| s.phase)
}

/// `(status, reason, message)` of a condition, as strings.
pub fn condition(job: &TensorFlowTrainingJob, kind: &str) -> Option<(String, String, String)> {
    let status = serde_json::to_value(job.status.as_ref()?).ok()?;
    let c = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?;
    let text = |k: &str| {
        c.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Some((text("status"), text("reason"), text("message")))
}

/// The condition's status ("True", "False", "Unknown") or "" when absent.
pub fn condition_status(job: &TensorFlowTrainingJob, kind: &str) -> String {
    condition(job, kind).map(|c| c.0).unwrap_or_default()
}

/// The aggregate as `[creating, pending, running, succeeded, failed, unknown, deleted]`.
pub fn aggregate(job: &TensorFlowTrainingJob) -> [i32; 7] {
    let a = job.status.as_ref().map(|s| s.aggregate).unwrap_or_default();
    [
        a.creating,
        a.pending,
        a.running,
        a.succeeded,
        a.failed,
        a.unknown,
        a.deleted,
    ]
}

/// `tasks[type].restartCount`.
pub fn restart_count(job: &TensorFlowTrainingJob, replica_type: &str) -> i32 {
    job.status
        .iter()
        .flat_map(|s| &s.tasks)
        .find(|t| t.replica_type == replica_type)
        .map_or(0, |t| t.restart_count)
}

pub fn backoff_count(job: &TensorFlowTrainingJob) -> i32 {
    job.status.as_ref().map_or(0, |s| s.backoff_count)
}

/// The value of an env var of the pod's `tensorflow` container.
pub fn tf_env(pod: &Pod, name: &str) -> Option<String> {
    main_container(pod)
        .env
        .iter()
        .flatten()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

pub fn main_container(pod: &Pod) -> &k8s_openapi::api::core::v1::Container {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == "tensorflow")
        .expect("a tensorflow container")
}

// ---------------------------------------------------------------- watches

/// What a watch reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// Records every event of a watch on one resource type, from the moment it
/// starts (resuming from the last resourceVersion when the stream ends),
/// with the time each arrived.
pub struct Recorder<K> {
    log: Arc<Mutex<Vec<(Change, K, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub async fn start(api: Api<K>) -> Recorder<K> {
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .expect("list before watching");
        let mut version = list.metadata.resource_version.unwrap_or_default();
        let params = WatchParams::default();
        let first = api
            .watch(&params, &version)
            .await
            .expect("start watch")
            .boxed();
        let log: Arc<Mutex<Vec<(Change, K, Instant)>>> = Arc::default();
        let sink = log.clone();
        let task = tokio::spawn(async move {
            let mut stream = first;
            loop {
                while let Some(event) = stream.next().await {
                    let (change, object) = match event {
                        Ok(WatchEvent::Added(o)) => (Change::Added, o),
                        Ok(WatchEvent::Modified(o)) => (Change::Modified, o),
                        Ok(WatchEvent::Deleted(o)) => (Change::Deleted, o),
                        Ok(WatchEvent::Bookmark(b)) => {
                            version = b.metadata.resource_version;
                            continue;
                        }
                        Ok(WatchEvent::Error(e)) => {
                            eprintln!("recorder: watch error {e:?}");
                            break;
                        }
                        Err(e) => {
                            eprintln!("recorder: watch failed: {e}");
                            break;
                        }
                    };
                    if let Some(v) = object.meta().resource_version.clone() {
                        version = v;
                    }
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push((
                        change,
                        object,
                        Instant::now(),
                    ));
                }
                stream = loop {
                    match api.watch(&params, &version).await {
                        Ok(s) => break s.boxed(),
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                };
            }
        });
        Recorder { log, task }
    }

    /// Everything recorded so far.
    pub fn events(&self) -> Vec<(Change, K)> {
        self.timed_events()
            .into_iter()
            .map(|(change, object, _)| (change, object))
            .collect()
    }

    /// Everything recorded so far, with the time each event arrived.
    pub fn timed_events(&self) -> Vec<(Change, K, Instant)> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Recorded events of the object with this name.
    pub fn of(&self, name: &str) -> Vec<(Change, K)> {
        self.events()
            .into_iter()
            .filter(|(_, o)| o.meta().name.as_deref() == Some(name))
            .collect()
    }

    /// ADDED events per object name.
    pub fn added_per_name(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (change, object) in self.events() {
            if change == Change::Added {
                *counts.entry(object.name_any()).or_default() += 1;
            }
        }
        counts
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The distinct statuses a job went through, in order, as recorded.
pub fn statuses(
    recorder: &Recorder<TensorFlowTrainingJob>,
    name: &str,
) -> Vec<TensorFlowTrainingJob> {
    let mut out: Vec<TensorFlowTrainingJob> = Vec::new();
    for (_, job) in recorder.of(name) {
        if out.last().map(|j| &j.status) != Some(&job.status) {
            out.push(job);
        }
    }
    out
}

/// The phases a job went through, in order, without repeats.
pub fn phases(recorder: &Recorder<TensorFlowTrainingJob>, name: &str) -> Vec<JobPhase> {
    let mut out = Vec::new();
    for job in statuses(recorder, name) {
        if let Some(phase) = phase_of(&job)
            && out.last() != Some(&phase)
        {
            out.push(phase);
        }
    }
    out
}
