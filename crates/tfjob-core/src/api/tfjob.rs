//! `TensorFlowTrainingJob` (`batch.tensorstack.dev/v1beta1`, namespaced): every
//! field of the TensorStack API reference plus our multi-cluster extension
//! `spec.scheduler.federation` and `status.tasks[].replicaStatus[].cluster`.
//!
//! Decisions:
//! - Values a user may get wrong (`replicaSpecs[].type`, `restartPolicy`,
//!   `runPolicy.cleanUpPolicy`, `federation.strategy`) are plain strings here,
//!   with typed parsers (`ReplicaType::parse`, …), and numbers are plain
//!   integers. The CRD's enums and bounds (`super::rules`) refuse most
//!   mistakes at the door; one that gets past them (a job stored before the
//!   rules, a case-insensitive `cleanUpPolicy`) still reaches
//!   [`crate::validation`], which fails the job with a precise message,
//!   instead of failing deserialization (which would hide the job from the
//!   controller).
//! - `runMode.debug` and `runMode.pause` accept both `enabled` (current docs)
//!   and `enable` (older API reference). They are two schema properties, not a
//!   serde alias, because the API server prunes fields its schema lacks.
//!   `enabled` wins when both are set (validation rejects a conflict).
//! - The pod `template` is stored with `x-kubernetes-preserve-unknown-fields`
//!   instead of the full `PodTemplateSpec` schema (hundreds of kilobytes,
//!   past what client-side `kubectl apply` can annotate). So the API server
//!   does not type-check it, and [`PodTemplate`] keeps it as raw JSON, parsed
//!   on use: a malformed template (say `containerPort: "2222"`) becomes a
//!   validation error naming the field instead of making the whole job
//!   unreadable to the controller.
//! - Status enums (`JobPhase`, `ReplicaPhase`, `ConditionStatus`) fall back to
//!   `Unknown` for values they do not know, so a status written by another
//!   version never makes the job unreadable.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// The name of the main container every replica template must contain.
pub const TENSORFLOW_CONTAINER: &str = "tensorflow";

/// The most replicas of one type a job may have: one job asking for
/// millions must not exhaust the controller (each replica costs an actor,
/// a pod and a service).
pub const MAX_REPLICAS: i32 = 1000;

/// The command debug-mode pods run unless `runMode.debug.replicaSpecs` names one.
pub const DEFAULT_DEBUG_COMMAND: [&str; 2] = ["sleep", "inf"];

/// Runs a distributed TensorFlow training: replicas of types chief, worker,
/// ps and evaluator, placed on one or several clusters.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "batch.tensorstack.dev",
    version = "v1beta1",
    kind = "TensorFlowTrainingJob",
    plural = "tensorflowtrainingjobs",
    namespaced,
    status = "TensorFlowTrainingJobStatus",
    derive = "PartialEq",
    shortname = "tftj",
    category = "t9k",
    doc = "TensorFlowTrainingJob runs a distributed TensorFlow training job.",
    // Raw JSON columns: the structured `printcolumn(...)` form repeats
    // attribute names, which clippy's duplicated_attributes lint rejects.
    printcolumn = r#"{"name":"Phase","type":"string","description":"The phase of the job","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Running","type":"integer","description":"Replicas running now","jsonPath":".status.aggregate.running"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"integer","description":"Replicas that exited 0","jsonPath":".status.aggregate.succeeded","priority":1}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","description":"Replicas that exited non-zero","jsonPath":".status.aggregate.failed","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["replicaSpecs"]))]
pub struct TensorFlowTrainingJobSpec {
    /// Describes the spec of the replicas of the job.
    #[serde(default)]
    pub replica_specs: Vec<ReplicaSpec>,
    /// Job's execution behavior. If omitted, defaults to Immediate mode, and
    /// tasks are executed immediately upon submission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<RunMode>,
    /// Describes the Tensorboard to be created for showing training logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard_spec: Option<TensorBoardSpec>,
    /// Execution policy configurations governing the behavior of the
    /// TensorFlowTrainingJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    /// Identifies the preferred scheduler for allocating resources to
    /// replicas. Defaults to cluster default scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulePolicy>,
}

