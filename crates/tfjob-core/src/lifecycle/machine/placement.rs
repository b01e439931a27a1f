//! Placement: asking for one, taking it (or the recorded one) and starting
//! the replicas on it; a cluster that refuses the job's pods for good.

use super::*;

impl Step<'_> {
    pub(super) fn request_placement(&mut self, recorded: Option<Assignment>) {
        let is_recorded = recorded.is_some();
        if !is_recorded {
            self.job.holding = true;
        }
        if !matches!(self.job.stage, Stage::Finished | Stage::Deleting { .. }) {
            self.job.stage = Stage::Placing {
                recorded: is_recorded,
            };
        }
        self.emit(Effect::RequestPlacement { recorded });
    }

    /// A cluster refused a replica for good: the job fails (no cluster would
    /// take it) or is placed anew without that cluster. Nothing ran, so no
    /// restart is counted.
    pub(super) fn refused(&mut self, refusal: Refusal) {
        if refusal.epoch != self.job.replica_epoch(refusal.key)
            || self.job.stage != Stage::Active
            || self.terminal()
        {
            return;
        }
        let Refusal {
            key,
            cluster,
            everywhere,
            message,
            ..
        } = refusal;
        if everywhere {
            self.fail(
                Failure::CreateRefused,
                &format!("replica {key}: {message}; no cluster would accept it"),
            );
            return;
        }
        let why = format!("refused replica {key}: {message}");
        self.job.excluded.insert(cluster.clone(), why.clone());
        let message = format!("cluster {cluster} {why}; placing the job without {cluster}");
        self.job.status.phase = Some(JobPhase::Pending);
        self.warn_not_running(reason::CREATE_REFUSED, message);
        self.release();
        let assignment = self.assignment().unwrap_or_default();
        self.retire_for(Then::Place, assignment);
    }

    pub(super) fn placed(&mut self, assignment: Assignment) {
        if let Some(Moving::Placing(keys)) = &self.job.moving {
            // The clusters of a partial failover's replicas (an answer for
            // other replicas is an earlier request's: the current one is
            // still out).
            if self.job.stage == Stage::Active && assignment.keys().eq(keys.iter()) {
                self.moved(assignment);
            }
            return;
        }
        let epochs = self.job.epochs();
        match self.job.stage.clone() {
            Stage::Finished => {
                self.job.has_actors = true;
                let policy = self.clean_up_policy();
                self.emit(Effect::StartReplicas {
                    epochs,
                    assignment,
                    intent: Intent::Finish(policy),
                });
                self.emit(Effect::DeleteMemberPodGroups);
            }
            Stage::Deleting { retiring: None } => {
                self.job.has_actors = true;
                let retiring = self.reachable(&assignment);
                let done = retiring.is_empty();
                self.job.stage = Stage::Deleting {
                    retiring: Some(retiring),
                };
                self.emit(Effect::StartReplicas {
                    epochs,
                    assignment,
                    intent: Intent::Retire,
                });
                if done {
                    self.emit(Effect::RemoveFinalizer);
                }
            }
            Stage::Placing { recorded: true }
                if self.names_lost(&self.assignment().unwrap_or_default()) =>
            {
                // Lost while it was being resolved.
                let why = self.lost_message(&self.assignment().unwrap_or_default());
                self.recorded_unusable(&why);
            }
            Stage::Placing { recorded: false }
                if self.names_lost(&assignment) || !self.unplaced(&assignment).is_empty() =>
            {
                // An answer from before the cluster was lost (the placer
                // leaves lost clusters out), or not for every replica (an
                // earlier partial request's): ask again.
                self.release();
                self.request_placement(None);
            }
            Stage::Placing { recorded: true } => {
                if self.job.spec.pause {
                    // Paused while no controller ran: its replicas go, once
                    // the new epoch (without a placement) is stored.
                    self.show_paused();
                    self.set_placement(epochs.job + 1, None);
                    let retiring = self.reachable(&assignment);
                    self.job.stage = Stage::Retiring {
                        retiring,
                        then: Then::Pause,
                    };
                    self.job.has_actors = true;
                    self.persist_then(vec![Effect::StartReplicas {
                        epochs,
                        assignment,
                        intent: Intent::Retire,
                    }]);
                    return;
                }
                self.job.stage = Stage::Preparing;
                self.emit(Effect::PrepareClusters(assignment));
            }
            Stage::Placing { recorded: false } => {
                self.job.waiting = None;
                self.set_placement(epochs.job, Some(&assignment));
                // From here on every replica is being created.
                self.creating_views(&assignment);
                self.no_replica_failed_yet();
                let mut by_cluster: BTreeMap<&str, usize> = BTreeMap::new();
                for cluster in assignment.values() {
                    *by_cluster.entry(cluster.as_str()).or_default() += 1;
                }
                let summary: Vec<String> = by_cluster
                    .iter()
                    .map(|(c, n)| format!("{n} on {c}"))
                    .collect();
                self.record(
                    false,
                    reason::PLACED,
                    format!("Replicas placed: {}.", summary.join(", ")),
                );
                // The record lands before any pod exists: a restarted
                // controller adopts these pods instead of placing again.
                if std::mem::take(&mut self.job.admit_with_placement) {
                    // The job's first status: the finalizer follows it, and
                    // the clusters are prepared once the finalizer landed.
                    self.job.stage = Stage::Admitting;
                    self.persist_then(vec![Effect::Admit]);
                } else {
                    self.job.stage = Stage::Preparing;
                    self.persist_then(vec![Effect::PrepareClusters(assignment)]);
                }
            }
            // Paused, ended or deleted meanwhile: whatever the placer holds
            // for the job goes.
            _ => {
                self.job.holding = false;
                self.emit(Effect::ReleasePlacement);
            }
        }
    }

    pub(super) fn recorded_unusable(&mut self, why: &str) {
        if self.job.spec.pause {
            let epoch = self.job.epoch() + 1;
            self.set_placement(epoch, None);
            self.persist_then(Vec::new());
            self.enter_paused();
        } else {
            self.fail_over(why);
        }
    }

    /// Starts the replicas of the recorded placement; those it has no
    /// cluster for (a partial failover's, after a controller restart) are
    /// placed.
    pub(super) fn start(&mut self, intent: Intent) {
        let Some(assignment) = self.assignment().filter(|a| !a.is_empty()) else {
            self.request_placement(None);
            return;
        };
        let epochs = self.job.epochs();
        let unplaced = self.unplaced(&assignment);
        if let Intent::Run(mode) = intent {
            self.job.running_mode = Some(mode);
            if self.job.status.start_time.is_none() {
                self.job.status.start_time = Some(time(self.now));
            }
            self.job.stage = Stage::Active;
            self.creating_views(&assignment);
            self.arm_deadline();
        }
        self.job.has_actors = true;
        self.emit(Effect::StartReplicas {
            epochs,
            assignment,
            intent,
        });
        if matches!(intent, Intent::Run(_)) && !unplaced.is_empty() {
            self.place_moving(unplaced);
        }
    }

    /// The replicas of `assignment` on clusters not lost.
    pub(super) fn reachable(&self, assignment: &Assignment) -> BTreeMap<ReplicaKey, String> {
        assignment
            .iter()
            .filter(|(_, cluster)| !self.job.lost.contains(*cluster))
            .map(|(k, c)| (*k, c.clone()))
            .collect()
    }

    /// A PodGroup the placement's pods need could not be made: no pod is
    /// created until it is (a gang pod must not meet a missing PodGroup);
    /// the job says why and tries again.
    pub(super) fn preparation_failed(&mut self, why: String) {
        if self.job.stage != Stage::Preparing
            && !matches!(self.job.moving, Some(Moving::Preparing(_)))
        {
            return;
        }
        let waiting = (reason::POD_GROUP_FAILED, why);
        if self.job.waiting.as_ref() != Some(&waiting) {
            self.record(true, waiting.0, waiting.1.clone());
            self.job.waiting = Some(waiting);
        }
        self.emit(Effect::RetryLater);
    }

    /// Whether `assignment` puts a replica on a lost cluster.
    pub(super) fn names_lost(&self, assignment: &Assignment) -> bool {
        assignment.values().any(|c| self.job.lost.contains(c))
    }

    /// "member cluster a, b was lost", for the lost clusters of `assignment`.
    pub(super) fn lost_message(&self, assignment: &Assignment) -> String {
        let hit: BTreeSet<&str> = assignment
            .values()
            .filter(|c| self.job.lost.contains(*c))
            .map(String::as_str)
            .collect();
        let hit: Vec<&str> = hit.into_iter().collect();
        format!("member cluster {} was lost", hit.join(", "))
    }
}
