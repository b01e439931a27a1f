//! `meta.k8s.io/v1` Table rendering for `kubectl get`: the built-in kinds
//! get upstream's columns, custom resources their `additionalPrinterColumns`
//! (or NAME and AGE when they declare none).

use serde_json::{Value, json};

use super::resources::{Column, ResourceType, Storage};

/// How a column's cells are computed.
enum Cell {
    Name,
    Age,
    PodReady,
    PodStatus,
    PodRestarts,
    NodeStatus,
    NodeRoles,
    ServicePorts,
    EventLastSeen,
    EventFirstSeen,
    EventObject,
    EventSource,
    EventMessage,
    EventCount,
    /// A JSONPath; `date` columns show the age of the timestamp found.
    Path(String),
}

struct ColumnSpec {
    name: String,
    type_: String,
    cell: Cell,
    priority: i64,
    description: String,
}

fn spec(name: &str, cell: Cell, priority: i64) -> ColumnSpec {
    ColumnSpec {
        name: name.into(),
        type_: "string".into(),
        cell,
        priority,
        description: String::new(),
    }
}

fn path(p: &str) -> Cell {
    Cell::Path(p.to_string())
}

/// The columns of `ty` in `version`: upstream's for the built-in kinds with
/// computed cells, else NAME, the declared columns, and AGE unless a CRD
/// declares its own columns (then it gets exactly those, as upstream).
fn layout(ty: &ResourceType, version: &str) -> Vec<ColumnSpec> {
    use Cell::*;
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "pods") => {
            return vec![
                spec("Name", Name, 0),
                spec("Ready", PodReady, 0),
                spec("Status", PodStatus, 0),
                spec("Restarts", PodRestarts, 0),
                spec("Age", Age, 0),
                spec("IP", path(".status.podIP"), 1),
                spec("Node", path(".spec.nodeName"), 1),
            ];
        }
        ("", "nodes") => {
            return vec![
                spec("Name", Name, 0),
                spec("Status", NodeStatus, 0),
                spec("Roles", NodeRoles, 0),
                spec("Age", Age, 0),
                spec("Version", path(".status.nodeInfo.kubeletVersion"), 0),
            ];
        }
        ("", "services") => {
            return vec![
                spec("Name", Name, 0),
                spec("Type", path(".spec.type"), 0),
                spec("Cluster-IP", path(".spec.clusterIP"), 0),
                spec("External-IP", path(".status.loadBalancer.ingress[0].ip"), 0),
                spec("Port(s)", ServicePorts, 0),
                spec("Age", Age, 0),
            ];
        }
        // Upstream prints both Event APIs from the core Event ([`render`]).
        _ if matches!(ty.storage, Storage::CoreEvents(_)) => {
            return vec![
                spec("Last Seen", EventLastSeen, 0),
                spec("Type", path(".type"), 0),
                spec("Reason", path(".reason"), 0),
                spec("Object", EventObject, 0),
                spec("Subobject", path(".involvedObject.fieldPath"), 1),
                spec("Source", EventSource, 1),
                spec("Message", EventMessage, 0),
                spec("First Seen", EventFirstSeen, 1),
                spec("Count", EventCount, 1),
                spec("Name", Name, 1),
            ];
        }
        _ => {}
    }
    let columns: &[Column] = ty
        .version(version)
        .map(|v| v.columns.as_slice())
        .unwrap_or_default();
    let mut specs = vec![spec("Name", Name, 0)];
    specs.extend(columns.iter().map(|c| ColumnSpec {
        name: c.name.clone(),
        type_: c.type_.clone(),
        cell: Cell::Path(c.json_path.clone()),
        priority: c.priority,
        description: c.description.clone(),
    }));
    if ty.builtin || columns.is_empty() {
        specs.push(spec("Age", Age, 0));
    }
    specs
}

