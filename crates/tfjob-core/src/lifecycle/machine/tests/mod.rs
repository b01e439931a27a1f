//! The job state machine as tables: from each stage a job can be in, what
//! one event leads to (stage, phase, effects) (`transitions`); every
//! (stage, event) pair against the invariants no transition may break
//! (`invariants`); a controller that restarts (`recovery`); and stories
//! over several events (`stories`). This file holds what they share.

use super::*;

mod invariants;
mod partial_failover;
mod recovery;
mod stories;
mod transitions;
use crate::api::{ContainerStatus, DependentStatus, ReplicaPhase as RP, TensorFlowTrainingJob};

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
    static SPEC: std::sync::LazyLock<Spec> = std::sync::LazyLock::new(|| {
        let job = job(2, "OnFailure");
        Spec::of(&job, Some(Replicas::of(&job)), None, true)
    });
    SPEC.clone()
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

/// The spec, failing over replica by replica.
fn lost_replicas() -> Event {
    with(|s| s.failover = FailoverScope::LostReplicas)
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
            Effect::RetryLater => "RetryLater".into(),
            Effect::EnsureTensorBoard => "EnsureTensorBoard".into(),
            Effect::StartReplicas {
                epochs,
                intent,
                assignment,
            } => {
                let kept: Vec<String> = assignment
                    .keys()
                    .filter(|k| epochs.of(**k) != epochs.job)
                    .map(|k| format!("{k}@e{}", epochs.of(*k)))
                    .collect();
                match kept.is_empty() {
                    true => format!("Start(e{} {intent:?})", epochs.job),
                    false => format!("Start(e{} {intent:?} {})", epochs.job, kept.join(",")),
                }
            }
            Effect::PlaceReplicas(keys) => format!(
                "Place({})",
                keys.iter()
                    .map(ReplicaKey::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
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

/// The situations a job can be in, each reached by events from a new job
/// or from a status an earlier controller left (`SITUATIONS` lists them).
fn reach(stage: &str) -> JobState {
    let recovered_running = |first: Event| recovered(running_status(-30), first).0;
    match stage {
        "resolving" => return recovered_running(Event::SpecChanged(spec())),
        "deleting-unresolved" => return recovered_running(deleted()),
        "unverified" => {
            let stored: TensorFlowTrainingJobStatus =
                serde_json::from_value(running_status(-30)).expect("a status");
            let mut state = JobState::unverified(Some(&stored), "j", "status: no seal".into());
            state.step(Event::SpecChanged(spec()), t(0));
            return state;
        }
        "switching-mode-lost" => {
            let mut state = reach("switching-mode");
            state.step(lost(), t(0));
            return state;
        }
        _ => {}
    }
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
        // Created paused: admitted after its first status, then paused.
        "admitting" => vec![with(|s| {
            s.has_finalizer = false;
            s.accepted = None;
            s.pause = true;
        })],
        // A new job is placed before it is admitted.
        "placing" => vec![spec_unadmitted()],
        "waiting" => vec![spec_unadmitted(), no_room()],
        // The placement's write (the job's first status) is out; the
        // finalizer follows it.
        "recording" => vec![spec_unadmitted(), placed()],
        "preparing" => vec![
            spec_unadmitted(),
            placed(),
            Event::Persisted(1),
            Event::Admitted,
        ],
        _ => vec![
            spec_unadmitted(),
            placed(),
            Event::Persisted(1),
            Event::Admitted,
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
        "moving" | "moving-placed" => {
            events.extend(running());
            events.extend([lost_replicas(), lost()]);
            if stage == "moving-placed" {
                events.push(Event::Placed([(WORKER_1, "member-2".to_string())].into()));
            }
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

/// Every situation `reach` knows.
const SITUATIONS: [&str; 22] = [
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
    "switching-mode-lost",
    "moving",
    "moving-placed",
    "succeeded",
    "failed",
    "invalid",
    "deleting",
    "resolving",
    "deleting-unresolved",
    "unverified",
];

fn spec_unadmitted() -> Event {
    with(|s| {
        s.has_finalizer = false;
        s.accepted = None;
    })
}

/// Every name `stage_name` gives: its match has no wildcard, so a new
/// stage does not compile until it has a name, and the sweep fails until
/// a situation reaches it.
const STAGE_NAMES: [&str; 14] = [
    "New",
    "Admitting",
    "Placing",
    "Resolving",
    "Preparing",
    "Active",
    "Retiring→Place",
    "Retiring→Pause",
    "Retiring→Start",
    "Paused",
    "Finished",
    "Deleting",
    "Deleting→Resolve",
    "Unverified",
];

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
        Stage::Deleting { retiring: Some(_) } => "Deleting",
        Stage::Deleting { retiring: None } => "Deleting→Resolve",
        Stage::Unverified { .. } => "Unverified",
    }
}

fn condition(state: &JobState, kind: Cond) -> Option<(ConditionStatus, String)> {
    status::condition(&state.status.conditions, kind)
        .map(|c| (c.status, c.reason.clone().unwrap_or_default()))
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
