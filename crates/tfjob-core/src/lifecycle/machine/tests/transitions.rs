use super::*;

/// From a stage, an event; then the stage, the phase and the effects.
type Row = (
    &'static str,
    Event,
    &'static str,
    Option<JobPhase>,
    &'static [&'static str],
);

#[test]
fn transitions() {
    use JobPhase::*;
    // from, event, then: stage, phase, effects.
    let rows: Vec<Row> = vec![
        // A new job is placed first: its first (sealed) status is the
        // placement record, and the finalizer (with the accepted
        // replicaSpecs) follows that one write; then its clusters are
        // prepared. Admission costs no status write of its own.
        (
            "new",
            spec_unadmitted(),
            "Placing",
            Some(Pending),
            &["RequestPlacement"],
        ),
        (
            "waiting",
            short_of(0),
            "Placing",
            Some(Pending),
            &["Warning(WaitingForCapacity)"],
        ),
        // The placement is recorded before anything is prepared or created.
        (
            "placing",
            Event::Placed(assignment()),
            "Admitting",
            Some(Pending),
            &["Normal(Placed)", "Persist"],
        ),
        (
            "recording",
            Event::Persisted(1),
            "Admitting",
            Some(Pending),
            &["Admit"],
        ),
        (
            "recording",
            Event::Admitted,
            "Preparing",
            Some(Pending),
            &["EnsureTensorBoard", "PrepareClusters"],
        ),
        // A pause meanwhile is taken once the finalizer landed (`stories`).
        ("recording", paused(), "Admitting", Some(Pending), &[]),
        // Deleted then: its hold goes, and its recorded placement is
        // resolved to find what to tear down (nothing yet).
        (
            "recording",
            deleted(),
            "Deleting→Resolve",
            Some(Pending),
            &[
                "ReleasePlacement",
                "Normal(Deleting)",
                "DeletePodGroups",
                "ResolvePlacement",
            ],
        ),
        (
            "preparing",
            Event::Prepared,
            "Active",
            Some(Pending),
            &["ArmDeadline(+60s)", "Start(e0 Run(Normal))"],
        ),
        // A job created paused has no placement to record: it is admitted
        // after its first status, and stays paused.
        (
            "admitting",
            Event::Persisted(1),
            "Admitting",
            Some(Paused),
            &["Admit"],
        ),
        (
            "admitting",
            Event::Admitted,
            "Paused",
            Some(Paused),
            &["EnsureTensorBoard"],
        ),
        // Pausing withdraws a queued placement, and a placement that comes anyway.
        (
            "waiting",
            paused(),
            "Paused",
            Some(Paused),
            &["ReleasePlacement", "Normal(Paused)"],
        ),
        (
            "paused",
            Event::Placed(assignment()),
            "Paused",
            Some(Paused),
            &["ReleasePlacement"],
        ),
        // An edit of replicaSpecs before the job started is taken: placed anew.
        (
            "waiting",
            three_workers(),
            "Placing",
            Some(Pending),
            &["ReleasePlacement", "RequestPlacement"],
        ),
        // After it started it is refused, visibly, and the job goes on.
        (
            "running",
            three_workers(),
            "Active",
            Some(Running),
            &["Warning(SpecChangeRefused)"],
        ),
        (
            "creating",
            report(WORKER_0, RP::Running, 0),
            "Active",
            Some(Pending),
            &[],
        ),
        (
            "creating",
            report(WORKER_0, RP::Running, 7),
            "Active",
            Some(Pending),
            &[],
        ),
        // A name taken by an object not ours: said once, until it is free.
        (
            "creating",
            Event::Replica {
                view: view(WORKER_0, RP::Creating, "x", None),
                epoch: 0,
                blocked: Some(Blocked {
                    reason: reason::OBJECT_NAME_TAKEN,
                    message: "pod ns/j-worker-0 on cluster home exists".into(),
                }),
            },
            "Active",
            Some(Pending),
            &["Warning(ObjectNameTaken)"],
        ),
        (
            "running",
            report(WORKER_0, RP::Succeeded, 0),
            "Finished",
            Some(Succeeded),
            &["Normal(Succeeded)", "Persist"],
        ),
        // The end is written before any clean-up: a controller restarted
        // after a pod's deletion must not make it again.
        (
            "succeeded",
            Event::Persisted(3),
            "Finished",
            Some(Succeeded),
            &["Finish(Unfinished)", "DeletePodGroups"],
        ),
        // A cluster refuses a pod for good: placed anew without it, nothing
        // counted; or, no cluster would take it, failed.
        (
            "creating",
            refused(false),
            "Retiring→Place",
            Some(Pending),
            &["Warning(CreateRefused)", "ReleasePlacement", "Persist"],
        ),
        (
            "creating",
            refused(true),
            "Finished",
            Some(Failed),
            &["Warning(Failed)", "ReleasePlacement", "Persist"],
        ),
        (
            "failing-over",
            refused(false),
            "Retiring→Place",
            Some(Pending),
            &[],
        ),
        // A restart is counted, written, and only then carried out.
        (
            "running",
            report(WORKER_1, RP::Failed, 0),
            "Active",
            Some(Running),
            &["Milestone(Restarted)", "Normal(Restarting)", "Persist"],
        ),
        (
            "failed",
            deleted(),
            "Deleting",
            Some(Failed),
            &["Normal(Deleting)", "DeletePodGroups", "Retire"],
        ),
        (
            "running",
            Event::DeadlineReached { at: t(60) },
            "Finished",
            Some(Failed),
            &["Warning(Failed)", "Persist"],
        ),
        (
            "running",
            Event::DeadlineReached { at: t(30) },
            "Active",
            Some(Running),
            &[],
        ),
        // Failover: abandon the lost cluster, count, write the epoch, then tear down.
        (
            "running",
            lost(),
            "Retiring→Place",
            Some(Pending),
            &["Abandon(member-1)", "Warning(ClusterLost)", "Persist"],
        ),
        (
            "failing-over",
            Event::Persisted(3),
            "Retiring→Place",
            Some(Pending),
            &["Retire"],
        ),
        (
            "failing-over",
            Event::TornDown(WORKER_0),
            "Placing",
            Some(Pending),
            &["RequestPlacement"],
        ),
        (
            "failing-over",
            paused(),
            "Retiring→Pause",
            Some(Paused),
            &["Normal(Paused)"],
        ),
        // Pause: the new epoch first, then the replicas go.
        (
            "running",
            paused(),
            "Retiring→Pause",
            Some(Paused),
            &["Normal(Paused)", "Persist"],
        ),
        (
            "creating",
            paused(),
            "Retiring→Pause",
            Some(Paused),
            &["ReleasePlacement", "Normal(Paused)", "Persist"],
        ),
        (
            "pausing",
            Event::Persisted(3),
            "Retiring→Pause",
            Some(Paused),
            &["Retire"],
        ),
        (
            "pausing",
            with(|s| s.pause = false),
            "Retiring→Place",
            Some(Resuming),
            &["Normal(Resuming)"],
        ),
        ("paused", lost(), "Paused", Some(Paused), &[]),
        (
            "paused",
            Event::DeadlineReached { at: t(60) },
            "Paused",
            Some(Paused),
            &[],
        ),
        (
            "paused",
            Event::SpecChanged(spec()),
            "Placing",
            Some(Resuming),
            &["Normal(Resuming)", "RequestPlacement"],
        ),
        (
            "paused",
            with(|s| {
                s.pause = true;
                s.replicas = Replicas::of(&job(3, "OnFailure"));
            }),
            "Paused",
            Some(Paused),
            &["Warning(SpecChangeRefused)"],
        ),
        // Debug on or off: same placement, new epoch, no restart counted.
        (
            "running",
            debug(),
            "Retiring→Start",
            Some(Pending),
            &["Normal(RunModeChanged)", "Persist"],
        ),
        (
            "switching-mode",
            Event::Persisted(3),
            "Retiring→Start",
            Some(Pending),
            &["Retire"],
        ),
        (
            "invalid",
            Event::SpecChanged(spec()),
            "Finished",
            Some(Failed),
            &[],
        ),
        (
            "deleting",
            Event::TornDown(WORKER_0),
            "Deleting",
            Some(Running),
            &[],
        ),
        (
            "deleting",
            lost(),
            "Deleting",
            Some(Running),
            &["Abandon(member-1)"],
        ),
    ];
    let mut failures = Vec::new();
    for (from, event, stage, phase, effects) in rows {
        let mut state = reach(from);
        let shown = format!("{event:?}").chars().take(60).collect::<String>();
        let got = names(&state.step(event, t(0)));
        let expected: Vec<String> = effects.iter().map(|e| e.to_string()).collect();
        if stage_name(&state.stage) != stage || state.phase() != phase || got != expected {
            failures.push(format!(
                "from {from} on {shown}…: expected {stage} {phase:?} {expected:?}, got {} {:?} {got:?}",
                stage_name(&state.stage),
                state.phase(),
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
