//! What a (restarted) controller may believe of a job it finds on home.
//!
//! A job's status is the controller's memory: its phase, placement epoch and
//! assignment, restart counts and the pods whose exits were acted upon. A
//! user who may write the status (`tensorflowtrainingjobs/status`, which the
//! RBAC we ship grants nobody but the controller, but an admin may) or the
//! job's annotations could once steer the next controller with it: a forged
//! placement ran a second copy of every replica, a forged `Failed` deleted
//! a running job's pods, and a forged accepted `replicaSpecs` annotation
//! built privileged pods on a member. So:
//!
//! - every status the controller writes carries a **seal**: an HMAC, with
//!   the key its pods are signed with (`signing`), of the job's uid and the
//!   status itself; a status whose seal does not verify is not the
//!   controller's, and nothing is decided from it;
//! - the placement record in that status carries the **digest** of the
//!   `replicaSpecs` the job started with; the annotation that holds their
//!   text (too large for the status) is used only if its digest matches.
//!
//! A sealed status can still be replayed: a user who may write the status
//! can put back an earlier status of the same job, which the controller once
//! wrote. That brings back an earlier genuine state of the job (at worst its
//! replicas are replaced, built from the same accepted spec and placed on
//! clusters once chosen for it), never a spec, a placement or a count the
//! controller did not decide for that job.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use ring::digest;

use kube::ResourceExt;

use crate::api::{TensorFlowTrainingJob, TensorFlowTrainingJobStatus};

/// The finalizer the controller adds to every job it admits.
pub const FINALIZER: &str = "federation.tfjob.io/cleanup";
use crate::signing::Signer;

/// The digest of a `replicaSpecs` text, as the placement record keeps it.
pub fn spec_digest(replica_specs_json: &str) -> String {
    let hash = digest::digest(&digest::SHA256, replica_specs_json.as_bytes());
    format!("sha256:{}", URL_SAFE_NO_PAD.encode(hash.as_ref()))
}

/// What is sealed: the job's uid and its status without the seal, as JSON
/// (the typed status serializes in one order, whatever order the API
/// server kept its fields in).
fn sealed_text(job_uid: &str, status: &TensorFlowTrainingJobStatus) -> Vec<u8> {
    let unsealed = TensorFlowTrainingJobStatus {
        seal: None,
        ..status.clone()
    };
    let mut text = format!("{job_uid}/status/").into_bytes();
    text.extend(serde_json::to_vec(&unsealed).unwrap_or_default());
    text
}

/// `status` with the controller's seal.
pub fn seal(
    signer: &Signer,
    job_uid: &str,
    mut status: TensorFlowTrainingJobStatus,
) -> TensorFlowTrainingJobStatus {
    status.seal = None;
    status.seal = Some(signer.sign_bytes(&sealed_text(job_uid, &status)));
    status
}

/// How far a stored status can be believed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// No status yet: a new job.
    Fresh,
    /// Written by this controller (its seal verifies).
    Sealed,
    /// Unsealed, of a job created before the controller began to seal
    /// statuses (an upgrade): believed as before.
    Legacy,
    /// Not the controller's: the field that fails, in words.
    Forged(String),
}

impl Trust {
    pub fn is_believed(&self) -> bool {
        !matches!(self, Trust::Forged(_))
    }
}

/// The job a status belongs to: its uid, when it was created, and whether
/// it carries the controller's finalizer (it was admitted: the controller
/// wrote a status before it added the finalizer).
#[derive(Clone, Copy, Debug)]
pub struct Owner<'a> {
    pub uid: &'a str,
    pub created: Option<Timestamp>,
    pub admitted: bool,
}

impl<'a> Owner<'a> {
    pub fn of(job: &'a TensorFlowTrainingJob) -> Owner<'a> {
        Owner {
            uid: job.metadata.uid.as_deref().unwrap_or_default(),
            created: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
            admitted: job.finalizers().iter().any(|f| f == FINALIZER),
        }
    }
}

/// Whether the stored status of `job` is the controller's.
pub fn judge(signer: &Signer, job: Owner, status: Option<&TensorFlowTrainingJobStatus>) -> Trust {
    let legacy = signer.sealing_began_after(job.created);
    let status = status.filter(|s| **s != TensorFlowTrainingJobStatus::default());
    let Some(status) = status else {
        return if job.admitted && !legacy {
            Trust::Forged(
                "status: it is missing although the job was admitted (it was removed by \
                 someone other than the controller)"
                    .into(),
            )
        } else {
            Trust::Fresh
        };
    };
    match &status.seal {
        Some(seal) if signer.verifies(&sealed_text(job.uid, status), seal) => Trust::Sealed,
        Some(_) => Trust::Forged(
            "status: its seal does not match its content (it was written by someone other \
             than the controller)"
                .into(),
        ),
        None if legacy => Trust::Legacy,
        None => Trust::Forged(
            "status: it carries no seal (it was written by someone other than the controller)"
                .into(),
        ),
    }
}

/// Which `replicaSpecs` text a started job runs, given the digest its
/// (believed) placement record keeps, the annotation's text and the job's
/// current `replicaSpecs` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted<'a> {
    /// This text: its digest is the recorded one.
    Verified(&'a str),
    /// No digest is recorded (a status from before digests): the
    /// annotation, as before.
    Unrecorded(Option<&'a str>),
    /// Neither the annotation nor the current spec has the recorded digest.
    Unverifiable,
}

pub fn accepted_specs<'a>(
    recorded_digest: Option<&str>,
    annotation: Option<&'a str>,
    current: &'a str,
) -> Accepted<'a> {
    let Some(recorded) = recorded_digest else {
        return Accepted::Unrecorded(annotation);
    };
    [annotation, Some(current)]
        .into_iter()
        .flatten()
        .find(|text| spec_digest(text) == recorded)
        .map_or(Accepted::Unverifiable, Accepted::Verified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{JobPhase, PlacementRecord};

    fn signer() -> Signer {
        let began = Timestamp::from_second(1_800_000_000).expect("a time");
        Signer::new(b"0123456789abcdef0123456789abcdef", Some(began)).sealing_since(Some(began))
    }

    fn job(uid: &str) -> Owner<'_> {
        Owner {
            uid,
            created: None,
            admitted: true,
        }
    }

