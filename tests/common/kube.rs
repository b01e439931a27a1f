//! Helpers for tests that drive a cluster through kube-rs, without a
//! controller: start a cluster and build a `kube::Client` from its
//! kubeconfig, call the `/_sim/` admin paths, and build objects.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, Status};
use kube_sim::{self as sim, RunningCluster, SimOptions};
use serde_json::{Value, json};

use super::real::{self, Ground, Launcher, client_for, test_namespace, with_namespace};
use super::wait::eventually;

/// How long the client suites wait for an eventual condition.
pub const EVENTUALLY: Duration = Duration::from_secs(5);

/// One simulated cluster and a kube-rs client for it.
pub struct SimCluster {
    pub handle: RunningCluster,
    pub client: Client,
}

impl SimCluster {
    /// Starts a cluster in-process and connects a client through its kubeconfig.
    pub async fn start(name: &str) -> SimCluster {
        let handle = sim::start_cluster(name, &SimOptions::default())
            .await
            .expect("start simulated cluster");
        let client = client_for(&handle.kubeconfig()).await;
        SimCluster { handle, client }
    }

    /// Calls `/_sim/<path>` and returns the JSON answer; panics on an error status.
    pub async fn admin(&self, method: hyper::Method, path: &str, body: Option<Value>) -> Value {
        admin_request(&self.client, method, path, body).await
    }

    /// Forgets the watch history: older resourceVersions now get 410.
    pub async fn compact(&self) {
        let answer = self.admin(hyper::Method::POST, "compact", None).await;
        assert!(
            answer.get("compactedTo").is_some(),
            "compact answered {answer}"
        );
    }

    /// Ends every open watch stream.
    pub async fn drop_watches(&self) {
        self.admin(hyper::Method::POST, "drop-watches", None).await;
    }

    /// `PUT /_sim/faults`, returning the settings now in force.
    pub async fn set_faults(&self, faults: Value) -> Value {
        self.admin(hyper::Method::PUT, "faults", Some(faults)).await
    }

    pub async fn stop(self) {
        self.handle.stop().await;
    }
}

/// The API error of a result that must have failed with one.
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A ConfigMap with the given labels and data.
pub fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .expect("ConfigMap")
}

/// The group of the `Widget` custom resource of the test whose namespace is
/// `namespace`: a CRD is cluster-wide, so each test has its own.
pub fn widget_group(namespace: &str) -> String {
    format!("{namespace}.sim.example.com")
}

/// The `Widget` custom resource (`widgets.<widget_group>/v1`, namespaced,
/// with a status subresource).
pub fn widget_resource(namespace: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&widget_group(namespace), "v1", "Widget"),
        "widgets",
    )
}

/// Installs the `Widget` CRD of the test whose namespace is `namespace` and
/// returns an API for widgets there once the new type is served.
pub async fn install_widget_crd(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let group = widget_group(namespace);
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"},
                            "color": {"type": "string"},
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                        }},
                    },
                }},
            }],
        },
    }))
    .expect("CRD");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &widget_resource(namespace));
    eventually("the Widget type to be served", EVENTUALLY, async || {
        api.list(&ListParams::default()).await.ok()
    })
    .await;
    api
}

