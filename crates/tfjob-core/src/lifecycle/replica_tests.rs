//! The replica's machine as tables: from each stage, what each kind of
//! event leads to; every (stage, event) pair against the invariants; and
//! the invariants again over generated histories of a simulated cluster.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

use super::*;
use crate::api::{ReplicaKey, ReplicaType};
use crate::builders::{MANAGED_BY_LABEL, MANAGER};
use crate::lifecycle::machine::PodMode;

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
    let mut labels = std::collections::BTreeMap::new();
    if let Some(epoch) = epoch {
        labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
        labels.insert(PLACEMENT_EPOCH_LABEL.to_string(), epoch.to_string());
    }
    Arc::new(ObservedPod {
        metadata: ObjectMeta {
            name: Some("j-worker-0".into()),
            uid: Some(uid.into()),
            labels: Some(labels),
            deletion_timestamp: deleting
                .then(|| Time(Timestamp::from_second(1_800_000_000).expect("a time"))),
            ..ObjectMeta::default()
        },
        phase: Some(phase.into()),
        containers: Vec::new(),
    })
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

#[test]
fn every_kind_of_event_has_samples_of_its_kind() {
    for &expected in EventKind::ALL {
        let samples = samples(expected);
        assert!(!samples.is_empty(), "{expected:?}");
        for sample in &samples {
            assert_eq!(kind(sample), expected, "{sample:?}");
        }
    }
}

/// From every stage, the first sample of every kind of event: the stage
/// after it and the effects.
#[test]
fn transitions() {
    use Stage::*;
    // One row per stage, one cell per kind of event in `EventKind::ALL`'s order:
    // PodSeen(p1 Running), PodGone(p1), PodCreated(Made p2), PodRead(Found p1),
    // ServiceCreated(Made s1), ServiceRead(Found s1), ServiceDeleted,
    // Restart(p1), Finish(Unfinished), TearDown, RetryDue(Pod).
    let rows: &[(Stage, [&str; 11])] = &[
        (
            Absent,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "Absent:",
                "Absent: Export",
                "Absent:",
                "Absent:",
                "Creating: CreatePod(2)",
                "Finished: Report(Deleted blocked)",
                "TearingDown: ReadPod Report(Deleted blocked)",
                "Creating: CreatePod(1)",
            ],
        ),
        (
            Creating,
            [
                "Live: Report(Running)",
                "Creating:",
                "Live: Report(Pending)",
                "Creating:",
                "Creating: Export",
                "Creating:",
                "Creating:",
                "Creating:",
                "Finished:",
                "TearingDown: ReadPod",
                "Creating:",
            ],
        ),
        (
            Live,
            [
                "Live: Report(Running)",
                "Vanished: Report(Deleted)",
                "Live:",
                "Live:",
                "Live:",
                "Live:",
                "Live:",
                "Replacing: DeletePod(p1)",
                "CleaningUp: DeletePod(p1) DeleteService(s1)",
                "TearingDown: DeletePod(p1) DeleteService(s1)",
                "Live:",
            ],
        ),
        (
            Replacing,
            [
                "Replacing: Report(Running)",
                "Creating: CreatePod(2) Report(Creating)",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "Replacing:",
                "CleaningUp: DeleteService(s1)",
                "TearingDown: DeleteService(s1)",
                "Replacing:",
            ],
        ),
        (
            Vanished,
            [
                "Live: Report(Running)",
                "Vanished:",
                "Live: Report(Pending)",
                "Vanished:",
                "Vanished:",
                "Vanished:",
                "Vanished:",
                "Creating: CreatePod(2) Report(Creating)",
                "CleaningUp: DeleteService(s1)",
                "TearingDown: ReadPod DeleteService(s1)",
                "Vanished:",
            ],
        ),
        (
            ClearingStale,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "ClearingStale:",
                "CleaningUp: DeleteService(s1) Report(Deleted)",
                "TearingDown: DeleteService(s1) Report(Deleted)",
                "ClearingStale:",
            ],
        ),
        (
            Blocked,
            [
                "Live: Report(Running)",
                "Creating: CreatePod(1)",
                "Live: Report(Pending)",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "Blocked:",
                "CleaningUp: DeleteService(s1) Report(Deleted blocked)",
                "TearingDown: ReadPod DeleteService(s1) Report(Deleted blocked)",
                "Blocked:",
            ],
        ),
        (
            Finished,
            [
                "CleaningUp: DeletePod(p1) DeleteService(s1) Report(Running)",
                "CleaningUp: DeleteService(s1) Report(Deleted)",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "Finished:",
                "TearingDown: DeletePod(p1) DeleteService(s1)",
                "Finished:",
            ],
        ),
        (
            CleaningUp,
            [
                "CleaningUp: Report(Running)",
                "CleaningUp: Report(Deleted)",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "CleaningUp:",
                "TearingDown:",
                "CleaningUp:",
            ],
        ),
        (
            TearingDown,
            [
                "TearingDown: Report(Running)",
                "TearingDown: Report(Deleted)",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
                "TearingDown:",
            ],
        ),
        (
            TornDown,
            [
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
                "TornDown:",
            ],
        ),
    ];
    let stages: Vec<Stage> = rows.iter().map(|(stage, _)| *stage).collect();
    assert_eq!(stages, Stage::ALL, "one row per stage, in order");
    let mut cells = 0;
    for (from, expected) in rows {
        for (&kind, expected) in EventKind::ALL.iter().zip(expected) {
            let (mut state, _) = reach(*from);
            let event = samples(kind).remove(0);
            let effects = names(&state.step(event));
            let got = format!("{:?}: {}", state.stage(), effects.join(" "));
            assert_eq!(got.trim_end(), *expected, "{from:?} on {kind:?}");
            cells += 1;
        }
    }
    assert_eq!(cells, Stage::ALL.len() * EventKind::ALL.len());
}

