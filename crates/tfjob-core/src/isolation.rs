//! What a job's pods may ask of a member cluster beyond capacity. A home
//! user who may create jobs must not run, on a member, what that member's
//! administrators did not allow: privileged containers, the node's
//! namespaces or filesystem, another service account, a system priority, or
//! tolerating every taint. Each member says what it allows
//! (`MemberCluster.spec.podPolicy`, everything off by default); placement
//! passes over a member that does not allow what the job asks, saying why.
//! It also passes over a member whose namespace for the job enforces a Pod
//! Security Standards level the pods do not meet (the namespace's
//! `pod-security.kubernetes.io/enforce` label, else the member's
//! `podPolicy.defaultPodSecurity`): the member's admission would refuse the
//! pods. The home cluster's own admission governs home. Pure.
//!
//! The Pod Security checks are kube-apiserver v1.37's PodSecurity admission
//! at version `latest` (`k8s.io/pod-security-admission/policy`), all of them
//! (docs/src/api/door.md, "Pod Security"), and a refusal reads as kube-apiserver words it
//! after `violates PodSecurity "<level>:latest": `, so that a job's waiting
//! reason says what the member would have said.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{PodPolicy, PodSecurityLevel};

/// What a job's pods ask for, over all its replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    pub privileged: bool,
    pub host_namespaces: bool,
    pub host_path: bool,
    /// Service accounts other than `default`.
    pub service_accounts: Vec<String>,
    /// Priority classes named `system-…`.
    pub system_priority: Vec<String>,
    /// A toleration without a key that matches every taint.
    pub tolerates_every_taint: bool,
    /// How the first pod that breaks the `baseline` Pod Security level
    /// breaks it, in kube-apiserver's words (see [`pod_security_refusal`]).
    pub breaks_baseline: Option<String>,
    /// The same for the `restricted` level.
    pub breaks_restricted: Option<String>,
}

impl Privileges {
    /// Adds what one pod (a replica's template, or a built pod) asks for.
    pub fn add(&mut self, metadata: &ObjectMeta, spec: &PodSpec) {
        for container in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let context = container.security_context.as_ref();
            if context.and_then(|c| c.privileged).unwrap_or(false) {
                self.privileged = true;
            }
        }
        if spec.host_network.unwrap_or(false)
            || spec.host_pid.unwrap_or(false)
            || spec.host_ipc.unwrap_or(false)
        {
            self.host_namespaces = true;
        }
        if spec.volumes.iter().flatten().any(|v| v.host_path.is_some()) {
            self.host_path = true;
        }
        let account = spec
            .service_account_name
            .as_deref()
            .or(spec.service_account.as_deref());
        if let Some(account) = account.filter(|a| !a.is_empty() && *a != "default")
            && !self.service_accounts.iter().any(|a| a == account)
        {
            self.service_accounts.push(account.to_string());
        }
        if let Some(class) = spec
            .priority_class_name
            .as_deref()
            .filter(|c| c.starts_with("system-"))
            && !self.system_priority.iter().any(|c| c == class)
        {
            self.system_priority.push(class.to_string());
        }
        if spec.tolerations.iter().flatten().any(|t| {
            t.key.as_deref().unwrap_or_default().is_empty()
                && t.operator.as_deref() == Some("Exists")
        }) {
            self.tolerates_every_taint = true;
        }
        if self.breaks_baseline.is_none() {
            self.breaks_baseline = pod_security_refusal(PodSecurityLevel::Baseline, metadata, spec);
        }
        if self.breaks_restricted.is_none() {
            self.breaks_restricted =
                pod_security_refusal(PodSecurityLevel::Restricted, metadata, spec);
        }
    }

    /// Why a namespace enforcing `level` would refuse these pods.
    pub fn refused_at(&self, level: PodSecurityLevel) -> Option<&str> {
        match level {
            PodSecurityLevel::Privileged => None,
            PodSecurityLevel::Baseline => self.breaks_baseline.as_deref(),
            PodSecurityLevel::Restricted => self.breaks_restricted.as_deref(),
        }
    }

    /// Why a member with `policy` may not run these pods; None if it may.
    pub fn refused_by(&self, policy: &PodPolicy) -> Option<String> {
        let field = |name: &str| format!("spec.podPolicy.{name}");
        if self.privileged && !policy.allow_privileged {
            return Some(format!(
                "privileged containers are not allowed ({})",
                field("allowPrivileged")
            ));
        }
        if self.host_namespaces && !policy.allow_host_namespaces {
            return Some(format!(
                "hostNetwork, hostPID and hostIPC are not allowed ({})",
                field("allowHostNamespaces")
            ));
        }
        if self.host_path && !policy.allow_host_path {
            return Some(format!(
                "hostPath volumes are not allowed ({})",
                field("allowHostPath")
            ));
        }
        if let Some(account) = self
            .service_accounts
            .iter()
            .find(|a| !policy.allowed_service_accounts.contains(a))
        {
            return Some(format!(
                "service account {account} is not allowed ({})",
                field("allowedServiceAccounts")
            ));
        }
        if let Some(class) = self
            .system_priority
            .iter()
            .find(|c| !policy.allowed_priority_classes.contains(c))
        {
            return Some(format!(
                "priority class {class} is not allowed ({})",
                field("allowedPriorityClasses")
            ));
        }
        if self.tolerates_every_taint && !policy.allow_tolerating_every_taint {
            return Some(format!(
                "a toleration of every taint is not allowed ({})",
                field("allowToleratingEveryTaint")
            ));
        }
        None
    }
}

