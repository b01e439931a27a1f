//! Server-side apply (SSA) and `metadata.managedFields` bookkeeping for the emulated
//! API server. Pure functions over `serde_json::Value`; no I/O.
//!
//! # Model
//!
//! Every object carries `metadata.managedFields`: one entry per field manager identity
//! (manager name + operation `Apply`/`Update` + subresource), each holding a *field set*
//! in the upstream `FieldsV1` wire format. That list is the only state: both entry points
//! parse it from the stored object on every call and write it back into the result.
//!
//! A field set is a set of paths. A path is a sequence of elements: a map field
//! (`f:name`), an associative-list element identified by its key fields
//! (`k:{"name":"c"}`), or a set-list element identified by its value (`v:"x"`).
//! A set *member* is a path the manager owns: scalars, atomic lists, and elements of
//! associative/set lists (rendered with `".": {}` when they also have owned children).
//!
//! * [`apply`] merges the applied configuration into the live object (maps key by key,
//!   associative lists by key, set lists by value, everything else replaced), reports a
//!   conflict for every path owned by another manager whose value the merge changes,
//!   gives the applier exactly the applied field set, and prunes fields the applier
//!   owned before, no longer applies, and nobody else owns. A no-op apply returns the
//!   live object untouched (no new timestamp), so callers can detect it by equality.
//! * [`record_update`] attributes the fields a create/PUT/patch added or changed to the
//!   writer's `Update` entry, takes them away from everyone else, and forgets fields
//!   that no longer exist.
//!
//! Which lists are associative is a fixed table of built-in Kubernetes fields (see
//! `Schema::list_kind`); for custom resources (`builtin: false`) only the metadata
//! lists are granular, as for CRD lists without `x-kubernetes-list-type`.
//!
//! # Known simplifications (versus structured-merge-diff)
//!
//! * No OpenAPI schema: list types come from the field-name table above; maps are never
//!   atomic. No version conversion: `apiVersion` is only recorded.
//! * Empty maps and empty granular lists are owned as leaves (upstream owns nothing for
//!   them), so `emptyDir: {}` can later be pruned by its applier.
//! * An explicit `null` in an applied config just leaves the field out of the applied
//!   set: it is removed only if the applier owned it before and nobody else owns it.
//!   `null` values are never owned.
//! * Owning a map, a granular list or a list element means owning its existence; a
//!   conflict on it arises only if the merge creates or deletes it.
//! * Maps and lists emptied by pruning are removed too (except the object root).
//! * Associative lists keep live order; newly applied elements are appended.
//! * Port lists are keyed by (`containerPort`|`port`, `protocol`) with `protocol`
//!   defaulting to `"TCP"`, mirroring upstream defaulting before the merge.
//! * A live associative list that lacks key fields or has duplicate keys is treated as
//!   atomic; an applied one is rejected as invalid.
//! * `Update` entries are keyed by manager + operation + subresource (upstream also keys
//!   them by apiVersion). Entries whose set becomes empty are dropped.
//! * Not handled here (caller's job): `resourceVersion` preconditions, URL/body namespace
//!   checks, clients overwriting `managedFields` through updates (ignored here),
//!   upgrading client-side-apply annotations, and the status reset a strategy performs.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde_json::{Map, Value};

/// Who is writing and how; shared by [`apply`] and [`record_update`].
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions<'a> {
    pub manager: &'a str,
    /// Take ownership of conflicting fields instead of failing (`?force=true`).
    pub force: bool,
    /// The write went to the `/status` subresource.
    pub subresource_status: bool,
    /// A built-in kind: use the built-in associative-list table.
    pub builtin: bool,
    pub api_version: &'a str,
    /// RFC 3339 timestamp recorded as the entry's `time`.
    pub now: &'a str,
}

/// One field whose value an apply would change although another manager owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldConflict {
    pub manager: String,
    /// Set only for `Update` owners: upstream names the version they wrote with.
    pub api_version: Option<String>,
    pub subresource: Option<String>,
    /// Upstream path notation, e.g. `.spec.containers[name="c"].image`.
    pub path: String,
}

impl FieldConflict {
    /// The per-cause message upstream puts in `status.details.causes[].message`
    /// (the cause's `field` is [`FieldConflict::path`]).
    pub fn message(&self) -> String {
        format!("conflict with {}", self.owner())
    }

