//! Wiring of the controller: the home cluster's ClusterActor, the
//! JobManager, and the shared context. Runs inside an actix System whose
//! runtime is a multi-thread tokio runtime (kube futures are Send).

use std::path::Path;
use std::sync::Arc;

use actix::prelude::*;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

use crate::actors::Shared;
use crate::actors::call::{self, Backoff, Kind, Outcome};
use crate::actors::manager::JobManager;
use crate::actors::members::MemberSupervisor;
use crate::clusters::ClusterActor;
use crate::config::ControllerConfig;
use crate::signing::{self, Signer};
use crate::telemetry::{self, Metrics, Readiness, Synced};

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
    #[error("setting up the metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(
        "the signing key (Secret {namespace}/{name} on home): {0}; the namespace must exist \
         (deploy/controller.yaml makes it)",
        namespace = crate::clusters::SECRETS_NAMESPACE,
        name = signing::KEY_SECRET
    )]
    SigningKey(String),
    #[error("refusing these settings: {0}")]
    Settings(#[from] crate::fence::SettingsError),
}

/// The key the controller signs its pods, services and job statuses with:
/// read from its Secret on home, or made and stored there by the first
/// controller; with the time statuses have been sealed since.
pub async fn load_signer(home: &Client, backoff: Backoff) -> Result<Signer, StartError> {
    let signer = load_key(home, backoff).await?;
    let since = sealing_since(home, backoff).await?;
    Ok(signer.sealing_since(since))
}

/// The creation time of the Secret that marks when sealing began, made now
/// if it does not exist (another controller may make it meanwhile: then
/// theirs is read).
async fn sealing_since(
    home: &Client,
    backoff: Backoff,
) -> Result<Option<jiff::Timestamp>, StartError> {
    let secrets: Api<Secret> = Api::namespaced(home.clone(), crate::clusters::SECRETS_NAMESPACE);
    let failed = |e: kube::Error| StartError::SigningKey(e.to_string());
    let mark: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": signing::SEALING_MARK_SECRET, "labels": {crate::builders::MANAGED_BY_LABEL: crate::builders::MANAGER}},
    }))
    .map_err(|e| StartError::SigningKey(e.to_string()))?;
    let post = PostParams::default();
    let what = format!("creating Secret {}", signing::SEALING_MARK_SECRET);
    let created = match call::call(Kind::Create, backoff, &what, || {
        secrets.create(&post, &mark)
    })
    .await
    .map_err(failed)?
    {
        Outcome::Done(created) => created,
        _ => {
            let what = format!("reading Secret {}", signing::SEALING_MARK_SECRET);
            match call::call(Kind::Write, backoff, &what, || {
                secrets.get(signing::SEALING_MARK_SECRET)
            })
            .await
            .map_err(failed)?
            {
                Outcome::Done(read) => read,
                _ => return Ok(None),
            }
        }
    };
    Ok(created.metadata.creation_timestamp.map(|t| t.0))
}

async fn load_key(home: &Client, backoff: Backoff) -> Result<Signer, StartError> {
    let secrets: Api<Secret> = Api::namespaced(home.clone(), crate::clusters::SECRETS_NAMESPACE);
    let failed = |e: kube::Error| StartError::SigningKey(e.to_string());
    let read = |secret: Secret| -> Option<Signer> {
        let key = secret.data.as_ref()?.get(signing::KEY_FIELD)?.0.clone();
        let since = secret.metadata.creation_timestamp.map(|t| t.0);
        (key.len() >= 32).then(|| Signer::new(&key, since))
    };
    loop {
        let what = format!("reading Secret {}", signing::KEY_SECRET);
        if let Outcome::Done(secret) = call::call(Kind::Write, backoff, &what, || {
            secrets.get(signing::KEY_SECRET)
        })
        .await
        .map_err(failed)?
        {
            return read(secret).ok_or_else(|| {
                StartError::SigningKey(format!("key {} is missing or short", signing::KEY_FIELD))
            });
        }
        let key = signing::new_key()
            .map_err(|_| StartError::SigningKey("no random key material".into()))?;
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": signing::KEY_SECRET, "labels": {crate::builders::MANAGED_BY_LABEL: crate::builders::MANAGER}},
            "data": {signing::KEY_FIELD: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key)},
        }))
        .map_err(|e| StartError::SigningKey(e.to_string()))?;
        let post = PostParams::default();
        let what = format!("creating Secret {}", signing::KEY_SECRET);
        // Another controller made it meanwhile (409): read theirs.
        if let Outcome::Done(created) = call::call(Kind::Create, backoff, &what, || {
            secrets.create(&post, &secret)
        })
        .await
        .map_err(failed)?
        {
            return read(created).ok_or_else(|| {
                StartError::SigningKey("the created key does not read back".into())
            });
        }
    }
}

/// A client for the cluster a kubeconfig (or the environment) points at.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<Client, StartError> {
    Ok(Client::try_from(kube_config(kubeconfig, context).await?)?)
}

/// The client configuration for the cluster a kubeconfig (or the
/// environment) points at.
pub async fn kube_config(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<kube::Config, StartError> {
    Ok(match kubeconfig {
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
    })
}

/// A running controller. Keep it as long as the controller should run:
/// dropping it stops the home ClusterActor and with it the pod informer.
pub struct Controller {
    pub shared: Arc<Shared>,
    pub manager: Addr<JobManager>,
    pub home: Addr<ClusterActor>,
    pub members: Addr<MemberSupervisor>,
}

impl Controller {
    pub fn metrics(&self) -> Arc<Metrics> {
        self.shared.metrics.clone()
    }

    pub fn readiness(&self) -> Readiness {
        self.shared.readiness.clone()
    }
}

/// Starts the controller's actors on the current actix System, with a
/// client for the home cluster (`home`) whose requests are counted; for a
/// controller without leader election (it leads at once).
pub async fn start(home: kube::Config, config: ControllerConfig) -> Result<Controller, StartError> {
    let readiness = Readiness::default();
    readiness.mark(Synced::Leading);
    start_with(home, config, Arc::new(Metrics::new()?), readiness).await
}

/// As [`start`], with metrics and readiness made earlier (to serve them
/// while waiting for leadership).
pub async fn start_with(
    home: kube::Config,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    readiness: Readiness,
) -> Result<Controller, StartError> {
    config.check()?;
    let home = telemetry::instrumented_client(home, &config.home_cluster_name, metrics.clone())?;
    let signer = Arc::new(load_signer(&home, Backoff::from(config.retry_interval())).await?);
    let reporter = Reporter {
        controller: config.event_reporter.clone(),
        instance: std::env::var("HOSTNAME").ok(),
    };
    let recorder = Recorder::new(home.clone(), reporter);
    let (cluster, handle) =
        ClusterActor::new(config.home_cluster_name.clone(), home, metrics.clone());
    let home_actor = cluster.start();
    let (synced, pods) = (readiness.clone(), handle.clone());
    tokio::spawn(async move {
        pods.wait_synced().await;
        // (wait_synced also returns when the informer is gone.)
        if pods.is_synced() {
            synced.mark(Synced::HomePods);
        }
    });
    let shared = Arc::new(Shared {
        config,
        home: handle,
        recorder,
        metrics,
        readiness,
        lost_clusters: tokio::sync::watch::Sender::new(Default::default()),
        signer,
    });
    let members = MemberSupervisor::new(shared.clone()).start();
    let manager = JobManager::new(shared.clone(), members.clone()).start();
    Ok(Controller {
        shared,
        manager,
        home: home_actor,
        members,
    })
}
