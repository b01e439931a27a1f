//! The federation end to end, on both grounds where the real clusters fit:
//! member registration (`sim --register`, `join`), member status, placement
//! (Pack, Spread, Weighted, selectors, priorities, splitting with a
//! cross-cluster TF_CONFIG), failover and the sweep of a returned member,
//! deletion, service exports, `plan`, controller restarts and the shipped
//! RBAC. The harness is `tests/common/federation.rs`.

#[macro_use]
mod common;

use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine;
use common::federation::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::Api;
use kube::api::ListParams;
use kube::config::Kubeconfig;
use serde_json::json;
use sim_kube::SimCluster;
use tfjob_federator::api::{MemberCluster, TensorFlowTrainingJob};

fn kubeconfig_server(yaml: &str) -> String {
    let kc = Kubeconfig::from_yaml(yaml).expect("a kubeconfig");
    kc.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("a server")
}

#[tokio::test]
async fn sim_register_creates_member_secrets_and_member_clusters() {
    let sim = start_sim(&["--clusters", "3", "--register"]).await;
    let home_yaml =
        std::fs::read_to_string(sim.dir.join("home.kubeconfig")).expect("home kubeconfig");
    let home = client_for(&home_yaml).await;
    let members: Api<MemberCluster> = Api::all(home.clone());
    let names: Vec<String> = members
        .list(&Default::default())
        .await
        .expect("MemberClusters are served")
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    assert_eq!(
        names,
        ["member-1", "member-2"],
        "home is not a member of itself"
    );
    for name in names {
        let member = members.get(&name).await.expect("member exists");
        let reference = &member.spec.kubeconfig_secret_ref;
        let secrets: Api<Secret> = Api::namespaced(home.clone(), &reference.namespace);
        let secret = secrets
            .get(&reference.name)
            .await
            .expect("the kubeconfig Secret exists");
        let data = secret.data.expect("stringData is folded into data");
        let stored = String::from_utf8(data["kubeconfig"].0.clone()).expect("utf-8 kubeconfig");
        let file = std::fs::read_to_string(sim.dir.join(format!("{name}.kubeconfig")))
            .expect("member kubeconfig file");
        assert_eq!(
            kubeconfig_server(&stored),
            kubeconfig_server(&file),
            "{name}'s Secret points at {name}"
        );
    }
}

