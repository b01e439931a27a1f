//! The demo's progress, without I/O: which job to submit when, what each
//! job's status on home says, when a job has settled or is given up, and
//! whether every job reached the phase its manifest expects. Times are
//! durations since the demo started, passed in by the caller, so everything
//! here is deterministic.
//!
//! This file is the [`Tracker`], the demo's jobs over time; `view` holds what
//! one job's (or member's) object shows, `render` the text made of both.

use std::time::Duration;

use crate::api::{JobPhase, TensorFlowTrainingJob};

#[cfg(test)]
mod fixtures;
mod render;
mod view;

pub use render::{changes, compress, fit, jobs, keep_instructions, redraw, seconds, table};
pub use view::{JobKey, JobView, ReplicaState, member_not_ready, parse_phase};

/// Whether a job needs no more watching: it shows the phase it is expected
/// to reach, or a phase it can never leave.
pub fn settled(expected: JobPhase, phase: Option<JobPhase>) -> bool {
    phase.is_some_and(|p| p == expected || p.is_terminal())
}

/// How a job's part in the demo ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It settled at this time.
    Settled(Duration),
    /// The deadline passed at this time.
    TimedOut(Duration),
    /// The API server refused it.
    NotSubmitted(String),
}

/// One change, timed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub at: Duration,
    pub job: String,
    pub text: String,
}

/// One job of the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub key: JobKey,
    pub expected: JobPhase,
    pub submitted: Option<Duration>,
    pub view: JobView,
    pub end: Option<End>,
}

impl Tracked {
    /// From submission to the end (or to `now` while it runs).
    fn duration(&self, now: Duration) -> Option<Duration> {
        let from = self.submitted?;
        let to = match &self.end {
            Some(End::Settled(at) | End::TimedOut(at)) => *at,
            _ => now,
        };
        Some(to.saturating_sub(from))
    }

    fn phase_text(&self) -> &'static str {
        self.view.phase.map_or("-", JobPhase::as_str)
    }
}

/// A job that did not reach its expected phase, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub job: String,
    pub why: String,
}

/// Every job of the demo, in submission order.
#[derive(Debug, Clone)]
pub struct Tracker {
    jobs: Vec<Tracked>,
    /// How long a job may take from submission to settling.
    timeout: Duration,
    /// How long the next submission waits at most for the previous job to
    /// be admitted.
    pace: Duration,
}

impl Tracker {
    pub fn new(jobs: Vec<(JobKey, JobPhase)>, timeout: Duration, pace: Duration) -> Tracker {
        Tracker {
            jobs: jobs
                .into_iter()
                .map(|(key, expected)| Tracked {
                    key,
                    expected,
                    submitted: None,
                    view: JobView::default(),
                    end: None,
                })
                .collect(),
            timeout,
            pace,
        }
    }

    pub fn jobs(&self) -> &[Tracked] {
        &self.jobs
    }

    /// The job to submit now, if any: jobs go one at a time, each once the
    /// previous one is admitted (or ended, or `pace` has passed), so that
    /// placements happen in submission order.
    pub fn next_submission(&self, now: Duration) -> Option<usize> {
        let index = self
            .jobs
            .iter()
            .position(|j| j.submitted.is_none() && j.end.is_none())?;
        let Some(previous) = index.checked_sub(1).and_then(|i| self.jobs.get(i)) else {
            return Some(index);
        };
        let ready = previous.view.admitted
            || previous.end.is_some()
            || previous
                .submitted
                .is_some_and(|at| now.saturating_sub(at) >= self.pace);
        ready.then_some(index)
    }

    pub fn submitted(&mut self, index: usize, now: Duration) -> Option<Line> {
        let job = self.jobs.get_mut(index)?;
        job.submitted = Some(now);
        Some(Line {
            at: now,
            job: job.key.to_string(),
            text: format!("submitted (expected phase {})", job.expected.as_str()),
        })
    }

    pub fn not_submitted(&mut self, index: usize, now: Duration, error: String) -> Option<Line> {
        let job = self.jobs.get_mut(index)?;
        let text = format!("not submitted: {error}");
        job.end = Some(End::NotSubmitted(error));
        Some(Line {
            at: now,
            job: job.key.to_string(),
            text,
        })
    }

    /// Takes in a newer version of a job; the lines say what changed.
    /// Jobs the demo did not submit are ignored.
    pub fn observe(&mut self, job: &TensorFlowTrainingJob, now: Duration) -> Vec<Line> {
        let key = JobKey::of(job);
        let Some(tracked) = self
            .jobs
            .iter_mut()
            .find(|j| j.key == key && j.submitted.is_some())
        else {
            return Vec::new();
        };
        let view = JobView::of(job);
        let lines = changes(&tracked.view, &view)
            .into_iter()
            .map(|text| Line {
                at: now,
                job: key.to_string(),
                text,
            })
            .collect();
        if tracked.end.is_none() && settled(tracked.expected, view.phase) {
            tracked.end = Some(End::Settled(now));
        }
        tracked.view = view;
        lines
    }

    /// Gives up on the jobs whose deadline has passed.
    pub fn expire(&mut self, now: Duration) -> Vec<Line> {
        let timeout = self.timeout;
        let mut lines = Vec::new();
        for job in &mut self.jobs {
            let overdue = job
                .submitted
                .is_some_and(|at| now.saturating_sub(at) >= timeout);
            if job.end.is_none() && overdue {
                job.end = Some(End::TimedOut(now));
                lines.push(Line {
                    at: now,
                    job: job.key.to_string(),
                    text: format!(
                        "gave up after {}: still {}",
                        seconds(timeout),
                        job.phase_text()
                    ),
                });
            }
        }
        lines
    }

