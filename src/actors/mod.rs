//! The actors: one JobManager, one JobActor per job, one ReplicaActor per
//! replica, one ClusterActor per cluster. They own state and do I/O; the
//! decisions they act on live in the pure modules (`validation`,
//! `builders`, `lifecycle`, `status`).

pub mod cluster;
pub mod job;
pub mod manager;
pub mod members;
pub mod replica;

use std::sync::atomic::AtomicU64;

use kube::runtime::events::Recorder;

use crate::config::ControllerConfig;
use cluster::ClusterHandle;

/// What every actor of one controller shares.
pub struct Shared {
    pub config: ControllerConfig,
    pub home: ClusterHandle,
    pub recorder: Recorder,
    /// Successful job status writes, for metrics and tests.
    pub status_writes: AtomicU64,
}
