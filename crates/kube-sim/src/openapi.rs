//! OpenAPI v3 documents, enough for kubectl: each group version lists its
//! paths with the `x-kubernetes-group-version-kind` extension and the
//! `fieldValidation` parameter (kubectl then leaves validation to the server),
//! and custom resources carry their CRD schema. Built-in kinds do not
//! advertise strategic merge patch here, so kubectl computes those patches
//! from its compiled-in types, as it does against servers without schemas.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::resources::ResourceType;

/// The `/openapi/v3` index: one entry per served group version, with a hash
/// that changes with the document so that kubectl's cache stays correct.
pub fn root(types: &[Arc<ResourceType>]) -> Value {
    let mut gvs: BTreeMap<String, (String, String)> = BTreeMap::new();
    for ty in types {
        for v in &ty.versions {
            let path = if ty.group.is_empty() {
                format!("api/{}", v.name)
            } else {
                format!("apis/{}/{}", ty.group, v.name)
            };
            gvs.insert(path, (ty.group.clone(), v.name.clone()));
        }
    }
    let paths: Map<String, Value> = gvs
        .into_iter()
        .map(|(path, (group, version))| {
            let hash = fnv64(
                group_version(types, &group, &version)
                    .to_string()
                    .as_bytes(),
            );
            let url = format!("/openapi/v3/{path}?hash={hash:016X}");
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

fn fnv64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// The schema name upstream uses: reversed group, version, kind.
fn schema_name(ty: &ResourceType, version: &str) -> String {
    let group = if ty.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        ty.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{version}.{}", ty.kind)
}

fn parameter(name: &str, location: &str) -> Value {
    json!({"name": name, "in": location, "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(
    ty: &ResourceType,
    version: &str,
    action: &str,
    params: &[&str],
    body_types: &[&str],
) -> Value {
    let mut op = json!({
        "operationId": format!("{action}{}", ty.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": ty.group, "version": version, "kind": ty.kind},
        "parameters": params.iter().map(|p| parameter(p, "query")).collect::<Vec<_>>(),
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", schema_name(ty, version))}}}}},
    });
    if !body_types.is_empty() {
        let content: Map<String, Value> = body_types
            .iter()
            .map(|t| (t.to_string(), json!({"schema": {"type": "object"}})))
            .collect();
        op["requestBody"] = json!({"content": content, "required": true});
    }
    op
}

/// The document of one group version.
pub fn group_version(types: &[Arc<ResourceType>], group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let write_params = ["dryRun", "fieldManager", "fieldValidation", "pretty"];
    let mut patch_params = write_params.to_vec();
    patch_params.push("force");
    let patch_types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    for ty in types.iter().filter(|t| t.group == group) {
        let Some(v) = ty.version(version) else {
            continue;
        };
        let collection = if ty.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", ty.plural)
        } else {
            format!("{prefix}/{}", ty.plural)
        };
        let item = format!("{collection}/{{name}}");
        paths.insert(collection.clone(), json!({
            "get": operation(ty, version, "list", &["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch"], &[]),
            "post": operation(ty, version, "post", &write_params, &["application/json"]),
            "delete": operation(ty, version, "deletecollection", &["labelSelector", "fieldSelector"], &[]),
        }));
        paths.insert(item.clone(), json!({
            "get": operation(ty, version, "get", &[], &[]),
            "put": operation(ty, version, "put", &write_params, &["application/json"]),
            "patch": operation(ty, version, "patch", &patch_params, &patch_types),
            "delete": operation(ty, version, "delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"], &["application/json"]),
        }));
        if v.status_subresource {
            paths.insert(
                format!("{item}/status"),
                json!({
                    "get": operation(ty, version, "get", &[], &[]),
                    "put": operation(ty, version, "put", &write_params, &["application/json"]),
                    "patch": operation(ty, version, "patch", &patch_params, &patch_types),
                }),
            );
        }
        let mut schema = v.schema.clone().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        if let Some(props) = schema
            .as_object_mut()
            .map(|s| s.entry("properties").or_insert_with(|| json!({})))
        {
            props["apiVersion"] = json!({"type": "string"});
            props["kind"] = json!({"type": "string"});
            props["metadata"] = json!({"type": "object"});
        }
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": ty.group, "version": version, "kind": ty.kind}]);
        schemas.insert(schema_name(ty, version), schema);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}
