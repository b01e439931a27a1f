//! The three `PATCH` content types of the Kubernetes API server (server-side
//! apply is handled elsewhere):
//!
//! * `application/merge-patch+json` — RFC 7386 JSON merge patch;
//! * `application/json-patch+json` — RFC 6902 JSON patch with the quirks of
//!   evanphx/json-patch, which the real API server uses;
//! * `application/strategic-merge-patch+json` — apimachinery's strategic
//!   merge patch for built-in kinds, with merge keys taken from a built-in
//!   table instead of Go struct tags.
//!
//! All functions work on `serde_json::Value` and leave the target unchanged
//! when they fail.

use serde_json::{Map, Value};

/// Why a patch was rejected. [`PatchError::is_bad_request`] tells which HTTP
/// status the API server would answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document does not have the shape its content type requires
    /// (400 Bad Request).
    #[error("invalid patch: {0}")]
    Malformed(String),
    /// A JSON-patch operation is unknown, lacks a field or addresses a
    /// location that does not exist (422 Unprocessable Entity).
    #[error("json patch operation {index} failed: {message}")]
    OperationFailed { index: usize, message: String },
    /// A JSON-patch `test` operation found a different value (422).
    #[error("json patch operation {index} failed: testing value {path} failed")]
    TestFailed { index: usize, path: String },
    /// A strategic merge patch tried to merge a list of lists, which
    /// apimachinery rejects with 422.
    #[error("lists of lists are not supported")]
    ListOfLists,
}

impl PatchError {
    /// `true` when the API server answers 400 Bad Request, `false` when it
    /// answers 422 Unprocessable Entity.
    pub fn is_bad_request(&self) -> bool {
        matches!(self, PatchError::Malformed(_))
    }
}

fn malformed(message: impl Into<String>) -> PatchError {
    PatchError::Malformed(message.into())
}

/// RFC 7386 JSON merge patch (`application/merge-patch+json`): objects merge
/// recursively, `null` removes a key, anything else (including arrays and a
/// non-object patch) replaces the target value. Never fails today; the
/// `Result` keeps the three patch functions interchangeable for callers.
pub fn merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    // Leading `::` because this module defines its own `json_patch` function.
    ::json_patch::merge(target, patch);
    Ok(())
}

/// RFC 6902 JSON patch (`application/json-patch+json`) with evanphx/json-patch
/// semantics: a `test` whose value is `null` passes when the addressed key is
/// missing (kube-rs' finalizer helper relies on this), a missing `value`
/// counts as `null`, and negative array indices count from the end for `add`
/// and `remove`. The patch is applied atomically.
///
/// A patch that is not an array of objects is [`PatchError::Malformed`]
/// (400); every other failure is 422, as upstream only detects it while
/// applying.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Array(operations) = patch else {
        return Err(malformed("a JSON patch must be an array of operations"));
    };
    let operations = operations
        .iter()
        .enumerate()
        .map(|(index, op)| {
            op.as_object()
                .ok_or_else(|| malformed(format!("operation {index} is not a JSON object")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Apply to a copy so that a failing operation leaves the target intact.
    let mut doc = target.clone();
    for (index, op) in operations.into_iter().enumerate() {
        apply_operation(&mut doc, op).map_err(|failure| match failure {
            OpFailure::Failed(message) => PatchError::OperationFailed { index, message },
            OpFailure::TestFailed(path) => PatchError::TestFailed { index, path },
        })?;
    }
    *target = doc;
    Ok(())
}

/// Failure of a single operation; the caller adds the operation index.
enum OpFailure {
    Failed(String),
    TestFailed(String),
}

/// A decoded RFC 6901 pointer, keeping the raw text for error messages.
struct Pointer<'a> {
    raw: &'a str,
    tokens: Vec<String>,
}

impl Pointer<'_> {
    fn missing(&self, op: &str) -> OpFailure {
        OpFailure::Failed(format!(
            "{op} operation does not apply: doc is missing path: {:?}",
            self.raw
        ))
    }
}

fn pointer<'a>(op: &'a Map<String, Value>, field: &str) -> Result<Pointer<'a>, OpFailure> {
    let raw = op
        .get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| OpFailure::Failed(format!("operation missing {field} field")))?;
    let tokens = if raw.is_empty() {
        Vec::new()
    } else {
        raw.strip_prefix('/')
            .ok_or_else(|| {
                OpFailure::Failed(format!(
                    "invalid JSON pointer {raw:?}: must be empty or start with '/'"
                ))
            })?
            .split('/')
            // RFC 6901: decode `~1` before `~0` so that `~01` becomes `~1`.
            .map(|token| token.replace("~1", "/").replace("~0", "~"))
            .collect()
    };
    Ok(Pointer { raw, tokens })
}

