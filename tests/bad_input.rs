//! The bad-input suite (issue 12): a few hundred malformed jobs, generated
//! from a catalogue of mistakes applied at every place they can occur. Each
//! job is submitted to a simulated and to a real cluster, each with the
//! controller running. On both grounds every job is either refused by the
//! API server (`kubectl apply` fails) with a message naming the field, or
//! stored and then `Failed` with reason `InvalidSpec` naming it; none runs,
//! none stays without a status, the controller logs no panic, and a valid
//! job submitted afterwards succeeds. The two grounds must give the same
//! verdict for every job: the same causes for a refusal, the same message
//! for an `InvalidSpec`.
//!
//! Issue 22 added the door's other cases: pod templates that
//! kube-apiserver's pod validation or PodSecurity admission refuses, as
//! plain pods and as jobs on both grounds (the controller's own checks must
//! say what kube-apiserver says), and cluster names no cluster has,
//! namespaces whose Pod Security labels are no level, and member address
//! templates that make no DNS host name.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::operator::*;
use common::real::job_resource;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::{JobPhase, PodSecurityLevel};
use tfjob_federator::isolation;

/// What happened to one malformed job on one ground.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// The API server's refusal: its message and every (field, message) cause.
    Refused {
        message: String,
        causes: BTreeSet<(String, String)>,
    },
    /// Stored, then Failed with this reason and message.
    Failed { reason: String, message: String },
}

impl Verdict {
    fn text(&self) -> &str {
        match self {
            Verdict::Refused { message, .. } => message,
            Verdict::Failed { message, .. } => message,
        }
    }
}

/// One malformed job and the field its verdict must name.
struct Case {
    name: String,
    job: Value,
    field: String,
}

fn container() -> Value {
    json!({"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0",
           "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}})
}

fn replica_spec(replica_type: &str, replicas: i64) -> Value {
    json!({
        "type": replica_type,
        "replicas": replicas,
        "template": {
            "metadata": {"annotations": {"sim.federation.tfjob.io/run-seconds": "0.2"}},
            "spec": {"containers": [container()]},
        },
    })
}

fn job_of(name: &str, specs: Vec<Value>) -> Value {
    json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": name},
        "spec": {"replicaSpecs": specs},
    })
}

/// Valid jobs the mistakes are made in: every replica type, in several
/// positions.
fn bases() -> Vec<Vec<Value>> {
    vec![
        vec![replica_spec("worker", 2)],
        vec![replica_spec("chief", 1), replica_spec("worker", 2)],
        vec![
            replica_spec("chief", 1),
            replica_spec("worker", 1),
            replica_spec("ps", 1),
        ],
        vec![
            replica_spec("ps", 2),
            replica_spec("worker", 1),
            replica_spec("evaluator", 1),
            replica_spec("chief", 1),
        ],
    ]
}

