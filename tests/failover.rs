//! Failover of federated jobs (the lifecycle contract of issue 11): a
//! MemberCluster deleted under a running job, a cluster lost by a job with
//! no restart budget left, paused jobs whose clusters are lost or whose
//! capacity frees, and a controller killed between the failover's status
//! write and its teardown. Every scenario runs on both grounds
//! (`NAME::sim`, `NAME::real`) from one source.
//!
//! The harness is the federation one of `tests/common/federation.rs` (home
//! and two members of one node with 4 GPUs each, members registered, the
//! controller a subprocess with leader election; on the real ground the
//! controller under the identity `deploy/controller.yaml` ships), here with
//! home not a target and a fast loss. Jobs are written and read as JSON, so
//! these tests depend on the API, not on the crate's Rust types.

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::federation::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

/// How long a job may take to reach Running or an end.
const WAIT: Duration = Duration::from_secs(30);
/// How long a member's loss and the job's re-placement may take.
const FAILOVER: Duration = Duration::from_secs(45);
const EPOCH_LABEL: &str = "federation.tfjob.io/placement-epoch";

/// The federation of these scenarios: the controller placing on members
/// only, with a short probe interval and lost timeout (a loss shows in
/// seconds), and `extra_settings`. On the real ground without the policy
/// of `failover_writes_epoch_and_restart_before_teardown`, should a failed
/// run of it have left it.
async fn start(ground: Ground, extra_settings: &str) -> Federation {
    let settings = format!("{HOME_NOT_TARGET}{FAST_LOSS}{extra_settings}");
    let f = federation(ground).settings(&settings).start().await;
    if ground == Ground::Real {
        remove_status_only_policy(&f.clients["home"]).await;
    }
    f
}

fn backoff_count(job: &Value) -> i64 {
    job["status"]["backoffCount"].as_i64().unwrap_or(0)
}

/// `status.tasks[].replicaStatus[].cluster`, one entry per replica shown.
fn replica_clusters(job: &Value) -> Vec<String> {
    job["status"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["replicaStatus"].as_array().cloned().unwrap_or_default())
        .map(|r| r["cluster"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Whether the job is Running with all its `replicas` shown, none on `lost`.
fn running_without(job: &Value, replicas: usize, lost: Option<&str>) -> bool {
    let clusters = replica_clusters(job);
    phase_of(job) == "Running"
        && clusters.len() == replicas
        && clusters.iter().all(|c| Some(c.as_str()) != lost)
}

fn condition<'a>(job: &'a Value, kind: &str) -> Option<&'a Value> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn name_of(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn epoch_of(pod: &Pod) -> Option<u64> {
    pod.metadata.labels.as_ref()?.get(EPOCH_LABEL)?.parse().ok()
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Deleting the MemberCluster of a member that holds a running job's
/// replicas is losing that member for the job: it is re-placed on the
/// remaining clusters under a new epoch, counting one restart.
async fn deleting_a_member_cluster_under_a_running_job(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job(
        "orphaned",
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "300",
    ))
    .await;
    let running = f.wait_phase("orphaned", "Running", WAIT).await;
    assert_eq!(backoff_count(&running), 0);
    let before = f.pods_on("orphaned", &CLUSTERS).await;
    assert!(
        before.contains_key("member-1"),
        "Pack puts the job on member-1: {:?}",
        f.pod_names_on("orphaned", &CLUSTERS).await
    );
    let old_epoch = before.values().flatten().filter_map(epoch_of).max();
    let members: Api<DynamicObject> = Api::all_with(f.clients["home"].clone(), &member_resource());
    let registered = members
        .get("member-1")
        .await
        .expect("MemberCluster member-1");

    members
        .delete("member-1", &Default::default())
        .await
        .expect("MemberCluster deleted");
    let replaced = f
        .wait_job(
            "orphaned",
            "Running again, no replica on member-1",
            FAILOVER,
            |j| running_without(j, 2, Some("member-1")),
        )
        .await;
    assert_eq!(
        backoff_count(&replaced),
        1,
        "losing member-1 counts one restart: {}",
        replaced["status"]
    );
    assert_eq!(
        replica_clusters(&replaced),
        ["member-2", "member-2"],
        "re-placed on the remaining member"
    );
    let after = f.pods_on("orphaned", &["home", "member-2"]).await;
    let new_pods: Vec<&Pod> = after.values().flatten().collect();
    assert_eq!(
        new_pods.len(),
        2,
        "one pod per replica on the remaining clusters: {:?}",
        f.pod_names_on("orphaned", &["home", "member-2"]).await
    );
    assert!(
        new_pods
            .iter()
            .all(|p| epoch_of(p).is_some() && epoch_of(p) > old_epoch),
        "the new pods carry a newer placement epoch than {old_epoch:?}: {:?}",
        new_pods.iter().map(|p| epoch_of(p)).collect::<Vec<_>>()
    );
    // Stays so: the loss is counted once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = f.job("orphaned").await;
    assert_eq!(
        (phase_of(&later), backoff_count(&later)),
        ("Running", 1),
        "{}",
        later["status"]
    );

    if f.ground == Ground::Real {
        // The next test on the shared clusters needs member-1 registered.
        let again = json!({
            "apiVersion": "federation.tfjob.io/v1alpha1",
            "kind": "MemberCluster",
            "metadata": {"name": "member-1"},
            "spec": registered.data["spec"],
        });
        members
            .create(
                &PostParams::default(),
                &serde_json::from_value(again).expect("member"),
            )
            .await
            .expect("member-1 registered again");
    }
}

/// With `runPolicy.backoffLimit: 0` a lost cluster ends the job: Failed,
/// reason ClusterLost, no restart counted, nothing placed elsewhere.
async fn cluster_loss_without_restart_budget_fails_the_job(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job(
        "no-budget",
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 0}}),
        "300",
    ))
    .await;
    f.wait_phase("no-budget", "Running", WAIT).await;
    let placed = f.pod_names_on("no-budget", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "Pack puts the job on member-1: {placed:?}"
    );

    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    let failed = f.wait_phase("no-budget", "Failed", FAILOVER).await;
    let why = condition(&failed, "Failed").cloned().unwrap_or_default();
    assert_eq!(
        (why["status"].as_str(), why["reason"].as_str()),
        (Some("True"), Some("ClusterLost")),
        "{}",
        failed["status"]
    );
    assert!(
        why["message"]
            .as_str()
            .is_some_and(|m| m.contains("member-1")),
        "the message names the lost cluster: {why}"
    );
    assert_eq!(
        backoff_count(&failed),
        0,
        "no restart was performed: {}",
        failed["status"]
    );
    assert_ne!(
        condition(&failed, "Running").and_then(|c| c["status"].as_str()),
        Some("True"),
        "a failed job does not show Running True: {}",
        failed["status"]
    );
    // Stays so: nothing is placed elsewhere.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        f.pods_on("no-budget", &["home", "member-2"])
            .await
            .is_empty(),
        "not re-placed: {:?}",
        f.pod_names_on("no-budget", &["home", "member-2"]).await
    );
    let later = f.job("no-budget").await;
    assert_eq!(
        (phase_of(&later), backoff_count(&later)),
        ("Failed", 0),
        "{}",
        later["status"]
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
}

