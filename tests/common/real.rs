//! Real control planes for the tests: `hack/real-clusters` (kube-apiserver,
//! etcd, kube-controller-manager, kube-scheduler and kwok, built from the Go
//! modules in `hack/`), started once per test binary and shared by its
//! tests, which take turns ([`RealClusters::exclusive`]): a test that starts
//! a controller owns the clusters while it runs, since a controller acts on
//! every namespace and capacity is per cluster, not per namespace.
//!
//! The launcher builds the components on first use (minutes on a cold
//! machine, progress on stderr). When Go or a component is missing the tests
//! fail with a message naming the command that fixes it; nothing is skipped.
//!
//! `#[macro_use]` on `mod common` brings `on_both_grounds!`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};

use super::process::Process;
use super::wait::eventually;

/// Where a test runs: a simulated cluster of its own, or the real clusters
/// its test binary shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ground {
    Sim,
    Real,
}

/// For each scenario `NAME` of the list, the tests `NAME::sim` and
/// `NAME::real`: one source, both grounds. A scenario is
/// - `async fn NAME(ground: Ground)`: `on_both_grounds!(NAME, …)`;
/// - `async fn NAME(world: W)` where `async fn SETUP(Ground, &str) -> W`
///   makes its world: `on_both_grounds!(async SETUP; NAME, …)`;
/// - `fn NAME(ground: Ground)`: `on_both_grounds!(sync: NAME, …)`;
/// - `fn NAME(world: &W)` where `fn SETUP(Ground, &str) -> W`:
///   `on_both_grounds!(sync SETUP; NAME, …)`.
#[allow(unused_macros)]
macro_rules! on_both_grounds {
    (async $setup:path; $($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sim() {
                super::$name($setup(super::Ground::Sim, stringify!($name)).await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                super::$name($setup(super::Ground::Real, stringify!($name)).await).await
            }
        }
    )*};
    (sync $setup:path; $($name:ident),* $(,)?) => {$(
        mod $name {
            use super::*;
            #[test]
            fn sim() {
                super::$name(&$setup(super::Ground::Sim, stringify!($name)))
            }
            #[test]
            fn real() {
                super::$name(&$setup(super::Ground::Real, stringify!($name)))
            }
        }
    )*};
    (sync: $($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sim() {
                super::$name(super::Ground::Sim)
            }
            #[test]
            fn real() {
                super::$name(super::Ground::Real)
            }
        }
    )*};
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sim() {
                super::$name(super::Ground::Sim).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn real() {
                super::$name(super::Ground::Real).await
            }
        }
    )*};
}

/// How long the first start may take: it may build Kubernetes.
const START_LIMIT: Duration = Duration::from_secs(45 * 60);

/// One `hack/real-clusters` process, ready once it wrote `DIR/ready`, stopped
/// when dropped, and also when the test process dies (it watches its
/// standard input, which closes with this process).
pub struct Launcher {
    pub dir: PathBuf,
    process: Process,
}

impl Launcher {
    pub async fn start(args: &[&str]) -> Launcher {
        let dir = std::env::temp_dir().join(format!(
            "real-clusters-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let log = dir.with_extension("log");
        eprintln!(
            "starting real clusters ({}) in {}, messages in {}; a first run builds Kubernetes from Go modules (many minutes)",
            args.join(" "),
            dir.display(),
            log.display()
        );
        let mut process = Process::spawn_stopped_by_stdin_eof(
            "hack/real-clusters (it needs bash and Go 1.26 on PATH; `hack/build-kube` builds the components)",
            Command::new(repo_path("hack/real-clusters"))
                .arg("--kubeconfig-dir")
                .arg(&dir)
                .args(args)
                .env("REAL_CLUSTERS_EXIT_ON_STDIN_EOF", "1"),
            &log,
        );
        eventually("the real clusters to be ready", START_LIMIT, async || {
            process.check_alive();
            dir.join("ready").exists().then_some(())
        })
        .await;
        Launcher { dir, process }
    }

    /// The launcher's process id (the names of its network namespaces
    /// carry it: `rc<pid>-…`).
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// SIGTERM, then its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.process.terminate()
    }

    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.dir.join(format!("{cluster}.kubeconfig"))
    }
}

/// Real clusters shared by the tests of one binary, which take turns where
/// they must ([`RealClusters::exclusive`]).
pub struct RealClusters {
    launcher: Launcher,
    turn: tokio::sync::Mutex<()>,
    controller_kubeconfig: tokio::sync::OnceCell<PathBuf>,
    /// The member kubeconfig Secrets as `--register` wrote them (read
    /// before any test changed one), by name.
    registered_secrets: tokio::sync::OnceCell<Vec<(String, Value)>>,
}

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

