//! Stories over several events: stale and vanished pods, names taken,
//! refused creates, the clean-up policy and a teardown.

use super::*;
use crate::api::reason;

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
