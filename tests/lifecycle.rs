//! The job lifecycle contract (issue 11) end to end, on both grounds: pause
//! and resume, the `activeDeadlineSeconds` clock, the debug toggle, edits of
//! `replicaSpecs` after the start, replica failure conditions, restart
//! policy `Always`, and objects named like a replica that the controller
//! does not own. One cluster, the controller binary running against it, as
//! in `tests/operator.rs`; the tests assert only on what the API shows: job
//! status, pods, services and Events.
//!
//! Waiting for capacity: with no MemberCluster the controller is a plain
//! single-cluster operator (every replica's pod is created at once and the
//! cluster's scheduler queues it), so a job never waits *before* its pods
//! exist. The scenarios about waiting for capacity register one
//! MemberCluster that can never be connected (its kubeconfig Secret does
//! not exist, see [`capacity_gate`]): placement is then decided by the
//! controller, home is the only eligible cluster, and a job that does not
//! fit there waits with `Initialized` False, reason `WaitingForCapacity`,
//! before any pod of it exists.
//!
//! Checks of the status' shape (conditions, counts, `status.startTime`) are
//! collected ([`Findings`]) and reported together at the end, so a run shows
//! every departure from the contract; what the rest of a scenario depends on
//! is asserted at once.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::operator::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, MemberCluster, TensorFlowTrainingJob};

/// Quick pods: bound → Running in 0.1 s.
const PENDING: (&str, &str) = ("pending-seconds", "0.1");
/// Pods that pend long enough for `Resuming` to be written before `Running`.
const SLOW_START: (&str, &str) = ("pending-seconds", "0.4");
/// Pods that run until deleted.
const FOREVER: (&str, &str) = ("run-seconds", "3600");

const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const EPOCH_LABEL: &str = "federation.tfjob.io/placement-epoch";

fn run(seconds: &'static str) -> (&'static str, &'static str) {
    ("run-seconds", seconds)
}

fn exits(codes: &'static str) -> (&'static str, &'static str) {
    ("exit-codes", codes)
}

fn strings(items: &[&str]) -> Option<Vec<String>> {
    Some(items.iter().map(|s| s.to_string()).collect())
}

// ---------------------------------------------------------------- findings

/// Departures from the contract found so far; each is printed when found,
/// and `finish` fails the test with all of them.
struct Findings {
    test: &'static str,
    problems: Vec<String>,
}

impl Findings {
    fn new(test: &'static str) -> Findings {
        Findings {
            test,
            problems: Vec::new(),
        }
    }

    fn check(&mut self, ok: bool, problem: impl Into<String>) {
        if !ok {
            let problem = problem.into();
            eprintln!("[{}] contract departure: {problem}", self.test);
            self.problems.push(problem);
        }
    }

    fn finish(self) {
        assert!(
            self.problems.is_empty(),
            "{}: {} departure(s) from the lifecycle contract:\n- {}",
            self.test,
            self.problems.len(),
            self.problems.join("\n- ")
        );
    }
}

// ---------------------------------------------------------------- helpers