static ONE: tokio::sync::OnceCell<RealClusters> = tokio::sync::OnceCell::const_new();
static THREE: tokio::sync::OnceCell<RealClusters> = tokio::sync::OnceCell::const_new();

/// One cluster, `home`, with the default nodes (4 × 4 GPUs; one real node
/// of 4 GPUs where [`on_real_nodes`]) and no members.
pub async fn one_cluster() -> &'static RealClusters {
    ONE.get_or_init(|| async {
        let nodes: &[&str] = if on_real_nodes() {
            REAL_NODES_ONLY
        } else {
            &[]
        };
        RealClusters::start(&[&["--clusters", "1"], nodes].concat()).await
    })
    .await
}

/// The runtime's id of the pod's first container ("" before it has one).
pub fn container_id(pod: &k8s_openapi::api::core::v1::Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.container_id.clone())
        .unwrap_or_default()
}

/// The test binaries whose shared clusters run their pods on real nodes
/// (docs/src/testing/real-nodes.md): each cluster's one node is a real
/// one, with the TensorFlow image; the others' is kwok's, their pods
/// scripted.
const ON_REAL_NODES: &[&str] = &["real_nodes", "tensorflow"];

/// The launcher's flags for clusters whose only node is a real one.
const REAL_NODES_ONLY: &[&str] = &["--nodes", "0", "--real-nodes", "--tensorflow-image"];

/// This test binary's shared clusters have real nodes.
pub fn on_real_nodes() -> bool {
    ON_REAL_NODES.contains(&env!("CARGO_CRATE_NAME"))
}

static REAL_NODES_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where [`on_real_nodes`], the whole ground is a test's until the guard
/// drops, one cluster and three alike, their start included: real
/// TensorFlow is CPU-bound, and a second launcher importing the 2 GiB
/// image beside a training job made it miss its limits on two cores.
/// Elsewhere the shapes take turns each on its own (`None`).
pub async fn real_nodes_turn() -> Option<tokio::sync::MutexGuard<'static, ()>> {
    if on_real_nodes() {
        Some(REAL_NODES_TURN.lock().await)
    } else {
        None
    }
}

/// `home`, `member-1` and `member-2`, one node of 4 GPUs each (a real one
/// where [`on_real_nodes`]), the members registered with the identity of
/// `deploy/member-rbac.yaml` (the shape of the federation tests).
pub async fn three_clusters() -> &'static RealClusters {
    THREE
        .get_or_init(|| async {
            let nodes: &[&str] = if on_real_nodes() {
                REAL_NODES_ONLY
            } else {
                &["--nodes", "1"]
            };
            let shape: &[&str] = &["--clusters", "3", "--register", "--gpus-per-node", "4"];
            RealClusters::start(&[shape, nodes].concat()).await
        })
        .await
}

impl RealClusters {
    async fn start(args: &[&str]) -> RealClusters {
        RealClusters {
            launcher: Launcher::start(args).await,
            turn: tokio::sync::Mutex::new(()),
            controller_kubeconfig: tokio::sync::OnceCell::new(),
            registered_secrets: tokio::sync::OnceCell::new(),
        }
    }

    /// Where the kubeconfigs are.
    pub fn dir(&self) -> &Path {
        &self.launcher.dir
    }

    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.launcher.kubeconfig(cluster)
    }

    /// An admin client of `cluster`, through its fault proxy.
    pub async fn client(&self, cluster: &str) -> Client {
        client_from_file(&self.kubeconfig(cluster)).await
    }

    /// The clusters are this test's until the guard drops.
    pub async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// A kubeconfig for home with the identity `deploy/controller.yaml`
    /// ships: its RBAC objects applied, a token of its ServiceAccount.
    pub async fn controller_kubeconfig(&self) -> PathBuf {
        self.controller_kubeconfig
            .get_or_init(async || {
                let home = self.client("home").await;
                apply_manifest(&home, &repo_path("deploy/controller.yaml"), |kind| {
                    !matches!(kind, "Deployment" | "Service" | "ConfigMap")
                })
                .await;
                let token =
                    service_account_token(&home, "tfjob-federator", "tfjob-federator").await;
                let path = self.dir().join("controller-identity.kubeconfig");
                std::fs::write(&path, with_token(&self.kubeconfig("home"), &token))
                    .expect("write the controller's kubeconfig");
                path
            })
            .await
            .clone()
    }
}

