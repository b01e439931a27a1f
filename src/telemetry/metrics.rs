//! Every metric the controller exports, in one place: names, help texts,
//! labels and buckets. Actors call the small methods here. Label values are
//! bounded — phases, outcomes, reasons, verbs, status codes, actor kinds and
//! cluster names (bounded by the member count), never job or pod names —
//! values are in base units (seconds, bytes, cores), and only counters end
//! in `_total`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramTimer, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::api::{JobPhase, ReplicaPhase, TensorFlowTrainingJob, TensorFlowTrainingJobStatus};
use crate::capacity::{self, Capacity};
use crate::placement::Unplaceable;
use crate::status::ReplicaView;

/// Reasons of `tfjob_federator_replica_restarts_total`, see [`restart_reason`].
const RESTART_REASONS: [&str; 8] = [
    "Completed",
    "Deleted",
    "Interrupted",
    "Killed",
    "RestartRequested",
    "Terminated",
    "Error",
    "Unknown",
];

const OUTCOME_SUCCEEDED: &str = "succeeded";
const OUTCOME_FAILED: &str = "failed";

/// The actors, as the `kind` label names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    JobManager,
    Job,
    Replica,
    Cluster,
    MemberSupervisor,
}

impl ActorKind {
    pub const ALL: [ActorKind; 5] = [
        ActorKind::JobManager,
        ActorKind::Job,
        ActorKind::Replica,
        ActorKind::Cluster,
        ActorKind::MemberSupervisor,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::JobManager => "job_manager",
            ActorKind::Job => "job",
            ActorKind::Replica => "replica",
            ActorKind::Cluster => "cluster",
            ActorKind::MemberSupervisor => "member_supervisor",
        }
    }
}

/// How one placement attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementOutcome {
    /// Every replica has a cluster.
    Placed,
    /// Some cluster is eligible, but the capacity is short now.
    Waiting,
    /// No cluster is eligible (none Ready, schedulable and selected).
    Unplaceable,
}

impl PlacementOutcome {
    pub const ALL: [PlacementOutcome; 3] = [
        PlacementOutcome::Placed,
        PlacementOutcome::Waiting,
        PlacementOutcome::Unplaceable,
    ];

    pub fn of<T>(decision: &Result<T, Unplaceable>) -> PlacementOutcome {
        match decision {
            Ok(_) => PlacementOutcome::Placed,
            Err(e) if e.eligible > 0 => PlacementOutcome::Waiting,
            Err(_) => PlacementOutcome::Unplaceable,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PlacementOutcome::Placed => "placed",
            PlacementOutcome::Waiting => "waiting",
            PlacementOutcome::Unplaceable => "unplaceable",
        }
    }
}

/// Why a replica is restarted, from how its pod ended: the signals behind
/// the exit codes `ExitCode` retries, a success (`Always`), or any other
/// failure.
pub fn restart_reason(ended: &ReplicaView) -> &'static str {
    match ended.phase {
        ReplicaPhase::Succeeded => return "Completed",
        ReplicaPhase::Deleted => return "Deleted",
        _ => {}
    }
    match ended.exit_code {
        Some(130) => "Interrupted",
        Some(137) => "Killed",
        Some(138) => "RestartRequested",
        Some(143) => "Terminated",
        Some(_) => "Error",
        None => "Unknown",
    }
}

/// The outcome a status write records, when it is the one that ends the job.
fn completion(before: Option<JobPhase>, after: Option<JobPhase>) -> Option<&'static str> {
    if before.is_some_and(JobPhase::is_terminal) {
        return None;
    }
    match after {
        Some(JobPhase::Succeeded) => Some(OUTCOME_SUCCEEDED),
        Some(JobPhase::Failed) => Some(OUTCOME_FAILED),
        _ => None,
    }
}

/// Seconds from the job's creation (its submission) to `now`.
fn since_submission(job: &TensorFlowTrainingJob, now: jiff::Timestamp) -> Option<f64> {
    let created = job.metadata.creation_timestamp.as_ref()?.0;
    Some(now.duration_since(created).as_secs_f64().max(0.0))
}

/// The unit a reported resource is exported in (its base unit).
fn unit_of(resource: &str) -> &'static str {
    match resource {
        "cpu" => "core",
        "memory" => "byte",
        _ => "device",
    }
}

/// Milli-units (as capacity counts them) in base units.
fn base_units(milli: i64) -> f64 {
    milli.max(0) as f64 / 1000.0
}

