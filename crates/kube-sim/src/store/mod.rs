//! The in-memory object store of one simulated cluster: objects of every
//! served type, one resourceVersion counter, a bounded event history (the
//! compaction window) and a broadcast of every change for watches.
//!
//! All writes happen under one lock and are published to the broadcast in
//! resourceVersion order while the lock is held, so a watch that subscribes
//! under the same lock sees every later event exactly once. Objects are kept
//! serialized: reads and lists hand out the stored bytes without re-encoding.
//!
//! This file is storage and the write paths (create, update, delete with
//! finalizers and grace periods); what follows from a deletion under the same
//! lock lives beside it: [`gc`] (ownerReferences, propagation) and
//! [`namespace_termination`].

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::apply::{self, ApplyOptions};
use super::error::{ApiError, ApiResult, Target};
use super::event_apis;
use super::resources::{self, ResourceType, Storage, type_id};
use super::rules::{self, meta_str, metadata_mut};

mod gc;
mod namespace_termination;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// One stored object version with the facts selectors and indexes need.
#[derive(Debug)]
pub struct Stored {
    pub json: Bytes,
    pub rv: u64,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    /// Values of the type's field labels (`spec.nodeName`, `status.phase`, …).
    pub fields: Vec<(String, String)>,
    owners: Vec<String>,
    pub deleting: bool,
}

impl Stored {
    pub fn value(&self) -> Value {
        // The bytes were produced by serde_json from a Value no deeper than
        // http::MAX_DEPTH, so they parse back, past serde_json's usual 128.
        let mut reader = serde_json::Deserializer::from_slice(&self.json);
        reader.disable_recursion_limit();
        serde::Deserialize::deserialize(&mut reader).unwrap_or(Value::Null)
    }

    pub fn field(&self, label: &str) -> Option<String> {
        match label {
            "metadata.name" => Some(self.name.clone()),
            "metadata.namespace" => Some(self.namespace.clone()),
            _ => self
                .fields
                .iter()
                .find(|(k, _)| k == label)
                .map(|(_, v)| v.clone()),
        }
    }

    fn key(&self) -> Key {
        (self.namespace.clone(), self.name.clone())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// An object with the id of its type.
pub type TypedObject = (Arc<str>, Arc<Stored>);

/// One change, as published to watches and kept in the history.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub type_id: Arc<str>,
    pub kind: EventKind,
    /// The object after the change (for a deletion: its last state, at `rv`).
    pub object: Arc<Stored>,
    /// The object before the change; None for an addition.
    pub prev: Option<Arc<Stored>>,
}

/// Who writes and how; shared by every kind of write.
#[derive(Debug, Clone)]
pub struct WriteMeta {
    pub manager: String,
    pub now: String,
    pub dry_run: bool,
}

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The main resource: with a status subresource, status is kept.
    Main,
    /// The `/status` subresource: only status changes.
    Status,
    /// Everything, as the cluster's own components write (binding, kubelet).
    Whole,
}

/// The body of an update-style request.
pub enum Change<'a> {
    /// PUT: the whole object.
    Replace(Value),
    /// PATCH (merge, JSON, strategic): computes the new object from the current one.
    Patch(&'a dyn Fn(Value) -> ApiResult<Value>),
    /// Server-side apply.
    Apply { body: Value, force: bool },
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

pub enum Deletion {
    /// The object is gone; this was its last state.
    Gone(Arc<Stored>),
    /// Deletion started; finalizers or a grace period hold the object.
    Pending(Arc<Stored>),
}

pub struct ListQuery<'a> {
    pub filter: &'a dyn Fn(&Stored) -> bool,
    pub limit: Option<usize>,
    pub continue_token: Option<&'a str>,
    /// `resourceVersion` with `resourceVersionMatch=Exact` (or a limit, as upstream).
    pub exact_rv: Option<u64>,
}