/// A client built the way a user would: kubeconfig YAML → `Config` → `Client`.
pub async fn client_for(kubeconfig_yaml: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig_yaml).expect("parse kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    Client::try_from(config).expect("client from config")
}

pub async fn client_from_file(path: &Path) -> Client {
    let yaml = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read kubeconfig {}: {e}", path.display()));
    client_for(&yaml).await
}

/// `kubeconfig` (YAML) with `namespace` as every context's namespace.
pub fn with_namespace(kubeconfig: &str, namespace: &str) -> String {
    let mut config: Value = serde_yaml::from_str(kubeconfig).expect("kubeconfig YAML");
    for context in config["contexts"]
        .as_array_mut()
        .expect("contexts in the kubeconfig")
    {
        context["context"]["namespace"] = json!(namespace);
    }
    serde_yaml::to_string(&config).expect("kubeconfig YAML")
}

/// Server-side applies the documents of a manifest whose kind `keep` accepts.
pub async fn apply_manifest(client: &Client, path: &Path, keep: impl Fn(&str) -> bool) {
    let text = std::fs::read_to_string(path).expect("read manifest");
    for document in serde_yaml::Deserializer::from_str(&text) {
        let object: Value = serde::Deserialize::deserialize(document).expect("YAML document");
        let Some(kind) = object["kind"].as_str() else {
            continue;
        };
        if !keep(kind) {
            continue;
        }
        apply(client, &object).await;
    }
}

/// The API of one rendered object's kind (any kind the server serves), in
/// its namespace, with its kind and name.
pub async fn api_of<'o>(
    client: &Client,
    object: &'o Value,
) -> (Api<DynamicObject>, &'o str, &'o str) {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("{kind} is served: {e}"));
    let name = object["metadata"]["name"].as_str().expect("name");
    let api = match (capabilities.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &resource)
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    (api, kind, name)
}

/// Server-side applies one object (any kind the server serves).
pub async fn apply(client: &Client, object: &Value) {
    let (api, kind, name) = api_of(client, object).await;
    api.patch(
        name,
        &PatchParams::apply("tfjob-federator-tests").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
}

/// A day-long token of a ServiceAccount (TokenRequest, as `kubectl create
/// token` does).
pub async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(24 * 60 * 60),
            ..Default::default()
        }),
        ..Default::default()
    };
    // The ServiceAccount may have been created a moment ago.
    let answer = eventually(
        &format!("a token for {namespace}/{name}"),
        Duration::from_secs(5),
        async || {
            accounts
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    answer
        .status
        .and_then(|s| s.token)
        .expect("a token in the answer")
}

/// The kubeconfig at `admin` with its user's token replaced by `token`.
pub fn with_token(admin: &Path, token: &str) -> String {
    let yaml = std::fs::read_to_string(admin).expect("read kubeconfig");
    let mut kubeconfig: Value = serde_yaml::from_str(&yaml).expect("kubeconfig YAML");
    for user in kubeconfig["users"]
        .as_array_mut()
        .expect("users in the kubeconfig")
    {
        user["user"] = json!({"token": token});
    }
    serde_yaml::to_string(&kubeconfig).expect("kubeconfig YAML")
}

/// The job type, for untyped (`DynamicObject`) access.
pub fn job_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("batch.tensorstack.dev", "v1beta1", "TensorFlowTrainingJob"),
        "tensorflowtrainingjobs",
    )
}

/// The MemberCluster type, for untyped (`DynamicObject`) access.
pub fn member_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("federation.tfjob.io", "v1alpha1", "MemberCluster"),
        "memberclusters",
    )
}

/// Installs (server-side applies) the CRDs of `tfjob-federator crd`.
pub async fn install_crds(client: &Client) {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in tfjob_federator::api::crds() {
        let name = crd.metadata.name.clone().expect("CRD name");
        crds.patch(
            &name,
            &PatchParams::apply("tfjob-federator-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("install CRD {name}: {e}"));
    }
    // The controller's namespace (its signing key, member Secrets, Lease).
    apply(
        client,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tfjob-federator"}}),
    )
    .await;
}

/// The label of what a test adds on home for a while (MemberClusters,
/// Secrets): the clean slate removes it.
pub const EXTRA_LABEL: &str = "test.federation.tfjob.io/extra";

/// On each member, the rule the book's plugin page asks users to add:
/// `pods/log` for the member identity (`deploy/member-rbac.yaml`'s
/// ServiceAccount), so that `kubectl tfjob logs` reads a replica's log there.
pub async fn grant_member_logs(clusters: &RealClusters, members: &[&str]) {
    for member in members {
        let client = clusters.client(member).await;
        apply(
            &client,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "tfjob-logs"},
                "rules": [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]}),
        )
        .await;
        apply(
            &client,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "tfjob-logs"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tfjob-logs"},
                "subjects": [{"kind": "ServiceAccount", "name": "tfjob-federator-member", "namespace": "tfjob-federator"}]}),
        )
        .await;
    }
}

