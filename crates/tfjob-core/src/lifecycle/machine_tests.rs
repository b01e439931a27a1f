//! The job state machine as tables: from each stage a job can be in, what
//! one event leads to (stage, phase, effects). Then every (stage, event)
//! pair against the invariants no transition may break.

use super::*;
use crate::api::{ContainerStatus, ReplicaPhase as RP};

const WORKER_0: ReplicaKey = ReplicaKey {
    replica_type: ReplicaType::Worker,
    index: 0,
};
const WORKER_1: ReplicaKey = ReplicaKey {
    replica_type: ReplicaType::Worker,
    index: 1,
};

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("a time")
}

fn job(workers: i32, policy: &str) -> TensorFlowTrainingJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
        "spec": {"replicaSpecs": [{"type": "worker", "replicas": workers, "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}}}],
            "runPolicy": {"backoffLimit": 1, "activeDeadlineSeconds": 60}},
    }))
    .expect("a job")
}

/// A spec as the actor reads it of an admitted two-worker job.
fn spec() -> Spec {
    let job = job(2, "OnFailure");
    Spec::of(&job, Some(Replicas::of(&job)), None, true)
}

fn with(change: impl FnOnce(&mut Spec)) -> Event {
    let mut spec = spec();
    change(&mut spec);
    Event::SpecChanged(spec)
}

fn paused() -> Event {
    with(|s| s.pause = true)
}

fn debug() -> Event {
    with(|s| s.debug = true)
}

fn three_workers() -> Event {
    with(|s| s.replicas = Replicas::of(&job(3, "OnFailure")))
}

fn deleted() -> Event {
    with(|s| s.deleting = true)
}

fn assignment() -> Assignment {
    [
        (WORKER_0, "home".to_string()),
        (WORKER_1, "member-1".to_string()),
    ]
    .into_iter()
    .collect()
}

fn view(key: ReplicaKey, phase: RP, uid: &str, exit_code: Option<i32>) -> ReplicaView {
    ReplicaView {
        key,
        pod_name: key.object_name("j"),
        uid: Some(uid.into()),
        phase,
        containers: exit_code
            .map(|c| {
                vec![ContainerStatus {
                    name: "tensorflow".into(),
                    state: Some("Terminated(Error)".into()),
                    exit_code: Some(c),
                }]
            })
            .unwrap_or_default(),
        cluster: None,
        exit_code,
    }
}

fn report(key: ReplicaKey, phase: RP, epoch: u64) -> Event {
    let uid = format!("{key}-e{epoch}");
    let code = match phase {
        RP::Succeeded => Some(0),
        RP::Failed => Some(1),
        _ => None,
    };
    Event::Replica {
        view: view(key, phase, &uid, code),
        epoch,
        blocked: None,
    }
}

fn no_room() -> Event {
    short_of(1)
}

fn short_of(free: usize) -> Event {
    Event::Unplaceable(crate::placement::Unplaceable {
        reasons: [("member-1".to_string(), format!("{free} GPU free, 2 asked"))].into(),
        eligible: 1,
        unknown: Vec::new(),
    })
}

fn refused(everywhere: bool) -> Event {
    Event::Refused(Refusal {
        key: WORKER_1,
        epoch: 0,
        cluster: "member-1".into(),
        everywhere,
        message: "cluster member-1 refused to create pod ns/j-worker-1 (403): violates PodSecurity"
            .into(),
    })
}

fn lost() -> Event {
    Event::ClustersLost(["member-1".to_string()].into_iter().collect())
}

/// Effects as short words, so rows read as a table.
fn names(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .map(|e| match e {
            Effect::Admit => "Admit".into(),
            Effect::RequestPlacement { recorded: None } => "RequestPlacement".into(),
            Effect::RequestPlacement { recorded: Some(_) } => "ResolvePlacement".into(),
            Effect::ReleasePlacement => "ReleasePlacement".into(),
            Effect::PrepareClusters(_) => "PrepareClusters".into(),
            Effect::StartReplicas { epoch, intent, .. } => format!("Start(e{epoch} {intent:?})"),
            Effect::RestartReplica { key, .. } => format!("Restart({key})"),
            Effect::RetireReplicas => "Retire".into(),
            Effect::AbandonReplicasOn(c) => format!(
                "Abandon({})",
                c.iter().cloned().collect::<Vec<_>>().join(",")
            ),
            Effect::FinishReplicas(p) => format!("Finish({p:?})"),
            Effect::DeleteMemberPodGroups => "DeletePodGroups".into(),
            Effect::Persist(_) => "Persist".into(),
            Effect::Record {
                warning: true,
                reason,
                ..
            } => format!("Warning({reason})"),
            Effect::Record {
                warning: false,
                reason,
                ..
            } => format!("Normal({reason})"),
            Effect::ArmDeadline { at } => {
                format!("ArmDeadline({:+}s)", at.as_second() - t(0).as_second())
            }
            Effect::RemoveFinalizer => "RemoveFinalizer".into(),
            Effect::Milestone(m) => format!(
                "Milestone({})",
                match m {
                    Milestone::PodsCreated => "PodsCreated",
                    Milestone::Running { .. } => "Running",
                    Milestone::Restarted(_) => "Restarted",
                }
            ),
        })
        .collect()
}

