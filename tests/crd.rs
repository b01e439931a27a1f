//! The CRDs: the committed copies (`deploy/crds/`, the Helm chart's
//! `crds/`) and the book's API reference generated from them match what
//! the API types generate now, the schema is structural, the example
//! jobs parse and validate, and a simulated cluster driven by the real
//! kubectl accepts the CRD and the examples (strict field validation, so a
//! field the schema lacks fails) and prints the columns; the deployment
//! manifests in `deploy/` apply and hold together.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};

use common::kubectl::Kubectl;
use common::real::Ground;
use serde_json::Value;
use tfjob_federator::api::{self, TensorFlowTrainingJob};
use tfjob_federator::validation;

const COMMITTED: &str = "deploy/crds/crds.yaml";

fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The Helm chart's copy (helm installs CRDs only from a chart's `crds/`,
/// untemplated, so it is a copy of the same generation).
const CHART_CRDS: &str = "deploy/helm/tfjob-federator/crds/crds.yaml";

#[test]
fn committed_crds_match_the_generated_ones() {
    let generated = api::crds_yaml().expect("CRDs serialize");
    for file in [COMMITTED, CHART_CRDS] {
        let committed = std::fs::read_to_string(repo_path(file)).unwrap_or_default();
        assert!(
            committed == generated,
            "{file} is out of date with the API types; regenerate both with \
             `cargo run -- crd | tee {COMMITTED} > {CHART_CRDS}` and commit the result"
        );
    }
}

#[test]
fn committed_api_reference_matches_the_generated_one() {
    let generated = api::reference_markdown();
    let committed = std::fs::read_to_string(repo_path(api::REFERENCE_PAGE)).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is out of date with the API types; regenerate it with \
         `cargo run -- api-reference > {}` and commit the result",
        api::REFERENCE_PAGE,
        api::REFERENCE_PAGE
    );
}

/// Kubernetes' structural-schema rules, as far as our generator could break
/// them: every node has a type (unless int-or-string or preserving unknown
/// fields), no `$ref`, no logical junctors carrying types.
fn check_structural(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(object) = node.as_object() else {
        problems.push(format!("{path}: not an object"));
        return;
    };
    let flag = |name: &str| object.get(name).and_then(Value::as_bool) == Some(true);
    let int_or_string = flag("x-kubernetes-int-or-string");
    if object.get("type").and_then(Value::as_str).is_none()
        && !int_or_string
        && !flag("x-kubernetes-preserve-unknown-fields")
    {
        problems.push(format!("{path}: no type"));
    }
    if object.contains_key("$ref") {
        problems.push(format!("{path}: $ref"));
    }
    for junctor in ["anyOf", "oneOf", "allOf", "not"] {
        if object.contains_key(junctor) && !int_or_string {
            problems.push(format!("{path}: {junctor}"));
        }
    }
    if let Some(properties) = object.get("properties").and_then(Value::as_object) {
        if object.get("type").and_then(Value::as_str) != Some("object") {
            problems.push(format!("{path}: properties on a non-object"));
        }
        for (name, child) in properties {
            check_structural(child, &format!("{path}.{name}"), problems);
        }
    }
    if let Some(additional) = object.get("additionalProperties").filter(|a| a.is_object()) {
        check_structural(additional, &format!("{path}[*]"), problems);
    }
    if let Some(items) = object.get("items") {
        check_structural(items, &format!("{path}[]"), problems);
    }
}

#[test]
fn crds_are_structural_with_status_and_columns() {
    for crd in api::crds() {
        let crd = serde_json::to_value(&crd).expect("CRD serializes");
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let mut problems = Vec::new();
            check_structural(
                &version["schema"]["openAPIV3Schema"],
                "openAPIV3Schema",
                &mut problems,
            );
            assert!(problems.is_empty(), "{name}: not structural: {problems:#?}");
            assert_eq!(
                version["subresources"]["status"],
                serde_json::json!({}),
                "{name}"
            );
        }
    }
    let crd = serde_json::to_value(api::crds()[0].clone()).expect("CRD serializes");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["tftj"])
    );
    let columns: Vec<&str> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Phase", "Running", "Succeeded", "Failed", "Age"]);
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_path("config/examples"))
        .expect("config/examples exists")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no example jobs in config/examples");
    files
}

#[test]
fn example_jobs_parse_and_validate() {
    for file in example_files() {
        let text = std::fs::read_to_string(&file).expect("read example");
        let job: TensorFlowTrainingJob = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a TensorFlowTrainingJob: {e}", file.display()));
        if let Err(error) = validation::validate(&job) {
            panic!("{}: invalid: {error}", file.display());
        }
    }
}

