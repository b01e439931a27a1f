//! PodSecurity admission, as kube-apiserver v1.37.2 enforces it on pod
//! creation (`k8s.io/pod-security-admission`): a namespace's
//! `pod-security.kubernetes.io/enforce` label names the level (`privileged`,
//! `baseline`, `restricted`; any other value counts as `restricted`) and
//! `pod-security.kubernetes.io/enforce-version` the version (`latest`, the
//! default, or `v1.N`; anything else counts as `latest`). A pod that fails
//! a check of the level gets 403 `pods "<name>" is forbidden: violates
//! PodSecurity "<level>:<version>": <reason> (<detail>), …`, the failed
//! checks in upstream order (the baseline checks by name, then the
//! restricted ones by name). No namespace, user or runtime class is
//! exempt (kube-apiserver's default configuration), and no default level
//! other than `privileged` is configured.
//!
//! Versions: each check is evaluated as of the namespace's version for
//! what changed since v1.25 (sysctls allowed in v1.27, v1.29, v1.32 and
//! v1.37; `container_engine_t` in v1.31; probe and lifecycle hosts from
//! v1.34; the `restricted` procMount check and user-namespace relaxations
//! from v1.35); versions before v1.25 are evaluated as v1.25, versions after
//! v1.37 as v1.37 (docs/src/testing/simulated-clusters.md).
//!
//! Before admission, as kube-apiserver's pod strategy does on create, a
//! container that sets no AppArmor profile gets the one its deprecated
//! `container.apparmor.security.beta.kubernetes.io/<container>` annotation
//! names ([`sync_app_armor`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// The namespace label naming the level to enforce.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// The namespace label naming the version of the level.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";

const APP_ARMOR_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The newest policy version this emulates, and the oldest.
const NEWEST_MINOR: u32 = 37;
const OLDEST_MINOR: u32 = 25;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Privileged,
    Baseline,
    Restricted,
}

/// The level and version a namespace's labels enforce, and the words
/// (`baseline:latest`) admission uses for them.
struct Policy {
    level: Level,
    minor: u32,
    words: String,
}

fn policy(labels: &BTreeMap<String, String>) -> Policy {
    let (level, level_words) = match labels.get(ENFORCE_LABEL).map(String::as_str) {
        None | Some("privileged") => (Level::Privileged, "privileged"),
        Some("baseline") => (Level::Baseline, "baseline"),
        Some(_) => (Level::Restricted, "restricted"),
    };
    let version = labels
        .get(ENFORCE_VERSION_LABEL)
        .and_then(|v| parse_minor(v));
    let (minor, version_words) = match version {
        Some(minor) => (minor, format!("v1.{minor}")),
        None => (NEWEST_MINOR, "latest".to_string()),
    };
    Policy {
        level,
        minor: minor.clamp(OLDEST_MINOR, NEWEST_MINOR),
        words: format!("{level_words}:{version_words}"),
    }
}

/// The Pod Security labels a namespace may carry and what each must be.
const LEVEL_LABELS: [&str; 3] = [
    ENFORCE_LABEL,
    "pod-security.kubernetes.io/audit",
    "pod-security.kubernetes.io/warn",
];

/// The causes kube-apiserver gives for a namespace's Pod Security labels
/// that are not a level or a version (PodSecurity admission refuses such a
/// namespace on create, and on an update that changes what is wrong).
pub fn namespace_label_causes(labels: &BTreeMap<String, String>) -> Vec<crate::validate::Cause> {
    let mut causes = Vec::new();
    for level_label in LEVEL_LABELS {
        let checks = [
            (
                level_label.to_string(),
                "must be one of privileged, baseline, restricted",
            ),
            (
                format!("{level_label}-version"),
                "must be \"latest\" or \"v1.x\"",
            ),
        ];
        for (label, rule) in checks {
            let Some(value) = labels.get(&label) else {
                continue;
            };
            let valid = if label.ends_with("-version") {
                value == "latest" || parse_minor(value).is_some()
            } else {
                matches!(value.as_str(), "privileged" | "baseline" | "restricted")
            };
            if !valid {
                causes.push(crate::validate::Cause {
                    reason: "FieldValueInvalid",
                    field: format!("metadata.labels[{label}]"),
                    message: format!(
                        "Invalid value: {}: {rule}",
                        serde_json::to_string(value).unwrap_or_default()
                    ),
                });
            }
        }
    }
    causes
}

