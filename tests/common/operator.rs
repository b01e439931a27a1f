//! Helpers for the operator's integration tests, on either ground: a
//! simulated cluster of the test's own (in-process, real loopback HTTP), or
//! the real cluster of `hack/real-clusters` shared by the test binary (a
//! namespace of the test's own, the controller under the identity
//! `deploy/controller.yaml` ships). The CRDs come from
//! `tfjob_federator::api::crds()`; the controller runs as a subprocess
//! (`tfjob-federator run --kubeconfig FILE`) that a test may kill and start
//! again. The tests only talk to the cluster over HTTP, as users do.
//!
//! Include with `#[macro_use] #[path = "common/operator.rs"] mod operator_support;`.
#![allow(dead_code)]

#[macro_use]
#[path = "kube.rs"]
mod sim_kube;
pub use sim_kube::real::{self, Ground};
pub use sim_kube::{client_for, eventually_within as wait_for, install_schemaless_crd};

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

use kube::{Client, Resource, ResourceExt};
use kube_sim::{self as sim, NodeShape, RunningCluster, SimOptions};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, TensorFlowTrainingJob};

/// How long a job may take to reach a state a test waits for (generous:
/// tests run in parallel on small machines).
pub const WAIT: Duration = Duration::from_secs(30);
/// Annotation prefix of the simulated kubelet's behaviour script.
pub const SIM: &str = "sim.federation.tfjob.io/";

/// One test's world: a cluster, an admin client for it, the test's
/// namespace, a private temp dir (controller config and log) and the
/// controller process.
pub struct Env {
    pub client: Client,
    pub namespace: String,
    pub dir: PathBuf,
    /// Admin, for the test and kubectl.
    pub kubeconfig: PathBuf,
    /// What the controller runs with.
    controller_kubeconfig: PathBuf,
    cluster: Option<RunningCluster>,
    controller: Option<ControllerProcess>,
    config: Option<PathBuf>,
    /// On the real ground: the shared cluster is this test's meanwhile.
    _turn: Option<tokio::sync::MutexGuard<'static, ()>>,
}

/// The controller subprocess; killed (SIGKILL) when dropped.
pub struct ControllerProcess {
    child: Child,
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Env {
    /// A simulated cluster with the default nodes, the CRDs installed, the
    /// controller running.
    pub async fn start(test: &str) -> Env {
        Env::start_on(Ground::Sim, test).await
    }

    /// As `start`, on `ground`.
    pub async fn start_on(ground: Ground, test: &str) -> Env {
        match ground {
            Ground::Sim => Env::start_with(test, SimOptions::default(), None).await,
            Ground::Real => Env::start_real(test).await,
        }
    }

    /// As `start`, with sim options and an optional controller config (YAML).
    pub async fn start_with(test: &str, options: SimOptions, config: Option<&str>) -> Env {
        let handle = sim::start_cluster("home", &options)
            .await
            .expect("start simulated cluster");
        let dir = test_dir(test);
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, handle.kubeconfig()).expect("write kubeconfig");
        let config = config.map(|text| {
            let path = dir.join("controller.yaml");
            std::fs::write(&path, text).expect("write controller config");
            path
        });
        let client = client_for(&handle.kubeconfig()).await;
        let env = Env {
            client,
            namespace: "default".into(),
            dir,
            controller_kubeconfig: kubeconfig.clone(),
            kubeconfig,
            cluster: Some(handle),
            controller: None,
            config,
            _turn: None,
        };
        env.begin().await
    }

    /// On the shared real cluster: a namespace of the test's own, what
    /// earlier tests left cleaned away, the controller under its shipped
    /// identity.
    async fn start_real(test: &str) -> Env {
        let clusters = real::one_cluster();
        let turn = clusters.exclusive().await;
        real::clean_slate(clusters, &["home"]).await;
        let client = clusters.client("home").await;
        let namespace = real::test_namespace(&client, test).await;
        let env = Env {
            client,
            namespace,
            dir: test_dir(test),
            kubeconfig: clusters.kubeconfig("home"),
            controller_kubeconfig: clusters.controller_kubeconfig().await,
            cluster: None,
            controller: None,
            config: None,
            _turn: Some(turn),
        };
        env.begin().await
    }

