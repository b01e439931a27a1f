//! Object rules the API server applies on every write, independent of
//! storage: name validation, defaulting of built-in kinds, which parts of an
//! object a write may change, and when `metadata.generation` moves.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::resources::ResourceType;
use kube_quantity as quantity;

/// Fields of `metadata` the server owns; a client's write never changes them.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
];

/// Checks a name as upstream does for most kinds (a DNS-1123 subdomain).
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("metadata.name: Required value: name or generateName is required".into());
    }
    let valid = name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata") {
        Some(Value::Object(m)) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Sets the fields the server fills in on create, and the defaults of the
/// built-in kinds that clients rely on.
/// `serial` is unique per cluster and write; it numbers allocated addresses.
pub fn prepare_create(
    ty: &ResourceType,
    obj: &mut Value,
    uid: String,
    now: &str,
    serial: u64,
    status_subresource: bool,
) {
    let meta = metadata_mut(obj);
    for field in SERVER_METADATA {
        meta.remove(*field);
    }
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(now));
    meta.insert("generation".into(), json!(1));
    if status_subresource && !ty.builtin {
        // A custom resource with a status subresource starts without status.
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    if !ty.builtin {
        return;
    }
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "namespaces") => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
            let name = meta_str(obj, "name").unwrap_or_default().to_string();
            let meta = metadata_mut(obj);
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            labels["kubernetes.io/metadata.name"] = json!(name);
        }
        ("", "pods") => default_pod(obj),
        ("apps", "deployments") => default_deployment(obj),
        ("", "services") => default_service(obj, serial),
        ("", "secrets") if obj.get("type").is_none() => obj["type"] = json!("Opaque"),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let names = obj
                .pointer("/spec/names")
                .cloned()
                .unwrap_or_else(|| json!({}));
            obj["status"] = json!({
                "acceptedNames": names,
                "storedVersions": obj.pointer("/spec/versions").and_then(Value::as_array)
                    .map(|vs| vs.iter().filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                        .filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>())
                    .unwrap_or_default(),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            });
        }
        _ => {}
    }
}

fn default_pod(pod: &mut Value) {
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        default_pod_spec(spec);
        default_requests_to_limits(spec);
        // Set on pods, not on the templates of workloads.
        spec.entry("enableServiceLinks").or_insert(json!(true));
        spec.entry("priority").or_insert(json!(0));
    }
    let qos = pod_qos_class(pod);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// The ServiceAccount a pod runs as: `spec.serviceAccountName`, else `default`.
pub fn service_account_name(pod: &Value) -> String {
    pod.pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// Where the ServiceAccount admission plugin mounts the API credentials.
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What kube-apiserver's default admission plugins add to a new pod, given
/// its ServiceAccount: the account's name (ServiceAccount), the projected
/// `kube-api-access-*` volume and its mount in every container unless
/// automounting is off (ServiceAccount), `PreemptLowerPriority` (Priority),
/// and tolerating not-ready and unreachable nodes for 300 s
/// (DefaultTolerationSeconds).
pub fn admit_pod(pod: &mut Value, account: &Value) {
    let name = service_account_name(pod);
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.insert("serviceAccountName".into(), json!(name));
    spec.insert("serviceAccount".into(), json!(name));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    if let Some(tolerations) = spec
        .entry("tolerations")
        .or_insert_with(|| json!([]))
        .as_array_mut()
    {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !tolerations.iter().any(|t| tolerates(t, key, "NoExecute")) {
                tolerations.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let automount = spec
        .get("automountServiceAccountToken")
        .or_else(|| account.get("automountServiceAccountToken"))
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if automount {
        mount_api_access(spec);
    }
}

/// Whether toleration `t` tolerates a taint `key` (without value) of `effect`.
fn tolerates(t: &Value, key: &str, effect: &str) -> bool {
    let field = |name: &str| t.get(name).and_then(Value::as_str).unwrap_or_default();
    let effect_matches = field("effect").is_empty() || field("effect") == effect;
    let key_matches = match field("operator") {
        "Exists" => field("key").is_empty() || field("key") == key,
        _ => field("key") == key && field("value").is_empty(),
    };
    effect_matches && key_matches
}

fn mount_api_access(spec: &mut Map<String, Value>) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|name| name.starts_with("kube-api-access-"))
        .map(str::to_string);
    let volume = existing.clone().unwrap_or_else(|| {
        // The alphabet of upstream's random suffixes.
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let suffix: String = (0..5)
            .map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]))
            .collect();
        format!("kube-api-access-{suffix}")
    });
    let mut mounted = false;
    for container in containers_mut(spec) {
        let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
        let Some(mounts) = mounts.as_array_mut() else {
            continue;
        };
        if mounts
            .iter()
            .any(|m| m.get("mountPath") == Some(&json!(TOKEN_MOUNT_PATH)))
        {
            continue;
        }
        mounts.push(json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
        mounted = true;
    }
    if mounted && existing.is_none() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}));
        }
    }
}

