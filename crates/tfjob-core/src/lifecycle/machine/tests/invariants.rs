//! What no transition may break, checked on every (situation, event) pair
//! and on generated sequences of events from a new job.

use proptest::prelude::*;

use super::*;

/// The number of `Event` variants: `event_kind` matches with no wildcard,
/// so a new variant does not compile until it has a kind there, and the
/// sweep fails until `samples` has one of that kind.
const EVENT_KINDS: usize = 17;

fn event_kind(event: &Event) -> usize {
    match event {
        Event::SpecChanged(_) => 0,
        Event::Admitted => 1,
        Event::AdmitFailed => 2,
        Event::Placed(_) => 3,
        Event::Unplaceable(_) => 4,
        Event::RecordedUnusable(_) => 5,
        Event::Prepared => 6,
        Event::Replica { .. } => 7,
        Event::TornDown(_) => 8,
        Event::ClustersLost(_) => 9,
        Event::DeadlineReached { .. } => 10,
        Event::Persisted(_) => 11,
        Event::TensorBoard(_) => 12,
        Event::BuildFailed(_) => 13,
        Event::Refused(_) => 14,
        Event::PreparationFailed(_) => 15,
        Event::RetryDue => 16,
    }
}

/// How many events `sample` knows.
const SAMPLES: usize = 37;

/// Event `i` of every kind, as it could reach `state` now (its epoch, the
/// status write it waits for) or come late or early; a placement never
/// names a lost cluster (the placer leaves lost clusters out).
fn sample(state: &JobState, i: usize) -> Event {
    let epoch = state.epoch();
    let placement = || {
        let mut placement = assignment();
        for cluster in placement.values_mut() {
            if state.lost.contains(cluster) {
                *cluster = "home".into();
            }
        }
        placement
    };
    let with_epoch = |event: Event| match event {
        Event::Refused(refusal) => Event::Refused(Refusal { epoch, ..refusal }),
        other => other,
    };
    match i {
        0 => Event::SpecChanged(spec()),
        1 => spec_unadmitted(),
        2 => paused(),
        3 => debug(),
        4 => three_workers(),
        5 => deleted(),
        6 => with(|s| s.problem = Some("spec.runMode.pause: bad".into())),
        7 => Event::Admitted,
        8 => Event::AdmitFailed,
        9 => Event::Placed(placement()),
        10 => no_room(),
        11 => Event::Unplaceable(crate::placement::Unplaceable {
            reasons: BTreeMap::new(),
            eligible: 0,
            unknown: vec!["member-9".into()],
        }),
        12 => Event::RecordedUnusable("gone".into()),
        13 => Event::Prepared,
        14 => Event::PreparationFailed("applying PodGroup ns/j on member-1: forbidden".into()),
        15 => Event::RetryDue,
        16 => report(WORKER_0, RP::Running, epoch),
        17 => report(WORKER_0, RP::Succeeded, epoch),
        18 => report(WORKER_1, RP::Failed, epoch),
        19 => report(WORKER_1, RP::Running, epoch + 1),
        20 => report(WORKER_1, RP::Failed, epoch.saturating_sub(1)),
        21 => Event::Replica {
            view: view(WORKER_1, RP::Failed, "no-code", None),
            epoch,
            blocked: None,
        },
        22 => Event::Replica {
            view: view(WORKER_0, RP::Creating, "x", None),
            epoch,
            blocked: Some(Blocked {
                reason: reason::NAMESPACE_MISSING,
                message: "namespace ns on cluster member-1 does not exist".into(),
            }),
        },
        23 => Event::TornDown(WORKER_0),
        24 => Event::TornDown(WORKER_1),
        25 => lost(),
        26 => Event::ClustersLost(BTreeSet::new()),
        27 => Event::DeadlineReached { at: t(60) },
        28 => Event::Persisted(state.persist_requested()),
        29 => Event::Persisted(9),
        30 => Event::TensorBoard(DependentStatus::default()),
        31 => Event::BuildFailed("replica worker-0: bad".into()),
        32 => with_epoch(refused(true)),
        33 => with_epoch(refused(false)),
        34 => Event::Replica {
            view: view(WORKER_0, RP::Deleted, "gone", None),
            epoch,
            blocked: None,
        },
        // The answer to a partial failover's request.
        35 => Event::Placed(
            placement()
                .into_iter()
                .filter(|(key, _)| *key == WORKER_1)
                .collect(),
        ),
        _ => lost_replicas(),
    }
}

