//! `tfjob-federator fence`: the member-side fence (docs/src/members/fence.md; the
//! decisions are `crate::fence`). It runs inside a member cluster with the
//! member's own identity and:
//!
//! - reads the fence key the controller wrote there (Secret
//!   `tfjob-federator-fence-key`), and only then reports in, by renewing
//!   its own Lease `tfjob-federator-fence` (the controller shows it as the
//!   member's `Fenced` condition);
//! - watches the controller's Lease `tfjob-federator-controller`; once it
//!   has not been renewed for `fenceAfterMs` (the controller's, written in
//!   the Lease) it deletes every live pod this federation placed on the
//!   member whose fence signature verifies, records an Event on the Lease
//!   and logs, and deletes every such pod that appears until the Lease is
//!   renewed again.
//!
//! One watch of the Lease, one of the federation's pods (by label), one
//! timer: no work per job.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use crate::builders::MANAGED_SELECTOR;
use crate::fence::{
    CONTROLLER_LEASE, ControllerLease, Decision, Event, FENCE_AFTER_ANNOTATION, FENCE_LEASE, Fence,
    KEY_FIELD, KEY_SECRET, POD_GRACE_ANNOTATION, grace_seconds, reason, stoppable,
};
use crate::signing::FenceVerifier;

/// How the fence runs.
#[derive(Debug, Clone)]
pub struct FenceOptions {
    /// Kubeconfig of the member (default: in-cluster, or the usual inference).
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Where the Leases and the key are: the controller's namespace on the member.
    pub namespace: String,
    /// This fence's name in its Lease.
    pub identity: String,
    /// `fenceAfterMs` while the controller's Lease does not say.
    pub fence_after: Duration,
    /// `fencePodGraceMs` while the controller's Lease does not say.
    pub pod_grace_ms: u64,
    /// How often the fence renews its own Lease (which holds three times this).
    pub renew_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("{0}")]
    Config(#[from] crate::controller::StartError),
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// One call slower than this counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Deletes the fence has in flight at once when it stops a member's pods:
/// a member of hundreds of pods is stopped in a few round trips, and the
/// member's API server sees a bounded burst.
const DELETES_IN_FLIGHT: usize = 32;

/// The field manager and Event reporter of the fence.
const FIELD_MANAGER: &str = "tfjob-federator-fence";

/// Runs the fence until `shutdown` resolves.
pub async fn run(
    options: FenceOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), FenceError> {
    let config =
        crate::controller::kube_config(options.kubeconfig.as_deref(), options.context.clone())
            .await?;
    let client = Client::try_from(config)?;
    let mut fencer = Fencer::new(client, options);
    tokio::pin!(shutdown);
    tokio::select! {
        () = fencer.run() => {}
        () = &mut shutdown => {}
    }
    tracing::info!("fence stopped");
    Ok(())
}

struct Fencer {
    client: Client,
    options: FenceOptions,
    verifier: Option<FenceVerifier>,
    fence: Fence,
    recorder: Recorder,
    /// The controller's Lease, for the Events' reference.
    lease_ref: Option<ObjectReference>,
    /// The federation's pods on the member (live ones are stopped while stale).
    pods: HashMap<(String, String), Pod>,
    relisting: Option<HashMap<(String, String), Pod>>,
    lease_seen_in_relist: bool,
}

impl Fencer {
    fn new(client: Client, options: FenceOptions) -> Fencer {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(options.identity.clone()),
        };
        Fencer {
            recorder: Recorder::new(client.clone(), reporter),
            fence: Fence::new(options.fence_after),
            client,
            options,
            verifier: None,
            lease_ref: None,
            pods: HashMap::new(),
            relisting: None,
            lease_seen_in_relist: false,
        }
    }

    async fn run(&mut self) {
        let namespace = self.options.namespace.clone();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &namespace);
        let lease_events = watcher(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={CONTROLLER_LEASE}")),
        )
        .default_backoff();
        let pods: Api<Pod> = Api::all(self.client.clone());
        let pod_events =
            watcher(pods, watcher::Config::default().labels(MANAGED_SELECTOR)).default_backoff();
        tokio::pin!(lease_events);
        tokio::pin!(pod_events);
        let mut renew = tokio::time::interval(self.options.renew_interval);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_check: Option<Instant> = None;
        tracing::info!(namespace = %namespace, identity = %self.options.identity, "fence started; waiting for the fence key and the controller's Lease");
        loop {
            let check = async move {
                match next_check {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let event = tokio::select! {
                _ = renew.tick() => {
                    self.renew_own_lease().await;
                    // While stopping, pods whose delete failed are tried again.
                    if self.fence.is_stopping() {
                        self.stop_all().await;
                    }
                    continue;
                }
                () = check => Event::Tick,
                event = lease_events.next() => match event {
                    Some(Ok(event)) => match self.lease_event(event) {
                        Some(event) => event,
                        None => continue,
                    },
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "watching the controller's Lease failed; retrying");
                        continue;
                    }
                    None => return,
                },
                event = pod_events.next() => {
                    match event {
                        Some(Ok(event)) => self.pod_event(event).await,
                        Some(Err(e)) => tracing::warn!(error = %e, "watching the federation's pods failed; retrying"),
                        None => return,
                    }
                    continue;
                }
            };
            let decision =
                self.fence
                    .step(event, jiff::Timestamp::now(), std::time::Instant::now());
            next_check = match &decision {
                Decision::Keep { recheck_in } => Some(Instant::now() + *recheck_in),
                // Fresh again: the next look says until when.
                Decision::Resume => Some(Instant::now()),
                _ => None,
            };
            self.carry_out(decision).await;
        }
    }

    /// The fence's view of a change of the controller's Lease.
    fn lease_event(&mut self, event: watcher::Event<Lease>) -> Option<Event> {
        match event {
            watcher::Event::Init => {
                self.lease_seen_in_relist = false;
                None
            }
            watcher::Event::InitApply(lease) => {
                self.lease_seen_in_relist = true;
                Some(self.read_lease(&lease))
            }
            watcher::Event::Apply(lease) => Some(self.read_lease(&lease)),
            watcher::Event::InitDone => (!self.lease_seen_in_relist).then_some(Event::Lease(None)),
            watcher::Event::Delete(_) => Some(Event::Lease(None)),
        }
    }

    fn read_lease(&mut self, lease: &Lease) -> Event {
        self.lease_ref = Some(lease.object_ref(&()));
        let annotation = |name: &str| {
            lease
                .annotations()
                .get(name)
                .and_then(|v| v.parse::<u64>().ok())
        };
        Event::Lease(Some(ControllerLease {
            renew_time: lease
                .spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0),
            fence_after: annotation(FENCE_AFTER_ANNOTATION).map(Duration::from_millis),
            pod_grace_ms: annotation(POD_GRACE_ANNOTATION),
        }))
    }

    async fn pod_event(&mut self, event: watcher::Event<Pod>) {
        let key = |pod: &Pod| (pod.namespace().unwrap_or_default(), pod.name_any());
        match event {
            watcher::Event::Init => self.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    relisting.insert(key(&pod), pod.clone());
                }
                self.stop_if_stopping(&pod).await;
            }
            watcher::Event::InitDone => {
                if let Some(relisted) = self.relisting.take() {
                    self.pods = relisted;
                }
            }
            watcher::Event::Apply(pod) => {
                self.pods.insert(key(&pod), pod.clone());
                self.stop_if_stopping(&pod).await;
            }
            watcher::Event::Delete(pod) => {
                self.pods.remove(&key(&pod));
            }
        }
    }

    async fn carry_out(&mut self, decision: Decision) {
        match decision {
            Decision::Stop { why } => {
                let stoppable = self.stoppable().len();
                tracing::warn!(
                    pods = stoppable,
                    "fencing this member: {why}; deleting the federation's pods here until the Lease is renewed"
                );
                self.record(
                    EventType::Warning,
                    reason::FENCED,
                    format!("{why}; deleting the federation's {stoppable} live pod(s) on this member until the Lease is renewed"),
                )
                .await;
                self.stop_all().await;
            }
            Decision::Resume => {
                tracing::info!(
                    "the controller's Lease is renewed again (or gone): no longer fencing this member"
                );
                self.record(
                    EventType::Normal,
                    reason::UNFENCED,
                    "the controller's Lease is renewed again (or gone): the federation's pods are no longer deleted here".to_string(),
                )
                .await;
            }
            Decision::Stopping | Decision::Keep { .. } | Decision::Idle => {}
        }
    }

    async fn record(&self, type_: EventType, reason: &str, note: String) {
        let Some(reference) = &self.lease_ref else {
            return;
        };
        let event = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: reason.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, "recording an Event failed");
        }
    }

    /// The pods to delete now: live, stoppable (their fence signature
    /// verifies), and not already going with at most the fence's grace.
    fn stoppable(&self) -> Vec<(Pod, i64)> {
        self.pods
            .values()
            .filter_map(|pod| self.needs_stopping(pod).map(|grace| (pod.clone(), grace)))
            .collect()
    }

    /// The grace to delete `pod` with, if the fence deletes it.
    fn needs_stopping(&self, pod: &Pod) -> Option<i64> {
        let verifier = self.verifier.as_ref()?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) || !stoppable(verifier, pod) {
            return None;
        }
        let pod_grace_ms = self
            .fence
            .pod_grace_ms()
            .unwrap_or(self.options.pod_grace_ms);
        let grace = grace_seconds(
            pod_grace_ms,
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds),
        );
        // Already going, no slower than the fence would have it.
        let going = pod.metadata.deletion_timestamp.is_some()
            && pod
                .metadata
                .deletion_grace_period_seconds
                .is_some_and(|g| g <= grace);
        (!going).then_some(grace)
    }

    async fn stop_if_stopping(&self, pod: &Pod) {
        if !self.fence.is_stopping() {
            return;
        }
        if let Some(grace) = self.needs_stopping(pod) {
            self.delete(pod, grace).await;
        }
    }

    /// Deletes every stoppable pod, [`DELETES_IN_FLIGHT`] at a time: the
    /// controller places these replicas elsewhere `clusterLostTimeoutMs -
    /// fenceAfterMs` after the fence began (seconds), so one delete after
    /// another would leave the last of a busy member's pods running past
    /// that (30 pods took 5.8 s on a loaded machine).
    async fn stop_all(&self) {
        futures::stream::iter(self.stoppable())
            .for_each_concurrent(DELETES_IN_FLIGHT, |(pod, grace)| async move {
                self.delete(&pod, grace).await;
            })
            .await;
    }

    async fn delete(&self, pod: &Pod, grace: i64) {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: u32::try_from(grace).ok(),
            // Only this pod: never a new one made under its name since.
            preconditions: pod.uid().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match tokio::time::timeout(CALL_TIMEOUT, api.delete(&name, &params)).await {
            Ok(Ok(_)) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), grace_seconds = grace, "fence deleted a pod of the federation")
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 404 || status.code == 409 => {}
            Ok(Err(e)) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %crate::telemetry::shown(&e), "fence could not delete a pod; tried again")
            }
            Err(_) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), "fence delete got no answer; tried again")
            }
        }
    }

    /// Reads the fence key until it is there; then renews the fence's own
    /// Lease, so the controller knows this member is fenced.
    async fn renew_own_lease(&mut self) {
        let namespace = self.options.namespace.clone();
        if self.verifier.is_none() {
            let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &namespace);
            match tokio::time::timeout(CALL_TIMEOUT, secrets.get_opt(KEY_SECRET)).await {
                Ok(Ok(Some(secret))) => {
                    let key = secret
                        .data
                        .as_ref()
                        .and_then(|d| d.get(KEY_FIELD))
                        .map(|k| k.0.clone())
                        .filter(|k| !k.is_empty());
                    match key {
                        Some(key) => {
                            tracing::info!("fence key read; this member is fenced");
                            self.verifier = Some(FenceVerifier::new(&key));
                        }
                        None => tracing::warn!(
                            "Secret {namespace}/{KEY_SECRET} has no {KEY_FIELD}; waiting for the controller to write it"
                        ),
                    }
                }
                Ok(Ok(None)) => {
                    tracing::info!(
                        "no Secret {namespace}/{KEY_SECRET} yet: the controller writes it once it reaches this member"
                    );
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %crate::telemetry::shown(&e), "reading the fence key failed")
                }
                Err(_) => tracing::warn!("reading the fence key got no answer"),
            }
            if self.verifier.is_none() {
                return;
            }
            // Pods seen before the key was read can be judged now.
            if self.fence.is_stopping() {
                self.stop_all().await;
            }
        }
        let holds = self.options.renew_interval.saturating_mul(3);
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": FENCE_LEASE, "namespace": namespace},
            "spec": {
                "holderIdentity": self.options.identity,
                "renewTime": MicroTime(jiff::Timestamp::now()),
                "leaseDurationSeconds": i32::try_from(holds.as_millis().div_ceil(1000)).unwrap_or(i32::MAX).max(1),
            },
        });
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &namespace);
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        match tokio::time::timeout(
            CALL_TIMEOUT,
            api.patch(FENCE_LEASE, &apply, &Patch::Apply(&lease)),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::telemetry::shown(&e), "renewing the fence's Lease failed")
            }
            Err(_) => tracing::warn!("renewing the fence's Lease got no answer"),
        }
    }
}