/// ReplicaSpec describes the spec of a replica.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["type", "template"]))]
pub struct ReplicaSpec {
    /// ReplicaType is the type of the replica, one of "chief", "worker", "ps",
    /// or "evaluator".
    #[serde(rename = "type", default)]
    pub replica_type: String,
    /// The desired number of replicas created for the current replica type.
    /// If unspecified, defaults to 1.
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    /// Describes the pod that will be created for this replica. Note that
    /// RestartPolicy in PodTemplateSpec will always be set to Never as the job
    /// controller will create new pods if restart is required.
    #[serde(default)]
    #[schemars(schema_with = "schema::preserved_object")]
    pub template: PodTemplate,
    /// The restart policy for this replica, one of Always, OnFailure, Never,
    /// or ExitCode. Defaults to Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

fn default_replicas() -> i32 {
    1
}

/// A pod template as the user wrote it, kept as its JSON text and parsed on
/// use. Text, not a JSON tree: a tree takes several times its text's
/// memory, and every live job keeps its templates (the heap profile of (d)
/// in docs/src/benchmarks/controller.md). The text is the tree's
/// serialization (keys sorted, compact), so it reads back as the same JSON
/// and equal templates have equal text; shared, so the job machine's copies
/// of the replicaSpecs cost no second template.
#[derive(Clone, Debug, PartialEq)]
pub struct PodTemplate(Arc<str>);

impl Default for PodTemplate {
    fn default() -> Self {
        PodTemplate("{}".into())
    }
}

/// Why a pod template does not parse: the field (relative to the template,
/// e.g. `spec.containers[0].ports[0].containerPort`) and the problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TemplateError {
    pub path: String,
    pub message: String,
}

impl PodTemplate {
    /// Wraps a template given as JSON.
    pub fn from_value(value: &serde_json::Value) -> PodTemplate {
        PodTemplate(value.to_string().into())
    }

    /// The template's JSON text.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// The template as a `PodTemplateSpec` (`null` counts as empty).
    pub fn parse(&self) -> Result<PodTemplateSpec, TemplateError> {
        if &*self.0 == "null" {
            return Ok(PodTemplateSpec::default());
        }
        // Straight from the text when it reads; when it does not, again
        // from the tree, whose error names the field and not a column.
        if let Ok(template) = serde_json::from_str(&self.0) {
            return Ok(template);
        }
        let tree: serde_json::Value = serde_json::from_str(&self.0).map_err(|e| TemplateError {
            path: String::new(),
            message: e.to_string(),
        })?;
        serde_path_to_error::deserialize(tree).map_err(|e| TemplateError {
            path: e.path().to_string(),
            message: e.inner().to_string(),
        })
    }
}

impl Serialize for PodTemplate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Through the tree, so that any serializer (not only serde_json's)
        // writes the template as JSON.
        let tree: serde_json::Value =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        tree.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PodTemplate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(deserializer).map(|tree| PodTemplate::from_value(&tree))
    }
}

/// Job's execution behavior: immediate (neither set), debug or pause.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunMode {
    /// Debug mode: the environment is deployed but training does not start;
    /// replicas run a debug command and their failures never fail the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<DebugMode>,
    /// Pause mode: replicas are deleted (or never created) until pause is
    /// disabled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseMode>,
}

/// Debug mode settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DebugMode {
    /// Whether debug mode is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Older spelling of `enabled`, accepted for compatibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Per replica type debug settings; types not listed use the defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_specs: Vec<DebugReplicaSpec>,
}

/// Debug settings for one replica type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["type"]))]
pub struct DebugReplicaSpec {
    /// The replica type these settings apply to.
    #[serde(rename = "type", default)]
    pub replica_type: String,
    /// Leave out the pod's init containers. Defaults to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_init_container: bool,
    /// The command the main container runs instead of training. Defaults to
    /// `sleep inf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
}

/// Pause mode settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseMode {
    /// Whether the job is paused. May change at any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Older spelling of `enabled`, accepted for compatibility.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// How each replica type restarts when the job resumes. May not change
    /// after the job is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resume_specs: Vec<ResumeSpec>,
}

/// How one replica type restarts after a pause.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["type"]))]
pub struct ResumeSpec {
    /// The replica type these settings apply to.
    #[serde(rename = "type", default)]
    pub replica_type: String,
    /// Leave out the pod's init containers. Defaults to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_init_container: bool,
    /// The main container's command on resume; defaults to the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The main container's args on resume; default to the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
}

/// The TensorBoard to create for showing training logs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["trainingLogFilesets"]))]
pub struct TensorBoardSpec {
    /// Where the training logs are, e.g. `t9k://pvc/<pvc>/<path>`.
    #[serde(default)]
    pub training_log_filesets: Vec<String>,
    /// The TensorBoard image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Compute resources of the TensorBoard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::resource_requirements")]
    pub resources: Option<ResourceRequirements>,
}

