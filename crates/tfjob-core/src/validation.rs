//! Validation of a `TensorFlowTrainingJob` spec, with no API calls.
//!
//! Every rule runs and every violation is reported, joined with "; ", in the
//! style of Kubernetes field errors (`<path>: Unsupported value: …`,
//! `Invalid value`, `Required value`, `Duplicate value`, `Forbidden`), so a
//! user can fix all of them at once. The controller turns a failure into phase
//! Failed with reason [`INVALID_SPEC_REASON`].
//!
//! The CRD schema deliberately leaves these checks to this module (no enums or
//! bounds in the schema), so the API server and the simulator store the job and
//! the user sees the message in the job's status.

use std::collections::BTreeSet;
use std::fmt;

use crate::api::{
    CleanUpPolicy, FailoverScope, FederationPolicy, FederationStrategy, MAX_REPLICAS,
    MAX_TEMPLATE_BYTES_TIMES_REPLICAS, MAX_TOTAL_REPLICAS, MAX_WEIGHT, PodTemplate, ReplicaType,
    RestartPolicy, TENSORFLOW_CONTAINER, TensorFlowTrainingJob, TensorFlowTrainingJobSpec,
};
use crate::kube_names;

/// The condition and Event reason for a job that fails validation.
pub use crate::api::reason::INVALID_SPEC as INVALID_SPEC_REASON;

/// The longest DNS-1035 label (a Service name).
const MAX_LABEL_LENGTH: usize = 63;

/// One violated rule, e.g. `spec.replicaSpecs[0].replicas: Invalid value: -1: …`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The path of the offending field, e.g. `spec.replicaSpecs[2].type`.
    pub field: String,
    /// What is wrong, starting with the Kubernetes error kind.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every rule a job violates, in spec order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.errors))]
pub struct ValidationError {
    pub errors: Vec<FieldError>,
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Collects errors while the rules run.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    fn required(&mut self, field: impl Into<String>, detail: &str) {
        self.push(field, format!("Required value: {detail}"));
    }

    fn invalid(&mut self, field: impl Into<String>, value: impl fmt::Display, detail: &str) {
        self.push(field, format!("Invalid value: {value}: {detail}"));
    }

    fn unsupported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.push(
            field,
            format!("Unsupported value: {value:?}: supported values: {list}"),
        );
    }

    fn duplicate(&mut self, field: impl Into<String>, value: &str) {
        self.push(field, format!("Duplicate value: {value:?}"));
    }

    fn into_result(self) -> Result<(), ValidationError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationError { errors: self.0 })
        }
    }
}

/// Checks a job's name and spec against every rule of docs/src/design/api-semantics.md.
pub fn validate(job: &TensorFlowTrainingJob) -> Result<(), ValidationError> {
    let mut errors = Errors::default();
    let spec = &job.spec;
    match job.metadata.name.as_deref() {
        Some(name) if !name.is_empty() => check_implied_names(name, spec, &mut errors),
        _ => errors.required("metadata.name", "the job needs a name"),
    }
    check_replica_specs(spec, &mut errors);
    check_run_mode(spec, &mut errors);
    check_run_policy(spec, &mut errors);
    check_scheduler(spec, &mut errors);
    if let Some(tensorboard) = &spec.tensorboard_spec
        && tensorboard.training_log_filesets.is_empty()
    {
        errors.required(
            "spec.tensorboardSpec.trainingLogFilesets",
            "at least one fileset holding the training logs is needed",
        );
    }
    errors.into_result()
}

/// `path` and a path within it as `serde_path_to_error` prints it (`.`
/// for the root).
pub fn join_path(path: &str, within: &str) -> String {
    match within {
        "" | "." => path.to_string(),
        within => format!("{path}.{within}"),
    }
}

/// A serde error (`invalid type: string "two", expected i32`) in the words
/// of a Kubernetes field error (`Invalid value: string "two": must be an
/// integer`).
pub fn in_words(message: &str) -> String {
    let expected = |what: &str| -> String {
        let what = what.trim();
        let words = match what {
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" => "an integer",
            "f32" | "f64" => "a number",
            "a boolean" => "true or false",
            "a sequence" => "a list",
            "a map" => "an object",
            _ if what.starts_with("struct ") => "an object",
            _ => what,
        };
        if what.len() > 1 && what[1..].parse::<u32>().is_ok() && what.starts_with(['i', 'u']) {
            format!("{words} that fits {what}")
        } else {
            words.to_string()
        }
    };
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some((found, wanted)) = rest.rsplit_once(", expected ")
        {
            return format!("Invalid value: {found}: must be {}", expected(wanted));
        }
    }
    if let Some(rest) = message.strip_prefix("unknown variant ")
        && let Some((found, wanted)) = rest.split_once(", expected ")
    {
        return format!("Unsupported value: {found}: supported values: {wanted}");
    }
    if let Some(field) = message.strip_prefix("missing field ") {
        return format!("Required value: {field} is required");
    }
    format!("Invalid value: {message}")
}

