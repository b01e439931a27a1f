//! What kube-controller-manager keeps in every namespace: the `default`
//! ServiceAccount (serviceaccount controller; a real API server refuses pods
//! before it exists) and the `kube-root-ca.crt` ConfigMap (root-ca-cert
//! publisher). Like those controllers, it acts after the namespace appears,
//! puts either object back when it is deleted, and the ConfigMap's content
//! back when it is changed. Emptying and removing a deleted namespace is the
//! store's, under its lock (`store/namespace_termination.rs`).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Cluster;
use super::store::{Change, Event, EventKind, Scope, WriteMeta, now};

const NAMESPACES: &str = "/namespaces";
const SERVICE_ACCOUNTS: &str = "/serviceaccounts";
const CONFIG_MAPS: &str = "/configmaps";
const ROOT_CA: &str = "kube-root-ca.crt";
const MANAGER: &str = "kube-controller-manager";

/// The simulated cluster's CA (it serves plain HTTP, so nothing verifies
/// against it): a fixed self-signed certificate, as a bundle a workload
/// could read.
const CA_BUNDLE: &str = "-----BEGIN CERTIFICATE-----
MIIBljCCATugAwIBAgIUXn9cZsZLVdNKa8ZJXJ8jduxkSQAwCgYIKoZIzj0EAwIw
HzEdMBsGA1UEAwwUc2ltdWxhdGVkLWNsdXN0ZXItY2EwIBcNMjYxMjAxMDA0MTAz
WhgPMjEyNjExMDcwMDQxMDNaMB8xHTAbBgNVBAMMFHNpbXVsYXRlZC1jbHVzdGVy
LWNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEVsEwnJu6cu8VEuW0xbW6J3Nt
5Q4J/VxDoRIvBT9ReeT6DGiBFUNIpDJ/JapI5qdPN5DclMji7gH6xzc7rUiORKNT
MFEwHQYDVR0OBBYEFP+89WTyr2eT92O7Rt9E0B7oOlLsMB8GA1UdIwQYMBaAFP+8
9WTyr2eT92O7Rt9E0B7oOlLsMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwID
SQAwRgIhAMhD9QLiLJCBqQ8XM01UxFowL/pzxBJgeLB0BtmMF1RiAiEAz/jIZJ7O
CdIskb5UeDMsLnn5yPcHYKPmt3O4vYoW7j8=
-----END CERTIFICATE-----
";

const CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// Keeps the objects in every namespace until the cluster shuts down.
pub async fn run(cluster: Arc<Cluster>) {
    let mut shutdown = cluster.shutdown.clone();
    'resync: loop {
        let (objects, mut events) =
            cluster
                .store
                .subscribe(&[NAMESPACES, SERVICE_ACCOUNTS, CONFIG_MAPS]);
        for (type_id, namespace) in &objects {
            if &**type_id == NAMESPACES && !namespace.deleting {
                ensure(&cluster, &namespace.name);
            }
        }
        loop {
            let received = tokio::select! {
                e = events.recv() => e,
                _ = shutdown.changed() => return,
            };
            match received {
                Ok(event) => observe(&cluster, &event),
                Err(RecvError::Lagged(_)) => continue 'resync,
                Err(RecvError::Closed) => return,
            }
        }
    }
}

fn observe(cluster: &Cluster, event: &Event) {
    let object = &event.object;
    match (&*event.type_id, event.kind) {
        (NAMESPACES, EventKind::Added | EventKind::Modified) if !object.deleting => {
            ensure(cluster, &object.name);
        }
        (SERVICE_ACCOUNTS, EventKind::Deleted) if object.name == "default" => {
            ensure(cluster, &object.namespace);
        }
        (CONFIG_MAPS, EventKind::Deleted) if object.name == ROOT_CA => {
            ensure(cluster, &object.namespace);
        }
        (CONFIG_MAPS, EventKind::Modified) if object.name == ROOT_CA && !object.deleting => {
            let stored = object.value();
            if stored.get("data") != Some(&root_ca_data())
                || stored.pointer("/metadata/annotations/kubernetes.io~1description")
                    != Some(&json!(CA_DESCRIPTION))
            {
                restore_root_ca(cluster, &object.namespace);
            }
        }
        _ => {}
    }
}

fn write() -> WriteMeta {
    WriteMeta {
        manager: MANAGER.into(),
        now: now(),
        dry_run: false,
    }
}

fn root_ca_data() -> Value {
    json!({"ca.crt": CA_BUNDLE})
}

/// Creates what is missing in `namespace`; a namespace being deleted (or
/// gone) refuses new objects, which is as it should be.
fn ensure(cluster: &Cluster, namespace: &str) {
    let store = &cluster.store;
    if let Some(accounts) = store.resource_type("", "serviceaccounts")
        && store.get(&accounts, namespace, "default").is_err()
    {
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": namespace}});
        let _ = store.create(&accounts, namespace, account, &write());
    }
    if let Some(config_maps) = store.resource_type("", "configmaps")
        && store.get(&config_maps, namespace, ROOT_CA).is_err()
    {
        let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ROOT_CA, "namespace": namespace,
                "annotations": {"kubernetes.io/description": CA_DESCRIPTION}},
            "data": root_ca_data()});
        let _ = store.create(&config_maps, namespace, bundle, &write());
    }
}

fn restore_root_ca(cluster: &Cluster, namespace: &str) {
    let Some(config_maps) = cluster.store.resource_type("", "configmaps") else {
        return;
    };
    let restore = |mut bundle: Value| -> super::error::ApiResult<Value> {
        bundle["data"] = root_ca_data();
        if !bundle["metadata"]
            .get("annotations")
            .is_some_and(Value::is_object)
        {
            bundle["metadata"]["annotations"] = json!({});
        }
        bundle["metadata"]["annotations"]["kubernetes.io/description"] = json!(CA_DESCRIPTION);
        Ok(bundle)
    };
    // Gone meanwhile: its deletion event recreates it.
    let _ = cluster.store.update(
        &config_maps,
        namespace,
        ROOT_CA,
        Scope::Whole,
        Change::Patch(&restore),
        &write(),
    );
}
