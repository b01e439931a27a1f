//! A job as the controller lists and watches it, decoded one object at a
//! time so that no object can fail the list or the watch for the others.
//!
//! The API server accepts JSON nested 10,000 levels deep inside a pod
//! template (which the CRD preserves unchecked); serde_json refuses more than
//! 128 levels. Decoded as a whole, one such job failed every list of jobs,
//! and so stopped the controller for every job, restart after restart. Here
//! each object's text is set aside first (serde_json skips over it without
//! recursing), then read on its own, straight into the typed job. One that
//! is not a job is read again to say why: JSON that is no job keeps the
//! object and the path of the field at fault; an object too deep to read
//! keeps its name, uid and status phase. The controller fails either with
//! `InvalidSpec`.

use std::borrow::Cow;

use kube::Resource;
use kube::core::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::{TensorFlowTrainingJob, TensorFlowTrainingJobStatus};

/// A listed or watched job: read whole, or what could be read and why not.
#[derive(Clone, Debug)]
pub enum ListedJob {
    /// The job, read straight from its text.
    Readable(Box<TensorFlowTrainingJob>),
    Unreadable(Box<Unreadable>),
}

/// A job that cannot be read as a job.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// The object as JSON; when even that cannot be read, only its
    /// identity and `status.phase`.
    pub object: DynamicObject,
    /// Why, in words, with the field's path where there is one.
    pub error: String,
}

impl ListedJob {
    /// The job's status, where it can be read.
    pub fn status(&self) -> Option<Cow<'_, TensorFlowTrainingJobStatus>> {
        match self {
            ListedJob::Readable(job) => job.status.as_ref().map(Cow::Borrowed),
            ListedJob::Unreadable(unreadable) => unreadable
                .object
                .data
                .get("status")
                .and_then(|s| serde_json::from_value(s.clone()).ok())
                .map(Cow::Owned),
        }
    }
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
    // What deleting the job needs: its finalizers can be removed.
    finalizers: Option<Vec<String>>,
    deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    creation_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

#[derive(Deserialize)]
struct PhaseOnly {
    phase: Option<String>,
}

impl<'de> Deserialize<'de> for ListedJob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <Box<RawValue>>::deserialize(deserializer)?;
        // Nearly every job reads at once; the slower ways below only say why not.
        if let Ok(job) = serde_json::from_str::<TensorFlowTrainingJob>(raw.get()) {
            return Ok(ListedJob::Readable(Box::new(job)));
        }
        let error = match serde_json::from_str::<DynamicObject>(raw.get()) {
            Ok(object) => return Ok(not_a_job(object)),
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
        Ok(ListedJob::Unreadable(Box::new(Unreadable {
            object: DynamicObject {
                types,
                metadata: ObjectMeta {
                    name: identity.metadata.name,
                    namespace: identity.metadata.namespace,
                    uid: identity.metadata.uid,
                    resource_version: identity.metadata.resource_version,
                    finalizers: identity.metadata.finalizers,
                    deletion_timestamp: identity.metadata.deletion_timestamp,
                    creation_timestamp: identity.metadata.creation_timestamp,
                    ..ObjectMeta::default()
                },
                data,
            },
            error: in_words(&error),
        })))
    }
}

/// JSON that did not read as a job: read again from the JSON tree, which
/// names the field at fault (the text's reader names a line and column).
fn not_a_job(object: DynamicObject) -> ListedJob {
    let read = serde_json::to_value(&object)
        .map_err(|e| e.to_string())
        .and_then(|value| {
            serde_path_to_error::deserialize::<_, TensorFlowTrainingJob>(value).map_err(|e| {
                format!(
                    "{}: {}",
                    e.path(),
                    crate::validation::in_words(&e.inner().to_string())
                )
            })
        });
    match read {
        Ok(job) => ListedJob::Readable(Box::new(job)),
        Err(error) => ListedJob::Unreadable(Box::new(Unreadable { object, error })),
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
        match self {
            ListedJob::Readable(job) => &job.metadata,
            ListedJob::Unreadable(unreadable) => &unreadable.object.metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            ListedJob::Readable(job) => &mut job.metadata,
            ListedJob::Unreadable(unreadable) => &mut unreadable.object.metadata,
        }
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
        let ListedJob::Readable(job) = job else {
            panic!("{job:?}")
        };
        assert_eq!(job.metadata.name.as_deref(), Some("deep"));
        assert_eq!(job.spec.replica_specs.len(), 1);
    }

    #[test]
    fn json_that_is_not_a_job_keeps_the_object_and_names_the_field() {
        let text =
            job_text("{}").replace(r#""type":"worker""#, r#""type":"worker","replicas":"two""#);
        let job: ListedJob = serde_json::from_str(&text).expect("decodes");
        let ListedJob::Unreadable(unreadable) = job else {
            panic!("{job:?}")
        };
        assert_eq!(unreadable.object.metadata.name.as_deref(), Some("deep"));
        assert!(
            unreadable
                .error
                .starts_with("spec.replicaSpecs[0].replicas: "),
            "{}",
            unreadable.error
        );
        assert!(!unreadable.error.contains("line "), "{}", unreadable.error);
        let listed = ListedJob::Unreadable(unreadable);
        assert_eq!(
            listed.status().and_then(|s| s.phase),
            Some(crate::api::JobPhase::Pending)
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
        let ListedJob::Unreadable(deep) = &list.items[0] else {
            panic!("{:?}", list.items[0])
        };
        assert_eq!(deep.object.metadata.name.as_deref(), Some("deep"));
        assert_eq!(deep.object.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(deep.object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            deep.object.data.pointer("/status/phase"),
            Some(&serde_json::json!("Pending"))
        );
        assert!(
            deep.error.contains("spec.replicaSpecs[].template"),
            "{}",
            deep.error
        );
        assert!(matches!(list.items[1], ListedJob::Readable(_)));
    }

    #[test]
    fn a_watch_event_of_a_deep_job_decodes() {
        let line = format!(r#"{{"type":"ADDED","object":{}}}"#, job_text(&nested(500)));
        let event: kube::core::WatchEvent<ListedJob> =
            serde_json::from_str(&line).expect("decodes");
        match event {
            kube::core::WatchEvent::Added(job) => {
                assert!(matches!(job, ListedJob::Unreadable(_)), "{job:?}")
            }
            other => panic!("{other:?}"),
        }
    }
}
