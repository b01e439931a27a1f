//! Watch streams: newline-delimited JSON events over a chunked response, with
//! the resourceVersion semantics, bookmarks, selector transitions, streaming
//! lists and in-stream 410 errors that kube-rs and kubectl rely on.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::SinkExt;
use futures::channel::mpsc;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Cluster;
use super::error::{ApiError, ApiResult};
use super::http::{Body, Query, Representation};
use super::server::{DEFAULT_WATCH_TIMEOUT, ResourceRequest, selector_filter};
use super::store::{Event, EventKind, Stored, WatchFrom, WatchStart, served};
use super::table;

/// How often an idle watch with `allowWatchBookmarks` gets a BOOKMARK.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

type Sender = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;

struct Stream {
    cluster: Arc<Cluster>,
    rr: ResourceRequest,
    repr: Representation,
    filter: Box<dyn Fn(&Stored) -> bool + Send>,
    tx: Sender,
}

pub fn serve(
    cluster: Arc<Cluster>,
    rr: ResourceRequest,
    query: &Query,
    repr: Representation,
) -> ApiResult<Response<Body>> {
    let filter = selector_filter(&rr.ty, query)?;
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = query
        .number("timeoutSeconds")?
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64))
        .unwrap_or(DEFAULT_WATCH_TIMEOUT);
    let send_initial = query
        .get("sendInitialEvents")
        .map(|_| query.flag("sendInitialEvents"));
    if send_initial.is_some() && query.get("resourceVersionMatch") != Some("NotOlderThan") {
        return Err(ApiError::new(
            422,
            "Invalid",
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let from = match (send_initial, query.get("resourceVersion")) {
        (Some(true), _) | (_, None | Some("0")) => WatchFrom::Current,
        (_, Some(rv)) => WatchFrom::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
    };
    let start = cluster.store.watch(&rr.ty, rr.namespace.as_deref(), from);
    let (tx, rx) = mpsc::channel(256);
    let mut stream = Stream {
        cluster,
        rr,
        repr,
        filter: Box::new(filter),
        tx,
    };
    // A watch on the direct port stays past faults.
    let direct = crate::faults::is_direct();
    tokio::spawn(crate::faults::DIRECT.scope(direct, async move {
        match start {
            Ok(start) => {
                stream
                    .run(start, send_initial == Some(true), bookmarks, timeout)
                    .await
            }
            // Upstream answers a too-old resourceVersion inside a started stream.
            Err(e) => {
                let _ = stream
                    .send_raw("ERROR", &Bytes::from(e.to_status().to_string()))
                    .await;
            }
        }
    }));
    let body = StreamBody::new(rx).boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

impl Stream {
    async fn run(
        &mut self,
        start: WatchStart,
        initial_events_end: bool,
        bookmarks: bool,
        timeout: Duration,
    ) {
        let WatchStart {
            initial,
            replay,
            mut events,
            rv,
        } = start;
        let mut last_rv = rv;
        for obj in initial {
            if (self.filter)(&obj) && self.send_object("ADDED", &obj).await.is_err() {
                return;
            }
        }
        if initial_events_end && self.send_bookmark(rv, true).await.is_err() {
            return;
        }
        for event in replay {
            if self.send_event(&event).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        let mut dropped = self.cluster.drop_watches.subscribe();
        let mut shutdown = self.cluster.shutdown.clone();
        loop {
            tokio::select! {
                received = events.recv() => match received {
                    Ok(event) => {
                        last_rv = last_rv.max(event.rv);
                        if self.send_event(&event).await.is_err() {
                            return;
                        }
                    }
                    // A watcher that fell behind the broadcast is closed, as
                    // upstream closes slow watchers; the client resumes or relists.
                    Err(RecvError::Lagged(_) | RecvError::Closed) => return,
                },
                _ = ticker.tick(), if bookmarks => {
                    if self.send_bookmark(last_rv, false).await.is_err() {
                        return;
                    }
                }
                _ = &mut deadline => {
                    if bookmarks {
                        let _ = self.send_bookmark(last_rv, false).await;
                    }
                    return;
                }
                _ = dropped.changed() => return,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Sends one store event as this watch sees it through its selectors.
    async fn send_event(&mut self, event: &Event) -> Result<(), ()> {
        if *event.type_id != *self.rr.ty.storage_id() {
            return Ok(());
        }
        let in_scope = |o: &Stored| {
            self.rr
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == o.namespace)
        };
        let now = in_scope(&event.object) && (self.filter)(&event.object);
        let before = event
            .prev
            .as_ref()
            .is_some_and(|p| in_scope(p) && (self.filter)(p));
        match (event.kind, before, now) {
            (EventKind::Added, _, true) => self.send_object("ADDED", &event.object).await,
            (EventKind::Modified, true, true) => self.send_object("MODIFIED", &event.object).await,
            (EventKind::Modified, false, true) => self.send_object("ADDED", &event.object).await,
            (EventKind::Modified, true, false) => {
                // Leaving the selection: DELETED with the old state at the new version.
                let Some(prev) = &event.prev else {
                    return Ok(());
                };
                let mut old = self.rr.ty.served_form(prev.value());
                old["metadata"]["resourceVersion"] = json!(event.rv.to_string());
                let bytes = Bytes::from(old.to_string());
                self.send_raw("DELETED", &self.convert(bytes, &old)).await
            }
            (EventKind::Deleted, _, true) => self.send_object("DELETED", &event.object).await,
            _ => Ok(()),
        }
    }

    /// Sends a stored object as this watch's type serves it.
    async fn send_object(&mut self, kind: &str, obj: &Arc<Stored>) -> Result<(), ()> {
        let obj = served(&self.rr.ty, obj.clone());
        let bytes = match self.repr {
            Representation::Full => obj.json.clone(),
            _ => self.convert(obj.json.clone(), &obj.value()),
        };
        self.send_raw(kind, &bytes).await
    }

    fn convert(&self, full: Bytes, value: &Value) -> Bytes {
        match self.repr {
            Representation::Full => full,
            Representation::Metadata => Bytes::from(
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": value.get("metadata")}).to_string(),
            ),
            Representation::Table => {
                let rv = value.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
                Bytes::from(table::render(&self.rr.ty, &self.rr.version, std::slice::from_ref(value), rv, None).to_string())
            }
        }
    }

    async fn send_bookmark(&mut self, rv: u64, initial_events_end: bool) -> Result<(), ()> {
        let (api_version, kind) = match self.repr {
            Representation::Full => (
                self.rr.ty.api_version(&self.rr.version),
                self.rr.ty.kind.clone(),
            ),
            Representation::Metadata => (
                "meta.k8s.io/v1".to_string(),
                "PartialObjectMetadata".to_string(),
            ),
            Representation::Table => ("meta.k8s.io/v1".to_string(), "Table".to_string()),
        };
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata});
        self.send_raw("BOOKMARK", &Bytes::from(obj.to_string()))
            .await
    }

    async fn send_raw(&mut self, kind: &str, object: &Bytes) -> Result<(), ()> {
        self.cluster.faults.wait_reachable().await;
        let mut line = BytesMut::with_capacity(object.len() + 32);
        line.put_slice(b"{\"type\":\"");
        line.put_slice(kind.as_bytes());
        line.put_slice(b"\",\"object\":");
        line.put_slice(object);
        line.put_slice(b"}\n");
        self.tx
            .send(Ok(Frame::data(line.freeze())))
            .await
            .map_err(|_| ())
    }
}
