//! Real TensorFlow's helpers (`tests/tensorflow.rs`): the example jobs of
//! `config/examples/tensorflow/` (the TensorFlow image of the real nodes),
//! waiting for their end with TensorFlow's logs on a failure, `kubectl
//! tfjob`, and the `TF_CONFIG` the controller wrote.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};

use super::federation::*;

/// Each real TensorFlow test's limit: five minutes on our 2-core machine,
/// where alone they take 35-110 s (in CI, on a slower day, twice as long).
pub const TF_TEST_LIMIT: Duration = Duration::from_secs(300);

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
