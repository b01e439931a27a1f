//! Which pods and services this controller made. Labels can be written by
//! anyone who may create pods: a user's own pod carrying a job's labels was
//! once adopted as a replica (the job "succeeded" on the user's image, and
//! the user's pod was deleted at clean-up). Every pod and service the
//! controller creates carries a signature — an HMAC, keyed by a secret
//! only the controller reads, of the job's uid, the replica, the placement
//! epoch and the kind — and only objects whose signature verifies are
//! adopted. The key lives in the Secret `tfjob-federator-signing-key` of
//! the controller's namespace on home, created by the first controller that
//! needs it. Objects made before that Secret existed carry no signature and
//! are trusted by their labels, so an upgrade keeps running jobs.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use ring::hmac;

use crate::api::ReplicaKey;
use crate::builders::{MANAGED_BY_LABEL, MANAGER, PLACEMENT_EPOCH_LABEL};
use crate::observed::ObservedPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::sync::Arc;

/// The annotation that carries an object's signature.
pub const SIGNATURE_ANNOTATION: &str = "federation.tfjob.io/signature";

/// The Secret (in the controller's namespace) holding the key, and its key.
pub const KEY_SECRET: &str = "tfjob-federator-signing-key";
pub const KEY_FIELD: &str = "key";

pub struct Signer {
    key: hmac::Key,
    /// The fence key (`fence_key`), derived from `key`.
    fence: FenceVerifier,
    /// When the key was made: older unsigned objects predate signing.
    since: Option<Timestamp>,
    /// When the controllers began to seal job statuses (`record`): the
    /// unsealed statuses of older jobs predate sealing.
    sealing_since: Option<Timestamp>,
}

/// A Secret (no data) in the controller's namespace whose creation time
/// says since when statuses are sealed: made by the first controller that
/// seals, so that jobs from before an upgrade keep their unsealed status.
pub const SEALING_MARK_SECRET: &str = "tfjob-federator-sealing-since";

/// What is signed for one object.
pub fn subject(job_uid: &str, replica: &str, epoch: &str, kind: &str) -> String {
    format!("{job_uid}/{replica}/{epoch}/{kind}")
}

impl Signer {
    pub fn new(key: &[u8], since: Option<Timestamp>) -> Signer {
        let key = hmac::Key::new(hmac::HMAC_SHA256, key);
        let fence = FenceVerifier::new(hmac::sign(&key, FENCE_KEY_DERIVATION).as_ref());
        Signer {
            key,
            fence,
            since,
            sealing_since: None,
        }
    }

    /// The same signer, knowing since when statuses are sealed.
    pub fn sealing_since(self, sealing_since: Option<Timestamp>) -> Signer {
        Signer {
            sealing_since,
            ..self
        }
    }

    /// Whether a job created at `created` predates sealing.
    pub fn sealing_began_after(&self, created: Option<Timestamp>) -> bool {
        matches!((created, self.sealing_since), (Some(created), Some(since)) if created < since)
    }

    /// The key a member's fence verifies pods with (see [`FenceVerifier`]):
    /// derived from this one, so that handing it to the members gives them
    /// no power to sign anything the controller trusts.
    pub fn fence_key(&self) -> &[u8] {
        &self.fence.material
    }

    pub fn sign(&self, subject: &str) -> String {
        self.sign_bytes(subject.as_bytes())
    }

    pub fn sign_bytes(&self, text: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, text).as_ref())
    }

    /// Whether `signature` is this key's of `text`.
    pub fn verifies(&self, text: &[u8], signature: &str) -> bool {
        URL_SAFE_NO_PAD
            .decode(signature)
            .is_ok_and(|tag| hmac::verify(&self.key, text, &tag).is_ok())
    }

    /// Whether an object with this signature (if any), made at `created`,
    /// is ours for `subject`.
    pub fn trusts(
        &self,
        subject: &str,
        signature: Option<&str>,
        created: Option<Timestamp>,
    ) -> bool {
        match signature {
            Some(signature) => self.verifies(subject.as_bytes(), signature),
            None => {
                matches!((created, self.since), (Some(created), Some(since)) if created < since)
            }
        }
    }
}

/// The annotation that carries a pod's fence signature: an HMAC of the same
/// subject under the fence key, which the members' fences hold.
pub const FENCE_SIGNATURE_ANNOTATION: &str = "federation.tfjob.io/fence-signature";

/// What the fence key is derived from (an HMAC of it under the controller's key).
const FENCE_KEY_DERIVATION: &[u8] = b"tfjob-federator fence key v1";

/// The fence key: the controller signs each pod with it too, and a
/// member's fence (which holds only this key, never the controller's)
/// stops only pods whose fence signature verifies. Whoever holds it can
/// make a pod the fence would stop — on a cluster where they may create
/// pods anyway — and nothing the controller trusts.
#[derive(Clone)]
pub struct FenceVerifier {
    key: hmac::Key,
    material: Vec<u8>,
}

impl FenceVerifier {
    pub fn new(material: &[u8]) -> FenceVerifier {
        FenceVerifier {
            key: hmac::Key::new(hmac::HMAC_SHA256, material),
            material: material.to_vec(),
        }
    }

