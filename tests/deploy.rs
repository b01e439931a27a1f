//! The install recipes: the Helm chart (`deploy/helm/tfjob-federator`) lints
//! clean, renders what it promises and is the one source of
//! `deploy/controller.yaml`, `deploy/member-rbac.yaml` and
//! `deploy/member-fence.yaml`; installed with
//! `helm install` on a real cluster it creates every object, and the
//! controller, run as a local process with the token of the ServiceAccount
//! the chart made, runs a job to completion. The kustomize base (`deploy/`)
//! and its overlay (`overlays/second-namespace`) render and a real API
//! server accepts them (server-side dry run).
//!
//! helm is built from its Go module by `hack/build-deploy-tools` (seconds
//! once built); kubectl is the one on PATH.

#[macro_use]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::kubectl::kubectl_binary;
use common::operator::{Setup, job, replica};
use common::real::{self, Ground, repo_path};
use common::wait::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tfjob_federator::api::JobPhase;
use tfjob_federator::config::ControllerConfig;

const CHART: &str = "deploy/helm/tfjob-federator";
const NAMESPACE: &str = "tfjob-federator";

/// helm, built once per test binary.
fn helm_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let built = Command::new(repo_path("hack/build-deploy-tools"))
            .status()
            .expect("hack/build-deploy-tools runs (it needs bash and Go 1.26 on PATH)");
        assert!(built.success(), "hack/build-deploy-tools failed: {built}");
        repo_path("target/kube/bin/helm")
    })
}

/// Runs `program args`; its stdout, or a failure with everything it said.
fn run_ok(program: &Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = run(program, args);
    assert!(
        ok,
        "{} {} failed:\n{stdout}\n{stderr}",
        program.display(),
        args.join(" ")
    );
    stdout
}

fn run(program: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(program)
        .args(args)
        .current_dir(repo_path(""))
        .output()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", program.display()));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn helm(args: &[&str]) -> String {
    run_ok(helm_binary(), args)
}

/// `helm template` of the chart as release `tfjob-federator` in `namespace`.
fn template(namespace: &str, flags: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        "tfjob-federator",
        CHART,
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(flags);
    documents(&helm(&args))
}

/// The objects of a multi-document YAML text.
fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| serde::Deserialize::deserialize(document).expect("a YAML document"))
        .filter(|object: &Value| !object.is_null())
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {}", summary(objects)))
}

/// `Kind namespace/name` of each object, sorted.
fn summary(objects: &[Value]) -> String {
    let mut lines: Vec<String> = objects.iter().map(identify).collect();
    lines.sort();
    lines.join(", ")
}

fn identify(object: &Value) -> String {
    let meta = &object["metadata"];
    format!(
        "{} {}/{}",
        object["kind"].as_str().unwrap_or_default(),
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    )
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_path(relative)).unwrap_or_else(|e| panic!("read {relative}: {e}"))
}

// ------------------------------------------------------------ the chart

#[test]
fn helm_lint_is_clean_with_every_switch() {
    for flags in [
        &[][..],
        &[
            "--set",
            "memberRBAC.enabled=true",
            "--set",
            "metrics.serviceMonitor.enabled=true",
        ],
        &[
            "--set",
            "controller.enabled=false",
            "--set",
            "memberRBAC.enabled=true",
        ],
        &[
            "--set",
            "controller.enabled=false",
            "--set",
            "memberRBAC.enabled=true",
            "--set",
            "memberFence.enabled=true",
        ],
        &[
            "--namespace",
            "ml-platform",
            "--set",
            "createNamespace=true",
        ],
    ] {
        let mut args = vec!["lint", "--strict", CHART];
        args.extend_from_slice(flags);
        let out = helm(&args);
        // helm's one remark on a chart without an icon is an INFO, not a
        // finding; there is no icon to give.
        let findings: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with('[') && *l != "[INFO] Chart.yaml: icon is recommended")
            .collect();
        assert!(findings.is_empty(), "helm lint {flags:?}: {out}");
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{out}"
        );
    }
}

