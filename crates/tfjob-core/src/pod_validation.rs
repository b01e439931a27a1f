//! The part of kube-apiserver's pod validation
//! (`pkg/apis/core/validation/validation.go`, v1.37.2: `ValidatePodSpec` and
//! what it calls) that a replica's pod template can break, so that a job
//! whose pods every API server would refuse fails at the door with
//! `InvalidSpec` instead of being placed, charged to a member's capacity
//! and refused there pod by pod. Errors are kube-apiserver's, word for word,
//! under the template's path in the job.
//!
//! Covered, in kube-apiserver's order:
//! - `metadata.labels`: keys and values (a pod carries its template's labels);
//! - `metadata.annotations`: at most 256 KiB in all, less 4 KiB kept for
//!   the controller's own; `container.apparmor.security.beta.kubernetes.io/*`
//!   naming a container, with a known profile (`runtime/default`,
//!   `unconfined`, `localhost/…`);
//! - `spec.volumes[*]`: a volume type given, `name` required, a DNS-1123
//!   label, unique;
//! - `spec.containers[*]` and `spec.initContainers[*]` (one name space):
//!   `name` required, a DNS-1123 label, unique across both lists; `image`
//!   required; `ports[*]`: `name` an IANA_SVC_NAME and unique in the
//!   container, `containerPort` given and 1–65535, `hostPort` 1–65535,
//!   `protocol` TCP, UDP or SCTP; `env[*].name` required and printable ASCII
//!   without `=`; `volumeMounts[*]`: `name` required and naming a volume,
//!   `mountPath` required and unique; `securityContext.procMount` `Default`,
//!   or `Unmasked` with `hostUsers: false`;
//! - Windows host-process pods: every container a host process, and
//!   `hostNetwork` true.
//!
//! Not covered (the member's API server still refuses them; the create is
//! then refused there): resource requests above limits and quantity
//! formats, probes and lifecycle handlers, affinity, tolerations, DNS
//! settings, security-context value ranges, volume source details,
//! annotation key formats, host-port conflicts. Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};

use crate::kube_names;
use crate::validation::FieldError;

/// Port protocols kube-apiserver supports, as it lists them.
const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];

/// Collects kube-apiserver's field errors under the template's path.
struct PodErrors<'a> {
    template_path: &'a str,
    errors: Vec<FieldError>,
}

impl PodErrors<'_> {
    fn push(&mut self, field: &str, message: String) {
        self.errors.push(FieldError {
            field: format!("{}.{field}", self.template_path),
            message,
        });
    }

    fn required(&mut self, field: &str) {
        self.push(field, "Required value".to_string());
    }

    fn invalid(&mut self, field: &str, value: impl std::fmt::Debug, detail: &str) {
        self.push(field, format!("Invalid value: {value:?}: {detail}"));
    }

    fn invalid_each(&mut self, field: &str, value: &str, details: Vec<String>) {
        for detail in details {
            self.invalid(field, value, &detail);
        }
    }

    fn duplicate(&mut self, field: &str, value: &str) {
        self.push(field, format!("Duplicate value: {value:?}"));
    }
}

