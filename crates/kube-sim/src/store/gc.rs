//! Garbage collection, as kube-controller-manager's garbage collector does
//! it but under the store's lock: the index of dependents by owner (from
//! `metadata.ownerReferences`) and what a deletion's `propagationPolicy` does
//! to them (Background, Foreground, Orphan). Apart from storage because it is
//! a policy over objects, not how they are kept.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{DeleteOptions, Inner, Key, Stored};
use crate::error::{ApiError, ApiResult};
use crate::rules::{self, metadata_mut};

/// What a deletion does to the object's dependents (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Propagation {
    /// They are collected once the owner is gone.
    Background,
    /// They go first; the owner waits with the foregroundDeletion finalizer.
    Foreground,
    /// They lose their reference to the owner and stay.
    Orphan,
}

/// The owners' uids in an object's `metadata.ownerReferences`.
pub(super) fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Inner {
    /// Records `dependent`, stored under `(id, key)`, with each of its owners.
    pub(super) fn record_dependent(&mut self, id: &Arc<str>, key: &Key, dependent: &Stored) {
        for owner in &dependent.owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert((id.clone(), key.clone()));
        }
    }

    /// Forgets the version `dependent` of `(id, key)` with each of its owners.
    pub(super) fn forget_dependent(&mut self, id: &Arc<str>, key: &Key, dependent: &Stored) {
        for owner in &dependent.owners {
            if let Some(deps) = self.dependents.get_mut(owner) {
                deps.remove(&(id.clone(), key.clone()));
                if deps.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    /// The policy's part before the owner `uid` is removed or marked deleted:
    /// Foreground adds its finalizer to `finalizers`, Orphan frees the
    /// dependents now.
    pub(super) fn start_propagation(
        &mut self,
        policy: Option<&str>,
        uid: &str,
        finalizers: &mut Vec<String>,
    ) -> ApiResult<Propagation> {
        match policy.unwrap_or("Background") {
            "Foreground" => {
                finalizers.push("foregroundDeletion".into());
                Ok(Propagation::Foreground)
            }
            "Orphan" => {
                self.orphan_dependents(uid);
                Ok(Propagation::Orphan)
            }
            "Background" => Ok(Propagation::Background),
            other => Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))),
        }
    }

    /// The policy's part once the owner `uid` is marked deleted: Foreground
    /// deletes the dependents, and the owner once none is left.
    pub(super) fn finish_propagation(&mut self, propagation: Propagation, uid: &str) {
        match propagation {
            Propagation::Foreground => {
                for (dep_type, dep_key) in self.dependents.get(uid).cloned().unwrap_or_default() {
                    self.delete_by_id(&dep_type, &dep_key);
                }
                self.finish_foreground(uid);
            }
            Propagation::Background | Propagation::Orphan => {}
        }
    }

    /// After `gone` is removed: its dependents are collected, and its owners
    /// deleting in the foreground may now be removed too.
    pub(super) fn collect_after(&mut self, gone: &Stored) {
        self.collect_dependents(&gone.uid);
        for owner in &gone.owners {
            self.finish_foreground(owner);
        }
    }

    /// Strips the owner reference to `uid` from its dependents.
    fn orphan_dependents(&mut self, uid: &str) {
        for (dep_type, dep_key) in self.dependents.get(uid).cloned().unwrap_or_default() {
            self.strip_owner_refs(&dep_type, &dep_key, &|owner| owner == uid);
        }
    }

    fn strip_owner_refs(&mut self, id: &str, key: &Key, drop: &dyn Fn(&str) -> bool) {
        let (Some(ty), Some(dep)) = (self.types.get(id).cloned(), self.object(id, key)) else {
            return;
        };
        let mut value = dep.value();
        if let Some(refs) = value
            .pointer_mut("/metadata/ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| !r.get("uid").and_then(Value::as_str).is_some_and(drop));
            if refs.is_empty()
                && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
            {
                meta.remove("ownerReferences");
            }
        }
        self.put(&ty, value, Some(dep));
    }

    /// Removes the foregroundDeletion finalizer once no dependent blocks it.
    fn finish_foreground(&mut self, uid: &str) {
        let Some((id, key)) = self.by_uid.get(uid).cloned() else {
            return;
        };
        let Some(owner) = self.object(&id, &key) else {
            return;
        };
        if !owner.deleting || self.dependents.get(uid).is_some_and(|d| !d.is_empty()) {
            return;
        }
        let mut value = owner.value();
        let mut finalizers = rules::finalizers(&value);
        if !finalizers.iter().any(|f| f == "foregroundDeletion") {
            return;
        }
        finalizers.retain(|f| f != "foregroundDeletion");
        let Some(ty) = self.types.get(&*id).cloned() else {
            return;
        };
        if finalizers.is_empty() {
            self.remove(&ty, &key, None);
        } else {
            metadata_mut(&mut value).insert("finalizers".into(), json!(finalizers));
            self.put(&ty, value, Some(owner));
        }
    }

    /// Background garbage collection after `uid` is gone: dependents with no
    /// remaining owner are deleted; the others lose the dangling reference.
    fn collect_dependents(&mut self, uid: &str) {
        let Some(deps) = self.dependents.remove(uid) else {
            return;
        };
        for (dep_type, dep_key) in deps {
            let Some(dep) = self.object(&dep_type, &dep_key) else {
                continue;
            };
            let live_owner = dep
                .owners
                .iter()
                .any(|o| o != uid && self.by_uid.contains_key(o));
            if live_owner {
                let by_uid = &self.by_uid;
                let missing: HashSet<String> = dep
                    .owners
                    .iter()
                    .filter(|o| !by_uid.contains_key(*o))
                    .cloned()
                    .collect();
                self.strip_owner_refs(&dep_type, &dep_key, &|o| missing.contains(o));
            } else {
                self.delete_by_id(&dep_type, &dep_key);
            }
        }
    }
    //----

    fn delete_by_id(&mut self, id: &str, key: &Key) {
        if let Some(ty) = self.types.get(id).cloned() {
            // Errors here mean the dependent vanished meanwhile, which is the goal.
            let _ = self.delete(&ty, key, &DeleteOptions::default());
        }
    }
}
