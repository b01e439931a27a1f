//! What kube-apiserver's pod validation refuses on create (422 Invalid),
//! for the fields the simulator's users send (`ValidatePodSpec` of
//! `pkg/apis/core/validation`, v1.37.2), worded as kube-apiserver words it:
//!
//! - `metadata.labels`: keys and values; `metadata.annotations`: at most
//!   256 KiB in all;
//! - `metadata.annotations[container.apparmor.security.beta.kubernetes.io/*]`:
//!   naming a container, with a known profile;
//! - `spec.volumes[*]`: a volume type, `name` required, a DNS-1123 label,
//!   unique;
//! - `spec.containers[*]` (at least one) and `spec.initContainers[*]`, one
//!   name space: `name` required, a DNS-1123 label, unique (a clash is
//!   reported on the init container); `image` required; `ports[*]`: `name`
//!   an IANA_SVC_NAME unique in its container, `containerPort` given and
//!   1–65535, `hostPort` 1–65535, `protocol` TCP, UDP or SCTP;
//!   `env[*].name` required, printable ASCII without `=`;
//!   `volumeMounts[*]`: `name` required and a valid volume's, `mountPath`
//!   required and unique; `securityContext.procMount` `Default`, or
//!   `Unmasked` with `hostUsers: false`;
//! - Windows host-process pods: all containers host processes,
//!   `hostNetwork` true.
//!
//! Everything else of pod validation (resources, probes, affinity,
//! tolerations, security-context ranges, volume sources, …) is not checked
//! (docs/src/testing/simulated-clusters.md, "Known differences").

use std::collections::BTreeSet;

use serde_json::Value;

use crate::validate::Cause;

const REQUIRED: &str = "FieldValueRequired";
const INVALID: &str = "FieldValueInvalid";
const DUPLICATE: &str = "FieldValueDuplicate";
const NOT_FOUND: &str = "FieldValueNotFound";
const NOT_SUPPORTED: &str = "FieldValueNotSupported";
const TOO_LONG: &str = "FieldValueTooLong";

const LABEL_FORMAT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const LABEL_KEY_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

/// Every cause kube-apiserver gives for the pod, in its order.
pub fn validate(pod: &Value) -> Vec<Cause> {
    let mut causes = Causes::default();
    for (key, value) in pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for message in label_key_errors(key) {
            causes.invalid("metadata.labels", &quoted(key), &message);
        }
        let value = value.as_str().unwrap_or_default();
        for message in label_value_errors(value) {
            causes.invalid("metadata.labels", &quoted(value), &message);
        }
    }
    let spec = &pod["spec"];
    let annotations = crate::rules::string_map(pod.pointer("/metadata/annotations"));
    if annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>()
        > 256 * 1024
    {
        causes.push(
            TOO_LONG,
            "metadata.annotations",
            "Too long: may not be more than 262144 bytes".to_string(),
        );
    }
    app_armor_annotations(pod, spec, &mut causes);
    let volumes = volumes(spec, &mut causes);
    let host_users = spec.get("hostUsers").and_then(Value::as_bool) != Some(false);
    let containers = list(spec, "containers");
    if containers.is_empty() {
        causes.required("spec.containers", "");
    }
    let mut names = BTreeSet::new();
    for (i, container) in containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        check_container(container, &path, &volumes, host_users, &mut causes);
        let name = str_of(container, "name");
        if !names.insert(name) {
            causes.duplicate(&format!("{path}.name"), name);
        }
    }
    for (i, container) in list(spec, "initContainers").iter().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        check_container(container, &path, &volumes, host_users, &mut causes);
        let name = str_of(container, "name");
        if names.contains(name) {
            causes.duplicate(&format!("{path}.name"), name);
        } else if !name.is_empty() {
            names.insert(name);
        }
    }
    host_process(spec, &mut causes);
    causes.0
}

/// `ValidateAppArmorPodAnnotations`: each deprecated per-container
/// AppArmor annotation names a container and a known profile.
fn app_armor_annotations(pod: &Value, spec: &Value, causes: &mut Causes) {
    const PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let annotations = crate::rules::string_map(pod.pointer("/metadata/annotations"));
    for (key, profile) in &annotations {
        let Some(container) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let field = format!("metadata.annotations[{key}]");
        let exists = ["containers", "initContainers", "ephemeralContainers"]
            .iter()
            .flat_map(|key| list(spec, key))
            .any(|c| str_of(c, "name") == container);
        if !exists {
            causes.invalid(&field, &quoted(container), "container not found");
        }
        let known = matches!(profile.as_str(), "" | "runtime/default" | "unconfined")
            || profile.starts_with("localhost/");
        if !known {
            causes.invalid(
                &field,
                &quoted(profile),
                &format!("invalid AppArmor profile name: {}", quoted(profile)),
            );
        }
    }
}

#[derive(Default)]
struct Causes(Vec<Cause>);

impl Causes {
    fn push(&mut self, reason: &'static str, field: &str, message: String) {
        self.0.push(Cause {
            reason,
            field: field.to_string(),
            message,
        });
    }