/// What kube-apiserver's pod validation would refuse in a pod made from
/// `template`; each error's field is under `template_path` (e.g.
/// `spec.replicaSpecs[0].template`).
pub fn validate_template(template: &PodTemplateSpec, template_path: &str) -> Vec<FieldError> {
    let mut errors = PodErrors {
        template_path,
        errors: Vec::new(),
    };
    if let Some(labels) = template.metadata.as_ref().and_then(|m| m.labels.as_ref()) {
        for (key, value) in labels {
            errors.invalid_each("metadata.labels", key, kube_names::label_key(key));
            errors.invalid_each("metadata.labels", value, kube_names::label_value(value));
        }
    }
    let annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref());
    let size: usize = annotations
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    if size > TEMPLATE_ANNOTATIONS_MAX {
        errors.push(
            "metadata.annotations",
            format!(
                "Too long: may not be more than {TEMPLATE_ANNOTATIONS_MAX} bytes: kube-apiserver \
                 allows {POD_ANNOTATIONS_MAX} bytes of annotations on a pod, of which the \
                 controller keeps {CONTROLLER_ANNOTATIONS_RESERVE} for its own"
            ),
        );
    }
    let spec = template.spec.clone().unwrap_or_default();
    for (key, profile) in annotations.into_iter().flatten() {
        let Some(container) = key.strip_prefix(APP_ARMOR_ANNOTATION_PREFIX) else {
            continue;
        };
        let field = format!("metadata.annotations[{key}]");
        let named = |c: &Container| c.name == container;
        if !(spec.containers.iter().any(named) || spec.init_containers.iter().flatten().any(named))
        {
            errors.invalid(&field, container, "container not found");
        }
        let known = matches!(profile.as_str(), "" | "runtime/default" | "unconfined")
            || profile.starts_with("localhost/");
        if !known {
            errors.invalid(
                &field,
                profile,
                &format!("invalid AppArmor profile name: {profile:?}"),
            );
        }
    }
    if let Some(spec) = &template.spec {
        check_spec(spec, &mut errors);
    }
    errors.errors
}

/// The most bytes of annotations (keys and values) kube-apiserver allows
/// on an object.
const POD_ANNOTATIONS_MAX: usize = 256 * 1024;
/// What the controller keeps of that for the annotations it adds to a pod
/// (its signature, today under 200 bytes).
const CONTROLLER_ANNOTATIONS_RESERVE: usize = 4 * 1024;
/// The most bytes of annotations a replica's template may carry.
const TEMPLATE_ANNOTATIONS_MAX: usize = POD_ANNOTATIONS_MAX - CONTROLLER_ANNOTATIONS_RESERVE;

/// The deprecated per-container AppArmor annotation: it must name a
/// container of the pod and a profile kube-apiserver knows.
const APP_ARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn check_spec(spec: &PodSpec, errors: &mut PodErrors) {
    let volumes = check_volumes(spec, errors);
    let host_users = spec.host_users != Some(false);
    let mut names = BTreeSet::new();
    for (i, container) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        check_container(container, &path, &volumes, host_users, errors);
        if !names.insert(container.name.as_str()) {
            errors.duplicate(&format!("{path}.name"), &container.name);
        }
    }
    // Init containers share the containers' name space; kube-apiserver
    // reports a clash on the init container.
    for (i, container) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        check_container(container, &path, &volumes, host_users, errors);
        if names.contains(container.name.as_str()) {
            errors.duplicate(&format!("{path}.name"), &container.name);
        } else if !container.name.is_empty() {
            names.insert(container.name.as_str());
        }
    }
    check_host_process(spec, errors);
}

/// The volumes' checks; returns the names a volume mount may use (those of
/// the volumes without errors, as upstream).
fn check_volumes<'a>(spec: &'a PodSpec, errors: &mut PodErrors) -> BTreeSet<&'a str> {
    let mut valid = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let path = format!("spec.volumes[{i}]");
        let before = errors.errors.len();
        let has_source = serde_json::to_value(volume)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().any(|k| k != "name")))
            .unwrap_or(false);
        if !has_source {
            errors.push(
                &path,
                "Required value: must specify a volume type".to_string(),
            );
        }
        let name_path = format!("{path}.name");
        if volume.name.is_empty() {
            errors.required(&name_path);
        } else {
            errors.invalid_each(
                &name_path,
                &volume.name,
                kube_names::dns1123_label(&volume.name),
            );
        }
        if !seen.insert(volume.name.as_str()) {
            errors.duplicate(&name_path, &volume.name);
        }
        if errors.errors.len() == before {
            valid.insert(volume.name.as_str());
        }
    }
    valid
}

