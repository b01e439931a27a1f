//! A job as the controller lists and watches it, decoded one object at a
//! time so that no object can fail the list or the watch for the others.
//!
//! The API server accepts JSON nested 10,000 levels deep inside a pod
//! template (which the CRD preserves unchecked); serde_json refuses more than
//! 128 levels. Decoded as a whole, one such job failed every list of jobs,
//! and so stopped the controller for every job, restart after restart. Here
//! each object's text is set aside first (serde_json skips over it without
//! recursing), then read on its own: an object too deep to read becomes an
//! unreadable job with its name, uid and status phase, which the controller
//! fails with `InvalidSpec`.

use std::borrow::Cow;

use kube::Resource;
use kube::core::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A listed or watched job: readable, or why not.
#[derive(Clone, Debug)]
pub struct ListedJob {
    /// The object; for an unreadable one, only its identity and `status.phase`.
    pub object: DynamicObject,
    /// Why the object could not be read, in words.
    pub unreadable: Option<String>,
}

/// What is read of an object that cannot be read whole: every other field
/// (including `managedFields`, which mirror the deep template) is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Identity {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: IdentityMeta,
    status: Option<PhaseOnly>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IdentityMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

#[derive(Deserialize)]
struct PhaseOnly {
    phase: Option<String>,
}

impl<'de> Deserialize<'de> for ListedJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <Box<RawValue>>::deserialize(deserializer)?;
        let error = match serde_json::from_str::<DynamicObject>(raw.get()) {
            Ok(object) => {
                return Ok(ListedJob {
                    object,
                    unreadable: None,
                });
            }
            Err(e) => e,
        };
        let identity: Identity = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
        let types = match (identity.api_version, identity.kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        let data = match identity.status.and_then(|s| s.phase) {
            Some(phase) => serde_json::json!({"status": {"phase": phase}}),
            None => serde_json::json!({}),
        };
        Ok(ListedJob {
            object: DynamicObject {
                types,
                metadata: ObjectMeta {
                    name: identity.metadata.name,
                    namespace: identity.metadata.namespace,
                    uid: identity.metadata.uid,
                    resource_version: identity.metadata.resource_version,
                    ..ObjectMeta::default()
                },
                data,
            },
            unreadable: Some(in_words(&error)),
        })
    }
}

fn in_words(error: &serde_json::Error) -> String {
    if error.to_string().starts_with("recursion limit exceeded") {
        "spec.replicaSpecs[].template: nested deeper than the 128 levels of JSON the \
         controller reads"
            .into()
    } else {
        format!("the object is not valid JSON: {error}")
    }
}

impl Resource for ListedJob {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.object.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.object.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
    }

    fn job_text(template: &str) -> String {
        format!(
            r#"{{"apiVersion":"batch.tensorstack.dev/v1beta1","kind":"TensorFlowTrainingJob",
                "metadata":{{"name":"deep","namespace":"ns","uid":"u1","resourceVersion":"7"}},
                "spec":{{"replicaSpecs":[{{"type":"worker","template":{template}}}]}},
                "status":{{"phase":"Pending"}}}}"#
        )
    }

    #[test]
    fn a_readable_job_is_read_whole() {
        let job: ListedJob = serde_json::from_str(&job_text(&nested(50))).expect("decodes");
        assert_eq!(job.unreadable, None);
        assert_eq!(
            job.object.data.pointer("/spec/replicaSpecs/0/type"),
            Some(&serde_json::json!("worker"))
        );
    }

    #[test]
    fn a_job_too_deep_to_read_keeps_its_identity_and_fails_alone() {
        let deep = job_text(&nested(10_000));
        let list = format!(
            r#"{{"items":[{deep},{fine}]}}"#,
            fine = job_text(&nested(1))
        );
        #[derive(Deserialize)]
        struct List {
            items: Vec<ListedJob>,
        }
        let list: List = serde_json::from_str(&list).expect("the list decodes");
        let deep = &list.items[0];
        assert_eq!(deep.object.metadata.name.as_deref(), Some("deep"));
        assert_eq!(deep.object.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(deep.object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            deep.object.data.pointer("/status/phase"),
            Some(&serde_json::json!("Pending"))
        );
        assert!(
            deep.unreadable
                .as_deref()
                .is_some_and(|e| e.contains("spec.replicaSpecs[].template")),
            "{:?}",
            deep.unreadable
        );
        assert_eq!(list.items[1].unreadable, None);
    }

    #[test]
    fn a_watch_event_of_a_deep_job_decodes() {
        let line = format!(r#"{{"type":"ADDED","object":{}}}"#, job_text(&nested(500)));
        let event: kube::core::WatchEvent<ListedJob> =
            serde_json::from_str(&line).expect("decodes");
        match event {
            kube::core::WatchEvent::Added(job) => assert!(job.unreadable.is_some()),
            other => panic!("{other:?}"),
        }
    }
}