/// Runs `tfjob-federator join` without blocking the runtime that serves the
/// in-process clusters.
async fn join(dir: &std::path::Path, name: &str, member_file: &str, extra: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .args(["join", "--name", name, "--member-kubeconfig"])
        .arg(dir.join(member_file))
        .arg("--kubeconfig")
        .arg(dir.join("home"))
        .args(extra)
        .output()
        .await
        .expect("join runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_registers_and_updates_a_member() {
    let home = SimCluster::start("home").await;
    let member = SimCluster::start("member-1").await;
    let dir = std::env::temp_dir().join(format!(
        "tfjob-join-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("home"), home.handle.kubeconfig()).expect("write");
    std::fs::write(dir.join("member"), member.handle.kubeconfig()).expect("write");
    let first = join(
        &dir,
        "gpu-east",
        "member",
        &[
            "--address-template",
            "{service}.{namespace}.svc.east.example",
            "--export-services",
        ],
    )
    .await;
    assert!(
        first.status.success(),
        "join failed: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let again = join(
        &dir,
        "gpu-east",
        "member",
        &[
            "--address-template",
            "{service}.{namespace}.east.example",
            "--export-services",
        ],
    )
    .await;
    assert!(
        again.status.success(),
        "joining again updates: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    let members: Api<MemberCluster> = Api::all(home.client.clone());
    let registered = members
        .get("gpu-east")
        .await
        .expect("MemberCluster gpu-east");
    assert_eq!(
        registered.spec.address_template,
        "{service}.{namespace}.east.example"
    );
    assert!(registered.spec.export_services);
    let secrets: Api<Secret> = Api::namespaced(
        home.client.clone(),
        &registered.spec.kubeconfig_secret_ref.namespace,
    );
    let secret = secrets.get("gpu-east").await.expect("Secret gpu-east");
    let encoded = base64::engine::general_purpose::STANDARD.encode(member.handle.kubeconfig());
    let stored = secret.data.expect("data")["kubeconfig"].0.clone();
    assert_eq!(
        base64::engine::general_purpose::STANDARD.encode(stored),
        encoded,
        "the Secret holds the member kubeconfig verbatim"
    );

    std::fs::write(dir.join("broken"), "not: [a kubeconfig").expect("write");
    let bad = join(&dir, "broken", "broken", &[]).await;
    assert!(!bad.status.success(), "a broken kubeconfig is refused");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("member kubeconfig is not usable"));
    assert!(
        members.get_opt("broken").await.expect("get").is_none(),
        "nothing registered for it"
    );
    let unusable = join(
        &dir,
        "badly-addressed",
        "member",
        &["--address-template", "{svc}.example"],
    )
    .await;
    assert!(
        !unusable.status.success(),
        "an unusable address template is refused"
    );
    assert!(
        String::from_utf8_lossy(&unusable.stderr).contains("unknown placeholder {svc}"),
        "{}",
        String::from_utf8_lossy(&unusable.stderr)
    );
    assert!(
        members
            .get_opt("badly-addressed")
            .await
            .expect("get")
            .is_none(),
        "nothing registered for it"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn member_status_shows_readiness_capacity_and_partitions() {
    let f = federation(Ground::Sim).nodes(2).start().await;
    let members = f.members();
    let member = eventually(
        "member-1 Ready with capacity",
        Duration::from_secs(20),
        async || {
            let (ready, member) = ready_of(&members, "member-1").await?;
            (ready == "True" && member.status.as_ref()?.free.contains_key("nvidia.com/gpu"))
                .then_some(member)
        },
    )
    .await;
    let status = member.status.expect("status");
    assert_eq!(
        status.allocatable.get("nvidia.com/gpu").map(String::as_str),
        Some("8"),
        "2 nodes × 4 GPUs"
    );
    assert_eq!(
        status.free.get("nvidia.com/gpu").map(String::as_str),
        Some("8"),
        "nothing runs yet"
    );
    assert_eq!(
        status.allocatable.get("cpu").map(String::as_str),
        Some("64")
    );
    assert!(status.last_heartbeat_time.is_some());

    let member_one = f.clients["member-1"].clone();
    let faults = |partitioned: bool| set_faults(&member_one, json!({"partitioned": partitioned}));
    faults(true).await;
    wait_ready(&members, "member-1", "False").await;
    let (other, _) = ready_of(&members, "member-2")
        .await
        .expect("member-2 status");
    assert_eq!(
        other, "True",
        "a partition of member-1 leaves member-2 alone"
    );
    faults(false).await;
    wait_ready(&members, "member-1", "True").await;
}

/// The jobs of `f` in namespace `default`, as the crate's types.
fn typed_jobs(f: &Federation) -> Api<TensorFlowTrainingJob> {
    Api::namespaced(f.clients["home"].clone(), "default")
}

/// A job the harness read as JSON, as the crate's type.
fn typed(job: serde_json::Value) -> TensorFlowTrainingJob {
    serde_json::from_value(job).expect("a TensorFlowTrainingJob")
}

fn tf_config_of(pod: &Pod) -> serde_json::Value {
    let env = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "tensorflow"))
        .and_then(|c| c.env.clone())
        .unwrap_or_default();
    let text = env
        .iter()
        .find(|e| e.name == "TF_CONFIG")
        .and_then(|e| e.value.clone())
        .expect("TF_CONFIG set");
    serde_json::from_str(&text).expect("TF_CONFIG is JSON")
}

async fn pack_places_a_job_that_fits_one_member_entirely_there(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.submit(gpu_job(
        "packed",
        &[("chief", 1, 1), ("worker", 2, 1)],
        json!({}),
        "1",
    ))
    .await;
    let done = typed(
        f.wait_phase("packed", "Succeeded", Duration::from_secs(30))
            .await,
    );
    let pods = f.pods_by_cluster("packed").await;
    assert_eq!(
        pods.keys().collect::<Vec<_>>(),
        ["member-1"],
        "all replicas on one member: {pods:?}"
    );
    let status = done.status.expect("status");
    let placement = status.placement.clone();
    let clusters: Vec<Option<String>> = status
        .tasks
        .iter()
        .flat_map(|t| t.replica_status.iter().map(|r| r.cluster.clone()))
        .collect();
    assert_eq!(
        clusters,
        vec![Some("member-1".to_string()); 3],
        "replicaStatus names the cluster"
    );
    let recorded = placement.and_then(|p| p.assignment).unwrap_or_default();
    assert!(
        !recorded.is_empty() && recorded.values().all(|c| c == "member-1"),
        "the placement is recorded in the job's status: {recorded:?}"
    );
}

/// A job in a namespace the members lack: the controller makes the
/// namespace there, and its pods wait for the namespace's ServiceAccount,
/// which a real cluster makes a moment later.
async fn a_job_in_a_namespace_the_members_lack_runs_there(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let namespace = real::test_namespace(&f.clients["home"], "team").await;
    let jobs: Api<TensorFlowTrainingJob> = Api::namespaced(f.clients["home"].clone(), &namespace);
    let job: TensorFlowTrainingJob =
        serde_json::from_value(gpu_job("elsewhere", &[("worker", 2, 1)], json!({}), "1"))
            .expect("valid job");
    jobs.create(&Default::default(), &job)
        .await
        .expect("job created");
    eventually("elsewhere Succeeded", Duration::from_secs(30), async || {
        let job = jobs.get("elsewhere").await.ok()?;
        let phase = serde_json::to_value(job.status.as_ref()?.phase?).ok()?;
        (phase == "Succeeded").then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(f.clients["member-1"].clone(), &namespace);
    let ran = pods
        .list(&ListParams::default().labels("federation.tfjob.io/job-name=elsewhere"))
        .await
        .expect("list pods")
        .items;
    assert_eq!(ran.len(), 2, "both replicas ran on member-1");
    let made: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(f.clients["member-1"].clone());
    let made = made
        .get(&namespace)
        .await
        .expect("the namespace on member-1");
    assert_eq!(
        made.metadata
            .labels
            .unwrap_or_default()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("tfjob-federator"),
        "the namespace the controller made says so"
    );
    let problems = f.controller_problems();
    assert!(
        problems.is_empty(),
        "controller warnings/errors: {problems:#?}"
    );
}

/// A member whose address template would write a bad TF_CONFIG takes no
/// replicas and says why, until the template is fixed.
async fn a_member_with_a_bad_address_template_is_not_ready_and_gets_no_replicas(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let template = |t: &str| kube::api::Patch::Merge(json!({"spec": {"addressTemplate": t}}));
    members
        .patch(
            "member-1",
            &Default::default(),
            &template("{svc}.example.org"),
        )
        .await
        .expect("template patched");
    let member = eventually(
        "member-1 not Ready for its template",
        Duration::from_secs(20),
        async || {
            let (ready, member) = ready_of(&members, "member-1").await?;
            let seen = member.status.as_ref()?.observed_generation == member.metadata.generation;
            (ready == "False" && seen).then_some(member)
        },
    )
    .await;
    let message = member
        .status
        .and_then(|s| {
            s.conditions
                .into_iter()
                .find(|c| c.condition_type == "Ready")
        })
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.contains("addressTemplate") && message.contains("{svc}"),
        "the condition says why: {message}"
    );
    f.submit(gpu_job("avoids", &[("worker", 2, 1)], json!({}), "1"))
        .await;
    f.wait_phase("avoids", "Succeeded", Duration::from_secs(30))
        .await;
    let pods = f.pods_by_cluster("avoids").await;
    assert_eq!(
        pods.keys().collect::<Vec<_>>(),
        ["member-2"],
        "nothing on member-1: {pods:?}"
    );
    members
        .patch(
            "member-1",
            &Default::default(),
            &template("{service}.{namespace}.{cluster}.example.org"),
        )
        .await
        .expect("template fixed");
    observed(&members, "member-1").await;
}

async fn a_job_larger_than_any_cluster_spans_two_with_cross_cluster_tf_config(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    // 6 GPUs in all; each member has 4.
    f.submit(gpu_job(
        "split",
        &[("chief", 1, 2), ("worker", 2, 2), ("ps", 1, 0)],
        json!({}),
        "1",
    ))
    .await;
    f.wait_phase("split", "Succeeded", Duration::from_secs(30))
        .await;
    let by_cluster = f.pods_by_cluster("split").await;
    assert_eq!(by_cluster.len(), 2, "the fewest clusters: {by_cluster:?}");
    assert!(
        !by_cluster.contains_key("home"),
        "home is not a target here"
    );
    let cluster_of = |pod: &str| {
        by_cluster
            .iter()
            .find(|(_, names)| names.iter().any(|n| n == pod))
            .map(|(c, _)| c.clone())
            .expect("pod placed")
    };
    for (cluster, names) in &by_cluster {
        let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), "default");
        for name in names {
            let config = tf_config_of(&pods.get(name).await.expect("pod"));
            for (role, peers) in config["cluster"].as_object().expect("cluster map") {
                for (index, address) in peers.as_array().expect("peer list").iter().enumerate() {
                    let peer = format!("split-{role}-{index}");
                    // Across clusters every peer by its clusterset name, its
                    // own cluster's too: TensorFlow's ParameterServerStrategy
                    // hands the coordinator's map to every task.
                    let expected = format!("{peer}.default.svc.clusterset.local:2222");
                    assert_eq!(
                        address.as_str(),
                        Some(expected.as_str()),
                        "{name} on {cluster} reaches {peer} on {}",
                        cluster_of(&peer)
                    );
                }
            }
        }
    }
}

/// The message of job `name`'s `WaitingForCapacity` condition, once it has one.
async fn waiting_message(f: &Federation, name: &str, limit: Duration) -> String {
    let jobs = typed_jobs(f);
    eventually(&format!("{name} waits for capacity"), limit, async || {
        let job = jobs.get(name).await.ok()?;
        let condition = job
            .status?
            .conditions
            .into_iter()
            .find(|c| c.reason.as_deref() == Some("WaitingForCapacity"))?;
        condition.message
    })
    .await
}

/// A split job's peers reach each other by their clusters' clusterset.local
/// names, which resolve only for exported Services: over members that do
/// not export, the job that fits only split waits, saying why (and `plan`
/// says the same); once they export it splits.
async fn a_job_is_split_only_over_members_that_export_their_services(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.patch_members(json!({"exportServices": false})).await;
    // 6 GPUs in all; each member has 4.
    let job = gpu_job(
        "split",
        &[("chief", 1, 2), ("worker", 2, 2), ("ps", 1, 0)],
        json!({}),
        "1",
    );
    let unreachable = "not split onto: peers on other clusters would reach its replicas at {service}.{namespace}.svc.clusterset.local, which no one answers: its Services are not exported (exportServices: false)";
    let planned = plan(&f, &job);
    assert!(
        planned.contains("cannot be placed now") && planned.contains(unreachable),
        "{planned}"
    );
    f.submit(job).await;
    let waiting = waiting_message(&f, "split", Duration::from_secs(20)).await;
    assert!(
        waiting.contains(&format!(
            "member-1, member-2: insufficient nvidia.com/gpu (need 6); {unreachable}"
        )),
        "{waiting}"
    );
    assert!(
        f.pods_by_cluster("split").await.is_empty(),
        "no pods while waiting"
    );
    f.export_services().await;
    f.wait_phase("split", "Succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(
        f.pods_by_cluster("split").await.len(),
        2,
        "split once both export"
    );
}

async fn without_split_a_job_waits_with_reasons_then_runs_when_capacity_frees(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.submit(gpu_job("first", &[("worker", 1, 4)], json!({}), "4"))
        .await;
    f.submit(gpu_job("second", &[("worker", 1, 4)], json!({}), "4"))
        .await;
    f.wait_phase("first", "Running", Duration::from_secs(20))
        .await;
    f.wait_phase("second", "Running", Duration::from_secs(20))
        .await;
    f.submit(gpu_job(
        "whole",
        &[("worker", 2, 2)],
        json!({"scheduler": {"federation": {"allowSplit": false}}}),
        "1",
    ))
    .await;
    let waiting = waiting_message(&f, "whole", Duration::from_secs(15)).await;
    assert!(
        waiting.contains("member-1, member-2: insufficient nvidia.com/gpu (need 4)"),
        "{waiting}"
    );
    assert!(
        f.pods_by_cluster("whole").await.is_empty(),
        "no pods while waiting"
    );
    f.wait_phase("whole", "Succeeded", Duration::from_secs(40))
        .await;
    let placed = f.pods_by_cluster("whole").await;
    assert_eq!(
        placed.len(),
        1,
        "allowSplit false keeps the job on one cluster: {placed:?}"
    );
}

/// A PodGroup the job's pods need cannot be made (the members lack T9k's
/// PodGroup CRD): no pod is created, and the job says why; once the CRD is
/// back the PodGroup is made and the pods follow; when the job ends, the
/// members' PodGroups go with it.
async fn a_pod_group_that_cannot_be_made_keeps_the_pods_back(ground: Ground) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let crd_name = "podgroups.scheduler.tensorstack.dev";
    let crds = |cluster: &str| Api::<CustomResourceDefinition>::all(f.clients[cluster].clone());
    let mut saved = crds("member-1")
        .get(crd_name)
        .await
        .expect("the PodGroup CRD");
    saved.metadata = kube::api::ObjectMeta {
        name: saved.metadata.name.clone(),
        ..Default::default()
    };
    saved.status = None;
    for member in ["member-1", "member-2"] {
        crds(member)
            .delete(crd_name, &Default::default())
            .await
            .expect("the CRD deleted");
        eventually(
            &format!("the PodGroup CRD gone on {member}"),
            Duration::from_secs(30),
            async || match crds(member).get_opt(crd_name).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )
        .await;
    }
    f.submit(gpu_job(
        "gang",
        &[("worker", 2, 1)],
        json!({"scheduler": {"t9kScheduler": {"queue": "default"}}}),
        "2",
    ))
    .await;
    let reason = |j: &serde_json::Value| {
        j["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Initialized")
            .map(|c| {
                (
                    c["reason"].as_str().unwrap_or_default().to_string(),
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .unwrap_or_default()
    };
    let waiting = f
        .wait_job(
            "gang",
            "Initialized False with reason PodGroupFailed",
            Duration::from_secs(30),
            |j| reason(j).0 == "PodGroupFailed",
        )
        .await;
    assert!(
        reason(&waiting).1.contains("PodGroup"),
        "the message says why: {:?}",
        reason(&waiting)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        f.pods_on("gang", &["home", "member-1", "member-2"])
            .await
            .is_empty(),
        "no pod while its PodGroup is missing: {:?}",
        f.pod_names_on("gang", &["home", "member-1", "member-2"])
            .await
    );
    for member in ["member-1", "member-2"] {
        crds(member)
            .create(&Default::default(), &saved)
            .await
            .expect("the CRD back");
    }
    f.wait_phase("gang", "Succeeded", Duration::from_secs(60))
        .await;
    let pod_groups = |cluster: &str| -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(
            f.clients[cluster].clone(),
            "default",
            &tfjob_federator::builders::pod_group_resource(),
        )
    };
    for member in ["member-1", "member-2"] {
        eventually(
            &format!("no PodGroup left on {member} once the job ended"),
            Duration::from_secs(20),
            async || match pod_groups(member).list(&Default::default()).await {
                Ok(list) if list.items.is_empty() => Ok(()),
                other => Err(format!("{:?}", other.map(|l| l.items.len()))),
            },
        )
        .await;
    }
}

/// Issue 24: PodGroups serve scheduling only: the members' PodGroups go
/// with the job's clean-up when it ends, while the job itself stays (and,
/// `cleanUpPolicy: None`, its pods too).
async fn a_finished_jobs_pod_groups_go_from_the_members(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let pod_groups = |cluster: &str| -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(
            f.clients[cluster].clone(),
            &f.namespace,
            &tfjob_federator::builders::pod_group_resource(),
        )
    };
    f.submit(gpu_job(
        "gang-end",
        &[("chief", 1, 2), ("worker", 2, 2)],
        json!({"scheduler": {"t9kScheduler": {"queue": "default"}}}),
        "6",
    ))
    .await;
    f.wait_phase("gang-end", "Running", Duration::from_secs(20))
        .await;
    let placed = f.pods_by_cluster("gang-end").await;
    assert_eq!(
        placed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["member-1", "member-2"],
        "the job spans both members"
    );
    for member in ["member-1", "member-2"] {
        assert!(
            pod_groups(member)
                .get_opt("gang-end")
                .await
                .expect("get the PodGroup")
                .is_some(),
            "a PodGroup on {member} while the job runs"
        );
    }
    f.wait_phase("gang-end", "Succeeded", Duration::from_secs(30))
        .await;
    for member in ["member-1", "member-2"] {
        eventually(
            &format!("the PodGroup on {member} gone once the job ended"),
            Duration::from_secs(20),
            async || match pod_groups(member).get_opt("gang-end").await {
                Ok(None) => Ok(()),
                other => Err(format!("{:?}", other.map(|g| g.map(|g| g.metadata)))),
            },
        )
        .await;
    }
    assert!(
        f.jobs()
            .get_opt("gang-end")
            .await
            .expect("get the job")
            .is_some(),
        "the job itself stays"
    );
    assert_eq!(
        f.pods_by_cluster("gang-end")
            .await
            .values()
            .map(Vec::len)
            .sum::<usize>(),
        3,
        "cleanUpPolicy None: the pods stay"
    );
}

async fn deleting_a_job_spread_over_clusters_leaves_nothing_anywhere(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.submit(gpu_job(
        "spread",
        &[("chief", 1, 2), ("worker", 2, 2)],
        json!({"scheduler": {"t9kScheduler": {"queue": "default"}}}),
        "60",
    ))
    .await;
    f.wait_phase("spread", "Running", Duration::from_secs(20))
        .await;
    assert_eq!(
        f.pods_by_cluster("spread").await.len(),
        2,
        "the job spans two members"
    );
    let pod_groups = |cluster: &str| -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(
            f.clients[cluster].clone(),
            "default",
            &tfjob_federator::builders::pod_group_resource(),
        )
    };
    for member in ["member-1", "member-2"] {
        let group = pod_groups(member)
            .get("spread")
            .await
            .expect("a PodGroup on each member used");
        assert!(
            group.data["spec"]["minMember"]
                .as_i64()
                .is_some_and(|m| m >= 1),
            "minMember counts the replicas there"
        );
    }
    f.jobs()
        .delete("spread", &Default::default())
        .await
        .expect("delete accepted");
    let jobs = f.jobs();
    eventually("the job to be gone", Duration::from_secs(20), async || {
        jobs.get_opt("spread").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        f.pods_by_cluster("spread").await.is_empty(),
        "no pod is left on any cluster"
    );
    for (cluster, client) in &f.clients {
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), "default");
        let left = services
            .list(&ListParams::default().labels("federation.tfjob.io/job-name=spread"))
            .await
            .expect("list services")
            .items;
        assert!(
            left.is_empty(),
            "services left on {cluster}: {:?}",
            left.iter()
                .map(|s| s.metadata.name.clone())
                .collect::<Vec<_>>()
        );
    }
    for member in ["member-1", "member-2"] {
        let groups = pod_groups(member);
        eventually(
            "member PodGroups deleted",
            Duration::from_secs(10),
            async || groups.get_opt("spread").await.ok()?.is_none().then_some(()),
        )
        .await;
    }
}

