//! Real TensorFlow's helpers (`tests/tensorflow.rs`, `tests/real_nodes.rs`):
//! the example jobs of `config/examples/tensorflow/`, as the process
//! runtime runs them or as real nodes do ([`on_real_nodes`]), waiting for
//! their end with TensorFlow's logs on a failure, `kubectl tfjob`, and the
//! `TF_CONFIG` the controller wrote.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use super::federation::*;

/// Each real TensorFlow test's limit (three minutes on our 2-core machine).
pub const TF_TEST_LIMIT: Duration = Duration::from_secs(180);

/// The example job in `file`, named `name`, training `steps` steps, its
/// replicas restarted `restart_policy`, with `spec` merged into its spec.
pub fn example(file: &str, name: &str, steps: u32, spec: Value) -> Value {
    let path = real::repo_path(&format!("config/examples/tensorflow/{file}"));
    let text = std::fs::read_to_string(&path).expect("the example job");
    let mut job: Value = serde_yaml::from_str(&text).expect("YAML");
    job["metadata"]["name"] = json!(name);
    for replica in job["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs")
    {
        for env in replica["template"]["spec"]["containers"][0]["env"]
            .as_array_mut()
            .expect("env")
        {
            if env["name"] == "TRAIN_STEPS" {
                env["value"] = json!(steps.to_string());
            }
        }
    }
    if let (Some(target), Some(extra)) = (job["spec"].as_object_mut(), spec.as_object()) {
        for (key, value) in extra {
            if value.is_null() {
                target.remove(key);
            } else {
                target.insert(key.clone(), value.clone());
            }
        }
    }
    job
}

/// On a panic while it lives, prints the end of every log of the job's
/// pods on every cluster, the previous attempt's too: what TensorFlow said
/// when the job did not succeed.
pub struct PrintLogsOnPanic<'a> {
    f: &'a Federation,
    job: &'a str,
}

impl Drop for PrintLogsOnPanic<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let selector = format!("{}={}", tfjob_core::builders::JOB_NAME_LABEL, self.job);
        for cluster in self.f.clients.keys() {
            for previous in ["--previous=false", "--previous=true"] {
                let output = std::process::Command::new(super::kubectl::kubectl_binary())
                    .arg("--kubeconfig")
                    .arg(self.f.kubeconfig(cluster))
                    .args(["logs", "-n", &self.f.namespace, "-l", &selector])
                    .args(["--prefix", "--tail=40", "--max-log-requests=20", previous])
                    .output();
                let text = match &output {
                    Ok(o) => format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    ),
                    Err(e) => format!("kubectl did not run: {e}"),
                };
                eprintln!(
                    "--- {}'s pod logs on {cluster} ({previous}) ---\n{text}",
                    self.job
                );
            }
        }
    }
}

/// Waits until the job ends (Succeeded or Failed) and asserts Succeeded.
pub async fn succeeded(f: &Federation, name: &str, limit: Duration) -> Value {
    let _logs = PrintLogsOnPanic { f, job: name };
    let done = f
        .wait_job(name, "an end (Succeeded or Failed)", limit, |j| {
            matches!(phase_of(j), "Succeeded" | "Failed")
        })
        .await;
    assert_eq!(phase_of(&done), "Succeeded", "{name}: {}", done["status"]);
    // The job's checkpoints (the examples' CHECKPOINT_DIR) are not kept.
    let uid = done["metadata"]["uid"].as_str().unwrap_or_default();
    let _ = std::fs::remove_dir_all(format!("/tmp/tfjob-federator-checkpoints/{name}-{uid}"));
    done
}