#[test]
fn plain_manifests_are_rendered_from_the_chart() {
    let out = std::env::temp_dir().join(format!("render-deploy-{}", uuid::Uuid::new_v4()));
    run_ok(
        &repo_path("hack/render-deploy"),
        &[out.to_str().expect("a UTF-8 path")],
    );
    for file in ["controller.yaml", "member-rbac.yaml", "member-fence.yaml"] {
        let rendered = std::fs::read_to_string(out.join(file)).expect("rendered");
        assert!(
            rendered == read(&format!("deploy/{file}")),
            "deploy/{file} differs from the chart's rendering; run hack/render-deploy and commit the result"
        );
    }
    std::fs::remove_dir_all(&out).expect("remove the rendering");
}

#[test]
fn chart_values_carry_every_setting_of_config_default_yaml() {
    let values: Value =
        serde_yaml::from_str(&read(&format!("{CHART}/values.yaml"))).expect("values");
    let documented: Value = serde_yaml::from_str(&read("config/default.yaml")).expect("defaults");
    assert_eq!(
        values["config"], documented,
        "values.yaml config vs config/default.yaml"
    );
    let parsed: ControllerConfig =
        serde_json::from_value(values["config"].clone()).expect("settings `run --config` takes");
    assert_eq!(parsed, ControllerConfig::default());
    // What the ConfigMap carries is those values, and a changed one lands.
    let objects = template(NAMESPACE, &["--set", "config.homeIsTarget=false"]);
    let settings = find(&objects, "ConfigMap", "tfjob-federator")["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap")
        .to_string();
    let rendered: ControllerConfig = serde_yaml::from_str(&settings).expect("settings");
    assert_eq!(
        rendered,
        ControllerConfig {
            home_is_target: false,
            ..ControllerConfig::default()
        }
    );
    let chart: Value = serde_yaml::from_str(&read(&format!("{CHART}/Chart.yaml"))).expect("chart");
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn chart_renders_a_restricted_pod_and_its_values() {
    let objects = template(NAMESPACE, &[]);
    let deployment = find(&objects, "Deployment", "tfjob-federator");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(container["image"], "tfjob-federator:0.1.0");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(
        container["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--leader-elect"))
    );
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert!(
        !kinds.contains(&"ServiceMonitor"),
        "off by default: {kinds:?}"
    );
    assert!(
        !kinds.contains(&"Namespace"),
        "helm install --create-namespace makes it: {kinds:?}"
    );
    find(&objects, "Service", "tfjob-federator-metrics");

    let objects = template(
        NAMESPACE,
        &[
            "--set",
            "image.repository=registry.example/tfjob-federator",
            "--set",
            "image.tag=9.9.9",
            "--set",
            "replicas=1",
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "resources.limits.memory=2Gi",
            "--set",
            "metrics.serviceMonitor.enabled=true",
        ],
    );
    let deployment = find(&objects, "Deployment", "tfjob-federator");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example/tfjob-federator:9.9.9");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(
        !container["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--leader-elect"))
    );
    assert_eq!(container["resources"]["limits"]["memory"], "2Gi");
    let monitor = find(&objects, "ServiceMonitor", "tfjob-federator");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");

    // Two leaderless controllers would both act on every job.
    let (ok, _, stderr) = run(
        helm_binary(),
        &[
            "template",
            "tfjob-federator",
            CHART,
            "--set",
            "leaderElection.enabled=false",
        ],
    );
    assert!(
        !ok && stderr.contains("needs leaderElection.enabled"),
        "{stderr}"
    );
}

