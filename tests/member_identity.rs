//! Who a member really is (issue 22, finding 5, and the error bodies of
//! finding 6), on both grounds from one source: a member's identity is the
//! uid of its `kube-system` namespace, recorded in its status when first
//! connected; a MemberCluster whose Secret now reaches another cluster is
//! refused naming both identities while its jobs keep their pods (nothing
//! counted as deleted); one named like home or reaching home is refused and
//! gets no replicas; a second one for the same cluster is refused naming
//! the first, its capacity not counted; and a member server that answers
//! with something other than a Kubernetes `Status` has its body shown
//! nowhere, neither in the status nor in the controller's log; and a
//! controller whose first read of home's identity fails makes its members
//! Ready within seconds, not a probe round later. One more,
//! on the simulated ground alone (TLS would refuse the swap on the real
//! one): the server behind an unchanged kubeconfig becomes another cluster.
//!
//! The harness is the federation one (`tests/common/federation.rs`): home
//! and two members of one node with 4 GPUs each, the controller a
//! subprocess (on the real ground under the identities `deploy/` ships),
//! here placing on members only and probing every half second.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::federation::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Members only, probed often (a refusal shows within a second), lost
/// only after the default minute: a refused member's jobs are not failed
/// over while the tests look.
const SETTINGS: &str = "homeIsTarget: false\nmemberProbeIntervalMs: 500\n";
const SECRETS: &str = "tfjob-federator";
/// What these tests add on home carries it, so that the real ground's
/// clean slate removes it after a failure.
use common::real::EXTRA_LABEL;
const WAIT: Duration = Duration::from_secs(30);

async fn start(ground: Ground) -> Federation {
    federation(ground).settings(SETTINGS).start().await
}

/// The identity of the cluster an admin client reaches.
async fn kube_system_uid(client: &Client) -> String {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .expect("kube-system exists")
        .metadata
        .uid
        .expect("kube-system has a uid")
}

/// The kubeconfig stored in member Secret `name` on home.
async fn stored_kubeconfig(f: &Federation, name: &str) -> ByteString {
    let secrets: Api<Secret> = Api::namespaced(f.client.clone(), SECRETS);
    let secret = secrets.get(name).await.expect("the member Secret");
    secret
        .data
        .and_then(|d| d.get("kubeconfig").cloned())
        .expect("a kubeconfig in the Secret")
}

/// Replaces the kubeconfig in member Secret `name`.
async fn store_kubeconfig(f: &Federation, name: &str, kubeconfig: &ByteString) {
    let secrets: Api<Secret> = Api::namespaced(f.client.clone(), SECRETS);
    secrets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"kubeconfig": kubeconfig}})),
        )
        .await
        .expect("the Secret patched");
}

/// A new Secret `name` holding `kubeconfig`, and a MemberCluster `name`
/// naming it (both labelled as this suite's extras).
async fn register_extra(f: &Federation, name: &str, secret: &str, kubeconfig: Option<&[u8]>) {
    if let Some(kubeconfig) = kubeconfig {
        let secrets: Api<Secret> = Api::namespaced(f.client.clone(), SECRETS);
        let object: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": SECRETS, "labels": {EXTRA_LABEL: "true"}},
            "data": {"kubeconfig": ByteString(kubeconfig.to_vec())},
        }))
        .expect("a Secret");
        secrets
            .create(&PostParams::default(), &object)
            .await
            .expect("the Secret created");
    }
    let members: Api<DynamicObject> = Api::all_with(f.client.clone(), &member_resource());
    let member: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": name, "labels": {EXTRA_LABEL: "true"}},
        "spec": {"kubeconfigSecretRef": {"name": secret, "namespace": SECRETS, "key": "kubeconfig"}},
    }))
    .expect("a MemberCluster");
    members
        .create(&PostParams::default(), &member)
        .await
        .expect("the MemberCluster created");
}

/// Removes the extras: the MemberClusters first (the controller lets them
/// go), then their Secrets.
async fn remove_extras(f: &Federation, members: &[&str], secrets: &[&str]) {
    let member_api: Api<DynamicObject> = Api::all_with(f.client.clone(), &member_resource());
    for name in members {
        let _ = member_api.delete(name, &Default::default()).await;
    }
    let secret_api: Api<Secret> = Api::namespaced(f.client.clone(), SECRETS);
    for name in secrets {
        let _ = secret_api.delete(name, &Default::default()).await;
    }
}