/// `v1.N` (no leading zero but for `v1.0`), as upstream's pattern.
fn parse_minor(version: &str) -> Option<u32> {
    let minor: u32 = version.strip_prefix("v1.")?.parse().ok()?;
    (version == format!("v1.{minor}")).then_some(minor)
}

/// Copies each container's deprecated AppArmor annotation into its
/// `securityContext.appArmorProfile` when it sets none and the profile
/// differs from the pod's (kube-apiserver's `applyAppArmorVersionSkew`).
pub fn sync_app_armor(pod: &mut Value) {
    if pod.pointer("/spec/os/name").and_then(Value::as_str) == Some("windows") {
        return;
    }
    let annotations = crate::rules::string_map(pod.pointer("/metadata/annotations"));
    let pod_profile = pod
        .pointer("/spec/securityContext/appArmorProfile")
        .cloned();
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let name = container["name"].as_str().unwrap_or_default();
            let Some(annotation) = annotations.get(&format!("{APP_ARMOR_PREFIX}{name}")) else {
                continue;
            };
            if container
                .pointer("/securityContext/appArmorProfile")
                .is_some_and(|p| !p.is_null())
            {
                continue;
            }
            let field = match annotation.as_str() {
                "unconfined" => json!({"type": "Unconfined"}),
                "runtime/default" => json!({"type": "RuntimeDefault"}),
                other => match other.strip_prefix("localhost/") {
                    Some(profile) if !profile.is_empty() => {
                        json!({"type": "Localhost", "localhostProfile": profile})
                    }
                    _ => continue,
                },
            };
            if pod_profile.as_ref() == Some(&field) {
                continue;
            }
            if !container["securityContext"].is_object() {
                container["securityContext"] = json!({});
            }
            container["securityContext"]["appArmorProfile"] = field;
        }
    }
}

/// The 403 message for a pod that fails its namespace's level; None if
/// admitted.
pub fn refusal(
    pod: &Value,
    name: &str,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<String> {
    let policy = policy(namespace_labels);
    let failed = failed_checks(pod, policy.level, policy.minor);
    (!failed.is_empty()).then(|| {
        format!(
            "pods \"{name}\" is forbidden: violates PodSecurity \"{}\": {}",
            policy.words,
            failed.join(", ")
        )
    })
}

/// The failed checks of `level` at `minor`, each `reason (detail)`.
fn failed_checks(pod: &Value, level: Level, minor: u32) -> Vec<String> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let view = Pod::new(pod, minor);
    let restricted = level == Level::Restricted;
    let procmount_restricted = restricted && minor >= 35;
    type CheckFn = fn(&Pod) -> Option<(String, String)>;
    // (runs at baseline, runs at restricted, check), in upstream order.
    let checks: [(bool, bool, CheckFn); 19] = [
        (true, true, app_armor),
        (true, false, |p| capabilities(p, false)),
        (true, true, host_namespaces),
        (true, false, host_path),
        (true, true, host_ports),
        (minor >= 34, minor >= 34, probe_hosts),
        (true, true, privileged),
        (true, !procmount_restricted, |p| {
            proc_mount(p, p.minor >= 35)
        }),
        (true, true, se_linux),
        (true, false, |p| seccomp(p, false)),
        (true, true, sysctls),
        (true, true, host_process),
        (false, true, allow_privilege_escalation),
        (false, true, |p| capabilities(p, true)),
        (false, procmount_restricted, |p| proc_mount(p, false)),
        (false, true, restricted_volumes),
        (false, true, run_as_non_root),
        (false, true, run_as_user),
        (false, true, |p| seccomp(p, true)),
    ];
    checks
        .iter()
        .filter(|(baseline, at_restricted, _)| {
            if restricted {
                *at_restricted
            } else {
                *baseline
            }
        })
        .filter_map(|(_, _, check)| check(&view))
        .map(|(reason, detail)| {
            if detail.is_empty() {
                reason
            } else {
                format!("{reason} ({detail})")
            }
        })
        .collect()
}

