//! One replica's pod and service, decided without I/O: the `ReplicaActor`
//! feeds what it observes and what its API calls answered as [`Event`]s,
//! and carries out the [`Effect`]s. The replica is the only writer of its
//! pod, so "never two pods for one replica" and "torn down means gone" are
//! kept here (see the invariants in `tests/invariants.rs`).
//!
//! A replica belongs to one placement epoch (its pod's `placement-epoch`
//! label). A pod of another epoch under the same name — left by an earlier
//! placement — is not its pod: it is deleted, never reported, and the
//! replica's own pod is created once it is gone. An object under the
//! replica's name that this controller did not make is never touched: the
//! replica reports the name taken and waits until it is free.
//!
//! The stages ([`Stage`]), read from the goal the job gave and what holds
//! the pod's name:
//!
//! | stage | what the replica waits for |
//! |---|---|
//! | `Absent` | a retry of a refused create, or a recipe from a restart |
//! | `Creating` | the answer to its pod's create |
//! | `Live` | its pod to change; a restart from the job |
//! | `Replacing` | the pod the job restarts to be gone, to create the next |
//! | `Vanished` | the job to decide about a pod that went unasked |
//! | `ClearingStale` | a pod of another epoch to be gone |
//! | `Blocked` | an object not its own to free the pod's name |
//! | `Finished` | nothing: the clean-up policy keeps what there is |
//! | `CleaningUp` | the pod or service the clean-up policy removes to go |
//! | `TearingDown` | its pod and service to be gone |
//! | `TornDown` | nothing (the actor stops) |
//!
//! The machine by concern, one file each: `events` (what it hears and
//! does), `pod`, `service` and `blocked` (creates retried or refused);
//! this file holds the state, the dispatch of events and what follows
//! every step (clean-up, the report, the end of a teardown).

use std::sync::Arc;

use super::restart::clean_up_deletes;
use crate::api::{CleanUpPolicy, ReplicaPhase};
use crate::lifecycle::machine::{Blocked, Intent, Refusal};
use crate::observed::ObservedPod;
use crate::status::ReplicaView;

pub use events::{
    Created, Effect, Event, Failure, Identity, Object, PodSighting, Read, Report, ServiceSighting,
};

mod blocked;
mod events;
mod pod;
mod service;

