//! Leader election (`run --leader-elect`): replicas of the controller agree
//! through a `coordination.k8s.io/v1` Lease on home which one runs the
//! actors; the others wait, not ready, and take over when the leader stops
//! renewing. A leader that cannot renew in time stops (the process exits and
//! is restarted), so two leaders never act at once; on a clean shutdown it
//! releases the Lease so a standby takes over at once. Decisions: `decide`.

mod decide;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;

pub use decide::{
    Observed, Step, renew_deadline, renew_interval, retry_after_failure, retry_interval, step,
};

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
}

/// Leading: the Lease is renewed in the background until released or lost.
pub struct Leadership {
    api: Api<Lease>,
    settings: Settings,
    leading: watch::Receiver<bool>,
    renewal: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// Resolves when this replica no longer leads.
    pub async fn lost(&mut self) {
        let _ = self.leading.wait_for(|leading| !leading).await;
    }

    /// Stops renewing and hands the Lease back, so a standby need not wait
    /// for it to expire.
    pub async fn release(self) {
        self.renewal.abort();
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await
            && holder(&lease) == Some(self.settings.identity.as_str())
        {
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
            }
            let released = self
                .api
                .replace(&self.settings.name, &PostParams::default(), &lease)
                .await;
            if let Err(e) = released {
                tracing::warn!(error = %e, "releasing the leader Lease failed; it expires instead");
            }
        }
    }
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

/// When this replica first saw the Lease at its current resourceVersion.
struct Seen {
    version: Option<String>,
    since: Instant,
}

/// Waits until this replica leads, then keeps the Lease renewed.
pub async fn lead(client: Client, settings: Settings) -> Leadership {
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    let mut seen: Option<Seen> = None;
    let mut followed: Option<String> = None;
    loop {
        let wait = match attempt(&api, &settings, &mut seen).await {
            Ok(None) => break,
            Ok(Some((holder, recheck))) => {
                if followed.as_ref() != Some(&holder) {
                    tracing::info!(leader = %holder, "another replica leads; standing by");
                    followed = Some(holder);
                }
                recheck
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading or taking the leader Lease failed; retrying");
                retry_interval(settings.lease_duration)
            }
        };
        tokio::time::sleep(wait).await;
    }
    tracing::info!(identity = %settings.identity, lease = %settings.name, "leading");
    let (tell, leading) = watch::channel(true);
    let renewal = tokio::spawn(keep(api.clone(), settings.clone(), tell));
    Leadership {
        api,
        settings,
        leading,
        renewal,
    }
}

/// One look at the Lease: Ok(None) when this replica now leads, else who
/// does and when to look again.
async fn attempt(
    api: &Api<Lease>,
    settings: &Settings,
    seen: &mut Option<Seen>,
) -> kube::Result<Option<(String, Duration)>> {
    let current = api.get_opt(&settings.name).await?;
    let version = current.as_ref().and_then(|l| l.resource_version());
    if seen.as_ref().is_none_or(|s| s.version != version) {
        *seen = Some(Seen {
            version,
            since: Instant::now(),
        });
    }
    let observed = current.as_ref().map(|lease| Observed {
        holder: holder(lease),
        unchanged_for: seen.as_ref().map_or(Duration::ZERO, |s| s.since.elapsed()),
    });
    match step(
        observed.as_ref(),
        &settings.identity,
        settings.lease_duration,
    ) {
        Step::Follow { holder, recheck } => Ok(Some((holder, recheck))),
        Step::Take | Step::Renew => match write(api, settings, current).await {
            Ok(_) => Ok(None),
            // Another replica wrote first: look again soon.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some((
                String::from("another replica"),
                retry_interval(settings.lease_duration),
            ))),
            Err(e) => Err(e),
        },
    }
}

/// Writes the Lease as held by this replica now (creating it if missing);
/// the resourceVersion makes a concurrent write fail with 409.
async fn write(
    api: &Api<Lease>,
    settings: &Settings,
    current: Option<Lease>,
) -> kube::Result<Lease> {
    let now = MicroTime(jiff::Timestamp::now());
    let me = settings.identity.clone();
    let seconds = i32::try_from(settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
    match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(settings.name.clone()),
                    namespace: Some(settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await
        }
        Some(mut lease) => {
            let taking = holder(&lease) != Some(me.as_str());
            let spec = lease.spec.get_or_insert_with(Default::default);
            if taking {
                spec.acquire_time = Some(now.clone());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(me);
            spec.lease_duration_seconds = Some(seconds);
            spec.renew_time = Some(now);
            api.replace(&settings.name, &PostParams::default(), &lease)
                .await
        }
    }
}

/// Renews the Lease until it is taken by another replica or cannot be
/// renewed within the renew deadline; then says so through `tell`.
///
/// A renewal is one request: the Lease as this replica last wrote it, sent
/// back with its resourceVersion. Only a conflict (someone else wrote it, or
/// an earlier renewal landed although its answer was lost) costs a read.
/// Half the requests per try means a burst of errors is far less likely to
/// use up the renew deadline.
async fn keep(api: Api<Lease>, settings: Settings, tell: watch::Sender<bool>) {
    let mut renewed = Instant::now();
    let mut wait = renew_interval(settings.lease_duration);
    let mut written: Option<Lease> = None;
    loop {
        tokio::time::sleep(wait).await;
        let renewal = async {
            let current = match written.clone() {
                Some(lease) => Some(lease),
                None => api.get_opt(&settings.name).await?,
            };
            if let Some(lease) = &current
                && holder(lease) != Some(settings.identity.as_str())
            {
                return Ok(Err(holder(lease).map(str::to_string)));
            }
            write(&api, &settings, current).await.map(Ok)
        };
        // A request that hangs (a partition) must not keep this loop from
        // its deadline.
        let outcome = tokio::time::timeout(renew_interval(settings.lease_duration), renewal).await;
        wait = match outcome {
            Ok(Ok(Ok(lease))) => {
                written = Some(lease);
                renewed = Instant::now();
                renew_interval(settings.lease_duration)
            }
            Ok(Ok(Err(other))) => {
                tracing::error!(holder = ?other, "the leader Lease was taken over");
                let _ = tell.send(false);
                return;
            }
            // Someone wrote the Lease since: read it before the next try.
            Ok(Err(kube::Error::Api(e))) if e.code == 409 => {
                written = None;
                Duration::ZERO
            }
            // A burst of errors must not cost the Lease: try again soon,
            // until the deadline.
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "renewing the leader Lease failed; retrying");
                retry_after_failure(settings.lease_duration)
            }
            Err(_) => {
                tracing::warn!("renewing the leader Lease got no answer in time; retrying");
                retry_after_failure(settings.lease_duration)
            }
        };
        if renewed.elapsed() >= renew_deadline(settings.lease_duration) {
            tracing::error!("the leader Lease could not be renewed in time");
            let _ = tell.send(false);
            return;
        }
    }
}
