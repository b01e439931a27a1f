//! The operator end to end (issue 4's acceptance), on both grounds: a
//! simulated cluster of the test's own (in-process), or the shared real
//! cluster of `hack/real-clusters` (a namespace of the test's own, the
//! controller under the identity `deploy/controller.yaml` ships); the CRDs
//! installed and the controller binary (`tfjob-federator run`) running
//! against it over loopback HTTP. Pods behave
//! as their `sim.federation.tfjob.io/*` annotations script; the tests assert
//! only on what the API shows: job status, pods, services, PodGroups,
//! TensorBoards, Events and kubectl's output.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::operator::*;
use common::sim_kube::{admin_request, set_faults};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, ReplicaPhase, TensorFlowTrainingJob};

/// Quick pods: bound → Running in 0.1 s.
const PENDING: (&str, &str) = ("pending-seconds", "0.1");

fn run(seconds: &'static str) -> (&'static str, &'static str) {
    ("run-seconds", seconds)
}

fn exits(codes: &'static str) -> (&'static str, &'static str) {
    ("exit-codes", codes)
}

const MANAGED: [&str; 6] = [
    "app.kubernetes.io/managed-by",
    "federation.tfjob.io/job-name",
    "federation.tfjob.io/job-uid",
    "federation.tfjob.io/placement-epoch",
    "federation.tfjob.io/replica-index",
    "federation.tfjob.io/replica-type",
];

fn resource_version(object: &impl kube::Resource) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("a numeric resourceVersion")
}

fn pod_phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Waits a moment and checks that the job's pods are still exactly `names`.
async fn pods_stay(env: &Env, job: &str, names: &[&str]) {
    env.wait_pod_names(job, names).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let now: Vec<String> = env.job_pods(job).await.into_keys().collect();
    let mut expected: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    expected.sort();
    assert_eq!(now, expected, "job {job}: the pods changed after settling");
}

/// The phases the recorder saw, once it saw `last` (watches may lag a poll).
async fn recorded_phases(
    recorder: &Recorder<tfjob_federator::api::TensorFlowTrainingJob>,
    name: &str,
    last: JobPhase,
) -> Vec<JobPhase> {
    eventually(
        &format!("the watch to see {name} {last:?}"),
        WAIT,
        async || {
            let seen = phases(recorder, name);
            (seen.last() == Some(&last)).then_some(seen)
        },
    )
    .await
}

fn tf_config(ns: &str, job: &str, task: &str, index: i32) -> String {
    format!(
        r#"{{"cluster":{{"chief":["{job}-chief-0.{ns}.svc:2222"],"ps":["{job}-ps-0.{ns}.svc:2222"],"worker":["{job}-worker-0.{ns}.svc:2222","{job}-worker-1.{ns}.svc:2222"]}},"task":{{"type":"{task}","index":{index}}},"environment":"cloud"}}"#
    )
}

async fn chief_workers_and_ps_run_then_succeed(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("chief-workers-ps")
        .start()
        .await;
    let recorder = Recorder::start(env.jobs()).await;
    // Pods pend long enough for the Pending phase to be written.
    let pending = ("pending-seconds", "0.7");
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[pending, run("2.5")]),
        replica("worker", 2, &[pending, run("1.5")]),
        replica("ps", 1, &[pending, run("3600")]),
    ]});
    let uid = env.submit(&job("mnist", spec)).await.uid().expect("uid");

    let running = env.wait_phase("mnist", JobPhase::Running).await;
    assert_eq!(aggregate(&running), [0, 0, 4, 0, 0, 0, 0]);
    assert_eq!(condition_status(&running, "Initialized"), "True");
    assert_eq!(condition_status(&running, "Running"), "True");
    assert_eq!(condition_status(&running, "ReplicaFailure"), "False");
    assert_eq!(condition_status(&running, "Completed"), "");
    assert!(
        running
            .finalizers()
            .contains(&"federation.tfjob.io/cleanup".into()),
        "the job carries the clean-up finalizer: {:?}",
        running.finalizers()
    );

    // Pods: names, labels, annotations, owner, restart policy, TF_CONFIG.
    let pods = env.job_pods("mnist").await;
    let names: Vec<&str> = pods.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "mnist-chief-0",
            "mnist-ps-0",
            "mnist-worker-0",
            "mnist-worker-1"
        ]
    );
    let status = running.status.as_ref().expect("status");
    for (name, pod) in &pods {
        let (rtype, index) = name
            .strip_prefix("mnist-")
            .and_then(|rest| rest.rsplit_once('-'))
            .expect("<job>-<type>-<index>");
        let labels = pod.labels();
        // Bound pods carry their node's zone and region (kube-apiserver's
        // PodTopologyLabels admission).
        let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let node = Api::<k8s_openapi::api::core::v1::Node>::all(env.client.clone())
            .get(&node_name.expect("a bound pod"))
            .await
            .expect("the pod's node");
        let mut expected: BTreeMap<String, String> = [
            ("app.kubernetes.io/managed-by", "tfjob-federator"),
            ("federation.tfjob.io/job-name", "mnist"),
            ("federation.tfjob.io/job-uid", uid.as_str()),
            ("federation.tfjob.io/placement-epoch", "0"),
            ("federation.tfjob.io/replica-index", index),
            ("federation.tfjob.io/replica-type", rtype),
            ("team", "vision"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for key in [
            "topology.kubernetes.io/region",
            "topology.kubernetes.io/zone",
        ] {
            expected.insert(key.to_string(), node.labels()[key].clone());
        }
        assert_eq!(labels, &expected, "labels of {name}");
        assert!(
            pod.annotations()
                .contains_key("sim.federation.tfjob.io/run-seconds"),
            "template annotations are copied to {name}"
        );
        let owner = &pod.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("TensorFlowTrainingJob", "mnist", uid.as_str())
        );
        assert_eq!(owner.controller, Some(true));
        let spec = pod.spec.as_ref().expect("pod spec");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let index: i32 = index.parse().expect("index");
        assert_eq!(
            tf_env(pod, "TF_CONFIG").as_deref(),
            Some(tf_config(&env.namespace, "mnist", rtype, index).as_str()),
            "TF_CONFIG of {name}"
        );
        let ports = main_container(pod).ports.clone().unwrap_or_default();
        assert_eq!(ports[0].name.as_deref(), Some("tfjob-port"));
        assert_eq!(ports[0].container_port, 2222);
        // The status lists this pod under its type, with its uid and cluster.
        let task = status
            .tasks
            .iter()
            .find(|t| t.replica_type == rtype)
            .expect("task of the type");
        let replica = task
            .replica_status
            .iter()
            .find(|r| r.name == *name)
            .expect("replica status of the pod");
        assert_eq!(replica.uid, pod.metadata.uid);
        assert_eq!(replica.phase, ReplicaPhase::Running);
        assert_eq!(replica.cluster.as_deref(), Some("home"));
    }
    let task_types: Vec<&str> = status
        .tasks
        .iter()
        .map(|t| t.replica_type.as_str())
        .collect();
    assert_eq!(task_types, ["chief", "worker", "ps"]);

    // Headless services, one per replica.
    let services = env.job_services("mnist").await;
    assert_eq!(services.len(), 4);
    for (name, service) in &services {
        assert!(pods.contains_key(name), "service {name} matches a pod");
        let spec = service.spec.as_ref().expect("service spec");
        assert_eq!(
            spec.cluster_ip.as_deref(),
            Some("None"),
            "{name} is headless"
        );
        let port = &spec.ports.as_ref().expect("ports")[0];
        assert_eq!(
            (port.name.as_deref(), port.port),
            (Some("tfjob-port"), 2222)
        );
        let selector = spec.selector.clone().unwrap_or_default();
        let pod_labels = pods[name].labels();
        assert!(
            !selector.is_empty() && selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "service {name} selects its pod: {selector:?}"
        );
        for label in MANAGED {
            assert!(service.labels().contains_key(label), "{name} has {label}");
        }
        assert_eq!(service.owner_references()[0].uid, uid);
    }

    let done = env.wait_phase("mnist", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "Completed"), "True");
    assert_eq!(condition_status(&done, "Running"), "False");
    assert_eq!(condition_status(&done, "Failed"), "False");
    // The still-running ps is deleted (clean-up policy unfinished).
    pods_stay(
        &env,
        "mnist",
        &["mnist-chief-0", "mnist-worker-0", "mnist-worker-1"],
    )
    .await;
    assert!(!env.job_services("mnist").await.contains_key("mnist-ps-0"));
    let settled = env
        .wait_job("mnist", "settled with the ps deleted", |j| {
            aggregate(j) == [0, 0, 0, 3, 0, 0, 1]
        })
        .await;
    assert_eq!(phase_of(&settled), Some(JobPhase::Succeeded));

    // Every step the controller wrote was consistent.
    let seen = recorded_phases(&recorder, "mnist", JobPhase::Succeeded).await;
    let steps = statuses(&recorder, "mnist");
    assert_eq!(
        seen,
        [JobPhase::Pending, JobPhase::Running, JobPhase::Succeeded]
    );
    for step in &steps {
        let Some(phase) = phase_of(step) else {
            continue;
        };
        let a = aggregate(step);
        // The first status (written before the job is admitted) has no
        // replicas yet; every later one counts them all.
        let first = step.status.as_ref().is_some_and(|s| s.placement.is_none());
        assert_eq!(
            a.iter().sum::<i32>(),
            if first { 0 } else { 4 },
            "aggregate {a:?} counts every replica"
        );
        match phase {
            JobPhase::Pending => {
                assert_eq!(condition_status(step, "Running"), "False");
                assert!(a[2] < 4, "Pending while all run: {a:?}");
            }
            JobPhase::Running => {
                assert_eq!(condition_status(step, "Running"), "True");
                assert_eq!(condition_status(step, "Initialized"), "True");
                assert_eq!(condition_status(step, "Completed"), "");
            }
            JobPhase::Succeeded => {
                assert_eq!(condition_status(step, "Completed"), "True");
                assert!(a[3] >= 1, "the chief succeeded: {a:?}");
            }
            other => panic!("unexpected phase {other:?}"),
        }
    }
    let events = env.events_about(&uid).await;
    let mut reasons: Vec<&str> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    reasons.sort_unstable();
    // Running is the condition's news alone: no Event repeats it.
    assert_eq!(reasons, ["Placed", "Succeeded"], "the job's Events");
}