pub struct ListPage {
    pub items: Vec<Arc<Stored>>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

pub enum WatchFrom {
    /// Synthetic ADDED events for the current objects, then changes.
    Current,
    /// Every change after this resourceVersion.
    After(u64),
}

/// Objects as stored: a watch serves them through its type ([`served`]).
pub struct WatchStart {
    pub initial: Vec<Arc<Stored>>,
    pub replay: Vec<Arc<Event>>,
    pub events: broadcast::Receiver<Arc<Event>>,
    pub rv: u64,
}

/// The store of one cluster.
pub struct Store {
    inner: Mutex<Inner>,
}

struct Inner {
    rv: u64,
    types: BTreeMap<String, Arc<ResourceType>>,
    tables: HashMap<String, BTreeMap<Key, Arc<Stored>>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Every event after this resourceVersion is still in `history`.
    oldest_rv: u64,
    by_uid: HashMap<String, (Arc<str>, Key)>,
    /// owner uid → dependents (type id, key).
    dependents: HashMap<String, HashSet<(Arc<str>, Key)>>,
    tx: broadcast::Sender<Arc<Event>>,
}

const CRD_TYPE: &str = "apiextensions.k8s.io/customresourcedefinitions";
const NAMESPACE_TYPE: &str = "/namespaces";
const SERVICE_ACCOUNT_TYPE: &str = "/serviceaccounts";

impl Store {
    /// A store serving the built-in types, with namespaces `default`,
    /// `kube-system`, `kube-public` and `kube-node-lease`.
    pub fn new(history_limit: usize) -> Store {
        let (tx, _) = broadcast::channel(65_536);
        let mut inner = Inner {
            rv: 0,
            types: BTreeMap::new(),
            tables: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            oldest_rv: 0,
            by_uid: HashMap::new(),
            dependents: HashMap::new(),
            tx,
        };
        for ty in resources::builtins() {
            inner.types.insert(ty.id(), Arc::new(ty));
        }
        let store = Store {
            inner: Mutex::new(inner),
        };
        let meta = WriteMeta {
            manager: "kube-apiserver".into(),
            now: now(),
            dry_run: false,
        };
        if let Some(ns_type) = store.resource_type("", "namespaces") {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                // Creating the initial namespaces in an empty store cannot fail.
                let _ = store.create(&ns_type, "", obj, &meta);
            }
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock means a panic mid-write; the data is still consistent
        // enough to serve, as every write is applied in one step.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn resource_types(&self) -> Vec<Arc<ResourceType>> {
        self.lock().types.values().cloned().collect()
    }

    pub fn resource_type(&self, group: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.lock().types.get(&type_id(group, plural)).cloned()
    }

    /// Forgets the event history: a watch or continue token from an older
    /// resourceVersion now gets 410 Expired.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.oldest_rv = inner.rv;
    }

