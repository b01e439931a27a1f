//! Kubernetes clients that count their requests: a tower layer on kube's
//! own stack records each request by cluster, verb and status code, and the
//! time until its response headers arrive (for a watch: until the stream
//! opens). It wraps the whole stack, so one call is one request however
//! kube retries inside.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Method, Request, Response, Uri};
use kube::client::ClientBuilder;
use tower::{Layer, Service};

use super::Metrics;

/// The User-Agent of every request the controller makes.
pub const USER_AGENT: &str = concat!("tfjob-federator/", env!("CARGO_PKG_VERSION"));

/// What of an API call's error may be shown in a status or a log line: the
/// one place that decides (the rule is `crate::shown_error`'s: a
/// Kubernetes `Status` by its code, reason and bounded message; an answer
/// that is not one by its HTTP code and size, never its body). Errors
/// without an answer (no connection, a timeout, TLS) carry no body and are
/// shown as kube words them.
pub fn shown(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => crate::shown_error::shown_status(status),
        other => other.to_string(),
    }
}

/// [`shown`] for a watch's errors.
pub fn shown_watch(error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match error {
        Error::InitialListFailed(e) => format!("listing failed: {}", shown(e)),
        Error::WatchStartFailed(e) => format!("starting the watch failed: {}", shown(e)),
        Error::WatchError(status) => format!(
            "the API server ended the watch: {}",
            crate::shown_error::shown_status(status)
        ),
        Error::WatchFailed(e) => format!("the watch failed: {}", shown(e)),
        Error::NoResourceVersion => error.to_string(),
    }
}

/// A client for `config` whose requests are counted under `cluster`, at
/// most `REQUEST_SLOTS` of them in flight (`clusters::RequestSlotsLayer`).
pub fn instrumented_client(
    config: kube::Config,
    cluster: &str,
    metrics: Arc<Metrics>,
) -> Result<kube::Client, kube::Error> {
    let layer = ApiMetricsLayer {
        cluster: cluster.into(),
        metrics,
    };
    let mut config = config;
    // API servers log it (audit, `managedFields` of updates): it names us.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    let slots = crate::clusters::RequestSlotsLayer::new(crate::clusters::REQUEST_SLOTS);
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&slots)
        .with_layer(&layer)
        .build())
}

/// Records every request of the service it wraps.
#[derive(Clone)]
pub struct ApiMetricsLayer {
    cluster: Arc<str>,
    metrics: Arc<Metrics>,
}

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetrics<S>;

    fn layer(&self, inner: S) -> ApiMetrics<S> {
        ApiMetrics {
            inner,
            cluster: self.cluster.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

#[derive(Clone)]
pub struct ApiMetrics<S> {
    inner: S,
    cluster: Arc<str>,
    metrics: Arc<Metrics>,
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B, R> Service<Request<B>> for ApiMetrics<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = request_info(request.method(), request.uri());
        let (cluster, metrics) = (self.cluster.clone(), self.metrics.clone());
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => "error".to_string(),
            };
            metrics.api_request(&cluster, verb, resource, &code, started.elapsed());
            result
        })
    }
}

/// Subresources of a namespace object (`/api/v1/namespaces/{name}/status`)
/// that are not namespaced resources.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// The resources the controller reads and writes, as the metric's
/// `resource` label names them; anything else is `other` (a bounded label).
const RESOURCES: [&str; 15] = [
    "pods",
    "services",
    "events",
    "tensorflowtrainingjobs",
    "tensorflowtrainingjobs/status",
    "memberclusters",
    "memberclusters/status",
    "tensorboards",
    "podgroups",
    "serviceexports",
    "leases",
    "secrets",
    "nodes",
    "namespaces",
    "customresourcedefinitions",
];

