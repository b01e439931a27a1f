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

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD this controller owns.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![TensorFlowTrainingJob::crd(), MemberCluster::crd()]
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