/// Polls `check` until it returns `Some`, or `None` after `limit`.
async fn soon<T>(limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks `check` every 100 ms for `span`; fails the test, saying `what`,
/// the first time it does not hold.
async fn holds_for(span: Duration, what: &str, mut check: impl AsyncFnMut() -> Result<(), String>) {
    let end = Instant::now() + span;
    loop {
        if let Err(why) = check().await {
            panic!("expected {what} for {span:?}, but: {why}");
        }
        if Instant::now() >= end {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn merge_spec(env: &Env, name: &str, spec: Value) {
    env.jobs()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch the spec of {name}: {e}"));
}

async fn set_pause(env: &Env, name: &str, paused: bool) {
    merge_spec(
        env,
        name,
        json!({"runMode": {"pause": {"enabled": paused}}}),
    )
    .await;
}

async fn set_debug(env: &Env, name: &str, debug: bool) {
    merge_spec(env, name, json!({"runMode": {"debug": {"enabled": debug}}})).await;
}

/// The job's status as stored (fields the typed status may not know, such
/// as `startTime`, included).
async fn raw_status(env: &Env, name: &str) -> Value {
    let jobs = env.raw_jobs();
    let job = jobs
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get job {name}: {e}"));
    job.data.get("status").cloned().unwrap_or(Value::Null)
}

/// `status.startTime`, when present and a valid RFC 3339 time.
async fn start_time(env: &Env, name: &str) -> Option<jiff::Timestamp> {
    raw_status(env, name)
        .await
        .get("startTime")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok())
}

fn seconds_since(t: jiff::Timestamp) -> f64 {
    jiff::Timestamp::now().duration_since(t).as_secs_f64()
}

fn created_at(job: &TensorFlowTrainingJob) -> jiff::Timestamp {
    job.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .expect("a creationTimestamp")
}

fn phase_name(job: &TensorFlowTrainingJob) -> String {
    phase_of(job).map_or("(none)".into(), |p| p.as_str().to_string())
}

fn uid_of(object: &impl kube::Resource) -> String {
    object.meta().uid.clone().expect("a uid")
}

fn uids(pods: &BTreeMap<String, Pod>) -> BTreeMap<String, String> {
    pods.iter().map(|(n, p)| (n.clone(), uid_of(p))).collect()
}

fn epoch_label(pod: &Pod) -> Option<u64> {
    pod.labels().get(EPOCH_LABEL)?.parse().ok()
}

fn max_epoch(pods: &BTreeMap<String, Pod>) -> Option<u64> {
    pods.values().filter_map(epoch_label).max()
}

fn min_epoch(pods: &BTreeMap<String, Pod>) -> Option<u64> {
    pods.values().filter_map(epoch_label).min()
}

/// The command and args of a pod's `tensorflow` container.
fn command_of(pod: &Pod) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let c = main_container(pod);
    (c.command.clone(), c.args.clone())
}

/// Waits until the job's pods are exactly `names`, none of them one of
/// `old` (by uid), and `accept` holds for them.
async fn wait_new_pods(
    env: &Env,
    job: &str,
    names: &[&str],
    old: &BTreeMap<String, String>,
    what: &str,
    limit: Duration,
    accept: impl Fn(&BTreeMap<String, Pod>) -> bool,
) -> BTreeMap<String, Pod> {
    let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    expected.sort();
    let mut last = BTreeMap::new();
    let found = soon(limit, async || {
        let pods = env.job_pods(job).await;
        last = pods.clone();
        let fresh = pods
            .values()
            .all(|p| !old.values().any(|u| Some(u) == p.metadata.uid.as_ref()));
        (pods.keys().cloned().collect::<Vec<_>>() == expected && fresh && accept(&pods))
            .then_some(pods)
    })
    .await;
    if let Some(pods) = found {
        return pods;
    }
    let status = env.job(job).await;
    let seen: Vec<String> = last
        .iter()
        .map(|(n, p)| {
            let (command, args) = command_of(p);
            format!(
                "{n} uid {} (old: {}) command {command:?} args {args:?}",
                uid_of(p),
                old.get(n).map(String::as_str).unwrap_or("-"),
            )
        })
        .collect();
    panic!(
        "job {job}: {what} within {limit:?}; the job is {} and its pods are:\n  {}",
        phase_name(&status),
        seen.join("\n  ")
    )
}

/// Fails unless the job has no pods and no services for `span`.
async fn no_pods_or_services_for(env: &Env, job: &str, span: Duration, what: &str) {
    holds_for(span, what, async || {
        let pods: Vec<String> = env.job_pods(job).await.into_keys().collect();
        let services: Vec<String> = env.job_services(job).await.into_keys().collect();
        if pods.is_empty() && services.is_empty() {
            Ok(())
        } else {
            Err(format!("pods {pods:?}, services {services:?}"))
        }
    })
    .await;
}

/// Waits for the job to be Failed; fails the test naming `why` otherwise.
async fn wait_failed(env: &Env, name: &str, limit: Duration, why: &str) -> TensorFlowTrainingJob {
    let mut last = None;
    let failed = soon(limit, async || {
        let job = env.jobs().get_opt(name).await.ok().flatten()?;
        let done = phase_of(&job) == Some(JobPhase::Failed);
        last = Some(job.clone());
        done.then_some(job)
    })
    .await;
    failed.unwrap_or_else(|| {
        panic!(
            "{why}: job {name} not Failed within {limit:?}; status: {}",
            last.map(|j| serde_json::to_string(&j.status).unwrap_or_default())
                .unwrap_or_default()
        )
    })
}

/// An Event about the object of `uid` with `reason`, within `limit`.
async fn event_soon(env: &Env, uid: &str, reason: &str, limit: Duration) -> Option<Event> {
    soon(limit, async || {
        env.events_about(uid)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
    })
    .await
}

type Condition = (String, String, String);

/// Waits up to `limit` for the job's condition `kind` to satisfy `want`;
/// Err with the condition last seen.
async fn condition_soon(
    env: &Env,
    name: &str,
    kind: &str,
    limit: Duration,
    want: impl Fn(&Condition) -> bool,
) -> Result<(), Option<Condition>> {
    let mut last = None;
    let found = soon(limit, async || {
        let job = env.job(name).await;
        last = condition(&job, kind);
        last.as_ref().is_some_and(&want).then_some(())
    })
    .await;
    found.ok_or(last)
}

fn reasons(events: &[Event]) -> Vec<String> {
    events.iter().filter_map(|e| e.reason.clone()).collect()
}

/// A replica spec whose pods ask for `gpus` nvidia.com/gpu.
fn with_gpus(mut replica: Value, gpus: u32) -> Value {
    let resources = &mut replica["template"]["spec"]["containers"][0]["resources"];
    resources["requests"]["nvidia.com/gpu"] = json!(gpus.to_string());
    resources["limits"] = json!({"nvidia.com/gpu": gpus.to_string()});
    replica
}

// ---------------------------------------------------------------- the capacity gate

/// A MemberCluster that can never be connected (its kubeconfig Secret does
/// not exist). While it is registered the controller places jobs itself, on
/// home only (the member is not Ready), against home's free capacity: a job
/// that does not fit waits before any pod of it exists. Deleted when
/// dropped (on the real ground; a simulated cluster goes with its test).
struct CapacityGate {
    name: String,
    /// The admin kubeconfig of the shared real cluster.
    real: Option<PathBuf>,
}

impl Drop for CapacityGate {
    fn drop(&mut self) {
        let Some(kubeconfig) = &self.real else {
            return;
        };
        let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
        let _ = std::process::Command::new(kubectl)
            .args([
                "delete",
                "memberclusters.federation.tfjob.io",
                &self.name,
                "--ignore-not-found",
                "--wait=false",
                "--request-timeout=10s",
            ])
            .env("KUBECONFIG", kubeconfig)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

async fn capacity_gate(env: &Env, ground: Ground) -> CapacityGate {
    let name = "unreachable-gate".to_string();
    let gate = CapacityGate {
        name: name.clone(),
        real: (ground == Ground::Real).then(|| env.kubeconfig("home")),
    };
    let members: Api<MemberCluster> = Api::all(env.client.clone());
    let member: MemberCluster = serde_json::from_value(json!({
        "apiVersion": "federation.tfjob.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name},
        "spec": {"kubeconfigSecretRef": {"name": "no-such-kubeconfig", "namespace": "tfjob-federator"}},
    }))
    .expect("a MemberCluster");
    members
        .patch(
            &name,
            &PatchParams::apply("lifecycle-tests").force(),
            &Patch::Apply(&member),
        )
        .await
        .unwrap_or_else(|e| panic!("register MemberCluster {name}: {e}"));
    // The controller saw it once it wrote that it is not Ready.
    eventually(
        &format!("the controller to report MemberCluster {name} not Ready"),
        WAIT,
        async || {
            let member = members.get_opt(&name).await.ok()??;
            member
                .status?
                .conditions
                .iter()
                .any(|c| c.condition_type == "Ready" && c.status == "False")
                .then_some(())
        },
    )
    .await;
    gate
}

/// A job taking every GPU of the cluster (4 nodes × 4 GPUs on both
/// grounds), running until deleted; waits until it runs.
async fn submit_blocker(env: &Env, name: &str) {
    let spec = json!({"replicaSpecs": [with_gpus(replica("worker", 4, &[PENDING, FOREVER]), 4)]});
    env.submit(&job(name, spec)).await;
    env.wait_phase(name, JobPhase::Running).await;
}

/// Deletes the job and waits until it and its pods are gone.
async fn delete_job(env: &Env, name: &str) {
    env.jobs()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete job {name}: {e}"));
    eventually(
        &format!("job {name} and its pods to be gone"),
        WAIT,
        async || {
            let gone = env.jobs().get_opt(name).await.ok()?.is_none();
            (gone && env.job_pods(name).await.is_empty()).then_some(())
        },
    )
    .await;
}

/// Waits until the job waits for capacity, before any pod of it exists.
async fn wait_waiting_for_capacity(env: &Env, name: &str) -> TensorFlowTrainingJob {
    let waiting = env
        .wait_job(name, "waiting for capacity", |j| {
            condition(j, "Initialized")
                .is_some_and(|(s, r, _)| s == "False" && r == "WaitingForCapacity")
        })
        .await;
    assert!(
        env.job_pods(name).await.is_empty(),
        "a job waiting for capacity has no pods"
    );
    waiting
}

// ---------------------------------------------------------------- 1. pause and resume

async fn pause_and_resume_a_running_job(ground: Ground) {
    let mut findings = Findings::new("pause_and_resume_a_running_job");
    let env = Setup::on(ground)
        .own_namespace("pause-resume")
        .start()
        .await;
    let jobs = Recorder::start(env.jobs()).await;
    let spec = json!({
        "runMode": {"pause": {"enabled": false, "resumeSpecs": [
            {"type": "worker", "command": ["python", "resume.py"], "args": ["--from", "ckpt"]},
        ]}},
        "replicaSpecs": [
            replica("chief", 1, &[SLOW_START, FOREVER]),
            replica("worker", 2, &[SLOW_START, FOREVER]),
        ],
    });
    let uid = uid_of(&env.submit(&job("nap", spec)).await);
    let names = ["nap-chief-0", "nap-worker-0", "nap-worker-1"];
    env.wait_phase("nap", JobPhase::Running).await;
    let first = uids(&env.wait_pod_names("nap", &names).await);
    assert_eq!(env.job_services("nap").await.len(), 3);

    set_pause(&env, "nap", true).await;
    let paused = env.wait_phase("nap", JobPhase::Paused).await;
    env.wait_pod_names("nap", &[]).await;
    eventually("the services to be deleted", WAIT, async || {
        env.job_services("nap").await.is_empty().then_some(())
    })
    .await;
    no_pods_or_services_for(
        &env,
        "nap",
        Duration::from_secs(2),
        "no pods or services while paused",
    )
    .await;
    let paused_now = env.job("nap").await;
    assert_eq!(
        phase_of(&paused_now),
        Some(JobPhase::Paused),
        "still Paused"
    );
    findings.check(
        condition_status(&paused, "Paused") == "True",
        format!(
            "paused: condition Paused is {:?}, want True",
            condition(&paused_now, "Paused")
        ),
    );
    findings.check(
        condition(&paused_now, "Running").is_some_and(|(s, r, _)| s == "False" && r == "Paused"),
        format!(
            "paused: condition Running is {:?}, want False with reason Paused",
            condition(&paused_now, "Running")
        ),
    );
    findings.check(
        backoff_count(&paused_now) == 0,
        format!(
            "paused: backoffCount {}, want 0",
            backoff_count(&paused_now)
        ),
    );

    // resumeSpecs may be edited at any time.
    merge_spec(
        &env,
        "nap",
        json!({"runMode": {"pause": {"resumeSpecs": [
            {"type": "worker", "command": ["python", "resume.py"], "args": ["--from", "ckpt-2"]},
        ]}}}),
    )
    .await;
    holds_for(
        Duration::from_millis(1500),
        "the job to stay Paused after its resumeSpecs were edited",
        async || {
            let job = env.job("nap").await;
            if phase_of(&job) == Some(JobPhase::Paused)
                && condition_status(&job, "Failed") != "True"
            {
                Ok(())
            } else {
                Err(format!(
                    "phase {}, condition Failed {:?}",
                    phase_name(&job),
                    condition(&job, "Failed")
                ))
            }
        },
    )
    .await;
    let invalid = env
        .events_about(&uid)
        .await
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("InvalidSpec"));
    findings.check(
        !invalid,
        "editing resumeSpecs while paused recorded an InvalidSpec Event",
    );

    set_pause(&env, "nap", false).await;
    let running = env.wait_phase("nap", JobPhase::Running).await;
    let seen = eventually(
        "the watch to see Running after the resume",
        WAIT,
        async || {
            let seen = phases(&jobs, "nap");
            (seen.last() == Some(&JobPhase::Running) && seen.contains(&JobPhase::Paused))
                .then_some(seen)
        },
    )
    .await;
    let after_pause: Vec<JobPhase> = seen
        .iter()
        .skip_while(|p| **p != JobPhase::Paused)
        .copied()
        .collect();
    assert_eq!(
        after_pause,
        [JobPhase::Paused, JobPhase::Resuming, JobPhase::Running],
        "the phases from the pause on (all: {seen:?})"
    );
    let pods = wait_new_pods(
        &env,
        "nap",
        &names,
        &first,
        "new pods after the resume",
        WAIT,
        |_| true,
    )
    .await;
    for worker in ["nap-worker-0", "nap-worker-1"] {
        assert_eq!(
            command_of(&pods[worker]),
            (
                strings(&["python", "resume.py"]),
                strings(&["--from", "ckpt-2"])
            ),
            "{worker} runs the resumeSpecs as edited while paused"
        );
    }
    assert_eq!(
        command_of(&pods["nap-chief-0"]),
        (
            strings(&["python", "train.py"]),
            strings(&["--epochs", "1"])
        ),
        "the chief has no resumeSpecs: its template's command"
    );
    findings.check(
        condition_status(&running, "Paused") == "False",
        format!(
            "resumed: condition Paused is {:?}, want False",
            condition(&running, "Paused")
        ),
    );
    findings.check(
        condition_status(&running, "Running") == "True",
        format!(
            "resumed: condition Running is {:?}",
            condition(&running, "Running")
        ),
    );
    findings.check(
        backoff_count(&running) == 0
            && restart_count(&running, "worker") == 0
            && restart_count(&running, "chief") == 0,
        format!(
            "resumed: backoffCount {} and restartCounts (chief {}, worker {}), want 0",
            backoff_count(&running),
            restart_count(&running, "chief"),
            restart_count(&running, "worker")
        ),
    );
    findings.finish();
}

// ---------------------------------------------------------------- 2. paused while waiting

async fn paused_while_waiting_for_capacity_gets_no_pods(ground: Ground) {
    let mut findings = Findings::new("paused_while_waiting_for_capacity_gets_no_pods");
    let env = Setup::on(ground)
        .own_namespace("paused-waiting")
        .start()
        .await;
    let _gate = capacity_gate(&env, ground).await;
    submit_blocker(&env, "blocker").await;
    let spec = json!({"replicaSpecs": [with_gpus(replica("worker", 1, &[PENDING, FOREVER]), 4)]});
    env.submit(&job("patient", spec)).await;
    wait_waiting_for_capacity(&env, "patient").await;

    set_pause(&env, "patient", true).await;
    env.wait_phase("patient", JobPhase::Paused).await;
    let limit = Duration::from_secs(3);
    if let Err(seen) = condition_soon(&env, "patient", "Paused", limit, |c| c.0 == "True").await {
        findings.check(
            false,
            format!("paused: condition Paused is {seen:?}, want True"),
        );
    }
    let running_paused = |c: &Condition| c.0 == "False" && c.1 == "Paused";
    if let Err(seen) = condition_soon(&env, "patient", "Running", limit, running_paused).await {
        findings.check(
            false,
            format!("paused: condition Running is {seen:?}, want False with reason Paused"),
        );
    }

    // The capacity frees while the job is paused: it must not take it.
    delete_job(&env, "blocker").await;
    holds_for(
        Duration::from_secs(3),
        "a paused job to get no pods when capacity frees",
        async || {
            let pods: Vec<String> = env.job_pods("patient").await.into_keys().collect();
            let job = env.job("patient").await;
            if pods.is_empty() && phase_of(&job) == Some(JobPhase::Paused) {
                Ok(())
            } else {
                Err(format!("pods {pods:?}, phase {}", phase_name(&job)))
            }
        },
    )
    .await;
    assert!(
        env.job_services("patient").await.is_empty(),
        "no services while paused"
    );

    set_pause(&env, "patient", false).await;
    let running = env.wait_phase("patient", JobPhase::Running).await;
    env.wait_pod_names("patient", &["patient-worker-0"]).await;
    findings.check(
        condition_status(&running, "Initialized") == "True",
        format!(
            "resumed: condition Initialized is {:?}",
            condition(&running, "Initialized")
        ),
    );
    findings.check(
        backoff_count(&running) == 0,
        format!("resumed: backoffCount {}, want 0", backoff_count(&running)),
    );
    findings.finish();
}

// ---------------------------------------------------------------- 3. deadline from the start

async fn deadline_counts_from_start_not_creation(ground: Ground) {
    const DEADLINE: u64 = 5;
    let mut findings = Findings::new("deadline_counts_from_start_not_creation");
    let env = Setup::on(ground)
        .own_namespace("deadline-start")
        .start()
        .await;
    let _gate = capacity_gate(&env, ground).await;
    submit_blocker(&env, "blocker").await;
    let spec = json!({
        "runPolicy": {"activeDeadlineSeconds": DEADLINE},
        "replicaSpecs": [with_gpus(replica("worker", 1, &[PENDING, FOREVER]), 4)],
    });
    let created = created_at(&env.submit(&job("late", spec)).await);
    wait_waiting_for_capacity(&env, "late").await;
    // It waits longer than its deadline: waiting does not count.
    let waited = Duration::from_secs_f64((DEADLINE as f64 + 1.5 - seconds_since(created)).max(0.0));
    holds_for(
        waited,
        "a job waiting for capacity not to fail on its deadline",
        async || {
            let job = env.job("late").await;
            if phase_of(&job) == Some(JobPhase::Failed) {
                Err(format!(
                    "it failed {:.1}s after its creation: {:?}",
                    seconds_since(created),
                    condition(&job, "Failed")
                ))
            } else {
                Ok(())
            }
        },
    )
    .await;
    findings.check(
        start_time(&env, "late").await.is_none(),
        "status.startTime is set while the job waits for capacity (no pod exists)",
    );

    let freed = jiff::Timestamp::now();
    delete_job(&env, "blocker").await;
    env.wait_phase("late", JobPhase::Running).await;
    let running_seen = jiff::Timestamp::now();
    let started = start_time(&env, "late").await;
    findings.check(started.is_some(), "no status.startTime once the job runs");
    if let Some(started) = started {
        findings.check(
            started.as_second() >= freed.as_second() - 1,
            format!("status.startTime {started} is before the capacity freed ({freed})"),
        );
    }
    // Not right after it starts, nor before a whole deadline from its start.
    let origin = started.unwrap_or(running_seen);
    let not_before =
        Duration::from_secs_f64((DEADLINE as f64 - 1.2 - seconds_since(origin)).max(0.0));
    holds_for(
        not_before,
        "the job not to fail before a whole deadline from its start",
        async || {
            let job = env.job("late").await;
            if phase_of(&job) == Some(JobPhase::Failed) {
                Err(format!("Failed: {:?}", condition(&job, "Failed")))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let failed = wait_failed(
        &env,
        "late",
        Duration::from_secs(DEADLINE + 15),
        "the deadline counted from the start must fire",
    )
    .await;
    let after = seconds_since(origin);
    let (_, reason, message) = condition(&failed, "Failed").expect("a Failed condition");
    assert_eq!(reason, "DeadlineExceeded", "{message}");
    assert!(
        after >= DEADLINE as f64 - 1.0 && after <= DEADLINE as f64 + 6.0,
        "failed {after:.1}s after its start ({origin}), want about {DEADLINE}s"
    );
    env.wait_pod_names("late", &[]).await;
    findings.finish();
}

// ---------------------------------------------------------------- 4. the clock stops while paused

async fn deadline_clock_stops_during_a_pause(ground: Ground) {
    const DEADLINE: u64 = 4;
    let mut findings = Findings::new("deadline_clock_stops_during_a_pause");
    let env = Setup::on(ground)
        .own_namespace("deadline-pause")
        .start()
        .await;
    let spec = json!({
        "runPolicy": {"activeDeadlineSeconds": DEADLINE},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, FOREVER]),
            replica("worker", 1, &[PENDING, FOREVER]),
        ],
    });
    env.submit(&job("sleepy", spec)).await;
    env.wait_phase("sleepy", JobPhase::Running).await;
    let first_start = start_time(&env, "sleepy").await;
    findings.check(first_start.is_some(), "no status.startTime while Running");
    tokio::time::sleep(Duration::from_secs(1)).await;

    set_pause(&env, "sleepy", true).await;
    env.wait_phase("sleepy", JobPhase::Paused).await;
    env.wait_pod_names("sleepy", &[]).await;
    // Paused longer than the whole deadline (which thus expires during the
    // pause, counted from creation): the job stays Paused.
    holds_for(
        Duration::from_secs(DEADLINE + 2),
        "a paused job to stay Paused past its deadline",
        async || {
            let job = env.job("sleepy").await;
            if phase_of(&job) == Some(JobPhase::Paused) {
                Ok(())
            } else {
                Err(format!(
                    "phase {}, Failed {:?}",
                    phase_name(&job),
                    condition(&job, "Failed")
                ))
            }
        },
    )
    .await;
    findings.check(
        start_time(&env, "sleepy").await.is_none(),
        "status.startTime is kept while paused (want it removed)",
    );

    let resumed = jiff::Timestamp::now();
    set_pause(&env, "sleepy", false).await;
    env.wait_phase("sleepy", JobPhase::Running).await;
    let second_start = start_time(&env, "sleepy").await;
    findings.check(
        second_start.is_some(),
        "no status.startTime after the resume",
    );
    if let Some(second) = second_start {
        findings.check(
            second.as_second() >= resumed.as_second() - 1,
            format!("status.startTime {second} is from before the resume ({resumed})"),
        );
    }
    // A new span with the full deadline: not before it.
    let not_before =
        Duration::from_secs_f64((DEADLINE as f64 - 1.5 - seconds_since(resumed)).max(0.0));
    holds_for(
        not_before,
        "the job not to fail before a whole deadline after the resume",
        async || {
            let job = env.job("sleepy").await;
            if phase_of(&job) == Some(JobPhase::Failed) {
                Err(format!(
                    "Failed {:.1}s after the resume: {:?}",
                    seconds_since(resumed),
                    condition(&job, "Failed")
                ))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let failed = wait_failed(
        &env,
        "sleepy",
        Duration::from_secs(DEADLINE + 15),
        "after a resume the deadline runs again from the new start",
    )
    .await;
    let after = seconds_since(resumed);
    let (_, reason, message) = condition(&failed, "Failed").expect("a Failed condition");
    assert_eq!(reason, "DeadlineExceeded", "{message}");
    assert!(
        after >= DEADLINE as f64 - 1.5 && after <= DEADLINE as f64 + 8.0,
        "failed {after:.1}s after the resume, want about {DEADLINE}s"
    );
    env.wait_pod_names("sleepy", &[]).await;
    findings.finish();
}

// ---------------------------------------------------------------- 5. a deadline passed while no controller ran

async fn deadline_that_passed_without_a_controller_fires_at_once(ground: Ground) {
    const DEADLINE: u64 = 3;
    let mut findings = Findings::new("deadline_that_passed_without_a_controller_fires_at_once");
    let mut env = Setup::on(ground)
        .own_namespace("deadline-offline")
        .start()
        .await;
    let spec = json!({
        "runPolicy": {"activeDeadlineSeconds": DEADLINE},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, FOREVER]),
            replica("worker", 1, &[PENDING, FOREVER]),
        ],
    });
    env.submit(&job("orphan", spec)).await;
    env.wait_phase("orphan", JobPhase::Running).await;
    let running_seen = jiff::Timestamp::now();
    let started = start_time(&env, "orphan").await;
    findings.check(started.is_some(), "no status.startTime while Running");
    env.kill_controller();
    let origin = started.unwrap_or(running_seen);
    let past = Duration::from_secs_f64((DEADLINE as f64 + 2.0 - seconds_since(origin)).max(0.0));
    tokio::time::sleep(past).await;
    assert_eq!(
        phase_of(&env.job("orphan").await),
        Some(JobPhase::Running),
        "nothing changes the job while no controller runs"
    );

    let restarted = Instant::now();
    env.start_controller().await;
    let failed = wait_failed(
        &env,
        "orphan",
        WAIT,
        "a deadline that passed while no controller ran must fire",
    )
    .await;
    let took = restarted.elapsed();
    let (_, reason, message) = condition(&failed, "Failed").expect("a Failed condition");
    assert_eq!(reason, "DeadlineExceeded", "{message}");
    assert!(
        took <= Duration::from_secs(10),
        "it failed {took:?} after the controller started, want at once"
    );
    env.wait_pod_names("orphan", &[]).await;
    findings.finish();
}

// ---------------------------------------------------------------- 6. the debug toggle

async fn debug_toggle_on_a_running_job(ground: Ground) {
    let mut findings = Findings::new("debug_toggle_on_a_running_job");
    let env = Setup::on(ground)
        .own_namespace("debug-toggle")
        .start()
        .await;
    // The chief's run is long enough for the toggles to land while it runs,
    // short enough that the last training chief ends the job.
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("8")]),
        replica("worker", 2, &[PENDING, FOREVER]),
    ]});
    env.submit(&job("flip", spec)).await;
    let names = ["flip-chief-0", "flip-worker-0", "flip-worker-1"];
    env.wait_phase("flip", JobPhase::Running).await;
    let training = env.wait_pod_names("flip", &names).await;
    let training_uids = uids(&training);

    set_debug(&env, "flip", true).await;
    let debug = wait_new_pods(
        &env,
        "flip",
        &names,
        &training_uids,
        "debug pods (new uids, `sleep inf`) replacing the training pods",
        Duration::from_secs(15),
        |pods| {
            pods.values()
                .all(|p| command_of(p) == (strings(&["sleep", "inf"]), None))
        },
    )
    .await;
    findings.check(
        min_epoch(&debug) > max_epoch(&training),
        format!(
            "debug pods' {EPOCH_LABEL} {:?} is not above the training pods' {:?}",
            min_epoch(&debug),
            max_epoch(&training)
        ),
    );
    let job = env.job("flip").await;
    assert!(
        !phase_of(&job).is_some_and(JobPhase::is_terminal),
        "the job ended when debug was enabled: {}",
        phase_name(&job)
    );
    findings.check(
        backoff_count(&job) == 0
            && restart_count(&job, "chief") == 0
            && restart_count(&job, "worker") == 0,
        format!(
            "debug on: backoffCount {}, restartCount chief {} worker {}, want 0",
            backoff_count(&job),
            restart_count(&job, "chief"),
            restart_count(&job, "worker")
        ),
    );

    set_debug(&env, "flip", false).await;
    let debug_uids = uids(&debug);
    let again = wait_new_pods(
        &env,
        "flip",
        &names,
        &debug_uids,
        "training pods (new uids, the template's command) replacing the debug pods",
        Duration::from_secs(15),
        |pods| {
            pods.values().all(|p| {
                command_of(p)
                    == (
                        strings(&["python", "train.py"]),
                        strings(&["--epochs", "1"]),
                    )
            })
        },
    )
    .await;
    findings.check(
        min_epoch(&again) > max_epoch(&debug),
        format!(
            "training pods' {EPOCH_LABEL} {:?} is not above the debug pods' {:?}",
            min_epoch(&again),
            max_epoch(&debug)
        ),
    );
    let job = env.job("flip").await;
    findings.check(
        backoff_count(&job) == 0
            && restart_count(&job, "chief") == 0
            && restart_count(&job, "worker") == 0,
        format!(
            "debug off: backoffCount {}, restartCount chief {} worker {}, want 0",
            backoff_count(&job),
            restart_count(&job, "chief"),
            restart_count(&job, "worker")
        ),
    );
    // The job then ends like any job: its chief succeeds.
    let done = env.wait_phase("flip", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "Completed"), "True");
    findings.check(
        backoff_count(&done) == 0,
        format!("succeeded: backoffCount {}, want 0", backoff_count(&done)),
    );
    findings.finish();
}