    /// Every job has ended its part.
    pub fn done(&self) -> bool {
        self.jobs.iter().all(|j| j.end.is_some())
    }

    /// Why a job did not reach its expected phase; `None` when it did.
    fn failure(&self, job: &Tracked) -> Option<String> {
        let phase = job.view.phase;
        let expected = job.expected.as_str();
        let detail = job
            .view
            .failure
            .as_ref()
            .or(job.view.waiting.as_ref())
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        match &job.end {
            Some(End::NotSubmitted(error)) => Some(format!("not submitted: {error}")),
            Some(End::TimedOut(_)) => Some(format!(
                "expected {expected}, still {} after {}{detail}",
                job.phase_text(),
                seconds(self.timeout)
            )),
            _ if phase == Some(job.expected) => None,
            Some(End::Settled(_)) => Some(format!(
                "expected {expected}, ended {}{detail}",
                job.phase_text()
            )),
            None => Some(format!(
                "expected {expected}, still {} when the demo stopped{detail}",
                job.phase_text()
            )),
        }
    }

    /// The jobs that did not reach their expected phase.
    pub fn failures(&self) -> Vec<Failure> {
        self.jobs
            .iter()
            .filter_map(|j| {
                Some(Failure {
                    job: j.key.to_string(),
                    why: self.failure(j)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::fixtures::{finished_tracker, job, key, running, secs, tracker};
    use super::*;

    #[test]
    fn a_job_settles_at_its_expected_phase_or_a_terminal_one() {
        assert!(settled(JobPhase::Succeeded, Some(JobPhase::Succeeded)));
        assert!(settled(JobPhase::Succeeded, Some(JobPhase::Failed)));
        assert!(settled(JobPhase::Running, Some(JobPhase::Running)));
        assert!(!settled(JobPhase::Succeeded, Some(JobPhase::Running)));
        assert!(!settled(JobPhase::Succeeded, None));
    }

    #[test]
    fn submissions_wait_for_the_previous_job_to_be_admitted() {
        let mut t = tracker();
        assert_eq!(t.next_submission(secs(0)), Some(0));
        let line = t.submitted(0, secs(0)).expect("a line");
        assert_eq!(
            line.to_string(),
            "[  0.0s] a: submitted (expected phase Succeeded)"
        );
        assert_eq!(t.next_submission(secs(1)), None, "a is not placed yet");
        t.observe(
            &job("a", json!({"placement": {"epoch": 0, "assignment": {}}})),
            secs(1),
        );
        assert_eq!(t.next_submission(secs(1)), Some(1));
        t.submitted(1, secs(1));
        assert_eq!(t.next_submission(secs(2)), None);
        assert_eq!(
            t.next_submission(secs(6)),
            Some(2),
            "after `pace` the next goes anyway"
        );
        t.not_submitted(2, secs(6), "denied".into());
        assert_eq!(t.next_submission(secs(7)), None, "nothing left");
    }

    #[test]
    fn jobs_the_demo_did_not_submit_are_ignored() {
        let mut t = tracker();
        assert!(t.observe(&job("a", running("split")), secs(1)).is_empty());
        assert!(
            t.observe(&job("other", running("split")), secs(1))
                .is_empty()
        );
        assert_eq!(t.jobs()[0].view, JobView::default());
    }

    #[test]
    fn the_verdict_names_each_job_that_missed_its_phase_and_why() {
        let t = finished_tracker();
        assert!(t.done());
        assert_eq!(
            t.failures(),
            [Failure {
                job: "b".into(),
                why: "expected Succeeded, ended Failed: ReplicaFailed: replica worker-0 (pod b-worker-0) exited with code 1; restartPolicy Never does not restart it".into(),
            }]
        );
    }

    #[test]
    fn a_job_past_its_deadline_is_given_up_with_what_it_waits_for() {
        let mut t = Tracker::new(vec![(key("w"), JobPhase::Succeeded)], secs(30), secs(5));
        t.submitted(0, secs(2));
        t.observe(
            &job(
                "w",
                json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "False",
                "reason": "WaitingForCapacity", "message": "waiting for capacity: home: insufficient nvidia.com/gpu (need 16)"}]}),
            ),
            secs(3),
        );
        assert!(
            t.expire(secs(31)).is_empty(),
            "30s from submission, not from start"
        );
        let lines = t.expire(secs(32));
        assert_eq!(lines[0].text, "gave up after 30.0s: still Pending");
        assert!(t.done());
        assert_eq!(
            t.failures()[0].why,
            "expected Succeeded, still Pending after 30.0s: waiting for capacity: home: insufficient nvidia.com/gpu (need 16)"
        );
        assert!(t.expire(secs(40)).is_empty(), "given up once");
    }

    #[test]
    fn a_job_that_leaves_its_expected_phase_afterwards_fails_the_verdict() {
        let mut t = finished_tracker();
        let ok_before = t.failures().iter().all(|f| f.job != "c");
        assert!(ok_before);
        t.observe(&job("c", json!({"phase": "Failed"})), secs(20));
        assert!(t.failures().iter().any(|f| f.job == "c"));
    }
}