/// `kubectl tfjob ARGS` against home.
pub async fn plugin(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-tfjob"))
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env_remove("KUBECONFIG")
            .output(),
    )
    .await
    .expect("kubectl-tfjob ends")
    .expect("kubectl-tfjob runs");
    assert!(
        output.status.success(),
        "kubectl tfjob {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// replica (`chief-0`) → its cluster, from the job's status.
pub fn clusters_of(job: &Value) -> BTreeMap<String, String> {
    let prefix = format!("{}-", job["metadata"]["name"].as_str().unwrap_or_default());
    let mut out = BTreeMap::new();
    for task in job["status"]["tasks"].as_array().into_iter().flatten() {
        for replica in task["replicaStatus"].as_array().into_iter().flatten() {
            if let (Some(cluster), Some(name)) =
                (replica["cluster"].as_str(), replica["name"].as_str())
            {
                let replica = name.strip_prefix(&prefix).unwrap_or(name);
                out.insert(replica.to_string(), cluster.to_string());
            }
        }
    }
    out
}

/// The `TF_CONFIG` of a replica's pod on `cluster`.
pub async fn tf_config(f: &Federation, cluster: &str, pod: &str) -> Value {
    let pods: Api<Pod> = Api::namespaced(f.clients[cluster].clone(), &f.namespace);
    let pod = pods.get(pod).await.expect("the pod");
    let env = pod.spec.expect("spec").containers[0]
        .env
        .clone()
        .unwrap_or_default();
    let text = env
        .iter()
        .find(|e| e.name == "TF_CONFIG")
        .and_then(|e| e.value.clone())
        .expect("TF_CONFIG in the pod");
    serde_json::from_str(&text).expect("TF_CONFIG is JSON")
}

/// Every "host:port" of a TF_CONFIG's cluster, with its replica.
pub fn addresses(config: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (kind, list) in config["cluster"].as_object().expect("cluster") {
        for (i, address) in list.as_array().expect("addresses").iter().enumerate() {
            out.push((
                format!("{kind}-{i}"),
                address.as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    out
}

/// The image of the real nodes' TensorFlow pods (`hack/real-clusters
/// --tensorflow-image`): the pinned tensorflow-cpu, the example programs
/// in /examples.
pub const TENSORFLOW_IMAGE: &str = "localhost/tfjob-federator/tensorflow:2.21.0";

/// `job` (an example) as real nodes run it: no process-runtime annotation,
/// the TensorFlow image, `$(EXAMPLES)` its /examples, the checkpoint
/// folder a hostPath every node shares (one host: it stands in for the
/// shared storage a real job's checkpoints need), and a grace period of
/// 5 s: the program is its container's PID 1, which ignores a SIGTERM it
/// has no handler for (and a ps or worker blocked in the server's join
/// runs none), so each deleted pod would otherwise take the default 30 s.
pub fn on_real_nodes(mut job: Value) -> Value {
    for replica in job["spec"]["replicaSpecs"]
        .as_array_mut()
        .expect("replicaSpecs")
    {
        let template = &mut replica["template"];
        if let Some(annotations) = template["metadata"]["annotations"].as_object_mut() {
            annotations.remove("sim.federation.tfjob.io/runtime");
        }
        template["spec"]["terminationGracePeriodSeconds"] = json!(5);
        template["spec"]["volumes"] = json!([{"name": "checkpoints",
            "hostPath": {"path": "/tmp/tfjob-federator-checkpoints", "type": "DirectoryOrCreate"}}]);
        let container = &mut template["spec"]["containers"][0];
        container["image"] = json!(TENSORFLOW_IMAGE);
        container["imagePullPolicy"] = json!("IfNotPresent");
        container["volumeMounts"] =
            json!([{"name": "checkpoints", "mountPath": "/tmp/tfjob-federator-checkpoints"}]);
        container["env"]
            .as_array_mut()
            .expect("env")
            .push(json!({"name": "EXAMPLES", "value": "/examples"}));
    }
    job
}

/// The ParameterServerStrategy example `job` (named `tf-ps`, 40 steps)
/// spread over both members: the chief's TF_CONFIG names its peers on the
/// other member by their clusterset.local addresses, the job succeeds
/// with no backoff spent, and `kubectl tfjob logs` shows the chief's
/// training over those addresses. Returns where each replica ran.
pub async fn ps_job_trains_over_both_members(
    f: &Federation,
    job: Value,
) -> BTreeMap<String, String> {
    // The clusters are this test's from here (tests take turns on them).
    let started = Instant::now();
    f.submit(job).await;
    // While it runs: the chief's TF_CONFIG names a peer on the other member
    // by its clusterset.local address.
    let running = f
        .wait_job(
            "tf-ps",
            "every replica placed and running",
            TF_TEST_LIMIT,
            |j| clusters_of(j).len() == 5 && j["status"]["aggregate"]["running"] == json!(5),
        )
        .await;
    let placed = clusters_of(&running);
    let used: std::collections::BTreeSet<&String> = placed.values().collect();
    assert_eq!(used.len(), 2, "Spread uses both members: {placed:?}");
    let chief_cluster = placed["chief-0"].clone();
    let config = tf_config(f, &chief_cluster, "tf-ps-chief-0").await;
    assert_eq!(config["task"], json!({"type": "chief", "index": 0}));
    let across: Vec<(String, String)> = addresses(&config)
        .into_iter()
        .filter(|(replica, _)| placed[replica] != chief_cluster)
        .collect();
    assert!(!across.is_empty(), "{placed:?}");
    for (replica, address) in addresses(&config) {
        assert!(
            address.ends_with(".svc.clusterset.local:2222"),
            "over two members every replica has its clusterset address: {replica} {address}"
        );
    }
    let done = succeeded(f, "tf-ps", TF_TEST_LIMIT.saturating_sub(started.elapsed())).await;
    assert_eq!(
        done["status"]["backoffCount"],
        json!(0),
        "{}",
        done["status"]
    );
    // The chief, the coordinator, reached every ps and worker (the variables
    // live on the ps, the steps run on the workers): the last step's line
    // proves it connected over the addresses of its TF_CONFIG, the
    // clusterset.local ones included.
    let log = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-ps", "-n", &f.namespace],
    )
    .await;
    assert!(log.contains("chief-0: step 40/40 loss "), "{log}");
    assert!(log.contains("chief-0: trained 40 steps"), "{log}");
    for (_, address) in &across {
        assert!(
            log.contains(address.as_str()),
            "the chief read {address} from TF_CONFIG: {log}"
        );
    }
    let tail = plugin(
        &f.kubeconfig("home"),
        &["logs", "tf-ps", "-n", &f.namespace, "--tail", "1"],
    )
    .await;
    assert!(
        tail.starts_with("chief-0: trained 40 steps; checkpoint "),
        "{tail}"
    );
    eprintln!(
        "tf-ps trained over both members in {:.1?}",
        started.elapsed()
    );
    assert!(started.elapsed() < TF_TEST_LIMIT);
    placed
}
