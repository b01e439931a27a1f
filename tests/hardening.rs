//! Hardening (issue 12) end to end, on both grounds: one user's job can
//! never stop the controller for the others, and a job that cannot be run
//! says which field is wrong. One cluster, the controller binary running
//! against it, as in `tests/operator.rs`.

#[macro_use]
mod common;

use std::time::Duration;

use common::operator::*;
use common::sim_kube::{admin_request, set_faults};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, MemberCluster};

/// A one-worker job whose replica spec is `worker` with `change` merged in.
fn job_json(name: &str, change: Value) -> Value {
    let mut worker = replica(
        "worker",
        1,
        &[("pending-seconds", "0.1"), ("run-seconds", "0.5")],
    );
    if let (Some(worker), Some(change)) = (worker.as_object_mut(), change.as_object()) {
        for (key, value) in change {
            worker.insert(key.clone(), value.clone());
        }
    }
    json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name},
        "spec": {"replicaSpecs": [worker]},
    })
}

/// Submits a job as raw JSON: the API server's refusal (its message), or
/// None once stored.
async fn submit_raw(env: &Env, job: Value) -> Option<String> {
    let object: DynamicObject = serde_json::from_value(job).expect("a job object");
    match env.raw_jobs().create(&PostParams::default(), &object).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(status.message),
        Err(e) => panic!(
            "submitting {}: {e}",
            object.metadata.name.unwrap_or_default()
        ),
    }
}

/// The job's Failed condition (reason, message), once it has one.
async fn failed_condition(env: &Env, name: &str) -> (String, String) {
    eventually(&format!("job {name} to be Failed"), WAIT, async || {
        let job = env.raw_jobs().get(name).await.ok()?;
        failed_in(job.data.get("status")?)
    })
    .await
}

/// As `failed_condition`, for a job too deep for kube-rs to decode: its
/// status is read alone from the raw object, the deep spec skipped unread.
async fn deep_job_failed_condition(env: &Env, name: &str) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct StatusOnly {
        status: Option<Value>,
    }
    let url = format!(
        "/apis/batch.tensorstack.dev/v1beta1/namespaces/{}/tensorflowtrainingjobs/{name}",
        env.namespace
    );
    eventually(&format!("job {name} to be Failed"), WAIT, async || {
        let request = http::Request::get(&url).body(Vec::new()).ok()?;
        let text = env.client.request_text(request).await.ok()?;
        failed_in(&serde_json::from_str::<StatusOnly>(&text).ok()?.status?)
    })
    .await
}