/// Renders `objects` as a Table of `ty` in `version`.
pub fn render(
    ty: &ResourceType,
    version: &str,
    objects: &[Value],
    rv: &str,
    continue_token: Option<String>,
) -> Value {
    // Upstream prints what it stores: an events.k8s.io Event as a core one.
    let stored: Vec<Value>;
    let objects = if ty.serves_converted() {
        stored = objects.iter().map(|o| ty.stored_form(o.clone())).collect();
        &stored
    } else {
        objects
    };
    let specs = layout(ty, version);
    let definitions: Vec<Value> = specs
        .iter()
        .map(|c| {
            let format = if matches!(c.cell, Cell::Name) { "name" } else { "" };
            // Date cells are rendered as ages, so they travel as strings.
            let type_ = if c.type_ == "date" { "string" } else { c.type_.as_str() };
            json!({"name": c.name, "type": type_, "format": format, "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = specs.iter().map(|c| cell(obj, c)).collect();
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

fn cell(obj: &Value, column: &ColumnSpec) -> Value {
    match &column.cell {
        Cell::Name => json!(text(obj, "/metadata/name")),
        Cell::Age => json!(age(&text(obj, "/metadata/creationTimestamp"))),
        Cell::Path(path) => match json_path(obj, path) {
            Some(Value::String(ts)) if column.type_ == "date" => json!(age(&ts)),
            Some(value) => value,
            // Upstream leaves the cell empty (null) when the path finds nothing.
            None => Value::Null,
        },
        Cell::PodReady => {
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
        Cell::PodRestarts => {
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
        Cell::PodStatus => json!(pod_status(obj)),
        Cell::EventFirstSeen => json!(age(&event_first_seen(obj))),
        Cell::EventLastSeen => json!(match obj.get("series") {
            Some(_) => age(&text(obj, "/series/lastObservedTime")),
            None =>
                age(&non_empty(text(obj, "/lastTimestamp"))
                    .unwrap_or_else(|| event_first_seen(obj))),
        }),
        Cell::EventCount => {
            let count = match obj.get("series") {
                Some(series) => series.get("count").and_then(Value::as_i64).unwrap_or(0),
                // Events of the events.k8s.io API leave a single occurrence uncounted.
                None => obj.get("count").and_then(Value::as_i64).unwrap_or(1),
            };
            json!(count)
        }
        Cell::EventObject => {
            let kind = text(obj, "/involvedObject/kind").to_lowercase();
            json!(match non_empty(text(obj, "/involvedObject/name")) {
                Some(name) => format!("{kind}/{name}"),
                None => kind,
            })
        }
        Cell::EventSource => {
            let component = non_empty(text(obj, "/source/component"))
                .or_else(|| non_empty(text(obj, "/reportingComponent")));
            let instance = non_empty(text(obj, "/source/host"))
                .or_else(|| non_empty(text(obj, "/reportingInstance")));
            json!(match (component, instance) {
                (None, _) => "<unknown>".to_string(),
                (Some(component), None) => component,
                (Some(component), Some(instance)) => format!("{component}, {instance}"),
            })
        }
        Cell::EventMessage => json!(text(obj, "/message").trim()),
        Cell::NodeStatus => {
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
        Cell::NodeRoles => {
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
        Cell::ServicePorts => {
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

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// When a core Event was first seen: `firstTimestamp`, else (an Event of
/// the events.k8s.io API) its `eventTime`.
fn event_first_seen(event: &Value) -> String {
    non_empty(text(event, "/firstTimestamp")).unwrap_or_else(|| text(event, "/eventTime"))
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

/// Evaluates the JSONPath subset printer columns use: `.a.b` (with `\.`
/// escapes), `[n]`, and `[?(@.k=="v")]` filters.
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
            // A field name ends at an unescaped `.` or `[`; `\.` is a literal dot.
            let mut name = String::new();
            let mut end = after.len();
            let mut chars = after.char_indices().peekable();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            name.push(escaped);
                        }
                    }
                    '.' | '[' => {
                        end = i;
                        break;
                    }
                    _ => name.push(c),
                }
            }
            current = current.get(&name)?.clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_path_handles_escapes_indexes_and_filters() {
        let obj = json!({"status": {"free": {"nvidia.com/gpu": "12"}, "conditions": [{"type": "Ready", "status": "True"}], "list": [1, 2]}});
        assert_eq!(
            json_path(&obj, r".status.free.nvidia\.com/gpu"),
            Some(json!("12"))
        );
        assert_eq!(
            json_path(&obj, r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(json_path(&obj, ".status.list[1]"), Some(json!(2)));
        assert_eq!(json_path(&obj, ".status.missing"), None);
    }
}