/// Feeds events from t(0), one second apart; returns the last effects.
fn feed(state: &mut JobState, events: Vec<Event>) -> Vec<Effect> {
    let mut last = Vec::new();
    for event in events {
        last = state.step(event, t(0));
    }
    last
}

/// The stages a job can be in, each reached by events from a new job.
fn reach(stage: &str) -> JobState {
    let mut state = JobState::new(None, "j");
    let placed = || Event::Placed(assignment());
    let running = || {
        vec![
            report(WORKER_0, RP::Running, 0),
            report(WORKER_1, RP::Running, 0),
        ]
    };
    let mut events = match stage {
        "new" => vec![],
        "admitting" => vec![with(|s| {
            s.has_finalizer = false;
            s.accepted = None;
        })],
        "placing" => vec![spec_unadmitted(), Event::Persisted(1), Event::Admitted],
        "waiting" => vec![
            spec_unadmitted(),
            Event::Persisted(1),
            Event::Admitted,
            no_room(),
        ],
        "recording" => vec![
            spec_unadmitted(),
            Event::Persisted(1),
            Event::Admitted,
            placed(),
        ],
        "preparing" => vec![
            spec_unadmitted(),
            Event::Persisted(1),
            Event::Admitted,
            placed(),
            Event::Persisted(2),
        ],
        "creating" => vec![
            spec_unadmitted(),
            Event::Persisted(1),
            Event::Admitted,
            placed(),
            Event::Persisted(2),
            Event::Prepared,
        ],
        _ => vec![
            spec_unadmitted(),
            Event::Persisted(1),
            Event::Admitted,
            placed(),
            Event::Persisted(2),
            Event::Prepared,
        ],
    };
    match stage {
        "running" => events.extend(running()),
        "failing-over" => {
            events.extend(running());
            events.push(lost());
        }
        "pausing" => {
            events.extend(running());
            events.push(paused());
        }
        "paused" => {
            events.extend(running());
            events.extend([
                paused(),
                Event::Persisted(3),
                Event::TornDown(WORKER_0),
                Event::TornDown(WORKER_1),
            ]);
        }
        "switching-mode" => {
            events.extend(running());
            events.push(debug());
        }
        "succeeded" => {
            events.extend(running());
            events.push(report(WORKER_0, RP::Succeeded, 0));
        }
        "failed" => {
            events.extend(running());
            events.push(report(WORKER_1, RP::Failed, 0));
            events.push(report(WORKER_0, RP::Failed, 0));
        }
        "invalid" => events = vec![with(|s| s.problem = Some("spec.replicaSpecs: bad".into()))],
        "deleting" => {
            events.extend(running());
            events.push(deleted());
        }
        _ => {}
    }
    feed(&mut state, events);
    state
}

fn spec_unadmitted() -> Event {
    with(|s| {
        s.has_finalizer = false;
        s.accepted = None;
    })
}

fn stage_name(stage: &Stage) -> &'static str {
    match stage {
        Stage::New => "New",
        Stage::Admitting => "Admitting",
        Stage::Placing { recorded: false } => "Placing",
        Stage::Placing { recorded: true } => "Resolving",
        Stage::Preparing => "Preparing",
        Stage::Active => "Active",
        Stage::Retiring {
            then: Then::Place, ..
        } => "Retiring→Place",
        Stage::Retiring {
            then: Then::Pause, ..
        } => "Retiring→Pause",
        Stage::Retiring {
            then: Then::Start, ..
        } => "Retiring→Start",
        Stage::Paused => "Paused",
        Stage::Finished => "Finished",
        Stage::Deleting { .. } => "Deleting",
        Stage::Unverified { .. } => "Unverified",
    }
}