fn count(
    pods: &std::collections::BTreeMap<String, Vec<String>>,
) -> std::collections::BTreeMap<String, usize> {
    pods.iter()
        .map(|(c, names)| (c.clone(), names.len()))
        .collect()
}

async fn spread_and_weighted_give_the_expected_counts_per_cluster(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let spread = json!({"scheduler": {"federation": {"strategy": "Spread"}}});
    f.submit(gpu_job("spread", &[("worker", 4, 1)], spread, "1"))
        .await;
    f.wait_phase("spread", "Succeeded", Duration::from_secs(30))
        .await;
    let expected = std::collections::BTreeMap::from([
        ("member-1".to_string(), 2),
        ("member-2".to_string(), 2),
    ]);
    assert_eq!(count(&f.pods_by_cluster("spread").await), expected);

    let weighted = json!({"scheduler": {"federation": {"strategy": "Weighted", "weights": {"member-1": 3, "member-2": 1}}}});
    f.submit(gpu_job("weighted", &[("worker", 4, 0)], weighted, "1"))
        .await;
    f.wait_phase("weighted", "Succeeded", Duration::from_secs(30))
        .await;
    let expected = std::collections::BTreeMap::from([
        ("member-1".to_string(), 3),
        ("member-2".to_string(), 1),
    ]);
    assert_eq!(count(&f.pods_by_cluster("weighted").await), expected);
}

