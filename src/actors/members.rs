//! Member clusters: for every MemberCluster on home, a connection (see
//! `clusters`: client from its kubeconfig Secret, rebuilt when the Secret
//! changes; the managed pods' informer; capacity and Pod Security
//! informers; the probe), whose findings go to the MemberCluster's status.
//!
//! It is also where placements are decided, one at a time, through the
//! pure `placement::queue::Queue` (order, holds, when a job is worth
//! another try); this actor tells the queue when capacity may have grown —
//! a pod on a target cluster ended (coalesced over `RETRY_COALESCE`), a
//! hold was released, a probe or a spec change came in — and answers the
//! jobs. Without any MemberCluster every replica goes to home at once, as a
//! single-cluster operator does.
//!
//! The probe is periodic per cluster (not per job): Ready turns False after
//! a failed probe and True again after a good one, with the last heartbeat.
//! A member without a good probe for `clusterLostTimeoutMs` is lost: it is
//! published in `Shared::lost_clusters`, and the jobs with replicas there
//! fail over. A member takes new replicas only after a garbage sweep (see
//! `sweeper`), both when first connected and when it returns from being lost.
//! A recorded placement is resolved only once the member list is in and its
//! clusters are connected, so a restarted controller does not mistake a
//! member still connecting for a missing one.
//! Kubeconfig Secrets (in the controller's namespace only, see `clusters`)
//! are watched by the managed-by label `join` sets; a
//! Secret made by hand without it is read when its MemberCluster changes.
//!
//! Who a member is (`member_identity`, the uid of its `kube-system`
//! namespace) is read by every probe. A connection's informers start only
//! once its cluster is accepted — the one recorded in the MemberCluster's
//! status when first connected, not home, not claimed first by another
//! MemberCluster — and stop when it no longer is: the informers of a
//! cluster the credentials should not reach would report its emptiness as
//! the jobs' pods going. A member not accepted is treated as unreachable:
//! no new replicas, no sweep, no capacity, and lost after
//! `clusterLostTimeoutMs` like a partitioned one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::Shared;
use super::call::Backoff;
use crate::api::{ClusterIdentity, MemberCluster, reason};
use crate::builders::DEFAULT_ADDRESS_TEMPLATE;
use crate::capacity::Capacity;
use crate::clusters::{
    self, CapacityWatch, ClusterActor, ClusterHandle, PodSecurityWatch, Probe, ReadyCondition,
};
use crate::member_identity::{self, Home, MemberView, Standing};
use crate::placement::queue::{Answer, Queue, Request};
use crate::placement::{self, Assignment, ClusterState, Demand, Policy};
use crate::telemetry::metrics::Alive;
use crate::telemetry::{ActorKind, PlacementOutcome};

/// Pods ending on a cluster within this window cost one retry of the queue.
const RETRY_COALESCE: Duration = Duration::from_millis(50);

/// A pod on a target cluster left the active set, a node came or changed,
/// or a namespace's Pod Security level changed: capacity may be free.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CapacityFreed;

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

/// A member cluster the controller is connected to; dropping it stops its
/// informers.
pub struct Member {
    pub handle: ClusterHandle,
    /// Which connection (a new one per client built): a probe of an older
    /// one is no news.
    serial: u64,
    /// Running while the cluster is accepted (see the module's comment).
    informers: Option<Informers>,
    /// The identity the last answered probe read; kept through failed
    /// probes (a partition does not change who the cluster is).
    reached: Option<String>,
    standing: Standing,
    /// The last probe was answered and the cluster is accepted.
    pub ready: bool,
    /// The last good probe (or the connection, before any).
    last_ready: Instant,
    /// No good probe for `clusterLostTimeoutMs`; cleared when it answers again.
    lost: bool,
    /// The garbage sweep ran since the member was connected or came back.
    swept: bool,
    sweeping: bool,
    /// The Secret's resourceVersion the client was built from.
    secret_version: Option<String>,
    /// The pod informer's actor of this connection, not started until the
    /// cluster is accepted.
    idle: Option<ClusterActor>,
}

impl Member {
    /// Whether new replicas may go there.
    fn placeable(&self) -> bool {
        self.ready && self.swept && !self.lost && self.informers.is_some()
    }

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
    result: Result<usize, String>,
}