fn check_container(
    container: &Container,
    path: &str,
    volumes: &BTreeSet<&str>,
    host_users: bool,
    errors: &mut PodErrors,
) {
    let name_path = format!("{path}.name");
    if container.name.is_empty() {
        errors.required(&name_path);
    } else {
        errors.invalid_each(
            &name_path,
            &container.name,
            kube_names::dns1123_label(&container.name),
        );
    }
    if container.image.as_deref().unwrap_or_default().is_empty() {
        errors.required(&format!("{path}.image"));
    }
    check_ports(container, path, errors);
    for (i, env) in container.env.iter().flatten().enumerate() {
        let field = format!("{path}.env[{i}].name");
        if env.name.is_empty() {
            errors.required(&field);
        } else if env
            .name
            .chars()
            .any(|c| !c.is_ascii() || c.is_ascii_control() || c == '=')
        {
            errors.invalid(
                &field,
                &env.name,
                "a valid environment variable name must consist only of printable ASCII \
                 characters other than '='",
            );
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let mount_path = format!("{path}.volumeMounts[{i}]");
        if mount.name.is_empty() {
            errors.required(&format!("{mount_path}.name"));
        } else if !volumes.contains(mount.name.as_str()) {
            errors.push(
                &format!("{mount_path}.name"),
                format!("Not found: {:?}", mount.name),
            );
        }
        if mount.mount_path.is_empty() {
            errors.required(&format!("{mount_path}.mountPath"));
        } else if !mount_paths.insert(mount.mount_path.as_str()) {
            errors.invalid(
                &format!("{mount_path}.mountPath"),
                &mount.mount_path,
                "must be unique",
            );
        }
    }
    check_proc_mount(container, path, host_users, errors);
}

/// `securityContext.procMount`: `Default`, or `Unmasked` in a pod with its
/// own user namespace (`hostUsers: false`).
fn check_proc_mount(container: &Container, path: &str, host_users: bool, errors: &mut PodErrors) {
    let Some(mount) = container
        .security_context
        .as_ref()
        .and_then(|c| c.proc_mount.as_deref())
    else {
        return;
    };
    let field = format!("{path}.securityContext.procMount");
    match mount {
        "Default" => {}
        "Unmasked" if host_users => {
            errors.invalid(&field, mount, "`hostUsers` must be false to use `Unmasked`")
        }
        "Unmasked" => {}
        other => errors.push(
            &field,
            format!("Unsupported value: {other:?}: supported values: \"Default\", \"Unmasked\""),
        ),
    }
}

fn check_ports(container: &Container, path: &str, errors: &mut PodErrors) {
    let mut names = BTreeSet::new();
    for (i, port) in container.ports.iter().flatten().enumerate() {
        let port_path = format!("{path}.ports[{i}]");
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            let field = format!("{port_path}.name");
            let problems = kube_names::port_name(name);
            if !problems.is_empty() {
                errors.invalid_each(&field, name, problems);
            } else if !names.insert(name) {
                errors.duplicate(&field, name);
            }
        }
        let field = format!("{port_path}.containerPort");
        if port.container_port == 0 {
            errors.required(&field);
        } else if !(1..=65535).contains(&port.container_port) {
            errors.invalid_port(&field, port.container_port);
        }
        if let Some(host_port) = port.host_port.filter(|p| *p != 0)
            && !(1..=65535).contains(&host_port)
        {
            errors.invalid_port(&format!("{port_path}.hostPort"), host_port);
        }
        // An empty protocol is defaulted to TCP before validation.
        if let Some(protocol) = port.protocol.as_deref().filter(|p| !p.is_empty())
            && !PROTOCOLS.contains(&protocol)
        {
            let supported: Vec<String> = PROTOCOLS.iter().map(|p| format!("{p:?}")).collect();
            errors.push(
                &format!("{port_path}.protocol"),
                format!(
                    "Unsupported value: {protocol:?}: supported values: {}",
                    supported.join(", ")
                ),
            );
        }
    }
}

impl PodErrors<'_> {
    fn invalid_port(&mut self, field: &str, port: i32) {
        self.push(
            field,
            format!(
                "Invalid value: {port}: {}",
                kube_names::inclusive_range_error(1, 65535)
            ),
        );
    }
}