/// A member lost while debug mode replaces a job's pods: the switch cannot
/// tear down the pods there, and the job, instead of waiting for that member
/// with the same placement, is placed anew on the clusters that answer. The
/// switch replaces every pod anyway: no restart is counted.
async fn a_member_lost_during_a_debug_switch_is_failed_over(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job("switch", &[("worker", 2, 2)], json!({}), "300"))
        .await;
    f.wait_phase("switch", "Running", WAIT).await;
    let placed = f.pod_names_on("switch", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "Pack puts the job on member-1: {placed:?}"
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    f.patch_spec("switch", json!({"runMode": {"debug": {"enabled": true}}}))
        .await;
    let moved = f
        .wait_job("switch", "running again without member-1", FAILOVER, |j| {
            running_without(j, 2, Some("member-1"))
        })
        .await;
    assert_eq!(
        backoff_count(&moved),
        0,
        "no restart counted: {}",
        moved["status"]
    );
    let elsewhere = f.pod_names_on("switch", &["home", "member-2"]).await;
    assert_eq!(
        elsewhere.values().map(Vec::len).sum::<usize>(),
        2,
        "the debug pods run on the clusters that answer: {elsewhere:?}"
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
}

/// Issue 24 (docs/src/placement/failover.md): a failover is one restart, shown in
/// `backoffCount` and in the `restartCount` of the first replica it moved
/// in the job's replica order, so that the restart counts add up to
/// `backoffCount`.
async fn a_failover_shows_in_a_replicas_restart_count(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job(
        "counted",
        &[("chief", 1, 2), ("worker", 1, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "300",
    ))
    .await;
    f.wait_phase("counted", "Running", WAIT).await;
    let placed = f.pod_names_on("counted", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "Pack puts the job on member-1: {placed:?}"
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    let moved = f
        .wait_job("counted", "running again without member-1", FAILOVER, |j| {
            running_without(j, 2, Some("member-1"))
        })
        .await;
    let counts = restart_counts(&moved);
    assert_eq!(
        backoff_count(&moved),
        1,
        "losing member-1 counts one restart: {}",
        moved["status"]
    );
    assert_eq!(
        counts.values().sum::<i64>(),
        backoff_count(&moved),
        "the restartCounts {counts:?} add up to backoffCount: {}",
        moved["status"]
    );
    assert_eq!(
        (counts.get("chief"), counts.get("worker")),
        (Some(&1), Some(&0)),
        "the restart is the chief's, the first replica moved: {}",
        moved["status"]
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
}

/// Issue 24 (docs/src/api/decisions.md: the deadline rule is the same after a failover as
/// before it): the time a failed-over job waits for its new placement does
/// not count towards `activeDeadlineSeconds`. The clock stands while it
/// waits (`startTime` goes, the seconds active so far are kept in
/// `status.placement.activeSeconds`) and runs on from the new start with
/// what was left.
async fn the_deadline_clock_stands_while_a_failed_over_job_waits(ground: Ground) {
    const DEADLINE: f64 = 12.0;
    let f = start(ground, "").await;
    // A blocker fills one member; the job goes to the other.
    f.submit(gpu_job("blocker", &[("worker", 1, 4)], json!({}), "300"))
        .await;
    f.wait_phase("blocker", "Running", WAIT).await;
    let blocked = f.pod_names_on("blocker", &CLUSTERS).await;
    let full = blocked
        .keys()
        .next()
        .cloned()
        .expect("the blocker's member");
    let other = if full == "member-1" {
        "member-2"
    } else {
        "member-1"
    };
    f.submit(gpu_job(
        "timed",
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3,
            "activeDeadlineSeconds": DEADLINE as i64}}),
        "300",
    ))
    .await;
    f.wait_phase("timed", "Running", WAIT).await;
    let placed = f.pod_names_on("timed", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        [other],
        "the job is where the blocker is not: {placed:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Its member is lost; the only other one is full: it waits.
    set_faults(&f.clients[other], json!({"partitioned": true})).await;
    f.wait_job(
        "timed",
        "failed over, waiting for capacity (or ended)",
        FAILOVER,
        |j| {
            phase_of(j) == "Failed"
                || (backoff_count(j) == 1
                    && condition(j, "Initialized").and_then(|c| c["reason"].as_str())
                        == Some("WaitingForCapacity"))
        },
    )
    .await;
    let failed_over = Instant::now();
    // It waits longer than its whole deadline: waiting does not count.
    loop {
        let job = f.job("timed").await;
        assert_ne!(
            phase_of(&job),
            "Failed",
            "a job waiting for its new placement failed {:.1}s after the failover: {}",
            failed_over.elapsed().as_secs_f64(),
            job["status"]
        );
        if failed_over.elapsed() >= Duration::from_secs_f64(DEADLINE + 2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let waiting = f.job("timed").await;
    let active = waiting["status"]["placement"]["activeSeconds"].as_f64();
    assert!(
        waiting["status"]["startTime"].is_null() && active.is_some_and(|a| a >= 1.0),
        "while it waits the clock stands: no startTime, the seconds active so far in \
         status.placement.activeSeconds: {}",
        waiting["status"]
    );
    let active = active.expect("activeSeconds");
    assert!(
        active < DEADLINE,
        "less than the deadline was active before the failover: {active}"
    );

    // Capacity frees: it runs again, with what was left of its deadline.
    f.jobs()
        .delete("blocker", &Default::default())
        .await
        .expect("blocker deleted");
    let running = f
        .wait_job("timed", "running again", FAILOVER, |j| {
            running_without(j, 2, Some(other))
        })
        .await;
    let restarted = Instant::now();
    let left = DEADLINE - active;
    let failed = f
        .wait_job(
            "timed",
            "ended",
            Duration::from_secs_f64(DEADLINE + 15.0),
            |j| phase_of(j) == "Failed" || phase_of(j) == "Succeeded",
        )
        .await;
    let after = restarted.elapsed().as_secs_f64();
    let why = condition(&failed, "Failed").cloned().unwrap_or_default();
    assert_eq!(
        (phase_of(&failed), why["reason"].as_str()),
        ("Failed", Some("DeadlineExceeded")),
        "{}",
        failed["status"]
    );
    assert!(
        after >= left - 1.5 && after <= left + 4.0,
        "failed {after:.1}s after running again (status then {}), want about the {left:.1}s \
         left of its deadline",
        running["status"]
    );
    set_faults(&f.clients[other], json!({"partitioned": false})).await;
}

/// A paused job has no pods, so losing the clusters it was placed on costs
/// it nothing: it stays Paused with no restart counted, and at resume it is
/// placed anew on the clusters that are reachable.
async fn paused_job_whose_clusters_are_lost(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job(
        "sleeper",
        &[("worker", 2, 2)],
        json!({"runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "300",
    ))
    .await;
    f.wait_phase("sleeper", "Running", WAIT).await;
    let placed = f.pod_names_on("sleeper", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "Pack puts the job on member-1: {placed:?}"
    );

    f.set_paused("sleeper", true).await;
    let paused = f.wait_phase("sleeper", "Paused", WAIT).await;
    assert_eq!(
        condition(&paused, "Paused").and_then(|c| c["status"].as_str()),
        Some("True"),
        "{}",
        paused["status"]
    );
    eventually("no pod of the paused job anywhere", WAIT, async || {
        f.pods_on("sleeper", &CLUSTERS)
            .await
            .is_empty()
            .then_some(())
    })
    .await;

    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    let members = f.members();
    wait_ready(&members, "member-1", "False").await;
    // Stays so, past the lost timeout (3 s after the last good probe).
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let job = f.job("sleeper").await;
        assert_eq!(
            (phase_of(&job), backoff_count(&job)),
            ("Paused", 0),
            "a paused job is not failed over: {}",
            job["status"]
        );
        let pods = f.pod_names_on("sleeper", &["home", "member-2"]).await;
        assert!(pods.is_empty(), "no pods while paused: {pods:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    f.set_paused("sleeper", false).await;
    let resumed = f
        .wait_job("sleeper", "Running on reachable clusters", FAILOVER, |j| {
            running_without(j, 2, Some("member-1"))
        })
        .await;
    assert_eq!(
        backoff_count(&resumed),
        0,
        "pause, loss and resume count no restart: {}",
        resumed["status"]
    );
    let pods = f.pod_names_on("sleeper", &["home", "member-2"]).await;
    assert_eq!(
        pods.values().map(Vec::len).sum::<usize>(),
        2,
        "one pod per replica: {pods:?}"
    );
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
    wait_ready(&members, "member-1", "True").await;
    assert!(
        f.pods_on("sleeper", &["member-1"]).await.is_empty(),
        "nothing of the job on member-1"
    );
}

/// Free GPUs on member `name` as its MemberCluster status shows them.
async fn free_gpus(members: &Api<MemberCluster>, name: &str) -> Option<String> {
    members
        .get(name)
        .await
        .ok()?
        .status?
        .free
        .get("nvidia.com/gpu")
        .cloned()
}

/// A job that waits for capacity and is then paused withdraws its queued
/// placement: freed capacity gives it no pods until it resumes.
async fn paused_job_is_never_placed_when_capacity_frees(ground: Ground) {
    let f = start(ground, "").await;
    for blocker in ["blocker-1", "blocker-2"] {
        f.submit(gpu_job(blocker, &[("worker", 1, 4)], json!({}), "300"))
            .await;
        f.wait_phase(blocker, "Running", WAIT).await;
    }
    let blocked = f.pod_names_on("blocker-1", &CLUSTERS).await;
    assert_eq!(
        blocked.keys().collect::<Vec<_>>(),
        ["member-1"],
        "blocker-1 fills member-1: {blocked:?}"
    );
    f.submit(gpu_job("patient", &[("worker", 2, 2)], json!({}), "300"))
        .await;
    f.wait_job("patient", "WaitingForCapacity", WAIT, |j| {
        condition(j, "Initialized").and_then(|c| c["reason"].as_str()) == Some("WaitingForCapacity")
    })
    .await;
    assert!(
        f.pods_on("patient", &CLUSTERS).await.is_empty(),
        "no pods while waiting"
    );

    f.set_paused("patient", true).await;
    f.wait_phase("patient", "Paused", WAIT).await;
    f.jobs()
        .delete("blocker-1", &Default::default())
        .await
        .expect("blocker-1 deleted");
    // Until the controller sees member-1's GPUs free, and 3 s after: no pod.
    let members = f.members();
    let no_pods = async || {
        let pods = f.pod_names_on("patient", &CLUSTERS).await;
        assert!(
            pods.is_empty(),
            "a paused job gets no pods when capacity frees: {pods:?}"
        );
    };
    eventually("member-1's 4 GPUs free in its status", WAIT, async || {
        no_pods().await;
        (free_gpus(&members, "member-1").await? == "4").then_some(())
    })
    .await;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        no_pods().await;
        let job = f.job("patient").await;
        assert_eq!(phase_of(&job), "Paused", "{}", job["status"]);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    f.set_paused("patient", false).await;
    let running = f
        .wait_job("patient", "Running with both replicas", WAIT, |j| {
            running_without(j, 2, None)
        })
        .await;
    assert_eq!(backoff_count(&running), 0, "{}", running["status"]);
    let pods = f.pod_names_on("patient", &CLUSTERS).await;
    assert_eq!(
        pods.get("member-1").map(Vec::len),
        Some(2),
        "placed where capacity freed: {pods:?}"
    );
}

/// The ValidatingAdmissionPolicy (and its binding) of
/// `failover_writes_epoch_and_restart_before_teardown` on the real ground.
const STATUS_ONLY_POLICY: &str = "failover-test-status-only";

fn admission_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}

/// On home (a real kube-apiserver): refuses any write of the `epoch-kill-*`
/// jobs that adds or changes a `federation.tfjob.io/` annotation. The
/// contract keeps the failover record in the status alone, so a controller
/// that follows it never meets this policy; one that records the epoch in
/// an annotation is held between its two writes.
async fn install_status_only_policy(home: &kube::Client, probe_job: &Api<DynamicObject>) {
    let unchanged = "!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('federation.tfjob.io/') || (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))";
    real::apply(
        home,
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": STATUS_ONLY_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": ["batch.tensorstack.dev"],
                    "apiVersions": ["*"],
                    "operations": ["UPDATE"],
                    "resources": ["tensorflowtrainingjobs"],
                }]},
                "matchConditions": [{"name": "failover-test-jobs", "expression": "object.metadata.name.startsWith('epoch-kill-')"}],
                "validations": [{
                    "expression": unchanged,
                    "message": "failover test: the failover record belongs in the job's status",
                }],
            },
        }),
    )
    .await;
    real::apply(
        home,
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": STATUS_ONLY_POLICY},
            "spec": {"policyName": STATUS_ONLY_POLICY, "validationActions": ["Deny"]},
        }),
    )
    .await;
    // In force once a dry run of such a write is refused.
    let probe = Patch::Merge(
        json!({"metadata": {"annotations": {"federation.tfjob.io/policy-check": "x"}}}),
    );
    let dry_run = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    eventually(
        "the status-only policy in force",
        Duration::from_secs(20),
        async || match probe_job.patch("epoch-kill-0", &dry_run, &probe).await {
            Err(kube::Error::Api(e)) if e.message.contains("failover record") => Some(()),
            _ => None,
        },
    )
    .await;
}