async fn without_a_chief_worker_0_decides(ground: Ground) {
    let env = Setup::on(ground).own_namespace("no-chief").start().await;
    // No chief: worker-0 is the master. The ps and the evaluator would run
    // for an hour; the job ends when worker-0 does.
    let spec = json!({"replicaSpecs": [
        replica("worker", 2, &[PENDING, run("1")]),
        replica("ps", 1, &[PENDING, run("3600")]),
        replica("evaluator", 1, &[PENDING, run("3600")]),
    ]});
    env.submit(&job("nochief", spec)).await;
    let done = env.wait_phase("nochief", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "Completed"), "True");
    let (_, _, message) = condition(&done, "Completed").expect("Completed");
    assert!(!message.is_empty());
    // The ps and the evaluator are deleted; worker-1 too unless it ended
    // before worker-0 (both run the same script).
    tokio::time::sleep(Duration::from_millis(800)).await;
    let left: Vec<String> = env.job_pods("nochief").await.into_keys().collect();
    assert!(
        left == ["nochief-worker-0"] || left == ["nochief-worker-0", "nochief-worker-1"],
        "{left:?}"
    );
    let uid = done.uid().expect("uid");
    let events = env.events_about(&uid).await;
    let succeeded = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("Succeeded"))
        .expect("a Succeeded event");
    assert!(
        succeeded
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("worker-0"),
        "the event names the deciding replica: {:?}",
        succeeded.note
    );
}

async fn exit_code_policy_restarts_only_retryable_codes(ground: Ground) {
    let env = Setup::on(ground).own_namespace("exit-code").start().await;
    let pods = Recorder::start(env.pods()).await;
    let retry = json!({"replicaSpecs": [with_policy(
        replica("worker", 1, &[PENDING, run("0.5"), exits("137,0")]), "ExitCode")]});
    let fatal = json!({"replicaSpecs": [with_policy(
        replica("worker", 1, &[PENDING, run("0.5"), exits("1")]), "ExitCode")]});
    env.submit(&job("retry", retry)).await;
    env.submit(&job("fatal", fatal)).await;

    let done = env.wait_phase("retry", JobPhase::Succeeded).await;
    assert_eq!(backoff_count(&done), 1);
    assert_eq!(restart_count(&done, "worker"), 1);
    assert_eq!(pods.added_per_name().get("retry-worker-0"), Some(&2));
    let events = env.events_about(&done.uid().expect("uid")).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("Restarting")
                && e.note.as_deref().unwrap_or_default().contains("137")),
        "a Restarting event names the exit code"
    );

    let failed = env.wait_phase("fatal", JobPhase::Failed).await;
    let (status, reason, message) = condition(&failed, "Failed").expect("Failed condition");
    assert_eq!(status, "True");
    assert_eq!(reason, "ReplicaFailed");
    assert!(
        message.contains("worker-0") && message.contains("code 1"),
        "the message names the replica and the code: {message}"
    );
    assert_eq!(backoff_count(&failed), 0);
    assert_eq!(pods.added_per_name().get("fatal-worker-0"), Some(&1));
}

