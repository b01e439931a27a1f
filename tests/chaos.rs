//! The chaos run (issue 12): jobs over home and two members while faults
//! are injected through the fault API — member partitions short of and past
//! the loss timeout, request errors on home and on a member, dropped
//! watches, compaction (simulator only) and the controller killed with
//! SIGKILL several times, with a second replica standing by under leader
//! election. A checker samples every cluster and every job throughout and
//! afterwards asserts:
//! - never two live pods for one replica among the clusters the controller
//!   counts on (home, and the members whose `Ready` is True: a lost member's
//!   pods are abandoned by design until it returns and is swept);
//! - every job reaches a terminal phase, and no terminal phase changes;
//! - restart counts never go down, and each real restart is counted exactly
//!   once: the jobs whose workers each exit 137 once run on home, which is
//!   never lost, so each counts exactly 2 restarts whatever the controller
//!   went through; the others never exit with an error, so each counts
//!   exactly its failovers (one per placement epoch: the first placement
//!   is epoch 0), at most one per loss of a member;
//! - once every job is deleted, no managed pod, service or PodGroup is left
//!   on any cluster;
//! - no panic in the controllers' log.
//!
//! It prints its counts. The short form runs in CI (`cargo test --test
//! chaos`); `CHAOS_ROUNDS=N` repeats the fault schedule N times with N× the
//! jobs for a long run.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::federation::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

const SELECTOR: &str = "app.kubernetes.io/managed-by=tfjob-federator";
const SETTINGS: &str = "memberProbeIntervalMs: 500\nclusterLostTimeoutMs: 3000\n\
                        sweepIntervalMs: 2000\nleaseDurationMs: 3000\n\
                        fenceAfterMs: 1250\nfencePodGraceMs: 1000\nclockSkewMarginMs: 250\n";

/// What the checker saw.
#[derive(Default, Debug)]
struct Seen {
    samples: u64,
    /// Replicas seen with two live pods at once, with where.
    duplicates: BTreeSet<String>,
    /// Jobs whose terminal phase changed, with the change.
    regressions: BTreeSet<String>,
    /// Jobs whose restart count went down.
    uncounted: BTreeSet<String>,
    /// Each job's terminal phase, once seen.
    ended: BTreeMap<String, String>,
    backoff: BTreeMap<String, i64>,
}

/// Whether a pod runs or may still run.
fn live(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn label<'a>(pod: &'a Pod, key: &str) -> &'a str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