    async fn begin(mut self) -> Env {
        real::install_crds(&self.client).await;
        let jobs = self.jobs();
        wait_for(
            "the TensorFlowTrainingJob type to be served",
            WAIT,
            async || jobs.list(&ListParams::default()).await.ok(),
        )
        .await;
        self.start_controller();
        self
    }

    /// Starts the controller process (logging to `controller.log`).
    pub fn start_controller(&mut self) {
        assert!(self.controller.is_none(), "the controller already runs");
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open controller log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"));
        command
            .args(["--log-format", "json", "run", "--kubeconfig"])
            .arg(&self.controller_kubeconfig)
            // Tests run side by side: each controller serves on a port of its own.
            .args(["--metrics-addr", "127.0.0.1:0"]);
        if let Some(config) = &self.config {
            command.arg("--config").arg(config);
        }
        let child = command
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .expect("start the controller");
        self.controller = Some(ControllerProcess { child });
    }

    /// Kills the controller (SIGKILL: no chance to clean up).
    pub fn kill_controller(&mut self) {
        assert!(
            self.controller.take().is_some(),
            "the controller is not running"
        );
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("controller.log")
    }

    /// The controller's log lines at WARN or ERROR.
    pub fn controller_problems(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|line| {
                serde_json::from_str::<Value>(line).ok().is_none_or(|v| {
                    matches!(
                        v.get("level").and_then(Value::as_str),
                        Some("WARN" | "ERROR")
                    )
                })
            })
            .map(str::to_string)
            .collect()
    }

    pub fn jobs(&self) -> Api<TensorFlowTrainingJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The jobs as raw JSON: what the typed API cannot hold or would drop.
    pub fn raw_jobs(&self) -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &real::jobs_resource())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn events(&self) -> Api<Event> {
        Api::namespaced(self.client.clone(), &self.namespace)
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
        let deadline = Instant::now() + WAIT;
        let jobs = self.jobs();
        loop {
            let job = jobs.get_opt(name).await.ok().flatten();
            if let Some(job) = &job
                && check(job)
            {
                return job.clone();
            }
            if Instant::now() > deadline {
                let status =
                    job.map(|j| serde_json::to_string_pretty(&j.status).unwrap_or_default());
                panic!(
                    "timed out after {WAIT:?} waiting for job {name} to be {what}; status: {}",
                    status.unwrap_or_else(|| "(no job)".into())
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the job's phase.
    pub async fn wait_phase(&self, name: &str, phase: JobPhase) -> TensorFlowTrainingJob {
        self.wait_job(name, &format!("{phase:?}"), |j| phase_of(j) == Some(phase))
            .await
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
        let deadline = Instant::now() + WAIT;
        loop {
            let pods = self.job_pods(job).await;
            let last = pods.keys().cloned().collect::<Vec<_>>();
            if last == expected {
                return pods;
            }
            if Instant::now() > deadline {
                panic!("job {job}: expected pods {expected:?}, found {last:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
                .env("KUBECONFIG", &self.kubeconfig)
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

impl Drop for Env {
    fn drop(&mut self) {
        self.controller = None;
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "--- controller log ({}), last {} lines ---\n{}",
                self.log_path().display(),
                tail.len(),
                tail.join("\n")
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        if let Some(cluster) = self.cluster.take() {
            // Stopping needs the runtime; the server task ends with it anyway.
            drop(cluster);
        }
    }
}

fn test_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("operator-{test}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn kubectl_binary() -> PathBuf {
    if let Some(explicit) = std::env::var_os("KUBECTL") {
        return PathBuf::from(explicit);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("kubectl was not found on PATH; set $KUBECTL"))
}

/// Sim options with room for many pods per node.
pub fn roomy_nodes(max_pods: u32) -> SimOptions {
    SimOptions {
        nodes: NodeShape {
            max_pods,
            ..NodeShape::default()
        },
        ..SimOptions::default()
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
/// starts (resuming from the last resourceVersion when the stream ends).
pub struct Recorder<K> {
    log: Arc<Mutex<Vec<(Change, K)>>>,
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
        let log: Arc<Mutex<Vec<(Change, K)>>> = Arc::default();
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
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((change, object));
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
