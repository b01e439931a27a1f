//! Hand-written OpenAPI schemas for the Kubernetes types embedded in our CRDs.
//!
//! k8s-openapi implements `JsonSchema` only behind its `schemars` feature,
//! which roughly doubles its (already long) compile time and would inline the
//! full `PodTemplateSpec` schema (hundreds of kilobytes) into the CRD. These
//! small structural schemas are enough for the API server to keep the fields.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object the API server stores as given: used for the pod template, whose
/// shape the kubelet (not our CRD) validates when the controller creates the pod.
pub fn preserved_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `metav1.Time`: an RFC 3339 timestamp.
pub fn time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
    })
}

/// A counter: the API server knows `int64`, not schemars' `uint64`.
pub fn counter(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "format": "int64",
        "minimum": 0,
    })
}

/// `metav1.LabelSelector`.
pub fn label_selector(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "matchLabels": {
                "type": "object",
                "additionalProperties": {"type": "string"},
            },
            "matchExpressions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    })
}

/// `core/v1.ResourceRequirements`; quantities are int-or-string as upstream.
pub fn resource_requirements(_: &mut SchemaGenerator) -> Schema {
    let quantities = serde_json::json!({
        "type": "object",
        "additionalProperties": {"x-kubernetes-int-or-string": true},
    });
    json_schema!({
        "type": "object",
        "properties": {
            "limits": quantities,
            "requests": quantities,
            "claims": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string"},
                        "request": {"type": "string"},
                    },
                },
            },
        },
    })
}

/// Marks `fields` of an object schema required and drops the `default`
/// schemars derives from their `#[serde(default)]`. The Rust side keeps the
/// serde default so an object the API server did not check (the simulator
/// does not enforce `required`) still reaches validation, which then names
/// the missing field.
pub fn require(schema: &mut Schema, fields: &[&str]) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for field in fields {
            if let Some(property) = properties.get_mut(*field).and_then(|p| p.as_object_mut()) {
                property.remove("default");
            }
        }
    }
    let required = object
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(list) = required.as_array_mut() {
        for field in fields {
            if !list.iter().any(|v| v == *field) {
                list.push(serde_json::Value::from(*field));
            }
        }
        list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
}
