//! The install recipes: the Helm chart (`deploy/helm/tfjob-federator`) lints
//! clean, renders what it promises and is the one source of
//! `deploy/controller.yaml`, `deploy/member-rbac.yaml` and
//! `deploy/member-fence.yaml`; installed with
//! `helm install` on a real cluster it creates every object, and the
//! controller, run as a local process with the token of the ServiceAccount
//! the chart made, runs a job to completion. The chart of an earlier commit
//! (from git) upgrades to the working tree's with the commands of
//! `docs/src/operations/upgrade-and-uninstall.md`, CRDs included, under a
//! running job; `helm uninstall` leaves what that page says, and its
//! command releases the jobs' finalizers. The kustomize base (`deploy/`)
//! and its overlay (`overlays/second-namespace`) render and a real API
//! server accepts them (server-side dry run).
//!
//! helm is built from its Go module by `hack/build-deploy-tools` (seconds
//! once built); kubectl is the one on PATH.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::kubectl::kubectl_binary;
use common::operator::{Setup, aggregate, backoff_count, job, phase_of, replica, restart_count};
use common::real::{self, Ground, repo_path};
use common::wait::eventually;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tfjob_federator::api::reason::{RECORD_UNVERIFIED, STATUS_OVERWRITTEN};
use tfjob_federator::api::{JobPhase, TensorFlowTrainingJob};
use tfjob_federator::config::ControllerConfig;
use tfjob_federator::record::FINALIZER;

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
    // Not while a chart test deletes the CRDs this applies.
    let _chart = CHART_TURN.lock().await;
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

// ------------------------------------------------------------ helm on a real cluster

/// The release every chart test installs, as the docs name it.
const RELEASE: &str = "tfjob-federator";
/// The page whose commands the upgrade and uninstall tests run.
const OPERATIONS_PAGE: &str = "docs/src/operations/upgrade-and-uninstall.md";
/// The chart the upgrade starts from (the operations page names it): its
/// CRD lacks `spec.scheduler.federation.failover` and the status's
/// `placement.replicaEpochs`, which today's has.
const PREVIOUS_CHART_COMMIT: &str = "4fa47122df6aa06c5bdda926aceb40c755c4cf45";

