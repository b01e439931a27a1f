use super::*;

#[test]
fn a_restarted_controller_goes_on_from_the_stored_status() {
    // Running: adopt the recorded placement; the deadline counts from startTime.
    let (mut state, effects) = recovered(running_status(-30), Event::SpecChanged(spec()));
    assert_eq!(
        effects,
        ["EnsureTensorBoard", "ArmDeadline(+30s)", "ResolvePlacement"]
    );
    assert_eq!(stage_name(&state.stage), "Resolving");
    assert_eq!(
        state.status().tasks[0].replica_status.len(),
        2,
        "the stored replicas are kept"
    );
    assert_eq!(
        names(&state.step(Event::Placed(assignment()), t(0))),
        ["PrepareClusters"]
    );
    assert_eq!(
        names(&state.step(Event::Prepared, t(0))),
        ["ArmDeadline(+30s)", "Start(e0 Run(Normal))"]
    );
    assert_eq!(
        state.status().start_time,
        Some(time(t(-30))),
        "the span goes on"
    );

    // A deadline that passed while no controller ran fires at once.
    let (mut state, effects) = recovered(running_status(-100), Event::SpecChanged(spec()));
    assert_eq!(
        effects,
        ["EnsureTensorBoard", "ArmDeadline(-40s)", "ResolvePlacement"]
    );
    state.step(Event::Placed(assignment()), t(0));
    let effects = names(&state.step(Event::DeadlineReached { at: t(-40) }, t(0)));
    assert_eq!(effects, ["Warning(Failed)", "Persist"]);
    assert_eq!(
        names(&state.step(Event::Persisted(1), t(0))),
        ["Finish(All)", "DeletePodGroups"]
    );
    assert_eq!(
        condition(&state, Cond::Failed),
        Some((ConditionStatus::True, "DeadlineExceeded".into()))
    );

    // Paused while no controller ran: the epoch moves first, then the
    // adopted replicas are retired.
    let (mut state, _) = recovered(running_status(-10), paused());
    let effects = names(&state.step(Event::Placed(assignment()), t(0)));
    assert_eq!(effects, ["Normal(Paused)", "Persist"]);
    assert_eq!(state.epoch(), 1);
    assert_eq!(
        names(&state.step(Event::Persisted(1), t(0))),
        ["Start(e0 Retire)"]
    );
    state.step(Event::TornDown(WORKER_0), t(0));
    state.step(Event::TornDown(WORKER_1), t(0));
    assert_eq!(stage_name(&state.stage), "Paused");
    assert_eq!(state.status().start_time, None, "a pause ends the span");

    // Ended: the replicas finish the clean-up an earlier controller began.
    let mut ended = running_status(-10);
    ended["phase"] = "Failed".into();
    let (mut state, effects) = recovered(ended, Event::SpecChanged(spec()));
    assert_eq!(effects, ["ResolvePlacement"]);
    assert_eq!(
        names(&state.step(Event::Placed(assignment()), t(0))),
        ["Start(e0 Finish(Unfinished))", "DeletePodGroups"]
    );

    // Deleted while no controller ran, running or ended: what an earlier
    // controller left goes before the finalizer.
    for phase in ["Running", "Succeeded"] {
        let mut stored = running_status(-10);
        stored["phase"] = phase.into();
        let (mut state, effects) = recovered(stored, deleted());
        assert_eq!(
            effects,
            ["Normal(Deleting)", "DeletePodGroups", "ResolvePlacement"],
            "{phase}"
        );
        assert_eq!(
            names(&state.step(Event::Placed(assignment()), t(0))),
            ["Start(e0 Retire)"],
            "{phase}"
        );
        state.step(Event::TornDown(WORKER_0), t(0));
        assert_eq!(
            names(&state.step(Event::TornDown(WORKER_1), t(0))),
            ["RemoveFinalizer"],
            "{phase}"
        );
    }

    // Killed between a failover's write and its teardown: the restart was
    // counted with the new epoch, in one write; nothing is counted again.
    let mut failing_over = running_status(-10);
    failing_over["phase"] = "Pending".into();
    failing_over["backoffCount"] = 1.into();
    failing_over["placement"] = serde_json::json!({"epoch": 1});
    let (state, effects) = recovered(failing_over, Event::SpecChanged(spec()));
    assert_eq!(
        effects,
        ["EnsureTensorBoard", "ArmDeadline(+50s)", "RequestPlacement"]
    );
    assert_eq!(state.status().backoff_count, 1);

    // An edit of replicaSpecs made meanwhile is refused; the job keeps its own.
    let edited = with(|s| s.replicas = Replicas::of(&job(3, "OnFailure")));
    let (state, effects) = recovered(running_status(-10), edited);
    assert_eq!(
        effects,
        [
            "Warning(SpecChangeRefused)",
            "EnsureTensorBoard",
            "ArmDeadline(+50s)",
            "ResolvePlacement"
        ]
    );
    assert_eq!(state.replicas.keys, [WORKER_0, WORKER_1]);
    let initialized = status::condition(&state.status.conditions, Cond::Initialized).expect("set");
    assert!(
        initialized
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("spec.replicaSpecs")
    );
}

/// A pod deleted by hand whose restart an earlier controller counted (the
/// status shows it Deleted) is not counted again when it is seen still
/// terminating; its replacement is still made.
#[test]
fn a_deletion_counted_before_a_restart_is_not_counted_again() {
    let mut status = running_status(-10);
    status["backoffCount"] = 1.into();
    status["tasks"][0]["restartCount"] = 1.into();
    status["tasks"][0]["replicaStatus"][1]["phase"] = "Deleted".into();
    let (mut state, _) = recovered(status, Event::SpecChanged(spec()));
    state.step(Event::Placed(assignment()), t(0));
    state.step(Event::Prepared, t(0));
    let terminating = Event::Replica {
        view: view(WORKER_1, RP::Deleted, "b", None),
        epoch: 0,
        blocked: None,
    };
    let effects = names(&state.step(terminating, t(0)));
    assert_eq!(effects, ["Restart(worker-1)"], "replaced, not counted");
    assert_eq!(state.status().backoff_count, 1);
}

#[test]
fn a_job_whose_record_is_not_the_controllers_decides_nothing() {
    let stored: TensorFlowTrainingJobStatus =
        serde_json::from_value(running_status(-30)).expect("a status");
    let mut state = JobState::unverified(Some(&stored), "j", "status: no seal".into());
    assert!(!state.is_verified());
    assert_eq!(
        names(&state.step(Event::SpecChanged(spec()), t(0))),
        ["Warning(RecordUnverified)"]
    );
    let quiet = [
        Event::SpecChanged(spec()),
        Event::Placed(assignment()),
        report(WORKER_0, RP::Failed, 0),
        lost(),
        Event::DeadlineReached { at: t(30) },
        refused(true),
        Event::Persisted(1),
        paused(),
    ];
    for event in quiet {
        assert_eq!(
            names(&state.step(event.clone(), t(0))),
            Vec::<String>::new(),
            "{event:?}"
        );
    }
    assert_eq!(state.phase(), Some(JobPhase::Running), "as stored");
    assert_eq!(
        state.status().tasks,
        stored.tasks,
        "the replicas as stored are shown"
    );
    let failure = condition(&state, Cond::ReplicaFailure).expect("a ReplicaFailure condition");
    assert_eq!(failure, (ConditionStatus::True, "RecordUnverified".into()));
    assert_eq!(names(&state.step(deleted(), t(0))), ["RemoveFinalizer"]);
}
