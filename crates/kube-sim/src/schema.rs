//! Pruning and defaulting of custom objects by their CRD's structural
//! schema, as upstream does for `apiextensions.k8s.io/v1` CRDs: fields the
//! schema does not know are dropped (or reported, for
//! `fieldValidation=Strict`), absent properties with a `default` get it.

use serde_json::{Map, Value};

/// Returns the pruned object and the paths of the fields that were dropped.
pub fn prune(mut obj: Value, schema: &Value) -> (Value, Vec<String>) {
    let mut unknown = Vec::new();
    if let Value::Object(map) = &mut obj {
        // apiVersion, kind and metadata are always kept at the root.
        prune_object(
            map,
            schema,
            "",
            &mut unknown,
            &["apiVersion", "kind", "metadata"],
        );
    }
    (obj, unknown)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn prune_object(
    map: &mut Map<String, Value>,
    schema: &Value,
    path: &str,
    unknown: &mut Vec<String>,
    always_kept: &[&str],
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let embedded = schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    let keep_all = preserves_unknown(schema) && properties.is_none() && additional.is_none();
    if keep_all {
        return;
    }
    // Structural defaults apply to absent properties, as upstream defaults
    // custom objects on write.
    for (key, property) in properties.into_iter().flatten() {
        if !map.contains_key(key)
            && let Some(default) = property.get("default")
        {
            map.insert(key.clone(), default.clone());
        }
    }
    // A null where the schema does not allow one is dropped (or defaulted),
    // as upstream prunes non-nullable nulls before validation.
    for (key, property) in properties.into_iter().flatten() {
        let nullable = property.get("nullable").and_then(Value::as_bool) == Some(true);
        if !nullable && map.get(key).is_some_and(Value::is_null) {
            match property.get("default") {
                Some(default) => map.insert(key.clone(), default.clone()),
                None => map.remove(key),
            };
        }
    }
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let child_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let child_schema = properties.and_then(|p| p.get(&key)).or(additional);
        match child_schema {
            Some(child_schema) => {
                if let Some(child) = map.get_mut(&key) {
                    prune_value(child, child_schema, &child_path, unknown);
                }
            }
            None if always_kept.contains(&key.as_str())
                || (embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")) => {}
            None if preserves_unknown(schema) => {}
            None => {
                map.remove(&key);
                unknown.push(child_path);
            }
        }
    }
}

fn prune_value(value: &mut Value, schema: &Value, path: &str, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => prune_object(map, schema, path, unknown, &[]),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item, item_schema, &format!("{path}[{i}]"), unknown);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drops_unknown_fields_and_reports_them() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"},
                "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }});
        let obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"replicas": 1, "bogus": true, "items": [{"name": "n", "extra": 1}]},
            "status": {"anything": {"goes": 1}}, "top": 1});
        let (pruned, unknown) = prune(obj, &schema);
        assert_eq!(
            pruned,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
            "spec": {"replicas": 1, "items": [{"name": "n"}]}, "status": {"anything": {"goes": 1}}})
        );
        assert_eq!(unknown, vec!["spec.bogus", "spec.items[0].extra", "top"]);
    }

    #[test]
    fn absent_properties_get_their_defaults() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "default": 1}, "name": {"type": "string"}}}}});
        let (defaulted, _) = prune(json!({"spec": {"name": "a"}}), &schema);
        assert_eq!(defaulted, json!({"spec": {"name": "a", "replicas": 1}}));
        let (kept, _) = prune(json!({"spec": {"replicas": 3}}), &schema);
        assert_eq!(kept, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn maps_follow_additional_properties() {
        let schema = json!({"type": "object", "properties": {"weights": {"type": "object",
            "additionalProperties": {"type": "object", "properties": {"w": {"type": "integer"}}}}}});
        let (pruned, unknown) = prune(json!({"weights": {"a": {"w": 1, "x": 2}}}), &schema);
        assert_eq!(pruned, json!({"weights": {"a": {"w": 1}}}));
        assert_eq!(unknown, vec!["weights.a.x"]);
    }
}
