//! What no step of a replica may break, checked by a witness of what it
//! was told and what it did, on every (stage, event) pair.

use std::collections::BTreeSet;

use super::*;
use crate::lifecycle::replica::pod::epoch_of;

/// Checks the invariants on what a replica is told and what it does: at
/// most one create in flight; no create while a pod of the name is known;
/// no delete of an object not ours; torn down only once pod and service
/// were seen gone, and nothing after.
#[derive(Default, Debug)]
pub(super) struct Witness {
    creates_in_flight: u32,
    /// The pod the replica was last told holds the name (from the cache,
    /// or a create's answer), unless only a create's answer saw it and it
    /// is not ours (a name taken by an object the cache does not show).
    known_pod: Option<PodSighting>,
    pods_ours: BTreeSet<String>,
    services_ours: BTreeSet<String>,
    /// The service was seen gone (or not ours), or a read of it failed for good.
    service_gone: bool,
    pub(super) torn_down: bool,
}

impl Witness {
    pub(super) fn cached(&mut self, pod: Option<&PodSighting>) {
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

    pub(super) fn fed(&mut self, event: &Event<u32>) {
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

    pub(super) fn check(&mut self, effects: &[Effect<u32>]) {
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