/// RunPolicy encapsulates various runtime policies of the distributed training
/// job, for example how to clean up resources and how long the job can stay
/// active.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Specifies the duration in seconds relative to the startTime that the
    /// job may be active before the system tries to terminate it; value must
    /// be positive integer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Optional number of retries before marking this job failed; one budget
    /// shared by all replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Clean the tasks after the training job finished: all, unfinished
    /// (default) or none, in any letter case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_up_policy: Option<String>,
}

/// Identifies the preferred scheduler and, with several clusters, how the
/// replicas are placed on them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulePolicy {
    /// Use T9k Scheduler (gang scheduling through a PodGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t9k_scheduler: Option<T9kScheduler>,
    /// Multi-cluster placement (tfjob-federator extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation: Option<FederationPolicy>,
}

/// T9k Scheduler settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = |s: &mut schemars::Schema| schema::require(s, &["queue"]))]
pub struct T9kScheduler {
    /// The queue the job's PodGroup joins.
    #[serde(default)]
    pub queue: String,
    /// Priority within the queue, 0–100. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// How the job's replicas are placed on member clusters (tfjob-federator
/// extension). Placement is all-or-nothing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FederationPolicy {
    /// Pack (fill as few clusters as possible, the default), Spread (spread
    /// replicas evenly) or Weighted (divide by `weights`).
    #[serde(default = "default_strategy")]
    pub strategy: String,
    /// Only clusters whose MemberCluster labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::label_selector")]
    pub cluster_selector: Option<LabelSelector>,
    /// Only these clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Relative share of replicas per cluster for the Weighted strategy.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub weights: BTreeMap<String, i32>,
    /// Whether one job may span several clusters. Defaults to true.
    #[serde(default = "default_true")]
    pub allow_split: bool,
    /// What losing a member cluster re-places: `Job` (the default: the
    /// whole job, under a new placement epoch) or `LostReplicas` (only the
    /// replicas that ran there, when none of them is the chief or a ps;
    /// docs/src/placement/failover.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<String>,
}

impl Default for FederationPolicy {
    fn default() -> Self {
        FederationPolicy {
            strategy: default_strategy(),
            cluster_selector: None,
            cluster_names: Vec::new(),
            weights: BTreeMap::new(),
            allow_split: true,
            failover: None,
        }
    }
}

fn default_strategy() -> String {
    FederationStrategy::Pack.as_str().to_string()
}

fn default_true() -> bool {
    true
}

/// TensorFlowTrainingJobStatus defines the observed state of
/// TensorFlowTrainingJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TensorFlowTrainingJobStatus {
    /// The statuses of individual tasks (one per replica type).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskStatus>,
    /// The status of tensorboard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorboard: Option<DependentStatus>,
    /// The number of restarts being performed.
    #[serde(default)]
    pub backoff_count: i32,
    /// Replica counts by phase.
    #[serde(default)]
    pub aggregate: Aggregate,
    /// Represents the latest available observations of a
    /// TensorFlowTrainingJob's current state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    /// Phase is the phase-style status of the TensorFlowTrainingJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// When the current active span began: the job's pods were first
    /// created after placement, or after a resume. `activeDeadlineSeconds`
    /// counts from here; absent while paused or not yet started (ours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub start_time: Option<Time>,
    /// Where the replicas are placed (ours): written before any pod of a
    /// new placement is created and before any teardown of an old one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementRecord>,
    /// The controller's seal of this status (ours): a status whose seal
    /// does not verify was not written by the controller, and nothing is
    /// decided from it (see docs/src/operations/trust.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// The job's placement as recorded in its status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// The placement epoch: it goes up whenever the job's replicas are
    /// replaced (failover, pause, a run-mode switch), as a whole or, in a
    /// partial failover, some of them. Pods carry their replica's epoch as
    /// their `federation.tfjob.io/placement-epoch` label.
    #[schemars(schema_with = "schema::counter")]
    pub epoch: u64,
    /// Each replica's cluster (`worker-0: member-1`); absent while the job
    /// waits for a placement or is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment: Option<BTreeMap<String, String>>,
    /// The digest of the `replicaSpecs` the job started with: their text
    /// (the annotation `federation.tfjob.io/replica-specs`) is used only if
    /// it has this digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_specs_digest: Option<String>,
    /// The epoch of each replica whose pod is older than `epoch`: those
    /// that kept their pod through a partial failover
    /// (`failover: LostReplicas`), which moved only the others. A replica
    /// not named here is of `epoch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_epochs: Option<BTreeMap<String, u64>>,
    /// Seconds the job was active in its current span before the span's
    /// latest failover (a pause ends a span): `activeDeadlineSeconds` counts
    /// them with the time since `startTime`, so the time a failed-over job
    /// waits for its new placement does not count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::counter")]
    pub active_seconds: Option<u64>,
}

