//! The custom resources this controller owns, and their CRDs.
//!
//! `crds()` lists every CRD the controller owns; `tfjob-federator crd` prints
//! them and `deploy/crds/crds.yaml` holds the committed copy (a test fails
//! when it drifts). `reference` makes the book's API reference of them, held
//! and checked the same way.

mod listed;
mod member;
pub mod reason;
mod reference;
mod rules;
mod schema;
mod tfjob;

pub use listed::{ListedJob, Unreadable};
pub use member::*;
pub use reference::{REFERENCE_PAGE, reference_markdown};
pub use rules::{MAX_TEMPLATE_BYTES_TIMES_REPLICAS, MAX_TOTAL_REPLICAS, MAX_WEIGHT};
pub use tfjob::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD this controller owns.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![tensorflow_training_job_crd(), MemberCluster::crd()]
}

/// The job's CRD, with what the API server refuses at the door (`rules`).
fn tensorflow_training_job_crd() -> CustomResourceDefinition {
    let mut crd = TensorFlowTrainingJob::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            // Our own static schema: it always round-trips through JSON.
            let mut root = serde_json::to_value(&*schema).expect("the job schema as JSON");
            rules::add_door_rules(&mut root);
            *schema = serde_json::from_value(root).expect("the job schema from JSON");
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