/// A Widget object of the test whose namespace is `namespace`, with the
/// given body (spec, status, metadata fields).
pub fn widget(namespace: &str, name: &str, body: Value) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": format!("{}/v1", widget_group(namespace)),
        "kind": "Widget",
        "metadata": {"name": name},
    });
    if let (Some(obj), Some(body)) = (obj.as_object_mut(), body.as_object()) {
        for (k, v) in body {
            obj.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(obj).expect("Widget")
}

/// Installs a schemaless, namespaced CRD (with a status subresource) for
/// `resource`, as a third party would (applied: installing it again is no
/// error, as on a shared real cluster), and waits until the type is served.
pub async fn install_schemaless_crd(client: &Client, resource: &ApiResource) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", resource.plural, resource.group)},
        "spec": {"group": resource.group, "scope": "Namespaced",
            "names": {"plural": resource.plural, "singular": resource.kind.to_lowercase(),
                "kind": resource.kind, "listKind": format!("{}List", resource.kind)},
            "versions": [{"name": resource.version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .expect("valid CRD");
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &format!("{}.{}", resource.plural, resource.group),
            &kube::api::PatchParams::apply("tfjob-federator-tests").force(),
            &kube::api::Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("{} CRD installed: {e}", resource.kind));
    let served: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    eventually(
        &format!("the {} type to be served", resource.kind),
        EVENTUALLY,
        async || served.list(&ListParams::default()).await.ok(),
    )
    .await;
}

// Both grounds ------------------------------------------------------------------

/// One test's cluster, the same for a test body on either ground: an admin
/// client whose default namespace is the test's own (created for it, with
/// its `default` ServiceAccount), and the fault API of `/_sim/`.
pub struct TestCluster {
    pub ground: Ground,
    pub client: Client,
    pub namespace: String,
    /// The admin kubeconfig (YAML), with the test's namespace as its default.
    pub kubeconfig: String,
    sim: Option<RunningCluster>,
    private: Option<Launcher>,
}

impl TestCluster {
    /// A simulated cluster `home` of this test's own, in-process.
    pub async fn sim(test: &str) -> TestCluster {
        let handle = sim::start_cluster("home", &SimOptions::default())
            .await
            .expect("start simulated cluster");
        let kubeconfig = handle.kubeconfig();
        TestCluster::in_namespace(Ground::Sim, &kubeconfig, test, Some(handle), None).await
    }

    /// A namespace of this test's own on the real cluster that `kubeconfig`
    /// (a file of `hack/real-clusters`) reaches, shared with other tests.
    pub async fn real(kubeconfig: &Path, test: &str) -> TestCluster {
        TestCluster::in_namespace(Ground::Real, &read_file(kubeconfig), test, None, None).await
    }

    /// A simulated cluster of the test's own, or a namespace of the real
    /// cluster the test binary shares.
    pub async fn on(ground: Ground, test: &str) -> TestCluster {
        match ground {
            Ground::Sim => TestCluster::sim(test).await,
            Ground::Real => {
                let kubeconfig = real::one_cluster().await.kubeconfig("home");
                TestCluster::real(&kubeconfig, test).await
            }
        }
    }

    /// As `on`, but on the real ground a cluster of the test's own.
    pub async fn on_private(ground: Ground, test: &str) -> TestCluster {
        match ground {
            Ground::Sim => TestCluster::sim(test).await,
            Ground::Real => TestCluster::private_real(test).await,
        }
    }

    /// A real cluster of this test's own, for a test whose faults (partition,
    /// latency, errors, dropped watches) would hurt others on a shared one.
    pub async fn private_real(test: &str) -> TestCluster {
        let private = Launcher::start(&["--clusters", "1"]).await;
        let kubeconfig = read_file(&private.kubeconfig("home"));
        TestCluster::in_namespace(Ground::Real, &kubeconfig, test, None, Some(private)).await
    }

    async fn in_namespace(
        ground: Ground,
        kubeconfig: &str,
        test: &str,
        sim: Option<RunningCluster>,
        private: Option<Launcher>,
    ) -> TestCluster {
        let namespace = test_namespace(&client_for(kubeconfig).await, test).await;
        let kubeconfig = with_namespace(kubeconfig, &namespace);
        TestCluster {
            ground,
            client: client_for(&kubeconfig).await,
            namespace,
            kubeconfig,
            sim,
            private,
        }
    }

    /// An API for `K` in the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Calls `/_sim/<path>` and returns the JSON answer; panics on an error status.
    pub async fn admin(&self, method: hyper::Method, path: &str, body: Option<Value>) -> Value {
        admin_request(&self.client, method, path, body).await
    }

    /// Ends every open watch stream.
    pub async fn drop_watches(&self) {
        self.admin(hyper::Method::POST, "drop-watches", None).await;
    }

    /// `PUT /_sim/faults`, returning the settings now in force.
    pub async fn set_faults(&self, faults: Value) -> Value {
        self.admin(hyper::Method::PUT, "faults", Some(faults)).await
    }

    /// Forgets the watch history: older resourceVersions now get 410. The
    /// simulator's alone (a real API server compacts on its own schedule).
    pub async fn compact(&self) {
        assert_eq!(
            self.ground,
            Ground::Sim,
            "POST /_sim/compact exists on the simulator only"
        );
        let answer = self.admin(hyper::Method::POST, "compact", None).await;
        assert!(
            answer.get("compactedTo").is_some(),
            "compact answered {answer}"
        );
    }

    /// Stops a simulated or private cluster; on a shared real cluster,
    /// deletes the test's namespace (and with it what the test made there)
    /// and its Widget CRD.
    pub async fn stop(mut self) {
        if let Some(handle) = self.sim.take() {
            handle.stop().await;
        } else if self.private.is_none() {
            let namespaces: Api<Namespace> = Api::all(self.client.clone());
            let _ = namespaces
                .delete(&self.namespace, &DeleteParams::background())
                .await;
            // The test's Widget CRD, if it made one, is cluster-wide.
            let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
            let _ = crds
                .delete(
                    &format!("widgets.{}", widget_group(&self.namespace)),
                    &DeleteParams::background(),
                )
                .await;
        }
        if let Some(private) = self.private.take() {
            tokio::task::spawn_blocking(move || drop(private))
                .await
                .expect("stop the private real cluster");
        }
    }
}

fn read_file(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `/_sim/<path>` through `client` (the simulator, or a real cluster's fault
/// proxy), its JSON answer; panics on an error status.
pub async fn admin_request(
    client: &Client,
    method: hyper::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let request = hyper::Request::builder()
        .method(method.clone())
        .uri(format!("/_sim/{path}"))
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .expect("admin request");
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("{method} /_sim/{path} failed: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("/_sim/{path} answered {text:?}: {e}"))
}

/// `PUT /_sim/faults` on a cluster (answered even when partitioned; on the
/// real ground by its fault proxy).
pub async fn set_faults(client: &Client, faults: Value) {
    admin_request(client, hyper::Method::PUT, "faults", Some(faults)).await;
}