/// Issue 24: under `ExitCode`, a pod that failed with no exit code of its
/// `tensorflow` container failed for the environment's reasons, the kind
/// `ExitCode` retries. Here the pod is evicted before its containers
/// started, written as a kubelet under node pressure writes it (phase
/// Failed, reason Evicted, the container still waiting): neither ground's
/// kubelet evicts on its own, and both leave a pod whose containers wait
/// (`waiting-reason`) alone, so the write races nothing.
async fn exit_code_retries_a_failed_pod_without_an_exit_code(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("exit-code-evicted")
        .start()
        .await;
    let spec = json!({
        "runPolicy": {"backoffLimit": 2},
        "replicaSpecs": [with_policy(
            replica("worker", 1, &[PENDING, ("waiting-reason", "ContainerCreating")]),
            "ExitCode",
        )],
    });
    env.submit(&job("evicted", spec)).await;
    let first = eventually(
        "evicted-worker-0 with its container waiting",
        WAIT,
        async || {
            let pods = env.job_pods("evicted").await;
            let Some(pod) = pods.get("evicted-worker-0") else {
                return Err(format!("pods {:?}", pods.keys().collect::<Vec<_>>()));
            };
            let waiting = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|all| {
                    all.iter().any(|c| {
                        c.name == "tensorflow"
                            && c.state.as_ref().is_some_and(|s| s.waiting.is_some())
                    })
                });
            if waiting {
                Ok(pod.uid().expect("a uid"))
            } else {
                Err(format!("its status {:?}", pod.status))
            }
        },
    )
    .await;
    env.pods()
        .patch_status(
            "evicted-worker-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory. ",
            }})),
        )
        .await
        .expect("write the eviction");
    let decided = env
        .wait_job("evicted", "restarted or ended", |j| {
            backoff_count(j) >= 1 || phase_of(j).is_some_and(JobPhase::is_terminal)
        })
        .await;
    assert!(
        !phase_of(&decided).is_some_and(JobPhase::is_terminal),
        "the evicted worker ended the job instead of being retried: {:?}",
        condition(&decided, "Failed")
    );
    assert_eq!(
        (backoff_count(&decided), restart_count(&decided, "worker")),
        (1, 1),
        "one restart, of the worker: {:?}",
        decided.status
    );
    eventually("a new pod for worker-0", WAIT, async || {
        let pods = env.job_pods("evicted").await;
        match pods.get("evicted-worker-0") {
            Some(pod) if pod.uid().as_ref() != Some(&first) => Ok(()),
            other => Err(format!("{:?}", other.map(|p| (p.uid(), pod_phase(p))))),
        }
    })
    .await;
    let uid = decided.uid().expect("a uid");
    eventually("a Restarting Event", WAIT, async || {
        let events = env.events_about(&uid).await;
        let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
        if reasons.iter().any(|r| r == "Restarting") {
            Ok(())
        } else {
            Err(format!("{reasons:?}"))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let later = env.job("evicted").await;
    assert!(
        !phase_of(&later).is_some_and(JobPhase::is_terminal) && backoff_count(&later) == 1,
        "the job goes on, the restart counted once: {:?}",
        later.status
    );
}

/// Issue 24: the controller's first write of a job (its admission: the
/// finalizer and the accepted replicaSpecs, one JSON patch with `test`
/// operations) answered 409, as when a metadata-only edit of the job races
/// it. A metadata-only edit brings no new spec; the admission is tried
/// again all the same, and the job runs with no edit of it.
async fn an_admission_patch_that_conflicts_is_retried(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("admission-conflict")
        .start()
        .await;
    set_faults(
        &env.client,
        json!({"failRequests": {"verb": "patch", "resource": "tensorflowtrainingjobs",
            "count": 1, "code": 409}}),
    )
    .await;
    let spec = json!({"replicaSpecs": [replica("worker", 1, &[PENDING, run("3600")])]});
    env.submit(&job("raced", spec)).await;
    eventually(
        "the admission patch to meet the conflict",
        WAIT,
        async || {
            let faults = admin_request(&env.client, hyper::Method::GET, "faults", None).await;
            if faults["failRequests"]["count"] == 0 {
                Ok(())
            } else {
                Err(faults.to_string())
            }
        },
    )
    .await;
    let running = env.wait_phase("raced", JobPhase::Running).await;
    assert!(
        running
            .finalizers()
            .iter()
            .any(|f| f == "federation.tfjob.io/cleanup"),
        "admitted: the finalizer is on the job: {:?}",
        running.finalizers()
    );
    env.wait_pod_names("raced", &["raced-worker-0"]).await;
}

async fn on_failure_stops_at_the_backoff_limit(ground: Ground) {
    let env = Setup::on(ground).own_namespace("backoff").start().await;
    let pods = Recorder::start(env.pods()).await;
    let spec = json!({
        "runPolicy": {"backoffLimit": 2},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, run("3600")]),
            with_policy(replica("worker", 1, &[PENDING, run("0.3"), exits("1")]), "OnFailure"),
        ],
    });
    env.submit(&job("flaky", spec)).await;
    let failed = env.wait_phase("flaky", JobPhase::Failed).await;
    let (status, reason, message) = condition(&failed, "Failed").expect("Failed condition");
    assert_eq!(status, "True");
    assert_eq!(reason, "BackoffLimitExceeded");
    assert!(
        message.contains("backoff limit of 2") && message.contains("worker-0"),
        "{message}"
    );
    assert_eq!(backoff_count(&failed), 2);
    assert_eq!(restart_count(&failed, "worker"), 2);
    assert_eq!(restart_count(&failed, "chief"), 0);
    let added = pods.added_per_name();
    assert_eq!(
        added.get("flaky-worker-0"),
        Some(&3),
        "two restarts: {added:?}"
    );
    assert_eq!(added.get("flaky-chief-0"), Some(&1));
    // The running chief is deleted (unfinished), the failed worker kept.
    pods_stay(&env, "flaky", &["flaky-worker-0"]).await;
}

async fn never_fails_the_job_but_an_evaluator_only_sets_replica_failure(ground: Ground) {
    let env = Setup::on(ground).own_namespace("never").start().await;
    let never = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("3600")]),
        with_policy(replica("worker", 1, &[PENDING, run("0.3"), exits("1")]), "Never"),
    ]});
    let evaluated = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("2")]),
        replica("evaluator", 1, &[PENDING, run("0.3"), exits("2")]),
    ]});
    env.submit(&job("never", never)).await;
    env.submit(&job("evaluated", evaluated)).await;

    let failed = env.wait_phase("never", JobPhase::Failed).await;
    let (_, reason, message) = condition(&failed, "Failed").expect("Failed condition");
    assert_eq!(reason, "ReplicaFailed");
    assert!(
        message.contains("worker-0") && message.contains("code 1"),
        "{message}"
    );

    let hurt = env
        .wait_job("evaluated", "ReplicaFailure True", |j| {
            condition_status(j, "ReplicaFailure") == "True"
        })
        .await;
    assert_eq!(phase_of(&hurt), Some(JobPhase::Running));
    let (_, _, message) = condition(&hurt, "ReplicaFailure").expect("ReplicaFailure");
    assert!(
        message.contains("evaluator-0") && message.contains("code 2"),
        "{message}"
    );
    let done = env.wait_phase("evaluated", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "ReplicaFailure"), "True");
    assert_eq!(condition_status(&done, "Failed"), "False");
}

