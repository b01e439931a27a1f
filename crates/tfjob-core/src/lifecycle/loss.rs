//! What losing member clusters does to a job: which of its replicas are
//! placed anew — all of them, or under `failover: LostReplicas` only those
//! that ran there — and what that costs its restart budget. The job
//! machine acts on it when a cluster is lost; `plan --lose` predicts with
//! the same code.
//!
//! Counting: a whole failover is one restart of the job (`backoffCount`),
//! charged to the first lost replica's type (`restartCount`); a partial
//! one is one restart per moved replica, each charged to its type, as if
//! each had failed and been restarted. Either way the types'
//! `restartCount`s add up to `backoffCount`, and `backoffLimit` bounds
//! both: a loss that would pass it fails the job.

use std::collections::BTreeSet;

use super::restart::{Budget, Verdict};
use crate::api::reason::Failure;
use crate::api::{FailoverScope, ReplicaKey, ReplicaType};
use crate::placement::Assignment;

/// What a loss does to one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loss {
    /// No replica of the job ran on the lost clusters.
    Untouched,
    /// The whole job is placed anew under a new epoch; the restart is
    /// charged to `charged` (the first lost replica).
    Whole { charged: ReplicaKey },
    /// Only `moved` are placed anew, under a new epoch of their own; every
    /// other replica keeps its pod.
    Partial { moved: BTreeSet<ReplicaKey> },
}

impl Loss {
    /// What losing `lost` does to a job placed as `assignment` whose
    /// failover scope is `scope` and whose master (the chief, or worker 0
    /// without one) is `master`. A partial failover needs a survivor, and
    /// no lost replica may hold the training state: the master (the
    /// coordinator) or a ps.
    pub fn of(
        scope: FailoverScope,
        assignment: &Assignment,
        master: Option<ReplicaKey>,
        lost: &BTreeSet<String>,
    ) -> Loss {
        let hit: BTreeSet<ReplicaKey> = assignment
            .iter()
            .filter(|(_, cluster)| lost.contains(*cluster))
            .map(|(key, _)| *key)
            .collect();
        let Some(first) = hit.first().copied() else {
            return Loss::Untouched;
        };
        let holds_state =
            |key: &ReplicaKey| Some(*key) == master || key.replica_type == ReplicaType::Ps;
        if scope == FailoverScope::LostReplicas
            && hit.len() < assignment.len()
            && !hit.iter().any(holds_state)
        {
            Loss::Partial { moved: hit }
        } else {
            Loss::Whole { charged: first }
        }
    }

    /// The restarts it counts.
    pub fn restarts(&self) -> i32 {
        match self {
            Loss::Untouched => 0,
            Loss::Whole { .. } => 1,
            Loss::Partial { moved } => i32::try_from(moved.len()).unwrap_or(i32::MAX),
        }
    }

    /// Restart, or fail the job when the restarts would pass the budget.
    /// `why` says which cluster and how ("member cluster member-1 was lost").
    pub fn verdict(&self, why: &str, budget: Budget) -> Verdict {
        restarts_verdict(self.restarts(), why, budget)
    }
}

