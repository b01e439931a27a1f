use super::*;

#[test]
fn a_replica_failing_for_good_shows_in_replica_failure() {
    let mut state = reach("running");
    let never = job(2, "Never");
    state.step(
        Event::SpecChanged(Spec::of(&never, Some(Replicas::of(&never)), None, true)),
        t(0),
    );
    // (The replicaSpecs the job started with stay: OnFailure restarts once.)
    state.step(report(WORKER_1, RP::Failed, 0), t(0));
    let effects = names(&state.step(
        Event::Replica {
            view: view(WORKER_1, RP::Failed, "second", Some(1)),
            epoch: 0,
            blocked: None,
        },
        t(0),
    ));
    assert!(
        effects.contains(&"Warning(Failed)".to_string()),
        "{effects:?}"
    );
    assert_eq!(
        condition(&state, Cond::ReplicaFailure),
        Some((ConditionStatus::True, "BackoffLimitExceeded".into()))
    );
    assert_eq!(
        condition(&state, Cond::Running),
        Some((ConditionStatus::False, "Failed".into()))
    );
}

#[test]
fn debug_on_and_off_replaces_the_replicas_without_a_restart() {
    let mut state = reach("switching-mode");
    assert_eq!(state.epoch(), 1);
    state.step(Event::Persisted(3), t(0));
    state.step(Event::TornDown(WORKER_0), t(0));
    let effects = names(&state.step(Event::TornDown(WORKER_1), t(0)));
    assert!(
        effects.contains(&"Start(e1 Run(Debug))".to_string()),
        "{effects:?}"
    );
    assert_eq!(state.status().backoff_count, 0);
    // Debug failures do not fail the job; then debug goes off.
    state.step(report(WORKER_1, RP::Running, 1), t(0));
    state.step(report(WORKER_0, RP::Failed, 1), t(0));
    assert_eq!(state.phase(), Some(JobPhase::Running));
    let effects = names(&state.step(Event::SpecChanged(spec()), t(0)));
    assert_eq!(effects, ["Normal(RunModeChanged)", "Persist"]);
    state.step(Event::Persisted(4), t(0));
    state.step(Event::TornDown(WORKER_0), t(0));
    let effects = names(&state.step(Event::TornDown(WORKER_1), t(0)));
    assert!(
        effects.contains(&"Start(e2 Run(Normal))".to_string()),
        "{effects:?}"
    );
    // And the job ends like any job.
    state.step(report(WORKER_0, RP::Succeeded, 2), t(0));
    assert_eq!(state.phase(), Some(JobPhase::Succeeded));
}

#[test]
fn a_resume_starts_a_new_span_in_the_mode_then_in_force() {
    let mut state = reach("paused");
    let effects = names(&state.step(with(|s| s.debug = true), t(100)));
    assert_eq!(effects, ["Normal(Resuming)", "RequestPlacement"]);
    state.step(Event::Placed(assignment()), t(100));
    state.step(Event::Persisted(4), t(100));
    let effects = names(&state.step(Event::Prepared, t(100)));
    assert_eq!(effects, ["ArmDeadline(+160s)", "Start(e1 Run(Debug))"]);
    let mut state = reach("paused");
    state.step(Event::SpecChanged(spec()), t(100));
    state.step(Event::Placed(assignment()), t(100));
    state.step(Event::Persisted(4), t(100));
    let effects = names(&state.step(Event::Prepared, t(100)));
    assert!(
        effects.contains(&"Start(e1 Run(Resumed))".to_string()),
        "{effects:?}"
    );
    assert_eq!(state.status().start_time, Some(time(t(100))));
}

#[test]
fn a_refusing_cluster_is_left_out_of_the_next_placement() {
    let mut state = reach("creating");
    state.step(refused(false), t(0));
    assert!(state.excluded().contains_key("member-1"));
    assert_eq!(state.epoch(), 1, "the new epoch is written first");
    assert_eq!(state.status().backoff_count, 0, "nothing ran: no restart");
    assert_eq!(names(&state.step(Event::Persisted(3), t(0))), ["Retire"]);
    state.step(Event::TornDown(WORKER_0), t(0));
    let effects = names(&state.step(Event::TornDown(WORKER_1), t(0)));
    assert_eq!(effects, ["RequestPlacement"]);
    let running = condition(&state, Cond::Running).expect("a Running condition");
    assert_eq!(running, (ConditionStatus::False, "CreateRefused".into()));
}