/// A name for `test` that no other run uses: lower case, at most 57
/// characters (a DNS label with room for a suffix).
pub fn unique_name(test: &str) -> String {
    let mut base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(50)
        .collect();
    while base.ends_with('-') {
        base.pop();
    }
    format!("{base}-{:06x}", fastrand::u32(..0x100_0000))
}

/// A fresh namespace for `test`, once kube-controller-manager filled it: its
/// `default` ServiceAccount (pods are refused before the serviceaccount
/// controller made it) and its `kube-root-ca.crt` ConfigMap (the root-ca-cert
/// publisher adds it some time after the namespace appears; tests that list
/// the namespace's ConfigMaps expect it).
pub async fn test_namespace(client: &Client, test: &str) -> String {
    let name = unique_name(test);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
    }))
    .expect("a Namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    eventually(
        &format!("the default ServiceAccount in namespace {name}"),
        Duration::from_secs(30),
        async || accounts.get_opt("default").await.ok().flatten(),
    )
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    eventually(
        &format!("the kube-root-ca.crt ConfigMap in namespace {name}"),
        Duration::from_secs(30),
        async || config_maps.get_opt("kube-root-ca.crt").await.ok().flatten(),
    )
    .await;
    name
}

/// What earlier tests left goes before the next one starts, even after a
/// failure: every TensorFlowTrainingJob on home loses its finalizer (no
/// controller runs between tests) and is deleted, MemberClusters get back their registered spec and lose the
/// status an earlier controller wrote, and on every
/// cluster in `names` faults are healed and the pods and services a
/// controller made are deleted, waiting until the pods are gone (capacity
/// is per cluster). The leader Lease goes too, so that the next controller
/// leads at once whatever its identity.
pub async fn clean_slate(clusters: &RealClusters, names: &[&str]) {
    let home = clusters.client("home").await;
    let _ = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(
        home.clone(),
        "tfjob-federator",
    )
    .delete("tfjob-federator", &Default::default())
    .await;
    let all_jobs: Api<DynamicObject> = Api::all_with(home.clone(), &job_resource());
    for job in all_jobs
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let (Some(ns), Some(name)) = (job.metadata.namespace, job.metadata.name) else {
            continue;
        };
        let jobs: Api<DynamicObject> = Api::namespaced_with(home.clone(), &ns, &job_resource());
        let _ = jobs
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = jobs.delete(&name, &Default::default()).await;
    }
    // What a test added on home (MemberClusters and their Secrets, labelled
    // as extras) goes; the member Secrets get back what `--register` wrote
    // (a test points one at another cluster).
    let members: Api<DynamicObject> = Api::all_with(home.clone(), &member_resource());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(home.clone(), "tfjob-federator");
    let extras = ListParams::default().labels(EXTRA_LABEL);
    for member in members
        .list(&extras)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if let Some(name) = member.metadata.name {
            let _ = members.delete(&name, &Default::default()).await;
        }
    }
    for secret in secrets
        .list(&extras)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if let Some(name) = secret.metadata.name {
            let _ = secrets.delete(&name, &Default::default()).await;
        }
    }
    let registered = clusters
        .registered_secrets
        .get_or_init(async || {
            let mut found = Vec::new();
            for name in names.iter().filter(|n| **n != "home") {
                if let Ok(secret) = secrets.get(name).await {
                    found.push((name.to_string(), json!(secret.data)));
                }
            }
            found
        })
        .await;
    for (name, data) in registered {
        let _ = secrets
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": data})),
            )
            .await;
    }
    // MemberClusters as `--register` made them (exporting their Services):
    // earlier tests label them, mark them unschedulable or stop exports.
    for member in members
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if let Some(name) = member.metadata.name {
            let reset = json!({"metadata": {"labels": null}, "spec": {"unschedulable": null, "exportServices": true, "addressTemplate": null, "podPolicy": null}});
            let _ = members
                .patch(&name, &PatchParams::default(), &Patch::Merge(reset))
                .await;
            // The next controller's own view, not a Ready an earlier one wrote.
            let _ = members
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": null})),
                )
                .await;
        }
    }
    let managed = ListParams::default().labels("app.kubernetes.io/managed-by=tfjob-federator");
    for cluster in names {
        let client = clusters.client(cluster).await;
        let heal = hyper::Request::put("/_sim/faults")
            .header("content-type", "application/json")
            .body(
                br#"{"partitioned":false,"latencyMs":0,"errorRate":0,"failRequests":{"verb":"","resource":"","count":0}}"#
                    .to_vec(),
            )
            .expect("request");
        client
            .request_text(heal)
            .await
            .unwrap_or_else(|e| panic!("{cluster}: faults healed: {e}"));
        // Pod Security an earlier test enforced in `default`.
        let unlabel = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": null}}});
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .patch("default", &PatchParams::default(), &Patch::Merge(unlabel))
            .await;
        delete_all::<k8s_openapi::api::core::v1::Service>(&client, &managed).await;
        let pods = delete_all::<k8s_openapi::api::core::v1::Pod>(&client, &managed).await;
        eventually(
            &format!("{cluster}: the managed pods of earlier tests gone"),
            Duration::from_secs(30),
            async || {
                let left = pods.list(&managed).await.ok()?.items;
                left.is_empty().then_some(())
            },
        )
        .await;
    }
}

