//! The garbage sweep of one member cluster (decisions in `crate::sweep`):
//! lists what this controller made there, then the jobs on home, and
//! deletes what no job accounts for. Run when a member is connected, when
//! it returns after being lost (before it takes new replicas), and every
//! `sweepIntervalMs`. A pod or service counts as made by this controller
//! only when its signature verifies (`crate::signing`): one a user made with
//! our labels is never deleted.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PartialObjectMeta};
use kube::{Client, ResourceExt};

use crate::api::ListedJob;
use crate::builders::{
    self, JOB_UID_LABEL, MANAGED_SELECTOR, PLACEMENT_EPOCH_LABEL, REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
};
use crate::signing::{self, SIGNATURE_ANNOTATION, Signer};
use crate::sweep::{self, JobRecord};

/// An object found on the member: where to delete it, and its labels.
struct Found {
    api: Api<DynamicObject>,
    name: String,
    kind: &'static str,
    labels: std::collections::BTreeMap<String, String>,
    signature: Option<String>,
    created: Option<jiff::Timestamp>,
}

impl Found {
    /// Whether this controller made it. Pods and services are signed
    /// (`subject`: job uid, replica, epoch, kind); PodGroups are not, and
    /// are known by their labels.
    fn made_by(&self, signer: &Signer) -> bool {
        let kind = match self.kind {
            "pod" => "Pod",
            "service" => "Service",
            _ => return true,
        };
        let label = |key: &str| self.labels.get(key).map_or("", String::as_str);
        let replica = format!(
            "{}-{}",
            label(REPLICA_TYPE_LABEL),
            label(REPLICA_INDEX_LABEL)
        );
        let subject = signing::subject(
            label(JOB_UID_LABEL),
            &replica,
            label(PLACEMENT_EPOCH_LABEL),
            kind,
        );
        signer.trusts(&subject, self.signature.as_deref(), self.created)
    }
}

/// Lists the managed objects of one kind on the member; a kind whose CRD
/// is not installed there has none.
async fn list_kind(
    client: &Client,
    resource: ApiResource,
    kind: &'static str,
) -> kube::Result<Vec<Found>> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let listed = match all
        .list_metadata(&ListParams::default().labels(MANAGED_SELECTOR))
        .await
    {
        Ok(list) => list.items,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(listed
        .into_iter()
        .map(|object: PartialObjectMeta<DynamicObject>| Found {
            api: Api::namespaced_with(
                client.clone(),
                &object.namespace().unwrap_or_default(),
                &resource,
            ),
            name: object.name_any(),
            kind,
            labels: object.labels().clone(),
            signature: object.annotations().get(SIGNATURE_ANNOTATION).cloned(),
            created: object.metadata.creation_timestamp.as_ref().map(|t| t.0),
        })
        .collect())
}

/// Deletes the member's managed objects that no job on home accounts for;
/// returns how many it deleted.
pub async fn sweep(
    member: &Client,
    cluster: &str,
    home: &Client,
    signer: &Signer,
) -> kube::Result<usize> {
    let mut found = list_kind(member, ApiResource::erase::<Pod>(&()), "pod").await?;
    found.extend(list_kind(member, ApiResource::erase::<Service>(&()), "service").await?);
    found.extend(list_kind(member, builders::pod_group_resource(), "PodGroup").await?);
    // Listed after the objects: an object made meanwhile finds its job.
    // Listed one object at a time: one unreadable job must not stop the sweep.
    let jobs: Api<ListedJob> = Api::all_with(home.clone(), &super::manager::job_resource());
    let jobs: HashMap<String, JobRecord> = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|job| Some((job.uid()?, believed_record(&job, signer))))
        .collect();
    let mut deleted = 0;
    for object in found {
        if !sweep::is_garbage(&object.labels, cluster, &jobs) {
            continue;
        }
        if !object.made_by(signer) {
            tracing::debug!(%cluster, kind = object.kind, name = %object.name, "an object carries our labels but not our signature; left alone");
            continue;
        }
        match object
            .api
            .delete(&object.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {
                deleted += 1;
                tracing::info!(%cluster, kind = object.kind, name = %object.name, "deleted an object no job accounts for");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// What the sweep may believe of a job: its placement, if its status is
/// the controller's (see `record`); a job that cannot be read is judged
/// like a forged one: nothing of it is garbage.
fn believed_record(job: &ListedJob, signer: &Signer) -> JobRecord {
    let ListedJob::Readable(job) = job else {
        return JobRecord::unverified();
    };
    let owner = crate::record::Owner::of(job);
    if crate::record::judge(signer, owner, job.status.as_ref()).is_believed() {
        JobRecord::of(job.status.as_ref())
    } else {
        JobRecord::unverified()
    }
}
