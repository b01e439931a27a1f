//! The actors: one JobManager, one JobActor per job, one ReplicaActor per
//! replica, one ClusterActor per cluster. They own state and do I/O; the
//! decisions they act on live in the pure modules (`validation`,
//! `builders`, `lifecycle`, `status`).

pub mod cluster;
pub mod job;
pub mod manager;
pub mod members;
pub mod replica;
pub mod sweeper;

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;

use actix::{Message, Recipient};
use futures::{Stream, StreamExt};

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
    /// The member clusters lost now (no good probe for `clusterLostTimeoutMs`);
    /// jobs with replicas there watch it to fail over.
    pub lost_clusters: tokio::sync::watch::Sender<BTreeSet<String>>,
}

/// Forwards a watch stream to an actor, one message per item, until the
/// actor stops; errors are logged and the (backed-off) stream goes on.
pub fn forward<T, M>(
    events: impl Stream<Item = Result<T, kube::runtime::watcher::Error>> + Send + 'static,
    to: Recipient<M>,
    wrap: impl Fn(T) -> M + Send + 'static,
    what: &'static str,
) where
    T: Send + 'static,
    M: Message<Result = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(item) => {
                    if to.send(wrap(item)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "{what} watch failed; retrying"),
            }
        }
    });
}