/// The chart tests (and the kustomize dry run) take turns: they share the
/// release, its namespace and the CRDs.
static CHART_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `helm --kubeconfig KUBECONFIG args`, off the async threads.
async fn helm_on(kubeconfig: &Path, args: &[&str]) -> String {
    let mut all = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    tokio::task::spawn_blocking(move || helm(&all.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .expect("helm")
}

/// The first `sh` block after the heading `heading` of the operations page.
fn page_commands(heading: &str) -> String {
    let page = read(OPERATIONS_PAGE);
    let mut lines = page.lines().skip_while(|line| {
        line.trim_start_matches('#').trim() != heading || !line.starts_with('#')
    });
    assert!(
        lines.next().is_some(),
        "{OPERATIONS_PAGE} has no heading {heading:?}"
    );
    let block: Vec<&str> = lines
        .skip_while(|line| *line != "```sh")
        .skip(1)
        .take_while(|line| *line != "```")
        .collect();
    assert!(
        !block.is_empty(),
        "{OPERATIONS_PAGE}: no sh block under {heading:?}"
    );
    block.join("\n")
}

/// Runs the commands of the operations page under `heading` with `sh`, in
/// the repository, against the cluster of `kubeconfig`, with our helm and
/// kubectl first on PATH; their output.
async fn run_page_commands(kubeconfig: &Path, heading: &str) -> String {
    let script = page_commands(heading);
    let path = std::env::join_paths(
        [helm_binary(), kubectl_binary()]
            .iter()
            .filter_map(|binary| binary.parent().map(Path::to_path_buf))
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .expect("a PATH");
    let kubeconfig = kubeconfig.to_path_buf();
    let heading = heading.to_string();
    tokio::task::spawn_blocking(move || {
        let output = Command::new("sh")
            .args(["-e", "-c", &script])
            .env("KUBECONFIG", &kubeconfig)
            .env("PATH", path)
            .current_dir(repo_path(""))
            .output()
            .expect("sh starts");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "the commands under {heading:?} failed:\n{script}\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    })
    .await
    .expect("the page's commands")
}

/// A fresh directory holding the chart as it was at `commit`, from git (no
/// network), at its path in the repository.
fn chart_at(commit: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("chart-{commit}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create the chart's directory");
    let archive = dir.join("chart.tar");
    let archive_path = archive.to_str().expect("a UTF-8 path");
    run_ok(
        Path::new("git"),
        &["archive", "--output", archive_path, commit, CHART],
    );
    run_ok(
        Path::new("tar"),
        &[
            "-x",
            "-f",
            archive_path,
            "-C",
            dir.to_str().expect("a UTF-8 path"),
        ],
    );
    dir
}

/// The chart's CRDs as rendered objects.
fn chart_crds(chart: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(chart.join("crds/crds.yaml")).expect("the chart's CRDs");
    documents(&text)
}

/// Whether `object` (as rendered) exists on the cluster.
async fn exists(client: &Client, object: &Value) -> bool {
    let (api, kind, name) = real::api_of(client, object).await;
    api.get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get {kind} {name}: {e}"))
        .is_some()
}

/// What a chart test works on: home, its turn taken, as before a first
/// `helm install`.
struct ChartGround {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    clusters: &'static real::RealClusters,
    home: Client,
    kubeconfig: PathBuf,
}

impl ChartGround {
    async fn take() -> ChartGround {
        let turn = CHART_TURN.lock().await;
        let clusters = real::one_cluster().await;
        fresh_home(clusters).await;
        ChartGround {
            _turn: turn,
            clusters,
            home: clusters.client("home").await,
            kubeconfig: clusters.kubeconfig("home"),
        }
    }

    /// `helm install` of `chart` as the release, in its namespace.
    async fn install(&self, chart: &Path) {
        let installed = helm_on(
            &self.kubeconfig,
            &[
                "install",
                RELEASE,
                chart.to_str().expect("a UTF-8 path"),
                "--namespace",
                NAMESPACE,
                "--create-namespace",
            ],
        )
        .await;
        assert!(installed.contains("STATUS: deployed"), "{installed}");
    }
}

/// Home as before a first `helm install`: no release, no jobs, no CRDs
/// (the chart under test installs its own).
async fn fresh_home(clusters: &real::RealClusters) {
    let kubeconfig = clusters.kubeconfig("home");
    helm_on(
        &kubeconfig,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--ignore-not-found",
            "--wait",
        ],
    )
    .await;
    let home = clusters.client("home").await;
    let _turn = clusters.exclusive().await;
    real::clean_slate(clusters, &["home"]).await;
    for crd in chart_crds(&repo_path(CHART)) {
        let (api, _, name) = real::api_of(&home, &crd).await;
        let _ = api.delete(name, &Default::default()).await;
    }
    for crd in chart_crds(&repo_path(CHART)) {
        eventually(
            &format!("{} deleted", identify(&crd)),
            Duration::from_secs(60),
            async || (!exists(&home, &crd).await).then_some(()),
        )
        .await;
    }
}

/// The controller as the release's Deployment runs it — a TokenRequest
/// token of the release's ServiceAccount, its ConfigMap's settings, leader
/// election in its namespace as `replica` — on the CRDs the chart
/// installed; the test works in a namespace of its own. (kwok's nodes run
/// no image: the chart's own pods never run the controller.)
async fn run_as_the_release(
    clusters: &real::RealClusters,
    replica: &str,
    test: &str,
) -> common::setup::Env {
    let home = clusters.client("home").await;
    let token = real::service_account_token(&home, NAMESPACE, "tfjob-federator").await;
    let identity = clusters.dir().join(format!("{replica}.kubeconfig"));
    std::fs::write(
        &identity,
        real::with_token(&clusters.kubeconfig("home"), &token),
    )
    .expect("write the release identity's kubeconfig");
    Setup::on(Ground::Real)
        .identity(identity)
        .settings(&release_settings(&home).await)
        .leader_elect(replica)
        .crds_as_installed()
        .own_namespace(test)
        .start()
        .await
}

/// The controller's settings in the release's ConfigMap.
async fn release_settings(home: &Client) -> String {
    Api::<ConfigMap>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator")
        .await
        .expect("the release's ConfigMap")
        .data
        .and_then(|d| d.get("config.yaml").cloned())
        .expect("config.yaml in the release's ConfigMap")
}

/// Every object the chart renders is gone, some time after `helm uninstall`.
async fn wait_gone(home: &Client, rendered: &[Value]) {
    for object in rendered {
        eventually(
            &format!("{} gone after helm uninstall", identify(object)),
            Duration::from_secs(30),
            async || (!exists(home, object).await).then_some(()),
        )
        .await;
    }
}

/// The request logs of the controller that its RBAC refused.
fn refused_requests(env: &common::setup::Env) -> Vec<String> {
    env.controller_problems()
        .into_iter()
        .filter(|line| line.contains("403") || line.to_lowercase().contains("forbidden"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_creates_every_object_and_its_identity_runs_a_job() {
    let ground = ChartGround::take().await;
    let (home, kubeconfig) = (ground.home.clone(), ground.kubeconfig.clone());

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
    ground.install(&repo_path(CHART)).await;

    let rendered = template(NAMESPACE, &[]);
    let crds = chart_crds(&repo_path(CHART));
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
    scale_to_none(&home).await;

    let env = run_as_the_release(ground.clusters, "helm-chart-replica", "helm-install").await;
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
    let refused = refused_requests(&env);
    assert!(
        refused.is_empty(),
        "requests the chart's RBAC refused: {refused:#?}"
    );
    // Its Role let it make the signing key and hold the Lease.
    Api::<Secret>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator-signing-key")
        .await
        .expect("the signing key the controller made");
    let lease = Api::<Lease>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator")
        .await
        .expect("the leader Lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("helm-chart-replica")
    );
    drop(env);

    helm_on(
        &kubeconfig,
        &["uninstall", RELEASE, "--namespace", NAMESPACE],
    )
    .await;
    wait_gone(&home, &rendered).await;
    let namespace = Api::<Namespace>::all(home.clone()).get(NAMESPACE).await;
    assert!(
        namespace.is_ok(),
        "the namespace was not the chart's to delete"
    );
}

// ------------------------------------------------------------ helm upgrade

/// The properties of `spec.scheduler.federation` in a job CRD's first
/// version.
fn federation_properties(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["scheduler"]
        ["properties"]["federation"]["properties"]
}

/// The job CRD among the chart's CRDs.
fn job_crd(crds: &[Value]) -> &Value {
    find(crds, "CustomResourceDefinition", JOB_CRD)
}

const JOB_CRD: &str = "tensorflowtrainingjobs.batch.tensorstack.dev";

/// The job CRD as the server has it.
async fn served_job_crd(home: &Client) -> Value {
    let crds = chart_crds(&repo_path(CHART));
    let (api, _, name) = real::api_of(home, job_crd(&crds)).await;
    let served = api.get(name).await.expect("the job CRD on the server");
    serde_json::to_value(served).expect("the CRD as JSON")
}

/// What the server keeps of `failover: LostReplicas` in a job it would
/// create (a dry run).
async fn kept_failover(env: &common::setup::Env) -> Value {
    let spec = json!({
        "scheduler": {"federation": {"failover": "LostReplicas"}},
        "replicaSpecs": [replica("chief", 1, &[])],
    });
    let object: kube::api::DynamicObject =
        serde_json::from_value(serde_json::to_value(job("dry-run", spec)).expect("a job"))
            .expect("a job as a DynamicObject");
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = env
        .raw_jobs()
        .create(&params, &object)
        .await
        .expect("a dry-run create");
    created.data["spec"]["scheduler"]["federation"]["failover"].clone()
}

/// The pods of a job by name, with their uids.
async fn pod_uids(env: &common::setup::Env, job: &str) -> BTreeMap<String, String> {
    env.job_pods(job)
        .await
        .into_iter()
        .map(|(name, pod)| (name, pod.metadata.uid.unwrap_or_default()))
        .collect()
}

/// The reasons of the job's Events that say its status did not verify.
async fn unverified_reasons(env: &common::setup::Env, job: &TensorFlowTrainingJob) -> Vec<String> {
    let uid = job.metadata.uid.as_deref().expect("the job's uid");
    env.events_about(uid)
        .await
        .into_iter()
        .filter_map(|event| event.reason)
        .filter(|reason| [STATUS_OVERWRITTEN, RECORD_UNVERIFIED].contains(&reason.as_str()))
        .collect()
}

/// Installs the chart of an earlier commit (from git), runs a job under it,
/// and upgrades to the working tree's chart with the operations page's
/// commands: the CRD on the server is then today's, and the job keeps its
/// pods and its sealed status, and succeeds under the controller restarted
/// as the upgraded Deployment's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_from_the_previous_chart_keeps_a_running_job() {
    let ground = ChartGround::take().await;
    let (home, kubeconfig) = (ground.home.clone(), ground.kubeconfig.clone());
    let previous = chart_at(PREVIOUS_CHART_COMMIT);
    ground.install(&previous.join(CHART)).await;
    std::fs::remove_dir_all(&previous).expect("remove the previous chart");
    assert_eq!(
        federation_properties(&served_job_crd(&home).await)["failover"],
        Value::Null,
        "the previous chart's CRD has no failover"
    );
    scale_to_none(&home).await;

    let mut env = run_as_the_release(ground.clusters, "before-upgrade", "helm-upgrade").await;
    assert_eq!(
        kept_failover(&env).await,
        Value::Null,
        "the previous CRD prunes the field it lacks"
    );
    let spec = json!({"replicaSpecs": [
        replica("chief", 1, &[("run-seconds", "60")]),
        replica("worker", 2, &[("run-seconds", "600")]),
    ]});
    env.submit(&job("upgraded", spec)).await;
    let running = env
        .wait_job("upgraded", "running its 3 pods", |j| {
            phase_of(j) == Some(JobPhase::Running) && aggregate(j)[2] == 3
        })
        .await;
    let pods = pod_uids(&env, "upgraded").await;
    assert_eq!(pods.len(), 3, "{pods:?}");
    let before = env.raw_jobs().get("upgraded").await.expect("the job");
    assert!(
        before.data["status"]["seal"].is_string(),
        "a sealed status: {}",
        before.data["status"]
    );

    run_page_commands(&kubeconfig, "Upgrading").await;
    let served = served_job_crd(&home).await;
    let crds = chart_crds(&repo_path(CHART));
    let versions = |crd: &Value| {
        crd["spec"]["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| (v["name"].clone(), numbers_as_floats(&v["schema"])))
            .collect::<Vec<_>>()
    };
    assert!(
        versions(&served) == versions(job_crd(&crds)),
        "the job CRD on the server is the working tree's after the upgrade"
    );
    assert_eq!(kept_failover(&env).await, json!("LostReplicas"));
    let history = helm_on(&kubeconfig, &["history", RELEASE, "--namespace", NAMESPACE]).await;
    assert_eq!(
        history.lines().skip(1).count(),
        2,
        "an install and an upgrade: {history}"
    );
    // The CRD update rewrote no job: the same object, its sealed status
    // and all.
    let after = env.raw_jobs().get("upgraded").await.expect("the job");
    assert_eq!(
        (&after.metadata.resource_version, &after.data),
        (&before.metadata.resource_version, &before.data)
    );
    scale_to_none(&home).await;

    // The upgraded Deployment's pod: the new ConfigMap, the controller
    // killed and started again.
    std::fs::write(
        env.dir.join("controller.yaml"),
        release_settings(&home).await,
    )
    .expect("write the upgraded settings");
    env.restart_controller().await;
    let done = eventually(
        "the upgraded job to succeed, on its own pods",
        Duration::from_secs(120),
        async || {
            let job = env
                .jobs()
                .get("upgraded")
                .await
                .map_err(|e| e.to_string())?;
            let now = pod_uids(&env, "upgraded").await;
            let replaced: Vec<&String> = now
                .iter()
                .filter(|(name, uid)| pods.get(*name).is_some_and(|before| before != *uid))
                .map(|(name, _)| name)
                .collect();
            assert!(replaced.is_empty(), "pods replaced: {replaced:?}");
            match phase_of(&job) {
                Some(JobPhase::Succeeded) => Ok(job),
                phase => Err(format!("{phase:?}")),
            }
        },
    )
    .await;
    assert_eq!(aggregate(&done)[3], 1, "the chief succeeded");
    assert_eq!(
        (
            restart_count(&done, "chief"),
            restart_count(&done, "worker"),
            backoff_count(&done)
        ),
        (0, 0, 0),
        "no restarts"
    );
    assert_eq!(
        done.metadata.uid, running.metadata.uid,
        "the same job object"
    );
    assert_eq!(unverified_reasons(&env, &done).await, Vec::<String>::new());
    let refused = refused_requests(&env);
    assert!(
        refused.is_empty(),
        "requests the chart's RBAC refused: {refused:#?}"
    );
    drop(env);
    helm_on(
        &kubeconfig,
        &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"],
    )
    .await;
}

/// The release's Deployment wants no pods: kwok's nodes would only fake
/// them beside the controller the test runs.
async fn scale_to_none(home: &Client) {
    Api::<Deployment>::namespaced(home.clone(), NAMESPACE)
        .patch(
            "tfjob-federator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale the release's Deployment to 0");
}

// ------------------------------------------------------------ helm uninstall

/// `helm uninstall` as the operations page says: what it says stays does
/// (CRDs, the job with its finalizer, the signing key, the Lease), the
/// job's namespace cannot be deleted while the finalizer stays, and the
/// page's command releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_uninstall_leaves_what_the_docs_say_and_their_command_releases_the_jobs() {
    let ground = ChartGround::take().await;
    let (home, kubeconfig) = (ground.home.clone(), ground.kubeconfig.clone());
    ground.install(&repo_path(CHART)).await;
    scale_to_none(&home).await;

    let mut env = run_as_the_release(ground.clusters, "before-uninstall", "helm-uninstall").await;
    let spec = json!({"replicaSpecs": [replica("chief", 1, &[("run-seconds", "600")])]});
    env.submit(&job("left-behind", spec)).await;
    env.wait_job("left-behind", "running, with the finalizer", |j| {
        phase_of(j) == Some(JobPhase::Running)
            && j.metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
    })
    .await;
    // The Deployment's pods go with the release: SIGTERM.
    let stopped = env.terminate_controller();
    assert!(stopped.success(), "the controller stopped: {stopped}");

    run_page_commands(&kubeconfig, "Uninstalling").await;
    wait_gone(&home, &template(NAMESPACE, &[])).await;
    for crd in chart_crds(&repo_path(CHART)) {
        assert!(exists(&home, &crd).await, "{} stays", identify(&crd));
    }
    let job_left = env.job("left-behind").await;
    assert!(
        job_left
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER),
        "the job stays with its finalizer: {:?}",
        job_left.metadata.finalizers
    );
    Api::<Secret>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator-signing-key")
        .await
        .expect("the signing key stays");
    Api::<Lease>::namespaced(home.clone(), NAMESPACE)
        .get("tfjob-federator")
        .await
        .expect("the leader Lease stays");

    // The job's namespace: deleted, held by the job's finalizer.
    let namespaces: Api<Namespace> = Api::all(home.clone());
    namespaces
        .delete(&env.namespace, &Default::default())
        .await
        .expect("delete the job's namespace");
    env.wait_job("left-behind", "deleted but held", |j| {
        j.metadata.deletion_timestamp.is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = namespaces
        .get(&env.namespace)
        .await
        .expect("the namespace is held");
    assert_eq!(
        held.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    env.job("left-behind").await;

    run_page_commands(&kubeconfig, "Releasing the finalizers").await;
    let jobs = env.jobs();
    eventually(
        "the job gone once released",
        Duration::from_secs(30),
        async || {
            jobs.get_opt("left-behind")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    eventually(
        "the job's namespace gone once released",
        Duration::from_secs(120),
        async || {
            namespaces
                .get_opt(&env.namespace)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}
