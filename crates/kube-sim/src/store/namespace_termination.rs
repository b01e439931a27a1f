//! Namespace termination, as the API server and kube-controller-manager's
//! namespace controller do it but under the store's lock: no new objects in
//! a namespace being deleted, its objects deleted, the namespace removed once
//! empty. Apart from storage because it is a rule over objects, not how they
//! are kept; what every live namespace gets is `crate::namespaces`.

use std::sync::Arc;

use super::{DeleteOptions, Inner, Key, NAMESPACE_TYPE, Stored};
use crate::error::{ApiError, ApiResult, Target};
use crate::resources::ResourceType;
use crate::rules;

impl Inner {
    fn namespace_state(&self, ns: &str) -> Option<Arc<Stored>> {
        self.object(NAMESPACE_TYPE, &(String::new(), ns.to_string()))
    }

    /// A namespaced object is created only in a namespace that exists and is
    /// not being deleted.
    pub(super) fn admit_to_namespace(
        &self,
        ty: &ResourceType,
        ns: &str,
        name: &str,
    ) -> ApiResult<()> {
        match self.namespace_state(ns) {
            None => Err(ApiError::not_found(&Target {
                group: "",
                plural: "namespaces",
                name: ns,
            })),
            Some(n) if n.deleting => Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                ty.plural
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Deletes everything in a terminating namespace, then the namespace once empty.
    pub(super) fn empty_namespace(&mut self, ns: &str) {
        let namespaced: Vec<Arc<ResourceType>> = self
            .types
            .values()
            .filter(|t| t.namespaced)
            .cloned()
            .collect();
        for ty in namespaced {
            let keys: Vec<Key> = self
                .tables
                .get(&ty.id())
                .map(|t| {
                    t.range((ns.to_string(), String::new())..)
                        .take_while(|(k, _)| k.0 == ns)
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default();
            for key in keys {
                let _ = self.delete(&ty, &key, &DeleteOptions::default());
            }
        }
        self.finish_namespace(ns);
    }

    /// Removes a terminating namespace once it is empty and its finalizers are done.
    pub(super) fn finish_namespace(&mut self, ns: &str) {
        let Some(state) = self.namespace_state(ns) else {
            return;
        };
        if !state.deleting || !rules::finalizers(&state.value()).is_empty() {
            return;
        }
        let occupied = self.types.values().filter(|t| t.namespaced).any(|t| {
            self.tables.get(&t.id()).is_some_and(|tab| {
                tab.range((ns.to_string(), String::new())..)
                    .next()
                    .is_some_and(|(k, _)| k.0 == ns)
            })
        });
        if !occupied && let Some(ty) = self.types.get(NAMESPACE_TYPE).cloned() {
            self.remove(&ty, &(String::new(), ns.to_string()), None);
        }
    }
    //----
}