#[derive(Message)]
#[rtype(result = "()")]
struct Probed {
    name: String,
    serial: u64,
    probe: Probe,
}

#[derive(Message)]
#[rtype(result = "()")]
struct HomeIdentity(Result<String, String>);

/// A cluster replicas were placed on, and how to reach it.
#[derive(Clone)]
pub struct Target {
    pub handle: ClusterHandle,
    /// How peers elsewhere reach services here.
    pub address_template: String,
    pub export_services: bool,
    /// The home cluster: objects there are owned by the job.
    pub home: bool,
    /// What a member admits (None on home, whose own admission governs).
    pub admission: Option<Admission>,
}

/// A member's rules for the pods it runs, as they are when asked: its
/// `podPolicy` (from its MemberCluster now; a deleted one allows nothing
/// beyond the defaults) and the Pod Security level its namespaces enforce.
#[derive(Clone)]
pub struct Admission {
    cluster: String,
    pod_policies: PodPolicies,
    /// None while the member's informers do not run.
    pod_security: Option<crate::clusters::PodSecurityWatch>,
}

/// Each member's `podPolicy` as its MemberCluster says now.
type PodPolicies = Arc<dashmap::DashMap<String, crate::api::PodPolicy>>;

impl Admission {
    /// Why the member would not run `pod` in `namespace`; None if it would.
    pub fn refuses(
        &self,
        pod: &k8s_openapi::api::core::v1::Pod,
        namespace: &str,
    ) -> Option<String> {
        let spec = pod.spec.as_ref()?;
        let policy = self
            .pod_policies
            .get(&self.cluster)
            .map(|p| p.clone())
            .unwrap_or_default();
        let level = self
            .pod_security
            .as_ref()
            .and_then(|watch| watch.levels().get(namespace).copied())
            .unwrap_or(policy.default_pod_security);
        crate::isolation::pod_refused(&pod.metadata, spec, &policy, namespace, level)
    }
}

/// A job's placement: each replica's cluster, and every cluster used.
#[derive(Clone)]
pub struct Placed {
    pub assignment: Assignment,
    pub targets: BTreeMap<String, Target>,
}

/// Asks for a placement; the answer comes as `PlacementDecided`, now or
/// whenever capacity frees (repeated only when the reasons change).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Place {
    pub job_uid: String,
    pub priority: i32,
    /// RFC 3339 creation time: older jobs go first at equal priority.
    pub created: String,
    pub demands: Vec<Demand>,
    pub policy: Policy,
    pub reply: Recipient<PlacementDecided>,
}

/// Ok: the placement (capacity is held until `Release`); Err: why the job
/// cannot be placed now, cluster by cluster.
#[derive(Message)]
#[rtype(result = "()")]
pub struct PlacementDecided(pub Result<Placed, crate::placement::Unplaceable>);

/// Resolves the clusters of a placement recorded earlier (after a restart);
/// answered once the member list is in and those clusters are connected.
/// Err: a cluster is missing, unusable or lost.
#[derive(Message)]
#[rtype(result = "Result<BTreeMap<String, Target>, String>")]
pub struct Resolve(pub Vec<String>);

/// The job's pods are visible, or it ended: drop its hold and its request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release(pub String);

/// Watches MemberClusters, keeps one connection per member, and decides placements.
pub struct MemberSupervisor {
    shared: Arc<Shared>,
    members: HashMap<String, Member>,
    specs: HashMap<String, Arc<MemberCluster>>,
    /// `specs`' pod policies, shared with the jobs' `Admission`s.
    pod_policies: PodPolicies,
    /// The first list of MemberClusters is in: placements may be decided.
    listed: bool,
    home_capacity: Option<CapacityWatch>,
    queue: Queue<Recipient<PlacementDecided>>,
    /// A coalesced retry of the queue is scheduled.
    retry_scheduled: bool,
    /// A pass is due at once ([`MemberSupervisor::pass_soon`]).
    pass_scheduled: bool,
    /// Members whose kubeconfig cannot be used, and why.
    unusable: HashMap<String, String>,
    /// MemberClusters deleted while the controller runs: lost for the jobs
    /// placed there (their objects stay: the credentials went with them).
    deregistered: std::collections::BTreeSet<String>,
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
    _alive: Alive,
}

