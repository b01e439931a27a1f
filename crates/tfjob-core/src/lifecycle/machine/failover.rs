//! Failover and retiring: lost clusters, a new placement epoch, and the
//! old replicas torn down before what follows.

use super::*;

impl Step<'_> {
    /// Counts one restart and places the whole job anew under a new epoch,
    /// or fails it when the budget is spent. The restart is the job's
    /// (`backoffCount`) and the first lost replica's (its type's
    /// `restartCount`; the job's first replica when its placement could
    /// not be used at all), so that the restart counts add up to
    /// `backoffCount`.
    pub(super) fn fail_over(&mut self, why: &str) {
        let lost = self.job.lost.clone();
        if !lost.is_empty() {
            self.emit(Effect::AbandonReplicasOn(lost));
        }
        if let Verdict::FailJob { failure, message } = restart::on_cluster_lost(why, self.budget())
        {
            self.fail(failure, &message);
            return;
        }
        let assignment = self.assignment().unwrap_or_default();
        let charged = assignment
            .iter()
            .find(|(_, cluster)| self.job.lost.contains(*cluster))
            .map(|(key, _)| *key)
            .or_else(|| self.job.replicas.keys.first().copied());
        if let Some(charged) = charged {
            self.job.count_restart(charged.replica_type);
        }
        self.job.status.backoff_count += 1;
        self.job.status.phase = Some(JobPhase::Pending);
        let message = format!(
            "{why}; re-placing the job (restart {} of the job)",
            self.job.status.backoff_count
        );
        self.warn_not_running(reason::CLUSTER_LOST, message);
        self.retire_for(Then::Place, assignment);
    }

    /// Moves to a new epoch (keeping the assignment only for `Then::Start`),
    /// persists it, and only then tears the old replicas down.
    pub(super) fn retire_for(&mut self, then: Then, assignment: Assignment) {
        if then == Then::Place {
            // Waiting for the new placement's capacity does not count
            // towards the deadline: the clock stands until replicas start.
            self.stop_clock();
        }
        let epoch = self.job.epoch() + 1;
        let keep = (then == Then::Start).then_some(&assignment);
        self.set_placement(epoch, keep);
        let retiring = if self.job.has_actors {
            self.reachable(&assignment)
        } else {
            BTreeMap::new()
        };
        self.job.deferred.clear();
        self.job.clear_views();
        self.job.blocked.clear();
        self.job.running_mode = None;
        self.job.stage = Stage::Retiring {
            retiring: retiring.clone(),
            then,
        };
        let teardown = if retiring.is_empty() {
            Vec::new()
        } else {
            vec![Effect::RetireReplicas]
        };
        self.persist_then(teardown);
        if retiring.is_empty() {
            self.retired();
        }
    }

    pub(super) fn torn_down(&mut self, key: ReplicaKey) {
        match &mut self.job.stage {
            Stage::Retiring { retiring, .. } => {
                retiring.remove(&key);
                if retiring.is_empty() {
                    self.retired();
                }
            }
            Stage::Deleting {
                retiring: Some(retiring),
            } => {
                retiring.remove(&key);
                if retiring.is_empty() {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            _ => {}
        }
    }

    /// The old replicas are gone: on to what the spec says now.
    pub(super) fn retired(&mut self) {
        let Stage::Retiring { then, .. } = self.job.stage else {
            return;
        };
        self.job.has_actors = false;
        match then {
            _ if self.job.spec.pause => self.enter_paused(),
            Then::Start => self.start(Intent::Run(self.mode())),
            Then::Place | Then::Pause => self.request_placement(None),
        }
    }

    pub(super) fn clusters_lost(&mut self, lost: BTreeSet<String>) {
        self.job.lost = lost.clone();
        self.keep_off_lost_clusters();
        let deleting = matches!(self.job.stage, Stage::Deleting { .. });
        match &mut self.job.stage {
            Stage::Retiring { retiring, .. }
            | Stage::Deleting {
                retiring: Some(retiring),
            } => {
                let hit: BTreeSet<String> = retiring
                    .values()
                    .filter(|c| lost.contains(*c))
                    .cloned()
                    .collect();
                if hit.is_empty() {
                    return;
                }
                retiring.retain(|_, c| !hit.contains(c));
                let done = retiring.is_empty();
                self.emit(Effect::AbandonReplicasOn(hit));
                if done && deleting {
                    self.emit(Effect::RemoveFinalizer);
                } else if done {
                    self.retired();
                }
            }
            Stage::Preparing | Stage::Active => {
                let assignment = self.assignment().unwrap_or_default();
                if self.names_lost(&assignment) {
                    let why = self.lost_message(&assignment);
                    self.fail_over(&why);
                }
            }
            _ => {}
        }
    }

    /// Replicas being replaced in place (a run-mode switch) on a cluster
    /// now lost: the job is placed anew instead. Nothing that ran is lost
    /// beyond what the switch replaces, so no restart is counted.
    pub(super) fn keep_off_lost_clusters(&mut self) {
        let Stage::Retiring {
            then: Then::Start, ..
        } = self.job.stage
        else {
            return;
        };
        let assignment = self.assignment().unwrap_or_default();
        if !self.names_lost(&assignment) {
            return;
        }
        let message = format!(
            "{} while the replicas were being replaced: placing the job anew",
            self.lost_message(&assignment)
        );
        self.warn_not_running(reason::CLUSTER_LOST, message);
        let epoch = self.job.epoch();
        self.set_placement(epoch, None);
        self.stop_clock();
        if let Stage::Retiring { then, .. } = &mut self.job.stage {
            *then = Then::Place;
        }
        self.persist_then(Vec::new());
    }
}