/// The Failed condition (reason, message) of a Failed job's status.
fn failed_in(status: &Value) -> Option<(String, String)> {
    if status.get("phase")?.as_str()? != "Failed" {
        return None;
    }
    let failed = status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Failed")?;
    Some((
        failed["reason"].as_str().unwrap_or_default().to_string(),
        failed["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Each job is refused by the API server or fails with InvalidSpec, with a
/// message naming `field`; then a valid job still runs to the end, with the
/// same controller process.
async fn expect_refused_or_invalid(env: &mut Env, cases: Vec<(&str, Value, &str)>) {
    for (name, job, field) in cases {
        match submit_raw(env, job).await {
            Some(refusal) => assert!(
                refusal.contains(field),
                "{name}: the API server's refusal names {field}: {refusal}"
            ),
            None => {
                let (reason, message) = failed_condition(env, name).await;
                assert_eq!(reason, "InvalidSpec", "{name}: {message}");
                assert!(message.contains(field), "{name}: {message:?} names {field}");
            }
        }
    }
    let fine = job(
        "fine",
        json!({"replicaSpecs": [replica("worker", 1, &[("run-seconds", "0.5")])]}),
    );
    env.submit(&fine).await;
    env.wait_phase("fine", JobPhase::Succeeded).await;
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
}

/// A job asking for billions of replicas once made the controller abort on
/// allocation (and every restarted one after it); a million stalled it.
async fn poison_replica_counts_never_stop_the_controller(ground: Ground) {
    let mut env = Setup::on(ground)
        .own_namespace("poison-counts")
        .start()
        .await;
    let field = "spec.replicaSpecs[0].replicas";
    expect_refused_or_invalid(
        &mut env,
        vec![
            (
                "huge",
                job_json("huge", json!({"replicas": 2147483647})),
                field,
            ),
            (
                "million",
                job_json("million", json!({"replicas": 1000000})),
                field,
            ),
        ],
    )
    .await;
}

/// Type errors once read `invalid type: string "two", expected i32` with no
/// field; now the path and what was expected.
async fn type_errors_name_the_field(ground: Ground) {
    let mut env = Setup::on(ground).own_namespace("type-errors").start().await;
    expect_refused_or_invalid(
        &mut env,
        vec![
            (
                "words",
                job_json("words", json!({"replicas": "two"})),
                "spec.replicaSpecs[0].replicas",
            ),
            (
                "listed",
                job_json("listed", json!({"restartPolicy": ["Never"]})),
                "spec.replicaSpecs[0].restartPolicy",
            ),
        ],
    )
    .await;
}

/// A job nested deeper than serde_json's 128 levels (built with one JSON
/// patch of shallow operations, which both API servers accept) once failed
/// every list of jobs: no job was processed any more, restart after restart.
/// Now it is that job's InvalidSpec, and the others run.
async fn a_deeply_nested_job_never_stops_the_controller(ground: Ground) {
    let mut env = Setup::on(ground)
        .own_namespace("deep-nesting")
        .start()
        .await;
    env.kill_controller();
    let shallow = job_json("deep", json!({}));
    assert_eq!(submit_raw(&env, shallow).await, None, "the job is stored");
    deepen(&env, "deep").await;
    let fine = job(
        "fine",
        json!({"replicaSpecs": [replica("worker", 1, &[("run-seconds", "0.2")])]}),
    );
    env.submit(&fine).await;
    env.start_controller().await;
    env.wait_phase("fine", JobPhase::Succeeded).await;
    let (reason, message) = deep_job_failed_condition(&env, "deep").await;
    assert_eq!(reason, "InvalidSpec", "{message}");
    assert!(message.contains("spec.replicaSpecs"), "{message}");
    env.kill_controller();
    env.start_controller().await;
    let again = job(
        "again",
        json!({"replicaSpecs": [replica("worker", 1, &[("run-seconds", "0.2")])]}),
    );
    env.submit(&again).await;
    env.wait_phase("again", JobPhase::Succeeded).await;
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
}

/// Makes the stored job `name` too deep for the controller (and kube-rs)
/// to read: 200 levels of JSON in its template. The API server stores it;
/// its answer is too deep for kube-rs to read.
async fn deepen(env: &Env, name: &str) {
    let mut path = String::from("/spec/replicaSpecs/0/template/deep");
    let mut ops = vec![json!({"op": "add", "path": path, "value": {}})];
    for _ in 0..200 {
        path.push_str("/a");
        ops.push(json!({"op": "add", "path": path, "value": {}}));
    }
    let patch: json_patch::Patch = serde_json::from_value(json!(ops)).expect("a JSON patch");
    let deepened = env
        .raw_jobs()
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await;
    assert!(
        matches!(&deepened, Err(kube::Error::SerdeError(e)) if e.to_string().contains("recursion limit")),
        "{deepened:?}"
    );
}

/// A job admitted (it carries the controller's finalizer) and not placed
/// (paused), then made too deep to read, fails alone and can still be
/// deleted: its finalizer goes, so neither the job nor its namespace is
/// stuck. Once with the controller running, once with it restarted after
/// the edit (no job actor knows the job then).
async fn a_job_made_unreadable_can_still_be_deleted(ground: Ground) {
    let mut env = Setup::on(ground)
        .own_namespace("deep-deletion")
        .start()
        .await;
    // Paused: admitted, never placed (its replicaSpecs may still change).
    let waiting = |name: &str| {
        let mut job = job_json(name, json!({}));
        job["spec"]["runMode"] = json!({"pause": {"enabled": true}});
        job
    };
    for (name, restart) in [("deep-live", false), ("deep-restarted", true)] {
        assert_eq!(submit_raw(&env, waiting(name)).await, None, "{name} stored");
        eventually(&format!("{name} admitted"), WAIT, async || {
            let job = env.raw_jobs().get(name).await.ok()?;
            job.metadata
                .finalizers
                .filter(|f| !f.is_empty())
                .map(|_| ())
        })
        .await;
        if restart {
            env.kill_controller();
        }
        deepen(&env, name).await;
        if restart {
            env.start_controller().await;
        }
        let (reason, message) = deep_job_failed_condition(&env, name).await;
        assert_eq!(reason, "InvalidSpec", "{name}: {message}");
        let deleted = env.raw_jobs().delete(name, &DeleteParams::default()).await;
        assert!(
            matches!(deleted, Ok(_) | Err(kube::Error::SerdeError(_))),
            "{name}: delete accepted: {deleted:?}"
        );
        let url = format!(
            "/apis/batch.tensorstack.dev/v1beta1/namespaces/{}/tensorflowtrainingjobs/{name}",
            env.namespace
        );
        eventually(&format!("{name} gone"), WAIT, async || {
            let request = http::Request::get(&url).body(Vec::new()).ok()?;
            match env.client.request_text(request).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Some(()),
                _ => None,
            }
        })
        .await;
    }
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
}

/// A job made unreadable fails with the machine's own `InvalidSpec`,
/// written as every status is: a refused write is tried again (it was once
/// a status built by hand and written once, lost to one error).
async fn an_unreadable_jobs_status_survives_refused_writes(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("deep-retried")
        .start()
        .await;
    let mut paused = job_json("deep-retried", json!({}));
    paused["spec"]["runMode"] = json!({"pause": {"enabled": true}});
    assert_eq!(submit_raw(&env, paused).await, None, "stored");
    eventually("deep-retried admitted and shown Paused", WAIT, async || {
        let job = env.raw_jobs().get("deep-retried").await.ok()?;
        let admitted = job.metadata.finalizers.is_some_and(|f| !f.is_empty());
        let paused = job.data["status"]["phase"] == "Paused";
        (admitted && paused).then_some(())
    })
    .await;
    set_faults(
        &env.client,
        json!({"failRequests": {"verb": "patch", "resource": "tensorflowtrainingjobs/status",
            "count": 3, "code": 500}}),
    )
    .await;
    deepen(&env, "deep-retried").await;
    let (reason, message) = deep_job_failed_condition(&env, "deep-retried").await;
    assert_eq!(reason, "InvalidSpec", "{message}");
    assert!(message.contains("cannot be read"), "{message}");
    let faults = admin_request(&env.client, hyper::Method::GET, "faults", None).await;
    assert_eq!(
        faults["failRequests"]["count"], 0,
        "the status writes met every injected failure: {faults}"
    );
}

/// A pod annotation `run-seconds: inf` once panicked the simulated kubelet:
/// it is a pod that runs for a very long time, and other pods go on.
async fn absurd_script_times_are_a_long_run(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("absurd-times")
        .start()
        .await;
    let forever = job(
        "forever",
        json!({"replicaSpecs": [replica("worker", 1, &[("pending-seconds", "1e308"), ("run-seconds", "inf")])]}),
    );
    env.submit(&forever).await;
    let fine = job(
        "fine",
        json!({"replicaSpecs": [replica("worker", 1, &[("run-seconds", "0.5")])]}),
    );
    env.submit(&fine).await;
    env.wait_phase("fine", JobPhase::Succeeded).await;
    let pods = env.job_pods("forever").await;
    assert_eq!(
        pods.len(),
        1,
        "the long job's pod exists: {:?}",
        pods.keys()
    );
    let forever = env.job("forever").await;
    assert!(
        !phase_of(&forever).is_some_and(JobPhase::is_terminal),
        "a pod that waits ten years has not ended: {:?}",
        phase_of(&forever)
    );
}

/// A member kubeconfig Secret as a home user with Secret rights could
/// write it, and the MemberCluster naming it.
async fn register(env: &Env, member: &str, namespace: &str, kubeconfig: &str) {
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    let apply = PatchParams::apply("hardening-tests").force();
    namespaces
        .patch(namespace, &apply, &Patch::Apply(&ns))
        .await
        .expect("namespace");
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), namespace);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": member, "labels": {"app.kubernetes.io/managed-by": "tfjob-federator"}},
        "stringData": {"kubeconfig": kubeconfig}});
    secrets
        .patch(member, &apply, &Patch::Apply(&secret))
        .await
        .expect("secret");
    let members: Api<MemberCluster> = Api::all(env.client.clone());
    let object = json!({"apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": member},
        "spec": {"kubeconfigSecretRef": {"name": member, "namespace": namespace}}});
    members
        .patch(member, &apply, &Patch::Apply(&object))
        .await
        .expect("member");
}

