//! Admission: the first spec (where the stored status says the job is),
//! edits of the spec, a job validation rejects, and a job whose record is
//! not the controller's.

use super::*;

impl Step<'_> {
    /// Whether the job is past validation's verdict (`InvalidSpec`).
    pub(super) fn rejected(&self) -> bool {
        self.job.failure == Some(Failure::InvalidSpec)
    }

    pub(super) fn spec_changed(&mut self, mut spec: Spec) {
        let first = self.job.stage == Stage::New;
        spec.replicas.share(&self.job.replicas);
        if let Some(accepted) = spec.accepted.as_mut() {
            accepted.share(&spec.replicas);
        }
        let deadline_before = self.deadline();
        let mode_before = self.mode();
        let pause_before = self.job.spec.pause;
        let previous = std::mem::replace(&mut self.job.spec, spec);
        if first {
            let accepted = self.job.spec.accepted.clone();
            let replicas = accepted.unwrap_or_else(|| self.job.spec.replicas.clone());
            self.job.accept_replicas(replicas);
        }
        if self.job.spec.deleting {
            self.delete();
            return;
        }
        if first {
            self.recover();
            return;
        }
        if matches!(self.job.stage, Stage::Finished | Stage::Deleting { .. }) || self.terminal() {
            return;
        }
        if let Some(problem) = self.job.spec.problem.clone() {
            // An edit that does not validate is not taken, whatever field
            // it touched: the job goes on with the spec it had.
            let has_finalizer = self.job.spec.has_finalizer;
            self.job.spec = Spec {
                has_finalizer,
                ..previous
            };
            self.refuse(RefusedEdit::Invalid(problem));
            return;
        }
        self.replica_specs_edited();
        if !self.job.spec.has_finalizer && !self.job.admitting {
            self.job.admitting = true;
            self.emit(Effect::Admit);
        }
        if self.job.spec.pause != pause_before {
            if self.job.spec.pause {
                self.pause();
            } else {
                self.resume();
            }
        } else if self.job.stage == Stage::Active
            && !self.job.spec.pause
            && self.mode() != mode_before
            && self.job.running_mode != Some(self.mode())
        {
            self.switch_mode();
        }
        if self.deadline() != deadline_before {
            self.arm_deadline();
        }
    }

    /// An edit of `replicaSpecs`: taken before the job is placed, refused
    /// (visibly) after.
    pub(super) fn replica_specs_edited(&mut self) {
        let current = &self.job.spec.replicas;
        if current.json == self.job.replicas.json {
            self.job.refused = None;
            return;
        }
        let started = self.job.status.placement.is_some();
        if !started {
            self.job.accept_replicas(current.clone());
            if !self.job.admitting {
                self.job.admitting = true;
                self.emit(Effect::Admit);
            }
            if matches!(self.job.stage, Stage::Placing { recorded: false }) && !self.job.spec.pause
            {
                // Its demands changed: ask again (unless it is being paused).
                self.release();
                self.request_placement(None);
            }
            return;
        }
        let refused = RefusedEdit::ReplicaSpecs(current.json.clone());
        self.refuse(refused);
    }

    /// Shows a refused edit: a Warning Event once per edit, the
    /// `Initialized` condition while it stands (`refresh`).
    pub(super) fn refuse(&mut self, edit: RefusedEdit) {
        if self.job.refused.as_ref() != Some(&edit) {
            self.record(true, reason::SPEC_CHANGE_REFUSED, edit.message());
            self.job.refused = Some(edit);
        }
    }

    /// The first spec: where the stored status says the job is.
    pub(super) fn recover(&mut self) {
        let assignment = self.assignment();
        if self.terminal() {
            self.job.stage = Stage::Finished;
            // Clean-up may have been interrupted: the replicas finish it.
            if let Some(recorded) = assignment {
                self.request_placement(Some(recorded));
            }
            return;
        }
        if let Some(problem) = self.job.spec.problem.clone() {
            if assignment.is_none() {
                self.reject(&problem);
                return;
            }
            // It runs: the spec was edited since (the spec it had is not
            // recorded). Its replicas are adopted as they run.
            self.refuse(RefusedEdit::Invalid(problem));
        } else {
            self.replica_specs_edited();
        }
        if self.job.status.phase.is_none() {
            if self.job.spec.pause {
                // Created paused: its first status says so.
                self.show_paused();
            } else {
                self.job.status.phase = Some(JobPhase::Pending);
                self.set(
                    Cond::Running,
                    ConditionStatus::False,
                    reason::PENDING,
                    "The job is waiting for its replicas.",
                );
            }
        }
        let admitted = self.job.spec.has_finalizer && self.job.spec.accepted.is_some();
        if admitted {
            self.emit(Effect::EnsureTensorBoard);
        } else if assignment.is_none() && !self.job.spec.pause {
            // Placed first: its first status is the placement record, and
            // the finalizer follows that one write (`placed`), so the
            // straight path costs no status write of admission alone.
            self.job.admitting = true;
            self.job.admit_with_placement = true;
            self.request_placement(None);
            return;
        } else {
            self.job.admitting = true;
            // The first status lands before the finalizer: a job that has
            // the finalizer has a sealed status, so one without is not the
            // controller's (`record::judge`).
            self.persist_then(vec![Effect::Admit]);
            self.job.stage = Stage::Admitting;
            if !self.job.spec.has_finalizer {
                return;
            }
        }
        self.arm_deadline();
        match assignment {
            // Adopt what runs there, then converge.
            Some(recorded) => self.request_placement(Some(recorded)),
            None => self.go_on(),
        }
    }

    /// Places, pauses or stays: what an admitted job without replicas does.
    pub(super) fn go_on(&mut self) {
        if self.job.spec.pause {
            self.enter_paused();
        } else {
            if self.job.status.phase == Some(JobPhase::Paused) {
                // Resumed while no controller ran.
                self.show_resuming();
            }
            self.request_placement(None);
        }
    }

    /// A job whose record is not the controller's: it says so once, and
    /// may go when deleted; nothing else is done for it.
    pub(super) fn unverified(&mut self, event: Event, why: &str) {
        let Event::SpecChanged(spec) = event else {
            return;
        };
        let deleting = spec.deleting;
        let has_finalizer = spec.has_finalizer;
        let first = self.job.spec == Spec::default();
        self.job.spec = spec;
        if first {
            let message = format!(
                "the job's record cannot be verified ({why}): no replica is created, restarted                  or deleted from it; the pods that run are left as they are (delete the job to                  remove them)"
            );
            self.set(
                Cond::ReplicaFailure,
                ConditionStatus::True,
                reason::RECORD_UNVERIFIED,
                &message,
            );
            self.record(true, reason::RECORD_UNVERIFIED, message);
        }
        if deleting && has_finalizer {
            // What it runs on members is garbage once the job is gone:
            // their sweep removes it (the sweep trusts signed pods only).
            self.emit(Effect::RemoveFinalizer);
        }
    }

    pub(super) fn reject(&mut self, problem: &str) {
        self.job.failure = Some(Failure::InvalidSpec);
        self.job.status.phase = Some(JobPhase::Failed);
        self.set(
            Cond::Failed,
            ConditionStatus::True,
            reason::INVALID_SPEC,
            problem,
        );
        if status::condition(&self.job.status.conditions, Cond::Running).is_some() {
            self.set(
                Cond::Running,
                ConditionStatus::False,
                reason::FAILED,
                "The job has failed.",
            );
        }
        self.record(true, reason::INVALID_SPEC, problem);
        self.end();
    }
}

/// An edit of a job's spec that the job does not take.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum RefusedEdit {
    /// `replicaSpecs` (this JSON) edited after the job started.
    ReplicaSpecs(String),
    /// An edit that does not validate (why, naming the field); any field,
    /// for example `runMode` or `resumeSpecs` of a running job.
    Invalid(String),
}

impl RefusedEdit {
    /// The condition's and the Event's message.
    pub(super) fn message(&self) -> String {
        match self {
            RefusedEdit::ReplicaSpecs(_) => SPEC_CHANGE_REFUSED_MESSAGE.to_string(),
            RefusedEdit::Invalid(problem) => format!(
                "the edit is not valid: {problem}; it is ignored and the job goes on with the \
                 spec it had (correct or undo the edit)"
            ),
        }
    }
}

/// The condition and Event message of a refused `replicaSpecs` edit.
pub const SPEC_CHANGE_REFUSED_MESSAGE: &str = "spec.replicaSpecs may not change after the job \
    started: the edit is ignored and the job goes on with the replicaSpecs it started with \
    (restore them, or create a new job)";