    fn owner(&self) -> String {
        let mut owner = quote(&self.manager);
        if let Some(sub) = &self.subresource {
            owner.push_str(&format!(" with subresource {}", quote(sub)));
        }
        if let Some(version) = &self.api_version {
            owner.push_str(&format!(" using {version}"));
        }
        owner
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// 409 Conflict.
    #[error("{}", conflict_message(.0))]
    Conflict(Vec<FieldConflict>),
    /// 400/422: the applied configuration is malformed.
    #[error("{0}")]
    Invalid(String),
    /// 404: an apply to `/status` of an object that does not exist.
    #[error("the object does not exist, so its status cannot be applied")]
    NotFound,
}

/// Same wording as upstream's `getConflictMessage`, so clients matching on it work.
fn conflict_message(conflicts: &[FieldConflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: {}: {}",
            only.message(),
            only.path
        );
    }
    let mut by_owner: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for conflict in conflicts {
        by_owner
            .entry(conflict.owner())
            .or_default()
            .push(&conflict.path);
    }
    let mut lines = Vec::new();
    for (owner, paths) in by_owner {
        lines.push(format!("conflicts with {owner}:"));
        lines.extend(paths.iter().map(|p| format!("- {p}")));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Server-side apply of `applied` onto `live` (`None`: the object does not exist yet and
/// the result is the object to create). Returns the new full object with
/// `metadata.managedFields` updated.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    opts: &ApplyOptions,
) -> Result<Value, ApplyError> {
    let schema = Schema::new(opts);
    validate(live, applied, schema)?;
    let applied_set = field_set(schema, applied, true).map_err(ApplyError::Invalid)?;
    let mut entries = live.map(read_entries).unwrap_or_default();
    let mut merged = merge(schema, live, applied, &mut Vec::new());

    let me = ManagerId {
        manager: opts.manager,
        operation: Operation::Apply,
        subresource: schema.subresource(),
    };
    let mut conflicts = Vec::new();
    for entry in entries.iter_mut().filter(|e| !e.is(&me)) {
        let clashing: Vec<Path> = entry
            .set
            .iter()
            .filter(|p| changed(schema, live, &merged, p))
            .cloned()
            .collect();
        if opts.force {
            for path in &clashing {
                entry.remove(path);
            }
        } else {
            conflicts.extend(clashing.iter().map(|p| entry.conflict(p)));
        }
    }
    if !conflicts.is_empty() {
        return Err(ApplyError::Conflict(conflicts));
    }

    let previous = entries
        .iter()
        .find(|e| e.is(&me))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut protected: FieldSet = entries
        .iter()
        .filter(|e| !e.is(&me))
        .flat_map(|e| e.set.iter().cloned())
        .collect();
    protected.extend(applied_set.iter().cloned());
    for path in previous.difference(&applied_set) {
        if protected.contains(path) || has_descendant(&protected, path) || is_key_field(path) {
            continue;
        }
        if remove_path(&mut merged, path) {
            prune_emptied_parents(&mut merged, path, &protected);
        }
    }

    // A no-op apply must not restamp its entry, or every re-apply would look like a write.
    if live == Some(&merged) && previous == applied_set {
        return Ok(merged);
    }
    upsert(&mut entries, &me, opts, |set| *set = applied_set);
    write_entries(&mut merged, entries);
    Ok(merged)
}

/// Ownership bookkeeping for ordinary writes. `old` is the stored object (`None` for a
/// create) and `new` the object about to be stored; `new`'s `metadata.managedFields` is
/// replaced by `old`'s entries updated for this write.
pub fn record_update(old: Option<&Value>, new: &mut Value, opts: &ApplyOptions) {
    if !new.is_object() {
        return;
    }
    let schema = Schema::new(opts);
    // The lenient pass falls back to atomic lists instead of failing.
    let new_set = field_set(schema, new, false).unwrap_or_default();
    let written: Vec<Path> = new_set
        .into_iter()
        .filter(|p| changed(schema, old, new, p))
        .collect();
    let me = ManagerId {
        manager: opts.manager,
        operation: Operation::Update,
        subresource: schema.subresource(),
    };
    let mut entries = old.map(read_entries).unwrap_or_default();
    for entry in &mut entries {
        entry.retain(|p| !schema.in_scope(p) || lookup(new, p).is_some());
        if !entry.is(&me) {
            for path in &written {
                entry.remove(path);
            }
        }
    }
    // A no-op write leaves the writer's entry (and its timestamp) alone, so it stays a no-op.
    if !written.is_empty() {
        upsert(&mut entries, &me, opts, |set| set.extend(written));
    }
    write_entries(new, entries);
}

fn validate(live: Option<&Value>, applied: &Value, schema: Schema) -> Result<(), ApplyError> {
    let Some(obj) = applied.as_object() else {
        return Err(invalid("the applied configuration must be a JSON object"));
    };
    for field in ["apiVersion", "kind"] {
        if obj
            .get(field)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(invalid(format!("{field} must be set")));
        }
    }
    let metadata = match obj.get("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err(invalid("metadata must be an object")),
    };
    if metadata
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|mf| !mf.is_null() && mf.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(invalid("metadata.managedFields must be nil"));
    }
    let applied_name = metadata.and_then(|m| m.get("name")).and_then(Value::as_str);
    match live {
        None if schema.scope == Scope::Status => Err(ApplyError::NotFound),
        Some(live) => {
            let live_name = live.pointer("/metadata/name").and_then(Value::as_str);
            match (applied_name, live_name) {
                (Some(a), Some(l)) if a != l => Err(invalid(format!(
                    "the name of the object ({a}) does not match the name of the live object ({l})"
                ))),
                _ => Ok(()),
            }
        }
        None => Ok(()),
    }
}

fn invalid(msg: impl Into<String>) -> ApplyError {
    ApplyError::Invalid(msg.into())
}

// ---------------------------------------------------------------------------------
// Paths and field sets

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum PathElement {
    Field(String),
    /// Key fields of an associative-list element, sorted by name; values as compact JSON.
    Key(Vec<(String, String)>),
    /// A set-list element, as compact JSON.
    Value(String),
}

type Path = Vec<PathElement>;
type FieldSet = BTreeSet<Path>;

impl PathElement {
    /// The element's key in the FieldsV1 tree.
    fn fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(pairs) => {
                let body: Vec<String> = pairs
                    .iter()
                    .map(|(name, value)| format!("{}:{value}", quote(name)))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            PathElement::Value(json) => format!("v:{json}"),
        }
    }

    fn parse(key: &str) -> Option<Self> {
        if let Some(name) = key.strip_prefix("f:") {
            return Some(PathElement::Field(name.to_owned()));
        }
        if let Some(json) = key.strip_prefix("k:") {
            let map: Map<String, Value> = serde_json::from_str(json).ok()?;
            let mut pairs: Vec<(String, String)> = map
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect();
            pairs.sort();
            return Some(PathElement::Key(pairs));
        }
        if let Some(json) = key.strip_prefix("v:") {
            let value: Value = serde_json::from_str(json).ok()?;
            return Some(PathElement::Value(value.to_string()));
        }
        // "i:" (list index) elements are never produced for the lists modelled here.
        None
    }
}

/// Upstream `fieldpath.Path.String()` notation.
fn display_path(path: &[PathElement]) -> String {
    path.iter()
        .map(|el| match el {
            PathElement::Field(name) => format!(".{name}"),
            PathElement::Key(pairs) => {
                let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("[{}]", body.join(","))
            }
            PathElement::Value(json) => format!("[={json}]"),
        })
        .collect()
}

fn is_field(el: &PathElement, name: &str) -> bool {
    matches!(el, PathElement::Field(f) if f == name)
}

fn has_descendant(set: &FieldSet, path: &Path) -> bool {
    // Descendants sort directly after their ancestor.
    set.range::<Path, _>((Bound::Excluded(path), Bound::Unbounded))
        .next()
        .is_some_and(|q| q.starts_with(path))
}