/// Moves one object's contribution to a gauge from one label set to another.
fn moved(gauge: &IntGaugeVec, from: Option<&[&str]>, to: Option<&[&str]>) {
    if from == to {
        return;
    }
    if let Some(labels) = from {
        gauge.with_label_values(labels).dec();
    }
    if let Some(labels) = to {
        gauge.with_label_values(labels).inc();
    }
}

/// The metrics of one controller, in their own registry.
pub struct Metrics {
    registry: Registry,
    jobs: IntGaugeVec,
    jobs_waiting: IntGauge,
    jobs_starting: IntGaugeVec,
    submit_to_running: Histogram,
    submit_to_pods_created: Histogram,
    completions: IntCounterVec,
    restarts: IntCounterVec,
    replicas: IntGaugeVec,
    placement_attempts: IntCounterVec,
    placement_duration: Histogram,
    cluster_ready: IntGaugeVec,
    cluster_allocatable: GaugeVec,
    cluster_free: GaugeVec,
    api_requests: IntCounterVec,
    api_duration: HistogramVec,
    actors: IntGaugeVec,
    message_duration: HistogramVec,
    mailbox_drops: IntCounterVec,
    status_writes: IntCounter,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        macro_rules! register {
            ($metric:expr) => {{
                let metric = $metric;
                registry.register(Box::new(metric.clone()))?;
                metric
            }};
        }
        // Seconds from submission: a job's pods appear and run within
        // seconds unless it waits for capacity, which may take hours.
        let job_buckets = vec![
            0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
        ];
        // In-memory decisions and message handlers: microseconds to milliseconds.
        let fast_buckets = prometheus::exponential_buckets(0.00001, 4.0, 9)?;
        let build_info = register!(IntGaugeVec::new(
            Opts::new(
                "tfjob_federator_build_info",
                "The controller's version; always 1."
            ),
            &["version"]
        )?);
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let metrics = Metrics {
            jobs: register!(IntGaugeVec::new(
                Opts::new(
                    "tfjob_federator_jobs",
                    "TensorFlowTrainingJobs by the phase their status was last written with."
                ),
                &["phase"]
            )?),
            jobs_waiting: register!(IntGauge::new(
                "tfjob_federator_jobs_waiting_for_capacity",
                "Jobs that asked for a placement and have none yet."
            )?),
            jobs_starting: register!(IntGaugeVec::new(
                Opts::new(
                    "tfjob_federator_jobs_starting",
                    "Jobs at the start gate: starting (placement, creates) or queued behind them."
                ),
                &["state"]
            )?),
            submit_to_running: register!(Histogram::with_opts(
                HistogramOpts::new(
                    "tfjob_federator_job_submit_to_running_seconds",
                    "Time from a job's creation until all its replicas run."
                )
                .buckets(job_buckets.clone())
            )?),
            submit_to_pods_created: register!(Histogram::with_opts(
                HistogramOpts::new(
                    "tfjob_federator_job_submit_to_pods_created_seconds",
                    "Time from a job's creation until every replica's pod exists."
                )
                .buckets(job_buckets)
            )?),
            completions: register!(IntCounterVec::new(
                Opts::new(
                    "tfjob_federator_job_completions_total",
                    "Jobs that ended, by outcome (succeeded or failed)."
                ),
                &["outcome"]
            )?),
            restarts: register!(IntCounterVec::new(
                Opts::new(
                    "tfjob_federator_replica_restarts_total",
                    "Replica restarts decided, by how the pod ended."
                ),
                &["reason"]
            )?),
            replicas: register!(IntGaugeVec::new(
                Opts::new(
                    "tfjob_federator_replicas",
                    "Replicas of live jobs, by cluster and phase."
                ),
                &["cluster", "phase"]
            )?),
            placement_attempts: register!(IntCounterVec::new(
                Opts::new(
                    "tfjob_federator_placement_attempts_total",
                    "Placement decisions tried, by outcome."
                ),
                &["outcome"]
            )?),
            placement_duration: register!(Histogram::with_opts(
                HistogramOpts::new(
                    "tfjob_federator_placement_duration_seconds",
                    "Time one placement decision takes."
                )
                // 1-2.5-5 steps, so that 5 ms (issue 14's target) is an edge.
                .buckets(vec![
                    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0,
                ])
            )?),
            cluster_ready: register!(IntGaugeVec::new(
                Opts::new(
                    "tfjob_federator_cluster_ready",
                    "Whether a target cluster answers its health probe (1) or not (0)."
                ),
                &["cluster"]
            )?),
            cluster_allocatable: register!(GaugeVec::new(
                Opts::new(
                    "tfjob_federator_cluster_allocatable",
                    "Allocatable resources of a target cluster's schedulable Ready nodes, in base units."
                ),
                &["cluster", "resource", "unit"]
            )?),
            cluster_free: register!(GaugeVec::new(
                Opts::new(
                    "tfjob_federator_cluster_free",
                    "Free resources of a target cluster (allocatable minus active pods' requests), in base units."
                ),
                &["cluster", "resource", "unit"]
            )?),
            api_requests: register!(IntCounterVec::new(
                Opts::new(
                    "tfjob_federator_api_requests_total",
                    "Kubernetes API requests, by cluster, verb, resource (with subresource) and HTTP status code (error: no response)."
                ),
                &["cluster", "verb", "resource", "code"]
            )?),
            api_duration: register!(HistogramVec::new(
                HistogramOpts::new(
                    "tfjob_federator_api_request_duration_seconds",
                    "Time until a Kubernetes API request's response headers arrive, by cluster and verb."
                )
                .buckets(vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
                &["cluster", "verb"]
            )?),
            actors: register!(IntGaugeVec::new(
                Opts::new("tfjob_federator_actors", "Live actors, by kind."),
                &["kind"]
            )?),
            message_duration: register!(HistogramVec::new(
                HistogramOpts::new(
                    "tfjob_federator_actor_message_duration_seconds",
                    "Time an actor takes to handle one message, by kind."
                )
                .buckets(fast_buckets),
                &["kind"]
            )?),
            mailbox_drops: register!(IntCounterVec::new(
                Opts::new(
                    "tfjob_federator_actor_mailbox_drops_total",
                    "Messages lost because the receiving actor had stopped, by its kind."
                ),
                &["kind"]
            )?),
            status_writes: register!(IntCounter::new(
                "tfjob_federator_status_writes_total",
                "Job status writes that succeeded."
            )?),
            registry,
        };
        // Series with a bounded set of values exist from the start, so that
        // rates see their first increase.
        for phase in JobPhase::ALL {
            metrics.jobs.with_label_values(&[phase.as_str()]);
        }
        for outcome in [OUTCOME_SUCCEEDED, OUTCOME_FAILED] {
            metrics.completions.with_label_values(&[outcome]);
        }
        for reason in RESTART_REASONS {
            metrics.restarts.with_label_values(&[reason]);
        }
        for outcome in PlacementOutcome::ALL {
            metrics
                .placement_attempts
                .with_label_values(&[outcome.as_str()]);
        }
        for kind in ActorKind::ALL {
            metrics.actors.with_label_values(&[kind.as_str()]);
            metrics.mailbox_drops.with_label_values(&[kind.as_str()]);
        }
        Ok(metrics)
    }

