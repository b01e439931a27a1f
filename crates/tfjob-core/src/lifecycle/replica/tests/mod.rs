//! The replica's machine as tables: from each stage, what the first
//! sample of each kind of event leads to (`transitions`); stories over
//! several events (`stories`); every (stage, event) pair against the
//! invariants (`invariants`); and the invariants again over generated
//! histories of a simulated cluster (`generated`). This file holds what
//! they share.

use super::*;
use crate::api::{ReplicaKey, ReplicaType};
use crate::builders::{MANAGED_BY_LABEL, MANAGER, PLACEMENT_EPOCH_LABEL};
use crate::lifecycle::machine::PodMode;

mod generated;
mod invariants;
mod stories;
mod transitions;
use invariants::Witness;

/// The replica's placement epoch; pods of epoch 1 are an earlier placement's.
const EPOCH: u64 = 2;

fn identity() -> Identity {
    Identity {
        key: ReplicaKey::new(ReplicaType::Worker, 0),
        epoch: EPOCH,
        namespace: "ns".into(),
        name: "j-worker-0".into(),
        cluster: "member-1".into(),
        export_services: true,
    }
}

/// A pod under the name: of `epoch` (None: no label), in `phase`.
fn pod(uid: &str, epoch: Option<u64>, phase: &str, deleting: bool) -> Arc<ObservedPod> {
    let labels = match epoch {
        Some(epoch) => serde_json::json!({
            MANAGED_BY_LABEL: MANAGER,
            PLACEMENT_EPOCH_LABEL: epoch.to_string(),
        }),
        None => serde_json::json!({}),
    };
    let deletion = deleting.then_some("2027-01-15T08:00:00Z");
    let pod = serde_json::json!({
        "metadata": {"name": "j-worker-0", "uid": uid, "labels": labels, "deletionTimestamp": deletion},
        "status": {"phase": phase},
    });
    Arc::new(serde_json::from_value(pod).expect("a pod"))
}

fn own(uid: &str, phase: &str) -> PodSighting {
    PodSighting {
        pod: pod(uid, Some(EPOCH), phase, false),
        ours: true,
    }
}

fn stale(uid: &str) -> PodSighting {
    PodSighting {
        pod: pod(uid, Some(EPOCH - 1), "Running", false),
        ours: true,
    }
}

/// A pod that copies our labels but carries no signature.
fn foreign(uid: &str) -> PodSighting {
    PodSighting {
        pod: pod(uid, Some(EPOCH), "Running", false),
        ours: false,
    }
}

fn service(uid: &str, ours: bool) -> ServiceSighting {
    ServiceSighting {
        uid: Some(uid.into()),
        ours,
    }
}

fn refused(code: u16, message: &str) -> Failure {
    Failure::Refused {
        code,
        message: message.into(),
        shown: format!("{code}: {message}"),
    }
}

fn machine(intent: Intent, cached: Option<PodSighting>) -> (ReplicaState<u32>, Vec<Effect<u32>>) {
    let mut state = ReplicaState::new(identity(), intent, Some(1));
    let effects = state.start(cached);
    (state, effects)
}

fn run() -> Intent {
    Intent::Run(PodMode::Normal)
}

/// Effects as short words, so rows read as a table.
fn names(effects: &[Effect<u32>]) -> Vec<String> {
    effects
        .iter()
        .map(|effect| match effect {
            Effect::CreatePod(recipe) => format!("CreatePod({recipe})"),
            Effect::CreateService(recipe) => format!("CreateService({recipe})"),
            Effect::DeletePod { uid } => format!("DeletePod({uid})"),
            Effect::ReadPod => "ReadPod".into(),
            Effect::ReadService => "ReadService".into(),
            Effect::DeleteService { uid } => format!("DeleteService({uid})"),
            Effect::ExportService => "Export".into(),
            Effect::Report(report) => format!(
                "Report({:?}{}{})",
                report.view.phase,
                report.blocked.as_ref().map_or("", |_| " blocked"),
                report.refusal.as_ref().map_or("", |_| " refused"),
            ),
            Effect::RetryAfter { object, tries } => format!("RetryAfter({object:?} {tries})"),
            Effect::NamespaceMissing => "NamespaceMissing".into(),
            Effect::Log { warning: true, .. } => "Warn".into(),
            Effect::Log { warning: false, .. } => "Info".into(),
            Effect::TornDown => "TornDown".into(),
        })
        .collect()
}

/// A replica in `stage`, reached from its start by events, with the
/// events that led there (for the invariants' witness).
fn reach(stage: Stage) -> (ReplicaState<u32>, Witness) {
    let made = || Event::PodCreated(Created::Made(own("p1", "Pending")));
    let service_made = || Event::ServiceCreated(Created::Made(service("s1", true)));
    let (intent, cached, events) = match stage {
        Stage::Absent => (
            run(),
            None,
            vec![Event::PodCreated(Created::Failed(Failure::NoAnswer(
                "timed out".into(),
            )))],
        ),
        Stage::Creating => (run(), None, vec![]),
        Stage::Live => (run(), None, vec![made(), service_made()]),
        Stage::Replacing => (
            run(),
            None,
            vec![
                made(),
                service_made(),
                Event::Restart {
                    uid: "p1".into(),
                    recipe: Some(2),
                },
            ],
        ),
        Stage::Vanished => (
            run(),
            None,
            vec![
                made(),
                service_made(),
                Event::PodGone {
                    uid: Some("p1".into()),
                },
            ],
        ),
        Stage::ClearingStale => (run(), Some(stale("s0")), vec![service_made()]),
        Stage::Blocked => (run(), Some(foreign("f0")), vec![service_made()]),
        Stage::Finished => (
            run(),
            None,
            vec![
                made(),
                service_made(),
                Event::PodSeen(own("p1", "Succeeded")),
                Event::Finish(CleanUpPolicy::Unfinished),
            ],
        ),
        Stage::CleaningUp => (
            run(),
            None,
            vec![
                made(),
                service_made(),
                Event::Finish(CleanUpPolicy::Unfinished),
            ],
        ),
        Stage::TearingDown => (run(), None, vec![made(), service_made(), Event::TearDown]),
        Stage::TornDown => (
            Intent::Retire,
            None,
            vec![
                Event::PodRead(Read::Nothing),
                Event::ServiceRead(Read::Nothing),
            ],
        ),
    };
    let mut witness = Witness::default();
    witness.cached(cached.as_ref());
    let mut state = ReplicaState::new(identity(), intent, Some(1));
    let effects = state.start(cached);
    witness.check(&effects);
    for event in events {
        witness.fed(&event);
        let effects = state.step(event);
        witness.check(&effects);
    }
    assert_eq!(state.stage(), stage, "reach({stage:?})");
    (state, witness)
}