fn step(state: &mut ReplicaState<u32>, event: Event<u32>) -> Vec<String> {
    names(&state.step(event))
}

#[test]
fn a_pod_of_an_earlier_epoch_is_deleted_and_ours_created_once_it_is_gone() {
    let (mut state, effects) = machine(run(), Some(stale("s0")));
    assert_eq!(
        names(&effects),
        [
            "Info",
            "DeletePod(s0)",
            "CreateService(1)",
            "Report(Creating)"
        ]
    );
    // Seen again, being deleted: no second delete, nothing reported.
    let deleting = PodSighting {
        pod: pod("s0", Some(EPOCH - 1), "Running", true),
        ours: true,
    };
    assert!(step(&mut state, Event::PodSeen(deleting)).is_empty());
    let gone = Event::PodGone {
        uid: Some("s0".into()),
    };
    assert_eq!(step(&mut state, gone), ["CreatePod(1)"]);
}

#[test]
fn a_vanished_pod_is_reported_deleted_and_replaced_only_on_restart() {
    let (mut state, _) = machine(run(), Some(own("p1", "Running")));
    let gone = Event::PodGone {
        uid: Some("p1".into()),
    };
    assert_eq!(step(&mut state, gone), ["Report(Deleted)"]);
    let Some(Report { view, .. }) = state.reported.clone() else {
        panic!("nothing reported");
    };
    assert_eq!(
        view.uid.as_deref(),
        Some("p1"),
        "the job counts the exit of p1"
    );
    assert!(step(&mut state, Event::RetryDue(Object::Pod)).is_empty());
    let restart = Event::Restart {
        uid: "p1".into(),
        recipe: Some(2),
    };
    assert_eq!(
        step(&mut state, restart),
        ["CreatePod(2)", "Report(Creating)"]
    );
}