/// Deletes every object of kind `K` that `selector` selects, in every
/// namespace; returns the API over all namespaces.
async fn delete_all<K>(client: &Client, selector: &ListParams) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let all: Api<K> = Api::all(client.clone());
    for object in all
        .list(selector)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let meta = object.meta();
        if let (Some(ns), Some(name)) = (&meta.namespace, &meta.name) {
            let _ = Api::<K>::namespaced(client.clone(), ns)
                .delete(name, &Default::default())
                .await;
        }
    }
    all
}

/// The MemberClusters as `--register` made them on the real clusters of
/// this test binary, read before any test here deleted one.
static REGISTERED: tokio::sync::OnceCell<Vec<Value>> = tokio::sync::OnceCell::const_new();

/// On the shared real clusters: the registered MemberClusters exist (a test
/// may delete one; after a failure it may not have come back).
pub async fn ensure_registered(clusters: &RealClusters) {
    let home = clusters.client("home").await;
    let members: Api<DynamicObject> = Api::all_with(home, &member_resource());
    let registered = REGISTERED
        .get_or_init(|| async {
            members
                .list(&ListParams::default())
                .await
                .expect("list MemberClusters")
                .items
                .into_iter()
                .map(|m| {
                    json!({
                        "apiVersion": "federation.tfjob.io/v1alpha1",
                        "kind": "MemberCluster",
                        "metadata": {"name": m.metadata.name},
                        "spec": m.data["spec"],
                    })
                })
                .collect()
        })
        .await;
    let names: Vec<&str> = registered
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["member-1", "member-2"], "the registered members");
    for member in registered {
        let name = member["metadata"]["name"].as_str().expect("name");
        if members.get_opt(name).await.expect("get member").is_none() {
            let object: DynamicObject = serde_json::from_value(member.clone()).expect("member");
            members
                .create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("re-register {name}: {e}"));
        }
    }
}

/// The book's page of what each identity may do.
pub const RBAC_PAGE: &str = "docs/src/installing/rbac.md";

/// The rows of the RBAC tables of the book (`RBAC_PAGE`) for `account`, as
/// (API group, resource, verb); `core` is the group "". Panics when there
/// are none.
pub fn documented_rbac_rows(account: &str) -> Vec<(String, String, String)> {
    let page = std::fs::read_to_string(repo_path(RBAC_PAGE)).expect(RBAC_PAGE);
    let mut rows = Vec::new();
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, identity, group, resource, verbs, _] = cells.as_slice() else {
            continue;
        };
        if !identity.contains(&format!("`{account}`")) {
            continue;
        }
        let group = match group.trim_matches('`') {
            "core" => "",
            other => other,
        };
        // The resource is the first `quoted` word; what follows (e.g. the
        // one object a rule names) is for the reader.
        let resource = resource.split('`').nth(1).unwrap_or(resource);
        for verb in verbs.split(',').map(str::trim) {
            rows.push((group.to_string(), resource.to_string(), verb.to_string()));
        }
    }
    assert!(
        !rows.is_empty(),
        "{RBAC_PAGE} documents what {account} may do"
    );
    rows
}