type Mistake = (&'static str, fn(&mut Value));

/// Mistakes in one replica spec, by the field (below the spec) they break.
fn replica_mistakes() -> Vec<Mistake> {
    vec![
        ("replicas", |r| r["replicas"] = json!(0)),
        ("replicas", |r| r["replicas"] = json!(-3)),
        ("replicas", |r| r["replicas"] = json!(1001)),
        ("replicas", |r| r["replicas"] = json!(2147483647)),
        ("replicas", |r| r["replicas"] = json!("two")),
        ("replicas", |r| r["replicas"] = json!(1.5)),
        ("replicas", |r| r["replicas"] = json!(true)),
        ("replicas", |r| r["replicas"] = json!([1])),
        ("type", |r| r["type"] = json!("master")),
        ("type", |r| r["type"] = json!("Worker")),
        ("type", |r| r["type"] = json!("")),
        ("type", |r| r["type"] = json!(7)),
        ("type", |r| {
            r.as_object_mut().map(|o| o.remove("type"));
        }),
        ("restartPolicy", |r| r["restartPolicy"] = json!("Sometimes")),
        ("restartPolicy", |r| r["restartPolicy"] = json!(["Never"])),
        ("template", |r| r["template"] = json!("a pod")),
        ("template", |r| {
            r.as_object_mut().map(|o| o.remove("template"));
        }),
        ("template.spec", |r| r["template"]["spec"] = json!([])),
        ("template.spec.containers", |r| {
            r["template"]["spec"]["containers"] = json!({})
        }),
        ("template.spec.containers", |r| {
            r["template"]["spec"]["containers"][0]["name"] = json!("main")
        }),
        ("template.spec.containers[0].image", |r| {
            r["template"]["spec"]["containers"][0]["image"] = json!(42)
        }),
        ("template.spec.containers[0].ports[0].containerPort", |r| {
            r["template"]["spec"]["containers"][0]["ports"] =
                json!([{"name": "tfjob-port", "containerPort": 70000}])
        }),
        // Issue 22: what kube-apiserver's pod validation refuses.
        ("template.spec.containers[1].name", |r| {
            r["template"]["spec"]["containers"] = json!([container(), container()])
        }),
        ("template.spec.containers[1].image", |r| {
            r["template"]["spec"]["containers"] = json!([container(), {"name": "sidecar"}])
        }),
    ]
}

/// Mistakes in the rest of the spec, by the field they break.
fn spec_mistakes() -> Vec<Mistake> {
    vec![
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] = json!([])
        }),
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] = json!({})
        }),
        ("spec.replicaSpecs", |j| {
            j["spec"].as_object_mut().map(|o| o.remove("replicaSpecs"));
        }),
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] = json!([
                replica_spec("worker", 1),
                replica_spec("ps", 1),
                replica_spec("chief", 1),
                replica_spec("evaluator", 1),
                replica_spec("worker", 1)
            ])
        }),
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] =
                json!([replica_spec("worker", 1), replica_spec("worker", 2)])
        }),
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] = json!([replica_spec("ps", 2)])
        }),
        ("spec.replicaSpecs[0].replicas", |j| {
            j["spec"]["replicaSpecs"] = json!([replica_spec("chief", 2), replica_spec("worker", 1)])
        }),
        ("spec.replicaSpecs[1].replicas", |j| {
            j["spec"]["replicaSpecs"] =
                json!([replica_spec("worker", 1), replica_spec("evaluator", 3)])
        }),
        ("spec", |j| j["spec"] = json!([])),
        ("spec.runPolicy", |j| j["spec"]["runPolicy"] = json!("soon")),
        ("spec.runPolicy.backoffLimit", |j| {
            j["spec"]["runPolicy"] = json!({"backoffLimit": -1})
        }),
        ("spec.runPolicy.backoffLimit", |j| {
            j["spec"]["runPolicy"] = json!({"backoffLimit": "3"})
        }),
        ("spec.runPolicy.activeDeadlineSeconds", |j| {
            j["spec"]["runPolicy"] = json!({"activeDeadlineSeconds": 0})
        }),
        ("spec.runPolicy.activeDeadlineSeconds", |j| {
            j["spec"]["runPolicy"] = json!({"activeDeadlineSeconds": -5})
        }),
        ("spec.runPolicy.activeDeadlineSeconds", |j| {
            j["spec"]["runPolicy"] = json!({"activeDeadlineSeconds": 1.5})
        }),
        ("spec.runPolicy.cleanUpPolicy", |j| {
            j["spec"]["runPolicy"] = json!({"cleanUpPolicy": "sometimes"})
        }),
        ("spec.scheduler.federation.strategy", |j| {
            j["spec"]["scheduler"] = json!({"federation": {"strategy": "Random"}})
        }),
        (
            "spec.scheduler.federation.weights",
            |j| {
                j["spec"]["scheduler"] =
                    json!({"federation": {"strategy": "Pack", "weights": {"a": -1}}})
            },
        ),
        (
            "spec.scheduler.federation.weights",
            |j| {
                j["spec"]["scheduler"] =
                    json!({"federation": {"strategy": "Weighted", "weights": {"a": 0}}})
            },
        ),
        (
            "spec.scheduler.federation.clusterSelector.matchExpressions[0].operator",
            |j| {
                j["spec"]["scheduler"] = json!({"federation": {"clusterSelector": {
                    "matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}}})
            },
        ),
        (
            "spec.scheduler.federation.clusterSelector.matchExpressions[0].values",
            |j| {
                j["spec"]["scheduler"] = json!({"federation": {"clusterSelector": {
                    "matchExpressions": [{"key": "zone", "operator": "In"}]}}})
            },
        ),
        ("spec.scheduler.t9kScheduler.priority", |j| {
            j["spec"]["scheduler"] = json!({"t9kScheduler": {"queue": "default", "priority": 101}})
        }),
        ("spec.scheduler.t9kScheduler.queue", |j| {
            j["spec"]["scheduler"] = json!({"t9kScheduler": {"priority": 1}})
        }),
        ("spec.runMode.debug.replicaSpecs[0].type", |j| {
            j["spec"]["runMode"] = json!({"debug": {"enabled": true,
                "replicaSpecs": [{"type": "master"}]}})
        }),
        ("spec.runMode.debug.enable", |j| {
            j["spec"]["runMode"] = json!({"debug": {"enabled": true, "enable": false}})
        }),
        ("spec.runMode.pause.resumeSpecs[0].type", |j| {
            j["spec"]["runMode"] = json!({"pause": {"enabled": true,
                "resumeSpecs": [{"type": "evaluator"}]}})
        }),
        ("spec.runMode.pause.resumeSpecs[0].command", |j| {
            j["spec"]["runMode"] = json!({"pause": {"enabled": true,
                "resumeSpecs": [{"type": "worker", "command": []}]}})
        }),
        ("metadata.name", |j| {
            j["metadata"]["name"] = json!(format!("long-{}", "n".repeat(50)))
        }),
        ("metadata.name", |j| j["metadata"]["name"] = json!("9lives")),
        // Issue 22: weights beyond 0–100, names and selectors that can
        // never match, and the job-size bound.
        (
            "spec.scheduler.federation.weights",
            |j| {
                j["spec"]["scheduler"] =
                    json!({"federation": {"strategy": "Weighted", "weights": {"member-1": 101}}})
            },
        ),
        ("spec.scheduler.federation.clusterNames[0]", |j| {
            j["spec"]["scheduler"] = json!({"federation": {"clusterNames": ["Member-1"]}})
        }),
        (
            "spec.scheduler.federation.clusterSelector.matchLabels",
            |j| {
                j["spec"]["scheduler"] = json!({"federation": {"clusterSelector": {"matchLabels": {"gpu type": "a100"}}}})
            },
        ),
        (
            "spec.scheduler.federation.clusterSelector.matchExpressions[0].key",
            |j| {
                j["spec"]["scheduler"] = json!({"federation": {"clusterSelector": {
                    "matchExpressions": [{"key": "zone/", "operator": "Exists"}]}}})
            },
        ),
        ("spec.replicaSpecs", |j| {
            j["spec"]["replicaSpecs"] = json!([
                replica_spec("chief", 1),
                replica_spec("worker", 1000),
                replica_spec("ps", 1000)
            ])
        }),
        ("spec.replicaSpecs", |j| {
            let mut worker = replica_spec("worker", 400);
            worker["template"]["metadata"]["annotations"]["notes"] = json!("x".repeat(50_000));
            j["spec"]["replicaSpecs"] = json!([worker])
        }),
    ]
}

/// Every case: each replica mistake in each replica spec of each base job,
/// then the spec-wide mistakes.
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut n = 0;
    for base in bases() {
        for at in 0..base.len() {
            for (field, mistake) in replica_mistakes() {
                let mut specs = base.clone();
                mistake(&mut specs[at]);
                let name = format!("bad-{n:03}");
                n += 1;
                cases.push(Case {
                    job: job_of(&name, specs),
                    name,
                    field: format!("spec.replicaSpecs[{at}].{field}"),
                });
            }
        }
    }
    for (field, mistake) in spec_mistakes() {
        let name = format!("bad-{n:03}");
        n += 1;
        let mut job = job_of(&name, vec![replica_spec("worker", 1)]);
        mistake(&mut job);
        let name = job["metadata"]["name"]
            .as_str()
            .unwrap_or(&name)
            .to_string();
        cases.push(Case {
            name,
            job,
            field: field.to_string(),
        });
    }
    cases
}

/// Submits a job as raw JSON: the refusal, or None once stored.
async fn submit(env: &Env, case: &Case) -> Option<Verdict> {
    let object: DynamicObject = serde_json::from_value(case.job.clone()).expect("a job object");
    match env.raw_jobs().create(&PostParams::default(), &object).await {
        Ok(_) => None,
        Err(kube::Error::Api(status)) => Some(Verdict::Refused {
            message: status.message.clone(),
            causes: status
                .details
                .iter()
                .flat_map(|d| d.causes.iter())
                .map(|c| (c.field.clone(), c.message.clone()))
                .collect(),
        }),
        Err(e) => panic!("submitting {}: {e}", case.name),
    }
}

/// The phase and, when Failed, the verdict of a stored job.
async fn outcome(env: &Env, name: &str) -> Verdict {
    eventually(&format!("job {name} to end"), WAIT, async || {
        let job = env.raw_jobs().get(name).await.ok()?;
        let status = job.data.get("status")?;
        match status.get("phase")?.as_str()? {
            "Failed" => {
                let failed = status
                    .get("conditions")?
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Failed")?;
                Some(Verdict::Failed {
                    reason: failed["reason"].as_str().unwrap_or_default().to_string(),
                    message: failed["message"].as_str().unwrap_or_default().to_string(),
                })
            }
            "Running" | "Succeeded" => panic!("job {name} ran: {status}"),
            _ => None,
        }
    })
    .await
}

/// Every case's verdict on one ground, checked against the case.
async fn verdicts(env: &mut Env, cases: &[Case]) -> Vec<Verdict> {
    let mut refused = Vec::new();
    for case in cases {
        refused.push(submit(env, case).await);
    }
    let mut verdicts = Vec::new();
    for (case, refusal) in cases.iter().zip(refused) {
        let verdict = match refusal {
            Some(refusal) => refusal,
            None => outcome(env, &case.name).await,
        };
        if let Verdict::Failed { reason, .. } = &verdict {
            assert_eq!(reason, "InvalidSpec", "{}: {verdict:?}", case.name);
        }
        assert!(
            verdict.text().contains(&case.field),
            "{}: the verdict names {}: {verdict:?}\njob: {}",
            case.name,
            case.field,
            case.job
        );
        verdicts.push(verdict);
    }
    let fine = job(
        "fine",
        json!({"replicaSpecs": [replica("worker", 1, &[("run-seconds", "0.2")])]}),
    );
    env.submit(&fine).await;
    env.wait_phase("fine", JobPhase::Succeeded).await;
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
    verdicts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_jobs_get_the_same_verdict_on_both_grounds() {
    let cases = cases();
    assert!(cases.len() >= 200, "{} cases", cases.len());
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "every case has its own job name");

    let mut sim = Setup::on(Ground::Sim)
        .own_namespace("bad-input")
        .start()
        .await;
    let on_sim = verdicts(&mut sim, &cases).await;
    drop(sim);
    let mut real = Setup::on(Ground::Real)
        .own_namespace("bad-input")
        .start()
        .await;
    let on_real = verdicts(&mut real, &cases).await;

    let differing: Vec<String> = cases
        .iter()
        .zip(on_sim.iter().zip(&on_real))
        .filter(|(_, (s, r))| s != r)
        .map(|(case, (s, r))| format!("{}:\n  sim:  {s:?}\n  real: {r:?}", case.name))
        .collect();
    let refused = on_real
        .iter()
        .filter(|v| matches!(v, Verdict::Refused { .. }))
        .count();
    println!(
        "{} malformed jobs: {refused} refused by the API server, {} InvalidSpec; {} differ between the grounds",
        cases.len(),
        cases.len() - refused,
        differing.len()
    );
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}

/// A pod template kube-apiserver refuses, by pod validation (422) or by
/// the PodSecurity admission of a namespace enforcing `level` (403).
struct PodCase {
    name: &'static str,
    level: &'static str,
    template: Value,
}

fn tf_container(extra: Value) -> Value {
    let mut c = container();
    if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    c
}

/// A container that meets the `restricted` level.
fn hardened(extra: Value) -> Value {
    let mut context = json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    if let (Some(c), Some(extra)) = (context.as_object_mut(), extra.as_object()) {
        c.extend(extra.clone());
    }
    tf_container(json!({"securityContext": context}))
}

/// The eight templates of issue 22's finding 3, then every other Pod
/// Security check and pod-validation rule the controller checks.
fn pod_cases() -> Vec<PodCase> {
    let spec = |spec: Value| json!({"spec": spec});
    let one = |c: Value| json!({"spec": {"containers": [c]}});
    let case = |name, level, template| PodCase {
        name,
        level,
        template,
    };
    vec![
        case(
            "two-tensorflow",
            "baseline",
            spec(json!({"containers": [container(), container()]})),
        ),
        case(
            "apparmor-annotation",
            "baseline",
            json!({"metadata": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/tensorflow": "unconfined"}},
                "spec": {"containers": [container()]}}),
        ),
        case(
            "apparmor-profile",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
            )),
        ),
        case(
            "selinux-type",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}),
            )),
        ),
        case(
            "selinux-user",
            "baseline",
            spec(
                json!({"securityContext": {"seLinuxOptions": {"user": "system_u", "role": "system_r"}},
                "containers": [container()]}),
            ),
        ),
        case(
            "host-process",
            "baseline",
            spec(json!({"hostNetwork": true,
                "securityContext": {"windowsOptions": {"hostProcess": true}},
                "containers": [container()]})),
        ),
        case(
            "init-tensorflow",
            "baseline",
            spec(json!({"containers": [container()], "initContainers": [container()]})),
        ),
        case(
            "no-image",
            "baseline",
            spec(json!({"containers": [container(), {"name": "sidecar"}]})),
        ),
        case(
            "privileged",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"privileged": true}}),
            )),
        ),
        case(
            "capabilities",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_RAW"]}}}),
            )),
        ),
        case(
            "host-port",
            "baseline",
            one(tf_container(
                json!({"ports": [{"containerPort": 2222, "hostPort": 2222}]}),
            )),
        ),
        case(
            "host-path",
            "baseline",
            spec(
                json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}],
                "containers": [container()]}),
            ),
        ),
        case(
            "host-pid",
            "baseline",
            spec(json!({"hostPID": true, "hostIPC": true, "containers": [container()]})),
        ),
        case(
            "sysctl",
            "baseline",
            spec(
                json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]},
                "containers": [container()]}),
            ),
        ),
        case(
            "seccomp",
            "baseline",
            spec(
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                "containers": [container()]}),
            ),
        ),
        case(
            "probe-host",
            "baseline",
            one(tf_container(
                json!({"livenessProbe": {"tcpSocket": {"host": "10.0.0.1", "port": 2222}}}),
            )),
        ),
        case(
            "restricted-plain",
            "restricted",
            spec(json!({"containers": [container()]})),
        ),
        case(
            "restricted-nfs",
            "restricted",
            spec(
                json!({"volumes": [{"name": "data", "nfs": {"server": "nfs", "path": "/"}}],
                "containers": [hardened(json!({}))]}),
            ),
        ),
        case(
            "restricted-root",
            "restricted",
            spec(json!({"securityContext": {"runAsUser": 0},
                "containers": [hardened(json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}}))]})),
        ),
        case(
            "restricted-proc-mount",
            "restricted",
            spec(json!({"hostUsers": false,
                "containers": [hardened(json!({"procMount": "Unmasked"}))]})),
        ),
        case(
            "proc-mount-host-users",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"procMount": "Unmasked"}}),
            )),
        ),
        case(
            "container-name",
            "baseline",
            spec(json!({"containers": [container(), {"name": "Side_car", "image": "busybox"}]})),
        ),
        case(
            "port-names",
            "baseline",
            one(tf_container(json!({"ports": [
                {"name": "tfjob-port", "containerPort": 2222},
                {"name": "tfjob-port", "containerPort": 2223},
                {"name": "Metrics_Port", "containerPort": 9090, "protocol": "tcp"}]}))),
        ),
        case(
            "volume-names",
            "baseline",
            spec(json!({"volumes": [{"name": "Data", "emptyDir": {}}],
                "containers": [tf_container(json!({"volumeMounts": [{"name": "logs", "mountPath": "/logs"}]}))]})),
        ),
        case(
            "apparmor-annotations",
            "baseline",
            json!({"metadata": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/trainer": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/tensorflow": "docker/default"}},
                "spec": {"containers": [container()]}}),
        ),
        case(
            "host-process-alone",
            "baseline",
            one(tf_container(
                json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}),
            )),
        ),
    ]
}