#[test]
fn a_name_taken_by_an_object_not_ours_is_retried_with_backoff_and_never_touched() {
    let (mut state, _) = machine(run(), None);
    let unlabelled = PodSighting {
        pod: pod("f1", None, "Running", false),
        ours: false,
    };
    let taken = || Event::PodCreated(Created::Taken(unlabelled.clone()));
    assert_eq!(
        step(&mut state, taken()),
        ["Warn", "RetryAfter(Pod 1)", "Report(Creating blocked)"]
    );
    assert_eq!(state.stage(), Stage::Blocked);
    assert_eq!(
        state.pod_blocked.as_ref().map(|b| b.reason),
        Some(reason::OBJECT_NAME_TAKEN)
    );
    assert_eq!(
        step(&mut state, Event::RetryDue(Object::Pod)),
        ["CreatePod(1)"]
    );
    assert_eq!(step(&mut state, taken()), ["RetryAfter(Pod 2)"]);
    // One the cache shows is waited for, not retried; its going frees the name.
    assert!(step(&mut state, Event::PodSeen(foreign("f2"))).is_empty());
    assert!(step(&mut state, Event::RetryDue(Object::Pod)).is_empty());
    assert_eq!(
        step(&mut state, Event::PodGone { uid: None }),
        ["CreatePod(1)"]
    );
    assert_eq!(
        step(
            &mut state,
            Event::PodCreated(Created::Made(own("p1", "Pending")))
        ),
        ["Report(Pending)"]
    );
}

#[test]
fn refused_creates_wait_for_the_cluster_or_go_to_the_job() {
    let cases = [
        (
            refused(403, "exceeded quota"),
            vec!["Warn", "Report(Creating refused)"],
            Some(false),
        ),
        (
            refused(422, "is invalid"),
            vec!["Warn", "Report(Creating refused)"],
            Some(true),
        ),
        (
            refused(404, "namespaces \"ns\" not found"),
            vec![
                "NamespaceMissing",
                "Warn",
                "RetryAfter(Pod 1)",
                "Report(Creating blocked)",
            ],
            None,
        ),
        (
            refused(403, "error looking up service account ns/default"),
            vec!["Warn", "RetryAfter(Pod 1)", "Report(Creating blocked)"],
            None,
        ),
        (
            Failure::Unbuildable("bad".into()),
            vec!["Report(Creating refused)"],
            Some(true),
        ),
    ];
    for (failure, effects, everywhere) in cases {
        let shown = format!("{failure:?}");
        let (mut state, _) = machine(run(), None);
        let got = step(&mut state, Event::PodCreated(Created::Failed(failure)));
        assert_eq!(got, effects, "{shown}");
        assert_eq!(state.refusal.map(|r| r.everywhere), everywhere, "{shown}");
    }
}

#[test]
fn the_clean_up_policy_decides_by_the_pods_phase() {
    let cases = [
        (CleanUpPolicy::Unfinished, "Succeeded", false),
        (CleanUpPolicy::Unfinished, "Failed", false),
        (CleanUpPolicy::Unfinished, "Running", true),
        (CleanUpPolicy::Unfinished, "Pending", true),
        (CleanUpPolicy::All, "Succeeded", true),
        (CleanUpPolicy::None, "Running", false),
    ];
    for (policy, phase, deletes) in cases {
        let (mut state, _) = machine(run(), Some(own("p1", phase)));
        step(
            &mut state,
            Event::ServiceCreated(Created::Made(service("s1", true))),
        );
        let got = step(&mut state, Event::Finish(policy));
        let expected: &[&str] = match deletes {
            true => &["DeletePod(p1)", "DeleteService(s1)"],
            false => &[],
        };
        assert_eq!(got, expected, "{policy:?} on a {phase} pod");
    }
}

