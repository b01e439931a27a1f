//! Deletion: the job's replicas and PodGroups go, then the finalizer.

use super::*;

impl Step<'_> {
    pub(super) fn delete(&mut self) {
        if matches!(self.job.stage, Stage::Deleting { .. }) {
            return;
        }
        self.release();
        self.job.deferred.clear();
        let moving = self.job.moving.take();
        self.record(
            false,
            reason::DELETING,
            "Deleting the job's pods and services.",
        );
        self.emit(Effect::DeleteMemberPodGroups);
        let live = match &self.job.stage {
            Stage::Retiring { retiring, .. } => Some(retiring.clone()),
            _ if self.job.has_actors => Some(without_unstarted(
                self.assignment().unwrap_or_default(),
                moving.as_ref(),
            )),
            // No replica actors: an earlier controller's may still run.
            _ => None,
        };
        match live {
            Some(live) => {
                let retiring = self.reachable(&live);
                let done = retiring.is_empty();
                self.job.stage = Stage::Deleting {
                    retiring: Some(retiring),
                };
                self.emit(Effect::RetireReplicas);
                if done {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            // Just started: find what an earlier controller left running.
            None => match self.assignment() {
                Some(recorded) => {
                    self.job.stage = Stage::Deleting { retiring: None };
                    self.emit(Effect::RequestPlacement {
                        recorded: Some(recorded),
                    });
                }
                None => {
                    self.job.stage = Stage::Deleting {
                        retiring: Some(BTreeMap::new()),
                    };
                    self.emit(Effect::RemoveFinalizer);
                }
            },
        }
    }
}