/// What a ground said of one pod-template case: the API server's answer to
/// the plain pod (created, or its Status code, message and causes), and
/// the controller's verdict on the job made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PodVerdict {
    pod: Result<(), Refusal>,
    job: String,
}

/// An API server's refusal: code, message and every (field, message) cause.
type Refusal = (u16, String, BTreeSet<(String, String)>);

/// The plain pod of a case, created with `dryRun=All` in `namespace`.
async fn create_pod(client: &kube::Client, namespace: &str, case: &PodCase) -> PodVerdict {
    let pods: kube::Api<DynamicObject> = kube::Api::namespaced_with(
        client.clone(),
        namespace,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let mut pod = case.template.clone();
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    pod["metadata"]["name"] = json!(case.name);
    let pod: DynamicObject = serde_json::from_value(pod).expect("a pod");
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answer = match pods.create(&params, &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => {
            let causes: BTreeSet<(String, String)> = status
                .details
                .iter()
                .flat_map(|d| d.causes.iter())
                .map(|c| (c.field.clone(), c.message.clone()))
                .collect();
            Err((
                status.code,
                in_cause_order(&status.message, &causes),
                causes,
            ))
        }
        Err(e) => panic!("creating pod {}: {e}", case.name),
    };
    PodVerdict {
        pod: answer,
        job: String::new(),
    }
}

/// `message` with its list of errors (`…is invalid: [a, b]`) in the order
/// of `causes`: kube-apiserver lists errors of one map (a pod's
/// annotations) in Go's random map order, so only the set is its answer.
fn in_cause_order(message: &str, causes: &BTreeSet<(String, String)>) -> String {
    let listed: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
    match message.split_once(": [") {
        Some((head, list))
            if causes.len() > 1
                && list.strip_suffix(']').is_some_and(|inner| {
                    inner.len() == listed.join(", ").len()
                        && listed.iter().all(|item| inner.contains(item.as_str()))
                }) =>
        {
            format!("{head}: [{}]", listed.join(", "))
        }
        _ => message.to_string(),
    }
}

/// A namespace of this name on a member, enforcing `level`.
async fn enforcing_namespace(client: &kube::Client, name: &str, level: &str) {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": name,
        "labels": {"pod-security.kubernetes.io/enforce": level}}}))
    .expect("a namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
    let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
        kube::Api::namespaced(client.clone(), name);
    eventually(
        &format!("the default ServiceAccount of {name}"),
        WAIT,
        async || accounts.get_opt("default").await.ok().flatten(),
    )
    .await;
}