    pub fn get(&self, ty: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Stored>> {
        let inner = self.lock();
        inner
            .object(&ty.storage_id(), &(ns.to_string(), name.to_string()))
            .map(|o| served(ty, o))
            .ok_or_else(|| ApiError::not_found(&target(ty, name)))
    }

    /// One page of a list; `ns` None lists across namespaces.
    pub fn list(&self, ty: &ResourceType, ns: Option<&str>, q: &ListQuery) -> ApiResult<ListPage> {
        let inner = self.lock();
        let (snapshot_rv, after) = match q.continue_token {
            Some(token) => {
                let (rv, key) = decode_continue(token)?;
                (Some(rv), Some(key))
            }
            None => (q.exact_rv, None),
        };
        let id = ty.storage_id();
        let overrides = match snapshot_rv {
            Some(rv) if rv < inner.rv => inner.changes_since(&id, rv).ok_or_else(|| {
                ApiError::expired(format!(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list. (requested {rv})"
                ))
            })?,
            _ => BTreeMap::new(),
        };
        let list_rv = snapshot_rv.unwrap_or(inner.rv);
        let empty = BTreeMap::new();
        let table = inner.tables.get(&id).unwrap_or(&empty);
        let start = match (&after, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let range = (start, std::ops::Bound::Unbounded);
        let mut current = table.range(range.clone()).peekable();
        let mut changed = overrides.range(range).peekable();
        let mut items = Vec::new();
        let mut more = 0usize;
        let mut last_key = None;
        loop {
            let next = match (current.peek(), changed.peek()) {
                (None, None) => break,
                (Some((k, _)), None) => {
                    let (k, v) = (*k, current.next().map(|(_, v)| Some(v.clone())));
                    (k.clone(), v.flatten())
                }
                (None, Some(_)) => {
                    let Some((k, v)) = changed.next() else { break };
                    (k.clone(), v.clone())
                }
                (Some((ck, _)), Some((ok, _))) => {
                    if ck < ok {
                        let Some((k, v)) = current.next() else { break };
                        (k.clone(), Some(v.clone()))
                    } else {
                        if ck == ok {
                            current.next();
                        }
                        let Some((k, v)) = changed.next() else { break };
                        (k.clone(), v.clone())
                    }
                }
            };
            let (key, obj) = next;
            if let Some(ns) = ns
                && key.0 != ns
            {
                break;
            }
            let Some(obj) = obj else { continue };
            if !(q.filter)(&obj) {
                continue;
            }
            match q.limit {
                Some(limit) if items.len() >= limit => more += 1,
                _ => {
                    last_key = Some(key);
                    items.push(served(ty, obj));
                }
            }
        }
        let continue_token = if more > 0 {
            last_key.map(|k| encode_continue(list_rv, &k))
        } else {
            None
        };
        Ok(ListPage {
            items,
            rv: list_rv,
            continue_token,
            remaining: (more > 0).then_some(more),
        })
    }

    pub fn create(
        &self,
        ty: &ResourceType,
        ns: &str,
        obj: Value,
        w: &WriteMeta,
    ) -> ApiResult<Arc<Stored>> {
        let mut inner = self.lock();
        inner.create(ty, ns, obj, w, true).map(|o| served(ty, o))
    }

    /// PUT, PATCH and apply on the object or its `/status`.
    pub fn update(
        &self,
        ty: &ResourceType,
        ns: &str,
        name: &str,
        scope: Scope,
        change: Change,
        w: &WriteMeta,
    ) -> ApiResult<Arc<Stored>> {
        let mut inner = self.lock();
        inner
            .update(ty, ns, name, scope, change, w)
            .map(|o| served(ty, o))
    }

    pub fn delete(
        &self,
        ty: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deletion> {
        let mut inner = self.lock();
        inner
            .delete(ty, &(ns.to_string(), name.to_string()), opts)
            .map(|deletion| match deletion {
                Deletion::Gone(o) => Deletion::Gone(served(ty, o)),
                Deletion::Pending(o) => Deletion::Pending(served(ty, o)),
            })
    }

    /// Deletes every object the filter selects; returns their states after the call.
    pub fn delete_collection(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        filter: &dyn Fn(&Stored) -> bool,
        opts: &DeleteOptions,
    ) -> ApiResult<Vec<Arc<Stored>>> {
        let mut inner = self.lock();
        let keys: Vec<Key> = inner
            .tables
            .get(&ty.storage_id())
            .into_iter()
            .flatten()
            .filter(|(k, o)| ns.is_none_or(|ns| k.0 == ns) && filter(o))
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for key in keys {
            match inner.delete(ty, &key, opts) {
                Ok(Deletion::Gone(o) | Deletion::Pending(o)) => out.push(served(ty, o)),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The current objects of the given types and a receiver of every later
    /// change, taken atomically (for the cluster's own components).
    pub fn subscribe(
        &self,
        type_ids: &[&str],
    ) -> (Vec<TypedObject>, broadcast::Receiver<Arc<Event>>) {
        let inner = self.lock();
        let objects = type_ids
            .iter()
            .flat_map(|id| {
                let id: Arc<str> = (*id).into();
                inner
                    .tables
                    .get(&*id)
                    .into_iter()
                    .flatten()
                    .map(move |(_, o)| (id.clone(), o.clone()))
            })
            .collect();
        (objects, inner.tx.subscribe())
    }

    pub fn watch(
        &self,
        ty: &ResourceType,
        ns: Option<&str>,
        from: WatchFrom,
    ) -> ApiResult<WatchStart> {
        let inner = self.lock();
        let id = ty.storage_id();
        let events = inner.tx.subscribe();
        let in_ns = |o: &Stored| ns.is_none_or(|ns| o.namespace == ns);
        match from {
            WatchFrom::Current => Ok(WatchStart {
                initial: inner
                    .tables
                    .get(&id)
                    .into_iter()
                    .flatten()
                    .map(|(_, o)| o)
                    .filter(|o| in_ns(o))
                    .cloned()
                    .collect(),
                replay: Vec::new(),
                events,
                rv: inner.rv,
            }),
            WatchFrom::After(rv) => {
                if rv < inner.oldest_rv {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        inner.oldest_rv
                    )));
                }
                let replay = inner
                    .history
                    .iter()
                    .filter(|e| e.rv > rv && *e.type_id == *id)
                    .cloned()
                    .collect();
                Ok(WatchStart {
                    initial: Vec::new(),
                    replay,
                    events,
                    rv: inner.rv,
                })
            }
        }
    }
}

pub fn target<'a>(ty: &'a ResourceType, name: &'a str) -> Target<'a> {
    Target {
        group: &ty.group,
        plural: &ty.plural,
        name,
    }
}

/// A stored object as `ty` serves it: the same object, unless `ty` is an
/// API that converts what the store keeps (`events.k8s.io/v1` Events).
pub fn served(ty: &ResourceType, stored: Arc<Stored>) -> Arc<Stored> {
    if !ty.serves_converted() {
        return stored;
    }
    let value = ty.served_form(stored.value());
    Arc::new(Stored {
        json: Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
        rv: stored.rv,
        namespace: stored.namespace.clone(),
        name: stored.name.clone(),
        uid: stored.uid.clone(),
        labels: stored.labels.clone(),
        fields: stored.fields.clone(),
        owners: stored.owners.clone(),
        deleting: stored.deleting,
    })
}

/// The current time as Kubernetes serializes `metav1.Time`.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn now_plus(seconds: i64) -> String {
    let ts = jiff::Timestamp::now();
    ts.checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(ts)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = json!({"rv": rv, "ns": key.0, "name": key.1}).to_string();
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> ApiResult<(u64, Key)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let v: Value = serde_json::from_slice(&bytes.ok_or_else(bad)?).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let ns = v.get("ns").and_then(Value::as_str).ok_or_else(bad)?;
    let name = v.get("name").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, (ns.to_string(), name.to_string())))
}