#[test]
fn a_job_naming_only_unknown_clusters_waits_for_them_not_for_capacity() {
    let mut state = reach("placing");
    let unknown = Event::Unplaceable(crate::placement::Unplaceable {
        reasons: [("member-9".to_string(), "unknown cluster".to_string())].into(),
        eligible: 0,
        unknown: vec!["member-9".into()],
    });
    assert_eq!(
        names(&state.step(unknown, t(0))),
        ["Warning(UnknownCluster)"]
    );
    let waiting = condition(&state, Cond::Initialized).expect("an Initialized condition");
    assert_eq!(waiting, (ConditionStatus::False, "UnknownCluster".into()));
    assert_eq!(
        names(&state.step(no_room(), t(0))),
        ["Warning(WaitingForCapacity)"]
    );
    let waiting = condition(&state, Cond::Initialized).expect("an Initialized condition");
    assert_eq!(
        waiting,
        (ConditionStatus::False, "WaitingForCapacity".into())
    );
}

/// An edit that does not validate, of a field a running job may change,
/// is refused like a `replicaSpecs` edit: the job goes on as it was.
#[test]
fn an_invalid_edit_of_a_running_job_is_refused_and_the_job_goes_on() {
    for problem in [
        "spec.runMode.pause: `enable` and `enabled` disagree",
        "spec.runMode.resume.resumeSpecs[0].type: the job has no replica of type evaluator",
    ] {
        let mut state = reach("running");
        let invalid = with(|s| {
            s.pause = true;
            s.problem = Some(problem.into());
        });
        let effects = names(&state.step(invalid.clone(), t(0)));
        assert_eq!(effects, ["Warning(SpecChangeRefused)"], "{problem}");
        assert_eq!(stage_name(&state.stage), "Active", "not paused: {problem}");
        assert_eq!(state.phase(), Some(JobPhase::Running));
        let initialized = status::condition(&state.status().conditions, Cond::Initialized)
            .cloned()
            .expect("an Initialized condition");
        assert_eq!(initialized.reason.as_deref(), Some("SpecChangeRefused"));
        assert!(
            initialized
                .message
                .as_deref()
                .is_some_and(|m| m.contains(problem)),
            "{initialized:?}"
        );
        assert!(
            names(&state.step(invalid, t(1))).is_empty(),
            "one Event per edit"
        );
        // Undone: the condition is what it was, the job runs on.
        assert!(names(&state.step(Event::SpecChanged(spec()), t(2))).is_empty());
        assert_eq!(
            condition(&state, Cond::Initialized),
            Some((ConditionStatus::True, "Initialized".into()))
        );
        // A valid pause after it is taken.
        state.step(paused(), t(3));
        assert_eq!(state.phase(), Some(JobPhase::Paused));
    }
}

/// A restarted controller that finds a running job with a spec that does
/// not validate refuses the edit and adopts the replicas as they run.
#[test]
fn a_running_job_with_an_invalid_spec_is_adopted_not_failed() {
    let invalid = with(|s| s.problem = Some("spec.runMode.debug.replicaSpecs[0].type: bad".into()));
    let (state, effects) = recovered(running_status(-30), invalid);
    assert_eq!(
        effects,
        [
            "Warning(SpecChangeRefused)",
            "EnsureTensorBoard",
            "ArmDeadline(+30s)",
            "ResolvePlacement"
        ]
    );
    assert_eq!(state.phase(), Some(JobPhase::Running));
    // One that never started is still rejected.
    let mut new = JobState::new(None, "j");
    new.step(with(|s| s.problem = Some("bad".into())), t(0));
    assert_eq!(new.phase(), Some(JobPhase::Failed));
}

/// A member lost while a run-mode switch replaces the replicas: the job is
/// placed anew without it, instead of waiting for it on the same placement.
#[test]
fn a_member_lost_during_a_debug_switch_is_failed_over() {
    let mut state = reach("switching-mode");
    let effects = names(&state.step(lost(), t(0)));
    assert_eq!(
        effects,
        ["Warning(ClusterLost)", "Persist", "Abandon(member-1)"]
    );
    assert_eq!(stage_name(&state.stage), "Retiring→Place");
    assert_eq!(
        state.status().placement.clone().and_then(|p| p.assignment),
        None
    );
    state.step(Event::Persisted(4), t(0));
    let effects = names(&state.step(Event::TornDown(WORKER_0), t(0)));
    assert_eq!(effects, ["RequestPlacement"]);
    assert_eq!(
        state.status().backoff_count,
        0,
        "the switch replaced them anyway"
    );
}