struct Pod<'a> {
    annotations: BTreeMap<String, String>,
    spec: &'a Value,
    /// Init containers, then containers.
    containers: Vec<&'a Value>,
    minor: u32,
}

impl<'a> Pod<'a> {
    fn new(pod: &'a Value, minor: u32) -> Pod<'a> {
        let spec = &pod["spec"];
        let listed = |key: &str| {
            spec.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        };
        Pod {
            annotations: crate::rules::string_map(pod.pointer("/metadata/annotations")),
            spec,
            containers: listed("initContainers")
                .chain(listed("containers"))
                .collect(),
            minor,
        }
    }

    fn pod_context(&self, path: &str) -> Option<&'a Value> {
        self.spec
            .pointer(&format!("/securityContext{path}"))
            .filter(|v| !v.is_null())
    }

    fn windows(&self) -> bool {
        self.spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
    }

    /// `hostUsers: false`, which relaxes some checks from v1.35.
    fn user_namespace_relaxed(&self) -> bool {
        self.minor >= 35 && self.spec.get("hostUsers").and_then(Value::as_bool) == Some(false)
    }

    /// Containers for which `pick` gives Some, with what it gave.
    fn picked<T>(&self, pick: impl Fn(&'a Value) -> Option<T>) -> Vec<(&'a str, T)> {
        self.containers
            .iter()
            .filter_map(|c| Some((c["name"].as_str().unwrap_or_default(), pick(c)?)))
            .collect()
    }
}

fn context<'v>(container: &'v Value, path: &str) -> Option<&'v Value> {
    container
        .pointer(&format!("/securityContext{path}"))
        .filter(|v| !v.is_null())
}

fn quote_all<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural<'s>(one: &'s str, many: &'s str, n: usize) -> &'s str {
    if n == 1 { one } else { many }
}

fn named<T>(containers: &[(&str, T)]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", containers.len()),
        quote_all(containers.iter().map(|(n, _)| *n))
    )
}

fn refused(reason: &str, detail: String) -> Option<(String, String)> {
    Some((reason.to_string(), detail))
}

fn app_armor(p: &Pod) -> Option<(String, String)> {
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(t) = p
        .pod_context("/appArmorProfile/type")
        .and_then(Value::as_str)
        && !allowed(t)
    {
        setters.push("pod".to_string());
        values.insert(t.to_string());
    }
    let bad = p.picked(|c| {
        context(c, "/appArmorProfile")
            .map(|profile| profile["type"].as_str().unwrap_or_default())
            .filter(|t| !allowed(t))
    });
    values.extend(bad.iter().map(|(_, t)| t.to_string()));
    if !bad.is_empty() {
        setters.push(named(&bad));
    }
    let mut listed: Vec<String> = values.into_iter().collect();
    let annotations: Vec<String> = p
        .annotations
        .iter()
        .filter(|(k, v)| {
            k.starts_with(APP_ARMOR_PREFIX)
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", serde_json::to_string(v).unwrap_or_default()))
        .collect();
    if !annotations.is_empty() {
        setters.push(plural("annotation", "annotations", annotations.len()).to_string());
        listed.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    refused(
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            listed.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            quote_all(&listed)
        ),
    )
}

const DEFAULT_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// `capabilities_baseline`, or `capabilities_restricted` (drop ALL, add
/// NET_BIND_SERVICE at most; Windows pods exempt).
fn capabilities(p: &Pod, restricted: bool) -> Option<(String, String)> {
    if restricted && p.windows() {
        return None;
    }
    let allowed = |cap: &str| {
        if restricted {
            cap == "NET_BIND_SERVICE"
        } else {
            DEFAULT_CAPABILITIES.contains(&cap)
        }
    };
    let adding = p.picked(|c| {
        let beyond: Vec<String> = strings(context(c, "/capabilities/add"))
            .into_iter()
            .filter(|cap| !allowed(cap))
            .map(str::to_string)
            .collect();
        (!beyond.is_empty()).then_some(beyond)
    });
    let added: BTreeSet<&String> = adding.iter().flat_map(|(_, caps)| caps).collect();
    let adding_detail = (!adding.is_empty()).then(|| {
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            named(&adding),
            quote_all(added)
        )
    });
    if !restricted {
        return refused("non-default capabilities", adding_detail?);
    }
    let no_drop_all =
        p.picked(|c| (!strings(context(c, "/capabilities/drop")).contains(&"ALL")).then_some(()));
    let mut details = Vec::new();
    if !no_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            named(&no_drop_all)
        ));
    }
    details.extend(adding_detail);
    (!details.is_empty())
        .then(|| refused("unrestricted capabilities", details.join("; ")))
        .flatten()
}