fn apply_operation(doc: &mut Value, op: &Map<String, Value>) -> Result<(), OpFailure> {
    let kind = op.get("op").and_then(Value::as_str).unwrap_or("unknown");
    // evanphx inserts null instead of rejecting an operation without value.
    let value = op.get("value").cloned().unwrap_or(Value::Null);
    match kind {
        "add" => add(doc, &pointer(op, "path")?, value, "add"),
        "remove" => remove(doc, &pointer(op, "path")?, "remove").map(drop),
        "replace" => {
            let path = pointer(op, "path")?;
            let slot = get_mut(doc, &path.tokens).ok_or_else(|| path.missing("replace"))?;
            *slot = value;
            Ok(())
        }
        "move" => {
            let from = pointer(op, "from")?;
            let path = pointer(op, "path")?;
            let moved = remove(doc, &from, "move")?;
            add(doc, &path, moved, "move")
        }
        "copy" => {
            let from = pointer(op, "from")?;
            let path = pointer(op, "path")?;
            let copied = get(doc, &from.tokens)
                .cloned()
                .ok_or_else(|| from.missing("copy"))?;
            add(doc, &path, copied, "copy")
        }
        "test" => test(doc, &pointer(op, "path")?, &value),
        other => Err(OpFailure::Failed(format!("Unexpected kind: {other}"))),
    }
}

fn get<'v>(doc: &'v Value, tokens: &[String]) -> Option<&'v Value> {
    tokens.iter().try_fold(doc, |current, token| match current {
        Value::Object(map) => map.get(token),
        Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn get_mut<'v>(doc: &'v mut Value, tokens: &[String]) -> Option<&'v mut Value> {
    tokens.iter().try_fold(doc, |current, token| match current {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
        _ => None,
    })
}

/// Resolves an array index for `add` (`len` slots + one past the end) or
/// `remove` (`len` slots). Negative indices count from the end, as evanphx's
/// `SupportNegativeIndices` (enabled by default) does.
fn array_position(token: &str, slots: usize) -> Option<usize> {
    let index = token.parse::<i64>().ok()?;
    let slots = i64::try_from(slots).ok()?;
    let index = if index < 0 { index + slots } else { index };
    if (0..slots).contains(&index) {
        usize::try_from(index).ok()
    } else {
        None
    }
}

fn invalid_index(token: &str) -> OpFailure {
    OpFailure::Failed(format!("Unable to access invalid index: {token}"))
}

fn add(doc: &mut Value, path: &Pointer, value: Value, op: &str) -> Result<(), OpFailure> {
    let Some((last, parent)) = path.tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let index = if last == "-" {
                items.len()
            } else {
                array_position(last, items.len() + 1).ok_or_else(|| invalid_index(last))?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(path.missing(op)),
    }
}

fn remove(doc: &mut Value, path: &Pointer, op: &str) -> Result<Value, OpFailure> {
    let Some((last, parent)) = path.tokens.split_last() else {
        return Err(OpFailure::Failed(format!(
            "{op} operation does not apply: cannot remove the whole document"
        )));
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => map
            .remove(last)
            .ok_or_else(|| OpFailure::Failed(format!("Unable to remove nonexistent key: {last}"))),
        Some(Value::Array(items)) => {
            let index = array_position(last, items.len()).ok_or_else(|| invalid_index(last))?;
            Ok(items.remove(index))
        }
        _ => Err(path.missing(op)),
    }
}

fn test(doc: &Value, path: &Pointer, expected: &Value) -> Result<(), OpFailure> {
    let actual = match path.tokens.split_last() {
        None => Some(doc),
        Some((last, parent)) => match get(doc, parent) {
            // A missing key is not an error yet: evanphx compares it as null.
            Some(Value::Object(map)) => map.get(last),
            Some(Value::Array(items)) => Some(
                last.parse::<usize>()
                    .ok()
                    .and_then(|i| items.get(i))
                    .ok_or_else(|| invalid_index(last))?,
            ),
            _ => {
                return Err(OpFailure::Failed(format!(
                    "test operation does not apply: is missing path: {:?}",
                    path.raw
                )));
            }
        },
    };
    if actual.unwrap_or(&Value::Null) == expected {
        Ok(())
    } else {
        Err(OpFailure::TestFailed(path.raw.to_string()))
    }
}

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// How a list field is merged (apimachinery's `patchStrategy` /
/// `patchMergeKey` struct tags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy<'a> {
    /// The patch list replaces the list (no `patchStrategy`).
    Replace,
    /// Elements are objects identified by this key.
    MergeByKey(&'a str),
    /// Elements are scalars; the lists are unioned.
    MergeScalars,
}

/// Merge strategies of the built-in kinds, keyed by field name and, where a
/// name is used with different strategies, by the parent path (`parent` holds
/// the object field names from the root; list elements add no segment).
fn known_list_strategy(parent: &[&str], field: &str) -> ListStrategy<'static> {
    use ListStrategy::{MergeByKey, MergeScalars, Replace};
    let parent_field = parent.last().copied();
    let in_container = matches!(
        parent_field,
        Some("containers" | "initContainers" | "ephemeralContainers")
    );
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "resourceClaims"
        | "schedulingGates" => MergeByKey("name"),
        // PodSpec only; ServiceAccount.imagePullSecrets is atomic.
        "imagePullSecrets" if parent_field == Some("spec") => MergeByKey("name"),
        "volumeMounts" => MergeByKey("mountPath"),
        "volumeDevices" => MergeByKey("devicePath"),
        "conditions" => MergeByKey("type"),
        "hostAliases" => MergeByKey("ip"),
        "topologySpreadConstraints" => MergeByKey("topologyKey"),
        "ports" if in_container => MergeByKey("containerPort"),
        // Service spec.ports; other `ports` lists (NetworkPolicy, Endpoints) are atomic.
        "ports" if parent == ["spec"] => MergeByKey("port"),
        // Node status.addresses; Endpoints subsets[].addresses is atomic.
        "addresses" if parent == ["status"] => MergeByKey("type"),
        "podIPs" | "hostIPs" if parent == ["status"] => MergeByKey("ip"),
        "ownerReferences" if parent_field == Some("metadata") => MergeByKey("uid"),
        "finalizers" if parent_field == Some("metadata") => MergeScalars,
        // ServiceAccount secrets.
        "secrets" if parent.is_empty() => MergeByKey("name"),
        _ => Replace,
    }
}