/// `config/examples/gang-debug-tensorboard.yaml` says: "Set
/// runMode.debug.enabled to false to train". Its job, as shipped (pods
/// scripted to run 3 s), starts in debug mode; switching debug off must give
/// training pods, and the job then ends as training jobs do.
async fn the_gang_debug_example_trains_once_debug_is_off(ground: Ground) {
    let mut findings = Findings::new("the_gang_debug_example_trains_once_debug_is_off");
    let env = Setup::on(ground)
        .own_namespace("debug-example")
        .start()
        .await;
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("config/examples/gang-debug-tensorboard.yaml"),
    )
    .expect("read the example");
    assert!(
        text.contains("Set\n# runMode.debug.enabled to false to train"),
        "the example still documents the debug toggle"
    );
    let mut example: Value = serde_yaml::from_str(&text).expect("YAML");
    for spec in example["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs")
    {
        spec["template"]["metadata"] = json!({"annotations": {
            format!("{SIM}pending-seconds"): "0.1",
            format!("{SIM}run-seconds"): "3",
        }});
    }
    let job: TensorFlowTrainingJob = serde_json::from_value(example).expect("the example is a job");
    let name = job.name_any();
    let pods_seen = Recorder::start(env.pods()).await;
    env.submit(&job).await;
    let names = [
        format!("{name}-evaluator-0"),
        format!("{name}-worker-0"),
        format!("{name}-worker-1"),
    ];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let debug = env.wait_pod_names(&name, &names).await;
    let worker = &debug[&format!("{name}-worker-0")];
    assert_eq!(
        command_of(worker).0,
        strings(&["sleep", "3600"]),
        "debug worker command"
    );
    assert!(
        worker
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_none_or(Vec::is_empty),
        "skipInitContainer: the debug worker has no init container"
    );
    assert_eq!(
        command_of(&debug[&format!("{name}-evaluator-0")]).0,
        strings(&["sleep", "inf"])
    );
    set_debug(&env, &name, false).await;
    let debug_uids = uids(&debug);
    // The training pods may end (and, cleanUpPolicy All, go) quickly: read
    // them from the pod watch.
    let trained = soon(Duration::from_secs(15), async || {
        let added: BTreeMap<String, Pod> = pods_seen
            .events()
            .into_iter()
            .filter(|(c, p)| {
                *c == Change::Added
                    && !debug_uids
                        .values()
                        .any(|u| Some(u) == p.metadata.uid.as_ref())
            })
            .map(|(_, p)| (p.name_any(), p))
            .collect();
        names
            .iter()
            .all(|n| added.contains_key(*n))
            .then_some(added)
    })
    .await;
    let Some(trained) = trained else {
        let job = env.job(&name).await;
        panic!(
            "no training pods replaced the debug pods within 15s of debug.enabled false; \
             the job is {} ({:?}) with pods {:?}",
            phase_name(&job),
            condition(&job, "Completed"),
            uids(&env.job_pods(&name).await)
        );
    };
    let worker = &trained[&format!("{name}-worker-0")];
    assert_eq!(
        command_of(worker).0,
        strings(&["python", "/workspace/train.py"]),
        "training worker command"
    );
    let inits: Vec<String> = worker
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        inits,
        ["fetch-data"],
        "training pods keep the init container"
    );
    let done = env.wait_phase(&name, JobPhase::Succeeded).await;
    findings.check(
        backoff_count(&done) == 0,
        format!("backoffCount {}, want 0", backoff_count(&done)),
    );
    findings.finish();
}

