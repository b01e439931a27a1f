//! Validation of custom objects by their CRD's structural schema and its
//! CEL rules, reported as kube-apiserver 1.37 reports them (the wording
//! was read off a real API server; `tests/bad_input.rs` compares the two).
//!
//! Checked: `type` (and the `int32`/`int64` formats), `nullable`, `enum`,
//! `minimum`, `maximum`, `minItems`, `maxItems`, `required`,
//! `x-kubernetes-int-or-string`, `x-kubernetes-preserve-unknown-fields` and
//! `x-kubernetes-validations` (the subset of CEL in `cel`). Not checked:
//! `pattern`, `minLength`/`maxLength`, `multipleOf`, `uniqueItems`,
//! `maxProperties` and list-type uniqueness; no CRD of ours uses them
//! (docs/src/testing/simulated-clusters.md). As upstream, CEL rules run only when no
//! "blocking" schema error (wrong type, unsupported value, missing field,
//! too many items) was found, and transition rules only on update.

use serde_json::{Value, json};

use super::cel;

/// One `details.causes` entry of a 422 Invalid.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: &'static str,
    /// The field path, or `<nil>` for a cause about the whole object.
    pub field: String,
    pub message: String,
}

impl Cause {
    pub fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

const NO_FIELD: &str = "<nil>";
const INVALID: &str = "FieldValueInvalid";
const BLOCKING: [&str; 4] = [
    "FieldValueTypeInvalid",
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooMany",
];

/// Every cause why `obj` (after pruning and defaulting) is invalid; `old`
/// is the stored object on update, for transition rules.
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    check(obj, schema, "", &mut causes);
    if causes.iter().any(|c| BLOCKING.contains(&c.reason)) {
        causes.push(Cause {
            reason: INVALID,
            field: NO_FIELD.into(),
            message: "Invalid value: null: some validation rules were not checked because the \
                      object was invalid; correct the existing errors to complete validation"
                .into(),
        });
        return causes;
    }
    rules(obj, old, schema, "", &mut causes);
    causes
}

/// Every CEL rule of a schema that the simulator cannot parse, with its
/// path: a CRD carrying one is refused, as upstream refuses a rule that
/// does not compile.
pub fn unparsable_rules(schema: &Value, path: &str, found: &mut Vec<String>) {
    for rule in schema_rules(schema) {
        if let Err(e) = cel::parse(rule_text(rule)) {
            found.push(format!(
                "{path}x-kubernetes-validations: Invalid value: {:?}: compilation failed: {e}",
                rule_text(rule)
            ));
        }
    }
    for (key, child) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        unparsable_rules(child, &format!("{path}properties[{key}]."), found);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = schema.get(key).filter(|c| c.is_object()) {
            unparsable_rules(child, &format!("{path}{key}."), found);
        }
    }
}

fn schema_rules(schema: &Value) -> impl Iterator<Item = &Value> {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn rule_text(rule: &Value) -> &str {
    rule.get("rule").and_then(Value::as_str).unwrap_or_default()
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn field_of(path: &str) -> String {
    if path.is_empty() {
        NO_FIELD.into()
    } else {
        path.to_string()
    }
}

/// The name upstream gives a JSON value's type in messages.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integral(number: &serde_json::Number) -> bool {
    number.is_i64() || number.is_u64() || number.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// A bound as Go prints a float64 that holds a whole number: `1`, not `1.0`.
fn bound(value: &Value) -> String {
    match value.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => value.to_string(),
    }
}

fn check(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    let declared = schema.get("type").and_then(Value::as_str);
    if value.is_null() && nullable {
        check_enum(value, schema, path, causes);
        return;
    }
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        if !(value.is_string() || value.as_number().is_some_and(is_integral)) {
            causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: field_of(path),
                message: format!(
                    "Invalid value: {found:?}: {path} in body must be of type integer,string: {found:?}",
                    found = type_name(value)
                ),
            });
        }
        return;
    }
    let Some(declared) = declared else {
        return;
    };
    let fits = match (declared, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => is_integral(n),
        _ => false,
    };
    let format = schema.get("format").and_then(Value::as_str);
    if !fits {
        // Upstream checks the format of a number or a boolean given for a
        // formatted integer (naming the format, and a boolean's type as ""),
        // the plain type for anything else; an enum is still checked.
        let integer_format =
            format.filter(|_| declared == "integer" && (value.is_number() || value.is_boolean()));
        let found = if integer_format.is_some() && value.is_boolean() {
            ""
        } else {
            type_name(value)
        };
        causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            field: field_of(path),
            message: format!(
                "Invalid value: {found:?}: {path} in body must be of type {wanted}: {found:?}",
                wanted = integer_format.unwrap_or(declared),
            ),
        });
        if let Some(format) = integer_format.filter(|_| value.is_number()) {
            causes.push(format_cause(format, path));
        }
        check_enum(value, schema, path, causes);
        return;
    }
    if let (Some(format @ ("int32" | "int64")), Value::Number(n)) = (format, value) {
        let whole = n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_f64().map(|f| f as i128));
        let fits_format = match format {
            "int32" => whole.is_some_and(|i| i32::try_from(i).is_ok()),
            _ => whole.is_some_and(|i| i64::try_from(i).is_ok()),
        };
        if !fits_format {
            causes.push(format_cause(format, path));
        }
    }
    check_enum(value, schema, path, causes);
    match value {
        Value::Number(n) => check_bounds(n, schema, path, causes),
        Value::Array(items) => {
            check_items(items.len(), schema, path, causes);
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    causes.push(Cause {
                        reason: "FieldValueRequired",
                        field: child_path(path, required),
                        message: "Required value".into(),
                    });
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                // metadata is the API server's, checked by its own rules.
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    check(child, child_schema, &child_path(path, key), causes);
                }
            }
        }
        _ => {}
    }
}

