//! The pod: what the cache shows and what creates and reads answered,
//! a restart's replacement, and deletes of our pods only.

use super::*;
use crate::builders::PLACEMENT_EPOCH_LABEL;

impl<R: Clone> ReplicaState<R> {
    /// Takes a pod seen under the name: its own, one of another epoch to
    /// delete, or one not ours to wait for.
    pub(super) fn see(&mut self, seen: PodSighting) {
        let uid = seen.pod.metadata.uid.clone();
        if !seen.ours {
            if let (PodState::Live(_), Goal::Run { vanished, .. }) = (&self.pod, &mut self.goal) {
                *vanished = true;
            }
            self.pod = PodState::Foreign { cached: true };
            if matches!(self.goal, Goal::Run { .. }) && !self.creating {
                self.block(Object::Pod, self.id.name_taken(Object::Pod));
            }
            return;
        }
        if epoch_of(&seen.pod) != Some(self.id.epoch) {
            let known = matches!(&self.pod, PodState::Stale { uid: stale } if *stale == uid);
            if !known && !seen.pod.is_deleting() {
                self.log(
                    false,
                    format!(
                        "deleting pod {}/{} on {} of an earlier placement (epoch {:?})",
                        self.id.namespace,
                        self.id.name,
                        self.id.cluster,
                        epoch_of(&seen.pod)
                    ),
                );
                self.delete_pod(uid.clone());
            }
            self.pod = PodState::Stale { uid };
            return;
        }
        if uid.is_some() {
            self.last_uid = uid.clone();
        }
        // The pod's name is ours now.
        self.unblock(Object::Pod);
        match &self.pod {
            PodState::Deleting(old) if old.metadata.uid == uid => {
                self.pod = PodState::Deleting(seen.pod);
            }
            _ => {
                if let Goal::Run { recipe, .. } = &mut self.goal {
                    *recipe = None;
                }
                self.pod = PodState::Live(seen.pod);
            }
        }
    }

    pub(super) fn gone(&mut self, uid: Option<String>) {
        match &self.pod {
            // An older pod of the name went after ours came from its create's answer.
            PodState::Live(pod) | PodState::Deleting(pod)
                if uid.is_some() && pod.metadata.uid != uid =>
            {
                return;
            }
            PodState::Live(_) => {
                if let Goal::Run { vanished, .. } = &mut self.goal {
                    *vanished = true;
                }
            }
            _ => {}
        }
        self.pod = PodState::Absent;
    }

    pub(super) fn pod_created(&mut self, answer: Created<PodSighting>) {
        self.creating = false;
        match answer {
            Created::Made(seen) | Created::Taken(seen @ PodSighting { ours: true, .. }) => {
                self.unblock(Object::Pod);
                if !matches!(self.pod, PodState::Live(_) | PodState::Deleting(_)) {
                    self.see(PodSighting { ours: true, ..seen });
                }
            }
            Created::Taken(_) => {
                if matches!(self.pod, PodState::Absent | PodState::Reading) {
                    self.pod = PodState::Foreign { cached: false };
                }
                self.block(Object::Pod, self.id.name_taken(Object::Pod));
                if matches!(self.pod, PodState::Foreign { cached: false }) {
                    self.retry(Object::Pod);
                }
            }
            Created::Freed => {
                if matches!(self.pod, PodState::Foreign { cached: false }) {
                    self.pod = PodState::Absent;
                }
                self.ensure_pod();
            }
            Created::Failed(failure) => self.failed(Object::Pod, failure),
        }
    }

    /// A teardown's read of the name: a pod of ours the cache did not show
    /// is deleted too. Once the cache showed the name since, it knows better.
    pub(super) fn pod_read(&mut self, read: Read<PodSighting>) {
        if !matches!(self.pod, PodState::Reading) {
            return;
        }
        self.pod = PodState::Absent;
        match read {
            Read::Found(seen) if seen.ours && !seen.pod.is_deleting() => {
                self.delete_pod(seen.pod.metadata.uid.clone());
            }
            Read::Found(_) | Read::Nothing => {}
            Read::Failed(why) => self.log(
                true,
                format!(
                    "reading pod {}/{} on {} to delete it failed: {why}",
                    self.id.namespace, self.id.name, self.id.cluster
                ),
            ),
        }
    }

    pub(super) fn restart(&mut self, uid: String, next: Option<R>) {
        let Goal::Run { recipe, vanished } = &mut self.goal else {
            return;
        };
        match &self.pod {
            PodState::Live(pod) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => {
                *recipe = next;
                self.pod = PodState::Deleting(pod.clone());
                self.delete_pod(Some(uid));
            }
            PodState::Deleting(pod) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => {
                *recipe = next;
            }
            // A newer pod than the one asked about: the replica has it already.
            PodState::Live(_) | PodState::Deleting(_) => {}
            _ => {
                *recipe = next;
                *vanished = false;
                self.ensure_pod();
            }
        }
    }

    pub(super) fn begin_teardown(&mut self) {
        if matches!(self.pod, PodState::Absent | PodState::Foreign { .. }) {
            self.pod = PodState::Reading;
            self.effects.push(Effect::ReadPod);
        }
    }

    /// Creates the pod when the replica should have one and the name is free.
    pub(super) fn ensure_pod(&mut self) {
        let Goal::Run {
            recipe: Some(recipe),
            vanished: false,
        } = &self.goal
        else {
            return;
        };
        if self.creating || !matches!(self.pod, PodState::Absent) {
            return;
        }
        self.creating = true;
        self.effects.push(Effect::CreatePod(recipe.clone()));
    }

    /// Deletes our pod of this epoch, unless it is on its way out.
    pub(super) fn delete_own_pod(&mut self) {
        if let PodState::Live(pod) = &self.pod
            && !pod.is_deleting()
        {
            let pod = pod.clone();
            self.delete_pod(pod.metadata.uid.clone());
            self.pod = PodState::Deleting(pod);
        }
    }

    fn delete_pod(&mut self, uid: Option<String>) {
        // A pod without a uid is none the API serves: nothing to delete.
        if let Some(uid) = uid {
            self.effects.push(Effect::DeletePod { uid });
        }
    }
}

/// The placement epoch a pod was created under (its label).
pub(super) fn epoch_of(pod: &ObservedPod) -> Option<u64> {
    pod.labels.get(PLACEMENT_EPOCH_LABEL)?.parse().ok()
}
