//! Observability: logging through `tracing` (`RUST_LOG` filters,
//! `--log-format` picks text or JSON), the Prometheus metrics, the
//! instrumented Kubernetes clients that feed the API metrics, readiness,
//! and the HTTP server for `/metrics`, `/healthz` and `/readyz`.

pub mod client;
pub mod metrics;
pub mod readiness;
pub mod server;

pub use client::{instrumented_client, shown, shown_watch};
pub use metrics::{ActorKind, Metrics, PlacementOutcome};
pub use readiness::{Readiness, Synced};
pub use server::{MetricsServer, serve};

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber; `default_level` (e.g. `info`) unless
/// `RUST_LOG` says otherwise.
pub fn init(format: LogFormat, default_level: &str) {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // kube-client logs an error answer's whole body at debug level; a
    // member's server may answer anything (see `shown`), so its debug lines
    // stay out unless asked for by name.
    let named = std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube_client"));
    if !named && let Ok(quiet) = "kube_client::client=info".parse() {
        filter = filter.add_directive(quiet);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (as in tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