/// Pods and services are named `<job>-<type>-<index>`; the service name must
/// be a DNS-1035 label. Reports the longest implied name that is not.
fn check_implied_names(name: &str, spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    let longest = ReplicaType::ALL
        .into_iter()
        .filter(|t| spec.replicas_of(*t) > 0)
        .map(|t| format!("{name}-{t}-{}", spec.replicas_of(t) - 1))
        .max_by_key(String::len);
    let Some(service) = longest else {
        return;
    };
    if service.len() > MAX_LABEL_LENGTH {
        let suffix = service.len() - name.len();
        errors.invalid(
            "metadata.name",
            format_args!("{name:?}"),
            &format!(
                "the pod and service name {service:?} it implies is {} characters, more than \
                 the {MAX_LABEL_LENGTH} a DNS-1035 label allows; use a job name of at most {} \
                 characters",
                service.len(),
                MAX_LABEL_LENGTH.saturating_sub(suffix)
            ),
        );
    } else if !is_dns1035_label(&service) {
        errors.invalid(
            "metadata.name",
            format_args!("{name:?}"),
            &format!(
                "the service name {service:?} it implies must be a DNS-1035 label: lower-case \
                 letters, digits and '-', starting with a letter"
            ),
        );
    }
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
fn is_dns1035_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= MAX_LABEL_LENGTH
        && first.is_ascii_lowercase()
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

fn replica_type_names() -> Vec<&'static str> {
    ReplicaType::ALL.iter().map(|t| t.as_str()).collect()
}

fn check_replica_specs(spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    if spec.replica_specs.is_empty() {
        errors.required("spec.replicaSpecs", "at least one replica spec is needed");
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, replica) in spec.replica_specs.iter().enumerate() {
        let path = format!("spec.replicaSpecs[{i}]");
        match replica.parsed_type() {
            None if replica.replica_type.is_empty() => {
                errors.required(
                    format!("{path}.type"),
                    "one of chief, worker, ps, evaluator",
                );
            }
            None => errors.unsupported(
                format!("{path}.type"),
                &replica.replica_type,
                &replica_type_names(),
            ),
            Some(t) if !seen.insert(t) => errors.duplicate(format!("{path}.type"), t.as_str()),
            // TensorFlow's cluster spec holds one chief and one evaluator at most.
            Some(t @ (ReplicaType::Chief | ReplicaType::Evaluator)) if replica.replicas > 1 => {
                errors.invalid(
                    format!("{path}.replicas"),
                    replica.replicas,
                    &format!("a job may have at most one {}", t.as_str()),
                )
            }
            Some(_) => {}
        }
        if replica.replicas < 1 {
            errors.invalid(
                format!("{path}.replicas"),
                replica.replicas,
                "must be greater than or equal to 1",
            );
        } else if replica.replicas > MAX_REPLICAS {
            errors.invalid(
                format!("{path}.replicas"),
                replica.replicas,
                &format!("must be at most {MAX_REPLICAS}"),
            );
        }
        if let Some(policy) = &replica.restart_policy
            && RestartPolicy::parse(policy).is_none()
        {
            let supported: Vec<&str> = RestartPolicy::ALL.iter().map(|p| p.as_str()).collect();
            errors.unsupported(format!("{path}.restartPolicy"), policy, &supported);
        }
        check_template(&replica.template, &format!("{path}.template"), errors);
    }
    check_job_size(spec, errors);
    if spec.master().is_none() && spec.replica_specs.iter().all(|r| r.parsed_type().is_some()) {
        errors.required(
            "spec.replicaSpecs",
            "a chief or at least one worker is needed: the master replica (chief, else \
             worker-0) decides when the job succeeds",
        );
    }
}

/// The job-size bound (docs/src/api/door.md): replicas over all
/// types, and template bytes times replicas, what the controller holds and
/// builds per job.
fn check_job_size(spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    let counted = || {
        spec.replica_specs
            .iter()
            .map(|r| i64::from(r.replicas.clamp(0, MAX_REPLICAS)))
    };
    let total: i64 = counted().sum();
    if total > MAX_TOTAL_REPLICAS {
        errors.invalid(
            "spec.replicaSpecs",
            total,
            &format!(
                "a job may have at most {MAX_TOTAL_REPLICAS} replicas over all its replica types"
            ),
        );
    }
    let bytes: usize = spec
        .replica_specs
        .iter()
        .zip(counted())
        .map(|(r, replicas)| {
            let template = r.template.json().len();
            template.saturating_mul(usize::try_from(replicas).unwrap_or(0))
        })
        .fold(0, usize::saturating_add);
    if bytes > MAX_TEMPLATE_BYTES_TIMES_REPLICAS {
        errors.invalid(
            "spec.replicaSpecs",
            bytes,
            &format!(
                "the pod templates times their replicas come to {bytes} bytes, more than the \
                 {MAX_TEMPLATE_BYTES_TIMES_REPLICAS} one job may have (16 MiB): use fewer \
                 replicas or a smaller template"
            ),
        );
    }
}

