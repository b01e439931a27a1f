//! `MemberCluster` (`federation.tfjob.io/v1alpha1`, cluster-scoped): a
//! cluster the controller may place replicas on. Its kubeconfig lives in a
//! Secret on the home cluster; its status shows readiness, the last
//! heartbeat and allocatable/free capacity.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;
use crate::builders::DEFAULT_ADDRESS_TEMPLATE;

/// The condition that says whether a member answers its health probe.
pub const READY_CONDITION: &str = "Ready";

/// Where member kubeconfig Secrets live: the controller's namespace.
pub const SECRETS_NAMESPACE: &str = "tfjob-federator";

/// The key of the kubeconfig in the Secret unless the reference names one.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";

/// A cluster that replicas may be placed on.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "federation.tfjob.io",
    version = "v1alpha1",
    kind = "MemberCluster",
    plural = "memberclusters",
    status = "MemberClusterStatus",
    derive = "PartialEq",
    shortname = "mc",
    doc = "MemberCluster registers a cluster that TensorFlowTrainingJob replicas may be placed on.",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Free-GPU","type":"string","description":"Free nvidia.com/gpu","jsonPath":".status.free.nvidia\\.com/gpu"}"#,
    printcolumn = r#"{"name":"Unschedulable","type":"boolean","jsonPath":".spec.unschedulable","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterSpec {
    /// The Secret (on the home cluster) holding this cluster's kubeconfig.
    pub kubeconfig_secret_ref: SecretKeyReference,
    /// No new replicas are placed here while true; running ones stay.
    #[serde(default)]
    pub unschedulable: bool,
    /// How peers in other clusters reach a replica's service here;
    /// placeholders `{service}`, `{namespace}`, `{cluster}`.
    #[serde(default = "default_address_template")]
    pub address_template: String,
    /// Create a multicluster.x-k8s.io ServiceExport for every replica service.
    #[serde(default)]
    pub export_services: bool,
    /// What replicas placed here may ask of the cluster beyond capacity;
    /// everything is off by default.
    #[serde(default)]
    pub pod_policy: PodPolicy,
}

/// What pods the controller places on a member may ask of it. A job that
/// asks for more is not placed there (the reason names the field).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Privileged containers.
    #[serde(default)]
    pub allow_privileged: bool,
    /// `hostNetwork`, `hostPID`, `hostIPC`.
    #[serde(default)]
    pub allow_host_namespaces: bool,
    /// `hostPath` volumes.
    #[serde(default)]
    pub allow_host_path: bool,
    /// The namespaces replicas may run in here (the job's namespace on
    /// home); empty: any but the system namespaces. The controller never
    /// creates a namespace this list leaves out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_namespaces: Vec<String>,
    /// Service accounts other than `default` that pods may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_service_accounts: Vec<String>,
    /// `system-…` priority classes that pods may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_priority_classes: Vec<String>,
    /// A toleration without a key (`operator: Exists`), which tolerates
    /// every taint.
    #[serde(default)]
    pub allow_tolerating_every_taint: bool,
    /// The Pod Security level the member enforces in a namespace without a
    /// `pod-security.kubernetes.io/enforce` label: its PodSecurity admission
    /// default, which the API does not show (Kubernetes' own default is
    /// `privileged`).
    #[serde(default)]
    pub default_pod_security: PodSecurityLevel,
}

/// A Pod Security Standards level, as the
/// `pod-security.kubernetes.io/enforce` namespace label names it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    #[default]
    Privileged,
    Baseline,
    Restricted,
}

impl PodSecurityLevel {
    /// The namespace label that says which level a namespace enforces.
    pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Privileged => "privileged",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Restricted => "restricted",
        }
    }

    /// A label value; one that is not a level counts as `restricted`, the
    /// safe reading (PodSecurity admission refuses to guess).
    pub fn from_label(value: &str) -> PodSecurityLevel {
        match value {
            "privileged" => PodSecurityLevel::Privileged,
            "baseline" => PodSecurityLevel::Baseline,
            _ => PodSecurityLevel::Restricted,
        }
    }
}

impl MemberClusterSpec {
    /// Whether a replica here has the cluster-independent address that a
    /// replica-by-replica failover keeps (`failover: LostReplicas`): the
    /// MCS name of an exported Service.
    pub fn gives_stable_addresses(&self) -> bool {
        self.address_template == DEFAULT_ADDRESS_TEMPLATE && self.export_services
    }

    /// Why peers on other clusters cannot reach a replica here (None: they
    /// can); a split job uses only members they can reach.
    pub fn unreachable_across_clusters(&self) -> Option<String> {
        crate::placement::unreachable_across_clusters(
            &self.address_template,
            self.export_services,
            "exportServices",
        )
    }
}

fn default_address_template() -> String {
    DEFAULT_ADDRESS_TEMPLATE.to_string()
}

/// A key in a namespaced Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    pub name: String,
    pub namespace: String,
    /// Defaults to `kubeconfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// What the controller observes of a member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberClusterStatus {
    /// `Ready`: the cluster answers its health probe.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ClusterCondition>,
    /// When the cluster last answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_heartbeat_time: Option<Time>,
    /// Allocatable cpu, memory and nvidia.com/gpu of the schedulable nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, String>,
    /// Allocatable minus the requests of bound pods and of this
    /// controller's pods not yet bound.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub free: BTreeMap<String, String>,
    /// The `metadata.generation` of the spec the controller works with
    /// (e.g. `unschedulable` and `exportServices` apply from then on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Who the cluster is, recorded by the controller when it first
    /// connected to it (see `member_identity`): the MemberCluster is used
    /// only while its credentials reach this cluster. In the status because
    /// only the controller writes there (`memberclusters/status`); whoever
    /// may edit MemberClusters cannot move it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<ClusterIdentity>,
}

/// A cluster's identity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ClusterIdentity {
    /// The uid of the cluster's `kube-system` namespace: made with the
    /// cluster, never changed, different in every cluster.
    #[serde(rename = "kubeSystemUID")]
    pub kube_system_uid: String,
}

impl MemberClusterStatus {
    /// The `Ready` condition's status (`True`, `False`, `Unknown`), if any.
    pub fn ready_status(&self) -> Option<&str> {
        self.conditions
            .iter()
            .find(|c| c.condition_type == READY_CONDITION)
            .map(|c| c.status.as_str())
    }

    /// Whether the cluster answers its health probe.
    pub fn is_ready(&self) -> bool {
        self.ready_status() == Some("True")
    }
}

/// One observation of a member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    #[serde(rename = "type")]
    pub condition_type: String,
    /// True, False or Unknown.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::time")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn member_cluster_crd_is_cluster_scoped_with_status() {
        let crd = MemberCluster::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.spec.names.short_names.as_deref(),
            Some(&["mc".to_string()][..])
        );
        assert!(
            crd.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
    }

    #[test]
    fn defaults_apply_when_fields_are_left_out() {
        let spec: MemberClusterSpec = serde_json::from_value(serde_json::json!({
            "kubeconfigSecretRef": {"name": "member-1", "namespace": "tfjob-federator"}
        }))
        .expect("minimal spec parses");
        assert_eq!(spec.address_template, DEFAULT_ADDRESS_TEMPLATE);
        assert!(!spec.unschedulable && !spec.export_services);
    }
}