// ---------------------------------------------------------------- 6b. debug mode and the training run

/// The phase of a pod, "" before it has one.
fn pod_phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Issue 24: restarts in debug mode do not spend the training run's
/// `backoffLimit`. A debug pod that fails is not restarted (it stays as it
/// ended, for its logs) and nothing is counted; turned off, the training run
/// has its whole budget; and the per-type `restartCount`s add up to
/// `backoffCount`.
async fn debug_restarts_spend_none_of_the_training_budget(ground: Ground) {
    let mut findings = Findings::new("debug_restarts_spend_none_of_the_training_budget");
    let env = Setup::on(ground)
        .own_namespace("debug-budget")
        .start()
        .await;
    // Attempts are counted per pod name, across its pods: the worker's debug
    // pod is its first attempt (exit 1), the training pods its second
    // (exit 1: one restart, the whole budget) and third (exit 0).
    let spec = json!({
        "runPolicy": {"backoffLimit": 1},
        "runMode": {"debug": {"enabled": true}},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, run("8")]),
            with_policy(replica("worker", 1, &[PENDING, run("1"), exits("1,1,0")]), "OnFailure"),
        ],
    });
    env.submit(&job("budget", spec)).await;
    let failed_uid = eventually("the debug worker's pod to fail", WAIT, async || {
        let pods = env.job_pods("budget").await;
        match pods.get("budget-worker-0") {
            Some(pod) if pod_phase(pod) == "Failed" => Ok(uid_of(pod)),
            Some(pod) => Err(format!("budget-worker-0 is {}", pod_phase(pod))),
            None => Err(format!("pods {:?}", pods.keys().collect::<Vec<_>>())),
        }
    })
    .await;
    assert_eq!(
        command_of(&env.job_pods("budget").await["budget-worker-0"]).0,
        strings(&["sleep", "inf"]),
        "the pod that failed is a debug pod"
    );
    holds_for(
        Duration::from_secs(3),
        "a failed debug pod to stay as it ended, with no restart counted",
        async || {
            let job = env.job("budget").await;
            let pods = env.job_pods("budget").await;
            let worker = pods.get("budget-worker-0");
            let kept = worker.is_some_and(|p| uid_of(p) == failed_uid && pod_phase(p) == "Failed");
            if backoff_count(&job) == 0
                && restart_count(&job, "worker") == 0
                && kept
                && !phase_of(&job).is_some_and(JobPhase::is_terminal)
            {
                Ok(())
            } else {
                Err(format!(
                    "phase {}, backoffCount {}, restartCount worker {}, budget-worker-0 {:?}",
                    phase_name(&job),
                    backoff_count(&job),
                    restart_count(&job, "worker"),
                    worker.map(|p| (uid_of(p), pod_phase(p)))
                ))
            }
        },
    )
    .await;
    let job = env.job("budget").await;
    findings.check(
        condition_status(&job, "ReplicaFailure") == "True",
        format!(
            "a failed debug pod: ReplicaFailure is {:?}, want True",
            condition(&job, "ReplicaFailure")
        ),
    );

    set_debug(&env, "budget", false).await;
    let done = wait_ended(&env, "budget", JobPhase::Succeeded).await;
    let total: i32 = done
        .status
        .iter()
        .flat_map(|s| &s.tasks)
        .map(|t| t.restart_count)
        .sum();
    assert_eq!(
        (
            phase_name(&done),
            backoff_count(&done),
            restart_count(&done, "worker"),
            restart_count(&done, "chief"),
        ),
        ("Succeeded".to_string(), 1, 1, 0),
        "the training run spent its one restart on the worker: {:?}",
        done.status
    );
    assert_eq!(
        total,
        backoff_count(&done),
        "the restartCounts add up to backoffCount: {:?}",
        done.status
    );
    findings.finish();
}