    /// Everything, in the Prometheus text format.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    /// Job status writes that succeeded so far.
    pub fn status_writes(&self) -> u64 {
        self.status_writes.get()
    }

    /// Counts an actor of `kind` until the returned value is dropped.
    pub fn alive(self: &Arc<Self>, kind: ActorKind) -> Alive {
        self.actors.with_label_values(&[kind.as_str()]).inc();
        Alive {
            metrics: self.clone(),
            kind,
        }
    }

    /// A job actor's entry: the actor, and its job under `phase` (as stored).
    pub fn job_census(self: &Arc<Self>, phase: Option<JobPhase>) -> JobCensus {
        let census = JobCensus {
            alive: self.alive(ActorKind::Job),
            phase: Mutex::new(None),
        };
        census.show(phase);
        census
    }

    /// A replica actor's entry: the actor, and its replica on `cluster`.
    pub fn replica_census(self: &Arc<Self>, cluster: &str) -> ReplicaCensus {
        ReplicaCensus {
            alive: self.alive(ActorKind::Replica),
            cluster: cluster.to_string(),
            phase: Mutex::new(None),
        }
    }

    /// Every replica of the job has a pod for the first time (the job's
    /// machine says when: not again after a pause or a controller restart).
    pub fn job_pods_created(&self, job: &TensorFlowTrainingJob) {
        if let Some(seconds) = since_submission(job, jiff::Timestamp::now()) {
            self.submit_to_pods_created.observe(seconds);
        }
    }

    /// The job's phase turns Running from `previous`; a resumed job does
    /// not count (its submission is long past).
    pub fn job_running(&self, job: &TensorFlowTrainingJob, previous: Option<JobPhase>) {
        if matches!(previous, None | Some(JobPhase::Pending))
            && let Some(seconds) = since_submission(job, jiff::Timestamp::now())
        {
            self.submit_to_running.observe(seconds);
        }
    }