/// Why a member with `policy` may not run a job of `namespace`; None if it
/// may.
pub fn namespace_refused(policy: &PodPolicy, namespace: &str) -> Option<String> {
    let listed = &policy.allowed_namespaces;
    (!listed.is_empty() && !listed.iter().any(|n| n == namespace))
        .then(|| format!("namespace {namespace} is not allowed (spec.podPolicy.allowedNamespaces)"))
}

/// Why a member with `policy`, whose namespace `namespace` enforces `level`,
/// would not run a pod of `meta` and `spec`; None if it would. Checked for every pod
/// the controller builds for a member, whatever placement decided earlier
/// (the member's policy may have changed since, or the record the pod is
/// built from was not the one placed).
pub fn pod_refused(
    meta: &ObjectMeta,
    spec: &PodSpec,
    policy: &PodPolicy,
    namespace: &str,
    level: PodSecurityLevel,
) -> Option<String> {
    let mut asked = Privileges::default();
    asked.add(meta, spec);
    namespace_refused(policy, namespace)
        .or_else(|| asked.refused_by(policy))
        .or_else(|| {
            let why = asked.refused_at(level)?;
            Some(format!(
                "namespace {namespace} enforces Pod Security {:?}: {why}",
                level.as_str()
            ))
        })
}

/// The level each namespace enforces, from the namespaces' names and labels;
/// a namespace without the enforce label is left out.
pub fn enforced_levels(
    namespaces: impl IntoIterator<Item = (String, std::collections::BTreeMap<String, String>)>,
) -> std::collections::BTreeMap<String, PodSecurityLevel> {
    namespaces
        .into_iter()
        .filter_map(|(name, labels)| {
            let level = labels.get(PodSecurityLevel::ENFORCE_LABEL)?;
            Some((name, PodSecurityLevel::from_label(level)))
        })
        .collect()
}