/// The defaults an update gets again, as upstream defaults every object it
/// decodes: those of the pod spec of a pod and a Deployment's template.
pub fn default_update(ty: &ResourceType, obj: &mut Value) {
    if !ty.builtin {
        return;
    }
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "pods") => {
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                default_pod_spec(spec);
                default_requests_to_limits(spec);
            }
        }
        ("apps", "deployments") => default_deployment(obj),
        _ => {}
    }
}

/// The defaults of a pod spec, in a pod or a workload's pod template.
fn default_pod_spec(spec: &mut serde_json::Map<String, Value>) {
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
    ];
    for (k, v) in defaults {
        spec.entry(k).or_insert(v);
    }
    for c in containers_mut(spec) {
        if !c.contains_key("imagePullPolicy") {
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            c.insert("imagePullPolicy".into(), json!(pull_policy(image)));
        }
        c.entry("terminationMessagePath")
            .or_insert_with(|| json!("/dev/termination-log"));
        c.entry("terminationMessagePolicy")
            .or_insert_with(|| json!("File"));
        c.entry("resources").or_insert_with(|| json!({}));
        for port in c
            .get_mut("ports")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(p) = port.as_object_mut() {
                p.entry("protocol").or_insert_with(|| json!("TCP"));
            }
        }
    }
}

/// Upstream's default pull policy: `Always` for the tag `latest`, which an
/// image without tag or digest has; `IfNotPresent` otherwise.
fn pull_policy(image: &str) -> &'static str {
    let (name, digest) = image.split_once('@').unwrap_or((image, ""));
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest.is_empty() => "latest",
        None => "",
    };
    if tag == "latest" {
        "Always"
    } else {
        "IfNotPresent"
    }
}

/// The defaults of a Deployment (apps/v1), its pod template's included.
fn default_deployment(deployment: &mut Value) {
    let Some(spec) = deployment.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("replicas").or_insert(json!(1));
    spec.entry("strategy").or_insert_with(|| json!({}));
    if let Some(strategy) = spec.get_mut("strategy").and_then(Value::as_object_mut) {
        strategy
            .entry("type")
            .or_insert_with(|| json!("RollingUpdate"));
        if strategy.get("type") == Some(&json!("RollingUpdate")) {
            let rolling = strategy.entry("rollingUpdate").or_insert_with(|| json!({}));
            if let Some(rolling) = rolling.as_object_mut() {
                rolling
                    .entry("maxUnavailable")
                    .or_insert_with(|| json!("25%"));
                rolling.entry("maxSurge").or_insert_with(|| json!("25%"));
            }
        }
    }
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    spec.entry("progressDeadlineSeconds").or_insert(json!(600));
    if let Some(template) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        default_pod_spec(template);
    }
}