async fn active_deadline_fails_the_job_and_deletes_every_pod(ground: Ground) {
    let env = Setup::on(ground).own_namespace("deadline").start().await;
    let spec = json!({
        "runPolicy": {"activeDeadlineSeconds": 2, "cleanUpPolicy": "None"},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, run("3600")]),
            replica("worker", 1, &[PENDING, run("0.3")]),
        ],
    });
    let created = env.submit(&job("slow", spec)).await;
    let started = Instant::now();
    let failed = env.wait_phase("slow", JobPhase::Failed).await;
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(8),
        "failed after {after:?}"
    );
    let (_, reason, message) = condition(&failed, "Failed").expect("Failed condition");
    assert_eq!(reason, "DeadlineExceeded");
    assert!(message.contains("activeDeadlineSeconds"), "{message}");
    // Every pod goes, even the finished worker and despite cleanUpPolicy None.
    pods_stay(&env, "slow", &[]).await;
    let events = env.events_about(&created.uid().expect("uid")).await;
    assert!(events.iter().any(|e| e.reason.as_deref() == Some("Failed")));
}

async fn clean_up_policies_leave_the_right_pods(ground: Ground) {
    let env = Setup::on(ground).own_namespace("clean-up").start().await;
    let spec = |policy: &str| {
        json!({
            "runPolicy": {"cleanUpPolicy": policy},
            "replicaSpecs": [
                replica("chief", 1, &[PENDING, run("1.5")]),
                replica("worker", 1, &[PENDING, run("0.5")]),
                replica("ps", 1, &[PENDING, run("3600")]),
            ],
        })
    };
    env.submit(&job("all", spec("All"))).await;
    env.submit(&job("unfinished", spec("unfinished"))).await;
    env.submit(&job("none", spec("NONE"))).await;
    for name in ["all", "unfinished", "none"] {
        env.wait_phase(name, JobPhase::Succeeded).await;
    }
    pods_stay(&env, "all", &[]).await;
    pods_stay(
        &env,
        "unfinished",
        &["unfinished-chief-0", "unfinished-worker-0"],
    )
    .await;
    pods_stay(
        &env,
        "none",
        &["none-chief-0", "none-ps-0", "none-worker-0"],
    )
    .await;
    let ps = env.pods().get("none-ps-0").await.expect("ps pod");
    assert_eq!(
        pod_phase(&ps),
        "Running",
        "cleanUpPolicy none keeps the ps running"
    );
    assert!(
        env.job_services("all").await.is_empty(),
        "all: no services left"
    );
}

async fn pause_then_resume_with_resume_specs(ground: Ground) {
    let env = Setup::on(ground).own_namespace("pause").start().await;
    let jobs = Recorder::start(env.jobs()).await;
    let pods = Recorder::start(env.pods()).await;
    let spec = json!({
        "runMode": {"pause": {"enable": true, "resumeSpecs": [
            {"type": "worker", "command": ["python", "resume.py"], "args": ["--from", "ckpt"]},
            {"type": "chief", "args": ["--resume"]},
        ]}},
        "replicaSpecs": [
            replica("chief", 1, &[("pending-seconds", "0.3"), run("1.5")]),
            replica("worker", 1, &[("pending-seconds", "0.3"), run("1")]),
        ],
    });
    env.submit(&job("held", spec)).await;
    let paused = env.wait_phase("held", JobPhase::Paused).await;
    assert_eq!(condition_status(&paused, "Paused"), "True");
    pods_stay(&env, "held", &[]).await;
    assert!(pods.events().is_empty(), "a paused job creates no pods");
    assert_eq!(phase_of(&env.job("held").await), Some(JobPhase::Paused));

    env.jobs()
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runMode": {"pause": {"enable": false}}}})),
        )
        .await
        .expect("resume");
    let done = env.wait_phase("held", JobPhase::Succeeded).await;
    assert_eq!(condition_status(&done, "Paused"), "False");
    assert_eq!(
        recorded_phases(&jobs, "held", JobPhase::Succeeded).await,
        [
            JobPhase::Paused,
            JobPhase::Resuming,
            JobPhase::Running,
            JobPhase::Succeeded
        ]
    );
    let created: BTreeMap<String, Pod> = pods
        .events()
        .into_iter()
        .filter(|(c, _)| *c == Change::Added)
        .map(|(_, p)| (p.name_any(), p))
        .collect();
    let worker = main_container(&created["held-worker-0"]);
    assert_eq!(
        worker.command,
        Some(vec!["python".to_string(), "resume.py".to_string()])
    );
    assert_eq!(
        worker.args,
        Some(vec!["--from".to_string(), "ckpt".to_string()])
    );
    let chief = main_container(&created["held-chief-0"]);
    assert_eq!(
        chief.command,
        Some(vec!["python".to_string(), "train.py".to_string()]),
        "no resume command: the template's stays"
    );
    assert_eq!(chief.args, Some(vec!["--resume".to_string()]));
}

async fn debug_mode_runs_the_debug_command_and_tolerates_failures(ground: Ground) {
    let env = Setup::on(ground).own_namespace("debug").start().await;
    let spec = json!({
        "runMode": {"debug": {"enabled": true, "replicaSpecs": [
            {"type": "worker", "command": ["bash", "-c", "sleep 3600"]},
        ]}},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, run("0.5")]),
            replica("worker", 1, &[PENDING, run("0.5"), exits("1")]),
        ],
    });
    env.submit(&job("dbg", spec)).await;
    let pods = env
        .wait_pod_names("dbg", &["dbg-chief-0", "dbg-worker-0"])
        .await;
    let chief = main_container(&pods["dbg-chief-0"]);
    assert_eq!(
        chief.command,
        Some(vec!["sleep".to_string(), "inf".to_string()])
    );
    assert_eq!(chief.args, None);
    let worker = main_container(&pods["dbg-worker-0"]);
    assert_eq!(
        worker.command,
        Some(vec!["bash".into(), "-c".into(), "sleep 3600".into()])
    );
    // The worker fails and the chief ends: the job neither fails nor succeeds.
    let settled = env
        .wait_job("dbg", "with both pods finished", |j| {
            let a = aggregate(j);
            a[3] == 1 && a[4] == 1
        })
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let later = env.job("dbg").await;
    assert_eq!(
        phase_of(&later),
        Some(JobPhase::Running),
        "{:?}",
        later.status
    );
    assert_eq!(condition_status(&later, "Failed"), "");
    assert_eq!(condition_status(&settled, "ReplicaFailure"), "True");
    pods_stay(&env, "dbg", &["dbg-chief-0", "dbg-worker-0"]).await;
}

async fn t9k_scheduler_gets_a_pod_group(ground: Ground) {
    let env = Setup::on(ground).own_namespace("t9k").start().await;
    let spec = json!({
        "scheduler": {"t9kScheduler": {"queue": "gpu-queue", "priority": 50}},
        "replicaSpecs": [
            replica("chief", 1, &[PENDING, run("1")]),
            replica("worker", 2, &[PENDING, run("0.5")]),
        ],
    });
    let uid = env.submit(&job("gang", spec)).await.uid().expect("uid");
    let groups: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("scheduler.tensorstack.dev", "v1beta1", "PodGroup"),
            "podgroups",
        ),
    );
    let group = eventually("the PodGroup", WAIT, async || {
        groups.get_opt("gang").await.ok().flatten()
    })
    .await;
    assert_eq!(
        group.data["spec"],
        json!({"minMember": 3, "queue": "gpu-queue", "priority": 50})
    );
    assert_eq!(group.owner_references()[0].uid, uid);
    let pods = env
        .wait_pod_names("gang", &["gang-chief-0", "gang-worker-0", "gang-worker-1"])
        .await;
    for (name, pod) in &pods {
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(
            spec.scheduler_name.as_deref(),
            Some("t9k-scheduler"),
            "{name}"
        );
        let labels = pod.labels();
        assert_eq!(
            labels
                .get("scheduler.tensorstack.dev/group-name")
                .map(String::as_str),
            Some("gang")
        );
        assert_eq!(
            labels
                .get("scheduler.tensorstack.dev/queue")
                .map(String::as_str),
            Some("gpu-queue")
        );
    }
    env.wait_phase("gang", JobPhase::Succeeded).await;
}

