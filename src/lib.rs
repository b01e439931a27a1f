//! tfjob-federator: runs TensorStack `TensorFlowTrainingJob`s across several
//! Kubernetes clusters. See docs/src/design/index.md for how the parts
//! fit. The decisions live in `tfjob-core` (re-exported here under their
//! own names); this crate holds the actors that carry them out, the cluster
//! connections, telemetry, leader election and the command line.

pub mod actors;
pub mod clusters;
pub mod config;
pub mod controller;
pub mod demo;
pub mod election;
pub mod join;
pub mod member_fence;
pub mod plan;
pub mod plugin;
pub mod telemetry;

pub use tfjob_core::{
    api, builders, capacity, fence, isolation, lifecycle, member_health, member_identity, observed,
    placement, quantity, record, shown_error, signing, start_gate, status, sweep, validation,
    what_if,
};
