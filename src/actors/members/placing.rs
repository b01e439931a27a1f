//! Where replicas go: the MemberSupervisor decides placements one at a
//! time, through the pure `placement::queue::Queue` (order, holds, when a
//! job is worth another try), against the clusters as their health
//! machines and informers show them now; and it resolves the clusters of a
//! placement recorded before a restart. The queue is told when capacity
//! may have grown — a pod on a target cluster ended (coalesced over
//! `RETRY_COALESCE`), a hold was released, a member's health or spec
//! changed. Without any MemberCluster every replica goes to home at once,
//! as a single-cluster operator does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use kube::ResourceExt;

use super::MemberSupervisor;
use crate::builders::DEFAULT_ADDRESS_TEMPLATE;
use crate::clusters::{ClusterHandle, PodSecurityWatch};
use crate::placement::queue::{Answer, Request};
use crate::placement::{self, Assignment, ClusterState, Demand, PodNames, Policy};
use crate::telemetry::{ActorKind, PlacementOutcome};

/// Pods ending on a cluster within this window cost one retry of the queue.
const RETRY_COALESCE: Duration = Duration::from_millis(50);

/// Requests and releases within this window cost one pass. A pass takes a
/// snapshot of every node and charges every hold against it, so its cost
/// grows with the clusters; in a backlog, jobs pass the start gate one by
/// one as others start: a pass each was about a quarter of the
/// controller's samples at 10,000 jobs on 200 nodes per cluster
/// (docs/src/benchmarks/controller.md, (f)).
const PASS_COALESCE: Duration = Duration::from_millis(10);

/// A pod on a target cluster left the active set, a node came or changed,
/// or a namespace's Pod Security level changed: capacity may be free.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CapacityFreed;

/// The clusters a job uses, by name; each job's targets are shared between
/// its maps (a `Target` is a few hundred bytes, and a map node holds room
/// for eleven).
pub type Targets = BTreeMap<String, Arc<Target>>;

/// A cluster replicas were placed on, and how to reach it.
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
    pod_security: Option<PodSecurityWatch>,
}

/// Each member's `podPolicy` as its MemberCluster says now.
pub(super) type PodPolicies = Arc<dashmap::DashMap<String, crate::api::PodPolicy>>;

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
    pub targets: Targets,
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
    pub pods: PodNames,
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
#[rtype(result = "Result<Targets, String>")]
pub struct Resolve(pub Vec<String>);

/// The job's pods are visible, or it ended: drop its hold and its request.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Release(pub String);

pub(super) type ResolveResult = Result<Targets, String>;

impl MemberSupervisor {
    /// Answers every resolve whose clusters are all settled.
    pub(super) fn answer_resolves(&mut self) {
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
                let Some(health) = self.health.get(name) else {
                    return Some(Err(format!("there is no MemberCluster {name}")));
                };
                let accepted = self.connections.get(name).is_some_and(|c| c.accepted());
                if let Err(why) = health.for_recorded_placement(name, accepted)? {
                    return Some(Err(why));
                }
            }
            targets.insert(name.clone(), self.target(name)?);
        }
        Some(Ok(targets))
    }

    fn home_target(&self) -> Arc<Target> {
        Arc::new(Target {
            handle: self.shared.home.clone(),
            address_template: DEFAULT_ADDRESS_TEMPLATE.to_string(),
            export_services: self.shared.config.home_export_services,
            home: true,
            admission: None,
        })
    }

    fn target(&self, name: &str) -> Option<Arc<Target>> {
        if name == self.shared.home.name {
            return Some(self.home_target());
        }
        let (connection, spec) = (self.connections.get(name)?, self.specs.get(name)?);
        if !connection.accepted() {
            return None;
        }
        Some(Arc::new(Target {
            handle: connection.handle.clone(),
            address_template: spec.spec.address_template.clone(),
            export_services: spec.spec.export_services,
            home: false,
            admission: Some(Admission {
                cluster: name.to_string(),
                pod_policies: self.pod_policies.clone(),
                pod_security: connection
                    .informers
                    .as_ref()
                    .map(|i| i.pod_security.clone()),
            }),
        }))
    }

    /// Every cluster placement may use, as it is now.
    fn cluster_states(&self) -> Vec<ClusterState> {
        let mut states = Vec::new();
        if let Some(home) = &self.home_capacity {
            states.push(ClusterState {
                name: self.shared.home.name.clone(),
                ready: true,
                unreachable: self.shared.config.home_unreachable(),
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
                .health
                .get(name)
                .filter(|health| health.takes_replicas())
                .and_then(|_| self.connections.get(name)?.informers.as_ref());
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
                stable_addresses: spec.spec.gives_stable_addresses(),
                unreachable: spec.spec.unreachable_across_clusters(),
                nodes: informers
                    .map(|i| i.capacity.snapshot().nodes)
                    .unwrap_or_default(),
            });
        }
        states
    }

    /// A pass `PASS_COALESCE` from now: a burst of requests and releases
    /// costs one snapshot of the clusters, not one each.
    fn pass_soon(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.pass_scheduled, true) {
            return;
        }
        ctx.run_later(PASS_COALESCE, |act, _| {
            act.pass_scheduled = false;
            act.try_waiting();
        });
    }

    /// Tries the waiting jobs against the capacity there is now and
    /// answers them.
    pub(super) fn try_waiting(&mut self) {
        if self.listed && self.queue.has_work() {
            // Before the snapshot: a pod shown after it is still held.
            self.queue.forget_shown_pods(|cluster, pod| {
                let capacity = if cluster == self.shared.home.name {
                    self.home_capacity.as_ref()
                } else {
                    self.connections
                        .get(cluster)
                        .and_then(|c| c.informers.as_ref())
                        .map(|i| &i.capacity)
                };
                capacity.is_some_and(|c| c.shows_pod(pod))
            });
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
                let clusters: BTreeSet<&String> = assignment.values().collect();
                let targets: Option<Targets> = clusters
                    .into_iter()
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
        crate::actors::tell(&reply, decided, &self.shared.metrics, ActorKind::Job);
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
            pods: msg.pods,
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