    fn running() -> TensorFlowTrainingJobStatus {
        TensorFlowTrainingJobStatus {
            phase: Some(JobPhase::Running),
            backoff_count: 1,
            placement: Some(PlacementRecord {
                epoch: 2,
                assignment: Some([("worker-0".to_string(), "member-1".to_string())].into()),
                replica_specs_digest: Some(spec_digest("[]")),
                replica_epochs: None,
                active_seconds: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_sealed_status_verifies_for_its_job_only_and_any_change_breaks_it() {
        let signer = signer();
        let sealed = seal(&signer, "uid-1", running());
        assert_eq!(judge(&signer, job("uid-1"), Some(&sealed)), Trust::Sealed);
        // Read back from JSON, as the API server returns it.
        let text = serde_json::to_string(&sealed).expect("serializes");
        let read: TensorFlowTrainingJobStatus = serde_json::from_str(&text).expect("reads");
        assert_eq!(judge(&signer, job("uid-1"), Some(&read)), Trust::Sealed);
        assert!(!judge(&signer, job("uid-2"), Some(&sealed)).is_believed());
        let edits: [fn(&mut TensorFlowTrainingJobStatus); 5] = [
            |s| s.phase = Some(JobPhase::Succeeded),
            |s| s.backoff_count = 99,
            |s| {
                if let Some(p) = s.placement.as_mut() {
                    p.epoch = 3
                }
            },
            |s| {
                if let Some(p) = s.placement.as_mut() {
                    p.assignment = Some([("worker-0".into(), "member-2".into())].into())
                }
            },
            |s| {
                if let Some(p) = s.placement.as_mut() {
                    p.replica_specs_digest = Some(spec_digest("[{}]"))
                }
            },
        ];
        for edit in edits {
            let mut forged = sealed.clone();
            edit(&mut forged);
            assert!(matches!(
                judge(&signer, job("uid-1"), Some(&forged)),
                Trust::Forged(_)
            ));
        }
        let other_key = Signer::new(b"another key, another controller.", None);
        let theirs = seal(&other_key, "uid-1", running());
        assert!(!judge(&signer, job("uid-1"), Some(&theirs)).is_believed());
    }

    #[test]
    fn an_unsealed_status_is_believed_only_for_jobs_from_before_sealing() {
        let signer = signer();
        let before = Timestamp::from_second(1_700_000_000).expect("a time");
        let after = Timestamp::from_second(1_900_000_000).expect("a time");
        let created = |created: Option<Timestamp>, admitted: bool| Owner {
            uid: "uid-1",
            created,
            admitted,
        };
        let status = running();
        let empty = TensorFlowTrainingJobStatus::default();
        let rows = [
            (
                created(Some(before), true),
                Some(&status),
                Some(Trust::Legacy),
            ),
            (created(Some(after), true), Some(&status), None),
            (created(None, true), Some(&status), None),
            (created(Some(after), false), None, Some(Trust::Fresh)),
            (
                created(Some(after), false),
                Some(&empty),
                Some(Trust::Fresh),
            ),
            // Admitted, so a sealed status was written first: removed since.
            (created(Some(after), true), None, None),
            (created(Some(after), true), Some(&empty), None),
            (created(Some(before), true), None, Some(Trust::Fresh)),
        ];
        for (owner, status, expected) in rows {
            let verdict = judge(&signer, owner, status);
            match expected {
                Some(expected) => assert_eq!(verdict, expected, "{owner:?} {status:?}"),
                None => assert!(
                    matches!(verdict, Trust::Forged(_)),
                    "{owner:?} {status:?}: {verdict:?}"
                ),
            }
        }
    }

    #[test]
    fn the_accepted_specs_are_the_text_whose_digest_was_recorded() {
        let (honest, forged) = (r#"[{"a":1}]"#, r#"[{"a":2}]"#);
        let digest = spec_digest(honest);
        let cases = [
            (Some(honest), honest, Accepted::Verified(honest)),
            // The annotation forged, the spec not edited: the spec is it.
            (Some(forged), honest, Accepted::Verified(honest)),
            (None, honest, Accepted::Verified(honest)),
            // The annotation honest, the spec edited: the annotation.
            (Some(honest), forged, Accepted::Verified(honest)),
            (Some(forged), forged, Accepted::Unverifiable),
            (None, forged, Accepted::Unverifiable),
        ];
        for (annotation, current, expected) in cases {
            assert_eq!(
                accepted_specs(Some(&digest), annotation, current),
                expected,
                "{annotation:?} {current}"
            );
        }
        assert_eq!(
            accepted_specs(None, Some(forged), honest),
            Accepted::Unrecorded(Some(forged))
        );
    }
}