#[test]
fn a_teardown_waits_for_the_create_in_flight_and_deletes_its_pod() {
    let (mut state, _) = machine(run(), None);
    assert_eq!(step(&mut state, Event::TearDown), ["ReadPod"]);
    assert!(step(&mut state, Event::PodRead(Read::Nothing)).is_empty());
    assert_eq!(
        step(
            &mut state,
            Event::PodCreated(Created::Made(own("p1", "Pending")))
        ),
        ["DeletePod(p1)", "Report(Pending)"]
    );
    assert_eq!(
        step(
            &mut state,
            Event::ServiceCreated(Created::Made(service("s1", true)))
        ),
        ["DeleteService(s1)"]
    );
    assert!(step(&mut state, Event::ServiceDeleted).is_empty());
    let gone = Event::PodGone {
        uid: Some("p1".into()),
    };
    assert_eq!(step(&mut state, gone), ["Report(Deleted)", "TornDown"]);
    assert!(step(&mut state, Event::TearDown).is_empty());
}

/// Checks the invariants on what a replica is told and what it does: at
/// most one create in flight; no create while a pod of the name is known;
/// no delete of an object not ours; torn down only once pod and service
/// were seen gone, and nothing after.
#[derive(Default, Debug)]
struct Witness {
    creates_in_flight: u32,
    /// The pod the replica was last told holds the name (from the cache,
    /// or a create's answer), unless only a create's answer saw it and it
    /// is not ours (a name taken by an object the cache does not show).
    known_pod: Option<PodSighting>,
    pods_ours: BTreeSet<String>,
    services_ours: BTreeSet<String>,
    /// The service was seen gone (or not ours), or a read of it failed for good.
    service_gone: bool,
    torn_down: bool,
}

impl Witness {
    fn cached(&mut self, pod: Option<&PodSighting>) {
        self.known_pod = pod.cloned();
        self.note_pod(pod);
    }

    fn note_pod(&mut self, pod: Option<&PodSighting>) {
        if let Some(seen) = pod.filter(|s| s.ours)
            && let Some(uid) = &seen.pod.metadata.uid
        {
            self.pods_ours.insert(uid.clone());
        }
    }

    fn fed(&mut self, event: &Event<u32>) {
        match event {
            Event::PodSeen(seen) => self.cached(Some(seen)),
            Event::PodGone { .. } => self.known_pod = None,
            Event::PodCreated(answer) => {
                self.creates_in_flight = self.creates_in_flight.saturating_sub(1);
                match answer {
                    Created::Made(seen) => self.cached(Some(seen)),
                    Created::Taken(seen) if seen.ours => self.cached(Some(seen)),
                    _ => {}
                }
            }
            Event::PodRead(Read::Found(seen)) => self.note_pod(Some(seen)),
            Event::ServiceCreated(Created::Made(seen) | Created::Taken(seen))
            | Event::ServiceRead(Read::Found(seen)) => {
                if seen.ours
                    && let Some(uid) = &seen.uid
                {
                    self.services_ours.insert(uid.clone());
                }
                self.service_gone = !seen.ours && matches!(event, Event::ServiceRead(_));
            }
            Event::ServiceRead(Read::Nothing | Read::Failed(_)) | Event::ServiceDeleted => {
                self.service_gone = true;
            }
            _ => {}
        }
    }

    fn check(&mut self, effects: &[Effect<u32>]) {
        assert!(
            !self.torn_down || effects.is_empty(),
            "acted after torn down: {:?}",
            names(effects)
        );
        for effect in effects {
            match effect {
                Effect::CreatePod(_) => {
                    assert_eq!(self.creates_in_flight, 0, "a second create in flight");
                    assert!(
                        self.known_pod.is_none(),
                        "a create while {:?} holds the name",
                        self.known_pod
                    );
                    self.creates_in_flight += 1;
                }
                Effect::DeletePod { uid } => {
                    assert!(self.pods_ours.contains(uid), "deleted pod {uid}, not ours")
                }
                Effect::DeleteService { uid } => assert!(
                    self.services_ours.contains(uid),
                    "deleted service {uid}, not ours"
                ),
                Effect::TornDown => {
                    assert_eq!(
                        self.creates_in_flight, 0,
                        "torn down with a create in flight"
                    );
                    let own_pod = self
                        .known_pod
                        .as_ref()
                        .is_some_and(|seen| seen.ours && epoch_of(&seen.pod) == Some(EPOCH));
                    assert!(!own_pod, "torn down while {:?} is there", self.known_pod);
                    assert!(
                        self.service_gone,
                        "torn down before the service was seen gone"
                    );
                    self.torn_down = true;
                }
                _ => {}
            }
        }
    }
}