async fn remove_status_only_policy(home: &kube::Client) {
    for (kind, plural) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
        ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    ] {
        let api: Api<DynamicObject> =
            Api::all_with(home.clone(), &admission_resource(kind, plural));
        match api.delete(STATUS_ONLY_POLICY, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("delete {kind} {STATUS_ONLY_POLICY}: {e}"),
        }
    }
}

/// The epoch a job's object shows: `status.placement.epoch` (the contract)
/// or, from controllers before it, the annotation.
fn recorded_epoch(job: &Value) -> Option<u64> {
    job["status"]["placement"]["epoch"].as_u64().or_else(|| {
        job["metadata"]["annotations"][EPOCH_LABEL]
            .as_str()?
            .parse()
            .ok()
    })
}

/// What the watch of the jobs saw: the highest backoffCount per job, and
/// the first job that showed any trace of a failover.
#[derive(Default)]
struct FailoverWatch {
    highest_backoff: BTreeMap<String, i64>,
    first_sign: Option<String>,
}

/// Watches the jobs of `initial` (name → placement epoch of their pods):
/// the first trace of a failover (a backoffCount, or a newer epoch in the
/// status or the annotation) is sent on the returned channel at once.
fn watch_failovers(
    jobs: Api<DynamicObject>,
    initial: BTreeMap<String, u64>,
) -> (
    tokio::task::JoinHandle<()>,
    Arc<Mutex<FailoverWatch>>,
    tokio::sync::oneshot::Receiver<String>,
) {
    let seen = Arc::new(Mutex::new(FailoverWatch::default()));
    let (tell, told) = tokio::sync::oneshot::channel();
    let sink = seen.clone();
    let task = tokio::spawn(async move {
        let mut tell = Some(tell);
        let mut events = kube::runtime::WatchStreamExt::default_backoff(watcher(
            jobs,
            watcher::Config::default(),
        ))
        .boxed();
        while let Some(event) = events.next().await {
            let (Ok(watcher::Event::Apply(job)) | Ok(watcher::Event::InitApply(job))) = event
            else {
                continue;
            };
            let name = job.metadata.name.clone().unwrap_or_default();
            let Some(epoch) = initial.get(&name) else {
                continue;
            };
            let job = serde_json::to_value(&job).expect("job as JSON");
            let count = backoff_count(&job);
            let moved = recorded_epoch(&job).is_some_and(|e| e > *epoch);
            let mut seen = sink.lock().expect("lock");
            let highest = seen.highest_backoff.entry(name.clone()).or_default();
            *highest = (*highest).max(count);
            if (count > 0 || moved) && seen.first_sign.is_none() {
                let sign = format!(
                    "{name}: backoffCount {count}, recorded epoch {:?}",
                    recorded_epoch(&job)
                );
                seen.first_sign = Some(sign.clone());
                if let Some(tell) = tell.take() {
                    let _ = tell.send(sign);
                }
            }
        }
    });
    (task, seen, told)
}