type ResolveResult = Result<BTreeMap<String, Target>, String>;

impl MemberSupervisor {
    pub fn new(shared: Arc<Shared>) -> MemberSupervisor {
        MemberSupervisor {
            _alive: shared.metrics.alive(ActorKind::MemberSupervisor),
            shared,
            members: HashMap::new(),
            specs: HashMap::new(),
            pod_policies: PodPolicies::default(),
            listed: false,
            home_capacity: None,
            queue: Queue::default(),
            retry_scheduled: false,
            pass_scheduled: false,
            unusable: HashMap::new(),
            deregistered: Default::default(),
            resolving: Vec::new(),
            home_identity: Err("not read yet".to_string()),
            reading_home_identity: false,
            recorded: HashMap::new(),
            next_serial: 0,
        }
    }

    /// Reads home's identity (once it is known, never again).
    fn read_home_identity(&mut self, ctx: &mut Context<Self>) {
        if self.home_identity.is_ok() || std::mem::replace(&mut self.reading_home_identity, true) {
            return;
        }
        let client = self.shared.home.client.clone();
        let me = ctx.address();
        tokio::spawn(async move {
            me.do_send(HomeIdentity(clusters::identity(&client).await));
        });
    }

    /// The identity recorded for member `name`: by this controller, else in
    /// its status (by an earlier one).
    fn recorded_identity(&self, name: &str) -> Option<String> {
        let spec = self.specs.get(name)?;
        let uid = spec.metadata.uid.clone().unwrap_or_default();
        match self.recorded.get(name) {
            Some((recorded_uid, identity)) if *recorded_uid == uid => Some(identity.clone()),
            _ => spec
                .status
                .as_ref()
                .and_then(|s| s.identity.as_ref())
                .map(|i| i.kube_system_uid.clone()),
        }
    }

    /// Decides every member's standing (`member_identity::standings`) and
    /// carries it out: an accepted member's identity is recorded and its
    /// informers run; a refused member's informers stop.
    fn reassess(&mut self, ctx: &mut Context<Self>) {
        let home = Home {
            name: self.shared.home.name.clone(),
            identity: self.home_identity.clone().ok(),
        };
        let views: Vec<MemberView> = self
            .specs
            .iter()
            .map(|(name, spec)| MemberView {
                name: name.clone(),
                created: spec.metadata.creation_timestamp.as_ref().map(|t| t.0),
                recorded: self.recorded_identity(name),
                reached: self.members.get(name).and_then(|m| m.reached.clone()),
            })
            .collect();
        for (name, standing) in member_identity::standings(&home, &views) {
            if !self.members.contains_key(&name) {
                continue;
            }
            if let Standing::Accepted { identity } = &standing
                && self.recorded_identity(&name).is_none()
            {
                let uid = self.specs.get(&name).and_then(|s| s.metadata.uid.clone());
                tracing::info!(cluster = %name, identity = %identity, "member cluster identity recorded");
                self.recorded
                    .insert(name.clone(), (uid.unwrap_or_default(), identity.clone()));
            }
            let accepted = matches!(standing, Standing::Accepted { .. });
            let Some(member) = self.members.get_mut(&name) else {
                continue;
            };
            if let Standing::Refused(refusal) = &standing
                && member.informers.take().is_some()
            {
                member.ready = false;
                tracing::warn!(cluster = %name, reason = refusal.reason(), "member cluster refused; its informers stopped");
            }
            if member.standing != standing {
                if let Standing::Refused(refusal) = &standing {
                    tracing::warn!(cluster = %name, reason = refusal.reason(), message = %refusal, "member cluster refused");
                }
                member.standing = standing;
            }
            if accepted {
                self.start_informers(ctx, &name);
            }
        }
    }

