//! Wiring of the controller: the home cluster's ClusterActor, the
//! JobManager, and the shared context. Runs inside an actix System whose
//! runtime is a multi-thread tokio runtime (kube futures are Send).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use actix::prelude::*;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};

use crate::actors::Shared;
use crate::actors::cluster::ClusterActor;
use crate::actors::manager::JobManager;
use crate::actors::members::MemberSupervisor;
use crate::config::ControllerConfig;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no usable cluster configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("building the client: {0}")]
    Client(#[from] kube::Error),
}

/// A client for the cluster a kubeconfig (or the environment) points at.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<Client, StartError> {
    let config = match kubeconfig {
        Some(path) => {
            let wrap = |source| StartError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let kc = Kubeconfig::read_from(path).map_err(wrap)?;
            kube::Config::from_custom_kubeconfig(
                kc,
                &KubeConfigOptions {
                    context,
                    ..Default::default()
                },
            )
            .await
            .map_err(wrap)?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// A running controller. Keep it as long as the controller should run:
/// dropping it stops the home ClusterActor and with it the pod informer.
pub struct Controller {
    pub shared: Arc<Shared>,
    pub manager: Addr<JobManager>,
    pub home: Addr<ClusterActor>,
    pub members: Addr<MemberSupervisor>,
}

/// Starts the controller's actors on the current actix System.
pub fn start(home: Client, config: ControllerConfig) -> Controller {
    let reporter = Reporter {
        controller: config.event_reporter.clone(),
        instance: std::env::var("HOSTNAME").ok(),
    };
    let recorder = Recorder::new(home.clone(), reporter);
    let (cluster, handle) = ClusterActor::new(config.home_cluster_name.clone(), home);
    let home_actor = cluster.start();
    let shared = Arc::new(Shared {
        config,
        home: handle,
        recorder,
        status_writes: AtomicU64::new(0),
        lost_clusters: tokio::sync::watch::Sender::new(Default::default()),
    });
    let members = MemberSupervisor::new(shared.clone()).start();
    let manager = JobManager::new(shared.clone(), members.clone()).start();
    Controller {
        shared,
        manager,
        home: home_actor,
        members,
    }
}
