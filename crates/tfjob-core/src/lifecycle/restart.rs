//! What happens when a replica's pod finishes: restart it, leave it, or end
//! the job — per the replica's restart policy and the job's shared backoff
//! budget (docs/src/design/api-semantics.md). Pure: no API calls.

use crate::api::{CleanUpPolicy, ReplicaKey, ReplicaType, RestartPolicy};

/// Exit codes `ExitCode` retries: 130 (SIGINT), 137 (SIGKILL), 143
/// (SIGTERM) and 138 (user-defined "restart me").
pub const RETRYABLE_EXIT_CODES: [i32; 4] = [130, 137, 138, 143];

use crate::api::reason::Failure;

/// The restarts `runPolicy.backoffLimit` allows all replicas together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// None: no limit.
    pub limit: Option<i32>,
    pub used: i32,
}

impl Budget {
    fn available(&self) -> bool {
        self.covers(1)
    }

    /// Whether `restarts` more stay within the limit.
    pub fn covers(&self, restarts: i32) -> bool {
        self.limit
            .is_none_or(|limit| self.used.saturating_add(restarts) <= limit)
    }
}

/// The exit code a pod deleted by someone else counts as: its container
/// was stopped with SIGTERM.
pub const DELETED_EXIT_CODE: i32 = 143;

/// How a replica's pod ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub replica: ReplicaKey,
    pub succeeded: bool,
    pub exit_code: Option<i32>,
    /// The pod was deleted (by a user, an eviction) rather than exiting.
    pub deleted: bool,
}