/// Every stage against every sample event: no step breaks the invariants.
#[test]
fn no_transition_breaks_the_invariants() {
    let mut pairs = 0;
    for &stage in Stage::ALL {
        for &kind in EventKind::ALL {
            for event in samples(kind) {
                let (mut state, mut witness) = reach(stage);
                witness.fed(&event);
                let shown = format!("{stage:?} on {event:?}");
                let effects = state.step(event);
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    witness.check(&effects)
                }));
                assert!(result.is_ok(), "{shown}: {:?}", names(&effects));
                pairs += 1;
            }
        }
    }
    assert_eq!(pairs, Stage::ALL.len() * 44);
}

/// A pod in the simulated cluster.
#[derive(Clone, Debug, PartialEq)]
struct SimPod {
    uid: String,
    epoch: Option<u64>,
    ours: bool,
    phase: &'static str,
    deleting: bool,
}

impl SimPod {
    fn sighting(&self) -> PodSighting {
        PodSighting {
            pod: pod(&self.uid, self.epoch, self.phase, self.deleting),
            ours: self.ours,
        }
    }

    /// The pod cache (an informer of managed pods) shows it.
    fn cached(&self) -> bool {
        self.epoch.is_some()
    }
}

/// A call the replica made, not answered yet.
#[derive(Clone, Debug)]
enum Call {
    CreatePod,
    CreateService,
    ReadPod,
    ReadService,
    DeleteService(String),
}

/// One cluster, one name: the API's objects, the pod cache's view, and
/// the replica's calls in flight, moved on by one choice at a time.
struct Sim {
    state: ReplicaState<u32>,
    witness: Witness,
    pod: Option<SimPod>,
    /// What the pod cache last told the replica.
    told: Option<SimPod>,
    /// The changes of the pod the cache's watch has yet to tell, in order.
    watch: std::collections::VecDeque<Option<SimPod>>,
    service: Option<ServiceSighting>,
    calls: Vec<Call>,
    retries: Vec<Object>,
    next_uid: u32,
    /// The uid of the replica's pod as last reported.
    reported_uid: Option<String>,
}

impl Sim {
    fn new(pod_choice: u8, service_choice: u8, intent_choice: u8) -> Sim {
        let pod = match pod_choice % 5 {
            0 => None,
            1 => Some((Some(EPOCH - 1), true)),
            2 => Some((Some(EPOCH), true)),
            3 => Some((Some(EPOCH), false)),
            _ => Some((None, false)),
        }
        .map(|(epoch, ours)| SimPod {
            uid: "u0".into(),
            epoch,
            ours,
            phase: "Running",
            deleting: false,
        });
        let service = match service_choice % 3 {
            0 => None,
            1 => Some(service("s0", true)),
            _ => Some(service("x0", false)),
        };
        let intent = match intent_choice % 5 {
            0 | 1 => run(),
            2 => Intent::Finish(CleanUpPolicy::Unfinished),
            3 => Intent::Finish(CleanUpPolicy::All),
            _ => Intent::Retire,
        };
        let told = pod.clone().filter(SimPod::cached);
        let mut sim = Sim {
            state: ReplicaState::new(identity(), intent, Some(1)),
            witness: Witness::default(),
            pod,
            told: told.clone(),
            watch: std::collections::VecDeque::new(),
            service,
            calls: Vec::new(),
            retries: Vec::new(),
            next_uid: 1,
            reported_uid: None,
        };
        let cached = told.map(|p| p.sighting());
        sim.witness.cached(cached.as_ref());
        let effects = sim.state.start(cached);
        sim.apply(effects);
        sim
    }

