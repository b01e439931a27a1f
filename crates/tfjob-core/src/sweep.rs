//! The garbage sweep of a member cluster: which of the objects this
//! controller made there no job on home accounts for any more. Pure.
//!
//! An object is garbage when its job (by uid) is gone from home — it was
//! deleted while the member was unreachable — or, for replica objects, when
//! it belongs to an older placement epoch than the job's — the job was
//! re-placed after losing the member; a replica that kept its pod through a
//! partial failover is judged by its own, older epoch. Job-level objects
//! (PodGroups) carry no
//! epoch; they are garbage on a cluster the job's current placement no
//! longer uses. Objects without a job uid are not ours to judge.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::api::TensorFlowTrainingJobStatus;
use crate::builders::{
    JOB_UID_LABEL, PLACEMENT_EPOCH_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL,
};

/// What the sweep needs to know of a job on home.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub epoch: u64,
    /// The older epoch of each replica (`worker-1`) that kept its pod
    /// through a partial failover.
    pub kept: BTreeMap<String, u64>,
    /// The clusters of its current placement; None while undecided.
    pub clusters: Option<BTreeSet<String>>,
    /// The status is the controller's: else nothing of the job is garbage.
    pub verified: bool,
}

impl JobRecord {
    /// From the placement the job's (verified) status records.
    pub fn of(status: Option<&TensorFlowTrainingJobStatus>) -> JobRecord {
        let recorded = status.and_then(|s| s.placement.as_ref());
        JobRecord {
            epoch: recorded.map_or(0, |p| p.epoch),
            kept: recorded
                .and_then(|p| p.replica_epochs.clone())
                .unwrap_or_default(),
            clusters: recorded
                .and_then(|p| p.assignment.as_ref())
                .map(|a| a.values().cloned().collect()),
            verified: true,
        }
    }

    /// A job whose status is not the controller's.
    pub fn unverified() -> JobRecord {
        JobRecord {
            epoch: 0,
            kept: BTreeMap::new(),
            clusters: None,
            verified: false,
        }
    }
}

/// Whether an object with these labels on `cluster` is garbage, given the
/// jobs on home by uid. The jobs must be listed after the objects: an object
/// created meanwhile then always finds its job.
pub fn is_garbage(
    labels: &BTreeMap<String, String>,
    cluster: &str,
    jobs: &HashMap<String, JobRecord>,
) -> bool {
    let Some(uid) = labels.get(JOB_UID_LABEL) else {
        return false;
    };
    let Some(job) = jobs.get(uid) else {
        return true;
    };
    if !job.verified {
        return false;
    }
    match labels.get(PLACEMENT_EPOCH_LABEL) {
        Some(epoch) => {
            let replica = match (
                labels.get(REPLICA_TYPE_LABEL),
                labels.get(REPLICA_INDEX_LABEL),
            ) {
                (Some(replica_type), Some(index)) => format!("{replica_type}-{index}"),
                _ => String::new(),
            };
            let current = job.kept.get(&replica).copied().unwrap_or(job.epoch);
            epoch.parse::<u64>().is_ok_and(|e| e < current)
        }
        None => job.clusters.as_ref().is_some_and(|c| !c.contains(cluster)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn jobs() -> HashMap<String, JobRecord> {
        let mut jobs = HashMap::new();
        jobs.insert(
            "uid-a".to_string(),
            JobRecord {
                epoch: 2,
                kept: [("chief-0".to_string(), 1)].into_iter().collect(),
                clusters: Some(["member-2".to_string()].into_iter().collect()),
                verified: true,
            },
        );
        jobs.insert("uid-b".to_string(), JobRecord::of(None));
        jobs.insert(
            "uid-forged".to_string(),
            JobRecord {
                epoch: 9,
                ..JobRecord::unverified()
            },
        );
        jobs
    }

    #[test]
    fn objects_of_deleted_jobs_are_garbage() {
        let orphan = labels(&[(JOB_UID_LABEL, "uid-gone"), (PLACEMENT_EPOCH_LABEL, "0")]);
        assert!(is_garbage(&orphan, "member-1", &jobs()));
        let group = labels(&[(JOB_UID_LABEL, "uid-gone")]);
        assert!(is_garbage(&group, "member-1", &jobs()));
    }

    #[test]
    fn replica_objects_of_older_epochs_are_garbage() {
        let old = labels(&[(JOB_UID_LABEL, "uid-a"), (PLACEMENT_EPOCH_LABEL, "1")]);
        let current = labels(&[(JOB_UID_LABEL, "uid-a"), (PLACEMENT_EPOCH_LABEL, "2")]);
        assert!(is_garbage(&old, "member-1", &jobs()));
        assert!(!is_garbage(&current, "member-1", &jobs()));
        // chief-0 kept its pod of epoch 1 through a partial failover to 2;
        // worker-0's pod of epoch 1 was left on a lost cluster.
        let replica = |t: &str, epoch: &str| {
            labels(&[
                (JOB_UID_LABEL, "uid-a"),
                (REPLICA_TYPE_LABEL, t),
                (REPLICA_INDEX_LABEL, "0"),
                (PLACEMENT_EPOCH_LABEL, epoch),
            ])
        };
        assert!(!is_garbage(&replica("chief", "1"), "member-1", &jobs()));
        assert!(is_garbage(&replica("chief", "0"), "member-1", &jobs()));
        assert!(is_garbage(&replica("worker", "1"), "member-1", &jobs()));
        assert!(!is_garbage(&replica("worker", "2"), "member-1", &jobs()));
        let unreadable = labels(&[(JOB_UID_LABEL, "uid-a"), (PLACEMENT_EPOCH_LABEL, "x")]);
        assert!(
            !is_garbage(&unreadable, "member-1", &jobs()),
            "when in doubt, keep"
        );
    }

    #[test]
    fn job_level_objects_follow_the_current_placement() {
        let group = labels(&[(JOB_UID_LABEL, "uid-a")]);
        assert!(is_garbage(&group, "member-1", &jobs()));
        assert!(!is_garbage(&group, "member-2", &jobs()));
        let undecided = labels(&[(JOB_UID_LABEL, "uid-b")]);
        assert!(!is_garbage(&undecided, "member-1", &jobs()));
    }

    #[test]
    fn nothing_of_a_job_with_a_forged_record_is_garbage() {
        for object in [
            labels(&[(JOB_UID_LABEL, "uid-forged"), (PLACEMENT_EPOCH_LABEL, "0")]),
            labels(&[(JOB_UID_LABEL, "uid-forged")]),
        ] {
            assert!(!is_garbage(&object, "member-1", &jobs()));
        }
    }

    #[test]
    fn objects_without_a_job_uid_are_left_alone() {
        assert!(!is_garbage(&labels(&[]), "member-1", &jobs()));
    }

    #[test]
    fn a_job_record_reads_the_recorded_placement() {
        let status: TensorFlowTrainingJobStatus = serde_json::from_value(serde_json::json!(
            {"placement": {"epoch": 5, "assignment": {"worker-0": "member-2"},
                           "replicaEpochs": {"chief-0": 4}}}
        ))
        .expect("a status");
        let record = JobRecord::of(Some(&status));
        assert_eq!(record.epoch, 5);
        assert_eq!(record.kept.get("chief-0"), Some(&4));
        assert_eq!(
            record.clusters,
            Some(["member-2".to_string()].into_iter().collect())
        );
    }
}
