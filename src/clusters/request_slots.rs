//! At most [`REQUEST_SLOTS`] requests in flight per client, watches aside.
//! Without a bound, a backlog (thousands of jobs found at start) sent every
//! job's admission patch, status write and Event at once: kube's HTTP/1.1
//! client opened a connection per request in flight (3,810 sockets in the
//! benchmark's drain), each with its buffers, and kept them pooled after.
//! With it, requests past the bound wait in kube's own request buffer, and
//! the connections to a cluster stay about as many as the slots.
//!
//! A tower layer under the metrics layer, so a request's measured duration
//! is the API server's, not the wait for a slot. The slot is taken when
//! kube's buffer asks whether the stack is ready (before the request is
//! known) and handed back at once for a watch, which holds its connection
//! for as long as it runs; any other request keeps it until its response
//! headers arrive (its body, a few kilobytes but for lists, follows at once).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::Request;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;
use tower::{Layer, Service};

/// Requests in flight to one cluster at once (watches aside): twice the
/// create slots, so that status writes, reads and deletes find room while
/// creates fill theirs.
pub const REQUEST_SLOTS: usize = 2 * super::pods::CREATE_SLOTS;

/// Bounds the requests in flight of the client it is built into.
#[derive(Clone)]
pub struct RequestSlotsLayer {
    slots: Arc<Semaphore>,
}

impl RequestSlotsLayer {
    pub fn new(slots: usize) -> RequestSlotsLayer {
        RequestSlotsLayer {
            slots: Arc::new(Semaphore::new(slots)),
        }
    }
}

impl<S> Layer<S> for RequestSlotsLayer {
    type Service = RequestSlots<S>;

    fn layer(&self, inner: S) -> RequestSlots<S> {
        RequestSlots {
            inner,
            slots: PollSemaphore::new(self.slots.clone()),
            slot: None,
        }
    }
}

pub struct RequestSlots<S> {
    inner: S,
    slots: PollSemaphore,
    /// Taken by `poll_ready`, used by the next `call`.
    slot: Option<OwnedSemaphorePermit>,
}

impl<S: Clone> Clone for RequestSlots<S> {
    fn clone(&self) -> Self {
        RequestSlots {
            inner: self.inner.clone(),
            slots: self.slots.clone(),
            slot: None,
        }
    }
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B> Service<Request<B>> for RequestSlots<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.slot.is_none() {
            // `None`: the semaphore closed, which it never is; the request
            // then goes unbounded rather than never.
            self.slot = ready!(self.slots.poll_acquire(cx));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let slot = self.slot.take();
        let watch =
            crate::telemetry::client::request_info(request.method(), request.uri()).0 == "watch";
        let slot = if watch { None } else { slot };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(slot);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tower::ServiceExt;

    /// A service that answers after `delay`, counting the calls in flight.
    #[derive(Clone)]
    struct Slow {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        delay: Duration,
    }

    impl Service<Request<()>> for Slow {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _request: Request<()>) -> Self::Future {
            let (in_flight, most, delay) = (self.in_flight.clone(), self.most.clone(), self.delay);
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    fn slow(delay: Duration) -> Slow {
        Slow {
            in_flight: Arc::default(),
            most: Arc::default(),
            delay,
        }
    }

    fn request(uri: &str) -> Request<()> {
        Request::get(uri).body(()).expect("a request")
    }

    #[tokio::test]
    async fn requests_past_the_slots_wait_and_all_are_answered() {
        let inner = slow(Duration::from_millis(20));
        let layer = RequestSlotsLayer::new(3);
        let calls = (0..20).map(|i| {
            let service = layer.layer(inner.clone());
            service.oneshot(request(&format!("/api/v1/namespaces/ns/pods/p{i}")))
        });
        let answers = futures::future::join_all(calls).await;
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(inner.most.load(Ordering::SeqCst), 3);
        assert_eq!(inner.in_flight.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_watch_holds_no_slot_while_it_runs() {
        let inner = slow(Duration::from_secs(3600));
        let layer = RequestSlotsLayer::new(1);
        let watches: Vec<_> = (0..3)
            .map(|_| {
                let service = layer.layer(inner.clone());
                tokio::spawn(service.oneshot(request("/api/v1/pods?watch=true")))
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            inner.in_flight.load(Ordering::SeqCst),
            3,
            "every watch runs"
        );
        let get = slow(Duration::from_millis(1));
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            layer
                .layer(get)
                .oneshot(request("/api/v1/namespaces/ns/pods/p")),
        )
        .await;
        assert!(matches!(answer, Ok(Ok(()))), "a get still finds the slot");
        for watch in watches {
            watch.abort();
        }
    }
}