/// The job of a case, pinned to the members: Failed `InvalidSpec` (pod
/// validation) or waiting because both members' namespaces refuse its pods.
async fn job_verdict(jobs: &kube::Api<DynamicObject>, case: &PodCase) -> String {
    let job = json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": case.name},
        "spec": {
            "replicaSpecs": [{"type": "worker", "replicas": 1, "template": case.template}],
            "scheduler": {"federation": {"clusterNames": ["member-1", "member-2"]}},
        },
    });
    let job: DynamicObject = serde_json::from_value(job).expect("a job");
    jobs.create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("submitting job {}: {e}", case.name));
    eventually(
        &format!("job {} refused or waiting", case.name),
        WAIT,
        async || {
            let job = jobs.get(case.name).await.ok()?;
            let conditions = job.data.pointer("/status/conditions")?.as_array()?;
            let said = |kind: &str, reason: &str| {
                conditions
                    .iter()
                    .find(|c| c["type"] == kind && c["reason"] == reason)
                    .and_then(|c| c["message"].as_str())
                    .map(|m| format!("{reason}: {m}"))
            };
            said("Failed", "InvalidSpec").or_else(|| said("Initialized", "WaitingForCapacity"))
        },
    )
    .await
}

/// Every case's verdicts on one ground.
async fn pod_verdicts(ground: Ground, cases: &[PodCase]) -> Vec<PodVerdict> {
    let env = Setup::on(ground)
        .members(&["member-1", "member-2"])
        .json_jobs()
        .own_namespace("pod-door")
        .start()
        .await;
    let restricted = real::test_namespace(&env.client, "pod-door-r").await;
    let namespace_of = |level: &str| match level {
        "restricted" => restricted.clone(),
        _ => env.namespace.clone(),
    };
    for member in ["member-1", "member-2"] {
        enforcing_namespace(&env.clients[member], &env.namespace, "baseline").await;
        enforcing_namespace(&env.clients[member], &restricted, "restricted").await;
    }
    let mut verdicts = Vec::new();
    for case in cases {
        let namespace = namespace_of(case.level);
        let mut verdict = create_pod(&env.clients["member-1"], &namespace, case).await;
        let jobs = kube::Api::namespaced_with(env.client.clone(), &namespace, &job_resource());
        // The namespaces' names are the ground's own.
        verdict.job = job_verdict(&jobs, case)
            .await
            .replace(&restricted, "<restricted namespace>")
            .replace(&env.namespace, "<baseline namespace>");
        verdicts.push(verdict);
    }
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(env.client.clone());
    for member in ["member-1", "member-2"] {
        let on_member: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(env.clients[member].clone());
        for namespace in [&env.namespace, &restricted] {
            let _ = on_member.delete(namespace, &Default::default()).await;
        }
    }
    let _ = namespaces.delete(&restricted, &Default::default()).await;
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
    verdicts
}

