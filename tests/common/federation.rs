//! The federation suites' helpers (`tests/federation.rs`,
//! `tests/failover.rs`, `tests/chaos.rs`): home and two registered members
//! with one node of 4 GPUs each, the controller with leader election on as
//! deployed (`federation(ground)`, a [`Setup`]), jobs as JSON, and their
//! pods on every cluster.

pub use super::real::client_for;
pub use super::real::{self, Ground, job_resource, member_resource};
pub use super::setup::{Controller, Env, Json, Setup, ready_of, wait_ready};
pub use super::sim_kube::{self, set_faults};
pub use super::wait::eventually;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

use super::process::Process;

/// The clusters of a federation: home first.
pub const CLUSTERS: [&str; 3] = ["home", "member-1", "member-2"];
/// Controller settings: place on the members only.
pub const HOME_NOT_TARGET: &str = "homeIsTarget: false\n";
/// Controller settings: short probe interval and lost timeout, so that a
/// loss shows in seconds (and the fence settings that such a lost timeout
/// allows: 1250 + 1000 + 250 < 3000).
pub const FAST_LOSS: &str = "memberProbeIntervalMs: 500\nclusterLostTimeoutMs: 3000\n\
                             fenceAfterMs: 1250\nfencePodGraceMs: 1000\nclockSkewMarginMs: 250\n";

/// A federation's running world, jobs as JSON.
pub type Federation = Env<Json>;

/// Home and `member-1`, `member-2`, one node of 4 GPUs each, the
/// controller with leader election on as deployed (one identity, so that a
/// restarted controller leads at once); add `.settings(…)` and `.start()`.
pub fn federation(ground: Ground) -> Setup<Json> {
    Setup::on(ground)
        .members(&["member-1", "member-2"])
        .nodes(1)
        .leader_elect("federation-test")
        .json_jobs()
}

/// `tfjob-federator sim` running, with the kubeconfigs it wrote.
pub struct SimCommand {
    _process: Process,
    pub dir: PathBuf,
}

impl Drop for SimCommand {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tfjob-federator sim ARGS` writing its kubeconfigs to a directory of its
/// own; returns once it wrote `ready`.
pub async fn start_sim(args: &[&str]) -> SimCommand {
    let dir = std::env::temp_dir().join(format!("tfjob-sim-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("the sim's dir");
    let mut process = Process::spawn(
        "tfjob-federator sim",
        Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
            .args(["sim", "--kubeconfig-dir"])
            .arg(&dir)
            .args(args),
        &dir.join("sim.log"),
    );
    eventually(
        "sim to write its ready file",
        Duration::from_secs(20),
        async || {
            process.check_alive();
            dir.join("ready").exists().then_some(())
        },
    )
    .await;
    SimCommand {
        _process: process,
        dir,
    }
}

/// Waits until the controller works with the member's current spec (its
/// status's observedGeneration) and the member is Ready.
pub async fn observed(members: &Api<MemberCluster>, name: &str) {
    eventually(
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

impl Env<Json> {
    /// Both members export their services (clusterset.local names resolve,
    /// and `failover: LostReplicas` may place there), as the controller
    /// has observed.
    pub async fn export_services(&self) {
        self.patch_members(json!({"exportServices": true})).await;
    }

    /// Both members' spec merged with `spec`, as the controller has
    /// observed.
    pub async fn patch_members(&self, spec: Value) {
        let members: Api<MemberCluster> = Api::all(self.client.clone());
        for member in ["member-1", "member-2"] {
            members
                .patch(
                    member,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": spec })),
                )
                .await
                .unwrap_or_else(|e| panic!("{member}'s spec: {e}"));
            observed(&members, member).await;
        }
    }

    /// The jobs in the test's namespace of home.
    pub fn jobs(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &job_resource())
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
        let jobs = self.jobs();
        eventually(&format!("{name}: {what}"), limit, async || {
            let job = jobs.get(name).await.map_err(|e| e.to_string())?;
            let job = serde_json::to_value(job).expect("job as JSON");
            if check(&job) {
                Ok(job)
            } else {
                Err(format!("its status {}", job["status"]))
            }
        })
        .await
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
        eventually(
            &format!("{job} gone once {member} is lost"),
            Duration::from_secs(20),
            async || jobs.get_opt(job).await.ok()?.is_none().then_some(()),
        )
        .await;
        set_faults(&self.clients[member], json!({"partitioned": false})).await;
    }
}

/// The job's pods on every cluster, whatever the view of jobs.
impl<View> Env<View> {
    /// The job's pods on each of `clusters` (clusters without any left out).
    pub async fn pods_on(&self, job: &str, clusters: &[&str]) -> BTreeMap<String, Vec<Pod>> {
        let mut out = BTreeMap::new();
        for cluster in clusters {
            let pods: Api<Pod> = Api::namespaced(self.clients[*cluster].clone(), &self.namespace);
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

/// Asserts that each of `replicas` (survivors of a partial failover) is
/// recorded in `status.placement.replicaEpochs` under `epoch`, the one
/// it was placed in.
pub fn assert_kept_their_epoch(job: &Value, epoch: u64, replicas: &[&str]) {
    for replica in replicas {
        assert_eq!(
            job["status"]["placement"]["replicaEpochs"][replica].as_u64(),
            Some(epoch),
            "{replica} keeps its epoch: {}",
            job["status"]["placement"]
        );
    }
}

/// Each replica's recorded cluster (`status.placement.assignment`).
pub fn assignment_of(job: &Value) -> BTreeMap<String, String> {
    job["status"]["placement"]["assignment"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// `status.tasks[].restartCount` by replica type (-1 where a task has none).
pub fn restart_counts(job: &Value) -> BTreeMap<String, i64> {
    job["status"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["type"].as_str().unwrap_or_default().to_string(),
                t["restartCount"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// The job's `status.phase` ("" without one).
pub fn phase_of(job: &Value) -> &str {
    job["status"]["phase"].as_str().unwrap_or_default()
}

pub fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}