/// The member's Ready condition (status, message), once written.
async fn ready_condition(env: &Env, member: &str) -> (String, String) {
    let members: Api<MemberCluster> = Api::all(env.client.clone());
    eventually(
        &format!("member {member} to have a Ready condition"),
        WAIT,
        async || {
            let member = members.get(member).await.ok()?;
            let ready = member
                .status?
                .conditions
                .into_iter()
                .find(|c| c.condition_type == "Ready")?;
            Some((ready.status, ready.message.unwrap_or_default()))
        },
    )
    .await
}

/// A member kubeconfig is written by whoever may write Secrets in the
/// controller's namespace and runs inside the controller: it once could run
/// a command there (`exec`), send a local file as a token (`tokenFile`), be
/// read from any namespace, and have its content echoed when it did not
/// parse. Each is now a member that is not Ready, saying why, and nothing
/// of the Secret shows anywhere.
async fn member_kubeconfigs_cannot_run_commands_read_files_or_leak(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("member-hygiene")
        .start()
        .await;
    let marker = format!("secret-{}", std::process::id());
    let touched = std::env::temp_dir().join(format!("tfjob-federator-exec-{marker}"));
    let config = |user: &str| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1'}}\n\
             users:\n- name: u\n  user:\n{user}contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        )
    };
    let exec = config(&format!(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: touch\n      args: ['{}']\n",
        touched.display()
    ));
    let token_file = config("    tokenFile: /etc/hostname\n");
    let garbage = format!("token: {marker}\n  - [unclosed: {marker}");
    let cases = [
        (
            "hygiene-exec",
            "tfjob-federator",
            exec,
            "exec (runs a command)",
        ),
        (
            "hygiene-token-file",
            "tfjob-federator",
            token_file,
            "tokenFile (reads a local file)",
        ),
        (
            "hygiene-garbage",
            "tfjob-federator",
            garbage,
            "is not a valid kubeconfig",
        ),
        (
            "hygiene-elsewhere",
            env.namespace.as_str(),
            config("    token: abc\n"),
            "must be in the controller's namespace tfjob-federator",
        ),
    ];
    for (member, namespace, kubeconfig, _) in &cases {
        register(&env, member, namespace, kubeconfig).await;
    }
    for (member, _, _, why) in &cases {
        let (status, message) = ready_condition(&env, member).await;
        assert_eq!(status, "False", "{member}: {message}");
        assert!(message.contains(why), "{member}: {message:?} says {why:?}");
        assert!(
            !message.contains(&marker),
            "{member}: the Secret's content shows: {message}"
        );
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !touched.exists(),
        "the exec plugin ran: {} exists",
        touched.display()
    );
    let log = std::fs::read_to_string(env.log_path()).unwrap_or_default();
    assert!(
        !log.contains(&marker),
        "the controller's log shows the Secret's content"
    );
    let members: Api<MemberCluster> = Api::all(env.client.clone());
    for (member, _, _, _) in &cases {
        let _ = members.delete(member, &DeleteParams::default()).await;
    }
}

