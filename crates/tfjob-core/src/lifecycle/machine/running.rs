//! A running job: its replicas' reports and exits, restarts, the deadline,
//! and the job's end (succeeded, failed) with its clean-up policy.

use super::*;

impl Step<'_> {
    /// Whether the deadline clock runs: the job has a span and is not done.
    pub(super) fn running(&self) -> bool {
        !self.terminal()
            && self.job.status.start_time.is_some()
            && !matches!(
                self.job.stage,
                Stage::Paused
                    | Stage::Finished
                    | Stage::Deleting { .. }
                    | Stage::Retiring {
                        then: Then::Pause,
                        ..
                    }
            )
    }

    /// When the deadline of the current span passes: `activeDeadlineSeconds`
    /// after `startTime`, less the time active before a failover.
    pub(super) fn deadline(&self) -> Option<Timestamp> {
        let start = self.job.status.start_time.as_ref()?.0;
        let seconds = self.job.spec.deadline_seconds?;
        let earlier = i64::try_from(self.active_seconds()).unwrap_or(i64::MAX);
        start
            .checked_add(jiff::SignedDuration::from_secs(
                seconds.saturating_sub(earlier),
            ))
            .ok()
    }

    pub(super) fn arm_deadline(&mut self) {
        if let Some(at) = self.deadline()
            && self.running()
        {
            self.emit(Effect::ArmDeadline { at });
        }
    }

    pub(super) fn replica_report(
        &mut self,
        view: ReplicaView,
        epoch: u64,
        blocked: Option<Blocked>,
    ) {
        if epoch != self.job.replica_epoch(view.key)
            || !matches!(self.job.stage, Stage::Active | Stage::Finished)
        {
            // A replica of an earlier placement, being torn down.
            return;
        }
        match blocked {
            Some(blocked) if self.job.stage == Stage::Active => {
                if self.job.blocked.get(&view.key) != Some(&blocked) {
                    self.record(true, blocked.reason, blocked.message.clone());
                    self.job.blocked.insert(view.key, blocked);
                }
            }
            _ => {
                self.job.blocked.remove(&view.key);
            }
        }
        self.job.set_view(view.clone());
        if self.job.stage != Stage::Active {
            return;
        }
        if view.is_finished() || (view.phase == ReplicaPhase::Deleted && view.uid.is_some()) {
            self.on_exit(&view);
        }
        // Once every pod is past Pending the clusters' own capacity shows
        // them, so the placement's hold can go.
        if self
            .job
            .views
            .values()
            .all(|v| !matches!(v.phase, ReplicaPhase::Creating | ReplicaPhase::Pending))
        {
            self.release();
        }
    }

    pub(super) fn on_exit(&mut self, view: &ReplicaView) {
        let Some(uid) = view.uid.clone() else { return };
        if self.terminal() {
            return;
        }
        // A pod deleted by someone else (or evicted) ended as a deletion
        // ends a container: SIGTERM, exit 143.
        let deleted = view.phase == ReplicaPhase::Deleted;
        let exit = Exit {
            replica: view.key,
            succeeded: view.phase == ReplicaPhase::Succeeded,
            exit_code: if deleted {
                Some(restart::DELETED_EXIT_CODE)
            } else {
                view.exit_code
            },
            deleted,
        };
        let debug = self.job.running_mode == Some(PodMode::Debug);
        let policy = self
            .job
            .replicas
            .policies
            .get(&view.key.replica_type)
            .copied()
            .unwrap_or(RestartPolicy::Never);
        let budget = self.budget();
        if !self.job.handled.insert(uid.clone()) {
            // An exit an earlier controller counted a restart for, whose pod
            // is still there: replace it now, without counting again.
            if self.job.adopted_exits.remove(&uid)
                && restart::restart_still_due(exit, &view.pod_name, policy, budget, debug)
            {
                self.emit(Effect::RestartReplica { key: view.key, uid });
            }
            return;
        }
        if exit.succeeded && Some(view.key) == self.job.replicas.master && !debug {
            self.succeed(view.key);
            return;
        }
        match restart::decide(exit, &view.pod_name, policy, budget, debug) {
            Verdict::Restart => {
                self.emit(Effect::Milestone(Milestone::Restarted(view.clone())));
                self.job.status.backoff_count += 1;
                self.job.count_restart(view.key.replica_type);
                let code = match exit.exit_code {
                    _ if exit.deleted => "its pod was deleted".to_string(),
                    Some(code) => format!("exit code {code}"),
                    None => "no exit code".to_string(),
                };
                let message = format!(
                    "Restarting replica {} after {code} (restart {} of the job).",
                    view.key, self.job.status.backoff_count
                );
                self.record(false, reason::RESTARTING, message);
                // The count lands first: a controller restart in between
                // neither loses nor repeats it (see `adopted_exits`).
                self.persist_then(vec![Effect::RestartReplica { key: view.key, uid }]);
            }
            Verdict::Done => {}
            Verdict::FailJob { failure, message } => self.fail(failure, &message),
            Verdict::ReplicaFailure { message } => {
                self.set(
                    Cond::ReplicaFailure,
                    ConditionStatus::True,
                    reason::REPLICA_FAILED,
                    &message,
                );
                self.record(true, reason::REPLICA_FAILED, message);
            }
        }
    }

    pub(super) fn clean_up_policy(&self) -> CleanUpPolicy {
        if self.job.failure.is_some_and(Failure::deletes_every_pod) {
            CleanUpPolicy::All
        } else {
            self.job.spec.clean_up
        }
    }

    /// The job ended: replicas clean up, nothing is held any more.
    pub(super) fn end(&mut self) {
        self.release();
        self.job.moving = None;
        self.job.deferred.clear();
        if self.condition_is(Cond::Paused, ConditionStatus::True) {
            self.set(
                Cond::Paused,
                ConditionStatus::False,
                reason::ENDED,
                "The job has ended.",
            );
        }
        let policy = self.clean_up_policy();
        self.job.stage = Stage::Finished;
        // The end lands before any clean-up: a controller that restarts
        // after a pod was deleted must know the job ended, or it would
        // make the pod again.
        // PodGroups serve scheduling only: they go with the job's end.
        self.persist_then(vec![
            Effect::FinishReplicas(policy),
            Effect::DeleteMemberPodGroups,
        ]);
    }

    pub(super) fn fail(&mut self, failure: Failure, message: &str) {
        if self.terminal() {
            return;
        }
        self.job.failure = Some(failure);
        let reason = failure.reason();
        self.job.status.phase = Some(JobPhase::Failed);
        self.set(Cond::Failed, ConditionStatus::True, reason, message);
        self.set(
            Cond::Completed,
            ConditionStatus::False,
            reason::FAILED,
            "The job has failed.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::FAILED,
            "The job has failed.",
        );
        if failure.is_a_replicas() {
            self.set(Cond::ReplicaFailure, ConditionStatus::True, reason, message);
        }
        self.record(true, reason::FAILED, message);
        self.end();
    }

    pub(super) fn succeed(&mut self, master: ReplicaKey) {
        if self.terminal() {
            return;
        }
        let done = "The job has finished successfully.";
        self.job.status.phase = Some(JobPhase::Succeeded);
        self.set(
            Cond::Completed,
            ConditionStatus::True,
            reason::SUCCEEDED,
            done,
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::SUCCEEDED,
            done,
        );
        self.set(
            Cond::Failed,
            ConditionStatus::False,
            reason::SUCCEEDED,
            done,
        );
        self.record(
            false,
            reason::SUCCEEDED,
            format!("The job succeeded: its master {master} finished."),
        );
        self.end();
    }
}
