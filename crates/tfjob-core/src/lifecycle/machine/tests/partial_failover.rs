//! `failover: LostReplicas`: a lost member's replicas move alone, the
//! others keep their pods; the master or a ps lost moves the whole job.

use super::*;

/// The placement record as the status shows it.
fn record(state: &JobState) -> serde_json::Value {
    serde_json::to_value(&state.status().placement).expect("a record")
}

fn worker_restarts(state: &JobState) -> i32 {
    let status = state.status();
    status.tasks.iter().map(|t| t.restart_count).sum()
}

#[test]
fn a_lost_worker_moves_alone_and_the_others_keep_their_pods() {
    let mut state = reach("running");
    state.step(lost_replicas(), t(0));
    let effects = names(&state.step(lost(), t(0)));
    assert_eq!(
        effects,
        [
            "Abandon(member-1)",
            "Warning(ClusterLost)",
            "Persist",
            "Place(worker-1)"
        ]
    );
    // worker-0 keeps its pod of epoch 0; worker-1 waits for a cluster under epoch 1.
    assert_eq!(
        record(&state),
        serde_json::json!({"epoch": 1, "assignment": {"worker-0": "home"},
            "replicaSpecsDigest": record(&state)["replicaSpecsDigest"],
            "replicaEpochs": {"worker-0": 0}})
    );
    assert_eq!(state.status().backoff_count, 1);
    assert_eq!(worker_restarts(&state), 1);
    assert_eq!(state.phase(), Some(JobPhase::Running), "the others run on");
    // A late report of the lost pod changes nothing; worker-0's is its own.
    state.step(report(WORKER_1, RP::Failed, 0), t(0));
    assert_eq!(state.status().backoff_count, 1);
    state.step(report(WORKER_0, RP::Running, 0), t(0));

    let effects = names(&state.step(
        Event::Placed([(WORKER_1, "member-2".to_string())].into()),
        t(0),
    ));
    assert_eq!(effects, ["Normal(Placed)", "Persist"]);
    assert_eq!(
        record(&state)["assignment"],
        serde_json::json!({"worker-0": "home", "worker-1": "member-2"})
    );
    let effects = names(&state.step(Event::Persisted(state.persist_requested()), t(0)));
    assert_eq!(effects, ["PrepareClusters"]);
    let effects = state.step(Event::Prepared, t(0));
    assert_eq!(names(&effects), ["Start(e1 Run(Normal))"]);
    let Some(Effect::StartReplicas { assignment, .. }) = effects.first() else {
        panic!("{effects:?}");
    };
    assert_eq!(
        assignment,
        &Assignment::from([(WORKER_1, "member-2".to_string())]),
        "only the moved replica starts"
    );
    // Each replica reports under its own epoch; then the job ends as any.
    state.step(report(WORKER_1, RP::Running, 1), t(0));
    state.step(report(WORKER_0, RP::Succeeded, 0), t(0));
    assert_eq!(state.phase(), Some(JobPhase::Succeeded));
    assert_eq!(worker_restarts(&state), 1);
}

#[test]
fn a_lost_master_or_scope_job_moves_the_whole_job() {
    let home_lost = Event::ClustersLost(["home".to_string()].into_iter().collect());
    for (scope, loss) in [
        (lost_replicas(), home_lost.clone()),
        (Event::SpecChanged(spec()), lost()),
    ] {
        let mut state = reach("running");
        state.step(scope, t(0));
        let effects = names(&state.step(loss, t(0)));
        assert!(
            effects.contains(&"Retire".to_string()) || effects.contains(&"Persist".to_string()),
            "{effects:?}"
        );
        assert!(
            !effects.iter().any(|e| e.starts_with("Place(")),
            "{effects:?}"
        );
        assert_eq!(state.phase(), Some(JobPhase::Pending), "{effects:?}");
        assert_eq!(record(&state)["replicaEpochs"], serde_json::Value::Null);
        assert!(matches!(
            state.stage,
            Stage::Retiring {
                then: Then::Place,
                ..
            }
        ));
    }
}

#[test]
fn a_move_that_would_pass_the_backoff_limit_fails_the_job() {
    let mut state = reach("moving-placed");
    state.step(Event::Persisted(state.persist_requested()), t(0));
    state.step(Event::Prepared, t(0));
    // Its new cluster goes too: a second move, past backoffLimit 1.
    let effects = names(&state.step(
        Event::ClustersLost(["member-1".into(), "member-2".into()].into_iter().collect()),
        t(0),
    ));
    assert!(
        effects.contains(&"Warning(Failed)".to_string()),
        "{effects:?}"
    );
    assert_eq!(state.phase(), Some(JobPhase::Failed));
    assert_eq!(
        condition(&state, Cond::Failed),
        Some((ConditionStatus::True, "ClusterLost".into()))
    );
}

#[test]
fn a_pause_while_a_replica_moves_withdraws_its_request() {
    let mut state = reach("moving");
    let effects = names(&state.step(paused(), t(0)));
    assert!(
        effects.contains(&"ReleasePlacement".to_string()),
        "{effects:?}"
    );
    // The answer that still comes is not acted upon.
    let effects = names(&state.step(
        Event::Placed([(WORKER_1, "member-2".to_string())].into()),
        t(0),
    ));
    assert!(
        !effects.iter().any(|e| e.starts_with("Start")),
        "{effects:?}"
    );
    assert!(!state.moving());
}

/// A controller that restarts while a moved replica waits for its cluster
/// finds the move in the record: the replica that kept its pod is adopted
/// under its own epoch, the moved one placed, nothing counted again.
#[test]
fn a_restart_during_a_move_adopts_the_kept_and_places_the_moved() {
    let mut status = running_status(-30);
    status["backoffCount"] = 1.into();
    status["tasks"][0]["restartCount"] = 1.into();
    status["placement"] = serde_json::json!(
        {"epoch": 1, "assignment": {"worker-0": "home"}, "replicaEpochs": {"worker-0": 0}});
    let mut first = spec();
    first.failover = FailoverScope::LostReplicas;
    let (mut state, effects) = recovered(status, Event::SpecChanged(first));
    assert_eq!(
        effects,
        ["EnsureTensorBoard", "ArmDeadline(+30s)", "ResolvePlacement"]
    );
    state.step(Event::Placed([(WORKER_0, "home".to_string())].into()), t(0));
    let effects = names(&state.step(Event::Prepared, t(0)));
    assert_eq!(
        effects,
        [
            "ArmDeadline(+30s)",
            "Start(e1 Run(Normal) worker-0@e0)",
            "Place(worker-1)"
        ]
    );
    assert_eq!(state.status().backoff_count, 1);
    state.step(
        Event::Placed([(WORKER_1, "member-2".to_string())].into()),
        t(0),
    );
    state.step(Event::Persisted(state.persist_requested()), t(0));
    let effects = names(&state.step(Event::Prepared, t(0)));
    assert_eq!(effects, ["Start(e1 Run(Normal))"]);
    assert_eq!(worker_restarts(&state), 1);
}
