//! Creates that did not end in an object: a name taken or a cluster that
//! refuses for now is retried with backoff; a refusal for good goes to the
//! job.

use super::*;
use crate::api::reason;
use crate::lifecycle::refusal::{RefusalKind, classify};

impl<R: Clone> ReplicaState<R> {
    /// A create ended without an object: wait and retry, or for good.
    pub(super) fn failed(&mut self, object: Object, failure: Failure) {
        let Identity {
            namespace,
            name,
            cluster,
            key,
            ..
        } = &self.id;
        let kind = object.word();
        let blocked = match failure {
            Failure::Unbuildable(why) => {
                self.refusal = Some(
                    self.id
                        .refusal(true, format!("its {kind} cannot be built: {why}")),
                );
                return;
            }
            Failure::Refused {
                code,
                message,
                shown,
            } => match classify(code, &message) {
                class @ (RefusalKind::ThisCluster | RefusalKind::Everywhere) => {
                    let message = format!(
                        "cluster {cluster} refused to create {kind} {namespace}/{name}: {shown}"
                    );
                    self.log(true, message.clone());
                    self.refusal = Some(self.id.refusal(class == RefusalKind::Everywhere, message));
                    return;
                }
                RefusalKind::NamespaceMissing => {
                    let blocked = Blocked {
                        reason: reason::NAMESPACE_MISSING,
                        message: format!(
                            "namespace {namespace} on cluster {cluster} does not exist (or is being \
                             deleted); replica {key} waits for it"
                        ),
                    };
                    self.effects.push(Effect::NamespaceMissing);
                    blocked
                }
                RefusalKind::Transient => Blocked {
                    reason: reason::CREATE_REFUSED,
                    message: format!(
                        "creating {kind} {namespace}/{name} on cluster {cluster} was refused: {shown}"
                    ),
                },
            },
            Failure::NoAnswer(shown) => Blocked {
                reason: reason::CREATE_REFUSED,
                message: format!(
                    "creating {kind} {namespace}/{name} on cluster {cluster} failed: {shown}"
                ),
            },
        };
        self.block(object, blocked);
        self.retry(object);
    }

    pub(super) fn block(&mut self, object: Object, blocked: Blocked) {
        let slot = match object {
            Object::Pod => &mut self.pod_blocked,
            Object::Service => &mut self.service_blocked,
        };
        if slot.as_ref() != Some(&blocked) {
            let message = blocked.message.clone();
            *slot = Some(blocked);
            self.log(true, message);
        }
    }

    pub(super) fn retry(&mut self, object: Object) {
        self.blocked_tries = self.blocked_tries.saturating_add(1);
        self.effects.push(Effect::RetryAfter {
            object,
            tries: self.blocked_tries,
        });
    }

    pub(super) fn unblock(&mut self, object: Object) {
        let slot = match object {
            Object::Pod => &mut self.pod_blocked,
            Object::Service => &mut self.service_blocked,
        };
        if slot.take().is_some() {
            self.blocked_tries = 0;
        }
    }
}