/// The QoS class upstream derives from the containers' requests and limits
/// of cpu and memory (other resources do not count): BestEffort without
/// any, Guaranteed when every container limits both and the summed requests
/// equal the summed limits, Burstable otherwise.
fn pod_qos_class(pod: &Value) -> &'static str {
    let mut requests: BTreeMap<String, i64> = BTreeMap::new();
    let mut limits: BTreeMap<String, i64> = BTreeMap::new();
    let mut guaranteed = true;
    for list in ["containers", "initContainers"] {
        for c in pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let qos = |kind: &str| {
                quantity::resource_list(c.pointer(&format!("/resources/{kind}")))
                    .into_iter()
                    .filter(|(name, milli)| (name == "cpu" || name == "memory") && *milli > 0)
                    .collect::<BTreeMap<String, i64>>()
            };
            for (name, milli) in qos("requests") {
                *requests.entry(name).or_default() += milli;
            }
            let container_limits = qos("limits");
            if !(container_limits.contains_key("cpu") && container_limits.contains_key("memory")) {
                guaranteed = false;
            }
            for (name, milli) in container_limits {
                *limits.entry(name).or_default() += milli;
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        "BestEffort"
    } else if guaranteed
        && requests.len() == limits.len()
        && requests
            .iter()
            .all(|(name, milli)| limits.get(name) == Some(milli))
    {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Every container and init container of a pod spec.
fn containers_mut(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Map<String, Value>> {
    spec.iter_mut()
        .filter(|(list, _)| matches!(list.as_str(), "containers" | "initContainers"))
        .filter_map(|(_, containers)| containers.as_array_mut())
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// A pod's containers request what they limit unless they say otherwise
/// (upstream defaults this on pods, not on pod templates).
fn default_requests_to_limits(spec: &mut Map<String, Value>) {
    for c in containers_mut(spec) {
        let Some(resources) = c.get_mut("resources").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
            continue;
        };
        let requests = resources.entry("requests").or_insert_with(|| json!({}));
        if let Some(requests) = requests.as_object_mut() {
            for (name, value) in limits {
                requests.entry(name).or_insert(value);
            }
        }
    }
}

fn default_service(svc: &mut Value, serial: u64) {
    let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("type").or_insert_with(|| json!("ClusterIP"));
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if !spec.contains_key("clusterIP") {
        let ip = format!("10.96.{}.{}", (serial / 254) % 256, serial % 254 + 1);
        spec.insert("clusterIP".into(), json!(ip));
    }
    let ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
    spec.entry("clusterIPs").or_insert_with(|| json!([ip]));
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(p) = port.as_object_mut() {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
            if let Some(number) = p.get("port").cloned() {
                p.entry("targetPort").or_insert(number);
            }
        }
    }
    svc["status"] = json!({"loadBalancer": {}});
}

/// Builds the object an update stores from the old one and the client's new
/// one: server-owned metadata is kept, and with a status subresource the main
/// resource keeps the old status while `/status` changes nothing but status.
pub fn merge_update(
    old: &Value,
    mut new: Value,
    status_subresource: bool,
    to_status: bool,
) -> Value {
    if to_status {
        let mut merged = old.clone();
        match new.get_mut("status").map(Value::take) {
            Some(status) => merged["status"] = status,
            None => {
                if let Some(o) = merged.as_object_mut() {
                    o.remove("status");
                }
            }
        }
        return merged;
    }
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = metadata_mut(&mut new);
    for field in SERVER_METADATA.iter().chain(["name", "namespace"].iter()) {
        match old_meta.get(*field) {
            Some(v) => meta.insert(field.to_string(), v.clone()),
            None => meta.remove(*field),
        };
    }
    if status_subresource {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(o) = new.as_object_mut() {
                    o.remove("status");
                }
            }
        }
    }
    new
}

/// Whether the change from `old` to `new` touches anything but metadata and
/// status, which is what moves `metadata.generation`.
pub fn spec_changed(old: &Value, new: &Value, status_subresource: bool) -> bool {
    match (old.as_object(), new.as_object()) {
        (Some(old), Some(new)) => !same_except(old, new, |field| {
            field == "metadata" || (status_subresource && field == "status")
        }),
        _ => old != new,
    }
}

