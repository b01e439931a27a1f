//! The HTTP server for operators and Prometheus: `/metrics` (text format),
//! `/healthz` (the process is alive and serving), `/readyz` (the home
//! informers have synced; 503 with what is awaited otherwise).
//!
//! actix-web runs its accept loop and its one worker on threads of their
//! own, so a busy controller does not delay a scrape; the future that
//! coordinates them is spawned on whatever tokio runtime the caller runs
//! (the controller's actix System, or a plain multi-thread runtime).

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpResponse, HttpServer, web};

use super::{Metrics, Readiness};

/// Prometheus's text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running server; it stops with the process, or with [`MetricsServer::stop`].
pub struct MetricsServer {
    addr: SocketAddr,
    handle: ServerHandle,
}

impl MetricsServer {
    /// The address it listens on (the real port when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for open requests (at most a second).
    pub async fn stop(&self) {
        self.handle.stop(true).await;
    }
}

struct State {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// Binds `addr` and serves in the background; must be called inside a
/// tokio runtime.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    readiness: Readiness,
) -> std::io::Result<MetricsServer> {
    let state = web::Data::new(State { metrics, readiness });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .route("/metrics", web::get().to(scrape))
            .route("/healthz", web::get().to(healthz))
            .route("/readyz", web::get().to(readyz))
    })
    .workers(1)
    // The process handles SIGINT/SIGTERM itself and stops everything.
    .disable_signals()
    .shutdown_timeout(1)
    .bind(addr)?;
    let bound = server
        .addrs()
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other(format!("{addr}: nothing was bound")))?;
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "the metrics server stopped");
        }
    });
    Ok(MetricsServer {
        addr: bound,
        handle,
    })
}

async fn scrape(state: web::Data<State>) -> HttpResponse {
    match state.metrics.encode() {
        Ok(text) => HttpResponse::Ok().content_type(TEXT_FORMAT).body(text),
        Err(e) => HttpResponse::InternalServerError().body(format!("encoding metrics: {e}\n")),
    }
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

async fn readyz(state: web::Data<State>) -> HttpResponse {
    match state.readiness.check() {
        Ok(()) => HttpResponse::Ok().content_type("text/plain").body("ok\n"),
        Err(waiting) => HttpResponse::build(StatusCode::SERVICE_UNAVAILABLE)
            .content_type("text/plain")
            .body(format!("not ready: {waiting}\n")),
    }
}