/// The Ready condition of member `name` (status, reason, message), once it
/// has one.
async fn ready_condition(
    members: &Api<MemberCluster>,
    name: &str,
) -> Option<(String, String, String)> {
    let member = members.get(name).await.ok()?;
    let condition = member
        .status?
        .conditions
        .into_iter()
        .find(|c| c.condition_type == "Ready")?;
    Some((
        condition.status,
        condition.reason.unwrap_or_default(),
        condition.message.unwrap_or_default(),
    ))
}

/// Waits until member `name` is not Ready with a message holding every one
/// of `words`; returns (reason, message).
async fn wait_refused(f: &Federation, name: &str, words: &[&str]) -> (String, String) {
    let members = f.members();
    eventually(
        &format!("{name} not Ready naming {words:?}"),
        WAIT,
        async || {
            let (status, reason, message) = ready_condition(&members, name)
                .await
                .ok_or("no Ready condition yet".to_string())?;
            if status == "False" && words.iter().all(|w| message.contains(w)) {
                Ok((reason, message))
            } else {
                Err(format!("Ready={status} reason {reason}: {message}"))
            }
        },
    )
    .await
}

/// A job of one worker with one GPU pinned to `clusters`, running
/// `run_seconds`.
fn pinned_job(name: &str, clusters: &[&str], workers: i64, gpus: i64, run_seconds: &str) -> Value {
    gpu_job(
        name,
        &[("worker", workers, gpus)],
        json!({"scheduler": {"federation": {"clusterNames": clusters}}}),
        run_seconds,
    )
}

/// A member whose kubeconfig Secret is re-pointed at another member's
/// cluster (a rotation mistake) is refused naming both identities; its
/// running job is neither failed nor charged a deleted pod, its pod stays
/// on the member, and once the Secret points back the job ends well.
async fn a_secret_pointed_at_another_cluster_refuses_the_member_and_keeps_its_jobs(ground: Ground) {
    let f = start(ground).await;
    let members = f.members();
    let (first, second) = (
        kube_system_uid(&f.clients["member-1"]).await,
        kube_system_uid(&f.clients["member-2"]).await,
    );
    assert_ne!(first, second, "every cluster has an identity of its own");
    f.submit(pinned_job("steady", &["member-1"], 1, 1, "20"))
        .await;
    f.wait_phase("steady", "Running", WAIT).await;

    let original = stored_kubeconfig(&f, "member-1").await;
    let elsewhere = stored_kubeconfig(&f, "member-2").await;
    store_kubeconfig(&f, "member-1", &elsewhere).await;
    // Many probes later, nothing of the other cluster's emptiness counted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let job = f.job("steady").await;
    assert_eq!(phase_of(&job), "Running", "{}", job["status"]);
    assert_eq!(
        job["status"]["aggregate"]["deleted"].as_i64().unwrap_or(0),
        0,
        "no pod counted as deleted: {}",
        job["status"]
    );
    assert_eq!(
        job["status"]["backoffCount"].as_i64().unwrap_or(0),
        0,
        "{}",
        job["status"]
    );
    assert_eq!(
        f.pod_names_on("steady", &["member-1", "member-2"]).await,
        BTreeMap::from([("member-1".to_string(), vec!["steady-worker-0".to_string()])]),
        "the job's pod stays on member-1 and none is made elsewhere"
    );
    let (reason, message) = wait_refused(&f, "member-1", &[&first, &second]).await;
    assert_eq!(reason, "ClusterIdentityChanged", "{message}");
    assert!(
        message.contains("member-2"),
        "the message names the member whose cluster it reaches: {message}"
    );
    let recorded = members
        .get("member-1")
        .await
        .expect("member-1")
        .status
        .and_then(|s| s.identity)
        .map(|i| i.kube_system_uid);
    assert_eq!(
        recorded.as_deref(),
        Some(first.as_str()),
        "the identity recorded when member-1 was first connected stays"
    );
    // Ready again within a probe or two (one slower than its timeout, on a
    // loaded machine, shows it unready for a moment).
    wait_ready(&members, "member-2", "True").await;

    store_kubeconfig(&f, "member-1", &original).await;
    wait_ready(&members, "member-1", "True").await;
    let job = f.wait_phase("steady", "Succeeded", WAIT + WAIT).await;
    assert_eq!(
        job["status"]["backoffCount"].as_i64().unwrap_or(0),
        0,
        "{}",
        job["status"]
    );
}

