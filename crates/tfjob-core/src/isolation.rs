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

use k8s_openapi::api::core::v1::{Container, PodSpec};

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
    /// The first way a pod breaks the `baseline` Pod Security level.
    pub breaks_baseline: Option<String>,
    /// The first way a pod breaks the `restricted` level (or `baseline`).
    pub breaks_restricted: Option<String>,
}

impl Privileges {
    /// Adds what one pod spec asks for.
    pub fn add(&mut self, spec: &PodSpec) {
        let containers = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        for container in containers {
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
            self.breaks_baseline = breaks_baseline(spec);
        }
        if self.breaks_restricted.is_none() {
            self.breaks_restricted = self
                .breaks_baseline
                .clone()
                .or_else(|| breaks_restricted(spec));
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
/// would not run a pod with `spec`; None if it would. Checked for every pod
/// the controller builds for a member, whatever placement decided earlier
/// (the member's policy may have changed since, or the record the pod is
/// built from was not the one placed).
pub fn pod_refused(
    spec: &PodSpec,
    policy: &PodPolicy,
    namespace: &str,
    level: PodSecurityLevel,
) -> Option<String> {
    let mut asked = Privileges::default();
    asked.add(spec);
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

/// Sysctls the `baseline` level allows.
const SAFE_SYSCTLS: [&str; 8] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
];

/// Volume types the `restricted` level allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn containers(spec: &PodSpec) -> impl Iterator<Item = &Container> {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
}

/// The first check of the Pod Security Standards' `baseline` level that
/// `spec` fails (Kubernetes v1.3x: the checks that apply to Linux pods).
fn breaks_baseline(spec: &PodSpec) -> Option<String> {
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        return Some("hostNetwork, hostPID and hostIPC must be unset".into());
    }
    if spec.volumes.iter().flatten().any(|v| v.host_path.is_some()) {
        return Some("hostPath volumes are forbidden".into());
    }
    let pod_context = spec.security_context.as_ref();
    if let Some(sysctl) = pod_context
        .and_then(|c| c.sysctls.as_ref())
        .into_iter()
        .flatten()
        .find(|s| !SAFE_SYSCTLS.contains(&s.name.as_str()))
    {
        return Some(format!("sysctl {} is forbidden", sysctl.name));
    }
    let unconfined = |seccomp: Option<&k8s_openapi::api::core::v1::SeccompProfile>| {
        seccomp.is_some_and(|p| p.type_ == "Unconfined")
    };
    if unconfined(pod_context.and_then(|c| c.seccomp_profile.as_ref())) {
        return Some("seccompProfile type Unconfined is forbidden".into());
    }
    for container in containers(spec) {
        let name = &container.name;
        let context = container.security_context.as_ref();
        if context.and_then(|c| c.privileged) == Some(true) {
            return Some(format!("container {name} must not be privileged"));
        }
        if let Some(added) = context
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|c| c.add.as_ref())
            .into_iter()
            .flatten()
            .find(|c| !BASELINE_CAPABILITIES.contains(&c.as_str()))
        {
            return Some(format!("container {name} must not add capability {added}"));
        }
        if container
            .ports
            .iter()
            .flatten()
            .any(|p| p.host_port.is_some_and(|h| h != 0))
        {
            return Some(format!("container {name} must not use hostPort"));
        }
        if context
            .and_then(|c| c.proc_mount.as_deref())
            .is_some_and(|m| m != "Default")
        {
            return Some(format!("container {name} must use the Default procMount"));
        }
        if unconfined(context.and_then(|c| c.seccomp_profile.as_ref())) {
            return Some(format!(
                "container {name}: seccompProfile type Unconfined is forbidden"
            ));
        }
    }
    None
}

