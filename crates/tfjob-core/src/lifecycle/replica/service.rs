//! The service: created with the replica, exported, and deleted only
//! when it is ours.

use super::*;

impl<R: Clone> ReplicaState<R> {
    pub(super) fn service_created(&mut self, answer: Created<ServiceSighting>) {
        let ServiceState::Creating(recipe) = &self.service else {
            return;
        };
        let recipe = recipe.clone();
        match answer {
            Created::Made(seen) | Created::Taken(seen @ ServiceSighting { ours: true, .. }) => {
                self.service = ServiceState::Exists { uid: seen.uid };
                self.unblock(Object::Service);
                if self.id.export_services && matches!(self.goal, Goal::Run { .. }) {
                    self.effects.push(Effect::ExportService);
                }
            }
            Created::Taken(_) => {
                self.service = ServiceState::ToCreate(recipe);
                self.block(Object::Service, self.id.name_taken(Object::Service));
                self.retry(Object::Service);
            }
            Created::Freed => {
                self.service = ServiceState::ToCreate(recipe);
                self.ensure_service();
            }
            Created::Failed(failure) => {
                self.service = ServiceState::ToCreate(recipe);
                self.failed(Object::Service, failure);
            }
        }
    }

    pub(super) fn service_read(&mut self, read: Read<ServiceSighting>) {
        if !matches!(self.service, ServiceState::Reading) {
            return;
        }
        self.service = ServiceState::Gone;
        match read {
            Read::Found(ServiceSighting {
                uid: Some(uid),
                ours: true,
            }) => {
                self.service = ServiceState::Deleting;
                self.effects.push(Effect::DeleteService { uid });
            }
            // Never a service not ours; one without a uid is none the API serves.
            Read::Found(_) | Read::Nothing => {}
            Read::Failed(why) => self.log(
                true,
                format!(
                    "reading service {}/{} on {} to delete it failed, so it is left: {why}",
                    self.id.namespace, self.id.name, self.id.cluster
                ),
            ),
        }
    }

    pub(super) fn ensure_service(&mut self) {
        if !matches!(self.goal, Goal::Run { .. }) {
            return;
        }
        if let ServiceState::ToCreate(recipe) = &self.service {
            let recipe = recipe.clone();
            self.effects.push(Effect::CreateService(recipe.clone()));
            self.service = ServiceState::Creating(recipe);
        }
    }

    /// Deletes the service once: by its uid when known, else after a read
    /// says it is ours. One being created is deleted once answered.
    pub(super) fn delete_service(&mut self) {
        match &self.service {
            ServiceState::Exists { uid: Some(uid) } => {
                let uid = uid.clone();
                self.effects.push(Effect::DeleteService { uid });
                self.service = ServiceState::Deleting;
            }
            ServiceState::Exists { uid: None }
            | ServiceState::ToCreate(_)
            | ServiceState::Untracked => {
                self.effects.push(Effect::ReadService);
                self.service = ServiceState::Reading;
            }
            ServiceState::Creating(_)
            | ServiceState::Reading
            | ServiceState::Deleting
            | ServiceState::Gone => {}
        }
    }
}