/// The situations, reached once.
fn situations() -> &'static [JobState] {
    static REACHED: std::sync::LazyLock<Vec<JobState>> =
        std::sync::LazyLock::new(|| SITUATIONS.iter().map(|s| reach(s)).collect());
    &REACHED
}

/// The status with `tasks` and `aggregate` counted afresh from every
/// replica's view and restart count.
fn recounted(state: &JobState) -> TensorFlowTrainingJobStatus {
    let mut status = state.status.clone();
    let types = state.replicas.types();
    status.tasks = status::tasks(state.views.values(), &state.restart_counts, &types);
    status.aggregate = status::aggregate(state.views.values());
    status
}

/// Views taken one at a time, in any order and of several types (one the
/// job does not run), give the `tasks` and `aggregate` of a recount.
#[test]
fn views_kept_one_at_a_time_are_a_recount() {
    let job: TensorFlowTrainingJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
        "metadata": {"name": "j"},
        "spec": {"replicaSpecs": [
            {"type": "chief", "replicas": 1, "template": {"spec": {"containers": []}}},
            {"type": "worker", "replicas": 3, "template": {"spec": {"containers": []}}}]},
    }))
    .expect("a job");
    let mut state = JobState::new(None, "j");
    state.accept_replicas(Replicas::of(&job));
    let chief = ReplicaKey::new(ReplicaType::Chief, 0);
    let worker = |index| ReplicaKey::new(ReplicaType::Worker, index);
    let ps = ReplicaKey::new(ReplicaType::Ps, 0);
    let steps = [
        (worker(2), RP::Running),
        (chief, RP::Pending),
        (ps, RP::Running),
        (worker(0), RP::Creating),
        (worker(2), RP::Failed),
        (worker(1), RP::Running),
        (worker(0), RP::Running),
    ];
    for (key, phase) in steps {
        state.set_view(view(key, phase, &format!("{key}"), None));
        state.count_restart(key.replica_type);
        assert_eq!(state.status(), &recounted(&state), "after {key} {phase:?}");
    }
    let listed: Vec<&str> = state.status().tasks[1]
        .replica_status
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(listed, ["j-worker-0", "j-worker-1", "j-worker-2"]);
    state.clear_views();
    assert_eq!(state.status(), &recounted(&state), "after clear_views");
}