/// Debug pods that end are not restarted: the training run's budget is
/// untouched, and the restart counts agree.
#[test]
fn debug_mode_spends_no_restarts() {
    let mut state = reach("switching-mode");
    state.step(Event::Persisted(3), t(0));
    state.step(Event::TornDown(WORKER_0), t(0));
    state.step(Event::TornDown(WORKER_1), t(0));
    state.step(report(WORKER_0, RP::Running, 1), t(0));
    let effects = names(&state.step(report(WORKER_1, RP::Failed, 1), t(0)));
    assert!(
        effects.contains(&"Warning(ReplicaFailed)".to_string())
            && !effects
                .iter()
                .any(|e| e.starts_with("Restart") || e == "Persist"),
        "{effects:?}"
    );
    assert_eq!(
        condition(&state, Cond::ReplicaFailure),
        Some((ConditionStatus::True, "ReplicaFailed".into()))
    );
    state.step(Event::SpecChanged(spec()), t(0));
    let status = state.status();
    assert_eq!(status.backoff_count, 0);
    assert!(
        status.tasks.iter().all(|t| t.restart_count == 0),
        "{status:?}"
    );
}

/// A failover is one restart of the job and of the first lost replica.
#[test]
fn a_failover_shows_in_backoff_count_and_a_restart_count() {
    let state = reach("failing-over");
    let status = state.status();
    assert_eq!(status.backoff_count, 1);
    let worker = status
        .tasks
        .iter()
        .find(|t| t.replica_type == "worker")
        .expect("the workers' task");
    assert_eq!(worker.restart_count, 1);
}

/// The time a failed-over job waits for its new placement does not count
/// towards `activeDeadlineSeconds`.
#[test]
fn the_deadline_clock_stands_while_a_failed_over_job_waits() {
    let mut state = reach("running");
    assert_eq!(state.status().start_time, Some(time(t(0))));
    state.step(lost(), t(30));
    assert_eq!(state.status().start_time, None, "the clock stands");
    state.step(Event::Persisted(3), t(30));
    state.step(Event::TornDown(WORKER_0), t(30));
    state.step(no_room(), t(60));
    let at_home = assignment()
        .into_keys()
        .map(|k| (k, "home".to_string()))
        .collect();
    state.step(Event::Placed(at_home), t(100));
    state.step(Event::Persisted(4), t(100));
    let effects = names(&state.step(Event::Prepared, t(100)));
    // 60 s in all: 30 s before the failover, 30 s from now on.
    assert_eq!(effects, ["ArmDeadline(+130s)", "Start(e1 Run(Normal))"]);
    assert_eq!(state.status().start_time, Some(time(t(100))));
    // The deadline fires then, not earlier.
    let effects = names(&state.step(Event::DeadlineReached { at: t(130) }, t(130)));
    assert_eq!(effects, ["Warning(Failed)", "ReleasePlacement", "Persist"]);
}

/// `ExitCode` retries a failed pod that has no exit code of its own.
#[test]
fn exit_code_retries_a_failure_without_an_exit_code() {
    let exit_code = job(2, "ExitCode");
    let mut state = reach("running");
    state.step(
        Event::SpecChanged(Spec::of(
            &exit_code,
            Some(Replicas::of(&exit_code)),
            None,
            true,
        )),
        t(0),
    );
    let evicted = Event::Replica {
        view: view(WORKER_1, RP::Failed, "evicted", None),
        epoch: 0,
        blocked: None,
    };
    let effects = names(&state.step(evicted, t(0)));
    assert_eq!(
        effects,
        ["Milestone(Restarted)", "Normal(Restarting)", "Persist"]
    );
}

/// A run-mode switch shows that every pod is being replaced, until they
/// all run again.
#[test]
fn a_debug_switch_shows_the_replicas_being_replaced() {
    let mut state = reach("switching-mode");
    assert_eq!(state.phase(), Some(JobPhase::Pending));
    assert_eq!(
        condition(&state, Cond::Running),
        Some((ConditionStatus::False, "RunModeChanged".into()))
    );
    state.step(Event::Persisted(3), t(0));
    state.step(Event::TornDown(WORKER_0), t(0));
    state.step(Event::TornDown(WORKER_1), t(0));
    state.step(report(WORKER_0, RP::Running, 1), t(0));
    state.step(report(WORKER_1, RP::Running, 1), t(0));
    assert_eq!(state.phase(), Some(JobPhase::Running));
    assert_eq!(
        condition(&state, Cond::Running),
        Some((ConditionStatus::True, "Running".into()))
    );
}

