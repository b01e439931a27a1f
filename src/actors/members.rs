//! Member clusters: for every MemberCluster on home, a health machine
//! (`member_health`: connecting, unready since, sweeping, ready, lost) and,
//! once its kubeconfig Secret gives a client, a connection (see `clusters`:
//! the managed pods' informer, capacity and Pod Security informers, the
//! probe). This actor feeds the machine what the connection, the periodic
//! probe and the garbage sweep (`sweeper`) found, and carries out what it
//! decides: connect, probe, sweep, write the MemberCluster's Ready
//! condition, and publish the lost members in `Shared::lost_clusters`, from
//! which the jobs with replicas there fail over.
//!
//! After each good probe the controller's Lease on the member is renewed
//! and the member's fence's Lease read (`fencing`, `crate::fence`), for
//! its `Fenced` condition.
//!
//! Who a member is (`identity`) is read by every probe: a connection's
//! informers run only while its cluster is accepted, and a probe counts as
//! good only then. Where replicas go is decided here too (`placing`),
//! against the members the machines say take replicas. Kubeconfig Secrets
//! (in the controller's namespace only, see `clusters`) are watched by the
//! managed-by label `join` sets; a Secret made by hand without it is read
//! when its MemberCluster changes.

mod fencing;
mod identity;
mod placing;

pub use placing::{Admission, Place, Placed, PlacementDecided, Release, Resolve, Target, Targets};

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::Shared;
use super::call::Backoff;
use crate::api::{ClusterIdentity, MemberCluster, MemberClusterStatus};
use crate::capacity::Capacity;
use crate::clusters::{self, CapacityWatch, ClusterActor, ClusterHandle, PodSecurityWatch, Probe};
use crate::member_health::{Answer, Condition, Effect, Event, MemberHealth, State};
use crate::member_identity::Standing;
use crate::placement::queue::Queue;
use crate::telemetry::ActorKind;
use crate::telemetry::metrics::Alive;
use placing::{CapacityFreed, PodPolicies, ResolveResult};

/// What the informers of a cluster call when capacity may have grown.
fn capacity_freed(ctx: &Context<MemberSupervisor>) -> clusters::Changed {
    let me = ctx.address();
    Arc::new(move || me.do_send(CapacityFreed))
}

/// The informers of an accepted member's connection; dropping it stops them.
struct Informers {
    _actor: Addr<ClusterActor>,
    capacity: CapacityWatch,
    pod_security: PodSecurityWatch,
}

/// A client of a member cluster, built from its kubeconfig Secret; dropping
/// it stops its informers.
struct Connection {
    handle: ClusterHandle,
    /// Which connection (a new one per client built): a probe of an older
    /// one is no news.
    serial: u64,
    /// Running while the cluster is accepted (see `identity`).
    informers: Option<Informers>,
    /// The identity the last answered probe read; kept through failed
    /// probes (a partition does not change who the cluster is).
    reached: Option<String>,
    standing: Standing,
    /// The Secret's resourceVersion the client was built from.
    secret_version: Option<String>,
    /// The pod informer's actor of this connection, not started until the
    /// cluster is accepted.
    idle: Option<ClusterActor>,
    /// The fence key was written to the member through this connection.
    fence_key_written: bool,
}