fn host_namespaces(p: &Pod) -> Option<(String, String)> {
    let used: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|key| p.spec.get(*key).and_then(Value::as_bool) == Some(true))
        .map(|key| format!("{key}=true"))
        .collect();
    (!used.is_empty())
        .then(|| refused("host namespaces", used.join(", ")))
        .flatten()
}

fn volumes<'a>(p: &Pod<'a>) -> &'a [Value] {
    p.spec
        .get("volumes")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn host_path(p: &Pod) -> Option<(String, String)> {
    let names: Vec<&str> = volumes(p)
        .iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(|v| v["name"].as_str().unwrap_or_default())
        .collect();
    (!names.is_empty())
        .then(|| {
            refused(
                "hostPath volumes",
                format!(
                    "{} {}",
                    plural("volume", "volumes", names.len()),
                    quote_all(&names)
                ),
            )
        })
        .flatten()
}

fn host_ports(p: &Pod) -> Option<(String, String)> {
    let using = p.picked(|c| {
        let ports: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|port| port["hostPort"].as_i64())
            .filter(|h| *h != 0)
            .map(|h| h.to_string())
            .collect();
        (!ports.is_empty()).then_some(ports)
    });
    if using.is_empty() {
        return None;
    }
    let ports: BTreeSet<&String> = using.iter().flat_map(|(_, p)| p).collect();
    refused(
        "hostPort",
        format!(
            "{} {} {} {}",
            named(&using),
            plural("uses", "use", using.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.into_iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    )
}

fn probe_hosts(p: &Pod) -> Option<(String, String)> {
    let hosts_of = |handler: &Value| -> Vec<String> {
        ["/httpGet/host", "/tcpSocket/host"]
            .into_iter()
            .filter_map(|path| handler.pointer(path).and_then(Value::as_str))
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect()
    };
    let using = p.picked(|c| {
        let hosts: Vec<String> = ["livenessProbe", "readinessProbe", "startupProbe"]
            .into_iter()
            .filter_map(|probe| c.get(probe))
            .chain(
                ["/lifecycle/postStart", "/lifecycle/preStop"]
                    .into_iter()
                    .filter_map(|path| c.pointer(path)),
            )
            .flat_map(hosts_of)
            .collect();
        (!hosts.is_empty()).then_some(hosts)
    });
    if using.is_empty() {
        return None;
    }
    let containers: BTreeSet<&str> = using.iter().map(|(n, _)| *n).collect();
    let hosts: BTreeSet<&String> = using.iter().flat_map(|(_, h)| h).collect();
    refused(
        "probe or lifecycle host",
        format!(
            "{} {} {} {} {}",
            plural("container", "containers", containers.len()),
            quote_all(&containers),
            plural("uses", "use", containers.len()),
            plural(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            quote_all(hosts)
        ),
    )
}

fn privileged(p: &Pod) -> Option<(String, String)> {
    let bad = p.picked(|c| {
        (context(c, "/privileged").and_then(Value::as_bool) == Some(true)).then_some(())
    });
    (!bad.is_empty())
        .then(|| {
            refused(
                "privileged",
                format!(
                    "{} must not set securityContext.privileged=true",
                    named(&bad)
                ),
            )
        })
        .flatten()
}

fn proc_mount(p: &Pod, relaxed_in_user_namespace: bool) -> Option<(String, String)> {
    if relaxed_in_user_namespace && p.user_namespace_relaxed() {
        return None;
    }
    let bad = p.picked(|c| {
        context(c, "/procMount")
            .and_then(Value::as_str)
            .filter(|m| *m != "Default")
    });
    if bad.is_empty() {
        return None;
    }
    let types: BTreeSet<&str> = bad.iter().map(|(_, t)| *t).collect();
    refused(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            named(&bad),
            quote_all(types)
        ),
    )
}

fn se_linux(p: &Pod) -> Option<(String, String)> {
    let allowed_type = |t: &str| {
        matches!(
            t,
            "" | "container_t" | "container_init_t" | "container_kvm_t"
        ) || (p.minor >= 31 && t == "container_engine_t")
    };
    let mut types = BTreeSet::new();
    let mut user = false;
    let mut role = false;
    let mut fails = |options: &Value| {
        let text = |key: &str| options[key].as_str().unwrap_or_default().to_string();
        let mut bad = false;
        if !allowed_type(&text("type")) {
            types.insert(text("type"));
            bad = true;
        }
        if !text("user").is_empty() {
            user = true;
            bad = true;
        }
        if !text("role").is_empty() {
            role = true;
            bad = true;
        }
        bad
    };
    let mut setters = Vec::new();
    if p.pod_context("/seLinuxOptions").is_some_and(&mut fails) {
        setters.push("pod".to_string());
    }
    let bad: Vec<(&str, ())> = p
        .containers
        .iter()
        .filter(|c| context(c, "/seLinuxOptions").is_some_and(&mut fails))
        .map(|c| (c["name"].as_str().unwrap_or_default(), ()))
        .collect();
    if !bad.is_empty() {
        setters.push(named(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        what.push(format!(
            "{} {}",
            plural("type", "types", types.len()),
            quote_all(&types)
        ));
    }
    if user {
        what.push("user may not be set".to_string());
    }
    if role {
        what.push("role may not be set".to_string());
    }
    refused(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            what.join("; ")
        ),
    )
}

fn seccomp(p: &Pod, restricted: bool) -> Option<(String, String)> {
    if restricted && p.windows() {
        return None;
    }
    let valid = |t: &str| t == "Localhost" || t == "RuntimeDefault";
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = p.pod_context("/seccompProfile") {
        let t = profile["type"].as_str().unwrap_or_default();
        if valid(t) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t.to_string());
        }
    }
    let explicit = p.picked(|c| {
        context(c, "/seccompProfile")
            .map(|profile| profile["type"].as_str().unwrap_or_default())
            .filter(|t| !valid(t))
    });
    values.extend(explicit.iter().map(|(_, t)| t.to_string()));
    if !explicit.is_empty() {
        setters.push(named(&explicit));
    }
    if !setters.is_empty() {
        return refused(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                quote_all(&values)
            ),
        );
    }
    if !restricted || pod_set {
        return None;
    }
    let implicit = p.picked(|c| context(c, "/seccompProfile").is_none().then_some(()));
    (!implicit.is_empty())
        .then(|| {
            refused(
                "seccompProfile",
                format!(
                    "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                    named(&implicit)
                ),
            )
        })
        .flatten()
}