    fn required(&mut self, field: &str, detail: &str) {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        self.push(REQUIRED, field, message);
    }

    /// `value` as kube prints it: strings quoted, numbers bare.
    fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.push(INVALID, field, format!("Invalid value: {value}: {detail}"));
    }

    fn duplicate(&mut self, field: &str, value: &str) {
        self.push(
            DUPLICATE,
            field,
            format!("Duplicate value: {}", quoted(value)),
        );
    }
}

fn quoted(value: &str) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn list<'a>(obj: &'a Value, key: &str) -> &'a [Value] {
    obj.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn str_of<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let mut out = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

fn rfc1123_label(value: &str) -> bool {
    let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && ok(bytes[0])
        && ok(bytes[bytes.len() - 1])
        && bytes.iter().all(|b| ok(*b) || *b == b'-')
}

fn dns_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !rfc1123_label(value) {
        if value.split('.').all(rfc1123_label) {
            errors.push("must not contain dots".to_string());
        } else {
            errors.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character",
                LABEL_FORMAT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errors
}

fn qualified_part(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

fn label_key_errors(key: &str) -> Vec<String> {
    let name_rule = || {
        regex_error(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
             with an alphanumeric character",
            LABEL_KEY_FORMAT,
            &["MyName", "my.name", "123-abc"],
        )
    };
    let mut errors = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > 253 {
                    errors.push("prefix part must be no more than 253 characters".to_string());
                }
                if !prefix.split('.').all(rfc1123_label) {
                    errors.push(format!(
                        "prefix part {}",
                        regex_error(
                            "a lowercase RFC 1123 subdomain must consist of lower case \
                             alphanumeric characters, '-' or '.', and must start and end with \
                             an alphanumeric character",
                            &format!("{LABEL_FORMAT}(\\.{LABEL_FORMAT})*"),
                            &["example.com"],
                        )
                    ));
                }
            }
            name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                name_rule()
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_string());
    }
    if !qualified_part(name) {
        errors.push(format!("name part {}", name_rule()));
    }
    errors
}

fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !qualified_part(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
            &format!("({LABEL_KEY_FORMAT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

fn port_name_errors(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > 15 {
        errors.push("must be no more than 15 characters".to_string());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errors.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)".to_string());
    }
    if name.contains("--") {
        errors.push("must not contain consecutive hyphens".to_string());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errors.push("must not begin or end with a hyphen".to_string());
    }
    errors
}

/// The volumes' causes; the names of the volumes without one.
fn volumes(spec: &Value, causes: &mut Causes) -> BTreeSet<String> {
    let mut valid = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for (i, volume) in list(spec, "volumes").iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        let before = causes.0.len();
        let typed = volume
            .as_object()
            .is_some_and(|o| o.iter().any(|(k, v)| k != "name" && !v.is_null()));
        if !typed {
            causes.required(&path, "must specify a volume type");
        }
        let name = str_of(volume, "name");
        let name_path = format!("{path}.name");
        if name.is_empty() {
            causes.required(&name_path, "");
        } else {
            for message in dns_label_errors(name) {
                causes.invalid(&name_path, &quoted(name), &message);
            }
        }
        if !seen.insert(name) {
            causes.duplicate(&name_path, name);
        }
        if causes.0.len() == before {
            valid.insert(name.to_string());
        }
    }
    valid
}

