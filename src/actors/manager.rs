//! JobManager: watches TensorFlowTrainingJobs on the home cluster once the
//! home pod informer has synced, starts a JobActor per job (by uid) and
//! forwards every change to it. A job object that does not even parse (see
//! `ListedJob`) gets the InvalidSpec status directly; the rest of the jobs
//! are unaffected.
//! Once a job has created a TensorBoard, it also watches our TensorBoards on
//! home (one watch for all jobs) and routes each to its job by uid.
//!
//! Jobs start through a gate (`start_gate`): the jobs starting at once hold
//! at most `startBudgetReplicas` replicas, the rest wait in the order they
//! came, with no actor yet. A job being deleted does not wait.

use std::collections::HashMap;
use std::sync::Arc;

use actix::prelude::*;
use futures::FutureExt;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use super::Shared;
use super::call::{self, Backoff, Kind};
use super::job::{
    DoneStarting, FINALIZER, JobActor, JobGone, JobUnreadable, JobUpdated, TensorBoardChanged,
    WatchTensorBoards,
};
use super::members::MemberSupervisor;
use crate::api::{ListedJob, TensorFlowTrainingJob, TensorFlowTrainingJobStatus, Unreadable};
use crate::lifecycle::machine::{Effect, Event, JobState, Spec};
use crate::start_gate::StartGate;
use crate::status;
use crate::telemetry::metrics::Alive;
use crate::telemetry::{ActorKind, Synced};

#[derive(Message)]
#[rtype(result = "()")]
struct Observed(watcher::Event<ListedJob>);

#[derive(Message)]
#[rtype(result = "()")]
struct TensorBoardObserved(DynamicObject);

pub struct JobManager {
    shared: Arc<Shared>,
    placer: Addr<MemberSupervisor>,
    jobs: HashMap<String, Addr<JobActor>>,
    /// Which jobs may start now; the others wait here, as last seen.
    gate: StartGate<String>,
    queued: HashMap<String, Arc<TensorFlowTrainingJob>>,
    /// One thread per core for the job actors (and their replicas): each
    /// job lives on one, dealt in turn, so jobs use every core while each
    /// job's messages stay on its own thread.
    workers: Vec<Arbiter>,
    next_worker: usize,
    listing: Vec<String>,
    /// The TensorBoard watch runs.
    watching_tensorboards: bool,
    _alive: Alive,
}

impl JobManager {
    pub fn new(shared: Arc<Shared>, placer: Addr<MemberSupervisor>) -> JobManager {
        let gate = StartGate::new(shared.config.start_budget_replicas);
        JobManager {
            _alive: shared.metrics.alive(ActorKind::JobManager),
            shared,
            placer,
            jobs: HashMap::new(),
            gate,
            queued: HashMap::new(),
            workers: (0..worker_threads()).map(|_| Arbiter::new()).collect(),
            next_worker: 0,
            listing: Vec::new(),
            watching_tensorboards: false,
        }
    }

    fn apply(&mut self, ctx: &mut Context<Self>, listed: ListedJob) {
        let mut job = match listed {
            ListedJob::Readable(job) => job,
            ListedJob::Unreadable(unreadable) => {
                self.reject_unparsable(&unreadable);
                return;
            }
        };
        // Nothing reads them, and the job actor keeps its job for life.
        job.metadata.managed_fields = None;
        let uid = job.uid().unwrap_or_default();
        let job = Arc::new(*job);
        match self.jobs.get(&uid) {
            Some(actor) if actor.connected() => actor.do_send(JobUpdated(job)),
            _ if job.metadata.deletion_timestamp.is_some() => {
                // A deletion does not wait behind a backlog.
                self.queued.remove(&uid);
                self.done_starting(ctx, &uid);
                self.start(ctx, uid, job, false);
            }
            _ if self.gate.is_queued(&uid) => {
                self.queued.insert(uid, job);
            }
            _ => {
                let replicas = job
                    .spec
                    .replica_specs
                    .iter()
                    .map(|spec| usize::try_from(spec.replicas).unwrap_or(0))
                    .sum();
                if self.gate.offer(uid.clone(), replicas) {
                    self.start(ctx, uid, job, true);
                } else if self.gate.is_queued(&uid) {
                    self.queued.insert(uid, job);
                } else {
                    // Its share is still held by its previous actor, which
                    // stopped: that one's `DoneStarting` frees it.
                    self.start(ctx, uid, job, false);
                }
            }
        }
        self.shared
            .metrics
            .jobs_starting(self.gate.starting(), self.gate.waiting());
    }

