//! Shared helpers for tests that drive a simulated cluster through kube-rs:
//! start a cluster and build a `kube::Client` from its kubeconfig, call the
//! `/_sim/` admin paths, poll for eventual conditions, and build objects.
//!
//! Include with `#[path = "common/kube.rs"] mod sim_kube;`.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind, Status};
use kube::{Client, Config};
use serde_json::{Value, json};
use tfjob_federator::sim::{self, ClusterHandle, SimOptions};

/// How long `eventually` waits before failing.
pub const EVENTUALLY: Duration = Duration::from_secs(5);

/// One simulated cluster and a kube-rs client for it.
pub struct SimCluster {
    pub handle: ClusterHandle,
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
        let request = hyper::Request::builder()
            .method(method.clone())
            .uri(format!("/_sim/{path}"))
            .header("content-type", "application/json")
            .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
            .expect("admin request");
        let text = self
            .client
            .request_text(request)
            .await
            .unwrap_or_else(|e| panic!("{method} /_sim/{path} failed: {e}"));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("/_sim/{path} answered {text:?}: {e}"))
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

/// A client built the way a user would: kubeconfig YAML → `Config` → `Client`.
pub async fn client_for(kubeconfig_yaml: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig_yaml).expect("parse kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    Client::try_from(config).expect("client from config")
}

/// Polls `check` until it returns `Some`, failing the test after [`EVENTUALLY`].
pub async fn eventually<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    eventually_within(what, EVENTUALLY, check).await
}

/// Polls `check` until it returns `Some`, failing the test after `limit`.
pub async fn eventually_within<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// The `Widget` custom resource (`widgets.sim.example.com/v1`, namespaced,
/// with a status subresource).
pub fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sim.example.com", "v1", "Widget"),
        "widgets",
    )
}

/// Installs the `Widget` CRD and returns an API for widgets in `namespace`
/// once the new type is served.
pub async fn install_widget_crd(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.sim.example.com"},
        "spec": {
            "group": "sim.example.com",
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
        Api::namespaced_with(client.clone(), namespace, &widget_resource());
    eventually("the Widget type to be served", async || {
        api.list(&ListParams::default()).await.ok()
    })
    .await;
    api
}

/// A Widget object with the given body (spec, status, metadata fields).
pub fn widget(name: &str, body: Value) -> DynamicObject {
    let mut obj = json!({
        "apiVersion": "sim.example.com/v1",
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
/// `resource`, as a third party would, and waits until the type is served.
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
        .create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("{} CRD installed: {e}", resource.kind));
    let served: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    eventually(
        &format!("the {} type to be served", resource.kind),
        async || served.list(&ListParams::default()).await.ok(),
    )
    .await;
}