/// Key fields of a surviving element cannot be removed without destroying its identity.
fn is_key_field(path: &[PathElement]) -> bool {
    match path {
        [.., PathElement::Key(pairs), PathElement::Field(name)] => {
            pairs.iter().any(|(k, _)| k == name)
        }
        _ => false,
    }
}

#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<String, Node>,
}

fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for el in path {
            node = node.children.entry(el.fields_v1_key()).or_default();
        }
        node.member = true;
    }
    node_to_json(&root)
}

fn node_to_json(node: &Node) -> Value {
    let mut map = Map::new();
    if node.member && !node.children.is_empty() {
        map.insert(".".to_owned(), Value::Object(Map::new()));
    }
    for (key, child) in &node.children {
        map.insert(key.clone(), node_to_json(child));
    }
    Value::Object(map)
}

fn parse_fields_v1(tree: &Value, path: &mut Path, out: &mut FieldSet) {
    let Some(map) = tree.as_object() else { return };
    for (key, child) in map {
        if key == "." {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            continue;
        }
        let Some(el) = PathElement::parse(key) else {
            continue;
        };
        path.push(el);
        match child.as_object() {
            Some(c) if !c.is_empty() => parse_fields_v1(child, path, out),
            _ => {
                out.insert(path.clone());
            }
        }
        path.pop();
    }
}

// ---------------------------------------------------------------------------------
// Schema knowledge

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Main,
    Status,
}

#[derive(Debug, Clone, Copy)]
struct Schema {
    builtin: bool,
    scope: Scope,
}

enum FieldClass {
    Tracked,
    /// apiVersion, kind, name, namespace: taken from the applied config only on create.
    Identity,
    /// Server-owned or out of scope for this write.
    Ignored,
}

enum ListKind {
    Atomic,
    Set,
    /// Associative; key field names sorted alphabetically.
    Map(&'static [&'static str]),
}

const UNTRACKED_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

const NAME_KEYED_LISTS: &[&str] = &[
    "containers",
    "initContainers",
    "ephemeralContainers",
    "env",
    "volumes",
    "imagePullSecrets",
    "resourceClaims",
];

impl Schema {
    fn new(opts: &ApplyOptions) -> Self {
        Schema {
            builtin: opts.builtin,
            scope: if opts.subresource_status {
                Scope::Status
            } else {
                Scope::Main
            },
        }
    }

    fn subresource(self) -> Option<&'static str> {
        (self.scope == Scope::Status).then_some("status")
    }

    fn in_scope(self, path: &[PathElement]) -> bool {
        let under_status = path.first().is_some_and(|el| is_field(el, "status"));
        under_status == (self.scope == Scope::Status)
    }

    fn classify(self, parent: &[PathElement], key: &str) -> FieldClass {
        match parent {
            [] => match key {
                "apiVersion" | "kind" => FieldClass::Identity,
                _ if self.in_scope(&[PathElement::Field(key.to_owned())]) => FieldClass::Tracked,
                _ => FieldClass::Ignored,
            },
            [m] if is_field(m, "metadata") => match key {
                "name" | "namespace" => FieldClass::Identity,
                _ if UNTRACKED_METADATA.contains(&key) => FieldClass::Ignored,
                _ => FieldClass::Tracked,
            },
            _ => FieldClass::Tracked,
        }
    }

    /// List semantics of the list at `path`.
    fn list_kind(self, path: &[PathElement]) -> ListKind {
        match path {
            [m, l] if is_field(m, "metadata") && is_field(l, "ownerReferences") => {
                ListKind::Map(&["uid"])
            }
            [m, l] if is_field(m, "metadata") && is_field(l, "finalizers") => ListKind::Set,
            _ if !self.builtin => ListKind::Atomic,
            // Service ports; other top-level-spec `ports` lists do not exist in built-ins.
            [s, p] if is_field(s, "spec") && is_field(p, "ports") => {
                ListKind::Map(&["port", "protocol"])
            }
            [s, a] if is_field(s, "status") && is_field(a, "addresses") => ListKind::Map(&["type"]),
            [.., PathElement::Field(list), PathElement::Key(_), p]
                if is_field(p, "ports") && CONTAINER_LISTS.contains(&list.as_str()) =>
            {
                ListKind::Map(&["containerPort", "protocol"])
            }
            [.., PathElement::Field(name)] if NAME_KEYED_LISTS.contains(&name.as_str()) => {
                ListKind::Map(&["name"])
            }
            [.., last] if is_field(last, "volumeMounts") => ListKind::Map(&["mountPath"]),
            [.., last] if is_field(last, "conditions") => ListKind::Map(&["type"]),
            _ => ListKind::Atomic,
        }
    }
}

/// Value of one key field as compact JSON; `protocol` defaults to TCP like upstream.
fn key_field(obj: &Map<String, Value>, name: &str) -> Option<String> {
    match obj.get(name) {
        Some(v) if !v.is_null() => Some(v.to_string()),
        _ if name == "protocol" => Some(quote("TCP")),
        _ => None,
    }
}

fn element_key(element: &Value, keys: &[&str]) -> Option<Vec<(String, String)>> {
    let obj = element.as_object()?;
    keys.iter()
        .map(|k| key_field(obj, k).map(|v| ((*k).to_owned(), v)))
        .collect()
}

fn key_matches(element: &Value, pairs: &[(String, String)]) -> bool {
    element.as_object().is_some_and(|obj| {
        pairs
            .iter()
            .all(|(k, v)| key_field(obj, k).as_ref() == Some(v))
    })
}

/// The field set of `value` within the schema's scope. `strict` rejects malformed
/// granular lists (applied configs); otherwise they count as atomic (stored objects).
fn field_set(schema: Schema, value: &Value, strict: bool) -> Result<FieldSet, String> {
    let mut out = FieldSet::new();
    collect(schema, value, &mut Vec::new(), &mut out, strict)?;
    Ok(out)
}