    /// Starts the job's actor, on the next worker thread; `gated`: it holds
    /// a share of the start gate until it says it started.
    fn start(
        &mut self,
        ctx: &mut Context<Self>,
        uid: String,
        job: Arc<TensorFlowTrainingJob>,
        gated: bool,
    ) {
        let actor = JobActor::new(
            self.shared.clone(),
            self.placer.clone(),
            ctx.address().recipient(),
            job,
            gated.then(|| ctx.address().recipient()),
        );
        let worker = &self.workers[self.next_worker % self.workers.len()];
        self.next_worker = self.next_worker.wrapping_add(1);
        let actor = JobActor::start_in_arbiter(&worker.handle(), move |_| actor);
        self.jobs.insert(uid, actor);
    }

    /// The job of `uid` started, or went, or does not wait any more: the
    /// jobs its share lets through start.
    fn done_starting(&mut self, ctx: &mut Context<Self>, uid: &str) {
        let mut done = vec![uid.to_string()];
        while let Some(uid) = done.pop() {
            for next in self.gate.started(&uid) {
                match self.queued.remove(&next) {
                    Some(job) => self.start(ctx, next, job, true),
                    // Not kept (cannot happen): its share is freed at once.
                    None => done.push(next),
                }
            }
        }
        self.shared
            .metrics
            .jobs_starting(self.gate.starting(), self.gate.waiting());
    }

    /// The job went from the API: its actor hears it; a queued job leaves
    /// the queue.
    fn gone(&mut self, ctx: &mut Context<Self>, uid: &str) {
        if let Some(actor) = self.jobs.remove(uid) {
            actor.do_send(JobGone);
        }
        if self.queued.remove(uid).is_some() {
            self.done_starting(ctx, uid);
        }
    }

    /// A job that cannot be read: a job actor that runs it fails it (or
    /// deletes it); else it gets the machine's InvalidSpec status, sealed,
    /// once, and, when deleted, loses its finalizer (it has no replicas this
    /// controller runs; what an earlier one left on members is their
    /// sweep's once the job is gone).
    fn reject_unparsable(&self, unreadable: &Unreadable) {
        let obj = &unreadable.object;
        let deleting = obj.metadata.deletion_timestamp.is_some();
        if let Some(actor) = self.jobs.get(&obj.uid().unwrap_or_default())
            && actor.connected()
        {
            actor.do_send(JobUnreadable {
                error: unreadable.error.clone(),
                deleting,
            });
            return;
        }
        let api: Api<ListedJob> = Api::namespaced_with(
            self.shared.home.client.clone(),
            &obj.namespace().unwrap_or_default(),
            &job_resource(),
        );
        let name = obj.name_any();
        let backoff = Backoff::from(self.shared.config.retry_interval());
        if deleting {
            let Some(index) = obj.finalizers().iter().position(|f| f == FINALIZER) else {
                return;
            };
            let patch = json!([
                {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": FINALIZER},
                {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
            ]);
            let what = format!("removing the finalizer of unreadable job {name}");
            tokio::spawn(async move {
                let Ok(patch) = serde_json::from_value::<json_patch::Patch>(patch) else {
                    return;
                };
                let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
                if let Err(e) = call::call(Kind::Write, backoff, &what, || {
                    api.patch(&name, &params, &patch)
                })
                .await
                {
                    tracing::warn!(error = %e, "{what} refused");
                }
            });
            return;
        }
        let already = obj.data.pointer("/status/phase").and_then(|p| p.as_str()) == Some("Failed");
        if already {
            return;
        }
        tracing::info!(job = %name, error = %unreadable.error, "job cannot be read");
        let (status, events) = invalid_status(&name, &unreadable.error);
        let stored =
            crate::record::seal(&self.shared.signer, &obj.uid().unwrap_or_default(), status);
        let recorder = self.shared.recorder.clone();
        let reference = kube::Resource::object_ref(obj, &job_resource());
        let what = format!("writing the InvalidSpec status of {name}");
        tokio::spawn(async move {
            for event in events {
                if let Err(e) = recorder.publish(&event, &reference).await {
                    tracing::debug!(error = %e, "publishing event failed");
                }
            }
            let Ok(patch) =
                serde_json::from_value::<json_patch::Patch>(status::replacement(&stored))
            else {
                return;
            };
            let (params, patch) = (PatchParams::default(), Patch::Json::<()>(patch));
            if let Err(e) = call::call(Kind::Write, backoff, &what, || {
                api.patch_status(&name, &params, &patch)
            })
            .await
            {
                tracing::warn!(error = %e, "{what} refused");
            }
        });
    }
}

/// The status and Events the job machine gives a job that cannot be read,
/// as for any other invalid spec.
fn invalid_status(
    name: &str,
    error: &str,
) -> (
    TensorFlowTrainingJobStatus,
    Vec<kube::runtime::events::Event>,
) {
    let mut machine = JobState::new(None, name);
    let spec = Spec {
        problem: Some(format!("the job cannot be read: {error}")),
        ..Spec::default()
    };
    let effects = machine.step(Event::SpecChanged(spec), jiff::Timestamp::now());
    let events = effects
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Record {
                warning,
                reason,
                message,
            } => Some(kube::runtime::events::Event {
                type_: if warning {
                    kube::runtime::events::EventType::Warning
                } else {
                    kube::runtime::events::EventType::Normal
                },
                reason: reason.into(),
                note: Some(message),
                action: reason.into(),
                secondary: None,
            }),
            _ => None,
        })
        .collect();
    (machine.status().clone(), events)
}

