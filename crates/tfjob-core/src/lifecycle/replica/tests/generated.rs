//! The invariants over generated histories of one replica in a simulated
//! cluster, where pods come and go, calls fail and the job restarts,
//! finishes and tears down.

use proptest::prelude::*;

use super::*;

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