    /// Starts the informers of an accepted member's connection.
    fn start_informers(&mut self, ctx: &mut Context<Self>, name: &str) {
        let changed = capacity_freed(ctx);
        let metrics = self.shared.metrics.clone();
        let Some(member) = self.members.get_mut(name) else {
            return;
        };
        if member.informers.is_some() {
            return;
        }
        let actor = member.idle.take().unwrap_or_else(|| {
            // Stopped once (refused, then accepted again): a new informer
            // keeps the routes and cache.
            let (actor, handle) = ClusterActor::replacing(
                name.to_string(),
                member.handle.client.clone(),
                metrics,
                Some(&member.handle),
            );
            member.handle = handle;
            actor
        });
        let mut actor = actor;
        if let Standing::Accepted { identity } = &member.standing {
            actor.expect_identity(identity.clone());
        }
        let client = member.handle.client.clone();
        member.informers = Some(Informers {
            _actor: actor.start(),
            capacity: CapacityWatch::start(&client, changed.clone()),
            pod_security: PodSecurityWatch::start(&client, changed),
        });
        tracing::info!(cluster = %name, "member cluster accepted; its informers run");
    }

    /// A MemberCluster with home's name is never connected; its status says
    /// why (written when it changes).
    fn refuse_home_name(&self, member: &MemberCluster) {
        let refusal = member_identity::Refusal::NamedLikeHome {
            home: self.shared.home.name.clone(),
        };
        let message = refusal.to_string();
        let current = member.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.condition_type == crate::api::READY_CONDITION)
        });
        if current.is_some_and(|c| c.message.as_deref() == Some(message.as_str())) {
            return;
        }
        tracing::warn!(cluster = %member.name_any(), reason = refusal.reason(), message = %message, "member cluster refused");
        self.write_status(
            &member.name_any(),
            &ReadyCondition {
                ready: false,
                reason: refusal.reason(),
                message: &message,
            },
            None,
        );
    }

    /// (Re)connects a member when its Secret is new or changed.
    fn connect(&mut self, ctx: &mut Context<Self>, member: Arc<MemberCluster>) {
        let name = member.name_any();
        if name == self.shared.home.name {
            return;
        }
        let home = self.shared.home.client.clone();
        let (metrics, cluster) = (self.shared.metrics.clone(), name.clone());
        let backoff = Backoff::from(self.shared.config.retry_interval());
        ctx.spawn(
            async move {
                let wrap = |config| crate::telemetry::instrumented_client(config, &cluster, metrics).map_err(|e| format!("client: {e}"));
                clusters::member_client(&home, &member, backoff, wrap).await.map_err(|e| e.to_string())
            }
            .into_actor(self)
            .map(move |result: Result<(Client, Option<String>), String>, act, ctx| match result {
                Ok((client, version)) => {
                    if act.members.get(&name).is_some_and(|m| m.secret_version == version) {
                        return;
                    }
                    let previous = act.members.get(&name).map(|m| m.handle.clone());
                    // Its informers start once the probe found the cluster accepted
                    // (the old connection's stop here: the new credentials may reach
                    // another cluster, and nothing it shows may count before that is known).
                    let (idle, handle) = ClusterActor::replacing(name.clone(), client, act.shared.metrics.clone(), previous.as_ref());
                    tracing::info!(cluster = %name, "member cluster connected; checking who it is");
                    let (lost, swept) = act.members.get(&name).map_or((false, false), |m| (m.lost, m.swept));
                    act.unusable.remove(&name);
                    act.next_serial += 1;
                    act.members.insert(name.clone(), Member { handle, serial: act.next_serial, informers: None, reached: None, standing: Standing::Unknown, ready: false, last_ready: Instant::now(), lost, swept, sweeping: false, secret_version: version, idle: Some(idle) });
                    act.answer_resolves();
                    act.probe(ctx, name.clone());
                }
                Err(message) => {
                    tracing::warn!(cluster = %name, %message, "member cluster cannot be connected");
                    act.write_status(&name, &ReadyCondition::probed(false, &message), None);
                    act.unusable.insert(name.clone(), message);
                    act.answer_resolves();
                }
            }),
        );
    }

    fn probe(&self, ctx: &mut Context<Self>, name: String) {
        let Some(member) = self.members.get(&name) else {
            return;
        };
        let (client, serial) = (member.handle.client.clone(), member.serial);
        let me = ctx.address();
        tokio::spawn(async move {
            let probe = clusters::probe(&client).await;
            me.do_send(Probed {
                name,
                serial,
                probe,
            });
        });
    }

    /// Deletes what no job accounts for on the member, then lets it take replicas.
    fn sweep(&mut self, ctx: &mut Context<Self>, name: &str) {
        let Some(member) = self.members.get_mut(name) else {
            return;
        };
        // Only the cluster the member stands for is swept.
        if member.sweeping || !member.accepted() {
            return;
        }
        member.sweeping = true;
        let client = member.handle.client.clone();
        let home = self.shared.home.client.clone();
        let name = name.to_string();
        let me = ctx.address();
        let signer = self.shared.signer.clone();
        tokio::spawn(async move {
            let result = super::sweeper::sweep(&client, &name, &home, &signer)
                .await
                .map_err(|e| crate::telemetry::shown(&e));
            me.do_send(Swept { name, result });
        });
    }

    /// Answers every resolve whose clusters are all settled.
    fn answer_resolves(&mut self) {
        for (names, reply) in std::mem::take(&mut self.resolving) {
            match self.resolution(&names) {
                Some(answer) => {
                    let _ = reply.send(answer);
                }
                None => self.resolving.push((names, reply)),
            }
        }
    }

    /// The targets of `names`, an error, or None while still unsettled.
    fn resolution(&self, names: &[String]) -> Option<ResolveResult> {
        let mut targets = BTreeMap::new();
        for name in names {
            if name != &self.shared.home.name {
                if !self.listed {
                    return None;
                }
                if !self.specs.contains_key(name) {
                    return Some(Err(format!("there is no MemberCluster {name}")));
                }
                if let Some(why) = self.unusable.get(name) {
                    return Some(Err(format!("member cluster {name} is unusable: {why}")));
                }
                match self.members.get(name) {
                    None => return None,
                    Some(member) if member.lost => {
                        return Some(Err(format!("member cluster {name} was lost")));
                    }
                    // Not (yet) known to be the cluster it stands for: as
                    // for an unreachable one, wait until it is, or is lost.
                    Some(member) if !member.accepted() => return None,
                    Some(_) => {}
                }
            }
            targets.insert(name.clone(), self.target(name)?);
        }
        Some(Ok(targets))
    }

    /// Publishes the lost members for the jobs.
    fn publish_lost(&self) {
        let lost: std::collections::BTreeSet<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.lost)
            .map(|(n, _)| n.clone())
            .chain(self.deregistered.iter().cloned())
            .collect();
        self.shared.lost_clusters.send_if_modified(|current| {
            let changed = *current != lost;
            *current = lost;
            changed
        });
    }

    /// Why the member's spec keeps it from taking replicas: an address
    /// template that would write a bad TF_CONFIG.
    fn spec_problem(&self, name: &str) -> Option<String> {
        let spec = self.specs.get(name)?;
        crate::builders::check_address_template(&spec.spec.address_template)
            .err()
            .map(|e| format!("spec.addressTemplate: {e}"))
    }

    fn home_target(&self) -> Target {
        Target {
            handle: self.shared.home.clone(),
            address_template: DEFAULT_ADDRESS_TEMPLATE.to_string(),
            export_services: false,
            home: true,
            admission: None,
        }
    }

    fn target(&self, name: &str) -> Option<Target> {
        if name == self.shared.home.name {
            return Some(self.home_target());
        }
        let (member, spec) = (self.members.get(name)?, self.specs.get(name)?);
        if !member.accepted() {
            return None;
        }
        Some(Target {
            handle: member.handle.clone(),
            address_template: spec.spec.address_template.clone(),
            export_services: spec.spec.export_services,
            home: false,
            admission: Some(Admission {
                cluster: name.to_string(),
                pod_policies: self.pod_policies.clone(),
                pod_security: member.informers.as_ref().map(|i| i.pod_security.clone()),
            }),
        })
    }

    /// Every cluster placement may use, as it is now.
    fn cluster_states(&self) -> Vec<ClusterState> {
        let mut states = Vec::new();
        if let Some(home) = &self.home_capacity {
            states.push(ClusterState {
                name: self.shared.home.name.clone(),
                ready: true,
                nodes: home.snapshot().nodes,
                ..Default::default()
            });
        }
        let mut names: Vec<&String> = self.specs.keys().collect();
        // A stable order makes ties (equal fits) go the same way every time.
        names.sort();
        // A MemberCluster with home's name is refused: the name is home's.
        for (name, spec) in names
            .into_iter()
            .filter(|n| **n != self.shared.home.name)
            .filter_map(|n| Some((n, self.specs.get(n)?)))
        {
            let informers = self
                .members
                .get(name)
                .filter(|m| m.placeable() && self.spec_problem(name).is_none())
                .and_then(|m| m.informers.as_ref());
            states.push(ClusterState {
                name: name.clone(),
                member: true,
                pod_policy: spec.spec.pod_policy.clone(),
                labels: spec.labels().clone(),
                pod_security: informers
                    .map(|i| i.pod_security.levels())
                    .unwrap_or_default(),
                ready: informers.is_some(),
                unschedulable: spec.spec.unschedulable,
                nodes: informers
                    .map(|i| i.capacity.snapshot().nodes)
                    .unwrap_or_default(),
            });
        }
        states
    }

    /// A pass once the messages already queued are handled: a burst of
    /// requests and releases costs one snapshot of the clusters, not one
    /// each.
    fn pass_soon(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.pass_scheduled, true) {
            return;
        }
        ctx.run_later(Duration::ZERO, |act, _| {
            act.pass_scheduled = false;
            act.try_waiting();
        });
    }

    /// Tries the waiting jobs against the capacity there is now and
    /// answers them.
    fn try_waiting(&mut self) {
        if self.listed && self.queue.has_work() {
            let clusters = self.cluster_states();
            let (home, single_cluster) = (&self.shared.home.name, self.specs.is_empty());
            let metrics = &self.shared.metrics;
            let answers = self
                .queue
                .try_waiting(&clusters, |demands, policy, available| {
                    if single_cluster {
                        // Everything at home: the scheduler queues it.
                        return Ok(demands.iter().map(|d| (d.key, home.clone())).collect());
                    }
                    let started = Instant::now();
                    let decision = placement::place(demands, available, policy);
                    metrics.placement_decided(started.elapsed(), PlacementOutcome::of(&decision));
                    decision
                });
            for answer in answers {
                self.answer(answer);
            }
        }
        self.shared.metrics.jobs_waiting(self.queue.len());
    }

    fn answer(&mut self, answer: Answer<Recipient<PlacementDecided>>) {
        let (reply, decided) = match answer {
            Answer::Waits { reply, reason } => (reply, PlacementDecided(Err(reason))),
            Answer::Placed {
                request,
                assignment,
            } => {
                let targets: Option<BTreeMap<String, Target>> = assignment
                    .values()
                    .map(|c| Some((c.clone(), self.target(c)?)))
                    .collect();
                // Placement picks only connected clusters; should one be
                // gone, the job asks again rather than be lost.
                let Some(targets) = targets else {
                    self.queue.release(&request.job_uid);
                    self.queue.request(*request);
                    return;
                };
                let placed = Placed {
                    assignment,
                    targets,
                };
                (request.reply, PlacementDecided(Ok(placed)))
            }
        };
        super::tell(&reply, decided, &self.shared.metrics, ActorKind::Job);
    }

    fn write_status(&self, name: &str, ready: &ReadyCondition, capacity: Option<Capacity>) {
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
        status.observed_generation = spec.and_then(|m| m.metadata.generation);
        let api: Api<MemberCluster> = Api::all(self.shared.home.client.clone());
        let name = name.to_string();
        tokio::spawn(async move {
            if let Err(e) = api
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"status": status})),
                )
                .await
            {
                tracing::debug!(cluster = %name, error = %crate::telemetry::shown(&e), "writing MemberCluster status failed");
            }
        });
    }
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
            let due: Vec<String> = act
                .members
                .iter()
                .filter(|(_, m)| m.swept && !m.lost && m.accepted())
                .map(|(name, _)| name.clone())
                .collect();
            for name in due {
                act.sweep(ctx, &name);
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
            let names: Vec<String> = act.members.keys().cloned().collect();
            for name in names {
                act.probe(ctx, name);
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
                // Only a new kubeconfig reference needs a new connection; other
                // spec changes (unschedulable, exports, …) are read from `specs`.
                let reconnect = self.specs.get(&name).is_none_or(|m| {
                    m.spec.kubeconfig_secret_ref != member.spec.kubeconfig_secret_ref
                });
                // A new spec shows in the status (observedGeneration) at once.
                let respec = self
                    .specs
                    .get(&name)
                    .is_some_and(|m| m.metadata.generation != member.metadata.generation);
                if self.deregistered.remove(&name) {
                    self.publish_lost();
                }
                self.pod_policies
                    .insert(name.clone(), member.spec.pod_policy.clone());
                self.specs.insert(name.clone(), member.clone());
                if name == self.shared.home.name {
                    self.refuse_home_name(&member);
                } else if reconnect {
                    self.connect(ctx, member);
                } else if respec {
                    self.probe(ctx, name);
                }
                self.answer_resolves();
                self.queue.capacity_may_have_grown();
                self.try_waiting();
            }
            watcher::Event::Delete(member) => {
                let name = member.name_any();
                // One with home's name was never a member: home stays.
                if name == self.shared.home.name {
                    self.specs.remove(&name);
                    return;
                }
                self.specs.remove(&name);
                self.pod_policies.remove(&name);
                self.members.remove(&name);
                self.unusable.remove(&name);
                self.recorded.remove(&name);
                // A duplicate of it may be accepted now.
                self.reassess(ctx);
                self.shared.metrics.cluster_removed(&name);
                tracing::warn!(cluster = %name, "MemberCluster deleted; its jobs are re-placed");
                self.deregistered.insert(name);
                self.publish_lost();
                self.answer_resolves();
            }
            watcher::Event::InitDone => {
                self.listed = true;
                self.answer_resolves();
                self.queue.capacity_may_have_grown();
                self.try_waiting();
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
        let affected: Vec<Arc<MemberCluster>> = self
            .specs
            .values()
            .filter(|m| {
                m.spec.kubeconfig_secret_ref.namespace == namespace
                    && m.spec.kubeconfig_secret_ref.name == name
            })
            .cloned()
            .collect();
        for member in affected {
            self.connect(ctx, member);
        }
    }
}