fn tensorboard_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tensorstack.dev", "v1beta1", "TensorBoard"),
        "tensorboards",
    )
}

async fn tensorboard_is_created_and_reported(ground: Ground) {
    let env = Setup::on(ground).own_namespace("tensorboard").start().await;
    let spec = json!({
        "tensorboardSpec": {"image": "tensorflow/tensorflow:2.15.0", "trainingLogFilesets": ["t9k://pvc/logs/mnist"]},
        "replicaSpecs": [replica("worker", 1, &[PENDING, run("1")])],
    });
    // Without the TensorBoard CRD, the status says so and the job still runs.
    env.submit(&job("noboard", spec.clone())).await;
    let reported = env
        .wait_job("noboard", "reporting its TensorBoard", |j| {
            j.status.as_ref().is_some_and(|s| s.tensorboard.is_some())
        })
        .await;
    let board = reported
        .status
        .and_then(|s| s.tensorboard)
        .expect("tensorboard status");
    assert!(!board.ready);
    assert_eq!(board.reason.as_deref(), Some("CRDNotInstalled"));
    let note = board.note.unwrap_or_default();
    assert!(
        note.contains("TensorBoard") && note.contains("not installed"),
        "the note says so plainly: {note}"
    );
    env.wait_phase("noboard", JobPhase::Succeeded).await;

    install_schemaless_crd(&env.client, &tensorboard_resource()).await;
    let uid = env
        .submit(&job("board", spec.clone()))
        .await
        .uid()
        .expect("uid");
    let boards: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &tensorboard_resource());
    let created = eventually("the TensorBoard", WAIT, async || {
        boards.get_opt("board").await.ok().flatten()
    })
    .await;
    let owner = &created.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("TensorFlowTrainingJob", "board", uid.as_str())
    );
    assert_eq!(
        created.data["spec"]["trainingLogFilesets"],
        json!(["t9k://pvc/logs/mnist"])
    );
    let reported = env
        .wait_job("board", "reporting its TensorBoard", |j| {
            j.status.as_ref().is_some_and(|s| s.tensorboard.is_some())
        })
        .await;
    let board = reported
        .status
        .and_then(|s| s.tensorboard)
        .expect("tensorboard status");
    let dependent = board.dependent.expect("the dependent reference");
    assert_eq!(
        (
            dependent.api_version.as_str(),
            dependent.kind.as_str(),
            dependent.name.as_str()
        ),
        ("tensorstack.dev/v1beta1", "TensorBoard", "board")
    );
    assert_eq!(dependent.uid, created.uid());
    assert!(!board.ready, "nothing runs the TensorBoard yet");
    assert_eq!(board.reason.as_deref(), Some("DependentNotReady"));
    // Acting as the TensorBoard's controller: it is Running, so the job's
    // status says it is ready.
    boards
        .patch_status(
            "board",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("TensorBoard status written");
    let ready = env
        .wait_job("board", "its TensorBoard ready", |j| {
            j.status
                .as_ref()
                .and_then(|s| s.tensorboard.as_ref())
                .is_some_and(|t| t.ready)
        })
        .await
        .status
        .and_then(|s| s.tensorboard)
        .expect("tensorboard status");
    assert_eq!(ready.reason.as_deref(), Some("DependentReady"));
    assert_eq!(ready.note.as_deref(), Some("TensorBoard [board] is ready"));
    assert_eq!(ready.action.as_deref(), Some("NOP"));
    env.wait_phase("board", JobPhase::Succeeded).await;

    // A job created paused has its TensorBoard from admission on: the spec
    // describes the TensorBoard to be created, placed or not.
    let mut paused = spec;
    paused["runMode"] = json!({"pause": {"enabled": true}});
    env.submit(&job("paused-board", paused)).await;
    env.wait_phase("paused-board", JobPhase::Paused).await;
    eventually("the paused job's TensorBoard", WAIT, async || {
        boards.get_opt("paused-board").await.ok().flatten()
    })
    .await;
    assert!(
        env.job_pods("paused-board").await.is_empty(),
        "a paused job has no pods"
    );
}

async fn invalid_specs_fail_with_invalid_spec_and_others_run(ground: Ground) {
    let env = Setup::on(ground).own_namespace("invalid").start().await;
    let worker = || replica("worker", 1, &[PENDING, run("0.5")]);
    let mut trainer = worker();
    trainer["template"]["spec"]["containers"][0]["name"] = json!("trainer");
    let mut bad_port = worker();
    bad_port["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "tfjob-port", "containerPort": 70000}]);
    // What the CRD refuses at the door never reaches the controller
    // (tests/bad_input.rs); these are what only the controller can check.
    let cases: Vec<(String, Value, &str)> = vec![
        (
            "no-tensorflow".into(),
            json!({"replicaSpecs": [trainer]}),
            r#"spec.replicaSpecs[0].template.spec.containers: Required value: a container named "tensorflow""#,
        ),
        (
            "bad-port".into(),
            json!({"replicaSpecs": [bad_port]}),
            "spec.replicaSpecs[0].template.spec.containers[0].ports[0].containerPort: Invalid value: 70000",
        ),
        (
            "9lives".into(),
            json!({"replicaSpecs": [worker()]}),
            "must be a DNS-1035 label",
        ),
        (
            "bad-cleanup".into(),
            json!({"replicaSpecs": [worker()], "runPolicy": {"cleanUpPolicy": "sometimes"}}),
            r#"spec.runPolicy.cleanUpPolicy: Unsupported value: "sometimes""#,
        ),
        (
            "bad-selector".into(),
            json!({"replicaSpecs": [worker()], "scheduler": {"federation": {"clusterSelector": {
                "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}}}}),
            r#"spec.scheduler.federation.clusterSelector.matchExpressions[0].operator: Unsupported value: "Near""#,
        ),
    ];
    let events_before = env
        .events()
        .list(&ListParams::default())
        .await
        .expect("events");
    assert!(events_before.items.is_empty());
    for (name, spec, _) in &cases {
        env.submit(&job(name, spec.clone())).await;
    }
    // A paused job whose resumeSpecs change later: that is allowed.
    let paused = json!({
        "runMode": {"pause": {"enabled": true, "resumeSpecs": [{"type": "worker", "args": ["--a"]}]}},
        "replicaSpecs": [worker()],
    });
    env.submit(&job("resumer", paused)).await;
    // A valid job alongside.
    env.submit(&job("fine", json!({"replicaSpecs": [worker()]})))
        .await;

    env.wait_phase("resumer", JobPhase::Paused).await;
    env.jobs()
        .patch(
            "resumer",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runMode": {"pause": {"resumeSpecs": [
                {"type": "worker", "args": ["--b"]}]}}}})),
        )
        .await
        .expect("change resumeSpecs");

    let all = cases.clone();
    for (name, _, expected) in &all {
        let failed = env.wait_phase(name, JobPhase::Failed).await;
        let (status, reason, message) = condition(&failed, "Failed").expect("Failed condition");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", "InvalidSpec"),
            "{name}"
        );
        assert!(
            message.contains(expected),
            "{name}: {message:?} lacks {expected:?}"
        );
        let uid = failed.uid().expect("uid");
        let event = eventually(
            &format!("an InvalidSpec Event about {name}"),
            WAIT,
            async || {
                env.events_about(&uid)
                    .await
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("InvalidSpec"))
            },
        )
        .await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert!(event.note.as_deref().unwrap_or_default().contains(expected));
        let regarding = event.regarding.expect("regarding");
        assert_eq!(
            (regarding.kind.as_deref(), regarding.name.as_deref()),
            (Some("TensorFlowTrainingJob"), Some(name.as_str()))
        );
    }
    env.wait_phase("fine", JobPhase::Succeeded).await;
    let resumer = env.job("resumer").await;
    assert_eq!(
        (phase_of(&resumer), condition(&resumer, "Failed")),
        (Some(JobPhase::Paused), None),
        "an edit of resumeSpecs fails no job"
    );
    for (name, _, _) in &all {
        assert!(env.job_pods(name).await.is_empty(), "{name} has no pods");
        assert!(
            env.job_services(name).await.is_empty(),
            "{name} has no services"
        );
    }
}

