//! `kubectl tfjob` (the `kubectl-tfjob` binary) against a federation (home
//! and two members, home not a target), on both grounds: get, describe,
//! logs of replicas on members (the deterministic lines of the simulated
//! kubelet, which the real ground's pod helper writes too, served there
//! through kube-apiserver and the nodes' kubelet API), plan, clusters, the
//! kubectl flags, the errors, and kubectl itself dispatching to the plugin.
//! The harness is `tests/common/`.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use common::federation::*;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

/// The longest a plugin command may take (a follow included).
const RUN: Duration = Duration::from_secs(60);

fn plugin_binary() -> &'static str {
    env!("CARGO_BIN_EXE_kubectl-tfjob")
}

/// `kubectl-tfjob ARGS --kubeconfig <home's>`, without blocking the
/// runtime that serves the simulated clusters.
async fn plugin(f: &Federation, args: &[&str]) -> Output {
    tokio::time::timeout(
        RUN,
        tokio::process::Command::new(plugin_binary())
            .args(args)
            .arg("--kubeconfig")
            .arg(f.kubeconfig("home"))
            .env_remove("KUBECONFIG")
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("kubectl-tfjob {args:?} ended within {RUN:?}"))
    .expect("kubectl-tfjob runs")
}

/// `kubectl-tfjob ARGS` with `$KUBECONFIG` naming `kubeconfig`.
async fn plugin_by_env(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    tokio::time::timeout(
        RUN,
        tokio::process::Command::new(plugin_binary())
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("kubectl-tfjob {args:?} ended within {RUN:?}"))
    .expect("kubectl-tfjob runs")
}

