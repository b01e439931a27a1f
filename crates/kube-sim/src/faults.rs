//! Fault injection for one simulated cluster, driven through the `/_sim/`
//! admin paths on the cluster's own port: partition, added latency, an error
//! rate, failed or delayed requests of one kind, dropping watch streams, and
//! forced compaction.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::watch;

use super::Cluster;
use super::error::ApiError;
use super::http::{Body, error_response, json_response};

/// The fault settings of a cluster, as `GET /_sim/faults` shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Faults {
    /// Kubernetes requests get no answer until healed; state and pods are kept.
    pub partitioned: bool,
    /// Added to every Kubernetes request.
    pub latency_ms: u64,
    /// Share of Kubernetes requests answered with 500 or 429.
    pub error_rate: f64,
    /// The next requests of one kind to answer with an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_requests: Option<FailRequests>,
    /// The next requests of one kind to hold before they are served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_requests: Option<DelayRequests>,
}

/// Hold the next `count` requests with this verb on this resource (as in
/// [`FailRequests`]) for `delay_ms` each, then serve them: an answer that
/// comes after the answers to later requests, as a slow connection gives.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DelayRequests {
    pub verb: String,
    pub resource: String,
    pub count: u32,
    pub delay_ms: u64,
}

/// Fail the next `count` requests with this verb (`get`, `list`, `watch`,
/// `create`, `update`, `patch`, `delete`) on this resource (plural, e.g.
/// `secrets` or `pods/status`), with HTTP `code` (500 unless given).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailRequests {
    pub verb: String,
    pub resource: String,
    pub count: u32,
    #[serde(default = "internal_error")]
    pub code: u16,
}

fn internal_error() -> u16 {
    500
}

/// A `PUT /_sim/faults` body: fields left out keep their value.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FaultsUpdate {
    partitioned: Option<bool>,
    latency_ms: Option<u64>,
    error_rate: Option<f64>,
    fail_requests: Option<FailRequests>,
    delay_requests: Option<DelayRequests>,
}

/// The count left after a rule for `rule_verb` on `rule_resource` with
/// `count` left takes a request (`verb` on `resource`); None when it does
/// not take it.
fn takes(
    rule_verb: &str,
    rule_resource: &str,
    count: u32,
    verb: &str,
    resource: &str,
) -> Option<u32> {
    (rule_verb == verb && rule_resource == resource && count > 0).then(|| count - 1)
}

tokio::task_local! {
    /// Set for requests on a cluster's direct port: no fault applies there
    /// (it stands for what runs inside the cluster, which a partition
    /// between home and the cluster does not cut off).
    pub static DIRECT: bool;
}

/// Whether the request being served came through the direct port.
pub fn is_direct() -> bool {
    DIRECT.try_with(|direct| *direct).unwrap_or(false)
}

pub struct FaultState {
    tx: watch::Sender<Faults>,
}

impl Default for FaultState {
    fn default() -> Self {
        FaultState {
            tx: watch::channel(Faults::default()).0,
        }
    }
}

impl FaultState {
    pub fn current(&self) -> Faults {
        self.tx.borrow().clone()
    }

    /// Waits while the cluster is partitioned.
    pub async fn wait_reachable(&self) {
        if is_direct() {
            return;
        }
        let mut rx = self.tx.subscribe();
        // The sender lives as long as the cluster, so this only ends when healed.
        let _ = rx.wait_for(|f| !f.partitioned).await;
    }

    /// Applies partition, latency and the error rate to one request.
    pub async fn before_request(&self) -> Result<(), ApiError> {
        if is_direct() {
            return Ok(());
        }
        self.wait_reachable().await;
        let faults = self.current();
        if faults.latency_ms > 0 {
            tokio::time::sleep(Duration::from_millis(faults.latency_ms)).await;
        }
        if faults.error_rate > 0.0 && fastrand::f64() < faults.error_rate {
            return Err(if fastrand::bool() {
                ApiError::internal("injected fault: internal error")
            } else {
                ApiError::new(
                    429,
                    "TooManyRequests",
                    "injected fault: too many requests, please try again later",
                )
            });
        }
        Ok(())
    }