/// A Pod Security check that a pod fails: kube-apiserver's
/// `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// What PodSecurity admission says of a pod that fails `level` (after
/// `violates PodSecurity "<level>:latest": `): each failed check as
/// `reason (detail)`, joined with ", ", in kube-apiserver's order; None if
/// the pod meets the level.
pub fn pod_security_refusal(
    level: PodSecurityLevel,
    metadata: &ObjectMeta,
    spec: &PodSpec,
) -> Option<String> {
    let violations = pod_security_violations(level, metadata, spec);
    (!violations.is_empty()).then(|| {
        violations
            .iter()
            .map(|v| {
                if v.detail.is_empty() {
                    v.reason.clone()
                } else {
                    format!("{} ({})", v.reason, v.detail)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// The checks of the Pod Security Standards, as kube-apiserver v1.37's
/// PodSecurity admission (`k8s.io/pod-security-admission/policy`, version
/// `latest`) names them. The order is upstream's: the baseline checks by
/// name, then the restricted ones by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    AppArmorProfile,
    CapabilitiesBaseline,
    HostNamespaces,
    HostPathVolumes,
    HostPorts,
    HostProbesAndHostLifecycle,
    Privileged,
    ProcMount,
    SeLinuxOptions,
    SeccompProfileBaseline,
    Sysctls,
    WindowsHostProcess,
    AllowPrivilegeEscalation,
    CapabilitiesRestricted,
    ProcMountRestricted,
    RestrictedVolumes,
    RunAsNonRoot,
    RunAsUser,
    SeccompProfileRestricted,
}

impl Check {
    const ALL: [Check; 19] = [
        Check::AppArmorProfile,
        Check::CapabilitiesBaseline,
        Check::HostNamespaces,
        Check::HostPathVolumes,
        Check::HostPorts,
        Check::HostProbesAndHostLifecycle,
        Check::Privileged,
        Check::ProcMount,
        Check::SeLinuxOptions,
        Check::SeccompProfileBaseline,
        Check::Sysctls,
        Check::WindowsHostProcess,
        Check::AllowPrivilegeEscalation,
        Check::CapabilitiesRestricted,
        Check::ProcMountRestricted,
        Check::RestrictedVolumes,
        Check::RunAsNonRoot,
        Check::RunAsUser,
        Check::SeccompProfileRestricted,
    ];

    /// Whether `level` runs this check: `baseline` runs the baseline
    /// checks; `restricted` runs the restricted ones and the baseline ones
    /// that no restricted check overrides.
    fn applies_at(self, level: PodSecurityLevel) -> bool {
        let baseline = matches!(
            self,
            Check::AppArmorProfile
                | Check::CapabilitiesBaseline
                | Check::HostNamespaces
                | Check::HostPathVolumes
                | Check::HostPorts
                | Check::HostProbesAndHostLifecycle
                | Check::Privileged
                | Check::ProcMount
                | Check::SeLinuxOptions
                | Check::SeccompProfileBaseline
                | Check::Sysctls
                | Check::WindowsHostProcess
        );
        let overridden_by_restricted = matches!(
            self,
            Check::CapabilitiesBaseline
                | Check::HostPathVolumes
                | Check::ProcMount
                | Check::SeccompProfileBaseline
        );
        match level {
            PodSecurityLevel::Privileged => false,
            PodSecurityLevel::Baseline => baseline,
            PodSecurityLevel::Restricted => !overridden_by_restricted,
        }
    }

    fn run(self, pod: &PodView) -> Option<Violation> {
        match self {
            Check::AppArmorProfile => app_armor_profile(pod),
            Check::CapabilitiesBaseline => capabilities_baseline(pod),
            Check::HostNamespaces => host_namespaces(pod),
            Check::HostPathVolumes => host_path_volumes(pod),
            Check::HostPorts => host_ports(pod),
            Check::HostProbesAndHostLifecycle => host_probes_and_lifecycle(pod),
            Check::Privileged => privileged(pod),
            Check::ProcMount | Check::ProcMountRestricted => {
                proc_mount(pod, self == Check::ProcMount)
            }
            Check::SeLinuxOptions => se_linux_options(pod),
            Check::SeccompProfileBaseline => seccomp_profile(pod, false),
            Check::Sysctls => sysctls(pod),
            Check::WindowsHostProcess => windows_host_process(pod),
            Check::AllowPrivilegeEscalation => allow_privilege_escalation(pod),
            Check::CapabilitiesRestricted => capabilities_restricted(pod),
            Check::RestrictedVolumes => restricted_volumes(pod),
            Check::RunAsNonRoot => run_as_non_root(pod),
            Check::RunAsUser => run_as_user(pod),
            Check::SeccompProfileRestricted => seccomp_profile(pod, true),
        }
    }
}

/// Every check of `level` that the pod fails, in kube-apiserver's order.
pub fn pod_security_violations(
    level: PodSecurityLevel,
    metadata: &ObjectMeta,
    spec: &PodSpec,
) -> Vec<Violation> {
    let pod = PodView::new(metadata, spec);
    Check::ALL
        .into_iter()
        .filter(|c| c.applies_at(level))
        .filter_map(|c| c.run(&pod))
        .collect()
}

/// The pod as PodSecurity admission sees it: its annotations, its spec,
/// and its containers (init containers first) with the AppArmor profile
/// kube-apiserver copies from the deprecated annotation into a container
/// that sets none, before admission (`applyAppArmorVersionSkew`).
struct PodView<'a> {
    annotations: std::collections::BTreeMap<String, String>,
    spec: &'a PodSpec,
    containers: Vec<(&'a Container, Option<String>)>,
}

/// The deprecated per-container AppArmor annotation's prefix.
const APP_ARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

impl<'a> PodView<'a> {
    fn new(metadata: &ObjectMeta, spec: &'a PodSpec) -> PodView<'a> {
        let annotations = metadata.annotations.clone().unwrap_or_default();
        let windows = is_windows(spec);
        let pod_profile = spec
            .security_context
            .as_ref()
            .and_then(|c| c.app_armor_profile.as_ref())
            .map(|p| (p.type_.clone(), p.localhost_profile.clone()));
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| {
                let own = c
                    .security_context
                    .as_ref()
                    .and_then(|s| s.app_armor_profile.as_ref())
                    .map(|p| p.type_.clone());
                let synced = match own {
                    Some(own) => Some(own),
                    None if !windows => annotations
                        .get(&format!("{APP_ARMOR_ANNOTATION_PREFIX}{}", c.name))
                        .and_then(|a| app_armor_field_for_annotation(a))
                        .filter(|field| Some(field) != pod_profile.as_ref())
                        .map(|(type_, _)| type_),
                    None => None,
                };
                (c, synced)
            })
            .collect();
        PodView {
            annotations,
            spec,
            containers,
        }
    }

    fn containers(&self) -> impl Iterator<Item = &'a Container> + '_ {
        self.containers.iter().map(|(c, _)| *c)
    }

    fn pod_context(&self) -> Option<&'a k8s_openapi::api::core::v1::PodSecurityContext> {
        self.spec.security_context.as_ref()
    }

    /// `hostUsers: false` relaxes the checks a user namespace makes moot.
    fn in_user_namespace(&self) -> bool {
        self.spec.host_users == Some(false)
    }
}

/// The profile (type, localhost name) kube-apiserver derives from an
/// AppArmor annotation's value; None for a value it cannot.
fn app_armor_field_for_annotation(value: &str) -> Option<(String, Option<String>)> {
    match value {
        "unconfined" => Some(("Unconfined".into(), None)),
        "runtime/default" => Some(("RuntimeDefault".into(), None)),
        _ => value
            .strip_prefix("localhost/")
            .filter(|name| !name.is_empty())
            .map(|name| ("Localhost".into(), Some(name.to_string()))),
    }
}

fn is_windows(spec: &PodSpec) -> bool {
    spec.os.as_ref().is_some_and(|os| os.name == "windows")
}

/// kube's `joinQuote`: `"a", "b"`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|i| format!("\"{}\"", i.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pluralize<'s>(singular: &'s str, plural: &'s str, count: usize) -> &'s str {
    if count == 1 { singular } else { plural }
}

/// `container "a"` or `containers "a", "b"`.
fn containers_named(names: &[&str]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// The names of the containers `bad` picks, in visiting order.
fn bad_containers<'a>(pod: &PodView<'a>, mut bad: impl FnMut(&Container) -> bool) -> Vec<&'a str> {
    pod.containers()
        .filter(|c| bad(c))
        .map(|c| c.name.as_str())
        .collect()
}

fn context_of(c: &Container) -> Option<&k8s_openapi::api::core::v1::SecurityContext> {
    c.security_context.as_ref()
}

fn app_armor_profile(pod: &PodView) -> Option<Violation> {
    let allowed = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    if let Some(profile) = pod.pod_context().and_then(|c| c.app_armor_profile.as_ref())
        && !allowed(&profile.type_)
    {
        setters.push("pod".to_string());
        values.insert(profile.type_.clone());
    }
    let mut containers = Vec::new();
    for (container, profile) in &pod.containers {
        if let Some(profile) = profile.as_deref().filter(|t| !allowed(t)) {
            containers.push(container.name.as_str());
            values.insert(profile.to_string());
        }
    }
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    let annotations: Vec<String> = pod
        .annotations
        .iter()
        .filter(|(key, value)| {
            key.starts_with(APP_ARMOR_ANNOTATION_PREFIX)
                && !(value.is_empty()
                    || value.as_str() == "runtime/default"
                    || value.starts_with("localhost/"))
        })
        .map(|(key, value)| format!("{key}={value:?}"))
        .collect();
    let mut listed: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        listed.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            listed.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&listed)
        ),
    )
}

