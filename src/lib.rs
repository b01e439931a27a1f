//! tfjob-federator: runs TensorStack `TensorFlowTrainingJob`s across several
//! Kubernetes clusters. See README.md for how the parts fit.

pub mod api;
pub mod builders;
pub mod sim;
pub mod telemetry;
pub mod validation;