    /// A failure the faults hold for this kind of request, counted down.
    pub fn targeted(&self, verb: &str, resource: &str) -> Option<ApiError> {
        self.count_down(|f| {
            let rule = f.fail_requests.as_mut()?;
            rule.count = takes(&rule.verb, &rule.resource, rule.count, verb, resource)?;
            let reason = if rule.code == 429 {
                "TooManyRequests"
            } else {
                "InternalError"
            };
            Some(ApiError::new(
                rule.code,
                reason,
                format!("injected fault: {verb} {resource} fails"),
            ))
        })
    }

    /// How long the faults hold this kind of request, counted down.
    pub fn delay(&self, verb: &str, resource: &str) -> Option<Duration> {
        self.count_down(|f| {
            let rule = f.delay_requests.as_mut()?;
            rule.count = takes(&rule.verb, &rule.resource, rule.count, verb, resource)?;
            Some(Duration::from_millis(rule.delay_ms))
        })
    }

    /// What `rule` gives, the faults changed only when it gives something.
    fn count_down<T>(&self, rule: impl FnOnce(&mut Faults) -> Option<T>) -> Option<T> {
        let mut given = None;
        self.tx.send_if_modified(|f| {
            given = rule(f);
            given.is_some()
        });
        given
    }

    fn update(&self, update: FaultsUpdate) -> Result<Faults, ApiError> {
        if update.error_rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
            return Err(ApiError::bad_request("errorRate must be between 0 and 1"));
        }
        self.tx.send_modify(|f| {
            f.partitioned = update.partitioned.unwrap_or(f.partitioned);
            f.latency_ms = update.latency_ms.unwrap_or(f.latency_ms);
            f.error_rate = update.error_rate.unwrap_or(f.error_rate);
            if update.fail_requests.is_some() {
                f.fail_requests = update.fail_requests.clone();
            }
            if update.delay_requests.is_some() {
                f.delay_requests = update.delay_requests.clone();
            }
        });
        Ok(self.current())
    }
}

/// Serves `/_sim/<path>`.
pub async fn admin(cluster: &Cluster, path: &str, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    match (method, path) {
        (Method::GET, "faults") => json_response(StatusCode::OK, &json!(cluster.faults.current())),
        (Method::PUT, "faults") => {
            let body = match req.into_body().collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return error_response(&ApiError::bad_request(e.to_string())),
            };
            let update = match serde_json::from_slice::<FaultsUpdate>(&body) {
                Ok(u) => u,
                Err(e) => {
                    return error_response(&ApiError::bad_request(format!("invalid faults: {e}")));
                }
            };
            match cluster.faults.update(update) {
                Ok(faults) => {
                    tracing::info!(cluster = %cluster.name, ?faults, "faults changed");
                    json_response(StatusCode::OK, &json!(faults))
                }
                Err(e) => error_response(&e),
            }
        }
        (Method::GET, "requests") => {
            let accesses: Vec<super::Access> = cluster
                .accesses
                .lock()
                .map(|a| a.iter().cloned().collect())
                .unwrap_or_default();
            json_response(StatusCode::OK, &json!(accesses))
        }
        (Method::POST, "drop-watches") => {
            cluster.drop_watches.send_modify(|n| *n += 1);
            json_response(StatusCode::OK, &json!({"dropped": true}))
        }
        (Method::POST, "compact") => {
            cluster.store.compact();
            json_response(
                StatusCode::OK,
                &json!({"compactedTo": cluster.store.current_rv().to_string()}),
            )
        }
        _ => error_response(&ApiError::new(
            404,
            "NotFound",
            format!("no admin path /_sim/{path}"),
        )),
    }
}