/// Capabilities the `baseline` level lets a container add.
const BASELINE_CAPABILITIES: [&str; 13] = [
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

fn added_capabilities(c: &Container) -> &[String] {
    context_of(c)
        .and_then(|s| s.capabilities.as_ref())
        .and_then(|c| c.add.as_deref())
        .unwrap_or_default()
}

fn capabilities_baseline(pod: &PodView) -> Option<Violation> {
    let mut added = BTreeSet::new();
    let containers = bad_containers(pod, |c| {
        let beyond: Vec<&String> = added_capabilities(c)
            .iter()
            .filter(|cap| !BASELINE_CAPABILITIES.contains(&cap.as_str()))
            .collect();
        let bad = !beyond.is_empty();
        added.extend(beyond.into_iter().cloned());
        bad
    });
    if containers.is_empty() {
        return None;
    }
    let added: Vec<String> = added.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&containers),
            join_quote(&added)
        ),
    )
}

fn host_namespaces(pod: &PodView) -> Option<Violation> {
    let spec = pod.spec;
    let used: Vec<&str> = [
        (spec.host_network, "hostNetwork=true"),
        (spec.host_pid, "hostPID=true"),
        (spec.host_ipc, "hostIPC=true"),
    ]
    .into_iter()
    .filter(|(on, _)| *on == Some(true))
    .map(|(_, name)| name)
    .collect();
    (!used.is_empty())
        .then(|| violation("host namespaces", used.join(", ")))
        .flatten()
}

fn host_path_volumes(pod: &PodView) -> Option<Violation> {
    let volumes: Vec<&str> = pod
        .spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    if volumes.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", volumes.len()),
            join_quote(&volumes)
        ),
    )
}

fn host_ports(pod: &PodView) -> Option<Violation> {
    let mut ports = BTreeSet::new();
    let containers = bad_containers(pod, |c| {
        let used: Vec<String> = c
            .ports
            .iter()
            .flatten()
            .filter_map(|p| p.host_port.filter(|h| *h != 0))
            .map(|h| h.to_string())
            .collect();
        let bad = !used.is_empty();
        ports.extend(used);
        bad
    });
    if containers.is_empty() {
        return None;
    }
    // Upstream sorts the ports as strings.
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_named(&containers),
            pluralize("uses", "use", containers.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn host_probes_and_lifecycle(pod: &PodView) -> Option<Violation> {
    use k8s_openapi::api::core::v1::{HTTPGetAction, TCPSocketAction};
    let hosts = |http: Option<&HTTPGetAction>, tcp: Option<&TCPSocketAction>| -> Vec<String> {
        http.and_then(|h| h.host.clone())
            .into_iter()
            .chain(tcp.and_then(|t| t.host.clone()))
            .filter(|h| !h.is_empty())
            .collect()
    };
    let mut containers = BTreeSet::new();
    let mut forbidden = BTreeSet::new();
    for c in pod.containers() {
        let probes = [&c.liveness_probe, &c.readiness_probe, &c.startup_probe];
        let mut found: Vec<String> = probes
            .into_iter()
            .flatten()
            .flat_map(|p| hosts(p.http_get.as_ref(), p.tcp_socket.as_ref()))
            .collect();
        if let Some(lifecycle) = &c.lifecycle {
            for handler in [&lifecycle.post_start, &lifecycle.pre_stop]
                .into_iter()
                .flatten()
            {
                found.extend(hosts(
                    handler.http_get.as_ref(),
                    handler.tcp_socket.as_ref(),
                ));
            }
        }
        if !found.is_empty() {
            containers.insert(c.name.as_str());
            forbidden.extend(found);
        }
    }
    if containers.is_empty() {
        return None;
    }
    let containers: Vec<&str> = containers.into_iter().collect();
    let forbidden: Vec<String> = forbidden.into_iter().collect();
    violation(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_named(&containers),
            pluralize("uses", "use", containers.len()),
            pluralize(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                forbidden.len()
            ),
            join_quote(&forbidden)
        ),
    )
}

fn privileged(pod: &PodView) -> Option<Violation> {
    let containers = bad_containers(pod, |c| {
        context_of(c).and_then(|s| s.privileged) == Some(true)
    });
    if containers.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_named(&containers)
        ),
    )
}