    fn uid(&mut self, prefix: &str) -> String {
        self.next_uid += 1;
        format!("{prefix}{}", self.next_uid)
    }

    fn feed(&mut self, event: Event<u32>) {
        self.witness.fed(&event);
        let effects = self.state.step(event);
        self.apply(effects);
    }

    fn apply(&mut self, effects: Vec<Effect<u32>>) {
        self.witness.check(&effects);
        for effect in effects {
            match effect {
                Effect::CreatePod(_) => self.calls.push(Call::CreatePod),
                Effect::CreateService(_) => self.calls.push(Call::CreateService),
                Effect::ReadPod => self.calls.push(Call::ReadPod),
                Effect::ReadService => self.calls.push(Call::ReadService),
                Effect::DeleteService { uid } => self.calls.push(Call::DeleteService(uid)),
                Effect::DeletePod { uid } => {
                    if let Some(pod) = self.pod.as_mut().filter(|p| p.uid == uid) {
                        pod.deleting = true;
                        self.changed();
                    }
                }
                Effect::Report(report) => self.reported_uid = report.view.uid,
                Effect::RetryAfter { object, .. } => self.retries.push(object),
                Effect::ExportService
                | Effect::NamespaceMissing
                | Effect::Log { .. }
                | Effect::TornDown => {}
            }
        }
    }

    /// The API's pod changed: the cache's watch will tell it.
    fn changed(&mut self) {
        let now = self.pod.clone().filter(SimPod::cached);
        let last = self.watch.back().unwrap_or(&self.told);
        if now != *last {
            self.watch.push_back(now);
        }
    }

    /// The pod cache tells its next change.
    fn inform(&mut self) {
        let Some(now) = self.watch.pop_front() else {
            return;
        };
        let event = match &now {
            Some(pod) => Event::PodSeen(pod.sighting()),
            None => Event::PodGone {
                uid: self.told.as_ref().map(|p| p.uid.clone()),
            },
        };
        self.told = now;
        self.feed(event);
    }

    fn answer(&mut self, index: usize, choice: u8) {
        if self.calls.is_empty() {
            return;
        }
        let call = self.calls.remove(index % self.calls.len());
        let failure = match choice % 8 {
            0 => Some(refused(500, "etcd timed out")),
            1 => Some(refused(404, "namespaces not found")),
            2 => Some(refused(403, "exceeded quota")),
            _ => None,
        };
        let event = match call {
            Call::CreatePod => Event::PodCreated(match (&self.pod, failure) {
                (_, Some(failure)) => Created::Failed(failure),
                (None, None) => {
                    let made = SimPod {
                        uid: self.uid("p"),
                        epoch: Some(EPOCH),
                        ours: true,
                        phase: "Pending",
                        deleting: false,
                    };
                    self.pod = Some(made.clone());
                    Created::Made(made.sighting())
                }
                // Gone between the create's conflict and the read.
                (Some(pod), None) if pod.deleting => {
                    self.pod = None;
                    Created::Freed
                }
                (Some(pod), None) => Created::Taken(pod.sighting()),
            }),
            Call::CreateService => Event::ServiceCreated(match (&self.service, failure) {
                (_, Some(failure)) => Created::Failed(failure),
                (None, None) => {
                    let made = service(&self.uid("s"), true);
                    self.service = Some(made.clone());
                    Created::Made(made)
                }
                (Some(found), None) => Created::Taken(found.clone()),
            }),
            Call::ReadPod => Event::PodRead(match &self.pod {
                Some(pod) => Read::Found(pod.sighting()),
                None => Read::Nothing,
            }),
            Call::ReadService => Event::ServiceRead(match &self.service {
                Some(found) => Read::Found(found.clone()),
                None => Read::Nothing,
            }),
            Call::DeleteService(uid) => {
                if self.service.as_ref().and_then(|s| s.uid.as_ref()) == Some(&uid) {
                    self.service = None;
                }
                Event::ServiceDeleted
            }
        };
        self.changed();
        self.feed(event);
    }