fn field_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn is_pod(ty: &ResourceType) -> bool {
    ty.group.is_empty() && ty.plural == "pods"
}

impl Inner {
    fn object(&self, id: &str, key: &Key) -> Option<Arc<Stored>> {
        self.tables.get(id)?.get(key).cloned()
    }

    /// For each object of `id` changed after `rv`, its state at `rv` (None if
    /// it did not exist then); None when the history no longer reaches `rv`.
    fn changes_since(&self, id: &str, rv: u64) -> Option<BTreeMap<Key, Option<Arc<Stored>>>> {
        if rv < self.oldest_rv {
            return None;
        }
        let mut states = BTreeMap::new();
        for event in self.history.iter().rev() {
            if event.rv <= rv {
                break;
            }
            if *event.type_id == *id {
                states.insert(event.object.key(), event.prev.clone());
            }
        }
        Some(states)
    }

    /// `track_update` records the creator as owner of every field; an applied
    /// create arrives with its Apply ownership already recorded.
    fn create(
        &mut self,
        ty: &ResourceType,
        ns: &str,
        mut obj: Value,
        w: &WriteMeta,
        track_update: bool,
    ) -> ApiResult<Arc<Stored>> {
        let version = check_type_meta(ty, &obj)?;
        let status_sub = ty.version(&version).is_some_and(|v| v.status_subresource);
        obj["apiVersion"] = json!(ty.api_version(&version));
        obj["kind"] = json!(ty.kind);
        let name = match (meta_str(&obj, "name"), meta_str(&obj, "generateName")) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(prefix)) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
            _ => String::new(),
        };
        let body_ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
        {
            let meta = metadata_mut(&mut obj);
            meta.insert("name".into(), json!(name));
            if ty.namespaced {
                meta.insert("namespace".into(), json!(ns));
            } else {
                meta.remove("namespace");
            }
        }
        if let Err(detail) = rules::validate_name(&name) {
            let (field, detail) = detail
                .split_once(": ")
                .unwrap_or(("metadata.name", &detail));
            return Err(ApiError::invalid(
                &target(ty, &name),
                &ty.kind,
                field,
                detail,
            ));
        }
        if ty.namespaced {
            if !body_ns.is_empty() && body_ns != ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            self.admit_to_namespace(ty, ns, &name)?;
        }
        let key = (
            if ty.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.clone(),
        );
        if is_pod(ty) {
            // Admission, before storage: the pod's ServiceAccount must exist.
            let account = rules::service_account_name(&obj);
            let Some(stored) =
                self.object(SERVICE_ACCOUNT_TYPE, &(ns.to_string(), account.clone()))
            else {
                return Err(ApiError::forbidden(format!(
                    "pods \"{name}\" is forbidden: error looking up service account {ns}/{account}: serviceaccount \"{account}\" not found"
                )));
            };
            rules::admit_pod(&mut obj, &stored.value());
            self.validate_and_admit_pod(ty, ns, &name, &mut obj)?;
        }
        if ty.id() == NAMESPACE_TYPE {
            check_pod_security_labels(ty, &name, &obj, None)?;
        }
        if self.object(&ty.storage_id(), &key).is_some() {
            return Err(ApiError::already_exists(&target(ty, &name)));
        }
        if ty.id() == CRD_TYPE {
            ResourceType::from_crd(&obj).map_err(|e| crd_invalid(ty, &name, &e))?;
        }
        check_schema(ty, &version, &name, &obj, None)?;
        rules::prepare_create(
            ty,
            &mut obj,
            uuid::Uuid::new_v4().to_string(),
            &w.now,
            self.rv + 1,
            status_sub,
        );
        rules::normalize_metadata(&mut obj);
        if ty.group.is_empty() && ty.plural == "secrets" {
            rules::fold_string_data(&mut obj);
        }
        if track_update {
            let api_version = ty.api_version(&version);
            apply::record_update(
                None,
                &mut obj,
                &apply_options(ty, &api_version, w, false, false),
            );
        }
        if w.dry_run {
            return Ok(Arc::new(self.to_stored(ty, obj, self.rv)));
        }
        Ok(self.put(ty, obj, None))
    }

    fn update(
        &mut self,
        ty: &ResourceType,
        ns: &str,
        name: &str,
        scope: Scope,
        change: Change,
        w: &WriteMeta,
    ) -> ApiResult<Arc<Stored>> {
        let to_status = scope == Scope::Status;
        let key = (
            if ty.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.to_string(),
        );
        let Some(cur) = self.object(&ty.storage_id(), &key) else {
            return match change {
                Change::Apply { body, force } if !to_status => {
                    let version = check_type_meta(ty, &body)?;
                    check_body_name(name, &body)?;
                    let api_version = ty.api_version(&version);
                    let opts = apply_options(ty, &api_version, w, force, false);
                    let created =
                        apply::apply(None, &body, &opts).map_err(|e| apply_error(ty, name, e))?;
                    self.create(ty, ns, created, w, false)
                }
                _ => Err(ApiError::not_found(&target(ty, name))),
            };
        };
        let old = ty.served_form(cur.value());
        let version = old
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.rsplit('/').next())
            .unwrap_or(ty.preferred_version())
            .to_string();
        let status_sub = ty.version(&version).is_some_and(|v| v.status_subresource);
        let rv_conflict = |v: &Value| -> ApiResult<()> {
            match meta_str(v, "resourceVersion") {
                Some(rv) if !rv.is_empty() && rv != cur.rv.to_string() => {
                    Err(ApiError::stale(&target(ty, name)))
                }
                _ => Ok(()),
            }
        };
        let api_version = ty.api_version(&version);
        let opts = apply_options(ty, &api_version, w, false, to_status);
        let is_apply = matches!(change, Change::Apply { .. });
        let new = match change {
            Change::Replace(body) => {
                check_type_meta(ty, &body)?;
                check_body_name(name, &body)?;
                if meta_str(&body, "resourceVersion")
                    .unwrap_or_default()
                    .is_empty()
                    && !ty.builtin
                {
                    return Err(ApiError::invalid(
                        &target(ty, name),
                        &ty.kind,
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    ));
                }
                rv_conflict(&body)?;
                body
            }
            Change::Patch(patch) => {
                let patched = patch(old.clone())?;
                rv_conflict(&patched)?;
                if meta_str(&patched, "name") != Some(name) {
                    return Err(ApiError::invalid(
                        &target(ty, name),
                        &ty.kind,
                        "metadata.name",
                        "Invalid value: the name of the object may not be changed by a patch",
                    ));
                }
                patched
            }
            Change::Apply { body, force } => {
                check_type_meta(ty, &body)?;
                check_body_name(name, &body)?;
                rv_conflict(&body)?;
                let opts = ApplyOptions { force, ..opts };
                apply::apply(Some(&old), &body, &opts).map_err(|e| apply_error(ty, name, e))?
            }
        };
        // In the shape storage gives it, so that a no-op write is seen as one.
        let new = ty.served_form(ty.stored_form(new));
        let mut new = rules::merge_update(&old, new, status_sub && scope == Scope::Main, to_status);
        rules::default_update(ty, &mut new);
        rules::normalize_metadata(&mut new);
        if ty.group.is_empty() && ty.plural == "secrets" {
            rules::fold_string_data(&mut new);
        }
        new["apiVersion"] = old.get("apiVersion").cloned().unwrap_or(Value::Null);
        new["kind"] = json!(ty.kind);
        if !is_apply {
            apply::record_update(Some(&old), &mut new, &opts);
        }
        let old_finalizers = rules::finalizers(&old);
        let new_finalizers = rules::finalizers(&new);
        if cur.deleting {
            let added: Vec<&String> = new_finalizers
                .iter()
                .filter(|f| !old_finalizers.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &target(ty, name),
                    &ty.kind,
                    "metadata.finalizers",
                    &format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                ));
            }
        }
        if ty.id() == CRD_TYPE {
            ResourceType::from_crd(&new).map_err(|e| crd_invalid(ty, name, &e))?;
        }
        check_schema(ty, &version, name, &new, Some(&old))?;
        if ty.id() == NAMESPACE_TYPE {
            check_pod_security_labels(ty, name, &new, Some(&old))?;
        }
        if rules::spec_changed(&old, &new, status_sub) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            metadata_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        if rules::same_object(&old, &new) {
            return Ok(cur);
        }
        if w.dry_run {
            return Ok(Arc::new(self.to_stored(ty, new, cur.rv)));
        }
        if cur.deleting && new_finalizers.is_empty() && !self.grace_pending(ty, &new) {
            return Ok(self.remove(ty, &key, Some(new)));
        }
        Ok(self.put(ty, new, Some(cur)))
    }

    /// A pod whose deletion grace period is still running is removed by its
    /// kubelet, not by the API server.
    fn grace_pending(&self, ty: &ResourceType, obj: &Value) -> bool {
        is_pod(ty)
            && obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > 0
    }

    fn delete(
        &mut self,
        ty: &ResourceType,
        key: &Key,
        opts: &DeleteOptions,
    ) -> ApiResult<Deletion> {
        let id = ty.storage_id();
        let Some(cur) = self.object(&id, key) else {
            return Err(ApiError::not_found(&target(ty, &key.1)));
        };
        if let Some(uid) = &opts.precondition_uid
            && *uid != cur.uid
        {
            return Err(ApiError::conflict(
                &target(ty, &key.1),
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    cur.uid
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && *rv != cur.rv.to_string()
        {
            return Err(ApiError::conflict(
                &target(ty, &key.1),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    cur.rv
                ),
            ));
        }
        let mut obj = ty.served_form(cur.value());
        let mut finalizers = rules::finalizers(&obj);
        let grace = if is_pod(ty) {
            pod_grace_seconds(&obj, opts.grace_period_seconds)
        } else {
            0
        };
        if opts.dry_run {
            return Ok(if finalizers.is_empty() && grace == 0 {
                Deletion::Gone(cur)
            } else {
                Deletion::Pending(cur)
            });
        }
        if cur.deleting {
            // A second delete may only shorten a pod's grace period.
            if is_pod(ty) && grace == 0 && finalizers.is_empty() {
                return Ok(Deletion::Gone(self.remove(ty, key, None)));
            }
            return Ok(Deletion::Pending(cur));
        }
        let propagation =
            self.start_propagation(opts.propagation.as_deref(), &cur.uid, &mut finalizers)?;
        let is_namespace = id == NAMESPACE_TYPE;
        if finalizers.is_empty() && grace == 0 && !is_namespace {
            return Ok(Deletion::Gone(self.remove(ty, key, None)));
        }
        {
            let meta = metadata_mut(&mut obj);
            meta.insert("deletionTimestamp".into(), json!(now_plus(grace)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            meta.insert("finalizers".into(), json!(finalizers));
            if finalizers.is_empty() {
                meta.remove("finalizers");
            }
            let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), json!(generation + 1));
        }
        if is_namespace {
            obj["status"] = json!({"phase": "Terminating"});
        }
        let pending = self.put(ty, obj, Some(cur.clone()));
        if is_namespace {
            self.empty_namespace(&key.1);
        }
        self.finish_propagation(propagation, &cur.uid);
        Ok(match self.object(&id, key) {
            Some(o) => Deletion::Pending(o),
            None => Deletion::Gone(pending),
        })
    }

    /// `obj`, written through `ty`, as the store keeps it at `rv`.
    fn to_stored(&self, ty: &ResourceType, obj: Value, rv: u64) -> Stored {
        let mut obj = ty.stored_form(obj);
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(rv.to_string()));
        let storage_type = self.types.get(&ty.storage_id());
        let storage_type = storage_type.map_or(ty, |t| t.as_ref());
        let fields = storage_type
            .field_labels
            .iter()
            .filter_map(|label| {
                let value = match (storage_type.storage, label.as_str()) {
                    (Storage::CoreEvents(_), "source") => event_apis::source(&obj),
                    _ => obj
                        .pointer(&format!("/{}", label.replace('.', "/")))
                        .and_then(field_text),
                };
                value.map(|v| (label.clone(), v))
            })
            .collect();
        let labels = rules::string_map(obj.pointer("/metadata/labels"));
        Stored {
            rv,
            namespace: meta_str(&obj, "namespace").unwrap_or_default().to_string(),
            name: meta_str(&obj, "name").unwrap_or_default().to_string(),
            uid: meta_str(&obj, "uid").unwrap_or_default().to_string(),
            labels,
            fields,
            owners: gc::owner_uids(&obj),
            deleting: obj.pointer("/metadata/deletionTimestamp").is_some(),
            json: Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()),
        }
    }

    fn publish(
        &mut self,
        id: Arc<str>,
        kind: EventKind,
        object: Arc<Stored>,
        prev: Option<Arc<Stored>>,
    ) {
        let event = Arc::new(Event {
            rv: object.rv,
            type_id: id,
            kind,
            object,
            prev,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.oldest_rv = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }

    /// Stores a new version of an object (`obj` as `ty` serves it, `prev` as
    /// stored) and publishes ADDED or MODIFIED.
    fn put(&mut self, ty: &ResourceType, obj: Value, prev: Option<Arc<Stored>>) -> Arc<Stored> {
        self.rv += 1;
        let stored = Arc::new(self.to_stored(ty, obj, self.rv));
        let id: Arc<str> = ty.storage_id().into();
        let key = stored.key();
        if let Some(p) = &prev {
            self.forget_dependent(&id, &key, p);
        }
        self.record_dependent(&id, &key, &stored);
        self.by_uid
            .insert(stored.uid.clone(), (id.clone(), key.clone()));
        self.tables
            .entry(id.to_string())
            .or_default()
            .insert(key, stored.clone());
        if &*id == CRD_TYPE
            && let Ok(defined) = ResourceType::from_crd(&stored.value())
        {
            self.types.insert(defined.id(), Arc::new(defined));
        }
        let kind = if prev.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.publish(id, kind, stored.clone(), prev);
        stored
    }

    /// Removes an object (in its state `last`, as `ty` serves it, or as
    /// stored), publishes DELETED, and lets garbage collection and
    /// namespace clean-up follow.
    fn remove(&mut self, ty: &ResourceType, key: &Key, last: Option<Value>) -> Arc<Stored> {
        let id: Arc<str> = ty.storage_id().into();
        let Some(prev) = self.tables.get_mut(&*id).and_then(|t| t.remove(key)) else {
            // Callers check existence under the same lock; keep going gracefully.
            return Arc::new(self.to_stored(ty, last.unwrap_or(Value::Null), self.rv));
        };
        self.rv += 1;
        let last = last.unwrap_or_else(|| ty.served_form(prev.value()));
        let stored = Arc::new(self.to_stored(ty, last, self.rv));
        self.by_uid.remove(&prev.uid);
        self.forget_dependent(&id, key, &prev);
        self.publish(
            id.clone(),
            EventKind::Deleted,
            stored.clone(),
            Some(prev.clone()),
        );
        if &*id == CRD_TYPE
            && let Ok(defined) = ResourceType::from_crd(&stored.value())
        {
            self.drop_type(&defined.id());
        }
        self.collect_after(&prev);
        if ty.namespaced {
            self.finish_namespace(&key.0);
        }
        stored
    }

    /// A deleted CRD takes its objects and its served type with it.
    fn drop_type(&mut self, id: &str) {
        let Some(ty) = self.types.get(id).cloned() else {
            return;
        };
        let keys: Vec<Key> = self
            .tables
            .get(id)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            self.remove(&ty, &key, None);
        }
        self.tables.remove(id);
        self.types.remove(id);
    }
}

