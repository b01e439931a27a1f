//! What the replica's machine (`replica`) hears and does: the events it is
//! fed — what the pod cache shows, what a call answered, what the job asks
//! — and the effects the `ReplicaActor` carries out.

use std::sync::Arc;

use crate::api::{CleanUpPolicy, ReplicaKey, reason};
use crate::builders::MANAGER;
use crate::lifecycle::machine::{Blocked, Refusal};
use crate::observed::ObservedPod;
use crate::status::ReplicaView;

/// Which replica this is, and where.
#[derive(Clone, Debug)]
pub struct Identity {
    pub key: ReplicaKey,
    pub epoch: u64,
    pub namespace: String,
    /// The pod's and the service's name.
    pub name: String,
    pub cluster: String,
    /// Export the service to the clusterset (the member's `exportServices`).
    pub export_services: bool,
}

impl Identity {
    /// A refusal for good of this replica's pod or service.
    pub fn refusal(&self, everywhere: bool, message: String) -> Refusal {
        Refusal {
            key: self.key,
            epoch: self.epoch,
            cluster: self.cluster.clone(),
            everywhere,
            message,
        }
    }

    /// The replica's name is taken by an object not ours.
    pub fn name_taken(&self, object: Object) -> Blocked {
        let Identity {
            namespace,
            name,
            cluster,
            key,
            ..
        } = self;
        Blocked {
            reason: reason::OBJECT_NAME_TAKEN,
            message: format!(
                "{} {namespace}/{name} on cluster {cluster} exists and is not managed by \
                 {MANAGER}; replica {key} waits for the name to be free",
                object.word()
            ),
        }
    }
}

/// A pod seen under the replica's name.
#[derive(Clone, Debug)]
pub struct PodSighting {
    pub pod: Arc<ObservedPod>,
    /// Made by this controller for this replica (its signature verifies).
    pub ours: bool,
}

/// A service seen under the replica's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSighting {
    pub uid: Option<String>,
    pub ours: bool,
}

/// What a create answered.
#[derive(Clone, Debug)]
pub enum Created<T> {
    /// The API made it.
    Made(T),
    /// The name was taken (409); this holds it.
    Taken(T),
    /// The name was taken, and free again when read.
    Freed,
    Failed(Failure),
}

impl<T> Created<T> {
    /// The object made or found.
    pub fn object(&self) -> Option<&T> {
        match self {
            Created::Made(object) | Created::Taken(object) => Some(object),
            Created::Freed | Created::Failed(_) => None,
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Created<U> {
        match self {
            Created::Made(made) => Created::Made(f(made)),
            Created::Taken(found) => Created::Taken(f(found)),
            Created::Freed => Created::Freed,
            Created::Failed(failure) => Created::Failed(failure),
        }
    }
}

/// Why a create did not end in an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API refused it: its code and message, and its status in words.
    Refused {
        code: u16,
        message: String,
        shown: String,
    },
    /// No answer, or one that does not read.
    NoAnswer(String),
    /// The object could not be built.
    Unbuildable(String),
}

/// What a read of the name answered.
#[derive(Clone, Debug)]
pub enum Read<T> {
    Found(T),
    Nothing,
    Failed(String),
}

impl<T> Read<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Read<U> {
        match self {
            Read::Found(found) => Read::Found(f(found)),
            Read::Nothing => Read::Nothing,
            Read::Failed(why) => Read::Failed(why),
        }
    }
}

/// The pod or the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    Pod,
    Service,
}

impl Object {
    pub fn word(self) -> &'static str {
        match self {
            Object::Pod => "pod",
            Object::Service => "service",
        }
    }
}

/// What happened. `R` is the actor's recipe of the pod and service.
#[derive(Clone, Debug)]
pub enum Event<R> {
    /// The pod cache shows this pod under the name.
    PodSeen(PodSighting),
    /// The pod of `uid` under the name went (None: whatever pod was there).
    PodGone {
        uid: Option<String>,
    },
    /// A pod create was answered (a pod it made is ours, whatever it shows).
    PodCreated(Created<PodSighting>),
    PodRead(Read<PodSighting>),
    ServiceCreated(Created<ServiceSighting>),
    ServiceRead(Read<ServiceSighting>),
    /// A delete of the service was answered (done, gone, or refused).
    ServiceDeleted,
    /// The job replaces the pod of `uid`; the next one is made from
    /// `recipe` (None: it could not be built, and the job was told).
    Restart {
        uid: String,
        recipe: Option<R>,
    },
    /// The job ended: the clean-up policy decides, by the pod's state,
    /// whether pod and service go.
    Finish(CleanUpPolicy),
    /// Delete pod and service, then report torn down.
    TearDown,
    /// The backoff after a refused create has passed.
    RetryDue(Object),
}

/// What the replica tells its job.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub view: ReplicaView,
    /// Its pod or service cannot be created now (it tries again).
    pub blocked: Option<Blocked>,
    /// The cluster refused its pod or service for good.
    pub refusal: Option<Refusal>,
}

/// What the actor must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect<R> {
    CreatePod(R),
    CreateService(R),
    /// Delete the pod of this uid (and no other: the uid is a precondition).
    DeletePod {
        uid: String,
    },
    /// Read the pod of the name: the pod cache may not show yet one an
    /// earlier controller made.
    ReadPod,
    ReadService,
    DeleteService {
        uid: String,
    },
    /// Export the service just answered to the clusterset.
    ExportService,
    Report(Box<Report>),
    /// Feed `RetryDue(object)` after the backoff of `tries` failures.
    RetryAfter {
        object: Object,
        tries: u32,
    },
    /// The replica's namespace is missing on its cluster.
    NamespaceMissing,
    Log {
        warning: bool,
        message: String,
    },
    /// Pod and service are gone: tell the job, and stop.
    TornDown,
}