/// Restart, or fail the job when `restarts` more would pass the budget.
pub fn restarts_verdict(restarts: i32, why: &str, budget: Budget) -> Verdict {
    if budget.covers(restarts) {
        return Verdict::Restart;
    }
    let limit = budget.limit.unwrap_or(0);
    let message = if restarts == 1 {
        format!("{why}; the backoff limit of {limit} restarts is reached")
    } else {
        format!(
            "{why}; moving its {restarts} replicas would pass the backoff limit of {limit} restarts ({} used)",
            budget.used
        )
    };
    Verdict::FailJob {
        failure: Failure::ClusterLost,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: ReplicaType, i: i32) -> ReplicaKey {
        ReplicaKey::new(t, i)
    }

    /// chief-0 and ps-0 on a, worker-0 on b, worker-1 and evaluator-0 on c.
    fn ps_job() -> Assignment {
        [
            (key(ReplicaType::Chief, 0), "a"),
            (key(ReplicaType::Ps, 0), "a"),
            (key(ReplicaType::Worker, 0), "b"),
            (key(ReplicaType::Worker, 1), "c"),
            (key(ReplicaType::Evaluator, 0), "c"),
        ]
        .into_iter()
        .map(|(k, c)| (k, c.to_string()))
        .collect()
    }

    fn lose(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn which_replicas_a_loss_moves() {
        let chief = Some(key(ReplicaType::Chief, 0));
        let partial = |keys: &[ReplicaKey]| Loss::Partial {
            moved: keys.iter().copied().collect(),
        };
        let cases = [
            (FailoverScope::LostReplicas, &["d"][..], Loss::Untouched),
            (FailoverScope::Job, &["d"][..], Loss::Untouched),
            (
                FailoverScope::LostReplicas,
                &["b"][..],
                partial(&[key(ReplicaType::Worker, 0)]),
            ),
            (
                FailoverScope::LostReplicas,
                &["b", "c"][..],
                partial(&[
                    key(ReplicaType::Worker, 0),
                    key(ReplicaType::Worker, 1),
                    key(ReplicaType::Evaluator, 0),
                ]),
            ),
            // The chief and the ps hold the training state.
            (
                FailoverScope::LostReplicas,
                &["a"][..],
                Loss::Whole {
                    charged: key(ReplicaType::Chief, 0),
                },
            ),
            (
                FailoverScope::LostReplicas,
                &["a", "b", "c"][..],
                Loss::Whole {
                    charged: key(ReplicaType::Chief, 0),
                },
            ),
            (
                FailoverScope::Job,
                &["c"][..],
                Loss::Whole {
                    charged: key(ReplicaType::Worker, 1),
                },
            ),
        ];
        for (scope, lost, expected) in cases {
            assert_eq!(
                Loss::of(scope, &ps_job(), chief, &lose(lost)),
                expected,
                "{scope:?}, losing {lost:?}"
            );
        }
    }

    #[test]
    fn a_lost_ps_or_master_moves_the_whole_job() {
        let mut job = ps_job();
        job.insert(key(ReplicaType::Ps, 1), "b".to_string());
        assert_eq!(
            Loss::of(
                FailoverScope::LostReplicas,
                &job,
                Some(key(ReplicaType::Chief, 0)),
                &lose(&["b"])
            ),
            Loss::Whole {
                charged: key(ReplicaType::Worker, 0)
            }
        );
        // Without a chief, worker 0 is the master.
        let workers: Assignment = [(0, "a"), (1, "b")]
            .into_iter()
            .map(|(i, c)| (key(ReplicaType::Worker, i), c.to_string()))
            .collect();
        let master = Some(key(ReplicaType::Worker, 0));
        assert!(matches!(
            Loss::of(FailoverScope::LostReplicas, &workers, master, &lose(&["a"])),
            Loss::Whole { .. }
        ));
        assert!(matches!(
            Loss::of(FailoverScope::LostReplicas, &workers, master, &lose(&["b"])),
            Loss::Partial { .. }
        ));
    }

    #[test]
    fn a_loss_costs_its_restarts_or_fails_the_job() {
        let lost = "member cluster member-1 was lost";
        let whole = Loss::Whole {
            charged: key(ReplicaType::Worker, 0),
        };
        let two = Loss::Partial {
            moved: [key(ReplicaType::Worker, 0), key(ReplicaType::Worker, 1)]
                .into_iter()
                .collect(),
        };
        let budget = |limit: Option<i32>, used: i32| Budget { limit, used };
        assert_eq!(whole.verdict(lost, budget(Some(1), 0)), Verdict::Restart);
        assert_eq!(whole.verdict(lost, budget(None, 40)), Verdict::Restart);
        assert_eq!(two.verdict(lost, budget(Some(3), 1)), Verdict::Restart);
        for (loss, spent) in [(&whole, budget(Some(1), 1)), (&two, budget(Some(2), 1))] {
            match loss.verdict(lost, spent) {
                Verdict::FailJob { failure, message } => {
                    assert_eq!(failure, Failure::ClusterLost);
                    assert!(message.contains("member-1"), "{message}");
                    assert!(message.contains("backoff limit"), "{message}");
                }
                other => panic!("expected {loss:?} to fail the job, got {other:?}"),
            }
        }
        assert_eq!(Loss::Untouched.restarts(), 0);
    }
}