    /// A restart was decided for a replica whose pod ended like `ended`.
    pub fn replica_restarted(&self, ended: &ReplicaView) {
        self.restarts
            .with_label_values(&[restart_reason(ended)])
            .inc();
    }

    pub fn placement_decided(&self, took: Duration, outcome: PlacementOutcome) {
        self.placement_duration.observe(took.as_secs_f64());
        self.placement_attempts
            .with_label_values(&[outcome.as_str()])
            .inc();
    }

    pub fn jobs_waiting(&self, count: usize) {
        self.jobs_waiting
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The start gate: jobs starting, and jobs queued to start.
    pub fn jobs_starting(&self, starting: usize, queued: usize) {
        for (state, count) in [("starting", starting), ("queued", queued)] {
            self.jobs_starting
                .with_label_values(&[state])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// A target cluster's probe result, with its capacity when it answered
    /// (otherwise the last known capacity stays, as in the MemberCluster status).
    pub fn cluster_probed(&self, cluster: &str, ready: bool, capacity: Option<&Capacity>) {
        self.cluster_ready
            .with_label_values(&[cluster])
            .set(i64::from(ready));
        let Some(capacity) = capacity else { return };
        for resource in capacity::REPORTED {
            let labels = [cluster, resource, unit_of(resource)];
            let of =
                |r: &crate::placement::Resources| base_units(r.get(resource).copied().unwrap_or(0));
            self.cluster_allocatable
                .with_label_values(&labels)
                .set(of(&capacity.allocatable));
            self.cluster_free
                .with_label_values(&labels)
                .set(of(&capacity.free));
        }
    }

    /// The cluster is no longer a member: its series go.
    pub fn cluster_removed(&self, cluster: &str) {
        // Absent series are fine: the cluster may never have been probed.
        let _ = self.cluster_ready.remove_label_values(&[cluster]);
        for resource in capacity::REPORTED {
            let labels = [cluster, resource, unit_of(resource)];
            let _ = self.cluster_allocatable.remove_label_values(&labels);
            let _ = self.cluster_free.remove_label_values(&labels);
        }
    }

    pub fn api_request(
        &self,
        cluster: &str,
        verb: &str,
        resource: &str,
        code: &str,
        took: Duration,
    ) {
        self.api_requests
            .with_label_values(&[cluster, verb, resource, code])
            .inc();
        self.api_duration
            .with_label_values(&[cluster, verb])
            .observe(took.as_secs_f64());
    }

    /// Times one message handler: observed when the returned timer drops.
    pub fn handling(&self, kind: ActorKind) -> HistogramTimer {
        self.message_duration
            .with_label_values(&[kind.as_str()])
            .start_timer()
    }

    pub fn mailbox_dropped(&self, kind: ActorKind) {
        self.mailbox_drops.with_label_values(&[kind.as_str()]).inc();
    }
}

/// One live actor, counted in `tfjob_federator_actors` until dropped (with
/// the actor that holds it).
pub struct Alive {
    metrics: Arc<Metrics>,
    kind: ActorKind,
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.metrics
            .actors
            .with_label_values(&[self.kind.as_str()])
            .dec();
    }
}

/// A job actor in the census: the actor, and its job by the phase its
/// status was last written with; both leave the counts with the actor.
pub struct JobCensus {
    alive: Alive,
    phase: Mutex<Option<JobPhase>>,
}

impl JobCensus {
    /// A status write succeeded: `before` was stored until now, `after` is.
    pub fn written(
        &self,
        before: Option<&TensorFlowTrainingJobStatus>,
        after: &TensorFlowTrainingJobStatus,
    ) {
        let metrics = &self.alive.metrics;
        metrics.status_writes.inc();
        if let Some(outcome) = completion(before.and_then(|s| s.phase), after.phase) {
            metrics.completions.with_label_values(&[outcome]).inc();
        }
        self.show(after.phase);
    }

    fn show(&self, phase: Option<JobPhase>) {
        let mut shown = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let label = |p: Option<JobPhase>| p.map(|p| [p.as_str()]);
        moved(
            &self.alive.metrics.jobs,
            label(*shown).as_ref().map(|l| &l[..]),
            label(phase).as_ref().map(|l| &l[..]),
        );
        *shown = phase;
    }
}

impl Drop for JobCensus {
    fn drop(&mut self) {
        self.show(None);
    }
}

/// A replica actor in the census: the actor, and its replica by cluster and
/// phase as last reported; both leave the counts with the actor.
pub struct ReplicaCensus {
    alive: Alive,
    cluster: String,
    phase: Mutex<Option<ReplicaPhase>>,
}

impl ReplicaCensus {
    pub fn show(&self, phase: ReplicaPhase) {
        self.set(Some(phase));
    }

    fn set(&self, phase: Option<ReplicaPhase>) {
        let mut shown = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let label = |p: Option<ReplicaPhase>| p.map(|p| [self.cluster.as_str(), p.as_str()]);
        moved(
            &self.alive.metrics.replicas,
            label(*shown).as_ref().map(|l| &l[..]),
            label(phase).as_ref().map(|l| &l[..]),
        );
        *shown = phase;
    }
}

impl Drop for ReplicaCensus {
    fn drop(&mut self) {
        self.set(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ReplicaKey, ReplicaType};
    use serde_json::json;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new().expect("the metrics register"))
    }

    fn status(phase: Option<JobPhase>) -> TensorFlowTrainingJobStatus {
        TensorFlowTrainingJobStatus {
            phase,
            ..Default::default()
        }
    }

    fn ended(phase: ReplicaPhase, exit_code: Option<i32>) -> ReplicaView {
        let mut view = ReplicaView::creating(
            ReplicaKey {
                replica_type: ReplicaType::Worker,
                index: 0,
            },
            "j-worker-0".into(),
            None,
        );
        view.phase = phase;
        view.exit_code = exit_code;
        view
    }

    #[test]
    fn every_metric_has_help_and_only_counters_end_in_total() {
        let text = metrics().encode().expect("encodes");
        let mut types = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("name and type");
                assert!(name.starts_with("tfjob_federator_"), "{name}");
                assert_eq!(
                    name.ends_with("_total"),
                    kind == "counter",
                    "{name} is a {kind}"
                );
                assert!(text.contains(&format!("# HELP {name} ")), "{name} has help");
                types.push(name.to_string());
            }
        }
        assert!(types.contains(&"tfjob_federator_build_info".to_string()));
        assert!(text.contains(&format!(
            "tfjob_federator_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(text.contains("tfjob_federator_jobs{phase=\"Failed\"} 0"));
    }

    #[test]
    fn a_job_counts_under_its_written_phase_and_completes_once() {
        let m = metrics();
        let census = m.job_census(None);
        assert_eq!(m.actors.with_label_values(&["job"]).get(), 1);
        census.written(None, &status(Some(JobPhase::Pending)));
        census.written(
            Some(&status(Some(JobPhase::Pending))),
            &status(Some(JobPhase::Running)),
        );
        assert_eq!(m.jobs.with_label_values(&["Pending"]).get(), 0);
        assert_eq!(m.jobs.with_label_values(&["Running"]).get(), 1);
        census.written(
            Some(&status(Some(JobPhase::Running))),
            &status(Some(JobPhase::Failed)),
        );
        // A later write of the same terminal status (details) is no second completion.
        census.written(
            Some(&status(Some(JobPhase::Failed))),
            &status(Some(JobPhase::Failed)),
        );
        assert_eq!(m.completions.with_label_values(&["failed"]).get(), 1);
        assert_eq!(m.completions.with_label_values(&["succeeded"]).get(), 0);
        assert_eq!(m.status_writes(), 4);
        drop(census);
        assert_eq!(m.jobs.with_label_values(&["Failed"]).get(), 0);
        assert_eq!(m.actors.with_label_values(&["job"]).get(), 0);
    }

    #[test]
    fn a_job_already_ended_when_adopted_is_no_completion() {
        let m = metrics();
        let census = m.job_census(Some(JobPhase::Succeeded));
        assert_eq!(m.jobs.with_label_values(&["Succeeded"]).get(), 1);
        census.written(
            Some(&status(Some(JobPhase::Succeeded))),
            &status(Some(JobPhase::Succeeded)),
        );
        assert_eq!(m.completions.with_label_values(&["succeeded"]).get(), 0);
    }

    #[test]
    fn replicas_count_by_cluster_and_phase_while_their_actor_lives() {
        let m = metrics();
        let a = m.replica_census("member-1");
        let b = m.replica_census("member-1");
        a.show(ReplicaPhase::Creating);
        a.show(ReplicaPhase::Running);
        b.show(ReplicaPhase::Running);
        assert_eq!(
            m.replicas.with_label_values(&["member-1", "Running"]).get(),
            2
        );
        assert_eq!(
            m.replicas
                .with_label_values(&["member-1", "Creating"])
                .get(),
            0
        );
        drop(a);
        assert_eq!(
            m.replicas.with_label_values(&["member-1", "Running"]).get(),
            1
        );
        assert_eq!(m.actors.with_label_values(&["replica"]).get(), 1);
    }

    #[test]
    fn restart_reasons_name_the_signal_or_the_failure() {
        assert_eq!(
            restart_reason(&ended(ReplicaPhase::Succeeded, Some(0))),
            "Completed"
        );
        assert_eq!(
            restart_reason(&ended(ReplicaPhase::Failed, Some(137))),
            "Killed"
        );
        assert_eq!(
            restart_reason(&ended(ReplicaPhase::Failed, Some(143))),
            "Terminated"
        );
        assert_eq!(
            restart_reason(&ended(ReplicaPhase::Failed, Some(1))),
            "Error"
        );
        assert_eq!(
            restart_reason(&ended(ReplicaPhase::Failed, None)),
            "Unknown"
        );
        for code in [130, 137, 138, 143, 1] {
            let reason = restart_reason(&ended(ReplicaPhase::Failed, Some(code)));
            assert!(
                RESTART_REASONS.contains(&reason),
                "{reason} is pre-declared"
            );
        }
    }

    #[test]
    fn latencies_count_from_submission() {
        let m = metrics();
        let created = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3);
        let job: TensorFlowTrainingJob = serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
            "metadata": {"name": "j", "creationTimestamp": created.to_string()},
            "spec": {"replicaSpecs": []}}))
        .expect("a job");
        m.job_running(&job, Some(JobPhase::Pending));
        m.job_running(&job, Some(JobPhase::Resuming));
        assert_eq!(m.submit_to_running.get_sample_count(), 1);
        assert!(m.submit_to_running.get_sample_sum() >= 3.0);
        m.job_pods_created(&job);
        assert_eq!(m.submit_to_pods_created.get_sample_count(), 1);
    }

    #[test]
    fn cluster_capacity_is_exported_in_base_units() {
        let m = metrics();
        let capacity = Capacity {
            nodes: Vec::new(),
            allocatable: [
                ("cpu".to_string(), 64_000),
                ("memory".to_string(), 2 * (1 << 30) * 1000),
                ("nvidia.com/gpu".to_string(), 8_000),
            ]
            .into(),
            free: [
                ("cpu".to_string(), 1_500),
                ("nvidia.com/gpu".to_string(), -1),
            ]
            .into(),
        };
        m.cluster_probed("member-1", true, Some(&capacity));
        let free = |r: &str, u: &str| m.cluster_free.with_label_values(&["member-1", r, u]).get();
        let alloc = |r: &str, u: &str| {
            m.cluster_allocatable
                .with_label_values(&["member-1", r, u])
                .get()
        };
        assert_eq!(alloc("cpu", "core"), 64.0);
        assert_eq!(alloc("memory", "byte"), 2.0 * (1u64 << 30) as f64);
        assert_eq!(alloc("nvidia.com/gpu", "device"), 8.0);
        assert_eq!(free("cpu", "core"), 1.5);
        assert_eq!(free("nvidia.com/gpu", "device"), 0.0, "never negative");
        m.cluster_probed("member-1", false, None);
        assert_eq!(m.cluster_ready.with_label_values(&["member-1"]).get(), 0);
        assert_eq!(free("cpu", "core"), 1.5, "the last known capacity stays");
        m.cluster_removed("member-1");
        let text = m.encode().expect("encodes");
        assert!(!text.contains("member-1"), "{text}");
    }

    #[test]
    fn placement_outcomes_tell_short_capacity_from_no_eligible_cluster() {
        let waiting: Result<(), Unplaceable> = Err(Unplaceable {
            reasons: Default::default(),
            eligible: 2,
            unknown: Vec::new(),
        });
        let nowhere: Result<(), Unplaceable> = Err(Unplaceable {
            reasons: Default::default(),
            eligible: 0,
            unknown: Vec::new(),
        });
        assert_eq!(
            PlacementOutcome::of(&Ok::<(), Unplaceable>(())),
            PlacementOutcome::Placed
        );
        assert_eq!(PlacementOutcome::of(&waiting), PlacementOutcome::Waiting);
        assert_eq!(
            PlacementOutcome::of(&nowhere),
            PlacementOutcome::Unplaceable
        );
    }
}