impl Connection {
    fn accepted(&self) -> bool {
        matches!(self.standing, Standing::Accepted { .. }) && self.informers.is_some()
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct MemberObserved(watcher::Event<MemberCluster>);

#[derive(Message)]
#[rtype(result = "()")]
struct SecretChanged(Secret);

#[derive(Message)]
#[rtype(result = "()")]
struct Swept {
    name: String,
    sweep: u64,
    result: Result<usize, String>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Probed {
    name: String,
    serial: u64,
    probe: Probe,
    /// When the probe was sent, by this host's clock: what a renewal of
    /// the controller's Lease after it is stamped with.
    sent: jiff::Timestamp,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Fenced {
    name: String,
    serial: u64,
    round: fencing::Round,
}

/// Watches MemberClusters, keeps one connection and one health machine per
/// member, and decides placements.
pub struct MemberSupervisor {
    shared: Arc<Shared>,
    /// Every member registered, and every one deleted while the controller
    /// runs (lost for the jobs placed there; their objects stay there: the
    /// credentials went with the MemberCluster).
    health: HashMap<String, MemberHealth>,
    connections: HashMap<String, Connection>,
    specs: HashMap<String, Arc<MemberCluster>>,
    /// `specs`' pod policies, shared with the jobs' `Admission`s.
    pod_policies: PodPolicies,
    /// The first list of MemberClusters is in: placements may be decided.
    listed: bool,
    home_capacity: Option<CapacityWatch>,
    queue: Queue<Recipient<PlacementDecided>>,
    /// A coalesced retry of the queue is scheduled.
    retry_scheduled: bool,
    /// A pass is due at once (`placing`).
    pass_scheduled: bool,
    /// Resolves waiting for the member list or a connection.
    resolving: Vec<(Vec<String>, tokio::sync::oneshot::Sender<ResolveResult>)>,
    /// Home's identity once read (no member is accepted before: one might
    /// be home), or why it could not be read.
    home_identity: Result<String, String>,
    reading_home_identity: bool,
    /// The identities this controller recorded, by member name, with the
    /// MemberCluster's uid (a MemberCluster made again under the same name
    /// is another registration); the status holds them too, for the next
    /// controller.
    recorded: HashMap<String, (String, String)>,
    /// The serial of the next connection.
    next_serial: u64,
    /// Each member's `Fenced` condition, once its fence's Lease was read.
    fenced: HashMap<String, crate::fence::Condition>,
    /// Each member's status writer (`write_statuses`): the latest status
    /// decided for it, not written yet.
    status_writers: HashMap<String, watch::Sender<Option<MemberClusterStatus>>>,
    _alive: Alive,
}

impl MemberSupervisor {
    pub fn new(shared: Arc<Shared>) -> MemberSupervisor {
        MemberSupervisor {
            _alive: shared.metrics.alive(ActorKind::MemberSupervisor),
            shared,
            health: HashMap::new(),
            connections: HashMap::new(),
            specs: HashMap::new(),
            pod_policies: PodPolicies::default(),
            listed: false,
            home_capacity: None,
            queue: Queue::default(),
            retry_scheduled: false,
            pass_scheduled: false,
            resolving: Vec::new(),
            home_identity: Err("not read yet".to_string()),
            reading_home_identity: false,
            recorded: HashMap::new(),
            next_serial: 0,
            fenced: HashMap::new(),
            status_writers: HashMap::new(),
        }
    }

    /// Feeds `event` to member `name`'s health machine and carries out what
    /// it decides; then the waiting resolves and placements see the change.
    fn health_step(&mut self, ctx: &mut Context<Self>, name: &str, event: Event) {
        let Some(health) = self.health.get_mut(name) else {
            return;
        };
        let effects = health.step(event, Instant::now());
        let deleted = *health.state() == State::Deregistered;
        for effect in effects {
            match effect {
                Effect::Connect => self.connect(ctx, name),
                Effect::Disconnect => {
                    self.connections.remove(name);
                }
                Effect::Probe => self.probe(ctx, name),
                Effect::Sweep { sweep } => self.sweep(ctx, name, sweep),
                Effect::Report(condition) => self.report(name, &condition),
                Effect::FailOver => {
                    if deleted {
                        tracing::warn!(cluster = %name, "MemberCluster deleted; its jobs are re-placed");
                    } else {
                        tracing::warn!(cluster = %name, timeout_ms = self.shared.config.cluster_lost_timeout().as_millis() as u64, "member cluster lost; its jobs are re-placed");
                    }
                    self.publish_lost();
                }
                Effect::NoLongerLost => {
                    tracing::info!(cluster = %name, "member cluster no longer lost; it is swept before it takes replicas");
                    self.publish_lost();
                }
            }
        }
        self.settle();
    }

    /// Something resolves and placements depend on changed: answer the
    /// resolves that can be, and try the waiting jobs again.
    fn settle(&mut self) {
        self.answer_resolves();
        self.queue.capacity_may_have_grown();
        self.try_waiting();
    }

    /// Builds a client from the member's kubeconfig Secret; a new one (not
    /// the same Secret version) is a new connection, whose informers start
    /// once the probe found its cluster accepted.
    fn connect(&mut self, ctx: &mut Context<Self>, name: &str) {
        let Some(member) = self.specs.get(name).cloned() else {
            return;
        };
        let home = self.shared.home.client.clone();
        let (metrics, cluster, name) = (
            self.shared.metrics.clone(),
            name.to_string(),
            name.to_string(),
        );
        let backoff = Backoff::from(self.shared.config.retry_interval());
        ctx.spawn(
            async move {
                let wrap = |config| crate::telemetry::instrumented_client(config, &cluster, metrics).map_err(|e| format!("client: {e}"));
                clusters::member_client(&home, &member, backoff, wrap).await.map_err(|e| e.to_string())
            }
            .into_actor(self)
            .map(move |result: Result<(Client, Option<String>), String>, act, ctx| match result {
                Ok((client, version)) => {
                    // Deleted meanwhile, or the same Secret: nothing new.
                    if !act.specs.contains_key(&name) || act.connections.get(&name).is_some_and(|c| c.secret_version == version) {
                        return;
                    }
                    let previous = act.connections.get(&name).map(|c| c.handle.clone());
                    // The old connection's informers stop here: the new credentials
                    // may reach another cluster, and nothing it shows may count
                    // before that is known.
                    let (idle, handle) = ClusterActor::replacing(name.clone(), client, act.shared.metrics.clone(), previous.as_ref());
                    tracing::info!(cluster = %name, "member cluster connected; checking who it is");
                    act.next_serial += 1;
                    let connection = Connection { handle, serial: act.next_serial, informers: None, reached: None, standing: Standing::Unknown, secret_version: version, idle: Some(idle), fence_key_written: false };
                    act.connections.insert(name.clone(), connection);
                    act.health_step(ctx, &name, Event::Connected);
                }
                Err(message) => {
                    tracing::warn!(cluster = %name, %message, "member cluster cannot be connected");
                    act.health_step(ctx, &name, Event::ConnectFailed(message));
                }
            }),
        );
    }

    fn probe(&self, ctx: &mut Context<Self>, name: &str) {
        let Some(connection) = self.connections.get(name) else {
            return;
        };
        let (client, serial) = (connection.handle.client.clone(), connection.serial);
        let (me, name) = (ctx.address(), name.to_string());
        let sent = jiff::Timestamp::now();
        tokio::spawn(async move {
            let probe = clusters::probe(&client).await;
            me.do_send(Probed {
                name,
                serial,
                probe,
                sent,
            });
        });
    }

    /// After a good probe sent at `sent`: renews the controller's Lease on
    /// the member, hands its fence the key (once per connection) and reads
    /// the fence's Lease.
    fn fence_round(&self, ctx: &mut Context<Self>, name: &str, sent: jiff::Timestamp) {
        let Some(connection) = self.connections.get(name) else {
            return;
        };
        let (client, serial) = (connection.handle.client.clone(), connection.serial);
        let key = (!connection.fence_key_written).then(|| self.shared.signer.fence_key().to_vec());
        let config = &self.shared.config;
        let stamp = fencing::Stamp {
            renew_time: sent,
            fence_after_ms: config.fence_after_ms,
            pod_grace_ms: config.fence_pod_grace_ms,
        };
        let (me, name) = (ctx.address(), name.to_string());
        tokio::spawn(async move {
            let round = fencing::round(&client, &stamp, key.as_deref()).await;
            me.do_send(Fenced {
                name,
                serial,
                round,
            });
        });
    }

    /// Deletes what no job accounts for on the member.
    fn sweep(&self, ctx: &mut Context<Self>, name: &str, sweep: u64) {
        let Some(connection) = self.connections.get(name) else {
            return;
        };
        let client = connection.handle.client.clone();
        let home = self.shared.home.client.clone();
        let (me, name) = (ctx.address(), name.to_string());
        let signer = self.shared.signer.clone();
        tokio::spawn(async move {
            let result = super::sweeper::sweep(&client, &name, &home, &signer)
                .await
                .map_err(|e| crate::telemetry::shown(&e));
            me.do_send(Swept {
                name,
                sweep,
                result,
            });
        });
    }

    /// Publishes the lost members for the jobs.
    fn publish_lost(&self) {
        let lost: BTreeSet<String> = self
            .health
            .iter()
            .filter(|(_, health)| health.is_lost())
            .map(|(name, _)| name.clone())
            .collect();
        self.shared.lost_clusters.send_if_modified(|current| {
            let changed = *current != lost;
            *current = lost;
            changed
        });
    }

    /// Shows the member's Ready condition in its status and metrics, with
    /// its capacity while it takes replicas.
    fn report(&mut self, name: &str, condition: &Condition) {
        let capacity = condition
            .ready
            .then(|| self.connections.get(name)?.informers.as_ref())
            .flatten()
            .map(|i| i.capacity.snapshot());
        self.shared
            .metrics
            .cluster_probed(name, condition.ready, capacity.as_ref());
        self.write_status(name, condition, capacity);
    }

    fn write_status(&mut self, name: &str, ready: &Condition, capacity: Option<Capacity>) {
        let spec = self.specs.get(name);
        let previous = spec.and_then(|m| m.status.clone()).unwrap_or_default();
        let identity = self
            .recorded_identity(name)
            .map(|kube_system_uid| ClusterIdentity { kube_system_uid });
        let mut status = clusters::member_status(
            &previous,
            ready,
            identity,
            capacity.as_ref(),
            Time(jiff::Timestamp::now()),
        );
        clusters::add_fenced(
            &mut status,
            &previous,
            self.fenced.get(name),
            Time(jiff::Timestamp::now()),
        );
        status.observed_generation = spec.and_then(|m| m.metadata.generation);
        let home = &self.shared.home.client;
        self.status_writers
            .entry(name.to_string())
            .or_insert_with(|| {
                let (latest, decided) = watch::channel(None);
                tokio::spawn(write_statuses(
                    Api::all(home.clone()),
                    name.to_string(),
                    decided,
                ));
                latest
            })
            .send_replace(Some(status));
    }
}

/// Writes member `name`'s status as it is decided, one write at a time,
/// the latest decided next; ends when its sender goes (the member was
/// deleted) and nothing is left to write. Writes sent side by side could
/// land out of order: an older Ready=False after a newer Ready=True showed
/// a member unready until the next probe round.
async fn write_statuses(
    api: Api<MemberCluster>,
    name: String,
    mut decided: watch::Receiver<Option<MemberClusterStatus>>,
) {
    while decided.changed().await.is_ok() {
        let Some(status) = decided.borrow_and_update().clone() else {
            continue;
        };
        let patch = Patch::Merge(json!({"status": status}));
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &patch)
            .await
        {
            tracing::debug!(cluster = %name, error = %crate::telemetry::shown(&e), "writing MemberCluster status failed");
        }
    }
}

/// Why the member's spec keeps it from taking replicas: an address template
/// that would write a bad TF_CONFIG.
fn spec_problem(member: &MemberCluster) -> Option<String> {
    crate::builders::check_address_template(&member.spec.address_template)
        .err()
        .map(|e| format!("spec.addressTemplate: {e}"))
}

impl Actor for MemberSupervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.read_home_identity(ctx);
        if self.shared.config.home_is_target {
            self.home_capacity = Some(CapacityWatch::start(
                &self.shared.home.client,
                capacity_freed(ctx),
            ));
        }
        let api: Api<MemberCluster> = Api::all(self.shared.home.client.clone());
        let members = watcher(api, watcher::Config::default()).default_backoff();
        super::forward(
            members,
            ctx.address().recipient(),
            MemberObserved,
            "MemberCluster",
        );
        // Kubeconfig Secrets written by `join` carry the managed-by label; a
        // change to one rebuilds the member's client.
        let secrets: Api<Secret> =
            Api::namespaced(self.shared.home.client.clone(), clusters::SECRETS_NAMESPACE);
        let labelled = watcher::Config::default().labels(crate::builders::MANAGED_SELECTOR);
        let changed = watcher(secrets, labelled)
            .default_backoff()
            .applied_objects();
        super::forward(changed, ctx.address().recipient(), SecretChanged, "Secret");
        ctx.run_interval(self.shared.config.sweep_interval(), |act, ctx| {
            let names: Vec<String> = act.health.keys().cloned().collect();
            for name in names {
                act.health_step(ctx, name.as_str(), Event::SweepDue);
            }
        });
        ctx.run_interval(self.shared.config.member_probe_interval(), |act, ctx| {
            act.read_home_identity(ctx);
            if let Some(home) = &act.home_capacity {
                let name = &act.shared.home.name;
                act.shared
                    .metrics
                    .cluster_probed(name, true, Some(&home.snapshot()));
            }
            let names: Vec<String> = act.connections.keys().cloned().collect();
            for name in names {
                act.probe(ctx, &name);
            }
        });
    }
}

impl Handler<MemberObserved> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: MemberObserved, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        match msg.0 {
            watcher::Event::Apply(member) | watcher::Event::InitApply(member) => {
                let member = Arc::new(member);
                let name = member.name_any();
                let previous = self.specs.get(&name);
                // Only a new kubeconfig reference needs a new connection; other
                // spec changes (unschedulable, exports, …) are read from `specs`.
                let registered = Event::Registered {
                    new_kubeconfig: previous.is_none_or(|m| {
                        m.spec.kubeconfig_secret_ref != member.spec.kubeconfig_secret_ref
                    }),
                    new_generation: previous
                        .is_some_and(|m| m.metadata.generation != member.metadata.generation),
                    spec_problem: spec_problem(&member),
                };
                self.pod_policies
                    .insert(name.clone(), member.spec.pod_policy.clone());
                self.specs.insert(name.clone(), member.clone());
                if name == self.shared.home.name {
                    self.refuse_home_name(&member);
                    self.settle();
                    return;
                }
                let lost_after = self.shared.config.cluster_lost_timeout();
                self.health
                    .entry(name.clone())
                    .or_insert_with(|| MemberHealth::new(lost_after));
                self.health_step(ctx, &name, registered);
            }
            watcher::Event::Delete(member) => {
                let name = member.name_any();
                self.specs.remove(&name);
                // One with home's name was never a member: home stays.
                if name == self.shared.home.name {
                    return;
                }
                self.pod_policies.remove(&name);
                self.recorded.remove(&name);
                self.status_writers.remove(&name);
                self.fenced.remove(&name);
                self.health_step(ctx, &name, Event::Removed);
                // A duplicate of it may be accepted now.
                self.reassess(ctx);
                self.shared.metrics.cluster_removed(&name);
            }
            watcher::Event::InitDone => {
                self.listed = true;
                self.settle();
            }
            watcher::Event::Init => {}
        }
    }
}

