//! Member registration: `sim --register` and `join` against simulated
//! clusters, checked through kube-rs on the home cluster.

#[path = "common/kube.rs"]
mod sim_kube;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::config::Kubeconfig;
use sim_kube::{SimCluster, client_for};
use tfjob_federator::api::MemberCluster;

/// A `tfjob-federator sim` child process, killed on drop.
struct SimProcess {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_sim(args: &[&str]) -> SimProcess {
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
    let sim = start_sim(&["--clusters", "3", "--register"]);
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
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `tfjob-federator run` child process against a home kubeconfig.
struct ControllerProcess(Child);

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_controller(home_kubeconfig: &std::path::Path) -> ControllerProcess {
    let child = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(home_kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tfjob-federator run starts");
    ControllerProcess(child)
}

async fn ready_of(members: &Api<MemberCluster>, name: &str) -> Option<(String, MemberCluster)> {
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

#[tokio::test]
async fn member_status_shows_readiness_capacity_and_partitions() {
    let sim = start_sim(&[
        "--clusters",
        "3",
        "--register",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
    ]);
    let _controller = start_controller(&sim.dir.join("home.kubeconfig"));
    let home =
        client_for(&std::fs::read_to_string(sim.dir.join("home.kubeconfig")).expect("kubeconfig"))
            .await;
    let members: Api<MemberCluster> = Api::all(home);
    let member = sim_kube::eventually_within(
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

    let member_one = client_for(
        &std::fs::read_to_string(sim.dir.join("member-1.kubeconfig")).expect("kubeconfig"),
    )
    .await;
    let faults = |partitioned: bool| {
        let client = member_one.clone();
        async move {
            let body = format!("{{\"partitioned\":{partitioned}}}").into_bytes();
            let request = hyper::Request::put("/_sim/faults")
                .header("content-type", "application/json")
                .body(body)
                .expect("request");
            client
                .request_text(request)
                .await
                .expect("admin paths answer even when partitioned");
        }
    };
    faults(true).await;
    sim_kube::eventually_within(
        "member-1 NotReady while partitioned",
        Duration::from_secs(20),
        async || {
            let (ready, _) = ready_of(&members, "member-1").await?;
            (ready == "False").then_some(())
        },
    )
    .await;
    let (other, _) = ready_of(&members, "member-2")
        .await
        .expect("member-2 status");
    assert_eq!(
        other, "True",
        "a partition of member-1 leaves member-2 alone"
    );
    faults(false).await;
    sim_kube::eventually_within(
        "member-1 Ready again once healed",
        Duration::from_secs(20),
        async || {
            let (ready, _) = ready_of(&members, "member-1").await?;
            (ready == "True").then_some(())
        },
    )
    .await;
}