impl Exit {
    fn describe(&self, pod: &str) -> String {
        match self.exit_code {
            _ if self.deleted => format!(
                "replica {} (pod {pod}) was deleted (counted as exit code {DELETED_EXIT_CODE})",
                self.replica
            ),
            Some(code) => format!(
                "replica {} (pod {pod}) exited with code {code}",
                self.replica
            ),
            None => format!("replica {} (pod {pod}) failed", self.replica),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Re-create the pod; one restart counted against the budget.
    Restart,
    /// Nothing more to do for this replica.
    Done,
    /// The job fails.
    FailJob { failure: Failure, message: String },
    /// Only the ReplicaFailure condition is set (evaluators, debug mode).
    ReplicaFailure { message: String },
}

/// Decides what follows a replica's exit. The caller handles the master's
/// success (the job succeeds) before asking.
///
/// In debug mode nothing is restarted: a debug pod that ends stays as it
/// ended, for its logs to be read, and the training run's budget is not
/// spent (turning debug off replaces every pod anyway).
pub fn decide(
    exit: Exit,
    pod: &str,
    policy: RestartPolicy,
    budget: Budget,
    debug: bool,
) -> Verdict {
    if debug {
        return if exit.succeeded {
            Verdict::Done
        } else {
            Verdict::ReplicaFailure {
                message: format!(
                    "{}; in debug mode its pod is not restarted (it stays for inspection)",
                    exit.describe(pod)
                ),
            }
        };
    }
    let wants_restart = match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => !exit.succeeded,
        // A pod that failed with no exit code of its own (an init
        // container failed, an eviction) failed for the environment's
        // reasons, the kind ExitCode retries.
        RestartPolicy::ExitCode => {
            !exit.succeeded
                && exit
                    .exit_code
                    .is_none_or(|c| RETRYABLE_EXIT_CODES.contains(&c))
        }
        RestartPolicy::Never => false,
    };
    if exit.succeeded {
        return if wants_restart && budget.available() {
            Verdict::Restart
        } else {
            Verdict::Done
        };
    }
    let fatal_for_job = exit.replica.replica_type != ReplicaType::Evaluator;
    let (failure, message) = if wants_restart {
        if budget.available() {
            return Verdict::Restart;
        }
        let limit = budget.limit.unwrap_or(0);
        (
            Failure::BackoffLimit,
            format!(
                "{}; the backoff limit of {limit} restarts is reached",
                exit.describe(pod)
            ),
        )
    } else {
        let why = match policy {
            RestartPolicy::ExitCode => {
                "restartPolicy ExitCode retries only exit codes 130, 137, 138 and 143, and \
                 failures without an exit code"
            }
            _ => "restartPolicy Never does not restart it",
        };
        (
            Failure::ReplicaFailed,
            format!("{}; {why}", exit.describe(pod)),
        )
    };
    if fatal_for_job {
        Verdict::FailJob { failure, message }
    } else {
        Verdict::ReplicaFailure { message }
    }
}

/// An exit an earlier controller already counted a restart for (the status
/// shows it) and whose pod is still there: whether the restart is still to
/// be carried out. The budget already includes that restart, so the
/// decision is taken again with the budget as it was before it.
pub fn restart_still_due(
    exit: Exit,
    pod: &str,
    policy: RestartPolicy,
    budget: Budget,
    debug: bool,
) -> bool {
    budget.used > 0
        && decide(
            exit,
            pod,
            policy,
            Budget {
                used: budget.used - 1,
                ..budget
            },
            debug,
        ) == Verdict::Restart
}

/// Whether a replica's pod (and service) go once the job ended, by the
/// clean-up policy and the pod's phase (`None`: no pod status yet).
/// `Unfinished` deletes Pending, Running and Unknown pods.
pub fn clean_up_deletes(policy: CleanUpPolicy, pod_phase: Option<&str>) -> bool {
    match policy {
        CleanUpPolicy::All => true,
        CleanUpPolicy::None => false,
        CleanUpPolicy::Unfinished => !matches!(pod_phase, Some("Succeeded" | "Failed")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adopted_exit_is_restarted_only_if_its_restart_was_counted() {
        let failed = exit(ReplicaType::Worker, false, 137);
        let after_count = Budget {
            limit: Some(2),
            used: 2,
        };
        assert!(restart_still_due(
            failed,
            "p",
            RestartPolicy::ExitCode,
            after_count,
            false
        ));
        let nothing_counted = Budget {
            limit: Some(2),
            used: 0,
        };
        assert!(!restart_still_due(
            failed,
            "p",
            RestartPolicy::ExitCode,
            nothing_counted,
            false
        ));
        assert!(!restart_still_due(
            exit(ReplicaType::Worker, false, 1),
            "p",
            RestartPolicy::ExitCode,
            after_count,
            false
        ));
        assert!(!restart_still_due(
            failed,
            "p",
            RestartPolicy::Never,
            after_count,
            false
        ));
    }

    #[test]
    fn clean_up_policies_by_pod_phase() {
        for phase in [None, Some("Pending"), Some("Running"), Some("Unknown")] {
            assert!(clean_up_deletes(CleanUpPolicy::Unfinished, phase));
            assert!(clean_up_deletes(CleanUpPolicy::All, phase));
            assert!(!clean_up_deletes(CleanUpPolicy::None, phase));
        }
        for phase in [Some("Succeeded"), Some("Failed")] {
            assert!(!clean_up_deletes(CleanUpPolicy::Unfinished, phase));
            assert!(clean_up_deletes(CleanUpPolicy::All, phase));
            assert!(!clean_up_deletes(CleanUpPolicy::None, phase));
        }
    }

    fn exit(t: ReplicaType, succeeded: bool, code: i32) -> Exit {
        Exit {
            replica: ReplicaKey::new(t, 0),
            succeeded,
            exit_code: Some(code),
            deleted: false,
        }
    }

    const ROOM: Budget = Budget {
        limit: Some(2),
        used: 0,
    };
    const SPENT: Budget = Budget {
        limit: Some(2),
        used: 2,
    };

    #[test]
    fn exit_code_policy_retries_only_retryable_codes() {
        assert_eq!(
            decide(
                exit(ReplicaType::Worker, false, 137),
                "p",
                RestartPolicy::ExitCode,
                ROOM,
                false
            ),
            Verdict::Restart
        );
        match decide(
            exit(ReplicaType::Worker, false, 1),
            "j-worker-0",
            RestartPolicy::ExitCode,
            ROOM,
            false,
        ) {
            Verdict::FailJob { failure, message } => {
                assert_eq!(failure, Failure::ReplicaFailed);
                assert!(
                    message.contains("worker-0") && message.contains("code 1"),
                    "{message}"
                );
            }
            other => panic!("expected failure, got {other:?}"),
        }
    }

    #[test]
    fn exit_code_policy_retries_a_failure_without_an_exit_code() {
        let evicted = Exit {
            exit_code: None,
            ..exit(ReplicaType::Worker, false, 0)
        };
        assert_eq!(
            decide(evicted, "p", RestartPolicy::ExitCode, ROOM, false),
            Verdict::Restart
        );
        assert!(matches!(
            decide(evicted, "p", RestartPolicy::ExitCode, SPENT, false),
            Verdict::FailJob {
                failure: Failure::BackoffLimit,
                ..
            }
        ));
    }

    #[test]
    fn debug_mode_restarts_nothing_and_spends_nothing() {
        for policy in [
            RestartPolicy::Always,
            RestartPolicy::OnFailure,
            RestartPolicy::ExitCode,
            RestartPolicy::Never,
        ] {
            for code in [0, 1, 137] {
                let ended = exit(ReplicaType::Worker, code == 0, code);
                let verdict = decide(ended, "p", policy, ROOM, true);
                let expected_done = code == 0;
                assert_eq!(
                    matches!(verdict, Verdict::Done),
                    expected_done,
                    "{policy:?} exit {code}: {verdict:?}"
                );
                assert!(
                    matches!(verdict, Verdict::Done | Verdict::ReplicaFailure { .. }),
                    "{policy:?} exit {code}: {verdict:?}"
                );
            }
        }
    }

    #[test]
    fn on_failure_stops_at_the_shared_budget() {
        assert_eq!(
            decide(
                exit(ReplicaType::Ps, false, 1),
                "p",
                RestartPolicy::OnFailure,
                ROOM,
                false
            ),
            Verdict::Restart
        );
        match decide(
            exit(ReplicaType::Ps, false, 1),
            "p",
            RestartPolicy::OnFailure,
            SPENT,
            false,
        ) {
            Verdict::FailJob { failure, message } => {
                assert_eq!(failure, Failure::BackoffLimit);
                assert!(message.contains("backoff limit of 2"), "{message}");
            }
            other => panic!("expected failure, got {other:?}"),
        }
        let unlimited = Budget {
            limit: None,
            used: 100,
        };
        assert_eq!(
            decide(
                exit(ReplicaType::Ps, false, 1),
                "p",
                RestartPolicy::OnFailure,
                unlimited,
                false
            ),
            Verdict::Restart
        );
    }

    #[test]
    fn never_fails_the_job_except_for_evaluators_and_debug() {
        assert!(matches!(
            decide(
                exit(ReplicaType::Worker, false, 1),
                "p",
                RestartPolicy::Never,
                ROOM,
                false
            ),
            Verdict::FailJob { .. }
        ));
        assert!(matches!(
            decide(
                exit(ReplicaType::Evaluator, false, 1),
                "p",
                RestartPolicy::Never,
                ROOM,
                false
            ),
            Verdict::ReplicaFailure { .. }
        ));
        assert!(matches!(
            decide(
                exit(ReplicaType::Worker, false, 1),
                "p",
                RestartPolicy::Never,
                ROOM,
                true
            ),
            Verdict::ReplicaFailure { .. }
        ));
    }

    #[test]
    fn successes_restart_only_under_always() {
        assert_eq!(
            decide(
                exit(ReplicaType::Worker, true, 0),
                "p",
                RestartPolicy::OnFailure,
                ROOM,
                false
            ),
            Verdict::Done
        );
        assert_eq!(
            decide(
                exit(ReplicaType::Worker, true, 0),
                "p",
                RestartPolicy::Always,
                ROOM,
                false
            ),
            Verdict::Restart
        );
        assert_eq!(
            decide(
                exit(ReplicaType::Worker, true, 0),
                "p",
                RestartPolicy::Always,
                SPENT,
                false
            ),
            Verdict::Done
        );
    }
}