fn check_template(template: &PodTemplate, path: &str, errors: &mut Errors) {
    let template = match template.parse() {
        Ok(template) => template,
        Err(error) => {
            errors.push(join_path(path, &error.path), in_words(&error.message));
            return;
        }
    };
    let has_main = template
        .spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().any(|c| c.name == TENSORFLOW_CONTAINER));
    if !has_main {
        errors.required(
            format!("{path}.spec.containers"),
            &format!("a container named {TENSORFLOW_CONTAINER:?} (the main container) is needed"),
        );
    }
    errors
        .0
        .extend(crate::pod_validation::validate_template(&template, path));
}

/// Checks that each run-mode entry names a distinct replica type of the job.
fn check_mode_types<'a>(
    types: impl Iterator<Item = &'a str>,
    path: &str,
    spec: &TensorFlowTrainingJobSpec,
    errors: &mut Errors,
) {
    let mut seen = BTreeSet::new();
    for (i, value) in types.enumerate() {
        let field = format!("{path}[{i}].type");
        match ReplicaType::parse(value) {
            None => errors.unsupported(field, value, &replica_type_names()),
            Some(t) if !seen.insert(t) => errors.duplicate(field, value),
            Some(t) if spec.replica_spec(t).is_none() => errors.invalid(
                field,
                format_args!("{value:?}"),
                &format!("the job has no {t} replica spec"),
            ),
            Some(_) => {}
        }
    }
}

fn check_enable_conflict(
    enabled: Option<bool>,
    enable: Option<bool>,
    path: &str,
    errors: &mut Errors,
) {
    if let (Some(enabled), Some(enable)) = (enabled, enable)
        && enabled != enable
    {
        errors.invalid(
            format!("{path}.enable"),
            enable,
            &format!("conflicts with {path}.enabled ({enabled}); set only enabled"),
        );
    }
}

fn check_command(command: Option<&Vec<String>>, field: String, errors: &mut Errors) {
    if command.is_some_and(Vec::is_empty) {
        errors.invalid(field, "[]", "must not be empty when given");
    }
}

fn check_run_mode(spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    let Some(mode) = &spec.run_mode else {
        return;
    };
    if let Some(debug) = &mode.debug {
        let path = "spec.runMode.debug";
        check_enable_conflict(debug.enabled, debug.enable, path, errors);
        let list = format!("{path}.replicaSpecs");
        check_mode_types(
            debug.replica_specs.iter().map(|s| s.replica_type.as_str()),
            &list,
            spec,
            errors,
        );
        for (i, s) in debug.replica_specs.iter().enumerate() {
            check_command(s.command.as_ref(), format!("{list}[{i}].command"), errors);
        }
    }
    if let Some(pause) = &mode.pause {
        let path = "spec.runMode.pause";
        check_enable_conflict(pause.enabled, pause.enable, path, errors);
        let list = format!("{path}.resumeSpecs");
        check_mode_types(
            pause.resume_specs.iter().map(|s| s.replica_type.as_str()),
            &list,
            spec,
            errors,
        );
        for (i, s) in pause.resume_specs.iter().enumerate() {
            check_command(s.command.as_ref(), format!("{list}[{i}].command"), errors);
        }
    }
}

fn check_run_policy(spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    let Some(policy) = &spec.run_policy else {
        return;
    };
    if let Some(limit) = policy.backoff_limit
        && limit < 0
    {
        errors.invalid(
            "spec.runPolicy.backoffLimit",
            limit,
            "must be greater than or equal to 0",
        );
    }
    if let Some(seconds) = policy.active_deadline_seconds
        && seconds <= 0
    {
        errors.invalid(
            "spec.runPolicy.activeDeadlineSeconds",
            seconds,
            "must be greater than 0",
        );
    }
    if let Some(value) = &policy.clean_up_policy
        && CleanUpPolicy::parse(value).is_none()
    {
        let supported: Vec<&str> = CleanUpPolicy::ALL.iter().map(|p| p.as_str()).collect();
        errors.unsupported("spec.runPolicy.cleanUpPolicy", value, &supported);
    }
}

fn check_scheduler(spec: &TensorFlowTrainingJobSpec, errors: &mut Errors) {
    if let Some(t9k) = spec.t9k_scheduler() {
        let path = "spec.scheduler.t9kScheduler";
        if t9k.queue.is_empty() {
            errors.required(format!("{path}.queue"), "the queue of the PodGroup");
        }
        if let Some(priority) = t9k.priority
            && !(0..=100).contains(&priority)
        {
            errors.invalid(
                format!("{path}.priority"),
                priority,
                "must be between 0 and 100, inclusive",
            );
        }
    }
    if let Some(federation) = spec.federation() {
        check_federation(federation, errors);
        if federation.parsed_failover() == Some(FailoverScope::LostReplicas)
            && spec.t9k_scheduler().is_some()
        {
            errors.invalid(
                "spec.scheduler.federation.failover",
                "\"LostReplicas\"",
                "a gang-scheduled job (spec.scheduler.t9kScheduler) is placed and restarted whole: use Job",
            );
        }
    }
}