async fn selector_names_and_unschedulable_are_respected(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let label = json!({"metadata": {"labels": {"tier": "gpu"}}});
    members
        .patch(
            "member-2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .expect("label member-2");
    let selected =
        json!({"scheduler": {"federation": {"clusterSelector": {"matchLabels": {"tier": "gpu"}}}}});
    f.submit(gpu_job("selected", &[("worker", 1, 1)], selected, "1"))
        .await;
    f.wait_phase("selected", "Succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(
        f.pods_by_cluster("selected")
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["member-2"],
        "only the labelled member is selected"
    );

    let named = json!({"scheduler": {"federation": {"clusterNames": ["member-2"]}}});
    f.submit(gpu_job("named", &[("worker", 1, 1)], named, "1"))
        .await;
    f.wait_phase("named", "Succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(
        f.pods_by_cluster("named").await.keys().collect::<Vec<_>>(),
        ["member-2"]
    );

    let cordon = json!({"spec": {"unschedulable": true}});
    members
        .patch(
            "member-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&cordon),
        )
        .await
        .expect("cordon member-1");
    observed(&members, "member-1").await;
    f.submit(gpu_job("cordoned", &[("worker", 1, 1)], json!({}), "1"))
        .await;
    f.wait_phase("cordoned", "Succeeded", Duration::from_secs(30))
        .await;
    assert_eq!(
        f.pods_by_cluster("cordoned")
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["member-2"],
        "the unschedulable member gets nothing new"
    );
}

async fn the_higher_priority_job_gets_freed_capacity_first(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    // Any pod a cluster's scheduler cannot fit shows Unschedulable at some
    // point: watch every cluster for it during the whole test.
    let overcommits = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watched = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (cluster, client) in &f.clients {
        let pods: Api<Pod> = Api::all(client.clone());
        let seen = overcommits.clone();
        let watched = watched.clone();
        let cluster = cluster.clone();
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut events = kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(pods, kube::runtime::watcher::Config::default()),
            )
            .boxed();
            while let Some(event) = events.next().await {
                let (Ok(kube::runtime::watcher::Event::Apply(pod))
                | Ok(kube::runtime::watcher::Event::InitApply(pod))) = event
                else {
                    continue;
                };
                watched.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
                if conditions
                    .iter()
                    .any(|c| c.reason.as_deref() == Some("Unschedulable"))
                {
                    seen.lock().expect("lock").push(format!(
                        "{cluster}/{}",
                        pod.metadata.name.unwrap_or_default()
                    ));
                }
            }
        });
    }
    f.submit(gpu_job("short", &[("worker", 1, 4)], json!({}), "1"))
        .await;
    f.submit(gpu_job("long", &[("worker", 1, 4)], json!({}), "12"))
        .await;
    f.wait_phase("short", "Running", Duration::from_secs(20))
        .await;
    f.wait_phase("long", "Running", Duration::from_secs(20))
        .await;
    let whole = |priority: i32| json!({"scheduler": {"t9kScheduler": {"queue": "default", "priority": priority}, "federation": {"allowSplit": false}}});
    f.submit(gpu_job("low", &[("worker", 1, 4)], whole(10), "1"))
        .await;
    f.submit(gpu_job("high", &[("worker", 1, 4)], whole(90), "1"))
        .await;
    // "short" frees one member: it goes to "high", though "low" waited longer.
    f.wait_phase("high", "Running", Duration::from_secs(20))
        .await;
    assert!(
        f.pods_by_cluster("low").await.is_empty(),
        "the low-priority job still waits"
    );
    f.wait_phase("low", "Succeeded", Duration::from_secs(40))
        .await;
    assert!(
        watched.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the over-commit watch saw the pods"
    );
    let seen = overcommits.lock().expect("lock").clone();
    assert!(
        seen.is_empty(),
        "pods a cluster could not fit (over-commit): {seen:?}"
    );
}