/// Two objects are the same write when they differ at most in managedFields
/// (upstream drops timestamp-only managedFields changes of no-op writes).
pub fn same_object(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            same_except(a, b, |field| field == "metadata")
                && match (a.get("metadata"), b.get("metadata")) {
                    (Some(Value::Object(a)), Some(Value::Object(b))) => {
                        same_except(a, b, |field| {
                            field == "managedFields" || field == "resourceVersion"
                        })
                    }
                    (a, b) => a == b,
                }
        }
        _ => a == b,
    }
}

/// Whether two maps hold the same fields, the `ignored` ones aside (compared
/// in place: every write asks, and objects are large).
fn same_except(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    ignored: impl Fn(&str) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|field| !ignored(field)).count();
    kept(a) == kept(b)
        && a.iter()
            .all(|(field, value)| ignored(field) || b.get(field) == Some(value))
}

/// Drops empty metadata collections, as Go's `omitempty` does upstream
/// (kube-rs's finalizer helper relies on `finalizers` vanishing when empty).
pub fn normalize_metadata(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "finalizers",
            "ownerReferences",
            "labels",
            "annotations",
            "managedFields",
        ] {
            let empty = match meta.get(field) {
                Some(Value::Array(a)) => a.is_empty(),
                Some(Value::Object(o)) => o.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                meta.remove(field);
            }
        }
    }
}