fn collect(
    schema: Schema,
    value: &Value,
    path: &mut Path,
    out: &mut FieldSet,
    strict: bool,
) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            if map.is_empty() && !path.is_empty() {
                out.insert(path.clone());
            }
            for (key, child) in map {
                if child.is_null() || !matches!(schema.classify(path, key), FieldClass::Tracked) {
                    continue;
                }
                path.push(PathElement::Field(key.clone()));
                collect(schema, child, path, out, strict)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            let elements = match list_elements(schema.list_kind(path), items) {
                Ok(elements) => elements,
                Err(problem) if strict => {
                    return Err(format!("{}: {problem}", display_path(path)));
                }
                Err(_) => Vec::new(),
            };
            // Atomic lists, empty lists and (leniently) malformed lists are owned whole.
            if elements.is_empty() {
                out.insert(path.clone());
            }
            for (el, item) in elements {
                path.push(el);
                out.insert(path.clone());
                if let Some(item) = item {
                    collect(schema, item, path, out, strict)?;
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
    Ok(())
}

/// Path elements of a granular list's items (with the item to descend into for
/// associative lists); empty for atomic lists.
fn list_elements(
    kind: ListKind,
    items: &[Value],
) -> Result<Vec<(PathElement, Option<&Value>)>, String> {
    let mut seen = BTreeSet::new();
    let mut elements = Vec::new();
    match kind {
        ListKind::Atomic => {}
        ListKind::Set => {
            for item in items {
                if item.is_object() || item.is_array() {
                    return Err("set list elements must be scalars".to_owned());
                }
                let el = PathElement::Value(item.to_string());
                if !seen.insert(el.clone()) {
                    return Err(format!("duplicate entries for value {item}"));
                }
                elements.push((el, None));
            }
        }
        ListKind::Map(keys) => {
            for (i, item) in items.iter().enumerate() {
                let Some(key) = element_key(item, keys) else {
                    return Err(format!(
                        "element {i}: associative list with keys has an element that omits key field(s) {}",
                        keys.join(", ")
                    ));
                };
                let el = PathElement::Key(key);
                if !seen.insert(el.clone()) {
                    return Err(format!("duplicate entries for key {}", display_path(&[el])));
                }
                elements.push((el, Some(item)));
            }
        }
    }
    Ok(elements)
}

// ---------------------------------------------------------------------------------
// Object access

fn child<'a>(value: &'a Value, el: &PathElement) -> Option<&'a Value> {
    match el {
        PathElement::Field(name) => value.as_object()?.get(name).filter(|v| !v.is_null()),
        PathElement::Key(pairs) => value.as_array()?.iter().find(|e| key_matches(e, pairs)),
        PathElement::Value(json) => value.as_array()?.iter().find(|e| encodes_as(e, json)),
    }
}

fn child_mut<'a>(value: &'a mut Value, el: &PathElement) -> Option<&'a mut Value> {
    match el {
        PathElement::Field(name) => value.as_object_mut()?.get_mut(name),
        PathElement::Key(pairs) => value
            .as_array_mut()?
            .iter_mut()
            .find(|e| key_matches(e, pairs)),
        PathElement::Value(json) => value
            .as_array_mut()?
            .iter_mut()
            .find(|e| encodes_as(e, json)),
    }
}

fn encodes_as(element: &Value, json: &str) -> bool {
    serde_json::to_string(element).is_ok_and(|s| s == json)
}

fn lookup<'a>(root: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    path.iter().try_fold(root, child)
}

/// Removes the value at `path`; true if something was removed.
fn remove_path(root: &mut Value, path: &[PathElement]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let Some(parent) = parent_path.iter().try_fold(root, |v, el| child_mut(v, el)) else {
        return false;
    };
    match last {
        PathElement::Field(name) => parent
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some()),
        PathElement::Key(pairs) => remove_first(parent, |e| key_matches(e, pairs)),
        PathElement::Value(json) => remove_first(parent, |e| encodes_as(e, json)),
    }
}

fn remove_first(list: &mut Value, matches: impl Fn(&Value) -> bool) -> bool {
    let Some(items) = list.as_array_mut() else {
        return false;
    };
    match items.iter().position(matches) {
        Some(i) => {
            items.remove(i);
            true
        }
        None => false,
    }
}

/// After pruning `path`, drop the maps and lists it left empty, unless someone owns them.
fn prune_emptied_parents(root: &mut Value, path: &[PathElement], protected: &FieldSet) {
    for end in (1..path.len()).rev() {
        let ancestor = &path[..end];
        let emptied = lookup(root, ancestor).is_some_and(|v| match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        });
        // List elements are removed only through their own path (their key fields stay).
        if !matches!(ancestor.last(), Some(PathElement::Field(_)))
            || protected.contains(ancestor)
            || !emptied
        {
            return;
        }
        remove_path(root, ancestor);
    }
}

/// Whether a write changed what owning `path` covers: the value for leaves, mere
/// existence for maps, granular lists and list elements.
fn changed(schema: Schema, before: Option<&Value>, after: &Value, path: &[PathElement]) -> bool {
    match (before.and_then(|b| lookup(b, path)), lookup(after, path)) {
        (None, None) => false,
        (Some(a), Some(b)) => {
            let granular_list =
                a.is_array() && b.is_array() && !matches!(schema.list_kind(path), ListKind::Atomic);
            !(a.is_object() && b.is_object() || granular_list) && a != b
        }
        _ => true,
    }
}

// ---------------------------------------------------------------------------------
// Merge