fn condition(state: &JobState, kind: Cond) -> Option<(ConditionStatus, String)> {
    status::condition(&state.status.conditions, kind)
        .map(|c| (c.status, c.reason.clone().unwrap_or_default()))
}

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
        // A new job is admitted (finalizer, accepted replicaSpecs) before it
        // is placed, once its first (sealed) status is written.
        (
            "new",
            spec_unadmitted(),
            "Admitting",
            Some(Pending),
            &["Persist"],
        ),
        (
            "admitting",
            Event::Persisted(1),
            "Admitting",
            Some(Pending),
            &["Admit"],
        ),
        (
            "admitting",
            Event::Admitted,
            "Placing",
            Some(Pending),
            &["RequestPlacement"],
        ),
        ("admitting", paused(), "Admitting", Some(Pending), &[]),
        (
            "admitting",
            deleted(),
            "Deleting",
            Some(Pending),
            &["Normal(Deleting)", "DeletePodGroups", "RemoveFinalizer"],
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
            "Preparing",
            Some(Pending),
            &["Normal(Placed)", "Persist"],
        ),
        (
            "recording",
            Event::Persisted(2),
            "Preparing",
            Some(Pending),
            &["PrepareClusters"],
        ),
        (
            "preparing",
            Event::Prepared,
            "Active",
            Some(Pending),
            &["ArmDeadline(+60s)", "Start(e0 Run(Normal))"],
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
        (
            "recording",
            paused(),
            "Paused",
            Some(Paused),
            &["ReleasePlacement", "Persist", "Normal(Paused)"],
        ),
        // An edit of replicaSpecs before the job started is taken: placed anew.
        (
            "waiting",
            three_workers(),
            "Placing",
            Some(Pending),
            &["Admit", "ReleasePlacement", "RequestPlacement"],
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
            &["Finish(Unfinished)"],
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
            Some(Running),
            &["Normal(RunModeChanged)", "Persist"],
        ),
        (
            "switching-mode",
            Event::Persisted(3),
            "Retiring→Start",
            Some(Running),
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

/// A job as an earlier controller left it: `status` (JSON), then its spec.
fn recovered(status: serde_json::Value, first: Event) -> (JobState, Vec<String>) {
    let status: TensorFlowTrainingJobStatus = serde_json::from_value(status).expect("a status");
    let mut state = JobState::new(Some(&status), "j");
    let effects = names(&state.step(first, t(0)));
    (state, effects)
}

fn running_status(start: i64) -> serde_json::Value {
    serde_json::json!({
        "phase": "Running", "backoffCount": 0,
        "startTime": t(start).to_string(),
        "placement": {"epoch": 0, "assignment": {"worker-0": "home", "worker-1": "member-1"}},
        "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized"},
            {"type": "Running", "status": "True", "reason": "Running"}],
        "tasks": [{"type": "worker", "restartCount": 0, "replicaStatus": [
            {"name": "j-worker-0", "uid": "a", "phase": "Running", "cluster": "home"},
            {"name": "j-worker-1", "uid": "b", "phase": "Running", "cluster": "member-1"}]}],
    })
}