/// The status of the replicas of one type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The replica type.
    #[serde(rename = "type")]
    pub replica_type: String,
    /// The sum of restarts of the replicas of this type.
    #[serde(default)]
    pub restart_count: i32,
    /// One entry per replica.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replica_status: Vec<ReplicaStatus>,
}

/// The status of one replica (its current pod).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The pod name, `<job>-<type>-<index>`.
    pub name: String,
    /// The pod UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// The replica phase: a pod phase, Creating or Deleted.
    pub phase: ReplicaPhase,
    /// The pod's container states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerStatus>,
    /// The member cluster the replica runs on (tfjob-federator extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

/// The state of one container of a replica's pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container name.
    pub name: String,
    /// Waiting, Running or Terminated, with the reason when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The exit code once terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// The status of an object the job depends on (the TensorBoard).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependentStatus {
    /// What the controller last did about the dependent (e.g. NOP, Create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The dependent object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependent: Option<DependentReference>,
    /// A human-readable note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Whether the dependent is ready.
    #[serde(default)]
    pub ready: bool,
    /// A machine-readable reason, e.g. DependentReady.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Normal or Warning.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub status_type: Option<String>,
}

/// A reference to a dependent object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DependentReference {
    /// API version of the dependent.
    pub api_version: String,
    /// Kind of the dependent.
    pub kind: String,
    /// Name of the dependent.
    pub name: String,
    /// Namespace of the dependent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// UID of the dependent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// Replica counts by phase.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Aggregate {
    /// Replicas whose pod is being created.
    #[serde(default)]
    pub creating: i32,
    /// Replicas whose pod is pending.
    #[serde(default)]
    pub pending: i32,
    /// Replicas whose pod is running.
    #[serde(default)]
    pub running: i32,
    /// Replicas whose pod exited 0.
    #[serde(default)]
    pub succeeded: i32,
    /// Replicas whose pod exited non-zero.
    #[serde(default)]
    pub failed: i32,
    /// Replicas whose pod state is unknown.
    #[serde(default)]
    pub unknown: i32,
    /// Replicas whose pod was deleted.
    #[serde(default)]
    pub deleted: i32,
}

/// One observation of the job's state.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// Initialized, Running, ReplicaFailure, Completed, Failed or Paused.
    #[serde(rename = "type")]
    pub condition_type: JobConditionType,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_transition_time: Option<Time>,
    /// When the condition was last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_update_time: Option<Time>,
    /// A machine-readable reason for the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A human-readable message about the last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The kinds of job conditions.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum JobConditionType {
    Initialized,
    Running,
    ReplicaFailure,
    Completed,
    Failed,
    Paused,
}

/// A condition's status.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[serde(other)]
    Unknown,
}

/// The phase of a job. Succeeded and Failed are terminal.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum JobPhase {
    Pending,
    Running,
    Paused,
    Resuming,
    Succeeded,
    Failed,
    #[serde(other)]
    Unknown,
}

impl JobPhase {
    pub const ALL: [JobPhase; 7] = [
        JobPhase::Pending,
        JobPhase::Running,
        JobPhase::Paused,
        JobPhase::Resuming,
        JobPhase::Succeeded,
        JobPhase::Failed,
        JobPhase::Unknown,
    ];

    /// Whether the phase is final: a terminal phase never changes.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobPhase::Succeeded | JobPhase::Failed)
    }

    /// The name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            JobPhase::Pending => "Pending",
            JobPhase::Running => "Running",
            JobPhase::Paused => "Paused",
            JobPhase::Resuming => "Resuming",
            JobPhase::Succeeded => "Succeeded",
            JobPhase::Failed => "Failed",
            JobPhase::Unknown => "Unknown",
        }
    }
}

/// The phase of a replica: the pod phases plus Creating and Deleted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ReplicaPhase {
    Creating,
    Pending,
    Running,
    Succeeded,
    Failed,
    Deleted,
    #[serde(other)]
    Unknown,
}

impl ReplicaPhase {
    /// The name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaPhase::Creating => "Creating",
            ReplicaPhase::Pending => "Pending",
            ReplicaPhase::Running => "Running",
            ReplicaPhase::Succeeded => "Succeeded",
            ReplicaPhase::Failed => "Failed",
            ReplicaPhase::Deleted => "Deleted",
            ReplicaPhase::Unknown => "Unknown",
        }
    }
}