fn merge(schema: Schema, live: Option<&Value>, applied: &Value, path: &mut Path) -> Value {
    match applied {
        Value::Object(fields) => {
            let mut out = match live {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            for (key, value) in fields {
                match schema.classify(path, key) {
                    FieldClass::Ignored => {}
                    FieldClass::Identity => {
                        out.entry(key.clone()).or_insert_with(|| value.clone());
                    }
                    // Explicit null only leaves the field out of the applied set.
                    FieldClass::Tracked if value.is_null() => {}
                    FieldClass::Tracked => {
                        path.push(PathElement::Field(key.clone()));
                        let merged = merge(schema, out.get(key), value, path);
                        path.pop();
                        out.insert(key.clone(), merged);
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let live_items = live
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            match schema.list_kind(path) {
                ListKind::Atomic => applied.clone(),
                ListKind::Set => {
                    let mut out = live_items.to_vec();
                    for item in items {
                        if !out.contains(item) {
                            out.push(item.clone());
                        }
                    }
                    Value::Array(out)
                }
                ListKind::Map(keys) => merge_associative(schema, live_items, items, keys, path),
            }
        }
        _ => applied.clone(),
    }
}

fn merge_associative(
    schema: Schema,
    live_items: &[Value],
    applied_items: &[Value],
    keys: &[&str],
    path: &mut Path,
) -> Value {
    let live_keys: Option<Vec<_>> = live_items.iter().map(|e| element_key(e, keys)).collect();
    // A live list without usable keys cannot be merged into: replace it as if atomic.
    let (mut out, live_keys) = match live_keys {
        Some(k) => (live_items.to_vec(), k),
        None => (Vec::new(), Vec::new()),
    };
    for item in applied_items {
        let Some(key) = element_key(item, keys) else {
            // Rejected earlier by the strict field-set pass; keep the data regardless.
            out.push(item.clone());
            continue;
        };
        let position = live_keys.iter().position(|k| *k == key);
        path.push(PathElement::Key(key));
        match position {
            Some(i) => out[i] = merge(schema, Some(&live_items[i]), item, path),
            None => out.push(merge(schema, None, item, path)),
        }
        path.pop();
    }
    Value::Array(out)
}

// ---------------------------------------------------------------------------------
// managedFields entries

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

struct ManagerId<'a> {
    manager: &'a str,
    operation: Operation,
    subresource: Option<&'a str>,
}

struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
    /// The entry as stored, while nothing of it has changed since: written
    /// back as it is, not rebuilt (every stored entry came from
    /// `write_entries`, so it is already in the form a rebuild gives; the
    /// rebuilds of unchanged entries were about 3 % of the simulator's CPU
    /// in a backlog drain).
    as_stored: Option<Value>,
}

impl Entry {
    fn is(&self, id: &ManagerId) -> bool {
        self.manager == id.manager
            && self.operation == id.operation
            && self.subresource.as_deref() == id.subresource
    }

    fn remove(&mut self, path: &[PathElement]) {
        if self.set.remove(path) {
            self.as_stored = None;
        }
    }

    fn retain(&mut self, keep: impl FnMut(&Path) -> bool) {
        let before = self.set.len();
        self.set.retain(keep);
        if self.set.len() != before {
            self.as_stored = None;
        }
    }

    fn conflict(&self, path: &[PathElement]) -> FieldConflict {
        FieldConflict {
            manager: self.manager.clone(),
            api_version: (self.operation == Operation::Update).then(|| self.api_version.clone()),
            subresource: self.subresource.clone(),
            path: display_path(path),
        }
    }

    fn parse(raw: &Value) -> Option<Entry> {
        let obj = raw.as_object()?;
        let text = |key: &str| {
            obj.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut set = FieldSet::new();
        if let Some(tree) = obj.get("fieldsV1") {
            parse_fields_v1(tree, &mut Vec::new(), &mut set);
        }
        Some(Entry {
            manager: text("manager"),
            operation: if text("operation") == "Apply" {
                Operation::Apply
            } else {
                Operation::Update
            },
            api_version: text("apiVersion"),
            time: text("time"),
            subresource: Some(text("subresource")).filter(|s| !s.is_empty()),
            set,
            as_stored: Some(raw.clone()),
        })
    }

    fn into_json(self) -> Value {
        if let Some(stored) = self.as_stored {
            return stored;
        }
        let mut obj = Map::new();
        obj.insert("manager".into(), self.manager.clone().into());
        obj.insert("operation".into(), self.operation.as_str().into());
        obj.insert("apiVersion".into(), self.api_version.clone().into());
        obj.insert("time".into(), self.time.clone().into());
        obj.insert("fieldsType".into(), "FieldsV1".into());
        obj.insert("fieldsV1".into(), to_fields_v1(&self.set));
        if let Some(sub) = &self.subresource {
            obj.insert("subresource".into(), sub.clone().into());
        }
        Value::Object(obj)
    }
}

fn read_entries(object: &Value) -> Vec<Entry> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|raw| raw.iter().filter_map(Entry::parse).collect())
        .unwrap_or_default()
}

/// Finds or appends the writer's entry, stamps it and lets `update` change its set.
fn upsert(
    entries: &mut Vec<Entry>,
    id: &ManagerId,
    opts: &ApplyOptions,
    update: impl FnOnce(&mut FieldSet),
) {
    let index = match entries.iter().position(|e| e.is(id)) {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: id.manager.to_owned(),
                operation: id.operation,
                api_version: String::new(),
                time: String::new(),
                subresource: id.subresource.map(str::to_owned),
                set: FieldSet::new(),
                as_stored: None,
            });
            entries.len() - 1
        }
    };
    let entry = &mut entries[index];
    entry.as_stored = None;
    entry.api_version = opts.api_version.to_owned();
    entry.time = opts.now.to_owned();
    update(&mut entry.set);
}