/// `procMount`; at `baseline` a user-namespaced pod may use any.
fn proc_mount(pod: &PodView, baseline: bool) -> Option<Violation> {
    if baseline && pod.in_user_namespace() {
        return None;
    }
    let mut types = BTreeSet::new();
    let containers = bad_containers(pod, |c| {
        match context_of(c).and_then(|s| s.proc_mount.as_deref()) {
            Some(mount) if mount != "Default" => {
                types.insert(mount.to_string());
                true
            }
            _ => false,
        }
    });
    if containers.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_named(&containers),
            join_quote(&types)
        ),
    )
}

/// SELinux types the `baseline` level allows (besides none).
const SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux_options(pod: &PodView) -> Option<Violation> {
    use k8s_openapi::api::core::v1::SELinuxOptions;
    let mut types = BTreeSet::new();
    let mut user = false;
    let mut role = false;
    let mut fails = |options: &SELinuxOptions| {
        let type_ = options.type_.as_deref().unwrap_or_default();
        let mut bad = false;
        if !SELINUX_TYPES.contains(&type_) {
            types.insert(type_.to_string());
            bad = true;
        }
        if !options.user.as_deref().unwrap_or_default().is_empty() {
            user = true;
            bad = true;
        }
        if !options.role.as_deref().unwrap_or_default().is_empty() {
            role = true;
            bad = true;
        }
        bad
    };
    let mut setters = Vec::new();
    if pod
        .pod_context()
        .and_then(|c| c.se_linux_options.as_ref())
        .is_some_and(&mut fails)
    {
        setters.push("pod".to_string());
    }
    let containers = bad_containers(pod, |c| {
        context_of(c)
            .and_then(|s| s.se_linux_options.as_ref())
            .is_some_and(&mut fails)
    });
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    let mut what = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        what.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user {
        what.push("user may not be set".to_string());
    }
    if role {
        what.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            what.join("; ")
        ),
    )
}

/// `seccompProfile`: `baseline` forbids `Unconfined`; `restricted` also
/// requires `RuntimeDefault` or `Localhost` on the pod or every container
/// (Windows pods excepted).
fn seccomp_profile(pod: &PodView, restricted: bool) -> Option<Violation> {
    if restricted && is_windows(pod.spec) {
        return None;
    }
    let valid = |t: &str| matches!(t, "RuntimeDefault" | "Localhost");
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(profile) = pod.pod_context().and_then(|c| c.seccomp_profile.as_ref()) {
        if valid(&profile.type_) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(profile.type_.clone());
        }
    }
    let mut implicit = Vec::new();
    let explicit = bad_containers(pod, |c| {
        match context_of(c).and_then(|s| s.seccomp_profile.as_ref()) {
            Some(profile) if !valid(&profile.type_) => {
                values.insert(profile.type_.clone());
                true
            }
            Some(_) => false,
            None => {
                if !pod_set {
                    implicit.push(c.name.clone());
                }
                false
            }
        }
    });
    if !explicit.is_empty() {
        setters.push(containers_named(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if restricted && !implicit.is_empty() {
        let implicit: Vec<&str> = implicit.iter().map(String::as_str).collect();
        return violation(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_named(&implicit)
            ),
        );
    }
    None
}

/// Sysctls the `baseline` level allows at version `latest` (v1.37; a
/// namespace pinned to an older version allows fewer).
const SAFE_SYSCTLS: [&str; 14] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_notsent_lowat",
];

fn sysctls(pod: &PodView) -> Option<Violation> {
    let forbidden: Vec<&str> = pod
        .pod_context()
        .and_then(|c| c.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| s.name.as_str())
        .filter(|name| !SAFE_SYSCTLS.contains(name))
        .collect();
    (!forbidden.is_empty())
        .then(|| violation("forbidden sysctls", forbidden.join(", ")))
        .flatten()
}