/// Clients (kubectl) only send `$setElementOrder/<field>` for merging lists,
/// as `[{<mergeKey>: value}, ...]` or a list of scalars, so the directive
/// reveals the strategy of fields missing from the built-in table.
fn strategy_from_order(order: &[Value]) -> Option<ListStrategy<'_>> {
    match order.first()? {
        Value::Object(first) if first.len() == 1 => {
            let key = first.keys().next()?;
            order
                .iter()
                .all(|e| {
                    e.as_object()
                        .is_some_and(|m| m.len() == 1 && m.contains_key(key))
                })
                .then_some(ListStrategy::MergeByKey(key.as_str()))
        }
        Value::Object(_) | Value::Array(_) => None,
        _ => order
            .iter()
            .all(|e| !e.is_object() && !e.is_array())
            .then_some(ListStrategy::MergeScalars),
    }
}

/// Strategic merge patch (`application/strategic-merge-patch+json`) for
/// built-in kinds. Objects merge recursively and `null` deletes a key; lists
/// are replaced unless they are merging lists (see the table in this
/// module): then patch elements are merged into the element with the same
/// merge key and new ones appended, and scalar lists are unioned.
///
/// Directives: `$patch: replace|delete` in objects and as list elements,
/// `$setElementOrder/<list>`, `$retainKeys` and
/// `$deleteFromPrimitiveList/<list>`. None of them survive in the result.
/// Errors are [`PatchError::Malformed`] (400) except
/// [`PatchError::ListOfLists`] (422).
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(patch) = patch else {
        return Err(malformed("a strategic merge patch must be a JSON object"));
    };
    // Merge into a copy so that a rejected patch leaves the target intact.
    let original = target.as_object().cloned();
    *target = Value::Object(merge_object(original, patch, &[])?);
    Ok(())
}

/// The field name of a `<prefix>/<field>` directive key, if `key` has the prefix.
fn directive_field<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>, PatchError> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return Ok(None);
    };
    match rest.strip_prefix('/') {
        Some(field) if !field.is_empty() => Ok(Some(field)),
        _ => Err(malformed(format!(
            "invalid patch format of {prefix} directive: {key:?}"
        ))),
    }
}

fn directive_list<'p>(key: &str, value: &'p Value) -> Result<&'p [Value], PatchError> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| malformed(format!("{key} must be a list")))
}

/// Merges `patch` into `original` (absent when the field does not exist yet,
/// in which case the patch is only cleaned of nulls and directives).
fn merge_object<'p>(
    original: Option<Map<String, Value>>,
    patch: &'p Map<String, Value>,
    path: &[&'p str],
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(PATCH_DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                let mut replacement = patch.clone();
                replacement.remove(PATCH_DIRECTIVE);
                merge_object(None, &replacement, path)
            }
            // Upstream yields an empty map, not a removed key.
            Some("delete") => Ok(Map::new()),
            _ => Err(malformed(format!("unknown patch type: {directive} in map"))),
        };
    }

    let mut retain_keys = None;
    let mut orders = Vec::new();
    let mut deletions = Vec::new();
    let mut fields = Vec::new();
    for (key, value) in patch {
        if key == RETAIN_KEYS {
            retain_keys = Some(directive_list(key, value)?);
        } else if let Some(field) = directive_field(key, SET_ELEMENT_ORDER)? {
            orders.push((field, directive_list(key, value)?));
        } else if let Some(field) = directive_field(key, DELETE_FROM_PRIMITIVE_LIST)? {
            deletions.push((field, directive_list(key, value)?));
        } else {
            fields.push((key.as_str(), value));
        }
    }
    let strategy_of = |field: &str| -> ListStrategy<'p> {
        match known_list_strategy(path, field) {
            ListStrategy::Replace => {}
            known => return known,
        }
        if let Some(strategy) = orders
            .iter()
            .find(|(f, _)| *f == field)
            .and_then(|(_, order)| strategy_from_order(order))
        {
            return strategy;
        }
        if deletions.iter().any(|(f, _)| *f == field) {
            ListStrategy::MergeScalars
        } else {
            ListStrategy::Replace
        }
    };

    let mut merged = original.unwrap_or_default();
    if let Some(keys) = retain_keys {
        let retained = |key: &str| keys.iter().any(|k| k.as_str() == Some(key));
        if let Some((key, _)) = fields.iter().find(|(k, v)| !v.is_null() && !retained(k)) {
            return Err(malformed(format!(
                "patch content doesn't match retainKeys list: {key:?} is not retained"
            )));
        }
        merged.retain(|key, _| retained(key));
    }

    for (key, patch_value) in fields {
        if patch_value.is_null() {
            merged.remove(key);
            continue;
        }
        let child: Vec<&str> = path.iter().copied().chain([key]).collect();
        let slot = merged.entry(key).or_insert(Value::Null);
        // Take the old value out so it can be merged by value, then put the
        // result back in the same slot.
        *slot = match (std::mem::take(slot), patch_value) {
            (Value::Object(current), Value::Object(p)) => {
                Value::Object(merge_object(Some(current), p, &child)?)
            }
            (Value::Array(current), Value::Array(p)) => {
                Value::Array(merge_list(current, p, strategy_of(key), &child)?)
            }
            (_, Value::Object(p)) => Value::Object(merge_object(None, p, &child)?),
            (_, Value::Array(p)) => {
                Value::Array(merge_list(Vec::new(), p, strategy_of(key), &child)?)
            }
            (_, scalar) => scalar.clone(),
        };
    }

    for &(field, values) in &deletions {
        if let Some(Value::Array(items)) = merged.get_mut(field) {
            items.retain(|item| !values.contains(item));
        }
    }

    for &(field, order) in &orders {
        if let Some(Value::Array(items)) = merged.get_mut(field) {
            let unordered = std::mem::take(items);
            *items = reorder(unordered, order, strategy_of(field), field)?;
        }
    }
    Ok(merged)
}