fn write_entries(object: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.into_iter().map(Entry::into_json).collect()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(manager: &str) -> ApplyOptions<'_> {
        ApplyOptions {
            manager,
            force: false,
            subresource_status: false,
            builtin: true,
            api_version: "apps/v1",
            now: "2024-01-01T00:00:00Z",
        }
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "replicas": replicas,
                "template": {"spec": {"containers": [
                    {"name": "web", "image": image, "ports": [{"containerPort": 80}]}
                ]}}
            }
        })
    }

    fn entries(obj: &Value) -> Vec<Value> {
        obj.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// fieldsV1 of the entry for `manager`/`operation`, or None if it has none.
    fn fields_of(obj: &Value, manager: &str, operation: &str) -> Option<Value> {
        entries(obj)
            .into_iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
            .map(|e| e["fieldsV1"].clone())
    }

    fn owns(obj: &Value, manager: &str, operation: &str, pointer: &str) -> bool {
        fields_of(obj, manager, operation).is_some_and(|f| f.pointer(pointer).is_some())
    }

    /// The conflicts of a failed apply and the error's Display text.
    fn conflicts(result: Result<Value, ApplyError>) -> (Vec<FieldConflict>, String) {
        match result {
            Err(ApplyError::Conflict(list)) => {
                let message = ApplyError::Conflict(list.clone()).to_string();
                (list, message)
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn apply_to_absent_object_creates_it_with_one_apply_entry() {
        let mut applied = deployment(3, "nginx:1");
        applied["status"] = json!({"replicas": 3});
        let created = apply(None, &applied, &opts("kubectl")).expect("apply");

        let entries = entries(&created);
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0],
            json!({
                "manager": "kubectl",
                "operation": "Apply",
                "apiVersion": "apps/v1",
                "time": "2024-01-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:template": {"f:spec": {"f:containers": {
                            "k:{\"name\":\"web\"}": {
                                ".": {},
                                "f:name": {},
                                "f:image": {},
                                "f:ports": {
                                    "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                        ".": {},
                                        "f:containerPort": {}
                                    }
                                }
                            }
                        }}}
                    }
                }
            })
        );
        // Status on the main resource is neither stored nor owned.
        let mut expected = deployment(3, "nginx:1");
        expected["metadata"]["managedFields"] = Value::Array(entries);
        assert_eq!(created, expected);
    }

    #[test]
    fn reapply_by_same_manager_changes_value_and_timestamp() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let later = ApplyOptions {
            now: "2024-01-02T00:00:00Z",
            ..opts("kubectl")
        };
        let updated = apply(Some(&live), &deployment(5, "nginx:2"), &later).expect("apply");
        assert_eq!(updated["spec"]["replicas"], 5);
        assert_eq!(
            updated["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:2"
        );
        let entries = entries(&updated);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["time"], "2024-01-02T00:00:00Z");
        assert_eq!(
            fields_of(&updated, "kubectl", "Apply"),
            fields_of(&live, "kubectl", "Apply")
        );
    }

    #[test]
    fn no_op_reapply_returns_the_live_object_unchanged() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let later = ApplyOptions {
            now: "2024-01-02T00:00:00Z",
            ..opts("kubectl")
        };
        let again = apply(Some(&live), &deployment(3, "nginx:1"), &later).expect("apply");
        assert_eq!(again, live);
    }

    #[test]
    fn omitted_field_owned_only_by_applier_is_removed() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let mut applied = deployment(3, "nginx:1");
        let spec = applied["spec"].as_object_mut().expect("spec");
        spec.remove("replicas");
        applied["metadata"]
            .as_object_mut()
            .expect("meta")
            .remove("labels");

        let updated = apply(Some(&live), &applied, &opts("kubectl")).expect("apply");
        assert!(updated["spec"].get("replicas").is_none());
        // The labels map emptied by pruning goes too; identity fields stay.
        assert!(updated["metadata"].get("labels").is_none());
        assert_eq!(updated["metadata"]["name"], "web");
        assert!(!owns(&updated, "kubectl", "Apply", "/f:spec/f:replicas"));
        assert!(owns(&updated, "kubectl", "Apply", "/f:spec/f:template"));
    }

    #[test]
    fn omitted_field_co_owned_by_another_manager_is_kept() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("a")).expect("create");
        let shared = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 3}
        });
        // Same value: shared ownership, no conflict.
        let live = apply(Some(&live), &shared, &opts("b")).expect("shared apply");
        assert!(owns(&live, "a", "Apply", "/f:spec/f:replicas"));
        assert!(owns(&live, "b", "Apply", "/f:spec/f:replicas"));

        let mut without = deployment(3, "nginx:1");
        without["spec"]
            .as_object_mut()
            .expect("spec")
            .remove("replicas");
        let updated = apply(Some(&live), &without, &opts("a")).expect("apply");
        assert_eq!(updated["spec"]["replicas"], 3);
        assert!(!owns(&updated, "a", "Apply", "/f:spec/f:replicas"));
        assert!(owns(&updated, "b", "Apply", "/f:spec/f:replicas"));
    }

    #[test]
    fn changing_a_field_owned_by_another_manager_conflicts_unless_forced() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("a")).expect("create");
        let scale = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"}, "spec": {"replicas": 7}
        });
        let (list, message) = conflicts(apply(Some(&live), &scale, &opts("b")));
        assert_eq!(
            list,
            vec![FieldConflict {
                manager: "a".into(),
                api_version: None,
                subresource: None,
                path: ".spec.replicas".into(),
            }]
        );
        assert_eq!(
            message,
            r#"Apply failed with 1 conflict: conflict with "a": .spec.replicas"#
        );

        let forced = ApplyOptions {
            force: true,
            ..opts("b")
        };
        let updated = apply(Some(&live), &scale, &forced).expect("forced apply");
        assert_eq!(updated["spec"]["replicas"], 7);
        assert!(!owns(&updated, "a", "Apply", "/f:spec/f:replicas"));
        assert!(owns(&updated, "a", "Apply", "/f:metadata/f:labels/f:app"));
        assert_eq!(
            fields_of(&updated, "b", "Apply"),
            Some(json!({"f:spec": {"f:replicas": {}}}))
        );
        // The former owner can no longer change it without conflicting.
        let (list, _) = conflicts(apply(Some(&updated), &deployment(3, "nginx:1"), &opts("a")));
        assert_eq!(list[0].manager, "b");
    }

    #[test]
    fn several_conflicts_are_grouped_by_owner_like_upstream() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("a")).expect("create");
        let (list, message) = conflicts(apply(Some(&live), &deployment(4, "nginx:2"), &opts("b")));
        assert_eq!(list.len(), 2);
        assert_eq!(
            message,
            "Apply failed with 2 conflicts: conflicts with \"a\":\n\
             - .spec.replicas\n\
             - .spec.template.spec.containers[name=\"web\"].image"
        );
    }

    #[test]
    fn containers_are_merged_by_name_across_managers() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("a")).expect("create");
        let sidecar = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}}}
        });
        let both = apply(Some(&live), &sidecar, &opts("b")).expect("sidecar");
        let names = |obj: &Value| -> Vec<String> {
            obj["spec"]["template"]["spec"]["containers"]
                .as_array()
                .expect("containers")
                .iter()
                .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        };
        assert_eq!(names(&both), ["web", "proxy"]);
        let containers = "/f:spec/f:template/f:spec/f:containers";
        assert!(owns(
            &both,
            "a",
            "Apply",
            &format!("{containers}/k:{{\"name\":\"web\"}}")
        ));
        assert!(!owns(
            &both,
            "a",
            "Apply",
            &format!("{containers}/k:{{\"name\":\"proxy\"}}")
        ));
        assert!(owns(
            &both,
            "b",
            "Apply",
            &format!("{containers}/k:{{\"name\":\"proxy\"}}")
        ));

        // Re-applying a's config leaves b's container alone.
        let again = apply(Some(&both), &deployment(3, "nginx:1"), &opts("a")).expect("reapply");
        assert_eq!(names(&again), ["web", "proxy"]);

        // Dropping its own container removes exactly that one.
        let mut no_web = deployment(3, "nginx:1");
        no_web["spec"]["template"]["spec"]["containers"] = json!([]);
        let dropped = apply(Some(&again), &no_web, &opts("a")).expect("drop");
        assert_eq!(names(&dropped), ["proxy"]);
    }

    #[test]
    fn pruning_keeps_a_container_whose_field_another_manager_owns() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("a")).expect("create");
        let mut patched = live.clone();
        patched["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:9");
        record_update(Some(&live), &mut patched, &opts("controller"));

        let mut no_web = deployment(3, "nginx:1");
        no_web["spec"]["template"]["spec"]["containers"] = json!([]);
        let updated = apply(Some(&patched), &no_web, &opts("a")).expect("apply");
        // Only the controller's field and the element's key survive.
        assert_eq!(
            updated["spec"]["template"]["spec"]["containers"],
            json!([{"name": "web", "image": "nginx:9"}])
        );
    }

    #[test]
    fn status_apply_touches_only_status_and_records_subresource() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let status_opts = ApplyOptions {
            subresource_status: true,
            ..opts("controller")
        };
        let applied = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"x": "y"}},
            "spec": {"replicas": 100},
            "status": {"readyReplicas": 3, "conditions": [{"type": "Available", "status": "True"}]}
        });
        let updated = apply(Some(&live), &applied, &status_opts).expect("status apply");
        assert_eq!(updated["spec"], live["spec"]);
        assert_eq!(updated["metadata"]["labels"], json!({"app": "web"}));
        assert_eq!(updated["status"], applied["status"]);

        let entry = entries(&updated)
            .into_iter()
            .find(|e| e["manager"] == "controller")
            .expect("status entry");
        assert_eq!(entry["subresource"], "status");
        assert_eq!(entry["operation"], "Apply");
        assert_eq!(
            entry["fieldsV1"],
            json!({"f:status": {
                "f:readyReplicas": {},
                "f:conditions": {"k:{\"type\":\"Available\"}": {".": {}, "f:type": {}, "f:status": {}}}
            }})
        );
        // The main-resource entry carries no subresource.
        assert!(
            entries(&updated)
                .iter()
                .any(|e| e["manager"] == "kubectl" && e.get("subresource").is_none())
        );

        // A status conflict names the subresource.
        let other = ApplyOptions {
            subresource_status: true,
            ..opts("other")
        };
        let change = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "status": {"readyReplicas": 1}
        });
        let (_, message) = conflicts(apply(Some(&updated), &change, &other));
        assert_eq!(
            message,
            r#"Apply failed with 1 conflict: conflict with "controller" with subresource "status": .status.readyReplicas"#
        );
    }

    #[test]
    fn status_apply_to_absent_object_is_not_found() {
        let status_opts = ApplyOptions {
            subresource_status: true,
            ..opts("controller")
        };
        assert!(matches!(
            apply(None, &deployment(1, "x"), &status_opts),
            Err(ApplyError::NotFound)
        ));
    }

    #[test]
    fn apply_conflicts_with_fields_set_by_an_earlier_update() {
        let mut created = deployment(3, "nginx:1");
        created["metadata"]["uid"] = json!("u-1");
        created["metadata"]["resourceVersion"] = json!("1");
        record_update(None, &mut created, &opts("kubectl-client-side-apply"));
        let fields = fields_of(&created, "kubectl-client-side-apply", "Update").expect("entry");
        assert!(fields.pointer("/f:spec/f:replicas").is_some());
        assert!(fields.pointer("/f:metadata/f:uid").is_none());
        assert!(fields.pointer("/f:metadata/f:name").is_none());

        let (list, message) = conflicts(apply(
            Some(&created),
            &deployment(5, "nginx:1"),
            &opts("kubectl"),
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(
            message,
            r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
        );
        // Applying the same values shares them instead.
        let shared =
            apply(Some(&created), &deployment(3, "nginx:1"), &opts("kubectl")).expect("apply");
        assert!(owns(
            &shared,
            "kubectl-client-side-apply",
            "Update",
            "/f:spec/f:replicas"
        ));
        assert!(owns(&shared, "kubectl", "Apply", "/f:spec/f:replicas"));
    }

    #[test]
    fn record_update_moves_changed_fields_and_forgets_deleted_ones() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(6);
        scaled["metadata"]["labels"] = json!({});
        // Client-supplied managedFields are ignored.
        scaled["metadata"]["managedFields"] = json!([{"manager": "forged", "operation": "Update"}]);
        let later = ApplyOptions {
            now: "2024-01-03T00:00:00Z",
            ..opts("hpa")
        };
        record_update(Some(&live), &mut scaled, &later);

        let list = entries(&scaled);
        assert_eq!(list.len(), 2);
        assert!(list.iter().all(|e| e["manager"] != "forged"));
        assert_eq!(
            fields_of(&scaled, "hpa", "Update"),
            Some(json!({"f:spec": {"f:replicas": {}}}))
        );
        assert!(!owns(&scaled, "kubectl", "Apply", "/f:spec/f:replicas"));
        // Deleted from the object, so owned by nobody; the map still exists, so emptying
        // it is not a write to it.
        assert!(!owns(&scaled, "kubectl", "Apply", "/f:metadata/f:labels"));
        assert!(owns(&scaled, "kubectl", "Apply", "/f:spec/f:template"));

        // A no-op write adds nothing and keeps the timestamp.
        let mut same = scaled.clone();
        record_update(Some(&scaled), &mut same, &opts("hpa"));
        assert_eq!(same, scaled);
    }

    #[test]
    fn a_field_deleted_by_another_writer_leaves_its_owners_entry() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        assert!(owns(
            &live,
            "kubectl",
            "Apply",
            "/f:metadata/f:labels/f:app"
        ));
        let mut unlabelled = live.clone();
        unlabelled["metadata"]["labels"] = json!({});
        record_update(Some(&live), &mut unlabelled, &opts("cleaner"));
        // Emptying a map writes nothing, so only the owner's entry changes.
        assert_eq!(fields_of(&unlabelled, "cleaner", "Update"), None);
        assert!(!owns(
            &unlabelled,
            "kubectl",
            "Apply",
            "/f:metadata/f:labels/f:app"
        ));
        assert!(owns(&unlabelled, "kubectl", "Apply", "/f:spec/f:replicas"));
    }

    #[test]
    fn custom_resource_lists_are_atomic() {
        let cr = |workers: Value| {
            json!({
                "apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": {"workers": workers}
            })
        };
        let custom = |manager| ApplyOptions {
            builtin: false,
            api_version: "example.com/v1",
            ..opts(manager)
        };
        let live = apply(None, &cr(json!([{"name": "a"}])), &custom("a")).expect("create");
        assert_eq!(
            fields_of(&live, "a", "Apply"),
            Some(json!({"f:spec": {"f:workers": {}}}))
        );
        // Adding an element changes the whole list: conflict.
        let (list, _) = conflicts(apply(
            Some(&live),
            &cr(json!([{"name": "b"}])),
            &custom("b"),
        ));
        assert_eq!(list[0].path, ".spec.workers");

        let forced = ApplyOptions {
            force: true,
            ..custom("b")
        };
        let updated = apply(Some(&live), &cr(json!([{"name": "b"}])), &forced).expect("force");
        assert_eq!(updated["spec"]["workers"], json!([{"name": "b"}]));
        assert_eq!(fields_of(&updated, "a", "Apply"), None);

        // Even a built-in list name is atomic in a custom resource.
        let with_containers = json!({
            "apiVersion": "example.com/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"containers": [{"name": "c"}]}
        });
        let created = apply(None, &with_containers, &custom("a")).expect("create");
        assert_eq!(
            fields_of(&created, "a", "Apply"),
            Some(json!({"f:spec": {"f:containers": {}}}))
        );
    }

    #[test]
    fn metadata_lists_are_granular_for_custom_resources() {
        let cr = |finalizers: Value| {
            json!({
                "apiVersion": "example.com/v1", "kind": "Job",
                "metadata": {"name": "j", "finalizers": finalizers}
            })
        };
        let custom = |manager| ApplyOptions {
            builtin: false,
            ..opts(manager)
        };
        let live = apply(None, &cr(json!(["a/x"])), &custom("a")).expect("create");
        let both = apply(Some(&live), &cr(json!(["b/y"])), &custom("b")).expect("b");
        assert_eq!(both["metadata"]["finalizers"], json!(["a/x", "b/y"]));
        assert_eq!(
            fields_of(&both, "b", "Apply"),
            Some(json!({"f:metadata": {"f:finalizers": {"v:\"b/y\"": {}}}}))
        );
        let dropped = apply(Some(&both), &cr(json!([])), &custom("a")).expect("drop");
        assert_eq!(dropped["metadata"]["finalizers"], json!(["b/y"]));
    }

    #[test]
    fn explicit_null_removes_a_field_the_applier_owned() {
        let live = apply(None, &deployment(3, "nginx:1"), &opts("kubectl")).expect("create");
        let mut applied = deployment(3, "nginx:1");
        applied["spec"]["replicas"] = Value::Null;
        let updated = apply(Some(&live), &applied, &opts("kubectl")).expect("apply");
        assert!(updated["spec"].get("replicas").is_none());
    }

    #[test]
    fn service_ports_are_keyed_by_port_and_protocol() {
        let svc = json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns"},
            "spec": {"ports": [
                {"port": 53, "protocol": "UDP", "name": "dns"},
                {"port": 53, "name": "dns-tcp"}
            ]}
        });
        let created = apply(None, &svc, &opts("kubectl")).expect("create");
        let fields = fields_of(&created, "kubectl", "Apply").expect("entry");
        let ports = fields.pointer("/f:spec/f:ports").expect("ports");
        let keys: Vec<&String> = ports.as_object().expect("map").keys().collect();
        assert_eq!(
            keys,
            [
                r#"k:{"port":53,"protocol":"TCP"}"#,
                r#"k:{"port":53,"protocol":"UDP"}"#
            ]
        );
    }

    #[test]
    fn malformed_applied_configs_are_invalid() {
        let cases = [
            json!([1, 2]),
            json!({"kind": "Deployment", "metadata": {"name": "web"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "managedFields": [{"manager": "x"}]}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}}}),
        ];
        for applied in &cases {
            assert!(
                matches!(
                    apply(None, applied, &opts("k")),
                    Err(ApplyError::Invalid(_))
                ),
                "{applied} should be invalid"
            );
        }
        let live = apply(None, &deployment(1, "x"), &opts("k")).expect("create");
        let mut renamed = deployment(1, "x");
        renamed["metadata"]["name"] = json!("other");
        assert!(matches!(
            apply(Some(&live), &renamed, &opts("k")),
            Err(ApplyError::Invalid(_))
        ));
        let Err(ApplyError::Invalid(msg)) = apply(None, &cases[4], &opts("k")) else {
            panic!("expected invalid");
        };
        assert_eq!(
            msg,
            r#".spec.template.spec.containers: duplicate entries for key [name="a"]"#
        );
    }

    #[test]
    fn fields_v1_round_trips_upstream_trees() {
        let tree = json!({
            "f:metadata": {
                "f:finalizers": {".": {}, "v:\"x\"": {}},
                "f:ownerReferences": {"k:{\"uid\":\"1\"}": {".": {}, "f:uid": {}, "f:kind": {}}}
            },
            "f:spec": {"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}}}}
        });
        let mut set = FieldSet::new();
        parse_fields_v1(&tree, &mut Vec::new(), &mut set);
        assert_eq!(set.len(), 7);
        assert_eq!(to_fields_v1(&set), tree);
    }
}