impl Handler<SecretChanged> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: SecretChanged, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        let (namespace, name) = (msg.0.namespace().unwrap_or_default(), msg.0.name_any());
        let affected: Vec<String> = self
            .specs
            .iter()
            .filter(|(_, m)| {
                m.spec.kubeconfig_secret_ref.namespace == namespace
                    && m.spec.kubeconfig_secret_ref.name == name
            })
            .map(|(member, _)| member.clone())
            .collect();
        for member in affected {
            self.health_step(ctx, &member, Event::SecretChanged);
        }
    }
}

impl Handler<Probed> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Probed, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        match self.connections.get_mut(&msg.name) {
            // A probe of a connection replaced since is no news.
            Some(connection) if connection.serial == msg.serial => {
                if let Ok(identity) = &msg.probe.reached {
                    connection.reached = Some(identity.clone());
                }
            }
            _ => return,
        }
        self.reassess(ctx);
        let Some(connection) = self.connections.get(&msg.name) else {
            return;
        };
        // Anything but an answer from the cluster the member stands for
        // counts as no answer (a partition's rules).
        let answer = Answer::of(
            &connection.standing,
            &msg.probe.reached,
            &self.home_identity,
        );
        if answer == Answer::Good {
            self.fence_round(ctx, &msg.name, msg.sent);
        }
        self.health_step(ctx, &msg.name, Event::Probed(answer));
    }
}