fn kubectl_applies_the_crd_and_the_examples(ground: Ground) {
    // A cluster of its own: the CRDs are cluster-wide, on a shared cluster
    // they would be there already.
    let kubectl = Kubectl::on_private(ground, "crd");
    let crds = repo_path(COMMITTED).to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "-f", &crds])
        .stdout_has("tensorflowtrainingjobs.batch.tensorstack.dev created");
    let mut names = Vec::new();
    for file in example_files() {
        let path = file.to_string_lossy().into_owned();
        // Strict server-side field validation: a field missing from the
        // schema fails the apply instead of being pruned silently.
        kubectl.ok(&["apply", "--validate=strict", "-f", &path]);
        let input: Value =
            serde_yaml::from_str(&std::fs::read_to_string(&file).expect("read example"))
                .expect("example is YAML");
        let name = input["metadata"]["name"].as_str().expect("example name");
        let stored = kubectl.json(&["get", "tftj", name]);
        assert_eq!(
            stored["spec"],
            input["spec"],
            "{}: the stored spec differs from the applied one",
            file.display()
        );
        names.push(name.to_string());
    }
    let table = kubectl.ok(&["get", "tftj"]).table();
    assert_eq!(table[0], ["NAME", "PHASE", "RUNNING", "AGE"]);
    let listed: Vec<&str> = table[1..].iter().map(|row| row[0].as_str()).collect();
    names.sort();
    assert_eq!(listed, names);
    // The columns read the status the controller writes.
    kubectl.ok(&[
        "patch",
        "tftj",
        "mnist-ps",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running","aggregate":{"running":3,"succeeded":1}}}"#,
    ]);
    let row = kubectl
        .ok(&["get", "tftj", "mnist-ps", "--no-headers"])
        .table();
    assert_eq!(row[0][..3], ["mnist-ps", "Running", "3"]);
    let wide = kubectl
        .ok(&["get", "tensorflowtrainingjobs", "-o", "wide"])
        .table();
    assert_eq!(
        wide[0],
        ["NAME", "PHASE", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]
    );
    // The category lists the jobs too.
    let by_category = kubectl.ok(&["get", "t9k"]).table();
    let listed: Vec<&str> = by_category[1..].iter().map(|row| row[0].as_str()).collect();
    assert_eq!(listed, names);
    // The schema documents itself.
    let explained = kubectl.ok(&["explain", "tensorflowtrainingjobs.spec"]);
    for field in ["replicaSpecs", "runPolicy", "runMode", "scheduler"] {
        assert!(
            explained.stdout.contains(field),
            "kubectl explain lists {field}: {explained}"
        );
    }
    let explained = kubectl.ok(&["explain", "tftj.spec.replicaSpecs.type"]);
    assert!(explained.stdout.contains("FIELD: type"), "{explained}");
}

fn deploy_manifests_apply_with_kubectl_and_hold_together(ground: Ground) {
    let kubectl = Kubectl::on_private(ground, "deploy");
    let path = |p: &str| repo_path(p).display().to_string();
    kubectl.ok(&[
        "apply",
        "-f",
        &path(COMMITTED),
        "-f",
        &path("deploy/controller.yaml"),
        "-f",
        &path("deploy/member-rbac.yaml"),
    ]);
    let deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(kubectl.json(&[
            "get",
            "deployment",
            "-n",
            "tfjob-federator",
            "tfjob-federator",
            "-o",
            "json",
        ]))
        .expect("a Deployment");
    let pod = deployment.spec.template.spec.expect("a pod template");
    assert_eq!(pod.service_account_name.as_deref(), Some("tfjob-federator"));
    let args = pod.containers[0].args.clone().unwrap_or_default();
    let config_at = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .expect("--config FILE");
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| config_at.starts_with(&m.mount_path))
        .expect("the config file is mounted");
    assert_eq!(mount.name, "config");
    // The settings in the ConfigMap are ones `run --config` accepts.
    let config_map: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(kubectl.json(&[
            "get",
            "configmap",
            "-n",
            "tfjob-federator",
            "tfjob-federator",
            "-o",
            "json",
        ]))
        .expect("a ConfigMap");
    let file = config_at.rsplit('/').next().unwrap_or_default();
    let settings = config_map
        .data
        .and_then(|d| d.get(file).cloned())
        .expect("the config file in the ConfigMap");
    serde_yaml::from_str::<tfjob_federator::config::ControllerConfig>(&settings)
        .expect("valid controller settings");
    for role in ["tfjob-federator", "tfjob-federator-member"] {
        let bound = kubectl.json(&["get", "clusterrolebinding", role, "-o", "json"]);
        assert_eq!(bound["roleRef"]["name"], role);
        kubectl.ok(&["get", "clusterrole", role]);
    }
}

on_both_grounds!(sync:
    kubectl_applies_the_crd_and_the_examples,
    deploy_manifests_apply_with_kubectl_and_hold_together,
);