/// The replica types of a TensorFlow job, in the order they are listed
/// (chief, worker, ps, evaluator), which is also their `Ord`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReplicaType {
    Chief,
    Worker,
    Ps,
    Evaluator,
}

impl ReplicaType {
    /// Every replica type.
    pub const ALL: [ReplicaType; 4] = [
        ReplicaType::Chief,
        ReplicaType::Worker,
        ReplicaType::Ps,
        ReplicaType::Evaluator,
    ];

    /// The lower-case name used in the spec, object names, labels and TF_CONFIG.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaType::Chief => "chief",
            ReplicaType::Worker => "worker",
            ReplicaType::Ps => "ps",
            ReplicaType::Evaluator => "evaluator",
        }
    }

    /// Parses a spec value; exact lower case only, as the API reference lists.
    pub fn parse(value: &str) -> Option<ReplicaType> {
        ReplicaType::ALL.into_iter().find(|t| t.as_str() == value)
    }
}

impl fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One replica of a job: its type and index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaKey {
    pub replica_type: ReplicaType,
    pub index: i32,
}

impl ReplicaKey {
    pub fn new(replica_type: ReplicaType, index: i32) -> ReplicaKey {
        ReplicaKey {
            replica_type,
            index,
        }
    }

    /// The pod and service name of this replica: `<job>-<type>-<index>`.
    pub fn object_name(&self, job_name: &str) -> String {
        format!("{job_name}-{}-{}", self.replica_type, self.index)
    }
}

impl fmt::Display for ReplicaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.replica_type, self.index)
    }
}

/// A replica's restart policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RestartPolicy {
    #[default]
    Never,
    OnFailure,
    Always,
    /// Restart only on the retryable exit codes 130, 137, 138 and 143.
    ExitCode,
}

impl RestartPolicy {
    /// Every restart policy.
    pub const ALL: [RestartPolicy; 4] = [
        RestartPolicy::Never,
        RestartPolicy::OnFailure,
        RestartPolicy::Always,
        RestartPolicy::ExitCode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Never => "Never",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Always => "Always",
            RestartPolicy::ExitCode => "ExitCode",
        }
    }

    /// Parses a spec value (exact case, as the API reference lists).
    pub fn parse(value: &str) -> Option<RestartPolicy> {
        RestartPolicy::ALL.into_iter().find(|p| p.as_str() == value)
    }
}

/// What to delete once the job ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CleanUpPolicy {
    /// Delete every replica pod.
    All,
    /// Delete the Pending, Running and Unknown pods.
    #[default]
    Unfinished,
    /// Delete nothing (to read logs).
    None,
}

impl CleanUpPolicy {
    /// Every clean-up policy.
    pub const ALL: [CleanUpPolicy; 3] = [
        CleanUpPolicy::All,
        CleanUpPolicy::Unfinished,
        CleanUpPolicy::None,
    ];

    /// The spelling of the API reference (the docs capitalise it; both parse).
    pub fn as_str(self) -> &'static str {
        match self {
            CleanUpPolicy::All => "all",
            CleanUpPolicy::Unfinished => "unfinished",
            CleanUpPolicy::None => "none",
        }
    }

    /// Parses a spec value in any letter case.
    pub fn parse(value: &str) -> Option<CleanUpPolicy> {
        CleanUpPolicy::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(value))
    }
}

/// How replicas are placed on member clusters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FederationStrategy {
    #[default]
    Pack,
    Spread,
    Weighted,
}

impl FederationStrategy {
    /// Every strategy.
    pub const ALL: [FederationStrategy; 3] = [
        FederationStrategy::Pack,
        FederationStrategy::Spread,
        FederationStrategy::Weighted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FederationStrategy::Pack => "Pack",
            FederationStrategy::Spread => "Spread",
            FederationStrategy::Weighted => "Weighted",
        }
    }

    /// Parses a spec value (exact case).
    pub fn parse(value: &str) -> Option<FederationStrategy> {
        FederationStrategy::ALL
            .into_iter()
            .find(|s| s.as_str() == value)
    }
}

/// What losing a member cluster re-places (`spec.scheduler.federation.failover`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailoverScope {
    /// The whole job, under a new placement epoch.
    #[default]
    Job,
    /// Only the replicas on the lost clusters, when none of them holds the
    /// training state (the chief, or a ps); else the whole job.
    LostReplicas,
}

