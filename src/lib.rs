//! tfjob-federator: runs TensorStack `TensorFlowTrainingJob`s across several
//! Kubernetes clusters. See README.md for how the parts fit.

pub mod sim;
pub mod telemetry;