/// As many job threads as the machine has cores.
fn worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub fn job_resource() -> ApiResource {
    ApiResource::erase::<TensorFlowTrainingJob>(&())
}

impl Actor for JobManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.set_mailbox_capacity(4096);
        let home = self.shared.home.clone();
        let me = ctx.address();
        let events = async move {
            home.wait_synced().await;
            let api: Api<ListedJob> = Api::all_with(home.client.clone(), &job_resource());
            watcher(api, watcher::Config::default()).default_backoff()
        }
        .flatten_stream();
        super::forward(events, me.recipient(), Observed, "job");
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        for worker in &self.workers {
            worker.stop();
        }
    }
}

impl Handler<Observed> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: Observed, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::JobManager);
        match msg.0 {
            watcher::Event::Apply(obj) => self.apply(ctx, obj),
            watcher::Event::Delete(obj) => self.gone(ctx, &obj.uid().unwrap_or_default()),
            watcher::Event::Init => self.listing.clear(),
            watcher::Event::InitApply(obj) => {
                self.listing.push(obj.uid().unwrap_or_default());
                self.apply(ctx, obj);
            }
            watcher::Event::InitDone => {
                self.shared.readiness.mark(Synced::Jobs);
                // Jobs deleted while the watch was down.
                let listed: std::collections::HashSet<String> = self.listing.drain(..).collect();
                let gone: Vec<String> = self
                    .jobs
                    .keys()
                    .chain(self.queued.keys())
                    .filter(|uid| !listed.contains(*uid))
                    .cloned()
                    .collect();
                for uid in gone {
                    self.gone(ctx, &uid);
                }
            }
        }
    }
}

impl Handler<DoneStarting> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: DoneStarting, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::JobManager);
        self.done_starting(ctx, &msg.0);
    }
}

impl Handler<WatchTensorBoards> for JobManager {
    type Result = ();

    fn handle(&mut self, _msg: WatchTensorBoards, ctx: &mut Self::Context) {
        if std::mem::replace(&mut self.watching_tensorboards, true) {
            return;
        }
        let api: Api<DynamicObject> = Api::all_with(
            self.shared.home.client.clone(),
            &crate::builders::tensorboard_resource(),
        );
        let boards = watcher(
            api,
            watcher::Config::default().labels(crate::builders::MANAGED_SELECTOR),
        )
        .default_backoff()
        .applied_objects();
        super::forward(
            boards,
            ctx.address().recipient(),
            TensorBoardObserved,
            "TensorBoard",
        );
    }
}

impl Handler<TensorBoardObserved> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: TensorBoardObserved, _ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::JobManager);
        let Some(uid) = msg.0.labels().get(crate::builders::JOB_UID_LABEL) else {
            return;
        };
        if let Some(job) = self.jobs.get(uid) {
            job.do_send(TensorBoardChanged(msg.0));
        }
    }
}