/// A MemberCluster named like home and one whose kubeconfig reaches home
/// are refused, naming home (and its identity); jobs pinned to them wait
/// and never run on the real home.
async fn members_named_like_home_or_reaching_home_are_refused(ground: Ground) {
    let f = start(ground).await;
    let home_uid = kube_system_uid(&f.client).await;
    let home_kubeconfig = std::fs::read(f.kubeconfig("home")).expect("home's kubeconfig");
    // Credentials of member-1 under home's name.
    register_extra(&f, "home", "member-1", None).await;
    register_extra(&f, "home-again", "home-again", Some(&home_kubeconfig)).await;
    let (reason, message) = wait_refused(&f, "home", &["home cluster"]).await;
    assert_eq!(reason, "NamedLikeHome", "{message}");
    let (reason, message) = wait_refused(&f, "home-again", &["home", &home_uid]).await;
    assert_eq!(reason, "ReachesHome", "{message}");

    f.submit(pinned_job("to-home", &["home"], 1, 1, "1")).await;
    f.submit(pinned_job("to-home-again", &["home-again"], 1, 1, "1"))
        .await;
    for job in ["to-home", "to-home-again"] {
        f.wait_job(job, "waiting, unplaced", WAIT, |j| {
            j["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Initialized" && c["status"] == "False")
        })
        .await;
    }
    // Many probes and placement passes later, still nowhere.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for job in ["to-home", "to-home-again"] {
        let status = &f.job(job).await["status"];
        assert!(status["placement"].is_null(), "{job} was placed: {status}");
        assert_eq!(
            f.pods_by_cluster(job).await,
            BTreeMap::new(),
            "{job} has pods: {status}"
        );
    }
    // member-1, whose credentials the MemberCluster "home" holds, works on.
    // Ready again within a probe or two (one slower than its timeout, on a
    // loaded machine, shows it unready for a moment).
    wait_ready(&f.members(), "member-1", "True").await;
    remove_extras(&f, &["home", "home-again"], &["home-again"]).await;
}

/// A second MemberCluster for member-1's cluster is refused naming
/// member-1 (registered first), and its capacity is not counted: a job
/// that would need member-1's GPUs twice waits instead of being placed on
/// one cluster as if it were two.
async fn a_second_member_cluster_for_one_cluster_is_refused_and_counted_once(ground: Ground) {
    let f = start(ground).await;
    let uid = kube_system_uid(&f.clients["member-1"]).await;
    let kubeconfig = stored_kubeconfig(&f, "member-1").await;
    register_extra(&f, "member-1-copy", "member-1-copy", Some(&kubeconfig.0)).await;
    let (reason, message) = wait_refused(&f, "member-1-copy", &["member-1", &uid]).await;
    assert_eq!(reason, "DuplicateCluster", "{message}");
    // Ready again within a probe or two (one slower than its timeout, on a
    // loaded machine, shows it unready for a moment).
    wait_ready(&f.members(), "member-1", "True").await;

    // Two workers of 4 GPUs on "two" clusters that are one of 4 GPUs.
    f.submit(pinned_job(
        "twice",
        &["member-1", "member-1-copy"],
        2,
        4,
        "1",
    ))
    .await;
    let job = f
        .wait_job("twice", "waiting for capacity", WAIT, |j| {
            j["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["reason"] == "WaitingForCapacity")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = &f.job("twice").await["status"];
    assert!(status["placement"].is_null(), "placed: {status}");
    assert_eq!(
        f.pods_by_cluster("twice").await,
        BTreeMap::new(),
        "pods made: {}",
        job["status"]
    );
    let copy = f.members().get("member-1-copy").await.expect("the copy");
    let free = copy.status.map(|s| s.free).unwrap_or_default();
    assert!(free.is_empty(), "the copy reports capacity: {free:?}");
    remove_extras(&f, &["member-1-copy"], &["member-1-copy"]).await;
}

/// What the stray server answers to everything: a web page, not a
/// Kubernetes `Status`.
const STRAY_PAGE: &str = "<html><head><title>404</title></head><body>stray-service-body-7c1f: nothing here</body></html>";
const STRAY_MARK: &str = "stray-service-body-7c1f";

/// A loopback HTTP service that answers every request 404 with
/// `STRAY_PAGE`; its address.
async fn stray_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the stray server");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{STRAY_PAGE}",
                    STRAY_PAGE.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    address
}

/// A member whose kubeconfig names a loopback service that is not an API
/// server is not Ready with the answer's code and size; the body is in
/// neither its status nor the controller's log.
async fn a_server_answering_a_web_page_is_shown_by_code_and_size_only(ground: Ground) {
    let f = start(ground).await;
    let address = stray_server().await;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: stray\n  cluster:\n    server: http://{address}\nusers:\n- name: stray\n  user:\n    token: stray-token\ncontexts:\n- name: stray\n  context:\n    cluster: stray\n    user: stray\ncurrent-context: stray\n"
    );
    register_extra(&f, "stray", "stray", Some(kubeconfig.as_bytes())).await;
    let (reason, message) = wait_refused(&f, "stray", &["HTTP 404", "bytes"]).await;
    assert_eq!(reason, "ProbeFailed", "{message}");
    assert!(
        !message.contains(STRAY_MARK) && !message.contains("<html"),
        "the body is in the status: {message}"
    );
    // Several probes later: not in the controller's log either.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = serde_json::to_value(f.members().get("stray").await.expect("stray"))
        .expect("JSON")["status"]
        .to_string();
    assert!(!status.contains(STRAY_MARK), "in the status: {status}");
    let leaked: Vec<String> = f
        .log()
        .lines()
        .filter(|line| line.contains(STRAY_MARK))
        .map(str::to_string)
        .collect();
    assert!(leaked.is_empty(), "in the controller's log: {leaked:#?}");
    remove_extras(&f, &["stray"], &["stray"]).await;
}

/// A loopback TCP proxy whose destination the test moves: the address a
/// member kubeconfig names while the cluster behind it changes (a load
/// balancer or DNS name re-used), without any Secret changing.
struct MovingServer {
    address: std::net::SocketAddr,
    target: tokio::sync::watch::Sender<std::net::SocketAddr>,
}

impl MovingServer {
    async fn start(target: std::net::SocketAddr) -> MovingServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let address = listener.local_addr().expect("its address");
        let (sender, receiver) = tokio::sync::watch::channel(target);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut moved = receiver.clone();
                let destination = *moved.borrow_and_update();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(destination).await else {
                        return;
                    };
                    // A move cuts every open connection (watches included).
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = moved.changed() => {}
                    }
                });
            }
        });
        MovingServer {
            address,
            target: sender,
        }
    }

    fn move_to(&self, target: std::net::SocketAddr) {
        self.target.send_replace(target);
    }
}