    /// One thing happens, by `choice`.
    fn happen(&mut self, choice: u8, detail: u8) {
        match choice % 12 {
            0 | 1 => self.inform(),
            2 => self.answer(0, detail),
            3 => self.answer(usize::from(detail), detail / 8),
            4 => {
                if let Some(pod) = self.pod.as_mut() {
                    pod.phase = ["Running", "Succeeded", "Failed"][usize::from(detail % 3)];
                }
            }
            // The kubelet finishes a deletion.
            5 => {
                if self.pod.as_ref().is_some_and(|p| p.deleting) {
                    self.pod = None;
                }
            }
            // Someone deletes the pod, or the pod not ours goes.
            6 => match self.pod.as_mut() {
                Some(pod) if pod.ours => pod.deleting = true,
                _ => self.pod = None,
            },
            // Someone takes the free name.
            7 => {
                if self.pod.is_none() {
                    self.pod = Some(SimPod {
                        uid: self.uid("f"),
                        epoch: detail.is_multiple_of(2).then_some(EPOCH),
                        ours: false,
                        phase: "Running",
                        deleting: false,
                    });
                }
            }
            8 => {
                let uid = match detail % 2 {
                    0 => self.reported_uid.clone(),
                    _ => self.pod.as_ref().map(|p| p.uid.clone()),
                };
                if let Some(uid) = uid {
                    let recipe = (!detail.is_multiple_of(5)).then_some(u32::from(detail));
                    self.feed(Event::Restart { uid, recipe });
                }
            }
            9 => {
                let policy = [
                    CleanUpPolicy::Unfinished,
                    CleanUpPolicy::All,
                    CleanUpPolicy::None,
                ][usize::from(detail % 3)];
                self.feed(Event::Finish(policy));
            }
            10 => self.feed(Event::TearDown),
            _ => self.retry(),
        }
        self.changed();
    }

    /// The first retry asked for comes due.
    fn retry(&mut self) {
        if !self.retries.is_empty() {
            let object = self.retries.remove(0);
            self.feed(Event::RetryDue(object));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    /// Generated histories of one replica in a cluster where pods come and
    /// go, calls fail and the job restarts, finishes and tears down: the
    /// witness checks every step.
    #[test]
    fn generated_histories_keep_the_invariants(
        start in (any::<u8>(), any::<u8>(), any::<u8>()),
        steps in prop::collection::vec((any::<u8>(), any::<u8>()), 0..80),
    ) {
        let mut sim = Sim::new(start.0, start.1, start.2);
        for (choice, detail) in steps {
            sim.happen(choice, detail);
        }
    }
}

impl Sim {
    /// The cluster settles: calls answered without failing, deletions
    /// finished, the cache caught up, retries due.
    fn drain(&mut self) {
        for _ in 0..50 {
            self.inform();
            if self.pod.as_ref().is_some_and(|p| p.deleting) {
                self.pod = None;
            }
            self.answer(0, 7);
            self.changed();
            if self.calls.is_empty() {
                self.retry();
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// A teardown ends, whatever came before, once the cluster settles.
    #[test]
    fn a_teardown_ends_once_the_cluster_settles(
        start in (any::<u8>(), any::<u8>(), any::<u8>()),
        steps in prop::collection::vec((any::<u8>(), any::<u8>()), 0..40),
    ) {
        let mut sim = Sim::new(start.0, start.1, start.2);
        for (choice, detail) in steps {
            sim.happen(choice, detail);
        }
        sim.feed(Event::TearDown);
        sim.drain();
        prop_assert!(sim.witness.torn_down, "not torn down: {:?}", sim.state);
    }
}