/// One look at every cluster the controller counts on, and at the jobs.
async fn sample(clients: &BTreeMap<String, kube::Client>, seen: &Mutex<Seen>) {
    let quick = Duration::from_secs(2);
    let members: Api<MemberCluster> = Api::all(clients["home"].clone());
    let Ok(Ok(members)) = tokio::time::timeout(quick, members.list(&ListParams::default())).await
    else {
        return;
    };
    let mut counted = vec!["home".to_string()];
    for member in members.items {
        let ready = member
            .status
            .as_ref()
            .is_some_and(tfjob_federator::api::MemberClusterStatus::is_ready);
        if ready && let Some(name) = member.metadata.name {
            counted.push(name);
        }
    }
    let mut replicas: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cluster in &counted {
        let Some(client) = clients.get(cluster) else {
            continue;
        };
        let pods: Api<Pod> = Api::all(client.clone());
        let selector = ListParams::default().labels(SELECTOR);
        let listed = tokio::time::timeout(quick, pods.list(&selector));
        let Ok(Ok(listed)) = listed.await else {
            // Unreachable right now: nothing to count there.
            continue;
        };
        for pod in listed.items.iter().filter(|p| live(p)) {
            let replica = format!(
                "{}/{}-{}",
                label(pod, "federation.tfjob.io/job-name"),
                label(pod, "federation.tfjob.io/replica-type"),
                label(pod, "federation.tfjob.io/replica-index"),
            );
            replicas.entry(replica).or_default().push(format!(
                "{cluster} (epoch {})",
                label(pod, "federation.tfjob.io/placement-epoch")
            ));
        }
    }
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(clients["home"].clone(), "default", &job_resource());
    let Ok(Ok(jobs)) = tokio::time::timeout(quick, jobs.list(&ListParams::default())).await else {
        return;
    };
    let mut seen = seen.lock().expect("checker state");
    seen.samples += 1;
    for (replica, places) in replicas {
        if places.len() > 1 {
            seen.duplicates
                .insert(format!("{replica} on {}", places.join(" and ")));
        }
    }
    for job in jobs.items {
        let name = job.metadata.name.clone().unwrap_or_default();
        let phase = job.data["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let backoff = job.data["status"]["backoffCount"].as_i64().unwrap_or(0);
        if let Some(ended) = seen.ended.get(&name)
            && *ended != phase
        {
            let change = format!("{name}: {ended} → {phase}");
            seen.regressions.insert(change);
        }
        if matches!(phase.as_str(), "Succeeded" | "Failed") {
            seen.ended.entry(name.clone()).or_insert(phase);
        }
        let before = seen.backoff.insert(name.clone(), backoff).unwrap_or(0);
        if backoff < before {
            seen.uncounted
                .insert(format!("{name}: backoffCount {before} → {backoff}"));
        }
    }
}

/// Whether chaos job `index` is one whose workers each exit 137 once.
fn restarts_by_exit(index: usize) -> bool {
    index.is_multiple_of(2)
}

/// A job of two workers (1 GPU each), packed (so every cluster gets jobs:
/// Spread deals replicas to the first clusters by name); every other
/// job's workers are killed (137) on their first attempt, so restarts
/// happen — those jobs run on home, whose attempts no failover resets.
fn chaos_job(index: usize) -> Value {
    let name = format!("chaos-{index}");
    let run = ["5", "7", "9"][index % 3];
    let mut extra = json!({"runPolicy": {"backoffLimit": 8, "cleanUpPolicy": "all"}});
    if restarts_by_exit(index) {
        extra["scheduler"] = json!({"federation": {"clusterNames": ["home"]}});
    }
    let mut job = gpu_job(&name, &[("worker", 2, 1)], extra, run);
    if let Some(worker) = job["spec"]["replicaSpecs"][0].as_object_mut() {
        worker.insert("restartPolicy".into(), json!("OnFailure"));
        if restarts_by_exit(index) {
            worker["template"]["metadata"]["annotations"]["sim.federation.tfjob.io/exit-codes"] =
                json!("137,0");
        }
    }
    job
}

async fn chaos_run(ground: Ground) {
    let rounds: usize = std::env::var("CHAOS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let mut f = federation(ground).settings(SETTINGS).start().await;
    let mut standby = f.start_replica("standby").await;
    let clients = f.clients.clone();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let checker = {
        let (clients, seen, stop) = (clients.clone(), seen.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                sample(&clients, &seen).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let jobs = 14 * rounds;
    for index in 0..jobs {
        f.submit(chaos_job(index)).await;
    }
    let mut faults = 0;
    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
    for _ in 0..rounds {
        // A partition shorter than the loss timeout: nothing changes.
        set_faults(&clients["member-1"], json!({"partitioned": true})).await;
        pause(1500).await;
        set_faults(&clients["member-1"], json!({"partitioned": false})).await;
        // Errors on home.
        set_faults(&clients["home"], json!({"errorRate": 0.25})).await;
        pause(3000).await;
        set_faults(&clients["home"], json!({"errorRate": 0.0})).await;
        // The leader killed; the standby or the restarted one takes over.
        f.kill_controller();
        pause(1000).await;
        f.restart_controller().await;
        // A partition past the loss timeout: the jobs there fail over.
        set_faults(&clients["member-2"], json!({"partitioned": true})).await;
        pause(5000).await;
        set_faults(&clients["member-2"], json!({"partitioned": false})).await;
        // Dropped watches everywhere, and compaction where it can be forced.
        for cluster in CLUSTERS {
            admin(&clients[cluster], "drop-watches").await;
            if ground == Ground::Sim {
                admin(&clients[cluster], "compact").await;
            }
        }
        // Errors on a member.
        set_faults(&clients["member-1"], json!({"errorRate": 0.25})).await;
        pause(3000).await;
        set_faults(&clients["member-1"], json!({"errorRate": 0.0})).await;
        // The standby killed and back.
        standby.kill();
        standby = f.start_replica("standby").await;
        faults += 8;
    }
    // Every job ends.
    let all_ended = Instant::now() + Duration::from_secs(120 * rounds as u64);
    loop {
        let ended = seen.lock().expect("checker state").ended.len();
        if ended == jobs {
            break;
        }
        assert!(
            Instant::now() < all_ended,
            "{ended} of {jobs} jobs ended: {:?}",
            seen.lock().expect("checker state")
        );
        pause(500).await;
    }
    // Each real restart counted exactly once.
    let mut miscounted = Vec::new();
    for index in 0..jobs {
        let name = format!("chaos-{index}");
        let job = f.jobs().get(&name).await.expect("the job");
        let backoff = job.data["status"]["backoffCount"].as_i64().unwrap_or(0);
        let epoch = job.data["status"]["placement"]["epoch"]
            .as_i64()
            .unwrap_or(0);
        let expected = if restarts_by_exit(index) { 2 } else { epoch };
        if backoff != expected || (!restarts_by_exit(index) && backoff > rounds as i64) {
            miscounted.push(format!(
                "{name}: backoffCount {backoff}, want {expected} (placement epoch {epoch})"
            ));
        }
    }
    // A controller killed after the jobs ended and before they are deleted.
    f.kill_controller();
    f.restart_controller().await;
    let restarts: i64 = seen.lock().expect("checker state").backoff.values().sum();
    let all = f.jobs();
    for index in 0..jobs {
        let _ = all
            .delete(&format!("chaos-{index}"), &Default::default())
            .await;
    }
    eventually("every job gone", Duration::from_secs(60), async || {
        all.list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let orphans = eventually_within_or(Duration::from_secs(30), async || {
        let left = leftovers(&clients).await;
        left.is_empty().then_some(()).ok_or(left)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let _ = checker.await;
    let seen = seen.lock().expect("checker state");
    let log = std::fs::read_to_string(f.dir.join("controller.log")).unwrap_or_default();
    let panics = log.lines().filter(|l| l.contains("panicked")).count();
    let failovers = log
        .lines()
        .filter(|l| l.contains("\"reason\":\"ClusterLost\""))
        .count();
    let lost = log
        .lines()
        .filter(|l| l.contains("member cluster lost"))
        .count();
    println!(
        "chaos run ({ground:?}): {jobs} jobs, {faults} faults, {lost} member losses, \
         {failovers} failovers, {} samples, {restarts} restarts counted, {} miscounted, \
         {} duplicates, {} orphans, {} regressions, {} uncounted, {panics} panics",
        seen.samples,
        miscounted.len(),
        seen.duplicates.len(),
        orphans.len(),
        seen.regressions.len(),
        seen.uncounted.len(),
    );
    assert!(
        seen.samples > 20,
        "the checker looked often enough: {}",
        seen.samples
    );
    assert!(
        lost >= rounds && failovers >= 1,
        "the faults hit running jobs"
    );
    assert!(
        seen.duplicates.is_empty(),
        "two live pods for one replica: {:?}",
        seen.duplicates
    );
    assert!(
        seen.regressions.is_empty(),
        "a terminal phase changed: {:?}",
        seen.regressions
    );
    assert!(
        seen.uncounted.is_empty(),
        "a restart count went down: {:?}",
        seen.uncounted
    );
    assert!(
        miscounted.is_empty(),
        "restarts not counted once each: {miscounted:#?}"
    );
    assert!(orphans.is_empty(), "left behind: {orphans:?}");
    assert_eq!(panics, 0, "a controller panicked");
}

/// `POST /_sim/{what}` through the cluster's client (simulator or proxy).
async fn admin(client: &kube::Client, what: &str) {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("/_sim/{what}"))
        .body(Vec::new())
        .expect("an admin request");
    client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("POST /_sim/{what}: {e}"));
}

/// Every managed pod, service and PodGroup on any cluster, as `cluster/kind/name`.
async fn leftovers(clients: &BTreeMap<String, kube::Client>) -> Vec<String> {
    let mut left = Vec::new();
    for cluster in CLUSTERS {
        let client = &clients[cluster];
        let selector = ListParams::default().labels(SELECTOR);
        let pods: Api<Pod> = Api::all(client.clone());
        let services: Api<Service> = Api::all(client.clone());
        let groups: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &tfjob_federator::builders::pod_group_resource(),
        );
        for pod in pods
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            left.push(format!(
                "{cluster}/pod/{}",
                pod.metadata.name.unwrap_or_default()
            ));
        }
        for service in services
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            left.push(format!(
                "{cluster}/service/{}",
                service.metadata.name.unwrap_or_default()
            ));
        }
        for group in groups
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            left.push(format!(
                "{cluster}/podgroup/{}",
                group.metadata.name.unwrap_or_default()
            ));
        }
    }
    left
}

/// Polls `check` until Ok or `limit`; the last Err's value then.
async fn eventually_within_or<E: Default>(
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<(), E>,
) -> E {
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(()) => return E::default(),
            Err(e) if Instant::now() > deadline => return e,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

on_both_grounds!(chaos_run);