/// The `host:port` of the server in a kubeconfig file (the simulator's:
/// plain HTTP on loopback).
fn server_address(kubeconfig: &std::path::Path) -> std::net::SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("the kubeconfig");
    let config: Value = serde_yaml::from_str(&text).expect("kubeconfig YAML");
    let server = config["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("a server");
    server
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("host:port")
}

/// The server behind member-1's kubeconfig becomes member-2 with no
/// Secret changing (simulated ground: the swap happens behind a plain-HTTP
/// address; on the real ground each cluster's TLS certificate would refuse
/// the other's address): the probe refuses member-1 naming both
/// identities, the pod informer's relist of the other cluster reports no
/// pod gone, and once the address leads back the job ends well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_becomes_another_cluster_is_refused_and_counts_no_pod_gone() {
    let f = start(Ground::Sim).await;
    let members = f.members();
    let (first, second) = (
        kube_system_uid(&f.clients["member-1"]).await,
        kube_system_uid(&f.clients["member-2"]).await,
    );
    let member_1 = server_address(&f.kubeconfig("member-1"));
    let member_2 = server_address(&f.kubeconfig("member-2"));
    let proxy = MovingServer::start(member_1).await;
    let kubeconfig = stored_kubeconfig(&f, "member-1").await;
    let text = String::from_utf8(kubeconfig.0).expect("UTF-8");
    let through_proxy = text.replace(&member_1.to_string(), &proxy.address.to_string());
    assert_ne!(
        text, through_proxy,
        "the kubeconfig names member-1's address"
    );
    store_kubeconfig(&f, "member-1", &ByteString(through_proxy.into_bytes())).await;
    // The new connection is member-1 again: accepted.
    eventually("member-1 Ready through the proxy", WAIT, async || {
        let status = members.get("member-1").await.ok()?.status?;
        status.is_ready().then_some(())
    })
    .await;
    f.submit(pinned_job("moved", &["member-1"], 1, 1, "15"))
        .await;
    f.wait_phase("moved", "Running", WAIT).await;

    proxy.move_to(member_2);
    let (reason, message) = wait_refused(&f, "member-1", &[&first, &second]).await;
    assert_eq!(reason, "ClusterIdentityChanged", "{message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = f.job("moved").await;
    assert_eq!(phase_of(&job), "Running", "{}", job["status"]);
    assert_eq!(
        job["status"]["aggregate"]["deleted"].as_i64().unwrap_or(0),
        0,
        "no pod counted as deleted: {}",
        job["status"]
    );

    proxy.move_to(member_1);
    wait_ready(&members, "member-1", "True").await;
    let job = f.wait_phase("moved", "Succeeded", WAIT + WAIT).await;
    assert_eq!(
        job["status"]["backoffCount"].as_i64().unwrap_or(0),
        0,
        "{}",
        job["status"]
    );
}