/// The controller reads its Secrets in `tfjob-federator` wherever it runs
/// (SECRETS_NAMESPACE): a release elsewhere keeps that Role there.
#[test]
fn chart_in_another_namespace_keeps_the_secrets_role_in_tfjob_federator() {
    let objects = template("ml-platform", &[]);
    let lease_role = find(&objects, "Role", "tfjob-federator");
    assert_eq!(lease_role["metadata"]["namespace"], "ml-platform");
    assert_eq!(lease_role["rules"].as_array().map(Vec::len), Some(1));
    assert_eq!(lease_role["rules"][0]["resources"], json!(["leases"]));
    let secrets_role = find(&objects, "Role", "tfjob-federator-secrets");
    assert_eq!(secrets_role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(secrets_role["rules"][0]["resources"], json!(["secrets"]));
    let binding = find(&objects, "RoleBinding", "tfjob-federator-secrets");
    assert_eq!(binding["subjects"][0]["namespace"], "ml-platform");
    let cluster_binding = find(&objects, "ClusterRoleBinding", "tfjob-federator");
    assert_eq!(cluster_binding["subjects"][0]["namespace"], "ml-platform");
}

// ------------------------------------------------------------ kustomize

fn kustomize(dir: &str) -> Vec<Value> {
    documents(&run_ok(kubectl_binary(), &["kustomize", dir]))
}

/// `value` with every number as a float: YAML writers differ on `0` and
/// `0.0` (the CRDs' `minimum: 0.0` comes back from kustomize as `0`).
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[test]
fn kustomize_base_is_the_crds_and_the_controller() {
    let rendered = kustomize("deploy");
    let mut expected = documents(&read("deploy/crds/crds.yaml"));
    expected.extend(documents(&read("deploy/controller.yaml")));
    assert_eq!(rendered.len(), expected.len(), "{}", summary(&rendered));
    for object in &expected {
        let same = rendered.iter().find(|r| identify(r) == identify(object));
        assert!(
            same.map(numbers_as_floats) == Some(numbers_as_floats(object)),
            "{} differs as kustomize renders it",
            identify(object)
        );
    }
}

#[test]
fn kustomize_overlay_moves_the_controller_to_ml_platform() {
    let base = kustomize("deploy");
    let rendered = kustomize("overlays/second-namespace");
    for object in &rendered {
        let namespace = object["metadata"]["namespace"].as_str();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        if name == "tfjob-federator-secrets" {
            assert_eq!(namespace, Some(NAMESPACE), "{}", identify(object));
        } else if namespace.is_some() {
            assert_eq!(namespace, Some("ml-platform"), "{}", identify(object));
        }
    }
    for (kind, name) in [
        ("ClusterRoleBinding", "tfjob-federator"),
        ("RoleBinding", "tfjob-federator"),
        ("RoleBinding", "tfjob-federator-secrets"),
    ] {
        assert_eq!(
            find(&rendered, kind, name)["subjects"][0]["namespace"],
            "ml-platform",
            "{kind} {name}"
        );
    }
    // The two Roles together grant what the base's one does.
    let base_rules = &find(&base, "Role", "tfjob-federator")["rules"];
    let lease_rules = &find(&rendered, "Role", "tfjob-federator")["rules"];
    let secret_rules = &find(&rendered, "Role", "tfjob-federator-secrets")["rules"];
    assert_eq!(*base_rules, json!([lease_rules[0], secret_rules[0]]));
    assert_eq!(lease_rules.as_array().map(Vec::len), Some(1));
    find(&rendered, "Namespace", "ml-platform");
    find(&rendered, "Namespace", NAMESPACE);
}

/// `kubectl apply --server-side --dry-run=server` of a kustomize directory
/// on the real cluster: every object accepted. A dry run creates no
/// namespace, so the namespaces the objects go to exist first. The cluster
/// is shared with the helm install test, whose release may own the same
/// objects by then: a conflict with its field manager says nothing of
/// whether the server accepts ours, so the dry run forces them.
fn server_accepts(kubeconfig: &Path, dir: &str) {
    let kubeconfig = kubeconfig.to_str().expect("a UTF-8 path");
    let objects = kustomize(dir);
    let out = run_ok(
        kubectl_binary(),
        &[
            "--kubeconfig",
            kubeconfig,
            "apply",
            "--server-side",
            "--dry-run=server",
            "--force-conflicts",
            "-k",
            dir,
        ],
    );
    let accepted = out
        .lines()
        .filter(|l| l.ends_with("serverside-applied (server dry run)"))
        .count();
    assert_eq!(accepted, objects.len(), "{dir}: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_renderings_pass_a_server_side_dry_run() {
    let clusters = real::one_cluster().await;
    let home = clusters.client("home").await;
    for namespace in [NAMESPACE, "ml-platform"] {
        real::apply(
            &home,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await;
    }
    let kubeconfig = clusters.kubeconfig("home");
    tokio::task::spawn_blocking(move || {
        server_accepts(&kubeconfig, "deploy");
        server_accepts(&kubeconfig, "overlays/second-namespace");
    })
    .await
    .expect("the dry runs");
}

// ------------------------------------------------------------ helm install

/// Whether `object` (as rendered) exists on the cluster.
async fn exists(client: &Client, object: &Value) -> bool {
    let (api, kind, name) = real::api_of(client, object).await;
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"))
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_creates_every_object_and_its_identity_runs_a_job() {
    let clusters = real::one_cluster().await;
    let home = clusters.client("home").await;
    let kubeconfig = clusters.kubeconfig("home");
    let on_home = |args: &[&str]| {
        let mut all = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        tokio::task::spawn_blocking(move || {
            helm(&all.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };

    // The release's namespace enforces Pod Security "restricted": the
    // chart's pods must be admitted under it. (A merge patch: the harness
    // applies this namespace without labels, and would drop its own.)
    real::apply(
        &home,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await;
    let restricted =
        json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
    Api::<Namespace>::all(home.clone())
        .patch(
            NAMESPACE,
            &PatchParams::default(),
            &Patch::Merge(restricted),
        )
        .await
        .expect("label the namespace");
    let installed = on_home(&[
        "install",
        "tfjob-federator",
        CHART,
        "--namespace",
        NAMESPACE,
    ])
    .await
    .expect("helm install");
    assert!(installed.contains("STATUS: deployed"), "{installed}");

    let rendered = template(NAMESPACE, &[]);
    let crds = documents(&read(&format!("{CHART}/crds/crds.yaml")));
    for object in rendered.iter().chain(&crds) {
        assert!(
            exists(&home, object).await,
            "{} after helm install",
            identify(object)
        );
    }
    // The ReplicaSet's pods passed admission (no image runs here: kwok's
    // nodes only fake containers); then none are wanted, so that they do not
    // churn beside the test.
    let pods: Api<Pod> = Api::namespaced(home.clone(), NAMESPACE);
    let selector = ListParams::default().labels("app.kubernetes.io/name=tfjob-federator");
    eventually(
        "the chart's two pods admitted under Pod Security restricted",
        Duration::from_secs(60),
        async || {
            let count = pods.list(&selector).await.ok()?.items.len();
            (count >= 2).then_some(())
        },
    )
    .await;
    Api::<Deployment>::namespaced(home.clone(), NAMESPACE)
        .patch(
            "tfjob-federator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale the chart's Deployment to 0");

    // The controller as the chart's Deployment runs it: the chart's
    // ServiceAccount, its ConfigMap's settings, leader election in its
    // namespace.
    let token = real::service_account_token(&home, NAMESPACE, "tfjob-federator").await;
    let identity = clusters.dir().join("helm-chart-identity.kubeconfig");
    std::fs::write(&identity, real::with_token(&kubeconfig, &token))
        .expect("write the chart identity's kubeconfig");
    let settings = Api::<ConfigMap>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator")
        .await
        .expect("the chart's ConfigMap")
        .data
        .and_then(|d| d.get("config.yaml").cloned())
        .expect("config.yaml in the chart's ConfigMap");
    let env = Setup::on(Ground::Real)
        .identity(identity)
        .settings(&settings)
        .leader_elect("helm-chart-replica")
        .own_namespace("helm-install")
        .start()
        .await;
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[("run-seconds", "1")]),
        replica("worker", 2, &[("run-seconds", "30")]),
    ]});
    env.submit(&job("helm-chart", spec)).await;
    let done = env.wait_phase("helm-chart", JobPhase::Succeeded).await;
    assert_eq!(
        done.status.map(|s| s.aggregate.succeeded),
        Some(1),
        "the chief succeeded"
    );
    let refused: Vec<String> = env
        .controller_problems()
        .into_iter()
        .filter(|line| line.contains("403") || line.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        refused.is_empty(),
        "requests the chart's RBAC refused: {refused:#?}"
    );
    // Its Role let it make the signing key and hold the Lease.
    Api::<Secret>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator-signing-key")
        .await
        .expect("the signing key the controller made");
    let lease =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(home.clone(), NAMESPACE)
            .get("tfjob-federator")
            .await
            .expect("the leader Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("helm-chart-replica")
    );
    drop(env);

    on_home(&["uninstall", "tfjob-federator", "--namespace", NAMESPACE])
        .await
        .expect("helm uninstall");
    for object in &rendered {
        eventually(
            &format!("{} gone after helm uninstall", identify(object)),
            Duration::from_secs(30),
            async || (!exists(&home, object).await).then_some(()),
        )
        .await;
    }
    let namespace = Api::<Namespace>::all(home.clone()).get(NAMESPACE).await;
    assert!(
        namespace.is_ok(),
        "the namespace was not the chart's to delete"
    );
}