impl Handler<Probed> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Probed, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        let timeout = self.shared.config.cluster_lost_timeout();
        let problem = self.spec_problem(&msg.name);
        match self.members.get_mut(&msg.name) {
            // A probe of a connection replaced since is no news.
            Some(member) if member.serial == msg.serial => {
                if let Ok(identity) = &msg.probe.reached {
                    member.reached = Some(identity.clone());
                }
            }
            _ => return,
        }
        self.reassess(ctx);
        let home_unknown = match &self.home_identity {
            Ok(_) => String::new(),
            Err(why) => format!("waiting for the home cluster's identity ({why})"),
        };
        let Some(member) = self.members.get_mut(&msg.name) else {
            return;
        };
        // A good probe: the cluster answered and is the one the member
        // stands for. Anything else counts as no answer (a partition's rules).
        member.ready = msg.probe.reached.is_ok() && member.accepted();
        let (reason, mut message) = match (&member.standing, &msg.probe.reached) {
            (Standing::Refused(refusal), _) => (refusal.reason(), refusal.to_string()),
            (_, Err(why)) => (reason::PROBE_FAILED, why.clone()),
            (Standing::Unknown, Ok(_)) => (member_identity::reason::IDENTITY_UNKNOWN, home_unknown),
            (Standing::Accepted { .. }, Ok(_)) => (
                reason::PROBE_SUCCEEDED,
                "the API server answers".to_string(),
            ),
        };
        if member.ready {
            member.last_ready = Instant::now();
            if member.lost {
                member.lost = false;
                tracing::info!(cluster = %msg.name, "lost member cluster is back; sweeping it before it takes replicas");
            }
        } else if !member.lost && member.last_ready.elapsed() >= timeout {
            member.lost = true;
            member.swept = false;
            tracing::warn!(cluster = %msg.name, timeout_ms = timeout.as_millis() as u64, "member cluster lost; its jobs are re-placed");
        }
        if member.lost {
            message = format!("lost (no good probe for {}s): {message}", timeout.as_secs());
        }
        let sweep_due = member.ready && !member.swept;
        if sweep_due {
            message = format!("{message}; removing leftovers before it takes replicas");
        }
        // Ready means "takes replicas": only once swept, and with a usable spec.
        let placeable = member.placeable() && problem.is_none();
        if let Some(problem) = problem {
            message = problem;
        }
        let reason = match (placeable, reason) {
            (true, _) => reason::PROBE_SUCCEEDED,
            (false, reason::PROBE_SUCCEEDED) => reason::PROBE_FAILED,
            (false, reason) => reason,
        };
        let capacity = placeable
            .then(|| member.informers.as_ref().map(|i| i.capacity.snapshot()))
            .flatten();
        self.shared
            .metrics
            .cluster_probed(&msg.name, placeable, capacity.as_ref());
        let ready = ReadyCondition {
            ready: placeable,
            reason,
            message: &message,
        };
        self.write_status(&msg.name, &ready, capacity);
        self.publish_lost();
        self.answer_resolves();
        if sweep_due {
            self.sweep(ctx, &msg.name);
        }
        self.queue.capacity_may_have_grown();
        self.try_waiting();
    }
}