/// A replica's pod deleted by hand was once re-created silently, no
/// restart counted. Now it counts as an exit (143): a restart under
/// `OnFailure`, the job's failure under `Never`.
async fn a_pod_deleted_by_hand_is_an_exit(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("deleted-by-hand")
        .start()
        .await;
    let long = [("pending-seconds", "0.1"), ("run-seconds", "3600")];
    let restarting = job(
        "restarting",
        json!({"replicaSpecs": [with_policy(replica("worker", 1, &long), "OnFailure")]}),
    );
    let never = job(
        "never",
        json!({"replicaSpecs": [with_policy(replica("worker", 1, &long), "Never")]}),
    );
    env.submit(&restarting).await;
    env.submit(&never).await;
    env.wait_phase("restarting", JobPhase::Running).await;
    env.wait_phase("never", JobPhase::Running).await;
    let first = env.job_pods("restarting").await;
    let first_uid = first.values().next().and_then(|p| p.metadata.uid.clone());
    env.pods()
        .delete("restarting-worker-0", &DeleteParams::default())
        .await
        .expect("delete the pod");
    env.pods()
        .delete("never-worker-0", &DeleteParams::default())
        .await
        .expect("delete the pod");

    let restarted = env
        .wait_job("restarting", "Running again with a restart counted", |j| {
            backoff_count(j) == 1 && phase_of(j) == Some(JobPhase::Running)
        })
        .await;
    assert_eq!(restart_count(&restarted, "worker"), 1);
    eventually("a new pod for the restarted replica", WAIT, async || {
        let pod = env.pods().get_opt("restarting-worker-0").await.ok()??;
        (pod.metadata.uid != first_uid && pod.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;
    let failed = env.wait_phase("never", JobPhase::Failed).await;
    let (status, reason, message) = condition(&failed, "Failed").expect("a Failed condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ReplicaFailed"),
        "{message}"
    );
    assert!(message.contains("was deleted"), "{message}");
    assert_eq!(backoff_count(&failed), 0);
}

/// A user's own pod carrying a job's labels (its uid, the replica, the
/// epoch) under the replica's name was once adopted: the job "succeeded" on
/// the user's image and the user's pod was deleted at clean-up. Only what
/// the controller signed is its own: the pod is a conflict, reported, never
/// adopted nor deleted.
async fn a_users_pod_with_our_labels_is_not_adopted(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("forged-labels")
        .start()
        .await;
    let spec = json!({"runMode": {"pause": {"enabled": true}},
        "replicaSpecs": [replica("worker", 1, &[("pending-seconds", "0.1"), ("run-seconds", "600")])]});
    let uid = env
        .submit(&job("target", spec))
        .await
        .metadata
        .uid
        .expect("a uid");
    env.wait_phase("target", JobPhase::Paused).await;
    let forged: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "target-worker-0", "labels": {
            "app.kubernetes.io/managed-by": "tfjob-federator",
            "federation.tfjob.io/job-name": "target",
            "federation.tfjob.io/job-uid": uid,
            "federation.tfjob.io/replica-type": "worker",
            "federation.tfjob.io/replica-index": "0",
            "federation.tfjob.io/placement-epoch": "0"},
            "annotations": {"sim.federation.tfjob.io/run-seconds": "0.5"}},
        "spec": {"containers": [{"name": "tensorflow", "image": "users-own-image"}]},
    }))
    .expect("a pod");
    let forged = env
        .pods()
        .create(&PostParams::default(), &forged)
        .await
        .expect("the user's pod");
    let merge = Patch::Merge(json!({"spec": {"runMode": {"pause": {"enabled": false}}}}));
    env.raw_jobs()
        .patch("target", &PatchParams::default(), &merge)
        .await
        .expect("resume");
    let refused = eventually("the conflict to be reported", WAIT, async || {
        let job = env.job("target").await;
        let (status, reason, message) = condition(&job, "Initialized")?;
        (reason == "ObjectNameTaken").then_some((status, message))
    })
    .await;
    assert_eq!(refused.0, "False", "{}", refused.1);
    assert!(refused.1.contains("target-worker-0"), "{}", refused.1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let job = env.job("target").await;
    assert!(
        !phase_of(&job).is_some_and(JobPhase::is_terminal),
        "the job did not end on the user's pod: {:?}",
        phase_of(&job)
    );
    let still = env
        .pods()
        .get("target-worker-0")
        .await
        .expect("the user's pod is still there");
    assert_eq!(still.metadata.uid, forged.metadata.uid, "never deleted");
    // At once: a graceful deletion's length is the cluster's, not ours.
    env.pods()
        .delete("target-worker-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("the user removes it");
    env.wait_job("target", "Running on its own pod", |j| {
        phase_of(j) == Some(JobPhase::Running)
    })
    .await;
    let own = env
        .pods()
        .get("target-worker-0")
        .await
        .expect("the replica's pod");
    assert_ne!(own.metadata.uid, forged.metadata.uid);
    assert!(
        own.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("federation.tfjob.io/signature"),
        "signed"
    );
}

on_both_grounds!(
    a_users_pod_with_our_labels_is_not_adopted,
    a_pod_deleted_by_hand_is_an_exit,
    member_kubeconfigs_cannot_run_commands_read_files_or_leak,
    poison_replica_counts_never_stop_the_controller,
    type_errors_name_the_field,
    absurd_script_times_are_a_long_run,
    a_deeply_nested_job_never_stops_the_controller,
    a_job_made_unreadable_can_still_be_deleted,
    an_unreadable_jobs_status_survives_refused_writes,
);
