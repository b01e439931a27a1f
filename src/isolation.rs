//! What a job's pods may ask of a member cluster beyond capacity. A home
//! user who may create jobs must not run, on a member, what that member's
//! administrators did not allow: privileged containers, the node's
//! namespaces or filesystem, another service account, a system priority, or
//! tolerating every taint. Each member says what it allows
//! (`MemberCluster.spec.podPolicy`, everything off by default); placement
//! passes over a member that does not allow what the job asks, saying why.
//! The home cluster's own admission (Pod Security) governs home. Pure.

use k8s_openapi::api::core::v1::PodSpec;

use crate::api::PodPolicy;

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
}