impl Handler<HomeIdentity> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: HomeIdentity, ctx: &mut Self::Context) {
        self.reading_home_identity = false;
        match msg.0 {
            Ok(identity) => {
                tracing::info!(identity = %identity, "home cluster identity read");
                self.home_identity = Ok(identity);
                self.reassess(ctx);
            }
            Err(why) => {
                if self.home_identity.as_ref().err() != Some(&why) {
                    tracing::warn!(error = %why, "reading the home cluster's identity failed; no member is used until it is read");
                }
                self.home_identity = Err(why);
            }
        }
    }
}

impl Handler<Swept> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Swept, _ctx: &mut Self::Context) {
        let Some(member) = self.members.get_mut(&msg.name) else {
            return;
        };
        member.sweeping = false;
        match msg.result {
            Ok(deleted) => {
                member.swept = true;
                tracing::debug!(cluster = %msg.name, deleted, "member cluster swept");
                let placeable = member.placeable();
                let capacity = placeable
                    .then(|| member.informers.as_ref().map(|i| i.capacity.snapshot()))
                    .flatten();
                self.shared
                    .metrics
                    .cluster_probed(&msg.name, placeable, capacity.as_ref());
                let ready = ReadyCondition::probed(placeable, "the API server answers");
                self.write_status(&msg.name, &ready, capacity);
                self.queue.capacity_may_have_grown();
                self.try_waiting();
            }
            // The next good probe tries again.
            Err(error) => {
                tracing::warn!(cluster = %msg.name, %error, "sweeping member cluster failed")
            }
        }
    }
}