fn check_federation(federation: &FederationPolicy, errors: &mut Errors) {
    let path = "spec.scheduler.federation";
    match federation.parsed_strategy() {
        None => {
            let supported: Vec<&str> = FederationStrategy::ALL.iter().map(|s| s.as_str()).collect();
            errors.unsupported(format!("{path}.strategy"), &federation.strategy, &supported);
        }
        Some(FederationStrategy::Weighted) if federation.weights.values().all(|w| *w <= 0) => {
            errors.required(
                format!("{path}.weights"),
                "the Weighted strategy needs a positive weight for at least one cluster",
            );
        }
        Some(_) => {}
    }
    if let Some(failover) = &federation.failover
        && FailoverScope::parse(failover).is_none()
    {
        let supported: Vec<&str> = FailoverScope::ALL.iter().map(|s| s.as_str()).collect();
        errors.unsupported(format!("{path}.failover"), failover, &supported);
    }
    for (cluster, weight) in &federation.weights {
        let field = format!("{path}.weights[{cluster}]");
        if *weight < 0 {
            errors.invalid(&field, weight, "must be greater than or equal to 0");
        } else if *weight > MAX_WEIGHT {
            errors.invalid(
                &field,
                weight,
                &format!("must be less than or equal to {MAX_WEIGHT}"),
            );
        }
        check_cluster_name(cluster, &field, errors);
    }
    // A name or selector that no MemberCluster can ever have waits
    // forever: refused here. (A valid name of a cluster not registered yet
    // waits, saying the name is unknown: placement's reasons.)
    for (i, name) in federation.cluster_names.iter().enumerate() {
        check_cluster_name(name, &format!("{path}.clusterNames[{i}]"), errors);
    }
    let selector = federation.cluster_selector.as_ref();
    let labels_path = format!("{path}.clusterSelector.matchLabels");
    for (key, value) in selector
        .and_then(|s| s.match_labels.as_ref())
        .into_iter()
        .flatten()
    {
        for problem in kube_names::label_key(key) {
            errors.invalid(&labels_path, format_args!("{key:?}"), &problem);
        }
        for problem in kube_names::label_value(value) {
            errors.invalid(&labels_path, format_args!("{value:?}"), &problem);
        }
    }
    let expressions = selector.and_then(|s| s.match_expressions.as_ref());
    for (i, requirement) in expressions.into_iter().flatten().enumerate() {
        let field = format!("{path}.clusterSelector.matchExpressions[{i}]");
        for problem in kube_names::label_key(&requirement.key) {
            errors.invalid(
                format!("{field}.key"),
                format_args!("{:?}", requirement.key),
                &problem,
            );
        }
        for (j, value) in requirement.values.iter().flatten().enumerate() {
            for problem in kube_names::label_value(value) {
                errors.invalid(
                    format!("{field}.values[{j}]"),
                    format_args!("{value:?}"),
                    &problem,
                );
            }
        }
        let has_values = requirement.values.as_ref().is_some_and(|v| !v.is_empty());
        match requirement.operator.as_str() {
            "In" | "NotIn" if !has_values => errors.required(
                format!("{field}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if has_values => errors.push(
                format!("{field}.values"),
                "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.unsupported(
                format!("{field}.operator"),
                other,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            ),
        }
    }
}

/// A cluster is named by its MemberCluster (home by the controller's
/// setting): a DNS-1123 subdomain, so `Member-1` names no cluster ever.
fn check_cluster_name(name: &str, field: &str, errors: &mut Errors) {
    for problem in kube_names::dns1123_subdomain(name) {
        errors.invalid(
            field,
            format_args!("{name:?}"),
            &format!("no cluster can be named so: {problem}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn container(name: &str) -> Value {
        json!({"name": name, "image": "tensorflow/tensorflow:2.15.0"})
    }

    fn replica(replica_type: &str, replicas: i64) -> Value {
        json!({"type": replica_type, "replicas": replicas,
            "template": {"spec": {"containers": [container("tensorflow")]}}})
    }

    fn job(name: &str, spec: Value) -> TensorFlowTrainingJob {
        serde_json::from_value(json!({
            "apiVersion": "batch.tensorstack.dev/v1beta1",
            "kind": "TensorFlowTrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))
        .expect("job parses")
    }

    fn valid_spec() -> Value {
        json!({"replicaSpecs": [replica("chief", 1), replica("worker", 2), replica("ps", 1)]})
    }

    /// The error messages of a job that must fail validation.
    fn errors_of(job: &TensorFlowTrainingJob) -> Vec<String> {
        validate(job)
            .expect_err("the job is invalid")
            .errors
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn errors_for(spec: Value) -> Vec<String> {
        errors_of(&job("mnist", spec))
    }

    #[test]
    fn a_valid_job_passes() {
        assert_eq!(validate(&job("mnist", valid_spec())), Ok(()));
    }

    #[test]
    fn unknown_replica_type() {
        let mut spec = valid_spec();
        spec["replicaSpecs"][2]["type"] = json!("master");
        assert_eq!(
            errors_for(spec),
            [
                r#"spec.replicaSpecs[2].type: Unsupported value: "master": supported values: "chief", "worker", "ps", "evaluator""#
            ]
        );
    }

    #[test]
    fn missing_replica_type() {
        let errors = errors_for(json!({"replicaSpecs": [
            replica("worker", 1),
            {"template": {"spec": {"containers": [container("tensorflow")]}}},
        ]}));
        assert_eq!(
            errors,
            ["spec.replicaSpecs[1].type: Required value: one of chief, worker, ps, evaluator"]
        );
    }

    #[test]
    fn more_than_one_chief_or_evaluator() {
        let errors = errors_for(json!({"replicaSpecs": [replica("chief", 2)]}));
        assert_eq!(
            errors,
            ["spec.replicaSpecs[0].replicas: Invalid value: 2: a job may have at most one chief"]
        );
        let errors =
            errors_for(json!({"replicaSpecs": [replica("worker", 2), replica("evaluator", 3)]}));
        assert_eq!(
            errors,
            [
                "spec.replicaSpecs[1].replicas: Invalid value: 3: a job may have at most one evaluator"
            ]
        );
        let errors =
            errors_for(json!({"replicaSpecs": [replica("chief", 1), replica("chief", 1)]}));
        assert_eq!(
            errors,
            [r#"spec.replicaSpecs[1].type: Duplicate value: "chief""#]
        );
    }

    #[test]
    fn duplicate_replica_types() {
        let errors = errors_for(json!({"replicaSpecs": [
            replica("worker", 1), replica("ps", 1), replica("worker", 3)]}));
        assert_eq!(
            errors,
            [r#"spec.replicaSpecs[2].type: Duplicate value: "worker""#]
        );
    }

    #[test]
    fn serde_errors_read_as_field_errors() {
        for (message, expected) in [
            (
                r#"invalid type: string "two", expected i32"#,
                r#"Invalid value: string "two": must be an integer that fits i32"#,
            ),
            (
                "invalid value: integer `-1`, expected u64",
                "Invalid value: integer `-1`: must be an integer that fits u64",
            ),
            (
                "invalid type: sequence, expected struct ReplicaSpec",
                "Invalid value: sequence: must be an object",
            ),
            (
                "invalid type: integer `3`, expected a string",
                "Invalid value: integer `3`: must be a string",
            ),
            (
                "missing field `replicaSpecs`",
                "Required value: `replicaSpecs` is required",
            ),
            ("something else", "Invalid value: something else"),
        ] {
            assert_eq!(in_words(message), expected);
        }
        assert_eq!(
            join_path("spec.replicaSpecs[0].template", "."),
            "spec.replicaSpecs[0].template"
        );
        assert_eq!(
            join_path("spec", "runPolicy.backoffLimit"),
            "spec.runPolicy.backoffLimit"
        );
    }

    #[test]
    fn replicas_beyond_the_bound() {
        let errors = errors_for(json!({"replicaSpecs": [replica("worker", 2147483647)]}));
        assert_eq!(
            errors,
            ["spec.replicaSpecs[0].replicas: Invalid value: 2147483647: must be at most 1000"]
        );
        let job = job(
            "huge",
            json!({"replicaSpecs": [replica("worker", 2147483647)]}),
        );
        assert_eq!(
            job.spec.replica_keys().len(),
            1000,
            "nothing sized by the raw count"
        );
    }

    #[test]
    fn replicas_below_one() {
        for count in [-1, 0] {
            let errors = errors_for(
                json!({"replicaSpecs": [replica("chief", 1), replica("worker", count)]}),
            );
            assert_eq!(
                errors,
                [format!(
                    "spec.replicaSpecs[1].replicas: Invalid value: {count}: must be greater than or equal to 1"
                )]
            );
        }
    }

    #[test]
    fn template_without_tensorflow_container() {
        let errors = errors_for(json!({"replicaSpecs": [
            replica("chief", 1),
            {"type": "worker", "template": {"spec": {"containers": [container("trainer")]}}},
            {"type": "ps", "template": {}},
        ]}));
        assert_eq!(
            errors,
            [
                r#"spec.replicaSpecs[1].template.spec.containers: Required value: a container named "tensorflow" (the main container) is needed"#,
                r#"spec.replicaSpecs[2].template.spec.containers: Required value: a container named "tensorflow" (the main container) is needed"#,
            ]
        );
    }

    #[test]
    fn malformed_template() {
        let mut spec = valid_spec();
        spec["replicaSpecs"][1]["template"]["spec"]["containers"][0]["ports"] =
            json!([{"name": "tfjob-port", "containerPort": "2222"}]);
        assert_eq!(
            errors_for(spec),
            [
                r#"spec.replicaSpecs[1].template.spec.containers[0].ports[0].containerPort: Invalid value: string "2222": must be an integer that fits i32"#
            ]
        );
    }

    #[test]
    fn bad_tfjob_port() {
        let mut spec = valid_spec();
        spec["replicaSpecs"][1]["template"]["spec"]["containers"] = json!([
            container("sidecar"),
            {"name": "tensorflow", "ports": [{"name": "tfjob-port", "containerPort": 0}]},
        ]);
        assert_eq!(
            errors_for(spec),
            [
                "spec.replicaSpecs[1].template.spec.containers[1].image: Required value",
                "spec.replicaSpecs[1].template.spec.containers[1].ports[0].containerPort: Required value",
            ]
        );
    }

    #[test]
    fn job_name_too_long_for_the_names_it_implies() {
        // 51 + "-evaluator-0" = 63: the longest name that fits.
        let fits = "a".repeat(51);
        let spec = json!({"replicaSpecs": [replica("worker", 1), replica("evaluator", 1)]});
        assert_eq!(validate(&job(&fits, spec.clone())), Ok(()));
        let long = "a".repeat(52);
        assert_eq!(
            errors_of(&job(&long, spec)),
            [format!(
                "metadata.name: Invalid value: \"{long}\": the pod and service name \
                 \"{long}-evaluator-0\" it implies is 64 characters, more than the 63 a \
                 DNS-1035 label allows; use a job name of at most 51 characters"
            )]
        );
        // Eleven workers need two digits for the last index.
        let name = "b".repeat(53);
        let spec = json!({"replicaSpecs": [replica("worker", 11)]});
        assert_eq!(validate(&job(&name, spec.clone())), Ok(()));
        let name = "b".repeat(54);
        assert!(errors_of(&job(&name, spec))[0].contains(&format!("\"{name}-worker-10\"")));
    }

    #[test]
    fn job_name_that_is_not_a_dns_label() {
        let errors = errors_of(&job("mnist.v2", valid_spec()));
        assert_eq!(
            errors,
            [
                "metadata.name: Invalid value: \"mnist.v2\": the service name \"mnist.v2-worker-1\" it implies must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter"
            ]
        );
        assert!(errors_of(&job("2mnist", valid_spec()))[0].starts_with("metadata.name"));
    }

    #[test]
    fn empty_replica_specs() {
        assert_eq!(
            errors_for(json!({"replicaSpecs": []})),
            ["spec.replicaSpecs: Required value: at least one replica spec is needed"]
        );
        assert_eq!(
            errors_for(json!({})),
            ["spec.replicaSpecs: Required value: at least one replica spec is needed"]
        );
    }

    #[test]
    fn no_master_replica() {
        let errors = errors_for(json!({"replicaSpecs": [replica("ps", 1)]}));
        assert_eq!(
            errors,
            [
                "spec.replicaSpecs: Required value: a chief or at least one worker is needed: the master replica (chief, else worker-0) decides when the job succeeds"
            ]
        );
    }

    #[test]
    fn run_policy_bounds() {
        let mut spec = valid_spec();
        spec["runPolicy"] =
            json!({"backoffLimit": -1, "activeDeadlineSeconds": -5, "cleanUpPolicy": "some"});
        assert_eq!(
            errors_for(spec),
            [
                "spec.runPolicy.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
                "spec.runPolicy.activeDeadlineSeconds: Invalid value: -5: must be greater than 0",
                r#"spec.runPolicy.cleanUpPolicy: Unsupported value: "some": supported values: "all", "unfinished", "none""#,
            ]
        );
        let mut spec = valid_spec();
        spec["runPolicy"] =
            json!({"backoffLimit": 0, "activeDeadlineSeconds": 60, "cleanUpPolicy": "Unfinished"});
        assert_eq!(validate(&job("mnist", spec)), Ok(()));
    }

    #[test]
    fn unknown_restart_policy() {
        let mut spec = valid_spec();
        spec["replicaSpecs"][1]["restartPolicy"] = json!("onFailure");
        assert_eq!(
            errors_for(spec),
            [
                r#"spec.replicaSpecs[1].restartPolicy: Unsupported value: "onFailure": supported values: "Never", "OnFailure", "Always", "ExitCode""#
            ]
        );
    }

    #[test]
    fn priority_and_queue() {
        let mut spec = valid_spec();
        spec["scheduler"] = json!({"t9kScheduler": {"priority": 101}});
        assert_eq!(
            errors_for(spec),
            [
                "spec.scheduler.t9kScheduler.queue: Required value: the queue of the PodGroup",
                "spec.scheduler.t9kScheduler.priority: Invalid value: 101: must be between 0 and 100, inclusive",
            ]
        );
        let mut spec = valid_spec();
        spec["scheduler"] = json!({"t9kScheduler": {"queue": "default", "priority": 100}});
        assert_eq!(validate(&job("mnist", spec)), Ok(()));
    }

    #[test]
    fn failover_scope_rules() {
        let cases = [
            (json!({"federation": {"failover": "LostReplicas"}}), vec![]),
            (
                json!({"federation": {"failover": "Job"}, "t9kScheduler": {"queue": "q"}}),
                vec![],
            ),
            (
                json!({"federation": {"failover": "Some"}}),
                vec![
                    r#"spec.scheduler.federation.failover: Unsupported value: "Some": supported values: "Job", "LostReplicas""#,
                ],
            ),
            (
                json!({"federation": {"failover": "LostReplicas"}, "t9kScheduler": {"queue": "q"}}),
                vec![
                    r#"spec.scheduler.federation.failover: Invalid value: "LostReplicas": a gang-scheduled job (spec.scheduler.t9kScheduler) is placed and restarted whole: use Job"#,
                ],
            ),
        ];
        for (scheduler, expected) in cases {
            let mut spec = valid_spec();
            spec["scheduler"] = scheduler.clone();
            if expected.is_empty() {
                assert_eq!(validate(&job("mnist", spec)), Ok(()), "{scheduler}");
            } else {
                assert_eq!(errors_for(spec), expected, "{scheduler}");
            }
        }
    }

    #[test]
    fn federation_rules() {
        let mut spec = valid_spec();
        spec["scheduler"] = json!({"federation": {
            "strategy": "Random",
            "weights": {"member-1": -1},
            "clusterSelector": {"matchExpressions": [
                {"key": "zone", "operator": "In"},
                {"key": "gpu", "operator": "Exists", "values": ["a"]},
                {"key": "x", "operator": "Near"},
            ]},
        }});
        assert_eq!(
            errors_for(spec),
            [
                r#"spec.scheduler.federation.strategy: Unsupported value: "Random": supported values: "Pack", "Spread", "Weighted""#,
                "spec.scheduler.federation.weights[member-1]: Invalid value: -1: must be greater than or equal to 0",
                "spec.scheduler.federation.clusterSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
                "spec.scheduler.federation.clusterSelector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                r#"spec.scheduler.federation.clusterSelector.matchExpressions[2].operator: Unsupported value: "Near": supported values: "In", "NotIn", "Exists", "DoesNotExist""#,
            ]
        );
        let mut spec = valid_spec();
        spec["scheduler"] = json!({"federation": {"strategy": "Weighted"}});
        assert_eq!(
            errors_for(spec),
            [
                "spec.scheduler.federation.weights: Required value: the Weighted strategy needs a positive weight for at least one cluster"
            ]
        );
        let mut spec = valid_spec();
        spec["scheduler"] = json!({"federation": {"strategy": "Weighted",
            "weights": {"home": 1, "member-1": 0}, "clusterNames": ["home", "member-1"]}});
        assert_eq!(validate(&job("mnist", spec)), Ok(()));
    }

    /// Issue 22: names, selectors and weights that can never match, or
    /// weights beyond the documented 0–100, are refused naming the field.
    #[test]
    fn federation_names_selectors_and_weights_that_can_never_match() {
        let table = [
            (
                json!({"clusterNames": ["Member-1", "member-2"]}),
                vec![
                    r#"spec.scheduler.federation.clusterNames[0]: Invalid value: "Member-1": no cluster can be named so: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
                ],
            ),
            (
                json!({"strategy": "Weighted", "weights": {"member-1": 101, "member-2": 100}}),
                vec![
                    "spec.scheduler.federation.weights[member-1]: Invalid value: 101: must be less than or equal to 100",
                ],
            ),
            (
                json!({"strategy": "Weighted", "weights": {"member 1": 1}}),
                vec![
                    r#"spec.scheduler.federation.weights[member 1]: Invalid value: "member 1": no cluster can be named so: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
                ],
            ),
            (
                json!({"clusterSelector": {"matchLabels": {"gpu type": "a100"},
                    "matchExpressions": [{"key": "zone/", "operator": "In", "values": ["us east"]}]}}),
                vec![
                    r#"spec.scheduler.federation.clusterSelector.matchLabels: Invalid value: "gpu type": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
                    r#"spec.scheduler.federation.clusterSelector.matchExpressions[0].key: Invalid value: "zone/": name part must be non-empty"#,
                    r#"spec.scheduler.federation.clusterSelector.matchExpressions[0].key: Invalid value: "zone/": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
                    r#"spec.scheduler.federation.clusterSelector.matchExpressions[0].values[0]: Invalid value: "us east": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#,
                ],
            ),
            (
                json!({"clusterNames": ["member-9", "home"],
                    "clusterSelector": {"matchLabels": {"topology.kubernetes.io/zone": "us-east-1a"}}}),
                vec![],
            ),
        ];
        for (federation, expected) in table {
            let mut spec = valid_spec();
            spec["scheduler"] = json!({"federation": federation});
            let job = job("mnist", spec);
            let got: Vec<String> = match validate(&job) {
                Ok(()) => Vec::new(),
                Err(e) => e.errors.iter().map(ToString::to_string).collect(),
            };
            assert_eq!(got, expected, "{federation}");
        }
    }

    /// Issue 22 (finding 4): one job's size is bounded at the door.
    #[test]
    fn the_job_size_bound() {
        let at_bound = json!({"replicaSpecs": [replica("chief", 1), replica("worker", 1000), replica("ps", 23)]});
        assert_eq!(validate(&job("big", at_bound)), Ok(()), "1,024 replicas");
        assert_eq!(
            errors_for(
                json!({"replicaSpecs": [replica("chief", 1), replica("worker", 1000), replica("ps", 1000)]})
            ),
            [
                "spec.replicaSpecs: Invalid value: 2001: a job may have at most 1024 replicas over all its replica types"
            ]
        );
        let annotated = |replicas: i64| {
            let mut spec = replica("worker", replicas);
            spec["template"]["metadata"] = json!({"annotations": {"notes": "x".repeat(50_000)}});
            json!({"replicaSpecs": [spec]})
        };
        assert_eq!(validate(&job("notes", annotated(300))), Ok(()));
        let errors = errors_for(annotated(400));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.replicaSpecs: Invalid value: 200")
                && errors[0].contains("more than the 16777216 one job may have (16 MiB)"),
            "{errors:?}"
        );
    }

    /// Issue 22's poison inputs in the corpus are refused at the door.
    #[test]
    fn issue_22s_corpus_jobs_are_refused() {
        let corpus = |file: &str| -> TensorFlowTrainingJob {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("corpus")
                .join(file);
            let text = std::fs::read_to_string(&path).expect("a corpus file");
            serde_json::from_str(&text).expect("a job")
        };
        assert_eq!(
            errors_of(&corpus("two-tensorflow-containers.json")),
            [
                r#"spec.replicaSpecs[0].template.spec.containers[1].name: Duplicate value: "tensorflow""#
            ]
        );
        let errors = errors_of(&corpus("replicas-2001-template-50kb.json"));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("Invalid value: 2001: a job may have at most 1024 replicas"));
        assert!(errors[1].contains("more than the 16777216 one job may have"));
        let job = corpus("pod-security-beyond-privileged.json");
        assert_eq!(
            validate(&job),
            Ok(()),
            "a Pod Security matter, not a spec error"
        );
        let policy = crate::placement::Policy::of_job(&job);
        assert_eq!(
            policy.privileges.breaks_baseline.as_deref(),
            Some(
                "forbidden AppArmor profiles (container \"tensorflow\" and annotation must not set \
                 AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/tensorflow=\"unconfined\"\"), \
                 host namespaces (hostNetwork=true), \
                 seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set), \
                 hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)"
            )
        );
    }

    #[test]
    fn run_mode_types_must_be_in_the_job() {
        let mut spec = valid_spec();
        spec["runMode"] = json!({
            "debug": {"enabled": true, "replicaSpecs": [
                {"type": "worker", "command": []},
                {"type": "master"},
                {"type": "worker"},
            ]},
            "pause": {"enable": true, "enabled": false, "resumeSpecs": [{"type": "evaluator"}]},
        });
        assert_eq!(
            errors_for(spec),
            [
                r#"spec.runMode.debug.replicaSpecs[1].type: Unsupported value: "master": supported values: "chief", "worker", "ps", "evaluator""#,
                r#"spec.runMode.debug.replicaSpecs[2].type: Duplicate value: "worker""#,
                "spec.runMode.debug.replicaSpecs[0].command: Invalid value: []: must not be empty when given",
                "spec.runMode.pause.enable: Invalid value: true: conflicts with spec.runMode.pause.enabled (false); set only enabled",
                r#"spec.runMode.pause.resumeSpecs[0].type: Invalid value: "evaluator": the job has no evaluator replica spec"#,
            ]
        );
    }

    #[test]
    fn tensorboard_needs_filesets() {
        let mut spec = valid_spec();
        spec["tensorboardSpec"] = json!({"image": "tensorflow/tensorflow:2.15.0"});
        assert_eq!(
            errors_for(spec),
            [
                "spec.tensorboardSpec.trainingLogFilesets: Required value: at least one fileset holding the training logs is needed"
            ]
        );
    }

    #[test]
    fn all_errors_are_reported_joined() {
        let error = validate(&job(
            "mnist",
            json!({"replicaSpecs": [replica("master", 1), replica("worker", -2)]}),
        ))
        .expect_err("invalid");
        assert_eq!(error.errors.len(), 2);
        assert_eq!(
            error.to_string(),
            format!("{}; {}", error.errors[0], error.errors[1])
        );
    }
}