fn is_directive_element(value: &Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.contains_key(PATCH_DIRECTIVE))
}

/// A patch value applied to nothing: nulls and directives are dropped.
fn fresh<'p>(value: &'p Value, path: &[&'p str]) -> Result<Value, PatchError> {
    match value {
        Value::Object(map) => Ok(Value::Object(merge_object(None, map, path)?)),
        Value::Array(items) => items
            .iter()
            // Directive elements have no meaning in a list that is replaced.
            .filter(|item| !is_directive_element(item))
            .map(|item| fresh(item, path))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        scalar => Ok(scalar.clone()),
    }
}

fn merge_list<'p>(
    original: Vec<Value>,
    patch: &'p [Value],
    strategy: ListStrategy<'p>,
    path: &[&'p str],
) -> Result<Vec<Value>, PatchError> {
    let field = path.last().copied().unwrap_or_default();
    let key = match strategy {
        ListStrategy::Replace => {
            return patch
                .iter()
                .filter(|item| !is_directive_element(item))
                .map(|item| fresh(item, path))
                .collect();
        }
        ListStrategy::MergeByKey(key) => Some(key),
        ListStrategy::MergeScalars => None,
    };
    if original.iter().chain(patch).any(Value::is_array) {
        return Err(PatchError::ListOfLists);
    }
    let patch_objects: Vec<&Map<String, Value>> =
        patch.iter().filter_map(Value::as_object).collect();
    let original_objects = original.iter().filter(|v| v.is_object()).count();

    // Like upstream, the element type (not the field) decides between a
    // scalar union and a keyed merge.
    if patch_objects.is_empty() && original_objects == 0 {
        let mut union: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for item in original.into_iter().chain(patch.iter().cloned()) {
            if !union.contains(&item) {
                union.push(item);
            }
        }
        return Ok(union);
    }
    if patch_objects.len() != patch.len() || original_objects != original.len() {
        return Err(malformed(format!(
            "list element types are not identical in {field}"
        )));
    }
    let Some(key) = key else {
        return Err(malformed(format!(
            "cannot merge lists without merge key for {field}"
        )));
    };
    let missing_key = || {
        malformed(format!(
            "{field} element does not contain declared merge key: {key}"
        ))
    };

    let mut merged = original;
    let mut regular = Vec::with_capacity(patch_objects.len());
    let mut replace = false;
    for element in patch_objects {
        let Some(directive) = element.get(PATCH_DIRECTIVE) else {
            regular.push(element);
            continue;
        };
        match directive.as_str() {
            Some("replace") => replace = true,
            Some("delete") => {
                let id = element.get(key).ok_or_else(missing_key)?;
                merged.retain(|item| item.get(key) != Some(id));
            }
            Some("merge") => {
                return Err(malformed(
                    "merging lists cannot yet be specified in the patch",
                ));
            }
            _ => {
                return Err(malformed(format!(
                    "unknown patch type: {directive} in {field} element"
                )));
            }
        }
    }
    if replace {
        merged.clear();
    }
    for element in regular {
        let id = element.get(key).ok_or_else(missing_key)?;
        match merged.iter().position(|item| item.get(key) == Some(id)) {
            Some(index) => {
                let current = match std::mem::take(&mut merged[index]) {
                    Value::Object(map) => Some(map),
                    _ => None,
                };
                merged[index] = Value::Object(merge_object(current, element, path)?);
            }
            None => merged.push(Value::Object(merge_object(None, element, path)?)),
        }
    }
    Ok(merged)
}

/// The value an element is identified by in `$setElementOrder`.
fn identity<'v>(value: &'v Value, key: Option<&str>) -> Option<&'v Value> {
    match key {
        Some(key) => value.get(key),
        None => Some(value),
    }
}

