//! The T9k Scheduler `PodGroup` (`scheduler.tensorstack.dev/v1beta1`) of a
//! job on one cluster: named after the job (the same name on every cluster),
//! `minMember` = the job's replicas placed on that cluster, `queue` and
//! `priority` from `spec.scheduler.t9kScheduler`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::{BuildError, JobRef, job_labels};
use crate::api::TensorFlowTrainingJob;

/// The scheduler name pods of a gang-scheduled job use.
pub const T9K_SCHEDULER_NAME: &str = "t9k-scheduler";
/// Pod label naming the pod's PodGroup.
pub const GROUP_NAME_LABEL: &str = "scheduler.tensorstack.dev/group-name";
/// Pod label naming the PodGroup's queue.
pub const QUEUE_LABEL: &str = "scheduler.tensorstack.dev/queue";

/// The PodGroup resource, for `Api::<DynamicObject>::namespaced_with`.
pub fn pod_group_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduler.tensorstack.dev", "v1beta1", "PodGroup"),
        "podgroups",
    )
}

/// The job's PodGroup on a cluster holding `min_member` of its replicas;
/// `None` when the job does not use T9k Scheduler. `owner` only at home.
pub fn build_pod_group(
    job: &TensorFlowTrainingJob,
    min_member: i32,
    owner: Option<OwnerReference>,
) -> Result<Option<DynamicObject>, BuildError> {
    let Some(t9k) = job.spec.t9k_scheduler() else {
        return Ok(None);
    };
    let job_ref = JobRef::of(job)?;
    let mut group = DynamicObject::new(job_ref.name, &pod_group_resource())
        .within(job_ref.namespace)
        .data(json!({"spec": {
            "minMember": min_member,
            "queue": t9k.queue,
            "priority": t9k.priority.unwrap_or(0),
        }}));
    group.metadata.labels = Some(job_labels(job)?);
    group.metadata.owner_references = owner.map(|o| vec![o]);
    Ok(Some(group))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::owner_reference;
    use crate::builders::test_support::*;

    #[test]
    fn pod_group_fields() {
        let mut job = chief_workers_ps();
        assert!(build_pod_group(&job, 4, None).expect("build").is_none());
        job.spec.scheduler =
            serde_json::from_value(json!({"t9kScheduler": {"queue": "default", "priority": 10}}))
                .expect("scheduler");
        let owner = owner_reference(&job).expect("owner");
        let group = build_pod_group(&job, 4, Some(owner))
            .expect("build")
            .expect("a PodGroup");
        let value = serde_json::to_value(&group).expect("json");
        assert_eq!(value["apiVersion"], "scheduler.tensorstack.dev/v1beta1");
        assert_eq!(value["kind"], "PodGroup");
        assert_eq!(value["metadata"]["name"], "mnist");
        assert_eq!(value["metadata"]["namespace"], "team-a");
        assert_eq!(
            value["metadata"]["labels"]["federation.tfjob.io/job-uid"],
            UID
        );
        assert_eq!(
            value["metadata"]["ownerReferences"][0]["kind"],
            "TensorFlowTrainingJob"
        );
        assert_eq!(
            value["spec"],
            json!({"minMember": 4, "queue": "default", "priority": 10})
        );
        // Priority defaults to 0.
        job.spec.scheduler =
            serde_json::from_value(json!({"t9kScheduler": {"queue": "q"}})).expect("scheduler");
        let group = build_pod_group(&job, 2, None)
            .expect("build")
            .expect("a PodGroup");
        assert_eq!(group.data["spec"]["priority"], 0);
        assert_eq!(group.metadata.owner_references, None);
    }
}