/// The controller's door and the API server agree: a template that pod
/// validation refuses fails `InvalidSpec` with each of kube-apiserver's
/// causes (under the template's path), and one that PodSecurity refuses
/// waits with kube-apiserver's own words for why; and both grounds give
/// the same answers to the plain pods and the same verdicts on the jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_templates_get_the_api_servers_verdict_on_both_grounds() {
    let cases = pod_cases();
    let on_sim = pod_verdicts(Ground::Sim, &cases).await;
    let on_real = pod_verdicts(Ground::Real, &cases).await;
    let mut problems = Vec::new();
    for ((case, sim), real) in cases.iter().zip(&on_sim).zip(&on_real) {
        if sim != real {
            problems.push(format!(
                "{}: the grounds differ\n  sim:  {sim:?}\n  real: {real:?}",
                case.name
            ));
        }
        match &real.pod {
            Ok(()) => problems.push(format!("{}: kube-apiserver admitted the pod", case.name)),
            Err((422, _, causes)) => {
                for (field, message) in causes {
                    let ours = format!("spec.replicaSpecs[0].template.{field}: {message}");
                    if !real.job.starts_with("InvalidSpec") || !real.job.contains(&ours) {
                        problems.push(format!(
                            "{}: the job's verdict lacks {ours:?}: {}",
                            case.name, real.job
                        ));
                    }
                }
            }
            Err((403, message, _)) => {
                let why = message
                    .split_once(":latest\": ")
                    .map(|(_, why)| why)
                    .unwrap_or(message);
                // The controller's own check says what kube-apiserver says.
                let level = match case.level {
                    "restricted" => PodSecurityLevel::Restricted,
                    _ => PodSecurityLevel::Baseline,
                };
                let template: k8s_openapi::api::core::v1::PodTemplateSpec =
                    serde_json::from_value(case.template.clone()).expect("a template");
                let ours = isolation::pod_security_refusal(
                    level,
                    &template.metadata.unwrap_or_default(),
                    &template.spec.unwrap_or_default(),
                );
                if ours.as_deref() != Some(why) {
                    problems.push(format!(
                        "{}: the controller's Pod Security check says {ours:?}, kube-apiserver {why:?}",
                        case.name
                    ));
                }
                // The job waits: the members' namespaces refuse its pods, or
                // (checked first) the members' podPolicy does.
                let refused = format!("enforces Pod Security \"{}\": {why}", case.level);
                if !real.job.starts_with("WaitingForCapacity")
                    || !(real.job.contains(&refused) || real.job.contains("(spec.podPolicy."))
                {
                    problems.push(format!(
                        "{}: the job's verdict lacks {refused:?}: {}",
                        case.name, real.job
                    ));
                }
            }
            Err(other) => problems.push(format!("{}: {other:?}", case.name)),
        }
    }
    println!(
        "{} pod templates: {} refused by pod validation, {} by PodSecurity; {} problems",
        cases.len(),
        on_real
            .iter()
            .filter(|v| matches!(v.pod, Err((422, ..))))
            .count(),
        on_real
            .iter()
            .filter(|v| matches!(v.pod, Err((403, ..))))
            .count(),
        problems.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What one ground says of a job naming a cluster no MemberCluster has,
/// of a namespace with Pod Security labels that are no level, and of
/// member-1 under each address template that makes no DNS host name (its
/// `Ready` message).
async fn member_side_verdicts(ground: Ground, templates: &[String]) -> Vec<String> {
    let env = Setup::on(ground)
        .members(&["member-1", "member-2"])
        .json_jobs()
        .own_namespace("names")
        .start()
        .await;
    let mut verdicts = Vec::new();
    let job = json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": "elsewhere"},
        "spec": {
            "replicaSpecs": [replica_spec("worker", 1)],
            "scheduler": {"federation": {"clusterNames": ["member-9"]}},
        },
    });
    env.submit(job).await;
    let waiting = env
        .wait_job("elsewhere", "waiting, saying why", WAIT, |j| {
            j.pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Initialized" && c["status"] == "False")
        })
        .await;
    let initialized = waiting
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Initialized")
        .cloned()
        .unwrap_or_default();
    let message = initialized["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("member-9: unknown cluster: no MemberCluster of this name is registered"),
        "{message}"
    );
    assert_eq!(
        initialized["reason"], "UnknownCluster",
        "it waits for the cluster, not for capacity: {initialized}"
    );
    verdicts.push(message);
    // A namespace whose Pod Security labels are no level or version.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(env.clients["member-1"].clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": "no-level",
        "labels": {"pod-security.kubernetes.io/enforce": "Restricted",
                   "pod-security.kubernetes.io/enforce-version": "1.30"}}}))
    .expect("a namespace");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match namespaces.create(&dry_run, &namespace).await {
        Err(kube::Error::Api(status)) => verdicts.push(format!(
            "{} {}: {:?}",
            status.code,
            status.message,
            status.details.map(|d| d.causes)
        )),
        other => panic!("a namespace enforcing \"Restricted\": {other:?}"),
    }
    // A namespace pinned to an older version of the level: v1.31 allowed
    // fewer sysctls than v1.37.
    enforcing_namespace(&env.clients["member-1"], "pinned-v1-31", "baseline").await;
    let pin =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce-version": "v1.31"}}});
    namespaces
        .patch(
            "pinned-v1-31",
            &Default::default(),
            &kube::api::Patch::Merge(pin),
        )
        .await
        .expect("pin the version");
    let sysctl = PodCase {
        name: "tcp-rmem",
        level: "baseline",
        template: json!({"spec": {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]},
            "containers": [container()]}}),
    };
    let pinned = create_pod(&env.clients["member-1"], "pinned-v1-31", &sysctl).await;
    assert!(
        matches!(&pinned.pod, Err((403, message, _)) if message.contains("\"baseline:v1.31\": forbidden sysctls (net.ipv4.tcp_rmem)")),
        "{pinned:?}"
    );
    verdicts.push(format!("{:?}", pinned.pod));
    // A pod whose annotations pass 256 KiB.
    let annotated = PodCase {
        name: "annotated",
        level: "privileged",
        template: json!({"metadata": {"annotations": {"notes": "x".repeat(300_000)}},
            "spec": {"containers": [container()]}}),
    };
    let annotated = create_pod(&env.clients["member-1"], "default", &annotated).await;
    assert!(
        matches!(&annotated.pod, Err((422, _, causes)) if causes.contains(&(
            "metadata.annotations".to_string(),
            "Too long: may not be more than 262144 bytes".to_string()
        ))),
        "{annotated:?}"
    );
    verdicts.push(format!("{:?}", annotated.pod));
    let _ = namespaces.delete("pinned-v1-31", &Default::default()).await;
    let members = env.members();
    let set_template = |t: &str| kube::api::Patch::Merge(json!({"spec": {"addressTemplate": t}}));
    for template in templates {
        members
            .patch("member-1", &Default::default(), &set_template(template))
            .await
            .expect("template patched");
        let message = eventually(
            &format!("member-1 not Ready for {template:?}"),
            WAIT,
            async || {
                let member = members.get("member-1").await.ok()?;
                let status = member.status.as_ref()?;
                let ready = status
                    .conditions
                    .iter()
                    .find(|c| c.condition_type == "Ready")?;
                let message = ready.message.clone().unwrap_or_default();
                (ready.status == "False"
                    && status.observed_generation == member.metadata.generation
                    && message.contains("spec.addressTemplate"))
                .then_some(message)
            },
        )
        .await;
        verdicts.push(message);
    }
    members
        .patch(
            "member-1",
            &Default::default(),
            &set_template("{service}.{namespace}.svc.clusterset.local"),
        )
        .await
        .expect("template restored");
    let problems = env.controller_problems();
    assert!(problems.is_empty(), "the controller logged: {problems:?}");
    verdicts
}

/// Issue 22 (finding 6): a job naming a cluster that does not exist waits
/// saying the name is unknown, not for capacity; a member whose
/// `addressTemplate` makes no DNS host name (a port, a scheme, spaces, a
/// 300-character host) is not Ready, naming the field; a namespace whose
/// Pod Security labels are no level is refused, and one pinned to
/// `enforce-version: v1.31` refuses a sysctl that v1.37 allows, and a pod
/// with more than 256 KiB of annotations is invalid; alike on both grounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_cluster_names_and_bad_address_templates_on_both_grounds() {
    let templates = vec![
        "{service}:9999".to_string(),
        "http://{service}/".to_string(),
        "{service}.my cluster.example.org".to_string(),
        format!("{{service}}.{}.example.org", "h".repeat(300)),
    ];
    let on_sim = member_side_verdicts(Ground::Sim, &templates).await;
    let on_real = member_side_verdicts(Ground::Real, &templates).await;
    assert_eq!(on_sim, on_real);
}
