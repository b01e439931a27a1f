//! Pause, resume and debug mode: the replicas go, come back, or are
//! replaced in another mode.

use super::*;

impl Step<'_> {
    pub(super) fn pause(&mut self) {
        match self.job.stage.clone() {
            Stage::Placing { recorded: false } => {
                self.release();
                self.enter_paused();
            }
            Stage::Preparing => {
                self.job.deferred.clear();
                self.release();
                let epoch = self.job.epoch() + 1;
                self.set_placement(epoch, None);
                self.persist_then(Vec::new());
                self.enter_paused();
            }
            Stage::Active => {
                self.release();
                let assignment = self.assignment().unwrap_or_default();
                self.show_paused();
                self.retire_for(Then::Pause, assignment);
            }
            Stage::Retiring { retiring, then } => {
                if then == Then::Start {
                    // The kept assignment goes: the job is placed anew at resume.
                    let epoch = self.job.epoch();
                    self.set_placement(epoch, None);
                    self.persist_then(Vec::new());
                }
                self.job.stage = Stage::Retiring {
                    retiring,
                    then: Then::Pause,
                };
                self.show_paused();
            }
            // Admitting and resolving a recorded placement see the spec when
            // they are done; the others are past pausing.
            _ => {}
        }
    }

    /// Phase and conditions of a paused job; its span ends.
    pub(super) fn show_paused(&mut self) {
        if self.job.status.phase == Some(JobPhase::Paused) {
            return;
        }
        self.job.status.phase = Some(JobPhase::Paused);
        // The span ends: a resume starts a new one with the full deadline.
        self.job.status.start_time = None;
        if let Some(placement) = &mut self.job.status.placement {
            placement.active_seconds = None;
        }
        self.job.waiting = None;
        self.set(
            Cond::Paused,
            ConditionStatus::True,
            reason::PAUSED,
            "The job is paused: its replicas are deleted.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::PAUSED,
            "The job is paused.",
        );
        self.record(false, reason::PAUSED, "The job is paused.");
    }

    pub(super) fn enter_paused(&mut self) {
        self.show_paused();
        self.job.clear_views();
        self.job.stage = Stage::Paused;
    }

    pub(super) fn resume(&mut self) {
        let retiring = matches!(self.job.stage, Stage::Retiring { .. });
        if self.job.stage != Stage::Paused && !retiring {
            return;
        }
        self.show_resuming();
        if let Stage::Retiring { then, .. } = &mut self.job.stage {
            *then = Then::Place;
        } else {
            self.request_placement(None);
        }
    }

    pub(super) fn show_resuming(&mut self) {
        self.job.status.phase = Some(JobPhase::Resuming);
        self.set(
            Cond::Paused,
            ConditionStatus::False,
            reason::RESUMED,
            "The job is resuming.",
        );
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::RESUMING,
            "The job is resuming.",
        );
        self.record(false, reason::RESUMING, "The job is resuming.");
    }

    /// Debug turned on or off: the replicas are replaced (no restart
    /// counted) on the same placement.
    pub(super) fn switch_mode(&mut self) {
        let Some(assignment) = self.assignment() else {
            return;
        };
        let message = if self.job.spec.debug {
            "Debug mode is on: replacing the replicas with debug pods."
        } else {
            "Debug mode is off: replacing the replicas with training pods."
        };
        // Every pod is replaced: the job shows it until they all run again.
        self.job.status.phase = Some(JobPhase::Pending);
        self.set(
            Cond::Running,
            ConditionStatus::False,
            reason::RUN_MODE_CHANGED,
            message,
        );
        self.record(false, reason::RUN_MODE_CHANGED, message);
        self.retire_for(Then::Start, assignment);
    }
}