/// Every pod (uid) ever seen on `clusters`, by cluster, name and epoch.
type PodsSeen = Arc<Mutex<BTreeSet<(String, String, Option<u64>, String)>>>;

fn record_pods(f: &Federation, clusters: &[&str]) -> (Vec<tokio::task::JoinHandle<()>>, PodsSeen) {
    let seen: PodsSeen = Default::default();
    let tasks = clusters
        .iter()
        .map(|cluster| {
            let pods: Api<Pod> = Api::namespaced(f.clients[*cluster].clone(), "default");
            let (sink, cluster) = (seen.clone(), cluster.to_string());
            tokio::spawn(async move {
                let config = watcher::Config::default().labels("federation.tfjob.io/job-name");
                let mut events =
                    kube::runtime::WatchStreamExt::default_backoff(watcher(pods, config)).boxed();
                while let Some(event) = events.next().await {
                    let (Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod))) =
                        event
                    else {
                        continue;
                    };
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    sink.lock().expect("lock").insert((
                        cluster.clone(),
                        name_of(&pod),
                        epoch_of(&pod),
                        uid,
                    ));
                }
            })
        })
        .collect();
    (tasks, seen)
}

/// The contract: a failover writes the new epoch and the counted restart in
/// one status write before any teardown, so a controller killed right
/// after that write, before its teardown, and restarted shows exactly one
/// restart, and no replica runs twice.
///
/// Six jobs of two workers, spread over member-1 and member-2; member-2
/// answers 1.5 s late, so a teardown there cannot finish at once; member-1
/// is partitioned until lost. The controller is killed at the first trace
/// of the failover on any job (a backoffCount, a newer epoch in
/// `status.placement` or, from earlier controllers, in the annotation),
/// then started again with member-1 still lost. Each job must end Running on
/// member-2 with backoffCount 1 (never more), and once member-1 returns each
/// replica has exactly one pod, in the newest epoch, over all clusters.
///
/// A controller that records the epoch and the count in two writes can be
/// caught between them; to make that likely, the home API server refuses
/// some writes during the failover: on the real ground a
/// ValidatingAdmissionPolicy refuses writes of `federation.tfjob.io/`
/// annotations of these jobs (the contract's controller writes none, so it
/// never meets the policy), which deterministically holds an annotation
/// writer between its writes; the simulator has no admission policies, so
/// there two thirds of home's requests are answered 500 or 429 meanwhile:
/// kube-rs retries a 429, so about half of the writes fail, each job's two
/// writes are split with probability about 1/2 (a failed write is retried
/// after `retryIntervalMs`, 2 s), and all six jobs escape with about 1/64.
async fn failover_writes_epoch_and_restart_before_teardown(ground: Ground) {
    let mut f = start(ground, "retryIntervalMs: 2000\n").await;
    let names: Vec<String> = (0..6).map(|i| format!("epoch-kill-{i}")).collect();
    let spread = json!({
        "scheduler": {"federation": {"strategy": "Spread"}},
        "runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 5},
    });
    for name in &names {
        f.submit(gpu_job(name, &[("worker", 2, 0)], spread.clone(), "600"))
            .await;
    }
    let mut initial = BTreeMap::new();
    for name in &names {
        f.wait_phase(name, "Running", WAIT).await;
        let pods = f.pods_on(name, &CLUSTERS).await;
        assert_eq!(
            pods.keys().map(String::as_str).collect::<Vec<_>>(),
            ["member-1", "member-2"],
            "{name} spreads over both members"
        );
        let epochs: BTreeSet<Option<u64>> = pods.values().flatten().map(epoch_of).collect();
        assert_eq!(epochs.len(), 1, "{name}: one epoch: {epochs:?}");
        let epoch = epochs.into_iter().next().flatten().expect("an epoch label");
        initial.insert(name.clone(), epoch);
    }
    let (pod_watches, pods_seen) = record_pods(&f, &["home", "member-2"]);
    let (job_watch, failovers, first_sign) = watch_failovers(f.jobs(), initial.clone());
    eventually("the job watch to list the jobs", WAIT, async || {
        let listed = failovers.lock().expect("lock").highest_backoff.len();
        (listed == names.len()).then_some(())
    })
    .await;
    let home = f.clients["home"].clone();
    match ground {
        Ground::Real => install_status_only_policy(&home, &f.jobs()).await,
        Ground::Sim => set_faults(&home, json!({"errorRate": 0.67})).await,
    }
    set_faults(&f.clients["member-2"], json!({"latencyMs": 1500})).await;

    set_faults(&f.clients["member-1"], json!({"partitioned": true})).await;
    let sign = tokio::time::timeout(FAILOVER, first_sign)
        .await
        .expect("a failover within the limit")
        .expect("the job watch runs");
    f.kill_controller();
    set_faults(&f.clients["member-2"], json!({"latencyMs": 0})).await;
    if ground == Ground::Sim {
        set_faults(&home, json!({"errorRate": 0.0})).await;
    }
    // Killed before the teardown: member-2 answered 1.5 s late, so a pod
    // deleted by now was deleted before the failover was written.
    let on_member_2 = f.pods_on_all(&names, "member-2").await;
    for name in &names {
        let old: Vec<&Pod> = on_member_2[name]
            .iter()
            .filter(|p| epoch_of(p) == Some(initial[name]) && !deleting(p))
            .collect();
        assert_eq!(
            old.len(),
            1,
            "{name}: its replica on member-2 was not torn down before the failover's record (first sign: {sign})"
        );
    }
    if ground == Ground::Real {
        remove_status_only_policy(&home).await;
    }
    let mut at_kill = Vec::new();
    for name in &names {
        let job = f.job(name).await;
        at_kill.push(format!(
            "{name}: backoffCount {}, recorded epoch {:?}",
            backoff_count(&job),
            recorded_epoch(&job)
        ));
    }

    f.restart_controller().await;
    for name in &names {
        let replaced = f
            .wait_job(name, "Running again on member-2", FAILOVER, |j| {
                running_without(j, 2, Some("member-1"))
            })
            .await;
        assert_eq!(
            backoff_count(&replaced),
            1,
            "{name}: one restart for one failover, whenever the controller died; just after the kill (first sign: {sign}): {at_kill:#?}"
        );
    }
    set_faults(&f.clients["member-1"], json!({"partitioned": false})).await;
    let mut newest = BTreeMap::new();
    for name in &names {
        let epoch = eventually(
            &format!("{name}: one pod per replica, all of the newest epoch"),
            FAILOVER,
            async || {
                let pods = f.pods_on(name, &CLUSTERS).await;
                let all: Vec<&Pod> = pods.values().flatten().collect();
                let epoch = all.iter().filter_map(|p| epoch_of(p)).max()?;
                let names: BTreeSet<String> = all.iter().map(|p| name_of(p)).collect();
                let current = all
                    .iter()
                    .all(|p| epoch_of(p) == Some(epoch) && !deleting(p));
                (all.len() == 2 && names.len() == 2 && current).then_some(epoch)
            },
        )
        .await;
        assert!(epoch > initial[name], "{name}: a new epoch");
        newest.insert(name.clone(), epoch);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    job_watch.abort();
    for task in pod_watches {
        task.abort();
    }
    let highest = failovers.lock().expect("lock").highest_backoff.clone();
    for name in &names {
        assert_eq!(
            highest.get(name),
            Some(&1),
            "{name}: the highest backoffCount ever shown"
        );
    }
    let seen = pods_seen.lock().expect("lock").clone();
    for name in &names {
        let mut per_replica: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (_, pod, epoch, uid) in &seen {
            if pod.starts_with(&format!("{name}-")) && *epoch == Some(newest[name]) {
                per_replica
                    .entry(pod.clone())
                    .or_default()
                    .insert(uid.clone());
            }
        }
        assert_eq!(
            per_replica.len(),
            2,
            "{name}: both replicas ran in epoch {}: {per_replica:?}",
            newest[name]
        );
        assert!(
            per_replica.values().all(|uids| uids.len() == 1),
            "{name}: each replica had exactly one pod in the newest epoch: {per_replica:?}"
        );
    }
}

/// One 500 from home while a restarted controller reads a member's Secret
/// once left that member disconnected for most of a minute, and its jobs
/// failed over (a restart counted) while their pods kept running. Transient
/// errors change nothing: the read is retried.
async fn a_failed_secret_read_at_start_up_changes_nothing(ground: Ground) {
    let mut f = start(ground, "").await;
    f.submit(gpu_job("steady", &[("worker", 2, 2)], json!({}), "300"))
        .await;
    let running = f.wait_phase("steady", "Running", WAIT).await;
    let placed = f.pod_names_on("steady", &CLUSTERS).await;
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-1"],
        "{placed:?}"
    );

    f.kill_controller();
    // Each read of a member Secret by the restarted controller fails, twice.
    set_faults(
        &f.clients["home"],
        json!({"failRequests": {"verb": "get", "resource": "secrets", "count": 2, "code": 500}}),
    )
    .await;
    f.restart_controller().await;
    wait_ready(&f.members(), "member-1", "True").await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let job = f.job("steady").await;
        assert_eq!(
            (phase_of(&job), backoff_count(&job)),
            ("Running", 0),
            "the job neither moved nor counted a restart: {}",
            job["status"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        f.pod_names_on("steady", &CLUSTERS).await,
        placed,
        "the same pods, where they were"
    );
    assert_eq!(
        running["status"]["placement"],
        f.job("steady").await["status"]["placement"],
        "the same placement"
    );
    let faults = f.clients["home"].clone();
    set_faults(
        &faults,
        json!({"failRequests": {"verb": "get", "resource": "secrets", "count": 0}}),
    )
    .await;
}

/// The job's pods and services, by cluster, as `cluster/name`.
async fn objects_of(f: &Federation, job: &str) -> Vec<String> {
    let mut found = Vec::new();
    for cluster in CLUSTERS {
        let selector = ListParams::default().labels(&format!("federation.tfjob.io/job-name={job}"));
        let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), "default");
        let services: Api<Service> = Api::namespaced(f.clients[cluster].clone(), "default");
        for pod in pods.list(&selector).await.expect("pods").items {
            found.push(format!("{cluster}/pod/{}", name_of(&pod)));
        }
        for service in services.list(&selector).await.expect("services").items {
            found.push(format!(
                "{cluster}/service/{}",
                service.metadata.name.unwrap_or_default()
            ));
        }
    }
    found
}

