//! What the controller trusts (issue 22), end to end on both grounds: a
//! forged accepted `replicaSpecs` annotation, a forged status (placement,
//! phase, counts) written while the controller runs or while it is down, a
//! create a member refuses for good, and a controller killed while a
//! finished job's pods are being cleaned up. Every scenario includes a
//! controller restart where the finding needed one.
//!
//! The harness is the federation one of `tests/common/federation.rs` (home
//! and two members of one node with 4 GPUs each, members registered, the
//! controller a subprocess; on the real ground under the identity
//! `deploy/controller.yaml` ships), placing on the members only.

#[macro_use]
mod common;

use std::time::Duration;

use common::federation::*;
use common::operator::{Change, Recorder};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);
const ANNOTATION: &str = "federation.tfjob.io/replica-specs";

async fn start(ground: Ground) -> Federation {
    federation(ground).settings(HOME_NOT_TARGET).start().await
}

/// The notes of the Events with `reason` about the job `name`.
async fn events(f: &Federation, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(f.client.clone(), &f.namespace);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .filter_map(|e| e.note)
        .collect()
}

async fn wait_event(f: &Federation, name: &str, reason: &str) -> Vec<String> {
    eventually(&format!("{name}: an Event {reason}"), WAIT, async || {
        let found = events(f, name, reason).await;
        (!found.is_empty()).then_some(found)
    })
    .await
}

/// Every pod of the job on every cluster: (cluster, name, uid).
async fn pods(f: &Federation, job: &str) -> Vec<(String, String, String)> {
    f.pods_on(job, &CLUSTERS)
        .await
        .into_iter()
        .flat_map(|(cluster, pods)| {
            pods.into_iter()
                .map(move |p| (cluster.clone(), p.name_any(), p.uid().unwrap_or_default()))
        })
        .collect()
}

/// Records the pods made on each member from now on.
async fn record_pods(f: &Federation) -> Vec<(&'static str, Recorder<Pod>)> {
    let mut recorders = Vec::new();
    for member in ["member-1", "member-2"] {
        let api: Api<Pod> = Api::namespaced(f.clients[member].clone(), &f.namespace);
        recorders.push((member, Recorder::start(api).await));
    }
    recorders
}