fn pod_grace_seconds(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("Pending");
    if !bound || matches!(phase, "Succeeded" | "Failed") {
        return 0;
    }
    requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0)
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Checks the body's apiVersion/kind against the type; returns the version.
fn check_type_meta(ty: &ResourceType, obj: &Value) -> ApiResult<String> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request was not an object",
        ));
    }
    let version = match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => ty.preferred_version().to_string(),
        Some(api_version) => {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            if group != ty.group || ty.version(version).is_none() {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({api_version}) does not match the expected API version ({})",
                    ty.api_version(ty.preferred_version())
                )));
            }
            version.to_string()
        }
    };
    match obj.get("kind").and_then(Value::as_str) {
        Some(kind) if !kind.is_empty() && kind != ty.kind => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {}: no kind \"{kind}\" is registered for the resource",
            ty.kind
        ))),
        _ => Ok(version),
    }
}

fn check_body_name(name: &str, body: &Value) -> ApiResult<()> {
    match meta_str(body, "name") {
        Some(n) if n != name => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
        _ => Ok(()),
    }
}

fn apply_options<'a>(
    ty: &ResourceType,
    api_version: &'a str,
    w: &'a WriteMeta,
    force: bool,
    to_status: bool,
) -> ApplyOptions<'a> {
    ApplyOptions {
        manager: &w.manager,
        force,
        subresource_status: to_status,
        builtin: ty.builtin,
        api_version,
        now: &w.now,
    }
}