/// A request as the API server's request info names it: the verb (get,
/// list, watch, create, update, patch, delete, deletecollection;
/// non-resource paths such as discovery and `/version` are `get`) and the
/// resource (with its subresource, one of [`RESOURCES`], else `other`).
pub fn request_info(method: &Method, uri: &Uri) -> (&'static str, &'static str) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let mut rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let mut watch = uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    });
    // The legacy `/api/v1/watch/…` form.
    if let ["watch", after @ ..] = rest {
        watch = true;
        rest = after;
    }
    if let ["namespaces", _namespace, next, ..] = rest
        && !NAMESPACE_SUBRESOURCES.contains(next)
    {
        rest = &rest[2..];
    }
    let (plural, subresource) = match rest {
        [] => ("", None),
        [plural] | [plural, _] => (*plural, None),
        [plural, _, subresource, ..] => (*plural, Some(*subresource)),
    };
    let resource = RESOURCES
        .into_iter()
        .find(|known| match known.split_once('/') {
            Some((p, s)) => p == plural && Some(s) == subresource,
            None => *known == plural && subresource.is_none(),
        })
        .unwrap_or("other");
    let named = rest.len() >= 2;
    let verb = match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named || rest.is_empty() => "delete",
        Method::DELETE => "deletecollection",
        _ if watch => "watch",
        _ if rest.len() == 1 => "list",
        _ => "get",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> &'static str {
        request_info(&method, &uri.parse().expect("a uri")).0
    }

    fn resource_of(method: Method, uri: &str) -> &'static str {
        request_info(&method, &uri.parse().expect("a uri")).1
    }

    #[test]
    fn an_answer_that_is_not_a_status_is_shown_by_code_and_size_in_every_wrapping() {
        let page = "<html>stray-body</html>";
        // What kube-client makes of such an answer (`handle_api_errors`).
        let api = || {
            kube::Error::Api(
                kube::core::Status::failure(page, crate::shown_error::NOT_A_STATUS_REASON)
                    .with_code(404)
                    .boxed(),
            )
        };
        use kube::runtime::watcher::Error as Watch;
        let shown = [
            shown(&api()),
            shown_watch(&Watch::InitialListFailed(api())),
            shown_watch(&Watch::WatchStartFailed(api())),
            shown_watch(&Watch::WatchFailed(api())),
        ];
        for text in shown {
            assert!(!text.contains("stray-body"), "{text}");
            assert!(
                text.contains("HTTP 404") && text.contains("23 bytes"),
                "{text}"
            );
        }
    }

    #[test]
    fn resources_are_named_with_their_subresource_and_bounded() {
        let cases = [
            (Method::POST, "/api/v1/namespaces/default/pods", "pods"),
            (
                Method::DELETE,
                "/api/v1/namespaces/d/services/s",
                "services",
            ),
            (Method::GET, "/api/v1/watch/namespaces/d/pods", "pods"),
            (
                Method::PATCH,
                "/apis/batch.tensorstack.dev/v1beta1/namespaces/d/tensorflowtrainingjobs/j/status",
                "tensorflowtrainingjobs/status",
            ),
            (
                Method::PATCH,
                "/apis/batch.tensorstack.dev/v1beta1/namespaces/d/tensorflowtrainingjobs/j",
                "tensorflowtrainingjobs",
            ),
            (
                Method::POST,
                "/apis/events.k8s.io/v1/namespaces/d/events",
                "events",
            ),
            (Method::GET, "/api/v1/namespaces/default", "namespaces"),
            (
                Method::GET,
                "/api/v1/namespaces/default/status",
                "namespaces/status",
            ),
            (Method::GET, "/api/v1/pods/p/log", "other"),
            (Method::GET, "/api/v1/configmaps", "other"),
            (Method::GET, "/version", "other"),
            (Method::GET, "/apis", "other"),
        ];
        for (method, uri, resource) in cases {
            let found = resource_of(method, uri);
            let expected = if RESOURCES.contains(&resource) {
                resource
            } else {
                "other"
            };
            assert_eq!(found, expected, "{uri}");
        }
    }

    #[test]
    fn reads_are_get_list_or_watch() {
        assert_eq!(of(Method::GET, "/api/v1/namespaces/default/pods/p"), "get");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/default/pods"), "list");
        assert_eq!(
            of(Method::GET, "/api/v1/pods?labelSelector=a%3Db&limit=500"),
            "list"
        );
        assert_eq!(
            of(Method::GET, "/api/v1/pods?watch=true&resourceVersion=5"),
            "watch"
        );
        assert_eq!(
            of(Method::GET, "/api/v1/watch/namespaces/default/pods"),
            "watch"
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/batch.tensorstack.dev/v1beta1/tensorflowtrainingjobs?watch=1"
            ),
            "watch"
        );
        assert_eq!(
            of(
                Method::GET,
                "/apis/batch.tensorstack.dev/v1beta1/namespaces/ns/tensorflowtrainingjobs/j/status"
            ),
            "get"
        );
        assert_eq!(of(Method::GET, "/api/v1/pods?watch=false"), "list");
    }

    #[test]
    fn namespaces_themselves_are_objects_too() {
        assert_eq!(of(Method::GET, "/api/v1/namespaces"), "list");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/default"), "get");
        assert_eq!(of(Method::GET, "/api/v1/namespaces/default/status"), "get");
        assert_eq!(of(Method::PATCH, "/api/v1/namespaces/default"), "patch");
        assert_eq!(of(Method::DELETE, "/api/v1/namespaces/default"), "delete");
    }

    #[test]
    fn writes_map_by_method() {
        assert_eq!(
            of(Method::POST, "/api/v1/namespaces/default/pods"),
            "create"
        );
        assert_eq!(
            of(Method::PUT, "/api/v1/namespaces/default/pods/p"),
            "update"
        );
        assert_eq!(
            of(
                Method::PATCH,
                "/apis/federation.tfjob.io/v1alpha1/memberclusters/m/status"
            ),
            "patch"
        );
        assert_eq!(
            of(Method::DELETE, "/api/v1/namespaces/default/pods/p"),
            "delete"
        );
        assert_eq!(
            of(
                Method::DELETE,
                "/api/v1/namespaces/default/pods?labelSelector=x"
            ),
            "deletecollection"
        );
    }

    #[test]
    fn non_resource_paths_are_get() {
        assert_eq!(of(Method::GET, "/version"), "get");
        assert_eq!(of(Method::GET, "/apis"), "get");
        assert_eq!(
            of(Method::GET, "/apis/batch.tensorstack.dev/v1beta1"),
            "get"
        );
        assert_eq!(of(Method::GET, "/api/v1"), "get");
    }
}