#[test]
fn a_restarted_controller_goes_on_from_the_stored_status() {
    // Running: adopt the recorded placement; the deadline counts from startTime.
    let (mut state, effects) = recovered(running_status(-30), Event::SpecChanged(spec()));
    assert_eq!(effects, ["ArmDeadline(+30s)", "ResolvePlacement"]);
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
    assert_eq!(effects, ["ArmDeadline(-40s)", "ResolvePlacement"]);
    state.step(Event::Placed(assignment()), t(0));
    let effects = names(&state.step(Event::DeadlineReached { at: t(-40) }, t(0)));
    assert_eq!(effects, ["Warning(Failed)", "Persist"]);
    assert_eq!(
        names(&state.step(Event::Persisted(1), t(0))),
        ["Finish(All)"]
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
        ["Start(e0 Finish(Unfinished))"]
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
    assert_eq!(effects, ["ArmDeadline(+50s)", "RequestPlacement"]);
    assert_eq!(state.status().backoff_count, 1);

    // An edit of replicaSpecs made meanwhile is refused; the job keeps its own.
    let edited = with(|s| s.replicas = Replicas::of(&job(3, "OnFailure")));
    let (state, effects) = recovered(running_status(-10), edited);
    assert_eq!(
        effects,
        [
            "Warning(SpecChangeRefused)",
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

/// Every stage against every event: no transition breaks these.
#[test]
fn no_transition_breaks_the_invariants() {
    let stages = [
        "new",
        "admitting",
        "placing",
        "waiting",
        "recording",
        "preparing",
        "creating",
        "running",
        "failing-over",
        "pausing",
        "paused",
        "switching-mode",
        "succeeded",
        "failed",
        "invalid",
        "deleting",
    ];
    let events = || {
        vec![
            Event::SpecChanged(spec()),
            spec_unadmitted(),
            paused(),
            debug(),
            three_workers(),
            deleted(),
            with(|s| s.problem = Some("bad".into())),
            Event::Admitted,
            Event::AdmitFailed,
            Event::Placed(assignment()),
            no_room(),
            Event::RecordedUnusable("gone".into()),
            Event::Prepared,
            report(WORKER_0, RP::Running, 0),
            report(WORKER_0, RP::Succeeded, 0),
            report(WORKER_1, RP::Failed, 0),
            report(WORKER_1, RP::Running, 1),
            Event::Replica {
                view: view(WORKER_0, RP::Creating, "x", None),
                epoch: 0,
                blocked: Some(Blocked {
                    reason: reason::NAMESPACE_MISSING,
                    message: "namespace ns on cluster member-1 does not exist".into(),
                }),
            },
            Event::TornDown(WORKER_0),
            Event::TornDown(WORKER_1),
            lost(),
            Event::ClustersLost(BTreeSet::new()),
            Event::DeadlineReached { at: t(60) },
            Event::Persisted(1),
            Event::Persisted(9),
            Event::TensorBoard(DependentStatus::default()),
            Event::BuildFailed("replica worker-0: bad".into()),
        ]
    };
    let mut pairs = 0;
    for from in stages {
        for event in events() {
            let mut state = reach(from);
            let before = state.status();
            let shown = format!("{from} on {event:?}");
            let effects = state.step(event, t(0));
            let after = state.status();
            pairs += 1;
            if before.phase.is_some_and(JobPhase::is_terminal) {
                assert_eq!(
                    after.phase, before.phase,
                    "{shown}: a terminal phase never changes"
                );
            }
            let is = |kind: Cond, status: ConditionStatus| {
                status::condition(&after.conditions, kind).is_some_and(|c| c.status == status)
            };
            if after.phase.is_some_and(JobPhase::is_terminal) {
                assert!(
                    !is(Cond::Running, ConditionStatus::True),
                    "{shown}: ended yet Running"
                );
                assert!(
                    !is(Cond::Paused, ConditionStatus::True),
                    "{shown}: ended yet Paused"
                );
            }
            if after.phase == Some(JobPhase::Succeeded) {
                assert!(
                    !is(Cond::Failed, ConditionStatus::True),
                    "{shown}: Succeeded yet Failed"
                );
            }
            if after.phase == Some(JobPhase::Paused) {
                assert!(
                    is(Cond::Paused, ConditionStatus::True),
                    "{shown}: Paused without the condition"
                );
                assert!(
                    !is(Cond::Running, ConditionStatus::True),
                    "{shown}: Paused yet Running"
                );
                assert!(
                    !effects.iter().any(|e| matches!(
                        e,
                        Effect::StartReplicas {
                            intent: Intent::Run(_),
                            ..
                        } | Effect::RequestPlacement { recorded: None }
                    )),
                    "{shown}: a paused job gets no pods: {:?}",
                    names(&effects)
                );
                assert_eq!(
                    after.start_time, None,
                    "{shown}: a paused job's clock stands"
                );
            }
            // What must follow a durable write never comes with it.
            if after.placement.as_ref().map(|p| p.epoch)
                != before.placement.as_ref().map(|p| p.epoch)
                || after.backoff_count != before.backoff_count
            {
                assert!(
                    !effects.iter().any(|e| matches!(
                        e,
                        Effect::RetireReplicas
                            | Effect::RestartReplica { .. }
                            | Effect::StartReplicas { .. }
                    )),
                    "{shown}: acted before the write landed: {:?}",
                    names(&effects)
                );
                assert!(
                    effects.iter().any(|e| matches!(e, Effect::Persist(_))),
                    "{shown}: no write asked for"
                );
            }
            if let Some(reason) = status::condition(&after.conditions, Cond::Failed)
                .filter(|c| c.status == ConditionStatus::True)
                .and_then(|c| c.reason.clone())
                && matches!(reason.as_str(), "ReplicaFailed" | "BackoffLimitExceeded")
            {
                assert!(
                    is(Cond::ReplicaFailure, ConditionStatus::True),
                    "{shown}: {reason} without ReplicaFailure"
                );
            }
        }
    }
    assert_eq!(pairs, 16 * 27);
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