/// A job that ended before the controller (re)started, then deleted: the
/// controller held no replica actors for it, so it once removed the
/// finalizer at once and left the job's pods and services on the members
/// (the sweep at connect had run while the job still existed). Now the
/// replicas of its recorded placement are retired first, on every cluster,
/// whoever ran the job; the same when it is deleted while no controller
/// runs.
async fn deleting_an_ended_job_after_a_restart_cleans_every_member(ground: Ground) {
    let mut f = start(ground, "").await;
    // cleanUpPolicy none: the ended jobs' pods and services stay until deleted.
    for name in ["ended", "ended-offline"] {
        f.submit(gpu_job(name, &[("worker", 1, 1)], json!({}), "0.5"))
            .await;
    }
    for name in ["ended", "ended-offline"] {
        f.wait_phase(name, "Succeeded", WAIT).await;
        let left = objects_of(&f, name).await;
        assert!(
            left.iter().any(|o| o.starts_with("member-")),
            "{name}'s pods stay on a member: {left:?}"
        );
    }
    f.kill_controller();
    f.jobs()
        .delete("ended-offline", &Default::default())
        .await
        .expect("delete a job while no controller runs");
    f.restart_controller().await;
    // Connected and swept again, with both jobs still there.
    for member in ["member-1", "member-2"] {
        wait_ready(&f.members(), member, "True").await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.jobs()
        .delete("ended", &Default::default())
        .await
        .expect("delete the job");
    for name in ["ended", "ended-offline"] {
        eventually("the job to be gone", WAIT, async || {
            f.jobs().get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
        eventually(
            "nothing of the job left",
            Duration::from_secs(10),
            async || objects_of(&f, name).await.is_empty().then_some(()),
        )
        .await;
    }
}

/// Objects of a job that no longer exists are swept periodically, not only
/// when a member connects; but only those this controller made (signed): a
/// pod a user made with our labels is never deleted.
async fn the_sweep_runs_periodically_and_deletes_only_what_we_made(ground: Ground) {
    let f = start(ground, "sweepIntervalMs: 1000\n").await;
    wait_ready(&f.members(), "member-1", "True").await;
    let pods: Api<Pod> = Api::namespaced(f.clients["member-1"].clone(), "default");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(f.clients["home"].clone(), "tfjob-federator");
    let key = secrets
        .get(tfjob_federator::signing::KEY_SECRET)
        .await
        .expect("the signing key")
        .data
        .and_then(|d| d.get(tfjob_federator::signing::KEY_FIELD).cloned())
        .expect("the key field");
    let signer = tfjob_federator::signing::Signer::new(&key.0, None);
    let left_by = |name: &str, signature: Option<String>| -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(signature) = signature {
            annotations.insert("federation.tfjob.io/signature".into(), json!(signature));
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations, "labels": {
                "app.kubernetes.io/managed-by": "tfjob-federator",
                "federation.tfjob.io/job-name": "orphan",
                "federation.tfjob.io/job-uid": "no-such-job",
                "federation.tfjob.io/replica-type": "worker",
                "federation.tfjob.io/replica-index": "0",
                "federation.tfjob.io/placement-epoch": "0"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf"}]},
        }))
        .expect("a pod")
    };
    let ours = tfjob_federator::signing::subject("no-such-job", "worker-0", "0", "Pod");
    for pod in [
        left_by("orphan-worker-0", Some(signer.sign(&ours))),
        left_by("users-pod", None),
        left_by("forged", Some("bm90IGEgc2lnbmF0dXJl".into())),
    ] {
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create a pod");
    }
    eventually("the orphan to be swept", WAIT, async || {
        let pod = pods.get_opt("orphan-worker-0").await.ok()?;
        pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    // Three more sweeps: what we did not make stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["users-pod", "forged"] {
        let pod = pods.get_opt(name).await.expect("read the pod");
        assert!(
            pod.is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{name} was left alone"
        );
        pods.delete(name, &Default::default())
            .await
            .expect("clean up");
    }
}

/// A home user's job in a namespace that is a member's own (`kube-system`)
/// once ran there on a member. Members never take it: it waits, saying why.
async fn a_job_in_a_system_namespace_never_lands_on_a_member(ground: Ground) {
    let f = start(ground, "").await;
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(f.clients["home"].clone(), "kube-system", &job_resource());
    let job: DynamicObject =
        serde_json::from_value(gpu_job("system", &[("worker", 1, 1)], json!({}), "300"))
            .expect("a job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("submit into kube-system");
    let waiting = eventually("the job to wait, saying why", WAIT, async || {
        let job = jobs.get("system").await.ok()?;
        let initialized = job.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Initialized")?
            .clone();
        (initialized["reason"] == "WaitingForCapacity").then_some(initialized)
    })
    .await;
    let message = waiting["message"].as_str().unwrap_or_default();
    // Clusters that fail alike are named together.
    assert!(
        message.contains("member-1, member-2: the job's namespace is a system namespace there"),
        "{message}"
    );
    for cluster in ["member-1", "member-2"] {
        let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), "kube-system");
        let found = pods
            .list(&ListParams::default().labels("federation.tfjob.io/job-name=system"))
            .await
            .expect("pods")
            .items;
        assert!(found.is_empty(), "a pod of the job on {cluster}");
    }
    let _ = jobs.delete("system", &Default::default()).await;
}

/// A user-written `federation.tfjob.io/placement` annotation was once
/// obeyed, steering a job around `clusterNames` and onto a cordoned member.
/// The placement is recorded in the status now; the annotation means
/// nothing.
async fn a_user_written_placement_annotation_is_ignored(ground: Ground) {
    let f = start(ground, "").await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let cordon = |on: bool| kube::api::Patch::Merge(json!({"spec": {"unschedulable": on}}));
    members
        .patch("member-1", &Default::default(), &cordon(true))
        .await
        .expect("cordon member-1");
    let mut job = gpu_job("steered", &[("worker", 2, 1)], json!({}), "300");
    job["metadata"]["annotations"] = json!({
        "federation.tfjob.io/placement": "{\"worker-0\":\"member-1\",\"worker-1\":\"member-1\"}",
        "federation.tfjob.io/placement-epoch": "0",
    });
    f.submit(job).await;
    let running = f.wait_phase("steered", "Running", WAIT).await;
    let placed = f.pod_names_on("steered", &CLUSTERS).await;
    members
        .patch("member-1", &Default::default(), &cordon(false))
        .await
        .expect("uncordon member-1");
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-2"],
        "placed by the policy, not the annotation: {placed:?}"
    );
    assert!(
        replica_clusters(&running).iter().all(|c| c == "member-2"),
        "{}",
        running["status"]
    );
}

