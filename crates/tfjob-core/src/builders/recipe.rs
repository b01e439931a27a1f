//! A replica's pod and service as a recipe: what one start of a job builds
//! them from, shared by its replicas, signed for the replica they are for.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{PodMode, PodParams, Topology, build_pod, build_service};
use crate::api::{ReplicaKey, TensorFlowTrainingJob};
use crate::signing::Trust;

/// What one start of a job builds its replicas' pods and services from,
/// shared by all of them.
pub struct Recipe {
    /// The job with the replicaSpecs it runs.
    pub job: Arc<TensorFlowTrainingJob>,
    pub topology: Arc<Topology>,
    pub epoch: u64,
    pub mode: PodMode,
    /// The owner reference to the job, on home only.
    pub owner: Option<OwnerReference>,
}

/// A replica's pod and service as a recipe, kept by the replica until each
/// exists (a restart brings the pod's anew). The bodies are built only when
/// their create is sent, in one of the cluster's create slots
/// (`ClusterHandle::create_slot`), and dropped once it is answered: a job
/// of thousands of replicas holds a few bodies at a time, not thousands.
#[derive(Clone)]
pub struct Desired {
    recipe: Arc<Recipe>,
    key: ReplicaKey,
}

impl Desired {
    pub fn new(recipe: Arc<Recipe>, key: ReplicaKey) -> Desired {
        Desired { recipe, key }
    }

    /// The pod, signed (not serialized).
    pub fn pod(&self, trust: &Trust) -> Result<Pod, RecipeError> {
        let recipe = &self.recipe;
        let params = PodParams {
            topology: &recipe.topology,
            epoch: recipe.epoch,
            mode: recipe.mode,
            owner: recipe.owner.clone(),
        };
        let mut pod = build_pod(&recipe.job, self.key, &params)?;
        trust.sign(&mut pod.metadata, recipe.epoch, "Pod");
        Ok(pod)
    }

    pub fn pod_body(&self, trust: &Trust) -> Result<Vec<u8>, RecipeError> {
        Ok(serde_json::to_vec(&self.pod(trust)?)?)
    }

    pub fn service_body(&self, trust: &Trust) -> Result<Vec<u8>, RecipeError> {
        let recipe = &self.recipe;
        let mut service = build_service(&recipe.job, self.key, recipe.epoch, recipe.owner.clone())?;
        trust.sign(&mut service.metadata, recipe.epoch, "Service");
        Ok(serde_json::to_vec(&service)?)
    }
}

/// A replica's pod or service cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("{0}")]
    Spec(#[from] super::BuildError),
    #[error("serializing it: {0}")]
    Serialize(#[from] serde_json::Error),
}