impl FailoverScope {
    /// Every scope.
    pub const ALL: [FailoverScope; 2] = [FailoverScope::Job, FailoverScope::LostReplicas];

    pub fn as_str(self) -> &'static str {
        match self {
            FailoverScope::Job => "Job",
            FailoverScope::LostReplicas => "LostReplicas",
        }
    }

    /// Parses a spec value (exact case).
    pub fn parse(value: &str) -> Option<FailoverScope> {
        FailoverScope::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

/// Which run mode is in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunModeKind {
    /// Replicas train as soon as the job is created (the default).
    Immediate,
    /// Replicas run the debug command.
    Debug,
    /// No replica pods exist.
    Pause,
}

impl ReplicaSpec {
    /// The parsed replica type; `None` when unknown (validation rejects it).
    pub fn parsed_type(&self) -> Option<ReplicaType> {
        ReplicaType::parse(&self.replica_type)
    }

    /// The parsed restart policy, `Never` when unset; `None` when unknown
    /// (validation rejects it).
    pub fn parsed_restart_policy(&self) -> Option<RestartPolicy> {
        match &self.restart_policy {
            Some(value) => RestartPolicy::parse(value),
            None => Some(RestartPolicy::Never),
        }
    }
}

impl DebugMode {
    /// Whether debug mode is on (`enabled`, else the older `enable`).
    pub fn is_enabled(&self) -> bool {
        self.enabled.or(self.enable).unwrap_or(false)
    }

    /// The settings for one replica type, if listed.
    pub fn spec_for(&self, replica_type: ReplicaType) -> Option<&DebugReplicaSpec> {
        self.replica_specs
            .iter()
            .find(|s| s.replica_type == replica_type.as_str())
    }
}

impl PauseMode {
    /// Whether the job is paused (`enabled`, else the older `enable`).
    pub fn is_enabled(&self) -> bool {
        self.enabled.or(self.enable).unwrap_or(false)
    }

    /// The resume settings for one replica type, if listed.
    pub fn resume_spec_for(&self, replica_type: ReplicaType) -> Option<&ResumeSpec> {
        self.resume_specs
            .iter()
            .find(|s| s.replica_type == replica_type.as_str())
    }
}

impl RunPolicy {
    /// The parsed clean-up policy, `Unfinished` when unset; `None` when
    /// unknown (validation rejects it).
    pub fn parsed_clean_up_policy(&self) -> Option<CleanUpPolicy> {
        match &self.clean_up_policy {
            Some(value) => CleanUpPolicy::parse(value),
            None => Some(CleanUpPolicy::Unfinished),
        }
    }
}

impl FederationPolicy {
    /// The parsed strategy; `None` when unknown (validation rejects it).
    pub fn parsed_strategy(&self) -> Option<FederationStrategy> {
        FederationStrategy::parse(&self.strategy)
    }

    /// The parsed failover scope (`Job` when unset); `None` when unknown
    /// (validation rejects it).
    pub fn parsed_failover(&self) -> Option<FailoverScope> {
        self.failover
            .as_deref()
            .map_or(Some(FailoverScope::Job), FailoverScope::parse)
    }
}

impl TensorFlowTrainingJobSpec {
    /// The spec of one replica type (the first, should validation have been
    /// skipped and the type appear twice).
    pub fn replica_spec(&self, replica_type: ReplicaType) -> Option<&ReplicaSpec> {
        self.replica_specs
            .iter()
            .find(|s| s.parsed_type() == Some(replica_type))
    }

    /// Every replica the job asks for, ordered by type (chief, worker, ps,
    /// evaluator) then index. Unknown types and negative counts contribute none.
    pub fn replica_keys(&self) -> Vec<ReplicaKey> {
        ReplicaType::ALL
            .into_iter()
            .flat_map(|t| (0..self.replicas_of(t)).map(move |i| ReplicaKey::new(t, i)))
            .collect()
    }

    /// The number of replicas of one type (0 when the type is absent), at
    /// most [`MAX_REPLICAS`]: nothing is ever sized by an unchecked count
    /// (validation refuses more).
    pub fn replicas_of(&self, replica_type: ReplicaType) -> i32 {
        self.replica_spec(replica_type)
            .map_or(0, |s| s.replicas.clamp(0, MAX_REPLICAS))
    }

    /// The replica whose end decides the job: chief-0 if there is a chief,
    /// else worker-0; `None` when there is neither (validation rejects that).
    pub fn master(&self) -> Option<ReplicaKey> {
        [ReplicaType::Chief, ReplicaType::Worker]
            .into_iter()
            .find(|t| self.replicas_of(*t) > 0)
            .map(|t| ReplicaKey::new(t, 0))
    }