    pub fn sign(&self, subject: &str) -> String {
        URL_SAFE_NO_PAD.encode(hmac::sign(&self.key, subject.as_bytes()).as_ref())
    }

    /// Whether `signature` is this key's of `subject`.
    pub fn verifies(&self, subject: &str, signature: &str) -> bool {
        URL_SAFE_NO_PAD
            .decode(signature)
            .is_ok_and(|tag| hmac::verify(&self.key, subject.as_bytes(), &tag).is_ok())
    }
}

/// Fresh random key material.
pub fn new_key() -> Result<[u8; 32], ring::error::Unspecified> {
    let mut key = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)?;
    Ok(key)
}

/// What [`Trust::owns`] reads of an object: two labels, one annotation and
/// its creation time.
pub trait Marked {
    fn label(&self, key: &str) -> Option<&str>;
    fn annotation(&self, key: &str) -> Option<&str>;
    fn created(&self) -> Option<Timestamp>;
}

impl Marked for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
    fn created(&self) -> Option<Timestamp> {
        self.creation_timestamp.as_ref().map(|t| t.0)
    }
}

impl Marked for ObservedPod {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
    fn created(&self) -> Option<Timestamp> {
        self.metadata.created()
    }
}

/// Which objects under a replica's name are its own: made by this
/// controller for this replica (labels, and a signature that verifies), so
/// a user's pod that copies the labels is never adopted.
#[derive(Clone)]
pub struct Trust {
    pub signer: Arc<Signer>,
    pub job_uid: String,
    pub replica: ReplicaKey,
}

impl Trust {
    pub fn owns(&self, object: &impl Marked, kind: &str) -> bool {
        if object.label(MANAGED_BY_LABEL) != Some(MANAGER) {
            return false;
        }
        let epoch = object.label(PLACEMENT_EPOCH_LABEL).unwrap_or("");
        let subject = subject(&self.job_uid, &self.replica.to_string(), epoch, kind);
        let signature = object.annotation(SIGNATURE_ANNOTATION);
        self.signer.trusts(&subject, signature, object.created())
    }

    /// Signs an object this controller is about to create.
    pub fn sign(&self, meta: &mut ObjectMeta, epoch: u64, kind: &str) {
        let subject = subject(
            &self.job_uid,
            &self.replica.to_string(),
            &epoch.to_string(),
            kind,
        );
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.insert(SIGNATURE_ANNOTATION.to_string(), self.signer.sign(&subject));
        // Only pods are stopped by a fence.
        if kind == "Pod" {
            annotations.insert(
                FENCE_SIGNATURE_ANNOTATION.to_string(),
                self.signer.fence.sign(&subject),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_signature_of_this_key_for_this_object_is_trusted() {
        let since = Timestamp::from_second(1_800_000_000).expect("a time");
        let signer = Signer::new(b"0123456789abcdef0123456789abcdef", Some(since));
        let worker = subject("uid-1", "worker-0", "2", "Pod");
        let signature = signer.sign(&worker);
        assert!(signer.trusts(&worker, Some(&signature), None));
        for other in [
            subject("uid-2", "worker-0", "2", "Pod"),
            subject("uid-1", "worker-1", "2", "Pod"),
            subject("uid-1", "worker-0", "3", "Pod"),
            subject("uid-1", "worker-0", "2", "Service"),
        ] {
            assert!(!signer.trusts(&other, Some(&signature), None), "{other}");
        }
        let stranger = Signer::new(b"another key, another controller.", Some(since));
        assert!(!stranger.trusts(&worker, Some(&signature), None));
        assert!(!signer.trusts(&worker, Some("not base64 !"), None));
        // Unsigned: trusted only if made before signing began.
        let before = Timestamp::from_second(1_700_000_000).expect("a time");
        let after = Timestamp::from_second(1_900_000_000).expect("a time");
        assert!(signer.trusts(&worker, None, Some(before)));
        assert!(!signer.trusts(&worker, None, Some(after)));
        assert!(!signer.trusts(&worker, None, None));
        assert_eq!(new_key().map(|k| k.len()), Ok(32));
    }

    #[test]
    fn the_fence_key_verifies_fence_signatures_and_signs_nothing_the_controller_trusts() {
        let signer = Signer::new(b"0123456789abcdef0123456789abcdef", None);
        let fence = FenceVerifier::new(signer.fence_key());
        let worker = subject("uid-1", "worker-0", "2", "Pod");
        let fence_signature = fence.sign(&worker);
        assert!(fence.verifies(&worker, &fence_signature));
        assert!(!fence.verifies(&subject("uid-1", "worker-1", "2", "Pod"), &fence_signature));
        // The controller's signature is not the fence's, nor the other way.
        assert!(!fence.verifies(&worker, &signer.sign(&worker)));
        assert!(!signer.trusts(&worker, Some(&fence_signature), None));
        assert_ne!(signer.fence_key(), b"0123456789abcdef0123456789abcdef");
        // Another controller's fence key does not verify.
        let stranger = Signer::new(b"another key, another controller.", None);
        assert!(!FenceVerifier::new(stranger.fence_key()).verifies(&worker, &fence_signature));
    }
}