/// Waits until the job ends; fails the test, with its status, unless it
/// ended `want`.
async fn wait_ended(env: &Env, name: &str, want: JobPhase) -> TensorFlowTrainingJob {
    let ended = env
        .wait_job(name, "ended", |j| {
            phase_of(j).is_some_and(JobPhase::is_terminal)
        })
        .await;
    assert_eq!(
        phase_of(&ended),
        Some(want),
        "job {name} ended otherwise: {:?}",
        ended.status
    );
    ended
}

/// Issue 24: while a debug switch tears every pod down and makes it anew,
/// the job says so: phase Pending with `Running` False, reason
/// `RunModeChanged`, until every new pod runs; then Running again.
async fn a_debug_switch_shows_the_pods_being_replaced(ground: Ground) {
    let env = Setup::on(ground).own_namespace("debug-shows").start().await;
    // New pods pend a while: the switch lasts long enough to be seen.
    const SLOW: (&str, &str) = ("pending-seconds", "1.5");
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[SLOW, FOREVER]),
        replica("worker", 2, &[SLOW, FOREVER]),
    ]});
    env.submit(&job("shows", spec)).await;
    let names = ["shows-chief-0", "shows-worker-0", "shows-worker-1"];
    env.wait_phase("shows", JobPhase::Running).await;
    let training = uids(&env.wait_pod_names("shows", &names).await);
    let jobs = Recorder::start(env.jobs()).await;

    set_debug(&env, "shows", true).await;
    wait_new_pods(
        &env,
        "shows",
        &names,
        &training,
        "debug pods replacing the training pods, all running",
        WAIT,
        |pods| pods.values().all(|p| pod_phase(p) == "Running"),
    )
    .await;
    env.wait_job("shows", "Running with condition Running True", |j| {
        phase_of(j) == Some(JobPhase::Running) && condition_status(j, "Running") == "True"
    })
    .await;
    let shown = |j: &TensorFlowTrainingJob| {
        (
            phase_name(j),
            condition(j, "Running").map(|(s, r, _)| format!("{s} {r}")),
        )
    };
    let switching = |j: &TensorFlowTrainingJob| {
        phase_of(j) == Some(JobPhase::Pending)
            && condition(j, "Running")
                .is_some_and(|(s, r, _)| s == "False" && r == "RunModeChanged")
    };
    // The watch may lag the poll: what it saw up to the job running again.
    let seen = soon(WAIT, async || {
        let seen = statuses(&jobs, "shows");
        let back = seen.iter().rposition(|j| {
            phase_of(j) == Some(JobPhase::Running) && condition_status(j, "Running") == "True"
        })?;
        seen.iter().take(back).any(&switching).then_some(())
    })
    .await;
    if seen.is_none() {
        let all: Vec<_> = statuses(&jobs, "shows").iter().map(shown).collect();
        panic!(
            "no status said the pods were being replaced (phase Pending, Running False \
             RunModeChanged) before the job ran again; (phase, Running) seen since the switch: {all:?}"
        );
    }
}