fn apply_error(ty: &ResourceType, name: &str, e: apply::ApplyError) -> ApiError {
    match e {
        apply::ApplyError::Conflict(_) => ApiError {
            details: Some(json!({"name": name, "group": ty.group, "kind": ty.plural})),
            ..ApiError::new(409, "Conflict", e.to_string())
        },
        apply::ApplyError::Invalid(msg) => {
            ApiError::invalid(&target(ty, name), &ty.kind, "body", &msg)
        }
        apply::ApplyError::NotFound => ApiError::not_found(&target(ty, name)),
    }
}

/// How deeply a value nests, counted without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1)];
    while let Some((value, level)) = pending.pop() {
        deepest = deepest.max(level);
        match value {
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => pending.extend(map.values().map(|v| (v, level + 1))),
            _ => {}
        }
    }
    deepest
}

/// A custom object against its CRD's schema and rules, on every write; any
/// object against the depth the simulator stores.
impl Inner {
    /// What kube-apiserver does to a new pod after its mutating admission:
    /// the pod strategy's AppArmor annotation sync, pod validation (422),
    /// then PodSecurity admission by the namespace's labels (403).
    fn validate_and_admit_pod(
        &self,
        ty: &ResourceType,
        ns: &str,
        name: &str,
        pod: &mut Value,
    ) -> ApiResult<()> {
        super::pod_security::sync_app_armor(pod);
        let causes = super::pod_validation::validate(pod);
        if !causes.is_empty() {
            return Err(ApiError::invalid_causes(
                &target(ty, name),
                &ty.kind,
                &causes,
            ));
        }
        let labels = self
            .object(NAMESPACE_TYPE, &(String::new(), ns.to_string()))
            .map(|n| rules::string_map(n.value().pointer("/metadata/labels")))
            .unwrap_or_default();
        match super::pod_security::refusal(pod, name, &labels) {
            Some(message) => Err(ApiError {
                details: Some(json!({"name": name, "kind": "pods"})),
                ..ApiError::forbidden(message)
            }),
            None => Ok(()),
        }
    }
}