fn windows_host_process(pod: &PodView) -> Option<Violation> {
    let host_process = |w: Option<&k8s_openapi::api::core::v1::WindowsSecurityContextOptions>| {
        w.and_then(|w| w.host_process) == Some(true)
    };
    let mut setters = Vec::new();
    if host_process(pod.pod_context().and_then(|c| c.windows_options.as_ref())) {
        setters.push("pod".to_string());
    }
    let containers = bad_containers(pod, |c| {
        host_process(context_of(c).and_then(|s| s.windows_options.as_ref()))
    });
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

fn allow_privilege_escalation(pod: &PodView) -> Option<Violation> {
    if is_windows(pod.spec) {
        return None;
    }
    let containers = bad_containers(pod, |c| {
        context_of(c).and_then(|s| s.allow_privilege_escalation) != Some(false)
    });
    if containers.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_named(&containers)
        ),
    )
}

fn capabilities_restricted(pod: &PodView) -> Option<Violation> {
    if is_windows(pod.spec) {
        return None;
    }
    let missing_drop_all = bad_containers(pod, |c| {
        !context_of(c)
            .and_then(|s| s.capabilities.as_ref())
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"))
    });
    let mut forbidden = BTreeSet::new();
    let adding = bad_containers(pod, |c| {
        let beyond: Vec<&String> = added_capabilities(c)
            .iter()
            .filter(|cap| cap.as_str() != "NET_BIND_SERVICE")
            .collect();
        let bad = !beyond.is_empty();
        forbidden.extend(beyond.into_iter().cloned());
        bad
    });
    let mut details = Vec::new();
    if !missing_drop_all.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_named(&missing_drop_all)
        ));
    }
    if !adding.is_empty() {
        let forbidden: Vec<String> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_named(&adding),
            join_quote(&forbidden)
        ));
    }
    (!details.is_empty())
        .then(|| violation("unrestricted capabilities", details.join("; ")))
        .flatten()
}