/// Waits until `job` waits for capacity with a message giving `why` for
/// member-1 and member-2 alike (named together, as clusters that fail
/// alike are).
async fn waits_saying_why_on_each_member(f: &Federation, job: &str, why: &str) {
    let waiting = f
        .wait_job(job, "waiting, saying why", WAIT, |j| {
            condition(j, "Initialized").is_some_and(|c| c["reason"] == "WaitingForCapacity")
        })
        .await;
    let message = condition(&waiting, "Initialized")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("member-1, member-2: {why}")),
        "{message}"
    );
}

/// A home user's job with privileged containers once ran on a member as
/// written. A member runs it only if its `podPolicy` allows it; the job
/// waits meanwhile, saying why per member.
async fn a_member_runs_only_what_its_pod_policy_allows(ground: Ground) {
    let f = start(ground, "").await;
    let mut job = gpu_job("root", &[("worker", 1, 1)], json!({}), "300");
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["securityContext"] =
        json!({"privileged": true});
    f.submit(job).await;
    waits_saying_why_on_each_member(
        &f,
        "root",
        "privileged containers are not allowed (spec.podPolicy.allowPrivileged)",
    )
    .await;
    assert!(
        f.pods_on("root", &CLUSTERS).await.is_empty(),
        "no pod anywhere"
    );
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let allow =
        |on: bool| kube::api::Patch::Merge(json!({"spec": {"podPolicy": {"allowPrivileged": on}}}));
    members
        .patch("member-2", &Default::default(), &allow(true))
        .await
        .expect("member-2 allows privileged pods");
    f.wait_phase("root", "Running", WAIT).await;
    let placed = f.pod_names_on("root", &CLUSTERS).await;
    members
        .patch("member-2", &Default::default(), &allow(false))
        .await
        .expect("back to the default");
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-2"],
        "{placed:?}"
    );
}

/// A member that lists the namespaces it allows gets no replica of a job
/// in another one (and so no namespace created for it); the job waits,
/// saying why, until the member allows its namespace.
async fn a_member_runs_only_the_namespaces_it_allows(ground: Ground) {
    let f = start(ground, "").await;
    let members: Api<MemberCluster> = Api::all(f.clients["home"].clone());
    let allow = |namespaces: Value| {
        kube::api::Patch::Merge(json!({"spec": {"podPolicy": {"allowedNamespaces": namespaces}}}))
    };
    for member in ["member-1", "member-2"] {
        members
            .patch(member, &Default::default(), &allow(json!(["research"])))
            .await
            .expect("allow only research");
    }
    let on_members =
        json!({"scheduler": {"federation": {"clusterNames": ["member-1", "member-2"]}}});
    f.submit(gpu_job("elsewhere", &[("worker", 1, 1)], on_members, "300"))
        .await;
    waits_saying_why_on_each_member(
        &f,
        "elsewhere",
        "namespace default is not allowed (spec.podPolicy.allowedNamespaces)",
    )
    .await;
    members
        .patch(
            "member-2",
            &Default::default(),
            &allow(json!(["research", "default"])),
        )
        .await
        .expect("allow default on member-2");
    f.wait_phase("elsewhere", "Running", WAIT).await;
    let placed = f.pod_names_on("elsewhere", &CLUSTERS).await;
    for member in ["member-1", "member-2"] {
        members
            .patch(member, &Default::default(), &allow(Value::Null))
            .await
            .expect("back to the default");
    }
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-2"],
        "{placed:?}"
    );
}

/// Labels namespace `default` of a member with a Pod Security level to
/// enforce, or removes the label (`None`).
async fn enforce_pod_security(f: &Federation, member: &str, level: Option<&str>) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(f.clients[member].clone());
    let label = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}});
    namespaces
        .patch(
            "default",
            &PatchParams::default(),
            &kube::api::Patch::Merge(label),
        )
        .await
        .unwrap_or_else(|e| panic!("{member}: label namespace default: {e}"));
}

/// A member's namespace that enforces a Pod Security level gets only pods
/// that meet it: its admission would refuse the rest. The job waits,
/// saying why per member, and goes where the level admits it once one does.
async fn a_member_runs_only_what_its_namespace_pod_security_admits(ground: Ground) {
    let f = start(ground, "").await;
    for member in ["member-1", "member-2"] {
        enforce_pod_security(&f, member, Some("restricted")).await;
    }
    f.submit(gpu_job("plain", &[("worker", 1, 1)], json!({}), "300"))
        .await;
    waits_saying_why_on_each_member(&f, "plain", "namespace default enforces Pod Security \"restricted\": allowPrivilegeEscalation != false (container \"tensorflow\" must set securityContext.allowPrivilegeEscalation=false)").await;
    assert!(
        f.pods_on("plain", &CLUSTERS).await.is_empty(),
        "no pod anywhere"
    );
    enforce_pod_security(&f, "member-2", Some("baseline")).await;
    f.wait_phase("plain", "Running", WAIT).await;
    let placed = f.pod_names_on("plain", &CLUSTERS).await;
    for member in ["member-1", "member-2"] {
        enforce_pod_security(&f, member, None).await;
    }
    assert_eq!(
        placed.keys().collect::<Vec<_>>(),
        ["member-2"],
        "{placed:?}"
    );
}

