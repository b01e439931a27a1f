//! Discovery documents (`/version`, `/api`, `/apis`, `/apis/<g>`,
//! `/api/v1`, `/apis/<g>/<v>`) derived from the served types, in the legacy
//! (unaggregated) format that kubectl and kube-rs fall back to.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

use super::resources::ResourceType;

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn version() -> Value {
    json!({
        "major": "1", "minor": "32", "gitVersion": "v1.32.0-tfjob-federator-sim",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc", "platform": "linux/amd64",
    })
}

pub fn core_versions(address: &SocketAddr) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address.to_string()}],
    })
}

/// Group name → versions, the preferred first, for the named groups.
fn group_versions(types: &[Arc<ResourceType>]) -> BTreeMap<&str, Vec<&str>> {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for ty in types.iter().filter(|t| !t.group.is_empty()) {
        let versions = groups.entry(&ty.group).or_default();
        for v in &ty.versions {
            if !versions.contains(&v.name.as_str()) {
                versions.push(&v.name);
            }
        }
    }
    groups
}

fn group_doc(name: &str, versions: &[&str]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": entries, "preferredVersion": entries.first().cloned().unwrap_or(Value::Null)})
}

pub fn groups(types: &[Arc<ResourceType>]) -> Value {
    let groups: Vec<Value> = group_versions(types)
        .iter()
        .map(|(name, versions)| group_doc(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(types: &[Arc<ResourceType>], name: &str) -> Option<Value> {
    let versions = group_versions(types).remove(name)?;
    let mut doc = group_doc(name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// The APIResourceList of one group version (empty `resources` if not served).
pub fn resources(types: &[Arc<ResourceType>], group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for ty in types.iter().filter(|t| t.group == group) {
        let Some(v) = ty.version(version) else {
            continue;
        };
        let mut main = json!({
            "name": ty.plural, "singularName": ty.singular, "namespaced": ty.namespaced,
            "kind": ty.kind, "verbs": VERBS,
        });
        if !ty.short_names.is_empty() {
            main["shortNames"] = json!(ty.short_names);
        }
        if !ty.categories.is_empty() {
            main["categories"] = json!(ty.categories);
        }
        resources.push(main);
        if v.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", ty.plural), "singularName": "", "namespaced": ty.namespaced,
                "kind": ty.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if ty.serves_scale() {
            resources.push(json!({
                "name": format!("{}/scale", ty.plural), "singularName": "", "namespaced": ty.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}
