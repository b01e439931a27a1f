//! The `TensorBoard` (`tensorstack.dev/v1beta1`) of a job with a
//! `tensorboardSpec`: named after the job, on the home cluster, owned by the
//! job. A job scheduled by T9k Scheduler puts its TensorBoard in the same queue.

use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Map, Value, json};

use super::{BuildError, JobRef, job_labels, owner_reference};
use crate::api::TensorFlowTrainingJob;

/// The TensorBoard resource, for `Api::<DynamicObject>::namespaced_with`.
pub fn tensorboard_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tensorstack.dev", "v1beta1", "TensorBoard"),
        "tensorboards",
    )
}

/// The job's TensorBoard; `None` when the job has no `tensorboardSpec`.
pub fn build_tensorboard(job: &TensorFlowTrainingJob) -> Result<Option<DynamicObject>, BuildError> {
    let Some(tensorboard) = &job.spec.tensorboard_spec else {
        return Ok(None);
    };
    let job_ref = JobRef::of(job)?;
    let mut spec = Map::new();
    spec.insert(
        "trainingLogFilesets".into(),
        json!(tensorboard.training_log_filesets),
    );
    if let Some(image) = &tensorboard.image {
        spec.insert("image".into(), json!(image));
    }
    if let Some(resources) = &tensorboard.resources {
        let resources =
            serde_json::to_value(resources).map_err(|source| BuildError::Serialize {
                what: "tensorboardSpec.resources",
                source,
            })?;
        spec.insert("resources".into(), resources);
    }
    if let Some(t9k) = job.spec.t9k_scheduler() {
        spec.insert(
            "scheduler".into(),
            json!({"t9kScheduler": {"queue": t9k.queue}}),
        );
    }
    let mut object = DynamicObject::new(job_ref.name, &tensorboard_resource())
        .within(job_ref.namespace)
        .data(json!({"spec": Value::Object(spec)}));
    object.metadata.labels = Some(job_labels(job)?);
    object.metadata.owner_references = Some(vec![owner_reference(job)?]);
    Ok(Some(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::test_support::*;

    #[test]
    fn tensorboard_named_after_and_owned_by_the_job() {
        let mut job = chief_workers_ps();
        assert!(build_tensorboard(&job).expect("build").is_none());
        job.spec.tensorboard_spec = serde_json::from_value(json!({
            "image": "tensorflow/tensorflow:2.15.0",
            "trainingLogFilesets": ["t9k://pvc/mnist-logs/log"],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
        }))
        .expect("tensorboard spec");
        job.spec.scheduler = serde_json::from_value(json!({"t9kScheduler": {"queue": "default"}}))
            .expect("scheduler");
        let value = serde_json::to_value(build_tensorboard(&job).expect("build").expect("some"))
            .expect("json");
        assert_eq!(value["apiVersion"], "tensorstack.dev/v1beta1");
        assert_eq!(value["kind"], "TensorBoard");
        assert_eq!(value["metadata"]["name"], "mnist");
        assert_eq!(value["metadata"]["namespace"], "team-a");
        assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], UID);
        assert_eq!(value["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            value["spec"],
            json!({
                "trainingLogFilesets": ["t9k://pvc/mnist-logs/log"],
                "image": "tensorflow/tensorflow:2.15.0",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                "scheduler": {"t9kScheduler": {"queue": "default"}},
            })
        );
    }
}