/// A finalizer removed by hand lets the job go at once; what it ran on the
/// members goes anyway (its actors tear it down; the periodic sweep would
/// otherwise).
async fn a_finalizer_removed_by_hand_leaves_nothing_behind(ground: Ground) {
    let f = start(ground, "").await;
    f.submit(gpu_job("unguarded", &[("worker", 2, 2)], json!({}), "300"))
        .await;
    f.wait_phase("unguarded", "Running", WAIT).await;
    assert!(!objects_of(&f, "unguarded").await.is_empty());
    let unguard = kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}}));
    f.jobs()
        .patch("unguarded", &PatchParams::default(), &unguard)
        .await
        .expect("remove the finalizer");
    f.jobs()
        .delete("unguarded", &Default::default())
        .await
        .expect("delete the job");
    eventually("nothing of the job on any cluster", WAIT, async || {
        objects_of(&f, "unguarded").await.is_empty().then_some(())
    })
    .await;
}

/// A member namespace deleted under a running job once left the job
/// Running forever with its replicas in Creating, and a retry per replica
/// per second. Now: the pods that went are exits (a counted restart under
/// OnFailure), the replicas wait visibly (Warning Event and `Initialized`
/// False, reason `NamespaceMissing`) with backoff, and run again once the
/// namespace exists again. The controller does not re-create a namespace an
/// administrator deleted.
async fn a_member_namespace_deleted_under_a_running_job(ground: Ground) {
    let f = start(ground, "").await;
    let namespace = real::test_namespace(&f.clients["home"], "team").await;
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(f.clients["home"].clone(), &namespace, &job_resource());
    let mut job = gpu_job(
        "homeless",
        &[("worker", 1, 1)],
        json!({"runPolicy": {"backoffLimit": 5}}),
        "300",
    );
    job["spec"]["replicaSpecs"][0]["restartPolicy"] = json!("OnFailure");
    let job: DynamicObject = serde_json::from_value(job).expect("a job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("submit");
    let phase = |job: &DynamicObject| {
        job.data["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    eventually("the job Running", WAIT, async || {
        let job = jobs.get("homeless").await.ok()?;
        (phase(&job) == "Running").then_some(())
    })
    .await;
    let cluster = {
        let job = jobs.get("homeless").await.expect("the job");
        job.data["status"]["placement"]["assignment"]["worker-0"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        cluster.starts_with("member-"),
        "placed on a member: {cluster}"
    );
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(f.clients[&cluster].clone());
    namespaces
        .delete(&namespace, &Default::default())
        .await
        .expect("the administrator deletes the namespace");
    let waiting = eventually(
        "the job to say its namespace is missing",
        WAIT,
        async || {
            let job = jobs.get("homeless").await.ok()?;
            let initialized = condition(&job.data, "Initialized")?.clone();
            (initialized["reason"] == "NamespaceMissing").then_some(job)
        },
    )
    .await;
    let message = condition(&waiting.data, "Initialized")
        .cloned()
        .unwrap_or_default();
    assert!(
        message["message"]
            .as_str()
            .unwrap_or_default()
            .contains(&namespace),
        "{message}"
    );
    assert_eq!(
        backoff_count(&waiting.data),
        1,
        "the pod that went counts as one restart"
    );
    // Back: the replica runs again.
    eventually("the namespace gone", WAIT, async || {
        namespaces
            .get_opt(&namespace)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let again = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(again).expect("a namespace"),
        )
        .await
        .expect("the namespace is back");
    eventually(
        "the replica running again",
        Duration::from_secs(60),
        async || {
            let job = jobs.get("homeless").await.ok()?;
            let initialized = condition(&job.data, "Initialized")?.clone();
            (phase(&job) == "Running" && initialized["reason"] != "NamespaceMissing").then_some(())
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(f.clients[&cluster].clone(), &namespace);
    assert_eq!(
        pods.list(&ListParams::default())
            .await
            .expect("pods")
            .items
            .len(),
        1,
        "the replica's pod is back"
    );
    let _ = jobs.delete("homeless", &Default::default()).await;
}

/// The uid and restart-free identity of each of the job's pods on `cluster`,
/// by pod name.
async fn uids_on(f: &Federation, job: &str, cluster: &str) -> BTreeMap<String, String> {
    f.pods_on(job, &[cluster])
        .await
        .into_values()
        .flatten()
        .filter(|pod| !deleting(pod))
        .map(|pod| (name_of(&pod), pod.metadata.uid.clone().unwrap_or_default()))
        .collect()
}

/// `status.tasks[type].restartCount`.
fn restart_count(job: &Value, replica_type: &str) -> i64 {
    job["status"]["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["type"] == replica_type)
        .and_then(|t| t["restartCount"].as_i64())
        .unwrap_or(0)
}

/// The federation with home a target too (each cluster 4 GPUs), so that a
/// replica moved off a lost member has room.
async fn start_with_home(ground: Ground) -> Federation {
    let f = federation(ground).settings(FAST_LOSS).start().await;
    if ground == Ground::Real {
        remove_status_only_policy(&f.clients["home"]).await;
    }
    f
}

/// A parameter-server job split by Pack (6 GPUs do not fit one cluster's
/// 4): the chief and worker-0 with the ps on home, worker-1 alone on a
/// member (returned second).
async fn split_ps_job(f: &Federation, name: &str, failover: &str) -> (String, String) {
    f.export_services().await;
    f.submit(gpu_job(
        name,
        &[("chief", 1, 2), ("ps", 1, 0), ("worker", 2, 2)],
        json!({"scheduler": {"federation": {"failover": failover}}, "runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "60",
    ))
    .await;
    let running = f.wait_phase(name, "Running", WAIT).await;
    let placed = assignment_of(&running);
    let alone = placed["worker-1"].clone();
    let rest = placed["chief-0"].clone();
    assert!(
        alone.starts_with("member-")
            && alone != rest
            && placed["ps-0"] == rest
            && placed["worker-0"] == rest,
        "Pack splits the job, worker-1 alone on a member: {placed:?}"
    );
    (rest, alone)
}

/// Losing the member that holds the ps moves the whole job, even under
/// `failover: LostReplicas`: the training state lived there. (Spread over
/// the members deals chief-0, worker-0, worker-1, ps-0 in turn: the ps on
/// member-2, with worker-0.)
async fn a_lost_ps_moves_the_whole_job_under_lost_replicas(ground: Ground) {
    let f = start_with_home(ground).await;
    f.export_services().await;
    f.submit(gpu_job(
        "ps-lost",
        &[("chief", 1, 1), ("ps", 1, 0), ("worker", 2, 1)],
        json!({"scheduler": {"federation": {"strategy": "Spread", "failover": "LostReplicas",
            "clusterNames": ["member-1", "member-2"]}}, "runPolicy": {"cleanUpPolicy": "none", "backoffLimit": 3}}),
        "300",
    ))
    .await;
    let running = f.wait_phase("ps-lost", "Running", WAIT).await;
    let placed = assignment_of(&running);
    assert_eq!(
        (placed["ps-0"].as_str(), placed["chief-0"].as_str()),
        ("member-2", "member-1"),
        "{placed:?}"
    );
    let kept = uids_on(&f, "ps-lost", "member-1").await;
    set_faults(&f.clients["member-2"], json!({"partitioned": true})).await;
    let moved = f
        .wait_job("ps-lost", "re-placed whole on member-1", FAILOVER, |j| {
            assignment_of(j).len() == 4
                && assignment_of(j).values().all(|c| c == "member-1")
                && phase_of(j) == "Running"
        })
        .await;
    assert_eq!(backoff_count(&moved), 1, "{}", moved["status"]);
    assert_eq!(
        moved["status"]["placement"]["replicaEpochs"],
        Value::Null,
        "no replica kept its pod: {}",
        moved["status"]["placement"]
    );
    let after = uids_on(&f, "ps-lost", "member-1").await;
    assert!(
        kept.iter().all(|(pod, uid)| after.get(pod) != Some(uid)),
        "the chief's and worker-1's pods were replaced too: {kept:?} -> {after:?}"
    );
    set_faults(&f.clients["member-2"], json!({"partitioned": false})).await;
}

/// `tfjob-federator plan --lose CLUSTER -o json` against the federation.
fn plan_lose(f: &Federation, cluster: &str) -> Vec<Value> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .args(["plan", "--lose", cluster, "-o", "json", "--kubeconfig"])
        .arg(&f.controller_kubeconfig)
        .arg("--config")
        .arg(f.dir.join("controller.yaml"))
        .output()
        .expect("plan runs");
    assert!(
        output.status.success(),
        "plan --lose failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&output.stdout).expect("predictions as JSON")
}

/// `plan --lose` says, before the loss, exactly what a member's loss then
/// does to a mixed set of jobs: which replicas move and where, whole or
/// partial, the restart counts after, and which jobs fail. Home takes
/// replicas too, so that what moves has somewhere to go. Under
/// `failover: LostReplicas` the worker alone on the lost member moves and
/// the chief, the ps and worker-0 keep their pods (same uids, own epoch,
/// no restart); under `Job` the whole job restarts; both then succeed.
async fn plan_lose_predicts_what_a_loss_does(ground: Ground) {
    let f = start_with_home(ground).await;
    let (rest, alone) = split_ps_job(&f, "part", "LostReplicas").await;
    let spread = |failover: &str, backoff: i64| {
        json!({"scheduler": {"federation": {"strategy": "Spread", "failover": failover}},
            "runPolicy": {"cleanUpPolicy": "none", "backoffLimit": backoff}})
    };
    f.submit(gpu_job(
        "whole",
        &[("worker", 3, 0)],
        spread("Job", 3),
        "40",
    ))
    .await;
    f.submit(gpu_job(
        "spent",
        &[("worker", 3, 0)],
        spread("LostReplicas", 0),
        "300",
    ))
    .await;
    f.submit(gpu_job(
        "far",
        &[("worker", 1, 0)],
        json!({"scheduler": {"federation": {"clusterNames": ["home"]}}}),
        "300",
    ))
    .await;
    let jobs = ["part", "whole", "spent", "far"];
    for job in jobs {
        f.wait_phase(job, "Running", WAIT).await;
    }
    let before: BTreeMap<&str, Value> = {
        let mut before = BTreeMap::new();
        for job in jobs {
            before.insert(job, f.job(job).await);
        }
        before
    };
    let predicted: BTreeMap<String, Value> = plan_lose(&f, &alone)
        .into_iter()
        .map(|p| (p["job"].as_str().unwrap_or_default().to_string(), p))
        .collect();
    let of = |job: &str| predicted[&format!("{}/{job}", f.namespace)].clone();
    assert_eq!(
        jobs.map(|j| of(j)["result"].as_str().unwrap_or_default().to_string()),
        ["moves", "moves", "fails", "untouched"],
        "{predicted:#?}"
    );
    assert_eq!(of("part")["whole"], false, "{predicted:#?}");
    assert_eq!(of("whole")["whole"], true, "{predicted:#?}");

    let kept = uids_on(&f, "part", &rest).await;
    assert_eq!(kept.len(), 3, "{kept:?}");
    set_faults(&f.clients[alone.as_str()], json!({"partitioned": true})).await;
    let failed = f.wait_phase("spent", "Failed", FAILOVER).await;
    assert_eq!(
        condition(&failed, "Failed").and_then(|c| c["reason"].as_str()),
        Some("ClusterLost")
    );
    for job in ["part", "whole"] {
        let prediction = of(job);
        let moved: BTreeMap<String, Value> = prediction["moved"]
            .as_object()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let after = f
            .wait_job(job, "the predicted placement", FAILOVER, |j| {
                let placed = assignment_of(j);
                phase_of(j) == "Running"
                    && moved
                        .iter()
                        .all(|(r, c)| placed.get(r).map(String::as_str) == c.as_str())
            })
            .await;
        let placed = assignment_of(&after);
        for (replica, cluster) in assignment_of(&before[job]) {
            if !moved.contains_key(&replica) {
                assert_eq!(placed[&replica], cluster, "{job}: {replica} stays");
            }
        }
        assert_eq!(
            backoff_count(&after),
            prediction["backoffCount"].as_i64().unwrap_or(-1),
            "{job}: {}",
            after["status"]
        );
        for (replica_type, count) in prediction["restartCounts"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert_eq!(
                restart_count(&after, replica_type),
                count.as_i64().unwrap_or(-1),
                "{job}: {replica_type}'s restarts, {}",
                after["status"]
            );
        }
    }
    let far = f.job("far").await;
    assert_eq!(
        (assignment_of(&far), backoff_count(&far)),
        (assignment_of(&before["far"]), 0),
        "untouched"
    );

    let part = f.job("part").await;
    let epoch = recorded_epoch(&part).expect("an epoch");
    assert_kept_their_epoch(&part, epoch - 1, &["chief-0", "ps-0", "worker-0"]);
    let after = uids_on(&f, "part", &rest).await;
    for (pod, uid) in &kept {
        assert_eq!(after.get(pod), Some(uid), "{pod} kept its pod: {after:?}");
    }
    assert_eq!(
        (restart_count(&part, "chief"), restart_count(&part, "ps")),
        (0, 0),
        "{}",
        part["status"]
    );
    for job in ["part", "whole"] {
        f.wait_phase(job, "Succeeded", Duration::from_secs(90))
            .await;
    }
    set_faults(&f.clients[alone.as_str()], json!({"partitioned": false})).await;
}

on_both_grounds!(
    plan_lose_predicts_what_a_loss_does,
    a_lost_ps_moves_the_whole_job_under_lost_replicas,
    a_member_namespace_deleted_under_a_running_job,
    a_finalizer_removed_by_hand_leaves_nothing_behind,
    a_member_runs_only_what_its_pod_policy_allows,
    a_member_runs_only_what_its_namespace_pod_security_admits,
    a_member_runs_only_the_namespaces_it_allows,
    a_user_written_placement_annotation_is_ignored,
    a_job_in_a_system_namespace_never_lands_on_a_member,
    deleting_an_ended_job_after_a_restart_cleans_every_member,
    the_sweep_runs_periodically_and_deletes_only_what_we_made,
    a_failed_secret_read_at_start_up_changes_nothing,
    deleting_a_member_cluster_under_a_running_job,
    cluster_loss_without_restart_budget_fails_the_job,
    a_member_lost_during_a_debug_switch_is_failed_over,
    a_failover_shows_in_a_replicas_restart_count,
    the_deadline_clock_stands_while_a_failed_over_job_waits,
    paused_job_whose_clusters_are_lost,
    paused_job_is_never_placed_when_capacity_frees,
    failover_writes_epoch_and_restart_before_teardown,
);
