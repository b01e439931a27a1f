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

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::operator::*;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::JobPhase;

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
