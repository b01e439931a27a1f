//! Pure builders of every object the controller creates for a job
//! (docs/src/design/api-semantics.md and addressing.md): replica pods and
//! headless services, `TF_CONFIG`, T9k `PodGroup`s and the `TensorBoard`.
//! No API calls; the actors apply what these return.
//!
//! Decisions:
//! - Every object carries [`JOB_NAME_LABEL`], [`JOB_UID_LABEL`] and
//!   [`MANAGED_BY_LABEL`]; replica objects also [`REPLICA_TYPE_LABEL`],
//!   [`REPLICA_INDEX_LABEL`] and [`PLACEMENT_EPOCH_LABEL`]. Job-level objects
//!   (PodGroup, TensorBoard) carry no replica or epoch labels.
//! - A replica's service selects on job-uid + type + index, not on the epoch:
//!   the service keeps routing to the replica's current pod whichever
//!   placement created it, and the uid keeps a re-created job of the same name
//!   apart from leftovers of the old one.
//! - Owner references are the caller's choice (`Option<OwnerReference>`):
//!   only objects on the home cluster may point at the job, since garbage
//!   collection does not cross clusters. [`owner_reference`] builds it.
//! - Builders return `Result` instead of trusting validation: a job missing
//!   its uid or a replica spec is an error, never a panic.

mod pod;
mod pod_group;
mod recipe;
mod service;
mod tensorboard;
mod tf_config;
mod topology;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::{
    ReplicaKey, ReplicaSpec, ReplicaType, TENSORFLOW_CONTAINER, TemplateError,
    TensorFlowTrainingJob,
};

pub use pod::{PodMode, PodParams, build_pod};
pub use pod_group::{
    GROUP_NAME_LABEL, QUEUE_LABEL, T9K_SCHEDULER_NAME, build_pod_group, pod_group_resource,
};
pub use recipe::{Desired, Recipe, RecipeError};
pub use service::{build_service, build_service_export, service_export_resource};
pub use tensorboard::{build_tensorboard, tensorboard_resource};
pub use tf_config::{TF_CONFIG_ENV, tf_config};
pub use topology::{DEFAULT_ADDRESS_TEMPLATE, Topology, check_address_template, render_address};

/// Label: the job's name.
pub const JOB_NAME_LABEL: &str = "federation.tfjob.io/job-name";
/// Label: the job's uid.
pub const JOB_UID_LABEL: &str = "federation.tfjob.io/job-uid";
/// Label: the replica type (`chief`, `worker`, `ps`, `evaluator`).
pub const REPLICA_TYPE_LABEL: &str = "federation.tfjob.io/replica-type";
/// Label: the replica index.
pub const REPLICA_INDEX_LABEL: &str = "federation.tfjob.io/replica-index";
/// Label: the placement generation that created the object.
pub const PLACEMENT_EPOCH_LABEL: &str = "federation.tfjob.io/placement-epoch";
/// Label: who manages the object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// The value of [`MANAGED_BY_LABEL`].
pub const MANAGER: &str = "tfjob-federator";
/// A label selector for everything this controller creates (for informers).
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=tfjob-federator";

/// The name of the port TF_CONFIG addresses, on the `tensorflow` container.
pub const TF_PORT_NAME: &str = "tfjob-port";
/// The port used when the `tensorflow` container names no `tfjob-port`.
pub const DEFAULT_TF_PORT: i32 = 2222;

/// Why an object could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the job has no {0}")]
    MissingJobField(&'static str),
    #[error("the job has no replica {0}")]
    UnknownReplica(ReplicaKey),
    #[error("the {0} template has no container named \"tensorflow\"")]
    NoTensorflowContainer(ReplicaType),
    #[error("the {replica_type} template is malformed at {source}")]
    Template {
        replica_type: ReplicaType,
        #[source]
        source: TemplateError,
    },
    #[error("serializing {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// The identity fields every builder needs.
struct JobRef<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
}

