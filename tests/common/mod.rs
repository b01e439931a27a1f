//! The test harness, one per test binary (`#[macro_use] mod common;`):
//! - [`process`]: the one child-process type, stopped on drop;
//! - [`wait`]: the one way to wait, `eventually`;
//! - [`setup`]: the one builder of clusters + controller + its settings;
//! - [`real`]: the real clusters of `hack/real-clusters` and `on_both_grounds!`;
//! - [`sim_kube`] and [`kubectl`]: a cluster alone, for the client suites;
//! - [`operator`], [`federation`], [`observe`], [`tensorflow`]: each suite's helpers;
//! - [`fence`]: the member-side fence's process and a direct sampler.
//!
//! Every test binary compiles all of it and uses a part (hence the allows:
//! what one binary leaves unused another uses).
#![allow(dead_code, unused_imports)]

#[macro_use]
pub mod real;
pub mod federation;
pub mod fence;
pub mod kubectl;
pub mod observe;
pub mod operator;
pub mod process;
pub mod setup;
#[path = "kube.rs"]
pub mod sim_kube;
pub mod tensorflow;
pub mod wait;
