//! The member-side fence (issue 25, docs/src/members/fence.md), on both grounds
//! (`NAME::sim`, `NAME::real`) from one source.
//!
//! The fence runs as a process beside the controller, as it would inside
//! the member: its kubeconfig (`DIR/<member>.direct.kubeconfig`, which
//! `sim` and `hack/real-clusters` write) reaches the member's API server
//! directly, past the fault proxy, so a partition between home and the
//! member does not cut it off. On the real ground it runs under the
//! identity `deploy/member-fence.yaml` ships. Both members are observed the
//! same way, directly, every 100 ms through the whole partition and after
//! it heals: a replica with live pods (Pending or Running) on two clusters
//! in one sample is an overlap.

#[macro_use]
mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::federation::*;
use common::fence::{Seen, direct_client, sample, start_fence, wait_fenced};
use common::process::Process;
use kube::api::{Api, ListParams};
use serde_json::json;

/// The settings of these scenarios: placing on members only; a member is
/// lost 6 s after its last good probe, its fence stops the pods 3 s after
/// the last renewal, with 1 s of grace and 0.5 s for the clocks
/// (3 + 1 + 0.5 < 6).
const SETTINGS: &str = "homeIsTarget: false\nmemberProbeIntervalMs: 500\n\
                        clusterLostTimeoutMs: 6000\nfenceAfterMs: 3000\n\
                        fencePodGraceMs: 1000\nclockSkewMarginMs: 500\n";
const WAIT: Duration = Duration::from_secs(30);
const FAILOVER: Duration = Duration::from_secs(45);
const MEMBERS: [&str; 2] = ["member-1", "member-2"];

/// Partitions member-1 under a running job of two workers, until the job
/// runs again without it, then heals it; returns what the samplers saw.
async fn partition_under_a_running_job(f: &Federation, job: &str) -> Seen {
    f.submit(gpu_job(
        job,
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "12",
    ))
    .await;
    f.wait_phase(job, "Running", WAIT).await;
    let placed = f.pod_names_on(job, &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "Pack puts the job on member-1: {placed:?}"
    );
    let mut clients = Vec::new();
    for member in MEMBERS {
        clients.push((member.to_string(), direct_client(f, member).await));
    }
    let (seen, stop, task) = sample(clients, job);
    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    f.wait_job(job, "running again on member-2", FAILOVER, |j| {
        let on: Vec<String> = j["status"]["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["replicaStatus"].as_array().cloned().unwrap_or_default())
            .map(|r| r["cluster"].as_str().unwrap_or_default().to_string())
            .collect();
        phase_of(j) == "Running" && on.len() == 2 && on.iter().all(|c| c == "member-2")
    })
    .await;
    // The partition lasts on while the new pods run, then heals.
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    task.await.expect("the sampler ends");
    Arc::try_unwrap(seen)
        .expect("the sampler is done")
        .into_inner()
        .expect("lock")
}

/// With a fence on each member, a partition of the member that holds a
/// job's replicas never leaves a replica with two live pods: the fence
/// stops them before the controller places them again, says so in an
/// Event, and the job finishes on the other member.
async fn a_fenced_member_never_runs_a_replica_twice(ground: Ground) {
    let f = federation(ground).settings(SETTINGS).start().await;
    let mut fences: Vec<Process> = Vec::new();
    for member in MEMBERS {
        fences.push(start_fence(&f, member).await);
    }
    for member in MEMBERS {
        let message = wait_fenced(&f, member, "True").await;
        assert!(message.contains(&format!("fence-{member}")), "{message}");
    }
    let seen = partition_under_a_running_job(&f, "fenced").await;
    assert!(seen.samples > 20, "the members were sampled: {seen:?}");
    for worker in ["fenced-worker-0", "fenced-worker-1"] {
        assert_eq!(
            seen.live_on.get(worker).map(|c| c.len()),
            Some(2),
            "{worker} was seen live on both members (first member-1, then member-2): {seen:?}"
        );
    }
    assert!(
        seen.overlaps.is_empty(),
        "no replica has two live pods at once: {:?}",
        seen.overlaps
    );
    f.wait_phase("fenced", "Succeeded", FAILOVER).await;
    // The fence said so, on member-1, in an Event on the controller's Lease.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(direct_client(&f, "member-1").await, "tfjob-federator");
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events on member-1")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Fenced") && reasons.iter().any(|r| r == "Unfenced"),
        "the fence recorded Fenced and Unfenced: {reasons:?}"
    );
    for mut fence in fences {
        fence.check_alive();
        fence.terminate();
    }
    if ground == Ground::Real {
        // The fence's identity may do exactly what the book's table says.
        let granted = can_i_list(&f.kubeconfig("member-1"), "tfjob-federator-fence");
        let documented = real::documented_rbac_rows("tfjob-federator-fence");
        assert!(
            granted.iter().all(|a| documented.contains(a))
                && documented.iter().all(|a| granted.contains(a)),
            "kubectl auth can-i --list for tfjob-federator-fence differs from the table of {}:\n can-i: {granted:?}\n documented: {documented:?}",
            real::RBAC_PAGE
        );
    }
}