async fn members_with_export_services_get_a_service_export_per_service(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    sim_kube::install_schemaless_crd(
        &f.clients["member-1"],
        &tfjob_federator::builders::service_export_resource(),
    )
    .await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let export = json!({"spec": {"exportServices": true}});
    members
        .patch(
            "member-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&export),
        )
        .await
        .expect("enable exports");
    observed(&members, "member-1").await;
    f.submit(gpu_job(
        "exported",
        &[("chief", 1, 1), ("worker", 1, 1)],
        json!({"scheduler": {"federation": {"clusterNames": ["member-1"]}}}),
        "2",
    ))
    .await;
    let exports: Api<kube::api::DynamicObject> = Api::namespaced_with(
        f.clients["member-1"].clone(),
        "default",
        &tfjob_federator::builders::service_export_resource(),
    );
    let names = eventually(
        "ServiceExports on member-1",
        Duration::from_secs(20),
        async || {
            let mut names: Vec<String> = exports
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|e| e.metadata.name)
                .collect();
            names.sort();
            (names.len() == 2).then_some(names)
        },
    )
    .await;
    assert_eq!(names, ["exported-chief-0", "exported-worker-0"]);
    let owner = exports
        .get("exported-chief-0")
        .await
        .expect("export")
        .metadata
        .owner_references
        .expect("owned")[0]
        .kind
        .clone();
    assert_eq!(owner, "Service", "the export goes with its service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_jobs_of_eight_replicas_over_three_clusters_finish_cleanly() {
    let f = federation(Ground::Sim)
        .nodes(4)
        .settings(HOME_NOT_TARGET)
        .start()
        .await;
    // Every ADDED pod per cluster, and any pod a cluster could not fit.
    let created = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        usize,
    >::new()));
    let overcommits = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for (cluster, client) in &f.clients {
        let pods: Api<Pod> = Api::all(client.clone());
        let (created, overcommits, cluster) =
            (created.clone(), overcommits.clone(), cluster.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            let mut seen = std::collections::HashSet::new();
            let mut events = kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(pods, kube::runtime::watcher::Config::default()),
            )
            .boxed();
            while let Some(event) = events.next().await {
                let (Ok(kube::runtime::watcher::Event::Apply(pod))
                | Ok(kube::runtime::watcher::Event::InitApply(pod))) = event
                else {
                    continue;
                };
                let name = pod.metadata.name.clone().unwrap_or_default();
                if seen.insert(pod.metadata.uid.clone().unwrap_or_default()) {
                    *created
                        .lock()
                        .expect("lock")
                        .entry(format!("{cluster}/{name}"))
                        .or_default() += 1;
                }
                let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
                if conditions
                    .iter()
                    .any(|c| c.reason.as_deref() == Some("Unschedulable"))
                {
                    overcommits
                        .lock()
                        .expect("lock")
                        .push(format!("{cluster}/{name}"));
                }
            }
        });
    }
    // Every other job Spread: a Spread job placed while both members have
    // room deals over both. Pack alone used both only when the jobs came
    // faster than a member's room emptied, which is the machine's pace.
    for i in 0..100 {
        let policy = if i % 2 == 0 {
            json!({"scheduler": {"federation": {"strategy": "Spread"}}})
        } else {
            json!({})
        };
        let job = gpu_job(
            &format!("bulk-{i}"),
            &[("chief", 1, 0), ("worker", 6, 0), ("ps", 1, 0)],
            policy,
            "1",
        );
        f.submit(job).await;
    }
    let jobs = typed_jobs(&f);
    let outcome = eventually("100 jobs to end", Duration::from_secs(120), async || {
        let list = jobs.list(&ListParams::default()).await.ok()?;
        let phases: Vec<String> = list
            .items
            .iter()
            .filter_map(|j| {
                Some(
                    serde_json::to_value(j.status.as_ref()?.phase?)
                        .ok()?
                        .as_str()?
                        .to_string(),
                )
            })
            .collect();
        (phases.len() == 100 && phases.iter().all(|p| p == "Succeeded" || p == "Failed"))
            .then_some(phases)
    })
    .await;
    assert!(
        outcome.iter().all(|p| p == "Succeeded"),
        "every job succeeds"
    );
    let created = created.lock().expect("lock").clone();
    assert_eq!(created.len(), 800, "one pod per replica");
    let duplicates: Vec<&String> = created
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k)
        .collect();
    assert!(duplicates.is_empty(), "pods created twice: {duplicates:?}");
    let clusters: std::collections::BTreeSet<&str> =
        created.keys().filter_map(|k| k.split('/').next()).collect();
    assert_eq!(
        clusters.len(),
        2,
        "both members are used (by the Spread jobs at least; home is not a target here): {clusters:?}"
    );
    let seen = overcommits.lock().expect("lock").clone();
    assert!(seen.is_empty(), "pods a cluster could not fit: {seen:?}");
    let problems = f.controller_problems();
    assert!(
        problems.is_empty(),
        "controller warnings/errors: {problems:#?}"
    );
}

/// What the job's status said at one moment.
#[derive(Debug)]
struct Sample {
    backoff_count: i64,
    clusters: Vec<String>,
    replicas_counted: i64,
}