listed! {
    /// The kinds of [`Event`], so tables over them cannot leave one out.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum EventKind {
        PodSeen,
        PodGone,
        PodCreated,
        PodRead,
        ServiceCreated,
        ServiceRead,
        ServiceDeleted,
        Restart,
        Finish,
        TearDown,
        RetryDue,
    }
}

fn kind(event: &Event<u32>) -> EventKind {
    match event {
        Event::PodSeen(_) => EventKind::PodSeen,
        Event::PodGone { .. } => EventKind::PodGone,
        Event::PodCreated(_) => EventKind::PodCreated,
        Event::PodRead(_) => EventKind::PodRead,
        Event::ServiceCreated(_) => EventKind::ServiceCreated,
        Event::ServiceRead(_) => EventKind::ServiceRead,
        Event::ServiceDeleted => EventKind::ServiceDeleted,
        Event::Restart { .. } => EventKind::Restart,
        Event::Finish(_) => EventKind::Finish,
        Event::TearDown => EventKind::TearDown,
        Event::RetryDue(_) => EventKind::RetryDue,
    }
}

/// Events of `kind`: the first is the table's, all go through the sweep.
fn samples(kind: EventKind) -> Vec<Event<u32>> {
    match kind {
        EventKind::PodSeen => vec![
            Event::PodSeen(own("p1", "Running")),
            Event::PodSeen(own("p1", "Failed")),
            Event::PodSeen(PodSighting {
                pod: pod("p1", Some(EPOCH), "Running", true),
                ours: true,
            }),
            Event::PodSeen(own("p2", "Pending")),
            Event::PodSeen(stale("s1")),
            Event::PodSeen(foreign("f1")),
        ],
        EventKind::PodGone => vec![
            Event::PodGone {
                uid: Some("p1".into()),
            },
            Event::PodGone { uid: None },
            Event::PodGone {
                uid: Some("s0".into()),
            },
        ],
        EventKind::PodCreated => vec![
            Event::PodCreated(Created::Made(own("p2", "Pending"))),
            Event::PodCreated(Created::Taken(own("p1", "Running"))),
            Event::PodCreated(Created::Taken(stale("s1"))),
            Event::PodCreated(Created::Taken(PodSighting {
                pod: pod("f1", None, "Running", false),
                ours: false,
            })),
            Event::PodCreated(Created::Freed),
            Event::PodCreated(Created::Failed(refused(403, "exceeded quota"))),
            Event::PodCreated(Created::Failed(refused(422, "is invalid"))),
            Event::PodCreated(Created::Failed(refused(404, "namespaces not found"))),
            Event::PodCreated(Created::Failed(refused(500, "etcd timed out"))),
            Event::PodCreated(Created::Failed(Failure::NoAnswer("reset".into()))),
            Event::PodCreated(Created::Failed(Failure::Unbuildable("bad".into()))),
        ],
        EventKind::PodRead => vec![
            Event::PodRead(Read::Found(own("p1", "Running"))),
            Event::PodRead(Read::Found(stale("s1"))),
            Event::PodRead(Read::Found(foreign("f1"))),
            Event::PodRead(Read::Nothing),
            Event::PodRead(Read::Failed("forbidden".into())),
        ],
        EventKind::ServiceCreated => vec![
            Event::ServiceCreated(Created::Made(service("s1", true))),
            Event::ServiceCreated(Created::Taken(service("s0", true))),
            Event::ServiceCreated(Created::Taken(service("x1", false))),
            Event::ServiceCreated(Created::Freed),
            Event::ServiceCreated(Created::Failed(refused(404, "namespaces not found"))),
            Event::ServiceCreated(Created::Failed(refused(403, "exceeded quota"))),
        ],
        EventKind::ServiceRead => vec![
            Event::ServiceRead(Read::Found(service("s1", true))),
            Event::ServiceRead(Read::Found(service("x1", false))),
            Event::ServiceRead(Read::Nothing),
        ],
        EventKind::ServiceDeleted => vec![Event::ServiceDeleted],
        EventKind::Restart => vec![
            Event::Restart {
                uid: "p1".into(),
                recipe: Some(2),
            },
            Event::Restart {
                uid: "p0".into(),
                recipe: Some(2),
            },
            Event::Restart {
                uid: "p1".into(),
                recipe: None,
            },
        ],
        EventKind::Finish => vec![
            Event::Finish(CleanUpPolicy::Unfinished),
            Event::Finish(CleanUpPolicy::All),
            Event::Finish(CleanUpPolicy::None),
        ],
        EventKind::TearDown => vec![Event::TearDown],
        EventKind::RetryDue => vec![
            Event::RetryDue(Object::Pod),
            Event::RetryDue(Object::Service),
        ],
    }
}