impl<'a> JobRef<'a> {
    fn of(job: &'a TensorFlowTrainingJob) -> Result<JobRef<'a>, BuildError> {
        let meta = &job.metadata;
        Ok(JobRef {
            name: meta
                .name
                .as_deref()
                .ok_or(BuildError::MissingJobField("metadata.name"))?,
            namespace: meta
                .namespace
                .as_deref()
                .ok_or(BuildError::MissingJobField("metadata.namespace"))?,
            uid: meta
                .uid
                .as_deref()
                .ok_or(BuildError::MissingJobField("metadata.uid"))?,
        })
    }
}

/// The controller owner reference to the job, blocking its deletion until
/// the owned object is gone (the controller needs `update` on
/// `tensorflowtrainingjobs/finalizers` for that).
pub fn owner_reference(job: &TensorFlowTrainingJob) -> Result<OwnerReference, BuildError> {
    let mut owner = job
        .controller_owner_ref(&())
        .ok_or(BuildError::MissingJobField("metadata.uid"))?;
    owner.block_owner_deletion = Some(true);
    Ok(owner)
}

/// Labels of job-level objects: job name, job uid, managed-by.
pub fn job_labels(job: &TensorFlowTrainingJob) -> Result<BTreeMap<String, String>, BuildError> {
    let job = JobRef::of(job)?;
    Ok(BTreeMap::from([
        (JOB_NAME_LABEL.to_string(), job.name.to_string()),
        (JOB_UID_LABEL.to_string(), job.uid.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
    ]))
}

/// Labels of a replica's pod and service: the job labels plus type, index
/// and placement epoch.
pub fn replica_labels(
    job: &TensorFlowTrainingJob,
    key: ReplicaKey,
    epoch: u64,
) -> Result<BTreeMap<String, String>, BuildError> {
    let mut labels = job_labels(job)?;
    labels.insert(REPLICA_TYPE_LABEL.to_string(), key.replica_type.to_string());
    labels.insert(REPLICA_INDEX_LABEL.to_string(), key.index.to_string());
    labels.insert(PLACEMENT_EPOCH_LABEL.to_string(), epoch.to_string());
    Ok(labels)
}

/// The selector of a replica's service: job uid, type and index.
pub fn replica_selector(
    job: &TensorFlowTrainingJob,
    key: ReplicaKey,
) -> Result<BTreeMap<String, String>, BuildError> {
    let job = JobRef::of(job)?;
    Ok(BTreeMap::from([
        (JOB_UID_LABEL.to_string(), job.uid.to_string()),
        (REPLICA_TYPE_LABEL.to_string(), key.replica_type.to_string()),
        (REPLICA_INDEX_LABEL.to_string(), key.index.to_string()),
    ]))
}

/// A label selector string matching every object of one job, for list and
/// watch calls.
pub fn job_selector(job: &TensorFlowTrainingJob) -> Result<String, BuildError> {
    Ok(format!("{JOB_UID_LABEL}={}", JobRef::of(job)?.uid))
}

/// The spec of a replica that exists in the job (index within `replicas`).
fn replica_spec(job: &TensorFlowTrainingJob, key: ReplicaKey) -> Result<&ReplicaSpec, BuildError> {
    job.spec
        .replica_spec(key.replica_type)
        .filter(|s| (0..s.replicas).contains(&key.index))
        .ok_or(BuildError::UnknownReplica(key))
}

/// The parsed pod template of a replica spec.
fn parse_template(
    replica_type: ReplicaType,
    spec: &ReplicaSpec,
) -> Result<PodTemplateSpec, BuildError> {
    spec.template
        .parse()
        .map_err(|source| BuildError::Template {
            replica_type,
            source,
        })
}

/// The port of a replica type: its `tensorflow` container's `tfjob-port`,
/// else [`DEFAULT_TF_PORT`].
pub fn tf_port(template: &PodTemplateSpec) -> i32 {
    template
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter(|c| c.name == TENSORFLOW_CONTAINER)
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some(TF_PORT_NAME))
        .map_or(DEFAULT_TF_PORT, |p| p.container_port)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! A job fixture shared by the builder tests.

    use serde_json::{Value, json};

    use crate::api::TensorFlowTrainingJob;

    pub const UID: &str = "0b7e1a52-1111-4c1c-9c4e-2e4d5f6a7b8c";

    /// A job `mnist` in namespace `team-a` with the given spec.
    pub fn job(spec: Value) -> TensorFlowTrainingJob {
        serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1",
            "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "mnist", "namespace": "team-a", "uid": UID},
            "spec": spec,
        }))
        .expect("job parses")
    }

    pub fn replica(replica_type: &str, replicas: i64) -> Value {
        json!({"type": replica_type, "replicas": replicas, "template": {
            "metadata": {
                "labels": {"team": "vision"},
                "annotations": {"sim.federation.tfjob.io/run-seconds": "3"},
            },
            "spec": {
                "initContainers": [{"name": "fetch-data", "image": "busybox"}],
                "containers": [{
                    "name": "tensorflow",
                    "image": "tensorflow/tensorflow:2.15.0",
                    "command": ["python", "train.py"],
                    "args": ["--epochs", "10"],
                    "env": [{"name": "TF_CONFIG", "value": "stale"}, {"name": "A", "value": "1"}],
                }],
                "restartPolicy": "Always",
            },
        }})
    }

    /// chief + 2 workers + 1 ps.
    pub fn chief_workers_ps() -> TensorFlowTrainingJob {
        job(json!({"replicaSpecs": [
            replica("chief", 1), replica("worker", 2), replica("ps", 1)]}))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn labels_and_selector() {
        let job = chief_workers_ps();
        let key = ReplicaKey::new(ReplicaType::Worker, 1);
        let labels = replica_labels(&job, key, 3).expect("labels");
        let expected: BTreeMap<String, String> = [
            ("app.kubernetes.io/managed-by", "tfjob-federator"),
            ("federation.tfjob.io/job-name", "mnist"),
            ("federation.tfjob.io/job-uid", UID),
            ("federation.tfjob.io/placement-epoch", "3"),
            ("federation.tfjob.io/replica-index", "1"),
            ("federation.tfjob.io/replica-type", "worker"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, expected);
        let selector = replica_selector(&job, key).expect("selector");
        assert_eq!(selector.len(), 3);
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
        assert_eq!(
            job_selector(&job).expect("selector"),
            format!("federation.tfjob.io/job-uid={UID}")
        );
    }

    #[test]
    fn owner_reference_points_at_the_job() {
        let owner = owner_reference(&chief_workers_ps()).expect("owner");
        assert_eq!(owner.api_version, "batch.tensorstack.dev/v1beta1");
        assert_eq!(owner.kind, "TensorFlowTrainingJob");
        assert_eq!(owner.name, "mnist");
        assert_eq!(owner.uid, UID);
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn a_job_without_uid_is_an_error() {
        let mut job = chief_workers_ps();
        job.metadata.uid = None;
        assert!(matches!(
            owner_reference(&job),
            Err(BuildError::MissingJobField("metadata.uid"))
        ));
        assert!(matches!(
            job_labels(&job),
            Err(BuildError::MissingJobField("metadata.uid"))
        ));
    }
}