impl Handler<Place> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Place, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        self.queue.request(Request {
            job_uid: msg.job_uid,
            priority: msg.priority,
            created: msg.created,
            demands: msg.demands,
            policy: msg.policy,
            reply: msg.reply,
        });
        self.pass_soon(ctx);
    }
}

impl Handler<Resolve> for MemberSupervisor {
    type Result = ResponseFuture<ResolveResult>;

    fn handle(&mut self, msg: Resolve, _ctx: &mut Self::Context) -> Self::Result {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.resolving.push((msg.0, reply));
        self.answer_resolves();
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err("the member supervisor stopped".to_string()))
        })
    }
}

impl Handler<CapacityFreed> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, _msg: CapacityFreed, ctx: &mut Self::Context) {
        self.queue.capacity_may_have_grown();
        if self.queue.is_empty() || std::mem::replace(&mut self.retry_scheduled, true) {
            return;
        }
        ctx.run_later(RETRY_COALESCE, |act, _| {
            act.retry_scheduled = false;
            act.try_waiting();
        });
    }
}

impl Handler<Release> for MemberSupervisor {
    type Result = ();

    fn handle(&mut self, msg: Release, ctx: &mut Self::Context) {
        let _timer = self.shared.metrics.handling(ActorKind::MemberSupervisor);
        self.queue.release(&msg.0);
        self.pass_soon(ctx);
    }
}