/// Declares a fieldless enum with `ALL`, every variant in order, so that
/// tables over it cannot leave a new variant out.
macro_rules! listed {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)* }) => {
        $(#[$meta])*
        pub enum $name { $($(#[$vmeta])* $variant,)* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];
        }
    };
}

listed! {
    /// The replica's stage, read from its state (see the module's table).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Stage {
        Absent,
        Creating,
        Live,
        Replacing,
        Vanished,
        ClearingStale,
        Blocked,
        Finished,
        CleaningUp,
        TearingDown,
        TornDown,
    }
}

/// What the job wants of the replica.
#[derive(Clone, Debug)]
enum Goal<R> {
    /// A pod of this epoch. `recipe`: the pod to create while there is
    /// none (None once it exists, or when it cannot be built).
    Run {
        recipe: Option<R>,
        /// Its pod went without being asked to: no new one until the
        /// job's `Restart`.
        vanished: bool,
    },
    Finish(CleanUpPolicy),
    TearDown,
}

/// What holds the pod's name, as the replica knows.
#[derive(Clone, Debug)]
enum PodState {
    Absent,
    /// Our pod of this epoch.
    Live(Arc<ObservedPod>),
    /// Our pod of this epoch, which we asked to delete.
    Deleting(Arc<ObservedPod>),
    /// Our pod of another placement epoch, being deleted.
    Stale {
        uid: Option<String>,
    },
    /// An object not ours: in the pod cache (its going is reported), or
    /// only answered by a create (tried again after a backoff).
    Foreign {
        cached: bool,
    },
    /// Not in the cache; a read asks the API (a teardown's).
    Reading,
}

#[derive(Clone, Debug)]
enum ServiceState<R> {
    ToCreate(R),
    Creating(R),
    Exists {
        uid: Option<String>,
    },
    /// None to create; one may be there from an earlier start.
    Untracked,
    Reading,
    Deleting,
    Gone,
}

/// One replica's pod and service.
#[derive(Clone, Debug)]
pub struct ReplicaState<R> {
    id: Identity,
    goal: Goal<R>,
    pod: PodState,
    /// A pod create is in flight (the cache may show its pod before the
    /// answer comes).
    creating: bool,
    service: ServiceState<R>,
    pod_blocked: Option<Blocked>,
    service_blocked: Option<Blocked>,
    /// Failed creates since the last success, for the backoff.
    blocked_tries: u32,
    refusal: Option<Refusal>,
    /// The uid of the last pod of ours seen, reported once it is gone.
    last_uid: Option<String>,
    reported: Option<Report>,
    torn_down: bool,
    effects: Vec<Effect<R>>,
}

impl<R: Clone> ReplicaState<R> {
    /// A replica started with `intent`; `recipe` builds its pod and service.
    pub fn new(id: Identity, intent: Intent, recipe: Option<R>) -> ReplicaState<R> {
        let (goal, service) = match (intent, recipe) {
            (Intent::Run(_), Some(recipe)) => (
                Goal::Run {
                    recipe: Some(recipe.clone()),
                    vanished: false,
                },
                ServiceState::ToCreate(recipe),
            ),
            (Intent::Run(_), None) => (
                Goal::Run {
                    recipe: None,
                    vanished: false,
                },
                ServiceState::Untracked,
            ),
            (Intent::Finish(policy), _) => (Goal::Finish(policy), ServiceState::Untracked),
            (Intent::Retire, _) => (Goal::TearDown, ServiceState::Untracked),
        };
        ReplicaState {
            id,
            goal,
            pod: PodState::Absent,
            creating: false,
            service,
            pod_blocked: None,
            service_blocked: None,
            blocked_tries: 0,
            refusal: None,
            last_uid: None,
            reported: None,
            torn_down: false,
            effects: Vec::new(),
        }
    }

    /// The first step: the pod cache shows `cached` under the name.
    pub fn start(&mut self, cached: Option<PodSighting>) -> Vec<Effect<R>> {
        if let Some(seen) = cached {
            self.see(seen);
        }
        if matches!(self.goal, Goal::TearDown) {
            self.begin_teardown();
        } else {
            self.ensure_service();
            self.ensure_pod();
        }
        self.settle()
    }

    pub fn step(&mut self, event: Event<R>) -> Vec<Effect<R>> {
        if self.torn_down {
            return Vec::new();
        }
        match event {
            Event::PodSeen(seen) => {
                self.see(seen);
                self.ensure_pod();
            }
            Event::PodGone { uid } => {
                self.gone(uid);
                self.ensure_pod();
            }
            Event::PodCreated(answer) => self.pod_created(answer),
            Event::PodRead(read) => self.pod_read(read),
            Event::ServiceCreated(answer) => self.service_created(answer),
            Event::ServiceRead(read) => self.service_read(read),
            Event::ServiceDeleted => {
                if matches!(self.service, ServiceState::Deleting) {
                    self.service = ServiceState::Gone;
                }
            }
            Event::Restart { uid, recipe } => self.restart(uid, recipe),
            Event::Finish(policy) => {
                if !matches!(self.goal, Goal::TearDown) {
                    self.goal = Goal::Finish(policy);
                }
            }
            Event::TearDown => {
                if !matches!(self.goal, Goal::TearDown) {
                    self.goal = Goal::TearDown;
                    self.begin_teardown();
                }
            }
            Event::RetryDue(Object::Pod) => {
                if matches!(self.pod, PodState::Foreign { cached: false }) {
                    self.pod = PodState::Absent;
                }
                self.ensure_pod();
            }
            Event::RetryDue(Object::Service) => self.ensure_service(),
        }
        self.settle()
    }

    pub fn stage(&self) -> Stage {
        if self.torn_down {
            return Stage::TornDown;
        }
        match &self.goal {
            Goal::TearDown => Stage::TearingDown,
            Goal::Finish(_) => {
                let deleting = matches!(self.pod, PodState::Deleting(_))
                    || matches!(self.service, ServiceState::Reading | ServiceState::Deleting);
                if deleting {
                    Stage::CleaningUp
                } else {
                    Stage::Finished
                }
            }
            Goal::Run { vanished, .. } => match &self.pod {
                PodState::Live(_) => Stage::Live,
                PodState::Deleting(_) => Stage::Replacing,
                PodState::Stale { .. } => Stage::ClearingStale,
                PodState::Foreign { .. } => Stage::Blocked,
                PodState::Absent | PodState::Reading if self.creating => Stage::Creating,
                PodState::Absent | PodState::Reading if *vanished => Stage::Vanished,
                PodState::Absent | PodState::Reading => Stage::Absent,
            },
        }
    }

    /// After every step: the clean-up or teardown's deletes, the report if
    /// it changed, and the end of a teardown.
    fn settle(&mut self) -> Vec<Effect<R>> {
        match self.goal {
            Goal::Finish(policy) => {
                let phase = match &self.pod {
                    PodState::Live(pod) | PodState::Deleting(pod) => pod.phase.as_deref(),
                    _ => None,
                };
                if clean_up_deletes(policy, phase) {
                    self.delete_own_pod();
                    self.delete_service();
                }
            }
            Goal::TearDown => {
                self.delete_own_pod();
                self.delete_service();
            }
            Goal::Run { .. } => {}
        }
        self.report();
        let own_pod = matches!(
            self.pod,
            PodState::Live(_) | PodState::Deleting(_) | PodState::Reading
        );
        let gone = !own_pod && !self.creating && matches!(self.service, ServiceState::Gone);
        if matches!(self.goal, Goal::TearDown) && gone {
            self.torn_down = true;
            self.effects.push(Effect::TornDown);
        }
        std::mem::take(&mut self.effects)
    }

    fn report(&mut self) {
        let cluster = Some(self.id.cluster.clone());
        let view = match &self.pod {
            PodState::Live(pod) | PodState::Deleting(pod) => {
                ReplicaView::of_pod(self.id.key, pod, cluster)
            }
            _ => {
                let mut view = ReplicaView::creating(self.id.key, self.id.name.clone(), cluster);
                let awaited = self.creating
                    || matches!(
                        self.goal,
                        Goal::Run {
                            vanished: false,
                            ..
                        }
                    );
                if !awaited {
                    view.phase = ReplicaPhase::Deleted;
                    view.uid = self.last_uid.clone();
                }
                view
            }
        };
        let report = Report {
            view,
            blocked: self.pod_blocked.clone().or(self.service_blocked.clone()),
            refusal: self.refusal.clone(),
        };
        if self.reported.as_ref() != Some(&report) {
            self.reported = Some(report.clone());
            self.effects.push(Effect::Report(Box::new(report)));
        }
    }

    fn log(&mut self, warning: bool, message: String) {
        self.effects.push(Effect::Log { warning, message });
    }
}

#[cfg(test)]
mod tests;