fn sample(job: &TensorFlowTrainingJob) -> Option<Sample> {
    let status = serde_json::to_value(job.status.as_ref()?).ok()?;
    let clusters = status["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["replicaStatus"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["cluster"].as_str().map(str::to_string))
        .collect();
    let replicas_counted = [
        "creating",
        "pending",
        "running",
        "succeeded",
        "failed",
        "unknown",
    ]
    .iter()
    .filter_map(|k| status["aggregate"][k].as_i64())
    .sum();
    Some(Sample {
        backoff_count: status["backoffCount"].as_i64().unwrap_or(0),
        clusters,
        replicas_counted,
    })
}

/// Samples the job's status every 100 ms until dropped.
fn watch_status(
    jobs: Api<TensorFlowTrainingJob>,
    name: &str,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Vec<Sample>>>,
) {
    let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = samples.clone();
    let name = name.to_string();
    let task = tokio::spawn(async move {
        loop {
            if let Ok(job) = jobs.get(&name).await
                && let Some(s) = sample(&job)
            {
                sink.lock().expect("samples").push(s);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (task, samples)
}

async fn a_lost_member_fails_its_jobs_over_and_is_swept_when_it_returns(ground: Ground) {
    let settings = format!("{HOME_NOT_TARGET}{FAST_LOSS}");
    let f = federation(ground).settings(&settings).start().await;
    f.submit(gpu_job(
        "moving",
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 1}}),
        "8",
    ))
    .await;
    f.wait_phase("moving", "Running", Duration::from_secs(20))
        .await;
    let placed = f.pods_by_cluster("moving").await;
    assert_eq!(
        placed.len(),
        1,
        "Pack keeps the job on one member: {placed:?}"
    );
    let lost = placed.keys().next().expect("a cluster").clone();
    let other = if lost == "member-1" {
        "member-2"
    } else {
        "member-1"
    };
    let (sampler, samples) = watch_status(typed_jobs(&f), "moving");

    // Erroring for less than the lost timeout changes nothing.
    set_faults(&f.clients[&lost], json!({"errorRate": 1.0})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    set_faults(&f.clients[&lost], json!({"errorRate": 0.0})).await;
    let job = typed_jobs(&f).get("moving").await.expect("job");
    assert_eq!(
        sample(&job).expect("status").backoff_count,
        0,
        "a member erroring briefly is not lost"
    );

    set_faults(&f.clients[&lost], json!({"partitioned": true})).await;
    let done = typed(
        f.wait_phase("moving", "Succeeded", Duration::from_secs(40))
            .await,
    );
    let last = sample(&done).expect("status");
    assert_eq!(last.backoff_count, 1, "the failover counts one restart");
    assert!(
        !last.clusters.is_empty() && last.clusters.iter().all(|c| c == other),
        "re-placed on {other}: {last:?}"
    );
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.placement.as_ref())
            .map(|p| p.epoch),
        Some(1),
        "the failover moved the placement epoch"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(f.clients["home"].clone(), "default");
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("moving"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.iter().any(|r| r == "ClusterLost"), "{reasons:?}");

    set_faults(&f.clients[&lost], json!({"partitioned": false})).await;
    let pods: Api<Pod> = Api::namespaced(f.clients[&lost].clone(), "default");
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(f.clients[&lost].clone(), "default");
    eventually(
        "the old epoch's pods and services deleted from the returned member",
        Duration::from_secs(20),
        async || {
            let selector = ListParams::default().labels("federation.tfjob.io/job-name=moving");
            let pods = pods.list(&selector).await.ok()?.items;
            let services = services.list(&selector).await.ok()?.items;
            (pods.is_empty() && services.is_empty()).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sampler.abort();
    let samples = std::mem::take(&mut *samples.lock().expect("samples"));
    assert!(
        samples.iter().any(|s| s.backoff_count == 1),
        "the failover was sampled"
    );
    for s in samples.iter() {
        assert!(
            s.replicas_counted <= 2,
            "never more than the job's replicas: {s:?}"
        );
        if s.backoff_count == 1 {
            assert!(
                !s.clusters.iter().any(|c| c == &lost),
                "after the failover no replica of {lost} is reported: {s:?}"
            );
        }
    }
    let job = typed_jobs(&f).get("moving").await.expect("job");
    assert_eq!(
        sample(&job).map(|s| (s.backoff_count, s.clusters)),
        Some((1, vec![other.to_string(), other.to_string()])),
        "the returned member's pods never show"
    );
}

async fn a_job_deleted_while_a_member_is_partitioned_is_cleaned_there_when_it_heals(
    ground: Ground,
) {
    // Home's replicas exported like the members': the job spreads over all three.
    let settings = format!("{FAST_LOSS}homeExportServices: true\n");
    let f = federation(ground).settings(&settings).start().await;
    f.submit(gpu_job(
        "everywhere",
        &[("worker", 3, 1)],
        json!({"scheduler": {"t9kScheduler": {"queue": "default"}, "federation": {"strategy": "Spread"}}}),
        "60",
    ))
    .await;
    f.wait_phase("everywhere", "Running", Duration::from_secs(20))
        .await;
    let placed = f.pods_by_cluster("everywhere").await;
    assert_eq!(
        placed.keys().map(String::as_str).collect::<Vec<_>>(),
        ["home", "member-1", "member-2"],
        "spread over all three clusters"
    );
    f.delete_while_partitioned("everywhere", "member-2").await;
    for (cluster, client) in &f.clients {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), "default");
        let groups: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            "default",
            &tfjob_federator::builders::pod_group_resource(),
        );
        eventually(
            &format!("nothing of the job left on {cluster}"),
            Duration::from_secs(20),
            async || {
                let selector =
                    ListParams::default().labels("federation.tfjob.io/job-name=everywhere");
                let left = pods.list(&selector).await.ok()?.items.len()
                    + services.list(&selector).await.ok()?.items.len()
                    + groups.list(&selector).await.ok()?.items.len();
                (left == 0).then_some(())
            },
        )
        .await;
    }
}

/// `tfjob-federator plan` against the federation, with the controller's settings.
fn plan(f: &Federation, job: &serde_json::Value) -> String {
    let file = f.dir.join("plan-job.yaml");
    std::fs::write(&file, serde_yaml::to_string(job).expect("yaml")).expect("write job");
    let output = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .arg("plan")
        .arg("-f")
        .arg(&file)
        .arg("--kubeconfig")
        .arg(&f.controller_kubeconfig)
        .arg("--config")
        .arg(f.dir.join("controller.yaml"))
        .output()
        .expect("plan runs");
    assert!(
        output.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

async fn plan_prints_where_replicas_would_go_and_why_others_are_passed_over(ground: Ground) {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    members
        .patch(
            "member-2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon member-2");

    let fits = plan(&f, &gpu_job("fits", &[("worker", 2, 2)], json!({}), "1"));
    assert!(
        fits.starts_with("job default/fits: 2 replicas, strategy Pack, allowSplit true\n"),
        "{fits}"
    );
    for replica in ["worker-0", "worker-1"] {
        assert!(
            fits.lines()
                .any(|l| l.trim_start().starts_with(replica) && l.ends_with("-> member-1")),
            "{replica} goes to member-1: {fits}"
        );
    }
    assert!(
        fits.contains("passed over:\n") && fits.contains("  member-2: unschedulable\n"),
        "{fits}"
    );
    assert!(!fits.contains("home"), "home is not a target here: {fits}");

    let too_big = plan(
        &f,
        &gpu_job(
            "too-big",
            &[("worker", 3, 2)],
            json!({"scheduler": {"federation": {"allowSplit": false}}}),
            "1",
        ),
    );
    assert!(
        too_big.contains("cannot be placed now; it would wait for capacity:\n"),
        "{too_big}"
    );
    assert!(
        too_big.contains("  member-1: insufficient nvidia.com/gpu"),
        "{too_big}"
    );
    assert!(too_big.contains("  member-2: unschedulable"), "{too_big}");
    let jobs = f.jobs().list(&ListParams::default()).await.expect("list");
    assert!(jobs.items.is_empty(), "a dry run creates nothing");
}

async fn a_restarted_controller_keeps_a_split_job_where_it_was_placed(ground: Ground) {
    let mut f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.submit(gpu_job("stays", &[("worker", 3, 2)], json!({}), "5"))
        .await;
    f.wait_phase("stays", "Running", Duration::from_secs(20))
        .await;
    let before = f.pods_by_cluster("stays").await;
    assert_eq!(before.len(), 2, "6 GPUs span both members: {before:?}");
    f.restart_controller().await;
    let done = typed(
        f.wait_phase("stays", "Succeeded", Duration::from_secs(30))
            .await,
    );
    assert_eq!(
        f.pods_by_cluster("stays").await,
        before,
        "the same pods on the same clusters, none added"
    );
    let status = sample(&done).expect("status");
    assert_eq!(
        status.backoff_count, 0,
        "a restart of the controller is no failover"
    );
    assert_eq!(status.replicas_counted, 3);
    assert!(
        f.controller_problems().is_empty(),
        "{:?}",
        f.controller_problems()
    );
}

async fn a_restarted_controller_cleans_up_after_a_finished_job_on_every_cluster(ground: Ground) {
    let mut f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    f.submit(gpu_job(
        "finished",
        &[("worker", 3, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "all"}}),
        "4",
    ))
    .await;
    f.wait_phase("finished", "Running", Duration::from_secs(20))
        .await;
    assert_eq!(
        f.pods_by_cluster("finished").await.len(),
        2,
        "split over both members"
    );
    // The job ends while no controller runs: its pods are left over
    // everywhere. (A status written by hand would not do: the controller
    // trusts only the status it wrote itself, see tests/trust.rs.)
    f.kill_controller();
    eventually("worker-0 Succeeded", Duration::from_secs(20), async || {
        let all = f.pods_on("finished", &CLUSTERS).await;
        all.values()
            .flatten()
            .any(|p| {
                name_of(p) == "finished-worker-0"
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            })
            .then_some(())
    })
    .await;
    f.restart_controller().await;
    f.wait_phase("finished", "Succeeded", Duration::from_secs(20))
        .await;
    for cluster in ["member-1", "member-2"] {
        let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), "default");
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(f.clients[cluster].clone(), "default");
        eventually(
            &format!("the leftovers on {cluster} deleted"),
            Duration::from_secs(20),
            async || {
                let selector =
                    ListParams::default().labels("federation.tfjob.io/job-name=finished");
                let left = pods.list(&selector).await.ok()?.items.len()
                    + services.list(&selector).await.ok()?.items.len();
                (left == 0).then_some(())
            },
        )
        .await;
    }
}

