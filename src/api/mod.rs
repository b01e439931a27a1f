//! The custom resources this controller owns, and their CRDs.
//!
//! `crds()` lists every CRD the controller owns; `tfjob-federator crd` prints
//! them and `deploy/crds/crds.yaml` holds the committed copy (a test fails
//! when it drifts).

mod member;
mod schema;
mod tfjob;

pub use member::*;
pub use tfjob::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, ValidationRule,
};
use kube::CustomResourceExt;

/// Every CRD this controller owns.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![tensorflow_training_job_crd(), MemberCluster::crd()]
}

/// The job's CRD, with the rule that refuses an edit of `replicaSpecs`
/// once the job started (its status records a placement) at `kubectl
/// apply` time. The controller refuses such an edit itself too (the job
/// keeps the replicaSpecs it started with), for API servers that do not
/// evaluate the rule.
fn tensorflow_training_job_crd() -> CustomResourceDefinition {
    let mut crd = TensorFlowTrainingJob::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.x_kubernetes_validations = Some(vec![ValidationRule {
                rule: "!has(oldSelf.status) || !has(oldSelf.status.placement) || \
                       self.spec.replicaSpecs == oldSelf.spec.replicaSpecs"
                    .into(),
                message: Some(
                    "spec.replicaSpecs may not change after the job started; \
                     create a new job instead"
                        .into(),
                ),
                field_path: Some(".spec.replicaSpecs".into()),
                reason: Some("FieldValueForbidden".into()),
                ..ValidationRule::default()
            }]);
        }
    }
    crd
}

/// Every CRD as multi-document YAML, each document starting with `---`.
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}
