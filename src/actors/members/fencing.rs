//! The controller's side of a member's fence (`crate::fence`): after each
//! good probe the supervisor renews the controller's Lease on the member,
//! stamped with the time that probe was sent (so a renewal never looks
//! newer than the good probe the lost timeout counts from), hands the
//! member's fence its key (once per connection), and reads the fence's own
//! Lease for the member's `Fenced` condition. One round per probe: no work
//! per job.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::builders::{MANAGED_BY_LABEL, MANAGER as MANAGED_BY};
use crate::fence::{
    CONTROLLER_LEASE, FENCE_AFTER_ANNOTATION, FENCE_LEASE, FenceLease, KEY_FIELD, KEY_SECRET,
    NAMESPACE, POD_GRACE_ANNOTATION,
};

/// One call slower than this counts as failed (as a probe's).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The field manager of what the controller applies on members.
const MANAGER: &str = "tfjob-federator";

/// What one round found.
pub struct Round {
    /// Whether the controller's Lease was renewed, or why not.
    pub renewed: Result<(), String>,
    /// Whether the fence key was written this round (when it was due).
    pub key_written: bool,
    /// The fence's Lease (`None`: there is none), or why it cannot be read.
    pub fence: Result<Option<FenceLease>, String>,
    /// A call of this round got no answer (the member is cut off or slow
    /// now): it says nothing of the fence, only of the connection, which
    /// the Ready condition shows.
    pub unanswered: bool,
}

/// What the controller stamps its Lease with.
pub struct Stamp {
    pub renew_time: jiff::Timestamp,
    pub fence_after_ms: u64,
    pub pod_grace_ms: u64,
}

async fn timed<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(crate::telemetry::shown(&e)),
        Err(_) => Err(format!("no answer within {}s", CALL_TIMEOUT.as_secs())),
    }
}

/// Renews the controller's Lease, writes the fence key when `key` is
/// given, and reads the fence's Lease.
pub async fn round(client: &Client, stamp: &Stamp, key: Option<&[u8]>) -> Round {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let apply = PatchParams::apply(MANAGER).force();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": CONTROLLER_LEASE,
            "namespace": NAMESPACE,
            "annotations": {
                FENCE_AFTER_ANNOTATION: stamp.fence_after_ms.to_string(),
                POD_GRACE_ANNOTATION: stamp.pod_grace_ms.to_string(),
            },
        },
        "spec": {
            "holderIdentity": MANAGER,
            "renewTime": MicroTime(stamp.renew_time),
            "leaseDurationSeconds": i32::try_from(stamp.fence_after_ms.div_ceil(1000)).unwrap_or(i32::MAX),
        },
    });
    let renew = || async {
        match tokio::time::timeout(
            CALL_TIMEOUT,
            leases.patch(CONTROLLER_LEASE, &apply, &Patch::Apply(&lease)),
        )
        .await
        {
            Ok(answer) => answer.map(|_| ()),
            Err(_) => Err(kube::Error::Service(
                format!("no answer within {}s", CALL_TIMEOUT.as_secs()).into(),
            )),
        }
    };
    let mut renewed = renew().await;
    // A member without the controller's namespace (one registered without
    // deploy/member-rbac.yaml's Namespace): made, as a job's namespace is.
    if let Err(kube::Error::Api(status)) = &renewed
        && status.code == 404
    {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(NAMESPACE.to_string()),
                labels: Some([(MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let made = timed(namespaces.create(&PostParams::default(), &namespace)).await;
        if let Err(e) = made {
            tracing::debug!(error = %e, "making namespace {NAMESPACE} on a member failed");
        }
        renewed = renew().await;
    }
    let mut unanswered = matches!(&renewed, Err(e) if !matches!(e, kube::Error::Api(_)));
    let renewed = renewed.map_err(|e| {
        format!(
            "applying Lease {NAMESPACE}/{CONTROLLER_LEASE}: {}",
            crate::telemetry::shown(&e)
        )
    });
    let mut key_written = false;
    if let Some(key) = key {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": KEY_SECRET, "namespace": NAMESPACE},
            "type": "Opaque",
            "data": {KEY_FIELD: STANDARD.encode(key)},
        });
        match timed(secrets.patch(KEY_SECRET, &apply, &Patch::Apply(&secret))).await {
            Ok(_) => key_written = true,
            Err(e) => {
                tracing::warn!(error = %e, "writing the fence key Secret {NAMESPACE}/{KEY_SECRET} on a member failed; tried again at the next probe")
            }
        }
    }
    let read = tokio::time::timeout(CALL_TIMEOUT, leases.get_opt(FENCE_LEASE)).await;
    unanswered |= !matches!(&read, Ok(Ok(_)) | Ok(Err(kube::Error::Api(_))));
    let read = match read {
        Ok(answer) => answer.map_err(|e| crate::telemetry::shown(&e)),
        Err(_) => Err(format!("no answer within {}s", CALL_TIMEOUT.as_secs())),
    };
    let fence = read.map(|lease| {
        lease.map(|lease| {
            let spec = lease.spec.unwrap_or_default();
            FenceLease {
                holder: spec.holder_identity,
                renew_time: spec.renew_time.map(|t| t.0),
                duration: spec
                    .lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map(Duration::from_secs),
            }
        })
    });
    Round {
        renewed,
        key_written,
        fence,
        unanswered,
    }
}