impl Handler<Fenced> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Fenced, _ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        match self.connections.get_mut(&msg.name) {
            // A round through a connection replaced since is no news.
            Some(connection) if connection.serial == msg.serial => {
                connection.fence_key_written |= msg.round.key_written;
            }
            _ => return,
        }
        // The member did not answer: nothing new about its fence (the last
        // known condition stays; Ready says it does not answer).
        if msg.round.unanswered {
            return;
        }
        let condition = crate::fence::condition(
            &msg.round.renewed,
            &msg.round.fence,
            jiff::Timestamp::now(),
            self.shared.config.clock_skew_margin(),
        );
        let before = self.fenced.get(&msg.name);
        let changed =
            before.is_none_or(|c| (c.fenced, c.reason) != (condition.fenced, condition.reason));
        if changed {
            if let Err(why) = &msg.round.renewed {
                tracing::warn!(cluster = %msg.name, error = %why, "cannot renew the controller's Lease on the member: a fence there stops the federation's pods");
            } else if condition.fenced {
                tracing::info!(cluster = %msg.name, "member cluster fenced: {}", condition.message);
            } else {
                tracing::info!(cluster = %msg.name, "member cluster not fenced: {}", condition.message);
            }
        }
        self.fenced.insert(msg.name.clone(), condition);
        if changed && let Some(health) = self.health.get(&msg.name) {
            let ready = health.condition();
            self.report(&msg.name, &ready);
        }
    }
}

impl Handler<Swept> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Swept, ctx: &mut Self::Context) {
        match &msg.result {
            Ok(deleted) => tracing::debug!(cluster = %msg.name, deleted, "member cluster swept"),
            Err(error) => {
                tracing::warn!(cluster = %msg.name, %error, "sweeping member cluster failed; tried again at the next good probe")
            }
        }
        let swept = Event::Swept {
            sweep: msg.sweep,
            ok: msg.result.is_ok(),
        };
        self.health_step(ctx, &msg.name, swept);
    }
}