/// The pods the recorders saw made: (member, pod).
fn made(recorders: &[(&'static str, Recorder<Pod>)]) -> Vec<(&'static str, Pod)> {
    recorders
        .iter()
        .flat_map(|(member, recorder)| {
            recorder
                .events()
                .into_iter()
                .filter(|(change, _)| *change == Change::Added)
                .map(move |(_, pod)| (*member, pod))
        })
        .collect()
}

/// Writes status fields as any client allowed to write the status could.
async fn write_status(f: &Federation, name: &str, status: Value) {
    f.jobs()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .expect("status written");
}

fn condition(job: &Value, kind: &str) -> Value {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .cloned()
        .unwrap_or_default()
}

/// A user who may edit the job overwrites the annotation that once held
/// the accepted replicaSpecs with a privileged, host-mounting, five-worker
/// spec while no controller runs. The replica the next controller re-creates
/// is built from what the job started with, and nothing is refused.
async fn a_forged_accepted_spec_builds_no_pod(ground: Ground) {
    let mut f = start(ground).await;
    let recorders = record_pods(&f).await;
    let mut honest = gpu_job("honest", &[("worker", 1, 1)], json!({}), "4");
    let worker = &mut honest["spec"]["replicaSpecs"][0];
    worker["restartPolicy"] = json!("OnFailure");
    // Exit 1 after 4 s, then 0: the restart is built by the next controller.
    worker["template"]["metadata"]["annotations"]["sim.federation.tfjob.io/exit-codes"] =
        json!("1,0");
    f.submit(honest).await;
    f.wait_phase("honest", "Running", WAIT).await;
    f.kill_controller();
    let forged = json!([{"type": "worker", "replicas": 5, "restartPolicy": "OnFailure",
        "template": {"spec": {"hostPID": true,
            "containers": [{"name": "tensorflow", "image": "mallory/evil:latest",
                "securityContext": {"privileged": true},
                "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}}]);
    f.jobs()
        .patch(
            "honest",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ANNOTATION: forged.to_string()}}})),
        )
        .await
        .expect("annotation written");
    f.start_controller().await;
    let done = f.wait_phase("honest", "Succeeded", WAIT).await;
    let made = made(&recorders);
    assert!(made.len() >= 2, "the first pod and its restart: {made:?}");
    for (member, pod) in &made {
        let spec = pod.spec.clone().unwrap_or_default();
        let images: Vec<String> = spec
            .containers
            .iter()
            .filter_map(|c| c.image.clone())
            .collect();
        assert_eq!(images, ["tf"], "{member}/{}", pod.name_any());
        assert_eq!(spec.host_pid, None, "{member}/{}", pod.name_any());
        assert!(spec.volumes.iter().flatten().all(|v| v.host_path.is_none()));
        assert_eq!(pod.name_any(), "honest-worker-0");
    }
    assert_eq!(done["status"]["backoffCount"], 1, "{}", done["status"]);
    assert!(
        events(&f, "honest", "SpecChangeRefused").await.is_empty(),
        "the honest spec is not reported as a refused edit"
    );
}

/// A status written by someone else — the placement moved to the other
/// member under the same epoch, a phase, a count — is written back while
/// the controller runs, so a restart then moves nothing. Written while no
/// controller runs, it cannot be verified: the next controller decides
/// nothing from it, says so, and leaves the running pod alone.
async fn a_forged_status_is_corrected_and_never_runs_a_second_copy(ground: Ground) {
    let mut f = start(ground).await;
    f.submit(gpu_job("placed", &[("worker", 1, 1)], json!({}), "300"))
        .await;
    let running = f.wait_phase("placed", "Running", WAIT).await;
    let honest = running["status"]["placement"].clone();
    let before = pods(&f, "placed").await;
    assert_eq!(before.len(), 1, "{before:?}");
    let (home_of_pod, other) = match before[0].0.as_str() {
        "member-1" => ("member-1", "member-2"),
        _ => ("member-2", "member-1"),
    };

    write_status(
        &f,
        "placed",
        json!({"phase": "Succeeded", "backoffCount": 99,
            "placement": {"epoch": honest["epoch"], "assignment": {"worker-0": other}}}),
    )
    .await;
    f.wait_job("placed", "its own status written back", WAIT, |j| {
        j["status"]["placement"] == honest
            && phase_of(j) == "Running"
            && j["status"]["backoffCount"] == 0
    })
    .await;
    let said = wait_event(&f, "placed", "StatusOverwritten").await;
    assert!(
        said.iter()
            .any(|m| m.contains("phase") && m.contains("placement") && m.contains("backoffCount")),
        "{said:?}"
    );

    f.restart_controller().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pods(&f, "placed").await, before, "a restart moves nothing");

    f.kill_controller();
    write_status(
        &f,
        "placed",
        json!({"phase": "Failed",
            "placement": {"epoch": honest["epoch"], "assignment": {"worker-0": other}}}),
    )
    .await;
    f.start_controller().await;
    let unverified = f
        .wait_job("placed", "RecordUnverified", WAIT, |j| {
            condition(j, "ReplicaFailure")["reason"] == "RecordUnverified"
        })
        .await;
    let message = condition(&unverified, "ReplicaFailure")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("status"), "{message}");
    wait_event(&f, "placed", "RecordUnverified").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        pods(&f, "placed").await,
        before,
        "the pod on {home_of_pod} runs on, alone"
    );
    // It can still be deleted; what runs is then its member's sweep's.
    f.jobs()
        .delete("placed", &Default::default())
        .await
        .expect("delete accepted");
    let jobs = f.jobs();
    eventually("the unverified job gone", WAIT, async || {
        jobs.get_opt("placed").await.ok()?.is_none().then_some(())
    })
    .await;
}

/// A status removed while no controller runs (the job keeps its finalizer,
/// so the controller once wrote a sealed status): the job is not taken for
/// a new one and placed again beside the pod that runs.
async fn a_removed_status_decides_nothing(ground: Ground) {
    let mut f = start(ground).await;
    f.submit(gpu_job("wiped", &[("worker", 1, 1)], json!({}), "300"))
        .await;
    f.wait_phase("wiped", "Running", WAIT).await;
    let before = pods(&f, "wiped").await;
    f.kill_controller();
    f.jobs()
        .patch_status(
            "wiped",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": null})),
        )
        .await
        .expect("status removed");
    f.start_controller().await;
    f.wait_job("wiped", "RecordUnverified", WAIT, |j| {
        condition(j, "ReplicaFailure")["reason"] == "RecordUnverified"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(pods(&f, "wiped").await, before, "no second copy");
}

/// A member that refuses a job's pod for good (403: its own admission)
/// releases the job's hold there: the job runs on the other member, says
/// why, counts no restart, and another job that needs the whole refusing
/// member gets it. A refusal no cluster would change (422) fails the job.
async fn a_refused_create_releases_its_hold(ground: Ground) {
    let f = start(ground).await;
    let recorders = record_pods(&f).await;
    set_faults(
        &f.clients["member-1"],
        json!({"failRequests": {"verb": "create", "resource": "pods", "count": 1, "code": 403}}),
    )
    .await;
    f.submit(gpu_job("moved", &[("worker", 1, 4)], json!({}), "300"))
        .await;
    let running = f.wait_phase("moved", "Running", WAIT).await;
    assert_eq!(
        running["status"]["backoffCount"], 0,
        "{}",
        running["status"]
    );
    assert_eq!(
        f.pod_names_on("moved", &CLUSTERS)
            .await
            .keys()
            .collect::<Vec<_>>(),
        ["member-2"]
    );
    let said = wait_event(&f, "moved", "CreateRefused").await;
    assert!(said.iter().any(|m| m.contains("member-1")), "{said:?}");
    assert!(
        made(&recorders)
            .iter()
            .all(|(member, _)| *member == "member-2"),
        "no pod of it was ever made on member-1"
    );
    let pinned = gpu_job(
        "pinned",
        &[("worker", 1, 4)],
        json!({"scheduler": {"federation": {"clusterNames": ["member-1"]}}}),
        "1",
    );
    f.submit(pinned).await;
    f.wait_phase("pinned", "Succeeded", WAIT).await;

    set_faults(
        &f.clients["member-1"],
        json!({"failRequests": {"verb": "create", "resource": "pods", "count": 1, "code": 422}}),
    )
    .await;
    let invalid = gpu_job(
        "invalid",
        &[("worker", 1, 1)],
        json!({"scheduler": {"federation": {"clusterNames": ["member-1"]}}}),
        "1",
    );
    f.submit(invalid).await;
    let failed = f.wait_phase("invalid", "Failed", WAIT).await;
    let why = condition(&failed, "Failed");
    assert_eq!(why["reason"], "CreateRefused", "{}", failed["status"]);
    assert!(
        why["message"]
            .as_str()
            .is_some_and(|m| m.contains("member-1") && m.contains("422")),
        "{why}"
    );
}

/// A member that allowed a job's privileged pod, then stops allowing it
/// while the job runs: the pod its replica's restart would need is built,
/// checked against the member's policy as it is now, and not created
/// there; the job leaves the member and, the other member not allowing
/// it either, waits, saying why.
async fn a_pod_is_checked_against_the_members_policy_when_built(ground: Ground) {
    let f = start(ground).await;
    let recorders = record_pods(&f).await;
    let allow = |allowed: bool| json!({"spec": {"podPolicy": {"allowPrivileged": allowed}}});
    f.members()
        .patch(
            "member-1",
            &PatchParams::default(),
            &Patch::Merge(allow(true)),
        )
        .await
        .expect("member-1 allows privileged pods");
    let mut privileged = gpu_job(
        "privileged",
        &[("worker", 1, 1)],
        json!({"scheduler": {"federation": {"clusterNames": ["member-1", "member-2"]}}}),
        "3",
    );
    let worker = &mut privileged["spec"]["replicaSpecs"][0];
    worker["restartPolicy"] = json!("OnFailure");
    worker["template"]["metadata"]["annotations"]["sim.federation.tfjob.io/exit-codes"] =
        json!("1,0");
    worker["template"]["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    // Placement waits for the controller to see the new policy.
    eventually("the controller sees member-1's policy", WAIT, async || {
        let member = f.members().get("member-1").await.ok()?;
        member.spec.pod_policy.allow_privileged.then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.submit(privileged).await;
    f.wait_phase("privileged", "Running", WAIT).await;
    f.members()
        .patch(
            "member-1",
            &PatchParams::default(),
            &Patch::Merge(allow(false)),
        )
        .await
        .expect("member-1 no longer allows privileged pods");
    let waiting = f
        .wait_job("privileged", "left member-1", WAIT, |j| {
            condition(j, "Running")["reason"] == "CreateRefused"
                || condition(j, "Initialized")["reason"] == "WaitingForCapacity"
        })
        .await;
    let said = wait_event(&f, "privileged", "CreateRefused").await;
    assert!(
        said.iter()
            .any(|m| m.contains("member-1") && m.contains("allowPrivileged")),
        "{said:?}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let made = made(&recorders);
    assert_eq!(
        made.iter()
            .map(|(m, p)| format!("{m}/{}", p.name_any()))
            .collect::<Vec<_>>(),
        ["member-1/privileged-worker-0"],
        "only the pod made while member-1 allowed it: {}",
        waiting["status"]
    );
}

/// A controller killed while a finished job's clean-up is under way: the
/// next controller never makes that job's pods again. Status writes on home
/// fail meanwhile, so the end is not yet written when the kill comes.
async fn a_finished_jobs_pods_are_never_made_again(ground: Ground) {
    let mut f = start(ground).await;
    let recorders = record_pods(&f).await;
    let mut done = gpu_job("done", &[("worker", 2, 1)], json!({}), "3");
    done["spec"]["replicaSpecs"][0]["restartPolicy"] = json!("OnFailure");
    done["spec"]["runPolicy"]["cleanUpPolicy"] = json!("all");
    f.submit(done).await;
    f.wait_phase("done", "Running", WAIT).await;
    set_faults(
        &f.clients["home"],
        json!({"failRequests": {"verb": "patch", "resource": "tensorflowtrainingjobs/status",
            "count": 100000, "code": 500}}),
    )
    .await;
    // The master ends, and the old clean-up had time to delete the pods.
    eventually("worker-0 Succeeded", WAIT, async || {
        let all = f.pods_on("done", &CLUSTERS).await;
        all.values()
            .flatten()
            .any(|p| {
                p.name_any() == "done-worker-0"
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            })
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    f.kill_controller();
    let made_before = made(&recorders).len();
    set_faults(
        &f.clients["home"],
        json!({"failRequests": {"verb": "patch", "resource": "tensorflowtrainingjobs/status",
            "count": 0}}),
    )
    .await;
    f.start_controller().await;
    f.wait_phase("done", "Succeeded", WAIT).await;
    eventually("the pods cleaned up", WAIT, async || {
        pods(&f, "done").await.is_empty().then_some(())
    })
    .await;
    let made = made(&recorders);
    assert_eq!(
        made.len(),
        made_before,
        "no pod made after the kill: {:?}",
        made.iter()
            .map(|(m, p)| format!("{m}/{}", p.name_any()))
            .collect::<Vec<_>>()
    );
}

on_both_grounds!(
    a_forged_accepted_spec_builds_no_pod,
    a_forged_status_is_corrected_and_never_runs_a_second_copy,
    a_removed_status_decides_nothing,
    a_refused_create_releases_its_hold,
    a_finished_jobs_pods_are_never_made_again,
    a_pod_is_checked_against_the_members_policy_when_built,
);