async fn deleting_a_running_job_removes_its_pods_and_services_first(ground: Ground) {
    let env = Setup::on(ground).own_namespace("delete").start().await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("3600")]),
        replica("worker", 2, &[PENDING, run("3600")]),
    ]});
    env.submit(&job("doomed", spec)).await;
    let running = env.wait_phase("doomed", JobPhase::Running).await;
    assert!(
        running
            .finalizers()
            .contains(&"federation.tfjob.io/cleanup".into())
    );
    assert_eq!(env.job_services("doomed").await.len(), 3);
    let jobs = Recorder::start(env.jobs()).await;
    let pods = Recorder::start(env.pods()).await;
    let services = Recorder::start(env.services()).await;
    env.jobs()
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete the job");
    eventually("the job to be gone", WAIT, async || {
        env.jobs()
            .get_opt("doomed")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(env.job_pods("doomed").await.is_empty());
    assert!(env.job_services("doomed").await.is_empty());
    // The watches may still be delivering.
    let deleted = |events: Vec<(Change, String)>| {
        events.iter().filter(|(c, _)| *c == Change::Deleted).count()
    };
    eventually("the watches to deliver every deletion", WAIT, async || {
        let p = deleted(
            pods.events()
                .into_iter()
                .map(|(c, o)| (c, o.name_any()))
                .collect(),
        );
        let s = deleted(
            services
                .events()
                .into_iter()
                .map(|(c, o)| (c, o.name_any()))
                .collect(),
        );
        let j = deleted(
            jobs.events()
                .into_iter()
                .map(|(c, o)| (c, o.name_any()))
                .collect(),
        );
        (p == 3 && s == 3 && j == 1).then_some(())
    })
    .await;
    let job_gone = jobs
        .of("doomed")
        .into_iter()
        .find(|(c, _)| *c == Change::Deleted)
        .map(|(_, j)| resource_version(&j))
        .expect("the job's DELETED event");
    let mut last_dependent = 0;
    let mut gone = Vec::new();
    for (change, pod) in pods.events() {
        if change == Change::Deleted {
            last_dependent = last_dependent.max(resource_version(&pod));
            gone.push(pod.name_any());
        }
    }
    for (change, service) in services.events() {
        if change == Change::Deleted {
            last_dependent = last_dependent.max(resource_version(&service));
            gone.push(service.name_any());
        }
    }
    assert_eq!(gone.len(), 6, "3 pods and 3 services deleted: {gone:?}");
    assert!(
        last_dependent < job_gone,
        "the pods and services ({last_dependent}) went before the job ({job_gone})"
    );
    let uid = running.uid().expect("uid");
    let reasons: Vec<String> = env
        .events_about(&uid)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Deleting"),
        "an Event records the deletion: {reasons:?}"
    );
}

async fn a_killed_controller_resumes_without_duplicates(ground: Ground) {
    let mut env = Setup::on(ground).own_namespace("restart").start().await;
    let pods = Recorder::start(env.pods()).await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("4")]),
        with_policy(replica("worker", 2, &[PENDING, run("0.5"), exits("137,0")]), "ExitCode"),
        replica("ps", 1, &[PENDING, run("3600")]),
    ]});
    env.submit(&job("phoenix", spec)).await;
    let restarted = env
        .wait_job("phoenix", "with both workers restarted", |j| {
            backoff_count(j) == 2
        })
        .await;
    assert_eq!(restart_count(&restarted, "worker"), 2);
    // Both workers' second pods finish, then the controller dies.
    eventually("the restarted workers to succeed", WAIT, async || {
        let pods = env.job_pods("phoenix").await;
        ["phoenix-worker-0", "phoenix-worker-1"]
            .iter()
            .all(|name| pods.get(*name).is_some_and(|p| pod_phase(p) == "Succeeded"))
            .then_some(())
    })
    .await;
    env.kill_controller();
    // The chief finishes while no controller runs.
    eventually("the chief to succeed", WAIT, async || {
        let pod = env.pods().get_opt("phoenix-chief-0").await.ok()??;
        (pod_phase(&pod) == "Succeeded").then_some(())
    })
    .await;
    env.start_controller().await;
    let done = env.wait_phase("phoenix", JobPhase::Succeeded).await;
    assert_eq!(
        backoff_count(&done),
        2,
        "the backoff count survives the restart"
    );
    assert_eq!(restart_count(&done, "worker"), 2);
    pods_stay(
        &env,
        "phoenix",
        &["phoenix-chief-0", "phoenix-worker-0", "phoenix-worker-1"],
    )
    .await;
    let added = pods.added_per_name();
    let expected: BTreeMap<String, usize> = [
        ("phoenix-chief-0", 1),
        ("phoenix-ps-0", 1),
        ("phoenix-worker-0", 2),
        ("phoenix-worker-1", 2),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(added, expected, "pods created per name");
}

async fn a_controller_killed_at_any_moment_never_duplicates_pods(ground: Ground) {
    let mut env = Setup::on(ground).own_namespace("restarts").start().await;
    let pods = Recorder::start(env.pods()).await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("2.5")]),
        replica("worker", 3, &[PENDING, run("2")]),
    ]});
    env.submit(&job("steady", spec)).await;
    // Kill early (while pods are being created) and again while they run.
    for pause in [Duration::from_millis(150), Duration::from_millis(600)] {
        tokio::time::sleep(pause).await;
        env.kill_controller();
        tokio::time::sleep(Duration::from_millis(200)).await;
        env.start_controller().await;
    }
    env.wait_phase("steady", JobPhase::Succeeded).await;
    let added = pods.added_per_name();
    assert_eq!(added.len(), 4, "{added:?}");
    assert!(
        added.values().all(|n| *n == 1),
        "one pod per replica: {added:?}"
    );
}