    /// The run mode in effect: pause wins over debug, so a debug job can be
    /// paused too.
    pub fn run_mode_kind(&self) -> RunModeKind {
        let mode = self.run_mode.as_ref();
        if mode
            .and_then(|m| m.pause.as_ref())
            .is_some_and(PauseMode::is_enabled)
        {
            RunModeKind::Pause
        } else if mode
            .and_then(|m| m.debug.as_ref())
            .is_some_and(DebugMode::is_enabled)
        {
            RunModeKind::Debug
        } else {
            RunModeKind::Immediate
        }
    }

    /// The resume specs (empty when there is no pause section).
    pub fn resume_specs(&self) -> &[ResumeSpec] {
        self.run_mode
            .as_ref()
            .and_then(|m| m.pause.as_ref())
            .map_or(&[], |p| p.resume_specs.as_slice())
    }

    /// The T9k Scheduler settings, if the job uses it.
    pub fn t9k_scheduler(&self) -> Option<&T9kScheduler> {
        self.scheduler.as_ref()?.t9k_scheduler.as_ref()
    }

    /// The federation settings, if given.
    pub fn federation(&self) -> Option<&FederationPolicy> {
        self.scheduler.as_ref()?.federation.as_ref()
    }

    /// What losing a member cluster re-places (`Job` when unset or unknown).
    pub fn failover_scope(&self) -> FailoverScope {
        self.federation()
            .and_then(FederationPolicy::parsed_failover)
            .unwrap_or_default()
    }

