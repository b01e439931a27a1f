//! Failover and retiring: lost clusters, a new placement epoch, and the
//! old replicas torn down before what follows; or, in a partial failover
//! (`failover: LostReplicas`), only the lost replicas moved under a new
//! epoch while the others keep running. What a loss does is decided by
//! `lifecycle::Loss`, which `plan --lose` shares.

use super::*;
use crate::lifecycle::Loss;

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
            self.emit(Effect::AbandonReplicasOn(lost.clone()));
        }
        let assignment = self.assignment().unwrap_or_default();
        let charged = match Loss::of(FailoverScope::Job, &assignment, None, &lost) {
            Loss::Whole { charged } => Some(charged),
            _ => self.job.replicas.keys.first().copied(),
        };
        if let Verdict::FailJob { failure, message } =
            crate::lifecycle::loss::restarts_verdict(1, why, self.budget())
        {
            self.fail(failure, &message);
            return;
        }
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
        let moving = self.job.moving.take();
        if matches!(moving, Some(Moving::Placing(_))) {
            self.release();
        }
        let retiring = if self.job.has_actors {
            self.reachable(&without_unstarted(assignment, moving.as_ref()))
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
                let (scope, master) = (self.job.spec.failover, self.job.replicas.master);
                let why = self.lost_message(&assignment);
                match Loss::of(scope, &assignment, master, &lost) {
                    Loss::Untouched => {}
                    Loss::Partial { moved } if self.job.stage == Stage::Active => {
                        self.move_replicas(moved, &why);
                    }
                    _ => self.fail_over(&why),
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

    /// A partial failover: the lost replicas `moved` (and any not started
    /// yet of an earlier move) are placed anew under a new epoch, each
    /// counted as a restart; every other replica keeps its pod and its
    /// epoch. The new record lands before the moved replicas get pods.
    pub(super) fn move_replicas(&mut self, moved: BTreeSet<ReplicaKey>, why: &str) {
        self.emit(Effect::AbandonReplicasOn(self.job.lost.clone()));
        let loss = Loss::Partial {
            moved: moved.clone(),
        };
        if let Verdict::FailJob { failure, message } = loss.verdict(why, self.budget()) {
            self.fail(failure, &message);
            return;
        }
        let epochs = self.job.epochs();
        let mut assignment = self.assignment().unwrap_or_default();
        let mut moving = moved.clone();
        match self.job.moving.take() {
            Some(Moving::Placing(keys)) => moving.extend(keys),
            Some(Moving::Preparing(placed)) => moving.extend(placed.into_keys()),
            None => {}
        }
        assignment.retain(|key, _| !moving.contains(key));
        let kept: BTreeMap<ReplicaKey, u64> =
            assignment.keys().map(|k| (*k, epochs.of(*k))).collect();
        self.set_partial_placement(epochs.job + 1, Some(&assignment), &kept);
        for key in &moved {
            self.job.count_restart(key.replica_type);
        }
        self.job.status.backoff_count += loss.restarts();
        let names: Vec<String> = moved.iter().map(ReplicaKey::to_string).collect();
        self.record(
            true,
            reason::CLUSTER_LOST,
            format!(
                "{why}; re-placing {} (restart {} of the job); the other replicas keep running",
                names.join(", "),
                self.job.status.backoff_count
            ),
        );
        self.persist_then(Vec::new());
        self.place_moving(moving);
    }

    /// Asks for clusters for `keys` alone; they show as being created.
    pub(super) fn place_moving(&mut self, keys: BTreeSet<ReplicaKey>) {
        for key in &keys {
            let pod = key.object_name(&self.job.name);
            self.job.set_view(ReplicaView::creating(*key, pod, None));
            self.job.blocked.remove(key);
        }
        self.job.holding = true;
        self.job.moving = Some(Moving::Placing(keys.clone()));
        self.emit(Effect::PlaceReplicas(keys));
    }

    /// The moved replicas' clusters: recorded (with the others' kept)
    /// before their clusters are prepared and their pods created.
    pub(super) fn moved(&mut self, placed: Assignment) {
        if self.names_lost(&placed) {
            // Decided before that cluster was lost: ask again.
            self.release();
            self.place_moving(placed.into_keys().collect());
            return;
        }
        let mut assignment = self.assignment().unwrap_or_default();
        assignment.extend(placed.iter().map(|(k, c)| (*k, c.clone())));
        if let Some(record) = &mut self.job.status.placement {
            record.assignment = Some(
                assignment
                    .iter()
                    .map(|(k, c)| (k.to_string(), c.clone()))
                    .collect(),
            );
        }
        self.job.waiting = None;
        for (key, cluster) in &placed {
            let pod = key.object_name(&self.job.name);
            self.job
                .set_view(ReplicaView::creating(*key, pod, Some(cluster.clone())));
        }
        let moves: Vec<String> = placed.iter().map(|(k, c)| format!("{k} to {c}")).collect();
        self.record(
            false,
            reason::PLACED,
            format!("Replicas moved: {}.", moves.join(", ")),
        );
        self.job.moving = Some(Moving::Preparing(placed.clone()));
        self.persist_then(vec![Effect::PrepareClusters(placed)]);
    }

    /// The moved replicas' clusters are ready: they start, in the mode the
    /// others run in.
    pub(super) fn moved_prepared(&mut self) {
        let Some(Moving::Preparing(placed)) = self.job.moving.clone() else {
            return;
        };
        if self.job.stage != Stage::Active {
            return;
        }
        self.job.moving = None;
        self.job.waiting = None;
        let mode = self.job.running_mode.unwrap_or_else(|| self.mode());
        self.emit(Effect::StartReplicas {
            epochs: self.job.epochs(),
            assignment: placed,
            intent: Intent::Run(mode),
        });
    }
}
