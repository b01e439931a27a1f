//! One replica's pod and service, decided without I/O: the `ReplicaActor`
//! feeds what it observes and what its API calls answered as [`Event`]s,
//! and carries out the [`Effect`]s. The replica is the only writer of its
//! pod, so "never two pods for one replica" and "torn down means gone" are
//! kept here (see the invariants in `replica_tests.rs`).
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

use std::sync::Arc;

use super::refusal::{RefusalKind, classify};
use super::restart::clean_up_deletes;
use crate::api::{CleanUpPolicy, ReplicaPhase, reason};
use crate::builders::PLACEMENT_EPOCH_LABEL;
use crate::lifecycle::machine::{Blocked, Intent, Refusal};
use crate::observed::ObservedPod;
use crate::status::ReplicaView;

pub use super::replica_events::{
    Created, Effect, Event, Failure, Identity, Object, PodSighting, Read, Report, ServiceSighting,
};

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

    /// Takes a pod seen under the name: its own, one of another epoch to
    /// delete, or one not ours to wait for.
    fn see(&mut self, seen: PodSighting) {
        let uid = seen.pod.metadata.uid.clone();
        if !seen.ours {
            if let (PodState::Live(_), Goal::Run { vanished, .. }) = (&self.pod, &mut self.goal) {
                *vanished = true;
            }
            self.pod = PodState::Foreign { cached: true };
            if matches!(self.goal, Goal::Run { .. }) && !self.creating {
                self.block(Object::Pod, self.id.name_taken(Object::Pod));
            }
            return;
        }
        if epoch_of(&seen.pod) != Some(self.id.epoch) {
            let known = matches!(&self.pod, PodState::Stale { uid: stale } if *stale == uid);
            if !known && !seen.pod.is_deleting() {
                self.log(
                    false,
                    format!(
                        "deleting pod {}/{} on {} of an earlier placement (epoch {:?})",
                        self.id.namespace,
                        self.id.name,
                        self.id.cluster,
                        epoch_of(&seen.pod)
                    ),
                );
                self.delete_pod(uid.clone());
            }
            self.pod = PodState::Stale { uid };
            return;
        }
        if uid.is_some() {
            self.last_uid = uid.clone();
        }
        // The pod's name is ours now.
        self.unblock(Object::Pod);
        match &self.pod {
            PodState::Deleting(old) if old.metadata.uid == uid => {
                self.pod = PodState::Deleting(seen.pod);
            }
            _ => {
                if let Goal::Run { recipe, .. } = &mut self.goal {
                    *recipe = None;
                }
                self.pod = PodState::Live(seen.pod);
            }
        }
    }

    fn gone(&mut self, uid: Option<String>) {
        match &self.pod {
            // An older pod of the name went after ours came from its create's answer.
            PodState::Live(pod) | PodState::Deleting(pod)
                if uid.is_some() && pod.metadata.uid != uid =>
            {
                return;
            }
            PodState::Live(_) => {
                if let Goal::Run { vanished, .. } = &mut self.goal {
                    *vanished = true;
                }
            }
            _ => {}
        }
        self.pod = PodState::Absent;
    }

    fn pod_created(&mut self, answer: Created<PodSighting>) {
        self.creating = false;
        match answer {
            Created::Made(seen) | Created::Taken(seen @ PodSighting { ours: true, .. }) => {
                self.unblock(Object::Pod);
                if !matches!(self.pod, PodState::Live(_) | PodState::Deleting(_)) {
                    self.see(PodSighting { ours: true, ..seen });
                }
            }
            Created::Taken(_) => {
                if matches!(self.pod, PodState::Absent | PodState::Reading) {
                    self.pod = PodState::Foreign { cached: false };
                }
                self.block(Object::Pod, self.id.name_taken(Object::Pod));
                if matches!(self.pod, PodState::Foreign { cached: false }) {
                    self.retry(Object::Pod);
                }
            }
            Created::Freed => {
                if matches!(self.pod, PodState::Foreign { cached: false }) {
                    self.pod = PodState::Absent;
                }
                self.ensure_pod();
            }
            Created::Failed(failure) => self.failed(Object::Pod, failure),
        }
    }

    /// A teardown's read of the name: a pod of ours the cache did not show
    /// is deleted too. Once the cache showed the name since, it knows better.
    fn pod_read(&mut self, read: Read<PodSighting>) {
        if !matches!(self.pod, PodState::Reading) {
            return;
        }
        self.pod = PodState::Absent;
        match read {
            Read::Found(seen) if seen.ours && !seen.pod.is_deleting() => {
                self.delete_pod(seen.pod.metadata.uid.clone());
            }
            Read::Found(_) | Read::Nothing => {}
            Read::Failed(why) => self.log(
                true,
                format!(
                    "reading pod {}/{} on {} to delete it failed: {why}",
                    self.id.namespace, self.id.name, self.id.cluster
                ),
            ),
        }
    }

    fn service_created(&mut self, answer: Created<ServiceSighting>) {
        let ServiceState::Creating(recipe) = &self.service else {
            return;
        };
        let recipe = recipe.clone();
        match answer {
            Created::Made(seen) | Created::Taken(seen @ ServiceSighting { ours: true, .. }) => {
                self.service = ServiceState::Exists { uid: seen.uid };
                self.unblock(Object::Service);
                if self.id.export_services && matches!(self.goal, Goal::Run { .. }) {
                    self.effects.push(Effect::ExportService);
                }
            }
            Created::Taken(_) => {
                self.service = ServiceState::ToCreate(recipe);
                self.block(Object::Service, self.id.name_taken(Object::Service));
                self.retry(Object::Service);
            }
            Created::Freed => {
                self.service = ServiceState::ToCreate(recipe);
                self.ensure_service();
            }
            Created::Failed(failure) => {
                self.service = ServiceState::ToCreate(recipe);
                self.failed(Object::Service, failure);
            }
        }
    }

    fn service_read(&mut self, read: Read<ServiceSighting>) {
        if !matches!(self.service, ServiceState::Reading) {
            return;
        }
        self.service = ServiceState::Gone;
        match read {
            Read::Found(ServiceSighting {
                uid: Some(uid),
                ours: true,
            }) => {
                self.service = ServiceState::Deleting;
                self.effects.push(Effect::DeleteService { uid });
            }
            // Never a service not ours; one without a uid is none the API serves.
            Read::Found(_) | Read::Nothing => {}
            Read::Failed(why) => self.log(
                true,
                format!(
                    "reading service {}/{} on {} to delete it failed, so it is left: {why}",
                    self.id.namespace, self.id.name, self.id.cluster
                ),
            ),
        }
    }

    fn restart(&mut self, uid: String, next: Option<R>) {
        let Goal::Run { recipe, vanished } = &mut self.goal else {
            return;
        };
        match &self.pod {
            PodState::Live(pod) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => {
                *recipe = next;
                self.pod = PodState::Deleting(pod.clone());
                self.delete_pod(Some(uid));
            }
            PodState::Deleting(pod) if pod.metadata.uid.as_deref() == Some(uid.as_str()) => {
                *recipe = next;
            }
            // A newer pod than the one asked about: the replica has it already.
            PodState::Live(_) | PodState::Deleting(_) => {}
            _ => {
                *recipe = next;
                *vanished = false;
                self.ensure_pod();
            }
        }
    }

    fn begin_teardown(&mut self) {
        if matches!(self.pod, PodState::Absent | PodState::Foreign { .. }) {
            self.pod = PodState::Reading;
            self.effects.push(Effect::ReadPod);
        }
    }

    /// Creates the pod when the replica should have one and the name is free.
    fn ensure_pod(&mut self) {
        let Goal::Run {
            recipe: Some(recipe),
            vanished: false,
        } = &self.goal
        else {
            return;
        };
        if self.creating || !matches!(self.pod, PodState::Absent) {
            return;
        }
        self.creating = true;
        self.effects.push(Effect::CreatePod(recipe.clone()));
    }

    fn ensure_service(&mut self) {
        if !matches!(self.goal, Goal::Run { .. }) {
            return;
        }
        if let ServiceState::ToCreate(recipe) = &self.service {
            let recipe = recipe.clone();
            self.effects.push(Effect::CreateService(recipe.clone()));
            self.service = ServiceState::Creating(recipe);
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

    /// Deletes our pod of this epoch, unless it is on its way out.
    fn delete_own_pod(&mut self) {
        if let PodState::Live(pod) = &self.pod
            && !pod.is_deleting()
        {
            let pod = pod.clone();
            self.delete_pod(pod.metadata.uid.clone());
            self.pod = PodState::Deleting(pod);
        }
    }

    fn delete_pod(&mut self, uid: Option<String>) {
        // A pod without a uid is none the API serves: nothing to delete.
        if let Some(uid) = uid {
            self.effects.push(Effect::DeletePod { uid });
        }
    }

    /// Deletes the service once: by its uid when known, else after a read
    /// says it is ours. One being created is deleted once answered.
    fn delete_service(&mut self) {
        match &self.service {
            ServiceState::Exists { uid: Some(uid) } => {
                let uid = uid.clone();
                self.effects.push(Effect::DeleteService { uid });
                self.service = ServiceState::Deleting;
            }
            ServiceState::Exists { uid: None }
            | ServiceState::ToCreate(_)
            | ServiceState::Untracked => {
                self.effects.push(Effect::ReadService);
                self.service = ServiceState::Reading;
            }
            ServiceState::Creating(_)
            | ServiceState::Reading
            | ServiceState::Deleting
            | ServiceState::Gone => {}
        }
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

    /// A create ended without an object: wait and retry, or for good.
    fn failed(&mut self, object: Object, failure: Failure) {
        let Identity {
            namespace,
            name,
            cluster,
            key,
            ..
        } = &self.id;
        let kind = object.word();
        let blocked = match failure {
            Failure::Unbuildable(why) => {
                self.refusal = Some(
                    self.id
                        .refusal(true, format!("its {kind} cannot be built: {why}")),
                );
                return;
            }
            Failure::Refused {
                code,
                message,
                shown,
            } => match classify(code, &message) {
                class @ (RefusalKind::ThisCluster | RefusalKind::Everywhere) => {
                    let message = format!(
                        "cluster {cluster} refused to create {kind} {namespace}/{name}: {shown}"
                    );
                    self.log(true, message.clone());
                    self.refusal = Some(self.id.refusal(class == RefusalKind::Everywhere, message));
                    return;
                }
                RefusalKind::NamespaceMissing => {
                    let blocked = Blocked {
                        reason: reason::NAMESPACE_MISSING,
                        message: format!(
                            "namespace {namespace} on cluster {cluster} does not exist (or is being \
                             deleted); replica {key} waits for it"
                        ),
                    };
                    self.effects.push(Effect::NamespaceMissing);
                    blocked
                }
                RefusalKind::Transient => Blocked {
                    reason: reason::CREATE_REFUSED,
                    message: format!(
                        "creating {kind} {namespace}/{name} on cluster {cluster} was refused: {shown}"
                    ),
                },
            },
            Failure::NoAnswer(shown) => Blocked {
                reason: reason::CREATE_REFUSED,
                message: format!(
                    "creating {kind} {namespace}/{name} on cluster {cluster} failed: {shown}"
                ),
            },
        };
        self.block(object, blocked);
        self.retry(object);
    }

    fn block(&mut self, object: Object, blocked: Blocked) {
        let slot = match object {
            Object::Pod => &mut self.pod_blocked,
            Object::Service => &mut self.service_blocked,
        };
        if slot.as_ref() != Some(&blocked) {
            let message = blocked.message.clone();
            *slot = Some(blocked);
            self.log(true, message);
        }
    }

    fn retry(&mut self, object: Object) {
        self.blocked_tries = self.blocked_tries.saturating_add(1);
        self.effects.push(Effect::RetryAfter {
            object,
            tries: self.blocked_tries,
        });
    }

    fn unblock(&mut self, object: Object) {
        let slot = match object {
            Object::Pod => &mut self.pod_blocked,
            Object::Service => &mut self.service_blocked,
        };
        if slot.take().is_some() {
            self.blocked_tries = 0;
        }
    }

    fn log(&mut self, warning: bool, message: String) {
        self.effects.push(Effect::Log { warning, message });
    }
}

/// The placement epoch a pod was created under (its label).
fn epoch_of(pod: &ObservedPod) -> Option<u64> {
    pod.metadata
        .labels
        .as_ref()?
        .get(PLACEMENT_EPOCH_LABEL)?
        .parse()
        .ok()
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;
