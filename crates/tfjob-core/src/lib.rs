//! The decisions of tfjob-federator, with no I/O: the API types and CRDs,
//! validation, the builders of pods, services and PodGroups, the job's
//! lifecycle state machine, a member's health machine, status, placement,
//! the garbage sweep's rule, capacity, member isolation, object signing and
//! what losing clusters would do (`what_if`).
//! Actors in the product crate carry the decisions out; nothing here holds a
//! client, a runtime or an actor (the manifest has no kube client, tokio or
//! actix, and CI checks `cargo tree`).

pub mod api;
pub mod builders;
pub mod capacity;
pub mod fence;
#[cfg(test)]
mod fuzz;
pub mod isolation;
pub mod kube_names;
pub mod lifecycle;
pub mod member_health;
pub mod member_identity;
pub mod observed;
pub mod placement;
pub mod pod_validation;
pub use kube_quantity as quantity;
pub mod record;
pub mod shown_error;
pub mod signing;
pub mod start_gate;
pub mod status;
pub mod sweep;
pub mod validation;
pub mod what_if;