/// (group, resource, verb) `kubectl auth can-i --list` grants `account`
/// (in namespace tfjob-federator, so Roles there count), without what
/// Kubernetes grants every authenticated user.
fn can_i_list(kubeconfig: &std::path::Path, account: &str) -> Vec<(String, String, String)> {
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
        ])
        .arg(format!("system:serviceaccount:tfjob-federator:{account}"))
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut accesses = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines().skip(1) {
        let Some(name) = line
            .split_whitespace()
            .next()
            .filter(|n| !n.starts_with('['))
        else {
            continue;
        };
        let (plural, group) = name.split_once('.').unwrap_or((name, ""));
        if matches!(group, "authorization.k8s.io" | "authentication.k8s.io")
            || (group == "certificates.k8s.io" && plural == "clustertrustbundles")
        {
            continue;
        }
        let verbs = line
            .rsplit_once('[')
            .map_or("", |(_, v)| v.trim_end_matches(']'));
        for verb in verbs.split_whitespace() {
            accesses.push((group.to_string(), plural.to_string(), verb.to_string()));
        }
    }
    accesses
}

/// Without a fence the MemberCluster says so, and a partition does leave
/// copies of a replica running on two members (what the fence prevents:
/// this is also what shows that the sampling above can see an overlap).
async fn an_unfenced_member_says_so_and_copies_overlap(ground: Ground) {
    let f = federation(ground).settings(SETTINGS).start().await;
    for member in MEMBERS {
        let message = wait_fenced(&f, member, "False").await;
        assert!(
            message.starts_with("no fence: copies of a replica may overlap during a partition"),
            "{message}"
        );
    }
    let seen = partition_under_a_running_job(&f, "unfenced").await;
    assert!(
        !seen.overlaps.is_empty(),
        "without a fence the old pods run on through the partition: {seen:?}"
    );
    f.wait_phase("unfenced", "Succeeded", FAILOVER).await;
}

on_both_grounds!(
    a_fenced_member_never_runs_a_replica_twice,
    an_unfenced_member_says_so_and_copies_overlap,
);

/// A lost timeout that does not wait for the fence is refused at start,
/// naming both settings (no cluster is needed: the settings are read first).
#[test]
fn a_refused_configuration_names_both_settings() {
    let dir = std::env::temp_dir().join(format!("tfjob-fence-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let config = dir.join("controller.yaml");
    std::fs::write(
        &config,
        "clusterLostTimeoutMs: 40000\nfenceAfterMs: 30000\nfencePodGraceMs: 10000\n",
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--config"])
        .arg(&config)
        .args(["--kubeconfig"])
        .arg(dir.join("no-such.kubeconfig"))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "refused: {stderr}");
    for words in [
        "clusterLostTimeoutMs (40000)",
        "fenceAfterMs (30000)",
        "fencePodGraceMs (10000)",
        "clockSkewMarginMs (5000)",
    ] {
        assert!(stderr.contains(words), "{words} named: {stderr}");
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}