/// Whether a line of the controller's log tells of a request refused by
/// authorization: a 403 or "forbidden" in what it says, its timestamp left
/// out (a timestamp's digits once read as a 403).
fn refused_by_rbac(line: &str) -> bool {
    let said = match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(mut entry)) => {
            entry.remove("timestamp");
            serde_json::Value::Object(entry).to_string()
        }
        _ => line.to_string(),
    };
    said.to_lowercase().contains("forbidden")
        || said
            .split(|c: char| !c.is_ascii_digit())
            .any(|number| number == "403")
}

#[test]
fn a_refusal_is_read_from_what_a_log_line_says_not_from_its_timestamp() {
    let lost = r#"{"timestamp":"2026-12-04T04:07:04.403898Z","level":"WARN","fields":{"message":"member cluster lost; its jobs are re-placed","timeout_ms":3000}}"#;
    assert!(!refused_by_rbac(lost));
    let refused = r#"{"timestamp":"2026-12-04T04:07:04.1Z","level":"WARN","fields":{"message":"creating pod failed","error":"ApiError: pods is forbidden (403)"}}"#;
    assert!(refused_by_rbac(refused));
    assert!(refused_by_rbac(r#"{"level":"WARN","fields":{"code":403}}"#));
    assert!(!refused_by_rbac(
        r#"{"level":"WARN","fields":{"timeout_ms":4030}}"#
    ));
}

/// The rules of every Role and ClusterRole in a manifest of several documents.
fn rules(manifest: &str) -> Vec<PolicyRule> {
    use serde::Deserialize;
    let rules: Vec<PolicyRule> = serde_yaml::Deserializer::from_str(manifest)
        .filter_map(|doc| serde_json::Value::deserialize(doc).ok())
        .filter(|doc| doc["kind"] == "ClusterRole" || doc["kind"] == "Role")
        .filter_map(|doc| serde_json::from_value::<Vec<PolicyRule>>(doc["rules"].clone()).ok())
        .flatten()
        .collect();
    assert!(!rules.is_empty(), "RBAC rules in the manifest");
    rules
}

/// What Kubernetes' default roles grant every authenticated user: the
/// self-reviews (system:basic-user) and reading ClusterTrustBundles.
fn granted_to_everyone(access: &serde_json::Value) -> bool {
    matches!(
        (access["apiGroup"].as_str(), access["resource"].as_str()),
        (Some("authorization.k8s.io" | "authentication.k8s.io"), _)
            | (Some("certificates.k8s.io"), Some("clustertrustbundles"))
    )
}

/// Every (group, resource, verb) a manifest's rules name.
fn all_accesses(rules: &[PolicyRule]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.push(json!({"apiGroup": group, "resource": resource, "verb": verb}));
                }
            }
        }
    }
    out
}

/// The rows of the book's table of what `account` may do, as accesses.
fn documented_accesses(account: &str) -> Vec<serde_json::Value> {
    real::documented_rbac_rows(account)
        .into_iter()
        .map(|(group, resource, verb)| json!({"apiGroup": group, "resource": resource, "verb": verb}))
        .collect()
}