    /// The clean-up policy (`Unfinished` when unset); `None` when unknown.
    pub fn clean_up_policy(&self) -> Option<CleanUpPolicy> {
        match &self.run_policy {
            Some(policy) => policy.parsed_clean_up_policy(),
            None => Some(CleanUpPolicy::Unfinished),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_from(value: serde_json::Value) -> TensorFlowTrainingJobSpec {
        serde_json::from_value(value).expect("spec parses")
    }

    #[test]
    fn replicas_default_to_one_and_unknown_values_still_parse() {
        let spec = spec_from(json!({"replicaSpecs": [
            {"type": "master", "restartPolicy": "Sometimes", "template": {}},
            {"type": "worker"},
        ]}));
        assert_eq!(spec.replica_specs[0].replicas, 1);
        assert_eq!(spec.replica_specs[0].parsed_type(), None);
        assert_eq!(spec.replica_specs[0].parsed_restart_policy(), None);
        assert_eq!(
            spec.replica_specs[1].parsed_restart_policy(),
            Some(RestartPolicy::Never)
        );
        assert_eq!(
            spec.replica_keys(),
            vec![ReplicaKey::new(ReplicaType::Worker, 0)]
        );
    }

    #[test]
    fn enable_and_enabled_both_work() {
        let spec = spec_from(json!({"replicaSpecs": [], "runMode": {"debug": {"enable": true}}}));
        assert_eq!(spec.run_mode_kind(), RunModeKind::Debug);
        let spec = spec_from(json!({"replicaSpecs": [], "runMode": {
            "debug": {"enabled": true}, "pause": {"enable": true}}}));
        assert_eq!(spec.run_mode_kind(), RunModeKind::Pause);
        let spec = spec_from(json!({"replicaSpecs": [], "runMode": {
            "pause": {"enabled": false, "enable": true}}}));
        assert_eq!(spec.run_mode_kind(), RunModeKind::Immediate);
        // The user's spelling survives a round trip.
        let back = serde_json::to_value(&spec).expect("serializes");
        assert_eq!(
            back["runMode"],
            json!({"pause": {"enabled": false, "enable": true}})
        );
    }

    #[test]
    fn clean_up_policy_parses_in_any_case() {
        for (value, expected) in [
            ("all", CleanUpPolicy::All),
            ("All", CleanUpPolicy::All),
            ("UNFINISHED", CleanUpPolicy::Unfinished),
            ("None", CleanUpPolicy::None),
        ] {
            assert_eq!(CleanUpPolicy::parse(value), Some(expected), "{value}");
        }
        assert_eq!(CleanUpPolicy::parse("some"), None);
        assert_eq!(
            TensorFlowTrainingJobSpec::default().clean_up_policy(),
            Some(CleanUpPolicy::Unfinished)
        );
    }

    #[test]
    fn master_is_chief_else_worker_zero() {
        let spec = spec_from(json!({"replicaSpecs": [
            {"type": "worker", "replicas": 2}, {"type": "chief"}]}));
        assert_eq!(spec.master(), Some(ReplicaKey::new(ReplicaType::Chief, 0)));
        let spec = spec_from(json!({"replicaSpecs": [
            {"type": "worker", "replicas": 2}, {"type": "chief", "replicas": 0}]}));
        assert_eq!(spec.master(), Some(ReplicaKey::new(ReplicaType::Worker, 0)));
        let spec = spec_from(json!({"replicaSpecs": [{"type": "ps"}]}));
        assert_eq!(spec.master(), None);
    }

    #[test]
    fn replica_keys_are_ordered_by_type_then_index() {
        let spec = spec_from(json!({"replicaSpecs": [
            {"type": "ps"}, {"type": "worker", "replicas": 2}, {"type": "chief"}]}));
        let names: Vec<String> = spec
            .replica_keys()
            .iter()
            .map(|k| k.object_name("job"))
            .collect();
        assert_eq!(
            names,
            ["job-chief-0", "job-worker-0", "job-worker-1", "job-ps-0"]
        );
    }

    #[test]
    fn federation_defaults() {
        let spec = spec_from(json!({"scheduler": {"federation": {}}}));
        let federation = spec.federation().expect("federation");
        assert_eq!(federation.parsed_strategy(), Some(FederationStrategy::Pack));
        assert!(federation.allow_split);
    }

    #[test]
    fn a_template_is_kept_as_the_text_of_its_json_and_reads_back_the_same() {
        let texts = [
            r#"{"template": {"spec": {"containers": [{"name": "tensorflow", "image": "i"}]}, "metadata": {"labels": {"b": "2", "a": "1"}}}}"#,
            "{\"template\":{ \"metadata\":{\"labels\":{\"a\":\"1\",\"b\":\"2\"}},\n \"spec\":{\"containers\":[{\"image\":\"i\",\"name\":\"tensorflow\"}]}}}",
        ];
        let read: Vec<ReplicaSpec> = texts
            .iter()
            .map(|t| serde_json::from_str(t).expect("a replica spec"))
            .collect();
        assert_eq!(read[0].template, read[1].template, "the same JSON");
        let tree: serde_json::Value = serde_json::from_str(texts[0]).expect("json");
        assert_eq!(read[0].template.json(), tree["template"].to_string());
        // Written back as JSON by any serializer, not only serde_json's.
        let yaml = serde_yaml::to_string(&read[0]).expect("yaml");
        let from_yaml: serde_json::Value = serde_yaml::from_str(&yaml).expect("reads");
        assert_eq!(from_yaml["template"], tree["template"]);
        assert_eq!(
            serde_json::to_value(&read[0]).expect("json")["template"],
            tree["template"]
        );
        // A copy of the spec shares the text.
        let copy = read[0].clone();
        assert!(std::ptr::eq(copy.template.json(), read[0].template.json()));
        let parsed = read[0].template.parse().expect("parses");
        assert_eq!(
            parsed.spec.expect("spec").containers[0].image.as_deref(),
            Some("i")
        );
    }

    #[test]
    fn a_malformed_template_still_parses_as_a_job() {
        let spec = spec_from(
            json!({"replicaSpecs": [{"type": "worker", "template": {"spec": {
            "containers": [{"name": "tensorflow", "ports": [{"containerPort": "2222"}]}]}}}]}),
        );
        let error = spec.replica_specs[0]
            .template
            .parse()
            .expect_err("malformed");
        assert_eq!(error.path, "spec.containers[0].ports[0].containerPort");
        assert!(error.message.contains("expected i32"), "{error}");
        let spec = spec_from(json!({"replicaSpecs": [{"type": "worker", "template": null}]}));
        assert_eq!(
            spec.replica_specs[0].template.parse(),
            Ok(PodTemplateSpec::default())
        );
    }

    #[test]
    fn status_tolerates_unknown_phases() {
        let status: TensorFlowTrainingJobStatus = serde_json::from_value(json!({
            "phase": "Exploded",
            "tasks": [{"type": "worker", "replicaStatus": [{"name": "j-worker-0", "phase": "Weird"}]}],
        }))
        .expect("status parses");
        assert_eq!(status.phase, Some(JobPhase::Unknown));
        assert_eq!(
            status.tasks[0].replica_status[0].phase,
            ReplicaPhase::Unknown
        );
        assert_eq!(status.aggregate, Aggregate::default());
    }
}