/// The invariants, from the status `before` a step, its effects and the
/// state after it.
fn check(
    before: &TensorFlowTrainingJobStatus,
    effects: &[Effect],
    state: &JobState,
) -> Vec<String> {
    let after = state.status();
    let mut broken = Vec::new();
    let mut expect = |holds: bool, what: &str| {
        if !holds {
            broken.push(format!("{what}: {:?}", names(effects)));
        }
    };
    let is = |kind: Cond, status: ConditionStatus| {
        status::condition(&after.conditions, kind).is_some_and(|c| c.status == status)
    };
    if before.phase.is_some_and(JobPhase::is_terminal) {
        expect(
            after.phase == before.phase,
            "a terminal phase never changes",
        );
    }
    if after.phase.is_some_and(JobPhase::is_terminal) {
        expect(
            !is(Cond::Running, ConditionStatus::True),
            "ended yet Running",
        );
        expect(!is(Cond::Paused, ConditionStatus::True), "ended yet Paused");
    }
    if after.phase == Some(JobPhase::Succeeded) {
        expect(
            !is(Cond::Failed, ConditionStatus::True),
            "Succeeded yet Failed",
        );
    }
    if after.phase == Some(JobPhase::Paused) {
        expect(
            is(Cond::Paused, ConditionStatus::True),
            "Paused without the condition",
        );
        expect(
            !is(Cond::Running, ConditionStatus::True),
            "Paused yet Running",
        );
        expect(
            !effects.iter().any(|e| {
                matches!(
                    e,
                    Effect::StartReplicas {
                        intent: Intent::Run(_),
                        ..
                    } | Effect::RequestPlacement { recorded: None }
                )
            }),
            "a paused job gets no pods",
        );
        expect(after.start_time.is_none(), "a paused job's clock stands");
    }
    // What must follow a durable write never comes with it.
    if after.placement.as_ref().map(|p| p.epoch) != before.placement.as_ref().map(|p| p.epoch)
        || after.backoff_count != before.backoff_count
    {
        expect(
            !effects.iter().any(|e| {
                matches!(
                    e,
                    Effect::RetireReplicas
                        | Effect::RestartReplica { .. }
                        | Effect::StartReplicas { .. }
                )
            }),
            "acted before the write landed",
        );
        expect(
            effects.iter().any(|e| matches!(e, Effect::Persist(_))),
            "no write asked for",
        );
    }
    if let Some(reason) = status::condition(&after.conditions, Cond::Failed)
        .filter(|c| c.status == ConditionStatus::True)
        .and_then(|c| c.reason.clone())
        && Failure::of_reason(&reason).is_some_and(Failure::is_a_replicas)
    {
        expect(
            is(Cond::ReplicaFailure, ConditionStatus::True),
            "a replica's failure without ReplicaFailure",
        );
    }
    let started_on_lost = effects.iter().any(|e| match e {
        Effect::StartReplicas {
            assignment,
            intent: Intent::Run(_),
            ..
        } => assignment.values().any(|c| state.lost.contains(c)),
        _ => false,
    });
    expect(!started_on_lost, "a replica started on a lost cluster");
    let moves_state = effects.iter().any(|e| match e {
        Effect::PlaceReplicas(keys) => keys
            .iter()
            .any(|k| Some(*k) == state.replicas.master || k.replica_type == ReplicaType::Ps),
        _ => false,
    });
    expect(!moves_state, "the master or a ps moved alone");
    // An unverified job's status is as stored: the machine keeps no views.
    if state.is_verified() {
        let recounted = recounted(state);
        expect(
            *after == recounted,
            &format!(
                "tasks and aggregate kept as {:?} {:?}, counted afresh {:?} {:?}",
                after.tasks, after.aggregate, recounted.tasks, recounted.aggregate
            ),
        );
    }
    let restarts: i32 = after.tasks.iter().map(|t| t.restart_count).sum();
    expect(
        restarts == after.backoff_count,
        &format!(
            "restart counts add up to {restarts}, backoffCount is {}",
            after.backoff_count
        ),
    );
    broken
}

/// Every situation against every kind of event.
#[test]
fn no_transition_breaks_the_invariants() {
    let mut failures = Vec::new();
    let mut stages_reached = BTreeSet::new();
    let mut kinds_sampled = BTreeSet::new();
    for (from, situation) in SITUATIONS.iter().zip(situations()) {
        stages_reached.insert(stage_name(&situation.stage));
        for event in (0..SAMPLES).map(|i| sample(situation, i)) {
            kinds_sampled.insert(event_kind(&event));
            let mut state = situation.clone();
            let before = state.status().clone();
            let shown = format!("{from} on {event:?}");
            let effects = state.step(event, t(0));
            failures.extend(
                check(&before, &effects, &state)
                    .into_iter()
                    .map(|b| format!("{shown}: {b}")),
            );
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    let unreached: Vec<_> = STAGE_NAMES
        .iter()
        .filter(|s| !stages_reached.contains(*s))
        .collect();
    assert!(unreached.is_empty(), "no situation reaches {unreached:?}");
    let unsampled: Vec<_> = (0..EVENT_KINDS)
        .filter(|k| !kinds_sampled.contains(k))
        .collect();
    assert!(
        unsampled.is_empty(),
        "no sample of event kinds {unsampled:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Sequences of events from a new job (or a recovered one), each a
    /// sample as it could come then, a second apart.
    #[test]
    fn no_sequence_of_events_breaks_the_invariants(
        start in 0..SITUATIONS.len(),
        picks in prop::collection::vec(0..SAMPLES, 1..20),
    ) {
        let mut state = situations()[start].clone();
        let mut ended = state.phase().filter(|p| p.is_terminal());
        for (n, pick) in picks.into_iter().enumerate() {
            let event = sample(&state, pick);
            let before = state.status().clone();
            let shown = format!("{event:?}");
            let effects = state.step(event, t(n as i64));
            let broken = check(&before, &effects, &state);
            prop_assert!(broken.is_empty(), "from {} at step {n}, {shown}: {broken:?}", SITUATIONS[start]);
            if let Some(ended) = ended {
                prop_assert_eq!(state.phase(), Some(ended), "an ended job changed phase");
            }
            ended = ended.or(state.phase().filter(|p| p.is_terminal()));
        }
    }
}