/// The first check of the `restricted` level beyond `baseline` that `spec`
/// fails.
fn breaks_restricted(spec: &PodSpec) -> Option<String> {
    if let Some(volume) = spec.volumes.iter().flatten().find(|v| {
        let as_json = serde_json::to_value(v).unwrap_or_default();
        as_json
            .as_object()
            .into_iter()
            .flatten()
            .any(|(key, _)| key != "name" && !RESTRICTED_VOLUMES.contains(&key.as_str()))
    }) {
        return Some(format!("volume {} is of a forbidden type", volume.name));
    }
    let pod_context = spec.security_context.as_ref();
    let pod_non_root = pod_context.and_then(|c| c.run_as_non_root) == Some(true);
    let pod_seccomp = pod_context
        .and_then(|c| c.seccomp_profile.as_ref())
        .map(|p| p.type_.as_str());
    if pod_context.and_then(|c| c.run_as_user) == Some(0) {
        return Some("runAsUser must not be 0".into());
    }
    for container in containers(spec) {
        let name = &container.name;
        let context = container.security_context.as_ref();
        if context.and_then(|c| c.allow_privilege_escalation) != Some(false) {
            return Some(format!(
                "container {name} must set securityContext.allowPrivilegeEscalation=false"
            ));
        }
        let capabilities = context.and_then(|c| c.capabilities.as_ref());
        let drops_all = capabilities
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|c| c == "ALL"));
        if !drops_all {
            return Some(format!(
                "container {name} must set securityContext.capabilities.drop=[\"ALL\"]"
            ));
        }
        if let Some(added) = capabilities
            .and_then(|c| c.add.as_ref())
            .into_iter()
            .flatten()
            .find(|c| *c != "NET_BIND_SERVICE")
        {
            return Some(format!("container {name} must not add capability {added}"));
        }
        match context.and_then(|c| c.run_as_non_root) {
            Some(false) => {
                return Some(format!("container {name} must not set runAsNonRoot=false"));
            }
            None if !pod_non_root => {
                return Some(format!(
                    "container {name} must set securityContext.runAsNonRoot=true (or the pod must)"
                ));
            }
            _ => {}
        }
        if context.and_then(|c| c.run_as_user) == Some(0) {
            return Some(format!("container {name} must not set runAsUser=0"));
        }
        let seccomp = context
            .and_then(|c| c.seccomp_profile.as_ref())
            .map(|p| p.type_.as_str())
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            return Some(format!(
                "container {name} must set securityContext.seccompProfile.type to RuntimeDefault or Localhost (or the pod must)"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(spec: serde_json::Value) -> Privileges {
        let mut privileges = Privileges::default();
        privileges.add(&serde_json::from_value(spec).expect("a pod spec"));
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

    /// The Pod Security Standards, as kube-apiserver's PodSecurity admission
    /// checks them (each row also passes the next looser level).
    #[test]
    fn pod_security_levels() {
        use PodSecurityLevel::{Baseline, Privileged, Restricted};
        let hardened = serde_json::json!({
            "allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
        let plain = || serde_json::json!({"containers": [container(serde_json::json!({}))]});
        let table: Vec<(serde_json::Value, PodSecurityLevel, &str)> = vec![
            (
                serde_json::json!({"containers": [container(serde_json::json!({"securityContext": hardened}))]}),
                Restricted,
                "",
            ),
            (
                plain(),
                Baseline,
                "container tensorflow must set securityContext.allowPrivilegeEscalation=false",
            ),
            (
                serde_json::json!({"hostNetwork": true, "containers": [container(serde_json::json!({}))]}),
                Privileged,
                "hostNetwork, hostPID and hostIPC must be unset",
            ),
            (
                serde_json::json!({"containers": [container(serde_json::json!({"securityContext": {"privileged": true}}))]}),
                Privileged,
                "container tensorflow must not be privileged",
            ),
            (
                serde_json::json!({"containers": [container(serde_json::json!({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}))]}),
                Privileged,
                "container tensorflow must not add capability SYS_ADMIN",
            ),
            (
                serde_json::json!({"containers": [container(serde_json::json!({"ports": [{"containerPort": 80, "hostPort": 80}]}))]}),
                Privileged,
                "container tensorflow must not use hostPort",
            ),
            (
                serde_json::json!({"volumes": [{"name": "data", "hostPath": {"path": "/data"}}], "containers": [container(serde_json::json!({}))]}),
                Privileged,
                "hostPath volumes are forbidden",
            ),
            (
                serde_json::json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}, "containers": [container(serde_json::json!({}))]}),
                Privileged,
                "sysctl kernel.msgmax is forbidden",
            ),
            (
                serde_json::json!({"volumes": [{"name": "nfs", "nfs": {"server": "s", "path": "/"}}],
                    "containers": [container(serde_json::json!({"securityContext": hardened}))]}),
                Baseline,
                "volume nfs is of a forbidden type",
            ),
            (
                serde_json::json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container(serde_json::json!({"securityContext": {
                        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}))]}),
                Restricted,
                "",
            ),
            (
                serde_json::json!({"containers": [container(serde_json::json!({"securityContext": {
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}}}))]}),
                Baseline,
                "container tensorflow must set securityContext.runAsNonRoot=true (or the pod must)",
            ),
        ];
        for (spec, highest, why) in table {
            let privileges = asking(spec.clone());
            for level in [Privileged, Baseline, Restricted] {
                let refused = privileges.refused_at(level);
                if level <= highest {
                    assert_eq!(refused, None, "{spec} at {level:?}");
                } else {
                    assert_eq!(refused, Some(why), "{spec} at {level:?}");
                }
            }
        }
    }
}