/// The sysctls `baseline` allows, by the version that allowed them.
const SYSCTLS_SINCE: [(u32, &str); 14] = [
    (0, "kernel.shm_rmid_forced"),
    (0, "net.ipv4.ip_local_port_range"),
    (0, "net.ipv4.tcp_syncookies"),
    (0, "net.ipv4.ping_group_range"),
    (0, "net.ipv4.ip_unprivileged_port_start"),
    (27, "net.ipv4.ip_local_reserved_ports"),
    (29, "net.ipv4.tcp_keepalive_time"),
    (29, "net.ipv4.tcp_fin_timeout"),
    (29, "net.ipv4.tcp_keepalive_intvl"),
    (29, "net.ipv4.tcp_keepalive_probes"),
    (32, "net.ipv4.tcp_rmem"),
    (32, "net.ipv4.tcp_wmem"),
    (37, "net.ipv4.tcp_slow_start_after_idle"),
    (37, "net.ipv4.tcp_notsent_lowat"),
];

fn sysctls(p: &Pod) -> Option<(String, String)> {
    let allowed = |name: &str| {
        SYSCTLS_SINCE
            .iter()
            .any(|(since, s)| *s == name && p.minor >= *since)
    };
    let forbidden: Vec<&str> = p
        .pod_context("/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|name| !allowed(name))
        .collect();
    (!forbidden.is_empty())
        .then(|| refused("forbidden sysctls", forbidden.join(", ")))
        .flatten()
}

fn host_process(p: &Pod) -> Option<(String, String)> {
    let mut setters = Vec::new();
    if p.pod_context("/windowsOptions/hostProcess")
        .and_then(Value::as_bool)
        == Some(true)
    {
        setters.push("pod".to_string());
    }
    let bad = p.picked(|c| {
        (context(c, "/windowsOptions/hostProcess").and_then(Value::as_bool) == Some(true))
            .then_some(())
    });
    if !bad.is_empty() {
        setters.push(named(&bad));
    }
    (!setters.is_empty())
        .then(|| {
            refused(
                "hostProcess",
                format!(
                    "{} must not set securityContext.windowsOptions.hostProcess=true",
                    setters.join(" and ")
                ),
            )
        })
        .flatten()
}

fn allow_privilege_escalation(p: &Pod) -> Option<(String, String)> {
    if p.windows() {
        return None;
    }
    let bad = p.picked(|c| {
        (context(c, "/allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false))
            .then_some(())
    });
    (!bad.is_empty())
        .then(|| {
            refused(
                "allowPrivilegeEscalation != false",
                format!(
                    "{} must set securityContext.allowPrivilegeEscalation=false",
                    named(&bad)
                ),
            )
        })
        .flatten()
}

const ALLOWED_VOLUME_TYPES: [&str; 9] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The volume types upstream names, in the order it looks for them.
const NAMED_VOLUME_TYPES: [&str; 21] = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(p: &Pod) -> Option<(String, String)> {
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for volume in volumes(p) {
        let has = |key: &str| volume.get(key).is_some_and(|v| !v.is_null());
        if ALLOWED_VOLUME_TYPES.iter().any(|t| has(t)) {
            continue;
        }
        names.push(volume["name"].as_str().unwrap_or_default());
        types.insert(
            NAMED_VOLUME_TYPES
                .iter()
                .find(|t| has(t))
                .copied()
                .unwrap_or("unknown"),
        );
    }
    (!names.is_empty())
        .then(|| {
            refused(
                "restricted volume types",
                format!(
                    "{} {} {} {} {}",
                    plural("volume", "volumes", names.len()),
                    quote_all(&names),
                    plural("uses", "use", names.len()),
                    plural(
                        "restricted volume type",
                        "restricted volume types",
                        types.len()
                    ),
                    quote_all(&types)
                ),
            )
        })
        .flatten()
}

fn run_as_non_root(p: &Pod) -> Option<(String, String)> {
    if p.user_namespace_relaxed() {
        return None;
    }
    let pod = p.pod_context("/runAsNonRoot").and_then(Value::as_bool);
    let mut setters = Vec::new();
    if pod == Some(false) {
        setters.push("pod".to_string());
    }
    let explicit = p.picked(|c| {
        (context(c, "/runAsNonRoot").and_then(Value::as_bool) == Some(false)).then_some(())
    });
    if !explicit.is_empty() {
        setters.push(named(&explicit));
    }
    if !setters.is_empty() {
        return refused(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    let implicit =
        p.picked(|c| (context(c, "/runAsNonRoot").is_none() && pod != Some(true)).then_some(()));
    (!implicit.is_empty())
        .then(|| {
            refused(
                "runAsNonRoot != true",
                format!(
                    "pod or {} must set securityContext.runAsNonRoot=true",
                    named(&implicit)
                ),
            )
        })
        .flatten()
}

fn run_as_user(p: &Pod) -> Option<(String, String)> {
    if p.user_namespace_relaxed() {
        return None;
    }
    let mut setters = Vec::new();
    if p.pod_context("/runAsUser").and_then(Value::as_i64) == Some(0) {
        setters.push("pod".to_string());
    }
    let bad =
        p.picked(|c| (context(c, "/runAsUser").and_then(Value::as_i64) == Some(0)).then_some(()));
    if !bad.is_empty() {
        setters.push(named(&bad));
    }
    (!setters.is_empty())
        .then(|| {
            refused(
                "runAsUser=0",
                format!("{} must not set runAsUser=0", setters.join(" and ")),
            )
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(level: &str, version: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([(ENFORCE_LABEL.to_string(), level.to_string())]);
        if let Some(version) = version {
            labels.insert(ENFORCE_VERSION_LABEL.to_string(), version.to_string());
        }
        labels
    }

    #[test]
    fn baseline_refuses_with_kube_apiservers_words() {
        let mut pod = json!({
            "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/tensorflow": "unconfined"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf",
                "securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}}}]}});
        sync_app_armor(&mut pod);
        assert_eq!(
            refusal(&pod, "p", &labels("baseline", None)).as_deref(),
            Some(
                "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": forbidden AppArmor profiles (container \"tensorflow\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/tensorflow=\"unconfined\"\"), seLinuxOptions (container \"tensorflow\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set)"
            )
        );
        assert_eq!(refusal(&pod, "p", &labels("privileged", None)), None);
        assert_eq!(refusal(&pod, "p", &BTreeMap::new()), None);
    }

    #[test]
    fn a_namespace_with_labels_that_are_no_level_is_invalid() {
        let labels = BTreeMap::from([
            (ENFORCE_LABEL.to_string(), "Restricted".to_string()),
            (ENFORCE_VERSION_LABEL.to_string(), "1.30".to_string()),
            (
                "pod-security.kubernetes.io/warn".to_string(),
                "baseline".to_string(),
            ),
        ]);
        let causes: Vec<String> = namespace_label_causes(&labels)
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            causes,
            [
                r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "Restricted": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "1.30": must be "latest" or "v1.x""#,
            ]
        );
    }

    #[test]
    fn versions_change_what_is_allowed() {
        let pod = json!({"spec": {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}]},
            "containers": [{"name": "c", "image": "i"}]}});
        assert_eq!(refusal(&pod, "p", &labels("baseline", Some("v1.32"))), None);
        assert_eq!(
            refusal(&pod, "p", &labels("baseline", Some("v1.31"))).as_deref(),
            Some(
                "pods \"p\" is forbidden: violates PodSecurity \"baseline:v1.31\": forbidden sysctls (net.ipv4.tcp_rmem)"
            )
        );
        assert_eq!(
            refusal(
                &json!({"spec": {"containers": [{"name": "c", "image": "i",
                "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true,
                    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}]}}),
                "p",
                &labels("Restricted", Some("v1.030"))
            ),
            None,
            "an unknown level is restricted, an unknown version latest"
        );
    }
}