// ---------------------------------------------------------------- 7. resume in debug mode

async fn resume_obeys_the_run_mode(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("resume-debug")
        .start()
        .await;
    let spec = json!({
        "runMode": {"pause": {"enabled": false, "resumeSpecs": [
            {"type": "worker", "command": ["python", "resume.py"]},
        ]}},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, FOREVER]),
            replica("worker", 1, &[PENDING, FOREVER]),
        ],
    });
    env.submit(&job("mode", spec)).await;
    let names = ["mode-chief-0", "mode-worker-0"];
    env.wait_phase("mode", JobPhase::Running).await;
    let first = uids(&env.wait_pod_names("mode", &names).await);
    set_pause(&env, "mode", true).await;
    env.wait_phase("mode", JobPhase::Paused).await;
    env.wait_pod_names("mode", &[]).await;

    set_debug(&env, "mode", true).await;
    holds_for(
        Duration::from_millis(1500),
        "a paused job to stay paused, without pods, when debug is enabled",
        async || {
            let job = env.job("mode").await;
            let pods: Vec<String> = env.job_pods("mode").await.into_keys().collect();
            if phase_of(&job) == Some(JobPhase::Paused) && pods.is_empty() {
                Ok(())
            } else {
                Err(format!("phase {}, pods {pods:?}", phase_name(&job)))
            }
        },
    )
    .await;

    set_pause(&env, "mode", false).await;
    let pods = wait_new_pods(
        &env,
        "mode",
        &names,
        &first,
        "pods after the resume",
        WAIT,
        |_| true,
    )
    .await;
    for name in names {
        assert_eq!(
            command_of(&pods[name]),
            (strings(&["sleep", "inf"]), None),
            "{name}: debug is on at the resume, so it runs the debug command"
        );
    }
    let running = env.wait_phase("mode", JobPhase::Running).await;
    assert_eq!(backoff_count(&running), 0);
}

// ---------------------------------------------------------------- 8. replicaSpecs edits

/// A running job "fixed" (a chief and 2 workers) and the edit of its
/// worker count; returns the edit's result and the pods it started with.
async fn edit_replicas_of_a_running_job(
    env: &Env,
    before_edit: impl AsyncFnOnce(),
) -> (
    kube::Result<TensorFlowTrainingJob>,
    BTreeMap<String, String>,
    String,
) {
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, FOREVER]),
        replica("worker", 2, &[PENDING, FOREVER]),
    ]});
    let uid = uid_of(&env.submit(&job("fixed", spec)).await);
    let names = ["fixed-chief-0", "fixed-worker-0", "fixed-worker-1"];
    env.wait_phase("fixed", JobPhase::Running).await;
    let before = uids(&env.wait_pod_names("fixed", &names).await);
    let edit: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/replicaSpecs/1/type", "value": "worker"},
        {"op": "replace", "path": "/spec/replicaSpecs/1/replicas", "value": 3},
    ]))
    .expect("a JSON patch");
    before_edit().await;
    let result = env
        .jobs()
        .patch("fixed", &PatchParams::default(), &Patch::Json::<()>(edit))
        .await;
    (result, before, uid)
}

/// The CRD's transition rule: the API server refuses the edit.
async fn replicas_edit_on_a_running_job_is_refused(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("replicas-edit")
        .start()
        .await;
    let (result, before, _) = edit_replicas_of_a_running_job(&env, async || {}).await;
    // The CRD's transition rule: the API server refuses the edit.
    let status = match result {
        Err(kube::Error::Api(status)) => status,
        Ok(job) => panic!(
            "the API server accepted the edit of spec.replicaSpecs[1].replicas: {:?}",
            job.spec
                .replicas_of(tfjob_federator::api::ReplicaType::Worker)
        ),
        Err(e) => panic!("patching replicas failed otherwise: {e}"),
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("replicaSpecs"),
        "the rejection names replicaSpecs: {}",
        status.message
    );
    assert_eq!(uids(&env.job_pods("fixed").await), before);
}