async fn kubectl_shows_the_printer_columns(ground: Ground) {
    let env = Setup::on(ground).own_namespace("kubectl").start().await;
    env.submit(&job(
        "done",
        json!({"replicaSpecs": [replica("worker", 1, &[PENDING, run("0.3")])]}),
    ))
    .await;
    env.submit(&job(
        "busy",
        json!({"replicaSpecs": [replica("worker", 2, &[PENDING, run("3600")])]}),
    ))
    .await;
    env.wait_phase("done", JobPhase::Succeeded).await;
    env.wait_job("busy", "running two replicas", |j| aggregate(j)[2] == 2)
        .await;
    let rows = |text: &str| -> Vec<Vec<String>> {
        text.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    let table = rows(&env.kubectl(&["get", "tftj"]).await);
    assert_eq!(table[0], ["NAME", "PHASE", "RUNNING", "AGE"]);
    assert_eq!(table[1][..3], ["busy", "Running", "2"]);
    assert_eq!(table[2][..3], ["done", "Succeeded", "0"]);
    let wide = rows(
        &env.kubectl(&[
            "get",
            "tensorflowtrainingjobs.batch.tensorstack.dev",
            "-o",
            "wide",
        ])
        .await,
    );
    assert_eq!(
        wide[0],
        ["NAME", "PHASE", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]
    );
    assert_eq!(wide[1][..5], ["busy", "Running", "2", "0", "0"]);
    assert_eq!(wide[2][..5], ["done", "Succeeded", "0", "1", "0"]);
}

/// Jobs past the start gate's budget wait their turn and all run: with a
/// budget of one job's replicas, jobs start one at a time, each once the one
/// before has its pods. A job deleted while it waits goes without pods, and
/// no share of the gate is left held or queued at the end.
async fn jobs_past_the_start_budget_wait_their_turn(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("start-gate")
        .settings("startBudgetReplicas: 2\n")
        .start()
        .await;
    let spec = json!({"replicaSpecs": [replica("worker", 2, &[PENDING, run("1")])]});
    let names = ["gate-a", "gate-b", "gate-c", "gate-d"];
    for name in names {
        env.submit(&job(name, spec.clone())).await;
    }
    let jobs = env.jobs();
    jobs.delete("gate-d", &DeleteParams::default())
        .await
        .expect("delete gate-d");
    for name in &names[..3] {
        env.wait_phase(name, JobPhase::Succeeded).await;
    }
    eventually("gate-d gone, with no pods", WAIT, async || {
        let gone = jobs.get_opt("gate-d").await.ok()?.is_none();
        (gone && env.job_pods("gate-d").await.is_empty()).then_some(())
    })
    .await;
    let metrics = env.scrape().await;
    for state in ["starting", "queued"] {
        let line = format!("tfjob_federator_jobs_starting{{state=\"{state}\"}} 0");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_jobs_succeed_with_few_status_writes() {
    const JOBS: usize = 200;
    let env = Setup::on(Ground::Sim)
        .own_namespace("many")
        .settings("statusWriteIntervalMs: 300\nstatusDetailIntervalMs: 1000\n")
        .log_filter("info,tfjob_federator::actors::job=debug")
        .max_pods(400)
        .start()
        .await;
    let recorder = Recorder::start(env.jobs()).await;
    let started = Instant::now();
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[PENDING, run("1")]),
        replica("worker", 2, &[PENDING, run("0.8")]),
        replica("ps", 1, &[PENDING, run("3600")]),
    ]});
    let jobs = env.jobs();
    futures::stream::iter(0..JOBS)
        .map(|i| {
            let jobs = jobs.clone();
            let job = job(&format!("load-{i:03}"), spec.clone());
            async move {
                jobs.create(&PostParams::default(), &job)
                    .await
                    .expect("create job")
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let submitted = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let list = jobs.list(&ListParams::default()).await.expect("list jobs");
        let failed: Vec<String> = list
            .items
            .iter()
            .filter(|j| phase_of(j) == Some(JobPhase::Failed))
            .map(|j| j.name_any())
            .collect();
        assert!(failed.is_empty(), "jobs failed: {failed:?}");
        let succeeded = list
            .items
            .iter()
            .filter(|j| phase_of(j) == Some(JobPhase::Succeeded))
            .count();
        if succeeded == JOBS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {succeeded} of {JOBS} jobs succeeded"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_done = started.elapsed();
    // Let the clean-ups land and the statuses settle before counting: no
    // replica left creating, pending or running (workers still running when
    // their chief ended were deleted too), every ps deleted.
    eventually(
        "every job's status to settle",
        Duration::from_secs(60),
        async || {
            let list = jobs.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|job| {
                    let [
                        creating,
                        pending,
                        running,
                        succeeded,
                        failed,
                        unknown,
                        deleted,
                    ] = aggregate(job);
                    creating + pending + running + failed + unknown == 0
                        && succeeded >= 1
                        && deleted >= 1
                        && succeeded + deleted == 4
                })
                .then_some(())
        },
    )
    .await;
    let params = ListParams::default().labels("federation.tfjob.io/replica-type=ps");
    assert!(
        env.pods()
            .list(&params)
            .await
            .expect("list")
            .items
            .is_empty()
    );

    // The status changes each job's watch showed.
    let mut seen: BTreeMap<String, Vec<TensorFlowTrainingJob>> = BTreeMap::new();
    for (change, job) in recorder.events() {
        let history = seen.entry(job.name_any()).or_default();
        let previous = history.last().and_then(|j| j.status.as_ref());
        if change == Change::Modified && job.status.is_some() && previous != job.status.as_ref() {
            history.push(job);
        }
    }
    assert_eq!(seen.len(), JOBS);
    // The writes the controller sent, per job, from its log.
    let mut sent: BTreeMap<String, Vec<StatusWrite>> = BTreeMap::new();
    for line in env.log().lines() {
        if let Some((job, write)) = StatusWrite::parse(line) {
            sent.entry(job).or_default().push(write);
        }
    }
    let mut histogram: BTreeMap<usize, usize> = BTreeMap::new();
    for history in seen.values() {
        *histogram.entry(history.len()).or_default() += 1;
    }
    let total: usize = seen.values().map(Vec::len).sum();
    eprintln!(
        "{JOBS} jobs: submitted in {submitted:?}, all Succeeded after {all_done:?}; \
         status writes per job: mean {:.2}, histogram {histogram:?}",
        total as f64 / JOBS as f64
    );
    // How many writes a job makes depends on how long its pods take, which
    // depends on the machine's load; what the controller promises is the
    // spacing (docs/src/api/the-controller.md, `statusDetailIntervalMs`): a write of replica details
    // alone comes 1 s after the previous write, then 2 s, then 4 s, and 4 s
    // while the job is Pending (its replicas starting) or once it has ended.
    // A change of phase, conditions or restarts
    // waits `statusWriteIntervalMs`, and a write the job's next step depends
    // on (a placement, a restart, the end) goes at once. The log's times are
    // when the controller sent each write; the watch cannot stand in for
    // them, as its delivery lags by seconds under load.
    for (name, history) in &seen {
        let writes = sent.get(name).map(Vec::as_slice).unwrap_or_default();
        assert!(
            history.len() <= writes.len(),
            "job {name}: the watch saw {} status changes, the controller logged {} writes",
            history.len(),
            writes.len()
        );
        let mut detail_writes = 0u32;
        for pair in writes.windows(2) {
            let [before, after] = pair else {
                unreachable!("windows of two")
            };
            let required = if after.persist {
                Duration::ZERO
            } else if after.summary_changed {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(1 << detail_writes.min(2))
            };
            detail_writes = match (after.summary_changed, after.waits_longest) {
                (false, _) => detail_writes + 1,
                (true, false) => 0,
                (true, true) => 2,
            };
            let gap = after.at.duration_since(before.at).unsigned_abs();
            assert!(
                gap + Duration::from_millis(5) >= required,
                "job {name}: a status write {gap:?} after the previous one, where {required:?} \
                 is due:\n{writes:#?}"
            );
        }
    }
    let problems = env.controller_problems();
    assert!(
        problems.is_empty(),
        "the controller logged problems:\n{}",
        problems.join("\n")
    );
}

/// Issue 26: a job on the straight path (placed, Running, Succeeded) costs
/// at most three status writes, and a watcher still sees every phase; its
/// Events say what the conditions do not (no Event repeats a condition's
/// reason and message). Counted from a watch of the job: each Modified event
/// whose status differs from the one before is one status write the API
/// server stored.
async fn the_straight_path_costs_three_status_writes(ground: Ground) {
    let env = Setup::on(ground)
        .own_namespace("straight-path")
        .log_filter("info,tfjob_federator::actors::job=debug")
        .start()
        .await;
    let recorder = Recorder::start(env.jobs()).await;
    // Pods pend long enough for a replica-details write to be tempting, and
    // the workers end before the chief: every replica ends on its own, so
    // no clean-up follows the end (a job whose chief ends while workers run
    // has them deleted, and that shows in one more write).
    let pending = ("pending-seconds", "0.7");
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[pending, run("2")]),
        replica("worker", 2, &[pending, run("1.5")]),
    ]});
    let uid = env.submit(&job("straight", spec)).await.uid().expect("uid");
    env.wait_phase("straight", JobPhase::Succeeded).await;
    // Writes after the end (the replicas' last states) come within the
    // longest detail spacing (4 × statusDetailIntervalMs): wait past it.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let mut writes: Vec<TensorFlowTrainingJob> = Vec::new();
    let mut previous = None;
    for (change, job) in recorder.of("straight") {
        if change == Change::Modified && job.status.is_some() && job.status != previous {
            writes.push(job.clone());
        }
        previous = job.status;
    }
    let why: Vec<String> = env
        .log()
        .lines()
        .filter(|l| l.contains("writing the status") && l.contains("\"straight\""))
        .map(str::to_string)
        .collect();
    let summary: Vec<String> = writes
        .iter()
        .map(|j| {
            let status = j.status.as_ref().expect("a status");
            format!(
                "{:?} placement={} aggregate={:?}",
                status.phase,
                status.placement.is_some(),
                aggregate(j)
            )
        })
        .collect();
    let seen: Vec<JobPhase> = writes
        .iter()
        .filter_map(phase_of)
        .fold(Vec::new(), |mut seen, p| {
            if seen.last() != Some(&p) {
                seen.push(p);
            }
            seen
        });
    assert_eq!(
        seen,
        [JobPhase::Pending, JobPhase::Running, JobPhase::Succeeded],
        "every phase is seen: {summary:#?}"
    );
    assert!(
        writes.len() <= 3,
        "{} status writes on the straight path:\n{summary:#?}\nwhy:\n{}",
        writes.len(),
        why.join("\n")
    );
    let conditions: Vec<(String, String)> = writes
        .iter()
        .flat_map(|j| {
            j.status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default()
        })
        .map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
        .collect();
    for event in env.events_about(&uid).await {
        let said = (
            event.reason.clone().unwrap_or_default(),
            event.note.clone().unwrap_or_default(),
        );
        assert!(
            !conditions.contains(&said),
            "the Event {said:?} repeats a condition the status shows"
        );
    }
    eprintln!(
        "status writes: {}; Events: {:?}",
        writes.len(),
        env.events_about(&uid)
            .await
            .iter()
            .map(|e| e.reason.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    );
}