fn format_cause(format: &str, path: &str) -> Cause {
    Cause {
        reason: INVALID,
        field: NO_FIELD.into(),
        message: format!(
            "Invalid value: \"\": Checked value must be of type integer with format {format} in {path}"
        ),
    }
}

fn check_enum(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if !allowed.contains(value) {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: field_of(path),
            message: format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        });
    }
}

fn check_bounds(n: &serde_json::Number, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(x) = n.as_f64() else {
        return;
    };
    let limits = [
        ("minimum", "greater than or equal to", true),
        ("maximum", "less than or equal to", false),
    ];
    for (key, words, is_minimum) in limits {
        let Some(limit) = schema.get(key).filter(|l| l.is_number()) else {
            continue;
        };
        let l = limit.as_f64().unwrap_or_default();
        if (is_minimum && x < l) || (!is_minimum && x > l) {
            causes.push(Cause {
                reason: INVALID,
                field: field_of(path),
                message: format!(
                    "Invalid value: {n}: {path} in body should be {words} {}",
                    bound(limit)
                ),
            });
        }
    }
}

fn check_items(count: usize, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (count as u64) < min
    {
        causes.push(Cause {
            reason: INVALID,
            field: field_of(path),
            message: format!(
                "Invalid value: {count}: {path} in body should have at least {min} items"
            ),
        });
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count as u64 > max
    {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            field: field_of(path),
            message: format!("Too many: {count}: must have at most {max} items"),
        });
    }
}