/// An edit of a field a running job may change that does not validate
/// (a `resumeSpecs` entry for a replica type the job lacks) is refused like
/// a `replicaSpecs` edit: the job says so and runs on with the pods it had.
async fn an_invalid_edit_of_a_running_job_is_refused(ground: Ground) {
    let mut findings = Findings::new("an_invalid_edit_of_a_running_job_is_refused");
    let env = Setup::on(ground)
        .own_namespace("invalid-edit")
        .start()
        .await;
    let spec = json!({"replicaSpecs": [replica("worker", 2, &[PENDING, FOREVER])]});
    env.submit(&job("steady", spec)).await;
    env.wait_phase("steady", JobPhase::Running).await;
    let before = uids(
        &env.wait_pod_names("steady", &["steady-worker-0", "steady-worker-1"])
            .await,
    );
    let uid = env.job("steady").await.uid().unwrap_or_default();
    merge_spec(
        &env,
        "steady",
        json!({"runMode": {"pause": {"enabled": false, "resumeSpecs": [{"type": "evaluator"}]}}}),
    )
    .await;
    let field = "spec.runMode.pause.resumeSpecs[0].type";
    match event_soon(&env, &uid, "SpecChangeRefused", Duration::from_secs(10)).await {
        Some(event) => {
            let note = event.note.unwrap_or_default();
            findings.check(
                event.type_.as_deref() == Some("Warning") && note.contains(field),
                format!(
                    "SpecChangeRefused Event {:?}: {note:?}, want a Warning naming {field}",
                    event.type_
                ),
            );
        }
        None => findings.check(
            false,
            format!(
                "no SpecChangeRefused Event within 10s (Events: {:?})",
                reasons(&env.events_about(&uid).await)
            ),
        ),
    }
    let refused = |c: &Condition| c.1 == "SpecChangeRefused" && c.2.contains(field);
    if let Err(seen) = condition_soon(
        &env,
        "steady",
        "Initialized",
        Duration::from_secs(5),
        refused,
    )
    .await
    {
        findings.check(
            false,
            format!(
                "condition Initialized is {seen:?}, want reason SpecChangeRefused naming {field}"
            ),
        );
    }
    holds_for(
        Duration::from_secs(3),
        "the job runs on with its pods",
        async || {
            let job = env.job("steady").await;
            let now = uids(&env.job_pods("steady").await);
            if phase_of(&job) != Some(JobPhase::Running) || now != before {
                return Err(format!(
                    "phase {}, pods {now:?} (were {before:?})",
                    phase_name(&job)
                ));
            }
            Ok(())
        },
    )
    .await;
    findings.finish();
}

/// Where the API server let the edit through (a CRD installed before the
/// rule existed, here the rules removed), the controller refuses it: the
/// job keeps the replicaSpecs it started with.
async fn replicas_edit_let_through_is_refused_by_the_controller(ground: Ground) {
    let mut findings = Findings::new("replicas_edit_let_through_is_refused_by_the_controller");
    let mut env = Setup::on(ground)
        .own_namespace("replicas-edit-let-through")
        .start()
        .await;
    let pods_seen = Recorder::start(env.pods()).await;
    let (result, before, uid) =
        edit_replicas_of_a_running_job(&env, async || strip_crd_rules(&env).await).await;
    result.unwrap_or_else(|e| panic!("the API server lets the edit through: {e}"));
    match event_soon(&env, &uid, "SpecChangeRefused", Duration::from_secs(10)).await {
        Some(event) => {
            findings.check(
                event.type_.as_deref() == Some("Warning"),
                format!(
                    "SpecChangeRefused Event of type {:?}, want Warning",
                    event.type_
                ),
            );
            let note = event.note.unwrap_or_default();
            findings.check(
                note.contains("spec.replicaSpecs"),
                format!("the SpecChangeRefused Event does not name spec.replicaSpecs: {note:?}"),
            );
        }
        None => findings.check(
            false,
            format!(
                "no SpecChangeRefused Event within 10s (Events: {:?})",
                reasons(&env.events_about(&uid).await)
            ),
        ),
    }
    let refused = |c: &Condition| c.1 == "SpecChangeRefused" && c.2.contains("spec.replicaSpecs");
    let limit = Duration::from_secs(5);
    if let Err(seen) = condition_soon(&env, "fixed", "Initialized", limit, refused).await {
        findings.check(
                false,
                format!(
                    "condition Initialized is {seen:?}, want reason SpecChangeRefused naming spec.replicaSpecs"
                ),
            );
    }
    let unchanged = async |env: &Env| {
        let pods = uids(&env.job_pods("fixed").await);
        let job = env.job("fixed").await;
        if pods != before {
            Err(format!("its pods are now {pods:?}, were {before:?}"))
        } else if phase_of(&job) != Some(JobPhase::Running) {
            Err(format!(
                "phase {}, Failed {:?}",
                phase_name(&job),
                condition(&job, "Failed")
            ))
        } else {
            Ok(())
        }
    };
    holds_for(
        Duration::from_secs(2),
        "the job to keep running the pods it started with after the edit",
        async || unchanged(&env).await,
    )
    .await;
    env.kill_controller();
    env.start_controller().await;
    holds_for(
        Duration::from_secs(4),
        "the job to keep running the pods it started with after a controller restart",
        async || unchanged(&env).await,
    )
    .await;
    let added = pods_seen.added_per_name();
    assert!(
        !added.contains_key("fixed-worker-2"),
        "no pod for a replica the edit added: {added:?}"
    );
    assert_eq!(uids(&env.job_pods("fixed").await), before);
    findings.finish();
}

/// Removes the job CRD's validation rules, as a CRD of an older release
/// would lack them, and waits until the API server lets an edit through.
async fn strip_crd_rules(env: &Env) {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let name = "tensorflowtrainingjobs.batch.tensorstack.dev";
    let crd = crds.get(name).await.expect("the job CRD");
    let versions = crd.spec.versions.len();
    let ops: Vec<Value> = (0..versions)
        .map(|v| json!({"op": "remove", "path": format!("/spec/versions/{v}/schema/openAPIV3Schema/x-kubernetes-validations")}))
        .collect();
    let patch: json_patch::Patch = serde_json::from_value(json!(ops)).expect("a JSON patch");
    crds.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .expect("remove the CRD's rules");
    // A dry-run edit of a started job tells when the API server stopped
    // evaluating the rule (a real one reloads the CRD in the background).
    let probe: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/replicaSpecs/1/replicas", "value": 3},
    ]))
    .expect("a JSON patch");
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    eventually("the API server to drop the CRD's rules", WAIT, async || {
        env.jobs()
            .patch("fixed", &dry_run, &Patch::Json::<()>(probe.clone()))
            .await
            .ok()
    })
    .await;
}

// ---------------------------------------------------------------- 9. replica failure

async fn a_replica_failing_for_good_shows_replica_failure(ground: Ground) {
    let mut findings = Findings::new("a_replica_failing_for_good_shows_replica_failure");
    let env = Setup::on(ground)
        .own_namespace("replica-failure")
        .start()
        .await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, FOREVER]),
        with_policy(replica("worker", 1, &[PENDING, run("0.5"), exits("1")]), "Never"),
    ]});
    env.submit(&job("broken", spec)).await;
    let failed = env.wait_phase("broken", JobPhase::Failed).await;
    // Let the last writes land, then read what stays.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let settled = env.job("broken").await;
    assert_eq!(
        phase_of(&settled),
        Some(JobPhase::Failed),
        "a terminal phase stays"
    );
    for (when, job) in [("when it failed", &failed), ("settled", &settled)] {
        let (status, reason, message) = condition(job, "Failed").expect("a Failed condition");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "ReplicaFailed"),
            "{message}"
        );
        findings.check(
            condition_status(job, "ReplicaFailure") == "True",
            format!(
                "{when}: phase Failed by a replica failing for good, but ReplicaFailure is {:?}",
                condition(job, "ReplicaFailure")
            ),
        );
        findings.check(
            condition_status(job, "Running") != "True",
            format!(
                "phase Failed, but Running is {:?}",
                condition(job, "Running")
            ),
        );
        findings.check(
            condition_status(job, "Completed") != "True",
            format!(
                "phase Failed, but Completed is {:?}",
                condition(job, "Completed")
            ),
        );
    }
    findings.finish();
}

// ---------------------------------------------------------------- 10. restartPolicy Always