/// Secrets: `stringData` is folded into `data` (base64) on every write, as
/// upstream does, so readers only ever see `data`.
pub fn fold_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(string_data) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else {
        return;
    };
    let Some(entries) = string_data.as_object() else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (key, value) in entries {
        let text = value.as_str().unwrap_or_default();
        obj["data"][key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

/// A JSON object of strings (labels, a node selector) as a map; values that
/// are not strings are left out.
pub fn string_map(value: Option<&Value>) -> std::collections::BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_the_same_object_when_only_managed_fields_or_the_version_differ() {
        let pod = json!({"metadata": {"name": "p", "resourceVersion": "1", "managedFields": [{"manager": "a"}]}, "spec": {"x": 1}});
        for (other, same) in [
            (
                json!({"metadata": {"name": "p", "resourceVersion": "2"}, "spec": {"x": 1}}),
                true,
            ),
            (
                json!({"metadata": {"name": "p", "resourceVersion": "1", "managedFields": [{"manager": "b"}]}, "spec": {"x": 1}}),
                true,
            ),
            (
                json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}}),
                false,
            ),
            (json!({"metadata": {"name": "p"}, "spec": {"x": 2}}), false),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {}}),
                false,
            ),
            (json!({"metadata": {}, "spec": {"x": 1}}), false),
            (json!({"spec": {"x": 1}}), false),
            (json!({"metadata": "p", "spec": {"x": 1}}), false),
        ] {
            assert_eq!(same_object(&pod, &other), same, "{other}");
            assert_eq!(same_object(&other, &pod), same, "{other}, reversed");
        }
        assert!(same_object(
            &json!({"metadata": {}}),
            &json!({"metadata": {"resourceVersion": "3"}})
        ));
        assert!(!same_object(&json!({"metadata": {}}), &json!({})));
        assert!(same_object(&json!([1]), &json!([1])));
    }

    #[test]
    fn only_a_change_outside_metadata_and_a_subresource_status_moves_the_generation() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {"phase": "A"}});
        for (new, status_subresource, changed) in [
            (
                json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}, "status": {"phase": "A"}}),
                true,
                false,
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {"phase": "B"}}),
                true,
                false,
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {"phase": "B"}}),
                false,
                true,
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 1}}),
                true,
                false,
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 1}}),
                false,
                true,
            ),
            (
                json!({"metadata": {"name": "p"}, "spec": {"x": 2}, "status": {"phase": "A"}}),
                true,
                true,
            ),
            (
                json!({"spec": {"x": 1}, "status": {"phase": "A"}, "data": 1}),
                true,
                true,
            ),
        ] {
            assert_eq!(
                spec_changed(&old, &new, status_subresource),
                changed,
                "{new} {status_subresource}"
            );
            assert_eq!(
                spec_changed(&new, &old, status_subresource),
                changed,
                "{new} {status_subresource}, reversed"
            );
        }
        assert!(spec_changed(&json!(1), &json!(2), true));
        assert!(!spec_changed(&json!("a"), &json!("a"), true));
    }

    #[test]
    fn pull_policy_is_always_for_latest_only() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("registry.local:5000/team/nginx", "Always"),
            ("registry.local:5000/team/nginx:1.25", "IfNotPresent"),
            ("nginx:1.25", "IfNotPresent"),
            ("nginx@sha256:0000", "IfNotPresent"),
            ("nginx:latest@sha256:0000", "Always"),
        ] {
            assert_eq!(pull_policy(image), policy, "{image}");
        }
    }

    #[test]
    fn admission_adds_the_account_its_volume_and_tolerations() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        }});
        admit_pod(&mut pod, &json!({}));
        let spec = &pod["spec"];
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            spec["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
        let volume = spec["volumes"][0]["name"].as_str().unwrap_or_default();
        assert!(
            volume.starts_with("kube-api-access-") && volume.len() == 21,
            "{volume}"
        );
        let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
        assert_eq!(spec["initContainers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(spec["containers"][0]["volumeMounts"], json!([mount]));
        assert_eq!(spec["containers"][1]["volumeMounts"][0]["name"], "own");

        // A copy keeps its volume; automounting can be off on the account.
        let mut copy = pod.clone();
        copy["spec"]["containers"][0]["volumeMounts"] = json!([]);
        admit_pod(&mut copy, &json!({}));
        assert_eq!(copy["spec"]["volumes"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            copy["spec"]["containers"][0]["volumeMounts"],
            json!([mount])
        );
        let mut quiet =
            json!({"spec": {"serviceAccountName": "robot", "containers": [{"name": "a"}]}});
        admit_pod(&mut quiet, &json!({"automountServiceAccountToken": false}));
        assert_eq!(quiet["spec"]["serviceAccount"], "robot");
        assert!(quiet["spec"].get("volumes").is_none(), "{quiet}");
    }

    #[test]
    fn qos_class_counts_cpu_and_memory_only() {
        let pod = |resources: Value| {
            let mut pod = json!({"spec": {"containers": [{"name": "a", "resources": resources}]}});
            if let Some(spec) = pod["spec"].as_object_mut() {
                default_requests_to_limits(spec);
            }
            pod_qos_class(&pod)
        };
        assert_eq!(pod(json!({})), "BestEffort");
        assert_eq!(
            pod(json!({"limits": {"nvidia.com/gpu": "9"}})),
            "BestEffort"
        );
        assert_eq!(pod(json!({"requests": {"cpu": "0"}})), "BestEffort");
        assert_eq!(pod(json!({"requests": {"cpu": "100m"}})), "Burstable");
        assert_eq!(
            pod(json!({"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}})),
            "Guaranteed"
        );
        assert_eq!(
            pod(
                json!({"requests": {"cpu": "1000m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1024Mi"}})
            ),
            "Guaranteed"
        );
        assert_eq!(
            pod(json!({"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}})),
            "Burstable"
        );
        let mut defaulted =
            json!({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "9"}}}]});
        if let Some(spec) = defaulted.as_object_mut() {
            default_requests_to_limits(spec);
        }
        assert_eq!(
            defaulted["containers"][0]["resources"]["requests"],
            json!({"nvidia.com/gpu": "9"})
        );
    }

    #[test]
    fn deployments_get_upstream_defaults() {
        let mut deployment = json!({"spec": {"selector": {}, "template": {"spec": {
            "containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80}]}],
        }}}});
        default_deployment(&mut deployment);
        let spec = &deployment["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(
            spec["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["restartPolicy"], "Always");
        assert!(pod.get("enableServiceLinks").is_none(), "{pod}");
        let container = &pod["containers"][0];
        assert_eq!(container["imagePullPolicy"], "Always");
        assert_eq!(
            container["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
        let recreate = &mut json!({"spec": {"strategy": {"type": "Recreate"}}});
        default_deployment(recreate);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
    }
}
