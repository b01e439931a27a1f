//! The member-side fence in tests (issue 25, docs/src/members/fence.md): a fence
//! process per member, reaching the member's API server directly past the
//! fault proxy (`DIR/<member>.direct.kubeconfig`, which `sim` and
//! `hack/real-clusters` write), and a sampler that lists the members
//! directly so that a partition does not hide a live pod from it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

use tfjob_federator::api::MemberCluster;

use super::federation::{Federation, Ground};
use super::process::Process;
use super::real;
use super::wait::eventually;

/// The kubeconfig that reaches `cluster`'s API server past its faults.
pub fn direct_kubeconfig(f: &Federation, cluster: &str) -> PathBuf {
    f.kubeconfig(cluster)
        .with_file_name(format!("{cluster}.direct.kubeconfig"))
}

pub async fn direct_client(f: &Federation, cluster: &str) -> Client {
    real::client_from_file(&direct_kubeconfig(f, cluster)).await
}

/// Starts the fence of `member` (renewing its Lease every 250 ms), logging
/// to `fence-<member>.log`; on the real ground under the shipped identity.
pub async fn start_fence(f: &Federation, member: &str) -> Process {
    let direct = direct_kubeconfig(f, member);
    let kubeconfig = match f.ground {
        Ground::Sim => direct,
        Ground::Real => {
            let client = direct_client(f, member).await;
            real::apply_manifest(
                &client,
                &real::repo_path("deploy/member-fence.yaml"),
                |kind| kind != "Deployment",
            )
            .await;
            let token =
                real::service_account_token(&client, "tfjob-federator", "tfjob-federator-fence")
                    .await;
            let path = f.dir.join(format!("fence-{member}.kubeconfig"));
            std::fs::write(&path, real::with_token(&direct, &token)).expect("write");
            path
        }
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"));
    command
        .args(["--log-format", "json", "fence", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--identity", &format!("fence-{member}")])
        .args(["--renew-interval-ms", "250"])
        .env("RUST_LOG", "info");
    Process::spawn(
        &format!("the fence of {member}"),
        &mut command,
        &f.dir.join(format!("fence-{member}.log")),
    )
}

/// What the samplers saw: per replica (pod name), the most clusters it
/// had live pods on at once, and on which clusters it was ever seen live.
#[derive(Default, Debug)]
pub struct Seen {
    pub samples: usize,
    pub most_at_once: BTreeMap<String, usize>,
    pub overlaps: Vec<String>,
    pub live_on: BTreeMap<String, BTreeSet<String>>,
}

pub fn live(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending" | "Running") | None
    )
}

/// Samples the job's pods on every member directly every 100 ms until the
/// returned flag is set.
pub fn sample(
    clients: Vec<(String, Client)>,
    job: &str,
) -> (
    Arc<Mutex<Seen>>,
    Arc<AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    sample_jobs(clients, &[job])
}

/// As [`sample`], the pods of every job of `jobs` in one list per member
/// (pod names are the replicas', unique across jobs).
pub fn sample_jobs(
    clients: Vec<(String, Client)>,
    jobs: &[&str],
) -> (
    Arc<Mutex<Seen>>,
    Arc<AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let selector = ListParams::default().labels(&format!(
        "federation.tfjob.io/job-name in ({})",
        jobs.join(",")
    ));
    let (seen2, stop2) = (seen.clone(), stop.clone());
    let task = tokio::spawn(async move {
        while !stop2.load(Ordering::SeqCst) {
            let mut at_once: BTreeMap<String, Vec<String>> = BTreeMap::new();
            let mut complete = true;
            for (cluster, client) in &clients {
                let pods: Api<Pod> = Api::all(client.clone());
                match pods.list(&selector).await {
                    Ok(list) => {
                        for pod in list.items.iter().filter(|p| live(p)) {
                            let name = pod.metadata.name.clone().unwrap_or_default();
                            at_once.entry(name).or_default().push(cluster.clone());
                        }
                    }
                    Err(_) => complete = false,
                }
            }
            if complete {
                let mut seen = seen2.lock().expect("lock");
                seen.samples += 1;
                for (replica, clusters) in at_once {
                    let most = seen.most_at_once.entry(replica.clone()).or_default();
                    *most = (*most).max(clusters.len());
                    if clusters.len() > 1 {
                        let note = format!("{replica} live on {clusters:?}");
                        seen.overlaps.push(note);
                    }
                    seen.live_on.entry(replica).or_default().extend(clusters);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, stop, task)
}

/// The `Fenced` condition of `member`: (status, message).
pub async fn fenced(members: &Api<MemberCluster>, member: &str) -> Option<(String, String)> {
    let m = members.get(member).await.ok()?;
    let c = m
        .status?
        .conditions
        .into_iter()
        .find(|c| c.condition_type == "Fenced")?;
    Some((c.status, c.message.unwrap_or_default()))
}

/// Waits (30 s at most) until `member`'s `Fenced` condition is `status`;
/// its message.
pub async fn wait_fenced(f: &Federation, member: &str, status: &str) -> String {
    let members = f.members();
    eventually(
        &format!("{member} Fenced {status}"),
        Duration::from_secs(30),
        async || match fenced(&members, member).await {
            Some((s, message)) if s == status => Ok(message),
            other => Err(format!("{other:?}")),
        },
    )
    .await
}