async fn restart_policy_always(ground: Ground) {
    let env = Setup::on(ground).own_namespace("always").start().await;
    let pods_seen = Recorder::start(env.pods()).await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("5")]),
        with_policy(replica("worker", 1, &[PENDING, run("0.5"), exits("0")]), "Always"),
    ]});
    env.submit(&job("loop", spec)).await;
    let restarted = env
        .wait_job(
            "loop",
            "with its worker restarted while the chief runs",
            |j| restart_count(j, "worker") >= 1 && backoff_count(j) >= 1,
        )
        .await;
    assert!(
        !phase_of(&restarted).is_some_and(JobPhase::is_terminal),
        "the job had not ended yet: {}",
        phase_name(&restarted)
    );
    assert_eq!(restart_count(&restarted, "chief"), 0);
    let done = env.wait_phase("loop", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "Completed"), "True");
    assert!(restart_count(&done, "worker") >= 1);
    assert!(backoff_count(&done) >= restart_count(&done, "worker"));
    let added = pods_seen.added_per_name();
    assert!(
        added.get("loop-worker-0").is_some_and(|n| *n >= 2),
        "the worker's pod was made again: {added:?}"
    );
    assert_eq!(added.get("loop-chief-0"), Some(&1), "{added:?}");
}

// ---------------------------------------------------------------- 11, 12. foreign objects

/// Which kind of object a user left under a replica's name.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Foreign {
    Pod,
    Service,
}

async fn foreign_object_with_a_replica_name(ground: Ground, kind: Foreign) {
    let test = match kind {
        Foreign::Pod => "foreign_pod_with_a_replica_name",
        Foreign::Service => "foreign_service_with_a_replica_name",
    };
    let mut findings = Findings::new(test);
    let env = Setup::on(ground)
        .own_namespace(&test.replace('_', "-"))
        .start()
        .await;
    let taken = "squat-worker-0";
    let foreign_uid = match kind {
        Foreign::Pod => {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": taken,
                    "labels": {"app": "someone-elses"},
                    "annotations": {format!("{SIM}run-seconds"): "3600", format!("{SIM}pending-seconds"): "0.1"},
                },
                "spec": {"containers": [{
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }]},
            }))
            .expect("a Pod");
            uid_of(
                &env.pods()
                    .create(&PostParams::default(), &pod)
                    .await
                    .expect("create the foreign pod"),
            )
        }
        Foreign::Service => {
            let service: Service = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": taken, "labels": {"app": "someone-elses"}},
                "spec": {"selector": {"app": "someone-elses"}, "ports": [{"name": "http", "port": 80}]},
            }))
            .expect("a Service");
            uid_of(
                &env.services()
                    .create(&PostParams::default(), &service)
                    .await
                    .expect("create the foreign service"),
            )
        }
    };
    let (kind_name, api_kind) = match kind {
        Foreign::Pod => ("Pod", "pod"),
        Foreign::Service => ("Service", "service"),
    };
    let current_foreign = async |env: &Env| -> Option<(String, BTreeMap<String, String>)> {
        match kind {
            Foreign::Pod => env
                .pods()
                .get_opt(taken)
                .await
                .expect("get the pod")
                .map(|p| (uid_of(&p), p.labels().clone())),
            Foreign::Service => env
                .services()
                .get_opt(taken)
                .await
                .expect("get the service")
                .map(|s| (uid_of(&s), s.labels().clone())),
        }
    };

    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, FOREVER]),
        replica("worker", 1, &[PENDING, FOREVER]),
    ]});
    let uid = uid_of(&env.submit(&job("squat", spec)).await);
    let object = format!("{}/{taken}", env.namespace);
    match event_soon(&env, &uid, "ObjectNameTaken", Duration::from_secs(10)).await {
        Some(event) => {
            let note = event.note.clone().unwrap_or_default();
            findings.check(
                event.type_.as_deref() == Some("Warning"),
                format!(
                    "ObjectNameTaken Event of type {:?}, want Warning",
                    event.type_
                ),
            );
            findings.check(
                note.to_lowercase().contains(api_kind)
                    && note.contains(&object)
                    && note.contains("home"),
                format!(
                    "the ObjectNameTaken Event does not name {kind_name} {object} on home: {note:?}"
                ),
            );
        }
        None => findings.check(
            false,
            format!(
                "no ObjectNameTaken Event within 10s: nothing says why (Events: {:?})",
                reasons(&env.events_about(&uid).await)
            ),
        ),
    }
    let taken_condition =
        |c: &Condition| c.0 == "False" && c.1 == "ObjectNameTaken" && c.2.contains(&object);
    let limit = Duration::from_secs(5);
    if let Err(seen) = condition_soon(&env, "squat", "Initialized", limit, taken_condition).await {
        findings.check(
            false,
            format!(
                "condition Initialized is {seen:?}, want False, reason ObjectNameTaken, naming {object}"
            ),
        );
    }
    // Never deleted nor taken over, also a few seconds later.
    holds_for(
        Duration::from_secs(3),
        &format!("the foreign {api_kind} to stay as its owner made it"),
        async || match current_foreign(&env).await {
            Some((u, labels)) if u == foreign_uid && !labels.contains_key(MANAGED_BY) => Ok(()),
            Some((u, labels)) => Err(format!("uid {u} (was {foreign_uid}), labels {labels:?}")),
            None => Err("it was deleted".into()),
        },
    )
    .await;
    match kind {
        Foreign::Pod => findings.check(
            !env.job_pods("squat").await.contains_key(taken),
            "a pod of the job's own carries the taken name",
        ),
        Foreign::Service => findings.check(
            !env.job_services("squat").await.contains_key(taken),
            "a service of the job's own carries the taken name",
        ),
    }

    // Its owner deletes it: the replica's own object follows and the job runs.
    match kind {
        Foreign::Pod => {
            env.pods()
                .delete(taken, &DeleteParams::default())
                .await
                .expect("delete the foreign pod");
        }
        Foreign::Service => {
            env.services()
                .delete(taken, &DeleteParams::default())
                .await
                .expect("delete the foreign service");
        }
    }
    let replaced = soon(WAIT, async || match kind {
        Foreign::Pod => env
            .job_pods("squat")
            .await
            .get(taken)
            .is_some_and(|p| {
                p.labels().get(MANAGED_BY).map(String::as_str) == Some("tfjob-federator")
            })
            .then_some(()),
        Foreign::Service => env
            .job_services("squat")
            .await
            .get(taken)
            .is_some_and(|s| {
                s.labels().get(MANAGED_BY).map(String::as_str) == Some("tfjob-federator")
            })
            .then_some(()),
    })
    .await;
    assert!(
        replaced.is_some(),
        "once the foreign {api_kind} was deleted, the replica's own {api_kind} {taken} was not created within {WAIT:?}"
    );
    let running = env
        .wait_job("squat", "Running with every replica initialized", |j| {
            phase_of(j) == Some(JobPhase::Running) && condition_status(j, "Initialized") == "True"
        })
        .await;
    assert_eq!(aggregate(&running)[2], 2, "both replicas run");
    assert_eq!(env.job_services("squat").await.len(), 2);
    findings.finish();
}

async fn foreign_pod_with_a_replica_name(ground: Ground) {
    foreign_object_with_a_replica_name(ground, Foreign::Pod).await;
}

async fn foreign_service_with_a_replica_name(ground: Ground) {
    foreign_object_with_a_replica_name(ground, Foreign::Service).await;
}

on_both_grounds!(
    pause_and_resume_a_running_job,
    paused_while_waiting_for_capacity_gets_no_pods,
    deadline_counts_from_start_not_creation,
    deadline_clock_stops_during_a_pause,
    deadline_that_passed_without_a_controller_fires_at_once,
    debug_toggle_on_a_running_job,
    the_gang_debug_example_trains_once_debug_is_off,
    debug_restarts_spend_none_of_the_training_budget,
    a_debug_switch_shows_the_pods_being_replaced,
    resume_obeys_the_run_mode,
    replicas_edit_on_a_running_job_is_refused,
    replicas_edit_let_through_is_refused_by_the_controller,
    an_invalid_edit_of_a_running_job_is_refused,
    a_replica_failing_for_good_shows_replica_failure,
    restart_policy_always,
    foreign_pod_with_a_replica_name,
    foreign_service_with_a_replica_name,
);
