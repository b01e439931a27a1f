//! The federation harness of `tests/federation.rs` and `tests/failover.rs`:
//! home and two registered members, the controller a subprocess
//! (`tfjob-federator run`, leader election on as deployed) that a test may
//! kill and start again, and admin clients for every cluster. On the
//! simulated ground the test's own `tfjob-federator sim`; on the real ground
//! the binary's shared `hack/real-clusters`, this test's alone while it
//! runs, cleaned of what earlier tests left, the controller under the
//! identity `deploy/controller.yaml` ships and members registered with that
//! of `deploy/member-rbac.yaml`.
//!
//! Jobs are written and read as JSON (`DynamicObject`, `serde_json::Value`),
//! so the harness depends on the API, not on the crate's Rust types; a test
//! that wants those parses the JSON itself.
//!
//! Include with `#[macro_use] #[path = "common/federation.rs"] mod federation_support;`
//! (it includes `common/kube.rs`, and through it `common/real.rs`, once).
#![allow(dead_code)]

#[macro_use]
#[path = "kube.rs"]
pub mod sim_kube;
pub use sim_kube::real::{self, Ground, RealClusters};
pub use sim_kube::{client_for, eventually_within};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

/// The clusters of a federation: home first.
pub const CLUSTERS: [&str; 3] = ["home", "member-1", "member-2"];
/// Controller settings: place on the members only.
pub const HOME_NOT_TARGET: &str = "homeIsTarget: false\n";
/// Controller settings: short probe interval and lost timeout, so that a
/// loss shows in seconds.
pub const FAST_LOSS: &str = "memberProbeIntervalMs: 500\nclusterLostTimeoutMs: 3000\n";