/// Volume types the `restricted` level allows, by their field name.
const RESTRICTED_VOLUMES: [&str; 9] = [
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

/// The types upstream names when it refuses a volume; others are
/// `unknown`.
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

fn restricted_volumes(pod: &PodView) -> Option<Violation> {
    let mut volumes = Vec::new();
    let mut types = BTreeSet::new();
    for volume in pod.spec.volumes.iter().flatten() {
        let as_json = serde_json::to_value(volume).unwrap_or_default();
        let sources: Vec<&str> = as_json
            .as_object()
            .into_iter()
            .flatten()
            .map(|(key, _)| key.as_str())
            .filter(|key| *key != "name")
            .collect();
        if sources.iter().any(|s| RESTRICTED_VOLUMES.contains(s)) {
            continue;
        }
        volumes.push(volume.name.as_str());
        let named = NAMED_VOLUME_TYPES
            .iter()
            .find(|t| sources.contains(t))
            .copied()
            .unwrap_or("unknown");
        types.insert(named);
    }
    if volumes.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", volumes.len()),
            join_quote(&volumes),
            pluralize("uses", "use", volumes.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(pod: &PodView) -> Option<Violation> {
    if pod.in_user_namespace() {
        return None;
    }
    let mut setters = Vec::new();
    let pod_value = pod.pod_context().and_then(|c| c.run_as_non_root);
    if pod_value == Some(false) {
        setters.push("pod".to_string());
    }
    let explicit = bad_containers(pod, |c| {
        context_of(c).and_then(|s| s.run_as_non_root) == Some(false)
    });
    let implicit = bad_containers(pod, |c| {
        context_of(c).and_then(|s| s.run_as_non_root).is_none() && pod_value != Some(true)
    });
    if !explicit.is_empty() {
        setters.push(containers_named(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_named(&implicit)
            ),
        );
    }
    None
}

fn run_as_user(pod: &PodView) -> Option<Violation> {
    if pod.in_user_namespace() {
        return None;
    }
    let mut setters = Vec::new();
    if pod.pod_context().and_then(|c| c.run_as_user) == Some(0) {
        setters.push("pod".to_string());
    }
    let containers = bad_containers(pod, |c| {
        context_of(c).and_then(|s| s.run_as_user) == Some(0)
    });
    if !containers.is_empty() {
        setters.push(containers_named(&containers));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(spec: serde_json::Value) -> Privileges {
        let mut privileges = Privileges::default();
        privileges.add(
            &ObjectMeta::default(),
            &serde_json::from_value(spec).expect("a pod spec"),
        );
        privileges
    }

    fn container(extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({"name": "tensorflow", "image": "tf"});
        if let (Some(c), Some(extra)) = (c.as_object_mut(), extra.as_object()) {
            c.extend(extra.clone());
        }
        c
    }

    #[test]
    fn what_a_pod_asks_and_what_a_member_allows() {
        let closed = PodPolicy::default();
        let plain = asking(serde_json::json!({"containers": [container(serde_json::json!({}))]}));
        assert_eq!(plain.refused_by(&closed), None, "a plain pod runs anywhere");
        let cases = [
            (
                serde_json::json!({"containers": [container(serde_json::json!({"securityContext": {"privileged": true}}))]}),
                "privileged containers are not allowed (spec.podPolicy.allowPrivileged)",
            ),
            (
                serde_json::json!({"hostPID": true, "containers": [container(serde_json::json!({}))]}),
                "hostNetwork, hostPID and hostIPC are not allowed (spec.podPolicy.allowHostNamespaces)",
            ),
            (
                serde_json::json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "containers": [container(serde_json::json!({}))]}),
                "hostPath volumes are not allowed (spec.podPolicy.allowHostPath)",
            ),
            (
                serde_json::json!({"serviceAccountName": "cluster-admin-sa", "containers": [container(serde_json::json!({}))]}),
                "service account cluster-admin-sa is not allowed (spec.podPolicy.allowedServiceAccounts)",
            ),
            (
                serde_json::json!({"priorityClassName": "system-node-critical", "containers": [container(serde_json::json!({}))]}),
                "priority class system-node-critical is not allowed (spec.podPolicy.allowedPriorityClasses)",
            ),
            (
                serde_json::json!({"tolerations": [{"operator": "Exists"}], "containers": [container(serde_json::json!({}))]}),
                "a toleration of every taint is not allowed (spec.podPolicy.allowToleratingEveryTaint)",
            ),
        ];
        let open = PodPolicy {
            allow_privileged: true,
            allow_host_namespaces: true,
            allow_host_path: true,
            allowed_service_accounts: vec!["cluster-admin-sa".into()],
            allowed_priority_classes: vec!["system-node-critical".into()],
            allow_tolerating_every_taint: true,
            ..PodPolicy::default()
        };
        for (spec, why) in cases {
            let privileges = asking(spec);
            assert_eq!(privileges.refused_by(&closed).as_deref(), Some(why));
            assert_eq!(privileges.refused_by(&open), None, "allowed: {why}");
        }
        let keyed = asking(
            serde_json::json!({"tolerations": [{"key": "gpu", "operator": "Exists"}],
            "containers": [container(serde_json::json!({}))]}),
        );
        assert_eq!(
            keyed.refused_by(&closed),
            None,
            "a keyed toleration is fine"
        );
    }

    /// The Pod Security Standards, as kube-apiserver v1.37's PodSecurity
    /// admission checks and words them: each pod (metadata and spec), the
    /// strictest level it meets, and what a stricter level says of it.
    #[test]
    fn pod_security_levels() {
        use PodSecurityLevel::{Baseline, Privileged, Restricted};
        use serde_json::json;
        let hardened = json!({
            "allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
        let with = |context: serde_json::Value| json!({"containers": [container(json!({"securityContext": context}))]});
        let plain = json!({"containers": [container(json!({}))]});
        let none = json!({});
        let table: Vec<(serde_json::Value, serde_json::Value, PodSecurityLevel, &str)> = vec![
            (none.clone(), with(hardened.clone()), Restricted, ""),
            (
                none.clone(),
                plain.clone(),
                Baseline,
                "allowPrivilegeEscalation != false (container \"tensorflow\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"tensorflow\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"tensorflow\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"tensorflow\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            ),
            (
                none.clone(),
                json!({"hostNetwork": true, "hostIPC": true, "containers": [container(json!({}))]}),
                Privileged,
                "host namespaces (hostNetwork=true, hostIPC=true)",
            ),
            (
                none.clone(),
                json!({"initContainers": [{"name": "init", "image": "i", "securityContext": {"privileged": true}}],
                    "containers": [container(json!({"securityContext": {"privileged": true}}))]}),
                Privileged,
                "privileged (containers \"init\", \"tensorflow\" must not set securityContext.privileged=true)",
            ),
            (
                none.clone(),
                with(json!({"capabilities": {"add": ["SYS_ADMIN", "NET_RAW", "CHOWN"]}})),
                Privileged,
                "non-default capabilities (container \"tensorflow\" must not include \"NET_RAW\", \"SYS_ADMIN\" in securityContext.capabilities.add)",
            ),
            (
                none.clone(),
                json!({"containers": [container(json!({"ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 443}]}))]}),
                Privileged,
                "hostPort (container \"tensorflow\" uses hostPorts 443, 8080)",
            ),
            (
                none.clone(),
                json!({"volumes": [{"name": "data", "hostPath": {"path": "/data"}}], "containers": [container(json!({}))]}),
                Privileged,
                "hostPath volumes (volume \"data\")",
            ),
            (
                none.clone(),
                json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_rmem", "value": "1"}, {"name": "vm.swappiness", "value": "1"}]},
                    "containers": [container(json!({}))]}),
                Privileged,
                "forbidden sysctls (kernel.msgmax, vm.swappiness)",
            ),
            (
                json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/tensorflow": "unconfined"}}),
                plain.clone(),
                Privileged,
                "forbidden AppArmor profiles (container \"tensorflow\" and annotation must not set AppArmor profile type to \"Unconfined\", \"container.apparmor.security.beta.kubernetes.io/tensorflow=\"unconfined\"\")",
            ),
            (
                json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/tensorflow": "localhost/trainer"}}),
                with(hardened.clone()),
                Restricted,
                "",
            ),
            (
                none.clone(),
                json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [container(json!({}))]}),
                Privileged,
                "forbidden AppArmor profile (pod must not set AppArmor profile type to \"Unconfined\")",
            ),
            (
                none.clone(),
                with(json!({"seLinuxOptions": {"type": "spc_t"}})),
                Privileged,
                "seLinuxOptions (container \"tensorflow\" set forbidden securityContext.seLinuxOptions: type \"spc_t\")",
            ),
            (
                none.clone(),
                json!({"securityContext": {"seLinuxOptions": {"user": "system_u", "role": "system_r"}}, "containers": [container(json!({}))]}),
                Privileged,
                "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: user may not be set; role may not be set)",
            ),
            (
                none.clone(),
                json!({"hostNetwork": true, "securityContext": {"windowsOptions": {"hostProcess": true}}, "containers": [container(json!({}))]}),
                Privileged,
                "host namespaces (hostNetwork=true), hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)",
            ),
            (
                none.clone(),
                with(json!({"procMount": "Unmasked"})),
                Privileged,
                "procMount (container \"tensorflow\" must not set securityContext.procMount to \"Unmasked\")",
            ),
            (
                none.clone(),
                json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [container(json!({}))]}),
                Privileged,
                "seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")",
            ),
            (
                none.clone(),
                json!({"containers": [container(json!({"livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}))]}),
                Privileged,
                "probe or lifecycle host (container \"tensorflow\" uses probe or lifecycle host \"10.0.0.1\")",
            ),
            (
                none.clone(),
                json!({"volumes": [{"name": "nfs", "nfs": {"server": "s", "path": "/"}}, {"name": "cache", "emptyDir": {}}],
                    "containers": [container(json!({"securityContext": hardened}))]}),
                Baseline,
                "restricted volume types (volume \"nfs\" uses restricted volume type \"nfs\")",
            ),
            (
                json!({}),
                json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container(json!({"securityContext": {
                        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}))]}),
                Restricted,
                "",
            ),
            (
                none.clone(),
                json!({"securityContext": {"runAsUser": 0, "runAsNonRoot": false},
                    "containers": [container(json!({"securityContext": {
                        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "SYS_TIME"]},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}, "runAsUser": 0}}))]}),
                Privileged,
                "non-default capabilities (container \"tensorflow\" must not include \"SYS_TIME\" in securityContext.capabilities.add)",
            ),
            (
                none.clone(),
                json!({"hostUsers": false, "containers": [container(json!({"securityContext": {
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 0}}))]}),
                Restricted,
                "",
            ),
        ];
        for (metadata, spec, highest, why) in table {
            let metadata: ObjectMeta = serde_json::from_value(metadata).expect("metadata");
            let spec: PodSpec = serde_json::from_value(spec.clone()).expect("a pod spec");
            for level in [Privileged, Baseline, Restricted] {
                let refused = pod_security_refusal(level, &metadata, &spec);
                if level <= highest {
                    assert_eq!(refused, None, "{spec:?} at {level:?}");
                } else if level == Restricted && highest < Baseline {
                    assert!(refused.is_some(), "{spec:?} at {level:?}");
                } else {
                    assert_eq!(refused.as_deref(), Some(why), "{spec:?} at {level:?}");
                }
            }
        }
    }

    /// The restricted level runs the baseline checks that no restricted
    /// check overrides, after them, and words each as kube-apiserver does.
    #[test]
    fn restricted_reports_every_failed_check_in_order() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "securityContext": {"runAsUser": 0, "runAsNonRoot": false},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [container(serde_json::json!({"securityContext": {
                "privileged": true, "allowPrivilegeEscalation": true,
                "capabilities": {"add": ["SYS_ADMIN"]},
                "seccompProfile": {"type": "Unconfined"}}}))]}))
        .expect("a pod spec");
        let meta = ObjectMeta::default();
        assert_eq!(
            pod_security_refusal(PodSecurityLevel::Baseline, &meta, &spec).as_deref(),
            Some(
                "non-default capabilities (container \"tensorflow\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add), \
                 hostPath volumes (volume \"root\"), \
                 privileged (container \"tensorflow\" must not set securityContext.privileged=true), \
                 seccompProfile (container \"tensorflow\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
            )
        );
        assert_eq!(
            pod_security_refusal(PodSecurityLevel::Restricted, &meta, &spec).as_deref(),
            Some(
                "privileged (container \"tensorflow\" must not set securityContext.privileged=true), \
                 allowPrivilegeEscalation != false (container \"tensorflow\" must set securityContext.allowPrivilegeEscalation=false), \
                 unrestricted capabilities (container \"tensorflow\" must set securityContext.capabilities.drop=[\"ALL\"]; container \"tensorflow\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add), \
                 restricted volume types (volume \"root\" uses restricted volume type \"hostPath\"), \
                 runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false), \
                 runAsUser=0 (pod must not set runAsUser=0), \
                 seccompProfile (container \"tensorflow\" must not set securityContext.seccompProfile.type to \"Unconfined\")"
            )
        );
    }
}