/// Issue 26: a job's straight path (placed, Running, Succeeded) has three
/// statuses worth a write, each with a new phase, and two Events that say
/// what no condition does (where it was placed, which replica decided).
/// A status is worth a write when its summary (phase, conditions, restarts)
/// changed since the last one; replica details ride along.
#[test]
fn the_straight_path_has_three_statuses_worth_a_write() {
    let mut state = JobState::new(None, "j");
    let mut written: Vec<TensorFlowTrainingJobStatus> = Vec::new();
    let mut said = Vec::new();
    let path = [
        spec_unadmitted(),
        Event::Placed(assignment()),
        Event::Persisted(1),
        Event::Admitted,
        Event::Prepared,
        report(WORKER_0, RP::Pending, 0),
        report(WORKER_1, RP::Pending, 0),
        report(WORKER_0, RP::Running, 0),
        report(WORKER_1, RP::Running, 0),
        report(WORKER_1, RP::Succeeded, 0),
        report(WORKER_0, RP::Succeeded, 0),
    ];
    for event in path {
        let effects = names(&state.step(event, t(0)));
        said.extend(
            effects
                .into_iter()
                .filter(|e| e.starts_with("Normal(") || e.starts_with("Warning(")),
        );
        if !state.first_status_awaits_placement()
            && status::summary_changed(written.last(), state.status())
        {
            written.push(state.status().clone());
        }
    }
    let phases: Vec<Option<JobPhase>> = written.iter().map(|s| s.phase).collect();
    assert_eq!(
        phases,
        [
            Some(JobPhase::Pending),
            Some(JobPhase::Running),
            Some(JobPhase::Succeeded)
        ]
    );
    assert!(
        written[0].placement.is_some(),
        "the first status records the placement: {:?}",
        written[0]
    );
    assert_eq!(said, ["Normal(Placed)", "Normal(Succeeded)"]);
}

#[test]
fn a_job_starts_until_every_replica_has_its_pod_or_it_waits() {
    let mut state = JobState::new(None, "j");
    let steps = [
        (spec_unadmitted(), true),
        (Event::Placed(assignment()), true),
        (Event::Persisted(1), true),
        (Event::Admitted, true),
        (Event::Prepared, true),
        (report(WORKER_0, RP::Creating, 0), true),
        (report(WORKER_0, RP::Pending, 0), true),
        (report(WORKER_1, RP::Creating, 0), true),
        (report(WORKER_1, RP::Pending, 0), false),
        (report(WORKER_1, RP::Running, 0), false),
    ];
    for (event, starting) in steps {
        let shown = format!("{event:?}");
        state.step(event, t(0));
        assert_eq!(state.starting(), starting, "after {shown}");
    }

    let mut waiting = JobState::new(None, "j");
    waiting.step(spec_unadmitted(), t(0));
    assert!(waiting.starting(), "its placement is asked for");
    waiting.step(no_room(), t(0));
    assert!(
        !waiting.starting(),
        "it waits for capacity: {:?}",
        waiting.stage
    );

    let mut invalid = JobState::new(None, "j");
    invalid.step(with(|s| s.problem = Some("replicaSpecs: bad".into())), t(0));
    assert!(!invalid.starting(), "failed: {:?}", invalid.stage);
}

/// Memory: a running job's machine keeps one typed copy of its
/// replicaSpecs, the accepted ones and the spec's alike, whatever the
/// spec's updates bring while their text is the same; a refused edit
/// brings its own.
#[test]
fn one_typed_copy_of_the_replica_specs_is_kept_while_their_text_is_the_same() {
    use std::sync::Arc;
    let mut state = reach("running");
    let kept = state.replicas.specs.clone();
    let shared = |state: &JobState| Arc::ptr_eq(&state.replicas.specs, &state.spec.replicas.specs);
    let same = job(2, "OnFailure");
    for second in 0..2 {
        state.step(
            Event::SpecChanged(Spec::of(&same, Some(Replicas::of(&same)), None, true)),
            t(second),
        );
        assert!(shared(&state));
        assert!(Arc::ptr_eq(&state.replicas.specs, &kept));
    }
    let edited = job(3, "OnFailure");
    state.step(
        Event::SpecChanged(Spec::of(&edited, Some(Replicas::of(&same)), None, true)),
        t(2),
    );
    assert!(Arc::ptr_eq(&state.replicas.specs, &kept));
    assert!(!shared(&state));
    assert_eq!(state.spec.replicas.keys.len(), 3);
}
