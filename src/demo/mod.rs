//! `tfjob-federator demo`: simulated clusters, the controller and example
//! jobs in one process, with live progress and a summary
//! (docs/src/design/command-line.md). `progress` and `manifest` hold the logic, pure;
//! `session` wires the simulator and the controller together over HTTP,
//! as the command line is the one place allowed to start both.

pub mod manifest;
pub mod progress;
mod session;

use std::path::PathBuf;
use std::time::Duration;

pub use session::run;

use crate::controller::StartError;
use crate::join::JoinError;

/// What `demo` was asked to do.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Simulated clusters: `home`, then `member-1`, `member-2`, ….
    pub clusters: usize,
    /// Job manifests to submit; the built-in examples when empty.
    pub files: Vec<PathBuf>,
    /// Stay up after the summary until a signal.
    pub keep: bool,
    /// Where the kubeconfigs go (kept); a temporary directory, removed at
    /// the end, when `None`.
    pub kubeconfig_dir: Option<PathBuf>,
    /// How long a job may take from submission to settling.
    pub job_timeout: Duration,
    /// Where the controller serves /metrics, /healthz and /readyz.
    pub metrics_addr: std::net::SocketAddr,
}

/// A signal that ends the demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }
}

/// How a demo ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The summary was printed; `passed` when every job reached the phase
    /// its manifest expects. With `--keep`, a signal afterwards ends the
    /// demo with this outcome too: it is how `--keep` is meant to end.
    Finished { passed: bool },
    /// A signal came before the summary.
    Interrupted(Signal),
}

impl Ended {
    /// 0 passed, 1 a job missed its phase, 128 + the signal's number when
    /// interrupted before the summary (130 SIGINT, 143 SIGTERM).
    pub fn exit_code(self) -> i32 {
        match self {
            Ended::Finished { passed: true } => 0,
            Ended::Finished { passed: false } => 1,
            Ended::Interrupted(Signal::Interrupt) => 130,
            Ended::Interrupted(Signal::Terminate) => 143,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("--clusters must be at least 1")]
    NoClusters,
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("installing the signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("starting simulated cluster {name}: {message}")]
    Cluster { name: String, message: String },
    #[error("writing the kubeconfigs to {dir}: {source}")]
    Kubeconfigs { dir: String, source: std::io::Error },
    #[error("registering the member clusters: {0}")]
    Join(#[from] JoinError),
    #[error("serving metrics on {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("connecting to the home cluster: {0}")]
    Connect(#[from] StartError),
    #[error("the member clusters are not Ready after {seconds}s: {detail}")]
    MembersNotReady { seconds: u64, detail: String },
    #[error("creating namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        source: kube::Error,
    },
    #[error("the watch of the jobs on home ended")]
    WatchEnded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_outcome_and_the_signal() {
        assert_eq!(Ended::Finished { passed: true }.exit_code(), 0);
        assert_eq!(Ended::Finished { passed: false }.exit_code(), 1);
        assert_eq!(Ended::Interrupted(Signal::Interrupt).exit_code(), 130);
        assert_eq!(Ended::Interrupted(Signal::Terminate).exit_code(), 143);
    }
}