/// What `kubectl auth can-i --list --as USER` says USER may do (in the
/// namespace tfjob-federator, so that Roles there count), as accesses.
fn can_i_list(kubeconfig: &std::path::Path, user: &str) -> Vec<serde_json::Value> {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "auth",
            "can-i",
            "--list",
            "--namespace",
            "tfjob-federator",
            "--as",
            user,
        ])
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl auth can-i --list: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let mut accesses = Vec::new();
    for line in text.lines().skip(1) {
        let Some(name) = line
            .split_whitespace()
            .next()
            .filter(|n| !n.starts_with('['))
        else {
            continue; // non-resource URLs
        };
        let verbs = line
            .rsplit_once('[')
            .map(|(_, v)| {
                v.trim_end_matches(']')
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let (kind, subresource) = name
            .split_once('/')
            .map_or((name, None), |(k, s)| (k, Some(s)));
        let (plural, group) = kind.split_once('.').unwrap_or((kind, ""));
        let resource = match subresource {
            Some(sub) => format!("{plural}/{sub}"),
            None => plural.to_string(),
        };
        for verb in verbs {
            accesses.push(json!({"apiGroup": group, "resource": resource, "verb": verb}));
        }
    }
    accesses
}

fn role_allows(rules: &[PolicyRule], access: &serde_json::Value) -> bool {
    let field = |k: &str| access[k].as_str().unwrap_or_default().to_string();
    let (group, resource, verb) = (field("apiGroup"), field("resource"), field("verb"));
    let has = |list: &Option<Vec<String>>, want: &str| {
        list.as_ref()
            .is_some_and(|l| l.iter().any(|x| x == want || x == "*"))
    };
    rules.iter().any(|rule| {
        has(&rule.api_groups, &group)
            && has(&rule.resources, &resource)
            && rule.verbs.iter().any(|v| v == &verb || v == "*")
    })
}

/// The kinds of requests the controller made on a cluster (`GET /_sim/requests`).
async fn controller_accesses(client: &kube::Client) -> Vec<serde_json::Value> {
    let request = hyper::Request::get("/_sim/requests")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(request).await.expect("/_sim/requests");
    let all: Vec<serde_json::Value> = serde_json::from_str(&text).expect("a JSON list");
    let ours = format!("tfjob-federator/{}", env!("CARGO_PKG_VERSION"));
    all.into_iter()
        .filter(|a| a["userAgent"] == ours.as_str())
        .collect()
}

async fn the_shipped_rbac_allows_every_request_the_controller_makes(ground: Ground) {
    let f = federation(ground).settings(FAST_LOSS).start().await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    sim_kube::install_schemaless_crd(
        &f.clients["member-1"],
        &tfjob_federator::builders::service_export_resource(),
    )
    .await;
    sim_kube::install_schemaless_crd(
        &f.clients["home"],
        &tfjob_federator::builders::tensorboard_resource(),
    )
    .await;
    members
        .patch(
            "member-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"exportServices": true}})),
        )
        .await
        .expect("exports on member-1");
    observed(&members, "member-1").await;
    // Everything a job can ask for, on every cluster.
    let everything = json!({
        "scheduler": {"t9kScheduler": {"queue": "default"}, "federation": {"strategy": "Spread"}},
        "tensorboardSpec": {"image": "tensorflow/tensorflow:2.15.0", "trainingLogFilesets": ["t9k://pvc/logs/a"]},
        "runPolicy": {"cleanUpPolicy": "all"},
    });
    f.submit(gpu_job(
        "audited",
        &[("worker", 3, 1)],
        everything.clone(),
        "1",
    ))
    .await;
    f.wait_phase("audited", "Succeeded", Duration::from_secs(30))
        .await;
    // Deleted while member-2 is lost: teardown, then the sweep when it returns.
    f.submit(gpu_job("abandoned", &[("worker", 3, 1)], everything, "60"))
        .await;
    f.wait_phase("abandoned", "Running", Duration::from_secs(20))
        .await;
    f.delete_while_partitioned("abandoned", "member-2").await;
    let pods: Api<Pod> = Api::namespaced(f.clients["member-2"].clone(), "default");
    eventually("member-2 swept", Duration::from_secs(20), async || {
        let selector = ListParams::default().labels("federation.tfjob.io/job-name=abandoned");
        pods.list(&selector)
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;

    let controller = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/controller.yaml"),
    )
    .expect("deploy/controller.yaml");
    let member = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/member-rbac.yaml"),
    )
    .expect("deploy/member-rbac.yaml");
    let home_role = rules(&controller);
    let member_role = rules(&member);
    if ground == Ground::Real {
        // Real authorization decided every request: none was refused, and
        // each identity may do exactly what its manifest grants.
        let refused: Vec<String> = f
            .controller_problems()
            .into_iter()
            .filter(|line| refused_by_rbac(line))
            .collect();
        assert!(refused.is_empty(), "requests refused by RBAC: {refused:#?}");
        for (cluster, role, account) in [
            ("home", &home_role, "tfjob-federator"),
            ("member-1", &member_role, "tfjob-federator-member"),
        ] {
            let granted = can_i_list(
                &f.kubeconfig(cluster),
                &format!("system:serviceaccount:tfjob-federator:{account}"),
            );
            let documented = documented_accesses(account);
            let shown: Vec<&serde_json::Value> =
                granted.iter().filter(|a| !granted_to_everyone(a)).collect();
            assert!(
                shown.iter().all(|a| documented.contains(a))
                    && documented.iter().all(|a| shown.contains(&a)),
                "{cluster}: kubectl auth can-i --list for {account} differs from the table of {}:\n can-i: {shown:?}\n documented: {documented:?}",
                real::RBAC_PAGE
            );
            let missing: Vec<serde_json::Value> = all_accesses(role)
                .into_iter()
                .filter(|a| !granted.contains(a))
                .collect();
            assert!(missing.is_empty(), "{cluster}: {account} lacks {missing:?}");
            let excess: Vec<&serde_json::Value> = granted
                .iter()
                .filter(|a| !role_allows(role, a) && !granted_to_everyone(a))
                .collect();
            assert!(
                excess.is_empty(),
                "{cluster}: {account} may do more than its manifest says: {excess:?}"
            );
        }
        // One step beyond is refused: Secrets outside the controller's
        // namespace, deleting jobs, writing MemberClusters' specs.
        let controller = "system:serviceaccount:tfjob-federator:tfjob-federator";
        for beyond in [
            ["get", "secrets", "--namespace", "default"],
            ["create", "secrets", "--namespace", "default"],
            ["delete", "tensorflowtrainingjobs", "--namespace", "default"],
            ["update", "memberclusters", "--namespace", "default"],
        ] {
            let output = Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(f.kubeconfig("home"))
                .args(["auth", "can-i"])
                .args(beyond)
                .args(["--as", controller])
                .output()
                .expect("kubectl runs");
            let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
            assert_eq!(answer, "no", "{controller} may {beyond:?}");
        }
        return;
    }
    for (cluster, role, must) in [
        (
            "home",
            &home_role,
            ("coordination.k8s.io", "leases", "update"),
        ),
        (
            "member-1",
            &member_role,
            ("multicluster.x-k8s.io", "serviceexports", "create"),
        ),
        ("member-2", &member_role, ("", "pods", "delete")),
    ] {
        let accesses = controller_accesses(&f.clients[cluster]).await;
        assert!(
            accesses
                .iter()
                .any(|a| a["apiGroup"] == must.0 && a["resource"] == must.1 && a["verb"] == must.2),
            "{cluster}: the controller's requests were recorded: {accesses:?}"
        );

        let denied: Vec<&serde_json::Value> =
            accesses.iter().filter(|a| !role_allows(role, a)).collect();
        assert!(
            denied.is_empty(),
            "{cluster}: requests the shipped ClusterRole does not allow: {denied:?}"
        );
    }
}

// The scenarios above that run on both grounds (the real clusters are three
// of one node each). On the simulated ground only: the member-status test
// (it partitions a cluster under two controllers' view and sizes nodes) and
// the hundred-job run (four nodes per cluster; throughput is the
// benchmarks' business).
on_both_grounds!(
    a_job_in_a_namespace_the_members_lack_runs_there,
    a_member_with_a_bad_address_template_is_not_ready_and_gets_no_replicas,
    a_lost_member_fails_its_jobs_over_and_is_swept_when_it_returns,
    pack_places_a_job_that_fits_one_member_entirely_there,
    a_job_larger_than_any_cluster_spans_two_with_cross_cluster_tf_config,
    a_job_is_split_only_over_members_that_export_their_services,
    without_split_a_job_waits_with_reasons_then_runs_when_capacity_frees,
    deleting_a_job_spread_over_clusters_leaves_nothing_anywhere,
    a_pod_group_that_cannot_be_made_keeps_the_pods_back,
    a_finished_jobs_pod_groups_go_from_the_members,
    spread_and_weighted_give_the_expected_counts_per_cluster,
    selector_names_and_unschedulable_are_respected,
    the_higher_priority_job_gets_freed_capacity_first,
    members_with_export_services_get_a_service_export_per_service,
    a_job_deleted_while_a_member_is_partitioned_is_cleaned_there_when_it_heals,
    plan_prints_where_replicas_would_go_and_why_others_are_passed_over,
    a_restarted_controller_keeps_a_split_job_where_it_was_placed,
    a_restarted_controller_cleans_up_after_a_finished_job_on_every_cluster,
    the_shipped_rbac_allows_every_request_the_controller_makes,
);