fn check_container(
    container: &Value,
    path: &str,
    volumes: &BTreeSet<String>,
    host_users: bool,
    causes: &mut Causes,
) {
    let name = str_of(container, "name");
    let name_path = format!("{path}.name");
    if name.is_empty() {
        causes.required(&name_path, "");
    } else {
        for message in dns_label_errors(name) {
            causes.invalid(&name_path, &quoted(name), &message);
        }
    }
    if str_of(container, "image").is_empty() {
        causes.required(&format!("{path}.image"), "");
    }
    let mut port_names = BTreeSet::new();
    for (i, port) in list(container, "ports").iter().enumerate() {
        let port_path = format!("{path}.ports[{i}]");
        let port_name = str_of(port, "name");
        if !port_name.is_empty() {
            let field = format!("{port_path}.name");
            let errors = port_name_errors(port_name);
            if !errors.is_empty() {
                for message in errors {
                    causes.invalid(&field, &quoted(port_name), &message);
                }
            } else if !port_names.insert(port_name) {
                causes.duplicate(&field, port_name);
            }
        }
        let number = |key: &str| port.get(key).and_then(Value::as_i64).unwrap_or(0);
        let field = format!("{port_path}.containerPort");
        match number("containerPort") {
            0 => causes.required(&field, ""),
            p if !(1..=65535).contains(&p) => causes.invalid(
                &field,
                &p.to_string(),
                "must be between 1 and 65535, inclusive",
            ),
            _ => {}
        }
        let host_port = number("hostPort");
        if host_port != 0 && !(1..=65535).contains(&host_port) {
            causes.invalid(
                &format!("{port_path}.hostPort"),
                &host_port.to_string(),
                "must be between 1 and 65535, inclusive",
            );
        }
        let protocol = str_of(port, "protocol");
        if !matches!(protocol, "" | "TCP" | "UDP" | "SCTP") {
            causes.push(
                NOT_SUPPORTED,
                &format!("{port_path}.protocol"),
                format!(
                    "Unsupported value: {}: supported values: \"SCTP\", \"TCP\", \"UDP\"",
                    quoted(protocol)
                ),
            );
        }
    }
    for (i, env) in list(container, "env").iter().enumerate() {
        let field = format!("{path}.env[{i}].name");
        let env_name = str_of(env, "name");
        if env_name.is_empty() {
            causes.required(&field, "");
        } else if !env_name
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'=')
        {
            causes.invalid(
                &field,
                &quoted(env_name),
                "a valid environment variable name must consist only of printable ASCII \
                 characters other than '='",
            );
        }
    }
    let mut mount_paths = BTreeSet::new();
    for (i, mount) in list(container, "volumeMounts").iter().enumerate() {
        let mount_path = format!("{path}.volumeMounts[{i}]");
        let volume = str_of(mount, "name");
        if volume.is_empty() {
            causes.required(&format!("{mount_path}.name"), "");
        } else if !volumes.contains(volume) {
            causes.push(
                NOT_FOUND,
                &format!("{mount_path}.name"),
                format!("Not found: {}", quoted(volume)),
            );
        }
        let at = str_of(mount, "mountPath");
        if at.is_empty() {
            causes.required(&format!("{mount_path}.mountPath"), "");
        } else if !mount_paths.insert(at) {
            causes.invalid(
                &format!("{mount_path}.mountPath"),
                &quoted(at),
                "must be unique",
            );
        }
    }
    let field = format!("{path}.securityContext.procMount");
    match container
        .pointer("/securityContext/procMount")
        .and_then(Value::as_str)
    {
        None | Some("Default") => {}
        Some("Unmasked") if host_users => causes.invalid(
            &field,
            "\"Unmasked\"",
            "`hostUsers` must be false to use `Unmasked`",
        ),
        Some("Unmasked") => {}
        Some(other) => causes.push(
            NOT_SUPPORTED,
            &field,
            format!(
                "Unsupported value: {}: supported values: \"Default\", \"Unmasked\"",
                quoted(other)
            ),
        ),
    }
}

/// kube-apiserver's `validateWindowsHostProcessPod` (this simulator, like
/// the real clusters of `hack/real-clusters`, allows privileged pods).
fn host_process(spec: &Value, causes: &mut Causes) {
    let pod = spec
        .pointer("/securityContext/windowsOptions/hostProcess")
        .and_then(Value::as_bool);
    let mut containers = 0;
    let mut host_processes = 0;
    let all = list(spec, "initContainers")
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c))
        .chain(
            list(spec, "containers")
                .iter()
                .enumerate()
                .map(|(i, c)| (format!("spec.containers[{i}]"), c)),
        );
    for (path, container) in all {
        containers += 1;
        let own = container
            .pointer("/securityContext/windowsOptions/hostProcess")
            .and_then(Value::as_bool);
        if let (Some(pod), Some(own)) = (pod, own)
            && pod != own
        {
            causes.invalid(
                &format!("{path}.securityContext.windowsOptions.hostProcess"),
                &own.to_string(),
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
        causes.invalid(
            "spec",
            "\"\"",
            "If pod contains any hostProcess containers then all containers must be HostProcess \
             containers",
        );
    }
    if spec.get("hostNetwork").and_then(Value::as_bool) != Some(true) {
        causes.invalid(
            "spec.hostNetwork",
            "false",
            "hostNetwork must be true if pod contains any hostProcess containers",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(pod: Value) -> Vec<String> {
        validate(&pod)
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn kube_apiserver_refuses_these_pods() {
        let tf = json!({"name": "tensorflow", "image": "tf"});
        assert!(messages(json!({"spec": {"containers": [tf]}})).is_empty());
        assert_eq!(
            messages(json!({"spec": {"containers": [tf, tf], "initContainers": [tf]}})),
            [
                r#"spec.containers[1].name: Duplicate value: "tensorflow""#,
                r#"spec.initContainers[0].name: Duplicate value: "tensorflow""#,
            ]
        );
        assert_eq!(
            messages(json!({"spec": {"containers": [{"name": "Main"}]}})),
            [
                "spec.containers[0].name: Invalid value: \"Main\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.containers[0].image: Required value",
            ]
        );
        assert_eq!(
            messages(
                json!({"spec": {"containers": [{"name": "tensorflow", "image": "tf",
                "ports": [{"name": "p", "containerPort": 1}, {"name": "p", "containerPort": 70000, "protocol": "tcp"}],
                "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}})
            ),
            [
                r#"spec.containers[0].ports[1].name: Duplicate value: "p""#,
                "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                r#"spec.containers[0].ports[1].protocol: Unsupported value: "tcp": supported values: "SCTP", "TCP", "UDP""#,
                r#"spec.containers[0].volumeMounts[0].name: Not found: "data""#,
            ]
        );
        assert_eq!(
            messages(json!({"spec": {}})),
            ["spec.containers: Required value"]
        );
    }
}