/// A `tfjob-federator sim` child process, killed on drop.
pub struct SimProcess {
    child: Child,
    pub dir: PathBuf,
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tfjob-federator sim ARGS` writing its kubeconfigs to a directory of its
/// own; returns once it wrote `ready`.
pub fn start_sim(args: &[&str]) -> SimProcess {
    let dir = std::env::temp_dir().join(format!(
        "tfjob-federation-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    let child = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .args(["sim", "--kubeconfig-dir"])
        .arg(&dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tfjob-federator sim starts");
    let process = SimProcess { child, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !process.dir.join("ready").exists() {
        assert!(Instant::now() < deadline, "sim wrote no ready file");
        std::thread::sleep(Duration::from_millis(50));
    }
    process
}

/// A `tfjob-federator run` child process, killed (SIGKILL) on drop.
pub struct ControllerProcess(Child);

impl ControllerProcess {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The controller with `settings` (YAML) written next to the kubeconfig
/// (`controller.yaml`) and its JSON log in `controller.log` beside it
/// (appended to, so a restart keeps the earlier lines); leader election on
/// as deployed, one identity, so a restarted controller leads at once.
pub fn start_controller(home_kubeconfig: &Path, settings: &str) -> ControllerProcess {
    start_controller_as(home_kubeconfig, settings, "federation-test")
}

/// As `start_controller`, with the leader-election identity `identity`
/// (another identity is a second replica, standing by).
pub fn start_controller_as(
    home_kubeconfig: &Path,
    settings: &str,
    identity: &str,
) -> ControllerProcess {
    let config = home_kubeconfig.with_file_name("controller.yaml");
    std::fs::write(&config, settings).expect("write controller settings");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home_kubeconfig.with_file_name("controller.log"))
        .expect("controller log");
    let child = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .args(["--log-format", "json", "run", "--kubeconfig"])
        .arg(home_kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--leader-elect", "--leader-elect-identity", identity])
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("tfjob-federator run starts");
    ControllerProcess(child)
}

/// The controller's log lines (in `dir`) at WARN or ERROR, and any line
/// that is not JSON.
pub fn controller_problems(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("controller.log"))
        .unwrap_or_default()
        .lines()
        .filter(|line| {
            serde_json::from_str::<Value>(line)
                .ok()
                .is_none_or(|v| matches!(v["level"].as_str(), Some("WARN" | "ERROR")))
        })
        .map(str::to_string)
        .collect()
}

/// `PUT /_sim/faults` on a cluster (answered even when partitioned; on the
/// real ground by its fault proxy).
pub async fn set_faults(client: &kube::Client, faults: Value) {
    sim_kube::admin_request(client, hyper::Method::PUT, "faults", Some(faults)).await;
}

/// The status of member `name`'s Ready condition, if it has one, and the
/// member.
pub async fn ready_of(members: &Api<MemberCluster>, name: &str) -> Option<(String, MemberCluster)> {
    let member = members.get(name).await.ok()?;
    let status = member.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.condition_type == "Ready")?
        .status
        .clone();
    Some((ready, member))
}

/// Waits until member `name`'s Ready condition has `status`.
pub async fn wait_ready(members: &Api<MemberCluster>, name: &str, status: &str) {
    eventually_within(
        &format!("{name} Ready={status}"),
        Duration::from_secs(20),
        async || {
            let (ready, _) = ready_of(members, name).await?;
            (ready == status).then_some(())
        },
    )
    .await;
}

/// Waits until the controller works with the member's current spec (its
/// status's observedGeneration) and the member is Ready.
pub async fn observed(members: &Api<MemberCluster>, name: &str) {
    eventually_within(
        &format!("{name} Ready with its spec observed"),
        Duration::from_secs(20),
        async || {
            let (ready, m) = ready_of(members, name).await?;
            let seen = m.status.as_ref()?.observed_generation == m.metadata.generation;
            (ready == "True" && seen).then_some(())
        },
    )
    .await;
}

pub fn job_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("batch.tensorstack.dev", "v1beta1", "TensorFlowTrainingJob"),
        "tensorflowtrainingjobs",
    )
}

pub fn member_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("federation.tfjob.io", "v1alpha1", "MemberCluster"),
        "memberclusters",
    )
}

/// The MemberClusters as `--register` made them on the real clusters of
/// this test binary, read before any test here deleted one.
static REGISTERED: tokio::sync::OnceCell<Vec<Value>> = tokio::sync::OnceCell::const_new();

/// On the shared real clusters: the registered MemberClusters exist (a test
/// may delete one; after a failure it may not have come back).
async fn ensure_registered(home: &kube::Client) {
    let members: Api<DynamicObject> = Api::all_with(home.clone(), &member_resource());
    let registered = REGISTERED
        .get_or_init(|| async {
            members
                .list(&ListParams::default())
                .await
                .expect("list MemberClusters")
                .items
                .into_iter()
                .map(|m| {
                    json!({
                        "apiVersion": "federation.tfjob.io/v1alpha1",
                        "kind": "MemberCluster",
                        "metadata": {"name": m.metadata.name},
                        "spec": m.data["spec"],
                    })
                })
                .collect()
        })
        .await;
    let names: Vec<&str> = registered
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["member-1", "member-2"], "the registered members");
    for member in registered {
        let name = member["metadata"]["name"].as_str().expect("name");
        if members.get_opt(name).await.expect("get member").is_none() {
            let object: DynamicObject = serde_json::from_value(member.clone()).expect("member");
            members
                .create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("re-register {name}: {e}"));
        }
    }
}

/// Home and two members, the controller with its settings, and admin
/// clients for every cluster (see the module's comment).
pub struct Federation {
    pub ground: Ground,
    pub controller: ControllerProcess,
    pub clusters: Clusters,
    /// The test's own: the controller's kubeconfig, settings and log, and
    /// any file a test writes.
    pub dir: PathBuf,
    /// What the controller runs with.
    pub home_kubeconfig: PathBuf,
    pub settings: String,
    pub clients: BTreeMap<String, kube::Client>,
}

pub enum Clusters {
    Sim(SimProcess),
    Real {
        clusters: &'static RealClusters,
        _turn: tokio::sync::MutexGuard<'static, ()>,
    },
}

impl Clusters {
    /// The admin kubeconfig of cluster `name`.
    pub fn kubeconfig(&self, name: &str) -> PathBuf {
        match self {
            Clusters::Sim(sim) => sim.dir.join(format!("{name}.kubeconfig")),
            Clusters::Real { clusters, .. } => clusters.kubeconfig(name),
        }
    }
}

impl Federation {
    /// Clusters of one node with 4 GPUs each, the controller with
    /// `settings` (YAML).
    pub async fn start(ground: Ground, settings: &str) -> Federation {
        Federation::start_with_nodes(ground, "1", settings).await
    }

    /// With `nodes` per cluster (of 4 GPUs each); the real clusters have one
    /// node each.
    pub async fn start_with_nodes(ground: Ground, nodes: &str, settings: &str) -> Federation {
        let (clusters, dir) = match ground {
            Ground::Sim => {
                let sim = start_sim(&[
                    "--clusters",
                    "3",
                    "--register",
                    "--nodes",
                    nodes,
                    "--gpus-per-node",
                    "4",
                ]);
                let dir = sim.dir.clone();
                (Clusters::Sim(sim), dir)
            }
            Ground::Real => {
                assert_eq!(nodes, "1", "the shared real clusters have one node each");
                let real = real::three_clusters();
                let turn = real.exclusive().await;
                real::clean_slate(real, &CLUSTERS).await;
                ensure_registered(&real.client("home").await).await;
                let dir = std::env::temp_dir().join(format!(
                    "tfjob-federation-test-{}-{}",
                    std::process::id(),
                    fastrand::u64(..)
                ));
                std::fs::create_dir_all(&dir).expect("test dir");
                std::fs::copy(
                    real.controller_kubeconfig().await,
                    dir.join("home.kubeconfig"),
                )
                .expect("the controller's kubeconfig");
                (
                    Clusters::Real {
                        clusters: real,
                        _turn: turn,
                    },
                    dir,
                )
            }
        };
        let home_kubeconfig = dir.join("home.kubeconfig");
        let controller = start_controller(&home_kubeconfig, settings);
        let mut clients = BTreeMap::new();
        for name in CLUSTERS {
            let yaml = std::fs::read_to_string(clusters.kubeconfig(name)).expect("kubeconfig");
            clients.insert(name.to_string(), client_for(&yaml).await);
        }
        let members: Api<MemberCluster> = Api::all(clients["home"].clone());
        for name in ["member-1", "member-2"] {
            wait_ready(&members, name, "True").await;
        }
        Federation {
            ground,
            controller,
            clusters,
            dir,
            home_kubeconfig,
            settings: settings.to_string(),
            clients,
        }
    }

    pub fn kill_controller(&mut self) {
        self.controller.kill();
    }

    /// Kills the controller (if it still runs) and starts a new one with the
    /// same settings.
    pub fn restart_controller(&mut self) {
        self.controller.kill();
        self.controller = start_controller(&self.home_kubeconfig, &self.settings);
    }

    pub fn members(&self) -> Api<MemberCluster> {
        Api::all(self.clients["home"].clone())
    }

    /// The jobs in namespace `default` of home.
    pub fn jobs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.clients["home"].clone(), "default", &job_resource())
    }

    pub async fn submit(&self, job: Value) {
        let job: DynamicObject = serde_json::from_value(job).expect("a job object");
        self.jobs()
            .create(&PostParams::default(), &job)
            .await
            .expect("job created");
    }

    /// The job as JSON.
    pub async fn job(&self, name: &str) -> Value {
        let job = self.jobs().get(name).await.expect("get job");
        serde_json::to_value(job).expect("job as JSON")
    }

    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.jobs()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("spec patched");
    }

    pub async fn set_paused(&self, name: &str, paused: bool) {
        self.patch_spec(name, json!({"runMode": {"pause": {"enabled": paused}}}))
            .await;
    }

    /// Polls the job until `check` holds, failing the test after `limit`
    /// with the job's last status.
    pub async fn wait_job(
        &self,
        name: &str,
        what: &str,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + limit;
        let mut last = Value::Null;
        loop {
            if let Ok(job) = self.jobs().get(name).await {
                last = serde_json::to_value(job).expect("job as JSON");
                if check(&last) {
                    return last;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {name}: {what}; its last status: {}",
                last["status"]
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn wait_phase(&self, name: &str, phase: &str, limit: Duration) -> Value {
        self.wait_job(name, &format!("phase {phase}"), limit, |j| {
            phase_of(j) == phase
        })
        .await
    }

    /// Deletes `job` with `member` partitioned, waits until the job is gone
    /// (the member is lost by then), and heals the partition.
    pub async fn delete_while_partitioned(&self, job: &str, member: &str) {
        set_faults(&self.clients[member], json!({"partitioned": true})).await;
        self.jobs()
            .delete(job, &Default::default())
            .await
            .expect("delete accepted");
        let jobs = self.jobs();
        eventually_within(
            &format!("{job} gone once {member} is lost"),
            Duration::from_secs(20),
            async || jobs.get_opt(job).await.ok()?.is_none().then_some(()),
        )
        .await;
        set_faults(&self.clients[member], json!({"partitioned": false})).await;
    }

    /// The job's pods on each of `clusters` (clusters without any left out).
    pub async fn pods_on(&self, job: &str, clusters: &[&str]) -> BTreeMap<String, Vec<Pod>> {
        let mut out = BTreeMap::new();
        for cluster in clusters {
            let pods: Api<Pod> = Api::namespaced(self.clients[*cluster].clone(), "default");
            let found = pods
                .list(&ListParams::default().labels(&format!("federation.tfjob.io/job-name={job}")))
                .await
                .unwrap_or_else(|e| panic!("list pods on {cluster}: {e}"))
                .items;
            if !found.is_empty() {
                out.insert(cluster.to_string(), found);
            }
        }
        out
    }

    /// Each job's pods on `cluster`.
    pub async fn pods_on_all(&self, jobs: &[String], cluster: &str) -> BTreeMap<String, Vec<Pod>> {
        let mut out = BTreeMap::new();
        for job in jobs {
            let pods = self.pods_on(job, &[cluster]).await;
            out.insert(job.clone(), pods.into_values().flatten().collect());
        }
        out
    }

    /// Names of the job's pods on each of `clusters`.
    pub async fn pod_names_on(
        &self,
        job: &str,
        clusters: &[&str],
    ) -> BTreeMap<String, Vec<String>> {
        self.pods_on(job, clusters)
            .await
            .into_iter()
            .map(|(cluster, pods)| (cluster, pods.iter().map(name_of).collect()))
            .collect()
    }

    /// Names of the job's pods on each cluster (empty clusters left out).
    pub async fn pods_by_cluster(&self, job: &str) -> BTreeMap<String, Vec<String>> {
        self.pod_names_on(job, &CLUSTERS).await
    }
}

/// A job of `(type, replicas, gpus)` whose pods run `run_seconds`, with
/// `extra_spec`'s fields set in its spec.
pub fn gpu_job(
    name: &str,
    replicas: &[(&str, i64, i64)],
    extra_spec: Value,
    run_seconds: &str,
) -> Value {
    let specs: Vec<Value> = replicas
        .iter()
        .map(|(t, n, gpus)| {
            json!({"type": t, "replicas": n, "template": {
                "metadata": {"annotations": {"sim.federation.tfjob.io/run-seconds": run_seconds, "sim.federation.tfjob.io/pending-seconds": "0.1"}},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": gpus}}}]}}})
        })
        .collect();
    let mut spec = json!({"replicaSpecs": specs, "runPolicy": {"cleanUpPolicy": "none"}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob", "metadata": {"name": name}, "spec": spec})
}

/// The job's `status.phase` ("" without one).
pub fn phase_of(job: &Value) -> &str {
    job["status"]["phase"].as_str().unwrap_or_default()
}

pub fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}
