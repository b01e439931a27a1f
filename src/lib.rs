//! tfjob-federator: runs TensorStack `TensorFlowTrainingJob`s across several
//! Kubernetes clusters. See README.md for how the parts fit.

pub mod actors;
pub mod api;
pub mod builders;
pub mod capacity;
pub mod clusters;
pub mod config;
pub mod controller;
pub mod demo;
pub mod election;
#[cfg(test)]
pub mod fuzz;
pub mod isolation;
pub mod join;
pub mod lifecycle;
pub mod placement;
pub mod plan;
pub mod quantity;
pub mod signing;
pub mod sim;
pub mod status;
pub mod sweep;
pub mod telemetry;
pub mod validation;
