//! The actors: one JobManager, one JobActor per job, one ReplicaActor per
//! replica, one MemberSupervisor (with one ClusterActor per cluster, see
//! `clusters`). They own state and do I/O; the
//! decisions they act on live in the pure modules (`validation`,
//! `builders`, `lifecycle`, `status`).

pub mod call;
pub mod job;
pub mod manager;
pub mod members;
pub mod replica;
pub mod sweeper;

use std::collections::BTreeSet;
use std::sync::Arc;

use actix::{Message, Recipient};
use futures::{Stream, StreamExt};

use kube::runtime::events::Recorder;

use crate::clusters::ClusterHandle;
use crate::config::ControllerConfig;
use crate::telemetry::{ActorKind, Metrics, Readiness};

/// What every actor of one controller shares.
pub struct Shared {
    pub config: ControllerConfig,
    pub home: ClusterHandle,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub readiness: Readiness,
    /// The member clusters lost now (no good probe for `clusterLostTimeoutMs`);
    /// jobs with replicas there watch it to fail over.
    pub lost_clusters: tokio::sync::watch::Sender<BTreeSet<String>>,
    /// Signs the pods and services this controller makes (see `signing`).
    pub signer: Arc<crate::signing::Signer>,
}

/// Sends without waiting (and without a mailbox limit, as `do_send`); a
/// message for an actor that has stopped is lost, and counted as dropped.
pub fn tell<M>(to: &Recipient<M>, message: M, metrics: &Metrics, kind: ActorKind)
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    if to.connected() {
        to.do_send(message);
    } else {
        metrics.mailbox_dropped(kind);
    }
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