/// PodSecurity admission of a namespace: labels that are no level or
/// version are refused on create, and on an update unless they were
/// already wrong in the same way.
fn check_pod_security_labels(
    ty: &ResourceType,
    name: &str,
    namespace: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    let causes_of = |ns: &Value| {
        super::pod_security::namespace_label_causes(&rules::string_map(
            ns.pointer("/metadata/labels"),
        ))
    };
    let causes = causes_of(namespace);
    if causes.is_empty() || old.is_some_and(|old| causes_of(old) == causes) {
        return Ok(());
    }
    Err(ApiError::invalid_causes(
        &target(ty, name),
        &ty.kind,
        &causes,
    ))
}

fn check_schema(
    ty: &ResourceType,
    version: &str,
    name: &str,
    obj: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    if depth(obj) > super::http::MAX_DEPTH {
        return Err(ApiError::invalid(
            &target(ty, name),
            &ty.kind,
            "<nil>",
            &format!(
                "Invalid value: the object nests deeper than the {} levels the simulator stores",
                super::http::MAX_DEPTH
            ),
        ));
    }
    let Some(schema) = ty.version(version).and_then(|v| v.schema.as_ref()) else {
        return Ok(());
    };
    let causes = super::validate::validate(obj, old, schema);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_causes(
            &target(ty, name),
            &ty.kind,
            &causes,
        ))
    }
}

fn crd_invalid(ty: &ResourceType, name: &str, detail: &str) -> ApiError {
    let (field, detail) = detail.split_once(": ").unwrap_or(("spec", detail));
    ApiError::invalid(&target(ty, name), &ty.kind, field, detail)
}