/// A status write as the controller's debug log tells it.
#[derive(Debug)]
struct StatusWrite {
    at: jiff::Timestamp,
    summary_changed: bool,
    persist: bool,
    /// Pending or ended: replica details alone wait the longest after it.
    waits_longest: bool,
}

impl StatusWrite {
    /// The job and the write, if `line` is a "writing the status" line.
    fn parse(line: &str) -> Option<(String, StatusWrite)> {
        let entry: Value = serde_json::from_str(line).ok()?;
        let fields = &entry["fields"];
        if fields["message"] != "writing the status" {
            return None;
        }
        let at = entry["timestamp"]
            .as_str()?
            .parse()
            .expect("a log timestamp");
        let phase = fields["phase"].as_str().unwrap_or_default();
        let write = StatusWrite {
            at,
            summary_changed: fields["summary_changed"]
                .as_bool()
                .expect("summary_changed"),
            persist: fields["persist"].as_bool().expect("persist"),
            waits_longest: ["Pending", "Succeeded", "Failed"]
                .iter()
                .any(|p| phase.contains(p)),
        };
        Some((fields["job"].as_str()?.to_string(), write))
    }
}

// The scenarios above that run on both grounds. Not on the real ground: the
// 200-job run (it sizes the simulated nodes; throughput is measured by the
// benchmarks).
on_both_grounds!(
    chief_workers_and_ps_run_then_succeed,
    without_a_chief_worker_0_decides,
    exit_code_policy_restarts_only_retryable_codes,
    exit_code_retries_a_failed_pod_without_an_exit_code,
    an_admission_patch_that_conflicts_is_retried,
    on_failure_stops_at_the_backoff_limit,
    never_fails_the_job_but_an_evaluator_only_sets_replica_failure,
    active_deadline_fails_the_job_and_deletes_every_pod,
    clean_up_policies_leave_the_right_pods,
    pause_then_resume_with_resume_specs,
    debug_mode_runs_the_debug_command_and_tolerates_failures,
    tensorboard_is_created_and_reported,
    invalid_specs_fail_with_invalid_spec_and_others_run,
    deleting_a_running_job_removes_its_pods_and_services_first,
    a_killed_controller_resumes_without_duplicates,
    a_controller_killed_at_any_moment_never_duplicates_pods,
    kubectl_shows_the_printer_columns,
    t9k_scheduler_gets_a_pod_group,
    the_straight_path_costs_three_status_writes,
    jobs_past_the_start_budget_wait_their_turn,
);