/// Starts a federation of two members with a 20 s probe round, waits for
/// both to be Ready, restarts the controller with `faults` on home, and
/// waits (10 s at most, half a probe round) until both are Ready again with
/// a heartbeat of the new controller's.
async fn ready_again_after_a_restart_under(ground: Ground, faults: Value) -> Federation {
    let mut f = federation(ground)
        .settings(
            "homeIsTarget: false\nmemberProbeIntervalMs: 20000\n\
             fenceAfterMs: 45000\nfencePodGraceMs: 5000\nclusterLostTimeoutMs: 60000\n",
        )
        .start()
        .await;
    for member in ["member-1", "member-2"] {
        wait_ready(&f.members(), member, "True").await;
    }
    f.kill_controller();
    set_faults(&f.clients["home"], faults).await;
    // Every heartbeat from here on is the next controller's.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let restarted = jiff::Timestamp::now();
    f.restart_controller().await;
    let members = f.members();
    for member in ["member-1", "member-2"] {
        eventually(
            &format!("{member} Ready again, heartbeat after the restart"),
            Duration::from_secs(10),
            async || {
                let (ready, m) = ready_of(&members, member).await?;
                let beat = m.status?.last_heartbeat_time?.0;
                (ready == "True" && beat.as_second() >= restarted.as_second()).then_some(())
            },
        )
        .await;
    }
    f
}

/// No member is used until home's identity is read (a member reaching
/// home is refused by it). A controller whose first read of it fails reads
/// it again a retry interval later, not a probe round later, and probes the
/// members again at once: they are Ready within seconds, with the probe
/// round here 20 s (before, they waited for that round, and a member probed
/// a moment before home's identity came did too: 5 s of a bench's starts).
async fn members_are_ready_as_soon_as_homes_identity_is_read(ground: Ground) {
    let f = ready_again_after_a_restart_under(
        ground,
        json!({"failRequests": {"verb": "get", "resource": "namespaces", "count": 1, "code": 500}}),
    )
    .await;
    assert!(
        f.log()
            .contains("reading the home cluster's identity failed"),
        "the fault met the controller's first read of home's identity"
    );
}

/// A member's status ends on the last condition decided for it, however
/// late home answers an earlier write. A restarted controller sweeps each
/// member before it takes replicas: it writes Ready=False (removing
/// leftovers), then Ready=True. Home holds the first two status writes 1.5 s
/// each here (a slow answer); each member's writes go one at a time, the
/// latest next, so no held write lands after a newer one (writes sent side
/// by side did: the member showed unready until the next probe round, 20 s
/// here).
async fn a_members_status_ends_on_the_last_condition_however_late_an_earlier_write_is_answered(
    ground: Ground,
) {
    let f = ready_again_after_a_restart_under(
        ground,
        json!({"delayRequests": {"verb": "patch", "resource": "memberclusters/status",
            "count": 2, "delayMs": 1500}}),
    )
    .await;
    let members = f.members();
    let faults =
        sim_kube::admin_request(&f.clients["home"], hyper::Method::GET, "faults", None).await;
    assert_eq!(
        faults["delayRequests"]["count"],
        json!(0),
        "both held writes were sent: {faults}"
    );
    // Past the held writes' answers.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for member in ["member-1", "member-2"] {
        let (ready, m) = ready_of(&members, member)
            .await
            .unwrap_or_else(|| panic!("{member} has a Ready condition"));
        assert_eq!(ready, "True", "{member}: {:?}", m.status);
    }
}

on_both_grounds!(
    a_members_status_ends_on_the_last_condition_however_late_an_earlier_write_is_answered,
    a_secret_pointed_at_another_cluster_refuses_the_member_and_keeps_its_jobs,
    members_named_like_home_or_reaching_home_are_refused,
    a_second_member_cluster_for_one_cluster_is_refused_and_counted_once,
    a_server_answering_a_web_page_is_shown_by_code_and_size_only,
    members_are_ready_as_soon_as_homes_identity_is_read,
);