/// Applies `$setElementOrder`: listed elements first, in the given order;
/// unlisted ones (e.g. added by the server) keep their relative order after.
fn reorder(
    items: Vec<Value>,
    order: &[Value],
    strategy: ListStrategy<'_>,
    field: &str,
) -> Result<Vec<Value>, PatchError> {
    let key = match strategy {
        ListStrategy::MergeByKey(key) => Some(key),
        ListStrategy::MergeScalars => None,
        ListStrategy::Replace if order.is_empty() => return Ok(items),
        ListStrategy::Replace => {
            return Err(malformed(format!(
                "{SET_ELEMENT_ORDER}/{field} given, but {field} is not a merging list"
            )));
        }
    };
    let mut pending: Vec<Option<Value>> = items.into_iter().map(Some).collect();
    let mut ordered = Vec::with_capacity(pending.len());
    for entry in order {
        let wanted = identity(entry, key).ok_or_else(|| {
            malformed(format!(
                "{SET_ELEMENT_ORDER}/{field} entry does not contain the merge key"
            ))
        })?;
        // Entries naming elements that do not exist are ignored, as upstream.
        if let Some(slot) = pending
            .iter_mut()
            .find(|slot| slot.as_ref().and_then(|item| identity(item, key)) == Some(wanted))
        {
            ordered.extend(slot.take());
        }
    }
    ordered.extend(pending.into_iter().flatten());
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assert_no_directives(value: &Value) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    assert!(!key.starts_with('$'), "directive {key} survived in {value}");
                    assert_no_directives(child);
                }
            }
            Value::Array(items) => items.iter().for_each(assert_no_directives),
            _ => {}
        }
    }

    fn smp(mut target: Value, patch: Value) -> Value {
        if let Err(e) = strategic_merge_patch(&mut target, &patch) {
            panic!("patch {patch} failed: {e}");
        }
        assert_no_directives(&target);
        target
    }

    fn smp_err(target: Value, patch: Value) -> PatchError {
        let mut patched = target.clone();
        let err =
            strategic_merge_patch(&mut patched, &patch).expect_err("patch should be rejected");
        assert_eq!(
            patched, target,
            "a rejected patch must not modify the target"
        );
        err
    }

    fn jp(mut target: Value, patch: Value) -> Value {
        if let Err(e) = json_patch(&mut target, &patch) {
            panic!("patch {patch} failed: {e}");
        }
        target
    }

    fn jp_err(target: Value, patch: Value) -> PatchError {
        let mut patched = target.clone();
        let err = json_patch(&mut patched, &patch).expect_err("patch should be rejected");
        assert_eq!(
            patched, target,
            "a rejected patch must not modify the target"
        );
        err
    }

    // ---- merge patch ----

    #[test]
    fn merge_patch_null_removes_and_objects_merge() {
        let mut target = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}, "name": "x"},
            "spec": {"args": ["x", "y"]}
        });
        let patch = json!({
            "metadata": {"labels": {"a": null, "c": "3"}},
            "spec": {"args": ["z"], "new": {"k": "v", "gone": null}}
        });
        merge_patch(&mut target, &patch).expect("merge patch never fails");
        assert_eq!(
            target,
            json!({
                "metadata": {"labels": {"b": "2", "c": "3"}, "name": "x"},
                "spec": {"args": ["z"], "new": {"k": "v"}}
            })
        );
    }

    #[test]
    fn merge_patch_non_object_replaces_target() {
        let mut target = json!({"a": 1});
        merge_patch(&mut target, &json!([1, 2])).expect("merge patch never fails");
        assert_eq!(target, json!([1, 2]));
    }

    // ---- JSON patch ----

    #[test]
    fn json_patch_add_remove_replace() {
        let target = json!({"a": {"b": 1}, "list": [1, 2, 3]});
        let patched = jp(
            target,
            json!([
                {"op": "add", "path": "/a/c", "value": 2},
                {"op": "add", "path": "/list/1", "value": 9},
                {"op": "add", "path": "/list/-", "value": 4},
                {"op": "remove", "path": "/list/0"},
                {"op": "replace", "path": "/a/b", "value": "x"},
                {"op": "add", "path": "/a/b", "value": "overwritten"}
            ]),
        );
        assert_eq!(
            patched,
            json!({"a": {"b": "overwritten", "c": 2}, "list": [9, 2, 3, 4]})
        );
    }

    #[test]
    fn json_patch_move_and_copy() {
        let target = json!({"a": {"x": 1}, "b": [], "c": "s"});
        let patched = jp(
            target,
            json!([
                {"op": "copy", "from": "/a", "path": "/b/0"},
                {"op": "move", "from": "/c", "path": "/a/y"},
                {"op": "move", "from": "/a/x", "path": "/d"}
            ]),
        );
        assert_eq!(patched, json!({"a": {"y": "s"}, "b": [{"x": 1}], "d": 1}));
    }

    #[test]
    fn json_patch_pointer_escapes() {
        let target = json!({"metadata": {"annotations": {"a/b": "1", "m~n": "2"}}});
        let patched = jp(
            target,
            json!([
                {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "x"},
                {"op": "remove", "path": "/metadata/annotations/m~0n"}
            ]),
        );
        assert_eq!(patched, json!({"metadata": {"annotations": {"a/b": "x"}}}));
    }

    #[test]
    fn json_patch_negative_indices_as_evanphx() {
        let patched = jp(
            json!({"l": [1, 2, 3]}),
            json!([
                {"op": "remove", "path": "/l/-1"},
                {"op": "add", "path": "/l/-1", "value": 9}
            ]),
        );
        assert_eq!(patched, json!({"l": [1, 2, 9]}));
    }

    #[test]
    fn json_patch_test_op() {
        let target = json!({"a": "x", "n": null});
        jp(
            target.clone(),
            json!([{"op": "test", "path": "/a", "value": "x"}]),
        );
        jp(
            target.clone(),
            json!([{"op": "test", "path": "/n", "value": null}]),
        );
        let err = jp_err(
            target.clone(),
            json!([{"op": "test", "path": "/a", "value": "y"}]),
        );
        assert_eq!(
            err,
            PatchError::TestFailed {
                index: 0,
                path: "/a".into()
            }
        );
        assert!(!err.is_bad_request());
        // A missing key only passes a null test.
        let err = jp_err(
            target,
            json!([{"op": "test", "path": "/missing", "value": "y"}]),
        );
        assert!(matches!(err, PatchError::TestFailed { .. }));
    }

    #[test]
    fn json_patch_finalizer_helper_sequence() {
        let object = json!({"metadata": {"name": "job", "resourceVersion": "5"}});
        let added = jp(
            object,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
            ]),
        );
        assert_eq!(added["metadata"]["finalizers"], json!(["x"]));

        // The same "add" patch must conflict once finalizers exist.
        let err = jp_err(
            added.clone(),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
            ]),
        );
        assert_eq!(
            err,
            PatchError::TestFailed {
                index: 0,
                path: "/metadata/finalizers".into()
            }
        );

        let removed = jp(
            added,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "x"},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]),
        );
        assert_eq!(removed["metadata"]["finalizers"], json!([]));

        // Removing by index after someone else changed the list fails the test.
        let err = jp_err(
            json!({"metadata": {"finalizers": ["other", "x"]}}),
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "x"},
                {"op": "remove", "path": "/metadata/finalizers/0"}
            ]),
        );
        assert!(matches!(err, PatchError::TestFailed { index: 0, .. }));
    }

    #[test]
    fn json_patch_is_atomic() {
        let err = jp_err(
            json!({"a": 1, "b": [1]}),
            json!([
                {"op": "add", "path": "/c", "value": 3},
                {"op": "remove", "path": "/b/0"},
                {"op": "remove", "path": "/missing"}
            ]),
        );
        assert!(matches!(err, PatchError::OperationFailed { index: 2, .. }));
    }

    #[test]
    fn json_patch_application_failures_are_unprocessable() {
        let target = json!({"a": {"b": 1}, "l": [1]});
        let cases = [
            json!([{"op": "remove", "path": "/nope"}]),
            json!([{"op": "replace", "path": "/a/nope", "value": 1}]),
            json!([{"op": "add", "path": "/x/y", "value": 1}]),
            json!([{"op": "add", "path": "/l/5", "value": 1}]),
            json!([{"op": "remove", "path": "/l/1"}]),
            json!([{"op": "move", "from": "/nope", "path": "/c"}]),
            json!([{"op": "move", "from": "/a", "path": "/a/b/c"}]),
            json!([{"op": "copy", "from": "/nope", "path": "/c"}]),
            json!([{"op": "test", "path": "/x/y", "value": null}]),
            json!([{"op": "test", "path": "/l/3", "value": null}]),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "value": 1}]),
            json!([{"op": "add", "path": "no-slash", "value": 1}]),
        ];
        for patch in cases {
            let err = jp_err(target.clone(), patch.clone());
            assert!(!err.is_bad_request(), "{patch} should be 422, got {err:?}");
        }
    }

    #[test]
    fn json_patch_malformed_document_is_bad_request() {
        for patch in [json!({"op": "add"}), json!([1]), json!("x")] {
            let err = jp_err(json!({}), patch.clone());
            assert!(err.is_bad_request(), "{patch} should be 400, got {err:?}");
        }
    }

    // ---- strategic merge patch ----

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "a"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1",
                        "imagePullPolicy": "IfNotPresent",
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "volumeMounts": [{"mountPath": "/data", "name": "data"}],
                        "args": ["--a", "--b"]
                    },
                    {"name": "sidecar", "image": "envoy"}
                ],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        })
    }

    #[test]
    fn smp_merges_containers_by_name() {
        let patched = smp(
            pod(),
            json!({"spec": {"containers": [
                {"name": "main", "image": "busybox:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
                {"name": "new", "image": "nginx"}
            ]}}),
        );
        let containers = &patched["spec"]["containers"];
        assert_eq!(containers.as_array().map(Vec::len), Some(3));
        assert_eq!(containers[0]["name"], "main");
        assert_eq!(containers[0]["image"], "busybox:2");
        assert_eq!(containers[0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(containers[1], json!({"name": "sidecar", "image": "envoy"}));
        assert_eq!(containers[2], json!({"name": "new", "image": "nginx"}));
    }

    #[test]
    fn smp_replaces_non_merging_lists_and_deletes_nulls() {
        let patched = smp(
            pod(),
            json!({
                "metadata": {"labels": {"app": null, "tier": "web"}},
                "spec": {"containers": [{"name": "main", "args": ["--c"], "imagePullPolicy": null}]}
            }),
        );
        assert_eq!(patched["metadata"]["labels"], json!({"tier": "web"}));
        let main = &patched["spec"]["containers"][0];
        assert_eq!(main["args"], json!(["--c"]));
        assert!(main.get("imagePullPolicy").is_none());
    }

    #[test]
    fn smp_container_ports_by_container_port_and_mounts_by_path() {
        let patched = smp(
            pod(),
            json!({"spec": {"containers": [{
                "name": "main",
                "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
                "volumeMounts": [{"mountPath": "/data", "readOnly": true}]
            }]}}),
        );
        let main = &patched["spec"]["containers"][0];
        assert_eq!(
            main["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}])
        );
        assert_eq!(
            main["volumeMounts"],
            json!([{"mountPath": "/data", "name": "data", "readOnly": true}])
        );
    }

    #[test]
    fn smp_service_ports_merge_by_port() {
        let service = json!({"spec": {"ports": [
            {"port": 80, "targetPort": 8080, "name": "http"},
            {"port": 443, "targetPort": 8443, "name": "https"}
        ]}});
        let patched = smp(
            service,
            json!({"spec": {"ports": [{"port": 443, "targetPort": 9443}]}}),
        );
        assert_eq!(
            patched["spec"]["ports"],
            json!([
                {"port": 80, "targetPort": 8080, "name": "http"},
                {"port": 443, "targetPort": 9443, "name": "https"}
            ])
        );
    }

    #[test]
    fn smp_conditions_merge_by_type() {
        let object = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "Starting"},
            {"type": "Scheduled", "status": "True"}
        ]}});
        let patched = smp(
            object,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": null},
                {"type": "Done", "status": "False"}
            ]}}),
        );
        assert_eq!(
            patched["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True"},
                {"type": "Scheduled", "status": "True"},
                {"type": "Done", "status": "False"}
            ])
        );
    }

    #[test]
    fn smp_node_addresses_by_type_but_other_addresses_replaced() {
        let node = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n1"}
        ]}});
        let patched = smp(
            node,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        );
        assert_eq!(
            patched["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}])
        );
        let endpoints = json!({"subsets": [{"addresses": [{"ip": "1.1.1.1"}]}]});
        let patched = smp(
            endpoints,
            json!({"subsets": [{"addresses": [{"ip": "2.2.2.2"}]}]}),
        );
        assert_eq!(
            patched["subsets"],
            json!([{"addresses": [{"ip": "2.2.2.2"}]}])
        );
    }

    #[test]
    fn smp_owner_references_by_uid_and_finalizers_union() {
        let object = json!({"metadata": {
            "finalizers": ["a", "b"],
            "ownerReferences": [{"uid": "1", "kind": "Job", "name": "j"}]
        }});
        let patched = smp(
            object,
            json!({"metadata": {
                "finalizers": ["c", "a"],
                "ownerReferences": [{"uid": "1", "controller": true}, {"uid": "2", "kind": "Pod", "name": "p"}]
            }}),
        );
        assert_eq!(patched["metadata"]["finalizers"], json!(["a", "b", "c"]));
        assert_eq!(
            patched["metadata"]["ownerReferences"],
            json!([
                {"uid": "1", "kind": "Job", "name": "j", "controller": true},
                {"uid": "2", "kind": "Pod", "name": "p"}
            ])
        );
    }

    #[test]
    fn smp_patch_replace_directive_in_map_and_list() {
        let patched = smp(
            pod(),
            json!({
                "metadata": {"labels": {"$patch": "replace", "only": "this", "dropped": null}},
                "spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]}
            }),
        );
        assert_eq!(patched["metadata"]["labels"], json!({"only": "this"}));
        assert_eq!(
            patched["spec"]["containers"],
            json!([{"name": "solo", "image": "x"}])
        );
    }

    #[test]
    fn smp_patch_delete_directive_in_map_and_list() {
        let patched = smp(
            pod(),
            json!({
                "metadata": {"labels": {"$patch": "delete"}},
                "spec": {"containers": [
                    {"name": "sidecar", "$patch": "delete"},
                    {"name": "main", "env": [{"name": "A", "$patch": "delete"}]}
                ]}
            }),
        );
        // Upstream leaves an empty map behind for `$patch: delete` on a map.
        assert_eq!(patched["metadata"]["labels"], json!({}));
        let containers = patched["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["env"], json!([{"name": "B", "value": "2"}]));
    }

    #[test]
    fn smp_set_element_order() {
        let object = json!({"spec": {"containers": [
            {"name": "a", "image": "1"},
            {"name": "b", "image": "1"},
            {"name": "injected", "image": "1"},
            {"name": "c", "image": "1"},
            {"name": "injected-2", "image": "1"}
        ]}});
        let patched = smp(
            object,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "d"}, {"name": "a"}, {"name": "b"}],
                "containers": [{"name": "d", "image": "2"}, {"name": "a", "image": "2"}]
            }}),
        );
        let names: Vec<&str> = patched["spec"]["containers"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["c", "d", "a", "b", "injected", "injected-2"]);
        assert_eq!(patched["spec"]["containers"][2]["image"], "2");
    }

    #[test]
    fn smp_set_element_order_for_scalars_and_unknown_lists() {
        let patched = smp(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "a"]}}),
        );
        assert_eq!(patched["metadata"]["finalizers"], json!(["c", "a", "b"]));
        // A list missing from the built-in table is merged by the key the
        // ordering directive reveals, instead of being replaced.
        let patched = smp(
            json!({"spec": {"widgets": [{"id": "x", "v": 1}, {"id": "y", "v": 1}]}}),
            json!({"spec": {
                "$setElementOrder/widgets": [{"id": "y"}, {"id": "x"}],
                "widgets": [{"id": "x", "v": 2}]
            }}),
        );
        assert_eq!(
            patched["spec"]["widgets"],
            json!([{"id": "y", "v": 1}, {"id": "x", "v": 2}])
        );
    }

    #[test]
    fn smp_retain_keys() {
        let object = json!({"spec": {"strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1}
        }}});
        let patched = smp(
            object.clone(),
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(patched["spec"]["strategy"], json!({"type": "Recreate"}));
        let err = smp_err(
            object,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}}),
        );
        assert!(err.is_bad_request());
    }

    #[test]
    fn smp_delete_from_primitive_list() {
        let patched = smp(
            json!({"metadata": {"finalizers": ["a", "b", "c"]}, "spec": {"args": ["x", "y"]}}),
            json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["b", "zzz"]},
                "spec": {"$deleteFromPrimitiveList/args": ["x"]}
            }),
        );
        assert_eq!(patched["metadata"]["finalizers"], json!(["a", "c"]));
        assert_eq!(patched["spec"]["args"], json!(["y"]));
    }

    #[test]
    fn smp_kubectl_apply_patch() {
        let object = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"other": "kept"}},
            "spec": {
                "containers": [{
                    "name": "c",
                    "image": "busybox:1",
                    "terminationMessagePath": "/dev/termination-log",
                    "resources": {}
                }],
                "restartPolicy": "Always"
            }
        });
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}},
            "spec": {
                "$setElementOrder/containers": [{"name": "c"}],
                "containers": [{"image": "busybox:2", "name": "c"}]
            }
        });
        let patched = smp(object, patch);
        assert_eq!(
            patched,
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "annotations": {
                    "other": "kept",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}"
                }},
                "spec": {
                    "containers": [{
                        "name": "c",
                        "image": "busybox:2",
                        "terminationMessagePath": "/dev/termination-log",
                        "resources": {}
                    }],
                    "restartPolicy": "Always"
                }
            })
        );
    }

    #[test]
    fn smp_directives_are_stripped_from_new_fields() {
        let patched = smp(
            json!({"metadata": {"name": "p"}}),
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                "containers": [{"name": "a", "env": [{"name": "X", "value": null}]}, {"name": "b"}],
                "template": {"$patch": "replace", "x": 1},
                "args": [{"$patch": "replace"}, "kept"]
            }}),
        );
        assert_eq!(
            patched["spec"],
            json!({
                "containers": [{"name": "b"}, {"name": "a", "env": [{"name": "X"}]}],
                "template": {"x": 1},
                "args": ["kept"]
            })
        );
    }

    #[test]
    fn smp_errors() {
        let err = smp_err(
            pod(),
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
        );
        assert!(err.is_bad_request());
        assert!(err.to_string().contains("merge key: name"), "{err}");

        let err = smp_err(
            pod(),
            json!({"metadata": {"labels": {"$patch": "explode"}}}),
        );
        assert!(err.is_bad_request());

        let err = smp_err(
            pod(),
            json!({"spec": {"containers": [{"name": "x", "$patch": "merge"}]}}),
        );
        assert!(err.is_bad_request());

        let err = smp_err(
            pod(),
            json!({"spec": {"$setElementOrder": [{"name": "x"}]}}),
        );
        assert!(err.is_bad_request());

        let err = smp_err(pod(), json!({"metadata": {"finalizers": [["nested"]]}}));
        assert_eq!(err, PatchError::ListOfLists);
        assert!(!err.is_bad_request());

        let err = smp_err(pod(), json!({"metadata": {"finalizers": ["a", {"b": 1}]}}));
        assert!(err.is_bad_request());

        let err = smp_err(pod(), json!(["not", "an", "object"]));
        assert!(err.is_bad_request());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

        /// Any patch of any kind on any document: applied or refused, no panic.
        #[test]
        fn any_patch_applies_or_is_refused(
            target in proptest_json::json(4, Vec::new(), Vec::new()),
            patch in proptest_json::json(4, Vec::new(), Vec::new()),
        ) {
            let _ = merge_patch(&mut target.clone(), &patch);
            let _ = json_patch(&mut target.clone(), &patch);
            let _ = strategic_merge_patch(&mut target.clone(), &patch);
        }
    }
}