/// kube-apiserver's `validateWindowsHostProcessPod`: a pod with a host
/// process container must make every container one and use the host's
/// network (clusters that forbid privileged pods refuse it as well).
fn check_host_process(spec: &PodSpec, errors: &mut PodErrors) {
    let host_process = |c: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        c.and_then(|w| w.host_process)
    };
    let pod = host_process(
        spec.security_context
            .as_ref()
            .and_then(|c| c.windows_options.as_ref()),
    );
    let mut containers = 0;
    let mut host_processes = 0;
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (path, container) in all {
        containers += 1;
        let own = host_process(
            container
                .security_context
                .as_ref()
                .and_then(|c| c.windows_options.as_ref()),
        );
        if let (Some(pod), Some(own)) = (pod, own)
            && pod != own
        {
            errors.invalid(
                &format!("{path}.securityContext.windowsOptions.hostProcess"),
                own,
                &format!(
                    "pod hostProcess value must be identical if both are specified, was {pod}"
                ),
            );
        }
        if own.or(pod) == Some(true) {
            host_processes += 1;
        }
    }
    if host_processes == 0 {
        return;
    }
    if host_processes != containers {
        errors.invalid(
            "spec",
            "",
            "If pod contains any hostProcess containers then all containers must be HostProcess \
             containers",
        );
    }
    if spec.host_network != Some(true) {
        errors.invalid(
            "spec.hostNetwork",
            false,
            "hostNetwork must be true if pod contains any hostProcess containers",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn errors_of(template: Value) -> Vec<String> {
        let template: PodTemplateSpec = serde_json::from_value(template).expect("a template");
        validate_template(&template, "t")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn tf() -> Value {
        json!({"name": "tensorflow", "image": "tf"})
    }

    const LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
        characters or '-', and must start and end with an alphanumeric character (e.g. \
        'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    /// Each template, and what kube-apiserver says of the pod made from it
    /// (read off kube-apiserver v1.37.2 with `kubectl create --dry-run=server`).
    #[test]
    fn what_kube_apiserver_refuses_in_a_template() {
        let table: Vec<(Value, Vec<String>)> = vec![
            (json!({"spec": {"containers": [tf()]}}), vec![]),
            (
                json!({"spec": {"containers": [tf(), tf()]}}),
                vec![r#"t.spec.containers[1].name: Duplicate value: "tensorflow""#.into()],
            ),
            (
                json!({"spec": {"containers": [tf()], "initContainers": [tf()]}}),
                vec![r#"t.spec.initContainers[0].name: Duplicate value: "tensorflow""#.into()],
            ),
            (
                json!({"spec": {"containers": [tf(), {"name": "sidecar"}]}}),
                vec!["t.spec.containers[1].image: Required value".into()],
            ),
            (
                json!({"spec": {"containers": [tf(), {"name": "Side_car", "image": "x"}]}}),
                vec![format!(
                    r#"t.spec.containers[1].name: Invalid value: "Side_car": {LABEL_RULE}"#
                )],
            ),
            (
                json!({"spec": {"containers": [tf(), {"name": "", "image": "x"}]}}),
                vec!["t.spec.containers[1].name: Required value".into()],
            ),
            (
                json!({"spec": {"containers": [{"name": "tensorflow", "image": "tf", "ports": [
                    {"name": "tfjob-port", "containerPort": 2222},
                    {"name": "tfjob-port", "containerPort": 2223},
                    {"name": "Metrics_Port", "containerPort": 0, "protocol": "tcp"},
                    {"containerPort": 70000, "hostPort": -1},
                ]}]}}),
                vec![
                    r#"t.spec.containers[0].ports[1].name: Duplicate value: "tfjob-port""#.into(),
                    r#"t.spec.containers[0].ports[2].name: Invalid value: "Metrics_Port": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"#.into(),
                    "t.spec.containers[0].ports[2].containerPort: Required value".into(),
                    r#"t.spec.containers[0].ports[2].protocol: Unsupported value: "tcp": supported values: "SCTP", "TCP", "UDP""#.into(),
                    "t.spec.containers[0].ports[3].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                    "t.spec.containers[0].ports[3].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive".into(),
                ],
            ),
            (
                json!({"spec": {"volumes": [{"name": "Data", "emptyDir": {}}, {"name": "logs"},
                    {"name": "cache", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}],
                    "containers": [{"name": "tensorflow", "image": "tf", "volumeMounts": [
                        {"name": "logs", "mountPath": "/logs"},
                        {"name": "cache", "mountPath": "/logs"}]}]}}),
                vec![
                    format!(r#"t.spec.volumes[0].name: Invalid value: "Data": {LABEL_RULE}"#),
                    "t.spec.volumes[1]: Required value: must specify a volume type".into(),
                    r#"t.spec.volumes[3].name: Duplicate value: "cache""#.into(),
                    r#"t.spec.containers[0].volumeMounts[0].name: Not found: "logs""#.into(),
                    r#"t.spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/logs": must be unique"#.into(),
                ],
            ),
            (
                json!({"spec": {"containers": [{"name": "tensorflow", "image": "tf",
                    "env": [{"name": "A=B"}, {"name": ""}, {"name": "my.var-1"}]}]}}),
                vec![
                    r#"t.spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='"#.into(),
                    "t.spec.containers[0].env[1].name: Required value".into(),
                ],
            ),
            (
                json!({"metadata": {"labels": {"team/": "ml", "app": "a b"}}, "spec": {"containers": [tf()]}}),
                vec![
                    r#"t.metadata.labels: Invalid value: "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"#.into(),
                    r#"t.metadata.labels: Invalid value: "team/": name part must be non-empty"#.into(),
                    r#"t.metadata.labels: Invalid value: "team/": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#.into(),
                ],
            ),
            (
                json!({"spec": {"containers": [{"name": "tensorflow", "image": "tf",
                    "securityContext": {"windowsOptions": {"hostProcess": true}}}, {"name": "b", "image": "b"}]}}),
                vec![
                    r#"t.spec: Invalid value: "": If pod contains any hostProcess containers then all containers must be HostProcess containers"#.into(),
                    "t.spec.hostNetwork: Invalid value: false: hostNetwork must be true if pod contains any hostProcess containers".into(),
                ],
            ),
            (
                json!({"metadata": {"annotations": {
                    "container.apparmor.security.beta.kubernetes.io/trainer": "unconfined",
                    "container.apparmor.security.beta.kubernetes.io/tensorflow": "docker/default"}},
                    "spec": {"containers": [tf()]}}),
                vec![
                    r#"t.metadata.annotations[container.apparmor.security.beta.kubernetes.io/tensorflow]: Invalid value: "docker/default": invalid AppArmor profile name: "docker/default""#.into(),
                    r#"t.metadata.annotations[container.apparmor.security.beta.kubernetes.io/trainer]: Invalid value: "trainer": container not found"#.into(),
                ],
            ),
            (
                json!({"metadata": {"annotations": {"notes": "x".repeat(258_043)}}, "spec": {"containers": [tf()]}}),
                vec![],
            ),
            (
                json!({"metadata": {"annotations": {"notes": "x".repeat(258_044)}}, "spec": {"containers": [tf()]}}),
                vec!["t.metadata.annotations: Too long: may not be more than 258048 bytes: kube-apiserver allows 262144 bytes of annotations on a pod, of which the controller keeps 4096 for its own".into()],
            ),
            (
                json!({"spec": {"containers": [{"name": "tensorflow", "image": "tf",
                    "securityContext": {"procMount": "Unmasked"}}],
                    "initContainers": [{"name": "init", "image": "i", "securityContext": {"procMount": "Masked"}}]}}),
                vec![
                    r#"t.spec.containers[0].securityContext.procMount: Invalid value: "Unmasked": `hostUsers` must be false to use `Unmasked`"#.into(),
                    r#"t.spec.initContainers[0].securityContext.procMount: Unsupported value: "Masked": supported values: "Default", "Unmasked""#.into(),
                ],
            ),
            (
                json!({"spec": {"hostNetwork": true, "securityContext": {"windowsOptions": {"hostProcess": true}},
                    "containers": [tf()]}}),
                vec![],
            ),
        ];
        for (template, expected) in table {
            assert_eq!(errors_of(template.clone()), expected, "{template}");
        }
    }
}
