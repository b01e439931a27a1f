//! Readiness: the controller is ready once it leads (with leader election;
//! a standby replica is not ready) and its home informers have listed the
//! home cluster once — before that it would act on an empty view. Each
//! requirement latches: a later watch failure is retried by the informer and
//! does not make the process unready.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What must have happened before the controller is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// The home ClusterActor's informer of managed pods listed once.
    HomePods,
    /// The JobManager's watch of TensorFlowTrainingJobs listed once.
    Jobs,
    /// This replica leads (at once without leader election).
    Leading,
}

impl Synced {
    const ALL: [Synced; 3] = [Synced::Leading, Synced::HomePods, Synced::Jobs];

    fn index(self) -> usize {
        match self {
            Synced::HomePods => 0,
            Synced::Jobs => 1,
            Synced::Leading => 2,
        }
    }

    fn waiting_for(self) -> &'static str {
        match self {
            Synced::HomePods => "the first list of managed pods on the home cluster",
            Synced::Jobs => "the first list of TensorFlowTrainingJobs",
            Synced::Leading => "leadership (another replica leads)",
        }
    }
}

/// Shared by the actors that sync and the server that answers `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<[AtomicBool; 3]>);

impl Readiness {
    pub fn mark(&self, synced: Synced) {
        self.0[synced.index()].store(true, Ordering::Release);
    }

    /// Ok when ready; otherwise what is still awaited.
    pub fn check(&self) -> Result<(), String> {
        let missing: Vec<&str> = Synced::ALL
            .into_iter()
            .filter(|s| !self.0[s.index()].load(Ordering::Acquire))
            .map(Synced::waiting_for)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("waiting for {}", missing.join(" and ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_once_everything_synced() {
        let readiness = Readiness::default();
        let shared = readiness.clone();
        let all = readiness.check().expect_err("nothing synced");
        assert!(all.contains("managed pods") && all.contains("TensorFlowTrainingJobs"));
        assert!(all.contains("leadership"), "{all}");
        shared.mark(Synced::Leading);
        shared.mark(Synced::Jobs);
        assert_eq!(
            readiness.check(),
            Err("waiting for the first list of managed pods on the home cluster".into())
        );
        shared.mark(Synced::HomePods);
        assert_eq!(readiness.check(), Ok(()));
    }
}