/// Home's kubeconfig with its context's namespace set to `namespace`, and
/// a second context, current, whose server answers nothing.
fn two_contexts(f: &Federation, namespace: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(f.kubeconfig("home")).expect("home's kubeconfig");
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    config["contexts"][0]["context"]["namespace"] = namespace.into();
    let mut elsewhere = config["contexts"][0].clone();
    elsewhere["name"] = "elsewhere".into();
    elsewhere["context"]["cluster"] = "nowhere".into();
    let mut nowhere = config["clusters"][0].clone();
    nowhere["name"] = "nowhere".into();
    nowhere["cluster"]["server"] = "http://127.0.0.1:9".into();
    for (list, item) in [("contexts", elsewhere), ("clusters", nowhere)] {
        if let Some(items) = config[list].as_sequence_mut() {
            items.push(item);
        }
    }
    config["current-context"] = "elsewhere".into();
    let path = f.dir.join("two-contexts.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config).expect("YAML")).expect("write it");
    path
}

/// Its stdout, failing the test unless it exited 0.
async fn ok(f: &Federation, args: &[&str]) -> String {
    let output = plugin(f, args).await;
    assert!(
        output.status.success(),
        "kubectl-tfjob {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Its stderr, failing the test unless it exited non-zero.
async fn fails(f: &Federation, args: &[&str]) -> String {
    let output = plugin(f, args).await;
    assert!(
        !output.status.success(),
        "kubectl-tfjob {args:?} should fail; it printed {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8(output.stderr).expect("UTF-8 output")
}

/// A table's rows, cells split on whitespace, the header row first.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The row whose first cell (or, with `-A`, second) is `name`.
fn row_of<'a>(table: &'a [Vec<String>], name: &str) -> &'a [String] {
    table
        .iter()
        .find(|r| r.iter().take(2).any(|c| c == name))
        .unwrap_or_else(|| panic!("no row for {name} in {table:?}"))
}

/// The three lines the simulated kubelet logs for attempt `n` of a pod
/// that exits with `code`.
fn attempt_lines(pod: &str, n: u32, code: i32) -> String {
    format!(
        "{pod} attempt {n}: started\n{pod} attempt {n}: running\n{pod} attempt {n}: exited with code {code}\n"
    )
}

/// A chief running `chief_seconds` and two workers that run a second, fail
/// with exit code 1 once (restarted, `OnFailure`), then succeed; one GPU
/// each, spread over the members.
fn spread_job(name: &str, chief_seconds: &str) -> Value {
    let mut job = gpu_job(
        name,
        &[("chief", 1, 1), ("worker", 2, 1)],
        json!({"scheduler": {"federation": {"strategy": "Spread"}}}),
        chief_seconds,
    );
    let worker = &mut job["spec"]["replicaSpecs"][1];
    worker["restartPolicy"] = json!("OnFailure");
    let annotations = &mut worker["template"]["metadata"]["annotations"];
    annotations["sim.federation.tfjob.io/run-seconds"] = json!("1");
    annotations["sim.federation.tfjob.io/exit-codes"] = json!("1,0");
    job
}

/// Each pod of the job and the cluster it runs on.
async fn clusters_of_pods(f: &Federation, job: &str) -> BTreeMap<String, String> {
    f.pods_by_cluster(job)
        .await
        .into_iter()
        .flat_map(|(cluster, pods)| pods.into_iter().map(move |p| (p, cluster.clone())))
        .collect()
}

on_both_grounds!(
    a_job_spread_over_members_through_get_describe_and_logs,
    clusters_plan_namespaces_a_waiting_job_and_errors,
);

/// The federation; on the real ground the member identity also gets
/// `pods/log`, the rule docs/src/kubectl-plugin.md asks users to add for `logs`.
async fn plugin_federation(ground: Ground) -> Federation {
    let f = federation(ground).settings(HOME_NOT_TARGET).start().await;
    if ground == Ground::Real {
        real::grant_member_logs(real::three_clusters().await, &["member-1", "member-2"]).await;
    }
    f
}

async fn a_job_spread_over_members_through_get_describe_and_logs(ground: Ground) {
    let f = plugin_federation(ground).await;
    f.submit(spread_job("spread", "15")).await;
    f.wait_job(
        "spread",
        "both workers restarted, the chief running",
        Duration::from_secs(30),
        |j| {
            j["status"]["tasks"][1]["restartCount"] == json!(2)
                && j["status"]["tasks"][0]["replicaStatus"][0]["phase"] == json!("Running")
        },
    )
    .await;
    // Started now, it must end by itself when the chief's container does.
    let follow = tokio::spawn(
        tokio::process::Command::new(plugin_binary())
            .args(["logs", "spread", "-f", "--kubeconfig"])
            .arg(f.kubeconfig("home"))
            .env_remove("KUBECONFIG")
            .output(),
    );
    // A restarted worker's pod is re-created a moment after the count.
    let pods = eventually("a pod per replica", Duration::from_secs(20), async || {
        let pods = clusters_of_pods(&f, "spread").await;
        if pods.len() == 3 {
            Ok(pods)
        } else {
            Err(format!("{pods:?}"))
        }
    })
    .await;
    let mut per_cluster: BTreeMap<&str, usize> = BTreeMap::new();
    for cluster in pods.values() {
        *per_cluster.entry(cluster).or_default() += 1;
    }
    assert_eq!(per_cluster.len(), 2, "Spread uses both members: {pods:?}");
    let placement = per_cluster
        .iter()
        .map(|(c, n)| format!("{c}:{n}"))
        .collect::<Vec<_>>()
        .join(",");

    let table = rows(&ok(&f, &["get"]).await);
    assert_eq!(
        table[0],
        ["NAME", "PHASE", "PLACEMENT", "RESTARTS", "AGE"],
        "{table:?}"
    );
    assert_eq!(
        row_of(&table, "spread")[..4],
        ["spread", "Running", &placement, "2"]
    );
    let wide = rows(&ok(&f, &["get", "-o", "wide"]).await);
    assert_eq!(
        wide[0][5..],
        ["REPLICAS", "RUNNING", "SUCCEEDED", "FAILED", "WAITING"]
    );
    let list: Value =
        serde_json::from_str(&ok(&f, &["get", "-o", "json"]).await).expect("get -o json is JSON");
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["metadata"]["name"], "spread");
    assert_eq!(items[0]["status"]["phase"], "Running");
    let one: Value = serde_yaml::from_str(&ok(&f, &["get", "spread", "-o", "yaml"]).await)
        .expect("get JOB -o yaml is YAML");
    assert_eq!(
        (&one["kind"], &one["metadata"]["name"]),
        (&json!("TensorFlowTrainingJob"), &json!("spread"))
    );

    // Each replica's cluster and pod; the restarts per replica type, and
    // the controller's Events about them once they are written.
    let described = eventually(
        "describe to show the Restarting Event",
        Duration::from_secs(20),
        async || {
            let described = ok(&f, &["describe", "spread"]).await;
            // Repeats may be folded into one Event (`x2 over …`).
            if described.contains("Restarting replica worker-") {
                Ok(described)
            } else {
                Err(described)
            }
        },
    )
    .await;
    assert!(
        described.starts_with("Name:        spread\nNamespace:   default\nPhase:       Running\n"),
        "{described}"
    );
    let table = rows(&described);
    for (pod, cluster) in &pods {
        let replica = pod.strip_prefix("spread-").expect("a replica pod");
        let row = table
            .iter()
            .find(|r| r.first().map(String::as_str) == Some(replica))
            .unwrap_or_else(|| panic!("no row for {replica}: {described}"));
        assert_eq!(row[1..3], [cluster.as_str(), pod.as_str()], "{described}");
    }
    assert_eq!(row_of(&table, "chief"), ["chief", "1", "0"], "{described}");
    assert_eq!(
        row_of(&table, "worker"),
        ["worker", "2", "2"],
        "{described}"
    );

    // The master's log, from its member, while it runs.
    assert_eq!(
        ok(&f, &["logs", "spread"]).await,
        "spread-chief-0 attempt 1: started\nspread-chief-0 attempt 1: running\n"
    );

    let followed = tokio::time::timeout(RUN, follow)
        .await
        .expect("logs -f ends when the chief's container ends")
        .expect("the follow task")
        .expect("kubectl-tfjob logs -f runs");
    assert!(
        followed.status.success(),
        "{}",
        String::from_utf8_lossy(&followed.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&followed.stdout),
        attempt_lines("spread-chief-0", 1, 0),
        "the master's whole log"
    );
    f.wait_phase("spread", "Succeeded", Duration::from_secs(30))
        .await;
    // A restarted worker's pod is its second attempt on its member.
    assert_eq!(
        ok(&f, &["logs", "spread", "spread-worker-1"]).await,
        attempt_lines("spread-worker-1", 2, 0)
    );
    assert_eq!(
        ok(&f, &["logs", "spread", "worker-0", "--tail", "1"]).await,
        "spread-worker-0 attempt 2: exited with code 0\n"
    );
    assert_eq!(
        ok(&f, &["logs", "spread", "worker-0", "--tail=-1"]).await,
        attempt_lines("spread-worker-0", 2, 0),
        "a negative tail is every line, as kubectl reads it"
    );

    // kubectl finds the plugin on PATH and hands it the arguments.
    let bin_dir = std::path::Path::new(plugin_binary())
        .parent()
        .expect("the binary's directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("a PATH");
    let through_kubectl = tokio::process::Command::new(common::kubectl::kubectl_binary())
        .args(["tfjob", "get", "--kubeconfig"])
        .arg(f.kubeconfig("home"))
        .env("PATH", path)
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        through_kubectl.status.success(),
        "{}",
        String::from_utf8_lossy(&through_kubectl.stderr)
    );
    let table = rows(&String::from_utf8_lossy(&through_kubectl.stdout));
    assert_eq!(
        row_of(&table, "spread")[..3],
        ["spread", "Succeeded", &placement]
    );
}

async fn clusters_plan_namespaces_a_waiting_job_and_errors(ground: Ground) {
    let f = plugin_federation(ground).await;
    // A namespace no earlier test on the shared real clusters made.
    let other = real::unique_name("other");
    let members = rows(&ok(&f, &["clusters"]).await);
    assert_eq!(members[0], ["NAME", "READY", "FREE-GPU", "AGE"]);
    assert_eq!(row_of(&members, "member-1")[..3], ["member-1", "True", "4"]);
    assert_eq!(row_of(&members, "member-2")[..3], ["member-2", "True", "4"]);
    let list: Value = serde_json::from_str(&ok(&f, &["clusters", "-o", "json"]).await)
        .expect("clusters -o json is JSON");
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["member-1", "member-2"]);

    let file = f.dir.join("fits.yaml");
    let fits = gpu_job("fits", &[("worker", 2, 2)], json!({}), "1");
    std::fs::write(&file, serde_yaml::to_string(&fits).expect("YAML")).expect("write the job");
    let file = file.display().to_string();
    let planned = ok(
        &f,
        &[
            "plan",
            "-f",
            &file,
            "--config",
            &f.dir.join("controller.yaml").display().to_string(),
        ],
    )
    .await;
    assert!(
        planned.starts_with("job default/fits: 2 replicas, strategy Pack, allowSplit true\n"),
        "{planned}"
    );
    for replica in ["worker-0", "worker-1"] {
        assert!(
            planned
                .lines()
                .any(|l| l.trim_start().starts_with(replica) && l.contains("-> member-")),
            "{replica} is placed on a member: {planned}"
        );
    }
    assert!(
        f.pods_by_cluster("fits").await.is_empty(),
        "a dry run creates nothing"
    );

    // A job that runs here, and one that waits in another namespace.
    f.submit(gpu_job("sleeper", &[("worker", 1, 1)], json!({}), "60"))
        .await;
    let namespaces: Api<Namespace> = Api::all(f.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": other}})).expect("a namespace"),
        )
        .await
        .expect("namespace other");
    let other_jobs: Api<DynamicObject> =
        Api::namespaced_with(f.client.clone(), &other, &job_resource());
    let huge = gpu_job(
        "huge",
        &[("worker", 2, 4)],
        json!({"scheduler": {"federation": {"allowSplit": false}}}),
        "1",
    );
    other_jobs
        .create(
            &PostParams::default(),
            &serde_json::from_value(huge).expect("a job"),
        )
        .await
        .expect("job huge");
    f.wait_phase("sleeper", "Running", Duration::from_secs(30))
        .await;
    let waiting = eventually(
        "huge waits for capacity",
        Duration::from_secs(30),
        async || {
            let described = ok(&f, &["describe", "huge", "-n", &other]).await;
            described.contains("Waiting for:\n").then_some(described)
        },
    )
    .await;
    assert!(waiting.contains("Phase:       Pending\n"), "{waiting}");
    assert!(
        waiting
            .contains("Waiting for:\n  capacity: member-1, member-2: insufficient nvidia.com/gpu"),
        "what it waits for, per cluster: {waiting}"
    );

    let here = rows(&ok(&f, &["get"]).await);
    assert_eq!(row_of(&here, "sleeper")[1], "Running");
    assert!(
        !here.iter().any(|r| r[0] == "huge"),
        "-n default only: {here:?}"
    );
    let there = rows(&ok(&f, &["get", "-n", &other]).await);
    assert_eq!(there.len(), 2, "{there:?}");
    assert_eq!(row_of(&there, "huge")[..3], ["huge", "Pending", "<none>"]);
    let everywhere = rows(&ok(&f, &["get", "-A"]).await);
    assert_eq!(everywhere[0][..2], ["NAMESPACE", "NAME"]);
    assert_eq!(
        row_of(&everywhere, "huge")[..3],
        [other.as_str(), "huge", "Pending"]
    );
    assert_eq!(
        row_of(&everywhere, "sleeper")[..3],
        ["default", "sleeper", "Running"]
    );

    // $KUBECONFIG and --context as kubectl reads them; the namespace is
    // the context's.
    let kubeconfig = two_contexts(&f, &other);
    let by_context = plugin_by_env(&kubeconfig, &["get", "--context", "home"]).await;
    assert!(
        by_context.status.success(),
        "{}",
        String::from_utf8_lossy(&by_context.stderr)
    );
    let table = rows(&String::from_utf8_lossy(&by_context.stdout));
    assert_eq!(row_of(&table, "huge")[..2], ["huge", "Pending"]);
    let current = plugin_by_env(&kubeconfig, &["get"]).await;
    assert!(
        !current.status.success(),
        "the current context's server answers nothing"
    );

    // Errors: a non-zero exit and a message that says what is wrong.
    let unknown = fails(&f, &["get", "nope"]).await;
    assert!(
        unknown.contains("TensorFlowTrainingJob default/nope not found"),
        "{unknown}"
    );
    let unknown = fails(&f, &["describe", "nope", "-n", &other]).await;
    assert!(
        unknown.contains(&format!("TensorFlowTrainingJob {other}/nope not found")),
        "{unknown}"
    );
    let replica = fails(&f, &["logs", "sleeper", "ps-3"]).await;
    assert!(
        replica.contains("job sleeper has no replica ps-3; its replicas: worker-0"),
        "{replica}"
    );
    let no_pod = fails(&f, &["logs", "huge", "-n", &other]).await;
    assert!(
        no_pod.contains("replica worker-0 of job huge has no pod yet"),
        "{no_pod}"
    );
    let bad_flag = fails(&f, &["get", "-o", "xml"]).await;
    assert!(bad_flag.contains("invalid value 'xml'"), "{bad_flag}");

    let sleeper = clusters_of_pods(&f, "sleeper").await;
    let member = sleeper
        .get("sleeper-worker-0")
        .cloned()
        .expect("sleeper's pod");
    set_faults(&f.clients[&member], json!({"partitioned": true})).await;
    let unreachable = fails(&f, &["logs", "sleeper"]).await;
    assert!(
        unreachable.contains(&format!("cluster {member} did not answer within 10s")),
        "{unreachable}"
    );
    set_faults(&f.clients[&member], json!({"partitioned": false})).await;

    let reference = Api::<MemberCluster>::all(f.client.clone())
        .get(&member)
        .await
        .expect("the member")
        .spec
        .kubeconfig_secret_ref;
    let secrets = Api::<Secret>::namespaced(f.client.clone(), &reference.namespace);
    let mut kept = secrets
        .get(&reference.name)
        .await
        .expect("the member's Secret");
    secrets
        .delete(&reference.name, &Default::default())
        .await
        .expect("the member's Secret deleted");
    let no_secret = fails(&f, &["logs", "sleeper"]).await;
    assert!(
        no_secret.contains(&format!(
            "connecting to member {member}: Secret {}/{} does not exist",
            reference.namespace, reference.name
        )),
        "{no_secret}"
    );
    // The real clusters are shared with later tests: the Secret comes back.
    kept.metadata.resource_version = None;
    kept.metadata.uid = None;
    kept.metadata.creation_timestamp = None;
    kept.metadata.managed_fields = None;
    secrets
        .create(&PostParams::default(), &kept)
        .await
        .expect("the member's Secret restored");
}