/// Evaluates the CEL rules of `schema` on `value` and below. `old` is the
/// stored value at the same place, where upstream can correlate it: by
/// property name, never inside a list.
fn rules(value: &Value, old: Option<&Value>, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    for rule in schema_rules(schema) {
        let text = rule_text(rule);
        let outcome = cel::parse(text).and_then(|expr| {
            if cel::reads_old_self(&expr) && old.is_none() {
                return Ok(true);
            }
            let mut names = vec![("self".to_string(), value.clone())];
            if let Some(old) = old {
                names.push(("oldSelf".to_string(), old.clone()));
            }
            match cel::eval(&expr, &cel::Bindings::new(names))? {
                Value::Bool(holds) => Ok(holds),
                other => Err(cel::CelError::Eval(format!(
                    "the rule gave {other}, not a bool"
                ))),
            }
        });
        let field = match rule.get("fieldPath").and_then(Value::as_str) {
            Some(extra) => field_of(format!("{path}{extra}").trim_start_matches('.')),
            None => field_of(path),
        };
        match outcome {
            Ok(true) => {}
            Ok(false) => {
                let message = rule
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("failed rule: {text}"), str::to_string);
                let forbidden =
                    rule.get("reason").and_then(Value::as_str) == Some("FieldValueForbidden");
                causes.push(Cause {
                    reason: if forbidden {
                        "FieldValueForbidden"
                    } else {
                        INVALID
                    },
                    field,
                    message: if forbidden {
                        format!("Forbidden: {message}")
                    } else {
                        format!("Invalid value: {message}")
                    },
                });
            }
            Err(e) => causes.push(Cause {
                reason: INVALID,
                field,
                message: format!("Invalid value: {e} evaluating rule: {text}"),
            }),
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    let old_child = old.and_then(|o| o.get(key));
                    rules(
                        child,
                        old_child,
                        child_schema,
                        &child_path(path, key),
                        causes,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    rules(item, None, item_schema, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "required": ["items"],
            "properties": {
                "items": {"type": "array", "minItems": 1, "maxItems": 2,
                    "x-kubernetes-validations": [{"rule": "self.all(a, self.exists_one(b, b.name == a.name))", "message": "names must be unique"}],
                    "items": {"type": "object", "properties": {
                        "name": {"type": "string", "enum": ["a", "b"]},
                        "count": {"type": "integer", "format": "int32", "minimum": 1.0, "maximum": 10.0},
                    }}},
                "mode": {"type": "string", "nullable": true},
            }}},
            "x-kubernetes-validations": [{"rule": "!has(oldSelf.spec) || self.spec.items == oldSelf.spec.items",
                "message": "items are fixed", "fieldPath": ".spec.items", "reason": "FieldValueForbidden"}]})
    }

    fn causes(obj: Value, old: Option<Value>) -> Vec<(String, String)> {
        validate(&obj, old.as_ref(), &schema())
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(f, m)| (f.to_string(), m.to_string()))
            .collect()
    }

    const NOT_CHECKED: (&str, &str) = (
        "<nil>",
        "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    );

    /// Expected messages as kube-apiserver 1.37.2 gave them for the same
    /// mistakes in our job CRD.
    #[test]
    fn schema_errors_read_as_upstream_reports_them() {
        let table: Vec<(Value, Vec<(&str, &str)>)> = vec![
            (
                json!({"spec": {"items": [{"name": "a", "count": 1}]}}),
                vec![],
            ),
            (
                json!({"spec": {"items": [{"name": "a", "count": 1.0}], "mode": null}}),
                vec![],
            ),
            (
                json!({"spec": {"items": [{"count": "two"}]}}),
                vec![
                    (
                        "spec.items[0].count",
                        "Invalid value: \"string\": spec.items[0].count in body must be of type integer: \"string\"",
                    ),
                    NOT_CHECKED,
                ],
            ),
            (
                json!({"spec": {"items": [{"count": 1.5}]}}),
                vec![
                    (
                        "spec.items[0].count",
                        "Invalid value: \"float64\": spec.items[0].count in body must be of type int32: \"float64\"",
                    ),
                    (
                        "<nil>",
                        "Invalid value: \"\": Checked value must be of type integer with format int32 in spec.items[0].count",
                    ),
                    NOT_CHECKED,
                ],
            ),
            (
                json!({"spec": {"items": [{"name": "a", "count": 2147483648_i64}]}}),
                vec![
                    (
                        "<nil>",
                        "Invalid value: \"\": Checked value must be of type integer with format int32 in spec.items[0].count",
                    ),
                    (
                        "spec.items[0].count",
                        "Invalid value: 2147483648: spec.items[0].count in body should be less than or equal to 10",
                    ),
                ],
            ),
            (
                json!({"spec": {"items": [{"name": "a", "count": 0}]}}),
                vec![(
                    "spec.items[0].count",
                    "Invalid value: 0: spec.items[0].count in body should be greater than or equal to 1",
                )],
            ),
            (
                json!({"spec": {"items": [{"name": "c"}]}}),
                vec![
                    (
                        "spec.items[0].name",
                        "Unsupported value: \"c\": supported values: \"a\", \"b\"",
                    ),
                    NOT_CHECKED,
                ],
            ),
            (
                json!({"spec": {"items": [{"name": 7, "count": true}]}}),
                vec![
                    (
                        "spec.items[0].count",
                        "Invalid value: \"\": spec.items[0].count in body must be of type int32: \"\"",
                    ),
                    (
                        "spec.items[0].name",
                        "Invalid value: \"integer\": spec.items[0].name in body must be of type string: \"integer\"",
                    ),
                    (
                        "spec.items[0].name",
                        "Unsupported value: 7: supported values: \"a\", \"b\"",
                    ),
                    NOT_CHECKED,
                ],
            ),
            (
                json!({"spec": {}}),
                vec![("spec.items", "Required value"), NOT_CHECKED],
            ),
            (
                json!({"spec": {"items": [{}, {}, {}]}}),
                vec![
                    ("spec.items", "Too many: 3: must have at most 2 items"),
                    NOT_CHECKED,
                ],
            ),
            (
                json!({"spec": {"items": []}}),
                vec![(
                    "spec.items",
                    "Invalid value: 0: spec.items in body should have at least 1 items",
                )],
            ),
            (
                json!({"spec": {"items": [{"name": "a"}, {"name": "a"}]}}),
                vec![("spec.items", "Invalid value: names must be unique")],
            ),
            (
                json!({"spec": []}),
                vec![
                    (
                        "spec",
                        "Invalid value: \"array\": spec in body must be of type object: \"array\"",
                    ),
                    NOT_CHECKED,
                ],
            ),
        ];
        for (obj, expected) in table {
            assert_eq!(causes(obj.clone(), None), pairs(&expected), "{obj}");
        }
    }

    #[test]
    fn transition_rules_run_only_on_update() {
        let before = json!({"spec": {"items": [{"name": "a"}]}});
        let after = json!({"spec": {"items": [{"name": "b"}]}});
        assert_eq!(causes(after.clone(), None), vec![]);
        assert_eq!(
            causes(after, Some(before.clone())),
            pairs(&[("spec.items", "Forbidden: items are fixed")])
        );
        assert_eq!(causes(before.clone(), Some(before)), vec![]);
    }

    #[test]
    fn rules_outside_the_subset_are_found() {
        let mut found = Vec::new();
        unparsable_rules(
            &json!({"properties": {"a": {"x-kubernetes-validations": [{"rule": "self.matches('[a-z]+') && self =~ 1"}]}}}),
            "",
            &mut found,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("properties[a].x-kubernetes-validations"));
    }
}
