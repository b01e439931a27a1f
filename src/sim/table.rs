//! `meta.k8s.io/v1` Table rendering for `kubectl get`: the built-in kinds
//! get upstream's columns, custom resources their `additionalPrinterColumns`
//! (or NAME and AGE when they declare none).

use serde_json::{Value, json};

use super::resources::{Column, ResourceType};

/// A computed cell for the built-in kinds whose columns are not plain paths.
#[derive(Clone, Copy)]
enum Computed {
    Name,
    Age,
    PodReady,
    PodStatus,
    PodRestarts,
    NodeStatus,
    NodeRoles,
    ServicePorts,
    Path(&'static str),
}

fn builtin_layout(ty: &ResourceType) -> Option<Vec<(&'static str, Computed, i64)>> {
    use Computed::*;
    Some(match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "pods") => vec![
            ("Name", Name, 0),
            ("Ready", PodReady, 0),
            ("Status", PodStatus, 0),
            ("Restarts", PodRestarts, 0),
            ("Age", Age, 0),
            ("IP", Path(".status.podIP"), 1),
            ("Node", Path(".spec.nodeName"), 1),
        ],
        ("", "nodes") => vec![
            ("Name", Name, 0),
            ("Status", NodeStatus, 0),
            ("Roles", NodeRoles, 0),
            ("Age", Age, 0),
            ("Version", Path(".status.nodeInfo.kubeletVersion"), 0),
        ],
        ("", "services") => vec![
            ("Name", Name, 0),
            ("Type", Path(".spec.type"), 0),
            ("Cluster-IP", Path(".spec.clusterIP"), 0),
            ("External-IP", Path(".status.loadBalancer.ingress[0].ip"), 0),
            ("Port(s)", ServicePorts, 0),
            ("Age", Age, 0),
        ],
        _ => return None,
    })
}

/// Renders `objects` as a Table of `ty` in `version`.
pub fn render(
    ty: &ResourceType,
    version: &str,
    objects: &[Value],
    rv: &str,
    continue_token: Option<String>,
) -> Value {
    let layout: Vec<(String, String, Computed, i64)> = match builtin_layout(ty) {
        Some(layout) => layout
            .into_iter()
            .map(|(n, c, p)| (n.to_string(), "string".to_string(), c, p))
            .collect(),
        None => {
            let columns: &[Column] = ty
                .version(version)
                .map(|v| v.columns.as_slice())
                .unwrap_or_default();
            let mut layout = vec![("Name".to_string(), "string".to_string(), Computed::Name, 0)];
            for c in columns {
                layout.push((
                    c.name.clone(),
                    c.type_.clone(),
                    Computed::Path(""),
                    c.priority,
                ));
            }
            // Upstream: a CRD that declares columns gets exactly those.
            if ty.builtin || columns.is_empty() {
                layout.push(("Age".to_string(), "date".to_string(), Computed::Age, 0));
            }
            layout
        }
    };
    let custom_paths: Vec<&str> = if builtin_layout(ty).is_none() {
        ty.version(version)
            .map(|v| v.columns.iter().map(|c| c.json_path.as_str()).collect())
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let definitions: Vec<Value> = layout
        .iter()
        .map(|(name, type_, computed, priority)| {
            let format = if matches!(computed, Computed::Name) { "name" } else { "" };
            json!({"name": name, "type": if type_ == "date" { "string" } else { type_.as_str() }, "format": format, "description": "", "priority": priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let mut custom = custom_paths.iter();
            let cells: Vec<Value> = layout
                .iter()
                .map(|(_, type_, computed, _)| match computed {
                    Computed::Path("") => {
                        let value = custom.next().and_then(|p| json_path(obj, p));
                        match (type_.as_str(), value) {
                            ("date", Some(Value::String(ts))) => json!(age(&ts)),
                            (_, Some(v)) => v,
                            (_, None) => json!("<none>"),
                        }
                    }
                    other => cell(obj, *other),
                })
                .collect();
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata")},
            })
        })
        .collect();
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

fn text(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn cell(obj: &Value, computed: Computed) -> Value {
    match computed {
        Computed::Name => json!(text(obj, "/metadata/name")),
        Computed::Age => json!(age(&text(obj, "/metadata/creationTimestamp"))),
        Computed::Path(path) => json_path(obj, path).unwrap_or_else(|| json!("<none>")),
        Computed::PodReady => {
            let statuses = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses.map_or(0, |s| {
                s.iter()
                    .filter(|c| c.get("ready") == Some(&json!(true)))
                    .count()
            });
            json!(format!("{ready}/{total}"))
        }
        Computed::PodRestarts => {
            let restarts: i64 = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |s| {
                    s.iter()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum()
                });
            json!(restarts)
        }
        Computed::PodStatus => json!(pod_status(obj)),
        Computed::NodeStatus => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c.get("type") == Some(&json!("Ready"))))
                .and_then(|c| c.get("status").and_then(Value::as_str));
            let mut status = match ready {
                Some("True") => "Ready".to_string(),
                Some(_) => "NotReady".to_string(),
                None => "Unknown".to_string(),
            };
            if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }
        Computed::NodeRoles => {
            let roles: Vec<&str> = obj
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            json!(if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            })
        }
        Computed::ServicePorts => {
            let ports: Vec<String> = obj
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            format!(
                                "{}/{}",
                                p.get("port").map(Value::to_string).unwrap_or_default(),
                                p.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!(if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            })
        }
    }
}

/// The STATUS column of `kubectl get pods`, as upstream's printer derives it.
fn pod_status(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    let mut reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .unwrap_or_else(|| {
            pod.pointer("/status/phase")
                .and_then(Value::as_str)
                .unwrap_or("Pending")
        })
        .to_string();
    for status in pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(r) = status
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
        {
            reason = r.to_string();
        } else if let Some(r) = status
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            reason = r.to_string();
        }
    }
    reason
}

/// A human age like kubectl's (`45s`, `3m`, `2h`, `5d`).
fn age(timestamp: &str) -> String {
    let Ok(ts) = timestamp.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = jiff::Timestamp::now().duration_since(ts).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Evaluates the JSONPath subset printer columns use: `.a.b`, `[n]`, and
/// `[?(@.k=="v")]` filters.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut current = obj.clone();
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            current = current.get(&after[..end])?.clone();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = &after[..end];
            rest = &after[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (key, value) = filter.split_once("==")?;
                let value = value.trim().trim_matches(['"', '\'']);
                current = current
                    .as_array()?
                    .iter()
                    .find(|e| e.get(key.trim()).and_then(Value::as_str) == Some(value))?
                    .clone();
            } else {
                current = current.get(inner.parse::<usize>().ok()?)?.clone();
            }
        } else {
            return None;
        }
    }
    Some(current)
}
